/*
 * lora_expand.cu — SGMV expand: each segment's shrunk rows times its
 * adapter's B, scaled and accumulated into y.
 *
 *   for s < n_segs, w = lm->w[s * n_slots + slot], w.rank > 0:
 *     for t in [seg_indptr[s], seg_indptr[s+1]), n < y.cols:
 *       y[t, n] = round(y[t, n] + w.scale * sum_{j < w.rank} tmp[t, j] * float(w.B[n, j]))
 * y may be a column slice of a fused output (stride > cols).
 *
 * Memory-bound: B ([out, rank], act dtype, in pool pages) is read once per
 * tile of EX_TT tokens. Block = (256 output columns, segment, token tile);
 * thread n reads its B row (rank elements, 16 bytes at a time when
 * aligned) and keeps EX_TT accumulators; the tile's tmp rows sit in shared
 * memory as f32. Decode segments (1 token) use EX_TT = 1.
 */
#include "ops.cuh"

#define EX_THREADS 256
#define EX_RMAX 256 /* largest rank held in shared memory per token */

int cu_lora_max_seg(const lg_lora_meta *lm); /* lora_shrink.cu */

template <typename T, typename TT_, int TT>
__global__ void __launch_bounds__(EX_THREADS)
    lora_expand_kernel(T *y, int64_t ldy, int out, const TT_ *tmp, int64_t ldt, const int32_t *seg_indptr,
                       const lg_lora_w *w, int n_slots, int slot)
{
    __shared__ float ts[TT][EX_RMAX];
    const int s = blockIdx.y;
    const lg_lora_w lw = w[(size_t)s * n_slots + slot];
    const int r = lw.rank;
    if (r <= 0)
        return;
    const int t0 = seg_indptr[s] + blockIdx.z * TT, t_end = seg_indptr[s + 1];
    if (t0 >= t_end)
        return;
    const int nt = min(TT, t_end - t0);
    for (int i = threadIdx.x; i < TT * r; i += EX_THREADS) {
        int tt = i / r, j = i % r;
        ts[tt][j] = tt < nt ? to_f32(tmp[(int64_t)(t0 + tt) * ldt + j]) : 0.0f;
    }
    __syncthreads();
    const int n = blockIdx.x * EX_THREADS + threadIdx.x;
    if (n >= out)
        return;
    const T *b = (const T *)lw.B + (size_t)n * r;
    float acc[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) acc[i] = 0.0f;
    if (r % 8 == 0 && cu_aligned16(lw.B)) {
#pragma unroll 4
        for (int j = 0; j < r; j += 8) {
            float bf[8];
            unpack8<T>(*(const uint4 *)(b + j), bf);
#pragma unroll
            for (int i = 0; i < TT; i++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[i] += ts[i][j + e] * bf[e];
        }
    } else {
        for (int j = 0; j < r; j++) {
            float bf = to_f32(b[j]);
#pragma unroll
            for (int i = 0; i < TT; i++) acc[i] += ts[i][j] * bf;
        }
    }
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < nt) {
            T *p = y + (int64_t)(t0 + i) * ldy + n;
            *p = from_f32<T>(to_f32(*p) + lw.scale * acc[i]);
        }
    }
}

template <typename T, typename TT_>
static void launch(cuda_ctx *c, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot, int max_seg)
{
    const unsigned nx = (unsigned)((y.cols + EX_THREADS - 1) / EX_THREADS);
    if (max_seg == 1) {
        lora_expand_kernel<T, TT_, 1><<<dim3(nx, (unsigned)lm->n_segs, 1), EX_THREADS, 0, c->stream>>>(
            (T *)y.data, y.stride, (int)y.cols, (const TT_ *)tmp.data, tmp.stride, lm->seg_indptr, lm->w,
            lm->n_slots, slot);
    } else {
        lora_expand_kernel<T, TT_, 8>
            <<<dim3(nx, (unsigned)lm->n_segs, (unsigned)((max_seg + 7) / 8)), EX_THREADS, 0, c->stream>>>(
                (T *)y.data, y.stride, (int)y.cols, (const TT_ *)tmp.data, tmp.stride, lm->seg_indptr, lm->w,
                lm->n_slots, slot);
    }
}

template <typename T>
static void launch_t(cuda_ctx *c, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot, int max_seg)
{
    if (tmp.dtype == LG_F32) launch<T, float>(c, y, tmp, lm, slot, max_seg);
    else launch<T, T>(c, y, tmp, lm, slot, max_seg);
}

int cu_lora_expand(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_expand y", y);
    CU_CHECK_VIEW(c, "lora_expand tmp", tmp);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host)
        return CU_FAIL(c, "lora_expand: lora meta or its arrays are NULL");
    if (!cu_is_half(y.dtype) || (tmp.dtype != LG_F32 && tmp.dtype != y.dtype))
        return CU_FAIL(c, "lora_expand: y must be f16/bf16 and tmp f32 or y's dtype, found y %s, tmp %s",
                       cu_dtype_name(y.dtype), cu_dtype_name(tmp.dtype));
    if (slot < 0 || slot >= lm->n_slots || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "lora_expand: slot %d of %d, %d segments", slot, lm->n_slots, lm->n_segs);
    if (lm->max_rank > EX_RMAX || tmp.cols < lm->max_rank || tmp.rows < y.rows)
        return CU_FAIL(c, "lora_expand: max_rank %d (limit %d) vs tmp [%lld,%lld], y rows %lld", lm->max_rank, EX_RMAX,
                       (long long)tmp.rows, (long long)tmp.cols, (long long)y.rows);
    if (lm->n_segs == 0)
        return 0;
    int max_seg = cu_lora_max_seg(lm);
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > y.rows)
        return CU_FAIL(c, "lora_expand: segments are malformed or cover more than y's %lld rows", (long long)y.rows);
    if (max_seg == 0)
        return 0;
    if (y.dtype == LG_F16) launch_t<__half>(c, y, tmp, lm, slot, max_seg);
    else launch_t<__nv_bfloat16>(c, y, tmp, lm, slot, max_seg);
    CU_LAUNCHED(c);
    return 0;
}
