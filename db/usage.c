/*
 * usage.c — aggregate queries over usage_records (see usage.h).
 *
 * One GROUP BY per query: the bucket index (received_at in seconds minus
 * the first aligned bucket start, divided by the width) and the requested
 * dimensions; SQLite sums int64 and raises "integer overflow" rather than
 * wrap, which we report. The time range uses the (received_at) index, or
 * (tenant_id, received_at) with a tenant filter. Results come back ordered
 * by bucket, so each bucket's results are one contiguous run of a single
 * array. Top adapters group by (tenant, adapter) and name each row's tenant
 * (deleted tenants too) with the same subquery on tenants by id.
 */
#include "db/usage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "db/store_internal.h"

#define LG_USAGE_MAX_TIME 253402300800LL /* 10000-01-01: keeps ms arithmetic far from overflow */

typedef struct lg_report_impl {
    lg_usage_report pub; /* first: the caller's pointer */
    lg_usage_result *all;
} lg_report_impl;

int lg_store_usage_bucket_width(const char *text, int64_t *width, lg_err *err)
{
    if (text && !strcmp(text, "1h"))
        *width = LG_USAGE_1H;
    else if (text && !strcmp(text, "1d"))
        *width = LG_USAGE_1D;
    else
        return lg_fail(err, "invalid bucket width '%.20s': expected '1h' or '1d'", text ? text : ""),
               LG_STORE_INVALID;
    return 0;
}

static int lg_check_range(int64_t start, int64_t end, int64_t tenant_id, lg_err *err)
{
    if (start < 0 || end <= start || end > LG_USAGE_MAX_TIME)
        return lg_fail(err, "invalid time range [%lld, %lld): expected 0 <= start_time < end_time <= %lld",
                       (long long)start, (long long)end, LG_USAGE_MAX_TIME),
               LG_STORE_INVALID;
    if (tenant_id < 0)
        return lg_fail(err, "invalid tenant id %lld", (long long)tenant_id), LG_STORE_INVALID;
    return 0;
}

/* SQLite's SUM() fails on int64 overflow: say so plainly. */
static int lg_usage_step_fail(lg_store *st, lg_err *err)
{
    const char *m = sqlite3_errmsg(st->db);
    if (m && strstr(m, "integer overflow"))
        return lg_fail(err, "usage aggregate overflows int64 (narrow the time range or group more finely)"),
               LG_STORE_ERROR;
    return lg_st_fail(st, err, "summing usage records");
}

static int lg_query_locked(lg_store *st, const lg_usage_query *q, lg_report_impl *r, lg_err *err)
{
    const unsigned g = q->group_by;
    const int64_t w = q->bucket_width, first = q->start_time / w * w;
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (u.received_at / 1000 - ?1) / ?2 AS b, %s, %s, %s, %s, sum(u.prompt_tokens), "
             "sum(u.cached_tokens), sum(u.completion_tokens), count(*), sum(u.cost_pico) "
             "FROM usage_records u WHERE u.received_at >= ?3 AND u.received_at < ?4 %s "
             "GROUP BY b%s%s%s ORDER BY b%s%s%s",
             g & LG_USAGE_GROUP_MODEL ? "u.model" : "''", g & LG_USAGE_GROUP_API_KEY ? "u.key_id" : "''",
             g & LG_USAGE_GROUP_TENANT ? "u.tenant_id" : "0",
             g & LG_USAGE_GROUP_TENANT ? "(SELECT name FROM tenants t WHERE t.id = u.tenant_id)" : "''",
             q->tenant_id ? "AND u.tenant_id = ?5" : "", g & LG_USAGE_GROUP_MODEL ? ", u.model" : "",
             g & LG_USAGE_GROUP_API_KEY ? ", u.key_id" : "", g & LG_USAGE_GROUP_TENANT ? ", u.tenant_id" : "",
             g & LG_USAGE_GROUP_MODEL ? ", u.model" : "", g & LG_USAGE_GROUP_API_KEY ? ", u.key_id" : "",
             g & LG_USAGE_GROUP_TENANT ? ", u.tenant_id" : "");
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, sql, &s, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(s, 1, first);
    sqlite3_bind_int64(s, 2, w);
    sqlite3_bind_int64(s, 3, q->start_time * 1000);
    sqlite3_bind_int64(s, 4, q->end_time * 1000);
    if (q->tenant_id)
        sqlite3_bind_int64(s, 5, q->tenant_id);

    lg_usage_bucket *b = r->pub.buckets;
    int cap = 0, n = 0, step;
    int *bucket_of = NULL, bcap = 0;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t bi = sqlite3_column_int64(s, 0);
        if (bi < 0 || bi >= r->pub.n_buckets) { /* impossible: the WHERE bounds it */
            rc = (lg_fail(err, "usage bucket index %lld out of range", (long long)bi), LG_STORE_ERROR);
            break;
        }
        if (lg_st_grow((void **)&r->all, &cap, n, sizeof *r->all, err) ||
            lg_st_grow((void **)&bucket_of, &bcap, n, sizeof *bucket_of, err)) {
            rc = LG_STORE_ERROR;
            break;
        }
        lg_usage_result *x = &r->all[n];
        memset(x, 0, sizeof *x);
        lg_st_col_text(s, 1, x->model, sizeof x->model);
        lg_st_col_text(s, 2, x->api_key_id, sizeof x->api_key_id);
        x->tenant_id = lg_st_col_i64(s, 3, 0);
        lg_st_col_text(s, 4, x->tenant_name, sizeof x->tenant_name);
        x->input_tokens = sqlite3_column_int64(s, 5);
        x->input_cached_tokens = sqlite3_column_int64(s, 6);
        x->output_tokens = sqlite3_column_int64(s, 7);
        x->num_model_requests = sqlite3_column_int64(s, 8);
        x->cost_pico = sqlite3_column_int64(s, 9);
        bucket_of[n++] = (int)bi;
    }
    if (!rc && step != SQLITE_DONE)
        rc = lg_usage_step_fail(st, err);
    sqlite3_finalize(s);
    if (!rc) {
        for (int i = 0; i < n; i++) {
            lg_usage_bucket *k = &b[bucket_of[i]];
            if (k->n_results++ == 0)
                k->results = &r->all[i];
        }
    }
    free(bucket_of);
    return rc;
}

int lg_store_usage_query(lg_store *st, const lg_usage_query *q, lg_usage_report **out, lg_err *err)
{
    *out = NULL;
    int rc;
    if (!q)
        return lg_fail(err, "expected a usage query"), LG_STORE_INVALID;
    if ((rc = lg_check_range(q->start_time, q->end_time, q->tenant_id, err)))
        return rc;
    if (q->bucket_width != LG_USAGE_1H && q->bucket_width != LG_USAGE_1D)
        return lg_fail(err, "invalid bucket width %lld s: expected 3600 (1h) or 86400 (1d)",
                       (long long)q->bucket_width),
               LG_STORE_INVALID;
    if (q->group_by & ~(unsigned)(LG_USAGE_GROUP_MODEL | LG_USAGE_GROUP_API_KEY | LG_USAGE_GROUP_TENANT))
        return lg_fail(err, "invalid group_by %#x", q->group_by), LG_STORE_INVALID;
    const int64_t w = q->bucket_width, first = q->start_time / w * w;
    const int64_t nb = (q->end_time - first + w - 1) / w;
    if (nb > LG_USAGE_MAX_BUCKETS)
        return lg_fail(err, "usage query spans %lld buckets (at most %d): narrow the range or use 1d buckets",
                       (long long)nb, LG_USAGE_MAX_BUCKETS),
               LG_STORE_INVALID;
    lg_report_impl *r = calloc(1, sizeof *r);
    lg_usage_bucket *buckets = calloc((size_t)nb, sizeof *buckets);
    if (!r || !buckets) {
        free(r);
        free(buckets);
        return lg_fail(err, "out of memory");
    }
    r->pub.group_by = q->group_by;
    r->pub.n_buckets = (int)nb;
    r->pub.buckets = buckets;
    for (int64_t i = 0; i < nb; i++)
        buckets[i] = (lg_usage_bucket){.start_time = first + i * w, .end_time = first + (i + 1) * w};
    lg_st_lock(st);
    rc = lg_query_locked(st, q, r, err);
    lg_st_unlock(st);
    if (rc) {
        lg_usage_report_free(&r->pub);
        return rc;
    }
    *out = &r->pub;
    return 0;
}

void lg_usage_report_free(lg_usage_report *rep)
{
    if (!rep)
        return;
    lg_report_impl *r = (lg_report_impl *)rep;
    free(r->all);
    free(r->pub.buckets);
    free(r);
}

int lg_store_usage_totals(lg_store *st, int64_t tenant_id, int64_t start_time, int64_t end_time, lg_usage_result *out,
                          lg_err *err)
{
    int rc = lg_check_range(start_time, end_time, tenant_id, err);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->tenant_id = tenant_id;
    lg_st_lock(st);
    sqlite3_stmt *s = NULL;
    if (!(rc = lg_st_prepare(st,
                             "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(cached_tokens), 0), "
                             "coalesce(sum(completion_tokens), 0), count(*), coalesce(sum(cost_pico), 0) "
                             "FROM usage_records WHERE received_at >= ?1 AND received_at < ?2 "
                             "AND (?3 = 0 OR tenant_id = ?3)",
                             &s, err))) {
        sqlite3_bind_int64(s, 1, start_time * 1000);
        sqlite3_bind_int64(s, 2, end_time * 1000);
        sqlite3_bind_int64(s, 3, tenant_id);
        if (sqlite3_step(s) == SQLITE_ROW) {
            out->input_tokens = sqlite3_column_int64(s, 0);
            out->input_cached_tokens = sqlite3_column_int64(s, 1);
            out->output_tokens = sqlite3_column_int64(s, 2);
            out->num_model_requests = sqlite3_column_int64(s, 3);
            out->cost_pico = sqlite3_column_int64(s, 4);
        } else {
            rc = lg_usage_step_fail(st, err);
        }
    }
    sqlite3_finalize(s);
    lg_st_unlock(st);
    return rc;
}

static int lg_top_locked(lg_store *st, int64_t tenant_id, int64_t start, int64_t end, int limit,
                         lg_usage_adapter **out, int *n, lg_err *err)
{
    /* grouped by tenant as well as adapter: the base model (adapter_name NULL) and same-named adapters of
     * different tenants stay apart, each row named by its tenant (deleted ones too) */
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT u.tenant_id, coalesce(u.adapter_name, ''), sum(u.prompt_tokens), sum(u.cached_tokens), "
             "sum(u.completion_tokens), count(*), sum(u.cost_pico), sum(u.prompt_tokens + u.completion_tokens) AS tok, "
             "coalesce((SELECT t.name FROM tenants t WHERE t.id = u.tenant_id), '') "
             "FROM usage_records u WHERE u.received_at >= ?1 AND u.received_at < ?2 %s "
             "GROUP BY u.tenant_id, u.adapter_name ORDER BY tok DESC, u.tenant_id, u.adapter_name LIMIT ?4",
             tenant_id ? "AND u.tenant_id = ?3" : "");
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, sql, &s, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(s, 1, start * 1000);
    sqlite3_bind_int64(s, 2, end * 1000);
    if (tenant_id)
        sqlite3_bind_int64(s, 3, tenant_id);
    sqlite3_bind_int(s, 4, limit);
    lg_usage_adapter *arr = NULL;
    int cap = 0, cnt = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (lg_st_grow((void **)&arr, &cap, cnt, sizeof *arr, err)) {
            rc = LG_STORE_ERROR;
            break;
        }
        lg_usage_adapter *a = &arr[cnt++];
        memset(a, 0, sizeof *a);
        a->tenant_id = lg_st_col_i64(s, 0, 0);
        lg_st_col_text(s, 1, a->adapter_name, sizeof a->adapter_name);
        a->input_tokens = sqlite3_column_int64(s, 2);
        a->input_cached_tokens = sqlite3_column_int64(s, 3);
        a->output_tokens = sqlite3_column_int64(s, 4);
        a->num_model_requests = sqlite3_column_int64(s, 5);
        a->cost_pico = sqlite3_column_int64(s, 6);
        lg_st_col_text(s, 8, a->tenant_name, sizeof a->tenant_name);
    }
    if (!rc && step != SQLITE_DONE)
        rc = lg_usage_step_fail(st, err);
    sqlite3_finalize(s);
    if (rc) {
        free(arr);
        return rc;
    }
    *out = arr;
    *n = cnt;
    return 0;
}

int lg_store_usage_top_adapters(lg_store *st, int64_t tenant_id, int64_t start_time, int64_t end_time, int limit,
                                lg_usage_adapter **out, int *n, lg_err *err)
{
    *out = NULL;
    *n = 0;
    int rc = lg_check_range(start_time, end_time, tenant_id, err);
    if (rc)
        return rc;
    if (limit < 1)
        return lg_fail(err, "limit must be >= 1, got %d", limit), LG_STORE_INVALID;
    lg_st_lock(st);
    rc = lg_top_locked(st, tenant_id, start_time, end_time, limit, out, n, err);
    lg_st_unlock(st);
    return rc;
}

/* ---- CSV ------------------------------------------------------------------------ */

/* ",<field>": quoted when needed, defused when a spreadsheet would read a formula */
static void lg_csv_text(lg_strbuf *b, const char *s)
{
    lg_strbuf_put(b, ",", 1);
    bool formula = s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@' || s[0] == '\t' || s[0] == '\r';
    bool quote = formula || strpbrk(s, ",\"\r\n") != NULL;
    if (quote)
        lg_strbuf_put(b, "\"", 1);
    if (formula)
        lg_strbuf_put(b, "'", 1);
    for (const char *c = s; *c; c++) {
        if (*c == '"')
            lg_strbuf_put(b, "\"\"", 2);
        else
            lg_strbuf_put(b, c, 1);
    }
    if (quote)
        lg_strbuf_put(b, "\"", 1);
}

int lg_usage_report_csv(const lg_usage_report *r, char **out, size_t *len, lg_err *err)
{
    *out = NULL;
    *len = 0;
    if (!r)
        return lg_fail(err, "expected a usage report"), LG_STORE_INVALID;
    const unsigned g = r->group_by;
    lg_strbuf b = {0};
    lg_strbuf_printf(&b, "start_time,end_time%s%s%s,input_tokens,input_cached_tokens,output_tokens,"
                      "num_model_requests,cost_usd\r\n",
                  g & LG_USAGE_GROUP_MODEL ? ",model" : "", g & LG_USAGE_GROUP_API_KEY ? ",api_key_id" : "",
                  g & LG_USAGE_GROUP_TENANT ? ",tenant_id,tenant" : "");
    for (int i = 0; i < r->n_buckets; i++) {
        const lg_usage_bucket *k = &r->buckets[i];
        for (int j = 0; j < k->n_results; j++) {
            const lg_usage_result *x = &k->results[j];
            lg_strbuf_printf(&b, "%lld,%lld", (long long)k->start_time, (long long)k->end_time);
            if (g & LG_USAGE_GROUP_MODEL)
                lg_csv_text(&b, x->model);
            if (g & LG_USAGE_GROUP_API_KEY)
                lg_csv_text(&b, x->api_key_id);
            if (g & LG_USAGE_GROUP_TENANT) {
                lg_strbuf_printf(&b, ",%lld", (long long)x->tenant_id);
                lg_csv_text(&b, x->tenant_name);
            }
            char usd[LG_MONEY_USD_BUF];
            lg_money_format_usd(x->cost_pico, usd);
            lg_strbuf_printf(&b, ",%lld,%lld,%lld,%lld,%s\r\n", (long long)x->input_tokens,
                          (long long)x->input_cached_tokens, (long long)x->output_tokens,
                          (long long)x->num_model_requests, usd);
        }
    }
    if (b.oom) {
        free(b.p);
        return lg_fail(err, "out of memory formatting usage CSV");
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
