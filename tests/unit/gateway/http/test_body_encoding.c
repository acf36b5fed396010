/*
 * test_body_encoding.c — Content-Encoding of request bodies
 * (gateway/http/body_encoding.h) against zlib's own encoders: gzip, zlib and
 * raw deflate round trips, the decoded-size limit (a bomb is refused at the
 * limit, with memory bounded by it), corrupt, truncated and trailing data,
 * other codings.
 */
#include "tests/unit/test.h"

#include <sys/resource.h>
#include <zlib.h>

#include "gateway/http/body_encoding.h"

/* window_bits as deflateInit2 takes them: 16 + 15 gzip, 15 zlib, -15 raw */
static unsigned char *enc(const void *in, size_t n, int window_bits, size_t *out_n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
    size_t cap = deflateBound(&z, n) + 64;
    unsigned char *out = malloc(cap);
    z.next_in = (unsigned char *)in;
    z.avail_in = (unsigned)n;
    z.next_out = out;
    z.avail_out = (unsigned)cap;
    deflate(&z, Z_FINISH);
    *out_n = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

/* gzip of n zero bytes, fed 64 KiB at a time (so making it costs no memory) */
static unsigned char *gzip_zeros(size_t n, size_t *out_n)
{
    static unsigned char zeros[65536];
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY);
    size_t cap = n / 512 + 65536, used = 0;
    unsigned char *out = malloc(cap);
    for (size_t left = n;;) {
        size_t take = left < sizeof zeros ? left : sizeof zeros;
        z.next_in = zeros;
        z.avail_in = (unsigned)take;
        left -= take;
        do {
            z.next_out = out + used;
            z.avail_out = (unsigned)(cap - used);
            deflate(&z, left ? Z_NO_FLUSH : Z_FINISH);
            used = cap - z.avail_out;
        } while (z.avail_in || (!left && z.avail_out == 0));
        if (!left)
            break;
    }
    deflateEnd(&z);
    *out_n = used;
    return out;
}

static int dec(const char *e, const void *b, size_t n, size_t max, void **out, size_t *out_n, int *st)
{
    char msg[256];
    *st = 0;
    return lg_body_decode(e, e ? strlen(e) : 0, b, n, max, out, out_n, st, msg, sizeof msg);
}

static long maxrss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

int main(void)
{
    const char *text = "{\"model\":\"m\",\"prompt\":\"the quick brown fox jumps over the lazy dog\"}";
    size_t tn = strlen(text), en, on;
    void *out;
    int st;
    struct {
        const char *name;
        int wb;
    } kinds[] = {{"gzip", 31}, {"x-gzip", 31}, {"GZip", 31}, {"deflate", 15}, {"deflate", -15}, {" gzip ", 31}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        unsigned char *e = enc(text, tn, kinds[k].wb, &en);
        CHECK_MSG(dec(kinds[k].name, e, en, 4096, &out, &on, &st) == 0 && out && on == tn && !memcmp(out, text, tn),
                  "%s/%d", kinds[k].name, kinds[k].wb);
        free(out);
        /* truncated, corrupt, trailing bytes */
        CHECK(dec(kinds[k].name, e, en - 3, 4096, &out, &on, &st) != 0 && st == 400 && !out);
        e[en / 2] ^= 0x5a;
        CHECK(dec(kinds[k].name, e, en, 4096, &out, &on, &st) != 0 && st == 400);
        free(e);
    }
    unsigned char *e = enc(text, tn, 31, &en);
    unsigned char *tail = malloc(en + 5);
    memcpy(tail, e, en);
    memcpy(tail + en, "junk!", 5);
    CHECK(dec("gzip", tail, en + 5, 4096, &out, &on, &st) != 0 && st == 400);
    free(tail);
    /* the limit is on the decoded size: exactly at it passes, one byte over does not */
    CHECK(dec("gzip", e, en, tn, &out, &on, &st) == 0 && on == tn);
    free(out);
    CHECK(dec("gzip", e, en, tn - 1, &out, &on, &st) != 0 && st == 413 && !out);
    free(e);
    /* identity and no coding: the body as it is */
    CHECK(dec("identity", text, tn, 10, &out, &on, &st) == 0 && !out);
    CHECK(dec(NULL, text, tn, 10, &out, &on, &st) == 0 && !out);
    /* other codings, and lists of codings */
    const char *others[] = {"br", "zstd", "compress", "gzip, br", "gzip, gzip", "*"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        CHECK_MSG(dec(others[i], text, tn, 4096, &out, &on, &st) != 0 && st == 415, "%s", others[i]);
    /* a bomb: 256 MiB of zeros (~250 KB compressed) against a 4 MiB limit; memory stays near the limit */
    unsigned char *bomb = gzip_zeros((size_t)256 << 20, &en);
    CHECK(en < (1u << 20));
    long before = maxrss_kb();
    CHECK(dec("gzip", bomb, en, (size_t)4 << 20, &out, &on, &st) != 0 && st == 413 && !out);
    CHECK_MSG(maxrss_kb() - before < 16 * 1024, "peak grew %ld KB", maxrss_kb() - before);
    free(bomb);
    TEST_DONE();
}
