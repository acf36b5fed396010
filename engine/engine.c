/*
 * engine.c — request lifecycle and the continuous-batching scheduler.
 *
 * A request holds all its tokens (prompt, then generated) in `tokens`;
 * n_computed of them have KV in its pages. Each step it is given a chunk
 * tokens[n_computed, n_computed + c): decode is the case c == 1 with
 * n_computed == n_tokens - 1. When a chunk reaches n_tokens the step
 * returns logits for its last token and the request samples the next one.
 * Preemption frees a request's pages and sets n_computed = 0: its whole
 * token list (generated tokens included) is recomputed later, so greedy
 * output is unchanged by preemption.
 *
 * Invariants: running requests hold ceil(n_computed / page_tokens) pages
 * (plus those allocated for the current step); waiting requests hold none.
 */
#include "engine.h"
#include "adapters/adapter_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum { RQ_WAITING, RQ_RUNNING } rq_state;

typedef struct request {
    int64_t id;
    int64_t arrival;         /* submission order */
    rq_state state;
    int32_t *tokens;
    int n_tokens, cap_tokens, n_prompt;
    int n_computed;
    int32_t *pages;
    int n_pages, cap_pages;
    int max_total;           /* n_prompt + max_tokens, capped by context */
    lg_sampler *sampler;
    lg_request_params p;
    int n_generated;
    const lg_lora_w *lora;   /* adapter slot table while pinned, else NULL */
    bool cancel;
    lg_finish_reason cancel_reason;
    char error[256];         /* why it failed, for on_finish */
    struct request *next;    /* inbox / lists */
} request;

struct lg_engine {
    lg_backend *be;
    lg_model *model;
    lg_page_pool *pool;
    lg_adapter_cache *adapters; /* NULL without LoRA */
    lg_model_config cfg;
    int page_tokens, budget, max_seqs, max_context;
    /* inbox (thread-safe) */
    pthread_mutex_t mu;
    request *inbox_head, *inbox_tail;
    int64_t *cancel_ids;
    lg_finish_reason *cancel_reasons;
    int n_cancel, cap_cancel;
    int64_t next_id;
    /* owner-thread state: all live requests, ordered by arrival */
    request **live;
    int n_live, cap_live;
    /* per-step scratch */
    lg_step_seq *seqs;
    request **sched;
    int *chunk;
    float *logits;
    lg_sample_row *rows;     /* [max_seqs] sampling rows of a step */
    int32_t *ids;            /* [max_seqs] device-sampled tokens */
    lg_engine_stats stats;
};

const char *lg_finish_reason_name(lg_finish_reason r)
{
    switch (r) {
    case LG_FINISH_STOP: return "stop";
    case LG_FINISH_LENGTH: return "length";
    case LG_FINISH_CANCELLED: return "cancelled";
    case LG_FINISH_ERROR: return "error";
    }
    return "?";
}

const lg_model_config *lg_engine_config(const lg_engine *e) { return &e->cfg; }

int lg_engine_create(lg_backend *be, const lg_weights *w, const lg_engine_opts *opts, lg_engine **out, lg_err *err)
{
    *out = NULL;
    lg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return lg_fail(err, "out of memory");
    e->be = be;
    pthread_mutex_init(&e->mu, NULL);
    e->next_id = 1;
    if (lg_model_create(be, w, &opts->model, &e->model, err) != 0) {
        lg_engine_free(e);
        return -1;
    }
    const lg_model_opts *mo = lg_model_options(e->model);
    e->cfg = *lg_model_cfg(e->model);
    e->page_tokens = mo->page_tokens;
    e->budget = mo->max_step_tokens;
    e->max_seqs = mo->max_seqs;
    e->max_context = mo->max_context;
    /* one page size for both kinds: a KV block, or the largest adapter tensor */
    size_t pb = lg_model_kv_page_bytes(e->model);
    if (mo->lora_max_rank > 0) {
        size_t ab = lg_adapter_max_tensor_bytes(&e->cfg, mo->lora_max_rank, be->act_dtype);
        if (ab > pb)
            pb = ab;
    }
    pb = (pb + 255) & ~(size_t)255;
    int n_pages = opts->n_pages;
    if (n_pages <= 0) {
        size_t bytes = opts->pool_bytes ? opts->pool_bytes : (size_t)256 << 20;
        n_pages = (int)(bytes / pb);
    }
    /* at least one full-context sequence must fit */
    int min_pages = (e->max_context + e->page_tokens - 1) / e->page_tokens + 1;
    if (n_pages < min_pages)
        n_pages = min_pages;
    if (lg_page_pool_create(be, pb, n_pages, &e->pool, err) != 0) {
        lg_engine_free(e);
        return -1;
    }
    if (mo->lora_max_rank > 0) {
        lg_adapter_cache_opts ao = {.max_rank = mo->lora_max_rank, .host_bytes = opts->adapter_host_bytes};
        if (lg_adapter_cache_create(be, e->pool, &e->cfg, &ao, &e->adapters, err) != 0) {
            lg_engine_free(e);
            return -1;
        }
    }
    e->seqs = calloc((size_t)e->max_seqs, sizeof *e->seqs);
    e->sched = calloc((size_t)e->max_seqs, sizeof *e->sched);
    e->chunk = calloc((size_t)e->max_seqs, sizeof *e->chunk);
    e->logits = malloc((size_t)e->max_seqs * (size_t)e->cfg.vocab_size * sizeof(float));
    e->rows = calloc((size_t)e->max_seqs, sizeof *e->rows);
    e->ids = calloc((size_t)e->max_seqs, sizeof *e->ids);
    if (!e->seqs || !e->sched || !e->chunk || !e->logits || !e->rows || !e->ids) {
        lg_engine_free(e);
        return lg_fail(err, "out of memory");
    }
    e->stats.pages_total = n_pages;
    *out = e;
    return 0;
}

static void request_free(request *r)
{
    if (!r)
        return;
    lg_sampler_free(r->sampler);
    free(r->tokens);
    free(r->pages);
    free(r);
}

/* Gives back a request's pool resources: KV pages and its adapter pin. */
static void drop_residency(lg_engine *e, request *r)
{
    lg_page_pool_release(e->pool, r->pages, r->n_pages);
    r->n_pages = 0;
    if (r->lora) {
        lg_adapter_cache_release(e->adapters, r->p.adapter_id - 1);
        r->lora = NULL;
    }
}

static void finish(lg_engine *e, request *r, lg_finish_reason reason, const char *msg)
{
    drop_residency(e, r);
    lg_usage u = {.prompt_tokens = r->n_prompt, .completion_tokens = r->n_generated, .cached_tokens = 0};
    if (r->p.cb.on_finish)
        r->p.cb.on_finish(r->p.user, r->id, reason, &u, msg);
}

void lg_engine_free(lg_engine *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->n_live; i++) {
        finish(e, e->live[i], LG_FINISH_CANCELLED, "engine shut down");
        request_free(e->live[i]);
    }
    for (request *r = e->inbox_head, *n; r; r = n) {
        n = r->next;
        finish(e, r, LG_FINISH_CANCELLED, "engine shut down");
        request_free(r);
    }
    free(e->live);
    free(e->cancel_ids);
    free(e->cancel_reasons);
    free(e->seqs);
    free(e->sched);
    free(e->chunk);
    free(e->logits);
    lg_adapter_cache_free(e->adapters);
    lg_page_pool_free(e->pool);
    lg_model_free(e->model);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int lg_engine_submit(lg_engine *e, const lg_request_params *p, int64_t *id, lg_err *err)
{
    if (p->n_prompt <= 0)
        return lg_fail(err, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->cfg.vocab_size)
            return lg_fail(err, "prompt token %d at index %d is outside the vocabulary [0, %d)", p->prompt[i], i,
                           e->cfg.vocab_size);
    if (p->n_prompt >= e->max_context)
        return lg_fail(err, "the prompt has %d tokens; this model's context is %d, leaving no room to generate",
                       p->n_prompt, e->max_context);
    if (p->adapter_id != 0 && (!e->adapters || !lg_adapter_cache_name(e->adapters, p->adapter_id - 1)))
        return lg_fail(err, "no adapter with id %d is loaded", p->adapter_id);
    if (p->n_stop_ids < 0 || p->n_stop_ids > LG_MAX_STOP_IDS)
        return lg_fail(err, "too many stop token ids (max %d)", LG_MAX_STOP_IDS);
    const lg_sampling_params *sp = &p->sampling;
    if (!(sp->temperature >= 0) || !(sp->top_p > 0) || sp->min_p < 0 || sp->min_p > 1)
        return lg_fail(err, "invalid sampling parameters (temperature >= 0, 0 < top_p, 0 <= min_p <= 1)");
    request *r = calloc(1, sizeof *r);
    if (!r)
        return lg_fail(err, "out of memory");
    r->p = *p;
    r->p.prompt = NULL;
    r->n_prompt = p->n_prompt;
    int max_total = e->max_context;
    if (p->max_tokens > 0 && p->n_prompt + p->max_tokens < max_total)
        max_total = p->n_prompt + p->max_tokens;
    r->max_total = max_total;
    r->cap_tokens = max_total;
    r->tokens = malloc((size_t)r->cap_tokens * sizeof(int32_t));
    r->cap_pages = (max_total + e->page_tokens - 1) / e->page_tokens;
    r->pages = malloc((size_t)r->cap_pages * sizeof(int32_t));
    r->sampler = lg_sampler_new(e->cfg.vocab_size, sp);
    if (!r->tokens || !r->pages || !r->sampler) {
        request_free(r);
        return lg_fail(err, "out of memory");
    }
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    r->n_tokens = p->n_prompt;
    pthread_mutex_lock(&e->mu);
    r->id = e->next_id++;
    r->arrival = r->id;
    if (e->inbox_tail)
        e->inbox_tail->next = r;
    else
        e->inbox_head = r;
    e->inbox_tail = r;
    pthread_mutex_unlock(&e->mu);
    if (id)
        *id = r->id;
    return 0;
}

void lg_engine_cancel(lg_engine *e, int64_t id, lg_finish_reason reason)
{
    pthread_mutex_lock(&e->mu);
    if (e->n_cancel == e->cap_cancel) {
        int nc = e->cap_cancel ? 2 * e->cap_cancel : 16;
        int64_t *ids = realloc(e->cancel_ids, (size_t)nc * sizeof *ids);
        lg_finish_reason *rs = realloc(e->cancel_reasons, (size_t)nc * sizeof *rs);
        if (ids) e->cancel_ids = ids;
        if (rs) e->cancel_reasons = rs;
        if (ids && rs) e->cap_cancel = nc;
    }
    if (e->n_cancel < e->cap_cancel) {
        e->cancel_ids[e->n_cancel] = id;
        e->cancel_reasons[e->n_cancel++] = reason;
    }
    pthread_mutex_unlock(&e->mu);
}

bool lg_engine_busy(lg_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool b = e->inbox_head != NULL || e->n_live > 0;
    pthread_mutex_unlock(&e->mu);
    return b;
}

void lg_engine_get_stats(const lg_engine *e, lg_engine_stats *s)
{
    *s = e->stats;
    lg_pool_stats ps;
    lg_page_pool_stats(e->pool, &ps);
    s->pages_total = ps.pages_total;
    s->pages_free = ps.pages_free;
    s->pages_kv = ps.pages_kv;
    s->pages_adapter = ps.pages_adapter;
    s->pages_cached = ps.pages_cached;
    if (e->adapters) {
        lg_adapter_cache_stats as;
        lg_adapter_cache_get_stats(e->adapters, &as);
        s->adapter_loads = as.pool_loads;
        s->adapter_evictions = as.pool_evictions;
    }
}

int lg_engine_add_adapter(lg_engine *e, const char *name, const char *dir, int *adapter_id, lg_err *err)
{
    if (!e->adapters)
        return lg_fail(err, "this engine was created without LoRA support (set a maximum LoRA rank)");
    int id;
    if (lg_adapter_cache_register(e->adapters, name, dir, &id, err) != 0)
        return -1;
    *adapter_id = id + 1;
    return 0;
}

int lg_engine_find_adapter(const lg_engine *e, const char *name)
{
    return e->adapters ? lg_adapter_cache_find(e->adapters, name) + 1 : 0;
}

/* Moves the inbox into the live list and applies cancellations. */
static void drain_inbox(lg_engine *e)
{
    pthread_mutex_lock(&e->mu);
    request *head = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    int nc = e->n_cancel;
    int64_t ids[64];
    lg_finish_reason rs[64];
    if (nc > 64) nc = 64;
    memcpy(ids, e->cancel_ids, (size_t)nc * sizeof *ids);
    memcpy(rs, e->cancel_reasons, (size_t)nc * sizeof *rs);
    memmove(e->cancel_ids, e->cancel_ids + nc, (size_t)(e->n_cancel - nc) * sizeof *ids);
    memmove(e->cancel_reasons, e->cancel_reasons + nc, (size_t)(e->n_cancel - nc) * sizeof *rs);
    e->n_cancel -= nc;
    for (request *r = head, *n; r; r = n) {
        n = r->next;
        r->next = NULL;
        if (e->n_live == e->cap_live) {
            int cap = e->cap_live ? 2 * e->cap_live : 64;
            request **l = realloc(e->live, (size_t)cap * sizeof *l);
            if (!l) { /* cannot track it: finish it now */
                pthread_mutex_unlock(&e->mu);
                finish(e, r, LG_FINISH_ERROR, "out of memory");
                request_free(r);
                pthread_mutex_lock(&e->mu);
                continue;
            }
            e->live = l;
            e->cap_live = cap;
        }
        e->live[e->n_live++] = r;
    }
    pthread_mutex_unlock(&e->mu);
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < e->n_live; i++)
            if (e->live[i]->id == ids[c]) {
                e->live[i]->cancel = true;
                e->live[i]->cancel_reason = rs[c];
            }
}

static void remove_live(lg_engine *e, int i)
{
    memmove(e->live + i, e->live + i + 1, (size_t)(e->n_live - i - 1) * sizeof *e->live);
    e->n_live--;
}

static void preempt(lg_engine *e, request *r)
{
    drop_residency(e, r);
    r->n_computed = 0;
    r->state = RQ_WAITING;
    e->stats.preemptions++;
}

/* Ensures r has pages for positions [0, upto). Preempts younger running
 * requests (never r itself or anything already scheduled) when the pool is
 * dry. Returns false if it cannot. */
static bool reserve_pages(lg_engine *e, request *r, int upto, int n_sched)
{
    int need = (upto + e->page_tokens - 1) / e->page_tokens - r->n_pages;
    while (need > 0 && lg_page_pool_n_available(e->pool) < need) {
        request *victim = NULL;
        for (int i = e->n_live - 1; i >= 0; i--) {
            request *c = e->live[i];
            if (c == r || c->state != RQ_RUNNING || c->n_pages == 0 || c->arrival < r->arrival)
                continue;
            bool scheduled = false;
            for (int s = 0; s < n_sched; s++)
                if (e->sched[s] == c) scheduled = true;
            if (!scheduled) {
                victim = c;
                break;
            }
        }
        if (!victim)
            return false;
        preempt(e, victim);
    }
    if (need > 0) {
        if (lg_page_pool_alloc(e->pool, LG_PAGE_KV, need, r->pages + r->n_pages) != 0)
            return false;
        r->n_pages += need;
    }
    return true;
}

static bool is_stop(const lg_engine *e, const request *r, int32_t tok)
{
    if (!r->p.ignore_eos)
        for (int i = 0; i < e->cfg.n_eos; i++)
            if (tok == e->cfg.eos_ids[i]) return true;
    for (int i = 0; i < r->p.n_stop_ids; i++)
        if (tok == r->p.stop_ids[i]) return true;
    return false;
}

static int engine_step(lg_engine *e, lg_err *err);

int lg_engine_step(lg_engine *e, lg_err *err)
{
    double t0 = lg_now();
    int rc = engine_step(e, err);
    e->stats.step_seconds += lg_now() - t0;
    return rc;
}

static int engine_step(lg_engine *e, lg_err *err)
{
    drain_inbox(e);
    if (e->adapters)
        lg_adapter_cache_poll(e->adapters);
    /* finish cancelled requests */
    for (int i = 0; i < e->n_live;) {
        request *r = e->live[i];
        if (r->cancel) {
            finish(e, r, r->cancel_reason, NULL);
            request_free(r);
            remove_live(e, i);
        } else {
            i++;
        }
    }
    if (e->n_live == 0)
        return 0;

    /* 1. decodes of running requests, oldest first; 2. prefill chunks */
    int n = 0, budget = e->budget;
    bool any_prefill = false;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_live && n < e->max_seqs && budget > 0; i++) {
            request *r = e->live[i];
            int remaining = r->n_tokens - r->n_computed;
            bool is_decode = r->state == RQ_RUNNING && remaining == 1;
            if ((pass == 0) != is_decode)
                continue;
            int c = remaining < budget ? remaining : budget;
            if (r->p.adapter_id && !r->lora) { /* adapter residency first: it may evict idle data */
                lg_err aerr;
                int rc = lg_adapter_cache_acquire(e->adapters, r->p.adapter_id - 1, &r->lora, &aerr);
                if (rc < 0) {
                    r->cancel = true;
                    r->cancel_reason = LG_FINISH_ERROR;
                    snprintf(r->error, sizeof r->error, "%s", aerr.msg);
                    continue;
                }
                if (rc > 0)
                    continue; /* pool full of pinned data: try again next step */
            }
            if (!reserve_pages(e, r, r->n_computed + c, n)) {
                if (pass == 0)
                    continue; /* could not keep it: it was not preempted either; retry next step */
                break;        /* no room to admit more prefill */
            }
            r->state = RQ_RUNNING;
            e->sched[n] = r;
            e->chunk[n] = c;
            e->seqs[n] = (lg_step_seq){
                .tokens = r->tokens + r->n_computed, .n_tokens = c, .pos0 = r->n_computed,
                .pages = r->pages, .n_pages = r->n_pages, .want_logits = r->n_computed + c == r->n_tokens,
                .lora = r->lora,
            };
            if (!is_decode)
                any_prefill = true;
            budget -= c;
            n++;
        }
    }
    /* a preemption inside reserve_pages may have hit a request scheduled in
     * pass 0 only if it was younger: those are skipped, so sched is valid. */
    /* requests whose adapter failed to load */
    for (int i = 0; i < e->n_live;) {
        request *r = e->live[i];
        if (r->cancel && r->cancel_reason == LG_FINISH_ERROR) {
            finish(e, r, LG_FINISH_ERROR, r->error[0] ? r->error : "the request's adapter could not be loaded");
            request_free(r);
            remove_live(e, i);
        } else {
            i++;
        }
    }
    if (n == 0)
        return 0;
    /* group sequences by adapter (stable): one SGMV segment per adapter */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && e->sched[j]->p.adapter_id < e->sched[j - 1]->p.adapter_id; j--) {
            request *tr = e->sched[j]; e->sched[j] = e->sched[j - 1]; e->sched[j - 1] = tr;
            int tc = e->chunk[j]; e->chunk[j] = e->chunk[j - 1]; e->chunk[j - 1] = tc;
            lg_step_seq ts = e->seqs[j]; e->seqs[j] = e->seqs[j - 1]; e->seqs[j - 1] = ts;
        }

    /* sampling rows: each request draws its next uniform now, so host and
     * device sampling pick the same token (engine/sampling.h) */
    int n_rows = 0;
    bool want_logits = !lg_model_samples_on_device(e->model);
    for (int s = 0; s < n; s++) {
        if (!e->seqs[s].want_logits)
            continue;
        request *r = e->sched[s];
        const lg_sampling_params *sp = &r->p.sampling;
        e->rows[n_rows++] = (lg_sample_row){.temperature = sp->temperature, .top_k = sp->top_k, .top_p = sp->top_p,
                                            .min_p = sp->min_p, .u = (float)lg_sampler_next_u(r->sampler)};
        if (r->n_generated == 0 && r->p.want_first_logits)
            want_logits = true;
    }
    bool dev_sample = lg_model_samples_on_device(e->model);

    int n_tok = e->budget - budget;
    double t0 = lg_now();
    if (lg_model_step(e->model, e->pool, e->seqs, n, dev_sample ? e->rows : NULL, dev_sample ? e->ids : NULL,
                      want_logits ? e->logits : NULL, err) != 0) {
        for (int s = 0; s < n; s++) e->sched[s]->cancel = true, e->sched[s]->cancel_reason = LG_FINISH_ERROR;
        for (int i = 0; i < e->n_live;) {
            request *r = e->live[i];
            if (r->cancel && r->cancel_reason == LG_FINISH_ERROR) {
                finish(e, r, LG_FINISH_ERROR, err ? err->msg : "backend failure");
                request_free(r);
                remove_live(e, i);
            } else {
                i++;
            }
        }
        return -1;
    }
    double dt = lg_now() - t0;
    e->stats.steps++;
    if (any_prefill) {
        e->stats.prefill_steps++;
        e->stats.prefill_seconds += dt;
        e->stats.prefill_tokens += n_tok;
    } else {
        e->stats.decode_steps++;
        e->stats.decode_seconds += dt;
        e->stats.decode_tokens += n_tok;
    }

    /* sample and advance */
    double ts = lg_now();
    int li = 0;
    for (int s = 0; s < n; s++) {
        request *r = e->sched[s];
        r->n_computed += e->chunk[s];
        if (!e->seqs[s].want_logits)
            continue;
        const float *lg = want_logits ? e->logits + (size_t)li * e->cfg.vocab_size : NULL;
        int32_t tok = dev_sample ? e->ids[li] : lg_sampler_sample_u(r->sampler, lg, (double)e->rows[li].u);
        li++;
        bool first = r->n_generated == 0;
        r->tokens[r->n_tokens++] = tok;
        r->n_generated++;
        if (r->p.cb.on_token)
            r->p.cb.on_token(r->p.user, r->id, tok, first && r->p.want_first_logits ? lg : NULL, e->cfg.vocab_size);
        if (is_stop(e, r, tok)) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_STOP;
        } else if (r->n_tokens >= r->max_total) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_LENGTH;
        }
    }
    e->stats.sample_seconds += lg_now() - ts;
    for (int i = 0; i < e->n_live;) {
        request *r = e->live[i];
        if (r->cancel && (r->cancel_reason == LG_FINISH_STOP || r->cancel_reason == LG_FINISH_LENGTH)) {
            finish(e, r, r->cancel_reason, NULL);
            request_free(r);
            remove_live(e, i);
        } else {
            i++;
        }
    }
    return 0;
}
