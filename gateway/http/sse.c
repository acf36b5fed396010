/*
 * sse.c — see sse.h. Two buffers: `fly` is what h2o is sending (it must
 * stay untouched until proceed), `pend` collects new events. On proceed (or
 * the zero-timeout flush when nothing is in flight) they swap.
 */
#include "gateway/http/sse.h"

#include <stdlib.h>
#include <string.h>

#define H2O_USE_LIBUV 0
#include <h2o.h>

#include "gateway/http/loop.h"

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

struct lg_sse {
    h2o_generator_t super; /* first: h2o calls proceed/stop with it */
    lg_request *r;
    h2o_req_t *req;
    buf pend, fly;
    bool inflight;  /* a send is in progress: wait for proceed */
    bool ending;    /* the end was requested: the next flush is final */
    bool over;      /* final or error state handed to h2o, or stopped */
    bool aborting;  /* end with an error once the send in flight completes */
    h2o_timeout_entry_t flush_entry;
};

static int buf_add(buf *b, const char *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->len + n)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static void do_flush(lg_sse *s)
{
    if (s->inflight || s->over)
        return;
    if (s->aborting) {
        s->over = true;
        h2o_send(s->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    if (s->pend.len == 0 && !s->ending)
        return;
    buf t = s->fly;
    s->fly = s->pend;
    s->pend = t;
    s->pend.len = 0;
    h2o_iovec_t v = h2o_iovec_init(s->fly.p, s->fly.len);
    if (s->ending) {
        s->over = true;
        lg__request_finished(s->r);
        h2o_send(s->req, &v, v.len ? 1 : 0, H2O_SEND_STATE_FINAL);
    } else {
        s->inflight = true;
        h2o_send(s->req, &v, 1, H2O_SEND_STATE_IN_PROGRESS);
    }
}

static void on_flush_timeout(h2o_timeout_entry_t *e)
{
    do_flush(H2O_STRUCT_FROM_MEMBER(lg_sse, flush_entry, e));
}

static void schedule(lg_sse *s)
{
    if (!s->inflight && !s->over && !h2o_timeout_is_linked(&s->flush_entry))
        h2o_timeout_link(s->req->conn->ctx->loop, &s->req->conn->ctx->zero_timeout, &s->flush_entry);
}

static void on_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    lg_sse *s = (lg_sse *)g;
    s->inflight = false;
    s->fly.len = 0;
    do_flush(s);
}

static void on_stop(h2o_generator_t *g, h2o_req_t *req)
{
    lg_sse *s = (lg_sse *)g;
    s->over = true;
    if (h2o_timeout_is_linked(&s->flush_entry))
        h2o_timeout_unlink(&s->flush_entry);
    lg__request_gone(s->r);
}

static void on_abort(void *self)
{
    lg_sse *s = self;
    if (s->over)
        return;
    s->aborting = true;
    if (h2o_timeout_is_linked(&s->flush_entry))
        h2o_timeout_unlink(&s->flush_entry);
    do_flush(s); /* now, or on proceed */
}

static const lg__stream_ops sse_ops = {on_abort};

static void sse_dispose(void *p)
{
    lg_sse *s = p;
    if (h2o_timeout_is_linked(&s->flush_entry))
        h2o_timeout_unlink(&s->flush_entry);
    free(s->pend.p);
    free(s->fly.p);
}

lg_sse *lg_sse_start(lg_request *r)
{
    h2o_req_t *req = lg_request_h2o(r);
    if (!req || lg_request_answered(r) || lg_request_is_closed(r))
        return NULL;
    if (lg_request_is_head(r)) { /* the stream's headers, no events: the request is over */
        lg_request_add_header(r, "cache-control", "no-cache");
        lg_respond(r, 200, "text/event-stream", NULL, 0);
        return NULL;
    }
    lg_sse *s = h2o_mem_alloc_shared(&req->pool, sizeof *s, sse_dispose);
    memset(s, 0, sizeof *s);
    s->super.proceed = on_proceed;
    s->super.stop = on_stop;
    s->r = r;
    s->req = req;
    s->flush_entry.cb = on_flush_timeout;
    lg__request_begin_response(r, 200, "text/event-stream");
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-accel-buffering"), 0, NULL, H2O_STRLIT("no"));
    lg__request_set_streaming(r, &sse_ops, s);
    h2o_start_response(req, &s->super);
    /* the headers go out now: the client sees the stream open before the first token */
    s->inflight = true;
    h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
    return s;
}

static bool usable(lg_sse *s) { return !s->over && !s->ending && !s->aborting && !lg_request_is_closed(s->r); }

static int append(lg_sse *s, const char *p, size_t n)
{
    if (s->pend.len + n > LG_SSE_MAX_PENDING || buf_add(&s->pend, p, n) != 0) {
        /* the client does not keep up (or no memory): end it as if it had left */
        lg_request *r = s->r;
        lg__request_gone(r);
        on_abort(s);
        return -1;
    }
    return 0;
}

int lg_sse_send(lg_sse *s, const char *data, size_t len)
{
    if (!usable(s))
        return -1;
    size_t i = 0;
    do {
        size_t j = i;
        while (j < len && data[j] != '\r' && data[j] != '\n')
            j++;
        if (append(s, "data: ", 6) || append(s, data + i, j - i) || append(s, "\n", 1))
            return -1;
        if (j < len && data[j] == '\r' && j + 1 < len && data[j + 1] == '\n')
            j++;
        i = j + 1;
    } while (i < len);
    if (append(s, "\n", 1))
        return -1;
    schedule(s);
    return 0;
}

int lg_sse_send_json(lg_sse *s, json_t *obj)
{
    char *str = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!str)
        return -1;
    int rc = lg_sse_send(s, str, strlen(str));
    free(str);
    return rc;
}

int lg_sse_comment(lg_sse *s, const char *text)
{
    if (!usable(s))
        return -1;
    if (append(s, ": ", 2) || append(s, text, strcspn(text, "\r\n")) || append(s, "\n\n", 2))
        return -1;
    schedule(s);
    return 0;
}

int lg_sse_end(lg_sse *s)
{
    if (!usable(s))
        return -1;
    s->ending = true;
    schedule(s);
    return 0;
}

int lg_sse_done(lg_sse *s)
{
    if (!usable(s))
        return -1;
    if (append(s, "data: [DONE]\n\n", 14))
        return -1;
    return lg_sse_end(s);
}

size_t lg_sse_pending(const lg_sse *s) { return s->pend.len; }
