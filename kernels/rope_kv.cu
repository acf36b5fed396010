/*
 * rope_kv.cu — RoPE on q and k, then k and v into their KV page slots, in
 * one launch (the backend's optional rope_kv_write slot):
 *
 *   rope(q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim);   as rope.cu
 *   kv_write(kv, k, v, slot, T);                                 as kv_write.cu
 *
 * Results are bit-identical to the two ops (same angle math, rope_cos_sin,
 * same rounding; the cache receives the rotated k exactly as rope.cu leaves
 * it in qkv). Why: a decode step ran the two back to back in every layer,
 * each a latency-bound launch of ~1 MB; one kernel saves a launch and a
 * round trip per layer.
 *
 * One block per token: (cos, sin) of its position into shared memory
 * (computed before pdl_wait: positions and frequencies are step metadata),
 * then each thread rotates 8 element pairs of one head of q or k through
 * 16-byte loads and stores (and, for a k head, also stores them to the K
 * slot), and copies 16-byte words of the v row to the V slot. Slot < 0:
 * rope only. Only the 16-bit, 16-byte aligned case (head_dim % 16 == 0)
 * runs here; anything else falls back to the two ops.
 */
#include "kernels/ops.cuh"

#define RK_MAX_THREADS 512

template <typename T>
__global__ void rope_kv_kernel(T *q, int64_t ldq, T *k, int64_t ldk, const T *v, int64_t ldv, const int32_t *pos,
                               const float *inv_freq, int nh, int nkv, int hd, char *base, size_t page_bytes,
                               size_t k_off, size_t v_off, int page_tokens, const int32_t *slot)
{
    extern __shared__ float cs[]; /* [hd/2] cos, then [hd/2] sin */
    pdl_trigger();
    const int64_t t = blockIdx.x;
    const int half = hd / 2, per_head = half / 8, n = (nh + nkv) * per_head;
    const float p = (float)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(p, inv_freq[i], &cs[i], &cs[half + i]);
    const int32_t sl = slot[t];
    pdl_wait(); /* q, k, v come from the qkv matmul (and its LoRA) */
    __syncthreads();
    const size_t row_bytes = (size_t)nkv * hd * sizeof(T);
    char *slot_row = sl >= 0 ? kv_slot_row(base, page_bytes, page_tokens, row_bytes, sl) : NULL;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int h = j / per_head, i0 = (j % per_head) * 8;
        const bool is_k = h >= nh;
        T *x = is_k ? k + t * ldk + (int64_t)(h - nh) * hd + i0 : q + t * ldq + (int64_t)h * hd + i0;
        float a[8], b[8], ra[8], rb[8];
        unpack8<T>(*(const uint4 *)x, a);
        unpack8<T>(*(const uint4 *)(x + half), b);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float co = cs[i0 + e], s = cs[half + i0 + e];
            rope_rotate(a[e], b[e], co, s, &ra[e], &rb[e]);
        }
        const uint4 ua = pack8<T>(ra), ub = pack8<T>(rb);
        *(uint4 *)x = ua;
        *(uint4 *)(x + half) = ub;
        if (is_k && slot_row) {
            T *dst = (T *)(slot_row + k_off) + (h - nh) * hd + i0;
            *(uint4 *)dst = ua;
            *(uint4 *)(dst + half) = ub;
        }
    }
    if (slot_row) {
        const int words = nkv * hd / 8;
        const uint4 *src = (const uint4 *)(v + t * ldv);
        uint4 *dst = (uint4 *)(slot_row + v_off);
        for (int w = threadIdx.x; w < words; w += blockDim.x) dst[w] = src[w];
    }
}

int cu_rope_kv_write(lg_backend *be, lg_tensor q, lg_tensor k, lg_tensor v, const int32_t *pos,
                     const float *inv_freq, int n_heads, int n_kv_heads, int head_dim, lg_kv_view kv,
                     const int32_t *slot)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "rope_kv_write q", q);
    CU_CHECK_VIEW(c, "rope_kv_write k", k);
    CU_CHECK_VIEW(c, "rope_kv_write v", v);
    const int hd = head_dim;
    const bool fused = cu_is_half(q.dtype) && q.dtype == k.dtype && k.dtype == v.dtype && v.dtype == kv.dtype &&
                       hd > 0 && hd % 16 == 0 && hd <= 1024 && kv.head_dim == hd && kv.n_kv_heads == n_kv_heads &&
                       q.cols >= (int64_t)n_heads * hd && k.cols == (int64_t)n_kv_heads * hd && v.cols == k.cols &&
                       q.rows == k.rows && v.rows >= q.rows && q.stride % 8 == 0 && k.stride % 8 == 0 &&
                       v.stride % 8 == 0 && cu_aligned16(q.data) && cu_aligned16(k.data) && cu_aligned16(v.data) &&
                       kv.base && cu_aligned16(kv.base) && kv.page_bytes % 16 == 0 && kv.k_off % 16 == 0 &&
                       kv.v_off % 16 == 0 && kv.page_tokens > 0 && pos && inv_freq && slot;
    if (!fused) { /* the two ops check and report everything themselves */
        if (cu_rope(be, q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim) != 0)
            return -1;
        return cu_kv_write(be, kv, k, v, slot, (int)q.rows);
    }
    if (q.rows == 0)
        return 0;
    const int n = (n_heads + n_kv_heads) * (hd / 16);
    int thr = (n + 31) / 32 * 32;
    thr = thr < 64 ? 64 : thr > RK_MAX_THREADS ? RK_MAX_THREADS : thr;
    const size_t sm = (size_t)hd * sizeof(float);
    const unsigned g = (unsigned)q.rows;
    if (q.dtype == LG_F16)
        (void)cu_launch(c, rope_kv_kernel<__half>, g, thr, sm, (__half *)q.data, q.stride, (__half *)k.data, k.stride,
                        (const __half *)v.data, v.stride, pos, inv_freq, n_heads, n_kv_heads, hd, (char *)kv.base,
                        kv.page_bytes, kv.k_off, kv.v_off, kv.page_tokens, slot);
    else
        (void)cu_launch(c, rope_kv_kernel<__nv_bfloat16>, g, thr, sm, (__nv_bfloat16 *)q.data, q.stride,
                        (__nv_bfloat16 *)k.data, k.stride, (const __nv_bfloat16 *)v.data, v.stride, pos, inv_freq,
                        n_heads, n_kv_heads, hd, (char *)kv.base, kv.page_bytes, kv.k_off, kv.v_off, kv.page_tokens,
                        slot);
    CU_LAUNCHED(c);
    return 0;
}
