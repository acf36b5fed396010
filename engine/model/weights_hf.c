/*
 * weights_hf.c — loads a Hugging Face model directory into lg_weights.
 *
 *   config.json                    -> lg_model_config (the families of model_arch.c)
 *   generation_config.json         -> extra eos ids (unioned in), bos fallback
 *   model.safetensors              -> tensors, or
 *   model.safetensors.index.json   -> weight_map name -> shard; every shard is
 *                                     mmap'd once and kept alive by the weights
 *   tokenizer.json (+ tokenizer_config.json) -> lg_tokenizer (optional)
 *   chat_template.jinja > chat_template.json > tokenizer_config.json
 *                                  -> chat template (optional)
 *
 * Tensors are zero-copy views into the mappings (copied only if a writer left
 * one misaligned for its dtype). Names are normalised to the HF Llama names:
 * checkpoints saved from the bare model lack the "model." prefix; it is added.
 * rotary_emb.inv_freq buffers are skipped. The index is authoritative: every
 * name it lists must be in the shard it names; shard entries it does not list
 * are ignored.
 *
 * Defaults follow transformers' LlamaConfig / MistralConfig / Qwen2Config
 * (num_key_value_heads = heads, head_dim = hidden / heads, rope_theta 10000,
 * rms_norm_eps 1e-6, tie_word_embeddings false). Anything the engine cannot
 * run exactly (o_proj / mlp biases, rope types other than default, linear,
 * llama3 and longrope, activations other than silu and gelu_pytorch_tanh,
 * the features of REFUSED_KEYS: experts, ...) is refused with a message
 * naming it. A quantization_config is read by weights_hfquant.c: the tensors
 * of quantized modules are held there while the files load and repacked
 * into backend.h's planar layouts after (what loads and what is refused:
 * that file's note). Gemma 3 text configs come in two forms (transformers 5's
 * rope_parameters per layer type, or rope_theta + rope_local_base_freq +
 * rope_scaling); both are read.
 *
 * Called by weights_load.c (the format dispatch); builds the model through
 * weights.c's container API only, which knows nothing of this file.
 */
#include "engine/model/model_arch.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/model/weights_hfquant.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONFIG_BYTES ((size_t)16 << 20)
#define MAX_TOKENIZER_BYTES ((size_t)256 << 20)
#define MAX_INDEX_BYTES ((size_t)64 << 20)

static int join(char *buf, size_t cap, const char *dir, const char *name, lg_err *err)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return lg_fail(err, "path %s/%s is longer than %zu bytes", dir, name, cap - 1);
    return 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Loads dir/name as JSON. *out NULL and 0 returned if absent and optional. */
static int load_json(const char *dir, const char *name, bool required, size_t max, json_t **out, lg_err *err)
{
    *out = NULL;
    char path[4096];
    if (join(path, sizeof path, dir, name, err))
        return -1;
    if (!file_exists(path)) {
        if (required)
            return lg_fail(err, "expected %s in the model directory, found none", name);
        return 0;
    }
    char *text;
    size_t len;
    if (lg_read_file(path, max, &text, &len, err))
        return -1;
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    free(text);
    if (!*out)
        return lg_fail(err, "%s is not valid JSON: %s (line %d)", name, je.text, je.line);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return lg_fail(err, "%s: expected a JSON object at the top level", name);
    }
    return 0;
}

/* ---- config.json --------------------------------------------------------- */

static bool absent(json_t *v) { return !v || json_is_null(v); }

/* Integer field; absent/null -> def (or an error when required). */
static int get_int(json_t *o, const char *key, bool required, int def, int *out, lg_err *err)
{
    json_t *v = json_object_get(o, key);
    if (absent(v)) {
        if (required)
            return lg_fail(err, "config.json: expected an integer \"%s\", found none", key);
        *out = def;
        return 0;
    }
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        d = json_real_value(v);
    else
        return lg_fail(err, "config.json: \"%s\" is not an integer", key);
    if (d < INT_MIN || d > INT_MAX)
        return lg_fail(err, "config.json: \"%s\" = %g is out of the int range", key, d);
    *out = (int)d;
    return 0;
}

static int get_num(json_t *o, const char *key, const char *where, bool required, double def, double *out,
                   lg_err *err)
{
    json_t *v = json_object_get(o, key);
    if (absent(v)) {
        if (required)
            return lg_fail(err, "%s: expected a number \"%s\", found none", where, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return lg_fail(err, "%s: \"%s\" is not a number", where, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(json_t *o, const char *key, bool def, bool *out, lg_err *err)
{
    json_t *v = json_object_get(o, key);
    if (absent(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return lg_fail(err, "config.json: \"%s\" is not true/false", key);
    *out = json_is_true(v);
    return 0;
}

static int add_eos(lg_model_config *c, json_t *v, const char *where, lg_err *err)
{
    if (absent(v))
        return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT_MAX)
            return lg_fail(err, "%s: eos_token_id must be a non-negative integer or a list of them", where);
        int id = (int)json_integer_value(e);
        bool seen = false;
        for (int k = 0; k < c->n_eos; k++)
            seen |= c->eos_ids[k] == id;
        if (seen)
            continue;
        if (c->n_eos == LG_MAX_EOS)
            return lg_fail(err, "%s: more than %d distinct eos_token_id values", where, LG_MAX_EOS);
        c->eos_ids[c->n_eos++] = id;
    }
    return 0;
}

/* A list of numbers into out[n]; *n_out set. */
static int get_factors(json_t *o, const char *key, float *out, int cap, int *n_out, lg_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v))
        return lg_fail(err, "config.json rope_scaling: expected a list of numbers \"%s\"", key);
    if ((int)json_array_size(v) > cap)
        return lg_fail(err, "config.json rope_scaling: \"%s\" has %zu values, expected at most %d", key,
                       json_array_size(v), cap);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_number(e))
            return lg_fail(err, "config.json rope_scaling: \"%s\"[%zu] is not a number", key, i);
        out[i] = (float)json_number_value(e);
    }
    *n_out = (int)json_array_size(v);
    return 0;
}

/* rope_scaling (or a transformers-5 rope_parameters entry) into c. j: the whole config (Phi-3 keeps
 * original_max_position_embeddings at its top level). */
static int parse_rope_scaling(lg_model_config *c, json_t *j, json_t *rs, lg_err *err)
{
    c->rope_scaling = LG_ROPE_NONE;
    if (absent(rs))
        return 0;
    if (!json_is_object(rs))
        return lg_fail(err, "config.json: rope_scaling is not an object");
    json_t *ty = json_object_get(rs, "rope_type");
    if (absent(ty))
        ty = json_object_get(rs, "type");
    const char *t = json_is_string(ty) ? json_string_value(ty) : "default";
    if (!absent(ty) && !json_is_string(ty))
        return lg_fail(err, "config.json: rope_scaling.rope_type is not a string");
    double f, lo, hi;
    int orig;
    if (!strcmp(t, "default"))
        return 0;
    if (!strcmp(t, "linear")) {
        if (get_num(rs, "factor", "config.json rope_scaling", true, 0, &f, err))
            return -1;
        c->rope_scaling = LG_ROPE_LINEAR;
        c->rope_factor = (float)f;
        return 0;
    }
    if (!strcmp(t, "llama3")) {
        if (get_num(rs, "factor", "config.json rope_scaling", true, 0, &f, err) ||
            get_num(rs, "low_freq_factor", "config.json rope_scaling", true, 0, &lo, err) ||
            get_num(rs, "high_freq_factor", "config.json rope_scaling", true, 0, &hi, err) ||
            get_int(rs, "original_max_position_embeddings", true, 0, &orig, err))
            return -1;
        c->rope_scaling = LG_ROPE_LLAMA3;
        c->rope_factor = (float)f;
        c->rope_low_freq_factor = (float)lo;
        c->rope_high_freq_factor = (float)hi;
        c->rope_orig_max_pos = orig;
        return 0;
    }
    if (!strcmp(t, "longrope") || !strcmp(t, "su")) { /* Phi-3: transformers' _compute_longrope_parameters */
        int ns = 0, nl = 0;
        double af;
        if (get_int(rs, "original_max_position_embeddings", false, 0, &orig, err))
            return -1;
        if (orig <= 0 && get_int(j, "original_max_position_embeddings", true, 0, &orig, err))
            return -1;
        if (orig <= 0)
            return lg_fail(err, "config.json: longrope original_max_position_embeddings = %d, expected > 0", orig);
        if (get_factors(rs, "short_factor", c->rope_short, LG_MAX_ROPE_FACTORS, &ns, err) ||
            get_factors(rs, "long_factor", c->rope_long, LG_MAX_ROPE_FACTORS, &nl, err) ||
            get_num(rs, "factor", "config.json rope_scaling", false, (double)c->max_pos / orig, &f, err) ||
            get_num(rs, "attention_factor", "config.json rope_scaling", false, 0, &af, err))
            return -1;
        if (ns != nl)
            return lg_fail(err, "config.json: longrope has %d short_factor and %d long_factor values", ns, nl);
        if (af == 0)
            af = f <= 1.0 ? 1.0 : sqrt(1.0 + log(f) / log((double)orig));
        c->rope_scaling = LG_ROPE_LONGROPE;
        c->n_rope_factors = ns;
        c->rope_orig_max_pos = orig;
        c->rope_factor = (float)f;
        c->rope_attn_factor = (float)af;
        return 0;
    }
    return lg_fail(err,
                   "config.json: rope_scaling type '%s' is not supported (expected default, linear, llama3 or longrope)",
                   t);
}

/* The activation named by key ("hidden_act", or Gemma's "hidden_activation"). */
static int parse_act(json_t *j, const char *key, lg_act *act, lg_err *err)
{
    json_t *v = json_object_get(j, key);
    if (absent(v))
        return 0;
    const char *a = json_is_string(v) ? json_string_value(v) : "(not a string)";
    if (!strcmp(a, "silu") || !strcmp(a, "swish"))
        *act = LG_ACT_SILU;
    else if (!strcmp(a, "gelu_pytorch_tanh"))
        *act = LG_ACT_GELU_TANH;
    else
        return lg_fail(err, "config.json: %s '%s' is not supported (expected silu or gelu_pytorch_tanh)", key, a);
    return 0;
}

/* Which layers slide (lg_model_config.sliding_layers), by the family's rule (model_arch.h). */
static int parse_window(json_t *j, const lg_arch *A, lg_model_config *c, lg_err *err)
{
    json_t *sw = json_object_get(j, "sliding_window");
    bool use = !absent(sw);
    if (A->window == LG_WINDOW_QWEN && get_bool(j, "use_sliding_window", false, &use, err))
        return -1;
    if (!use || absent(sw))
        return 0;
    if (A->window == LG_WINDOW_NONE)
        return lg_fail(err, "config.json: sliding_window is set, which %s does not use (expected null)", c->arch);
    if (get_int(j, "sliding_window", true, 0, &c->sliding_window_size, err))
        return -1;
    if (c->sliding_window_size <= 0)
        return lg_fail(err, "config.json: sliding_window = %d, expected > 0", c->sliding_window_size);
    json_t *lt = json_object_get(j, "layer_types");
    int mwl = 0, pattern = A->window_pattern;
    if (A->window == LG_WINDOW_QWEN && get_int(j, "max_window_layers", false, 28, &mwl, err))
        return -1;
    if (A->window == LG_WINDOW_PATTERN &&
        get_int(j, absent(json_object_get(j, "sliding_window_pattern")) ? "_sliding_window_pattern" : "sliding_window_pattern",
                false, A->window_pattern, &pattern, err))
        return -1;
    if (A->window == LG_WINDOW_PATTERN && pattern <= 0)
        return lg_fail(err, "config.json: sliding_window_pattern = %d, expected > 0", pattern);
    if (!absent(lt) && (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layers))
        return lg_fail(err, "config.json: layer_types is not a list of %d layer types", c->n_layers);
    bool any = false;
    for (int l = 0; l < c->n_layers; l++) {
        bool slides;
        if (!absent(lt) && A->window != LG_WINDOW_ALL) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
                return lg_fail(err, "config.json: layer_types[%d] is '%s', expected sliding_attention or full_attention",
                               l, t ? t : "(not a string)");
            slides = !strcmp(t, "sliding_attention");
        } else if (A->window == LG_WINDOW_QWEN) {
            slides = l >= mwl;
        } else if (A->window == LG_WINDOW_PATTERN) {
            slides = (l + 1) % pattern != 0;
        } else {
            slides = true;
        }
        lg_set_layer_slides(c, l, slides);
        any |= slides;
    }
    c->sliding_window = any;
    return 0;
}

/* Keys of config.json that name a feature loragate does not implement: refused when set to anything but
 * null, false, 0 or an empty value (the test tests/golden/test_config_keys.py walks transformers' config
 * classes against this list and the keys parse_config reads). */
static const char *const REFUSED_KEYS[] = {
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_sparse_step", "mlp_only_layers", "use_bidirectional_attention",
    "rope_local_base_freq_scaling", "altup_num_inputs", "laurel_rank", "num_kv_shared_layers", "hidden_size_per_layer_input",
    "vision_config", "audio_config", "text_config", "logits_scaling", "embedding_multiplier", "residual_multiplier",
    "attention_multiplier", "no_rope_layers", "use_qk_norm", "clip_qkv",
};

/* Keys of transformers' config classes that do not change the forward pass (training-only dropout and
 * init, output plumbing, bookkeeping, token ids that only end or pad generation, the attention kernel's
 * choice, a tensor-parallel split that sums to the same product). parse_config does not read them; the
 * list exists for tests/golden/test_config_keys.py, which fails on a key of a supported family's config
 * that is neither read nor listed here nor refused. */
static const char *const INERT_KEYS[] __attribute__((unused)) = {
    "_name_or_path", "attention_dropout", "chunk_size_feed_forward", "id2label", "label2id", "initializer_range",
    "is_encoder_decoder", "output_attentions", "output_hidden_states", "problem_type", "return_dict",
    "transformers_version", "use_cache", "embd_pdrop", "resid_pdrop", "pad_token_id", "pretraining_tp",
    "cache_implementation", "attn_implementation", "tokenizer_class", "finetuning_task", "task_specific_params",
    "prefix", "sep_token_id", "decoder_start_token_id", "torchscript", "tie_encoder_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "model_type",
};

static bool trivially_unset(json_t *v)
{
    if (absent(v) || json_is_false(v))
        return true;
    if (json_is_integer(v))
        return json_integer_value(v) == 0;
    if (json_is_real(v))
        return json_real_value(v) == 0;
    if (json_is_array(v))
        return json_array_size(v) == 0;
    if (json_is_object(v))
        return json_object_size(v) == 0;
    return false;
}

static int refuse_unimplemented(json_t *j, lg_err *err)
{
    for (size_t i = 0; i < sizeof REFUSED_KEYS / sizeof *REFUSED_KEYS; i++) {
        json_t *v = json_object_get(j, REFUSED_KEYS[i]);
        if (trivially_unset(v))
            continue;
        return lg_fail(err, "config.json: \"%s\" is set, which loragate does not implement", REFUSED_KEYS[i]);
    }
    return 0;
}

/* Gemma 3's rope: transformers 5 nests it per layer type in rope_parameters; hub configs have rope_theta,
 * rope_local_base_freq and rope_scaling (the global layers'). */
static int parse_rope(json_t *j, const lg_arch *A, lg_model_config *c, lg_err *err)
{
    json_t *rp = json_object_get(j, "rope_parameters");
    if (!json_is_object(rp))
        rp = NULL;
    json_t *rp_full = rp ? json_object_get(rp, "full_attention") : NULL, *rp_slide = rp ? json_object_get(rp, "sliding_attention") : NULL;
    if (json_is_object(rp_full) || json_is_object(rp_slide)) { /* per layer type */
        if (!json_is_object(rp_full))
            return lg_fail(err, "config.json: rope_parameters has no full_attention entry");
        rp = rp_full;
    }
    double theta, local = 0;
    /* both forms: transformers 5 takes rope_parameters' values; refuse a config whose two forms disagree
     * rather than pick one silently */
    static const char *const both[] = {"rope_theta", "partial_rotary_factor"};
    for (int i = 0; rp && i < 2; i++) {
        json_t *top = json_object_get(j, both[i]), *in = json_object_get(rp, both[i]);
        if (json_is_number(top) && json_is_number(in) && json_number_value(top) != json_number_value(in))
            return lg_fail(err, "config.json: %s = %g disagrees with rope_parameters' %g", both[i],
                           json_number_value(top), json_number_value(in));
    }
    bool theta_in_rp = rp && absent(json_object_get(j, "rope_theta"));
    if (get_num(theta_in_rp ? rp : j, "rope_theta", "config.json", false, A->theta_default, &theta, err))
        return -1;
    c->rope_theta = (float)theta;
    json_t *rs = json_object_get(j, "rope_scaling");
    /* partial rotary: top level (classic) or in rope_parameters (transformers 5) */
    double prf = 1.0;
    if (get_num(absent(json_object_get(j, "partial_rotary_factor")) && rp ? rp : j, "partial_rotary_factor",
                "config.json", false, 1.0, &prf, err))
        return -1;
    if (!(prf > 0 && prf <= 1))
        return lg_fail(err, "config.json: partial_rotary_factor = %g, expected in (0, 1]", prf);
    c->rot_dim = (int)(c->head_dim * prf);
    if (c->rot_dim == c->head_dim)
        c->rot_dim = 0;
    if (parse_rope_scaling(c, j, absent(rs) ? rp : rs, err))
        return -1;
    if (A->local_theta_default > 0) {
        if (json_is_object(rp_slide)) {
            json_t *ty = json_object_get(rp_slide, "rope_type");
            if (!absent(ty) && (!json_is_string(ty) || strcmp(json_string_value(ty), "default")))
                return lg_fail(err, "config.json: rope_parameters.sliding_attention rope_type '%s' is not supported "
                                    "(expected default)", json_is_string(ty) ? json_string_value(ty) : "?");
            if (get_num(rp_slide, "rope_theta", "config.json rope_parameters.sliding_attention", false,
                        A->local_theta_default, &local, err))
                return -1;
        } else if (get_num(j, "rope_local_base_freq", "config.json", false, A->local_theta_default, &local, err)) {
            return -1;
        }
        c->rope_local_theta = (float)local;
    }
    return 0;
}

static int parse_config(const char *dir, lg_weights *w, const lg_load_opts *opts, lg_hfquant **hq, lg_err *err)
{
    lg_model_config *c = lg_weights_config_mut(w);
    json_t *j = NULL, *gen = NULL;
    int rc = -1;
    if (load_json(dir, "config.json", true, MAX_CONFIG_BYTES, &j, err))
        goto done;

    /* architecture: architectures[0] if present, else model_type (the rows of model_arch.c) */
    const lg_arch *A = NULL;
    json_t *al = json_object_get(j, "architectures"), *mt = json_object_get(j, "model_type");
    if (json_is_array(al) && json_array_size(al) > 0) {
        const char *cls = json_string_value(json_array_get(al, 0));
        A = lg_arch_by_class(cls);
        if (!A) {
            lg_fail(err, "config.json: architecture '%s' is not supported (expected one of %s)",
                    cls ? cls : "(not a string)", lg_arch_class_list());
            goto done;
        }
    } else if (json_is_string(mt)) {
        const char *t = json_string_value(mt);
        A = lg_arch_by_type(t);
        if (!A) {
            lg_fail(err, "config.json: model_type '%s' is not supported (expected one of %s)", t, lg_arch_type_list());
            goto done;
        }
    } else {
        lg_fail(err, "config.json: expected \"architectures\" or \"model_type\", found neither");
        goto done;
    }
    lg_arch_apply(A, c);
    const char *arch = A->model_type;
    if (refuse_unimplemented(j, err))
        goto done;
    snprintf(c->quant_method, sizeof c->quant_method, "none");
    snprintf(c->quant_desc, sizeof c->quant_desc, "none");
    json_t *qc = json_object_get(j, "quantization_config");
    if (!absent(qc)) {
        if (lg_hfquant_open(qc, opts, hq, err))
            goto done;
        lg_hfquant_describe(*hq, c);
    }

    if (get_int(j, "hidden_size", true, 0, &c->d_model, err) ||
        get_int(j, "intermediate_size", true, 0, &c->d_ff, err) ||
        get_int(j, "num_hidden_layers", true, 0, &c->n_layers, err) ||
        get_int(j, "num_attention_heads", true, 0, &c->n_heads, err) ||
        get_int(j, "vocab_size", true, 0, &c->vocab_size, err) ||
        get_int(j, "num_key_value_heads", false, c->n_heads, &c->n_kv_heads, err) ||
        get_int(j, "max_position_embeddings", false, 2048, &c->max_pos, err))
        goto done;
    if (c->n_heads <= 0) {
        lg_fail(err, "config.json: num_attention_heads = %d, expected > 0", c->n_heads);
        goto done;
    }
    if (c->n_layers > LG_MAX_LAYERS) {
        lg_fail(err, "config.json: num_hidden_layers = %d, expected at most %d", c->n_layers, LG_MAX_LAYERS);
        goto done;
    }
    if (get_int(j, "head_dim", false, c->d_model / c->n_heads, &c->head_dim, err))
        goto done;

    double eps;
    if (get_num(j, "rms_norm_eps", "config.json", false, A->eps_default, &eps, err))
        goto done;
    c->rms_eps = (float)eps;
    if (parse_rope(j, A, c, err))
        goto done;

    if (get_bool(j, "tie_word_embeddings", A->tie_default, &c->tie_embeddings, err))
        goto done;
    bool attn_bias, mlp_bias;
    if (get_bool(j, "attention_bias", false, &attn_bias, err) || get_bool(j, "mlp_bias", false, &mlp_bias, err))
        goto done;
    if (!A->qkv_bias && attn_bias) {
        lg_fail(err, "config.json: attention_bias = true (biases on q/k/v and o_proj) is not supported for %s", arch);
        goto done;
    }
    if (mlp_bias) {
        lg_fail(err, "config.json: mlp_bias = true is not supported");
        goto done;
    }
    c->act = A->act;
    if (parse_act(j, A->post_norms ? "hidden_activation" : "hidden_act", &c->act, err))
        goto done;

    /* Gemma: soft-caps and the query scale */
    double cap, qpas;
    if (get_num(j, "attn_logit_softcapping", "config.json", false, 0, &cap, err))
        goto done;
    c->attn_softcap = (float)cap;
    if (get_num(j, "final_logit_softcapping", "config.json", false, 0, &cap, err))
        goto done;
    c->final_softcap = (float)cap;
    if (get_num(j, "query_pre_attn_scalar", "config.json", false, 0, &qpas, err))
        goto done;
    if (A->post_norms && qpas == 0)
        qpas = c->head_dim; /* transformers' default for Gemma is 256 = its head_dim */
    if (qpas < 0) {
        lg_fail(err, "config.json: query_pre_attn_scalar = %g, expected > 0", qpas);
        goto done;
    }
    c->attn_scale = qpas > 0 ? (float)(1.0 / sqrt(qpas)) : 0.0f;

    if (parse_window(j, A, c, err))
        goto done;

    const char *dts = json_string_value(json_object_get(j, "torch_dtype"));
    if (!dts)
        dts = json_string_value(json_object_get(j, "dtype"));
    lg_dtype dt;
    if (dts && !lg_dtype_parse(dts, &dt))
        c->weight_dtype = dt;

    if (get_int(j, "bos_token_id", false, -1, &c->bos_id, err))
        goto done;
    c->n_eos = 0;
    if (add_eos(c, json_object_get(j, "eos_token_id"), "config.json", err))
        goto done;
    if (load_json(dir, "generation_config.json", false, MAX_CONFIG_BYTES, &gen, err))
        goto done;
    if (gen) {
        if (add_eos(c, json_object_get(gen, "eos_token_id"), "generation_config.json", err))
            goto done;
        json_t *b = json_object_get(gen, "bos_token_id");
        if (c->bos_id < 0 && json_is_integer(b) && json_integer_value(b) >= 0 && json_integer_value(b) <= INT_MAX)
            c->bos_id = (int)json_integer_value(b);
    }
    rc = lg_model_config_validate(c, err);
    if (rc)
        lg_err_prefix(err, "config.json");
done:
    json_decref(j);
    json_decref(gen);
    return rc;
}

/* ---- tokenizer and chat template -------------------------------------------- */

static int load_tokenizer(const char *dir, lg_weights *w, lg_err *err)
{
    char path[4096];
    char *tj = NULL, *tc = NULL;
    if (join(path, sizeof path, dir, "tokenizer.json", err))
        return -1;
    if (!file_exists(path))
        return 0; /* allowed: the model has no tokenizer */
    if (lg_read_file(path, MAX_TOKENIZER_BYTES, &tj, NULL, err))
        return -1;
    if (join(path, sizeof path, dir, "tokenizer_config.json", err)) {
        free(tj);
        return -1;
    }
    if (file_exists(path) && lg_read_file(path, MAX_TOKENIZER_BYTES, &tc, NULL, err)) {
        free(tj);
        return -1;
    }
    lg_tokenizer *t = NULL;
    int rc = lg_tokenizer_from_json(tj, tc, &t, err);
    free(tj);
    free(tc);
    if (rc) {
        lg_err_prefix(err, "tokenizer.json");
        return -1;
    }
    lg_weights_set_tokenizer(w, t);
    return 0;
}

static int load_chat_template(const char *dir, lg_weights *w, lg_err *err)
{
    char path[4096];
    if (join(path, sizeof path, dir, "chat_template.jinja", err))
        return -1;
    if (file_exists(path)) {
        char *text;
        if (lg_read_file(path, MAX_CONFIG_BYTES, &text, NULL, err))
            return -1;
        lg_weights_set_chat_template(w, text);
        free(text);
        return 0;
    }
    const char *files[] = {"chat_template.json", "tokenizer_config.json"};
    for (int f = 0; f < 2; f++) {
        json_t *j;
        if (load_json(dir, files[f], false, MAX_TOKENIZER_BYTES, &j, err))
            return -1;
        if (!j)
            continue;
        json_t *ct = json_object_get(j, "chat_template");
        const char *tmpl = NULL;
        if (json_is_string(ct)) {
            tmpl = json_string_value(ct);
        } else if (json_is_array(ct)) { /* [{"name": ..., "template": ...}]: take "default" */
            size_t i;
            json_t *e;
            json_array_foreach(ct, i, e)
            {
                const char *nm = json_string_value(json_object_get(e, "name"));
                if (nm && !strcmp(nm, "default"))
                    tmpl = json_string_value(json_object_get(e, "template"));
            }
        } else if (!absent(ct)) {
            json_decref(j);
            return lg_fail(err, "%s: chat_template is neither a string nor a list of {name, template}", files[f]);
        }
        if (tmpl)
            lg_weights_set_chat_template(w, tmpl);
        json_decref(j);
        if (tmpl)
            return 0;
    }
    return 0;
}

/* ---- tensors ------------------------------------------------------------------ */

typedef struct {
    bool on;
    size_t total, done;
    double t0;
} progress;

static void progress_draw(progress *p, bool final)
{
    if (!p->on)
        return;
    int pct = p->total ? (int)(100.0 * (double)p->done / (double)p->total) : 100;
    char bar[41];
    for (int i = 0; i < 40; i++)
        bar[i] = i < pct * 40 / 100 ? '=' : ' ';
    bar[40] = 0;
    fprintf(stderr, "\rloading weights [%s] %3d%% %.2f/%.2f GB %.1fs%s", bar, pct, (double)p->done / 1e9,
            (double)p->total / 1e9, lg_now() - p->t0, final ? "\n" : "");
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Adds one safetensors tensor under its normalised name. */
static int add_tensor(lg_weights *w, lg_hfquant *hq, const lg_st_tensor *t, const char *file, lg_err *err)
{
    if (ends_with(t->name, "rotary_emb.inv_freq"))
        return 0;
    if (!hq && (!t->has_lg_dtype || t->dtype == LG_I32))
        return lg_fail(err, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", file, t->name, t->dtype_name);
    if (t->n_dims > 4)
        return lg_fail(err, "%s: tensor '%s' has rank %d, expected at most 4", file, t->name, t->n_dims);
    char name[512];
    bool prefixed = !strncmp(t->name, "model.", 6) || !strncmp(t->name, "lm_head.", 8);
    int n = snprintf(name, sizeof name, "%s%s", prefixed ? "" : "model.", t->name);
    if (n < 0 || (size_t)n >= sizeof name)
        return lg_fail(err, "%s: tensor name '%.64s...' is longer than %zu bytes", file, t->name, sizeof name - 1);
    if (hq) { /* a quantized module's tensor: held for lg_hfquant_finish */
        int took = lg_hfquant_take(hq, name, t, err);
        if (took)
            return took < 0 ? -1 : 0;
        if (!t->has_lg_dtype || t->dtype == LG_I32)
            return lg_fail(err, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16", file, t->name, t->dtype_name);
    }
    const void *data = t->data;
    void *copy = NULL;
    if ((uintptr_t)data % lg_dtype_size(t->dtype)) { /* writer did not pad: copy to aligned memory */
        copy = malloc(t->nbytes ? t->nbytes : 1);
        if (!copy)
            return lg_fail(err, "%s: out of memory copying misaligned tensor '%s'", file, t->name);
        memcpy(copy, data, t->nbytes);
        data = copy;
    }
    if (lg_weights_add(w, name, t->dtype, t->n_dims, t->shape, data, copy, err)) {
        free(copy);
        lg_err_prefix(err, "%s", file);
        return -1;
    }
    return 0;
}

/* Opens one file, adds its tensors (only those the index maps to it when
 * weight_map is given) and hands its mapping to w. */
static int load_file(lg_weights *w, lg_hfquant *hq, const char *dir, const char *fname, json_t *weight_map,
                     progress *pg, lg_err *err)
{
    char path[4096];
    if (join(path, sizeof path, dir, fname, err))
        return -1;
    lg_st_file *f;
    if (lg_st_open(path, &f, err))
        return -1;
    int rc = -1;
    if (weight_map) { /* every name the index puts in this shard must be there */
        const char *k;
        json_t *v;
        json_object_foreach(weight_map, k, v)
        {
            if (!strcmp(json_string_value(v), fname) && !lg_st_get(f, k)) {
                lg_fail(err, "tensor '%s' is listed in model.safetensors.index.json for %s but is not in it", k, fname);
                goto done;
            }
        }
    }
    for (int i = 0; i < lg_st_count(f); i++) {
        const lg_st_tensor *t = lg_st_at(f, i);
        if (weight_map) {
            const char *s = json_string_value(json_object_get(weight_map, t->name));
            if (!s || strcmp(s, fname))
                continue;
        }
        if (add_tensor(w, hq, t, fname, err))
            goto done;
    }
    lg_mmap m = {0};
    if (lg_st_take_mmap(f, &m, err))
        goto done;
    pg->done += m.size;
    if (lg_weights_keep_mmap(w, &m, err)) {
        lg_mmap_close(&m);
        goto done;
    }
    progress_draw(pg, false);
    rc = 0;
done:
    lg_st_close(f);
    return rc;
}

static size_t file_size(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path || stat(path, &st))
        return 0;
    return (size_t)st.st_size;
}

static int load_tensors(const char *dir, lg_weights *w, lg_hfquant *hq, bool want_progress, lg_err *err)
{
    progress pg = {.on = want_progress && isatty(2), .t0 = lg_now()};
    char path[4096];
    if (join(path, sizeof path, dir, "model.safetensors.index.json", err))
        return -1;
    if (!file_exists(path)) {
        if (join(path, sizeof path, dir, "model.safetensors", err))
            return -1;
        if (!file_exists(path)) {
            bool bin = file_exists((snprintf(path, sizeof path, "%s/pytorch_model.bin", dir), path));
            return lg_fail(err, "expected model.safetensors or model.safetensors.index.json in the directory, found "
                                "neither%s", bin ? " (pytorch_model.bin is not supported: convert to safetensors)" : "");
        }
        pg.total = file_size(dir, "model.safetensors");
        if (load_file(w, hq, dir, "model.safetensors", NULL, &pg, err))
            return -1;
        progress_draw(&pg, true);
        return 0;
    }

    json_t *idx;
    if (load_json(dir, "model.safetensors.index.json", true, MAX_INDEX_BYTES, &idx, err))
        return -1;
    int rc = -1;
    const char **shards = NULL;
    size_t n_shards = 0;
    json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        lg_fail(err, "model.safetensors.index.json: expected a non-empty object \"weight_map\", found none");
        goto done;
    }
    shards = calloc(json_object_size(wm), sizeof *shards);
    if (!shards) {
        lg_fail(err, "out of memory reading the index");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v)
    {
        const char *s = json_string_value(v);
        if (!s || !*s || strchr(s, '/') || strchr(s, '\\') || !strcmp(s, ".") || !strcmp(s, "..")) {
            lg_fail(err, "model.safetensors.index.json: tensor '%s' maps to '%s', expected a file name in the "
                         "model directory", k, s ? s : "(not a string)");
            goto done;
        }
        size_t i = 0;
        while (i < n_shards && strcmp(shards[i], s))
            i++;
        if (i == n_shards)
            shards[n_shards++] = s;
    }
    for (size_t i = 0; i < n_shards; i++)
        pg.total += file_size(dir, shards[i]);
    for (size_t i = 0; i < n_shards; i++) {
        if (join(path, sizeof path, dir, shards[i], err))
            goto done;
        if (!file_exists(path)) {
            lg_fail(err, "shard %s listed in model.safetensors.index.json is missing", shards[i]);
            goto done;
        }
        if (load_file(w, hq, dir, shards[i], wm, &pg, err))
            goto done;
    }
    progress_draw(&pg, true);
    rc = 0;
done:
    free(shards);
    json_decref(idx);
    return rc;
}

/* ---- entry point ----------------------------------------------------------------- */

int lg_weights_load_hf(const char *dir, const lg_load_opts *opts, lg_weights **out, lg_err *err)
{
    static const lg_load_opts defaults = {.dequant_dtype = LG_F16, .dummy_dtype = LG_F16};
    if (!opts)
        opts = &defaults;
    *out = NULL;
    lg_weights *w = lg_weights_new();
    if (!w)
        return lg_fail(err, "out of memory");
    lg_hfquant *hq = NULL;
    if (parse_config(dir, w, opts, &hq, err) || load_tokenizer(dir, w, err) || load_chat_template(dir, w, err))
        goto fail;
    if (!opts->vocab_only) {
        if (opts->dummy) {
            if (hq) {
                lg_fail(err, "dummy weights of a quantized checkpoint (%s) are not implemented: use --quantization "
                             "on its 16-bit config", lg_weights_config(w)->quant_desc);
                goto fail;
            }
            const bool q = opts->quantize != LG_QNONE; /* quantized in place: lg_weights_load skips lg_weights_quantize */
            if (lg_weights_fill_dummy(w, opts->dummy_dtype, opts->dummy_seed, opts->progress, q, err) ||
                (q && lg_weights_dummy_quantized(w, opts->quantize, opts->dummy_seed, err)))
                goto fail;
        } else {
            if (load_tensors(dir, w, hq, opts->progress, err) || (hq && lg_hfquant_finish(hq, w, err)))
                goto fail;
            const lg_wtensor *e = lg_weights_get(w, "model.embed_tokens.weight");
            if (e)
                lg_weights_config_mut(w)->weight_dtype = e->dtype;
        }
        if (lg_weights_check_llama(w, err))
            goto fail;
    }
    lg_hfquant_free(hq);
    *out = w;
    return 0;
fail:
    lg_hfquant_free(hq);
    lg_err_prefix(err, "loading %s", dir);
    lg_weights_free(w);
    return -1;
}
