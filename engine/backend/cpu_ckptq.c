/*
 * cpu_ckptq.c — matmul with a weight in a planar checkpoint layout (F8,
 * F8_A8, F8_A8S, F8_A8G, I4; math in cpu_ckptq.h) for the CPU backend.
 *
 * Schedule: the f32 GEMM of cpu_matmul.c (lg_cpu_matmul_rows) with this
 * file's row decoders: each task decodes 4 weight rows at a time into its
 * f32 panel, group by group (F8: the e4m3 byte to f32 through f16, times
 * the group's d; I4: a 16-entry table d * (q - z) per group indexed by the
 * nibbles), then meets every token with them in the 4 tokens x 4 rows
 * register-blocked kernel. Each weight is read and decoded once per call,
 * so decode (T = 1) streams the planes once (1.03 bytes a weight for F8*,
 * 0.53 for I4, against f16's 2). Steps of up to 4 tokens with K a multiple
 * of 16 take the direct path on AVX-512 instead: the same operations with
 * the decoded rows kept in registers, no panel in memory (below). The activations of the W8A8 layouts are
 * rounded first, once per row (cpu_fp8act.h), into scratch that the GEMM
 * then reads as its x. F8_A8S's rows may carry different activation scales
 * (fused q,k,v or gate,up rows of tensors quantized apart): the rows are
 * taken in runs of one scale, x rounded once per run, one GEMM per run.
 *
 * Every decoded weight is exact (an e4m3 or a 4-bit integer times its scale,
 * one f32 product) in every instruction set, and each output is one GEMM
 * kernel's fixed sequence of operations over k, whatever T, the 4-row block
 * it falls in and the thread that runs it: a sequence's outputs are the same
 * bits alone or in any batch.
 *
 * Limits: whole tensors only (backend.h); an F8_A8S row's scale is read
 * from its first group (the layout keeps it the same for every group).
 */
#include "engine/backend/cpu_ckptq.h"

#include "engine/backend/cpu_fp8act.h"
#include "engine/backend/cpu_matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define G 128 /* elements of a group */

/* The vector paths widen e4m3 through f16, whose hardware conversion is
 * exact: e4m3's bits placed in an f16 (sign to bit 15, exponent and mantissa
 * to bits 7..13: f16's exponent field then holds e4m3's, subnormals
 * included) read as 2^-8 times the e4m3 value, so the weight is
 * (value * 2^-8) * (d * 2^8): the exact product value * d rounded once, the
 * scalar path's bits (d * 2^8 is exact below 2^119; larger d take the
 * scalar path). The NaN codes are set apart. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
static inline __m512 e4m3x16_lo(const uint8_t *p) /* 16 codes -> values * 2^-8 */
{
    const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)); /* sign-extended */
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16((short)0xBF80));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(v, _mm256_set1_epi16(0x7F)),
                                                  _mm256_set1_epi16(0x7F));
    return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan, _mm512_set1_ps(NAN));
}
#define LG_F8_VEC 16
/* 32 codes, none of them NaN (the caller checked: no_nan_code), -> two vectors of values * 2^-8:
 * the widening of e4m3x16_lo done 32 lanes at a time */
static inline void e4m3x32_lo(const uint8_t *p, __m512 *lo, __m512 *hi)
{
    const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
    const __m512i h = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16((short)0xBF80));
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}
/* whether none of n codes (a multiple of 16) is a NaN (0x7F, 0xFF) */
static inline bool no_nan_code(const uint8_t *p, int64_t n)
{
    __mmask64 m = 0;
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
        const __m512i v = _mm512_loadu_si512((const void *)(p + k));
        m |= _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(0x7F)) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8((char)0xFF));
    }
    for (; k < n; k += 16) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(p + k));
        m |= _mm_cmpeq_epi8_mask(v, _mm_set1_epi8(0x7F)) | _mm_cmpeq_epi8_mask(v, _mm_set1_epi8((char)0xFF));
    }
    return m == 0;
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
static inline __m256 e4m3x8_lo(const uint8_t *p) /* 8 codes -> values * 2^-8 */
{
    const __m128i v = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(v, 7), _mm_set1_epi16((short)0xBF80));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(v, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7F));
    return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
}
#define LG_F8_VEC 8
#else
#define LG_F8_VEC 0
#endif

/* n <= 128 elements of an F8 group: dst[k] = d * e4m3(q[k]) */
static void dec_f8_group(const uint8_t *q, float d, float *dst, int64_t n)
{
    int64_t k = 0;
#if LG_F8_VEC == 16
    if (fabsf(d) < 0x1p119f) {
        const __m512 vd = _mm512_set1_ps(d * 256.0f);
        for (; k + 16 <= n; k += 16) _mm512_storeu_ps(dst + k, _mm512_mul_ps(e4m3x16_lo(q + k), vd));
    }
#elif LG_F8_VEC == 8
    if (fabsf(d) < 0x1p119f) {
        const __m256 vd = _mm256_set1_ps(d * 256.0f);
        for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, _mm256_mul_ps(e4m3x8_lo(q + k), vd));
    }
#endif
    for (; k < n; k++) dst[k] = lg_e4m3_value(q[k]) * d;
}

/* n <= 128 elements of an I4 group (packed two a byte, low nibble first): dst[k] = lut[q[k]],
 * lut[i] = d * (i - z) */
static void dec_i4_group(const uint8_t *qb, float d, uint8_t z, float *dst, int64_t n)
{
    float lut[16];
    for (int i = 0; i < 16; i++) lut[i] = d * (float)(i - (int)z);
    int64_t k = 0;
#if defined(__AVX512F__)
    const __m512 vl = _mm512_loadu_ps(lut);
    const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    for (; k + 16 <= n; k += 16) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)(qb + k / 2));
        __m512i v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)); /* b0 b0 b1 b1 ... */
        v = _mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32(15));
        _mm512_storeu_ps(dst + k, _mm512_permutexvar_ps(v, vl));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 lo = _mm256_loadu_ps(lut), hi = _mm256_loadu_ps(lut + 8);
    const __m256i sh = _mm256_set_epi32(4, 0, 4, 0, 4, 0, 4, 0);
    for (; k + 8 <= n; k += 8) {
        int32_t w;
        memcpy(&w, qb + k / 2, 4);
        const __m128i b = _mm_cvtsi32_si128(w);
        __m256i v = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
        v = _mm256_and_si256(_mm256_srlv_epi32(v, sh), _mm256_set1_epi32(15));
        const __m256 hsel = _mm256_castsi256_ps(_mm256_slli_epi32(v, 28)); /* bit 3: the upper half */
        _mm256_storeu_ps(dst + k, _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, v),
                                                   _mm256_permutevar8x32_ps(hi, v), hsel));
    }
#endif
    for (; k < n; k++) dst[k] = lut[(qb[k / 2] >> (4 * (k & 1))) & 15];
}

/* A planar W seen from the GEMM: row r of a call is W's row row0 + r. */
typedef struct {
    lg_qplanes p;
    lg_qtype q;
    int64_t row0;
} ckpt_rows;

static void dec_row(const void *ctx, int64_t r, float *dst, int64_t K)
{
    const ckpt_rows *c = ctx;
    const int64_t n = c->row0 + r, nb = c->p.nb;
    const uint8_t *q = c->p.q + (size_t)n * (size_t)c->p.q_row;
    for (int64_t g = 0; g < nb; g++) {
        const int64_t k0 = g * G, len = K - k0 < G ? K - k0 : G;
        if (c->q == LG_QI4)
            dec_i4_group(q + g * (G / 2), lg_f16_to_f32(((const uint16_t *)c->p.d)[n * nb + g]), c->p.z[n * nb + g],
                         dst + k0, len);
        else
            dec_f8_group(q + g * G, ((const float *)c->p.d)[n * nb + g], dst + k0, len);
    }
}

void lg_ckptq_row(lg_tensor W, int64_t n, float *dst)
{
    const ckpt_rows c = {lg_qplanes_of(W), W.q, 0};
    dec_row(&c, n, dst, W.cols);
}

#if LG_F8_VEC == 16
/* The direct path, for a step of T <= 4 tokens with K a multiple of 16 on
 * AVX-512 (decode steps): 4 weight rows are decoded 16 elements at a time
 * into registers and meet the tokens there, with no panel in memory (a
 * 4 x 4096 f32 panel does not fit L1; its stores and loads cost more than
 * the decode). Its operations per output are those of cpu_matmul.c's kernel
 * on the decoded panel (16 lanes of fmadd(x, w, acc) over k in order, then
 * _mm512_reduce_add_ps, then + bias, then + y), so a token's outputs are the
 * same bits here and in a larger step (test_cpu_ckptq.c holds them equal). */
typedef struct {
    const ckpt_rows *c;
    float *y;
    const float *x, *bias;
    int64_t T, N, K, ldy, ldx;
    bool acc;
} direct_job;

static inline __attribute__((always_inline)) void direct_fma(__m512 acc[4][4], const __m512 W[4], const float *x,
                                                             int64_t ldx, const int nt)
{
    for (int u = 0; u < nt; u++) {
        const __m512 X = _mm512_loadu_ps(x + u * ldx);
        for (int r = 0; r < 4; r++) acc[u][r] = _mm512_fmadd_ps(X, W[r], acc[u][r]);
    }
}

static inline __attribute__((always_inline)) void direct_block(const direct_job *j, int64_t n0, int nr, const int nt)
{
    const ckpt_rows *c = j->c;
    const int64_t nb = c->p.nb, K = j->K;
    const bool i4 = c->q == LG_QI4;
    __m512 acc[4][4];
    for (int u = 0; u < nt; u++)
        for (int r = 0; r < 4; r++) acc[u][r] = _mm512_setzero_ps();
    int64_t row[4];
    const uint8_t *q[4];
    for (int r = 0; r < 4; r++) {
        row[r] = c->row0 + n0 + (r < nr ? r : 0); /* rows past N repeat row n0; their sums are dropped */
        q[r] = c->p.q + (size_t)row[r] * (size_t)c->p.q_row;
    }
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    for (int64_t g = 0; g < nb; g++) {
        const int64_t k0 = g * G, k1 = K - k0 < G ? K : k0 + G;
        __m512 sc[4]; /* I4: the group's table d * (i - z); F8: d * 2^8 */
        float d[4];
        for (int r = 0; r < 4; r++) {
            if (i4) {
                d[r] = lg_f16_to_f32(((const uint16_t *)c->p.d)[row[r] * nb + g]);
                sc[r] = _mm512_mul_ps(_mm512_set1_ps(d[r]),
                                      _mm512_sub_ps(iota, _mm512_set1_ps((float)c->p.z[row[r] * nb + g])));
            } else {
                d[r] = ((const float *)c->p.d)[row[r] * nb + g];
                sc[r] = _mm512_set1_ps(d[r] * 256.0f);
            }
        }
        if (i4) {
            for (int64_t k = k0; k < k1; k += 16) {
                __m512 W[4];
                for (int r = 0; r < 4; r++) {
                    const __m128i b = _mm_loadl_epi64((const __m128i *)(q[r] + k / 2));
                    __m512i v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
                    v = _mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32(15));
                    W[r] = _mm512_permutexvar_ps(v, sc[r]);
                }
                direct_fma(acc, W, j->x + k, j->ldx, nt);
            }
        } else if (fabsf(d[0]) < 0x1p119f && fabsf(d[1]) < 0x1p119f && fabsf(d[2]) < 0x1p119f &&
                   fabsf(d[3]) < 0x1p119f && no_nan_code(q[0] + k0, k1 - k0) && no_nan_code(q[1] + k0, k1 - k0) &&
                   no_nan_code(q[2] + k0, k1 - k0) && no_nan_code(q[3] + k0, k1 - k0)) {
            int64_t k = k0;
            for (; k + 32 <= k1; k += 32) {
                __m512 W[4], W2[4];
                for (int r = 0; r < 4; r++) {
                    e4m3x32_lo(q[r] + k, &W[r], &W2[r]);
                    W[r] = _mm512_mul_ps(W[r], sc[r]);
                    W2[r] = _mm512_mul_ps(W2[r], sc[r]);
                }
                direct_fma(acc, W, j->x + k, j->ldx, nt);
                direct_fma(acc, W2, j->x + k + 16, j->ldx, nt);
            }
            for (; k < k1; k += 16) {
                __m512 W[4];
                for (int r = 0; r < 4; r++) W[r] = _mm512_mul_ps(e4m3x16_lo(q[r] + k), sc[r]);
                direct_fma(acc, W, j->x + k, j->ldx, nt);
            }
        } else { /* a scale past 2^119 or a NaN code: the group's rows decoded by dec_f8_group */
            float w[4][G];
            for (int r = 0; r < 4; r++) dec_f8_group(q[r] + k0, d[r], w[r], k1 - k0);
            for (int64_t k = k0; k < k1; k += 16) {
                __m512 W[4];
                for (int r = 0; r < 4; r++) W[r] = _mm512_loadu_ps(w[r] + (k - k0));
                direct_fma(acc, W, j->x + k, j->ldx, nt);
            }
        }
    }
    for (int u = 0; u < nt; u++) {
        float *yr = j->y + u * j->ldy + n0;
        for (int r = 0; r < nr; r++) {
            const float s = _mm512_reduce_add_ps(acc[u][r]) + (j->bias ? j->bias[n0 + r] : 0.0f);
            yr[r] = j->acc ? yr[r] + s : s;
        }
    }
}

static void direct_task(void *arg, int tid, int64_t b0, int64_t b1)
{
    const direct_job *j = arg;
    (void)tid;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t n0 = b * 4;
        const int nr = (int)(j->N - n0 < 4 ? j->N - n0 : 4);
        switch (j->T) {
        case 1: direct_block(j, n0, nr, 1); break;
        case 2: direct_block(j, n0, nr, 2); break;
        case 3: direct_block(j, n0, nr, 3); break;
        default: direct_block(j, n0, nr, 4); break;
        }
    }
}
#endif

/* y (+)= x W^T over the rows of c (from c->row0), N of them: the direct path where it applies, else the GEMM. */
static int rows_matmul(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                       const ckpt_rows *c, size_t row_bytes, const float *bias, int64_t T, int64_t N, int64_t K,
                       bool accumulate)
{
#if LG_F8_VEC == 16
    if (T >= 1 && T <= 4 && K % 16 == 0) {
        direct_job j = {c, y, x, bias, T, N, K, ldy, ldx, accumulate};
        lg_threadpool_for(tp, (N + 3) / 4, (int64_t)(65536 / (4 * row_bytes)) + 1, direct_task, &j);
        return 0;
    }
#endif
    return lg_cpu_matmul_rows(tp, panels, y, ldy, x, ldx, dec_row, c, row_bytes, bias, T, N, K, accumulate);
}

typedef struct {
    lg_qtype q;
    float a;
    const float *x;
    float *xr;
    int64_t ldx, K;
} act_job;

static void act_task(void *arg, int tid, int64_t t0, int64_t t1)
{
    const act_job *j = arg;
    (void)tid;
    for (int64_t t = t0; t < t1; t++) lg_fp8act_row(j->q, j->a, j->x + t * j->ldx, j->K, NULL, NULL, j->xr + t * j->K);
}

static float a_of(const lg_qplanes *p, int64_t n) { return p->a[n * p->nb]; }

static bool same_bits(float u, float v) { return memcmp(&u, &v, sizeof u) == 0; }

int lg_cpu_ckptq_matmul(lg_threadpool *tp, float **panels, lg_ckptq_scratch *s, float *y, int64_t ldy,
                        const float *x, int64_t ldx, lg_tensor W, const float *bias, int64_t T, bool accumulate)
{
    if (!lg_qtype_is_planar(W.q) || W.stride != W.cols)
        return -1;
    const int64_t N = W.rows, K = W.cols;
    ckpt_rows c = {lg_qplanes_of(W), W.q, 0};
    const size_t row_bytes = (size_t)c.p.nb * (size_t)lg_qtype_get(W.q).block_bytes;
    if (!lg_qtype_is_w8a8(W.q))
        return rows_matmul(tp, panels, y, ldy, x, ldx, &c, row_bytes, bias, T, N, K, accumulate);

    const size_t need = (size_t)T * (size_t)K;
    if (need > s->xr_cap) {
        float *p = NULL;
        if (posix_memalign((void **)&p, 64, need * sizeof(float)) != 0)
            return -1;
        free(s->xr);
        s->xr = p;
        s->xr_cap = need;
    }
    act_job aj = {W.q, 0.0f, x, s->xr, ldx, K};
    if (W.q != LG_QF8_A8S) {
        lg_threadpool_for(tp, T, 4, act_task, &aj);
        return rows_matmul(tp, panels, y, ldy, s->xr, K, &c, row_bytes, bias, T, N, K, accumulate);
    }
    /* F8_A8S: runs of rows with one activation scale */
    for (int64_t n0 = 0, n1; n0 < N; n0 = n1) {
        aj.a = a_of(&c.p, n0);
        for (n1 = n0 + 1; n1 < N && same_bits(a_of(&c.p, n1), aj.a); n1++) {}
        lg_threadpool_for(tp, T, 4, act_task, &aj);
        c.row0 = n0;
        if (rows_matmul(tp, panels, y + n0, ldy, s->xr, K, &c, row_bytes, bias ? bias + n0 : NULL, T,
                               n1 - n0, K, accumulate) != 0)
            return -1;
    }
    return 0;
}
