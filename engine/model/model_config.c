/*
 * model_config.c — sanity checks on a filled lg_model_config, whichever loader
 * filled it. The bounds are generous (far beyond any released Llama-family
 * model) and exist so that a corrupt or hostile config cannot make later
 * size computations overflow an int or ask for absurd allocations.
 */
#include "engine/model/model_config.h"
#include "engine/model/model_arch.h"

#include <math.h>

#define MAX_DIM (1 << 20)

static int check_dim(const char *what, int v, int max, lg_err *err)
{
    if (v <= 0 || v > max)
        return lg_fail(err, "model config: %s = %d, expected 1 to %d", what, v, max);
    return 0;
}

int lg_model_config_validate(const lg_model_config *c, lg_err *err)
{
    if (!lg_arch_by_type(c->arch))
        return lg_fail(err, "model config: architecture '%.32s' is not supported (expected one of %s)", c->arch,
                       lg_arch_type_list());
    if (check_dim("num_hidden_layers", c->n_layers, LG_MAX_LAYERS, err) ||
        check_dim("hidden_size", c->d_model, MAX_DIM, err) ||
        check_dim("num_attention_heads", c->n_heads, 4096, err) ||
        check_dim("num_key_value_heads", c->n_kv_heads, 4096, err) ||
        check_dim("head_dim", c->head_dim, 4096, err) ||
        check_dim("intermediate_size", c->d_ff, 4 * MAX_DIM, err) ||
        check_dim("vocab_size", c->vocab_size, 1 << 24, err) ||
        check_dim("max_position_embeddings", c->max_pos, 1 << 30, err))
        return -1;
    if (c->n_heads % c->n_kv_heads)
        return lg_fail(err, "model config: num_attention_heads = %d is not a multiple of num_key_value_heads = %d",
                       c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2)
        return lg_fail(err, "model config: head_dim = %d, expected an even number (rotary embedding)", c->head_dim);
    if ((int64_t)c->n_heads * c->head_dim > 4 * MAX_DIM)
        return lg_fail(err, "model config: num_attention_heads * head_dim = %lld is too large",
                       (long long)c->n_heads * c->head_dim);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return lg_fail(err, "model config: rope_theta = %g, expected a positive number", c->rope_theta);
    if (!(c->rms_eps > 0) || !(c->rms_eps < 1))
        return lg_fail(err, "model config: rms_norm_eps = %g, expected a small positive number", c->rms_eps);
    switch (c->rope_scaling) {
    case LG_ROPE_NONE: break;
    case LG_ROPE_LINEAR:
        if (!(c->rope_factor > 0) || !isfinite(c->rope_factor))
            return lg_fail(err, "model config: linear rope_scaling factor = %g, expected > 0", c->rope_factor);
        break;
    case LG_ROPE_LLAMA3:
        if (!(c->rope_factor > 0) || !isfinite(c->rope_factor))
            return lg_fail(err, "model config: llama3 rope_scaling factor = %g, expected > 0", c->rope_factor);
        if (!(c->rope_low_freq_factor > 0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
            !isfinite(c->rope_high_freq_factor))
            return lg_fail(err,
                           "model config: llama3 rope_scaling low_freq_factor = %g, high_freq_factor = %g, expected "
                           "0 < low < high",
                           c->rope_low_freq_factor, c->rope_high_freq_factor);
        if (c->rope_orig_max_pos <= 0)
            return lg_fail(err, "model config: llama3 rope_scaling original_max_position_embeddings = %d, expected > 0",
                           c->rope_orig_max_pos);
        break;
    case LG_ROPE_LONGROPE: {
        const int r = c->rot_dim > 0 ? c->rot_dim : c->head_dim;
        if (c->n_rope_factors != r / 2 || r / 2 > LG_MAX_ROPE_FACTORS)
            return lg_fail(err, "model config: longrope has %d short/long factors, expected %d (rotated dims / 2, at most %d)",
                           c->n_rope_factors, r / 2, LG_MAX_ROPE_FACTORS);
        for (int i = 0; i < c->n_rope_factors; i++)
            if (!(c->rope_short[i] > 0) || !(c->rope_long[i] > 0) || !isfinite(c->rope_short[i]) ||
                !isfinite(c->rope_long[i]))
                return lg_fail(err, "model config: longrope factor %d is %g / %g, expected > 0", i, c->rope_short[i],
                               c->rope_long[i]);
        if (c->rope_orig_max_pos <= 0)
            return lg_fail(err, "model config: longrope original_max_position_embeddings = %d, expected > 0",
                           c->rope_orig_max_pos);
        break;
    }
    default:
        return lg_fail(err, "model config: rope scaling kind %d is not supported", (int)c->rope_scaling);
    }
    if (c->rot_dim < 0 || c->rot_dim > c->head_dim || c->rot_dim % 2 || (c->head_dim - c->rot_dim) % 2)
        return lg_fail(err, "model config: partial_rotary_factor gives %d rotated dims of head_dim %d, expected an even "
                            "number whose difference to head_dim is even", c->rot_dim, c->head_dim);
    if (c->qk_norm && c->rope_attn_factor != 0 && c->rope_attn_factor != 1)
        return lg_fail(err, "model config: a rope attention factor (%g) with per-head q/k norms is not supported",
                       c->rope_attn_factor); /* the factor is folded into the q/k rows, which the norms would undo */
    if (!(c->attn_softcap >= 0) || !(c->final_softcap >= 0) || !(c->attn_scale >= 0) || !isfinite(c->attn_softcap) ||
        !isfinite(c->final_softcap) || !isfinite(c->attn_scale))
        return lg_fail(err, "model config: soft-caps %g, %g and attention scale %g, expected finite numbers >= 0",
                       c->attn_softcap, c->final_softcap, c->attn_scale);
    if (!(c->rope_local_theta >= 0) || !isfinite(c->rope_local_theta) || !(c->rope_attn_factor >= 0) ||
        !isfinite(c->rope_attn_factor))
        return lg_fail(err, "model config: local rope base %g, rope attention factor %g, expected finite numbers >= 0",
                       c->rope_local_theta, c->rope_attn_factor);
    if (c->sliding_window && c->sliding_window_size <= 0)
        return lg_fail(err, "model config: sliding_window = %d, expected > 0", c->sliding_window_size);
    if (c->weight_dtype != LG_F32 && c->weight_dtype != LG_F16 && c->weight_dtype != LG_BF16)
        return lg_fail(err, "model config: weight dtype %s, expected f32, f16 or bf16", lg_dtype_name(c->weight_dtype));
    if (c->bos_id < -1 || c->bos_id >= c->vocab_size)
        return lg_fail(err, "model config: bos_token_id = %d, expected -1 or below vocab_size = %d", c->bos_id,
                       c->vocab_size);
    if (c->n_eos < 0 || c->n_eos > LG_MAX_EOS)
        return lg_fail(err, "model config: %d eos ids, expected 0 to %d", c->n_eos, LG_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab_size)
            return lg_fail(err, "model config: eos_token_id %d, expected 0 to vocab_size - 1 = %d", c->eos_ids[i],
                           c->vocab_size - 1);
    return 0;
}
