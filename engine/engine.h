/*
 * engine.h — the message-based engine API: submit requests, get tokens back
 * through callbacks, cancel; one owner thread drives lg_engine_step().
 *
 * Scheduling (engine/engine.c): iteration-level continuous batching. Every
 * step takes running sequences that decode (one token each) first, then
 * fills the rest of the token budget with prefill chunks (chunked prefill),
 * oldest request first. KV pages come from the page pool; when it runs dry
 * the youngest running request is preempted (its pages freed, its tokens —
 * prompt and what it generated — recomputed later). A request that names an
 * adapter runs only once its adapter is resident in the pool (pinned while
 * the request holds pages); the step's sequences are ordered by adapter so
 * each adapter is one SGMV segment.
 *
 * Threads: lg_engine_submit and lg_engine_cancel may be called from any
 * thread (they post to an inbox under a mutex). lg_engine_step and the
 * callbacks run on the owner thread only. A later remote engine keeps this
 * interface.
 */
#ifndef LG_ENGINE_H
#define LG_ENGINE_H

#include "backend.h"
#include "model.h"
#include "sampling.h"

typedef struct lg_engine lg_engine;

typedef enum lg_finish_reason {
    LG_FINISH_STOP = 0,      /* EOS / stop token (or a stop string, via cancel_stop) */
    LG_FINISH_LENGTH = 1,    /* max_tokens or the context limit */
    LG_FINISH_CANCELLED = 2, /* lg_engine_cancel */
    LG_FINISH_ERROR = 3,
} lg_finish_reason;
const char *lg_finish_reason_name(lg_finish_reason r);

typedef struct lg_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;      /* prompt tokens served from the prefix cache */
} lg_usage;

typedef struct lg_request_cb {
    /* A sampled token. logits (f32 [n_vocab]) is non-NULL only for the first
     * generated token of a request that asked for it; valid during the call. */
    void (*on_token)(void *user, int64_t id, int32_t token, const float *logits, int n_vocab);
    /* Always called exactly once per accepted request, last. */
    void (*on_finish)(void *user, int64_t id, lg_finish_reason reason, const lg_usage *usage, const char *error);
} lg_request_cb;

#define LG_MAX_STOP_IDS 16

typedef struct lg_request_params {
    const int32_t *prompt;   /* copied */
    int n_prompt;
    int max_tokens;          /* <= 0: up to the context limit */
    lg_sampling_params sampling;
    int32_t stop_ids[LG_MAX_STOP_IDS]; /* in addition to the model's EOS ids */
    int n_stop_ids;
    bool ignore_eos;
    bool want_first_logits;  /* pass logits with the first token */
    int adapter_id;          /* from lg_engine_add_adapter; 0 = base model */
    lg_request_cb cb;
    void *user;
} lg_request_params;

typedef struct lg_engine_opts {
    lg_model_opts model;     /* token budget, max seqs, page size, context, LoRA max rank */
    int n_pages;             /* pages in the unified pool (0: derive from pool_bytes) */
    size_t pool_bytes;       /* pool size when n_pages is 0 (default 256 MiB) */
    size_t adapter_host_bytes; /* host-tier budget for adapter images (default 1 GiB) */
} lg_engine_opts;

/* Takes ownership of nothing: be and w must outlive the engine (weights may
 * be freed once lg_engine_create returns; they are copied to the backend). */
int lg_engine_create(lg_backend *be, const lg_weights *w, const lg_engine_opts *opts, lg_engine **out,
                     lg_err *err);
void lg_engine_free(lg_engine *e); /* NULL is a no-op; unfinished requests get on_finish(CANCELLED) */

const lg_model_config *lg_engine_config(const lg_engine *e);

/* Loads and validates a PEFT adapter directory under `name` (owner thread,
 * before or between steps). *adapter_id (>= 1) goes into
 * lg_request_params.adapter_id. Needs opts.model.lora_max_rank > 0. */
int lg_engine_add_adapter(lg_engine *e, const char *name, const char *dir, int *adapter_id, lg_err *err);
/* 0 if no adapter has that name. */
int lg_engine_find_adapter(const lg_engine *e, const char *name);

/* Validates and enqueues; returns 0 with *id set, or -1 with err set (the
 * callbacks are then never called). Thread-safe. */
int lg_engine_submit(lg_engine *e, const lg_request_params *p, int64_t *id, lg_err *err);
/* Finishes a request at the next step with `reason` (CANCELLED, or STOP when
 * the caller matched a stop string). Thread-safe; unknown ids are ignored. */
void lg_engine_cancel(lg_engine *e, int64_t id, lg_finish_reason reason);

/* Runs one scheduling step (may do nothing if idle). Returns 0, or -1 when
 * the backend failed (the step's requests are finished with ERROR). */
int lg_engine_step(lg_engine *e, lg_err *err);
/* true while any request is queued or running. */
bool lg_engine_busy(lg_engine *e);

typedef struct lg_engine_stats {
    int64_t steps, prefill_steps, decode_steps, prefill_tokens, decode_tokens, preemptions;
    double prefill_seconds, decode_seconds; /* forward time of steps with prefill / decode-only */
    double step_seconds;     /* whole lg_engine_step calls (scheduling, forward, sampling, callbacks) */
    double sample_seconds;   /* sampling and token callbacks */
    int pages_total, pages_free;
    int pages_kv, pages_adapter, pages_cached;
    int64_t adapter_loads, adapter_evictions; /* into / out of the pool */
} lg_engine_stats;
void lg_engine_get_stats(const lg_engine *e, lg_engine_stats *s);

#endif
