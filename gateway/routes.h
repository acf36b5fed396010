/*
 * routes.h — the route families of the gateway, one file each, each with
 * one registration function. Later: route_openai.c, route_admin.c.
 */
#ifndef LG_GW_ROUTES_H
#define LG_GW_ROUTES_H

#include <jansson.h>
#include <stdbool.h>

#include "router.h"

/* Readiness: fills `checks` with one member per dependency,
 * {"model": {"ok": true, "detail": "..."}, ...}, and returns true when all
 * are ready. Runs on a loop thread for every GET /readyz: it must be cheap
 * and must not block (read flags that the owners of those dependencies set). */
typedef bool (*lg_readiness_fn)(void *user, json_t *checks);

/* route_health.c: GET /healthz (200 while the process serves), GET /readyz
 * (200 when ready(user, checks) says so, else 503 with Retry-After). */
int lg_routes_health(lg_router *rt, lg_readiness_fn ready, void *user, lg_err *err);

typedef struct lg_app lg_app; /* app.h */
/* routes_openai.c: /v1/models, /v1/models/{id}, /v1/chat/completions, /v1/completions */
int lg_routes_openai(lg_router *rt, lg_app *app, lg_err *err);
/* routes_admin.c: the operator API, /admin/v1/... (operator key) */
int lg_routes_admin(lg_router *rt, lg_app *app, lg_err *err);
/* routes_adapters.c: /v1/adapters... (tenant keys with the `adapters` scope) */
int lg_routes_adapters(lg_router *rt, lg_app *app, lg_err *err);
/* routes_usage.c: GET /v1/usage, GET /admin/v1/usage (JSON/CSV shaped like
 * OpenAI's usage API); usage_page.c: GET /usage (the page), POST /usage/login,
 * POST /usage/logout */
int lg_routes_usage(lg_router *rt, lg_app *app, lg_err *err);

#endif
