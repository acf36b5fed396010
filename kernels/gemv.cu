/*
 * gemv.cu — the skinny matmul for decode (T <= 4 token rows):
 *   y[t, n] = (accumulate ? y[t, n] : 0) + sum_k x[t, k] * W[n, k] (+ bias[n])
 * with f32 accumulation, x/W f16 or bf16, y in that type or f32 — the same
 * function as the cuBLAS path of gemm.cu, which dispatches here when
 * T <= 4, K % 8 == 0 and x and W rows are 16-byte aligned.
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
 * while they wait: the first pf_blocks blocks (about LG_GEMV_PF_MB MB of
 * W, default 6) issue one cp.async.bulk.prefetch.L2 per row for the part
 * past their first batch. The kernel before a GEMV in a decode step (norm,
 * rope/KV write, attention, silu) leaves HBM mostly idle; this fills part
 * of that gap. Measured on the H100, batch-1 decode ms/step (two runs each,
 * docs/benchmarks.md): 0 MB 5.245-5.271, 3 MB 5.188-5.198, 5 MB
 * 5.165-5.176, 8 MB 5.160-5.191, 12 MB 5.196-5.199, 16 MB 5.256-5.263,
 * 32 MB 5.492; more than the gap can absorb only queues ahead of the other
 * blocks' demand loads. A cache hint only: no value read before the wait.
 *
 * Tuning switch (benchmarks): lg_cuda_gemv_mode() or the environment
 * variable LG_GEMV at first use: 0 = always cuBLAS; 1 = auto (default);
 * 2 = auto with programmatic dependent launch; 10 + v = variant v for every
 * T <= 4 call it can take (v = 0..3: R x U = 1x8, 2x4, 2x8, 4x4).
 */
#include "ops.cuh"

#include <stdlib.h>

#define GEMV_WARPS 4

/* 16-byte streaming load that does not allocate in L1. */
__device__ __forceinline__ uint4 ld_stream16(const uint4 *p)
{
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

/* 8 products of one 16-byte word of W and one of x, summed into acc. */
template <typename TX> __device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc);
template <> __device__ __forceinline__ float dot8<__half>(uint4 w, uint4 x, float acc)
{
    const __half2 *wh = (const __half2 *)&w, *xh = (const __half2 *)&x;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 a = __half22float2(wh[i]), b = __half22float2(xh[i]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}
template <> __device__ __forceinline__ float dot8<__nv_bfloat16>(uint4 w, uint4 x, float acc)
{
    const uint32_t *wu = (const uint32_t *)&w, *xu = (const uint32_t *)&x;
#pragma unroll
    for (int i = 0; i < 4; i++) { /* bf16 -> f32 is a shift: low half << 16, high half & 0xffff0000 */
        acc = fmaf(__uint_as_float(wu[i] << 16), __uint_as_float(xu[i] << 16), acc);
        acc = fmaf(__uint_as_float(wu[i] & 0xffff0000u), __uint_as_float(xu[i] & 0xffff0000u), acc);
    }
    return acc;
}

template <typename TX, typename TY, int T, int R, int U>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(TY *__restrict__ y, int64_t ldy, const TX *__restrict__ x, int64_t ldx, const TX *__restrict__ W,
                int64_t ldw, const void *bias, lg_dtype bdt, int N, int K8, int accumulate, int pf_blocks)
{
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= N)
        return; /* whole warp: N is uniform */
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) /* rows past N re-read row N-1 (in bounds) and are not stored */
        wr[r] = (const uint4 *)(W + (int64_t)min(n0 + r, N - 1) * ldw);
    const uint4 *xr[T];
#pragma unroll
    for (int t = 0; t < T; t++) xr[t] = (const uint4 *)(x + (int64_t)t * ldx);

    constexpr int CH = 32 * U; /* 16-byte words of a row per batch */
    const int nch = (K8 + CH - 1) / CH;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;

    uint4 cur[R][U], nxt[R][U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) cur[r][u] = i < K8 ? ld_stream16(wr[r] + i) : make_uint4(0, 0, 0, 0);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* the first pf_blocks blocks (launched early by PDL, while the kernel
     * before still runs and HBM idles) also ask for the rest of their rows
     * into L2: one bulk prefetch per row, past the batch loaded above */
    if ((int)blockIdx.x < pf_blocks && lane < R && n0 + lane < N && K8 > CH)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(wr[lane] + CH), "r"((K8 - CH) * 16)
                     : "memory");
#endif
    /* everything above touches only W; x, y and bias may be written by the preceding kernel */
    asm volatile("griddepcontrol.wait;" ::: "memory");

#pragma unroll 1
    for (int c = 0; c < nch; c++) {
        const int base = lane + c * CH;
        if (c + 1 < nch) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int i = base + CH + 32 * u;
#pragma unroll
                for (int r = 0; r < R; r++) nxt[r][u] = i < K8 ? ld_stream16(wr[r] + i) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = base + 32 * u;
            if (i < K8) {
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const uint4 xv = __ldg(xr[t] + i);
#pragma unroll
                    for (int r = 0; r < R; r++) acc[r][t] = dot8<TX>(cur[r][u], xv, acc[r][t]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) cur[r][u] = nxt[r][u];
    }

    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float s = warp_sum(acc[r][t]);
            if (lane == r * T + t)
                mine = s;
        }
    if (lane < R * T) {
        const int r = lane / T, t = lane - r * T, n = n0 + r;
        if (n < N) {
            TY *p = y + (int64_t)t * ldy + n;
            float v = mine;
            if (accumulate)
                v += to_f32(*p);
            if (bias)
                v += load_any(bias, bdt, n);
            *p = from_f32<TY>(v);
        }
    }
}

/* ---- host side ---------------------------------------------------------------------------- */

typedef void (*gemv_fn)(void *, int64_t, const void *, int64_t, const void *, int64_t, const void *, lg_dtype, int,
                        int, int, int);

/* Variants v = 0..3: (R rows per warp, U words per row per batch) = (1,8) (2,4) (2,8) (4,4). */
#define N_VARIANTS 4

static int g_mode = -1; /* -1: not read yet */

extern "C" void lg_cuda_gemv_mode(int mode) { g_mode = mode; }

static int gemv_mode(void) { return cu_switch(&g_mode, "LG_GEMV", 1); }

/* L2 prefetch budget of one launch, MB (LG_GEMV_PF_MB; 0: none): see the kernel */
#define GEMV_PF_MB 6
static int g_pf_mb = -1;

template <typename TX, typename TY, int T, int R, int U>
static cudaError_t launch_one(cudaStream_t st, bool pdl, TY *y, int64_t ldy, const TX *x, int64_t ldx, const TX *W,
                              int64_t ldw, const void *bias, lg_dtype bdt, int N, int K8, int acc, size_t pf_bytes)
{
    const int rows_per_block = GEMV_WARPS * R;
    const int blocks = (N + rows_per_block - 1) / rows_per_block;
    const size_t block_bytes = (size_t)rows_per_block * (size_t)K8 * 16;
    const int pf_blocks = pdl ? (int)(pf_bytes / block_bytes < (size_t)blocks ? pf_bytes / block_bytes : blocks) : 0;
    return cu_launch_on(st, pdl, gemv_kernel<TX, TY, T, R, U>, dim3((unsigned)blocks), dim3(GEMV_WARPS * 32), 0, y, ldy,
                        x, ldx, W, ldw, bias, bdt, N, K8, acc, pf_blocks);
}

template <typename TX, typename TY, int T>
static cudaError_t launch_t(int v, cudaStream_t st, bool pdl, TY *y, int64_t ldy, const TX *x, int64_t ldx,
                            const TX *W, int64_t ldw, const void *bias, lg_dtype bdt, int N, int K8, int acc, size_t pf)
{
    switch (v) {
    case 0: return launch_one<TX, TY, T, 1, 8>(st, pdl, y, ldy, x, ldx, W, ldw, bias, bdt, N, K8, acc, pf);
    case 1: return launch_one<TX, TY, T, 2, 4>(st, pdl, y, ldy, x, ldx, W, ldw, bias, bdt, N, K8, acc, pf);
    case 2: return launch_one<TX, TY, T, 2, 8>(st, pdl, y, ldy, x, ldx, W, ldw, bias, bdt, N, K8, acc, pf);
    default: return launch_one<TX, TY, T, 4, 4>(st, pdl, y, ldy, x, ldx, W, ldw, bias, bdt, N, K8, acc, pf);
    }
}

template <typename TX, typename TY>
static cudaError_t launch_ty(int T, int v, cudaStream_t st, bool pdl, lg_tensor y, lg_tensor x, lg_tensor W,
                             lg_tensor bias, int acc, size_t pf)
{
    TY *yp = (TY *)y.data;
    const TX *xp = (const TX *)x.data, *wp = (const TX *)W.data;
    const int N = (int)W.rows, K8 = (int)(x.cols / 8);
    switch (T) {
    case 1: return launch_t<TX, TY, 1>(v, st, pdl, yp, y.stride, xp, x.stride, wp, W.stride, bias.data, bias.dtype, N, K8, acc, pf);
    case 2: return launch_t<TX, TY, 2>(v, st, pdl, yp, y.stride, xp, x.stride, wp, W.stride, bias.data, bias.dtype, N, K8, acc, pf);
    case 3: return launch_t<TX, TY, 3>(v, st, pdl, yp, y.stride, xp, x.stride, wp, W.stride, bias.data, bias.dtype, N, K8, acc, pf);
    default: return launch_t<TX, TY, 4>(v, st, pdl, yp, y.stride, xp, x.stride, wp, W.stride, bias.data, bias.dtype, N, K8, acc, pf);
    }
}

int cu_gemv_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cuda_ctx *c = CU_CTX(be);
    const int mode = gemv_mode();
    const int T = (int)x.rows;
    if (mode == 0 || T < 1 || T > 4 || (mode < 10 && T > 2 && W.rows < 16384) || x.cols % 8 != 0 ||
        x.stride % 8 != 0 || W.stride % 8 != 0 ||
        !cu_aligned16(x.data) || !cu_aligned16(W.data) || W.rows > INT32_MAX / 2)
        return 1;
    /* default variant 1: two rows per warp, 4 words each in flight per lane */
    int v = mode >= 10 ? (mode - 10) % N_VARIANTS : 1;
    const bool pdl = mode == 2 || c->pdl;
    const int acc = accumulate ? 1 : 0;
    const size_t pf = (size_t)cu_switch(&g_pf_mb, "LG_GEMV_PF_MB", GEMV_PF_MB) << 20;
    cudaError_t e;
    if (x.dtype == LG_F16) {
        if (y.dtype == LG_F32) e = launch_ty<__half, float>(T, v, c->stream, pdl, y, x, W, bias, acc, pf);
        else e = launch_ty<__half, __half>(T, v, c->stream, pdl, y, x, W, bias, acc, pf);
    } else {
        if (y.dtype == LG_F32) e = launch_ty<__nv_bfloat16, float>(T, v, c->stream, pdl, y, x, W, bias, acc, pf);
        else e = launch_ty<__nv_bfloat16, __nv_bfloat16>(T, v, c->stream, pdl, y, x, W, bias, acc, pf);
    }
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: gemv launch (N=%lld T=%d K=%lld) failed: %s", (long long)W.rows, T,
                       (long long)x.cols, cudaGetErrorString(e));
    return 0;
}
