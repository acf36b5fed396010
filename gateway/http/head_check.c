/*
 * head_check.c — see head_check.h. No allocation, no I/O: every answer is
 * written into the caller's lg_verdict.
 */
#include "gateway/http/head_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gateway/http/http_util.h"

static bool is_method(const lg_head *h, const char *m)
{
    size_t n = strlen(m);
    return h->method_len == n && memcmp(h->method, m, n) == 0;
}

static bool method_has_body(const lg_head *h) { return is_method(h, "POST") || is_method(h, "PUT") || is_method(h, "PATCH"); }

static int clip(size_t n, size_t max) { return (int)(n > max ? max : n); }

void lg__verdict_refuse(lg_verdict *v, int status, const char *code, const char *fmt, ...)
{
    v->status = status;
    v->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
}

/* The path parameters must percent-decode (the dispatcher decodes them into
 * request memory later); checked here on a scratch buffer. */
static bool params_ok(const lg_route_match *m, const char **bad)
{
    char small[512];
    for (int i = 0; i < m->n_params; i++) {
        size_t n = m->params[i].len;
        char big[8192];
        char *out = n < sizeof small ? small : n < sizeof big ? big : NULL;
        if (!out || lg_percent_decode(m->params[i].value, n, out, n + 1) < 0) {
            *bad = m->params[i].name;
            return false;
        }
    }
    return true;
}

int lg__head_check(const lg_router *rt, const lg_head *h, lg_verdict *v)
{
    memset(v, 0, sizeof *v);
    size_t plen = h->path_len;
    const char *q = memchr(h->path, '?', plen);
    if (q)
        plen = (size_t)(q - h->path);
    lg_match_result mr = lg_router_route(rt, h->method, h->method_len, h->path, plen, h->authority,
                                         h->authority_len, &v->m);
    if (mr == LG_MATCH_TENANT_CONFLICT) {
        lg__verdict_refuse(v, 400, "tenant_mismatch",
                           "The tenant in the URL path (/t/%.*s/) and the one in the Host header differ.",
                           clip(v->m.tenant_len, 63), v->m.tenant);
        return v->status;
    }
    if (mr == LG_MATCH_NOT_FOUND) {
        lg__verdict_refuse(v, 404, "unknown_url",
                           "Unknown request URL: %.*s %.*s. Please check the URL for typos, or see docs/api.md.",
                           clip(h->method_len, 16), h->method, clip(plen, 200), h->path);
        return v->status;
    }
    if (mr == LG_MATCH_METHOD_NOT_ALLOWED) {
        snprintf(v->allow, sizeof v->allow, "%s", v->m.allow);
        lg__verdict_refuse(v, 405, "method_not_allowed", "Method %.*s is not allowed on %.*s (allowed: %s).",
                           clip(h->method_len, 16), h->method, clip(plen, 200), h->path, v->m.allow);
        return v->status;
    }
    const lg_route *route = v->m.route;
    const char *bad;
    if (!params_ok(&v->m, &bad)) {
        v->param = bad;
        lg__verdict_refuse(v, 400, "invalid_path", "Invalid percent-encoding in the path parameter '%s'.", bad);
        return v->status;
    }
    if (v->m.tenant_via != LG_TENANT_NONE) {
        size_t n = v->m.tenant_len < sizeof v->tenant_slug ? v->m.tenant_len : sizeof v->tenant_slug - 1;
        for (size_t i = 0; i < n; i++) {
            char c = v->m.tenant[i];
            v->tenant_slug[i] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        }
        v->tenant_slug[n] = 0;
        const lg_tenancy *ten = lg_router_tenancy(rt);
        if (ten->resolve) {
            int found = ten->resolve(ten->user, v->tenant_slug, &v->tenant);
            if (found < 0) {
                v->retry_after_s = 1;
                lg__verdict_refuse(v, 503, NULL, "The tenant directory is not available right now; please retry.");
                return v->status;
            }
            if (found == 0) {
                v->tenant = NULL;
                /* with auth, the hook answers it as a key that does not match (no name probing) */
                if (!route->auth) {
                    lg__verdict_refuse(v, 404, "tenant_not_found", "Unknown tenant '%s'.", v->tenant_slug);
                    return v->status;
                }
            }
        }
    }
    if (route->auth) {
        lg_auth_in in = {.tenant_via = v->m.tenant_via, .tenant = v->tenant};
        if (h->authorization && lg_parse_bearer(h->authorization, h->authorization_len, &in.bearer, &in.bearer_len) != 0)
            in.bearer = NULL, in.bearer_len = 0;
        if (route->auth(&in, route->auth_user, &v->auth) != 0) {
            int st = v->auth.status ? v->auth.status : 401;
            v->www_authenticate = st == 401;
            const char *msg = v->auth.message;
            if (!msg)
                msg = st == 401 ? (in.bearer ? "Incorrect API key provided."
                                             : "You didn't provide an API key. You need to provide your API key in an "
                                               "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
                                : "You have insufficient permissions for this operation.";
            lg__verdict_refuse(v, st, st == 401 ? "invalid_api_key" : NULL, "%s", msg);
            return v->status;
        }
    }
    if (h->body_len > 0 && (uint64_t)h->body_len > route->max_body) {
        lg__verdict_refuse(v, 413, "request_too_large", "The request body is %lld bytes; %s %s accepts at most %zu bytes.",
                           (long long)h->body_len, route->method, route->pattern, route->max_body);
        return v->status;
    }
    if (h->whole && route->body_required && h->body_len == 0 && method_has_body(h)) {
        lg__verdict_refuse(v, 400, "missing_body", "%s %s needs a request body.", route->method, route->pattern);
        return v->status;
    }
    if (route->content_type && (h->body_len != 0 || route->body_required)) {
        if (!h->content_type) {
            lg__verdict_refuse(v, 415, "unsupported_media_type",
                               "The request has no Content-Type header; %s %s expects %s.", route->method,
                               route->pattern, route->content_type);
            return v->status;
        }
        if (!lg_media_type_is(h->content_type, h->content_type_len, route->content_type)) {
            lg__verdict_refuse(v, 415, "unsupported_media_type", "Content-Type '%.*s' is not supported by %s %s; it expects %s.",
                               clip(h->content_type_len, 100), h->content_type, route->method, route->pattern,
                               route->content_type);
            return v->status;
        }
    }
    return 0;
}
