/*
 * cpu_quant_c.c — the portable C kernels of cpu_quant.h: activation
 * quantization, one dot product and one row decoder per block layout. The
 * reference for the SIMD sets (tests/unit/engine/backend/test_cpu_quant.c
 * holds them to it and to gguf-py's dequantization).
 *
 * Layouts (ggml-common.h; d, m, dmin are f16, read with memcpy: blocks of
 * 18..210 bytes leave them unaligned):
 *   Q4_0 {d, qs[16]}            q = nibble - 8; lo nibbles are elements 0..15, hi 16..31
 *   Q4_1 {d, m, qs[16]}         q = nibble, x = d q + m
 *   Q5_0 {d, qh[4], qs[16]}     q = (nibble | bit j of qh << 4) - 16
 *   Q5_1 {d, m, qh[4], qs[16]}  q = nibble | bit << 4, x = d q + m
 *   Q8_0 {d, qs[32] int8}
 *   Q2_K {scales[16], qs[64], d, dmin}          16 groups of 16: x = d (sc & 15) q - dmin (sc >> 4), q 2-bit
 *   Q3_K {hmask[32], qs[64], scales[12], d}     x = d (sc6 - 32) q, q = 2 bits - (hmask bit ? 0 : 4)
 *   Q4_K {d, dmin, scales[12], qs[128]}         8 groups of 32: x = d sc6 q - dmin m6, q 4-bit
 *   Q5_K {d, dmin, scales[12], qh[32], qs[128]} the same with a fifth bit from qh
 *   Q6_K {ql[128], qh[64], scales[16] int8, d}  x = d sc q, q = 6 bits - 32
 * The K-quants are decoded here to integers first (kunpack_*: q[256] and,
 * per group of 16 elements, its scale and min), then one generic dot and one
 * generic decoder run over that form; the float operations of the decoders
 * are ggml's, in ggml's order.
 */
#include "engine/backend/cpu_quant.h"
#include "engine/backend/cpu_quant_kscale.h"

#include <math.h>
#include <string.h>

static inline float rd16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return lg_f16_to_f32(h);
}

/* ---- activations ----------------------------------------------------------- */

static void quant_a(const float *x, lg_q8a *y, int64_t k)
{
    for (int64_t b = 0; b < k / LG_QA_BLOCK; b++, x += LG_QA_BLOCK, y++) {
        float amax = 0;
        for (int i = 0; i < LG_QA_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int i = 0; i < LG_QA_BLOCK; i++) {
            const int q = (int)nearbyintf(x[i] * id);
            y->qs[i] = (int8_t)q;
            sum += q;
        }
        y->d = d;
        y->s = d * (float)sum;
    }
}

static void quant_k(const float *x, lg_q8k *y, int64_t k)
{
    for (int64_t b = 0; b < k / LG_QK_BLOCK; b++, x += LG_QK_BLOCK, y++) {
        float amax = 0;
        for (int i = 0; i < LG_QK_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        for (int g = 0; g < LG_QK_BLOCK / 16; g++) {
            int sum = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) {
                const int q = (int)nearbyintf(x[i] * id);
                y->qs[i] = (int8_t)q;
                sum += q;
            }
            y->bsums[g] = (int16_t)sum;
        }
        y->d = d;
    }
}

/* ---- 32-element layouts ------------------------------------------------------ */

static float dot1_q4_0(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8a *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 18, y++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += ((b[2 + j] & 15) - 8) * y->qs[j] + ((b[2 + j] >> 4) - 8) * y->qs[j + 16];
        acc += rd16(b) * y->d * (float)s;
    }
    return acc;
}

static float dot1_q4_1(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8a *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 20, y++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += (b[4 + j] & 15) * y->qs[j] + (b[4 + j] >> 4) * y->qs[j + 16];
        acc += rd16(b) * y->d * (float)s + rd16(b + 2) * y->s;
    }
    return acc;
}

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static float dot1_q5_0(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8a *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 22, y++) {
        const uint32_t qh = rd32(b + 2);
        const uint8_t *qs = b + 6;
        int s = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = ((qs[j] & 15) | (((qh >> j) << 4) & 0x10)) - 16;
            const int q1 = ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            s += q0 * y->qs[j] + q1 * y->qs[j + 16];
        }
        acc += rd16(b) * y->d * (float)s;
    }
    return acc;
}

static float dot1_q5_1(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8a *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 24, y++) {
        const uint32_t qh = rd32(b + 4);
        const uint8_t *qs = b + 8;
        int s = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = (qs[j] & 15) | (((qh >> j) << 4) & 0x10);
            const int q1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            s += q0 * y->qs[j] + q1 * y->qs[j + 16];
        }
        acc += rd16(b) * y->d * (float)s + rd16(b + 2) * y->s;
    }
    return acc;
}

static float dot1_q8_0(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8a *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 34, y++) {
        const int8_t *q = (const int8_t *)(b + 2);
        int s = 0;
        for (int j = 0; j < 32; j++) s += q[j] * y->qs[j];
        acc += rd16(b) * y->d * (float)s;
    }
    return acc;
}

/* Row decoders (ggml's dequantize_row_*, same float operations). */
static void deq_q4_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 18, y += 32) {
        const float d = rd16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = ((b[2 + j] & 15) - 8) * d;
            y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 20, y += 32) {
        const float d = rd16(b), m = rd16(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (b[4 + j] & 15) * d + m;
            y[j + 16] = (b[4 + j] >> 4) * d + m;
        }
    }
}

static void deq_q5_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 22, y += 32) {
        const float d = rd16(b);
        const uint32_t qh = rd32(b + 2);
        for (int j = 0; j < 16; j++) {
            const int q0 = ((b[6 + j] & 15) | (((qh >> j) << 4) & 0x10)) - 16;
            const int q1 = ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = q0 * d;
            y[j + 16] = q1 * d;
        }
    }
}

static void deq_q5_1(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 24, y += 32) {
        const float d = rd16(b), m = rd16(b + 2);
        const uint32_t qh = rd32(b + 4);
        for (int j = 0; j < 16; j++) {
            const int q0 = (b[8 + j] & 15) | (((qh >> j) << 4) & 0x10);
            const int q1 = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = q0 * d + m;
            y[j + 16] = q1 * d + m;
        }
    }
}

static void deq_q8_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 34, y += 32) {
        const float d = rd16(b);
        for (int j = 0; j < 32; j++) y[j] = ((const int8_t *)(b + 2))[j] * d;
    }
}

/* ---- K-quants: to integers, then one dot and one decoder ------------------------ */

/* A super-block as integers: q[e] the element's quant (signed, offsets
 * applied), and per group g of 16 elements (e / 16) its integer scale and
 * min; x[e] = d * sc[e/16] * q[e] - dmin * mn[e/16]. */
typedef struct kblock {
    int8_t q[256];
    int sc[16], mn[16];
    float d, dmin;
    bool has_min;
} kblock;

static void kunpack_q2_k(const uint8_t *b, kblock *k)
{
    const uint8_t *sc = b, *qs = b + 16;
    k->d = rd16(b + 80);
    k->dmin = rd16(b + 82);
    k->has_min = true;
    for (int g = 0; g < 16; g++) {
        k->sc[g] = sc[g] & 15;
        k->mn[g] = sc[g] >> 4;
    }
    for (int e = 0; e < 256; e++) /* element e: byte (e/128)*32 + e%32, bits 2*((e%128)/32) */
        k->q[e] = (int8_t)((qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}

static void kunpack_q3_k(const uint8_t *b, kblock *k)
{
    const uint8_t *hm = b, *qs = b + 32;
    k->d = rd16(b + 108);
    k->dmin = 0;
    k->has_min = false;
    lg_kscale_q3(b + 96, k->sc);
    memset(k->mn, 0, sizeof k->mn);
    for (int e = 0; e < 256; e++) {
        const int lo = (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const int bit = (hm[e % 32] >> ((e / 128) * 4 + (e % 128) / 32)) & 1;
        k->q[e] = (int8_t)(lo - (bit ? 0 : 4));
    }
}

static void kunpack_q4_k(const uint8_t *b, kblock *k)
{
    const uint8_t *scales = b + 4, *qs = b + 16;
    k->d = rd16(b);
    k->dmin = rd16(b + 2);
    k->has_min = true;
    for (int j = 0; j < 8; j++) {
        int s, m;
        lg_kscale_min_k4(j, scales, &s, &m);
        k->sc[2 * j] = k->sc[2 * j + 1] = s;
        k->mn[2 * j] = k->mn[2 * j + 1] = m;
    }
    for (int e = 0; e < 256; e++) /* 64-element chunk c = e/64: 32 bytes, low nibbles then high */
        k->q[e] = (int8_t)((qs[(e / 64) * 32 + e % 32] >> (4 * ((e % 64) / 32))) & 15);
}

static void kunpack_q5_k(const uint8_t *b, kblock *k)
{
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    k->d = rd16(b);
    k->dmin = rd16(b + 2);
    k->has_min = true;
    for (int j = 0; j < 8; j++) {
        int s, m;
        lg_kscale_min_k4(j, scales, &s, &m);
        k->sc[2 * j] = k->sc[2 * j + 1] = s;
        k->mn[2 * j] = k->mn[2 * j + 1] = m;
    }
    for (int e = 0; e < 256; e++) { /* the fifth bit: bit e/32 of qh[e % 32] */
        const int lo = (qs[(e / 64) * 32 + e % 32] >> (4 * ((e % 64) / 32))) & 15;
        k->q[e] = (int8_t)(lo | (((qh[e % 32] >> (e / 32)) & 1) << 4));
    }
}

static void kunpack_q6_k(const uint8_t *b, kblock *k)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    k->d = rd16(b + 208);
    k->dmin = 0;
    k->has_min = false;
    for (int g = 0; g < 16; g++) {
        k->sc[g] = sc[g];
        k->mn[g] = 0;
    }
    /* half h = e/128, l = e%32, quarter r = (e%128)/32: low 4 bits from
     * ql[64h + l + 32 (r & 1)] (nibble r >> 1), high 2 from qh[32h + l] bits 2r */
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, l = e % 32, r = (e % 128) / 32;
        const int lo = (ql[64 * h + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 15;
        const int hi = (qh[32 * h + l] >> (2 * r)) & 3;
        k->q[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

typedef void (*kunpack_fn)(const uint8_t *b, kblock *k);

static float kdot(const uint8_t *w, const lg_q8k *y, int64_t nb, int bytes, kunpack_fn unpack)
{
    float acc = 0;
    kblock k;
    for (int64_t i = 0; i < nb; i++, w += bytes, y++) {
        unpack(w, &k);
        int isum = 0, msum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++) s += k.q[e] * y->qs[e];
            isum += k.sc[g] * s;
            msum += k.mn[g] * y->bsums[g];
        }
        acc += k.d * y->d * (float)isum;
        if (k.has_min)
            acc -= k.dmin * y->d * (float)msum;
    }
    return acc;
}

/* x = (d * sc) * q - dmin * mn, per element: ggml's float order for every K-quant
 * (Q3_K and Q6_K have no min term). */
static void kdeq(const uint8_t *w, float *y, int64_t n, int bytes, kunpack_fn unpack)
{
    kblock k;
    for (int64_t i = 0; i < n / 256; i++, w += bytes, y += 256) {
        unpack(w, &k);
        for (int e = 0; e < 256; e++) {
            const float dl = k.d * (float)k.sc[e / 16];
            y[e] = k.has_min ? dl * (float)k.q[e] - k.dmin * (float)k.mn[e / 16] : dl * (float)k.q[e];
        }
    }
}

#define KQUANT(name, bytes)                                                                              \
    static float dot1_##name(const void *w, const void *xq, int64_t nb)                                  \
    {                                                                                                    \
        return kdot(w, xq, nb, bytes, kunpack_##name);                                                   \
    }                                                                                                    \
    static void deq_##name(const void *w, float *y, int64_t n) { kdeq(w, y, n, bytes, kunpack_##name); }
KQUANT(q2_k, 84)
KQUANT(q3_k, 110)
KQUANT(q4_k, 144)
KQUANT(q5_k, 176)
KQUANT(q6_k, 210)
#undef KQUANT

/* The tile form of cpu_quant.h: each pair on its own. */
#define TILE(name)                                                                                        \
    static void dot_##name(const void *w, size_t ldw, int nr, const void *xq, size_t ldxq, int nt,       \
                           int64_t nb, float *out, int64_t ldo)                                           \
    {                                                                                                     \
        for (int t = 0; t < nt; t++)                                                                      \
            for (int r = 0; r < nr; r++)                                                                  \
                out[t * ldo + r] = dot1_##name((const char *)w + (size_t)r * ldw,                         \
                                               (const char *)xq + (size_t)t * ldxq, nb);                  \
    }
TILE(q4_0)
TILE(q4_1)
TILE(q5_0)
TILE(q5_1)
TILE(q8_0)
TILE(q2_k)
TILE(q3_k)
TILE(q4_k)
TILE(q5_k)
TILE(q6_k)
#undef TILE

static const lg_qkern k_c = {
    .isa = "c",
    .quant_a = quant_a,
    .quant_k = quant_k,
    .dot = {[LG_Q4_0] = dot_q4_0, [LG_Q4_1] = dot_q4_1, [LG_Q5_0] = dot_q5_0, [LG_Q5_1] = dot_q5_1,
            [LG_Q8_0] = dot_q8_0, [LG_Q2_K] = dot_q2_k, [LG_Q3_K] = dot_q3_k, [LG_Q4_K] = dot_q4_k,
            [LG_Q5_K] = dot_q5_k, [LG_Q6_K] = dot_q6_k},
    .deq = {[LG_Q4_0] = deq_q4_0, [LG_Q4_1] = deq_q4_1, [LG_Q5_0] = deq_q5_0, [LG_Q5_1] = deq_q5_1,
            [LG_Q8_0] = deq_q8_0, [LG_Q2_K] = deq_q2_k, [LG_Q3_K] = deq_q3_k, [LG_Q4_K] = deq_q4_k,
            [LG_Q5_K] = deq_q5_k, [LG_Q6_K] = deq_q6_k},
};

const lg_qkern *lg_qkern_c(void) { return &k_c; }
