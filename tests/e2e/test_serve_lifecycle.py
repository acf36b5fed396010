"""
test_serve_lifecycle.py — what happens over a server's life, against a real
`loragate serve` over TLS on 127.0.0.1 (free ports, bounded waits, stopped by
the test):

  - prefix cache per tenant: a repeated long prompt gets cached_tokens > 0
    for the same tenant and exactly 0 for another tenant (SmolLM2, SDK);
  - adapter replace while a stream runs (synthetic SmolLM2 adapters v1/v2
    uploaded through POST /v1/adapters): the stream finishes with v1's
    tokens (= a non-streamed greedy run of v1), the engine was still running
    it after the replace committed (ledger finished_at, digest v1), new
    requests use v2 (= the same weights under another name), and v2 never
    gets cached_tokens from v1's KV of the same prompt;
  - delete while a stream runs: the stream completes, new requests get 404;
  - a client that leaves mid-stream (HTTP/1.1 and HTTP/2) frees the engine's
    KV pages: /metrics pool pages{kind="kv"} and running sequences return to
    the idle baseline within seconds;
  - SIGTERM with a stream in flight: the stream drains to completion with the
    same tokens as an undisturbed run, then exit 0;
  - restart on the same data dir (tiny fixture model) keeps tenants, keys
    (a revoked one stays revoked) and adapters, which give the same greedy
    tokens.
"""
import hashlib
import json
import os
import signal
import time

import pytest

from metering_util import metric, parse_metrics
from serve_fixture import LORA_FIX, LORAGATE, SMOLLM2, TINY, Serve
from synth_adapter import smollm2_adapter

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

MODEL = "smol"
LONG = ("You are a helpful assistant for a bakery that sells sourdough, rye and spelt bread. " * 6).strip()
STORY = "Once upon a time, in a small village by the sea,"
N_STREAM = 80  # tokens: a few seconds of SmolLM2 on the CPU


def need_smol():
    if not os.path.exists(SMOLLM2):
        pytest.skip("default model not downloaded (tests/run_all.sh fetches it)")


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    need_smol()
    s = Serve(tmp_path_factory.mktemp("life"), SMOLLM2, "--served-model-name", MODEL)
    try:
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta")}
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def scrape(s):
    with s.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    return parse_metrics(r.text)[0]


def upload(s, key, name, cfg, w):
    with s.client(key) as c:
        return c.post("/v1/adapters", data={"name": name}, files={"config": ("adapter_config.json", cfg),
                                                                  "weights": ("adapter_model.safetensors", w)})


def complete(s, key, model, prompt, max_tokens, **kw):
    with s.client(key) as c:
        r = c.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                            "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return r


class Stream:
    """A streamed completion read chunk by chunk (raw SSE over httpx)."""

    def __init__(self, s, key, body, http2=False):
        self.client = s.client(key, http2=http2)
        self.cm = self.client.stream("POST", "/v1/completions", json={**body, "stream": True})
        self.resp = self.cm.__enter__()
        assert self.resp.status_code == 200, self.resp.read()
        self.rid = self.resp.headers["x-request-id"]
        self.lines = self.resp.iter_lines()
        self.text, self.finish, self.usage, self.done, self.n_chunks = "", None, None, False, 0

    def read(self, n=None):
        """Reads n more chunks (None: to the end)."""
        got = 0
        for line in self.lines:
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                self.done = True
                break
            ch = json.loads(line[6:])
            assert "error" not in ch, ch
            if ch["choices"]:
                self.text += ch["choices"][0]["text"]
                self.finish = ch["choices"][0]["finish_reason"] or self.finish
            if ch.get("usage"):
                self.usage = ch["usage"]
            self.n_chunks += 1
            got += 1
            if n is not None and got >= n:
                break
        return self

    def close(self):
        self.cm.__exit__(None, None, None)
        self.client.close()


def ledger_row(s, rid, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = s.ledger("request_id = ?", (rid,))
        if rows:
            return rows[0]
        time.sleep(0.05)
    raise AssertionError(f"no ledger record for {rid}")


# ---- prefix cache per tenant -----------------------------------------------------------

def test_cached_tokens_same_tenant_only(smol):
    acme = smol.openai(smol.keys["acme"], tenant="acme")
    beta = smol.openai(smol.keys["beta"], tenant="beta")
    prompt = LONG + " Which bread is the sourest?"
    first = acme.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0).usage
    assert first.prompt_tokens > 64
    again = acme.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0).usage
    assert again.prompt_tokens == first.prompt_tokens
    assert again.prompt_tokens_details.cached_tokens > 0
    assert again.prompt_tokens_details.cached_tokens == (again.prompt_tokens - 1) // 16 * 16
    other = beta.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0).usage
    assert other.prompt_tokens == first.prompt_tokens
    assert other.prompt_tokens_details.cached_tokens == 0
    # beta's own repeat hits its own cache (the 0 above is isolation, not a cold cache)
    other2 = beta.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0).usage
    assert other2.prompt_tokens_details.cached_tokens == again.prompt_tokens_details.cached_tokens


# ---- adapter replace and delete while a stream runs ----------------------------------------

@pytest.fixture(scope="module")
def versions():
    return {"v1": smollm2_adapter(seed=1), "v2": smollm2_adapter(seed=2)}


def test_replace_while_streaming(smol, versions):
    key = smol.keys["acme"]
    (c1, w1), (c2, w2) = versions["v1"], versions["v2"]
    d1, d2 = hashlib.sha256(c1 + w1).hexdigest(), hashlib.sha256(c2 + w2).hexdigest()
    r = upload(smol, key, "support", c1, w1)
    assert r.status_code == 201 and r.json()["digest"] == d1, r.text
    # v2's weights under another name: what "support" must answer after the replace
    assert upload(smol, key, "ref-v2", c2, w2).status_code == 201
    want_v1 = complete(smol, key, "support", STORY, N_STREAM).json()["choices"][0]["text"]
    want_v2 = complete(smol, key, "ref-v2", STORY, N_STREAM).json()["choices"][0]["text"]
    assert want_v1 and want_v2 and want_v1 != want_v2
    # v1 caches a long prompt that v2 will see first
    long_prompt = LONG + " Tell me about rye."
    complete(smol, key, "support", long_prompt, 1)
    assert complete(smol, key, "support", long_prompt, 1).json()["usage"]["prompt_tokens_details"][
        "cached_tokens"] > 0

    st = Stream(smol, key, {"model": "support", "prompt": STORY, "max_tokens": N_STREAM, "temperature": 0,
                            "stream_options": {"include_usage": True}})
    try:
        st.read(3)
        assert not st.done and st.finish is None
        r = upload(smol, key, "support", c2, w2)
        replaced_at_ms = time.time() * 1000
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 2 and r.json()["digest"] == d2
        st.read()
    finally:
        st.close()
    assert st.done and st.finish == "length"
    assert st.text == want_v1, "the stream changed adapter mid-way"
    assert st.usage["completion_tokens"] == N_STREAM
    row = ledger_row(smol, st.rid)
    assert row["adapter_digest"] == d1 and row["http_status"] == 200
    assert row["finished_at"] > replaced_at_ms, "the stream ended before the replace: no overlap was tested"

    # new requests use v2
    r = complete(smol, key, "support", STORY, N_STREAM)
    assert r.json()["choices"][0]["text"] == want_v2
    assert ledger_row(smol, r.headers["x-request-id"])["adapter_digest"] == d2
    # v2 never reuses v1's KV of the same prompt; then its own repeat does hit
    u = complete(smol, key, "support", long_prompt, 1).json()["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    u = complete(smol, key, "support", long_prompt, 1).json()["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] > 0


def test_delete_while_streaming(smol, versions):
    key = smol.keys["acme"]
    c1, w1 = versions["v1"]
    assert upload(smol, key, "doomed", c1, w1).status_code == 201
    want = complete(smol, key, "doomed", STORY, N_STREAM).json()["choices"][0]["text"]
    st = Stream(smol, key, {"model": "doomed", "prompt": STORY, "max_tokens": N_STREAM, "temperature": 0})
    try:
        st.read(3)
        with smol.client(key) as c:
            r = c.delete("/v1/adapters/doomed")
            deleted_at_ms = time.time() * 1000
            assert r.status_code == 200 and r.json()["deleted"] is True, r.text
            r = c.post("/v1/completions", json={"model": "doomed", "prompt": STORY, "max_tokens": 2})
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            assert "doomed" not in [m["id"] for m in c.get("/v1/models").json()["data"]]
        st.read()
    finally:
        st.close()
    assert st.done and st.finish == "length" and st.text == want
    assert ledger_row(smol, st.rid)["finished_at"] > deleted_at_ms


# ---- a client that leaves frees the engine's pages ----------------------------------------

def kv_in_use(m):
    """KV pages held by sequences: pool pages of kind kv less those only the prefix cache holds."""
    return metric(m, "loragate_pool_pages", kind="kv") - metric(m, "loragate_pool_pages", kind="cached")


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_disconnect_frees_kv_pages(smol, http2):
    key = smol.keys["acme"]
    deadline = time.monotonic() + 10
    while True:  # idle: nothing running from the tests before
        m0 = scrape(smol)
        if metric(m0, "loragate_engine_running_sequences") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert metric(m0, "loragate_engine_running_sequences") == 0
    used0 = kv_in_use(m0)
    st = Stream(smol, key, {"model": MODEL, "prompt": STORY, "max_tokens": 1000, "temperature": 0}, http2=http2)
    try:
        st.read(5)
        assert st.finish is None
        m1 = scrape(smol)
        assert metric(m1, "loragate_engine_running_sequences") == 1
        assert kv_in_use(m1) > used0
    finally:
        st.close()  # leaves mid-stream
    t_closed = time.monotonic()
    while True:
        m2 = scrape(smol)
        if metric(m2, "loragate_engine_running_sequences") == 0 and kv_in_use(m2) == used0:
            break
        assert time.monotonic() - t_closed < 2.5, (
            f"pages not freed: running {metric(m2, 'loragate_engine_running_sequences')}, "
            f"kv in use {kv_in_use(m2)} vs {used0} before")
        time.sleep(0.05)
    row = ledger_row(smol, st.rid)
    assert row["http_status"] == 499 and 5 <= row["completion_tokens"] < 1000


# ---- SIGTERM drains a stream in flight ----------------------------------------------------

def test_sigterm_drains_stream_to_completion(tmp_path):
    need_smol()
    s = Serve(tmp_path, SMOLLM2, "--served-model-name", MODEL)
    try:
        s.tenant("acme")
        key = s.key("acme")
        want = complete(s, key, MODEL, STORY, N_STREAM).json()["choices"][0]["text"]
        st = Stream(s, key, {"model": MODEL, "prompt": STORY, "max_tokens": N_STREAM, "temperature": 0,
                             "stream_options": {"include_usage": True}})
        try:
            st.read(3)
            s.proc.send_signal(signal.SIGTERM)
            st.read()
        finally:
            st.close()
        assert st.done and st.finish == "length" and st.text == want
        assert st.usage["completion_tokens"] == N_STREAM
        assert s.proc.wait(20) == 0, s.stderr()[-3000:]
        # the drained request was billed before exit
        assert s.ledger("request_id = ?", (st.rid,))[0]["http_status"] == 200
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        s.stop()


# ---- restart keeps tenants, keys and adapters ---------------------------------------------

def fixture_files(name):
    d = os.path.join(LORA_FIX, name)
    return (open(os.path.join(d, "adapter_config.json"), "rb").read(),
            open(os.path.join(d, "adapter_model.safetensors"), "rb").read())


def greedy_ids(s, key, model):
    r = complete(s, key, model, [5, 6, 7, 8], 8, logprobs=1)
    return [int(t.split(":")[1]) for t in r.json()["choices"][0]["logprobs"]["tokens"]]


def state_of(s, key):
    with s.client(key) as c:
        models = [m["id"] for m in c.get("/v1/models").json()["data"]]
        adapters = c.get("/v1/adapters").json()["data"]
    tenants = [(t["name"], t["created_at"]) for t in s.admin.get("/admin/v1/tenants").json()["data"]]
    keys = {t: sorted((k["id"], k["prefix"], tuple(k["scopes"]), k.get("revoked_at")) for k in
                      s.admin.get(f"/admin/v1/tenants/{t}/keys?include_revoked=true").json()["data"])
            for t, _ in tenants}
    return models, adapters, tenants, keys


def test_restart_keeps_tenants_keys_adapters(tmp_path):
    s = Serve(tmp_path, TINY, "--max-lora-rank", "16")
    try:
        s.tenant("acme")
        s.tenant("beta")
        key, gone = s.key("acme"), s.key("acme", name="to-revoke")
        kid = [k["id"] for k in s.admin.get("/admin/v1/tenants/acme/keys").json()["data"]
               if k["name"] == "to-revoke"][0]
        assert s.admin.delete(f"/admin/v1/keys/{kid}").status_code == 200
        for name, fx in (("support", "r8_rslora_attn"), ("sales", "r16_all_linear")):
            cfg, w = fixture_files(fx)
            assert upload(s, key, name, cfg, w).status_code == 201
        cfg, w = fixture_files("r1_qv")
        assert upload(s, key, "support", cfg, w).json()["version"] == 2  # the restart keeps the latest
        before = state_of(s, key)
        ids_before = {m: greedy_ids(s, key, m) for m in ("base", "support", "sales")}
        assert ids_before["support"] != ids_before["sales"] or ids_before["support"] != ids_before["base"]
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]

    s2 = Serve(tmp_path, TINY, "--max-lora-rank", "16")
    try:
        assert s2.data_dir == s.data_dir
        after = state_of(s2, key)
        assert after == before
        assert sorted(before[0]) == ["base", "sales", "support"]
        assert {a["name"]: a["version"] for a in after[1]} == {"sales": 1, "support": 2}
        assert {m: greedy_ids(s2, key, m) for m in ("base", "support", "sales")} == ids_before
        with s2.client(gone) as c:
            r = c.get("/v1/models")
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    finally:
        assert s2.stop() == 0, s2.stderr()[-3000:]
