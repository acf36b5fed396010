/*
 * test_cpu_quant.c — the CPU backend's quantized-weight kernels
 * (engine/backend/cpu_quant*.c) against gguf-py, for every block layout and
 * every kernel table this machine runs (portable C, AVX2, AVX-512 VNNI):
 *
 *   1. the row decoder gives gguf-py's dequantization (1e-6 relative);
 *   2. each dot product of a weight row with activations quantized on the
 *      fly equals X @ dequant(W)^T (float64, from gguf-py) within the error
 *      bound of that 8-bit rounding: |x - d q| <= d / 2 per element, so
 *      |error| <= sum_i |w_i| d(i) / 2 (+ float rounding);
 *   3. a dot's result is the same bits whatever the tile (rows x tokens)
 *      it is computed in (batch invariance, cpu_quant.h);
 *   4. the backend's matmul and embed with quantized weights: matmul against
 *      the same reference and bound (1 token, 3 tokens, 13 tokens with bias
 *      and accumulate, 2 threads), embed against the decoded rows.
 * Fixtures: tests/fixtures/quant/ (make_quant_fixtures.py). Runs with the
 * repo root as working directory.
 */
#include <math.h>
#include <stdlib.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu_quant.h"
#include "tests/unit/test.h"

#define FIX "tests/fixtures/quant/"
#define ROWS 8
#define TOK 3

static void *read_all(const char *name, const char *ext, size_t *n)
{
    char path[256];
    snprintf(path, sizeof path, FIX "%s.%s", name, ext);
    char *buf;
    size_t len;
    lg_err err;
    if (lg_read_file(path, 1 << 24, &buf, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    *n = len;
    return buf;
}

typedef struct fixture {
    lg_qtype q;
    int cols;
    uint8_t *w;    /* [ROWS] rows of blocks */
    float *deq;    /* [ROWS, cols] */
    float *x;      /* [TOK, cols] */
    double *y;     /* [TOK, ROWS] */
    double *bound; /* [TOK, ROWS]: the activation rounding's error bound */
} fixture;

static bool load(lg_qtype q, fixture *f)
{
    const lg_qtype_info qi = lg_qtype_get(q);
    f->q = q;
    f->cols = qi.block_elems == 256 ? 512 : 544;
    size_t nw, nd, nx, ny;
    f->w = read_all(qi.name, "w", &nw);
    f->deq = read_all(qi.name, "deq", &nd);
    f->x = read_all(qi.name, "x", &nx);
    f->y = read_all(qi.name, "y", &ny);
    const size_t row = (size_t)f->cols / qi.block_elems * qi.block_bytes;
    if (!f->w || !f->deq || !f->x || !f->y || nw != ROWS * row || nd != 4u * ROWS * f->cols ||
        nx != 4u * TOK * f->cols || ny != 8u * TOK * ROWS)
        return false;
    /* the activations' blocks: 32 elements for the 32-element layouts, 256 for the K-quants */
    const int ab = lg_qtype_is_k(q) ? LG_QK_BLOCK : LG_QA_BLOCK;
    f->bound = calloc(TOK * ROWS, sizeof(double));
    for (int t = 0; t < TOK; t++)
        for (int r = 0; r < ROWS; r++) {
            double b = 0, mag = 0;
            for (int k0 = 0; k0 < f->cols; k0 += ab) {
                float amax = 0;
                for (int k = k0; k < k0 + ab; k++) amax = fmaxf(amax, fabsf(f->x[t * f->cols + k]));
                for (int k = k0; k < k0 + ab; k++) {
                    const double wv = fabs((double)f->deq[r * f->cols + k]);
                    b += wv * (amax / 127.0) / 2;
                    mag += wv * fabs((double)f->x[t * f->cols + k]);
                }
            }
            f->bound[t * ROWS + r] = b * 1.001 + 1e-5 * mag + 1e-30;
        }
    return true;
}

static void unload(fixture *f)
{
    free(f->w);
    free(f->deq);
    free(f->x);
    free(f->y);
    free(f->bound);
}

static void test_table(const lg_qkern *k, fixture *f)
{
    const lg_qtype_info qi = lg_qtype_get(f->q);
    const size_t row = (size_t)f->cols / qi.block_elems * qi.block_bytes;
    const int64_t nb = f->cols / qi.block_elems;

    /* 1. the row decoder */
    float *d = malloc(sizeof(float) * f->cols);
    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        k->deq[f->q](f->w + r * row, d, f->cols);
        for (int c = 0; c < f->cols; c++) {
            const float ref = f->deq[r * f->cols + c];
            bad += !(fabsf(d[c] - ref) <= 1e-6f * fabsf(ref));
        }
    }
    CHECK_MSG(bad == 0, "%s %s: %d decoded values differ from gguf-py", k->isa, qi.name, bad);
    free(d);

    /* 2. dots against the reference, within the activations' rounding */
    const bool kq = lg_qtype_is_k(f->q);
    const size_t xrow = kq ? (size_t)(f->cols / LG_QK_BLOCK) * sizeof(lg_q8k)
                           : (size_t)(f->cols / LG_QA_BLOCK) * sizeof(lg_q8a);
    char *xq = malloc(xrow * TOK);
    for (int t = 0; t < TOK; t++) {
        if (kq)
            k->quant_k(f->x + t * f->cols, (lg_q8k *)(xq + t * xrow), f->cols);
        else
            k->quant_a(f->x + t * f->cols, (lg_q8a *)(xq + t * xrow), f->cols);
    }
    float tile[TOK * ROWS], one;
    k->dot[f->q](f->w, row, LG_QROWS, xq, xrow, TOK, nb, tile, ROWS);           /* rows 0..3 */
    k->dot[f->q](f->w + 4 * row, row, LG_QROWS, xq, xrow, TOK, nb, tile + 4, ROWS); /* rows 4..7 */
    int over = 0, diff = 0;
    double worst = 0;
    for (int t = 0; t < TOK; t++)
        for (int r = 0; r < ROWS; r++) {
            const double e = fabs((double)tile[t * ROWS + r] - f->y[t * ROWS + r]);
            over += e > f->bound[t * ROWS + r];
            worst = fmax(worst, e / f->bound[t * ROWS + r]);
            /* 3. one pair on its own: the same bits */
            k->dot[f->q](f->w + r * row, row, 1, xq + t * xrow, xrow, 1, nb, &one, 1);
            diff += memcmp(&one, &tile[t * ROWS + r], sizeof one) != 0;
        }
    CHECK_MSG(over == 0, "%s %s: %d of %d dots beyond the activation rounding bound (worst %.2fx)", k->isa, qi.name,
              over, TOK * ROWS, worst);
    CHECK_MSG(diff == 0, "%s %s: %d dots differ between a tile and alone", k->isa, qi.name, diff);
    /* 3 rows x 2 tokens: another tile shape, the same bits */
    float t32[2 * 3];
    k->dot[f->q](f->w + row, row, 3, xq + xrow, xrow, 2, nb, t32, 3);
    diff = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 3; r++) diff += memcmp(&t32[t * 3 + r], &tile[(t + 1) * ROWS + r + 1], 4) != 0;
    CHECK_MSG(diff == 0, "%s %s: a 3 x 2 tile differs from a 4 x 3 one", k->isa, qi.name);
    if (lg_log_verbose)
        printf("%s %s: worst dot error %.3f of the bound\n", k->isa, qi.name, worst);
    free(xq);
}

/* the backend op: matmul (bound as above, bias and accumulate exact on top) and embed */
static void test_backend(lg_backend *be, fixture *f)
{
    const lg_qtype_info qi = lg_qtype_get(f->q);
    const size_t row = (size_t)f->cols / qi.block_elems * qi.block_bytes;
    lg_tensor W = lg_tensor_quant(f->w, f->q, ROWS, f->cols), none = {0};
    float y[TOK * ROWS];
    CHECK(be->i.matmul(be, lg_tensor_2d(y, LG_F32, TOK, ROWS), lg_tensor_2d(f->x, LG_F32, TOK, f->cols), W, none,
                       false) == 0);
    int over = 0;
    for (int i = 0; i < TOK * ROWS; i++) over += fabs(y[i] - f->y[i]) > f->bound[i];
    CHECK_MSG(over == 0, "matmul %s, %d tokens: %d outputs beyond the bound", qi.name, TOK, over);

    /* 13 tokens (the fixture's 3, cycled), accumulate onto 1.0, bias r: the same values as 1 token at a time */
    enum { T13 = 13 };
    float *x13 = malloc(sizeof(float) * T13 * f->cols), y13[T13 * ROWS], bias[ROWS], y1[ROWS];
    for (int t = 0; t < T13; t++) memcpy(x13 + t * f->cols, f->x + (t % TOK) * f->cols, sizeof(float) * f->cols);
    for (int r = 0; r < ROWS; r++) bias[r] = (float)r;
    for (int i = 0; i < T13 * ROWS; i++) y13[i] = 1.0f;
    CHECK(be->i.matmul(be, lg_tensor_2d(y13, LG_F32, T13, ROWS), lg_tensor_2d(x13, LG_F32, T13, f->cols), W,
                       lg_tensor_2d(bias, LG_F32, 1, ROWS), true) == 0);
    int diff = 0;
    over = 0;
    for (int t = 0; t < T13; t++) {
        CHECK(be->i.matmul(be, lg_tensor_2d(y1, LG_F32, 1, ROWS), lg_tensor_2d(x13 + t * f->cols, LG_F32, 1, f->cols),
                           W, none, false) == 0);
        for (int r = 0; r < ROWS; r++) {
            const float want = 1.0f + (y1[r] + (float)r);
            diff += memcmp(&want, &y13[t * ROWS + r], 4) != 0;
            over += fabs(y13[t * ROWS + r] - (1.0 + r + f->y[(t % TOK) * ROWS + r])) > f->bound[(t % TOK) * ROWS + r] + 1e-5;
        }
    }
    CHECK_MSG(diff == 0, "matmul %s: %d outputs of a 13-token step differ from the same tokens alone", qi.name, diff);
    CHECK_MSG(over == 0, "matmul %s, 13 tokens, bias, accumulate: %d outputs beyond the bound", qi.name, over);
    free(x13);

    /* embed: rows 5, 0, 7 (and -1: zeros) decoded */
    const int32_t tok[4] = {5, 0, 7, -1};
    float *e = malloc(sizeof(float) * 4 * f->cols);
    CHECK(be->i.embed(be, lg_tensor_2d(e, LG_F32, 4, f->cols), W, tok) == 0);
    int bad = 0;
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < f->cols; c++) {
            const float ref = f->deq[tok[i] * f->cols + c];
            bad += !(fabsf(e[i * f->cols + c] - ref) <= 1e-6f * fabsf(ref));
        }
    for (int c = 0; c < f->cols; c++) bad += e[3 * f->cols + c] != 0;
    CHECK_MSG(bad == 0, "embed %s: %d values differ from gguf-py", qi.name, bad);
    free(e);
    (void)row;
}

int main(void)
{
    const char *isas[] = {"c", "avx2", "avx512vnni"};
    lg_backend *be = NULL;
    lg_err err;
    lg_backend_opts o = {.n_threads = 2};
    CHECK_MSG(lg_backend_cpu_create(&o, &be, &err) == 0, "%s", err.msg);
    CHECK(be && be->i.takes_quant && be->i.takes_quant(be, LG_Q4_1) && !be->i.takes_quant(be, LG_QNONE));
    printf("best kernels here: %s\n", lg_qkern_best()->isa);
    for (int q = LG_Q4_0; q <= LG_Q6_K; q++) {
        fixture f = {0};
        const bool ok = load((lg_qtype)q, &f);
        CHECK_MSG(ok, "fixture of %s", lg_qtype_get((lg_qtype)q).name);
        if (ok) {
            for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
                const lg_qkern *k = lg_qkern_by_name(isas[i]);
                if (k)
                    test_table(k, &f);
                else if (q == LG_Q4_0)
                    printf("skip: %s kernels (not runnable here)\n", isas[i]);
            }
            if (be)
                test_backend(be, &f);
        }
        unload(&f);
    }
    /* a K-quant row must be whole super-blocks */
    float y = 0, x[100] = {0};
    uint8_t w[256] = {0};
    if (be)
        CHECK(be->i.matmul(be, lg_tensor_2d(&y, LG_F32, 1, 1), lg_tensor_2d(x, LG_F32, 1, 100),
                           lg_tensor_quant(w, LG_Q4_K, 1, 100), (lg_tensor){0}, false) == -1);
    lg_backend_free(be);
    TEST_DONE();
}
