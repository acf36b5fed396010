/*
 * route_health.c — liveness and readiness, for load balancers and
 * Kubernetes probes. No auth (they reveal nothing but readiness), tiny JSON
 * bodies, never cached.
 *
 *   GET /healthz -> 200 {"status":"ok"}            the process answers
 *   GET /readyz  -> 200 {"status":"ready","checks":{...}}
 *                   503 {"status":"not_ready","checks":{...}}, Retry-After: 5
 *   GET /health  -> 200, empty body, when ready; else as /readyz's 503
 *                   (vLLM's health route, which load generators such as
 *                   guidellm probe before they start)
 *   GET /version -> 200 {"version":"<loragate's>"} (vLLM's shape)
 * Every GET route answers HEAD too (headers only).
 */
#include <stdlib.h>

#include "engine/base/version.h"
#include "gateway/http/request.h"
#include "gateway/http/route_health.h"

typedef struct health {
    lg_readiness_fn ready;
    void *user;
} health;

static int healthz(lg_request *r, void *user)
{
    lg_request_add_header(r, "cache-control", "no-store");
    return lg_respond_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static int readyz(lg_request *r, void *user)
{
    health *h = user;
    json_t *checks = json_object();
    bool ok = h->ready ? h->ready(h->user, checks) : true;
    lg_request_add_header(r, "cache-control", "no-store");
    if (!ok)
        lg_request_add_header(r, "retry-after", "5");
    return lg_respond_json(r, ok ? 200 : 503, json_pack("{s:s, s:o}", "status", ok ? "ready" : "not_ready", "checks", checks));
}

static int health_vllm(lg_request *r, void *user)
{
    health *h = user;
    json_t *checks = json_object();
    bool ok = h->ready ? h->ready(h->user, checks) : true;
    lg_request_add_header(r, "cache-control", "no-store");
    if (ok) {
        json_decref(checks);
        return lg_respond(r, 200, NULL, NULL, 0);
    }
    lg_request_add_header(r, "retry-after", "5");
    return lg_respond_json(r, 503, json_pack("{s:s, s:o}", "status", "not_ready", "checks", checks));
}

static int version(lg_request *r, void *user)
{
    return lg_respond_json(r, 200, json_pack("{s:s}", "version", LG_VERSION));
}

int lg_routes_health(lg_router *rt, lg_readiness_fn ready, void *user, lg_err *err)
{
    health *h = malloc(sizeof *h); /* the router frees it (free_user) */
    if (!h)
        return lg_fail(err, "out of memory");
    h->ready = ready;
    h->user = user;
    lg_route routes[] = {
        {.method = "GET", .pattern = "/healthz", .fn = healthz, .user = h, .name = "healthz", .free_user = free},
        {.method = "GET", .pattern = "/readyz", .fn = readyz, .user = h, .name = "readyz"},
        {.method = "GET", .pattern = "/health", .fn = health_vllm, .user = h, .name = "health"},
        {.method = "GET", .pattern = "/version", .fn = version, .name = "version"},
    };
    if (lg_router_add(rt, &routes[0], err) != 0) {
        free(h);
        return -1;
    }
    return lg_router_add_all(rt, routes + 1, 3, err);
}
