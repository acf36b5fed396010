/*
 * sample.cu — the device sampler (backend.h slot `sample`): one thread
 * block cluster of C blocks of 1024 threads per row (C = 8, 4, 2 or 1, as
 * many as keep the batch's clusters in one wave; see row_part), the exact
 * rules of engine/backend/sampling.h, bit-identical to lg_sampler_sample_u given
 * the same u, for any C.
 *
 * Why it can be exact: token weights come from lg_sample_weight
 * (engine/backend/sampling_weight.h, shared with the host) as integers, every sum is
 * an exact uint64, and each remaining floating-point step (T = top_p * Z,
 * target = u * Z', the comparisons) is one IEEE operation on exact inputs.
 * So no reduction order or split of the row matters, and no threshold is
 * ever approximated:
 *
 *   pass A   argmax (greedy rows stop here), lowest +inf id, count of finite
 *            logits, lmax
 *   top-k    k-th largest logit: radix select over order-preserving 32-bit
 *            keys of the logits (-0 folded into +0), 8 bits a level, 4 levels
 *            of counts, over the tokens of W > 0 only (see there)
 *   top-p    the same radix walk over the survivors of W > 0, on sums of W
 *            instead of counts: finds v* = the logit of the prefix's last
 *            token and S = sum W above it; the first r tokens (by id) of the
 *            tie group at v* are kept, r smallest with S + r * W(v*) >= T,
 *            as the host's (logit desc, id asc) walk does
 *   draw     Z' = sum W of kept tokens per (block, warp) segment; the segment
 *            where the cumulative sum crosses u * Z' is cut into pieces and
 *            the crossing piece rescanned in id order by one warp
 * Every pass is a coalesced sweep of the block's part of the row
 * (L2-resident for a batch of rows); filters that are off cost no pass.
 * Histograms are per warp (96 KiB of dynamic shared memory), so warps never
 * contend; lanes add by shared-memory atomics (same-digit lanes replay: on
 * the H100 still 1.7-2.2x faster than combining them first with match_any,
 * even on rows of ties; LG_SAMPLE_HIST=0 gives that); the blocks of a row
 * add theirs through distributed shared memory. Worst case (top-k + top-p, ties cut) is about 11 sweeps,
 * W (a few FMAs) recomputed where needed.
 */
#include "kernels/sample_ops.cuh"

#include <cooperative_groups.h>

extern "C" {
#include "engine/backend/sampling_weight.h"
}

#define SM_THREADS 1024
#define SM_WARPS (SM_THREADS / 32)
#define FULL 0xffffffffu
#define SM_MAX_CLUSTER 8 /* blocks per row (a thread block cluster; 8: the portable size) */
#define SM_MIN_IDS 1024  /* fewest ids per block the launcher picks a cluster for */

namespace cg = cooperative_groups;

typedef unsigned long long u64;

__device__ __forceinline__ bool is_fin(float v) { return v > -INFINITY && v < INFINITY; }

/* Order-preserving key: a < b (as floats, -0 == +0) <=> key(a) < key(b). */
__device__ __forceinline__ uint32_t fkey(float f)
{
    uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ u64 warp_scan_u64(u64 v) /* inclusive, by lane */
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        u64 t = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v += t;
    }
    return v;
}

/* Pass A's per-thread state and its combination. */
struct scan_a {
    float bv;   /* argmax value (NaN never taken) */
    int bi;     /* its lowest id; INT_MAX: none above -inf */
    int inf_id; /* lowest +inf id; INT_MAX: none */
    int nfin;
    float lmax;
};
__device__ __forceinline__ scan_a combine(scan_a a, scan_a b)
{
    scan_a r;
    bool bfirst = b.bv > a.bv || (b.bv == a.bv && b.bi < a.bi);
    r.bv = bfirst ? b.bv : a.bv;
    r.bi = bfirst ? b.bi : a.bi;
    r.inf_id = min(a.inf_id, b.inf_id);
    r.nfin = a.nfin + b.nfin;
    r.lmax = fmaxf(a.lmax, b.lmax);
    return r;
}
__device__ __forceinline__ scan_a shfl_a(scan_a a, int o)
{
    a.bv = __shfl_xor_sync(FULL, a.bv, o);
    a.bi = __shfl_xor_sync(FULL, a.bi, o);
    a.inf_id = __shfl_xor_sync(FULL, a.inf_id, o);
    a.nfin = __shfl_xor_sync(FULL, a.nfin, o);
    a.lmax = __shfl_xor_sync(FULL, a.lmax, o);
    return a;
}

struct sample_smem {
    u64 hist[256];     /* radix level, merged: count (top-k) or sum W (top-p) per digit */
    uint32_t cnt[256]; /* top-p: tokens per digit */
    u64 wsum[SM_WARPS], wpre[SM_WARPS];
    u64 ssum[SM_WARPS]; /* seg_find: sums of the crossing segment's pieces */
    scan_a red[SM_WARPS];
    uint32_t b_prefix;
    u64 b_above, b_total;
    int b_warp, b_sub, b_idx;
    u64 b_carry;
    /* the row's cluster: what each block publishes to the others (two slots
     * of each, alternating: see row_part), and the block totals of the last
     * seg_sums by rank */
    u64 x_hist[2][256];
    uint32_t x_cnt[2][256];
    scan_a x_a[2];
    u64 x_tot[2], x_extra[2];
    int x_id[2];
    u64 rtot[SM_MAX_CLUSTER];
    u64 b_base;  /* seg_sums: sum over the ranks before this block */
    u64 b_extra; /* hist_merge: the row's sum of `extra` */
    int b_rank; /* seg_find: the rank whose ids hold the answer, -1: none */
};

/* This block's part of its row: a thread block cluster of C blocks shares
 * one row (C = 1: a plain block), block `rank` owning the ids [lo, hi), its
 * warp w the segment [lo + w * seg, lo + (w + 1) * seg) of them; so the
 * (rank, warp) segments tile the row in id order. Every decision (argmax,
 * radix digits, totals, which segment crosses) is taken by each block from
 * the same exact integer sums of all blocks, so all blocks agree and the
 * token is the same for any C. Exchanges: a block writes its slot [ph], the
 * cluster synchronises, every block reads the others' slot [ph], ph flips;
 * a slot is rewritten two exchanges later, after the next synchronisation,
 * which no block reaches before its reads of this one are done. */
struct row_part {
    int C, rank, lo, hi, seg, ph;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900 /* no clusters: the host launches C = 1 (cu_sample) */
    __device__ void sync() const
    {
        if (C > 1)
            __trap(); /* a launch this code cannot serve: fail loudly, never a wrong token */
        __syncthreads();
    }
    template <class T> __device__ T *at(T *p, int) const { return p; }
    static __device__ int block_rank() { return 0; }
#else
    __device__ void sync() const
    {
        if (C > 1)
            cg::this_cluster().sync();
        else
            __syncthreads();
    }
    template <class T> __device__ T *at(T *p, int r) const
    {
        return C > 1 ? cg::this_cluster().map_shared_rank(p, r) : p;
    }
    static __device__ int block_rank() { return (int)cg::this_cluster().block_rank(); }
#endif
};

/* Radix histograms: each warp owns a private [256] slice of the dynamic shared
 * memory (no contention across warps). Lanes add by shared-memory atomics
 * (atom), or (LG_SAMPLE_HIST=0) lanes that hit the same digit are combined
 * first (match_any + reduce_add) and one leader adds: measured slower on the
 * H100 on every row kind, ties included (docs/benchmarks.md, GPU kernels, 2026-11-23).
 * hist_merge folds the slices into sm.hist / sm.cnt. */
#define HIST_SMEM (SM_WARPS * 256 * (sizeof(u64) + sizeof(uint32_t)))
static_assert(SM_THREADS == 4 * 256, "hist_merge: four threads per digit");
struct warp_hist {
    u64 *mass;      /* [SM_WARPS][256]; atom: two u32 [SM_WARPS][256], the low and high 16 bits of W summed */
    uint32_t *cnt;  /* [SM_WARPS][256] */
    bool atom;
};
__device__ __forceinline__ warp_hist hist_of(unsigned char *dyn, bool atom)
{
    warp_hist h = {(u64 *)dyn, (uint32_t *)(dyn + SM_WARPS * 256 * sizeof(u64)), atom};
    return h;
}
__device__ __forceinline__ void hist_clear(warp_hist h)
{
    for (int j = threadIdx.x; j < SM_WARPS * 256; j += SM_THREADS) {
        h.mass[j] = 0;
        h.cnt[j] = 0;
    }
}
/* Warp-uniform: every lane calls, `on` says whether its token counts. */
__device__ __forceinline__ void hist_add(warp_hist h, bool on, int d, uint32_t wt)
{
    if (!__any_sync(FULL, on))
        return; /* warp-uniform: no lane counts (most of a sweep below radix level 0) */
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (h.atom) { /* shared-memory atomics on the warp's slice; same-digit lanes replay */
        if (on) {
            uint32_t *lo = (uint32_t *)h.mass, *hi = lo + SM_WARPS * 256;
            atomicAdd(&h.cnt[w * 256 + d], 1u);
            atomicAdd(&lo[w * 256 + d], wt & 0xffffu);
            if (wt >> 16) /* top-k's counts (wt = 1) need two atomics */
                atomicAdd(&hi[w * 256 + d], wt >> 16);
        }
        return;
    }
    unsigned m = __match_any_sync(FULL, on ? d : -1);
    unsigned lo = __reduce_add_sync(m, wt & 0xffffu), hi = __reduce_add_sync(m, wt >> 16);
    if (on && lane == __ffs(m) - 1) {
        h.mass[w * 256 + d] += ((u64)hi << 16) + lo;
        h.cnt[w * 256 + d] += __popc(m);
    }
    __syncwarp(); /* this iteration's updates before the next one's (another leader lane may read them) */
}

/* Warp 0: walking digits 255..0 with the running sum starting at `base`,
 * the first digit d where base + sum(h[255..d]) >= target. *above = base +
 * sum(h[255..d+1]). Needs target <= base + sum(h) (else returns digit 0). */
__device__ int radix_walk(const u64 *h, u64 base, double target, u64 *above)
{
    int lane = threadIdx.x & 31;
    u64 s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) s += h[255 - lane * 8 - j];
    u64 incl = warp_scan_u64(s);
    unsigned bal = __ballot_sync(FULL, (double)(base + incl) >= target);
    int L = bal ? __ffs(bal) - 1 : 31;
    int d = 0;
    u64 acc = base + incl - s;
    if (lane == L) {
        for (int j = 0; j < 8; j++) {
            int dd = 255 - L * 8 - j;
            if ((double)(acc + h[dd]) >= target) {
                d = dd;
                break;
            }
            acc += h[dd];
        }
    }
    d = __shfl_sync(FULL, d, L);
    *above = __shfl_sync(FULL, acc, L);
    return d;
}

/* Folds the warps' slices, then the row's blocks, into sm.hist / sm.cnt:
 * every block of the row gets the whole row's histogram (exact integer
 * sums, so the same in each). Four threads per digit, each summing a
 * quarter of the slices (then of the ranks). `extra`: a per-thread count
 * summed over the row along with it, into sm.b_extra. Barriers of its own
 * before and after. */
__device__ void hist_merge(sample_smem &sm, row_part &rp, warp_hist h, u64 extra = 0)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    extra = warp_sum_u64(extra);
    if (lane == 0) sm.ssum[w] = extra;
    __syncthreads(); /* the warps' hist_add done */
    const int d = threadIdx.x >> 2, q = threadIdx.x & 3; /* SM_THREADS = 4 * 256 */
    u64 m = 0, c = 0;
#pragma unroll
    for (int j = q * (SM_WARPS / 4); j < (q + 1) * (SM_WARPS / 4); j++) {
        if (h.atom) { /* per warp: lo < 2^16 * ids of the warp, hi < 2^15 * ids: no u32 overflow up to 65,537 ids */
            const uint32_t *lo = (const uint32_t *)h.mass, *hi = lo + SM_WARPS * 256;
            m += lo[j * 256 + d] + ((u64)hi[j * 256 + d] << 16);
        } else {
            m += h.mass[j * 256 + d];
        }
        c += h.cnt[j * 256 + d];
    }
    m += __shfl_xor_sync(FULL, m, 1);
    c += __shfl_xor_sync(FULL, c, 1);
    m += __shfl_xor_sync(FULL, m, 2);
    c += __shfl_xor_sync(FULL, c, 2);
    if (q == 0) {
        sm.x_hist[rp.ph][d] = m;
        sm.x_cnt[rp.ph][d] = (uint32_t)c;
    }
    if (w == 0) {
        u64 e = warp_sum_u64(sm.ssum[lane]);
        if (lane == 0) sm.x_extra[rp.ph] = e;
    }
    rp.sync();
    m = 0;
    c = 0;
    for (int r = q; r < rp.C; r += 4) {
        m += *rp.at(&sm.x_hist[rp.ph][d], r);
        c += *rp.at(&sm.x_cnt[rp.ph][d], r);
    }
    m += __shfl_xor_sync(FULL, m, 1);
    c += __shfl_xor_sync(FULL, c, 1);
    m += __shfl_xor_sync(FULL, m, 2);
    c += __shfl_xor_sync(FULL, c, 2);
    if (q == 0) {
        sm.hist[d] = m;
        sm.cnt[d] = (uint32_t)c;
    }
    if (w == 0) {
        u64 e = lane < rp.C ? *rp.at(&sm.x_extra[rp.ph], lane) : 0;
        e = warp_sum_u64(e);
        if (lane == 0) sm.b_extra = e;
    }
    __syncthreads();
    rp.ph ^= 1;
}

/* The warp's sum of f(i) over ids [b, e) (every lane gets it). */
template <class F> __device__ __forceinline__ u64 warp_range_sum(const F &f, int b, int e)
{
    u64 acc = 0;
#pragma unroll 8
    for (int i = b + (threadIdx.x & 31); i < e; i += 32) acc += f(i); /* f reads x through __ldg: loads run ahead */
    return warp_sum_u64(acc);
}

/* Sum of f(i) over each warp's id segment; wsum/wpre (this block's), the
 * block totals by rank (rtot), b_base (ranks before this one) filled; the
 * row's total returned. */
template <class F> __device__ u64 seg_sums(sample_smem &sm, row_part &rp, const F &f)
{
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = rp.lo + w * rp.seg;
    const u64 acc = warp_range_sum(f, b, min(rp.hi, b + rp.seg));
    if (lane == 0) sm.wsum[w] = acc;
    __syncthreads();
    if (w == 0) {
        u64 s = sm.wsum[lane], incl = warp_scan_u64(s);
        sm.wpre[lane] = incl - s;
        if (lane == 31) sm.x_tot[rp.ph] = incl;
    }
    rp.sync();
    if (w == 0) {
        u64 t = lane < rp.C ? *rp.at(&sm.x_tot[rp.ph], lane) : 0, incl = warp_scan_u64(t);
        if (lane < rp.C) sm.rtot[lane] = t;
        if (lane == rp.rank) sm.b_base = incl - t;
        if (lane == 31) sm.b_total = incl;
    }
    __syncthreads();
    rp.ph ^= 1;
    return sm.b_total;
}

/* After seg_sums(f): the lowest id whose cumulative sum of f exceeds target
 * if this block holds it, -2 if another block of the row does, -1 if none
 * does. The cumulative sum only grows, so the answer lies in the first
 * block, then the first warp segment of it, whose end exceeds the target;
 * that segment is cut into SM_WARPS pieces of `sub` ids, each summed by one
 * warp, and the first piece whose end exceeds it is rescanned 32 ids at a
 * time by one warp (every sum is an exact u64 and every comparison the same
 * (double)(sum) > target, so the id is the one a sequential scan finds).
 * One warp rescanning a whole segment (V / 32 ids, 4,748 at V = 151,936)
 * was most of a sampled row's time on the H100 (docs/benchmarks.md, GPU
 * kernels, 2026-11-23). */
template <class F> __device__ int seg_find(sample_smem &sm, const row_part &rp, const F &f, double target)
{
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (w == 0) {
        u64 t = lane < rp.C ? sm.rtot[lane] : 0, incl = warp_scan_u64(t);
        unsigned bal = __ballot_sync(FULL, lane < rp.C && (double)incl > target);
        if (lane == 0) sm.b_rank = bal ? __ffs(bal) - 1 : -1;
    }
    __syncthreads();
    if (sm.b_rank != rp.rank)
        return sm.b_rank < 0 ? -1 : -2; /* block-uniform */
    const u64 base = sm.b_base;
    if (w == 0) {
        unsigned bal = __ballot_sync(FULL, (double)(base + sm.wpre[lane] + sm.wsum[lane]) > target);
        if (lane == 0) {
            sm.b_warp = bal ? __ffs(bal) - 1 : -1;
            sm.b_sub = -1;
            sm.b_idx = -1;
        }
    }
    __syncthreads();
    const int wc = sm.b_warp;
    if (wc < 0)
        return -1; /* block-uniform; unreachable: the block's total exceeds the target */
    const int b = rp.lo + wc * rp.seg, e = min(rp.hi, b + rp.seg);
    const int sub = ((rp.seg + SM_WARPS - 1) / SM_WARPS + 31) / 32 * 32;
    const int sb = b + w * sub, se = min(e, sb + sub);
    const u64 acc = warp_range_sum(f, sb, se);
    if (lane == 0) sm.ssum[w] = acc;
    __syncthreads();
    if (w == 0) {
        const u64 s = sm.ssum[lane], incl = base + sm.wpre[wc] + warp_scan_u64(s);
        unsigned bal = __ballot_sync(FULL, (double)incl > target);
        const int L = bal ? __ffs(bal) - 1 : -1;
        if (L >= 0 && lane == L) {
            sm.b_sub = L;
            sm.b_carry = incl - s;
        }
    }
    __syncthreads();
    if (w == sm.b_sub) {
        u64 carry = sm.b_carry;
        for (int i0 = sb; i0 < se; i0 += 32) {
            int i = i0 + lane;
            u64 incl = warp_scan_u64(i < se ? f(i) : 0);
            unsigned bal = __ballot_sync(FULL, (double)(carry + incl) > target);
            if (bal) {
                if (lane == 0) sm.b_idx = i0 + __ffs(bal) - 1;
                break;
            }
            carry += __shfl_sync(FULL, incl, 31);
        }
    }
    __syncthreads();
    return sm.b_idx;
}

/* W of token i if it survives every filter, else 0 (the predicate
 * lg_sampler_sample_u applies when it rebuilds the kept set in id order). */
struct kept_w {
    const float *x;
    float lmax, inv_t, thr_k, thr_p;
    int id_p;
    bool has_k, has_p, has_m;
    double min_w;
    __device__ u64 operator()(int i) const
    {
        float v = __ldg(x + i);
        if (!is_fin(v)) return 0;
        if (has_k && !(v >= thr_k)) return 0;
        if (has_p && !(v > thr_p || (v == thr_p && i <= id_p))) return 0;
        uint32_t w = lg_sample_weight(v, lmax, inv_t);
        if (has_m && !((double)w >= min_w || v == lmax)) return 0;
        return w;
    }
};
struct equal_to {
    const float *x;
    float v;
    __device__ u64 operator()(int i) const { return __ldg(x + i) == v ? 1 : 0; }
};

/* One sweep of the block's ids [lo, hi), lane `lane` of warp w visiting
 * b + lane for b = lo + w * 32, lo + w * 32 + SM_THREADS, ... (b < hi,
 * warp-uniform; ids from hi on read NAN) in that order, with the next SWEEP_U values of the thread loaded
 * before any is used: one global-memory latency per SWEEP_U steps instead of
 * one per step (a greedy row of 32,000 logits took 19.5 us on the H100:
 * 32 dependent load round trips per thread). */
#define SWEEP_U 8
template <int U, class Fn> __device__ __forceinline__ void row_sweep(const float *x, const row_part &rp, Fn &&fn)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, hi = rp.hi;
    for (int b0 = rp.lo + w * 32; b0 < hi; b0 += SM_THREADS * U) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = b0 + u * SM_THREADS + lane;
            v[u] = i < hi ? __ldg(x + i) : NAN;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (b0 + u * SM_THREADS < hi)
                fn(b0 + u * SM_THREADS + lane, v[u]);
    }
}

template <int U>
__global__ void __launch_bounds__(SM_THREADS)
sample_kernel(int32_t *out_ids, const float *logits, int V, const lg_sample_row *rows, int C, int hist_atomic)
{
    __shared__ sample_smem sm;
    extern __shared__ __align__(16) unsigned char dyn[]; /* HIST_SMEM: per-warp histograms */
    const warp_hist h = hist_of(dyn, hist_atomic != 0);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int row = blockIdx.x / C;
    row_part rp;
    rp.C = C;
    rp.rank = C > 1 ? row_part::block_rank() : 0;
    const int chunk = ((V + C - 1) / C + 31) / 32 * 32;
    rp.lo = min(V, rp.rank * chunk);
    rp.hi = min(V, rp.lo + chunk);
    rp.seg = ((chunk + SM_WARPS - 1) / SM_WARPS + 31) / 32 * 32;
    rp.ph = 0;
    const float *x = logits + (size_t)row * (size_t)V; /* [V] f32 */
    const lg_sample_row p = rows[row];
    const bool greedy = !(p.temperature > 0.0f);
    /* histogram sweeps are warp-uniform: lane `lane` of warp w reads b + lane (row_sweep) */

    /* ---- pass A ---- */
    scan_a a = {-INFINITY, INT_MAX, INT_MAX, 0, -INFINITY};
    row_sweep<U>(x, rp, [&](int i, float v) {
        if (v > a.bv) {
            a.bv = v;
            a.bi = i;
        }
        if (v == INFINITY) {
            a.inf_id = min(a.inf_id, i);
        } else if (v > -INFINITY) {
            a.nfin++;
            a.lmax = fmaxf(a.lmax, v);
        }
    });
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = combine(a, shfl_a(a, o));
    if (lane == 0) sm.red[w] = a;
    __syncthreads();
    if (w == 0) { /* the block's, then (after the exchange) the row's */
        a = sm.red[lane];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = combine(a, shfl_a(a, o));
        if (lane == 0) sm.x_a[rp.ph] = a;
    }
    rp.sync();
    if (w == 0) {
        a = lane < C ? *rp.at(&sm.x_a[rp.ph], lane) : scan_a{-INFINITY, INT_MAX, INT_MAX, 0, -INFINITY};
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = combine(a, shfl_a(a, o));
        if (lane == 0) sm.red[0] = a;
    }
    __syncthreads();
    rp.ph ^= 1;
    a = sm.red[0];
    const int argmax = a.bi == INT_MAX ? 0 : a.bi; /* lg_argmax */
    if (greedy || a.inf_id != INT_MAX || a.nfin == 0) {
        if (tid == 0 && rp.rank == 0) out_ids[row] = greedy ? argmax : a.inf_id != INT_MAX ? a.inf_id : argmax;
        rp.sync(); /* no block leaves while another may read its shared memory */
        return;
    }
    const float lmax = a.lmax;
    const float inv_t = __fdiv_rn(1.0f, p.temperature);

    /* ---- top-k: the k-th largest logit ----
     * Only tokens of W > 0 are counted: {logit : W > 0} is an up-set (W = 0
     * below one cutoff: d = logit - lmax and d * inv_t round monotonically,
     * and lg_sample_weight is 0 exactly below x ~ -21.49, checked over every
     * float by tests/unit/engine/backend/test_sampling.c), so when more than k tokens
     * weigh, the k largest logits are among them and the walk over them finds
     * the same k-th logit; when k or fewer weigh, the cut removes only tokens
     * of W = 0, which no later filter counts and no draw can pick, so it is
     * skipped. Most of a real vocabulary weighs 0 at T <= 1, so most
     * warps skip the histogram. */
    bool has_k = false;
    float thr_k = -INFINITY;
    if (p.top_k > 0 && p.top_k < a.nfin) {
        uint32_t prefix = 0, mask = 0;
        u64 above = 0;
        for (int level = 0; level < 4; level++) {
            const int shift = 24 - 8 * level;
            hist_clear(h);
            __syncthreads();
            u64 n_pos = 0;
            row_sweep<U>(x, rp, [&](int, float v) {
                uint32_t key = fkey(v);
                const bool on = is_fin(v) && (key & mask) == prefix && lg_sample_weight(v, lmax, inv_t) > 0;
                n_pos += on;
                hist_add(h, on, (key >> shift) & 255, 1);
            });
            hist_merge(sm, rp, h, n_pos);
            if (level == 0) {
                if (sm.b_extra <= (u64)p.top_k)
                    break; /* block-uniform: the cut would remove only tokens of W = 0 */
                has_k = true;
            }
            if (w == 0) {
                int d = radix_walk(sm.hist, above, (double)p.top_k, &above);
                if (lane == 0) {
                    sm.b_prefix = prefix | ((uint32_t)d << shift);
                    sm.b_above = above;
                }
            }
            __syncthreads();
            prefix = sm.b_prefix;
            above = sm.b_above;
            mask |= 0xffu << shift;
        }
        if (has_k)
            thr_k = key_float(prefix);
    }

    /* ---- top-p: the prefix ends at (thr_p, id_p) ---- */
    bool has_p = false;
    float thr_p = 0.0f;
    int id_p = 0;
    if (p.top_p < 1.0f) {
        uint32_t prefix = 0, mask = 0;
        u64 above = 0;
        double T = 0.0;
        for (int level = 0; level < 4; level++) {
            const int shift = 24 - 8 * level;
            hist_clear(h);
            __syncthreads();
            /* only tokens of W > 0 enter: a digit of no mass is never where
             * the walk crosses T > 0, and a tie group's tokens share one W;
             * so rows whose tail has W = 0 (most of a real vocabulary) skip
             * the histogram for it. Level 0 counts the survivors aside. */
            u64 n_surv = 0;
            row_sweep<U>(x, rp, [&](int, float v) {
                uint32_t key = fkey(v);
                const bool surv = is_fin(v) && (!has_k || v >= thr_k);
                uint32_t wt = 0;
                if (surv && (key & mask) == prefix) wt = lg_sample_weight(v, lmax, inv_t);
                n_surv += level == 0 && surv;
                hist_add(h, wt > 0, (key >> shift) & 255, wt);
            });
            hist_merge(sm, rp, h, n_surv);
            if (level == 0) { /* Z and the survivor count: decide whether top-p runs */
                if (w == 0) {
                    u64 z = 0;
                    for (int j = lane; j < 256; j += 32) z += sm.hist[j];
                    z = warp_sum_u64(z);
                    if (lane == 0) sm.b_total = z;
                }
                __syncthreads();
                if (sm.b_extra <= 1)
                    break; /* one survivor: nothing to cut (block-uniform) */
                has_p = true;
                if (!(p.top_p > 0.0f)) { /* target 0: the first token of (logit desc, id asc) */
                    thr_p = lmax;
                    id_p = argmax;
                    break;
                }
                T = __dmul_rn((double)p.top_p, (double)sm.b_total);
            }
            if (w == 0) {
                int d = radix_walk(sm.hist, above, T, &above);
                if (lane == 0) {
                    sm.b_prefix = prefix | ((uint32_t)d << shift);
                    sm.b_above = above;
                    if (level == 3) { /* r: how many of the tie group (by id) the prefix takes */
                        float vs = key_float(sm.b_prefix);
                        u64 W = lg_sample_weight(vs, lmax, inv_t), c = sm.cnt[d];
                        u64 r = 1;
                        if (W > 0) {
                            double rr = ceil((T - (double)above) / (double)W);
                            r = rr < 1.0 ? 1 : rr > (double)c ? c : (u64)rr;
                            while (r > 1 && (double)(above + (r - 1) * W) >= T) r--;
                            while (r < c && (double)(above + r * W) < T) r++;
                        }
                        sm.b_idx = r < c ? (int)r : -1; /* -1: the whole group */
                    }
                }
            }
            __syncthreads();
            prefix = sm.b_prefix;
            above = sm.b_above;
            mask |= 0xffu << shift;
            if (level == 3) {
                thr_p = key_float(prefix);
                int r = sm.b_idx;
                __syncthreads();
                if (r < 0) {
                    id_p = INT_MAX;
                } else { /* the r-th id (in id order) whose logit == thr_p; every block needs it */
                    equal_to eq = {x, thr_p};
                    seg_sums(sm, rp, eq);
                    const int mine = seg_find(sm, rp, eq, (double)(r - 1));
                    if (tid == 0) sm.x_id[rp.ph] = mine >= 0 ? mine : INT_MAX;
                    rp.sync();
                    if (tid == 0) {
                        int m = INT_MAX;
                        for (int j = 0; j < C; j++) m = min(m, *rp.at(&sm.x_id[rp.ph], j));
                        sm.b_idx = m;
                    }
                    __syncthreads();
                    id_p = sm.b_idx == INT_MAX ? -1 : sm.b_idx;
                    rp.ph ^= 1;
                }
            }
        }
    }

    /* ---- min-p, then the id-order draw ---- */
    kept_w f;
    f.x = x;
    f.lmax = lmax;
    f.inv_t = inv_t;
    f.thr_k = thr_k;
    f.thr_p = thr_p;
    f.id_p = id_p;
    f.has_k = has_k;
    f.has_p = has_p;
    f.has_m = p.min_p > 0.0f;
    f.min_w = lg_sample_minp_w(p.min_p);
    u64 z = seg_sums(sm, rp, f);
    double target = __dmul_rn(lg_sample_clamp_u((double)p.u), (double)z);
    int id = seg_find(sm, rp, f, target);
    /* the block holding the id writes it; id < 0 unreachable (Z' >= 2^31, u < 1): rank 0 writes argmax */
    if (tid == 0 && (sm.b_rank == rp.rank || (sm.b_rank < 0 && rp.rank == 0)))
        out_ids[row] = id >= 0 ? id : argmax;
    rp.sync(); /* no block leaves while another may read its shared memory */
}

/* Penalties (lg_sample_row): block r walks row r's (token, count) pairs, a
 * thread per pair; the tokens of a row are distinct, so no two threads
 * touch one logit, and each applies its token's subtractions in the host's
 * order (explicit round-to-nearest subtractions: nothing to contract). */
__global__ void __launch_bounds__(256)
penalize_kernel(float *logits, int V, const lg_sample_row *rows, const int32_t *pen)
{
    const lg_sample_row p = rows[blockIdx.x];
    float *x = logits + (size_t)blockIdx.x * (size_t)V;
    for (int j = threadIdx.x; j < p.pen_n; j += blockDim.x) {
        const int t = pen[2 * (p.pen_off + j)], c = pen[2 * (p.pen_off + j) + 1];
        if (t < 0 || t >= V || c < 1)
            continue; /* the host builds valid pairs; never write outside the row */
        float v = __fsub_rn(x[t], p.frequency);
        v = __fsub_rn(v, p.presence);
        for (int k = 1; k < c; k++) v = __fsub_rn(v, p.frequency);
        x[t] = v;
    }
}

int cu_sample(lg_backend *be, int32_t *out_ids, float *logits, int n, int V, const lg_sample_row *rows,
              const int32_t *pen, lg_logprob_row *lp)
{
    cuda_ctx *c = CU_CTX(be);
    if (n < 0 || V <= 0)
        return CU_FAIL(c, "sample: expected n >= 0 and V > 0, found n=%d V=%d", n, V);
    if (n == 0)
        return 0;
    if (!out_ids || !logits || !rows)
        return CU_FAIL(c, "sample: expected device pointers, found out_ids=%p logits=%p rows=%p", (void *)out_ids,
                       (const void *)logits, (const void *)rows);
    if (pen) {
        penalize_kernel<<<n, 256, 0, c->stream>>>(logits, V, rows, pen);
        CU_LAUNCHED(c);
    }
    void (*f)(int32_t *, const float *, int, const lg_sample_row *, int, int) = sample_kernel<SWEEP_U>;
    CU_TRY(c, cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)HIST_SMEM));
    /* blocks per row: as many as keep every row's cluster in one wave (one
     * block per SM) and give each block at least SM_MIN_IDS ids, at most
     * SM_MAX_CLUSTER; LG_SAMPLE_CLUSTER=1, 2, 4 or 8 sets it (1: one block per
     * row, as before; 8 also for tiny vocabularies, where blocks get no ids:
     * the tests' way to reach that case). Hopper and later only. */
    int C = c->tune->sample_cluster;
    if (C <= 0)
        for (C = SM_MAX_CLUSTER; C > 1 && ((long)n * C > c->n_sm || V / C < SM_MIN_IDS);) C /= 2;
    C = C >= 8 ? 8 : C >= 4 ? 4 : C >= 2 ? 2 : 1;
    /* the device code the kernel runs must be the cluster one: compiled for
     * compute_90 or later (ptxVersion; binaryVersion alone is 90 as well for
     * compute_80 PTX JIT-compiled on an H100, whose code has no clusters) */
    static int code_ver; /* of the kernel (a property of the binary, the same for every backend) */
    if (!code_ver) {
        cudaFuncAttributes fa;
        code_ver = cudaFuncGetAttributes(&fa, (const void *)f) == cudaSuccess
                       ? (fa.ptxVersion < fa.binaryVersion ? fa.ptxVersion : fa.binaryVersion)
                       : -1;
        (void)cudaGetLastError(); /* a failure here only means one block per row */
    }
    if (c->cc_major < 9 || code_ver < 90)
        C = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(SM_THREADS);
    cfg.dynamicSmemBytes = HIST_SMEM;
    cfg.stream = c->stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    cfg.attrs = attr;
    /* cudaOccupancyMaxActiveClusters > 0, by device and C; 0: not asked (a device past the table: always asked) */
    static int fits_by_dev[CU_MAX_DEVICES][SM_MAX_CLUSTER + 1];
    int fits_none[SM_MAX_CLUSTER + 1] = {0};
    int *fits = cu_dev_slot(c) >= 0 ? fits_by_dev[cu_dev_slot(c)] : fits_none;
    for (; C > 1; C /= 2) {
        attr[0].val.clusterDim.x = C;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.numAttrs = 1;
        cfg.gridDim = dim3(C);
        int *fit = &fits[C];
        if (!*fit) {
            int k = 0;
            *fit = cudaOccupancyMaxActiveClusters(&k, f, &cfg) == cudaSuccess && k > 0 ? 1 : -1;
            (void)cudaGetLastError();
        }
        if (*fit > 0)
            break;
    }
    cfg.numAttrs = C > 1 ? 1 : 0;
    cfg.gridDim = dim3((unsigned)n * C);
    /* LG_SAMPLE_HIST: 1 shared-memory atomics, 0 match_any + reduce per warp (see hist_add) */
    const int atom = c->tune->sample_hist != 0 && V <= 65535 * SM_WARPS; /* u32 sums */
    CU_TRY(c, cudaLaunchKernelEx(&cfg, f, out_ids, logits, V, rows, C, atom));
    CU_LAUNCHED(c);
    return lp ? cu_logprobs(c, lp, logits, n, V, rows, out_ids) : 0;
}
