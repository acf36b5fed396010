/*
 * usage_page.c — the usage page in the browser: GET /usage.
 *
 *   GET  /usage          signed in: the page; else the sign-in form
 *   POST /usage/login    form field `key` (a tenant key or the operator key)
 *                        -> 303 to /usage with a session cookie
 *   POST /usage/logout   -> 303 to /usage, cookie cleared
 *
 * Sign-in: usage_sessions.h (the key travels once, in a POST body; the
 * cookie holds a random session id; every view re-checks the key). This
 * file answers the forms: POSTs with an Origin header from another origin
 * are refused (403).
 *
 * The page. Server-rendered HTML, no script at all, no external resource
 * (the server may run offline): the stylesheet is inline and allowed by its
 * hash in the Content-Security-Policy (default-src 'none'; img-src data: for
 * the inline icon, so browsers do not ask for /favicon.ico); charts are
 * inline SVG with <title> tooltips holding the exact figures, drawn in a
 * fixed viewBox and scaled to their card's width (width 100%; see CW).
 * Every text that comes from a client (model and adapter names, tenant
 * names) is HTML-escaped. Figures are read from the ledger on a worker
 * thread (one reader connection per view): per-day totals of the chosen
 * range (7, 30 or 90 days, UTC days, today included), per-key totals, top
 * adapters, and for the operator per-tenant totals (or one tenant's page,
 * ?tenant=<slug>). Every figure is also in a table, with its exact value in
 * a data-v attribute; costs are exact decimal USD (12 decimals).
 *
 * Naming tenants. The operator's page of all tenants has one top-adapters
 * row per tenant and adapter (the base model of two tenants is two rows),
 * so each row and bar names its tenant (tenant_label); a deleted tenant's
 * name may belong to a newer tenant, so deleted tenants are shown with
 * their id ("acme (deleted, id 3)") and are not linked. A tenant's own page,
 * and the operator's page of one tenant, show only that tenant's rows.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <h2o.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "db/usage.h"
#include "gateway/form.h"
#include "gateway/http/request.h"
#include "gateway/rate_limits.h"
#include "gateway/routes.h"
#include "gateway/tenants.h"
#include "gateway/unix_time.h"
#include "gateway/usage_sessions.h"

/* a 16x16 rounded square in the page's link colour, as an SVG data URL */
#define ICON                                                                                                   \
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' "  \
    "height='16' rx='3' fill='%232b5fb4'/%3E%3C/svg%3E"

typedef struct page_ctx {
    lg_usage_sessions *sessions;
    lg_tenants *tenants;
    lg_limits *limits;
    const char *data_dir;
    char csp[256];
} page_ctx;

/* ---- the stylesheet (allowed by hash) ------------------------------------- */

static const char CSS[] =
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}"
    "header{background:#1d2330;color:#fff;padding:14px 24px;display:flex;align-items:center;gap:18px;flex-wrap:wrap}"
    "header h1{font-size:20px;margin:0;font-weight:600}header .who{flex:1}header form{margin:0}"
    "main{max-width:1100px;margin:0 auto;padding:18px 24px 40px}"
    "section{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;margin:14px 0}"
    "h2{font-size:16px;margin:0 0 10px}table{border-collapse:collapse;width:100%}"
    "th,td{text-align:right;padding:4px 8px;border-bottom:1px solid #eef0f3;font-variant-numeric:tabular-nums}"
    "th:first-child,td:first-child{text-align:left}th{font-weight:600;color:#4a5263;font-size:13px}"
    ".cards{display:flex;gap:12px;flex-wrap:wrap}.card{flex:1;min-width:150px;background:#fff;border:1px solid #dde1e7;"
    "border-radius:8px;padding:10px 14px}.card .k{font-size:12px;color:#5b6475;text-transform:uppercase}"
    ".card .v{font-size:22px;font-weight:600}nav a,nav button{margin-right:10px}nav{margin:6px 0}"
    "a{color:#2b5fb4}.muted{color:#6b7385;font-size:13px}.err{color:#b42318;font-weight:600}"
    "svg{display:block;width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#4a5263}"
    "th.l,td.l{text-align:left}#days td:first-child{white-space:nowrap}"
    ".legend span{display:inline-block;margin-right:14px;font-size:13px}.sw{display:inline-block;width:11px;"
    "height:11px;margin-right:5px;vertical-align:-1px}.s1{background:#4c78a8}.s2{background:#72b7b2}"
    ".s3{background:#f58518}.s4{background:#54a24b}.s5{background:#b279a2}"
    ".login{max-width:420px;margin:60px auto}.login input{width:100%;box-sizing:border-box;padding:8px;"
    "font:inherit;margin:8px 0 12px}.login button,header button{padding:6px 14px;font:inherit;cursor:pointer}"
    "select{font:inherit;padding:3px}"
    /* narrower windows scale the charts down (usage_page.c: CW): their text grows in user units by steps;
     * the narrowest also get less padding */
    "@media (max-width:1000px){svg text{font-size:13px}}"
    "@media (max-width:760px){main{padding:12px 10px 30px}section{padding:10px 12px}th,td{padding:4px 5px}"
    "svg text{font-size:15px}}"
    "@media (max-width:600px){svg text{font-size:17px}}";

static void css_hash(char out[64])
{
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(CSS, sizeof CSS - 1, md, &n, EVP_sha256(), NULL);
    EVP_EncodeBlock((unsigned char *)out, md, 32);
}

/* ---- text -------------------------------------------------------------------------- */

/* HTML text and attribute values: & < > " ' escaped. */
static void sb_esc(lg_strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': lg_strbuf_put(b, "&amp;", 5); break;
        case '<': lg_strbuf_put(b, "&lt;", 4); break;
        case '>': lg_strbuf_put(b, "&gt;", 4); break;
        case '"': lg_strbuf_put(b, "&quot;", 6); break;
        case '\'': lg_strbuf_put(b, "&#39;", 5); break;
        default: lg_strbuf_put(b, s, 1);
        }
    }
}

/* 1234567 -> "1,234,567" */
static void fmt_int(int64_t v, char *out, size_t cap)
{
    char d[32];
    snprintf(d, sizeof d, "%" PRId64, v < 0 ? -v : v);
    size_t n = strlen(d), k = 0;
    if (v < 0 && k + 1 < cap)
        out[k++] = '-';
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        out[k++] = d[i];
        if ((n - i - 1) % 3 == 0 && i + 1 < n)
            out[k++] = ',';
    }
    out[k] = 0;
}

/* Short text for axis labels: 1.2M, 35k, 12. */
static void fmt_short(double v, char *out, size_t cap)
{
    if (v >= 1e9)
        snprintf(out, cap, "%.3gG", v / 1e9);
    else if (v >= 1e6)
        snprintf(out, cap, "%.3gM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, cap, "%.3gk", v / 1e3);
    else
        snprintf(out, cap, "%.3g", v);
}

/* Cost in USD for display: 4 significant decimals at least, exact in data-v. */
static void fmt_usd_short(int64_t pico, char *out, size_t cap)
{
    double usd = (double)pico / 1e12;
    if (usd == 0)
        snprintf(out, cap, "$0");
    else if (usd < 0.01)
        snprintf(out, cap, "$%.6f", usd);
    else
        snprintf(out, cap, "$%.2f", usd);
}

/* ---- common headers ---------------------------------------------------------------- */

static void page_headers(page_ctx *c, lg_request *r)
{
    lg_request_add_header(r, "content-security-policy", c->csp);
    lg_request_add_header(r, "cache-control", "no-store");
    lg_request_add_header(r, "x-content-type-options", "nosniff");
    lg_request_add_header(r, "x-frame-options", "DENY");
    lg_request_add_header(r, "referrer-policy", "same-origin"); /* no-referrer would make browsers send Origin: null on our own form POSTs */
}

static void page_open(lg_strbuf *b, const char *title)
{
    lg_strbuf_printf(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                 /* the icon is inline, so the browser does not ask for /favicon.ico (a 404 in the access log
                  * and, when it finishes after a sign-in, a resource fetch attributed to the next page) */
                 "<link rel=\"icon\" href=\"%s\"><title>", ICON);
    sb_esc(b, title);
    lg_strbuf_printf(b, "</title><style>%s</style></head><body>", CSS);
}

static int send_html(page_ctx *c, lg_request *r, int status, lg_strbuf *b)
{
    page_headers(c, r);
    if (b->oom) {
        free(b->p);
        return lg_respond_error(r, 500, NULL, NULL, "out of memory while rendering the page"), 0;
    }
    lg_respond(r, status, "text/html; charset=utf-8", b->p ? b->p : "", b->len);
    free(b->p);
    return 0;
}

static int sign_in_page(page_ctx *c, lg_request *r, int status, const char *error)
{
    lg_strbuf b = {0};
    page_open(&b, "loragate usage: sign in");
    lg_strbuf_printf(&b, "<main><section class=\"login\"><h2>loragate usage</h2>"
                  "<p class=\"muted\">Sign in with an API key of your tenant, or with the operator key to see every "
                  "tenant. The key is sent once and kept only in server memory for this session.</p>");
    if (error) {
        lg_strbuf_printf(&b, "<p class=\"err\" id=\"error\">");
        sb_esc(&b, error);
        lg_strbuf_printf(&b, "</p>");
    }
    lg_strbuf_printf(&b, "<form method=\"post\" action=\"/usage/login\"><label for=\"key\">API key</label>"
                  "<input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"off\" required "
                  "spellcheck=\"false\"><button type=\"submit\">Sign in</button></form></section></main></body></html>\n");
    return send_html(c, r, status, &b);
}

/* POSTs: an Origin, when sent, must be this server's. */
static bool same_origin(lg_request *r)
{
    size_t ol, hl;
    const char *o = lg_request_header(r, "origin", &ol);
    if (!o)
        return true;
    h2o_req_t *req = lg_request_h2o(r);
    if (!req)
        return false;
    const char *h = req->authority.base;
    hl = req->authority.len;
    const char *sep = ol > 3 ? memmem(o, ol, "://", 3) : NULL;
    if (!sep)
        return false;
    const char *oh = sep + 3;
    size_t ohl = ol - (size_t)(oh - o);
    return h && ohl == hl && !strncasecmp(oh, h, hl);
}

static int redirect_home(page_ctx *c, lg_request *r)
{
    page_headers(c, r);
    lg_request_add_header(r, "location", "/usage");
    return lg_respond(r, 303, "text/plain; charset=utf-8", "See /usage\n", 11), 0;
}

typedef struct login_form {
    char key[256];
    bool have;
} login_form;

static int on_login_field(void *u, const char *k, const char *v)
{
    login_form *f = u;
    if (!strcmp(k, "key")) {
        snprintf(f->key, sizeof f->key, "%s", v);
        f->have = true;
    }
    return 0;
}

static int login(lg_request *r, void *user)
{
    page_ctx *c = user;
    if (!same_origin(r))
        return lg_respond_forbidden(r, "Cross-origin sign-in refused."), 0;
    size_t len;
    const char *body = lg_request_body(r, &len);
    login_form f;
    memset(&f, 0, sizeof f);
    if (lg_form_each(body ? body : "", len, on_login_field, &f) != 0 || !f.have || !f.key[0])
        return sign_in_page(c, r, 400, "Enter an API key.");
    /* trim what a paste may bring */
    size_t kl = strlen(f.key);
    while (kl && (f.key[kl - 1] == ' ' || f.key[kl - 1] == '\n' || f.key[kl - 1] == '\r'))
        f.key[--kl] = 0;
    const char *key = f.key;
    while (*key == ' ')
        key++;
    char sid[LG_USAGE_SID_HEX + 1], who[LG_KEY_ID_LEN + 1];
    lg_sign_in si = lg_usage_sign_in(c->sessions, key, strlen(key), sid, who);
    OPENSSL_cleanse(&f, sizeof f);
    if (si == LG_SIGN_IN_REFUSED)
        return sign_in_page(c, r, 401, "That key was not accepted.");
    if (si == LG_SIGN_IN_FAILED)
        return lg_respond_error(r, 500, NULL, NULL, "could not create a session"), 0;
    lg_request_log_set(r, "usage_login", json_string(who));
    lg_usage_set_cookie(c->sessions, r, sid, LG_USAGE_SESSION_SECONDS);
    return redirect_home(c, r);
}

static int logout(lg_request *r, void *user)
{
    page_ctx *c = user;
    if (!same_origin(r))
        return lg_respond_forbidden(r, "Cross-origin sign-out refused."), 0;
    lg_usage_sign_out(c->sessions, r);
    lg_usage_set_cookie(c->sessions, r, "", 0);
    return redirect_home(c, r);
}

/* ---- the page's data (worker) ------------------------------------------------------------ */

typedef struct day {
    int64_t start;
    lg_usage_result tot;
} day;

typedef struct named_tot {
    char name[LG_LEDGER_MODEL_MAX];
    int64_t id;
    lg_usage_result tot;
} named_tot;

typedef struct page_job {
    page_ctx *c;
    lg_usage_viewer v;
    int days;
    char filter[LG_STORE_NAME_MAX]; /* operator: one tenant */
    int64_t filter_id;
    /* results */
    int status;
    char err[300];
    int64_t start, end;
    day *d;
    int nd;
    lg_usage_result total;
    named_tot *tenants, *keys;
    int n_tenants, n_keys;
    lg_usage_adapter *ad;
    int n_ad;
    lg_tenant_limits limits;
    bool have_limits;
    lg_limits_state lstate;
    lg_tenant *all_tenants; /* operator: every tenant, deleted ones too, by name (the picker shows live ones) */
    int n_all_tenants;
    const lg_tenant **by_id; /* all_tenants by id, for naming a row's tenant */
    lg_strbuf html;
} page_job;

static void add_res(lg_usage_result *a, const lg_usage_result *b)
{
    a->input_tokens += b->input_tokens;
    a->input_cached_tokens += b->input_cached_tokens;
    a->output_tokens += b->output_tokens;
    a->num_model_requests += b->num_model_requests;
    lg_err e;
    if (lg_money_add(&a->cost_pico, b->cost_pico, &e) != 0)
        a->cost_pico = INT64_MAX;
}

/* Sums a report's results by one dimension over all its buckets. */
static int by_dim(const lg_usage_report *rep, unsigned dim, named_tot **out, int *n)
{
    int cap = 0;
    for (int b = 0; b < rep->n_buckets; b++)
        cap += rep->buckets[b].n_results;
    named_tot *v = calloc((size_t)cap + 1, sizeof *v);
    if (!v)
        return -1;
    int k = 0;
    for (int b = 0; b < rep->n_buckets; b++)
        for (int i = 0; i < rep->buckets[b].n_results; i++) {
            const lg_usage_result *res = &rep->buckets[b].results[i];
            const char *name = dim == LG_USAGE_GROUP_TENANT ? res->tenant_name
                               : dim == LG_USAGE_GROUP_API_KEY ? res->api_key_id
                                                               : res->model;
            int j = 0;
            while (j < k && !(dim == LG_USAGE_GROUP_TENANT ? v[j].id == res->tenant_id : !strcmp(v[j].name, name)))
                j++;
            if (j == k) {
                snprintf(v[k].name, sizeof v[k].name, "%s", name);
                v[k].id = res->tenant_id;
                k++;
            }
            add_res(&v[j].tot, res);
        }
    *out = v;
    *n = k;
    return 0;
}

static int cmp_named(const void *a, const void *b)
{
    const named_tot *x = a, *y = b;
    int64_t tx = x->tot.input_tokens + x->tot.output_tokens, ty = y->tot.input_tokens + y->tot.output_tokens;
    if (tx != ty)
        return tx > ty ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_tenant_id(const void *a, const void *b)
{
    const lg_tenant *x = *(const lg_tenant *const *)a, *y = *(const lg_tenant *const *)b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The tenant of that id in all_tenants (operator views), or NULL. */
static const lg_tenant *tenant_by_id(const page_job *j, int64_t id)
{
    lg_tenant key = {.id = id};
    const lg_tenant *k = &key, **hit = NULL;
    if (j->by_id)
        hit = bsearch(&k, j->by_id, (size_t)j->n_all_tenants, sizeof *j->by_id, cmp_tenant_id);
    return hit ? *hit : NULL;
}

/* How the operator's views name a row's tenant, so that no two tenants look
 * alike: its name; a deleted tenant's name with its id (a later tenant may
 * have the name; ids are never reused); "(no tenant)" for requests that
 * never authenticated. `name` is the ledger query's (the tenant's name, also
 * when deleted). */
static void tenant_label(const page_job *j, int64_t id, const char *name, char *out, size_t cap)
{
    const lg_tenant *t = tenant_by_id(j, id);
    if (!id)
        snprintf(out, cap, "(no tenant)");
    else if (t && t->deleted_at)
        snprintf(out, cap, "%s (deleted, id %" PRId64 ")", t->name, id);
    else if (t || name[0])
        snprintf(out, cap, "%s", t ? t->name : name); /* not listed: created after the list was read */
    else
        snprintf(out, cap, "tenant id %" PRId64, id);
}

static void render_page(page_job *j);

static void page_work(void *arg)
{
    page_job *j = arg;
    lg_err err = {{0}};
    lg_store *rd = NULL;
    if (lg_store_open_reader(j->c->data_dir, &rd, &err) != 0) {
        j->status = 503;
        snprintf(j->err, sizeof j->err, "The usage store cannot be read right now: %s", err.msg);
        return;
    }
    int64_t now = lg_unix_now();
    j->end = (now / LG_USAGE_1D + 1) * LG_USAGE_1D;
    j->start = j->end - (int64_t)j->days * LG_USAGE_1D;
    int64_t tenant_id = j->v.op ? 0 : j->v.tenant_id;
    if (j->v.op) {
        if (lg_store_tenant_list(rd, true, &j->all_tenants, &j->n_all_tenants, &err) == 0 &&
            (j->by_id = malloc(((size_t)j->n_all_tenants + 1) * sizeof *j->by_id)) != NULL) {
            for (int i = 0; i < j->n_all_tenants; i++)
                j->by_id[i] = &j->all_tenants[i];
            qsort(j->by_id, (size_t)j->n_all_tenants, sizeof *j->by_id, cmp_tenant_id);
        }
        if (j->filter[0]) {
            lg_tenant t;
            if (lg_store_tenant_get(rd, j->filter, &t, &err) != 0) {
                j->status = 404;
                snprintf(j->err, sizeof j->err, "No tenant named '%s'.", j->filter);
                lg_store_close(rd);
                return;
            }
            tenant_id = j->filter_id = t.id;
        }
    }
    lg_usage_query q = {.start_time = j->start, .end_time = j->end, .bucket_width = LG_USAGE_1D,
                        .tenant_id = tenant_id, .group_by = 0};
    lg_usage_report *rep = NULL;
    int rc = lg_store_usage_query(rd, &q, &rep, &err);
    if (rc == 0) {
        j->nd = rep->n_buckets;
        j->d = calloc((size_t)rep->n_buckets + 1, sizeof *j->d);
        for (int b = 0; j->d && b < rep->n_buckets; b++) {
            j->d[b].start = rep->buckets[b].start_time;
            for (int i = 0; i < rep->buckets[b].n_results; i++)
                add_res(&j->d[b].tot, &rep->buckets[b].results[i]);
            add_res(&j->total, &j->d[b].tot);
        }
        lg_usage_report_free(rep);
        rep = NULL;
        if (j->v.op && !j->filter_id) {
            q.group_by = LG_USAGE_GROUP_TENANT;
            rc = lg_store_usage_query(rd, &q, &rep, &err);
            if (rc == 0 && by_dim(rep, LG_USAGE_GROUP_TENANT, &j->tenants, &j->n_tenants) == 0)
                qsort(j->tenants, (size_t)j->n_tenants, sizeof *j->tenants, cmp_named);
            lg_usage_report_free(rep);
            rep = NULL;
        } else if (rc == 0) {
            q.group_by = LG_USAGE_GROUP_API_KEY;
            rc = lg_store_usage_query(rd, &q, &rep, &err);
            if (rc == 0 && by_dim(rep, LG_USAGE_GROUP_API_KEY, &j->keys, &j->n_keys) == 0)
                qsort(j->keys, (size_t)j->n_keys, sizeof *j->keys, cmp_named);
            lg_usage_report_free(rep);
            rep = NULL;
        }
    }
    if (rc == 0)
        rc = lg_store_usage_top_adapters(rd, tenant_id, j->start, j->end, 10, &j->ad, &j->n_ad, &err);
    lg_store_close(rd);
    if (rc != 0 || !j->d) {
        j->status = 500;
        snprintf(j->err, sizeof j->err, "Reading usage: %s", rc ? err.msg : "out of memory");
        return;
    }
    if (j->v.t) {
        lg_tenant row;
        if (lg_tenants_get(j->c->tenants, j->v.t, &row, NULL)) {
            j->limits = row.limits;
            j->have_limits = true;
        }
        lg_limits_usage(j->c->limits, j->v.t->id, &j->lstate);
    }
    j->status = 200;
    render_page(j);
}

/* ---- charts ---------------------------------------------------------------------------------- */

/* Charts are drawn in a CW x CH user space (the viewBox) and scaled to the
 * card's width (width 100%, the height following from the viewBox's ratio):
 * x1.33 in the widest card (1062 px: main's 1100 less the card's padding),
 * less on narrower windows, where the stylesheet's steps enlarge the text
 * (11 to 17 user units) so that it stays about 10 to 15 px on screen down
 * to 600 px windows. ML fits the longest y label ("$0.000100" at 17 units,
 * "$0.00000100" at 11). */
enum { CW = 800, CH = 220, ML = 100, MR = 12, MT = 12, MB = 34 };

static double nice_max(double v)
{
    if (v <= 0)
        return 1;
    double p = pow(10, floor(log10(v)));
    for (int i = 0; i < 4; i++) {
        static const double m[] = {1, 2, 5, 10};
        if (m[i] * p >= v)
            return m[i] * p;
    }
    return 10 * p;
}

static void day_label(int64_t t, char *out, size_t cap, bool year)
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    if (year)
        snprintf(out, cap, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    else
        snprintf(out, cap, "%02d-%02d", tm.tm_mon + 1, tm.tm_mday);
}

static void axis(lg_strbuf *b, double ymax, bool money, bool percent, int nd, const day *d)
{
    int h = CH - MT - MB;
    for (int i = 0; i <= 4; i++) {
        double v = ymax * i / 4;
        double y = MT + h - (double)h * i / 4;
        char lab[32];
        if (percent)
            snprintf(lab, sizeof lab, "%.0f%%", v);
        else if (money) {
            int dec = 2;
            if (ymax / 4 < 0.01)
                dec = (int)(-floor(log10(ymax / 4))) + 1;
            snprintf(lab, sizeof lab, "$%.*f", dec > 12 ? 12 : dec, v);
        }
        else
            fmt_short(v, lab, sizeof lab);
        lg_strbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>", ML, y, CW - MR, y,
                  i ? "#eef0f3" : "#9aa3b2");
        lg_strbuf_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>", ML - 6, y + 4, lab);
    }
    int every = nd <= 10 ? 1 : nd <= 31 ? 5 : 15;
    double bw = (double)(CW - ML - MR) / (nd ? nd : 1);
    for (int i = 0; i < nd; i++)
        if ((nd - 1 - i) % every == 0) {
            char lab[16];
            day_label(d[i].start, lab, sizeof lab, false);
            lg_strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", ML + bw * (i + 0.5),
                      CH - MB + 16, lab);
        }
}

/* width 100% and no height: the card's width, the height following from the viewBox */
static void svg_open(lg_strbuf *b, const char *id, int height, const char *label)
{
    lg_strbuf_printf(b, "<svg id=\"%s\" viewBox=\"0 0 %d %d\" width=\"100%%\" role=\"img\" aria-label=\"%s\" "
                 "xmlns=\"http://www.w3.org/2000/svg\">",
              id, CW, height, label);
}

static void chart_tokens(lg_strbuf *b, const page_job *j)
{
    double mx = 0;
    for (int i = 0; i < j->nd; i++) {
        double t = (double)(j->d[i].tot.input_tokens + j->d[i].tot.output_tokens);
        if (t > mx)
            mx = t;
    }
    double ymax = nice_max(mx);
    svg_open(b, "chart-tokens", CH, "Tokens per day");
    axis(b, ymax, false, false, j->nd, j->d);
    int h = CH - MT - MB;
    double bw = (double)(CW - ML - MR) / (j->nd ? j->nd : 1);
    for (int i = 0; i < j->nd; i++) {
        const lg_usage_result *t = &j->d[i].tot;
        double parts[3] = {(double)(t->input_tokens - t->input_cached_tokens), (double)t->input_cached_tokens,
                           (double)t->output_tokens};
        static const char *const fill[3] = {"#4c78a8", "#72b7b2", "#f58518"};
        static const char *const what[3] = {"uncached input", "cached input", "output"};
        double y = MT + h;
        char date[16];
        day_label(j->d[i].start, date, sizeof date, true);
        for (int k = 0; k < 3; k++) {
            double ph = parts[k] / ymax * h;
            if (ph <= 0)
                continue;
            y -= ph;
            lg_strbuf_printf(b,
                      "<rect class=\"bar-tokens\" data-day=\"%s\" data-part=\"%d\" data-v=\"%.0f\" x=\"%.1f\" "
                      "y=\"%.2f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"><title>%s: %.0f %s tokens</title></rect>",
                      date, k, parts[k], ML + bw * i + bw * 0.15, y, bw * 0.7, ph, fill[k], date, parts[k], what[k]);
        }
    }
    lg_strbuf_printf(b, "</svg>");
}

static void chart_cost(lg_strbuf *b, const page_job *j)
{
    double mx = 0;
    for (int i = 0; i < j->nd; i++)
        if ((double)j->d[i].tot.cost_pico / 1e12 > mx)
            mx = (double)j->d[i].tot.cost_pico / 1e12;
    double ymax = nice_max(mx);
    svg_open(b, "chart-cost", CH, "Cost per day in USD");
    axis(b, ymax, true, false, j->nd, j->d);
    int h = CH - MT - MB;
    double bw = (double)(CW - ML - MR) / (j->nd ? j->nd : 1);
    for (int i = 0; i < j->nd; i++) {
        double usd = (double)j->d[i].tot.cost_pico / 1e12;
        double ph = usd / ymax * h;
        if (ph <= 0)
            continue;
        char date[16], exact[LG_MONEY_USD_BUF];
        day_label(j->d[i].start, date, sizeof date, true);
        lg_money_format_usd(j->d[i].tot.cost_pico, exact);
        lg_strbuf_printf(b,
                  "<rect class=\"bar-cost\" data-day=\"%s\" data-v=\"%s\" x=\"%.1f\" y=\"%.2f\" width=\"%.1f\" "
                  "height=\"%.2f\" fill=\"#54a24b\"><title>%s: $%s</title></rect>",
                  date, exact, ML + bw * i + bw * 0.15, MT + h - ph, bw * 0.7, ph, date, exact);
    }
    lg_strbuf_printf(b, "</svg>");
}

static void chart_cached(lg_strbuf *b, const page_job *j)
{
    svg_open(b, "chart-cached", CH, "Cached share of input tokens per day");
    axis(b, 100, false, true, j->nd, j->d);
    int h = CH - MT - MB;
    double bw = (double)(CW - ML - MR) / (j->nd ? j->nd : 1);
    lg_strbuf pts = {0};
    for (int i = 0; i < j->nd; i++) {
        const lg_usage_result *t = &j->d[i].tot;
        if (!t->input_tokens)
            continue;
        double pct = 100.0 * (double)t->input_cached_tokens / (double)t->input_tokens;
        double x = ML + bw * (i + 0.5), y = MT + h - pct / 100 * h;
        lg_strbuf_printf(&pts, "%.1f,%.1f ", x, y);
        char date[16];
        day_label(j->d[i].start, date, sizeof date, true);
        lg_strbuf_printf(b,
                  "<circle class=\"pt-cached\" data-day=\"%s\" data-v=\"%.4f\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
                  "fill=\"#b279a2\"><title>%s: %.1f%% of input tokens cached</title></circle>",
                  date, pct, x, y, date, pct);
    }
    if (pts.p)
        lg_strbuf_printf(b, "<polyline points=\"%s\" fill=\"none\" stroke=\"#b279a2\" stroke-width=\"2\"/>", pts.p);
    free(pts.p);
    lg_strbuf_printf(b, "</svg>");
}

/* The operator's page of all tenants: one row per tenant and adapter. */
static bool all_tenants_view(const page_job *j)
{
    return j->v.op && !j->filter_id;
}

/* s, at most max characters, cut in the middle with an ellipsis ("very-lo…name"), so that both ends stay
 * (names are ASCII: lg_store_check_tenant_name / _adapter_name) */
static void mid_cut(const char *s, size_t max, char *out, size_t cap)
{
    size_t n = strlen(s);
    if (n <= max || max < 3) {
        snprintf(out, cap, "%s", s);
        return;
    }
    size_t tail = (max - 1) / 2, head = max - 1 - tail;
    snprintf(out, cap, "%.*s\xe2\x80\xa6%s", (int)head, s, s + n - tail);
}

/* A top adapters row's name: the adapter ("base model" for none), and in the view of all tenants its
 * tenant first ("acme / base model"). short_form: cut to fit the chart's label column. */
static void adapter_label(const page_job *j, const lg_usage_adapter *a, bool short_form, char *out, size_t cap)
{
    char an[LG_STORE_NAME_MAX + 8], tn[LG_STORE_NAME_MAX + 48];
    mid_cut(a->adapter_name[0] ? a->adapter_name : "base model", short_form ? 34 : SIZE_MAX, an, sizeof an);
    if (!all_tenants_view(j)) {
        snprintf(out, cap, "%s", an);
        return;
    }
    char full[sizeof tn];
    tenant_label(j, a->tenant_id, a->tenant_name, full, sizeof full);
    mid_cut(full, short_form ? 34 : SIZE_MAX, tn, sizeof tn);
    snprintf(out, cap, "%s / %s", tn, an);
}

/* One bar per row of the top adapters, its label above it (the bar keeps the chart's width, the label
 * has all of it: up to 34 + 3 + 34 characters at the largest text size). */
static void chart_adapters(lg_strbuf *b, const page_job *j)
{
    int n = j->n_ad;
    int rowh = 40, height = 8 + rowh * (n ? n : 1);
    double mx = 0;
    for (int i = 0; i < n; i++)
        if ((double)(j->ad[i].input_tokens + j->ad[i].output_tokens) > mx)
            mx = (double)(j->ad[i].input_tokens + j->ad[i].output_tokens);
    svg_open(b, "chart-adapters", height, "Top adapters by tokens");
    if (!n)
        lg_strbuf_printf(b, "<text x=\"0\" y=\"24\">No requests in this range.</text>");
    int w = CW - 140; /* the rest: the figure after the longest bar */
    for (int i = 0; i < n; i++) {
        const lg_usage_adapter *a = &j->ad[i];
        double tok = (double)(a->input_tokens + a->output_tokens);
        double bwid = mx > 0 ? tok / mx * w : 0;
        int y = 4 + rowh * i;
        char shown[128], full[192], t[32];
        adapter_label(j, a, true, shown, sizeof shown);
        adapter_label(j, a, false, full, sizeof full);
        fmt_int((int64_t)tok, t, sizeof t);
        lg_strbuf_printf(b, "<text class=\"label-adapter\" x=\"0\" y=\"%d\">", y + 15);
        sb_esc(b, shown);
        lg_strbuf_printf(b, "</text><rect class=\"bar-adapter\" data-v=\"%.0f\" x=\"0\" y=\"%d\" width=\"%.1f\" "
                            "height=\"14\" fill=\"#4c78a8\"><title>",
                         tok, y + 20, bwid > 1 ? bwid : 1);
        sb_esc(b, full);
        lg_strbuf_printf(b, ": %s tokens</title></rect><text x=\"%.1f\" y=\"%d\">%s</text>", t, bwid + 6, y + 32, t);
    }
    lg_strbuf_printf(b, "</svg>");
}

/* ---- the page --------------------------------------------------------------------------------------- */

static void td_int(lg_strbuf *b, const char *k, int64_t v)
{
    char t[32];
    fmt_int(v, t, sizeof t);
    lg_strbuf_printf(b, "<td data-k=\"%s\" data-v=\"%" PRId64 "\">%s</td>", k, v, t);
}

static void td_cost(lg_strbuf *b, int64_t pico)
{
    char exact[LG_MONEY_USD_BUF];
    lg_money_format_usd(pico, exact);
    lg_strbuf_printf(b, "<td data-k=\"cost\" data-v=\"%s\">$%s</td>", exact, exact);
}

static void row_cells(lg_strbuf *b, const lg_usage_result *t)
{
    td_int(b, "num_model_requests", t->num_model_requests);
    td_int(b, "input_tokens", t->input_tokens);
    td_int(b, "input_cached_tokens", t->input_cached_tokens);
    td_int(b, "output_tokens", t->output_tokens);
    td_cost(b, t->cost_pico);
}

static const char TH[] =
    "<th>Requests</th><th>Input tokens</th><th>of which cached</th><th>Output tokens</th><th>Cost (USD)</th>";

static void card(lg_strbuf *b, const char *id, const char *k, const char *shown, const char *exact)
{
    lg_strbuf_printf(b, "<div class=\"card\" id=\"%s\" data-v=\"%s\"><div class=\"k\">%s</div><div class=\"v\">%s</div></div>",
              id, exact, k, shown);
}

static void render_page(page_job *j)
{
    lg_strbuf *b = &j->html;
    char title[160];
    const char *scope = j->v.op ? (j->filter_id ? j->filter : "all tenants") : j->v.tenant;
    snprintf(title, sizeof title, "loragate usage: %s", scope);
    page_open(b, title);
    lg_strbuf_printf(b, "<header><h1>loragate usage</h1><div class=\"who\" id=\"who\">");
    if (j->v.op) {
        lg_strbuf_printf(b, "Operator view: <b id=\"scope\">");
        sb_esc(b, scope);
        lg_strbuf_printf(b, "</b>");
    } else {
        lg_strbuf_printf(b, "Tenant <b id=\"scope\">");
        sb_esc(b, j->v.tenant);
        lg_strbuf_printf(b, "</b> <span class=\"muted\">(signed in with %s)</span>", j->v.key_id);
    }
    lg_strbuf_printf(b, "</div><form method=\"post\" action=\"/usage/logout\"><button type=\"submit\">Sign out</button>"
                 "</form></header><main>");

    /* range and tenant choice: plain GET links and a GET form, no key in them */
    lg_strbuf_printf(b, "<nav>Range:");
    static const int R[] = {7, 30, 90};
    for (int i = 0; i < 3; i++) {
        if (R[i] == j->days) {
            lg_strbuf_printf(b, " <b>%d days</b>", R[i]);
            continue;
        }
        lg_strbuf_printf(b, " <a href=\"/usage?days=%d", R[i]);
        if (j->filter_id) {
            lg_strbuf_printf(b, "&amp;tenant=");
            sb_esc(b, j->filter);
        }
        lg_strbuf_printf(b, "\">%d days</a>", R[i]);
    }
    if (j->v.op) {
        lg_strbuf_printf(b, "<form method=\"get\" action=\"/usage\">"
                     "<input type=\"hidden\" name=\"days\" value=\"%d\"> Tenant: <select name=\"tenant\">"
                     "<option value=\"\">all tenants</option>",
                  j->days);
        for (int i = 0; i < j->n_all_tenants; i++) {
            if (j->all_tenants[i].deleted_at)
                continue;
            lg_strbuf_printf(b, "<option value=\"");
            sb_esc(b, j->all_tenants[i].name);
            lg_strbuf_printf(b, "\"%s>", j->filter_id == j->all_tenants[i].id ? " selected" : "");
            sb_esc(b, j->all_tenants[i].name);
            lg_strbuf_printf(b, "</option>");
        }
        lg_strbuf_printf(b, "</select> <button type=\"submit\">Show</button></form>");
    }
    char from[16], to[16];
    day_label(j->start, from, sizeof from, true);
    day_label(j->end - 1, to, sizeof to, true);
    lg_strbuf_printf(b, "<span class=\"muted\" id=\"range\" data-start=\"%" PRId64 "\" data-end=\"%" PRId64
                 "\">%s to %s (UTC days, today included)</span></nav>",
              j->start, j->end, from, to);

    /* summary cards */
    const lg_usage_result *t = &j->total;
    char shown[64], exact[64];
    lg_strbuf_printf(b, "<div class=\"cards\" id=\"totals\">");
    fmt_int(t->num_model_requests, shown, sizeof shown);
    snprintf(exact, sizeof exact, "%" PRId64, t->num_model_requests);
    card(b, "total-requests", "Requests", shown, exact);
    fmt_int(t->input_tokens + t->output_tokens, shown, sizeof shown);
    snprintf(exact, sizeof exact, "%" PRId64, t->input_tokens + t->output_tokens);
    card(b, "total-tokens", "Tokens (input + output)", shown, exact);
    double share = t->input_tokens ? 100.0 * (double)t->input_cached_tokens / (double)t->input_tokens : 0;
    snprintf(shown, sizeof shown, "%.1f%%", share);
    snprintf(exact, sizeof exact, "%.4f", share);
    card(b, "cached-share", "Cached share of input", shown, exact);
    lg_money_format_usd(t->cost_pico, exact);
    fmt_usd_short(t->cost_pico, shown, sizeof shown);
    card(b, "total-cost", "Cost", shown, exact);
    lg_strbuf_printf(b, "</div>");

    if (j->have_limits && j->limits.monthly_tokens >= 0) {
        char used[32], lim[32];
        fmt_int(j->lstate.month_tokens, used, sizeof used);
        fmt_int(j->limits.monthly_tokens, lim, sizeof lim);
        lg_strbuf_printf(b, "<section id=\"budget\"><h2>Monthly token budget</h2><p>%s of %s tokens used this month (UTC).</p>"
                     "</section>",
                  used, lim);
    }

    lg_strbuf_printf(b, "<section><h2>Tokens per day</h2><div class=\"legend\"><span><i class=\"sw s1\"></i>uncached input"
                 "</span><span><i class=\"sw s2\"></i>cached input</span><span><i class=\"sw s3\"></i>output</span>"
                 "</div>");
    chart_tokens(b, j);
    lg_strbuf_printf(b, "</section><section><h2>Cost per day (USD)</h2>");
    chart_cost(b, j);
    lg_strbuf_printf(b, "</section><section><h2>Cached share of input tokens per day</h2><p class=\"muted\">Prompt tokens "
                 "served from the prefix cache are billed at the cached-input price. Over the range: <b>%.1f%%</b>.</p>",
              share);
    chart_cached(b, j);
    lg_strbuf_printf(b, "</section><section><h2>Top adapters by tokens</h2>");
    chart_adapters(b, j);
    /* all tenants: a row per tenant and adapter, the tenant in a column of its own */
    lg_strbuf_printf(b, "<table id=\"adapters\"><tr>%s<th%s>Adapter</th>%s</tr>",
                     all_tenants_view(j) ? "<th>Tenant</th>" : "", all_tenants_view(j) ? " class=\"l\"" : "", TH);
    for (int i = 0; i < j->n_ad; i++) {
        const lg_usage_adapter *a = &j->ad[i];
        lg_strbuf_printf(b, "<tr data-adapter=\"");
        sb_esc(b, a->adapter_name);
        lg_strbuf_printf(b, "\" data-tenant-id=\"%" PRId64 "\">", a->tenant_id);
        if (all_tenants_view(j)) {
            char tl[LG_STORE_NAME_MAX + 48];
            tenant_label(j, a->tenant_id, a->tenant_name, tl, sizeof tl);
            lg_strbuf_printf(b, "<td>");
            sb_esc(b, tl);
            lg_strbuf_printf(b, "</td><td class=\"l\">");
        } else {
            lg_strbuf_printf(b, "<td>");
        }
        sb_esc(b, a->adapter_name[0] ? a->adapter_name : "base model");
        lg_strbuf_printf(b, "</td>");
        lg_usage_result r = {.input_tokens = a->input_tokens, .input_cached_tokens = a->input_cached_tokens,
                             .output_tokens = a->output_tokens, .num_model_requests = a->num_model_requests,
                             .cost_pico = a->cost_pico};
        row_cells(b, &r);
        lg_strbuf_printf(b, "</tr>");
    }
    lg_strbuf_printf(b, "</table></section>");

    if (j->tenants) {
        lg_strbuf_printf(b, "<section><h2>Tenants</h2><table id=\"tenants\"><tr><th>Tenant</th>%s</tr>", TH);
        for (int i = 0; i < j->n_tenants; i++) {
            lg_strbuf_printf(b, "<tr data-tenant=\"");
            sb_esc(b, j->tenants[i].name);
            lg_strbuf_printf(b, "\" data-tenant-id=\"%" PRId64 "\"><td>", j->tenants[i].id);
            const lg_tenant *t = tenant_by_id(j, j->tenants[i].id);
            char tl[LG_STORE_NAME_MAX + 48];
            tenant_label(j, j->tenants[i].id, j->tenants[i].name, tl, sizeof tl);
            /* a deleted tenant has no page (its name may be another's now); one not listed is newer than the list */
            if (j->tenants[i].id && j->tenants[i].name[0] && !(t && t->deleted_at)) {
                lg_strbuf_printf(b, "<a href=\"/usage?days=%d&amp;tenant=", j->days);
                sb_esc(b, j->tenants[i].name);
                lg_strbuf_printf(b, "\">");
                sb_esc(b, tl);
                lg_strbuf_printf(b, "</a>");
            } else {
                sb_esc(b, tl);
            }
            lg_strbuf_printf(b, "</td>");
            row_cells(b, &j->tenants[i].tot);
            lg_strbuf_printf(b, "</tr>");
        }
        lg_strbuf_printf(b, "</table></section>");
    }
    if (j->keys) {
        lg_strbuf_printf(b, "<section><h2>API keys</h2><table id=\"keys\"><tr><th>Key id</th>%s</tr>", TH);
        for (int i = 0; i < j->n_keys; i++) {
            lg_strbuf_printf(b, "<tr data-key=\"");
            sb_esc(b, j->keys[i].name);
            lg_strbuf_printf(b, "\"><td>");
            sb_esc(b, j->keys[i].name[0] ? j->keys[i].name : "(none)");
            lg_strbuf_printf(b, "</td>");
            row_cells(b, &j->keys[i].tot);
            lg_strbuf_printf(b, "</tr>");
        }
        lg_strbuf_printf(b, "</table></section>");
    }
    lg_strbuf_printf(b, "<section><h2>By day</h2><table id=\"days\"><tr><th>Day (UTC)</th>%s</tr>", TH);
    for (int i = j->nd - 1; i >= 0; i--) {
        char date[16];
        day_label(j->d[i].start, date, sizeof date, true);
        lg_strbuf_printf(b, "<tr data-day=\"%s\"><td>%s</td>", date, date);
        row_cells(b, &j->d[i].tot);
        lg_strbuf_printf(b, "</tr>");
    }
    lg_strbuf_printf(b, "<tr id=\"total-row\"><td><b>Total</b></td>");
    row_cells(b, t);
    lg_strbuf_printf(b, "</tr></table><p class=\"muted\">Costs are exact sums of per-request costs (12 decimals). Input "
                 "tokens include cached ones. Every request that reached the model is counted, also failed or "
                 "cancelled ones.</p></section></main></body></html>\n");
}

static void page_done(lg_request *r, void *arg)
{
    page_job *j = arg;
    if (lg_request_h2o(r)) {
        if (j->status == 200)
            send_html(j->c, r, 200, &j->html), j->html.p = NULL;
        else if (j->status == 404)
            lg_respond_error(r, 404, NULL, "tenant", "%s", j->err);
        else if (j->status == 503)
            lg_respond_unavailable(r, 5, j->err);
        else
            lg_respond_error(r, 500, NULL, NULL, "%s", j->err);
    }
    free(j->html.p);
    free(j->d);
    free(j->tenants);
    free(j->keys);
    free(j->ad);
    free(j->all_tenants);
    free(j->by_id);
    free(j);
}

typedef struct page_q {
    int days;
    char tenant[LG_STORE_NAME_MAX];
    bool bad;
} page_q;

static int on_page_param(void *u, const char *k, const char *v)
{
    page_q *q = u;
    if (!strcmp(k, "days")) {
        q->days = atoi(v);
        if (q->days != 7 && q->days != 30 && q->days != 90)
            q->bad = true;
    } else if (!strcmp(k, "tenant")) {
        if (*v && lg_store_check_tenant_name(v, &(lg_err){{0}}) != 0)
            q->bad = true;
        snprintf(q->tenant, sizeof q->tenant, "%s", v);
    }
    return 0;
}

static int page(lg_request *r, void *user)
{
    page_ctx *c = user;
    lg_usage_viewer v;
    if (!lg_usage_viewer_of(c->sessions, r, &v))
        return sign_in_page(c, r, 200, NULL);
    page_q q = {.days = 30};
    size_t qlen;
    const char *qs = lg_form_query(r, &qlen);
    if (lg_form_each(qs, qlen, on_page_param, &q) != 0 || q.bad)
        return lg_respond_error(r, 400, NULL, NULL, "Invalid days or tenant: days is 7, 30 or 90."), 0;
    page_job *j = calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->c = c;
    j->v = v;
    j->days = q.days;
    if (v.op)
        snprintf(j->filter, sizeof j->filter, "%s", q.tenant);
    if (lg_request_defer(r, page_work, page_done, j) != 0) {
        free(j);
        return lg_respond_unavailable(r, 5, "The server is shutting down."), 0;
    }
    return 0;
}

static void ctx_free(void *p)
{
    page_ctx *c = p;
    if (!c)
        return;
    lg_usage_sessions_free(c->sessions);
    free(c);
}

int lg_routes_usage_page(lg_router *rt, const lg_usage_page_deps *d, lg_err *err)
{
    page_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    if (lg_usage_sessions_create(d->admin_key, d->auth, d->env, &c->sessions, err) != 0) {
        free(c);
        return -1;
    }
    c->tenants = d->tenants;
    c->limits = d->limits;
    c->data_dir = d->data_dir;
    char h[64];
    css_hash(h);
    snprintf(c->csp, sizeof c->csp,
             "default-src 'none'; style-src 'sha256-%s'; img-src data:; form-action 'self'; "
             "frame-ancestors 'none'; base-uri 'none'",
             h);
    lg_route routes[] = {
        {.method = "GET", .pattern = "/usage", .fn = page, .user = c, .name = "usage_page", .free_user = ctx_free},
        {.method = "POST", .pattern = "/usage/login", .fn = login, .user = c, .name = "usage_login",
         .max_body = 4096, .content_type = "application/x-www-form-urlencoded"},
        {.method = "POST", .pattern = "/usage/logout", .fn = logout, .user = c, .name = "usage_logout",
         .max_body = 4096},
    };
    if (lg_router_add(rt, &routes[0], err) != 0) {
        ctx_free(c);
        return -1;
    }
    return lg_router_add_all(rt, routes + 1, 2, err);
}
