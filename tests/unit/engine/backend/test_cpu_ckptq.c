/*
 * test_cpu_ckptq.c — the CPU backend's matmul and embed with weights in the
 * planar checkpoint layouts (F8, F8_A8, F8_A8S, F8_A8G, I4: cpu_ckptq.c,
 * cpu_fp8act.c) against numpy in float64 with ml_dtypes' e4m3:
 *
 *   1. lg_e4m3_value gives ml_dtypes' value of every code; the W8A8
 *      activation rounding (dynamic per row, static and bounded dynamic
 *      F8_A8S, per 128-group F8_A8G with a partial last group, a zero row,
 *      rows of near ties) gives ml_dtypes' codes and numpy's float32 scales
 *      exactly;
 *   2. matmul for every layout and the shapes 8x256, 6x200, 5x72 (a partial
 *      last group), T = 1, 3, 17, with bias, with bias and accumulate, and
 *      without either, equals x~ @ dequant(W)^T (+ bias) in float64 within
 *      f32 accumulation's bound: |error| <= (K + 4) 2^-24 (|x~| @ |W|^T +
 *      |bias| + |y0|). One e4m3 code off in x~ costs about 2^-4 of a term,
 *      far beyond it. F8_A8S's rows carry three activation scales (static,
 *      bounded dynamic, static);
 *   3. each of the 17 rows computed alone, and the last 2, 3 and 4 rows as
 *      one step, give the same bits as in the batch of 17, and 1 thread the
 *      same bits as 2 (batch independence);
 *   4. embed decodes rows whose product with x~ matches the reference
 *      within the same bound; takes_quant says yes to the five layouts;
 *   5. F8 scales past the vector decode's range (synthetic rows against a
 *      float64 sum of lg_e4m3_to_f32 * d, checked by test_e4m3.c).
 * Fixtures: tests/fixtures/ckptq/ (make_ckptq_fixtures.py). Runs with the
 * repo root as working directory.
 */
#include "engine/backend/backend.h"
#include "engine/backend/cpu_fp8act.h"
#include "tests/unit/test.h"

#define FIX "tests/fixtures/ckptq/"
#define T 17
#define ACT_T 9
#define ACT_K 200

static void *read_all(const char *name, size_t *n)
{
    char path[256], *buf;
    snprintf(path, sizeof path, FIX "%s", name);
    lg_err err;
    size_t len;
    if (lg_read_file(path, 1 << 24, &buf, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    if (n)
        *n = len;
    return buf;
}

static void test_act(void)
{
    static const struct {
        const char *name;
        lg_qtype q;
        float a;
    } cases[] = {{"A8", LG_QF8_A8, 0.0f},
                 {"A8G", LG_QF8_A8G, 0.0f},
                 {"A8S_static", LG_QF8_A8S, 0.004f},
                 {"A8S_dyn", LG_QF8_A8S, -2.0f}};
    size_t nd;
    float *deq = read_all("e4m3.deq", &nd); /* ml_dtypes' value of every code */
    CHECK(deq && nd == 256 * 4);
    int bad = 0;
    for (int v = 0; deq && v < 256; v++) {
        const float got = lg_e4m3_value((uint8_t)v);
        bad += isnan(deq[v]) ? !isnan(got) : memcmp(&got, &deq[v], 4) != 0;
    }
    CHECK_MSG(bad == 0, "lg_e4m3_value: %d of 256 codes differ from ml_dtypes", bad);
    free(deq);

    size_t nx;
    float *x = read_all("act.x", &nx);
    CHECK(x && nx == 4u * ACT_T * ACT_K);
    if (!x)
        return;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64];
        size_t nc, ns;
        snprintf(name, sizeof name, "act_%s.code", cases[c].name);
        uint8_t *code = read_all(name, &nc);
        snprintf(name, sizeof name, "act_%s.scale", cases[c].name);
        float *scale = read_all(name, &ns);
        const int64_t ng = lg_fp8act_groups(cases[c].q, ACT_K);
        CHECK(code && scale && nc == ACT_T * ACT_K && ns == 4u * ACT_T * (size_t)ng);
        if (!code || !scale)
            continue;
        int bad_code = 0, bad_scale = 0, bad_xr = 0;
        for (int t = 0; t < ACT_T; t++) {
            uint8_t got[ACT_K];
            float s[2], xr[ACT_K];
            lg_fp8act_row(cases[c].q, cases[c].a, x + t * ACT_K, ACT_K, got, s, xr);
            for (int k = 0; k < ACT_K; k++) {
                bad_code += got[k] != code[t * ACT_K + k];
                const float want = s[k / 128 < ng ? k / 128 : 0] * lg_e4m3_to_f32(got[k]);
                bad_xr += memcmp(&want, &xr[k], 4) != 0;
            }
            for (int g = 0; g < ng; g++) bad_scale += memcmp(&s[g], &scale[t * ng + g], 4) != 0;
        }
        CHECK_MSG(bad_code == 0, "activation rounding %s: %d codes differ from ml_dtypes", cases[c].name, bad_code);
        CHECK_MSG(bad_scale == 0, "activation rounding %s: %d scales differ from numpy's", cases[c].name, bad_scale);
        CHECK_MSG(bad_xr == 0, "activation rounding %s: %d x~ are not scale * e4m3(code)", cases[c].name, bad_xr);
        free(code);
        free(scale);
    }
    free(x);
}

typedef struct mm_fix {
    lg_qtype q;
    int N, K;
    uint8_t *w;
    float *x, *b;
    double *y, *mag; /* [T, N] */
} mm_fix;

static bool load(lg_qtype q, int N, int K, mm_fix *f)
{
    memset(f, 0, sizeof *f);
    f->q = q, f->N = N, f->K = K;
    char name[64];
    const char *ln = lg_qtype_get(q).name;
    size_t nw, nx, nb, ny, nm;
    snprintf(name, sizeof name, "%s_%dx%d.w", ln, N, K);
    f->w = read_all(name, &nw);
    snprintf(name, sizeof name, "x_%d.x", K);
    f->x = read_all(name, &nx);
    snprintf(name, sizeof name, "%s_%dx%d.b", ln, N, K);
    f->b = read_all(name, &nb);
    snprintf(name, sizeof name, "%s_%dx%d.y", ln, N, K);
    f->y = read_all(name, &ny);
    snprintf(name, sizeof name, "%s_%dx%d.mag", ln, N, K);
    f->mag = read_all(name, &nm);
    const lg_tensor W = lg_tensor_quant(f->w, q, N, K);
    return f->w && f->x && f->b && f->y && f->mag && nw == lg_tensor_bytes(W, K) * (size_t)N &&
           nx == 4u * T * (size_t)K && nb == 4u * (size_t)N && ny == 8u * T * (size_t)N && nm == ny;
}

static void unload(mm_fix *f)
{
    free(f->w);
    free(f->x);
    free(f->b);
    free(f->y);
    free(f->mag);
}

/* outputs of y [nt, N] beyond the bound of the reference (with the bias when bias, plus y0 when y0) */
static int over_bound(const mm_fix *f, const float *y, int nt, bool bias, const float *y0, double *worst)
{
    int over = 0;
    for (int t = 0; t < nt; t++)
        for (int n = 0; n < f->N; n++) {
            const int i = t * f->N + n;
            const double b = bias ? f->b[n] : 0.0, init = y0 ? y0[i] : 0.0;
            const double ref = f->y[i] - f->b[n] + b + init;
            const double bound = (f->K + 4) * 0x1p-24 * (f->mag[i] + fabs(b) + fabs(init)) + 1e-30;
            const double e = fabs(y[i] - ref);
            over += !(e <= bound);
            if (e / bound > *worst)
                *worst = e / bound;
        }
    return over;
}

static void test_matmul(lg_backend *be, lg_backend *be1, mm_fix *f)
{
    const char *ln = lg_qtype_get(f->q).name;
    const lg_tensor W = lg_tensor_quant(f->w, f->q, f->N, f->K), none = {0};
    const lg_tensor bias = lg_tensor_2d(f->b, LG_F32, 1, f->N);
    float y[T * 8], y0[T * 8], ya[T * 8], y1[8];
    double worst = 0;
    static const int Ts[3] = {1, 3, T};
    for (int i = 0; i < 3; i++) {
        const int nt = Ts[i];
        const lg_tensor X = lg_tensor_2d(f->x, LG_F32, nt, f->K), Y = lg_tensor_2d(y, LG_F32, nt, f->N);
        CHECK(be->i.matmul(be, Y, X, W, bias, false) == 0);
        int over = over_bound(f, y, nt, true, NULL, &worst);
        CHECK_MSG(over == 0, "%s %dx%d T=%d bias: %d outputs beyond the bound", ln, f->N, f->K, nt, over);
        CHECK(be->i.matmul(be, Y, X, W, none, false) == 0);
        over = over_bound(f, y, nt, false, NULL, &worst);
        CHECK_MSG(over == 0, "%s %dx%d T=%d: %d outputs beyond the bound", ln, f->N, f->K, nt, over);
        for (int j = 0; j < nt * f->N; j++) ya[j] = y0[j] = 0.25f * (float)(j % 7) - 0.5f;
        CHECK(be->i.matmul(be, lg_tensor_2d(ya, LG_F32, nt, f->N), X, W, bias, true) == 0);
        over = over_bound(f, ya, nt, true, y0, &worst);
        CHECK_MSG(over == 0, "%s %dx%d T=%d bias accumulate: %d outputs beyond the bound", ln, f->N, f->K, nt, over);
    }
    /* ya holds the 17-row step with bias and accumulate: each row alone, and on 1 thread, the same bits */
    int diff = 0, diff1 = 0;
    float yb[T * 8];
    for (int j = 0; j < T * f->N; j++) yb[j] = y0[j];
    CHECK(be1->i.matmul(be1, lg_tensor_2d(yb, LG_F32, T, f->N), lg_tensor_2d(f->x, LG_F32, T, f->K), W, bias, true) ==
          0);
    for (int t = 0; t < T; t++) {
        memcpy(y1, y0 + t * f->N, sizeof(float) * f->N);
        CHECK(be->i.matmul(be, lg_tensor_2d(y1, LG_F32, 1, f->N), lg_tensor_2d(f->x + t * f->K, LG_F32, 1, f->K), W,
                           bias, true) == 0);
        diff += memcmp(y1, ya + t * f->N, sizeof(float) * f->N) != 0;
        diff1 += memcmp(yb + t * f->N, ya + t * f->N, sizeof(float) * f->N) != 0;
    }
    /* steps of 2, 3 and 4 tokens (the direct path's other widths) over rows 13..16: the same bits */
    for (int nt = 2; nt <= 4; nt++) {
        float ys[4 * 8];
        memcpy(ys, y0 + (T - nt) * f->N, sizeof(float) * nt * f->N);
        CHECK(be->i.matmul(be, lg_tensor_2d(ys, LG_F32, nt, f->N), lg_tensor_2d(f->x + (T - nt) * f->K, LG_F32, nt, f->K),
                           W, bias, true) == 0);
        diff += memcmp(ys, ya + (T - nt) * f->N, sizeof(float) * nt * f->N) != 0;
    }
    CHECK_MSG(diff == 0, "%s %dx%d: %d steps differ from a batch of %d (rows alone; 2, 3, 4 rows)", ln, f->N, f->K,
              diff, T);
    CHECK_MSG(diff1 == 0, "%s %dx%d: %d of %d rows differ on 1 and 2 threads", ln, f->N, f->K, diff1, T);

    /* embed: every row decoded, dotted with x~ in double, against the reference */
    int32_t tok[8];
    for (int n = 0; n < f->N; n++) tok[n] = f->N - 1 - n;
    float *e = malloc(sizeof(float) * 8 * f->K), *xr = malloc(sizeof(float) * f->K);
    CHECK(be->i.embed(be, lg_tensor_2d(e, LG_F32, f->N, f->K), W, tok) == 0);
    const lg_qplanes p = lg_qplanes_of(W);
    int over = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < f->N; i++) {
            const int n = tok[i];
            if (lg_qtype_is_w8a8(f->q))
                lg_fp8act_row(f->q, p.a ? p.a[n * p.nb] : 0.0f, f->x + t * f->K, f->K, NULL, NULL, xr);
            else
                memcpy(xr, f->x + t * f->K, sizeof(float) * f->K);
            double s = 0;
            for (int k = 0; k < f->K; k++) s += (double)xr[k] * e[i * f->K + k];
            const int j = t * f->N + n;
            over += !(fabs(s - (f->y[j] - f->b[n])) <= 4 * 0x1p-24 * f->mag[j] + 1e-30);
        }
    CHECK_MSG(over == 0, "%s %dx%d: %d embedded rows' products off the reference", ln, f->N, f->K, over);
    free(e);
    free(xr);
    if (lg_log_verbose)
        printf("%s %dx%d: worst matmul error %.3f of the bound\n", ln, f->N, f->K, worst);
}

/* F8 rows with a scale past 2^119 (the vector decode's limit: they take the scalar path) and with
 * codes whose values reach 112: T = 1 (the direct path) and T = 5 (the GEMM) give the same bits, and
 * both the float64 sum of x * e4m3 * d within the f32 bound. */
static void test_big_scale(lg_backend *be)
{
    enum { N = 5, K = 256, NB = 2, T5 = 5 };
    static uint8_t w[N * NB * 132];
    float x[T5 * K], y1[N], y5[T5 * N];
    const lg_tensor W = lg_tensor_quant(w, LG_QF8, N, K), none = {0};
    const lg_qplanes p = lg_qplanes_of(W);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) p.q[n * p.q_row + k] = (uint8_t)(((n * 7 + k * 37) % 111) | (k & 1 ? 0x80 : 0));
    for (int i = 0; i < N * NB; i++) ((float *)p.d)[i] = i / NB == 2 ? 0x1.8p119f : i / NB == 4 ? 0x1p120f : 0.01f;
    for (int i = 0; i < T5 * K; i++) x[i] = (float)((i * 13) % 17 - 8) * 0x1p-12f;
    CHECK(be->i.matmul(be, lg_tensor_2d(y5, LG_F32, T5, N), lg_tensor_2d(x, LG_F32, T5, K), W, none, false) == 0);
    int diff = 0, over = 0;
    for (int t = 0; t < T5; t++) {
        CHECK(be->i.matmul(be, lg_tensor_2d(y1, LG_F32, 1, N), lg_tensor_2d(x + t * K, LG_F32, 1, K), W, none,
                           false) == 0);
        diff += memcmp(y1, y5 + t * N, sizeof y1) != 0;
        for (int n = 0; n < N; n++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double wv = (double)lg_e4m3_to_f32(p.q[n * p.q_row + k]) * ((float *)p.d)[n * NB + k / 128];
                s += x[t * K + k] * wv;
                mag += fabs(x[t * K + k] * wv);
            }
            over += !(fabs(y1[n] - s) <= (K + 4) * 0x1p-24 * mag);
        }
    }
    CHECK_MSG(diff == 0, "F8 scales past 2^119: %d of %d rows differ alone and in a step of 5", diff, T5);
    CHECK_MSG(over == 0, "F8 scales past 2^119: %d outputs beyond the bound", over);
}

int main(int argc, char **argv)
{
    lg_log_verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    test_act();

    lg_backend *be = NULL, *be1 = NULL;
    lg_err err;
    lg_backend_opts o2 = {.n_threads = 2}, o1 = {.n_threads = 1};
    CHECK(lg_backend_cpu_create(&o2, &be, &err) == 0);
    CHECK(lg_backend_cpu_create(&o1, &be1, &err) == 0);
    if (!be || !be1)
        TEST_DONE();
    static const lg_qtype qs[5] = {LG_QF8, LG_QF8_A8, LG_QF8_A8S, LG_QF8_A8G, LG_QI4};
    static const int shapes[3][2] = {{8, 256}, {6, 200}, {5, 72}};
    for (int i = 0; i < 5; i++) {
        CHECK_MSG(be->i.takes_quant(be, qs[i]), "takes_quant(%s)", lg_qtype_get(qs[i]).name);
        for (int s = 0; s < 3; s++) {
            mm_fix f;
            if (!load(qs[i], shapes[s][0], shapes[s][1], &f)) {
                CHECK_MSG(false, "fixture %s %dx%d", lg_qtype_get(qs[i]).name, shapes[s][0], shapes[s][1]);
                unload(&f);
                continue;
            }
            test_matmul(be, be1, &f);
            unload(&f);
        }
    }
    test_big_scale(be);
    lg_backend_free(be);
    lg_backend_free(be1);
    TEST_DONE();
}
