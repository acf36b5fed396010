/*
 * app.h — what `loragate serve` serves: the engine, the store, the ledger
 * and the in-memory views the event loops read without touching the disk.
 * One lg_app per process, created in cmd_serve.c's setup and shared by the
 * route families (one file each):
 *
 *   routes_openai.c   /v1/models, /v1/chat/completions, /v1/completions
 *   routes_admin.c    /admin/v1/tenants..., keys, adapters on behalf of a tenant
 *   routes_adapters.c /v1/adapters (tenant keys with the `adapters` scope)
 *   routes_usage.c    /v1/usage, /admin/v1/usage, GET /usage (the page)
 *   metrics.c         /metrics; limits.c the per-tenant limits
 *
 * Threads. The views below (tenants, adapters, keys) are read on loop
 * threads: every reader function here is non-blocking (a read lock and a
 * copy). Everything that writes the database runs on the worker pool
 * (lg_request_defer) with the writer handle from lg_app_store_acquire.
 *
 * Tenants. lg_app_tenant objects are created once per tenant id and never
 * freed while the process runs (a deleted tenant keeps its object, marked
 * deleted), so a pointer taken from the resolver stays valid for a whole
 * request. Their mutable part (weight, pricing, limits) is read as a copy
 * with lg_app_tenant_get.
 *
 * Adapters. The registry maps (tenant id, adapter name) to the engine's
 * adapter version id and the store's version (digest, rank, targets). The
 * engine knows an adapter as "t<tenant id>/<name>", so a replace in the
 * engine (a new version id; in-flight requests finish on the old one) is a
 * replace of exactly that tenant's adapter. A request copies the entry at
 * submit time, so a concurrent replace or delete never changes what a
 * running request uses.
 */
#ifndef LG_GW_APP_H
#define LG_GW_APP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "db/ledger.h"
#include "db/money.h"
#include "db/store.h"
#include "engine/model/chat_template.h"
#include "engine/runtime/engine.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "gateway/http/request.h"
#include "gateway/http/serve.h"

typedef struct lg_metrics lg_metrics; /* metrics.h */
typedef struct lg_limits lg_limits;   /* rate_limits.h */
typedef struct lg_strmap lg_strmap;

typedef struct lg_app_tenant {
    int64_t id;                          /* immutable */
    char name[LG_STORE_NAME_MAX];        /* immutable (the slug) */
    /* mutable, under lg_app.tenants_lock: use lg_app_tenant_get */
    lg_tenant row;                       /* the store's row (weight, limits, own pricing) */
    lg_pricing pricing;                  /* effective: its own or the server default */
    bool deleted;
} lg_app_tenant;

typedef struct lg_app_adapter {
    int64_t tenant_id;
    char name[LG_STORE_NAME_MAX];
    int engine_id;                       /* the engine's version id (lg_request_params.adapter_id) */
    lg_adapter_version version;          /* digest, rank, targets, path, created_at */
    int64_t created_at;                  /* the adapter's (first version's) creation time, Unix ms (the store's unit) */
} lg_app_adapter;

/* Who called: set by the tenant-key auth hooks (lg_request_principal). */
typedef struct lg_app_principal {
    lg_app_tenant *tenant;
    char key_id[LG_KEY_ID_LEN + 1];
    unsigned scopes;
} lg_app_principal;

typedef struct lg_app {
    const lg_serve_config *cfg;
    lg_serve_env *env;
    /* model */
    lg_weights *weights;
    lg_backend *backend;
    lg_engine *engine;
    const lg_tokenizer *tok;             /* owned by weights */
    lg_chat_template *chat;              /* NULL: the model has none (chat completions refused) */
    char model_id[256];                  /* --served-model-name or the model's file/dir name */
    int64_t created_at;                  /* Unix seconds of process start ("created" of the base model) */
    int max_context;
    int max_token_bytes;                 /* longest vocabulary entry in bytes (an upper bound per token) */
    /* store */
    lg_store *store;                     /* the writer: lg_app_store_acquire */
    pthread_mutex_t store_lock;
    lg_key_cache *keys;
    lg_ledger *ledger;
    /* views */
    pthread_rwlock_t tenants_lock;
    lg_strmap *tenants_by_name;          /* name -> lg_app_tenant* (live ones) */
    lg_app_tenant **tenants;             /* every object ever made, by creation */
    int n_tenants, cap_tenants;
    pthread_rwlock_t adapters_lock;
    lg_strmap *adapters;                 /* "<tenant id>/<name>" -> lg_app_adapter* */
    /* metering and observation (metrics.h, rate_limits.h) */
    lg_metrics *metrics;
    lg_limits *limits;
    struct lg_upload_quota *uploads; /* upload_quota.h: uploads in flight per tenant, the disk floor */
    bool ready;
    bool shut_down;
} lg_app;

/* Loads the model and starts the engine, opens the store, the key cache and
 * the ledger, builds the views and registers every live adapter with the
 * engine. Slow (model load): called from setup before the server starts. */
int lg_app_create(const lg_serve_config *cfg, lg_serve_env *env, lg_app **out, lg_err *err);
/* Stops the engine (in-flight requests get on_finish CANCELLED), flushes and
 * stops the ledger. Called on drain, after the loops stopped. Returns -1 when
 * the ledger had to give up records (logged in full on stderr), so the
 * process can exit non-zero; 0 otherwise (also on a second call). */
int lg_app_shutdown(lg_app *app);
void lg_app_free(lg_app *app);

/* ---- store (worker threads only) ---- */
lg_store *lg_app_store_acquire(lg_app *app); /* the writer handle, exclusively */
void lg_app_store_release(lg_app *app);

/* ---- tenants ---- */
/* The router's resolver (router.h): a live tenant by slug; never blocks. */
int lg_app_resolve_tenant(void *app, const char *slug, void **tenant);
lg_app_tenant *lg_app_tenant_by_id(lg_app *app, int64_t id); /* NULL: unknown */
/* A copy of the mutable part; false when the tenant is deleted. */
bool lg_app_tenant_get(lg_app *app, const lg_app_tenant *t, lg_tenant *row, lg_pricing *pricing);
/* Rebuilds the tenant view from the store (after any tenant change or a
 * pricing change) and the engine's fairness weights; also refreshes the key
 * cache (a deleted tenant's keys stop at once). Worker thread, store held. */
int lg_app_reload_tenants(lg_app *app, lg_store *st, lg_err *err);
/* After a key was created or revoked. Worker thread, store held. */
int lg_app_reload_keys(lg_app *app, lg_store *st, lg_err *err);

/* ---- auth hooks (router.h lg_auth_fn; user = the app) ---- */
/* A live key of the addressed tenant (or of any tenant on /v1/...) with the
 * scope; sets an lg_app_principal. 401 / 403 otherwise. */
int lg_app_auth_inference(const lg_auth_in *in, void *app, lg_auth_result *out);
int lg_app_auth_adapters(const lg_auth_in *in, void *app, lg_auth_result *out);
int lg_app_auth_any(const lg_auth_in *in, void *app, lg_auth_result *out);
const lg_app_principal *lg_app_principal_of(const lg_request *r);

/* ---- adapters ---- */
/* Copy of the tenant's adapter `name`; false if none. Never blocks. */
bool lg_app_adapter_find(lg_app *app, int64_t tenant_id, const char *name, lg_app_adapter *out);
/* Copies of the tenant's adapters, sorted by name (free() the array). */
int lg_app_adapter_list(lg_app *app, int64_t tenant_id, lg_app_adapter **out, int *n);
/* Validates a PEFT adapter directory against the served base model exactly
 * as `--lora` does, and fills what the store keeps of it (digest, max_rank,
 * target_modules, size_bytes; path left empty). Any thread; reads files. */
int lg_app_adapter_inspect(lg_app *app, const char *dir, lg_adapter_version *out, lg_err *err);
/* Makes version v (files already at DATA_DIR/v->path) the tenant's adapter
 * `name` in the engine and the registry: new requests use it, in-flight
 * ones finish on the one they started with. Call after the store committed
 * it. Worker thread. */
int lg_app_adapter_install(lg_app *app, int64_t tenant_id, const char *name, const lg_adapter_version *v,
                           int64_t created_at, lg_err *err);
/* Removes it from the registry and the engine (in-flight requests finish).
 * Worker thread. No-op if absent. */
void lg_app_adapter_uninstall(lg_app *app, int64_t tenant_id, const char *name);
/* Every adapter of a tenant (tenant deleted). */
void lg_app_adapter_uninstall_tenant(lg_app *app, int64_t tenant_id);

/* ---- helpers for JSON answers ---- */
/* Wall-clock time: OpenAI objects carry Unix seconds, the store Unix ms. */
int64_t lg_app_unix_now(void);
int64_t lg_app_unix_ms(void);

#endif
