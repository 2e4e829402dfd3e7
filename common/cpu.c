/* cpu.c - run-time SIMD feature detection (CPUID + XGETBV), SL_FORCE_SCALAR. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "starling/common.h"

#if defined(SL_X86_SIMD)
#include <cpuid.h>

static unsigned long long read_xcr0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static unsigned detect(void)
{
    unsigned a, b, c, d, f = 0;
    unsigned long long xcr0;
    int fma, f16c, osxsave;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    fma = (c >> 12) & 1;
    osxsave = (c >> 27) & 1;
    f16c = (c >> 29) & 1;
    if (!osxsave)
        return 0;
    xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) /* XMM and YMM state enabled by the OS */
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (((b >> 5) & 1) && ((b >> 8) & 1) && fma && f16c) /* AVX2, BMI2 */
        f |= SL_CPU_AVX2;
    if ((f & SL_CPU_AVX2) && (xcr0 & 0xe0) == 0xe0 && ((b >> 16) & 1) /* F */ &&
        ((b >> 17) & 1) /* DQ */ && ((b >> 30) & 1) /* BW */ && ((b >> 31) & 1) /* VL */)
        f |= SL_CPU_AVX512;
    return f;
}
#else
static unsigned detect(void)
{
#if defined(SL_NEON)
    return SL_CPU_NEON;
#else
    return 0;
#endif
}
#endif

unsigned sl_cpu_features(void)
{
    static _Atomic int cached = -1;
    int f = atomic_load(&cached);
    if (f < 0) {
        const char *force = getenv("SL_FORCE_SCALAR");
        f = (force != NULL && strcmp(force, "1") == 0) ? 0 : (int)detect();
        atomic_store(&cached, f);
    }
    return (unsigned)f;
}

const char *sl_cpu_describe(unsigned features)
{
    if (features & SL_CPU_AVX512)
        return "avx512";
    if (features & SL_CPU_AVX2)
        return "avx2";
    if (features & SL_CPU_NEON)
        return "neon";
    return "scalar";
}
