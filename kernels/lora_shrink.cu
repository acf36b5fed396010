/*
 * lora_shrink.cu — SGMV shrink: each segment's tokens times its adapter's A.
 *
 *   for s < n_segs, w = lm->w[s * n_slots + slot], w.rank > 0:
 *     for t in [seg_indptr[s], seg_indptr[s+1]), j < w.rank:
 *       tmp[t, j] = sum_k float(x[t, k]) * float(w.A[j, k])        (f32 accumulation)
 * Rows of rank-0 segments are not touched. tmp is f32 (preferred: no
 * rounding between shrink and expand, as on the CPU) or the act dtype.
 *
 * Memory-bound: A ([rank, in], act dtype, in pool pages) is read once per
 * tile of TT tokens. Decode (32 one-token segments x rank 16 x q,k,v) is
 * 12 MB of A per launch against a few KB of x and tmp, so the kernel's job
 * is to have all of A in flight at once across the chip.
 * Block = (token tile, slot x group of SH_RG rank rows, segment); its 256
 * threads split `in` (K) into 16-byte chunks: thread c takes chunks c,
 * c + 256, ... and for each loads SH_RG A words and TT x words before any
 * arithmetic, accumulating TT x SH_RG partial dots in registers. The block
 * then reduces them (warp shuffles, then the 8 warps through shared memory,
 * in a fixed order: deterministic, no atomics) and writes TT x SH_RG values.
 * For in = 4096 that is 2 chunks per thread, so a rank-16 decode launch is
 * 32 x 3 x 4 = 384 blocks each reading 32 KB, all resident at once.
 * TT = 1 for decode steps (every segment one token), 4 for segments of up
 * to 4 tokens; x is re-read per rank group from L2 (in x 2 bytes per token
 * per group). Longer segments (prefill) go to the tensor-core kernel of
 * lora_shrink_mma.cu, which reads x once per slot and A once per 32 tokens;
 * TT = 8 here only with LG_SGMV_PREFILL=0 or rows it cannot take.
 * Multi-slot form (cu_lora_shrink_multi): k slots over the same x in one
 * launch; slot i writes columns [i * max_rank, i * max_rank + rank) of tmp
 * (grid.y = k * rank groups). The single-slot op is the k = 1 case.
 * Vector path: in % 8 == 0, x rows 16-byte aligned and A 16-byte aligned
 * (checked per block); else 2-byte loads, same structure.
 * Programmatic dependent launch (cuda_common.cuh): the weight table, the
 * segment bounds and the first SH_PRE chunks of A per thread are read
 * before pdl_wait (none is written by a kernel), x after; the A bytes are
 * in flight while the kernel before finishes. A is read with an L2
 * evict_first policy (used once a step; LG_L2_HINT bit 2, cuda_common.cuh).
 */
#include "ops.cuh"

#define SH_THREADS 256
#define SH_WARPS (SH_THREADS / 32)
#define SH_RG 4 /* rank rows per block */
#define SH_PRE 2 /* 16-byte chunks of each A row per thread loaded before pdl_wait (in = 4096: all of them) */

struct sh_slots {
    int slot[LG_LORA_MULTI_MAX];
    int ng;      /* rank groups per slot (grid.y = k * ng) */
    int col_off; /* tmp column offset between slots (max_rank) */
    int hint;    /* the decode kernel reads A with L2 evict_first (LG_L2_HINT bit 2, cuda_common.cuh) */
};

/* acc[i][r] += x[t0 + i, 8 ch .. 8 ch + 8) . A[r, same] for one 16-byte chunk of A rows (au). */
template <typename T, int TT>
__device__ __forceinline__ void shrink_chunk(float (&acc)[TT][SH_RG], const uint4 (&au)[SH_RG], const T *xt,
                                             int64_t ldx, int nt, int ch)
{
    uint4 xu[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) xu[i] = i < nt ? ((const uint4 *)(xt + (int64_t)i * ldx))[ch] : make_uint4(0, 0, 0, 0);
    float af[SH_RG][8];
#pragma unroll
    for (int r = 0; r < SH_RG; r++) unpack8<T>(au[r], af[r]);
#pragma unroll
    for (int i = 0; i < TT; i++) {
        float xf[8];
        unpack8<T>(xu[i], xf);
#pragma unroll
        for (int r = 0; r < SH_RG; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[i][r] += af[r][e] * xf[e];
    }
}

template <typename T, typename TT_, int TT>
__global__ void __launch_bounds__(SH_THREADS)
    lora_shrink_kernel(TT_ *tmp, int64_t ldt, const T *x, int64_t ldx, int in, const int32_t *seg_indptr,
                       const lg_lora_w *w, int n_slots, sh_slots sl, bool x_vec)
{
    __shared__ float red[SH_WARPS][TT * SH_RG];
    pdl_trigger();
    const int s = blockIdx.z;
    const int si = blockIdx.y / sl.ng, j0 = (blockIdx.y % sl.ng) * SH_RG;
    const lg_lora_w lw = w[(size_t)s * n_slots + sgmv_pick(sl.slot, si)];
    int t0, nt;
    if (j0 >= lw.rank || !sgmv_tile(seg_indptr, s, blockIdx.x, TT, &t0, &nt)) /* also rank 0; uniform over the block */
        return;
    const int nr = min(SH_RG, lw.rank - j0);
    const T *A = (const T *)lw.A + (size_t)j0 * in; /* [nr, in] */
    const T *xt = x + (int64_t)t0 * ldx;            /* [nt, in], stride ldx */
    float acc[TT][SH_RG];
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int r = 0; r < SH_RG; r++) acc[i][r] = 0.0f;

    if (x_vec && cu_aligned16(lw.A)) {
        const int nch = in / 8;
        /* the first SH_PRE chunks of A (adapter weights: no kernel writes
         * them) are loaded before pdl_wait, so they are in flight while the
         * kernel before still runs; x only after */
        const uint64_t pol = sl.hint ? l2_policy_first() : 0;
        uint4 apre[SH_PRE][SH_RG];
#pragma unroll
        for (int p = 0; p < SH_PRE; p++) {
            const int ch = threadIdx.x + p * SH_THREADS;
#pragma unroll
            for (int r = 0; r < SH_RG; r++)
                apre[p][r] = r < nr && ch < nch ? ld_weight16((const uint4 *)(A + (size_t)r * in) + ch, sl.hint, pol)
                                                : make_uint4(0, 0, 0, 0);
        }
        pdl_wait();
#pragma unroll
        for (int p = 0; p < SH_PRE; p++) {
            const int ch = threadIdx.x + p * SH_THREADS;
            if (ch < nch)
                shrink_chunk<T, TT>(acc, apre[p], xt, ldx, nt, ch);
        }
#pragma unroll 2
        for (int ch = threadIdx.x + SH_PRE * SH_THREADS; ch < nch; ch += SH_THREADS) {
            uint4 au[SH_RG];
#pragma unroll
            for (int r = 0; r < SH_RG; r++)
                au[r] = r < nr ? ld_weight16((const uint4 *)(A + (size_t)r * in) + ch, sl.hint, pol) : make_uint4(0, 0, 0, 0);
            shrink_chunk<T, TT>(acc, au, xt, ldx, nt, ch);
        }
    } else {
        pdl_wait();
        for (int k = threadIdx.x; k < in; k += SH_THREADS) {
            float af[SH_RG];
#pragma unroll
            for (int r = 0; r < SH_RG; r++) af[r] = r < nr ? to_f32(A[(size_t)r * in + k]) : 0.0f;
#pragma unroll
            for (int i = 0; i < TT; i++) {
                const float xv = i < nt ? to_f32(xt[(int64_t)i * ldx + k]) : 0.0f;
#pragma unroll
                for (int r = 0; r < SH_RG; r++) acc[i][r] += af[r] * xv;
            }
        }
    }

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int r = 0; r < SH_RG; r++) {
            const float v = warp_sum(acc[i][r]);
            if (lane == 0)
                red[warp][i * SH_RG + r] = v;
        }
    __syncthreads();
    if (threadIdx.x < TT * SH_RG) {
        const int i = threadIdx.x / SH_RG, r = threadIdx.x % SH_RG;
        if (i < nt && r < nr) {
            float v = 0.0f;
#pragma unroll
            for (int wi = 0; wi < SH_WARPS; wi++) v += red[wi][threadIdx.x];
            tmp[(int64_t)(t0 + i) * ldt + (int64_t)si * sl.col_off + j0 + r] = from_f32<TT_>(v);
        }
    }
}

template <typename T, typename TT_>
static void launch(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, sh_slots sl, int k, int max_seg)
{
    const bool x_vec = x.cols % 8 == 0 && x.stride % 8 == 0 && cu_aligned16(x.data);
    const int tt = max_seg == 1 ? 1 : max_seg <= 4 ? 4 : 8;
    const dim3 grid((unsigned)((max_seg + tt - 1) / tt), (unsigned)(sl.ng * k), (unsigned)lm->n_segs);
    TT_ *td = (TT_ *)tmp.data;
    const T *xd = (const T *)x.data;
    if (tt == 1)
        (void)cu_launch(c, lora_shrink_kernel<T, TT_, 1>, grid, SH_THREADS, 0, td, tmp.stride, xd, x.stride,
                        (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, sl, x_vec);
    else if (tt == 4)
        (void)cu_launch(c, lora_shrink_kernel<T, TT_, 4>, grid, SH_THREADS, 0, td, tmp.stride, xd, x.stride,
                        (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, sl, x_vec);
    else
        (void)cu_launch(c, lora_shrink_kernel<T, TT_, 8>, grid, SH_THREADS, 0, td, tmp.stride, xd, x.stride,
                        (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, sl, x_vec);
}

template <typename T>
static void launch_t(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, sh_slots sl, int k,
                     int max_seg)
{
    if (tmp.dtype == LG_F32) launch<T, float>(c, tmp, x, lm, sl, k, max_seg);
    else launch<T, T>(c, tmp, x, lm, sl, k, max_seg);
}

/* Longest segment, from the host copy of seg_indptr; -1 when malformed. */
int cu_lora_max_seg(const lg_lora_meta *lm)
{
    int mx = 0;
    for (int s = 0; s < lm->n_segs; s++) {
        int n = lm->seg_indptr_host[s + 1] - lm->seg_indptr_host[s];
        if (n < 0)
            return -1;
        if (n > mx) mx = n;
    }
    return mx;
}

/* The step's largest rank: step_max_rank when given, else max_rank. */
int cu_lora_step_rank(const lg_lora_meta *lm)
{
    return lm->step_max_rank > 0 && lm->step_max_rank < lm->max_rank ? lm->step_max_rank : lm->max_rank;
}

/* Tiles of tm tokens over all segments (segments already checked by cu_lora_max_seg). */
int64_t cu_lora_tiles(const lg_lora_meta *lm, int tm)
{
    int64_t n = 0;
    for (int s = 0; s < lm->n_segs; s++) n += (lm->seg_indptr_host[s + 1] - lm->seg_indptr_host[s] + tm - 1) / tm;
    return n;
}

int cu_lora_shrink_multi(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_shrink tmp", tmp);
    CU_CHECK_VIEW(c, "lora_shrink x", x);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !slots)
        return CU_FAIL(c, "lora_shrink: lora meta, its arrays or the slot list are NULL");
    if (!cu_is_half(x.dtype) || (tmp.dtype != LG_F32 && tmp.dtype != x.dtype))
        return CU_FAIL(c, "lora_shrink: x must be f16/bf16 and tmp f32 or x's dtype, found x %s, tmp %s",
                       lg_dtype_name(x.dtype), lg_dtype_name(tmp.dtype));
    if (k < 1 || k > LG_LORA_MULTI_MAX || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "lora_shrink: %d slots (1..%d), %d segments", k, LG_LORA_MULTI_MAX, lm->n_segs);
    sh_slots sl;
    for (int i = 0; i < k; i++) {
        if (slots[i] < 0 || slots[i] >= lm->n_slots)
            return CU_FAIL(c, "lora_shrink: slot %d of %d", slots[i], lm->n_slots);
        sl.slot[i] = slots[i];
    }
    if (tmp.cols < (int64_t)k * lm->max_rank || tmp.rows < x.rows)
        return CU_FAIL(c, "lora_shrink: tmp [%lld,%lld] is narrower than %d x max_rank %d or shorter than x (%lld rows)",
                       (long long)tmp.rows, (long long)tmp.cols, k, lm->max_rank, (long long)x.rows);
    if (lm->n_segs == 0 || lm->max_rank <= 0)
        return 0;
    int max_seg = cu_lora_max_seg(lm);
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > x.rows)
        return CU_FAIL(c, "lora_shrink: segments are malformed or cover more than x's %lld rows", (long long)x.rows);
    if (max_seg == 0)
        return 0;
    if (cu_lora_shrink_mma(c, tmp, x, lm, slots, k, max_seg)) { /* prefill segments: tensor cores */
        CU_LAUNCHED(c);
        return 0;
    }
    sl.ng = (lm->max_rank + SH_RG - 1) / SH_RG;
    sl.col_off = lm->max_rank;
    sl.hint = (cu_l2_hint() & 2) != 0;
    if (x.dtype == LG_F16) launch_t<__half>(c, tmp, x, lm, sl, k, max_seg);
    else launch_t<__nv_bfloat16>(c, tmp, x, lm, sl, k, max_seg);
    CU_LAUNCHED(c);
    return 0;
}

int cu_lora_shrink(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot)
{
    return cu_lora_shrink_multi(be, tmp, x, lm, &slot, 1);
}

/* For benchmarks (tests/gpu/bench_sgmv.c): the compute stream, to time ops with events. */
extern "C" cudaStream_t lg_cuda_compute_stream(lg_backend *be)
{
    return be && be->ctx ? CU_CTX(be)->stream : NULL;
}
