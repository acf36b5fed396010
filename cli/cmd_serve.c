/*
 * cmd_serve.c — `loragate serve`: the HTTPS gateway.
 *
 *   loragate serve --model PATH [--listen ADDR:PORT]... [--data-dir DIR]
 *                  [--tls-cert FILE --tls-key FILE] [--threads N] [--insecure-http]
 *                  [--config FILE] [--max-upload-mb N] [--drain-timeout S]
 *
 * --config FILE is a JSON object whose keys are the long option names
 * ({"listen": ["127.0.0.1:8443"], "threads": 4, "insecure-http": false});
 * options given on the command line win over the file; an unknown key is
 * refused. Today the server carries the health routes only (the engine and
 * the OpenAI routes are wired in by the next piece of work); it prints its
 * URLs and runs until SIGTERM or SIGINT, then drains (in-flight requests
 * finish, up to --drain-timeout seconds) and exits 0.
 *
 * Exit status: 0 after a clean shutdown, 1 runtime failure (one line on
 * stderr), 2 bad usage.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "engine/common.h"
#include "gateway/router.h"
#include "gateway/routes.h"
#include "gateway/server.h"

typedef struct serve_opts {
    const char *model;
    const char *listen[LG_SERVER_MAX_LISTEN];
    int n_listen;
    const char *data_dir;
    const char *tls_cert, *tls_key;
    int threads;
    int insecure_http; /* -1 unset */
    long max_upload_mb;
    double drain_timeout;
    /* ---- engine options (added with the engine wiring) go here ----------- */
} serve_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loragate serve --model PATH [--listen ADDR:PORT]... [--data-dir DIR]\n"
            "                      [--tls-cert FILE --tls-key FILE] [--threads N] [--insecure-http]\n"
            "                      [--config FILE] [--max-upload-mb N] [--drain-timeout S]\n"
            "\n"
            "  --model PATH          base model (HF directory or GGUF file)\n"
            "  --listen ADDR:PORT    address to serve on, repeatable (default 127.0.0.1:8443; IPv6 as [::1]:8443)\n"
            "  --data-dir DIR        state directory: TLS files, temporary upload buffers (default ./loragate-data)\n"
            "  --tls-cert/--tls-key  PEM certificate chain and key (default: a self-signed pair in DATA_DIR/tls)\n"
            "  --threads N           HTTP event-loop threads (default 2)\n"
            "  --insecure-http       plain HTTP instead of TLS; refused unless every --listen is loopback\n"
            "  --config FILE         JSON object of these options (long names); command-line options win\n"
            "  --max-upload-mb N     largest request body, e.g. an adapter upload (default 1024)\n"
            "  --drain-timeout S     on SIGTERM, how long in-flight requests may take to finish (default 30)\n");
}

static int bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "loragate serve: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "loragate serve: %s %s: expected an integer in %ld..%ld\n", opt, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

static int parse_seconds(const char *opt, const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !(x > 0 && x <= 86400)) {
        fprintf(stderr, "loragate serve: %s %s: expected seconds in (0, 86400]\n", opt, v);
        return 2;
    }
    *out = x;
    return 0;
}

/* Fills the options the command line left unset from the JSON file. The
 * json_t stays alive (strings point into it) until serve returns. */
static int apply_config(const char *path, json_t *root, serve_opts *o, bool cli_listen)
{
    if (!json_is_object(root)) {
        fprintf(stderr, "loragate serve: --config %s: expected a JSON object of options\n", path);
        return 2;
    }
    const char *key;
    json_t *v;
    char num[64];
    json_object_foreach(root, key, v)
    {
        const char *s = json_string_value(v);
#define NEED_STRING()                                                                                              \
    if (!s) {                                                                                                      \
        fprintf(stderr, "loragate serve: --config %s: \"%s\" must be a string\n", path, key);                     \
        return 2;                                                                                                  \
    }
        if (!strcmp(key, "model")) {
            NEED_STRING();
            if (!o->model)
                o->model = s;
        } else if (!strcmp(key, "listen")) {
            if (cli_listen)
                continue;
            if (json_is_string(v)) {
                o->listen[0] = s;
                o->n_listen = 1;
            } else if (json_is_array(v) && json_array_size(v) >= 1 && json_array_size(v) <= LG_SERVER_MAX_LISTEN) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e)
                {
                    if (!json_is_string(e)) {
                        fprintf(stderr, "loragate serve: --config %s: \"listen\" must hold strings\n", path);
                        return 2;
                    }
                    o->listen[i] = json_string_value(e);
                }
                o->n_listen = (int)json_array_size(v);
            } else {
                fprintf(stderr, "loragate serve: --config %s: \"listen\" must be a string or an array of 1..%d strings\n",
                        path, LG_SERVER_MAX_LISTEN);
                return 2;
            }
        } else if (!strcmp(key, "data-dir")) {
            NEED_STRING();
            if (!o->data_dir)
                o->data_dir = s;
        } else if (!strcmp(key, "tls-cert")) {
            NEED_STRING();
            if (!o->tls_cert)
                o->tls_cert = s;
        } else if (!strcmp(key, "tls-key")) {
            NEED_STRING();
            if (!o->tls_key)
                o->tls_key = s;
        } else if (!strcmp(key, "insecure-http")) {
            if (!json_is_boolean(v)) {
                fprintf(stderr, "loragate serve: --config %s: \"insecure-http\" must be true or false\n", path);
                return 2;
            }
            if (o->insecure_http < 0)
                o->insecure_http = json_is_true(v);
        } else if (!strcmp(key, "threads") || !strcmp(key, "max-upload-mb") || !strcmp(key, "drain-timeout")) {
            if (!json_is_number(v)) {
                fprintf(stderr, "loragate serve: --config %s: \"%s\" must be a number\n", path, key);
                return 2;
            }
            snprintf(num, sizeof num, json_is_integer(v) ? "%.0f" : "%g", json_number_value(v));
            char opt[80];
            snprintf(opt, sizeof opt, "--config %s: %s", path, key);
            long x;
            if (!strcmp(key, "threads")) {
                if (!o->threads) {
                    if (parse_int(opt, num, 1, 256, &x))
                        return 2;
                    o->threads = (int)x;
                }
            } else if (!strcmp(key, "max-upload-mb")) {
                if (!o->max_upload_mb) {
                    if (parse_int(opt, num, 1, 1 << 20, &x))
                        return 2;
                    o->max_upload_mb = x;
                }
            } else if (!o->drain_timeout) {
                if (parse_seconds(opt, num, &o->drain_timeout))
                    return 2;
            }
        /* ---- engine options (added with the engine wiring) go here ------- */
        } else if (!strcmp(key, "config")) {
            fprintf(stderr, "loragate serve: --config %s: a config file cannot name another config file\n", path);
            return 2;
        } else {
            fprintf(stderr, "loragate serve: --config %s: unknown key \"%s\"\n", path, key);
            return 2;
        }
#undef NEED_STRING
    }
    return 0;
}

typedef struct ready_ctx {
    lg_server *srv;
} ready_ctx;

static bool serve_ready(void *user, json_t *checks)
{
    ready_ctx *rc = user;
    bool draining = rc->srv && lg_server_is_draining(rc->srv);
    json_object_set_new(checks, "server",
                        json_pack("{s:b, s:s}", "ok", !draining, "detail", draining ? "shutting down" : "accepting"));
    /* the engine is not wired into serve yet: the model is never loaded */
    json_object_set_new(checks, "model", json_pack("{s:b, s:s}", "ok", 0, "detail", "not loaded (engine not wired into serve yet)"));
    return false;
}

int lg_cmd_serve(int argc, char **argv)
{
    serve_opts o = {0};
    o.insecure_http = -1;
    const char *config = NULL;
    bool cli_listen = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--insecure-http")) {
            o.insecure_http = 1;
            continue;
        }
        bool known = !strcmp(a, "--model") || !strcmp(a, "--listen") || !strcmp(a, "--data-dir") ||
                     !strcmp(a, "--tls-cert") || !strcmp(a, "--tls-key") || !strcmp(a, "--threads") ||
                     !strcmp(a, "--config") || !strcmp(a, "--max-upload-mb") || !strcmp(a, "--drain-timeout");
        /* ---- engine options (added with the engine wiring) go here ----------- */
        if (!known)
            return bad("unknown option '%s' (loragate serve --help)%s", a, "");
        if (i + 1 >= argc)
            return bad("%s needs a value%s", a, "");
        const char *v = argv[++i];
        long x;
        if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--listen")) {
            if (o.n_listen == LG_SERVER_MAX_LISTEN)
                return bad("at most 16 --listen addresses%s%s", "", "");
            o.listen[o.n_listen++] = v;
            cli_listen = true;
        } else if (!strcmp(a, "--data-dir"))
            o.data_dir = v;
        else if (!strcmp(a, "--tls-cert"))
            o.tls_cert = v;
        else if (!strcmp(a, "--tls-key"))
            o.tls_key = v;
        else if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--threads")) {
            if (parse_int(a, v, 1, 256, &x))
                return 2;
            o.threads = (int)x;
        } else if (!strcmp(a, "--max-upload-mb")) {
            if (parse_int(a, v, 1, 1 << 20, &x))
                return 2;
            o.max_upload_mb = x;
        } else if (!strcmp(a, "--drain-timeout")) {
            if (parse_seconds(a, v, &o.drain_timeout))
                return 2;
        }
    }
    json_t *cfg_json = NULL;
    if (config) {
        json_error_t je;
        cfg_json = json_load_file(config, JSON_REJECT_DUPLICATES, &je);
        if (!cfg_json) {
            fprintf(stderr, "loragate serve: --config %s: %s (line %d)\n", config, je.text, je.line);
            return 2;
        }
        int rc = apply_config(config, cfg_json, &o, cli_listen);
        if (rc) {
            json_decref(cfg_json);
            return rc;
        }
    }
    int status = 1;
    lg_router *rt = NULL;
    lg_server *srv = NULL;
    ready_ctx rctx = {NULL};
    if (!o.model) {
        json_decref(cfg_json);
        return bad("--model PATH is required%s%s", "", "");
    }
    if (!!o.tls_cert != !!o.tls_key) {
        json_decref(cfg_json);
        return bad("--tls-cert and --tls-key go together%s%s", "", "");
    }
    struct stat st;
    if (stat(o.model, &st) != 0) {
        fprintf(stderr, "loragate serve: --model %s: %s\n", o.model, strerror(errno));
        goto out;
    }
    if (!o.n_listen) {
        o.listen[0] = "127.0.0.1:8443";
        o.n_listen = 1;
    }
    lg_server_config sc = {0};
    memcpy(sc.listen, o.listen, sizeof o.listen);
    sc.n_listen = o.n_listen;
    sc.tls_cert = o.tls_cert;
    sc.tls_key = o.tls_key;
    sc.data_dir = o.data_dir ? o.data_dir : "loragate-data";
    sc.n_threads = o.threads ? o.threads : 2;
    sc.insecure_http = o.insecure_http == 1;
    sc.max_body = (size_t)(o.max_upload_mb ? o.max_upload_mb : 1024) << 20;
    sc.drain_timeout_s = o.drain_timeout ? o.drain_timeout : 30;

    lg_err err = {{0}};
    rt = lg_router_create();
    if (!rt || lg_routes_health(rt, serve_ready, &rctx, &err) != 0) {
        fprintf(stderr, "loragate serve: %s\n", rt ? err.msg : "out of memory");
        goto out;
    }
    /* SIGTERM/SIGINT are taken by sigwait below: block them before any thread exists */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (lg_server_create(&sc, rt, &srv, &err) != 0 || (rctx.srv = srv, lg_server_start(srv, &err) != 0)) {
        fprintf(stderr, "loragate serve: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < lg_server_listener_count(srv); i++)
        printf("loragate: serving on %s (%s)\n", lg_server_listener_url(srv, i),
               lg_server_is_tls(srv) ? "TLS 1.2/1.3, HTTP/2 and HTTP/1.1" : "plain HTTP, HTTP/1.1");
    printf("loragate: %d loop threads, uploads up to %zu MiB, model %s (engine not wired yet: health routes only)\n",
           sc.n_threads, sc.max_body >> 20, o.model);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0)
        ;
    fprintf(stderr, "loragate: %s received: draining (up to %g s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            sc.drain_timeout_s);
    lg_server_shutdown(srv);
    fprintf(stderr, "loragate: stopped\n");
    status = 0;
out:
    lg_server_free(srv);
    lg_router_free(rt);
    json_decref(cfg_json);
    return status;
}
