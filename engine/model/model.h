/*
 * model.h — the Llama-family forward pass as a sequence of backend ops over
 * one flattened varlen batch (see backend.h), with a paged KV cache in a
 * lg_page_pool.
 *
 * A step takes, per scheduled sequence, its new tokens (a prefill chunk or
 * one decode token), the position of the first of them, and its page table
 * (covering every position up to the last new token); it writes their K/V
 * into the pages, and returns f32 logits on the host for the sequences that
 * asked for them (at their last new token only). A sequence may also ask for
 * the logits of a run of its new tokens (prompt logprobs: lp_first,
 * lp_count): those rows go to a second buffer of prompt_logit_rows rows,
 * gathered and multiplied by lm_head with the same ops as the last-token
 * logits (get_rows, matmul), and come back with lg_model_collect.
 *
 * LoRA: per layer, each targeted projection gets y += scale * (x A^T) B^T as
 * two segmented backend ops (lora_shrink, lora_expand) over runs of
 * sequences that share an adapter; a step with no adapter runs none.
 *
 * Weights are copied into one backend allocation at create time, with q/k/v
 * fused into one [q+k+v, d] matrix and gate/up into one [2*d_ff, d] matrix
 * (one GEMM each per layer).
 */
#ifndef LG_MODEL_H
#define LG_MODEL_H

#include "engine/backend/backend.h"
#include "engine/base/common.h"
#include "engine/model/model_config.h"
#include "engine/backend/page_pool.h"
#include "engine/model/weights.h"

typedef struct lg_model lg_model;

typedef struct lg_model_opts {
    int max_step_tokens; /* largest flattened batch (token budget per step) */
    int max_seqs;        /* most sequences in one step */
    int page_tokens;     /* tokens per KV page (16) */
    int max_context;     /* longest sequence (positions) */
    int lora_max_rank;   /* largest adapter rank a step may carry; 0 = no LoRA */
    /* most prompt-logit rows (lg_step_seq.lp_count summed) in one step; 0:
     * LG_PROMPT_LOGIT_ROWS. Costs rows x vocab f32 on the backend (and the
     * engine keeps as much on the host): 25 MB for a 49K vocabulary, 78 MB
     * for 152K. */
    int prompt_logit_rows;
    /* KV cache as OCP e4m3 with per-layer K and V scales (`--kv-cache-dtype fp8`; backend.h
     * lg_kv_view), half the bytes of a 16-bit page; false: the act dtype */
    bool kv_fp8;
} lg_model_opts;

#define LG_PROMPT_LOGIT_ROWS 128

int lg_model_create(lg_backend *be, const lg_weights *w, const lg_model_opts *opts, lg_model **out, lg_err *err);
void lg_model_free(lg_model *m); /* NULL is a no-op */
/* Tensor parallelism (engine/model/model_tp.c): the model sharded over n ranks, bes[r] rank r's backend
 * (n distinct backends of one kind; they are joined into one group here, once). The model returned is
 * rank 0's and is used as any model: its launches run every rank; its free stops them. n <= 1: as
 * lg_model_create(bes[0], ...). Its lg_model_cfg is the whole model's. A step's pool must span the
 * ranks (page_pool.h lg_page_pool_create_ranks). */
int lg_model_create_tp(lg_backend *const *bes, int n, const lg_weights *w, const lg_model_opts *opts,
                       lg_model **out, lg_err *err);

const lg_model_config *lg_model_cfg(const lg_model *m);
const lg_model_opts *lg_model_options(const lg_model *m);
/* Bytes one KV page needs: page_tokens x n_layers x (K + V) x kv_dim x the KV dtype's size (kv_dim of a
 * rank's KV heads under tensor parallelism: the same on every rank). */
size_t lg_model_kv_page_bytes(const lg_model *m);
/* The KV cache's dtype: the backend's act dtype, or LG_F8E4M3 (opts.kv_fp8). */
lg_dtype lg_model_kv_dtype(const lg_model *m);
/* `--kv-cache-dtype`: "auto" (the act dtype) -> false, "fp8" / "fp8_e4m3" (vLLM's names) -> true;
 * 0, or -1 for anything else. */
int lg_kv_cache_dtype_parse(const char *s, bool *fp8);

typedef struct lg_step_seq {
    const int32_t *tokens; /* [n_tokens] new tokens */
    int n_tokens;
    int pos0;              /* position of tokens[0] == tokens already in the KV cache */
    const int32_t *pages;  /* page table, >= ceil((pos0 + n_tokens) / page_tokens) entries */
    int n_pages;
    bool want_logits;      /* logits at the last new token */
    /* LoRA slot table of this sequence's adapter ([n_layers * LG_LORA_N_MODULES],
     * device pointers into pool pages) or NULL for the base model; under tensor
     * parallelism one such table a rank, rank r's at lora + r * n_slots (the
     * adapter cache's). Sequences with the same table should be adjacent: each
     * run is one SGMV segment. */
    const lg_lora_w *lora;
    /* logits also at tokens[lp_first, lp_first + lp_count) (prompt
     * logprobs), into the step's prompt-logit rows after those of the
     * sequences before it; lp_count 0: none */
    int lp_first, lp_count;
} lg_step_seq;

/* true when the backend has a device sampler (the `sample` slot). */
bool lg_model_samples_on_device(const lg_model *m);

/* One forward step, in two halves, so that the next decode step can be
 * enqueued while this one runs and its results are read (engine.c's decode
 * bursts). lg_model_launch enqueues the step; want_ids, want_lp and
 * want_logits say which results lg_model_collect will be asked for.
 * lg_model_collect takes the oldest launched step and waits for its results
 * (a step with none, such as a prefill chunk that wants no logits, is left
 * to run: the stream orders what follows). For the n_wanted sequences that
 * want logits, in order: with sample_rows and want_ids (only when
 * lg_model_samples_on_device), the backend samples row i with
 * sample_rows[i] and ids[i] receives the token (n_wanted ints come back
 * instead of the logits); pen holds the n_pen (token, count) pairs the rows'
 * penalties index (lg_sample_row; NULL / 0: none), and a penalised row's
 * logits are changed in place; with want_lp, lp[i] receives the
 * lg_logprob_row of each row i whose sample_rows[i].logprobs is set (others:
 * unspecified); with want_logits, the f32 logits [n_wanted, vocab] are
 * downloaded (after sampling); with plogits, the prompt-logit rows
 * [sum of lp_count, vocab] f32 (a step with such rows runs eagerly, never
 * recorded as a graph). With seqs[s].tokens == NULL for every
 * sequence (one token each), the step's input tokens are the ids the
 * previous launched step sampled, row s for sequence s: that step sampled
 * one row per sequence of this step, in this order. A second step may be
 * launched before the first is collected only when lg_model_can_chain and
 * the first downloads no logits (they live in one buffer); at most two are
 * in flight. */
/* Structured output's masks for a step sampled on the device, for the rows
 * whose lg_sample_row.masked is set (their mask_off indexes host): the
 * launch calls fill(ctx) once the step's forward is enqueued, so the host
 * computes them while the device runs it, then uploads host[0, n_words)
 * and applies them before the sampler (the backend's mask_logits). */
typedef struct lg_step_masks {
    uint32_t *host;
    size_t n_words;
    void (*fill)(void *ctx);
    void *ctx;
} lg_step_masks;

/* masks: NULL, or the masks of the step's masked rows (only with want_ids). */
int lg_model_launch(lg_model *m, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs,
                    const lg_sample_row *sample_rows, const int32_t *pen, int n_pen, bool want_ids, bool want_lp,
                    bool want_logits, const lg_step_masks *masks, lg_err *err);
int lg_model_collect(lg_model *m, int32_t *ids, lg_logprob_row *lp, float *logits, float *plogits, lg_err *err);
/* true when steps can be chained: a device sampler and asynchronous downloads into page-locked memory */
bool lg_model_can_chain(const lg_model *m);

#endif
