/*
 * cpu_fp8act.c — W8A8 activation rounding to e4m3 (see cpu_fp8act.h for
 * the math). A plain loop per group: a row is K floats (a few thousand) and
 * the matmul it feeds costs N times more, so this stays scalar and obvious.
 */
#include "engine/backend/cpu_fp8act.h"

#include <math.h>

#define G 128 /* elements of an F8_A8G activation group (the layouts' groups of K) */

int64_t lg_fp8act_groups(lg_qtype q, int64_t K) { return q == LG_QF8_A8G ? (K + G - 1) / G : 1; }

static float amax_of(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t k = 0; k < n; k++) m = fmaxf(m, fabsf(x[k]));
    return m;
}

/* One group of n elements with scale s. */
static void round_group(float s, const float *x, int64_t n, uint8_t *code, float *xr)
{
    for (int64_t k = 0; k < n; k++) {
        const uint8_t c = s != 0.0f ? lg_f32_to_e4m3(x[k] / s) : 0;
        if (code)
            code[k] = c;
        if (xr)
            xr[k] = s != 0.0f ? s * lg_e4m3_value(c) : 0.0f;
    }
}

void lg_fp8act_row(lg_qtype q, float a, const float *x, int64_t K, uint8_t *code, float *scale, float *xr)
{
    const int64_t ng = lg_fp8act_groups(q, K), gs = q == LG_QF8_A8G ? G : K; /* elements a scale covers */
    for (int64_t g = 0; g < ng; g++) {
        const int64_t k0 = g * gs, n = K - k0 < gs ? K - k0 : gs;
        float s;
        if (q == LG_QF8_A8S && a > 0.0f)
            s = a;
        else if (q == LG_QF8_A8S)
            s = fminf(amax_of(x + k0, n), -a) / 448.0f;
        else
            s = amax_of(x + k0, n) / 448.0f;
        if (scale)
            scale[g] = s;
        round_group(s, x + k0, n, code ? code + k0 : NULL, xr ? xr + k0 : NULL);
    }
}
