/*
 * rope.cu — rotate-half rotary embedding, in place on q and k.
 *
 *   for t < T, i < hd/2:  ang = pos[t] * inv_freq[i]       (f64, then cos/sin in f64)
 *     for each head h of q (n_heads) and of k (n_kv_heads):
 *       a = x[t, h*hd + i], b = x[t, h*hd + i + hd/2]
 *       x[.. + i] = a cos - b sin;  x[.. + i + hd/2] = b cos + a sin
 *
 * One block per token: the block computes the hd/2 angles once (shared),
 * then all heads of q and k. The angle is formed in f64 like the CPU oracle
 * (HF forms it in f32; f64 only removes error at long positions).
 */
#include "ops.cuh"

template <typename T>
__global__ void rope_kernel(T *q, int64_t ldq, T *k, int64_t ldk, const int32_t *pos, const float *inv_freq, int nh,
                            int nkv, int hd)
{
    extern __shared__ float cs[]; /* [hd/2] cos, then [hd/2] sin */
    const int t = blockIdx.x, half = hd / 2;
    const double p = (double)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, co;
        sincos(p * (double)inv_freq[i], &s, &co);
        cs[i] = (float)co;
        cs[half + i] = (float)s;
    }
    __syncthreads();
    const int n = (nh + nkv) * half;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        int h = j / half, i = j % half;
        T *v = h < nh ? q + (int64_t)t * ldq + (int64_t)h * hd : k + (int64_t)t * ldk + (int64_t)(h - nh) * hd;
        float a = to_f32(v[i]), b = to_f32(v[i + half]);
        float co = cs[i], s = cs[half + i];
        v[i] = from_f32<T>(a * co - b * s);
        v[i + half] = from_f32<T>(b * co + a * s);
    }
}

int cu_rope(lg_backend *be, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq, int n_heads,
            int n_kv_heads, int head_dim)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "rope q", q);
    CU_CHECK_VIEW(c, "rope k", k);
    if (q.dtype != k.dtype)
        return CU_FAIL(c, "rope: q %s and k %s differ", cu_dtype_name(q.dtype), cu_dtype_name(k.dtype));
    if (head_dim <= 0 || head_dim % 2 || head_dim > 1024)
        return CU_FAIL(c, "rope: head_dim must be even and <= 1024, found %d", head_dim);
    if (q.cols < (int64_t)n_heads * head_dim || k.cols < (int64_t)n_kv_heads * head_dim || q.rows != k.rows)
        return CU_FAIL(c, "rope: q [%lld,%lld] / k [%lld,%lld] too small for %d/%d heads of %d", (long long)q.rows,
                       (long long)q.cols, (long long)k.rows, (long long)k.cols, n_heads, n_kv_heads, head_dim);
    if (!pos || !inv_freq)
        return CU_FAIL(c, "rope: pos or inv_freq is NULL");
    if (q.rows == 0)
        return 0;
    size_t sm = (size_t)head_dim * sizeof(float);
    unsigned g = (unsigned)q.rows;
    if (q.dtype == LG_F32)
        rope_kernel<float><<<g, 256, sm, c->stream>>>((float *)q.data, q.stride, (float *)k.data, k.stride, pos,
                                                     inv_freq, n_heads, n_kv_heads, head_dim);
    else if (q.dtype == LG_F16)
        rope_kernel<__half><<<g, 256, sm, c->stream>>>((__half *)q.data, q.stride, (__half *)k.data, k.stride, pos,
                                                      inv_freq, n_heads, n_kv_heads, head_dim);
    else
        rope_kernel<__nv_bfloat16><<<g, 256, sm, c->stream>>>((__nv_bfloat16 *)q.data, q.stride,
                                                             (__nv_bfloat16 *)k.data, k.stride, pos, inv_freq,
                                                             n_heads, n_kv_heads, head_dim);
    CU_LAUNCHED(c);
    return 0;
}
