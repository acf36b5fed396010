/*
 * cpu_features.c — see cpu_features.h. cpuid leaf 1 (ECX: FMA bit 12,
 * OSXSAVE 27, AVX 28, F16C 29), leaf 7 subleaf 0 (EBX: AVX2 5, AVX512F 16,
 * AVX512DQ 17, AVX512BW 30, AVX512VL 31; ECX: AVX512_VNNI 11), and XCR0
 * bits 1-2 (SSE, AVX state) and 5-7 (opmask, ZMM_Hi256, Hi16_ZMM).
 */
#include "engine/backend/cpu_features.h"

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <stdint.h>

static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static lg_cpu_isa detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return LG_ISA_C;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return LG_ISA_C;
    const uint64_t x = xcr0();
    if ((x & 0x6) != 0x6) /* the OS does not save YMM state */
        return LG_ISA_C;
    if (__get_cpuid_max(0, NULL) < 7)
        return LG_ISA_C;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    const int vnni = (c >> 11) & 1;
    if (!(avx2 && fma && f16c))
        return LG_ISA_C;
    if (f && dq && bw && vl && vnni && (x & 0xe6) == 0xe6)
        return LG_ISA_AVX512;
    return LG_ISA_AVX2;
}
#else
static lg_cpu_isa detect(void) { return LG_ISA_C; }
#endif

static lg_cpu_isa g_isa;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init(void) { g_isa = detect(); }

lg_cpu_isa lg_cpu_isa_detect(void)
{
    pthread_once(&g_once, init);
    return g_isa;
}

const char *lg_cpu_isa_name(lg_cpu_isa isa)
{
    switch (isa) {
    case LG_ISA_C: return "c";
    case LG_ISA_AVX2: return "avx2";
    case LG_ISA_AVX512: return "avx512vnni";
    }
    return "?";
}
