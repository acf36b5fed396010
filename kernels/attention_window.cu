/*
 * attention_window.cu — paged attention for the layers the fast kernels do
 * not take: a sliding window (kv.window > 0) or soft-capped scores
 * (kv.softcap > 0; Gemma 2). The CPU backend's math, step for step:
 *
 *   for token t of sequence s at position p, query head h (kv head h / group):
 *     keys j in [lo, p], lo = window > 0 ? max(0, p - window + 1) : 0
 *     s_j = scale * q[t,h] . K_s[j, kh];  s_j = cap > 0 ? cap * tanh(s_j / cap) : s_j
 *     out[t,h] = sum_j softmax_j(s) V_s[j, kh]                  (f32 accumulation, one rounding)
 *
 * One warp per (token, query head); the lanes split head_dim (up to 8
 * elements each, head_dim <= 256) and walk the keys in order with an online
 * softmax (running max m, sum l, accumulator o). Every length is read from
 * the step's device metadata, so a step graph replays it for any positions.
 * Not tuned: a window bounds its work by the window, and the split-K decode
 * and tensor-core prefill kernels keep serving every window-less layer
 * unchanged (attention.cu picks).
 * An e4m3 KV cache (`--kv-cache-dtype fp8`) is read here for windowed and
 * soft-capped layers (its other layers go to the split-K decode kernel):
 * K and V elements are to_f32(e4m3) x the layer's k_scale / v_scale, the
 * CPU backend's reading.
 */
#include "kernels/attention_args.cuh"
#include "kernels/ops.cuh"

/* a cache element as f32: 16-bit caches as they are, e4m3 times its scale */
template <typename KT> __device__ __forceinline__ float kv_f32(KT x, float) { return to_f32(x); }
template <> __device__ __forceinline__ float kv_f32<__nv_fp8_e4m3>(__nv_fp8_e4m3 x, float s) { return to_f32(x) * s; }

/* T: q and out; KT: the cache (T, or __nv_fp8_e4m3) */
template <typename T, typename KT>
__global__ void attention_window_kernel(cu_paged_attn a, int hd, int nh, int n_seqs, int T_, int window, float scale,
                                        float cap)
{
    pdl_trigger();
    pdl_wait();
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (item >= (int64_t)T_ * nh)
        return;
    const int t = (int)(item / nh), h = (int)(item % nh), kh = h / a.group;
    int lo_s = 0, hi_s = n_seqs - 1; /* the sequence of token t: last s with q_indptr[s] <= t */
    while (lo_s < hi_s) {
        const int mid = (lo_s + hi_s + 1) >> 1;
        if (a.q_indptr[mid] <= t) lo_s = mid;
        else hi_s = mid - 1;
    }
    const int32_t *pages = a.page_ids + a.page_indptr[lo_s];
    const int p = a.pos[t];
    const int lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
    const int kv_dim = a.nkv * hd;
    const T *qr = (const T *)a.q + (int64_t)t * a.ldq + (int64_t)h * hd;
    float q[8], o[8];
    int ne = 0;
    for (int e = lane; e < hd; e += 32) {
        q[ne] = to_f32(qr[e]);
        o[ne] = 0.0f;
        ne++;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = lo; j <= p; j++) {
        const char *row = a.kv_base + (size_t)pages[j / a.page_tokens] * a.page_bytes +
                          (size_t)(j % a.page_tokens) * (size_t)kv_dim * sizeof(KT) + (size_t)kh * hd * sizeof(KT);
        const KT *kr = (const KT *)(row + a.k_off), *vr = (const KT *)(row + a.v_off);
        float d = 0.0f;
        int k = 0;
        for (int e = lane; e < hd; e += 32) d += q[k++] * kv_f32(kr[e], a.k_scale);
        d = warp_sum(d) * scale;
        if (cap > 0.0f)
            d = cap * tanhf(d / cap);
        const float mn = fmaxf(m, d), alpha = expf(m - mn), w = expf(d - mn);
        l = l * alpha + w;
        k = 0;
        for (int e = lane; e < hd; e += 32, k++) o[k] = o[k] * alpha + w * kv_f32(vr[e], a.v_scale);
        m = mn;
    }
    T *orow = (T *)a.out + (int64_t)t * a.ldo + (int64_t)h * hd;
    int k = 0;
    for (int e = lane; e < hd; e += 32) orow[e] = from_f32<T>(o[k++] / l);
}

int cu_attention_window(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m, int n_heads,
                        float scale)
{
    cuda_ctx *c = CU_CTX(be);
    const cu_paged_attn a = cu_paged_attn_of(out, q, kv, m, n_heads);
    const int64_t items = (int64_t)m->n_tokens * n_heads;
    const unsigned blocks = (unsigned)((items + 3) / 4);
    const bool f8 = kv.dtype == LG_F8E4M3;
    if (q.dtype == LG_F16)
        (void)cu_launch(c, f8 ? attention_window_kernel<__half, __nv_fp8_e4m3> : attention_window_kernel<__half, __half>,
                        blocks, 128, 0, a, kv.head_dim, n_heads, m->n_seqs, m->n_tokens, kv.window, scale, kv.softcap);
    else
        (void)cu_launch(c,
                        f8 ? attention_window_kernel<__nv_bfloat16, __nv_fp8_e4m3>
                           : attention_window_kernel<__nv_bfloat16, __nv_bfloat16>,
                        blocks, 128, 0, a, kv.head_dim, n_heads, m->n_seqs, m->n_tokens, kv.window, scale, kv.softcap);
    CU_LAUNCHED(c);
    return 0;
}
