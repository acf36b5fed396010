/*
 * gemm_streamk.cu — stream-K tensor-core matmul for decode batches of
 * 5..64 token rows:
 *   for t < T, n < N:
 *     y[t, n] = (accumulate ? y[t, n] : 0) + sum_k x[t, k] * W[n, k] (+ bias[n])
 * f32 accumulation; x and W f16 or bf16 (one type), y that type or f32. The
 * same function as the cuBLAS path of gemm.cu, which dispatches here
 * (cu_streamk_try) when K % 8 == 0 and x and W rows are 16-byte aligned.
 *
 * A decode matmul is a weight stream: W is 32-260 MB, x at most 1.4 MB.
 * cuBLAS reaches 2.1-2.7 TB/s on these shapes inside a step, largely from
 * wave quantisation (qkv: 96 tiles on 132 SMs) and a separate split-K
 * reduce launch. Here:
 *
 *  - Work units: a unit is (tile of BM = 16 x MT x WARPS rows of W, chunk of KC
 *    columns of K). Units are numbered tile-major (a tile's chunks are
 *    consecutive) and the grid is one wave (resident blocks, at most one
 *    per unit); block b takes the contiguous units [b U / G, (b+1) U / G):
 *    every block streams the same number of weight bytes (+-1 unit), with no
 *    second wave and no idle SM (stream-K, Osama et al., PPoPP'23).
 *  - Loads: a STAGES-deep cp.async pipeline (16-byte cp.async.cg, L1
 *    bypassed) per unit: the W tile [BM][KC] (each 16 consecutive threads
 *    read 256 contiguous bytes of a row) and the x tile [T][KC]; rows past
 *    N, tokens past T and columns past K are zero-filled. Shared memory rows
 *    are padded by 16 bytes (conflict-free ldmatrix).
 *  - Math: warp w owns rows [16 MT w, 16 MT (w + 1)) of the tile and every token:
 *    mma.sync m16n8k16 with A = W rows (ldmatrix.x4) and B = x rows
 *    (ldmatrix.x4: an x row is a column of x^T), NT n8-tiles of tokens.
 *  - Tiles split between blocks: each contributing block writes its partial
 *    tile (f32, in mma-fragment order: coalesced) to slot (b - first block
 *    of the tile) of a workspace and adds its chunk count to the tile's
 *    counter (c->sem); the block that completes the count sums the slots in
 *    slot order, runs the epilogue and resets the counter to 0. No second
 *    launch, and deterministic: the sum's order does not depend on which
 *    block arrives last, so graph replays stay bit-identical.
 *  - Programmatic dependent launch (cuda_common.cuh): the W tiles of the
 *    first STAGES - 1 units are requested before pdl_wait (weights are never
 *    written by a kernel), x, y, bias, workspace and counters after.
 *
 * Variants v (WARPS, m16 tiles per warp MT, KC, STAGES): 0 = (4, 1, 128, 4),
 * 1 = (8, 1, 128, 3), 2 = (4, 1, 256, 3), 3 = (4, 2, 64, 4); NT = 8 (33..64
 * tokens) uses one stage fewer in v0 and v3.
 * LG_STREAMK (read once) or lg_cuda_streamk_mode(): 0 = off (cuBLAS),
 * 1 = this kernel, 10 + v = its variant v for every call it can take;
 * 2 (the default) and 20 + v select the TMA + wgmma kernel of gemm_tma.cu
 * instead. This kernel measured slower than cuBLAS from T = 16 up.
 */
#include "kernels/gemm_streamk.cuh"
#include "kernels/mma.cuh"

#include <stdlib.h>

#define SKM_MAX_T 64

/* Shared memory of one stage: W [BM][KC + 8], then x [XR][KC + 8] (XR >= 16: ldmatrix.x4 reads 16 token rows). */
template <int WARPS, int MT, int KC, int NT> struct skm_layout {
    static constexpr int BM = 16 * MT * WARPS, LD = KC + 8, XR = NT * 8 < 16 ? 16 : NT * 8;
    static constexpr int STAGE = (BM + XR) * LD; /* elements */
};

template <typename TX, typename TY, int NT, int WARPS, int MT, int KC, int STAGES>
__global__ void __launch_bounds__(WARPS * 32) gemm_streamk_kernel(skm_args a)
{
    using L = skm_layout<WARPS, MT, KC, NT>;
    constexpr int F = MT * NT; /* accumulator fragments per warp: (m16 tile, n8 tile) */
    constexpr int THREADS = WARPS * 32, BM = L::BM, LD = L::LD, VPR = KC / 8; /* 16-byte vectors per row */
    extern __shared__ __align__(128) unsigned char skm_sm[];
    TX *sm = (TX *)skm_sm;
    __shared__ int is_last;
    pdl_trigger();

    int u_begin, u_end;
    skm_unit_range(a, blockIdx.x, gridDim.x, &u_begin, &u_end);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int mi = lane >> 3, li = lane & 7;

    /* the unit's tile and first column: (tile, k0) */
    auto load_w = [&](int tile, int k0, int slot) {
        TX *ws = sm + slot * L::STAGE;
#pragma unroll
        for (int j = 0; j < BM * VPR / THREADS; j++) { /* = KC / 16 */
            const int i = threadIdx.x + j * THREADS, r = i / VPR, v = i % VPR, n = tile * BM + r, k = k0 + v * 8;
            const bool ok = n < a.N && k < a.K;
            const TX *src = (const TX *)a.W + (int64_t)(ok ? n : 0) * a.ldw + (ok ? k : 0);
            cu_cp16(ws + r * LD + v * 8, src, ok);
        }
    };
    auto load_x = [&](int k0, int slot) {
        TX *xs = sm + slot * L::STAGE + BM * LD;
#pragma unroll
        for (int j = 0; j < (L::XR * VPR + THREADS - 1) / THREADS; j++) {
            const int i = threadIdx.x + j * THREADS;
            if (L::XR * VPR % THREADS != 0 && i >= L::XR * VPR)
                break;
            const int r = i / VPR, v = i % VPR, k = k0 + v * 8;
            const bool ok = r < a.T && k < a.K;
            const TX *src = (const TX *)a.x + (int64_t)(ok ? r : 0) * a.ldx + (ok ? k : 0);
            cu_cp16(xs + r * LD + v * 8, src, ok);
        }
    };

    /* prologue: W of the first STAGES - 1 units before pdl_wait, their x after; one commit group per stage.
     * (lt, lk): tile and column of the next unit to load, stepped without divisions */
    const int tile0 = u_begin / a.nc, k00 = (u_begin - tile0 * a.nc) * KC;
    {
        int lt = tile0, lk = k00;
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
            if (u_begin + s < u_end)
                load_w(lt, lk, s);
            lk += KC;
            if (lk >= a.nc * KC)
                lk = 0, lt++;
        }
    }
    pdl_wait();
    int lt = tile0, lk = k00;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (u_begin + s < u_end)
            load_x(lk, s);
        cu_cp_commit();
        lk += KC;
        if (lk >= a.nc * KC)
            lk = 0, lt++;
    }

    float acc[F][4];
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;
    int seg_begin = u_begin, tile = tile0, kc_i = k00 / KC; /* the unit computed: its tile and chunk */

    for (int u = u_begin; u < u_end; u++) {
        const int i = (int)(u - u_begin);
        cu_cp_wait<STAGES - 2>();
        __syncthreads(); /* unit u landed; every warp is done with the slot refilled below */
        {
            if (u + STAGES - 1 < u_end) {
                load_w(lt, lk, (i + STAGES - 1) % STAGES);
                load_x(lk, (i + STAGES - 1) % STAGES);
            }
            cu_cp_commit();
            lk += KC;
            if (lk >= a.nc * KC)
                lk = 0, lt++;
        }
        const TX *ws = sm + (i % STAGES) * L::STAGE, *xs = ws + BM * LD;
#pragma unroll
        for (int ks = 0; ks < KC / 16; ks++) {
            uint32_t af[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                cu_ldm4(af[mt], cu_smem_addr(ws + ((warp * MT + mt) * 16 + (mi & 1) * 8 + li) * LD + ks * 16 + (mi >> 1) * 8));
#pragma unroll
            for (int np = 0; np < (NT + 1) / 2; np++) {
                uint32_t bf[4];
                cu_ldm4(bf, cu_smem_addr(xs + (np * 16 + (mi >> 1) * 8 + li) * LD + ks * 16 + (mi & 1) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    cu_mma16816<TX>(acc[mt * NT + 2 * np], af[mt], bf[0], bf[1]);
                    if (2 * np + 1 < NT)
                        cu_mma16816<TX>(acc[mt * NT + 2 * np + 1], af[mt], bf[2], bf[3]);
                }
            }
        }

        if (++kc_i < a.nc && u + 1 != u_end)
            continue; /* the tile goes on in this block */
        skm_tile_end<TY, THREADS, F, NT, BM>(a, acc, tile, seg_begin, u, threadIdx.x, 1, &is_last,
                                             [&](int f) { return warp * MT + f / NT; });
        seg_begin = u + 1;
        tile++, kc_i = 0;
    }
    cu_cp_wait<0>(); /* no cp.async left in flight at exit */
}

/* ---- host side ---------------------------------------------------------------------------- */

#define SKM_VARIANTS 4

static int g_streamk = -1; /* -1: not read yet */

extern "C" void lg_cuda_streamk_mode(int mode) { g_streamk = mode; }

/* default 2: the TMA + wgmma kernel (gemm_tma.cu; it declines on GPUs before Hopper) */
int cu_streamk_mode(void) { return cu_switch(&g_streamk, "LG_STREAMK", 2); }

typedef void (*skm_fn)(skm_args);
struct skm_kernel {
    skm_fn f;
    int warps, bm, kc;
    size_t smem;
};

template <typename TX, typename TY, int NT, int WARPS, int MT, int KC, int STAGES> static skm_kernel make()
{
    skm_kernel k;
    k.f = gemm_streamk_kernel<TX, TY, NT, WARPS, MT, KC, STAGES>;
    k.warps = WARPS;
    k.bm = 16 * MT * WARPS;
    k.kc = KC;
    k.smem = (size_t)STAGES * skm_layout<WARPS, MT, KC, NT>::STAGE * sizeof(TX);
    return k;
}

template <typename TX, typename TY, int NT> static skm_kernel pick(int v)
{
    switch (v) {
    case 1: return make<TX, TY, NT, 8, 1, 128, 3>();
    case 2: return make<TX, TY, NT, 4, 1, 256, 3>();
    case 3: return make<TX, TY, NT, 4, 2, 64, NT == 8 ? 3 : 4>();
    default: return make<TX, TY, NT, 4, 1, 128, NT == 8 ? 3 : 4>();
    }
}

template <typename TX, typename TY> static skm_kernel pick_nt(int nt, int v)
{
    switch (nt) {
    case 1: return pick<TX, TY, 1>(v);
    case 2: return pick<TX, TY, 2>(v);
    case 4: return pick<TX, TY, 4>(v);
    default: return pick<TX, TY, 8>(v);
    }
}

int cu_streamk_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    const int mode = cu_streamk_mode();
    const int T = (int)x.rows;
    if ((mode != 1 && (mode < 10 || mode >= 20)) || T < 5 || T > SKM_MAX_T || !skm_shape_ok(x, W))
        return 1;
    const int nt = T <= 8 ? 1 : T <= 16 ? 2 : T <= 32 ? 4 : 8;
    const int v = mode >= 10 ? (mode - 10) % SKM_VARIANTS : 0;
    const skm_kernel k =
        cu_by_mm_types(x.dtype, y.dtype, [&](auto tx, auto ty) { return pick_nt<decltype(tx), decltype(ty)>(nt, v); });
    if (k.smem > c->max_smem_optin)
        return 1;
    const int per_sm = cu_resident_blocks((const void *)k.f, k.warps * 32, k.smem);
    if (per_sm < 1)
        return 1;
    skm_args a;
    skm_set_call(&a, y, x, W, bias, accumulate);
    const int G = skm_plan(c, &a, k.bm, k.kc, nt * 8, per_sm);
    if (G <= 0)
        return G < 0 ? -1 : 1;
    cudaError_t e = cu_launch(c, k.f, dim3((unsigned)G), dim3((unsigned)(k.warps * 32)), k.smem, a);
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: stream-K launch (N=%d T=%d K=%d) failed: %s", a.N, T, a.K, cudaGetErrorString(e));
    return 0;
}
