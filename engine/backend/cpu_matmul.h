/*
 * cpu_matmul.h — the CPU backend's GEMM for float weights (see cpu_matmul.c
 * for the math; quantized weights: cpu_qmatmul.h). panels: one scratch
 * buffer per pool thread, each >= 4 * K floats.
 */
#ifndef LG_CPU_MATMUL_H
#define LG_CPU_MATMUL_H

#include "engine/base/common.h"
#include "engine/base/threadpool.h"

/* W of dtype wdt (F32, F16, BF16; -1 for another), rows ldw elements apart. */
int lg_cpu_matmul(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                  const void *W, lg_dtype wdt, int64_t ldw, const float *bias, int64_t T, int64_t N,
                  int64_t K, bool accumulate);

/* The same GEMM over W rows that dec writes: dec(ctx, n, dst, K) stores row n's K values (n < N) to dst
 * (a thread's panel; called from the pool's threads, each row once per call). row_bytes: the bytes a
 * row reads, for the split's grain. */
typedef void (*lg_cpu_rowdec_fn)(const void *ctx, int64_t n, float *dst, int64_t K);
int lg_cpu_matmul_rows(lg_threadpool *tp, float **panels, float *y, int64_t ldy, const float *x, int64_t ldx,
                       lg_cpu_rowdec_fn dec, const void *ctx, size_t row_bytes, const float *bias, int64_t T,
                       int64_t N, int64_t K, bool accumulate);

/* sum_k a[k] * b[k], k < n, vectorized (the attention's q.k: lanes summed in a fixed order). */
float lg_cpu_dot_f32(const float *a, const float *b, int64_t n);

#endif
