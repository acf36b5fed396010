/*
 * model_config.h — the shape and hyper-parameters of a Llama-family model,
 * filled from HF config.json (engine/model/weights_hf.c) or GGUF metadata
 * (engine/model/weights_gguf.c). The engine reads only this struct, never the
 * file formats.
 *
 * Supported architectures: llama (Llama 2/3, incl. Llama-3 rope scaling,
 * SmolLM with tied embeddings), mistral, qwen2 (qkv bias). Anything else is
 * refused by lg_model_config_validate with a message naming it.
 */
#ifndef LG_MODEL_CONFIG_H
#define LG_MODEL_CONFIG_H

#include "engine/base/common.h"

typedef enum lg_rope_scaling {
    LG_ROPE_NONE = 0,
    LG_ROPE_LINEAR = 1, /* positions divided by factor */
    LG_ROPE_LLAMA3 = 2, /* Llama-3.1 frequency-dependent scaling */
} lg_rope_scaling;

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
    bool sliding_window;  /* mistral, qwen2 with a window set: the engine refuses a context longer than it */
    int sliding_window_size;
    lg_dtype weight_dtype; /* dtype of the weights as stored (after dequantization) */
    int bos_id;           /* -1 if none */
    int eos_ids[LG_MAX_EOS];
    int n_eos;
} lg_model_config;

/* Checks that the numbers are sane and consistent (positive dims, divisibility,
 * supported arch). Returns 0 or -1 with err set. */
int lg_model_config_validate(const lg_model_config *c, lg_err *err);

#endif
