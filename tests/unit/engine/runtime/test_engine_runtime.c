/*
 * test_engine_runtime.c — the serving runtime of engine/runtime/engine.h end to end
 * on the CPU backend, with the tiny Llama of tests/golden/lora_fixtures/base
 * (2 layers, hidden 128, vocab 320) and the PEFT adapters next to it. No
 * tokenizer: prompts are token ids. Run from the repository root.
 *
 * What is checked, and why:
 *   (a) seeded random workloads — random prompts (some sharing long
 *       prefixes), lengths, adapters, tenants, salts, sampling (greedy and
 *       seeded temperature), stop ids, submit times, cancels from the test
 *       and from inside on_token, adapter evictions, tenant purges of the
 *       prefix cache (lg_engine_purge_tenant) — on a small pool so
 *       preemption and eviction happen. Invariants: every accepted request
 *       gets on_finish exactly once and nothing after it; on_token indices
 *       are contiguous from 0; usage.completion_tokens == tokens delivered,
 *       prompt_tokens exact (the whole prompt once a token came, however
 *       often it was recomputed; a request cancelled before that, at most
 *       the prompt: test_engine_billing.c checks the figures), cached_tokens
 *       a whole number of pages below the prompt and not above prompt_tokens;
 *       a cancel finishes the request (CANCELLED) at the very next
 *       step; every request's tokens equal (cancelled: are a prefix of) the
 *       tokens the same request produces alone on a big pool with no prefix
 *       cache; no page leaks once all finish: nothing pinned, every KV page
 *       left is a cached prefix page, and after evicting everything cached
 *       the pool is empty and the tree has no nodes;
 *   (b) preemption under a tiny pool keeps greedy output identical to a
 *       big-pool run (with and without the prefix cache);
 *   (c) two requests of one namespace that arrive together share the prefix
 *       computation: the second waits for the first's pages ("wait for
 *       sharing" in engine/runtime/scheduler.c) and reports cached_tokens = the full
 *       pages before its last token; other tenants / salts / adapters are
 *       neither deferred nor served those pages;
 *   (d) adapter replace while requests are in flight: they finish on the old
 *       version (output equals the old adapter's), new ones get the new
 *       version, submits of the old id are refused, the old version goes
 *       away (pages released) after its last request, and the prefix cache
 *       never serves one version's KV to the other; remove while in flight:
 *       in-flight requests finish, new submits are refused with a clear
 *       error;
 *   (e) the engine thread: start, submits from another thread, callbacks
 *       arrive, an idle engine sleeps (process CPU time over 300 ms of idle
 *       well under 50 ms: not a performance figure, only "no busy wait"),
 *       a submit wakes it, stop; lg_engine_free finishes what is left with
 *       CANCELLED "engine shut down"; bursts of one-token submits from two
 *       threads: the id submit returns is the callbacks' id (under ASan this
 *       caught submit reading the request after the engine thread freed it).
 * LG_SOAK=N in the environment adds N random workloads of random shapes
 * (seed, pool, budget, max_seqs, sharing, VTC/FCFS) for soak runs.
 * The pool is inspected through lg_engine_get_stats; the final "evict
 * everything" step reaches into engine_internal.h (the pool and the tree)
 * from the owner thread.
 */
#include "engine/runtime/engine_internal.h"
#include "tests/unit/test.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define FIX "tests/golden/lora_fixtures/"
#define CTX 128
#define MAXTOK CTX

static lg_weights *g_w;
static lg_backend *g_be;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_finished; /* on_finish calls (under g_mu) */

static const char *ADAPTERS[] = {"r8_rslora_attn", "r16_all_linear", "r1_qv", "r8_layer1"};
#define N_AD ((int)(sizeof ADAPTERS / sizeof ADAPTERS[0]))

/* ---- a request as the test sees it ---------------------------------------------------------- */

typedef struct treq {
    lg_engine *e;
    int64_t id, cb_id;
    bool accepted;
    /* what was asked */
    int32_t prompt[CTX];
    int n_prompt, max_tokens, adapter; /* adapter: index into ADAPTERS + 1, 0 = base */
    char tenant[16], salt[16];
    float temperature;
    uint64_t seed;
    bool ignore_eos;
    int32_t stop_id;                   /* -1: none */
    int self_cancel_after;             /* on_token cancels (STOP) after this many tokens; -1: never */
    bool cancelled;                    /* the test called lg_engine_cancel */
    int slow_us;                       /* on_token sleeps this long (a slow consumer, for timing windows) */
    /* what came back */
    int n_fin, n_tok, bad_index, after_finish;
    int32_t toks[MAXTOK];
    lg_finish_reason reason;
    lg_usage usage;
    char err[256];
} treq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    treq *t = user;
    pthread_mutex_lock(&g_mu);
    t->cb_id = id;
    if (t->n_fin)
        t->after_finish++;
    if (o->index != t->n_tok)
        t->bad_index++;
    if (t->n_tok < MAXTOK)
        t->toks[t->n_tok] = o->token;
    t->n_tok++;
    bool self = t->self_cancel_after >= 0 && t->n_tok == t->self_cancel_after + 1;
    pthread_mutex_unlock(&g_mu);
    if (t->slow_us)
        usleep((useconds_t)t->slow_us);
    if (self) /* a stop string matched, as the gateway does it */
        lg_engine_cancel(t->e, id, LG_FINISH_STOP);
}

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    treq *t = user;
    pthread_mutex_lock(&g_mu);
    t->cb_id = id;
    t->n_fin++;
    t->reason = reason;
    t->usage = *u;
    snprintf(t->err, sizeof t->err, "%s", error ? error : "");
    g_finished++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* ---- engine helpers ------------------------------------------------------------------------ */

typedef struct eng {
    lg_engine *e;
    int ad[N_AD]; /* version ids of ADAPTERS */
} eng;

static lg_sched_policy g_policy = LG_SCHED_VTC; /* of the engines mk_engine makes */
static lg_spec_opts g_spec;                      /* their speculative decoding (off) */

static void mk_engine(eng *g, int n_pages, int budget, int max_seqs, lg_prefix_sharing sh)
{
    lg_err err = {{0}};
    lg_engine_opts o = {
        .model = {.max_step_tokens = budget, .max_seqs = max_seqs, .page_tokens = 16, .max_context = CTX,
                  .lora_max_rank = 16},
        .n_pages = n_pages,
        .prefix_sharing = sh,
        .policy = g_policy,
        .spec = g_spec,
    };
    memset(g, 0, sizeof *g);
    int rc = lg_engine_create(g_be, g_w, &o, &g->e, &err);
    CHECK_MSG(rc == 0, "engine: %s", err.msg);
    if (rc)
        exit(1);
    for (int i = 0; i < N_AD; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "%s", ADAPTERS[i]);
        rc = lg_engine_add_adapter(g->e, ADAPTERS[i], dir, &g->ad[i], &err);
        CHECK_MSG(rc == 0, "%s: %s", dir, err.msg);
    }
}

static int submit(eng *g, treq *t, lg_err *err)
{
    lg_request_params p = {
        .prompt = t->prompt, .n_prompt = t->n_prompt, .max_tokens = t->max_tokens,
        .sampling = {.temperature = t->temperature, .top_p = 1, .seed = t->seed},
        .ignore_eos = t->ignore_eos, .adapter_id = t->adapter ? g->ad[t->adapter - 1] : 0,
        .tenant = t->tenant, .cache_salt = t->salt, .cb = {on_token, on_finish}, .user = t,
    };
    if (t->stop_id >= 0) {
        p.stop_ids[0] = t->stop_id;
        p.n_stop_ids = 1;
    }
    t->e = g->e;
    int rc = lg_engine_submit(g->e, &p, &t->id, err);
    t->accepted = rc == 0;
    return rc;
}

/* Steps until nothing is outstanding (owner thread). Returns the steps. */
static int run_idle(lg_engine *e)
{
    lg_err err = {{0}};
    int steps = 0;
    for (int guard = 0; lg_engine_busy(e) && guard < 200000; guard++) {
        int rc = lg_engine_step(e, &err);
        CHECK_MSG(rc >= 0, "step: %s", err.msg);
        if (rc == 0)
            lg_engine_wait(e, 0.002); /* an adapter is loading */
        steps++;
    }
    CHECK_MSG(!lg_engine_busy(e), "still busy after %d steps", steps);
    return steps;
}

static treq *new_req(const int32_t *prompt, int n, int max_tokens, int adapter, const char *tenant)
{
    treq *t = calloc(1, sizeof *t);
    memcpy(t->prompt, prompt, (size_t)n * sizeof *prompt);
    t->n_prompt = n;
    t->max_tokens = max_tokens;
    t->adapter = adapter;
    snprintf(t->tenant, sizeof t->tenant, "%s", tenant ? tenant : "");
    t->ignore_eos = true;
    t->stop_id = -1;
    t->self_cancel_after = -1;
    return t;
}

/* The same request alone on reference engine ref; *out gets its tokens. */
static void replay(eng *ref, const treq *t, treq *out)
{
    *out = *t;
    out->n_fin = out->n_tok = out->bad_index = out->after_finish = 0;
    out->self_cancel_after = -1;
    lg_err err = {{0}};
    CHECK_MSG(submit(ref, out, &err) == 0, "replay: %s", err.msg);
    run_idle(ref->e);
}

static bool same_tokens(const treq *a, const treq *b, bool prefix_only)
{
    if (prefix_only ? a->n_tok > b->n_tok : a->n_tok != b->n_tok)
        return false;
    int n = a->n_tok < MAXTOK ? a->n_tok : MAXTOK;
    return !memcmp(a->toks, b->toks, (size_t)n * sizeof(int32_t));
}

static lg_engine_stats stats(lg_engine *e)
{
    lg_engine_stats s;
    lg_engine_get_stats(e, &s);
    return s;
}

/* After everything finished: nothing pinned, KV pages only in the prefix
 * cache; then evict everything cached and find the pool empty. Owner thread. */
static void check_no_leaks(lg_engine *e, const char *what)
{
    lg_err err = {{0}};
    lg_engine_step(e, &err); /* publishes the counters */
    lg_engine_stats s = stats(e);
    CHECK_MSG(s.queued == 0 && s.running == 0, "%s: %d queued, %d running", what, s.queued, s.running);
    CHECK_MSG(s.pages_free + s.pages_cached == s.pages_total,
              "%s: pages pinned or leaked: free %d + cached %d != total %d (kv %d, adapter %d, prefix %d)", what,
              s.pages_free, s.pages_cached, s.pages_total, s.pages_kv, s.pages_adapter, s.pages_prefix);
    CHECK_MSG(s.pages_kv == s.pages_prefix, "%s: %d KV pages but %d in the prefix cache", what, s.pages_kv,
              s.pages_prefix);
    int avail = lg_page_pool_n_available(e->pool);
    CHECK(avail == s.pages_total);
    int32_t *pg = malloc((size_t)avail * sizeof *pg);
    CHECK(lg_page_pool_alloc(e->pool, LG_PAGE_KV, avail, pg) == 0);
    lg_page_pool_release(e->pool, pg, avail);
    free(pg);
    lg_pool_stats ps;
    lg_page_pool_stats(e->pool, &ps);
    CHECK_MSG(ps.pages_free == ps.pages_total && ps.pages_kv == 0 && ps.pages_adapter == 0 && ps.pages_cached == 0,
              "%s: after evicting everything: free %d of %d", what, ps.pages_free, ps.pages_total);
    if (e->prefix) {
        lg_prefix_cache_stats cs;
        lg_prefix_cache_get_stats(e->prefix, &cs);
        CHECK_MSG(cs.nodes == 0 && cs.namespaces == 0, "%s: tree keeps %d nodes, %d namespaces", what, cs.nodes,
                  cs.namespaces);
    }
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static int rnd(uint64_t *s, int lo, int hi) { return lo + (int)(rng(s) % (uint64_t)(hi - lo + 1)); }

static void fill_random(int32_t *p, int n, uint64_t *s)
{
    for (int i = 0; i < n; i++) p[i] = rnd(s, 3, 319);
}

/* ---- (a) random workloads ---------------------------------------------------------------------- */

/* pressure: the pool is small for the batch, so preemptions and adapter
 * evictions must have happened (the paths were exercised) */
static void random_workload(uint64_t seed0, int n_req, int n_pages, int budget, int max_seqs, lg_prefix_sharing sh,
                            bool pressure, eng *ref)
{
    uint64_t seed = seed0, pseed = seed0 ^ 0x5bd1e9955bd1e995ull;
    eng g;
    mk_engine(&g, n_pages, budget, max_seqs, sh);
    int32_t shared[3][64];
    for (int i = 0; i < 3; i++) fill_random(shared[i], 64, &seed);
    static const char *TEN[] = {"", "t1", "t2"}, *SALT[] = {"", "", "s"};
    treq **rq = calloc((size_t)n_req, sizeof *rq);
    int submitted = 0, step = 0, n_cancels = 0, cancel_late = 0, n_rejected = 0;
    lg_err err = {{0}};
    while (submitted < n_req || lg_engine_busy(g.e)) {
        /* arrivals: 0-3 per step */
        for (int k = rnd(&seed, 0, 3); k > 0 && submitted < n_req; k--) {
            treq *t = calloc(1, sizeof *t);
            rq[submitted++] = t;
            int n, sp = -1;
            if (rnd(&seed, 0, 1)) { /* a shared prefix of 16..64 tokens, then a random tail */
                int pre = rnd(&seed, 16, 64);
                sp = rnd(&seed, 0, 2);
                memcpy(t->prompt, shared[sp], (size_t)pre * sizeof(int32_t));
                n = pre + rnd(&seed, 1, 30);
                fill_random(t->prompt + pre, n - pre, &seed);
            } else {
                n = rnd(&seed, 1, 90);
                fill_random(t->prompt, n, &seed);
            }
            t->n_prompt = n;
            t->max_tokens = rnd(&seed, 1, 40); /* may run into the context limit: LENGTH */
            if (sp >= 0 && rnd(&seed, 0, 1)) { /* the shared prefix's usual namespace: hits are likely */
                t->adapter = sp;
                snprintf(t->tenant, sizeof t->tenant, "%s", TEN[sp]);
            } else {
                t->adapter = rnd(&seed, 0, N_AD);
                snprintf(t->tenant, sizeof t->tenant, "%s", TEN[rnd(&seed, 0, 2)]);
                snprintf(t->salt, sizeof t->salt, "%s", SALT[rnd(&seed, 0, 2)]);
            }
            t->temperature = rnd(&seed, 0, 2) ? 0.f : 0.8f;
            t->seed = rng(&seed);
            t->ignore_eos = rnd(&seed, 0, 3) != 0;
            t->stop_id = rnd(&seed, 0, 4) == 0 ? rnd(&seed, 3, 319) : -1;
            t->self_cancel_after = rnd(&seed, 0, 9) == 0 ? rnd(&seed, 0, 5) : -1;
            if (submit(&g, t, &err) != 0) {
                CHECK_MSG(0, "submit refused: %s", err.msg);
                n_rejected++;
            }
        }
        /* cancels: a random earlier request (finished or not) */
        treq *c = NULL;
        bool c_live = false;
        if (submitted && rnd(&seed, 0, 9) == 0) {
            c = rq[rnd(&seed, 0, submitted - 1)];
            pthread_mutex_lock(&g_mu);
            /* live, and not already stopped from its own on_token */
            c_live = c->accepted && c->n_fin == 0 && !(c->self_cancel_after >= 0 && c->n_tok > c->self_cancel_after);
            pthread_mutex_unlock(&g_mu);
            lg_engine_cancel(g.e, c->id, LG_FINISH_CANCELLED);
            if (c_live) {
                c->cancelled = true;
                n_cancels++;
            }
        }
        if (rnd(&seed, 0, 40) == 0)
            lg_engine_cancel(g.e, 1000000 + step, LG_FINISH_CANCELLED); /* unknown id: ignored */
        /* an adapter drops out of the pool (and sometimes the host tier) */
        if (rnd(&seed, 0, 30) == 0)
            lg_engine_evict_adapter(g.e, g.ad[rnd(&seed, 0, N_AD - 1)], rnd(&seed, 0, 1));
        /* a tenant's cached prefixes are purged (a deleted tenant, whose
         * requests in flight run on: outputs and usage must not change) */
        if (rnd(&pseed, 0, 60) == 0) /* its own generator: the workload is the one it was before purges */
            CHECK(lg_engine_purge_tenant(g.e, TEN[rnd(&pseed, 0, 2)], &err) == 0);

        int rc = lg_engine_step(g.e, &err);
        CHECK_MSG(rc >= 0, "step: %s", err.msg);
        if (rc == 0 && lg_engine_busy(g.e))
            lg_engine_wait(g.e, 0.002);
        step++;
        /* a cancel takes effect at the next step: finished, CANCELLED */
        if (c_live && !(c->n_fin == 1 && c->reason == LG_FINISH_CANCELLED)) {
            cancel_late++;
            fprintf(stderr, "request %lld cancelled before step %d: finished %d times, reason %s\n",
                    (long long)c->id, step, c->n_fin, lg_finish_reason_name(c->reason));
        }
        if (step > 100000)
            break;
    }
    CHECK_MSG(!lg_engine_busy(g.e), "seed %llx: still busy after %d steps", (unsigned long long)seed0, step);
    CHECK(cancel_late == 0);
    CHECK(n_rejected == 0);

    /* per-request invariants, and the same request alone on the reference */
    int bad_once = 0, bad_idx = 0, bad_usage = 0, bad_tokens = 0, n_cancelled = 0, n_stop = 0, n_len = 0;
    int n_cached = 0, n_self = 0;
    for (int i = 0; i < submitted; i++) {
        treq *t = rq[i];
        if (t->n_fin != 1 || t->after_finish || t->cb_id != t->id)
            bad_once++;
        if (t->bad_index)
            bad_idx++;
        const lg_usage *u = &t->usage;
        bool len_ok = t->reason != LG_FINISH_LENGTH || t->n_tok == t->max_tokens || t->n_prompt + t->n_tok == CTX;
        bool stop_ok = t->reason != LG_FINISH_STOP || t->self_cancel_after >= 0 ||
                       (t->n_tok > 0 && (t->toks[t->n_tok - 1] == t->stop_id ||
                                         (!t->ignore_eos && t->toks[t->n_tok - 1] == 2)));
        bool times_ok = u->t_finished >= u->t_queued && (t->n_tok == 0 || u->t_first_token >= u->t_queued);
        /* billed prompt: all of it once a token came (also after preemptions); a
         * request cancelled before that, what was prefilled (0 in the queue) */
        bool prompt_ok = t->n_tok > 0 ? u->prompt_tokens == t->n_prompt
                                      : t->reason == LG_FINISH_CANCELLED && u->prompt_tokens >= 0 &&
                                            u->prompt_tokens <= t->n_prompt;
        if (u->completion_tokens != t->n_tok || !prompt_ok || u->prompt_len != t->n_prompt || u->cached_tokens % 16 ||
            u->cached_tokens < 0 || u->cached_tokens >= t->n_prompt || u->cached_tokens > u->prompt_tokens ||
            !len_ok || !stop_ok || !times_ok ||
            (t->reason == LG_FINISH_CANCELLED && !t->cancelled) || t->reason == LG_FINISH_ERROR) {
            bad_usage++;
            fprintf(stderr, "request %lld: reason %s (%s), %d tokens, usage %d/%d/%d, prompt %d, max %d\n",
                    (long long)t->id, lg_finish_reason_name(t->reason), t->err, t->n_tok, u->prompt_tokens,
                    u->completion_tokens, u->cached_tokens, t->n_prompt, t->max_tokens);
        }
        n_cancelled += t->reason == LG_FINISH_CANCELLED;
        n_stop += t->reason == LG_FINISH_STOP;
        n_len += t->reason == LG_FINISH_LENGTH;
        n_cached += u->cached_tokens > 0;
        n_self += t->self_cancel_after >= 0 && t->reason == LG_FINISH_STOP;
        treq r;
        replay(ref, t, &r);
        bool cut = t->reason == LG_FINISH_CANCELLED || t->self_cancel_after >= 0;
        if (!same_tokens(t, &r, cut)) {
            bad_tokens++;
            fprintf(stderr, "request %lld (adapter %d, T %.1f, cached %d): %d tokens, alone %d; first differing at",
                    (long long)t->id, t->adapter, t->temperature, u->cached_tokens, t->n_tok, r.n_tok);
            for (int k = 0; k < t->n_tok && k < r.n_tok; k++)
                if (t->toks[k] != r.toks[k]) {
                    fprintf(stderr, " %d", k);
                    break;
                }
            fputc('\n', stderr);
        }
    }
    lg_engine_stats s = stats(g.e);
    printf("random seed %llx, %d pages, budget %d, sharing %s: %d requests in %d steps; %d cancelled (%d by the "
           "test), %d stop (%d from on_token), %d length; %d with cached tokens; %lld preemptions, %lld adapter "
           "loads, %lld adapter evictions; speculation %s: %lld rows verified, %lld proposed, %lld accepted\n",
           (unsigned long long)seed0, n_pages, budget, lg_prefix_sharing_name(sh), submitted, step, n_cancelled,
           n_cancels, n_stop, n_self, n_len, n_cached, (long long)s.preemptions, (long long)s.adapter_loads,
           (long long)s.adapter_evictions, lg_spec_mode_name(g_spec.mode), (long long)s.spec_verify_rows,
           (long long)s.spec_proposed, (long long)s.spec_accepted);
    if (g_spec.mode != LG_SPEC_OFF) /* verification steps happened, and some proposals were taken */
        CHECK(s.spec_verify_rows > 0 && s.spec_accepted > 0);
    if (g.e->dpool) /* the draft model's KV pages all came back */
        CHECK_MSG(lg_page_pool_n_available(g.e->dpool) == lg_page_pool_n_pages(g.e->dpool), "draft pool: %d of %d free",
                  lg_page_pool_n_available(g.e->dpool), lg_page_pool_n_pages(g.e->dpool));
    CHECK_MSG(bad_once == 0, "%d requests did not get exactly one on_finish, last", bad_once);
    CHECK_MSG(bad_idx == 0, "%d requests with non-contiguous token indices", bad_idx);
    CHECK_MSG(bad_usage == 0, "%d requests with wrong usage / finish reason", bad_usage);
    CHECK_MSG(bad_tokens == 0, "%d requests differ from the same request alone", bad_tokens);
    CHECK(s.requests_finished == submitted);
    /* the workload is meant to exercise these paths */
    CHECK(n_cancels > 0 && n_self > 0 && n_len > 0);
    if (sh != LG_PREFIX_OFF)
        CHECK(n_cached > 0);
    if (pressure)
        CHECK(s.preemptions > 0 && s.adapter_evictions > 0);
    CHECK(s.adapter_loads >= N_AD);
    check_no_leaks(g.e, "random workload");
    for (int i = 0; i < submitted; i++) free(rq[i]);
    free(rq);
    lg_engine_free(g.e);
}

/* Cancel everything in flight: the next step frees every page they held. */
static void test_cancel_frees(void)
{
    eng g;
    mk_engine(&g, 64, 64, 8, LG_PREFIX_TENANT);
    uint64_t seed = 99;
    treq *t[12];
    lg_err err = {{0}};
    for (int i = 0; i < 12; i++) {
        int32_t p[100];
        fill_random(p, 100, &seed);
        t[i] = new_req(p, 20 + 7 * i, 60, i % (N_AD + 1), i % 2 ? "a" : "b");
        CHECK(submit(&g, t[i], &err) == 0);
    }
    for (int k = 0; k < 6; k++) {
        lg_engine_step(g.e, &err);
        lg_engine_wait(g.e, 0.002);
    }
    lg_engine_stats s = stats(g.e);
    CHECK_MSG(s.running > 0 && s.pages_free + s.pages_cached < s.pages_total, "running %d", s.running);
    for (int i = 0; i < 12; i++) lg_engine_cancel(g.e, t[i]->id, LG_FINISH_CANCELLED);
    lg_engine_step(g.e, &err);
    s = stats(g.e);
    int ok = 0;
    for (int i = 0; i < 12; i++) ok += t[i]->n_fin == 1 && t[i]->reason == LG_FINISH_CANCELLED;
    CHECK_MSG(ok == 12, "%d of 12 cancelled at the next step", ok);
    CHECK(!lg_engine_busy(g.e));
    CHECK_MSG(s.running == 0 && s.queued == 0 && s.pages_free + s.pages_cached == s.pages_total,
              "after the cancel step: running %d, free %d cached %d total %d", s.running, s.pages_free,
              s.pages_cached, s.pages_total);
    check_no_leaks(g.e, "cancel");
    for (int i = 0; i < 12; i++) free(t[i]);
    lg_engine_free(g.e);
}

/* The adapters of live requests (lg_engine_adapter_activity, /metrics' vLLM LoRA lists): per adapter
 * version, its running + waiting requests are the ones submitted with it, their sums are the snapshot's
 * running and queued (every request here has an adapter), ids ascend; none before the first step (the
 * requests are still in the inbox) and none once all finished. */
static void test_adapter_activity(void)
{
    eng g;
    mk_engine(&g, 64, 64, 2, LG_PREFIX_TENANT);
    static const int which[] = {1, 1, 2, 3, 4, 1}; /* index into ADAPTERS + 1 */
    enum { N = sizeof which / sizeof which[0] };
    treq *t[N];
    lg_err err = {{0}};
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) {
        int32_t p[40];
        fill_random(p, 40, &seed);
        t[i] = new_req(p, 40, 30, which[i], "a");
        CHECK(submit(&g, t[i], &err) == 0);
    }
    lg_adapter_activity *act = NULL;
    lg_engine_stats s;
    CHECK(lg_engine_adapter_activity(g.e, &s, &act) == 0 && !act);
    for (int k = 0; k < 2000 && stats(g.e).running < 2; k++) { /* until two run (adapters load meanwhile) */
        CHECK(lg_engine_step(g.e, &err) >= 0);
        lg_engine_wait(g.e, 0.002);
    }
    int n = lg_engine_adapter_activity(g.e, &s, &act);
    CHECK_MSG(n == N_AD, "%d adapters with requests, want %d", n, N_AD);
    int run = 0, wait = 0;
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int j = 0; j < N; j++) want += g.ad[which[j] - 1] == act[i].adapter_id;
        CHECK_MSG(act[i].running + act[i].waiting == want, "adapter %d: %d running + %d waiting, want %d",
                  act[i].adapter_id, act[i].running, act[i].waiting, want);
        CHECK(i == 0 || act[i - 1].adapter_id < act[i].adapter_id);
        run += act[i].running;
        wait += act[i].waiting;
    }
    CHECK_MSG(run == s.running && wait == s.queued && s.running == 2, "lists %d/%d, stats %d/%d", run, wait,
              s.running, s.queued);
    CHECK(s.max_step_adapters == 2);
    free(act);
    run_idle(g.e);
    CHECK(lg_engine_adapter_activity(g.e, NULL, &act) == 0 && !act);
    for (int i = 0; i < N; i++) free(t[i]);
    lg_engine_free(g.e);
}

/* ---- (b) preemption under a tiny pool --------------------------------------------------------------- */

static void run_batch(eng *g, treq **t, int n)
{
    lg_err err = {{0}};
    for (int i = 0; i < n; i++) {
        t[i]->n_fin = t[i]->n_tok = 0;
        CHECK_MSG(submit(g, t[i], &err) == 0, "%s", err.msg);
    }
    run_idle(g->e);
}

static void test_preemption(void)
{
    enum { N = 8 };
    uint64_t seed = 4242;
    treq *big[N], *tiny[N], *tiny_off[N];
    int32_t sys[48];
    fill_random(sys, 48, &seed);
    for (int i = 0; i < N; i++) {
        int32_t p[80];
        int n = 30 + rnd(&seed, 0, 30);
        memcpy(p, sys, sizeof sys); /* half of them share a 48-token system prompt */
        fill_random(i % 2 ? p : p + 48, i % 2 ? n : n - 48, &seed);
        big[i] = new_req(p, n, 48, i % 3 == 0 ? 1 : i % 3 == 1 ? 3 : 0, "t");
        tiny[i] = new_req(p, n, 48, big[i]->adapter, "t");
        tiny_off[i] = new_req(p, n, 48, big[i]->adapter, "t");
    }
    eng g;
    mk_engine(&g, 400, 256, 8, LG_PREFIX_TENANT);
    run_batch(&g, big, N);
    CHECK(stats(g.e).preemptions == 0);
    lg_engine_free(g.e);

    /* 18 pages (r16_all_linear alone needs 16): one request (up to 7 KV
     * pages) plus its adapter fits, eight do not */
    const lg_prefix_sharing modes[2] = {LG_PREFIX_TENANT, LG_PREFIX_OFF};
    for (int m = 0; m < 2; m++) {
        treq **t = m ? tiny_off : tiny;
        mk_engine(&g, 18, 256, 8, modes[m]);
        run_batch(&g, t, N);
        lg_engine_stats s = stats(g.e);
        printf("tiny pool (%d pages, prefix %s): %lld preemptions, %lld adapter evictions\n", s.pages_total,
               lg_prefix_sharing_name(modes[m]), (long long)s.preemptions, (long long)s.adapter_evictions);
        CHECK_MSG(s.preemptions > 0, "a pool of %d pages did not preempt", s.pages_total);
        for (int i = 0; i < N; i++) {
            CHECK(t[i]->n_fin == 1 && t[i]->reason == LG_FINISH_LENGTH && t[i]->n_tok == 48);
            CHECK_MSG(same_tokens(t[i], big[i], false), "request %d (prefix %s): output differs after preemption",
                      i, lg_prefix_sharing_name(modes[m]));
        }
        check_no_leaks(g.e, "tiny pool");
        lg_engine_free(g.e);
    }
    for (int i = 0; i < N; i++) free(big[i]), free(tiny[i]), free(tiny_off[i]);
}

/* ---- (c) two requests of one namespace arriving together ---------------------------------------------- */

static void test_shared_computation(int budget)
{
    eng g;
    mk_engine(&g, 200, budget, 8, LG_PREFIX_TENANT);
    uint64_t seed = 7;
    int32_t p[80];
    fill_random(p, 80, &seed);
    treq *a = new_req(p, 80, 8, 1, "t");
    treq *b = new_req(p, 80, 8, 1, "t");        /* same namespace: shares */
    treq *other = new_req(p, 80, 8, 1, "u");    /* other tenant */
    treq *salted = new_req(p, 80, 8, 1, "t");   /* same tenant, a salt */
    snprintf(salted->salt, sizeof salted->salt, "s");
    treq *other_ad = new_req(p, 80, 8, 2, "t"); /* same tenant, other adapter */
    treq *all[5] = {a, b, other, salted, other_ad};
    lg_err err = {{0}};
    /* make the adapters resident first, so only prefix sharing delays anybody */
    for (int i = 0; i < N_AD; i++) {
        int32_t one = 5;
        treq *w = new_req(&one, 1, 1, i + 1, "warm");
        CHECK(submit(&g, w, &err) == 0);
        run_idle(g.e);
        free(w);
    }
    lg_engine_stats s0 = stats(g.e);
    for (int i = 0; i < 5; i++) CHECK(submit(&g, all[i], &err) == 0);
    int steps_to_first = (80 + budget - 1) / budget; /* prefill steps of one 80-token prompt */
    for (int k = 0; k < steps_to_first; k++) lg_engine_step(g.e, &err);
    /* a has its first token. With a budget for all five prompts in one
     * step, the other namespaces started with it, while b waited for a's
     * pages (and starts now). With a small budget, b is admitted once a's
     * first 4 pages are in the tree, in the step a's prefill finishes. */
    CHECK_MSG(a->n_tok == 1, "budget %d: a has %d tokens after %d steps", budget, a->n_tok, steps_to_first);
    if (budget >= 400) {
        CHECK_MSG(b->n_tok == 0, "budget %d: b started before a's pages were computed", budget);
        CHECK(other->n_tok == 1 && salted->n_tok == 1 && other_ad->n_tok == 1); /* not deferred */
        lg_engine_step(g.e, &err);
        CHECK(b->n_tok == 1);
    }
    run_idle(g.e);
    lg_engine_stats s = stats(g.e);
    printf("budget %d: cached_tokens a %d b %d other tenant %d salted %d other adapter %d\n", budget,
           a->usage.cached_tokens, b->usage.cached_tokens, other->usage.cached_tokens, salted->usage.cached_tokens,
           other_ad->usage.cached_tokens);
    CHECK(a->usage.cached_tokens == 0);
    CHECK_MSG(b->usage.cached_tokens == 64, "b: %d cached tokens, want 64 (the 4 full pages before token 79)",
              b->usage.cached_tokens);
    CHECK(other->usage.cached_tokens == 0 && salted->usage.cached_tokens == 0 && other_ad->usage.cached_tokens == 0);
    CHECK(same_tokens(a, b, false) && same_tokens(a, other, false) && same_tokens(a, salted, false));
    /* one computation of the shared pages: 5 x 80 prompt tokens, 64 reused */
    CHECK(s.prompt_tokens - s0.prompt_tokens == 400 && s.cached_tokens - s0.cached_tokens == 64);
    CHECK(s.prefix_hits - s0.prefix_hits == 1 && s.prefix_lookups - s0.prefix_lookups == 5);
    /* VTC service: computed prompt tokens x 1 + output tokens x 2 */
    lg_tenant_stats ts;
    CHECK(lg_engine_tenant_stats(g.e, "u", &ts) == 0 && ts.service == 80 + 2 * 8 && ts.queued == 0 && ts.running == 0);
    CHECK_MSG(lg_engine_tenant_stats(g.e, "t", &ts) == 0 && ts.service == 3 * (80 + 16) + (80 - 64) + 16,
              "tenant t: service %g", ts.service);
    CHECK(lg_engine_tenant_stats(g.e, "nobody", &ts) == -1);

    /* later, a request that extends a's prompt reuses all 5 of its pages */
    int32_t q[100];
    memcpy(q, p, sizeof p);
    fill_random(q + 80, 20, &seed);
    treq *c = new_req(q, 100, 4, 1, "t");
    CHECK(submit(&g, c, &err) == 0);
    run_idle(g.e);
    CHECK_MSG(c->usage.cached_tokens == 80, "c: %d cached tokens, want 80", c->usage.cached_tokens);
    check_no_leaks(g.e, "sharing");
    for (int i = 0; i < 5; i++) free(all[i]);
    free(c);
    lg_engine_free(g.e);
}

/* ---- (d) adapter replace and remove while requests are in flight ----------------------------------------- */

static void test_replace_remove(void)
{
    lg_err err = {{0}};
    eng ref;
    mk_engine(&ref, 200, 256, 8, LG_PREFIX_OFF);
    uint64_t seed = 31337;
    int32_t p[60], q[45];
    fill_random(p, 60, &seed);
    fill_random(q, 45, &seed);
    /* references: r8_rslora_attn (index 1) is the old version of "x", r16_all_linear (2) the new */
    treq *ref_old_p = new_req(p, 60, 24, 1, "t"), *ref_old_q = new_req(q, 45, 24, 1, "t");
    treq *ref_new_p = new_req(p, 60, 24, 2, "t");
    treq *rr[3] = {ref_old_p, ref_old_q, ref_new_p};
    run_batch(&ref, rr, 3);
    CHECK(!same_tokens(ref_old_p, ref_new_p, false)); /* else the test could not tell versions apart */
    lg_engine_free(ref.e);

    eng g;
    mk_engine(&g, 200, 32, 8, LG_PREFIX_TENANT); /* budget 32: prefill takes steps */
    int v1;
    CHECK(lg_engine_add_adapter(g.e, "x", FIX "r8_rslora_attn", &v1, &err) == 0);
    /* warm the prefix cache with v1's KV of p */
    treq *warm = new_req(p, 60, 24, 0, "t");
    g.ad[0] = v1;
    warm->adapter = 1;
    run_batch(&g, &warm, 1);
    CHECK(same_tokens(warm, ref_old_p, false));

    treq *r1 = new_req(p, 60, 24, 1, "t"), *r1b = new_req(q, 45, 24, 1, "t");
    CHECK(submit(&g, r1, &err) == 0 && submit(&g, r1b, &err) == 0);
    for (int k = 0; k < 4; k++) lg_engine_step(g.e, &err);
    CHECK_MSG(r1->n_tok > 0 && r1->n_fin == 0 && r1b->n_fin == 0, "in flight: %d tokens", r1->n_tok);

    /* replace "x" while r1, r1b run */
    int v2;
    CHECK(lg_engine_add_adapter(g.e, "x", FIX "r16_all_linear", &v2, &err) == 0);
    CHECK(v2 != v1 && lg_engine_find_adapter(g.e, "x") == v2);
    lg_adapter_info info;
    CHECK(lg_engine_adapter_info(g.e, v1, &info) == 0 && info.retired && info.requests == 2);
    treq *refused = new_req(p, 60, 4, 1, "t");
    CHECK(submit(&g, refused, &err) != 0);
    CHECK_MSG(strstr(err.msg, "replaced or removed") != NULL, "old version's submit: %s", err.msg);
    g.ad[0] = v2;
    treq *r2 = new_req(p, 60, 24, 1, "t"); /* same prompt, same tenant, the new version */
    CHECK(submit(&g, r2, &err) == 0);
    run_idle(g.e);
    CHECK(r1->n_fin == 1 && r1->reason == LG_FINISH_LENGTH && r1b->n_fin == 1 && r2->n_fin == 1);
    CHECK_MSG(same_tokens(r1, ref_old_p, false), "in-flight request did not finish on the old version");
    CHECK(same_tokens(r1b, ref_old_q, false));
    CHECK_MSG(same_tokens(r2, ref_new_p, false), "new request did not get the new version");
    CHECK_MSG(r1->usage.cached_tokens == 48, "r1 reused %d tokens of warm's KV, want 48", r1->usage.cached_tokens);
    CHECK_MSG(r2->usage.cached_tokens == 0, "the new version was served %d cached tokens of the old one",
              r2->usage.cached_tokens);
    /* the old version is gone: id unknown, pool pages released */
    CHECK(lg_engine_adapter_info(g.e, v1, &info) == -1);
    lg_engine_step(g.e, &err);
    lg_engine_stats s = stats(g.e);
    CHECK_MSG(s.adapters_registered == N_AD + 1, "%d versions registered", s.adapters_registered);
    CHECK_MSG(s.adapters_resident == 1, "%d versions in the pool; only v2 should be", s.adapters_resident);
    /* a second request of the new version does hit its own cache */
    treq *r2b = new_req(p, 60, 4, 1, "t");
    CHECK(submit(&g, r2b, &err) == 0);
    run_idle(g.e);
    CHECK(r2b->usage.cached_tokens == 48);

    /* remove while in flight */
    treq *r3 = new_req(p, 60, 24, 1, "t");
    CHECK(submit(&g, r3, &err) == 0);
    for (int k = 0; k < 4; k++) lg_engine_step(g.e, &err);
    CHECK(r3->n_tok > 0 && r3->n_fin == 0);
    CHECK(lg_engine_remove_adapter(g.e, "x", &err) == 0);
    CHECK(lg_engine_find_adapter(g.e, "x") == 0);
    CHECK(lg_engine_remove_adapter(g.e, "x", &err) != 0 && strstr(err.msg, "no adapter named 'x'"));
    treq *r4 = new_req(p, 60, 4, 1, "t");
    CHECK(submit(&g, r4, &err) != 0);
    CHECK_MSG(strstr(err.msg, "replaced or removed") != NULL, "removed adapter's submit: %s", err.msg);
    run_idle(g.e);
    CHECK(r3->n_fin == 1 && r3->reason == LG_FINISH_LENGTH && same_tokens(r3, ref_new_p, false));
    CHECK(lg_engine_adapter_info(g.e, v2, &info) == -1);
    CHECK(submit(&g, r4, &err) != 0 && strstr(err.msg, "no adapter with id"));
    lg_engine_step(g.e, &err);
    s = stats(g.e);
    CHECK(s.adapters_registered == N_AD);

    /* queued (not yet admitted) requests of a version retired before they
     * ran: the version comes back from disk for them. v3 is evicted from
     * the pool and the host tier, r5 is queued, then "x" is replaced by v4
     * and v4 removed, before any step. */
    int v3, v4;
    CHECK(lg_engine_add_adapter(g.e, "x", FIX "r8_rslora_attn", &v3, &err) == 0);
    lg_engine_evict_adapter(g.e, v3, true);
    g.ad[0] = v3;
    treq *r5 = new_req(p, 60, 24, 1, "t");
    CHECK(submit(&g, r5, &err) == 0);
    CHECK(lg_engine_add_adapter(g.e, "x", FIX "r16_all_linear", &v4, &err) == 0);
    g.ad[0] = v4;
    treq *r6 = new_req(p, 60, 24, 1, "t2");
    CHECK(submit(&g, r6, &err) == 0);
    CHECK(lg_engine_remove_adapter(g.e, "x", &err) == 0);
    lg_engine_stats s0 = stats(g.e);
    run_idle(g.e);
    s = stats(g.e);
    CHECK_MSG(r5->n_fin == 1 && r5->reason == LG_FINISH_LENGTH && same_tokens(r5, ref_old_p, false),
              "queued request of a retired version: %s '%s'", lg_finish_reason_name(r5->reason), r5->err);
    CHECK(r6->n_fin == 1 && r6->reason == LG_FINISH_LENGTH && same_tokens(r6, ref_new_p, false));
    CHECK(s.adapter_host_loads > s0.adapter_host_loads); /* v3 came back from disk */
    CHECK(lg_engine_adapter_info(g.e, v3, &info) == -1 && lg_engine_adapter_info(g.e, v4, &info) == -1);
    CHECK(s.adapters_registered == N_AD);
    /* the other adapters are gone from the pool too after this: only the
     * retired versions could keep pages, and they must not */
    for (int i = 0; i < N_AD; i++) lg_engine_evict_adapter(g.e, lg_engine_find_adapter(g.e, ADAPTERS[i]), true);
    lg_engine_step(g.e, &err);
    s = stats(g.e);
    CHECK_MSG(s.pages_adapter == 0, "%d adapter pages left after evicting every live version", s.pages_adapter);
    check_no_leaks(g.e, "replace/remove");
    CHECK(refused->n_fin == 0 && r4->n_fin == 0); /* refused submits never call back */
    free(warm), free(r1), free(r1b), free(refused), free(r2), free(r2b), free(r3), free(r4), free(r5), free(r6);
    for (int i = 0; i < 3; i++) free(rr[i]);
    lg_engine_free(g.e);
}

/* ---- (e) the engine thread ---------------------------------------------------------------------------- */

typedef struct submitter {
    eng *g;
    treq **t;
    int n;
    int failed;
} submitter;

static void *submit_main(void *arg)
{
    submitter *s = arg;
    lg_err err = {{0}};
    for (int i = 0; i < s->n; i++) {
        if (submit(s->g, s->t[i], &err) != 0)
            s->failed++;
        if (i % 4 == 0)
            usleep(2000);
    }
    return NULL;
}

/* Many one-token requests from two threads at once while the engine thread
 * runs: a request often finishes before lg_engine_submit has returned. The
 * id submit hands back must be the one the callbacks got (submit used to
 * read it from the request after unlocking: a use-after-free when the
 * engine thread had already finished and freed it, and a wrong id). */
static bool wait_finished(int want);

typedef struct burst {
    eng *g;
    treq *t;
    int n;
} burst;

static void *burst_main(void *arg)
{
    burst *b = arg;
    lg_err err = {{0}};
    for (int i = 0; i < b->n; i++) submit(b->g, &b->t[i], &err);
    return NULL;
}

static void test_submit_race(void)
{
    enum { T = 2, PER = 1500 };
    lg_err err = {{0}};
    eng g;
    mk_engine(&g, 100, 64, 8, LG_PREFIX_OFF);
    CHECK(lg_engine_start(g.e, &err) == 0);
    treq *t = calloc(T * PER, sizeof *t);
    for (int i = 0; i < T * PER; i++) {
        t[i].prompt[0] = 3 + i % 300;
        t[i].n_prompt = 1;
        t[i].max_tokens = 1;
        t[i].ignore_eos = true;
        t[i].stop_id = -1;
        t[i].self_cancel_after = -1;
    }
    pthread_mutex_lock(&g_mu);
    int base = g_finished;
    pthread_mutex_unlock(&g_mu);
    burst b[T];
    pthread_t th[T];
    for (int k = 0; k < T; k++) {
        b[k] = (burst){&g, t + k * PER, PER};
        pthread_create(&th[k], NULL, burst_main, &b[k]);
    }
    for (int k = 0; k < T; k++) pthread_join(th[k], NULL);
    CHECK(wait_finished(base + T * PER));
    int bad = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < T * PER; i++)
        if (!t[i].accepted || t[i].n_fin != 1 || t[i].cb_id != t[i].id || t[i].n_tok != 1)
            bad++;
    pthread_mutex_unlock(&g_mu);
    CHECK_MSG(bad == 0, "%d of %d requests: submit's id differs from the callbacks' (or not finished once)", bad,
              T * PER);
    lg_engine_free(g.e);
    free(t);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits until g_finished reaches want (30 s at most). */
static bool wait_finished(int want)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    pthread_mutex_lock(&g_mu);
    while (g_finished < want)
        if (pthread_cond_timedwait(&g_cv, &g_mu, &dl) != 0)
            break;
    bool ok = g_finished >= want;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

static void test_engine_thread(void)
{
    enum { N = 24 };
    lg_err err = {{0}};
    eng g;
    mk_engine(&g, 100, 64, 8, LG_PREFIX_TENANT);
    CHECK(lg_engine_start(g.e, &err) == 0);
    CHECK(lg_engine_start(g.e, &err) == 0); /* already running: no-op */
    uint64_t seed = 5;
    treq *t[N];
    for (int i = 0; i < N; i++) {
        int32_t p[70];
        fill_random(p, 70, &seed);
        t[i] = new_req(p, rnd(&seed, 5, 70), rnd(&seed, 1, 20), i % (N_AD + 1), i % 3 ? "a" : "b");
    }
    pthread_mutex_lock(&g_mu);
    int base = g_finished;
    pthread_mutex_unlock(&g_mu);
    submitter sub = {&g, t, N, 0};
    pthread_t th;
    pthread_create(&th, NULL, submit_main, &sub);
    pthread_join(th, NULL);
    CHECK(sub.failed == 0);
    CHECK_MSG(wait_finished(base + N), "the engine thread did not finish %d requests", N);
    for (int i = 0; i < N; i++) {
        pthread_mutex_lock(&g_mu);
        CHECK_MSG(t[i]->n_fin == 1 && t[i]->reason == LG_FINISH_LENGTH && t[i]->n_tok == t[i]->max_tokens &&
                      !t[i]->bad_index && t[i]->cb_id == t[i]->id && t[i]->usage.completion_tokens == t[i]->n_tok,
                  "thread request %d (id %lld, cb id %lld, adapter %d): %d finishes, %s '%s', %d of %d tokens, "
                  "%d bad indices, usage %d",
                  i, (long long)t[i]->id, (long long)t[i]->cb_id, t[i]->adapter, t[i]->n_fin,
                  lg_finish_reason_name(t[i]->reason), t[i]->err, t[i]->n_tok, t[i]->max_tokens, t[i]->bad_index,
                  t[i]->usage.completion_tokens);
        pthread_mutex_unlock(&g_mu);
    }

    /* idle: the engine thread sleeps */
    usleep(50 * 1000);
    double c0 = cpu_seconds(), w0 = lg_now();
    usleep(300 * 1000);
    double cpu = cpu_seconds() - c0, wall = lg_now() - w0;
    printf("idle engine thread: %.1f ms CPU in %.0f ms\n", cpu * 1e3, wall * 1e3);
    CHECK_MSG(cpu < 0.050, "idle engine used %.1f ms of CPU in %.0f ms: busy wait?", cpu * 1e3, wall * 1e3);

    /* a submit wakes it */
    int32_t p[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    treq *late = new_req(p, 10, 5, 0, "a");
    CHECK(submit(&g, late, &err) == 0);
    CHECK_MSG(wait_finished(base + N + 1), "a submit to an idle engine did not wake it");
    CHECK(late->n_fin == 1 && late->n_tok == 5);

    /* a cancel from this thread while the engine thread runs it */
    treq *long_one = new_req(p, 10, 110, 3, "b");
    long_one->slow_us = 2000; /* >= 220 ms in all: the cancel lands well before the end */
    CHECK(submit(&g, long_one, &err) == 0);
    for (int k = 0; k < 5000; k++) {
        pthread_mutex_lock(&g_mu);
        int n = long_one->n_tok;
        pthread_mutex_unlock(&g_mu);
        if (n > 0)
            break;
        usleep(200);
    }
    lg_engine_cancel(g.e, long_one->id, LG_FINISH_CANCELLED);
    CHECK(wait_finished(base + N + 2));
    pthread_mutex_lock(&g_mu);
    CHECK_MSG(long_one->n_fin == 1 && long_one->reason == LG_FINISH_CANCELLED && long_one->n_tok < 110 &&
                  long_one->usage.completion_tokens == long_one->n_tok,
              "cancelled from another thread: %s after %d tokens", lg_finish_reason_name(long_one->reason),
              long_one->n_tok);
    pthread_mutex_unlock(&g_mu);
    free(long_one);

    /* stopped: nobody steps; a request submitted now waits; a restart runs it */
    lg_engine_stop(g.e);
    lg_engine_stop(g.e); /* no-op */
    treq *left = new_req(p, 10, 5, 1, "a");
    CHECK(submit(&g, left, &err) == 0);
    usleep(20 * 1000);
    pthread_mutex_lock(&g_mu);
    CHECK(left->n_tok == 0 && left->n_fin == 0);
    pthread_mutex_unlock(&g_mu);
    CHECK(lg_engine_start(g.e, &err) == 0);
    CHECK(wait_finished(base + N + 3));
    lg_engine_stop(g.e);
    CHECK(left->n_fin == 1 && left->n_tok == 5);

    /* lg_engine_free with one request running (pages held, tokens out) and
     * one queued: both finish exactly once, CANCELLED "engine shut down" */
    treq *run = new_req(p, 10, 100, 2, "a"), *queued = new_req(p, 10, 100, 0, "b");
    CHECK(submit(&g, run, &err) == 0);
    for (int k = 0; k < 2000 && run->n_tok < 3; k++) { /* the caller steps once the thread is stopped */
        if (lg_engine_step(g.e, &err) == 0)
            lg_engine_wait(g.e, 0.002);
    }
    CHECK(submit(&g, queued, &err) == 0);
    CHECK(run->n_tok >= 3 && run->n_fin == 0);
    lg_engine_free(g.e);
    treq *fin[2] = {run, queued};
    for (int i = 0; i < 2; i++)
        CHECK_MSG(fin[i]->n_fin == 1 && fin[i]->reason == LG_FINISH_CANCELLED &&
                      !strcmp(fin[i]->err, "engine shut down") && fin[i]->usage.completion_tokens == fin[i]->n_tok,
                  "at free: %d finishes, reason %s, '%s'", fin[i]->n_fin, lg_finish_reason_name(fin[i]->reason),
                  fin[i]->err);
    free(left), free(run), free(queued);
    for (int i = 0; i < N; i++) free(t[i]);
    free(late);
}

int main(void)
{
    lg_err err = {{0}};
    lg_load_opts lo = {0};
    if (lg_weights_load(FIX "base", &lo, &g_w, &err) != 0) {
        fprintf(stderr, "cannot load the tiny model: %s\n", err.msg);
        return 1;
    }
    lg_backend_opts bo = {.n_threads = 2};
    if (lg_backend_create("cpu", &bo, &g_be, &err) != 0) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    double t0 = lg_now();
    test_cancel_frees();
    test_adapter_activity();
    test_preemption();
    test_shared_computation(512);
    test_shared_computation(32);
    test_replace_remove();
    test_engine_thread();
    for (int k = 0; k < 3; k++)
        test_submit_race();
    /* random workloads, checked against the same requests alone on a
     * reference engine (big pool, no prefix cache, whole-prompt prefill) */
    eng ref;
    mk_engine(&ref, 400, 512, 8, LG_PREFIX_OFF);
    random_workload(0x9e3779b97f4a7c15ull, 250, 40, 64, 8, LG_PREFIX_TENANT, true, &ref);
    random_workload(0x243f6a8885a308d3ull, 250, 120, 48, 8, LG_PREFIX_TENANT, false, &ref);
    random_workload(0xa4093822299f31d0ull, 200, 48, 32, 3, LG_PREFIX_GLOBAL, false, &ref);
    g_policy = LG_SCHED_FCFS;
    random_workload(0x13198a2e03707344ull, 150, 40, 512, 8, LG_PREFIX_OFF, true, &ref);
    /* the same with speculative decoding (n-gram proposals, engine/runtime/speculate.c): every request's
     * tokens, greedy and sampled, still equal the reference's (no speculation), also when preempted,
     * cancelled or stopped in the middle of a verification, and no page is left behind */
    g_policy = LG_SCHED_VTC;
    g_spec = (lg_spec_opts){.mode = LG_SPEC_NGRAM, .num_tokens = 4, .ngram_min = 1, .ngram_max = 3};
    random_workload(0x452821e638d01377ull, 250, 40, 64, 8, LG_PREFIX_TENANT, true, &ref);
    random_workload(0xbe5466cf34e90c6cull, 200, 120, 48, 8, LG_PREFIX_GLOBAL, false, &ref);
    g_spec.min_accept = -1; /* never paused: more verification rows */
    random_workload(0xc0ac29b7c97c50ddull, 150, 40, 512, 8, LG_PREFIX_OFF, true, &ref);
    /* a draft model proposes (base weights, its own KV pool): the base model itself, so base requests' greedy
     * proposals are mostly accepted and adapter and sampled ones often not */
    lg_weights *dw = NULL;
    if (lg_weights_load(FIX "base", &lo, &dw, &err) != 0) {
        CHECK_MSG(0, "draft model: %s", err.msg);
    } else {
        g_spec = (lg_spec_opts){.mode = LG_SPEC_DRAFT, .draft = dw, .num_tokens = 3, .min_accept = -1};
        random_workload(0x3f84d5b5b5470917ull, 150, 40, 64, 8, LG_PREFIX_TENANT, true, &ref);
        lg_weights_free(dw);
    }
    g_spec = (lg_spec_opts){0};
    /* LG_SOAK=N: N more workloads with random seeds and shapes (not in CI) */
    const char *soak = getenv("LG_SOAK");
    uint64_t ss = (uint64_t)time(NULL) | 1;
    for (int i = 0, n = soak ? atoi(soak) : 0; i < n; i++) {
        uint64_t sd = rng(&ss);
        g_policy = sd & 1 ? LG_SCHED_FCFS : LG_SCHED_VTC;
        lg_prefix_sharing sh = (lg_prefix_sharing)((sd >> 1) % 3);
        int pages = 30 + (int)((sd >> 3) % 100), budget = 16 + (int)((sd >> 11) % 300);
        int max_seqs = 1 + (int)((sd >> 21) % 10);
        printf("soak %d: policy %s, ", i, g_policy == LG_SCHED_FCFS ? "fcfs" : "vtc");
        random_workload(sd, 200, pages, budget, max_seqs, sh, false, &ref);
    }
    lg_engine_free(ref.e);
    printf("%.1f s\n", lg_now() - t0);
    lg_backend_free(g_be);
    lg_weights_free(g_w);
    TEST_DONE();
}
