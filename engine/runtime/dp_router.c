/*
 * dp_router.c — see dp_router.h: N engines behind one handle, the routing
 * policy, the wrapped callbacks and the merged counters.
 *
 * State and locks (N > 1 only; with one engine every call passes through):
 *   outstanding[k], routed[k], spilled[k]   atomics: +1 at submit, -1 in
 *       the wrapped on_finish (before the caller's, so a closed loop that
 *       submits from on_finish sees the engine one lighter);
 *   rmu   the affinity tables: namespace -> engine (direct-mapped, 8,192
 *       slots of a 64-bit hash) and adapter version -> engines it was sent
 *       to (direct-mapped, 4,096 slots, a bit mask of engines); a few loads
 *       and stores per request;
 *   tmu   the tenants the router has seen, each with its requests per
 *       engine (atomics, read by the spill rule under tmu); records are
 *       never freed while the router lives (as the fairness table's);
 *   amu   adapter registry changes, one at a time, in one engine order.
 * The spill rule reads tenant counters from the shared fairness table
 * (lg_engine_tenant_stats of engine 0), only when the preferred engine is
 * full, never under rmu. Nothing here is held while an engine runs a
 * callback, and no engine lock is held while this file takes its own.
 */
#include "engine/runtime/dp_router.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/strmap.h"

#define NS_SLOTS 8192
#define AD_SLOTS 4096

typedef struct ns_slot {
    uint64_t key; /* 0: empty */
    int engine;
} ns_slot;

typedef struct ad_slot {
    int id;           /* adapter version; 0: empty */
    uint64_t engines; /* bit k: sent to engine k */
} ad_slot;

typedef struct dp_tenant {
    char *name;
    atomic_int out[]; /* [n] requests on engine k, submitted and not finished */
} dp_tenant;

/* One routed request's callbacks (N > 1), freed after its on_finish. */
typedef struct dp_req {
    lg_dp *dp;
    int k;
    dp_tenant *t;
    lg_request_cb cb;
    void *user;
} dp_req;

struct lg_dp {
    int n;
    lg_engine **e;
    int max_seqs;
    lg_prefix_sharing sharing;
    lg_sched_policy policy;
    int order[LG_MAX_DP]; /* registry changes: smallest pool first */
    atomic_int *outstanding;
    atomic_llong *routed, *spilled;
    pthread_mutex_t rmu;
    ns_slot *ns;
    ad_slot *ad;
    unsigned rr; /* rotates ties */
    pthread_mutex_t tmu;
    lg_strmap *tenants;
    dp_tenant **tl;
    int n_t, cap_t;
    double *scratch; /* [cap_t] tenant counters (NaN: no request in flight), under tmu */
    pthread_mutex_t amu;
    bool ids_broken;
};

/* ---- create / free ---------------------------------------------------------------------- */

static void free_state(lg_dp *dp)
{
    for (int i = 0; i < dp->n_t; i++) {
        free(dp->tl[i]->name);
        free(dp->tl[i]);
    }
    free(dp->tl);
    free(dp->scratch);
    lg_strmap_free(dp->tenants);
    free(dp->ns);
    free(dp->ad);
    free(dp->outstanding);
    free(dp->routed);
    free(dp->spilled);
    pthread_mutex_destroy(&dp->rmu);
    pthread_mutex_destroy(&dp->tmu);
    pthread_mutex_destroy(&dp->amu);
}

void lg_dp_free(lg_dp *dp)
{
    if (!dp)
        return;
    /* the engines first: their last on_finish calls (CANCELLED) still go through the wrappers */
    for (int k = 0; k < dp->n; k++) lg_engine_free(dp->e[k]);
    free(dp->e);
    free_state(dp);
    free(dp);
}

int lg_dp_create(lg_engine *const *engines, int n, const lg_engine_opts *eo, lg_dp **out, lg_err *err)
{
    *out = NULL;
    lg_dp *dp = n >= 1 && n <= LG_MAX_DP ? calloc(1, sizeof *dp) : NULL;
    lg_engine **e = dp ? calloc((size_t)n, sizeof *e) : NULL;
    if (!dp || !e) {
        for (int k = 0; k < n; k++) lg_engine_free(engines[k]);
        free(dp);
        if (n < 1 || n > LG_MAX_DP)
            return lg_fail(err, "a router takes 1 to %d engines, not %d", LG_MAX_DP, n);
        return lg_fail(err, "out of memory");
    }
    memcpy(e, engines, (size_t)n * sizeof *e);
    dp->n = n;
    dp->e = e;
    dp->max_seqs = eo->model.max_seqs > 0 ? eo->model.max_seqs : 1;
    dp->sharing = eo->prefix_sharing;
    dp->policy = eo->policy;
    pthread_mutex_init(&dp->rmu, NULL);
    pthread_mutex_init(&dp->tmu, NULL);
    pthread_mutex_init(&dp->amu, NULL);
    int rc = 0;
    if (n > 1) {
        dp->outstanding = calloc((size_t)n, sizeof *dp->outstanding);
        dp->routed = calloc((size_t)n, sizeof *dp->routed);
        dp->spilled = calloc((size_t)n, sizeof *dp->spilled);
        dp->ns = calloc(NS_SLOTS, sizeof *dp->ns);
        dp->ad = calloc(AD_SLOTS, sizeof *dp->ad);
        dp->tenants = lg_strmap_new();
        if (!dp->outstanding || !dp->routed || !dp->spilled || !dp->ns || !dp->ad || !dp->tenants)
            rc = lg_fail(err, "out of memory");
    }
    for (int k = 1; k < n && rc == 0; k++) {
        if (lg_engine_max_context(e[k]) != lg_engine_max_context(e[0]))
            rc = lg_fail(err, "engine %d has a context of %d tokens, engine 0 %d: the engines must be alike", k,
                         lg_engine_max_context(e[k]), lg_engine_max_context(e[0]));
        else if (lg_engine_share_fairness(e[k], e[0], err) != 0)
            lg_err_prefix(err, "engine %d", k), rc = -1;
    }
    /* registry changes go to the smallest pool first: a size refusal then changes nothing */
    int pages[LG_MAX_DP];
    for (int k = 0; k < n; k++) {
        lg_engine_stats s;
        lg_engine_get_stats(e[k], &s);
        pages[k] = s.pages_total;
        int i = k;
        while (i > 0 && pages[dp->order[i - 1]] > pages[k]) {
            dp->order[i] = dp->order[i - 1];
            i--;
        }
        dp->order[i] = k;
    }
    if (rc != 0) {
        lg_dp_free(dp);
        return -1;
    }
    *out = dp;
    return 0;
}

int lg_dp_create_engines(const lg_placement *pl, const lg_weights *w, const lg_engine_opts *eo, lg_dp **out,
                         lg_err *err)
{
    *out = NULL;
    lg_engine *e[LG_MAX_DP] = {0};
    for (int k = 0; k < pl->dp; k++) {
        lg_engine_opts o = *eo;
        lg_placement_engine_opts(pl, k, &o);
        if (lg_engine_create(lg_placement_backend(pl, k), w, &o, &e[k], err) != 0) {
            if (pl->dp > 1)
                lg_err_prefix(err, "engine %d of %d", k, pl->dp);
            for (int j = 0; j < k; j++) lg_engine_free(e[j]);
            return -1;
        }
    }
    return lg_dp_create(e, pl->dp, eo, out, err);
}

int lg_dp_size(const lg_dp *dp) { return dp->n; }
lg_engine *lg_dp_engine(const lg_dp *dp, int k) { return k >= 0 && k < dp->n ? dp->e[k] : NULL; }
const lg_model_config *lg_dp_config(const lg_dp *dp) { return lg_engine_config(dp->e[0]); }
int lg_dp_max_context(const lg_dp *dp) { return lg_engine_max_context(dp->e[0]); }

int lg_dp_start(lg_dp *dp, lg_err *err)
{
    for (int k = 0; k < dp->n; k++)
        if (lg_engine_start(dp->e[k], err) != 0) {
            for (int j = 0; j < k; j++) lg_engine_stop(dp->e[j]);
            if (dp->n > 1)
                lg_err_prefix(err, "engine %d", k);
            return -1;
        }
    return 0;
}

void lg_dp_stop(lg_dp *dp)
{
    for (int k = 0; k < dp->n; k++) lg_engine_stop(dp->e[k]);
}

/* ---- adapters ------------------------------------------------------------------------------ */

static int add_one(lg_engine *e, const char *name, const char *dir, const lg_synth_adapter *s, int *id, lg_err *err)
{
    return dir ? lg_engine_add_adapter(e, name, dir, id, err) : lg_engine_add_synthetic_adapter(e, name, s, id, err);
}

/* After engines order[0, took) issued version id0 of `name` and order[took]
 * refused it (or issued another id): the name leaves every engine (the
 * state they can all agree on), and each engine that did not issue id0
 * issues and retires one throwaway version, so the next ids agree again.
 * amu held. */
static void realign(lg_dp *dp, const char *name, int took, int id0, bool mismatch)
{
    for (int k = 0; k < dp->n; k++) lg_engine_remove_adapter(dp->e[k], name, NULL);
    if (mismatch) { /* an engine was out of step already: nothing to align to */
        dp->ids_broken = true;
        return;
    }
    static const char burn[] = ".dp-realign";
    lg_synth_adapter s = {.rank = 1, .targets = 1u, .seed = 1};
    for (int i = took; i < dp->n; i++) {
        int id = 0;
        lg_engine *e = dp->e[dp->order[i]];
        if (lg_engine_add_synthetic_adapter(e, burn, &s, &id, NULL) != 0 || id != id0)
            dp->ids_broken = true;
        lg_engine_remove_adapter(e, burn, NULL);
    }
}

static int add_everywhere(lg_dp *dp, const char *name, const char *dir, const lg_synth_adapter *s, int *adapter_id,
                          lg_err *err)
{
    if (dp->n == 1)
        return add_one(dp->e[0], name, dir, s, adapter_id, err);
    pthread_mutex_lock(&dp->amu);
    if (dp->ids_broken) {
        pthread_mutex_unlock(&dp->amu);
        return lg_fail(err, "the engines' adapter version ids no longer agree (an earlier failure); restart the "
                            "server to add adapters");
    }
    int id0 = 0;
    for (int i = 0; i < dp->n; i++) {
        int k = dp->order[i], id = 0;
        if (add_one(dp->e[k], name, dir, s, &id, err) != 0) {
            if (i > 0) {
                lg_err_prefix(err, "engine %d (after %d engine%s took it; it was removed from all)", k, i,
                              i > 1 ? "s" : "");
                realign(dp, name, i, id0, false);
            }
            pthread_mutex_unlock(&dp->amu);
            return -1;
        }
        if (i == 0) {
            id0 = id;
        } else if (id != id0) {
            realign(dp, name, i, id0, true);
            pthread_mutex_unlock(&dp->amu);
            return lg_fail(err, "adapter '%s': engine %d issued version %d, engine %d version %d; it was removed from "
                                "all engines", name, dp->order[0], id0, k, id);
        }
    }
    pthread_mutex_unlock(&dp->amu);
    *adapter_id = id0;
    return 0;
}

int lg_dp_add_adapter(lg_dp *dp, const char *name, const char *dir, int *adapter_id, lg_err *err)
{
    return add_everywhere(dp, name, dir, NULL, adapter_id, err);
}

int lg_dp_add_synthetic_adapter(lg_dp *dp, const char *name, const lg_synth_adapter *s, int *adapter_id, lg_err *err)
{
    return add_everywhere(dp, name, NULL, s, adapter_id, err);
}

int lg_dp_remove_adapter(lg_dp *dp, const char *name, lg_err *err)
{
    if (dp->n == 1)
        return lg_engine_remove_adapter(dp->e[0], name, err);
    pthread_mutex_lock(&dp->amu);
    int ok = 0;
    for (int i = 0; i < dp->n; i++) ok += lg_engine_remove_adapter(dp->e[dp->order[i]], name, i ? NULL : err) == 0;
    pthread_mutex_unlock(&dp->amu);
    return ok ? 0 : -1;
}

int lg_dp_find_adapter(lg_dp *dp, const char *name) { return lg_engine_find_adapter(dp->e[0], name); }

int lg_dp_adapter_info(lg_dp *dp, int adapter_id, lg_adapter_info *out)
{
    if (lg_engine_adapter_info(dp->e[0], adapter_id, out) != 0)
        return -1;
    for (int k = 1; k < dp->n; k++) {
        lg_adapter_info o;
        if (lg_engine_adapter_info(dp->e[k], adapter_id, &o) == 0)
            out->requests += o.requests;
    }
    return 0;
}

/* ---- tenants ------------------------------------------------------------------------------- */

int lg_dp_set_tenant_weight(lg_dp *dp, const char *tenant, double weight, lg_err *err)
{
    return lg_engine_set_tenant_weight(dp->e[0], tenant, weight, err); /* one table for all */
}

int lg_dp_purge_tenant(lg_dp *dp, const char *tenant, lg_err *err)
{
    for (int k = 0; k < dp->n; k++)
        if (lg_engine_purge_tenant(dp->e[k], tenant, err) != 0)
            return -1;
    return 0;
}

int lg_dp_tenant_stats(lg_dp *dp, const char *tenant, lg_tenant_stats *out)
{
    if (lg_engine_tenant_stats(dp->e[0], tenant, out) != 0)
        return -1;
    for (int k = 1; k < dp->n; k++) {
        lg_tenant_stats s;
        if (lg_engine_tenant_stats(dp->e[k], tenant, &s) == 0) {
            out->queued += s.queued;
            out->running += s.running;
        }
    }
    return 0;
}

/* The router's record of a tenant, made on first use; NULL: out of memory. */
static dp_tenant *tenant_get(lg_dp *dp, const char *name)
{
    pthread_mutex_lock(&dp->tmu);
    dp_tenant *t = lg_strmap_get(dp->tenants, name);
    if (!t) {
        if (dp->n_t == dp->cap_t) {
            int cap = dp->cap_t ? 2 * dp->cap_t : 16;
            dp_tenant **tl = realloc(dp->tl, (size_t)cap * sizeof *tl);
            double *sc = realloc(dp->scratch, (size_t)cap * sizeof *sc);
            if (tl) dp->tl = tl;
            if (sc) dp->scratch = sc;
            if (tl && sc) dp->cap_t = cap;
        }
        t = dp->n_t < dp->cap_t ? calloc(1, sizeof *t + (size_t)dp->n * sizeof(atomic_int)) : NULL;
        if (t && (!(t->name = strdup(name)) || lg_strmap_put(dp->tenants, name, t) != 0)) {
            free(t->name);
            free(t);
            t = NULL;
        }
        if (t)
            dp->tl[dp->n_t++] = t;
    }
    pthread_mutex_unlock(&dp->tmu);
    return t;
}

/* ---- routing ------------------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* The prefix namespace's key, as the engine forms the namespace (engine.h):
 * isolation domain (the tenant, or "" when shared), adapter, salt. 0: none. */
static uint64_t ns_key(const lg_dp *dp, const lg_request_params *p)
{
    if (dp->sharing == LG_PREFIX_OFF)
        return 0;
    const char *dom = dp->sharing == LG_PREFIX_TENANT && p->tenant ? p->tenant : "";
    const char *salt = p->cache_salt ? p->cache_salt : "";
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, dom, strlen(dom) + 1);
    h = fnv(h, &p->adapter_id, sizeof p->adapter_id);
    h = fnv(h, salt, strlen(salt) + 1);
    return h ? h : 1;
}

/* The least loaded engine among `among` (bit mask; 0: all), ties from `start` on. */
static int least_loaded(const lg_dp *dp, const int *load, uint64_t among, unsigned start)
{
    int best = -1;
    for (int i = 0; i < dp->n; i++) {
        int k = (int)((start + (unsigned)i) % (unsigned)dp->n);
        if (among && !((among >> k) & 1u))
            continue;
        if (best < 0 || load[k] < load[best])
            best = k;
    }
    return best;
}

/* score[k]: the requests on engine k a new request of t would wait behind
 * under VTC — those of tenants whose counter is no larger than t's (t's
 * own included; t's counter as the engine would lift it, were t idle). */
static void fair_scores(lg_dp *dp, dp_tenant *t, const int *load, double *score)
{
    int n = dp->n;
    if (dp->policy == LG_SCHED_FCFS) {
        for (int k = 0; k < n; k++) score[k] = load[k];
        return;
    }
    lg_tenant_stats ts;
    double ct = lg_engine_tenant_stats(dp->e[0], t->name, &ts) == 0 ? ts.counter : 0;
    bool t_active = false;
    for (int k = 0; k < n; k++) t_active |= atomic_load_explicit(&t->out[k], memory_order_relaxed) > 0;
    for (int k = 0; k < n; k++) score[k] = 0;
    pthread_mutex_lock(&dp->tmu);
    double mn = 0;
    bool any = false;
    for (int i = 0; i < dp->n_t; i++) {
        dp_tenant *u = dp->tl[i];
        int tot = 0;
        for (int k = 0; k < n; k++) tot += atomic_load_explicit(&u->out[k], memory_order_relaxed);
        dp->scratch[i] = tot > 0 && lg_engine_tenant_stats(dp->e[0], u->name, &ts) == 0 ? ts.counter : NAN;
        if (tot > 0 && (!any || dp->scratch[i] < mn)) {
            mn = dp->scratch[i];
            any = true;
        }
    }
    if (!t_active && any && ct < mn)
        ct = mn; /* VTC's lift at enqueue */
    for (int i = 0; i < dp->n_t; i++) {
        if (isnan(dp->scratch[i]) || dp->scratch[i] > ct) /* idle, or admitted after t */
            continue;
        for (int k = 0; k < n; k++) score[k] += atomic_load_explicit(&dp->tl[i]->out[k], memory_order_relaxed);
    }
    pthread_mutex_unlock(&dp->tmu);
}

/* The spill rule (dp_router.h, 4): pref, or an engine whose queue for t is
 * shorter by more than a batch (one with the adapter first). */
static int spill(lg_dp *dp, dp_tenant *t, int pref, const int *load, uint64_t has, bool adapter, unsigned start)
{
    double score[LG_MAX_DP];
    fair_scores(dp, t, load, score);
    /* a batch waiting on pref: worth an adapter load elsewhere */
    bool deep = load[pref] > 2 * dp->max_seqs;
    int best = -1;
    for (int i = 0; i < dp->n; i++) {
        int k = (int)((start + (unsigned)i) % (unsigned)dp->n);
        if (!(score[pref] > score[k] + dp->max_seqs && score[pref] > 2 * score[k]))
            continue;
        if (adapter && !((has >> k) & 1u) && !deep)
            continue;
        if (best < 0) {
            best = k;
            continue;
        }
        int hk = (int)((has >> k) & 1u), hb = (int)((has >> best) & 1u);
        if (hk > hb || (hk == hb && (score[k] < score[best] || (score[k] == score[best] && load[k] < load[best]))))
            best = k;
    }
    return best >= 0 ? best : pref;
}

/* The engine for request p of tenant t (dp_router.h, the routing policy). */
static int route(lg_dp *dp, const lg_request_params *p, dp_tenant *t, bool *spilled)
{
    int n = dp->n, load[LG_MAX_DP];
    for (int k = 0; k < n; k++) load[k] = atomic_load_explicit(&dp->outstanding[k], memory_order_relaxed);
    uint64_t key = ns_key(dp, p);
    ns_slot *ns = key ? &dp->ns[key % NS_SLOTS] : NULL;
    ad_slot *ad = p->adapter_id > 0 ? &dp->ad[(unsigned)p->adapter_id % AD_SLOTS] : NULL;
    pthread_mutex_lock(&dp->rmu);
    unsigned start = dp->rr++;
    uint64_t has = ad && ad->id == p->adapter_id ? ad->engines : 0;
    int pref = ns && ns->key == key ? ns->engine : -1;
    pthread_mutex_unlock(&dp->rmu);
    if (pref < 0 && has)
        pref = least_loaded(dp, load, has, start);
    if (pref < 0)
        pref = least_loaded(dp, load, 0, start);
    int k = load[pref] >= dp->max_seqs ? spill(dp, t, pref, load, has, p->adapter_id > 0, start) : pref;
    pthread_mutex_lock(&dp->rmu);
    if (ns && ns->key != key) { /* a new namespace's home: where its adapter is, or the least loaded */
        ns->key = key;
        ns->engine = pref;
    }
    if (ad) {
        if (ad->id != p->adapter_id)
            *ad = (ad_slot){.id = p->adapter_id};
        ad->engines |= (uint64_t)1 << k;
    }
    pthread_mutex_unlock(&dp->rmu);
    *spilled = k != pref;
    return k;
}

/* ---- requests ------------------------------------------------------------------------------ */

static int64_t to_router(const lg_dp *dp, int64_t eid, int k) { return (eid - 1) * dp->n + k + 1; }

static void w_token(void *user, int64_t id, const lg_token_out *o)
{
    dp_req *w = user;
    w->cb.on_token(w->user, to_router(w->dp, id, w->k), o);
}

static void w_plp(void *user, int64_t id, const lg_prompt_logprob *rows, int n)
{
    dp_req *w = user;
    w->cb.on_prompt_logprobs(w->user, to_router(w->dp, id, w->k), rows, n);
}

static void w_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    dp_req *w = user;
    lg_dp *dp = w->dp;
    atomic_fetch_sub_explicit(&dp->outstanding[w->k], 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&w->t->out[w->k], 1, memory_order_relaxed);
    if (w->cb.on_finish)
        w->cb.on_finish(w->user, to_router(dp, id, w->k), reason, u, error);
    free(w);
}

int lg_dp_submit(lg_dp *dp, const lg_request_params *p, int64_t *id, lg_err *err)
{
    if (dp->n == 1)
        return lg_engine_submit(dp->e[0], p, id, err);
    const char *tenant = p->tenant ? p->tenant : "";
    if (strlen(tenant) > LG_MAX_TENANT)
        return lg_fail(err, "a tenant name has at most %d bytes", LG_MAX_TENANT);
    dp_tenant *t = tenant_get(dp, tenant);
    dp_req *w = t ? malloc(sizeof *w) : NULL;
    if (!w)
        return lg_fail(err, "out of memory");
    bool spilled;
    int k = route(dp, p, t, &spilled);
    *w = (dp_req){.dp = dp, .k = k, .t = t, .cb = p->cb, .user = p->user};
    lg_request_params q = *p;
    q.cb = (lg_request_cb){.on_token = p->cb.on_token ? w_token : NULL, .on_finish = w_finish,
                           .on_prompt_logprobs = p->cb.on_prompt_logprobs ? w_plp : NULL};
    q.user = w;
    /* counted before the engine can finish it (its on_finish takes them back) */
    atomic_fetch_add_explicit(&dp->outstanding[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->out[k], 1, memory_order_relaxed);
    int64_t eid = 0;
    if (lg_engine_submit(dp->e[k], &q, &eid, err) != 0) {
        atomic_fetch_sub_explicit(&dp->outstanding[k], 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&t->out[k], 1, memory_order_relaxed);
        free(w);
        return -1;
    }
    atomic_fetch_add_explicit(&dp->routed[k], 1, memory_order_relaxed);
    if (spilled)
        atomic_fetch_add_explicit(&dp->spilled[k], 1, memory_order_relaxed);
    if (id)
        *id = to_router(dp, eid, k);
    return 0;
}

void lg_dp_cancel(lg_dp *dp, int64_t id, lg_finish_reason reason)
{
    if (dp->n == 1) {
        lg_engine_cancel(dp->e[0], id, reason);
        return;
    }
    if (id <= 0)
        return;
    int k = (int)((id - 1) % dp->n);
    lg_engine_cancel(dp->e[k], (id - 1) / dp->n + 1, reason);
}

bool lg_dp_busy(lg_dp *dp)
{
    for (int k = 0; k < dp->n; k++)
        if (lg_engine_busy(dp->e[k]))
            return true;
    return false;
}

/* ---- counters ------------------------------------------------------------------------------ */

/* a += b, as lg_dp_get_stats describes. */
static void add_stats(lg_engine_stats *a, const lg_engine_stats *b)
{
#define ADD(f) a->f += b->f
    ADD(steps), ADD(prefill_steps), ADD(decode_steps), ADD(prefill_tokens), ADD(decode_tokens), ADD(preemptions);
    ADD(chained_steps), ADD(prefill_seconds), ADD(decode_seconds), ADD(step_seconds), ADD(sample_seconds);
    ADD(constrained_rows), ADD(forced_tokens), ADD(fast_forward_tokens), ADD(mask_seconds);
    ADD(queued), ADD(running), ADD(pages_total), ADD(pages_free), ADD(pages_kv), ADD(pages_adapter);
    ADD(pages_cached), ADD(pages_prefix), ADD(max_pages_kv), ADD(max_pages_adapter), ADD(max_pages_prefix);
    ADD(kv_tokens_capacity), ADD(requests_finished), ADD(prompt_tokens), ADD(cached_tokens);
    ADD(prefix_lookups), ADD(prefix_hits), ADD(adapter_loads), ADD(adapter_evictions), ADD(adapter_host_loads);
    ADD(adapter_load_seconds), ADD(spec_verify_rows), ADD(spec_proposed), ADD(spec_accepted);
    ADD(spec_batch_off_steps), ADD(adapters_resident), ADD(max_step_adapters);
#undef ADD
}

void lg_dp_get_stats(lg_dp *dp, lg_engine_stats *s)
{
    lg_engine_get_stats(dp->e[0], s);
    for (int k = 1; k < dp->n; k++) {
        lg_engine_stats o;
        lg_engine_get_stats(dp->e[k], &o);
        add_stats(s, &o);
    }
}

static int cmp_act(const void *a, const void *b)
{
    const lg_adapter_activity *x = a, *y = b;
    return (x->adapter_id > y->adapter_id) - (x->adapter_id < y->adapter_id);
}

int lg_dp_adapter_activity(lg_dp *dp, lg_engine_stats *sum, lg_engine_stats *per, lg_adapter_activity **out)
{
    *out = NULL;
    lg_engine_stats s0;
    if (dp->n == 1) {
        int n = lg_engine_adapter_activity(dp->e[0], &s0, out);
        if (sum) *sum = s0;
        if (per) per[0] = s0;
        return n;
    }
    lg_adapter_activity *all = NULL;
    int n_all = 0, rc = 0;
    for (int k = 0; k < dp->n; k++) {
        lg_adapter_activity *a = NULL;
        lg_engine_stats s;
        int n = lg_engine_adapter_activity(dp->e[k], &s, &a);
        if (per)
            per[k] = s;
        if (k == 0)
            s0 = s;
        else
            add_stats(&s0, &s);
        if (n < 0) {
            rc = -1;
            continue;
        }
        lg_adapter_activity *m = n > 0 ? realloc(all, (size_t)(n_all + n) * sizeof *m) : all;
        if (n > 0 && !m) {
            rc = -1;
        } else if (n > 0) {
            memcpy(m + n_all, a, (size_t)n * sizeof *m);
            all = m;
            n_all += n;
        }
        free(a);
    }
    if (sum)
        *sum = s0;
    if (rc != 0) {
        free(all);
        return -1;
    }
    qsort(all, (size_t)n_all, sizeof *all, cmp_act); /* each list is sorted; tens of entries */
    int k = 0;
    for (int i = 0; i < n_all; i++) {
        if (k > 0 && all[k - 1].adapter_id == all[i].adapter_id) {
            all[k - 1].running += all[i].running;
            all[k - 1].waiting += all[i].waiting;
        } else {
            all[k++] = all[i];
        }
    }
    if (k == 0) {
        free(all);
        all = NULL;
    }
    *out = all;
    return k;
}

int lg_dp_adapter_load_times(lg_dp *dp, float *ms, int cap)
{
    int got = 0;
    for (int k = 0; k < dp->n; k++)
        got += lg_engine_adapter_load_times(dp->e[k], ms + got, (cap - got) / (dp->n - k));
    return got;
}

void lg_dp_routing_get(lg_dp *dp, int k, lg_dp_routing *out)
{
    memset(out, 0, sizeof *out);
    if (dp->n == 1 || k < 0 || k >= dp->n)
        return;
    out->outstanding = atomic_load(&dp->outstanding[k]);
    out->routed = atomic_load(&dp->routed[k]);
    out->spilled = atomic_load(&dp->spilled[k]);
}
