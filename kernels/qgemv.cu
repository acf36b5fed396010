/*
 * qgemv.cu — the skinny matmul for decode (T = 1..4 token rows) over the planar checkpoint layouts
 * of backend.h (F8, F8_A8, F8_A8S, F8_A8G, I4), on the CUDA cores:
 *
 *   y[t, n] = (accumulate ? y[t, n] : 0) + sum_g d[n, g] * s[t, g] * sum_{k in g} xq[t, k] * wq[n, k]  (+ bias[n])
 *
 * the same function as qmm.cuh's tensor-core weight stream (same qmm_args, same activation modes:
 * QMM_X_RAW x as it is; QMM_X_Q8 matmul_f8.cu's prepass e4m3 bytes and s [T, nb]; QMM_X_A8S x
 * rounded here by the row's a with the prepass's amax), which matmul_f8.cu / matmul_i4.cu call
 * first when T <= QGEMV_MAX_T (cu_qgemv_try; LG_QGEMV = 0 turns it off).
 *
 * Why: at T <= 4 the tensor-core kernel uses 1/8 .. 1/2 of each mma's token columns and reaches
 * 1.0 .. 3.0 TB/s on the H200; a GEMV that keeps more weight bytes in flight per SM is bound by
 * HBM, as gemv.cu is for 16-bit weights.
 *
 * How (gemv.cu's design, on the q plane): each warp owns R consecutive output rows and walks all
 * of K; lane l reads the 16-byte words l, l + 32, ... of each q row (F8: 16 e4m3 of one group, 8
 * words a group; I4: 32 nibbles, 4 words a group), U words per row per batch, with
 * ld.global.nc.L1::no_allocate, and issues the next batch (with its d, z) before it consumes the
 * current one (register double buffer); the first batch before pdl_wait (weights are never written
 * by the kernels before). x (and s, amax) through the read-only path, so each SM's L1 holds the T
 * rows. Per word: the weights made exact f32 once (F8: cvt e4m3x2 -> f16x2 -> f32; I4: q - z by
 * the 2^23 trick: the bits 0x4B0000qq are 2^23 + q, minus 2^23 + z), for each token the word's
 * f32 partial sum of x~ * wq, then acc += part * (d * s): the format's math, each group's sum split
 * into its words' sums (exact up to f32 summation order, as the tensor-core path). One warp-shuffle
 * reduction per (row, token) at the end; lane r * T + t stores. 4-warp blocks, one per 4 R rows.
 * F8_A8S: each row's own a (a fused tensor's rows may differ; x~ is recomputed only where the
 * warp's next row has another scale). Every weight byte is read once a launch for any T <= 4.
 * Elements past K: the weight is 0 (F8) or q = z (I4) and x reads as 0 there (qmm_x8).
 * Limits: T <= 4; N < 2^30; no L2 prefetch (unmeasured; gemv.cu's would fit here).
 * Switch: LG_QGEMV (c->tune->qgemv): 1 (default) on for T <= 4; 0 off (qmm.cuh's kernel); 10 + m on for
 * T <= m only (m = 1..4: where the GEMV measures faster at T = 1, 2 but not at 3, 4).
 */
#include "kernels/ops.cuh"
#include "kernels/qmm.cuh"

#define QGEMV_WARPS 4
#define QGEMV_R 2 /* rows a warp */
#define QGEMV_U 4 /* words a row a lane in flight */
/* blocks an SM must hold (register cap 65536 / (128 * this)): 4 (128 registers) where that spills nothing
 * (ptxas -v: T = 1 but F8_A8S, and F8 / F8_A8 / F8_A8G at T = 2), so that the 4096-row shapes fit one wave of
 * 16 warps an SM (2048 warps on the H200's 132 SMs); else 3 (at most 168 registers, no spills) */
#define QGEMV_MINB(WF, XM, T) (XM != QMM_X_A8S && (T == 1 || (T == 2 && WF == QMM_F8)) ? 4 : 3)

/* two e4m3 bytes (low byte: the first element) -> two exact floats */
__device__ __forceinline__ float2 qgemv_e4m3x2(uint32_t b)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(b & 0xffffu), __NV_E4M3);
    __half2 hh;
    memcpy(&hh, &h, 4);
    return __half22float2(hh);
}

/* 8 e4m3 bytes (lo: elements 0..3, hi: 4..7) -> 8 floats */
__device__ __forceinline__ void qgemv_e4m3x8(uint32_t lo, uint32_t hi, float *f)
{
    float2 v;
    v = qgemv_e4m3x2(lo), f[0] = v.x, f[1] = v.y;
    v = qgemv_e4m3x2(lo >> 16), f[2] = v.x, f[3] = v.y;
    v = qgemv_e4m3x2(hi), f[4] = v.x, f[5] = v.y;
    v = qgemv_e4m3x2(hi >> 16), f[6] = v.x, f[7] = v.y;
}

/* 8 nibbles of one 32-bit word of the I4 q plane (byte b: element 2b low, 2b + 1 high) minus z, exact;
 * zb = 2^23 + z */
__device__ __forceinline__ void qgemv_nib8(uint32_t w, float zb, float *f)
{
    const uint32_t lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;
#pragma unroll
    for (int b = 0; b < 4; b++) {
        f[2 * b] = __uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7540 | b)) - zb;
        f[2 * b + 1] = __uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7540 | b)) - zb;
    }
}

/* 8 floats rounded to e4m3 at scale sc (e4m3(x / sc), saturating; sc = 0: zeros), as exact floats */
__device__ __forceinline__ void qgemv_round8(const float *f, float sc, float *o)
{
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
        float2 v;
        v.x = sc > 0.f ? __fdiv_rn(f[e], sc) : 0.f;
        v.y = sc > 0.f ? __fdiv_rn(f[e + 1], sc) : 0.f;
        const __nv_fp8x2_storage_t b = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
        const float2 r = qgemv_e4m3x2((uint32_t)b);
        o[e] = r.x, o[e + 1] = r.y;
    }
}

__device__ __forceinline__ float qgemv_dot8(const float *w, const float *x, float acc)
{
#pragma unroll
    for (int e = 0; e < 8; e++) acc = fmaf(w[e], x[e], acc);
    return acc;
}

template <int WF, int XM, typename TX, typename TY, int T, int R, int U>
__global__ void __launch_bounds__(QGEMV_WARPS * 32, QGEMV_MINB(WF, XM, T)) qgemv_kernel(const __grid_constant__ qmm_args a)
{
    constexpr int WPG = WF == QMM_F8 ? 8 : 4;   /* 16-byte words a group */
    constexpr int EPW = WF == QMM_F8 ? 16 : 32; /* elements a word */
    constexpr int S = EPW / 8;                  /* 8-element parts of a word */
    constexpr int CH = 32 * U;                  /* words of a row a batch */
    static_assert(R * T <= 32, "one lane stores each (row, token)");
    pdl_trigger();
    const int lane = threadIdx.x & 31, N = a.N, K = a.K, nb = a.nb;
    const int n0 = (blockIdx.x * QGEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= N)
        return; /* whole warp */
    const int nw = nb * WPG; /* words a row */
    const uint4 *wr[R];
    int64_t dr[R];
#pragma unroll
    for (int r = 0; r < R; r++) { /* rows past the last re-read the last and are not stored */
        const int64_t row = min(n0 + r, N - 1);
        wr[r] = (const uint4 *)(a.q + row * a.q_row);
        dr[r] = row * nb;
    }

    uint4 cw[R][U], nxw[R][U];
    float cd[R][U], nxd[R][U], cz[R][U], nxz[R][U]; /* d, and I4's 2^23 + z, of each word's group */
    auto load = [&](int base, uint4 (&wv)[R][U], float (&dv)[R][U], float (&zv)[R][U]) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = base + 32 * u, g = i / WPG;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (i < nw) {
                    wv[r][u] = ld_stream16(wr[r] + i);
                    if (WF == QMM_F8) {
                        dv[r][u] = __ldg((const float *)a.d + dr[r] + g);
                        zv[r][u] = 0.f;
                    } else {
                        dv[r][u] = __half2float(__ldg((const __half *)a.d + dr[r] + g));
                        zv[r][u] = 8388608.0f + (float)__ldg(a.z + dr[r] + g);
                    }
                } else {
                    wv[r][u] = make_uint4(0, 0, 0, 0);
                    dv[r][u] = 0.f, zv[r][u] = 0.f;
                }
            }
        }
    };
    load(lane, cw, cd, cz);
    float ar[R]; /* F8_A8S: each row's a */
#pragma unroll
    for (int r = 0; r < R; r++) ar[r] = XM == QMM_X_A8S ? __ldg(a.a + dr[r]) : 0.f;
    /* everything above reads only the weight planes; x, s, y and bias may be written by the kernel before */
    pdl_wait();

    float sc[R][T]; /* F8_A8S: the activation scale of (row, token) */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++)
            sc[r][t] = XM == QMM_X_A8S ? (ar[r] > 0.f ? ar[r] : __fdiv_rn(fminf(__ldg(a.s + t), -ar[r]), 448.0f)) : 1.f;
    const TX *xr[T];
    const uint8_t *xq[T];
#pragma unroll
    for (int t = 0; t < T; t++) {
        xr[t] = (const TX *)a.x + (int64_t)t * a.ldx;
        xq[t] = (const uint8_t *)a.x + (int64_t)t * a.ldx;
    }
    const bool vec = a.x_vec != 0;

    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;

    const int nch = (nw + CH - 1) / CH;
#pragma unroll 1
    for (int c = 0; c < nch; c++) {
        const int base = lane + c * CH;
        if (c + 1 < nch)
            load(base + CH, nxw, nxd, nxz);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = base + 32 * u;
            if (i >= nw)
                continue;
            const int g = i / WPG, k0 = i * EPW;
            float part[R][T];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++) part[r][t] = 0.f;
#pragma unroll
            for (int s = 0; s < S; s++) {
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t *wu = (const uint32_t *)&cw[r][u];
                    if (WF == QMM_F8)
                        qgemv_e4m3x8(wu[2 * s], wu[2 * s + 1], wf[r]);
                    else
                        qgemv_nib8(wu[s], cz[r][u], wf[r]);
                }
#pragma unroll
                for (int t = 0; t < T; t++) {
                    float xf[8];
                    if (XM == QMM_X_Q8) {
                        const uint2 b = __ldg((const uint2 *)(xq[t] + k0 + 8 * s));
                        qgemv_e4m3x8(b.x, b.y, xf);
#pragma unroll
                        for (int r = 0; r < R; r++) part[r][t] = qgemv_dot8(wf[r], xf, part[r][t]);
                    } else {
                        unpack8<TX>(qmm_x8<TX>(xr[t], k0 + 8 * s, K, vec), xf);
                        if (XM == QMM_X_RAW) {
#pragma unroll
                            for (int r = 0; r < R; r++) part[r][t] = qgemv_dot8(wf[r], xf, part[r][t]);
                        } else {
                            float xs[8];
#pragma unroll
                            for (int r = 0; r < R; r++) {
                                if (r == 0 || sc[r][t] != sc[r > 0 ? r - 1 : 0][t])
                                    qgemv_round8(xf, sc[r][t], xs);
                                part[r][t] = qgemv_dot8(wf[r], xs, part[r][t]);
                            }
                        }
                    }
                }
            }
            /* the word's sums times d (row, group) and s (token, group; A8S: row, token) in f32 */
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float st = XM == QMM_X_Q8 ? __ldg(a.s + (int64_t)t * nb + g) : 1.f;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float s1 = XM == QMM_X_A8S ? sc[r][t] : st;
                    acc[r][t] += part[r][t] * (cd[r][u] * s1);
                }
            }
        }
        if (c + 1 < nch) {
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++) cw[r][u] = nxw[r][u], cd[r][u] = nxd[r][u], cz[r][u] = nxz[r][u];
        }
    }

    const float mine = warp_sums_to_lanes<R, T>(acc, lane);
    if (lane < R * T) {
        const int r = lane / T, t = lane - r * T, n = n0 + r;
        if (n < N) {
            TY *p = (TY *)a.y + (int64_t)t * a.ldy + n;
            float v = mine;
            if (a.accumulate)
                v += to_f32(*p);
            if (a.bias)
                v += load_any(a.bias, a.bdt, n);
            *p = from_f32<TY>(v);
        }
    }
}

/* ---- host side ---------------------------------------------------------------------------- */

template <int WF, int XM, typename TX, typename TY, int T>
static cudaError_t qgemv_launch_t(const cuda_ctx *c, const qmm_args &a)
{
    const int rows_per_block = QGEMV_WARPS * QGEMV_R;
    const unsigned blocks = (unsigned)((a.N + rows_per_block - 1) / rows_per_block);
    return cu_launch(c, qgemv_kernel<WF, XM, TX, TY, T, QGEMV_R, QGEMV_U>, dim3(blocks), dim3(QGEMV_WARPS * 32), 0, a);
}

template <int WF, int XM, typename TX, typename TY> static cudaError_t qgemv_launch_ty(const cuda_ctx *c, const qmm_args &a)
{
    switch (a.T) {
    case 1: return qgemv_launch_t<WF, XM, TX, TY, 1>(c, a);
    case 2: return qgemv_launch_t<WF, XM, TX, TY, 2>(c, a);
    case 3: return qgemv_launch_t<WF, XM, TX, TY, 3>(c, a);
    default: return qgemv_launch_t<WF, XM, TX, TY, 4>(c, a);
    }
}

template <int WF, int XM, typename TX> static cudaError_t qgemv_launch_tx(const cuda_ctx *c, lg_dtype yt, const qmm_args &a)
{
    return yt == LG_F32 ? qgemv_launch_ty<WF, XM, TX, float>(c, a) : qgemv_launch_ty<WF, XM, TX, TX>(c, a);
}

template <int WF, int XM> static cudaError_t qgemv_launch_xm(const cuda_ctx *c, lg_dtype xt, lg_dtype yt, const qmm_args &a)
{
    return xt == LG_F16 ? qgemv_launch_tx<WF, XM, __half>(c, yt, a) : qgemv_launch_tx<WF, XM, __nv_bfloat16>(c, yt, a);
}

int cu_qgemv_try(cuda_ctx *c, int wf, int xm, lg_dtype xt, lg_dtype yt, const qmm_args *a)
{
    const int mode = c->tune->qgemv, max_t = mode >= 11 && mode <= 10 + QGEMV_MAX_T ? mode - 10 : QGEMV_MAX_T;
    if (mode == 0 || a->T < 1 || a->T > max_t || a->N < 1 || a->N > (1 << 30) || a->nb < 1)
        return 1;
    if ((xt != LG_F16 && xt != LG_BF16) || (yt != LG_F32 && yt != xt) || (wf == QMM_I4 && xm != QMM_X_RAW) ||
        (wf != QMM_F8 && wf != QMM_I4) || (xm != QMM_X_RAW && xm != QMM_X_Q8 && xm != QMM_X_A8S) ||
        a->q_row != (int64_t)a->nb * (wf == QMM_F8 ? 128 : 64) || !cu_aligned16(a->q) ||
        (xm == QMM_X_Q8 && (a->ldx != (int64_t)a->nb * 128 || ((uintptr_t)a->x & 7) != 0)))
        return 1; /* not a shape this kernel takes: the caller's tensor-core path */
    cudaError_t e;
    if (wf == QMM_I4)
        e = qgemv_launch_xm<QMM_I4, QMM_X_RAW>(c, xt, yt, *a);
    else if (xm == QMM_X_RAW)
        e = qgemv_launch_xm<QMM_F8, QMM_X_RAW>(c, xt, yt, *a);
    else if (xm == QMM_X_Q8)
        e = qgemv_launch_xm<QMM_F8, QMM_X_Q8>(c, xt, yt, *a);
    else
        e = qgemv_launch_xm<QMM_F8, QMM_X_A8S>(c, xt, yt, *a);
    if (e != cudaSuccess)
        return CU_FAIL(c, "matmul: qgemv launch (N=%d T=%d K=%d) failed: %s", a->N, a->T, a->K, cudaGetErrorString(e));
    return 0;
}
