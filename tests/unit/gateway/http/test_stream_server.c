/*
 * test_stream_server.c — a real lg_server on 127.0.0.1:0 (plain HTTP, loop
 * threads, worker pool) with test-only routes registered here, driven by a
 * raw-socket HTTP/1.1 client:
 *   - a producer thread posts events through lg_request_post; the loop
 *     streams them as SSE (chunked) and ends with [DONE];
 *   - the client disconnects mid-stream: on_client_gone runs, the producer
 *     sees post fail and stops, the request is freed (run under ASan:
 *     -DLG_SANITIZE=ON, no use-after-free);
 *   - per-route 413 / 415 / 400 (bad JSON) as OpenAI error objects;
 *   - lg_request_defer: blocking work on a worker, answer from the loop;
 *   - shutdown with a stream in flight: drained after the timeout, the
 *     stream sees on_client_gone, the drain hook runs.
 */
#include "tests/unit/test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gateway/http/request.h"
#include "gateway/http/route_health.h"
#include "gateway/http/server.h"
#include "gateway/http/sse.h"

static atomic_int n_gone, n_producers_stopped_early, n_producers_done, n_drain;

enum { MSG_EVENT = 1, MSG_END = 2 };

typedef struct stream_ctx {
    lg_request *r;
    lg_sse *sse;
    int n;
    int sleep_us;
} stream_ctx;

static void on_message(lg_request *r, void *user, int kind, const void *data, size_t len)
{
    stream_ctx *c = user;
    if (kind == MSG_EVENT)
        lg_sse_send(c->sse, data, len);
    else
        lg_sse_done(c->sse);
}

static void on_gone(lg_request *r, void *user) { atomic_fetch_add(&n_gone, 1); }

typedef struct producer_arg {
    lg_request *r;
    int n, sleep_us;
} producer_arg;

static void *producer(void *p)
{
    producer_arg *a = p;
    int i;
    for (i = 0; i < a->n; i++) {
        char ev[64];
        int len = snprintf(ev, sizeof ev, "{\"i\":%d}", i);
        if (lg_request_post(a->r, MSG_EVENT, ev, len) != 0)
            break;
        if (a->sleep_us)
            usleep(a->sleep_us);
    }
    if (i == a->n)
        lg_request_post(a->r, MSG_END, NULL, 0);
    else
        atomic_fetch_add(&n_producers_stopped_early, 1);
    atomic_fetch_add(&n_producers_done, 1);
    lg_request_release(a->r);
    free(a);
    return NULL;
}

static int route_stream(lg_request *r, void *user)
{
    h2o_req_t *req = lg_request_h2o(r);
    (void)req;
    const char *n_s = lg_request_param(r, "n");
    stream_ctx *c = lg_request_alloc(r, sizeof *c);
    c->r = r;
    c->n = atoi(n_s);
    c->sse = lg_sse_start(r);
    if (!c->sse)
        return -1;
    lg_request_hooks h = {on_message, on_gone};
    lg_request_set_hooks(r, &h, c);
    producer_arg *a = malloc(sizeof *a);
    a->r = r;
    a->n = c->n;
    a->sleep_us = c->n > 1000 ? 1000 : 0;
    lg_request_retain(r); /* the producer's reference */
    pthread_t t;
    pthread_create(&t, NULL, producer, a);
    pthread_detach(t);
    return 0;
}

static int route_json(lg_request *r, void *user)
{
    json_t *v = lg_request_json(r);
    if (!v)
        return 0;
    return lg_respond_json(r, 200, json_pack("{s:o}", "echo", v));
}

static void work_sleep(void *arg) { usleep(20000); *(int *)arg = 42; }
static void work_done(lg_request *r, void *arg)
{
    char body[32];
    snprintf(body, sizeof body, "deferred %d", *(int *)arg);
    lg_respond(r, 200, "text/plain", body, strlen(body));
    free(arg);
}
static int route_defer(lg_request *r, void *user)
{
    int *x = malloc(sizeof *x);
    *x = 0;
    return lg_request_defer(r, work_sleep, work_done, x);
}

static bool ready_yes(void *u, json_t *checks)
{
    json_object_set_new(checks, "test", json_pack("{s:b}", "ok", 1));
    return true;
}

static void on_drain(void *u) { atomic_fetch_add(&n_drain, 1); }

/* ---- a minimal HTTP/1.1 client ------------------------------------------------ */

static int port;

static int connect_srv(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads until `until` appears or the peer closes or timeout_ms passes. */
static size_t read_until(int fd, char *buf, size_t cap, const char *until, int timeout_ms)
{
    size_t n = 0;
    buf[0] = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left = timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        buf[n] = 0;
        if (until && strstr(buf, until))
            break;
    }
    return n;
}

static char *request(const char *req, size_t len, const char *until)
{
    static char buf[1 << 20];
    int fd = connect_srv();
    if (fd < 0)
        return NULL;
    if (write(fd, req, len) != (ssize_t)len) {
        close(fd);
        return NULL;
    }
    read_until(fd, buf, sizeof buf, until, 5000);
    close(fd);
    return buf;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static bool wait_for(atomic_int *v, int want, int ms)
{
    for (int i = 0; i < ms / 5; i++) {
        if (atomic_load(v) >= want)
            return true;
        usleep(5000);
    }
    return atomic_load(v) >= want;
}

int main(void)
{
    lg_err err;
    lg_router *rt = lg_router_create();
    lg_route routes[] = {
        {.method = "GET", .pattern = "/test/stream/{n}", .fn = route_stream},
        {.method = "POST", .pattern = "/test/json", .fn = route_json, .max_body = 1024, .content_type = "application/json", .body_required = true},
        {.method = "POST", .pattern = "/test/defer", .fn = route_defer},
    };
    for (size_t i = 0; i < 3; i++)
        CHECK(lg_router_add(rt, &routes[i], &err) == 0);
    CHECK(lg_routes_health(rt, ready_yes, NULL, &err) == 0);
    char tmpl[] = "/tmp/lg_stream_test.XXXXXX";
    CHECK(mkdtemp(tmpl) != NULL);
    lg_server_config cfg = {.listen = {"127.0.0.1:0"}, .n_listen = 1, .data_dir = tmpl, .n_threads = 2,
                            .insecure_http = true, .drain_timeout_s = 0.5, .on_drain = on_drain, .quiet = true};
    lg_server *srv;
    CHECK_MSG(lg_server_create(&cfg, rt, &srv, &err) == 0, "%s", err.msg);
    CHECK_MSG(lg_server_start(srv, &err) == 0, "%s", err.msg);
    port = lg_server_listener_port(srv, 0);
    CHECK(port > 0);

    /* health */
    const char *g = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 200") && strstr(resp, "\"status\":\"ready\"") && strstr(resp, "x-request-id: req_"));

    /* 1. a complete stream: 200 events, chunked, [DONE] last */
    g = "GET /test/stream/200 HTTP/1.1\r\nHost: x\r\n\r\n";
    resp = request(g, strlen(g), "\r\n0\r\n\r\n");
    CHECK(resp && strstr(resp, "HTTP/1.1 200") && strstr(resp, "content-type: text/event-stream"));
    CHECK(resp && strstr(resp, "transfer-encoding: chunked"));
    CHECK_MSG(resp && count(resp, "data: {\"i\":") == 200, "events: %d", resp ? count(resp, "data: {\"i\":") : -1);
    CHECK(resp && strstr(resp, "data: {\"i\":199}") && strstr(resp, "data: [DONE]\n\n"));
    CHECK(resp && strstr(resp, "data: {\"i\":0}\n\n"));
    CHECK(wait_for(&n_producers_done, 1, 2000));
    CHECK(atomic_load(&n_gone) == 0);

    /* 2. the client leaves mid-stream: on_client_gone, the producer stops */
    int fd = connect_srv();
    g = "GET /test/stream/100000 HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(write(fd, g, strlen(g)) == (ssize_t)strlen(g));
    static char buf[65536];
    read_until(fd, buf, sizeof buf, "data: {\"i\":3}", 3000);
    CHECK(strstr(buf, "data: {\"i\":3}") != NULL);
    close(fd);
    CHECK_MSG(wait_for(&n_gone, 1, 3000), "on_client_gone not called");
    CHECK(wait_for(&n_producers_stopped_early, 1, 3000));
    CHECK(wait_for(&n_producers_done, 2, 3000));

    /* 3. per-route body policy */
    char big[4096];
    int bl = snprintf(big, sizeof big, "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n");
    memset(big + bl, ' ', 2000);
    resp = request(big, bl + 2000, NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 413") && strstr(resp, "\"code\":\"request_too_large\"") && strstr(resp, "at most 1024 bytes"));
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 415") && strstr(resp, "expects application/json"));
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 415") && strstr(resp, "no Content-Type"));
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"a\":1,\"a\":2}";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 400") && strstr(resp, "duplicate key") && strstr(resp, "\"code\":\"invalid_json\""));
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":1}";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 200") && strstr(resp, "{\"echo\":{\"a\":1}}"));
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 400") && strstr(resp, "needs a request body"));
    /* the server-wide limit (1 GiB): refused by h2o before any body byte is read */
    g = "POST /test/json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2147483648\r\n\r\n";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 413"));

    /* 4. blocking work on the pool, answered from the loop */
    g = "POST /test/defer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    resp = request(g, strlen(g), NULL);
    CHECK(resp && strstr(resp, "HTTP/1.1 200") && strstr(resp, "deferred 42"));

    /* 5. shutdown with a stream in flight: cut after the drain timeout */
    fd = connect_srv();
    g = "GET /test/stream/100000 HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(write(fd, g, strlen(g)) == (ssize_t)strlen(g));
    read_until(fd, buf, sizeof buf, "data: {\"i\":2}", 3000);
    int gone_before = atomic_load(&n_gone);
    /* an idle keep-alive connection must not hold the drain */
    int idle = connect_srv();
    g = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(write(idle, g, strlen(g)) == (ssize_t)strlen(g));
    read_until(idle, buf, sizeof buf, "{\"status\":\"ok\"}", 3000);
    lg_server_shutdown(srv);
    CHECK(atomic_load(&n_gone) == gone_before + 1);
    CHECK(atomic_load(&n_drain) == 1);
    CHECK(lg_server_is_draining(srv));
    CHECK(wait_for(&n_producers_done, 3, 3000));
    /* the idle connection was closed by the server */
    CHECK(read_until(idle, buf, sizeof buf, NULL, 1000) == 0);
    close(idle);
    close(fd);
    lg_server_free(srv);
    lg_router_free(rt);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    CHECK(system(cmd) == 0);
    TEST_DONE();
}
