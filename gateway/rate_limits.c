/*
 * rate_limits.c — per-tenant limits (rate_limits.h): requests per minute,
 * tokens per minute, concurrent requests and a monthly token budget.
 *
 * State. One `tstate` per tenant id, made on first use and kept until the
 * process ends (tenant objects are never freed either). A small open
 * hash table maps ids to states under one mutex held for a lookup only;
 * each state has its own mutex, held for the few arithmetic operations of
 * an admit or a finish, so the limits hold exactly across all loop threads
 * and tenants never contend with each other.
 *
 * Rates are token buckets refilled continuously: a bucket of `limit` per
 * minute holds at most `limit` and gains limit/60 per second. A request
 * takes 1 from the requests bucket and its estimate (prompt + max output)
 * from the tokens bucket; when it finishes, the difference between the
 * estimate and what it really used is given back (or taken: a bucket may go
 * below zero by what a request used beyond its estimate). The headers are
 * OpenAI's: x-ratelimit-limit-{requests,tokens} (the per-minute limits),
 * x-ratelimit-remaining-{requests,tokens} (what the buckets hold after this
 * request) and x-ratelimit-reset-{requests,tokens} (time until the bucket
 * is full again, "1s", "250ms", "1m30s"); a dimension without a limit sends
 * none of its headers.
 *
 * The monthly budget counts the billed prompt + completion tokens (the
 * ledger's figures: a request cancelled before its prompt was computed
 * counts only what was prefilled, often 0) of every request
 * whose engine work finished this calendar month (UTC), plus the estimates
 * of requests in flight: a request is admitted only if its estimate fits in
 * what is left, so the budget is never overrun by more than what requests
 * used beyond their estimate. The count is seeded once, at creation, from
 * the ledger (one grouped query over the month so far, all tenants); after
 * that every finished request adds its tokens in memory, so an admit never
 * touches the disk. Tenants created later start at 0 (they have no records).
 * At a month boundary the count starts again from 0.
 *
 * Refusals: 429 with OpenAI's error shape: type "requests" or "tokens" and
 * code "rate_limit_exceeded" for the rates and the concurrency limit, type
 * and code "insufficient_quota" for the budget; Retry-After (and
 * retry-after-ms, which the OpenAI SDKs read first) says when a retry can
 * succeed (the budget: the start of next month). This file only words the
 * verdict (lg_limits_verdict); the route sends it.
 */
#include "gateway/rate_limits.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/usage.h"
#include "gateway/unix_time.h"

typedef struct bucket {
    bool init;
    int64_t cap;  /* the limit it was last refilled with */
    double level; /* may be negative (usage beyond estimates) */
    double t;     /* monotonic seconds of the last refill */
} bucket;

typedef struct tstate {
    int64_t tenant_id;
    pthread_mutex_t mu;
    bucket req, tok;
    int64_t inflight;
    int64_t month_start; /* Unix seconds: the month `used` counts */
    int64_t used;        /* finished requests' tokens this month */
    int64_t reserved;    /* estimates of admitted, unfinished requests */
} tstate;

struct lg_limits {
    pthread_mutex_t mu; /* the table */
    tstate **slots;     /* open addressing by tenant id */
    size_t cap, n;
    /* seed: tenant id -> tokens this month, as read at creation */
    int64_t seed_month;
    int64_t *seed_ids, *seed_tokens;
    int n_seed;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Unix seconds of the first instant of the UTC month containing t, and of the next one. */
static int64_t month_start_of(int64_t t, int64_t *next)
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    struct tm m = {.tm_year = tm.tm_year, .tm_mon = tm.tm_mon, .tm_mday = 1};
    int64_t start = (int64_t)timegm(&m);
    if (next) {
        struct tm n = {.tm_year = tm.tm_mon == 11 ? tm.tm_year + 1 : tm.tm_year, .tm_mon = (tm.tm_mon + 1) % 12,
                       .tm_mday = 1};
        *next = (int64_t)timegm(&n);
    }
    return start;
}

/* ---- creation: the month so far from the ledger -------------------------- */

static int seed_month(lg_limits *l, const char *data_dir, lg_err *err)
{
    int64_t now = lg_unix_now(), next;
    l->seed_month = month_start_of(now, &next);
    lg_store *rd = NULL;
    if (lg_store_open_reader(data_dir, &rd, err) != 0)
        return -1;
    lg_usage_query q = {.start_time = l->seed_month, .end_time = next, .bucket_width = LG_USAGE_1D,
                        .tenant_id = 0, .group_by = LG_USAGE_GROUP_TENANT};
    lg_usage_report *rep = NULL;
    int rc = lg_store_usage_query(rd, &q, &rep, err);
    lg_store_close(rd);
    if (rc != 0)
        return -1;
    int cap = 0;
    for (int b = 0; b < rep->n_buckets; b++)
        cap += rep->buckets[b].n_results;
    l->seed_ids = calloc((size_t)cap + 1, sizeof *l->seed_ids);
    l->seed_tokens = calloc((size_t)cap + 1, sizeof *l->seed_tokens);
    if (!l->seed_ids || !l->seed_tokens) {
        lg_usage_report_free(rep);
        return lg_fail(err, "out of memory");
    }
    for (int b = 0; b < rep->n_buckets; b++)
        for (int i = 0; i < rep->buckets[b].n_results; i++) {
            const lg_usage_result *res = &rep->buckets[b].results[i];
            int k = 0;
            while (k < l->n_seed && l->seed_ids[k] != res->tenant_id)
                k++;
            if (k == l->n_seed) {
                l->seed_ids[k] = res->tenant_id;
                l->n_seed++;
            }
            l->seed_tokens[k] += res->input_tokens + res->output_tokens;
        }
    lg_usage_report_free(rep);
    return 0;
}

int lg_limits_create(const char *data_dir, lg_limits **out, lg_err *err)
{
    lg_limits *l = calloc(1, sizeof *l);
    if (!l)
        return lg_fail(err, "out of memory");
    pthread_mutex_init(&l->mu, NULL);
    l->cap = 64;
    l->slots = calloc(l->cap, sizeof *l->slots);
    if (!l->slots) {
        lg_limits_free(l);
        return lg_fail(err, "out of memory");
    }
    if (data_dir && seed_month(l, data_dir, err) != 0) {
        lg_err e2;
        lg_fail(&e2, "limits: reading this month's usage: %s", err->msg);
        *err = e2;
        lg_limits_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void lg_limits_free(lg_limits *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->cap; i++)
        if (l->slots && l->slots[i]) {
            pthread_mutex_destroy(&l->slots[i]->mu);
            free(l->slots[i]);
        }
    free(l->slots);
    free(l->seed_ids);
    free(l->seed_tokens);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static size_t slot_of(int64_t id, size_t cap) { return (size_t)((uint64_t)id * 0x9E3779B97F4A7C15ull >> 7) & (cap - 1); }

static int grow(lg_limits *l)
{
    size_t cap = l->cap * 2;
    tstate **s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < l->cap; i++)
        if (l->slots[i]) {
            size_t j = slot_of(l->slots[i]->tenant_id, cap);
            while (s[j])
                j = (j + 1) & (cap - 1);
            s[j] = l->slots[i];
        }
    free(l->slots);
    l->slots = s;
    l->cap = cap;
    return 0;
}

/* The tenant's state, made on first use (NULL only when out of memory). */
static tstate *state_of(lg_limits *l, int64_t id)
{
    pthread_mutex_lock(&l->mu);
    size_t j = slot_of(id, l->cap);
    while (l->slots[j] && l->slots[j]->tenant_id != id)
        j = (j + 1) & (l->cap - 1);
    tstate *s = l->slots[j];
    if (!s) {
        if ((l->n + 1) * 2 > l->cap) {
            if (grow(l) != 0) {
                pthread_mutex_unlock(&l->mu);
                return NULL;
            }
            j = slot_of(id, l->cap);
            while (l->slots[j])
                j = (j + 1) & (l->cap - 1);
        }
        if ((s = calloc(1, sizeof *s))) {
            s->tenant_id = id;
            pthread_mutex_init(&s->mu, NULL);
            s->month_start = l->seed_month;
            for (int k = 0; k < l->n_seed; k++)
                if (l->seed_ids[k] == id)
                    s->used = l->seed_tokens[k];
            l->slots[j] = s;
            l->n++;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return s;
}

/* ---- buckets ---------------------------------------------------------------- */

static void refill(bucket *b, int64_t cap, double now)
{
    if (b->init && now < b->t)
        now = b->t; /* never backwards: a bucket only gains with time */
    if (!b->init || b->cap < 0) {
        b->level = (double)cap; /* a new limit starts full */
        b->init = true;
    } else if (cap != b->cap && b->level > (double)cap) {
        b->level = (double)cap;
    } else if (cap > 0) {
        b->level += (now - b->t) * (double)cap / 60.0;
        if (b->level > (double)cap)
            b->level = (double)cap;
    }
    b->cap = cap;
    b->t = now;
}

static void bucket_unlimited(bucket *b) { b->cap = LG_UNLIMITED; }

/* Seconds until the bucket holds `want` (inf when it never can). */
static double wait_for(const bucket *b, double want)
{
    if (b->level >= want)
        return 0;
    if (b->cap <= 0 || want > (double)b->cap)
        return INFINITY;
    return (want - b->level) * 60.0 / (double)b->cap;
}

/* OpenAI's reset durations: "20ms", "1.5s", "6m0s". */
static void fmt_duration(double s, char *buf, size_t n)
{
    if (!(s > 0)) {
        snprintf(buf, n, "0s");
    } else if (s < 1) {
        snprintf(buf, n, "%dms", (int)ceil(s * 1000));
    } else if (s < 60) {
        int ms = (int)ceil(s * 1000);
        if (ms % 1000)
            snprintf(buf, n, "%d.%03ds", ms / 1000, ms % 1000);
        else
            snprintf(buf, n, "%ds", ms / 1000);
    } else {
        long t = (long)ceil(s);
        snprintf(buf, n, "%ldm%lds", t / 60, t % 60);
    }
}

static void rate_headers(lg_limits_verdict *v, const bucket *b, int64_t limit, const char *what)
{
    if (limit < 0)
        return;
    lg_limits_header *h = &v->headers[v->n_headers];
    v->n_headers += 3;
    snprintf(h[0].name, sizeof h[0].name, "x-ratelimit-limit-%s", what);
    snprintf(h[0].value, sizeof h[0].value, "%" PRId64, limit);
    snprintf(h[1].name, sizeof h[1].name, "x-ratelimit-remaining-%s", what);
    double lv = b->level < 0 ? 0 : floor(b->level);
    snprintf(h[1].value, sizeof h[1].value, "%" PRId64, (int64_t)lv);
    snprintf(h[2].name, sizeof h[2].name, "x-ratelimit-reset-%s", what);
    fmt_duration(limit > 0 ? ((double)limit - b->level) * 60.0 / (double)limit : 0, h[2].value, sizeof h[2].value);
}

/* When a retry can succeed, as Retry-After (whole seconds, at least 1) and
 * retry-after-ms (at least 1). */
static void retry_after(lg_limits_verdict *v, double retry_s)
{
    if (!isfinite(retry_s) || retry_s > 40 * 86400.0)
        retry_s = 60;
    int secs = (int)ceil(retry_s);
    v->retry_after_s = secs < 1 ? 1 : secs;
    int64_t ms = (int64_t)ceil(retry_s * 1000);
    v->retry_after_ms = ms > 0 ? ms : 1;
}

/* ---- admit / finish ------------------------------------------------------------- */

int lg_limits_admit(lg_limits *l, int64_t tenant_id, const lg_tenant_limits *lim, int64_t est_tokens,
                    lg_limits_verdict *v)
{
    memset(v, 0, sizeof *v);
    if (!l)
        return 0;
    tstate *s = state_of(l, tenant_id);
    if (!s)
        return 0;
    if (est_tokens < 0)
        est_tokens = 0;
    int64_t wall = lg_unix_now(), next_month;
    int64_t month = month_start_of(wall, &next_month);
    const char *type = NULL, *code = "rate_limit_exceeded", *reason = NULL;
    double retry = 0;

    pthread_mutex_lock(&s->mu);
    /* the clock is read under the lock: a time read before it could be
     * older than the bucket's last refill by another thread, and refilling
     * to it took a fraction away (seen as a remaining count one short, or a
     * spurious 429 at the edge) */
    const double now = mono_now();
    if (month != s->month_start) {
        s->month_start = month;
        s->used = 0;
    }
    if (lim->rpm >= 0)
        refill(&s->req, lim->rpm, now);
    else
        bucket_unlimited(&s->req);
    if (lim->tpm >= 0)
        refill(&s->tok, lim->tpm, now);
    else
        bucket_unlimited(&s->tok);

    if (lim->monthly_tokens >= 0 && s->used + s->reserved + est_tokens > lim->monthly_tokens) {
        type = "insufficient_quota";
        code = "insufficient_quota";
        reason = "monthly_tokens";
        retry = (double)(next_month - wall);
        int64_t left = lim->monthly_tokens - s->used - s->reserved;
        snprintf(v->message, sizeof v->message,
                 "You exceeded your current quota: this tenant's monthly budget is %" PRId64
                 " tokens, %" PRId64 " are left this month and this request may use up to %" PRId64
                 " tokens (prompt plus max_tokens). Ask the operator to raise the budget, or lower max_tokens.",
                 lim->monthly_tokens, left > 0 ? left : 0, est_tokens);
    } else if (lim->concurrent >= 0 && s->inflight >= lim->concurrent) {
        type = "requests";
        reason = "concurrent";
        retry = 1;
        snprintf(v->message, sizeof v->message,
                 "Rate limit reached on concurrent requests: Limit %" PRId64 ", in flight %" PRId64
                 ". Please try again when one of them has finished.",
                 lim->concurrent, s->inflight);
    } else if (lim->rpm >= 0 && s->req.level < 1) {
        type = "requests";
        reason = "rpm";
        retry = wait_for(&s->req, 1);
        snprintf(v->message, sizeof v->message,
                 "Rate limit reached on requests per min (RPM): Limit %" PRId64 ", Remaining 0. Please try again in "
                 "%.3fs.",
                 lim->rpm, isfinite(retry) ? retry : 60.0);
    } else if (lim->tpm >= 0 && s->tok.level < (double)est_tokens) {
        type = "tokens";
        reason = "tpm";
        retry = wait_for(&s->tok, (double)est_tokens);
        if (isfinite(retry))
            snprintf(v->message, sizeof v->message,
                     "Rate limit reached on tokens per min (TPM): Limit %" PRId64 ", Remaining %" PRId64
                     ", Requested %" PRId64 " (prompt plus max_tokens). Please try again in %.3fs.",
                     lim->tpm, s->tok.level > 0 ? (int64_t)s->tok.level : 0, est_tokens, retry);
        else
            snprintf(v->message, sizeof v->message,
                     "Request too large for tokens per min (TPM): Limit %" PRId64 ", Requested %" PRId64
                     " (prompt plus max_tokens). Lower max_tokens or shorten the prompt.",
                     lim->tpm, est_tokens);
    } else {
        if (lim->rpm >= 0)
            s->req.level -= 1;
        if (lim->tpm >= 0)
            s->tok.level -= (double)est_tokens;
        s->inflight++;
        s->reserved += est_tokens;
    }
    bucket req = s->req, tok = s->tok;
    pthread_mutex_unlock(&s->mu);

    rate_headers(v, &req, lim->rpm, "requests");
    rate_headers(v, &tok, lim->tpm, "tokens");
    if (!type)
        return 0;
    v->type = type;
    v->code = code;
    v->reason = reason;
    retry_after(v, retry);
    return -1;
}

void lg_limits_finish(lg_limits *l, int64_t tenant_id, int64_t est_tokens, int64_t actual_tokens)
{
    if (!l)
        return;
    tstate *s = state_of(l, tenant_id);
    if (!s)
        return;
    if (est_tokens < 0)
        est_tokens = 0;
    if (actual_tokens < 0)
        actual_tokens = 0;
    int64_t wall = lg_unix_now();
    int64_t month = month_start_of(wall, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->inflight > 0)
        s->inflight--;
    s->reserved -= est_tokens;
    if (s->reserved < 0)
        s->reserved = 0;
    if (month != s->month_start) {
        s->month_start = month;
        s->used = 0;
    }
    s->used += actual_tokens;
    if (s->tok.init && s->tok.cap >= 0) {
        s->tok.level += (double)(est_tokens - actual_tokens);
        if (s->tok.level > (double)s->tok.cap)
            s->tok.level = (double)s->tok.cap;
    }
    pthread_mutex_unlock(&s->mu);
}

int lg_limits_usage(lg_limits *l, int64_t tenant_id, lg_limits_state *out)
{
    memset(out, 0, sizeof *out);
    if (!l)
        return -1;
    tstate *s = state_of(l, tenant_id);
    if (!s)
        return -1;
    pthread_mutex_lock(&s->mu);
    out->inflight = s->inflight;
    out->month_start = s->month_start;
    out->month_tokens = s->used;
    out->reserved_tokens = s->reserved;
    pthread_mutex_unlock(&s->mu);
    return 0;
}
