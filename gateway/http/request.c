/*
 * request.c — lg_request: the per-request object, its cross-thread
 * messages, the HTTP/1 disconnect probe, blocking work, and the dispatcher
 * that applies a route's policy (see request.h and router.h).
 *
 * Invariants:
 *  - refs counts the h2o side (one reference from dispatch until h2o
 *    disposes the request, dropped in anchor_dispose) plus every
 *    lg_request_retain, plus one per queued message or deferred job.
 *  - `closed` (atomic) becomes true once, on the loop thread, when the
 *    response was finished or the client left; after that nothing is
 *    delivered to hooks.on_message. `req` becomes NULL when h2o disposes the
 *    request; only the loop thread reads or writes it.
 *  - on_client_gone runs at most once (gone_called), before the request's
 *    pool is freed: from the generator's stop (streaming), the probe, or the
 *    pool anchor's dispose, whichever comes first.
 */
#include "gateway/http/request.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "gateway/http/access_log.h"
#include "gateway/http/body_encoding.h"
#include "gateway/http/conn.h"
#include "gateway/http/head_check.h"
#include "gateway/http/json_body.h"
#include "gateway/http/loop.h"
#include "gateway/http/workers.h"

#define PROBE_INTERVAL_MS 100
#define LG_MAX_DECODED_BODY ((size_t)64 << 20) /* a compressed body decodes in memory: at most this much */

struct lg_request {
    atomic_int refs;
    atomic_bool closed;
    lg_loop *loop;
    h2o_req_t *req;
    const lg_route *route;
    int n_params;
    const char *param_names[LG_ROUTE_MAX_PARAMS];
    char *param_values[LG_ROUTE_MAX_PARAMS];
    char id[LG_REQUEST_ID_LEN + 1];
    void *principal;

    lg_request_hooks hooks;
    void *hooks_user;
    bool has_hooks;
    bool answered;    /* a response was started */
    bool finished;    /* its last bytes were handed to h2o */
    bool gone_called;

    bool probed;
    h2o_linklist_t probe_link;

    h2o_linklist_t loop_link; /* on loop->requests from dispatch to dispose */
    h2o_socket_t *sock;       /* the connection's socket (NULL if h2o has none) */
    bool http1;
    /* an upload reservation (route admit_body), released at dispose */
    const lg_route *hold_route;
    void *hold;
    /* a gzip/deflate body, decoded (body_encoding.h); freed at dispose */
    void *decoded;
    size_t decoded_len;

    /* tenancy (router.h) */
    lg_tenant_via tenant_via;
    char *tenant_slug; /* request memory */
    void *tenant;

    /* access log: captured at dispatch (h2o's buffers may be gone at dispose) */
    json_t *log_extra; /* fields added by route code, NULL: none */
    char log_method[16];
    char log_path[256];
    char log_peer[64];
    const lg__stream_ops *stream_ops;
    void *stream_self;
};

enum { MSG_POST = 1, MSG_DONE = 2 };

typedef struct msg {
    h2o_multithread_message_t super;
    int type;
    lg_request *r;
    /* MSG_DONE */
    void (*done)(lg_request *r, void *arg);
    void *arg;
    /* MSG_POST */
    int kind;
    size_t len;
    char data[];
} msg;

/* ---- references ---------------------------------------------------------- */

void lg_request_retain(lg_request *r) { atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); }

void lg_request_release(lg_request *r)
{
    if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
        free(r);
}

bool lg_request_is_closed(const lg_request *r) { return atomic_load_explicit(&r->closed, memory_order_acquire); }

/* ---- closing ----------------------------------------------------------------- */

static void probe_unlink(lg_request *r)
{
    if (r->probed) {
        h2o_linklist_unlink(&r->probe_link);
        r->probed = false;
    }
}

void lg__request_finished(lg_request *r)
{
    r->finished = true;
    atomic_store_explicit(&r->closed, true, memory_order_release);
    probe_unlink(r);
}

void lg__request_mark_answered(lg_request *r) { r->answered = true; }

void lg__request_gone(lg_request *r)
{
    if (r->finished || r->gone_called)
        return;
    r->gone_called = true;
    atomic_store_explicit(&r->closed, true, memory_order_release);
    probe_unlink(r);
    if (r->has_hooks && r->hooks.on_client_gone)
        r->hooks.on_client_gone(r, r->hooks_user);
}

void lg__request_set_streaming(lg_request *r, const lg__stream_ops *ops, void *self)
{
    r->stream_ops = ops;
    r->stream_self = self;
}

typedef struct anchor {
    lg_request *r;
} anchor;

static lg_request_observer_fn observer;
static void *observer_user;

void lg_request_set_observer(lg_request_observer_fn fn, void *user)
{
    observer_user = user;
    observer = fn;
}

static void write_access_log(lg_request *r)
{
    lg_access_log *log = r->loop->access_log;
    h2o_req_t *req = r->req;
    /* the tenant: addressed by path/host, else the one auth logged */
    json_t *lt = r->log_extra ? json_object_get(r->log_extra, "tenant") : NULL;
    const char *tenant = r->tenant_slug ? r->tenant_slug : json_is_string(lt) ? json_string_value(lt) : NULL;
    if (observer && req) {
        int st = r->answered || r->finished ? req->res.status : r->gone_called ? 499 : 0;
        observer(observer_user, r->route && r->route->name ? r->route->name : "", st, tenant);
    }
    if (!log || !req) {
        json_decref(r->log_extra);
        r->log_extra = NULL;
        return;
    }
    struct timeval now;
    gettimeofday(&now, NULL);
    struct timeval t0 = req->timestamps.request_begin_at;
    if (!t0.tv_sec)
        t0 = now;
    double dur_ms = (now.tv_sec - t0.tv_sec) * 1e3 + (now.tv_usec - t0.tv_usec) / 1e3;
    struct tm tm;
    time_t secs = t0.tv_sec;
    gmtime_r(&secs, &tm);
    char ts[40];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(t0.tv_usec / 1000));
    json_t *o = json_object();
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "request_id", json_string(r->id));
    json_object_set_new(o, "method", lg_json_string_lossy(r->log_method, strlen(r->log_method), 16));
    json_object_set_new(o, "path", lg_json_string_lossy(r->log_path, strlen(r->log_path), 256));
    json_object_set_new(o, "route", r->route ? json_string(r->route->name) : json_null());
    json_object_set_new(o, "status", json_integer(r->answered || r->finished ? req->res.status : 0));
    json_object_set_new(o, "http", json_string(req->version >= 0x200 ? "2" : req->version == 0x100 ? "1.0" : "1.1"));
    json_object_set_new(o, "tls", json_boolean(r->loop->tls));
    json_object_set_new(o, "duration_ms", json_real(dur_ms));
    json_object_set_new(o, "bytes_in", json_integer(req->entity.base ? (json_int_t)req->entity.len : 0));
    json_object_set_new(o, "bytes_out", json_integer((json_int_t)req->bytes_sent));
    json_object_set_new(o, "tenant", tenant ? json_string(tenant) : json_null());
    json_object_set_new(o, "peer", json_string(r->log_peer));
    json_object_set_new(o, "client_gone", json_boolean(r->gone_called));
    if (r->log_extra) {
        const char *k;
        json_t *v;
        json_object_foreach(r->log_extra, k, v)
        {
            if (!json_object_get(o, k))
                json_object_set(o, k, v);
        }
        json_decref(r->log_extra);
        r->log_extra = NULL;
    }
    char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (line) {
        lg_access_log_write(log, line, strlen(line));
        free(line);
    }
}

void lg_request_log_set(lg_request *r, const char *key, json_t *value)
{
    if (!value)
        return;
    if (!r->req || (!r->log_extra && !(r->log_extra = json_object()))) {
        json_decref(value);
        return;
    }
    json_object_set_new(r->log_extra, key, value);
}

/* h2o disposes the request (its pool): the h2o side lets go. */
static void anchor_dispose(void *p)
{
    lg_request *r = ((anchor *)p)->r;
    lg__request_gone(r); /* no-op when the response was finished */
    write_access_log(r);
    if (h2o_linklist_is_linked(&r->loop_link))
        h2o_linklist_unlink(&r->loop_link);
    atomic_store_explicit(&r->closed, true, memory_order_release);
    r->loop->inflight--;
    r->req = NULL;
    if (r->hold && r->hold_route->release_body)
        r->hold_route->release_body(r->hold);
    r->hold = NULL;
    free(r->decoded);
    r->decoded = NULL;
    if (r->http1 && r->sock)
        lg__conn_h1_request_done(r->loop, r->sock);
    lg_request_release(r);
}

/* ---- accessors ------------------------------------------------------------------ */

h2o_req_t *lg_request_h2o(lg_request *r) { return r->req; }
const char *lg_request_id(const lg_request *r) { return r->id; }
const lg_route *lg_request_route(const lg_request *r) { return r->route; }
void lg_request_set_principal(lg_request *r, void *p) { r->principal = p; }
void *lg_request_principal(const lg_request *r) { return r->principal; }
lg_tenant_via lg_request_tenant_via(const lg_request *r) { return r->tenant_via; }
const char *lg_request_tenant_slug(const lg_request *r) { return r->tenant_slug; }
void *lg_request_tenant(const lg_request *r) { return r->tenant; }

const char *lg_request_bearer(const lg_request *r, size_t *len)
{
    size_t hl;
    const char *h = lg_request_header(r, "authorization", &hl);
    const char *tok;
    if (!h || lg_parse_bearer(h, hl, &tok, len) != 0)
        return NULL;
    return tok;
}
bool lg_request_answered(const lg_request *r) { return r->answered; }

const char *lg_request_param(const lg_request *r, const char *name)
{
    for (int i = 0; i < r->n_params; i++)
        if (strcmp(r->param_names[i], name) == 0)
            return r->param_values[i];
    return NULL;
}

const char *lg_request_body(const lg_request *r, size_t *len)
{
    if (r->req && r->decoded) {
        *len = r->decoded_len;
        return r->decoded;
    }
    if (!r->req || !r->req->entity.base) {
        *len = 0;
        return NULL;
    }
    *len = r->req->entity.len;
    return r->req->entity.base;
}

const char *lg_request_header(const lg_request *r, const char *name, size_t *len)
{
    if (!r->req)
        return NULL;
    ssize_t i = h2o_find_header_by_str(&r->req->headers, name, strlen(name), -1);
    if (i < 0)
        return NULL;
    *len = r->req->headers.entries[i].value.len;
    return r->req->headers.entries[i].value.base;
}

int lg_request_query(const lg_request *r, const char *name, char *out, size_t cap)
{
    if (!r->req || r->req->query_at == SIZE_MAX)
        return -1;
    const char *q = r->req->path.base + r->req->query_at + 1, *end = r->req->path.base + r->req->path.len;
    size_t nl = strlen(name);
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pe = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pe - q));
        const char *ke = eq ? eq : pe;
        if ((size_t)(ke - q) == nl && memcmp(q, name, nl) == 0) {
            const char *v = eq ? eq + 1 : pe;
            size_t vl = (size_t)(pe - v);
            if (cap < vl + 1)
                return -2;
            char *tmp = malloc(vl + 1);
            if (!tmp)
                return -1;
            for (size_t i = 0; i < vl; i++)
                tmp[i] = v[i] == '+' ? ' ' : v[i];
            int n = lg_percent_decode(tmp, vl, out, cap);
            free(tmp);
            return n;
        }
        q = pe + 1;
    }
    return -1;
}

bool lg_request_is_http2(const lg_request *r) { return r->req && r->req->version >= 0x200; }

void *lg_request_alloc(lg_request *r, size_t n) { return r->req ? h2o_mem_alloc_pool(&r->req->pool, n) : NULL; }

json_t *lg_request_json(lg_request *r)
{
    size_t len;
    const char *body = lg_request_body(r, &len);
    lg_err err;
    lg_json_limits lim = {r->route ? r->route->max_body : 0, LG_JSON_MAX_DEPTH};
    json_t *v = lg_json_parse_object(body, len, &lim, &err);
    if (!v)
        lg_respond_error(r, 400, "invalid_json", NULL, "%s", err.msg);
    return v;
}

/* ---- answering --------------------------------------------------------------------- */

void lg_request_add_header(lg_request *r, const char *name, const char *value)
{
    if (!r->req || r->answered)
        return;
    h2o_iovec_t n = h2o_strdup(&r->req->pool, name, SIZE_MAX);
    for (size_t i = 0; i < n.len; i++)
        if (n.base[i] >= 'A' && n.base[i] <= 'Z')
            n.base[i] += 32;
    h2o_iovec_t v = h2o_strdup(&r->req->pool, value, SIZE_MAX);
    h2o_add_header_by_str(&r->req->pool, &r->req->res.headers, n.base, n.len, 1, NULL, v.base, v.len);
}

/* Status line and the headers every response carries. */
void lg__request_begin_response(lg_request *r, int status, const char *content_type)
{
    h2o_req_t *req = r->req;
    req->res.status = status;
    req->res.reason = lg_http_reason(status);
    if (content_type)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
                       strlen(content_type));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, r->id,
                          LG_REQUEST_ID_LEN);
    r->answered = true;
}

static h2o_generator_t whole_body_generator = {NULL, NULL};

int lg_respond(lg_request *r, int status, const char *content_type, const void *body, size_t len)
{
    if (!r->req || r->answered || lg_request_is_closed(r))
        return -1;
    h2o_req_t *req = r->req;
    lg__request_begin_response(r, status, content_type);
    h2o_iovec_t buf = h2o_iovec_init(NULL, 0);
    if (len) {
        buf.base = h2o_mem_alloc_pool(&req->pool, len);
        memcpy(buf.base, body, len);
        buf.len = len;
    }
    req->res.content_length = len;
    lg__request_finished(r);
    h2o_start_response(req, &whole_body_generator);
    /* HEAD: the headers GET would send (its Content-Length too), no body */
    bool head = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"));
    h2o_send(req, &buf, len && !head ? 1 : 0, H2O_SEND_STATE_FINAL);
    return 0;
}

bool lg_request_is_head(const lg_request *r)
{
    return r->req && h2o_memis(r->req->method.base, r->req->method.len, H2O_STRLIT("HEAD"));
}

int lg_respond_json(lg_request *r, int status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        return lg_respond_error_ex(r, 500, NULL, NULL, NULL, 0, "out of memory while encoding the response");
    int rc = lg_respond(r, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

#define OOM_ERROR "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"

int lg_respond_error_ex(lg_request *r, int status, const char *type, const char *code, const char *param,
                        int retry_after_s, const char *message)
{
    if (!r->req || r->answered || lg_request_is_closed(r))
        return -1;
    size_t len = 0;
    char *s = lg_openai_error_json(status, type, message, param, code, &len);
    if (retry_after_s > 0 && (status == 503 || status == 429)) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after_s);
        lg_request_add_header(r, "retry-after", v);
    }
    int rc = s ? lg_respond(r, status, "application/json", s, len)
               : lg_respond(r, 500, "application/json", OOM_ERROR, sizeof OOM_ERROR - 1);
    free(s);
    return rc;
}

int lg_respond_error(lg_request *r, int status, const char *code, const char *param, const char *fmt, ...)
{
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return lg_respond_error_ex(r, status, NULL, code, param, status == 503 ? 1 : 0, m);
}

int lg_respond_unauthorized(lg_request *r, const char *message)
{
    lg_request_add_header(r, "www-authenticate", "Bearer");
    return lg_respond_error_ex(r, 401, NULL, "invalid_api_key", NULL, 0,
                               message ? message
                                       : "You didn't provide an API key. You need to provide your API key in an "
                                         "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).");
}

int lg_respond_forbidden(lg_request *r, const char *message)
{
    return lg_respond_error_ex(r, 403, NULL, NULL, NULL, 0,
                               message ? message : "You have insufficient permissions for this operation.");
}

int lg_respond_model_not_found(lg_request *r, const char *model)
{
    return lg_respond_error(r, 404, "model_not_found", "model",
                            "The model `%.200s` does not exist or you do not have access to it.", model ? model : "");
}

int lg_respond_unavailable(lg_request *r, int retry_after_s, const char *message)
{
    return lg_respond_error_ex(r, 503, NULL, NULL, NULL, retry_after_s > 0 ? retry_after_s : 1,
                               message ? message : "The server is overloaded; please retry later.");
}

/* ---- messages ------------------------------------------------------------------------- */

static int send_msg(lg_loop *L, msg *m)
{
    pthread_mutex_lock(&L->post_lock);
    bool open = L->open;
    if (open)
        h2o_multithread_send_message(&L->post_rx, &m->super);
    pthread_mutex_unlock(&L->post_lock);
    return open ? 0 : -1;
}

int lg_request_post(lg_request *r, int kind, const void *data, size_t len)
{
    if (lg_request_is_closed(r) || len > LG_REQUEST_MAX_MSG)
        return -1;
    msg *m = malloc(sizeof *m + len);
    if (!m)
        return -1;
    memset(m, 0, sizeof *m);
    m->type = MSG_POST;
    m->r = r;
    m->kind = kind;
    m->len = len;
    if (len)
        memcpy(m->data, data, len);
    lg_request_retain(r);
    if (send_msg(r->loop, m) != 0) {
        lg_request_release(r);
        free(m);
        return -1;
    }
    return 0;
}

static void deliver(lg_loop *L, msg *m)
{
    lg_request *r = m->r;
    if (m->type == MSG_POST) {
        if (!lg_request_is_closed(r) && r->req && r->has_hooks && r->hooks.on_message)
            r->hooks.on_message(r, r->hooks_user, m->kind, m->data, m->len);
    } else {
        L->jobs_pending--;
        m->done(r, m->arg);
    }
    lg_request_release(r);
    free(m);
}

void lg__request_on_messages(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages)
{
    lg_loop *L = H2O_STRUCT_FROM_MEMBER(lg_loop, post_rx, rx);
    while (!h2o_linklist_is_empty(messages)) {
        msg *m = H2O_STRUCT_FROM_MEMBER(msg, super.link, messages->next);
        h2o_linklist_unlink(&m->super.link);
        deliver(L, m);
    }
}

/* Called on the loop thread after `open` became false: nothing new can be
 * queued, so the receiver's list can be read without the queue's lock. */
void lg__loop_drop_queued(lg_loop *L)
{
    lg__request_on_messages(&L->post_rx, &L->post_rx._messages);
}

void lg_request_set_hooks(lg_request *r, const lg_request_hooks *hooks, void *user)
{
    r->hooks = *hooks;
    r->hooks_user = user;
    r->has_hooks = true;
    if (!r->probed && r->req && r->req->version < 0x200 && !r->finished && !r->gone_called) {
        lg_loop *L = r->loop;
        h2o_linklist_insert(&L->probed, &r->probe_link);
        r->probed = true;
        if (!h2o_timeout_is_linked(&L->probe_entry))
            h2o_timeout_link(L->ctx.loop, &L->probe_timeout, &L->probe_entry);
    }
}

/* ---- HTTP/1 disconnect probe ------------------------------------------------------------ */

static void end_after_gone(lg_request *r)
{
    if (!r->req)
        return;
    if (r->stream_ops) {
        r->stream_ops->abort(r->stream_self);
    } else if (!r->answered) {
        /* nobody will read it: the point is to make h2o close and dispose */
        h2o_req_t *req = r->req;
        req->http1_is_persistent = 0;
        req->res.status = 499;
        req->res.reason = "Client Closed Request";
        req->res.content_length = 0;
        r->answered = true;
        h2o_start_response(req, &whole_body_generator);
        h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
    }
}

static void on_probe(h2o_timeout_entry_t *entry)
{
    lg_loop *L = H2O_STRUCT_FROM_MEMBER(lg_loop, probe_entry, entry);
    struct pollfd fds[256];
    lg_request *rs[256];
    int n = 0;
    for (h2o_linklist_t *l = L->probed.next; l != &L->probed && n < 256; l = l->next) {
        lg_request *r = H2O_STRUCT_FROM_MEMBER(lg_request, probe_link, l);
        h2o_socket_t *sock = r->req && r->req->conn->callbacks->get_socket ? r->req->conn->callbacks->get_socket(r->req->conn) : NULL;
        if (!sock)
            continue;
        fds[n].fd = h2o_socket_get_fd(sock);
        fds[n].events = POLLRDHUP;
        fds[n].revents = 0;
        rs[n++] = r;
    }
    if (n && poll(fds, n, 0) > 0) {
        for (int i = 0; i < n; i++) {
            if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
                lg_request *r = rs[i];
                lg_request_retain(r);
                lg__request_gone(r);
                end_after_gone(r);
                lg_request_release(r);
            }
        }
    }
    /* requests beyond the first 256 get their turn: rotate the list */
    if (n == 256 && L->probed.next != &L->probed) {
        h2o_linklist_t *first = L->probed.next;
        h2o_linklist_unlink(first);
        h2o_linklist_insert(&L->probed, first);
    }
    if (!h2o_linklist_is_empty(&L->probed))
        h2o_timeout_link(L->ctx.loop, &L->probe_timeout, &L->probe_entry);
}

void lg__probe_init(lg_loop *L)
{
    h2o_linklist_init_anchor(&L->requests);
    h2o_linklist_init_anchor(&L->probed);
    h2o_timeout_init(L->ctx.loop, &L->probe_timeout, PROBE_INTERVAL_MS);
    memset(&L->probe_entry, 0, sizeof L->probe_entry);
    L->probe_entry.cb = on_probe;
}

void lg__probe_dispose(lg_loop *L)
{
    if (h2o_timeout_is_linked(&L->probe_entry))
        h2o_timeout_unlink(&L->probe_entry);
    h2o_timeout_dispose(L->ctx.loop, &L->probe_timeout);
}

/* ---- blocking work ------------------------------------------------------------------------- */

typedef struct deferred {
    lg_request *r;
    void (*work)(void *arg);
    void (*done)(lg_request *r, void *arg);
    void *arg;
} deferred;

static void run_deferred(void *p)
{
    deferred *d = p;
    d->work(d->arg);
    msg *m = calloc(1, sizeof *m);
    lg_request *r = d->r;
    if (m) {
        m->type = MSG_DONE;
        m->r = r;
        m->done = d->done;
        m->arg = d->arg;
        if (send_msg(r->loop, m) == 0) {
            free(d);
            return; /* the message carries the reference */
        }
        free(m);
    }
    /* the loop is gone (server stopped) or no memory: done runs here */
    d->done(r, d->arg);
    lg_request_release(r);
    free(d);
}

int lg_request_defer(lg_request *r, void (*work)(void *arg), void (*done)(lg_request *r, void *arg), void *arg)
{
    deferred *d = malloc(sizeof *d);
    if (!d)
        return -1;
    *d = (deferred){r, work, done, arg};
    lg_request_retain(r);
    r->loop->jobs_pending++;
    if (lg_workers_submit(r->loop->workers, run_deferred, d) != 0) {
        r->loop->jobs_pending--;
        lg_request_release(r);
        free(d);
        return -1;
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

static void respond_verdict(lg_request *r, const lg_verdict *v)
{
    if (v->allow[0])
        lg_request_add_header(r, "allow", v->allow);
    if (v->www_authenticate)
        lg_request_add_header(r, "www-authenticate", "Bearer");
    lg_respond_error_ex(r, v->status, NULL, v->code, v->param, v->retry_after_s, v->message);
}

/* The head as the checks read it (head_check.h), from the whole request. */
static void head_of(h2o_req_t *req, lg_head *h)
{
    memset(h, 0, sizeof *h);
    h->method = req->method.base;
    h->method_len = req->method.len;
    h->path = req->path.base;
    h->path_len = req->path.len;
    h->authority = req->authority.base;
    h->authority_len = req->authority.len;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i >= 0) {
        h->authorization = req->headers.entries[i].value.base;
        h->authorization_len = req->headers.entries[i].value.len;
    }
    i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i >= 0) {
        h->content_type = req->headers.entries[i].value.base;
        h->content_type_len = req->headers.entries[i].value.len;
    }
    h->body_len = req->entity.base ? (int64_t)req->entity.len : 0;
    h->whole = true;
}

int lg__dispatch(lg_loop *L, const lg_router *rt, h2o_req_t *req)
{
    lg_request *r = calloc(1, sizeof *r);
    if (!r) {
        h2o_send_error_503(req, "Service Unavailable", "out of memory", 0);
        return 0;
    }
    atomic_init(&r->refs, 1);
    atomic_init(&r->closed, false);
    r->loop = L;
    r->req = req;
    lg_request_id_new(r->id);
    anchor *a = h2o_mem_alloc_shared(&req->pool, sizeof *a, anchor_dispose);
    a->r = r;
    L->inflight++;
    r->sock = req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    r->http1 = req->version < 0x200;
    h2o_linklist_insert(&L->requests, &r->loop_link);
    if (r->http1)
        lg__conn_h1_dispatched(L, req);

    size_t plen = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
    snprintf(r->log_method, sizeof r->log_method, "%.*s", (int)(req->method.len < 15 ? req->method.len : 15),
             req->method.base);
    snprintf(r->log_path, sizeof r->log_path, "%.*s", (int)(plen < 255 ? plen : 255), req->path.base);
    struct sockaddr_storage peer;
    socklen_t peer_len = req->conn->callbacks->get_peername ? req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&peer) : 0;
    if (peer_len == 0 || h2o_socket_getnumerichost((struct sockaddr *)&peer, peer_len, r->log_peer) == SIZE_MAX)
        strcpy(r->log_peer, "-");

    /* the head checks: the connection guard's verdict when it refused the
     * request from its head (its body was never read), else run here */
    const lg_verdict *withheld = lg__conn_withheld(L, req);
    lg_verdict own;
    const lg_verdict *v = withheld;
    if (!v) {
        lg_head h;
        head_of(req, &h);
        lg__head_check(rt, &h, &own);
        v = &own;
    }
    if (v->m.route)
        r->route = v->m.route;
    if (v->m.tenant_via != LG_TENANT_NONE && v->tenant_slug[0]) {
        r->tenant_via = v->m.tenant_via;
        r->tenant_slug = h2o_mem_alloc_pool(&req->pool, strlen(v->tenant_slug) + 1);
        strcpy(r->tenant_slug, v->tenant_slug);
        r->tenant = v->tenant;
    }
    if (withheld) {
        lg_request_log_set(r, "body_withheld", json_true());
        if (r->http1)
            lg__conn_linger(L, req);
    }
    if (v->status) {
        respond_verdict(r, v);
        return 0;
    }
    const lg_route *route = v->m.route;
    r->n_params = v->m.n_params;
    for (int i = 0; i < v->m.n_params; i++) {
        char *val = h2o_mem_alloc_pool(&req->pool, v->m.params[i].len + 1);
        lg_percent_decode(v->m.params[i].value, v->m.params[i].len, val, v->m.params[i].len + 1); /* checked */
        r->param_names[i] = v->m.params[i].name;
        r->param_values[i] = val;
    }
    /* who called (auth), for the route and the access log */
    if (route->auth) {
        const lg_auth_result *au = &v->auth;
        if (au->principal_len) {
            void *p = h2o_mem_alloc_pool(&req->pool, au->principal_len);
            memcpy(p, au->principal, au->principal_len);
            r->principal = p;
        } else {
            r->principal = au->principal_ptr;
        }
        for (int i = 0; i < 2; i++)
            if (au->log[i].key)
                lg_request_log_set(r, au->log[i].key, json_string(au->log[i].value));
    }
    /* the upload reservation the guard made for this body, or one now */
    if (route->admit_body) {
        r->hold = lg__conn_take_hold(L, req);
        r->hold_route = route;
        if (!r->hold && req->entity.len > 0) {
            lg_auth_result out = {0};
            if (route->admit_body(&v->auth, (int64_t)req->entity.len, route->admit_user, &r->hold, &out) != 0) {
                r->hold = NULL;
                int st = out.status ? out.status : 429;
                lg_respond_error_ex(r, st, NULL,
                                    st == 507 ? "insufficient_storage" : st == 429 ? "rate_limit_exceeded" : NULL, NULL,
                                    st == 507 ? 0 : 1, out.message ? out.message : "Too many uploads in flight.");
                return 0;
            }
        }
    }
    /* a compressed body: decoded, within the route's limit on its decoded size */
    size_t cel;
    const char *ce = lg_request_header(r, "content-encoding", &cel);
    if (ce && req->entity.base && req->entity.len > 0) {
        int st;
        char msg[256];
        size_t max = route->max_body < LG_MAX_DECODED_BODY ? route->max_body : LG_MAX_DECODED_BODY;
        if (lg_body_decode(ce, cel, req->entity.base, req->entity.len, max, &r->decoded, &r->decoded_len, &st, msg,
                           sizeof msg) != 0) {
            lg_respond_error(r, st, st == 413 ? "request_too_large" : st == 415 ? "unsupported_media_type"
                                    : st == 400 ? "invalid_encoding" : NULL, NULL, "%s", msg);
            return 0;
        }
    }
    if (route->fn(r, route->user) != 0 && !r->answered)
        lg_respond_error(r, 500, NULL, NULL, "Internal error while handling %s %s.", route->method, route->pattern);
    return 0;
}
