/*
 * test_e4m3.c — OCP FP8 E4M3FN conversion (engine/base/common.c:
 * lg_e4m3_to_f32, lg_f32_to_e4m3) against ml_dtypes.float8_e4m3fn:
 *
 *   1. every one of the 256 codes decodes to ml_dtypes' value, bit for bit
 *      (both NaN codes to a NaN);
 *   2. every float of the fixture (each e4m3 value, the ties between
 *      neighbours and one f32 ulp either side, subnormals, underflow, values
 *      past 448, +-inf, NaN, -0, f32 subnormals, random magnitudes, both
 *      signs) encodes to ml_dtypes' code of clip(x, -448, 448): nearest even,
 *      saturating; a NaN to a NaN code.
 * Fixtures: tests/fixtures/ckptq/e4m3.* (make_ckptq_fixtures.py). Runs with
 * the repo root as working directory.
 */
#include "engine/base/common.h"
#include "tests/unit/test.h"

#define FIX "tests/fixtures/ckptq/"

static void *read_all(const char *name, size_t *n)
{
    char *buf;
    lg_err err;
    if (lg_read_file(name, 1 << 24, &buf, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return buf;
}

int main(void)
{
    size_t nd = 0, nx = 0, nc = 0;
    float *deq = read_all(FIX "e4m3.deq", &nd), *x = read_all(FIX "e4m3.x", &nx);
    uint8_t *code = read_all(FIX "e4m3.code", &nc);
    CHECK(deq && x && code && nd == 256 * 4 && nx == nc * 4);
    if (!deq || !x || !code)
        TEST_DONE();

    int bad = 0;
    for (int v = 0; v < 256; v++) {
        const float got = lg_e4m3_to_f32((uint8_t)v), want = deq[v];
        const bool ok = isnan(want) ? isnan(got) : memcmp(&got, &want, 4) == 0;
        if (!ok && bad++ < 5)
            fprintf(stderr, "code 0x%02x: %g, ml_dtypes %g\n", v, got, want);
    }
    CHECK_MSG(bad == 0, "%d of 256 codes decode differently from ml_dtypes", bad);

    bad = 0;
    const size_t n = nc;
    for (size_t i = 0; i < n; i++) {
        const uint8_t got = lg_f32_to_e4m3(x[i]), want = code[i];
        const bool ok = (want & 0x7F) == 0x7F ? (got & 0x7F) == 0x7F : got == want;
        if (!ok && bad++ < 5)
            fprintf(stderr, "%.9g: 0x%02x, ml_dtypes 0x%02x\n", x[i], got, want);
    }
    CHECK_MSG(bad == 0, "%d of %zu floats encode differently from ml_dtypes", bad, n);
    printf("e4m3: 256 codes, %zu floats\n", n);
    free(deq);
    free(x);
    free(code);
    TEST_DONE();
}
