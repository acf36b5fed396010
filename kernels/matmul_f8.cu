/*
 * matmul_f8.cu — matmul with an FP8 checkpoint weight (LG_QF8, LG_QF8_A8, LG_QF8_A8S, LG_QF8_A8G;
 * backend.h's planar layouts): y[T, N] (+)= x~[T, K] W^T (+ bias), W = d * e4m3 q per group of 128.
 *
 * What: the activations x~ are as the layout says: F8 x itself (W8A16); F8_A8 s * e4m3(x / s) with
 * s = amax(|x[t]|) / 448 per token; F8_A8G the same per token and group of 128; F8_A8S with its a
 * plane (a > 0 static, a < 0 dynamic with amax bounded by -a). f32 accumulation, one rounding
 * of y (after accumulate and bias).
 *
 * How, by T:
 *   T <= 4: the CUDA-core GEMV of qgemv.cu (after the prepass; LG_QGEMV = 0: the next line).
 *   T <= 128: the tensor-core weight stream of qmm.cuh in launches of up to 32 token rows (each
 *     reads the weight once). F8_A8 / F8_A8G first run the prepass below (x to e4m3 bytes and
 *     scales, once per call, not once per weight tile); F8_A8S's prepass only finds each token's
 *     amax (the rounding depends on the row's a, so the kernel rounds x itself).
 *   T > 128 (prefill): F8_A8 with one d a row on cuBLASLt's FP8 GEMM (matmul_f8_lt.cu); else
 *     the weight is dequantized to the activation dtype in row chunks of at most
 *     QF8_CHUNK_BYTES of scratch and multiplied by cuBLAS (GemmEx, f32 accumulation), after the
 *     prepass has written x~ rounded to the activation dtype (W8A8); F8_A8S by runs of rows of one a
 *     (its a plane read once per weight: matmul_f8_lt.cu), x~ rounded by each run's a. An F8_A8S
 *     weight not seen before while a graph records, or of more than 8 runs, keeps the weight stream
 *     in 32-token launches (correct, and reading the weight once per 32 tokens).
 * Limits: the large-T path rounds d * q and x~ to the activation dtype before the GEMM (within
 * the 16-bit rounding of the format's math; the decode path is exact up to f32 summation order).
 * F8_A8S: the 16 rows of a tile share a (qmm.cuh).
 * F8_A8 prefill whose weight has one d a row (per-channel or per-tensor checkpoints, and
 * `--quantization fp8`) first tries cuBLASLt's FP8 GEMM with outer-vector scales
 * (matmul_f8_lt.cu: exact F8_A8 math, no dequantized copy); not taken, the path above.
 */
#include "kernels/ops.cuh"
#include "kernels/qmm.cuh"

#include <type_traits>

/* ---- the activation prepass ----------------------------------------------------------------- */

#define PRE_Q8 0   /* e4m3 bytes [T, nb * 128] (zeros past K) + s [T, nb] */
#define PRE_DEQ 1  /* x~ = s * e4m3(x / s) in TX [T, ldo] */
#define PRE_AMAX 2 /* amax [T] only (F8_A8S) */

/* One block of 8 warps a token row; warp w takes the groups w, w + 8, ..., lane l the elements
 * 4 l .. 4 l + 3 of a group. per_group: F8_A8G's scale per group, else one per token; a8s != 0: F8_A8S's
 * activation scale a of the rows the output is for (a > 0: s = a; a < 0: s = min(amax, -a) / 448). */
template <typename TX, int MODE>
__global__ void __launch_bounds__(256) qf8_prepass_kernel(const TX *x, int64_t ldx, int K, int nb, int per_group, float a8s,
                                                          uint8_t *xq, float *s, float *s1, TX *xd, int64_t ldo,
                                                          float *amax)
{
    __shared__ float red[8];
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const TX *xr = x + (int64_t)t * ldx;
    float tam = 0.f;
    if (!per_group) {
        for (int k = threadIdx.x; k < K; k += 256) tam = fmaxf(tam, fabsf(to_f32(xr[k])));
        tam = warp_max(tam);
        if (lane == 0)
            red[w] = tam;
        __syncthreads();
        tam = red[0];
#pragma unroll
        for (int i = 1; i < 8; i++) tam = fmaxf(tam, red[i]);
        if (MODE == PRE_AMAX) {
            if (threadIdx.x == 0)
                amax[t] = tam;
            return;
        }
        if (s1 && threadIdx.x == 0) /* the token's one scale (matmul_f8_lt.cu's outer vector) */
            s1[t] = __fdiv_rn(tam, 448.0f);
    }
    for (int g = w; g < nb; g += 8) {
        const int k0 = g * 128 + lane * 4;
        float v[4], am = 0.f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            v[e] = k0 + e < K ? to_f32(xr[k0 + e]) : 0.f;
            am = fmaxf(am, fabsf(v[e]));
        }
        am = per_group ? warp_max(am) : tam;
        const float sc = a8s > 0.f ? a8s : __fdiv_rn(a8s < 0.f ? fminf(am, -a8s) : am, 448.0f);
        uint8_t qb[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            qb[e] = sc > 0.f ? (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(v[e], sc), __NV_SATFINITE, __NV_E4M3) : 0;
        if (MODE == PRE_Q8) {
            *(uint32_t *)(xq + (int64_t)t * nb * 128 + k0) =
                (uint32_t)qb[0] | ((uint32_t)qb[1] << 8) | ((uint32_t)qb[2] << 16) | ((uint32_t)qb[3] << 24);
            if (lane == 0)
                s[(int64_t)t * nb + g] = sc;
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (k0 + e < K) {
                    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)qb[e], __NV_E4M3);
                    xd[(int64_t)t * ldo + k0 + e] = from_f32<TX>(sc * __half2float(__half(h)));
                }
        }
    }
}

template <typename TX>
static cudaError_t qf8_prepass(const cuda_ctx *c, int mode, lg_tensor x, int nb, int per_group, uint8_t *xq, float *s,
                               float *s1, void *xd, int64_t ldo, float *amax, float a8s = 0.f)
{
    const dim3 grid((unsigned)x.rows), block(256);
    const TX *xp = (const TX *)x.data;
    const int K = (int)x.cols;
    if (mode == PRE_Q8)
        return cu_launch(c, qf8_prepass_kernel<TX, PRE_Q8>, grid, block, 0, xp, (int64_t)x.stride, K, nb, per_group, a8s,
                         xq, s, s1, (TX *)xd, ldo, amax);
    if (mode == PRE_DEQ)
        return cu_launch(c, qf8_prepass_kernel<TX, PRE_DEQ>, grid, block, 0, xp, (int64_t)x.stride, K, nb, per_group,
                         a8s, xq, s, s1, (TX *)xd, ldo, amax);
    return cu_launch(c, qf8_prepass_kernel<TX, PRE_AMAX>, grid, block, 0, xp, (int64_t)x.stride, K, nb, 0, 0.f,
                     xq, s, s1, (TX *)xd, ldo, amax);
}

/* ---- the weight stream (T <= 128) ------------------------------------------------------------ */

template <int XM, typename TX>
static cudaError_t qf8_stream(const cuda_ctx *c, lg_dtype yt, const qmm_args &a)
{
    typedef typename std::conditional<XM == QMM_X_RAW, TX, __half>::type TM;
    if (yt == LG_F32)
        return qmm_launch<QMM_F8, TM, XM, TX, float>(c, a);
    return qmm_launch<QMM_F8, TM, XM, TX, TX>(c, a);
}

int cu_matmul_f8(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    if (cu_matmul_qcheck(c, y, x, W, bias) != 0)
        return -1;
    const int T = (int)x.rows, N = (int)W.rows, K = (int)W.cols;
    if (T == 0)
        return 0;
    const lg_qplanes p = lg_qplanes_of(W);
    const int nb = (int)p.nb;
    const bool a8 = lg_qtype_is_w8a8(W.q), a8s = W.q == LG_QF8_A8S, a8g = W.q == LG_QF8_A8G;
    const bool f16 = x.dtype == LG_F16;
    const size_t xs = 2; /* bytes of an activation */

    qmm_args a = {};
    a.q = p.q, a.d = p.d, a.a = p.a, a.q_row = p.q_row, a.nb = nb;
    a.bias = bias.data, a.bdt = bias.dtype, a.N = N, a.K = K;
    a.x_vec = x.stride % 8 == 0 && cu_aligned16(x.data);
    cudaError_t e = cudaSuccess;

    /* F8_A8 with one d a row, from LG_QMM_LT_MIN_T rows (default: prefill, T > 128): the FP8 tensor cores
     * (matmul_f8_lt.cu) on the prepass's e4m3 rows; not taken, the weight stream or the dequantizing path */
    if (W.q == LG_QF8_A8 && T >= (c->tune->qmm_lt_min_t > 0 ? c->tune->qmm_lt_min_t : QMM_STREAM_MAX_T + 1)) {
        const size_t qb = ((size_t)T * (size_t)nb * 128 + 255) & ~(size_t)255;
        const size_t sb = ((size_t)T * (size_t)nb * 4 + 255) & ~(size_t)255, s1b = ((size_t)T * 4 + 255) & ~(size_t)255;
        char *ws = (char *)cu_workspace(c, qb + sb + s1b + (size_t)N * 4 + 512);
        if (!ws)
            return CU_FAIL(c, "matmul (F8_A8): no workspace for %d activation rows", T);
        float *s = (float *)(ws + qb), *s1 = (float *)(ws + qb + sb);
        e = f16 ? qf8_prepass<__half>(c, PRE_Q8, x, nb, 0, (uint8_t *)ws, s, s1, NULL, 0, NULL)
                : qf8_prepass<__nv_bfloat16>(c, PRE_Q8, x, nb, 0, (uint8_t *)ws, s, s1, NULL, 0, NULL);
        if (e != cudaSuccess)
            return CU_FAIL(c, "matmul (F8_A8): prepass launch failed: %s", cudaGetErrorString(e));
        const int rc = cu_qf8_lt_try(c, y, W, (const uint8_t *)ws, s1, T, bias, accumulate, ws + qb + sb + s1b);
        if (rc <= 0)
            return rc;
    }
    /* F8_A8S prefill: by runs of rows of one a (known once the a plane was read: matmul_f8_lt.cu), each run's
     * x~ rounded by its a, then the dequantizing path over its rows; else the weight stream below */
    int run_r0[8];
    float run_a[8];
    const int n_runs = a8s && T > QMM_STREAM_MAX_T ? cu_qf8_a8s_runs(c, W, run_r0, run_a, 8) : 0;
    if (n_runs < 0)
        return -1;

    if (T <= QMM_STREAM_MAX_T || (a8s && n_runs == 0)) {
        /* prepass scratch: F8_A8 / F8_A8G e4m3 rows + scales; F8_A8S amax */
        uint8_t *xq = NULL;
        float *s = NULL;
        if (a8) {
            const size_t qb = a8s ? 0 : (size_t)T * (size_t)nb * 128, sb = (size_t)T * (size_t)(a8s ? 1 : nb) * 4;
            char *ws = (char *)cu_workspace(c, qb + sb + 256);
            if (!ws)
                return CU_FAIL(c, "matmul (%s): no workspace for %d activation rows", lg_qtype_get(W.q).name, T);
            xq = (uint8_t *)ws;
            s = (float *)(ws + ((qb + 255) & ~(size_t)255));
            e = f16 ? qf8_prepass<__half>(c, a8s ? PRE_AMAX : PRE_Q8, x, nb, a8g, xq, s, NULL, NULL, 0, s)
                    : qf8_prepass<__nv_bfloat16>(c, a8s ? PRE_AMAX : PRE_Q8, x, nb, a8g, xq, s, NULL, NULL, 0, s);
            if (e != cudaSuccess)
                return CU_FAIL(c, "matmul (%s): prepass launch failed: %s", lg_qtype_get(W.q).name,
                               cudaGetErrorString(e));
        }
        for (int t0 = 0; t0 < T; t0 += QMM_MAX_T) {
            const int tn = T - t0 < QMM_MAX_T ? T - t0 : QMM_MAX_T;
            a.T = tn;
            a.accumulate = accumulate;
            a.y = (char *)y.data + (size_t)t0 * (size_t)y.stride * lg_dtype_size(y.dtype);
            a.ldy = y.stride;
            if (a8 && !a8s) {
                a.x = xq + (size_t)t0 * (size_t)nb * 128;
                a.s = s + (size_t)t0 * (size_t)nb;
                a.ldx = (int64_t)nb * 128;
            } else {
                a.x = (const char *)x.data + (size_t)t0 * (size_t)x.stride * xs;
                a.ldx = x.stride;
                a.s = a8s ? s + t0 : NULL;
            }
            const int xm = !a8 ? QMM_X_RAW : a8s ? QMM_X_A8S : QMM_X_Q8;
            if (T <= QGEMV_MAX_T) { /* the CUDA-core GEMV (qgemv.cu) unless LG_QGEMV = 0 */
                const int rc = cu_qgemv_try(c, QMM_F8, xm, x.dtype, y.dtype, &a);
                if (rc <= 0)
                    return rc;
            }
            if (f16)
                e = xm == QMM_X_RAW ? qf8_stream<QMM_X_RAW, __half>(c, y.dtype, a)
                    : xm == QMM_X_Q8 ? qf8_stream<QMM_X_Q8, __half>(c, y.dtype, a)
                                     : qf8_stream<QMM_X_A8S, __half>(c, y.dtype, a);
            else
                e = xm == QMM_X_RAW ? qf8_stream<QMM_X_RAW, __nv_bfloat16>(c, y.dtype, a)
                    : xm == QMM_X_Q8 ? qf8_stream<QMM_X_Q8, __nv_bfloat16>(c, y.dtype, a)
                                     : qf8_stream<QMM_X_A8S, __nv_bfloat16>(c, y.dtype, a);
            if (e != cudaSuccess)
                return CU_FAIL(c, "matmul (%s): launch (N=%d T=%d K=%d) failed: %s", lg_qtype_get(W.q).name, N, tn, K,
                               cudaGetErrorString(e));
        }
        return 0;
    }

    /* prefill: x~ (W8A8) to scratch, W dequantized chunk by chunk, cuBLAS */
    const int64_t ldo = ((int64_t)K + 7) & ~(int64_t)7;
    const size_t xbytes = a8 ? ((size_t)T * (size_t)ldo * xs + 255) & ~(size_t)255 : 0;
    int64_t chunk = (int64_t)(QMM_CHUNK_BYTES / ((size_t)ldo * xs)) & ~(int64_t)63;
    if (chunk < 64)
        chunk = 64;
    if (chunk > N)
        chunk = N;
    char *ws = (char *)cu_workspace(c, xbytes + (size_t)chunk * (size_t)ldo * xs);
    if (!ws)
        return CU_FAIL(c, "matmul (%s): no workspace for the prefill path (T=%d K=%d)", lg_qtype_get(W.q).name, T, K);
    lg_tensor xg = x;
    const int runs = a8s ? n_runs : 1;
    for (int i = 0; i < runs; i++) {
        const int r_begin = a8s ? run_r0[i] : 0, r_end = a8s && i + 1 < runs ? run_r0[i + 1] : N;
        if (a8) { /* x~ for these rows (F8_A8S: by the run's a) */
            const float ra = a8s ? run_a[i] : 0.f;
            e = f16 ? qf8_prepass<__half>(c, PRE_DEQ, x, nb, a8g, NULL, NULL, NULL, ws, ldo, NULL, ra)
                    : qf8_prepass<__nv_bfloat16>(c, PRE_DEQ, x, nb, a8g, NULL, NULL, NULL, ws, ldo, NULL, ra);
            if (e != cudaSuccess)
                return CU_FAIL(c, "matmul (%s): prepass launch failed: %s", lg_qtype_get(W.q).name,
                               cudaGetErrorString(e));
            xg = lg_tensor_2d(ws, x.dtype, T, K);
            xg.stride = ldo;
        }
        if (qmm_prefill(c, y, xg, W, p, bias, accumulate, ws + xbytes, chunk, ldo, r_begin, r_end) != 0)
            return -1;
    }
    return 0;
}
