/*
 * cpu_fp8act.h — the W8A8 rounding of activations to e4m3 that the CPU
 * matmul applies before it multiplies by an F8_A8, F8_A8S or F8_A8G weight
 * (backend.h, the comment above lg_qtype, states the semantics; this is
 * that comment as code). For one activation row x of K floats:
 *
 *   F8_A8   one group, the whole row:  s = amax(|x|) / 448
 *   F8_A8S  a > 0 (static):            s = a
 *           a < 0 (dynamic, bounded):  s = min(amax(|x|), -a) / 448
 *   F8_A8G  groups of 128 elements of K (the last one holds K % 128 when
 *           that is not 0):            s_g = amax(|x[g*128 ..]|) / 448
 *   code[k] = e4m3(x[k] / s)   (f32 division, then lg_f32_to_e4m3: nearest
 *             even, saturating to +-448, which is the static form's clamp)
 *   x~[k]   = s * e4m3_value(code[k])   (f32 product); s = 0: code 0, x~ = 0
 *             (e4m3_value: lg_e4m3_value below, the same floats as lg_e4m3_to_f32)
 *
 * Every step is one IEEE f32 operation, so the codes are exactly those of
 * numpy's float32 arithmetic followed by ml_dtypes.float8_e4m3fn (the
 * tests' reference). amax over NaN-free rows; a NaN element stays NaN.
 * Pure functions of their arguments, callable from any thread.
 */
#ifndef LG_CPU_FP8ACT_H
#define LG_CPU_FP8ACT_H

#include "engine/backend/backend.h"

#include <math.h>
#include <string.h>

/* e4m3 byte v to f32: lg_e4m3_to_f32's value (engine/base), without its libm call: the magnitude
 * bits shifted into an f32 with the exponent rebased (+120), subnormals as m * 2^-9. */
static inline float lg_e4m3_value(uint8_t v)
{
    const uint32_t mag = v & 0x7Fu, bits = (mag << 20) + (120u << 23);
    float r;
    memcpy(&r, &bits, 4);
    if (mag < 8)
        r = (float)mag * 0x1p-9f;
    if (mag == 0x7F)
        r = NAN;
    return (v & 0x80) ? -r : r;
}

/* Scales a row of K elements gets under layout q: ceil(K / 128) for F8_A8G, else 1. */
int64_t lg_fp8act_groups(lg_qtype q, int64_t K);

/* code [K] (may be NULL), scale [lg_fp8act_groups(q, K)] (may be NULL), xr [K] x~ (may be NULL).
 * a: F8_A8S's activation scale (ignored for the other layouts). q must be lg_qtype_is_w8a8. */
void lg_fp8act_row(lg_qtype q, float a, const float *x, int64_t K, uint8_t *code, float *scale, float *xr);

#endif
