/*
 * sampling_weight.h — the one piece of sampling arithmetic that the host
 * sampler (engine/backend/sampling.c) and the device sampler (kernels/sample.cu)
 * share, so that both compute bit-identical token weights.
 *
 * A token's weight is exp((logit - lmax) / temperature) in fixed point:
 *   W = floor(e * 2^31), an integer in [0, 2^31]; W = 2^31 exactly for
 *   logit == lmax; W = 0 below e ~ 4.7e-10 (such tokens are never drawn).
 * Sums of weights are then exact uint64 (at most 2^31 * n_vocab < 2^53, so
 * also exact as doubles): no summation order, thread count or reduction tree
 * can change a sampling decision.
 *
 * Determinism: every float operation below is one IEEE operation that both a
 * C compiler and nvcc perform identically: the products feed no additions
 * (so no FMA contraction can form), the polynomial uses explicit fmaf, and
 * rintf, the power-of-two scaling and the float->integer truncation are exact. The result is an
 * approximation of exp (about 2 ulp); what matters is that it is the same
 * function everywhere.
 */
#ifndef LG_SAMPLING_WEIGHT_H
#define LG_SAMPLING_WEIGHT_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LG_HD __host__ __device__
#else
#define LG_HD
#endif

#define LG_SAMPLE_W_ONE (1u << 31) /* weight of the most likely token */

/* Weight of a finite logit given the row's finite max logit lmax and
 * inv_t = 1.0f / temperature (inv_t > 0, possibly +inf). */
LG_HD static inline uint32_t lg_sample_weight(float logit, float lmax, float inv_t)
{
    float d = logit - lmax; /* <= 0, or -inf when the range overflows */
    if (d == 0.0f)
        return LG_SAMPLE_W_ONE; /* also with inv_t = inf, where d * inv_t is NaN */
    float x = d * inv_t;
    if (!(x > -24.0f))
        return 0; /* exp(-22) * 2^31 < 1 already */
    /* exp(x) = 2^k * exp(r), r = x - k ln2 (Cody-Waite split), |r| <= 0.35 */
    float k = rintf(x * 1.44269502f);
    float r = fmaf(-k, 0.693359375f, x);
    r = fmaf(-k, -2.12194440e-4f, r);
    float p = 1.98412698e-4f; /* Taylor to degree 7 (1/7!, ...): truncation < 6e-9 */
    p = fmaf(p, r, 1.38888889e-3f);
    p = fmaf(p, r, 8.33333333e-3f);
    p = fmaf(p, r, 4.16666667e-2f);
    p = fmaf(p, r, 1.66666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    union { uint32_t u; float f; } two_k; /* 2^(k + 31), k in [-35, 0]: exact scaling */
    two_k.u = (uint32_t)((int)k + 31 + 127) << 23;
    float w = p * two_k.f;
    return w < (float)LG_SAMPLE_W_ONE ? (uint32_t)w : LG_SAMPLE_W_ONE;
}

/* min-p keeps W >= this (p_i >= min_p * p_max); exact scaling by 2^31. */
LG_HD static inline double lg_sample_minp_w(float min_p) { return (double)min_p * 2147483648.0; }

/* The uniform as the samplers use it: clamped into [0, 1 - 2^-24] (NaN -> 0),
 * so the draw always lands on a token. */
LG_HD static inline double lg_sample_clamp_u(double u)
{
    if (!(u >= 0.0))
        return 0.0;
    return u < 0x1.fffffep-1 ? u : 0x1.fffffep-1;
}

#endif
