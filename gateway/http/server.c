/*
 * server.c — see server.h. One lg_loop per thread (loop.h), each with its
 * own copy of the h2o configuration. Accepted sockets go to conn.c (the
 * connection list the drain walks, the TLS handshake, and the guard that
 * screens request heads before h2o reads their bodies), requests to
 * request.c's dispatcher. Calls point one way: server.c -> request.c ->
 * conn.c, and server.c -> conn.c; what request.c needs of the server (the
 * worker pool, the access log) it reads from its loop (loop.h).
 */
#include "gateway/http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/http/conn.h"
#include "gateway/http/loop.h"
#include "gateway/http/request.h"
#include "gateway/http/tls.h"
#include "gateway/http/workers.h"

#define DRAIN_TICK_MS 50
#define FORCE_GRACE_S 3.0

typedef struct root_handler {
    h2o_handler_t super;
    lg_server *srv;
} root_handler;

typedef struct listener {
    int fd;
    struct sockaddr_storage addr;
    int addr_len;
    int port;
    char url[96];
} listener;

struct lg_server {
    lg_server_config cfg;
    const lg_router *router;
    h2o_globalconf_t globalconf;
    bool globalconf_inited;
    SSL_CTX *ssl_ctx;
    char *cert_path, *key_path;
    char *tmp_template;
    listener listeners[LG_SERVER_MAX_LISTEN];
    int n_listeners;
    lg_loop *loops;
    int n_loops;
    lg_workers *workers;
    atomic_int n_conns;
    atomic_bool draining;
    bool started, shut_down;
    pthread_mutex_t start_mu;
    pthread_cond_t start_cv;
    int n_ready, n_failed;
};

static void notice(const lg_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(const lg_server *s, const char *fmt, ...)
{
    if (s->cfg.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("loragate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool lg_server_is_draining(const lg_server *s) { return atomic_load(&s->draining); }
int lg_server_listener_count(const lg_server *s) { return s->n_listeners; }
int lg_server_listener_port(const lg_server *s, int i) { return s->listeners[i].port; }
const char *lg_server_listener_url(const lg_server *s, int i) { return s->listeners[i].url; }
bool lg_server_is_tls(const lg_server *s) { return s->ssl_ctx != NULL; }
const char *lg_server_cert_path(const lg_server *s) { return s->cert_path; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- addresses ---------------------------------------------------------------- */

int lg_parse_listen(const char *spec, struct sockaddr_storage *ss, int *len, lg_err *err)
{
    memset(ss, 0, sizeof *ss);
    char host[128];
    const char *port_s;
    if (spec[0] == '[') {
        const char *rb = strchr(spec, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - spec - 1) >= sizeof host)
            return lg_fail(err, "listen address '%s': expected [IPv6]:PORT", spec);
        memcpy(host, spec + 1, rb - spec - 1);
        host[rb - spec - 1] = 0;
        port_s = rb + 2;
    } else {
        const char *c = strrchr(spec, ':');
        if (!c || (size_t)(c - spec) >= sizeof host || c == spec)
            return lg_fail(err, "listen address '%s': expected HOST:PORT (IPv6 as [::1]:PORT)", spec);
        memcpy(host, spec, c - spec);
        host[c - spec] = 0;
        if (strchr(host, ':'))
            return lg_fail(err, "listen address '%s': IPv6 addresses go in brackets, as [::1]:8443", spec);
        port_s = c + 1;
    }
    char *end;
    errno = 0;
    long port = strtol(port_s, &end, 10);
    if (!*port_s || *end || errno || port < 0 || port > 65535)
        return lg_fail(err, "listen address '%s': port must be 0..65535", spec);
    if (!strcmp(host, "localhost"))
        strcpy(host, "127.0.0.1");
    else if (!strcmp(host, "*"))
        strcpy(host, "0.0.0.0");
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
    } else {
        return lg_fail(err, "listen address '%s': '%s' is not an IP address (or localhost)", spec, host);
    }
    return 0;
}

bool lg_addr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        if (IN6_IS_ADDR_V4MAPPED(a))
            return a->s6_addr[12] == 127;
    }
    return false;
}

static int bind_listener(listener *l, bool tls, lg_err *err, const char *spec)
{
    int fd = socket(l->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return lg_fail(err, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&l->addr, l->addr_len) != 0) {
        int e = errno;
        close(fd);
        return lg_fail(err, "cannot listen on %s: %s", spec, strerror(e));
    }
    if (listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return lg_fail(err, "listen on %s: %s", spec, strerror(e));
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    char host[INET6_ADDRSTRLEN];
    if (got.ss_family == AF_INET) {
        l->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
        inet_ntop(AF_INET, &((struct sockaddr_in *)&got)->sin_addr, host, sizeof host);
        snprintf(l->url, sizeof l->url, "%s://%s:%d", tls ? "https" : "http", host, l->port);
    } else {
        l->port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&got)->sin6_addr, host, sizeof host);
        snprintf(l->url, sizeof l->url, "%s://[%s]:%d", tls ? "https" : "http", host, l->port);
    }
    l->fd = fd;
    return 0;
}

/* ---- create ------------------------------------------------------------------------- */

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    root_handler *h = (root_handler *)self;
    return lg__dispatch(lg_loop_of_ctx(req->conn->ctx), h->srv->router, req);
}

static int mkdir_p(const char *dir, mode_t mode, lg_err *err)
{
    if (mkdir(dir, mode) != 0 && errno != EEXIST)
        return lg_fail(err, "cannot create directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return lg_fail(err, "%s is not a directory", dir);
    return 0;
}

int lg_server_create(const lg_server_config *cfg, const lg_router *rt, lg_server **out, lg_err *err)
{
    *out = NULL;
    if (cfg->n_listen < 1 || cfg->n_listen > LG_SERVER_MAX_LISTEN)
        return lg_fail(err, "give 1 to %d listen addresses (got %d)", LG_SERVER_MAX_LISTEN, cfg->n_listen);
    if (!cfg->data_dir || !*cfg->data_dir)
        return lg_fail(err, "a data directory is required");
    if (!cfg->tls_cert != !cfg->tls_key)
        return lg_fail(err, "--tls-cert and --tls-key go together");
    if (cfg->insecure_http && cfg->tls_cert)
        return lg_fail(err, "--insecure-http and --tls-cert exclude each other");
    if (cfg->n_threads < 0 || cfg->n_threads > 256)
        return lg_fail(err, "threads: %d (expected 1..256)", cfg->n_threads);
    lg_server *s = calloc(1, sizeof *s);
    if (!s)
        return lg_fail(err, "out of memory");
    s->cfg = *cfg;
    s->router = rt;
    if (!s->cfg.n_threads)
        s->cfg.n_threads = 2;
    if (!s->cfg.n_workers)
        s->cfg.n_workers = 4;
    if (!s->cfg.max_body)
        s->cfg.max_body = (size_t)1 << 30;
    if (s->cfg.drain_timeout_s <= 0)
        s->cfg.drain_timeout_s = 30;
    if (!s->cfg.request_timeout_s)
        s->cfg.request_timeout_s = 120;
    if (!s->cfg.max_connections)
        s->cfg.max_connections = 10000;
    pthread_mutex_init(&s->start_mu, NULL);
    pthread_cond_init(&s->start_cv, NULL);
    for (int i = 0; i < LG_SERVER_MAX_LISTEN; i++)
        s->listeners[i].fd = -1;

    if (lg_router_max_body(rt) > s->cfg.max_body) {
        lg_fail(err, "a route accepts bodies of %zu bytes, above the server's limit of %zu", lg_router_max_body(rt),
                s->cfg.max_body);
        goto fail;
    }
    /* addresses */
    for (int i = 0; i < cfg->n_listen; i++) {
        listener *l = &s->listeners[i];
        if (lg_parse_listen(cfg->listen[i], &l->addr, &l->addr_len, err) != 0)
            goto fail;
        if (cfg->insecure_http && !lg_addr_is_loopback(&l->addr)) {
            lg_fail(err, "--insecure-http is refused on %s: plain HTTP is only allowed when every listen address is loopback (127.0.0.0/8, ::1)",
                    cfg->listen[i]);
            goto fail;
        }
    }
    /* data dir */
    if (mkdir_p(cfg->data_dir, 0700, err) != 0)
        goto fail;
    char tmpdir[4096];
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", cfg->data_dir);
    if (mkdir_p(tmpdir, 0700, err) != 0)
        goto fail;
    /* TLS */
    if (!cfg->insecure_http) {
        const char *c = cfg->tls_cert, *k = cfg->tls_key;
        if (!c) {
            bool created;
            if (lg_tls_self_signed(cfg->data_dir, &s->cert_path, &s->key_path, &created, err) != 0)
                goto fail;
            notice(s, "%s self-signed TLS certificate %s (key %s; clients must trust it or skip verification; give --tls-cert/--tls-key for a real one)",
                   created ? "generated a" : "using the", s->cert_path, s->key_path);
        } else {
            s->cert_path = strdup(c);
            s->key_path = strdup(k);
        }
        if (!(s->ssl_ctx = lg_tls_server_ctx(s->cert_path, s->key_path, err)))
            goto fail;
    }
    /* large bodies spill to DATA_DIR/tmp (see server.h) */
    if (asprintf(&s->tmp_template, "%s/h2o.b.XXXXXX", tmpdir) < 0) {
        lg_fail(err, "out of memory");
        goto fail;
    }
    if (strlen(s->tmp_template) >= sizeof h2o_socket_buffer_mmap_settings.fn_template) {
        lg_fail(err, "data dir path too long for h2o's temporary files");
        goto fail;
    }
    strcpy(h2o_socket_buffer_mmap_settings.fn_template, s->tmp_template); /* process-wide, set before threads start */
    /* h2o configuration: one host, one root handler */
    h2o_config_init(&s->globalconf);
    s->globalconf_inited = true;
    s->globalconf.server_name = h2o_iovec_init(H2O_STRLIT("loragate"));
    s->globalconf.max_request_entity_size = s->cfg.max_body;
    /* no h2c: an HTTP/1 "Upgrade: h2c" or prior-knowledge preface would hand
     * the connection to HTTP/2 inside h2o, past the connection guard */
    s->globalconf.http1.upgrade_to_http2 = 0;
    s->globalconf.http1.req_timeout = (uint64_t)s->cfg.request_timeout_s * 1000;
    s->globalconf.http2.graceful_shutdown_timeout = (uint64_t)(s->cfg.drain_timeout_s * 1000);
    h2o_hostconf_t *host = h2o_config_register_host(&s->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    root_handler *h = (root_handler *)h2o_create_handler(path, sizeof *h);
    h->super.on_req = on_req;
    h->srv = s;
    /* bind last, so nothing above leaves a socket behind */
    for (int i = 0; i < cfg->n_listen; i++) {
        if (bind_listener(&s->listeners[i], s->ssl_ctx != NULL, err, cfg->listen[i]) != 0)
            goto fail;
        s->n_listeners++;
    }
    *out = s;
    return 0;
fail:
    lg_server_free(s);
    return -1;
}

/* ---- connections --------------------------------------------------------------------- */

static void on_accept(h2o_socket_t *listener_sock, const char *err)
{
    lg_loop *L = listener_sock->data;
    if (err)
        return;
    for (int i = 0; i < 16; i++) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener_sock);
        if (!sock)
            return;
        if (atomic_load(&L->srv->n_conns) >= L->srv->cfg.max_connections) {
            h2o_socket_close(sock);
            continue;
        }
        lg__conn_accept(L, sock);
    }
}

/* ---- loop threads ------------------------------------------------------------------------ */

static void on_ctl(h2o_multithread_receiver_t *rx, h2o_linklist_t *messages)
{
    lg_loop *L = H2O_STRUCT_FROM_MEMBER(lg_loop, ctl_rx, rx);
    while (!h2o_linklist_is_empty(messages)) {
        h2o_multithread_message_t *m = H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
        h2o_linklist_unlink(&m->link);
        free(m);
    }
    L->stop = true;
}

static void loop_ready(lg_server *s, bool ok)
{
    pthread_mutex_lock(&s->start_mu);
    if (ok)
        s->n_ready++;
    else
        s->n_failed++;
    pthread_cond_broadcast(&s->start_cv);
    pthread_mutex_unlock(&s->start_mu);
}

static void *loop_main(void *p)
{
    lg_loop *L = p;
    lg_server *s = L->srv;
    h2o_evloop_t *evloop = h2o_evloop_create();
    L->gconf = s->globalconf;
    L->max_body = s->cfg.max_body;
    L->router = s->router;
    L->srv_conns = &s->n_conns;
    L->workers = s->workers;
    L->access_log = s->cfg.access_log;
    L->tls = s->ssl_ctx != NULL;
    h2o_context_init(&L->ctx, evloop, &L->gconf);
    pthread_mutex_init(&L->post_lock, NULL);
    L->open = true;
    h2o_multithread_register_receiver(L->ctx.queue, &L->post_rx, lg__request_on_messages);
    h2o_multithread_register_receiver(L->ctx.queue, &L->ctl_rx, on_ctl);
    lg__conns_loop_init(L);
    lg__probe_init(L);
    L->accept_ctx.ctx = &L->ctx;
    L->accept_ctx.hosts = s->globalconf.hosts;
    L->accept_ctx.ssl_ctx = s->ssl_ctx;
    L->n_listeners = s->n_listeners;
    L->listeners = calloc(s->n_listeners, sizeof *L->listeners);
    bool ok = L->listeners != NULL;
    for (int i = 0; ok && i < s->n_listeners; i++) {
        int fd = dup(s->listeners[i].fd);
        if (fd < 0) {
            ok = false;
            break;
        }
        L->listeners[i] = h2o_evloop_socket_create(evloop, fd, H2O_SOCKET_FLAG_DONT_READ);
        L->listeners[i]->data = L;
        h2o_socket_read_start(L->listeners[i], on_accept);
    }
    loop_ready(s, ok);

    while (ok && !L->stop)
        h2o_evloop_run(evloop, INT32_MAX);

    /* drain: stop accepting, ask connections to finish */
    for (int i = 0; i < L->n_listeners; i++) {
        if (L->listeners[i]) {
            h2o_socket_read_stop(L->listeners[i]);
            h2o_socket_close(L->listeners[i]);
        }
    }
    h2o_context_request_shutdown(&L->ctx);
    double deadline = now_s() + s->cfg.drain_timeout_s, hard = 0;
    while (!h2o_linklist_is_empty(&L->conns) || L->jobs_pending > 0) {
        double t = now_s();
        if (!hard && t >= deadline) {
            if (!h2o_linklist_is_empty(&L->conns))
                notice(s, "drain timeout: closing %d connection(s) with requests in flight", L->n_conns);
            lg__conns_shut_all(L);
            hard = t + FORCE_GRACE_S;
        } else if (hard && t >= hard) {
            notice(s, "loop %d: %d connection(s), %d job(s) still open after the drain; leaving them", L->index,
                   L->n_conns, L->jobs_pending);
            break;
        }
        lg__conns_close_idle_http1(L);
        h2o_evloop_run(evloop, DRAIN_TICK_MS);
    }

    /* nothing new can be posted from here on; deliver (drop) what is queued */
    pthread_mutex_lock(&L->post_lock);
    L->open = false;
    pthread_mutex_unlock(&L->post_lock);
    lg__conns_loop_dispose(L); /* lingering closes end now */
    h2o_evloop_run(evloop, 0);
    lg__loop_drop_queued(L);
    lg__probe_dispose(L);
    h2o_multithread_unregister_receiver(L->ctx.queue, &L->post_rx);
    on_ctl(&L->ctl_rx, &L->ctl_rx._messages);
    h2o_multithread_unregister_receiver(L->ctx.queue, &L->ctl_rx);
    if (h2o_linklist_is_empty(&L->conns)) {
        /* h2o_context_request_shutdown arms the HTTP/2 GOAWAY timer even without connections */
        if (h2o_timeout_is_linked(&L->ctx.http2._graceful_shutdown_timeout))
            h2o_timeout_unlink(&L->ctx.http2._graceful_shutdown_timeout);
        h2o_multithread_queue_t *queue = L->ctx.queue;
        h2o_context_dispose(&L->ctx);
        h2o_evloop_destroy(evloop);
        free(queue); /* h2o 2.2.5's h2o_multithread_destroy_queue closes the queue but never frees it */
    } /* else: connections still reference the context; it is leaked on purpose */
    free(L->listeners);
    L->listeners = NULL;
    return NULL;
}

int lg_server_start(lg_server *s, lg_err *err)
{
    if (s->started)
        return lg_fail(err, "server already started");
    if (lg_workers_create(s->cfg.n_workers, &s->workers, err) != 0)
        return -1;
    s->loops = calloc(s->cfg.n_threads, sizeof *s->loops);
    if (!s->loops)
        return lg_fail(err, "out of memory");
    sigset_t all, old;
    sigfillset(&all);
    /* synchronous faults stay deliverable: blocked, the kernel kills the process without a report */
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGABRT);
    sigdelset(&all, SIGTRAP);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* threads inherit: no async signals, SIGPIPE stays pending */
    bool spawn_failed = false;
    for (int i = 0; i < s->cfg.n_threads; i++) {
        lg_loop *L = &s->loops[i];
        L->srv = s;
        L->index = i;
        if (pthread_create(&L->tid, NULL, loop_main, L) != 0) {
            spawn_failed = true;
            break;
        }
        s->n_loops++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    s->started = true;
    /* wait until every started loop has registered its receivers */
    pthread_mutex_lock(&s->start_mu);
    while (s->n_ready + s->n_failed < s->n_loops)
        pthread_cond_wait(&s->start_cv, &s->start_mu);
    int failed = s->n_failed;
    pthread_mutex_unlock(&s->start_mu);
    if (failed || spawn_failed) {
        lg_server_shutdown(s);
        return lg_fail(err, "could not start %d loop thread(s)", failed + (spawn_failed ? 1 : 0));
    }
    return 0;
}

void lg_server_shutdown(lg_server *s)
{
    if (!s || !s->started || s->shut_down)
        return;
    s->shut_down = true;
    atomic_store(&s->draining, true);
    for (int i = 0; i < s->n_loops; i++) {
        h2o_multithread_message_t *m = calloc(1, sizeof *m);
        h2o_multithread_send_message(&s->loops[i].ctl_rx, m);
    }
    /* the loops close their dups at once: with ours gone too, new connections are refused */
    for (int i = 0; i < s->n_listeners; i++) {
        close(s->listeners[i].fd);
        s->listeners[i].fd = -1;
    }
    for (int i = 0; i < s->n_loops; i++)
        pthread_join(s->loops[i].tid, NULL);
    lg_workers_stop(s->workers);
    if (s->cfg.on_drain)
        s->cfg.on_drain(s->cfg.drain_user);
}

void lg_server_free(lg_server *s)
{
    if (!s)
        return;
    lg_server_shutdown(s);
    lg_workers_free(s->workers);
    for (int i = 0; i < LG_SERVER_MAX_LISTEN; i++)
        if (s->listeners[i].fd >= 0)
            close(s->listeners[i].fd);
    for (int i = 0; i < s->n_loops; i++)
        pthread_mutex_destroy(&s->loops[i].post_lock);
    free(s->loops);
    if (s->globalconf_inited)
        h2o_config_dispose(&s->globalconf);
    free(s->tmp_template);
    SSL_CTX_free(s->ssl_ctx);
    free(s->cert_path);
    free(s->key_path);
    pthread_mutex_destroy(&s->start_mu);
    pthread_cond_destroy(&s->start_cv);
    free(s);
}
