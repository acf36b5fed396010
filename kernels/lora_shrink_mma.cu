/*
 * lora_shrink_mma.cu — the SGMV shrink of multi-token segments (prefill) on tensor cores:
 *   for s < n_segs, slot i < k, w = lm->w[s * n_slots + slots[i]], w.rank > 0:
 *     for t in [seg_indptr[s], seg_indptr[s+1]), j < w.rank:
 *       tmp[t, i * max_rank + j] = sum_k float(x[t, k]) * float(w.A[j, k])     (f32 accumulation)
 * The function of lora_shrink.cu's kernel, whose launcher (cu_lora_shrink_multi) dispatches here
 * when a segment has more than 4 tokens; rounding differs from that kernel's in the last bits of
 * the f32 sums (another summation order).
 *
 * Why a second kernel: the CUDA-core kernel is built for decode (one token per segment: all of A
 * in flight at once). On a prefill segment it re-reads every token's x row once per 4 rank rows
 * and slot and A once per 8 tokens, and does the 2 x tokens x rank x in flops on CUDA cores: W1's
 * prefill (32 segments of 128 tokens, q,k,v at rank 16, in = 4,096) moves ~590 MB through L2 in
 * each q,k,v launch, ~0.2 ms (bench_sgmv's 512-token case scaled), and a 7B prefill runs 64 such
 * launches. Per segment and slot the shrink is a small matrix product, (tokens x in) (in x rank):
 *
 *  - Block = (tile of TM = 32 tokens of one segment, slot x chunk of NR = 8 NT rank rows, segment),
 *    4 warps; NT = 2, 4 or 8 by the step's largest rank (16, 32, 64 rows; larger ranks take
 *    several chunks). x is read once per slot and rank chunk, A once per 32 tokens.
 *  - K in chunks of KC = 64 columns through a STAGES-deep cp.async ring (16-byte copies, L1
 *    bypassed): the x tile [32][64] and the A tile [NR][64], rows padded by 16 bytes (conflict-free
 *    ldmatrix); token rows past the segment, rank rows past the rank and columns past `in` are
 *    zero-filled. An A that is not 16-byte aligned is copied element by element instead.
 *  - Warp w takes k-step w (16 columns) of every chunk: mma.sync m16n8k16 with A-operand = x rows
 *    and B-operand = A rows (both K-major, ldmatrix.x4), 2 x NT f32 fragments. At the end the four
 *    warps' partial sums are added in warp order through shared memory (deterministic: graph
 *    replays stay bit-identical) and the block stores its 32 x NR values.
 *  - Programmatic dependent launch: the weight table, the segment bounds and the A tiles of the
 *    first STAGES - 1 chunks are read before pdl_wait (no kernel writes them), x after.
 * That is the ring form; launches whose slots' rank rows fit 8 n8 tiles (q,k,v at rank 16, one slot
 * at rank 64) take the wide form below instead (lora_shrink_wide_kernel: x read once in all, no
 * shared-memory ring; W1's prefill q,k,v shrink 52.8 -> 23.1 us alone, both shrinks of a layer 84 ->
 * 48 us in the step; docs/benchmarks.md, GPU kernels, 2026-11-27).
 * LG_SGMV_PREFILL=0 keeps every segment on lora_shrink.cu's kernel and lora_expand.cu's 8-token
 * tiles (benchmarks); 2 takes both prefill kernels whatever the grid size (tests).
 */
#include "kernels/mma.cuh"
#include "kernels/ops.cuh"

#define SHM_THREADS 128 /* 4 warps: one k-step of a chunk each */
#define SHM_TM 32       /* tokens per block: two m16 tiles */
#define SHM_KC 64       /* columns per chunk: four k16 steps */
#define SHM_LD (SHM_KC + 8)
#define SHM_MIN_SEG 5 /* segments of 1..4 tokens (decode) stay on lora_shrink.cu's kernel */

/* LG_SGMV_PREFILL: 1 (default) where the grid fills the GPU; 2: every segment of > 4 tokens (tests); 0: never */
int cu_sgmv_prefill(const cuda_ctx *c) { return c->tune->sgmv_prefill; }

/* Stages by NT, so that the ring stays within 48 KB of static shared memory and holds the
 * reduction's 4 x 2 NT x 4 x 32 floats: NT 2: 6 x 6,912 B; 4: 4 x 9,216 B; 8: 3 x 13,824 B. */
template <int NT> struct shm_cfg {
    static constexpr int NR = 8 * NT, STAGES = NT == 2 ? 6 : NT == 4 ? 4 : 3;
    static constexpr int STAGE = (SHM_TM + NR) * SHM_LD; /* elements: x rows, then A rows */
};

struct shm_args {
    int slot[LG_LORA_MULTI_MAX];
    int ng;      /* rank chunks per slot (grid.y = k * ng) */
    int col_off; /* tmp column offset between slots (max_rank) */
};

/* The f32 accumulators of two m16 tiles x NT n8 tiles, zeroed */
template <int NT> __device__ __forceinline__ void shm_zero(float (&acc)[2][NT][4])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][n][e] = 0.0f;
}

template <typename T, typename TT_, int NT>
__global__ void __launch_bounds__(SHM_THREADS)
    lora_shrink_mma_kernel(TT_ *tmp, int64_t ldt, const T *x, int64_t ldx, int in, const int32_t *seg_indptr,
                           const lg_lora_w *w, int n_slots, shm_args a)
{
    using C = shm_cfg<NT>;
    constexpr int NR = C::NR, ST = C::STAGES, VPR = SHM_KC / 8; /* 16-byte vectors per tile row */
    constexpr int FE = 2 * NT * 4;                              /* accumulator floats per lane */
    static_assert(4 * FE * 32 * sizeof(float) <= ST * C::STAGE * sizeof(T), "reduction fits the ring");
    static_assert(NR * VPR % SHM_THREADS == 0 && SHM_TM * VPR % SHM_THREADS == 0, "whole copies per thread");
    __shared__ __align__(128) T sm[ST * C::STAGE];
    pdl_trigger();
    const int s = blockIdx.z;
    const int si = blockIdx.y / a.ng, j0 = (blockIdx.y % a.ng) * NR;
    const lg_lora_w lw = w[(size_t)s * n_slots + sgmv_pick(a.slot, si)];
    int t0, nt;
    if (j0 >= lw.rank || !sgmv_tile(seg_indptr, s, blockIdx.x, SHM_TM, &t0, &nt)) /* also rank 0; uniform */
        return;
    const int nr = min(NR, lw.rank - j0);
    const T *A = (const T *)lw.A + (size_t)j0 * in; /* [nr, in] */
    const T *xt = x + (int64_t)t0 * ldx;            /* [nt, in], stride ldx */
    const bool a_vec = cu_aligned16(A);             /* in % 8 == 0 (host): every row then is */
    const int nc = (in + SHM_KC - 1) / SHM_KC;

    auto load_a = [&](int c, int st) {
        T *as = sm + st * C::STAGE + SHM_TM * SHM_LD;
        const int k0 = c * SHM_KC;
        if (a_vec) {
#pragma unroll
            for (int j = 0; j < NR * VPR / SHM_THREADS; j++) {
                const int i = threadIdx.x + j * SHM_THREADS, r = i / VPR, v = i % VPR, k = k0 + v * 8;
                const bool ok = r < nr && k < in;
                cu_cp16(as + r * SHM_LD + v * 8, ok ? A + (size_t)r * in + k : A, ok);
            }
        } else {
            for (int i = threadIdx.x; i < NR * SHM_KC; i += SHM_THREADS) {
                const int r = i / SHM_KC, kk = i % SHM_KC, k = k0 + kk;
                as[r * SHM_LD + kk] = r < nr && k < in ? A[(size_t)r * in + k] : from_f32<T>(0.0f);
            }
        }
    };
    auto load_x = [&](int c, int st) {
        T *xs = sm + st * C::STAGE;
        const int k0 = c * SHM_KC;
#pragma unroll
        for (int j = 0; j < SHM_TM * VPR / SHM_THREADS; j++) {
            const int i = threadIdx.x + j * SHM_THREADS, r = i / VPR, v = i % VPR, k = k0 + v * 8;
            const bool ok = r < nt && k < in;
            cu_cp16(xs + r * SHM_LD + v * 8, ok ? xt + (int64_t)r * ldx + k : xt, ok);
        }
    };

    /* prologue: A of the first ST - 1 chunks before pdl_wait, their x after, one commit group per chunk
     * (the A copies issued before the first commit all fall into group 0) */
#pragma unroll
    for (int c = 0; c < ST - 1; c++)
        if (c < nc)
            load_a(c, c);
    pdl_wait();
#pragma unroll
    for (int c = 0; c < ST - 1; c++) {
        if (c < nc)
            load_x(c, c);
        cu_cp_commit();
    }

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int mi = lane >> 3, li = lane & 7;
    float acc[2][NT][4];
    shm_zero(acc);

    for (int c = 0; c < nc; c++) {
        cu_cp_wait<ST - 2>();
        __syncthreads(); /* chunk c landed; every warp is done with the slot refilled below */
        if (c + ST - 1 < nc) {
            load_a(c + ST - 1, (c + ST - 1) % ST);
            load_x(c + ST - 1, (c + ST - 1) % ST);
        }
        cu_cp_commit();
        const T *xs = sm + (c % ST) * C::STAGE, *as = xs + SHM_TM * SHM_LD;
        const int kc = warp * 16; /* this warp's k-step of the chunk */
        uint32_t af[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            cu_ldm4(af[mt], cu_smem_addr(xs + (mt * 16 + (mi & 1) * 8 + li) * SHM_LD + kc + (mi >> 1) * 8));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t bf[4];
            cu_ldm4(bf, cu_smem_addr(as + (np * 16 + (mi >> 1) * 8 + li) * SHM_LD + kc + (mi & 1) * 8));
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                cu_mma16816<T>(acc[mt][2 * np], af[mt], bf[0], bf[1]);
                cu_mma16816<T>(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
            }
        }
    }
    cu_cp_wait<0>();
    __syncthreads(); /* the ring is free: it holds the warps' partial sums now */

    float *red = (float *)sm; /* [warp][fragment float][lane] */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[(warp * FE + (mt * NT + n) * 4 + e) * 32 + lane] = acc[mt][n][e];
    __syncthreads();
    /* element i of a warp's FE x 32: lane i % 32 of float i / 32 = (m16 tile, n8 tile, e); C layout of
     * m16n8: row g + 8 (e >> 1), column 2 c4 + (e & 1), g = lane / 4, c4 = lane % 4 */
    for (int i = threadIdx.x; i < FE * 32; i += SHM_THREADS) {
        const float v = ((red[i] + red[FE * 32 + i]) + red[2 * FE * 32 + i]) + red[3 * FE * 32 + i];
        const int ln = i & 31, fe = i >> 5, e = fe & 3, f = fe >> 2, mt = f / NT, n = f % NT;
        const int row = mt * 16 + (ln >> 2) + 8 * (e >> 1), col = n * 8 + 2 * (ln & 3) + (e & 1);
        if (row < nt && col < nr)
            tmp[(int64_t)(t0 + row) * ldt + (int64_t)si * a.col_off + j0 + col] = from_f32<TT_>(v);
    }
}

template <typename T, typename TT_, int NT>
static void launch(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, shm_args a, int k, int max_seg)
{
    const dim3 grid((unsigned)((max_seg + SHM_TM - 1) / SHM_TM), (unsigned)(a.ng * k), (unsigned)lm->n_segs);
    (void)cu_launch(c, lora_shrink_mma_kernel<T, TT_, NT>, grid, SHM_THREADS, 0, (TT_ *)tmp.data, tmp.stride,
                    (const T *)x.data, x.stride, (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, a);
}

template <typename T, typename TT_>
static void launch_nt(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, shm_args a, int k,
                      int max_seg, int rank)
{
    if (rank <= 16) launch<T, TT_, 2>(c, tmp, x, lm, a, k, max_seg);
    else if (rank <= 32) launch<T, TT_, 4>(c, tmp, x, lm, a, k, max_seg);
    else launch<T, TT_, 8>(c, tmp, x, lm, a, k, max_seg);
}

/* ---- the wide form: every slot's rank rows in one block, the loads straight into mma registers ----
 * The form above streams x once per slot and through a 64-column shared-memory ring with a block
 * barrier per chunk: W1's prefill q,k,v shrink moves 150 MB through L2 for 46 MB of bytes and ran
 * 46.5 us of chain a layer against 16 us at the copy bandwidth (docs/benchmarks.md, GPU kernels,
 * 2026-11-27). Here:
 *  - Block = 32 tokens of one segment (two m16 tiles) x all k slots' rank rows (NT n8 tiles,
 *    nts a slot), 8 warps splitting `in` into contiguous runs of 32-column units. x is read once
 *    in all, A once per 32 tokens.
 *  - No shared memory in the loop: lane (g, c) = (lane / 4, lane % 4) loads, per unit, 16 bytes =
 *    8 consecutive columns [u * 32 + 8 c, + 8) of x rows g, g + 8, g + 16, g + 24 and of the A row
 *    g of each n8 tile, and feeds them to two m16n8k16 steps as its fragment elements. The sum runs
 *    over k, so any order of the columns that x and A share is the product: step 0 takes columns
 *    8c..8c+3 as the fragment's k {2c, 2c+1, 2c+8, 2c+9}, step 1 columns 8c+4..8c+7.
 *  - ST units of loads in flight a warp (registers): unit u + ST is loaded as soon as unit u is
 *    used; A's first ST units before pdl_wait, x's after.
 *  - The warps' sums are added in a fixed tree through shared memory (w + w+4, then w + w+2, then
 *    w + w+1: graph replays stay bit-identical) and warp 0 stores the block's 32 x rank values.
 * Taken for k x nts <= 8 n8 tiles (the step's rank up to 64 for one slot, 16 for three); otherwise
 * the form above. LG_SHRINK_WIDE=0 keeps the form above (comparisons, tests). */
#define SHW_THREADS 256
#define SHW_WARPS (SHW_THREADS / 32)
#define SHW_TM 32
#define SHW_U 32 /* columns a unit: 4 lanes x 8 */

struct shw_args {
    int slot[LG_LORA_MULTI_MAX];
    int k;       /* slots */
    int nts;     /* n8 tiles a slot: ceil(step rank / 8) */
    int col_off; /* tmp column offset between slots (max_rank) */
};

template <int NT> struct shw_cfg {
    static constexpr int ST = NT <= 4 ? 4 : NT <= 6 ? 3 : 2; /* units in flight a warp: (4 + NT) x 16 bytes a lane each */
};

template <typename T, typename TT_, int NT>
__global__ void __launch_bounds__(SHW_THREADS, 1)
    lora_shrink_wide_kernel(TT_ *tmp, int64_t ldt, const T *x, int64_t ldx, int in, const int32_t *seg_indptr,
                            const lg_lora_w *w, int n_slots, shw_args a)
{
    constexpr int ST = shw_cfg<NT>::ST;
    constexpr int FE = 2 * NT * 4; /* accumulator floats a lane */
    __shared__ float red[SHW_WARPS / 2][FE][32];
    pdl_trigger();
    const int s = blockIdx.z;
    int t0, nt;
    if (!sgmv_tile(seg_indptr, s, blockIdx.x, SHW_TM, &t0, &nt))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;

    /* this lane's A row in each n8 tile (NULL: past the adapter's rank, past the slots, rank 0) */
    const T *ap[NT];
    int nr[NT];      /* valid rows of each n8 tile (for the stores) */
    bool a16 = true; /* every A 16-byte aligned (in % 8 == 0: then every row is); else 2-byte loads */
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int si = n / a.nts, j0 = (n % a.nts) * 8;
        ap[n] = nullptr, nr[n] = 0;
        if (si < a.k) {
            const lg_lora_w lw = w[(size_t)s * n_slots + sgmv_pick(a.slot, si)];
            nr[n] = min(8, max(0, lw.rank - j0));
            if (nr[n] > 0)
                a16 = a16 && cu_aligned16(lw.A);
            if (g < nr[n])
                ap[n] = (const T *)lw.A + (size_t)(j0 + g) * in + 8 * c;
        }
    }
    const T *xp[4]; /* rows g, g + 8, g + 16, g + 24 of the tile */
#pragma unroll
    for (int r = 0; r < 4; r++) xp[r] = g + 8 * r < nt ? x + (int64_t)(t0 + g + 8 * r) * ldx + 8 * c : nullptr;

    /* this warp's units [ub, ue) of ceil(in / 32); a lane's 8 columns exist when 32 u + 8 c < in */
    const int nu = (in + SHW_U - 1) / SHW_U;
    const int ub = (int)((int64_t)nu * warp / SHW_WARPS), ue = (int)((int64_t)nu * (warp + 1) / SHW_WARPS);
    const uint4 z = make_uint4(0, 0, 0, 0);
    uint4 xb[ST][4], ab[ST][NT];
    auto load_a = [&](int st, int u) {
        const int k = u * SHW_U;
        const bool ok = u < ue && k + 8 * c < in;
        if (a16) {
#pragma unroll
            for (int n = 0; n < NT; n++) ab[st][n] = ok && ap[n] ? ld_stream16(ap[n] + k) : z;
        } else {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (ok && ap[n])
#pragma unroll
                    for (int i = 0; i < 8; i++) h[i] = ((const uint16_t *)(ap[n] + k))[i];
                ab[st][n] = make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
                                       h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
            }
        }
    };
    auto load_x = [&](int st, int u) {
        const int k = u * SHW_U;
        const bool ok = u < ue && k + 8 * c < in;
#pragma unroll
        for (int r = 0; r < 4; r++) xb[st][r] = ok && xp[r] ? ld_stream16(xp[r] + k) : z;
    };
#pragma unroll
    for (int st = 0; st < ST; st++) load_a(st, ub + st);
    pdl_wait();
#pragma unroll
    for (int st = 0; st < ST; st++) load_x(st, ub + st);

    float acc[2][NT][4];
    shm_zero(acc);

    for (int u = ub; u < ue; u += ST) {
#pragma unroll
        for (int st = 0; st < ST; st++) {
            if (u + st < ue) { /* uniform over the warp */
#pragma unroll
                for (int h = 0; h < 2; h++) { /* step h: columns 8c + 4h .. + 3 */
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        const uint4 lo = xb[st][2 * mt], hi = xb[st][2 * mt + 1]; /* rows g, g + 8 of m16 tile mt */
                        uint32_t af[4];
                        af[0] = h ? lo.z : lo.x, af[1] = h ? hi.z : hi.x;
                        af[2] = h ? lo.w : lo.y, af[3] = h ? hi.w : hi.y;
#pragma unroll
                        for (int n = 0; n < NT; n++)
                            cu_mma16816<T>(acc[mt][n], af, h ? ab[st][n].z : ab[st][n].x,
                                           h ? ab[st][n].w : ab[st][n].y);
                    }
                }
            }
            load_a(st, u + st + ST);
            load_x(st, u + st + ST);
        }
    }

    /* the warps' sums in a fixed tree: warp w += warp w + half, half = 4, 2, 1 */
#pragma unroll
    for (int half = SHW_WARPS / 2; half >= 1; half >>= 1) {
        if (warp >= half && warp < 2 * half)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) red[warp - half][(mt * NT + n) * 4 + e][lane] = acc[mt][n][e];
        __syncthreads();
        if (warp < half)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][n][e] += red[warp][(mt * NT + n) * 4 + e][lane];
        __syncthreads();
    }
    if (warp != 0)
        return;
    /* C layout of m16n8: row g + 8 (e >> 1), column 2c + (e & 1) */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = mt * 16 + g + 8 * (e >> 1), col = 2 * c + (e & 1);
                if (row < nt && col < nr[n])
                    tmp[(int64_t)(t0 + row) * ldt + (int64_t)(n / a.nts) * a.col_off + (n % a.nts) * 8 + col] =
                        from_f32<TT_>(acc[mt][n][e]);
            }
}

/* The wide form for n8 tiles k x nts (rounded up to 2, 4, 6, 8; the extra tiles are zeros); false: not taken */
template <typename T, typename TT_>
static bool launch_wide_nt(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k,
                           int max_seg, int rank)
{
    shw_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < k; i++) a.slot[i] = slots[i];
    a.k = k, a.nts = (rank + 7) / 8, a.col_off = lm->max_rank;
    const int nt = k * a.nts;
    if (nt > 8)
        return false;
    const auto kern = nt <= 2 ? lora_shrink_wide_kernel<T, TT_, 2>
                    : nt <= 4 ? lora_shrink_wide_kernel<T, TT_, 4>
                    : nt <= 6 ? lora_shrink_wide_kernel<T, TT_, 6>
                              : lora_shrink_wide_kernel<T, TT_, 8>;
    const dim3 grid((unsigned)((max_seg + SHW_TM - 1) / SHW_TM), 1, (unsigned)lm->n_segs);
    (void)cu_launch(c, kern, grid, SHW_THREADS, 0, (TT_ *)tmp.data, tmp.stride, (const T *)x.data, x.stride,
                    (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, a);
    return true;
}

/* The wide form where it takes the launch (and LG_SHRINK_WIDE is not 0), else the ring form */
template <typename T, typename TT_>
static void launch_form(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, shm_args a, const int *slots,
                        int k, int max_seg, int rank)
{
    if (!c->tune->shrink_wide || !launch_wide_nt<T, TT_>(c, tmp, x, lm, slots, k, max_seg, rank))
        launch_nt<T, TT_>(c, tmp, x, lm, a, k, max_seg, rank);
}

/* Called by cu_lora_shrink_multi after its checks (tmp, x, slots, segments within x, max_seg >= 1):
 * true when launched here, false when the segments are decode-sized, x is not 16-byte aligned
 * rows with in % 8 == 0, the ring form's grid would be under half the SMs (one 512-token segment,
 * one slot: 16 blocks, 2x slower than the CUDA-core kernel; the gate counts the ring form's blocks
 * also where the wide form, k x rank chunks fewer and larger blocks, takes the launch: not
 * measured apart), or LG_SGMV_PREFILL=0 (then lora_shrink.cu's kernel runs). */
bool cu_lora_shrink_mma(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k,
                        int max_seg)
{
    if (max_seg < SHM_MIN_SEG || !cu_sgmv_prefill(c))
        return false;
    if (x.cols % 8 != 0 || x.stride % 8 != 0 || !cu_aligned16(x.data))
        return false;
    const int rank = cu_lora_step_rank(lm);
    const int nr = rank <= 16 ? 16 : rank <= 32 ? 32 : 64;
    shm_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < k; i++) a.slot[i] = slots[i];
    a.ng = (rank + nr - 1) / nr;
    a.col_off = lm->max_rank;
    if ((int64_t)a.ng * k > 65535)
        return false;
    /* fewer blocks than half the SMs: the CUDA-core kernel's more blocks run faster (bench_sgmv) */
    if (cu_lora_tiles(lm, SHM_TM) * a.ng * k < c->n_sm / 2 && cu_sgmv_prefill(c) != 2)
        return false;
    if (x.dtype == LG_F16) {
        if (tmp.dtype == LG_F32) launch_form<__half, float>(c, tmp, x, lm, a, slots, k, max_seg, rank);
        else launch_form<__half, __half>(c, tmp, x, lm, a, slots, k, max_seg, rank);
    } else {
        if (tmp.dtype == LG_F32) launch_form<__nv_bfloat16, float>(c, tmp, x, lm, a, slots, k, max_seg, rank);
        else launch_form<__nv_bfloat16, __nv_bfloat16>(c, tmp, x, lm, a, slots, k, max_seg, rank);
    }
    return true;
}
