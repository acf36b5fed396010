/*
 * engine.h — the message-based engine API: submit requests, get tokens back
 * through callbacks, cancel; adapters added, replaced and removed while
 * requests run; one engine thread (or a caller) drives the steps.
 *
 * What a request carries: prompt ids, sampling, a tenant (its isolation
 * domain for the prefix cache and its share for fairness: an identity, not
 * a display name — a string that is never given to another tenant, such as
 * lg_tenant_key of a database id that is never reused; the gateway passes
 * "t<tenant id>"), an adapter by id
 * (a *version*: lg_engine_add_adapter returns a new id each time, also when
 * it replaces a name), and an optional cache salt. What comes back: each
 * sampled token (on_token, with log-probabilities when asked), then exactly
 * one on_finish with the usage (prompt, cached and completion tokens, finish
 * reason, times): what the engine did, so what may be billed — a request
 * cancelled before its prompt was computed reports only the prompt tokens
 * that were prefilled (none while it waited in the queue).
 *
 * The runtime behind it (one file each, with their design notes):
 *   engine/runtime/scheduler.c    — iteration-level continuous batching with a token
 *                           budget per step, chunked prefill, preemption by
 *                           recompute, adapter residency, admission order;
 *   engine/runtime/fairness.c     — Virtual Token Counters across tenants (VTC);
 *   engine/runtime/prefix_cache.c — radix tree over full KV pages, namespaced by
 *                           (isolation domain, adapter digest, cache salt);
 *   adapters/adapter_cache.c, adapter_loader.c — adapter tiers: disk ->
 *                           host (loader thread) -> pool pages (async copy).
 *
 * Threads. Every function here is thread-safe unless it says "owner thread".
 * lg_engine_step and all callbacks run on the owner thread: the engine thread
 * after lg_engine_start, otherwise whoever calls lg_engine_step. Callbacks
 * must be cheap and must not block (the gateway hands their data to other
 * threads); they may call lg_engine_cancel and lg_engine_submit, nothing else
 * of this API. A later remote engine keeps this interface.
 */
#ifndef LG_ENGINE_H
#define LG_ENGINE_H

#include "adapters/adapter_image.h"
#include "engine/backend/backend.h"
#include "engine/model/model.h"
#include "engine/backend/sampling.h"
#include "engine/runtime/constrain/constrain.h"

typedef struct lg_engine lg_engine;

typedef enum lg_finish_reason {
    LG_FINISH_STOP = 0,      /* EOS / stop token (or a stop string, via cancel with STOP) */
    LG_FINISH_LENGTH = 1,    /* max_tokens or the context limit */
    LG_FINISH_CANCELLED = 2, /* lg_engine_cancel, or the engine shut down */
    LG_FINISH_ERROR = 3,     /* the adapter could not be loaded, the backend failed, ... (message given) */
} lg_finish_reason;
const char *lg_finish_reason_name(lg_finish_reason r);

/* Usage of one request, given to on_finish: what the engine did. Times are
 * lg_now() seconds (CLOCK_MONOTONIC); 0 when the event did not happen (no
 * token generated). */
typedef struct lg_usage {
    /* prompt tokens prefilled: computed, or served from the prefix cache,
     * each counted once (a prompt recomputed after preemption is not counted
     * again); == prompt_len once the first token was sampled, less only for
     * a request that ended before (cancelled, failed): 0 if it never left the
     * queue, the chunks computed if it was cancelled during a chunked prefill */
    int prompt_tokens;
    int prompt_len;          /* the prompt's length (n_prompt) */
    int completion_tokens;   /* tokens sampled (and passed to on_token) */
    /* prompt tokens whose KV came from the prefix cache: the full pages
     * matched at the first admission (exact; <= prompt_tokens) */
    int cached_tokens;
    double t_queued;         /* lg_engine_submit accepted it */
    double t_first_token;    /* first on_token */
    double t_finished;       /* on_finish */
} lg_usage;

#define LG_MAX_TOP_LOGPROBS 20

/* One sampled token as on_token sees it; valid during the call only. */
typedef struct lg_token_out {
    int32_t token;
    int index;               /* 0 for the first generated token */
    /* with lg_request_params.logprobs: log-softmax of the model's logits
     * (before penalties, temperature and filters, as OpenAI reports them) */
    float logprob;
    int n_top;               /* top_logprobs alternatives, best first (ties: lower id first) */
    int32_t top_ids[LG_MAX_TOP_LOGPROBS];
    float top_logprobs[LG_MAX_TOP_LOGPROBS];
    /* f32 [n_vocab] raw logits, only for the first token of a request with
     * want_first_logits; NULL otherwise */
    const float *logits;
    int n_vocab;
    /* this token ends the request as an EOS id (unless ignore_eos) or one of
     * stop_ids: on_finish(STOP) follows. OpenAI's chat answers leave such a
     * token out of the text and of the logprobs. */
    bool stop_token;
} lg_token_out;

/* One scored prompt token (lg_request_params.prompt_logprobs): the
 * log-softmax, at the prompt's token `index`, of the logits computed at
 * position index - 1 (the raw row, as lg_logprobs defines it), its rank and
 * the n_top best alternatives. The first prompt token has none. Valid during
 * the call only. */
typedef struct lg_prompt_logprob {
    int index;               /* 1 .. n_prompt - 1 */
    int32_t token;           /* prompt[index] */
    float logprob;
    int rank;                /* 1 + the number of tokens with a larger logit (vLLM's rank) */
    int n_top;               /* best first (ties: lower id first) */
    int32_t top_ids[LG_MAX_TOP_LOGPROBS];
    float top_logprobs[LG_MAX_TOP_LOGPROBS];
} lg_prompt_logprob;

typedef struct lg_request_cb {
    void (*on_token)(void *user, int64_t id, const lg_token_out *t);
    /* Called exactly once per accepted request, last. error: a one-line
     * message with LG_FINISH_ERROR (and "engine shut down" on CANCELLED at
     * lg_engine_free), else NULL. */
    void (*on_finish)(void *user, int64_t id, lg_finish_reason reason, const lg_usage *usage, const char *error);
    /* With prompt_logprobs: rows for consecutive prompt positions, each
     * index 1 .. n_prompt - 1 exactly once and in order (also when the
     * request was preempted and its prompt recomputed), in one or more calls
     * during the prefill, all before the first on_token. A request that
     * ends during its prefill (cancelled, failed) may have had only some.
     * NULL: the rows are computed and dropped. */
    void (*on_prompt_logprobs)(void *user, int64_t id, const lg_prompt_logprob *rows, int n);
} lg_request_cb;

#define LG_MAX_STOP_IDS 16
#define LG_MAX_TENANT 127     /* bytes of a tenant string */
#define LG_MAX_CACHE_SALT 255 /* bytes of a cache salt */

typedef struct lg_request_params {
    const int32_t *prompt;   /* copied */
    int n_prompt;
    int max_tokens;          /* <= 0: up to the context limit */
    lg_sampling_params sampling;
    float presence_penalty;  /* OpenAI semantics, [-2, 2]; 0: off */
    float frequency_penalty; /* OpenAI semantics, [-2, 2]; 0: off */
    /* HF's / vLLM's multiplicative repetition penalty over the prompt and
     * the generated tokens (each distinct token once: logit > 0 ? logit /
     * p : logit * p), before presence / frequency; 0 or 1: off. A row with
     * it is sampled on the host from its downloaded logits. */
    float repetition_penalty;
    int32_t stop_ids[LG_MAX_STOP_IDS]; /* in addition to the model's EOS ids */
    int n_stop_ids;
    bool ignore_eos;
    /* EOS ids (unless ignore_eos) and stop_ids get logit -inf until this
     * many tokens were generated (vLLM's min_tokens; such rows are sampled
     * on the host) */
    int min_tokens;
    bool want_first_logits;  /* pass the raw logits with the first token */
    bool logprobs;           /* report each token's logprob ... */
    int top_logprobs;        /* ... and this many alternatives (0..LG_MAX_TOP_LOGPROBS) */
    /* Score the prompt (cb.on_prompt_logprobs) in the prefill that computes
     * it: every chunk also gets the logits of its positions (at most
     * lg_model_opts.prompt_logit_rows rows a step, so a long prompt takes
     * more, smaller chunks), scored on the host. Such a request matches the
     * prefix cache only up to the positions it has scored: a first
     * admission computes its whole prompt (cached_tokens 0); it still
     * offers its pages to the cache. */
    bool prompt_logprobs;
    int prompt_top_logprobs; /* alternatives per prompt token (0..LG_MAX_TOP_LOGPROBS) */
    /* Generate nothing: compute the prompt (and its logprobs), then finish
     * with LENGTH and 0 completion tokens (OpenAI's max_tokens 0 with echo). */
    bool prompt_only;
    /* Structured output (engine/runtime/constrain/constrain.h): NULL, or a
     * compiled grammar the output must follow. The engine takes its own
     * reference and runs a matcher for the request: each step's row gets
     * the grammar's token mask (tokens outside it at -inf before the
     * sampler's filters; logprobs stay those of the raw row), a mask of one
     * token is taken without sampling, EOS is allowed exactly when the
     * output is complete, and the request stops (STOP) once it is complete
     * and nothing can extend it. min_tokens never masks the only token the
     * grammar allows. */
    lg_constraint *constraint;
    int adapter_id;          /* a version id from lg_engine_add_adapter; 0 = base model */
    const char *tenant;      /* copied; NULL or "" = the default tenant "" */
    const char *cache_salt;  /* copied; NULL or "" = none. Only requests with equal salts share cached KV */
    lg_request_cb cb;
    void *user;
} lg_request_params;

/* Who may share cached prefixes (the namespace's isolation domain). */
typedef enum lg_prefix_sharing {
    LG_PREFIX_TENANT = 0, /* default: within a tenant (and adapter version, and salt) */
    LG_PREFIX_GLOBAL = 1, /* across tenants (same adapter content, same salt): the operator accepts the timing side channel */
    LG_PREFIX_OFF = 2,    /* no prefix cache */
} lg_prefix_sharing;
const char *lg_prefix_sharing_name(lg_prefix_sharing s);
int lg_prefix_sharing_parse(const char *s, lg_prefix_sharing *out); /* "tenant", "global", "off" */

/* Speculative decoding (engine/runtime/speculate.c): each decoding
 * sequence may propose up to num_tokens next tokens, which one forward step
 * verifies; output is exact (greedy: identical; sampled: the target's
 * distribution, the same tokens for the same seed). */
typedef enum lg_spec_mode {
    LG_SPEC_OFF = 0,
    LG_SPEC_NGRAM = 1, /* prompt lookup: proposals from the sequence's own prompt and output */
    LG_SPEC_DRAFT = 2, /* a small model with the same vocabulary proposes, greedily (base model only) */
} lg_spec_mode;
typedef struct lg_spec_opts {
    lg_spec_mode mode;
    /* LG_SPEC_DRAFT: the draft model's weights (copied to the backend by lg_engine_create, which may free
     * them after); its vocabulary must be the target's. It gets its own KV page pool, as many pages as the
     * target's. */
    const lg_weights *draft;
    int num_tokens;            /* K, proposed tokens a step at most (0: 4) */
    int ngram_min, ngram_max;  /* suffix lengths looked up, longest first (0: 2 and 4) */
    /* the per-step policy: no speculation when more than max_batch sequences decode (0: 16), and at most
     * max_tokens verified tokens a step in all (0: 64); a sequence whose recent acceptance rate falls below
     * min_accept (0: 0.3; < 0: never) pauses its proposals for a while */
    int max_batch, max_tokens;
    float min_accept;
    /* benchmarks only (bench_accept_on): each proposed token is accepted with probability bench_accept,
     * whatever the model says (and, when not, still if the model's token is the proposed one), and
     * proposals are padded to num_tokens: for dummy weights, where acceptance means nothing. The output is
     * then not the model's. */
    bool bench_accept_on;
    float bench_accept;
} lg_spec_opts;
const char *lg_spec_mode_name(lg_spec_mode m);
int lg_spec_mode_parse(const char *s, lg_spec_mode *out); /* "off", "ngram", "draft" */

/* Order in which waiting requests are admitted. */
typedef enum lg_sched_policy {
    LG_SCHED_VTC = 0,  /* default: fair share across tenants (Virtual Token Counters) */
    LG_SCHED_FCFS = 1, /* arrival order, for comparison */
} lg_sched_policy;

typedef struct lg_engine_opts {
    lg_model_opts model;       /* token budget, max seqs, page size, context, LoRA max rank */
    /* Pool size, first that applies: n_pages; pool_bytes; on a backend that
     * reports device memory, gpu_memory_utilization (default 0.90) of the
     * device's total memory minus what is already used after the weights and
     * workspaces (as vLLM's flag); else (CPU) min(2 GiB, a quarter of RAM).
     * At least one full-context sequence always fits. */
    int n_pages;
    size_t pool_bytes;
    double gpu_memory_utilization;
    size_t adapter_host_bytes; /* host tier for adapter images (default 1 GiB) */
    lg_prefix_sharing prefix_sharing;
    lg_sched_policy policy;
    /* true: decode step by step, never enqueueing a step before the last
     * one's tokens are read (engine.c, decode bursts; LG_BURST=0 does the
     * same): a request that arrives during a burst then waits for no extra
     * step of the batch before its prefill. */
    bool no_decode_bursts;
    lg_spec_opts spec;         /* speculative decoding (engine/runtime/speculate.c); zero: off */
    /* Tensor parallelism (engine/model/model_tp.c): tp_size >= 2 ranks of one host, tp_backends[r]
     * the backend of rank r (tp_backends[0] == be; each on its own device, CUDA ordinals in rank
     * order), joined into one group by lg_engine_create and owned by the caller like be. The weights,
     * KV heads and adapters are sharded over them; one scheduler, one page table. 0 or 1: be alone. */
    int tp_size;
    lg_backend *const *tp_backends;
} lg_engine_opts;

/* Takes ownership of nothing: be must outlive the engine; w may be freed
 * once lg_engine_create returns (the weights are copied to the backend). */
int lg_engine_create(lg_backend *be, const lg_weights *w, const lg_engine_opts *opts, lg_engine **out,
                     lg_err *err);
/* NULL is a no-op. Stops the engine thread if running; unfinished requests
 * get on_finish(CANCELLED, "engine shut down") on the calling thread. */
void lg_engine_free(lg_engine *e);

const lg_model_config *lg_engine_config(const lg_engine *e);
int lg_engine_max_context(const lg_engine *e); /* longest sequence (prompt + output) */

/* ---- engine thread ------------------------------------------------------ */

/* Starts the engine thread: it runs steps while there is work and sleeps on
 * a condition variable when idle (woken by submit, cancel, adapter changes
 * and loader completions). From then on nobody else calls lg_engine_step. */
int lg_engine_start(lg_engine *e, lg_err *err);
/* Stops the thread after its current step and joins it; requests stay
 * queued (lg_engine_free finishes them). No-op when not started. */
void lg_engine_stop(lg_engine *e);

/* ---- adapters (any thread) ---------------------------------------------- */

/* Reads and validates a PEFT directory (adapter_config.json +
 * adapter_model.safetensors) against the base model on the calling thread,
 * then registers it as a new version of `name`: new submissions naming the
 * returned *adapter_id (>= 1) use it. If `name` had a version already, that
 * version is retired: requests in flight finish on it, new submissions of
 * its id are refused, and its pages and host image are released once its
 * last request finished. The files are read again later (by the loader
 * thread) when the adapter must come back into memory; if they changed, the
 * requests that need it fail with a clear message. Needs
 * opts.model.lora_max_rank > 0. */
int lg_engine_add_adapter(lg_engine *e, const char *name, const char *dir, int *adapter_id, lg_err *err);

/* A synthetic adapter (adapters/adapter_image.h: rank, targets, seed):
 * random weights generated from the seed when the loader brings it into
 * memory (for benchmarks with thousands of adapters: nothing is written to
 * disk). */
int lg_engine_add_synthetic_adapter(lg_engine *e, const char *name, const lg_synth_adapter *s, int *adapter_id,
                                    lg_err *err);

/* Retires the current version of `name` (as a replacement does); new
 * submissions are refused. -1 if no adapter has that name. */
int lg_engine_remove_adapter(lg_engine *e, const char *name, lg_err *err);
/* Current version id of `name`, 0 if none. */
int lg_engine_find_adapter(lg_engine *e, const char *name);

typedef struct lg_adapter_info {
    char name[256];
    char digest[65];          /* SHA-256 of adapter_config.json || adapter_model.safetensors */
    int max_rank;
    size_t weight_bytes;      /* A and B at the adapter's own ranks, in the compute dtype */
    bool retired;
    int requests;             /* submitted and not finished */
} lg_adapter_info;
/* -1 if the id was never issued or its version is gone. */
int lg_engine_adapter_info(lg_engine *e, int adapter_id, lg_adapter_info *out);

/* Owner thread, for tests and benchmarks: drops the adapter version's pool
 * copy (if no running request pins it) and, with host_too, its host image,
 * so the next request that needs it loads it again. */
void lg_engine_evict_adapter(lg_engine *e, int adapter_id, bool host_too);

/* ---- tenants (any thread) ----------------------------------------------- */

/* Fair-share weight of a tenant (default 1; > 0). A tenant with weight 2
 * gets twice the service of a tenant with weight 1 when both are backlogged. */
int lg_engine_set_tenant_weight(lg_engine *e, const char *tenant, double weight, lg_err *err);

/* The engine's tenant string for a tenant id that is never reused (the
 * store's tenant row id): "t<id>", written to buf (LG_TENANT_KEY_MAX bytes);
 * returns buf. Any thread. */
#define LG_TENANT_KEY_MAX 24
const char *lg_tenant_key(int64_t id, char *buf);

/* The tenant is gone (deleted): drops its cached prefixes. Posted to the
 * owner thread like a cancel and applied at its next step (in order with
 * submits posted before it): every prefix-cache namespace whose isolation
 * domain is `tenant` (--prefix-sharing tenant) leaves the tree, and with a
 * shared domain (global) every salted namespace the tenant inserted pages
 * into; pages no running request pins go back to the pool then, the others
 * when their requests finish. The tenant's requests already submitted stop
 * using and filling those namespaces; they run to the end. (Unsalted
 * namespaces of the shared global domain are shared by design and stay.)
 * Returns 0, or -1 (out of memory, tenant too long). */
int lg_engine_purge_tenant(lg_engine *e, const char *tenant, lg_err *err);

/* ---- requests (any thread) ---------------------------------------------- */

/* Validates and enqueues; returns 0 with *id set, or -1 with err set (the
 * callbacks are then never called). */
int lg_engine_submit(lg_engine *e, const lg_request_params *p, int64_t *id, lg_err *err);
/* Finishes a request at the next step with `reason` (CANCELLED, or STOP when
 * the caller matched a stop string); its pages are freed then. Unknown or
 * finished ids are ignored. */
void lg_engine_cancel(lg_engine *e, int64_t id, lg_finish_reason reason);

/* ---- stepping (owner thread) -------------------------------------------- */

/* Runs one scheduling step (may do nothing if idle or if every waiting
 * request waits for its adapter). Returns 0, or -1 when the backend failed
 * (the step's requests are finished with ERROR). */
int lg_engine_step(lg_engine *e, lg_err *err);
/* true while any request is queued or running. */
bool lg_engine_busy(lg_engine *e);
/* Blocks up to timeout_s until there is something a step could do (a new
 * request, a cancel, a finished adapter load) — for callers that drive
 * lg_engine_step themselves and found nothing schedulable. */
void lg_engine_wait(lg_engine *e, double timeout_s);

/* ---- counters (any thread; a snapshot published after every step) -------- */

typedef struct lg_engine_stats {
    int64_t steps, prefill_steps, decode_steps, prefill_tokens, decode_tokens, preemptions;
    int64_t chained_steps;   /* decode steps enqueued before the previous step's results were read (bursts) */
    double prefill_seconds, decode_seconds; /* forward time of steps with prefill / decode-only */
    double step_seconds;     /* whole lg_engine_step calls (scheduling, forward, sampling, callbacks) */
    double sample_seconds;   /* sampling and token callbacks */
    /* structured output: rows sampled under a grammar's mask, those whose mask allowed one token
     * (taken without sampling), and the time spent computing masks */
    int64_t constrained_rows, forced_tokens;
    int64_t fast_forward_tokens; /* forced tokens appended without a step of their own */
    double mask_seconds;
    int queued, running;     /* requests waiting for admission / admitted */
    int pages_total, pages_free;
    int pages_kv, pages_adapter, pages_cached;
    int pages_prefix;        /* KV pages held by the prefix cache (in use or cached) */
    int max_pages_kv, max_pages_adapter, max_pages_prefix; /* high-water marks */
    size_t page_bytes;
    int page_tokens;         /* KV tokens per page */
    /* the KV cache: its dtype (lg_dtype_name: f32, f16, bf16, f8e4m3) and the tokens the pool holds
     * as KV (pages_total x page_tokens) */
    const char *kv_dtype;
    /* the base model's weights: their quantization (lg_model_config quant_method: none, fp8, fp8-block, awq, gptq,
     * compressed-tensors-int4, fbgemm_fp8, int4-rtn, gguf) */
    const char *weights_quant;
    int64_t kv_tokens_capacity;
    int64_t requests_finished;
    int64_t prompt_tokens, cached_tokens; /* summed over admitted requests */
    int64_t prefix_lookups, prefix_hits;   /* admissions that looked / found >= 1 page */
    int64_t adapter_loads, adapter_evictions; /* into / out of the pool */
    int64_t adapter_host_loads;              /* disk (or generator) -> host, by the loader thread */
    double adapter_load_seconds;             /* summed: asked for -> resident in the pool */
    /* speculative decoding: verification rows (a sequence's step with proposals), tokens proposed, proposed
     * tokens accepted (emitted as proposed), and steps in which the policy turned it off for the batch */
    int64_t spec_verify_rows, spec_proposed, spec_accepted, spec_batch_off_steps;
    int adapters_registered, adapters_resident;
    int max_step_adapters;   /* most adapters one step serves: each sequence may have its own (0: no LoRA) */
} lg_engine_stats;
void lg_engine_get_stats(lg_engine *e, lg_engine_stats *s);

/* An adapter version with requests in the engine at the last published
 * step: how many of them run (admitted) and how many wait (never admitted,
 * or preempted). Requests on the base model are not listed. */
typedef struct lg_adapter_activity {
    int adapter_id;
    int running, waiting;
} lg_adapter_activity;
/* The adapter versions with requests at the last published step, in
 * ascending id order, copied into *out (malloc'd, the caller frees it;
 * NULL when there are none), and, when s is not NULL, the stats of that
 * same snapshot (so the lists agree with s->running and s->queued).
 * Returns how many, or -1 when out of memory (*out NULL). Any thread. */
int lg_engine_adapter_activity(lg_engine *e, lg_engine_stats *s, lg_adapter_activity **out);

/* Latencies (ms) of the most recent adapter loads (asked for -> resident in
 * the pool), oldest first; up to cap values are copied. Returns how many. */
int lg_engine_adapter_load_times(lg_engine *e, float *ms, int cap);

/* Service counters per tenant (VTC): weighted tokens served
 * (prompt tokens computed x 1 + output tokens x 2, divided by nothing) and
 * the tenant's virtual counter. For tests and metrics. -1 if unknown. */
typedef struct lg_tenant_stats {
    double service;          /* prompt tokens computed + 2 x output tokens */
    double counter;          /* the VTC virtual counter (service / weight, lifted) */
    int queued, running;
} lg_tenant_stats;
int lg_engine_tenant_stats(lg_engine *e, const char *tenant, lg_tenant_stats *out);

/* ---- several engines (engine/runtime/dp_router.h) ------------------------------ */

/* Makes e admit by the tenant counters of `with` (engine/runtime/fairness.h,
 * lg_fair_join): the weights, the service and the VTC counters become one
 * table for every engine joined to it, so a tenant's service on any of them
 * counts toward its share on all. Each engine keeps its own queue.
 * lg_engine_tenant_stats then reports the shared service and counter (and
 * e's own queued and running). Call once, after creating e and before any
 * submit or weight on it; both engines of the same policy. -1 otherwise. */
int lg_engine_share_fairness(lg_engine *e, lg_engine *with, lg_err *err);

#endif
