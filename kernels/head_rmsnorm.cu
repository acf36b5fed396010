/*
 * head_rmsnorm.cu — RMSNorm of each head of q or k, in place (the q/k norms
 * of Qwen3 and Gemma 3, before RoPE).
 *
 *   for t < T, h < n_heads:  v = x[t, h*hd : (h+1)*hd]
 *     inv = 1 / sqrt(mean_k(v[k]^2) + eps)       (f32)
 *     v[k] = round(v[k] * inv * w[k])            (w: [hd] f32)
 *
 * One warp per (token, head): each lane reads its elements, the warp sums
 * the squares (warp_sum) and the lanes write back what they read. x is a
 * column slice of the q,k,v matmul's output (any row stride).
 */
#include "kernels/ops.cuh"

template <typename T>
__global__ void head_rmsnorm_kernel(T *x, int64_t ldx, const float *w, int n_heads, int hd, int T_, float eps)
{
    pdl_trigger();
    pdl_wait();
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (item >= (int64_t)T_ * n_heads)
        return;
    T *v = x + (item / n_heads) * ldx + (item % n_heads) * hd;
    float ss = 0.0f;
    for (int k = lane; k < hd; k += 32) {
        const float a = to_f32(v[k]);
        ss += a * a;
    }
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    for (int k = lane; k < hd; k += 32) v[k] = from_f32<T>(to_f32(v[k]) * inv * w[k]);
}

template <typename T>
static void launch(cuda_ctx *c, lg_tensor x, lg_tensor w, int n_heads, int hd, float eps)
{
    const int64_t items = x.rows * n_heads;
    const unsigned blocks = (unsigned)((items + 7) / 8);
    (void)cu_launch(c, head_rmsnorm_kernel<T>, blocks, 256, 0, (T *)x.data, x.stride, (const float *)w.data, n_heads,
                    hd, (int)x.rows, eps);
}

int cu_head_rmsnorm(lg_backend *be, lg_tensor x, lg_tensor w, int n_heads, int head_dim, float eps)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "head_rmsnorm x", x);
    if (w.dtype != LG_F32 || w.cols != head_dim || x.cols != (int64_t)n_heads * head_dim)
        return CU_FAIL(c, "head_rmsnorm: x [%lld,%lld], w %s [%lld], expected %d heads of %d and f32 w",
                       (long long)x.rows, (long long)x.cols, lg_dtype_name(w.dtype), (long long)w.cols, n_heads,
                       head_dim);
    if (x.rows == 0)
        return 0;
    if (x.dtype == LG_F32) launch<float>(c, x, w, n_heads, head_dim, eps);
    else if (x.dtype == LG_F16) launch<__half>(c, x, w, n_heads, head_dim, eps);
    else launch<__nv_bfloat16>(c, x, w, n_heads, head_dim, eps);
    CU_LAUNCHED(c);
    return 0;
}
