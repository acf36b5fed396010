/*
 * common.c — error formatting, dtype helpers, half conversion, file helpers.
 */
#include "engine/base/common.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int lg_log_verbose = 0;
int lg_err_locations = 0;

int lg_fail_at(lg_err *err, const char *file, int line, const char *fmt, ...)
{
    if (!err)
        return -1;
    (void)file;
    (void)line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (lg_err_locations) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, " [%s:%d]", file, line);
    }
    return -1;
}

void lg_err_prefix(lg_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
}

int lg_dtype_parse(const char *s, lg_dtype *out)
{
    if (!strcmp(s, "f32") || !strcmp(s, "float32") || !strcmp(s, "F32")) *out = LG_F32;
    else if (!strcmp(s, "f16") || !strcmp(s, "float16") || !strcmp(s, "F16") || !strcmp(s, "half")) *out = LG_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16") || !strcmp(s, "BF16")) *out = LG_BF16;
    else return -1;
    return 0;
}

float lg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t lg_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* subnormal or zero in half */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* half subnormal unit is 2^-24 */
        uint32_t half_m = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half_m & 1)))
            half_m++;
        return (uint16_t)(sign | half_m);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

uint16_t lg_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float lg_e4m3_to_f32(uint8_t v)
{
    const int e = (v >> 3) & 15, m = v & 7;
    float r;
    if (e == 15 && m == 7)
        r = NAN;
    else if (e == 0)
        r = ldexpf((float)m, -9); /* subnormal: m / 8 * 2^-6 */
    else
        r = ldexpf((float)(8 + m), e - 10); /* (1 + m / 8) * 2^(e - 7) */
    return (v & 0x80) ? -r : r;
}

uint8_t lg_f32_to_e4m3(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t s = (uint8_t)((u >> 24) & 0x80);
    const float a = fabsf(x);
    if (a != a)
        return s | 0x7F;
    if (a >= 448.0f)
        return s | 0x7E;
    if (a < 0.015625f) /* below 2^-6: subnormal steps of 2^-9 (8 is the smallest normal) */
        return s | (uint8_t)nearbyintf(a * 512.0f);
    uint32_t b;
    memcpy(&b, &a, 4);
    b += 0x7FFFFu + ((b >> 20) & 1u); /* round the f32 mantissa to 3 bits, ties to even */
    const int e = (int)(b >> 23) - 127;
    const uint32_t m = (b >> 20) & 7u;
    if (e > 8 || (e == 8 && m > 6))
        return s | 0x7E;
    return s | (uint8_t)(((e + 7) << 3) | (int)m);
}

void lg_to_f32(float *dst, const void *src, lg_dtype st, size_t n)
{
    switch (st) {
    case LG_F32: memcpy(dst, src, n * 4); break;
    case LG_F16:
        for (size_t i = 0; i < n; i++) dst[i] = lg_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    case LG_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = lg_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case LG_I32:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)src)[i];
        break;
    case LG_F8E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = lg_e4m3_to_f32(((const uint8_t *)src)[i]);
        break;
    }
}

void lg_from_f32(void *dst, lg_dtype dt, const float *src, size_t n)
{
    switch (dt) {
    case LG_F32: memcpy(dst, src, n * 4); break;
    case LG_F16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lg_f32_to_f16(src[i]);
        break;
    case LG_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = lg_f32_to_bf16(src[i]);
        break;
    case LG_I32:
        for (size_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)src[i];
        break;
    case LG_F8E4M3:
        for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = lg_f32_to_e4m3(src[i]);
        break;
    }
}

int lg_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len, lg_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lg_fail(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return lg_fail(err, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return lg_fail(err, "%s is %lld bytes, larger than the limit of %zu", path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return lg_fail(err, "out of memory reading %s", path);
    }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return lg_fail(err, "short read on %s", path);
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (out_len)
        *out_len = n;
    return 0;
}

int lg_mmap_open(const char *path, lg_mmap *m, lg_err *err)
{
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return lg_fail(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return lg_fail(err, "%s is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return lg_fail(err, "%s is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return lg_fail(err, "cannot map %s: %s", path, strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void lg_mmap_close(lg_mmap *m)
{
    if (m && m->data) {
        munmap(m->data, m->size);
        m->data = NULL;
        m->size = 0;
    }
}

double lg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void lg_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- lg_strbuf ------------------------------------------------------------ */

static bool strbuf_reserve(lg_strbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void lg_strbuf_put(lg_strbuf *b, const char *s, size_t n)
{
    if (!strbuf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void lg_strbuf_puts(lg_strbuf *b, const char *s) { lg_strbuf_put(b, s, strlen(s)); }

void lg_strbuf_printf(lg_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!strbuf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
