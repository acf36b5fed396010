/*
 * router.h — method + path-pattern dispatch for the gateway's one h2o handler.
 *
 * Why our own handler type rather than one h2o_handler_t per route: h2o 2.2
 * registers handlers by path *prefix* (h2o_config_register_path) and knows
 * neither methods nor path parameters, so "/t/{tenant}/v1/chat/completions"
 * or "GET /v1/models/{id}" vs "DELETE /v1/models/{id}" cannot be said in its
 * configuration. The server therefore registers one root h2o_handler_t
 * (server.c embeds it) that calls lg_router_match, and route families (one
 * file each: route_health.c now; route_openai.c, route_admin.c later)
 * register lg_route entries: a function, a user pointer, and the per-route
 * policy applied before the function runs (auth hook -> 401/403, body size
 * limit -> 413, required content type -> 415).
 *
 * Patterns. Segments separated by '/'; a segment is a literal, "{name}"
 * (exactly one non-empty segment, percent-decoded, never containing '/') or,
 * last only, "{name*}" (one or more segments, the rest of the path, e.g.
 * model ids like "org/model"). Matching runs on the raw request path (before
 * h2o's normalisation, which decodes %2F into '/'), without the query; a
 * path with empty, "." or ".." segments matches nothing. When several
 * patterns match, the most specific wins: at the first segment where they
 * differ, a literal beats a parameter, which beats a catch-all.
 *
 * Tenants. A route with tenant_scoped set answers at its pattern
 * ("/v1/models", tenant from the key) and under the tenant's own base URL
 * "/t/<slug>/v1/models"; with a host suffix configured
 * (lg_router_set_tenancy, `--tenant-host-suffix .api.example.com`) also by
 * Host / :authority, "https://acme.api.example.com/v1/models". The "/t/"
 * prefix on a route that is not tenant-scoped matches nothing (404); a
 * tenant Host on such a route is ignored (health probes, admin API); a path
 * slug and a Host slug that differ are a conflict (400). lg_router_route
 * only finds the slug; the head checks resolve it with the tenancy's
 * resolve function before auth runs (store unavailable: 503; unknown: auth
 * sees no tenant and answers as for a key of another tenant, 401; a route
 * without auth answers 404),
 * and route code reads it with lg_request_tenant / lg_request_tenant_slug.
 * Slugs are DNS labels: 1..63 of [a-z0-9-], not starting or ending with
 * '-' (Host labels are compared lowercased).
 *
 * Registering a route family (one file per family, e.g. routes_openai.c):
 *
 *     int lg_routes_openai(lg_router *rt, const lg_openai_deps *deps, lg_err *err) {
 *         lg_openai_deps *d = ...a copy of deps, freed with the router...;
 *         lg_route routes[] = {
 *             {.method = "POST", .pattern = "/v1/chat/completions", .fn = chat, .user = d,
 *              .content_type = "application/json", .body_required = true,
 *              .auth = lg_auth_tenant_inference, .auth_user = d->auth, .tenant_scoped = true,
 *              .name = "chat.completions", .free_user = free},
 *             ...
 *         };
 *         return lg_router_add_all(rt, routes, (int)(sizeof routes / sizeof routes[0]), err);
 *     }
 *
 * and cmd_serve.c's setup calls it before lg_server_create. The head checks
 * (head_check.h, run by the connection guard as soon as a request's headers
 * arrive and again by the dispatcher) apply, in order: 404/405 (with
 * Allow), tenant conflict (400), path-parameter decoding (400), tenant
 * resolution (503; an unknown tenant goes to auth as "none"), route->auth
 * (401/403), body size (413), missing body (400), content type (415); then
 * the dispatcher calls route->fn on the loop thread. Every answer, error or
 * not, carries x-request-id and produces one access-log line
 * (access_log.h).
 *
 * Workload: a few dozen routes, matched once per request by a linear scan
 * over pre-split segments (well under a microsecond); built once at startup,
 * read-only afterwards, so loop threads share it without locks.
 */
#ifndef LG_GW_ROUTER_H
#define LG_GW_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/base/common.h"

typedef struct lg_request lg_request; /* request.h */
typedef struct lg_router lg_router;

/* A route's function. Runs on the loop thread that owns r. It must answer r
 * now or later (lg_respond*, lg_sse_*), possibly from a message delivered to
 * r; return 0. Returning -1 without having answered makes the dispatcher
 * answer 500. */
typedef int (*lg_route_fn)(lg_request *r, void *user);

/* Auth hooks decide from the request head alone, before any body byte is
 * read (the connection guard, conn.c, runs them as soon as a request's
 * headers arrive, so that an unauthenticated body is never read). A hook is
 * a pure decision: it reads `in`, fills `out`, and answers nothing itself.
 *
 * in->tenant is what the tenancy's resolver returned for the addressed
 * tenant (NULL both for "not addressed" and for "no such tenant": a hook
 * must answer an unknown tenant exactly as a tenant whose key does not
 * match, so that tenant names cannot be probed without a key). */
typedef struct lg_auth_in {
    const char *bearer; /* the Authorization header's bearer token (not NUL-terminated); NULL: none */
    size_t bearer_len;
    int tenant_via;     /* lg_tenant_via below */
    void *tenant;       /* the addressed tenant; NULL: none or unknown */
} lg_auth_in;

#define LG_PRINCIPAL_MAX 128

typedef struct lg_auth_result {
    /* refused: the answer (401 adds WWW-Authenticate: Bearer) */
    int status;              /* 401, 403, ... */
    const char *message;     /* static text; NULL: the status's usual wording */
    /* allowed: who called, as lg_request_principal returns it. Either
     * principal_len bytes of `principal` (copied into request memory), or,
     * with principal_len 0, the pointer principal_ptr (an object that
     * outlives the request, such as the operator key). */
    void *principal_ptr;
    size_t principal_len;
    _Alignas(16) unsigned char principal[LG_PRINCIPAL_MAX];
    /* allowed: up to two access-log fields (key NULL: none), e.g. the
     * tenant and the key id; never secrets */
    struct {
        const char *key;
        char value[72];
    } log[2];
} lg_auth_result;

/* Returns 0 to admit (principal and log fields set), -1 to refuse (status
 * and message set). Runs on a loop thread: it must not block. */
typedef int (*lg_auth_fn)(const lg_auth_in *in, void *user, lg_auth_result *out);

/* Optional, for routes that take large bodies (uploads): decides, after
 * auth and still before the body is read, whether this caller may send a
 * body of `declared` bytes (-1: unknown length, chunked) now. Returns 0 and
 * sets *hold (released with release_body once the request is over, or the
 * body never completed), or -1 with out->status / out->message set (429:
 * too many uploads in flight for this tenant, 507: not enough disk). */
typedef int (*lg_body_admit_fn)(const lg_auth_result *who, int64_t declared, void *user, void **hold,
                                lg_auth_result *out);

#define LG_ROUTE_DEFAULT_MAX_BODY (4u << 20) /* 4 MiB: JSON bodies */
#define LG_ROUTE_MAX_PARAMS 8

typedef struct lg_route {
    const char *method;       /* "GET", "POST", "DELETE", ... (exact, upper case) */
    const char *pattern;      /* "/v1/models/{id}" */
    lg_route_fn fn;
    void *user;
    size_t max_body;          /* largest accepted body; 0: LG_ROUTE_DEFAULT_MAX_BODY */
    const char *content_type; /* required media type of a non-empty body ("application/json"), NULL: any */
    bool body_required;       /* refuse a missing/empty body (400) */
    lg_auth_fn auth;          /* NULL: public route */
    void *auth_user;
    lg_body_admit_fn admit_body;        /* NULL: any body within max_body */
    void (*release_body)(void *hold);   /* with admit_body */
    void *admit_user;
    bool tenant_scoped;       /* also at /t/<slug>/... and by tenant Host (see above) */
    const char *name;         /* short name for logs and metrics; NULL: the pattern */
    void (*free_user)(void *user); /* optional: lg_router_free calls it on user (set it on one route of a family) */
} lg_route;

lg_router *lg_router_create(void);
void lg_router_free(lg_router *rt); /* NULL: no-op */

/* Copies the route (and its strings). Refuses malformed patterns, unknown
 * methods, and a second route with the same method and an equivalent
 * pattern. Not thread-safe: build the router before the server starts. */
int lg_router_add(lg_router *rt, const lg_route *route, lg_err *err);
/* lg_router_add for each of n routes; stops at the first failure. */
int lg_router_add_all(lg_router *rt, const lg_route *routes, int n, lg_err *err);

/* ---- tenancy ---- */

/* Finds the tenant named slug (NUL-terminated, a valid slug). Runs on a
 * loop thread for every tenant-addressed request: it must not block (read
 * an in-memory view the store keeps current). Returns 1 and sets *tenant
 * (an opaque pointer the route gets back from lg_request_tenant, valid for
 * the request's lifetime: the resolver's owner guarantees it, e.g. by
 * refcounting), 0 when there is no such tenant, -1 when it cannot tell now. */
typedef int (*lg_tenant_resolve_fn)(void *user, const char *slug, void **tenant);

typedef struct lg_tenancy {
    const char *host_suffix;      /* ".api.example.com"; NULL: no Host routing */
    lg_tenant_resolve_fn resolve; /* NULL: every valid slug is accepted, tenant pointer NULL */
    void *user;
} lg_tenancy;

/* Copies t (and the suffix, which must start with '.'). Before the server starts. */
int lg_router_set_tenancy(lg_router *rt, const lg_tenancy *t, lg_err *err);
const lg_tenancy *lg_router_tenancy(const lg_router *rt);
bool lg_tenant_slug_valid(const char *s, size_t len);

/* Largest max_body over all routes (what h2o must be allowed to buffer). */
size_t lg_router_max_body(const lg_router *rt);
int lg_router_count(const lg_router *rt);

typedef enum lg_match_result {
    LG_MATCH_FOUND = 0,
    LG_MATCH_NOT_FOUND = 1,          /* no pattern matches the path: 404 */
    LG_MATCH_METHOD_NOT_ALLOWED = 2, /* some pattern matches the path, not with this method: 405 */
    LG_MATCH_TENANT_CONFLICT = 3,    /* the path's /t/<slug> and the Host's slug differ: 400 */
} lg_match_result;

typedef enum lg_tenant_via {
    LG_TENANT_NONE = 0, /* plain /v1/...: the tenant comes from the key */
    LG_TENANT_PATH = 1, /* /t/<slug>/... */
    LG_TENANT_HOST = 2, /* <slug><host_suffix> */
} lg_tenant_via;

typedef struct lg_route_match {
    const lg_route *route; /* FOUND */
    int n_params;
    struct {
        const char *name;  /* the pattern's parameter name (owned by the router) */
        const char *value; /* raw slice of the path (NOT decoded, not NUL-terminated) */
        size_t len;
    } params[LG_ROUTE_MAX_PARAMS];
    char allow[96];        /* METHOD_NOT_ALLOWED: "GET, POST" for the Allow header */
    lg_tenant_via tenant_via; /* lg_router_route only */
    const char *tenant;       /* slice of the path or host (not NUL-terminated; host: maybe upper case) */
    size_t tenant_len;
} lg_route_match;

/* path: the raw request path; matching stops at '?' if any. */
lg_match_result lg_router_match(const lg_router *rt, const char *method, size_t method_len, const char *path,
                                size_t path_len, lg_route_match *m);

/* lg_router_match with tenancy: strips a "/t/<slug>" prefix (then only
 * tenant-scoped routes match), and takes a slug from host (the Host header
 * or :authority, port allowed; NULL/0: none) when a suffix is configured and
 * the route is tenant-scoped. */
lg_match_result lg_router_route(const lg_router *rt, const char *method, size_t method_len, const char *path,
                                size_t path_len, const char *host, size_t host_len, lg_route_match *m);

#endif
