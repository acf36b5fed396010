/*
 * model.c — Llama forward pass over the backend ops (see model.h).
 *
 * Per layer, for the T tokens of the step (x is the f32/act residual stream):
 *   xn  = rmsnorm(x (+ previous mlp out)) * ln1        add_rmsnorm
 *   qkv = xn @ Wqkv^T (+ bqkv)                          matmul
 *   rope(q, k); kv_write(k, v -> pages)                 rope, kv_write (or rope_kv_write)
 *   a   = attention(q, pages)                           attention
 *   o   = a @ Wo^T                                      matmul
 *   xn  = rmsnorm(x += o) * ln2                         add_rmsnorm
 *   gu  = xn @ Wgu^T;  h = silu(g) * u                  matmul, silu_mul
 *   m   = h @ Wdown^T                                   matmul (added next layer)
 * then xn = rmsnorm(x += m) * norm, gather the rows that need logits, and
 * logits = rows @ lm_head^T. Where the backend has norm_matmul (CUDA; steps
 * of LG_NORM_MATMUL_MAX_T = 1 row) and no adapter of the step targets the projection,
 * each add_rmsnorm runs inside the matmul after it, silu_mul inside the
 * gate,up matmul, and rope + KV write inside the q,k,v matmul: five
 * launches per layer instead of nine (norm_linear()).
 *
 * Family switches (model_arch.h, read from the config here and nowhere
 * else): embed_scale -> scale_cap after embed; qk_norm -> head_rmsnorm on q
 * and k before RoPE (RoPE then never fused into the matmul); post_norms ->
 * the attention and MLP outputs normed into pn before the residual add;
 * act -> gelu_mul instead of silu_mul (never fused); each layer's kv view
 * carries its sliding window and the score soft-cap; final_softcap ->
 * scale_cap on the logits; Gemma 3's sliding layers take inv_freq_local.
 * The partial-rotary / LongRoPE row transform and the 1 + w norms are done
 * at upload (qk_transform, upload_norm).
 * Weights: a GGUF file's quantized matrices reach a backend that takes
 * their layout (backend.h takes_quant; the CPU) in their blocks, fused
 * q,k,v and gate,up included (rows concatenated, blocks unchanged); where
 * the fused parts have different layouts (Q4_K_M files: v in Q6_K) each
 * part is its own tensor and matmul runs once per part into its columns
 * (wsplit). Other backends (CUDA) get them expanded at upload to the
 * config's weight_dtype and then to their own dtype, as when the loader
 * expanded them. As each tensor is uploaded, its file pages are dropped
 * from the process (lg_weights_drop_pages): the backend's copy is the one
 * that stays resident, and the load's peak is about one copy, not two.
 *
 * Memory: weights in one backend allocation (carved, llm.c style);
 * activations in a second one sized for max_step_tokens; step metadata in a
 * third, filled by one upload per step. Prompt logprobs (lg_step_seq
 * lp_count) have two more: prompt_logit_rows gathered rows and their f32
 * logits, which bound what a step may ask for (the engine chunks long
 * prompts to fit).
 *
 * Step graphs: a decode-shaped step (every query run 1 token) is recorded
 * by the backend the first time its shape key is seen and replayed after
 * (backend.h graph_begin). The key holds every host value a launch shape
 * depends on: token/sequence/logit counts, max_kv_len rounded up to a
 * bucket (kv_bucket; attention's split count derives from it) where the
 * backend's decode_kv_key says the launches depend on it, the LoRA
 * segment count and longest segment, the set of LoRA modules in use, and the
 * KV pool. Everything else a step changes is in the metadata buffers,
 * uploaded before the replay. Prefill steps run eagerly. LG_NO_GRAPHS=1
 * turns graphs off (eager and replayed steps compute bit-identical results).
 *
 * LoRA: q,k,v share one shrink and one expand launch (lora_*_multi), and so
 * do gate,up; modules that no adapter of the step targets are skipped. With
 * the backend's matmul_lora (CUDA: for prefill-shaped launches the expand
 * stores y before the matmul adds into it), matmul, shrink and expand are
 * one op (see linear()), and for q,k,v rope + KV write too (CUDA: a decode
 * step's expand does it in its launch).
 *
 * Layout of this file: lg_model_create is model_opts, upload_weights,
 * alloc_activations, alloc_sampling, alloc_step_meta and alloc_lora;
 * lg_model_launch is check_launch, shape_of, upload_penalties, upload_meta,
 * upload_lora_table, run_forward (forward(), recorded under decode_key() or
 * eager) and the sampler's launch. The switches it reads (LG_HOST_SAMPLE,
 * LG_NO_GRAPHS, LG_STEP_TIMING) come from the backend's table at create
 * (lg_backend_tuning, engine/base/tuning.h).
 */
#include "engine/model/model.h"
#include "engine/model/model_arch.h"
#include "engine/model/quant.h"
#include "engine/model/model_tp.h"
#include "engine/model/weights_shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEP_T_MAX 8192 /* LG_STEP_TIMING: decode steps kept for the medians */

/* the sampling rows travel in the int32 metadata buffer */
#define SAMPLE_ROW_INTS (sizeof(lg_sample_row) / sizeof(int32_t))
_Static_assert(sizeof(lg_sample_row) % sizeof(int32_t) == 0 && _Alignof(lg_sample_row) <= _Alignof(int32_t),
               "lg_sample_row: whole int32 words");

/* A fused weight whose parts have different quantized layouts: the parts, each [rows_i, K], whose
 * outputs are consecutive column ranges of the fused output (n = 0: the fused tensor is one). */
typedef struct wsplit {
    int n;
    lg_tensor part[3];
} wsplit;

typedef struct layer_w {
    lg_tensor ln1, ln2;  /* [1, d] f32 (ln2: the MLP's input norm; Gemma's pre_feedforward_layernorm) */
    lg_tensor post_attn, post_ff; /* [1, d] f32: Gemma's norms of the attention and MLP outputs, or data NULL */
    lg_tensor q_norm, k_norm;     /* [1, hd] f32: per-head q/k norms (Qwen3, Gemma 3), or data NULL */
    lg_tensor wqkv;      /* [(H + 2 Hkv) hd, d] (data NULL when split) */
    lg_tensor bqkv;      /* [1, (H + 2 Hkv) hd] f32 or data NULL */
    lg_tensor wo;        /* [d, H hd] */
    lg_tensor wgu;       /* [2 F, d] (data NULL when split) */
    lg_tensor wdown;     /* [d, F] */
    wsplit qkv_split, gu_split;
} layer_w;

struct lg_model {
    lg_backend *be;
    lg_model_config cfg;
    lg_model_opts opts;
    void *wbuf;          /* all weights */
    lg_tensor embed;     /* [V, d] */
    lg_tensor norm;      /* [1, d] f32 */
    lg_tensor lm_head;   /* [V, d] (may alias embed) */
    layer_w *layers;
    float *inv_freq;     /* device [hd/2] */
    float *inv_freq_local; /* device [hd/2]: sliding layers' RoPE (Gemma 3), or NULL: inv_freq */
    float embed_mult;    /* Gemma: sqrt(hidden_size) in the weights' dtype, else 1 */
    lg_dtype kv_dtype;   /* the KV cache's: the act dtype, or LG_F8E4M3 (opts.kv_fp8) */
    float *kv_scales;    /* [2 * n_layers]: layer l's k_scale, v_scale (an e4m3 cache; 1 unless the checkpoint has them) */
    /* activations */
    void *abuf;
    lg_tensor x, xn, qkv, attn, o, gu, act, mlp, rows, logits;
    lg_tensor pn;        /* [T, d]: a post-norm's output (Gemma), or data NULL */
    lg_tensor x2;        /* [LG_NORM_MATMUL_MAX_T or max_seqs, d]: the residual's second buffer (norm_linear) */
    lg_tensor prows;     /* [prompt_logit_rows, d] act: the gathered rows of prompt logprobs */
    lg_tensor plogits;   /* [prompt_logit_rows, V] f32: their logits (own allocation) */
    lg_tensor lora_tmp;  /* [T, lora_max_rank] */
    lg_lora_w *lora_w_dev, *lora_w_host; /* [max_seqs * n_slots] */
    int32_t *lora_seg_dev, *lora_seg_host; /* [max_seqs + 1] */
    unsigned *lora_seg_mods; /* [max_seqs]: bit m when segment s has rank > 0 at module m in some layer */
    int *lora_seg_rank;      /* [max_seqs]: segment s's largest rank at any slot */
    int lora_synced;         /* segments [0, lora_synced) of lora_w_host equal lora_w_dev (see lg_model_launch) */
    lg_lora_w *lora_w_zero;  /* [n_slots] zeros: the table of a segment without adapter */
    /* LG_STEP_TIMING=1: where a step's host time goes, printed by lg_model_free (diagnostic) */
    bool timing;
    long t_steps, t_table_uploads;
    double t_table_bytes;
    float *t_us; /* [4][STEP_T_MAX]: metadata, LoRA table, forward launch, sampling + download, us */
    /* step metadata (device) + host staging */
    int32_t *meta_dev;
    int32_t *meta_host;
    bool dev_sample;                /* the backend samples: the step's rows ride in the metadata upload */
    int32_t *sample_ids_dev;        /* [max_seqs] ids, then [max_seqs] lg_logprob_row (one download) */
    int32_t *sample_out_host;       /* [2] x the same layout on the host: the downloads' destinations, by launch parity */
    bool out_pinned;                /* sample_out_host from alloc_host (download_async can write it) */
    size_t out_ints;                /* int32 words of one sample_out_host slot */
    /* steps launched and not yet collected (lg_model_launch / lg_model_collect), oldest first */
    struct inflight {
        int n_logits;
        int n_plog;                  /* prompt-logit rows (downloaded at collect) */
        bool sample, lp, logits;     /* sampled on the device; logprobs, logits downloaded */
        bool decode;                 /* one token a sequence (LG_STEP_TIMING's host times) */
        int slot;                    /* sample_out_host slot */
        uint64_t ticket;             /* download_async's, 0: download at collect */
        double t[4];                 /* LG_STEP_TIMING: the launch's host times */
    } fl[2];
    int n_fl;
    long n_launched;
    int last_sampled;               /* rows the last launched step sampled into sample_ids_dev (a continuation's tokens) */
    int32_t *pen_dev;               /* [2 * pen_cap]: the step's penalty pairs, grown on demand */
    int pen_cap;
    uint32_t *mask_dev;             /* [mask_cap]: the step's grammar masks (lg_step_masks), grown on demand */
    size_t mask_cap;
    size_t meta_cap;     /* int32 elements */
    size_t page_bytes;
    bool no_graphs;      /* step graphs off: backend lacks them, LG_NO_GRAPHS is set, or recording failed */
    /* tensor parallelism (model_tp.c): rank tp_rank of tp_size; cfg is the rank's shard (heads, KV heads
     * and d_ff divided by tp_size), full_cfg the model's; rank 0 drives the others through tp */
    int tp_rank, tp_size;
    lg_model_config full_cfg;
    lg_tp *tp;
};

const lg_model_config *lg_model_cfg(const lg_model *m) { return &m->full_cfg; }
const lg_model_opts *lg_model_options(const lg_model *m) { return &m->opts; }
size_t lg_model_kv_page_bytes(const lg_model *m) { return m->page_bytes; }
lg_dtype lg_model_kv_dtype(const lg_model *m) { return m->kv_dtype; }

int lg_kv_cache_dtype_parse(const char *s, bool *fp8)
{
    if (!strcmp(s, "auto"))
        *fp8 = false;
    else if (!strcmp(s, "fp8") || !strcmp(s, "fp8_e4m3"))
        *fp8 = true;
    else
        return -1;
    return 0;
}

/* The first element of a scalar (or one-element) tensor as f32; false when it is absent or not one float. */
static bool scalar_of(const lg_weights *w, const char *name, float *out)
{
    const lg_wtensor *t = lg_weights_get(w, name);
    if (!t || t->q != LG_QNONE || t->nbytes != lg_dtype_size(t->dtype) || t->dtype == LG_I32)
        return false;
    lg_to_f32(out, t->data, t->dtype, 1);
    return true;
}

/* Each layer's KV cache scales: 1, or with an e4m3 cache the checkpoint's
 * model.layers.N.self_attn.k_scale / v_scale (compressed-tensors'
 * kv_cache_scheme; vLLM's names), else ModelOpt's k_proj.k_scale /
 * v_proj.v_scale, else k_proj.output_scale / v_proj.output_scale (older
 * compressed-tensors), else one kv_scale for both: the names vLLM maps to
 * its attention's k_scale / v_scale. A 16-bit cache ignores them, as vLLM
 * does with kv_cache_dtype auto. */
static int read_kv_scales(lg_model *m, const lg_weights *w, lg_err *err)
{
    static const char *const names[][2] = {{"self_attn.k_scale", "self_attn.v_scale"},
                                           {"self_attn.k_proj.k_scale", "self_attn.v_proj.v_scale"},
                                           {"self_attn.k_proj.output_scale", "self_attn.v_proj.output_scale"},
                                           {"self_attn.kv_scale", "self_attn.kv_scale"}};
    int found = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            float *dst = &m->kv_scales[2 * l + kv];
            *dst = 1.0f;
            if (m->kv_dtype != LG_F8E4M3)
                continue;
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                char name[160];
                snprintf(name, sizeof name, "model.layers.%d.%s", l, names[i][kv]);
                float v;
                if (!scalar_of(w, name, &v))
                    continue;
                if (!(v > 0) || !isfinite(v))
                    return lg_fail(err, "%s = %g: a KV cache scale must be finite and > 0", name, v);
                *dst = v;
                found++;
                break;
            }
        }
    if (found > 0 && found < 2 * m->cfg.n_layers)
        return lg_fail(err, "the checkpoint has KV cache scales for %d of %d layers' K and V; expected all or none",
                       found, 2 * m->cfg.n_layers);
    return 0;
}

/* ---- weight upload ------------------------------------------------------------ */

typedef struct upload_ctx {
    lg_backend *be;
    char *base;
    size_t off, cap;
    lg_err *err;
    lg_dtype deq_dt; /* what quantized weights expand to first (the config's weight_dtype) */
    const lg_weights *w; /* where the tensors come from: their file pages are dropped once copied */
    bool w8a8_noticed;   /* the W8A8-expanded notice was printed */
} upload_ctx;

static void *carve(upload_ctx *u, size_t n)
{
    size_t off = (u->off + 255) & ~(size_t)255;
    if (off + n > u->cap)
        return NULL;
    u->off = off + n;
    return u->base + off;
}

/* Uploads rows of `src` (any float dtype, or quantized: expanded to u->deq_dt first, as the loader's
 * --dequant-dtype does) converted to `dt` at dst + row offset. */
static int upload_rows(upload_ctx *u, void *dst, lg_dtype dt, const lg_wtensor *src)
{
    int64_t rows = src->n_dims == 1 ? 1 : src->shape[0];
    int64_t cols = src->n_dims == 1 ? src->shape[0] : src->shape[1];
    size_t n = (size_t)rows * (size_t)cols;
    if (src->q == LG_QNONE && src->dtype == dt) {
        const int rc = u->be->i.upload(u->be, dst, src->data, n * lg_dtype_size(dt));
        lg_weights_drop_pages(u->w, src->data, src->nbytes);
        return rc;
    }
    if (lg_qtype_is_w8a8(src->q) && !u->w8a8_noticed) {
        u->w8a8_noticed = true;
        fprintf(stderr, "notice: backend %s does not take the W8A8 layout %s: its weights are expanded to %s and the "
                        "model runs W8A16 (no activation rounding)\n", u->be->i.name, lg_qtype_get(src->q).name,
                lg_dtype_name(u->deq_dt));
    }
    /* convert in chunks of rows to bound host memory */
    const lg_dtype sdt = src->q != LG_QNONE ? u->deq_dt : src->dtype; /* the rows' dtype before converting */
    const size_t src_row = src->q != LG_QNONE ? src->nbytes / (size_t)rows : (size_t)cols * lg_dtype_size(sdt);
    size_t chunk_rows = (size_t)(1 << 20) / (size_t)cols + 1;
    float *tmp = malloc(chunk_rows * (size_t)cols * 4);
    void *out = malloc(chunk_rows * (size_t)cols * lg_dtype_size(dt));
    void *deq = src->q != LG_QNONE ? malloc(chunk_rows * (size_t)cols * lg_dtype_size(sdt)) : NULL;
    if (!tmp || !out || (src->q != LG_QNONE && !deq)) {
        free(tmp);
        free(out);
        free(deq);
        return lg_fail(u->err, "out of memory converting %s", src->name);
    }
    int rc = 0;
    for (size_t r = 0; r < (size_t)rows && rc == 0; r += chunk_rows) {
        size_t nr = (size_t)rows - r < chunk_rows ? (size_t)rows - r : chunk_rows;
        size_t ne = nr * (size_t)cols;
        const void *rows_in = (const char *)src->data + r * src_row;
        if (deq) {
            if (lg_qtype_is_planar(src->q)) /* planes, not rows of blocks: decode the row range */
                rc = lg_dequant_planar_rows(src->q, src->data, rows, cols, (int64_t)r, (int64_t)nr, sdt, deq, u->err);
            else
                rc = lg_dequant(lg_qtype_ggml(src->q), rows_in, (int64_t)nr, cols, sdt, deq, NULL, 0, u->err);
            rows_in = deq;
            if (rc == 0 && sdt == dt) {
                rc = u->be->i.upload(u->be, (char *)dst + r * (size_t)cols * lg_dtype_size(dt), deq,
                                     ne * lg_dtype_size(dt));
                continue;
            }
        }
        if (rc != 0)
            break;
        lg_to_f32(tmp, rows_in, sdt, ne);
        lg_from_f32(out, dt, tmp, ne);
        rc = u->be->i.upload(u->be, (char *)dst + r * (size_t)cols * lg_dtype_size(dt), out, ne * lg_dtype_size(dt));
    }
    free(tmp);
    free(out);
    free(deq);
    lg_weights_drop_pages(u->w, src->data, src->nbytes);
    return rc;
}

static size_t tensor_elems(const lg_wtensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (size_t)t->shape[i];
    return n;
}

static const lg_wtensor *need(const lg_weights *w, lg_err *err, const char *fmt, int layer)
{
    char name[160];
    snprintf(name, sizeof name, fmt, layer);
    const lg_wtensor *t = lg_weights_get(w, name);
    if (!t)
        lg_fail(err, "model is missing tensor %s", name);
    return t;
}

/* Concatenates tensors (same cols) along rows into one backend matrix of dtype dt. */
static int upload_cat(upload_ctx *u, lg_tensor *out, lg_dtype dt, const lg_wtensor **parts, int n)
{
    int64_t rows = 0, cols = parts[0]->n_dims == 1 ? parts[0]->shape[0] : parts[0]->shape[1];
    for (int i = 0; i < n; i++) rows += parts[i]->n_dims == 1 ? 1 : parts[i]->shape[0];
    if (parts[0]->n_dims == 1) { /* biases: concatenate along cols into one row */
        cols = 0;
        for (int i = 0; i < n; i++) cols += parts[i]->shape[0];
        rows = 1;
    }
    char *dst = carve(u, (size_t)rows * (size_t)cols * lg_dtype_size(dt));
    if (!dst)
        return lg_fail(u->err, "weight buffer overflow (internal size mismatch)");
    *out = lg_tensor_2d(dst, dt, rows, cols);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (upload_rows(u, dst + off, dt, parts[i]) != 0)
            return lg_fail(u->err, "uploading %s failed", parts[i]->name);
        off += tensor_elems(parts[i]) * lg_dtype_size(dt);
    }
    return 0;
}

static bool takes(const lg_backend *be, lg_qtype q)
{
    return q != LG_QNONE && be->i.takes_quant && be->i.takes_quant((lg_backend *)be, q);
}

/* Planar parts (same layout and cols) as one planar tensor: each plane is the parts' planes one after the
 * other (q planes of all parts, then their d planes, then their a or z planes: backend.h lg_qplanes_of), so the
 * rows are concatenated. */
static int upload_planes(upload_ctx *u, lg_tensor *out, lg_qtype q, const lg_wtensor **parts, int n)
{
    int64_t rows = 0;
    const int64_t cols = parts[0]->shape[1];
    for (int i = 0; i < n; i++)
        rows += parts[i]->shape[0];
    const size_t bytes = lg_planar_bytes(q, rows, cols);
    char *dst = carve(u, bytes);
    if (!dst)
        return lg_fail(u->err, "weight buffer overflow (internal size mismatch)");
    *out = lg_tensor_quant(dst, q, rows, cols);
    const lg_qplanes all = lg_qplanes_of(*out);
    const size_t d_el = q == LG_QI4 ? 2 : 4, nb = (size_t)all.nb;
    /* per plane: its base in the whole tensor and the bytes a row takes (a z plane is followed by its padding) */
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        const lg_qplanes p = lg_qplanes_of(lg_tensor_quant((void *)parts[i]->data, q, parts[i]->shape[0], cols));
        const size_t pr = (size_t)parts[i]->shape[0];
        int rc = u->be->i.upload(u->be, all.q + (size_t)r0 * (size_t)all.q_row, p.q, pr * (size_t)p.q_row);
        rc = rc ? rc : u->be->i.upload(u->be, (char *)all.d + (size_t)r0 * nb * d_el, p.d, pr * nb * d_el);
        if (!rc && all.a)
            rc = u->be->i.upload(u->be, all.a + (size_t)r0 * nb, p.a, pr * nb * 4);
        if (!rc && all.z) { /* z, then its padding (zeros) after all rows */
            rc = u->be->i.upload(u->be, all.z + (size_t)r0 * nb, p.z, pr * nb);
            rc = rc ? rc : u->be->i.upload(u->be, all.z + ((size_t)rows + (size_t)r0) * nb, p.z + pr * nb, pr * nb);
        }
        if (rc != 0)
            return lg_fail(u->err, "uploading %s failed", parts[i]->name);
        lg_weights_drop_pages(u->w, parts[i]->data, parts[i]->nbytes);
        r0 += parts[i]->shape[0];
    }
    return 0;
}

/* Quantized parts (same cols) in their blocks, rows concatenated, as one backend tensor of layout q. */
static int upload_blocks(upload_ctx *u, lg_tensor *out, lg_qtype q, const lg_wtensor **parts, int n)
{
    if (lg_qtype_is_planar(q))
        return upload_planes(u, out, q, parts, n);
    int64_t rows = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        rows += parts[i]->shape[0];
        bytes += parts[i]->nbytes;
    }
    char *dst = carve(u, bytes);
    if (!dst)
        return lg_fail(u->err, "weight buffer overflow (internal size mismatch)");
    *out = lg_tensor_quant(dst, q, rows, parts[0]->shape[1]);
    for (size_t i = 0, off = 0; i < (size_t)n; off += parts[i]->nbytes, i++) {
        if (u->be->i.upload(u->be, dst + off, parts[i]->data, parts[i]->nbytes) != 0)
            return lg_fail(u->err, "uploading %s failed", parts[i]->name);
        lg_weights_drop_pages(u->w, parts[i]->data, parts[i]->nbytes);
    }
    return 0;
}

/* A weight made of parts whose rows are concatenated (q,k,v; gate,up; or one tensor): in its quantized
 * blocks where every part has the same layout and the backend takes it; where the parts' layouts differ
 * and the backend takes each, part by part (*split, when the caller can run a split weight); else
 * converted (expanded) to dt. */
static int upload_weight(upload_ctx *u, lg_tensor *out, wsplit *split, lg_dtype dt, const lg_wtensor **parts, int n)
{
    bool same = true, each = true;
    for (int i = 0; i < n; i++) {
        same = same && parts[i]->q == parts[0]->q && parts[i]->shape[1] == parts[0]->shape[1];
        each = each && takes(u->be, parts[i]->q);
    }
    if (same && each)
        return upload_blocks(u, out, parts[0]->q, parts, n);
    if (each && split && n <= 3) {
        int64_t rows = 0;
        for (int i = 0; i < n; i++) {
            if (upload_blocks(u, &split->part[i], parts[i]->q, &parts[i], 1) != 0)
                return -1;
            rows += parts[i]->shape[0];
        }
        split->n = n;
        *out = lg_tensor_2d(NULL, LG_F32, rows, parts[0]->shape[1]);
        return 0;
    }
    return upload_cat(u, out, dt, parts, n);
}

/* Weight dtype on the backend for a stored dtype: the CPU keeps it as stored;
 * a backend with 16-bit activations takes 16-bit weights. */
static lg_dtype backend_wdtype(const lg_backend *be, lg_dtype stored)
{
    if (be->act_dtype == LG_F32)
        return stored;
    return be->act_dtype;
}

/* RoPE inverse frequencies [hd/2] in the engine's pairing (model_arch.h, lg_arch_qk_row): the first
 * rot_dim / 2 pairs rotate, the rest (partial rotary) get 0. theta: the base; scaled: the config's
 * rope scaling applies (Gemma 3's sliding layers have their own base and none). LongRoPE takes its
 * long factors when the served context is longer than original_max_position_embeddings, else its
 * short ones (llama.cpp's rule; transformers switches per forward by the longest position). */
static void compute_inv_freq(const lg_model_config *c, const lg_weights *w, double theta, bool scaled, int max_context,
                             float *out)
{
    const int half = c->head_dim / 2, rot = c->rot_dim > 0 ? c->rot_dim : c->head_dim;
    const lg_wtensor *rf = lg_weights_get(w, "rope_freqs");
    float rfv[1024];
    if (rf && (int)tensor_elems(rf) == half && scaled)
        lg_to_f32(rfv, rf->data, rf->dtype, (size_t)half);
    else
        rf = NULL;
    const float *ext = c->rope_scaling == LG_ROPE_LONGROPE
                           ? (max_context > c->rope_orig_max_pos ? c->rope_long : c->rope_short)
                           : NULL;
    for (int i = 0; i < half; i++) {
        if (i >= rot / 2) {
            out[i] = 0.0f;
            continue;
        }
        double inv = 1.0 / pow(theta, (double)(2 * i) / (double)rot);
        if (scaled && c->rope_scaling == LG_ROPE_LINEAR) {
            inv /= c->rope_factor;
        } else if (scaled && c->rope_scaling == LG_ROPE_LLAMA3) {
            double old = c->rope_orig_max_pos, lf = c->rope_low_freq_factor, hf = c->rope_high_freq_factor;
            double low_wl = old / lf, high_wl = old / hf;
            double wl = 2.0 * M_PI / inv;
            if (wl > low_wl) {
                inv = inv / c->rope_factor;
            } else if (wl >= high_wl) {
                double smooth = (old / wl - lf) / (hf - lf);
                inv = (1.0 - smooth) * inv / c->rope_factor + smooth * inv;
            }
        } else if (scaled && ext) {
            inv /= (double)ext[i];
        }
        if (rf)
            inv /= rfv[i];
        out[i] = (float)inv;
    }
}

/* A host copy of t with the q/k row transform (lg_arch_qk_row) applied to rows [row0, row0 + n_heads *
 * head_dim) (a 1-D tensor: its elements): each head's rows permuted and scaled, in t's dtype. *buf
 * owns the copy (the caller frees it). */
static int qk_transform(const lg_model_config *c, const lg_wtensor *t, int64_t row0, int n_heads, lg_wtensor *out,
                        void **buf, lg_err *err)
{
    const int hd = c->head_dim;
    if (t->q != LG_QNONE)
        return lg_fail(err, "%s: partial rotary or LongRoPE on quantized q/k weights is not implemented; load with "
                       "--dequant-dtype f16", t->name);
    const size_t es = lg_dtype_size(t->dtype);
    const size_t cols = t->n_dims == 1 ? 1 : (size_t)t->shape[1];
    const size_t row_bytes = cols * es;
    if (!*buf) {
        *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!*buf)
            return lg_fail(err, "out of memory transforming %s", t->name);
        memcpy(*buf, t->data, t->nbytes);
    }
    *out = *t;
    out->data = *buf;
    float *row = malloc(cols * 4);
    if (!row)
        return lg_fail(err, "out of memory transforming %s", t->name);
    for (int h = 0; h < n_heads; h++)
        for (int e = 0; e < hd; e++) {
            int src;
            float f;
            lg_arch_qk_row(c, e, &src, &f);
            const char *from = (const char *)t->data + ((size_t)row0 + (size_t)h * hd + (size_t)src) * row_bytes;
            char *to = (char *)*buf + ((size_t)row0 + (size_t)h * hd + (size_t)e) * row_bytes;
            lg_to_f32(row, from, t->dtype, cols);
            for (size_t k = 0; k < cols; k++) row[k] *= f;
            lg_from_f32(to, t->dtype, row, cols);
        }
    free(row);
    return 0;
}

/* A norm weight [1, n] as f32, plus one where the family's norm multiplies by 1 + w (Gemma), its
 * elements permuted by the q/k row transform when perm (the q/k norms). */
static int upload_norm(upload_ctx *u, lg_tensor *out, const lg_model_config *c, const lg_wtensor *t, bool perm)
{
    const size_t n = tensor_elems(t);
    float *v = malloc(n * 4), *p = malloc(n * 4);
    if (!v || !p) {
        free(v);
        free(p);
        return lg_fail(u->err, "out of memory converting %s", t->name);
    }
    lg_to_f32(v, t->data, t->dtype, n);
    for (size_t i = 0; i < n; i++) {
        int src = (int)i;
        float f;
        if (perm)
            lg_arch_qk_row(c, (int)i, &src, &f);
        p[i] = v[src] + (c->norm_plus_one ? 1.0f : 0.0f);
    }
    free(v);
    float *dst = carve(u, n * 4);
    int rc = dst ? u->be->i.upload(u->be, dst, p, n * 4) : lg_fail(u->err, "weight buffer overflow (internal size mismatch)");
    free(p);
    if (rc != 0)
        return -1;
    *out = lg_tensor_2d(dst, LG_F32, 1, (int64_t)n);
    return 0;
}

/* opts with its defaults filled in and its bounds applied for config c */
static lg_model_opts model_opts(const lg_model_opts *opts, const lg_model_config *c)
{
    lg_model_opts o = *opts;
    if (o.page_tokens <= 0) o.page_tokens = 16;
    if (o.max_step_tokens <= 0) o.max_step_tokens = 512;
    if (o.max_seqs <= 0) o.max_seqs = 64;
    if (o.max_seqs > o.max_step_tokens) o.max_seqs = o.max_step_tokens;
    if (o.max_context <= 0 || o.max_context > c->max_pos) o.max_context = c->max_pos;
    if (o.prompt_logit_rows <= 0) o.prompt_logit_rows = LG_PROMPT_LOGIT_ROWS;
    if (o.prompt_logit_rows > o.max_step_tokens) o.prompt_logit_rows = o.max_step_tokens;
    return o;
}

/* A rank's slices of one layer's weights (tensor parallelism) and the copies that back them. */
typedef struct tp_slices {
    lg_wtensor t[7];
    void *owned[7];
    int n;
} tp_slices;

static void tp_slices_free(tp_slices *ts)
{
    for (int i = 0; i < ts->n; i++) free(ts->owned[i]);
    ts->n = 0;
}

/* This rank's block of src, into ts: of rows [row0, row0 + n), rows [row0 + rank n / size, +n / size);
 * by_cols: of all columns, columns [rank cols / size, +cols / size). */
static const lg_wtensor *tp_slice(const lg_model *m, tp_slices *ts, const lg_wtensor *src, bool by_cols, int64_t row0,
                                  int64_t n, lg_err *err)
{
    const int i = ts->n;
    const int64_t k = (by_cols ? src->shape[1] : n) / m->tp_size;
    if (lg_wtensor_slice(src, by_cols, (by_cols ? 0 : row0) + k * m->tp_rank, k, &ts->t[i], &ts->owned[i], err) != 0)
        return NULL;
    ts->n++;
    return &ts->t[i];
}

/* Tensor parallelism: replaces a layer's q, k, v and gate, up parts by this rank's output rows (one part
 * each, also from a fused tensor) and o, down by its input columns (model_tp.h). */
static int tp_shard_layer(const lg_model *m, tp_slices *ts, const lg_wtensor **qkv, int *n_qkv, const lg_wtensor **gu,
                          int *n_gu, const lg_wtensor **wo, const lg_wtensor **dn, lg_err *err)
{
    const lg_model_config *f = &m->full_cfg;
    const int64_t hd = f->head_dim, qd = (int64_t)f->n_heads * hd, kvd = (int64_t)f->n_kv_heads * hd;
    const int64_t qkv_rows[3] = {qd, kvd, kvd}, ff = f->d_ff;
    const bool fq = *n_qkv == 1, fg = *n_gu == 1;
    const lg_wtensor *q0 = qkv[0], *g0 = gu[0];
    for (int i = 0, r0 = 0; i < 3; r0 += (int)qkv_rows[i], i++)
        if (!(qkv[i] = tp_slice(m, ts, fq ? q0 : qkv[i], false, fq ? r0 : 0, qkv_rows[i], err)))
            return -1;
    for (int i = 0; i < 2; i++)
        if (!(gu[i] = tp_slice(m, ts, fg ? g0 : gu[i], false, fg ? i * ff : 0, ff, err)))
            return -1;
    if (!(*wo = tp_slice(m, ts, *wo, true, 0, 0, err)) || !(*dn = tp_slice(m, ts, *dn, true, 0, 0, err)))
        return -1;
    *n_qkv = 3;
    *n_gu = 2;
    return 0;
}

/* The weights into one backend allocation (m->wbuf): embed, lm_head (unless tied), the final norm, each
 * layer's norms and fused q,k,v and gate,up matrices, and the RoPE frequencies. */
static int upload_weights(lg_model *m, const lg_weights *w, lg_err *err)
{
    lg_backend *be = m->be;
    const lg_model_config *c = &m->full_cfg; /* the files' shapes: a rank's shard is cut from them */
    const int hd = c->head_dim;
    const lg_wtensor *emb = lg_weights_get(w, "model.embed_tokens.weight");
    const lg_wtensor *head = c->tie_embeddings ? NULL : lg_weights_get(w, "lm_head.weight");

    lg_dtype deq_dt = c->weight_dtype;
    if (deq_dt != LG_F32 && deq_dt != LG_F16 && deq_dt != LG_BF16)
        deq_dt = LG_F16;
    /* sizes first: one allocation. A quantized tensor the backend takes: its blocks; else its elements in the
     * dtype it is uploaded as (1-D norms and biases: f32); a linear layer's tensor under tensor parallelism: this
     * rank's 1/N of it; each carve (up to three a tensor: a split fused weight) is aligned to 256 bytes */
    size_t total = 0;
    for (int i = 0; i < lg_weights_count(w); i++) {
        const lg_wtensor *t = lg_weights_at(w, i);
        size_t b = takes(be, t->q) ? t->nbytes
                   : tensor_elems(t) * (t->n_dims == 1 ? 4 : lg_dtype_size(backend_wdtype(be, t->q != LG_QNONE ? deq_dt
                                                                                                         : t->dtype)));
        if (m->tp_size > 1 && lg_weights_is_linear(t->name))
            b = b / (size_t)m->tp_size + 1;
        total += b + 3 * 256;
    }
    total += 2 * ((size_t)hd * 4 + 4096);
    /* another rank still reads the file pages of a tensor this rank uploaded a slice of: only the last drops them */
    upload_ctx u = {be, NULL, 0, total, err, deq_dt, m->tp_rank == m->tp_size - 1 ? w : NULL, false};
    u.base = be->i.alloc(be, total);
    if (!u.base)
        return lg_fail(err, "cannot allocate %zu bytes of weights on backend %s", total, be->i.name);
    m->wbuf = u.base;

    /* a quantized tensor the backend does not take expands to (the backend's dtype for) weight_dtype */
#define WDT(t) backend_wdtype(be, (t)->q != LG_QNONE ? u.deq_dt : (t)->dtype)
    if (upload_weight(&u, &m->embed, NULL, WDT(emb), &emb, 1) != 0)
        return -1;
    if (head) {
        if (upload_weight(&u, &m->lm_head, NULL, WDT(head), &head, 1) != 0)
            return -1;
    } else {
        m->lm_head = m->embed;
    }
    const lg_wtensor *nw = lg_weights_get(w, "model.norm.weight");
    if (upload_norm(&u, &m->norm, c, nw, false) != 0)
        return -1;
    const bool qk_plain = lg_arch_qk_identity(c);
    const int64_t qdim = (int64_t)c->n_heads * hd;

    for (int l = 0; l < c->n_layers; l++) {
        layer_w *lw = &m->layers[l];
        const bool pn = c->post_norms;
        const lg_wtensor *ln1 = need(w, err, "model.layers.%d.input_layernorm.weight", l);
        const lg_wtensor *ln2 = need(w, err, pn ? "model.layers.%d.pre_feedforward_layernorm.weight"
                                                : "model.layers.%d.post_attention_layernorm.weight", l);
        const lg_wtensor *qkv[3] = {NULL, NULL, NULL}, *gu[2] = {NULL, NULL};
        int n_qkv = 3, n_gu = 2;
        if (c->fused_qkv) {
            qkv[0] = need(w, err, "model.layers.%d.self_attn.qkv_proj.weight", l);
            gu[0] = need(w, err, "model.layers.%d.mlp.gate_up_proj.weight", l);
            n_qkv = n_gu = 1;
            qkv[1] = qkv[2] = qkv[0];
            gu[1] = gu[0];
        } else {
            qkv[0] = need(w, err, "model.layers.%d.self_attn.q_proj.weight", l);
            qkv[1] = need(w, err, "model.layers.%d.self_attn.k_proj.weight", l);
            qkv[2] = need(w, err, "model.layers.%d.self_attn.v_proj.weight", l);
            gu[0] = need(w, err, "model.layers.%d.mlp.gate_proj.weight", l);
            gu[1] = need(w, err, "model.layers.%d.mlp.up_proj.weight", l);
        }
        const lg_wtensor *wo = need(w, err, "model.layers.%d.self_attn.o_proj.weight", l);
        const lg_wtensor *dn = need(w, err, "model.layers.%d.mlp.down_proj.weight", l);
        if (!ln1 || !ln2 || !qkv[0] || !qkv[1] || !qkv[2] || !wo || !gu[0] || !gu[1] || !dn)
            return -1;
        tp_slices ts = {0};
        /* partial rotary / LongRoPE: q and k rows in the engine's RoPE layout (lg_arch_qk_row) */
        lg_wtensor tq[3];
        const lg_wtensor *pq[3] = {qkv[0], qkv[1], qkv[2]};
        void *bq = NULL, *bk = NULL;
        int rc = 0;
        if (!qk_plain) {
            if (c->fused_qkv) {
                rc = qk_transform(c, qkv[0], 0, c->n_heads, &tq[0], &bq, err) ||
                     qk_transform(c, qkv[0], qdim, c->n_kv_heads, &tq[0], &bq, err);
            } else {
                rc = qk_transform(c, qkv[0], 0, c->n_heads, &tq[0], &bq, err) ||
                     qk_transform(c, qkv[1], 0, c->n_kv_heads, &tq[1], &bk, err);
                pq[1] = &tq[1];
            }
            pq[0] = &tq[0];
        }
        lg_dtype wdt = WDT(qkv[0]);
        const lg_wtensor *pgu[2] = {gu[0], gu[1]};
        if (!rc && m->tp_size > 1) /* this rank's rows of q, k, v, gate, up and columns of o, down */
            rc = tp_shard_layer(m, &ts, pq, &n_qkv, pgu, &n_gu, &wo, &dn, err);
        if (!rc)
            rc = upload_norm(&u, &lw->ln1, c, ln1, false) || upload_norm(&u, &lw->ln2, c, ln2, false) ||
                 upload_weight(&u, &lw->wqkv, &lw->qkv_split, wdt, pq, n_qkv) ||
                 upload_weight(&u, &lw->wo, NULL, wdt, &wo, 1) ||
                 upload_weight(&u, &lw->wgu, &lw->gu_split, wdt, pgu, n_gu) ||
                 upload_weight(&u, &lw->wdown, NULL, wdt, &dn, 1);
        free(bq);
        free(bk);
        tp_slices_free(&ts);
        if (rc)
            return -1;
        if (pn) {
            const lg_wtensor *pa = need(w, err, "model.layers.%d.post_attention_layernorm.weight", l);
            const lg_wtensor *pf = need(w, err, "model.layers.%d.post_feedforward_layernorm.weight", l);
            if (!pa || !pf || upload_norm(&u, &lw->post_attn, c, pa, false) || upload_norm(&u, &lw->post_ff, c, pf, false))
                return -1;
        }
        if (c->qk_norm) {
            const lg_wtensor *qn = need(w, err, "model.layers.%d.self_attn.q_norm.weight", l);
            const lg_wtensor *kn = need(w, err, "model.layers.%d.self_attn.k_norm.weight", l);
            if (!qn || !kn || upload_norm(&u, &lw->q_norm, c, qn, !qk_plain) ||
                upload_norm(&u, &lw->k_norm, c, kn, !qk_plain))
                return -1;
        }
        if (c->qkv_bias) {
            const lg_wtensor *b[3] = {need(w, err, "model.layers.%d.self_attn.q_proj.bias", l),
                                      need(w, err, "model.layers.%d.self_attn.k_proj.bias", l),
                                      need(w, err, "model.layers.%d.self_attn.v_proj.bias", l)};
            if (!b[0] || !b[1] || !b[2])
                return -1;
            lg_wtensor tb[2];
            void *bb0 = NULL, *bb1 = NULL;
            if (!qk_plain) {
                if (qk_transform(c, b[0], 0, c->n_heads, &tb[0], &bb0, err) ||
                    qk_transform(c, b[1], 0, c->n_kv_heads, &tb[1], &bb1, err)) {
                    free(bb0);
                    free(bb1);
                    return -1;
                }
                b[0] = &tb[0];
                b[1] = &tb[1];
            }
            lg_wtensor sb[3];
            void *own[3] = {NULL, NULL, NULL};
            rc = 0;
            for (int i = 0; i < 3 && m->tp_size > 1 && rc == 0; i++) { /* this rank's heads' biases */
                const int64_t n = b[i]->shape[0] / m->tp_size;
                rc = lg_wtensor_slice(b[i], true, n * m->tp_rank, n, &sb[i], &own[i], err);
                b[i] = &sb[i];
            }
            rc = rc ? rc : upload_cat(&u, &lw->bqkv, LG_F32, b, 3);
            for (int i = 0; i < 3; i++) free(own[i]);
            free(bb0);
            free(bb1);
            if (rc != 0)
                return -1;
        }
    }
#undef WDT
    float inv[1024];
    compute_inv_freq(c, w, c->rope_theta, true, m->opts.max_context, inv);
    m->inv_freq = carve(&u, (size_t)(hd / 2) * 4);
    if (!m->inv_freq || be->i.upload(be, m->inv_freq, inv, (size_t)(hd / 2) * 4) != 0)
        return -1;
    if (c->rope_local_theta > 0 && c->sliding_window) {
        compute_inv_freq(c, w, c->rope_local_theta, false, m->opts.max_context, inv);
        m->inv_freq_local = carve(&u, (size_t)(hd / 2) * 4);
        if (!m->inv_freq_local || be->i.upload(be, m->inv_freq_local, inv, (size_t)(hd / 2) * 4) != 0)
            return -1;
    }
    /* Gemma: transformers multiplies by sqrt(hidden_size) as a tensor of the weights' dtype */
    m->embed_mult = 1.0f;
    if (c->embed_scale) {
        float v = sqrtf((float)c->d_model);
        if (emb->dtype != LG_F32) {
            uint16_t h;
            lg_from_f32(&h, emb->dtype, &v, 1);
            lg_to_f32(&v, &h, emb->dtype, 1);
        }
        m->embed_mult = v;
    }
    return 0;
}

/* The activations of a step of max_step_tokens rows, carved from one backend allocation (m->abuf); the
 * logits (f32, max_seqs rows) in their own when activations are 16-bit. */
static int alloc_activations(lg_model *m, lg_err *err)
{
    lg_backend *be = m->be;
    const lg_model_config *c = &m->cfg;
    const int64_t d = c->d_model, qdim = (int64_t)c->n_heads * c->head_dim;
    const int64_t kvdim = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t T = m->opts.max_step_tokens, S = m->opts.max_seqs, F = c->d_ff, V = c->vocab_size;
    lg_dtype a = be->act_dtype;
    size_t es = lg_dtype_size(a);
    /* the residual's second buffer (norm_linear): steps norm_matmul takes, and with norm_matmul_lora decode
     * steps (a row a sequence) too */
    const int64_t nm_t = LG_NORM_MATMUL_MAX_T;
    const int64_t r2 = be->i.norm_matmul_lora && S > nm_t ? S : nm_t, T2 = T < r2 ? T : r2;
    int64_t sizes[] = {T * d, T * d, T * (qdim + 2 * kvdim), T * qdim, T * d, T * 2 * F, T * F, T * d, S * d,
                       S * V, T2 * d, c->post_norms ? T * d : 0};
    size_t tot = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) tot += ((size_t)sizes[i] * es + 255) & ~(size_t)255;
    upload_ctx ua = {be, be->i.alloc(be, tot), 0, tot, err, LG_F16, NULL, false};
    if (!ua.base)
        return lg_fail(err, "cannot allocate %zu bytes of activations", tot);
    m->abuf = ua.base;
    m->x = lg_tensor_2d(carve(&ua, (size_t)sizes[0] * es), a, T, d);
    m->xn = lg_tensor_2d(carve(&ua, (size_t)sizes[1] * es), a, T, d);
    m->qkv = lg_tensor_2d(carve(&ua, (size_t)sizes[2] * es), a, T, qdim + 2 * kvdim);
    m->attn = lg_tensor_2d(carve(&ua, (size_t)sizes[3] * es), a, T, qdim);
    m->o = lg_tensor_2d(carve(&ua, (size_t)sizes[4] * es), a, T, d);
    m->gu = lg_tensor_2d(carve(&ua, (size_t)sizes[5] * es), a, T, 2 * F);
    m->act = lg_tensor_2d(carve(&ua, (size_t)sizes[6] * es), a, T, F);
    m->mlp = lg_tensor_2d(carve(&ua, (size_t)sizes[7] * es), a, T, d);
    m->rows = lg_tensor_2d(carve(&ua, (size_t)sizes[8] * es), a, S, d);
    m->x2 = lg_tensor_2d(carve(&ua, (size_t)sizes[10] * es), a, T2, d);
    if (c->post_norms)
        m->pn = lg_tensor_2d(carve(&ua, (size_t)sizes[11] * es), a, T, d);
    m->logits = lg_tensor_2d(carve(&ua, (size_t)sizes[9] * 4), LG_F32, S, V);
    /* logits are always f32: carve was sized with es; their own allocation if es < 4 (lg_model_free frees
     * logits.data then, so it never holds the carved pointer) */
    if (es < 4) {
        m->logits.data = be->i.alloc(be, (size_t)S * V * 4);
        if (!m->logits.data)
            return lg_fail(err, "cannot allocate logits");
    }
    return 0;
}

/* The prompt-logprob rows' two buffers (model.h, lg_step_seq.lp_count): their gathered hidden states and
 * their f32 logits, each its own allocation (freed by lg_model_free). */
static int alloc_prompt_logits(lg_model *m, lg_err *err)
{
    lg_backend *be = m->be;
    const int64_t P = m->opts.prompt_logit_rows, d = m->cfg.d_model, V = m->cfg.vocab_size;
    m->prows = lg_tensor_2d(be->i.alloc(be, (size_t)(P * d) * lg_dtype_size(be->act_dtype)), be->act_dtype, P, d);
    m->plogits = lg_tensor_2d(be->i.alloc(be, (size_t)(P * V) * 4), LG_F32, P, V);
    if (!m->prows.data || !m->plogits.data)
        return lg_fail(err, "cannot allocate the prompt logits (%lld rows of %lld)", (long long)P, (long long)V);
    return 0;
}

/* With the backend's sampler (and LG_HOST_SAMPLE not set): m->dev_sample, and the sampler's buffers: the
 * ids and logprobs it writes, their host destinations (page-locked where the backend can download into
 * them asynchronously), the penalty pairs. */
static int alloc_sampling(lg_model *m, lg_err *err)
{
    lg_backend *be = m->be;
    if (!be->i.sample || lg_backend_tuning(be)->host_sample) /* LG_HOST_SAMPLE=1: sample downloaded logits */
        return 0;
    m->dev_sample = true;
    const size_t out_bytes = (size_t)m->opts.max_seqs * (sizeof(int32_t) + sizeof(lg_logprob_row));
    m->out_ints = out_bytes / sizeof(int32_t);
    m->sample_ids_dev = be->i.alloc(be, out_bytes);
    if (be->i.alloc_host && be->i.free_host && be->i.download_async && be->i.download_wait) {
        m->sample_out_host = be->i.alloc_host(be, 2 * out_bytes);
        m->out_pinned = m->sample_out_host != NULL;
    }
    if (!m->sample_out_host)
        m->sample_out_host = malloc(2 * out_bytes);
    /* penalty pairs: room for 512 distinct generated tokens per sequence up front, so that
     * a step grows the buffer (a free, which waits for the device) only beyond that */
    m->pen_cap = m->opts.max_seqs * 512;
    m->pen_dev = be->i.alloc(be, (size_t)m->pen_cap * 2 * sizeof(int32_t));
    if (!m->pen_dev)
        m->pen_cap = 0;
    if (!m->sample_ids_dev || !m->sample_out_host)
        return lg_fail(err, "cannot allocate sampling buffers");
    return 0;
}

/* The step metadata, one device buffer and its host staging: tok, pos, slot [T]; q_indptr, page_indptr
 * [S+1]; kv_len [S]; logit_rows [S]; page ids [S * max pages per seq]; prompt-logit rows [prompt_logit_rows];
 * with device sampling, the sampling rows [S] (one upload for all). */
static int alloc_step_meta(lg_model *m, lg_err *err)
{
    lg_backend *be = m->be;
    const size_t S = (size_t)m->opts.max_seqs;
    size_t max_pages = S * ((size_t)(m->opts.max_context + m->opts.page_tokens - 1) / m->opts.page_tokens + 1);
    m->meta_cap = 3 * (size_t)m->opts.max_step_tokens + 4 * (S + 1) + max_pages + (size_t)m->opts.prompt_logit_rows;
    if (m->dev_sample)
        m->meta_cap += S * SAMPLE_ROW_INTS;
    m->meta_dev = be->i.alloc(be, m->meta_cap * 4);
    m->meta_host = malloc(m->meta_cap * 4);
    if (!m->meta_dev || !m->meta_host)
        return lg_fail(err, "cannot allocate step metadata");
    return 0;
}

/* The LoRA step buffers (lora_max_rank > 0): the shrink's output, the weight table of every segment on
 * device and host, the segment bounds, and per segment its modules and largest rank. */
static int alloc_lora(lg_model *m, lg_err *err)
{
    lg_backend *be = m->be;
    size_t n_slots = (size_t)m->cfg.n_layers * LG_LORA_N_MODULES, S = (size_t)m->opts.max_seqs;
    /* shrink output kept in f32 whatever the act dtype (more accurate expand);
     * LG_LORA_MULTI_MAX slots side by side for the multi-slot ops */
    size_t tmp_bytes =
        (size_t)m->opts.max_step_tokens * LG_LORA_MULTI_MAX * (size_t)m->opts.lora_max_rank * sizeof(float);
    void *tmp = be->i.alloc(be, tmp_bytes);
    m->lora_w_dev = be->i.alloc(be, S * n_slots * sizeof(lg_lora_w));
    m->lora_w_host = malloc(S * n_slots * sizeof(lg_lora_w));
    m->lora_seg_dev = be->i.alloc(be, (S + 1) * sizeof(int32_t));
    m->lora_seg_host = malloc((S + 1) * sizeof(int32_t));
    m->lora_seg_mods = malloc(S * sizeof(unsigned));
    m->lora_seg_rank = malloc(S * sizeof(int));
    m->lora_w_zero = calloc(n_slots, sizeof(lg_lora_w));
    m->lora_tmp = lg_tensor_2d(tmp, LG_F32, m->opts.max_step_tokens, LG_LORA_MULTI_MAX * m->opts.lora_max_rank);
    if (!tmp || !m->lora_w_dev || !m->lora_w_host || !m->lora_seg_dev || !m->lora_seg_host || !m->lora_seg_mods ||
        !m->lora_seg_rank || !m->lora_w_zero)
        return lg_fail(err, "cannot allocate LoRA step buffers");
    if (!be->i.lora_shrink || !be->i.lora_expand)
        return lg_fail(err, "backend %s has no LoRA ops", be->i.name);
    return 0;
}

int lg_model_create(lg_backend *be, const lg_weights *w, const lg_model_opts *opts, lg_model **out, lg_err *err)
{
    return lg_model_create_rank(be, w, opts, 0, 1, out, err);
}

void lg_model_attach_tp(lg_model *m, lg_tp *tp) { m->tp = tp; }

int lg_model_create_rank(lg_backend *be, const lg_weights *w, const lg_model_opts *opts, int tp_rank, int tp_size,
                         lg_model **out, lg_err *err)
{
    *out = NULL;
    const lg_model_config *c = lg_weights_config(w);
    if (lg_model_config_validate(c, err) != 0)
        return -1;
    if (lg_weights_check_llama(w, err) != 0)
        return -1;
    if ((c->act == LG_ACT_GELU_TANH && !be->i.gelu_mul) || (c->qk_norm && !be->i.head_rmsnorm) ||
        ((c->embed_scale || c->final_softcap > 0) && !be->i.scale_cap))
        return lg_fail(err, "backend %s lacks an op the %s architecture needs", be->i.name, c->arch);
    lg_model *m = calloc(1, sizeof *m);
    if (!m)
        return lg_fail(err, "out of memory");
    m->be = be;
    m->cfg = *c;
    m->full_cfg = *c;
    m->tp_rank = tp_rank;
    m->tp_size = tp_size > 1 ? tp_size : 1;
    if (m->tp_size > 1) { /* the rank's shard: its heads, KV heads and MLP features (model_tp.c) */
        m->cfg.n_heads /= m->tp_size;
        m->cfg.n_kv_heads /= m->tp_size;
        m->cfg.d_ff /= m->tp_size;
    }
    m->opts = model_opts(opts, c);
    m->layers = calloc((size_t)c->n_layers, sizeof(layer_w));
    m->kv_scales = malloc(2 * (size_t)c->n_layers * sizeof(float));
    if (!m->layers || !m->kv_scales) {
        free(m->layers);
        free(m->kv_scales);
        free(m);
        return lg_fail(err, "out of memory");
    }
    m->kv_dtype = m->opts.kv_fp8 ? LG_F8E4M3 : be->act_dtype;
    if (read_kv_scales(m, w, err) != 0) {
        lg_model_free(m);
        return -1;
    }
    if (upload_weights(m, w, err) != 0 || alloc_activations(m, err) != 0 || alloc_prompt_logits(m, err) != 0 ||
        alloc_sampling(m, err) != 0 ||
        alloc_step_meta(m, err) != 0 || (m->opts.lora_max_rank > 0 && alloc_lora(m, err) != 0)) {
        lg_model_free(m);
        return -1;
    }
    const lg_tuning *tune = lg_backend_tuning(be);
    /* LG_NO_GRAPHS=1: every step eager */
    m->no_graphs = !be->i.graph_begin || !be->i.graph_end || tune->no_graphs != 0;
    if (be->i.graph_reset)
        be->i.graph_reset(be); /* recordings of an earlier model name other buffers */
    m->timing = tune->step_timing != 0 && (m->t_us = calloc(4 * (size_t)STEP_T_MAX, sizeof *m->t_us)) != NULL;
    m->page_bytes = (size_t)m->opts.page_tokens * (size_t)c->n_layers * 2 * (size_t)c->n_kv_heads *
                    (size_t)c->head_dim * lg_dtype_size(m->kv_dtype);
    *out = m;
    return 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void lg_model_free(lg_model *m)
{
    if (!m)
        return;
    lg_tp_free(m->tp); /* the other ranks first: their steps end with this rank's */
    lg_backend *be = m->be;
    if (m->timing && m->t_steps > 0) {
        const int n = m->t_steps < STEP_T_MAX ? (int)m->t_steps : STEP_T_MAX;
        float med[4], p90[4];
        for (int k = 0; k < 4; k++) {
            float *v = m->t_us + (size_t)k * STEP_T_MAX;
            qsort(v, (size_t)n, sizeof *v, cmp_float);
            med[k] = v[n / 2];
            p90[k] = v[n - 1 - n / 10];
        }
        fprintf(stderr,
                "decode step host time (LG_STEP_TIMING), us, median / p90 over %d steps: metadata %.1f / %.1f,"
                " LoRA table %.1f / %.1f (uploaded in %ld steps, %.1f KB per upload), forward launch %.1f / %.1f,"
                " sampling + download (waits for the GPU) %.1f / %.1f\n",
                n, med[0], p90[0], med[1], p90[1], m->t_table_uploads,
                m->t_table_uploads ? m->t_table_bytes / 1024.0 / m->t_table_uploads : 0.0, med[2], p90[2], med[3],
                p90[3]);
    }
    free(m->t_us);
    if (be->i.graph_reset)
        be->i.graph_reset(be); /* recordings name this model's buffers */
    if (m->wbuf) be->i.dealloc(be, m->wbuf);
    if (m->abuf) be->i.dealloc(be, m->abuf);
    if (m->abuf && lg_dtype_size(be->act_dtype) < 4 && m->logits.data) be->i.dealloc(be, m->logits.data);
    if (m->meta_dev) be->i.dealloc(be, m->meta_dev);
    if (m->prows.data) be->i.dealloc(be, m->prows.data);
    if (m->plogits.data) be->i.dealloc(be, m->plogits.data);
    if (m->sample_ids_dev) be->i.dealloc(be, m->sample_ids_dev);
    if (m->mask_dev) be->i.dealloc(be, m->mask_dev);
    if (m->out_pinned)
        be->i.free_host(be, m->sample_out_host);
    else
        free(m->sample_out_host);
    if (m->pen_dev) be->i.dealloc(be, m->pen_dev);
    free(m->meta_host);
    if (m->lora_tmp.data) be->i.dealloc(be, m->lora_tmp.data);
    if (m->lora_w_dev) be->i.dealloc(be, m->lora_w_dev);
    if (m->lora_seg_dev) be->i.dealloc(be, m->lora_seg_dev);
    free(m->lora_w_host);
    free(m->lora_seg_host);
    free(m->lora_seg_mods);
    free(m->lora_seg_rank);
    free(m->lora_w_zero);
    free(m->layers);
    free(m->kv_scales);
    free(m);
}

/* ---- forward step ------------------------------------------------------------------ */

/* tmp = x A^T for k slots over one x (slot slots[i] into tmp columns from
 * i * max_rank), then y_i += scale * tmp_i B^T: one launch each with the
 * backend's multi-slot ops, the single-slot op when k == 1. */
static int lora_shrink_k(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k)
{
    return k == 1 ? be->i.lora_shrink(be, tmp, x, lm, slots[0]) : be->i.lora_shrink_multi(be, tmp, x, lm, slots, k);
}

static int lora_expand_k(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                         int k)
{
    return k == 1 ? be->i.lora_expand(be, ys[0], tmp, lm, slots[0]) : be->i.lora_expand_multi(be, ys, tmp, lm, slots, k);
}

/* The LoRA slots of modules [m0, m0 + count) that the step uses (bit m of mods): their outputs
 * (column slices of y), slots, first columns in y and widths; returns how many. */
static int lora_slots(lg_tensor y, const lg_lora_meta *lm, const lg_tensor *ys_all, int m0, int count, int sl,
                      unsigned mods, lg_tensor *ys, int *slots, int *col0, int *ncols)
{
    int n = 0;
    for (int j = 0; lm && j < count; j++)
        if (mods & (1u << (m0 + j))) {
            ys[n] = ys_all[j];
            col0[n] = (int)(((const char *)ys_all[j].data - (const char *)y.data) / (ptrdiff_t)lg_dtype_size(y.dtype));
            ncols[n] = (int)ys_all[j].cols;
            slots[n++] = sl + m0 + j;
        }
    return n;
}

/* y = x W^T (+ bias) plus the LoRA of modules [m0, m0 + count) of layer slot
 * base sl, whose outputs ys_all are column slices of y; modules no segment
 * of the step uses (bit m of mods) are skipped. With the backend's
 * matmul_lora: one op. Else shrink, matmul, expand, in that order: the
 * shrink reads only x, and ahead of the matmul its small launch overlaps
 * the matmul's start (CUDA: the decode matmul issues its weight copies
 * before it waits on the kernel before it), where after the matmul it sat
 * between two dependent launches (H100, docs/benchmarks.md, GPU kernels,
 * 2026-11-23: W3 decode -0.08 ms/step). Results do not depend on the order. A backend
 * without the multi-slot ops and k > 1 slots: matmul, then a shrink/expand
 * pair per slot (one tmp). rope (the q,k,v form): matmul_lora also does
 * rope_kv_write (CUDA: a decode step's expand in the same launch) and sets
 * *roped; otherwise the caller runs it. */
/* y = x W^T (+ bias) for W whole, or part by part into y's column ranges when split (sp->n > 0). */
static int matmul_w(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, const wsplit *sp, lg_tensor bias)
{
    if (!sp || sp->n == 0)
        return be->i.matmul(be, y, x, W, bias, false);
    int64_t c0 = 0;
    for (int i = 0; i < sp->n; i++) {
        const int64_t nr = sp->part[i].rows;
        lg_tensor b = bias.data ? lg_tensor_cols(bias, c0, nr) : bias;
        if (be->i.matmul(be, lg_tensor_cols(y, c0, nr), x, sp->part[i], b, false) != 0)
            return -1;
        c0 += nr;
    }
    return 0;
}

static int linear(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, const wsplit *sp, lg_tensor bias,
                  lg_tensor tmp, const lg_lora_meta *lm, const lg_tensor *ys_all, int m0, int count, int sl,
                  unsigned mods, const lg_rope_kv *rope, bool *roped)
{
    lg_tensor ys[3];
    int slots[3], col0[3], ncols[3];
    const int n = lora_slots(y, lm, ys_all, m0, count, sl, mods, ys, slots, col0, ncols);
    if (n == 0)
        return matmul_w(be, y, x, W, sp, bias);
    if (be->i.matmul_lora && !(sp && sp->n) && W.q == LG_QNONE) { /* the fused ops take 16-bit weights */
        if (roped)
            *roped = rope != NULL;
        return be->i.matmul_lora(be, y, x, W, bias, tmp, lm, slots, col0, ncols, n, rope);
    }
    if (n > 1 && !(be->i.lora_shrink_multi && be->i.lora_expand_multi)) {
        if (matmul_w(be, y, x, W, sp, bias) != 0)
            return -1;
        for (int i = 0; i < n; i++)
            if (lora_shrink_k(be, tmp, x, lm, &slots[i], 1) != 0 || lora_expand_k(be, &ys[i], tmp, lm, &slots[i], 1) != 0)
                return -1;
        return 0;
    }
    if (lora_shrink_k(be, tmp, x, lm, slots, n) != 0 || matmul_w(be, y, x, W, sp, bias) != 0)
        return -1;
    return lora_expand_k(be, ys, tmp, lm, slots, n);
}

/* After a fused norm op took the step: with a delta the residual is now the other buffer; with rope
 * the op did rope_kv_write too. */
static void norm_op_done(lg_tensor delta, int *cur, const lg_rope_kv *rope, bool *roped)
{
    if (delta.data)
        *cur = 1 - *cur;
    if (roped)
        *roped = rope != NULL;
}

/* xn = rmsnorm(x (+ delta)) * g, y = xn W^T (+ bias) with the LoRA of modules
 * [m0, m0 + count), then act = silu_mul(y) when act.data. The residual x is
 * xs[*cur]. One norm_matmul op where the backend fuses them (CUDA, decode
 * batches of up to LG_NORM_MATMUL_MAX_T rows: one launch instead of
 * two or three) and no adapter of the step targets these modules (the shrink
 * reads xn): it stores x + delta to the other buffer, which becomes the
 * residual (the op's blocks all read x, so none may write it in place).
 * With rope (the q,k,v form), the op also does rope_kv_write and *roped is
 * set. Else add_rmsnorm in place, linear(), silu_mul. Results are the same
 * for the one-row steps offered by default (CUDA: kernels/norm_matmul.cu).
 * With adapters on these modules, the backend's norm_matmul_lora where it
 * takes the step (CUDA: decode steps; the LoRA shrink norms the rows, one
 * launch fewer), storing x + delta to the other buffer the same way; the
 * same results as add_rmsnorm + linear(). */
static int norm_linear(lg_backend *be, lg_tensor *xs, int *cur, lg_tensor delta, lg_tensor g, float eps,
                       lg_tensor xn, lg_tensor y, lg_tensor W, const wsplit *sp, lg_tensor bias, lg_tensor act,
                       lg_tensor tmp, const lg_lora_meta *lm, const lg_tensor *ys, int m0, int count, int sl,
                       unsigned mods, const lg_rope_kv *rope, bool *roped)
{
    const unsigned mine = ((1u << count) - 1u) << m0;
    const bool whole = !(sp && sp->n) && W.q == LG_QNONE; /* the fused ops take one 16-bit W */
    if (whole && be->i.norm_matmul && xs[1 - *cur].data && xs[0].rows <= LG_NORM_MATMUL_MAX_T &&
        !(lm && (mods & mine))) {
        const int rc = be->i.norm_matmul(be, act.data ? act : y, xs[*cur], delta, g, eps, xs[1 - *cur], W, bias,
                                         act.data != NULL, rope);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            norm_op_done(delta, cur, rope, roped);
            return 0;
        }
    }
    if (whole && be->i.norm_matmul_lora && be->i.matmul_lora && xs[1 - *cur].data && lm && (mods & mine)) {
        lg_tensor ls[3];
        int slots[3], col0[3], ncols[3];
        const int n = lora_slots(y, lm, ys, m0, count, sl, mods, ls, slots, col0, ncols);
        const lg_norm_in nm = {xs[*cur], delta, g, xs[1 - *cur], eps};
        const int rc = be->i.norm_matmul_lora(be, &nm, y, xn, W, bias, tmp, lm, slots, col0, ncols, n, rope);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            norm_op_done(delta, cur, rope, roped);
            return act.data ? be->i.silu_mul(be, act, y) : 0;
        }
    }
    if (be->i.add_rmsnorm(be, xs[*cur], delta, g, xn, eps) != 0 ||
        linear(be, y, xn, W, sp, bias, tmp, lm, ys, m0, count, sl, mods, rope, roped) != 0)
        return -1;
    return act.data ? be->i.silu_mul(be, act, y) : 0;
}

#define TRY(call)                                                                         \
    do {                                                                                  \
        if ((call) != 0)                                                                  \
            return lg_fail(err, "backend %s: op %s failed", be->i.name, #call);            \
    } while (0)

/* Upper bound of a decode step's kv lengths for launch shapes: rounded up
 * to 256 (to 512 past 4096, ...) so that a recorded graph serves many steps. */
static int kv_bucket(int kv)
{
    int g = 256;
    while (kv > 16 * g) g *= 2;
    return (kv + g - 1) / g * g;
}

/* Shape key of a recorded decode step (see the file comment). */
typedef struct step_key {
    int32_t n_tokens, n_seqs, n_logits, max_kv_len;
    int32_t lora_segs, lora_max_seg, lora_mods;
    int32_t lora_rank;  /* the step's largest rank: picks launch shapes */
    int32_t lora_tiles; /* 32-token tiles over the segments: the CUDA SGMV kernels and matmul_lora's order
                           depend on it when a segment has more than 4 tokens */
    uint64_t kv_base, kv_page_bytes;
} step_key;

/* Everything from embed to the logits matmul, enqueued on the backend.
 * lora_mods: bit m set when some segment uses module m (else skipped).
 * plog_rows: the n_plog token rows (device) whose logits go to m->plogits. */
static int forward(lg_model *m, const lg_kv_view *kv0, const lg_step_meta *meta, const lg_lora_meta *lora,
                   unsigned lora_mods, const int32_t *plog_rows, int n_plog, lg_err *err)
{
    lg_backend *be = m->be;
    const lg_model_config *c = &m->cfg;
    const int T = meta->n_tokens, n_logits = meta->n_logits, pt = m->opts.page_tokens;
    const int hd = c->head_dim;
    const int64_t qdim = (int64_t)c->n_heads * hd, kvdim = (int64_t)c->n_kv_heads * hd;
    lg_tensor xn = lg_tensor_rows(m->xn, 0, T), qkv = lg_tensor_rows(m->qkv, 0, T);
    lg_tensor q = lg_tensor_cols(qkv, 0, qdim), k = lg_tensor_cols(qkv, qdim, kvdim),
              v = lg_tensor_cols(qkv, qdim + kvdim, kvdim);
    lg_tensor attn = lg_tensor_rows(m->attn, 0, T), o = lg_tensor_rows(m->o, 0, T), gu = lg_tensor_rows(m->gu, 0, T),
              act = lg_tensor_rows(m->act, 0, T), mlp = lg_tensor_rows(m->mlp, 0, T);
    lg_tensor none = {0};
    lg_kv_view kv = *kv0;
    const size_t kv_block = (size_t)pt * (size_t)kvdim * lg_dtype_size(m->kv_dtype);
    const lg_tensor qkv_ys[3] = {q, k, v};
    const lg_tensor gu_ys[2] = {lg_tensor_cols(gu, 0, c->d_ff), lg_tensor_cols(gu, c->d_ff, c->d_ff)};

    lg_tensor tmp = lora ? lg_tensor_rows(m->lora_tmp, 0, T) : none;
    /* the residual stream: xs[xi]; norm_linear may move it to the other buffer */
    lg_tensor xs[2] = {lg_tensor_rows(m->x, 0, T), T <= m->x2.rows ? lg_tensor_rows(m->x2, 0, T) : none};
    int xi = 0;
    TRY(be->i.embed(be, xs[0], m->embed, meta->tok));
    if (c->embed_scale)
        TRY(be->i.scale_cap(be, xs[0], m->embed_mult, 0.0f));
    /* the residual's next delta: the MLP output (after its post-norm, Gemma) */
    lg_tensor delta = none;
    const float scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)hd);
    const lg_tensor pn = m->pn.data ? lg_tensor_rows(m->pn, 0, T) : none;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_w *lw = &m->layers[l];
        const int sl = l * LG_LORA_N_MODULES;
        kv.k_off = (size_t)l * 2 * kv_block;
        kv.v_off = kv.k_off + kv_block;
        kv.window = lg_layer_slides(c, l) ? c->sliding_window_size : 0;
        kv.softcap = c->attn_softcap;
        kv.k_scale = m->kv_scales[2 * l];
        kv.v_scale = m->kv_scales[2 * l + 1];
        const float *inv_freq = kv.window && m->inv_freq_local ? m->inv_freq_local : m->inv_freq;
        const lg_rope_kv rk = {.pos = meta->pos, .inv_freq = inv_freq, .n_heads = c->n_heads,
                               .n_kv_heads = c->n_kv_heads, .head_dim = hd, .kv = kv, .slot = meta->slot};
        bool roped = false;
        /* q/k norms come between the projection and RoPE: no op may fuse RoPE into the matmul then */
        TRY(norm_linear(be, xs, &xi, delta, lw->ln1, c->rms_eps, xn, qkv, lw->wqkv, &lw->qkv_split, lw->bqkv, none,
                        tmp, lora, qkv_ys, 0, 3, sl, lora_mods, c->qk_norm ? NULL : &rk, &roped));
        if (c->qk_norm) {
            TRY(be->i.head_rmsnorm(be, q, lw->q_norm, c->n_heads, hd, c->rms_eps));
            TRY(be->i.head_rmsnorm(be, k, lw->k_norm, c->n_kv_heads, hd, c->rms_eps));
        }
        if (roped) {
            /* norm_matmul or matmul_lora did rope + KV write too */
        } else if (be->i.rope_kv_write) {
            TRY(be->i.rope_kv_write(be, q, k, v, meta->pos, inv_freq, c->n_heads, c->n_kv_heads, hd, kv,
                                    meta->slot));
        } else {
            TRY(be->i.rope(be, q, k, meta->pos, inv_freq, c->n_heads, c->n_kv_heads, hd));
            TRY(be->i.kv_write(be, kv, k, v, meta->slot, T));
        }
        TRY(be->i.attention(be, attn, q, kv, meta, c->n_heads, scale));
        TRY(linear(be, o, attn, lw->wo, NULL, none, tmp, lora, &o, 3, 1, sl, lora_mods, NULL, NULL));
        if (m->tp_size > 1) /* row-parallel: each rank has a partial sum of the heads it holds */
            TRY(be->i.all_reduce(be, o));
        lg_tensor attn_out = o;
        if (c->post_norms) { /* Gemma: the attention output normed before the residual add */
            TRY(be->i.add_rmsnorm(be, o, none, lw->post_attn, pn, c->rms_eps));
            attn_out = pn;
        }
        const bool silu = c->act == LG_ACT_SILU;
        TRY(norm_linear(be, xs, &xi, attn_out, lw->ln2, c->rms_eps, xn, gu, lw->wgu, &lw->gu_split, none, silu ? act : none, tmp,
                        lora, gu_ys, 4, 2, sl, lora_mods, NULL, NULL));
        if (!silu)
            TRY(be->i.gelu_mul(be, act, gu));
        TRY(linear(be, mlp, act, lw->wdown, NULL, none, tmp, lora, &mlp, 6, 1, sl, lora_mods, NULL, NULL));
        if (m->tp_size > 1)
            TRY(be->i.all_reduce(be, mlp));
        delta = mlp;
        if (c->post_norms) {
            TRY(be->i.add_rmsnorm(be, mlp, none, lw->post_ff, pn, c->rms_eps));
            delta = pn;
        }
    }
    if (n_logits > 0 || n_plog > 0)
        TRY(be->i.add_rmsnorm(be, xs[xi], delta, m->norm, xn, c->rms_eps));
    if (n_logits > 0) {
        lg_tensor rows = lg_tensor_rows(m->rows, 0, n_logits);
        lg_tensor lg = lg_tensor_rows(m->logits, 0, n_logits);
        TRY(be->i.get_rows(be, rows, xn, meta->logit_rows, n_logits));
        TRY(be->i.matmul(be, lg, rows, m->lm_head, none, false));
        if (c->final_softcap > 0)
            TRY(be->i.scale_cap(be, lg, 1.0f, c->final_softcap));
    }
    if (n_plog > 0) { /* prompt logprobs: the same two ops over more rows, into their own buffer */
        lg_tensor rows = lg_tensor_rows(m->prows, 0, n_plog);
        lg_tensor lg = lg_tensor_rows(m->plogits, 0, n_plog);
        TRY(be->i.get_rows(be, rows, xn, plog_rows, n_plog));
        TRY(be->i.matmul(be, lg, rows, m->lm_head, none, false));
        if (c->final_softcap > 0)
            TRY(be->i.scale_cap(be, lg, 1.0f, c->final_softcap));
    }
    return 0;
}

bool lg_model_samples_on_device(const lg_model *m) { return m->dev_sample; }

bool lg_model_can_chain(const lg_model *m) { return m->dev_sample && m->out_pinned; }

/* Bytes of a sampled step's one download: its ids, or with logprobs all max_seqs id slots and then
 * its rows' lg_logprob_row (sample_ids_dev's layout). */
static size_t sample_out_bytes(const lg_model *m, int n_logits, bool lp)
{
    return lp ? (size_t)m->opts.max_seqs * sizeof(int32_t) + (size_t)n_logits * sizeof(lg_logprob_row)
              : (size_t)n_logits * sizeof(int32_t);
}

/* The launch's preconditions (sequence count, steps in flight, tokens from the device, the pool's pages);
 * *from_dev: the step's tokens are the ids the previous launched step sampled. */
static int check_launch(const lg_model *m, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs, bool *from_dev,
                        lg_err *err)
{
    if (n_seqs <= 0 || n_seqs > m->opts.max_seqs)
        return lg_fail(err, "step has %d sequences; the model was set up for 1..%d", n_seqs, m->opts.max_seqs);
    if (m->n_fl >= 2 || (m->n_fl == 1 && (!lg_model_can_chain(m) || m->fl[0].logits || m->fl[0].n_plog)))
        return lg_fail(err, "a step was launched while %s", m->n_fl >= 2 ? "two await collection"
                                                                         : "the previous one's results are needed first");
    /* tokens NULL: the ids the previous launched step sampled, row s for sequence s */
    const bool dev = seqs[0].tokens == NULL;
    for (int s = 0; s < n_seqs; s++)
        if ((seqs[s].tokens == NULL) != dev || (dev && seqs[s].n_tokens != 1))
            return lg_fail(err, "sequence %d: expected %s", s, dev ? "one token from the device, as every sequence"
                                                                   : "its tokens, as every sequence");
    if (dev && (m->last_sampled != n_seqs || !m->dev_sample))
        return lg_fail(err, "tokens from the device: the previous step sampled %d rows, this step has %d sequences",
                       m->last_sampled, n_seqs);
    if (lg_page_pool_page_bytes(pool) < m->page_bytes)
        return lg_fail(err, "page pool pages (%zu bytes) are smaller than a KV page (%zu)",
                       lg_page_pool_page_bytes(pool), m->page_bytes);
    *from_dev = dev;
    return 0;
}

/* The step's totals over its sequences, each checked against the context and its page table. */
typedef struct step_shape {
    int T, n_pages, n_logits;
    int n_plog;        /* prompt-logit rows */
    int max_q, max_kv; /* the longest query run; the longest sequence after the step */
} step_shape;

static int shape_of(const lg_model *m, const lg_step_seq *seqs, int n_seqs, step_shape *sh, lg_err *err)
{
    const int pt = m->opts.page_tokens;
    *sh = (step_shape){0};
    for (int s = 0; s < n_seqs; s++) {
        const lg_step_seq *q = &seqs[s];
        if (q->n_tokens <= 0 || q->pos0 < 0 || q->pos0 + q->n_tokens > m->opts.max_context)
            return lg_fail(err, "sequence %d: %d tokens at position %d exceed the context of %d", s, q->n_tokens,
                           q->pos0, m->opts.max_context);
        if ((int64_t)q->n_pages * pt < q->pos0 + q->n_tokens)
            return lg_fail(err, "sequence %d: %d pages cannot hold %d positions", s, q->n_pages, q->pos0 + q->n_tokens);
        sh->T += q->n_tokens;
        sh->n_pages += (q->pos0 + q->n_tokens + pt - 1) / pt;
        sh->n_logits += q->want_logits;
        if (q->lp_count < 0 || q->lp_first < 0 || (q->lp_count > 0 && q->lp_first + q->lp_count > q->n_tokens))
            return lg_fail(err, "sequence %d: prompt-logit rows [%d, +%d) outside its %d tokens", s, q->lp_first,
                           q->lp_count, q->n_tokens);
        sh->n_plog += q->lp_count;
        if (q->n_tokens > sh->max_q) sh->max_q = q->n_tokens;
        if (q->pos0 + q->n_tokens > sh->max_kv) sh->max_kv = q->pos0 + q->n_tokens;
    }
    if (sh->T > m->opts.max_step_tokens)
        return lg_fail(err, "step has %d tokens; the budget is %d", sh->T, m->opts.max_step_tokens);
    if (sh->n_plog > m->opts.prompt_logit_rows)
        return lg_fail(err, "step has %d prompt-logit rows; the model holds %d", sh->n_plog,
                       m->opts.prompt_logit_rows);
    return 0;
}

/* A sampled step's penalty pairs: checked against its rows (the kernel reads pen[pen_off .. pen_off +
 * pen_n) unchecked), then uploaded to their own buffer (any length, grown on demand) before the step. */
static int upload_penalties(lg_model *m, const lg_sample_row *rows, int n_rows, bool sample, const int32_t *pen,
                            int n_pen, lg_err *err)
{
    lg_backend *be = m->be;
    if (n_pen < 0 || (n_pen > 0 && !pen))
        return lg_fail(err, "expected %d penalty pairs, found %s", n_pen, pen ? "a negative count" : "none");
    for (int i = 0; sample && i < n_rows; i++)
        if (rows[i].pen_n != 0 &&
            (rows[i].pen_n < 0 || rows[i].pen_off < 0 || rows[i].pen_off > n_pen - rows[i].pen_n))
            return lg_fail(err, "sampling row %d: penalty pairs [%d, +%d) outside the step's %d", i, rows[i].pen_off,
                           rows[i].pen_n, n_pen);
    if (!sample || n_pen == 0)
        return 0;
    if (n_pen > m->pen_cap) {
        int cap = m->pen_cap ? m->pen_cap : 4096;
        while (cap < n_pen) cap *= 2;
        if (m->pen_dev) be->i.dealloc(be, m->pen_dev); /* the last step that read it has finished */
        m->pen_dev = be->i.alloc(be, (size_t)cap * 2 * sizeof(int32_t));
        m->pen_cap = m->pen_dev ? cap : 0;
        if (!m->pen_dev)
            return lg_fail(err, "cannot allocate %d penalty pairs on the device", cap);
    }
    TRY(be->i.upload(be, m->pen_dev, pen, (size_t)n_pen * 2 * sizeof(int32_t)));
    return 0;
}

/* The step's metadata laid out in the host staging buffer and uploaded in one copy (with the sampling
 * rows after rows_at when sample); from_dev: the token ids then come from the previous step's sampler
 * (a device copy ordered after it). *meta: the device views, for the ops. */
static int upload_meta(lg_model *m, const lg_step_seq *seqs, int n_seqs, const step_shape *sh, bool from_dev,
                       const lg_sample_row *sample_rows, bool sample, lg_step_meta *meta, size_t *rows_at,
                       const int32_t **plog_rows, lg_err *err)
{
    lg_backend *be = m->be;
    const int pt = m->opts.page_tokens, T = sh->T, n_logits = sh->n_logits, vocab = m->cfg.vocab_size;
    *rows_at = 3 * (size_t)T + 2 * ((size_t)n_seqs + 1) + 2 * (size_t)n_seqs + (size_t)sh->n_pages + (size_t)sh->n_plog;
    const size_t need = *rows_at + (sample ? (size_t)n_logits * SAMPLE_ROW_INTS : 0);
    if (need > m->meta_cap)
        return lg_fail(err, "step metadata too large (%zu > %zu)", need, m->meta_cap);
    int32_t *h = m->meta_host;
    int32_t *tok = h, *pos = tok + T, *slot = pos + T, *q_indptr = slot + T, *page_indptr = q_indptr + n_seqs + 1,
            *kv_len = page_indptr + n_seqs + 1, *logit_rows = kv_len + n_seqs, *page_ids = logit_rows + n_seqs,
            *plog = page_ids + sh->n_pages;
    int t = 0, pg = 0, lr = 0, pl = 0;
    for (int s = 0; s < n_seqs; s++) {
        const lg_step_seq *q = &seqs[s];
        q_indptr[s] = t;
        page_indptr[s] = pg;
        int np = (q->pos0 + q->n_tokens + pt - 1) / pt;
        for (int i = 0; i < np; i++) page_ids[pg + i] = q->pages[i];
        for (int i = 0; i < q->lp_count; i++)
            plog[pl++] = t + q->lp_first + i;
        for (int i = 0; i < q->n_tokens; i++) {
            int p = q->pos0 + i;
            if (from_dev) {
                tok[t + i] = 0; /* replaced on the device below */
            } else {
                if (q->tokens[i] < 0 || q->tokens[i] >= vocab)
                    return lg_fail(err, "token id %d out of range [0, %d)", q->tokens[i], vocab);
                tok[t + i] = q->tokens[i];
            }
            pos[t + i] = p;
            slot[t + i] = q->pages[p / pt] * pt + p % pt;
        }
        t += q->n_tokens;
        pg += np;
        kv_len[s] = q->pos0 + q->n_tokens;
        if (q->want_logits)
            logit_rows[lr++] = t - 1;
    }
    q_indptr[n_seqs] = t;
    page_indptr[n_seqs] = pg;
    if (sample)
        memcpy(h + *rows_at, sample_rows, (size_t)n_logits * sizeof(lg_sample_row));
    TRY(be->i.upload(be, m->meta_dev, h, need * 4));
    if (from_dev && m->tp_rank == 0) /* ordered after the previous step's sampler and its download, before this step's sampler */
        TRY(be->i.copy(be, m->meta_dev, m->sample_ids_dev, (size_t)n_seqs * sizeof(int32_t)));
    if (from_dev && m->tp_size > 1) /* rank 0 sampled them; the others hold zeros: the sum is rank 0's */
        TRY(be->i.all_reduce(be, lg_tensor_2d(m->meta_dev, LG_I32, 1, n_seqs)));
    int32_t *dv = m->meta_dev;
    *meta = (lg_step_meta){
        .n_tokens = T, .n_seqs = n_seqs, .max_q_len = sh->max_q,
        .max_kv_len = sh->max_q == 1 ? kv_bucket(sh->max_kv) : sh->max_kv,
        .tok = dv, .pos = dv + (pos - h), .slot = dv + (slot - h), .q_indptr = dv + (q_indptr - h),
        .kv_len = dv + (kv_len - h), .page_indptr = dv + (page_indptr - h), .page_ids = dv + (page_ids - h),
        .logit_rows = dv + (logit_rows - h), .n_logits = n_logits,
    };
    *plog_rows = dv + (plog - h);
    return 0;
}

/* A step's LoRA: its segments and what the launch shapes depend on. */
typedef struct lora_step {
    lg_lora_meta lm;
    unsigned mods; /* bit m: some segment has rank > 0 at module m in some layer */
    int max_seg;   /* the longest segment, tokens */
    int rank;      /* the largest rank of any segment at any slot */
    int tiles;     /* 32-token tiles over the segments */
} lora_step;

/* The LoRA segments of the step (runs of adjacent sequences with the same adapter) into ls, their weight
 * table and bounds uploaded; 0 with ls->lm.n_segs = 0 when no sequence has an adapter.
 *
 * The weight table ([segment][slot] lg_lora_w) is the same from one decode step to the next while the
 * batch keeps its adapters, and rebuilding and uploading it cost the GPU 0.06-0.3 ms of idle time per
 * step (H100, docs/benchmarks.md, GPU kernels, 2026-11-23: 5 KB per segment with 7 modules on 32 layers;
 * W2's 128 segments are 688 KB). So segment s's rows are compared with what the device holds
 * (lora_synced) and only a changed range is copied and uploaded. The comparison is of the contents, not
 * of adapter identities: a table at a reused address with other pages is a change. */
static int upload_lora_table(lg_model *m, const lg_step_seq *seqs, int n_seqs, lora_step *ls, lg_err *err)
{
    lg_backend *be = m->be;
    *ls = (lora_step){0};
    bool any = false;
    for (int s = 0; s < n_seqs; s++)
        any |= seqs[s].lora != NULL;
    if (!any)
        return 0;
    if (m->opts.lora_max_rank <= 0)
        return lg_fail(err, "a sequence uses an adapter but the model was set up without LoRA");
    const int n_slots = m->cfg.n_layers * LG_LORA_N_MODULES;
    const size_t seg_bytes = (size_t)n_slots * sizeof(lg_lora_w);
    int ns = 0, tt = 0, lo = -1, hi = -1;
    const int synced = m->lora_synced;
    m->lora_synced = 0; /* until the changed rows below are uploaded (an early return leaves 0) */
    for (int s = 0; s < n_seqs; s++) {
        if (s == 0 || seqs[s].lora != seqs[s - 1].lora) {
            m->lora_seg_host[ns] = tt;
            lg_lora_w *dst = m->lora_w_host + (size_t)ns * n_slots;
            const lg_lora_w *src = seqs[s].lora ? seqs[s].lora + (size_t)m->tp_rank * (size_t)n_slots : m->lora_w_zero;
            if (ns >= synced || memcmp(dst, src, seg_bytes) != 0) {
                memcpy(dst, src, seg_bytes);
                unsigned mods = 0;
                int rank = 0;
                for (int k = 0; k < n_slots; k++) {
                    if (dst[k].rank > m->opts.lora_max_rank)
                        return lg_fail(err, "adapter rank %d exceeds the step's maximum %d", dst[k].rank,
                                       m->opts.lora_max_rank);
                    if (dst[k].rank > 0)
                        mods |= 1u << (k % LG_LORA_N_MODULES);
                    if (dst[k].rank > rank)
                        rank = dst[k].rank;
                }
                m->lora_seg_mods[ns] = mods;
                m->lora_seg_rank[ns] = rank;
                if (lo < 0)
                    lo = ns;
                hi = ns;
            }
            ls->mods |= m->lora_seg_mods[ns];
            if (m->lora_seg_rank[ns] > ls->rank)
                ls->rank = m->lora_seg_rank[ns];
            ns++;
        }
        tt += seqs[s].n_tokens;
    }
    m->lora_seg_host[ns] = tt;
    for (int i = 0; i < ns; i++) {
        const int len = m->lora_seg_host[i + 1] - m->lora_seg_host[i];
        if (len > ls->max_seg)
            ls->max_seg = len;
        ls->tiles += (len + 31) / 32;
    }
    if (lo >= 0) {
        TRY(be->i.upload(be, m->lora_w_dev + (size_t)lo * n_slots, m->lora_w_host + (size_t)lo * n_slots,
                         (size_t)(hi - lo + 1) * seg_bytes));
        m->t_table_uploads++;
        m->t_table_bytes += (double)(hi - lo + 1) * (double)seg_bytes;
    }
    m->lora_synced = lo < 0 || synced > hi + 1 ? synced : hi + 1;
    TRY(be->i.upload(be, m->lora_seg_dev, m->lora_seg_host, (size_t)(ns + 1) * sizeof(int32_t)));
    ls->lm = (lg_lora_meta){.n_segs = ns, .n_slots = n_slots, .max_rank = m->opts.lora_max_rank,
                            .seg_indptr = m->lora_seg_dev, .w = m->lora_w_dev, .seg_indptr_host = m->lora_seg_host,
                            .step_max_rank = ls->rank};
    return 0;
}

/* The shape key of a decode step's recording (see the file comment). */
static step_key decode_key(lg_model *m, const lg_kv_view *kv, const lg_step_meta *meta, const lora_step *ls,
                           bool lora)
{
    lg_backend *be = m->be;
    step_key key;
    memset(&key, 0, sizeof key);
    key.n_tokens = meta->n_tokens;
    key.n_seqs = meta->n_seqs;
    key.n_logits = meta->n_logits;
    key.max_kv_len = be->i.decode_kv_key ? be->i.decode_kv_key(be, meta->n_tokens, m->cfg.n_heads, kv, meta->max_kv_len)
                                         : meta->max_kv_len;
    key.lora_segs = lora ? ls->lm.n_segs : -1;
    key.lora_max_seg = lora ? ls->max_seg : -1;
    key.lora_mods = (int32_t)ls->mods;
    /* the prefill SGMV kernels (segments of > 4 tokens: an adapter shared by several sequences)
     * take their shapes from the rank's bucket: 8, 16, 32, then multiples of 64 */
    int rank_bucket = 8;
    while (rank_bucket < ls->rank)
        rank_bucket = rank_bucket < 64 ? 2 * rank_bucket : rank_bucket + 64;
    key.lora_rank = !lora ? -1 : ls->max_seg <= 4 ? 0 : rank_bucket;
    key.lora_tiles = lora && ls->max_seg > 4 ? ls->tiles : 0;
    key.kv_base = (uint64_t)(uintptr_t)kv->base;
    key.kv_page_bytes = (uint64_t)kv->page_bytes;
    return key;
}

/* The forward pass, enqueued: a decode-shaped step (max_q_len 1) recorded under its key or replayed,
 * unless step graphs are off; anything else (or a recording that failed) eagerly. */
static int run_forward(lg_model *m, lg_page_pool *pool, const lg_step_meta *meta, const lora_step *ls,
                       const int32_t *plog_rows, int n_plog, lg_err *err)
{
    lg_backend *be = m->be;
    const lg_lora_meta *lora = ls->lm.n_segs > 0 ? &ls->lm : NULL;
    lg_kv_view kv = {
        .base = lg_page_pool_rank_base(pool, m->tp_rank), .page_bytes = lg_page_pool_page_bytes(pool),
        .page_tokens = m->opts.page_tokens, .n_kv_heads = m->cfg.n_kv_heads, .head_dim = m->cfg.head_dim, .dtype = m->kv_dtype,
    };
    if (meta->max_q_len == 1 && !m->no_graphs && n_plog == 0) {
        const step_key key = decode_key(m, &kv, meta, ls, lora != NULL);
        bool replayed = false;
        if (be->i.graph_begin(be, &key, sizeof key, &replayed) != 0) {
            m->no_graphs = true;
        } else if (replayed) {
            return 0;
        } else {
            int rc = forward(m, &kv, meta, lora, ls->mods, NULL, 0, err);
            if (be->i.graph_end(be, rc == 0) == 0)
                return 0;
            if (rc != 0)
                return -1; /* err says which op */
            /* the recording failed, nothing ran: eager from now on */
            m->no_graphs = true;
        }
    }
    return forward(m, &kv, meta, lora, ls->mods, plog_rows, n_plog, err);
}

/* Structured output: the host fills the masks while the forward just
 * enqueued runs, then they go up (after the forward in stream order) and
 * the masked rows' logits get -inf outside them before the sampler. */
static int apply_masks(lg_model *m, const step_shape *sh, size_t rows_at, const lg_step_masks *masks, lg_err *err)
{
    lg_backend *be = m->be;
    if (!be->i.mask_logits)
        return lg_fail(err, "backend %s cannot apply grammar masks on the device", be->i.name);
    masks->fill(masks->ctx);
    if (masks->n_words > m->mask_cap) {
        size_t cap = m->mask_cap ? m->mask_cap : 4096;
        while (cap < masks->n_words) cap *= 2;
        if (m->mask_dev) be->i.dealloc(be, m->mask_dev); /* the last step that read it has finished */
        m->mask_dev = be->i.alloc(be, cap * sizeof(uint32_t));
        m->mask_cap = m->mask_dev ? cap : 0;
        if (!m->mask_dev)
            return lg_fail(err, "cannot allocate %zu mask words on the device", cap);
    }
    TRY(be->i.upload(be, m->mask_dev, masks->host, masks->n_words * sizeof(uint32_t)));
    TRY(be->i.mask_logits(be, m->logits.data, sh->n_logits, m->cfg.vocab_size,
                          (const lg_sample_row *)(m->meta_dev + rows_at), m->mask_dev));
    return 0;
}

int lg_model_launch(lg_model *m, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs,
                    const lg_sample_row *sample_rows, const int32_t *pen, int n_pen, bool want_ids, bool want_lp,
                    bool want_logits, const lg_step_masks *masks, lg_err *err)
{
    lg_backend *be = m->be;
    bool from_dev;
    if (check_launch(m, pool, seqs, n_seqs, &from_dev, err) != 0)
        return -1;
    const double t0 = m->timing ? lg_now() : 0;
    step_shape sh;
    if (shape_of(m, seqs, n_seqs, &sh, err) != 0)
        return -1;
    const bool sample = sh.n_logits > 0 && sample_rows && want_ids;
    const bool lp = sample && want_lp;
    if (sample && !m->dev_sample)
        return lg_fail(err, "backend %s does not sample on the device", be->i.name);
    if (sh.n_plog > 0 && m->n_fl > 0)
        return lg_fail(err, "a step with prompt-logit rows was launched while another is in flight");
    lg_step_meta meta;
    size_t rows_at;
    const int32_t *plog_rows = NULL;
    if (upload_penalties(m, sample_rows, sh.n_logits, sample, pen, n_pen, err) != 0)
        return -1;
    /* tensor parallelism: the step is valid (the checks above are every rank's), so the other ranks start
     * it now and meet this one in its all-reduces; they have enqueued it when this returns */
    if (m->tp && lg_tp_post(m->tp, pool, seqs, n_seqs) != 0)
        return lg_fail(err, "tensor parallelism: the other ranks could not be started");
    int rc = upload_meta(m, seqs, n_seqs, &sh, from_dev, sample_rows, sample, &meta, &rows_at, &plog_rows, err);
    const double t1 = m->timing ? lg_now() : 0;
    lora_step ls;
    rc = rc ? rc : upload_lora_table(m, seqs, n_seqs, &ls, err);
    const double t2 = m->timing ? lg_now() : 0;
    rc = rc ? rc : run_forward(m, pool, &meta, &ls, plog_rows, sh.n_plog, err);
    if (m->tp) {
        lg_err perr;
        if (lg_tp_wait(m->tp, &perr) != 0 && rc == 0)
            rc = lg_fail(err, "%s", perr.msg);
    }
    if (rc != 0)
        return -1;
    const double t3 = m->timing ? lg_now() : 0;
    struct inflight *f = &m->fl[m->n_fl];
    *f = (struct inflight){.n_logits = sh.n_logits, .n_plog = sh.n_plog, .sample = sample, .lp = lp,
                           .logits = want_logits && sh.n_logits > 0, .decode = sh.max_q == 1,
                           .slot = (int)(m->n_launched & 1), .t = {t1 - t0, t2 - t1, t3 - t2, t3}};
    m->last_sampled = 0;
    if (sample && masks && masks->n_words > 0 && apply_masks(m, &sh, rows_at, masks, err) != 0)
        return -1;
    if (sample) { /* the sampler, then its one download (asynchronous into page-locked memory where it can be) */
        const size_t ms = (size_t)m->opts.max_seqs; /* the logprobs follow max_seqs ids */
        TRY(be->i.sample(be, m->sample_ids_dev, m->logits.data, sh.n_logits, m->cfg.vocab_size,
                         (const lg_sample_row *)(m->meta_dev + rows_at), n_pen > 0 ? m->pen_dev : NULL,
                         lp ? (lg_logprob_row *)(m->sample_ids_dev + ms) : NULL));
        m->last_sampled = sh.n_logits == n_seqs ? sh.n_logits : 0;
        if (m->out_pinned)
            TRY(be->i.download_async(be, m->sample_out_host + (size_t)f->slot * m->out_ints, m->sample_ids_dev,
                                     sample_out_bytes(m, sh.n_logits, lp), &f->ticket));
    }
    m->n_fl++;
    m->n_launched++;
    return 0;
}

int lg_model_collect(lg_model *m, int32_t *ids, lg_logprob_row *lp, float *logits, float *plogits, lg_err *err)
{
    lg_backend *be = m->be;
    if (m->n_fl == 0)
        return lg_fail(err, "no launched step to collect");
    const struct inflight f = m->fl[0];
    m->fl[0] = m->fl[1];
    m->n_fl--;
    const size_t ms = (size_t)m->opts.max_seqs;
    if (f.sample) {
        int32_t *out = m->sample_out_host + (size_t)f.slot * m->out_ints;
        if (f.ticket)
            TRY(be->i.download_wait(be, f.ticket));
        else
            TRY(be->i.download(be, out, m->sample_ids_dev, sample_out_bytes(m, f.n_logits, f.lp)));
        if (ids)
            memcpy(ids, out, (size_t)f.n_logits * sizeof(int32_t));
        if (lp && f.lp)
            memcpy(lp, out + ms, (size_t)f.n_logits * sizeof(lg_logprob_row));
    }
    if (f.logits && logits)
        TRY(be->i.download(be, logits, m->logits.data, (size_t)f.n_logits * (size_t)m->cfg.vocab_size * 4));
    if (f.n_plog > 0 && plogits)
        TRY(be->i.download(be, plogits, m->plogits.data, (size_t)f.n_plog * (size_t)m->cfg.vocab_size * 4));
    if (m->timing && f.decode) { /* decode steps */
        const double t4 = lg_now();
        if (m->t_steps < STEP_T_MAX) {
            const double d[4] = {f.t[0], f.t[1], f.t[2], t4 - f.t[3]};
            for (int k = 0; k < 4; k++) m->t_us[(size_t)k * STEP_T_MAX + m->t_steps] = (float)(1e6 * d[k]);
        }
        m->t_steps++;
    }
    return 0;
}

int lg_model_launch_peer(lg_model *m, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs, lg_err *err)
{
    const bool from_dev = seqs[0].tokens == NULL; /* rank 0 checked the step (check_launch) */
    step_shape sh;
    if (shape_of(m, seqs, n_seqs, &sh, err) != 0)
        return -1;
    lg_step_meta meta;
    size_t rows_at;
    const int32_t *plog_rows = NULL;
    if (upload_meta(m, seqs, n_seqs, &sh, from_dev, NULL, false, &meta, &rows_at, &plog_rows, err) != 0)
        return -1;
    meta.n_logits = 0; /* rank 0 computes the logits from the same residual stream */
    lora_step ls;
    if (upload_lora_table(m, seqs, n_seqs, &ls, err) != 0)
        return -1;
    return run_forward(m, pool, &meta, &ls, NULL, 0, err);
}
