/*
 * conn.h — INTERNAL to gateway/: accepted connections and the guard that
 * reads ahead of h2o on each of them (conn.c has the design note).
 *
 * server.c hands every accepted socket to lg__conn_accept and asks this
 * module to close idle or all connections at drain; request.c asks it, at
 * dispatch, whether the guard refused the request from its head (the body
 * was withheld from h2o) and takes over the upload reservation the guard
 * made for it.
 */
#ifndef LG_GW_CONN_H
#define LG_GW_CONN_H

#include <stdbool.h>

#include "gateway/http/head_check.h"
#include "gateway/http/loop.h"

/* [loop] A new connection (after the max_connections check). */
void lg__conn_accept(lg_loop *L, h2o_socket_t *sock);

/* [loop] Per-loop state (lingering closes) around the loop's life. */
void lg__conns_loop_init(lg_loop *L);
void lg__conns_loop_dispose(lg_loop *L);

/* [loop] Drain helpers: close HTTP/1 connections between requests; shut
 * every connection down (their requests see the client gone). */
void lg__conns_close_idle_http1(lg_loop *L);
void lg__conns_shut_all(lg_loop *L);

/* [loop] The guard's verdict when it refused req from its head (h2o
 * dispatches such a request without its body); NULL otherwise. */
const lg_verdict *lg__conn_withheld(lg_loop *L, h2o_req_t *req);
/* [loop] After answering a withheld HTTP/1 request: the connection closes
 * after the response, then drains what the client still sends for a short
 * while (a lingering close, so the client reads the answer). */
void lg__conn_linger(lg_loop *L, h2o_req_t *req);

/* [loop] The upload reservation (route admit_body) the guard made for req,
 * now owned by the caller; NULL when none. */
void *lg__conn_take_hold(lg_loop *L, h2o_req_t *req);

/* [loop] An HTTP/1 request was dispatched: if the client already sent
 * bytes past it (pipelining), the connection closes after this response,
 * so that no request head ever reaches h2o without the guard seeing it. */
void lg__conn_h1_dispatched(lg_loop *L, h2o_req_t *req);
/* [loop] An HTTP/1 request of sock was disposed (its response is done or
 * the connection is closing): the guard takes the next request's head. */
void lg__conn_h1_request_done(lg_loop *L, h2o_socket_t *sock);

#endif
