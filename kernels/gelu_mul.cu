/*
 * gelu_mul.cu — GeGLU activation (Gemma) over the fused gate_up output.
 *
 *   for t < T, f < F:  g = gu[t, f], u = gu[t, F + f]
 *     out[t, f] = round(0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u)   (f32 math, one rounding)
 *
 * PyTorch's gelu(approximate='tanh'), as the CPU backend computes it. One
 * thread per element (grid-stride): the op runs only for Gemma models, whose
 * decode steps it does not dominate; silu_mul.cu's 16-byte form is the model
 * for a faster one.
 */
#include "kernels/ops.cuh"

template <typename T>
__global__ void gelu_mul_kernel(T *out, int64_t ldo, const T *gu, int64_t ldg, int F, int T_)
{
    pdl_trigger();
    pdl_wait();
    const int64_t n = (int64_t)F * T_;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = j / F, f = j % F;
        const T *r = gu + t * ldg;
        const float g = to_f32(r[f]), u = to_f32(r[F + f]);
        const float y = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
        out[t * ldo + f] = from_f32<T>(y);
    }
}

template <typename T>
static void launch(cuda_ctx *c, lg_tensor out, lg_tensor gate_up)
{
    const int F = (int)out.cols, R = (int)out.rows;
    const int64_t n = (int64_t)F * R;
    const unsigned blocks = (unsigned)((n + 255) / 256 < 8 * 1024 ? (n + 255) / 256 : 8 * 1024);
    (void)cu_launch(c, gelu_mul_kernel<T>, blocks, 256, 0, (T *)out.data, out.stride, (const T *)gate_up.data,
                    gate_up.stride, F, R);
}

int cu_gelu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "gelu_mul out", out);
    CU_CHECK_VIEW(c, "gelu_mul gate_up", gate_up);
    if (out.dtype != gate_up.dtype || gate_up.cols != 2 * out.cols || gate_up.rows != out.rows)
        return CU_FAIL(c, "gelu_mul: out %s [%lld,%lld] vs gate_up %s [%lld,%lld] (expected same dtype, 2x cols)",
                       lg_dtype_name(out.dtype), (long long)out.rows, (long long)out.cols,
                       lg_dtype_name(gate_up.dtype), (long long)gate_up.rows, (long long)gate_up.cols);
    if (out.rows == 0)
        return 0;
    if (out.dtype == LG_F32) launch<float>(c, out, gate_up);
    else if (out.dtype == LG_F16) launch<__half>(c, out, gate_up);
    else launch<__nv_bfloat16>(c, out, gate_up);
    CU_LAUNCHED(c);
    return 0;
}
