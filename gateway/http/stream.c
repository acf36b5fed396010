/*
 * stream.c — see stream.h. A thin typed layer over lg_request_post and the
 * request hooks: the handle carries the request reference the producer
 * owns, and the hooks translate to the stream's callbacks.
 */
#include "gateway/http/stream.h"

#include <stdlib.h>

struct lg_stream {
    lg_request *r; /* one reference, dropped by lg_stream_close */
};

/* What r's hooks get (request memory): the handler and its context. */
typedef struct hook_ctx {
    lg_stream_handler h;
    void *ctx;
} hook_ctx;

static void on_message(lg_request *r, void *user, int kind, const void *data, size_t len)
{
    hook_ctx *c = user;
    if (c->h.on_event)
        c->h.on_event(r, c->ctx, kind, data, len);
}

static void on_gone(lg_request *r, void *user)
{
    hook_ctx *c = user;
    if (c->h.on_cancel)
        c->h.on_cancel(r, c->ctx);
}

static const lg_request_hooks stream_hooks = {on_message, on_gone};

lg_stream *lg_stream_open(lg_request *r, const lg_stream_handler *h, void *ctx)
{
    if (lg_request_is_closed(r) || !lg_request_h2o(r))
        return NULL;
    hook_ctx *hc = lg_request_alloc(r, sizeof *hc);
    lg_stream *s = malloc(sizeof *s);
    if (!hc || !s) {
        free(s);
        return NULL;
    }
    s->r = r;
    hc->h = *h;
    hc->ctx = ctx;
    lg_request_retain(r);
    lg_request_set_hooks(r, &stream_hooks, hc);
    return s;
}

int lg_stream_post(lg_stream *s, int kind, const void *data, size_t len)
{
    return lg_request_post(s->r, kind, data, len);
}

int lg_stream_is_closed(const lg_stream *s) { return lg_request_is_closed(s->r); }

void lg_stream_close(lg_stream *s)
{
    if (!s)
        return;
    lg_request_release(s->r);
    free(s);
}
