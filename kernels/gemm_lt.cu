/*
 * gemm_lt.cu — the matmul of gemm.cu on cuBLASLt with the algorithm timed
 * per shape (opt-in, LG_BLASLT=1), for 5..LT_MAX_T token rows:
 *   y[T, N] (+)= x[T, K] @ W[N, K]^T        (same layout mapping as gemm.cu)
 *
 * Why: inside a decode step cuBLAS's default choice leaves SMs idle on the
 * skinny shapes (ncu, docs/benchmarks.md issue 10: qkv 96 tiles, o 128 on
 * 132 SMs; 2.1-2.7 TB/s against 2.93 TB/s of copy bandwidth).
 *
 * The first call of a shape (T, N, K, the three dtypes, the strides,
 * accumulate) asks cuBLASLt's heuristic for up to LT_CAND algorithms and
 * times each on a private stream (LT_REPS launches after a warm-up, into a
 * private y and workspace, so the compute stream's buffers are untouched
 * and the timing works while the compute stream is being captured into a
 * graph: relaxed capture mode). The heuristic's first choice is kept
 * unless another is at least LT_MARGIN faster. The choice is cached for the
 * backend's life, so every later call of the shape, eager or replayed,
 * computes the same way. The bias, when any, is added by gemm.cu after.
 * Returns 0 done, -1 error, 1 not taken (switched off, T outside 5..LT_MAX_T,
 * no algorithm, cache full): gemm.cu then calls cublasGemmEx.
 * Status: written after the last GPU call of issue 10's session; compiled,
 * NOT yet run on a GPU (no figure, no test result). Its op tests run with
 * LG_BLASLT=1 test_cuda_ops; LG_BLASLT=1 bench_kernels adds its column;
 * OLD=LG_BLASLT=1 OLD_LABEL=blaslt bash tests/gpu/run_device.sh bench puts
 * the engine workloads next to it.
 */
#include "kernels/ops.cuh"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define LT_MAX_T 128
#define LT_CAND 16
#define LT_REPS 8
#define LT_MARGIN 0.97f
#define LT_CACHE 256
#define LT_WS_BYTES ((size_t)32 << 20)

typedef struct lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, cl;
} lt_descs;

typedef struct lt_entry {
    int T, N, K, ydt, xdt, acc;
    int64_t ldx, ldw, ldy;
    int ok; /* 1: algo valid (and d made); 0: no algorithm (take cublasGemmEx) */
    cublasLtMatmulAlgo_t algo;
    lt_descs d;
    size_t ws;
} lt_entry;

struct cu_lt {
    cublasLtHandle_t h;
    cudaStream_t tune;
    void *ws_tune, *y_tune;
    size_t y_tune_size;
    lt_entry e[LT_CACHE];
    int n;
};

static int g_lt = -1;
extern "C" void lg_cuda_blaslt(int on) { g_lt = on < 0 ? -1 : on ? 1 : 0; } /* -1: LG_BLASLT again */

static void lt_descs_free(lt_descs *d);

void cu_lt_free(cuda_ctx *c)
{
    cu_lt *l = c->lt;
    if (!l)
        return;
    if (l->tune)
        cudaStreamSynchronize(l->tune), cudaStreamDestroy(l->tune);
    for (int i = 0; i < l->n; i++)
        if (l->e[i].ok)
            lt_descs_free(&l->e[i].d);
    cudaFree(l->ws_tune);
    cudaFree(l->y_tune);
    if (l->h)
        cublasLtDestroy(l->h);
    free(l);
    c->lt = NULL;
}

static cudaDataType_t lt_type(lg_dtype t) { return t == LG_F32 ? CUDA_R_32F : t == LG_F16 ? CUDA_R_16F : CUDA_R_16BF; }

static void lt_descs_free(lt_descs *d)
{
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->cl) cublasLtMatrixLayoutDestroy(d->cl);
}

static bool lt_descs_make(lt_descs *d, const lt_entry *k)
{
    memset(d, 0, sizeof *d);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    bool ok = cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ==
                  CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&d->a, lt_type((lg_dtype)k->xdt), k->K, k->N, k->ldw) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&d->b, lt_type((lg_dtype)k->xdt), k->K, k->T, k->ldx) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatrixLayoutCreate(&d->cl, lt_type((lg_dtype)k->ydt), k->N, k->T, k->ldy) == CUBLAS_STATUS_SUCCESS;
    if (!ok)
        lt_descs_free(d);
    return ok;
}

/* Picks the algorithm of shape k (see the header); fills k->ok, k->algo, k->ws. */
static int lt_tune(cuda_ctx *c, cu_lt *l, lt_entry *k, const void *x, const void *W)
{
    k->ok = 0;
    lt_descs d;
    if (!lt_descs_make(&d, k))
        return 0;
    cublasLtMatmulPreference_t pref = NULL;
    size_t wsb = LT_WS_BYTES < c->blas_ws_size ? LT_WS_BYTES : c->blas_ws_size;
    cublasLtMatmulHeuristicResult_t res[LT_CAND];
    int n = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(l->h, d.op, d.a, d.b, d.cl, d.cl, pref, LT_CAND, res, &n) !=
            CUBLAS_STATUS_SUCCESS)
        n = 0;
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    const size_t ybytes = (size_t)k->ldy * (k->T - 1) * lg_dtype_size((lg_dtype)k->ydt) +
                          (size_t)k->N * lg_dtype_size((lg_dtype)k->ydt);
    if (n > 0 && ybytes > l->y_tune_size) {
        cudaFree(l->y_tune);
        l->y_tune = NULL;
        l->y_tune_size = 0;
        if (cudaMalloc(&l->y_tune, ybytes) != cudaSuccess) {
            cudaGetLastError();
            n = 0;
        } else {
            l->y_tune_size = ybytes;
        }
    }
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (n > 0 && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)) {
        cudaGetLastError();
        n = 0;
    }
    const float alpha = 1.0f, beta = k->acc ? 1.0f : 0.0f;
    float best = 0.0f, first = 0.0f;
    int bi = -1;
    for (int i = 0; i < n; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > wsb)
            continue;
        bool ok = true;
        for (int r = 0; r < 2 && ok; r++) /* warm-up */
            ok = cublasLtMatmul(l->h, d.op, &alpha, W, d.a, x, d.b, &beta, l->y_tune, d.cl, l->y_tune, d.cl,
                                &res[i].algo, l->ws_tune, wsb, l->tune) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e0, l->tune) == cudaSuccess;
        for (int r = 0; r < LT_REPS && ok; r++)
            ok = cublasLtMatmul(l->h, d.op, &alpha, W, d.a, x, d.b, &beta, l->y_tune, d.cl, l->y_tune, d.cl,
                                &res[i].algo, l->ws_tune, wsb, l->tune) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e1, l->tune) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
        float ms = 0.0f;
        if (!ok || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (bi < 0) /* the heuristic's first workable choice */
            first = ms, best = ms, bi = i;
        else if (ms < best && ms < first * LT_MARGIN)
            best = ms, bi = i;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (bi >= 0) {
        k->ok = 1;
        k->algo = res[bi].algo;
        k->ws = res[bi].workspaceSize;
        k->d = d; /* kept for every later call of the shape */
    } else {
        lt_descs_free(&d);
    }
    return 0;
}

int cu_lt_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    if (g_lt < 0) {
        const char *e = getenv("LG_BLASLT");
        g_lt = e && *e == '1';
    }
    const int T = (int)x.rows;
    if (!g_lt || T < 5 || T > LT_MAX_T)
        return 1;
    cu_lt *l = c->lt;
    if (!l) {
        l = (cu_lt *)calloc(1, sizeof *l);
        if (!l)
            return 1;
        c->lt = l;
        if (cublasLtCreate(&l->h) != CUBLAS_STATUS_SUCCESS ||
            cudaStreamCreateWithFlags(&l->tune, cudaStreamNonBlocking) != cudaSuccess ||
            cudaMalloc(&l->ws_tune, LT_WS_BYTES) != cudaSuccess) {
            cudaGetLastError();
            cu_lt_free(c);
            g_lt = 0;
            return 1;
        }
    }
    lt_entry key;
    memset(&key, 0, sizeof key);
    key.T = T, key.N = (int)W.rows, key.K = (int)x.cols;
    key.ydt = y.dtype, key.xdt = x.dtype, key.acc = accumulate ? 1 : 0;
    key.ldx = x.stride, key.ldw = W.stride, key.ldy = y.stride;
    lt_entry *k = NULL;
    for (int i = 0; i < l->n && !k; i++) {
        lt_entry *e = &l->e[i];
        if (e->T == key.T && e->N == key.N && e->K == key.K && e->ydt == key.ydt && e->xdt == key.xdt &&
            e->acc == key.acc && e->ldx == key.ldx && e->ldw == key.ldw && e->ldy == key.ldy)
            k = e;
    }
    if (!k) {
        if (l->n == LT_CACHE)
            return 1; /* a shape never seen before: cuBLAS's default, as every call of it will be */
        k = &l->e[l->n++];
        *k = key;
        lt_tune(c, l, k, x.data, W.data);
    }
    if (!k->ok)
        return 1;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const lt_descs *d = &k->d;
    cublasStatus_t st = cublasLtMatmul(l->h, d->op, &alpha, W.data, d->a, x.data, d->b, &beta, y.data, d->cl, y.data,
                                       d->cl, &k->algo, c->blas_ws, c->blas_ws_size, c->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return CU_FAIL(c, "matmul: cublasLtMatmul(N=%d T=%d K=%d) failed: status %d", key.N, T, key.K, (int)st);
    return 0;
}
