/*
 * cpu_qmatmul.c — matmul with a quantized W for the CPU backend (see
 * cpu_qmatmul.h), the same kernel for every number of tokens T:
 *
 *   1. each row of x is quantized once to 8-bit blocks (lg_q8a for the
 *      32-element layouts, lg_q8k for the K-quants: cpu_quant.h), split over
 *      the pool's threads when there are many rows;
 *   2. every output is an integer dot product of a W row's blocks with them:
 *        for n < N, t < T:  y[t][n] = (acc ? y[t][n] : 0) + bias[n] + dot(W[n], xq[t])
 *      W is read in its blocks (decode is bound by the bytes of W it
 *      streams: a quarter to a half of f16's), in tiles of LG_QROWS rows
 *      split over the threads; a tile stays in L1 while it meets a run of
 *      LG_QMM_TOKENS tokens, whose quantized rows stay in L2.
 * Each output's float operations are the same whatever T and the split
 * (cpu_quant.h), so a sequence gets the same logits alone or in a batch.
 */
#include "engine/backend/cpu_qmatmul.h"

#include <stdlib.h>

#define LG_QMM_TOKENS 32 /* tokens a W tile meets before the next tile */

typedef struct {
    const float *x;
    char *xq;
    size_t xq_row;
    int64_t ldx, K;
    const lg_qkern *kern;
    bool kq;
} quant_job;

static void quant_task(void *arg, int tid, int64_t t0, int64_t t1)
{
    const quant_job *j = arg;
    for (int64_t t = t0; t < t1; t++) {
        char *dst = j->xq + (size_t)t * j->xq_row;
        if (j->kq)
            j->kern->quant_k(j->x + t * j->ldx, (lg_q8k *)dst, j->K);
        else
            j->kern->quant_a(j->x + t * j->ldx, (lg_q8a *)dst, j->K);
    }
}

typedef struct {
    float *y;
    const char *W, *xq;
    size_t ldw, xq_row;
    lg_qdot_fn dot;
    int64_t nb, N, T, ldy;
    const float *bias;
    bool acc;
} qdot_job;

/* tiles [g0, g1) of LG_QROWS rows */
static void qdot_task(void *arg, int tid, int64_t g0, int64_t g1)
{
    const qdot_job *j = arg;
    float out[LG_QTOKS * LG_QROWS];
    for (int64_t t0 = 0; t0 < j->T; t0 += LG_QMM_TOKENS) {
        const int64_t t1 = t0 + LG_QMM_TOKENS < j->T ? t0 + LG_QMM_TOKENS : j->T;
        for (int64_t g = g0; g < g1; g++) {
            const int64_t n0 = g * LG_QROWS;
            const int nr = (int)(j->N - n0 < LG_QROWS ? j->N - n0 : LG_QROWS);
            const char *w = j->W + (size_t)n0 * j->ldw;
            for (int64_t t = t0; t < t1; t += LG_QTOKS) {
                const int nt = (int)(t1 - t < LG_QTOKS ? t1 - t : LG_QTOKS);
                j->dot(w, j->ldw, nr, j->xq + (size_t)t * j->xq_row, j->xq_row, nt, j->nb, out, LG_QROWS);
                for (int u = 0; u < nt; u++) {
                    float *yr = j->y + (t + u) * j->ldy + n0;
                    for (int r = 0; r < nr; r++) {
                        const float v = out[u * LG_QROWS + r] + (j->bias ? j->bias[n0 + r] : 0.0f);
                        yr[r] = j->acc ? yr[r] + v : v;
                    }
                }
            }
        }
    }
}

int lg_cpu_qmatmul(lg_threadpool *tp, const lg_qkern *kern, lg_qmm_scratch *s, float *y, int64_t ldy, const float *x,
                   int64_t ldx, const void *W, size_t ldw_bytes, lg_qtype q, const float *bias, int64_t T, int64_t N,
                   int64_t K, bool accumulate)
{
    if (q <= LG_QNONE || q >= LG_QTYPE_COUNT || !kern->dot[q])
        return -1;
    const lg_qtype_info qi = lg_qtype_get(q);
    if (K % qi.block_elems)
        return -1;
    const bool kq = lg_qtype_is_k(q);
    const size_t row = kq ? (size_t)(K / LG_QK_BLOCK) * sizeof(lg_q8k) : (size_t)(K / LG_QA_BLOCK) * sizeof(lg_q8a);
    const size_t need = row * (size_t)T;
    if (need > s->xq_cap) {
        void *p = NULL;
        if (posix_memalign(&p, 64, need) != 0)
            return -1;
        free(s->xq);
        s->xq = p;
        s->xq_cap = need;
    }
    quant_job qj = {x, s->xq, row, ldx, K, kern, kq};
    lg_threadpool_for(tp, T, 16, quant_task, &qj);

    qdot_job j = {y, W, s->xq, ldw_bytes, row, kern->dot[q], K / qi.block_elems, N, T, ldy, bias, accumulate};
    /* grain: a task's share of W x tokens above ~4 KB-tokens, so small ops stay on few threads */
    const int64_t tiles = (N + LG_QROWS - 1) / LG_QROWS;
    const int64_t work = (int64_t)ldw_bytes * LG_QROWS * (T < LG_QMM_TOKENS ? T : LG_QMM_TOKENS);
    lg_threadpool_for(tp, tiles, 4096 / work + 1, qdot_task, &j);
    return 0;
}
