/*
 * qmm_prefill.cu — what the planar-layout matmuls (matmul_f8.cu, matmul_i4.cu) share on the host:
 * their argument checks (cu_matmul_qcheck) and the prefill path (qmm_prefill) for large T:
 *
 *   for each chunk of at most `chunk` weight rows [r0, r0 + n) of [r_begin, r_end):
 *     Wd[n, K] = dequantized rows (d * e4m3 q, or d * (q - z)) in x's dtype   (qmm_dequant_kernel)
 *     y[:, r0 : r0 + n] (+)= x Wd^T (+ bias)                                   (cublasGemmEx, f32 accumulation)
 *
 * Why: at a few hundred tokens and more the matmul is bound by the tensor cores, not by the weight
 * bytes, so reading each weight as 1 (or 0.5) byte, writing 2 and reading 2 again costs little
 * next to the GEMM, and cuBLAS's 16-bit GEMM is the fastest we have. The scratch is bounded
 * (QMM_CHUNK_BYTES of rows) and reused chunk after chunk, in stream order.
 * Limits: d * q is rounded to x's dtype (f16: 11 bits, bf16: 8); one thread a run of 8 elements.
 */
#include "kernels/ops.cuh"
#include "kernels/qmm.cuh"

int cu_matmul_qcheck(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias)
{
    CU_CHECK_VIEW(c, "matmul y", y);
    CU_CHECK_VIEW(c, "matmul x", x);
    if (!lg_qtype_is_planar(W.q) || !W.data || W.rows <= 0 || W.cols <= 0 || W.stride != W.cols ||
        W.rows > INT32_MAX / 2 || W.cols > INT32_MAX / 2)
        return CU_FAIL(c, "matmul: W must be a whole planar quantized tensor (F8*, I4), found %s [%lld x %lld] stride %lld",
                       lg_qtype_get(W.q).name, (long long)W.rows, (long long)W.cols, (long long)W.stride);
    if (!cu_is_half(x.dtype))
        return CU_FAIL(c, "matmul (%s): x must be f16 or bf16, found %s", lg_qtype_get(W.q).name, lg_dtype_name(x.dtype));
    if (y.dtype != LG_F32 && y.dtype != x.dtype)
        return CU_FAIL(c, "matmul (%s): y must be f32 or %s, found %s", lg_qtype_get(W.q).name, lg_dtype_name(x.dtype),
                       lg_dtype_name(y.dtype));
    if (x.cols != W.cols || y.cols != W.rows || y.rows != x.rows)
        return CU_FAIL(c, "matmul (%s): shapes y[%lld,%lld] x[%lld,%lld] W[%lld,%lld] do not match y = x W^T",
                       lg_qtype_get(W.q).name, (long long)y.rows, (long long)y.cols, (long long)x.rows,
                       (long long)x.cols, (long long)W.rows, (long long)W.cols);
    if (bias.data && (!cu_is_float(bias.dtype) || bias.rows * bias.cols < W.rows))
        return CU_FAIL(c, "matmul: bias must be a float vector of %lld, found %s [%lld x %lld]", (long long)W.rows,
                       lg_dtype_name(bias.dtype), (long long)bias.rows, (long long)bias.cols);
    return 0;
}

int cu_matmul_quant(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    if (W.q == LG_QI4)
        return cu_matmul_i4(be, y, x, W, bias, accumulate);
    if (lg_qtype_is_planar(W.q))
        return cu_matmul_f8(be, y, x, W, bias, accumulate);
    return CU_FAIL(CU_CTX(be), "matmul: the CUDA backend does not take weights of layout %s", lg_qtype_get(W.q).name);
}

bool cu_takes_quant(lg_backend *be, lg_qtype q)
{
    (void)be;
    return lg_qtype_is_planar(q);
}

/* rows [r0, r0 + n) of W into out [n, ldo] (x's dtype), elements past K untouched */
template <int WF, typename TO>
__global__ void __launch_bounds__(256) qmm_dequant_kernel(const uint8_t *q, const void *d, const uint8_t *z,
                                                          int64_t q_row, int nb, int K, int r0, int n, TO *out,
                                                          int64_t ldo)
{
    pdl_trigger();
    const int64_t per_row = (int64_t)nb * 16, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * per_row)
        return;
    const int rl = (int)(i / per_row), ch = (int)(i - (int64_t)rl * per_row), g = ch >> 4, k0 = ch * 8;
    const int64_t r = (int64_t)r0 + rl;
    float v[8];
    if (WF == QMM_F8) {
        const uint2 b = __ldg((const uint2 *)(q + r * q_row + k0));
        const float dv = __ldg((const float *)d + r * nb + g);
        const uint8_t *bb = (const uint8_t *)&b;
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = dv * __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)bb[e], __NV_E4M3)));
    } else {
        const uint32_t b = __ldg((const uint32_t *)(q + r * q_row + k0 / 2));
        const float dv = __half2float(__ldg((const __half *)d + r * nb + g));
        const int zv = __ldg(z + r * nb + g);
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = dv * (float)((int)((b >> (4 * e)) & 15u) - zv);
    }
    pdl_wait(); /* out may still be read by the GEMM of the previous chunk */
    TO *o = out + (int64_t)rl * ldo + k0;
    if (k0 + 8 <= K) {
        *(uint4 *)o = pack8<TO>(v);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (k0 + e < K)
                o[e] = from_f32<TO>(v[e]);
    }
}

template <typename TY>
__global__ void qmm_bias_kernel(TY *y, int64_t ldy, const void *bias, lg_dtype bdt, int n, int T)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float b = load_any(bias, bdt, i);
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        TY *p = y + (int64_t)t * ldy + i;
        *p = from_f32<TY>(to_f32(*p) + b);
    }
}

int qmm_bias(cuda_ctx *c, lg_tensor y, lg_tensor bias, int r0, int n, int T)
{
    const size_t ys = lg_dtype_size(y.dtype);
    void *yc = (char *)y.data + (size_t)r0 * ys;
    const char *bp = (const char *)bias.data + (size_t)r0 * lg_dtype_size(bias.dtype);
    const dim3 bg((unsigned)((n + 255) / 256), (unsigned)(T < 1024 ? T : 1024));
    if (y.dtype == LG_F32)
        qmm_bias_kernel<float><<<bg, 256, 0, c->stream>>>((float *)yc, y.stride, bp, bias.dtype, n, T);
    else if (y.dtype == LG_F16)
        qmm_bias_kernel<__half><<<bg, 256, 0, c->stream>>>((__half *)yc, y.stride, bp, bias.dtype, n, T);
    else
        qmm_bias_kernel<__nv_bfloat16><<<bg, 256, 0, c->stream>>>((__nv_bfloat16 *)yc, y.stride, bp, bias.dtype, n, T);
    CU_LAUNCHED(c);
    return 0;
}

int qmm_prefill(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_qplanes p, lg_tensor bias, bool accumulate,
                void *scratch, int64_t chunk, int64_t ldo, int r_begin, int r_end)
{
    const int T = (int)x.rows, N = (int)W.rows, K = (int)W.cols, nb = (int)p.nb;
    const cudaDataType_t xt = x.dtype == LG_F16 ? CUDA_R_16F : CUDA_R_16BF;
    const cudaDataType_t yt = y.dtype == LG_F32 ? CUDA_R_32F : xt;
    const size_t ys = lg_dtype_size(y.dtype);
    (void)N;
    for (int64_t r0 = r_begin; r0 < r_end; r0 += chunk) {
        const int n = (int)(r_end - r0 < chunk ? r_end - r0 : chunk);
        const int64_t threads = (int64_t)n * nb * 16;
        const dim3 grid((unsigned)((threads + 255) / 256));
        cudaError_t e;
        if (W.q == LG_QI4)
            e = x.dtype == LG_F16
                    ? cu_launch(c, qmm_dequant_kernel<QMM_I4, __half>, grid, dim3(256), 0, (const uint8_t *)p.q,
                                (const void *)p.d, (const uint8_t *)p.z, p.q_row, nb, K, (int)r0, n, (__half *)scratch, ldo)
                    : cu_launch(c, qmm_dequant_kernel<QMM_I4, __nv_bfloat16>, grid, dim3(256), 0, (const uint8_t *)p.q,
                                (const void *)p.d, (const uint8_t *)p.z, p.q_row, nb, K, (int)r0, n,
                                (__nv_bfloat16 *)scratch, ldo);
        else
            e = x.dtype == LG_F16
                    ? cu_launch(c, qmm_dequant_kernel<QMM_F8, __half>, grid, dim3(256), 0, (const uint8_t *)p.q,
                                (const void *)p.d, (const uint8_t *)NULL, p.q_row, nb, K, (int)r0, n, (__half *)scratch,
                                ldo)
                    : cu_launch(c, qmm_dequant_kernel<QMM_F8, __nv_bfloat16>, grid, dim3(256), 0, (const uint8_t *)p.q,
                                (const void *)p.d, (const uint8_t *)NULL, p.q_row, nb, K, (int)r0, n,
                                (__nv_bfloat16 *)scratch, ldo);
        if (e != cudaSuccess)
            return CU_FAIL(c, "matmul (%s): dequantize launch failed: %s", lg_qtype_get(W.q).name, cudaGetErrorString(e));
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        void *yc = (char *)y.data + (size_t)r0 * ys;
        const cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, T, K, &alpha, scratch, xt, (int)ldo,
                                               x.data, xt, (int)x.stride, &beta, yc, yt, (int)y.stride,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            return CU_FAIL(c, "matmul (%s): cublasGemmEx(N=%d T=%d K=%d) failed: status %d", lg_qtype_get(W.q).name, n,
                           T, K, (int)st);
        if (bias.data && qmm_bias(c, y, bias, (int)r0, n, T) != 0)
            return -1;
    }
    return 0;
}
