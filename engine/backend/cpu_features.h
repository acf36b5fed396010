/*
 * cpu_features.h — which x86 instruction sets this CPU has AND the OS has
 * enabled, for the CPU backend's run-time kernel choice (cpu_quant.h).
 *
 * cpuid says what the silicon implements; XCR0 (xgetbv) says which register
 * states the OS saves on a context switch. A set counts only when both say
 * yes: a VM can report AVX-512 (or AMX) in cpuid and leave it disabled in
 * XCR0, and then its instructions fault. Read once, cached.
 */
#ifndef LG_CPU_FEATURES_H
#define LG_CPU_FEATURES_H

typedef enum lg_cpu_isa {
    LG_ISA_C = 0,       /* portable C */
    LG_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C; XCR0 YMM state */
    LG_ISA_AVX512 = 2,  /* + AVX-512 F, BW, VL, DQ and VNNI; XCR0 opmask + ZMM state */
} lg_cpu_isa;

/* The best set usable here (LG_ISA_C off x86). */
lg_cpu_isa lg_cpu_isa_detect(void);
const char *lg_cpu_isa_name(lg_cpu_isa isa); /* "c", "avx2", "avx512vnni" */

#endif
