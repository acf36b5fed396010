/*
 * test_cuda_sample.c — the CUDA backend's optional slots against the host:
 *
 *   sample: for random logits (vocab 32000, 151936, 49152, 1000, 100 and 33,
 *     batches of 1..64 rows (so 8, 4 and 2 blocks per row by default;
 *     LG_SAMPLE_CLUSTER=1: one; =8: eight, some without ids at small vocabs),
 *     smooth, tied (quantised), peaked, sparse (-inf/NaN) and llm-like rows, plus edge
 *     rows: all -inf, +inf present, all equal) and mixed params (greedy,
 *     temperature only, top-k, top-p, min-p, combinations, degenerate values)
 *     with random u, every device token must equal lg_sampler_sample_u's.
 *     A mismatch is printed with its margin: whether the host picks the
 *     device's token at u +- 2^-24 (a boundary case) or not (a real bug).
 *     Penalties: the device-penalised rows equal the host's bit for bit, and
 *     so do the tokens drawn from them.
 *     Logprobs (lg_sample_row.logprobs): each asking row's record equals the
 *     host's (lg_logprobs, sampling.h): ids and order exact, values within
 *     2e-5 + 1e-6 |value|.
 *   upload_async / upload_done: a 64 MiB pinned upload while the compute
 *     stream runs ~100 large matmuls must finish (done == 1) before the
 *     compute work, and land byte-exact; 300 small uploads wrap the event
 *     ring; bad tickets are refused.
 *
 * Usage: test_cuda_sample. Exit status 0 only if all passed. Needs a GPU;
 * built and run by tests/gpu/run_sample_test.sh.
 */
#include "engine/backend/backend.h"
#include "engine/backend/sampling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_fail, n_pass;
static uint64_t rng_s = 0x2545F4914F6CDD1Dull;
static uint64_t rnd64(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static double urand(void) { return (double)(rnd64() >> 11) * 0x1.0p-53; }
static int irand(int n) { return (int)(rnd64() % (uint64_t)n); }
static double nrand(void) { return sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (cond) n_pass++;                                                                       \
        else {                                                                                    \
            n_fail++;                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
        }                                                                                         \
    } while (0)

static double now_s(void) { return lg_now(); }

/* ---- sampling ---- */

static const char *kind_name[] = {"smooth", "tied", "peaked", "sparse", "all -inf", "+inf", "all equal", "huge",
                                  "llm-like"};

static void fill_row(float *l, int V, int kind)
{
    double scale = 0.5 + urand() * 6.0;
    for (int i = 0; i < V; i++) {
        double v = nrand() * scale;
        switch (kind) {
        case 1: v = floor(v * 4.0) / 4.0; break;                           /* many ties */
        case 2: v = v + (irand(V) < 20 ? 15.0 : 0.0); break;               /* a few dominant tokens */
        case 3: if (irand(4) == 0) v = irand(2) ? -INFINITY : NAN; break;  /* masked vocab */
        case 4: v = irand(50) ? -INFINITY : NAN; break;                    /* no candidate at all */
        case 6: v = 1.5; break;
        case 7: v = v * 1e37; break;                                       /* range overflows */
        default: break;
        }
        l[i] = (float)v;
    }
    if (kind == 5) {
        l[irand(V)] = INFINITY;
        l[irand(V)] = INFINITY;
    }
    if (kind == 8) { /* a bulk of N(0, 2) under a head of 40 falling from 24: at T <= 1 most of the row weighs 0 */
        for (int i = 0; i < V; i++)
            l[i] = (float)(nrand() * 2.0);
        for (int j = 0; j < 40; j++)
            l[irand(V)] = (float)(24.0 - 2.0 * log(j + 1.0));
    }
}

static lg_sampling_params random_params(int V)
{
    lg_sampling_params p;
    lg_sampling_params_default(&p);
    static const float temps[] = {0.0f, 0.25f, 0.7f, 1.0f, 1.5f, 1e-30f, 1e-45f};
    static const float tps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.1f, 1e-6f, 0.0f, -1.0f};
    static const float mps[] = {0.0f, 0.01f, 0.1f, 0.5f, 1.0f, 2.0f};
    const int tks[] = {0, 1, 2, 5, 40, 1000, V - 1, V, V + 5, -3};
    int mode = irand(8);
    p.temperature = temps[mode == 0 ? 0 : 1 + irand(4)];
    if (irand(40) == 0) p.temperature = temps[5 + irand(2)];
    if (mode == 2 || mode >= 5) p.top_k = tks[irand(10)];
    if (mode == 3 || mode >= 5) p.top_p = tps[irand(8)];
    if (mode == 4 || mode >= 6) p.min_p = mps[irand(6)];
    return p;
}

static void test_sample(lg_backend *G, int V, int n)
{
    float *l = malloc(sizeof *l * (size_t)n * V);
    lg_sample_row *rows = malloc(sizeof *rows * n);
    lg_sampling_params *ps = malloc(sizeof *ps * n);
    int *kinds = malloc(sizeof *kinds * n);
    int32_t *want = malloc(sizeof *want * n), *got = malloc(sizeof *got * n), *again = malloc(sizeof *again * n);
    for (int r = 0; r < n; r++) {
        static const int common[] = {0, 1, 2, 3, 8};
        kinds[r] = irand(12) < 8 ? common[irand(5)] : 4 + irand(4);
        fill_row(l + (size_t)r * V, V, kinds[r]);
        ps[r] = random_params(V);
        float u = (float)((double)(rnd64() >> 40) * 0x1.0p-24);
        if (irand(30) == 0) u = 0.0f;
        if (irand(30) == 0) u = 0x1.fffffep-1f;
        rows[r] = (lg_sample_row){.temperature = ps[r].temperature, .top_k = ps[r].top_k, .top_p = ps[r].top_p,
                                  .min_p = ps[r].min_p, .u = u};
        lg_sampler *s = lg_sampler_new(V, &ps[r]);
        want[r] = lg_sampler_sample_u(s, l + (size_t)r * V, (double)u);
        lg_sampler_free(s);
    }
    size_t lb = sizeof *l * (size_t)n * V;
    float *dl = G->i.alloc(G, lb);
    lg_sample_row *dr = G->i.alloc(G, sizeof *rows * n);
    int32_t *dout = G->i.alloc(G, sizeof *dout * n);
    int rc = G->i.upload(G, dl, l, lb) | G->i.upload(G, dr, rows, sizeof *rows * n);
    memset(got, 0xff, sizeof *got * n);
    G->i.upload(G, dout, got, sizeof *got * n); /* poison: -1 */
    rc |= G->i.sample(G, dout, dl, n, V, dr, NULL, NULL);
    rc |= G->i.download(G, got, dout, sizeof *got * n);
    rc |= G->i.sample(G, dout, dl, n, V, dr, NULL, NULL);
    rc |= G->i.download(G, again, dout, sizeof *again * n);
    rc |= G->i.sync(G);
    CHECK(rc == 0, "V %d n %d: backend calls failed", V, n);
    int bad = 0, boundary = 0, nondet = 0;
    for (int r = 0; r < n; r++) {
        nondet += got[r] != again[r];
        if (got[r] == want[r])
            continue;
        lg_sampler *s = lg_sampler_new(V, &ps[r]);
        double u = rows[r].u;
        int lo = lg_sampler_sample_u(s, l + (size_t)r * V, u - 0x1p-24);
        int hi = lg_sampler_sample_u(s, l + (size_t)r * V, u + 0x1p-24);
        lg_sampler_free(s);
        int edge = lo == got[r] || hi == got[r];
        boundary += edge;
        bad++;
        fprintf(stderr,
                "  mismatch V %d row %d (%s; T %g k %d p %g minp %g u %.9g): host %d device %d; %s"
                " (host at u-2^-24: %d, u+2^-24: %d)\n",
                V, r, kind_name[kinds[r]], ps[r].temperature, ps[r].top_k, ps[r].top_p, ps[r].min_p, u, want[r],
                got[r], edge ? "boundary (margin < 2^-24 in u)" : "NOT a boundary case", lo, hi);
    }
    CHECK(bad == 0 && nondet == 0, "V %d n %d: %d of %d rows differ (%d at a u boundary), %d nondeterministic", V, n,
          bad, n, boundary, nondet);
    /* time: back-to-back launches */
    int iters = 20;
    G->i.sync(G);
    double t0 = now_s();
    for (int it = 0; it < iters; it++)
        G->i.sample(G, dout, dl, n, V, dr, NULL, NULL);
    G->i.sync(G);
    double us = (now_s() - t0) * 1e6 / iters;
    printf("sample V %6d n %2d: %d/%d rows match the host, %.1f us per call\n", V, n, n - bad, n, us);
    G->i.dealloc(G, dl);
    G->i.dealloc(G, dr);
    G->i.dealloc(G, dout);
    free(l);
    free(rows);
    free(ps);
    free(kinds);
    free(want);
    free(got);
    free(again);
}

/* Penalties applied on the device (lg_sample_row.pen_*): every row's
 * penalised logits equal, bit for bit, the host's (engine.c penalised():
 * in generated order, logit -= frequency, and at a token's first occurrence
 * logit -= presence), and the token drawn from them equals the host
 * sampler's. Rows without penalties are left alone. */
static void test_penalties(lg_backend *G, int V, int n)
{
    float *l = malloc(sizeof *l * (size_t)n * V), *want_l = malloc(sizeof *l * (size_t)n * V);
    float *got_l = malloc(sizeof *l * (size_t)n * V);
    lg_sample_row *rows = calloc((size_t)n, sizeof *rows);
    int32_t *want = malloc(sizeof *want * n), *got = malloc(sizeof *got * n);
    int cap = n * 400, np = 0;
    int32_t *pairs = malloc(sizeof *pairs * 2 * (size_t)cap);
    int32_t *gen = malloc(sizeof *gen * 400);
    int *idx = malloc(sizeof *idx * (size_t)V);
    for (int r = 0; r < n; r++) {
        float *row = l + (size_t)r * V, *wrow = want_l + (size_t)r * V;
        fill_row(row, V, irand(3) ? 8 : 0);
        memcpy(wrow, row, sizeof *row * (size_t)V);
        lg_sampling_params ps = random_params(V);
        if (ps.temperature == 0 && irand(2)) ps.temperature = 1.0f;
        float u = (float)((double)(rnd64() >> 40) * 0x1.0p-24);
        rows[r] = (lg_sample_row){.temperature = ps.temperature, .top_k = ps.top_k, .top_p = ps.top_p,
                                  .min_p = ps.min_p, .u = u};
        if (irand(4) != 0) { /* penalised: generated tokens from a narrow range (repeats), around the head */
            int ng = irand(400), span = 1 + irand(200), base = irand(V - span);
            float pres = (float)(urand() * 4 - 2), freq = (float)(urand() * 4 - 2);
            for (int i = 0; i < ng; i++) gen[i] = base + irand(span);
            if (irand(3) == 0)
                for (int i = 0; i < ng; i += 7) gen[i] = (int32_t)(rnd64() % (uint64_t)V); /* anywhere */
            rows[r].presence = pres;
            rows[r].frequency = freq;
            rows[r].pen_off = np;
            for (int t = 0; t < V; t++) idx[t] = -1;
            for (int i = 0; i < ng; i++) {
                int t = gen[i];
                wrow[t] -= freq; /* the engine's order */
                if (idx[t] < 0) {
                    wrow[t] -= pres;
                    idx[t] = np;
                    pairs[2 * np] = t;
                    pairs[2 * np + 1] = 1;
                    np++;
                } else {
                    pairs[2 * idx[t] + 1]++;
                }
            }
            rows[r].pen_n = np - rows[r].pen_off;
        }
        lg_sampler *sm = lg_sampler_new(V, &ps);
        want[r] = lg_sampler_sample_u(sm, wrow, (double)u);
        lg_sampler_free(sm);
    }
    size_t lb = sizeof *l * (size_t)n * V;
    float *dl = G->i.alloc(G, lb);
    lg_sample_row *dr = G->i.alloc(G, sizeof *rows * n);
    int32_t *dout = G->i.alloc(G, sizeof *dout * n), *dp = G->i.alloc(G, sizeof *pairs * 2 * (size_t)(np + 1));
    int rc = G->i.upload(G, dl, l, lb) | G->i.upload(G, dr, rows, sizeof *rows * n) |
             G->i.upload(G, dp, pairs, sizeof *pairs * 2 * (size_t)np);
    rc |= G->i.sample(G, dout, dl, n, V, dr, dp, NULL);
    rc |= G->i.download(G, got, dout, sizeof *got * n);
    rc |= G->i.download(G, got_l, dl, lb);
    rc |= G->i.sync(G);
    int bad_tok = 0, bad_rows = 0;
    for (int r = 0; r < n; r++) {
        bad_tok += got[r] != want[r];
        bad_rows += memcmp(got_l + (size_t)r * V, want_l + (size_t)r * V, sizeof *l * (size_t)V) != 0;
    }
    CHECK(rc == 0 && bad_tok == 0 && bad_rows == 0,
          "penalties V %d n %d (%d pairs): rc %d, %d tokens and %d penalised rows differ from the host's", V, n, np,
          rc, bad_tok, bad_rows);
    printf("penalties V %6d n %2d: %d pairs, %d/%d tokens and rows match the host\n", V, n, np, n - bad_tok, n);
    G->i.dealloc(G, dl);
    G->i.dealloc(G, dr);
    G->i.dealloc(G, dout);
    G->i.dealloc(G, dp);
    free(l), free(want_l), free(got_l), free(rows), free(want), free(got), free(pairs), free(gen), free(idx);
}

/* |a - b| within 2e-5 + 1e-6 |b| (the device sums float exp terms), or both NaN, or equal (infinities) */
static int lp_close(float a, float b)
{
    if (a != a || b != b)
        return a != a && b != b;
    return a == b || fabs((double)a - (double)b) <= 2e-5 + 1e-6 * fabs((double)b);
}

/* Device logprobs (lg_sample_row.logprobs; cu_sample then logprobs.cu): for
 * rows of every kind (ties, -inf/NaN, +inf, all equal, huge, llm-like) and
 * any top_logprobs in 0..20, the record equals the host's: the same n_top
 * and ids in the same order, values within lp_close; rows that do not ask
 * keep their record untouched; two runs give the same bytes. */
static void test_logprobs(lg_backend *G, int V, int n)
{
    float *l = malloc(sizeof *l * (size_t)n * V);
    lg_sample_row *rows = calloc((size_t)n, sizeof *rows);
    int *kinds = malloc(sizeof *kinds * n);
    int32_t *got = malloc(sizeof *got * n);
    lg_logprob_row *lp = malloc(sizeof *lp * n), *again = malloc(sizeof *lp * n), *poison = malloc(sizeof *lp * n);
    memset(poison, 0xab, sizeof *lp * n);
    for (int r = 0; r < n; r++) {
        kinds[r] = r == 0 ? 8 : irand(9);
        fill_row(l + (size_t)r * V, V, kinds[r]);
        lg_sampling_params ps = random_params(V);
        rows[r] = (lg_sample_row){.temperature = ps.temperature, .top_k = ps.top_k, .top_p = ps.top_p,
                                  .min_p = ps.min_p, .u = (float)((double)(rnd64() >> 40) * 0x1.0p-24)};
        if (r == 0 || irand(4) != 0) {
            static const int tops[] = {0, 1, 2, 5, 20};
            rows[r].logprobs = 1;
            rows[r].top_logprobs = irand(3) ? tops[irand(5)] : irand(21);
        }
    }
    size_t lb = sizeof *l * (size_t)n * V;
    float *dl = G->i.alloc(G, lb);
    lg_sample_row *dr = G->i.alloc(G, sizeof *rows * n);
    int32_t *dout = G->i.alloc(G, sizeof *dout * n);
    lg_logprob_row *dlp = G->i.alloc(G, sizeof *lp * n);
    int rc = G->i.upload(G, dl, l, lb) | G->i.upload(G, dr, rows, sizeof *rows * n) |
             G->i.upload(G, dlp, poison, sizeof *lp * n);
    rc |= G->i.sample(G, dout, dl, n, V, dr, NULL, dlp);
    rc |= G->i.download(G, got, dout, sizeof *got * n);
    rc |= G->i.download(G, lp, dlp, sizeof *lp * n);
    rc |= G->i.sample(G, dout, dl, n, V, dr, NULL, dlp);
    rc |= G->i.download(G, again, dlp, sizeof *lp * n);
    rc |= G->i.sync(G);
    int bad = 0, touched = 0, asked = 0;
    for (int r = 0; r < n; r++) {
        if (!rows[r].logprobs) {
            touched += memcmp(lp + r, poison + r, sizeof *lp) != 0;
            continue;
        }
        asked++;
        lg_logprob_row want;
        lg_logprobs(l + (size_t)r * V, V, got[r], rows[r].top_logprobs, &want);
        int ok = lp_close(lp[r].logprob, want.logprob) && lp[r].n_top == want.n_top;
        for (int k = 0; ok && k < want.n_top; k++)
            ok = lp[r].top_ids[k] == want.top_ids[k] && lp_close(lp[r].top_logprobs[k], want.top_logprobs[k]);
        if (!ok) {
            bad++;
            fprintf(stderr, "  logprobs V %d row %d (%s, top %d, token %d): device %.9g n_top %d, host %.9g n_top %d",
                    V, r, kind_name[kinds[r]], rows[r].top_logprobs, got[r], lp[r].logprob, lp[r].n_top,
                    want.logprob, want.n_top);
            for (int k = 0; k < want.n_top && k < 4; k++)
                fprintf(stderr, " | %d %.9g vs %d %.9g", lp[r].top_ids[k], lp[r].top_logprobs[k], want.top_ids[k],
                        want.top_logprobs[k]);
            fputc('\n', stderr);
        }
    }
    CHECK(rc == 0 && bad == 0 && touched == 0 && memcmp(lp, again, sizeof *lp * n) == 0,
          "logprobs V %d n %d: rc %d, %d of %d rows differ from the host, %d untouched rows written, runs %s", V, n,
          rc, bad, asked, touched, memcmp(lp, again, sizeof *lp * n) ? "differ" : "agree");
    /* time: the sampler alone, then with every row's logprobs (top 5) */
    for (int r = 0; r < n; r++) {
        rows[r] = (lg_sample_row){.temperature = 0, .top_p = 1, .u = 0.5f, .logprobs = 1, .top_logprobs = 5};
        fill_row(l + (size_t)r * V, V, 8);
    }
    G->i.upload(G, dl, l, lb);
    G->i.upload(G, dr, rows, sizeof *rows * n);
    double us[2];
    for (int with = 0; with < 2; with++) {
        G->i.sample(G, dout, dl, n, V, dr, NULL, with ? dlp : NULL);
        G->i.sync(G);
        double t0 = now_s();
        for (int it = 0; it < 20; it++)
            G->i.sample(G, dout, dl, n, V, dr, NULL, with ? dlp : NULL);
        G->i.sync(G);
        us[with] = (now_s() - t0) * 1e6 / 20;
    }
    printf("logprobs V %6d n %2d: %d/%d rows match the host; greedy %.1f us, with logprobs (top 5) %.1f us per call\n",
           V, n, asked - bad, asked, us[0], us[1]);
    G->i.dealloc(G, dl);
    G->i.dealloc(G, dr);
    G->i.dealloc(G, dout);
    G->i.dealloc(G, dlp);
    free(l), free(rows), free(kinds), free(got), free(lp), free(again), free(poison);
}

/* One filter at a time on n rows of one kind (0: smooth, 8: llm-like), timed (what each pass costs). */
static void time_configs(lg_backend *G, int V, int n, int kind)
{
    float *l = malloc(sizeof *l * (size_t)n * V);
    for (int r = 0; r < n; r++)
        fill_row(l + (size_t)r * V, V, kind);
    struct { const char *what; lg_sample_row p; } cfg[] = {
        {"greedy", {.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0, .u = 0.5f}},
        {"temperature", {.temperature = 0.8f, .top_k = 0, .top_p = 1, .min_p = 0, .u = 0.5f}},
        {"top-k 50", {.temperature = 0.8f, .top_k = 50, .top_p = 1, .min_p = 0, .u = 0.5f}},
        {"top-p 0.9", {.temperature = 0.8f, .top_k = 0, .top_p = 0.9f, .min_p = 0, .u = 0.5f}},
        {"min-p 0.05", {.temperature = 0.8f, .top_k = 0, .top_p = 1, .min_p = 0.05f, .u = 0.5f}},
        {"k50+p0.9+minp", {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f, .u = 0.5f}},
    };
    float *dl = G->i.alloc(G, sizeof *l * (size_t)n * V);
    lg_sample_row *dr = G->i.alloc(G, sizeof(lg_sample_row) * n);
    lg_sample_row *rows = malloc(sizeof *rows * n);
    int32_t *dout = G->i.alloc(G, sizeof(int32_t) * n);
    G->i.upload(G, dl, l, sizeof *l * (size_t)n * V);
    printf("timing V %d, %d %s rows:", V, n, kind_name[kind]);
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        for (int r = 0; r < n; r++)
            rows[r] = cfg[c].p;
        G->i.upload(G, dr, rows, sizeof *rows * n);
        G->i.sample(G, dout, dl, n, V, dr, NULL, NULL);
        G->i.sync(G);
        double t0 = now_s();
        for (int it = 0; it < 20; it++)
            G->i.sample(G, dout, dl, n, V, dr, NULL, NULL);
        G->i.sync(G);
        printf("  %s %.1f us", cfg[c].what, (now_s() - t0) * 1e6 / 20);
    }
    printf("\n");
    G->i.dealloc(G, dl);
    G->i.dealloc(G, dr);
    G->i.dealloc(G, dout);
    free(rows);
    free(l);
}

/* ---- uploads ---- */

static void test_uploads(lg_backend *G)
{
    const size_t big = (size_t)64 << 20;
    unsigned char *src = G->i.alloc_host(G, big);
    unsigned char *back = malloc(big);
    unsigned char *dst = G->i.alloc(G, big);
    CHECK(src && dst, "alloc_host / alloc failed");
    if (!src || !dst)
        return;
    for (size_t i = 0; i < big; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 13));

    /* keep the compute stream busy: y[T, N] = x[T, K] @ W[N, K]^T in f16, ~100 times */
    int T = 4096, K = 8192, N = 8192;
    void *x = G->i.alloc(G, (size_t)T * K * 2), *w = G->i.alloc(G, (size_t)N * K * 2), *y = G->i.alloc(G, (size_t)T * N * 2);
    lg_tensor tx = lg_tensor_2d(x, LG_F16, T, K), tw = lg_tensor_2d(w, LG_F16, N, K), ty = lg_tensor_2d(y, LG_F16, T, N);
    lg_tensor nob = {0};
    G->i.sync(G);
    int rc = 0;
    double t0 = now_s();
    for (int i = 0; i < 100; i++)
        rc |= G->i.matmul(G, ty, tx, tw, nob, false);
    double t_enq = now_s();
    uint64_t ticket = 0;
    rc |= G->i.upload_async(G, dst, src, big, &ticket);
    int st, polls = 0;
    while ((st = G->i.upload_done(G, ticket)) == 0)
        polls++;
    double t_up = now_s();
    rc |= G->i.sync(G);
    double t_sync = now_s();
    CHECK(rc == 0 && st == 1, "upload/matmul calls failed (rc %d, done %d)", rc, st);
    printf("upload 64 MiB while computing: enqueue %.1f ms, upload done at %.1f ms (%d polls), compute done at %.1f ms"
           " -> %s\n",
           (t_enq - t0) * 1e3, (t_up - t0) * 1e3, polls, (t_sync - t0) * 1e3,
           t_sync - t_up > 0.005 ? "overlapped" : "NOT overlapped");
    CHECK(t_sync - t_up > 0.005, "upload did not finish while the compute stream was busy");
    G->i.download(G, back, dst, big);
    CHECK(memcmp(back, src, big) == 0, "64 MiB upload: bytes differ");

    /* 300 small uploads: ring wrap, tickets, late queries */
    enum { NS = 300, PIECE = 4096 };
    uint64_t tk[NS];
    for (int i = 0; i < NS; i++) {
        unsigned char *s = src + (size_t)i * PIECE;
        memset(s, (i * 7 + 1) & 0xff, PIECE);
        rc |= G->i.upload_async(G, dst + (size_t)i * PIECE, s, PIECE, &tk[i]);
    }
    int mono = 1;
    for (int i = 1; i < NS; i++)
        mono &= tk[i] == tk[i - 1] + 1;
    int all = 1;
    for (int i = NS - 1; i >= 0; i--) {
        while ((st = G->i.upload_done(G, tk[i])) == 0) {}
        all &= st == 1;
    }
    CHECK(rc == 0 && mono && all, "small uploads: rc %d, tickets consecutive %d, all done %d", rc, mono, all);
    G->i.download(G, back, dst, (size_t)NS * PIECE);
    int ok = 1;
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < PIECE; j++)
            ok &= back[(size_t)i * PIECE + j] == ((i * 7 + 1) & 0xff);
    CHECK(ok, "small uploads: bytes differ");
    CHECK(G->i.upload_done(G, 0) == -1 && G->i.upload_done(G, tk[NS - 1] + 1) == -1, "bad tickets not refused");
    unsigned char pageable[64];
    uint64_t tbad;
    CHECK(G->i.upload_async(G, dst, pageable, sizeof pageable, &tbad) == -1, "pageable src not refused");

    G->i.dealloc(G, x);
    G->i.dealloc(G, w);
    G->i.dealloc(G, y);
    G->i.dealloc(G, dst);
    G->i.free_host(G, src);
    free(back);
}

int main(void)
{
    lg_backend_opts o = {0};
    o.act_dtype_hint = LG_F16;
    lg_backend *G = NULL;
    lg_err err = {0};
    if (lg_backend_cuda_create(&o, &G, &err) != 0) {
        fprintf(stderr, "no CUDA backend: %s\n", err.msg);
        return 2;
    }
    if (!G->i.sample || !G->i.alloc_host || !G->i.free_host || !G->i.upload_async || !G->i.upload_done) {
        fprintf(stderr, "optional slots missing\n");
        return 1;
    }
    /* 100 and 33: blocks of a forced cluster of 8 (LG_SAMPLE_CLUSTER=8) with no ids */
    const int vocabs[] = {32000, 151936, 49152, 1000, 100, 33};
    const int batches[] = {1, 2, 7, 16, 33, 64, 64, 64};
    for (int v = 0; v < 6; v++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            test_sample(G, vocabs[v], batches[b]);
    for (int v = 0; v < 4; v++) {
        test_penalties(G, vocabs[v], 1);
        test_penalties(G, vocabs[v], 33);
    }
    for (int v = 0; v < 6; v++) {
        test_logprobs(G, vocabs[v], 1);
        test_logprobs(G, vocabs[v], 33);
    }
    test_logprobs(G, 32000, 64);
    const int tkinds[] = {0, 8, 1}; /* smooth, llm-like, tied */
    for (int k = 0; k < 3; k++) {
        time_configs(G, 151936, 1, tkinds[k]);
        time_configs(G, 151936, 16, tkinds[k]);
        time_configs(G, 151936, 64, tkinds[k]);
        time_configs(G, 151936, 128, tkinds[k]);
        time_configs(G, 32000, 1, tkinds[k]);
    }
    test_uploads(G);
    lg_backend_free(G);
    /* a second backend after the first is gone (the ring table is reused) */
    CHECK(lg_backend_cuda_create(&o, &G, &err) == 0, "re-create: %s", err.msg);
    lg_backend_free(G);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
