"""
test_usage_page.py — the usage page (GET /usage) in a real browser: headless
Chromium (Debian `chromium`) driven over the DevTools protocol signs in
through the form, the page is screenshotted, and what it shows is checked
against the usage ledger read straight from SQLite:

  - a tenant key: the totals, the per-day, per-key and per-adapter tables
    and the chart bars equal the records; the chart is really drawn (pixels
    of each bar colour in a screenshot of it); the stylesheet applied under
    the Content-Security-Policy; nothing was loaded from anywhere; the
    session cookie is HttpOnly (invisible to scripts) and the key is in no
    URL;
  - the operator key: every tenant, and one tenant's page by ?tenant=; the
    top adapters keep tenants apart (two tenants on the base model are two
    rows, each named by its tenant, with that tenant's figures; a deleted
    tenant whose name was reused is told apart by its id);
  - the charts use their card's width (viewBox, width 100%, the viewBox's
    aspect ratio) at a wide and a narrow window;
  - a wrong key is refused; sign-out and a revoked key end the session; a
    cross-origin POST is refused.
Skipped, saying why, only when no Chromium can be found.
"""
import json
import os
import time

import pytest

from metering_util import (Chrome, chromium_binary, count_color, need_admin_api, set_pricing, tenant_id, usd)
from serve_fixture import LORA_FIX, LORAGATE, TINY, Serve

pytestmark = [
    pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built"),
    pytest.mark.skipif(chromium_binary() is None,
                       reason="no chromium binary: install Debian package `chromium` (tests/install-test-deps.sh does)"),
]

with open(os.path.join(LORA_FIX, "reference.json")) as f:
    REF = json.load(f)
ADAPTER = "r16_all_linear"
P29 = next(c["ids"] for c in REF["cases"] if c["adapter"] is None and len(c["ids"]) == 29)
P11 = next(c["ids"] for c in REF["cases"] if c["adapter"] is None and len(c["ids"]) == 11)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Serve(tmp_path_factory.mktemp("page"), TINY, "--max-lora-rank", "16")
    try:
        need_admin_api(s)
        s.tenant("acme")
        s.tenant("beta")
        set_pricing(s, "acme", "0.15", "0.075", "0.6")
        set_pricing(s, "beta", "3", "1", "9")
        s.keys = {"k1": s.key("acme", name="k1"), "k2": s.key("acme", name="k2"), "k3": s.key("beta", name="k3")}
        s.import_adapter("acme", ADAPTER, os.path.join(LORA_FIX, REF["adapters"][ADAPTER]["dir"]))
        k1 = s.openai(s.keys["k1"], tenant="acme")
        k2 = s.openai(s.keys["k2"], tenant="acme")
        k3 = s.openai(s.keys["k3"], tenant="beta")
        for _ in range(3):
            k1.completions.create(model="base", prompt=P29, max_tokens=6, temperature=0)
        k2.completions.create(model=ADAPTER, prompt=P29, max_tokens=4, temperature=0)
        k2.completions.create(model=ADAPTER, prompt=P11, max_tokens=9, temperature=0)
        k3.completions.create(model="base", prompt=P11, max_tokens=3, temperature=0)
        deadline = time.monotonic() + 10
        while len(s.ledger()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.ledger()) == 6
        yield s
    finally:
        assert s.stop() == 0, s.stderr()[-3000:]


@pytest.fixture
def chrome(tmp_path):
    c = Chrome(tmp_path)
    try:
        c.call("Page.enable")
        c.call("Runtime.enable")
        yield c
    finally:
        c.close()


def sign_in(chrome, srv, key):
    chrome.navigate(srv.url + "/usage")
    assert chrome.eval("!!document.querySelector('form[action=\"/usage/login\"] input[name=key]')")
    chrome.events.clear()
    chrome.eval("document.getElementById('key').value = %s; document.querySelector('form').submit(); 1"
                % json.dumps(key))
    chrome.wait_event("Page.loadEventFired")


def totals(rows):
    t = {"num_model_requests": len(rows), "input_tokens": sum(r["prompt_tokens"] for r in rows),
         "input_cached_tokens": sum(r["cached_tokens"] for r in rows),
         "output_tokens": sum(r["completion_tokens"] for r in rows), "cost": usd(sum(r["cost_pico"] for r in rows))}
    return {k: str(v) for k, v in t.items()}


def row_cells(chrome, selector):
    """{data-k: data-v} of the cells of each row matching selector, keyed by the row's first cell text."""
    return chrome.eval("""
      Object.fromEntries([...document.querySelectorAll(%s)].map(tr => [tr.cells[0].textContent.trim(),
        Object.fromEntries([...tr.querySelectorAll('td[data-k]')].map(td => [td.dataset.k, td.dataset.v]))]))
    """ % json.dumps(selector))


def test_tenant_page_shows_the_ledger(srv, chrome, tmp_path):
    sign_in(chrome, srv, srv.keys["k1"])
    assert chrome.eval("document.title") == "loragate usage: acme"
    # the key went in a POST body: no URL has it, and scripts cannot read the session cookie
    assert chrome.eval("location.href") == srv.url + "/usage"
    assert chrome.eval("document.cookie") == ""
    cookies = chrome.call("Storage.getCookies")["cookies"]
    sess = [c for c in cookies if c["name"] == "__Host-lg_usage"]
    assert len(sess) == 1 and sess[0]["httpOnly"] and sess[0]["secure"] and sess[0]["sameSite"] == "Strict"
    assert srv.keys["k1"] not in json.dumps(cookies)
    # inline stylesheet allowed by the CSP hash; nothing fetched from anywhere
    assert chrome.eval("getComputedStyle(document.body).backgroundColor") == "rgb(245, 246, 248)"
    assert chrome.eval("performance.getEntriesByType('resource').length") == 0, \
        chrome.eval("JSON.stringify(performance.getEntriesByType('resource'))")
    assert chrome.eval("document.scripts.length") == 0
    # the page's icon is inline: the browser asked the server only for the page and the sign-in
    icon = chrome.eval("document.querySelector('link[rel=icon]').href")
    assert icon.startswith("data:image/svg+xml,")

    acme = srv.ledger("tenant_id = ?", (tenant_id(srv, "acme"),))
    want = totals(acme)
    assert chrome.eval("document.getElementById('total-requests').dataset.v") == want["num_model_requests"]
    assert chrome.eval("document.getElementById('total-cost').dataset.v") == want["cost"]
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in acme)
    assert chrome.eval("document.getElementById('total-tokens').dataset.v") == str(tokens)
    share = 100 * sum(r["cached_tokens"] for r in acme) / sum(r["prompt_tokens"] for r in acme)
    assert abs(float(chrome.eval("document.getElementById('cached-share').dataset.v")) - share) < 1e-3
    assert share > 0
    assert chrome.eval("document.getElementById('total-cost').querySelector('.v').textContent").startswith("$")

    # by day (the records are today's), total row, by key, by adapter
    today = time.strftime("%Y-%m-%d", time.gmtime(acme[0]["received_at"] / 1000))
    days = row_cells(chrome, "#days tr[data-day]")
    assert days[today] == want
    assert sum(int(d["num_model_requests"]) for d in days.values()) == len(acme)
    assert row_cells(chrome, "#total-row")["Total"] == want
    key_ids = {k["name"]: k["id"] for k in srv.admin.get("/admin/v1/tenants/acme/keys").json()["data"]}
    by_key = row_cells(chrome, "#keys tr[data-key]")
    assert by_key == {key_ids[n]: totals([r for r in acme if r["key_id"] == key_ids[n]]) for n in ("k1", "k2")}
    by_adapter = row_cells(chrome, "#adapters tr[data-adapter]")
    assert by_adapter == {"base model": totals([r for r in acme if r["adapter_name"] is None]),
                          ADAPTER: totals([r for r in acme if r["adapter_name"] == ADAPTER])}
    assert srv.keys["k3"] not in chrome.eval("document.documentElement.outerHTML")
    assert "beta" not in chrome.eval("document.body.innerText")

    # the charts: today's stacked bar holds exactly the day's tokens, the cost bar the day's cost
    bars = chrome.eval("[...document.querySelectorAll('#chart-tokens rect.bar-tokens')]"
                       ".map(r => [r.dataset.day, +r.dataset.part, +r.dataset.v])")
    assert {d for d, _, _ in bars} == {today}
    parts = {p: v for _, p, v in bars}
    cached = sum(r["cached_tokens"] for r in acme)
    assert parts == {0: sum(r["prompt_tokens"] for r in acme) - cached, 1: cached,
                     2: sum(r["completion_tokens"] for r in acme)}
    assert chrome.eval("[...document.querySelectorAll('#chart-cost rect.bar-cost')].map(r => r.dataset.v)") == \
        [want["cost"]]
    assert chrome.eval("document.querySelectorAll('#chart-adapters rect.bar-adapter').length") == 2

    # screenshots: the whole page, and the tokens chart whose bars must be drawn in their colours
    full = chrome.screenshot(str(tmp_path / "usage-acme.png"))
    assert len(full) > 20000
    box = chrome.eval("(() => { const b = document.getElementById('chart-tokens').getBoundingClientRect();"
                      " return {x: b.x + scrollX, y: b.y + scrollY, width: b.width, height: b.height}; })()")
    chart = chrome.screenshot(str(tmp_path / "usage-acme-tokens.png"), clip=box)
    for rgb in ((0x4c, 0x78, 0xa8), (0x72, 0xb7, 0xb2), (0xf5, 0x85, 0x18)):
        assert count_color(chart, rgb) > 20, f"no pixels of bar colour {rgb} in the tokens chart"
    print(f"screenshots: {tmp_path / 'usage-acme.png'} {tmp_path / 'usage-acme-tokens.png'}")
    with open(os.path.join(os.path.dirname(srv.data_dir), "access.log")) as f:
        asked = {json.loads(line)["path"] for line in f}
    assert "/favicon.ico" not in asked and "/usage/login" in asked

    # sign out: the cookie's session is gone on the server too
    chrome.events.clear()
    chrome.eval("document.querySelector('form[action=\"/usage/logout\"]').submit(); 1")
    chrome.wait_event("Page.loadEventFired")
    assert chrome.eval("!!document.getElementById('key')")
    with srv.client() as c:
        r = c.get("/usage", headers={"cookie": f"__Host-lg_usage={sess[0]['value']}"})
    assert 'name="key"' in r.text and "total-requests" not in r.text


def adapter_rows(chrome):
    """The top adapters table: per row its tenant id and adapter (data-*), the texts of its first cells, and
    its figures {data-k: data-v}."""
    return chrome.eval("""
      [...document.querySelectorAll('#adapters tr[data-adapter]')].map(tr => ({
        tenant_id: +tr.dataset.tenantId, adapter: tr.dataset.adapter,
        shown: [...tr.cells].filter(td => !td.dataset.k).map(td => td.textContent.trim()),
        figures: Object.fromEntries([...tr.querySelectorAll('td[data-k]')].map(td => [td.dataset.k, td.dataset.v]))}))
    """)


def check_top_adapters(chrome, rows):
    """The operator's top adapters: one row per (tenant, adapter) of the ledger, each with that pair's
    figures, and no two rows (nor two chart labels) that read the same."""
    got = adapter_rows(chrome)
    pairs = {(r["tenant_id"], r["adapter_name"] or "") for r in rows}
    assert len(got) == len(pairs) and {(g["tenant_id"], g["adapter"]) for g in got} == pairs
    for g in got:
        assert g["figures"] == totals([r for r in rows if r["tenant_id"] == g["tenant_id"]
                                       and (r["adapter_name"] or "") == g["adapter"]]), g
    assert len({tuple(g["shown"]) for g in got}) == len(got), [g["shown"] for g in got]
    labels = chrome.eval("[...document.querySelectorAll('#chart-adapters text.label-adapter')]"
                         ".map(t => t.textContent)")
    assert labels == [" / ".join(g["shown"]) for g in got]
    return got


def test_operator_sees_all_tenants(srv, chrome, tmp_path):
    from serve_fixture import ADMIN_KEY
    sign_in(chrome, srv, ADMIN_KEY)
    assert chrome.eval("document.getElementById('scope').textContent") == "all tenants"
    rows = srv.ledger()
    assert chrome.eval("document.getElementById('total-cost').dataset.v") == totals(rows)["cost"]
    by_tenant = row_cells(chrome, "#tenants tr[data-tenant]")
    ids = {"acme": tenant_id(srv, "acme"), "beta": tenant_id(srv, "beta")}
    assert by_tenant == {t: totals([r for r in rows if r["tenant_id"] == ids[t]]) for t in ("acme", "beta")}
    # top adapters: acme and beta both used the base model: two rows, each naming its tenant, each with that
    # tenant's figures (not one merged row, nor two rows that both read "base model")
    assert chrome.eval("[...document.querySelectorAll('#adapters th')].map(th => th.textContent)")[:2] == \
        ["Tenant", "Adapter"]
    got = check_top_adapters(chrome, rows)
    base = {g["shown"][0]: g for g in got if g["adapter"] == ""}
    assert set(base) == {"acme", "beta"} and all(g["shown"][1] == "base model" for g in base.values())
    for name in ("acme", "beta"):
        assert base[name]["tenant_id"] == ids[name]
        assert base[name]["figures"] == totals([r for r in rows if r["tenant_id"] == ids[name]
                                                and r["adapter_name"] is None])
    chrome.screenshot(str(tmp_path / "usage-operator.png"))
    # one tenant's page through the GET form (no key in it)
    chrome.events.clear()
    chrome.eval("document.querySelector('select[name=tenant]').value = 'beta';"
                " document.querySelector('form[method=get]').submit(); 1")
    chrome.wait_event("Page.loadEventFired")
    assert chrome.eval("location.search") == "?days=30&tenant=beta"
    assert chrome.eval("document.getElementById('scope').textContent") == "beta"
    beta = [r for r in rows if r["tenant_id"] == ids["beta"]]
    assert row_cells(chrome, "#total-row")["Total"] == totals(beta)
    # one tenant's page: its own rows only, no tenant column
    assert chrome.eval("[...document.querySelectorAll('#adapters th')].map(th => th.textContent)")[0] == "Adapter"
    assert [(g["tenant_id"], g["adapter"], g["shown"]) for g in adapter_rows(chrome)] == \
        [(ids["beta"], "", ["base model"])]


def test_tenant_page_top_adapters_are_its_own(srv, chrome):
    sign_in(chrome, srv, srv.keys["k3"])
    beta = srv.ledger("tenant_id = ?", (tenant_id(srv, "beta"),))
    got = adapter_rows(chrome)
    assert [(g["adapter"], g["shown"], g["figures"]) for g in got] == [("", ["base model"], totals(beta))]
    assert chrome.eval("document.querySelector('#adapters th').textContent") == "Adapter"


CARDS = "[...document.querySelectorAll('section svg')]"


def chart_boxes(chrome):
    """Per chart: its rendered size, its viewBox and the content width of its card (the section around it)."""
    return chrome.eval(CARDS + """.map(svg => {
        const card = svg.closest('section'), cs = getComputedStyle(card), b = svg.getBoundingClientRect();
        return {id: svg.id, width: b.width, height: b.height, vb: svg.viewBox.baseVal.width / svg.viewBox.baseVal.height,
                content: card.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)};
      })""")


def test_charts_use_their_cards_width(srv, chrome, tmp_path):
    from serve_fixture import ADMIN_KEY
    sign_in(chrome, srv, ADMIN_KEY)
    for width in (1280, 640):
        chrome.call("Emulation.setDeviceMetricsOverride", width=width, height=1800, deviceScaleFactor=1,
                    mobile=False)
        assert chrome.eval("innerWidth") == width
        boxes = chart_boxes(chrome)
        assert [b["id"] for b in boxes] == ["chart-tokens", "chart-cost", "chart-cached", "chart-adapters"]
        for b in boxes:
            assert b["width"] >= 0.95 * b["content"], (width, b)
            assert b["width"] <= b["content"] + 0.5, (width, b)  # and not past the card
            assert abs(b["width"] / b["height"] - b["vb"]) < 0.02 * b["vb"], (width, b)  # scaled, not stretched
        # the stylesheet still applies under the CSP (its hash), and the chart text stays legible
        assert chrome.eval("getComputedStyle(document.body).backgroundColor") == "rgb(245, 246, 248)"
        # (font size in user units x the chart's scale: what is seen on screen)
        text_px = chrome.eval("(() => { const svg = document.getElementById('chart-tokens');"
                              " return parseFloat(getComputedStyle(svg.querySelector('text')).fontSize)"
                              " * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; })()")
        assert 9.5 <= text_px <= 16, (width, text_px)
        page = chrome.eval("({x: 0, y: 0, width: innerWidth,"
                           " height: document.documentElement.scrollHeight})")
        png = chrome.screenshot(str(tmp_path / f"usage-operator-{width}.png"), clip=page)
        box = chrome.eval("(() => { const b = document.getElementById('chart-tokens').getBoundingClientRect();"
                          " return {x: b.x + scrollX, y: b.y + scrollY, width: b.width, height: b.height}; })()")
        chart = chrome.screenshot(str(tmp_path / f"usage-operator-{width}-tokens.png"), clip=box)
        assert len(png) > 20000 and count_color(chart, (0x4c, 0x78, 0xa8)) > 20
    print(f"screenshots: {tmp_path}/usage-operator-1280.png {tmp_path}/usage-operator-640.png")


def test_refusals(srv, chrome):
    # a wrong key: the form again, with a message, and no cookie
    sign_in(chrome, srv, "lg-not-a-key")
    assert chrome.eval("document.getElementById('error').textContent") == "That key was not accepted."
    assert chrome.call("Storage.getCookies")["cookies"] == []
    # a revoked key ends its session at the next view
    key = srv.key("beta", name="temp")
    sign_in(chrome, srv, key)
    assert chrome.eval("document.getElementById('scope').textContent") == "beta"
    kid = [k["id"] for k in srv.admin.get("/admin/v1/tenants/beta/keys").json()["data"] if k["name"] == "temp"][0]
    assert srv.admin.delete(f"/admin/v1/keys/{kid}").status_code in (200, 204)
    chrome.navigate(srv.url + "/usage")
    assert chrome.eval("!!document.getElementById('key')")
    with srv.client() as c:
        # another origin cannot sign in (or out) through this server's form
        r = c.post("/usage/login", data={"key": srv.keys["k1"]}, headers={"origin": "https://evil.example"})
        assert r.status_code == 403 and "set-cookie" not in r.headers
        r = c.post("/usage/login", data={"key": srv.keys["k1"]})
        assert r.status_code == 303 and r.headers["location"] == "/usage"
        assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
        csp = c.get("/usage").headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp


def test_operator_tells_a_deleted_tenant_from_its_namesake(srv, chrome, tmp_path):
    """gamma uses the base model, is deleted, and a new gamma does too: four base-model rows (acme, beta and
    the two gammas), none reading like another; the deleted one carries its id and has no link (its name is
    the new tenant's now). Last in the file: it adds tenants the tests above do not expect."""
    from serve_fixture import ADMIN_KEY
    srv.tenant("gamma")
    old_id = tenant_id(srv, "gamma")
    n = len(srv.ledger())
    srv.openai(srv.key("gamma", name="g1"), tenant="gamma").completions.create(
        model="base", prompt=P11, max_tokens=2, temperature=0)
    assert srv.admin.delete("/admin/v1/tenants/gamma").status_code == 200
    srv.tenant("gamma")
    new_id = tenant_id(srv, "gamma")
    assert new_id != old_id
    srv.openai(srv.key("gamma", name="g2"), tenant="gamma").completions.create(
        model="base", prompt=P29, max_tokens=5, temperature=0)
    deadline = time.monotonic() + 10
    while len(srv.ledger()) < n + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = srv.ledger()
    assert len(rows) == n + 2
    sign_in(chrome, srv, ADMIN_KEY)
    got = check_top_adapters(chrome, rows)
    base = {g["tenant_id"]: g["shown"][0] for g in got if g["adapter"] == ""}
    assert base[new_id] == "gamma" and base[old_id] == f"gamma (deleted, id {old_id})"
    assert len(set(base.values())) == len(base) == 4
    # the tenants table too; only live tenants are linked, and the picker offers live tenants only
    shown = chrome.eval("Object.fromEntries([...document.querySelectorAll('#tenants tr[data-tenant-id]')]"
                        ".map(tr => [tr.dataset.tenantId, [tr.cells[0].textContent, !!tr.querySelector('a')]]))")
    assert shown[str(old_id)] == [f"gamma (deleted, id {old_id})", False] and shown[str(new_id)] == ["gamma", True]
    assert chrome.eval("[...document.querySelectorAll('select[name=tenant] option')].map(o => o.value)") == \
        ["", "acme", "beta", "gamma"]
    chrome.screenshot(str(tmp_path / "usage-operator-reused-name.png"))
