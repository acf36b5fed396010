/*
 * bench_util.h — shared pieces of the GPU microbenchmarks (bench_gemv.c,
 * bench_sgmv.c): a fixed-seed RNG, check macros that stop the benchmark with
 * file:line, random f16 device buffers, a float comparator for medians.
 * Benchmarks are programs, not library code: exiting on a failed check is fine.
 * Each including file defines `static lg_backend *G;` before including this.
 */
#ifndef LG_BENCH_UTIL_H
#define LG_BENCH_UTIL_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/backend/backend.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define CK(x)                                                                                    \
    do {                                                                                         \
        if (!(x)) {                                                                              \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                        \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define CKC(x)                                                                                   \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* n random f16 values in [-amp, amp) on the device of backend G. */
static void *dev_random_f16(size_t n, float amp)
{
    float *f = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    CK(f && h);
    for (size_t i = 0; i < n; i++) f[i] = amp * ((float)(rnd64() >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    lg_from_f32(h, LG_F16, f, n);
    void *d = G->i.alloc(G, n * 2);
    CK(d && G->i.upload(G, d, h, n * 2) == 0);
    free(f), free(h);
    return d;
}

/* Creates the f16 CUDA backend in G and returns an arena of `bytes` (a
 * multiple of 64 MB) filled with random f16 (|v| < 0.02): the weights the
 * benchmark rotates through, so L2 cannot hold them. Exits on failure. */
static char *bench_setup(size_t bytes)
{
    lg_err err = {0};
    lg_backend_opts o = {0};
    o.act_dtype_hint = LG_F16;
    if (lg_backend_create("cuda", &o, &G, &err) != 0) {
        fprintf(stderr, "cuda backend: %s\n", err.msg);
        exit(2);
    }
    char *arena = G->i.alloc(G, bytes);
    CK(arena);
    const size_t chunk = (size_t)64 << 20;
    void *seed = dev_random_f16(chunk / 2, 0.02f);
    for (size_t off = 0; off < bytes; off += chunk) CK(G->i.copy(G, arena + off, seed, chunk) == 0);
    G->i.dealloc(G, seed);
    return arena;
}

/* Copies of a weight matrix of wbytes to rotate through (rot bytes of them, at least 2, so L2 holds none between
 * launches), each in a 4 KB-aligned slot of *slot bytes; checked against the arena's size. */
static inline int rot_copies(size_t wbytes, size_t rot, size_t arena_bytes, size_t *slot)
{
    *slot = (wbytes + 4095) / 4096 * 4096;
    int copies = (int)((rot + wbytes - 1) / wbytes);
    if (copies < 2)
        copies = 2;
    CK((size_t)copies * *slot <= arena_bytes);
    return copies;
}

static inline int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#endif
