/*
 * cpu_quant_avx2.c — cpu_quant.h's kernels for AVX2 + FMA + F16C (built with
 * those flags for this file only, CMakeLists.txt; used only where
 * cpu_features.c says the CPU and the OS run them). u8 x s8 products are
 * vpmaddubsw (pairs to int16; the unpacked quants are <= 128 and the
 * activations within +-127, so no pair saturates) then vpmaddwd by ones.
 * The kernels themselves are cpu_quant_x86.h.
 */
#include "engine/backend/cpu_quant.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline __m256i mul_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

#define QX_ISA "avx2"
#define QX_TABLE lg_qkern_avx2
#include "engine/backend/cpu_quant_x86.h"
#else
const lg_qkern *lg_qkern_avx2(void) { return NULL; }
#endif
