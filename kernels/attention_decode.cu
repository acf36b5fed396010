/*
 * attention_decode.cu — split-K paged attention on CUDA cores (decode path).
 *
 * Math (per token t of sequence s, query head h in kv head kh's group):
 *   n_ctx = pos[t] + 1, split into chunks of C keys; for chunk c:
 *     s_j = scale * q[t,h] . K_s[j, kh]             j in chunk c
 *     m_c = max_j s_j;  l_c = sum_j exp(s_j - m_c);  o_c = sum_j exp(s_j - m_c) V_s[j, kh]
 *   combine: M = max_c m_c, L = sum_c l_c e^{m_c - M}, out = sum_c o_c e^{m_c - M} / L
 * With one chunk per token the block writes out = o / l directly.
 *
 * Block = (token, kv head, up to GMAX query heads of its group) x chunk;
 * 128 threads. K/V rows are read once per block for all its query heads
 * (GQA reuse): a row is split over `lpr` lanes (16 bytes = 8 elements
 * each), so a warp covers 32 / lpr keys at a time. Scores of the chunk sit
 * in shared memory ([GMAX][C] f32), then softmax, then P V with per-lane
 * f32 accumulators reduced through shared memory, warp by warp in a
 * fixed order (deterministic).
 * The chunk's page ids are staged in shared memory first, so each K/V load
 * depends on a shared-memory read, not on a global one.
 * Launch shape (chunk size, grid.y) depends only on n_tokens, the head
 * layout and max_kv_len (an upper bound: each block takes its sequence's
 * length from pos), so a graph recorded for a bucketed max_kv_len replays
 * correctly for any lengths under it.
 * Programmatic dependent launch (cuda_common.cuh): the block stages its
 * page ids (step metadata) before pdl_wait, q and K/V after.
 * Works for any query length (it is also the prefill fallback for head_dim
 * % 16 != 0) and any head_dim % 8 == 0 up to 256.
 */
#include "ops.cuh"

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_CMAX 1024
#define DEC_UNROLL 4 /* key rows per lane loaded before use: bytes in flight */

struct dec_args {
    const void *q;
    int64_t ldq;
    void *out;
    int64_t ldo;
    const char *kv_base;
    size_t page_bytes, k_off, v_off;
    int page_tokens, nkv, hd, group, nh, n_hsub;
    const int32_t *pos, *q_indptr, *page_indptr, *page_ids;
    int n_seqs, chunk, max_chunks;
    float scale;
    float *part_o;  /* [T * nh * max_chunks][hd] unnormalised, when split */
    float *part_ml; /* [T * nh * max_chunks][2] (m, l) */
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

template <typename T, int GMAX>
__global__ void __launch_bounds__(DEC_THREADS) attn_decode_kernel(dec_args a)
{
    extern __shared__ float sm[];
    const int hd = a.hd, C = a.chunk;
    float *q_s = sm;                  /* [GMAX][hd] */
    float *o_s = q_s + GMAX * hd;     /* [GMAX][hd] */
    float *s_s = o_s + GMAX * hd;     /* [GMAX][C] */
    float *ml_s = s_s + GMAX * C;     /* [GMAX][2] */
    int *pid_s = (int *)(ml_s + 2 * GMAX); /* [C / page_tokens + 2] page ids of this chunk */

    pdl_trigger();
    const int hs = blockIdx.x % a.n_hsub, kh = (blockIdx.x / a.n_hsub) % a.nkv, t = blockIdx.x / (a.n_hsub * a.nkv);
    const int ch = blockIdx.y;
    const int n_ctx = a.pos[t] + 1;
    const int j0 = ch * C;
    if (j0 >= n_ctx)
        return;
    const int j1 = min(j0 + C, n_ctx), len = j1 - j0;
    const int h0 = kh * a.group + hs * GMAX, gc = min(GMAX, a.group - hs * GMAX);
    const int s = seq_of_token(a.q_indptr, a.n_seqs, t);
    const int32_t *pages = a.page_ids + a.page_indptr[s];
    /* the chunk's page ids, staged once: K/V loads below index shared memory
     * instead of waiting on a dependent global load per row */
    const int pg0 = j0 / a.page_tokens, n_pg = (j1 - 1) / a.page_tokens - pg0 + 1;
    for (int i = threadIdx.x; i < n_pg; i += DEC_THREADS) pid_s[i] = pages[pg0 + i];
    pdl_wait(); /* everything above is step metadata; q and this step's K/V rows come from the kernels before */

    const T *qrow = (const T *)a.q + (int64_t)t * a.ldq + (int64_t)h0 * hd;
    for (int i = threadIdx.x; i < GMAX * hd; i += DEC_THREADS) {
        int r = i / hd;
        q_s[i] = r < gc ? to_f32(qrow[i]) * a.scale : 0.0f;
        o_s[i] = 0.0f;
    }
    __syncthreads();

    /* lanes per key row: power of two >= hd / 8 */
    const int vecs = hd / 8;
    int lpr = 1;
    while (lpr < vecs) lpr <<= 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane & (lpr - 1), rows_per_warp = 32 / lpr;
    const int row_step = DEC_WARPS * rows_per_warp;
    const bool active = sub < vecs;
    const size_t row_bytes = (size_t)a.nkv * hd * sizeof(T);
    const size_t head_off = (size_t)kh * hd * sizeof(T) + (size_t)sub * 16;

    /* phase 1: scores; DEC_UNROLL key rows per lane in flight before any use */
    for (int jb = warp * rows_per_warp; jb < len; jb += row_step * DEC_UNROLL) { /* uniform per warp */
        uint4 ku[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int jr = jb + u * row_step + lane / lpr, j = j0 + jr;
            ku[u] = make_uint4(0, 0, 0, 0);
            if (active && jr < len) {
                const char *pg = a.kv_base + (size_t)pid_s[j / a.page_tokens - pg0] * a.page_bytes;
                ku[u] = *(const uint4 *)(pg + a.k_off + (size_t)(j % a.page_tokens) * row_bytes + head_off);
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int jr = jb + u * row_step + lane / lpr;
            float kf[8];
            unpack8<T>(ku[u], kf);
#pragma unroll
            for (int r = 0; r < GMAX; r++) {
                float d = 0.0f;
                if (active) {
                    const float *qq = q_s + r * hd + sub * 8;
#pragma unroll
                    for (int e = 0; e < 8; e++) d += qq[e] * kf[e];
                }
                for (int o = lpr >> 1; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                if (sub == 0 && jr < len)
                    s_s[r * C + jr] = d;
            }
        }
    }
    __syncthreads();

    /* phase 2: softmax within the chunk, one warp per head */
    for (int r = warp; r < gc; r += DEC_WARPS) {
        float *sr = s_s + r * C;
        float mx = -INFINITY;
        for (int i = lane; i < len; i += 32) mx = fmaxf(mx, sr[i]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int i = lane; i < len; i += 32) {
            float p = __expf(sr[i] - mx);
            sr[i] = p;
            sum += p;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
            ml_s[2 * r] = mx;
            ml_s[2 * r + 1] = sum;
        }
    }
    for (int r = gc + warp; r < GMAX; r += DEC_WARPS) /* unused heads: p = 0 */
        for (int i = lane; i < len; i += 32) s_s[r * C + i] = 0.0f;
    __syncthreads();

    /* phase 3: o = P V */
    float acc[GMAX][8];
#pragma unroll
    for (int r = 0; r < GMAX; r++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[r][e] = 0.0f;
    for (int jb = warp * rows_per_warp; jb < len; jb += row_step * DEC_UNROLL) {
        uint4 vu[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int jr = jb + u * row_step + lane / lpr, j = j0 + jr;
            vu[u] = make_uint4(0, 0, 0, 0);
            if (active && jr < len) {
                const char *pg = a.kv_base + (size_t)pid_s[j / a.page_tokens - pg0] * a.page_bytes;
                vu[u] = *(const uint4 *)(pg + a.v_off + (size_t)(j % a.page_tokens) * row_bytes + head_off);
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int jr = jb + u * row_step + lane / lpr;
            if (jr >= len)
                continue;
            float vf[8];
            unpack8<T>(vu[u], vf);
#pragma unroll
            for (int r = 0; r < GMAX; r++) {
                float p = s_s[r * C + jr];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r][e] += p * vf[e];
            }
        }
    }
    /* reduce over the key rows of this warp (lanes with the same sub), then across warps */
#pragma unroll
    for (int r = 0; r < GMAX; r++)
#pragma unroll
        for (int e = 0; e < 8; e++)
            for (int o = lpr; o < 32; o <<= 1) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
    /* warps add in a fixed order (no atomics): results are bit-reproducible,
     * which graph replays promise (backend.h) */
    for (int w = 0; w < DEC_WARPS; w++) {
        if (warp == w && lane < lpr && active) {
#pragma unroll
            for (int r = 0; r < GMAX; r++)
                if (r < gc)
#pragma unroll
                    for (int e = 0; e < 8; e++) o_s[r * hd + sub * 8 + e] += acc[r][e];
        }
        __syncthreads();
    }

    if (gridDim.y == 1) {
        for (int i = threadIdx.x; i < gc * hd; i += DEC_THREADS) {
            int r = i / hd;
            T *orow = (T *)a.out + (int64_t)t * a.ldo + (int64_t)(h0 + r) * hd;
            orow[i % hd] = from_f32<T>(o_s[i] / ml_s[2 * r + 1]);
        }
    } else {
        for (int i = threadIdx.x; i < gc * hd; i += DEC_THREADS) {
            int r = i / hd;
            size_t pi = ((size_t)t * a.nh + h0 + r) * a.max_chunks + ch;
            a.part_o[pi * hd + i % hd] = o_s[i];
        }
        for (int r = threadIdx.x; r < gc; r += DEC_THREADS) {
            size_t pi = ((size_t)t * a.nh + h0 + r) * a.max_chunks + ch;
            a.part_ml[2 * pi] = ml_s[2 * r];
            a.part_ml[2 * pi + 1] = ml_s[2 * r + 1];
        }
    }
}

/* One block per (token, head): merges the chunk partials of attn_decode_kernel. */
template <typename T> __global__ void attn_combine_kernel(dec_args a)
{
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.x / a.nh, h = blockIdx.x % a.nh, hd = a.hd;
    const int n_ch = (a.pos[t] + 1 + a.chunk - 1) / a.chunk;
    const size_t p0 = ((size_t)t * a.nh + h) * a.max_chunks;
    float M = -INFINITY;
    for (int c = 0; c < n_ch; c++) M = fmaxf(M, a.part_ml[2 * (p0 + c)]);
    float L = 0.0f;
    for (int c = 0; c < n_ch; c++) L += a.part_ml[2 * (p0 + c) + 1] * __expf(a.part_ml[2 * (p0 + c)] - M);
    const float invL = 1.0f / L;
    T *orow = (T *)a.out + (int64_t)t * a.ldo + (int64_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int c = 0; c < n_ch; c++) o += a.part_o[(p0 + c) * hd + d] * __expf(a.part_ml[2 * (p0 + c)] - M);
        orow[d] = from_f32<T>(o * invL);
    }
}

template <typename T, int GMAX> static int launch(cuda_ctx *c, dec_args a, int T_, size_t smem)
{
    static bool attr_set = false; /* per instantiation; smem never exceeds the first opt-in below */
    if (!attr_set) {
        CU_TRY(c, cudaFuncSetAttribute(attn_decode_kernel<T, GMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)c->max_smem_optin));
        attr_set = true;
    }
    dim3 grid((unsigned)((size_t)T_ * a.nkv * a.n_hsub), (unsigned)a.max_chunks);
    (void)cu_launch(c, attn_decode_kernel<T, GMAX>, grid, DEC_THREADS, smem, a);
    CU_LAUNCHED(c);
    if (a.max_chunks > 1) {
        (void)cu_launch(c, attn_combine_kernel<T>, (unsigned)((size_t)T_ * a.nh), 128, 0, a);
        CU_LAUNCHED(c);
    }
    return 0;
}

template <typename T> static int launch_g(cuda_ctx *c, dec_args a, int T_, int gmax, size_t smem)
{
    switch (gmax) {
    case 1: return launch<T, 1>(c, a, T_, smem);
    case 2: return launch<T, 2>(c, a, T_, smem);
    case 4: return launch<T, 4>(c, a, T_, smem);
    default: return launch<T, 8>(c, a, T_, smem);
    }
}

int cu_attention_decode(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                        int n_heads, float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const int hd = kv.head_dim, nkv = kv.n_kv_heads, group = n_heads / nkv, T_ = m->n_tokens;
    const int gmax = group >= 8 ? 8 : group >= 4 ? 4 : group >= 2 ? 2 : 1;
    const int n_hsub = (group + gmax - 1) / gmax;
    const int max_kv = m->max_kv_len > 0 ? m->max_kv_len : 1;
    /* chunk: enough blocks to fill the chip (about 4 per SM), at most DEC_CMAX keys */
    const int64_t base_blocks = (int64_t)T_ * nkv * n_hsub;
    int64_t want = ((int64_t)max_kv * base_blocks) / (4 * (int64_t)c->n_sm);
    int C = (int)(want < 64 ? 64 : want > DEC_CMAX ? DEC_CMAX : want);
    C = (C + 63) / 64 * 64;
    if (C >= max_kv)
        C = (max_kv + 31) / 32 * 32;
    const int max_chunks = (max_kv + C - 1) / C;
    size_t smem = ((size_t)2 * gmax * hd + (size_t)gmax * C + 2 * gmax) * sizeof(float) +
                  ((size_t)C / (size_t)kv.page_tokens + 2) * sizeof(int);
    if (smem > c->max_smem_optin)
        return CU_FAIL(c, "attention decode: %zu bytes of shared memory needed, %zu available", smem,
                       c->max_smem_optin);
    dec_args a;
    a.q = q.data;
    a.ldq = q.stride;
    a.out = out.data;
    a.ldo = out.stride;
    a.kv_base = (const char *)kv.base;
    a.page_bytes = kv.page_bytes;
    a.k_off = kv.k_off;
    a.v_off = kv.v_off;
    a.page_tokens = kv.page_tokens;
    a.nkv = nkv;
    a.hd = hd;
    a.group = group;
    a.nh = n_heads;
    a.n_hsub = n_hsub;
    a.pos = m->pos;
    a.q_indptr = m->q_indptr;
    a.page_indptr = m->page_indptr;
    a.page_ids = m->page_ids;
    a.n_seqs = m->n_seqs;
    a.chunk = C;
    a.max_chunks = max_chunks;
    a.scale = scale;
    a.part_o = a.part_ml = NULL;
    if (max_chunks > 1) {
        size_t n = (size_t)T_ * n_heads * max_chunks;
        char *ws = (char *)cu_workspace(c, n * ((size_t)hd + 2) * sizeof(float));
        if (!ws)
            return CU_FAIL(c, "attention decode: cannot allocate %zu bytes of split-K workspace",
                           n * ((size_t)hd + 2) * sizeof(float));
        a.part_o = (float *)ws;
        a.part_ml = a.part_o + n * hd;
    }
    if (kv.dtype == LG_F16)
        return launch_g<__half>(c, a, T_, gmax, smem);
    return launch_g<__nv_bfloat16>(c, a, T_, gmax, smem);
}
