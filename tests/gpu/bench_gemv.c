/*
 * bench_gemv.c — the decode matmul (T = 1, 2, 4 token rows) on the Llama-2-7B
 * weight shapes: the GEMV of kernels/gemv.cu against the cuBLAS path of
 * kernels/gemm.cu, both through the backend's matmul op (the backend's
 * gemv switch, G->tune.gemv, the values of LG_GEMV, picks the path: 0
 * cuBLAS; 11 our kernel, default variant, at every T; 1 auto = what the
 * engine runs (ours, or cuBLAS at T > 2 on N < 16384); with --sweep also
 * 2 auto with programmatic dependent launch and 10 + v each variant v).
 *
 * Shapes (N x K, f16): 12288x4096 fused qkv, 4096x4096 o, 22016x4096 fused
 * gate_up, 4096x11008 down, 32000x4096 lm_head with f32 output.
 * Achieved bandwidth = weight bytes (N * K * 2) / time; x and y are not
 * counted (<= 0.3%). Timing: REPS launches captured once into a step graph
 * (as decode steps run), each reading the next of several copies of W laid
 * out over >= 256 MB (so L2, 50 MB, holds none), replayed NTRIAL times with
 * CUDA events around each replay; the median replay / REPS is the time per
 * launch. The device-to-device copy bandwidth (read + write) is measured
 * first, for scale.
 *
 * Usage: bench_gemv   (built and run by tests/gpu/bench_gemv.sh)
 */
#include "engine/backend/backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t lg_cuda_compute_stream(lg_backend *be); /* kernels/lora_shrink.cu */

#define REPS 24
#define MI(mode) ((mode) < 10 ? (mode) : (mode) - 7) /* index into mname */
#define NTRIAL 15
#define ROT_BYTES ((size_t)256 << 20)
#define ARENA_BYTES ((size_t)640 << 20)

static lg_backend *G;
static char *arena;
#include "tests/gpu/bench_util.h" /* rnd64, CK, CKC, dev_random_f16, rot_copies, cmp_f */

/* Median us per launch of REPS matmuls (rotating W copies) in one graph, path `mode`. */
static double time_mm(int mode, int T, int N, int K, lg_dtype ydt, void *x, void *y)
{
    size_t slot;
    const int copies = rot_copies((size_t)N * K * 2, ROT_BYTES, ARENA_BYTES, &slot);
    G->tune.gemv = mode;
    cudaStream_t st = lg_cuda_compute_stream(G);
    cudaEvent_t e0, e1;
    CKC(cudaEventCreate(&e0));
    CKC(cudaEventCreate(&e1));
    char key[64];
    snprintf(key, sizeof key, "gemv %d %d %d %d %d", mode, T, N, K, (int)ydt);
    lg_tensor none = {0};
    float ms[NTRIAL];
    for (int trial = -2; trial < NTRIAL; trial++) {
        bool replayed = false;
        CKC(cudaEventRecord(e0, st));
        CK(G->i.graph_begin(G, key, strlen(key), &replayed) == 0);
        if (!replayed)
            for (int r = 0; r < REPS; r++) {
                lg_tensor W = lg_tensor_2d(arena + (size_t)(r % copies) * slot, LG_F16, N, K);
                CK(G->i.matmul(G, lg_tensor_2d(y, ydt, T, N), lg_tensor_2d(x, LG_F16, T, K), W, none, false) == 0);
            }
        CK(G->i.graph_end(G, true) == 0);
        CKC(cudaEventRecord(e1, st));
        CKC(cudaEventSynchronize(e1));
        if (trial >= 0)
            CKC(cudaEventElapsedTime(&ms[trial], e0, e1));
    }
    CKC(cudaEventDestroy(e0));
    CKC(cudaEventDestroy(e1));
    G->i.graph_reset(G);
    qsort(ms, NTRIAL, sizeof(float), cmp_f);
    return ms[NTRIAL / 2] * 1e3 / REPS;
}

static double copy_tbs(void)
{
    const size_t n = (size_t)256 << 20;
    cudaStream_t st = lg_cuda_compute_stream(G);
    cudaEvent_t e0, e1;
    CKC(cudaEventCreate(&e0));
    CKC(cudaEventCreate(&e1));
    float ms[9];
    for (int i = -1; i < 9; i++) {
        CKC(cudaEventRecord(e0, st));
        CK(G->i.copy(G, arena + n, arena, n) == 0);
        CKC(cudaEventRecord(e1, st));
        CKC(cudaEventSynchronize(e1));
        if (i >= 0)
            CKC(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, 9, sizeof(float), cmp_f);
    return 2.0 * n / (ms[4] * 1e-3) * 1e-12;
}

int main(int argc, char **argv)
{
    const int sweep = argc > 1 && !strcmp(argv[1], "--sweep"); /* also each variant and no-PDL */
    arena = bench_setup(ARENA_BYTES);
    void *x = dev_random_f16((size_t)4 * 11008, 1.0f);
    void *y = G->i.alloc(G, (size_t)4 * 32000 * 4);
    CK(x && y);

    struct {
        const char *name;
        int N, K;
        lg_dtype ydt;
    } shapes[] = {{"qkv", 12288, 4096, LG_F16},
                  {"o", 4096, 4096, LG_F16},
                  {"gate_up", 22016, 4096, LG_F16},
                  {"down", 4096, 11008, LG_F16},
                  {"lm_head", 32000, 4096, LG_F32}};
    const int Ts[] = {1, 2, 4};
    int modes[8], nm = 0;
    modes[nm++] = 0, modes[nm++] = 11, modes[nm++] = 1;
    if (sweep)
        modes[nm++] = 2, modes[nm++] = 10, modes[nm++] = 12, modes[nm++] = 13;
    const char *mname[] = {"cublas", "auto", "auto+pdl", "v0 1x8", "gemv(v1 2x4)", "v2 2x8", "v3 4x4"};

    printf("decode matmul on %s, f16: TB/s = weight bytes / median time of %d graph-launched matmuls "
           "(W rotated over >= %zu MB); device-to-device copy: %.2f TB/s\n",
           G->i.name, REPS, ROT_BYTES >> 20, copy_tbs());
    printf("%-8s %6s %6s %2s |", "shape", "N", "K", "T");
    for (int m = 0; m < nm; m++) printf(" %14s", mname[MI(modes[m])]);
    printf("\n");
    double tot_us[8][3] = {{0}};
    for (int s = 0; s < 5; s++)
        for (int ti = 0; ti < 3; ti++) {
            const int T = Ts[ti], N = shapes[s].N, K = shapes[s].K;
            printf("%-8s %6d %6d %2d |", shapes[s].name, N, K, T);
            for (int m = 0; m < nm; m++) {
                double us = time_mm(modes[m], T, N, K, shapes[s].ydt, x, y);
                tot_us[m][ti] += us * (s == 4 ? 1 : 32) / 1e3; /* one step: 32 layers + lm_head, ms */
                printf(" %6.1fus %4.2fT", us, (double)N * K * 2 / (us * 1e-6) * 1e-12);
            }
            printf("\n");
            fflush(stdout);
        }
    printf("one decode step's GEMMs (32 layers x qkv, o, gate_up, down + lm_head):\n");
    for (int ti = 0; ti < 3; ti++) {
        printf("  T=%d GEMM ms/step:", Ts[ti]);
        for (int m = 0; m < nm; m++) printf("  %s %.3f", mname[MI(modes[m])], tot_us[m][ti]);
        printf("\n");
    }
    G->tune.gemv = 1;
    CK(G->i.sync(G) == 0);
    G->i.dealloc(G, x), G->i.dealloc(G, y), G->i.dealloc(G, arena);
    lg_backend_free(G);
    return 0;
}
