/*
 * cmd_serve.c — `loragate serve`: the HTTPS gateway. Options and the
 * config file: gateway/http/serve_config.h (loragate serve --help). The process
 * life (operator key, TLS, signals, drain): gateway/http/serve.h. This file is
 * the wiring: it checks the model path and, in setup, loads the engine and
 * opens the store (gateway/app.h) and registers the route families
 * (routes_openai.c, routes_admin.c, routes_adapters.c, routes_usage.c,
 * metrics.c).
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
#include "gateway/routes.h"
#include "gateway/http/serve.h"

typedef struct app_ctx {
    const lg_serve_config *cfg;
    lg_app *app;
    bool ledger_lost; /* the drain had to give up usage records: exit 1 */
} app_ctx;

static int setup(void *user, lg_router *rt, lg_serve_env *env, lg_err *err)
{
    app_ctx *c = user;
    fprintf(stderr, "loragate serve: loading %s on %s ...\n", c->cfg->model, c->cfg->backend);
    if (lg_app_create(c->cfg, env, &c->app, err) != 0)
        return -1;
    lg_app *app = c->app;
    fprintf(stderr, "loragate serve: model %s ready (context %d tokens)\n", app->model_id, app->max_context);
    if (lg_router_set_tenancy(rt, &(lg_tenancy){c->cfg->tenant_host_suffix, lg_app_resolve_tenant, app}, err) != 0)
        return -1;
    if (lg_routes_openai(rt, app, err) != 0 || lg_routes_metrics(rt, app, err) != 0)
        return -1;
    if (lg_routes_admin(rt, app, err) != 0)
        return -1;
    if (lg_routes_adapters(rt, app, err) != 0)
        return -1;
    if (lg_routes_usage(rt, app, err) != 0)
        return -1;
    return 0;
}

static bool ready(void *user, json_t *checks)
{
    app_ctx *c = user;
    bool model = c->app && c->app->ready;
    json_object_set_new(checks, "model", json_pack("{s:b}", "ok", model));
    bool ledger = true;
    if (c->app && c->app->ledger) {
        char why[200] = "";
        ledger = lg_ledger_healthy(c->app->ledger, why, sizeof why);
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
    app_ctx ctx = {&cfg, NULL, false};
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
