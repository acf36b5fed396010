/*
 * logprobs.cu — the device sampler's logprobs (backend.h lg_logprob_row),
 * launched by cu_sample right after the tokens are drawn, for the rows whose
 * lg_sample_row.logprobs is set; without it a request that asks OpenAI's
 * `logprobs` had the whole batch's logits downloaded ([rows, V] f32 each
 * step) and each asking row's log-softmax computed on the host.
 *
 * One block of 1024 threads per row, two sweeps of the row (L2-resident:
 * the lm_head matmul wrote it and the sampler just read it):
 *   1. log-sum-exp: each thread keeps an online (max m, sum s) pair, s in
 *      double of float exp(x - m) terms, rescaled when m rises; the warps'
 *      and then the block's pairs merge in a fixed order (deterministic).
 *      L = M + log(S). It equals the host's (lg_logprobs, sampling.c: one max,
 *      then a double sum of exp(x - max)) to about 1e-6: the terms differ
 *      by the rounding of x - m to float and of expf.
 *   2. top n (only when n = top_logprobs > 0; n <= LG_LOGPROB_TOP = 20):
 *      thr = the n-th largest of the 32 warps' maxima from sweep 1 (a
 *      bitonic sort in one warp): n distinct logits are >= thr, so nothing
 *      below it can be among the n best (or fewer than n warps hold a
 *      logit above -inf, thr is -inf and every non-NaN logit is tested). Each warp keeps a sorted list of
 *      its best (logit desc, id asc) in lanes 0..19; every batch of 32
 *      values is tested (>= thr and before the list's last entry) by one
 *      ballot, and the few that pass are inserted one at a time by
 *      shuffles. Then warp 0 merges the 32 warps' lists, n rounds of a
 *      warp-wide best of the list heads. The order and the ids are exact:
 *      they depend on comparisons only. (Without thr, every warp inserted
 *      ~100 values of a 32,000 row, 150-odd cycles each: 32 us a row on
 *      the H100, against the sampler's 6.)
 * NaN logits are never listed, and they (like +inf, or a row of only -inf)
 * make L NaN, as on the host.
 */
#include "kernels/sample_ops.cuh"

#include <limits.h>

#define LP_THREADS 1024
#define LP_WARPS (LP_THREADS / 32)
#define LP_U 8 /* values per lane in flight per sweep step */
/* Each warp sweeps contiguous runs of 32 * LP_U ids. sample.cu's row_sweep
 * (lane l of warp w at ids w * 32 + l + k * 1024) was tried here: all the
 * same results, 11-24% slower per sampler + logprobs call at 32,000-151,936
 * ids, faster at 1,000 (H100, docs/benchmarks.md, Tried, not kept,
 * 2026-11-23). */
#define LP_FULL 0xffffffffu

/* (v, id) before (w, jd): larger logit first, then lower id; NaN never before anything */
__device__ __forceinline__ bool lp_before(float v, int id, float w, int jd) { return v > w || (v == w && id < jd); }

/* x's (max, sum exp(x - max)) pair merged into (m, s) */
__device__ __forceinline__ void lp_lse_merge(float &m, double &s, float m2, double s2)
{
    const float M = fmaxf(m, m2); /* NaN never reaches m: NaN values poison s, not m */
    if (M == -INFINITY) { /* no finite value on either side: each s is 0, or NaN (kept) */
        s += s2;
        return;
    }
    s = s * (double)expf(m - M) + s2 * (double)expf(m2 - M);
    m = M;
}

/* the 32 lanes' (m, s) pairs merged over a fixed butterfly: every lane ends with the warp's pair, the same
 * floats every run */
__device__ __forceinline__ void lp_lse_warp(float &m, double &s)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float m2 = __shfl_xor_sync(LP_FULL, m, o);
        const double s2 = __shfl_xor_sync(LP_FULL, s, o);
        lp_lse_merge(m, s, m2, s2);
    }
}

__global__ void __launch_bounds__(LP_THREADS)
logprobs_kernel(lg_logprob_row *out, const float *logits, int V, const lg_sample_row *rows, const int32_t *ids)
{
    const lg_sample_row p = rows[blockIdx.x];
    if (!p.logprobs)
        return;
    __shared__ float s_v[LP_WARPS][LG_LOGPROB_TOP];
    __shared__ int s_id[LP_WARPS][LG_LOGPROB_TOP];
    __shared__ float s_m[LP_WARPS];
    __shared__ double s_s[LP_WARPS];
    __shared__ float s_thr;
    __shared__ float b_v[LG_LOGPROB_TOP];
    __shared__ int b_id[LG_LOGPROB_TOP];
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const float *x = logits + (size_t)blockIdx.x * (size_t)V;

    /* pass 1: the log-sum-exp pairs, and the warps' maxima */
    float m = -INFINITY;
    double s = 0.0;
    for (int b0 = w * 32 * LP_U; b0 < V; b0 += LP_THREADS * LP_U) {
        float v[LP_U];
#pragma unroll
        for (int u = 0; u < LP_U; u++) {
            const int i = b0 + u * 32 + lane;
            v[u] = i < V ? x[i] : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < LP_U; u++) {
            const float c = v[u];
            if (c != -INFINITY) { /* -inf adds 0 (and must not meet m = -inf: NaN); past V: -inf */
                if (c > m) {
                    s *= (double)expf(m - c); /* m = -inf: s was 0 (or NaN, which stays) */
                    m = c;
                }
                s += (double)expf(c - m); /* NaN or +inf: NaN, as the host's sum */
            }
        }
    }
    lp_lse_warp(m, s);
    if (lane == 0) {
        s_m[w] = m; /* the warp's largest logit (NaN never; -inf: none above -inf) */
        s_s[w] = s;
    }
    __syncthreads();
    const int n = min(max(p.top_logprobs, 0), LG_LOGPROB_TOP);

    if (n > 0) {
        /* thr: the n-th largest of the 32 warp maxima, n distinct logits >= it, so no logit
         * below it is among the row's n best: pass 2 tests only logits >= thr (a warp with
         * nothing above -inf counts -inf: then thr = -inf, which lets every non-NaN through) */
        if (w == 0) {
            float t = s_m[lane];
#pragma unroll
            for (int k = 2; k <= 32; k <<= 1) /* bitonic sort, descending */
#pragma unroll
                for (int j = k >> 1; j > 0; j >>= 1) {
                    const float o = __shfl_xor_sync(LP_FULL, t, j);
                    t = ((lane & j) == 0) == ((lane & k) == 0 || k == 32) ? fmaxf(t, o) : fminf(t, o);
                }
            t = __shfl_sync(LP_FULL, t, n - 1);
            if (lane == 0)
                s_thr = t;
        }
        __syncthreads();
        const float thr = s_thr;
        /* pass 2: each warp's sorted list of its best (at most 20) logits >= thr */
        float lv = -INFINITY; /* lane j < 20: the warp's j-th best; (-inf, INT_MAX) is an empty entry */
        int lid = INT_MAX;
        float tv = -INFINITY; /* the list's last entry, on every lane */
        int tid_last = INT_MAX;
        for (int b0 = w * 32 * LP_U; b0 < V; b0 += LP_THREADS * LP_U) {
            float v[LP_U];
#pragma unroll
            for (int u = 0; u < LP_U; u++) {
                const int i = b0 + u * 32 + lane;
                v[u] = i < V ? x[i] : NAN;
            }
#pragma unroll
            for (int u = 0; u < LP_U; u++) {
                const int i = b0 + u * 32 + lane;
                const float c = v[u]; /* NaN (or past V) passes no test */
                unsigned mask = __ballot_sync(LP_FULL, c >= thr && lp_before(c, i, tv, tid_last));
                while (mask) {
                    const int src = __ffs(mask) - 1;
                    mask &= mask - 1;
                    const float cv = __shfl_sync(LP_FULL, c, src);
                    const int ci = b0 + u * 32 + src;
                    if (!lp_before(cv, ci, tv, tid_last))
                        continue; /* the list rose past it meanwhile (warp-uniform) */
                    const int pos =
                        __popc(__ballot_sync(LP_FULL, lane < LG_LOGPROB_TOP && lp_before(lv, lid, cv, ci)));
                    const float upv = __shfl_up_sync(LP_FULL, lv, 1);
                    const int upi = __shfl_up_sync(LP_FULL, lid, 1);
                    if (lane > pos) {
                        lv = upv;
                        lid = upi;
                    } else if (lane == pos) {
                        lv = cv;
                        lid = ci;
                    }
                    tv = __shfl_sync(LP_FULL, lv, LG_LOGPROB_TOP - 1);
                    tid_last = __shfl_sync(LP_FULL, lid, LG_LOGPROB_TOP - 1);
                }
            }
        }
        if (lane < LG_LOGPROB_TOP) {
            s_v[w][lane] = lv;
            s_id[w][lane] = lid;
        }
        __syncthreads();
    }
    if (w != 0)
        return;

    int ptr = 0; /* lane l: the head of warp l's list */
    for (int k = 0; k < n; k++) {
        float ev = ptr < LG_LOGPROB_TOP ? s_v[lane][ptr] : -INFINITY;
        int ei = ptr < LG_LOGPROB_TOP ? s_id[lane][ptr] : INT_MAX;
        float bv = ev;
        int bi = ei;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(LP_FULL, bv, o);
            const int oi = __shfl_xor_sync(LP_FULL, bi, o);
            if (lp_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (ei == bi && bi != INT_MAX)
            ptr++; /* ids are distinct: one lane wins */
        if (lane == 0) {
            b_v[k] = bv;
            b_id[k] = bi;
        }
    }
    m = s_m[lane];
    s = s_s[lane];
    lp_lse_warp(m, s);
    __syncwarp();
    /* no value above -inf (all -inf or NaN): NaN, as the host's exp(-inf - -inf) */
    const double L = m == -INFINITY ? (double)NAN : (double)m + log(s);
    lg_logprob_row *o = out + blockIdx.x;
    int n_top = 0;
    while (n_top < n && b_id[n_top] != INT_MAX) n_top++;
    if (lane < n_top) {
        o->top_ids[lane] = b_id[lane];
        o->top_logprobs[lane] = (float)((double)b_v[lane] - L);
    }
    if (lane == 0) {
        const int32_t tok = ids[blockIdx.x];
        o->logprob = tok >= 0 && tok < V ? (float)((double)x[tok] - L) : NAN;
        o->n_top = n_top;
    }
}

int cu_logprobs(cuda_ctx *c, lg_logprob_row *lp, const float *logits, int n, int V, const lg_sample_row *rows,
                const int32_t *ids)
{
    logprobs_kernel<<<n, LP_THREADS, 0, c->stream>>>(lp, logits, V, rows, ids);
    CU_LAUNCHED(c);
    return 0;
}
