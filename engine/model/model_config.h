/*
 * model_config.h — the shape and hyper-parameters of a Llama-family model,
 * filled from HF config.json (engine/model/weights_hf.c) or GGUF metadata
 * (engine/model/weights_gguf.c). The engine reads only this struct, never the
 * file formats.
 *
 * Supported architectures: the rows of engine/model/model_arch.c's table
 * (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3). What differs
 * between them structurally (extra norms, activation, fused weight names)
 * comes from that table into the flags below; the numbers (soft-caps,
 * windows, rotary fraction, LongRoPE factors) from the model's own config.
 * Anything else is refused by the loaders or lg_model_config_validate with a
 * message naming it.
 */
#ifndef LG_MODEL_CONFIG_H
#define LG_MODEL_CONFIG_H

#include "engine/base/common.h"

typedef enum lg_rope_scaling {
    LG_ROPE_NONE = 0,
    LG_ROPE_LINEAR = 1, /* positions divided by factor */
    LG_ROPE_LLAMA3 = 2, /* Llama-3.1 frequency-dependent scaling */
    LG_ROPE_LONGROPE = 3, /* Phi-3: per-frequency factors, short or long (see rope_long below) */
} lg_rope_scaling;

typedef enum lg_act {
    LG_ACT_SILU = 0,      /* silu(gate) * up */
    LG_ACT_GELU_TANH = 1, /* gelu_pytorch_tanh(gate) * up (Gemma) */
} lg_act;

#define LG_MAX_LAYERS 4096
#define LG_MAX_ROPE_FACTORS 256 /* LongRoPE factors: one per rotated pair */

#define LG_MAX_EOS 8

typedef struct lg_model_config {
    char arch[32];        /* "llama", "mistral", "qwen2" */
    int n_layers;
    int d_model;          /* hidden_size */
    int n_heads;          /* num_attention_heads */
    int n_kv_heads;       /* num_key_value_heads (== n_heads for MHA) */
    int head_dim;         /* usually d_model / n_heads */
    int d_ff;             /* intermediate_size */
    int vocab_size;
    int max_pos;          /* max_position_embeddings / context_length */
    float rope_theta;
    float rms_eps;
    lg_rope_scaling rope_scaling;
    float rope_factor;            /* linear and llama3 */
    float rope_low_freq_factor;   /* llama3 */
    float rope_high_freq_factor;  /* llama3 */
    int rope_orig_max_pos;        /* llama3 original_max_position_embeddings */
    bool tie_embeddings;  /* lm_head shares embed_tokens */
    bool qkv_bias;        /* qwen2: q,k,v projections have bias */
    bool sliding_window;  /* some layer attends over a window of the last sliding_window_size keys */
    int sliding_window_size;
    uint64_t sliding_layers[LG_MAX_LAYERS / 64]; /* bit l: layer l slides (others attend to every key) */
    /* per-architecture structure (from model_arch.c's table, never from a file) */
    bool qk_norm;         /* per-head RMSNorm of q and k before RoPE (qwen3, gemma3) */
    bool post_norms;      /* RMSNorm of the attention and MLP outputs before the residual add (gemma2/3) */
    bool norm_plus_one;   /* RMSNorm multiplies by 1 + w (gemma; the loader adds the 1 at upload) */
    bool embed_scale;     /* embeddings times sqrt(hidden_size) (gemma) */
    bool fused_qkv;       /* weights self_attn.qkv_proj, mlp.gate_up_proj (phi3) */
    lg_act act;           /* MLP activation */
    /* numbers from the config (0: off / the default) */
    float attn_softcap;   /* scores = cap * tanh(scores / cap) (gemma2 attn_logit_softcapping) */
    float final_softcap;  /* logits = cap * tanh(logits / cap) (gemma2 final_logit_softcapping) */
    float attn_scale;     /* score scale; 0: 1 / sqrt(head_dim) (gemma: query_pre_attn_scalar^-0.5) */
    float rope_local_theta; /* sliding layers' RoPE base without scaling (gemma3); 0: rope_theta */
    int rot_dim;          /* rotated dims of a head (partial_rotary_factor); 0: head_dim */
    float rope_attn_factor; /* LongRoPE: cos and sin times this (attention_factor); 0: 1 */
    int n_rope_factors;   /* LongRoPE: rot_dim / 2 */
    float rope_short[LG_MAX_ROPE_FACTORS], rope_long[LG_MAX_ROPE_FACTORS];
    lg_dtype weight_dtype; /* dtype of the weights as stored (after dequantization) */
    /* The base model's quantization, for /v1/models, /metrics and the load log: a machine name ("none", "fp8",
     * "fp8-block", "fbgemm_fp8", "awq", "gptq", "compressed-tensors-int4", "gguf"; `--quantization`: "fp8" or
     * "int4-rtn") and a short human description ("awq int4 g128", "gguf Q4_1"; "none"). */
    char quant_method[24];
    char quant_desc[96];
    int bos_id;           /* -1 if none */
    int eos_ids[LG_MAX_EOS];
    int n_eos;
} lg_model_config;

/* Checks that the numbers are sane and consistent (positive dims, divisibility,
 * supported arch). Returns 0 or -1 with err set. */
int lg_model_config_validate(const lg_model_config *c, lg_err *err);

/* Whether layer l attends over a sliding window (cfg->sliding_window_size keys). */
static inline bool lg_layer_slides(const lg_model_config *c, int l)
{
    return c->sliding_window && l >= 0 && l < LG_MAX_LAYERS && ((c->sliding_layers[l / 64] >> (l % 64)) & 1u);
}
static inline void lg_set_layer_slides(lg_model_config *c, int l, bool on)
{
    if (l < 0 || l >= LG_MAX_LAYERS)
        return;
    if (on)
        c->sliding_layers[l / 64] |= (uint64_t)1 << (l % 64);
    else
        c->sliding_layers[l / 64] &= ~((uint64_t)1 << (l % 64));
}

#endif
