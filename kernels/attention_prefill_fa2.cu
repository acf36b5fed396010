/*
 * attention_prefill_fa2.cu — causal paged attention for prefill chunks,
 * FlashAttention-2 on mma.sync with registers-resident Q, S, P and O, and
 * cp.async double-buffered K/V tiles. head_dim 64 or 128 (the Llama
 * shapes); attention_prefill.cu (wmma) takes the others.
 *
 * Math (same as attention.cu): for each query row (token t, head h),
 *   out = sum_{j <= pos[t]} softmax_j(scale * q . K[j]) V[j],
 * tile by tile over keys with the online softmax (base 2, scale * log2 e
 * folded into the scores): m' = max(m, max_j s_j), p_j = 2^(s_j - m'),
 *   l = l 2^(m - m') + sum_j p_j,  O = O 2^(m - m') + P V,  out = O / l.
 *
 * Block = (tile of BM = 64 query rows, sequence, kv head); rows are the
 * (token, head-in-group) pairs of the sequence's query run, so the heads of
 * a GQA group share every K/V tile. 4 warps, warp w owns rows [16w, 16w+16).
 * Per key tile of BN = 64 (cp.async into shared memory through the page
 * table, zero past the last key; the next tile loads while this one is
 * computed):
 *   S = Q K^T   m16n8k16, A = Q fragments (ldmatrix once, kept in registers),
 *               B = K rows (ldmatrix: a K row is a column of K^T);
 *   mask j > pos, online softmax on the S accumulators (a row lives in the
 *   4 lanes of a quad: two shuffles);
 *   O += P V    A = P straight from the S accumulators (the C layout of two
 *               n8 tiles is the A layout of one k16 step), B = V through
 *               ldmatrix.trans.
 * Shared memory rows are padded by 16 bytes (conflict-free ldmatrix).
 * HD = 128: Q 17 KB + K/V 2 x 2 x 17 KB = 85 KB, two blocks per SM.
 * Blocks are launched longest first (the last query tiles of a causal
 * prefill see the most keys).
 * Programmatic dependent launch (cuda_common.cuh): waits before any load.
 */
#include "ops.cuh"

#define FA_BM 64
#define FA_BN 64
#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)

struct fa_args {
    const void *q;
    int64_t ldq;
    void *out;
    int64_t ldo;
    const char *kv_base;
    size_t page_bytes, k_off, v_off;
    int page_tokens, nkv, group;
    const int32_t *pos, *q_indptr, *page_indptr, *page_ids;
    float scale_log2; /* scale * log2(e) */
};

__device__ __forceinline__ uint32_t fa_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void fa_cp16(void *dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(fa_smem(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fa_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void fa_ldm4(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
}
__device__ __forceinline__ void fa_ldm4t(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(p)));
}

template <typename T> __device__ __forceinline__ void fa_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void fa_mma<__half>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void fa_mma<__nv_bfloat16>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

template <int HD> struct fa_smem_layout {
    static constexpr int LD = HD + 8;                 /* row pitch in elements (16-byte pad) */
    static constexpr int TILE = FA_BN * LD;           /* one K or V tile */
    static constexpr int Q = 0, K = FA_BM * LD, V = K + 2 * TILE;
    static constexpr size_t BYTES = (size_t)(V + 2 * TILE) * 2;
};

template <typename T, int HD>
__global__ void __launch_bounds__(FA_THREADS, 2) attn_prefill_fa2_kernel(fa_args a)
{
    using L = fa_smem_layout<HD>;
    constexpr int LD = L::LD, VEC = HD / 8, NKK = HD / 16, NDT = HD / 8;
    extern __shared__ __align__(128) unsigned char fa_sm[];
    T *Qs = (T *)fa_sm + L::Q, *Ks = (T *)fa_sm + L::K, *Vs = (T *)fa_sm + L::V;
    pdl_trigger();

    const int s = blockIdx.y, kh = blockIdx.z, g = a.group;
    const int q0 = a.q_indptr[s], nrows = (a.q_indptr[s + 1] - q0) * g;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * FA_BM; /* longest tiles first */
    if (r0 >= nrows)
        return;
    const int rows_here = min(FA_BM, nrows - r0);
    const int32_t *pages = a.page_ids + a.page_indptr[s];
    const size_t row_bytes = (size_t)a.nkv * HD * sizeof(T), head_off = (size_t)kh * HD * sizeof(T);
    pdl_wait(); /* q and this step's K/V rows come from the kernels before */
    const int n_keys = a.pos[q0 + (r0 + rows_here - 1) / g] + 1;
    const int n_tiles = (n_keys + FA_BN - 1) / FA_BN;

    /* Q tile */
    for (int i = threadIdx.x; i < FA_BM * VEC; i += FA_THREADS) {
        const int r = i / VEC, v = i % VEC;
        const bool ok = r < rows_here;
        const int f = r0 + (ok ? r : 0), tok = q0 + f / g, h = kh * g + f % g;
        fa_cp16(Qs + r * LD + v * 8, (const T *)a.q + (int64_t)tok * a.ldq + (int64_t)h * HD + v * 8, ok);
    }
    auto load_kv = [&](int kt, int buf) {
        for (int i = threadIdx.x; i < FA_BN * VEC; i += FA_THREADS) {
            const int r = i / VEC, v = i % VEC, j = kt * FA_BN + r;
            const bool ok = j < n_keys;
            const int jj = ok ? j : 0;
            const char *row = a.kv_base + (size_t)pages[jj / a.page_tokens] * a.page_bytes +
                              (size_t)(jj % a.page_tokens) * row_bytes + head_off + (size_t)v * 16;
            fa_cp16(Ks + buf * L::TILE + r * LD + v * 8, row + a.k_off, ok);
            fa_cp16(Vs + buf * L::TILE + r * LD + v * 8, row + a.v_off, ok);
        }
    };
    load_kv(0, 0);
    fa_commit();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, cq = lane & 3;
    const int mi = lane >> 3, li = lane & 7; /* ldmatrix: which 8x8 matrix this lane addresses, which row */
    int my_pos[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = warp * 16 + gq + 8 * h;
        my_pos[h] = r < rows_here ? a.pos[q0 + (r0 + r) / g] : -1;
    }
    uint32_t qf[NKK][4];
    float o[NDT][4];
#pragma unroll
    for (int dt = 0; dt < NDT; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[dt][e] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    for (int kt = 0; kt < n_tiles; kt++) {
        fa_wait_all();
        __syncthreads(); /* tile kt landed; every warp is done with the buffer tile kt + 1 overwrites */
        if (kt == 0) {
#pragma unroll
            for (int kk = 0; kk < NKK; kk++)
                fa_ldm4(qf[kk], Qs + (warp * 16 + (mi & 1) * 8 + li) * LD + kk * 16 + (mi >> 1) * 8);
        }
        if (kt + 1 < n_tiles)
            load_kv(kt + 1, (kt + 1) & 1);
        fa_commit();
        const T *Kt = Ks + (kt & 1) * L::TILE, *Vt = Vs + (kt & 1) * L::TILE;

        /* S = Q K^T: 16 rows x 64 keys per warp */
        float sc[FA_BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < NKK; kk++) {
#pragma unroll
            for (int np = 0; np < FA_BN / 16; np++) {
                uint32_t b[4];
                fa_ldm4(b, Kt + (np * 16 + (mi >> 1) * 8 + li) * LD + kk * 16 + (mi & 1) * 8);
                fa_mma<T>(sc[2 * np], qf[kk], b[0], b[1]);
                fa_mma<T>(sc[2 * np + 1], qf[kk], b[2], b[3]);
            }
        }

        /* mask, online softmax */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = kt * FA_BN + nt * 8 + 2 * cq + (e & 1);
                const float v = j <= my_pos[e >> 1] ? sc[nt][e] * a.scale_log2 : -INFINITY;
                sc[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2], m_use[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float m_new = fmaxf(m_run[h], mx[h]);
            m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[h] = exp2f(m_run[h] - m_use[h]); /* 0 while m_run = -inf */
            m_run[h] = m_new;
        }
        float rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(sc[nt][e] - m_use[e >> 1]);
                sc[nt][e] = p;
                rs[e >> 1] += p;
            }
#pragma unroll
        for (int h = 0; h < 2; h++) l_run[h] = l_run[h] * alpha[h] + rs[h]; /* per-lane partial; quad sum at the end */
#pragma unroll
        for (int dt = 0; dt < NDT; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[dt][e] *= alpha[e >> 1];

        /* O += P V */
#pragma unroll
        for (int j = 0; j < FA_BN / 16; j++) {
            uint32_t pa[4];
            pa[0] = fa_pack<T>(sc[2 * j][0], sc[2 * j][1]);
            pa[1] = fa_pack<T>(sc[2 * j][2], sc[2 * j][3]);
            pa[2] = fa_pack<T>(sc[2 * j + 1][0], sc[2 * j + 1][1]);
            pa[3] = fa_pack<T>(sc[2 * j + 1][2], sc[2 * j + 1][3]);
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b[4];
                fa_ldm4t(b, Vt + (j * 16 + (mi & 1) * 8 + li) * LD + dp * 16 + (mi >> 1) * 8);
                fa_mma<T>(o[2 * dp], pa, b[0], b[1]);
                fa_mma<T>(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
    }

    /* out = O / l */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = warp * 16 + gq + 8 * h;
        if (r >= rows_here)
            continue;
        const int f = r0 + r, tok = q0 + f / g, hh = kh * g + f % g;
        T *orow = (T *)a.out + (int64_t)tok * a.ldo + (int64_t)hh * HD;
        const float inv = 1.0f / l_run[h];
#pragma unroll
        for (int dt = 0; dt < NDT; dt++)
            *(uint32_t *)(orow + dt * 8 + 2 * cq) = fa_pack<T>(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    }
}

template <typename T, int HD> static int launch(cuda_ctx *c, const fa_args &a, const lg_step_meta *m)
{
    const size_t smem = fa_smem_layout<HD>::BYTES;
    static bool attr_set = false; /* per instantiation */
    if (!attr_set) {
        CU_TRY(c, cudaFuncSetAttribute(attn_prefill_fa2_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        attr_set = true;
    }
    const dim3 grid((unsigned)(((int64_t)m->max_q_len * a.group + FA_BM - 1) / FA_BM), (unsigned)m->n_seqs,
                    (unsigned)a.nkv);
    (void)cu_launch(c, attn_prefill_fa2_kernel<T, HD>, grid, FA_THREADS, smem, a);
    CU_LAUNCHED(c);
    return 0;
}

/* 1: not taken (head_dim, alignment, shared memory): the caller uses the wmma kernel. */
int cu_attention_prefill_fa2(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                             int n_heads, float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const int hd = kv.head_dim;
    if ((hd != 64 && hd != 128) || q.stride % 8 || out.stride % 8 || !cu_aligned16(q.data) || !cu_aligned16(out.data))
        return 1;
    if ((hd == 64 ? fa_smem_layout<64>::BYTES : fa_smem_layout<128>::BYTES) > c->max_smem_optin)
        return 1;
    if (m->n_seqs > 65535)
        return CU_FAIL(c, "attention prefill: %d sequences exceed the grid limit", m->n_seqs);
    fa_args a;
    a.q = q.data;
    a.ldq = q.stride;
    a.out = out.data;
    a.ldo = out.stride;
    a.kv_base = (const char *)kv.base;
    a.page_bytes = kv.page_bytes;
    a.k_off = kv.k_off;
    a.v_off = kv.v_off;
    a.page_tokens = kv.page_tokens;
    a.nkv = kv.n_kv_heads;
    a.group = n_heads / kv.n_kv_heads;
    a.pos = m->pos;
    a.q_indptr = m->q_indptr;
    a.page_indptr = m->page_indptr;
    a.page_ids = m->page_ids;
    a.scale_log2 = scale * 1.4426950408889634f;
    if (kv.dtype == LG_F16)
        return hd == 64 ? launch<__half, 64>(c, a, m) : launch<__half, 128>(c, a, m);
    return hd == 64 ? launch<__nv_bfloat16, 64>(c, a, m) : launch<__nv_bfloat16, 128>(c, a, m);
}
