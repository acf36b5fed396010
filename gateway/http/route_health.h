/*
 * route_health.h — GET /healthz, /readyz, /health and /version, which every server built
 * on the HTTP core answers (serve.h registers them).
 */
#ifndef LG_GW_ROUTE_HEALTH_H
#define LG_GW_ROUTE_HEALTH_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/http/router.h"

/* Readiness: fills `checks` with one member per dependency,
 * {"model": {"ok": true, "detail": "..."}, ...}, and returns true when all
 * are ready. Runs on a loop thread for every GET /readyz: it must be cheap
 * and must not block (read flags that the owners of those dependencies set). */
typedef bool (*lg_readiness_fn)(void *user, json_t *checks);

/* route_health.c: GET /healthz (200 while the process serves), GET /health
 * (vLLM's: 200 with no body when ready), GET /version, GET /readyz
 * (200 when ready(user, checks) says so, else 503 with Retry-After). */
int lg_routes_health(lg_router *rt, lg_readiness_fn ready, void *user, lg_err *err);

#endif
