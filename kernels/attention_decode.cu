/*
 * attention_decode.cu — split-K paged attention on CUDA cores (decode path).
 *
 * Math (per token t of sequence s, query head h in kv head kh's group):
 *   n_ctx = pos[t] + 1, split into chunks of C keys; for chunk c:
 *     s_j = scale * q[t,h] . K_s[j, kh]             j in chunk c
 *     m_c = max_j s_j;  l_c = sum_j exp(s_j - m_c);  o_c = sum_j exp(s_j - m_c) V_s[j, kh]
 *   combine: M = max_c m_c, L = sum_c l_c e^{m_c - M}, out = sum_c o_c e^{m_c - M} / L
 * (in base 2: q is pre-scaled by scale * log2(e), the exponentials are exp2).
 *
 * Block = (token, kv head, up to GMAX query heads of its group) x chunk;
 * 128 threads. K/V rows are read once per block for all its query heads
 * (GQA reuse): a row is split over `lpr` lanes (16 bytes = 8 elements
 * each; lpr = power of two >= head_dim / 8), so the block is NG = 128 / lpr
 * lane groups, and group g takes the chunk's rows g, g + NG, g + 2 NG, ...
 * One pass over the chunk (FlashDecoding style online softmax): each
 * iteration a lane takes the K and the V words of U rows, the group reduces
 * the U scores with shuffles and updates its running max m, sum l and
 * accumulators o (rescaled by exp2(m_old - m_new)). No barrier in the loop;
 * the NG group states are merged through shared memory in group order.
 * Loads, two ways (template S; dec_pick has U and S per GMAX):
 *  - S = 0 (GMAX 1: MHA): the 2 U words go straight into registers, all
 *    issued before any use (64 registers: 8 blocks per SM hold the bytes
 *    in flight);
 *  - S = 3 (GMAX 2, 4, 8: q and o take 16 GMAX registers): a ring of S
 *    stages of U rows per thread in shared memory, filled with cp.async
 *    (16 bytes each, zero-filled past the chunk): S - 1 stages stay in
 *    flight while the lane computes on one. Each thread reads back only the
 *    words it copied itself, so the ring needs cp.async.wait_group, no
 *    barrier.
 * An e4m3 cache (`--kv-cache-dtype fp8`, template KT = __nv_fp8_e4m3):
 * the same plan and lanes, a lane's word is its 8 elements in 8 bytes
 * (dec_ldw: an 8-byte load; dec_cpw: an 8-byte cp.async into the ring's
 * 16-byte slot), decoded as e4m3 x k_scale / v_scale (dec_unpack), half
 * the bytes a key; no resident form (its shared-memory rows are 16-bit).
 * attention.cu sends such a cache here for every step shape.
 * The chunk's page ids are staged in shared memory first (DEC_PIDCAP pages
 * at a time), so each K/V address depends on a shared-memory read, not on
 * a global one.
 * Split-K without a second launch: with more than one chunk for its token,
 * a block writes its (m, l, o) partial to the workspace, and the last block
 * of its (token, kv head, head group) to arrive (a counter in c->sem, reset
 * to 0 by that block) merges the partials: one warp per head holds every
 * chunk's (m, l) in registers and writes the chunk weights exp2(m_c - M) to
 * shared memory (L through a fixed shuffle tree), then each output is
 * summed in chunk order (the first DEC_PRE chunks' o words are loaded
 * before the weights are known). Every sum has a fixed order: the counter
 * only picks which block does the merge, so results are bit-reproducible
 * run to run, as graph replays promise (backend.h).
 * Launch shape (chunk size, grid.y) depends only on n_tokens, the head
 * layout and max_kv_len (an upper bound: each block takes its sequence's
 * length from pos), so a graph recorded for a bucketed max_kv_len replays
 * correctly for any lengths under it; where the plan is one chunk of the split
 * form its chunk length is DEC_ANY_KV, so the launch is the same for any
 * max_kv_len and a recording replays for any lengths (cu_decode_kv_key keys
 * such steps as 0: backend.h decode_kv_key). The chunk count aims at one full wave
 * of resident blocks (occupancy x SMs), chunks of at least DEC_MIN_CHUNK
 * keys, at most DEC_MAX_CHUNKS chunks.
 * Programmatic dependent launch (cuda_common.cuh): before pdl_wait the block
 * reads only step metadata (pos, q_indptr, page table); from the page ids
 * it also issues L2 prefetches (prefetch.global.L2, a cache hint: no value
 * is read, and L2 is where the kernel before writes) of the K/V rows it
 * loads first, so their DRAM latency overlaps the kernel before (W1 shape:
 * 36.7 -> 34.1 us). q, K/V, workspace and counters are read after pdl_wait.
 * The resident form (one query head per kv head, every (token, head) block in
 * one wave: T x n_kv <= SMs, the whole context's K and V rows of a head within
 * LG_DEC_RESIDENT_KB, default 200 KB, and the shared-memory opt-in): one chunk,
 * 256 threads; before pdl_wait the block copies (cp.async) the K and V rows of
 * every key written by earlier steps (positions before its sequence's first
 * new token: backend.h) into shared memory, after it only q and this step's
 * rows, so no split merge and no K/V load sits behind the wait. The chain of
 * a batch-1 Llama-2-7B step's attention: 7.6 -> 5.0 us (docs/benchmarks.md,
 * GPU kernels, 2026-11-24). It launches with the fewest shared-memory carveout
 * that holds its block (58% at 130 KB): with the driver's choice the GEMV
 * blocks that start beside it on those SMs got less L1 and the o GEMV after
 * it lost ~1.7 us a layer (cuda_common.cuh; docs/benchmarks.md, GPU kernels,
 * 2026-11-24). LG_DEC_RESIDENT_KB=0 turns it off.
 * Works for any query length (it is also the prefill fallback for head_dim
 * % 16 != 0) and any head_dim % 8 == 0 up to 256.
 */
#include "kernels/attention_args.cuh"
#include "kernels/ops.cuh"

#define DEC_THREADS 128
#define DEC_RES_THREADS 256 /* the resident form's block */
#define DEC_PIDCAP 256     /* page ids staged at a time: a tile of (DEC_PIDCAP - 2) pages of keys */
#define DEC_MIN_CHUNK 32
#define DEC_MAX_CHUNKS 256 /* the merge keeps [GMAX][chunks] weights where the group states were, 8 per lane */
#define DEC_PRE 4          /* chunks whose o words the merge loads before their weights are known */
#define DEC_LOG2E 1.4426950408889634f

/* the queries and the paged KV (attention_args.cuh), then the plan: */
struct dec_args : cu_paged_attn {
    int hd, nh, n_hsub, lpr;
    int n_seqs, chunk, tile, max_chunks;
    float scale;    /* softmax scale * log2(e) */
    float *part_o;  /* [T * nh * max_chunks][hd] unnormalised, when split */
    float *part_ml; /* [T * nh * max_chunks][2] (m, l) */
    int *sem;       /* [T * nkv * n_hsub] arrival counters (c->sem), zero between launches */
};

__device__ __forceinline__ int seq_of_token(const int32_t *q_indptr, int n_seqs, int t)
{
    int lo = 0, hi = n_seqs - 1; /* last s with q_indptr[s] <= t */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (q_indptr[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ float dec_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); /* exp2(-inf) = +0 */
    return y;
}

/* 16 bytes global -> shared, asynchronous; n = 0: 16 zero bytes, nothing read */
__device__ __forceinline__ void dec_cp16(uint4 *dst, const char *src, int n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(n) : "memory");
}
/* 8 bytes global -> shared (an e4m3 cache's lane word), asynchronous; n = 0: 8 zero bytes, nothing read */
__device__ __forceinline__ void dec_cp8(uint4 *dst, const char *src, int n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(n) : "memory");
}
/* a lane's word of a K/V row: 8 elements, 16 bytes of a 16-bit cache, 8 of an e4m3 one (in .x, .y) */
template <typename KT> __device__ __forceinline__ void dec_cpw(uint4 *dst, const char *src, int n)
{
    if constexpr (sizeof(KT) == 1) dec_cp8(dst, src, n ? 8 : 0);
    else dec_cp16(dst, src, n);
}
template <typename KT> __device__ __forceinline__ uint4 dec_ldw(const char *p)
{
    if constexpr (sizeof(KT) == 1) {
        uint2 r;
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
        return make_uint4(r.x, r.y, 0u, 0u);
    } else {
        return ld_stream16(p);
    }
}
/* the word's 8 elements as floats: a 16-bit cache's as they are (s unused), e4m3 x s */
template <typename KT> __device__ __forceinline__ void dec_unpack(uint4 u, float (&f)[8], float s)
{
    if constexpr (sizeof(KT) == 1) {
        const __nv_fp8_e4m3 *b = (const __nv_fp8_e4m3 *)&u;
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = to_f32(b[i]) * s;
    } else {
        unpack8<KT>(u, f);
    }
}
__device__ __forceinline__ void dec_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void dec_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* page ids of keys [j0, j1) of the sequence into pid_s[0 ..] */
template <int NT> __device__ __forceinline__ void dec_stage(int *pid_s, const int32_t *pages, int j0, int j1, int pt)
{
    const int pg0 = j0 / pt, n_pg = (j1 - 1) / pt - pg0 + 1;
    for (int i = threadIdx.x; i < n_pg; i += NT) pid_s[i] = pages[pg0 + i];
}

/* U rows of one lane group: scores (reduced over the group's lpr lanes; every lane gets the sum), then the
 * online softmax update. Row u is valid when u * ng < vlim; invalid rows get p = 0 (their words are zero). */
template <typename KT, int GMAX, int U>
__device__ __forceinline__ void dec_rows(const uint4 (&ku)[U], const uint4 (&vu)[U], int vlim, int ng, int lpr,
                                         const float (&q)[GMAX][8], float (&m)[GMAX], float (&l)[GMAX],
                                         float (&acc)[GMAX][8], float ks, float vs)
{
    float sc[GMAX][U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        float kf[8];
        dec_unpack<KT>(ku[u], kf, ks);
#pragma unroll
        for (int r = 0; r < GMAX; r++) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) d = fmaf(q[r][e], kf[e], d);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                if (o < lpr)
                    d += __shfl_xor_sync(0xffffffffu, d, o);
            sc[r][u] = u * ng < vlim ? d : -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < GMAX; r++) {
        float mx = m[r];
#pragma unroll
        for (int u = 0; u < U; u++) mx = fmaxf(mx, sc[r][u]);
        const float mref = mx == -INFINITY ? 0.0f : mx; /* no row yet: everything stays 0 */
        const float alpha = dec_exp2(m[r] - mref);
        m[r] = mx;
        l[r] *= alpha;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[r][e] *= alpha;
#pragma unroll
        for (int u = 0; u < U; u++) {
            sc[r][u] = dec_exp2(sc[r][u] - mref);
            l[r] += sc[r][u];
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        float vf[8];
        dec_unpack<KT>(vu[u], vf, vs);
#pragma unroll
        for (int r = 0; r < GMAX; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r][e] = fmaf(sc[r][u], vf[e], acc[r][e]);
    }
}

/* One pass over rows [0, n) of a tile in register loads, U rows per lane group at a time (n is uniform per block:
 * the shuffles take whole warps); fetch(jr, k, v) loads this lane's K and V words of row jr. */
template <typename KT, int GMAX, int U, typename F>
__device__ __forceinline__ void dec_pass(int n, int g, bool active, int ng, int lpr, F fetch, const float (&q)[GMAX][8],
                                         float (&m)[GMAX], float (&l)[GMAX], float (&acc)[GMAX][8], float ks, float vs)
{
    for (int rb = 0; rb < n; rb += ng * U) {
        uint4 ku[U], vu[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int jr = rb + u * ng + g;
            ku[u] = vu[u] = make_uint4(0, 0, 0, 0);
            if (active && jr < n)
                fetch(jr, ku[u], vu[u]);
        }
        dec_rows<KT, GMAX, U>(ku, vu, n - rb - g, ng, lpr, q, m, l, acc, ks, vs);
    }
}

/* shared memory: [region0: ring | resident rows | group accumulators | merge weights][ml: NG][GMAX][2]
 * [flag: 4 ints][pid_s]; res_keys: the resident form's keys (16-bit K and V rows of one kv head) */
__host__ __device__ static inline size_t dec_region0(int ng, int gmax, int hd, int U, int S, int res_keys)
{
    const size_t acc = (size_t)ng * gmax * hd * sizeof(float), ring = (size_t)S * U * 2 * DEC_THREADS * 16;
    const size_t rows = (size_t)res_keys * 2 * hd * 2, r = acc > ring ? acc : ring;
    return r > rows ? r : rows;
}

/* A launch's whole dynamic shared memory: region0, then ml, flag and pid_s (the layout above). */
static inline size_t dec_smem(int ng, int gmax, int hd, int U, int S, int res_keys)
{
    return dec_region0(ng, gmax, hd, U, S, res_keys) + (2 * (size_t)ng * gmax + 4 + DEC_PIDCAP) * 4;
}

/* The resident form: K and V rows [j0, j1) of kv head kh (the sequence's page ids from key 0 on in pid_s)
 * into res[j][K, V][hd / 8], 16 bytes per cp.async, spread over the block's threads. */
template <typename T, int NT>
__device__ __forceinline__ void dec_res_load(uint4 *res, const dec_args &a, const int *pid_s, int kh, int j0, int j1)
{
    const int W8 = a.hd >> 3, pt = a.page_tokens;
    const size_t row_bytes = (size_t)a.nkv * a.hd * sizeof(T);
    const char *kb = a.kv_base + a.k_off + (size_t)kh * a.hd * sizeof(T);
    const int64_t dv = (int64_t)a.v_off - (int64_t)a.k_off;
    for (int i = threadIdx.x, n = (j1 - j0) * 2 * W8; i < n; i += NT) {
        const int jj = i / (2 * W8), r = i - jj * 2 * W8, j = j0 + jj, kv = r >= W8;
        const char *src = kb + (size_t)pid_s[j / pt] * a.page_bytes + (size_t)(j % pt) * row_bytes +
                          (size_t)(r - kv * W8) * 16 + (kv ? dv : 0);
        dec_cp16(res + (size_t)j * 2 * W8 + r, src, 16);
    }
}

/* T: q and out; KT: the cache (T, or __nv_fp8_e4m3: 8-byte lane words, elements x k_scale / v_scale) */
template <typename T, typename KT, int GMAX, int U, int S, int MINB, bool RES, int NT>
__global__ void __launch_bounds__(NT, MINB) attn_decode_kernel(dec_args a)
{
    static_assert(!RES || S == 0, "the resident form reads its rows from shared memory into registers");
    static_assert(!RES || sizeof(KT) == sizeof(T), "the resident form holds 16-bit rows");
    static_assert(RES || NT == DEC_THREADS, "the split form's ring is laid out for DEC_THREADS");
    extern __shared__ uint4 dec_sm[];
    const int hd = a.hd, lpr = a.lpr, NG = NT / lpr;
    const size_t r0 = dec_region0(NG, GMAX, hd, U, S, RES ? a.chunk : 0);
    uint4 *ring = dec_sm;                               /* [S][U][2][DEC_THREADS] (S > 0) */
    uint4 *res = dec_sm;                                /* RES: [keys][K, V][hd / 8] */
    float *o_s = (float *)dec_sm;                       /* [NG][GMAX][hd] group accumulators, after the loop */
    float *ml_s = (float *)((char *)dec_sm + r0);       /* [NG][GMAX][2] group (m, l) */
    int *flag_s = (int *)(ml_s + 2 * NG * GMAX);
    int *pid_s = flag_s + 4;                            /* page ids of the current tile */

    pdl_trigger();
    const int hs = blockIdx.x % a.n_hsub, kh = (blockIdx.x / a.n_hsub) % a.nkv, t = blockIdx.x / (a.n_hsub * a.nkv);
    const int C = a.chunk, ch = blockIdx.y, n_ctx = a.pos[t] + 1, j0 = ch * C;
    if (j0 >= n_ctx)
        return;
    const int j1 = min(j0 + C, n_ctx), n_ch = min((n_ctx + C - 1) / C, (int)gridDim.y);
    const int h0 = kh * a.group + hs * GMAX, gc = min(GMAX, a.group - hs * GMAX);
    const int s = seq_of_token(a.q_indptr, a.n_seqs, t);
    const int32_t *pages = a.page_ids + a.page_indptr[s];
    const int pt = a.page_tokens;
    int tj0 = j0, tj1 = min(j0 + a.tile, j1);
    dec_stage<NT>(pid_s, pages, tj0, tj1, pt);

    const int sub = threadIdx.x & (lpr - 1), g = threadIdx.x / lpr;
    const bool active = sub < (hd >> 3);
    const size_t row_bytes = (size_t)a.nkv * hd * sizeof(KT);
    /* this lane's K word in slot 0 of page 0; V is dv bytes further */
    const char *kb = a.kv_base + a.k_off + (size_t)kh * hd * sizeof(KT) + (size_t)sub * 8 * sizeof(KT);
    const float ks = a.k_scale, vs = a.v_scale;
    const int64_t dv = (int64_t)a.v_off - (int64_t)a.k_off;
    /* K word of this lane in row jr of the tile that starts at key tj0 (page pg0) */
#define DEC_ROW(jr) \
    (kb + (size_t)pid_s[(tj0 + (jr)) / pt - pg0] * a.page_bytes + (size_t)((tj0 + (jr)) % pt) * row_bytes)
    __syncthreads(); /* pid_s */
    int n_old = 0; /* RES: keys written by earlier steps, loaded before pdl_wait */
    if constexpr (RES) {
        /* the sequence's new tokens of this step sit at its last positions (backend.h, lg_step_meta); the rows
         * before its first one were written by earlier steps, which every kernel of this step follows in full
         * (the step's metadata upload is a stream copy, which programmatic launch does not relax) */
        n_old = min(a.pos[a.q_indptr[s]], n_ctx);
        dec_res_load<T, NT>(res, a, pid_s, kh, 0, n_old);
        dec_cp_commit();
    } else if (active && (sub & 7) == 0) { /* one prefetch per 128 bytes of the rows loaded first */
        const int pg0 = tj0 / pt;
        constexpr int PF = S > 2 ? (S - 1) * U : U;
#pragma unroll
        for (int u = 0; u < PF; u++) {
            const int jr = u * NG + g;
            if (jr < tj1 - tj0) {
                const char *row = DEC_ROW(jr);
                asm volatile("prefetch.global.L2 [%0];" ::"l"(row));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(row + dv));
            }
        }
    }
    pdl_wait(); /* everything above is step metadata; q and this step's K/V rows come from the kernels before */

    float q[GMAX][8];
    {
        const T *qrow = (const T *)a.q + (int64_t)t * a.ldq + (int64_t)h0 * hd + sub * 8;
#pragma unroll
        for (int r = 0; r < GMAX; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) q[r][e] = active && r < gc ? to_f32(qrow[r * hd + e]) * a.scale : 0.0f;
    }
    float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
    for (int r = 0; r < GMAX; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[r][e] = 0.0f;
    }

    if constexpr (RES) {
        dec_res_load<T, NT>(res, a, pid_s, kh, n_old, n_ctx); /* this step's rows, from the kernels before */
        dec_cp_commit();
        dec_cp_wait<0>();
        __syncthreads();
        const int W8 = hd >> 3;
        dec_pass<KT, GMAX, U>(
            n_ctx, g, active, NG, lpr,
            [&](int jr, uint4 &k, uint4 &v) {
                k = res[(size_t)jr * 2 * W8 + sub];
                v = res[(size_t)jr * 2 * W8 + W8 + sub];
            },
            q, m, l, acc, ks, vs);
    }
    for (; !RES;) { /* the split form's tiles (compiled out of the resident form) */
        const int tlen = tj1 - tj0, pg0 = tj0 / pt;
        if constexpr (S == 0) {
            dec_pass<KT, GMAX, U>(
                tlen, g, active, NG, lpr,
                [&](int jr, uint4 &k, uint4 &v) {
                    const char *row = DEC_ROW(jr);
                    k = dec_ldw<KT>(row); /* K/V words are read once: past L1 */
                    v = dec_ldw<KT>(row + dv);
                },
                q, m, l, acc, ks, vs);
        } else {
            const int n_it = (tlen + NG * U - 1) / (NG * U);
            /* stage `it` of the ring: U rows per thread, zeros past the tile (and in idle lanes) */
            auto issue = [&](int it) {
                if (it < n_it) {
                    uint4 *st = ring + (size_t)(it % S) * U * 2 * DEC_THREADS + threadIdx.x;
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int jr = it * NG * U + u * NG + g;
                        const bool ok = active && jr < tlen;
                        const char *row = ok ? DEC_ROW(jr) : kb;
                        dec_cpw<KT>(st + (2 * u) * DEC_THREADS, row, ok ? 16 : 0);
                        dec_cpw<KT>(st + (2 * u + 1) * DEC_THREADS, row + (ok ? dv : 0), ok ? 16 : 0);
                    }
                }
                dec_cp_commit(); /* empty past the end: the group count stays uniform */
            };
#pragma unroll
            for (int it = 0; it < S - 1; it++) issue(it);
            for (int it = 0; it < n_it; it++) {
                issue(it + S - 1); /* into the slot read in iteration it - 1 by this same thread */
                dec_cp_wait<S - 1>();
                const uint4 *st = ring + (size_t)(it % S) * U * 2 * DEC_THREADS + threadIdx.x;
                uint4 ku[U], vu[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    ku[u] = st[(2 * u) * DEC_THREADS];
                    vu[u] = st[(2 * u + 1) * DEC_THREADS];
                }
                dec_rows<KT, GMAX, U>(ku, vu, tlen - it * NG * U - g, NG, lpr, q, m, l, acc, ks, vs);
            }
            dec_cp_wait<0>();
        }
        if (tj1 >= j1)
            break;
        __syncthreads(); /* pid_s read by everyone */
        tj0 = tj1;
        tj1 = min(tj0 + a.tile, j1);
        dec_stage<NT>(pid_s, pages, tj0, tj1, pt);
        __syncthreads();
    }
#undef DEC_ROW

    /* merge the NG group states in group order */
    if (S > 0 || RES)
        __syncthreads(); /* the accumulators overwrite the ring or the resident rows */
    if (active) {
#pragma unroll
        for (int r = 0; r < GMAX; r++) {
            float4 *dst = (float4 *)(o_s + (g * GMAX + r) * hd + sub * 8);
            dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
            if (sub == 0) {
                ml_s[2 * (g * GMAX + r)] = m[r];
                ml_s[2 * (g * GMAX + r) + 1] = l[r];
            }
        }
    }
    __syncthreads();
    const bool split = n_ch > 1;
    T *obase = (T *)a.out + (int64_t)t * a.ldo + (int64_t)h0 * hd;
    for (int i = threadIdx.x; i < gc * hd; i += NT) {
        const int r = i / hd, d = i - r * hd;
        float M = -INFINITY; /* finite: group 0 has the chunk's first row */
        for (int gg = 0; gg < NG; gg++) M = fmaxf(M, ml_s[2 * (gg * GMAX + r)]);
        float L = 0.0f, O = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float w = dec_exp2(ml_s[2 * (gg * GMAX + r)] - M);
            L = fmaf(ml_s[2 * (gg * GMAX + r) + 1], w, L);
            O = fmaf(o_s[(gg * GMAX + r) * hd + d], w, O);
        }
        if (!split) {
            obase[i] = from_f32<T>(O / L);
        } else {
            const size_t pi = ((size_t)t * a.nh + h0 + r) * a.max_chunks + ch;
            __stcg(a.part_o + pi * hd + d, O);
            if (d == 0)
                __stcg((float2 *)a.part_ml + pi, make_float2(M, L));
        }
    }
    if (!split)
        return;

    /* the last block of this (token, kv head, head group) to arrive merges the partials */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int last = atomicAdd(a.sem + blockIdx.x, 1) == n_ch - 1;
        if (last)
            atomicExch(a.sem + blockIdx.x, 0); /* every block of the group has arrived */
        *flag_s = last;
    }
    __syncthreads();
    if (!*flag_s)
        return;
    __threadfence();
    /* the o words of this thread's first output for the first DEC_PRE chunks: loaded before the weights */
    const int hd4 = hd >> 2, n_out = gc * hd4;
    float4 pre[DEC_PRE];
    if (threadIdx.x < n_out) {
        const int r = threadIdx.x / hd4, d4 = threadIdx.x - r * hd4;
        const float4 *po = (const float4 *)(a.part_o + ((size_t)t * a.nh + h0 + r) * a.max_chunks * hd) + d4;
#pragma unroll
        for (int k = 0; k < DEC_PRE; k++) pre[k] = k < n_ch ? __ldcg(po + (size_t)k * hd4) : make_float4(0, 0, 0, 0);
    }
    /* chunk weights exp2(m_c - M) and L per head, one warp per head, the (m, l) pairs in registers */
    float *w_s = o_s;  /* [gc][n_ch] (n_ch <= DEC_MAX_CHUNKS) */
    float *L_s = ml_s; /* [gc] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < gc; r += NT / 32) {
        const float2 *ml = (const float2 *)a.part_ml + ((size_t)t * a.nh + h0 + r) * a.max_chunks;
        float2 v[DEC_MAX_CHUNKS / 32];
        float M = -INFINITY;
#pragma unroll
        for (int k = 0; k < DEC_MAX_CHUNKS / 32; k++) {
            const int c = lane + 32 * k;
            v[k] = c < n_ch ? __ldcg(ml + c) : make_float2(-INFINITY, 0.0f);
            M = fmaxf(M, v[k].x);
        }
        M = warp_max(M);
        float L = 0.0f;
#pragma unroll
        for (int k = 0; k < DEC_MAX_CHUNKS / 32; k++) {
            const int c = lane + 32 * k;
            const float w = dec_exp2(v[k].x - M); /* 0 past n_ch */
            if (c < n_ch)
                w_s[r * n_ch + c] = w;
            L = fmaf(v[k].y, w, L);
        }
        L = warp_sum(L);
        if (lane == 0)
            L_s[r] = L;
    }
    __syncthreads();
    /* outputs, chunk order */
    for (int i = threadIdx.x; i < n_out; i += NT) {
        const int r = i / hd4, d4 = i - r * hd4;
        const float4 *po = (const float4 *)(a.part_o + ((size_t)t * a.nh + h0 + r) * a.max_chunks * hd) + d4;
        const float *w = w_s + r * n_ch;
        float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int c0 = 0;
        if (i == threadIdx.x) {
#pragma unroll
            for (int k = 0; k < DEC_PRE; k++)
                if (k < n_ch) {
                    const float wc = w[k];
                    O.x = fmaf(pre[k].x, wc, O.x);
                    O.y = fmaf(pre[k].y, wc, O.y);
                    O.z = fmaf(pre[k].z, wc, O.z);
                    O.w = fmaf(pre[k].w, wc, O.w);
                }
            c0 = DEC_PRE;
        }
#pragma unroll 16
        for (int c = c0; c < n_ch; c++) {
            const float4 v = __ldcg(po + (size_t)c * hd4);
            const float wc = w[c];
            O.x = fmaf(v.x, wc, O.x);
            O.y = fmaf(v.y, wc, O.y);
            O.z = fmaf(v.z, wc, O.z);
            O.w = fmaf(v.w, wc, O.w);
        }
        const float L = L_s[r];
        T *o = obase + r * hd + 4 * d4;
        o[0] = from_f32<T>(O.x / L);
        o[1] = from_f32<T>(O.y / L);
        o[2] = from_f32<T>(O.z / L);
        o[3] = from_f32<T>(O.w / L);
    }
}

typedef void (*dec_fn)(dec_args);

/* the kernel for GMAX query heads per block: U rows per iteration, S ring stages (0: registers), a register
 * budget for MINB blocks per SM (GMAX 1: 64 registers) */
struct dec_cfg {
    dec_fn f;
    int U, S, nt;
};
template <typename T, typename KT, int GMAX, int U, int S, int MINB, bool RES, int NT = DEC_THREADS>
static dec_cfg dec_make()
{
    return {attn_decode_kernel<T, KT, GMAX, U, S, MINB, RES, NT>, U, S, NT};
}
/* res: the resident form (one query head per block: whole context in shared memory, one chunk, 256 threads of
 * 64 registers); else the split form */
template <typename T, typename KT> static dec_cfg dec_pick(int gmax, bool res)
{
    if constexpr (sizeof(KT) == sizeof(T)) {
        if (res)
            return dec_make<T, KT, 1, 4, 0, 4, true, DEC_RES_THREADS>();
    }
    switch (gmax) {
    case 1: return dec_make<T, KT, 1, 4, 0, 8, false>();
    case 2: return dec_make<T, KT, 2, 4, 3, 4, false>();
    case 4: return dec_make<T, KT, 4, 4, 3, 4, false>();
    default: return dec_make<T, KT, 8, 2, 3, 2, false>();
    }
}
/* the kernels of queries qdt (f16 / bf16) over a cache of kdt (qdt, or f8e4m3) */
static dec_cfg dec_pick_dt(lg_dtype qdt, lg_dtype kdt, int gmax, bool res)
{
    if (kdt == LG_F8E4M3)
        return qdt == LG_F16 ? dec_pick<__half, __nv_fp8_e4m3>(gmax, false)
                             : dec_pick<__nv_bfloat16, __nv_fp8_e4m3>(gmax, false);
    return qdt == LG_F16 ? dec_pick<__half, __half>(gmax, res) : dec_pick<__nv_bfloat16, __nv_bfloat16>(gmax, res);
}

/* Resident blocks per SM of (kernel, dynamic shared memory), cached per device (the opt-in is the current
 * device's: cuda_common.cuh, CU_MAX_DEVICES); a kernel not seen yet first gets the shared-memory opt-in. -1:
 * the opt-in failed. */
static int dec_resident(cuda_ctx *c, dec_fn f, int nt, size_t smem)
{
    static struct {
        dec_fn f;
        size_t smem;
        int n;
    } cache[CU_MAX_DEVICES][64];
    static int n_cache[CU_MAX_DEVICES];
    const int d = cu_dev_slot(c); /* -1: a device past the table, not cached */
    if (d >= 0)
        for (int i = 0; i < n_cache[d]; i++)
            if (cache[d][i].f == f && cache[d][i].smem == smem)
                return cache[d][i].n;
    if (cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->max_smem_optin) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, nt, smem) != cudaSuccess || n < 1) {
        cudaGetLastError();
        n = 1;
    }
    if (d >= 0 && n_cache[d] < 64) { /* else: asked again next time (only many head layouts get here) */
        cache[d][n_cache[d]].f = f, cache[d][n_cache[d]].smem = smem, cache[d][n_cache[d]].n = n;
        n_cache[d]++;
    }
    return n;
}

static long g_res_launches; /* launches of the resident form (tests) */
extern "C" long lg_cuda_dec_resident_launches(void) { return g_res_launches; }

/* A launch's plan: the kernel, its form, shared memory, grid and chunking; from the head layout, the row
 * count and max_kv (an upper bound of every length) only. One chunk of the split form covers any length (its
 * chunk length is then DEC_ANY_KV, not max_kv), so that plan's launch does not depend on max_kv at all. */
#define DEC_ANY_KV (1 << 30)
struct dec_plan {
    dec_cfg k;
    bool res;
    size_t smem;
    int lpr, n_hsub, max_chunks;
    int64_t base_blocks, C, tile;
};
static int dec_make_plan(cuda_ctx *c, int T_, int n_heads, const lg_kv_view &kv, lg_dtype qdt, int max_kv_len,
                         dec_plan *p)
{
    const int hd = kv.head_dim, nkv = kv.n_kv_heads, group = n_heads / nkv;
    const int gmax = group >= 8 ? 8 : group >= 4 ? 4 : group >= 2 ? 2 : 1;
    p->n_hsub = (group + gmax - 1) / gmax;
    const int max_kv = max_kv_len > 0 ? max_kv_len : 1;
    p->lpr = 1;
    while (p->lpr < hd / 8) p->lpr <<= 1;
    p->base_blocks = (int64_t)T_ * nkv * p->n_hsub;
    const int64_t tile = (int64_t)(DEC_PIDCAP - 2) * kv.page_tokens; /* keys whose page ids fit pid_s */
    /* the resident form (one query head per block): every block in one wave, its whole context in shared
     * memory; its rows (K and V) within LG_DEC_RESIDENT_KB (default 200; 0: off) and the opt-in limit */
    const int res_kb = c->tune->dec_resident_kb;
    const size_t res_smem = dec_smem(DEC_RES_THREADS / p->lpr, 1, hd, 4, 0, max_kv);
    p->res = res_kb > 0 && gmax == 1 && kv.dtype != LG_F8E4M3 && p->base_blocks <= c->n_sm && max_kv <= tile &&
             (size_t)max_kv * 2 * hd * 2 <= (size_t)res_kb << 10 && res_smem <= c->max_smem_optin;
    p->k = dec_pick_dt(qdt, kv.dtype, gmax, p->res);
    p->smem = p->res ? res_smem : dec_smem(DEC_THREADS / p->lpr, gmax, hd, p->k.U, p->k.S, 0);
    if (p->smem > c->max_smem_optin)
        return CU_FAIL(c, "attention decode: %zu bytes of shared memory needed, %zu available", p->smem,
                       c->max_smem_optin);
    const int per_sm = dec_resident(c, p->k.f, p->k.nt, p->smem);
    if (per_sm < 0)
        return CU_FAIL(c, "attention decode: cannot set the kernel's shared memory opt-in");
    /* chunks: as many as one full wave of resident blocks holds, each at least DEC_MIN_CHUNK keys;
     * one chunk when the counters cannot cover the blocks */
    const int64_t resident = (int64_t)per_sm * c->n_sm;
    int64_t nc = p->res || p->base_blocks >= resident || p->base_blocks > CU_SEM_COUNT ? 1 : resident / p->base_blocks;
    if (nc > DEC_MAX_CHUNKS)
        nc = DEC_MAX_CHUNKS;
    int64_t C = (max_kv + nc - 1) / nc;
    C = (C + DEC_MIN_CHUNK - 1) / DEC_MIN_CHUNK * DEC_MIN_CHUNK;
    if (C >= max_kv)
        C = max_kv;
    p->max_chunks = (int)((max_kv + C - 1) / C);
    if (p->base_blocks > INT32_MAX || p->max_chunks > DEC_MAX_CHUNKS)
        return CU_FAIL(c, "attention decode: grid %lld x %d too large", (long long)p->base_blocks, p->max_chunks);
    /* one chunk of the split form: the block's keys are 0 .. its length, whatever max_kv was */
    p->C = p->max_chunks == 1 && !p->res ? DEC_ANY_KV : C;
    p->tile = tile < p->C ? tile : p->C;
    return 0;
}

/* backend.h decode_kv_key: 0 where the plan is one chunk of the split form (any max_kv_len gives the same
 * launch), else max_kv_len. */
extern "C" int cu_decode_kv_key(lg_backend *be, int n_tokens, int n_heads, const lg_kv_view *kv, int max_kv_len)
{
    dec_plan p; /* the queries are in the act dtype (an e4m3 cache's too) */
    const lg_dtype qdt = kv->dtype == LG_F8E4M3 ? be->act_dtype : kv->dtype;
    if (n_heads <= 0 || kv->n_kv_heads <= 0 || n_heads % kv->n_kv_heads || !cu_is_half(qdt) ||
        dec_make_plan(CU_CTX(be), n_tokens, n_heads, *kv, qdt, max_kv_len, &p) != 0)
        return max_kv_len;
    return p.C == DEC_ANY_KV ? 0 : max_kv_len;
}

int cu_attention_decode(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                        int n_heads, float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const int hd = kv.head_dim, T_ = m->n_tokens;
    if (kv.dtype != q.dtype && kv.dtype != LG_F8E4M3)
        return CU_FAIL(c, "attention decode: a %s KV cache with %s queries", lg_dtype_name(kv.dtype),
                       lg_dtype_name(q.dtype));
    dec_plan p;
    if (dec_make_plan(c, T_, n_heads, kv, q.dtype, m->max_kv_len, &p) != 0)
        return -1;
    const dec_cfg &k = p.k;
    const bool res = p.res;
    const size_t smem = p.smem;
    const int lpr = p.lpr, n_hsub = p.n_hsub, max_chunks = p.max_chunks;
    const int64_t base_blocks = p.base_blocks;
    dec_args a;
    static_cast<cu_paged_attn &>(a) = cu_paged_attn_of(out, q, kv, m, n_heads);
    a.hd = hd;
    a.nh = n_heads;
    a.n_hsub = n_hsub;
    a.lpr = lpr;
    a.n_seqs = m->n_seqs;
    a.chunk = (int)p.C;
    a.tile = (int)p.tile;
    a.max_chunks = max_chunks;
    a.scale = scale * DEC_LOG2E;
    a.part_o = a.part_ml = NULL;
    a.sem = c->sem;
    if (max_chunks > 1) {
        size_t n = (size_t)T_ * n_heads * max_chunks;
        char *ws = (char *)cu_workspace(c, n * ((size_t)hd + 2) * sizeof(float));
        if (!ws)
            return CU_FAIL(c, "attention decode: cannot allocate %zu bytes of split-K workspace",
                           n * ((size_t)hd + 2) * sizeof(float));
        a.part_o = (float *)ws;
        a.part_ml = a.part_o + n * hd;
    }
    dim3 grid((unsigned)base_blocks, (unsigned)max_chunks);
    /* the resident form: the fewest carveout that holds its one block per SM (cuda_common.cuh) */
    const int cv = res ? cu_carve_for(c, smem, 1) : -1;
    (void)cu_launch_carve(c->stream, c->pdl != 0, cv, k.f, grid, dim3(k.nt), smem, a);
    g_res_launches += res;
    CU_LAUNCHED(c);
    return 0;
}

