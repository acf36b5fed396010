"""
test_limits.py — per-tenant limits (PUT /admin/v1/tenants/{t}/limits) of a
real `loragate serve` (SmolLM2, TLS, two event-loop threads), driven with
httpx and the official openai SDK:

  - requests per minute: exactly N of a concurrent burst from N+k separate
    connections get through (the limit holds across loop threads); the rest
    get 429 type "requests", code "rate_limit_exceeded", Retry-After, and
    OpenAI's x-ratelimit-limit/remaining/reset headers;
  - tokens per minute: the estimate (prompt + max_tokens) is charged, the
    unused part given back; a request larger than the limit is refused;
  - concurrent requests: held streams block further requests until they end;
  - monthly token budget: 429 insufficient_quota, and the count survives a
    restart (seeded from the ledger once at start);
  - a tenant without limits gets no x-ratelimit headers; the SDK sees
    RateLimitError with the code; /metrics counts the 429s by reason.
"""
import os
import threading
import time

import httpx
import pytest

from metering_util import metric, need_admin_api, parse_metrics, set_limits
from serve_fixture import LORAGATE, SMOLLM2, Serve

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

MODEL = "smollm2"
MSG = [{"role": "user", "content": "Hello"}]


def chat(client, tenant, max_tokens=2, **kw):
    return client.post(f"/t/{tenant}/v1/chat/completions",
                       json={"model": MODEL, "messages": MSG, "max_tokens": max_tokens, "temperature": 0, **kw})


def start(tmp):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    return Serve(tmp, SMOLLM2, "--served-model-name", MODEL)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start(tmp_path_factory.mktemp("limits"))
    try:
        need_admin_api(s)
        s.keys = {}
        for t in ("free", "rpm", "tpm", "conc"):
            s.tenant(t)
            s.keys[t] = s.key(t)
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def test_no_limits_no_headers(srv):
    with srv.client(srv.keys["free"]) as c:
        r = chat(c, "free")
    assert r.status_code == 200, r.text
    assert not [h for h in r.headers if h.startswith("x-ratelimit-")]


def test_requests_per_minute_hold_across_threads(srv):
    set_limits(srv, "rpm", requests_per_minute=5)
    results = [None] * 12
    barrier = threading.Barrier(len(results))

    def one(i):
        # a connection of its own: the kernel spreads them over both loop threads
        with srv.client(srv.keys["rpm"], http2=bool(i % 2)) as c:
            barrier.wait(30)
            results[i] = chat(c, "rpm", max_tokens=1)

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - t0
    assert elapsed < 11, "the burst took too long to be exact (the bucket refills one request every 12 s)"
    ok = [r for r in results if r.status_code == 200]
    limited = [r for r in results if r.status_code == 429]
    assert len(ok) == 5 and len(limited) == 7, [r.status_code for r in results]
    for r in limited:
        err = r.json()["error"]
        assert err["type"] == "requests" and err["code"] == "rate_limit_exceeded", err
        assert "requests per min" in err["message"]
        ra = int(r.headers["retry-after"])
        assert 1 <= ra <= 12
        assert 0 < int(r.headers["retry-after-ms"]) <= 12000
        assert r.headers["x-ratelimit-limit-requests"] == "5"
        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    remaining = sorted(int(r.headers["x-ratelimit-remaining-requests"]) for r in ok)
    assert remaining == [0, 1, 2, 3, 4]
    for r in ok:
        assert r.headers["x-ratelimit-limit-requests"] == "5"
        assert "x-ratelimit-limit-tokens" not in r.headers  # no TPM limit set

    # the SDK maps it to RateLimitError and keeps the code
    sdk = srv.openai(srv.keys["rpm"], tenant="rpm")
    with pytest.raises(openai.RateLimitError) as ei:
        sdk.chat.completions.create(model=MODEL, messages=MSG, max_tokens=1)
    assert ei.value.code == "rate_limit_exceeded"

    with srv.client() as c:
        samples, _ = parse_metrics(c.get("/metrics").text)
    assert metric(samples, "loragate_rate_limited_total", reason="rpm", tenant="rpm") == 8
    assert metric(samples, "loragate_http_requests_total", route="chat.completions", status="429", tenant="rpm") == 8
    set_limits(srv, "rpm", requests_per_minute=None)
    with srv.client(srv.keys["rpm"]) as c:
        assert chat(c, "rpm").status_code == 200  # null: unlimited again, at once


def test_tokens_per_minute(srv):
    set_limits(srv, "tpm", tokens_per_minute=400)
    with srv.client(srv.keys["tpm"]) as c:
        r = chat(c, "tpm", max_tokens=1000)
        assert r.status_code == 429
        err = r.json()["error"]
        assert err["type"] == "tokens" and err["code"] == "rate_limit_exceeded"
        assert "Request too large" in err["message"]
        assert r.headers["x-ratelimit-limit-tokens"] == "400"

        r = chat(c, "tpm", max_tokens=100)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        # the estimate (prompt + max_tokens) was charged at admission
        assert int(r.headers["x-ratelimit-remaining-tokens"]) == 400 - (usage["prompt_tokens"] + 100)
        assert r.headers["x-ratelimit-reset-tokens"].endswith("s")
        # ...and what was not used came back when it finished: the next one
        # sees 400 - actual (plus a little refill), not 400 - estimate
        r2 = chat(c, "tpm", max_tokens=1)
        assert r2.status_code == 200
        rem = int(r2.headers["x-ratelimit-remaining-tokens"])
        used = usage["total_tokens"]
        est2 = r2.json()["usage"]["prompt_tokens"] + 1
        assert 400 - used - est2 <= rem <= 400 - used - est2 + 20
    # a concurrent burst whose estimates (prompt + 150 each) pass the bucket:
    # at most two fit at once, whichever loop thread they land on
    est = usage["prompt_tokens"] + 150
    results = [None] * 4
    barrier = threading.Barrier(len(results))

    def one(i):
        with srv.client(srv.keys["tpm"], http2=bool(i % 2)) as c:
            barrier.wait(30)
            results[i] = chat(c, "tpm", max_tokens=150)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    codes = sorted(r.status_code for r in results)
    assert 1 <= codes.count(200) <= 400 // est and 429 in codes, codes
    for r in results:
        if r.status_code == 429:
            assert r.json()["error"]["type"] == "tokens"
            assert 0 < int(r.headers["retry-after"]) <= 60
    set_limits(srv, "tpm", tokens_per_minute=None)


def test_concurrent_requests(srv):
    set_limits(srv, "conc", concurrent_requests=2)
    held = []
    try:
        for _ in range(2):
            c = srv.client(srv.keys["conc"])
            ctx = c.stream("POST", "/t/conc/v1/chat/completions",
                           json={"model": MODEL, "messages": [{"role": "user", "content": "Tell a long story."}],
                                 "max_tokens": 3000, "temperature": 0, "stream": True})
            resp = ctx.__enter__()
            assert resp.status_code == 200
            lines = resp.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            held.append((c, ctx))
        # two in flight: a third is refused, from any thread or protocol
        for http2 in (False, True):
            with srv.client(srv.keys["conc"], http2=http2) as c:
                r = chat(c, "conc")
            assert r.status_code == 429, r.text
            err = r.json()["error"]
            assert err["code"] == "rate_limit_exceeded" and "concurrent" in err["message"]
            assert r.headers["retry-after"] == "1"
    finally:
        for c, ctx in held:
            ctx.__exit__(None, None, None)
            c.close()
    # the held streams were cancelled (client gone): their slots come back
    deadline = time.monotonic() + 20
    while True:
        with srv.client(srv.keys["conc"]) as c:
            r = chat(c, "conc")
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    set_limits(srv, "conc", concurrent_requests=None)


def test_monthly_budget_survives_restart(tmp_path):
    s = start(tmp_path)
    try:
        need_admin_api(s)
        s.tenant("bud")
        key = s.key("bud")
        with s.client(key) as c:
            r = chat(c, "bud", max_tokens=5)
            assert r.status_code == 200
            used = r.json()["usage"]["total_tokens"]
            prompt = r.json()["usage"]["prompt_tokens"]
            # room for exactly one more request of prompt + 5 tokens
            set_limits(s, "bud", monthly_token_budget=used + prompt + 5)
            assert chat(c, "bud", max_tokens=5).status_code == 200
            r = chat(c, "bud", max_tokens=5)
            assert r.status_code == 429
            err = r.json()["error"]
            assert err["type"] == "insufficient_quota" and err["code"] == "insufficient_quota", err
            ra = int(r.headers["retry-after"])
            assert 1 <= ra <= 31 * 86400  # the start of next month (UTC)
        sdk = s.openai(key, tenant="bud")
        with pytest.raises(openai.RateLimitError) as ei:
            sdk.chat.completions.create(model=MODEL, messages=MSG, max_tokens=5)
        assert ei.value.code == "insufficient_quota"
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]
    # a restart reads the month so far from the ledger: still over budget
    s = Serve(tmp_path, SMOLLM2, "--served-model-name", MODEL)
    try:
        with s.client(key) as c:
            r = chat(c, "bud", max_tokens=5)
            assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
            set_limits(s, "bud", monthly_token_budget=None)
            assert chat(c, "bud", max_tokens=5).status_code == 200
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]
