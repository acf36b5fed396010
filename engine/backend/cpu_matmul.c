/*
 * cpu_matmul.c — y[T, N] (+)= x[T, K] @ W[N, K]^T (+ bias) for the CPU
 * backend; x and y f32, W f32/f16/bf16 (quantized W: cpu_qmatmul.c),
 * accumulation in f32.
 *
 * Semantics (the plain loop this computes):
 *   for t < T, n < N: y[t][n] = (accumulate ? y[t][n] : 0) + bias[n] + sum_k x[t][k] * W[n][k]
 *
 * Work is split over blocks of 4 rows of W. Each task decodes its 4 W rows
 * to an f32 panel once (so f16/bf16 rows cost one conversion per weight
 * per call, by a row decoder of the dtype), then runs a 4 tokens x 4 rows
 * register-blocked kernel over all tokens: each x load feeds 4 FMAs and
 * each W load feeds 4 tokens. Decode (T small) is bound by reading W once;
 * prefill by FMA throughput.
 * lg_cpu_matmul_rows runs the same kernel over rows that a caller's decoder
 * writes (the checkpoint layouts, cpu_ckptq.c): one kernel, so one order
 * of operations, for every weight format. cpu_ckptq.c's direct path for
 * small steps repeats this kernel's operations per output (AVX-512, K a
 * multiple of 16): a change to their order here changes it there too
 * (test_cpu_ckptq.c compares the two bit for bit).
 * AVX-512 and AVX2 paths (by the compiler's target: -march=native by
 * default); a scalar path for other CPUs.
 */
#include "engine/backend/cpu_matmul.h"

#include <stdlib.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define LG_VEC 16
typedef __m512 vf;
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LG_VEC 8
typedef __m256 vf;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static inline float vsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}
#define VSUM(v) vsum256(v)
#else
#define LG_VEC 0
#endif

float lg_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    int64_t k = 0;
    float d = 0;
#if LG_VEC
    vf acc = VZERO();
    for (; k + LG_VEC <= n; k += LG_VEC) acc = VFMA(VLOAD(a + k), VLOAD(b + k), acc);
    d = VSUM(acc);
#endif
    for (; k < n; k++) d += a[k] * b[k];
    return d;
}

/* Decodes n elements of a W row at src to f32 at dst: one per float dtype. */
typedef void (*lg_rowdec_fn)(const void *src, float *dst, int64_t n);

static void dec_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void dec_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    int64_t k = 0;
#if defined(__F16C__) && defined(__AVX2__)
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + k))));
#endif
    for (; k < n; k++) dst[k] = lg_f16_to_f32(s[k]);
}

static void dec_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    int64_t k = 0;
#if defined(__AVX2__)
    for (; k + 8 <= n; k += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + k)));
        _mm256_storeu_ps(dst + k, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
#endif
    for (; k < n; k++) dst[k] = lg_bf16_to_f32(s[k]);
}

typedef struct {
    float *y;
    const float *x;
    const char *W;
    const float *bias; /* f32 copy of bias or NULL */
    lg_rowdec_fn dec;
    lg_cpu_rowdec_fn rdec; /* instead of W and dec: row n's K values from rdec(rctx, n, ...) */
    const void *rctx;
    int64_t T, N, K, ldy, ldx, ldw_bytes;
    bool acc;
    float **panels; /* per-thread [4 * K] scratch */
} mm_job;

static inline void store4(const mm_job *j, int64_t t, int64_t n, int nr, const float *v)
{
    float *yr = j->y + t * j->ldy + n;
    for (int r = 0; r < nr; r++) {
        float s = v[r] + (j->bias ? j->bias[n + r] : 0.0f);
        yr[r] = j->acc ? yr[r] + s : s;
    }
}

static void mm_task(void *arg, int tid, int64_t b0, int64_t b1)
{
    const mm_job *j = arg;
    const int64_t K = j->K;
    float *P = j->panels[tid];
    for (int64_t b = b0; b < b1; b++) {
        int64_t n0 = b * 4;
        int nr = (int)(j->N - n0 < 4 ? j->N - n0 : 4);
        for (int r = 0; r < 4; r++) {
            if (r < nr && j->rdec)
                j->rdec(j->rctx, n0 + r, P + r * K, K);
            else if (r < nr)
                j->dec(j->W + (n0 + r) * j->ldw_bytes, P + r * K, K);
            else
                memset(P + r * K, 0, (size_t)K * 4);
        }
        const float *w0 = P, *w1 = P + K, *w2 = P + 2 * K, *w3 = P + 3 * K;
        int64_t t = 0;
#if LG_VEC
        const int64_t Kv = K / LG_VEC * LG_VEC;
        for (; t + 4 <= j->T; t += 4) {
            const float *x0 = j->x + t * j->ldx, *x1 = x0 + j->ldx, *x2 = x1 + j->ldx, *x3 = x2 + j->ldx;
            vf a00 = VZERO(), a01 = VZERO(), a02 = VZERO(), a03 = VZERO();
            vf a10 = VZERO(), a11 = VZERO(), a12 = VZERO(), a13 = VZERO();
            vf a20 = VZERO(), a21 = VZERO(), a22 = VZERO(), a23 = VZERO();
            vf a30 = VZERO(), a31 = VZERO(), a32 = VZERO(), a33 = VZERO();
            for (int64_t k = 0; k < Kv; k += LG_VEC) {
                vf W0 = VLOAD(w0 + k), W1 = VLOAD(w1 + k), W2 = VLOAD(w2 + k), W3 = VLOAD(w3 + k);
                vf X = VLOAD(x0 + k);
                a00 = VFMA(X, W0, a00); a01 = VFMA(X, W1, a01); a02 = VFMA(X, W2, a02); a03 = VFMA(X, W3, a03);
                X = VLOAD(x1 + k);
                a10 = VFMA(X, W0, a10); a11 = VFMA(X, W1, a11); a12 = VFMA(X, W2, a12); a13 = VFMA(X, W3, a13);
                X = VLOAD(x2 + k);
                a20 = VFMA(X, W0, a20); a21 = VFMA(X, W1, a21); a22 = VFMA(X, W2, a22); a23 = VFMA(X, W3, a23);
                X = VLOAD(x3 + k);
                a30 = VFMA(X, W0, a30); a31 = VFMA(X, W1, a31); a32 = VFMA(X, W2, a32); a33 = VFMA(X, W3, a33);
            }
            float v[4][4] = {{VSUM(a00), VSUM(a01), VSUM(a02), VSUM(a03)},
                             {VSUM(a10), VSUM(a11), VSUM(a12), VSUM(a13)},
                             {VSUM(a20), VSUM(a21), VSUM(a22), VSUM(a23)},
                             {VSUM(a30), VSUM(a31), VSUM(a32), VSUM(a33)}};
            const float *xs[4] = {x0, x1, x2, x3};
            for (int64_t k = Kv; k < K; k++)
                for (int i = 0; i < 4; i++) {
                    v[i][0] += xs[i][k] * w0[k];
                    v[i][1] += xs[i][k] * w1[k];
                    v[i][2] += xs[i][k] * w2[k];
                    v[i][3] += xs[i][k] * w3[k];
                }
            for (int i = 0; i < 4; i++)
                store4(j, t + i, n0, nr, v[i]);
        }
        for (; t < j->T; t++) {
            const float *x0 = j->x + t * j->ldx;
            vf a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
            for (int64_t k = 0; k < Kv; k += LG_VEC) {
                vf X = VLOAD(x0 + k);
                a0 = VFMA(X, VLOAD(w0 + k), a0);
                a1 = VFMA(X, VLOAD(w1 + k), a1);
                a2 = VFMA(X, VLOAD(w2 + k), a2);
                a3 = VFMA(X, VLOAD(w3 + k), a3);
            }
            float v[4] = {VSUM(a0), VSUM(a1), VSUM(a2), VSUM(a3)};
            for (int64_t k = Kv; k < K; k++) {
                v[0] += x0[k] * w0[k];
                v[1] += x0[k] * w1[k];
                v[2] += x0[k] * w2[k];
                v[3] += x0[k] * w3[k];
            }
            store4(j, t, n0, nr, v);
        }
#else
        for (; t < j->T; t++) {
            const float *x0 = j->x + t * j->ldx;
            float v[4] = {0, 0, 0, 0};
            for (int64_t k = 0; k < K; k++) {
                v[0] += x0[k] * w0[k];
                v[1] += x0[k] * w1[k];
                v[2] += x0[k] * w2[k];
                v[3] += x0[k] * w3[k];
            }
            store4(j, t, n0, nr, v);
        }
#endif
    }
}

static int matmul_dec(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                      const void *W, size_t ldw_bytes, lg_rowdec_fn dec, lg_cpu_rowdec_fn rdec, const void *rctx,
                      const float *bias, int64_t T, int64_t N, int64_t K, bool accumulate)
{
    mm_job j = {
        .y = y, .x = x, .W = W, .bias = bias, .dec = dec, .rdec = rdec, .rctx = rctx, .T = T, .N = N, .K = K,
        .ldy = ldy, .ldx = ldx, .ldw_bytes = (int64_t)ldw_bytes, .acc = accumulate,
        .panels = panels,
    };
    int64_t nblocks = (N + 3) / 4;
    /* grain: keep a task's W share above ~64 KB so small ops don't thrash */
    int64_t grain = (int64_t)(65536 / (4 * (ldw_bytes ? ldw_bytes : 1))) + 1;
    lg_threadpool_for(tp, nblocks, grain, mm_task, &j);
    return 0;
}

int lg_cpu_matmul(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                  const void *W, lg_dtype wdt, int64_t ldw, const float *bias, int64_t T, int64_t N,
                  int64_t K, bool accumulate)
{
    lg_rowdec_fn dec = wdt == LG_F32 ? dec_f32 : wdt == LG_F16 ? dec_f16 : wdt == LG_BF16 ? dec_bf16 : NULL;
    if (!dec)
        return -1;
    return matmul_dec(tp, panels, y, ldy, x, ldx, W, (size_t)ldw * lg_dtype_size(wdt), dec, NULL, NULL, bias, T, N,
                      K, accumulate);
}

int lg_cpu_matmul_rows(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                       lg_cpu_rowdec_fn dec, const void *ctx, size_t row_bytes, const float *bias, int64_t T,
                       int64_t N, int64_t K, bool accumulate)
{
    return matmul_dec(tp, panels, y, ldy, x, ldx, NULL, row_bytes, NULL, dec, ctx, bias, T, N, K, accumulate);
}
