/*
 * lora_shrink.cu — SGMV shrink: each segment's tokens times its adapter's A.
 *
 *   for s < n_segs, w = lm->w[s * n_slots + slot], w.rank > 0:
 *     for t in [seg_indptr[s], seg_indptr[s+1]), j < w.rank:
 *       tmp[t, j] = sum_k float(x[t, k]) * float(w.A[j, k])        (f32 accumulation)
 * Rows of rank-0 segments are not touched. tmp is f32 (preferred: no
 * rounding between shrink and expand, as on the CPU) or the act dtype.
 *
 * Memory-bound: A ([rank, in], act dtype, in pool pages) is read once per
 * tile of TT tokens. Decode (32 one-token segments x rank 16 x q,k,v) is
 * 12 MB of A per launch against a few KB of x and tmp, so the kernel's job
 * is to have all of A in flight at once across the chip.
 * Block = (token tile, slot x group of SH_RG rank rows, segment); its 256
 * threads split `in` (K) into 16-byte chunks: thread c takes chunks c,
 * c + 256, ... and for each loads SH_RG A words and TT x words before any
 * arithmetic, accumulating TT x SH_RG partial dots in registers. The block
 * then reduces them (warp shuffles, then the 8 warps through shared memory,
 * in a fixed order: deterministic, no atomics) and writes TT x SH_RG values.
 * For in = 4096 that is 2 chunks per thread, so a rank-16 decode launch is
 * 32 x 3 x 4 = 384 blocks each reading 32 KB, all resident at once. The
 * decode kernel also comes with 2 and 1 rank rows a block (RG), for launches
 * that SH_RG would leave short of blocks (shrink_decode_rg); a row's sum does
 * not depend on the block's other rows.
 * TT = 1 for decode steps (every segment one token), 4 for segments of up
 * to 4 tokens; x is re-read per rank group from L2 (in x 2 bytes per token
 * per group). Longer segments (prefill) go to the tensor-core kernel of
 * lora_shrink_mma.cu, which reads x once (once per slot in its ring form) and A once per 32 tokens;
 * TT = 8 here only with LG_SGMV_PREFILL=0 or rows it cannot take.
 * Multi-slot form (cu_lora_shrink_multi): k slots over the same x in one
 * launch; slot i writes columns [i * max_rank, i * max_rank + rank) of tmp
 * (grid.y = k * rank groups). The single-slot op is the k = 1 case.
 * Vector path: in % 8 == 0, x rows 16-byte aligned and A 16-byte aligned
 * (checked per block); else 2-byte loads, same structure.
 * Programmatic dependent launch (cuda_common.cuh): the weight table, the
 * segment bounds and the first chunks of A per thread (SH_PRE at 4 rank
 * rows a block, 4 at 2, 8 at 1) are read before pdl_wait (none is written
 * by a kernel), x after; the A bytes are
 * in flight while the kernel before finishes. A is read with an L2
 * evict_first policy (used once a step; LG_L2_HINT bit 2, cuda_common.cuh).
 * Norm form (cu_lora_shrink_norm, for matmul_lora.cu's norm_matmul_lora: a
 * decode step whose shrink input is a freshly normed residual): the decode
 * kernel's blocks first compute their token's add_rmsnorm (16 KB of resid
 * and delta and the norm weights from L2 per block, after pdl_wait) in the
 * arithmetic order of add_rmsnorm.cu's vector kernel, then dot xn with A
 * from registers; one block a token stores h and xn for the matmul. The
 * layer loses the add_rmsnorm launch; the results are the two ops' bit for
 * bit (op tests). LG_SHRINK_NORM=0: not taken.
 */
#include "kernels/ops.cuh"

#define SH_THREADS 256
#define SH_WARPS (SH_THREADS / 32)
#define SH_RG 4 /* rank rows per block */
#define SH_PRE 2 /* 16-byte chunks of each A row per thread loaded before pdl_wait (in = 4096: all of them) */

struct sh_slots {
    int slot[LG_LORA_MULTI_MAX];
    int ng;      /* rank groups per slot (grid.y = k * ng) */
    int col_off; /* tmp column offset between slots (max_rank) */
    int hint;    /* the decode kernel reads A with L2 evict_first (LG_L2_HINT bit 2, cuda_common.cuh) */
};

/* acc[i][r] += xu[i] . af[r]: one chunk of 8 of the TT x rows (packed) against the A rows (floats). */
template <typename T, int TT, int RG>
__device__ __forceinline__ void shrink_dot(float (&acc)[TT][RG], const float (&af)[RG][8], const uint4 (&xu)[TT])
{
#pragma unroll
    for (int i = 0; i < TT; i++) {
        float xf[8];
        unpack8<T>(xu[i], xf);
#pragma unroll
        for (int r = 0; r < RG; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[i][r] += af[r][e] * xf[e];
    }
}

/* acc[i][r] += x[t0 + i, 8 ch .. 8 ch + 8) . A[r, same] for one 16-byte chunk of A rows (au). */
template <typename T, int TT, int RG>
__device__ __forceinline__ void shrink_chunk(float (&acc)[TT][RG], const uint4 (&au)[RG], const T *xt, int64_t ldx,
                                             int nt, int ch)
{
    uint4 xu[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) xu[i] = i < nt ? ((const uint4 *)(xt + (int64_t)i * ldx))[ch] : make_uint4(0, 0, 0, 0);
    float af[RG][8];
#pragma unroll
    for (int r = 0; r < RG; r++) unpack8<T>(au[r], af[r]);
    shrink_dot<T, TT, RG>(acc, af, xu);
}

/* The first NP 16-byte chunks of each of the nr A rows (row length in) a thread dots: thread c
 * chunks c + SH_THREADS p; zeros past nr rows or nch chunks. */
template <int NP, typename T, int RG>
__device__ __forceinline__ void shrink_load_a(uint4 (&au)[NP][RG], const T *A, int in, int nr, int nch, bool hint,
                                              uint64_t pol)
{
#pragma unroll
    for (int p = 0; p < NP; p++) {
        const int ch = threadIdx.x + p * SH_THREADS;
#pragma unroll
        for (int r = 0; r < RG; r++)
            au[p][r] = r < nr && ch < nch ? ld_weight16((const uint4 *)(A + (size_t)r * in) + ch, hint, pol)
                                          : make_uint4(0, 0, 0, 0);
    }
}

/* The block's sums of acc (warp shuffles, then the warps through red in a fixed order: no atomics)
 * to tmp[t0 + i, col + r] for the i < nt tokens and r < nr rank rows. */
template <typename TT_, int TT, int RG>
__device__ __forceinline__ void shrink_store(const float (&acc)[TT][RG], float (*red)[TT * RG], TT_ *tmp, int64_t ldt,
                                             int64_t t0, int nt, int nr, int64_t col)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int r = 0; r < RG; r++) {
            const float v = warp_sum(acc[i][r]);
            if (lane == 0)
                red[warp][i * RG + r] = v;
        }
    __syncthreads();
    if (threadIdx.x < TT * RG) {
        const int i = threadIdx.x / RG, r = threadIdx.x % RG;
        if (i < nt && r < nr) {
            float v = 0.0f;
#pragma unroll
            for (int wi = 0; wi < SH_WARPS; wi++) v += red[wi][threadIdx.x];
            tmp[(t0 + i) * ldt + col + r] = from_f32<TT_>(v);
        }
    }
}

/* RG rank rows a block; PRE chunks of each A row a thread loads before pdl_wait: the same 8 A words in flight a
 * thread at every RG */
template <typename T, typename TT_, int TT, int RG = SH_RG, int PRE = SH_PRE * SH_RG / RG>
__global__ void __launch_bounds__(SH_THREADS)
    lora_shrink_kernel(TT_ *tmp, int64_t ldt, const T *x, int64_t ldx, int in, const int32_t *seg_indptr,
                       const lg_lora_w *w, int n_slots, sh_slots sl, bool x_vec)
{
    __shared__ float red[SH_WARPS][TT * RG];
    pdl_trigger();
    const int s = blockIdx.z;
    const int si = blockIdx.y / sl.ng, j0 = (blockIdx.y % sl.ng) * RG;
    const lg_lora_w lw = w[(size_t)s * n_slots + sgmv_pick(sl.slot, si)];
    int t0, nt;
    if (j0 >= lw.rank || !sgmv_tile(seg_indptr, s, blockIdx.x, TT, &t0, &nt)) /* also rank 0; uniform over the block */
        return;
    const int nr = min(RG, lw.rank - j0);
    const T *A = (const T *)lw.A + (size_t)j0 * in; /* [nr, in] */
    const T *xt = x + (int64_t)t0 * ldx;            /* [nt, in], stride ldx */
    float acc[TT][RG];
#pragma unroll
    for (int i = 0; i < TT; i++)
#pragma unroll
        for (int r = 0; r < RG; r++) acc[i][r] = 0.0f;

    if (x_vec && cu_aligned16(lw.A)) {
        const int nch = in / 8;
        /* the first SH_PRE chunks of A (adapter weights: no kernel writes
         * them) are loaded before pdl_wait, so they are in flight while the
         * kernel before still runs; x only after */
        const uint64_t pol = sl.hint ? l2_policy_first() : 0;
        uint4 apre[PRE][RG];
        shrink_load_a<PRE>(apre, A, in, nr, nch, sl.hint, pol);
        pdl_wait();
#pragma unroll
        for (int p = 0; p < PRE; p++) {
            const int ch = threadIdx.x + p * SH_THREADS;
            if (ch < nch)
                shrink_chunk<T, TT, RG>(acc, apre[p], xt, ldx, nt, ch);
        }
#pragma unroll 2
        for (int ch = threadIdx.x + PRE * SH_THREADS; ch < nch; ch += SH_THREADS) {
            uint4 au[RG];
#pragma unroll
            for (int r = 0; r < RG; r++)
                au[r] = r < nr ? ld_weight16((const uint4 *)(A + (size_t)r * in) + ch, sl.hint, pol) : make_uint4(0, 0, 0, 0);
            shrink_chunk<T, TT, RG>(acc, au, xt, ldx, nt, ch);
        }
    } else {
        pdl_wait();
        for (int k = threadIdx.x; k < in; k += SH_THREADS) {
            float af[RG];
#pragma unroll
            for (int r = 0; r < RG; r++) af[r] = r < nr ? to_f32(A[(size_t)r * in + k]) : 0.0f;
#pragma unroll
            for (int i = 0; i < TT; i++) {
                const float xv = i < nt ? to_f32(xt[(int64_t)i * ldx + k]) : 0.0f;
#pragma unroll
                for (int r = 0; r < RG; r++) acc[i][r] += af[r] * xv;
            }
        }
    }
    shrink_store<TT_, TT, RG>(acc, red, tmp, ldt, t0, nt, nr, (int64_t)si * sl.col_off + j0);
}

/* The norm form's rows (cu_lora_shrink_norm): add_rmsnorm's inputs and outputs. */
template <typename T> struct sh_norm {
    const T *resid, *delta; /* delta NULL: h = resid */
    T *rout, *xn;
    const void *g;
    int64_t ldr, ldd, ldro, ldx;
    lg_dtype gdt;
    bool g_vec;
    float eps;
};

/* The norm form: the decode kernel (one token a segment, every token in one segment) whose block
 * first computes its token's add_rmsnorm in add_rmsnorm.cu's order (norm_row_ms, cuda_common.cuh:
 * thread c holds chunks c + 256 j, j < NJ), so h, inv and xn are the same floats, then dots xn with
 * A over the chunks in the decode kernel's order (shrink_dot), so tmp is the same too. Block y = 0
 * of a token (slot 0, rank rows 0..3; present even when the token has no rank there) stores h to
 * rout and xn. A is read before pdl_wait as in the decode kernel (all of it for in <= NJ x 2048). */
template <typename T, typename TT_, int NJ>
__global__ void __launch_bounds__(SH_THREADS)
    lora_shrink_norm_kernel(TT_ *tmp, int64_t ldt, const __grid_constant__ sh_norm<T> nm, int in,
                            const int32_t *seg_indptr, const lg_lora_w *w, int n_slots, sh_slots sl)
{
    __shared__ float red[SH_WARPS][SH_RG];
    __shared__ float nred[32]; /* norm_row_ms's */
    pdl_trigger();
    const int s = blockIdx.z;
    const int si = blockIdx.y / sl.ng, j0 = (blockIdx.y % sl.ng) * SH_RG;
    const lg_lora_w lw = w[(size_t)s * n_slots + sgmv_pick(sl.slot, si)];
    const bool writer = blockIdx.y == 0, dot = j0 < lw.rank;
    if (!dot && !writer) /* uniform over the block */
        return;
    const int64_t t = seg_indptr[s];
    const int nr = dot ? min(SH_RG, lw.rank - j0) : 0, nch = in / 8;
    const T *A = (const T *)lw.A + (size_t)j0 * in; /* [nr, in] */
    const bool a_vec = cu_aligned16(lw.A);
    const uint64_t pol = sl.hint ? l2_policy_first() : 0;
    uint4 apre[NJ][SH_RG];
    shrink_load_a<NJ>(apre, A, in, a_vec ? nr : 0, nch, sl.hint, pol);
    pdl_wait(); /* resid and delta come from the kernels before */

    const uint4 *d = nm.delta ? (const uint4 *)(nm.delta + t * nm.ldd) : NULL;
    uint4 hu[NJ];
    const float inv = rsqrtf(norm_row_ms<T, NJ, SH_WARPS>((const uint4 *)(nm.resid + t * nm.ldr), d,
                                                          writer && d ? (uint4 *)(nm.rout + t * nm.ldro) : NULL,
                                                          nch, nred, hu) +
                             nm.eps);
    uint4 *xo = writer ? (uint4 *)(nm.xn + t * nm.ldx) : NULL;
    float acc[1][SH_RG] = {};
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int ch = threadIdx.x + j * SH_THREADS;
        if (ch < nch) {
            float v[8];
            unpack8<T>(hu[j], v);
            const uint4 xu[1] = {norm_scale8<T>(v, inv, nm.g, nm.gdt, nm.g_vec, ch * 8)};
            if (xo)
                xo[ch] = xu[0];
            if (!dot)
                continue;
            float af[SH_RG][8]; /* shrink_chunk's arithmetic, x from registers */
#pragma unroll
            for (int q = 0; q < SH_RG; q++)
                if (a_vec) {
                    unpack8<T>(apre[j][q], af[q]);
                } else { /* A not 16-byte aligned: 2-byte loads, the same order */
#pragma unroll
                    for (int e = 0; e < 8; e++) af[q][e] = q < nr ? to_f32(A[(size_t)q * in + ch * 8 + e]) : 0.0f;
                }
            shrink_dot<T, 1, SH_RG>(acc, af, xu);
        }
    }
    if (dot)
        shrink_store<TT_, 1, SH_RG>(acc, red, tmp, ldt, t, 1, nr, (int64_t)si * sl.col_off + j0);
}

/* Rank rows a block of the decode shrink: SH_RG (4), halved while the launch would have fewer
 * than two blocks an SM and a thread would still load SH_MIN_LOADS 16-byte words of A, down to 1.
 * H100 (docs/benchmarks.md, GPU kernels, 2026-11-27): W3's down shrink (in 11,008, rank 8) on 1 row
 * a block, 256 blocks instead of 64: its chain 5.4 -> 4.2 us a layer, W3 -0.04 ms a step; W1's o
 * shrink (in 4,096) on 1 row a block (512 blocks of 2 loads a thread) lost 0.07 ms a step, on 2
 * rows (256 blocks) the same as on 4. LG_SHRINK_RG=4|2|1 forces one (the same bits; tests). */
#define SH_MIN_LOADS 4

static int shrink_decode_rg(const cuda_ctx *c, const lg_lora_meta *lm, int k, int in)
{
    const int f = c->tune->shrink_rg;
    if (f == 1 || f == 2 || f == 4)
        return f;
    const int cpt = (in / 8 + SH_THREADS - 1) / SH_THREADS; /* 16-byte chunks of a row a thread */
    int rg = SH_RG;
    while (rg > 1 && (int64_t)lm->n_segs * k * ((lm->max_rank + rg - 1) / rg) < 2 * (int64_t)c->n_sm &&
           rg / 2 * cpt >= SH_MIN_LOADS)
        rg /= 2;
    return rg;
}

template <typename T, typename TT_>
static void launch(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, sh_slots sl, int k, int max_seg)
{
    const bool x_vec = x.cols % 8 == 0 && x.stride % 8 == 0 && cu_aligned16(x.data);
    const int tt = max_seg == 1 ? 1 : max_seg <= 4 ? 4 : 8;
    /* decode: fewer rank rows a block where SH_RG would leave the GPU short of blocks (W3's down shrink:
     * 32 tokens x 2 groups = 64 blocks each streaming 88 KB of A); a row's sum is the same whatever the
     * block's other rows, so the bits do not change */
    const int rg = tt == 1 ? shrink_decode_rg(c, lm, k, (int)x.cols) : SH_RG;
    sl.ng = (lm->max_rank + rg - 1) / rg;
    const dim3 grid((unsigned)((max_seg + tt - 1) / tt), (unsigned)(sl.ng * k), (unsigned)lm->n_segs);
    const auto kern = tt == 4 ? lora_shrink_kernel<T, TT_, 4>
                    : tt == 8 ? lora_shrink_kernel<T, TT_, 8>
                    : rg == 1 ? lora_shrink_kernel<T, TT_, 1, 1>
                    : rg == 2 ? lora_shrink_kernel<T, TT_, 1, 2>
                              : lora_shrink_kernel<T, TT_, 1>;
    (void)cu_launch(c, kern, grid, SH_THREADS, 0, (TT_ *)tmp.data, tmp.stride, (const T *)x.data, x.stride,
                    (int)x.cols, lm->seg_indptr, lm->w, lm->n_slots, sl, x_vec);
}

template <typename T>
static void launch_t(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, sh_slots sl, int k,
                     int max_seg)
{
    if (tmp.dtype == LG_F32) launch<T, float>(c, tmp, x, lm, sl, k, max_seg);
    else launch<T, T>(c, tmp, x, lm, sl, k, max_seg);
}

/* Longest segment, from the host copy of seg_indptr; -1 when malformed. */
int cu_lora_max_seg(const lg_lora_meta *lm)
{
    int mx = 0;
    for (int s = 0; s < lm->n_segs; s++) {
        int n = lm->seg_indptr_host[s + 1] - lm->seg_indptr_host[s];
        if (n < 0)
            return -1;
        if (n > mx) mx = n;
    }
    return mx;
}

/* The step's largest rank: step_max_rank when given, else max_rank. */
int cu_lora_step_rank(const lg_lora_meta *lm)
{
    return lm->step_max_rank > 0 && lm->step_max_rank < lm->max_rank ? lm->step_max_rank : lm->max_rank;
}

/* Tiles of tm tokens over all segments (segments already checked by cu_lora_max_seg). */
int64_t cu_lora_tiles(const lg_lora_meta *lm, int tm)
{
    int64_t n = 0;
    for (int s = 0; s < lm->n_segs; s++) n += (lm->seg_indptr_host[s + 1] - lm->seg_indptr_host[s] + tm - 1) / tm;
    return n;
}

/* Both launchers' slots, each checked against lm->n_slots, and tmp's size (k slots of max_rank
 * columns, at least `rows` rows), into *sl with its rank groups, column offset and L2 hint: 0, or -1
 * with the message reported (op: the launcher's name). */
static int sh_slots_make(cuda_ctx *c, const char *op, lg_tensor tmp, int64_t rows, const lg_lora_meta *lm,
                         const int *slots, int k, sh_slots *sl)
{
    for (int i = 0; i < k; i++) {
        if (slots[i] < 0 || slots[i] >= lm->n_slots)
            return CU_FAIL(c, "%s: slot %d of %d", op, slots[i], lm->n_slots);
        sl->slot[i] = slots[i];
    }
    if (tmp.cols < (int64_t)k * lm->max_rank || tmp.rows < rows)
        return CU_FAIL(c, "%s: tmp [%lld,%lld] is narrower than %d x max_rank %d or shorter than %lld rows", op,
                       (long long)tmp.rows, (long long)tmp.cols, k, lm->max_rank, (long long)rows);
    sl->ng = (lm->max_rank + SH_RG - 1) / SH_RG;
    sl->col_off = lm->max_rank;
    sl->hint = (cu_l2_hint(c) & 2) != 0;
    return 0;
}

int cu_lora_shrink_multi(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "lora_shrink tmp", tmp);
    CU_CHECK_VIEW(c, "lora_shrink x", x);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !slots)
        return CU_FAIL(c, "lora_shrink: lora meta, its arrays or the slot list are NULL");
    if (!cu_is_half(x.dtype) || (tmp.dtype != LG_F32 && tmp.dtype != x.dtype))
        return CU_FAIL(c, "lora_shrink: x must be f16/bf16 and tmp f32 or x's dtype, found x %s, tmp %s",
                       lg_dtype_name(x.dtype), lg_dtype_name(tmp.dtype));
    if (k < 1 || k > LG_LORA_MULTI_MAX || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "lora_shrink: %d slots (1..%d), %d segments", k, LG_LORA_MULTI_MAX, lm->n_segs);
    sh_slots sl;
    if (sh_slots_make(c, "lora_shrink", tmp, x.rows, lm, slots, k, &sl) != 0)
        return -1;
    if (lm->n_segs == 0 || lm->max_rank <= 0)
        return 0;
    int max_seg = cu_lora_max_seg(lm);
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > x.rows)
        return CU_FAIL(c, "lora_shrink: segments are malformed or cover more than x's %lld rows", (long long)x.rows);
    if (max_seg == 0)
        return 0;
    if (cu_lora_shrink_mma(c, tmp, x, lm, slots, k, max_seg)) { /* prefill segments: tensor cores */
        CU_LAUNCHED(c);
        return 0;
    }
    if (x.dtype == LG_F16) launch_t<__half>(c, tmp, x, lm, sl, k, max_seg);
    else launch_t<__nv_bfloat16>(c, tmp, x, lm, sl, k, max_seg);
    CU_LAUNCHED(c);
    return 0;
}

static unsigned long g_norm_launches;
/* norm-form launches so far (op tests: which path norm_matmul_lora took) */
extern "C" unsigned long lg_cuda_lora_norm_launches(void) { return g_norm_launches; }

/* Launches the norm form; false (nothing run) when its blocks would not all be resident at once:
 * every block pays the norm's latency after pdl_wait, so a second wave would pay it again (W2's
 * 128 tokens: 1,536 blocks; measured slower than add_rmsnorm + the shrink). */
template <typename T, typename TT_>
static bool launch_norm(cuda_ctx *c, lg_tensor tmp, const lg_norm_in *nm, lg_tensor xn, const lg_lora_meta *lm,
                        sh_slots sl, int k)
{
    sh_norm<T> a;
    a.resid = (const T *)nm->resid.data, a.delta = (const T *)nm->delta.data;
    a.rout = (T *)nm->rout.data, a.xn = (T *)xn.data, a.g = nm->w.data;
    a.ldr = nm->resid.stride, a.ldd = nm->delta.stride, a.ldro = nm->rout.stride, a.ldx = xn.stride;
    a.gdt = nm->w.dtype, a.g_vec = cu_aligned16(nm->w.data), a.eps = nm->eps;
    const int in = (int)xn.cols, nch = in / 8;
    const dim3 grid(1, (unsigned)(sl.ng * k), (unsigned)lm->n_segs);
    void (*f)(TT_ *, int64_t, const sh_norm<T>, int, const int32_t *, const lg_lora_w *, int, sh_slots) =
        nch <= SH_THREADS       ? lora_shrink_norm_kernel<T, TT_, 1>
        : nch <= 2 * SH_THREADS ? lora_shrink_norm_kernel<T, TT_, 2>
                                : lora_shrink_norm_kernel<T, TT_, 4>;
    if ((int64_t)grid.y * grid.z > (int64_t)cu_resident_blocks(c, (const void *)f, SH_THREADS, 0) * c->n_sm)
        return false;
    (void)cu_launch(c, f, grid, SH_THREADS, 0, (TT_ *)tmp.data, tmp.stride, a, in, lm->seg_indptr, lm->w,
                    lm->n_slots, sl);
    return true;
}

static bool vec_rows(lg_tensor t) { return !t.data || (t.stride % 8 == 0 && cu_aligned16(t.data)); }

int cu_lora_shrink_norm(lg_backend *be, lg_tensor tmp, const lg_norm_in *nm, lg_tensor xn, const lg_lora_meta *lm,
                        const int *slots, int k)
{
    cuda_ctx *c = CU_CTX(be);
    if (!c->tune->shrink_norm) /* LG_SHRINK_NORM=0: never taken (add_rmsnorm, then the shrink; comparisons) */
        return 1;
    /* add_rmsnorm's checks with xn as its output, then the second residual buffer's */
    const lg_tensor r = nm->resid;
    if (cu_add_rmsnorm_check(c, r, nm->delta, nm->w, xn) != 0)
        return -1;
    if (nm->delta.data) {
        CU_CHECK_VIEW(c, "lora_shrink_norm rout", nm->rout);
        if (nm->rout.dtype != r.dtype || nm->rout.rows != r.rows || nm->rout.cols != r.cols)
            return CU_FAIL(c, "lora_shrink_norm: rout %s [%lld,%lld] differs from resid %s [%lld,%lld]",
                           lg_dtype_name(nm->rout.dtype), (long long)nm->rout.rows, (long long)nm->rout.cols,
                           lg_dtype_name(r.dtype), (long long)r.rows, (long long)r.cols);
    }
    if (!cu_is_half(r.dtype))
        return CU_FAIL(c, "lora_shrink_norm: resid, delta, rout and xn must share an f16/bf16 dtype");
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !slots || k < 1 || k > LG_LORA_MULTI_MAX)
        return CU_FAIL(c, "lora_shrink_norm: lora meta, its arrays or the slots (1..%d) are missing",
                       LG_LORA_MULTI_MAX);
    /* taken: a decode step (every segment exactly one token, in order, covering the rows) */
    bool decode = lm->n_segs == r.rows && lm->n_segs > 0 && lm->n_segs <= 65535 && lm->max_rank > 0;
    for (int s = 0; decode && s <= lm->n_segs; s++) decode = lm->seg_indptr_host[s] == s;
    if (!decode || r.cols % 8 != 0 || r.cols / 8 > 4 * SH_THREADS || !vec_rows(r) || !vec_rows(xn) ||
        !vec_rows(nm->delta) || (nm->delta.data && !vec_rows(nm->rout)) ||
        (tmp.dtype != LG_F32 && tmp.dtype != xn.dtype))
        return 1;
    CU_CHECK_VIEW(c, "lora_shrink_norm tmp", tmp);
    sh_slots sl;
    if (sh_slots_make(c, "lora_shrink_norm", tmp, xn.rows, lm, slots, k, &sl) != 0)
        return -1;
    const bool f32 = tmp.dtype == LG_F32;
    bool ran;
    if (xn.dtype == LG_F16)
        ran = f32 ? launch_norm<__half, float>(c, tmp, nm, xn, lm, sl, k)
                  : launch_norm<__half, __half>(c, tmp, nm, xn, lm, sl, k);
    else
        ran = f32 ? launch_norm<__nv_bfloat16, float>(c, tmp, nm, xn, lm, sl, k)
                  : launch_norm<__nv_bfloat16, __nv_bfloat16>(c, tmp, nm, xn, lm, sl, k);
    if (!ran)
        return 1;
    CU_LAUNCHED(c);
    g_norm_launches++;
    return 0;
}

int cu_lora_shrink(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot)
{
    return cu_lora_shrink_multi(be, tmp, x, lm, &slot, 1);
}

/* For benchmarks (tests/gpu/bench_sgmv.c): the compute stream, to time ops with events. */
extern "C" cudaStream_t lg_cuda_compute_stream(lg_backend *be)
{
    return be && be->ctx ? CU_CTX(be)->stream : NULL;
}
