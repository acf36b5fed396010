/*
 * cpu_quant_kscale.h — the sub-block scales of the K-quants, shared by the
 * portable kernels (cpu_quant_c.c) and the x86 template (cpu_quant_x86.h):
 * Q4_K and Q5_K pack 8 6-bit scales and 8 6-bit mins in 12 bytes (ggml's
 * get_scale_min_k4), Q3_K 16 6-bit scales (stored + 32) in 12 bytes.
 */
#ifndef LG_CPU_QUANT_KSCALE_H
#define LG_CPU_QUANT_KSCALE_H

#include <stdint.h>
#include <string.h>

/* scale and min of 32-element group j < 8 */
static inline void lg_kscale_min_k4(int j, const uint8_t *q, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* Q3_K: the 16 signed scales (already minus 32) of its 12 scale bytes */
static inline void lg_kscale_q3(const uint8_t *scales12, int sc[16])
{
    uint32_t aux[4];
    memcpy(aux, scales12, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    const int8_t *s6 = (const int8_t *)aux;
    for (int g = 0; g < 16; g++) sc[g] = s6[g] - 32;
}

#endif
