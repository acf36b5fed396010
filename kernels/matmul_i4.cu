/*
 * matmul_i4.cu — matmul with an INT4 checkpoint weight (LG_QI4, backend.h's planar layout; W4A16:
 * AWQ, GPTQ, compressed-tensors pack-quantized): y[T, N] (+)= x[T, K] W^T (+ bias) with
 * W[n, k] = d[n, g] * (q[n, k] - z[n, g]) per group g of 128, f32 accumulation.
 *
 * How, by T:
 *   T <= 4: the CUDA-core GEMV of qgemv.cu (LG_QGEMV = 0: the next line).
 *   T <= 128: qmm.cuh's tensor-core weight stream in launches of up to 32 token rows: 16 bytes of
 *     nibbles a lane, (q - z) made an exact f16 (or bf16) value in registers, multiplied by x as it
 *     is, each group's f32 sum times d: the format's math with f32 sums (d is not folded into the
 *     16-bit weight, so nothing rounds but the sums).
 *   larger T: qmm_prefill.cu (the weight dequantized to x's dtype in bounded row chunks, cuBLAS).
 */
#include "kernels/ops.cuh"
#include "kernels/qmm.cuh"

int cu_matmul_i4(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    if (cu_matmul_qcheck(c, y, x, W, bias) != 0)
        return -1;
    if (W.q != LG_QI4)
        return CU_FAIL(c, "matmul: expected an I4 weight, found %s", lg_qtype_get(W.q).name);
    const int T = (int)x.rows, N = (int)W.rows, K = (int)W.cols;
    if (T == 0)
        return 0;
    const lg_qplanes p = lg_qplanes_of(W);
    const bool f16 = x.dtype == LG_F16;
    if (T > QMM_STREAM_MAX_T) {
        const int64_t ldo = ((int64_t)K + 7) & ~(int64_t)7;
        int64_t chunk = (int64_t)(QMM_CHUNK_BYTES / ((size_t)ldo * 2)) & ~(int64_t)63;
        if (chunk < 64)
            chunk = 64;
        if (chunk > N)
            chunk = N;
        void *ws = cu_workspace(c, (size_t)chunk * (size_t)ldo * 2);
        if (!ws)
            return CU_FAIL(c, "matmul (I4): no workspace for the prefill path (N=%d K=%d)", N, K);
        return qmm_prefill(c, y, x, W, p, bias, accumulate, ws, chunk, ldo, 0, N);
    }
    qmm_args a = {};
    a.q = p.q, a.d = p.d, a.z = p.z, a.q_row = p.q_row, a.nb = (int)p.nb;
    a.bias = bias.data, a.bdt = bias.dtype, a.N = N, a.K = K, a.accumulate = accumulate;
    a.x_vec = x.stride % 8 == 0 && cu_aligned16(x.data);
    a.ldx = x.stride, a.ldy = y.stride;
    for (int t0 = 0; t0 < T; t0 += QMM_MAX_T) {
        a.T = T - t0 < QMM_MAX_T ? T - t0 : QMM_MAX_T;
        a.x = (const char *)x.data + (size_t)t0 * (size_t)x.stride * 2;
        a.y = (char *)y.data + (size_t)t0 * (size_t)y.stride * lg_dtype_size(y.dtype);
        if (T <= QGEMV_MAX_T) { /* the CUDA-core GEMV (qgemv.cu) unless LG_QGEMV = 0 */
            const int rc = cu_qgemv_try(c, QMM_I4, QMM_X_RAW, x.dtype, y.dtype, &a);
            if (rc <= 0)
                return rc;
        }
        cudaError_t e;
        if (f16)
            e = y.dtype == LG_F32 ? qmm_launch<QMM_I4, __half, QMM_X_RAW, __half, float>(c, a)
                                  : qmm_launch<QMM_I4, __half, QMM_X_RAW, __half, __half>(c, a);
        else
            e = y.dtype == LG_F32
                    ? qmm_launch<QMM_I4, __nv_bfloat16, QMM_X_RAW, __nv_bfloat16, float>(c, a)
                    : qmm_launch<QMM_I4, __nv_bfloat16, QMM_X_RAW, __nv_bfloat16, __nv_bfloat16>(c, a);
        if (e != cudaSuccess)
            return CU_FAIL(c, "matmul (I4): launch (N=%d T=%d K=%d) failed: %s", N, a.T, K, cudaGetErrorString(e));
    }
    return 0;
}
