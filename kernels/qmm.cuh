/*
 * qmm.cuh — the decode / small-T matmul kernel over the planar checkpoint layouts of backend.h
 * (F8, F8_A8, F8_A8S, F8_A8G, I4), shared by matmul_f8.cu and matmul_i4.cu, which hold the
 * host launchers:
 *
 *   y[t, n] = (accumulate ? y[t, n] : 0) + sum_g d[n, g] * s[t, g] * sum_{k in g} xq[t, k] * wq[n, k]  (+ bias[n])
 *
 * wq: the weight's group values, exact in 16 bits: e4m3 (F8*) or q - z in -15..15 (I4); d: the
 * group scale (f32 for F8*, f16 for I4); xq: the activations as they are (W8A16, W4A16: s = 1), or
 * their e4m3 values (W8A8: s the layout's activation scale of token t and group g). Every term
 * is the format's math: the 16-bit products are exact on the tensor cores, each group's sum is
 * f32, and d and s are applied per group in f32.
 *
 * Why: batch-1 to batch-32 decode is a weight stream (8 or 4 bits a weight): the kernel reads
 * each weight byte once a launch whatever T <= 32, with 16-byte loads, and does the arithmetic
 * on the tensor cores so that 32 tokens cost no more issue slots than one.
 *
 * How: a block of QMM_WARPS warps owns RT * 16 output rows; warp w takes the groups w, w + 8, ...
 * of those rows (the block's warps read 8 consecutive groups of a row at a time) and sums its
 * groups in registers; the warps' sums meet in shared memory at the end (no split-K pass, no
 * second launch). mma.sync m16n8k16 with "swap AB": the 16 weight rows are the M side, 8 tokens
 * the N side (TT tiles of 8 tokens, T <= 8 * TT). A dot product does not care in which order k
 * runs, so each lane loads 16 contiguous bytes of its fragment rows (F8: 16 e4m3 = k 16 t ..
 * 16 t + 15 of a 64-k chunk; I4: 32 nibbles = k 32 t .. 32 t + 31 of the group) and feeds them
 * to the mma's k slots in an order the activation fragment repeats exactly:
 *   F8: step s of a chunk takes bytes 4s, 4s+1 as the low k pair and 4s+2, 4s+3 as the high one
 *       (cvt.rn.f16x2.e4m3x2: exact; bf16 through f32, exact);
 *   I4: word i of the 16 bytes holds elements 8i .. 8i+7; (w >> 4j) & 0x000f000f is the pair
 *       (8i+j, 8i+j+4), made a 16-bit value exactly by the exponent trick (0x6400 | q is
 *       1024 + q in f16, 0x4300 | q is 128 + q in bf16) minus (1024 + z) (or 128 + z).
 * The next group's weight bytes (and d, z) are loaded before the current group is multiplied
 * (register double buffer), and the first group's before pdl_wait (weights are never written by
 * the kernels before); warp 0 also asks L2 to prefetch the next QMM_PF_BYTES of the block's rows.
 *
 * Activation modes (XM):
 *   QMM_X_RAW  x in TX (f16/bf16), used as it is (F8, I4); mma in TX;
 *   QMM_X_Q8   x prequantized by matmul_f8.cu's prepass: e4m3 bytes [T, nb * 128] (zeros past K)
 *              and s [T, nb] f32 (F8_A8: the token's s in every group; F8_A8G: per group); f16 mma;
 *   QMM_X_A8S  x in TX, rounded to e4m3 here with the scale of the row tile's activation scale a
 *              (a > 0: s = a; a < 0: s = min(amax[t], -a) / 448, amax from the prepass), because
 *              a fused tensor's rows may carry different a: x~ depends on the row. Limit: the 16
 *              rows of an mma tile share a (the tile's first row's a is used): true of any tensor
 *              whose fused sources have row counts that are multiples of 16 (every Llama-family
 *              q, k, v, gate, up).
 * Limits: T <= 8 * TT (the launcher splits larger T into chunks of 32); K < 2^31; rows past N
 * re-read row N - 1 and are not stored; x elements past K read as 0.
 */
#ifndef LG_QMM_CUH
#define LG_QMM_CUH

#include "kernels/cuda_common.cuh"
#include "kernels/mma.cuh"

#include <cuda_fp8.h>

#define QMM_WARPS 8
/* bytes of each of its rows a block asks L2 to prefetch past its first round of groups (0: none); unmeasured:
 * 2 KB a row is 64 KB a block, 8-17 MB over the resident blocks of a 7B shape, a third of the L2 */
#define QMM_PF_BYTES 2048
#define QMM_F8 0
#define QMM_I4 1
#define QMM_X_RAW 0
#define QMM_X_Q8 1
#define QMM_X_A8S 2

struct qmm_args {
    const uint8_t *q;   /* q plane [N, q_row] */
    const void *d;      /* d plane [N, nb]: f32 (F8*) or f16 (I4) */
    const uint8_t *z;   /* I4: z plane [N, nb] */
    const float *a;     /* F8_A8S: a plane [N, nb] */
    int64_t q_row;
    int nb;
    const void *x;      /* X_RAW / X_A8S: TX [T, ldx]; X_Q8: e4m3 bytes [T, nb * 128] */
    int64_t ldx;
    int x_vec;          /* X_RAW / X_A8S: x rows 16-byte aligned with ldx % 8 == 0 (8-element loads) */
    const float *s;     /* X_Q8: [T, nb] scales; X_A8S: [T] amax of each token row */
    void *y;
    int64_t ldy;
    const void *bias;
    lg_dtype bdt;
    int accumulate;
    int N, K, T;
};

/* two e4m3 bytes (low byte: the first element) -> f16x2 / bf16x2, exactly */
template <typename TM> __device__ __forceinline__ uint32_t qmm_e4m3x2(uint16_t b);
template <> __device__ __forceinline__ uint32_t qmm_e4m3x2<__half>(uint16_t b)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)b, __NV_E4M3);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
template <> __device__ __forceinline__ uint32_t qmm_e4m3x2<__nv_bfloat16>(uint16_t b)
{
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)b, __NV_E4M3);
    __half2 hh;
    memcpy(&hh, &h, 4);
    const float2 f = __half22float2(hh);
    const __nv_bfloat162 r = __floats2bfloat162_rn(f.x, f.y);
    uint32_t u;
    memcpy(&u, &r, 4);
    return u;
}

/* a pair of nibbles (bits 0..3 and 16..19 of p, the rest zero) minus z as an exact 16-bit pair; zz
 * is qmm_zpair(z) */
template <typename TM> __device__ __forceinline__ uint32_t qmm_zpair(int z);
template <> __device__ __forceinline__ uint32_t qmm_zpair<__half>(int z)
{
    const uint32_t v = 0x6400u | (uint32_t)z;
    return v | (v << 16);
}
template <> __device__ __forceinline__ uint32_t qmm_zpair<__nv_bfloat16>(int z)
{
    const uint32_t v = 0x4300u | (uint32_t)z;
    return v | (v << 16);
}
template <typename TM> __device__ __forceinline__ uint32_t qmm_nib2(uint32_t p, uint32_t zz);
template <> __device__ __forceinline__ uint32_t qmm_nib2<__half>(uint32_t p, uint32_t zz)
{
    __half2 a, b;
    const uint32_t v = p | 0x64006400u;
    memcpy(&a, &v, 4);
    memcpy(&b, &zz, 4);
    const __half2 r = __hsub2(a, b);
    uint32_t u;
    memcpy(&u, &r, 4);
    return u;
}
template <> __device__ __forceinline__ uint32_t qmm_nib2<__nv_bfloat16>(uint32_t p, uint32_t zz)
{
    __nv_bfloat162 a, b;
    const uint32_t v = p | 0x43004300u;
    memcpy(&a, &v, 4);
    memcpy(&b, &zz, 4);
    const __nv_bfloat162 r = __hsub2(a, b);
    uint32_t u;
    memcpy(&u, &r, 4);
    return u;
}

/* 8 activations of token row xr (elements k0 .. k0 + 7, zeros past K) as a 16-byte word */
template <typename TX> __device__ __forceinline__ uint4 qmm_x8(const TX *xr, int k0, int K, bool vec)
{
    if (vec && k0 + 8 <= K)
        return __ldg((const uint4 *)(xr + k0));
    uint4 u = make_uint4(0, 0, 0, 0);
    TX *h = (TX *)&u;
#pragma unroll
    for (int e = 0; e < 8; e++)
        if (k0 + e < K)
            h[e] = xr[k0 + e];
    return u;
}

/* 8 activations rounded to e4m3 at scale sa (x~ / sa = e4m3(clamp(x / sa, +-448)); sa = 0: zeros),
 * as 4 f16 pairs (exact) */
template <typename TX> __device__ __forceinline__ void qmm_q8(uint4 u, float sa, uint32_t *o)
{
    float f[8];
    unpack8<TX>(u, f);
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
        float2 v;
        v.x = sa > 0.f ? __fdiv_rn(f[e], sa) : 0.f;
        v.y = sa > 0.f ? __fdiv_rn(f[e + 1], sa) : 0.f;
        const __nv_fp8x2_storage_t b = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
        o[e >> 1] = qmm_e4m3x2<__half>((uint16_t)b);
    }
}

/* the activation scale of an F8_A8S tile whose a is `a` for token amax `am` */
__device__ __forceinline__ float qmm_a8s_scale(float a, float am) { return a > 0.f ? a : fminf(am, -a) / 448.0f; }

template <int WF, typename TM, int XM, int TT, int RT, typename TX, typename TY>
__global__ void __launch_bounds__(QMM_WARPS * 32) qmm_kernel(const __grid_constant__ qmm_args a)
{
    constexpr int WL = WF == QMM_F8 ? 2 : 1; /* 16-byte words of a fragment row per group */
    constexpr int RB = RT * 16;
    __shared__ float red[QMM_WARPS][RB][TT * 8 + 1];
    pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, t4 = lane & 3;
    const int n_base = blockIdx.x * RB, N = a.N, K = a.K, T = a.T, nb = a.nb;

    const uint8_t *wrow[RT][2];
    int64_t drow[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = min(n_base + rt * 16 + gid + 8 * h, N - 1);
            wrow[rt][h] = a.q + (int64_t)r * a.q_row;
            drow[rt][h] = (int64_t)r * nb;
        }

    float acc[RT][TT][4];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < TT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[rt][j][e] = 0.f;

    uint4 cw[RT][2][WL], nw[RT][2][WL];
    float cd[RT][2], nd[RT][2];
    int cz[RT][2], nz[RT][2];
    auto load = [&](int g, uint4 (&wv)[RT][2][WL], float (&dv)[RT][2], int (&zv)[RT][2]) {
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int c = 0; c < WL; c++)
                    wv[rt][h][c] = ld_stream16(wrow[rt][h] + (WF == QMM_F8 ? (int64_t)g * 128 + c * 64 + t4 * 16
                                                                            : (int64_t)g * 64 + t4 * 16));
                if (WF == QMM_F8) {
                    dv[rt][h] = __ldg((const float *)a.d + drow[rt][h] + g);
                    zv[rt][h] = 0;
                } else {
                    dv[rt][h] = __half2float(__ldg((const __half *)a.d + drow[rt][h] + g));
                    zv[rt][h] = __ldg(a.z + drow[rt][h] + g);
                }
            }
    };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* L2 prefetch of the block's rows past the first round of groups (which the loads below ask for), up
     * to QMM_PF_BYTES a row: the register double buffer keeps only two groups a warp in flight, the
     * prefetch lets HBM run ahead of it. A cache hint only; weights only, so before pdl_wait. */
    if (QMM_PF_BYTES > 0 && w == 0 && lane < RB && n_base + lane < N) {
        const int64_t from = (int64_t)QMM_WARPS * (WF == QMM_F8 ? 128 : 64);
        const int64_t to = min(a.q_row, from + (int64_t)QMM_PF_BYTES);
        if (to > from)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a.q + (int64_t)(n_base + lane) * a.q_row + from),
                         "r"((int)(to - from))
                         : "memory");
    }
#endif
    int g = w;
    if (g < nb)
        load(g, cw, cd, cz);
    /* everything above reads only the weight planes */
    pdl_wait();

    /* F8_A8S: each row tile's a (its first row's), and the scales of the tokens this lane's
     * fragments touch: sb (B fragment: token j*8 + gid) and se (accumulator: j*8 + 2 t4 + e) */
    float sb[RT][TT], se[RT][TT][2];
    if (XM == QMM_X_A8S) {
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            const float at = __ldg(a.a + (int64_t)min(n_base + rt * 16, N - 1) * nb);
#pragma unroll
            for (int j = 0; j < TT; j++) {
                const int tb = j * 8 + gid, te = j * 8 + 2 * t4;
                sb[rt][j] = tb < T ? qmm_a8s_scale(at, a.s[tb]) : 0.f;
                se[rt][j][0] = te < T ? qmm_a8s_scale(at, a.s[te]) : 0.f;
                se[rt][j][1] = te + 1 < T ? qmm_a8s_scale(at, a.s[te + 1]) : 0.f;
            }
        }
    }

    const TX *xr[TT];
    const uint8_t *xq[TT];
#pragma unroll
    for (int j = 0; j < TT; j++) {
        const int t = min(j * 8 + gid, T - 1);
        xr[j] = (const TX *)a.x + (int64_t)t * a.ldx;
        xq[j] = (const uint8_t *)a.x + (int64_t)t * nb * 128;
    }
    const bool vec = a.x_vec != 0;

#pragma unroll 1
    for (; g < nb; g += QMM_WARPS) {
        const bool more = g + QMM_WARPS < nb;
        if (more)
            load(g + QMM_WARPS, nw, nd, nz);
        float part[RT][TT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
#pragma unroll
            for (int j = 0; j < TT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) part[rt][j][e] = 0.f;

        if (WF == QMM_F8) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int k0 = g * 128 + c * 64 + t4 * 16;
                /* B fragments: 16 activations of token j*8 + gid at k0 .. k0 + 15, 8 pairs */
                uint32_t xb[RT][TT][8];
#pragma unroll
                for (int j = 0; j < TT; j++) {
                    const bool tok = j * 8 + gid < T;
                    if (XM == QMM_X_Q8) {
                        const uint4 u = tok ? __ldg((const uint4 *)(xq[j] + k0)) : make_uint4(0, 0, 0, 0);
                        const uint16_t *b = (const uint16_t *)&u;
#pragma unroll
                        for (int i = 0; i < 8; i++) xb[0][j][i] = qmm_e4m3x2<__half>(b[i]);
                    } else {
                        uint4 u0 = make_uint4(0, 0, 0, 0), u1 = u0;
                        if (tok) {
                            u0 = qmm_x8<TX>(xr[j], k0, K, vec);
                            u1 = qmm_x8<TX>(xr[j], k0 + 8, K, vec);
                        }
                        if (XM == QMM_X_RAW) {
                            xb[0][j][0] = u0.x, xb[0][j][1] = u0.y, xb[0][j][2] = u0.z, xb[0][j][3] = u0.w;
                            xb[0][j][4] = u1.x, xb[0][j][5] = u1.y, xb[0][j][6] = u1.z, xb[0][j][7] = u1.w;
                        } else {
#pragma unroll
                            for (int rt = 0; rt < RT; rt++) {
                                qmm_q8<TX>(u0, sb[rt][j], &xb[rt][j][0]);
                                qmm_q8<TX>(u1, sb[rt][j], &xb[rt][j][4]);
                            }
                        }
                    }
                }
#pragma unroll
                for (int s = 0; s < 4; s++)
#pragma unroll
                    for (int rt = 0; rt < RT; rt++) {
                        const uint16_t *b0 = (const uint16_t *)&cw[rt][0][c], *b1 = (const uint16_t *)&cw[rt][1][c];
                        uint32_t af[4];
                        af[0] = qmm_e4m3x2<TM>(b0[2 * s]);
                        af[1] = qmm_e4m3x2<TM>(b1[2 * s]);
                        af[2] = qmm_e4m3x2<TM>(b0[2 * s + 1]);
                        af[3] = qmm_e4m3x2<TM>(b1[2 * s + 1]);
                        const int xi = XM == QMM_X_A8S ? rt : 0;
#pragma unroll
                        for (int j = 0; j < TT; j++)
                            cu_mma16816<TM>(part[rt][j], af, xb[xi][j][2 * s], xb[xi][j][2 * s + 1]);
                    }
            }
        } else {
            /* I4: word i of the lane's 16 bytes: elements k0 + 8i .. k0 + 8i + 7 */
            const int k0 = g * 128 + t4 * 32;
            uint32_t zz[RT][2];
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int h = 0; h < 2; h++) zz[rt][h] = qmm_zpair<TM>(cz[rt][h]);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t xb[TT][4]; /* pairs (8i+j, 8i+j+4), j < 4 */
#pragma unroll
                for (int j = 0; j < TT; j++) {
                    const uint4 u = j * 8 + gid < T ? qmm_x8<TX>(xr[j], k0 + 8 * i, K, vec) : make_uint4(0, 0, 0, 0);
                    xb[j][0] = __byte_perm(u.x, u.z, 0x5410);
                    xb[j][1] = __byte_perm(u.x, u.z, 0x7632);
                    xb[j][2] = __byte_perm(u.y, u.w, 0x5410);
                    xb[j][3] = __byte_perm(u.y, u.w, 0x7632);
                }
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    const uint32_t w0 = ((const uint32_t *)&cw[rt][0][0])[i], w1 = ((const uint32_t *)&cw[rt][1][0])[i];
#pragma unroll
                    for (int st = 0; st < 2; st++) {
                        uint32_t af[4];
                        af[0] = qmm_nib2<TM>((w0 >> (8 * st)) & 0x000f000fu, zz[rt][0]);
                        af[1] = qmm_nib2<TM>((w1 >> (8 * st)) & 0x000f000fu, zz[rt][1]);
                        af[2] = qmm_nib2<TM>((w0 >> (8 * st + 4)) & 0x000f000fu, zz[rt][0]);
                        af[3] = qmm_nib2<TM>((w1 >> (8 * st + 4)) & 0x000f000fu, zz[rt][1]);
#pragma unroll
                        for (int j = 0; j < TT; j++) cu_mma16816<TM>(part[rt][j], af, xb[j][2 * st], xb[j][2 * st + 1]);
                    }
                }
            }
        }

        /* the group's sums times d (row) and s (token, group) in f32 */
#pragma unroll
        for (int j = 0; j < TT; j++) {
            float s0 = 1.f, s1 = 1.f;
            const int te = j * 8 + 2 * t4;
            if (XM == QMM_X_Q8) {
                s0 = te < T ? __ldg(a.s + (int64_t)te * nb + g) : 0.f;
                s1 = te + 1 < T ? __ldg(a.s + (int64_t)(te + 1) * nb + g) : 0.f;
            }
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                if (XM == QMM_X_A8S)
                    s0 = se[rt][j][0], s1 = se[rt][j][1];
                acc[rt][j][0] += part[rt][j][0] * (cd[rt][0] * s0);
                acc[rt][j][1] += part[rt][j][1] * (cd[rt][0] * s1);
                acc[rt][j][2] += part[rt][j][2] * (cd[rt][1] * s0);
                acc[rt][j][3] += part[rt][j][3] * (cd[rt][1] * s1);
            }
        }
        if (more) {
#pragma unroll
            for (int rt = 0; rt < RT; rt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int c = 0; c < WL; c++) cw[rt][h][c] = nw[rt][h][c];
                    cd[rt][h] = nd[rt][h];
                    cz[rt][h] = nz[rt][h];
                }
        }
    }

    /* the warps' sums meet in shared memory: C fragment (row gid (+8), tokens 2 t4, 2 t4 + 1) */
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < TT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[w][rt * 16 + gid + 8 * (e >> 1)][j * 8 + 2 * t4 + (e & 1)] = acc[rt][j][e];
    __syncthreads();
    TY *y = (TY *)a.y;
    for (int o = threadIdx.x; o < RB * TT * 8; o += QMM_WARPS * 32) {
        const int r = o % RB, t = o / RB, n = n_base + r;
        if (n >= N || t >= T)
            continue;
        float v = 0.f;
#pragma unroll
        for (int ww = 0; ww < QMM_WARPS; ww++) v += red[ww][r][t];
        TY *p = y + (int64_t)t * a.ldy + n;
        if (a.accumulate)
            v += to_f32(*p);
        if (a.bias)
            v += load_any(a.bias, a.bdt, n);
        *p = from_f32<TY>(v);
    }
}

/* Host: launches qmm_kernel for rows of T <= 32 tokens (TT = ceil(T / 8)), RT = 2; 0 or the launch error. */
template <int WF, typename TM, int XM, int TT, typename TX, typename TY>
static cudaError_t qmm_launch_tt(const cuda_ctx *c, const qmm_args &a)
{
    constexpr int RT = 2;
    const unsigned blocks = (unsigned)((a.N + RT * 16 - 1) / (RT * 16));
    return cu_launch(c, qmm_kernel<WF, TM, XM, TT, RT, TX, TY>, dim3(blocks), dim3(QMM_WARPS * 32), 0, a);
}
template <int WF, typename TM, int XM, typename TX, typename TY>
static cudaError_t qmm_launch(const cuda_ctx *c, const qmm_args &a)
{
    switch ((a.T + 7) / 8) {
    case 1: return qmm_launch_tt<WF, TM, XM, 1, TX, TY>(c, a);
    case 2: return qmm_launch_tt<WF, TM, XM, 2, TX, TY>(c, a);
    case 3: return qmm_launch_tt<WF, TM, XM, 3, TX, TY>(c, a);
    default: return qmm_launch_tt<WF, TM, XM, 4, TX, TY>(c, a);
    }
}

#define QMM_MAX_T 32         /* token rows of one launch */
#define QMM_STREAM_MAX_T 128 /* larger T: the prefill path (qmm_prefill.cu), except F8_A8S */
#define QMM_CHUNK_BYTES ((size_t)64 << 20) /* the prefill path's dequantized weight rows, at most */

#endif
