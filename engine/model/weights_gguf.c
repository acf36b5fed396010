/*
 * weights_gguf.c — lg_weights_load_gguf: a llama.cpp / Ollama GGUF file to
 * lg_weights (HF names, HF layouts), config, tokenizer and chat template.
 *
 * Architectures: general.architecture names a row of model_arch.c's table
 * (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3); the hyper-parameters
 * come from "<arch>.*" keys. Anything else is refused by name. What
 * llama.cpp's converter changes, and how it is read back:
 *   - Gemma's norm weights are stored as 1 + w (the converter adds the 1),
 *     so norm_plus_one is off for GGUF files;
 *   - Gemma's layers alternate as llama.cpp fixes them (gemma2: every other
 *     layer slides from layer 0; gemma3: 5 of every 6), Gemma 3's local RoPE
 *     base is llama.cpp's 10000, and the query scale is 1/sqrt(head_dim)
 *     except for the 27B models (46 / 62 layers: 1/sqrt(hidden/heads)), as
 *     llama.cpp decides them: GGUF has no keys for these;
 *   - Phi-3 keeps q,k,v in one attn_qkv and gate,up in one ffn_up; partial
 *     rotary is rope.dimension_count < head_dim; LongRoPE is the tensors
 *     rope_factors_short / rope_factors_long with rope.scaling.attn_factor
 *     and rope.scaling.original_context_length.
 *
 * Tensors: GGUF names map to HF ones (token_embd -> model.embed_tokens,
 * blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...); unknown names are
 * skipped (logged when lg_log_verbose). ggml lists ne[0] innermost, so a 2-D
 * weight with ne = {in, out} is already [out][in] row-major: the HF shape is
 * ne reversed and the bytes need no transpose.
 *
 * Q/K un-permute (llama, mistral): llama.cpp's converter reorders the rows
 * of q_proj/k_proj within each head for its interleaved rope,
 *   gguf = hf.reshape(n_head, 2, hd/2, in).swapaxes(1, 2).reshape(out, in)
 * i.e. GGUF row h*hd + 2*i + j holds HF row h*hd + j*hd/2 + i. We write each
 * row back to its HF place while decoding (n_head = n_kv_heads for k).
 * qwen2 files are not permuted.
 *
 * dtypes: 1-D tensors (norms, biases) are always F32. A quantized 2-D
 * tensor of a layout the backends know (quant.h lg_ggml_qtype: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q2_K..Q6_K) keeps its blocks (lg_weights_add_quant):
 * each tensor its own layout, a file may mix them. The float 2-D tensors
 * all get one dtype, config.weight_dtype: if the file has any quantized 2-D
 * tensor, or its float 2-D tensors disagree, that is opts->dequant_dtype,
 * taken literally (LG_F32 == 0, so zeroed opts mean F32; opts == NULL means
 * F16); otherwise the file's own float dtype. With opts->dequantize the
 * quantized 2-D tensors are expanded to that dtype too (the engine then
 * sees no quantized weight). A tensor already in its target form and not
 * permuted is used in place from the mapping (zero copy; the mapping is
 * handed to lg_weights_keep_mmap); every other tensor gets its own heap
 * buffer owned by the weights (a permuted quantized q/k: its rows moved,
 * blocks unchanged).
 *
 * Llama-3 rope scaling: GGUF keeps it only as a "rope_freqs.weight" tensor
 * of per-frequency divisors. We try to recover (factor, low, high, orig ctx)
 * by recomputing the divisors with llama.cpp's formula for the usual
 * parameters (low 1, high 4, orig = rope.scaling.original_context_length or
 * 8192); if every divisor matches, the config says LG_ROPE_LLAMA3 and the
 * tensor is dropped. Otherwise the raw divisors are kept as an F32 tensor
 * "rope_freqs" [rope_dim / 2] (inv_freq[i] /= rope_freqs[i]) and
 * rope_scaling stays NONE: exactly one of the two describes the scaling.
 *
 * Called by weights_load.c (the format dispatch); builds the model through
 * weights.c's container API only, which knows nothing of this file.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/model_arch.h"
#include "engine/model/quant.h"
#include "engine/model/weights.h"

/* ---- small helpers ------------------------------------------------------- */

typedef struct ctx {
    lg_gguf *g;
    const char *arch;
    lg_model_config *cfg;
    lg_err *err;
} ctx;

/* "<arch>.<suffix>" */
static const char *akey(const ctx *c, const char *suffix, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", c->arch, suffix);
    return buf;
}

/* Integer hyper-parameter: required ones fail when absent. */
static int get_dim(const ctx *c, const char *suffix, bool required, int def, int *out)
{
    char k[128];
    int64_t v;
    int r = lg_gguf_get_int(c->g, akey(c, suffix, k, sizeof k), &v, c->err);
    if (r < 0)
        return -1;
    if (r == 0) {
        if (required)
            return lg_fail(c->err, "gguf: missing metadata '%s' (expected for architecture %s)", k, c->arch);
        *out = def;
        return 0;
    }
    if (v <= 0 || v > INT32_MAX)
        return lg_fail(c->err, "gguf: metadata '%s' = %lld, expected a positive 32-bit integer", k, (long long)v);
    *out = (int)v;
    return 0;
}

static int get_real(const ctx *c, const char *suffix, bool required, double def, float *out)
{
    char k[128];
    double v;
    int r = lg_gguf_get_float(c->g, akey(c, suffix, k, sizeof k), &v, c->err);
    if (r < 0)
        return -1;
    if (r == 0) {
        if (required)
            return lg_fail(c->err, "gguf: missing metadata '%s' (expected for architecture %s)", k, c->arch);
        v = def;
    }
    *out = (float)v;
    return 0;
}

/* Optional token id; -1 when absent. */
static int get_tok_id(lg_gguf *g, const char *key, int *out, lg_err *err)
{
    int64_t v;
    int r = lg_gguf_get_int(g, key, &v, err);
    if (r < 0)
        return -1;
    if (r == 0 || v < 0 || v > INT32_MAX) {
        *out = -1;
        return 0;
    }
    *out = (int)v;
    return 0;
}


static bool float_dtype(uint32_t t, lg_dtype *dt)
{
    switch (t) {
    case LG_GGML_F32: *dt = LG_F32; return true;
    case LG_GGML_F16: *dt = LG_F16; return true;
    case LG_GGML_BF16: *dt = LG_BF16; return true;
    }
    return false;
}

/* ---- config -------------------------------------------------------------- */

static int read_config(ctx *c)
{
    lg_model_config *cfg = c->cfg;
    const lg_arch *A = lg_arch_by_gguf(c->arch);
    lg_arch_apply(A, cfg);
    cfg->norm_plus_one = false; /* the converter stored 1 + w */
    if (get_dim(c, "block_count", true, 0, &cfg->n_layers) ||
        get_dim(c, "embedding_length", true, 0, &cfg->d_model) ||
        get_dim(c, "feed_forward_length", true, 0, &cfg->d_ff) ||
        get_dim(c, "attention.head_count", true, 0, &cfg->n_heads) ||
        get_dim(c, "attention.head_count_kv", false, cfg->n_heads, &cfg->n_kv_heads) ||
        get_dim(c, "context_length", false, 2048, &cfg->max_pos) ||
        get_real(c, "rope.freq_base", false, 10000.0, &cfg->rope_theta) ||
        get_real(c, "attention.layer_norm_rms_epsilon", true, 0, &cfg->rms_eps))
        return -1;
    if (cfg->d_model % cfg->n_heads)
        return lg_fail(c->err, "gguf: %s.embedding_length = %d is not a multiple of head_count = %d", c->arch,
                       cfg->d_model, cfg->n_heads);
    int vlen, rope_dim;
    if (get_dim(c, "attention.key_length", false, cfg->d_model / cfg->n_heads, &cfg->head_dim) ||
        get_dim(c, "attention.value_length", false, cfg->head_dim, &vlen) ||
        get_dim(c, "rope.dimension_count", false, cfg->head_dim, &rope_dim))
        return -1;
    if (vlen != cfg->head_dim)
        return lg_fail(c->err, "gguf: %s.attention.value_length = %d differs from key_length = %d; expected equal",
                       c->arch, vlen, cfg->head_dim);
    if (rope_dim > cfg->head_dim || rope_dim <= 0)
        return lg_fail(c->err, "gguf: %s.rope.dimension_count = %d, expected 1 to head_dim = %d", c->arch, rope_dim,
                       cfg->head_dim);
    cfg->rot_dim = rope_dim < cfg->head_dim ? rope_dim : 0; /* partial rotary (phi3) */

    char k[128];
    const char *stype = NULL;
    if (lg_gguf_get_str(c->g, akey(c, "rope.scaling.type", k, sizeof k), &stype, NULL, c->err) < 0)
        return -1;
    float factor = 0;
    if (get_real(c, "rope.scaling.factor", false, 0, &factor))
        return -1;
    /* Older files: "<arch>.rope.scale_linear" */
    if (!stype && factor == 0) {
        if (get_real(c, "rope.scale_linear", false, 0, &factor))
            return -1;
        if (factor != 0 && factor != 1)
            stype = "linear";
    }
    if (stype && strcmp(stype, "none")) {
        if (strcmp(stype, "linear"))
            return lg_fail(c->err, "gguf: %s.rope.scaling.type is '%s', expected none or linear (yarn and others are not supported)",
                           c->arch, stype);
        if (!(factor > 0))
            return lg_fail(c->err, "gguf: linear rope scaling with factor %g, expected > 0", factor);
        if (factor != 1) {
            cfg->rope_scaling = LG_ROPE_LINEAR;
            cfg->rope_factor = factor;
        }
    }
    int sw = 0;
    if (get_dim(c, "attention.sliding_window", false, 0, &sw))
        return -1;
    /* which layers slide: <arch>.attention.sliding_window_pattern (a period) where the file has it, else
     * llama.cpp's rules (gemma: the family's period; a window on any other family: every layer, as
     * transformers runs Mistral and Phi-3; qwen2 / qwen3 run without, as llama.cpp does) */
    char pk[128];
    int64_t period = A->window_pattern;
    lg_gguf_vtype pvt;
    uint64_t pn;
    if (lg_gguf_get_arr_info(c->g, akey(c, "attention.sliding_window_pattern", pk, sizeof pk), &pvt, &pn, c->err) > 0)
        return lg_fail(c->err, "gguf: %s is a per-layer list, which is not supported (expected a period)", pk);
    if (lg_gguf_get_int(c->g, pk, &period, c->err) < 0)
        return -1;
    if (sw > 0 && A->window != LG_WINDOW_QWEN) {
        if (A->window == LG_WINDOW_PATTERN && (period <= 0 || period > LG_MAX_LAYERS))
            return lg_fail(c->err, "gguf: %s = %lld, expected 1 to %d", pk, (long long)period, LG_MAX_LAYERS);
        cfg->sliding_window_size = sw;
        for (int l = 0; l < cfg->n_layers; l++) {
            const bool slides = A->window != LG_WINDOW_PATTERN || (l + 1) % (int)period != 0;
            lg_set_layer_slides(cfg, l, slides);
            cfg->sliding_window |= slides;
        }
    }
    if (get_real(c, "attn_logit_softcapping", false, 0, &cfg->attn_softcap) ||
        get_real(c, "final_logit_softcapping", false, 0, &cfg->final_softcap))
        return -1;
    if (A->post_norms) { /* Gemma: llama.cpp's query scale */
        const bool big = (!strcmp(c->arch, "gemma2") && cfg->n_layers == 46) ||
                         (!strcmp(c->arch, "gemma3") && cfg->n_layers == 62);
        cfg->attn_scale = 1.0f / sqrtf(big ? (float)cfg->d_model / (float)cfg->n_heads : (float)cfg->head_dim);
    }
    if (get_real(c, "attention.scale", false, cfg->attn_scale, &cfg->attn_scale))
        return -1;
    cfg->rope_local_theta = (float)A->local_theta_default;

    /* Token ids. */
    int eos, eot, eom;
    if (get_tok_id(c->g, "tokenizer.ggml.bos_token_id", &cfg->bos_id, c->err) ||
        get_tok_id(c->g, "tokenizer.ggml.eos_token_id", &eos, c->err) ||
        get_tok_id(c->g, "tokenizer.ggml.eot_token_id", &eot, c->err) ||
        get_tok_id(c->g, "tokenizer.ggml.eom_token_id", &eom, c->err))
        return -1;
    int cand[3] = {eos, eot, eom};
    cfg->n_eos = 0;
    for (int i = 0; i < 3; i++) {
        bool dup = cand[i] < 0;
        for (int j = 0; j < cfg->n_eos && !dup; j++)
            dup = cfg->eos_ids[j] == cand[i];
        if (!dup && cfg->n_eos < LG_MAX_EOS)
            cfg->eos_ids[cfg->n_eos++] = cand[i];
    }
    return 0;
}

/* ---- tokenizer ------------------------------------------------------------ */

/* Builds the tokenizer if the file has a vocabulary; *n_tokens = its size
 * (0 if none). */
static int read_tokenizer(ctx *c, lg_weights *w, int *n_tokens)
{
    lg_gguf *g = c->g;
    lg_err *err = c->err;
    *n_tokens = 0;
    const char *model = NULL;
    if (lg_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL, err) < 0)
        return -1;
    if (!model || !strcmp(model, "none") || !strcmp(model, "no_vocab"))
        return 0;
    lg_vocab_spec sp;
    memset(&sp, 0, sizeof sp);
    if (!strcmp(model, "gpt2"))
        sp.kind = LG_TOK_BYTE_BPE;
    else if (!strcmp(model, "llama"))
        sp.kind = LG_TOK_SPM_BPE;
    else
        return lg_fail(err, "gguf: tokenizer.ggml.model is '%s', expected gpt2 (byte-level BPE) or llama (SentencePiece BPE)",
                       model);
    if (lg_gguf_get_str(g, "tokenizer.ggml.pre", &sp.pre, NULL, err) < 0)
        return -1;

    char **tokens = NULL, **merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    size_t nt = 0, nm = 0, ns = 0, ny = 0;
    int rc = -1;
    int r = lg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", &tokens, &nt, err);
    if (r < 0)
        goto done;
    if (r == 0 || nt == 0) {
        lg_fail(err, "gguf: tokenizer.ggml.model is '%s' but tokenizer.ggml.tokens is missing or empty", model);
        goto done;
    }
    if (nt > (1u << 24)) {
        lg_fail(err, "gguf: tokenizer.ggml.tokens has %zu entries, expected at most %u", nt, 1u << 24);
        goto done;
    }
    if (lg_gguf_get_arr_f32(g, "tokenizer.ggml.scores", &scores, &ns, err) < 0 ||
        lg_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", &types, &ny, err) < 0 ||
        lg_gguf_get_arr_str(g, "tokenizer.ggml.merges", &merges, &nm, err) < 0)
        goto done;
    if ((scores && ns != nt) || (types && ny != nt)) {
        lg_fail(err, "gguf: tokenizer arrays disagree: %zu tokens, %zu scores, %zu token types", nt, ns, ny);
        goto done;
    }
    if (nm > INT32_MAX) {
        lg_fail(err, "gguf: tokenizer.ggml.merges has %zu entries, too many", nm);
        goto done;
    }
    sp.n_tokens = (int)nt;
    sp.tokens = (const char *const *)tokens;
    sp.scores = scores;
    sp.types = types;
    sp.n_merges = (int)nm;
    sp.merges = (const char *const *)merges;
    if (get_tok_id(g, "tokenizer.ggml.bos_token_id", &sp.bos_id, err) ||
        get_tok_id(g, "tokenizer.ggml.eos_token_id", &sp.eos_id, err) ||
        get_tok_id(g, "tokenizer.ggml.unknown_token_id", &sp.unk_id, err) ||
        get_tok_id(g, "tokenizer.ggml.padding_token_id", &sp.pad_id, err))
        goto done;
    int *ids[4] = {&sp.bos_id, &sp.eos_id, &sp.unk_id, &sp.pad_id};
    for (int i = 0; i < 4; i++)
        if (*ids[i] >= (int)nt)
            *ids[i] = -1; /* llama.cpp tolerates these; an out-of-range id means "none" */
    /* llama.cpp defaults: SPM adds BOS and a space prefix, byte-level BPE neither. */
    sp.add_bos = sp.kind == LG_TOK_SPM_BPE;
    sp.add_space_prefix = sp.kind == LG_TOK_SPM_BPE;
    if (lg_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &sp.add_bos, err) < 0 ||
        lg_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &sp.add_space_prefix, err) < 0)
        goto done;

    lg_tokenizer *tok = NULL;
    if (lg_tokenizer_from_vocab(&sp, &tok, err)) {
        lg_err_prefix(err, "gguf tokenizer");
        goto done;
    }
    lg_weights_set_tokenizer(w, tok);
    *n_tokens = (int)nt;
    rc = 0;
done:
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    return rc;
}

/* ---- tensor names ---------------------------------------------------------- */

static const struct {
    const char *gguf, *hf;
} k_layer_names[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {"attn_qkv", "self_attn.qkv_proj"},
};

typedef enum { PERM_NONE, PERM_Q, PERM_K } perm_kind;

/* HF name for a GGUF name into hf; false if the name is not one we use. */
static bool map_name(const lg_model_config *cfg, const char *name, int n_layers, char *hf, size_t n,
                     perm_kind *perm)
{
    static const char *const top[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
    };
    *perm = PERM_NONE;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        if (!strcmp(name, top[i][0])) {
            snprintf(hf, n, "%s", top[i][1]);
            return true;
        }
    }
    if (strncmp(name, "blk.", 4))
        return false;
    const char *p = name + 4;
    long layer = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) {
        layer = layer * 10 + (*p++ - '0');
        digits++;
    }
    if (!digits || *p != '.' || layer >= n_layers)
        return false;
    p++;
    const char *dot = strrchr(p, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
        return false;
    size_t base_len = (size_t)(dot - p);
    for (size_t i = 0; i < sizeof k_layer_names / sizeof k_layer_names[0]; i++) {
        if (strlen(k_layer_names[i].gguf) == base_len && !strncmp(p, k_layer_names[i].gguf, base_len)) {
            const char *to = k_layer_names[i].hf;
            if (cfg->post_norms && !strcmp(k_layer_names[i].gguf, "ffn_norm"))
                to = "pre_feedforward_layernorm"; /* Gemma: the MLP's input norm */
            if (cfg->fused_qkv && !strcmp(k_layer_names[i].gguf, "ffn_up"))
                to = "mlp.gate_up_proj"; /* Phi-3: gate and up in one */
            snprintf(hf, n, "model.layers.%ld.%s%s", layer, to, dot);
            if (i == 2) *perm = PERM_Q;
            if (i == 3) *perm = PERM_K;
            return true;
        }
    }
    return false;
}

/* ---- Llama-3 rope factors ------------------------------------------------- */

/* llama.cpp's convert_hf_to_gguf rope_freqs for the given parameters. */
static double llama3_divisor(int i, int dim, double theta, double factor, double low, double high, double orig)
{
    double freq = 1.0 / pow(theta, (double)(2 * i) / dim);
    double wavelen = 2 * M_PI / freq;
    double low_wl = orig / low, high_wl = orig / high;
    if (wavelen < high_wl) return 1.0;
    if (wavelen > low_wl) return factor;
    double smooth = (orig / wavelen - low) / (high - low);
    return 1.0 / ((1 - smooth) / factor + smooth);
}

/* Returns true (and fills cfg) when the divisors are exactly Llama-3's. */
static bool fit_llama3(const float *f, int n, lg_model_config *cfg, int orig_hint)
{
    float factor = 0;
    for (int i = 0; i < n; i++)
        if (f[i] > factor) factor = f[i];
    if (!(factor > 1))
        return false;
    int origs[2] = {orig_hint > 0 ? orig_hint : 8192, 8192};
    for (int o = 0; o < 2; o++) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            double want = llama3_divisor(i, 2 * n, cfg->rope_theta, factor, 1.0, 4.0, origs[o]);
            ok = fabs(f[i] - want) <= 1e-5 * want;
        }
        if (ok) {
            cfg->rope_scaling = LG_ROPE_LLAMA3;
            cfg->rope_factor = factor;
            cfg->rope_low_freq_factor = 1.0f;
            cfg->rope_high_freq_factor = 4.0f;
            cfg->rope_orig_max_pos = origs[o];
            return true;
        }
    }
    return false;
}

/* ---- progress ------------------------------------------------------------- */

typedef struct progress {
    bool on;
    int n_total;
    size_t bytes_total, bytes_done;
    double t0;
} progress;

static void progress_draw(progress *p, int done)
{
    if (!p->on)
        return;
    const int width = 30;
    int fill = p->bytes_total ? (int)((double)p->bytes_done / p->bytes_total * width) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\rloading gguf [%s] %d/%d tensors, %.0f/%.0f MB, %.1fs", bar, done, p->n_total,
            p->bytes_done / 1e6, p->bytes_total / 1e6, lg_now() - p->t0);
    if (done == p->n_total)
        fputc('\n', stderr);
}

/* ---- tensors -------------------------------------------------------------- */

/* A quantized 2-D tensor kept in its blocks: in place, or rows moved by row_map (taken and freed). */
static int keep_quant(ctx *c, lg_weights *w, const lg_gguf_tensor *t, const char *hf, const int64_t *shape,
                      int64_t *row_map)
{
    const lg_qtype q = lg_ggml_qtype(t->type);
    if (!row_map)
        return lg_weights_add_quant(w, hf, q, shape, t->data, NULL, c->err);
    const size_t row_bytes = t->nbytes / (size_t)shape[0];
    void *buf = NULL;
    if (posix_memalign(&buf, 64, t->nbytes ? t->nbytes : 1))
        buf = NULL;
    if (!buf) {
        free(row_map);
        return lg_fail(c->err, "out of memory for tensor '%s' (%zu bytes)", hf, t->nbytes);
    }
    for (int64_t r = 0; r < shape[0]; r++)
        memcpy((char *)buf + (size_t)row_map[r] * row_bytes, (const char *)t->data + (size_t)r * row_bytes, row_bytes);
    free(row_map);
    if (lg_weights_add_quant(w, hf, q, shape, buf, buf, c->err)) {
        free(buf);
        return -1;
    }
    return 0;
}

static int load_tensor(ctx *c, lg_weights *w, const lg_gguf_tensor *t, const char *hf, perm_kind perm,
                       lg_dtype target2d, bool permuted_file, bool dequantize)
{
    lg_err *err = c->err;
    int64_t shape[4];
    for (int d = 0; d < t->n_dims; d++)
        shape[d] = t->ne[t->n_dims - 1 - d];
    lg_dtype target = t->n_dims == 1 ? LG_F32 : target2d;
    int64_t row_len = t->ne[0];
    int64_t n_rows = (int64_t)(t->n_elems / (uint64_t)row_len);

    int64_t *row_map = NULL;
    if (perm != PERM_NONE && permuted_file) {
        int n_head = perm == PERM_Q ? c->cfg->n_heads : c->cfg->n_kv_heads;
        int64_t hd = c->cfg->head_dim;
        /* 1-D bias: each element is a "row" of length 1. */
        int64_t rows = t->n_dims == 1 ? t->ne[0] : n_rows;
        if (t->n_dims > 2 || rows != n_head * hd)
            return lg_fail(err, "gguf: tensor '%s' has %lld rows, expected %d heads x %lld = %lld", t->name,
                           (long long)rows, n_head, (long long)hd, (long long)(n_head * hd));
        if (!(row_map = malloc((size_t)rows * sizeof *row_map)))
            return lg_fail(err, "out of memory for '%s'", t->name);
        for (int64_t h = 0; h < n_head; h++)
            for (int64_t i = 0; i < hd / 2; i++)
                for (int64_t j = 0; j < 2; j++)
                    row_map[h * hd + 2 * i + j] = h * hd + j * (hd / 2) + i;
    }

    if (t->n_dims == 2 && !dequantize && lg_ggml_qtype(t->type) != LG_QNONE)
        return keep_quant(c, w, t, hf, shape, row_map);

    /* Zero copy needs the data 32-byte aligned (true for the default
     * general.alignment; a file may choose less). */
    lg_dtype src_dt;
    if (!row_map && float_dtype(t->type, &src_dt) && src_dt == target && (uintptr_t)t->data % 32 == 0)
        return lg_weights_add(w, hf, target, t->n_dims, shape, t->data, NULL, err);

    /* n_elems * 4 <= 8x the tensor's bytes in the file: no overflow. */
    size_t nbytes = (size_t)t->n_elems * lg_dtype_size(target);
    void *buf = NULL;
    if (posix_memalign(&buf, 64, nbytes ? nbytes : 1))
        buf = NULL;
    if (!buf) {
        free(row_map);
        return lg_fail(err, "out of memory for tensor '%s' (%zu bytes)", hf, nbytes);
    }
    int rc;
    if (t->n_dims == 1 && row_map) /* permuted bias: decode, then move elements */
        rc = lg_dequant(t->type, t->data, t->ne[0], 1, LG_F32, buf, row_map, 1, err);
    else
        rc = lg_dequant(t->type, t->data, n_rows, row_len, target, buf, row_map, 0, err);
    free(row_map);
    if (rc == 0)
        rc = lg_weights_add(w, hf, target, t->n_dims, shape, buf, buf, err);
    if (rc) {
        free(buf);
        lg_err_prefix(err, "tensor '%s'", t->name);
        return -1;
    }
    return 0;
}

static int load_tensors(ctx *c, lg_weights *w, const lg_load_opts *opts, lg_dtype target2d)
{
    lg_gguf *g = c->g;
    bool permuted = !strcmp(c->arch, "llama") || !strcmp(c->arch, "mistral");
    int n = lg_gguf_n_tensors(g);
    progress pr = {opts && opts->progress && isatty(2), n, 0, 0, lg_now()};
    for (int i = 0; i < n; i++)
        pr.bytes_total += lg_gguf_tensor_at(g, i)->nbytes;
    for (int i = 0; i < n; i++) {
        const lg_gguf_tensor *t = lg_gguf_tensor_at(g, i);
        char hf[160];
        perm_kind perm;
        if (!strcmp(t->name, "rope_freqs.weight")) {
            /* handled in lg_weights_load_gguf */
        } else if (!map_name(c->cfg, t->name, c->cfg->n_layers, hf, sizeof hf, &perm)) {
            if (lg_log_verbose)
                lg_log("gguf: skipping tensor '%s' (not used by the %s forward)", t->name, c->arch);
        } else if (load_tensor(c, w, t, hf, perm, target2d, permuted, opts && opts->dequantize)) {
            if (pr.on)
                fputc('\n', stderr);
            return -1;
        }
        pr.bytes_done += t->nbytes;
        progress_draw(&pr, i + 1);
    }
    return 0;
}

/* The 2-D dtype (see the design note). */
static lg_dtype pick_target(lg_gguf *g, const lg_load_opts *opts)
{
    lg_dtype deq = opts ? opts->dequant_dtype : LG_F16;
    if (deq != LG_F32 && deq != LG_F16 && deq != LG_BF16)
        deq = LG_F16;
    bool have = false, mixed = false;
    lg_dtype common = deq;
    for (int i = 0; i < lg_gguf_n_tensors(g); i++) {
        const lg_gguf_tensor *t = lg_gguf_tensor_at(g, i);
        if (t->n_dims < 2)
            continue;
        lg_dtype dt;
        if (!float_dtype(t->type, &dt))
            return deq;
        if (have && dt != common)
            mixed = true;
        common = dt;
        have = true;
    }
    return have && !mixed ? common : deq;
}

/* ---- entry point ---------------------------------------------------------- */

int lg_weights_load_gguf(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err)
{
    *out = NULL;
    lg_gguf *g = NULL;
    lg_weights *w = NULL;
    float *rf = NULL;
    if (lg_gguf_open(path, &g, err))
        return -1;
    if (!(w = lg_weights_new())) {
        lg_fail(err, "out of memory");
        goto fail;
    }
    lg_model_config *cfg = lg_weights_config_mut(w);
    memset(cfg, 0, sizeof *cfg);
    ctx c = {g, NULL, cfg, err};

    const char *arch = NULL;
    if (lg_gguf_get_str(g, "general.architecture", &arch, NULL, err) < 0)
        goto fail;
    if (!arch) {
        lg_fail(err, "gguf: missing metadata 'general.architecture' (expected one of %s)", lg_arch_gguf_list());
        goto fail;
    }
    if (!lg_arch_by_gguf(arch)) {
        lg_fail(err, "gguf: architecture '%.64s' is not supported (expected one of %s)", arch, lg_arch_gguf_list());
        goto fail;
    }
    c.arch = arch;
    if (read_config(&c))
        goto fail;

    /* Quantized tensors we could not decode fail early, by name, before any work. */
    for (int i = 0; i < lg_gguf_n_tensors(g) && !(opts && opts->vocab_only); i++) {
        const lg_gguf_tensor *t = lg_gguf_tensor_at(g, i);
        if (!lg_quant_supported(t->type)) {
            lg_fail(err, "gguf: tensor '%s' has type %s, which is not supported: expected F32, F16, BF16, Q4_0, "
                         "Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K", t->name, lg_ggml_type_name(t->type));
            goto fail;
        }
    }

    const lg_gguf_tensor *emb = lg_gguf_find_tensor(g, "token_embd.weight");
    cfg->tie_embeddings = lg_gguf_find_tensor(g, "output.weight") == NULL;
    cfg->qkv_bias = lg_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    cfg->weight_dtype = pick_target(g, opts);

    int n_tokens;
    if (read_tokenizer(&c, w, &n_tokens))
        goto fail;
    const char *tmpl = NULL;
    if (lg_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL, err) < 0)
        goto fail;
    if (tmpl)
        lg_weights_set_chat_template(w, tmpl);

    /* vocab size: the embedding's rows (they may be padded past the token
     * list), else <arch>.vocab_size, else the token count. */
    int vk = 0;
    if (get_dim(&c, "vocab_size", false, 0, &vk))
        goto fail;
    if (emb && emb->n_dims == 2) {
        if (emb->ne[1] > INT32_MAX || emb->ne[1] < n_tokens) {
            lg_fail(err, "gguf: token_embd.weight has %lld rows, expected at least the %d tokens of the vocabulary",
                    (long long)emb->ne[1], n_tokens);
            goto fail;
        }
        cfg->vocab_size = (int)emb->ne[1];
    } else {
        cfg->vocab_size = vk ? vk : n_tokens;
    }

    /* Phi-3 LongRoPE: the factors are tensors */
    const lg_gguf_tensor *fs = lg_gguf_find_tensor(g, "rope_factors_short.weight"),
                         *fl = lg_gguf_find_tensor(g, "rope_factors_long.weight");
    if (fs || fl) {
        const int rot = cfg->rot_dim > 0 ? cfg->rot_dim : cfg->head_dim;
        if (!fs || !fl || fs->n_dims != 1 || fl->n_dims != 1 || fs->ne[0] != rot / 2 || fl->ne[0] != rot / 2 ||
            rot / 2 > LG_MAX_ROPE_FACTORS || !lg_quant_supported(fs->type) || !lg_quant_supported(fl->type)) {
            lg_fail(err, "gguf: rope_factors_short / rope_factors_long are not both vectors of rope dims / 2 = %d", rot / 2);
            goto fail;
        }
        if (lg_dequant(fs->type, fs->data, 1, rot / 2, LG_F32, cfg->rope_short, NULL, 1, err) ||
            lg_dequant(fl->type, fl->data, 1, rot / 2, LG_F32, cfg->rope_long, NULL, 1, err))
            goto fail;
        float af = 0;
        if (get_dim(&c, "rope.scaling.original_context_length", true, 0, &cfg->rope_orig_max_pos) ||
            get_real(&c, "rope.scaling.attn_factor", false, 0, &af))
            goto fail;
        if (af == 0) { /* transformers' default */
            const double f = (double)cfg->max_pos / cfg->rope_orig_max_pos;
            af = f <= 1.0 ? 1.0f : (float)sqrt(1.0 + log(f) / log((double)cfg->rope_orig_max_pos));
        }
        cfg->rope_scaling = LG_ROPE_LONGROPE;
        cfg->n_rope_factors = rot / 2;
        cfg->rope_attn_factor = af;
    }

    /* Llama-3 rope factors. */
    const lg_gguf_tensor *rft = lg_gguf_find_tensor(g, "rope_freqs.weight");
    if (rft) {
        if (rft->n_dims != 1 || rft->ne[0] != cfg->head_dim / 2 || !lg_quant_supported(rft->type)) {
            lg_fail(err, "gguf: rope_freqs.weight is not an F32/F16/BF16 vector of head_dim/2 = %d elements",
                    cfg->head_dim / 2);
            goto fail;
        }
        int n = (int)rft->ne[0];
        if (!(rf = malloc((size_t)n * sizeof *rf))) {
            lg_fail(err, "out of memory");
            goto fail;
        }
        if (lg_dequant(rft->type, rft->data, 1, n, LG_F32, rf, NULL, 1, err))
            goto fail;
        int orig = 0;
        if (get_dim(&c, "rope.scaling.original_context_length", false, 0, &orig))
            goto fail;
        if (cfg->rope_scaling == LG_ROPE_NONE && !fit_llama3(rf, n, cfg, orig) && !(opts && opts->vocab_only)) {
            int64_t shape[1] = {n};
            if (lg_weights_add(w, "rope_freqs", LG_F32, 1, shape, rf, rf, err))
                goto fail;
            rf = NULL; /* owned by w */
        }
    }

    if (lg_model_config_validate(cfg, err))
        goto fail;

    if (!(opts && opts->vocab_only)) {
        if (load_tensors(&c, w, opts, cfg->weight_dtype))
            goto fail;
        if (lg_weights_check_llama(w, err))
            goto fail;
        /* the base model's quantization for the config (model_config.h): the layout of the first quantized
         * layer weight, e.g. "gguf Q4_1" */
        snprintf(cfg->quant_method, sizeof cfg->quant_method, "none");
        snprintf(cfg->quant_desc, sizeof cfg->quant_desc, "none");
        for (int i = 0; i < lg_weights_count(w); i++) {
            const lg_wtensor *t = lg_weights_at(w, i);
            if (t->q != LG_QNONE && !strncmp(t->name, "model.layers.", 13)) {
                snprintf(cfg->quant_method, sizeof cfg->quant_method, "gguf");
                snprintf(cfg->quant_desc, sizeof cfg->quant_desc, "gguf %s", lg_qtype_get(t->q).name);
                break;
            }
        }
        /* Zero-copy tensors point into the mapping: it now lives with w. */
        lg_mmap m;
        lg_gguf_take_mmap(g, &m);
        if (lg_weights_keep_mmap(w, &m, err)) {
            lg_weights_free(w); /* before unmapping: nothing reads tensor data on free */
            w = NULL;
            lg_mmap_close(&m);
            goto fail;
        }
    }
    free(rf);
    lg_gguf_free(g);
    *out = w;
    return 0;
fail:
    lg_err_prefix(err, "%s", path);
    free(rf);
    lg_weights_free(w);
    lg_gguf_free(g);
    return -1;
}
