/*
 * test_router.c — route patterns, specificity, 404 vs 405 with Allow, and
 * the pure HTTP helpers (error objects, media types, percent-decoding,
 * request ids) and the JSON body limits.
 */
#include "tests/unit/test.h"

#include "gateway/http/http_util.h"
#include "gateway/http/json_body.h"
#include "gateway/http/router.h"

static int f_a(lg_request *r, void *u) { return 0; }

static lg_match_result M(lg_router *rt, const char *method, const char *path, lg_route_match *m)
{
    return lg_router_match(rt, method, strlen(method), path, strlen(path), m);
}

static const char *param(const lg_route_match *m, const char *name, char *buf)
{
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) {
            memcpy(buf, m->params[i].value, m->params[i].len);
            buf[m->params[i].len] = 0;
            return buf;
        }
    return NULL;
}

static void test_router(void)
{
    lg_router *rt = lg_router_create();
    lg_err err;
    lg_route rs[] = {
        {.method = "GET", .pattern = "/v1/models", .fn = f_a, .name = "models"},
        {.method = "GET", .pattern = "/v1/models/{id}", .fn = f_a, .name = "model"},
        {.method = "DELETE", .pattern = "/v1/models/{id}", .fn = f_a, .name = "model_del"},
        {.method = "GET", .pattern = "/v1/models/special", .fn = f_a, .name = "special"},
        {.method = "POST", .pattern = "/t/{tenant}/v1/chat/completions", .fn = f_a, .name = "tchat", .content_type = "application/json"},
        {.method = "POST", .pattern = "/admin/v1/tenants/{t}/keys", .fn = f_a, .name = "keys"},
        {.method = "GET", .pattern = "/files/{path*}", .fn = f_a, .name = "files", .max_body = 1 << 30},
        {.method = "GET", .pattern = "/", .fn = f_a, .name = "root"},
    };
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        CHECK_MSG(lg_router_add(rt, &rs[i], &err) == 0, "%s", err.msg);
    CHECK(lg_router_count(rt) == 8);
    CHECK(lg_router_max_body(rt) == 1u << 30);

    lg_route_match m;
    char b[256];
    CHECK(M(rt, "GET", "/v1/models", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "models"));
    CHECK(M(rt, "GET", "/v1/models?limit=3", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "models"));
    CHECK(M(rt, "GET", "/v1/models/abc", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "model"));
    CHECK(m.n_params == 1 && !strcmp(param(&m, "id", b), "abc"));
    CHECK(M(rt, "GET", "/v1/models/special", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "special"));
    CHECK(M(rt, "DELETE", "/v1/models/x%2Fy", &m) == LG_MATCH_FOUND && !strcmp(param(&m, "id", b), "x%2Fy"));
    CHECK(M(rt, "POST", "/t/acme/v1/chat/completions", &m) == LG_MATCH_FOUND && !strcmp(param(&m, "tenant", b), "acme"));
    CHECK(M(rt, "POST", "/admin/v1/tenants/t1/keys", &m) == LG_MATCH_FOUND && !strcmp(param(&m, "t", b), "t1"));
    CHECK(M(rt, "GET", "/files/a/b/c.txt", &m) == LG_MATCH_FOUND && !strcmp(param(&m, "path", b), "a/b/c.txt"));
    CHECK(M(rt, "GET", "/files", &m) == LG_MATCH_NOT_FOUND);
    CHECK(M(rt, "GET", "/", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "root"));
    /* 404s */
    CHECK(M(rt, "GET", "/v1/model", &m) == LG_MATCH_NOT_FOUND);
    CHECK(M(rt, "GET", "/v1/models/", &m) == LG_MATCH_NOT_FOUND);        /* empty segment */
    CHECK(M(rt, "GET", "/v1//models", &m) == LG_MATCH_NOT_FOUND);
    CHECK(M(rt, "GET", "/v1/../v1/models", &m) == LG_MATCH_NOT_FOUND);   /* no dot segments */
    CHECK(M(rt, "GET", "/v1/models/a/b", &m) == LG_MATCH_NOT_FOUND);
    CHECK(M(rt, "GET", "v1/models", &m) == LG_MATCH_NOT_FOUND);
    CHECK(M(rt, "GET", "", &m) == LG_MATCH_NOT_FOUND);
    /* 405 with Allow in a fixed order */
    CHECK(M(rt, "PUT", "/v1/models/abc", &m) == LG_MATCH_METHOD_NOT_ALLOWED && !strcmp(m.allow, "GET, HEAD, DELETE"));
    /* a GET route answers HEAD; a route of another method does not */
    CHECK(M(rt, "HEAD", "/v1/models/abc", &m) == LG_MATCH_FOUND && !strcmp(m.route->name, "model"));
    CHECK(M(rt, "HEAD", "/t/acme/v1/chat/completions", &m) == LG_MATCH_METHOD_NOT_ALLOWED);
    CHECK(M(rt, "GET", "/t/acme/v1/chat/completions", &m) == LG_MATCH_METHOD_NOT_ALLOWED && !strcmp(m.allow, "POST"));
    CHECK(M(rt, "get", "/v1/models", &m) == LG_MATCH_METHOD_NOT_ALLOWED);
    /* bad patterns and conflicts */
    lg_route bad[] = {
        {.method = "GET", .pattern = "v1", .fn = f_a},
        {.method = "GET", .pattern = "/v1//x", .fn = f_a},
        {.method = "GET", .pattern = "/v1/{}", .fn = f_a},
        {.method = "GET", .pattern = "/v1/{a*}/x", .fn = f_a},
        {.method = "GET", .pattern = "/v1/{a-b}", .fn = f_a},
        {.method = "GET", .pattern = "/v1/../x", .fn = f_a},
        {.method = "FETCH", .pattern = "/x", .fn = f_a},
        {.method = "GET", .pattern = "/v1/models/{other}", .fn = f_a}, /* same shape as {id} */
        {.method = "GET", .pattern = "/x", .fn = NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(lg_router_add(rt, &bad[i], &err) == -1, "pattern %s accepted", bad[i].pattern);
    lg_router_free(rt);
    lg_router_free(NULL);
}

static void test_http_util(void)
{
    size_t len;
    char *s = lg_openai_error_json(401, NULL, "Incorrect API key provided.", NULL, "invalid_api_key", &len);
    CHECK(s && !strcmp(s, "{\"error\":{\"message\":\"Incorrect API key provided.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}"));
    CHECK(s && len == strlen(s));
    free(s);
    s = lg_openai_error_json(500, NULL, "boom \"quoted\"\n", "messages", NULL, NULL);
    CHECK(s && strstr(s, "\"type\":\"server_error\"") && strstr(s, "\\\"quoted\\\"\\n") && strstr(s, "\"param\":\"messages\""));
    free(s);
    CHECK(!strcmp(lg_openai_error_type(429), "requests"));
    CHECK(!strcmp(lg_openai_error_type(413), "invalid_request_error"));
    CHECK(!strcmp(lg_openai_error_type(503), "server_error"));
    CHECK(!strcmp(lg_http_reason(415), "Unsupported Media Type"));

    char id1[LG_REQUEST_ID_LEN + 1], id2[LG_REQUEST_ID_LEN + 1];
    lg_request_id_new(id1);
    lg_request_id_new(id2);
    CHECK(strlen(id1) == 36 && !strncmp(id1, "req_", 4) && strcmp(id1, id2) != 0);
    for (int i = 0; i < 1000; i++)
        lg_request_id_new(id2); /* crosses buffer refills */
    CHECK(strspn(id2 + 4, "0123456789abcdef") == 32);

    const char *ct = "Application/JSON ; charset=utf-8";
    CHECK(lg_media_type_is(ct, strlen(ct), "application/json"));
    CHECK(!lg_media_type_is("application/jsonx", 17, "application/json"));
    CHECK(!lg_media_type_is("text/plain", 10, "application/json"));
    CHECK(lg_media_type_is("  application/json", 18, "application/json"));
    char out[80];
    const char *mp = "multipart/form-data; boundary=----abc123";
    CHECK(lg_media_type_param(mp, strlen(mp), "boundary", out, sizeof out) > 0 && !strcmp(out, "----abc123"));
    const char *q = "multipart/form-data; charset=x; BOUNDARY=\"a b\\\"c\"";
    CHECK(lg_media_type_param(q, strlen(q), "boundary", out, sizeof out) == 5 && !strcmp(out, "a b\"c"));
    CHECK(lg_media_type_param(q, strlen(q), "missing", out, sizeof out) == -1);
    CHECK(lg_media_type_param("a/b; boundary", 13, "boundary", out, sizeof out) == -1);
    CHECK(lg_media_type_param("a/b; boundary=\"abc", 18, "boundary", out, sizeof out) == -1);
    CHECK(lg_media_type_param(mp, strlen(mp), "boundary", out, 4) == -2);

    CHECK(lg_percent_decode("a%20b", 5, out, sizeof out) == 3 && !strcmp(out, "a b"));
    CHECK(lg_percent_decode("a%2Fb", 5, out, sizeof out) == -1);
    CHECK(lg_percent_decode("a%00", 4, out, sizeof out) == -1);
    CHECK(lg_percent_decode("a%2", 3, out, sizeof out) == -1);
    CHECK(lg_percent_decode("a%zz", 4, out, sizeof out) == -1);
    CHECK(lg_percent_decode("%41", 3, out, sizeof out) == 1 && !strcmp(out, "A"));
    CHECK(lg_percent_decode("abcdef", 6, out, 4) == -1);
}

static json_t *P(const char *s, lg_err *err) { return lg_json_parse_object(s, strlen(s), NULL, err); }

static void test_json(void)
{
    lg_err err;
    json_t *v = P("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"[[[{{{\"}]}", &err);
    CHECK_MSG(v && json_is_object(v), "%s", err.msg);
    json_decref(v);
    CHECK(!P("{\"a\":1,\"a\":2}", &err) && strstr(err.msg, "duplicate"));
    CHECK(!P("[1,2]", &err) && strstr(err.msg, "must be a JSON object, not an array"));
    CHECK(!P("\"x\"", &err) && strstr(err.msg, "invalid JSON"));
    CHECK(!P("{\"a\":1} x", &err) && strstr(err.msg, "invalid JSON"));
    CHECK(!P("{\"a\":", &err) && strstr(err.msg, "line 1"));
    CHECK(!lg_json_parse_object("", 0, NULL, &err) && strstr(err.msg, "empty"));
    CHECK(!lg_json_parse_object("{\"a\":\"\0\"}", 9, NULL, &err));
    CHECK(!P("{\"a\":\"\xff\"}", &err));
    CHECK(!P("{\"a\":99999999999999999999999}", &err));
    lg_json_limits lim = {8, 0};
    CHECK(!lg_json_parse_object("{\"a\":123456}", 12, &lim, &err) && strstr(err.msg, "more than the 8"));
    /* depth: 64 ok, 65 refused, brackets in strings ignored */
    char deep[400];
    int n = 0;
    n += sprintf(deep + n, "{\"a\":");
    for (int i = 0; i < 63; i++)
        deep[n++] = '[';
    for (int i = 0; i < 63; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = 0;
    v = P(deep, &err);
    CHECK_MSG(v != NULL, "%s", err.msg);
    json_decref(v);
    memmove(deep + 6, deep + 5, strlen(deep + 5) + 1);
    deep[5] = '[';
    char *close = strrchr(deep, '}');
    memmove(close + 1, close, strlen(close) + 1);
    *close = ']';
    CHECK(!P(deep, &err) && strstr(err.msg, "deeper than 64"));
    CHECK(lg_json_depth("\"[[[[\\\"[[[\"", 11, 2, NULL) == 0);
    CHECK(lg_json_depth("[[[", 3, 2, NULL) == 3);
    /* a million '[' is refused by the pre-scan, not by jansson's recursion */
    size_t big = 1000000;
    char *b = malloc(big);
    memset(b, '[', big);
    CHECK(!lg_json_parse_object(b, big, NULL, &err) && strstr(err.msg, "deeper"));
    free(b);
}

int main(void)
{
    test_router();
    test_http_util();
    test_json();
    TEST_DONE();
}
