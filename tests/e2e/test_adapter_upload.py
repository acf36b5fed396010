"""
test_adapter_upload.py — the tenant adapter API of `loragate serve`
(POST/GET/DELETE /v1/adapters, also at /t/<tenant>/v1/adapters), against a
real server over TLS on 127.0.0.1 with the tiny fixture model and its PEFT
adapters (tests/golden/lora_fixtures), --max-lora-rank 32.

What it shows:
  - an operator-made tenant + key uploads an adapter as OpenAI-style
    multipart/form-data (httpx, HTTP/1.1 and HTTP/2); the answer names its
    version, digest (SHA-256 of adapter_config.json || adapter_model.safetensors),
    rank and targets; the adapter is then listed by GET /v1/adapters and
    GET /v1/models (official openai SDK) of that tenant only, and serves
    completions; another tenant sees 404 and may own the same name;
  - uploading the name again replaces it: version 2, new digest;
  - invalid uploads (rank above --max-lora-rank, broken safetensors, bad
    JSON config, missing field, bad name, unknown field, duplicate field,
    wrong Content-Type, truncated multipart) are 400/415 OpenAI errors and
    change nothing: same list, no new files under DATA_DIR/adapters, nothing
    left in DATA_DIR/tmp; nor does a client that sends half a body and leaves;
  - a key without the `adapters` scope gets 403; delete removes it
    everywhere; a restart keeps what was uploaded.
"""
import hashlib
import os
import socket
import ssl
import time

import pytest

from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


def fixture_files(name):
    d = os.path.join(LORA_FIX, name)
    with open(os.path.join(d, "adapter_config.json"), "rb") as f:
        cfg = f.read()
    with open(os.path.join(d, "adapter_model.safetensors"), "rb") as f:
        w = f.read()
    return cfg, w


def form(name, cfg, w):
    data = {"name": name} if name is not None else {}
    files = {}
    if cfg is not None:
        files["config"] = ("adapter_config.json", cfg, "application/json")
    if w is not None:
        files["weights"] = ("adapter_model.safetensors", w, "application/octet-stream")
    return data, files


def tree(path):
    out = set()
    for root, dirs, files in os.walk(path):
        for x in dirs + files:
            out.add(os.path.relpath(os.path.join(root, x), path))
    return out


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("upload")
    s = Serve(tmp, TINY, "--max-lora-rank", "32")
    try:
        s.tmp = tmp
        s.tenant("acme")
        s.tenant("beta")
        s.keys = {"acme": s.key("acme"), "beta": s.key("beta"), "acme_inf": s.key("acme", ["inference"])}
        yield s
    finally:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.stderr()[-3000:]


def upload(srv, tenant, name, fixture=None, cfg=None, w=None, http2=False, via_tenant_url=False):
    if fixture:
        cfg, w = fixture_files(fixture)
    data, files = form(name, cfg, w)
    path = f"/t/{tenant}/v1/adapters" if via_tenant_url else "/v1/adapters"
    with srv.client(srv.keys[tenant], http2=http2) as c:
        return c.post(path, data=data, files=files)


def adapters_of(srv, tenant):
    with srv.client(srv.keys[tenant]) as c:
        r = c.get("/v1/adapters")
        assert r.status_code == 200, r.text
        return {a["name"]: a for a in r.json()["data"]}


def err_of(r, status, code=None, param=None):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"} and e["message"]
    if code is not None:
        assert e["code"] == code, e
    if param is not None:
        assert e["param"] == param, e
    return e


def test_upload_list_models_and_use(srv):
    cfg, w = fixture_files("r8_rslora_attn")
    r = upload(srv, "acme", "support", cfg=cfg, w=w)
    assert r.status_code == 201, r.text
    a = r.json()
    assert a["object"] == "adapter" and a["id"] == a["name"] == "support" and a["owned_by"] == "acme"
    assert a["version"] == 1 and a["rank"] == 8
    assert sorted(a["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert a["digest"] == hashlib.sha256(cfg + w).hexdigest()
    assert a["size_bytes"] == len(cfg) + len(w) and isinstance(a["created_at"], int)
    # the files are in the content-addressed store
    assert os.path.isfile(os.path.join(srv.data_dir, "adapters", a["digest"], "adapter_model.safetensors"))

    assert adapters_of(srv, "acme")["support"]["digest"] == a["digest"]
    with srv.client(srv.keys["acme"]) as c:
        assert c.get("/v1/adapters/support").json() == a
    acme = srv.openai(srv.keys["acme"], tenant="acme")
    assert "support" in [m.id for m in acme.models.list().data]
    m = acme.models.retrieve("support")
    assert m.owned_by == "acme"
    out = acme.completions.create(model="support", prompt=[5, 6, 7], max_tokens=3, temperature=0)
    assert out.model == "support" and out.usage.completion_tokens >= 1

    # another tenant: not listed, not retrievable, not usable; its own namespace
    beta = srv.openai(srv.keys["beta"], tenant="beta")
    assert "support" not in [m.id for m in beta.models.list().data]
    with pytest.raises(openai.NotFoundError):
        beta.models.retrieve("support")
    with pytest.raises(openai.NotFoundError):
        beta.completions.create(model="support", prompt=[5, 6, 7], max_tokens=2)
    with srv.client(srv.keys["beta"]) as c:
        err_of(c.get("/v1/adapters/support"), 404, "adapter_not_found")
        err_of(c.delete("/v1/adapters/support"), 404, "adapter_not_found")
        err_of(c.get("/t/acme/v1/adapters"), 401)  # beta's key at acme's URL
    assert "support" not in adapters_of(srv, "beta")


def test_same_name_in_two_tenants_and_tenant_url_http2(srv):
    r = upload(srv, "beta", "support", fixture="r1_qv", http2=True, via_tenant_url=True)
    assert r.status_code == 201, r.text
    assert r.json()["owned_by"] == "beta" and r.json()["rank"] == 1
    assert adapters_of(srv, "beta")["support"]["rank"] == 1
    assert adapters_of(srv, "acme")["support"]["rank"] == 8


def test_replace_gives_new_version(srv):
    before = adapters_of(srv, "acme")["support"]
    cfg, w = fixture_files("r16_all_linear")
    r = upload(srv, "acme", "support", cfg=cfg, w=w)
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["version"] == before["version"] + 1 and a["rank"] == 16
    assert a["digest"] == hashlib.sha256(cfg + w).hexdigest() != before["digest"]
    assert a["created_at"] == before["created_at"]
    assert adapters_of(srv, "acme")["support"]["digest"] == a["digest"]
    acme = srv.openai(srv.keys["acme"], tenant="acme")
    assert [m.id for m in acme.models.list().data].count("support") == 1
    out = acme.completions.create(model="support", prompt=[5, 6, 7], max_tokens=2, temperature=0)
    assert out.usage.completion_tokens >= 1
    # the same content again: another version, same digest, no new content directory
    n_dirs = len(os.listdir(os.path.join(srv.data_dir, "adapters")))
    r = upload(srv, "acme", "support", cfg=cfg, w=w)
    assert r.status_code == 200 and r.json()["version"] == a["version"] + 1 and r.json()["digest"] == a["digest"]
    assert len(os.listdir(os.path.join(srv.data_dir, "adapters"))) == n_dirs


def _bad_cases():
    cfg8, w8 = fixture_files("r8_rslora_attn")
    cfg64, w64 = fixture_files("r64_mlp")
    cfg1, w1 = fixture_files("r1_qv")
    return [
        # (id, name, cfg, w, status, code, param, message must contain)
        ("rank_too_high", "newone", cfg64, w64, 400, "invalid_adapter", None, "rank"),
        ("truncated_safetensors", "newone", cfg8, w8[: len(w8) // 2], 400, "invalid_adapter", "weights", None),
        ("garbage_safetensors", "newone", cfg8, b"\x00" * 64, 400, "invalid_adapter", "weights", None),
        ("empty_safetensors", "newone", cfg8, b"", 400, "invalid_adapter", "weights", None),
        ("bad_json_config", "newone", b'{"r": 8,', w8, 400, "invalid_adapter", "config", None),
        ("config_of_other_weights", "newone", cfg1, w8, 400, "invalid_adapter", None, None),
        ("missing_weights", "newone", cfg8, None, 400, "missing_required_parameter", "weights", "weights"),
        ("missing_config", "newone", None, w8, 400, "missing_required_parameter", "config", "config"),
        ("missing_name", None, cfg8, w8, 400, "missing_required_parameter", "name", "name"),
        ("bad_name_space", "bad name", cfg8, w8, 400, "invalid_value", "name", None),
        ("bad_name_slash", "a/b", cfg8, w8, 400, "invalid_value", "name", None),
        ("bad_name_long", "x" * 80, cfg8, w8, 400, "invalid_value", "name", None),
        ("bad_name_empty", "", cfg8, w8, 400, "invalid_value", "name", None),
        ("name_is_base_model", "base", cfg8, w8, 400, "invalid_value", "name", None),
    ]


@pytest.mark.parametrize("case", _bad_cases(), ids=lambda c: c[0])
def test_invalid_uploads_change_nothing(srv, case):
    _, name, cfg, w, status, code, param, needle = case
    before = (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters")))
    r = upload(srv, "acme", name, cfg=cfg, w=w)
    e = err_of(r, status, code, param)
    if needle:
        assert needle in e["message"], e
    assert srv.data_dir not in e["message"]  # no server paths in client messages
    after = (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters")))
    assert after == before
    assert [x for x in os.listdir(os.path.join(srv.data_dir, "tmp")) if x.startswith("upload-")] == []


def test_malformed_multipart_and_content_types(srv):
    cfg, w = fixture_files("r8_rslora_attn")
    before = (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters")))
    with srv.client(srv.keys["acme"]) as c:
        err_of(c.post("/v1/adapters", json={"name": "x"}), 415, "unsupported_media_type")
        err_of(c.post("/v1/adapters", content=b"--x\r\n", headers={"content-type": "multipart/form-data"}), 400)
        # unknown and duplicate fields
        r = c.post("/v1/adapters", data={"name": "x", "purpose": "fine-tune"},
                   files={"config": ("c.json", cfg), "weights": ("w", w)})
        err_of(r, 400, "unknown_parameter", "purpose")
        r = c.post("/v1/adapters", files=[("name", (None, b"x")), ("name", (None, b"y")), ("config", ("c", cfg)),
                                          ("weights", ("w", w))])
        err_of(r, 400, "duplicate_parameter", "name")
        # a body cut before the closing delimiter
        b = "Zb0undary"
        body = (f"--{b}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n"
                f"--{b}\r\nContent-Disposition: form-data; name=\"config\"; filename=\"c\"\r\n\r\n").encode() + cfg
        err_of(c.post("/v1/adapters", content=body, headers={"content-type": f"multipart/form-data; boundary={b}"}),
               400, "invalid_multipart")
    assert (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters"))) == before
    assert [x for x in os.listdir(os.path.join(srv.data_dir, "tmp")) if x.startswith("upload-")] == []


def test_half_uploaded_body_leaves_nothing(srv):
    cfg, w = fixture_files("r16_all_linear")
    b = "halfb0undary"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nhalfway\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"config\"; filename=\"c\"\r\n\r\n").encode() + cfg + \
        (f"\r\n--{b}\r\nContent-Disposition: form-data; name=\"weights\"; filename=\"w\"\r\n\r\n").encode() + w + \
        f"\r\n--{b}--\r\n".encode()
    before = (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters")))
    host, port = srv.url.split("//")[1].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=srv.cert)
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            head = (f"POST /v1/adapters HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {srv.keys['acme']}\r\n"
                    f"Content-Type: multipart/form-data; boundary={b}\r\nContent-Length: {len(body)}\r\n\r\n")
            s.sendall(head.encode() + body[: len(body) // 2])
            time.sleep(0.3)
    time.sleep(0.5)
    assert (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters"))) == before
    assert "halfway" not in adapters_of(srv, "acme")
    assert [x for x in os.listdir(os.path.join(srv.data_dir, "tmp")) if x.startswith("upload-")] == []
    # and the server is fine
    assert upload(srv, "acme", "after-half", fixture="r1_qv").status_code == 201


def test_scope_required(srv):
    cfg, w = fixture_files("r1_qv")
    with srv.client(srv.keys["acme_inf"]) as c:
        e = err_of(c.get("/v1/adapters"), 403)
        assert "adapters" in e["message"]
        err_of(c.post("/v1/adapters", data={"name": "nope"}, files={"config": ("c", cfg), "weights": ("w", w)}), 403)
        err_of(c.delete("/v1/adapters/support"), 403)
    with srv.client() as c:
        err_of(c.get("/v1/adapters"), 401, "invalid_api_key")
    with srv.client("lg-" + "y" * 43) as c:
        err_of(c.get("/v1/adapters"), 401, "invalid_api_key")
    assert "nope" not in adapters_of(srv, "acme")


def test_delete(srv):
    assert upload(srv, "acme", "temp.v1", fixture="r8_layer1").status_code == 201
    with srv.client(srv.keys["acme"]) as c:
        r = c.delete("/v1/adapters/temp.v1")
        assert r.status_code == 200 and r.json() == {"id": "temp.v1", "object": "adapter", "deleted": True}
        err_of(c.get("/v1/adapters/temp.v1"), 404, "adapter_not_found")
        err_of(c.delete("/v1/adapters/temp.v1"), 404, "adapter_not_found")
    acme = srv.openai(srv.keys["acme"], tenant="acme")
    assert "temp.v1" not in [m.id for m in acme.models.list().data]
    with pytest.raises(openai.NotFoundError):
        acme.completions.create(model="temp.v1", prompt=[5, 6], max_tokens=2)
    # the name can be uploaded again: a new adapter, version 1
    r = upload(srv, "acme", "temp.v1", fixture="r8_layer1")
    assert r.status_code == 201 and r.json()["version"] == 1


def raw_multipart(b, name, cfg, w, preamble=b"", weights_pad=b""):
    return preamble + (f"--{b}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n{name}\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"config\"; filename=\"adapter_config.json\"\r\n"
            "Content-Type: application/json\r\n\r\n").encode() + cfg + \
        (f"\r\n--{b}\r\nContent-Disposition: form-data; name=\"weights\"; filename=\"adapter_model.safetensors\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n").encode() + w + weights_pad + f"\r\n--{b}--\r\n".encode()


@pytest.mark.parametrize("preamble", [4 * 2**20 - 200, 8 * 2**20 + 17], ids=["slice_edge_in_headers", "two_slices"])
def test_large_body_in_several_slices(srv, preamble):
    # the loop hands the body to the parser in 4 MiB slices: a preamble (ignored
    # by RFC 2046) moves the parts across slice boundaries
    cfg, w = fixture_files("r4_patterns")
    b = "sl1ceb0undary"
    body = raw_multipart(b, f"sliced-{preamble}", cfg, w, preamble=b"p" * preamble + b"\r\n")
    with srv.client(srv.keys["acme"]) as c:
        r = c.post("/v1/adapters", content=body, headers={"content-type": f"multipart/form-data; boundary={b}"})
    assert r.status_code == 201, r.text
    assert r.json()["digest"] == hashlib.sha256(cfg + w).hexdigest() and r.json()["rank"] == 12


def test_client_leaves_while_a_large_upload_is_processed(srv):
    # the whole body arrives, then the client closes at once: whether the
    # server notices before the end or not, nothing half-done stays
    cfg, w = fixture_files("r8_rslora_attn")
    b = "g0neb0undary"
    body = raw_multipart(b, "gone", cfg, w, weights_pad=b"\0" * (96 * 2**20))
    before = (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters")))
    host, port = srv.url.split("//")[1].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=srv.cert)
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            head = (f"POST /v1/adapters HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {srv.keys['acme']}\r\n"
                    f"Content-Type: multipart/form-data; boundary={b}\r\nContent-Length: {len(body)}\r\n\r\n")
            s.sendall(head.encode() + body)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if not [x for x in os.listdir(os.path.join(srv.data_dir, "tmp")) if x.startswith("upload-")]:
            break
        time.sleep(0.1)
    assert [x for x in os.listdir(os.path.join(srv.data_dir, "tmp")) if x.startswith("upload-")] == []
    assert (adapters_of(srv, "acme"), tree(os.path.join(srv.data_dir, "adapters"))) == before
    with srv.client(srv.keys["acme"]) as c:
        assert c.get("/v1/adapters").status_code == 200


def test_restart_keeps_adapters(srv):
    before = {t: adapters_of(srv, t) for t in ("acme", "beta")}
    assert srv.stop() == 0, srv.stderr()[-3000:]
    s2 = Serve(srv.tmp, TINY, "--max-lora-rank", "32")
    try:
        s2.keys = srv.keys
        after = {t: adapters_of(s2, t) for t in ("acme", "beta")}
        assert after == before
        out = s2.openai(srv.keys["acme"], tenant="acme").completions.create(model="support", prompt=[5, 6, 7],
                                                                           max_tokens=2, temperature=0)
        assert out.usage.completion_tokens >= 1
    finally:
        assert s2.stop() == 0, s2.stderr()[-3000:]
