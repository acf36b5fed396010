/*
 * lora_expand.cu — SGMV expand: each segment's shrunk rows times its
 * adapter's B, scaled and accumulated into y.
 *
 *   for s < n_segs, w = lm->w[s * n_slots + slot], w.rank > 0:
 *     for t in [seg_indptr[s], seg_indptr[s+1]), n < y.cols:
 *       y[t, n] = round(y[t, n] + w.scale * sum_{j < w.rank} tmp[t, j] * float(w.B[n, j]))
 * y may be a column slice of a fused output (stride > cols).
 *
 * Memory-bound: B ([out, rank], act dtype, in pool pages) is read once per
 * tile of TT tokens; decode (one-token segments) reads each adapter's B
 * once, 128 KB per rank-16 module, against 8 KB of y per token.
 * Vector path (rank % 8 == 0, B 16-byte aligned): a B row is rank/8 16-byte
 * words; lpr = that rounded up to a power of two lanes share one row (rank
 * 16: 2 lanes, rank 64: 8), so one warp load instruction covers 32/lpr
 * consecutive rows, fully coalesced, and each lane issues U such loads
 * before any arithmetic (plus the y values it will update). Each lane dots
 * its 8 B values with the matching 8 tmp values (registers, f32), the lpr
 * lanes of a row combine by xor shuffles, and the row's first lane writes
 * y[t, n] = round(y + scale * acc) for the tile's tokens.
 * Block = (EX_WARPS warps x 32/lpr(max_rank) x U output columns, segment,
 * token tile); a segment of smaller rank loops inside its block. With
 * rank 16, U = 8 that is 1024 columns, 32 KB of B per block: a q,k,v
 * decode launch over 32 adapters is 384 blocks, all resident at once.
 * TT = 1 for decode (U = 8), TT = 4 (U = 4) for segments of 2-4 tokens.
 * The decode form is built for three blocks an SM (__launch_bounds__ min
 * blocks 3: 80 registers, no spills; 117 without), so that a W1 q,k,v
 * launch's 384 blocks (W3's gate,up: 352) are all resident in one wave and
 * all of them load their B rows before pdl_wait; at two an SM the last 120
 * formed a second wave that read B only after the matmul before had ended.
 * H100: W1 6.761 -> 6.738 ms a step, W3 7.066 -> 6.941, W2 11.85 -> 11.65
 * (four blocks an SM, 64 registers with spills: W1 +0.4 ms; docs/benchmarks.md,
 * Tried, not kept, 2026-11-27).
 * Longer segments (prefill) take the tile kernel (lora_expand_tile_kernel,
 * below): 32-token tiles, B rows in registers, 4, 2 or 1 columns per thread
 * at step ranks up to 16, 32 or 64; beyond that, or with LG_SGMV_PREFILL=0
 * (benchmarks), TT = 8 tiles with a thread per output column: tmp tile in shared memory
 * (f32), the column's B row 16 bytes at a time, TT accumulators; y traffic
 * dominates there and a warp touches 64 consecutive bytes of each y row.
 * Both sum each column's rank terms in order, so they give the same bits.
 * Programmatic dependent launch (cuda_common.cuh): the weight table, the
 * segment bounds and the warp's first U rows of B are read before
 * pdl_wait, tmp and y after; the decode kernel reads B with an L2
 * evict_first policy (LG_L2_HINT bit 2, cuda_common.cuh).
 * Multi-slot form (cu_lora_expand_multi): k outputs in one launch; grid.x
 * is the concatenation of each output's column blocks, and slot i reads
 * tmp columns from i * max_rank. The single-slot op is the k = 1 case.
 * Store form (cu_lora_expand_store, matmul_lora's prefill order: the
 * matmul adds x W^T into y afterwards): y[t, n] = round(w.scale * sum),
 * zeros in the rows of segments without rank at the slot; only for launches
 * the tile kernel would take (prefill-shaped, step ranks <= 64), on tensor
 * cores (lora_expand_mma_kernel: tmp rounded to the activation dtype, as
 * peft computes lora_A's output; not the accumulate form's bits).
 * Rope form (cu_lora_expand_rope, matmul_lora's q,k,v with rope: decode
 * steps, every segment one token): the decode kernel with ROPE set also
 * does rope_kv_write's work for its block's columns, so that a decode
 * layer has one launch fewer. The block's rounded y values go to shared
 * memory instead of y (rank-0 rows, no adapter at the slot: y as the
 * matmul left it), then a q or k block rotates its heads' pairs (the
 * block's columns are whole heads: cpb % head_dim == 0) with rope_cos_sin
 * (before pdl_wait) and rope_rotate, as rope_kv.cu does, and stores them
 * to y, a k block also to the token's K slot; a v block stores y and the
 * V slot (ex_rope_store; 8 elements a thread, 16-byte stores). Results
 * equal the expand followed by rope_kv_write bit for bit (op tests).
 * H100: W1 -0.077 ms a step (6 pairs); W3 and W2 within their spread. A form that
 * kept no values in shared memory (y stored, the block synced, then
 * re-read from y) was slower than the two launches (docs/benchmarks.md,
 * Tried, not kept, 2026-11-27).
 * LG_EXPAND_ROPE=0: not taken (matmul_lora runs the two launches).
 */
#include "kernels/mma.cuh"
#include "kernels/ops.cuh"

#define EX_THREADS 256
#define EX_WARPS (EX_THREADS / 32)
#define EX_RMAX 256 /* largest rank (32 lanes x 8 elements per row) */


template <typename T> struct ex_outs {
    T *y[LG_LORA_MULTI_MAX];
    int64_t ldy[LG_LORA_MULTI_MAX];
    int cols[LG_LORA_MULTI_MAX];
    int slot[LG_LORA_MULTI_MAX];
    int bstart[LG_LORA_MULTI_MAX + 1]; /* first column block of each output; bstart[k] = gridDim.x */
    int k;
    int col_off; /* tmp column offset between slots (max_rank) */
    int cpb;     /* output columns per block */
    int hint;    /* the decode kernel reads B with L2 evict_first (LG_L2_HINT bit 2, cuda_common.cuh) */
};

#define EX_ROPE_COLS 2048 /* largest cpb of the decode form (max_rank <= 8) */
#define EX_ROPE_HD 256    /* largest head_dim of the rope form */

/* The rope form's epilogue: ys holds the block's rounded y values of columns [c0, c1) of output
 * si (0 q, 1 k, 2 v) of token t (y: that token's row), cs its cos | sin. 8 elements a thread and
 * pass, 16-byte stores (the plan checked alignment). */
template <typename T>
__device__ __forceinline__ void ex_rope_store(T *y, int si, int c0, int c1, const float *ys, const float *cs,
                                              const lg_rope_kv &rp, int64_t t)
{
    const int32_t sl = rp.slot[t];
    const lg_kv_view &kv = rp.kv;
    T *dst = sl >= 0 ? (T *)(kv_slot_row((char *)kv.base, kv.page_bytes, kv.page_tokens,
                                         (size_t)rp.n_kv_heads * rp.head_dim * sizeof(T), sl) +
                             (si == 1 ? kv.k_off : kv.v_off))
                     : NULL;
    const int n = c1 - c0;
    if (si == 2) {
        for (int i = threadIdx.x * 8; i < n; i += EX_THREADS * 8) {
            const uint4 u = pack8<T>(&ys[i]);
            *(uint4 *)(y + c0 + i) = u;
            if (dst)
                *(uint4 *)(dst + c0 + i) = u;
        }
        return;
    }
    const int half = rp.head_dim / 2;
    for (int j = threadIdx.x * 8; j < n / 2; j += EX_THREADS * 8) {
        const int d = j % half, a = j / half * rp.head_dim + d;
        float ra[8], rb[8];
#pragma unroll
        for (int e = 0; e < 8; e++) rope_rotate(ys[a + e], ys[a + half + e], cs[d + e], cs[half + d + e], &ra[e], &rb[e]);
        const uint4 ua = pack8<T>(ra), ub = pack8<T>(rb);
        *(uint4 *)(y + c0 + a) = ua;
        *(uint4 *)(y + c0 + a + half) = ub;
        if (si == 1 && dst)
            *(uint4 *)(dst + c0 + a) = ua, *(uint4 *)(dst + c0 + a + half) = ub;
    }
}

/* The output block blockIdx.x serves (its index si, row stride, columns, first column block)
 * and the weights of segment blockIdx.y at that output's slot; plain selects keep o in parameter
 * space (no dynamic index: local memory). */
template <typename T>
__device__ __forceinline__ T *ex_block(const ex_outs<T> &o, const lg_lora_w *w, int n_slots, int *si_, int64_t *ldy,
                                       int *cols, int *b0, lg_lora_w *lw)
{
    int si = 0;
#pragma unroll
    for (int i = 1; i < LG_LORA_MULTI_MAX; i++)
        if (i < o.k && (int)blockIdx.x >= o.bstart[i]) si = i;
    T *y = o.y[0];
    int slot = o.slot[0];
    *ldy = o.ldy[0], *cols = o.cols[0], *b0 = o.bstart[0];
#pragma unroll
    for (int i = 1; i < LG_LORA_MULTI_MAX; i++)
        if (si == i) y = o.y[i], *ldy = o.ldy[i], *cols = o.cols[i], slot = o.slot[i], *b0 = o.bstart[i];
    *si_ = si;
    *lw = w[(size_t)(int)blockIdx.y * n_slots + slot];
    return y;
}

template <typename T, typename TT_, int TT, int U, int MINB = 1, bool ROPE = false>
__global__ void __launch_bounds__(EX_THREADS, MINB)
    lora_expand_kernel(ex_outs<T> o, const TT_ *tmp, int64_t ldt, const int32_t *seg_indptr, const lg_lora_w *w,
                       int n_slots, lg_rope_kv rp)
{
    static_assert(!ROPE || TT == 1, "the rope form is the one-token form");
    __shared__ float rys[ROPE ? EX_ROPE_COLS : 1]; /* the rope form: the block's rounded y values */
    __shared__ float rcs[ROPE ? EX_ROPE_HD : 1];   /* and its token's cos | sin */
    pdl_trigger();
    int si, cols, b0;
    int64_t ldy;
    lg_lora_w lw;
    T *y = ex_block(o, w, n_slots, &si, &ldy, &cols, &b0, &lw);
    const int s = blockIdx.y;
    const int r = lw.rank;
    int t0, nt;
    if ((!ROPE && r <= 0) || !sgmv_tile(seg_indptr, s, blockIdx.z, TT, &t0, &nt))
        return;
    const TT_ *tt = tmp + (int64_t)t0 * ldt + (int64_t)si * o.col_off; /* [nt, r], stride ldt */
    y += (int64_t)t0 * ldy;                                             /* [nt, cols], stride ldy */
    const int c0 = (blockIdx.x - b0) * o.cpb, c1 = min(c0 + o.cpb, cols);
    const T *B = (const T *)lw.B;
    const float scale = lw.scale;
    if (ROPE && si < 2) /* positions and frequencies are step metadata: before pdl_wait */
        for (int i = threadIdx.x; i < rp.head_dim / 2; i += EX_THREADS)
            rope_cos_sin((float)rp.pos[t0], rp.inv_freq[i], &rcs[i], &rcs[rp.head_dim / 2 + i]);

    if (ROPE && r <= 0) { /* no adapter at this slot: y as the matmul left it */
        pdl_wait();
        for (int n = c0 + threadIdx.x; n < c1; n += EX_THREADS) rys[n - c0] = to_f32(y[n]);
    } else if (TT <= 4 && r % 8 == 0 && cu_aligned16(B)) {
        const int cpr = r / 8; /* 16-byte words per B row */
        int lg = 0;
        while ((1 << lg) < cpr) lg++;
        const int lpr = 1 << lg, rpi = 32 >> lg; /* lanes per row, rows per load instruction */
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int part = lane & (lpr - 1), rowl = lane >> lg;
        const bool active = part < cpr;
        /* the warp's first U rows of B (adapter weights: no kernel writes
         * them) are loaded before pdl_wait; tmp and y after */
        int n0 = c0 + warp * rpi * U;
        const uint64_t pol = o.hint ? l2_policy_first() : 0;
        uint4 bu[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int n = n0 + u * rpi + rowl;
            bu[u] = active && n < c1 ? ld_weight16(B + (size_t)n * r + part * 8, o.hint, pol) : make_uint4(0, 0, 0, 0);
        }
        pdl_wait();
        float tv[TT][8];
#pragma unroll
        for (int i = 0; i < TT; i++)
#pragma unroll
            for (int e = 0; e < 8; e++)
                tv[i][e] = active && i < nt ? to_f32(tt[(int64_t)i * ldt + part * 8 + e]) : 0.0f;
        for (bool first = true; n0 < c1; n0 += EX_WARPS * rpi * U, first = false) {
            float yv[TT][U];
            if (!first) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int n = n0 + u * rpi + rowl;
                    bu[u] = active && n < c1 ? ld_weight16(B + (size_t)n * r + part * 8, o.hint, pol) : make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int i = 0; i < TT; i++)
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int n = n0 + u * rpi + rowl;
                    yv[i][u] = part == 0 && i < nt && n < c1 ? to_f32(y[(int64_t)i * ldy + n]) : 0.0f;
                }
            float acc[TT][U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float bf[8];
                unpack8<T>(bu[u], bf);
#pragma unroll
                for (int i = 0; i < TT; i++) {
                    float a = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; e++) a += tv[i][e] * bf[e];
                    acc[i][u] = a;
                }
            }
            for (int off = 1; off < lpr; off <<= 1)
#pragma unroll
                for (int i = 0; i < TT; i++)
#pragma unroll
                    for (int u = 0; u < U; u++) acc[i][u] += __shfl_xor_sync(0xffffffffu, acc[i][u], off);
            if (part == 0) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int n = n0 + u * rpi + rowl;
#pragma unroll
                    for (int i = 0; i < TT; i++)
                        if (i < nt && n < c1) {
                            const T v = from_f32<T>(yv[i][u] + scale * acc[i][u]);
                            if (ROPE)
                                rys[n - c0] = to_f32(v);
                            else
                                y[(int64_t)i * ldy + n] = v;
                        }
                }
            }
        }
    } else {
        /* thread per output column (TT = 8 tiles, odd ranks, unaligned B); tmp tile in shared memory */
        __shared__ float ts[TT][EX_RMAX];
        pdl_wait();
        for (int i = threadIdx.x; i < TT * r; i += EX_THREADS) {
            const int ti = i / r, j = i % r;
            ts[ti][j] = ti < nt ? to_f32(tt[(int64_t)ti * ldt + j]) : 0.0f;
        }
        __syncthreads();
        const bool bvec = r % 8 == 0 && cu_aligned16(B);
        for (int n = c0 + threadIdx.x; n < c1; n += EX_THREADS) {
            const T *b = B + (size_t)n * r;
            float acc[TT];
#pragma unroll
            for (int i = 0; i < TT; i++) acc[i] = 0.0f;
            if (bvec) {
#pragma unroll 4
                for (int j = 0; j < r; j += 8) {
                    float bf[8];
                    unpack8<T>(*(const uint4 *)(b + j), bf);
#pragma unroll
                    for (int i = 0; i < TT; i++)
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[i] += ts[i][j + e] * bf[e];
                }
            } else {
                for (int j = 0; j < r; j++) {
                    const float bf = to_f32(b[j]);
#pragma unroll
                    for (int i = 0; i < TT; i++) acc[i] += ts[i][j] * bf;
                }
            }
#pragma unroll
            for (int i = 0; i < TT; i++) {
                if (i < nt) {
                    T *p = y + (int64_t)i * ldy + n;
                    const T v = from_f32<T>(to_f32(*p) + scale * acc[i]);
                    if (ROPE)
                        rys[n - c0] = to_f32(v);
                    else
                        *p = v;
                }
            }
        }
    }
    if (ROPE) {
        __syncthreads();
        ex_rope_store(y, si, c0, c1, rys, rcs, rp, t0);
    }
}

/* CPT adjacent values of a row as one access of 2 CPT bytes. */
template <typename T, int CPT> struct __align__(2 * CPT) ex_vec { T v[CPT]; };

/* Multi-token segments (prefill) unless LG_SGMV_PREFILL=0: block = (EX_THREADS threads x CPT
 * adjacent output columns, segment, tile of EXT_TM tokens). A thread holds its columns' B rows
 * (RM floats each: the step's largest rank rounded up to 8, 16, 32 or 64; CPT = 4, 2, 1 columns
 * by RM) in registers, loaded before pdl_wait, and the tile's tmp rows sit in shared memory. Each (token, column) sum runs
 * j = 0 .. rank - 1 in order from 0 with one accumulator, then y = round(y + scale * sum): the
 * arithmetic of the 8-token path above, so both give the same bits (the op tests compare them).
 * B is read once per 32 tokens instead of once per 8, a warp's y accesses are 64 CPT contiguous
 * bytes of a row (y_vec: aligned groups of CPT), and EXT_U tokens' y loads are issued before their
 * sums (at 4 tokens and CPT 2 the kernel streamed ~1 TB/s: too few bytes in flight). Launched when
 * it makes at least 2 blocks per SM; smaller steps keep the 8-token tiles. */
#define EXT_TM 32
#define EXT_U 8 /* tokens whose y loads are in flight together */
template <typename T, typename TT_, int RM, int CPT>
__global__ void __launch_bounds__(EX_THREADS, 2) /* two blocks per SM: <= 128 registers */
    lora_expand_tile_kernel(ex_outs<T> o, const TT_ *tmp, int64_t ldt, const int32_t *seg_indptr, const lg_lora_w *w,
                            int n_slots, bool y_vec)
{
    __shared__ __align__(16) float ts[EXT_TM][RM];
    pdl_trigger();
    int si, cols, b0;
    int64_t ldy;
    lg_lora_w lw;
    T *y = ex_block(o, w, n_slots, &si, &ldy, &cols, &b0, &lw);
    const int s = blockIdx.y;
    const int r = lw.rank; /* <= RM (the host's bound) */
    int t0, nt;
    if (r <= 0 || !sgmv_tile(seg_indptr, s, blockIdx.z, EXT_TM, &t0, &nt))
        return;
    const TT_ *tt = tmp + (int64_t)t0 * ldt + (int64_t)si * o.col_off; /* [nt, r], stride ldt */
    y += (int64_t)t0 * ldy;                                             /* [nt, cols], stride ldy */
    const int n = (blockIdx.x - b0) * o.cpb + threadIdx.x * CPT;        /* this thread's first column */
    const T *B = (const T *)lw.B;
    const float scale = lw.scale;
    /* B rows of the thread's columns (adapter weights: no kernel writes them) before pdl_wait */
    const bool bvec = r % 8 == 0 && cu_aligned16(B);
    float bv[CPT][RM];
#pragma unroll
    for (int q = 0; q < CPT; q++)
#pragma unroll
        for (int jb = 0; jb < RM; jb += 8) {
            const T *b = B + (size_t)(n + q) * r + jb;
            if (jb < r && n + q < cols && bvec) {
                unpack8<T>(*(const uint4 *)b, &bv[q][jb]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) bv[q][jb + e] = jb + e < r && n + q < cols ? to_f32(b[e]) : 0.0f;
            }
        }
    pdl_wait();
    for (int i = threadIdx.x; i < EXT_TM * RM; i += EX_THREADS) {
        const int ti = i / RM, j = i % RM;
        ts[ti][j] = ti < nt && j < r ? to_f32(tt[(int64_t)ti * ldt + j]) : 0.0f;
    }
    __syncthreads();
    if (n >= cols)
        return;
    const bool pair = CPT > 1 && y_vec && n + CPT <= cols;
    for (int i0 = 0; i0 < nt; i0 += EXT_U) {
        float yv[EXT_U][CPT];
#pragma unroll
        for (int u = 0; u < EXT_U; u++) {
            const T *p = y + (int64_t)(i0 + u) * ldy + n;
            if (i0 + u >= nt) {
#pragma unroll
                for (int q = 0; q < CPT; q++) yv[u][q] = 0.0f;
            } else if (pair) {
                const ex_vec<T, CPT> v = *(const ex_vec<T, CPT> *)p;
#pragma unroll
                for (int q = 0; q < CPT; q++) yv[u][q] = to_f32(v.v[q]);
            } else {
#pragma unroll
                for (int q = 0; q < CPT; q++) yv[u][q] = n + q < cols ? to_f32(p[q]) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < EXT_U; u++) {
            const int i = i0 + u;
            if (i >= nt)
                break;
            float acc[CPT];
#pragma unroll
            for (int q = 0; q < CPT; q++) acc[q] = 0.0f;
#pragma unroll
            for (int jb = 0; jb < RM; jb += 8)
                if (jb < r) {
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        if (jb + e < r)
#pragma unroll
                            for (int q = 0; q < CPT; q++) acc[q] += ts[i][jb + e] * bv[q][jb + e];
                }
            T *p = y + (int64_t)i * ldy + n;
            if (pair) {
                ex_vec<T, CPT> v;
#pragma unroll
                for (int q = 0; q < CPT; q++) v.v[q] = from_f32<T>(yv[u][q] + scale * acc[q]);
                *(ex_vec<T, CPT> *)p = v;
            } else {
#pragma unroll
                for (int q = 0; q < CPT; q++)
                    if (n + q < cols)
                        p[q] = from_f32<T>(yv[u][q] + scale * acc[q]);
            }
        }
    }
}

template <typename T, typename TT_, int RM, int CPT>
static void launch_tile(cuda_ctx *c, const ex_outs<T> &o, lg_tensor tmp, const lg_lora_meta *lm, int max_seg,
                        bool y_vec)
{
    const dim3 grid((unsigned)o.bstart[o.k], (unsigned)lm->n_segs, (unsigned)((max_seg + EXT_TM - 1) / EXT_TM));
    (void)cu_launch(c, lora_expand_tile_kernel<T, TT_, RM, CPT>, grid, EX_THREADS, 0, o, (const TT_ *)tmp.data,
                    tmp.stride, lm->seg_indptr, lm->w, lm->n_slots, y_vec);
}

/* The store form (cu_lora_expand_store: y = the expand, for matmul_lora's prefill order) on
 * tensor cores. Block = (EXM_WARPS warps x EXM_COLS output columns each, segment, TPB tiles of
 * EXM_TOK = 32 tokens: TPB = 4, 2 or 1 at ranks <= 16, the most that keep the grid at 6 or more
 * blocks per SM, so that B's fragments serve more tokens: W1's q,k,v launch 51.8 -> 45.8 us, W2's
 * 215.7 -> 167.5; docs/benchmarks.md, GPU kernels, 2026-11-27). Per tile, the block stages the
 * tile's tmp rows in shared memory as the activation dtype (tmp rounded, as peft computes
 * lora_A's output; zeros past the segment's rank and tokens); a warp holds the B fragments of its 8 n8 column tiles (KS k16
 * steps: the step's rank rounded up to 16, zeros past the rank), loaded before pdl_wait, runs
 * mma.sync m16n8k16 per column tile and puts scale x the f32 sums, rounded, into a shared output
 * tile, which the block then stores 16 bytes per lane, whole rows of 512 bytes. Rows of a segment
 * without rank at the slot get zeros. The flops are negligible; the kernel streams y's stores. */
#define EXM_WARPS 4
#define EXM_COLS 64
#define EXM_TOK 32
#define EXM_BC (EXM_WARPS * EXM_COLS) /* columns per block */
template <typename T> __device__ __forceinline__ uint32_t exm_pack(float a, float b)
{
    const T h[2] = {from_f32<T>(a), from_f32<T>(b)};
    return *(const uint32_t *)h;
}
template <typename T, typename TT_, int KS, int TPB = 1>
__global__ void __launch_bounds__(EXM_WARPS * 32)
    lora_expand_mma_kernel(ex_outs<T> o, const TT_ *tmp, int64_t ldt, const int32_t *seg_indptr, const lg_lora_w *w,
                           int n_slots, bool y_vec)
{
    constexpr int RK = 16 * KS, TLD = RK + 8, OLD = EXM_BC + 8; /* padded rows: conflict-free fragments */
    __shared__ __align__(16) T ts[EXM_TOK][TLD];
    __shared__ __align__(16) T os[EXM_TOK][OLD];
    pdl_trigger();
    int si, cols, b0;
    int64_t ldy;
    lg_lora_w lw;
    T *y = ex_block(o, w, n_slots, &si, &ldy, &cols, &b0, &lw);
    const int s = blockIdx.y;
    const int r = lw.rank; /* <= RK (the host's bound) */
    int t0, nt;
    if (!sgmv_tile(seg_indptr, s, blockIdx.z * TPB, EXM_TOK, &t0, &nt))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c2 = (lane & 3) * 2;
    const int c0 = (blockIdx.x - b0) * EXM_BC, n0 = c0 + warp * EXM_COLS;
    const T *B = (const T *)lw.B;
    const float scale = r > 0 ? lw.scale : 0.0f;
    const bool b32 = r % 2 == 0 && ((uintptr_t)B & 3) == 0;
    uint32_t bf[8][KS][2]; /* B[n][k], B[n][k + 1] for n = n0 + 8 j + g, k = 16 ks + c2 (+ 8) */
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int n = n0 + 8 * j + g, k = 16 * ks + c2 + 8 * h;
                const T *p = B + (size_t)n * r + k;
                uint32_t v = 0;
                if (n < cols && k < r)
                    v = b32 ? *(const uint32_t *)p : exm_pack<T>(to_f32(p[0]), k + 1 < r ? to_f32(p[1]) : 0.0f);
                bf[j][ks][h] = v;
            }
    pdl_wait();
    for (int tz = 0; tz < TPB; tz++) { /* the block's TPB token tiles, B's fragments loaded once */
        if (tz > 0) {
            if (!sgmv_tile(seg_indptr, s, blockIdx.z * TPB + tz, EXM_TOK, &t0, &nt))
                break;
            __syncthreads(); /* every thread is done with ts and os of the tile before */
        }
        const TT_ *tt = tmp + (int64_t)t0 * ldt + (int64_t)si * o.col_off; /* [nt, r], stride ldt */
        for (int i = threadIdx.x; i < EXM_TOK * RK; i += EXM_WARPS * 32) {
            const int row = i / RK, k = i % RK;
            ts[row][k] = from_f32<T>(row < nt && k < r ? to_f32(tt[(int64_t)row * ldt + k]) : 0.0f);
        }
        __syncthreads();
        uint32_t af[2][KS][4]; /* rows 16 m + g (+ 8), k = 16 ks + c2 (+ 8): the m16n8k16 A fragment */
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    af[m][ks][q] = *(const uint32_t *)&ts[16 * m + g + 8 * (q & 1)][16 * ks + c2 + 8 * (q >> 1)];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int ks = 0; ks < KS; ks++) cu_mma16816<T>(d[m], af[m][ks], bf[j][ks][0], bf[j][ks][1]);
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    *(uint32_t *)&os[16 * m + g + 8 * h][warp * EXM_COLS + 8 * j + c2] =
                        exm_pack<T>(scale * d[m][2 * h], scale * d[m][2 * h + 1]);
        }
        __syncthreads();
        /* the tile's rows, 8 columns (16 bytes) per lane and step */
        for (int q = threadIdx.x; q < EXM_TOK * (EXM_BC / 8); q += EXM_WARPS * 32) {
            const int row = q / (EXM_BC / 8), n = c0 + (q % (EXM_BC / 8)) * 8;
            if (row >= nt || n >= cols)
                continue;
            T *p = y + (int64_t)(t0 + row) * ldy + n;
            const T *v = &os[row][n - c0];
            if (y_vec && n + 8 <= cols) {
                *(uint4 *)p = *(const uint4 *)v;
            } else {
                for (int e = 0; e < 8 && n + e < cols; e++) p[e] = v[e];
            }
        }
    }
}

template <typename T, typename TT_>
static void launch_mma(cuda_ctx *c, const ex_outs<T> &o, lg_tensor tmp, const lg_lora_meta *lm, int max_seg, int ks,
                       bool y_vec)
{
    /* token tiles a block at ranks <= 16: the most of 4, 2, 1 that keep the grid at >= 6 blocks per SM
     * (W1's prefill: 4 for q,k,v, 2 for o; bench_sgmv, docs/benchmarks.md, GPU kernels, 2026-11-27);
     * LG_EXM_TPB=1|2|4 forces one (tests) */
    int tpb = ks == 1 ? c->tune->exm_tpb : 1;
    if (tpb != 1 && tpb != 2 && tpb != 4) {
        tpb = 4;
        while (tpb > 1 && cu_lora_tiles(lm, EXM_TOK * tpb) * o.bstart[o.k] < 6 * (int64_t)c->n_sm) tpb /= 2;
    }
    const int nz = (max_seg + EXM_TOK - 1) / EXM_TOK;
    const auto kern = tpb == 4 ? lora_expand_mma_kernel<T, TT_, 1, 4>
                    : tpb == 2 ? lora_expand_mma_kernel<T, TT_, 1, 2>
                    : ks == 1  ? lora_expand_mma_kernel<T, TT_, 1>
                    : ks == 2  ? lora_expand_mma_kernel<T, TT_, 2>
                               : lora_expand_mma_kernel<T, TT_, 4>;
    const dim3 grid((unsigned)o.bstart[o.k], (unsigned)lm->n_segs, (unsigned)((nz + tpb - 1) / tpb));
    (void)cu_launch(c, kern, grid, EXM_WARPS * 32, 0, o, (const TT_ *)tmp.data, tmp.stride, lm->seg_indptr, lm->w,
                    lm->n_slots, y_vec);
}

/* rp: the rope form (tt == 1) when rp->kv.base, else the plain expand. */
template <typename T, typename TT_>
static void launch(cuda_ctx *c, ex_outs<T> o, lg_tensor tmp, const lg_lora_meta *lm, int max_seg, int tt,
                   const lg_rope_kv *rp)
{
    const unsigned nx = (unsigned)o.bstart[o.k];
    const dim3 grid(nx, (unsigned)lm->n_segs, (unsigned)((max_seg + tt - 1) / tt));
    const TT_ *td = (const TT_ *)tmp.data;
    if (tt == 1 && rp->kv.base)
        (void)cu_launch(c, lora_expand_kernel<T, TT_, 1, 8, 3, true>, grid, EX_THREADS, 0, o, td, tmp.stride,
                        lm->seg_indptr, lm->w, lm->n_slots, *rp);
    else if (tt == 1)
        (void)cu_launch(c, lora_expand_kernel<T, TT_, 1, 8, 3>, grid, EX_THREADS, 0, o, td, tmp.stride,
                        lm->seg_indptr, lm->w, lm->n_slots, *rp);
    else if (tt == 4)
        (void)cu_launch(c, lora_expand_kernel<T, TT_, 4, 4>, grid, EX_THREADS, 0, o, td, tmp.stride, lm->seg_indptr,
                        lm->w, lm->n_slots, *rp);
    else
        (void)cu_launch(c, lora_expand_kernel<T, TT_, 8, 1>, grid, EX_THREADS, 0, o, td, tmp.stride, lm->seg_indptr,
                        lm->w, lm->n_slots, *rp);
}

/* The tile kernel's shape for this launch: *rm (the step's largest rank rounded up to 8, 16, 32
 * or 64) and *cpt columns per thread (4, 2, 1); false when the launch takes the 8-token (or smaller)
 * tiles. */
static bool ex_tile_plan(const cuda_ctx *c, const lg_tensor *ys, int k, const lg_lora_meta *lm, int max_seg, int *rm,
                         int *cpt)
{
    const int rank = cu_lora_step_rank(lm);
    *rm = rank <= 8 ? 8 : rank <= 16 ? 16 : rank <= 32 ? 32 : rank <= 64 ? 64 : 0;
    *cpt = *rm <= 16 ? 4 : *rm <= 32 ? 2 : 1;
    if (max_seg <= 4 || *rm == 0 || !cu_sgmv_prefill(c))
        return false;
    if (cu_sgmv_prefill(c) == 2) /* forced (op tests) */
        return true;
    /* at least 2 blocks per SM, else the 8-token tiles' 4x more blocks run faster (bench_sgmv) */
    int64_t cb = 0;
    for (int i = 0; i < k; i++) cb += (ys[i].cols + EX_THREADS * *cpt - 1) / (EX_THREADS * *cpt);
    return cu_lora_tiles(lm, EXT_TM) * cb >= 2 * c->n_sm;
}

/* tile, rm, cpt: ex_tile_plan's answer. store: y = the expand (not y + it), rank-0 segments' rows
 * zeroed, on tensor cores (the mma kernel); only where tile is true (prefill-shaped, ranks <= 64). */
/* Columns per block of the decode and 4-token forms: every warp one pass of U loads at max_rank. */
static int ex_cpb(const lg_lora_meta *lm, int tt)
{
    int lpr = 1;
    while (lpr * 8 < lm->max_rank) lpr *= 2;
    return EX_WARPS * (32 / lpr) * (tt == 1 ? 8 : 4);
}

template <typename T>
static void launch_t(cuda_ctx *c, const lg_tensor *ys, const int *slots, int k, lg_tensor tmp,
                     const lg_lora_meta *lm, int max_seg, bool store, bool tile, int rm, int cpt,
                     const lg_rope_kv *rp)
{
    const int tt = max_seg == 1 ? 1 : max_seg <= 4 ? 4 : 8;
    ex_outs<T> o;
    memset(&o, 0, sizeof o);
    o.k = k;
    o.col_off = lm->max_rank;
    o.cpb = store ? EXM_BC
          : tile  ? EX_THREADS * cpt
          : tt == 8 ? EX_THREADS /* TT = 8: one column per thread */
                    : ex_cpb(lm, tt);
    o.bstart[0] = 0;
    for (int i = 0; i < k; i++) {
        o.y[i] = (T *)ys[i].data;
        o.ldy[i] = ys[i].stride;
        o.cols[i] = (int)ys[i].cols;
        o.slot[i] = slots[i];
        o.bstart[i + 1] = o.bstart[i] + (int)((ys[i].cols + o.cpb - 1) / o.cpb);
    }
    o.hint = (cu_l2_hint(c) & 2) != 0;
    const bool f = tmp.dtype == LG_F32;
    if (store) {
        bool y_vec = true; /* 8 columns as one 16-byte store in every output */
        for (int i = 0; i < k; i++) y_vec = y_vec && ys[i].stride % 8 == 0 && (uintptr_t)ys[i].data % 16 == 0;
        const int ks = rm <= 16 ? 1 : rm <= 32 ? 2 : 4;
        f ? launch_mma<T, float>(c, o, tmp, lm, max_seg, ks, y_vec) : launch_mma<T, T>(c, o, tmp, lm, max_seg, ks, y_vec);
        return;
    }
    if (tile) {
        bool y_vec = true; /* aligned groups of cpt columns in every output */
        for (int i = 0; i < k; i++)
            y_vec = y_vec && ys[i].stride % cpt == 0 && (uintptr_t)ys[i].data % (2 * cpt) == 0;
        if (rm == 8) f ? launch_tile<T, float, 8, 4>(c, o, tmp, lm, max_seg, y_vec) : launch_tile<T, T, 8, 4>(c, o, tmp, lm, max_seg, y_vec);
        else if (rm == 16) f ? launch_tile<T, float, 16, 4>(c, o, tmp, lm, max_seg, y_vec) : launch_tile<T, T, 16, 4>(c, o, tmp, lm, max_seg, y_vec);
        else if (rm == 32) f ? launch_tile<T, float, 32, 2>(c, o, tmp, lm, max_seg, y_vec) : launch_tile<T, T, 32, 2>(c, o, tmp, lm, max_seg, y_vec);
        else f ? launch_tile<T, float, 64, 1>(c, o, tmp, lm, max_seg, y_vec) : launch_tile<T, T, 64, 1>(c, o, tmp, lm, max_seg, y_vec);
        return;
    }
    if (f) launch<T, float>(c, o, tmp, lm, max_seg, tt, rp);
    else launch<T, T>(c, o, tmp, lm, max_seg, tt, rp);
}

static unsigned long g_store_launches, g_rope_launches;
/* store-form and rope-form launches so far (op tests: which path matmul_lora took) */
extern "C" unsigned long lg_cuda_lora_store_launches(void) { return g_store_launches; }
extern "C" unsigned long lg_cuda_lora_rope_launches(void) { return g_rope_launches; }

/* Whether the rope form takes this launch: ys must be q, k, v of rope's heads (head_dim % 16 ==
 * 0), every segment one token covering all rows, the decode form's column blocks whole heads, the
 * cache view of ys' dtype, rows and cache slots 16-byte aligned; LG_EXPAND_ROPE=0: never. */
static bool ex_rope_plan(const cuda_ctx *c, const lg_tensor *ys, int k, const lg_lora_meta *lm, int max_seg,
                         const lg_rope_kv *rope)
{
    const int hd = rope->head_dim, cpb = ex_cpb(lm, 1);
    const lg_kv_view *kv = &rope->kv;
    bool al = cu_aligned16(kv->base) && kv->page_bytes % 16 == 0 && kv->k_off % 16 == 0 && kv->v_off % 16 == 0;
    for (int i = 0; i < k; i++) al = al && ys[i].stride % 8 == 0 && cu_aligned16(ys[i].data);
    return c->tune->expand_rope && k == 3 && al && max_seg == 1 && lm->seg_indptr_host[0] == 0 &&
           lm->seg_indptr_host[lm->n_segs] == ys[0].rows && hd > 0 && hd % 16 == 0 && hd <= EX_ROPE_HD &&
           cpb % hd == 0 && cpb <= EX_ROPE_COLS && ys[0].cols == (int64_t)rope->n_heads * hd &&
           ys[1].cols == (int64_t)rope->n_kv_heads * hd && ys[2].cols == ys[1].cols && ys[1].rows == ys[0].rows &&
           ys[2].rows == ys[0].rows && ys[1].dtype == ys[0].dtype && ys[2].dtype == ys[0].dtype &&
           kv->dtype == ys[0].dtype && kv->head_dim == hd && kv->n_kv_heads == rope->n_kv_heads && kv->base &&
           kv->page_tokens > 0 && rope->pos && rope->inv_freq && rope->slot;
}

/* The checks and the launch of both forms; store: 1 when the launch is not prefill-shaped (the
 * tile kernel's plan does not take it; nothing run). rope: 1 (nothing run) unless the rope form
 * takes the launch. */
static int expand_multi(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                        int k, bool store, const lg_rope_kv *rope)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_expand tmp", tmp);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !ys || !slots)
        return CU_FAIL(c, "lora_expand: lora meta, its arrays, outputs or slots are NULL");
    if (k < 1 || k > LG_LORA_MULTI_MAX || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "lora_expand: %d slots (1..%d), %d segments", k, LG_LORA_MULTI_MAX, lm->n_segs);
    for (int i = 0; i < k; i++) {
        CU_CHECK_VIEW(c, "lora_expand y", ys[i]);
        if (!cu_is_half(ys[i].dtype) || ys[i].dtype != ys[0].dtype || (tmp.dtype != LG_F32 && tmp.dtype != ys[i].dtype))
            return CU_FAIL(c, "lora_expand: y must be one f16/bf16 dtype and tmp f32 or y's dtype, found y %s, tmp %s",
                           lg_dtype_name(ys[i].dtype), lg_dtype_name(tmp.dtype));
        if (slots[i] < 0 || slots[i] >= lm->n_slots)
            return CU_FAIL(c, "lora_expand: slot %d of %d", slots[i], lm->n_slots);
        if (tmp.rows < ys[i].rows)
            return CU_FAIL(c, "lora_expand: tmp has %lld rows, y %lld", (long long)tmp.rows, (long long)ys[i].rows);
    }
    if (lm->max_rank > EX_RMAX || tmp.cols < (int64_t)k * lm->max_rank)
        return CU_FAIL(c, "lora_expand: max_rank %d (limit %d) x %d slots vs tmp [%lld,%lld]", lm->max_rank, EX_RMAX, k,
                       (long long)tmp.rows, (long long)tmp.cols);
    if (lm->n_segs == 0)
        return store || rope ? 1 : 0;
    int max_seg = cu_lora_max_seg(lm);
    int64_t min_rows = ys[0].rows;
    for (int i = 1; i < k; i++) min_rows = ys[i].rows < min_rows ? ys[i].rows : min_rows;
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > min_rows)
        return CU_FAIL(c, "lora_expand: segments are malformed or cover more than y's %lld rows", (long long)min_rows);
    if (max_seg == 0)
        return store || rope ? 1 : 0;
    int rm, cpt;
    const bool tile = ex_tile_plan(c, ys, k, lm, max_seg, &rm, &cpt);
    if (store && !tile)
        return 1;
    if (rope && !ex_rope_plan(c, ys, k, lm, max_seg, rope))
        return 1;
    const lg_rope_kv rp = rope ? *rope : lg_rope_kv{}; /* the rope form's arguments; kv.base NULL: the plain expand */
    g_store_launches += store;
    g_rope_launches += rope != NULL;
    if (ys[0].dtype == LG_F16) launch_t<__half>(c, ys, slots, k, tmp, lm, max_seg, store, tile, rm, cpt, &rp);
    else launch_t<__nv_bfloat16>(c, ys, slots, k, tmp, lm, max_seg, store, tile, rm, cpt, &rp);
    CU_LAUNCHED(c);
    return 0;
}

int cu_lora_expand_multi(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                         const int *slots, int k)
{
    return expand_multi(be, ys, tmp, lm, slots, k, false, NULL);
}

int cu_lora_expand_store(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                         int k)
{
    return expand_multi(be, ys, tmp, lm, slots, k, true, NULL);
}

int cu_lora_expand_rope(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                        int k, const lg_rope_kv *rope)
{
    return expand_multi(be, ys, tmp, lm, slots, k, false, rope);
}

/* The store form for benchmarks (tests/gpu/bench_sgmv.c; C linkage) */
extern "C" int lg_cuda_lora_expand_store(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                                         const int *slots, int k)
{
    return cu_lora_expand_store(be, ys, tmp, lm, slots, k);
}

int cu_lora_expand(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot)
{
    return cu_lora_expand_multi(be, &y, tmp, lm, &slot, 1);
}
