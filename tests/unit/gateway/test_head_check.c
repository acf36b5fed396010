/*
 * test_head_check.c — the checks the gateway runs on a request head
 * (gateway/http/head_check.h): their order, the answers, unknown tenants
 * answered exactly as keys that do not match, principals and log fields;
 * and the upload quota (gateway/upload_quota.h): per-tenant count and
 * bytes, the disk floor, releases.
 */
#include "tests/unit/test.h"

#include "gateway/http/head_check.h"
#include "gateway/tenant_auth.h"
#include "gateway/upload_quota.h"

static int fn(lg_request *r, void *u) { return 0; }

static char T_A[] = "acme", T_B[] = "beta";

static int resolve(void *user, const char *slug, void **t)
{
    if (!strcmp(slug, "acme"))
        return *t = T_A, 1;
    if (!strcmp(slug, "beta"))
        return *t = T_B, 1;
    if (!strcmp(slug, "down"))
        return -1;
    return 0;
}

/* key "ka" belongs to acme, "kb" to beta; "ro" to acme without the scope */
static int auth(const lg_auth_in *in, void *user, lg_auth_result *out)
{
    if (!in->bearer)
        return out->status = 401, -1;
    char *t = NULL;
    bool scope = true;
    if (in->bearer_len == 2 && !memcmp(in->bearer, "ka", 2))
        t = T_A;
    else if (in->bearer_len == 2 && !memcmp(in->bearer, "kb", 2))
        t = T_B;
    else if (in->bearer_len == 2 && !memcmp(in->bearer, "ro", 2))
        t = T_A, scope = false;
    if (!t)
        return out->status = 401, out->message = "Incorrect API key provided.", -1;
    if (in->tenant_via != LG_TENANT_NONE && in->tenant != t)
        return out->status = 401, out->message = "Incorrect API key provided for this tenant's endpoint.", -1;
    if (!scope)
        return out->status = 403, -1;
    memcpy(out->principal, t, strlen(t) + 1);
    out->principal_len = strlen(t) + 1;
    out->log[0].key = "tenant";
    snprintf(out->log[0].value, sizeof out->log[0].value, "%s", t);
    return 0;
}

static lg_head H(const char *method, const char *path, const char *host, const char *authz, const char *ctype,
                 int64_t body, bool whole)
{
    lg_head h = {.method = method, .method_len = strlen(method), .path = path, .path_len = strlen(path),
                 .body_len = body, .whole = whole};
    if (host)
        h.authority = host, h.authority_len = strlen(host);
    if (authz)
        h.authorization = authz, h.authorization_len = strlen(authz);
    if (ctype)
        h.content_type = ctype, h.content_type_len = strlen(ctype);
    return h;
}

static void test_checks(void)
{
    lg_router *rt = lg_router_create();
    lg_err err;
    lg_route rs[] = {
        {.method = "POST", .pattern = "/v1/chat", .fn = fn, .max_body = 100, .content_type = "application/json",
         .body_required = true, .auth = auth, .tenant_scoped = true, .name = "chat"},
        {.method = "GET", .pattern = "/v1/items/{id}", .fn = fn, .auth = auth, .tenant_scoped = true, .name = "item"},
        {.method = "GET", .pattern = "/v1/open", .fn = fn, .tenant_scoped = true, .name = "open"},
    };
    CHECK(lg_router_add_all(rt, rs, 3, &err) == 0);
    lg_tenancy ten = {".api.test", resolve, NULL};
    CHECK(lg_router_set_tenancy(rt, &ten, &err) == 0);
    lg_verdict v;
    const char *J = "application/json";

    /* admitted: principal and log field */
    lg_head h = H("POST", "/v1/chat", NULL, "Bearer ka", J, 10, true);
    CHECK(lg__head_check(rt, &h, &v) == 0 && v.m.route && !strcmp(v.m.route->name, "chat"));
    CHECK(v.auth.principal_len == 5 && !strcmp((char *)v.auth.principal, "acme"));
    CHECK(v.auth.log[0].key && !strcmp(v.auth.log[0].value, "acme"));
    /* the caller first: no key beats a too large body and a wrong media type */
    h = H("POST", "/v1/chat", NULL, NULL, "text/plain", 1 << 30, false);
    CHECK(lg__head_check(rt, &h, &v) == 401 && v.www_authenticate && !strcmp(v.code, "invalid_api_key"));
    h = H("POST", "/v1/chat", NULL, "Bearer ro", J, 1 << 30, false);
    CHECK(lg__head_check(rt, &h, &v) == 403 && !v.www_authenticate);
    h = H("POST", "/v1/chat", NULL, "Bearer ka", J, 1 << 30, false);
    CHECK(lg__head_check(rt, &h, &v) == 413 && !strcmp(v.code, "request_too_large"));
    h = H("POST", "/v1/chat", NULL, "Bearer ka", "text/plain", 10, false);
    CHECK(lg__head_check(rt, &h, &v) == 415);
    h = H("POST", "/v1/chat", NULL, "Bearer ka", NULL, -1, false); /* chunked, no type */
    CHECK(lg__head_check(rt, &h, &v) == 415);
    h = H("POST", "/v1/chat", NULL, "Bearer ka", J, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 400 && !strcmp(v.code, "missing_body"));
    h = H("POST", "/v1/chat", NULL, "Bearer ka", J, -1, false); /* a chunked head is not refused for its size */
    CHECK(lg__head_check(rt, &h, &v) == 0);
    /* routing */
    h = H("GET", "/v1/nope", NULL, NULL, NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 404 && !strcmp(v.code, "unknown_url"));
    h = H("DELETE", "/v1/chat", NULL, NULL, NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 405 && !strcmp(v.allow, "POST"));
    h = H("GET", "/t/acme/v1/open", "beta.api.test", NULL, NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 400 && !strcmp(v.code, "tenant_mismatch"));
    h = H("GET", "/v1/items/a%zz", NULL, "Bearer ka", NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 400 && !strcmp(v.param, "id"));
    /* tenants: an unknown one is answered exactly as another tenant's */
    const char *keys[] = {NULL, "Bearer nope", "Bearer kb"};
    for (int k = 0; k < 3; k++) {
        lg_verdict a, b, c, d;
        h = H("GET", "/t/acme/v1/items/1", NULL, keys[k], NULL, 0, true);
        lg__head_check(rt, &h, &a);
        h = H("GET", "/t/nosuch/v1/items/1", NULL, keys[k], NULL, 0, true);
        lg__head_check(rt, &h, &b);
        h = H("GET", "/v1/items/1", "acme.api.test", keys[k], NULL, 0, true);
        lg__head_check(rt, &h, &c);
        h = H("GET", "/v1/items/1", "nosuch.api.test:443", keys[k], NULL, 0, true);
        lg__head_check(rt, &h, &d);
        CHECK_MSG(a.status == 401 && b.status == a.status && c.status == a.status && d.status == a.status, "key %d", k);
        CHECK(!strcmp(a.message, b.message) && !strcmp(a.message, c.message) && !strcmp(a.message, d.message));
    }
    h = H("GET", "/t/acme/v1/items/1", NULL, "Bearer ka", NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 0 && v.tenant == T_A && !strcmp(v.tenant_slug, "acme"));
    /* without auth there is nothing to protect: an unknown tenant is a 404 */
    h = H("GET", "/t/nosuch/v1/open", NULL, NULL, NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 404 && !strcmp(v.code, "tenant_not_found"));
    h = H("GET", "/t/down/v1/items/1", NULL, "Bearer ka", NULL, 0, true);
    CHECK(lg__head_check(rt, &h, &v) == 503 && v.retry_after_s == 1);
    lg_router_free(rt);
}

static void test_quota(void)
{
    lg_upload_quota *q;
    lg_err err;
    CHECK(lg_upload_quota_create("/tmp", 2, 100, 0, 80, &q, &err) == 0);
    lg_tenant_obj ta = {.id = 7}, tb = {.id = 8};
    lg_auth_result a = {0}, b = {0}, op = {.principal_ptr = (void *)1};
    ((lg_principal *)a.principal)->tenant = &ta;
    a.principal_len = sizeof(lg_principal);
    ((lg_principal *)b.principal)->tenant = &tb;
    b.principal_len = sizeof(lg_principal);
    void *h1, *h2, *h3, *h4;
    lg_auth_result out = {0};
    CHECK(lg_upload_quota_admit(&a, 40, q, &h1, &out) == 0 && h1);
    CHECK(lg_upload_quota_admit(&a, 70, q, &h2, &out) != 0 && out.status == 429 && !h2); /* bytes: 110 > 100 */
    memset(&out, 0, sizeof out);
    CHECK(lg_upload_quota_admit(&a, -1, q, &h2, &out) != 0 && out.status == 429); /* unknown length counts 80 */
    CHECK(lg_upload_quota_admit(&a, 50, q, &h2, &out) == 0);
    CHECK(lg_upload_quota_admit(&a, 1, q, &h3, &out) != 0 && out.status == 429); /* count: 2 */
    CHECK(lg_upload_quota_admit(&b, 90, q, &h3, &out) == 0);                    /* another tenant */
    CHECK(lg_upload_quota_admit(&op, 90, q, &h4, &out) == 0);                   /* the operator */
    uint64_t bytes;
    CHECK(lg_upload_quota_in_flight(q, &bytes) == 4 && bytes == 40 + 50 + 90 + 90);
    lg_upload_quota_release(h1);
    lg_upload_quota_release(h2);
    lg_upload_quota_release(h3);
    lg_upload_quota_release(h4);
    CHECK(lg_upload_quota_in_flight(q, &bytes) == 0 && bytes == 0);
    CHECK(lg_upload_quota_admit(&a, 100, q, &h1, &out) == 0);
    lg_upload_quota_release(h1);
    lg_upload_quota_free(q);
    /* the disk floor: more than any disk has */
    CHECK(lg_upload_quota_create("/tmp", 2, 100, (uint64_t)1 << 62, 80, &q, &err) == 0);
    memset(&out, 0, sizeof out);
    CHECK(lg_upload_quota_admit(&a, 1, q, &h1, &out) != 0 && out.status == 507);
    lg_upload_quota_free(q);
    /* many tenants come and go */
    CHECK(lg_upload_quota_create("/tmp", 1, 100, 0, 80, &q, &err) == 0);
    for (int i = 0; i < 1000; i++) {
        lg_tenant_obj t = {.id = 100 + i};
        lg_auth_result w = {0};
        ((lg_principal *)w.principal)->tenant = &t;
        w.principal_len = sizeof(lg_principal);
        void *x, *y;
        CHECK(lg_upload_quota_admit(&w, 10, q, &x, &out) == 0);
        CHECK(lg_upload_quota_admit(&w, 10, q, &y, &out) != 0);
        lg_upload_quota_release(x);
    }
    CHECK(lg_upload_quota_in_flight(q, NULL) == 0);
    lg_upload_quota_free(q);
}

int main(void)
{
    test_checks();
    test_quota();
    TEST_DONE();
}
