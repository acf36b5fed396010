/*
 * test_safetensors_memory.c — the safetensors header parser's memory bound
 * under hostile headers, measured as the process's peak RSS (getrusage
 * ru_maxrss) and its current RSS (/proc/self/statm), in its own process so
 * that nothing else moves the peak.
 *
 * Phase A: headers that are refused (the 10 MiB and 30 MiB {"a":[[],[],...]}
 * of the outside probe, deep nesting, a long name, a 30 MiB value with bad
 * UTF-8 at its end, a 30 MiB valid table with a syntax error at its end,
 * 30 MiB of digits, too many metadata entries, and a few thousand generated
 * random token soups): refused before anything is allocated, so the peak may
 * grow by at most SLACK (8 MiB). A JSON DOM took ~47 x the header here.
 * Phase B: 24 MiB headers of the smallest valid entries, accepted, and the
 * same with a duplicate name at the end (refused after the table was
 * built): the peak may grow by at most 3 x the header + SLACK (the bound of
 * safetensors.c), and once closed or refused the current RSS is back within
 * SLACK of where it started (the table is its own mapping).
 */
#include "engine/model/safetensors.h"
#include "tests/unit/test.h"

#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#define MiB (1u << 20)
#define BIG (30u * MiB)
#define SLACK (8u * MiB)

static uint8_t *g_buf; /* 8 + header + data, touched before the baseline */
static size_t g_cap;

static size_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024; /* KiB on Linux */
}

static size_t cur_rss(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* The header is g_buf[8 .. 8 + hl); sets the length prefix, parses, returns rc. */
static int run(size_t hl, size_t data_len, const char *what, lg_err *err, size_t *table)
{
    for (int i = 0; i < 8; i++)
        g_buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    lg_st_file *f = NULL;
    int rc = lg_st_open_buffer(g_buf, 8 + hl + data_len, what, &f, err);
    if (table)
        *table = rc == 0 ? lg_st_table_bytes(f) : 0;
    if (rc == 0)
        CHECK_MSG(lg_st_table_bytes(f) <= 3 * hl + 64, "%s: table of %zu bytes for a %zu-byte header", what,
                  lg_st_table_bytes(f), hl);
    else
        CHECK_MSG(err->msg[0] && !strchr(err->msg, '\n'), "%s: message not one line", what);
    lg_st_close(f);
    return rc;
}

static void expect_refused(size_t hl, const char *what, const char *needle)
{
    lg_err err = {{0}};
    int rc = run(hl, 0, what, &err, NULL);
    CHECK_MSG(rc == -1 && strstr(err.msg, needle), "%s: rc %d, message '%s' lacks '%s'", what, rc, err.msg, needle);
}

static char *H(void) { return (char *)g_buf + 8; }

static size_t nested_arrays(size_t size)
{
    char *h = H();
    size_t o = (size_t)sprintf(h, "{\"a\":[");
    while (o + 3 + 2 <= size) {
        memcpy(h + o, "[],", 3);
        o += 3;
    }
    o--; /* the last comma */
    memcpy(h + o, "]}", 2);
    o += 2;
    memset(h + o, ' ', size - o);
    return size;
}

/* Smallest valid entries ("<hex>":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}) up to size bytes. */
static size_t tiny_tensors(size_t size, int *n_out)
{
    char *h = H();
    size_t o = 1;
    h[0] = '{';
    int n = 0;
    while (o + 64 < size) {
        o += (size_t)sprintf(h + o, "%s\"%x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", n ? "," : "", n);
        n++;
    }
    h[o++] = '}';
    *n_out = n;
    return o;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* A random soup of the grammar's tokens (and a few that are not). */
static size_t soup(size_t max)
{
    static const char *const tok[] = {
        "{", "}", "[", "]", ",", ":", "\"a\"", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"F32\"", "\"U8\"",
        "\"__metadata__\"", "0", "1", "4", "-1", "1e9", "18446744073709551616", "\"\\u00e9\"", "\"\\ud800\"",
        "\"\\u0000\"", "\"\\n\"", "\"\xc3\xa9\"", "\"\xc0\x80\"", " ", "true", "null", "\"x", "\\",
    };
    char *h = H();
    size_t o = 0;
    h[o++] = '{';
    size_t want = 1 + rnd() % max;
    while (o + 32 < want) {
        const char *t = tok[rnd() % (sizeof tok / sizeof tok[0])];
        size_t n = strlen(t);
        memcpy(h + o, t, n);
        o += n;
    }
    h[o++] = '}';
    return o;
}

static void phase_a(void)
{
    size_t hl;
    hl = nested_arrays(10 * MiB);
    expect_refused(hl, "nested 10 MiB", "tensor 'a': expected an object");
    hl = nested_arrays(BIG);
    expect_refused(hl, "nested 30 MiB", "tensor 'a': expected an object");

    char *h = H();
    hl = (size_t)sprintf(h, "{\"a\":{\"dtype\":\"F32\",\"shape\":");
    memset(h + hl, '[', BIG);
    expect_refused(hl + BIG, "deep nesting", "shape[0] is not a non-negative integer");

    hl = (size_t)sprintf(h, "{\"a\":{\"dtype\":\"F32\",\"shape\":[");
    memset(h + hl, '7', BIG);
    hl += BIG;
    hl += (size_t)sprintf(h + hl, "],\"data_offsets\":[0,0]}}");
    expect_refused(hl, "30 MiB of digits", "shape[0] is too large");

    hl = (size_t)sprintf(h, "{\"");
    memset(h + hl, 'n', BIG);
    hl += BIG;
    hl += (size_t)sprintf(h + hl, "\":{}}");
    expect_refused(hl, "long name", "longer than 1024 bytes");

    hl = (size_t)sprintf(h, "{\"__metadata__\":{\"k\":\"");
    memset(h + hl, 'v', BIG);
    hl += BIG;
    hl += (size_t)sprintf(h + hl, "\xff\"}}");
    expect_refused(hl, "30 MiB value, bad UTF-8 at the end", "invalid UTF-8");

    int n;
    hl = tiny_tensors(BIG, &n);
    h[hl - 1] = ',';
    h[hl++] = '}';
    expect_refused(hl, "30 MiB of tensors, a syntax error at the end", "not valid JSON");

    hl = (size_t)sprintf(h, "{\"__metadata__\":{");
    for (int i = 0; i <= LG_ST_MAX_METADATA; i++)
        hl += (size_t)sprintf(h + hl, "%s\"%x\":\"\"", i ? "," : "", i);
    hl += (size_t)sprintf(h + hl, "}}");
    expect_refused(hl, "too many metadata entries", "more than 65536");

    int refused = 0, accepted = 0;
    for (int it = 0; it < 4000; it++) {
        lg_err err = {{0}};
        hl = soup(it < 3900 ? 4096 : 4 * MiB);
        if (run(hl, 0, "soup", &err, NULL) == 0)
            accepted++;
        else
            refused++;
    }
    printf("token soups: %d refused, %d accepted\n", refused, accepted);
}

static void phase_b(size_t base_cur)
{
    int n;
    size_t hl = tiny_tensors(24 * MiB, &n), table = 0;
    lg_err err = {{0}};
    CHECK_MSG(run(hl, 0, "24 MiB of tiny tensors", &err, &table) == 0, "%s", err.msg);
    printf("%d tensors: header %.1f MiB, table %.1f MiB (%.2f x)\n", n, hl / (double)MiB, table / (double)MiB,
           (double)table / (double)hl);
    size_t cur = cur_rss();
    CHECK_MSG(cur <= base_cur + SLACK, "RSS %zu MiB after closing, %zu MiB before", cur / MiB, base_cur / MiB);

    /* the same with the first name again at the end: refused after the table was built */
    char *h = H();
    hl--;
    hl += (size_t)sprintf(h + hl, ",\"0\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}");
    expect_refused(hl, "duplicate at the end", "duplicate tensor name '0'");
    cur = cur_rss();
    CHECK_MSG(cur <= base_cur + SLACK, "RSS %zu MiB after the refusal, %zu MiB before", cur / MiB, base_cur / MiB);
}

int main(void)
{
    g_cap = 8 + BIG + 4 * MiB;
    g_buf = malloc(g_cap);
    if (!g_buf)
        return 1;
    memset(g_buf, ' ', g_cap);
    lg_err err = {{0}};
    size_t hl = (size_t)sprintf(H(), "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    CHECK_MSG(run(hl, 4, "warm-up", &err, NULL) == 0, "%s", err.msg);

    size_t base = peak_rss(), base_cur = cur_rss();
    phase_a();
    size_t a = peak_rss();
    printf("phase A (refused): peak RSS +%.1f MiB (bound %.1f MiB)\n", (a - base) / (double)MiB, SLACK / (double)MiB);
    CHECK_MSG(a - base <= SLACK, "refused headers raised the peak RSS by %zu MiB", (a - base) / MiB);

    phase_b(base_cur);
    size_t b = peak_rss();
    size_t bound = 3 * 24 * (size_t)MiB + SLACK;
    printf("phase B (24 MiB accepted / refused late): peak RSS +%.1f MiB (bound %.1f MiB)\n", (b - base) / (double)MiB,
           bound / (double)MiB);
    CHECK_MSG(b - base <= bound, "a 24 MiB header raised the peak RSS by %zu MiB", (b - base) / MiB);
    free(g_buf);
    TEST_DONE();
}
