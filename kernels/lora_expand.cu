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
 * Multi-slot form (cu_lora_expand_multi): k outputs in one launch; grid.x
 * is the concatenation of each output's column blocks, and slot i reads
 * tmp columns from i * max_rank. The single-slot op is the k = 1 case.
 */
#include "ops.cuh"

#define EX_THREADS 256
#define EX_RMAX 256 /* largest rank held in shared memory per token */

int cu_lora_max_seg(const lg_lora_meta *lm); /* lora_shrink.cu */

template <typename T> struct ex_outs {
    T *y[LG_LORA_MULTI_MAX];
    int64_t ldy[LG_LORA_MULTI_MAX];
    int cols[LG_LORA_MULTI_MAX];
    int slot[LG_LORA_MULTI_MAX];
    int bstart[LG_LORA_MULTI_MAX + 1]; /* first column block of each output; bstart[k] = gridDim.x */
    int k;
    int col_off; /* tmp column offset between slots (max_rank) */
};

template <typename T, typename TT_, int TT>
__global__ void __launch_bounds__(EX_THREADS)
    lora_expand_kernel(ex_outs<T> o, const TT_ *tmp, int64_t ldt, const int32_t *seg_indptr, const lg_lora_w *w,
                       int n_slots)
{
    __shared__ float ts[TT][EX_RMAX];
    int si = 0;
#pragma unroll
    for (int i = 1; i < LG_LORA_MULTI_MAX; i++)
        if (i < o.k && (int)blockIdx.x >= o.bstart[i]) si = i;
    const int s = blockIdx.y;
    const lg_lora_w lw = w[(size_t)s * n_slots + o.slot[si]];
    const int r = lw.rank;
    if (r <= 0)
        return;
    const int t0 = seg_indptr[s] + blockIdx.z * TT, t_end = seg_indptr[s + 1];
    if (t0 >= t_end)
        return;
    const int nt = min(TT, t_end - t0);
    tmp += (int64_t)si * o.col_off;
    for (int i = threadIdx.x; i < TT * r; i += EX_THREADS) {
        int tt = i / r, j = i % r;
        ts[tt][j] = tt < nt ? to_f32(tmp[(int64_t)(t0 + tt) * ldt + j]) : 0.0f;
    }
    __syncthreads();
    const int n = (blockIdx.x - o.bstart[si]) * EX_THREADS + threadIdx.x;
    if (n >= o.cols[si])
        return;
    T *y = o.y[si];
    const int64_t ldy = o.ldy[si];
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
static void launch(cuda_ctx *c, ex_outs<T> o, lg_tensor tmp, const lg_lora_meta *lm, int max_seg)
{
    const unsigned nx = (unsigned)o.bstart[o.k];
    if (max_seg == 1) {
        lora_expand_kernel<T, TT_, 1><<<dim3(nx, (unsigned)lm->n_segs, 1), EX_THREADS, 0, c->stream>>>(
            o, (const TT_ *)tmp.data, tmp.stride, lm->seg_indptr, lm->w, lm->n_slots);
    } else {
        lora_expand_kernel<T, TT_, 8>
            <<<dim3(nx, (unsigned)lm->n_segs, (unsigned)((max_seg + 7) / 8)), EX_THREADS, 0, c->stream>>>(
                o, (const TT_ *)tmp.data, tmp.stride, lm->seg_indptr, lm->w, lm->n_slots);
    }
}

template <typename T>
static void launch_t(cuda_ctx *c, const lg_tensor *ys, const int *slots, int k, lg_tensor tmp,
                     const lg_lora_meta *lm, int max_seg)
{
    ex_outs<T> o;
    memset(&o, 0, sizeof o);
    o.k = k;
    o.col_off = lm->max_rank;
    o.bstart[0] = 0;
    for (int i = 0; i < k; i++) {
        o.y[i] = (T *)ys[i].data;
        o.ldy[i] = ys[i].stride;
        o.cols[i] = (int)ys[i].cols;
        o.slot[i] = slots[i];
        o.bstart[i + 1] = o.bstart[i] + (int)((ys[i].cols + EX_THREADS - 1) / EX_THREADS);
    }
    if (tmp.dtype == LG_F32) launch<T, float>(c, o, tmp, lm, max_seg);
    else launch<T, T>(c, o, tmp, lm, max_seg);
}

int cu_lora_expand_multi(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                         const int *slots, int k)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_expand tmp", tmp);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !ys || !slots)
        return CU_FAIL(c, "lora_expand: lora meta, its arrays, outputs or slots are NULL");
    if (k < 1 || k > LG_LORA_MULTI_MAX || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "lora_expand: %d slots (1..%d), %d segments", k, LG_LORA_MULTI_MAX, lm->n_segs);
    for (int i = 0; i < k; i++) {
        CU_CHECK_VIEW(c, "lora_expand y", ys[i]);
        if (!cu_is_half(ys[i].dtype) || ys[i].dtype != ys[0].dtype || (tmp.dtype != LG_F32 && tmp.dtype != ys[i].dtype))
            return CU_FAIL(c, "lora_expand: y must be one f16/bf16 dtype and tmp f32 or y's dtype, found y %s, tmp %s",
                           cu_dtype_name(ys[i].dtype), cu_dtype_name(tmp.dtype));
        if (slots[i] < 0 || slots[i] >= lm->n_slots)
            return CU_FAIL(c, "lora_expand: slot %d of %d", slots[i], lm->n_slots);
        if (tmp.rows < ys[i].rows)
            return CU_FAIL(c, "lora_expand: tmp has %lld rows, y %lld", (long long)tmp.rows, (long long)ys[i].rows);
    }
    if (lm->max_rank > EX_RMAX || tmp.cols < (int64_t)k * lm->max_rank)
        return CU_FAIL(c, "lora_expand: max_rank %d (limit %d) x %d slots vs tmp [%lld,%lld]", lm->max_rank, EX_RMAX, k,
                       (long long)tmp.rows, (long long)tmp.cols);
    if (lm->n_segs == 0)
        return 0;
    int max_seg = cu_lora_max_seg(lm);
    int64_t min_rows = ys[0].rows;
    for (int i = 1; i < k; i++) min_rows = ys[i].rows < min_rows ? ys[i].rows : min_rows;
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > min_rows)
        return CU_FAIL(c, "lora_expand: segments are malformed or cover more than y's %lld rows", (long long)min_rows);
    if (max_seg == 0)
        return 0;
    if (ys[0].dtype == LG_F16) launch_t<__half>(c, ys, slots, k, tmp, lm, max_seg);
    else launch_t<__nv_bfloat16>(c, ys, slots, k, tmp, lm, max_seg);
    CU_LAUNCHED(c);
    return 0;
}

int cu_lora_expand(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot)
{
    return cu_lora_expand_multi(be, &y, tmp, lm, &slot, 1);
}
