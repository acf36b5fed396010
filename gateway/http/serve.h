/*
 * serve.h — the life of a `loragate serve` process, apart from what it
 * serves: data dir, operator key, access log, router with the health
 * routes and tenancy, the server, signals, the drain. The application
 * (cmd_serve.c: engine + store + route families; a test server: test
 * routes) plugs in through lg_serve_app.
 *
 * Order of events in lg_serve_run:
 *   1. SIGTERM and SIGINT are blocked (every thread created afterwards
 *      inherits the mask; this thread takes them with sigwait), SIGPIPE ignored
 *   2. DATA_DIR created (0700); the operator key loaded or generated (admin_key.h)
 *   3. the access log opened (unless "off")
 *   4. router: /healthz, /readyz (ready = not draining && app->ready),
 *      tenancy with --tenant-host-suffix and no resolver
 *   5. app->setup(user, rt, env): load the model, open the store, register
 *      the route families, lg_router_set_tenancy with the store's resolver
 *   6. the server binds and starts; its URLs, the operator key's location
 *      and an example are printed to stdout
 *   7. SIGTERM/SIGINT: drain (server.h), then app->on_drain (stop the
 *      engine, flush the store), then everything is freed, app->teardown
 * Returns 0 after a clean shutdown, -1 with err set on a failure before
 * serving. Call it from the main thread before any other thread exists.
 */
#ifndef LG_GW_SERVE_H
#define LG_GW_SERVE_H

#include "gateway/http/access_log.h"
#include "gateway/http/admin_key.h"
#include "gateway/http/router.h"
#include "gateway/http/route_health.h"
#include "gateway/http/serve_config.h"
#include "gateway/http/server.h"

typedef struct lg_serve_env {
    const lg_serve_config *cfg;
    const lg_admin_key *admin_key; /* for lg_auth_admin */
    lg_access_log *access_log;     /* NULL when off */
    lg_server *server;             /* NULL during setup */
} lg_serve_env;

typedef struct lg_serve_app {
    int (*setup)(void *user, lg_router *rt, lg_serve_env *env, lg_err *err); /* optional */
    lg_readiness_fn ready;          /* optional: adds checks to /readyz */
    void (*on_drain)(void *user);   /* optional: after the loops stopped */
    void (*teardown)(void *user);   /* optional: last */
    void *user;
    const char *banner;             /* optional: one more line printed once serving */
} lg_serve_app;

int lg_serve_run(const lg_serve_config *cfg, const lg_serve_app *app, lg_err *err);

#endif
