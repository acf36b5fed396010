/*
 * attention_args.cuh — what the three attention kernels (attention_decode.cu,
 * attention_prefill.cu, attention_prefill_fa2.cu) take about the step's
 * queries and its paged KV cache, built in one place.
 *
 * cu_paged_attn is a non-owning view passed by value to the kernels (each
 * kernel's argument struct derives from it and adds its own plan): q and out
 * rows, the layer's K/V pages (engine/backend/backend.h lg_kv_view: K of
 * (page p, slot s) at kv_base + p * page_bytes + k_off + s * kv_dim * esize)
 * and the step's metadata arrays (lg_step_meta: device pointers, valid for
 * the step). An e4m3 cache (kv.dtype LG_F8E4M3, esize 1) also carries the
 * layer's k_scale / v_scale; attention_decode.cu and attention_window.cu
 * read such a cache (attention.cu routes it there), the tensor-core
 * prefill kernels' launchers refuse it. cu_paged_attn_of fills it from the op's arguments, after
 * cu_attention has checked them.
 */
#ifndef LG_ATTENTION_ARGS_CUH
#define LG_ATTENTION_ARGS_CUH

#include "kernels/cuda_common.cuh"

struct cu_paged_attn {
    const void *q;         /* [T, n_heads * head_dim], row stride ldq */
    int64_t ldq;
    void *out;             /* [T, n_heads * head_dim], row stride ldo */
    int64_t ldo;
    const char *kv_base;   /* the pool */
    size_t page_bytes, k_off, v_off;
    int page_tokens, nkv, group;  /* group: query heads per kv head */
    float k_scale, v_scale;       /* an e4m3 cache's scales (lg_kv_kscale / lg_kv_vscale), else 1 */
    const int32_t *pos, *q_indptr, *page_indptr, *page_ids; /* lg_step_meta's */
};

static inline cu_paged_attn cu_paged_attn_of(lg_tensor out, lg_tensor q, const lg_kv_view &kv, const lg_step_meta *m,
                                             int n_heads)
{
    cu_paged_attn a;
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
    a.k_scale = lg_kv_kscale(&kv);
    a.v_scale = lg_kv_vscale(&kv);
    a.pos = m->pos;
    a.q_indptr = m->q_indptr;
    a.page_indptr = m->page_indptr;
    a.page_ids = m->page_ids;
    return a;
}

#endif
