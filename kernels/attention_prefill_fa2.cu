/*
 * attention_prefill_fa2.cu — causal paged attention for prefill chunks,
 * FlashAttention-2 on mma.sync with registers-resident S, P and O, and a
 * cp.async ring of K/V tiles. head_dim 64 or 128 (the Llama shapes);
 * attention_prefill.cu (wmma) takes the others.
 *
 * Math (same as attention.cu): for each query row (token t, head h),
 *   out = sum_{j <= pos[t]} softmax_j(scale * q . K[j]) V[j],
 * tile by tile over keys with the online softmax in base 2 (c = scale *
 * log2 e, scores s = q . K[j] unscaled): m' = max(m, c max_j s_j),
 * p_j = 2^(c s_j - m') (one FFMA and one ex2.approx.ftz),
 * l = l 2^(m - m') + sum_j p_j, O = O 2^(m - m') + P V, out = O / l.
 * O is rescaled only when a row of the warp got a new maximum (otherwise
 * every factor is 2^0 = 1: the same result).
 *
 * Block = (kv head, sequence, tile of BM = 128 query rows); rows are the
 * (token, head-in-group) pairs of the sequence's query run, so the heads of
 * a GQA group share every K/V tile. 4 warps, warp w owns the 32 rows
 * [32w, 32w + 32) as two m16 tiles (fa_cfg: NW warps x WM m16 tiles). Per
 * key tile of BN = 64 (cp.async through the page table into a ring of
 * ST = 2 buffers, zero past the last key; tile kt + 1 loads while tile kt
 * is computed):
 *   S = Q K^T   m16n8k16, A = Q fragments (ldmatrix from shared memory at
 *               each k step: registers hold O, S and P), B = K rows
 *               (ldmatrix: a K row is a column of K^T); each B fragment
 *               feeds both m16 tiles, so one ldmatrix per 4 MMAs;
 *   mask j > pos only on the tile that crosses the diagonal of the warp's
 *   rows; a tile past every row of the warp is skipped (no MMA); online
 *   softmax on the S accumulators (a row lives in the 4 lanes of a quad:
 *   two shuffles; max and sum pairwise, chains of 4 instead of 16);
 *   O += P V    A = P straight from the S accumulators (the C layout of two
 *               n8 tiles is the A layout of one k16 step), B = V through
 *               ldmatrix.trans, again one fragment for both m16 tiles.
 * Shared memory rows are unpadded, their 16-byte chunks XOR-swizzled by
 * (row & 7): ldmatrix and cp.async are conflict-free, and a k step moves a
 * lane's ldmatrix address by one XOR. HD = 128: Q 32 KB + K/V 2 x 2 x
 * 16 KB = 96 KB; 255 registers: two blocks per SM.
 * Page of key j: a shift when page_tokens is a power of two, else a divide.
 * Grid (kv head, sequence, rank): rank 0 is every sequence's last query
 * tile (the most keys), so the longest tiles of all heads start first.
 * Programmatic dependent launch (cuda_common.cuh): waits before any load.
 * An e4m3 cache (`--kv-cache-dtype fp8`, template KT = __nv_fp8_e4m3): a
 * thread's 16-byte chunk of a tile row is 8 bytes of the page, loaded
 * (ld.global) and widened to T in registers, then stored to the same
 * swizzled place (no cp.async: the ring's buffer discipline is the same,
 * a plain store lands before the barrier that a cp.async waits for). e4m3
 * values are exact in f16 and bf16, so the tiles hold e4m3 itself; k_scale
 * is folded into the softmax scale and v_scale into the output's 1 / l.
 */
#include "kernels/attention_args.cuh"
#include "kernels/mma.cuh"
#include "kernels/ops.cuh"

#include <limits.h>

#include <type_traits>

#define FA_BN 64

/* the queries and the paged KV (attention_args.cuh), then: */
struct fa_args : cu_paged_attn {
    int pt_shift;     /* log2(page_tokens), or -1 if not a power of two */
    float scale_log2; /* scale * log2(e) (x k_scale: an e4m3 cache) */
    float v_mul;      /* the output's factor: v_scale (an e4m3 cache), else 1 */
};

/* 2^x, flushing subnormal results to zero; 2^-inf = 0 */
__device__ __forceinline__ float fa_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats -> one 32-bit register of two T (lo = first). */
template <typename T> __device__ __forceinline__ uint32_t fa_pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t fa_pack<__half>(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}
template <> __device__ __forceinline__ uint32_t fa_pack<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* One configuration: NW warps of WM x 16 query rows, ST K/V buffers; two blocks per SM. */
template <int HD_, int NW_, int WM_, int ST_> struct fa_cfg {
    static constexpr int HD = HD_, NW = NW_, WM = WM_, ST = ST_;
    static constexpr int BM = 16 * WM * NW, BN = FA_BN, THREADS = 32 * NW;
    static constexpr int TILE = BN * HD;                         /* elements of one K or V tile */
    static constexpr int Q = 0, K = BM * HD, V = K + ST * TILE; /* element offsets in shared memory */
    static constexpr size_t BYTES = (size_t)(V + ST * TILE) * 2;
};

/* An e4m3 cache's 8 elements at src (8 bytes) -> 8 T at dst (16 bytes of shared memory), exact; zeros when !ok. */
template <typename T> __device__ __forceinline__ void fa_ld_e4m3(T *dst, const char *src, bool ok)
{
    uint2 w = make_uint2(0u, 0u);
    if (ok)
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w.x), "=r"(w.y) : "l"(src));
    const __nv_fp8_e4m3 *b = (const __nv_fp8_e4m3 *)&w;
    float f[8];
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = to_f32(b[i]);
    *(uint4 *)dst = pack8<T>(f);
}

/* Element offset of 16-byte chunk c of row r in a swizzled tile of rows of HD elements. */
template <int HD> __device__ __forceinline__ int fa_sw(int r, int c) { return r * HD + ((c ^ (r & 7)) << 3); }

/* T: q, out and the tiles; KT: the cache (T, or __nv_fp8_e4m3) */
template <typename T, typename KT, class C>
__global__ void __launch_bounds__(C::THREADS, 2) attn_prefill_fa2_kernel(fa_args a)
{
    constexpr int HD = C::HD, WM = C::WM, ST = C::ST, BM = C::BM, BN = C::BN, THREADS = C::THREADS;
    constexpr int VEC = HD / 8, NKK = HD / 16, NDT = HD / 8;
    extern __shared__ __align__(1024) unsigned char fa_sm[];
    T *Qs = (T *)fa_sm + C::Q, *Ks = (T *)fa_sm + C::K, *Vs = (T *)fa_sm + C::V;
    pdl_trigger();

    const int kh = blockIdx.x, s = blockIdx.y, g = a.group;
    const int q0 = a.q_indptr[s], nrows = (a.q_indptr[s + 1] - q0) * g;
    const int n_qt = (nrows + BM - 1) / BM;
    if ((int)blockIdx.z >= n_qt)
        return;
    const int r0 = (n_qt - 1 - (int)blockIdx.z) * BM; /* rank 0: the last tile, the most keys */
    const int rows_here = min(BM, nrows - r0);
    const int32_t *pages = a.page_ids + a.page_indptr[s];
    pdl_wait(); /* q and this step's K/V rows come from the kernels before */
    const int n_keys = a.pos[q0 + (r0 + rows_here - 1) / g] + 1;
    const int n_tiles = (n_keys + BN - 1) / BN;
    const int tid = threadIdx.x;

    /* Q tile */
    for (int i = tid; i < BM * VEC; i += THREADS) {
        const int r = i / VEC, v = i % VEC;
        const bool ok = r < rows_here;
        const int f = r0 + (ok ? r : 0), tok = q0 + f / g, h = kh * g + f % g;
        cu_cp16(Qs + fa_sw<HD>(r, v), (const T *)a.q + (int64_t)tok * a.ldq + (int64_t)h * HD + v * 8, ok);
    }
    /* K/V tile kt into buffer buf: this thread copies chunk lc of rows lr + i * RSTEP
     * (RSTEP % 8 == 0: one swizzled column for all of them) */
    constexpr int RSTEP = THREADS / VEC, NLD = BN / RSTEP;
    static_assert(RSTEP % 8 == 0 && BN % RSTEP == 0, "K/V copy layout");
    const int lr = tid / VEC, lc = tid % VEC, kv_dst = fa_sw<HD>(lr, lc);
    const char *kv_src = a.kv_base + (size_t)kh * HD * sizeof(KT) + (size_t)lc * 8 * sizeof(KT);
    const size_t row_bytes = (size_t)a.nkv * HD * sizeof(KT);
    auto load_rows = [&](int kt, int buf, auto pow2) {
        T *kd = Ks + buf * C::TILE + kv_dst, *vd = Vs + buf * C::TILE + kv_dst;
#pragma unroll
        for (int i = 0; i < NLD; i++) {
            const int j = kt * BN + lr + i * RSTEP;
            const bool ok = j < n_keys;
            const int jj = ok ? j : 0;
            int pg, sl;
            if (decltype(pow2)::value)
                pg = jj >> a.pt_shift, sl = jj & (a.page_tokens - 1);
            else
                pg = jj / a.page_tokens, sl = jj - pg * a.page_tokens;
            const char *row = kv_src + (size_t)__ldg(pages + pg) * a.page_bytes + (size_t)sl * row_bytes;
            if constexpr (sizeof(KT) == 1) {
                fa_ld_e4m3<T>(kd + i * RSTEP * HD, row + a.k_off, ok);
                fa_ld_e4m3<T>(vd + i * RSTEP * HD, row + a.v_off, ok);
            } else {
                cu_cp16(kd + i * RSTEP * HD, row + a.k_off, ok);
                cu_cp16(vd + i * RSTEP * HD, row + a.v_off, ok);
            }
        }
    };
    auto load_kv = [&](int kt, int buf) { /* page of key j: a shift when page_tokens is a power of two */
        if (a.pt_shift >= 0)
            load_rows(kt, buf, std::true_type());
        else
            load_rows(kt, buf, std::false_type());
    };
    load_kv(0, 0);
    cu_cp_commit(); /* group 0: Q and tile 0 */
#pragma unroll
    for (int st = 1; st < ST - 1; st++) {
        if (st < n_tiles)
            load_kv(st, st);
        cu_cp_commit();
    }

    const int lane = tid & 31, warp = tid >> 5, gq = lane >> 2, cq = lane & 3;
    const int mi = lane >> 3, li = lane & 7; /* ldmatrix: which 8x8 matrix this lane addresses, which row */
    const int wr0 = warp * 16 * WM;          /* this warp's first row */
    /* positions of this lane's rows (wr0 + 16 mt + gq + 8 h); the warp's range over its valid rows */
    int my_pos[WM][2], pmin = INT_MAX, pmax = -1;
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = wr0 + mt * 16 + gq + 8 * h;
            const int p = r < rows_here ? a.pos[q0 + (r0 + r) / g] : -1;
            my_pos[mt][h] = p;
            if (p >= 0)
                pmin = min(pmin, p), pmax = max(pmax, p);
        }
    pmin = __reduce_min_sync(0xffffffffu, pmin);
    pmax = __reduce_max_sync(0xffffffffu, pmax);

    /* ldmatrix addresses of this lane (byte addresses in the shared window): row r, chunk c at
     * r * 2 HD + 16 (c ^ (r & 7)); the rows used are li mod 8 and every row base is a multiple of 256
     * bytes (fa_sm is 1024-aligned), so chunk c + 2 k of the row is address ^ 32 k, and + 16 rows is
     * + 32 HD bytes: one LOP per k step, the row steps are immediate offsets. */
    constexpr uint32_t ROWB = 2 * HD, RT16 = 16 * ROWB; /* bytes of a row, of 16 rows */
    const uint32_t q_addr = cu_smem_addr(Qs) + (wr0 + (mi & 1) * 8 + li) * ROWB + (((mi >> 1) ^ li) << 4);
    const uint32_t k_addr = cu_smem_addr(Ks) + ((mi >> 1) * 8 + li) * ROWB + (((mi & 1) ^ li) << 4);
    const uint32_t v_addr = cu_smem_addr(Vs) + ((mi & 1) * 8 + li) * ROWB + (((mi >> 1) ^ li) << 4);

    float o[WM][NDT][4];
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int dt = 0; dt < NDT; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][dt][e] = 0.0f;
    float m_run[WM][2], l_run[WM][2];
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) m_run[mt][h] = -INFINITY, l_run[mt][h] = 0.0f;

    for (int kt = 0; kt < n_tiles; kt++) {
        cu_cp_wait<ST - 2>();
        __syncthreads(); /* tile kt landed; every warp is done with the buffer tile kt + ST - 1 overwrites */
        if (kt + ST - 1 < n_tiles)
            load_kv(kt + ST - 1, (kt + ST - 1) % ST);
        cu_cp_commit();
        if (kt * BN > pmax)
            continue; /* every key of the tile is past every row of this warp */
        const uint32_t kb = k_addr + (kt % ST) * (C::TILE * 2), vb = v_addr + (kt % ST) * (C::TILE * 2);

        /* S = Q K^T: WM x 16 rows x 64 keys per warp */
        float sc[WM][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < WM; mt++)
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) sc[mt][nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < NKK; kk++) {
            uint32_t qa[WM][4];
#pragma unroll
            for (int mt = 0; mt < WM; mt++) cu_ldm4(qa[mt], (q_addr ^ (32 * kk)) + mt * RT16);
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t b[4];
                cu_ldm4(b, (kb ^ (32 * kk)) + np * RT16);
#pragma unroll
                for (int mt = 0; mt < WM; mt++) {
                    cu_mma16816<T>(sc[mt][2 * np], qa[mt], b[0], b[1]);
                    cu_mma16816<T>(sc[mt][2 * np + 1], qa[mt], b[2], b[3]);
                }
            }
        }

        /* mask j > pos, only where the tile reaches past the first row of the warp */
        if (kt * BN + BN - 1 > pmin) {
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (kt * BN + nt * 8 + 2 * cq + (e & 1) > my_pos[mt][e >> 1])
                            sc[mt][nt][e] = -INFINITY;
        }

        /* online softmax */
        float m_use[WM][2], alpha[WM][2];
        bool grew = false;
#pragma unroll
        for (int mt = 0; mt < WM; mt++) {
            float mx[2];
#pragma unroll
            for (int h = 0; h < 2; h++) { /* pairwise: a chain of 4, not 16 */
                float t[BN / 8];
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) t[nt] = fmaxf(sc[mt][nt][2 * h], sc[mt][nt][2 * h + 1]);
#pragma unroll
                for (int w = BN / 16; w >= 1; w /= 2)
#pragma unroll
                    for (int i = 0; i < w; i++) t[i] = fmaxf(t[i], t[i + w]);
                mx[h] = t[0];
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                const float m_new = fmaxf(m_run[mt][h], mx[h] * a.scale_log2);
                grew |= m_new != m_run[mt][h];
                m_use[mt][h] = m_new == -INFINITY ? 0.0f : m_new;
                alpha[mt][h] = fa_ex2(m_run[mt][h] - m_use[mt][h]); /* 0 while m_run = -inf */
                m_run[mt][h] = m_new;
            }
        }
        uint32_t pa[WM][BN / 16][4]; /* P as the A fragments of the k16 steps of P V */
#pragma unroll
        for (int mt = 0; mt < WM; mt++) {
            float ps[2][BN / 8]; /* row sums per n8 tile, then pairwise */
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                float p[4];
#pragma unroll
                for (int e = 0; e < 4; e++) p[e] = fa_ex2(fmaf(sc[mt][nt][e], a.scale_log2, -m_use[mt][e >> 1]));
                ps[0][nt] = p[0] + p[1];
                ps[1][nt] = p[2] + p[3];
                pa[mt][nt >> 1][(nt & 1) * 2] = fa_pack<T>(p[0], p[1]);
                pa[mt][nt >> 1][(nt & 1) * 2 + 1] = fa_pack<T>(p[2], p[3]);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int w = BN / 16; w >= 1; w /= 2)
#pragma unroll
                    for (int i = 0; i < w; i++) ps[h][i] += ps[h][i + w];
                l_run[mt][h] = l_run[mt][h] * alpha[mt][h] + ps[h][0]; /* per-lane partial; quad sum at the end */
            }
        }
        if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
#pragma unroll
                for (int dt = 0; dt < NDT; dt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) o[mt][dt][e] *= alpha[mt][e >> 1];
        }

        /* O += P V */
#pragma unroll
        for (int j = 0; j < BN / 16; j++) {
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b[4];
                cu_ldm4t(b, (vb ^ (32 * dp)) + j * RT16);
#pragma unroll
                for (int mt = 0; mt < WM; mt++) {
                    cu_mma16816<T>(o[mt][2 * dp], pa[mt][j], b[0], b[1]);
                    cu_mma16816<T>(o[mt][2 * dp + 1], pa[mt][j], b[2], b[3]);
                }
            }
        }
    }
    cu_cp_wait<0>(); /* nothing in flight at exit (only empty groups can be) */

    /* out = O / l */
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float l = l_run[mt][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int r = wr0 + mt * 16 + gq + 8 * h;
            if (r >= rows_here)
                continue;
            const int f = r0 + r, tok = q0 + f / g, hh = kh * g + f % g;
            T *orow = (T *)a.out + (int64_t)tok * a.ldo + (int64_t)hh * HD;
            const float inv = a.v_mul / l;
#pragma unroll
            for (int dt = 0; dt < NDT; dt++)
                *(uint32_t *)(orow + dt * 8 + 2 * cq) = fa_pack<T>(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
        }
}
template <typename T, typename KT, class C> static int launch(cuda_ctx *c, const fa_args &a, const lg_step_meta *m)
{
    const size_t smem = C::BYTES;
    if (smem > c->max_smem_optin)
        return 1;
    static bool attr_set[CU_MAX_DEVICES]; /* per instantiation and device (the opt-in is the current device's) */
    const int d = cu_dev_slot(c);
    if (d < 0 || !attr_set[d]) {
        CU_TRY(c, cudaFuncSetAttribute(attn_prefill_fa2_kernel<T, KT, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        if (d >= 0)
            attr_set[d] = true;
    }
    const int64_t n_qt = ((int64_t)m->max_q_len * a.group + C::BM - 1) / C::BM;
    if (n_qt > 65535)
        return CU_FAIL(c, "attention prefill: %lld query tiles exceed the grid limit", (long long)n_qt);
    const dim3 grid((unsigned)a.nkv, (unsigned)m->n_seqs, (unsigned)n_qt);
    (void)cu_launch(c, attn_prefill_fa2_kernel<T, KT, C>, grid, C::THREADS, smem, a);
    CU_LAUNCHED(c);
    return 0;
}

/* 1: not taken (head_dim, alignment, shared memory): the caller uses the wmma kernel. */
int cu_attention_prefill_fa2(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                             int n_heads, float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const int hd = kv.head_dim;
    const bool f8 = kv.dtype == LG_F8E4M3;
    if (kv.dtype != q.dtype && !f8)
        return CU_FAIL(c, "attention prefill (FA2): a %s KV cache with %s queries", lg_dtype_name(kv.dtype),
                       lg_dtype_name(q.dtype));
    if ((hd != 64 && hd != 128) || q.stride % 8 || out.stride % 8 || !cu_aligned16(q.data) || !cu_aligned16(out.data))
        return 1;
    if (m->n_seqs > 65535)
        return CU_FAIL(c, "attention prefill: %d sequences exceed the grid limit", m->n_seqs);
    fa_args a;
    static_cast<cu_paged_attn &>(a) = cu_paged_attn_of(out, q, kv, m, n_heads);
    a.pt_shift = (kv.page_tokens & (kv.page_tokens - 1)) ? -1 : __builtin_ctz((unsigned)kv.page_tokens);
    a.scale_log2 = scale * 1.4426950408889634f;
    a.v_mul = 1.0f;
    if (f8) {
        a.scale_log2 *= a.k_scale;
        a.v_mul = a.v_scale;
        if (q.dtype == LG_F16)
            return hd == 64 ? launch<__half, __nv_fp8_e4m3, fa_cfg<64, 4, 2, 2>>(c, a, m)
                            : launch<__half, __nv_fp8_e4m3, fa_cfg<128, 4, 2, 2>>(c, a, m);
        return hd == 64 ? launch<__nv_bfloat16, __nv_fp8_e4m3, fa_cfg<64, 4, 2, 2>>(c, a, m)
                        : launch<__nv_bfloat16, __nv_fp8_e4m3, fa_cfg<128, 4, 2, 2>>(c, a, m);
    }
    if (kv.dtype == LG_F16)
        return hd == 64 ? launch<__half, __half, fa_cfg<64, 4, 2, 2>>(c, a, m)
                        : launch<__half, __half, fa_cfg<128, 4, 2, 2>>(c, a, m);
    return hd == 64 ? launch<__nv_bfloat16, __nv_bfloat16, fa_cfg<64, 4, 2, 2>>(c, a, m)
                    : launch<__nv_bfloat16, __nv_bfloat16, fa_cfg<128, 4, 2, 2>>(c, a, m);
}
