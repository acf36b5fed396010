/*
 * test_ledger.c — the usage ledger writer: idempotency on request_id, done
 * callbacks only after the commit (checked from another connection inside
 * the callback), flush and stop, record validation, counters and the
 * commit latency histogram, and several threads appending at once.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "tests/unit/db/db_test_util.h"
#include "db/ledger.h"
#include "db/store.h"

static char dir[512];

/* ---- callbacks that look at the database from outside ---- */

typedef struct cb_state {
    atomic_int calls, ok, visible, status_other;
} cb_state;

typedef struct cb_ctx {
    cb_state *s;
    char id[64];
    bool check_visible;
} cb_ctx;

static void on_done(void *ctx, int status)
{
    cb_ctx *c = ctx;
    atomic_fetch_add(&c->s->calls, 1);
    if (status == LG_LEDGER_COMMITTED)
        atomic_fetch_add(&c->s->ok, 1);
    else
        atomic_fetch_add(&c->s->status_other, 1);
    if (c->check_visible) {
        /* a fresh connection of another "process" sees the record already */
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM usage_records WHERE request_id = '%s'", c->id);
        if (tu_query_int(dir, sql) == 1)
            atomic_fetch_add(&c->s->visible, 1);
    }
}

static void test_idempotent_and_after_commit(void)
{
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    CHECK_MSG(lg_ledger_open(dir, NULL, &l, &err) == 0, "%s", err.msg);
    if (!l)
        return;
    cb_state s = {0};
    enum { N = 300 };
    static cb_ctx ctx[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        ctx[i].s = &s;
        snprintf(ctx[i].id, sizeof ctx[i].id, "req-%d", i % N); /* every id twice */
        ctx[i].check_visible = true;
        lg_usage_record r = tu_record(ctx[i].id, 1, 1700000000000LL + i);
        CHECK(lg_ledger_append(l, &r, on_done, &ctx[i], &err) == 0);
    }
    CHECK_MSG(lg_ledger_flush(l, 10000, &err) == 0, "%s", err.msg);
    CHECK(atomic_load(&s.calls) == 2 * N && atomic_load(&s.ok) == 2 * N);
    CHECK_MSG(atomic_load(&s.visible) == 2 * N, "%d of %d callbacks saw their record", atomic_load(&s.visible),
              2 * N);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'req-%'") == N);
    /* the first write wins: the duplicate's data is not merged in */
    CHECK(tu_query_int(dir, "SELECT received_at FROM usage_records WHERE request_id = 'req-5'") ==
          1700000000000LL + 5);

    lg_ledger_stats st;
    lg_ledger_stats_get(l, &st);
    CHECK(st.appended == 2 * N && st.records_written == N && st.duplicates == N && st.backlog == 0);
    CHECK(st.rejected == 0 && st.abandoned == 0 && st.errors == 0 && st.healthy);
    CHECK(st.batches >= 1 && st.hist[LG_LEDGER_HIST_N] == st.batches);
    for (int i = 1; i <= LG_LEDGER_HIST_N; i++)
        CHECK(st.hist[i] >= st.hist[i - 1]); /* cumulative */
    CHECK(st.last_commit_seconds > 0 && st.commit_seconds_sum >= st.last_commit_seconds);
    char reason[200] = "x";
    CHECK(lg_ledger_healthy(l, reason, sizeof reason) && reason[0] == '\0');

    /* a second ledger (another process after a restart) appending the same ids */
    lg_ledger_close(l);
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == 0);
    cb_state s2 = {0};
    for (int i = 0; i < N; i++) {
        ctx[i].s = &s2;
        ctx[i].check_visible = false;
        lg_usage_record r = tu_record(ctx[i].id, 1, 1);
        CHECK(lg_ledger_append(l, &r, on_done, &ctx[i], &err) == 0);
    }
    CHECK(lg_ledger_stop(l, 10000, &err) == 0);
    CHECK(atomic_load(&s2.ok) == N);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'req-%'") == N);
    /* after stop: appends are refused, stop again is fine */
    lg_usage_record r = tu_record("late", 1, 1);
    CHECK(lg_ledger_append(l, &r, NULL, NULL, &err) == LG_STORE_ERROR);
    CHECK_MSG(strstr(err.msg, "stopped"), "%s", err.msg);
    CHECK(!lg_ledger_healthy(l, reason, sizeof reason) && strstr(reason, "stopping"));
    CHECK(lg_ledger_stop(l, 10, &err) == 0);
    lg_ledger_close(l);
    lg_ledger_close(NULL);
}

static void test_validation(void)
{
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == 0);
    if (!l)
        return;
    lg_usage_record r = tu_record("v-1", 1, 1000);
    lg_usage_record bad = r;
    bad.request_id[0] = '\0';
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    bad = r;
    bad.cached_tokens = bad.prompt_tokens + 1;
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    bad = r;
    bad.completion_tokens = -1;
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    bad = r;
    bad.cost_pico = -5;
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    bad = r;
    memset(bad.model, 'm', sizeof bad.model); /* not NUL-terminated */
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    CHECK_MSG(strstr(err.msg, "model"), "%s", err.msg);
    bad = r;
    snprintf(bad.adapter_digest, sizeof bad.adapter_digest, "xyz");
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    bad = r;
    bad.route[0] = '\0';
    CHECK(lg_ledger_append(l, &bad, NULL, NULL, &err) == LG_STORE_INVALID);
    CHECK(lg_ledger_append(l, NULL, NULL, NULL, &err) == LG_STORE_INVALID);

    /* a minimal record: unauthenticated 401, no adapter, no tokens: NULLs stored */
    lg_usage_record m;
    memset(&m, 0, sizeof m);
    snprintf(m.request_id, sizeof m.request_id, "v-min");
    snprintf(m.route, sizeof m.route, "chat.completions");
    m.http_status = 401;
    snprintf(m.error_type, sizeof m.error_type, "invalid_request_error");
    m.received_at = m.finished_at = 5000;
    CHECK(lg_ledger_append(l, &m, NULL, NULL, &err) == 0);
    CHECK(lg_ledger_append(l, &r, NULL, NULL, &err) == 0);
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id = 'v-min' AND tenant_id IS NULL "
                            "AND key_id IS NULL AND adapter_name IS NULL AND adapter_digest IS NULL AND "
                            "first_token_at IS NULL AND finish_reason IS NULL AND error_type IS NOT NULL") == 1);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id = 'v-1' AND tenant_id = 1 AND "
                            "cached_tokens = 32 AND cost_pico = 123456 AND first_token_at = 1030") == 1);
    lg_ledger_close(l);

    lg_ledger_options o = lg_ledger_options_default();
    o.max_batch = 0;
    CHECK(lg_ledger_open(dir, &o, &l, &err) == LG_STORE_INVALID && l == NULL);
}

/* Group commit: with a long delay and a small wake count, 1000 records go
 * in a handful of batches; a flush does not wait for the delay. */
static void test_grouping(void)
{
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    lg_ledger_options o = lg_ledger_options_default();
    o.batch_records = 100000;
    o.max_delay_us = 60 * 1000000; /* a minute: only the flush wakes it */
    CHECK(lg_ledger_open(dir, &o, &l, &err) == 0);
    if (!l)
        return;
    for (int i = 0; i < 1000; i++) {
        char id[32];
        snprintf(id, sizeof id, "g-%d", i);
        lg_usage_record r = tu_record(id, 2, 2000);
        lg_ledger_append(l, &r, NULL, NULL, &err);
    }
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);
    CHECK(s.backlog == 1000 && s.batches == 0); /* nothing written yet */
    double t0 = lg_now();
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    CHECK(lg_now() - t0 < 5.0);
    lg_ledger_stats_get(l, &s);
    CHECK(s.batches == 1 && s.records_written == 1000 && s.backlog == 0);
    lg_ledger_close(l);

    /* max_batch splits a backlog into several transactions */
    o = lg_ledger_options_default();
    o.max_batch = 64;
    o.max_delay_us = 60 * 1000000;
    o.batch_records = 100000;
    CHECK(lg_ledger_open(dir, &o, &l, &err) == 0);
    for (int i = 0; i < 640; i++) {
        char id[32];
        snprintf(id, sizeof id, "h-%d", i);
        lg_usage_record r = tu_record(id, 2, 2000);
        lg_ledger_append(l, &r, NULL, NULL, &err);
    }
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    lg_ledger_stats_get(l, &s);
    CHECK_MSG(s.batches == 10 && s.records_written == 640, "%llu batches", (unsigned long long)s.batches);
    lg_ledger_close(l);

    /* a full backlog refuses appends and reports unhealthy */
    o = lg_ledger_options_default();
    o.max_backlog = 10;
    o.max_delay_us = 60 * 1000000;
    o.batch_records = 100000;
    CHECK(lg_ledger_open(dir, &o, &l, &err) == 0);
    int refused = 0;
    for (int i = 0; i < 12; i++) {
        char id[32];
        snprintf(id, sizeof id, "b-%d", i);
        lg_usage_record r = tu_record(id, 2, 2000);
        refused += lg_ledger_append(l, &r, NULL, NULL, &err) != 0;
    }
    CHECK(refused == 2 && strstr(err.msg, "backlog is full"));
    char reason[200];
    CHECK(!lg_ledger_healthy(l, reason, sizeof reason) && strstr(reason, "backlog"));
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    CHECK(lg_ledger_healthy(l, NULL, 0));
    lg_ledger_close(l);
}

typedef struct thread_arg {
    lg_ledger *l;
    int t, n;
    cb_state *s;
    cb_ctx *ctx;
} thread_arg;

static void *appender(void *p)
{
    thread_arg *a = p;
    lg_err err;
    for (int i = 0; i < a->n; i++) {
        cb_ctx *c = &a->ctx[i];
        c->s = a->s;
        snprintf(c->id, sizeof c->id, "t%d-%d", a->t, i);
        lg_usage_record r = tu_record(c->id, 3, 3000 + i);
        if (lg_ledger_append(a->l, &r, on_done, c, &err) != 0)
            fprintf(stderr, "append: %s\n", err.msg);
    }
    return NULL;
}

static void test_threads(void)
{
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == 0);
    if (!l)
        return;
    enum { T = 4, N = 5000 };
    cb_state s = {0};
    pthread_t th[T];
    thread_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (thread_arg){l, t, N, &s, calloc(N, sizeof(cb_ctx))};
        pthread_create(&th[t], NULL, appender, &args[t]);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    CHECK(lg_ledger_stop(l, 20000, &err) == 0);
    CHECK(atomic_load(&s.calls) == T * N && atomic_load(&s.ok) == T * N);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE tenant_id = 3") == T * N);
    lg_ledger_stats st;
    lg_ledger_stats_get(l, &st);
    CHECK(st.records_written == T * N && st.batches < T * N); /* grouped */
    lg_ledger_close(l);
    for (int t = 0; t < T; t++)
        free(args[t].ctx);
}

/* Request ids: prefix, shape, sorted by time, distinct. */
static void test_request_id(void)
{
    char a[LG_LEDGER_REQUEST_ID_MAX], b[LG_LEDGER_REQUEST_ID_MAX];
    CHECK(lg_ledger_request_id("chatcmpl-", a) == 0);
    CHECK(strlen(a) == 9 + 28 && !strncmp(a, "chatcmpl-", 9));
    bool hex = true;
    for (const char *c = a + 9; *c; c++)
        hex &= (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f');
    CHECK(hex);
    usleep(2000);
    CHECK(lg_ledger_request_id("chatcmpl-", b) == 0);
    CHECK(strcmp(a, b) < 0); /* a later millisecond sorts after */
    CHECK(lg_ledger_request_id(NULL, a) == 0 && strlen(a) == 28);
    CHECK(lg_ledger_request_id("cmpl-", a) == 0 && lg_ledger_request_id("cmpl-", b) == 0 && strcmp(a, b) != 0);
    char longp[40];
    memset(longp, 'x', 33);
    longp[33] = '\0';
    CHECK(lg_ledger_request_id(longp, a) == -1);
}

int main(void)
{
    lg_err err;
    tu_tmpdir(dir, sizeof dir, "ledger");
    lg_store *st = NULL;
    if (lg_store_open(dir, &st, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    test_idempotent_and_after_commit();
    test_validation();
    test_grouping();
    test_threads();
    test_request_id();
    CHECK(lg_store_integrity_check(st, &err) == 0);
    lg_store_close(st);
    tu_rmtree(dir);
    TEST_DONE();
}
