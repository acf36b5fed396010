/*
 * test_dp_router.c — the data-parallel router of engine/runtime/dp_router.h
 * over real CPU engines (engine/runtime/placement.h: one CPU backend each)
 * on the tiny Llama of tests/golden/lora_fixtures/base (2 layers, hidden
 * 128, vocab 320) with synthetic adapters and the PEFT fixtures next to it.
 * The engines run their own threads, as under serve. Run from the
 * repository root.
 *
 * What is checked, and why:
 *   (a) adapter residency under a skewed workload: 300 short requests of 4
 *       tenants, each on one of 40 synthetic adapters drawn Zipf(1.0), on
 *       3 engines whose pools hold every adapter (no eviction), so every
 *       pool load is the router's doing; run twice, all submitted at once
 *       (the engines far beyond their batches: the router spills) and with
 *       16 clients (each finish lets the next request in). The loads summed
 *       over the engines (lg_engine_stats.adapter_loads) stay within 1.25 x
 *       the distinct adapters used, and below half of a load of every used
 *       adapter on every engine. Routing by load alone (the affinity tables
 *       ignored) gives ~2.3 x here, so the check can fail;
 *   (b) prefix affinity and namespaces: 5 tenants each send the same 48
 *       token prompt twice, in turns, on idle engines (so least-loaded
 *       routing with rotating ties would scatter them); every second send
 *       reports cached_tokens == 32 (two full pages before the last token:
 *       it found its own cache, on its own engine); a sixth tenant's
 *       identical prompt, and a first tenant's with a cache salt, report 0
 *       (the cache stays per namespace; engines never share KV);
 *   (c) nobody is lost when an engine is busy: 40 requests of one
 *       namespace (one home engine, 2 sequences a batch) are all accepted;
 *       the router spills past the full home engine, both engines run some;
 *       every request gets exactly one on_finish, LENGTH, with all its
 *       tokens, under the id submit returned, and the router's outstanding
 *       counts go back to 0;
 *   (d) adapters through the router: one version id on every engine
 *       (lg_engine_find_adapter of each engine), a replace gives every
 *       engine the new id and retires the old one everywhere (a submit of
 *       the old id is refused), remove reaches every engine, a refused add
 *       (rank above the engines' limit) changes nothing so the next ids
 *       still agree; the merged adapter activity sums the engines';
 *   (e) fairness across engines: tenants of weight 1 and 2 each keep 16
 *       requests in flight (always backlogged) on 2 engines of 4 sequences
 *       until 240 requests finished; the service each got (the shared VTC
 *       table's, and independently the usage of their finished requests:
 *       prompt + 2 x completion tokens) splits 1:2 within [1.6, 2.4]. The
 *       tolerance: VTC keeps the counters within 2 max(w_p L, w_q M) per
 *       engine (L = 8-token prompts, M = the batch's 4 x 24 tokens: ~200
 *       weighted tokens) of ~10k served, ~2%; the rest is the router's part
 *       (a tenant's requests are on both engines only once it spilled there,
 *       a batch at a time) and, for the usage figure, the requests still
 *       running at the end (observed 1.69-2.04 over 20 runs). With equal
 *       weights the same run splits ~1:1 (checked within [0.8, 1.25]),
 *       outside the band, so the check answers to the weights.
 *   Also: one engine passes straight through (the engine's own ids).
 * Figures (loads per engine, service ratios) are printed.
 */
#include "engine/runtime/dp_router.h"
#include "tests/unit/test.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define FIX "tests/golden/lora_fixtures/"
#define CTX 128

static lg_weights *g_w;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_finished;

typedef struct rq {
    int tenant;
    int64_t id, cb_id;
    int n_fin, n_tok, max_tokens;
    lg_finish_reason reason;
    lg_usage u;
    char err[200];
} rq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    rq *r = user;
    pthread_mutex_lock(&g_mu);
    r->n_tok++;
    r->cb_id = id;
    pthread_mutex_unlock(&g_mu);
}

static int g_out[2]; /* (e): requests in flight per tenant */

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    rq *r = user;
    pthread_mutex_lock(&g_mu);
    r->n_fin++;
    r->cb_id = id;
    r->reason = reason;
    r->u = *u;
    snprintf(r->err, sizeof r->err, "%s", error ? error : "");
    if (r->tenant >= 0 && r->tenant < 2)
        g_out[r->tenant]--;
    g_finished++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static bool wait_finished(int want)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 300;
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    while (g_finished < want && rc == 0) rc = pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    bool ok = g_finished >= want;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n engines, one CPU backend (one thread) each, started. */
static lg_dp *mk(lg_placement *pl, int n, int n_pages, int max_seqs, lg_sched_policy policy, lg_prefix_sharing sh)
{
    lg_err err = {{0}};
    lg_backend_opts bo = {.n_threads = n};
    CHECK_MSG(lg_placement_create("cpu", &bo, n, 1, pl, &err) == 0, "placement: %s", err.msg);
    lg_engine_opts eo = {
        .model = {.max_step_tokens = 256, .max_seqs = max_seqs, .page_tokens = 16, .max_context = CTX,
                  .lora_max_rank = 16},
        .n_pages = n_pages,
        .prefix_sharing = sh,
        .policy = policy,
    };
    lg_dp *dp = NULL;
    int rc = lg_dp_create_engines(pl, g_w, &eo, &dp, &err);
    CHECK_MSG(rc == 0, "router: %s", err.msg);
    if (rc)
        exit(1);
    CHECK(lg_dp_size(dp) == n);
    CHECK(lg_dp_start(dp, &err) == 0);
    return dp;
}

static void done(lg_dp *dp, lg_placement *pl)
{
    lg_dp_free(dp);
    lg_placement_free(pl);
    pthread_mutex_lock(&g_mu);
    g_finished = 0;
    g_out[0] = g_out[1] = 0;
    pthread_mutex_unlock(&g_mu);
}

static int submit(lg_dp *dp, rq *r, const int32_t *prompt, int n, int adapter_id, const char *tenant,
                  const char *salt, lg_err *err)
{
    lg_request_params p = {
        .prompt = prompt, .n_prompt = n, .max_tokens = r->max_tokens, .ignore_eos = true,
        .sampling = {.temperature = 0, .top_p = 1}, .adapter_id = adapter_id, .tenant = tenant,
        .cache_salt = salt, .cb = {on_token, on_finish}, .user = r,
    };
    return lg_dp_submit(dp, &p, &r->id, err);
}

static int64_t engine_loads(lg_dp *dp, int k)
{
    lg_engine_stats s;
    lg_engine_get_stats(lg_dp_engine(dp, k), &s);
    return s.adapter_loads;
}

/* ---- (a) Zipf adapters ------------------------------------------------------------------------- */

/* n requests of T tenants on A adapters drawn Zipf(1.0), C in flight at
 * most (C >= n: all at once), on E engines. */
static void zipf_run(int E, int C)
{
    enum { A = 40, N = 300, T = 4 };
    lg_placement pl;
    lg_dp *dp = mk(&pl, E, 1200, 8, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    int ids[A];
    for (int a = 0; a < A; a++) {
        char name[16];
        snprintf(name, sizeof name, "z%d", a);
        lg_synth_adapter s = {.rank = 4, .targets = 1u | 4u, .seed = 100 + (uint64_t)a}; /* q, v */
        CHECK_MSG(lg_dp_add_synthetic_adapter(dp, name, &s, &ids[a], &err) == 0, "%s", err.msg);
    }
    double cdf[A], acc = 0, hsum = 0;
    for (int a = 0; a < A; a++) hsum += 1.0 / (a + 1);
    for (int a = 0; a < A; a++) cdf[a] = (acc += 1.0 / (a + 1) / hsum);
    static rq r[N];
    bool used[A] = {0};
    uint64_t seed = 0x21bf;
    for (int i = 0; i < N; i++) {
        if (i >= C) /* C clients: each finish lets the next request in */
            CHECK(wait_finished(i - C + 1));
        double u = (double)(rng(&seed) >> 11) * 0x1.0p-53;
        int a = 0;
        while (a < A - 1 && cdf[a] < u) a++;
        used[a] = true;
        int32_t p[8];
        for (int j = 0; j < 8; j++) p[j] = (int32_t)(rng(&seed) % 320);
        char tenant[8];
        snprintf(tenant, sizeof tenant, "t%d", (int)(rng(&seed) % T));
        r[i] = (rq){.tenant = -1, .max_tokens = 4};
        CHECK_MSG(submit(dp, &r[i], p, 8, ids[a], tenant, NULL, &err) == 0, "%s", err.msg);
    }
    CHECK(wait_finished(N));
    int distinct = 0;
    for (int a = 0; a < A; a++) distinct += used[a];
    int64_t total = 0, per[LG_MAX_DP];
    lg_dp_routing rt[LG_MAX_DP];
    for (int k = 0; k < E; k++) {
        per[k] = engine_loads(dp, k);
        total += per[k];
        lg_dp_routing_get(dp, k, &rt[k]);
    }
    lg_engine_stats s;
    lg_dp_get_stats(dp, &s);
    printf("(a) Zipf(1.0): %d requests, %d clients, %d adapters used of %d, %d engines: adapter loads %lld (%.2f x "
           "distinct), evictions %lld; per engine (loads, routed, spilled):", N, C, distinct, A, E, (long long)total,
           (double)total / distinct, (long long)s.adapter_evictions);
    for (int k = 0; k < E; k++)
        printf(" [%lld %lld %lld]", (long long)per[k], (long long)rt[k].routed, (long long)rt[k].spilled);
    printf("\n");
    CHECK_MSG(s.adapter_evictions == 0, "%lld evictions: the pools were meant to hold every adapter",
              (long long)s.adapter_evictions);
    CHECK(s.adapter_loads == total);
    CHECK_MSG(total >= distinct && total <= 1.25 * distinct, "%lld loads for %d adapters (%d clients)",
              (long long)total, distinct, C);
    CHECK_MSG(total < 0.5 * E * distinct, "%lld loads: near one per engine per adapter", (long long)total);
    int fin = 0;
    for (int i = 0; i < N; i++) fin += r[i].n_fin == 1 && r[i].reason == LG_FINISH_LENGTH && r[i].n_tok == 4;
    CHECK(fin == N);
    for (int k = 0; k < E; k++) CHECK_MSG(rt[k].routed > 0 && rt[k].outstanding == 0, "engine %d", k);
    done(dp, &pl);
}

static void test_zipf(void)
{
    zipf_run(3, 300); /* all at once: engines far beyond their batches, spills */
    zipf_run(3, 16);  /* 16 clients: the engines' batches about full */
}

/* ---- (b) prefix affinity, namespaces ---------------------------------------------------------- */

static void test_prefix(void)
{
    lg_placement pl;
    lg_dp *dp = mk(&pl, 2, 200, 4, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    int32_t p[48];
    uint64_t seed = 99;
    for (int j = 0; j < 48; j++) p[j] = (int32_t)(rng(&seed) % 320);
    enum { T = 5 }; /* odd: with rotating ties alone a tenant's second send lands on the other engine */
    static rq r[2 * T + 2];
    int n = 0;
    for (int round = 0; round < 2; round++)
        for (int t = 0; t < T; t++) {
            char tenant[8];
            snprintf(tenant, sizeof tenant, "a%d", t);
            rq *x = &r[n++];
            *x = (rq){.tenant = -1, .max_tokens = 2};
            CHECK_MSG(submit(dp, x, p, 48, 0, tenant, NULL, &err) == 0, "%s", err.msg);
            CHECK(wait_finished(n)); /* one at a time: every engine idle at each routing */
            if (round == 1)
                CHECK_MSG(x->u.cached_tokens == 32, "tenant %s, second send: cached %d, want 32", tenant,
                          x->u.cached_tokens);
            else
                CHECK(x->u.cached_tokens == 0);
        }
    rq *b = &r[n++], *salted = &r[n++];
    *b = (rq){.tenant = -1, .max_tokens = 2};
    CHECK(submit(dp, b, p, 48, 0, "b", NULL, &err) == 0);
    CHECK(wait_finished(n - 1));
    *salted = (rq){.tenant = -1, .max_tokens = 2};
    CHECK(submit(dp, salted, p, 48, 0, "a0", "salt", &err) == 0);
    CHECK(wait_finished(n));
    CHECK_MSG(b->u.cached_tokens == 0, "another tenant got %d cached tokens", b->u.cached_tokens);
    CHECK_MSG(salted->u.cached_tokens == 0, "another salt got %d cached tokens", salted->u.cached_tokens);
    lg_dp_routing r0, r1;
    lg_dp_routing_get(dp, 0, &r0);
    lg_dp_routing_get(dp, 1, &r1);
    printf("(b) prefix affinity: 5 tenants x 2 sends + 2: routed %lld / %lld, every second send cached 32 tokens\n",
           (long long)r0.routed, (long long)r1.routed);
    CHECK(r0.routed > 0 && r1.routed > 0); /* the tenants were spread, each kept its engine */
    done(dp, &pl);
}

/* ---- (c) a busy engine loses nobody ----------------------------------------------------------- */

static void test_busy(void)
{
    lg_placement pl;
    lg_dp *dp = mk(&pl, 2, 300, 2, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    int ad = 0;
    CHECK_MSG(lg_dp_add_adapter(dp, "x", FIX "r8_layer1", &ad, &err) == 0, "%s", err.msg);
    enum { N = 40 };
    static rq r[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) {
        int32_t p[16];
        for (int j = 0; j < 16; j++) p[j] = (int32_t)(rng(&seed) % 320);
        r[i] = (rq){.tenant = -1, .max_tokens = 12};
        CHECK_MSG(submit(dp, &r[i], p, 16, ad, "one", "same", &err) == 0, "%s", err.msg);
    }
    CHECK(wait_finished(N));
    usleep(20000);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        ok += r[i].n_fin == 1 && r[i].reason == LG_FINISH_LENGTH && r[i].n_tok == 12 && r[i].cb_id == r[i].id;
        for (int j = 0; j < i; j++) CHECK(r[i].id != r[j].id);
    }
    CHECK_MSG(ok == N, "%d of %d finished once, LENGTH, 12 tokens, under their id", ok, N);
    lg_dp_routing r0, r1;
    lg_dp_routing_get(dp, 0, &r0);
    lg_dp_routing_get(dp, 1, &r1);
    lg_engine_stats s0, s1;
    lg_engine_get_stats(lg_dp_engine(dp, 0), &s0);
    lg_engine_get_stats(lg_dp_engine(dp, 1), &s1);
    printf("(c) one namespace, 40 requests, batches of 2: routed %lld / %lld (spilled %lld / %lld), finished %lld / "
           "%lld\n", (long long)r0.routed, (long long)r1.routed, (long long)r0.spilled, (long long)r1.spilled,
           (long long)s0.requests_finished, (long long)s1.requests_finished);
    CHECK(r0.spilled + r1.spilled > 0);
    CHECK(s0.requests_finished > 0 && s1.requests_finished > 0);
    CHECK(s0.requests_finished + s1.requests_finished == N);
    CHECK(r0.outstanding == 0 && r1.outstanding == 0 && !lg_dp_busy(dp));
    done(dp, &pl);
}

/* ---- (d) adapters on every engine ------------------------------------------------------------- */

static void test_adapters(void)
{
    lg_placement pl;
    lg_dp *dp = mk(&pl, 3, 200, 4, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    int a = 0, b = 0, a2 = 0, c = 0;
    CHECK(lg_dp_add_adapter(dp, "a", FIX "r8_rslora_attn", &a, &err) == 0);
    CHECK(lg_dp_add_adapter(dp, "b", FIX "r1_qv", &b, &err) == 0);
    for (int k = 0; k < 3; k++)
        CHECK_MSG(lg_engine_find_adapter(lg_dp_engine(dp, k), "a") == a &&
                      lg_engine_find_adapter(lg_dp_engine(dp, k), "b") == b,
                  "engine %d: a %d b %d, router %d %d", k, lg_engine_find_adapter(lg_dp_engine(dp, k), "a"),
                  lg_engine_find_adapter(lg_dp_engine(dp, k), "b"), a, b);
    /* refused (rank 64 > 16) by the first engine: nothing changes anywhere */
    CHECK(lg_dp_add_adapter(dp, "big", FIX "r64_mlp", &c, &err) != 0 && err.msg[0]);
    printf("(d) refused add: %s\n", err.msg);
    CHECK(lg_dp_find_adapter(dp, "big") == 0);
    /* replace: a new id on every engine, the old one retired everywhere */
    CHECK(lg_dp_add_adapter(dp, "a", FIX "r8_layer1", &a2, &err) == 0);
    CHECK(a2 != a);
    for (int k = 0; k < 3; k++) {
        lg_engine *e = lg_dp_engine(dp, k);
        lg_adapter_info info;
        CHECK_MSG(lg_engine_find_adapter(e, "a") == a2, "engine %d: %d, want %d", k, lg_engine_find_adapter(e, "a"),
                  a2);
        CHECK(lg_engine_adapter_info(e, a, &info) != 0 || info.retired);
    }
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    rq r[4] = {{.tenant = -1, .max_tokens = 2}, {.tenant = -1, .max_tokens = 2}, {.tenant = -1, .max_tokens = 2},
               {.tenant = -1, .max_tokens = 2}};
    CHECK(submit(dp, &r[0], p, 8, a, "t", NULL, &err) != 0); /* the old version */
    CHECK(submit(dp, &r[1], p, 8, a2, "t", NULL, &err) == 0);
    CHECK(wait_finished(1) && r[1].reason == LG_FINISH_LENGTH);
    /* remove: gone from every engine */
    CHECK(lg_dp_remove_adapter(dp, "b", &err) == 0);
    for (int k = 0; k < 3; k++) CHECK(lg_engine_find_adapter(lg_dp_engine(dp, k), "b") == 0);
    CHECK(submit(dp, &r[2], p, 8, b, "t", NULL, &err) != 0);
    CHECK(lg_dp_remove_adapter(dp, "b", &err) != 0 && err.msg[0]);
    /* ids still agree after the refusal, the replace and the remove */
    CHECK(lg_dp_add_adapter(dp, "c", FIX "r1_qv", &c, &err) == 0);
    for (int k = 0; k < 3; k++) CHECK(lg_engine_find_adapter(lg_dp_engine(dp, k), "c") == c);
    lg_adapter_info info;
    CHECK(lg_dp_adapter_info(dp, c, &info) == 0 && !strcmp(info.name, "c") && info.requests == 0);
    /* activity merged over engines: requests of c spread over the engines, summed */
    static rq many[12];
    for (int i = 0; i < 12; i++) {
        many[i] = (rq){.tenant = -1, .max_tokens = 40};
        char tenant[8];
        snprintf(tenant, sizeof tenant, "m%d", i);
        CHECK(submit(dp, &many[i], p, 8, c, tenant, NULL, &err) == 0);
    }
    lg_adapter_activity *act = NULL;
    lg_engine_stats sum, per[3];
    int n = lg_dp_adapter_activity(dp, &sum, per, &act);
    /* the lists and the sums come from the same snapshots (which may lag the submits by a step) */
    int live = 0;
    for (int i = 0; i < n; i++) live += act[i].running + act[i].waiting;
    CHECK_MSG(n >= 0 && sum.queued + sum.running == live && sum.queued == per[0].queued + per[1].queued + per[2].queued &&
                  sum.running == per[0].running + per[1].running + per[2].running,
              "%d entries, %d live, stats %d + %d", n, live, sum.queued, sum.running);
    for (int i = 1; i < n; i++) CHECK(act[i - 1].adapter_id < act[i].adapter_id);
    free(act);
    CHECK(wait_finished(13));
    /* the snapshot is published after the step in which the last one finished */
    for (int i = 0; i < 2000 && (n = lg_dp_adapter_activity(dp, NULL, NULL, &act)) != 0; i++) {
        free(act);
        usleep(1000);
    }
    CHECK(n == 0 && !act);
    done(dp, &pl);
}

/* ---- (e) fairness across engines ---------------------------------------------------------------- */

/* Tenants "A" (weight 1) and "B" (weight 2) keep 16 requests each in flight
 * until 240 have finished; returns B's service over A's (the shared table's)
 * and, in *usage_ratio, the same from the finished requests' usage. */
static double fair_run(double wb, double *usage_ratio)
{
    lg_placement pl;
    lg_dp *dp = mk(&pl, 2, 400, 4, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    CHECK(lg_dp_set_tenant_weight(dp, "A", 1, &err) == 0);
    CHECK(lg_dp_set_tenant_weight(dp, "B", wb, &err) == 0);
    enum { MAXR = 1200, K = 16, TARGET = 240 };
    static rq r[MAXR];
    int n = 0;
    uint64_t seed = 0xfa17 + (uint64_t)wb;
    static const char *names[2] = {"A", "B"};
    lg_tenant_stats ta, tb;
    pthread_mutex_lock(&g_mu);
    while (g_finished < TARGET && n < MAXR - 2) {
        for (int u = 0; u < 2; u++)
            while (g_out[u] < K && n < MAXR) {
                rq *x = &r[n++];
                *x = (rq){.tenant = u, .max_tokens = 16};
                int32_t p[8];
                for (int j = 0; j < 8; j++) p[j] = (int32_t)(rng(&seed) % 320);
                g_out[u]++;
                pthread_mutex_unlock(&g_mu);
                CHECK(submit(dp, x, p, 8, 0, names[u], NULL, &err) == 0);
                pthread_mutex_lock(&g_mu);
            }
        pthread_cond_wait(&g_cv, &g_mu);
    }
    /* both were backlogged until now */
    CHECK(lg_dp_tenant_stats(dp, "A", &ta) == 0 && lg_dp_tenant_stats(dp, "B", &tb) == 0);
    double use[2] = {0, 0};
    for (int i = 0; i < n; i++)
        if (r[i].n_fin)
            use[r[i].tenant] += r[i].u.prompt_tokens + 2.0 * r[i].u.completion_tokens;
    pthread_mutex_unlock(&g_mu);
    CHECK(wait_finished(n));
    lg_dp_routing r0, r1;
    lg_dp_routing_get(dp, 0, &r0);
    lg_dp_routing_get(dp, 1, &r1);
    *usage_ratio = use[0] > 0 ? use[1] / use[0] : 0;
    printf("(e) weights 1:%g, 2 engines: service A %.0f B %.0f (B/A %.3f; from usage %.3f), routed %lld / %lld, "
           "spilled %lld / %lld\n", wb, ta.service, tb.service,
           tb.service / ta.service, *usage_ratio, (long long)r0.routed, (long long)r1.routed,
           (long long)r0.spilled, (long long)r1.spilled);
    /* one table: every engine reports the same service */
    lg_tenant_stats e0, e1;
    CHECK(lg_engine_tenant_stats(lg_dp_engine(dp, 0), "B", &e0) == 0 &&
          lg_engine_tenant_stats(lg_dp_engine(dp, 1), "B", &e1) == 0 && e0.service == e1.service);
    done(dp, &pl);
    return tb.service / ta.service;
}

static void test_fairness(void)
{
    double usage;
    double r = fair_run(2, &usage);
    CHECK_MSG(r > 1.6 && r < 2.4, "weights 1:2 over 2 engines: B/A = %.3f, want 2", r);
    CHECK_MSG(usage > 1.6 && usage < 2.4, "weights 1:2 over 2 engines, from usage: B/A = %.3f, want 2", usage);
    /* equal weights: ~1:1, outside the band (the check answers to the weights) */
    r = fair_run(1, &usage);
    CHECK_MSG(r > 0.8 && r < 1.25, "weights 1:1 over 2 engines: B/A = %.3f, want 1", r);
}

/* ---- one engine: pass-through ----------------------------------------------------------------- */

static void test_single(void)
{
    lg_placement pl;
    lg_dp *dp = mk(&pl, 1, 100, 4, LG_SCHED_VTC, LG_PREFIX_TENANT);
    lg_err err = {{0}};
    int32_t p[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    rq r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (rq){.tenant = -1, .max_tokens = 2};
        CHECK(submit(dp, &r[i], p, 8, 0, "s", NULL, &err) == 0);
        CHECK(r[i].id == i + 1); /* the engine's own ids */
    }
    CHECK(wait_finished(3));
    for (int i = 0; i < 3; i++) CHECK(r[i].cb_id == r[i].id && r[i].n_fin == 1);
    lg_dp_routing rt;
    lg_dp_routing_get(dp, 0, &rt);
    CHECK(rt.routed == 0); /* nothing counted */
    done(dp, &pl);
}

int main(void)
{
    lg_err err = {{0}};
    lg_load_opts lo = {0};
    if (lg_weights_load(FIX "base", &lo, &g_w, &err) != 0) {
        fprintf(stderr, "cannot load the tiny model: %s\n", err.msg);
        return 1;
    }
    double t0 = lg_now();
    test_single();
    test_adapters();
    test_prefix();
    test_busy();
    test_zipf();
    test_fairness();
    printf("%.1f s\n", lg_now() - t0);
    lg_weights_free(g_w);
    TEST_DONE();
}
