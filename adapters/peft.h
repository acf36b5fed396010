/*
 * peft.h — loads and validates one PEFT LoRA adapter (the on-disk format of
 * Hugging Face `peft` save_pretrained) against a base model's shape.
 *
 * Math. For a targeted linear layer with base weight W [out, in]:
 *
 *     y = x W^T + scale * (x A^T) B^T         x [n_tokens, in], y [n_tokens, out]
 *     A [rank, in] (PEFT lora_A.weight), B [out, rank] (PEFT lora_B.weight)
 *
 * as a plain loop:  for t, o:  y[t][o] += scale * sum_k B[o][k] * (sum_i A[k][i] * x[t][i])
 *
 * Scale rules (PEFT LoraLayer.update_layer), per module:
 *     r     = rank_pattern[first key matching the module]  else config "r"
 *     alpha = alpha_pattern[first key matching the module] else config "lora_alpha"
 *     scale = alpha / r            (default)
 *     scale = alpha / sqrt(r)      (use_rslora: true)
 * "Matching" is PEFT's get_pattern_key: keys are tried in file order and key
 * k matches module path m when re.match(r"(.*\.)?(k)$", m), m being the path
 * inside the causal-LM model, e.g. "model.layers.3.self_attn.q_proj".
 *
 * Which modules an adapter adapts (PEFT check_target_module_exists, all
 * replicated, regexes run with PCRE2 under a match limit):
 *   target_modules a string  -> re.fullmatch(target_modules, m); "all-linear"
 *                               (any case) means every linear layer but lm_head;
 *   target_modules a list    -> m == t, or m ends with "." + t (then
 *                               layers_to_transform / layers_pattern filter by
 *                               the layer index, except for the m == t case);
 *   exclude_modules          -> same two forms, removes modules.
 * The selected set must be exactly the set of modules with tensors in the
 * file: a tensor for an unselected module, a selected module without
 * tensors, or an empty selection are errors (never a silent no-op).
 *
 * fan_in_fan_out: PEFT always stores lora_A as [r, in] and lora_B as [out, r]
 * (they are nn.Linear layers); the flag only transposes the merged delta for
 * GPT-2 style Conv1D bases, and PEFT resets it to false for nn.Linear bases
 * (all of Llama). So it is accepted and changes nothing at load.
 *
 * Refused, each with a one-line reason: peft_type other than LORA, DoRA,
 * bias != "none", lora_bias, modules_to_save, embedding / lm_head LoRA, other
 * LoRA variants (aLoRA, QALoRA, target_parameters, layer_replication,
 * trainable_token_indices, VeLoRA/KaSA/MonteCLoRA/Arrow/BD-LoRA configs),
 * unknown modules or tensor names, shapes that disagree with the base model
 * or the config's ranks, ranks above max_rank, layers out of range, A
 * without B, duplicates, dtypes other than F32/F16/BF16 (all tensors must
 * share one), malformed JSON or JSON of the wrong types; file-level damage
 * is caught by engine/model/safetensors.c. Values: lora_alpha and every
 * alpha_pattern value must be finite and > 0 (PEFT would accept 0 or a
 * negative alpha, and the output then degenerates), r and every
 * rank_pattern value >= 1, and every element of every lora_A / lora_B must
 * be finite as stored (F32, F16 or BF16): the message names the tensor and
 * the first NaN / +Inf / -Inf element (flat index and [row, col]).
 *
 * Bounds on untrusted input (adapters are uploaded by tenants): the config
 * is at most LG_ADAPTER_MAX_CONFIG bytes, for lg_adapter_parse too, and is
 * scanned before jansson builds a DOM of it: nesting deeper than 32 and
 * more than 65,536 JSON values are refused, as are NaN / Infinity (which
 * Python's json writes) and numbers that overflow, naming the field. The
 * safetensors header costs at most 3 x its size (engine/model/safetensors.h).
 *
 * Result and ownership: lg_adapter owns everything it points to (the tensor
 * data is copied out of the file into one 64-byte-aligned heap block, so
 * the files are closed when lg_adapter_load returns). Module views returned
 * by the accessors stay valid until lg_adapter_free. Modules are sorted by
 * (layer, target). Workload: loaded once per adapter registration (seconds
 * apart at most); nothing here is on the token path.
 *
 * Digest: SHA-256 (hex) over the bytes of adapter_config.json followed by the
 * bytes of adapter_model.safetensors — a content identity for caches. Other
 * files in the directory (README.md, ...) are ignored.
 */
#ifndef LG_PEFT_H
#define LG_PEFT_H

#include "engine/base/common.h"
#include "engine/model/model_config.h"

typedef enum lg_lora_target {
    LG_LORA_Q = 0,    /* self_attn.q_proj: in d_model,             out n_heads * head_dim */
    LG_LORA_K = 1,    /* self_attn.k_proj: in d_model,             out n_kv_heads * head_dim */
    LG_LORA_V = 2,    /* self_attn.v_proj: in d_model,             out n_kv_heads * head_dim */
    LG_LORA_O = 3,    /* self_attn.o_proj: in n_heads * head_dim,  out d_model */
    LG_LORA_GATE = 4, /* mlp.gate_proj:    in d_model,             out d_ff */
    LG_LORA_UP = 5,   /* mlp.up_proj:      in d_model,             out d_ff */
    LG_LORA_DOWN = 6, /* mlp.down_proj:    in d_ff,                out d_model */
    LG_LORA_N_TARGETS = 7,
} lg_lora_target;

/* "q_proj", ..., "down_proj"; "?" if out of range. */
const char *lg_lora_target_name(lg_lora_target t);
/* Input / output width of target t in the base model. */
void lg_lora_target_dims(const lg_model_config *base, lg_lora_target t, int *in_dim, int *out_dim);

/* One adapted linear layer: a view into the adapter's memory. */
typedef struct lg_lora_module {
    int layer;
    lg_lora_target target;
    int rank;
    float scale;     /* alpha / rank, or alpha / sqrt(rank) with use_rslora */
    int in_dim;
    int out_dim;
    const void *A;   /* [rank, in_dim] row-major, lg_adapter_dtype; 64-byte aligned */
    const void *B;   /* [out_dim, rank] row-major, lg_adapter_dtype; 64-byte aligned */
} lg_lora_module;

typedef struct lg_adapter lg_adapter;

#define LG_ADAPTER_MAX_NAME 255
#define LG_ADAPTER_MAX_CONFIG (1u << 20) /* adapter_config.json larger than 1 MiB is refused (load and parse) */

/* Loads dir/adapter_config.json and dir/adapter_model.safetensors, checks them
 * against base (which must outlive nothing: it is only read here) and max_rank
 * (>= 1). name is the caller's identifier (copied; 1..255 bytes). On success
 * *out owns a new adapter; on failure *out is NULL and err says why. */
int lg_adapter_load(const char *dir, const char *name, const lg_model_config *base, int max_rank,
                    lg_adapter **out, lg_err *err);

/* The same from bytes already in memory (borrowed for the call only); the
 * digest covers config || st as above. For tests and fuzzers. */
int lg_adapter_parse(const char *config_json, size_t config_len, const void *st, size_t st_len,
                     const char *name, const lg_model_config *base, int max_rank, lg_adapter **out,
                     lg_err *err);

void lg_adapter_free(lg_adapter *a); /* NULL is a no-op */

const char *lg_adapter_name(const lg_adapter *a);
const char *lg_adapter_digest(const lg_adapter *a); /* 64 lowercase hex chars */
lg_dtype lg_adapter_dtype(const lg_adapter *a);     /* F32, F16 or BF16 */
size_t lg_adapter_weight_bytes(const lg_adapter *a); /* sum of A and B sizes, no padding */
int lg_adapter_max_rank(const lg_adapter *a);       /* largest module rank */
int lg_adapter_n_modules(const lg_adapter *a);
const lg_lora_module *lg_adapter_module(const lg_adapter *a, int i); /* NULL if out of range */
/* The module for (layer, target), or NULL if the adapter leaves it alone. */
const lg_lora_module *lg_adapter_find(const lg_adapter *a, int layer, lg_lora_target t);

#endif
