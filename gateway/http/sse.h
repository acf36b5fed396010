/*
 * sse.h — a Server-Sent Events response (text/event-stream), the shape of
 * OpenAI streaming: "data: {...}\n\n" events, then "data: [DONE]\n\n".
 *
 * Fed on the request's loop thread (typically from hooks.on_message as the
 * engine's tokens arrive). h2o allows one send in flight per response: the
 * next may only start when the generator's proceed callback runs. Events
 * appended meanwhile accumulate in a pending buffer; appends within one
 * loop iteration are coalesced into one write (the flush runs from the
 * context's zero timeout). No Content-Length: HTTP/1.1 gets chunked
 * encoding, HTTP/2 DATA frames. A client that does not read lets the
 * pending buffer grow up to LG_SSE_MAX_PENDING; past it the stream is ended
 * as if the client had left (on_client_gone).
 *
 * Client gone: h2o stops the generator (HTTP/2 reset, write error) or the
 * HTTP/1 probe (request.h) sees the close; either way on_client_gone runs
 * once and the lg_sse functions return -1 from then on. The lg_sse lives in
 * the request's memory: do not use it after on_client_gone returned.
 */
#ifndef LG_GW_SSE_H
#define LG_GW_SSE_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/http/request.h"

typedef struct lg_sse lg_sse;

#define LG_SSE_MAX_PENDING (8u << 20)

/* Starts a 200 text/event-stream response (headers go out at once). NULL
 * when r was already answered or the client is gone, and for a HEAD
 * request (answered then: the stream's headers, no events). */
lg_sse *lg_sse_start(lg_request *r);

/* One event: "data: <line>\n" per line of data (CR, LF, CRLF split lines),
 * then "\n". 0, or -1 when the stream is over (client gone, finished). */
int lg_sse_send(lg_sse *s, const char *data, size_t len);
/* The compact JSON of obj as one event; steals the reference. */
int lg_sse_send_json(lg_sse *s, json_t *obj);
/* ": text\n\n" (ignored by clients; a keep-alive). */
int lg_sse_comment(lg_sse *s, const char *text);
/* "data: [DONE]\n\n" and the end of the response. */
int lg_sse_done(lg_sse *s);
/* The end of the response without [DONE] (e.g. after an error event). */
int lg_sse_end(lg_sse *s);

size_t lg_sse_pending(const lg_sse *s); /* bytes not yet handed to h2o */

#endif
