"""
test_gie_metrics.py — the series the Gateway API Inference Extension's
endpoint picker reads from a model server (its model-server protocol, the
vLLM names), on a real `loragate serve` (SmolLM2, TLS, loopback):

  - vllm:num_requests_waiting, vllm:num_requests_running and
    vllm:kv_cache_usage_perc are gauges equal to the engine's own figures of
    the same scrape (queue depth, running sequences, pool pages pinned over
    the pool's pages);
  - vllm:cache_config_info (optional in the protocol) names the page size
    in tokens and the pool's pages;
  - vllm:lora_requests_info is one gauge series whose labels max_lora,
    running_lora_adapters and waiting_lora_adapters hold the adapters of the
    running and the waiting requests as the requests named them in `model`
    (comma-separated, no tenant id), and whose value is the scrape's Unix
    time; requests on the base model are not listed;
  - the exposition passes `promtool check metrics` (whose linter's one
    finding, ':' in vLLM's names, is expected: metering_util.promtool_check).

Requests are made to wait without timing: the pool holds one full context
(--ctx 1024, --pool-mb 1: 65 pages of 16 tokens); a running request with a
500-token prompt holds 32+ of them (50 at most, so that with three adapters
of 2 pages each it never runs short and yields), so another 500-token prompt
(32 pages, in one chunk) cannot be admitted until the first one ends; the
test then closes the first one's stream.
"""
import os
import threading
import time

import pytest

from metering_util import metric, parse_metrics, promtool, promtool_check
from serve_fixture import LORAGATE, SMOLLM2, Serve
from synth_adapter import write_adapter

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

MODEL = "smollm2"
PROMPT = "word " * 500  # about 500 tokens: 32 pages of 16


def scrape(s):
    with s.client() as c:
        t0 = time.time()
        r = c.get("/metrics")
        t1 = time.time()
    assert r.status_code == 200
    return r.text, t0, t1


def lora_info(m):
    """The labels and value of the one vllm:lora_requests_info series."""
    series = [(dict(ls), v) for (n, ls), v in m.items() if n == "vllm:lora_requests_info"]
    assert len(series) == 1, series
    return series[0]


def names(label):
    """The endpoint picker's reading of a list label: split on ',', trimmed, empties dropped."""
    return [a.strip() for a in label.split(",") if a.strip()]


def check_engine_gauges(m, types):
    for n in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
              "vllm:lora_requests_info"):
        assert types[n] == "gauge", n
    # one engine snapshot: the vLLM names equal loragate's own series
    assert metric(m, "vllm:num_requests_waiting") == metric(m, "loragate_engine_queue_depth")
    assert metric(m, "vllm:num_requests_running") == metric(m, "loragate_engine_running_sequences")
    cap = metric(m, "loragate_pool_pages_capacity")
    free = metric(m, "loragate_pool_pages", kind="free") + metric(m, "loragate_pool_pages", kind="cached")
    usage = metric(m, "vllm:kv_cache_usage_perc")
    assert 0 <= usage <= 1
    assert abs(usage - (cap - free) / cap) < 1e-12
    assert types["vllm:cache_config_info"] == "gauge"
    assert metric(m, "vllm:cache_config_info", block_size="16", num_gpu_blocks=str(int(cap))) == 1


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    tmp = tmp_path_factory.mktemp("gie")
    s = Serve(tmp, SMOLLM2, "--served-model-name", MODEL, "--ctx", "1024", "--pool-mb", "1", "--max-lora-rank", "8")
    try:
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta")}
        for tenant, name, seed in (("acme", "summarize", 1), ("acme", "sql", 2), ("beta", "sql", 3)):
            d = tmp / f"{tenant}-{name}"
            write_adapter(str(d), seed)
            s.import_adapter(tenant, name, str(d))
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def test_idle_series(srv):
    text, t0, t1 = scrape(srv)
    m, types = parse_metrics(text)
    check_engine_gauges(m, types)
    assert metric(m, "vllm:num_requests_waiting") == 0
    assert metric(m, "vllm:num_requests_running") == 0
    labels, value = lora_info(m)
    # max_lora: the most adapters one step serves (each of the 64 sequences its own)
    assert labels == {"max_lora": "64", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert t0 - 1 <= value <= t1 + 1
    if promtool():
        rc, out = promtool_check(text)
        assert rc == 0, out


def complete(srv, tenant, model, results):
    with srv.client(srv.keys[tenant], timeout=300) as c:
        r = c.post(f"/t/{tenant}/v1/completions",
                   json={"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0})
    results.append((tenant, model, r.status_code, r.text))


def test_running_and_waiting_adapters(srv):
    # A: acme's "summarize", streaming, 300 tokens it must generate (50 pages + 2 of its adapter): running
    a = srv.client(srv.keys["acme"], timeout=300)
    results, threads = [], []
    with a.stream("POST", "/t/acme/v1/completions",
                  json={"model": "summarize", "prompt": PROMPT, "max_tokens": 300, "min_tokens": 300,
                        "temperature": 0, "stream": True}) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()  # kept: a dropped iterator closes the response, and A would leave
        for line in lines:
            if line.startswith("data: "):
                assert '"text"' in line, line  # its first token: admitted
                break
        # B: beta's "sql", C: acme's "sql", D: the base model; none fits next to A: waiting
        for tenant, model in (("beta", "sql"), ("acme", "sql"), ("acme", MODEL)):
            t = threading.Thread(target=complete, args=(srv, tenant, model, results))
            t.start()
            threads.append(t)
        deadline = time.monotonic() + 120
        while True:
            text, t0, t1 = scrape(srv)
            m, types = parse_metrics(text)
            if metric(m, "vllm:num_requests_waiting") == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not results, results  # A still runs, so nobody else finished
        check_engine_gauges(m, types)
        assert metric(m, "vllm:num_requests_waiting") == 3, text
        assert metric(m, "vllm:num_requests_running") == 1
        assert metric(m, "vllm:kv_cache_usage_perc") > 0
        labels, value = lora_info(m)
        assert labels["max_lora"] == "64"
        # as the requests named them: beta's and acme's "sql" are one name; the base model is no adapter
        assert labels["running_lora_adapters"] == "summarize"
        assert labels["waiting_lora_adapters"] == "sql"
        assert names(labels["running_lora_adapters"]) == ["summarize"]
        assert t0 - 1 <= value <= t1 + 1
        # no tenant id or engine name in the labels
        assert "/" not in labels["running_lora_adapters"] + labels["waiting_lora_adapters"]
        if promtool():
            rc, out = promtool_check(text)
            assert rc == 0, out
    a.close()  # A's client leaves: it is cancelled and the others run
    for t in threads:
        t.join(300)
    assert sorted((r[0], r[1], r[2]) for r in results) == [("acme", MODEL, 200), ("acme", "sql", 200),
                                                           ("beta", "sql", 200)], results

    deadline = time.monotonic() + 30
    while True:
        m, types = parse_metrics(scrape(srv)[0])
        if metric(m, "vllm:num_requests_running") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check_engine_gauges(m, types)
    assert metric(m, "vllm:num_requests_waiting") == 0 and metric(m, "vllm:num_requests_running") == 0
    labels, _ = lora_info(m)
    assert labels["running_lora_adapters"] == "" and labels["waiting_lora_adapters"] == ""
