"""`loragate serve` against what an outside probe tried (the gateway's own
checks are in test_conn_guard.py): unauthenticated bodies are not read,
tenant names cannot be probed, adapter uploads are admitted per tenant and
against the disk's free space from their head, /metrics can require a key,
and an HTTP/2 rapid-reset burst ends in GOAWAY with nothing billed for
prompts the engine never computed.

Real server over TLS on loopback (serve_fixture.py), raw sockets and the
`h2` package for what no polite client sends, httpx and curl otherwise; the
ledger is read from the server's SQLite file.
"""
import json
import os
import time

import h2.errors
import h2.events
import httpx
import pytest

from serve_fixture import ADMIN_KEY, LORAGATE, SMOLLM2, TINY, Serve
from test_conn_guard import BIG, H2, head, push_until_closed, read_response, tls

pytestmark = pytest.mark.skipif(not os.path.exists(LORAGATE), reason="loragate not built")


def rss_kb(pid, field="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def srv(tmp_path):
    s = Serve(tmp_path, TINY, "--tenant-host-suffix", ".api.test")
    s.tenant("acme")
    s.tenant("beta")
    s.keys = {"acme": s.key("acme"), "beta": s.key("beta")}
    yield s
    assert s.stop() == 0


def test_unauthenticated_400mb_body_is_not_read(srv):
    rss0 = rss_kb(srv.proc.pid)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/adapters", "/t/acme/v1/chat/completions",
                 "/t/nosuch/v1/chat/completions", "/admin/v1/tenants/acme/adapters"):
        s = tls(srv)
        t0 = time.monotonic()
        s.sendall(head("POST", path, {"Content-Type": "application/json", "Content-Length": str(BIG)}))
        st, hdrs, body, _ = read_response(s)
        assert time.monotonic() - t0 < 2, path
        assert st == 401, (path, body)
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        assert push_until_closed(s) < 48 << 20, path
        s.close()
    # nothing buffered on disk or in memory, nothing billed
    tmp = os.path.join(srv.data_dir, "tmp")
    assert sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
               if os.path.isfile(os.path.join(tmp, f))) == 0
    if os.environ.get("LG_SANITIZE") != "1":  # ASan's quarantine keeps freed memory resident
        assert rss_kb(srv.proc.pid) - rss0 < 64 * 1024
    assert srv.ledger() == []


def test_unknown_tenant_answers_like_a_tenant_that_exists(srv):
    with srv.client() as c:
        for key in (None, "lg-" + "Q" * 43, srv.keys["beta"]):
            hh = {"Authorization": f"Bearer {key}"} if key else {}
            seen = set()
            for path, host in (("/t/acme/v1/models", None), ("/t/nosuch/v1/models", None),
                               ("/v1/models", "acme.api.test"), ("/v1/models", "nosuch.api.test")):
                r = c.get(path, headers={**hh, **({"Host": host} if host else {})})
                e = r.json()["error"]
                seen.add((r.status_code, e["message"], e["code"], r.headers.get("www-authenticate")))
            assert len(seen) == 1 and next(iter(seen))[0] == 401, seen


def test_upload_admitted_from_its_head_per_tenant(tmp_path):
    s = Serve(tmp_path, TINY, "--max-uploads-per-tenant", "1")
    try:
        s.tenant("acme")
        s.tenant("beta")
        ka, kb = s.key("acme"), s.key("beta")
        ctype = "multipart/form-data; boundary=xyz"
        first = tls(s)
        first.sendall(head("POST", "/v1/adapters", {"Content-Type": ctype, "Content-Length": str(8 << 20),
                                                     "Authorization": f"Bearer {ka}"}) + b"--xyz\r\n")
        time.sleep(0.3)
        second = tls(s)
        second.sendall(head("POST", "/v1/adapters", {"Content-Type": ctype, "Content-Length": str(8 << 20),
                                                      "Authorization": f"Bearer {ka}"}))
        st, hdrs, body, _ = read_response(second)
        assert st == 429 and json.loads(body)["error"]["code"] == "rate_limit_exceeded", body
        assert hdrs.get("retry-after") == "1"
        second.close()
        # another tenant uploads meanwhile (its body is read: a 400 for the bad form, not a 429)
        other = tls(s)
        form = b"--xyz\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n--xyz--\r\n"
        other.sendall(head("POST", "/v1/adapters", {"Content-Type": ctype, "Content-Length": str(len(form)),
                                                     "Authorization": f"Bearer {kb}"}) + form)
        st, _, body, _ = read_response(other)
        assert st == 400, body
        other.close()
        # the first leaves: its reservation goes with it
        first.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            again = tls(s)
            again.sendall(head("POST", "/v1/adapters", {"Content-Type": ctype, "Content-Length": str(len(form)),
                                                         "Authorization": f"Bearer {ka}"}) + form)
            st, _, _, _ = read_response(again)
            again.close()
            if st != 429:
                break
            time.sleep(0.1)
        assert st == 400
    finally:
        assert s.stop() == 0


def test_upload_refused_when_the_disk_would_go_below_its_floor(tmp_path):
    s = Serve(tmp_path, TINY, "--min-free-disk-mb", str(1 << 24))  # 16 TiB: no disk has it
    try:
        s.tenant("acme")
        k = s.key("acme")
        c = tls(s)
        c.sendall(head("POST", "/v1/adapters", {"Content-Type": "multipart/form-data; boundary=xyz",
                                                 "Content-Length": str(1 << 20), "Authorization": f"Bearer {k}"}))
        st, hdrs, body, _ = read_response(c)
        assert st == 507 and json.loads(body)["error"]["code"] == "insufficient_storage", body
        c.close()
        # the operator's import path is unaffected; inference is unaffected
        with s.client(k) as cl:
            assert cl.get("/v1/models").status_code == 200
    finally:
        assert s.stop() == 0


def test_metrics_can_require_a_key(tmp_path):
    mkey = "lg-metrics-" + "m" * 40
    s = Serve(tmp_path, TINY, "--metrics-auth", "on", env={"LORAGATE_METRICS_KEY": mkey})
    try:
        with s.client() as c:
            r = c.get("/metrics")
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert c.get("/metrics", headers={"Authorization": "Bearer " + "x" * 40}).status_code == 401
            r = c.get("/metrics", headers={"Authorization": f"Bearer {mkey}"})
            assert r.status_code == 200 and "loragate_http_early_refusals_total" in r.text
            assert c.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 200
            assert c.get("/healthz").status_code == 200
    finally:
        assert s.stop() == 0
    # without the option it stays public (as before), and counts early refusals
    s = Serve(tmp_path, TINY)
    try:
        t = tls(s)
        t.sendall(head("POST", "/v1/completions", {"Content-Type": "application/json", "Content-Length": str(BIG)}))
        assert read_response(t)[0] == 401
        t.close()
        with s.client() as c:
            text = c.get("/metrics").text
        line = [x for x in text.splitlines() if x.startswith("loragate_http_early_refusals_total")]
        assert line and float(line[0].split()[-1]) >= 1
    finally:
        assert s.stop() == 0


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return None


def test_http2_rapid_reset_goaway_and_bills_only_what_ran(tmp_path):
    """The probe's finding 3: 2,000 POST /v1/completions + RST_STREAM on one
    connection were all dispatched and billed 402,000 prompt tokens while the
    engine prefilled 201."""
    model = SMOLLM2 if os.path.exists(SMOLLM2) else TINY
    s = Serve(tmp_path, model, "--engine-threads", "1")
    try:
        s.tenant("acme")
        k = s.key("acme")
        with s.client(k) as c:
            base = c.get("/v1/models").json()["data"][0]["id"]
        prompt = "Summarize the following. " + "The quick brown fox jumps over the lazy dog. " * 20
        body = json.dumps({"model": base, "prompt": prompt, "max_tokens": 4}).encode()
        h = H2(s)
        terminated, sent = None, 0
        for batch in range(40):
            for _ in range(50):
                try:
                    sid = h.request("POST", "/v1/completions", [("content-type", "application/json"),
                                                                ("content-length", str(len(body))),
                                                                ("authorization", f"Bearer {k}")], end_stream=False)
                    h.c.send_data(sid, body, end_stream=True)
                    h.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                    sent += 1
                except Exception:
                    break
            h.flush()
            h.drain(0.05)
            terminated = next((e for e in h.events if isinstance(e, h2.events.ConnectionTerminated)), None)
            if terminated or "EOF" in h.events:
                break
        assert terminated is not None and terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert sent < 2000
        # every request that reached the engine gets its record once the engine is done with it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with s.client(ADMIN_KEY) as c:
                text = c.get("/metrics").text
            if metric_value(text, "loragate_engine_queue_depth") == 0 and \
                    metric_value(text, "loragate_engine_running_sequences") == 0:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        rows = s.ledger()  # those that reached the engine before their reset (none, some: timing)
        assert len(rows) <= 150, len(rows)
        assert all(r["http_status"] == 499 for r in rows)
        billed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in rows)
        computed = metric_value(text, "loragate_engine_prefill_tokens_total")
        print(f"rapid reset: {sent} sent, {len(rows)} dispatched + billed, prompt tokens billed {billed}, computed {computed}, "
              f"{sum(r['error_type'] == 'cancelled_before_prefill' for r in rows)} cancelled before prefill")
        assert billed <= computed, (billed, computed)
        for r in rows:
            if r["error_type"] == "cancelled_before_prefill":
                assert r["prompt_tokens"] == r["cached_tokens"] == r["completion_tokens"] == r["cost_pico"] == 0
        # the tenant's budget saw the same figures (the server keeps serving it)
        with s.client(k) as c:
            r = c.post("/v1/completions", json={"model": base, "prompt": "Hi", "max_tokens": 2})
            assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0
