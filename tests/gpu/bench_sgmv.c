/*
 * bench_sgmv.c — SGMV shrink and expand alone on the CUDA backend, against
 * the device's copy bandwidth.
 *
 * Cases: Llama-2-7B projection dims (in = out = 4096), f16, f32 tmp;
 * ranks 8, 16, 64 x 1, 4, 16, 32, 64 distinct adapters over decode batches
 * of 32 and 64 tokens (one token per sequence; sequences grouped by
 * adapter into segments, as the engine does), prefill cases (512 tokens
 * over 4 adapters; the prefill steps of W1, W3 and W2: 32 x 128 tokens
 * with q,k,v in one launch or o alone, 128 x 128 tokens), and the fused
 * q,k,v form of decode (multi-slot, k = 3). LG_SGMV_PREFILL=0 runs the
 * prefill cases on the CUDA-core kernels (the before of lora_shrink_mma.cu
 * and the tile expand).
 *
 * Bytes counted (each once): shrink = A of every segment + x + tmp
 * written (f32); expand = B of every segment + tmp read + y read and
 * written. Achieved bandwidth = bytes / time, compared with COPY_TBS (a
 * device-to-device copy, read + write, measured on the H100 of this
 * project).
 *
 * Timing: REPS launches captured once into a step graph (the backend's
 * graph slots, as decode steps run), replayed NTRIAL times; CUDA events
 * on the compute stream around each replay; the median replay / REPS is
 * the per-launch time. Each of the REPS launches reads a different set of
 * adapters placed at random in a >= 1 GB arena, so L2 (50 MB) holds
 * none of them; x, y and tmp stay fixed (in the engine they were just
 * written by the previous op and are L2-resident too).
 *
 * The "st us" column: the expand's store form (y = the expand, not y +
 * it: matmul_lora's prefill order, where the matmul then adds into y),
 * where the launch takes it (the tile kernel), counting y written once.
 *
 * Usage: bench_sgmv   (built and run by tests/gpu/bench_sgmv.sh)
 */
#include "engine/backend/backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t lg_cuda_compute_stream(lg_backend *be); /* kernels/lora_shrink.cu */
int lg_cuda_lora_expand_store(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                              const int *slots, int k); /* kernels/lora_expand.cu; 1: not taken */

#define IN 4096
#define OUT 4096
#define REPS 48
#define NTRIAL 25
#define ARENA_BYTES ((size_t)1536 << 20)
#define COPY_TBS 2.97
#define N_SLOTS 3

static lg_backend *G;
static char *arena;
#include "tests/gpu/bench_util.h" /* rnd64, CK, CKC, dev_random_f16, cmp_f */

typedef struct {
    int T, n_ad, rank, k; /* tokens, distinct adapters (= segments), rank, slots per launch */
    const char *name;
} bcase;

typedef struct {
    lg_lora_meta lm[REPS];
    lg_lora_w *w_dev[REPS];
    int32_t *ind_dev, *ind_host;
    lg_tensor x, tmp, ys[N_SLOTS];
} bset;

/* Median time per launch (us) of op (0 shrink, 1 expand, 2 the expand's store form) over REPS
 * launches in one graph; -1 when the store form does not take the launch. */
static double time_op(bset *b, int op, int k, int case_id)
{
    static const int slots[N_SLOTS] = {0, 1, 2};
    cudaStream_t st = lg_cuda_compute_stream(G);
    cudaEvent_t e0, e1;
    CKC(cudaEventCreate(&e0));
    CKC(cudaEventCreate(&e1));
    char key[32];
    snprintf(key, sizeof key, "sgmv %d %d", case_id, op);
    float ms[NTRIAL];
    if (op == 2 && lg_cuda_lora_expand_store(G, b->ys, b->tmp, &b->lm[0], slots, k) != 0) {
        CK(G->i.sync(G) == 0);
        return -1;
    }
    for (int trial = -2; trial < NTRIAL; trial++) { /* two warm-up replays (the first records) */
        bool replayed = false;
        CKC(cudaEventRecord(e0, st));
        CK(G->i.graph_begin(G, key, strlen(key), &replayed) == 0);
        if (!replayed) {
            for (int r = 0; r < REPS; r++) {
                int rc = op == 0   ? G->i.lora_shrink_multi(G, b->tmp, b->x, &b->lm[r], slots, k)
                         : op == 1 ? G->i.lora_expand_multi(G, b->ys, b->tmp, &b->lm[r], slots, k)
                                   : lg_cuda_lora_expand_store(G, b->ys, b->tmp, &b->lm[r], slots, k);
                CK(rc == 0);
            }
        }
        CK(G->i.graph_end(G, true) == 0);
        CKC(cudaEventRecord(e1, st));
        CKC(cudaEventSynchronize(e1));
        if (trial >= 0)
            CKC(cudaEventElapsedTime(&ms[trial], e0, e1));
    }
    CKC(cudaEventDestroy(e0));
    CKC(cudaEventDestroy(e1));
    qsort(ms, NTRIAL, sizeof(float), cmp_f);
    return ms[NTRIAL / 2] * 1e3 / REPS;
}

static void run_case(const bcase *c, int case_id, void *x, void *y, void *tmp)
{
    const int S = c->n_ad, per = c->T / S, k = c->k;
    const size_t a_bytes = (size_t)c->rank * IN * 2, b_bytes = (size_t)OUT * c->rank * 2;
    bset b;
    memset(&b, 0, sizeof b);
    b.ind_host = malloc((S + 1) * sizeof(int32_t));
    for (int s = 0; s <= S; s++) b.ind_host[s] = s * per + (s == S ? c->T - S * per : 0);
    b.ind_dev = G->i.alloc(G, (S + 1) * sizeof(int32_t));
    CK(b.ind_dev && G->i.upload(G, b.ind_dev, b.ind_host, (S + 1) * sizeof(int32_t)) == 0);
    lg_lora_w *w = calloc((size_t)S * N_SLOTS, sizeof *w);
    for (int r = 0; r < REPS; r++) {
        for (int s = 0; s < S; s++)
            for (int m = 0; m < N_SLOTS; m++) {
                lg_lora_w *ws = &w[(size_t)s * N_SLOTS + m];
                ws->rank = c->rank;
                ws->scale = 0.5f;
                ws->A = arena + (rnd64() % ((ARENA_BYTES - a_bytes) / 256)) * 256;
                ws->B = arena + (rnd64() % ((ARENA_BYTES - b_bytes) / 256)) * 256;
            }
        b.w_dev[r] = G->i.alloc(G, (size_t)S * N_SLOTS * sizeof *w);
        CK(b.w_dev[r] && G->i.upload(G, b.w_dev[r], w, (size_t)S * N_SLOTS * sizeof *w) == 0);
        b.lm[r] = (lg_lora_meta){S, N_SLOTS, c->rank, b.ind_dev, b.w_dev[r], b.ind_host, 0};
    }
    b.x = lg_tensor_2d(x, LG_F16, c->T, IN);
    b.tmp = lg_tensor_2d(tmp, LG_F32, c->T, N_SLOTS * c->rank);
    for (int m = 0; m < N_SLOTS; m++) /* q,k,v outputs: column slices of one fused [T, 3 * OUT] buffer */
        b.ys[m] = (lg_tensor){(char *)y + (size_t)m * OUT * 2, LG_F16, c->T, OUT, N_SLOTS * OUT};

    double us_sh = time_op(&b, 0, k, case_id), us_ex = time_op(&b, 1, k, case_id), us_st = time_op(&b, 2, k, case_id);
    double by_sh = (double)k * ((double)S * a_bytes + (double)c->T * c->rank * 4) + (double)c->T * IN * 2;
    double by_ex = (double)k * ((double)S * b_bytes + (double)c->T * c->rank * 4 + (double)c->T * OUT * 2 * 2);
    double by_st = by_ex - (double)k * c->T * OUT * 2; /* y written, not read */
    double bw_sh = by_sh / us_sh * 1e-6, bw_ex = by_ex / us_ex * 1e-6; /* TB/s */
    printf("%-10s %4d %4d %5d %4d %3d | %7.2f %6.2f %6.2f %5.0f%% | %7.2f %6.2f %6.2f %5.0f%%", c->name, c->T, S,
           c->rank, per, k, us_sh, by_sh / (COPY_TBS * 1e6), bw_sh, 100 * bw_sh / COPY_TBS, us_ex,
           by_ex / (COPY_TBS * 1e6), bw_ex, 100 * bw_ex / COPY_TBS);
    if (us_st > 0)
        printf(" | %7.2f %6.2f %6.2f\n", us_st, by_st / (COPY_TBS * 1e6), by_st / us_st * 1e-6);
    else
        printf(" | %7s\n", "-");
    fflush(stdout);

    G->i.graph_reset(G); /* recordings name the w arrays freed below */
    for (int r = 0; r < REPS; r++) G->i.dealloc(G, b.w_dev[r]);
    G->i.dealloc(G, b.ind_dev);
    free(b.ind_host), free(w);
}

int main(void)
{
    arena = bench_setup(ARENA_BYTES);
    const int TMAX = 16384;
    void *x = dev_random_f16((size_t)TMAX * IN, 1.0f), *y = dev_random_f16((size_t)TMAX * N_SLOTS * OUT, 1.0f);
    void *tmp = G->i.alloc(G, (size_t)TMAX * N_SLOTS * 64 * 4);
    CK(x && y && tmp);

    bcase cases[64];
    int nc = 0;
    const int ranks[] = {8, 16, 64}, ads[] = {1, 4, 16, 32, 64}, Ts[] = {32, 64};
    for (int ti = 0; ti < 2; ti++)
        for (int ri = 0; ri < 3; ri++)
            for (int ai = 0; ai < 5; ai++)
                if (ads[ai] <= Ts[ti])
                    cases[nc++] = (bcase){Ts[ti], ads[ai], ranks[ri], 1, "decode"};
    cases[nc++] = (bcase){512, 4, 16, 1, "prefill"};
    cases[nc++] = (bcase){512, 4, 64, 1, "prefill"};
    cases[nc++] = (bcase){4096, 32, 16, 3, "pf W1 qkv"};
    cases[nc++] = (bcase){4096, 32, 16, 1, "pf W1 o"};
    cases[nc++] = (bcase){4096, 32, 8, 3, "pf W3 qkv"};
    cases[nc++] = (bcase){16384, 128, 16, 3, "pf W2 qkv"};
    cases[nc++] = (bcase){32, 32, 16, 3, "dec qkv"};
    cases[nc++] = (bcase){64, 64, 16, 3, "dec qkv"};
    cases[nc++] = (bcase){1, 1, 16, 3, "b1 qkv"};

    printf("SGMV on %s: in = out = %d, f16, f32 tmp; %d launches per graph (adapters rotated over %zu MB), "
           "median of %d replays; floor = bytes / %.2f TB/s\n",
           G->i.name, IN, REPS, ARENA_BYTES >> 20, NTRIAL, COPY_TBS);
    printf("%-10s %4s %4s %5s %4s %3s | %7s %6s %6s %6s | %7s %6s %6s %6s | %7s %6s %6s\n", "case", "T", "ads", "rank",
           "seg", "k", "sh us", "floor", "TB/s", "peak", "ex us", "floor", "TB/s", "peak", "st us", "floor", "TB/s");
    for (int i = 0; i < nc; i++) run_case(&cases[i], i, x, y, tmp);
    CK(G->i.sync(G) == 0);
    G->i.dealloc(G, x), G->i.dealloc(G, y), G->i.dealloc(G, tmp), G->i.dealloc(G, arena);
    lg_backend_free(G);
    return 0;
}
