"""
test_tenant_identity.py — a tenant is its row id, not its name; a request is
billed for what the engine did. A real `loragate serve` (the default model,
TLS on loopback, a small context and the smallest pool so that one long
request fills it):

  - recycled names: tenant `delta` sends a prompt twice (the second reads
    192 of its 199 tokens from the prefix cache); `delta` is deleted and
    made again with a new key; the same prompt then gets cached_tokens 0
    (deleting purged the old tenant's pages, and the new tenant has another
    id, so another cache namespace); the ledger rows of the two tenants
    carry different tenant ids; the database refuses to delete a tenant row
    or change its id (a tenant id is never reused);
  - a request cancelled (an HTTP/2 client that leaves) while it waits in
    the engine's queue (the pool is held by a long request of another
    tenant) is written to the ledger with
    status 499, finish_reason "cancelled", error_type
    "cancelled_before_prefill", 0 prompt / cached / completion tokens and
    cost 0, and its estimate goes back to the tenant's tokens-per-minute
    bucket in full (nothing was used: the limits get the billed figures).
"""
import os
import sqlite3
import time

import httpx
import pytest

from serve_fixture import LORAGATE, SMOLLM2, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

# token ids, so the lengths are exact: 199 tokens = 12 full pages before the last one
P199 = [1000 + (i * 37) % 3000 for i in range(199)]


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")
    # --ctx 1024 --pool-mb 1: the pool is the minimum, one full-context sequence (65 pages)
    s = Serve(tmp_path_factory.mktemp("identity"), SMOLLM2, "--served-model-name", "smollm2", "--ctx", "1024",
              "--pool-mb", "1")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def complete(s, key, tenant, prompt, **kw):
    c = s.client(key)
    try:
        r = c.post(f"/t/{tenant}/v1/completions",
                   json={"model": "smollm2", "prompt": prompt, "max_tokens": 1, "temperature": 0, **kw})
    finally:
        c.close()
    assert r.status_code == 200, r.text
    return r


def cached(r):
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def ledger_row(s, rid, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = s.ledger("request_id = ?", (rid,))
        if rows:
            return rows[0]
        time.sleep(0.05)
    raise AssertionError(f"no ledger record for {rid}")


def test_recreated_tenant_does_not_inherit_the_prefix_cache(smol):
    s = smol
    s.tenant("delta")
    k1 = s.key("delta")
    r1 = complete(s, k1, "delta", P199)
    r2 = complete(s, k1, "delta", P199)
    assert r1.json()["usage"]["prompt_tokens"] == 199 and cached(r1) == 0
    assert cached(r2) == 192  # the old tenant's own cache works
    old = ledger_row(s, r2.headers["x-request-id"])

    d = s.admin.delete("/admin/v1/tenants/delta")
    assert d.status_code == 200, d.text
    c = s.client(k1)
    assert c.post("/v1/completions", json={"model": "smollm2", "prompt": P199, "max_tokens": 1}).status_code == 401
    c.close()

    s.tenant("delta")
    k2 = s.key("delta")
    r3 = complete(s, k2, "delta", P199)
    assert r3.json()["usage"]["prompt_tokens"] == 199
    assert cached(r3) == 0, "a new tenant with a recycled name was served the old tenant's cached prompt"
    r4 = complete(s, k2, "delta", P199)
    assert cached(r4) == 192  # its own cache works
    new = ledger_row(s, r3.headers["x-request-id"])
    assert new["tenant_id"] != old["tenant_id"]
    assert (new["prompt_tokens"], new["cached_tokens"], new["http_status"]) == (199, 0, 200)

    # the database never frees a tenant id for reuse
    db = sqlite3.connect(os.path.join(s.data_dir, "loragate.db"), timeout=10)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="never"):
            db.execute("DELETE FROM tenants WHERE id = ?", (old["tenant_id"],))
        with pytest.raises(sqlite3.DatabaseError, match="never"):
            db.execute("UPDATE tenants SET id = 1000000 WHERE id = ?", (new["tenant_id"],))
        db.rollback()
        n = db.execute("SELECT count(*) FROM tenants WHERE name = 'delta'").fetchone()[0]
    finally:
        db.close()
    assert n == 2


def test_cancelled_in_queue_is_billed_nothing(smol):
    s = smol
    s.tenant("filler")
    s.tenant("queued")
    kf, kq = s.key("filler"), s.key("queued")
    r = s.admin.put("/admin/v1/tenants/queued/limits", json={"tokens_per_minute": 1200})
    assert r.status_code == 200, r.text
    # filler: 800 prompt tokens + up to 200 generated hold 50..63 of the 65 pages
    # for the whole generation; a counting prompt keeps greedy decoding going
    long_prompt = [1000 + (i * 53) % 3000 for i in range(800)]
    fc = s.client(kf, timeout=120)
    with fc.stream("POST", "/t/filler/v1/completions",
                   json={"model": "smollm2", "prompt": long_prompt, "max_tokens": 200, "temperature": 0,
                         "stream": True}) as fresp:
        assert fresp.status_code == 200
        filler_rid = fresp.headers["x-request-id"]
        lines = fresp.iter_lines()
        for line in lines:  # the first token: its prefill is done, its pages are held
            if line.startswith("data: "):
                break
        # queued: 398 prompt tokens need 25 pages for the first chunk: it waits.
        # HTTP/2, whose connection the server reads all along, so it sees the
        # reset at once (an HTTP/1.1 client's departure is only noticed when
        # the server next writes to it)
        qc = s.client(kq, http2=True)
        with qc.stream("POST", "/t/queued/v1/completions",
                       json={"model": "smollm2", "prompt": P199 + P199[:201], "max_tokens": 100, "temperature": 0,
                             "stream": True}) as qresp:
            assert qresp.status_code == 200
            qrid = qresp.headers["x-request-id"]
            time.sleep(0.3)
        qc.close()  # gone before it was admitted
        row = ledger_row(s, qrid)
        assert (row["http_status"], row["error_type"], row["prompt_tokens"]) == (499, "cancelled_before_prefill", 0), row
        # the estimate (398 + 100) went back to the tokens-per-minute bucket
        # in full (billing 398 prompt tokens would leave it short by 398,
        # refilled at 20 tokens/s): the next request finds the bucket full
        r = complete(s, kq, "queued", [1000, 1001, 1002])
        assert int(r.headers["x-ratelimit-remaining-tokens"]) == 1200 - 4, r.headers
        # the filler was still running when the queued request was cancelled
        assert not s.ledger("request_id = ?", (filler_rid,)), "the filler finished first: nothing was queued"
        for line in lines:  # let the filler finish
            pass
    fc.close()
    assert row["http_status"] == 499
    assert row["finish_reason"] == "cancelled"
    assert row["error_type"] == "cancelled_before_prefill"
    assert (row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"], row["cost_pico"]) == (0, 0, 0, 0)
    assert row["first_token_at"] is None
    frow = ledger_row(s, filler_rid)
    assert frow["prompt_tokens"] == 800 and frow["http_status"] == 200 and frow["error_type"] is None
