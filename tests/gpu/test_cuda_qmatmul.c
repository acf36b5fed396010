/*
 * test_cuda_qmatmul.c — the CUDA matmul over the planar checkpoint layouts (backend.h: F8, F8_A8,
 * F8_A8S, F8_A8G, I4; kernels/matmul_f8.cu, matmul_i4.cu, qmm_prefill.cu) against a float64
 * reference written here from the layout's definition, and (--bench) its speed next to the
 * 16-bit matmul on the Llama-2-7B shapes.
 *
 * Test: random weights quantized per group of 128 the way checkpoints are (F8: d = amax / 448,
 * q = e4m3(w / d); I4: random q, z in 0..15, d f16), random activations rounded to the backend's
 * dtype; the reference dequantizes the planes (lg_e4m3_to_f32, d * (q - z)) and fake-quantizes
 * the activations exactly as the layout says, in f32 as the comment above lg_qtype defines it
 * (s = amax / 448, e4m3(x / s) by lg_f32_to_e4m3), then sums in float64. T = 1, 7, 32, 33, 300,
 * 2048 over small shapes (cols not a multiple of 128, rows not a multiple of 32) and the 7B
 * shapes; f32 and 16-bit outputs; bias and accumulate; F8_A8S with fused rows of different a
 * (static and dynamic-bounded); T = 1..4 with LG_QGEMV on (qgemv.cu) and off; F8_A8 weights with one d a row (cuBLASLt's FP8 prefill). y's padding columns must be left as they were, every output
 * written (y poisoned with NaN first).
 * Tolerance (relative L2 over y): the weight stream (T <= 128, and F8_A8S at any T) computes the
 * format's math exactly up to f32 summation order, so the error is y's rounding: f32 1e-4
 * (summation order over up to 11,008 terms), f16 1e-3, bf16 8e-3 (2^-11 and 2^-8 relative per
 * element); the prefill path (T > 128) rounds d * q and x~ to the activation dtype before
 * cuBLAS: f16 2e-3, bf16 1.5e-2.
 *
 * Bench (--bench): per decode shape (qkv 12288x4096, o 4096x4096, gate_up 22016x4096, down
 * 4096x11008) and T = 1, 32: us per launch (median of step-graph replays of REPS launches, W
 * rotated over >= 256 MB so L2 holds none), GB/s of the weight's bytes and the ratio to the floor
 * (bytes / the device-to-device copy bandwidth measured in the same run, as bench_kernels.c), for
 * F8_A8, F8, I4 and the f16 weight; the 32-layer sums (a decode step's matmuls); prefill T = 2048
 * TFLOP/s of each.
 * Usage: test_cuda_qmatmul [--bench] [--bf16]. Exit status 0 only if every test passed.
 * Needs a GPU (tests/gpu/run_device.sh test / kernels).
 */
#include "engine/backend/backend.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t lg_cuda_compute_stream(lg_backend *be); /* kernels/lora_shrink.cu */

static lg_backend *G;
#include "tests/gpu/bench_util.h" /* rnd64, CK, CKC, cmp_f */

static int n_fail, n_pass;
static int g_rowconst; /* qw_make: F8* weights with one d a row (per-channel checkpoints; matmul_f8_lt.cu's case) */
static float frand(void) { return (float)((double)(rnd64() >> 40) / (double)(1 << 23) - 1.0); } /* [-1, 1) */

/* ---- host images of the planar layouts ---- */
typedef struct {
    lg_qtype q;
    int N, K;
    size_t bytes;
    unsigned char *img; /* the tensor's planes */
    double *w;          /* [N, K] dequantized */
    float *a_row;       /* F8_A8S: a of each row */
} qw;

/* parts: F8_A8S rows in up to 3 parts of rows each with activation scale a[i] (other layouts ignore them) */
static qw qw_make(lg_qtype q, int N, int K, const int *part_rows, const float *part_a)
{
    qw m = {q, N, K, 0, NULL, NULL, NULL};
    lg_tensor t = lg_tensor_quant(NULL, q, N, K);
    m.bytes = lg_tensor_bytes(t, K) * (size_t)N;
    m.img = calloc(m.bytes, 1);
    m.w = calloc((size_t)N * K, sizeof(double));
    m.a_row = calloc((size_t)N, sizeof(float));
    CK(m.img && m.w && m.a_row);
    t.data = m.img;
    const lg_qplanes p = lg_qplanes_of(t);
    const int nb = (int)p.nb;
    for (int n = 0, part = 0, left = part_rows ? part_rows[0] : N; n < N; n++, left--) {
        if (left == 0)
            left = part_rows[++part];
        m.a_row[n] = part_a ? part_a[part] : 0.f;
        for (int g = 0; g < nb; g++) {
            const int k0 = g * 128, k1 = k0 + 128 < K ? k0 + 128 : K;
            if (q == LG_QI4) {
                const int z = (int)(rnd64() % 16);
                const uint16_t dh = lg_f32_to_f16(0.01f + 0.01f * (frand() + 1.0f) / 2);
                const double d = lg_f16_to_f32(dh);
                ((uint16_t *)p.d)[(size_t)n * nb + g] = dh;
                p.z[(size_t)n * nb + g] = (uint8_t)z;
                for (int k = k0; k < k0 + 128; k++) {
                    const int v = k < K ? (int)(rnd64() % 16) : z;
                    uint8_t *b = p.q + (size_t)n * p.q_row + k / 2;
                    *b |= (uint8_t)(v << (4 * (k & 1)));
                    if (k < K)
                        m.w[(size_t)n * K + k] = d * (v - z);
                }
            } else {
                float wv[128], am = 0.f;
                for (int k = k0; k < k1; k++) {
                    wv[k - k0] = frand() * (0.5f + (float)(g % 3));
                    am = fmaxf(am, fabsf(wv[k - k0]));
                }
                float d = am > 0.f ? am / 448.0f : 1.0f;
                if (g_rowconst) /* |w| < 2.5 everywhere: one d for the row */
                    d = 2.5f / 448.0f;
                ((float *)p.d)[(size_t)n * nb + g] = d;
                if (p.a)
                    p.a[(size_t)n * nb + g] = m.a_row[n];
                for (int k = k0; k < k1; k++) {
                    const uint8_t b = lg_f32_to_e4m3(wv[k - k0] / d);
                    p.q[(size_t)n * p.q_row + k] = b;
                    m.w[(size_t)n * K + k] = (double)d * lg_e4m3_to_f32(b);
                }
            }
        }
    }
    return m;
}
static void qw_free(qw *m) { free(m->img), free(m->w), free(m->a_row); }

/* x~ of token row x (K floats) for a row of activation scale a (F8_A8S), as the layout says */
static void fake_quant(lg_qtype q, const float *x, int K, float a, double *out)
{
    if (!lg_qtype_is_w8a8(q)) {
        for (int k = 0; k < K; k++) out[k] = x[k];
        return;
    }
    float tam = 0.f;
    for (int k = 0; k < K; k++) tam = fmaxf(tam, fabsf(x[k]));
    for (int k0 = 0; k0 < K; k0 += 128) {
        const int k1 = k0 + 128 < K ? k0 + 128 : K;
        float s;
        if (q == LG_QF8_A8G) {
            float am = 0.f;
            for (int k = k0; k < k1; k++) am = fmaxf(am, fabsf(x[k]));
            s = am / 448.0f;
        } else if (q == LG_QF8_A8S) {
            s = a > 0.f ? a : fminf(tam, -a) / 448.0f;
        } else {
            s = tam / 448.0f;
        }
        for (int k = k0; k < k1; k++) out[k] = s > 0.f ? (double)s * lg_e4m3_to_f32(lg_f32_to_e4m3(x[k] / s)) : 0.0;
    }
}

static const char *qname(lg_qtype q, const float *part_a)
{
    if (g_rowconst)
        return q == LG_QF8_A8 ? "F8_A8 rowconst" : "F8 rowconst";
    if (q == LG_QF8_A8S)
        return part_a && part_a[0] < 0 ? "F8_A8S dyn" : "F8_A8S static";
    return lg_qtype_get(q).name;
}

/* One case: y[T, N] (+)= x~ W^T (+ bias) on the GPU against float64. */
static void test_case(lg_dtype dt, lg_qtype q, int T, int N, int K, lg_dtype ydt, int bias, int accumulate,
                      const int *part_rows, const float *part_a)
{
    qw m = qw_make(q, N, K, part_rows, part_a);
    const int ypad = 8, ld = N + ypad;
    float *x = malloc((size_t)T * K * 4), *b = malloc((size_t)N * 4), *y0 = malloc((size_t)T * ld * 4);
    double *xt = malloc((size_t)K * 8), *ref = malloc((size_t)T * N * 8);
    const size_t xb = (size_t)T * K * 2, yb = (size_t)T * ld * lg_dtype_size(ydt);
    void *hx = malloc(xb), *hy = malloc(yb), *hy2 = malloc(yb);
    CK(x && b && y0 && xt && ref && hx && hy && hy2);
    for (size_t i = 0; i < (size_t)T * K; i++) x[i] = frand() * ((i / K) % 5 == 3 ? 4.0f : 1.0f);
    lg_from_f32(hx, dt, x, (size_t)T * K);
    lg_to_f32(x, hx, dt, (size_t)T * K); /* the values the GPU sees */
    for (int n = 0; n < N; n++) b[n] = frand() * 0.1f;
    for (size_t i = 0; i < (size_t)T * ld; i++) y0[i] = frand();
    if (accumulate) {
        lg_from_f32(hy, ydt, y0, (size_t)T * ld);
        lg_to_f32(y0, hy, ydt, (size_t)T * ld);
    } else {
        memset(hy, 0xFF, yb); /* NaN: an unwritten output shows */
        for (int t = 0; t < T; t++) lg_from_f32((char *)hy + ((size_t)t * ld + N) * lg_dtype_size(ydt), ydt,
                                                y0 + (size_t)t * ld + N, ypad);
    }
    /* reference: per distinct a, x~ of the token (F8_A8S rounds by the row's a) */
    for (int t = 0; t < T; t++) {
        float cur_a = NAN;
        for (int n = 0; n < N; n++) {
            if (n == 0 || m.a_row[n] != cur_a) {
                cur_a = m.a_row[n];
                fake_quant(q, x + (size_t)t * K, K, cur_a, xt);
            }
            const double *w = m.w + (size_t)n * K;
            double s = 0;
            for (int k = 0; k < K; k++) s += xt[k] * w[k];
            if (accumulate)
                s += y0[(size_t)t * ld + n];
            if (bias)
                s += b[n];
            ref[(size_t)t * N + n] = s;
        }
    }
    void *dW = G->i.alloc(G, m.bytes), *dx = G->i.alloc(G, xb), *dy = G->i.alloc(G, yb), *db = G->i.alloc(G, (size_t)N * 4);
    CK(dW && dx && dy && db);
    CK(G->i.upload(G, dW, m.img, m.bytes) == 0 && G->i.upload(G, dx, hx, xb) == 0 && G->i.upload(G, dy, hy, yb) == 0 &&
       G->i.upload(G, db, b, (size_t)N * 4) == 0);
    lg_tensor yv = lg_tensor_2d(dy, ydt, T, N), bt = {0};
    yv.stride = ld;
    if (bias)
        bt = lg_tensor_2d(db, LG_F32, 1, N);
    const int rc = G->i.matmul(G, yv, lg_tensor_2d(dx, dt, T, K), lg_tensor_quant(dW, q, N, K), bt, accumulate != 0);
    const int sc = G->i.sync(G);
    CK(G->i.download(G, hy2, dy, yb) == 0);
    float *yg = malloc((size_t)T * ld * 4);
    CK(yg);
    lg_to_f32(yg, hy2, ydt, (size_t)T * ld);
    double num = 0, den = 0;
    int pad_ok = 1;
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < N; n++) {
            const double e = yg[(size_t)t * ld + n] - ref[(size_t)t * N + n];
            num += e * e;
            den += ref[(size_t)t * N + n] * ref[(size_t)t * N + n];
        }
        if (memcmp((char *)hy2 + ((size_t)t * ld + N) * lg_dtype_size(ydt),
                   (char *)hy + ((size_t)t * ld + N) * lg_dtype_size(ydt), ypad * lg_dtype_size(ydt)) != 0)
            pad_ok = 0;
    }
    const double err = den > 0 ? sqrt(num / den) : sqrt(num);
    const int prefill = T > 128 && q != LG_QF8_A8S;
    double lim = ydt == LG_F32 ? 1e-4 : ydt == LG_F16 ? 1e-3 : 8e-3;
    if (prefill)
        lim = fmax(lim, dt == LG_F16 ? 2e-3 : 1.5e-2);
    const int ok = rc == 0 && sc == 0 && pad_ok && !isnan(err) && err <= lim;
    printf("%-4s %-14s T=%-5d N=%-5d K=%-5d y %-4s%s%s  err %.3g (limit %.3g)%s %s\n", lg_dtype_name(dt), qname(q, part_a),
           T, N, K, lg_dtype_name(ydt), bias ? " +bias" : "", accumulate ? " +acc" : "", err, lim,
           pad_ok ? "" : " PADDING CHANGED", ok ? "ok" : "FAIL");
    fflush(stdout);
    if (ok)
        n_pass++;
    else
        n_fail++;
    G->i.dealloc(G, dW), G->i.dealloc(G, dx), G->i.dealloc(G, dy), G->i.dealloc(G, db);
    free(x), free(b), free(y0), free(xt), free(ref), free(hx), free(hy), free(hy2), free(yg);
    qw_free(&m);
}

static void run_tests(lg_dtype dt)
{
    const lg_qtype qs[] = {LG_QF8, LG_QF8_A8, LG_QF8_A8G, LG_QI4};
    const int rows3[3] = {48, 16, 16};          /* F8_A8S: three fused sources, multiples of 16 rows */
    const float a_static[3] = {0.0018f, 0.0025f, 0.004f}; /* x / a saturates at 448 for |x| > ~0.8 in the first */
    const float a_dyn[3] = {-0.8f, -2.0f, -8.0f};          /* amax bounded by 0.8 .. 8 */
    const int rows3b[3] = {256, 32, 32};
    const int rows3odd[3] = {37, 27, 16};                 /* parts that split a GEMV warp's row pair */
    /* small shapes: cols not a multiple of 128 (nor of 8 for one), rows not a multiple of 32 */
    const int smallT[] = {1, 7, 32, 33, 300};
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
        for (size_t j = 0; j < sizeof smallT / sizeof *smallT; j++) {
            test_case(dt, qs[i], smallT[j], 72, 200, dt, 0, 0, NULL, NULL);
            test_case(dt, qs[i], smallT[j], 40, 131, LG_F32, 1, 1, NULL, NULL);
        }
        test_case(dt, qs[i], 7, 320, 1152, dt, 1, 0, NULL, NULL);
        test_case(dt, qs[i], 2048, 320, 1152, dt, 1, 1, NULL, NULL); /* prefill path, bias + accumulate */
        /* the 7B shapes */
        test_case(dt, qs[i], 1, 4096, 4096, dt, 0, 0, NULL, NULL);
        test_case(dt, qs[i], 32, 4096, 4096, LG_F32, 0, 0, NULL, NULL);
        test_case(dt, qs[i], 7, 4096, 11008, dt, 0, 1, NULL, NULL);
        test_case(dt, qs[i], 300, 512, 4096, dt, 0, 0, NULL, NULL);
        test_case(dt, qs[i], 2048, 256, 4096, dt, 0, 0, NULL, NULL);
    }
    /* T = 1..4: the CUDA-core GEMV (qgemv.cu, LG_QGEMV = 1) and, with LG_QGEMV = 0, the tensor-core stream */
    const int env_qgemv = G->tune.qgemv;
    for (int on = 1; on >= 0; on--) {
        G->tune.qgemv = on;
        for (size_t i = 0; i < sizeof qs / sizeof *qs; i++)
            for (int T = 1; T <= 4; T++) {
                test_case(dt, qs[i], T, 72, 200, dt, T & 1, 0, NULL, NULL);
                test_case(dt, qs[i], T, 40, 131, LG_F32, 1, 1, NULL, NULL);
                test_case(dt, qs[i], T, 4096, 4096, dt, 0, T == 2, NULL, NULL);
                test_case(dt, qs[i], T, 4096, 11008, T == 3 ? LG_F32 : dt, T == 4, 0, NULL, NULL);
                if (on && T == 1)
                    test_case(dt, qs[i], T, 22016, 4096, dt, 0, 0, NULL, NULL);
                if (on && T == 3)
                    test_case(dt, qs[i], T, 12288, 4096, dt, 0, 0, NULL, NULL);
            }
        for (int dyn = 0; dyn < 2; dyn++)
            for (int T = 1; T <= 4; T++) {
                test_case(dt, LG_QF8_A8S, T, 80, 200, dt, 1, 0, rows3, dyn ? a_dyn : a_static);
                test_case(dt, LG_QF8_A8S, T, 320, 4096, LG_F32, 0, 1, rows3b, dyn ? a_dyn : a_static);
                if (on) /* fused rows of different a inside one warp's rows (the GEMV rounds x by each row's a) */
                    test_case(dt, LG_QF8_A8S, T, 80, 131, dt, 0, 0, rows3odd, dyn ? a_dyn : a_static);
            }
    }
    G->tune.qgemv = env_qgemv;
    /* one d a row: F8_A8's prefill takes cuBLASLt's FP8 GEMM (matmul_f8_lt.cu) where the library has it */
    g_rowconst = 1;
    test_case(dt, LG_QF8_A8, 7, 320, 1152, dt, 0, 0, NULL, NULL);
    test_case(dt, LG_QF8_A8, 300, 320, 1152, dt, 1, 0, NULL, NULL);
    test_case(dt, LG_QF8_A8, 2048, 256, 4096, dt, 0, 1, NULL, NULL);
    test_case(dt, LG_QF8_A8, 2048, 512, 4096, LG_F32, 1, 0, NULL, NULL);
    test_case(dt, LG_QF8_A8, 300, 72, 200, dt, 0, 0, NULL, NULL); /* cols not a multiple of 128 */
    g_rowconst = 0;
    for (int dyn = 0; dyn < 2; dyn++) {
        const float *pa = dyn ? a_dyn : a_static;
        for (size_t j = 0; j < sizeof smallT / sizeof *smallT; j++)
            test_case(dt, LG_QF8_A8S, smallT[j], 80, 200, dt, 1, 0, rows3, pa);
        test_case(dt, LG_QF8_A8S, 32, 320, 4096, LG_F32, 0, 1, rows3b, pa);
        test_case(dt, LG_QF8_A8S, 2048, 320, 1152, dt, 0, 0, rows3b, pa);
    }
}

/* ---- bench ---- */
#define REPS 16
#define NTRIAL 9
#define ROT_BYTES ((size_t)256 << 20)

typedef struct {
    lg_qtype q; /* LG_QNONE: the f16 weight */
    int T, N, K;
    void *x, *y;
    void *W[8];
    int copies;
} bm;
static size_t bm_bytes(lg_qtype q, int N, int K)
{
    if (q == LG_QNONE)
        return (size_t)N * K * 2;
    return lg_tensor_bytes(lg_tensor_quant(NULL, q, N, K), K) * (size_t)N;
}
static void bm_enqueue(const bm *m, int r)
{
    lg_tensor none = {0};
    lg_tensor W = m->q == LG_QNONE ? lg_tensor_2d(m->W[r % m->copies], LG_F16, m->N, m->K)
                                   : lg_tensor_quant(m->W[r % m->copies], m->q, m->N, m->K);
    CK(G->i.matmul(G, lg_tensor_2d(m->y, LG_F16, m->T, m->N), lg_tensor_2d(m->x, LG_F16, m->T, m->K), W, none,
                   false) == 0);
}
static double bm_us(const bm *m)
{
    cudaEvent_t e0, e1;
    CKC(cudaEventCreate(&e0));
    CKC(cudaEventCreate(&e1));
    cudaStream_t st = lg_cuda_compute_stream(G);
    for (int r = 0; r < m->copies; r++) /* eager once per copy: workspaces sized, weights checked (matmul_f8_lt.cu) */
        bm_enqueue(m, r);
    CK(G->i.sync(G) == 0);
    char key[64];
    snprintf(key, sizeof key, "qmm %d %d %d %d", (int)m->q, m->T, m->N, m->K);
    float ms[NTRIAL];
    for (int trial = -2; trial < NTRIAL; trial++) {
        bool replayed = false;
        CKC(cudaEventRecord(e0, st));
        CK(G->i.graph_begin(G, key, strlen(key), &replayed) == 0);
        if (!replayed)
            for (int r = 0; r < REPS; r++) bm_enqueue(m, r);
        CK(G->i.graph_end(G, true) == 0);
        CKC(cudaEventRecord(e1, st));
        CKC(cudaEventSynchronize(e1));
        if (trial >= 0)
            CKC(cudaEventElapsedTime(&ms[trial], e0, e1));
    }
    G->i.graph_reset(G);
    CKC(cudaEventDestroy(e0));
    CKC(cudaEventDestroy(e1));
    qsort(ms, NTRIAL, sizeof(float), cmp_f);
    return ms[NTRIAL / 2] * 1e3 / REPS;
}
static double copy_tbs(void)
{
    const size_t n = (size_t)256 << 20;
    char *a = G->i.alloc(G, 2 * n);
    CK(a);
    cudaEvent_t e0, e1;
    CKC(cudaEventCreate(&e0));
    CKC(cudaEventCreate(&e1));
    cudaStream_t st = lg_cuda_compute_stream(G);
    float ms[9];
    for (int i = -1; i < 9; i++) {
        CKC(cudaEventRecord(e0, st));
        CK(G->i.copy(G, a + n, a, n) == 0);
        CKC(cudaEventRecord(e1, st));
        CKC(cudaEventSynchronize(e1));
        if (i >= 0)
            CKC(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    CKC(cudaEventDestroy(e0));
    CKC(cudaEventDestroy(e1));
    G->i.dealloc(G, a);
    qsort(ms, 9, sizeof(float), cmp_f);
    return 2.0 * n / (ms[4] * 1e-3) * 1e-12;
}
/* a weight of layout q filled with valid values (e4m3 0x38 = 1.0 and small scales; nibbles 0x88), copies
 * enough to rotate over ROT_BYTES */
static void bm_weights(bm *m)
{
    const size_t bytes = bm_bytes(m->q, m->N, m->K);
    m->copies = (int)((ROT_BYTES + bytes - 1) / bytes);
    if (m->copies < 2)
        m->copies = 2;
    if (m->copies > 8)
        m->copies = 8;
    for (int i = 0; i < m->copies; i++) {
        m->W[i] = G->i.alloc(G, bytes);
        CK(m->W[i]);
        if (m->q == LG_QNONE) {
            CKC(cudaMemset(m->W[i], 0x1c, bytes)); /* f16 0x1c1c: 0.0041 */
        } else {
            const lg_qplanes p = lg_qplanes_of(lg_tensor_quant(m->W[i], m->q, m->N, m->K));
            CKC(cudaMemset(p.q, m->q == LG_QI4 ? 0x88 : 0x38, (size_t)m->N * p.q_row));
            CKC(cudaMemset(p.d, m->q == LG_QI4 ? 0x1c : 0x3c, bytes - (size_t)m->N * p.q_row)); /* d, a / z: small */
            if (p.z)
                CKC(cudaMemset(p.z, 8, (size_t)m->N * p.nb));
        }
    }
    CKC(cudaDeviceSynchronize());
}
static void bm_free(bm *m)
{
    for (int i = 0; i < m->copies; i++) G->i.dealloc(G, m->W[i]);
}

static void run_bench(void)
{
    const double bw = copy_tbs();
    printf("== planar-layout matmul (kernels/matmul_f8.cu, matmul_i4.cu) vs the f16 matmul, Llama-2-7B shapes\n");
    printf("   copy bandwidth %.2f TB/s (device-to-device, read + write): the floor is weight bytes / that\n", bw);
    struct {
        const char *name;
        int N, K;
    } sh[] = {{"qkv", 12288, 4096}, {"o", 4096, 4096}, {"gate_up", 22016, 4096}, {"down", 4096, 11008}};
    const lg_qtype qs[] = {LG_QNONE, LG_QF8_A8, LG_QF8, LG_QI4};
    const char *qn[] = {"f16", "F8_A8", "F8", "I4"};
    void *x = dev_random_f16((size_t)2048 * 11008, 1.0f), *y = G->i.alloc(G, (size_t)2048 * 22016 * 2);
    CK(x && y);
    const int Ts[] = {1, 32};
    for (int ti = 0; ti < 2; ti++) {
        const int T = Ts[ti];
        double step_us[4] = {0}, step_floor[4] = {0};
        printf("-- decode T = %d: us per launch, GB/s of weight bytes, time / floor\n", T);
        printf("%-8s", "shape");
        for (int qi = 0; qi < 4; qi++) printf(" | %-8s %8s %8s %6s", qn[qi], "us", "GB/s", "floor");
        printf("\n");
        for (size_t s = 0; s < sizeof sh / sizeof *sh; s++) {
            printf("%-8s", sh[s].name);
            for (int qi = 0; qi < 4; qi++) {
                bm m = {qs[qi], T, sh[s].N, sh[s].K, x, y, {0}, 0};
                bm_weights(&m);
                const double us = bm_us(&m), bytes = (double)bm_bytes(qs[qi], sh[s].N, sh[s].K);
                const double floor_us = bytes / (bw * 1e12) * 1e6;
                step_us[qi] += 32 * us;
                step_floor[qi] += 32 * floor_us;
                printf(" | %-8s %8.1f %8.0f %6.2f", "", us, bytes / (us * 1e-6) * 1e-9, us / floor_us);
                fflush(stdout);
                bm_free(&m);
            }
            printf("\n");
        }
        printf("%-8s", "32 layers");
        for (int qi = 0; qi < 4; qi++)
            printf(" | %-8s %8.0f %8s %6.2f", "", step_us[qi], "", step_us[qi] / step_floor[qi]);
        printf("\n   matmul time of a step against f16's: F8_A8 %.2fx, F8 %.2fx, I4 %.2fx faster\n",
               step_us[0] / step_us[1], step_us[0] / step_us[2], step_us[0] / step_us[3]);
    }
    printf("-- prefill T = 2048: TFLOP/s (2 T N K / time)\n");
    for (size_t s = 0; s < sizeof sh / sizeof *sh; s++) {
        printf("%-8s", sh[s].name);
        for (int qi = 0; qi < 4; qi++) {
            bm m = {qs[qi], 2048, sh[s].N, sh[s].K, x, y, {0}, 0};
            bm_weights(&m);
            const double us = bm_us(&m);
            printf(" | %-6s %7.0f", qn[qi], 2.0 * 2048 * sh[s].N * (double)sh[s].K / (us * 1e-6) * 1e-12);
            fflush(stdout);
            bm_free(&m);
        }
        printf("\n");
    }
    G->i.dealloc(G, x), G->i.dealloc(G, y);
}

int main(int argc, char **argv)
{
    (void)bench_setup; /* bench_util.h's; this program allocates its own weights */
    int bench = 0;
    lg_dtype only_dt = LG_F32; /* both */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench"))
            bench = 1;
        else if (!strcmp(argv[i], "--bf16"))
            only_dt = LG_BF16;
        else if (!strcmp(argv[i], "--f16"))
            only_dt = LG_F16;
        else {
            fprintf(stderr, "usage: test_cuda_qmatmul [--bench] [--f16|--bf16]\n");
            return 2;
        }
    }
    const lg_dtype dts[2] = {LG_F16, LG_BF16};
    for (int di = 0; di < 2; di++) {
        if (bench && di > 0)
            break;
        if (!bench && only_dt != LG_F32 && dts[di] != only_dt)
            continue;
        lg_err err = {0};
        lg_backend_opts o = {0};
        o.act_dtype_hint = dts[di];
        if (lg_backend_create("cuda", &o, &G, &err) != 0) {
            fprintf(stderr, "cuda backend: %s\n", err.msg);
            return 2;
        }
        for (lg_qtype q = LG_QF8; q <= LG_QI4; q++)
            if (!G->i.takes_quant || !G->i.takes_quant(G, q)) {
                fprintf(stderr, "FAIL: takes_quant(%s) is false\n", lg_qtype_get(q).name);
                n_fail++;
            }
        if (bench)
            run_bench();
        else
            run_tests(dts[di]);
        lg_backend_free(G);
        G = NULL;
    }
    if (!bench)
        printf("qmatmul: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
