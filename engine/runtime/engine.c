/*
 * engine.c — the engine's public API (engine.h): request lifecycle, the
 * adapter-version registry, the inbox that other threads post to, one step
 * (plan -> forward -> sample -> callbacks), and the engine thread.
 *
 * Which sequences run is decided in scheduler.c; the admission order across
 * tenants in fairness.c; cached KV pages in prefix_cache.c; adapter tiers in
 * adapters/adapter_cache.c. See engine_internal.h for the request's state.
 *
 * Sampling adjustments. OpenAI's presence / frequency penalties run on the
 * device sampler where there is one (their (token, count) pairs ride with
 * the step); vLLM's repetition penalty (HF's formula over prompt +
 * generated tokens) and min_tokens (EOS and stop ids at -inf until then)
 * are applied on the host to a copy of the downloaded row, which is then
 * sampled on the host with the request's uniform: the same token either
 * way (penalised()). Prompt logprobs come back as extra logits rows of the
 * prefill chunks (model.h lp_count) and are scored here (score_prompt).
 * Speculative decoding's proposals are verified here too, from the same
 * kind of rows (verify_proposals; speculate.c has the design).
 *
 * Threads and locks. `mu` guards what other threads touch: the inbox of new
 * requests, cancellations, registry messages, the adapter registry (names ->
 * current version, reference counts) and the engine thread's sleep (`cv`).
 * Everything else belongs to the owner thread. Published counters have
 * their own lock (stats_mu) so a metrics reader never waits on a step;
 * with them, after every step, the adapter versions of the live requests
 * and how many of each run and wait (lg_engine_adapter_activity: vLLM's
 * running / waiting LoRA lists), one sort of the live requests.
 */
#include "engine/runtime/engine_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

const char *lg_prefix_sharing_name(lg_prefix_sharing s)
{
    return s == LG_PREFIX_GLOBAL ? "global" : s == LG_PREFIX_OFF ? "off" : "tenant";
}

int lg_prefix_sharing_parse(const char *s, lg_prefix_sharing *out)
{
    if (!strcmp(s, "tenant")) *out = LG_PREFIX_TENANT;
    else if (!strcmp(s, "global")) *out = LG_PREFIX_GLOBAL;
    else if (!strcmp(s, "off")) *out = LG_PREFIX_OFF;
    else return -1;
    return 0;
}

const lg_model_config *lg_engine_config(const lg_engine *e) { return &e->cfg; }
int lg_engine_max_context(const lg_engine *e) { return e->max_context; }

static void wake_locked(lg_engine *e)
{
    e->woken = true;
    pthread_cond_signal(&e->cv);
}

static void wake(void *ctx)
{
    lg_engine *e = ctx;
    pthread_mutex_lock(&e->mu);
    wake_locked(e);
    pthread_mutex_unlock(&e->mu);
}

/* ---- pool sizing ----------------------------------------------------------------- */

/* Bytes for the unified pool when the caller gave neither pages nor bytes. */
static size_t default_pool_bytes(lg_backend *be, double util, lg_err *err, bool *ok)
{
    *ok = true;
    if (be->i.mem_info) {
        size_t freeb = 0, total = 0;
        if (be->i.mem_info(be, &freeb, &total) != 0) {
            *ok = false;
            lg_fail(err, "cannot read the device's free memory");
            return 0;
        }
        if (!(util > 0) || util > 1)
            util = 0.90;
        /* vLLM's rule: the pool gets util x total, less what is in use
         * already (weights, activations, workspaces, other processes),
         * less headroom for buffers that grow later (attention workspace,
         * graphs). */
        double budget = util * (double)total - (double)(total - freeb) - (double)((size_t)512 << 20);
        return budget > 0 ? (size_t)budget : 0;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)8 << 30;
    size_t b = ram / 4, cap = (size_t)2 << 30;
    return b < cap ? b : cap;
}

/* ---- create / free ------------------------------------------------------------------ */

int lg_engine_create(lg_backend *be, const lg_weights *w, const lg_engine_opts *opts, lg_engine **out, lg_err *err)
{
    *out = NULL;
    lg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return lg_fail(err, "out of memory");
    e->be = be;
    pthread_mutex_init(&e->mu, NULL);
    /* timed waits on the monotonic clock: a jump of the wall clock must not
     * stretch the engine thread's polls */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&e->stats_mu, NULL);
    e->next_id = 1;
    e->next_adapter_id = 1;
    e->sharing = opts->prefix_sharing;
    const lg_tuning *tune = lg_backend_tuning(be);
    e->burst = !opts->no_decode_bursts && tune->burst != 0; /* LG_BURST=0: no decode bursts (comparisons) */
    /* tensor parallelism (engine/model/model_tp.c): the model and the pool span the ranks; the rest of the
     * engine sees one model and one page table */
    const int tp = opts->tp_size > 1 ? opts->tp_size : 1;
    lg_backend *const one[1] = {be};
    lg_backend *const *bes = tp > 1 ? opts->tp_backends : one;
    if (tp > 1 && (!bes || bes[0] != be)) {
        lg_engine_free(e);
        return lg_fail(err, "tensor parallelism: tp_backends[0] must be the engine's backend");
    }
    if (lg_model_create_tp(bes, tp, w, &opts->model, &e->model, err) != 0) {
        lg_engine_free(e);
        return -1;
    }
    const lg_model_opts *mo = lg_model_options(e->model);
    e->cfg = *lg_model_cfg(e->model);
    e->page_tokens = mo->page_tokens;
    e->budget = mo->max_step_tokens;
    e->max_seqs = mo->max_seqs;
    e->max_context = mo->max_context;
    e->plp_cap = mo->prompt_logit_rows;
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
        size_t bytes = opts->pool_bytes;
        if (!bytes) {
            bool ok;
            bytes = default_pool_bytes(be, opts->gpu_memory_utilization, err, &ok);
            if (!ok) {
                lg_engine_free(e);
                return -1;
            }
        }
        size_t np = bytes / pb;
        n_pages = np > (size_t)INT32_MAX / 2 ? INT32_MAX / 2 : (int)np;
    }
    /* at least one full-context sequence must fit */
    int min_pages = (e->max_context + e->page_tokens - 1) / e->page_tokens + 1;
    if (n_pages < min_pages)
        n_pages = min_pages;
    if (lg_page_pool_create_ranks(bes, tp, pb, n_pages, &e->pool, err) != 0) {
        lg_err_prefix(err, "the page pool (%d pages of %zu bytes; set a smaller --pool-mb or "
                           "--gpu-memory-utilization)", n_pages, pb);
        lg_engine_free(e);
        return -1;
    }
    if (mo->lora_max_rank > 0) {
        lg_adapter_cache_opts ao = {.max_rank = mo->lora_max_rank, .host_bytes = opts->adapter_host_bytes,
                                    .wake = wake, .wake_ctx = e};
        if (lg_adapter_cache_create(be, e->pool, &e->cfg, &ao, &e->adapters, err) != 0) {
            lg_engine_free(e);
            return -1;
        }
    }
    if (e->sharing != LG_PREFIX_OFF && lg_prefix_cache_create(e->pool, e->page_tokens, &e->prefix, err) != 0) {
        lg_engine_free(e);
        return -1;
    }
    if (lg_spec_init(e, &opts->spec, n_pages, err) != 0) {
        lg_engine_free(e);
        return -1;
    }
    e->fair = lg_fair_new(opts->policy == LG_SCHED_FCFS ? LG_FAIR_FCFS : LG_FAIR_VTC);
    e->reg_by_name = lg_strmap_new();
    int S = e->max_seqs, V = e->cfg.vocab_size;
    e->seqs = calloc((size_t)S, sizeof *e->seqs);
    e->sched = calloc((size_t)S, sizeof *e->sched);
    e->chunk = calloc((size_t)S, sizeof *e->chunk);
    e->logits = malloc((size_t)S * (size_t)V * sizeof(float));
    e->rows = calloc((size_t)S, sizeof *e->rows);
    e->ids = calloc((size_t)S, sizeof *e->ids);
    e->lps = calloc((size_t)S, sizeof *e->lps);
    e->row_tmp = malloc((size_t)V * sizeof(float));
    e->pen_stamp = calloc((size_t)V, sizeof *e->pen_stamp);
    e->pen_idx = malloc((size_t)V * sizeof *e->pen_idx);
    e->plogits = malloc((size_t)e->plp_cap * (size_t)V * sizeof(float));
    e->plp_out = calloc((size_t)e->plp_cap, sizeof *e->plp_out);
    e->dev_penalty = tune->device_penalties != 0; /* LG_DEVICE_PENALTIES=0: penalised rows sampled on the host */
    e->dev_logprobs = tune->device_logprobs != 0; /* LG_DEVICE_LOGPROBS=0: logprobs from downloaded logits */
    e->dev_mask = tune->device_masks != 0 && be->i.mask_logits; /* LG_DEVICE_MASKS=0: grammar masks on the host */
    e->fast_forward = tune->fast_forward != 0; /* LG_FAST_FORWARD=0: a forced token takes its own step */
    e->cmask_words = (V + 31) / 32;
    e->cmask = malloc((size_t)e->cmask_words * sizeof *e->cmask);
    e->dmasks = malloc((size_t)S * (size_t)e->cmask_words * sizeof *e->dmasks);
    e->dmask_req = calloc((size_t)S, sizeof *e->dmask_req);
    e->running = calloc((size_t)S + 1, sizeof *e->running);
    if (!e->fair || !e->reg_by_name || !e->seqs || !e->sched || !e->chunk || !e->logits || !e->rows || !e->ids || !e->lps ||
        !e->row_tmp || !e->pen_stamp || !e->pen_idx || !e->running || !e->plogits || !e->plp_out || !e->cmask ||
        !e->dmasks || !e->dmask_req) {
        lg_engine_free(e);
        return lg_fail(err, "out of memory");
    }
    e->stats.pages_total = n_pages;
    e->stats.page_bytes = pb;
    e->stats.page_tokens = e->page_tokens;
    e->stats.max_step_adapters = e->adapters ? e->max_seqs : 0;
    e->stats.kv_dtype = lg_dtype_name(lg_model_kv_dtype(e->model));
    e->stats.weights_quant = lg_model_cfg(e->model)->quant_method[0] ? lg_model_cfg(e->model)->quant_method : "none";
    e->stats.kv_tokens_capacity = (int64_t)n_pages * e->page_tokens;
    e->pub = e->stats;
    if (be->i.bind_thread) /* callers that step on their own thread step on the engine's device */
        be->i.bind_thread(be);
    *out = e;
    return 0;
}

static void request_free(request *r)
{
    if (!r)
        return;
    lg_sampler_free(r->sampler);
    lg_cmatch_free(r->cm);
    free(r->tokens);
    free(r->dpages);
    free(r->pages);
    free(r->nodes);
    free(r);
}

/* Drops a reference of r's adapter version; the last one of a retired
 * version frees it. Owner thread. */
static void adapter_unref(lg_engine *e, int id)
{
    if (!id)
        return;
    bool gone = false;
    pthread_mutex_lock(&e->mu);
    adapter_reg *a = id < e->cap_reg ? e->reg[id] : NULL;
    if (a && --a->refs == 0 && a->retired) {
        e->reg[id] = NULL;
        free(a->name);
        free(a);
        gone = true;
    }
    pthread_mutex_unlock(&e->mu);
    if (gone && e->adapters)
        lg_adapter_cache_remove(e->adapters, id);
}

/* The one exit of an accepted request: resources back, usage out, freed. */
static void finish(lg_engine *e, request *r, lg_finish_reason reason, const char *msg)
{
    lg_sched_drop(e, r);
    /* billed: the prompt as far as it was prefilled (engine_internal.h, Billing) */
    r->usage.prompt_tokens = r->prefilled;
    r->usage.prompt_len = r->n_prompt;
    if (r->counted && r->prefilled < r->n_prompt) /* VTC charged the whole prompt at admission: refund the rest */
        lg_fair_charge(e->fair, r->ft, -LG_VTC_WP * (double)(r->n_prompt - r->prefilled));
    r->usage.completion_tokens = r->n_generated;
    r->usage.t_finished = lg_now();
    if (r->p.cb.on_finish)
        r->p.cb.on_finish(r->p.user, r->id, reason, &r->usage, msg);
    adapter_unref(e, r->p.adapter_id);
    e->stats.requests_finished++;
    pthread_mutex_lock(&e->mu);
    e->outstanding--;
    pthread_mutex_unlock(&e->mu);
    request_free(r);
}

void lg_engine_free(lg_engine *e)
{
    if (!e)
        return;
    lg_engine_stop(e);
    for (int i = 0; i < e->n_live; i++)
        finish(e, e->live[i], LG_FINISH_CANCELLED, "engine shut down");
    e->n_live = 0;
    for (request *r = e->inbox_head, *n; r; r = n) {
        n = r->next;
        finish(e, r, LG_FINISH_CANCELLED, "engine shut down");
    }
    for (engine_msg *m = e->msg_head, *n; m; m = n) {
        n = m->next;
        lg_adapter_spec_free(m->spec);
        free(m);
    }
    for (int i = 0; i < e->cap_reg; i++)
        if (e->reg[i]) {
            free(e->reg[i]->name);
            free(e->reg[i]);
        }
    free(e->reg);
    lg_strmap_free(e->reg_by_name);
    free(e->live);
    free(e->running);
    free(e->preempted);
    free(e->cancel_ids);
    free(e->cancel_reasons);
    free(e->seqs);
    free(e->sched);
    free(e->chunk);
    free(e->logits);
    free(e->rows);
    free(e->ids);
    free(e->lps);
    free(e->row_tmp);
    free(e->cmask);
    free(e->dmasks);
    free(e->dmask_req);
    free(e->pen_stamp);
    free(e->pen_idx);
    free(e->pen_pairs);
    free(e->plogits);
    free(e->plp_out);
    free(e->act);
    free(e->pub_act);
    lg_prefix_cache_free(e->prefix);
    lg_adapter_cache_free(e->adapters);
    lg_fair_free(e->fair);
    lg_spec_free(e);
    lg_page_pool_free(e->pool);
    lg_model_free(e->model);
    pthread_mutex_destroy(&e->stats_mu);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- adapters ---------------------------------------------------------------------- */

static void post_msg_locked(lg_engine *e, engine_msg *m)
{
    m->next = NULL;
    if (e->msg_tail) e->msg_tail->next = m;
    else e->msg_head = m;
    e->msg_tail = m;
    wake_locked(e);
}

/* Retires a version (under mu); returns a REMOVE message to post when no
 * request uses it any more (the caller posts it), else NULL. */
static void retire_locked(lg_engine *e, adapter_reg *a, engine_msg *rm)
{
    a->retired = true;
    if (a->refs == 0) {
        e->reg[a->id] = NULL;
        rm->kind = MSG_ADAPTER_REMOVE;
        rm->id = a->id;
        post_msg_locked(e, rm);
        free(a->name);
        free(a);
    } else {
        free(rm);
    }
}

static int register_spec(lg_engine *e, lg_adapter_spec *spec, int *adapter_id, lg_err *err)
{
    const char *name = spec->name;
    engine_msg *add = calloc(1, sizeof *add), *rm = calloc(1, sizeof *rm);
    adapter_reg *a = calloc(1, sizeof *a);
    if (!add || !rm || !a || !(a->name = strdup(name))) {
        free(add);
        free(rm);
        if (a) free(a->name);
        free(a);
        lg_adapter_spec_free(spec);
        return lg_fail(err, "out of memory");
    }
    memcpy(a->digest, spec->digest, 65);
    a->max_rank = spec->max_rank;
    a->n_pages = spec->n_pages;
    a->weight_bytes = spec->weight_bytes;
    pthread_mutex_lock(&e->mu);
    int id = e->next_adapter_id;
    if (id >= e->cap_reg) {
        int cap = e->cap_reg ? 2 * e->cap_reg : 64;
        adapter_reg **nr = realloc(e->reg, (size_t)cap * sizeof *nr);
        if (!nr) {
            pthread_mutex_unlock(&e->mu);
            free(add), free(rm), free(a->name), free(a);
            lg_adapter_spec_free(spec);
            return lg_fail(err, "out of memory");
        }
        memset(nr + e->cap_reg, 0, (size_t)(cap - e->cap_reg) * sizeof *nr);
        e->reg = nr;
        e->cap_reg = cap;
    }
    adapter_reg *old = lg_strmap_get(e->reg_by_name, name);
    if (lg_strmap_put(e->reg_by_name, name, a) != 0) {
        pthread_mutex_unlock(&e->mu);
        free(add), free(rm), free(a->name), free(a);
        lg_adapter_spec_free(spec);
        return lg_fail(err, "out of memory");
    }
    e->next_adapter_id++;
    a->id = id;
    e->reg[id] = a;
    add->kind = MSG_ADAPTER_ADD;
    add->id = id;
    add->spec = spec;
    post_msg_locked(e, add);
    if (old)
        retire_locked(e, old, rm);
    else
        free(rm);
    pthread_mutex_unlock(&e->mu);
    *adapter_id = id;
    return 0;
}

static int check_spec_fits(lg_engine *e, lg_adapter_spec *spec, lg_err *err)
{
    int pool_pages = lg_page_pool_n_pages(e->pool);
    if (spec->n_pages > pool_pages) {
        lg_fail(err, "adapter '%s' needs %d pages of the page pool, which has %d", spec->name, spec->n_pages,
                pool_pages);
        lg_adapter_spec_free(spec);
        return -1;
    }
    lg_adapter_cache_stats st;
    lg_adapter_cache_get_stats(e->adapters, &st); /* host_capacity is fixed at creation */
    size_t need = (size_t)spec->n_pages * spec->geom.page_bytes;
    if (need > st.host_capacity) {
        lg_fail(err, "adapter '%s' needs %zu MiB of host memory; the adapter host tier has %zu MiB", spec->name,
                need >> 20, st.host_capacity >> 20);
        lg_adapter_spec_free(spec);
        return -1;
    }
    return 0;
}

static int check_name(const char *name, lg_err *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 255)
        return lg_fail(err, "an adapter name must have 1 to 255 bytes");
    return 0;
}

int lg_engine_add_adapter(lg_engine *e, const char *name, const char *dir, int *adapter_id, lg_err *err)
{
    if (!e->adapters)
        return lg_fail(err, "this engine was created without LoRA support (set a maximum LoRA rank)");
    if (check_name(name, err) != 0)
        return -1;
    lg_adapter_spec *spec;
    if (lg_adapter_spec_from_dir(lg_adapter_cache_geom(e->adapters), name, dir, &spec, err) != 0)
        return -1;
    if (check_spec_fits(e, spec, err) != 0)
        return -1;
    return register_spec(e, spec, adapter_id, err);
}

int lg_engine_add_synthetic_adapter(lg_engine *e, const char *name, const lg_synth_adapter *s, int *adapter_id,
                                    lg_err *err)
{
    if (!e->adapters)
        return lg_fail(err, "this engine was created without LoRA support (set a maximum LoRA rank)");
    if (check_name(name, err) != 0)
        return -1;
    lg_adapter_spec *spec;
    if (lg_adapter_spec_synthetic(lg_adapter_cache_geom(e->adapters), name, s, &spec, err) != 0)
        return -1;
    if (check_spec_fits(e, spec, err) != 0)
        return -1;
    return register_spec(e, spec, adapter_id, err);
}

int lg_engine_remove_adapter(lg_engine *e, const char *name, lg_err *err)
{
    engine_msg *rm = calloc(1, sizeof *rm);
    if (!rm)
        return lg_fail(err, "out of memory");
    pthread_mutex_lock(&e->mu);
    adapter_reg *a = name ? lg_strmap_del(e->reg_by_name, name) : NULL;
    if (a)
        retire_locked(e, a, rm);
    pthread_mutex_unlock(&e->mu);
    if (!a) {
        free(rm);
        return lg_fail(err, "no adapter named '%s'", name ? name : "");
    }
    return 0;
}

int lg_engine_find_adapter(lg_engine *e, const char *name)
{
    pthread_mutex_lock(&e->mu);
    adapter_reg *a = name ? lg_strmap_get(e->reg_by_name, name) : NULL;
    int id = a ? a->id : 0;
    pthread_mutex_unlock(&e->mu);
    return id;
}

int lg_engine_adapter_info(lg_engine *e, int adapter_id, lg_adapter_info *out)
{
    pthread_mutex_lock(&e->mu);
    adapter_reg *a = adapter_id > 0 && adapter_id < e->cap_reg ? e->reg[adapter_id] : NULL;
    if (a) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", a->name);
        memcpy(out->digest, a->digest, 65);
        out->max_rank = a->max_rank;
        out->weight_bytes = a->weight_bytes;
        out->retired = a->retired;
        out->requests = a->refs;
    }
    pthread_mutex_unlock(&e->mu);
    return a ? 0 : -1;
}

static void drain_inbox(lg_engine *e);

void lg_engine_evict_adapter(lg_engine *e, int adapter_id, bool host_too)
{
    if (e->adapters) {
        drain_inbox(e); /* a version registered just now is added first */
        lg_adapter_cache_poll(e->adapters);
        lg_adapter_cache_evict(e->adapters, adapter_id, host_too);
    }
}

int lg_engine_set_tenant_weight(lg_engine *e, const char *tenant, double weight, lg_err *err)
{
    return lg_fair_set_weight(e->fair, tenant, weight, err);
}

const char *lg_tenant_key(int64_t id, char *buf)
{
    snprintf(buf, LG_TENANT_KEY_MAX, "t%lld", (long long)id);
    return buf;
}

int lg_engine_purge_tenant(lg_engine *e, const char *tenant, lg_err *err)
{
    tenant = tenant ? tenant : "";
    if (strlen(tenant) > LG_MAX_TENANT)
        return lg_fail(err, "a tenant name has at most %d bytes", LG_MAX_TENANT);
    engine_msg *m = calloc(1, sizeof *m);
    if (!m)
        return lg_fail(err, "out of memory");
    m->kind = MSG_PURGE_TENANT;
    snprintf(m->tenant, sizeof m->tenant, "%s", tenant);
    pthread_mutex_lock(&e->mu);
    m->before_id = e->next_id; /* ids are issued under mu: the requests submitted before this call */
    post_msg_locked(e, m);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* Owner thread: the tenant's namespaces leave the tree, and its requests
 * submitted before the purge that use them stop using the prefix cache
 * (they keep the pages they pin until they finish, then those go back to
 * the pool). With a shared domain (global) that is its salted namespaces. */
static void purge_tenant(lg_engine *e, const engine_msg *m)
{
    for (int i = 0; i < e->n_live; i++) {
        request *r = e->live[i];
        if (r->id < m->before_id && !strcmp(r->tenant, m->tenant) &&
            (e->sharing == LG_PREFIX_TENANT || r->ns.salted))
            r->use_cache = false;
    }
    const char *tenant = m->tenant;
    if (e->prefix)
        lg_prefix_cache_purge(e->prefix, e->sharing == LG_PREFIX_TENANT ? tenant : NULL, tenant);
}

/* ---- submit / cancel ------------------------------------------------------------------ */

int lg_engine_submit(lg_engine *e, const lg_request_params *p, int64_t *id, lg_err *err)
{
    if (p->n_prompt <= 0 || !p->prompt)
        return lg_fail(err, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->cfg.vocab_size)
            return lg_fail(err, "prompt token %d at index %d is outside the vocabulary [0, %d)", p->prompt[i], i,
                           e->cfg.vocab_size);
    if (p->n_prompt >= e->max_context)
        return lg_fail(err, "the prompt has %d tokens; this model's context is %d, leaving no room to generate",
                       p->n_prompt, e->max_context);
    if (p->n_stop_ids < 0 || p->n_stop_ids > LG_MAX_STOP_IDS)
        return lg_fail(err, "too many stop token ids (max %d)", LG_MAX_STOP_IDS);
    const lg_sampling_params *sp = &p->sampling;
    if (!(sp->temperature >= 0) || !(sp->top_p > 0) || sp->min_p < 0 || sp->min_p > 1)
        return lg_fail(err, "invalid sampling parameters (temperature >= 0, 0 < top_p, 0 <= min_p <= 1)");
    if (!(fabsf(p->presence_penalty) <= 2) || !(fabsf(p->frequency_penalty) <= 2))
        return lg_fail(err, "presence_penalty and frequency_penalty must be in [-2, 2]");
    if (p->logprobs && (p->top_logprobs < 0 || p->top_logprobs > LG_MAX_TOP_LOGPROBS))
        return lg_fail(err, "top_logprobs must be in [0, %d]", LG_MAX_TOP_LOGPROBS);
    if (p->prompt_logprobs && (p->prompt_top_logprobs < 0 || p->prompt_top_logprobs > LG_MAX_TOP_LOGPROBS))
        return lg_fail(err, "prompt top logprobs must be in [0, %d]", LG_MAX_TOP_LOGPROBS);
    if (!(p->repetition_penalty >= 0) || !isfinite(p->repetition_penalty))
        return lg_fail(err, "repetition_penalty must be a finite number > 0 (0: off)");
    if (p->min_tokens < 0)
        return lg_fail(err, "min_tokens must be >= 0");
    const char *tenant = p->tenant ? p->tenant : "";
    const char *salt = p->cache_salt ? p->cache_salt : "";
    if (strlen(tenant) > LG_MAX_TENANT)
        return lg_fail(err, "a tenant name has at most %d bytes", LG_MAX_TENANT);
    if (strlen(salt) > LG_MAX_CACHE_SALT)
        return lg_fail(err, "a cache salt has at most %d bytes", LG_MAX_CACHE_SALT);

    request *r = calloc(1, sizeof *r);
    if (!r)
        return lg_fail(err, "out of memory");
    r->p = *p;
    r->p.prompt = NULL;
    r->p.tenant = NULL;
    r->p.cache_salt = NULL;
    r->n_prompt = p->n_prompt;
    int max_total = e->max_context;
    if (p->prompt_only)
        max_total = p->n_prompt; /* nothing is generated */
    else if (p->max_tokens > 0 && p->n_prompt + p->max_tokens < max_total)
        max_total = p->n_prompt + p->max_tokens;
    r->max_total = max_total;
    r->cap_tokens = max_total;
    r->tokens = malloc((size_t)r->cap_tokens * sizeof(int32_t));
    r->cap_pages = (max_total + e->page_tokens - 1) / e->page_tokens;
    r->pages = malloc((size_t)r->cap_pages * sizeof(int32_t));
    r->nodes = calloc((size_t)r->cap_pages, sizeof *r->nodes);
    if (e->spec.mode == LG_SPEC_DRAFT && !(r->dpages = malloc((size_t)r->cap_pages * sizeof *r->dpages))) {
        request_free(r);
        return lg_fail(err, "out of memory");
    }
    r->sampler = lg_sampler_new(e->cfg.vocab_size, sp);
    r->p.constraint = NULL; /* the matcher holds its own reference */
    if (p->constraint)
        r->cm = lg_cmatch_new(p->constraint);
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
    r->ft = lg_fair_tenant_get(e->fair, tenant);
    if (!r->tokens || !r->pages || !r->nodes || !r->sampler || !r->ft || (p->constraint && !r->cm)) {
        request_free(r);
        return lg_fail(err, "out of memory");
    }
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    r->n_tokens = p->n_prompt;

    pthread_mutex_lock(&e->mu);
    const char *digest = "";
    if (p->adapter_id) {
        adapter_reg *a = p->adapter_id > 0 && p->adapter_id < e->cap_reg ? e->reg[p->adapter_id] : NULL;
        if (!a || a->retired || !e->adapters) {
            pthread_mutex_unlock(&e->mu);
            request_free(r);
            if (a && a->retired)
                return lg_fail(err, "adapter '%s' (version %d) was replaced or removed", a->name, p->adapter_id);
            return lg_fail(err, "no adapter with id %d is registered", p->adapter_id);
        }
        r->adapter_pages = a->n_pages;
        a->refs++;
        digest = a->digest;
    }
    /* a request must be able to run alone: its KV for the whole length plus its adapter */
    int need = r->cap_pages + r->adapter_pages;
    if (need > lg_page_pool_n_pages(e->pool)) {
        if (p->adapter_id)
            e->reg[p->adapter_id]->refs--;
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        return lg_fail(err, "the request needs %d pages (KV for %d tokens plus its adapter); the page pool has %d",
                       need, max_total, lg_page_pool_n_pages(e->pool));
    }
    r->use_cache = e->sharing != LG_PREFIX_OFF;
    if (r->use_cache) {
        lg_pc_ns_make(&r->ns, e->sharing == LG_PREFIX_TENANT ? tenant : "", digest, salt);
        lg_pc_ns_set_user(&r->ns, tenant);
    }
    r->id = e->next_id++;
    r->link.tenant = r->ft;
    r->link.arrival = r->id;
    r->usage.t_queued = lg_now();
    if (e->inbox_tail) e->inbox_tail->next = r;
    else e->inbox_head = r;
    e->inbox_tail = r;
    e->outstanding++;
    /* under the lock: once it is released the owner thread may run, finish
     * and free r; and so the id is stored before any callback can fire */
    if (id)
        *id = r->id;
    wake_locked(e);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void lg_engine_cancel(lg_engine *e, int64_t id, lg_finish_reason reason)
{
    pthread_mutex_lock(&e->mu);
    if (e->n_cancel == e->cap_cancel) {
        int nc = e->cap_cancel ? 2 * e->cap_cancel : 16;
        int64_t *ids = realloc(e->cancel_ids, (size_t)nc * sizeof *ids);
        if (ids) e->cancel_ids = ids;
        lg_finish_reason *rs = realloc(e->cancel_reasons, (size_t)nc * sizeof *rs);
        if (rs) e->cancel_reasons = rs;
        if (ids && rs) e->cap_cancel = nc;
    }
    if (e->n_cancel < e->cap_cancel) {
        e->cancel_ids[e->n_cancel] = id;
        e->cancel_reasons[e->n_cancel++] = reason;
    }
    wake_locked(e);
    pthread_mutex_unlock(&e->mu);
}

bool lg_engine_busy(lg_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool b = e->outstanding > 0;
    pthread_mutex_unlock(&e->mu);
    return b;
}

/* ---- the owner thread's intake ------------------------------------------------------- */

static bool live_reserve(lg_engine *e, int extra)
{
    if (e->n_live + extra <= e->cap_live)
        return true;
    int cap = e->cap_live ? e->cap_live : 64;
    while (cap < e->n_live + extra) cap *= 2;
    request **l = realloc(e->live, (size_t)cap * sizeof *l);
    request **p = realloc(e->preempted, (size_t)cap * sizeof *p);
    if (l) e->live = l;
    if (p) e->preempted = p;
    if (!l || !p)
        return false;
    e->cap_live = cap;
    return true;
}

/* Moves the inbox into the live list and the admission queue; applies
 * cancellations and registry messages. */
static void drain_inbox(lg_engine *e)
{
    pthread_mutex_lock(&e->mu);
    request *head = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    engine_msg *msgs = e->msg_head;
    e->msg_head = e->msg_tail = NULL;
    int nc = e->n_cancel;
    int64_t *ids = NULL;
    lg_finish_reason *rs = NULL;
    if (nc) {
        ids = e->cancel_ids;
        rs = e->cancel_reasons;
        e->cancel_ids = NULL;
        e->cancel_reasons = NULL;
        e->n_cancel = e->cap_cancel = 0;
    }
    e->woken = false;
    pthread_mutex_unlock(&e->mu);

    engine_msg *purges = NULL, **purge_tail = &purges;
    for (engine_msg *m = msgs, *n; m; m = n) {
        n = m->next;
        if (m->kind == MSG_PURGE_TENANT) { /* after the arrivals below, which may be the tenant's */
            m->next = NULL;
            *purge_tail = m;
            purge_tail = &m->next;
            continue;
        }
        if (m->kind == MSG_ADAPTER_ADD) {
            lg_err aerr;
            if (lg_adapter_cache_add(e->adapters, m->id, m->spec, &aerr) != 0)
                lg_log("loragate: adapter version %d could not be added: %s", m->id, aerr.msg);
        } else if (e->adapters) {
            lg_adapter_cache_remove(e->adapters, m->id);
        }
        free(m);
    }
    for (request *r = head, *n; r; r = n) {
        n = r->next;
        r->next = NULL;
        if (!live_reserve(e, 1)) {
            finish(e, r, LG_FINISH_ERROR, "out of memory");
            continue;
        }
        e->live[e->n_live++] = r;
        lg_fair_enqueue(e->fair, &r->link);
    }
    for (engine_msg *m = purges, *n; m; m = n) {
        n = m->next;
        purge_tenant(e, m);
        free(m);
    }
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < e->n_live; i++)
            if (e->live[i]->id == ids[c] && !e->live[i]->cancel) {
                e->live[i]->cancel = true;
                e->live[i]->cancel_reason = rs[c];
            }
    free(ids);
    free(rs);
}

/* Finishes every live request marked for cancellation (or with `reason`
 * when only_reason >= 0). */
static void finish_marked(lg_engine *e, int only_reason, const char *default_msg)
{
    for (int i = 0; i < e->n_live;) {
        request *r = e->live[i];
        if (r->cancel && (only_reason < 0 || (int)r->cancel_reason == only_reason)) {
            e->live[i] = e->live[--e->n_live]; /* order of `live` does not matter */
            finish(e, r, r->cancel_reason,
                   r->cancel_reason == LG_FINISH_ERROR ? (r->error[0] ? r->error : default_msg) : NULL);
        } else {
            i++;
        }
    }
}

/* ---- sampling -------------------------------------------------------------------------- */

/* tok, the request's latest token (n_generated counts it), ends it: an EOS id
 * or a stop id, once min_tokens were generated before it. */
static bool is_stop(const lg_engine *e, const request *r, int32_t tok)
{
    if (r->n_generated <= r->p.min_tokens)
        return false;
    if (!r->p.ignore_eos)
        for (int i = 0; i < e->cfg.n_eos; i++)
            if (tok == e->cfg.eos_ids[i]) return true;
    for (int i = 0; i < r->p.n_stop_ids; i++)
        if (tok == r->p.stop_ids[i]) return true;
    return false;
}

static bool has_penalty(const request *r) { return r->p.presence_penalty != 0 || r->p.frequency_penalty != 0; }

static bool has_rep_penalty(const request *r)
{
    return r->p.repetition_penalty > 0 && r->p.repetition_penalty != 1;
}

/* The next token must not be a stop token yet (min_tokens). */
static bool masks_stops(const request *r) { return r->n_generated < r->p.min_tokens; }

/* Adjustments only the host applies (repetition penalty, min_tokens, a
 * grammar's mask): the row is downloaded and sampled on the host. */
static bool host_only_adjust(const request *r) { return has_rep_penalty(r) || masks_stops(r); }

static bool is_eos(const lg_engine *e, int32_t tok)
{
    for (int i = 0; i < e->cfg.n_eos; i++)
        if (tok == e->cfg.eos_ids[i]) return true;
    return false;
}

/* Ends r with an error at the end of this step (its row is not sampled). */
static void fail_request(request *r, const char *msg)
{
    r->cancel = true;
    r->cancel_reason = LG_FINISH_ERROR;
    snprintf(r->error, sizeof r->error, "%s", msg);
}

/* A constrained request's allowed tokens for this step, into e->cmask:
 * the grammar's mask, then, before min_tokens, without the stop tokens
 * unless that would leave none (the grammar is complete and allows only
 * EOS: then it ends). Returns how many are allowed (>= 1), or -1 with r
 * failed (a runtime limit of the grammar, or out of memory). */
static int constrain_row(lg_engine *e, request *r, uint32_t *mask)
{
    const int V = e->cfg.vocab_size, W = e->cmask_words;
    const double t0 = lg_now();
    memset(mask, 0, (size_t)W * sizeof *mask);
    lg_err cerr = {{0}};
    int n = lg_cmatch_mask(r->cm, mask, W, &cerr);
    e->stats.mask_seconds += lg_now() - t0;
    char msg[300];
    if (n < 0) {
        snprintf(msg, sizeof msg, "structured output: %s", cerr.msg);
        fail_request(r, msg);
        return -1;
    }
    if (n == 0) {
        fail_request(r, "structured output: the grammar allows no token here");
        return -1;
    }
    if (masks_stops(r)) {
        int32_t stops[LG_MAX_STOP_IDS + 64];
        int ns = 0;
        for (int i = 0; i < e->cfg.n_eos && ns < 64; i++)
            stops[ns++] = e->cfg.eos_ids[i];
        for (int i = 0; i < r->p.n_stop_ids; i++)
            stops[ns++] = r->p.stop_ids[i];
        int taken = 0;
        for (int i = 0; i < ns; i++)
            if (stops[i] >= 0 && stops[i] < V && (mask[stops[i] / 32] >> (stops[i] % 32) & 1u))
                taken++;
        if (taken > 0 && taken < n) {
            for (int i = 0; i < ns; i++)
                if (stops[i] >= 0 && stops[i] < V)
                    mask[stops[i] / 32] &= ~(1u << (stops[i] % 32));
            n -= taken;
        }
    }
    return n;
}

/* A constrained row whose grammar mask the device applies before sampling
 * it (lg_step_masks): computed on the host while the step's forward runs.
 * Rows that are sampled on the host anyway (host-only adjustments),
 * report logprobs (of the raw row, which the device masks in place) or
 * want their first logits are masked on the host instead. */
static bool dev_masked(const lg_engine *e, const request *r, bool dev_sample)
{
    return r->cm && dev_sample && e->dev_mask && !r->p.logprobs && !host_only_adjust(r) &&
           !(r->n_generated == 0 && r->p.want_first_logits);
}

/* The device sampler reports the request's logprobs (lg_logprob_row): it
 * asks for them and its row is not penalised (the device penalises rows in
 * place, and logprobs are of the raw row). */
static bool device_logprobs(const lg_engine *e, const request *r, bool dev_sample)
{
    return dev_sample && e->dev_logprobs && r->p.logprobs && !has_penalty(r);
}

/* The request reads this step's raw logits row on the host (logprobs the
 * device does not report, first logits). */
static bool wants_raw_row(const lg_engine *e, const request *r, bool dev_sample)
{
    return (r->p.logprobs && !device_logprobs(e, r, dev_sample)) || (r->n_generated == 0 && r->p.want_first_logits);
}

/* Its penalties are applied on the host, to a copy of its downloaded row:
 * without device sampling, with LG_DEVICE_PENALTIES=0, or when the raw row
 * is wanted too (the device sampler penalises rows in place). */
static bool host_penalised(const lg_engine *e, const request *r, bool dev_sample)
{
    return host_only_adjust(r) || (r->cm && !dev_masked(e, r, dev_sample)) ||
           (has_penalty(r) && !(dev_sample && e->dev_penalty && !wants_raw_row(e, r, dev_sample)));
}

static bool needs_host_row(const lg_engine *e, const request *r, bool dev_sample)
{
    return host_penalised(e, r, dev_sample) || wants_raw_row(e, r, dev_sample);
}

/* Structured output's forced tokens. While the grammar allows exactly one
 * token next, that token is the output whatever the model says: it is
 * appended at once (streamed, counted as generated, the matcher advanced)
 * without a step of its own, and the next step computes all the appended
 * tokens in one chunk (the scheduler's prefill chunk of a running request)
 * and samples after them. Exact: each appended token had probability 1.
 * Not for requests that report logprobs (they need each token's row).
 * LG_FAST_FORWARD=0 leaves every forced token to its own step. */
static void fast_forward(lg_engine *e, request *r)
{
    if (r->p.logprobs)
        return;
    while (!r->cancel && r->n_tokens < r->max_total && !lg_cmatch_is_done(r->cm)) {
        if (constrain_row(e, r, e->cmask) != 1)
            return;
        const int32_t tok = lg_cmask_single(e->cmask, e->cmask_words);
        lg_err cerr = {{0}};
        if (tok < 0 || is_eos(e, tok) || lg_cmatch_advance(r->cm, tok, &cerr) != 0)
            return; /* EOS (or a refusal) is left to the next step's sampling row */
        lg_token_out o = {.token = tok, .index = r->n_generated, .n_vocab = e->cfg.vocab_size};
        r->tokens[r->n_tokens++] = tok;
        r->n_generated++;
        e->stats.fast_forward_tokens++;
        const bool stop = is_stop(e, r, tok);
        o.stop_token = stop;
        lg_fair_charge(e->fair, r->ft, LG_VTC_WQ);
        if (r->p.cb.on_token)
            r->p.cb.on_token(r->p.user, r->id, &o);
        if (r->cancel)
            return;
        if (stop || lg_cmatch_is_done(r->cm)) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_STOP;
        } else if (r->n_tokens >= r->max_total) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_LENGTH;
        }
    }
}

/* A new generation of pen_stamp: no token is marked as seen. */
static void pen_new_gen(lg_engine *e)
{
    if (++e->pen_gen == 0) {
        memset(e->pen_stamp, 0, (size_t)e->cfg.vocab_size * sizeof *e->pen_stamp);
        e->pen_gen = 1;
    }
}

/* Appends r's (token, count) pairs over its generated tokens, in order of
 * first occurrence (lg_sample_row), to e->pen_pairs; sets row's pen_off /
 * pen_n. 0, or -1 out of memory. */
static int add_penalty_pairs(lg_engine *e, const request *r, lg_sample_row *row)
{
    int need = e->n_pen + (r->n_tokens - r->n_prompt);
    if (need > e->pen_cap) {
        int cap = e->pen_cap ? e->pen_cap : 1024;
        while (cap < need) cap *= 2;
        int32_t *p = realloc(e->pen_pairs, (size_t)cap * 2 * sizeof *p);
        if (!p)
            return -1;
        e->pen_pairs = p;
        e->pen_cap = cap;
    }
    pen_new_gen(e);
    row->pen_off = e->n_pen;
    for (int i = r->n_prompt; i < r->n_tokens; i++) {
        int32_t t = r->tokens[i];
        if (e->pen_stamp[t] != e->pen_gen) {
            e->pen_stamp[t] = e->pen_gen;
            e->pen_idx[t] = e->n_pen;
            e->pen_pairs[2 * e->n_pen] = t;
            e->pen_pairs[2 * e->n_pen + 1] = 1;
            e->n_pen++;
        } else {
            e->pen_pairs[2 * e->pen_idx[t] + 1]++;
        }
    }
    row->pen_n = e->n_pen - row->pen_off;
    row->presence = r->p.presence_penalty;
    row->frequency = r->p.frequency_penalty;
    return 0;
}

/* The device sampler repeats these subtractions (kernels/sample.cu
 * penalize_kernel) and must get the same floats: each one rounded to float.
 * SSE2 (x86-64) and AArch64 float math does that; FLT_EVAL_METHOD alone is
 * not the test (the device machine's GCC with -march=native reported a
 * value other than 0 while its float arithmetic is SSE, evaluated in
 * float). */
#if !(defined(__SSE2_MATH__) || defined(__aarch64__) || (defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0))
#error "penalised() needs float arithmetic evaluated in float (SSE2 or AArch64 math, or FLT_EVAL_METHOD 0)"
#endif

/* The row r samples from, as vLLM's sampler makes it: a copy of the raw
 * row with the repetition penalty over every distinct token of the prompt
 * and the output (HF's RepetitionPenaltyLogitsProcessor: l > 0 ? l / p :
 * l * p), then OpenAI's frequency and presence penalties over the generated
 * tokens, then, before min_tokens, the stop tokens at -inf. The raw row
 * when none applies. */
static const float *penalised(lg_engine *e, const request *r, const float *lg, const uint32_t *cmask)
{
    const bool rep = has_rep_penalty(r), pen = has_penalty(r), mask = masks_stops(r) && !cmask;
    if (!rep && !pen && !mask && !cmask)
        return lg;
    memcpy(e->row_tmp, lg, (size_t)e->cfg.vocab_size * sizeof(float));
    if (rep) {
        const float rp = r->p.repetition_penalty;
        pen_new_gen(e);
        for (int i = 0; i < r->n_tokens; i++) {
            int32_t t = r->tokens[i];
            if (e->pen_stamp[t] == e->pen_gen)
                continue;
            e->pen_stamp[t] = e->pen_gen;
            float l = e->row_tmp[t];
            e->row_tmp[t] = l > 0 ? l / rp : l * rp;
        }
    }
    if (pen) {
        pen_new_gen(e);
        for (int i = r->n_prompt; i < r->n_tokens; i++) {
            int32_t t = r->tokens[i];
            e->row_tmp[t] -= r->p.frequency_penalty;
            if (e->pen_stamp[t] != e->pen_gen) {
                e->pen_stamp[t] = e->pen_gen;
                e->row_tmp[t] -= r->p.presence_penalty;
            }
        }
    }
    if (mask) {
        if (!r->p.ignore_eos)
            for (int i = 0; i < e->cfg.n_eos; i++)
                if (e->cfg.eos_ids[i] >= 0 && e->cfg.eos_ids[i] < e->cfg.vocab_size)
                    e->row_tmp[e->cfg.eos_ids[i]] = -INFINITY;
        for (int i = 0; i < r->p.n_stop_ids; i++)
            if (r->p.stop_ids[i] >= 0 && r->p.stop_ids[i] < e->cfg.vocab_size)
                e->row_tmp[r->p.stop_ids[i]] = -INFINITY;
    }
    if (cmask) { /* the grammar's mask (constrain_row: min_tokens' stops already out of it) */
        const int V = e->cfg.vocab_size;
        for (int w = 0; w * 32 < V; w++) {
            const uint32_t bits = cmask[w];
            if (bits == 0xffffffffu)
                continue;
            const int hi = V - w * 32 < 32 ? V - w * 32 : 32;
            for (int b = 0; b < hi; b++)
                if (!(bits >> b & 1u))
                    e->row_tmp[w * 32 + b] = -INFINITY;
        }
    }
    return e->row_tmp;
}

/* The prompt-logit rows of r's chunk (seqs' lp_first / lp_count, rows[0 ..
 * count) of the step's downloaded prompt logits), scored and handed to
 * on_prompt_logprobs: per position q the log-softmax at prompt token q + 1,
 * its rank and the best alternatives (lg_logprobs, the logprobs' one
 * definition). */
static void score_prompt(lg_engine *e, request *r, const lg_step_seq *q, const float *rows)
{
    const int V = e->cfg.vocab_size;
    int n = 0;
    for (int j = 0; j < q->lp_count; j++) {
        const int pos = q->pos0 + q->lp_first + j;
        if (pos < r->plp_pos || pos >= r->n_prompt - 1)
            continue; /* scored already (the plan never asks for these) */
        const float *lg = rows + (size_t)j * V;
        const int32_t tok = r->tokens[pos + 1];
        lg_logprob_row lr;
        lg_logprobs(lg, V, tok, r->p.prompt_top_logprobs, &lr);
        int rank = 1;
        const float lt = lg[tok];
        for (int i = 0; i < V; i++)
            rank += lg[i] > lt;
        lg_prompt_logprob *o = &e->plp_out[n++];
        o->index = pos + 1;
        o->token = tok;
        o->logprob = lr.logprob;
        o->rank = rank;
        o->n_top = lr.n_top;
        memcpy(o->top_ids, lr.top_ids, (size_t)lr.n_top * sizeof *o->top_ids);
        memcpy(o->top_logprobs, lr.top_logprobs, (size_t)lr.n_top * sizeof *o->top_logprobs);
        r->plp_pos = pos + 1;
    }
    if (n > 0 && r->p.cb.on_prompt_logprobs)
        r->p.cb.on_prompt_logprobs(r->p.user, r->id, e->plp_out, n);
}

_Static_assert(LG_LOGPROB_TOP == LG_MAX_TOP_LOGPROBS, "the device reports as many alternatives as a request may ask");

/* ---- the step ---------------------------------------------------------------------------- */

static int cmp_activity(const void *a, const void *b)
{
    const lg_adapter_activity *x = a, *y = b;
    return (x->adapter_id > y->adapter_id) - (x->adapter_id < y->adapter_id);
}

/* The live requests' adapters, one entry per (version, state) folded into
 * one per version, ascending ids, into e->act; -1 when out of memory.
 * O(n log n) in the live requests, once per published step. */
static int build_activity(lg_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_live; i++)
        n += e->live[i]->p.adapter_id > 0;
    if (n > e->cap_act) {
        lg_adapter_activity *a = realloc(e->act, (size_t)n * sizeof *a);
        if (!a)
            return -1;
        e->act = a;
        e->cap_act = n;
    }
    n = 0;
    for (int i = 0; i < e->n_live; i++) {
        const request *r = e->live[i];
        if (r->p.adapter_id > 0)
            e->act[n++] = (lg_adapter_activity){.adapter_id = r->p.adapter_id, .running = r->state == RQ_RUNNING,
                                                .waiting = r->state != RQ_RUNNING};
    }
    qsort(e->act, (size_t)n, sizeof *e->act, cmp_activity);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && e->act[k - 1].adapter_id == e->act[i].adapter_id) {
            e->act[k - 1].running += e->act[i].running;
            e->act[k - 1].waiting += e->act[i].waiting;
        } else {
            e->act[k++] = e->act[i];
        }
    }
    return k;
}

static void publish(lg_engine *e)
{
    lg_engine_stats s = e->stats;
    lg_pool_stats ps;
    lg_page_pool_stats(e->pool, &ps);
    s.pages_total = ps.pages_total;
    s.pages_free = ps.pages_free;
    s.pages_kv = ps.pages_kv;
    s.pages_adapter = ps.pages_adapter;
    s.pages_cached = ps.pages_cached;
    s.running = e->n_running;
    s.queued = lg_fair_queued(e->fair) + e->n_preempted;
    s.max_step_adapters = e->adapters ? e->max_seqs : 0;
    int n_act = e->adapters ? build_activity(e) : 0; /* -1 (out of memory): the last list stays */
    if (e->prefix) {
        lg_prefix_cache_stats pcs;
        lg_prefix_cache_get_stats(e->prefix, &pcs);
        s.pages_prefix = pcs.nodes;
    }
    if (e->adapters) {
        lg_adapter_cache_stats as;
        lg_adapter_cache_get_stats(e->adapters, &as);
        s.adapter_loads = as.pool_loads;
        s.adapter_evictions = as.pool_evictions;
        s.adapter_host_loads = as.host_loads;
        s.adapter_load_seconds = as.load_seconds;
        s.adapters_registered = as.registered;
        s.adapters_resident = as.resident;
    }
    int kv_private = s.pages_kv - s.pages_prefix;
    if (kv_private > e->stats.max_pages_kv) e->stats.max_pages_kv = kv_private;
    if (s.pages_adapter > e->stats.max_pages_adapter) e->stats.max_pages_adapter = s.pages_adapter;
    if (s.pages_prefix > e->stats.max_pages_prefix) e->stats.max_pages_prefix = s.pages_prefix;
    s.max_pages_kv = e->stats.max_pages_kv;
    s.max_pages_adapter = e->stats.max_pages_adapter;
    s.max_pages_prefix = e->stats.max_pages_prefix;
    /* new adapter load latencies, copied so other threads can read them */
    float fresh[64];
    int n_fresh = 0;
    if (e->adapters) {
        lg_adapter_cache_stats as;
        lg_adapter_cache_get_stats(e->adapters, &as);
        int64_t k = as.load_samples - e->load_seen;
        if (k > 0) {
            if (k > 64)
                k = 64; /* more than 64 loads in one step: keep the latest */
            n_fresh = lg_adapter_cache_load_times(e->adapters, fresh, (int)k);
            e->load_seen = as.load_samples;
        }
    }
    pthread_mutex_lock(&e->stats_mu);
    e->pub = s;
    if (n_act > e->cap_pub_act) {
        lg_adapter_activity *a = realloc(e->pub_act, (size_t)n_act * sizeof *a);
        if (a) {
            e->pub_act = a;
            e->cap_pub_act = n_act;
        } else {
            n_act = -1;
        }
    }
    if (n_act >= 0) {
        if (n_act > 0)
            memcpy(e->pub_act, e->act, (size_t)n_act * sizeof *e->act);
        e->n_pub_act = n_act;
    }
    for (int i = 0; i < n_fresh; i++) e->load_ms[e->n_load_ms++ % LG_ADAPTER_LOAD_SAMPLES] = fresh[i];
    pthread_mutex_unlock(&e->stats_mu);
}

/* The step's sampling row of r: its sampling parameters and next uniform;
 * true when the device reports its logprobs. Penalty pairs are added by
 * the caller. */
static bool fill_row(lg_engine *e, request *r, lg_sample_row *row, bool dev_sample)
{
    const lg_sampling_params *sp = &r->p.sampling;
    *row = (lg_sample_row){.temperature = sp->temperature, .top_k = sp->top_k, .top_p = sp->top_p,
                           .min_p = sp->min_p, .u = (float)lg_sampler_next_u(r->sampler)};
    if (dev_masked(e, r, dev_sample)) { /* its mask: the step's next one (fill_masks) */
        row->masked = 1;
        row->mask_off = e->n_dmask * e->cmask_words;
        e->dmask_req[e->n_dmask++] = r;
    }
    if (!device_logprobs(e, r, dev_sample))
        return false;
    row->logprobs = 1;
    row->top_logprobs = r->p.top_logprobs;
    return true;
}

/* A failed step: every request in it ends with the error. */
static void fail_step(lg_engine *e, int n, const lg_err *err)
{
    for (int s = 0; s < n; s++) {
        e->sched[s]->cancel = true;
        e->sched[s]->cancel_reason = LG_FINISH_ERROR;
        snprintf(e->sched[s]->error, sizeof e->sched[s]->error, "%s", err && err->msg[0] ? err->msg : "backend failure");
    }
    finish_marked(e, LG_FINISH_ERROR, "backend failure");
}

/* The token r takes from a row sampled on the host: with mask, the
 * grammar's (a mask of one token is taken without sampling), then the request's
 * adjustments, then the sampler with uniform u. 0, or -1 with r failed (its
 * grammar). */
static int host_pick(lg_engine *e, request *r, const float *lg, double u, bool mask, int32_t *tok)
{
    const uint32_t *cmask = NULL;
    if (mask) {
        const int allowed = constrain_row(e, r, e->cmask);
        if (allowed < 0)
            return -1;
        cmask = e->cmask;
        e->stats.constrained_rows++;
        e->stats.forced_tokens += allowed == 1;
        if (allowed == 1) {
            *tok = lg_cmask_single(cmask, e->cmask_words); /* the only token the grammar allows: no sampling */
            return 0;
        }
    }
    *tok = lg_sampler_sample_u(r->sampler, penalised(e, r, lg, cmask), u);
    return 0;
}

/* r takes token tok, sampled from raw row lg (NULL: on the device, whose
 * logprobs are dev_lp, or none): its grammar advances, the token is
 * streamed with its logprobs and the stop conditions are checked. false
 * when r ends (no token may follow in this step). */
static bool take_token(lg_engine *e, request *r, int32_t tok, const float *lg, const lg_logprob_row *dev_lp)
{
    const int V = e->cfg.vocab_size;
    if (r->cm) {
        lg_err cerr = {{0}};
        if (lg_cmatch_advance(r->cm, tok, &cerr) != 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "structured output: token %d refused: %s", tok, cerr.msg);
            fail_request(r, msg);
            return false;
        }
    }
    lg_token_out o = {.token = tok, .index = r->n_generated, .n_vocab = V};
    lg_logprob_row hl;
    const lg_logprob_row *d = dev_lp; /* the row's logprobs: the device's, else from its downloaded logits */
    if (!d && r->p.logprobs && lg) {
        lg_logprobs(lg, V, tok, r->p.top_logprobs, &hl);
        d = &hl;
    }
    if (d) {
        o.logprob = d->logprob;
        o.n_top = d->n_top;
        memcpy(o.top_ids, d->top_ids, (size_t)d->n_top * sizeof *o.top_ids);
        memcpy(o.top_logprobs, d->top_logprobs, (size_t)d->n_top * sizeof *o.top_logprobs);
    }
    if (r->n_generated == 0) {
        r->usage.t_first_token = lg_now();
        if (r->p.want_first_logits)
            o.logits = lg;
    }
    r->tokens[r->n_tokens++] = tok;
    r->n_generated++;
    /* a grammar ends the request once it is complete and nothing can extend it (EOS accepted, or a
     * complete output no token continues) */
    const bool cdone = r->cm && lg_cmatch_is_done(r->cm);
    const bool stop = is_stop(e, r, tok) || (cdone && is_eos(e, tok));
    o.stop_token = stop;
    lg_fair_charge(e->fair, r->ft, LG_VTC_WQ);
    if (r->p.cb.on_token)
        r->p.cb.on_token(r->p.user, r->id, &o);
    if (!r->cancel) {
        if (stop || cdone) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_STOP;
        } else if (r->n_tokens >= r->max_total) {
            r->cancel = true;
            r->cancel_reason = LG_FINISH_LENGTH;
        }
    }
    return !r->cancel;
}

/* A cancel of request id was posted (by a callback of this step, such as
 * a stop string matched in on_token): the next step applies it. */
static bool cancel_posted(lg_engine *e, int64_t id)
{
    bool found = false;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_cancel && !found; i++)
        found = e->cancel_ids[i] == id;
    pthread_mutex_unlock(&e->mu);
    return found;
}

/* Speculative decoding's verification (speculate.c has the design): r's
 * chunk was [last token, d_1 .. d_k] (its proposals, stored past its
 * tokens); rows[i] (i < k) are the logits after d_i's predecessor, `last`
 * those after d_k. Position by position, the row is processed and sampled
 * as a decode step's (host_pick, with the request's next uniform) and the
 * token taken; d_i is accepted when that token is d_i, and the first token
 * that differs, or the one after d_k, ends the step, as does a token after
 * which the request ends or its on_token cancelled it (a stop string): no
 * token follows one that ends the request, as without speculation.
 * n_computed covers the accepted positions only (the rest of the chunk's
 * KV is overwritten later). */
static void verify_proposals(lg_engine *e, request *r, const float *last, const float *rows)
{
    const int k = r->n_draft, V = e->cfg.vocab_size, nc0 = r->n_computed;
    int32_t d[16];
    memcpy(d, r->tokens + r->n_tokens, (size_t)k * sizeof *d);
    r->n_draft = 0;
    int acc = 0;
    for (int i = 0; i <= k; i++) {
        const float *lg = i < k ? rows + (size_t)i * V : last;
        r->n_computed = nc0 + 1 + i; /* the last token and d_1 .. d_i, accepted */
        int32_t tok;
        if (host_pick(e, r, lg, lg_sampler_next_u(r->sampler), r->cm != NULL, &tok) < 0)
            break;
        if (i < k && lg_spec_bench_accepts(e, r))
            tok = d[i]; /* the bench's fixed acceptance rate (lg_spec_opts.bench_accept) */
        const bool accepted = i < k && tok == d[i];
        acc += accepted;
        if (!take_token(e, r, tok, lg, NULL) || !accepted || cancel_posted(e, r->id))
            break;
    }
    if (r->n_computed > r->n_tokens - 1 && r->n_tokens > 0)
        r->n_computed = r->n_tokens - 1; /* it stopped on an accepted token: that token's KV is not needed */
    /* billing: a prompt whose last token alone was left to compute (the rest from the prefix cache) ends in
     * a verification too */
    if (r->prefilled < r->n_prompt)
        r->prefilled = r->n_computed < r->n_prompt ? r->n_computed : r->n_prompt;
    lg_sched_insert_prefix(e, r);
    lg_spec_observe(e, r, k, acc);
}

/* After a step's results are read: each row's request advances, offers its
 * computed pages to the prefix cache, takes its token (the device's, or
 * sampled here from the downloaded logits), streams it and checks its stop
 * conditions. */
static int take_results(lg_engine *e, int n, bool dev_sample, bool want_logits)
{
    int dropped = 0;
    /* advance, cache computed pages, score prompt rows, sample, call back */
    double ts = lg_now();
    int li = 0, pli = 0, V = e->cfg.vocab_size;
    for (int s = 0; s < n; s++) {
        request *r = e->sched[s];
        const int plo = pli;
        pli += e->seqs[s].lp_count;
        if (r->cancel) { /* finished or cancelled after its row was enqueued (a burst): the row is dropped */
            li += e->seqs[s].want_logits;
            dropped += e->chunk[s];
            r->n_draft = 0;
            continue;
        }
        if (r->n_draft > 0) { /* a verification: its rows are [plo, plo + n_draft) and its logits row */
            const int ri = li++;
            verify_proposals(e, r, e->logits + (size_t)ri * V, e->plogits + (size_t)plo * V);
            continue;
        }
        r->n_computed += e->chunk[s];
        if (r->prefilled < r->n_prompt) /* billing: once, however often preemption made it recompute */
            r->prefilled = r->n_computed < r->n_prompt ? r->n_computed : r->n_prompt;
        lg_sched_insert_prefix(e, r);
        if (e->seqs[s].lp_count > 0)
            score_prompt(e, r, &e->seqs[s], e->plogits + (size_t)plo * V);
        if (r->p.prompt_only && r->n_computed >= r->n_prompt && !r->cancel) {
            r->cancel = true; /* its prompt is computed: nothing to generate */
            r->cancel_reason = LG_FINISH_LENGTH;
        }
        if (!e->seqs[s].want_logits)
            continue;
        const int ri = li++; /* the row's index among the step's sampling rows */
        const float *lg = want_logits ? e->logits + (size_t)ri * V : NULL;
        int32_t tok;
        if (r->cm && !e->rows[ri].masked) { /* masked here (the device masked the others: dev_masked) */
            if (host_pick(e, r, lg, (double)e->rows[ri].u, true, &tok) < 0)
                continue; /* failed: finishes with the error */
        } else if (lg && (!dev_sample || host_penalised(e, r, dev_sample))) {
            (void)host_pick(e, r, lg, (double)e->rows[ri].u, false, &tok); /* a grammar's: the device's, on lg */
        } else {
            tok = e->ids[ri];
        }
        if (take_token(e, r, tok, lg, device_logprobs(e, r, dev_sample) ? &e->lps[ri] : NULL) && r->cm &&
            e->fast_forward)
            fast_forward(e, r);
    }
    e->stats.sample_seconds += lg_now() - ts;
    return dropped;
}

static bool inbox_pending(lg_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool p = e->inbox_head || e->n_cancel || e->msg_head || e->stop;
    pthread_mutex_unlock(&e->mu);
    return p;
}

/* Decode bursts. Once a decode step whose every row samples on the device is
 * enqueued, and before its results are read, the next step of the same
 * sequences is enqueued too, its input tokens copied on the device from the
 * step before (lg_model_launch). The GPU then runs from one step into the
 * next while the host reads, streams and bills the previous step's tokens,
 * instead of idling for that host work between every two steps (vLLM's
 * async scheduling, SGLang's overlap scheduler). A burst goes on while
 * nothing would change the batch: nothing in the inbox (arrivals, cancels,
 * adapter messages, shutdown), nobody waiting for admission or
 * re-admission, no scheduled request finished, cancelled or about to reach
 * its length limit, no penalties and no host rows (they need the step
 * before's token on the host), and every sequence's next page free without
 * preempting anyone. A request that stops inside a burst already has its
 * next row enqueued: that row (the KV of its real last token, and a token
 * nobody sees) is dropped when read, and the request finishes after it, one
 * step later than without bursts. Tokens, logprobs and usage are those of
 * step-by-step decoding: each request draws its uniforms in the same order.
 * Penalties and host rows never reach here: the first step of a burst had
 * neither (engine_step's `chainable`: no row of a request with penalties,
 * even one with no generated token yet, whose row has no penalty pairs),
 * and its requests keep their parameters. Fills e->seqs / e->rows for the
 * next step; false when the burst ends (and err says why when a launch
 * failed). LG_BURST=0 turns bursts off. */
static bool burst_next(lg_engine *e, int n, lg_err *err)
{
    if (inbox_pending(e) || lg_fair_queued(e->fair) > 0 || e->n_preempted > 0)
        return false;
    for (int s = 0; s < n; s++) {
        const request *r = e->sched[s];
        /* once this step's token is in, r has n_tokens + 1; the next step samples one more */
        if (r->cancel || r->n_tokens + 1 >= r->max_total || r->n_computed + 2 > e->max_context)
            return false;
    }
    for (int s = 0; s < n; s++)
        if (!lg_sched_reserve_free(e, e->sched[s], e->sched[s]->n_computed + 2))
            return false;
    bool any_lp = false;
    for (int s = 0; s < n; s++) {
        request *r = e->sched[s];
        e->seqs[s] = (lg_step_seq){.tokens = NULL, .n_tokens = 1, .pos0 = r->n_computed + 1, .pages = r->pages,
                                   .n_pages = r->n_pages, .want_logits = true, .lora = r->lora};
        any_lp |= fill_row(e, r, &e->rows[s], true);
    }
    return lg_model_launch(e->model, e->pool, e->seqs, n, e->rows, NULL, 0, true, any_lp, false, NULL, err) == 0;
}

/* lg_step_masks' fill: the grammar masks of the step's device-masked rows
 * (fill_row), computed while its forward runs. A row whose mask failed
 * gets every token (its request fails and its token is dropped). */
static void fill_masks(void *ctx)
{
    lg_engine *e = ctx;
    const size_t W = (size_t)e->cmask_words;
    for (int k = 0; k < e->n_dmask; k++) {
        uint32_t *m = e->dmasks + (size_t)k * W;
        const int allowed = constrain_row(e, e->dmask_req[k], m);
        if (allowed < 0)
            memset(m, 0xff, W * sizeof *m);
        e->stats.constrained_rows++;
        e->stats.forced_tokens += allowed == 1;
    }
}

/* Arrivals, cancels and adapter messages taken in; adapter loads advanced. */
static void take_messages(lg_engine *e)
{
    drain_inbox(e);
    if (e->adapters)
        lg_adapter_cache_poll(e->adapters);
}

static int engine_step(lg_engine *e, lg_err *err)
{
    take_messages(e);
    finish_marked(e, -1, "cancelled");
    if (e->n_live == 0)
        return 0;

    bool any_prefill;
    int n_tok = lg_sched_plan(e, &any_prefill);
    finish_marked(e, LG_FINISH_ERROR, "the request's adapter could not be loaded");
    int n = e->n_sched;
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
     * device sampling pick the same token (engine/backend/sampling.h) */
    int n_rows = 0;
    bool dev_sample = lg_model_samples_on_device(e->model);
    bool want_logits = !dev_sample;
    e->n_pen = 0;
    e->n_dmask = 0;
    bool pen_oom = false, any_lp = false, any_pen = false, any_plp = false;
    for (int s = 0; s < n; s++) {
        any_plp |= e->seqs[s].lp_count > 0;
        if (!e->seqs[s].want_logits)
            continue;
        request *r = e->sched[s];
        lg_sample_row *row = &e->rows[n_rows++];
        if (r->n_draft > 0) { /* a verification: sampled on the host (verify_proposals), its uniforms drawn there */
            *row = (lg_sample_row){0};
            want_logits = any_pen = true;
            continue;
        }
        any_lp |= fill_row(e, r, row, dev_sample);
        const bool pen = has_penalty(r) || host_only_adjust(r) || r->cm; /* a grammar: no bursts */
        any_pen |= pen;
        if (pen && !host_penalised(e, r, dev_sample) && add_penalty_pairs(e, r, row) != 0)
            pen_oom = true;
        if (needs_host_row(e, r, dev_sample))
            want_logits = true;
    }

    const lg_step_masks dm = {.host = e->dmasks, .n_words = (size_t)e->n_dmask * (size_t)e->cmask_words,
                              .fill = fill_masks, .ctx = e};
    double t0 = lg_now();
    if ((pen_oom && lg_fail(err, "out of memory for the step's penalty pairs")) ||
        lg_model_launch(e->model, e->pool, e->seqs, n, dev_sample ? e->rows : NULL, e->pen_pairs, e->n_pen, dev_sample,
                        any_lp, want_logits, e->n_dmask ? &dm : NULL, err) != 0) {
        fail_step(e, n, err);
        return -1;
    }
    /* a decode burst (burst_next) may follow a decode step whose every row samples on the device, unless
     * speculative decoding may propose in the next steps (a burst would run them without proposals) */
    const bool chainable = e->burst && !any_prefill && !want_logits && !any_pen && !any_plp && n_rows == n &&
                           e->spec_k == 0 && lg_model_can_chain(e->model);
    for (;;) {
        lg_err berr = {{0}};
        const bool chained = chainable && burst_next(e, n, &berr);
        if (berr.msg[0]) { /* the next step's launch failed; this one is still in flight */
            (void)lg_model_collect(e->model, NULL, NULL, NULL, NULL, NULL);
            if (err)
                *err = berr;
            fail_step(e, n, &berr);
            return -1;
        }
        if (lg_model_collect(e->model, dev_sample ? e->ids : NULL, any_lp ? e->lps : NULL,
                             want_logits ? e->logits : NULL, any_plp ? e->plogits : NULL, err) != 0) {
            if (chained)
                (void)lg_model_collect(e->model, NULL, NULL, NULL, NULL, NULL);
            fail_step(e, n, err);
            return -1;
        }
        const double t1 = lg_now(), dt = t1 - t0;
        /* tokens of requests that ended inside a burst are dropped, not counted */
        const int used = n_tok - take_results(e, n, dev_sample, want_logits);
        e->stats.steps++;
        if (any_prefill) {
            e->stats.prefill_steps++;
            e->stats.prefill_seconds += dt;
            e->stats.prefill_tokens += used;
        } else {
            e->stats.decode_steps++;
            e->stats.decode_seconds += dt;
            e->stats.decode_tokens += used;
        }
        if (!chained)
            break;
        /* the step burst_next launched is now the one in flight; its time counts from here */
        e->stats.chained_steps++;
        t0 = t1;
        publish(e);
        take_messages(e); /* arrivals and cancellations end the burst at the next burst_next */
    }
    finish_marked(e, LG_FINISH_STOP, NULL);
    finish_marked(e, LG_FINISH_LENGTH, NULL);
    return 1;
}

int lg_engine_step(lg_engine *e, lg_err *err)
{
    double t0 = lg_now();
    int rc = engine_step(e, err);
    e->stats.step_seconds += lg_now() - t0;
    e->last_step_idle = rc == 0;
    publish(e);
    return rc;
}

/* ---- waiting and the engine thread ---------------------------------------------------------- */

/* Blocks (mu held) until something arrives, the stop flag, or the timeout
 * (< 0: none). */
static void wait_locked(lg_engine *e, double timeout_s)
{
    if (e->woken || e->stop)
        return;
    if (timeout_s < 0) {
        pthread_cond_wait(&e->cv, &e->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

void lg_engine_wait(lg_engine *e, double timeout_s)
{
    pthread_mutex_lock(&e->mu);
    wait_locked(e, timeout_s);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg)
{
    lg_engine *e = arg;
    /* this thread enqueues the engine's ops (CUDA: on the engine's device, which need not be device 0) */
    if (e->be->i.bind_thread && e->be->i.bind_thread(e->be) != 0)
        lg_log("loragate engine: cannot bind the engine thread to backend %s", e->be->i.name);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (!e->stop && e->last_step_idle) {
            /* nothing ran: sleep until a submit, cancel, registry change or
             * finished load wakes us; poll pool copies every millisecond */
            bool waiting_on_copies = e->adapters && lg_adapter_cache_busy(e->adapters);
            wait_locked(e, e->n_live > 0 && waiting_on_copies ? 0.001 : e->n_live > 0 ? 0.05 : -1);
        }
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        lg_err err = {{0}};
        if (lg_engine_step(e, &err) < 0)
            lg_log("loragate engine: step failed: %s", err.msg);
    }
    return NULL;
}

int lg_engine_start(lg_engine *e, lg_err *err)
{
    pthread_mutex_lock(&e->mu);
    bool running = e->thread_running;
    e->stop = false;
    pthread_mutex_unlock(&e->mu);
    if (running)
        return 0;
    e->last_step_idle = false;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
        return lg_fail(err, "cannot start the engine thread: %s", strerror(errno));
    e->thread_running = true;
    return 0;
}

void lg_engine_stop(lg_engine *e)
{
    if (!e->thread_running)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_running = false;
}

/* ---- counters ------------------------------------------------------------------------------- */

void lg_engine_get_stats(lg_engine *e, lg_engine_stats *s)
{
    pthread_mutex_lock(&e->stats_mu);
    *s = e->pub;
    pthread_mutex_unlock(&e->stats_mu);
}

int lg_engine_adapter_activity(lg_engine *e, lg_engine_stats *s, lg_adapter_activity **out)
{
    *out = NULL;
    pthread_mutex_lock(&e->stats_mu);
    int n = e->n_pub_act;
    if (n > 0 && !(*out = malloc((size_t)n * sizeof **out)))
        n = -1;
    else if (n > 0)
        memcpy(*out, e->pub_act, (size_t)n * sizeof **out);
    if (s)
        *s = e->pub;
    pthread_mutex_unlock(&e->stats_mu);
    return n;
}

int lg_engine_adapter_load_times(lg_engine *e, float *ms, int cap)
{
    pthread_mutex_lock(&e->stats_mu);
    int64_t n = e->n_load_ms < LG_ADAPTER_LOAD_SAMPLES ? e->n_load_ms : LG_ADAPTER_LOAD_SAMPLES;
    if (n > cap)
        n = cap;
    for (int64_t i = 0; i < n; i++)
        ms[i] = e->load_ms[(e->n_load_ms - n + i) % LG_ADAPTER_LOAD_SAMPLES];
    pthread_mutex_unlock(&e->stats_mu);
    return (int)n;
}

int lg_engine_tenant_stats(lg_engine *e, const char *tenant, lg_tenant_stats *out)
{
    lg_fair_stats fs;
    if (lg_fair_tenant_stats(e->fair, tenant, &fs) != 0)
        return -1;
    *out = (lg_tenant_stats){.service = fs.service, .counter = fs.counter, .queued = fs.queued, .running = fs.running};
    return 0;
}

/* ---- several engines ------------------------------------------------------------------------ */

int lg_engine_share_fairness(lg_engine *e, lg_engine *with, lg_err *err)
{
    return lg_fair_join(e->fair, with->fair, err);
}
