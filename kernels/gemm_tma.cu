/*
 * gemm_tma.cu — stream-K decode matmul on Hopper's TMA and wgmma, for 1..64 token rows:
 *   for t < T, n < N:
 *     y[t, n] = (accumulate ? y[t, n] : 0) + sum_k x[t, k] * W[n, k] (+ bias[n])
 * f32 accumulation; x and W f16 or bf16 (one type), y that type or f32. The same function as the
 * cuBLAS path of gemm.cu, which dispatches here (cu_tma_try) by default for 2..64 rows on Hopper
 * when x and W are 16-byte aligned with K % 8 == 0 (rows past T arrive as zeros: 2..8 rows take the 8-row
 * form).
 *
 * A decode matmul is a stream of weights (32-260 MB) against a few KB of x. A stream-K kernel on
 * cp.async and mma.sync (no longer built) spent its issue slots on the copies and ldmatrix and measured
 * slower than cuBLAS from T = 16 up; here the copies and the math are both asynchronous:
 *
 *  - Work split: stream-K over (tile of BM rows of W, chunk of KC = 64 KB columns) units, one wave
 *    of blocks, split tiles summed in-kernel by the last block (gemm_streamk.cuh); with at least as
 *    many tiles as blocks, the hybrid plan: each block's split units first, then its whole tiles, so
 *    no block ends on a split tile's sum (docs/benchmarks.md, GPU kernels, 2026-11-23).
 *  - Loads: one producer thread (the last warp) issues TMA copies (cp.async.bulk.tensor) of the W tile
 *    [BM][64] and the x tile [NTOK][64] per 64 columns, 128-byte swizzled, into two rings of shared
 *    memory: W into SW stages (as many as fit: HBM needs ~100+ KB in flight per SM), x into SX = 2-4
 *    (from L2). Each stage completes on an mbarrier by transaction bytes and is released by the
 *    consumers on a second one; rows past N or T and columns past K arrive as zeros. W's copies carry
 *    an L2 evict_first policy (LG_L2_HINT bit 1, cuda_common.cuh): each weight byte is read once, so
 *    it should leave L2 before x and the split-K partials do (0.3 ms a W1 step on the H100).
 *  - Math: a consumer warpgroup runs wgmma m64nNTOKk16 with A = W rows (the output features:
 *    "swap AB", so the 64-row instruction shape is filled by weights, not by tokens) and B = x rows,
 *    both K-major straight from shared memory, f32 accumulators in registers; warp w of the group
 *    holds rows 16 w .. 16 w + 15 of each 64-row block, in mma fragment order (gemm_streamk.cuh).
 *  - Two consumer warpgroups (CWG = 2) take the block's tiles in turn, handing the rings over on a
 *    named barrier: a tile's epilogue (partial to the workspace, the last block's sum, the stores)
 *    runs while the other group consumes the next tile, so the W stream does not stop for it.
 *  - Programmatic dependent launch: the W copies of the first SW units are issued before
 *    pdl_wait (weights are never written by a kernel), the x copies, y, workspace and counters after.
 *
 * Variants v: see pick() (rows per tile, columns per unit, stages, shared memory, blocks per SM).
 * NTOK = 8, 16, 32, 64 by T.
 * Switch: the stream-K mode (LG_STREAMK, c->tune->streamk): 2 (default) = this kernel, variant 0, for
 * TMA_AUTO_MIN_T..TMA_AUTO_MAX_T rows; 20 + v = variant v for every call of 1..64 rows it can take (tests,
 * benchmarks); 0 = cuBLAS (and the GEMV for up to 4 rows).
 */
#include "kernels/gemm_streamk.cuh"
#include "kernels/mma.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#define TMA_MAX_T 64 /* the most rows of any form (NTOK = 64) */
/* The default's rows (mode 2): from 2 rows this kernel beats the GEMV and cuBLAS (batch 2 and 4 decode -0.3 /
 * -0.5 ms a step on the H100), and since the hybrid plan it beats cuBLAS at 33..64 rows too (48 and 64
 * sequences -0.15 / -0.1 ms); one row stays on the GEMV, whose fused norm, rope and SwiGLU forms this kernel
 * lacks (docs/benchmarks.md, GPU kernels, 2026-11-23) */
#define TMA_AUTO_MIN_T 2
#define TMA_AUTO_MAX_T 64

struct tma_args {
    CUtensorMap w; /* W [N][K]: box 64 columns x BM rows, 128-byte swizzle */
    CUtensorMap x; /* x [T][K]: box 64 columns x NTOK rows, 128-byte swizzle */
    skm_args s;
    int l2first; /* W read with L2 evict_first (LG_L2_HINT bit 1, cuda_common.cuh) */
};

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* ---- mbarrier, TMA and wgmma (sm_90a) ---- */
__device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(cu_smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(cu_smem_addr(b)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(cu_smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(cu_smem_addr(b)), "r"(parity)
                     : "memory");
}
/* 2-D tile (c0 = column, c1 = row) of tensor map m into shared dst, completing on bar */
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(cu_smem_addr(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(cu_smem_addr(bar))
                 : "memory");
}
/* the same with an L2 cache policy */
__device__ __forceinline__ void tma_load_2d_hint(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *bar,
                                                 uint64_t pol)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 ::"r"(cu_smem_addr(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(cu_smem_addr(bar)), "l"(pol)
                 : "memory");
}
/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
/* keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma */
__device__ __forceinline__ void wg_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* d[N / 8][4] (+)= A (64 x 16, descriptor da) B (16 x N, descriptor db); both K-major */
template <int N, typename T> __device__ __forceinline__ void wg_mma(float (*d)[4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wg_mma<8, __half>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<8, __nv_bfloat16>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<16, __half>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<16, __nv_bfloat16>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<32, __half>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<32, __nv_bfloat16>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<64, __half>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wg_mma<64, __nv_bfloat16>(float (*d)[4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db), "r"(1));
}
#else
/* not an sm_90a build: the kernel body is compiled out */
#endif

template <typename TX, typename TY, int NTOK, int BM, int KB, int SW, int SX, int CWG>
__global__ void __launch_bounds__(128 * CWG + 32, 1) gemm_tma_kernel(const __grid_constant__ tma_args ta)
{
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a features: cu_tma_try is only reached on such a build by mistake */
#else
    const skm_args &a = ta.s;
    constexpr int MB = BM / 64, NT = NTOK / 8, F = MB * NT, KC = 64 * KB;
    constexpr int WB = BM * 128, XB = NTOK * 128, WST = KB * WB, XST = KB * XB; /* bytes */
    extern __shared__ unsigned char tma_sm_raw[];
    __shared__ __align__(8) uint64_t wfull[SW], wempty[SW], xfull[SX], xempty[SX];
    __shared__ int is_last[CWG];
    /* the rings: 1024-byte aligned (the 128-byte swizzle pattern repeats every 8 rows of 128 bytes) */
    unsigned char *wsm = tma_sm_raw + ((1024 - (cu_smem_addr(tma_sm_raw) & 1023)) & 1023), *xsm = wsm + SW * WST;
    pdl_trigger();

    const skm_walk wk = skm_block_walk(a, blockIdx.x, gridDim.x); /* stream-K units, then whole tiles */
    const int n = wk.n, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < SW; s++) {
            mbar_init(&wfull[s], 1);
            mbar_init(&wempty[s], 4);
        }
        for (int s = 0; s < SX; s++) {
            mbar_init(&xfull[s], 1);
            mbar_init(&xempty[s], 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 4 * CWG) { /* producer: one thread */
        if (lane != 0)
            return;
        const uint64_t pol = ta.l2first ? l2_policy_first() : 0;
        auto load = [&](int j, bool w) { /* W or x of unit j into its slot */
            const int u = wk.unit(j), tile = u / a.nc, k0 = (u - tile * a.nc) * KC;
            if (w) {
                const int s = j % SW;
                mbar_expect_tx(&wfull[s], WST);
#pragma unroll
                for (int kb = 0; kb < KB; kb++) {
                    if (ta.l2first)
                        tma_load_2d_hint(wsm + s * WST + kb * WB, &ta.w, k0 + kb * 64, tile * BM, &wfull[s], pol);
                    else
                        tma_load_2d(wsm + s * WST + kb * WB, &ta.w, k0 + kb * 64, tile * BM, &wfull[s]);
                }
            } else {
                const int s = j % SX;
                mbar_expect_tx(&xfull[s], XST);
#pragma unroll
                for (int kb = 0; kb < KB; kb++) tma_load_2d(xsm + s * XST + kb * XB, &ta.x, k0 + kb * 64, 0, &xfull[s]);
            }
        };
        /* W of unit j may go once unit j - SW is consumed, x of unit j once unit j - SX is: W runs SW - SX units
         * ahead of x (weights from HBM need the deep ring, x comes from L2) */
        int jw = n < SW ? n : SW;
        for (int j = 0; j < jw; j++) load(j, true);
        pdl_wait();
        for (int jx = 0; jx < n; jx++) {
            if (jx >= SX)
                mbar_wait(&xempty[jx % SX], (jx / SX - 1) & 1); /* unit jx - SX consumed */
            load(jx, false);
            for (; jw < n && jw - SW <= jx - SX; jw++) {
                mbar_wait(&wempty[jw % SW], (jw / SW - 1) & 1);
                load(jw, true);
            }
        }
        return;
    }

    /* consumers: CWG warpgroups, taking the block's tiles in turn: while one runs a tile's epilogue (its
     * partial sum, the last block's sum of the slots, the stores), the next consumes the following tile */
    pdl_wait();
    const int wg = warp >> 2, wtid = threadIdx.x & 127, wwarp = wtid >> 5;
    float acc[F][4];
#pragma unroll
    for (int f = 0; f < F; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;
    int seg_begin = wk.unit(0), k = 0; /* k: tile of the block */
    bool started = false;
    for (int i = 0; i < n; i++) {
        const int u = wk.unit(i);
        const bool tile_end = wk.seg_end(i, a.nc);
        if (k % CWG != wg) { /* another warpgroup's tile */
            if (tile_end)
                seg_begin = wk.unit(i + 1), k++;
            continue;
        }
        if (CWG > 1 && !started && k > 0) /* tile k - 1 fully consumed by the other warpgroup */
            asm volatile("bar.sync %0, %1;" ::"r"(2 + ((k - 1) & 1)), "n"(256) : "memory");
        started = true;
        const int sw = i % SW, sx = i % SX;
        mbar_wait(&xfull[sx], (i / SX) & 1);
        mbar_wait(&wfull[sw], (i / SW) & 1);
        const uint32_t wa = cu_smem_addr(wsm + sw * WST), xa = cu_smem_addr(xsm + sx * XST);
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) wg_reg_fence(acc[f][e]);
        wg_fence();
#pragma unroll
        for (int kb = 0; kb < KB; kb++)
#pragma unroll
            for (int k16 = 0; k16 < 4; k16++) {
                const uint64_t db = wg_desc(xa + kb * XB + k16 * 32);
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
                    wg_mma<NTOK, TX>(acc + mb * NT, wg_desc(wa + kb * WB + mb * 8192 + k16 * 32), db);
            }
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int f = 0; f < F; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) wg_reg_fence(acc[f][e]);
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(&wempty[sw]);
            mbar_arrive(&xempty[sx]);
        }
        if (!tile_end)
            continue; /* the tile goes on in this block */
        if (CWG > 1 && i + 1 != n) /* hand the ring to the other warpgroup */
            asm volatile("bar.arrive %0, %1;" ::"r"(2 + (k & 1)), "n"(256) : "memory");
        started = false;
        skm_tile_end<TY, 128, F, NT, BM>(a, acc, u / a.nc, seg_begin, u, wtid, 4 + wg, &is_last[wg],
                                          [&](int f) { return (f / NT) * 4 + wwarp; });
        seg_begin = wk.unit(i + 1), k++;
    }
#endif
}

/* ---- host side ---------------------------------------------------------------------------- */

#define TMA_VARIANTS 6

typedef void (*tma_fn)(tma_args);
struct tma_kernel {
    tma_fn f;
    int bm, kc, ntok, bps, threads; /* bps: blocks launched per SM at most */
    size_t smem;
};

/* BM rows x 64 KB columns per unit; SX x stages (from L2), as many W stages (from HBM) as fit in BUDGET KB of
 * shared memory, at most MAXS; BPS blocks per SM */
template <typename TX, typename TY, int NTOK, int BM, int KB, int SX, int MAXS, int BUDGET, int BPS, int CWG = 2>
static tma_kernel make()
{
    constexpr int WST = KB * BM * 128, XST = KB * NTOK * 128, FIT = (BUDGET * 1024 - 1024 - SX * XST) / WST,
                  SW = FIT < MAXS ? FIT : MAXS;
    static_assert(SW > SX, "the W ring deeper than the x ring");
    tma_kernel k;
    k.f = gemm_tma_kernel<TX, TY, NTOK, BM, KB, SW, SX, CWG>;
    k.threads = 128 * CWG + 32;
    k.bm = BM;
    k.kc = 64 * KB;
    k.ntok = NTOK;
    k.bps = BPS;
    k.smem = (size_t)SW * WST + SX * XST + 1024;
    return k;
}

template <typename TX, typename TY, int NTOK> static tma_kernel pick(int v)
{
    constexpr int SX = NTOK >= 64 ? 3 : 4;
    switch (v) {
    case 1: return make<TX, TY, NTOK, 64, 2, SX, 32, 220, 1>();    /* 256-byte runs of W rows per unit */
    case 2: return make<TX, TY, NTOK, 64, 2, SX, 32, 220, 1, 1>(); /* one consumer warpgroup */
    case 3: return make<TX, TY, NTOK, 128, 1, SX, 32, 220, 1>();   /* half the x traffic per W byte */
    case 4: return make<TX, TY, NTOK, 64, 1, SX, 32, 220, 1>();    /* finer W stages */
    case 5: return make<TX, TY, NTOK, 128, 2, SX, 32, 220, 1>();
    default: return make<TX, TY, NTOK, 64, 4, NTOK >= 32 ? 2 : SX, 32, 220, 1>(); /* 512-byte runs of W rows */
    }
}

template <typename TX, typename TY> static tma_kernel pick_n(int T, int v)
{
    if (T <= 8)
        return pick<TX, TY, 8>(v);
    if (T <= 16)
        return pick<TX, TY, 16>(v);
    if (T <= 32)
        return pick<TX, TY, 32>(v);
    return pick<TX, TY, 64>(v);
}

static PFN_cuTensorMapEncodeTiled_v12000 g_encode;
static unsigned long g_launches;

/* launches so far (op tests: the kernel, not a fallback, served the call) */
extern "C" unsigned long lg_cuda_tma_launches(void) { return g_launches; }

/* tensor map of a row-major [rows][cols] half matrix with row stride ld: boxes of 64 columns x box_rows */
static int make_map(cuda_ctx *c, CUtensorMap *m, const void *p, lg_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                    int box_rows)
{
    if (!g_encode) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !f)
            return CU_FAIL(c, "matmul: the driver has no cuTensorMapEncodeTiled");
        g_encode = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, es[2] = {1, 1};
    CUresult r = g_encode(m, dt == LG_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                          (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return CU_FAIL(c, "matmul: cuTensorMapEncodeTiled [%lld x %lld, ld %lld] failed (%d)", (long long)rows,
                       (long long)cols, (long long)ld, (int)r);
    return 0;
}

bool cu_tma_takes(const cuda_ctx *c, int T)
{
    const int mode = c->tune->streamk;
    if (c->cc_major != 9) /* wgmma and this SASS are sm_90a only: Hopper, not later GPUs */
        return false;
    if (mode == 2)
        return T >= TMA_AUTO_MIN_T && T <= TMA_AUTO_MAX_T;
    return mode >= 20 && mode < 30 && T >= 1 && T <= TMA_MAX_T;
}

int cu_tma_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    const int mode = c->tune->streamk;
    const int T = (int)x.rows;
    if (!cu_tma_takes(c, T) || !skm_shape_ok(x, W))
        return 1;
    const int v = mode >= 20 ? (mode - 20) % TMA_VARIANTS : 0;
    const tma_kernel k =
        cu_by_mm_types(x.dtype, y.dtype, [&](auto tx, auto ty) { return pick_n<decltype(tx), decltype(ty)>(T, v); });
    if (k.smem > c->max_smem_optin)
        return 1;
    const int per_sm = cu_resident_blocks(c, (const void *)k.f, k.threads, k.smem);
    if (per_sm < 1)
        return 1;
    tma_args ta;
    ta.l2first = (cu_l2_hint(c) & 1) != 0;
    skm_args &a = ta.s;
    skm_set_call(&a, y, x, W, bias, accumulate);
    if (make_map(c, &ta.w, W.data, W.dtype, W.rows, W.cols, W.stride, k.bm) != 0 ||
        make_map(c, &ta.x, x.data, x.dtype, x.rows, x.cols, x.stride, k.ntok) != 0)
        return -1;
    const int G = skm_plan(c, &a, k.bm, k.kc, k.ntok, per_sm < k.bps ? per_sm : k.bps);
    if (G <= 0)
        return G < 0 ? -1 : 1;
    cudaError_t e = cu_launch(c, k.f, dim3((unsigned)G), dim3((unsigned)k.threads), k.smem, ta);
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: TMA launch (N=%d T=%d K=%d) failed: %s", a.N, T, a.K, cudaGetErrorString(e));
    g_launches++;
    return 0;
}
