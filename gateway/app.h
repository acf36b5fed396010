/*
 * app.h — the serve context: what `loragate serve` owns, built once in
 * cmd_serve.c's setup and freed at exit. Its fields are private to app.c;
 * the rest of the product gets narrow handles from the accessors below,
 * handed to each module when it is registered (routes.h), so that each
 * file's dependencies are the handles it is given:
 *
 *   lg_app_model     served_model.h    id, tokenizer, chat template, context
 *   lg_app_engine    dp_router.h       the engines (--data-parallel-size N of them,
 *                                      one by default) behind one router: submit,
 *                                      cancel, stats
 *   lg_app_ledger    db/ledger.h       the usage ledger's writer
 *   lg_app_store     store_writer.h    the store's writer handle (worker pool)
 *   lg_app_tenants   tenants.h         the tenant view
 *   lg_app_auth      tenant_auth.h     tenant keys (the key cache + the view)
 *   lg_app_adapters  tenant_adapters.h the tenants' adapters in the engine
 *
 * The metering (metrics.h, rate_limits.h, upload_quota.h) is not here: it
 * observes the app, and cmd_serve.c makes it from these handles.
 *
 * A few changes must reach several handles at once; they are the app's own
 * functions, used by the operator API only (routes_admin.c): reloading the
 * tenant view (it also sets the engine's fair-share weights and refreshes
 * the key cache), reloading the key cache, and forgetting a deleted tenant
 * in the engine (its cached prefixes and its adapters).
 *
 * Threads: the accessors are plain reads of fields set at creation (any
 * thread). The reloads run on the worker pool with the store writer held.
 */
#ifndef LG_GW_APP_H
#define LG_GW_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "db/ledger.h"
#include "db/store.h"
#include "engine/runtime/dp_router.h"
#include "gateway/http/serve.h"
#include "gateway/served_model.h"
#include "gateway/store_writer.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenant_auth.h"
#include "gateway/tenants.h"

typedef struct lg_app lg_app;

/* Loads the model and starts the engines (--data-parallel-size, each of
 * --tensor-parallel-size ranks: engine/runtime/placement.h), opens the
 * store, the key cache and the ledger, builds the views and registers every live adapter with the
 * engine. Slow (model load): called from setup before the server starts.
 * On failure *out may hold what was made: lg_app_free it. */
int lg_app_create(const lg_serve_config *cfg, lg_app **out, lg_err *err);
/* Stops the engine (in-flight requests get on_finish CANCELLED), flushes and
 * stops the ledger. Called on drain, after the loops stopped. Returns -1 when
 * the ledger had to give up records (logged in full on stderr), so the
 * process can exit non-zero; 0 otherwise (also on a second call). */
int lg_app_shutdown(lg_app *app);
void lg_app_free(lg_app *app); /* NULL: no-op; shuts down first */

/* True from a successful create until shutdown (/readyz). */
bool lg_app_ready(const lg_app *app);

/* ---- the handles ---- */
const lg_served_model *lg_app_model(const lg_app *app);
lg_dp *lg_app_engine(const lg_app *app);
lg_ledger *lg_app_ledger(const lg_app *app);
lg_store_writer *lg_app_store(const lg_app *app);
lg_tenants *lg_app_tenants(const lg_app *app);
lg_tenant_auth *lg_app_auth(lg_app *app);
lg_tenant_adapters *lg_app_adapters(const lg_app *app);

/* ---- changes every view must see (worker thread, store writer held) ---- */
/* Rebuilds the tenant view from the store (after any tenant change or a
 * pricing change) and the engine's fairness weights; also refreshes the key
 * cache (a deleted tenant's keys stop at once). */
int lg_app_reload_tenants(lg_app *app, lg_store *st, lg_err *err);
/* After a key was created or revoked. */
int lg_app_reload_keys(lg_app *app, lg_store *st, lg_err *err);
/* After the store deleted tenant `id` (`name` for messages): its cached
 * prompt prefixes leave the engine and its adapters are uninstalled. */
void lg_app_forget_tenant(lg_app *app, int64_t id, const char *name);

#endif
