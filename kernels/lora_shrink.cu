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
 * tile of SH_TT tokens, 16 bytes per lane, 4 loads in flight per lane.
 * Block = (token tile, group of 8 rank rows, segment); each warp takes one
 * rank row and keeps SH_TT accumulators; x rows (SH_TT x in) are re-read
 * per rank row from L1/L2. Rank groups spread a decode batch over the chip.
 * Segments of one token (decode) use the SH_TT = 1 instantiation.
 * Multi-slot form (cu_lora_shrink_multi): k slots over the same x in one
 * launch; slot i writes columns [i * max_rank, i * max_rank + rank) of tmp
 * (grid.y = k * rank groups). The single-slot op is the k = 1 case.
 * Contract: A is 16-byte aligned and in % 8 == 0 for the vector path (the
 * kernel checks A's alignment itself and falls back to 2-byte loads).
 */
#include "ops.cuh"

#define SH_THREADS 256
#define SH_WARPS (SH_THREADS / 32)

struct sh_slots {
    int slot[LG_LORA_MULTI_MAX];
    int ng;      /* rank groups per slot (grid.y = k * ng) */
    int col_off; /* tmp column offset between slots (max_rank) */
};

template <typename T, typename TT_, int TT>
__global__ void __launch_bounds__(SH_THREADS)
    lora_shrink_kernel(TT_ *tmp, int64_t ldt, const T *x, int64_t ldx, int in, const int32_t *seg_indptr,
                       const lg_lora_w *w, int n_slots, sh_slots sl, bool x_vec)
{
    const int s = blockIdx.z;
    const int si = blockIdx.y / sl.ng, gy = blockIdx.y % sl.ng;
    const lg_lora_w lw = w[(size_t)s * n_slots + sl.slot[si]];
    const int j = gy * SH_WARPS + (threadIdx.x >> 5);
    if (j >= lw.rank) /* also rank 0 */
        return;
    const int t0 = seg_indptr[s] + blockIdx.x * TT, t_end = seg_indptr[s + 1];
    if (t0 >= t_end)
        return;
    tmp += (int64_t)si * sl.col_off;
    const int nt = min(TT, t_end - t0);
    const int lane = threadIdx.x & 31;
    const T *A = (const T *)lw.A;
    const bool vec = x_vec && cu_aligned16(A);
    {
        const T *a = A + (size_t)j * in;
        float acc[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) acc[i] = 0.0f;
        if (vec) {
#pragma unroll 4
            for (int k = lane * 8; k < in; k += 32 * 8) {
                float af[8];
                unpack8<T>(*(const uint4 *)(a + k), af);
#pragma unroll
                for (int i = 0; i < TT; i++) {
                    if (i < nt) {
                        float xf[8];
                        unpack8<T>(*(const uint4 *)(x + (int64_t)(t0 + i) * ldx + k), xf);
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[i] += af[e] * xf[e];
                    }
                }
            }
        } else {
            for (int k = lane; k < in; k += 32) {
                float af = to_f32(a[k]);
#pragma unroll
                for (int i = 0; i < TT; i++)
                    if (i < nt)
                        acc[i] += af * to_f32(x[(int64_t)(t0 + i) * ldx + k]);
            }
        }
#pragma unroll
        for (int i = 0; i < TT; i++) {
            float v = warp_sum(acc[i]);
            if (lane == 0 && i < nt)
                tmp[(int64_t)(t0 + i) * ldt + j] = from_f32<TT_>(v);
        }
    }
}

template <typename T, typename TT_>
static void launch(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, sh_slots sl, int k, int max_seg)
{
    const bool x_vec = x.cols % 8 == 0 && x.stride % 8 == 0 && cu_aligned16(x.data);
    if (max_seg == 1) {
        dim3 grid(1, (unsigned)(sl.ng * k), (unsigned)lm->n_segs);
        lora_shrink_kernel<T, TT_, 1><<<grid, SH_THREADS, 0, c->stream>>>(
            (TT_ *)tmp.data, tmp.stride, (const T *)x.data, x.stride, (int)x.cols, lm->seg_indptr, lm->w,
            lm->n_slots, sl, x_vec);
    } else {
        dim3 grid((unsigned)((max_seg + 3) / 4), (unsigned)(sl.ng * k), (unsigned)lm->n_segs);
        lora_shrink_kernel<T, TT_, 4><<<grid, SH_THREADS, 0, c->stream>>>(
            (TT_ *)tmp.data, tmp.stride, (const T *)x.data, x.stride, (int)x.cols, lm->seg_indptr, lm->w,
            lm->n_slots, sl, x_vec);
    }
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

int cu_lora_shrink_multi(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_shrink tmp", tmp);
    CU_CHECK_VIEW(c, "lora_shrink x", x);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !slots)
        return CU_FAIL(c, "lora_shrink: lora meta, its arrays or the slot list are NULL");
    if (!cu_is_half(x.dtype) || (tmp.dtype != LG_F32 && tmp.dtype != x.dtype))
        return CU_FAIL(c, "lora_shrink: x must be f16/bf16 and tmp f32 or x's dtype, found x %s, tmp %s",
                       cu_dtype_name(x.dtype), cu_dtype_name(tmp.dtype));
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
    sl.ng = (lm->max_rank + SH_WARPS - 1) / SH_WARPS;
    sl.col_off = lm->max_rank;
    if (x.dtype == LG_F16) launch_t<__half>(c, tmp, x, lm, sl, k, max_seg);
    else launch_t<__nv_bfloat16>(c, tmp, x, lm, sl, k, max_seg);
    CU_LAUNCHED(c);
    return 0;
}

int cu_lora_shrink(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot)
{
    return cu_lora_shrink_multi(be, tmp, x, lm, &slot, 1);
}
