/*
 * cpu_quant_x86.h — the x86 kernels of cpu_quant.h, written once over
 * 256-bit integer vectors and compiled twice: cpu_quant_avx2.c and
 * cpu_quant_avx512.c include this file after defining the one thing that
 * differs between them,
 *
 *   static inline __m256i mul_u8s8(__m256i u, __m256i s);
 *     8 int32 lanes, lane i = sum_{k<4} u[4i + k] * s[4i + k]
 *     (u unsigned bytes <= 128, s signed bytes; AVX2: vpmaddubsw + vpmaddwd,
 *      AVX-512 VNNI: vpdpbusd)
 *
 * and QX_ISA (the table's name) and QX_TABLE (its getter); optionally
 * QX_INSTALL(table), a function that replaces some of the table's kernels
 * (the AVX-512 set's 512-bit dots, cpu_quant_zmm.h). Every weight
 * layout is unpacked to unsigned bytes (the quant plus an offset: Q4_0 + 8,
 * Q5_0 + 16, Q3_K + 4, Q6_K + 32, Q8_0 through the sign trick), multiplied
 * with the activations' int8 by mul_u8s8, and the offsets (and the mins of
 * Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) are taken back out with the activations'
 * block sums: sum (q + o) x = sum q x + o sum x.
 *
 * Semantics are cpu_quant_c.c's; the float additions are in another order.
 * Decoding rows to f32 (the embedding's rows, one a token): SIMD for the
 * 32-element layouts, the portable decoders for the K-quants.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>

#include "engine/backend/cpu_quant.h"
#include "engine/backend/cpu_quant_kscale.h"

static inline float h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline float hsum_ps(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* signed x signed through mul_u8s8: |a| * (b with a's sign); a, b never -128 together */
static inline __m256i mul_s8s8(__m256i a, __m256i b)
{
    return mul_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

#ifndef QX_PF
#define QX_PF 1024
#endif

static inline __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 16 bytes of nibbles -> 32 bytes: low nibbles are elements 0..15, high 16..31 */
static inline __m256i nib32(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
}

/* bit i of the 32 bits at p -> 0x10 in byte i (Q5's fifth bit) */
static inline __m256i bits32_x10(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

/* 32 floats * id -> 32 int8 (round half to even) at q, 4 lane sums of 8 in *s */
static inline void quant32(const float *x, float id, int8_t *q, __m256i *s01, __m256i *s23)
{
    const __m256 iv = _mm256_set1_ps(id);
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), iv));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), iv));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), iv));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), iv));
    *s01 = _mm256_add_epi32(i0, i1);
    *s23 = _mm256_add_epi32(i2, i3);
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
}

static inline float amax_ps(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    return hmax_ps(m);
}

static void qx_quant_a(const float *x, lg_q8a *y, int64_t k)
{
    for (int64_t b = 0; b < k / LG_QA_BLOCK; b++, x += LG_QA_BLOCK, y++) {
        const float d = amax_ps(x, 32) / 127.0f, id = d ? 1.0f / d : 0.0f;
        __m256i s01, s23;
        quant32(x, id, y->qs, &s01, &s23);
        y->d = d;
        y->s = d * (float)hsum_epi32(_mm256_add_epi32(s01, s23));
    }
}

static void qx_quant_k(const float *x, lg_q8k *y, int64_t k)
{
    for (int64_t b = 0; b < k / LG_QK_BLOCK; b++, x += LG_QK_BLOCK, y++) {
        const float d = amax_ps(x, 256) / 127.0f, id = d ? 1.0f / d : 0.0f;
        for (int c = 0; c < 8; c++) {
            __m256i s01, s23;
            quant32(x + 32 * c, id, y->qs + 32 * c, &s01, &s23);
            y->bsums[2 * c] = (int16_t)hsum_epi32(s01);
            y->bsums[2 * c + 1] = (int16_t)hsum_epi32(s23);
        }
        y->d = d;
    }
}

/* ---- 32-element layouts ---------------------------------------------------------------------
 * Per pair (row r, token t) and block i: acc += (d_w d_x) * (the 8 lane sums of wu x), wu the
 * row's quants unpacked to bytes (with an offset, or Q8_0's signed bytes); then, apart,
 * corr = fma(coef_w, s_x, corr) over the blocks; out = hsum(acc) + FIN(corr). A tile unpacks each
 * W block once for its NT tokens and loads each x block once for its NR rows; whatever the tile,
 * each pair runs the same operations in the same order, so the same bits. */

#define QX_DOT32(name, bytes, UNPACK, PROD, COEF, FIN)                                               \
    static inline __attribute__((always_inline)) void qx_tile_##name(                                \
        const uint8_t *w, size_t ldw, const uint8_t *xq, size_t ldxq, int64_t nb, float *out,         \
        int64_t ldo, const int NR, const int NT)                                                     \
    {                                                                                                \
        __m256 acc[LG_QROWS][LG_QTOKS];                                                              \
        for (int r = 0; r < NR; r++)                                                                 \
            for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();                            \
        for (int64_t i = 0; i < nb; i++) {                                                           \
            __m256i wu[LG_QROWS];                                                                    \
            float dw[LG_QROWS];                                                                      \
            for (int r = 0; r < NR; r++) {                                                           \
                const uint8_t *b = w + (size_t)r * ldw + (size_t)i * (bytes);                        \
                _mm_prefetch((const char *)b + QX_PF, _MM_HINT_T0);                                  \
                wu[r] = UNPACK(b);                                                                   \
                dw[r] = h2f(b);                                                                      \
            }                                                                                        \
            for (int t = 0; t < NT; t++) {                                                           \
                const lg_q8a *y = (const lg_q8a *)(xq + (size_t)t * ldxq) + i;                        \
                const __m256i xv = ld256(y->qs);                                                     \
                for (int r = 0; r < NR; r++) {                                                       \
                    const __m256i p = PROD(wu[r], xv);                                               \
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[r] * y->d), acc[r][t]); \
                }                                                                                    \
            }                                                                                        \
        }                                                                                            \
        for (int t = 0; t < NT; t++) {                                                               \
            const lg_q8a *y = (const lg_q8a *)(xq + (size_t)t * ldxq);                               \
            for (int r = 0; r < NR; r++) {                                                           \
                float corr = 0;                                                                      \
                const uint8_t *b = w + (size_t)r * ldw;                                              \
                for (int64_t i = 0; i < nb; i++) corr = COEF(b + (size_t)i * (bytes), y[i].s, corr); \
                out[t * ldo + r] = hsum_ps(acc[r][t]) + FIN(corr);                                   \
            }                                                                                        \
        }                                                                                            \
    }                                                                                                \
    static void qx_dot_##name(const void *w, size_t ldw, int nr, const void *xq, size_t ldxq, int nt, \
                              int64_t nb, float *out, int64_t ldo)                                   \
    {                                                                                                \
        const uint8_t *W = w, *X = xq;                                                               \
        if (nr == LG_QROWS) {                                                                        \
            int t = 0;                                                                               \
            for (; t + 4 <= nt; t += 4) qx_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 4); \
            for (; t + 2 <= nt; t += 2) qx_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 2); \
            for (; t < nt; t++) qx_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 1); \
            return;                                                                                  \
        }                                                                                            \
        for (int t = 0; t < nt; t++)                                                                 \
            for (int r = 0; r < nr; r++)                                                             \
                qx_tile_##name(W + r * ldw, ldw, X + t * ldxq, ldxq, nb, out + t * ldo + r, ldo, 1, 1); \
    }

static inline __m256i un_q4_0(const uint8_t *b) { return nib32(b + 2); }
static inline __m256i un_q4_1(const uint8_t *b) { return nib32(b + 4); }
static inline __m256i un_q5_0(const uint8_t *b) { return _mm256_or_si256(nib32(b + 6), bits32_x10(b + 2)); }
static inline __m256i un_q5_1(const uint8_t *b) { return _mm256_or_si256(nib32(b + 8), bits32_x10(b + 4)); }
static inline __m256i un_q8_0(const uint8_t *b) { return ld256(b + 2); }
static inline __m256i pr_u(__m256i wu, __m256i x) { return mul_u8s8(wu, x); }
static inline __m256i pr_s(__m256i ws, __m256i x) { return mul_s8s8(ws, x); }

/* the offset layouts: corr = sum of d_w s_x, taken times -offset at the end */
static inline float co_d(const uint8_t *b, float sx, float c) { return fmaf(h2f(b), sx, c); }
/* the min layouts: sum of m_w s_x */
static inline float co_m(const uint8_t *b, float sx, float c) { return fmaf(h2f(b + 2), sx, c); }
static inline float co_none(const uint8_t *b, float sx, float c) { return c; }
#define FIN_M8(c) (-8.0f * (c))
#define FIN_M16(c) (-16.0f * (c))
#define FIN_ID(c) (c)

QX_DOT32(q4_0, 18, un_q4_0, pr_u, co_d, FIN_M8)
QX_DOT32(q4_1, 20, un_q4_1, pr_u, co_m, FIN_ID)
QX_DOT32(q5_0, 22, un_q5_0, pr_u, co_d, FIN_M16)
QX_DOT32(q5_1, 24, un_q5_1, pr_u, co_m, FIN_ID)
QX_DOT32(q8_0, 34, un_q8_0, pr_s, co_none, FIN_ID)
#undef QX_DOT32

/* ---- K-quants: 8 chunks of 32 unsigned quants, each two groups of 16 with their scales ---- */

/* sc[16] -> 64 bytes, each scale 4 times: chunk c's 8 lane scales at out + 8 c */
static inline void kscales_x4(const int8_t sc[16], int8_t out[64])
{
    const __m128i s = _mm_loadu_si128((const __m128i *)sc);
    for (int i = 0; i < 4; i++) {
        const char a = (char)(4 * i), b = (char)(4 * i + 1), c = (char)(4 * i + 2), d = (char)(4 * i + 3);
        const __m128i idx = _mm_setr_epi8(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d);
        _mm_storeu_si128((__m128i *)(out + 16 * i), _mm_shuffle_epi8(s, idx));
    }
}

/* isum += (qu . x per lane) * the lane's group scale */
static inline __m256i kacc(__m256i isum, __m256i qu, const int8_t *x, const int8_t *sc4)
{
    const __m256i p = mul_u8s8(qu, ld256(x));
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc4));
    return _mm256_add_epi32(isum, _mm256_mullo_epi32(p, s));
}

/* sum_g coef[g] * bsums[g] */
static inline int kbsum(const int8_t coef[16], const int16_t bsums[16])
{
    const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)coef));
    return hsum_epi32(_mm256_madd_epi16(c, ld256(bsums)));
}

static inline __m256i m8(int v) { return _mm256_set1_epi8((char)v); }
static inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

static float qx_dot1_q2_k(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8k *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 84, y++) {
        int8_t sc[16], mn[16], sc4[64];
        for (int g = 0; g < 16; g++) {
            sc[g] = (int8_t)(b[g] & 15);
            mn[g] = (int8_t)(b[g] >> 4);
        }
        kscales_x4(sc, sc4);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(b + 16 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                isum = kacc(isum, _mm256_and_si256(srl16(q, 2 * j), m8(3)), y->qs + 32 * c, sc4 + 8 * c);
            }
        }
        acc += h2f(b + 80) * y->d * (float)hsum_epi32(isum) - h2f(b + 82) * y->d * (float)kbsum(mn, y->bsums);
    }
    return acc;
}

static float qx_dot1_q3_k(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8k *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 110, y++) {
        int sci[16];
        int8_t sc[16], sc4[64];
        lg_kscale_q3(b + 96, sci);
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)sci[g];
        kscales_x4(sc, sc4);
        const __m256i hm = ld256(b);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = ld256(b + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i lo = _mm256_and_si256(srl16(q, 2 * j), m8(3));
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, c), m8(1)), 2);
                isum = kacc(isum, _mm256_or_si256(lo, hb), y->qs + 32 * c, sc4 + 8 * c);
            }
        }
        acc += h2f(b + 108) * y->d * (float)(hsum_epi32(isum) - 4 * kbsum(sc, y->bsums));
    }
    return acc;
}

static inline void k4_scales(const uint8_t *scales12, int8_t sc[16], int8_t mn[16])
{
    for (int j = 0; j < 8; j++) {
        int s, m;
        lg_kscale_min_k4(j, scales12, &s, &m);
        sc[2 * j] = sc[2 * j + 1] = (int8_t)s;
        mn[2 * j] = mn[2 * j + 1] = (int8_t)m;
    }
}

static float qx_dot1_q4_k(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8k *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 144, y++) {
        int8_t sc[16], mn[16], sc4[64];
        k4_scales(b + 4, sc, mn);
        kscales_x4(sc, sc4);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = ld256(b + 16 + 32 * c);
            isum = kacc(isum, _mm256_and_si256(q, m8(15)), y->qs + 64 * c, sc4 + 16 * c);
            isum = kacc(isum, _mm256_and_si256(srl16(q, 4), m8(15)), y->qs + 64 * c + 32, sc4 + 16 * c + 8);
        }
        acc += h2f(b) * y->d * (float)hsum_epi32(isum) - h2f(b + 2) * y->d * (float)kbsum(mn, y->bsums);
    }
    return acc;
}

static float qx_dot1_q5_k(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8k *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 176, y++) {
        int8_t sc[16], mn[16], sc4[64];
        k4_scales(b + 4, sc, mn);
        kscales_x4(sc, sc4);
        const __m256i qh = ld256(b + 16);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = ld256(b + 48 + 32 * c);
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), m8(1)), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), m8(1)), 4);
            isum = kacc(isum, _mm256_or_si256(_mm256_and_si256(q, m8(15)), h0), y->qs + 64 * c, sc4 + 16 * c);
            isum = kacc(isum, _mm256_or_si256(_mm256_and_si256(srl16(q, 4), m8(15)), h1), y->qs + 64 * c + 32,
                        sc4 + 16 * c + 8);
        }
        acc += h2f(b) * y->d * (float)hsum_epi32(isum) - h2f(b + 2) * y->d * (float)kbsum(mn, y->bsums);
    }
    return acc;
}

static float qx_dot1_q6_k(const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const lg_q8k *y = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++, b += 210, y++) {
        const int8_t *sc = (const int8_t *)(b + 192);
        int8_t sc4[64];
        kscales_x4(sc, sc4);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = ld256(b + 64 * h), l1 = ld256(b + 64 * h + 32), qh = ld256(b + 128 + 32 * h);
            const int c = 4 * h;
            const __m256i r0 = _mm256_or_si256(_mm256_and_si256(l0, m8(15)),
                                               _mm256_slli_epi16(_mm256_and_si256(qh, m8(3)), 4));
            const __m256i r1 = _mm256_or_si256(_mm256_and_si256(l1, m8(15)),
                                               _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2), m8(3)), 4));
            const __m256i r2 = _mm256_or_si256(_mm256_and_si256(srl16(l0, 4), m8(15)),
                                               _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 4), m8(3)), 4));
            const __m256i r3 = _mm256_or_si256(_mm256_and_si256(srl16(l1, 4), m8(15)),
                                               _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 6), m8(3)), 4));
            isum = kacc(isum, r0, y->qs + 32 * c, sc4 + 8 * c);
            isum = kacc(isum, r1, y->qs + 32 * (c + 1), sc4 + 8 * (c + 1));
            isum = kacc(isum, r2, y->qs + 32 * (c + 2), sc4 + 8 * (c + 2));
            isum = kacc(isum, r3, y->qs + 32 * (c + 3), sc4 + 8 * (c + 3));
        }
        acc += h2f(b + 208) * y->d * (float)(hsum_epi32(isum) - 32 * kbsum(sc, y->bsums));
    }
    return acc;
}

/* the K-quants' tile form: a row at a time */
#define QX_KTILE(name)                                                                                  \
    static void qx_dot_##name(const void *w, size_t ldw, int nr, const void *xq, size_t ldxq, int nt,    \
                              int64_t nb, float *out, int64_t ldo)                                      \
    {                                                                                                   \
        for (int t = 0; t < nt; t++)                                                                    \
            for (int r = 0; r < nr; r++)                                                                \
                out[t * ldo + r] = qx_dot1_##name((const char *)w + (size_t)r * ldw,                   \
                                                  (const char *)xq + (size_t)t * ldxq, nb);             \
    }
QX_KTILE(q2_k)
QX_KTILE(q3_k)
QX_KTILE(q4_k)
QX_KTILE(q5_k)
QX_KTILE(q6_k)
#undef QX_KTILE

/* ---- row decoders of the 32-element layouts: y = (q - o) * d  or  q * d + m ---------------- */

/* 32 unsigned bytes -> 4 x 8 floats (q - off) * d (+ m when add) */
static inline void deq32(__m256i q, int off, float d, float m, bool add, float *y)
{
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
    for (int k = 0; k < 4; k++) {
        const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(part[k]), _mm256_set1_epi32(off));
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), dv);
        if (add)
            f = _mm256_add_ps(f, mv);
        _mm256_storeu_ps(y + 8 * k, f);
    }
}

static void qx_deq_q4_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 18, y += 32) deq32(nib32(b + 2), 8, h2f(b), 0, false, y);
}
static void qx_deq_q4_1(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 20, y += 32) deq32(nib32(b + 4), 0, h2f(b), h2f(b + 2), true, y);
}
static void qx_deq_q5_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 22, y += 32)
        deq32(_mm256_or_si256(nib32(b + 6), bits32_x10(b + 2)), 16, h2f(b), 0, false, y);
}
static void qx_deq_q5_1(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 24, y += 32)
        deq32(_mm256_or_si256(nib32(b + 8), bits32_x10(b + 4)), 0, h2f(b), h2f(b + 2), true, y);
}
static void qx_deq_q8_0(const void *w, float *y, int64_t n)
{
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / 32; i++, b += 34, y += 32) {
        const __m256 dv = _mm256_set1_ps(h2f(b));
        for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k)));
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(v), dv));
        }
    }
}

static lg_qkern g_table;
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    g_table = *lg_qkern_c(); /* the K-quants' row decoders stay the portable ones */
    g_table.isa = QX_ISA;
    g_table.quant_a = qx_quant_a;
    g_table.quant_k = qx_quant_k;
    g_table.dot[LG_Q4_0] = qx_dot_q4_0;
    g_table.dot[LG_Q4_1] = qx_dot_q4_1;
    g_table.dot[LG_Q5_0] = qx_dot_q5_0;
    g_table.dot[LG_Q5_1] = qx_dot_q5_1;
    g_table.dot[LG_Q8_0] = qx_dot_q8_0;
    g_table.dot[LG_Q2_K] = qx_dot_q2_k;
    g_table.dot[LG_Q3_K] = qx_dot_q3_k;
    g_table.dot[LG_Q4_K] = qx_dot_q4_k;
    g_table.dot[LG_Q5_K] = qx_dot_q5_k;
    g_table.dot[LG_Q6_K] = qx_dot_q6_k;
    g_table.deq[LG_Q4_0] = qx_deq_q4_0;
    g_table.deq[LG_Q4_1] = qx_deq_q4_1;
    g_table.deq[LG_Q5_0] = qx_deq_q5_0;
    g_table.deq[LG_Q5_1] = qx_deq_q5_1;
    g_table.deq[LG_Q8_0] = qx_deq_q8_0;
#ifdef QX_INSTALL
    QX_INSTALL(&g_table);
#endif
}

const lg_qkern *QX_TABLE(void)
{
    pthread_once(&g_table_once, table_init);
    return &g_table;
}
