/*
 * test_multipart.c — the multipart/form-data parser on valid bodies (fed
 * whole and byte by byte, and at every split point), hostile ones, limits,
 * and the file sink's SHA-256 against a known digest.
 */
#include "tests/unit/test.h"

#include <fcntl.h>
#include <unistd.h>

#include "gateway/http/multipart.h"

typedef struct rec {
    int n_parts;
    char names[16][64];
    char filenames[16][64];
    char ctypes[16][64];
    char data[16][4096];
    size_t len[16];
    int ended;
    int stop_at_part; /* -1 none */
} rec;

static int on_begin(void *u, const lg_mp_part *p, lg_err *err)
{
    rec *r = u;
    if (p->index == r->stop_at_part)
        return lg_fail(err, "receiver refuses part %d", p->index);
    snprintf(r->names[p->index], 64, "%s", p->name);
    snprintf(r->filenames[p->index], 64, "%s%s", p->has_filename ? "F:" : "", p->filename);
    snprintf(r->ctypes[p->index], 64, "%s", p->content_type);
    r->len[p->index] = 0;
    r->n_parts = p->index + 1;
    return 0;
}
static int on_data(void *u, const lg_mp_part *p, const void *d, size_t n, lg_err *err)
{
    rec *r = u;
    if (r->len[p->index] + n < sizeof r->data[0]) {
        memcpy(r->data[p->index] + r->len[p->index], d, n);
        r->len[p->index] += n;
        r->data[p->index][r->len[p->index]] = 0;
    }
    return 0;
}
static int on_end(void *u, const lg_mp_part *p, lg_err *err)
{
    ((rec *)u)->ended++;
    return 0;
}

static const lg_mp_callbacks CB = {on_begin, on_data, on_end};

/* step 0: whole; else feed in pieces of `step` bytes */
static int parse(const char *boundary, const char *body, size_t len, size_t step, const lg_mp_limits *lim, rec *r,
                 lg_err *err)
{
    memset(r, 0, sizeof *r);
    r->stop_at_part = -1;
    lg_multipart *m;
    if (lg_multipart_create(boundary, lim, &CB, r, &m, err) != 0)
        return -1;
    int rc = 0;
    if (!step)
        step = len ? len : 1;
    for (size_t i = 0; i < len && rc == 0; i += step)
        rc = lg_multipart_feed(m, body + i, i + step > len ? len - i : step, err);
    if (rc == 0)
        rc = lg_multipart_finish(m, err);
    lg_multipart_free(m);
    return rc;
}

#define B "----lgBoundary7MA4YWxk"
static const char VALID[] =
    "preamble to ignore\r\n"
    "--" B "\r\n"
    "Content-Disposition: form-data; name=\"adapter_config\"; filename=\"adapter_config.json\"\r\n"
    "Content-Type: application/json\r\n"
    "\r\n"
    "{\"r\":8}\r\n"
    "--" B "  \r\n"
    "content-disposition: FORM-DATA; name=weights; filename=\"a \\\"b\\\".safetensors\"\r\n"
    "X-Other: ignored\r\n"
    "\r\n"
    "\r\n-" B "x is not a boundary\r\r\n-- and --" B " neither\r\n"
    "--" B "\r\n"
    "Content-Disposition: form-data; name=\"empty\"\r\n"
    "\r\n"
    "\r\n"
    "--" B "--\r\n"
    "epilogue, ignored\r\n--" B "\r\ngarbage";

static void check_valid(rec *r, const char *what)
{
    CHECK_MSG(r->n_parts == 3 && r->ended == 3, "%s: parts %d ended %d", what, r->n_parts, r->ended);
    CHECK_MSG(!strcmp(r->names[0], "adapter_config") && !strcmp(r->filenames[0], "F:adapter_config.json"), "%s", what);
    CHECK_MSG(!strcmp(r->ctypes[0], "application/json") && !strcmp(r->data[0], "{\"r\":8}"), "%s", what);
    CHECK_MSG(!strcmp(r->names[1], "weights") && !strcmp(r->filenames[1], "F:a \"b\".safetensors"), "%s", what);
    CHECK_MSG(!strcmp(r->ctypes[1], "text/plain"), "%s", what);
    CHECK_MSG(!strcmp(r->data[1], "\r\n-" B "x is not a boundary\r\r\n-- and --" B " neither"), "%s: %s", what, r->data[1]);
    CHECK_MSG(!strcmp(r->names[2], "empty") && r->len[2] == 0 && !strcmp(r->filenames[2], ""), "%s", what);
}

static void test_valid(void)
{
    rec r;
    lg_err err;
    size_t len = strlen(VALID);
    CHECK_MSG(parse(B, VALID, len, 0, NULL, &r, &err) == 0, "%s", err.msg);
    check_valid(&r, "whole");
    CHECK_MSG(parse(B, VALID, len, 1, NULL, &r, &err) == 0, "%s", err.msg);
    check_valid(&r, "byte by byte");
    for (size_t step = 2; step < 40; step++) {
        int rc = parse(B, VALID, len, step, NULL, &r, &err);
        CHECK_MSG(rc == 0, "step %zu: %s", step, err.msg);
        if (rc == 0 && step % 7 == 0)
            check_valid(&r, "steps");
    }
    /* body starting with the delimiter, no preamble; LF-only epilogue */
    const char *b2 = "--xyz\r\nContent-Disposition: form-data; name=a\r\n\r\nhello\r\n--xyz--";
    CHECK(parse("xyz", b2, strlen(b2), 0, NULL, &r, &err) == 0 && r.n_parts == 1 && !strcmp(r.data[0], "hello"));
    /* binary content with NUL and CR bytes */
    char bin[256];
    int n = sprintf(bin, "--q\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n");
    const char payload[] = {0, '\r', 1, '\r', '\n', '-', 0, '\r'};
    memcpy(bin + n, payload, sizeof payload);
    n += sizeof payload;
    n += sprintf(bin + n, "\r\n--q--");
    CHECK(parse("q", bin, n, 3, NULL, &r, &err) == 0 && r.len[0] == sizeof payload && !memcmp(r.data[0], payload, sizeof payload));
    /* zero parts: only the close delimiter */
    CHECK(parse("q", "--q--", 5, 0, NULL, &r, &err) == 0 && r.n_parts == 0);
}

static void hostile(const char *boundary, const char *body, const lg_mp_limits *lim, const char *want)
{
    rec r;
    lg_err err = {{0}};
    for (size_t step = 0; step <= 1; step++) {
        int rc = parse(boundary, body, strlen(body), step, lim, &r, &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, want), "want '%s', got rc %d '%s' for %s", want, rc, err.msg, body);
    }
}

#define CD "Content-Disposition: form-data; name=\"a\"\r\n"
static void test_hostile(void)
{
    hostile("q", "", NULL, "without any boundary");
    hostile("q", "no boundary here", NULL, "without any boundary");
    hostile("q", "--q\r\n" CD "\r\ndata", NULL, "before its closing boundary");
    hostile("q", "--q\r\n" CD "\r\ndata\r\n--q", NULL, "before its closing boundary");
    hostile("q", "--q\r\n" CD, NULL, "before its closing boundary");
    hostile("q", "--qX\r\n", NULL, "unexpected byte after");
    hostile("q", "--q\n" CD "\r\nx\r\n--q--", NULL, "unexpected byte");
    hostile("q", "--q\rX", NULL, "must end with CRLF");
    hostile("q", "--q-X", NULL, "unexpected byte");
    hostile("q", "--q\r\nContent-Disposition: form-data; name=\"a\"\n\r\nx\r\n--q--", NULL, "must end with CRLF");
    hostile("q", "--q\r\n\r\nx\r\n--q--", NULL, "no Content-Disposition");
    hostile("q", "--q\r\nContent-Type: text/plain\r\n\r\nx\r\n--q--", NULL, "no Content-Disposition");
    hostile("q", "--q\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--q--", NULL, "must be form-data");
    hostile("q", "--q\r\nContent-Disposition: form-data\r\n\r\nx\r\n--q--", NULL, "without a name");
    hostile("q", "--q\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nx\r\n--q--", NULL, "without a name");
    hostile("q", "--q\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--q--", NULL, "without a name");
    hostile("q", "--q\r\n" CD CD "\r\nx\r\n--q--", NULL, "two Content-Disposition");
    hostile("q", "--q\r\n" CD "Content-Type: a/b\r\ncontent-type: c/d\r\n\r\nx\r\n--q--", NULL, "two Content-Type");
    hostile("q", "--q\r\n" CD " folded\r\n\r\nx\r\n--q--", NULL, "folded");
    hostile("q", "--q\r\n" CD "NoColon\r\n\r\nx\r\n--q--", NULL, "malformed header");
    hostile("q", "--q\r\n" CD ": empty-name\r\n\r\nx\r\n--q--", NULL, "malformed header");
    hostile("q", "--q\r\n" CD "Bad Name: v\r\n\r\nx\r\n--q--", NULL, "invalid character");
    hostile("q", "--q\r\n" CD "X: a\x01b\r\n\r\nx\r\n--q--", NULL, "control character");
    hostile("q", "--q\r\n" CD "X: a\rb\r\n\r\nx\r\n--q--", NULL, "bare CR");
    /* limits */
    lg_mp_limits two = {.max_parts = 2};
    hostile("q", "--q\r\n" CD "\r\n1\r\n--q\r\n" CD "\r\n2\r\n--q\r\n" CD "\r\n3\r\n--q--", &two, "more than 2 parts");
    lg_mp_limits small = {.max_header_bytes = 40};
    hostile("q", "--q\r\n" CD "\r\nx\r\n--q--", &small, "headers larger than 40");
    lg_mp_limits tiny = {.max_part_bytes = 3};
    hostile("q", "--q\r\n" CD "\r\n1234\r\n--q--", &tiny, "larger than 3 bytes");
    char longname[400];
    snprintf(longname, sizeof longname, "--q\r\nContent-Disposition: form-data; name=\"%0300d\"\r\n\r\nx\r\n--q--", 0);
    hostile("q", longname, NULL, "longer than 255");
    char pad[200];
    snprintf(pad, sizeof pad, "--q%080d\r\n", 0);
    for (int i = 3; i < 83; i++)
        pad[i] = ' ';
    hostile("q", pad, NULL, "too much padding");
    /* RFC 2046: the delimiter may not occur inside content, even followed by more */
    hostile("q", "--q\r\n" CD "\r\nab\r\n--qX\r\n--q--", NULL, "unexpected byte after");
    /* the receiver stops the parse */
    rec r;
    lg_err err;
    lg_multipart *m;
    memset(&r, 0, sizeof r);
    r.stop_at_part = 0;
    CHECK(lg_multipart_create("q", NULL, &CB, &r, &m, &err) == 0);
    const char *b = "--q\r\n" CD "\r\nx\r\n--q--";
    CHECK(lg_multipart_feed(m, b, strlen(b), &err) == -1 && strstr(err.msg, "receiver refuses"));
    CHECK(lg_multipart_feed(m, "x", 1, &err) == -1 && lg_multipart_finish(m, &err) == -1);
    lg_multipart_free(m);
    lg_multipart_free(NULL);
    /* boundaries */
    CHECK(lg_multipart_create("", NULL, &CB, &r, &m, &err) == -1);
    CHECK(lg_multipart_create("a\rb", NULL, &CB, &r, &m, &err) == -1);
    CHECK(lg_multipart_create("ends ", NULL, &CB, &r, &m, &err) == -1);
    char b71[72];
    memset(b71, 'a', 71);
    b71[71] = 0;
    CHECK(lg_multipart_create(b71, NULL, &CB, &r, &m, &err) == -1);
    char out[LG_MP_MAX_BOUNDARY + 1];
    const char *ct = "multipart/form-data; boundary=\"abc def\"";
    CHECK(lg_multipart_boundary(ct, strlen(ct), out, &err) == 0 && !strcmp(out, "abc def"));
    ct = "multipart/form-data;boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW";
    CHECK(lg_multipart_boundary(ct, strlen(ct), out, &err) == 0 && !strcmp(out, "----WebKitFormBoundary7MA4YWxkTrZu0gW"));
    CHECK(lg_multipart_boundary("multipart/form-data", 19, out, &err) == -1 && strstr(err.msg, "boundary"));
    CHECK(lg_multipart_boundary("multipart/mixed; boundary=a", 27, out, &err) == -1);
    ct = "multipart/form-data; boundary=a\x01";
    CHECK(lg_multipart_boundary(ct, strlen(ct), out, &err) == -1);
}

static void test_sink(void)
{
    char path[] = "/tmp/lg_sink_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    lg_file_sink s;
    lg_err err;
    CHECK(lg_file_sink_init(&s, fd, 0, &err) == 0);
    CHECK(lg_file_sink_write(&s, "a", 1, &err) == 0 && lg_file_sink_write(&s, "bc", 2, &err) == 0);
    char hex[65];
    CHECK(lg_file_sink_finish(&s, NULL, hex, &err) == 0);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")); /* SHA-256("abc") */
    char back[8] = {0};
    CHECK(pread(fd, back, sizeof back, 0) == 3 && !strcmp(back, "abc"));
    CHECK(lg_file_sink_init(&s, fd, 2, &err) == 0);
    CHECK(lg_file_sink_write(&s, "abc", 3, &err) == -1 && strstr(err.msg, "larger than 2"));
    lg_file_sink_discard(&s);
    close(fd);
    unlink(path);
}

int main(void)
{
    test_valid();
    test_hostile();
    test_sink();
    TEST_DONE();
}
