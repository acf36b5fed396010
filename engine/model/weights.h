/*
 * weights.h — a loaded model on the host, independent of its file format:
 * config, named weight tensors (HF names, HF layouts), tokenizer description
 * and chat template. Its files, and the one direction their calls go:
 *
 *   engine/model/weights_load.c — lg_weights_load: picks the loader by what
 *                           the path is (directory or GGUF file)
 *     -> engine/model/weights_hf.c   — Hugging Face directory (config.json,
 *                           model.safetensors or sharded + index,
 *                           tokenizer.json, tokenizer_config.json,
 *                           generation_config.json)
 *     -> engine/model/weights_gguf.c — a GGUF file (llama.cpp / Ollama)
 *       -> engine/model/weights.c    — the container both loaders fill, the
 *                           Llama shape check and dummy weights; it knows no
 *                           file format and calls none of the files above
 *
 * Tensor naming and layout contract (what the engine relies on):
 *   names are the HF ones, e.g. "model.embed_tokens.weight",
 *   "model.layers.3.self_attn.q_proj.weight", "model.norm.weight",
 *   "lm_head.weight" (absent when tie_embeddings). Linear weights are
 *   [out_features, in_features] row-major, as torch stores them. GGUF q/k
 *   weights are un-permuted back to the HF rotate-half layout at load.
 *   dtype is F32, F16 or BF16, or the tensor is quantized (q != LG_QNONE):
 *   a GGUF file's quantized 2-D tensors keep their blocks (a row of
 *   shape[1] elements is shape[1] / block_elems blocks, backend.h lg_qtype),
 *   unless opts->dequantize expands them at load to opts->dequant_dtype.
 *
 * Ownership: lg_weights owns every tensor's memory (mmap'd file regions or
 * heap buffers); pointers stay valid until lg_weights_free.
 */
#ifndef LG_WEIGHTS_H
#define LG_WEIGHTS_H

#include "engine/backend/backend.h"
#include "engine/base/common.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

typedef struct lg_wtensor {
    char *name;        /* HF name */
    lg_dtype dtype;    /* F32, F16, BF16 (unused, F32, when q is set) */
    int n_dims;
    int64_t shape[4];  /* shape[0] is the outermost (rows) */
    const void *data;  /* host memory, contiguous row-major */
    size_t nbytes;
    lg_qtype q;        /* LG_QNONE, or the block layout of a quantized 2-D tensor */
} lg_wtensor;

typedef struct lg_weights lg_weights;

typedef struct lg_load_opts {
    /* dtype quantized GGUF tensors are expanded to where they are expanded:
     * at load when `dequantize`, else at upload by a backend that does not
     * take their layout (CUDA); config.weight_dtype of a quantized file. */
    lg_dtype dequant_dtype;
    /* Expand quantized GGUF tensors to dequant_dtype at load (the engine then
     * never sees a quantized weight). Default: they keep their blocks. */
    bool dequantize;
    /* Dummy weights: only config.json (+ tokenizer if present) is read and
     * every tensor is filled with deterministic random values of dummy_dtype. */
    bool dummy;
    lg_dtype dummy_dtype;
    uint64_t dummy_seed;
    /* Print a progress bar to stderr if it is a terminal. */
    bool progress;
    /* Load only config, tokenizer and chat template: no tensors. */
    bool vocab_only;
    /* `--quantization`: LG_QNONE (off), LG_QF8_A8 (fp8: per-channel weights, dynamic per-token activations) or
     * LG_QI4 (int4: round-to-nearest, asymmetric, groups of 128): the linear layers' 16-bit weights (q, k, v, o,
     * gate, up, down; not embeddings or lm_head) are quantized at load (weights_quantize.c). */
    lg_qtype quantize;
} lg_load_opts;

/* --- loading (weights_load.c, weights_hf.c, weights_gguf.c) --- */

/* Opens a model from a path: a directory (HF) or a .gguf file; picks the
 * loader by what the path is. Returns 0 or -1 with err set. */
int lg_weights_load(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err);

/* One format each, for callers that know it (weights_hf.c, weights_gguf.c). */
int lg_weights_load_hf(const char *dir, const lg_load_opts *opts, lg_weights **out, lg_err *err);
int lg_weights_load_gguf(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err);

/* Quantizes w's linear-layer weights to q (LG_QF8_A8 or LG_QI4) in place (weights_quantize.c; what
 * lg_weights_load does for opts->quantize). Refuses a model whose linear weights are already quantized. */
int lg_weights_quantize(lg_weights *w, lg_qtype q, lg_err *err);
/* Whether a tensor name is one of the linear layers --quantization quantizes (q, k, v, o, gate, up, down). */
bool lg_weights_is_linear(const char *name);
/* Dummy weights already quantized (weights_quantize.c): every linear-layer tensor of w (added by
 * lg_weights_fill_dummy with skip_linear) gets pseudo-random planar q (F8_A8: e4m3 codes of ~N(0, 64); I4:
 * uniform nibbles, z = 8) and group scales that make the weights ~N(0, 0.02) like the 16-bit dummy ones, a
 * function of seed only, generated in place: a model whose 16-bit weights would not fit the host (a 70B
 * shape) loads in FP8 or INT4. */
int lg_weights_dummy_quantized(lg_weights *w, lg_qtype q, uint64_t seed, lg_err *err);

/* --- a loaded model (weights.c) --- */

void lg_weights_free(lg_weights *w); /* NULL is a no-op */

const lg_model_config *lg_weights_config(const lg_weights *w);
/* NULL if absent. */
const lg_wtensor *lg_weights_get(const lg_weights *w, const char *name);
int lg_weights_count(const lg_weights *w);
const lg_wtensor *lg_weights_at(const lg_weights *w, int i);
/* Tokenizer built from tokenizer.json / GGUF vocab; NULL if the model has
 * none. Owned by w. */
lg_tokenizer *lg_weights_tokenizer(const lg_weights *w);
/* Jinja chat template text as shipped with the model, NULL if none. */
const char *lg_weights_chat_template(const lg_weights *w);

/* --- building one, for the loaders (weights.c) --- */
lg_weights *lg_weights_new(void);
/* Adds a tensor. name is copied. If owned_buf is non-NULL it is freed with
 * the weights (data should point into it). Rejects duplicate names. */
int lg_weights_add(lg_weights *w, const char *name, lg_dtype dt, int n_dims, const int64_t *shape,
                   const void *data, void *owned_buf, lg_err *err);
/* Adds a quantized 2-D tensor of layout q (shape[1] a multiple of its
 * block for ggml's layouts; any width for the planar ones, whose rows take
 * ceil(shape[1] / 128) groups); otherwise as lg_weights_add. */
int lg_weights_add_quant(lg_weights *w, const char *name, lg_qtype q, const int64_t shape[2], const void *data,
                         void *owned_buf, lg_err *err);
/* Replaces tensor i (2-D, [rows, cols] kept) by data of planar layout q (nbytes = lg_planar_bytes); its old
 * heap buffer, if any, is freed; owned_buf as in lg_weights_add. For `--quantization`. */
int lg_weights_set_quant(lg_weights *w, int i, lg_qtype q, const void *data, size_t nbytes, void *owned_buf,
                         lg_err *err);
/* Tells the kernel that this process no longer needs the resident pages of
 * [data, data + n) (the whole pages inside it) when that range lies in one
 * of w's file mappings (madvise MADV_DONTNEED; the model has copied the
 * tensor to the backend): RSS drops by them. Contents are unchanged: a
 * later read maps the pages back from the file. A range on the heap is
 * left alone. */
void lg_weights_drop_pages(const lg_weights *w, const void *data, size_t n);
/* Keeps a mapping alive for the lifetime of w (takes ownership). */
int lg_weights_keep_mmap(lg_weights *w, lg_mmap *m, lg_err *err);
lg_model_config *lg_weights_config_mut(lg_weights *w);
void lg_weights_set_tokenizer(lg_weights *w, lg_tokenizer *t);       /* takes ownership */
void lg_weights_set_chat_template(lg_weights *w, const char *tmpl);  /* copies */

/* Checks that every tensor the Llama forward needs is present with the right
 * shape for the config. Clear error naming the first missing/misshapen one. */
int lg_weights_check_llama(const lg_weights *w, lg_err *err);

/* Adds every tensor the config needs (names and shapes as check_llama expects),
 * filled with deterministic pseudo-random values (~N(0, 0.02); norms 1.0) of
 * dtype dt, a function of seed only. For loaders honouring opts->dummy. */
/* skip_linear: the linear layers' tensors (lg_weights_is_linear) are added with their shapes but no data, for
 * lg_weights_dummy_quantized to fill. */
int lg_weights_fill_dummy(lg_weights *w, lg_dtype dt, uint64_t seed, bool progress, bool skip_linear, lg_err *err);

#endif
