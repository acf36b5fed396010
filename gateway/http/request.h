/*
 * request.h — one HTTP request as route code sees it, and the only handle
 * other threads (engine, workers) may hold on to it.
 *
 * Lifetime. The dispatcher creates an lg_request for every request on the
 * loop thread that owns the connection. It is reference-counted: the h2o
 * side holds one reference until h2o disposes the request (response done,
 * or the client went away); whoever hands r to another thread takes its own
 * with lg_request_retain and drops it with lg_request_release (any thread).
 * The object stays valid until both sides have released it, so a producer
 * may keep posting after the client disconnected: those messages are
 * dropped on the loop thread.
 *
 * Threads. Functions marked [loop] run on r's loop thread only (route
 * functions and hooks are called there). Functions marked [any] are safe
 * from any thread.
 *
 * Messages. lg_request_post copies a small payload into a message that is
 * delivered on r's loop thread via h2o_multithread_send_message (the loop
 * is never locked by a producer), to hooks.on_message, in post order. When
 * the client is gone (or the response is finished, or the server stopped)
 * the message is dropped and post returns -1, so a producer can stop.
 *
 * Client gone. hooks.on_client_gone runs once, on the loop thread, when the
 * request ends before its response was finished: an HTTP/2 stream reset,
 * a closed connection, a shutdown past its drain timeout. HTTP/1 in h2o 2.2
 * does not read the socket while a response is pending, so for HTTP/1
 * requests with hooks set the loop polls the socket for a peer close
 * (POLLRDHUP) every 100 ms; on a close it calls on_client_gone and ends the
 * response itself. After on_client_gone, responses on r are no-ops; memory
 * from lg_request_alloc stays valid until on_client_gone returned and no
 * longer. The engine request should be cancelled from on_client_gone.
 */
#ifndef LG_GW_REQUEST_H
#define LG_GW_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "gateway/http/http_util.h"
#include "gateway/http/router.h"

typedef struct lg_request lg_request;
typedef struct st_h2o_req_t h2o_req_t;

/* ---- [loop] the request -------------------------------------------------- */

h2o_req_t *lg_request_h2o(lg_request *r);   /* NULL once the client is gone */
const char *lg_request_id(const lg_request *r);   /* "req_<32 hex>", also sent as x-request-id */
const lg_route *lg_request_route(const lg_request *r);
/* Path parameter `name`, percent-decoded and NUL-terminated (request
 * memory); NULL if the route has no such parameter. */
const char *lg_request_param(const lg_request *r, const char *name);
/* Body bytes (base NULL, len 0 when none). May be mmap-backed (large bodies
 * spill to an unlinked file in DATA_DIR/tmp): read it, do not keep it past
 * the request. */
const char *lg_request_body(const lg_request *r, size_t *len);
/* A request header (first occurrence, case-insensitive name); NULL if absent.
 * Not NUL-terminated: *len gets the length. */
const char *lg_request_header(const lg_request *r, const char *name, size_t *len);
bool lg_request_is_http2(const lg_request *r);
/* A HEAD request (a GET route answers it: every answer then goes out as its
 * headers only, Content-Length included, no body). */
bool lg_request_is_head(const lg_request *r);
/* Query parameter `name` of the request URL, decoded ('+' is a space) into
 * out (NUL-terminated). Returns its length, -1 when absent or malformed,
 * -2 when it does not fit in cap. */
int lg_request_query(const lg_request *r, const char *name, char *out, size_t cap);
/* Memory freed with the request (after on_client_gone returned). */
void *lg_request_alloc(lg_request *r, size_t n);
/* Parses the body as a JSON object (json_body.h limits); on failure answers
 * 400 with the parser's message and returns NULL. */
json_t *lg_request_json(lg_request *r);

/* The bearer token of the Authorization header (a slice of the header, not
 * NUL-terminated; *len its length); NULL when absent or not "Bearer <token>". */
const char *lg_request_bearer(const lg_request *r, size_t *len);

/* Tenant addressing (router.h): how the request named its tenant, the slug
 * (lowercase, NUL-terminated; NULL with LG_TENANT_NONE) and what the
 * tenancy's resolve function returned for it (NULL without a resolver). A
 * tenant-key auth hook must check that the key belongs to this tenant. */
lg_tenant_via lg_request_tenant_via(const lg_request *r);
const char *lg_request_tenant_slug(const lg_request *r);
void *lg_request_tenant(const lg_request *r);

/* Adds a field to this request's access-log line (access_log.h): key id,
 * model, token counts... never prompt text or secrets. Steals value;
 * replaces an earlier value of the same key; the built-in fields (ts,
 * request_id, method, path, route, status, ...) cannot be overridden.
 * [loop] until the request is disposed. */
void lg_request_log_set(lg_request *r, const char *key, json_t *value);

/* The auth hook's result, for the route (opaque here). */
void lg_request_set_principal(lg_request *r, void *principal);
void *lg_request_principal(const lg_request *r);

/* ---- [loop] answering ---------------------------------------------------- *
 * Each sends the whole response and returns 0, or returns -1 when the
 * request was already answered or the client is gone (nothing sent). Every
 * response carries x-request-id. */

/* Adds a response header before the response starts (copied). */
void lg_request_add_header(lg_request *r, const char *name, const char *value);
int lg_respond(lg_request *r, int status, const char *content_type, const void *body, size_t len); /* body copied */
int lg_respond_json(lg_request *r, int status, json_t *body); /* steals the reference */
/* OpenAI error object (http_util.h); code/param may be NULL. 503 and 429
 * answers get Retry-After: retry_after_s when > 0. */
int lg_respond_error(lg_request *r, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int lg_respond_error_ex(lg_request *r, int status, const char *type, const char *code, const char *param,
                        int retry_after_s, const char *message);
bool lg_request_answered(const lg_request *r); /* a response was started */

/* The common error answers, worded as OpenAI words them:
 *  401 invalid_api_key, WWW-Authenticate: Bearer (message NULL: "You didn't
 *      provide an API key..."; give "Incorrect API key provided." etc. otherwise)
 *  403 (message names what is missing, e.g. the scope)
 *  404 model_not_found, param "model": "The model `x` does not exist or you
 *      do not have access to it." (also for another tenant's adapter)
 *  503 (Retry-After: retry_after_s, at least 1) */
int lg_respond_unauthorized(lg_request *r, const char *message);
int lg_respond_forbidden(lg_request *r, const char *message);
int lg_respond_model_not_found(lg_request *r, const char *model);
int lg_respond_unavailable(lg_request *r, int retry_after_s, const char *message);

/* ---- hooks and messages ---------------------------------------------------- */

typedef struct lg_request_hooks {
    /* [loop] a message posted with lg_request_post; data is valid during the call */
    void (*on_message)(lg_request *r, void *user, int kind, const void *data, size_t len);
    /* [loop] at most once: the client left before the response was finished */
    void (*on_client_gone)(lg_request *r, void *user);
} lg_request_hooks;

/* [loop] Sets the hooks (copied) and their user pointer; also starts the
 * HTTP/1 disconnect probe for r. */
void lg_request_set_hooks(lg_request *r, const lg_request_hooks *hooks, void *user);

void lg_request_retain(lg_request *r);  /* [any] */
void lg_request_release(lg_request *r); /* [any] NULL: no-op; frees on the last reference */

/* [any] Copies len bytes (<= LG_REQUEST_MAX_MSG) and queues them for
 * hooks.on_message on r's loop. -1: dropped (client gone, response
 * finished, server stopped, too large, out of memory). */
#define LG_REQUEST_MAX_MSG (1u << 20)
int lg_request_post(lg_request *r, int kind, const void *data, size_t len);

/* [any] True once the client is gone or the response finished: a producer
 * can stop early. */
bool lg_request_is_closed(const lg_request *r);

/* ---- [loop] blocking work -------------------------------------------------- *
 * Runs work(arg) on the server's worker pool (database writes, file
 * validation: anything that may block), then done(r, arg) back on r's loop
 * thread. done always runs (to free arg); lg_request_h2o(r) tells whether
 * the client is still there. r is retained meanwhile. -1 (nothing queued)
 * when the pool is stopped. */
int lg_request_defer(lg_request *r, void (*work)(void *arg), void (*done)(lg_request *r, void *arg), void *arg);

/* ---- observation ---------------------------------------------------------- *
 * fn runs once per request on its loop thread when the request ends (where
 * its access-log line is written, whether or not the access log is on):
 * route name ("" when no route matched), status (499: the client left
 * before any answer), tenant slug (the addressed tenant, else the one the
 * auth hook logged as "tenant"; NULL: none). One per process (metrics.c);
 * set it before the server starts, NULL to unset after it stopped. */
typedef void (*lg_request_observer_fn)(void *user, const char *route, int status, const char *tenant);
void lg_request_set_observer(lg_request_observer_fn fn, void *user);

/* ---- internal (server.c, sse.c) ------------------------------------------- */
typedef struct lg_loop lg_loop;
typedef struct st_h2o_handler_t h2o_handler_t;
/* The root handler's body: route, check, authenticate, call. */
int lg__dispatch(lg_loop *L, const lg_router *rt, h2o_req_t *req);
/* sse.c: the generator that owns the response body */
typedef struct lg__stream_ops {
    void (*abort)(void *self); /* end the response now (client gone) */
} lg__stream_ops;
void lg__request_set_streaming(lg_request *r, const lg__stream_ops *ops, void *self);
void lg__request_finished(lg_request *r); /* the final bytes were handed to h2o */
void lg__request_mark_answered(lg_request *r);
/* status, content type and x-request-id on r's response; marks it answered */
void lg__request_begin_response(lg_request *r, int status, const char *content_type);
void lg__request_gone(lg_request *r);

#endif
