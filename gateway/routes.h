/*
 * routes.h — the product's route families, one file each, each with one
 * registration function (the health routes are the HTTP core's:
 * gateway/http/route_health.h).
 */
#ifndef LG_GW_ROUTES_H
#define LG_GW_ROUTES_H

#include <stdbool.h>

#include "gateway/http/router.h"

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
