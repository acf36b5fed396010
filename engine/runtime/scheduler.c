/*
 * scheduler.c — which sequences run in the next step: iteration-level
 * continuous batching with a token budget per step (Orca / vLLM V1 style).
 *
 * Order of a step's plan, each within the token budget and max_seqs:
 *   1. running requests that decode (one token each), in admission order;
 *   2. running requests still in prefill, one chunk each (chunked prefill);
 *   3. preempted requests, re-admitted in admission order (they were
 *      admitted before anything still waiting in the queue);
 *   4. new admissions from the fairness queue (engine/runtime/fairness.h): the
 *      tenant with the smallest virtual counter first (VTC), or arrival
 *      order (FCFS). A request is admitted when its adapter is resident,
 *      its first chunk's pages can be had without preempting anybody, and
 *      no running request of its prefix-cache namespace is about to compute
 *      pages it could share (then it waits a step or two and reuses them:
 *      "two requests that arrive together share the prefix computation").
 *      A request whose adapter is still loading never blocks the others:
 *      the scheduler moves on to the next request and the next tenant
 *      (work conservation); admission stops only when the batch or the
 *      pool is full.
 * Admission matches the prefix cache first: the longest run of cached full
 * pages of the request's tokens (never its last token, whose logits are
 * needed) becomes the start of its page table and n_computed starts there;
 * at first admission that count is the request's cached_tokens (and, at
 * any admission, the request's prompt is prefilled at least that far:
 * engine_internal.h, Billing).
 *
 * Prompt logprobs (engine_internal.h): a chunk of a request that scores
 * its prompt carries the logits of its unscored prompt positions, and the
 * step has room for e->plp_cap of them, so such a chunk is cut to the rows
 * left (plp_clamp; none left: the request waits for the next step); it
 * matches the prefix cache only below the positions it has scored, and
 * does not wait for another request's pages it could not use.
 *
 * Speculative decoding (speculate.c): before the decodes are planned, the
 * policy sets how many tokens a decoding sequence may propose this step
 * (lg_spec_plan, from the number of sequences that decode); a decode with
 * k proposals gets a chunk of 1 + k tokens, k of them with lp rows (at most
 * half of the step's, the rest kept for prompt logprobs), on pages taken from free ones
 * only (k shrinks to the pages it holds: speculation never preempts).
 *
 * A prompt_only request (max_tokens 0) never asks for the logits of its
 * last token: it finishes when its prompt is computed (engine.c).
 *
 * Preemption (recompute): when a running request cannot get the page its
 * next chunk needs, the most recently admitted running request that is not
 * in this step gives everything back (see engine_internal.h); with no such
 * victim left, the request preempts itself. New admissions never preempt.
 *
 * Adapter residency: a request pins its adapter (adapters/adapter_cache.h)
 * at admission, before its KV pages are taken (so KV allocation can never
 * evict it), and keeps the pin while it holds pages. Waiting requests ask
 * for their adapters early (prefetch: disk -> host on the loader thread).
 */
#include "engine/runtime/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define SCAN_PER_TENANT 32 /* queued requests looked at per tenant per step */
#define PREFETCH_AHEAD 8   /* queued requests per tenant whose adapters are prefetched */

/* ---- lists ------------------------------------------------------------------ */

static void list_del(request **list, int *n, request *r)
{
    for (int i = 0; i < *n; i++)
        if (list[i] == r) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
}

/* Inserts r keeping admission order (capacity: max_live, checked by the caller). */
static void list_insert_by_admit(request **list, int *n, request *r)
{
    int i = *n;
    while (i > 0 && list[i - 1]->admit_seq > r->admit_seq) {
        list[i] = list[i - 1];
        i--;
    }
    list[i] = r;
    (*n)++;
}

static bool is_scheduled(const lg_engine *e, const request *r)
{
    for (int s = 0; s < e->n_sched; s++)
        if (e->sched[s] == r)
            return true;
    return false;
}

/* ---- residency ---------------------------------------------------------------- */

/* Releases pages and pins (the request keeps its tokens). */
static void release_pages(lg_engine *e, request *r)
{
    if (r->n_pages > r->n_chain)
        lg_page_pool_release(e->pool, r->pages + r->n_chain, r->n_pages - r->n_chain);
    if (r->n_chain)
        lg_prefix_cache_release(e->prefix, r->nodes, r->n_chain);
    r->n_pages = r->n_chain = 0;
    r->n_computed = 0;
    lg_spec_release(e, r);
    if (r->lora) {
        lg_adapter_cache_release(e->adapters, r->p.adapter_id);
        r->lora = NULL;
    }
}

void lg_sched_drop(lg_engine *e, request *r)
{
    release_pages(e, r);
    if (r->state == RQ_RUNNING) {
        list_del(e->running, &e->n_running, r);
        lg_fair_running(e->fair, r->ft, -1);
    }
    if (r->preempted)
        list_del(e->preempted, &e->n_preempted, r);
    r->preempted = false;
    r->state = RQ_WAITING;
    lg_fair_remove(e->fair, &r->link);
}

static void preempt(lg_engine *e, request *r)
{
    release_pages(e, r);
    list_del(e->running, &e->n_running, r);
    lg_fair_running(e->fair, r->ft, -1);
    r->state = RQ_WAITING;
    r->preempted = true;
    list_insert_by_admit(e->preempted, &e->n_preempted, r);
    e->stats.preemptions++;
}

/* Pages for positions [0, upto) of r. With can_preempt, later-admitted
 * running requests not in this step give theirs back when the pool is dry. */
static bool reserve(lg_engine *e, request *r, int upto, bool can_preempt)
{
    int need = (upto + e->page_tokens - 1) / e->page_tokens - r->n_pages;
    if (need <= 0)
        return true;
    while (lg_page_pool_n_available(e->pool) < need) {
        if (!can_preempt)
            return false;
        request *victim = NULL;
        for (int i = e->n_running - 1; i >= 0 && !victim; i--) {
            request *c = e->running[i];
            if (c != r && c->admit_seq > r->admit_seq && c->n_pages > 0 && !is_scheduled(e, c))
                victim = c;
        }
        if (!victim)
            return false;
        preempt(e, victim);
    }
    if (lg_page_pool_alloc(e->pool, LG_PAGE_KV, need, r->pages + r->n_pages) != 0)
        return false;
    r->n_pages += need;
    return true;
}

bool lg_sched_reserve_free(lg_engine *e, request *r, int upto) { return reserve(e, r, upto, false); }

/* The chunk [n_computed, n_computed + c) cut so that its unscored prompt positions fit the step's
 * prompt-logit rows left; 0: none fit (the request waits a step). */
static int plp_clamp(const lg_engine *e, const request *r, int c)
{
    if (!lg_plp_pending(r))
        return c;
    int lo = r->n_computed > r->plp_pos ? r->n_computed : r->plp_pos; /* first position to score */
    if (lo >= r->n_prompt - 1)
        return c;
    int allowed = lo - r->n_computed + e->plp_left;
    return c < allowed ? c : allowed;
}

/* Schedules r's chunk [n_computed, n_computed + c), followed by its k
 * proposed tokens (speculative decoding: a decode step with c == 1 whose
 * k + 1 positions all get logits, k of them as lp rows). */
static void schedule(lg_engine *e, request *r, int c, int k, int *budget, bool *any_prefill)
{
    int s = e->n_sched++;
    e->sched[s] = r;
    e->chunk[s] = c + k;
    r->n_draft = k;
    e->seqs[s] = (lg_step_seq){
        .tokens = r->tokens + r->n_computed, .n_tokens = c + k, .pos0 = r->n_computed, .pages = r->pages,
        .n_pages = r->n_pages, .want_logits = r->n_computed + c == r->n_tokens && !r->p.prompt_only,
        .lora = r->lora,
    };
    if (k > 0) {
        e->seqs[s].lp_first = 0;
        e->seqs[s].lp_count = k;
        e->plp_left -= k;
        *budget -= k;
    } else if (lg_plp_pending(r)) { /* its positions [lo, hi) are scored (plp_clamp made them fit) */
        int lo = r->n_computed > r->plp_pos ? r->n_computed : r->plp_pos;
        int hi = r->n_computed + c < r->n_prompt - 1 ? r->n_computed + c : r->n_prompt - 1;
        if (hi > lo) {
            e->seqs[s].lp_first = lo - r->n_computed;
            e->seqs[s].lp_count = hi - lo;
            e->plp_left -= hi - lo;
        }
    }
    if (!(r->state == RQ_RUNNING && r->n_tokens - r->n_computed == 1))
        *any_prefill = true;
    *budget -= c;
}

/* ---- admission ------------------------------------------------------------------- */

typedef enum { ADMIT_OK, ADMIT_NOT_READY, ADMIT_NO_ROOM, ADMIT_FAILED } admit_rc;

/* Pages both r and a have the same tokens for, from the start. */
static int common_pages(const lg_engine *e, const request *a, const request *r)
{
    int n = a->n_tokens < r->n_tokens ? a->n_tokens : r->n_tokens;
    int i = 0;
    while (i < n && a->tokens[i] == r->tokens[i]) i++;
    return i / e->page_tokens;
}

/* True when a running request of r's namespace is computing pages r could
 * reuse beyond the m it matched: r then waits for them. */
static bool should_wait_for_sharing(const lg_engine *e, const request *r, int m)
{
    int limit = (r->n_tokens - 1) / e->page_tokens;
    if (m >= limit)
        return false;
    for (int i = 0; i < e->n_running; i++) {
        const request *a = e->running[i];
        if (!a->use_cache || a->n_computed >= a->n_tokens - 1 || memcmp(a->ns.b, r->ns.b, sizeof r->ns.b) != 0)
            continue;
        int cp = common_pages(e, a, r);
        if (cp > limit)
            cp = limit;
        if (cp > m && a->n_computed < cp * e->page_tokens)
            return true;
    }
    return false;
}

static admit_rc try_admit(lg_engine *e, request *r, int *budget, bool *any_prefill)
{
    int P = e->page_tokens;
    int m = 0;
    const bool plp = lg_plp_pending(r);
    if (r->use_cache && e->prefix) {
        int max_pages = (r->n_tokens - 1) / P;
        if (plp && r->plp_pos / P < max_pages) /* cached pages were never scored: only those it scored */
            max_pages = r->plp_pos / P;
        m = max_pages > 0 ? lg_prefix_cache_match(e->prefix, &r->ns, r->tokens, max_pages, r->pages, r->nodes) : 0;
        r->n_chain = r->n_pages = m;
        r->n_computed = m * P;
        if (!plp && should_wait_for_sharing(e, r, m)) {
            release_pages(e, r);
            return ADMIT_NOT_READY;
        }
    }
    if (r->p.adapter_id) {
        lg_err aerr = {{0}};
        int rc = lg_adapter_cache_acquire(e->adapters, r->p.adapter_id, &r->lora, &aerr);
        if (rc != 0) {
            r->lora = NULL;
            release_pages(e, r);
            if (rc < 0) {
                r->cancel = true;
                r->cancel_reason = LG_FINISH_ERROR;
                snprintf(r->error, sizeof r->error, "%s", aerr.msg);
                return ADMIT_FAILED;
            }
            return ADMIT_NOT_READY;
        }
    }
    int remaining = r->n_tokens - r->n_computed;
    int c = plp_clamp(e, r, remaining < *budget ? remaining : *budget);
    if (c <= 0) { /* no prompt-logit rows left in this step */
        release_pages(e, r);
        return ADMIT_NOT_READY;
    }
    if (!reserve(e, r, r->n_computed + c, false)) {
        release_pages(e, r);
        return ADMIT_NO_ROOM;
    }
    if (!r->admit_seq)
        r->admit_seq = ++e->next_admit;
    /* billing: the prompt tokens it starts on are prefilled (served from the cache) */
    int served = m * P < r->n_prompt ? m * P : r->n_prompt;
    if (served > r->prefilled)
        r->prefilled = served;
    if (!r->counted) {
        r->counted = true;
        r->usage.cached_tokens = m * P;
        e->stats.prompt_tokens += r->n_prompt;
        e->stats.cached_tokens += m * P;
        if (r->use_cache && e->prefix) {
            e->stats.prefix_lookups++;
            if (m > 0)
                e->stats.prefix_hits++;
        }
        lg_fair_charge(e->fair, r->ft, LG_VTC_WP * (double)(r->n_prompt - m * P));
    }
    r->state = RQ_RUNNING;
    list_insert_by_admit(e->running, &e->n_running, r);
    lg_fair_running(e->fair, r->ft, +1);
    schedule(e, r, c, 0, budget, any_prefill);
    return ADMIT_OK;
}

static void prefetch_queued(lg_engine *e)
{
    if (!e->adapters)
        return;
    lg_fair_round_begin(e->fair);
    for (lg_fair_tenant *t; (t = lg_fair_pick(e->fair));) {
        int k = 0;
        for (lg_fair_link *l = lg_fair_first(t); l && k < PREFETCH_AHEAD; l = lg_fair_next(l), k++) {
            request *r = (request *)((char *)l - offsetof(request, link));
            if (r->p.adapter_id)
                lg_adapter_cache_prefetch(e->adapters, r->p.adapter_id);
        }
        lg_fair_skip(t);
    }
}

int lg_sched_plan(lg_engine *e, bool *any_prefill)
{
    int budget = e->budget;
    e->n_sched = 0;
    e->plp_left = e->plp_cap;
    *any_prefill = false;

    /* speculative decoding's policy for this step, from the number of sequences that decode */
    int n_decode = 0;
    for (int i = 0; i < e->n_running && n_decode < e->max_seqs; i++)
        n_decode += e->running[i]->n_tokens - e->running[i]->n_computed == 1;
    lg_spec_plan(e, n_decode);

    /* 1. decodes and 2. prefill chunks of running requests, admission order */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_running && e->n_sched < e->max_seqs && budget > 0; i++) {
            request *r = e->running[i];
            int remaining = r->n_tokens - r->n_computed;
            if ((pass == 0) != (remaining == 1) || is_scheduled(e, r))
                continue;
            int c = plp_clamp(e, r, remaining < budget ? remaining : budget);
            if (c <= 0)
                continue; /* its prompt-logit rows do not fit this step */
            if (!reserve(e, r, r->n_computed + c, true)) {
                /* nothing admitted later is left to give pages back: r yields */
                preempt(e, r);
                i--;
                continue;
            }
            /* a decode may propose tokens (speculate.c) for the budget and half the step's lp rows (the
             * other half stays for prompt logprobs of the prefill chunks planned after), on pages it can
             * have without preempting anybody */
            int k = 0;
            if (pass == 0 && e->spec_k > 0) {
                int kmax = e->spec_k < budget - c ? e->spec_k : budget - c;
                if (kmax > e->plp_left - e->plp_cap / 2)
                    kmax = e->plp_left - e->plp_cap / 2;
                k = lg_spec_propose(e, r, kmax);
                if (k > 0 && !reserve(e, r, r->n_computed + c + k, false)) {
                    int held = r->n_pages * e->page_tokens - r->n_computed - c;
                    k = held < k ? held : k;
                }
            }
            schedule(e, r, c, k, &budget, any_prefill);
        }
    }

    /* 3. re-admissions, then 4. new admissions */
    bool full = false;
    for (int i = 0; i < e->n_preempted && !full && budget > 0 && e->n_sched < e->max_seqs &&
                    e->n_running < e->max_seqs;) {
        request *r = e->preempted[i];
        admit_rc rc = try_admit(e, r, &budget, any_prefill);
        if (rc == ADMIT_OK) {
            list_del(e->preempted, &e->n_preempted, r);
            r->preempted = false;
            continue;
        }
        if (rc == ADMIT_NO_ROOM)
            full = true;
        i++;
    }
    lg_fair_round_begin(e->fair);
    while (!full && budget > 0 && e->n_sched < e->max_seqs && e->n_running < e->max_seqs) {
        lg_fair_tenant *t = lg_fair_pick(e->fair);
        if (!t)
            break;
        bool admitted = false;
        int k = 0;
        for (lg_fair_link *l = lg_fair_first(t), *nl; l && k < SCAN_PER_TENANT; l = nl, k++) {
            nl = lg_fair_next(l);
            request *r = (request *)((char *)l - offsetof(request, link));
            if (r->cancel)
                continue;
            admit_rc rc = try_admit(e, r, &budget, any_prefill);
            if (rc == ADMIT_OK) {
                lg_fair_remove(e->fair, l);
                admitted = true;
                break;
            }
            if (rc == ADMIT_NO_ROOM) {
                full = true;
                break;
            }
        }
        if (!admitted)
            lg_fair_skip(t);
    }
    prefetch_queued(e);
    return e->budget - budget;
}

void lg_sched_insert_prefix(lg_engine *e, request *r)
{
    if (!r->use_cache || !e->prefix)
        return;
    int full = r->n_computed / e->page_tokens;
    while (r->n_chain < full) {
        int k = r->n_chain;
        int32_t pg;
        lg_pc_node *node = lg_prefix_cache_insert(e->prefix, &r->ns, k ? r->nodes[k - 1] : NULL,
                                                  r->tokens + (size_t)k * e->page_tokens, r->pages[k], &pg);
        if (!node) {
            r->use_cache = false; /* out of memory, or the chain above went away: stop offering */
            return;
        }
        if (pg != r->pages[k]) { /* someone computed it first: use theirs, free ours */
            lg_page_pool_release(e->pool, &r->pages[k], 1);
            r->pages[k] = pg;
        }
        r->nodes[k] = node;
        r->n_chain++;
    }
}
