/*
 * scale_cap.cu — an in-place scale, or a soft-cap (Gemma): the embedding
 * times sqrt(hidden_size), and the logits' final_logit_softcapping.
 *
 *   x[t, k] = round(cap > 0 ? cap * tanh(s * x[t, k] / cap) : s * x[t, k])   (f32 math)
 *
 * One thread per element (grid-stride); x any dtype, any row stride.
 */
#include "kernels/ops.cuh"

template <typename T>
__global__ void scale_cap_kernel(T *x, int64_t ldx, int64_t cols, int64_t rows, float s, float cap)
{
    pdl_trigger();
    pdl_wait();
    const int64_t n = cols * rows;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        T *p = x + (j / cols) * ldx + j % cols;
        const float v = to_f32(*p);
        *p = from_f32<T>(cap > 0.0f ? cap * tanhf(s * v / cap) : s * v);
    }
}

template <typename T>
static void launch(cuda_ctx *c, lg_tensor x, float s, float cap)
{
    const int64_t n = x.rows * x.cols;
    const unsigned blocks = (unsigned)((n + 255) / 256 < 8 * 1024 ? (n + 255) / 256 : 8 * 1024);
    (void)cu_launch(c, scale_cap_kernel<T>, blocks, 256, 0, (T *)x.data, x.stride, x.cols, x.rows, s, cap);
}

int cu_scale_cap(lg_backend *be, lg_tensor x, float s, float cap)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "scale_cap x", x);
    if (x.rows == 0 || x.cols == 0)
        return 0;
    if (x.dtype == LG_F32) launch<float>(c, x, s, cap);
    else if (x.dtype == LG_F16) launch<__half>(c, x, s, cap);
    else launch<__nv_bfloat16>(c, x, s, cap);
    CU_LAUNCHED(c);
    return 0;
}
