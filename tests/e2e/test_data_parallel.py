"""
test_data_parallel.py — `loragate serve --data-parallel-size 2`: two CPU
engines behind one gateway, one store and one usage ledger
(engine/runtime/dp_router.h), over real TLS on loopback, driven by the
official `openai` SDK.

Outside references:
  - the tiny fixture model with PEFT adapters (tests/golden/lora_fixtures),
    two of them uploaded through POST /v1/adapters: greedy completions on
    the base model and on each adapter reproduce HF/peft's greedy tokens and
    first-token log-probability, streamed and not, with requests placed on
    both engines (a long stream holds one engine while the next namespace
    goes to the other: /metrics shows both engines routed to);
  - promtool parses /metrics (tests/e2e/metering_util.promtool_check); the
    server-wide series are the sums of the per-engine ones (engine="0",
    engine="1"): queue, running, pool pages and capacity, adapter loads; the
    Gateway API Inference Extension's gauges equal loragate's own sums
    (kv_cache_usage_perc over both engines' pages);
  - the usage ledger (SQLite, read directly) holds every request exactly once
    (one row per x-request-id, as many rows as requests), with the tokens
    the responses reported;
  - SmolLM2-135M-Instruct (the default model) with two synthetic adapters
    uploaded: chat and completions on the base model and both adapters,
    streamed output equal to the non-streamed one token for token.
Also: `--tensor-parallel-size 2` with `--data-parallel-size 2` (two engines
of two CPU ranks each) serves the HF/peft tokens; bad values of either flag
exit 2 with one line.
"""
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest

from lora_reference import REF, check_greedy, ref_case
from metering_util import metric, metric_sum, parse_metrics, promtool, promtool_check
from serve_fixture import LORA_FIX, LORAGATE, SMOLLM2, TINY, Serve
from synth_adapter import smollm2_adapter

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

ADAPTERS = ["r8_rslora_attn", "r16_all_linear"]


def upload(s, tenant, name, cfg, w):
    files = {"config": ("adapter_config.json", cfg, "application/json"),
             "weights": ("adapter_model.safetensors", w, "application/octet-stream")}
    with s.client(s.keys[tenant]) as c:
        r = c.post("/v1/adapters", data={"name": name}, files=files)
    assert r.status_code in (200, 201), r.text


def fixture_files(name):
    d = os.path.join(LORA_FIX, REF["adapters"][name]["dir"])
    with open(os.path.join(d, "adapter_config.json"), "rb") as f:
        cfg = f.read()
    with open(os.path.join(d, "adapter_model.safetensors"), "rb") as f:
        return cfg, f.read()


def scrape(s):
    with s.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    return r.text


def wait_ledger(s, n, timeout=15):
    deadline = time.monotonic() + timeout
    rows = s.ledger()
    while len(rows) < n and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = s.ledger()
    return rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("dp-tiny"), TINY, "--max-lora-rank", "16", "--data-parallel-size", "2",
              "--pool-mb", "64")
    try:
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta")}
        for a in ADAPTERS:
            upload(s, "acme", a, *fixture_files(a))
        s.n_requests = 0  # requests that reached the engines (each must be one ledger row)
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def test_both_engines_serve_hf_peft_tokens(tiny):
    """A long stream holds one engine; the requests that follow, of other
    namespaces, go to the other one: every answer is HF/peft's."""
    acme = tiny.openai(tiny.keys["acme"], tenant="acme")
    beta = tiny.openai(tiny.keys["beta"], tenant="beta")
    long_case = ref_case(None, 2)
    stream = acme.completions.create(model="base", prompt=long_case["ids"], max_tokens=200, temperature=0,
                                     stream=True)
    it = iter(stream)
    first = next(it)  # admitted and decoding: its engine has one request, the other none
    assert first.choices[0].text is not None
    tiny.n_requests += 1
    results, errors = [], []

    def run(client, adapter, prompt, streamed):
        try:
            c = ref_case(adapter, prompt)
            kw = dict(model=adapter or "base", prompt=c["ids"], max_tokens=REF["n_greedy"], temperature=0,
                      logprobs=2)
            if streamed:
                chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
                toks, lps = [], []
                for ch in chunks:
                    if ch.choices and ch.choices[0].logprobs:
                        toks += [int(t.split(":")[1]) for t in ch.choices[0].logprobs.tokens]
                        lps += ch.choices[0].logprobs.token_logprobs
                usage = chunks[-1].usage
            else:
                r = client.completions.create(**kw)
                toks = [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
                lps = r.choices[0].logprobs.token_logprobs
                usage = r.usage
            results.append((adapter, prompt, streamed, toks, lps[0], usage.prompt_tokens, usage.completion_tokens))
        except Exception as e:  # reported below, with the others
            errors.append(repr(e))

    jobs = [(beta, None, 1, False), (acme, ADAPTERS[0], 1, False), (acme, ADAPTERS[1], 1, True),
            (beta, None, 0, True), (acme, ADAPTERS[0], 2, True), (acme, ADAPTERS[1], 0, False)]
    threads = [threading.Thread(target=run, args=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == len(jobs)
    tiny.n_requests += len(jobs)
    for adapter, prompt, streamed, toks, lp0, pt, ct in results:
        c = ref_case(adapter, prompt)
        check_greedy(toks, lp0, c)
        assert pt == len(c["ids"]) and ct == len(toks)
    stream.close()  # the long one leaves: cancelled, billed (499)
    m, _ = parse_metrics(scrape(tiny))
    routed = [metric(m, "loragate_dp_routed_requests_total", engine=str(k)) for k in (0, 1)]
    assert all(r and r > 0 for r in routed), routed
    assert metric(m, "loragate_dp_engines") == 2


def test_metrics_sum_the_engines_and_pass_promtool(tiny):
    # wait until both engines are idle (the stream above was cancelled)
    deadline = time.monotonic() + 30
    while True:
        text = scrape(tiny)
        m, types = parse_metrics(text)
        if metric(m, "vllm:num_requests_running") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for k in ("0", "1"):
        for name in ("loragate_dp_queue_depth", "loragate_dp_running_sequences", "loragate_dp_pool_pages_capacity",
                     "loragate_dp_kv_cache_usage_perc", "loragate_dp_adapters_resident",
                     "loragate_dp_adapter_loads_total", "loragate_dp_steps_total"):
            assert metric(m, name, engine=k) is not None, (name, k)
    assert types["loragate_dp_queue_depth"] == "gauge" and types["loragate_dp_adapter_loads_total"] == "counter"
    # the server-wide series are the per-engine ones summed (one snapshot of each engine)
    assert metric(m, "loragate_engine_queue_depth") == metric_sum(m, "loragate_dp_queue_depth")
    assert metric(m, "loragate_engine_running_sequences") == metric_sum(m, "loragate_dp_running_sequences")
    cap = metric(m, "loragate_pool_pages_capacity")
    assert cap == metric_sum(m, "loragate_dp_pool_pages_capacity") > 0
    for kind in ("kv", "adapter", "cached", "free"):
        assert metric(m, "loragate_pool_pages", kind=kind) == metric_sum(m, "loragate_dp_pool_pages", kind=kind)
    assert metric(m, "loragate_adapter_loads_total") == metric_sum(m, "loragate_dp_adapter_loads_total") >= 2
    # the Gateway API Inference Extension's view: the replica as a whole
    assert metric(m, "vllm:num_requests_waiting") == metric(m, "loragate_engine_queue_depth")
    assert metric(m, "vllm:num_requests_running") == metric(m, "loragate_engine_running_sequences")
    free = metric(m, "loragate_pool_pages", kind="free") + metric(m, "loragate_pool_pages", kind="cached")
    assert abs(metric(m, "vllm:kv_cache_usage_perc") - (cap - free) / cap) < 1e-12
    assert metric(m, "vllm:cache_config_info", block_size="16", num_gpu_blocks=str(int(cap))) == 1
    info = [dict(ls) for (n, ls), _ in m.items() if n == "vllm:lora_requests_info"]
    assert len(info) == 1 and info[0]["max_lora"] == "128"  # 64 sequences a step on each engine
    if promtool():
        rc, out = promtool_check(text)
        assert rc == 0, out


def test_ledger_counts_every_request_once(tiny):
    rows = wait_ledger(tiny, tiny.n_requests)
    assert len(rows) == tiny.n_requests, [(r["route"], r["http_status"]) for r in rows]
    assert len({r["request_id"] for r in rows}) == len(rows)
    # the long stream left after its first chunk: 499, or 200 if it had finished already (the tiny model is fast)
    assert sorted(r["http_status"] for r in rows)[:-1] == [200] * (tiny.n_requests - 1)
    assert rows[0]["http_status"] in (200, 499) and rows[0]["prompt_tokens"] == len(ref_case(None, 2)["ids"])
    ok = [r for r in rows[1:] if r["http_status"] == 200]
    want = sorted((len(ref_case(a, p)["ids"]), a or "") for a, p in
                  [(None, 1), (ADAPTERS[0], 1), (ADAPTERS[1], 1), (None, 0), (ADAPTERS[0], 2), (ADAPTERS[1], 0)])
    assert sorted((r["prompt_tokens"], r["adapter_name"] or "") for r in ok) == want


# ---- the default model: chat and completions, two uploaded adapters ----

@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    s = Serve(tmp_path_factory.mktemp("dp-smol"), SMOLLM2, "--served-model-name", "smollm2", "--max-lora-rank", "8",
              "--data-parallel-size", "2", "--pool-mb", "256")
    try:
        s.tenant("acme")
        s.keys = {"acme": s.key("acme")}
        for name, seed in (("summarize", 1), ("sql", 2)):
            upload(s, "acme", name, *smollm2_adapter(seed))
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


@pytest.mark.parametrize("model", ["smollm2", "summarize", "sql"])
def test_chat_and_completions_stream_equals_non_stream(smol, model):
    c = smol.openai(smol.keys["acme"], tenant="acme")
    before = len(smol.ledger())
    msgs = [{"role": "user", "content": "Name three breads."}]
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    assert r.object == "chat.completion" and text
    chunks = list(c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == text
    u = chunks[-1].usage
    assert (u.prompt_tokens, u.completion_tokens) == (r.usage.prompt_tokens, r.usage.completion_tokens)
    p = c.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert p.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if ch.choices)
    assert streamed == p.choices[0].text
    rows = wait_ledger(smol, before + 4)
    assert len(rows) == before + 4
    assert all(r["http_status"] == 200 for r in rows[before:])
    assert {r["model"] for r in rows[before:]} == {model}


def test_adapters_change_the_output(smol):
    """The adapters are really applied, whichever engine serves them."""
    c = smol.openai(smol.keys["acme"], tenant="acme")
    outs = {m: c.completions.create(model=m, prompt="Once upon a time", max_tokens=10, temperature=0).choices[0].text
            for m in ("smollm2", "summarize", "sql")}
    assert len(set(outs.values())) == 3, outs
    m, _ = parse_metrics(scrape(smol))
    assert metric(m, "loragate_dp_engines") == 2


# ---- --tensor-parallel-size, bad values ----

def test_data_and_tensor_parallel_together(tmp_path):
    """Two engines of two CPU ranks each: both engines serve the HF/peft tokens."""
    s = Serve(tmp_path, TINY, "--tensor-parallel-size", "2", "--data-parallel-size", "2", "--pool-mb", "64")
    try:
        for t in ("acme", "beta", "gamma", "delta"):  # four namespaces: the router spreads them over the engines
            s.tenant(t)
            c = s.openai(s.key(t), tenant=t)
            case = ref_case(None, 1)
            r = c.completions.create(model="base", prompt=case["ids"], max_tokens=REF["n_greedy"], temperature=0,
                                     logprobs=2)
            check_greedy([int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens],
                         r.choices[0].logprobs.token_logprobs[0], case)
        m, _ = parse_metrics(scrape(s))
        assert metric(m, "loragate_dp_engines") == 2
        for k in ("0", "1"):
            assert metric_sum(m, "loragate_dp_requests_finished_total", engine=k) >= 1, k
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


@pytest.mark.parametrize("flag,value", [("--data-parallel-size", "0"), ("--data-parallel-size", "65"),
                                        ("--tensor-parallel-size", "0"), ("--tensor-parallel-size", "x")])
def test_bad_values_are_refused_in_one_line(tmp_path, flag, value):
    p = subprocess.run([LORAGATE, "serve", "--model", TINY, "--data-dir", str(tmp_path / "d"), flag, value],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and flag.lstrip("-") in lines[0], p.stderr
