"""HTTP semantics that load balancers, uptime checks and clients rely on,
against tests/e2e/gw_test_server.c (the HTTP core with test routes) and a
real `loragate serve`: HEAD on every GET route over HTTP/1.1 and HTTP/2
(the GET's headers, no body), compressed request bodies (gzip, deflate; a
decompression bomb; an unknown coding), vLLM's /health and /version.

Clients: curl (-I over --http1.1 and --http2; --compressed is for responses,
so bodies are compressed here by Python's gzip/zlib, the outside encoder),
httpx (HTTP/1.1 and HTTP/2).
"""
import gzip
import json
import os
import subprocess
import zlib

import httpx
import pytest

from serve_fixture import LORAGATE, TINY, Serve
from test_gateway_core import TEST_SERVER, Server

ACME = {"Authorization": "Bearer tk-acme"}


@pytest.fixture
def server(tmp_path):
    s = Server(TEST_SERVER, tmp_path, "--tenant-host-suffix", ".api.test")
    yield s
    assert s.stop() == 0


GET_ROUTES = [("/healthz", {}), ("/readyz", {}), ("/health", {}), ("/version", {}), ("/test/stats", {}),
              ("/v1/fail/403", {}), ("/admin/v1/ping", {}), ("/v1/stream?n=3", ACME), ("/nope", {})]


@pytest.mark.parametrize("http2", [False, True])
def test_head_is_get_without_body(server, http2):
    with server.client(http2=http2) as c:
        for path, h in GET_ROUTES:
            g = c.get(path, headers=h)
            r = c.head(path, headers=h)
            assert r.status_code == g.status_code, path
            assert r.content == b"", path
            assert r.headers.get("content-type") == g.headers.get("content-type"), path
            if "content-length" in g.headers and path not in ("/nope",) and not path.startswith("/v1/stream"):
                assert r.headers["content-length"] == g.headers["content-length"], path
        # a route with no GET: 405, Allow lists HEAD where GET is
        r = c.head("/v1/echo", headers=ACME)
        assert r.status_code == 405 and r.content == b"" and "POST" in r.headers["allow"]
        r = c.request("OPTIONS", "/healthz")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        # the connection is still fine after HEADs (no stray body bytes)
        assert c.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize("flag", ["--http1.1", "--http2"])
def test_curl_head(server, flag):
    out = subprocess.run(["curl", "-sS", "-I", flag, "--max-time", "10", "--cacert", server.cert,
                          server.url + "/healthz"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr  # curl's exit 92 (HTTP/2 stream error) was the defect
    assert out.stdout.splitlines()[0].split()[1] == "200"


def echo(c, body, encoding, **kw):
    return c.post("/v1/echo", content=body, headers={**ACME, "Content-Type": "application/json",
                                                   **({"Content-Encoding": encoding} if encoding else {})}, **kw)


@pytest.mark.parametrize("http2", [False, True])
def test_compressed_bodies(server, http2):
    doc = {"model": "m", "text": "the quick brown fox " * 20}
    raw = json.dumps(doc).encode()
    with server.client(http2=http2) as c:
        for enc, body in (("gzip", gzip.compress(raw)), ("deflate", zlib.compress(raw)),
                          ("deflate", zlib.compress(raw)[2:-4]),  # raw deflate, as some clients send it
                          ("x-gzip", gzip.compress(raw)), ("identity", raw)):
            r = echo(c, body, enc)
            assert r.status_code == 200 and r.json()["body"] == doc, (enc, r.text)
        # the route's limit (4 KiB) on the decoded size: 1 MiB of spaces is ~1 KB on the wire
        bomb = gzip.compress(b'{"x":"' + b" " * (1 << 20) + b'"}')
        assert len(bomb) < 4096
        r = echo(c, bomb, "gzip")
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        r = echo(c, b"\x1f\x8b\x08\x00garbage", "gzip")
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_encoding"
        for enc in ("br", "zstd", "gzip, br"):
            r = echo(c, raw, enc)
            assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type", enc


def test_health_and_version(server):
    with server.client() as c:
        r = c.get("/health")
        assert r.status_code == 200 and r.content == b""
        v = c.get("/version").json()
        assert set(v) == {"version"} and v["version"]


@pytest.mark.skipif(not os.path.exists(LORAGATE), reason="loragate not built")
def test_serve_head_and_gzip(tmp_path):
    s = Serve(tmp_path, TINY)
    try:
        s.tenant("acme")
        k = s.key("acme")
        for http2 in (False, True):
            with s.client(k, http2=http2) as c:
                base = c.get("/v1/models").json()["data"][0]["id"]
                for path in ("/v1/models", f"/v1/models/{base}", "/v1/adapters", "/v1/usage?start_time=0",
                             "/usage", "/metrics", "/healthz", "/health", "/version"):
                    g, h = c.get(path), c.head(path)
                    assert h.status_code == g.status_code and h.content == b"", path
                body = json.dumps({"model": base, "prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0}).encode()
                plain = c.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
                z = c.post("/v1/completions", content=gzip.compress(body),
                           headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
                assert plain.status_code == z.status_code == 200
                assert plain.json()["choices"][0]["text"] == z.json()["choices"][0]["text"]
    finally:
        assert s.stop() == 0


SMOLLM2 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".models",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
HF_TOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tokenizer", "fixtures", "smollm2",
                      "tokenizer.json")


@pytest.mark.skipif(not (os.path.exists(LORAGATE) and os.path.exists(SMOLLM2)), reason="loragate or the default model missing")
def test_tokenize_detokenize_vllm_shapes(tmp_path):
    """vLLM's /tokenize and /detokenize, per tenant, against HF `tokenizers` with
    SmolLM2's tokenizer.json (tests/tokenizer/fixtures, the parity suite's)."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(HF_TOK)
    hf.encode_special_tokens = True  # as /v1/completions encodes a text prompt: a special token's text stays text
    s = Serve(tmp_path, SMOLLM2, "--tenant-host-suffix", ".api.test")
    try:
        s.tenant("acme")
        s.tenant("beta")
        k, kb = s.key("acme"), s.key("beta")
        with s.client(k) as c:
            base = c.get("/v1/models").json()["data"][0]["id"]
            for text in ("Hello, world!", "naïve café — 東京 🚀", "<|im_start|>user\nhi<|im_end|>", ""):
                for path in ("/tokenize", "/t/acme/tokenize"):
                    r = c.post(path, json={"model": base, "prompt": text, "return_token_strs": True})
                    assert r.status_code == 200, r.text
                    j = r.json()
                    want = hf.encode(text, add_special_tokens=False).ids  # SmolLM2 adds no BOS
                    assert j["tokens"] == want and j["count"] == len(want), text
                    assert j["token_strs"] == [hf.id_to_token(i) for i in want]
                    assert j["max_model_len"] > 0
                    d = c.post(path.replace("tokenize", "detokenize"), json={"tokens": j["tokens"]})
                    assert d.status_code == 200 and d.json() == {"prompt": hf.decode(want, skip_special_tokens=False)}
            r = c.post("/tokenize", json={"prompt": "x"})
            assert r.status_code == 200 and r.json()["token_strs"] is None
            # the ids are the ones the generation routes bill
            msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a bread."}]
            t = c.post("/tokenize", json={"model": base, "messages": msgs}).json()
            g = c.post("/v1/chat/completions", json={"model": base, "messages": msgs, "max_tokens": 1})
            assert t["count"] == g.json()["usage"]["prompt_tokens"] == len(t["tokens"])
            text = c.post("/detokenize", json={"tokens": t["tokens"]}).json()["prompt"]
            assert text.startswith("<|im_start|>system\nBe brief.") and text.endswith("<|im_start|>assistant\n")
            g = c.post("/v1/completions", json={"model": base, "prompt": "Hello, world!", "max_tokens": 1})
            assert c.post("/tokenize", json={"prompt": "Hello, world!"}).json()["count"] == \
                g.json()["usage"]["prompt_tokens"]
            r = c.post("/tokenize", json={"messages": msgs, "add_generation_prompt": False})
            assert r.status_code == 400 and r.json()["error"]["param"] == "add_generation_prompt"
            r = c.post("/tokenize", json={"messages": msgs, "chat_template_kwargs": {}})
            assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs"
            # the model must be the tenant's; refusals by name
            assert c.post("/tokenize", json={"model": "nosuch", "prompt": "x"}).status_code == 404
            r = c.post("/tokenize", json={"prompt": "x", "truncate_prompt_tokens": 3})
            assert r.status_code == 400 and r.json()["error"]["param"] == "truncate_prompt_tokens"
            r = c.post("/detokenize", json={"tokens": [1, -1]})
            assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"
            assert c.post("/t/beta/tokenize", json={"prompt": "x"}).status_code == 401  # another tenant's URL
        with s.client() as c:
            assert c.post("/tokenize", json={"prompt": "x"}).status_code == 401
    finally:
        assert s.stop() == 0
