/*
 * engine_internal.h — the request and engine structures shared by the
 * engine's files: engine.c (API, lifecycle, the step: forward, sampling,
 * callbacks), scheduler.c (which sequences run in a step). Not a public
 * header.
 *
 * A request holds all its tokens (prompt, then generated) in `tokens`;
 * n_computed of them have KV in its pages. Each step it runs a chunk
 * tokens[n_computed, n_computed + c): decode is c == 1 with n_computed ==
 * n_tokens - 1. When a chunk reaches n_tokens the step returns logits for
 * its last token and the request samples the next one. A decode with
 * speculative proposals (speculate.c) runs c == 1 + n_draft: the proposals
 * sit at tokens[n_tokens, n_tokens + n_draft), past the request's tokens,
 * and become its tokens only as they are accepted; it may then hold more
 * pages than ceil(n_computed / page_tokens) until they are needed.
 *
 * Pages: pages[0, n_chain) belong to prefix-cache nodes (nodes[i], one pin
 * each, shared with other requests of the same namespace); pages[n_chain,
 * n_pages) are the request's own. Running requests hold ceil(n_computed /
 * page_tokens) pages (plus those reserved for the current step); waiting
 * ones hold none. Preemption gives everything back and sets n_computed = 0:
 * the whole token list is recomputed later (usually mostly from the prefix
 * cache, which kept the pages it had inserted), so greedy output does not
 * change.
 *
 * Billing (lg_usage). `prefilled` is how far the prompt has been prefilled
 * at most, ever: max over the request's life of min(n_computed, n_prompt),
 * raised when a chunk is computed (engine.c, take_results) and when an
 * admission starts it on cached pages (scheduler.c, try_admit). Preemption
 * sets n_computed back to 0 but never lowers it, so a recomputed prompt is
 * billed once; usage.prompt_tokens = prefilled <= n_prompt. Cached tokens
 * are the pages matched at the first admission (a whole number of pages, <=
 * prefilled from then on). A request cancelled in the queue was never
 * admitted: 0 and 0.
 *
 * Prompt logprobs (p.prompt_logprobs). The logits at position q score
 * prompt token q + 1, so positions [0, n_prompt - 1) are scored, each once:
 * plp_pos is how far that went (rows 1 .. plp_pos delivered). A chunk gets
 * the logits of its positions in [plp_pos, n_prompt - 1) (lg_step_seq
 * lp_first / lp_count), at most e->plp_cap rows a step across the batch, so
 * the scheduler cuts such a request's chunks to fit; the prefix cache is
 * matched only below plp_pos (pages it serves were never scored here), so a
 * request preempted after its prompt was scored reuses its cached pages.
 *
 * Lists (owner thread): `live` has every request the owner thread knows;
 * `running` the admitted ones in admission order; `preempted` those waiting
 * to be re-admitted, in admission order (they go before new admissions);
 * never-admitted requests wait in the fairness queue (engine/runtime/fairness.h).
 */
#ifndef LG_ENGINE_INTERNAL_H
#define LG_ENGINE_INTERNAL_H

#include "adapters/adapter_cache.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/fairness.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/base/strmap.h"

#include <pthread.h>

typedef enum { RQ_WAITING, RQ_RUNNING } rq_state;

typedef struct request {
    int64_t id;
    int64_t admit_seq;       /* 0: never admitted */
    rq_state state;
    bool preempted;          /* in e->preempted */
    int32_t *tokens;         /* [cap_tokens] prompt then generated */
    int n_tokens, cap_tokens, n_prompt;
    int n_computed;
    int32_t *pages;          /* [cap_pages] */
    lg_pc_node **nodes;      /* [cap_pages]: nodes of pages[0, n_chain) */
    int n_pages, cap_pages, n_chain;
    int max_total;           /* n_prompt + max_tokens, capped by the context */
    int adapter_pages;       /* pages of its adapter version (0: none) */
    lg_sampler *sampler;
    lg_cmatch *cm;           /* structured output: the grammar's matcher, else NULL */
    lg_request_params p;     /* copy; prompt/tenant/cache_salt point nowhere */
    char tenant[LG_MAX_TENANT + 1];
    bool use_cache;          /* prefix cache on for this request (and still inserting) */
    lg_pc_ns ns;
    lg_fair_link link;       /* admission queue (never-admitted requests) */
    lg_fair_tenant *ft;
    int n_generated;
    int prefilled;           /* prompt tokens prefilled (computed or from the cache), at most: billed */
    int plp_pos;             /* prompt logprobs: positions [0, plp_pos) scored (rows 1 .. plp_pos delivered) */
    bool counted;            /* prompt/cached tokens counted (first admission) */
    /* speculative decoding (speculate.c): proposals of this step at tokens[n_tokens, n_tokens + n_draft)
     * (not yet the request's tokens), the recent acceptance rate, and the pause of its proposals */
    int n_draft;
    float spec_rate;
    int spec_pause, spec_backoff;
    lg_rng spec_rng;         /* the bench's fixed-rate acceptance draws (lg_spec_opts.bench_accept) */
    /* a draft model's KV (LG_SPEC_DRAFT): pages in e->dpool for positions [0, d_computed) of tokens */
    int32_t *dpages;         /* [cap_pages] */
    int n_dpages, d_computed;
    const lg_lora_w *lora;   /* adapter slot table while pinned, else NULL */
    bool cancel;
    lg_finish_reason cancel_reason;
    char error[256];
    lg_usage usage;
    struct request *next;    /* inbox */
} request;

/* A registered adapter version (guarded by e->mu). */
typedef struct adapter_reg {
    int id;
    char *name;
    char digest[65];
    int max_rank, n_pages;
    size_t weight_bytes;
    bool retired;            /* replaced or removed: no new requests */
    int refs;                /* requests submitted and not finished */
} adapter_reg;

/* Messages to the owner thread besides requests and cancels. */
typedef struct engine_msg {
    enum { MSG_ADAPTER_ADD, MSG_ADAPTER_REMOVE, MSG_PURGE_TENANT } kind;
    int id;
    lg_adapter_spec *spec;   /* ADD: ownership passes to the adapter cache */
    char tenant[LG_MAX_TENANT + 1]; /* PURGE_TENANT: whose namespaces, ... */
    int64_t before_id;       /* ... and its requests submitted before it (ids below) stop using the cache */
    struct engine_msg *next;
} engine_msg;

struct lg_engine {
    lg_backend *be;
    lg_model *model;
    lg_page_pool *pool;
    lg_adapter_cache *adapters; /* NULL without LoRA */
    lg_prefix_cache *prefix;    /* NULL with prefix sharing off */
    lg_fair *fair;
    lg_model_config cfg;
    int page_tokens, budget, max_seqs, max_context;
    lg_prefix_sharing sharing;

    /* ---- shared (mu) ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* the owner thread sleeps on it */
    request *inbox_head, *inbox_tail;
    int64_t *cancel_ids;
    lg_finish_reason *cancel_reasons;
    int n_cancel, cap_cancel;
    engine_msg *msg_head, *msg_tail;
    bool woken;                 /* something for the owner thread since it last looked */
    int64_t next_id;
    int outstanding;            /* submitted, not finished */
    adapter_reg **reg;          /* [cap_reg] by id */
    int cap_reg, next_adapter_id;
    lg_strmap *reg_by_name;     /* name -> adapter_reg of the current version */
    /* engine thread */
    pthread_t thread;
    bool thread_running, stop;

    /* ---- owner thread ---- */
    request **live;
    int n_live, cap_live;
    request **running;          /* admission order */
    int n_running;
    request **preempted;        /* admission order */
    int n_preempted;
    int64_t next_admit;
    bool last_step_idle;
    bool burst;                 /* decode bursts (engine.c; LG_BURST=0: off, comparisons) */
    /* per-step scratch */
    lg_step_seq *seqs;
    request **sched;
    int *chunk;
    int n_sched;
    float *logits;
    lg_sample_row *rows;
    int32_t *ids;
    lg_logprob_row *lps;        /* [max_seqs]: the device sampler's logprobs (LG_DEVICE_LOGPROBS=0: host) */
    bool dev_logprobs;
    float *row_tmp;             /* [vocab] penalised copy of a logits row */
    uint32_t *cmask;            /* [mask words]: a constrained row's allowed tokens (lazily allocated) */
    int cmask_words;
    /* grammar masks applied by the device sampler (LG_DEVICE_MASKS=0, or no mask_logits: on the host):
     * the step's masked rows, their masks [n_dmask * cmask_words], filled while the forward runs */
    bool dev_mask;
    bool fast_forward;          /* forced tokens appended without a step (fast_forward; LG_FAST_FORWARD=0: off) */
    uint32_t *dmasks;
    request **dmask_req;
    int n_dmask;
    uint32_t *pen_stamp;        /* [vocab] */
    uint32_t pen_gen;
    /* penalties applied by the device sampler (LG_DEVICE_PENALTIES=0: on the
     * host, from downloaded logits): the step's (token, count) pairs */
    bool dev_penalty;
    int32_t *pen_idx;           /* [vocab]: a token's pair in the row being built (pen_stamp marks it) */
    int32_t *pen_pairs;         /* [2 * pen_cap] */
    int n_pen, pen_cap;
    /* prompt logprobs: the model's rows a step (plp_cap), how many the plan has left, their downloaded
     * logits, and the rows handed to a request's on_prompt_logprobs */
    int plp_cap, plp_left;
    float *plogits;             /* [plp_cap * vocab] */
    lg_prompt_logprob *plp_out; /* [plp_cap] */
    lg_engine_stats stats;
    lg_spec_opts spec;          /* speculative decoding, defaults filled in (speculate.c) */
    int spec_k;                 /* this step's most proposed tokens a sequence (lg_spec_plan) */
    lg_model *draft;            /* LG_SPEC_DRAFT: the draft model, its KV pool, its logits row [vocab] */
    lg_page_pool *dpool;
    float *dlogits;

    /* ---- published counters ---- */
    pthread_mutex_t stats_mu;
    lg_engine_stats pub;
    lg_adapter_activity *pub_act; /* [cap_pub_act]: adapters with requests, of the same snapshot as pub */
    int n_pub_act, cap_pub_act;
    lg_adapter_activity *act;   /* owner: the list being built by publish */
    int cap_act;
    float load_ms[LG_ADAPTER_LOAD_SAMPLES]; /* adapter load latencies, ring */
    int64_t n_load_ms;
    int64_t load_seen;          /* owner: samples of the adapter cache already copied */
};

/* r still needs prompt positions scored: [plp_pos, n_prompt - 1) is not empty. */
static inline bool lg_plp_pending(const request *r)
{
    return r->p.prompt_logprobs && r->plp_pos < r->n_prompt - 1;
}

/* scheduler.c */
/* Fills e->sched / e->chunk / e->seqs (e->n_sched) for the next step:
 * running decodes, running prefill chunks, re-admissions, new admissions
 * in fairness order; reserves pages and adapter residency; preempts when
 * the pool runs dry. Requests that cannot be served get cancel = ERROR.
 * Returns the number of tokens scheduled. */
int lg_sched_plan(lg_engine *e, bool *any_prefill);
/* Gives back a request's pool resources (its pages, its prefix-cache pins,
 * its adapter pin) and takes it out of the running / preempted lists and
 * the admission queue. */
void lg_sched_drop(lg_engine *e, request *r);
/* After a step: offers r's newly computed full pages to the prefix cache. */
void lg_sched_insert_prefix(lg_engine *e, request *r);
/* Pages for positions [0, upto) of running request r, from free pages only
 * (no preemption); false when the pool has too few. */
bool lg_sched_reserve_free(lg_engine *e, request *r, int upto);

/* speculate.c */
/* Fills e->spec from the options' (defaults, bounds); with a draft model, creates it and its KV pool of
 * n_pages pages. 0, or -1 with err set. */
int lg_spec_init(lg_engine *e, const lg_spec_opts *o, int n_pages, lg_err *err);
/* Frees the draft model and its pool (lg_engine_free). */
void lg_spec_free(lg_engine *e);
/* Gives back r's draft-model KV pages (preemption, finish). */
void lg_spec_release(lg_engine *e, request *r);
/* The per-step policy: sets e->spec_k, the most tokens a decoding sequence may propose this step, from the
 * number of sequences that decode (0: no speculation this step). */
void lg_spec_plan(lg_engine *e, int n_decode);
/* Proposes up to kmax next tokens for decoding request r at r->tokens[n_tokens, ...); returns how many
 * (r->n_draft is set by the caller). */
int lg_spec_propose(lg_engine *e, request *r, int kmax);
/* The bench's fixed acceptance rate: true when proposed token i is taken whatever the model says. */
bool lg_spec_bench_accepts(lg_engine *e, request *r);
/* After r's verification: `proposed` tokens, `accepted` of them taken; updates its rate and pause and the
 * engine's counters. */
void lg_spec_observe(lg_engine *e, request *r, int proposed, int accepted);
/* The prompt-lookup proposal: the longest suffix of toks[0, n) of length in [nmin, nmax] that also occurs
 * earlier (its latest occurrence), and up to k tokens that followed it there, into out; returns how many
 * (0: no match). */
int lg_ngram_propose(const int32_t *toks, int n, int nmin, int nmax, int k, int32_t *out);

#endif
