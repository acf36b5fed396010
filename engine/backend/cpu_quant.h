/*
 * cpu_quant.h — the CPU backend's quantized-weight kernels: the on-the-fly
 * quantization of activations, the dot product of each block layout
 * (lg_qtype, backend.h) against quantized activations, and the decode of a
 * row of blocks to f32. One table of them per instruction set, picked at
 * run time (cpu_features.h):
 *
 *   cpu_quant_c.c        portable C: the reference every other set is tested against
 *   cpu_quant_avx2.c     AVX2 + FMA + F16C (u8 x s8 products: vpmaddubsw)
 *   cpu_quant_avx512.c   AVX-512 F/BW/VL/DQ + VNNI (u8 x s8 products: vpdpbusd)
 *   (both x86 sets are one template, cpu_quant_x86.h, over those two products)
 *
 * Activations are quantized as llama.cpp quantizes them (8 bits, a float
 * scale per block): a row of K floats becomes
 *   - for the 32-element layouts (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): K / 32
 *     lg_q8a blocks, x[i] ~ d * qs[i], d = max|x| / 127, s = d * sum(qs);
 *   - for the K-quants (Q2_K..Q6_K): K / 256 lg_q8k blocks, the same with
 *     bsums[j] = the sum of qs[16 j .. 16 j + 15].
 * qs = nearbyint(x * (1 / d)) (round half to even) in every set.
 *
 * Semantics of dot (a tile of nr <= LG_QROWS weight rows, ldw bytes apart,
 * against nt <= LG_QTOKS activation rows of nb blocks, ldxq bytes apart):
 *   out[t * ldo + r] = sum_i dequant(W_r)[i] * (d_x(i) * qs_x(t)[i])     i < nb * block_elems
 * computed with exact integer sums per block (sub-block for K-quants) and
 * float scales, as ggml's vec_dot_*_q8_* do. Each output is bit for bit the
 * same whatever nr and nt and whichever tile it is in (the same float
 * operations in the same order for each pair), so a matmul's results do not depend on
 * how many tokens share a step or how rows are split over threads: a
 * request's tokens are the same in any batch.
 *
 * dequant(w, y, n): y[0, n) = the row's values (n a multiple of the block),
 * the same floats as ggml's dequantize_row_* (and gguf-py).
 */
#ifndef LG_CPU_QUANT_H
#define LG_CPU_QUANT_H

#include "engine/backend/backend.h"

#define LG_QA_BLOCK 32  /* elements of an lg_q8a */
#define LG_QK_BLOCK 256 /* elements of an lg_q8k */

#define LG_QROWS 4   /* most weight rows of one dot call */
#define LG_QTOKS 4   /* most activation rows of one dot call */

typedef struct lg_q8a {
    float d;       /* scale: x ~ d * qs */
    float s;       /* d * sum of qs (the offset and min terms of the weights) */
    int8_t qs[LG_QA_BLOCK];
} lg_q8a;

typedef struct lg_q8k {
    float d;
    int16_t bsums[LG_QK_BLOCK / 16]; /* sums of 16 consecutive qs */
    int8_t qs[LG_QK_BLOCK];
} lg_q8k;

typedef void (*lg_qdot_fn)(const void *w, size_t ldw, int nr, const void *xq, size_t ldxq, int nt, int64_t nb,
                           float *out, int64_t ldo);
typedef void (*lg_qdeq_fn)(const void *w, float *y, int64_t n);

typedef struct lg_qkern {
    const char *isa; /* "c", "avx2", "avx512vnni" */
    /* a row of k floats (k a multiple of the block) to k / 32 or k / 256 blocks */
    void (*quant_a)(const float *x, lg_q8a *y, int64_t k);
    void (*quant_k)(const float *x, lg_q8k *y, int64_t k);
    lg_qdot_fn dot[LG_QTYPE_COUNT];   /* [LG_QNONE] unused */
    lg_qdeq_fn deq[LG_QTYPE_COUNT];
} lg_qkern;

/* Whether layout q's dot takes lg_q8k activations (the K-quants) rather than lg_q8a. */
static inline bool lg_qtype_is_k(lg_qtype q) { return q >= LG_Q2_K && q <= LG_Q6_K; }

/* The tables: lg_qkern_c always; the x86 ones are NULL where they were not
 * built (another architecture). Use only what lg_cpu_isa() allows. */
const lg_qkern *lg_qkern_c(void);
const lg_qkern *lg_qkern_avx2(void);
const lg_qkern *lg_qkern_avx512(void);

/* The best table this CPU and OS run (cpu_features.h), decided once. */
const lg_qkern *lg_qkern_best(void);
/* A table by name ("c", "avx2", "avx512vnni"), NULL if not built or not runnable here. */
const lg_qkern *lg_qkern_by_name(const char *isa);

#endif
