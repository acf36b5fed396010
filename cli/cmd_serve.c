/*
 * cmd_serve.c — `loragate serve`: the HTTPS gateway. Options and the
 * config file: gateway/http/serve_config.h (loragate serve --help). The process
 * life (operator key, TLS, signals, drain): gateway/http/serve.h. This file is
 * the wiring: it checks the model path and, in setup, makes the serve
 * context (gateway/app.h: the engine, the store, the views), the metering
 * over it (metrics.h, rate_limits.h, upload_quota.h), and registers each
 * route family with the handles it uses (gateway/routes.h).
 *
 * Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 1 runtime
 * failure (one line on stderr) or a shutdown that had to give up usage
 * records (the ledger could not write them; logged in full), 2 bad usage.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "gateway/app.h"
#include "gateway/metrics.h"
#include "gateway/rate_limits.h"
#include "gateway/routes.h"
#include "gateway/served_model.h"
#include "gateway/tenants.h"
#include "gateway/upload_quota.h"
#include "gateway/http/serve.h"

typedef struct app_ctx {
    const lg_serve_config *cfg;
    lg_app *app;
    lg_metrics *metrics;
    lg_limits *limits;
    lg_upload_quota *uploads;
    bool ledger_lost; /* the drain had to give up usage records: exit 1 */
} app_ctx;

/* What observes and limits the app: metrics, tenant limits, upload quotas. */
static int make_metering(app_ctx *c, lg_serve_env *env, lg_err *err)
{
    const lg_serve_config *cfg = c->cfg;
    lg_metrics_sources src = {.tenants = lg_app_tenants(c->app), .engine = lg_app_engine(c->app),
                              .ledger = lg_app_ledger(c->app), .access_log = env->access_log,
                              .started_at = lg_app_model(c->app)->created_at};
    if (lg_metrics_create(&src, !cfg->metrics_tenant_labels || strcmp(cfg->metrics_tenant_labels, "off"),
                          &c->metrics, err) != 0)
        return -1;
    if (lg_limits_create(cfg->data_dir, &c->limits, err) != 0)
        return -1;
    return lg_upload_quota_create(cfg->data_dir, (int)cfg->max_uploads_per_tenant,
                                  (uint64_t)cfg->upload_tmp_mb_per_tenant << 20, (uint64_t)cfg->min_free_disk_mb << 20,
                                  (uint64_t)cfg->max_upload_mb << 20, &c->uploads, err);
}

static int add_routes(app_ctx *c, lg_router *rt, lg_serve_env *env, lg_err *err)
{
    const lg_serve_config *cfg = c->cfg;
    lg_app *app = c->app;
    lg_adapter_admin adapters = {.store = lg_app_store(app), .adapters = lg_app_adapters(app),
                                 .data_dir = cfg->data_dir, .model_id = lg_app_model(app)->id,
                                 .max_upload = (size_t)cfg->max_upload_mb << 20};
    lg_openai_deps openai = {.model = lg_app_model(app), .engine = lg_app_engine(app), .auth = lg_app_auth(app),
                             .tenants = lg_app_tenants(app), .adapters = lg_app_adapters(app), .limits = c->limits,
                             .metrics = c->metrics, .ledger = lg_app_ledger(app), .max_queue = cfg->max_queue,
                             .store = lg_app_store(app), .data_dir = cfg->data_dir,
                             .responses_retention_h = cfg->responses_retention_h};
    lg_admin_deps admin = {.admin_key = env->admin_key, .app = app, .tenants = lg_app_tenants(app),
                           .adapters = adapters, .uploads = c->uploads};
    lg_tokenize_deps tok = {.model = lg_app_model(app), .auth = lg_app_auth(app), .adapters = lg_app_adapters(app)};
    lg_adapters_deps tenant_adapters = {.auth = lg_app_auth(app), .adapters = adapters, .uploads = c->uploads};
    lg_usage_deps usage = {.admin_key = env->admin_key, .auth = lg_app_auth(app), .data_dir = cfg->data_dir};
    lg_usage_page_deps page = {.admin_key = env->admin_key, .auth = lg_app_auth(app), .tenants = lg_app_tenants(app),
                               .limits = c->limits, .env = env, .data_dir = cfg->data_dir};
    bool metrics_auth = cfg->metrics_auth && !strcmp(cfg->metrics_auth, "on");
    if (lg_routes_openai(rt, &openai, err) != 0 || lg_routes_tokenize(rt, &tok, err) != 0 ||
        lg_routes_metrics(rt, c->metrics, metrics_auth, env->admin_key, err) != 0 ||
        lg_routes_admin(rt, &admin, err) != 0 || lg_routes_adapters(rt, &tenant_adapters, err) != 0 ||
        lg_routes_usage(rt, &usage, err) != 0 || lg_routes_usage_page(rt, &page, err) != 0)
        return -1;
    return 0;
}

static int setup(void *user, lg_router *rt, lg_serve_env *env, lg_err *err)
{
    app_ctx *c = user;
    fprintf(stderr, "loragate serve: loading %s on %s ...\n", c->cfg->model, c->cfg->backend);
    if (lg_app_create(c->cfg, &c->app, err) != 0)
        return -1;
    const lg_served_model *model = lg_app_model(c->app);
    fprintf(stderr, "loragate serve: model %s ready (context %d tokens)\n", model->id, model->max_context);
    if (make_metering(c, env, err) != 0)
        return -1;
    lg_tenancy tenancy = {c->cfg->tenant_host_suffix, lg_tenants_resolve, lg_app_tenants(c->app)};
    if (lg_router_set_tenancy(rt, &tenancy, err) != 0)
        return -1;
    return add_routes(c, rt, env, err);
}

static bool ready(void *user, json_t *checks)
{
    app_ctx *c = user;
    bool model = lg_app_ready(c->app);
    json_object_set_new(checks, "model", json_pack("{s:b}", "ok", model));
    bool ledger = true;
    if (c->app && lg_app_ledger(c->app)) {
        char why[200] = "";
        ledger = lg_ledger_healthy(lg_app_ledger(c->app), why, sizeof why);
        json_object_set_new(checks, "ledger", ledger ? json_pack("{s:b}", "ok", 1)
                                                     : json_pack("{s:b,s:s}", "ok", 0, "detail", why));
    }
    return model && ledger;
}

static void on_drain(void *user)
{
    app_ctx *c = user;
    if (lg_app_shutdown(c->app) != 0)
        c->ledger_lost = true;
}

static void teardown(void *user)
{
    app_ctx *c = user;
    lg_app_shutdown(c->app); /* the engine first: its last finishes feed the limits and metrics */
    lg_limits_free(c->limits);
    lg_metrics_free(c->metrics);
    lg_upload_quota_free(c->uploads);
    lg_app_free(c->app);
    c->app = NULL;
}

int lg_cmd_serve(int argc, char **argv)
{
    lg_serve_config cfg;
    lg_err err = {{0}};
    int p = lg_serve_config_parse(&cfg, argc, argv, &err);
    if (p != 0) {
        if (p < 0)
            fprintf(stderr, "loragate serve: %s\n", err.msg);
        lg_serve_config_dispose(&cfg);
        return p < 0 ? 2 : 0;
    }
    struct stat st;
    if (stat(cfg.model, &st) != 0) {
        fprintf(stderr, "loragate serve: --model %s: %s\n", cfg.model, strerror(errno));
        lg_serve_config_dispose(&cfg);
        return 1;
    }
    app_ctx ctx = {.cfg = &cfg};
    /* what to do next, copy-paste: an operator makes a tenant and a key, then calls it */
    char banner[2048];
    const char *l = cfg.listen[0];
    bool tls = !cfg.insecure_http;
    char cacert[600] = "";
    if (tls)
        snprintf(cacert, sizeof cacert, "--cacert %s ", cfg.tls_cert ? cfg.tls_cert : "DATA_DIR/tls/cert.pem");
    if (tls && !cfg.tls_cert)
        snprintf(cacert, sizeof cacert, "--cacert %s/tls/cert.pem ", cfg.data_dir);
    char url[300];
    snprintf(url, sizeof url, "%s://%s%s", tls ? "https" : "http",
             !strncmp(l, "0.0.0.0:", 8) ? "127.0.0.1" : "", !strncmp(l, "0.0.0.0:", 8) ? l + 7 : l);
    char keyexpr[300];
    if (getenv(LG_ADMIN_KEY_ENV))
        snprintf(keyexpr, sizeof keyexpr, "$%s", LG_ADMIN_KEY_ENV);
    else
        snprintf(keyexpr, sizeof keyexpr, "$(cat %s/admin.key)", cfg.data_dir);
    snprintf(banner, sizeof banner,
             "next, as the operator (copy-paste):\n"
             "  curl %s-H \"Authorization: Bearer %s\" %s/admin/v1/tenants -d '{\"name\":\"acme\"}'\n"
             "  curl %s-H \"Authorization: Bearer %s\" %s/admin/v1/tenants/acme/keys "
             "-d '{\"name\":\"dev\",\"scopes\":[\"inference\",\"adapters\"]}'\n"
             "then, with the \"key\" it printed, any OpenAI client at %s/t/acme/v1, e.g.:\n"
             "  curl %s%s/t/acme/v1/chat/completions -H \"Authorization: Bearer lg-...\" "
             "-H 'content-type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"Hello\"}]}'\n"
             "%s",
             cacert, keyexpr, url, cacert, keyexpr, url, url, cacert, url,
             cfg.served_model_name ? cfg.served_model_name : "MODEL",
             cfg.served_model_name ? "(docs/api.md has every route)"
                                   : "(MODEL: the base model's id, see GET /v1/models; docs/api.md has every route)");
    lg_serve_app app = {.setup = setup, .ready = ready, .on_drain = on_drain, .teardown = teardown, .user = &ctx,
                        .banner = banner};
    int rc = lg_serve_run(&cfg, &app, &err);
    if (rc != 0)
        fprintf(stderr, "loragate serve: %s\n", err.msg);
    else if (ctx.ledger_lost)
        fprintf(stderr, "loragate serve: stopped, but usage records could not be written (see above): exit 1\n");
    lg_serve_config_dispose(&cfg);
    return rc == 0 && !ctx.ledger_lost ? 0 : 1;
}
