/*
 * conn.c — accepted connections, and the guard that reads ahead of h2o.
 *
 * Why a guard. libh2o 2.2.5 (Debian's) buffers a request's whole body
 * before it calls any handler, and has no hook between "headers parsed"
 * and "body read"; it also has no defence against HTTP/2 rapid reset
 * (CVE-2023-44487: HEADERS + RST_STREAM in a loop). So every connection's
 * read callback is wrapped: the guard sees each read's bytes (decrypted)
 * before h2o parses them, and
 *  - for each request head that announces a body, runs the gateway's head
 *    checks (head_check.h: route, size, content type, tenant, auth) and the
 *    route's upload admission at once. A refusal is answered right away and
 *    the body is never read: HTTP/1 gets the head with its Content-Length /
 *    Transfer-Encoding header renamed (same length, so nothing moves), so
 *    h2o dispatches a body-less request whose answer closes the connection
 *    (then a bounded lingering close drains what the client still sends, so
 *    that it reads the answer instead of a reset); an HTTP/2 stream is
 *    moved to "response" and dispatched at once, and its DATA frames are
 *    dropped here (the connection's flow-control window credited as h2o
 *    would), followed by RST_STREAM(NO_ERROR) once the answer is out
 *    (RFC 9113 8.1). An admitted request's body is read by h2o with the
 *    route's own limit: HTTP/1 through this loop's copy of h2o's
 *    configuration (max_request_entity_size set around each read), HTTP/2
 *    by counting DATA bytes here (413 past the limit).
 *  - counts RST_STREAM frames of live streams per HTTP/2 connection in a
 *    token bucket (LG_H2_RESET_BURST, refilled at LG_H2_RESET_RATE a
 *    second); when it runs dry the connection gets GOAWAY
 *    (ENHANCE_YOUR_CALM), its streams are reset and it closes. Requests
 *    already dispatched are cancelled through the usual client-gone path,
 *    and billed for what the engine did.
 *
 * What the guard relies on in h2o 2.2.5 (checked in its source; the guard
 * builds only against 2.2, see the #error below): h2o's read callback lives
 * in h2o_socket_t._cb.read and is re-armed by HTTP/1 after each keep-alive
 * response (so the guard re-wraps it from a zero timeout after the request
 * is disposed; a pipelined request would be parsed in between, so a
 * request followed by already-received bytes closes its connection, see
 * lg__conn_h1_dispatched); HTTP/1 heads are parsed by phr_parse_request,
 * which libh2o exports (its header is not installed: the prototype is
 * declared below), so both parse the same bytes the same way; HTTP/2
 * consumes whole frames from the start of sock->input and keeps no
 * pointer into it between calls, and its stream and connection structs
 * are in <h2o/http2_internal.h>. The TLS handshake is done here rather than
 * by h2o_accept, so that the guard is in place before h2o sees the first
 * request bytes (which may arrive with the handshake's last flight).
 *
 * Memory and time: a connection costs one lg_conn (a few hundred bytes;
 * HTTP/2 adds a small table of streams whose bodies are being read); a
 * read costs one scan of the new frames or of the head (already in
 * memory). Nothing here blocks.
 */
#include "gateway/http/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <h2o/http1.h>
#include <h2o/http2.h>
#include <h2o/http2_internal.h>

#include "gateway/http/server.h"

#if !(H2O_VERSION_MAJOR == 2 && H2O_VERSION_MINOR == 2)
#error "gateway/http/conn.c relies on h2o 2.2's connection internals (see its design note); check it against this h2o"
#endif

/* picohttpparser, bundled and exported by libh2o (no header installed) */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path,
                      size_t *path_len, int *minor_version, struct phr_header *headers, size_t *num_headers,
                      size_t last_len);

#define LG_H2_RESET_BURST 100.0 /* resets of live streams a connection may send at once (h2o's stream limit) */
#define LG_H2_RESET_RATE 10.0   /* ... and per second after that */
#define LINGER_MS 2000          /* a lingering close lasts at most this long */
#define LINGER_BYTES (4u << 20) /* ... and reads at most this much */
#define LINGER_MAX 256          /* per loop; beyond it, close at once */
#define H2_REFUSED_RING 16

typedef struct h2_track { /* an admitted HTTP/2 stream whose body is being read */
    uint32_t sid;
    uint64_t limit, bytes;
    const lg_route *route;
    void *hold;
} h2_track;

typedef struct lg_conn {
    h2o_linklist_t link; /* on L->conns */
    h2o_socket_t *sock;
    lg_loop *L;
    struct timeval connected_at;
    bool shut;      /* shutdown(2) was called */
    bool closed;    /* h2o closed the socket: touch nothing of it */
    bool is_h2;
    int busy;       /* > 0 while the guard is on the stack: the free waits */
    h2o_socket_cb inner;       /* h2o's read callback */
    h2o_socket_cb inner_write; /* h2o's write callback, while wrapped */
    h2o_timeout_entry_t timer; /* TLS handshake timeout, then the HTTP/1 re-wrap */
    int linger_fd;             /* >= 0: lingering close after h2o closes */
    /* HTTP/1 */
    enum { H1_HEAD, H1_BODY, H1_BUSY } h1;
    int h1_requests;     /* dispatched and not yet disposed (the drain keeps such a connection) */
    size_t h1_head_len;  /* the head h2o is parsing (pipelining check) */
    size_t h1_prev_len;  /* bytes of an incomplete head already scanned (phr's last_len) */
    size_t h1_limit;     /* H1_BODY: the route's max_body */
    const lg_route *h1_hold_route;
    void *h1_hold;
    /* HTTP/2 */
    bool preface_seen, killed;
    uint32_t hdr_sid;    /* a HEADERS block without END_HEADERS, to screen after its last CONTINUATION */
    double resets;       /* reset budget (token bucket) */
    double resets_at;    /* its last refill, seconds */
    h2_track *tracks;
    int n_tracks, cap_tracks;
    uint32_t refused[H2_REFUSED_RING]; /* streams answered from their head: their DATA is dropped */
    bool refused_rst[H2_REFUSED_RING]; /* RST_STREAM(NO_ERROR) sent */
    int n_refused;
} lg_conn;

typedef struct lingering {
    h2o_linklist_t link;
    h2o_socket_t *sock;
    h2o_timeout_entry_t timer;
    size_t bytes;
    lg_loop *L;
} lingering;

static atomic_ullong n_early, n_goaway, n_linger;

void lg_conn_stats_get(lg_conn_stats *out)
{
    out->early_refusals = atomic_load_explicit(&n_early, memory_order_relaxed);
    out->h2_reset_goaways = atomic_load_explicit(&n_goaway, memory_order_relaxed);
    out->lingering_closes = atomic_load_explicit(&n_linger, memory_order_relaxed);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_conn_close(void *p);
static void guard_on_read(h2o_socket_t *sock, const char *err);
static void guard_on_write(h2o_socket_t *sock, const char *err);

static lg_conn *conn_of_sock(h2o_socket_t *sock)
{
    return sock && sock->on_close.cb == on_conn_close ? sock->on_close.data : NULL;
}

/* ---- HTTP/2 streams, found by walking the connection's priority tree
 * (every open stream has a node in it; h2o's stream hash is not usable
 * here, see gateway/http/h2o_compat/khash.h) ---- */

static h2o_http2_stream_t *stream_of_ref(h2o_http2_scheduler_openref_t *ref)
{
    return H2O_STRUCT_FROM_MEMBER(h2o_http2_stream_t, _refs.scheduler, ref);
}

static h2o_http2_stream_t *find_in(h2o_http2_scheduler_node_t *node, uint32_t sid, int depth)
{
    if (depth > 256)
        return NULL;
    for (h2o_linklist_t *l = node->_all_refs.next; l != &node->_all_refs; l = l->next) {
        h2o_http2_scheduler_openref_t *ref = H2O_STRUCT_FROM_MEMBER(h2o_http2_scheduler_openref_t, _all_link, l);
        h2o_http2_stream_t *st = stream_of_ref(ref);
        if (st->stream_id == sid)
            return st;
        if ((st = find_in(&ref->node, sid, depth + 1)) != NULL)
            return st;
    }
    return NULL;
}

static h2o_http2_stream_t *find_stream(h2o_http2_conn_t *conn, uint32_t sid)
{
    return sid ? find_in(&conn->scheduler, sid, 0) : NULL;
}

static void collect_in(h2o_http2_scheduler_node_t *node, h2o_http2_stream_t ***v, size_t *n, size_t *cap, int depth)
{
    if (depth > 256)
        return;
    for (h2o_linklist_t *l = node->_all_refs.next; l != &node->_all_refs; l = l->next) {
        h2o_http2_scheduler_openref_t *ref = H2O_STRUCT_FROM_MEMBER(h2o_http2_scheduler_openref_t, _all_link, l);
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 32;
            h2o_http2_stream_t **nv = realloc(*v, c * sizeof *nv);
            if (!nv)
                return;
            *v = nv;
            *cap = c;
        }
        (*v)[(*n)++] = stream_of_ref(ref);
        collect_in(&ref->node, v, n, cap, depth + 1);
    }
}

static lg_conn *conn_of_req(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    return conn_of_sock(sock);
}

/* ---- lingering close ------------------------------------------------------------ */

static void linger_end(lingering *g)
{
    h2o_timeout_unlink(&g->timer);
    h2o_linklist_unlink(&g->link);
    g->L->n_lingering--;
    h2o_socket_close(g->sock);
    free(g);
}

static void linger_on_read(h2o_socket_t *sock, const char *err)
{
    lingering *g = sock->data;
    g->bytes += sock->input->size;
    h2o_buffer_consume(&sock->input, sock->input->size);
    if (err || g->bytes >= LINGER_BYTES)
        linger_end(g);
}

static void linger_on_timeout(h2o_timeout_entry_t *e) { linger_end(H2O_STRUCT_FROM_MEMBER(lingering, timer, e)); }

/* fd: a dup of a connection h2o has just closed (its TLS close_notify, if
 * any, already written): send FIN, then read and drop until the client
 * closes too, LINGER_BYTES or LINGER_MS. */
static void linger_start(lg_loop *L, int fd)
{
    shutdown(fd, SHUT_WR);
    lingering *g = L->n_lingering < LINGER_MAX ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        close(fd);
        return;
    }
    g->L = L;
    g->sock = h2o_evloop_socket_create(L->ctx.loop, fd, 0);
    g->sock->data = g;
    g->timer.cb = linger_on_timeout;
    h2o_linklist_insert(&L->lingering, &g->link);
    L->n_lingering++;
    h2o_timeout_link(L->ctx.loop, &L->linger_timeout, &g->timer);
    h2o_socket_read_start(g->sock, linger_on_read);
    atomic_fetch_add_explicit(&n_linger, 1, memory_order_relaxed);
}

void lg__conns_loop_init(lg_loop *L)
{
    h2o_linklist_init_anchor(&L->conns);
    h2o_linklist_init_anchor(&L->lingering);
    h2o_timeout_init(L->ctx.loop, &L->linger_timeout, LINGER_MS);
}

void lg__conns_loop_dispose(lg_loop *L)
{
    while (!h2o_linklist_is_empty(&L->lingering))
        linger_end(H2O_STRUCT_FROM_MEMBER(lingering, link, L->lingering.next));
    h2o_timeout_dispose(L->ctx.loop, &L->linger_timeout);
}

/* ---- connection life ------------------------------------------------------------ */

static void release_holds(lg_conn *c)
{
    if (c->h1_hold && c->h1_hold_route->release_body)
        c->h1_hold_route->release_body(c->h1_hold);
    c->h1_hold = NULL;
    for (int i = 0; i < c->n_tracks; i++)
        if (c->tracks[i].hold && c->tracks[i].route->release_body)
            c->tracks[i].route->release_body(c->tracks[i].hold);
    c->n_tracks = 0;
}

static void conn_free(lg_conn *c)
{
    free(c->tracks);
    free(c);
}

/* h2o calls it from the socket's disposal (the fd is already closed). */
static void on_conn_close(void *p)
{
    lg_conn *c = p;
    lg_loop *L = c->L;
    h2o_linklist_unlink(&c->link);
    L->n_conns--;
    atomic_fetch_sub(L->srv_conns, 1);
    h2o_timeout_unlink(&c->timer);
    release_holds(c);
    if (c->linger_fd >= 0) {
        linger_start(L, c->linger_fd);
        c->linger_fd = -1;
    }
    c->closed = true;
    c->sock = NULL;
    if (!c->busy)
        conn_free(c);
}

static void shut_conn(lg_conn *c)
{
    if (!c->shut && !c->closed) {
        c->shut = true;
        shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR); /* h2o sees EOF/EPIPE and closes it its own way */
    }
}

void lg__conns_shut_all(lg_loop *L)
{
    for (h2o_linklist_t *l = L->conns.next; l != &L->conns; l = l->next)
        shut_conn(H2O_STRUCT_FROM_MEMBER(lg_conn, link, l));
}

/* Connections with nothing buffered and no request in flight are between
 * requests (or never sent one: a TLS handshake in progress counts as idle):
 * close them. HTTP/2 ones are left to h2o's GOAWAY handling. */
void lg__conns_close_idle_http1(lg_loop *L)
{
    for (h2o_linklist_t *l = L->conns.next; l != &L->conns; l = l->next) {
        lg_conn *c = H2O_STRUCT_FROM_MEMBER(lg_conn, link, l);
        if (c->shut || c->is_h2 || c->closed)
            continue;
        if ((c->sock->input == NULL || c->sock->input->size == 0) && c->h1_requests == 0)
            shut_conn(c);
    }
}

static void on_handshake_timeout(h2o_timeout_entry_t *e)
{
    lg_conn *c = H2O_STRUCT_FROM_MEMBER(lg_conn, timer, e);
    h2o_socket_close(c->sock); /* as h2o_accept's own timeout does */
}

/* h2o owns the protocol from here; the guard takes over its read callback.
 * Bytes that arrived with the handshake are held back until it has. */
static void start_protocol(lg_conn *c, bool h2)
{
    lg_loop *L = c->L;
    h2o_socket_t *sock = c->sock;
    h2o_buffer_t *early = NULL;
    if (sock->input->size) {
        early = sock->input;
        h2o_buffer_init(&sock->input, &h2o_socket_buffer_prototype);
    }
    c->is_h2 = h2;
    c->resets = LG_H2_RESET_BURST;
    c->resets_at = mono_s();
    c->busy++;
    if (h2)
        h2o_http2_accept(&L->accept_ctx, sock, c->connected_at);
    else
        h2o_http1_accept(&L->accept_ctx, sock, c->connected_at);
    if (!c->closed && sock->_cb.read && sock->_cb.read != guard_on_read) {
        c->inner = sock->_cb.read;
        sock->_cb.read = guard_on_read;
    }
    c->busy--;
    if (early) {
        if (c->closed) {
            h2o_buffer_dispose(&early);
        } else {
            h2o_buffer_dispose(&sock->input);
            sock->input = early;
            if (sock->_cb.read == guard_on_read)
                guard_on_read(sock, NULL); /* frees c if h2o closed it */
            return;
        }
    }
    if (c->closed && !c->busy)
        conn_free(c);
}

static void on_handshake(h2o_socket_t *sock, const char *err)
{
    lg_conn *c = sock->data;
    sock->data = NULL;
    h2o_timeout_unlink(&c->timer);
    if (err) {
        h2o_socket_close(sock);
        return;
    }
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    bool h2 = false;
    for (const h2o_iovec_t *id = h2o_http2_alpn_protocols; id->len; id++)
        if (proto.len == id->len && memcmp(proto.base, id->base, proto.len) == 0)
            h2 = true;
    start_protocol(c, h2);
}

void lg__conn_accept(lg_loop *L, h2o_socket_t *sock)
{
    lg_conn *c = calloc(1, sizeof *c);
    if (!c) {
        h2o_socket_close(sock);
        return;
    }
    c->sock = sock;
    c->L = L;
    c->linger_fd = -1;
    c->connected_at = *h2o_get_timestamp(&L->ctx, NULL, NULL);
    h2o_linklist_insert(&L->conns, &c->link);
    L->n_conns++;
    atomic_fetch_add(L->srv_conns, 1);
    sock->on_close.cb = on_conn_close;
    sock->on_close.data = c;
    if (L->accept_ctx.ssl_ctx) {
        c->timer.cb = on_handshake_timeout;
        h2o_timeout_link(L->ctx.loop, &L->ctx.handshake_timeout, &c->timer);
        sock->data = c;
        h2o_socket_ssl_handshake(sock, L->accept_ctx.ssl_ctx, NULL, on_handshake);
    } else {
        start_protocol(c, false);
    }
}

/* ---- the head checks, as the guard runs them -------------------------------------- */

/* Runs the head checks and, for an admitted body, the route's upload
 * admission; on admission *hold gets the reservation. Returns v->status. */
static int screen(lg_loop *L, const lg_head *h, lg_verdict *v, void **hold)
{
    *hold = NULL;
    if (lg__head_check(L->router, h, v) != 0) {
        atomic_fetch_add_explicit(&n_early, 1, memory_order_relaxed);
        return v->status;
    }
    const lg_route *rt = v->m.route;
    if (rt->admit_body) {
        lg_auth_result out = {0};
        if (rt->admit_body(&v->auth, h->body_len, rt->admit_user, hold, &out) != 0) {
            *hold = NULL;
            v->retry_after_s = out.status == 429 || out.status == 503 ? 1 : 0;
            int st = out.status ? out.status : 429;
            lg__verdict_refuse(v, st, st == 507 ? "insufficient_storage" : st == 429 ? "rate_limit_exceeded" : NULL, "%s",
                               out.message ? out.message : "Too many uploads in flight; please retry.");
        }
    }
    if (v->status)
        atomic_fetch_add_explicit(&n_early, 1, memory_order_relaxed);
    return v->status;
}

/* ---- HTTP/1 ------------------------------------------------------------------------ */

static bool name_is(const struct phr_header *hd, const char *n)
{
    size_t l = strlen(n);
    return hd->name_len == l && strncasecmp(hd->name, n, l) == 0;
}

/* Renames the header in place (same length): h2o then sees a harmless
 * "x-wwww..." field instead of the body's framing. */
static void hide_header(const struct phr_header *hd)
{
    char *p = (char *)hd->name;
    p[0] = 'x';
    p[1] = '-';
    memset(p + 2, 'w', hd->name_len - 2);
}

static void call_inner(lg_conn *c, const char *err)
{
    c->inner(c->sock, err);
    if (c->closed)
        return;
    /* h2o started a write (an answer, or "100 Continue" after which it
     * re-arms reading): wrap its callback, to take reading back after it */
    if (c->sock->_cb.write && c->sock->_cb.write != guard_on_write) {
        c->inner_write = c->sock->_cb.write;
        c->sock->_cb.write = guard_on_write;
    }
}

static void guard_on_write(h2o_socket_t *sock, const char *err)
{
    lg_conn *c = conn_of_sock(sock);
    h2o_socket_cb w = c->inner_write;
    c->inner_write = NULL;
    c->busy++;
    w(sock, err);
    if (!c->closed && sock->_cb.read == c->inner)
        sock->_cb.read = guard_on_read;
    c->busy--;
    if (c->closed && !c->busy)
        conn_free(c);
}

static void h1_read(lg_conn *c, const char *err)
{
    lg_loop *L = c->L;
    h2o_socket_t *sock = c->sock;
    if (err || c->h1 == H1_BUSY) {
        call_inner(c, err);
        return;
    }
    if (c->h1 == H1_BODY) {
        L->gconf.max_request_entity_size = c->h1_limit;
        call_inner(c, NULL);
        L->gconf.max_request_entity_size = L->max_body;
        return;
    }
    /* H1_HEAD: the same parser h2o is about to run */
    const char *method, *path;
    size_t method_len, path_len, nh = H2O_MAX_HEADERS;
    int minor;
    struct phr_header hd[H2O_MAX_HEADERS];
    size_t len = sock->input->size < H2O_MAX_REQLEN ? sock->input->size : H2O_MAX_REQLEN;
    int reqlen = phr_parse_request(sock->input->bytes, len, &method, &method_len, &path, &path_len, &minor, hd, &nh,
                                   c->h1_prev_len);
    if (reqlen <= 0) { /* incomplete or malformed: h2o waits or answers 400 */
        c->h1_prev_len = reqlen == -2 ? len : 0;
        call_inner(c, NULL);
        return;
    }
    c->h1_prev_len = 0;
    lg_head h = {.method = method, .method_len = method_len, .path = path, .path_len = path_len};
    const struct phr_header *cl = NULL, *te = NULL;
    for (size_t i = 0; i < nh; i++) {
        if (!hd[i].name) /* a continuation line */
            continue;
        if (name_is(&hd[i], "content-length")) {
            if (!cl)
                cl = &hd[i];
        } else if (name_is(&hd[i], "transfer-encoding")) {
            te = &hd[i];
        } else if (name_is(&hd[i], "host") && !h.authority) {
            h.authority = hd[i].value, h.authority_len = hd[i].value_len;
        } else if (name_is(&hd[i], "authorization") && !h.authorization) {
            h.authorization = hd[i].value, h.authorization_len = hd[i].value_len;
        } else if (name_is(&hd[i], "content-type") && !h.content_type) {
            h.content_type = hd[i].value, h.content_type_len = hd[i].value_len;
        }
    }
    /* h2o: Transfer-Encoding wins over Content-Length; anything it cannot
     * frame it answers with 400 itself, so such heads pass through */
    int64_t declared = 0;
    bool body = false;
    if (te) {
        body = te->value_len == 7 && strncasecmp(te->value, "chunked", 7) == 0;
        declared = -1;
    } else if (cl) {
        size_t v = h2o_strtosize(cl->value, cl->value_len);
        body = v != SIZE_MAX && v > 0;
        declared = body ? (int64_t)v : 0;
    }
    c->h1_head_len = (size_t)reqlen;
    if (!body) {
        c->h1 = H1_BUSY;
        call_inner(c, NULL);
        return;
    }
    h.body_len = declared;
    lg_verdict v;
    void *hold;
    if (screen(L, &h, &v, &hold) != 0) {
        if (cl)
            hide_header(cl);
        if (te)
            hide_header(te);
        c->h1 = H1_BUSY;
        L->withheld_sock = sock;
        L->withheld = &v;
        call_inner(c, NULL); /* h2o dispatches the body-less request: the dispatcher answers v */
        L->withheld_sock = NULL;
        L->withheld = NULL;
        return;
    }
    c->h1 = H1_BODY;
    c->h1_limit = v.m.route->max_body;
    c->h1_hold = hold;
    c->h1_hold_route = hold ? v.m.route : NULL;
    L->gconf.max_request_entity_size = c->h1_limit;
    call_inner(c, NULL);
    L->gconf.max_request_entity_size = L->max_body;
}

void lg__conn_h1_dispatched(lg_loop *L, h2o_req_t *req)
{
    (void)L;
    lg_conn *c = conn_of_req(req);
    if (!c || c->is_h2)
        return;
    c->h1 = H1_BUSY;
    c->h1_requests++;
    h2o_buffer_t *in = c->sock->input;
    const char *end = req->entity.base ? req->entity.base + req->entity.len : in->bytes + c->h1_head_len;
    if (in->bytes + in->size > end)
        req->http1_is_persistent = 0;
}

static void on_rewrap(h2o_timeout_entry_t *e)
{
    lg_conn *c = H2O_STRUCT_FROM_MEMBER(lg_conn, timer, e);
    if (!c->closed && c->sock->_cb.read == c->inner) {
        c->sock->_cb.read = guard_on_read;
        c->h1 = H1_HEAD;
    }
}

void lg__conn_h1_request_done(lg_loop *L, h2o_socket_t *sock)
{
    lg_conn *c = conn_of_sock(sock);
    if (!c || c->is_h2 || c->closed)
        return;
    if (c->h1_requests > 0)
        c->h1_requests--;
    if (c->h1_hold && c->h1_hold_route->release_body)
        c->h1_hold_route->release_body(c->h1_hold);
    c->h1_hold = NULL;
    c->h1 = H1_HEAD;
    c->h1_prev_len = 0;
    c->timer.cb = on_rewrap;
    if (!h2o_timeout_is_linked(&c->timer))
        h2o_timeout_link(L->ctx.loop, &L->ctx.zero_timeout, &c->timer);
}

/* ---- HTTP/2 ------------------------------------------------------------------------ */

static bool refused_has(lg_conn *c, uint32_t sid, int *idx)
{
    int n = c->n_refused < H2_REFUSED_RING ? c->n_refused : H2_REFUSED_RING;
    for (int i = 0; i < n; i++)
        if (c->refused[i] == sid) {
            if (idx)
                *idx = i;
            return true;
        }
    return false;
}

static void refused_add(lg_conn *c, uint32_t sid)
{
    int i = c->n_refused++ % H2_REFUSED_RING;
    c->refused[i] = sid;
    c->refused_rst[i] = false;
}

static h2_track *track_find(lg_conn *c, uint32_t sid)
{
    for (int i = 0; i < c->n_tracks; i++)
        if (c->tracks[i].sid == sid)
            return &c->tracks[i];
    return NULL;
}

static void track_drop(lg_conn *c, h2_track *t, bool release)
{
    if (release && t->hold && t->route->release_body)
        t->route->release_body(t->hold);
    *t = c->tracks[--c->n_tracks];
}

/* Tracks whose stream h2o closed on its own (a protocol error on it). A
 * stream whose body is complete but waits for its turn keeps its track
 * until the dispatcher takes the hold. */
static void tracks_prune(lg_conn *c, h2o_http2_conn_t *conn)
{
    for (int i = 0; i < c->n_tracks;) {
        if (!find_stream(conn, c->tracks[i].sid))
            track_drop(c, &c->tracks[i], true);
        else
            i++;
    }
}

/* The connection's receive window, credited for DATA the guard dropped
 * (the same rule as h2o's: top it up once it falls below half). */
static void credit_window(h2o_http2_conn_t *conn, size_t n)
{
    h2o_http2_window_consume_window(&conn->_input_window, n);
    ssize_t w = h2o_http2_window_get_window(&conn->_input_window);
    if (w * 2 < (ssize_t)H2O_HTTP2_SETTINGS_HOST.initial_window_size) {
        int32_t delta = (int32_t)(H2O_HTTP2_SETTINGS_HOST.initial_window_size - w);
        h2o_http2_encode_window_update_frame(&conn->_write.buf, 0, delta);
        h2o_http2_window_update(&conn->_input_window, delta);
        h2o_http2_conn_request_write(conn);
    }
}

/* A stream in RECV_BODY answered now: as h2o does for a head with invalid
 * characters, the stream skips to "response", then h2o dispatches it and
 * the dispatcher answers the guard's verdict. */
static void refuse_stream(lg_conn *c, h2o_http2_conn_t *conn, h2o_http2_stream_t *st, lg_verdict *v)
{
    lg_loop *L = c->L;
    refused_add(c, st->stream_id);
    h2o_http2_stream_set_state(conn, st, H2O_HTTP2_STREAM_STATE_REQ_PENDING);
    h2o_http2_stream_set_state(conn, st, H2O_HTTP2_STREAM_STATE_SEND_HEADERS);
    if (conn->pull_stream_ids.max_processed < st->stream_id)
        conn->pull_stream_ids.max_processed = st->stream_id;
    L->withheld_req = &st->req;
    L->withheld = v;
    h2o_process_request(&st->req);
    L->withheld_req = NULL;
    L->withheld = NULL;
}

static void h2_screen(lg_conn *c, h2o_http2_conn_t *conn, uint32_t sid)
{
    h2o_http2_stream_t *st = find_stream(conn, sid);
    if (!st || st->state != H2O_HTTP2_STREAM_STATE_RECV_BODY)
        return;
    h2o_req_t *req = &st->req;
    lg_head h = {.method = req->input.method.base,
                 .method_len = req->input.method.len,
                 .path = req->input.path.base,
                 .path_len = req->input.path.len,
                 .authority = req->input.authority.base,
                 .authority_len = req->input.authority.len,
                 .body_len = st->_expected_content_length == SIZE_MAX ? -1 : (int64_t)st->_expected_content_length};
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i >= 0)
        h.authorization = req->headers.entries[i].value.base, h.authorization_len = req->headers.entries[i].value.len;
    i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i >= 0)
        h.content_type = req->headers.entries[i].value.base, h.content_type_len = req->headers.entries[i].value.len;
    lg_verdict v;
    void *hold;
    if (screen(c->L, &h, &v, &hold) != 0) {
        refuse_stream(c, conn, st, &v);
        return;
    }
    tracks_prune(c, conn);
    if (c->n_tracks == c->cap_tracks) {
        int cap = c->cap_tracks ? 2 * c->cap_tracks : 8;
        h2_track *t = realloc(c->tracks, (size_t)cap * sizeof *t);
        if (!t) {
            if (hold && v.m.route->release_body)
                v.m.route->release_body(hold);
            lg__verdict_refuse(&v, 503, NULL, "The server is out of memory; please retry.");
            v.retry_after_s = 1;
            refuse_stream(c, conn, st, &v);
            return;
        }
        c->tracks = t;
        c->cap_tracks = cap;
    }
    c->tracks[c->n_tracks++] = (h2_track){.sid = sid, .limit = v.m.route->max_body, .route = v.m.route, .hold = hold};
}

/* Too many resets: GOAWAY(ENHANCE_YOUR_CALM), every stream reset (their
 * requests see the client gone), and h2o closes the connection once the
 * frame is written (a half-closed connection without streams closes on
 * its next write), followed by a lingering close. */
static void h2_kill(lg_conn *c, h2o_http2_conn_t *conn)
{
    c->killed = true;
    atomic_fetch_add_explicit(&n_goaway, 1, memory_order_relaxed);
    /* a lingering close after it, so that the client reads the GOAWAY
     * rather than a reset caused by the frames it is still sending */
    if (c->linger_fd < 0)
        c->linger_fd = fcntl(h2o_socket_get_fd(c->sock), F_DUPFD_CLOEXEC, 0);
    h2o_buffer_consume(&c->sock->input, c->sock->input->size);
    if (conn->state != H2O_HTTP2_CONN_STATE_OPEN)
        return;
    static const char why[] = "too many stream resets";
    h2o_http2_encode_goaway_frame(&conn->_write.buf, conn->pull_stream_ids.max_open, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM,
                                  h2o_iovec_init(why, sizeof why - 1));
    h2o_http2_stream_t **v = NULL;
    size_t n = 0, cap = 0;
    collect_in(&conn->scheduler, &v, &n, &cap, 0);
    for (size_t i = 0; i < n; i++)
        h2o_http2_stream_reset(conn, v[i]);
    free(v);
    conn->state = H2O_HTTP2_CONN_STATE_HALF_CLOSED;
    h2o_http2_conn_request_write(conn);
}

/* Feeds h2o the first n bytes of the input (whole frames), keeping the
 * rest for later. h2o consumes whole frames from the front and frees a
 * buffer it consumed entirely, so one byte of the next frame stays in view:
 * h2o stops there (an incomplete frame) and the rest stays in place. */
static void h2_feed(lg_conn *c, size_t n)
{
    h2o_buffer_t *in = c->sock->input;
    if (n >= in->size) {
        c->inner(c->sock, NULL);
        return;
    }
    size_t hidden = in->size - n - 1;
    in->size = n + 1;
    c->inner(c->sock, NULL);
    if (!c->closed)
        c->sock->input->size += hidden;
}

static void h2_read(lg_conn *c, const char *err)
{
    h2o_socket_t *sock = c->sock;
    if (err) {
        c->inner(sock, err);
        return;
    }
    if (c->killed) {
        h2o_buffer_consume(&sock->input, sock->input->size);
        return;
    }
    h2o_http2_conn_t *conn = sock->data;
    const size_t max_frame = H2O_HTTP2_SETTINGS_HOST.max_frame_size;
    for (;;) {
        h2o_buffer_t *in = sock->input;
        const uint8_t *b = (const uint8_t *)in->bytes;
        size_t size = in->size, pos = 0;
        if (!c->preface_seen) {
            if (size < 24) /* h2o waits for the rest, or refuses a bad preface */
                break;
            c->preface_seen = true;
            pos = 24;
        }
        enum { NONE, SCREEN, REFUSE, KILL } act = NONE;
        size_t cut = 0;
        uint32_t act_sid = 0;
        while (act == NONE && size - pos >= 9) {
            size_t len = (size_t)b[pos] << 16 | (size_t)b[pos + 1] << 8 | b[pos + 2];
            uint8_t type = b[pos + 3], flags = b[pos + 4];
            uint32_t sid = ((uint32_t)b[pos + 5] << 24 | (uint32_t)b[pos + 6] << 16 | (uint32_t)b[pos + 7] << 8 | b[pos + 8]) &
                           0x7fffffffu;
            if (len > max_frame || size - pos - 9 < len)
                break; /* too large (h2o answers it) or incomplete */
            size_t end = pos + 9 + len;
            switch (type) {
            case H2O_HTTP2_FRAME_TYPE_HEADERS: {
                h2o_http2_stream_t *st = find_stream(conn, sid);
                bool trailers = st && st->state == H2O_HTTP2_STREAM_STATE_RECV_BODY;
                if (!(flags & 0x1) && !trailers) { /* no END_STREAM: a body follows */
                    if (flags & 0x4)
                        act = SCREEN, cut = end, act_sid = sid;
                    else
                        c->hdr_sid = sid;
                }
                break;
            }
            case H2O_HTTP2_FRAME_TYPE_CONTINUATION:
                if (c->hdr_sid && sid == c->hdr_sid && (flags & 0x4)) {
                    act = SCREEN, cut = end, act_sid = sid;
                    c->hdr_sid = 0;
                }
                break;
            case H2O_HTTP2_FRAME_TYPE_DATA: {
                int ri;
                if (sid && refused_has(c, sid, &ri)) {
                    /* drop it; once h2o closed the stream (answer sent), ask the client to stop */
                    credit_window(conn, len);
                    if (!find_stream(conn, sid) && !c->refused_rst[ri] && !(flags & 0x1)) {
                        h2o_http2__encode_rst_stream_frame(&conn->_write.buf, sid, 0);
                        h2o_http2_conn_request_write(conn);
                        c->refused_rst[ri] = true;
                    }
                    memmove(in->bytes + pos, in->bytes + end, size - end);
                    in->size -= end - pos;
                    size = in->size;
                    continue; /* same pos: the next frame moved here */
                }
                h2_track *t = sid ? track_find(c, sid) : NULL;
                if (t) {
                    size_t pad = (flags & 0x8) && len ? (size_t)b[pos + 9] + 1 : 0;
                    t->bytes += len > pad ? len - pad : 0;
                    if (t->bytes > t->limit) /* else on END_STREAM h2o dispatches it and the dispatcher takes the hold */
                        act = REFUSE, cut = pos, act_sid = sid;
                }
                break;
            }
            case H2O_HTTP2_FRAME_TYPE_RST_STREAM: {
                h2_track *t = track_find(c, sid);
                if (t)
                    track_drop(c, t, true);
                /* a live stream, or one whose HEADERS are earlier in this
                 * same read (h2o has not seen them yet) */
                if (sid && (sid > conn->pull_stream_ids.max_open || find_stream(conn, sid))) {
                    double now = mono_s();
                    c->resets += (now - c->resets_at) * LG_H2_RESET_RATE;
                    if (c->resets > LG_H2_RESET_BURST)
                        c->resets = LG_H2_RESET_BURST;
                    c->resets_at = now;
                    if ((c->resets -= 1.0) < 0)
                        act = KILL, cut = pos;
                }
                break;
            }
            default:
                break;
            }
            if (act == NONE)
                pos = end;
        }
        if (act == NONE) {
            c->inner(sock, NULL);
            return;
        }
        if (cut > 0) {
            h2_feed(c, cut);
            if (c->closed || sock->_cb.read != guard_on_read)
                return;
            if (conn->state != H2O_HTTP2_CONN_STATE_OPEN) { /* draining: h2o opens no new stream */
                if (sock->input->size)
                    c->inner(sock, NULL);
                return;
            }
        }
        if (act == KILL) {
            h2_kill(c, conn);
            return;
        }
        if (act == SCREEN) {
            h2_screen(c, conn, act_sid);
        } else { /* REFUSE: the body passed the route's limit */
            h2_track *t = track_find(c, act_sid);
            h2o_http2_stream_t *st = find_stream(conn, act_sid);
            const lg_route *rt = t ? t->route : NULL;
            if (t)
                track_drop(c, t, true);
            if (st && st->state == H2O_HTTP2_STREAM_STATE_RECV_BODY && rt) {
                lg_verdict v;
                memset(&v, 0, sizeof v);
                v.m.route = rt;
                lg__verdict_refuse(&v, 413, "request_too_large", "The request body is larger than %s %s accepts (%zu bytes).",
                                   rt->method, rt->pattern, rt->max_body);
                atomic_fetch_add_explicit(&n_early, 1, memory_order_relaxed);
                refuse_stream(c, conn, st, &v);
            } else {
                refused_add(c, act_sid);
            }
        }
        if (c->closed || sock->_cb.read != guard_on_read)
            return;
        if (sock->input->size == 0)
            return;
    }
    c->inner(sock, NULL);
}

/* ---- the read callback ------------------------------------------------------------- */

static void guard_on_read(h2o_socket_t *sock, const char *err)
{
    lg_conn *c = conn_of_sock(sock);
    c->busy++;
    if (c->is_h2)
        h2_read(c, err);
    else
        h1_read(c, err);
    c->busy--;
    if (c->closed && !c->busy)
        conn_free(c);
}

/* ---- for the dispatcher ------------------------------------------------------------ */

const lg_verdict *lg__conn_withheld(lg_loop *L, h2o_req_t *req)
{
    if (!L->withheld)
        return NULL;
    if (L->withheld_req == req)
        return L->withheld;
    if (L->withheld_sock && req->version < 0x200 && conn_of_req(req) == conn_of_sock(L->withheld_sock))
        return L->withheld;
    return NULL;
}

void lg__conn_linger(lg_loop *L, h2o_req_t *req)
{
    (void)L;
    lg_conn *c = conn_of_req(req);
    req->http1_is_persistent = 0;
    if (!c || c->is_h2 || c->linger_fd >= 0)
        return;
    c->linger_fd = fcntl(h2o_socket_get_fd(c->sock), F_DUPFD_CLOEXEC, 0);
}

void *lg__conn_take_hold(lg_loop *L, h2o_req_t *req)
{
    (void)L;
    lg_conn *c = conn_of_req(req);
    if (!c)
        return NULL;
    void *hold = NULL;
    if (!c->is_h2) {
        hold = c->h1_hold;
        c->h1_hold = NULL;
    } else {
        h2o_http2_stream_t *st = H2O_STRUCT_FROM_MEMBER(h2o_http2_stream_t, req, req);
        h2_track *t = track_find(c, st->stream_id);
        if (t) {
            hold = t->hold;
            track_drop(c, t, false);
        }
    }
    return hold;
}
