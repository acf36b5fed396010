"""
test_metrics.py — GET /metrics of a real `loragate serve` (SmolLM2, TLS):

  - the exposition passes `promtool check metrics` (Debian `prometheus`);
  - requests by route, status and tenant equal what the test sent (also for
    tenants addressed by key only, and 404s of unknown paths in one series);
  - generation histograms count every billed request; token counters equal
    the usage ledger's sums; the prefix cache's hits and cached tokens show
    a repeated prompt; engine gauges (queue, running, pool pages by kind);
    adapter and ledger series (commit latency histogram, backlog) are there;
  - tenant labels are bounded: a slug nobody created never becomes a label
    value, and `--metrics-tenant-labels off` drops the label everywhere.
"""
import os

import pytest

from metering_util import metric, metric_sum, need_admin_api, parse_metrics, promtool, promtool_check, tenant_id
from serve_fixture import LORAGATE, SMOLLM2, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

MODEL = "smollm2"
SYSTEM = ("You are a helpful assistant for a bakery. " * 12).strip()


def scrape(s):
    with s.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return r.text


def check_promtool(text):
    if not promtool():
        pytest.skip("promtool not installed (Debian package prometheus; tests/install-test-deps.sh installs it)")
    rc, out = promtool_check(text)
    assert rc == 0, out


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    s = Serve(tmp_path_factory.mktemp("metrics"), SMOLLM2, "--served-model-name", MODEL)
    try:
        need_admin_api(s)
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta")}
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def test_metrics_count_requests_tokens_and_pass_promtool(srv):
    acme = srv.openai(srv.keys["acme"], tenant="acme")
    beta = srv.openai(srv.keys["beta"])  # plain /v1: the tenant comes from the key
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a bread."}]
    for _ in range(3):
        acme.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    list(acme.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0, stream=True,
                                      stream_options={"include_usage": True}))
    beta.completions.create(model=MODEL, prompt="Bread is", max_tokens=4, temperature=0)
    with srv.client(srv.keys["acme"]) as c:
        assert c.get("/t/acme/v1/models").status_code == 200
        assert c.get("/no/such/path").status_code == 404
        assert c.get("/t/nosuchtenant/v1/models").status_code == 401  # as a key of another tenant
    with srv.client("lg-wrong") as c:
        assert c.get("/v1/models").status_code == 401

    text = scrape(srv)
    check_promtool(text)
    m, types = parse_metrics(text)

    assert metric(m, "loragate_http_requests_total", route="chat.completions", status="200", tenant="acme") == 4
    assert metric(m, "loragate_http_requests_total", route="completions", status="200", tenant="beta") == 1
    assert metric(m, "loragate_http_requests_total", route="models", status="200", tenant="acme") == 1
    assert metric(m, "loragate_http_requests_total", route="models", status="401", tenant="") == 2
    # unknown paths share one series; an unknown tenant slug is no label value
    assert metric(m, "loragate_http_requests_total", route="unmatched", status="404", tenant="") == 1
    assert metric_sum(m, "loragate_http_requests_total", tenant="nosuchtenant") == 0
    assert not [ls for (n, ls) in m if n == "loragate_http_requests_total" and ("tenant", "nosuchtenant") in ls]

    # histograms: every billed generation once
    for h in ("ttft", "tpot", "e2e"):
        assert types[f"loragate_generation_{h}_seconds"] == "histogram"
    assert metric(m, "loragate_generation_e2e_seconds_count") == 5
    assert metric(m, "loragate_generation_ttft_seconds_count") == 5
    assert metric(m, "loragate_generation_e2e_seconds_bucket", le="+Inf") == 5
    assert 0 < metric(m, "loragate_generation_ttft_seconds_sum") <= metric(m, "loragate_generation_e2e_seconds_sum")

    # token counters equal the ledger
    for tenant in ("acme", "beta"):
        rows = srv.ledger("tenant_id = ?", (tenant_id(srv, tenant),))
        assert metric(m, "loragate_generations_total", tenant=tenant) == len(rows)
        assert metric(m, "loragate_prompt_tokens_total", tenant=tenant) == sum(r["prompt_tokens"] for r in rows)
        assert metric(m, "loragate_cached_prompt_tokens_total", tenant=tenant) == sum(r["cached_tokens"] for r in rows)
        assert metric(m, "loragate_completion_tokens_total", tenant=tenant) == \
            sum(r["completion_tokens"] for r in rows)
    # the repeated system prompt came from the prefix cache
    assert metric(m, "loragate_cached_prompt_tokens_total", tenant="acme") > 0
    assert metric(m, "loragate_prefix_cache_hits_total") >= 3
    assert metric(m, "loragate_prefix_cache_lookups_total") >= 5
    assert 0 < metric(m, "loragate_prefix_cache_hit_ratio") <= 1
    assert metric(m, "loragate_prefix_cache_cached_tokens_total") > 0

    # engine and pool
    assert metric(m, "loragate_engine_queue_depth") == 0
    assert metric(m, "loragate_engine_running_sequences") == 0
    kinds = {dict(ls)["kind"] for (n, ls) in m if n == "loragate_pool_pages"}
    assert kinds == {"kv", "adapter", "cached", "free"}
    assert metric(m, "loragate_pool_pages_capacity") >= metric(m, "loragate_pool_pages", kind="free") > 0
    assert types["loragate_adapter_load_seconds"] == "summary"
    assert metric(m, "loragate_adapter_loads_total") is not None

    # the ledger: every record committed, latency histogram consistent
    assert metric(m, "loragate_ledger_healthy") == 1
    assert metric(m, "loragate_ledger_backlog_records") == 0
    assert metric(m, "loragate_ledger_records_written_total") >= 5
    n = metric(m, "loragate_ledger_commit_seconds_count")
    assert n >= 1 and metric(m, "loragate_ledger_commit_seconds_bucket", le="+Inf") == n
    assert metric(m, "loragate_ledger_commit_seconds_bucket", le="2.5") <= n

    # GET /metrics counts itself from the next scrape on
    m2, _ = parse_metrics(scrape(srv))
    assert metric(m2, "loragate_http_requests_total", route="metrics", status="200", tenant="") >= 1


def test_tenant_labels_off(tmp_path):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded")
    s = Serve(tmp_path, SMOLLM2, "--served-model-name", MODEL, "--metrics-tenant-labels", "off")
    try:
        need_admin_api(s)
        s.tenant("acme")
        c = s.openai(s.key("acme"), tenant="acme")
        c.completions.create(model=MODEL, prompt="Bread is", max_tokens=3, temperature=0)
        text = scrape(s)
        check_promtool(text)
        assert "tenant=" not in text
        m, _ = parse_metrics(text)
        assert metric(m, "loragate_http_requests_total", route="completions", status="200") == 1
        assert metric(m, "loragate_generations_total") == 1
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]
