/*
 * cmd_serve.c — `loragate serve`: the HTTPS gateway. Options and the
 * config file: gateway/serve_config.h (loragate serve --help). The process
 * life (operator key, TLS, signals, drain): gateway/serve.h. This file is
 * the wiring: it checks the model path and, in setup, loads the engine and
 * opens the store (gateway/app.h) and registers the route families
 * (routes_openai.c, routes_admin.c, routes_adapters.c, routes_usage.c,
 * metrics.c).
 *
 * Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 1 runtime
 * failure (one line on stderr), 2 bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gateway/app.h"
#include "gateway/metrics.h"
#include "gateway/routes.h"
#include "gateway/serve.h"

typedef struct app_ctx {
    const lg_serve_config *cfg;
    lg_app *app;
} app_ctx;

/* Route families landing separately; weak until all are in. */
__attribute__((weak)) int lg_routes_admin(lg_router *rt, lg_app *app, lg_err *err);
__attribute__((weak)) int lg_routes_adapters(lg_router *rt, lg_app *app, lg_err *err);
__attribute__((weak)) int lg_routes_usage(lg_router *rt, lg_app *app, lg_err *err);

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
    if (lg_routes_admin && lg_routes_admin(rt, app, err) != 0)
        return -1;
    if (lg_routes_adapters && lg_routes_adapters(rt, app, err) != 0)
        return -1;
    if (lg_routes_usage && lg_routes_usage(rt, app, err) != 0)
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
    lg_app_shutdown(c->app);
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
    app_ctx ctx = {&cfg, NULL};
    lg_serve_app app = {.setup = setup, .ready = ready, .on_drain = on_drain, .teardown = teardown, .user = &ctx};
    int rc = lg_serve_run(&cfg, &app, &err);
    if (rc != 0)
        fprintf(stderr, "loragate serve: %s\n", err.msg);
    lg_serve_config_dispose(&cfg);
    return rc == 0 ? 0 : 1;
}
