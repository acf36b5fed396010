"""
test_usage.py — the usage views (GET /v1/usage, GET /admin/v1/usage) of a
real `loragate serve` (the tiny fixture model with PEFT adapters, TLS),
checked against the usage ledger's records read straight from SQLite:

  - the cost of a request with cached prompt tokens equals the issue's
    formula at the tenant's prices, exactly (integer pico-USD);
  - totals by day, by hour, by model (= adapter) and by API key equal the
    sums of the records; input_tokens includes the cached ones; cost.value
    is the exact decimal sum; the shape is OpenAI's (page, bucket, result);
  - the operator sees every tenant (group_by tenant / project_id), a tenant
    only itself; CSV equals JSON; paging with limit/next_page covers the
    range exactly once; bad parameters are 400s that name them.
"""
import csv
import io
import json
import os
import time
from collections import defaultdict

import pytest

from metering_util import cost_pico, micro, need_admin_api, set_pricing, tenant_id, usd
from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve

pytestmark = pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")

with open(os.path.join(LORA_FIX, "reference.json")) as f:
    REF = json.load(f)
ADAPTER = "r8_rslora_attn"
P29 = next(c["ids"] for c in REF["cases"] if c["adapter"] is None and len(c["ids"]) == 29)
P11 = next(c["ids"] for c in REF["cases"] if c["adapter"] is None and len(c["ids"]) == 11)
ACME_PRICES = ("0.15", "0.075", "0.6")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("usage"), TINY, "--max-lora-rank", "16")
    try:
        need_admin_api(s)
        s.tenant("acme")
        s.tenant("beta")
        set_pricing(s, "acme", *ACME_PRICES)
        r = s.admin.put("/admin/v1/pricing", json={"input_per_mtok": "1", "cached_input_per_mtok": "0.5",
                                                   "output_per_mtok": "2"})
        assert r.status_code == 200, r.text
        s.keys = {"k1": s.key("acme", name="k1"), "k2": s.key("acme", name="k2"), "k3": s.key("beta", name="k3")}
        s.import_adapter("acme", ADAPTER, os.path.join(LORA_FIX, REF["adapters"][ADAPTER]["dir"]))
        k1 = s.openai(s.keys["k1"], tenant="acme")
        k2 = s.openai(s.keys["k2"], tenant="acme")
        k3 = s.openai(s.keys["k3"], tenant="beta")
        s.responses = []
        for _ in range(2):  # the second one reads the first's full page from the prefix cache
            s.responses.append(k1.completions.create(model="base", prompt=P29, max_tokens=5, temperature=0))
        s.responses.append(k2.completions.create(model=ADAPTER, prompt=P29, max_tokens=3, temperature=0))
        s.responses.append(k2.completions.create(model=ADAPTER, prompt=P11, max_tokens=4, temperature=0))
        chunks = list(k1.completions.create(model="base", prompt=P11, max_tokens=6, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None
        k3.completions.create(model="base", prompt=P29, max_tokens=2, temperature=0)
        deadline = time.monotonic() + 10
        while len(s.ledger()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.ledger()) == 6
        s.ids = {"acme": tenant_id(s, "acme"), "beta": tenant_id(s, "beta")}
        key_ids = {}
        for t in ("acme", "beta"):
            for k in s.admin.get(f"/admin/v1/tenants/{t}/keys").json()["data"]:
                key_ids[k["name"]] = k["id"]
        s.key_ids = key_ids
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


def usage(s, key, params, admin=False, tenant=None):
    path = "/admin/v1/usage" if admin else (f"/t/{tenant}/v1/usage" if tenant else "/v1/usage")
    with s.client(key) as c:
        return c.get(path, params=params)


def day_start(rows):
    return min(r["received_at"] for r in rows) // 1000 // 86400 * 86400


def sums(rows, key):
    out = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in rows:
        o = out[key(r)]
        o[0] += r["prompt_tokens"]
        o[1] += r["cached_tokens"]
        o[2] += r["completion_tokens"]
        o[3] += 1
        o[4] += r["cost_pico"]
    return dict(out)


def as_tuple(res):
    return [res["input_tokens"], res["input_cached_tokens"], res["output_tokens"], res["num_model_requests"],
            res["cost"]["value"]]


def want(v):
    return v[:4] + [usd(v[4])]


def test_cost_of_cached_request_equals_formula(tiny):
    rows = tiny.ledger("tenant_id = ?", (tiny.ids["acme"],))
    prices = tuple(micro(p) for p in ACME_PRICES)
    second = tiny.responses[1]
    assert second.usage.prompt_tokens_details.cached_tokens == 16  # one full page of the 29-token prompt
    rec = [r for r in rows if r["request_id"].endswith(second.id.split("-", 1)[1])]
    assert len(rec) == 1
    rec = rec[0]
    assert (rec["prompt_tokens"], rec["cached_tokens"], rec["completion_tokens"]) == \
        (second.usage.prompt_tokens, second.usage.prompt_tokens_details.cached_tokens, second.usage.completion_tokens)
    assert rec["cost_pico"] == cost_pico(prices, rec["prompt_tokens"], rec["cached_tokens"], rec["completion_tokens"])
    # every record of both tenants, at the prices that applied
    beta_prices = (micro("1"), micro("0.5"), micro("2"))
    for r in tiny.ledger():
        p = prices if r["tenant_id"] == tiny.ids["acme"] else beta_prices
        assert r["cost_pico"] == cost_pico(p, r["prompt_tokens"], r["cached_tokens"], r["completion_tokens"])


def test_tenant_usage_by_model_and_key_equals_records(tiny):
    rows = tiny.ledger("tenant_id = ?", (tiny.ids["acme"],))
    start = day_start(rows)
    r = usage(tiny, tiny.keys["k1"], {"start_time": start, "group_by": ["model", "api_key_id"]}, tenant="acme")
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["object"] == "page" and page["has_more"] is False and page["next_page"] is None
    got = {}
    for b in page["data"]:
        assert b["object"] == "bucket" and b["end_time"] - b["start_time"] == 86400
        for res in b["results"]:
            assert res["object"] == "organization.usage.completions.result"
            assert res["project_id"] is None
            got[(b["start_time"], res["model"], res["api_key_id"])] = as_tuple(res)
    exp = sums(rows, lambda r: (r["received_at"] // 1000 // 86400 * 86400, r["model"], r["key_id"]))
    assert got == {k: want(v) for k, v in exp.items()}
    # the adapter and the base model are separate models; both keys appear
    assert {k[1] for k in got} == {"base", ADAPTER}
    assert {k[2] for k in got} == {tiny.key_ids["k1"], tiny.key_ids["k2"]}

    # no grouping: one result per bucket, the totals; input includes cached
    r = usage(tiny, tiny.keys["k2"], {"start_time": start})
    tot = [res for b in r.json()["data"] for res in b["results"]]
    assert len(tot) == 1 and tot[0]["model"] is None and tot[0]["api_key_id"] is None
    all_ = sums(rows, lambda r: 0)[0]
    assert as_tuple(tot[0]) == want(all_)
    assert tot[0]["input_tokens"] == sum(x["prompt_tokens"] for x in rows) > tot[0]["input_cached_tokens"] > 0


def test_hourly_buckets_equal_records(tiny):
    rows = tiny.ledger("tenant_id = ?", (tiny.ids["acme"],))
    start = min(r["received_at"] for r in rows) // 1000 // 3600 * 3600 - 3600
    r = usage(tiny, tiny.keys["k1"], {"start_time": start, "bucket_width": "1h", "group_by": "model", "limit": 48})
    assert r.status_code == 200, r.text
    got = {}
    for b in r.json()["data"]:
        assert b["end_time"] - b["start_time"] == 3600 and b["start_time"] % 3600 == 0
        for res in b["results"]:
            got[(b["start_time"], res["model"])] = as_tuple(res)
    exp = sums(rows, lambda r: (r["received_at"] // 1000 // 3600 * 3600, r["model"]))
    assert got == {k: want(v) for k, v in exp.items()}
    assert r.json()["data"][0]["results"] == []  # the hour before the first record is there, empty


def test_operator_sees_every_tenant(tiny):
    rows = tiny.ledger()
    start = day_start(rows)
    for g in ("tenant", "project_id"):
        assert usage(tiny, None, {"start_time": start, "group_by": g}, admin=True).status_code == 401
        r = tiny.admin.get("/admin/v1/usage", params={"start_time": start, "group_by": g})
        assert r.status_code == 200, r.text
        got = {}
        for b in r.json()["data"]:
            for res in b["results"]:
                assert res["project_id"] == res["tenant"]
                got[(b["start_time"], res["tenant_id"], res["tenant"])] = as_tuple(res)
        names = {tiny.ids["acme"]: "acme", tiny.ids["beta"]: "beta"}
        exp = sums(rows, lambda r: (r["received_at"] // 1000 // 86400 * 86400, r["tenant_id"], names[r["tenant_id"]]))
        assert got == {k: want(v) for k, v in exp.items()}
    # a tenant key is not the operator's, and the operator key is no tenant key
    assert usage(tiny, tiny.keys["k1"], {"start_time": start}, admin=True).status_code == 401
    assert tiny.admin.get("/v1/usage", params={"start_time": start}).status_code == 401


def test_tenant_sees_only_itself(tiny):
    rows = tiny.ledger("tenant_id = ?", (tiny.ids["beta"],))
    start = day_start(tiny.ledger())
    r = usage(tiny, tiny.keys["k3"], {"start_time": start})
    tot = [res for b in r.json()["data"] for res in b["results"]]
    assert len(tot) == 1 and as_tuple(tot[0]) == want(sums(rows, lambda r: 0)[0])
    # another tenant's base URL with this key: refused
    assert usage(tiny, tiny.keys["k3"], {"start_time": start}, tenant="acme").status_code == 401
    r = usage(tiny, tiny.keys["k3"], {"start_time": start, "group_by": "tenant"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "group_by"


def test_csv_equals_json(tiny):
    start = day_start(tiny.ledger())
    params = {"start_time": start, "group_by": ["tenant", "model", "api_key_id"]}
    j = tiny.admin.get("/admin/v1/usage", params=params).json()
    r = tiny.admin.get("/admin/v1/usage", params={**params, "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    lines = list(csv.DictReader(io.StringIO(r.text)))
    from_json = sorted((b["start_time"], res["tenant"], res["model"], res["api_key_id"], *as_tuple(res))
                       for b in j["data"] for res in b["results"])
    from_csv = sorted((int(l["start_time"]), l["tenant"], l["model"], l["api_key_id"], int(l["input_tokens"]),
                       int(l["input_cached_tokens"]), int(l["output_tokens"]), int(l["num_model_requests"]),
                       l["cost_usd"]) for l in lines)
    assert from_csv == from_json and len(from_csv) == 3  # acme base k1, acme adapter k2, beta base k3


def test_paging_covers_the_range_once(tiny):
    rows = tiny.ledger()
    now = int(time.time())
    start = now // 3600 * 3600 - 5 * 3600
    params = {"start_time": start, "end_time": now + 1, "bucket_width": "1h", "limit": 2}
    buckets, pages = [], 0
    while True:
        r = tiny.admin.get("/admin/v1/usage", params=params)
        assert r.status_code == 200, r.text
        p = r.json()
        assert len(p["data"]) <= 2
        buckets += p["data"]
        pages += 1
        if not p["has_more"]:
            break
        params["page"] = p["next_page"]
        assert pages < 10
    starts = [b["start_time"] for b in buckets]
    assert starts == sorted(set(starts)) and starts[0] == start and len(starts) == 6 and pages == 3
    n = sum(res["num_model_requests"] for b in buckets for res in b["results"])
    assert n == len([r for r in rows if r["received_at"] // 1000 >= start])
    # the default page is OpenAI's: 7 daily buckets
    r = tiny.admin.get("/admin/v1/usage", params={"start_time": now - 30 * 86400})
    assert len(r.json()["data"]) == 7 and r.json()["has_more"] is True


@pytest.mark.parametrize("params,param", [
    ({}, "start_time"),
    ({"start_time": "yesterday"}, "start_time"),
    ({"start_time": 0, "bucket_width": "1m"}, "bucket_width"),
    ({"start_time": 0, "group_by": "user_id"}, "group_by"),
    ({"start_time": 0, "models": "base"}, "models"),
    ({"start_time": 100, "end_time": 50}, "end_time"),
    ({"start_time": 0, "limit": 0}, "limit"),
    ({"start_time": 0, "format": "xml"}, "format"),
])
def test_bad_parameters_are_named(tiny, params, param):
    r = usage(tiny, tiny.keys["k1"], params)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
