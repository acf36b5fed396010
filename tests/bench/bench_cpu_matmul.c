/*
 * bench_cpu_matmul.c — the CPU backend's matmul by weight format: f16, bf16,
 * ggml's Q8_0 and Q4_0, and the planar checkpoint layouts F8, F8_A8,
 * F8_A8S, F8_A8G, I4, on one shape (default a decode step's 4096 x 4096
 * projection, T = 1). Reports, per format, the median time of a call, the
 * weight bytes it streams per second, and the calls per second (for T = 1 a
 * "tokens per second" of that one matmul).
 *
 *   build/bench_cpu_matmul [--n N] [--k K] [--t T] [--threads P] [--iters I]
 *
 * Weights are random (values do not change the time of these kernels).
 * Not a test: figures go to docs/benchmarks.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int64_t N = 4096, K = 4096, T = 1;
    int threads = 0, iters = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) N = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--k")) K = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--t")) T = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    lg_backend *be;
    lg_err err;
    lg_backend_opts o = {.n_threads = threads};
    if (lg_backend_cpu_create(&o, &be, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N);
    for (int64_t i = 0; i < T * K; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    printf("matmul [%lld x %lld] x [%lld x %lld]^T, %d threads, median of %d calls\n", (long long)T, (long long)K,
           (long long)N, (long long)K, be->n_threads, iters);
    printf("%-8s %10s %10s %10s %12s\n", "format", "ms/call", "best ms", "GB/s", "calls/s");
    static const struct {
        const char *name;
        lg_dtype dt;
        lg_qtype q;
    } fmts[] = {{"f16", LG_F16, LG_QNONE},     {"bf16", LG_BF16, LG_QNONE},  {"Q8_0", LG_F32, LG_Q8_0},
                {"Q4_0", LG_F32, LG_Q4_0},     {"F8", LG_F32, LG_QF8},       {"F8_A8", LG_F32, LG_QF8_A8},
                {"F8_A8S", LG_F32, LG_QF8_A8S}, {"F8_A8G", LG_F32, LG_QF8_A8G}, {"I4", LG_F32, LG_QI4}};
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        lg_tensor W = fmts[f].q ? lg_tensor_quant(NULL, fmts[f].q, N, K) : lg_tensor_2d(NULL, fmts[f].dt, N, K);
        if (fmts[f].q && lg_qtype_is_ggml(fmts[f].q) && K % lg_qtype_get(fmts[f].q).block_elems)
            continue;
        const size_t bytes = lg_tensor_bytes(W, K) * (size_t)N;
        uint8_t *w = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)((i * 2654435761u) >> 13);
        if (fmts[f].q == LG_QNONE) /* f16/bf16: normal values of magnitude about 0.01..2 (no subnormals) */
            for (size_t i = 1; i < bytes; i += 2) w[i] = fmts[f].dt == LG_F16 ? (w[i] & 0x83) | 0x20 : (w[i] & 0x80) | 0x3c;
        W.data = w;
        if (lg_qtype_is_planar(fmts[f].q)) { /* finite scales: d (and a) set to sane values */
            lg_qplanes p = lg_qplanes_of(W);
            if (fmts[f].q != LG_QI4) /* no NaN codes (0x7F, 0xFF), as quantizers write none */
                for (int64_t i = 0; i < N * p.q_row; i++) p.q[i] = (p.q[i] & 0x7F) == 0x7F ? p.q[i] - 1 : p.q[i];
            for (int64_t i = 0; i < N * p.nb; i++) {
                if (fmts[f].q == LG_QI4)
                    ((uint16_t *)p.d)[i] = 0x1c00; /* f16 0.0039 */
                else
                    ((float *)p.d)[i] = 0.01f;
                if (p.a)
                    p.a[i] = i / p.nb < N / 3 ? 0.02f : -8.0f;
            }
        } else if (fmts[f].q) { /* ggml blocks: f16 d at the start of each 18/34-byte block */
            const lg_qtype_info qi = lg_qtype_get(fmts[f].q);
            for (size_t b = 0; b < bytes; b += (size_t)qi.block_bytes) {
                w[b] = 0;
                w[b + 1] = 0x1c;
            }
        }
        double *ts = malloc(sizeof(double) * iters);
        int rc = be->i.matmul(be, lg_tensor_2d(y, LG_F32, T, N), lg_tensor_2d(x, LG_F32, T, K), W, (lg_tensor){0},
                              false); /* warm-up */
        for (int i = 0; i < iters && rc == 0; i++) {
            const double t0 = lg_now();
            rc = be->i.matmul(be, lg_tensor_2d(y, LG_F32, T, N), lg_tensor_2d(x, LG_F32, T, K), W, (lg_tensor){0},
                              false);
            ts[i] = lg_now() - t0;
        }
        if (rc) {
            printf("%-8s failed\n", fmts[f].name);
        } else {
            qsort(ts, (size_t)iters, sizeof(double), cmp_d);
            const double med = ts[iters / 2];
            printf("%-8s %10.3f %10.3f %10.2f %12.1f\n", fmts[f].name, med * 1e3, ts[0] * 1e3, (double)bytes / med / 1e9,
                   1.0 / med);
        }
        free(ts);
        free(w);
    }
    free(x);
    free(y);
    lg_backend_free(be);
    return 0;
}
