/*
 * add_rmsnorm.cu — fused residual add + RMSNorm.
 *
 *   for t < T:
 *     if delta: resid[t, :] = round(resid[t, :] + delta[t, :])   (stays in act dtype, like HF fp16)
 *     inv = 1 / sqrt(mean_k(resid[t, k]^2) + eps)                (f32)
 *     out[t, k] = round(resid[t, k] * inv * w[k])
 *
 * resid/delta/out in act dtype (or f32); w f32 (f16/bf16 accepted).
 *
 * Workload: decode steps call this twice per layer on [n_seqs, d] (32 x 4096
 * f16: 1 MB moved, ~1 us of bandwidth), so the time is latency: one round
 * trip for the loads, one block reduction, one for the stores. Fast path
 * (half dtypes, d % 8 == 0, 16-byte aligned rows): one block per row, each
 * thread keeps NCH chunks of 8 elements in registers (16-byte loads and
 * stores), so resid is read once and the second pass needs no reload.
 * Blocks are sized to the row (d / 8 / NCH threads, a multiple of 32), so a
 * 4096-wide row is 512 threads with one chunk each.
 * Anything else (f32 activations, odd widths, unaligned views) takes the
 * generic one-block-per-row loop, where each thread re-reads in pass 2
 * exactly the elements it wrote in pass 1 (no barrier needed between them).
 * Both launch with programmatic dependent launch (cuda_common.cuh) and wait
 * for their predecessor before the first load.
 */
#include "kernels/ops.cuh"

#define NORM_THREADS 256
#define NORM_VEC_MAX_THREADS 1024

/* Block-wide sum; every thread gets the result. `red` holds 33 floats. */
__device__ __forceinline__ float block_sum(float v, float *red)
{
    v = warp_sum(v);
    const int warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if ((threadIdx.x & 31) == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = (int)threadIdx.x < nw ? red[threadIdx.x] : 0.0f;
        s = warp_sum(s);
        if (threadIdx.x == 0)
            red[32] = s;
    }
    __syncthreads();
    return red[32];
}

/* Fast path: chunk c (8 elements at 8c) of the row is thread c % blockDim's
 * (c / blockDim)-th; nch8 = D / 8. */
template <typename T, int NCH>
__global__ void add_rmsnorm_vec_kernel(T *resid, int64_t ldr, const T *delta, int64_t ldd,
                                       const void *w, lg_dtype wdt, bool w_vec, T *out,
                                       int64_t ldo, int nch8, float eps)
{
    __shared__ float red[33];
    pdl_trigger();
    pdl_wait(); /* resid and delta come from the kernels before */
    const int64_t t = blockIdx.x;
    uint4 *r = (uint4 *)(resid + t * ldr);
    const uint4 *dl = delta ? (const uint4 *)(delta + t * ldd) : NULL;
    float v[NCH][8];
    float ss = 0.0f;
    uint4 ru[NCH], du[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int ch = threadIdx.x + c * blockDim.x;
        if (ch < nch8) {
            ru[c] = r[ch];
            if (dl)
                du[c] = dl[ch];
        }
    }
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int ch = threadIdx.x + c * blockDim.x;
        if (ch < nch8) {
            if (dl)
                r[ch] = norm_add8<T>(ru[c], du[c], v[c]);
            else
                unpack8<T>(ru[c], v[c]);
            ss = norm_sq8(v[c], ss);
        }
    }
    const float inv = rsqrtf(block_sum(ss, red) / (float)(nch8 * 8) + eps);
    uint4 *o = (uint4 *)(out + t * ldo);
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        const int ch = threadIdx.x + c * blockDim.x;
        if (ch < nch8)
            o[ch] = norm_scale8<T>(v[c], inv, w, wdt, w_vec, ch * 8);
    }
}

template <typename T>
__global__ void add_rmsnorm_kernel(T *resid, int64_t ldr, const T *delta, int64_t ldd, const void *w, lg_dtype wdt,
                                   T *out, int64_t ldo, int D, float eps)
{
    __shared__ float red[33];
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x;
    T *r = resid + (int64_t)t * ldr;
    const T *dl = delta ? delta + (int64_t)t * ldd : NULL;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = to_f32(r[i]);
        if (dl) {
            T s = from_f32<T>(v + to_f32(dl[i]));
            r[i] = s;
            v = to_f32(s);
        }
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss, red) / (float)D + eps);
    T *o = out + (int64_t)t * ldo;
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = from_f32<T>(to_f32(r[i]) * inv * load_any(w, wdt, i));
}

/* The fast path when the views allow it; false: use the generic kernel. */
template <typename T>
static bool launch_vec(cuda_ctx *c, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    const int D = (int)resid.cols, nch8 = D / 8;
    const bool vec = D % 8 == 0 && resid.stride % 8 == 0 && out.stride % 8 == 0 && cu_aligned16(resid.data) &&
                     cu_aligned16(out.data) && (!delta.data || (delta.stride % 8 == 0 && cu_aligned16(delta.data)));
    if (!vec || nch8 > 4 * NORM_VEC_MAX_THREADS)
        return false;
    const bool w_vec = cu_aligned16(w.data);
    const int nch = nch8 <= NORM_VEC_MAX_THREADS ? 1 : nch8 <= 2 * NORM_VEC_MAX_THREADS ? 2 : 4;
    const int thr = ((nch8 + nch - 1) / nch + 31) / 32 * 32;
    const unsigned g = (unsigned)resid.rows;
    T *r = (T *)resid.data, *o = (T *)out.data;
    const T *d = (const T *)delta.data;
    if (nch == 1)
        (void)cu_launch(c, add_rmsnorm_vec_kernel<T, 1>, g, thr, 0, r, resid.stride, d, delta.stride, w.data, w.dtype,
                        w_vec, o, out.stride, nch8, eps);
    else if (nch == 2)
        (void)cu_launch(c, add_rmsnorm_vec_kernel<T, 2>, g, thr, 0, r, resid.stride, d, delta.stride, w.data, w.dtype,
                        w_vec, o, out.stride, nch8, eps);
    else
        (void)cu_launch(c, add_rmsnorm_vec_kernel<T, 4>, g, thr, 0, r, resid.stride, d, delta.stride, w.data, w.dtype,
                        w_vec, o, out.stride, nch8, eps);
    return true;
}
template <> bool launch_vec<float>(cuda_ctx *, lg_tensor, lg_tensor, lg_tensor, lg_tensor, float) { return false; }

template <typename T>
static void launch(cuda_ctx *c, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    if (launch_vec<T>(c, resid, delta, w, out, eps))
        return;
    (void)cu_launch(c, add_rmsnorm_kernel<T>, (unsigned)resid.rows, NORM_THREADS, 0, (T *)resid.data, resid.stride,
                    (const T *)delta.data, delta.stride, w.data, w.dtype, (T *)out.data, out.stride, (int)resid.cols,
                    eps);
}

int cu_add_rmsnorm_check(cuda_ctx *c, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out)
{
    CU_CHECK_VIEW(c, "add_rmsnorm resid", resid);
    CU_CHECK_VIEW(c, "add_rmsnorm out", out);
    CU_CHECK_VIEW(c, "add_rmsnorm w", w);
    if (delta.data)
        CU_CHECK_VIEW(c, "add_rmsnorm delta", delta);
    if (out.dtype != resid.dtype || (delta.data && delta.dtype != resid.dtype))
        return CU_FAIL(c, "add_rmsnorm: resid %s, delta %s, out %s must share one dtype", lg_dtype_name(resid.dtype),
                       delta.data ? lg_dtype_name(delta.dtype) : "-", lg_dtype_name(out.dtype));
    if (out.rows != resid.rows || out.cols != resid.cols || w.rows * w.cols < resid.cols ||
        (delta.data && (delta.rows != resid.rows || delta.cols != resid.cols)))
        return CU_FAIL(c, "add_rmsnorm: shapes differ (resid [%lld,%lld], out [%lld,%lld], w %lld)",
                       (long long)resid.rows, (long long)resid.cols, (long long)out.rows, (long long)out.cols,
                       (long long)(w.rows * w.cols));
    return 0;
}

int cu_add_rmsnorm(lg_backend *be, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    cuda_ctx *c = CU_CTX(be);
    if (cu_add_rmsnorm_check(c, resid, delta, w, out) != 0)
        return -1;
    if (resid.rows == 0)
        return 0;
    if (resid.dtype == LG_F32) launch<float>(c, resid, delta, w, out, eps);
    else if (resid.dtype == LG_F16) launch<__half>(c, resid, delta, w, out, eps);
    else launch<__nv_bfloat16>(c, resid, delta, w, out, eps);
    CU_LAUNCHED(c);
    return 0;
}
