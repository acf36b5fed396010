/*
 * fuzz_multipart.c — libFuzzer harness for gateway/http/multipart.c.
 *
 * Input layout: byte 0 picks the boundary length (1..70) taken from the
 * following bytes (mapped onto RFC 2046 bchars), byte 1 the feed chunk size
 * (1..256); the rest is the body, fed in chunks. Every part's content is
 * re-assembled and compared with a whole-body parse of the same input, so
 * the fuzzer also checks that splitting never changes the result.
 *
 * tests/fuzz/corpus_multipart holds seed inputs in this layout (libFuzzer
 * adds its findings to the first directory given, so copy it first):
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_multipart
 *   cp -r tests/fuzz/corpus_multipart build-fuzz/corpus_multipart
 *   build-fuzz/fuzz_multipart build-fuzz/corpus_multipart -max_total_time=180 -max_len=4096
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/http/multipart.h"

typedef struct acc {
    uint64_t hash; /* FNV-1a over (part index, name, content) */
    size_t bytes;
    int parts;
} acc;

static void mix(acc *a, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        a->hash = (a->hash ^ b[i]) * 1099511628211ull;
}
static int on_begin(void *u, const lg_mp_part *p, lg_err *e)
{
    acc *a = u;
    a->parts++;
    mix(a, p->name, strlen(p->name));
    mix(a, p->filename, strlen(p->filename));
    mix(a, p->content_type, strlen(p->content_type));
    return 0;
}
static int on_data(void *u, const lg_mp_part *p, const void *d, size_t n, lg_err *e)
{
    acc *a = u;
    if (n == 0)
        abort(); /* never called empty */
    mix(a, d, n);
    a->bytes += n;
    return 0;
}
static int on_end(void *u, const lg_mp_part *p, lg_err *e)
{
    acc *a = u;
    mix(a, &p->size, sizeof p->size);
    return 0;
}

static int run(const char *boundary, const uint8_t *body, size_t len, size_t chunk, acc *a)
{
    lg_mp_callbacks cb = {on_begin, on_data, on_end};
    lg_mp_limits lim = {.max_parts = 8, .max_header_bytes = 512};
    lg_multipart *m;
    lg_err err;
    memset(a, 0, sizeof *a);
    a->hash = 1469598103934665603ull;
    if (lg_multipart_create(boundary, &lim, &cb, a, &m, &err) != 0)
        return -2;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i += chunk)
        rc = lg_multipart_feed(m, body + i, i + chunk > len ? len - i : chunk, &err);
    if (rc == 0)
        rc = lg_multipart_finish(m, &err);
    lg_multipart_free(m);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char bchars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ";
    if (size < 3)
        return 0;
    size_t blen = 1 + data[0] % 70, chunk = 1 + data[1] % 256;
    if (size < 2 + blen)
        return 0;
    char boundary[71];
    for (size_t i = 0; i < blen; i++)
        boundary[i] = bchars[data[2 + i] % (sizeof bchars - 1)];
    boundary[blen] = 0;
    const uint8_t *body = data + 2 + blen;
    size_t len = size - 2 - blen;
    acc a, b;
    int r1 = run(boundary, body, len, len ? len : 1, &a);
    int r2 = run(boundary, body, len, chunk, &b);
    if (r1 == -2 || r2 == -2)
        return 0; /* invalid boundary (e.g. trailing space): refused up front either way */
    if (r1 != r2 || (r1 == 0 && (a.hash != b.hash || a.bytes != b.bytes || a.parts != b.parts)))
        abort(); /* chunking changed the result */
    return 0;
}
