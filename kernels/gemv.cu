/*
 * gemv.cu — the skinny matmul for decode (T <= 4 token rows; on Hopper one row, the TMA matmul taking 2..64):
 *   y[t, n] = (accumulate ? y[t, n] : 0) + sum_k x[t, k] * W[n, k] (+ bias[n])
 * with f32 accumulation, x/W f16 or bf16, y in that type or f32 — the same
 * function as the cuBLAS path of gemm.cu, which dispatches here when
 * T <= 4, K % 8 == 0 and x and W rows are 16-byte aligned, and the TMA matmul
 * (gemm_tma.cu) did not take the call.
 *
 * Batch-1 decode is a pure weight stream (x is 8-22 KB, W 32-260 MB), so the
 * kernel is built to keep HBM busy and to do nothing else:
 *   - each warp owns R consecutive output rows and walks the whole K of
 *     them (no split-K, no second reduction pass): lane l reads the 16-byte
 *     words l, l + 32, ... of each row, U words per row per batch, so R * U
 *     independent 16-byte loads are in flight per lane, and the next batch
 *     is issued before the current one is consumed (register double buffer);
 *   - W is read with ld.global.nc.L1::no_allocate (streamed past L1), x
 *     through the ordinary read-only path, so the T rows of x stay in each
 *     SM's L1 and are fetched from L2 about once per SM, not once per block;
 *   - one warp-shuffle reduction per (row, token) at the end; lane r*T+t
 *     applies accumulate/bias and stores y[t, n0 + r] (any stride, any dtype);
 *   - 4-warp blocks, one block per 4*R rows: 4096 rows already give ~15
 *     warps per SM with 8 x 512 B in flight each.
 * Which calls come here (measured on the H100, tests/gpu/bench_gemv.c): T <= 2
 * always; T = 3, 4 only for wide outputs (N >= 16384: gate_up, lm_head), where
 * cuBLAS's split-K kernels are weakest; at T = 4 on N = 4096 the 4x8 f32 FMAs
 * and x reads per weight word make this kernel issue-bound and cuBLAS wins.
 * Default variant R = 2, U = 4: 4096-row shapes then fit in one wave of
 * blocks (R = 1 took 1.55 waves and lost 15-20% on o and down).
 * Programmatic dependent launch (cuda_common.cuh; on unless LG_PDL=0, or
 * forced by mode 2): the kernel may start while the previous kernel on the
 * stream finishes; it issues its first batch of W loads (weights are never
 * written by the preceding kernels), then waits (griddepcontrol.wait)
 * before it touches x, y or the bias. It gained nothing measurable in
 * batch-1 decode while no preceding kernel triggered early; now every step
 * kernel triggers at its start.
 * L2 prefetch: the blocks that start early also ask for more of their rows
 * while they wait: the first pf_blocks blocks (about GEMV_PF_MB = 6 MB of
 * W) issue one cp.async.bulk.prefetch.L2 per row for the part
 * past their first batch. The kernel before a GEMV in a decode step (norm,
 * rope/KV write, attention, silu) leaves HBM mostly idle; this fills part
 * of that gap. Measured on the H100, batch-1 decode ms/step (two runs each,
 * docs/benchmarks.md, GPU kernels, 2026-11-22): 0 MB 5.245-5.271, 3 MB 5.188-5.198, 5 MB
 * 5.165-5.176, 8 MB 5.160-5.191, 12 MB 5.196-5.199, 16 MB 5.256-5.263,
 * 32 MB 5.492; more than the gap can absorb only queues ahead of the other
 * blocks' demand loads. A cache hint only: no value read before the wait.
 *
 * Shared-memory carveout: launched with the least (GEMV_CARVE): all L1, which its loads in flight use
 * (the driver's own choice measured 0.03 ms a step slower at batch 1).
 * Switch (tests and benchmarks): LG_GEMV (c->tune->gemv): 0 = the GEMV off (cuBLAS; on Hopper the TMA
 * matmul still takes 2..64 rows); 1 = auto (default); 2 = auto with programmatic dependent launch;
 * 10 + v = variant v for every T <= 4 call it can take (v = 0..3: R x U = 1x8, 2x4, 2x8, 4x4).
 */
#include "kernels/gemv.cuh"

/* ---- host side ---------------------------------------------------------------------------- */

/* Variants v = 0..3: (R rows per warp, U words per row per batch) = (1,8) (2,4) (2,8) (4,4). */
#define N_VARIANTS 4

/* L2 prefetch budget of one launch, MB: see the kernel */
#define GEMV_PF_MB 6

int cu_gemv_pf_blocks(bool pdl, int blocks, int rows_per_block, int K8)
{
    const size_t block_bytes = (size_t)rows_per_block * (size_t)K8 * 16, pf = (size_t)GEMV_PF_MB << 20;
    return pdl ? (int)(pf / block_bytes < (size_t)blocks ? pf / block_bytes : blocks) : 0;
}

/* The preferred shared-memory carveout of a launch, percent (cuda_common.cuh): 0, all the L1 an SM can have (the
 * kernel has no shared memory; the driver keeps what the blocks' reserve needs). Batch 1 on the H100: 4.966 ->
 * 4.933 ms a step against the driver's choice (docs/benchmarks.md, GPU kernels, 2026-11-24). */
#define GEMV_CARVE 0

template <typename TX, typename TY, int T, int R, int U>
static cudaError_t launch_one(cudaStream_t st, bool pdl, gemv_args a)
{
    const int rows_per_block = GEMV_WARPS * R;
    const int blocks = (a.N + rows_per_block - 1) / rows_per_block;
    a.pf_blocks = cu_gemv_pf_blocks(pdl, blocks, rows_per_block, a.K / 8);
    return cu_launch_carve(st, pdl, GEMV_CARVE, gemv_kernel<TX, TY, T, R, U, 0, 0>, dim3((unsigned)blocks),
                           dim3(GEMV_WARPS * 32), 0, a);
}

template <typename TX, typename TY, int T> static cudaError_t launch_t(int v, cudaStream_t st, bool pdl, gemv_args a)
{
    switch (v) {
    case 0: return launch_one<TX, TY, T, 1, 8>(st, pdl, a);
    case 1: return launch_one<TX, TY, T, 2, 4>(st, pdl, a);
    case 2: return launch_one<TX, TY, T, 2, 8>(st, pdl, a);
    default: return launch_one<TX, TY, T, 4, 4>(st, pdl, a);
    }
}

template <typename TX, typename TY> static cudaError_t launch_ty(int T, int v, cudaStream_t st, bool pdl, gemv_args a)
{
    switch (T) {
    case 1: return launch_t<TX, TY, 1>(v, st, pdl, a);
    case 2: return launch_t<TX, TY, 2>(v, st, pdl, a);
    case 3: return launch_t<TX, TY, 3>(v, st, pdl, a);
    default: return launch_t<TX, TY, 4>(v, st, pdl, a);
    }
}

int cu_gemv_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    const int mode = c->tune->gemv;
    const int T = (int)x.rows;
    if (mode == 0 || T < 1 || T > 4 || (mode < 10 && T > 2 && W.rows < 16384) || x.cols % 8 != 0 ||
        x.stride % 8 != 0 || W.stride % 8 != 0 ||
        !cu_aligned16(x.data) || !cu_aligned16(W.data) || W.rows > INT32_MAX / 2)
        return 1;
    /* default variant 1: two rows per warp, 4 words each in flight per lane */
    int v = mode >= 10 ? (mode - 10) % N_VARIANTS : 1;
    const bool pdl = mode == 2 || c->pdl;
    gemv_args a = {};
    skm_set_call(&a, y, x, W, bias, accumulate);
    const cudaError_t e = cu_by_mm_types(x.dtype, y.dtype, [&](auto tx, auto ty) {
        return launch_ty<decltype(tx), decltype(ty)>(T, v, c->stream, pdl, a);
    });
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: gemv launch (N=%lld T=%d K=%lld) failed: %s", (long long)W.rows, T,
                       (long long)x.cols, cudaGetErrorString(e));
    return 0;
}
