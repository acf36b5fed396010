/*
 * router.c — see router.h. Each route keeps its pattern pre-split into
 * segments; matching splits the request path once into at most
 * LG_MAX_SEGS slices and compares segment arrays. Specificity is a score
 * string (one char per segment: 'a' literal, 'b' parameter, 'c' catch-all)
 * compared lexicographically: smaller is more specific.
 */
#include "gateway/http/router.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LG_MAX_SEGS 32

enum seg_kind { SEG_LIT = 0, SEG_PARAM = 1, SEG_REST = 2 };

typedef struct seg {
    enum seg_kind kind;
    char *text; /* literal text or parameter name */
    size_t len;
} seg;

typedef struct route_ent {
    lg_route r;
    seg segs[LG_MAX_SEGS];
    int n_segs;
    char score[LG_MAX_SEGS + 1];
} route_ent;

struct lg_router {
    route_ent *routes;
    int n, cap;
    size_t max_body;
    lg_tenancy tenancy; /* host_suffix owned */
};

static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", NULL};

lg_router *lg_router_create(void) { return calloc(1, sizeof(lg_router)); }

static void free_ent(route_ent *e)
{
    free((char *)e->r.method);
    free((char *)e->r.pattern);
    free((char *)e->r.content_type);
    free((char *)e->r.name);
    for (int i = 0; i < e->n_segs; i++)
        free(e->segs[i].text);
}

void lg_router_free(lg_router *rt)
{
    if (!rt)
        return;
    for (int i = 0; i < rt->n; i++) {
        if (rt->routes[i].r.free_user)
            rt->routes[i].r.free_user(rt->routes[i].r.user);
        free_ent(&rt->routes[i]);
    }
    free(rt->routes);
    free((char *)rt->tenancy.host_suffix);
    free(rt);
}

static bool valid_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static int parse_pattern(const char *p, route_ent *e, lg_err *err)
{
    if (p[0] != '/')
        return lg_fail(err, "route pattern '%s' must start with '/'", p);
    if (p[1] == 0) {
        e->n_segs = 0; /* "/" */
        return 0;
    }
    const char *s = p + 1;
    while (1) {
        const char *end = strchr(s, '/');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == 0)
            return lg_fail(err, "route pattern '%s' has an empty segment", p);
        if (e->n_segs == LG_MAX_SEGS)
            return lg_fail(err, "route pattern '%s' has more than %d segments", p, LG_MAX_SEGS);
        seg *g = &e->segs[e->n_segs];
        if (s[0] == '{') {
            if (s[len - 1] != '}' || len < 3)
                return lg_fail(err, "route pattern '%s': parameter segment must be {name} or {name*}", p);
            size_t nl = len - 2;
            g->kind = SEG_PARAM;
            if (s[len - 2] == '*') {
                g->kind = SEG_REST;
                nl--;
                if (end)
                    return lg_fail(err, "route pattern '%s': {name*} must be the last segment", p);
            }
            if (nl == 0)
                return lg_fail(err, "route pattern '%s': empty parameter name", p);
            for (size_t i = 0; i < nl; i++)
                if (!valid_name_char(s[1 + i]))
                    return lg_fail(err, "route pattern '%s': parameter names are [A-Za-z0-9_]", p);
            g->text = strndup(s + 1, nl);
            g->len = nl;
        } else {
            for (size_t i = 0; i < len; i++)
                if (s[i] == '{' || s[i] == '}' || s[i] == '%' || s[i] == '?')
                    return lg_fail(err, "route pattern '%s': literal segments cannot contain '{', '}', '%%' or '?'", p);
            if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
                return lg_fail(err, "route pattern '%s': '.' and '..' segments are not allowed", p);
            g->kind = SEG_LIT;
            g->text = strndup(s, len);
            g->len = len;
        }
        if (!g->text)
            return lg_fail(err, "out of memory");
        e->score[e->n_segs] = (char)('a' + g->kind);
        e->n_segs++;
        if (!end)
            break;
        s = end + 1;
    }
    int n_params = 0;
    for (int i = 0; i < e->n_segs; i++)
        n_params += e->segs[i].kind != SEG_LIT;
    if (n_params > LG_ROUTE_MAX_PARAMS)
        return lg_fail(err, "route pattern '%s' has more than %d parameters", p, LG_ROUTE_MAX_PARAMS);
    return 0;
}

/* Two patterns are equivalent when they have the same shape: same literals
 * at the same places, parameters at the same places. */
static bool same_shape(const route_ent *a, const route_ent *b)
{
    if (a->n_segs != b->n_segs)
        return false;
    for (int i = 0; i < a->n_segs; i++) {
        if (a->segs[i].kind != b->segs[i].kind)
            return false;
        if (a->segs[i].kind == SEG_LIT && strcmp(a->segs[i].text, b->segs[i].text) != 0)
            return false;
    }
    return true;
}

int lg_router_add(lg_router *rt, const lg_route *route, lg_err *err)
{
    if (!route->method || !route->pattern || !route->fn)
        return lg_fail(err, "route needs a method, a pattern and a function");
    bool known = false;
    for (int i = 0; methods[i]; i++)
        known |= strcmp(methods[i], route->method) == 0;
    if (!known)
        return lg_fail(err, "route '%s %s': unknown method", route->method, route->pattern);
    route_ent e;
    memset(&e, 0, sizeof e);
    if (parse_pattern(route->pattern, &e, err) != 0) {
        free_ent(&e);
        return -1;
    }
    for (int i = 0; i < rt->n; i++) {
        if (strcmp(rt->routes[i].r.method, route->method) == 0 && same_shape(&rt->routes[i], &e)) {
            lg_fail(err, "route '%s %s' conflicts with '%s %s'", route->method, route->pattern,
                    rt->routes[i].r.method, rt->routes[i].r.pattern);
            free_ent(&e);
            return -1;
        }
    }
    if (rt->n == rt->cap) {
        int nc = rt->cap ? rt->cap * 2 : 16;
        route_ent *nr = realloc(rt->routes, nc * sizeof *nr);
        if (!nr) {
            free_ent(&e);
            return lg_fail(err, "out of memory");
        }
        rt->routes = nr;
        rt->cap = nc;
    }
    e.r = *route;
    e.r.method = strdup(route->method);
    e.r.pattern = strdup(route->pattern);
    e.r.content_type = route->content_type ? strdup(route->content_type) : NULL;
    e.r.name = strdup(route->name ? route->name : route->pattern);
    if (!e.r.max_body)
        e.r.max_body = LG_ROUTE_DEFAULT_MAX_BODY;
    if (!e.r.method || !e.r.pattern || !e.r.name || (route->content_type && !e.r.content_type)) {
        free_ent(&e);
        return lg_fail(err, "out of memory");
    }
    rt->routes[rt->n++] = e;
    if (e.r.max_body > rt->max_body)
        rt->max_body = e.r.max_body;
    return 0;
}

int lg_router_add_all(lg_router *rt, const lg_route *routes, int n, lg_err *err)
{
    for (int i = 0; i < n; i++)
        if (lg_router_add(rt, &routes[i], err) != 0)
            return -1;
    return 0;
}

size_t lg_router_max_body(const lg_router *rt) { return rt->max_body; }
int lg_router_count(const lg_router *rt) { return rt->n; }

typedef struct pseg {
    const char *s;
    size_t len;
} pseg;

/* Matches e against the split path; fills params (when m != NULL). */
static bool match_ent(const route_ent *e, const pseg *ps, int n_ps, const char *path_end, lg_route_match *m)
{
    int np = 0;
    for (int i = 0; i < e->n_segs; i++) {
        const seg *g = &e->segs[i];
        if (i >= n_ps)
            return false;
        if (g->kind == SEG_LIT) {
            if (ps[i].len != g->len || memcmp(ps[i].s, g->text, g->len) != 0)
                return false;
        } else if (g->kind == SEG_PARAM) {
            if (m) {
                m->params[np].name = g->text;
                m->params[np].value = ps[i].s;
                m->params[np].len = ps[i].len;
            }
            np++;
        } else { /* rest: all remaining segments */
            if (m) {
                m->params[np].name = g->text;
                m->params[np].value = ps[i].s;
                m->params[np].len = (size_t)(path_end - ps[i].s);
            }
            np++;
            if (m)
                m->n_params = np;
            return true;
        }
    }
    if (e->n_segs != n_ps)
        return false;
    if (m)
        m->n_params = np;
    return true;
}

lg_match_result lg_router_match(const lg_router *rt, const char *method, size_t method_len, const char *path,
                                size_t path_len, lg_route_match *m)
{
    memset(m, 0, sizeof *m);
    const char *q = memchr(path, '?', path_len);
    if (q)
        path_len = (size_t)(q - path);
    if (path_len == 0 || path[0] != '/')
        return LG_MATCH_NOT_FOUND;
    /* split */
    pseg ps[LG_MAX_SEGS];
    int n_ps = 0;
    const char *end = path + path_len;
    if (path_len > 1) {
        const char *s = path + 1;
        while (1) {
            const char *slash = memchr(s, '/', (size_t)(end - s));
            size_t len = slash ? (size_t)(slash - s) : (size_t)(end - s);
            if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
                return LG_MATCH_NOT_FOUND;
            if (n_ps == LG_MAX_SEGS)
                return LG_MATCH_NOT_FOUND;
            ps[n_ps].s = s;
            ps[n_ps].len = len;
            n_ps++;
            if (!slash)
                break;
            s = slash + 1;
        }
    }
    const route_ent *best = NULL;
    bool path_known = false;
    size_t alen = 0;
    for (int i = 0; i < rt->n; i++) {
        const route_ent *e = &rt->routes[i];
        if (!match_ent(e, ps, n_ps, end, NULL))
            continue;
        path_known = true;
        bool meth = strlen(e->r.method) == method_len && memcmp(e->r.method, method, method_len) == 0;
        /* a GET route answers HEAD too (its headers, no body: request.c) */
        if (!meth && method_len == 4 && memcmp(method, "HEAD", 4) == 0 && !strcmp(e->r.method, "GET"))
            meth = true;
        if (meth) {
            if (!best || strcmp(e->score, best->score) < 0)
                best = e;
        }
    }
    if (best) {
        match_ent(best, ps, n_ps, end, m);
        m->route = &best->r;
        return LG_MATCH_FOUND;
    }
    if (!path_known)
        return LG_MATCH_NOT_FOUND;
    /* Allow: every method of a pattern matching this path, in a fixed order */
    for (int k = 0; methods[k]; k++) {
        for (int i = 0; i < rt->n; i++) {
            const route_ent *e = &rt->routes[i];
            bool listed = !strcmp(e->r.method, methods[k]) ||
                          (!strcmp(methods[k], "HEAD") && !strcmp(e->r.method, "GET"));
            if (!listed || !match_ent(e, ps, n_ps, end, NULL))
                continue;
            size_t ml = strlen(methods[k]);
            if (alen + ml + 3 < sizeof m->allow) {
                if (alen) {
                    memcpy(m->allow + alen, ", ", 2);
                    alen += 2;
                }
                memcpy(m->allow + alen, methods[k], ml);
                alen += ml;
                m->allow[alen] = 0;
            }
            break;
        }
    }
    return LG_MATCH_METHOD_NOT_ALLOWED;
}

/* ---- tenancy ------------------------------------------------------------------ */

bool lg_tenant_slug_valid(const char *s, size_t len)
{
    if (len < 1 || len > 63 || s[0] == '-' || s[len - 1] == '-')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return true;
}

int lg_router_set_tenancy(lg_router *rt, const lg_tenancy *t, lg_err *err)
{
    char *suffix = NULL;
    if (t->host_suffix && *t->host_suffix) {
        const char *h = t->host_suffix;
        size_t n = strlen(h);
        if (h[0] != '.' || n < 2 || n > 200)
            return lg_fail(err, "tenant host suffix '%s' must start with '.' (e.g. .api.example.com)", h);
        for (size_t i = 1; i < n; i++) {
            char c = h[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
                return lg_fail(err, "tenant host suffix '%s': only letters, digits, '-' and '.' are allowed", h);
        }
        if (!(suffix = strdup(h)))
            return lg_fail(err, "out of memory");
        for (char *p = suffix; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p += 32;
    }
    free((char *)rt->tenancy.host_suffix);
    rt->tenancy = *t;
    rt->tenancy.host_suffix = suffix;
    return 0;
}

const lg_tenancy *lg_router_tenancy(const lg_router *rt) { return &rt->tenancy; }

/* The slug of host ("acme.api.example.com:8443") under suffix; false when
 * the host is not <label><suffix>. */
static bool host_slug(const char *suffix, const char *host, size_t hlen, const char **slug, size_t *slen)
{
    if (!suffix || !host || !hlen)
        return false;
    /* strip the port (IPv6 literals never carry a tenant) */
    if (host[0] == '[')
        return false;
    const char *colon = memchr(host, ':', hlen);
    if (colon)
        hlen = (size_t)(colon - host);
    if (hlen && host[hlen - 1] == '.') /* absolute form "acme.api.example.com." */
        hlen--;
    size_t sl = strlen(suffix);
    if (hlen <= sl || strncasecmp(host + hlen - sl, suffix, sl) != 0)
        return false;
    size_t n = hlen - sl;
    if (n > 63)
        return false;
    char low[64];
    for (size_t i = 0; i < n; i++)
        low[i] = (host[i] >= 'A' && host[i] <= 'Z') ? host[i] + 32 : host[i];
    if (!lg_tenant_slug_valid(low, n))
        return false;
    *slug = host;
    *slen = n;
    return true;
}

lg_match_result lg_router_route(const lg_router *rt, const char *method, size_t method_len, const char *path,
                                size_t path_len, const char *host, size_t host_len, lg_route_match *m)
{
    const char *q = memchr(path, '?', path_len);
    if (q)
        path_len = (size_t)(q - path);
    const char *pslug = NULL;
    size_t pslen = 0;
    if (path_len > 3 && memcmp(path, "/t/", 3) == 0) {
        const char *s = path + 3, *end = path + path_len;
        const char *slash = memchr(s, '/', (size_t)(end - s));
        if (!slash || !lg_tenant_slug_valid(s, (size_t)(slash - s))) {
            memset(m, 0, sizeof *m);
            return LG_MATCH_NOT_FOUND;
        }
        pslug = s;
        pslen = (size_t)(slash - s);
        path = slash;
        path_len = (size_t)(end - slash);
    }
    lg_match_result res = lg_router_match(rt, method, method_len, path, path_len, m);
    if (res == LG_MATCH_FOUND && pslug && !m->route->tenant_scoped) {
        memset(m, 0, sizeof *m);
        return LG_MATCH_NOT_FOUND;
    }
    if (res != LG_MATCH_FOUND)
        return res; /* 405's Allow may list methods of non-tenant routes under /t/: harmless */
    const char *hs;
    size_t hsl;
    bool by_host = m->route->tenant_scoped && host_slug(rt->tenancy.host_suffix, host, host_len, &hs, &hsl);
    if (pslug) {
        if (by_host && (hsl != pslen || strncasecmp(hs, pslug, pslen) != 0))
            return LG_MATCH_TENANT_CONFLICT;
        m->tenant_via = LG_TENANT_PATH;
        m->tenant = pslug;
        m->tenant_len = pslen;
    } else if (by_host) {
        m->tenant_via = LG_TENANT_HOST;
        m->tenant = hs;
        m->tenant_len = hsl;
    }
    return LG_MATCH_FOUND;
}
