"""
test_admin_api.py — the operator API of `loragate serve` (/admin/v1/...):
tenants, keys, pricing, limits and adapters on behalf of a tenant, against a
real server over TLS on 127.0.0.1 (tiny fixture model; serve_fixture.Serve).

What it shows:
  - only the operator key opens /admin/v1 (none, a wrong one or a tenant key:
    401 with an OpenAI error object);
  - a tenant and a key made here work at once with the official openai SDK
    at the tenant's own base URL; the secret is shown once, listings show
    only its prefix;
  - revoking a key gives 401 on the very next request; deleting a tenant
    makes all its keys fail at once and removes its adapters and its URL;
  - prices are exact decimals (strings or JSON numbers), limits null =
    unlimited, partial updates keep what they leave out;
  - bad input is a 400 naming the field, a duplicate name 409, an unknown
    tenant 404, a wrong Content-Type 415.
"""
import os
import subprocess

import pytest

from serve_fixture import ADMIN_KEY, LORA_FIX, LORAGATE, TINY, Serve

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("admin"), TINY, "--max-lora-rank", "32")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def err_of(r, status, code=None, param=None):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"} and e["message"]
    assert e["type"] == ("invalid_request_error" if status < 500 else "server_error") or status in (401, 403, 429)
    if code is not None:
        assert e["code"] == code, e
    if param is not None:
        assert e["param"] == param, e
    return e


def test_operator_key_required(srv):
    with srv.client() as c:
        err_of(c.get("/admin/v1/tenants"), 401, "invalid_api_key")
    with srv.client("lg-admin-" + "x" * 43) as c:
        err_of(c.get("/admin/v1/tenants"), 401, "invalid_api_key")
    srv.tenant("keyonly")
    k = srv.key("keyonly")
    with srv.client(k) as c:  # a tenant key is not the operator key
        err_of(c.get("/admin/v1/tenants"), 401, "invalid_api_key")
        err_of(c.post("/admin/v1/tenants", json={"name": "evil"}), 401)


def test_create_tenant_and_key_then_use_it(srv):
    r = srv.admin.post("/admin/v1/tenants", json={"name": "acme", "weight": 3})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["object"] == "tenant" and t["id"] == "acme" and t["name"] == "acme" and t["weight"] == 3
    assert t["base_path"] == "/t/acme/v1" and t["pricing"]["source"] == "default"
    assert t["limits"] == {"requests_per_minute": None, "tokens_per_minute": None, "concurrent_requests": None,
                           "monthly_token_budget": None}
    assert isinstance(t["created_at"], int) and t["created_at"] > 1.6e9

    r = srv.admin.post("/admin/v1/tenants/acme/keys", json={"name": "dev", "scopes": ["inference", "adapters"]})
    assert r.status_code == 201, r.text
    k = r.json()
    assert k["object"] == "api_key" and k["key"].startswith("lg-") and len(k["key"]) == 46
    assert k["id"].startswith("key_") and k["name"] == "dev" and k["scopes"] == ["inference", "adapters"]
    assert k["tenant"] == "acme" and isinstance(k["created_at"], int)

    # the openai SDK at the tenant's own URL, with the new key, at once
    client = srv.openai(k["key"], tenant="acme")
    assert [m.id for m in client.models.list().data] == ["base"]
    out = client.completions.create(model="base", prompt=[5, 6, 7], max_tokens=2, temperature=0)
    assert out.usage.prompt_tokens == 3

    # listings never show the secret again
    r = srv.admin.get("/admin/v1/tenants/acme/keys")
    assert r.status_code == 200
    keys = r.json()["data"]
    assert [x["id"] for x in keys] == [k["id"]]
    assert "key" not in keys[0] and keys[0]["prefix"] == k["key"][:11]
    assert k["key"] not in r.text

    # tenant listing and lookup
    names = [x["name"] for x in srv.admin.get("/admin/v1/tenants").json()["data"]]
    assert "acme" in names and names == sorted(names)
    assert srv.admin.get("/admin/v1/tenants/acme").json()["weight"] == 3


def test_curl_copy_paste_form_content_type(srv):
    # what `serve` prints: curl -d without a Content-Type (application/x-www-form-urlencoded)
    out = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", srv.cert, "-H",
                          f"Authorization: Bearer {ADMIN_KEY}", srv.url + "/admin/v1/tenants",
                          "-d", '{"name":"curlco"}', "-w", "\n%{http_code}"],
                         capture_output=True, text=True, timeout=20)
    body, code = out.stdout.rsplit("\n", 1)
    assert code == "201", out.stdout + out.stderr
    assert '"name":"curlco"' in body.replace(" ", "")


@pytest.mark.parametrize("body,status,code,param", [
    ({}, 400, "missing_required_parameter", "name"),
    ({"name": 5}, 400, "invalid_type", "name"),
    ({"name": "Bad Name"}, 400, "invalid_value", "name"),
    ({"name": "-x"}, 400, "invalid_value", "name"),
    ({"name": "x" * 64}, 400, "invalid_value", "name"),
    ({"name": "okname", "frobnicate": 1}, 400, "unknown_parameter", "frobnicate"),
    ({"name": "okname", "weight": 0}, 400, "invalid_value", "weight"),
    ({"name": "okname", "weight": "2"}, 400, "invalid_value", "weight"),
    ({"name": "okname", "pricing": {"input_per_mtok": "0.0000001"}}, 400, "invalid_value", "input_per_mtok"),
    ({"name": "okname", "pricing": {"input_per_mtok": -1}}, 400, "invalid_value", "input_per_mtok"),
    ({"name": "okname", "pricing": {"bogus": 1}}, 400, "unknown_parameter", "bogus"),
    ({"name": "okname", "pricing": 3}, 400, "invalid_type", "pricing"),
    ({"name": "okname", "limits": {"requests_per_minute": -5}}, 400, "invalid_value", "requests_per_minute"),
    ({"name": "okname", "limits": {"requests_per_minute": 1.5}}, 400, "invalid_value", "requests_per_minute"),
])
def test_create_tenant_invalid(srv, body, status, code, param):
    err_of(srv.admin.post("/admin/v1/tenants", json=body), status, code, param)
    assert srv.admin.get("/admin/v1/tenants/okname").status_code == 404


def test_malformed_bodies(srv):
    err_of(srv.admin.post("/admin/v1/tenants", content=b'{"name": ', headers={"content-type": "application/json"}),
           400)
    err_of(srv.admin.post("/admin/v1/tenants", content=b'{"name":"a","name":"b"}',
                          headers={"content-type": "application/json"}), 400)
    err_of(srv.admin.post("/admin/v1/tenants", content=b"[1]", headers={"content-type": "application/json"}), 400)
    err_of(srv.admin.post("/admin/v1/tenants", content=b'{"name":"x"}', headers={"content-type": "text/plain"}),
           415, "unsupported_media_type")
    err_of(srv.admin.post("/admin/v1/tenants"), 400)  # no body
    err_of(srv.admin.delete("/admin/v1/tenants"), 405)
    err_of(srv.admin.get("/admin/v1/nothing"), 404)


def test_duplicate_and_unknown_tenant(srv):
    srv.tenant("dupco")
    err_of(srv.admin.post("/admin/v1/tenants", json={"name": "dupco"}), 409, "tenant_exists", "name")
    for method, path, body in [("GET", "/admin/v1/tenants/nope", None), ("DELETE", "/admin/v1/tenants/nope", None),
                               ("POST", "/admin/v1/tenants/nope/keys", {"scopes": ["inference"]}),
                               ("GET", "/admin/v1/tenants/nope/keys", None),
                               ("PUT", "/admin/v1/tenants/nope/limits", {"requests_per_minute": 1}),
                               ("GET", "/admin/v1/tenants/nope/adapters", None),
                               ("DELETE", "/admin/v1/keys/key_aaaaaaaaaaaaaaaa", None)]:
        r = srv.admin.request(method, path, json=body)
        err_of(r, 404)


def test_key_scopes_validation_and_default(srv):
    srv.tenant("scopeco")
    for scopes in [[], ["admin"], ["inference", "inference"], "inference", [1]]:
        err_of(srv.admin.post("/admin/v1/tenants/scopeco/keys", json={"scopes": scopes}), 400, "invalid_value",
               "scopes")
    r = srv.admin.post("/admin/v1/tenants/scopeco/keys", json={})
    assert r.status_code == 201 and r.json()["scopes"] == ["inference"] and r.json()["name"] == ""
    inf_only = r.json()["key"]
    # inference only: 403 on the adapter API, 200 on models
    with srv.client(inf_only) as c:
        e = err_of(c.get("/v1/adapters"), 403)
        assert "adapters" in e["message"]
        assert c.get("/v1/models").status_code == 200
    ad_only = srv.key("scopeco", ["adapters"])
    with srv.client(ad_only) as c:
        assert c.get("/v1/adapters").status_code == 200
        err_of(c.get("/v1/models"), 403)


def test_revoked_key_fails_on_next_request(srv):
    srv.tenant("revco")
    r = srv.admin.post("/admin/v1/tenants/revco/keys", json={"name": "soon-gone", "scopes": ["inference"]})
    k = r.json()
    keep = srv.key("revco", ["inference"])
    # a keep-alive connection on each protocol, used before and after the revocation
    with srv.client(k["key"]) as c1, srv.client(k["key"], http2=True) as c2:
        assert c1.get("/v1/models").status_code == 200
        assert c2.get("/t/revco/v1/models").status_code == 200
        r = srv.admin.delete(f"/admin/v1/keys/{k['id']}")
        assert r.status_code == 200 and r.json() == {"id": k["id"], "object": "api_key", "deleted": True}
        err_of(c1.get("/v1/models"), 401, "invalid_api_key")
        err_of(c2.get("/t/revco/v1/models"), 401, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        srv.openai(k["key"], tenant="revco").models.list()
    assert srv.openai(keep, tenant="revco").models.list().data[0].id == "base"
    err_of(srv.admin.delete(f"/admin/v1/keys/{k['id']}"), 404, "key_not_found")
    listed = srv.admin.get("/admin/v1/tenants/revco/keys").json()["data"]
    assert k["id"] not in [x["id"] for x in listed]
    listed = srv.admin.get("/admin/v1/tenants/revco/keys?include_revoked=true").json()["data"]
    gone = [x for x in listed if x["id"] == k["id"]]
    assert gone and gone[0]["revoked_at"] >= gone[0]["created_at"]


def test_tenant_delete_revokes_keys_and_removes_adapters(srv):
    srv.tenant("delco")
    k = srv.key("delco")
    srv.import_adapter("delco", "helper", os.path.join(LORA_FIX, "r8_rslora_attn"))
    with srv.client(k) as c:
        assert c.get("/t/delco/v1/models").status_code == 200
        r = srv.admin.delete("/admin/v1/tenants/delco")
        assert r.status_code == 200 and r.json() == {"id": "delco", "object": "tenant", "deleted": True}
        err_of(c.get("/v1/models"), 401, "invalid_api_key")                 # the same connection, at once
        err_of(c.get("/t/delco/v1/models"), 401, "invalid_api_key")      # a deleted tenant is not confirmed
    err_of(srv.admin.get("/admin/v1/tenants/delco"), 404)
    assert "delco" not in [x["name"] for x in srv.admin.get("/admin/v1/tenants").json()["data"]]
    # the name can be used again, and the new tenant starts empty
    srv.tenant("delco")
    k2 = srv.key("delco")
    ids = [m.id for m in srv.openai(k2, tenant="delco").models.list().data]
    assert ids == ["base"]
    assert srv.admin.get("/admin/v1/tenants/delco/adapters").json()["data"] == []
    with pytest.raises(openai.AuthenticationError):
        srv.openai(k, tenant="delco").models.list()


def test_pricing_exact_and_partial(srv):
    srv.tenant("payco")
    r = srv.admin.put("/admin/v1/tenants/payco/pricing",
                      json={"input_per_mtok": "0.15", "cached_input_per_mtok": 0.075, "output_per_mtok": 0.6})
    assert r.status_code == 200, r.text
    assert r.json()["pricing"] == {"input_per_mtok": "0.15", "cached_input_per_mtok": "0.075",
                                   "output_per_mtok": "0.6", "source": "tenant"}
    # partial: the others stay
    r = srv.admin.put("/admin/v1/tenants/payco/pricing", json={"output_per_mtok": "1.234567"})
    assert r.json()["pricing"]["output_per_mtok"] == "1.234567"
    assert r.json()["pricing"]["input_per_mtok"] == "0.15"
    for body, param in [({"input_per_mtok": "1.2345678"}, "input_per_mtok"), ({"output_per_mtok": "-1"}, "output_per_mtok"),
                        ({"output_per_mtok": 1e300}, "output_per_mtok"), ({"input_per_mtok": True}, "input_per_mtok"),
                        ({"price": 1}, "price")]:
        err_of(srv.admin.put("/admin/v1/tenants/payco/pricing", json=body), 400, None, param)
    assert srv.admin.get("/admin/v1/tenants/payco").json()["pricing"]["output_per_mtok"] == "1.234567"
    # back to the server default
    r = srv.admin.delete("/admin/v1/tenants/payco/pricing")
    assert r.status_code == 200 and r.json()["pricing"]["source"] == "default"


def test_default_pricing(srv):
    r = srv.admin.get("/admin/v1/pricing")
    assert r.status_code == 200 and r.json()["object"] == "pricing"
    r = srv.admin.put("/admin/v1/pricing", json={"input_per_mtok": "2", "cached_input_per_mtok": "0.5",
                                                 "output_per_mtok": "8"})
    assert r.status_code == 200, r.text
    assert r.json() == {"object": "pricing", "input_per_mtok": "2", "cached_input_per_mtok": "0.5",
                        "output_per_mtok": "8"}
    assert srv.admin.get("/admin/v1/pricing").json()["output_per_mtok"] == "8"
    srv.tenant("defco")
    t = srv.admin.get("/admin/v1/tenants/defco").json()
    assert t["pricing"] == {"input_per_mtok": "2", "cached_input_per_mtok": "0.5", "output_per_mtok": "8",
                            "source": "default"}
    err_of(srv.admin.put("/admin/v1/pricing", json={"input_per_mtok": "abc"}), 400, "invalid_value",
           "input_per_mtok")


def test_limits_and_weight(srv):
    srv.tenant("limco", limits={"requests_per_minute": 600})
    r = srv.admin.put("/admin/v1/tenants/limco/limits", json={"tokens_per_minute": 100000,
                                                              "monthly_token_budget": 5000000})
    assert r.status_code == 200, r.text
    assert r.json()["limits"] == {"requests_per_minute": 600, "tokens_per_minute": 100000,
                                  "concurrent_requests": None, "monthly_token_budget": 5000000}
    r = srv.admin.put("/admin/v1/tenants/limco/limits", json={"requests_per_minute": None})
    assert r.json()["limits"]["requests_per_minute"] is None and r.json()["limits"]["tokens_per_minute"] == 100000
    err_of(srv.admin.put("/admin/v1/tenants/limco/limits", json={"concurrent_requests": "3"}), 400, "invalid_value",
           "concurrent_requests")
    err_of(srv.admin.put("/admin/v1/tenants/limco/limits", json={"rpm": 3}), 400, "unknown_parameter", "rpm")
    r = srv.admin.patch("/admin/v1/tenants/limco", json={"weight": 7})
    assert r.status_code == 200 and r.json()["weight"] == 7 and r.json()["limits"]["tokens_per_minute"] == 100000


def test_admin_adapters_on_behalf_of_tenant(srv):
    srv.tenant("opsco")
    k = srv.key("opsco")
    a = srv.import_adapter("opsco", "ops-helper", os.path.join(LORA_FIX, "r16_all_linear"))
    assert a["object"] == "adapter" and a["owned_by"] == "opsco" and a["version"] == 1 and a["rank"] == 16
    r = srv.admin.get("/admin/v1/tenants/opsco/adapters")
    assert [x["name"] for x in r.json()["data"]] == ["ops-helper"]
    assert srv.admin.get("/admin/v1/tenants/opsco/adapters/ops-helper").json()["digest"] == a["digest"]
    assert "ops-helper" in [m.id for m in srv.openai(k, tenant="opsco").models.list().data]
    # import errors: not a directory, not an adapter, rank over --max-lora-rank, bad name
    err_of(srv.admin.post("/admin/v1/tenants/opsco/adapters/import", json={"name": "x", "path": "/nonexistent"}),
           400, "invalid_value", "path")
    err_of(srv.admin.post("/admin/v1/tenants/opsco/adapters/import", json={"name": "x", "path": TINY}), 400)
    e = err_of(srv.admin.post("/admin/v1/tenants/opsco/adapters/import",
                              json={"name": "big", "path": os.path.join(LORA_FIX, "r64_mlp")}), 400,
               "invalid_adapter")
    assert "rank" in e["message"]
    err_of(srv.admin.post("/admin/v1/tenants/opsco/adapters/import",
                          json={"name": "no/slash", "path": os.path.join(LORA_FIX, "r1_qv")}), 400, None, "name")
    err_of(srv.admin.post("/admin/v1/tenants/opsco/adapters/import", json={"name": "x"}), 400, None, "path")
    assert [x["name"] for x in srv.admin.get("/admin/v1/tenants/opsco/adapters").json()["data"]] == ["ops-helper"]
    r = srv.admin.delete("/admin/v1/tenants/opsco/adapters/ops-helper")
    assert r.status_code == 200 and r.json()["deleted"] is True
    err_of(srv.admin.get("/admin/v1/tenants/opsco/adapters/ops-helper"), 404, "adapter_not_found")
    assert [m.id for m in srv.openai(k, tenant="opsco").models.list().data] == ["base"]
