/*
 * routes.h — the product's route families, one file each, each with one
 * registration function that takes exactly what the family uses (its
 * "deps", copied at registration and kept until the router is freed). The
 * wiring is cli/cmd_serve.c's setup; the health routes are the HTTP
 * core's (gateway/http/route_health.h) and GET /metrics is metrics.h's.
 *
 * Who may touch what: the OpenAI, adapter and usage families only read the
 * views and feed the metering; the operator API is the one family that
 * changes what every view shows (tenants, keys, prices), so it is given
 * the serve context itself (app.h) for those writes.
 */
#ifndef LG_GW_ROUTES_H
#define LG_GW_ROUTES_H

#include <stddef.h>

#include "gateway/adapter_upload.h" /* lg_adapter_admin, held by value */
#include "gateway/http/router.h"

/* The handles the families are given (each file includes the headers of
 * the ones it uses). */
typedef struct lg_admin_key lg_admin_key;             /* gateway/http/admin_key.h */
typedef struct lg_serve_env lg_serve_env;             /* gateway/http/serve.h */
typedef struct lg_dp lg_dp;                           /* engine/runtime/dp_router.h */
typedef struct lg_ledger lg_ledger;                   /* db/ledger.h */
typedef struct lg_app lg_app;                         /* app.h */
typedef struct lg_served_model lg_served_model;       /* served_model.h */
typedef struct lg_tenants lg_tenants;                 /* tenants.h */
typedef struct lg_tenant_auth lg_tenant_auth;         /* tenant_auth.h */
typedef struct lg_tenant_adapters lg_tenant_adapters; /* tenant_adapters.h */
typedef struct lg_limits lg_limits;                   /* rate_limits.h */
typedef struct lg_metrics lg_metrics;                 /* metrics.h */
typedef struct lg_upload_quota lg_upload_quota;       /* upload_quota.h */
typedef struct lg_store_writer lg_store_writer;       /* store_writer.h */

/* routes_openai.c: /v1/models, /v1/models/{id}, /v1/chat/completions,
 * /v1/completions; and routes_responses.c (registered with them):
 * /v1/responses, /v1/responses/{id} (tenant keys with the `inference` scope) */
typedef struct lg_openai_deps {
    const lg_served_model *model;  /* tokenizer, chat template, context, id */
    lg_dp *engine;                 /* the engines: submit, cancel, queue depth */
    lg_tenant_auth *auth;          /* the auth hook's keys and tenants */
    lg_tenants *tenants;           /* per request: the tenant's limits and prices */
    lg_tenant_adapters *adapters;  /* the `model` a request names */
    lg_limits *limits;             /* admit before submit, finish once */
    lg_metrics *metrics;           /* generations, 429s */
    lg_ledger *ledger;             /* one usage record per request that reached the engine */
    long max_queue;                /* 503 while the engines have this many queued */
    lg_store_writer *store;        /* /v1/responses: stored responses are written with it (worker pool) */
    const char *data_dir;          /* /v1/responses: a reader connection per lookup (worker pool) */
    long responses_retention_h;    /* how long a stored response is kept; 0: none is stored */
} lg_openai_deps;
int lg_routes_openai(lg_router *rt, const lg_openai_deps *d, lg_err *err);
/* routes_responses.c, called by lg_routes_openai with its copy of the handles (kept until the router is
 * freed) */
int lg_routes_responses(lg_router *rt, const lg_openai_deps *d, lg_err *err);

/* routes_tokenize.c: POST /tokenize, POST /detokenize (vLLM's shapes;
 * tenant keys with the `inference` scope) */
typedef struct lg_tokenize_deps {
    const lg_served_model *model;  /* the tokenizer, the context, the base model's id */
    lg_tenant_auth *auth;
    lg_tenant_adapters *adapters;  /* the `model` a request names */
} lg_tokenize_deps;
int lg_routes_tokenize(lg_router *rt, const lg_tokenize_deps *d, lg_err *err);

/* routes_adapters.c: /v1/adapters... (tenant keys with the `adapters` scope) */
typedef struct lg_adapters_deps {
    lg_tenant_auth *auth;
    lg_adapter_admin adapters;  /* adapter_upload.h */
    lg_upload_quota *uploads;   /* admits an upload's body from its head */
} lg_adapters_deps;
int lg_routes_adapters(lg_router *rt, const lg_adapters_deps *d, lg_err *err);

/* routes_admin.c: the operator API, /admin/v1/... (operator key) */
typedef struct lg_admin_deps {
    const lg_admin_key *admin_key;
    lg_app *app;                /* writes that every view must see: store, tenant and key reloads */
    lg_tenants *tenants;        /* reads: {t}, tenant objects and listings */
    lg_adapter_admin adapters;  /* /admin/v1/tenants/{t}/adapters... */
    lg_upload_quota *uploads;
} lg_admin_deps;
int lg_routes_admin(lg_router *rt, const lg_admin_deps *d, lg_err *err);

/* routes_usage.c: GET /v1/usage, GET /admin/v1/usage (JSON/CSV shaped like
 * OpenAI's usage API) */
typedef struct lg_usage_deps {
    const lg_admin_key *admin_key;
    lg_tenant_auth *auth;
    const char *data_dir;       /* a reader connection per query (worker pool) */
} lg_usage_deps;
int lg_routes_usage(lg_router *rt, const lg_usage_deps *d, lg_err *err);

/* usage_page.c: GET /usage (the page), POST /usage/login, POST /usage/logout */
typedef struct lg_usage_page_deps {
    const lg_admin_key *admin_key; /* the operator's sign-in */
    lg_tenant_auth *auth;          /* a tenant's sign-in, re-checked on every view */
    lg_tenants *tenants;           /* the tenant's budget */
    lg_limits *limits;             /* the month's tokens so far */
    const lg_serve_env *env;       /* TLS or not (the cookie's name), known once serving */
    const char *data_dir;          /* a reader connection per view (worker pool) */
} lg_usage_page_deps;
int lg_routes_usage_page(lg_router *rt, const lg_usage_page_deps *d, lg_err *err);

#endif
