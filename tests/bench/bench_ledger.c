/*
 * bench_ledger.c — sustained throughput of the usage ledger (db/ledger.h):
 * T threads append N realistic usage records (as gateway event loops would)
 * into a fresh database; the writer thread group-commits them with
 * synchronous=FULL. Reports committed records per second (first append to
 * last durable commit), batches, and the append-to-ack latency (the time a
 * response's last bytes wait for its record to be durable).
 *
 *   build/bench_ledger [--records N] [--threads T] [--rate R] [--dir DIR]
 *                      [--batch-records B] [--delay-us D] [--ordered-ids]
 *
 * --rate R paces the appenders to R records/s in total (open loop), to see
 * ack latency at a given load; without it they append as fast as they can
 * (the backlog limit throttles them), which measures the writer's ceiling.
 * The database is created in DIR (default: a new directory under /tmp,
 * removed afterwards); with --dir an existing database grows, so that
 * runs one after another measure a ledger that already holds millions of
 * records (request ids differ from run to run).
 *
 * Request ids are random (like OpenAI's "chatcmpl-<random>"), so every
 * insert lands at a random place of the request_id index; --ordered-ids
 * makes them with lg_ledger_request_id (the time in hex first), so the
 * index grows at its end.
 */
#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db/ledger.h"
#include "db/money.h"
#include "db/store.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct slot {
    int64_t appended_ns;
    int64_t acked_ns;
} slot;

static slot *slots;
static atomic_long n_acked, n_failed;

static void on_done(void *ctx, int status)
{
    slot *s = ctx;
    s->acked_ns = now_ns();
    if (status == LG_LEDGER_COMMITTED)
        atomic_fetch_add(&n_acked, 1);
    else
        atomic_fetch_add(&n_failed, 1);
}

static bool ordered_ids;
static uint64_t run_salt;  /* differs per run: new request ids */
static int64_t run_ms;     /* received_at of the first record */

typedef struct worker {
    lg_ledger *l;
    int t, n_threads;
    long first, count;
    double rate; /* records/s for this thread; 0: unthrottled */
    long retries;
} worker;

static void *appender(void *p)
{
    worker *w = p;
    lg_err err;
    lg_pricing price = {150000, 75000, 600000};
    int64_t start = now_ns();
    uint64_t x = (0x9e3779b97f4a7c15ull ^ run_salt) * (uint64_t)(w->t + 1);
    for (long i = 0; i < w->count; i++) {
        long k = w->first + i;
        if (w->rate > 0) {
            int64_t due = start + (int64_t)((double)i * 1e9 / w->rate);
            while (now_ns() < due)
                usleep(200);
        }
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        lg_usage_record r;
        memset(&r, 0, sizeof r);
        r.received_at = run_ms + k / 20; /* 20 records per ms */
        if (ordered_ids)
            lg_ledger_request_id("chatcmpl-", r.request_id);
        else
            snprintf(r.request_id, sizeof r.request_id, "chatcmpl-%016llx%08lx", (unsigned long long)x, k);
        r.tenant_id = 1 + (int64_t)(x >> 58);
        snprintf(r.key_id, sizeof r.key_id, "key_%016llx", (unsigned long long)(x >> 7) & 0xffffffffffffull);
        snprintf(r.route, sizeof r.route, "chat.completions");
        snprintf(r.model, sizeof r.model, "support-bot-%d", (int)(x >> 40) % 32);
        snprintf(r.adapter_name, sizeof r.adapter_name, "%s", r.model);
        snprintf(r.adapter_digest, sizeof r.adapter_digest, "%016llx%016llx%016llx%016llx", (unsigned long long)x,
                 (unsigned long long)~x, (unsigned long long)(x * 3), (unsigned long long)(x * 5));
        r.prompt_tokens = 200 + (int64_t)(x >> 50);
        r.cached_tokens = r.prompt_tokens / 2;
        r.completion_tokens = 50 + (int64_t)((x >> 20) & 255);
        snprintf(r.finish_reason, sizeof r.finish_reason, "stop");
        r.http_status = 200;
        r.first_token_at = r.received_at + 25;
        r.finished_at = r.received_at + 900;
        lg_money_cost(&price, r.prompt_tokens, r.cached_tokens, r.completion_tokens, &r.cost_pico, &err);
        slots[k].appended_ns = now_ns();
        while (lg_ledger_append(w->l, &r, on_done, &slots[k], &err) != 0) {
            w->retries++; /* backlog full: the writer is behind */
            usleep(100);
            slots[k].appended_ns = now_ns();
        }
    }
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static long long count_rows(const char *path)
{
    sqlite3 *db = NULL;
    long long v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM usage_records", -1, &s, NULL) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return v;
}

int main(int argc, char **argv)
{
    long n = 500000;
    int threads = 2;
    double rate = 0;
    const char *dir_arg = NULL;
    lg_ledger_options opt = lg_ledger_options_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--records") && v) n = atol(v), i++;
        else if (!strcmp(a, "--threads") && v) threads = atoi(v), i++;
        else if (!strcmp(a, "--rate") && v) rate = atof(v), i++;
        else if (!strcmp(a, "--dir") && v) dir_arg = v, i++;
        else if (!strcmp(a, "--batch-records") && v) opt.batch_records = atoi(v), i++;
        else if (!strcmp(a, "--delay-us") && v) opt.max_delay_us = atoi(v), i++;
        else if (!strcmp(a, "--ordered-ids")) ordered_ids = true;
        else {
            fprintf(stderr, "usage: %s [--records N] [--threads T] [--rate R] [--dir DIR] [--batch-records B] "
                            "[--delay-us D] [--ordered-ids]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || threads < 1) {
        fprintf(stderr, "records and threads must be >= 1\n");
        return 2;
    }
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        run_salt = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
        run_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    char dir[512];
    if (dir_arg) {
        snprintf(dir, sizeof dir, "%s", dir_arg);
    } else {
        snprintf(dir, sizeof dir, "/tmp/bench-ledger-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
    }
    lg_err err;
    lg_store *st = NULL;
    lg_ledger *l = NULL;
    if (lg_store_open(dir, &st, &err) || lg_ledger_open(dir, &opt, &l, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    slots = calloc((size_t)n, sizeof *slots);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    worker *w = calloc((size_t)threads, sizeof *w);
    int64_t t0 = now_ns();
    for (int t = 0; t < threads; t++) {
        long per = n / threads, first = per * t;
        w[t] = (worker){l, t, threads, first, t == threads - 1 ? n - first : per, rate / threads, 0};
        pthread_create(&th[t], NULL, appender, &w[t]);
    }
    long retries = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        retries += w[t].retries;
    }
    int64_t t_appended = now_ns();
    if (lg_ledger_flush(l, 600000, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int64_t t1 = now_ns();
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);

    int64_t *lat = malloc((size_t)n * sizeof *lat);
    for (long i = 0; i < n; i++)
        lat[i] = slots[i].acked_ns - slots[i].appended_ns;
    qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
    double secs = (double)(t1 - t0) * 1e-9;
    char path[600];
    snprintf(path, sizeof path, "%s/loragate.db", dir);
    struct stat sb;
    long long db_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;

    printf("records            %ld (%d appender threads%s, %s request ids)\n", n, threads, rate > 0 ? ", paced" : "",
           ordered_ids ? "time-ordered" : "random");
    if (rate > 0)
        printf("offered rate       %.0f records/s\n", rate);
    printf("elapsed            %.3f s (appends done at %.3f s)\n", secs, (double)(t_appended - t0) * 1e-9);
    printf("committed          %.0f records/s\n", (double)n / secs);
    printf("acked              %ld ok, %ld failed\n", atomic_load(&n_acked), atomic_load(&n_failed));
    printf("batches            %llu (mean %.1f records per commit), commit errors %llu\n",
           (unsigned long long)s.batches, s.batches ? (double)s.records_written / (double)s.batches : 0.0,
           (unsigned long long)s.errors);
    printf("commit time        mean %.3f ms\n", s.batches ? s.commit_seconds_sum / (double)s.batches * 1e3 : 0.0);
    printf("append->ack        p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", (double)lat[n / 2] * 1e-6,
           (double)lat[(long)(n * 0.99)] * 1e-6, (double)lat[n - 1] * 1e-6);
    printf("backlog-full waits %ld\n", retries);
    printf("database           %.1f MB, %lld records\n", (double)db_bytes / 1e6, (long long)count_rows(path));

    lg_ledger_close(l);
    lg_store_close(st);
    if (!dir_arg)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(lat);
    free(slots);
    free(th);
    free(w);
    return atomic_load(&n_acked) == n ? 0 : 1;
}
