/*
 * app.c — see app.h: the serve context's life (model, engine, store, views)
 * and the changes that reach several views at once. The views themselves
 * are their own modules (tenants.c, tenant_auth.c, tenant_adapters.c); this
 * file only builds them, in order, and hands them out.
 */
#include "gateway/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/quant.h"
#include "gateway/unix_time.h"

struct lg_app {
    const lg_serve_config *cfg;
    /* the model and the engine */
    lg_weights *weights;
    lg_placement place; /* the engines' backends (engine/runtime/placement.h) */
    lg_dp *engine;      /* the engines behind the router */
    lg_served_model model;
    /* the store */
    lg_store_writer *store;
    lg_key_cache *keys;
    lg_ledger *ledger;
    /* the views the loops read */
    lg_tenants *tenants;
    lg_tenant_auth auth; /* keys + tenants */
    lg_tenant_adapters *adapters;
    bool ready;
    bool shut_down;
};

bool lg_app_ready(const lg_app *app) { return app && app->ready; }
const lg_served_model *lg_app_model(const lg_app *app) { return &app->model; }
lg_dp *lg_app_engine(const lg_app *app) { return app->engine; }
lg_ledger *lg_app_ledger(const lg_app *app) { return app->ledger; }
lg_store_writer *lg_app_store(const lg_app *app) { return app->store; }
lg_tenants *lg_app_tenants(const lg_app *app) { return app->tenants; }
lg_tenant_auth *lg_app_auth(lg_app *app) { return &app->auth; }
lg_tenant_adapters *lg_app_adapters(const lg_app *app) { return app->adapters; }

/* ---- changes every view must see ------------------------------------------- */

int lg_app_reload_tenants(lg_app *app, lg_store *st, lg_err *err)
{
    lg_tenant *rows = NULL;
    int n = 0;
    lg_pricing def;
    if (lg_store_tenant_list(st, false, &rows, &n, err) != 0)
        return -1;
    if (lg_store_default_pricing_get(st, &def, err) != 0) {
        free(rows);
        return -1;
    }
    int rc = lg_tenants_apply(app->tenants, rows, n, &def, err);
    if (rc == 0 && app->engine)
        for (int i = 0; i < n; i++) {
            char key[LG_TENANT_KEY_MAX]; /* the engine knows a tenant by its id, never reused */
            lg_dp_set_tenant_weight(app->engine, lg_tenant_key(rows[i].id, key), rows[i].weight > 0 ? rows[i].weight : 1,
                                    NULL);
        }
    free(rows);
    if (rc == 0 && app->keys)
        rc = lg_key_cache_refresh(app->keys, st, err);
    return rc;
}

int lg_app_reload_keys(lg_app *app, lg_store *st, lg_err *err) { return lg_key_cache_refresh(app->keys, st, err); }

void lg_app_forget_tenant(lg_app *app, int64_t id, const char *name)
{
    /* the engine knows a tenant by its id, never reused: a new tenant of
     * this name starts with an empty cache whatever happens here */
    char key[LG_TENANT_KEY_MAX];
    lg_err err = {{0}};
    if (app->engine && lg_dp_purge_tenant(app->engine, lg_tenant_key(id, key), &err) != 0)
        fprintf(stderr, "loragate serve: purging tenant %s's prefix cache: %s\n", name, err.msg);
    lg_tenant_adapters_uninstall_tenant(app->adapters, id);
}

/* ---- life ---------------------------------------------------------------- */

static int load_model(lg_app *app, const lg_serve_config *cfg, lg_err *err)
{
    lg_load_opts lo = {.progress = false, .dequant_dtype = LG_F16};
    if (cfg->dequant_dtype) /* given: expand at load */
        lo.dequantize = lg_dtype_parse(cfg->dequant_dtype, &lo.dequant_dtype) == 0;
    if (lg_quantization_parse(cfg->quantization, &lo.quantize) != 0)
        return lg_fail(err, "--quantization %s: expected fp8, int4 or none", cfg->quantization);
    if (lg_weights_load(cfg->model, &lo, &app->weights, err) != 0)
        return -1;
    const lg_model_config *mc = lg_weights_config(app->weights);
    lg_backend_opts bo = {.n_threads = (int)cfg->engine_threads, .act_dtype_hint = mc->weight_dtype};
    if (cfg->dtype && strcmp(cfg->dtype, "auto"))
        lg_dtype_parse(cfg->dtype, &bo.act_dtype_hint);
    /* N engines x M ranks: engine k's rank r on CUDA device k x M + r, or N x M CPU backends splitting the threads */
    int dp = cfg->data_parallel_size > 0 ? (int)cfg->data_parallel_size : 1;
    int tp = cfg->tensor_parallel_size > 0 ? (int)cfg->tensor_parallel_size : 1;
    if (lg_placement_create(cfg->backend, &bo, dp, tp, &app->place, err) != 0)
        return -1;
    if (dp * tp > 1) {
        char where[160];
        lg_placement_describe(&app->place, cfg->backend, where, sizeof where);
        fprintf(stderr, "loragate serve: %s\n", where);
    }
    int ctx = cfg->ctx ? (int)cfg->ctx : (mc->max_pos < 4096 ? mc->max_pos : 4096);
    if (ctx > mc->max_pos)
        ctx = mc->max_pos;
    lg_engine_opts eo = {
        .model = {.max_step_tokens = 0, .max_seqs = 64, .page_tokens = 16, .max_context = ctx,
                  .lora_max_rank = (int)cfg->max_lora_rank,
                  .kv_fp8 = cfg->kv_cache_dtype && !strcmp(cfg->kv_cache_dtype, "fp8")},
        .pool_bytes = (size_t)cfg->pool_mb << 20,
        .gpu_memory_utilization = cfg->gpu_memory_utilization ? strtod(cfg->gpu_memory_utilization, NULL) : 0,
        .policy = cfg->scheduler && !strcmp(cfg->scheduler, "fcfs") ? LG_SCHED_FCFS : LG_SCHED_VTC,
        .no_decode_bursts = cfg->decode_bursts && !strcmp(cfg->decode_bursts, "off"),
        .spec = {.num_tokens = (int)cfg->num_speculative_tokens, .ngram_min = (int)cfg->ngram_min,
                 .ngram_max = (int)cfg->ngram_max, .max_batch = (int)cfg->speculative_max_batch},
    };
    if (lg_spec_mode_parse(cfg->speculative ? cfg->speculative : "off", &eo.spec.mode) != 0)
        return lg_fail(err, "--speculative %s: expected off, ngram or draft", cfg->speculative);
    if ((eo.spec.mode == LG_SPEC_DRAFT) != (cfg->draft_model != NULL))
        return lg_fail(err, "--speculative draft and --draft-model go together");
    if (lg_prefix_sharing_parse(cfg->prefix_sharing ? cfg->prefix_sharing : "tenant", &eo.prefix_sharing) != 0)
        return lg_fail(err, "--prefix-sharing %s: expected tenant, global or off", cfg->prefix_sharing);
    lg_weights *dw = NULL; /* the draft model's weights: copied to the backend by lg_engine_create */
    if (cfg->draft_model && lg_weights_load(cfg->draft_model, &lo, &dw, err) != 0) {
        lg_err_prefix(err, "--draft-model %s", cfg->draft_model);
        return -1;
    }
    eo.spec.draft = dw;
    int rc = lg_dp_create_engines(&app->place, app->weights, &eo, &app->engine, err);
    lg_weights_free(dw);
    return rc;
}

static int open_store(lg_app *app, const lg_serve_config *cfg, lg_err *err)
{
    lg_store *st = NULL;
    if (lg_store_open(cfg->data_dir, &st, err) != 0)
        return -1;
    if (lg_store_writer_create(st, &app->store, err) != 0) {
        lg_store_close(st);
        return -1;
    }
    if (lg_key_cache_create(st, &app->keys, err) != 0)
        return -1;
    return lg_ledger_open(cfg->data_dir, NULL, &app->ledger, err);
}

/* Every live adapter of the store into the engine (startup). */
static int load_adapters(lg_app *app, lg_store *st, lg_err *err)
{
    lg_adapter_rec *v = NULL;
    int n = 0;
    if (lg_store_adapter_list(st, NULL, &v, &n, err) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (lg_tenant_adapters_install(app->adapters, v[i].tenant_id, v[i].name, &v[i].current, v[i].created_at,
                                       err) != 0) {
            lg_err_prefix(err, "adapter %s of tenant %s", v[i].name, v[i].tenant_name);
            rc = -1;
        }
    }
    free(v);
    return rc;
}

/* The views: tenants from the store (and the engine's weights), the keys
 * over them, then the adapters once the engine runs. */
static int build_views(lg_app *app, const lg_serve_config *cfg, lg_err *err)
{
    if (lg_tenants_create(&app->tenants, err) != 0)
        return -1;
    app->auth = (lg_tenant_auth){app->keys, app->tenants};
    if (lg_tenant_adapters_create(app->engine, lg_weights_config(app->weights), (int)cfg->max_lora_rank,
                                  cfg->data_dir, &app->adapters, err) != 0)
        return -1;
    /* adapters' own chat templates see the base model's BOS/EOS texts; --chat-template overrides them all */
    const lg_tokenizer *tok = app->model.tok;
    int bos = tok ? lg_tokenizer_bos(tok) : -1, eos = tok ? lg_tokenizer_eos(tok) : -1;
    if (lg_tenant_adapters_set_chat(app->adapters, bos >= 0 ? lg_tokenizer_token_text(tok, bos) : NULL,
                                    eos >= 0 ? lg_tokenizer_token_text(tok, eos) : NULL, cfg->chat_template != NULL,
                                    err) != 0)
        return -1;
    lg_store *st = lg_store_writer_acquire(app->store);
    int rc = lg_app_reload_tenants(app, st, err);
    if (rc == 0)
        rc = lg_dp_start(app->engine, err);
    if (rc == 0)
        rc = load_adapters(app, st, err);
    lg_store_writer_release(app->store);
    return rc;
}

int lg_app_create(const lg_serve_config *cfg, lg_app **out, lg_err *err)
{
    lg_app *app = calloc(1, sizeof *app);
    if (!app)
        return lg_fail(err, "out of memory");
    *out = app; /* lg_app_free on failure is the caller's (it frees what was made) */
    app->cfg = cfg;
    int64_t started_at = lg_unix_now();
    if (load_model(app, cfg, err) != 0)
        return -1;
    if (lg_served_model_init(&app->model, app->weights, cfg, lg_dp_max_context(app->engine), started_at, err) != 0)
        return -1;
    if (open_store(app, cfg, err) != 0 || build_views(app, cfg, err) != 0)
        return -1;
    app->ready = true;
    return 0;
}

int lg_app_shutdown(lg_app *app)
{
    if (!app || app->shut_down)
        return 0;
    app->shut_down = true;
    app->ready = false;
    if (app->engine)
        lg_dp_stop(app->engine);
    if (app->ledger) {
        lg_err err = {{0}};
        /* the drain bound also bounds how long unwritable records are retried */
        int ms = (int)(app->cfg->drain_timeout_s * 1000);
        if (lg_ledger_stop(app->ledger, ms > 1000 ? ms : 1000, &err) != 0) {
            fprintf(stderr, "loragate serve: ledger: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

void lg_app_free(lg_app *app)
{
    if (!app)
        return;
    lg_app_shutdown(app);
    lg_dp_free(app->engine); /* the engines, then their backends */
    lg_served_model_dispose(&app->model);
    lg_placement_free(&app->place);
    lg_weights_free(app->weights);
    lg_ledger_close(app->ledger);
    lg_key_cache_free(app->keys);
    lg_store_writer_free(app->store);
    lg_tenant_adapters_free(app->adapters);
    lg_tenants_free(app->tenants);
    free(app);
}
