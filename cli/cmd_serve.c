/*
 * cmd_serve.c — `loragate serve`: the HTTPS gateway. Options and the
 * config file: gateway/serve_config.h (loragate serve --help). The process
 * life (operator key, TLS, signals, drain): gateway/serve.h. This file is
 * the wiring: it checks the model path and, in setup, will load the engine,
 * open the store and register the route families (routes_openai.c,
 * routes_admin.c, ...). Today the server carries the health routes only.
 *
 * Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 1 runtime
 * failure (one line on stderr), 2 bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gateway/serve.h"

typedef struct app_ctx {
    const lg_serve_config *cfg;
} app_ctx;

static int setup(void *user, lg_router *rt, lg_serve_env *env, lg_err *err)
{
    /* engine, store and route families are wired here (next piece of work):
     *   lg_routes_openai(rt, ...), lg_routes_admin(rt, env->admin_key, ...),
     *   lg_router_set_tenancy(rt, &(lg_tenancy){cfg->tenant_host_suffix, resolve, store}) */
    return 0;
}

static bool ready(void *user, json_t *checks)
{
    json_object_set_new(checks, "model", json_pack("{s:b, s:s}", "ok", 0, "detail", "not loaded (engine not wired into serve yet)"));
    return false;
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
    app_ctx ctx = {&cfg};
    lg_serve_app app = {.setup = setup, .ready = ready, .user = &ctx,
                        .banner = "engine not wired into serve yet: health routes only"};
    int rc = lg_serve_run(&cfg, &app, &err);
    if (rc != 0)
        fprintf(stderr, "loragate serve: %s\n", err.msg);
    lg_serve_config_dispose(&cfg);
    return rc == 0 ? 0 : 1;
}
