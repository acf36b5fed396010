/*
 * test_usage.c — usage queries against a straightforward computation: a few
 * thousand random records (tenants, keys, models, adapters, token counts,
 * costs, times over six days, some unauthenticated) go through the ledger;
 * then many random queries (1h and 1d buckets, every group_by subset, with
 * and without a tenant filter, unaligned ranges) must equal sums computed
 * record by record in C. Also totals, top adapters (one named row per tenant
 * and adapter, also for a reused tenant name), argument checks, and an
 * aggregate past int64 reported as an error.
 */
#include "tests/unit/db/db_test_util.h"
#include "db/ledger.h"
#include "db/store.h"
#include "db/usage.h"

enum { N_REC = 4000 };

static lg_usage_record recs[N_REC];
static int64_t tenant_ids[3];
static const char *tenant_names[3] = {"acme", "beta", "gamma"};
static char key_ids[6][LG_KEY_ID_LEN + 1];
static const char *models[4] = {"support-bot", "summarizer", "base-model", "x"};
static const char *adapters[3] = {"support-bot", "summarizer", ""};

static uint64_t rng = 42;
static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 17) % n;
}

#define T0 1763769600LL /* 2025-11-22 00:00:00 UTC, a day boundary */

static void make_records(lg_store *st, lg_ledger *l)
{
    lg_err err;
    for (int t = 0; t < 3; t++) {
        lg_tenant_spec spec = lg_tenant_spec_init(tenant_names[t]);
        lg_tenant ten;
        CHECK(lg_store_tenant_create(st, &spec, &ten, &err) == 0);
        tenant_ids[t] = ten.id;
        for (int k = 0; k < 2; k++) {
            lg_api_key key;
            char secret[LG_KEY_SECRET_LEN + 1];
            CHECK(lg_store_key_create(st, tenant_names[t], "", LG_SCOPE_ALL, &key, secret, &err) == 0);
            memcpy(key_ids[t * 2 + k], key.id, sizeof key.id);
        }
    }
    for (int i = 0; i < N_REC; i++) {
        char id[32];
        snprintf(id, sizeof id, "u-%d", i);
        int64_t received = (T0 + 3 * 3600 + (int64_t)rnd(6 * 86400)) * 1000 + (int64_t)rnd(1000);
        int t = (int)rnd(4); /* 3: unauthenticated */
        lg_usage_record r = tu_record(id, t < 3 ? tenant_ids[t] : 0, received);
        if (t < 3)
            memcpy(r.key_id, key_ids[t * 2 + rnd(2)], sizeof r.key_id);
        else
            r.key_id[0] = '\0';
        snprintf(r.model, sizeof r.model, "%s", models[rnd(4)]);
        snprintf(r.adapter_name, sizeof r.adapter_name, "%s", adapters[rnd(3)]);
        if (!r.adapter_name[0])
            r.adapter_digest[0] = '\0';
        r.prompt_tokens = (int64_t)rnd(5000);
        r.cached_tokens = (int64_t)rnd((uint64_t)r.prompt_tokens + 1);
        r.completion_tokens = (int64_t)rnd(2000);
        lg_pricing p = {(int64_t)rnd(3000000), (int64_t)rnd(1000000), (int64_t)rnd(9000000)};
        CHECK(lg_money_cost(&p, r.prompt_tokens, r.cached_tokens, r.completion_tokens, &r.cost_pico, &err) == 0);
        if (t == 3) { /* a 401: nothing ran */
            r.prompt_tokens = r.cached_tokens = r.completion_tokens = r.cost_pico = 0;
            r.http_status = 401;
        }
        recs[i] = r;
        CHECK(lg_ledger_append(l, &r, NULL, NULL, &err) == 0);
    }
    /* one record is appended twice (a retried request): counted once */
    CHECK(lg_ledger_append(l, &recs[7], NULL, NULL, &err) == 0);
    CHECK(lg_ledger_flush(l, 20000, &err) == 0);
}

static int tenant_index(int64_t id)
{
    for (int t = 0; t < 3; t++)
        if (tenant_ids[t] == id)
            return t;
    return -1;
}

/* The reference: for each result of the report, recompute its sums from
 * the records; and count the groups each bucket should have. */
static bool check_query(lg_store *rd, const lg_usage_query *q)
{
    lg_err err = {{0}};
    lg_usage_report *rep = NULL;
    if (lg_store_usage_query(rd, q, &rep, &err) != 0) {
        CHECK_MSG(0, "query failed: %s", err.msg);
        return false;
    }
    bool ok = true;
    const int64_t w = q->bucket_width, first = q->start_time / w * w;
    int64_t want_buckets = (q->end_time - first + w - 1) / w;
    ok &= rep->n_buckets == want_buckets;
    int64_t total_requests = 0, want_total = 0;
    for (int b = 0; b < rep->n_buckets && ok; b++) {
        const lg_usage_bucket *bk = &rep->buckets[b];
        ok &= bk->start_time == first + b * w && bk->end_time == bk->start_time + w && bk->start_time % w == 0;
        for (int j = 0; j < bk->n_results && ok; j++) {
            const lg_usage_result *x = &bk->results[j];
            int64_t in = 0, cached = 0, out = 0, n = 0, cost = 0;
            for (int i = 0; i < N_REC; i++) {
                const lg_usage_record *r = &recs[i];
                int64_t s = r->received_at / 1000;
                if (r->received_at < q->start_time * 1000 || r->received_at >= q->end_time * 1000)
                    continue;
                if (s < bk->start_time || s >= bk->end_time)
                    continue;
                if (q->tenant_id && r->tenant_id != q->tenant_id)
                    continue;
                if ((q->group_by & LG_USAGE_GROUP_MODEL) && strcmp(r->model, x->model))
                    continue;
                if ((q->group_by & LG_USAGE_GROUP_API_KEY) && strcmp(r->key_id, x->api_key_id))
                    continue;
                if ((q->group_by & LG_USAGE_GROUP_TENANT) && r->tenant_id != x->tenant_id)
                    continue;
                in += r->prompt_tokens, cached += r->cached_tokens, out += r->completion_tokens, n++;
                cost += r->cost_pico;
            }
            ok &= n > 0 && x->num_model_requests == n && x->input_tokens == in && x->input_cached_tokens == cached &&
                  x->output_tokens == out && x->cost_pico == cost;
            if (q->group_by & LG_USAGE_GROUP_TENANT) {
                int t = tenant_index(x->tenant_id);
                ok &= t < 0 ? (x->tenant_id == 0 && !x->tenant_name[0]) : !strcmp(x->tenant_name, tenant_names[t]);
            } else {
                ok &= x->tenant_id == 0 && !x->tenant_name[0];
            }
            if (!(q->group_by & LG_USAGE_GROUP_MODEL))
                ok &= !x->model[0];
            total_requests += x->num_model_requests;
            if (!ok)
                fprintf(stderr, "bucket %d result %d differs (group_by %u tenant %lld)\n", b, j, q->group_by,
                        (long long)q->tenant_id);
        }
    }
    /* and no record is left out: the results cover every record in range */
    for (int i = 0; i < N_REC; i++) {
        const lg_usage_record *r = &recs[i];
        if (r->received_at >= q->start_time * 1000 && r->received_at < q->end_time * 1000 &&
            (!q->tenant_id || r->tenant_id == q->tenant_id))
            want_total++;
    }
    ok &= total_requests == want_total;
    lg_usage_report_free(rep);
    return ok;
}

static void test_queries(lg_store *rd)
{
    lg_err err;
    int64_t w;
    CHECK(lg_store_usage_bucket_width("1h", &w, &err) == 0 && w == 3600);
    CHECK(lg_store_usage_bucket_width("1d", &w, &err) == 0 && w == 86400);
    CHECK(lg_store_usage_bucket_width("1m", &w, &err) == LG_STORE_INVALID);

    /* the whole range, grouped by nothing: one result per non-empty day */
    lg_usage_query all = {T0, T0 + 7 * 86400, LG_USAGE_1D, 0, 0};
    CHECK(check_query(rd, &all));
    int failures = 0;
    for (int i = 0; i < 120; i++) {
        lg_usage_query q;
        q.bucket_width = rnd(2) ? LG_USAGE_1H : LG_USAGE_1D;
        q.start_time = T0 - 3600 + (int64_t)rnd(7 * 86400);
        q.end_time = q.start_time + 1 + (int64_t)rnd(q.bucket_width == LG_USAGE_1H ? 3 * 86400 : 7 * 86400);
        q.group_by = (unsigned)rnd(8);
        q.tenant_id = rnd(2) ? 0 : tenant_ids[rnd(3)];
        failures += !check_query(rd, &q);
    }
    CHECK_MSG(failures == 0, "%d of 120 random queries differ from the reference", failures);

    /* an empty range: buckets without results */
    lg_usage_query empty = {T0 - 10 * 86400, T0 - 9 * 86400, LG_USAGE_1H, 0, 7};
    lg_usage_report *rep = NULL;
    CHECK(lg_store_usage_query(rd, &empty, &rep, &err) == 0 && rep->n_buckets == 24);
    for (int b = 0; rep && b < rep->n_buckets; b++)
        CHECK(rep->buckets[b].n_results == 0);
    lg_usage_report_free(rep);
    lg_usage_report_free(NULL);

    /* argument checks */
    lg_usage_query bad = all;
    bad.end_time = bad.start_time;
    CHECK(lg_store_usage_query(rd, &bad, &rep, &err) == LG_STORE_INVALID && rep == NULL);
    bad = all;
    bad.bucket_width = 60;
    CHECK(lg_store_usage_query(rd, &bad, &rep, &err) == LG_STORE_INVALID);
    bad = all;
    bad.group_by = 8;
    CHECK(lg_store_usage_query(rd, &bad, &rep, &err) == LG_STORE_INVALID);
    bad = all;
    bad.start_time = -1;
    CHECK(lg_store_usage_query(rd, &bad, &rep, &err) == LG_STORE_INVALID);
    bad = (lg_usage_query){0, 3600LL * 20000, LG_USAGE_1H, 0, 0};
    CHECK(lg_store_usage_query(rd, &bad, &rep, &err) == LG_STORE_INVALID && strstr(err.msg, "buckets"));
}

static void test_totals_and_top(lg_store *rd)
{
    lg_err err;
    for (int t = -1; t < 3; t++) {
        int64_t tid = t < 0 ? 0 : tenant_ids[t];
        int64_t start = T0 + 86400, end = T0 + 4 * 86400;
        lg_usage_result tot;
        CHECK(lg_store_usage_totals(rd, tid, start, end, &tot, &err) == 0);
        int64_t in = 0, cached = 0, out = 0, n = 0, cost = 0;
        for (int i = 0; i < N_REC; i++) {
            const lg_usage_record *r = &recs[i];
            if (r->received_at < start * 1000 || r->received_at >= end * 1000 || (tid && r->tenant_id != tid))
                continue;
            in += r->prompt_tokens, cached += r->cached_tokens, out += r->completion_tokens, n++;
            cost += r->cost_pico;
        }
        CHECK(tot.input_tokens == in && tot.input_cached_tokens == cached && tot.output_tokens == out &&
              tot.num_model_requests == n && tot.cost_pico == cost);

        lg_usage_adapter *top = NULL;
        int nt = 0;
        CHECK(lg_store_usage_top_adapters(rd, tid, start, end, 100, &top, &nt, &err) == 0);
        int64_t prev = INT64_MAX, sum_n = 0;
        bool ok = true;
        int base_rows = 0;
        for (int j = 0; j < nt; j++) {
            int64_t tok = top[j].input_tokens + top[j].output_tokens;
            ok &= tok <= prev;
            prev = tok;
            /* each row names its tenant; no two rows are the same (tenant, adapter) */
            int ti = tenant_index(top[j].tenant_id);
            ok &= ti < 0 ? (top[j].tenant_id == 0 && !top[j].tenant_name[0])
                         : !strcmp(top[j].tenant_name, tenant_names[ti]);
            ok &= !tid || top[j].tenant_id == tid;
            for (int k = 0; k < j; k++)
                ok &= !(top[k].tenant_id == top[j].tenant_id && !strcmp(top[k].adapter_name, top[j].adapter_name));
            base_rows += !top[j].adapter_name[0];
            int64_t a_in = 0, a_out = 0, a_n = 0, a_cost = 0;
            for (int i = 0; i < N_REC; i++) {
                const lg_usage_record *r = &recs[i];
                if (r->received_at < start * 1000 || r->received_at >= end * 1000 || (tid && r->tenant_id != tid) ||
                    r->tenant_id != top[j].tenant_id || strcmp(r->adapter_name, top[j].adapter_name))
                    continue;
                a_in += r->prompt_tokens, a_out += r->completion_tokens, a_n++, a_cost += r->cost_pico;
            }
            ok &= a_in == top[j].input_tokens && a_out == top[j].output_tokens && a_n == top[j].num_model_requests &&
                  a_cost == top[j].cost_pico;
            sum_n += top[j].num_model_requests;
        }
        CHECK_MSG(ok && sum_n == n, "top adapters of tenant %lld", (long long)tid);
        /* every tenant used the base model in this range (and unauthenticated records count as one more
         * "tenant" 0): over all tenants that is one base-model row per tenant, not one merged row */
        CHECK_MSG(base_rows == (tid ? 1 : 4), "tenant %lld: %d base-model rows", (long long)tid, base_rows);
        free(top);
        CHECK(lg_store_usage_top_adapters(rd, tid, start, end, 2, &top, &nt, &err) == 0 && nt <= 2);
        free(top);
    }
    lg_usage_adapter *top;
    int nt;
    CHECK(lg_store_usage_top_adapters(rd, 0, T0, T0 + 1, 0, &top, &nt, &err) == LG_STORE_INVALID);
}

/* A deleted tenant's name can be reused: the top adapters keep the two
 * tenants apart (their ids) and name each, the deleted one included. */
static void test_top_reused_name(lg_store *st, lg_ledger *l, lg_store *rd)
{
    lg_err err;
    const int64_t day = T0 + 20 * 86400; /* after the random records */
    lg_tenant again;
    lg_tenant_spec spec = lg_tenant_spec_init("gamma");
    CHECK(lg_store_tenant_delete(st, "gamma", &err) == 0);
    CHECK(lg_store_tenant_create(st, &spec, &again, &err) == 0 && again.id != tenant_ids[2]);
    lg_usage_record old = tu_record("reuse-old", tenant_ids[2], day * 1000 + 5);
    lg_usage_record now = tu_record("reuse-new", again.id, day * 1000 + 9);
    old.adapter_name[0] = now.adapter_name[0] = '\0'; /* both on the base model */
    old.adapter_digest[0] = now.adapter_digest[0] = '\0';
    now.completion_tokens = 50;
    CHECK(lg_ledger_append(l, &old, NULL, NULL, &err) == 0 && lg_ledger_append(l, &now, NULL, NULL, &err) == 0);
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    lg_usage_adapter *top = NULL;
    int nt = 0;
    CHECK(lg_store_usage_top_adapters(rd, 0, day, day + 86400, 10, &top, &nt, &err) == 0);
    CHECK_MSG(nt == 2, "%d rows", nt);
    if (nt == 2) {
        CHECK(top[0].tenant_id == again.id && top[1].tenant_id == tenant_ids[2]); /* 150 tokens, then 120 */
        CHECK(!strcmp(top[0].tenant_name, "gamma") && !strcmp(top[1].tenant_name, "gamma"));
        CHECK(!top[0].adapter_name[0] && !top[1].adapter_name[0]);
        CHECK(top[0].output_tokens == 50 && top[1].output_tokens == 20 && top[0].num_model_requests == 1);
    }
    free(top);
}

/* CSV: exact text for a hand-made report (quoting, formula defusing,
 * exact cost), and the header follows group_by. */
static void test_csv(void)
{
    lg_err err;
    lg_usage_result res[3] = {
        {.model = "support-bot", .api_key_id = "key_aaaaaaaaaaaaaaaa", .tenant_id = 7, .tenant_name = "acme",
         .input_tokens = 1000, .input_cached_tokens = 256, .output_tokens = 50, .num_model_requests = 2,
         .cost_pico = 123456789},
        {.model = "a,\"b\"", .tenant_id = 0, .input_tokens = 1, .num_model_requests = 1, .cost_pico = 0},
        {.model = "=HYPERLINK(1)", .tenant_id = 8, .tenant_name = "beta", .output_tokens = 3,
         .num_model_requests = 1, .cost_pico = 1000000000000},
    };
    lg_usage_bucket buckets[3] = {{T0, T0 + 3600, 2, &res[0]}, {T0 + 3600, T0 + 7200, 0, NULL},
                                  {T0 + 7200, T0 + 10800, 1, &res[2]}};
    lg_usage_report rep = {LG_USAGE_GROUP_MODEL | LG_USAGE_GROUP_API_KEY | LG_USAGE_GROUP_TENANT, 3, buckets};
    char *csv = NULL;
    size_t len = 0;
    CHECK(lg_usage_report_csv(&rep, &csv, &len, &err) == 0);
    const char *want =
        "start_time,end_time,model,api_key_id,tenant_id,tenant,input_tokens,input_cached_tokens,output_tokens,"
        "num_model_requests,cost_usd\r\n"
        "1763769600,1763773200,support-bot,key_aaaaaaaaaaaaaaaa,7,acme,1000,256,50,2,0.000123456789\r\n"
        "1763769600,1763773200,\"a,\"\"b\"\"\",,0,,1,0,0,1,0.000000000000\r\n"
        "1763776800,1763780400,\"'=HYPERLINK(1)\",,8,beta,0,0,3,1,1.000000000000\r\n";
    CHECK_MSG(csv && strcmp(csv, want) == 0 && len == strlen(want), "csv:\n%s", csv ? csv : "(null)");
    free(csv);
    rep.group_by = 0;
    CHECK(lg_usage_report_csv(&rep, &csv, &len, &err) == 0);
    CHECK(csv && strncmp(csv, "start_time,end_time,input_tokens,", 33) == 0);
    free(csv);
}

/* Sums past int64 are errors, not wrapped numbers. */
static void test_overflow(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "overflow");
    lg_err err = {{0}};
    lg_store *st = NULL;
    lg_ledger *l = NULL;
    CHECK(lg_store_open(dir, &st, &err) == 0);
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == 0);
    if (!st || !l)
        return;
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        lg_usage_record r = tu_record(id, 1, T0 * 1000);
        r.cost_pico = INT64_MAX / 2 + 1;
        CHECK(lg_ledger_append(l, &r, NULL, NULL, &err) == 0);
    }
    CHECK(lg_ledger_flush(l, 10000, &err) == 0);
    lg_usage_query q = {T0, T0 + 86400, LG_USAGE_1D, 0, 0};
    lg_usage_report *rep = (lg_usage_report *)1;
    CHECK(lg_store_usage_query(st, &q, &rep, &err) == LG_STORE_ERROR && rep == NULL);
    CHECK_MSG(strstr(err.msg, "overflows int64"), "%s", err.msg);
    lg_usage_result tot;
    CHECK(lg_store_usage_totals(st, 0, T0, T0 + 86400, &tot, &err) == LG_STORE_ERROR);
    CHECK_MSG(strstr(err.msg, "overflows int64"), "%s", err.msg);
    lg_ledger_close(l);
    lg_store_close(st);
    tu_rmtree(dir);
}

int main(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "usage");
    lg_err err;
    lg_store *st = NULL, *rd = NULL;
    lg_ledger *l = NULL;
    if (lg_store_open(dir, &st, &err) || lg_ledger_open(dir, NULL, &l, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    make_records(st, l);
    CHECK(lg_store_open_reader(dir, &rd, &err) == 0);
    test_queries(rd);
    test_totals_and_top(rd);
    test_top_reused_name(st, l, rd);
    test_csv();
    lg_ledger_close(l);
    lg_store_close(rd);
    lg_store_close(st);
    test_overflow();
    tu_rmtree(dir);
    TEST_DONE();
}
