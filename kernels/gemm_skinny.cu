/*
 * gemm_skinny.cu — the tensor-core matmul for decode batches of a few token
 * rows (3 <= T <= 64):
 *   for t < T, n < N:
 *     y[t, n] = (accumulate ? y[t, n] : 0) + sum_k x[t, k] * W[n, k] (+ bias[n])
 * f32 accumulation; x and W f16 or bf16 (one type), y that type or f32. The
 * same function as the cuBLAS path of gemm.cu, which dispatches here
 * (cu_skinny_try) when K % 8 == 0 and the rows of x and W are 16-byte
 * aligned.
 *
 * At T <= 64 a decode matmul is still a weight stream (W is 32-180 MB, x at
 * most 1.4 MB), but T x 2 flops per weight byte pair are too many for
 * CUDA-core FMAs. cuBLAS reached ~2.5 TB/s on these shapes inside a step
 * (split-K kernels plus a separate reduce pass). This kernel streams W from
 * HBM straight into mma.sync operand registers, no shared memory on the
 * load path:
 *
 *  - Tile: a warp owns MT x 16 output rows n and all T tokens (NT n8-tiles,
 *    T <= 8 NT); mma.sync m16n8k16 with A = rows of W and B = rows of x
 *    (the token is the mma's n).
 *  - K order: a dot product may sum its k in any order, as long as W and x
 *    use the same one. Lane (g = lane / 4, c = lane % 4) loads the 16-byte
 *    word at k0 + 8c of W rows g and g + 8 and of x row g; its 8 halves feed
 *    two mma k-steps: halves {0,1} and {2,3} are the fragment pairs for
 *    k = (2c, 2c+1) and (2c+8, 2c+9) of the first, {4,5} and {6,7} of the
 *    second. Every operand is thus one 16-byte load straight into registers,
 *    and one warp load instruction reads 8 rows x 64 contiguous bytes
 *    (whole 32-byte sectors). 32 k are a "step": 2 mma per (m16, n8) tile.
 *  - Pipelining: a ring of U steps of W words per warp stays in flight
 *    (ld.global.nc.L1::no_allocate, streamed past L1); the x words of the
 *    next step are loaded one step ahead (L2 / L1 hits).
 *  - Split-K inside the block: its 4 warps take interleaved steps (warp w:
 *    steps w, w + 4, ...) of the block's K range; their tiles are summed in
 *    shared memory in a fixed order.
 *  - Split-K across blocks (S slices, grid.y) where it evens out the waves:
 *    each block writes its partial tile to a workspace, and the last block
 *    of a tile to arrive (a counter in c->sem) sums the S partials in slice
 *    order, runs the epilogue and resets the counter to 0. No second launch,
 *    and deterministic (the order of the sum does not depend on who arrives
 *    last), so graph replays stay bit-identical.
 *  - S is chosen per shape from the occupancy: fewest waves per unit of
 *    work, ceil(tiles * S / resident) / S, ties to the smaller S.
 *  - Programmatic dependent launch (cuda_common.cuh): the first U steps of
 *    W are loaded before pdl_wait; x, y, bias, workspace and counters after.
 *  - Fused LoRA expand (cu_matmul_lora, matmul_lora.cu): the epilogue also
 *    adds scale * tmp[t, :rank] . B[n, :rank] of token t's adapter, so the
 *    expand costs no launch of its own. Each tile lies inside one output
 *    (q, k, v, gate, up: column ranges that are multiples of the tile
 *    height); before pdl_wait the block maps its tokens to their adapters
 *    (segment bounds, weight table) and prefetches the tile's B rows into
 *    L2; the epilogue stages the tmp rows in shared memory and reads B.
 *    y is rounded once (the unfused ops round twice).
 * Rows past N re-read row N - 1 (not stored); tokens past T read zeros.
 *
 * Variants (MT, U): 0 = (2, 4), 1 = (2, 2), 2 = (1, 4), 3 = (4, 2); the
 * default per NT is chosen in cu_skinny_try.
 * Measured on the H100 (docs/benchmarks.md, issue 10): 1.2-2.5 TB/s against
 * cuBLAS's 2.3-2.75 TB/s on every Llama-2-7B decode shape at T = 8..64 (the
 * x rows are re-read from L2 by every 32-row tile; no shared-memory reuse),
 * so it is OFF by default and kept for its tests and for further work.
 * LG_SKINNY (read once) or lg_cuda_skinny_mode(): 0 = off (default, cuBLAS),
 * 1 = auto, 10 + v = variant v for every call it can take.
 */
#include "kernels/gemm_streamk.cuh" /* skm_call: the call's fields */

#include <stdlib.h>
#include <string.h>

#define SK_WARPS 4
#define SK_THREADS (SK_WARPS * 32)
#define SK_MAX_T 64
#define SK_MAX_S 8

/* Fused LoRA expand (cu_matmul_lora): output columns [col0[i], col0[i] + ncols[i]) get
 *   y[t, n] += scale * sum_{j < rank} tmp[t, tcol[i] + j] * B[n - col0[i], j]
 * with (B, rank, scale) = w[seg(t) * n_slots + slot[i]]; col0 and ncols are multiples of the tile height. */
struct sk_lora {
    const float *tmp; /* [T, ldt] f32, from lora_shrink(_multi) */
    int64_t ldt;
    const int32_t *seg_indptr;
    const lg_lora_w *w;
    int n_segs, n_slots, max_rank, k;
    int col0[LG_LORA_MULTI_MAX], ncols[LG_LORA_MULTI_MAX], slot[LG_LORA_MULTI_MAX], tcol[LG_LORA_MULTI_MAX];
};

struct sk_args : skm_call {
    int steps;           /* ceil(K / 32) */
    int steps_per_slice; /* K steps of one block */
    int S;               /* slices (grid.y) */
    float *part;         /* [tiles][S][ROWS * COLS] partial tiles, when S > 1 */
    int *sem;            /* [tiles] arrival counters, zero between launches */
    sk_lora lora;        /* lora.k == 0: none */
};


/* d += A (16 x 16, row) * B (16 x 8, col), f32 accumulators. */
template <typename TX> __device__ __forceinline__ void sk_mma(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                                              uint32_t a3, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void sk_mma<__half>(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                                           uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void sk_mma<__nv_bfloat16>(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                                                  uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <typename TX, typename TY, int NT, int MT, int U>
__global__ void __launch_bounds__(SK_THREADS) gemm_skinny_kernel(sk_args a)
{
    constexpr int ROWS = MT * 16, COLS = NT * 8, EL = ROWS * COLS;
    const int K8 = a.K >> 3; /* 16-byte words per row */
    __shared__ float red[SK_WARPS][EL]; /* [warp][token * ROWS + row]; then the LoRA tmp tile [T][max_rank] */
    __shared__ int is_last;
    __shared__ const TX *lora_b[SK_MAX_T]; /* this tile's first B row for each token's adapter */
    __shared__ int lora_r[SK_MAX_T];
    __shared__ float lora_s[SK_MAX_T];
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int tile = blockIdx.x, n0 = tile * ROWS;
    /* LoRA: which output (q, k, v...) this tile is in; per token its adapter's B, rank, scale (step
     * metadata and adapter weights: read before pdl_wait), and the tile's B rows prefetched into L2 */
    int lri = -1;
#pragma unroll
    for (int i = 0; i < LG_LORA_MULTI_MAX; i++)
        if (i < a.lora.k && n0 >= a.lora.col0[i] && n0 < a.lora.col0[i] + a.lora.ncols[i])
            lri = i;
    if (lri >= 0) {
        int slot = a.lora.slot[0], col0 = a.lora.col0[0];
#pragma unroll
        for (int i = 1; i < LG_LORA_MULTI_MAX; i++)
            if (lri == i)
                slot = a.lora.slot[i], col0 = a.lora.col0[i];
        for (int t = threadIdx.x; t < a.T; t += SK_THREADS) {
            int lo = 0, hi = a.lora.n_segs - 1; /* last segment starting at or before t */
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (a.lora.seg_indptr[mid] <= t) lo = mid;
                else hi = mid - 1;
            }
            int r = 0;
            if (a.lora.n_segs > 0 && t < a.lora.seg_indptr[a.lora.n_segs]) {
                const lg_lora_w lw = a.lora.w[(size_t)lo * a.lora.n_slots + slot];
                r = lw.rank;
                lora_b[t] = (const TX *)lw.B + (size_t)(n0 - col0) * r;
                lora_s[t] = lw.scale;
                if (blockIdx.y == 0 && r > 0) { /* one slice prefetches: L2 is shared by whichever block finishes */
                    const char *b = (const char *)lora_b[t];
                    const size_t bytes = (size_t)ROWS * r * sizeof(TX);
                    for (size_t off = 0; off < bytes; off += 128)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"(b + off));
                }
            }
            lora_r[t] = r;
        }
    }
    const int s_begin = blockIdx.y * a.steps_per_slice, s_end = min(a.steps, s_begin + a.steps_per_slice);
    const int span = s_end - s_begin - warp;
    const int nmine = span > 0 ? (span + SK_WARPS - 1) / SK_WARPS : 0; /* steps of this warp */

    const uint4 *wrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            wrow[mt][h] = (const uint4 *)((const TX *)a.W + (int64_t)min(n0 + mt * 16 + 8 * h + g, a.N - 1) * a.ldw);
    /* 16-byte word of a row read by this lane at its i-th step */
    auto word = [&](int i) { return (s_begin + warp + SK_WARPS * i) * 4 + c4; };

    uint4 wb[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int ch = word(u);
        const bool ok = u < nmine && ch < K8;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) wb[u][mt][h] = ok ? ld_stream16(wrow[mt][h] + ch) : make_uint4(0, 0, 0, 0);
    }
    pdl_wait(); /* x, y, the workspace and the counters belong to the step's kernels */

    const uint4 *xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int t = nt * 8 + g;
        xok[nt] = t < a.T;
        xrow[nt] = (const uint4 *)((const TX *)a.x + (int64_t)(xok[nt] ? t : 0) * a.ldx);
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;
    uint4 xb[2][NT];
    {
        const int ch = word(0);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            xb[0][nt] = nmine > 0 && xok[nt] && ch < K8 ? __ldg(xrow[nt] + ch) : make_uint4(0, 0, 0, 0);
    }

#pragma unroll 1
    for (int i0 = 0; i0 < nmine; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + u;
            if (i < nmine) { /* uniform over the warp */
                if (i + 1 < nmine) {
                    const int ch = word(i + 1);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        xb[(u + 1) & 1][nt] = xok[nt] && ch < K8 ? __ldg(xrow[nt] + ch) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint4 w0 = wb[u][mt][0], w1 = wb[u][mt][1];
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const uint4 xv = xb[u & 1][nt];
                        sk_mma<TX>(acc[mt][nt], w0.x, w1.x, w0.y, w1.y, xv.x, xv.y);
                        sk_mma<TX>(acc[mt][nt], w0.z, w1.z, w0.w, w1.w, xv.z, xv.w);
                    }
                }
                const int ir = i + U;
                const int ch = word(ir);
                const bool ok = ir < nmine && ch < K8;
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        wb[u][mt][h] = ok ? ld_stream16(wrow[mt][h] + ch) : make_uint4(0, 0, 0, 0);
            }
        }
    }

    /* the warps' partial tiles -> one, in warp order */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = mt * 16 + g + 8 * (e >> 1), t = nt * 8 + 2 * c4 + (e & 1);
                red[warp][t * ROWS + row] = acc[mt][nt][e];
            }
    __syncthreads();
    float v[(EL + SK_THREADS - 1) / SK_THREADS];
#pragma unroll
    for (int j = 0; j < (EL + SK_THREADS - 1) / SK_THREADS; j++) {
        const int e = threadIdx.x + j * SK_THREADS;
        v[j] = 0.0f;
        if (e < EL) {
#pragma unroll
            for (int w = 0; w < SK_WARPS; w++) v[j] += red[w][e];
        }
    }
    if (a.S > 1) {
        float *mine = a.part + ((size_t)tile * a.S + blockIdx.y) * EL;
#pragma unroll
        for (int j = 0; j < (EL + SK_THREADS - 1) / SK_THREADS; j++) {
            const int e = threadIdx.x + j * SK_THREADS;
            if (e < EL)
                __stcg(mine + e, v[j]);
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
            is_last = atomicAdd(a.sem + tile, 1) == a.S - 1;
        __syncthreads();
        if (!is_last)
            return;
        __threadfence();
        const float *all = a.part + (size_t)tile * a.S * EL;
#pragma unroll
        for (int j = 0; j < (EL + SK_THREADS - 1) / SK_THREADS; j++) {
            const int e = threadIdx.x + j * SK_THREADS;
            if (e < EL) {
                float sum = 0.0f;
                for (int s = 0; s < a.S; s++) sum += __ldcg(all + (size_t)s * EL + e);
                v[j] = sum;
            }
        }
        if (threadIdx.x == 0)
            atomicExch(a.sem + tile, 0);
    }
    float *ts = &red[0][0]; /* LoRA: tmp rows of the tile's output, [T][max_rank] f32 */
    const int R = a.lora.max_rank;
    if (lri >= 0) {
        int tcol = a.lora.tcol[0];
#pragma unroll
        for (int i = 1; i < LG_LORA_MULTI_MAX; i++)
            if (lri == i)
                tcol = a.lora.tcol[i];
        __syncthreads(); /* every read of red is done (and lora_* are written) */
        for (int i = threadIdx.x; i < a.T * R; i += SK_THREADS) {
            const int t = i / R, jr = i - t * R;
            ts[i] = jr < lora_r[t] ? __ldcg(a.lora.tmp + (int64_t)t * a.lora.ldt + tcol + jr) : 0.0f;
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < (EL + SK_THREADS - 1) / SK_THREADS; j++) {
        const int e = threadIdx.x + j * SK_THREADS;
        const int t = e / ROWS, n = n0 + e % ROWS;
        if (e < EL && t < a.T && n < a.N) {
            TY *p = (TY *)a.y + (int64_t)t * a.ldy + n;
            float r = v[j];
            if (a.accumulate)
                r += to_f32(*p);
            if (a.bias)
                r += load_any(a.bias, a.bdt, n);
            if (lri >= 0 && lora_r[t] > 0) {
                const int rk = lora_r[t];
                const TX *b = lora_b[t] + (size_t)(e % ROWS) * rk;
                const float *tr = ts + t * R;
                float l = 0.0f;
                if (rk % 8 == 0 && cu_aligned16(b)) {
                    for (int q = 0; q < rk; q += 8) {
                        float bf[8];
                        unpack8<TX>(*(const uint4 *)(b + q), bf);
#pragma unroll
                        for (int u = 0; u < 8; u++) l += tr[q + u] * bf[u];
                    }
                } else {
                    for (int q = 0; q < rk; q++) l += tr[q] * to_f32(b[q]);
                }
                r += lora_s[t] * l;
            }
            *p = from_f32<TY>(r);
        }
    }
}

/* ---- host side ---------------------------------------------------------------------------- */

#define SK_VARIANTS 4
static const int k_mt[SK_VARIANTS] = {2, 2, 1, 4};

static int g_skinny = -1; /* -1: not read yet */

extern "C" void lg_cuda_skinny_mode(int mode) { g_skinny = mode; }

static int skinny_mode(void) { return cu_switch(&g_skinny, "LG_SKINNY", 0); }

int cu_skinny_enabled(void) { return skinny_mode() != 0; }

typedef void (*sk_fn)(sk_args);

template <typename TX, typename TY, int NT> static sk_fn pick(int v)
{
    switch (v) {
    case 0: return gemm_skinny_kernel<TX, TY, NT, 2, 4>;
    case 1: return gemm_skinny_kernel<TX, TY, NT, 2, 2>;
    case 2: return gemm_skinny_kernel<TX, TY, NT, 1, 4>;
    default:
        if constexpr (NT < 8)
            return gemm_skinny_kernel<TX, TY, NT, 4, 2>;
        else /* 64 x 64 tiles: too many registers and shared memory */
            return gemm_skinny_kernel<TX, TY, NT, 1, 4>;
    }
}

template <typename TX, typename TY> static sk_fn pick_nt(int nt, int v)
{
    switch (nt) {
    case 1: return pick<TX, TY, 1>(v);
    case 2: return pick<TX, TY, 2>(v);
    case 4: return pick<TX, TY, 4>(v);
    default: return pick<TX, TY, 8>(v);
    }
}

int cu_skinny_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate,
                  const cu_lora_epi *lora)
{
    cuda_ctx *c = CU_CTX(be);
    const int mode = skinny_mode();
    const int T = (int)x.rows;
    if (mode == 0 || T < 1 || T > SK_MAX_T || x.cols % 8 != 0 || x.stride % 8 != 0 || W.stride % 8 != 0 ||
        !cu_aligned16(x.data) || !cu_aligned16(W.data) || W.rows > INT32_MAX / 2)
        return 1;
    const int nt = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    /* default variant: two m16 tiles per warp, 4 steps in flight; one tile at T > 32 (registers) */
    int v = mode >= 10 ? (mode - 10) % SK_VARIANTS : nt == 8 ? 2 : 0;
    if (nt == 8 && v == 3)
        v = 2; /* pick() has no (4, 2) at 64 tokens */
    const sk_fn f =
        cu_by_mm_types(x.dtype, y.dtype, [&](auto tx, auto ty) { return pick_nt<decltype(tx), decltype(ty)>(nt, v); });
    const int rows = k_mt[v] * 16, el = rows * nt * 8;
    const int N = (int)W.rows, K = (int)x.cols;
    if (lora) { /* the fused expand needs whole tiles per output and the tmp tile in `red` */
        if (lora->tmp.dtype != LG_F32 || lora->lm->max_rank > 64 || lora->lm->max_rank * T > 4 * el ||
            lora->lm->n_segs > 65535)
            return 1;
        for (int i = 0; i < lora->k; i++)
            if (lora->col0[i] % rows || lora->ncols[i] % rows)
                return 1;
    }
    const int tiles = (N + rows - 1) / rows, steps = (K + 31) / 32;
    const int per_sm = cu_resident_blocks((const void *)f, SK_THREADS, 0);
    const int resident = (per_sm > 0 ? per_sm : 1) * c->n_sm;
    /* slices: fewest waves per unit of work; each warp keeps at least 4 steps */
    int S = 1;
    double best = 1e30;
    for (int s = 1; s <= SK_MAX_S && (s == 1 || steps / s >= 4 * SK_WARPS) && (s == 1 || tiles <= CU_SEM_COUNT); s++) {
        const double waves = (double)((tiles * (int64_t)s + resident - 1) / resident) / s;
        if (waves < best - 1e-9)
            best = waves, S = s;
    }
    sk_args a;
    skm_set_call(&a, y, x, W, bias, accumulate);
    a.steps = steps;
    a.steps_per_slice = (steps + S - 1) / S;
    a.S = (steps + a.steps_per_slice - 1) / a.steps_per_slice;
    a.part = NULL;
    a.sem = c->sem;
    memset(&a.lora, 0, sizeof a.lora);
    if (lora) {
        a.lora.tmp = (const float *)lora->tmp.data;
        a.lora.ldt = lora->tmp.stride;
        a.lora.seg_indptr = lora->lm->seg_indptr;
        a.lora.w = lora->lm->w;
        a.lora.n_segs = lora->lm->n_segs;
        a.lora.n_slots = lora->lm->n_slots;
        a.lora.max_rank = lora->lm->max_rank;
        a.lora.k = lora->k;
        for (int i = 0; i < lora->k; i++) {
            a.lora.col0[i] = lora->col0[i];
            a.lora.ncols[i] = lora->ncols[i];
            a.lora.slot[i] = lora->slots[i];
            a.lora.tcol[i] = i * lora->lm->max_rank;
        }
    }
    if (a.S > 1) {
        a.part = (float *)cu_workspace(c, (size_t)tiles * a.S * el * sizeof(float));
        if (!a.part)
            return CU_FAIL(c, "matmul: cannot allocate %zu bytes of split-K workspace",
                           (size_t)tiles * a.S * el * sizeof(float));
    }
    cudaError_t e = cu_launch(c, f, dim3((unsigned)tiles, (unsigned)a.S), SK_THREADS, 0, a);
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: skinny launch (N=%d T=%d K=%d) failed: %s", N, T, K, cudaGetErrorString(e));
    return 0;
}
