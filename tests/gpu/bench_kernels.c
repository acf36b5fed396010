/*
 * bench_kernels.c — the kernel figures of docs/benchmarks.md (GPU kernels),
 * each next to its reference, in one run:
 *
 *  1. ceilings: device-to-device copy bandwidth (bytes read + written) and
 *     the cuBLAS f16 GEMM rate at 8192^3 (the backend's matmul at T = 8192);
 *  2. the decode matmul at T = 8, 16, 32, 64 token rows (BENCH_TS="64 128": those, 1..128) on the Llama-2-7B
 *     shapes: cuBLAS against the TMA + wgmma stream-K matmul (the default,
 *     kernels/gemm_tma.cu) and, without --quick, its other variants, in TB/s
 *     of weight bytes; REPS launches per step graph, W rotated over >= 256 MB
 *     (L2 holds none), median of NTRIAL replays (as bench_gemv.c);
 *     BENCH_MODES="0 20 23": those columns only (0 cuBLAS, 20 + v TMA
 *     variant v); BENCH_MM="qkv:32": that case only, for profilers;
 *  3. causal prefill attention, 2,048 tokens, 32 heads of 128 (MHA, and GQA
 *     with 8 kv heads): FlashAttention-2 kernel vs the wmma baseline
 *     (the backend's attn_fa2 switch), TFLOP/s = 4 * head_dim * heads * sum
 *     over queries of the keys they see / time;
 *  4. decode attention (one query token per sequence, paged KV): W1's shape
 *     (32 sequences x 192 keys, 32 heads of 128), batch 1 (256 keys), and
 *     32 x 2,048 keys with 8 kv heads; us and TB/s of K/V bytes read, REPS
 *     launches per graph over rotated KV copies (L2 holds none).
 * Usage: bench_kernels [--quick] [--only matmul|prefill|decode]
 *   (--quick: cuBLAS and the default TMA matmul only; --only: that section and the
 *   ceilings)   (tests/gpu/run_device.sh bench and kernels run it)
 * Paths are picked by writing the backend's switches (G->tune, engine/base/tuning.h) and put back
 * to the environment's values after.
 * Output: tables on stdout. Exits on a failed check (a benchmark program).
 */
#include "engine/backend/backend.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t lg_cuda_compute_stream(lg_backend *be); /* kernels/lora_shrink.cu */

#define REPS 24
#define NTRIAL 15
#define ROT_BYTES ((size_t)256 << 20)
#define ARENA_BYTES ((size_t)640 << 20)

static lg_backend *G;
static char *arena;
#include "tests/gpu/bench_util.h" /* rnd64, CK, CKC, dev_random_f16, bench_setup, rot_copies, cmp_f */

typedef struct {
    cudaEvent_t e0, e1;
    cudaStream_t st;
} timer;
static timer timer_new(void)
{
    timer t;
    CKC(cudaEventCreate(&t.e0));
    CKC(cudaEventCreate(&t.e1));
    t.st = lg_cuda_compute_stream(G);
    return t;
}
static void timer_free(timer *t)
{
    CKC(cudaEventDestroy(t->e0));
    CKC(cudaEventDestroy(t->e1));
}

/* Median us per launch: REPS launches of enqueue(ctx, r), r = 0 .. REPS - 1, recorded once as step graph `key`,
 * then NTRIAL timed replays (after two untimed ones). */
static double graph_us(const char *key, void (*enqueue)(void *ctx, int r), void *ctx)
{
    timer tm = timer_new();
    float ms[NTRIAL];
    for (int trial = -2; trial < NTRIAL; trial++) {
        bool replayed = false;
        CKC(cudaEventRecord(tm.e0, tm.st));
        CK(G->i.graph_begin(G, key, strlen(key), &replayed) == 0);
        if (!replayed)
            for (int r = 0; r < REPS; r++) enqueue(ctx, r);
        CK(G->i.graph_end(G, true) == 0);
        CKC(cudaEventRecord(tm.e1, tm.st));
        CKC(cudaEventSynchronize(tm.e1));
        if (trial >= 0)
            CKC(cudaEventElapsedTime(&ms[trial], tm.e0, tm.e1));
    }
    timer_free(&tm);
    G->i.graph_reset(G);
    qsort(ms, NTRIAL, sizeof(float), cmp_f);
    return ms[NTRIAL / 2] * 1e3 / REPS;
}

typedef struct {
    int T, N, K;
    lg_dtype ydt;
    void *x, *y;
    int copies;
    size_t slot;
} mm_ctx;
static void mm_enqueue(void *ctx, int r)
{
    const mm_ctx *m = ctx;
    lg_tensor none = {0};
    lg_tensor W = lg_tensor_2d(arena + (size_t)(r % m->copies) * m->slot, LG_F16, m->N, m->K);
    CK(G->i.matmul(G, lg_tensor_2d(m->y, m->ydt, m->T, m->N), lg_tensor_2d(m->x, LG_F16, m->T, m->K), W, none,
                   false) == 0);
}

/* Median us per launch of REPS matmuls (rotating W copies) in one graph. mode: 0 cuBLAS (the GEMV at up to
 * 4 rows), 20 + v TMA + wgmma stream-K variant v (gemm_tma.cu; the switch LG_STREAMK's values). */
static double time_mm(int mode, int T, int N, int K, lg_dtype ydt, void *x, void *y)
{
    size_t slot;
    const int copies = rot_copies((size_t)N * K * 2, ROT_BYTES, ARENA_BYTES, &slot);
    G->tune.streamk = mode >= 20 ? mode : 0;
    char key[64];
    snprintf(key, sizeof key, "mm %d %d %d %d %d", mode, T, N, K, (int)ydt);
    mm_ctx mc = {T, N, K, ydt, x, y, copies, slot};
    return graph_us(key, mm_enqueue, &mc);
}

static double copy_tbs(void)
{
    const size_t n = (size_t)256 << 20;
    timer tm = timer_new();
    float ms[9];
    for (int i = -1; i < 9; i++) {
        CKC(cudaEventRecord(tm.e0, tm.st));
        CK(G->i.copy(G, arena + n, arena, n) == 0);
        CKC(cudaEventRecord(tm.e1, tm.st));
        CKC(cudaEventSynchronize(tm.e1));
        if (i >= 0)
            CKC(cudaEventElapsedTime(&ms[i], tm.e0, tm.e1));
    }
    timer_free(&tm);
    qsort(ms, 9, sizeof(float), cmp_f);
    return 2.0 * n / (ms[4] * 1e-3) * 1e-12;
}

/* cuBLAS f16 GEMM 8192^3 (f32 accumulation), TFLOP/s, median of 9. */
static double gemm_peak(void)
{
    const int n = 8192;
    void *x = dev_random_f16((size_t)n * n, 1.0f), *w = dev_random_f16((size_t)n * n, 0.02f);
    void *y = G->i.alloc(G, (size_t)n * n * 2);
    CK(y);
    lg_tensor none = {0};
    timer tm = timer_new();
    float ms[9];
    for (int i = -2; i < 9; i++) {
        CKC(cudaEventRecord(tm.e0, tm.st));
        CK(G->i.matmul(G, lg_tensor_2d(y, LG_F16, n, n), lg_tensor_2d(x, LG_F16, n, n), lg_tensor_2d(w, LG_F16, n, n),
                       none, false) == 0);
        CKC(cudaEventRecord(tm.e1, tm.st));
        CKC(cudaEventSynchronize(tm.e1));
        if (i >= 0)
            CKC(cudaEventElapsedTime(&ms[i], tm.e0, tm.e1));
    }
    timer_free(&tm);
    G->i.dealloc(G, x), G->i.dealloc(G, w), G->i.dealloc(G, y);
    qsort(ms, 9, sizeof(float), cmp_f);
    return 2.0 * n * (double)n * n / (ms[4] * 1e-3) * 1e-12;
}

/* Causal prefill attention of one sequence of L tokens, us (median of 9). */
static double time_prefill(int fa2, int L, int nh, int nkv, int hd)
{
    const int pt = 16, n_pages = (L + pt - 1) / pt, kvdim = nkv * hd;
    const size_t blk = (size_t)pt * kvdim * 2, pb = 2 * blk;
    void *pool = dev_random_f16((size_t)n_pages * pb / 2, 1.0f);
    void *q = dev_random_f16((size_t)L * nh * hd, 1.0f), *out = G->i.alloc(G, (size_t)L * nh * hd * 2);
    int32_t *h = malloc(((size_t)3 * L + 8 + n_pages) * 4);
    int32_t *pos = h, *slot = pos + L, *qi = slot + L, *kvl = qi + 2, *pi = kvl + 1, *pids = pi + 2;
    for (int t = 0; t < L; t++) pos[t] = t, slot[t] = t;
    qi[0] = 0, qi[1] = L, kvl[0] = L, pi[0] = 0, pi[1] = n_pages;
    for (int p = 0; p < n_pages; p++) pids[p] = p;
    int32_t *d = G->i.alloc(G, ((size_t)3 * L + 8 + n_pages) * 4);
    CK(out && d && G->i.upload(G, d, h, ((size_t)3 * L + 8 + n_pages) * 4) == 0);
    lg_step_meta m = {.n_tokens = L, .n_seqs = 1, .max_q_len = L, .max_kv_len = L, .pos = d, .slot = d + L,
                      .q_indptr = d + 2 * L, .kv_len = d + 2 * L + 2, .page_indptr = d + 2 * L + 3,
                      .page_ids = d + 2 * L + 5};
    lg_kv_view kv = {pool, pb, 0, blk, pt, nkv, hd, LG_F16, 0, 0, 1, 1};
    const int fa2_env = G->tune.attn_fa2;
    G->tune.attn_fa2 = fa2;
    timer tm = timer_new();
    float ms[9];
    for (int i = -2; i < 9; i++) {
        CKC(cudaEventRecord(tm.e0, tm.st));
        CK(G->i.attention(G, lg_tensor_2d(out, LG_F16, L, nh * hd), lg_tensor_2d(q, LG_F16, L, nh * hd), kv, &m, nh,
                          1.0f / sqrtf((float)hd)) == 0);
        CKC(cudaEventRecord(tm.e1, tm.st));
        CKC(cudaEventSynchronize(tm.e1));
        if (i >= 0)
            CKC(cudaEventElapsedTime(&ms[i], tm.e0, tm.e1));
    }
    timer_free(&tm);
    G->tune.attn_fa2 = fa2_env;
    G->i.dealloc(G, pool), G->i.dealloc(G, q), G->i.dealloc(G, out), G->i.dealloc(G, d);
    free(h);
    qsort(ms, 9, sizeof(float), cmp_f);
    return ms[4] * 1e3;
}

/* Decode attention: n_seqs one-token queries over kv_len keys each, us per launch (median of NTRIAL
 * graph replays of REPS launches, each launch on its own copy of the KV pages and metadata). */
typedef struct {
    int T, nh, hd;
    void *q, *out;
    lg_kv_view kv;
    const lg_step_meta *m;
    int copies;
} dec_ctx;
static void dec_enqueue(void *ctx, int r)
{
    const dec_ctx *c = ctx;
    CK(G->i.attention(G, lg_tensor_2d(c->out, LG_F16, c->T, c->nh * c->hd), lg_tensor_2d(c->q, LG_F16, c->T, c->nh * c->hd),
                      c->kv, &c->m[r % c->copies], c->nh, 1.0f / sqrtf((float)c->hd)) == 0);
}

static double time_decode(int n_seqs, int kv_len, int nh, int nkv, int hd)
{
    const int pt = 16, ppseq = (kv_len + pt - 1) / pt, n_pages = n_seqs * ppseq, kvdim = nkv * hd;
    const size_t blk = (size_t)pt * kvdim * 2, pb = 2 * blk, copy_bytes = (size_t)n_pages * pb;
    int copies = (int)((ROT_BYTES + copy_bytes - 1) / copy_bytes);
    if (copies < 2)
        copies = 2;
    if (copies > REPS)
        copies = REPS;
    CK((size_t)copies * copy_bytes <= ARENA_BYTES);
    const int T = n_seqs;
    const size_t nint = (size_t)5 * T + 2 + n_pages; /* pos, slot, q_indptr, kv_len, page_indptr, page_ids */
    int32_t *h = malloc(nint * 4 * copies);
    int32_t *d = G->i.alloc(G, nint * 4 * copies);
    void *q = dev_random_f16((size_t)T * nh * hd, 1.0f), *out = G->i.alloc(G, (size_t)T * nh * hd * 2);
    CK(h && d && out);
    lg_step_meta m[REPS];
    for (int c = 0; c < copies; c++) {
        int32_t *b = h + nint * c, *pos = b, *slot = pos + T, *qi = slot + T, *kvl = qi + T + 1, *pi = kvl + T,
                *pids = pi + T + 1;
        for (int s = 0; s < T; s++) pos[s] = kv_len - 1, slot[s] = 0, qi[s] = s, kvl[s] = kv_len, pi[s] = s * ppseq;
        qi[T] = T, pi[T] = n_pages;
        for (int p = 0; p < n_pages; p++) pids[p] = c * n_pages + p;
        int32_t *db = d + nint * c;
        m[c] = (lg_step_meta){.n_tokens = T, .n_seqs = T, .max_q_len = 1, .max_kv_len = kv_len, .pos = db,
                              .slot = db + T, .q_indptr = db + 2 * T, .kv_len = db + 3 * T + 1,
                              .page_indptr = db + 4 * T + 1, .page_ids = db + 5 * T + 2};
    }
    CK(G->i.upload(G, d, h, nint * 4 * copies) == 0);
    lg_kv_view kv = {arena, pb, 0, blk, pt, nkv, hd, LG_F16, 0, 0, 1, 1};
    char key[64];
    snprintf(key, sizeof key, "decode %d %d %d %d %d", n_seqs, kv_len, nh, nkv, hd);
    dec_ctx dc = {T, nh, hd, q, out, kv, m, copies};
    const double us = graph_us(key, dec_enqueue, &dc);
    G->i.dealloc(G, q), G->i.dealloc(G, out), G->i.dealloc(G, d);
    free(h);
    return us;
}

/* The integers in lo..hi of environment variable name, in order, at most max of them, into out; -1 when unset. */
static int env_ints(const char *name, int *out, int max, long lo, long hi)
{
    const char *p = getenv(name);
    if (!p)
        return -1;
    int n = 0;
    for (char *end; n < max && *p; p = end) {
        const long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v >= lo && v <= hi)
            out[n++] = (int)v;
    }
    return n;
}

int main(int argc, char **argv)
{
    int quick = 0; /* auto and cuBLAS only */
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_kernels [--quick] [--only matmul|prefill|decode]\n");
            return 2;
        }
    }
#define SECTION(name) (!only || !strcmp(only, name))
    arena = bench_setup(ARENA_BYTES);
    printf("== ceilings: device-to-device copy %.2f TB/s (read + write); cuBLAS f16 GEMM 8192^3 %.0f TFLOP/s\n",
           copy_tbs(), gemm_peak());
    fflush(stdout);

    if (SECTION("matmul")) {
    void *x = dev_random_f16((size_t)128 * 11008, 1.0f);
    void *y = G->i.alloc(G, (size_t)128 * 32000 * 4);
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
    int Ts[4] = {8, 16, 32, 64}, nt = 4;
    const int nts = env_ints("BENCH_TS", Ts, 4, 1, 128); /* e.g. "64 128": those token counts (x, y hold 128) */
    if (nts >= 0)
        nt = nts;
    int modes[7], nm = 0;
    const int streamk_env = G->tune.streamk;
    modes[nm++] = 0;
    modes[nm++] = 20; /* the default decode path for 2..64 rows (gemm_tma.cu) */
    if (!quick)
        modes[nm++] = 21, modes[nm++] = 22, modes[nm++] = 23, modes[nm++] = 24, modes[nm++] = 25;
    const char *mname[] = {"cublas", "tma v0", "tma v1", "tma v2", "tma v3", "tma v4", "tma v5"};
#define MI(mode) ((mode) < 20 ? 0 : (mode) - 19)
    const int nms = env_ints("BENCH_MODES", modes, 7, 0, 25); /* e.g. "0 23": those paths only (0 or 20..25) */
    if (nms >= 0)
        nm = nms;
    for (int m = 0; m < nm; m++)
        if (modes[m] != 0 && modes[m] < 20) {
            fprintf(stderr, "BENCH_MODES: %d is not a path (0 cuBLAS, 20..25 the TMA matmul's variants)\n", modes[m]);
            return 2;
        }
    printf("== decode matmul, f16: us per launch and TB/s of weights (median of %d graph replays of %d launches, "
           "W rotated over >= %zu MB)\n",
           NTRIAL, REPS, ROT_BYTES >> 20);
    printf("%-8s %6s %6s %2s |", "shape", "N", "K", "T");
    for (int m = 0; m < nm; m++) printf(" %14s", mname[MI(modes[m])]);
    printf("\n");
    double tot_ms[7][4] = {{0}};
    const char *pick = getenv("BENCH_MM"); /* "shape:T" (e.g. qkv:32): that case only, for profilers */
    for (int s = 0; s < 5; s++)
        for (int ti = 0; ti < nt; ti++) {
            const int T = Ts[ti], N = shapes[s].N, K = shapes[s].K;
            char here[32];
            snprintf(here, sizeof here, "%s:%d", shapes[s].name, T);
            if (pick && strcmp(pick, here))
                continue;
            printf("%-8s %6d %6d %2d |", shapes[s].name, N, K, T);
            for (int m = 0; m < nm; m++) {
                double us = time_mm(modes[m], T, N, K, shapes[s].ydt, x, y);
                tot_ms[m][ti] += us * (s == 4 ? 1 : 32) / 1e3; /* one step: 32 layers + lm_head */
                printf(" %6.1fus %4.2fT", us, (double)N * K * 2 / (us * 1e-6) * 1e-12);
            }
            printf("\n");
            fflush(stdout);
        }
    printf("one decode step's matmuls (32 layers x qkv, o, gate_up, down + lm_head), ms:\n");
    for (int ti = 0; ti < nt; ti++) {
        printf("  T=%2d:", Ts[ti]);
        for (int m = 0; m < nm; m++) printf("  %s %.3f", mname[MI(modes[m])], tot_ms[m][ti]);
        printf("\n");
    }
    G->tune.streamk = streamk_env;
    G->i.dealloc(G, x), G->i.dealloc(G, y);
    }

    if (SECTION("prefill")) {
    printf("== causal prefill attention, f16, one sequence: us and TFLOP/s (4 hd heads sum_q keys(q))\n");
    /* the lengths of tests/bench/attn_ref.py (PyTorch's SDPA backends, the outside reference) */
    const int cfg[][4] = {{1024, 32, 32, 128}, {2048, 32, 32, 128}, {2048, 32, 8, 128},
                          {4096, 32, 32, 128}, {8192, 32, 32, 128}, {16384, 32, 32, 128}};
    for (int c = 0; c < (int)(sizeof cfg / sizeof *cfg); c++) {
        const int L = cfg[c][0], nh = cfg[c][1], nkv = cfg[c][2], hd = cfg[c][3];
        const double flop = 4.0 * hd * nh * ((double)L * (L + 1) / 2);
        const double t_fa2 = time_prefill(1, L, nh, nkv, hd);
        printf("  L=%d heads %d/%d hd %d: fa2 %.1f us %.0f TFLOP/s", L, nh, nkv, hd, t_fa2,
               flop / (t_fa2 * 1e-6) * 1e-12);
        if (L <= 4096) { /* the wmma baseline is slow past that */
            const double t_wmma = time_prefill(0, L, nh, nkv, hd);
            printf(" | wmma %.1f us %.0f TFLOP/s", t_wmma, flop / (t_wmma * 1e-6) * 1e-12);
        }
        printf("\n");
        fflush(stdout);
    }
    }

    if (SECTION("decode")) {
        printf("== decode attention, f16, one query token per sequence: us per launch and TB/s of K/V read\n");
        const int dc[][5] = {{32, 192, 32, 32, 128}, {1, 256, 32, 32, 128}, {32, 2048, 32, 8, 128}, {1, 32768, 32, 8, 128}};
        for (int c = 0; c < 4; c++) {
            const int ns = dc[c][0], L = dc[c][1], nh = dc[c][2], nkv = dc[c][3], hd = dc[c][4];
            const double us = time_decode(ns, L, nh, nkv, hd), bytes = 2.0 * ns * L * nkv * hd * 2;
            printf("  %d seqs x %d keys, heads %d/%d hd %d: %.1f us %.2f TB/s\n", ns, L, nh, nkv, hd, us,
                   bytes / (us * 1e-6) * 1e-12);
            fflush(stdout);
        }
    }
    CK(G->i.sync(G) == 0);
    G->i.dealloc(G, arena);
    lg_backend_free(G);
    return 0;
}
