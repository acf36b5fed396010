/*
 * cpu_ckptq.h — the CPU backend's matmul (and row decode, for embed) with a
 * weight in a planar checkpoint layout: F8, F8_A8, F8_A8S, F8_A8G, I4
 * (backend.h, the comment above lg_qtype). See cpu_ckptq.c for the schedule.
 *
 *   for t < T, n < N:
 *     y[t][n] = (accumulate ? y[t][n] : 0) + bias[n] + sum_k x~[t][k] * w[n][k]    (f32 accumulation)
 *   w[n][k] = d[n][g] * e4m3(q[n][k])          (F8*)
 *             d[n][g] * (q[n][k] - z[n][g])    (I4)        g = k / 128
 *   x~ = x (F8, I4), or x rounded to e4m3 as the layout says (W8A8: cpu_fp8act.h,
 *        with F8_A8S's a of row n: a[n][0], every group of a row has the same a)
 */
#ifndef LG_CPU_CKPTQ_H
#define LG_CPU_CKPTQ_H

#include "engine/backend/backend.h"
#include "engine/base/threadpool.h"

/* Caller's scratch, grown on demand and kept between calls (free(xr) by the caller): the rounded
 * activations of W8A8 layouts. */
typedef struct lg_ckptq_scratch {
    float *xr;
    size_t xr_cap; /* floats */
} lg_ckptq_scratch;

/* Row n of the planar tensor W as W.cols f32 values at dst. */
void lg_ckptq_row(lg_tensor W, int64_t n, float *dst);

/* y, x f32 ([T, N] and [T, K], rows ldy and ldx apart); W planar [N, K] (W.rows = N, W.cols = K);
 * bias [N] f32 or NULL; panels: one [4 * K] f32 buffer per pool thread (cpu_matmul.h).
 * Returns 0, or -1 for a W that is not planar or out of memory. */
int lg_cpu_ckptq_matmul(lg_threadpool *tp, float **panels, lg_ckptq_scratch *s, float *y, int64_t ldy,
                        const float *x, int64_t ldx, lg_tensor W, const float *bias, int64_t T, bool accumulate);

#endif
