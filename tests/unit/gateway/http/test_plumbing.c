/*
 * test_plumbing.c — the pure parts of the request plumbing: bearer tokens,
 * tenant routing (path prefix and Host), the operator key (generated file
 * mode, env, refusals, constant-time match), serve options (command line,
 * config file, precedence, refusals), the access log writer.
 */
#include "tests/unit/test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/http/access_log.h"
#include "gateway/http/admin_key.h"
#include "gateway/http/http_util.h"
#include "gateway/http/router.h"
#include "gateway/http/serve_config.h"

static int f(lg_request *r, void *u) { return 0; }

static void test_bearer(void)
{
    const char *t;
    size_t n;
    CHECK(lg_parse_bearer("Bearer abc", 10, &t, &n) == 0 && n == 3 && !memcmp(t, "abc", 3));
    CHECK(lg_parse_bearer("  bearer   lg-x.y_z~+/==  ", 26, &t, &n) == 0 && n == 13);
    CHECK(lg_parse_bearer("Basic abc", 9, &t, &n) == -1);
    CHECK(lg_parse_bearer("Bearer", 6, &t, &n) == -1);
    CHECK(lg_parse_bearer("Bearer ", 7, &t, &n) == -1);
    CHECK(lg_parse_bearer("Bearer a b", 10, &t, &n) == -1);
    CHECK(lg_parse_bearer("Bearer a\"b", 10, &t, &n) == -1);
    CHECK(lg_parse_bearer("Bearerabc", 9, &t, &n) == -1);
}

static lg_match_result R(lg_router *rt, const char *method, const char *path, const char *host, lg_route_match *m)
{
    return lg_router_route(rt, method, strlen(method), path, strlen(path), host, host ? strlen(host) : 0, m);
}

static void test_tenancy(void)
{
    lg_router *rt = lg_router_create();
    lg_err err;
    lg_route rs[] = {
        {.method = "GET", .pattern = "/v1/models", .fn = f, .tenant_scoped = true},
        {.method = "GET", .pattern = "/v1/models/{id*}", .fn = f, .tenant_scoped = true},
        {.method = "GET", .pattern = "/admin/v1/tenants", .fn = f},
        {.method = "GET", .pattern = "/healthz", .fn = f},
    };
    CHECK(lg_router_add_all(rt, rs, 4, &err) == 0);
    lg_route_match m;
    CHECK(R(rt, "GET", "/v1/models", NULL, &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    CHECK(R(rt, "GET", "/t/acme/v1/models?x=1", NULL, &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_PATH &&
          m.tenant_len == 4 && !memcmp(m.tenant, "acme", 4));
    CHECK(R(rt, "GET", "/t/acme/v1/models/org/m", NULL, &m) == LG_MATCH_FOUND && m.n_params == 1 &&
          m.params[0].len == 5);
    CHECK(R(rt, "GET", "/t/acme/admin/v1/tenants", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "GET", "/t/acme/healthz", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "GET", "/t/ACME/v1/models", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "GET", "/t/-a/v1/models", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "GET", "/t//v1/models", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "GET", "/t/acme", NULL, &m) == LG_MATCH_NOT_FOUND);
    CHECK(R(rt, "POST", "/t/acme/v1/models", NULL, &m) == LG_MATCH_METHOD_NOT_ALLOWED);
    /* no suffix configured: Host is ignored */
    CHECK(R(rt, "GET", "/v1/models", "acme.api.test", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    lg_tenancy bad = {"api.test", NULL, NULL};
    CHECK(lg_router_set_tenancy(rt, &bad, &err) == -1);
    lg_tenancy ten = {".API.test", NULL, NULL};
    CHECK(lg_router_set_tenancy(rt, &ten, &err) == 0);
    CHECK(!strcmp(lg_router_tenancy(rt)->host_suffix, ".api.test"));
    CHECK(R(rt, "GET", "/v1/models", "Acme.api.TEST:8443", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_HOST &&
          m.tenant_len == 4);
    CHECK(R(rt, "GET", "/v1/models", "acme.api.test.", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_HOST);
    CHECK(R(rt, "GET", "/v1/models", "api.test", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    CHECK(R(rt, "GET", "/v1/models", "a.b.api.test", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    CHECK(R(rt, "GET", "/v1/models", "[::1]:8443", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    CHECK(R(rt, "GET", "/healthz", "acme.api.test", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_NONE);
    CHECK(R(rt, "GET", "/t/acme/v1/models", "acme.api.test", &m) == LG_MATCH_FOUND && m.tenant_via == LG_TENANT_PATH);
    CHECK(R(rt, "GET", "/t/acme/v1/models", "globex.api.test", &m) == LG_MATCH_TENANT_CONFLICT);
    CHECK(lg_tenant_slug_valid("a", 1) && lg_tenant_slug_valid("a-1", 3) && !lg_tenant_slug_valid("a_b", 3) &&
          !lg_tenant_slug_valid("", 0) && !lg_tenant_slug_valid("a-", 2));
    lg_router_free(rt);
}

static void test_admin_key(void)
{
    char dir[] = "/tmp/lg_admin_key_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    lg_admin_key k, k2;
    lg_err err;
    CHECK(lg_admin_key_load_from(dir, NULL, &k, &err) == 0 && k.source == LG_ADMIN_KEY_GENERATED);
    struct stat st;
    CHECK(stat(k.path, &st) == 0 && (st.st_mode & 0777) == 0600);
    char key[128] = {0};
    FILE *fp = fopen(k.path, "r");
    CHECK(fp && fgets(key, sizeof key, fp));
    if (fp)
        fclose(fp);
    key[strcspn(key, "\n")] = 0;
    CHECK(strlen(key) == 52 && !strncmp(key, "lg-admin-", 9));
    CHECK(lg_admin_key_matches(&k, key, strlen(key)));
    CHECK(!lg_admin_key_matches(&k, key, strlen(key) - 1));
    CHECK(!strncmp(k.hint, key, 13) && strlen(k.hint) < 20);
    /* second start: the same key from the file */
    CHECK(lg_admin_key_load_from(dir, NULL, &k2, &err) == 0 && k2.source == LG_ADMIN_KEY_FROM_FILE);
    CHECK(!memcmp(k.sha256, k2.sha256, 32));
    chmod(k.path, 0640);
    CHECK(lg_admin_key_load_from(dir, NULL, &k2, &err) == -1 && strstr(err.msg, "chmod 600"));
    /* env wins, never touches the file; too short refused */
    const char *env = "0123456789abcdef0123456789abcdef-env";
    CHECK(lg_admin_key_load_from(dir, env, &k2, &err) == 0 && k2.source == LG_ADMIN_KEY_FROM_ENV);
    CHECK(lg_admin_key_matches(&k2, env, strlen(env)) && !lg_admin_key_matches(&k2, key, strlen(key)));
    CHECK(lg_admin_key_load_from(dir, "short", &k2, &err) == -1);
    unlink(k.path);
    rmdir(dir);
}

static int parse(lg_serve_config *c, lg_err *err, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "serve";
    va_list ap;
    va_start(ap, err);
    char *a;
    while ((a = va_arg(ap, char *)))
        argv[argc++] = a;
    va_end(ap);
    return lg_serve_config_parse(c, argc, argv, err);
}

static void test_serve_config(void)
{
    lg_serve_config c;
    lg_err err;
    CHECK(parse(&c, &err, "--model", "m", NULL) == 0);
    CHECK(c.n_listen == 1 && !strcmp(c.listen[0], "127.0.0.1:8443") && c.threads == 2 && !c.insecure_http &&
          c.max_upload_mb == 1024 && c.drain_timeout_s == 30 && !strcmp(c.backend, "cpu") && !strcmp(c.access_log, "-"));
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--listen", "127.0.0.1:1", "--listen=[::1]:2", "--threads", "4",
                "--insecure-http", "--backend", "cuda", "--tenant-host-suffix", ".x.y", "--served-model-name", "base",
                "--drain-timeout", "0.5", NULL) == 0);
    CHECK(c.n_listen == 2 && !strcmp(c.listen[1], "[::1]:2") && c.threads == 4 && c.insecure_http &&
          !strcmp(c.backend, "cuda") && !strcmp(c.tenant_host_suffix, ".x.y") && c.drain_timeout_s == 0.5);
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, NULL) == -1 && strstr(err.msg, "--model"));
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--backend", "tpu", NULL) == -1 && strstr(err.msg, "cpu|cuda"));
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--threads", "x", NULL) == -1);
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--threads", "1", "--threads", "2", NULL) == -1 && strstr(err.msg, "twice"));
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--insecure-http", "--tls-cert", "a", "--tls-key", "b", NULL) == -1);
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--model", "m", "--nope", NULL) == -1 && strstr(err.msg, "unknown option"));
    lg_serve_config_dispose(&c);
    /* config file: fills what the command line left unset */
    char path[] = "/tmp/lg_serve_cfg_XXXXXX";
    int fd = mkstemp(path);
    const char *js = "{\"model\":\"file-model\",\"listen\":[\"127.0.0.1:9\",\"127.0.0.2:9\"],\"threads\":3,"
                     "\"insecure-http\":true,\"pool-mb\":64,\"drain-timeout\":2.5,\"backend\":\"cpu\"}";
    CHECK(write(fd, js, strlen(js)) == (ssize_t)strlen(js));
    close(fd);
    CHECK(parse(&c, &err, "--config", path, "--threads", "7", NULL) == 0);
    CHECK(!strcmp(c.model, "file-model") && c.n_listen == 2 && c.threads == 7 && c.insecure_http && c.pool_mb == 64 &&
          c.drain_timeout_s == 2.5);
    lg_serve_config_dispose(&c);
    CHECK(parse(&c, &err, "--config", path, "--listen", "127.0.0.3:9", NULL) == 0);
    CHECK(c.n_listen == 1 && !strcmp(c.listen[0], "127.0.0.3:9"));
    lg_serve_config_dispose(&c);
    FILE *fp = fopen(path, "w");
    fputs("{\"model\":\"m\",\"threads\":\"3\"}", fp);
    fclose(fp);
    CHECK(parse(&c, &err, "--config", path, NULL) == -1 && strstr(err.msg, "must be a number"));
    lg_serve_config_dispose(&c);
    fp = fopen(path, "w");
    fputs("{\"model\":\"m\",\"modle\":\"x\"}", fp);
    fclose(fp);
    CHECK(parse(&c, &err, "--config", path, NULL) == -1 && strstr(err.msg, "unknown key \"modle\""));
    lg_serve_config_dispose(&c);
    fp = fopen(path, "w");
    fputs("{\"model\":\"m\",\"model\":\"n\"}", fp);
    fclose(fp);
    CHECK(parse(&c, &err, "--config", path, NULL) == -1);
    lg_serve_config_dispose(&c);
    unlink(path);
}

static void test_access_log(void)
{
    char path[] = "/tmp/lg_access_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    lg_access_log *log;
    lg_err err;
    CHECK(lg_access_log_open(path, &log, &err) == 0);
    for (int i = 0; i < 1000; i++) {
        char line[64];
        int n = snprintf(line, sizeof line, "{\"i\":%d}", i);
        lg_access_log_write(log, line, (size_t)n);
    }
    lg_access_log_close(log);
    FILE *fp = fopen(path, "r");
    char buf[64];
    int n = 0, ok = 1;
    while (fp && fgets(buf, sizeof buf, fp)) {
        char want[64];
        snprintf(want, sizeof want, "{\"i\":%d}\n", n++);
        ok &= !strcmp(buf, want);
    }
    if (fp)
        fclose(fp);
    CHECK(n == 1000 && ok);
    unlink(path);
    CHECK(lg_access_log_open("/nonexistent-dir/x.log", &log, &err) == -1);
}

int main(void)
{
    test_bearer();
    test_tenancy();
    test_admin_key();
    test_serve_config();
    test_access_log();
    TEST_DONE();
}
