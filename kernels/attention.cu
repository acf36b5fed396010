/*
 * attention.cu — causal paged attention over the flattened batch: picks
 * one of the two kernels and checks what both need.
 *
 *   for t < T in sequence s, query head h, kv head kh = h / (n_heads / n_kv):
 *     out[t, h] = sum_{j <= pos[t]} softmax_j(scale * q[t, h] . K_s[j, kh]) V_s[j, kh]
 *   K_s[j] = slot j % page_tokens of page page_ids[page_indptr[s] + j / page_tokens]
 *
 * Choice: a step whose longest query run is 1 (pure decode) goes to the
 * split-K decode kernel (attention_decode.cu); a step with prefill chunks
 * goes to FlashAttention-2 on mma.sync (attention_prefill_fa2.cu) when
 * head_dim is 64 or 128, else to the wmma kernel (attention_prefill.cu)
 * when head_dim % 16 == 0 and head_dim <= 256, else to the decode kernel,
 * which handles any query length and any head_dim % 8 == 0 up to 256 on
 * CUDA cores. LG_ATTN_FA2=0 sends prefill to the wmma kernel always.
 * A layer with a sliding window or soft-capped scores (kv.window,
 * kv.softcap: Mistral, Qwen2, Phi-3, Gemma) goes to attention_window.cu
 * whatever the step's shape; the kernels above never see one. An e4m3
 * cache (`--kv-cache-dtype fp8`, kv.dtype LG_F8E4M3; elements read back
 * times the layer's k_scale / v_scale): prefill to FA2 (head_dim 64 / 128;
 * LG_ATTN_FA2=0 or another head_dim: the split-K kernel, on CUDA cores,
 * for the wmma kernel takes 16-bit caches only), decode to the split-K
 * kernel, windowed / soft-capped layers to the window kernel.
 */
#include "kernels/ops.cuh"

int cu_attention(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m, int n_heads,
                 float scale)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "attention out", out);
    CU_CHECK_VIEW(c, "attention q", q);
    if (!m)
        return CU_FAIL(c, "attention: step meta is NULL");
    const int hd = kv.head_dim, nkv = kv.n_kv_heads;
    const bool f8 = kv.dtype == LG_F8E4M3;
    if (q.dtype != out.dtype || !cu_is_half(q.dtype) || (!f8 && kv.dtype != q.dtype))
        return CU_FAIL(c, "attention: q %s, out %s must be one 16-bit dtype and the cache %s that dtype or f8e4m3",
                       lg_dtype_name(q.dtype), lg_dtype_name(out.dtype), lg_dtype_name(kv.dtype));
    if (nkv <= 0 || n_heads <= 0 || n_heads % nkv)
        return CU_FAIL(c, "attention: n_heads %d is not a multiple of n_kv_heads %d", n_heads, nkv);
    if (hd <= 0 || hd % 8 || hd > 256)
        return CU_FAIL(c, "attention: head_dim must be a multiple of 8 up to 256, found %d", hd);
    if (q.cols < (int64_t)n_heads * hd || out.cols < (int64_t)n_heads * hd || q.rows < m->n_tokens ||
        out.rows < m->n_tokens)
        return CU_FAIL(c, "attention: q [%lld,%lld] / out [%lld,%lld] too small for %d tokens x %d heads x %d",
                       (long long)q.rows, (long long)q.cols, (long long)out.rows, (long long)out.cols, m->n_tokens,
                       n_heads, hd);
    if (!cu_aligned16(kv.base) || kv.page_bytes % 16 || kv.k_off % 16 || kv.v_off % 16 || kv.page_tokens <= 0)
        return CU_FAIL(c, "attention: the KV pool, page size and K/V offsets must be 16-byte aligned");
    if (m->n_tokens == 0)
        return 0;
    if (kv.window > 0 || kv.softcap > 0) /* sliding-window or soft-capped layers */
        return cu_attention_window(be, out, q, kv, m, n_heads, scale);
    if (f8) { /* an e4m3 cache: FA2 for prefill where it runs, else the split-K kernel, whatever the query runs */
        if (m->max_q_len > 1 && c->tune->attn_fa2) {
            const int r = cu_attention_prefill_fa2(be, out, q, kv, m, n_heads, scale);
            if (r <= 0)
                return r;
        }
        return cu_attention_decode(be, out, q, kv, m, n_heads, scale);
    }
    if (m->max_q_len > 1 && hd % 16 == 0 && q.stride % 8 == 0 && cu_aligned16(q.data)) {
        if (c->tune->attn_fa2) {
            const int r = cu_attention_prefill_fa2(be, out, q, kv, m, n_heads, scale);
            if (r <= 0)
                return r;
        }
        return cu_attention_prefill(be, out, q, kv, m, n_heads, scale);
    }
    return cu_attention_decode(be, out, q, kv, m, n_heads, scale);
}
