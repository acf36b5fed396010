/*
 * kv_write.cu — this step's K/V rows into their page slots.
 *
 *   for t < n_tokens with slot[t] >= 0:
 *     page = slot[t] / page_tokens, s = slot[t] % page_tokens
 *     K(page, s)[:] = k[t, :];  V(page, s)[:] = v[t, :]        (kv_dim = n_kv_heads * head_dim)
 *   K(page, s) = base + page * page_bytes + k_off + s * kv_dim * esize   (backend.h)
 *
 * k, v and the cache share one dtype (the act dtype): a byte copy, 16 bytes
 * per load when every address is 16-byte aligned, else 2 (or 4) bytes.
 * One block per (token, K or V): a decode row (4096 f16 = 8 KB) is 128
 * threads x 4 words, all four loads issued before the stores, so a step's
 * copy costs about one memory round trip. Launched with programmatic
 * dependent launch (cuda_common.cuh): the slot is read before the wait.
 *
 * An e4m3 cache (`--kv-cache-dtype fp8`, kv.dtype LG_F8E4M3) takes 16-bit k
 * and v: each element stored as kv_e4m3(x, scale) = e4m3(x / scale) with
 * the layer's k_scale or v_scale (cuda_common.cuh; the CPU backend's
 * rounding), 4 elements a thread, one 4-byte store when the row allows.
 * rope_kv.cu, norm_matmul.cu's rope epilogue and lora_expand.cu's rope form
 * take caches of the activations' dtype only, so an e4m3 step's K/V rows
 * always arrive here (their plans fall back to rope + kv_write).
 */
#include "kernels/ops.cuh"

#define KV_THREADS_MAX 256
#define KV_UNROLL 4 /* words per thread per pass, all loaded before any store */

/* grid (n_tokens, 2): blockIdx.y 0 copies the K row, 1 the V row. */
template <typename W>
__global__ void kv_write_kernel(char *base, size_t page_bytes, size_t k_off, size_t v_off, int page_tokens,
                                const char *k, size_t ldk_bytes, const char *v, size_t ldv_bytes, const int32_t *slot,
                                int row_words)
{
    pdl_trigger();
    const int t = blockIdx.x;
    const int32_t sl = slot[t]; /* step metadata: readable before the wait */
    if (sl < 0)
        return;
    pdl_wait();
    const bool is_v = blockIdx.y != 0;
    const size_t row_bytes = (size_t)row_words * sizeof(W);
    char *pg = kv_slot_row(base, page_bytes, page_tokens, row_bytes, sl);
    W *dst = (W *)(pg + (is_v ? v_off : k_off));
    const W *src = (const W *)(is_v ? v + (size_t)t * ldv_bytes : k + (size_t)t * ldk_bytes);
    for (int i0 = threadIdx.x; i0 < row_words; i0 += KV_UNROLL * blockDim.x) {
        W w[KV_UNROLL];
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++)
            if (i0 + u * (int)blockDim.x < row_words)
                w[u] = src[i0 + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < KV_UNROLL; u++)
            if (i0 + u * (int)blockDim.x < row_words)
                dst[i0 + u * blockDim.x] = w[u];
    }
}

/* grid (n_tokens, 2) as above; row elements of T -> e4m3 bytes. */
template <typename T>
__global__ void kv_write_e4m3_kernel(char *base, size_t page_bytes, size_t k_off, size_t v_off, int page_tokens,
                                     const T *k, int64_t ldk, const T *v, int64_t ldv, const int32_t *slot, int n,
                                     float k_scale, float v_scale)
{
    pdl_trigger();
    const int t = blockIdx.x;
    const int32_t sl = slot[t];
    if (sl < 0)
        return;
    pdl_wait();
    const bool is_v = blockIdx.y != 0;
    const float s = is_v ? v_scale : k_scale;
    uint8_t *dst = (uint8_t *)kv_slot_row(base, page_bytes, page_tokens, (size_t)n, sl) + (is_v ? v_off : k_off);
    const T *src = is_v ? v + (int64_t)t * ldv : k + (int64_t)t * ldk;
    const bool word = ((uintptr_t)dst & 3) == 0;
    for (int i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
        uint8_t b[4];
#pragma unroll
        for (int u = 0; u < 4; u++) b[u] = i + u < n ? kv_e4m3(to_f32(src[i + u]), s) : 0;
        if (word && i + 4 <= n)
            *(uint32_t *)(dst + i) = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        else
            for (int u = 0; u < 4 && i + u < n; u++) dst[i + u] = b[u];
    }
}

/* Threads for a row of `words`: enough for KV_UNROLL words each, a multiple of 32. */
static unsigned kv_threads(size_t words)
{
    size_t t = (words + KV_UNROLL - 1) / KV_UNROLL;
    t = (t + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > KV_THREADS_MAX ? KV_THREADS_MAX : t);
}

int cu_kv_write(lg_backend *be, lg_kv_view kv, lg_tensor k, lg_tensor v, const int32_t *slot, int n_tokens)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "kv_write k", k);
    CU_CHECK_VIEW(c, "kv_write v", v);
    const bool f8 = kv.dtype == LG_F8E4M3;
    if (k.dtype != v.dtype || (f8 ? !cu_is_half(k.dtype) : k.dtype != kv.dtype))
        return CU_FAIL(c, "kv_write: k %s, v %s, cache %s must match (or a 16-bit k, v into an f8e4m3 cache)",
                       lg_dtype_name(k.dtype), lg_dtype_name(v.dtype), lg_dtype_name(kv.dtype));
    const int64_t kvdim = (int64_t)kv.n_kv_heads * kv.head_dim;
    if (k.cols != kvdim || v.cols != kvdim || k.rows < n_tokens || v.rows < n_tokens || kv.page_tokens <= 0)
        return CU_FAIL(c, "kv_write: k [%lld,%lld] v [%lld,%lld] vs kv_dim %lld, %d tokens, page_tokens %d",
                       (long long)k.rows, (long long)k.cols, (long long)v.rows, (long long)v.cols, (long long)kvdim,
                       n_tokens, kv.page_tokens);
    if (!kv.base || !slot)
        return CU_FAIL(c, "kv_write: NULL cache base or slot array");
    if (n_tokens == 0)
        return 0;
    if (f8) {
        const dim3 g((unsigned)n_tokens, 2);
        const unsigned thr = kv_threads((size_t)kvdim); /* 4 elements a thread: kv_threads' unroll */
        if (k.dtype == LG_F16)
            (void)cu_launch(c, kv_write_e4m3_kernel<__half>, g, thr, 0, (char *)kv.base, kv.page_bytes, kv.k_off,
                            kv.v_off, kv.page_tokens, (const __half *)k.data, k.stride, (const __half *)v.data,
                            v.stride, slot, (int)kvdim, lg_kv_kscale(&kv), lg_kv_vscale(&kv));
        else
            (void)cu_launch(c, kv_write_e4m3_kernel<__nv_bfloat16>, g, thr, 0, (char *)kv.base, kv.page_bytes,
                            kv.k_off, kv.v_off, kv.page_tokens, (const __nv_bfloat16 *)k.data, k.stride,
                            (const __nv_bfloat16 *)v.data, v.stride, slot, (int)kvdim, lg_kv_kscale(&kv),
                            lg_kv_vscale(&kv));
        CU_LAUNCHED(c);
        return 0;
    }
    const size_t es = lg_dtype_size(kv.dtype), row = (size_t)kvdim * es;
    const size_t ldk = (size_t)k.stride * es, ldv = (size_t)v.stride * es;
    bool vec = row % 16 == 0 && ldk % 16 == 0 && ldv % 16 == 0 && kv.page_bytes % 16 == 0 && kv.k_off % 16 == 0 &&
               kv.v_off % 16 == 0 && cu_aligned16(kv.base) && cu_aligned16(k.data) && cu_aligned16(v.data);
    const dim3 g((unsigned)n_tokens, 2);
    char *base = (char *)kv.base;
    const char *kd = (const char *)k.data, *vd = (const char *)v.data;
    if (vec)
        (void)cu_launch(c, kv_write_kernel<uint4>, g, kv_threads(row / 16), 0, base, kv.page_bytes, kv.k_off, kv.v_off,
                        kv.page_tokens, kd, ldk, vd, ldv, slot, (int)(row / 16));
    else if (es == 2)
        (void)cu_launch(c, kv_write_kernel<uint16_t>, g, kv_threads(row / 2), 0, base, kv.page_bytes, kv.k_off, kv.v_off,
                        kv.page_tokens, kd, ldk, vd, ldv, slot, (int)(row / 2));
    else
        (void)cu_launch(c, kv_write_kernel<uint32_t>, g, kv_threads(row / 4), 0, base, kv.page_bytes, kv.k_off, kv.v_off,
                        kv.page_tokens, kd, ldk, vd, ldv, slot, (int)(row / 4));
    CU_LAUNCHED(c);
    return 0;
}
