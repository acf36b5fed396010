/*
 * sampling.h — choosing the next token from logits, on the host.
 *
 * Order of operations (as HF transformers' and vLLM's samplers apply them):
 * temperature 0 => greedy (argmax, lowest id on ties). Otherwise logits /
 * temperature, then top-k, then top-p (nucleus, smallest set whose
 * probability mass >= top_p), then min-p (drop tokens whose probability is
 * below min_p * max probability), then draw from the renormalised
 * distribution with the request's own RNG (xoshiro256**, seeded from `seed`),
 * so the same seed gives the same output regardless of batch composition.
 *
 * Stop conditions (stop token ids, stop strings, max tokens) live in
 * lg_stop_* below; the engine applies them after each sampled token.
 */
#ifndef LG_SAMPLING_H
#define LG_SAMPLING_H

#include "common.h"

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
/* Picks a token from logits[n_vocab] (not modified). */
int32_t lg_sampler_sample(lg_sampler *s, const float *logits);

/* Greedy helper usable without a sampler. */
int32_t lg_argmax(const float *logits, int n);

#endif
