/*
 * add_rmsnorm.cu — fused residual add + RMSNorm, one block per row.
 *
 *   for t < T:
 *     if delta: resid[t, :] = round(resid[t, :] + delta[t, :])   (stays in act dtype, like HF fp16)
 *     inv = 1 / sqrt(mean_k(resid[t, k]^2) + eps)                (f32)
 *     out[t, k] = round(resid[t, k] * inv * w[k])
 *
 * resid/delta/out in act dtype (or f32); w f32 (f16/bf16 accepted). Each
 * thread re-reads in pass 2 exactly the elements it wrote in pass 1, so no
 * barrier is needed between the write of resid and its second read.
 */
#include "ops.cuh"

#define NORM_THREADS 256

template <typename T>
__global__ void add_rmsnorm_kernel(T *resid, int64_t ldr, const T *delta, int64_t ldd, const void *w, lg_dtype wdt,
                                   T *out, int64_t ldo, int D, float eps)
{
    __shared__ float red[NORM_THREADS / 32];
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
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0)
            red[0] = v;
    }
    __syncthreads();
    const float inv = rsqrtf(red[0] / (float)D + eps);
    T *o = out + (int64_t)t * ldo;
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = from_f32<T>(to_f32(r[i]) * inv * load_any(w, wdt, i));
}

template <typename T>
static void launch(cuda_ctx *c, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    add_rmsnorm_kernel<T><<<(unsigned)resid.rows, NORM_THREADS, 0, c->stream>>>(
        (T *)resid.data, resid.stride, (const T *)delta.data, delta.stride, w.data, w.dtype, (T *)out.data,
        out.stride, (int)resid.cols, eps);
}

int cu_add_rmsnorm(lg_backend *be, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "add_rmsnorm resid", resid);
    CU_CHECK_VIEW(c, "add_rmsnorm out", out);
    CU_CHECK_VIEW(c, "add_rmsnorm w", w);
    if (out.dtype != resid.dtype || (delta.data && delta.dtype != resid.dtype))
        return CU_FAIL(c, "add_rmsnorm: resid %s, delta %s, out %s must share one dtype", cu_dtype_name(resid.dtype),
                       delta.data ? cu_dtype_name(delta.dtype) : "-", cu_dtype_name(out.dtype));
    if (out.rows != resid.rows || out.cols != resid.cols || w.rows * w.cols < resid.cols ||
        (delta.data && (delta.rows != resid.rows || delta.cols != resid.cols)))
        return CU_FAIL(c, "add_rmsnorm: shapes differ (resid [%lld,%lld], out [%lld,%lld], w %lld)",
                       (long long)resid.rows, (long long)resid.cols, (long long)out.rows, (long long)out.cols,
                       (long long)(w.rows * w.cols));
    if (resid.rows == 0)
        return 0;
    if (resid.dtype == LG_F32) launch<float>(c, resid, delta, w, out, eps);
    else if (resid.dtype == LG_F16) launch<__half>(c, resid, delta, w, out, eps);
    else launch<__nv_bfloat16>(c, resid, delta, w, out, eps);
    CU_LAUNCHED(c);
    return 0;
}
