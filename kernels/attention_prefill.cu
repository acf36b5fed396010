/*
 * attention_prefill.cu — causal paged attention on tensor cores,
 * FlashAttention-2 style (online softmax over key tiles), for prefill chunks.
 *
 * Math (same as attention.cu): for each query row (token t, head h),
 *   out = sum_{j <= pos[t]} softmax_j(scale * q . K[j]) V[j],
 * computed tile by tile over keys: m' = max(m, max_j s_j), p_j = exp(s_j - m'),
 *   l = l e^{m - m'} + sum_j p_j,  O = O e^{m - m'} + P V,  out = O / l.
 *
 * Block = (sequence, kv head, tile of BM = 64 query rows). Rows are the
 * (token, head-in-group) pairs of the sequence's query run, so the heads of
 * a GQA group share every K/V tile the block loads. 4 warps; warp w owns
 * rows [16w, 16w + 16). Per key tile of BN = 64: the block loads K and V
 * (16-byte loads through the page table, zero past the last key), each warp
 * computes S = Q K^T with wmma 16x16x16 (f16/bf16 in, f32 out) into shared
 * memory, does the online softmax on its rows (2 lanes per row), writes P
 * in the act dtype, and accumulates O += P V with wmma; O lives in shared
 * memory as f32, so its rows can be rescaled between tiles.
 * Any head_dim % 16 == 0 up to 256 (shared memory ~113 KB at 128).
 * A later version can keep O in registers (mma.sync with known fragment
 * layouts) and pipeline the K/V loads (cp.async); this one is the simple,
 * correct tensor-core baseline.
 */
#include "kernels/attention_args.cuh"
#include "kernels/ops.cuh"

#include <mma.h>

using namespace nvcuda;

#define PF_BM 64
#define PF_BN 64
#define PF_THREADS 128

/* the queries and the paged KV (attention_args.cuh), then: */
struct pf_args : cu_paged_attn {
    int hd;
    float scale;
};

struct pf_layout {
    int ldh, ldo, lds, ldp; /* leading dims: Q/K/V (elements), O (f32), S (f32), P (elements) */
    size_t q, k, v, s, p, o, total; /* byte offsets */
};

static __host__ __device__ inline size_t align128(size_t x) { return (x + 127) & ~(size_t)127; }

static __host__ __device__ inline pf_layout pf_make_layout(int hd)
{
    pf_layout L;
    L.ldh = hd + 8;
    L.ldo = hd + 4;
    L.lds = PF_BN + 4;
    L.ldp = PF_BN + 8;
    size_t off = 0;
    L.q = off; off = align128(off + (size_t)PF_BM * L.ldh * 2);
    L.k = off; off = align128(off + (size_t)PF_BN * L.ldh * 2);
    L.v = off; off = align128(off + (size_t)PF_BN * L.ldh * 2);
    L.s = off; off = align128(off + (size_t)PF_BM * L.lds * 4);
    L.p = off; off = align128(off + (size_t)PF_BM * L.ldp * 2);
    L.o = off; off = align128(off + (size_t)PF_BM * L.ldo * 4);
    L.total = off;
    return L;
}

template <typename T>
__global__ void __launch_bounds__(PF_THREADS) attn_prefill_kernel(pf_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    /* bf16 wmma needs sm_80; the backend refuses devices below 8.0 */
#else
    extern __shared__ __align__(128) char smem[];
    const int hd = a.hd, g = a.group;
    const pf_layout L = pf_make_layout(hd);
    T *Qs = (T *)(smem + L.q), *Ks = (T *)(smem + L.k), *Vs = (T *)(smem + L.v), *Ps = (T *)(smem + L.p);
    float *Ss = (float *)(smem + L.s), *Os = (float *)(smem + L.o);

    const int s = blockIdx.y, kh = blockIdx.z;
    const int q0 = a.q_indptr[s], qlen = a.q_indptr[s + 1] - q0;
    const int nrows = qlen * g, r0 = blockIdx.x * PF_BM;
    if (r0 >= nrows)
        return;
    const int rows_here = min(PF_BM, nrows - r0);
    const int32_t *pages = a.page_ids + a.page_indptr[s];
    /* keys needed: up to the position of the last token in this tile */
    const int n_keys = a.pos[q0 + (r0 + rows_here - 1) / g] + 1;
    const int vecs = hd / 8; /* 16-byte vectors per row */
    const size_t row_bytes = (size_t)a.nkv * hd * sizeof(T), head_off = (size_t)kh * hd * sizeof(T);

    /* Q tile and O = 0 */
    for (int i = threadIdx.x; i < PF_BM * vecs; i += PF_THREADS) {
        int r = i / vecs, v = i % vecs;
        uint4 u = make_uint4(0, 0, 0, 0);
        if (r < rows_here) {
            int f = r0 + r, tok = q0 + f / g, h = kh * g + f % g;
            u = *(const uint4 *)((const T *)a.q + (int64_t)tok * a.ldq + (int64_t)h * hd + v * 8);
        }
        *(uint4 *)(Qs + r * L.ldh + v * 8) = u;
    }
    for (int i = threadIdx.x; i < PF_BM * hd; i += PF_THREADS) Os[(i / hd) * L.ldo + i % hd] = 0.0f;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* softmax ownership: lane pair per row; lane&1 picks the column half */
    const int my_row = warp * 16 + (lane >> 1), half = lane & 1;
    const int my_pos = my_row < rows_here ? a.pos[q0 + (r0 + my_row) / g] : -1;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int kt = 0; kt * PF_BN < n_keys; kt++) {
        __syncthreads(); /* previous tile's K/V reads done (and Q/O init on the first pass) */
        for (int i = threadIdx.x; i < PF_BN * vecs; i += PF_THREADS) {
            int r = i / vecs, v = i % vecs, j = kt * PF_BN + r;
            uint4 uk = make_uint4(0, 0, 0, 0), uv = uk;
            if (j < n_keys) {
                const char *row = a.kv_base + (size_t)pages[j / a.page_tokens] * a.page_bytes +
                                  (size_t)(j % a.page_tokens) * row_bytes + head_off + (size_t)v * 16;
                uk = *(const uint4 *)(row + a.k_off);
                uv = *(const uint4 *)(row + a.v_off);
            }
            *(uint4 *)(Ks + r * L.ldh + v * 8) = uk;
            *(uint4 *)(Vs + r * L.ldh + v * 8) = uv;
        }
        __syncthreads();

        /* S = Q K^T for this warp's 16 rows */
        for (int nf = 0; nf < PF_BN / 16; nf++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
            wmma::fill_fragment(sacc, 0.0f);
            for (int kk = 0; kk < hd / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + warp * 16 * L.ldh + kk * 16, L.ldh);
                wmma::load_matrix_sync(fb, Ks + nf * 16 * L.ldh + kk * 16, L.ldh);
                wmma::mma_sync(sacc, fa, fb, sacc);
            }
            wmma::store_matrix_sync(Ss + warp * 16 * L.lds + nf * 16, sacc, L.lds, wmma::mem_row_major);
        }
        __syncwarp();

        /* online softmax on my row's half of the tile */
        {
            const float *srow = Ss + my_row * L.lds + half * (PF_BN / 2);
            float sv[PF_BN / 2];
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < PF_BN / 2; c++) {
                int j = kt * PF_BN + half * (PF_BN / 2) + c;
                sv[c] = j <= my_pos ? srow[c] * a.scale : -INFINITY;
                mx = fmaxf(mx, sv[c]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_new = fmaxf(m_run, mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = __expf(m_run - m_use); /* 0 when m_run = -inf */
            float sum = 0.0f;
            T *prow = Ps + my_row * L.ldp + half * (PF_BN / 2);
#pragma unroll
            for (int c = 0; c < PF_BN / 2; c++) {
                float p = __expf(sv[c] - m_use);
                sum += p;
                prow[c] = from_f32<T>(p);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            l_run = l_run * alpha + sum;
            m_run = m_new;
            float *orow = Os + my_row * L.ldo + half * (hd / 2);
            for (int d = 0; d < hd / 2; d++) orow[d] *= alpha;
        }
        __syncwarp();

        /* O += P V for this warp's rows */
        for (int nf = 0; nf < hd / 16; nf++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
            float *op = Os + warp * 16 * L.ldo + nf * 16;
            wmma::load_matrix_sync(oacc, op, L.ldo, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < PF_BN / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, Ps + warp * 16 * L.ldp + kk * 16, L.ldp);
                wmma::load_matrix_sync(fb, Vs + kk * 16 * L.ldh + nf * 16, L.ldh);
                wmma::mma_sync(oacc, fa, fb, oacc);
            }
            wmma::store_matrix_sync(op, oacc, L.ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }

    /* out = O / l */
    if (my_row < rows_here) {
        const int f = r0 + my_row, tok = q0 + f / g, h = kh * g + f % g;
        T *orow = (T *)a.out + (int64_t)tok * a.ldo + (int64_t)h * hd + half * (hd / 2);
        const float *os = Os + my_row * L.ldo + half * (hd / 2);
        const float inv = 1.0f / l_run;
        for (int d = 0; d < hd / 2; d++) orow[d] = from_f32<T>(os[d] * inv);
    }
#endif
}

template <typename T> static int launch(cuda_ctx *c, const pf_args &a, const lg_step_meta *m, size_t smem)
{
    static bool attr_set[CU_MAX_DEVICES]; /* per device: the opt-in is the current device's (cuda_common.cuh) */
    const int d = cu_dev_slot(c);
    if (d < 0 || !attr_set[d]) {
        CU_TRY(c, cudaFuncSetAttribute(attn_prefill_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)c->max_smem_optin));
        if (d >= 0)
            attr_set[d] = true;
    }
    dim3 grid((unsigned)(((int64_t)m->max_q_len * a.group + PF_BM - 1) / PF_BM), (unsigned)m->n_seqs,
              (unsigned)a.nkv);
    attn_prefill_kernel<T><<<grid, PF_THREADS, smem, c->stream>>>(a);
    CU_LAUNCHED(c);
    return 0;
}

int cu_attention_prefill(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                         int n_heads, float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const int hd = kv.head_dim;
    if (kv.dtype != q.dtype) /* an e4m3 cache: attention.cu sends it to attention_decode.cu */
        return CU_FAIL(c, "attention prefill: a %s KV cache with %s queries is not read by this kernel (16-bit caches "
                          "only; attention.cu sends e4m3 to the split-K kernel)", lg_dtype_name(kv.dtype), lg_dtype_name(q.dtype));
    if (hd % 16 || hd > 256)
        return CU_FAIL(c, "attention prefill: head_dim must be a multiple of 16 up to 256, found %d", hd);
    const pf_layout L = pf_make_layout(hd);
    if (L.total > c->max_smem_optin)
        return cu_attention_decode(be, out, q, kv, m, n_heads, scale);
    if (m->n_seqs > 65535)
        return CU_FAIL(c, "attention prefill: %d sequences exceed the grid limit", m->n_seqs);
    pf_args a;
    static_cast<cu_paged_attn &>(a) = cu_paged_attn_of(out, q, kv, m, n_heads);
    a.hd = hd;
    a.scale = scale;
    if (kv.dtype == LG_F16)
        return launch<__half>(c, a, m, L.total);
    return launch<__nv_bfloat16>(c, a, m, L.total);
}
