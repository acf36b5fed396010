/*
 * gemm_streamk.cuh — the stream-K work split of the TMA + wgmma decode
 * matmul (gemm_tma.cu), and the matmul call its kernel and the GEMV share:
 *
 *   skm_call       the call (y, x, W, bias, shapes), also the GEMV's (gemv.cuh);
 *   skm_args       the call and the stream-K plan;
 *   skm_shape_ok   host: alignment and size rules of the kernel;
 *   skm_set_call   host: the call's fields;
 *   skm_plan       host: units, one-wave grid, workspace slots, counters;
 *   skm_unit_range the contiguous split units [u_begin, u_end) of block b;
 *   skm_walk       device: block b's units in order (split ones, then whole tiles);
 *   skm_tile_end   device: a block's part of a tile is done: store it
 *                  (whole tile) or add it to the tile's workspace slot and,
 *                  in the block that completes the tile, sum the slots in
 *                  slot order and store (deterministic, no reduce launch).
 *
 * Work units are (tile of BM rows of W, chunk of KC columns of K), numbered
 * tile-major (a tile's chunks consecutive); block b of G takes units
 * [b U / G, (b + 1) U / G): every block streams the same number of weight
 * bytes (+-1 unit), one wave, no idle SM (stream-K, Osama et al., PPoPP'23).
 * The hybrid plan (skm_plan): with at least G tiles, the last dp x G tiles
 * are whole tiles, dp per block, and only the units of the first tiles are
 * split as above (U = sk_units); a
 * block takes its split units first and its whole tiles last (skm_walk), so
 * the split tiles' partial sums and the last block's ordered sum run while
 * the whole tiles still stream instead of at the kernel's end, and every
 * block ends on a plain store (the paper's "stream-K + data-parallel").
 *
 * Accumulators are in mma fragment order: a warp holds F fragments, each a
 * 16-row x 8-token tile with four floats per lane (rows g and g + 8,
 * tokens 2 c4 and 2 c4 + 1, g = lane / 4, c4 = lane % 4): the C layout of
 * mma.sync m16n8k16 and, per n8 block, of wgmma m64nNk16.
 */
#ifndef LG_GEMM_STREAMK_CUH
#define LG_GEMM_STREAMK_CUH

#include "kernels/ops.cuh"

/* A decode matmul call as the stream-K kernel and the GEMV (gemv.cuh) take it: skm_set_call. */
struct skm_call {
    void *y;
    int64_t ldy;
    const void *x;
    int64_t ldx;
    const void *W;
    int64_t ldw;
    const void *bias;
    lg_dtype bdt;
    int N, K, T, accumulate;
};

struct skm_args : skm_call {
    int nc;         /* chunks per tile: ceil(K / KC) */
    int units;      /* tiles * nc (< 2^31 / 1024: checked) */
    int sk_units;   /* units of the stream-K region, tiles [0, sk_units / nc): split evenly between the blocks */
    int dp;         /* whole tiles per block after its stream-K units (the hybrid plan; 0: stream-K only) */
    int slots;      /* workspace slots per tile */
    float *part;    /* [sk_units / nc][slots][BM * NTOK] partial sums of the split tiles (fragment order) */
    int *sem;       /* [tiles] chunk counters, zero between launches */
};

/* x and W as the stream-K kernel reads them: K % 8 == 0, 16-byte aligned rows, shapes within int32 unit math. */
static inline bool skm_shape_ok(lg_tensor x, lg_tensor W)
{
    return x.cols % 8 == 0 && x.stride % 8 == 0 && W.stride % 8 == 0 && cu_aligned16(x.data) && cu_aligned16(W.data) &&
           W.rows <= INT32_MAX / 2 && x.cols <= INT32_MAX / 2;
}

/* The call's fields of a (a stream-K plan's are skm_plan's). */
static inline void skm_set_call(skm_call *a, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    a->y = y.data;
    a->ldy = y.stride;
    a->x = x.data;
    a->ldx = x.stride;
    a->W = W.data;
    a->ldw = W.stride;
    a->bias = bias.data;
    a->bdt = bias.dtype;
    a->N = (int)W.rows;
    a->K = (int)x.cols;
    a->T = (int)x.rows;
    a->accumulate = accumulate ? 1 : 0;
}

/* Fills a's plan for tiles of BM rows, chunks of KC columns, NTOK token columns per tile (accumulator width) and
 * per_sm resident blocks; returns the grid size, 0 when the shape does not fit the counters (use another path), or
 * -1 with the error reported (workspace). The call fields (y .. accumulate) must be set.
 * The hybrid plan: with at least as many tiles as blocks, each block takes dp = tiles / G whole tiles
 * (data-parallel, stored straight from registers) *after* its share of the other tiles' units (stream-K), so that
 * the split tiles' partial sums and the last block's sum run while the whole tiles still stream, not at the
 * kernel's end; with fewer tiles, every tile is split (dp = 0). */
static inline int skm_plan(cuda_ctx *c, skm_args *a, int BM, int KC, int NTOK, int per_sm)
{
    const int tiles = (a->N + BM - 1) / BM, nc = (a->K + KC - 1) / KC;
    if (tiles > CU_SEM_COUNT || (int64_t)tiles * nc > INT32_MAX / 1024)
        return 0;
    const int units = tiles * nc;
    const int G = units < per_sm * c->n_sm ? units : per_sm * c->n_sm;
    a->nc = nc;
    a->units = units;
    int dp = tiles >= G ? tiles / G : 0;
    if (dp > 0 && tiles > dp * G && (tiles - dp * G) * nc < G)
        dp--; /* a stream-K region of at least one unit per block */
    a->dp = dp;
    a->sk_units = (tiles - dp * G) * nc;
    /* blocks meeting one split tile: each holds >= floor(sk_units / G) >= 1 units of it (none split: no slots) */
    const int per = a->sk_units / G, sk_tiles = a->sk_units / nc;
    a->slots = per > 0 ? nc / per + 2 : 1;
    a->sem = c->sem;
    const size_t ws = (size_t)(sk_tiles > 0 ? sk_tiles : 1) * a->slots * BM * NTOK * sizeof(float);
    a->part = (float *)cu_workspace(c, ws);
    if (!a->part)
        return CU_FAIL(c, "matmul: cannot allocate %zu bytes of stream-K workspace", ws);
    return G;
}

/* The stream-K units [u_begin, u_end) of block b (all of its units when a.dp == 0). */
__device__ __forceinline__ void skm_unit_range(const skm_args &a, int b, int G, int *u_begin, int *u_end)
{
    *u_begin = (int)((int64_t)b * a.sk_units / G);
    *u_end = (int)((int64_t)(b + 1) * a.sk_units / G);
}

/* Block b's units in the order it takes them: its stream-K units, then its a.dp whole tiles. */
struct skm_walk {
    int s0, nsk, d0, n; /* unit i is s0 + i for i < nsk, else d0 + (i - nsk); n units in all */
    __device__ __forceinline__ int unit(int i) const { return i < nsk ? s0 + i : d0 + (i - nsk); }
    /* unit i is the last of its tile's segment in this block */
    __device__ __forceinline__ bool seg_end(int i, int nc) const
    {
        return i + 1 == n || i + 1 == nsk || unit(i) % nc == nc - 1;
    }
};
__device__ __forceinline__ skm_walk skm_block_walk(const skm_args &a, int b, int G)
{
    int s0, s1;
    skm_unit_range(a, b, G, &s0, &s1);
    skm_walk w;
    w.s0 = s0;
    w.nsk = s1 - s0;
    w.d0 = a.sk_units + b * a.dp * a.nc;
    w.n = w.nsk + a.dp * a.nc;
    return w;
}

/* First block whose unit range holds unit u: the largest b with floor(b U / G) <= u. */
__device__ __forceinline__ int skm_block_of(int u, int U, int G)
{
    return (int)(((int64_t)(u + 1) * G + U - 1) / U) - 1;
}

/* named barrier `id` of THREADS threads */
template <int THREADS> __device__ __forceinline__ void skm_sync(int id)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(THREADS) : "memory");
}

/*
 * The block's units [seg_begin, u] of `tile` are done (u: its last unit of the tile). THREADS threads take part:
 * tid = 0 .. THREADS - 1 (warp = tid / 32), synchronised on named barrier bar_id, each warp with F fragments
 * acc[f][4]; NT n8 token tiles per m16 tile; m16_of(f): the m16 tile (16-row block) of fragment f inside the BM-row
 * tile. acc is left zeroed.
 */
template <typename TY, int THREADS, int F, int NT, int BM, typename M16>
__device__ __forceinline__ void skm_tile_end(const skm_args &a, float (&acc)[F][4], int tile, int seg_begin, int u,
                                             int tid, int bar_id, int *is_last, M16 m16_of)
{
    constexpr int EL = BM * NT * 8; /* floats of a partial tile */
    const int G = gridDim.x, b = blockIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c4 = lane & 3;
    const int t0 = tile * a.nc, t1 = t0 + a.nc;
    bool store = seg_begin == t0 && u + 1 == t1; /* the whole tile in this block */
    if (!store) {
        const int first = skm_block_of(t0, a.sk_units, G), last = skm_block_of(t1 - 1, a.sk_units, G);
        float *mine = a.part + ((size_t)tile * a.slots + (b - first)) * EL;
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) __stcg(mine + ((warp * F + f) * 4 + e) * 32 + lane, acc[f][e]);
        __threadfence();
        skm_sync<THREADS>(bar_id);
        if (tid == 0) {
            const int n_mine = u + 1 - seg_begin;
            *is_last = atomicAdd(a.sem + tile, n_mine) + n_mine == a.nc;
        }
        skm_sync<THREADS>(bar_id);
        if (*is_last) {
            __threadfence();
            /* sum the slots in slot order; SU slots' loads in flight at once (L2 round trips, not one per value) */
            constexpr int SU = F >= 8 ? 2 : 4;
            const float *all = a.part + (size_t)tile * a.slots * EL + (warp * F * 4) * 32 + lane;
            const int n_slots = last - first + 1;
#pragma unroll
            for (int f = 0; f < F; f++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;
            for (int s0 = 0; s0 < n_slots; s0 += SU) {
                float v[SU][F][4];
#pragma unroll
                for (int j = 0; j < SU; j++)
#pragma unroll
                    for (int f = 0; f < F; f++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            v[j][f][e] = s0 + j < n_slots ? __ldcg(all + (size_t)(s0 + j) * EL + (f * 4 + e) * 32) : 0.0f;
#pragma unroll
                for (int j = 0; j < SU; j++)
#pragma unroll
                    for (int f = 0; f < F; f++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[f][e] += v[j][f][e];
            }
            if (tid == 0)
                atomicExch(a.sem + tile, 0);
            store = true;
        }
    }
    if (store) {
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int n = tile * BM + m16_of(f) * 16 + g + 8 * (e >> 1), t = (f % NT) * 8 + 2 * c4 + (e & 1);
                if (n < a.N && t < a.T) {
                    TY *p = (TY *)a.y + (int64_t)t * a.ldy + n;
                    float r = acc[f][e];
                    if (a.accumulate)
                        r += to_f32(*p);
                    if (a.bias)
                        r += load_any(a.bias, a.bdt, n);
                    *p = from_f32<TY>(r);
                }
            }
    }
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;
}

#endif
