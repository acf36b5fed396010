/*
 * app.c — see app.h: the serve context, the tenant and adapter views the
 * event loops read, the tenant-key auth hooks, and adapter installation.
 */
#include "gateway/app.h"
#include "gateway/upload_quota.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "adapters/peft.h"
#include "engine/base/strmap.h"
#include "gateway/metrics.h"
#include "gateway/rate_limits.h"

int64_t lg_app_unix_now(void) { return (int64_t)time(NULL); }

int64_t lg_app_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- store ---------------------------------------------------------------- */

lg_store *lg_app_store_acquire(lg_app *app)
{
    pthread_mutex_lock(&app->store_lock);
    return app->store;
}

void lg_app_store_release(lg_app *app) { pthread_mutex_unlock(&app->store_lock); }

/* ---- tenants -------------------------------------------------------------- */

static lg_app_tenant *tenant_by_id_locked(lg_app *app, int64_t id)
{
    for (int i = 0; i < app->n_tenants; i++)
        if (app->tenants[i]->id == id)
            return app->tenants[i];
    return NULL;
}

lg_app_tenant *lg_app_tenant_by_id(lg_app *app, int64_t id)
{
    pthread_rwlock_rdlock(&app->tenants_lock);
    lg_app_tenant *t = tenant_by_id_locked(app, id);
    pthread_rwlock_unlock(&app->tenants_lock);
    return t;
}

int lg_app_resolve_tenant(void *user, const char *slug, void **tenant)
{
    lg_app *app = user;
    pthread_rwlock_rdlock(&app->tenants_lock);
    lg_app_tenant *t = lg_strmap_get(app->tenants_by_name, slug);
    pthread_rwlock_unlock(&app->tenants_lock);
    *tenant = t;
    return t ? 1 : 0;
}

bool lg_app_tenant_get(lg_app *app, const lg_app_tenant *t, lg_tenant *row, lg_pricing *pricing)
{
    pthread_rwlock_rdlock(&app->tenants_lock);
    bool live = !t->deleted;
    if (row)
        *row = t->row;
    if (pricing)
        *pricing = t->pricing;
    pthread_rwlock_unlock(&app->tenants_lock);
    return live;
}

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
    lg_strmap *by_name = lg_strmap_new();
    if (!by_name) {
        free(rows);
        return lg_fail(err, "out of memory");
    }
    pthread_rwlock_wrlock(&app->tenants_lock);
    for (int i = 0; i < app->n_tenants; i++)
        app->tenants[i]->deleted = true;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        lg_app_tenant *t = tenant_by_id_locked(app, rows[i].id);
        if (!t) {
            if (app->n_tenants == app->cap_tenants) {
                int cap = app->cap_tenants ? 2 * app->cap_tenants : 16;
                lg_app_tenant **a = realloc(app->tenants, (size_t)cap * sizeof *a);
                if (!a) {
                    rc = lg_fail(err, "out of memory");
                    break;
                }
                app->tenants = a;
                app->cap_tenants = cap;
            }
            t = calloc(1, sizeof *t);
            if (!t) {
                rc = lg_fail(err, "out of memory");
                break;
            }
            t->id = rows[i].id;
            snprintf(t->name, sizeof t->name, "%s", rows[i].name);
            app->tenants[app->n_tenants++] = t;
        }
        t->row = rows[i];
        t->pricing = rows[i].has_pricing ? rows[i].pricing : def;
        t->deleted = false;
        if (lg_strmap_put(by_name, t->name, t) != 0)
            rc = lg_fail(err, "out of memory");
    }
    if (rc == 0) {
        lg_strmap *old = app->tenants_by_name;
        app->tenants_by_name = by_name;
        by_name = old;
    }
    pthread_rwlock_unlock(&app->tenants_lock);
    lg_strmap_free(by_name);
    if (rc == 0 && app->engine)
        for (int i = 0; i < n; i++) {
            char key[LG_TENANT_KEY_MAX]; /* the engine knows a tenant by its id, never reused */
            lg_engine_set_tenant_weight(app->engine, lg_tenant_key(rows[i].id, key), rows[i].weight > 0 ? rows[i].weight : 1,
                                        NULL);
        }
    free(rows);
    if (rc == 0 && app->keys)
        rc = lg_key_cache_refresh(app->keys, st, err);
    return rc;
}

int lg_app_reload_keys(lg_app *app, lg_store *st, lg_err *err) { return lg_key_cache_refresh(app->keys, st, err); }

/* ---- auth ------------------------------------------------------------------- */

const lg_app_principal *lg_app_principal_of(const lg_request *r) { return lg_request_principal(r); }

static int auth_key(const lg_auth_in *in, lg_app *app, unsigned scope, lg_auth_result *out)
{
    if (!in->bearer) {
        out->status = 401;
        return -1;
    }
    lg_key_entry k;
    if (!lg_key_cache_find(app->keys, in->bearer, in->bearer_len, &k)) {
        out->status = 401;
        out->message = "Incorrect API key provided. You can find your API key in your loragate operator's tenant settings.";
        return -1;
    }
    /* by name (a hash lookup), not by id: this runs on every request */
    void *tv = NULL;
    lg_app_resolve_tenant(app, k.tenant_name, &tv);
    lg_app_tenant *t = tv;
    if (!t || t->id != k.tenant_id) {
        out->status = 401;
        out->message = "Incorrect API key provided: its tenant no longer exists.";
        return -1;
    }
    if (in->tenant_via != LG_TENANT_NONE && in->tenant != t) {
        /* a key of another tenant at this tenant's base URL, or a tenant
         * name that does not exist: the same answer (no name probing) */
        out->status = 401;
        out->message = "Incorrect API key provided for this tenant's endpoint.";
        return -1;
    }
    if (scope && !(k.scopes & scope)) {
        out->status = 403;
        out->message = scope == LG_SCOPE_ADAPTERS
                           ? "You have insufficient permissions for this operation. Missing scope: adapters."
                           : "You have insufficient permissions for this operation. Missing scope: inference.";
        return -1;
    }
    _Static_assert(sizeof(lg_app_principal) <= LG_PRINCIPAL_MAX, "principal too large");
    lg_app_principal *p = (lg_app_principal *)out->principal;
    memset(p, 0, sizeof *p);
    p->tenant = t;
    p->scopes = k.scopes;
    snprintf(p->key_id, sizeof p->key_id, "%s", k.id);
    out->principal_len = sizeof *p;
    out->log[0].key = "tenant";
    snprintf(out->log[0].value, sizeof out->log[0].value, "%s", t->name);
    out->log[1].key = "key_id";
    snprintf(out->log[1].value, sizeof out->log[1].value, "%s", p->key_id);
    return 0;
}

int lg_app_auth_inference(const lg_auth_in *in, void *app, lg_auth_result *out)
{
    return auth_key(in, app, LG_SCOPE_INFERENCE, out);
}
int lg_app_auth_adapters(const lg_auth_in *in, void *app, lg_auth_result *out)
{
    return auth_key(in, app, LG_SCOPE_ADAPTERS, out);
}
int lg_app_auth_any(const lg_auth_in *in, void *app, lg_auth_result *out) { return auth_key(in, app, 0, out); }

/* ---- adapters --------------------------------------------------------------- */

static void adapter_key(char *buf, size_t n, int64_t tenant_id, const char *name)
{
    snprintf(buf, n, "%" PRId64 "/%s", tenant_id, name);
}

bool lg_app_adapter_find(lg_app *app, int64_t tenant_id, const char *name, lg_app_adapter *out)
{
    char key[LG_STORE_NAME_MAX + 32];
    adapter_key(key, sizeof key, tenant_id, name);
    pthread_rwlock_rdlock(&app->adapters_lock);
    lg_app_adapter *a = lg_strmap_get(app->adapters, key);
    if (a && out)
        *out = *a;
    pthread_rwlock_unlock(&app->adapters_lock);
    return a != NULL;
}

typedef struct list_ctx {
    int64_t tenant_id;
    lg_app_adapter *v;
    int n, cap;
    bool oom;
} list_ctx;

static void list_one(void *ctx, const char *key, void *val)
{
    list_ctx *c = ctx;
    lg_app_adapter *a = val;
    if (a->tenant_id != c->tenant_id || c->oom)
        return;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        lg_app_adapter *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *a;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lg_app_adapter *)a)->name, ((const lg_app_adapter *)b)->name);
}

int lg_app_adapter_list(lg_app *app, int64_t tenant_id, lg_app_adapter **out, int *n)
{
    list_ctx c = {.tenant_id = tenant_id};
    pthread_rwlock_rdlock(&app->adapters_lock);
    lg_strmap_each(app->adapters, list_one, &c);
    pthread_rwlock_unlock(&app->adapters_lock);
    if (c.oom) {
        free(c.v);
        return -1;
    }
    if (c.n > 1)
        qsort(c.v, (size_t)c.n, sizeof *c.v, by_name);
    *out = c.v;
    *n = c.n;
    return 0;
}

int lg_app_adapter_inspect(lg_app *app, const char *dir, lg_adapter_version *out, lg_err *err)
{
    memset(out, 0, sizeof *out);
    lg_adapter *a = NULL;
    if (lg_adapter_load(dir, "upload", lg_weights_config(app->weights), (int)app->cfg->max_lora_rank, &a, err) != 0)
        return -1;
    snprintf(out->digest, sizeof out->digest, "%s", lg_adapter_digest(a));
    out->max_rank = lg_adapter_max_rank(a);
    bool seen[LG_LORA_N_TARGETS] = {0};
    for (int i = 0; i < lg_adapter_n_modules(a); i++)
        seen[lg_adapter_module(a, i)->target] = true;
    size_t off = 0;
    for (int t = 0; t < LG_LORA_N_TARGETS; t++)
        if (seen[t])
            off += (size_t)snprintf(out->target_modules + off, sizeof out->target_modules - off, "%s%s",
                                    off ? "," : "", lg_lora_target_name((lg_lora_target)t));
    lg_adapter_free(a);
    struct stat s1, s2;
    char p[4096];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    if (stat(p, &s1) != 0)
        return lg_fail(err, "%s: %s", p, strerror(errno));
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    if (stat(p, &s2) != 0)
        return lg_fail(err, "%s: %s", p, strerror(errno));
    out->size_bytes = (int64_t)s1.st_size + (int64_t)s2.st_size;
    return 0;
}

int lg_app_adapter_install(lg_app *app, int64_t tenant_id, const char *name, const lg_adapter_version *v,
                           int64_t created_at, lg_err *err)
{
    char key[LG_STORE_NAME_MAX + 32], dir[4096];
    adapter_key(key, sizeof key, tenant_id, name);
    snprintf(dir, sizeof dir, "%s/%s", app->cfg->data_dir, v->path);
    lg_app_adapter *a = calloc(1, sizeof *a);
    if (!a)
        return lg_fail(err, "out of memory");
    a->tenant_id = tenant_id;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->version = *v;
    a->created_at = created_at;
    /* registry first under the write lock so no request can pick the new
     * engine id before the registry says it is current (and vice versa) */
    pthread_rwlock_wrlock(&app->adapters_lock);
    int rc = lg_engine_add_adapter(app->engine, key, dir, &a->engine_id, err);
    if (rc == 0) {
        lg_app_adapter *old = lg_strmap_get(app->adapters, key);
        if (lg_strmap_put(app->adapters, key, a) != 0) {
            lg_engine_remove_adapter(app->engine, key, NULL);
            rc = lg_fail(err, "out of memory");
        } else {
            free(old);
            a = NULL;
        }
    }
    pthread_rwlock_unlock(&app->adapters_lock);
    free(a);
    return rc;
}

void lg_app_adapter_uninstall(lg_app *app, int64_t tenant_id, const char *name)
{
    char key[LG_STORE_NAME_MAX + 32];
    adapter_key(key, sizeof key, tenant_id, name);
    pthread_rwlock_wrlock(&app->adapters_lock);
    lg_app_adapter *a = lg_strmap_del(app->adapters, key);
    if (a)
        lg_engine_remove_adapter(app->engine, key, NULL);
    pthread_rwlock_unlock(&app->adapters_lock);
    free(a);
}

void lg_app_adapter_uninstall_tenant(lg_app *app, int64_t tenant_id)
{
    lg_app_adapter *v = NULL;
    int n = 0;
    if (lg_app_adapter_list(app, tenant_id, &v, &n) != 0)
        return;
    for (int i = 0; i < n; i++)
        lg_app_adapter_uninstall(app, tenant_id, v[i].name);
    free(v);
}

/* ---- life ---------------------------------------------------------------- */

static void model_id_from_path(char *out, size_t n, const char *path)
{
    const char *b = path + strlen(path);
    while (b > path && b[-1] == '/')
        b--;
    const char *end = b;
    while (b > path && b[-1] != '/')
        b--;
    size_t len = (size_t)(end - b);
    if (len > 5 && !strncmp(end - 5, ".gguf", 5))
        len -= 5;
    snprintf(out, n, "%.*s", (int)len, b);
}

static int load_adapters(lg_app *app, lg_err *err)
{
    lg_adapter_rec *v = NULL;
    int n = 0;
    if (lg_store_adapter_list(app->store, NULL, &v, &n, err) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (lg_app_adapter_install(app, v[i].tenant_id, v[i].name, &v[i].current, v[i].created_at, err) != 0) {
            lg_err_prefix(err, "adapter %s of tenant %s", v[i].name, v[i].tenant_name);
            rc = -1;
        }
    }
    free(v);
    return rc;
}

int lg_app_create(const lg_serve_config *cfg, lg_serve_env *env, lg_app **out, lg_err *err)
{
    lg_app *app = calloc(1, sizeof *app);
    if (!app)
        return lg_fail(err, "out of memory");
    app->cfg = cfg;
    app->env = env;
    app->created_at = lg_app_unix_now();
    pthread_mutex_init(&app->store_lock, NULL);
    pthread_rwlock_init(&app->tenants_lock, NULL);
    pthread_rwlock_init(&app->adapters_lock, NULL);
    app->tenants_by_name = lg_strmap_new();
    app->adapters = lg_strmap_new();
    if (!app->tenants_by_name || !app->adapters) {
        lg_app_free(app);
        return lg_fail(err, "out of memory");
    }
    *out = app; /* lg_app_free on failure is the caller's (it frees what was made) */

    lg_load_opts lo = {.progress = false};
    if (lg_dtype_parse(cfg->dequant_dtype, &lo.dequant_dtype) != 0)
        lo.dequant_dtype = LG_F16;
    if (lg_weights_load(cfg->model, &lo, &app->weights, err) != 0)
        return -1;
    const lg_model_config *mc = lg_weights_config(app->weights);
    lg_backend_opts bo = {.n_threads = (int)cfg->engine_threads, .act_dtype_hint = mc->weight_dtype};
    if (cfg->dtype && strcmp(cfg->dtype, "auto"))
        lg_dtype_parse(cfg->dtype, &bo.act_dtype_hint);
    if (lg_backend_create(cfg->backend, &bo, &app->backend, err) != 0)
        return -1;
    int ctx = cfg->ctx ? (int)cfg->ctx : (mc->max_pos < 4096 ? mc->max_pos : 4096);
    if (ctx > mc->max_pos)
        ctx = mc->max_pos;
    lg_engine_opts eo = {
        .model = {.max_step_tokens = 0, .max_seqs = 64, .page_tokens = 16, .max_context = ctx,
                  .lora_max_rank = (int)cfg->max_lora_rank},
        .pool_bytes = (size_t)cfg->pool_mb << 20,
        .gpu_memory_utilization = cfg->gpu_memory_utilization ? strtod(cfg->gpu_memory_utilization, NULL) : 0,
        .policy = cfg->scheduler && !strcmp(cfg->scheduler, "fcfs") ? LG_SCHED_FCFS : LG_SCHED_VTC,
        .no_decode_bursts = cfg->decode_bursts && !strcmp(cfg->decode_bursts, "off"),
    };
    if (lg_prefix_sharing_parse(cfg->prefix_sharing ? cfg->prefix_sharing : "tenant", &eo.prefix_sharing) != 0)
        return lg_fail(err, "--prefix-sharing %s: expected tenant, global or off", cfg->prefix_sharing);
    if (lg_engine_create(app->backend, app->weights, &eo, &app->engine, err) != 0)
        return -1;
    app->max_context = lg_engine_max_context(app->engine);
    app->tok = lg_weights_tokenizer(app->weights);
    if (app->tok) {
        for (int i = 0; i < lg_tokenizer_n_vocab(app->tok); i++) {
            const char *tt = lg_tokenizer_token_text(app->tok, i);
            int len = tt ? (int)strlen(tt) : 0;
            if (len > app->max_token_bytes)
                app->max_token_bytes = len;
        }
        int bos = lg_tokenizer_bos(app->tok), eos = lg_tokenizer_eos(app->tok);
        lg_err cerr = {{0}};
        if (lg_chat_template_new(lg_weights_chat_template(app->weights), cfg->chat_template,
                                 bos >= 0 ? lg_tokenizer_token_text(app->tok, bos) : NULL,
                                 eos >= 0 ? lg_tokenizer_token_text(app->tok, eos) : NULL, &app->chat, &cerr) != 0)
            app->chat = NULL;
    }
    if (cfg->served_model_name)
        snprintf(app->model_id, sizeof app->model_id, "%s", cfg->served_model_name);
    else
        model_id_from_path(app->model_id, sizeof app->model_id, cfg->model);

    if (lg_store_open(cfg->data_dir, &app->store, err) != 0)
        return -1;
    if (lg_key_cache_create(app->store, &app->keys, err) != 0)
        return -1;
    if (lg_ledger_open(cfg->data_dir, NULL, &app->ledger, err) != 0)
        return -1;
    if (lg_app_reload_tenants(app, app->store, err) != 0)
        return -1;
    if (lg_engine_start(app->engine, err) != 0)
        return -1;
    if (load_adapters(app, err) != 0)
        return -1;
    if (lg_metrics_create(app, !cfg->metrics_tenant_labels || strcmp(cfg->metrics_tenant_labels, "off"),
                          &app->metrics, err) != 0)
        return -1;
    if (lg_limits_create(app, &app->limits, err) != 0)
        return -1;
    if (lg_upload_quota_create(cfg->data_dir, (int)cfg->max_uploads_per_tenant,
                               (uint64_t)cfg->upload_tmp_mb_per_tenant << 20, (uint64_t)cfg->min_free_disk_mb << 20,
                               (uint64_t)cfg->max_upload_mb << 20, &app->uploads, err) != 0)
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
        lg_engine_stop(app->engine);
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

static void free_val(void *ctx, const char *key, void *val) { free(val); }

void lg_app_free(lg_app *app)
{
    if (!app)
        return;
    lg_app_shutdown(app);
    lg_limits_free(app->limits);
    lg_metrics_free(app->metrics);
    lg_upload_quota_free(app->uploads);
    lg_engine_free(app->engine);
    lg_chat_template_free(app->chat);
    lg_backend_free(app->backend);
    lg_weights_free(app->weights);
    lg_ledger_close(app->ledger);
    lg_key_cache_free(app->keys);
    lg_store_close(app->store);
    if (app->adapters)
        lg_strmap_each(app->adapters, free_val, NULL);
    lg_strmap_free(app->adapters);
    lg_strmap_free(app->tenants_by_name);
    for (int i = 0; i < app->n_tenants; i++)
        free(app->tenants[i]);
    free(app->tenants);
    pthread_mutex_destroy(&app->store_lock);
    pthread_rwlock_destroy(&app->tenants_lock);
    pthread_rwlock_destroy(&app->adapters_lock);
    free(app);
}
