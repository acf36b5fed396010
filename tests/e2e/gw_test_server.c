/*
 * gw_test_server.c — `loragate serve`'s process life (gateway/http/serve.h: the
 * same option parser, operator key, TLS, access log, signals and drain)
 * with test routes instead of the engine, for tests/e2e/test_gateway_core.py.
 * Takes the serve options (--model is required: give any existing path).
 *
 * Keys (bearer tokens): "tk-acme" (tenant acme, scope inference),
 * "tk-acme-ro" (tenant acme, no scope), "tk-globex" (tenant globex).
 * Tenants known to the resolver: acme, globex; "down" answers "cannot
 * tell" (503).
 *
 *   POST /v1/echo            tenant-scoped, key auth, JSON <= 4 KiB:
 *                            {"tenant","request_id","body"}; "model":"missing" -> 404 model_not_found
 *   GET  /v1/stream?n=&delay_ms=   tenant-scoped, key auth: SSE {"i":k}..., [DONE],
 *                            produced by a thread through lg_stream
 *   GET  /v1/fail/{status}   the standard error answers (403, 429, 500, 503)
 *   GET  /test/stats         cancels, producers that stopped early / finished, slow requests running
 *   GET  /test/slow?ms=      answers after ms (sleep on a worker), for drain tests
 *   GET  /admin/v1/ping      operator key (lg_auth_admin)
 *   POST /v1/sink            tenant-scoped, key auth, any body <= 64 MiB: {"bytes": n};
 *                            admit_body allows one body in flight per tenant (429
 *                            otherwise), so the connection guard's reservations can be
 *                            watched in /test/stats ("holds": reservations held now,
 *                            "dispatched": requests that reached a route function)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/http/request.h"
#include "gateway/http/serve.h"
#include "gateway/http/sse.h"
#include "gateway/http/stream.h"

static atomic_int n_cancels, n_stopped_early, n_producers_done, n_active, n_slow, n_holds, n_dispatched;
static atomic_int holds_acme, holds_globex;

/* ---- tenants and keys ---------------------------------------------------- */

static char T_ACME[] = "acme", T_GLOBEX[] = "globex";

static int resolve(void *user, const char *slug, void **tenant)
{
    if (!strcmp(slug, "acme"))
        *tenant = T_ACME;
    else if (!strcmp(slug, "globex"))
        *tenant = T_GLOBEX;
    else if (!strcmp(slug, "down"))
        return -1;
    else
        return 0;
    return 1;
}

typedef struct key {
    const char *token, *id;
    char *tenant;
    bool inference;
} key;
static const key keys[] = {
    {"tk-acme", "key_acme1", T_ACME, true},
    {"tk-acme-ro", "key_acme2", T_ACME, false},
    {"tk-globex", "key_globex1", T_GLOBEX, true},
};

static int key_auth(const lg_auth_in *in, void *user, lg_auth_result *out)
{
    (void)user;
    if (!in->bearer)
        return out->status = 401, -1;
    const key *k = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strlen(keys[i].token) == in->bearer_len && !memcmp(keys[i].token, in->bearer, in->bearer_len))
            k = &keys[i];
    if (!k)
        return out->status = 401, out->message = "Incorrect API key provided.", -1;
    /* a key of another tenant at this tenant's URL is not a key here */
    if (in->tenant_via != LG_TENANT_NONE && in->tenant != k->tenant)
        return out->status = 401, out->message = "Incorrect API key provided.", -1;
    if (!k->inference)
        return out->status = 403, out->message = "This key lacks the 'inference' scope.", -1;
    out->principal_ptr = (void *)k;
    out->log[0].key = "key_id";
    snprintf(out->log[0].value, sizeof out->log[0].value, "%s", k->id);
    return 0;
}

/* ---- routes ---------------------------------------------------------------- */

static int echo(lg_request *r, void *user)
{
    atomic_fetch_add(&n_dispatched, 1);
    json_t *body = lg_request_json(r);
    if (!body)
        return 0;
    const char *model = json_string_value(json_object_get(body, "model"));
    if (model && !strcmp(model, "missing")) {
        lg_respond_model_not_found(r, model);
        json_decref(body); /* model points into body */
        return 0;
    }
    if (model)
        lg_request_log_set(r, "model", json_string(model));
    const key *k = lg_request_principal(r);
    return lg_respond_json(r, 200, json_pack("{s:s, s:s, s:s, s:o}", "tenant", k->tenant, "via",
                                             lg_request_tenant_via(r) == LG_TENANT_PATH   ? "path"
                                             : lg_request_tenant_via(r) == LG_TENANT_HOST ? "host"
                                                                                          : "key",
                                             "request_id", lg_request_id(r), "body", body));
}

enum { EV_ITEM = 1, EV_END = 2 };

typedef struct stream_ctx {
    lg_sse *sse;
} stream_ctx;

typedef struct producer {
    lg_stream *s;
    int n, delay_ms;
} producer;

static void *produce(void *p)
{
    producer *pr = p;
    int i;
    for (i = 0; i < pr->n; i++) {
        int item = i;
        if (lg_stream_post(pr->s, EV_ITEM, &item, sizeof item) != 0)
            break;
        if (pr->delay_ms)
            usleep(pr->delay_ms * 1000);
    }
    if (i == pr->n)
        lg_stream_post(pr->s, EV_END, NULL, 0);
    else
        atomic_fetch_add(&n_stopped_early, 1);
    lg_stream_close(pr->s);
    free(pr);
    atomic_fetch_add(&n_producers_done, 1);
    atomic_fetch_sub(&n_active, 1);
    return NULL;
}

static void on_event(lg_request *r, void *c, int kind, const void *data, size_t len)
{
    stream_ctx *ctx = c;
    if (kind == EV_ITEM) {
        int item;
        memcpy(&item, data, sizeof item);
        lg_sse_send_json(ctx->sse, json_pack("{s:i}", "i", item));
    } else {
        lg_sse_done(ctx->sse);
    }
}

static void on_cancel(lg_request *r, void *c) { atomic_fetch_add(&n_cancels, 1); }

static const lg_stream_handler stream_handler = {on_event, on_cancel};

static int stream(lg_request *r, void *user)
{
    atomic_fetch_add(&n_dispatched, 1);
    char v[32];
    int n = lg_request_query(r, "n", v, sizeof v) > 0 ? atoi(v) : 10;
    int delay = lg_request_query(r, "delay_ms", v, sizeof v) > 0 ? atoi(v) : 0;
    if (n < 0 || n > 1000000 || delay < 0 || delay > 10000)
        return lg_respond_error(r, 400, NULL, "n", "n must be in 0..1000000 and delay_ms in 0..10000.");
    stream_ctx *ctx = lg_request_alloc(r, sizeof *ctx);
    producer *pr = malloc(sizeof *pr);
    if (!ctx || !pr || !(ctx->sse = lg_sse_start(r))) {
        free(pr);
        return -1;
    }
    pr->n = n;
    pr->delay_ms = delay;
    if (!(pr->s = lg_stream_open(r, &stream_handler, ctx))) {
        free(pr);
        lg_sse_end(ctx->sse);
        return 0;
    }
    pthread_t t;
    atomic_fetch_add(&n_active, 1);
    if (pthread_create(&t, NULL, produce, pr) != 0) {
        atomic_fetch_sub(&n_active, 1);
        lg_stream_close(pr->s);
        free(pr);
        lg_sse_end(ctx->sse);
        return 0;
    }
    pthread_detach(t);
    return 0;
}

static int fail(lg_request *r, void *user)
{
    int st = atoi(lg_request_param(r, "status"));
    switch (st) {
    case 403: return lg_respond_forbidden(r, NULL);
    case 429:
        lg_request_add_header(r, "x-ratelimit-limit-requests", "10");
        return lg_respond_error_ex(r, 429, "requests", "rate_limit_exceeded", NULL, 3, "Rate limit reached for requests.");
    case 500: return lg_respond_error(r, 500, NULL, NULL, "Something broke (test).");
    case 503: return lg_respond_unavailable(r, 2, NULL);
    }
    return lg_respond_error(r, 400, NULL, "status", "Unsupported test status %d.", st);
}

static int stats(lg_request *r, void *user)
{
    return lg_respond_json(r, 200, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "slow", atomic_load(&n_slow), "cancels",
                                             atomic_load(&n_cancels), "stopped_early", atomic_load(&n_stopped_early),
                                             "producers_done", atomic_load(&n_producers_done), "active",
                                             atomic_load(&n_active), "holds", atomic_load(&n_holds), "dispatched",
                                             atomic_load(&n_dispatched)));
}

/* one body in flight per tenant: the hold is the tenant's counter */
static int sink_admit(const lg_auth_result *who, int64_t declared, void *user, void **hold, lg_auth_result *out)
{
    (void)declared, (void)user;
    const key *k = who->principal_ptr;
    atomic_int *c = k->tenant == T_ACME ? &holds_acme : &holds_globex;
    if (atomic_fetch_add(c, 1) != 0) {
        atomic_fetch_sub(c, 1);
        out->status = 429;
        out->message = "One upload at a time.";
        return -1;
    }
    atomic_fetch_add(&n_holds, 1);
    *hold = c;
    return 0;
}

static void sink_release(void *hold)
{
    atomic_fetch_sub((atomic_int *)hold, 1);
    atomic_fetch_sub(&n_holds, 1);
}

static int sink(lg_request *r, void *user)
{
    size_t n;
    lg_request_body(r, &n);
    return lg_respond_json(r, 200, json_pack("{s:I}", "bytes", (json_int_t)n));
}

static void slow_work(void *arg)
{
    atomic_fetch_add(&n_slow, 1);
    usleep(*(int *)arg * 1000);
    atomic_fetch_sub(&n_slow, 1);
}

static void slow_done(lg_request *r, void *arg)
{
    int ms = *(int *)arg;
    free(arg);
    if (lg_request_h2o(r))
        lg_respond_json(r, 200, json_pack("{s:i}", "slept_ms", ms));
}

static int slow(lg_request *r, void *user)
{
    char v[32];
    int *ms = malloc(sizeof *ms);
    if (!ms)
        return -1;
    *ms = lg_request_query(r, "ms", v, sizeof v) > 0 ? atoi(v) : 1000;
    if (*ms < 0 || *ms > 60000)
        *ms = 1000;
    if (lg_request_defer(r, slow_work, slow_done, ms) != 0) {
        free(ms);
        return lg_respond_unavailable(r, 1, "shutting down");
    }
    return 0;
}

static int ping(lg_request *r, void *user) { return lg_respond_json(r, 200, json_pack("{s:s}", "pong", "operator")); }

static int setup(void *user, lg_router *rt, lg_serve_env *env, lg_err *err)
{
    lg_tenancy ten = {env->cfg->tenant_host_suffix, resolve, NULL};
    lg_route routes[] = {
        {.method = "POST", .pattern = "/v1/echo", .fn = echo, .max_body = 4096, .content_type = "application/json",
         .body_required = true, .auth = key_auth, .tenant_scoped = true, .name = "echo"},
        {.method = "GET", .pattern = "/v1/stream", .fn = stream, .auth = key_auth, .tenant_scoped = true, .name = "stream"},
        {.method = "POST", .pattern = "/v1/sink", .fn = sink, .max_body = 64u << 20, .auth = key_auth,
         .tenant_scoped = true, .admit_body = sink_admit, .release_body = sink_release, .name = "sink"},
        {.method = "GET", .pattern = "/v1/fail/{status}", .fn = fail, .tenant_scoped = true, .name = "fail"},
        {.method = "GET", .pattern = "/test/stats", .fn = stats, .name = "stats"},
        {.method = "GET", .pattern = "/test/slow", .fn = slow, .name = "slow"},
        {.method = "GET", .pattern = "/admin/v1/ping", .fn = ping, .auth = lg_auth_admin,
         .auth_user = (void *)env->admin_key, .name = "admin_ping"},
    };
    if (lg_router_set_tenancy(rt, &ten, err) != 0)
        return -1;
    return lg_router_add_all(rt, routes, sizeof routes / sizeof routes[0], err);
}

static bool ready(void *user, json_t *checks)
{
    json_object_set_new(checks, "test", json_pack("{s:b}", "ok", 1));
    return true;
}

int main(int argc, char **argv)
{
    lg_serve_config cfg;
    lg_err err = {{0}};
    int p = lg_serve_config_parse(&cfg, argc, argv, &err);
    if (p != 0) {
        if (p < 0)
            fprintf(stderr, "gw_test_server: %s\n", err.msg);
        return p < 0 ? 2 : 0;
    }
    lg_serve_app app = {.setup = setup, .ready = ready, .banner = "test routes"};
    int rc = lg_serve_run(&cfg, &app, &err);
    if (rc != 0)
        fprintf(stderr, "gw_test_server: %s\n", err.msg);
    lg_serve_config_dispose(&cfg);
    return rc == 0 ? 0 : 1;
}
