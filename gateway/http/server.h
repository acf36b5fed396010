/*
 * server.h — the gateway's HTTP(S) server: N event-loop threads (libh2o
 * 2.2 evloop) sharing the listening sockets, TLS (tls.h), a worker pool
 * for blocking work (workers.h), and a graceful shutdown.
 *
 * Threads. lg_server_start spawns n_threads loop threads; each has its own
 * h2o context and accepts on its dup of every listening socket (the kernel
 * hands each connection to one of them). Everything about a connection and
 * its requests happens on the thread that accepted it. Other threads talk
 * to a request through lg_request_post (request.h). Loop and worker threads
 * block all asynchronous signals: the application's thread takes SIGTERM.
 *
 * Request bodies. h2o 2.2.5 runs a handler only once the whole body is
 * buffered, so the connection guard (conn.c) reads ahead of it: a request
 * that announces a body is checked from its head (route, declared size,
 * content type, tenant, key, upload admission; head_check.h) as soon as
 * its headers arrive, and a refusal is answered at once without reading
 * the body (OpenAI error object; HTTP/1 closes the connection after it,
 * HTTP/2 resets only the stream). An admitted body is read with its route's
 * own limit (413 past it). config.max_body (the upload limit, 1 GiB by
 * default) is the most any route may take. Buffers above 32 MiB move to an
 * unlinked, mmap'd file in DATA_DIR/tmp (h2o_socket_buffer_mmap_settings),
 * so large authenticated bodies live in the page cache, not the heap.
 * h2o's HTTP/1 request timeout covers headers *and* body, so it is
 * request_timeout_s (default 120 s) rather than h2o's 10 s, or a 1 GiB
 * upload could never finish. HTTP/2 stream resets are budgeted per
 * connection (rapid reset, CVE-2023-44487): past the budget the connection
 * gets GOAWAY(ENHANCE_YOUR_CALM) and closes. h2c (cleartext HTTP/2 by
 * upgrade or prior knowledge) is off.
 *
 * Shutdown (lg_server_shutdown, from any non-loop thread): every loop stops
 * accepting and closes its listeners; h2o sends HTTP/2 GOAWAY; idle HTTP/1
 * keep-alive connections are closed at once, busy ones when their response
 * is done; requests in flight run to completion until drain_timeout_s, after
 * which the remaining connections are shut down (their requests see
 * on_client_gone). Then the worker pool finishes its queue, the on_drain
 * hook runs (flush the store there) and lg_server_shutdown returns.
 */
#ifndef LG_GW_SERVER_H
#define LG_GW_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "engine/base/common.h"
#include "gateway/http/router.h"

typedef struct lg_server lg_server;
typedef struct lg_workers lg_workers;

#define LG_SERVER_MAX_LISTEN 16

typedef struct lg_server_config {
    const char *listen[LG_SERVER_MAX_LISTEN]; /* "127.0.0.1:8443", "[::1]:8443", "0.0.0.0:443", port 0 = any */
    int n_listen;
    const char *tls_cert, *tls_key; /* both or neither; neither: self-signed in DATA_DIR/tls */
    const char *data_dir;           /* required: tls/, tmp/ */
    int n_threads;                  /* event loops; 0: 2 */
    int n_workers;                  /* blocking-work threads; 0: 4 */
    bool insecure_http;             /* plain HTTP, only if every listen address is loopback */
    size_t max_body;                /* largest body any route may get; 0: 1 GiB */
    double drain_timeout_s;         /* 0: 30 */
    int request_timeout_s;          /* HTTP/1 headers + body; 0: 120 */
    int max_connections;            /* 0: 10000; beyond it new connections are closed at once */
    void (*on_drain)(void *user);   /* optional, after the loops stopped */
    void *drain_user;
    bool quiet;                     /* no notices on stderr (tests) */
    struct lg_access_log *access_log; /* optional: one JSON line per request (access_log.h); not owned */
} lg_server_config;

/* Validates the config, binds the listening sockets (so a busy port fails
 * here), prepares TLS. The router must outlive the server and is read-only
 * from now on; routes may not accept more than max_body. */
int lg_server_create(const lg_server_config *cfg, const lg_router *rt, lg_server **out, lg_err *err);
/* Starts the loop and worker threads; returns once every loop accepts. */
int lg_server_start(lg_server *s, lg_err *err);

int lg_server_listener_count(const lg_server *s);
int lg_server_listener_port(const lg_server *s, int i); /* the bound port (resolves port 0) */
/* "https://127.0.0.1:8443" or "http://[::1]:8080" (owned by the server) */
const char *lg_server_listener_url(const lg_server *s, int i);
bool lg_server_is_tls(const lg_server *s);
/* TLS files in use (configured or self-signed); NULL without TLS */
const char *lg_server_cert_path(const lg_server *s);

/* True from the moment shutdown began ([any]): /readyz answers 503 then. */
bool lg_server_is_draining(const lg_server *s);

/* Graceful shutdown as described above; blocks until done. Idempotent.
 * Never call it from a loop thread. */
void lg_server_shutdown(lg_server *s);
/* Shuts down if needed, then frees. NULL: no-op. */
void lg_server_free(lg_server *s);

/* Parses "host:port" / "[v6]:port"; "localhost" is 127.0.0.1, "*" 0.0.0.0. */
int lg_parse_listen(const char *spec, struct sockaddr_storage *ss, int *len, lg_err *err);
bool lg_addr_is_loopback(const struct sockaddr_storage *ss);

/* What the connection guard did, since the process started (any thread;
 * /metrics reads it). */
typedef struct lg_conn_stats {
    unsigned long long early_refusals;   /* requests answered from their head, body unread */
    unsigned long long h2_reset_goaways; /* HTTP/2 connections closed for too many stream resets */
    unsigned long long lingering_closes; /* closes that drained the client's unread body first */
} lg_conn_stats;
void lg_conn_stats_get(lg_conn_stats *out);


#endif
