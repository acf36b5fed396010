/*
 * cpu_qmatmul.h — the CPU backend's matmul with a quantized W (backend.h
 * lg_qtype): y[T, N] (+)= x[T, K] @ W[N, K]^T (+ bias), x and y f32, W rows
 * of blocks ldw_bytes apart, x quantized on the fly (cpu_quant.h). See
 * cpu_qmatmul.c for the schedule.
 */
#ifndef LG_CPU_QMATMUL_H
#define LG_CPU_QMATMUL_H

#include "engine/backend/cpu_quant.h"
#include "engine/base/threadpool.h"

/* Caller's scratch, grown on demand and kept between calls (freed by the
 * caller with free()): xq holds the step's quantized activations. */
typedef struct lg_qmm_scratch {
    void *xq;
    size_t xq_cap;
} lg_qmm_scratch;

/* Returns 0, or -1 for a layout kern has no dot for or K not a multiple of its block. */
int lg_cpu_qmatmul(lg_threadpool *tp, const lg_qkern *kern, lg_qmm_scratch *s, float *y, int64_t ldy, const float *x,
                   int64_t ldx, const void *W, size_t ldw_bytes, lg_qtype q, const float *bias, int64_t T, int64_t N,
                   int64_t K, bool accumulate);

#endif
