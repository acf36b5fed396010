/*
 * loop.h — INTERNAL to gateway/: one event-loop thread of the server, as
 * server.c, request.c, sse.c and workers.c share it. Route code never
 * includes this; it sees lg_request and lg_server only.
 *
 * A loop owns an h2o evloop and an h2o_context_t (its h2o state: timeouts,
 * connections, the multithread queue). Other threads reach a loop only
 * through messages on that queue (h2o_multithread_send_message): the
 * "post" receiver carries messages for requests (request.c), the "ctl"
 * receiver carries shutdown orders (server.c). `post_lock` + `open` make a
 * post racing with the loop's exit safe: once open is false nothing new is
 * queued, and the loop delivers (drops) what was queued before.
 */
#ifndef LG_GW_LOOP_H
#define LG_GW_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define H2O_USE_LIBUV 0
#include <h2o.h>

typedef struct lg_server lg_server;
typedef struct lg_router lg_router;
struct lg_verdict;

typedef struct lg_loop {
    h2o_context_t ctx; /* first: h2o hands us &ctx (req->conn->ctx) */
    lg_server *srv;
    int index;
    pthread_t tid;

    h2o_multithread_receiver_t post_rx; /* lg_request messages and work completions */
    h2o_multithread_receiver_t ctl_rx;  /* shutdown */
    pthread_mutex_t post_lock;
    bool open; /* under post_lock: messages may still be queued */

    h2o_socket_t **listeners;
    int n_listeners;
    h2o_accept_ctx_t accept_ctx;
    /* this loop's copy of the server's h2o configuration (ctx.globalconf
     * points here): the connection guard sets max_request_entity_size to a
     * route's limit around each HTTP/1 body read (conn.c) */
    h2o_globalconf_t gconf;
    size_t max_body;           /* the server's limit, gconf's value otherwise */
    const lg_router *router;
    atomic_int *srv_conns;     /* the server's connection count */
    struct lg_workers *workers;       /* the server's blocking-work pool */
    struct lg_access_log *access_log; /* NULL: none */
    bool tls;

    h2o_linklist_t conns; /* struct lg_conn (conn.c): accepted sockets still open */
    int n_conns;
    /* conn.c: a request the guard refused from its head while h2o
     * dispatches it (synchronously, inside the guard's call into h2o) */
    h2o_socket_t *withheld_sock; /* HTTP/1: the connection */
    h2o_req_t *withheld_req;     /* HTTP/2: the stream's request */
    const struct lg_verdict *withheld;
    /* conn.c: lingering closes after early refusals */
    h2o_linklist_t lingering;
    int n_lingering;
    h2o_timeout_t linger_timeout;
    int inflight;         /* requests dispatched and not yet disposed */
    h2o_linklist_t requests; /* those requests (lg_request.loop_link), for the drain */
    int jobs_pending;     /* worker jobs whose completion has not been delivered */

    /* disconnect probe for HTTP/1 requests that wait on a producer (request.c) */
    h2o_linklist_t probed;
    h2o_timeout_t probe_timeout;
    h2o_timeout_entry_t probe_entry;

    volatile bool stop; /* set on the loop thread by the ctl message */
} lg_loop;

static inline lg_loop *lg_loop_of_ctx(h2o_context_t *ctx) { return (lg_loop *)ctx; }

/* request.c: the post receiver's callback, and shutdown helpers */
void lg__request_on_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages);
void lg__loop_drop_queued(lg_loop *L);
void lg__probe_init(lg_loop *L);
void lg__probe_dispose(lg_loop *L);

#endif
