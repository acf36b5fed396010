/*
 * cpu_quant_avx512.c — cpu_quant.h's kernels for AVX-512 with VNNI (F, BW,
 * VL, DQ, VNNI; built with those flags for this file only, CMakeLists.txt;
 * used only where cpu_features.c says the CPU and the OS run them). u8 x s8
 * products are one vpdpbusd on 256-bit registers (AVX512VL): four products
 * summed into an int32 lane without intermediate saturation. A CPU with
 * AVX-512 but without VNNI runs the AVX2 set. The kernels themselves are
 * cpu_quant_x86.h, the 32-element layouts' dots replaced by the 512-bit
 * ones of cpu_quant_zmm.h.
 */
#include "engine/backend/cpu_quant.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline __m256i mul_u8s8(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

static void qz_install(lg_qkern *k);
#define QX_ISA "avx512vnni"
#define QX_TABLE lg_qkern_avx512
#define QX_INSTALL qz_install
#include "engine/backend/cpu_quant_x86.h"
#include "engine/backend/cpu_quant_zmm.h"
#else
const lg_qkern *lg_qkern_avx512(void) { return NULL; }
#endif
