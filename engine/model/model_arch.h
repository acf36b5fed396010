/*
 * model_arch.h — the one table of per-architecture differences.
 *
 * Every model family loragate runs is a row of model_arch.c's table: its
 * names (HF model_type and class, the GGUF general.architecture), and the
 * structural switches the forward pass reads (q/k norms, post-norms, Gemma's
 * 1 + w norms and embedding scale, the activation, fused weight names, which
 * layers slide). The loaders copy a row into lg_model_config
 * (lg_arch_apply); model.c reads only the config's flags, so adding a family
 * is a row here plus, for a new kind of difference, one flag and the place
 * in the forward that reads it (docs/architecture.md, "Model families").
 *
 * The numbers that vary between checkpoints of one family (soft-caps,
 * windows, rotary fraction, rope scaling) are not in the table: the loaders
 * read them from the model's config.
 *
 * Also here: the q/k row transform shared by the weight upload (model.c) and
 * adapters (adapters/peft.c), so a partial-rotary model runs on the
 * engine's full-width rotate-half RoPE: see lg_arch_qk_row.
 */
#ifndef LG_MODEL_ARCH_H
#define LG_MODEL_ARCH_H

#include "engine/model/model_config.h"

typedef enum lg_window_rule {
    LG_WINDOW_NONE = 0,    /* no layer slides (a sliding_window key is refused unless null) */
    LG_WINDOW_ALL = 1,     /* every layer slides when sliding_window is set (mistral, phi3) */
    LG_WINDOW_QWEN = 2,    /* with use_sliding_window: layers >= max_window_layers slide (qwen2, qwen3) */
    LG_WINDOW_PATTERN = 3, /* layer_types, else every sliding_window_pattern-th layer is global (gemma2/3) */
} lg_window_rule;

typedef struct lg_arch {
    const char *model_type;  /* HF config.json model_type */
    const char *hf_class;    /* HF architectures[0] */
    const char *gguf;        /* GGUF general.architecture; NULL: no GGUF mapping */
    bool qkv_bias;           /* q, k, v projections carry biases */
    bool qk_norm;            /* per-head RMSNorm of q and k before RoPE */
    bool post_norms;         /* post_attention_layernorm on the attention output, pre_ and post_feedforward_layernorm */
    bool norm_plus_one;      /* RMSNorm multiplies by 1 + w */
    bool embed_scale;        /* embeddings times sqrt(hidden_size) */
    bool fused_qkv;          /* self_attn.qkv_proj and mlp.gate_up_proj instead of q/k/v and gate/up */
    lg_act act;              /* the activation the family uses (a config naming another is refused) */
    lg_window_rule window;   /* which layers slide */
    int window_pattern;      /* LG_WINDOW_PATTERN's default period (gemma2: 2, gemma3: 6) */
    bool tie_default;        /* tie_word_embeddings when the config does not say */
    double eps_default;      /* rms_norm_eps when the config does not say */
    double theta_default;    /* rope_theta when the config does not say */
    double local_theta_default; /* sliding layers' rope base (gemma3); 0: the global one */
} lg_arch;

/* The row for an HF model_type, class name, or GGUF architecture; NULL if none. */
const lg_arch *lg_arch_by_type(const char *model_type);
const lg_arch *lg_arch_by_class(const char *hf_class);
const lg_arch *lg_arch_by_gguf(const char *gguf_arch);
/* The supported names, comma-separated, for refusal messages. */
const char *lg_arch_type_list(void);
const char *lg_arch_class_list(void);
const char *lg_arch_gguf_list(void);

/* Copies a row's structure into c (arch name and the flags of lg_model_config). */
void lg_arch_apply(const lg_arch *a, lg_model_config *c);

/* The q/k output row transform, per head dim e of the engine's layout:
 * the HF dim it takes (*src) and the factor its row is multiplied by.
 * Partial rotary (rot_dim < head_dim) is moved to the engine's full-width
 * rotate-half pairing (e, e + hd/2): HF's rotated halves [0, r/2) and
 * [r/2, r) go to [0, r/2) and [hd/2, hd/2 + r/2), its pass-through dims
 * fill the rest, and those pairs get inv_freq 0 (a rotation by 0). q . k is
 * unchanged (both move alike; v and o_proj are untouched). The factor is
 * LongRoPE's attention factor on the rotated dims (HF scales cos and sin;
 * RoPE is linear, so scaling the rows before it is the same). Identity
 * (src = e, factor 1) for every other model. */
void lg_arch_qk_row(const lg_model_config *c, int e, int *src, float *factor);
/* Whether lg_arch_qk_row is the identity for c. */
bool lg_arch_qk_identity(const lg_model_config *c);

#endif
