/*
 * sampling.h — choosing the next token from logits, on the host.
 *
 * Order of operations (as HF transformers' and vLLM's samplers apply them):
 * temperature 0 => greedy (argmax, lowest id on ties, NaN never chosen).
 * Otherwise logits / temperature, then top-k, then top-p (nucleus, smallest
 * set whose probability mass >= top_p), then min-p (drop tokens whose
 * probability is below min_p * max probability), then one draw with a
 * uniform u from the request's own RNG (xoshiro256**, seeded from `seed`),
 * so the same seed gives the same output regardless of batch composition.
 *
 * The exact rules, which the device sampler (backend slot `sample`,
 * kernels/sample.cu) reproduces token for token given the same u:
 *   - a +inf logit wins outright (the lowest such id); NaN and -inf are never
 *     candidates; no candidate at all => lg_argmax (that is, id 0).
 *   - weights: W_i = lg_sample_weight(logit_i, lmax, 1.0f / temperature)
 *     (sampling_weight.h: exp((logit_i - lmax) / T) in 2^-31 fixed point),
 *     lmax = the largest finite logit; every sum below is an exact integer.
 *   - top-k (0 < k < n candidates): keep logit >= the k-th largest logit
 *     (ties with it kept). Orders use the raw logits (T > 0 is monotone).
 *   - top-p (top_p < 1): order the survivors by (logit desc, id asc); keep
 *     the shortest prefix whose sum W >= top_p * Z, where Z = sum W of the
 *     survivors and the product is one double multiply (top_p <= 0: just the
 *     first token). A tie group at the boundary is cut by id.
 *   - min-p (min_p > 0): keep W_i >= min_p * 2^31, or logit_i == lmax.
 *   - draw: Z' = sum W of the kept tokens, target = u * Z' (one double
 *     multiply, u clamped into [0, 1 - 2^-24]); walk the kept tokens in
 *     increasing id and take the first whose cumulative W exceeds target.
 * lg_sampler_next_u draws u as a multiple of 2^-24, so it is exact in a float
 * (lg_sample_row.u) and host and device see the same number.
 *
 * Stop conditions (stop token ids, stop strings, max tokens) live in
 * lg_stop_* below; the engine applies them after each sampled token.
 */
#ifndef LG_SAMPLING_H
#define LG_SAMPLING_H

#include "engine/base/common.h"

typedef struct lg_sampling_params {
    float temperature; /* 0 => greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
} lg_sampling_params;

void lg_sampling_params_default(lg_sampling_params *p); /* greedy, all filters off */

typedef struct lg_rng {
    uint64_t s[4];
} lg_rng;
void lg_rng_seed(lg_rng *r, uint64_t seed);
uint64_t lg_rng_next(lg_rng *r);
double lg_rng_uniform(lg_rng *r); /* [0, 1) */

/* Per-request scratch for sampling (sized to the vocab once). */
typedef struct lg_sampler lg_sampler;
lg_sampler *lg_sampler_new(int n_vocab, const lg_sampling_params *p);
void lg_sampler_free(lg_sampler *s); /* NULL is a no-op */
/* Picks a token from logits[n_vocab] (not modified):
 * exactly lg_sampler_sample_u(s, logits, lg_sampler_next_u(s)). Every call
 * consumes one uniform, greedy ones too. */
int32_t lg_sampler_sample(lg_sampler *s, const float *logits);
/* The request's next uniform in [0, 1), a multiple of 2^-24 (exact as float). */
double lg_sampler_next_u(lg_sampler *s);
/* Picks a token by the rules above with the given uniform; the sampler's RNG
 * is not touched (its scratch is). */
int32_t lg_sampler_sample_u(lg_sampler *s, const float *logits, double u);

/* Greedy helper usable without a sampler. */
int32_t lg_argmax(const float *logits, int n);

/* OpenAI's logprobs of a raw logits row[n_vocab] (the host's definition;
 * the device sampler's kernels/logprobs.cu follows it, backend.h
 * lg_logprob_row): L = max + log(sum exp(logit - max)) in double (max over
 * the non-NaN logits; NaN anywhere, +inf, or a row of -inf make L NaN);
 * o->logprob = logits[tok] - L; o->n_top (<= n_top <= LG_LOGPROB_TOP) best
 * logits by (logit desc, id asc), NaN skipped, each minus L. */
struct lg_logprob_row;
void lg_logprobs(const float *logits, int n_vocab, int32_t tok, int n_top, struct lg_logprob_row *o);

#endif
