/*
 * test_sampling.c — lg_sampler against an independent double-precision
 * reference of the filtered, renormalised distribution.
 *
 * The reference sorts the whole vocab (simple and obviously right), applies
 * temperature -> top-k (ties kept) -> top-p -> min-p, and returns exact
 * probabilities. The statistical tests draw 200k samples and require
 * max |freq - p| < 0.006 (about 5 sigma; every wrong-filter variant we tried
 * moves some probability by > 0.02) and zero draws of excluded tokens.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/sampling.h"
#include "engine/backend/sampling_weight.h"
#include "tests/unit/test.h"

typedef struct ref_item {
    double l;
    int id;
} ref_item;

static int ref_cmp(const void *a, const void *b)
{
    const ref_item *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

/* Exact distribution after the filters; prob[n] out. */
static void reference(const float *logits, int n, const lg_sampling_params *p, double *prob)
{
    ref_item *it = malloc(sizeof *it * n);
    int m = 0;
    for (int i = 0; i < n; i++) {
        prob[i] = 0;
        if (isfinite(logits[i]))
            it[m++] = (ref_item){(double)logits[i] / (double)p->temperature, i};
    }
    qsort(it, m, sizeof *it, ref_cmp);
    int keep = m;
    if (p->top_k > 0 && p->top_k < m) {
        double kth = it[p->top_k - 1].l;
        keep = p->top_k;
        while (keep < m && it[keep].l >= kth)
            keep++;
    }
    double z = 0;
    for (int i = 0; i < keep; i++)
        z += exp(it[i].l - it[0].l);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int k = 0;
        while (k < keep) {
            cum += exp(it[k].l - it[0].l) / z;
            k++;
            if (cum >= p->top_p)
                break;
        }
        keep = k;
    }
    double z2 = 0;
    for (int i = 0; i < keep; i++) {
        double pr = exp(it[i].l - it[0].l); /* relative to the max */
        if (p->min_p > 0 && pr < p->min_p)
            continue;
        prob[it[i].id] = pr;
        z2 += pr;
    }
    for (int i = 0; i < n; i++)
        prob[i] /= z2;
    free(it);
}

/* Draws `draws` samples; returns max |freq - p|; counts draws of p == 0 tokens. */
static double empirical_gap(const float *logits, int n, const lg_sampling_params *p, int draws, int *n_excluded)
{
    double *prob = malloc(sizeof *prob * n);
    long *cnt = calloc(n, sizeof *cnt);
    reference(logits, n, p, prob);
    lg_sampler *s = lg_sampler_new(n, p);
    for (int i = 0; i < draws; i++) {
        int32_t t = lg_sampler_sample(s, logits);
        if (t >= 0 && t < n)
            cnt[t]++;
    }
    double gap = 0;
    *n_excluded = 0;
    for (int i = 0; i < n; i++) {
        double f = (double)cnt[i] / draws;
        if (fabs(f - prob[i]) > gap)
            gap = fabs(f - prob[i]);
        if (prob[i] == 0 && cnt[i])
            *n_excluded += (int)cnt[i];
    }
    lg_sampler_free(s);
    free(prob);
    free(cnt);
    return gap;
}

static lg_sampling_params params(float t, int k, float tp, float mp, uint64_t seed)
{
    lg_sampling_params p;
    lg_sampling_params_default(&p);
    p.temperature = t;
    p.top_k = k;
    p.top_p = tp;
    p.min_p = mp;
    p.seed = seed;
    return p;
}

static void test_rng(void)
{
    lg_rng a, b;
    lg_rng_seed(&a, 0);
    CHECK(a.s[0] == 0xe220a8397b1dcdafull); /* splitmix64(0), first output */
    lg_rng_seed(&a, 42);
    lg_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= lg_rng_next(&a) == lg_rng_next(&b);
    CHECK(same);
    lg_rng_seed(&b, 43);
    CHECK(lg_rng_next(&a) != lg_rng_next(&b));
    double lo = 1, hi = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = lg_rng_uniform(&a);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    CHECK(lo >= 0 && hi < 1);
    CHECK(fabs(sum / 100000 - 0.5) < 0.005);
}

static void test_greedy(void)
{
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.9f};
    CHECK(lg_argmax(l, 6) == 1); /* tie 1 vs 3: lowest id; NaN ignored */
    lg_sampling_params p = params(0, 0, 1, 0, 7);
    lg_sampler *s = lg_sampler_new(6, &p);
    CHECK(lg_sampler_sample(s, l) == 1);
    lg_sampler_free(s);
    float ninf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(lg_argmax(ninf, 4) == 0);
    lg_sampler_free(NULL);
}

static void test_same_seed_same_sequence(void)
{
    enum { N = 1000 };
    float *l = malloc(sizeof *l * N);
    lg_rng r;
    lg_rng_seed(&r, 5);
    for (int i = 0; i < N; i++)
        l[i] = (float)(lg_rng_uniform(&r) * 6.0);
    lg_sampling_params p = params(0.8f, 50, 0.9f, 0.01f, 1234);
    lg_sampler *a = lg_sampler_new(N, &p), *b = lg_sampler_new(N, &p);
    int same = 1, distinct = 0, prev = -1;
    for (int i = 0; i < 500; i++) {
        int32_t x = lg_sampler_sample(a, l), y = lg_sampler_sample(b, l);
        same &= x == y;
        distinct += x != prev;
        prev = x;
    }
    CHECK(same);
    CHECK(distinct > 100); /* it does sample */
    lg_sampler_free(a);
    lg_sampler_free(b);
    free(l);
}

static void test_top_k_1_is_greedy(void)
{
    enum { N = 5000 };
    float *l = malloc(sizeof *l * N);
    lg_rng r;
    lg_rng_seed(&r, 9);
    lg_sampling_params p = params(1.5f, 1, 1, 0, 3);
    lg_sampler *s = lg_sampler_new(N, &p);
    int ok = 1;
    for (int t = 0; t < 50; t++) {
        for (int i = 0; i < N; i++)
            l[i] = (float)(lg_rng_uniform(&r) * 10.0 - 5.0);
        ok &= lg_sampler_sample(s, l) == lg_argmax(l, N);
    }
    CHECK(ok);
    lg_sampler_free(s);
    free(l);
}

static void test_statistics(void)
{
    /* distinct values so each filter boundary is unambiguous */
    const float l[10] = {2.0f, 1.5f, 1.2f, 0.9f, 0.4f, 0.0f, -0.5f, -1.0f, -2.0f, -3.0f};
    const float shuffled[10] = {-0.5f, 1.2f, -3.0f, 2.0f, 0.0f, 0.9f, -2.0f, 1.5f, 0.4f, -1.0f};
    struct {
        lg_sampling_params p;
        const char *what;
    } cases[] = {
        {params(1.0f, 0, 1, 0, 1), "plain"},
        {params(0.7f, 0, 1, 0, 2), "temperature 0.7"},
        {params(2.0f, 0, 1, 0, 3), "temperature 2"},
        {params(1.0f, 4, 1, 0, 4), "top-k 4"},
        {params(1.0f, 0, 0.8f, 0, 5), "top-p 0.8"},
        {params(1.0f, 0, 0.5f, 0, 6), "top-p 0.5"},
        {params(1.0f, 0, 1, 0.2f, 7), "min-p 0.2"},
        {params(0.8f, 6, 0.9f, 0.1f, 8), "all filters"},
        {params(1.3f, 5, 0.95f, 0, 9), "temp + top-k + top-p"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int sh = 0; sh < 2; sh++) {
            int excl;
            double gap = empirical_gap(sh ? shuffled : l, 10, &cases[c].p, 200000, &excl);
            CHECK_MSG(gap < 0.006 && excl == 0, "%s%s: max gap %.4f, %d excluded draws", cases[c].what,
                      sh ? " (shuffled)" : "", gap, excl);
        }
    }
}

/* The test itself must be able to fail: a reference with a different filter
 * differs from the true one by far more than the threshold. */
static void test_threshold_discriminates(void)
{
    const float l[10] = {2.0f, 1.5f, 1.2f, 0.9f, 0.4f, 0.0f, -0.5f, -1.0f, -2.0f, -3.0f};
    double a[10], b[10];
    struct { lg_sampling_params x, y; } pairs[] = {
        {params(1, 4, 1, 0, 0), params(1, 3, 1, 0, 0)},
        {params(1, 4, 1, 0, 0), params(1, 5, 1, 0, 0)},
        {params(1, 0, 0.8f, 0, 0), params(1, 0, 1, 0, 0)},
        {params(1, 0, 1, 0.2f, 0), params(1, 0, 1, 0, 0)},
        {params(0.7f, 0, 1, 0, 0), params(1, 0, 1, 0, 0)},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        reference(l, 10, &pairs[i].x, a);
        reference(l, 10, &pairs[i].y, b);
        double g = 0;
        for (int j = 0; j < 10; j++)
            g = fmax(g, fabs(a[j] - b[j]));
        CHECK_MSG(g > 0.02, "pair %zu differs by only %.4f", i, g);
    }
}

static void test_edges(void)
{
    /* all -inf except one: always that one, whatever the filters */
    float l[8];
    for (int i = 0; i < 8; i++)
        l[i] = -INFINITY;
    l[5] = -3.0f;
    lg_sampling_params ps[] = {params(1, 0, 1, 0, 1), params(0.3f, 3, 0.2f, 0.5f, 2), params(5, 1, 1, 0, 3),
                               params(1, 0, 0.0001f, 0, 4)};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        lg_sampler *s = lg_sampler_new(8, &ps[i]);
        int ok = 1;
        for (int t = 0; t < 200; t++)
            ok &= lg_sampler_sample(s, l) == 5;
        CHECK(ok);
        lg_sampler_free(s);
    }
    /* NaN logits are never drawn */
    float nanl[4] = {NAN, 0.0f, NAN, 0.0f};
    lg_sampling_params p = params(1, 0, 1, 0, 11);
    lg_sampler *s = lg_sampler_new(4, &p);
    int ok = 1;
    for (int t = 0; t < 1000; t++) {
        int32_t x = lg_sampler_sample(s, nanl);
        ok &= x == 1 || x == 3;
    }
    CHECK(ok);
    lg_sampler_free(s);
    /* tiny top-p keeps exactly the most likely token */
    float tl[5] = {0.1f, 0.3f, 0.29f, -1.0f, 0.3f};
    p = params(1, 0, 1e-6f, 0, 12);
    s = lg_sampler_new(5, &p);
    ok = 1;
    for (int t = 0; t < 1000; t++)
        ok &= lg_sampler_sample(s, tl) == 1; /* tie 1 vs 4: lowest id ranks first */
    CHECK(ok);
    lg_sampler_free(s);
    /* top-k keeps ties with the k-th value: k=2 over {1,1,1,0} keeps three */
    float kl[4] = {1.0f, 1.0f, 1.0f, 0.0f};
    p = params(1, 2, 1, 0, 13);
    int excl;
    double gap = empirical_gap(kl, 4, &p, 60000, &excl);
    CHECK_MSG(gap < 0.01 && excl == 0, "top-k ties: gap %.4f excl %d", gap, excl);
    /* min_p = 1 keeps the max (and its ties) only */
    p = params(1, 0, 1, 1.0f, 14);
    s = lg_sampler_new(5, &p);
    ok = 1;
    for (int t = 0; t < 1000; t++) {
        int32_t x = lg_sampler_sample(s, tl);
        ok &= x == 1 || x == 4;
    }
    CHECK(ok);
    lg_sampler_free(s);
    /* very small temperature: no overflow to inf/NaN, behaves like greedy */
    float big[3] = {3.0e38f, -3.0e38f, 1.0f};
    p = params(1e-3f, 0, 1, 0, 15);
    s = lg_sampler_new(3, &p);
    CHECK(lg_sampler_sample(s, big) == 0);
    lg_sampler_free(s);
    CHECK(lg_sampler_new(0, &p) == NULL);
}

/* Large vocab: draws stay inside the reference's kept set, and it's fast. */
static void test_large_vocab(void)
{
    enum { N = 152064 };
    float *l = malloc(sizeof *l * N);
    double *prob = malloc(sizeof *prob * N);
    lg_rng r;
    lg_rng_seed(&r, 77);
    for (int i = 0; i < N; i++) /* Gumbel-ish spread like real logits */
        l[i] = (float)(-log(-log(lg_rng_uniform(&r) * 0.999 + 0.0005)) * 2.0);
    lg_sampling_params ps[] = {params(0.8f, 0, 0.9f, 0, 1), params(1.0f, 40, 0.95f, 0.05f, 2),
                               params(1.0f, 0, 1, 0.1f, 3)};
    for (size_t c = 0; c < sizeof ps / sizeof ps[0]; c++) {
        reference(l, N, &ps[c], prob);
        lg_sampler *s = lg_sampler_new(N, &ps[c]);
        int bad = 0, draws = 200;
        double t0 = lg_now();
        for (int i = 0; i < draws; i++) {
            int32_t x = lg_sampler_sample(s, l);
            bad += !(x >= 0 && x < N && prob[x] > 0);
        }
        double ms = (lg_now() - t0) * 1e3 / draws;
        CHECK_MSG(bad == 0, "case %zu: %d draws outside the kept set", c, bad);
        printf("vocab %d case %zu: %.3f ms/sample\n", N, c, ms);
        lg_sampler_free(s);
    }
    free(l);
    free(prob);
}


/* lg_sampler_sample is exactly sample_u(next_u): same seed, same tokens. */
static void test_sample_is_sample_u_of_next_u(void)
{
    enum { N = 3000 };
    float *l = malloc(sizeof *l * N);
    lg_rng r;
    lg_rng_seed(&r, 21);
    for (int i = 0; i < N; i++)
        l[i] = (float)(lg_rng_uniform(&r) * 8.0 - 4.0);
    lg_sampling_params ps[] = {params(0.9f, 0, 1, 0, 1), params(1.0f, 40, 0.9f, 0.02f, 2), params(0, 0, 1, 0, 3),
                               params(1.2f, 0, 0.7f, 0, 4)};
    for (size_t c = 0; c < sizeof ps / sizeof ps[0]; c++) {
        lg_sampler *a = lg_sampler_new(N, &ps[c]), *b = lg_sampler_new(N, &ps[c]);
        int same = 1, exact_f = 1;
        for (int t = 0; t < 300; t++) {
            double u = lg_sampler_next_u(b);
            exact_f &= (double)(float)u == u && u >= 0 && u < 1 && u * 0x1p24 == floor(u * 0x1p24);
            same &= lg_sampler_sample(a, l) == lg_sampler_sample_u(b, l, u);
        }
        CHECK_MSG(same && exact_f, "case %zu: same %d, u exact in float %d", c, same, exact_f);
        lg_sampler_free(a);
        lg_sampler_free(b);
    }
    free(l);
}

/* The draw walks the kept tokens in id order: with equal weights, u picks
 * the floor(u * n)-th kept token; u = 0 the lowest kept id. */
static void test_draw_order(void)
{
    float l[8] = {1.0f, -INFINITY, 1.0f, 1.0f, NAN, 1.0f, -50.0f, 0.99999f};
    lg_sampling_params p = params(1, 4, 1, 0, 0); /* keeps ids 0, 2, 3, 5 (ties at the 4th) */
    lg_sampler *s = lg_sampler_new(8, &p);
    const int32_t want[4] = {0, 2, 3, 5};
    int ok = 1;
    for (int q = 0; q < 4; q++) {
        ok &= lg_sampler_sample_u(s, l, q * 0.25 + 0.01) == want[q];
        ok &= lg_sampler_sample_u(s, l, q * 0.25 + 0.24) == want[q];
    }
    ok &= lg_sampler_sample_u(s, l, 0.0) == 0 && lg_sampler_sample_u(s, l, 0.9999999) == 5;
    ok &= lg_sampler_sample_u(s, l, -1.0) == 0 && lg_sampler_sample_u(s, l, 1.0) == 5 && lg_sampler_sample_u(s, l, NAN) == 0;
    CHECK(ok);
    lg_sampler_free(s);
}

/* ---- the rules of sampling.h written as plainly as possible (sort all) ---- */
typedef struct spec_item {
    float l;
    int id;
} spec_item;
static int spec_cmp(const void *a, const void *b)
{
    const spec_item *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}
static int32_t spec_sample(const float *lg, int n, const lg_sampling_params *p, double u)
{
    if (!(p->temperature > 0))
        return lg_argmax(lg, n);
    for (int i = 0; i < n; i++)
        if (lg[i] == INFINITY)
            return i;
    float inv_t = 1.0f / p->temperature;
    spec_item *it = malloc(sizeof *it * n);
    char *keep = calloc(n, 1);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(lg[i]))
            it[m++] = (spec_item){lg[i], i};
    if (m == 0) {
        free(it);
        free(keep);
        return lg_argmax(lg, n);
    }
    qsort(it, m, sizeof *it, spec_cmp);
    float lmax = it[0].l;
    int nk = m;
    if (p->top_k > 0 && p->top_k < m)
        for (nk = p->top_k; nk < m && it[nk].l >= it[p->top_k - 1].l; nk++) {}
    if (p->top_p < 1.0f && nk > 1) {
        uint64_t z = 0, cum = 0;
        for (int i = 0; i < nk; i++)
            z += lg_sample_weight(it[i].l, lmax, inv_t);
        double target = p->top_p > 0 ? (double)p->top_p * (double)z : 0.0;
        int j = 0;
        while (j < nk) {
            cum += lg_sample_weight(it[j].l, lmax, inv_t);
            j++;
            if ((double)cum >= target)
                break;
        }
        nk = j;
    }
    for (int i = 0; i < nk; i++) {
        uint32_t w = lg_sample_weight(it[i].l, lmax, inv_t);
        if (!(p->min_p > 0) || (double)w >= (double)p->min_p * 2147483648.0 || it[i].l == lmax)
            keep[it[i].id] = 1;
    }
    uint64_t z = 0, cum = 0;
    for (int i = 0; i < n; i++)
        if (keep[i])
            z += lg_sample_weight(lg[i], lmax, inv_t);
    double target = lg_sample_clamp_u(u) * (double)z;
    int32_t got = -1;
    for (int i = 0; i < n && got < 0; i++)
        if (keep[i] && (double)(cum += lg_sample_weight(lg[i], lmax, inv_t)) > target)
            got = i;
    free(it);
    free(keep);
    return got;
}

/* lg_sampler_sample_u == the plain statement of the rules, token for token,
 * on logits full of ties (quantised) and over every filter combination. */
static void test_sample_u_matches_rules(void)
{
    enum { N = 4000 };
    float *l = malloc(sizeof *l * N);
    lg_rng r;
    lg_rng_seed(&r, 31);
    int bad = 0, total = 0;
    for (int t = 0; t < 400; t++) {
        double q = t % 3 == 0 ? 0.25 : t % 3 == 1 ? 1.0 / 64 : 0; /* 0: no quantisation */
        double spread = 1.0 + lg_rng_uniform(&r) * 12.0;
        for (int i = 0; i < N; i++) {
            double v = (lg_rng_uniform(&r) * 2.0 - 1.0) * spread;
            l[i] = (float)(q > 0 ? floor(v / q) * q : v);
            if (lg_rng_next(&r) % 97 == 0)
                l[i] = lg_rng_next(&r) & 1 ? -INFINITY : NAN;
        }
        float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.6f};
        float tps[] = {1.0f, 0.9f, 0.5f, 0.05f, 0.0f};
        int tks[] = {0, 1, 5, 50, 700};
        float mps[] = {0.0f, 0.05f, 0.3f};
        lg_sampling_params p = params(temps[t % 5], tks[(t / 5) % 5], tps[(t / 25) % 5], mps[(t / 7) % 3], 0);
        lg_sampler *s = lg_sampler_new(N, &p);
        for (int k = 0; k < 20; k++) {
            double u = (double)(lg_rng_next(&r) >> 40) * 0x1.0p-24;
            int32_t a = lg_sampler_sample_u(s, l, u), b = spec_sample(l, N, &p, u);
            total++;
            if (a != b && bad++ < 5)
                fprintf(stderr, "case %d (T %g k %d p %g minp %g) u %.8f: sampler %d, rules %d\n", t, p.temperature,
                        p.top_k, p.top_p, p.min_p, u, a, b);
        }
        lg_sampler_free(s);
    }
    CHECK_MSG(bad == 0, "%d of %d draws differ from the rules", bad, total);
    free(l);
}

/* The device sampler (kernels/sample.cu) leaves tokens of weight 0 out of
 * its top-k and top-p histograms; that is exact only if {x : W(x) > 0} is an
 * up-set: no x with W(x) = 0 above one with W(x) > 0. Every float in
 * [-24, -16] (the cutoff, ~-21.49, lies there; below -24 W is 0 by rule),
 * and a sample above, where W >= 240. */
static void test_weight_zero_below_one_cutoff(void)
{
    uint32_t lo, hi;
    float f = -24.0f;
    memcpy(&lo, &f, 4);
    f = -16.0f;
    memcpy(&hi, &f, 4);
    long n = 0, zero_after_pos = 0, pos = 0;
    float cut = 0;
    for (uint32_t b = lo; b >= hi; b--) { /* negative floats: a smaller pattern is a larger value */
        float x;
        memcpy(&x, &b, 4);
        uint32_t w = lg_sample_weight(x, 0.0f, 1.0f);
        n++;
        if (w > 0 && !pos) {
            pos = 1;
            cut = x;
        }
        zero_after_pos += pos && w == 0;
    }
    CHECK_MSG(pos && zero_after_pos == 0 && cut > -21.6f && cut < -21.4f,
              "W = 0 above the first x with W > 0 (%ld of %ld floats in [-24, -16]; cutoff %g)", zero_after_pos, n,
              (double)cut);
    long bad = 0;
    for (uint32_t b = hi; b > 0x80000000u; b -= 4093) {
        float x;
        memcpy(&x, &b, 4);
        bad += lg_sample_weight(x, 0.0f, 1.0f) < 240;
    }
    CHECK_MSG(bad == 0, "%ld sampled x in (-16, 0) with W < 240", bad);
}

int main(void)
{
    test_weight_zero_below_one_cutoff();
    test_rng();
    test_greedy();
    test_same_seed_same_sequence();
    test_top_k_1_is_greedy();
    test_statistics();
    test_threshold_discriminates();
    test_edges();
    test_large_vocab();
    test_sample_is_sample_u_of_next_u();
    test_draw_order();
    test_sample_u_matches_rules();
    TEST_DONE();
}
