/*
 * test_engine_billing.c — what the engine reports for billing (lg_usage) and
 * the tenant purge of the prefix cache (lg_engine_purge_tenant), on the CPU
 * backend with the tiny Llama of tests/golden/lora_fixtures/base (the model
 * the other engine tests use; token ids, no tokenizer). Run from the
 * repository root.
 *
 * Billing: usage.prompt_tokens is what was prefilled (computed, or served
 * from the prefix cache), each prompt token once:
 *   - cancelled before the first step, or while it waits in the queue
 *     behind a full batch: prompt 0, cached 0, completion 0;
 *   - cancelled after k chunks of a chunked prefill: exactly those chunks
 *     (plus the cached pages it started on, reported as cached);
 *   - a normal request: the whole prompt, cached as matched (unchanged);
 *   - preemption by recompute during chunked prefill (a tiny pool, no
 *     prefix cache): the recomputed prompt is billed once;
 *   - VTC service gets back what was charged for a prompt never computed.
 * Purge: after lg_engine_purge_tenant("t1") a prefix that t1 cached is no
 * longer matched, t2's entries are untouched, t1's pages are back in the
 * pool at once (and those a running t1 request pins when it finishes);
 * with --prefix-sharing global the salted namespaces t1 inserted into go,
 * the shared unsalted one stays; a purge posted from another thread while
 * the engine thread runs applies before later submits.
 */
#include "engine/runtime/engine_internal.h"
#include "tests/unit/test.h"

#include <pthread.h>
#include <unistd.h>

#define FIX "tests/golden/lora_fixtures/"
#define CTX 256

static lg_weights *g_w;
static lg_backend *g_be;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct treq {
    int64_t id;
    int n_fin, n_tok;
    lg_finish_reason reason;
    lg_usage usage;
    char err[256];
} treq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    (void)id, (void)o;
    treq *t = user;
    pthread_mutex_lock(&g_mu);
    t->n_tok++;
    pthread_mutex_unlock(&g_mu);
}

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    (void)id;
    treq *t = user;
    pthread_mutex_lock(&g_mu);
    t->n_fin++;
    t->reason = reason;
    t->usage = *u;
    snprintf(t->err, sizeof t->err, "%s", error ? error : "");
    pthread_mutex_unlock(&g_mu);
}

static lg_engine *mk(int n_pages, int budget, int max_seqs, lg_prefix_sharing sh)
{
    lg_err err = {{0}};
    lg_engine_opts o = {
        .model = {.max_step_tokens = budget, .max_seqs = max_seqs, .page_tokens = 16, .max_context = CTX},
        .n_pages = n_pages,
        .prefix_sharing = sh,
    };
    lg_engine *e = NULL;
    int rc = lg_engine_create(g_be, g_w, &o, &e, &err);
    CHECK_MSG(rc == 0, "engine: %s", err.msg);
    if (rc)
        exit(1);
    return e;
}

static void sub(lg_engine *e, treq *t, const int32_t *p, int n, int max_tokens, const char *tenant, const char *salt)
{
    memset(t, 0, sizeof *t);
    lg_request_params rp = {
        .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .sampling = {.temperature = 0, .top_p = 1},
        .ignore_eos = true, .tenant = tenant, .cache_salt = salt, .cb = {on_token, on_finish}, .user = t,
    };
    lg_err err = {{0}};
    CHECK_MSG(lg_engine_submit(e, &rp, &t->id, &err) == 0, "submit: %s", err.msg);
}

static void step(lg_engine *e)
{
    lg_err err = {{0}};
    CHECK_MSG(lg_engine_step(e, &err) >= 0, "step: %s", err.msg);
}

static void run_idle(lg_engine *e)
{
    for (int guard = 0; lg_engine_busy(e) && guard < 100000; guard++) step(e);
    CHECK(!lg_engine_busy(e));
    step(e); /* publishes the counters */
}

static lg_engine_stats stats(lg_engine *e)
{
    lg_engine_stats s;
    lg_engine_get_stats(e, &s);
    return s;
}

static void prompt(int32_t *p, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((seed >> 8) % 300);
    }
}

static bool usage_is(const treq *t, int prompt_tokens, int cached, int completion)
{
    return t->n_fin == 1 && t->usage.prompt_tokens == prompt_tokens && t->usage.cached_tokens == cached &&
           t->usage.completion_tokens == completion;
}

#define USAGE(t, p, c, k)                                                                                          \
    CHECK_MSG(usage_is(t, p, c, k), "%s: finished %d (%s), usage prompt %d cached %d completion %d, want %d/%d/%d", \
              #t, (t)->n_fin, lg_finish_reason_name((t)->reason), (t)->usage.prompt_tokens,                         \
              (t)->usage.cached_tokens, (t)->usage.completion_tokens, p, c, k)

/* ---- billing ------------------------------------------------------------------------------------ */

static void test_cancel_billing(void)
{
    int32_t P[200];
    prompt(P, 200, 1);
    lg_engine *e = mk(100, 32, 8, LG_PREFIX_TENANT); /* 32-token chunks */
    treq a, b, c, d, n1, n2, q;

    /* cancelled before the first step: nothing ran */
    sub(e, &a, P, 80, 8, "t1", NULL);
    lg_engine_cancel(e, a.id, LG_FINISH_CANCELLED);
    step(e);
    CHECK(a.reason == LG_FINISH_CANCELLED && a.n_tok == 0 && a.usage.prompt_len == 80);
    USAGE(&a, 0, 0, 0);

    /* cancelled after one chunk, and after two */
    sub(e, &b, P + 100, 80, 8, "t1", NULL);
    step(e);
    lg_engine_cancel(e, b.id, LG_FINISH_CANCELLED);
    step(e);
    USAGE(&b, 32, 0, 0);
    sub(e, &c, P + 100, 80, 8, "t9", NULL);
    step(e);
    step(e);
    lg_engine_cancel(e, c.id, LG_FINISH_CANCELLED);
    step(e);
    USAGE(&c, 64, 0, 0);

    /* normal requests are billed as before: the whole prompt, cached as matched */
    sub(e, &n1, P, 80, 4, "t2", NULL);
    run_idle(e);
    CHECK(n1.reason == LG_FINISH_LENGTH);
    USAGE(&n1, 80, 0, 4);
    sub(e, &n2, P, 80, 4, "t2", NULL);
    run_idle(e);
    USAGE(&n2, 80, 64, 4); /* 4 full pages before the last token */

    /* started on 5 cached pages (t2's 80 tokens), cancelled after one chunk
     * of the rest: the cached 80 and the computed 32 */
    int32_t Q[160];
    memcpy(Q, P, 80 * sizeof *Q);
    prompt(Q + 80, 80, 77);
    sub(e, &q, Q, 160, 4, "t2", NULL);
    step(e);
    lg_engine_cancel(e, q.id, LG_FINISH_CANCELLED);
    step(e);
    USAGE(&q, 112, 80, 0);

    /* waiting in the queue behind a full batch (max_seqs 1), then cancelled */
    lg_engine_free(e);
    e = mk(100, 64, 1, LG_PREFIX_TENANT);
    sub(e, &a, P, 60, 40, "t1", NULL);
    step(e);
    sub(e, &d, P + 60, 100, 8, "t3", NULL);
    for (int k = 0; k < 5; k++) step(e);
    CHECK(a.n_tok > 0 && d.n_tok == 0 && stats(e).queued == 1);
    lg_tenant_stats ts0, ts1;
    CHECK(lg_engine_tenant_stats(e, "t3", &ts0) == 0);
    lg_engine_cancel(e, d.id, LG_FINISH_CANCELLED);
    step(e);
    USAGE(&d, 0, 0, 0);
    CHECK(lg_engine_tenant_stats(e, "t3", &ts1) == 0 && ts1.service == ts0.service && ts1.queued == 0);
    run_idle(e);
    USAGE(&a, 60, 0, 40);

    /* VTC: a prompt charged at admission and cancelled after one chunk gets
     * the rest back (service = computed prompt tokens) */
    lg_engine_free(e);
    e = mk(100, 32, 8, LG_PREFIX_OFF);
    sub(e, &b, P, 100, 8, "u", NULL);
    step(e);
    lg_engine_cancel(e, b.id, LG_FINISH_CANCELLED);
    step(e);
    USAGE(&b, 32, 0, 0);
    CHECK_MSG(lg_engine_tenant_stats(e, "u", &ts1) == 0 && ts1.service == 32, "service %g, want 32", ts1.service);
    lg_engine_free(e);
}

/* Preemption by recompute during chunked prefill: every prompt billed once. */
static void test_preemption_billing(void)
{
    enum { N = 4, LEN = 150, OUT = 60 };
    int32_t P[N][LEN];
    for (int i = 0; i < N; i++) prompt(P[i], LEN, 100 + (uint32_t)i);
    for (int m = 0; m < 2; m++) {
        lg_prefix_sharing sh = m ? LG_PREFIX_TENANT : LG_PREFIX_OFF;
        lg_engine *e = mk(17, 32, 4, sh); /* 17 pages: one 210-token sequence (14 pages) fits, not two */
        treq t[N];
        for (int i = 0; i < N; i++) sub(e, &t[i], P[i], LEN, OUT, "t", NULL);
        run_idle(e);
        lg_engine_stats s = stats(e);
        CHECK_MSG(s.preemptions > 0, "prefix %s: no preemption", lg_prefix_sharing_name(sh));
        for (int i = 0; i < N; i++) {
            CHECK(t[i].reason == LG_FINISH_LENGTH);
            CHECK_MSG(t[i].usage.prompt_tokens == LEN && t[i].usage.cached_tokens <= LEN &&
                          t[i].usage.completion_tokens == OUT,
                      "prefix %s, request %d: prompt %d cached %d completion %d", lg_prefix_sharing_name(sh), i,
                      t[i].usage.prompt_tokens, t[i].usage.cached_tokens, t[i].usage.completion_tokens);
        }
        printf("preemption (prefix %s): %lld preemptions, prompts billed once\n", lg_prefix_sharing_name(sh),
               (long long)s.preemptions);
        lg_engine_free(e);
    }
}

/* ---- purge ----------------------------------------------------------------------------------------- */

static lg_prefix_cache_stats pcstats(lg_engine *e)
{
    lg_prefix_cache_stats cs;
    lg_prefix_cache_get_stats(e->prefix, &cs);
    return cs;
}

/* Nothing pinned; KV pages only in the tree. */
static void check_settled(lg_engine *e, const char *what)
{
    step(e);
    lg_engine_stats s = stats(e);
    CHECK_MSG(s.running == 0 && s.queued == 0 && s.pages_free + s.pages_cached == s.pages_total &&
                  s.pages_kv == s.pages_prefix && pcstats(e).purged_pinned == 0,
              "%s: running %d, free %d + cached %d of %d, kv %d, prefix %d, purged pinned %d", what, s.running,
              s.pages_free, s.pages_cached, s.pages_total, s.pages_kv, s.pages_prefix, pcstats(e).purged_pinned);
}

static void test_purge_tenant_mode(void)
{
    int32_t P[80];
    prompt(P, 80, 5);
    lg_engine *e = mk(100, 512, 8, LG_PREFIX_TENANT);
    treq a, b, c, d, x, y;
    sub(e, &a, P, 80, 1, "t1", NULL);
    run_idle(e);
    sub(e, &b, P, 80, 1, "t2", NULL);
    run_idle(e);
    sub(e, &c, P, 80, 1, "t1", NULL);
    run_idle(e);
    USAGE(&c, 80, 64, 1); /* t1's prefix is cached */
    lg_engine_stats s0 = stats(e);
    CHECK_MSG(s0.pages_prefix == 10 && pcstats(e).namespaces == 2, "%d prefix pages", s0.pages_prefix);

    lg_err err = {{0}};
    CHECK(lg_engine_purge_tenant(e, "t1", &err) == 0);
    step(e); /* applied at the next step */
    lg_engine_stats s1 = stats(e);
    CHECK_MSG(s1.pages_prefix == 5 && s1.pages_kv == 5 && s1.pages_free == s0.pages_free + 5,
              "after the purge: prefix %d kv %d free %d (before %d)", s1.pages_prefix, s1.pages_kv, s1.pages_free,
              s0.pages_free);
    lg_prefix_cache_stats cs = pcstats(e);
    CHECK(cs.namespaces == 1 && cs.purged_namespaces == 1 && cs.purged_nodes == 5 && cs.purged_pinned == 0);

    sub(e, &c, P, 80, 1, "t1", NULL);
    run_idle(e);
    USAGE(&c, 80, 0, 1); /* no longer matched */
    sub(e, &d, P, 80, 1, "t2", NULL);
    run_idle(e);
    USAGE(&d, 80, 64, 1); /* t2 untouched */

    /* purge while t1 requests run: x computed (and pins) its own pages, y
     * pins x's cached chain; both finish normally, their pages come back */
    sub(e, &x, P, 80, 30, "t1", NULL); /* matches c's pages (t1 again) */
    int32_t R[100];
    prompt(R, 100, 9);
    sub(e, &y, R, 100, 30, "t1", NULL);
    for (int k = 0; k < 3; k++) step(e);
    CHECK(x.n_tok > 0 && y.n_tok > 0 && x.n_fin == 0 && y.n_fin == 0);
    int pinned_before = pcstats(e).nodes;
    CHECK(lg_engine_purge_tenant(e, "t1", &err) == 0);
    step(e);
    cs = pcstats(e);
    CHECK_MSG(cs.nodes == 5 && cs.purged_pinned == pinned_before - 5, "nodes %d (were %d), purged pinned %d",
              cs.nodes, pinned_before, cs.purged_pinned);
    run_idle(e);
    CHECK(x.reason == LG_FINISH_LENGTH && y.reason == LG_FINISH_LENGTH && x.n_tok == 30 && y.n_tok == 30);
    USAGE(&x, 80, 64, 30);
    check_settled(e, "after purging under running requests");
    CHECK(pcstats(e).nodes == 5); /* t2's only: the running t1 requests stopped filling the cache */
    sub(e, &c, R, 100, 1, "t1", NULL);
    run_idle(e);
    USAGE(&c, 100, 0, 1);

    /* an unknown tenant: nothing happens */
    s0 = stats(e);
    CHECK(lg_engine_purge_tenant(e, "nobody", &err) == 0);
    step(e);
    CHECK(stats(e).pages_prefix == s0.pages_prefix);
    lg_engine_free(e);
}

static void test_purge_global_mode(void)
{
    int32_t P[80];
    prompt(P, 80, 11);
    lg_engine *e = mk(100, 512, 8, LG_PREFIX_GLOBAL);
    treq a, b, c;
    sub(e, &a, P, 80, 1, "t1", "s"); /* salted: t1's own */
    run_idle(e);
    sub(e, &b, P, 80, 1, "t2", NULL); /* the shared global namespace */
    run_idle(e);
    sub(e, &c, P, 80, 1, "t3", "s"); /* same salt, other tenant: shares t1's by design */
    run_idle(e);
    USAGE(&c, 80, 64, 1);
    sub(e, &c, P, 80, 1, "t1", NULL); /* t1 uses the shared namespace too */
    run_idle(e);
    USAGE(&c, 80, 64, 1);
    lg_err err = {{0}};
    CHECK(lg_engine_purge_tenant(e, "t1", &err) == 0);
    step(e);
    lg_prefix_cache_stats cs = pcstats(e);
    CHECK_MSG(cs.namespaces == 1 && cs.nodes == 5 && cs.purged_namespaces == 1, "namespaces %d nodes %d",
              cs.namespaces, cs.nodes);
    sub(e, &c, P, 80, 1, "t3", "s"); /* the salted namespace t1 filled is gone */
    run_idle(e);
    USAGE(&c, 80, 0, 1);
    sub(e, &c, P, 80, 1, "t2", NULL); /* the shared one stays */
    run_idle(e);
    USAGE(&c, 80, 64, 1);
    /* a salted namespace only others inserted into is not t1's */
    sub(e, &c, P, 80, 1, "t4", "z");
    run_idle(e);
    CHECK(lg_engine_purge_tenant(e, "t1", &err) == 0);
    step(e);
    sub(e, &c, P, 80, 1, "t4", "z");
    run_idle(e);
    USAGE(&c, 80, 64, 1);
    check_settled(e, "global");
    lg_engine_free(e);
}

/* From another thread while the engine thread runs: a submit after the
 * purge call is a new start (its own pages, cached for the next one). */
static bool wait_fin(treq *t)
{
    for (int k = 0; k < 30000; k++) {
        pthread_mutex_lock(&g_mu);
        int n = t->n_fin;
        pthread_mutex_unlock(&g_mu);
        if (n)
            return true;
        usleep(1000);
    }
    return false;
}

static void test_purge_thread(void)
{
    int32_t P[80];
    prompt(P, 80, 21);
    lg_engine *e = mk(100, 512, 8, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    CHECK(lg_engine_start(e, &err) == 0);
    treq a, b, c;
    sub(e, &a, P, 80, 2, "t7", NULL);
    CHECK(wait_fin(&a));
    CHECK(lg_engine_purge_tenant(e, "t7", &err) == 0);
    sub(e, &b, P, 80, 2, "t7", NULL);
    CHECK(wait_fin(&b));
    sub(e, &c, P, 80, 2, "t7", NULL);
    CHECK(wait_fin(&c));
    lg_engine_stop(e);
    USAGE(&a, 80, 0, 2);
    USAGE(&b, 80, 0, 2);
    USAGE(&c, 80, 64, 2);
    check_settled(e, "thread");
    CHECK(lg_engine_purge_tenant(e, NULL, &err) == 0); /* "" is a tenant too */
    char longname[LG_MAX_TENANT + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(lg_engine_purge_tenant(e, longname, &err) != 0);
    char key[LG_TENANT_KEY_MAX];
    CHECK(!strcmp(lg_tenant_key(42, key), "t42") && !strcmp(lg_tenant_key(INT64_MAX, key), "t9223372036854775807"));
    lg_engine_free(e); /* frees the pending purge message */
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
    test_cancel_billing();
    test_preemption_billing();
    test_purge_tenant_mode();
    test_purge_global_mode();
    test_purge_thread();
    lg_backend_free(g_be);
    lg_weights_free(g_w);
    TEST_DONE();
}
