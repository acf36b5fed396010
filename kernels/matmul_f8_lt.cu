/*
 * matmul_f8_lt.cu — F8_A8's prefill on the FP8 tensor cores through cuBLASLt, where the weight's
 * scale is one per row (d[n, g] the same for every group g: per-channel or per-tensor FP8
 * checkpoints, and `--quantization fp8`):
 *
 *   y[t, n] (+)= s[t] * d[n] * sum_k xq[t, k] * q[n, k]    (+ bias: qmm_prefill.cu's bias kernel after)
 *
 * which is F8_A8's math with f32 accumulation: xq, s from matmul_f8.cu's prepass (e4m3 bytes
 * [T, nb * 128], zeros past K; s = amax / 448 per token), q the weight's q plane read as the plain
 * [N, nb * 128] e4m3 matrix it is (zeros past K). cuBLASLt's "TN" FP8 GEMM (A = the weight,
 * transposed; B = the activations) with outer-vector scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
 * the (i, j) product times A's i-th and B's j-th scale) for d and s, D in y's dtype (C = D = y, beta
 * 1 for accumulate).
 *
 * Whether d is one per row is a property of the weight's data: checked once per weight (by its
 * address) on the device, the answer downloaded (a sync: prefill only; while a graph records, a
 * weight not yet checked takes the other path) and kept in a table of QF8_LT_CACHE weights,
 * forgotten on every dealloc. The same table holds F8_A8S weights' runs of rows of one activation
 * scale (cu_qf8_a8s_runs, for matmul_f8.cu's prefill). When cuBLASLt offers no algorithm for the
 * call (this GPU or library has no outer-vector FP8 kernels), the path is switched off for the
 * backend's life (said once on stderr) and the caller takes the dequantizing path (qmm_prefill.cu).
 * Limits: y's row stride a multiple of 8 and y 16-byte aligned (else the dequantizing path).
 */
#include "kernels/ops.cuh"
#include "kernels/qmm.cuh"

#include <cublasLt.h>
#include <stdio.h>

#define QF8_LT_CACHE 1024
#define QF8_RUNS 8 /* F8_A8S: runs of one a a weight, at most (fused q, k, v: 3) */

struct qf8_lt {
    cublasLtHandle_t lt;
    int off; /* 1: no algorithm once: never again */
    int n, n_runs;
    struct {
        const void *w;
        int64_t rows, cols;
        int rowconst;
    } seen[QF8_LT_CACHE];
    struct { /* F8_A8S weights: their runs of one a (n = 0: more than QF8_RUNS) */
        const void *w;
        int64_t rows, cols;
        int n, r0[QF8_RUNS];
        float a[QF8_RUNS];
    } runs[QF8_LT_CACHE];
};

void cu_qf8_forget(cuda_ctx *c)
{
    qf8_lt *s = (qf8_lt *)c->qf8;
    if (s)
        s->n = s->n_runs = 0;
}

static qf8_lt *qf8_state(cuda_ctx *c)
{
    qf8_lt *s = (qf8_lt *)c->qf8;
    if (!s) {
        s = (qf8_lt *)calloc(1, sizeof *s);
        if (!s)
            return NULL;
        c->qf8 = s;
        if (cublasLtCreate(&s->lt) != CUBLAS_STATUS_SUCCESS) {
            s->lt = NULL;
            s->off = 1;
        }
    }
    return s;
}

int cu_qf8_a8s_runs(cuda_ctx *c, lg_tensor W, int *r0, float *a, int max)
{
    qf8_lt *s = qf8_state(c);
    if (!s || W.q != LG_QF8_A8S)
        return 0;
    int i = 0;
    for (; i < s->n_runs; i++)
        if (s->runs[i].w == W.data && s->runs[i].rows == W.rows && s->runs[i].cols == W.cols)
            break;
    if (i == s->n_runs) {
        if (c->capturing || s->n_runs == QF8_LT_CACHE)
            return 0;
        /* the a plane's first column, downloaded once (a sync: prefill, eager) */
        const lg_qplanes p = lg_qplanes_of(W);
        float *h = (float *)malloc((size_t)W.rows * 4);
        if (!h)
            return 0;
        CU_TRY(c, cudaMemcpy2DAsync(h, 4, p.a, (size_t)p.nb * 4, 4, (size_t)W.rows, cudaMemcpyDeviceToHost, c->stream));
        CU_TRY(c, cudaStreamSynchronize(c->stream));
        int n = 0;
        for (int64_t r = 0; r < W.rows && n <= QF8_RUNS; r++)
            if (r == 0 || h[r] != h[r - 1]) {
                if (n < QF8_RUNS)
                    s->runs[i].r0[n] = (int)r, s->runs[i].a[n] = h[r];
                n++;
            }
        free(h);
        s->runs[i].w = W.data, s->runs[i].rows = W.rows, s->runs[i].cols = W.cols;
        s->runs[i].n = n <= QF8_RUNS ? n : 0;
        s->n_runs++;
    }
    const int n = s->runs[i].n;
    if (n == 0 || n > max)
        return 0;
    for (int k = 0; k < n; k++) r0[k] = s->runs[i].r0[k], a[k] = s->runs[i].a[k];
    return n;
}

void cu_qf8_lt_free(cuda_ctx *c)
{
    qf8_lt *s = (qf8_lt *)c->qf8;
    if (!s)
        return;
    if (s->lt)
        cublasLtDestroy(s->lt);
    free(s);
    c->qf8 = NULL;
}

/* flag stays 0 when every row's d is its first group's; rows [0, N) */
__global__ void qf8_rowconst_kernel(const float *d, int N, int nb, int *flag)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N)
        return;
    const float d0 = d[(int64_t)r * nb];
    for (int g = 1; g < nb; g++)
        if (d[(int64_t)r * nb + g] != d0) {
            atomicOr(flag, 1);
            return;
        }
}

/* dv[n] = d[n, 0] */
__global__ void qf8_dvec_kernel(const float *d, int N, int nb, float *dv)
{
    pdl_trigger();
    pdl_wait();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < N)
        dv[r] = d[(int64_t)r * nb];
}

/* whether W's d is one per row (cached by address and shape); -1 on error */
static int rowconst(cuda_ctx *c, qf8_lt *s, lg_tensor W, const lg_qplanes &p, int *scratch)
{
    for (int i = 0; i < s->n; i++)
        if (s->seen[i].w == W.data && s->seen[i].rows == W.rows && s->seen[i].cols == W.cols)
            return s->seen[i].rowconst;
    if (c->capturing) /* the check syncs: not while a graph records (not taken, not remembered) */
        return 0;
    CU_TRY(c, cudaMemsetAsync(scratch, 0, sizeof(int), c->stream));
    qf8_rowconst_kernel<<<(unsigned)((W.rows + 255) / 256), 256, 0, c->stream>>>((const float *)p.d, (int)W.rows,
                                                                                   (int)p.nb, scratch);
    CU_LAUNCHED(c);
    int flag = 1;
    CU_TRY(c, cudaMemcpyAsync(&flag, scratch, sizeof flag, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(c, cudaStreamSynchronize(c->stream));
    const int rc = flag == 0;
    if (s->n < QF8_LT_CACHE) {
        s->seen[s->n].w = W.data, s->seen[s->n].rows = W.rows, s->seen[s->n].cols = W.cols;
        s->seen[s->n++].rowconst = rc;
    }
    return rc;
}

int cu_qf8_lt_try(cuda_ctx *c, lg_tensor y, lg_tensor W, const uint8_t *xq, const float *s1, int T, lg_tensor bias,
                  bool accumulate, void *scratch)
{
    if (W.q != LG_QF8_A8 || c->cc_major < 9)
        return 1;
    qf8_lt *s = qf8_state(c);
    if (!s || s->off || y.stride % 8 != 0 || !cu_aligned16(y.data))
        return 1; /* off, or a y that cuBLASLt's FP8 kernels may refuse (not counted against the path) */
    const lg_qplanes p = lg_qplanes_of(W);
    const int N = (int)W.rows, nb = (int)p.nb;
    const int64_t Kp = (int64_t)nb * 128;
    float *dv = (float *)scratch;
    int *flag = (int *)((char *)scratch + (((size_t)N * 4 + 255) & ~(size_t)255));
    const int rc = rowconst(c, s, W, p, flag);
    if (rc <= 0)
        return rc < 0 ? -1 : 1;
    const cudaError_t e = cu_launch(c, qf8_dvec_kernel, dim3((unsigned)((N + 255) / 256)), dim3(256), 0,
                                    (const float *)p.d, N, nb, dv);
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul (F8_A8): launch failed: %s", cudaGetErrorString(e));

    const cudaDataType_t yt = y.dtype == LG_F32 ? CUDA_R_32F : y.dtype == LG_F16 ? CUDA_R_16F : CUDA_R_16BF;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int taken = 0;
    bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    if (ok) {
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        const void *pa = dv, *pb = s1;
        ok = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb) ==
                 CUBLAS_STATUS_SUCCESS;
    }
    /* column-major: A = the q plane as [Kp, N] (ld Kp), B = xq as [Kp, T], C = D = y as [N, T] (ld = y's stride) */
    ok = ok && cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, (uint64_t)Kp, (uint64_t)N, Kp) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, (uint64_t)Kp, (uint64_t)T, Kp) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&lc, yt, (uint64_t)N, (uint64_t)T, y.stride) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t h = {};
    int nres = 0;
    if (ok) {
        const size_t wsz = c->blas_ws_size;
        ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulAlgoGetHeuristic(s->lt, op, la, lb, lc, lc, pref, 1, &h, &nres) == CUBLAS_STATUS_SUCCESS &&
             nres > 0;
    }
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (ok) {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        st = cublasLtMatmul(s->lt, op, &alpha, p.q, la, xq, lb, &beta, y.data, lc, y.data, lc, &h.algo, c->blas_ws,
                            c->blas_ws_size, c->stream);
        taken = st == CUBLAS_STATUS_SUCCESS;
    }
    if (!taken) { /* no outer-vector FP8 GEMM here: the dequantizing path from now on (said once) */
        s->off = 1;
        fprintf(stderr, "cuda backend: F8_A8 prefill: cuBLASLt's FP8 GEMM with outer-vector scales is not available "
                        "(N=%d T=%d K=%lld, status %d); dequantizing to 16 bits instead\n",
                N, T, (long long)Kp, (int)st);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    if (!taken)
        return 1;
    if (bias.data)
        return qmm_bias(c, y, bias, 0, N, T) != 0 ? -1 : 0;
    return 0;
}
