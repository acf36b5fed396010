/*
 * silu_mul.cu — SwiGLU activation over the fused gate_up output.
 *
 *   for t < T, f < F:  g = gu[t, f], u = gu[t, F + f]
 *     out[t, f] = round(g / (1 + exp(-g)) * u)        (f32 math, one rounding)
 */
#include "ops.cuh"

template <typename T>
__global__ void silu_mul_kernel(T *out, int64_t ldo, const T *gu, int64_t ldg, int F, int T_)
{
    const int64_t n = (int64_t)F * T_;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = j / F, f = j % F;
        const T *r = gu + t * ldg;
        float g = to_f32(r[f]), u = to_f32(r[F + f]);
        out[t * ldo + f] = from_f32<T>(g / (1.0f + expf(-g)) * u);
    }
}

int cu_silu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "silu_mul out", out);
    CU_CHECK_VIEW(c, "silu_mul gate_up", gate_up);
    if (out.dtype != gate_up.dtype || gate_up.cols != 2 * out.cols || gate_up.rows != out.rows)
        return CU_FAIL(c, "silu_mul: out %s [%lld,%lld] vs gate_up %s [%lld,%lld] (expected same dtype, 2x cols)",
                       cu_dtype_name(out.dtype), (long long)out.rows, (long long)out.cols,
                       cu_dtype_name(gate_up.dtype), (long long)gate_up.rows, (long long)gate_up.cols);
    if (out.rows == 0)
        return 0;
    int64_t n = out.rows * out.cols;
    unsigned blocks = (unsigned)((n + 255) / 256 < 8 * 1024 ? (n + 255) / 256 : 8 * 1024);
    if (out.dtype == LG_F32)
        silu_mul_kernel<float><<<blocks, 256, 0, c->stream>>>((float *)out.data, out.stride,
                                                             (const float *)gate_up.data, gate_up.stride,
                                                             (int)out.cols, (int)out.rows);
    else if (out.dtype == LG_F16)
        silu_mul_kernel<__half><<<blocks, 256, 0, c->stream>>>((__half *)out.data, out.stride,
                                                              (const __half *)gate_up.data, gate_up.stride,
                                                              (int)out.cols, (int)out.rows);
    else
        silu_mul_kernel<__nv_bfloat16><<<blocks, 256, 0, c->stream>>>((__nv_bfloat16 *)out.data, out.stride,
                                                                     (const __nv_bfloat16 *)gate_up.data,
                                                                     gate_up.stride, (int)out.cols, (int)out.rows);
    CU_LAUNCHED(c);
    return 0;
}
