/*
 * test_backend_cpu.c — the CPU backend's ops against plain double-precision
 * loops on random inputs: matmul for every weight dtype and ragged shapes
 * (tails of the 4x4 blocking and of the vector width), rmsnorm, rope,
 * silu_mul, and paged attention over scattered pages with GQA.
 */
#include <math.h>
#include <stdlib.h>

#include "engine/backend/backend.h"
#include "tests/unit/test.h"

static uint64_t rs = 88172645463325252ull;
static float frand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static double rel_err(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den + 1e-300));
}

static void test_matmul(lg_backend *be, lg_dtype wdt, int T, int N, int K, bool acc, bool bias)
{
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N), *b = malloc(sizeof(float) * N);
    float *wf = malloc(sizeof(float) * N * K);
    void *W = malloc(4 * (size_t)N * K);
    double *ref = malloc(sizeof(double) * T * N);
    for (int i = 0; i < T * K; i++) x[i] = frand();
    for (int i = 0; i < N * K; i++) wf[i] = frand();
    for (int i = 0; i < N; i++) b[i] = frand();
    for (int i = 0; i < T * N; i++) y[i] = frand();
    lg_from_f32(W, wdt, wf, (size_t)N * K);
    lg_to_f32(wf, W, wdt, (size_t)N * K); /* the rounded weights are the reference */
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = acc ? y[t * N + n] : 0;
            if (bias) s += b[n];
            for (int k = 0; k < K; k++) s += (double)x[t * K + k] * wf[n * K + k];
            ref[t * N + n] = s;
        }
    lg_tensor none = {0};
    int rc = be->i.matmul(be, lg_tensor_2d(y, LG_F32, T, N), lg_tensor_2d(x, LG_F32, T, K),
                          lg_tensor_2d(W, wdt, N, K), bias ? lg_tensor_2d(b, LG_F32, 1, N) : none, acc);
    CHECK(rc == 0);
    double e = rel_err(y, ref, (size_t)T * N);
    CHECK_MSG(e < 1e-6, "matmul %s T=%d N=%d K=%d acc=%d: rel err %g", lg_dtype_name(wdt), T, N, K, acc, e);
    free(x); free(y); free(b); free(wf); free(W); free(ref);
}

static void test_attention(lg_backend *be)
{
    /* two sequences, GQA 4 q heads / 2 kv heads, hd 8, page 4 tokens, scattered pages */
    const int nh = 4, nkv = 2, hd = 8, pt = 4, n_pages = 12;
    const int kvdim = nkv * hd;
    size_t page_bytes = (size_t)pt * 2 * kvdim * 4;
    float *pool = calloc((size_t)n_pages, page_bytes);
    int seq_len[2] = {7, 10}, q_len[2] = {3, 1};
    int32_t pages0[] = {5, 2}, pages1[] = {9, 0, 7};
    const int32_t *pages[2] = {pages0, pages1};
    /* fill all kv of both sequences; keep a dense copy */
    float K[2][10][16], V[2][10][16];
    lg_kv_view kv = {pool, page_bytes, 0, (size_t)pt * kvdim * 4, pt, nkv, hd, LG_F32, 0, 0, 1, 1};
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < seq_len[s]; p++) {
            for (int e = 0; e < kvdim; e++) K[s][p][e] = frand(), V[s][p][e] = frand();
            int32_t slot = pages[s][p / pt] * pt + p % pt;
            lg_tensor kt = lg_tensor_2d(K[s][p], LG_F32, 1, kvdim), vt = lg_tensor_2d(V[s][p], LG_F32, 1, kvdim);
            CHECK(be->i.kv_write(be, kv, kt, vt, &slot, 1) == 0);
        }
    int T = q_len[0] + q_len[1];
    float q[4][32], out[4][32];
    for (int t = 0; t < T; t++)
        for (int e = 0; e < nh * hd; e++) q[t][e] = frand();
    int32_t pos[4] = {4, 5, 6, 9};
    int32_t q_indptr[3] = {0, 3, 4}, kv_len[2] = {7, 10}, page_indptr[3] = {0, 2, 5};
    int32_t page_ids[5] = {5, 2, 9, 0, 7};
    lg_step_meta m = {.n_tokens = T, .n_seqs = 2, .max_q_len = 3, .max_kv_len = 10, .pos = pos,
                      .q_indptr = q_indptr, .kv_len = kv_len, .page_indptr = page_indptr, .page_ids = page_ids};
    float scale = 0.3f;
    CHECK(be->i.attention(be, lg_tensor_2d(out, LG_F32, T, nh * hd), lg_tensor_2d(q, LG_F32, T, nh * hd), kv, &m, nh,
                          scale) == 0);
    double maxerr = 0;
    for (int t = 0; t < T; t++) {
        int s = t < 3 ? 0 : 1;
        for (int h = 0; h < nh; h++) {
            int g = h / (nh / nkv);
            double sc[10], mx = -1e300, sum = 0;
            for (int p = 0; p <= pos[t]; p++) {
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[t][h * hd + e] * K[s][p][g * hd + e];
                sc[p] = d * scale;
                if (sc[p] > mx) mx = sc[p];
            }
            for (int p = 0; p <= pos[t]; p++) sum += sc[p] = exp(sc[p] - mx);
            for (int e = 0; e < hd; e++) {
                double o = 0;
                for (int p = 0; p <= pos[t]; p++) o += sc[p] / sum * V[s][p][g * hd + e];
                double err = fabs(o - out[t][h * hd + e]);
                if (err > maxerr) maxerr = err;
            }
        }
    }
    CHECK_MSG(maxerr < 1e-5, "attention max abs err %g", maxerr);
    free(pool);
}

static void test_norm_rope_silu(lg_backend *be)
{
    const int T = 3, d = 40;
    float r[3][40], dl[3][40], w[40], out[3][40];
    double ref[3][40];
    for (int t = 0; t < T; t++)
        for (int k = 0; k < d; k++) r[t][k] = frand(), dl[t][k] = frand();
    for (int k = 0; k < d; k++) w[k] = frand();
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int k = 0; k < d; k++) ss += ((double)r[t][k] + dl[t][k]) * ((double)r[t][k] + dl[t][k]);
        double inv = 1 / sqrt(ss / d + 1e-5);
        for (int k = 0; k < d; k++) ref[t][k] = ((double)r[t][k] + dl[t][k]) * inv * w[k];
    }
    CHECK(be->i.add_rmsnorm(be, lg_tensor_2d(r, LG_F32, T, d), lg_tensor_2d(dl, LG_F32, T, d),
                            lg_tensor_2d(w, LG_F32, 1, d), lg_tensor_2d(out, LG_F32, T, d), 1e-5f) == 0);
    CHECK_MSG(rel_err(&out[0][0], &ref[0][0], T * d) < 1e-6, "rmsnorm");

    /* rope: 2 heads of 8 on q, 1 on k */
    float q[2][16], k[2][8], inv[4] = {1.0f, 0.1f, 0.01f, 0.001f};
    float q0[2][16];
    int32_t pos[2] = {3, 1000};
    for (int t = 0; t < 2; t++) {
        for (int e = 0; e < 16; e++) q0[t][e] = q[t][e] = frand();
        for (int e = 0; e < 8; e++) k[t][e] = frand();
    }
    CHECK(be->i.rope(be, lg_tensor_2d(q, LG_F32, 2, 16), lg_tensor_2d(k, LG_F32, 2, 8), pos, inv, 2, 1, 8) == 0);
    double maxerr = 0;
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                double a = q0[t][h * 8 + i], b = q0[t][h * 8 + i + 4], ang = pos[t] * (double)inv[i];
                double e1 = fabs(q[t][h * 8 + i] - (a * cos(ang) - b * sin(ang)));
                double e2 = fabs(q[t][h * 8 + i + 4] - (b * cos(ang) + a * sin(ang)));
                if (e1 > maxerr) maxerr = e1;
                if (e2 > maxerr) maxerr = e2;
            }
    CHECK_MSG(maxerr < 1e-5, "rope max err %g", maxerr);

    float gu[2][10], o[2][5];
    for (int t = 0; t < 2; t++)
        for (int e = 0; e < 10; e++) gu[t][e] = 3 * frand();
    CHECK(be->i.silu_mul(be, lg_tensor_2d(o, LG_F32, 2, 5), lg_tensor_2d(gu, LG_F32, 2, 10)) == 0);
    maxerr = 0;
    for (int t = 0; t < 2; t++)
        for (int e = 0; e < 5; e++) {
            double g = gu[t][e], ref2 = g / (1 + exp(-g)) * gu[t][e + 5];
            if (fabs(ref2 - o[t][e]) > maxerr) maxerr = fabs(ref2 - o[t][e]);
        }
    CHECK_MSG(maxerr < 1e-5, "silu_mul max err %g", maxerr);
}

int main(void)
{
    lg_backend *be;
    lg_err err;
    lg_backend_opts o = {.n_threads = 2};
    if (lg_backend_create("cpu", &o, &be, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    lg_dtype dts[] = {LG_F32, LG_F16, LG_BF16};
    int shapes[][3] = {{1, 1, 1}, {1, 7, 33}, {5, 13, 17}, {4, 64, 64}, {9, 130, 96}, {33, 257, 200}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            test_matmul(be, dts[d], shapes[s][0], shapes[s][1], shapes[s][2], false, false);
            test_matmul(be, dts[d], shapes[s][0], shapes[s][1], shapes[s][2], true, true);
        }
    test_attention(be);
    test_norm_rope_silu(be);
    lg_backend_free(be);
    TEST_DONE();
}
