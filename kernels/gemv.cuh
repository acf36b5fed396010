/*
 * gemv.cuh — the skinny-matmul kernel for T <= 4 token rows, shared by the
 * matmul's GEMV path (gemv.cu, which documents the kernel's design and
 * measurements) and the fused norm + matmul op (norm_matmul.cu):
 *
 *   PRO = 0: x read from global memory (the T rows, through L1);
 *   PRO = 1: x = rmsnorm(resid (+ delta)) * g computed by every block into
 *            shared memory before the weight stream is consumed, bit for bit
 *            as add_rmsnorm.cu's vector kernel computes it (see
 *            gemv_norm_prologue); block 0 stores resid + delta to rout;
 *   EPI = 0: y[t, n] = (accumulate ? y : 0) + x W^T (+ bias), n < N;
 *   EPI = 1: W holds 2N rows (gate, then up); the warp of feature f reads
 *            rows f and f + N and stores y[t, f] = silu(g) * u, with g and u
 *            rounded to y's dtype first, as matmul + silu_mul.cu compute it;
 *   EPI = 2: W holds the q|k|v rows (N = (nh + 2 nkv) hd); the warp of pair p
 *            reads rows i and i + hd/2 of head p / (hd/2) (i = its offset),
 *            rounds both, rotates them when the head is q or k, stores them
 *            to y and, for k and v heads, to the token's KV cache slot: as
 *            matmul + rope_kv.cu compute it (rope_cos_sin, rope_rotate).
 */
#ifndef LG_GEMV_CUH
#define LG_GEMV_CUH

#include "kernels/gemm_streamk.cuh" /* skm_call: the call's fields */

#define GEMV_WARPS 4
#define GEMV_NORM_J 4 /* PRO: emulated norm warps per real warp; rows of at most 32 * 4 * 4 * 8 = 4096 */

/* skm_set_call's fields (N: output columns; with EPI = 1 half of W's rows), then: */
struct gemv_args : skm_call {
    int pf_blocks; /* blocks that issue the L2 prefetch of their rows */
    /* PRO = 1 */
    const void *resid, *delta, *g;
    void *rout;
    int64_t ldr, ldd, ldro;
    lg_dtype gdt;
    int g_vec;
    float eps;
    /* EPI = 2: rope_kv_write's arguments */
    const int32_t *pos, *slot;
    const float *inv_freq;
    char *kv_base;
    size_t page_bytes, k_off, v_off;
    int page_tokens, nh, nkv, hd;
};

/* Row r (< R) of the warp whose first output is n0 (EPI: its feature or pair). */
template <int EPI>
__device__ __forceinline__ int64_t gemv_row(const gemv_args &a, int n0, int r)
{
    if (EPI == 1)
        return (int64_t)min(n0, a.N - 1) + (int64_t)r * a.N;
    if (EPI == 2) {
        const int half = a.hd >> 1, p = min(n0, (a.N >> 1) - 1), h = p / half;
        return (int64_t)h * a.hd + (p - h * half) + r * half;
    }
    return min(n0 + r, a.N - 1);
}

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

/* PRO = 1: the T normed rows into xs ([T][K8] 16-byte words), after pdl_wait, each in
 * add_rmsnorm.cu's exact order (norm_row_ms, cuda_common.cuh: the block's 4 warps play the
 * vector kernel's K8 / 32), so inv, and each output, is the same float. */
template <typename TX, int T> __device__ __forceinline__ void gemv_norm_prologue(const gemv_args &a, uint4 *xs)
{
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, K8 = a.K >> 3;
    for (int t = 0; t < T; t++) {
        const uint4 *r = (const uint4 *)((const TX *)a.resid + t * a.ldr);
        const uint4 *d = a.delta ? (const uint4 *)((const TX *)a.delta + t * a.ldd) : NULL;
        uint4 *ro = blockIdx.x == 0 && a.delta ? (uint4 *)((TX *)a.rout + t * a.ldro) : NULL;
        uint4 ru[GEMV_NORM_J];
        const float inv = rsqrtf(norm_row_ms<TX, GEMV_NORM_J, GEMV_WARPS>(r, d, ro, K8, red, ru) + a.eps);
#pragma unroll
        for (int j = 0; j < GEMV_NORM_J; j++) {
            const int ch = lane + 32 * (w + GEMV_WARPS * j);
            if (ch < K8) {
                float v[8];
                unpack8<TX>(ru[j], v);
                xs[t * K8 + ch] = norm_scale8<TX>(v, inv, a.g, a.gdt, a.g_vec, ch * 8);
            }
        }
        __syncthreads(); /* xs complete; red free for the next row */
    }
}

template <typename TX, typename TY, int T, int R, int U, int PRO, int EPI>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(const __grid_constant__ gemv_args a)
{
    extern __shared__ uint4 gemv_xs[]; /* PRO: [T][K8] */
    static_assert(!EPI || R == 2, "the silu and rope epilogues pair two rows in one warp");
    pdl_trigger();
    const int lane = threadIdx.x & 31, N = a.N, K8 = a.K >> 3;
    const int wi = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5); /* the warp's index in the grid */
    const int n0 = EPI ? wi : wi * R;                            /* first output column (EPI: feature, pair) */
    const bool active = n0 < (EPI == 2 ? N >> 1 : N);
    if (!PRO && !active)
        return; /* whole warp: N is uniform */
    const TX *W = (const TX *)a.W;
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) /* rows past the last re-read the last (in bounds) and are not stored */
        wr[r] = (const uint4 *)(W + gemv_row<EPI>(a, n0, r) * a.ldw);
    const uint4 *xr[T];
#pragma unroll
    for (int t = 0; t < T; t++) xr[t] = (const uint4 *)((const TX *)a.x + (int64_t)t * a.ldx);

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
    if ((int)blockIdx.x < a.pf_blocks && lane < R && active && (EPI || n0 + lane < N) && K8 > CH)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(wr[lane] + CH), "r"((K8 - CH) * 16)
                     : "memory");
#endif
    /* everything above touches only W; x, y and bias may be written by the preceding kernel */
    pdl_wait();
    if (PRO) {
        gemv_norm_prologue<TX, T>(a, gemv_xs);
        if (!active)
            return;
    }

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
                    const uint4 xv = PRO ? gemv_xs[t * K8 + i] : __ldg(xr[t] + i);
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

    const float mine = warp_sums_to_lanes<R, T>(acc, lane);
    TY *y = (TY *)a.y;
    if (EPI == 2) { /* lane t: row i, lane T + t: row i + hd/2 of token t */
        const float hi = __shfl_sync(0xffffffffu, mine, lane + T);
        if (lane < T) {
            const int half = a.hd >> 1, h = n0 / half, i = n0 - h * half;
            const int64_t c0 = (int64_t)h * a.hd + i;
            float va = mine, vb = hi;
            if (a.bias) {
                va += load_any(a.bias, a.bdt, c0);
                vb += load_any(a.bias, a.bdt, c0 + half);
            }
            va = to_f32(from_f32<TY>(va)); /* what the matmul stores and rope reads */
            vb = to_f32(from_f32<TY>(vb));
            const bool is_k = h >= a.nh && h < a.nh + a.nkv;
            if (h < a.nh + a.nkv) {
                float co, si;
                rope_cos_sin((float)a.pos[lane], a.inv_freq[i], &co, &si);
                rope_rotate(va, vb, co, si, &va, &vb);
            }
            const TY ya = from_f32<TY>(va), yb = from_f32<TY>(vb);
            TY *yr = y + (int64_t)lane * a.ldy + c0;
            yr[0] = ya;
            yr[half] = yb;
            const int32_t sl = h >= a.nh ? a.slot[lane] : -1;
            if (sl >= 0) {
                const int kvd = a.nkv * a.hd, hk = is_k ? h - a.nh : h - a.nh - a.nkv;
                TY *d = (TY *)(kv_slot_row(a.kv_base, a.page_bytes, a.page_tokens, (size_t)kvd * sizeof(TY), sl) +
                               (is_k ? a.k_off : a.v_off)) +
                        (size_t)hk * a.hd + i;
                d[0] = ya;
                d[half] = yb;
            }
        }
    } else if (EPI) { /* lane t: gate sum, lane T + t: up sum of token t */
        const float up = __shfl_sync(0xffffffffu, mine, lane + T);
        if (lane < T) {
            float g = mine, u = up;
            if (a.bias) {
                g += load_any(a.bias, a.bdt, n0);
                u += load_any(a.bias, a.bdt, n0 + N);
            }
            y[(int64_t)lane * a.ldy + n0] = from_f32<TY>(silu_mul1(to_f32(from_f32<TY>(g)), to_f32(from_f32<TY>(u))));
        }
    } else if (lane < R * T) {
        const int r = lane / T, t = lane - r * T, n = n0 + r;
        if (n < N) {
            TY *p = y + (int64_t)t * a.ldy + n;
            float v = mine;
            if (a.accumulate)
                v += to_f32(*p);
            if (a.bias)
                v += load_any(a.bias, a.bdt, n);
            *p = from_f32<TY>(v);
        }
    }
}

#endif
