/*
 * gemm.cu — matmul: y[T, N] (+)= x[T, K] @ W[N, K]^T (+ bias[N]).
 *
 *   for t < T, n < N:
 *     acc = sum_k float(x[t, k]) * float(W[n, k])          (f32 accumulation)
 *     y[t, n] = (accumulate ? y[t, n] : 0) + acc (+ bias[n])
 *
 * x and W in f16/bf16 (the same type), y in that type or f32 (logits).
 * Row-major strided views map onto column-major cuBLAS as
 * y^T[N, T] = op_T(W^T[K, N]) @ x^T[K, T], with ld = each view's stride.
 * The bias (f32/f16/bf16, added in f32) is a second small kernel; only
 * models with qkv biases pay for it. With accumulate, the product is added
 * to y through beta = 1 and the bias, if any, after.
 * Decode shapes go elsewhere first: on Hopper, 2 <= T <= 64 to the TMA + wgmma
 * stream-K matmul (gemm_tma.cu; LG_STREAMK=0 turns it off), T <= 4 that it does
 * not take (one row, other GPUs) to the GEMV (gemv.cu); cuBLAS takes the rest
 * (prefill) and anything their alignment rules refuse.
 * A quantized W (W.q set: backend.h's planar checkpoint layouts) goes to cu_matmul_quant
 * (qmm_prefill.cu: matmul_f8.cu, matmul_i4.cu).
 * Note: when y is half precision, y is rounded once after the GEMM and once
 * more after the bias (the bias pass reads the rounded value).
 */
#include "kernels/ops.cuh"

template <typename TY>
__global__ void bias_add_kernel(TY *y, int64_t ldy, const void *bias, lg_dtype bdt, int N, int T)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    float b = load_any(bias, bdt, n);
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        TY *p = y + (int64_t)t * ldy + n;
        *p = from_f32<TY>(to_f32(*p) + b);
    }
}

static cudaDataType_t cu_type(lg_dtype t)
{
    return t == LG_F32 ? CUDA_R_32F : t == LG_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

int cu_matmul_check(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias)
{
    CU_CHECK_VIEW(c, "matmul y", y);
    CU_CHECK_VIEW(c, "matmul x", x);
    CU_CHECK_VIEW(c, "matmul W", W);
    if (!cu_is_half(x.dtype) || W.dtype != x.dtype)
        return CU_FAIL(c, "matmul: x and W must both be f16 or bf16, found x %s, W %s", lg_dtype_name(x.dtype),
                       lg_dtype_name(W.dtype));
    if (y.dtype != LG_F32 && y.dtype != x.dtype)
        return CU_FAIL(c, "matmul: y must be f32 or %s, found %s", lg_dtype_name(x.dtype), lg_dtype_name(y.dtype));
    if (x.cols != W.cols || y.cols != W.rows || y.rows != x.rows)
        return CU_FAIL(c, "matmul: shapes y[%lld,%lld] x[%lld,%lld] W[%lld,%lld] do not match y = x W^T",
                       (long long)y.rows, (long long)y.cols, (long long)x.rows, (long long)x.cols,
                       (long long)W.rows, (long long)W.cols);
    if (bias.data && (!cu_is_float(bias.dtype) || bias.rows * bias.cols < W.rows))
        return CU_FAIL(c, "matmul: bias must be a float vector of %lld, found %s [%lld x %lld]", (long long)W.rows,
                       lg_dtype_name(bias.dtype), (long long)bias.rows, (long long)bias.cols);
    return 0;
}

int cu_matmul(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    if (W.q != LG_QNONE) /* a checkpoint's planar layout: matmul_f8.cu, matmul_i4.cu */
        return cu_matmul_quant(be, y, x, W, bias, accumulate);
    if (cu_matmul_check(c, y, x, W, bias) != 0)
        return -1;
    const int T = (int)x.rows, N = (int)W.rows, K = (int)x.cols;
    if (T == 0)
        return 0;
    /* decode batches: the TMA + wgmma stream-K weight stream of gemm_tma.cu (default on Hopper for 2..64
     * rows); one row, or 2..4 rows it declines (or with the GEMV forced, LG_GEMV=10 + v), the
     * weight-streaming GEMV of gemv.cu, where its alignment allows */
    const bool gemv_first = !cu_tma_takes(c, T) || c->tune->gemv >= 10;
    int r;
    if (!gemv_first && (r = cu_tma_try(be, y, x, W, bias, accumulate)) <= 0)
        return r;
    if ((r = cu_gemv_try(be, y, x, W, bias, accumulate)) <= 0)
        return r;
    if (gemv_first && (r = cu_tma_try(be, y, x, W, bias, accumulate)) <= 0)
        return r;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W.data, cu_type(W.dtype),
                                     (int)W.stride, x.data, cu_type(x.dtype), (int)x.stride, &beta, y.data,
                                     cu_type(y.dtype), (int)y.stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return CU_FAIL(c, "matmul: cublasGemmEx(N=%d T=%d K=%d, %s x %s -> %s) failed: status %d", N, T, K,
                       lg_dtype_name(x.dtype), lg_dtype_name(W.dtype), lg_dtype_name(y.dtype), (int)st);
    if (bias.data) {
        dim3 grid((unsigned)((N + 255) / 256), (unsigned)(T < 1024 ? T : 1024));
        if (y.dtype == LG_F32)
            bias_add_kernel<float><<<grid, 256, 0, c->stream>>>((float *)y.data, y.stride, bias.data, bias.dtype, N, T);
        else if (y.dtype == LG_F16)
            bias_add_kernel<__half><<<grid, 256, 0, c->stream>>>((__half *)y.data, y.stride, bias.data, bias.dtype, N, T);
        else
            bias_add_kernel<__nv_bfloat16>
                <<<grid, 256, 0, c->stream>>>((__nv_bfloat16 *)y.data, y.stride, bias.data, bias.dtype, N, T);
        CU_LAUNCHED(c);
    }
    return 0;
}
