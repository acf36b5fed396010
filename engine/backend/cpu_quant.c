/*
 * cpu_quant.c — the choice among cpu_quant.h's kernel tables: the best one
 * that was built and that lg_cpu_isa_detect() says this machine runs.
 */
#include "engine/backend/cpu_quant.h"
#include "engine/backend/cpu_features.h"

const lg_qkern *lg_qkern_by_name(const char *isa)
{
    const lg_cpu_isa have = lg_cpu_isa_detect();
    if (!strcmp(isa, "c"))
        return lg_qkern_c();
    if (!strcmp(isa, "avx2"))
        return have >= LG_ISA_AVX2 ? lg_qkern_avx2() : NULL;
    if (!strcmp(isa, "avx512vnni"))
        return have >= LG_ISA_AVX512 ? lg_qkern_avx512() : NULL;
    return NULL;
}

const lg_qkern *lg_qkern_best(void)
{
    const lg_qkern *k = NULL;
    switch (lg_cpu_isa_detect()) {
    case LG_ISA_AVX512: k = lg_qkern_avx512(); if (k) break; /* fall through */
    case LG_ISA_AVX2: k = lg_qkern_avx2(); if (k) break;     /* fall through */
    case LG_ISA_C: k = lg_qkern_c(); break;
    }
    return k ? k : lg_qkern_c();
}
