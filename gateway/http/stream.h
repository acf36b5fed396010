/*
 * stream.h — the bridge between a producer thread (the engine) and a
 * request on its loop thread, for streamed and non-streamed generation.
 *
 *   loop thread (route fn)                 engine thread
 *   ----------------------                 -------------
 *   s = lg_stream_open(r, &h, ctx)
 *   engine_submit(..., user = s) -------->  on_token(user = s, ...):
 *                                             lg_stream_post(s, TOKEN, &t, sizeof t)
 *   h.on_event(r, ctx, TOKEN, &t, n) <-----   (non-blocking: a malloc'd message on
 *     -> lg_sse_send_json(...)                 h2o's multithread queue; never locks
 *                                              the loop)
 *                                           on_finish(user = s, usage):
 *                                             lg_stream_post(s, FINISH, &u, sizeof u)
 *   h.on_event(r, ctx, FINISH, ...)  <-----   lg_stream_close(s)   (the producer's last call)
 *     -> lg_sse_done / lg_respond_json
 *
 *   client disconnects (HTTP/2 RST_STREAM or connection closed: at once;
 *   HTTP/1 peer close: within 100 ms, request.h's probe; write error; drain
 *   timeout):
 *   h.on_cancel(r, ctx) -> engine_cancel(id)   (loop thread, exactly once, before
 *                                               ctx's request memory is freed)
 *                                           lg_stream_post now returns -1: the
 *                                           producer may stop early; it still
 *                                           calls lg_stream_close(s) once.
 *
 * Guarantees: events arrive in post order; none after on_cancel or after
 * the response finished; on_cancel is not called for a response that
 * finished. ctx may live in request memory (lg_request_alloc): the producer
 * never touches it, only s. s stays valid for the producer until its
 * lg_stream_close, whatever the client does, because s holds a reference on
 * the request (request.h: the object outlives h2o's side). The callbacks
 * get r, not s: the producer may have closed s before its last event is
 * delivered.
 *
 * Cost: one malloc + one queue append per post (h2o wakes the loop's
 * eventfd only when the queue was empty), so a 32-sequence batch at 300
 * tokens/s each is ~10k messages/s spread over the loops. Payloads are
 * copied (at most LG_REQUEST_MAX_MSG bytes); post a small POD struct.
 */
#ifndef LG_GW_STREAM_H
#define LG_GW_STREAM_H

#include <stddef.h>

#include "gateway/http/request.h"

typedef struct lg_stream lg_stream;

typedef struct lg_stream_handler {
    /* [loop] one posted event; data valid during the call */
    void (*on_event)(lg_request *r, void *ctx, int kind, const void *data, size_t len);
    /* [loop] the client is gone: cancel the producer's work now */
    void (*on_cancel)(lg_request *r, void *ctx);
} lg_stream_handler;

/* [loop] Sets r's hooks to h (copied) and returns the producer's handle,
 * holding one reference on r. NULL when out of memory or r is already
 * closed (nothing to stream to). */
lg_stream *lg_stream_open(lg_request *r, const lg_stream_handler *h, void *ctx);

/* [any] Queues an event for h.on_event. 0, or -1 when it was dropped
 * (client gone, response finished, server stopped, out of memory): the
 * producer should cancel or stop. */
int lg_stream_post(lg_stream *s, int kind, const void *data, size_t len);

/* [any] True once posts would be dropped. */
int lg_stream_is_closed(const lg_stream *s);

/* [any] The producer is done with s (exactly once, after its last post);
 * drops its reference on the request and frees s. NULL: no-op. */
void lg_stream_close(lg_stream *s);

#endif
