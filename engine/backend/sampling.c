/*
 * sampling.c — host-side next-token sampling: greedy, temperature, top-k,
 * top-p, min-p, and the per-request xoshiro256** RNG.
 *
 * Workload: one call per generated token per request over the whole vocab
 * (32k-152k logits), so the hot path is O(n_vocab) and never sorts the vocab:
 *   1. candidates = tokens whose logit is finite (-inf and NaN never win)
 *   2. top-k: nth_element to find the k-th largest logit, keep logit >= it
 *      (ties at the boundary kept, as HF's TopKLogitsWarper does)
 *   3. W_i = lg_sample_weight (fixed point, sampling_weight.h), Z = sum W
 *   4. top-p: the smallest prefix, by (logit desc, id asc), with sum W >=
 *      top_p * Z; a one-pass histogram of the scaled distance below the max
 *      bounds the prefix, so only the tokens near the top are sorted
 *   5. min-p: keep W_i >= min_p * 2^31 (that is p_i >= min_p * p_max)
 *   6. the kept tokens in id order (a filtered pass over the logits when 2 or
 *      4 reordered the scratch), then the inverse-CDF draw of sampling.h
 * Every filter keeps at least the most likely token. The result depends only on
 * logits, params and u: batch composition can't change it, and the device
 * sampler (kernels/sample.cu) computes the same token from the same u.
 *
 * Ownership: lg_sampler owns its scratch (sized to n_vocab once); logits are
 * borrowed for the duration of the call and never modified.
 */
#include "engine/backend/sampling.h"

#include "engine/backend/backend.h" /* lg_logprob_row */

#include "engine/backend/sampling_weight.h"

#include <math.h>
#include <stdlib.h>

/* ---- RNG: xoshiro256** seeded by splitmix64 (Blackman & Vigna) ---------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lg_rng_seed(lg_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lg_rng_next(lg_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lg_rng_uniform(lg_rng *r) { return (double)(lg_rng_next(r) >> 11) * 0x1.0p-53; }

/* ---- params / sampler ------------------------------------------------------ */

void lg_sampling_params_default(lg_sampling_params *p)
{
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->seed = 0;
}

typedef struct lg_cand {
    float l;    /* the raw logit (finite) */
    uint32_t w; /* lg_sample_weight, filled at step 3 */
    int32_t id;
} lg_cand;

struct lg_sampler {
    int n_vocab;
    lg_sampling_params p;
    lg_rng rng;
    lg_cand *c; /* [n_vocab] candidate scratch */
};

lg_sampler *lg_sampler_new(int n_vocab, const lg_sampling_params *p)
{
    if (n_vocab <= 0)
        return NULL;
    lg_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    if (p)
        s->p = *p;
    else
        lg_sampling_params_default(&s->p);
    lg_rng_seed(&s->rng, s->p.seed);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) {
        lg_sampler_free(s);
        return NULL;
    }
    return s;
}

void lg_sampler_free(lg_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s);
}

int32_t lg_argmax(const float *logits, int n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (logits[i] > bv) { /* strict: lowest id wins ties; NaN never compares greater */
            bv = logits[i];
            best = i;
        }
    }
    return best;
}

/* Order: larger logit first, then lower id (a strict total order). */
static inline bool cand_before(lg_cand a, lg_cand b) { return a.l > b.l || (a.l == b.l && a.id < b.id); }

static int cand_cmp(const void *pa, const void *pb)
{
    lg_cand a = *(const lg_cand *)pa, b = *(const lg_cand *)pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Rearranges c[0..n) so c[k] is the element that would be there if sorted by
 * cand_before, with all earlier ones before it (nth_element). */
static void cand_select(lg_cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    uint32_t h = 0x9e3779b9u;
    while (lo < hi) {
        h = h * 1664525u + 1013904223u; /* deterministic pseudo-random pivot */
        lg_cand piv = c[lo + (int)(h % (uint32_t)(hi - lo + 1))];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_before(c[i], piv)) i++;
            while (cand_before(piv, c[j])) j--;
            if (i <= j) {
                lg_cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return;
    }
}

/* Histogram bucket of a logit for top_p_prefix: 8 buckets per unit of scaled
 * distance below the max. Only monotonicity matters (a larger logit never
 * lands in a later bucket), not exactness. */
static inline int top_p_bucket(float l, float lmax, float inv_t)
{
    enum { NB = 256 };
    float d = l - lmax;
    if (d == 0.0f)
        return 0;
    float y = -(d * inv_t) * 8.0f;
    return y < (float)(NB - 1) ? (int)y : NB - 1;
}

/* Length of the smallest (logit desc, id asc) prefix of c[0..n) whose mass
 * (sum of w) reaches target. Reorders c so that prefix comes first, sorted.
 * One pass buckets the candidates by distance below the max logit; walking
 * buckets from the top finds the last bucket B the prefix needs; only the
 * candidates of buckets <= B are gathered and sorted. */
static int top_p_prefix(lg_cand *c, int n, float lmax, float inv_t, double target)
{
    enum { NB = 256 };
    uint64_t mass[NB] = {0};
    int cnt[NB] = {0};
    for (int i = 0; i < n; i++) {
        int b = top_p_bucket(c[i].l, lmax, inv_t);
        mass[b] += c[i].w;
        cnt[b]++;
    }
    uint64_t cum = 0;
    int last = NB - 1, m = 0;
    for (int b = 0; b < NB; b++) {
        cum += mass[b];
        m += cnt[b];
        if ((double)cum >= target) {
            last = b;
            break;
        }
    }
    if (last == NB - 1) {
        m = n;
    } else {
        int j = 0;
        for (int i = 0; i < n; i++) {
            if (top_p_bucket(c[i].l, lmax, inv_t) <= last) {
                lg_cand t = c[j];
                c[j] = c[i];
                c[i] = t;
                j++;
            }
        }
        m = j;
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
    cum = 0;
    for (int i = 0; i < m; i++) {
        cum += c[i].w;
        if ((double)cum >= target)
            return i + 1;
    }
    return m; /* unreachable: sums are exact and target < Z */
}

double lg_sampler_next_u(lg_sampler *s) { return (double)(lg_rng_next(&s->rng) >> 40) * 0x1.0p-24; }

int32_t lg_sampler_sample(lg_sampler *s, const float *logits)
{
    return lg_sampler_sample_u(s, logits, lg_sampler_next_u(s));
}

int32_t lg_sampler_sample_u(lg_sampler *s, const float *logits, double u)
{
    const lg_sampling_params *p = &s->p;
    int nv = s->n_vocab;
    if (!(p->temperature > 0.0f))
        return lg_argmax(logits, nv);
    float inv_t = 1.0f / p->temperature;
    u = lg_sample_clamp_u(u);

    /* 1. candidates, in id order; +inf logits win outright (the lowest id) */
    lg_cand *c = s->c;
    int n = 0;
    float lmax = -INFINITY;
    for (int i = 0; i < nv; i++) {
        float l = logits[i];
        if (l > -INFINITY && l < INFINITY) {
            c[n].l = l;
            c[n].id = i;
            n++;
            lmax = l > lmax ? l : lmax;
        } else if (l == INFINITY) {
            return i;
        }
    }
    if (n == 0)
        return lg_argmax(logits, nv);
    bool id_order = true;

    /* 2. top-k (ties with the k-th value kept) */
    bool has_k = p->top_k > 0 && p->top_k < n;
    float thr_k = -INFINITY;
    if (has_k) {
        cand_select(c, n, p->top_k - 1);
        thr_k = c[p->top_k - 1].l;
        int m = p->top_k;
        for (int i = p->top_k; i < n; i++)
            if (c[i].l >= thr_k)
                c[m++] = c[i];
        n = m;
        id_order = false;
    }

    /* 3. weights */
    uint64_t z = 0;
    for (int i = 0; i < n; i++) {
        c[i].w = lg_sample_weight(c[i].l, lmax, inv_t);
        z += c[i].w;
    }

    /* 4. top-p: the prefix ends at (thr_p, id_p) in (logit desc, id asc) order */
    bool has_p = p->top_p < 1.0f && n > 1;
    float thr_p = 0.0f;
    int32_t id_p = 0;
    if (has_p) {
        double target = p->top_p > 0.0f ? (double)p->top_p * (double)z : 0.0;
        int m = top_p_prefix(c, n, lmax, inv_t, target);
        thr_p = c[m - 1].l;
        id_p = c[m - 1].id;
        id_order = false;
    }

    /* 5. min-p, with the kept tokens back in id order */
    bool has_m = p->min_p > 0.0f;
    double min_w = lg_sample_minp_w(p->min_p);
    if (id_order) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (!has_m || (double)c[i].w >= min_w || c[i].l == lmax)
                c[m++] = c[i];
        n = m;
    } else { /* the same predicate kernels/sample.cu evaluates per token */
        n = 0;
        for (int i = 0; i < nv; i++) {
            float l = logits[i];
            if (!(l > -INFINITY && l < INFINITY))
                continue;
            if (has_k && !(l >= thr_k))
                continue;
            if (has_p && !(l > thr_p || (l == thr_p && i <= id_p)))
                continue;
            uint32_t w = lg_sample_weight(l, lmax, inv_t);
            if (has_m && !((double)w >= min_w || l == lmax))
                continue;
            c[n].l = l;
            c[n].w = w;
            c[n].id = i;
            n++;
        }
    }

    /* 6. draw: the first token in id order whose cumulative weight exceeds u * Z' */
    z = 0;
    for (int i = 0; i < n; i++)
        z += c[i].w;
    double target = u * (double)z;
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].w;
        if ((double)cum > target)
            return c[i].id;
    }
    return c[n - 1].id; /* unreachable: Z' >= 2^31 and u <= 1 - 2^-24 */
}

void lg_logprobs(const float *lg, int V, int32_t tok, int n_top, lg_logprob_row *o)
{
    if (n_top > LG_LOGPROB_TOP)
        n_top = LG_LOGPROB_TOP;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (lg[i] > mx) mx = lg[i];
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)lg[i] - mx);
    double lz = mx + log(z);
    o->logprob = tok >= 0 && tok < V ? (float)((double)lg[tok] - lz) : NAN;
    o->n_top = 0;
    for (int i = 0; i < V && n_top > 0; i++) {
        float v = lg[i];
        if (v != v)
            continue;
        if (o->n_top == n_top && !(v > o->top_logprobs[n_top - 1]))
            continue;
        int k = o->n_top < n_top ? o->n_top++ : n_top - 1;
        while (k > 0 && v > o->top_logprobs[k - 1]) { /* ties keep the lower id first */
            o->top_logprobs[k] = o->top_logprobs[k - 1];
            o->top_ids[k] = o->top_ids[k - 1];
            k--;
        }
        o->top_logprobs[k] = v;
        o->top_ids[k] = i;
    }
    for (int k = 0; k < o->n_top; k++) o->top_logprobs[k] = (float)((double)o->top_logprobs[k] - lz);
}
