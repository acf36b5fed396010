/*
 * serve.c — see serve.h. Step 2 in detail (data_dir.h): DATA_DIR is
 * created 0700, or, when the operator made it and others may enter it,
 * left as it is with a one-line warning; then the leftovers of a previous
 * process in DATA_DIR/tmp (upload-*, put-*, h2o.b.*) are removed, with one
 * line giving their count. The start-up lines say where the operator key
 * is (its file or $LORAGATE_ADMIN_KEY), never any part of it.
 */
#include "gateway/http/serve.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gateway/http/data_dir.h"

typedef struct serve_state {
    const lg_serve_app *app;
    lg_serve_env env;
} serve_state;

static bool ready(void *user, json_t *checks)
{
    serve_state *st = user;
    bool draining = st->env.server && lg_server_is_draining(st->env.server);
    json_object_set_new(checks, "server",
                        json_pack("{s:b, s:s}", "ok", !draining, "detail", draining ? "shutting down" : "accepting"));
    bool ok = !draining;
    if (st->app->ready)
        ok = st->app->ready(st->app->user, checks) && ok;
    return ok;
}

static void on_drain(void *user)
{
    serve_state *st = user;
    if (st->app->on_drain)
        st->app->on_drain(st->app->user);
}

int lg_serve_run(const lg_serve_config *cfg, const lg_serve_app *app, lg_err *err)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = -1;
    serve_state st = {app, {cfg, NULL, NULL, NULL}};
    lg_admin_key key;
    lg_router *rt = NULL;
    lg_server *srv = NULL;

    bool created;
    if (lg_data_dir_prepare(cfg->data_dir, stderr, &created, err) != 0)
        goto out;
    /* before anything can write tmp/: what is there was left by a previous process */
    int removed = 0, failed = 0;
    lg_err terr = {{0}};
    if (lg_data_dir_clean_tmp(cfg->data_dir, &removed, &failed, &terr) != 0)
        fprintf(stderr, "loragate: warning: cannot clean %s/tmp: %s\n", cfg->data_dir, terr.msg);
    else if (removed || failed)
        fprintf(stderr, "loragate: removed %d leftover temporary file(s) of a previous run from %s/tmp%s%s\n", removed,
                cfg->data_dir, failed ? "; could not remove: " : "", failed ? terr.msg : "");
    if (lg_admin_key_load(cfg->data_dir, &key, err) != 0)
        goto out;
    st.env.admin_key = &key;
    if (strcmp(cfg->access_log, "off") != 0 && lg_access_log_open(cfg->access_log, &st.env.access_log, err) != 0)
        goto out;
    if (!(rt = lg_router_create())) {
        lg_fail(err, "out of memory");
        goto out;
    }
    lg_tenancy ten = {cfg->tenant_host_suffix, NULL, NULL};
    if (lg_routes_health(rt, ready, &st, err) != 0 || lg_router_set_tenancy(rt, &ten, err) != 0)
        goto out;
    if (app->setup && app->setup(app->user, rt, &st.env, err) != 0)
        goto out;

    lg_server_config sc = {0};
    memcpy(sc.listen, cfg->listen, sizeof cfg->listen);
    sc.n_listen = cfg->n_listen;
    sc.tls_cert = cfg->tls_cert;
    sc.tls_key = cfg->tls_key;
    sc.data_dir = cfg->data_dir;
    sc.n_threads = (int)cfg->threads;
    sc.insecure_http = cfg->insecure_http;
    sc.max_body = (size_t)cfg->max_upload_mb << 20;
    sc.drain_timeout_s = cfg->drain_timeout_s;
    sc.on_drain = on_drain;
    sc.drain_user = &st;
    sc.access_log = st.env.access_log;
    if (lg_server_create(&sc, rt, &srv, err) != 0)
        goto out;
    st.env.server = srv;
    if (lg_server_start(srv, err) != 0)
        goto out;

    for (int i = 0; i < lg_server_listener_count(srv); i++)
        printf("loragate: serving on %s (%s)\n", lg_server_listener_url(srv, i),
               lg_server_is_tls(srv) ? "TLS 1.2/1.3, HTTP/2 and HTTP/1.1" : "plain HTTP/1.1, loopback only");
    /* where the key is, never any part of it */
    if (key.source == LG_ADMIN_KEY_FROM_ENV)
        printf("loragate: operator key from $%s\n", LG_ADMIN_KEY_ENV);
    else
        printf("loragate: operator key %s %s\n", key.source == LG_ADMIN_KEY_GENERATED ? "generated in" : "in",
               key.path);
    if (cfg->tenant_host_suffix)
        printf("loragate: tenants also by Host: <tenant>%s\n", cfg->tenant_host_suffix);
    if (lg_server_is_tls(srv))
        printf("loragate: try: curl --cacert %s %s/readyz\n", lg_server_cert_path(srv), lg_server_listener_url(srv, 0));
    else
        printf("loragate: try: curl %s/readyz\n", lg_server_listener_url(srv, 0));
    if (app->banner)
        printf("loragate: %s\n", app->banner);
    fflush(stdout);

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0)
        ;
    fprintf(stderr, "loragate: %s received: draining (up to %g s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg->drain_timeout_s);
    lg_server_shutdown(srv); /* runs on_drain */
    fprintf(stderr, "loragate: stopped\n");
    rc = 0;
out:
    lg_server_free(srv);
    lg_router_free(rt);
    lg_access_log_close(st.env.access_log);
    if (app->teardown)
        app->teardown(app->user);
    return rc;
}
