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
 * policy the dispatcher applies before the function runs (body size limit ->
 * 413, required content type -> 415, auth hook -> 401/403).
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
 * Workload: a few dozen routes, matched once per request by a linear scan
 * over pre-split segments (well under a microsecond); built once at startup,
 * read-only afterwards, so loop threads share it without locks.
 */
#ifndef LG_GW_ROUTER_H
#define LG_GW_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/common.h"

typedef struct lg_request lg_request; /* request.h */
typedef struct lg_router lg_router;

/* A route's function. Runs on the loop thread that owns r. It must answer r
 * now or later (lg_respond*, lg_sse_*), possibly from a message delivered to
 * r; return 0. Returning -1 without having answered makes the dispatcher
 * answer 500. */
typedef int (*lg_route_fn)(lg_request *r, void *user);

/* Auth hook slot (implemented by the auth work): runs after the body checks
 * and before the route's function. Returns 0 to let the request through
 * (after lg_request_set_principal if it wants), -1 after answering it
 * (401/403/429). */
typedef int (*lg_auth_fn)(lg_request *r, void *user);

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
    const char *name;         /* short name for logs and metrics; NULL: the pattern */
    void (*free_user)(void *user); /* optional: lg_router_free calls it on user (set it on one route of a family) */
} lg_route;

lg_router *lg_router_create(void);
void lg_router_free(lg_router *rt); /* NULL: no-op */

/* Copies the route (and its strings). Refuses malformed patterns, unknown
 * methods, and a second route with the same method and an equivalent
 * pattern. Not thread-safe: build the router before the server starts. */
int lg_router_add(lg_router *rt, const lg_route *route, lg_err *err);

/* Largest max_body over all routes (what h2o must be allowed to buffer). */
size_t lg_router_max_body(const lg_router *rt);
int lg_router_count(const lg_router *rt);

typedef enum lg_match_result {
    LG_MATCH_FOUND = 0,
    LG_MATCH_NOT_FOUND = 1,          /* no pattern matches the path: 404 */
    LG_MATCH_METHOD_NOT_ALLOWED = 2, /* some pattern matches the path, not with this method: 405 */
} lg_match_result;

typedef struct lg_route_match {
    const lg_route *route; /* FOUND */
    int n_params;
    struct {
        const char *name;  /* the pattern's parameter name (owned by the router) */
        const char *value; /* raw slice of the path (NOT decoded, not NUL-terminated) */
        size_t len;
    } params[LG_ROUTE_MAX_PARAMS];
    char allow[96];        /* METHOD_NOT_ALLOWED: "GET, POST" for the Allow header */
} lg_route_match;

/* path: the raw request path; matching stops at '?' if any. */
lg_match_result lg_router_match(const lg_router *rt, const char *method, size_t method_len, const char *path,
                                size_t path_len, lg_route_match *m);

#endif
