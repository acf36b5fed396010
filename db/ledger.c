/*
 * ledger.c — the usage ledger writer thread (see ledger.h for the contract).
 *
 * State, all under l->mu:
 *   pending    records appended and not yet taken by the writer, a list of
 *              chunks of LG_CHUNK records (chunks are recycled through a
 *              free list, so a steady load allocates nothing);
 *   batch      what the writer took (owned by the writer thread, outside
 *              the lock while it commits);
 *   appended   records accepted so far; settled: records whose callbacks
 *              have run (committed, rejected or abandoned). Batches are taken
 *              and settled in append order, so "everything appended before
 *              time t is settled" is settled >= appended(t): that is flush.
 *
 * The writer loop: wait for a record; then (when max_delay_us > 0) wait
 * until batch_records are queued, or max_delay_us after the first one was
 * queued, or a flush or stop asks to hurry; take up to max_batch records; commit them in one
 * transaction (retrying on failure with backoff, reopening the connection
 * each time); run the callbacks; publish the counters; repeat. Appends
 * that arrive while a commit waits on fsync form the next batch: that is
 * the group commit, and why throughput grows with load.
 *
 * Expected workload: up to tens of thousands of appends per second from
 * several event-loop threads; one fsync per batch. The writer connection
 * has a 64 MiB page cache (see lg_open_db) and reuses one prepared INSERT.
 */
#include "db/ledger.h"

#include <errno.h>
#include <limits.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "db/schema.h"

#define LG_CHUNK 64
#define LG_FREE_CHUNKS_MAX 256 /* ~11 MiB of recycled chunks at most */
#define LG_BACKOFF_MIN_NS 5000000LL
#define LG_BACKOFF_MAX_NS 1000000000LL
#define LG_WRITER_CACHE_KIB 65536 /* the writer connection's page cache, at most 64 MiB */
#define LG_QUOTE_(x) #x
#define LG_QUOTE(x) LG_QUOTE_(x)

const double lg_ledger_hist_bounds[LG_LEDGER_HIST_N] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                         0.05,   0.1,   0.2,   0.5,   1.0,  2.5};

typedef struct lg_item {
    lg_usage_record rec;
    lg_ledger_done_fn done;
    void *ctx;
    int status; /* set by the commit attempt */
} lg_item;

typedef struct lg_chunk {
    struct lg_chunk *next;
    int n;
    lg_item items[LG_CHUNK];
} lg_chunk;

typedef struct lg_queue {
    lg_chunk *head, *tail;
    int64_t n;
} lg_queue;

struct lg_ledger {
    char path[PATH_MAX + 32];
    lg_ledger_options opt;

    pthread_mutex_t mu;
    pthread_cond_t wake;    /* the writer: work, flush, stop */
    pthread_cond_t settled; /* flushers: `settled` advanced */
    lg_queue pending;
    int64_t first_pending_ns; /* when the oldest pending record was appended */
    int64_t in_batch;         /* records the writer holds */
    uint64_t appended, settled_n;
    int flushers;
    bool stopping, joined;
    int64_t stop_deadline_ns;
    lg_chunk *free_chunks;
    int n_free_chunks;
    bool healthy;
    char reason[300];
    lg_ledger_stats stats; /* counters; backlog/healthy filled on read */

    pthread_t thread;
    bool thread_started;
    /* writer thread only */
    sqlite3 *db;
    sqlite3_stmt *ins;
};

static int64_t lg_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void lg_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000LL, .tv_nsec = deadline_ns % 1000000000LL};
    pthread_cond_timedwait(cv, mu, &ts);
}

lg_ledger_options lg_ledger_options_default(void)
{
    return (lg_ledger_options){
        .max_delay_us = 0,
        .batch_records = 256,
        .max_batch = 16384,
        .max_backlog = 1000000,
    };
}

/* ---- validation (the schema's CHECKs, so the database never refuses) ---- */

static bool lg_str_in(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

static int lg_check_record(const lg_usage_record *r, lg_err *err)
{
    if (!r)
        return lg_fail(err, "expected a usage record"), LG_STORE_INVALID;
#define LG_STR(f)                                                                                          \
    if (!lg_str_in(r->f, sizeof r->f))                                                                     \
        return lg_fail(err, "usage record: field " #f " is not NUL-terminated within %zu bytes", sizeof r->f), \
               LG_STORE_INVALID;
    LG_STR(request_id)
    LG_STR(key_id)
    LG_STR(route)
    LG_STR(model)
    LG_STR(adapter_name)
    LG_STR(adapter_digest)
    LG_STR(finish_reason)
    LG_STR(error_type)
#undef LG_STR
    if (!r->request_id[0] || !r->route[0])
        return lg_fail(err, "usage record: request_id and route are required"), LG_STORE_INVALID;
    size_t dl = strlen(r->adapter_digest);
    bool hex = dl == 0 || dl == 64;
    for (size_t i = 0; hex && i < dl; i++)
        hex = (r->adapter_digest[i] >= '0' && r->adapter_digest[i] <= '9') ||
              (r->adapter_digest[i] >= 'a' && r->adapter_digest[i] <= 'f');
    if (!hex)
        return lg_fail(err, "usage record %s: adapter_digest must be empty or 64 lower-case hex", r->request_id),
               LG_STORE_INVALID;
    if (r->prompt_tokens < 0 || r->cached_tokens < 0 || r->completion_tokens < 0 ||
        r->cached_tokens > r->prompt_tokens)
        return lg_fail(err, "usage record %s: token counts must be >= 0 with cached <= prompt (%lld, %lld, %lld)",
                       r->request_id, (long long)r->prompt_tokens, (long long)r->cached_tokens,
                       (long long)r->completion_tokens),
               LG_STORE_INVALID;
    if (r->http_status < 0 || r->http_status > 999 || r->tenant_id < 0 || r->cost_pico < 0 || r->received_at < 0 ||
        r->first_token_at < 0 || r->finished_at < 0)
        return lg_fail(err, "usage record %s: status, tenant, cost and times must be >= 0 (status <= 999)",
                       r->request_id),
               LG_STORE_INVALID;
    return 0;
}

static void lg_log_record(const char *what, const lg_usage_record *r)
{
    lg_log("usage ledger: %s: request_id=%s tenant_id=%lld key_id=%s route=%s model=%s adapter=%s digest=%s "
           "prompt=%lld cached=%lld completion=%lld finish=%s status=%d error=%s received_at=%lld "
           "first_token_at=%lld finished_at=%lld cost_pico=%lld",
           what, r->request_id, (long long)r->tenant_id, r->key_id, r->route, r->model, r->adapter_name,
           r->adapter_digest, (long long)r->prompt_tokens, (long long)r->cached_tokens,
           (long long)r->completion_tokens, r->finish_reason, r->http_status, r->error_type,
           (long long)r->received_at, (long long)r->first_token_at, (long long)r->finished_at,
           (long long)r->cost_pico);
}

int lg_ledger_request_id(const char *prefix, char out[LG_LEDGER_REQUEST_ID_MAX])
{
    out[0] = '\0';
    size_t pl = prefix ? strlen(prefix) : 0;
    uint8_t rnd[8];
    if (pl > 32 || RAND_bytes(rnd, sizeof rnd) != 1)
        return -1;
    uint64_t r = 0;
    for (int i = 0; i < 8; i++)
        r = r << 8 | rnd[i];
    snprintf(out, LG_LEDGER_REQUEST_ID_MAX, "%s%012llx%016llx", prefix ? prefix : "",
             (unsigned long long)lg_db_now_ms() & 0xffffffffffffull, (unsigned long long)r);
    return 0;
}

/* ---- the queue ---------------------------------------------------------------- */

static lg_chunk *lg_chunk_get(lg_ledger *l)
{
    lg_chunk *c = l->free_chunks;
    if (c) {
        l->free_chunks = c->next;
        l->n_free_chunks--;
    } else if (!(c = malloc(sizeof *c))) {
        return NULL;
    }
    c->next = NULL;
    c->n = 0;
    return c;
}

static void lg_chunks_put(lg_ledger *l, lg_chunk *c)
{
    while (c) {
        lg_chunk *next = c->next;
        if (l->n_free_chunks < LG_FREE_CHUNKS_MAX) {
            c->next = l->free_chunks;
            l->free_chunks = c;
            l->n_free_chunks++;
        } else {
            free(c);
        }
        c = next;
    }
}

/* Moves whole chunks from pending to *batch until max records (at least one
 * chunk). */
static void lg_take(lg_ledger *l, lg_queue *batch, int64_t max)
{
    *batch = (lg_queue){0};
    while (l->pending.head && (batch->n == 0 || batch->n + l->pending.head->n <= max)) {
        lg_chunk *c = l->pending.head;
        l->pending.head = c->next;
        if (!l->pending.head)
            l->pending.tail = NULL;
        c->next = NULL;
        if (batch->tail)
            batch->tail->next = c;
        else
            batch->head = c;
        batch->tail = c;
        batch->n += c->n;
        l->pending.n -= c->n;
    }
}

int lg_ledger_append(lg_ledger *l, const lg_usage_record *rec, lg_ledger_done_fn done, void *ctx, lg_err *err)
{
    int rc = lg_check_record(rec, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&l->mu);
    if (l->stopping) {
        pthread_mutex_unlock(&l->mu);
        return lg_fail(err, "usage ledger is stopped: record %s not accepted", rec->request_id);
    }
    if (l->pending.n + l->in_batch >= l->opt.max_backlog) {
        pthread_mutex_unlock(&l->mu);
        return lg_fail(err, "usage ledger backlog is full (%lld records not yet committed): record %s not accepted",
                       (long long)l->opt.max_backlog, rec->request_id);
    }
    lg_chunk *t = l->pending.tail;
    if (!t || t->n == LG_CHUNK) {
        lg_chunk *c = lg_chunk_get(l);
        if (!c) {
            pthread_mutex_unlock(&l->mu);
            return lg_fail(err, "out of memory queueing usage record %s", rec->request_id);
        }
        if (t)
            t->next = c;
        else
            l->pending.head = c;
        l->pending.tail = t = c;
    }
    lg_item *it = &t->items[t->n++];
    it->rec = *rec;
    it->done = done;
    it->ctx = ctx;
    it->status = LG_LEDGER_COMMITTED;
    if (l->pending.n++ == 0)
        l->first_pending_ns = lg_mono_ns();
    l->appended++;
    l->stats.appended++;
    if (l->pending.n == 1 || l->pending.n == l->opt.batch_records)
        pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* ---- committing a batch (writer thread, no lock held) ----------------------- */

static const char lg_insert_sql[] =
    "INSERT INTO usage_records (request_id, tenant_id, key_id, route, model, adapter_name, adapter_digest, "
    "prompt_tokens, cached_tokens, completion_tokens, finish_reason, http_status, error_type, received_at, "
    "first_token_at, finished_at, cost_pico) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (request_id) DO NOTHING";

static void lg_close_db(lg_ledger *l)
{
    sqlite3_finalize(l->ins);
    l->ins = NULL;
    if (l->db && !sqlite3_get_autocommit(l->db))
        sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close_v2(l->db);
    l->db = NULL;
}

static int lg_open_db(lg_ledger *l, lg_err *err)
{
    if (l->db)
        return 0;
    if (lg_db_open(l->path, false, &l->db, err))
        return -1;
    /* a page cache that holds the hot index pages (request_id is random, so
     * its index is touched all over): without it, pages spill to the WAL in
     * the middle of a batch and the commits take several times longer */
    sqlite3_exec(l->db, "PRAGMA cache_size = -" LG_QUOTE(LG_WRITER_CACHE_KIB), NULL, NULL, NULL);
    if (sqlite3_prepare_v3(l->db, lg_insert_sql, -1, SQLITE_PREPARE_PERSISTENT, &l->ins, NULL) != SQLITE_OK) {
        lg_db_fail(err, l->db, "preparing the usage insert");
        lg_close_db(l);
        return -1;
    }
    return 0;
}

static void lg_bind_record(sqlite3_stmt *s, const lg_usage_record *r)
{
    sqlite3_bind_text(s, 1, r->request_id, -1, SQLITE_STATIC);
    if (r->tenant_id)
        sqlite3_bind_int64(s, 2, r->tenant_id);
    else
        sqlite3_bind_null(s, 2);
#define LG_TEXT_OR_NULL(idx, f)                                  \
    if (r->f[0])                                                 \
        sqlite3_bind_text(s, idx, r->f, -1, SQLITE_STATIC);      \
    else                                                         \
        sqlite3_bind_null(s, idx);
    LG_TEXT_OR_NULL(3, key_id)
    sqlite3_bind_text(s, 4, r->route, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, r->model, -1, SQLITE_STATIC);
    LG_TEXT_OR_NULL(6, adapter_name)
    LG_TEXT_OR_NULL(7, adapter_digest)
    sqlite3_bind_int64(s, 8, r->prompt_tokens);
    sqlite3_bind_int64(s, 9, r->cached_tokens);
    sqlite3_bind_int64(s, 10, r->completion_tokens);
    LG_TEXT_OR_NULL(11, finish_reason)
    sqlite3_bind_int(s, 12, r->http_status);
    LG_TEXT_OR_NULL(13, error_type)
#undef LG_TEXT_OR_NULL
    sqlite3_bind_int64(s, 14, r->received_at);
    if (r->first_token_at)
        sqlite3_bind_int64(s, 15, r->first_token_at);
    else
        sqlite3_bind_null(s, 15);
    sqlite3_bind_int64(s, 16, r->finished_at);
    sqlite3_bind_int64(s, 17, r->cost_pico);
}

/* A failure that concerns this one record, not the disk: the record is
 * rejected and the transaction goes on. */
static bool lg_record_error(int code)
{
    code &= 0xff;
    return code == SQLITE_CONSTRAINT || code == SQLITE_MISMATCH || code == SQLITE_TOOBIG || code == SQLITE_RANGE;
}

typedef struct lg_batch_result {
    uint64_t written, duplicates, rejected;
} lg_batch_result;

/* One attempt: all records of the batch in one transaction. On failure
 * nothing is committed and the connection is closed (reopened next time). */
static int lg_commit_batch(lg_ledger *l, lg_queue *batch, lg_batch_result *res, lg_err *err)
{
    *res = (lg_batch_result){0};
    if (lg_open_db(l, err))
        return -1;
    if (sqlite3_exec(l->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        lg_db_fail(err, l->db, "starting a usage batch");
        goto fail;
    }
    for (lg_chunk *c = batch->head; c; c = c->next) {
        for (int i = 0; i < c->n; i++) {
            lg_item *it = &c->items[i];
            lg_bind_record(l->ins, &it->rec);
            int rc = sqlite3_step(l->ins);
            if (rc == SQLITE_DONE) {
                it->status = LG_LEDGER_COMMITTED;
                if (sqlite3_changes(l->db) > 0)
                    res->written++;
                else
                    res->duplicates++;
            } else if (lg_record_error(rc)) {
                it->status = LG_LEDGER_REJECTED;
                res->rejected++;
            } else {
                lg_db_fail(err, l->db, "inserting usage records");
                sqlite3_reset(l->ins);
                goto fail;
            }
            sqlite3_reset(l->ins);
        }
    }
    if (sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        lg_db_fail(err, l->db, "committing usage records");
        goto fail;
    }
    return 0;
fail:
    lg_close_db(l);
    return -1;
}

/* ---- the writer thread --------------------------------------------------------- */

static void lg_settle(lg_ledger *l, lg_queue *batch, bool abandon)
{
    for (lg_chunk *c = batch->head; c; c = c->next)
        for (int i = 0; i < c->n; i++) {
            lg_item *it = &c->items[i];
            if (abandon)
                it->status = LG_LEDGER_ABANDONED;
            if (it->status == LG_LEDGER_REJECTED)
                lg_log_record("record refused by the database", &it->rec);
            else if (it->status == LG_LEDGER_ABANDONED)
                lg_log_record("record NOT written (ledger stopped while the database was failing)", &it->rec);
            if (it->done)
                it->done(it->ctx, it->status);
        }
}

static void lg_record_commit_time(lg_ledger *l, double secs)
{
    l->stats.last_commit_seconds = secs;
    l->stats.commit_seconds_sum += secs;
    for (int i = 0; i < LG_LEDGER_HIST_N; i++)
        if (secs <= lg_ledger_hist_bounds[i])
            l->stats.hist[i]++;
    l->stats.hist[LG_LEDGER_HIST_N]++;
}

static void *lg_writer_main(void *arg)
{
    lg_ledger *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (l->pending.n == 0 && !l->stopping)
            pthread_cond_wait(&l->wake, &l->mu);
        if (l->pending.n == 0)
            break; /* stopping, drained */
        /* group commit: gather until enough records, or the oldest is due */
        int64_t due = l->first_pending_ns + (int64_t)l->opt.max_delay_us * 1000;
        while (l->pending.n < l->opt.batch_records && !l->stopping && l->flushers == 0 && lg_mono_ns() < due)
            lg_timedwait(&l->wake, &l->mu, due);
        lg_queue batch;
        lg_take(l, &batch, l->opt.max_batch);
        l->in_batch = batch.n;
        if (l->pending.n > 0)
            l->first_pending_ns = lg_mono_ns() - (int64_t)l->opt.max_delay_us * 1000; /* already due */
        pthread_mutex_unlock(&l->mu);

        int64_t backoff = LG_BACKOFF_MIN_NS;
        bool abandon = false;
        lg_batch_result res;
        double secs = 0;
        for (;;) {
            lg_err err = {{0}};
            int64_t t0 = lg_mono_ns();
            int rc = lg_commit_batch(l, &batch, &res, &err);
            secs = (double)(lg_mono_ns() - t0) * 1e-9;
            if (rc == 0)
                break;
            pthread_mutex_lock(&l->mu);
            l->stats.errors++;
            if (l->healthy || l->stats.errors % 100 == 1)
                lg_log("usage ledger: commit failed, %lld records kept, retrying: %s",
                       (long long)(l->pending.n + l->in_batch), err.msg);
            l->healthy = false;
            snprintf(l->reason, sizeof l->reason, "usage ledger cannot commit (%lld records waiting): %s",
                     (long long)(l->pending.n + l->in_batch), err.msg);
            if (l->stopping && lg_mono_ns() >= l->stop_deadline_ns) {
                abandon = true;
                pthread_mutex_unlock(&l->mu);
                break;
            }
            int64_t until = lg_mono_ns() + backoff;
            if (l->stopping && until > l->stop_deadline_ns)
                until = l->stop_deadline_ns;
            lg_timedwait(&l->wake, &l->mu, until);
            pthread_mutex_unlock(&l->mu);
            backoff = backoff * 2 > LG_BACKOFF_MAX_NS ? LG_BACKOFF_MAX_NS : backoff * 2;
        }

        lg_settle(l, &batch, abandon);

        pthread_mutex_lock(&l->mu);
        if (abandon) {
            l->stats.abandoned += (uint64_t)batch.n;
            /* and everything still queued: the disk did not come back in time */
            lg_queue rest;
            lg_take(l, &rest, INT64_MAX);
            l->in_batch += rest.n;
            pthread_mutex_unlock(&l->mu);
            lg_settle(l, &rest, true);
            pthread_mutex_lock(&l->mu);
            l->stats.abandoned += (uint64_t)rest.n;
            l->settled_n += (uint64_t)rest.n;
            lg_chunks_put(l, rest.head);
        } else {
            l->healthy = true;
            l->reason[0] = '\0';
            l->stats.batches++;
            l->stats.records_written += res.written;
            l->stats.duplicates += res.duplicates;
            l->stats.rejected += res.rejected;
            lg_record_commit_time(l, secs);
        }
        l->settled_n += (uint64_t)batch.n;
        l->in_batch = 0;
        lg_chunks_put(l, batch.head);
        pthread_cond_broadcast(&l->settled);
        if (abandon)
            break;
    }
    pthread_cond_broadcast(&l->settled);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------ */

int lg_ledger_open(const char *data_dir, const lg_ledger_options *opt, lg_ledger **out, lg_err *err)
{
    *out = NULL;
    lg_ledger_options o = opt ? *opt : lg_ledger_options_default();
    if (o.batch_records < 1 || o.max_delay_us < 0 || o.max_batch < 1 || o.max_backlog < 1)
        return lg_fail(err, "ledger options: batch_records, max_batch and max_backlog must be >= 1, "
                            "max_delay_us >= 0"),
               LG_STORE_INVALID;
    lg_ledger *l = calloc(1, sizeof *l);
    if (!l)
        return lg_fail(err, "out of memory");
    l->opt = o;
    if (lg_db_path(data_dir, l->path, sizeof l->path, err)) {
        free(l);
        return LG_STORE_INVALID;
    }
    /* open once here so that a bad path or schema fails now, not in the thread */
    if (lg_open_db(l, err)) {
        free(l);
        return LG_STORE_ERROR;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->wake, &ca);
    pthread_cond_init(&l->settled, &ca);
    pthread_condattr_destroy(&ca);
    l->healthy = true;
    int rc = pthread_create(&l->thread, NULL, lg_writer_main, l);
    if (rc) {
        lg_fail(err, "starting the ledger writer thread: %s", strerror(rc));
        lg_close_db(l);
        pthread_cond_destroy(&l->wake);
        pthread_cond_destroy(&l->settled);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return LG_STORE_ERROR;
    }
    l->thread_started = true;
    *out = l;
    return 0;
}

int lg_ledger_flush(lg_ledger *l, int timeout_ms, lg_err *err)
{
    int64_t deadline = lg_mono_ns() + (int64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000;
    pthread_mutex_lock(&l->mu);
    uint64_t target = l->appended;
    l->flushers++;
    pthread_cond_signal(&l->wake);
    while (l->settled_n < target && !l->joined && lg_mono_ns() < deadline)
        lg_timedwait(&l->settled, &l->mu, deadline);
    l->flushers--;
    int rc = 0;
    if (l->settled_n < target)
        rc = lg_fail(err, "usage ledger flush timed out after %d ms with %llu records not committed%s%s", timeout_ms,
                     (unsigned long long)(target - l->settled_n), l->healthy ? "" : ": ",
                     l->healthy ? "" : l->reason);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int lg_ledger_stop(lg_ledger *l, int timeout_ms, lg_err *err)
{
    pthread_mutex_lock(&l->mu);
    if (l->joined) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    uint64_t before = l->stats.abandoned;
    l->stopping = true;
    l->stop_deadline_ns = lg_mono_ns() + (int64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000;
    pthread_cond_broadcast(&l->wake);
    pthread_mutex_unlock(&l->mu);
    if (l->thread_started)
        pthread_join(l->thread, NULL);
    pthread_mutex_lock(&l->mu);
    l->joined = true;
    uint64_t lost = l->stats.abandoned - before;
    char reason[sizeof l->reason];
    snprintf(reason, sizeof reason, "%s", l->reason);
    pthread_mutex_unlock(&l->mu);
    lg_close_db(l);
    if (lost)
        return lg_fail(err, "usage ledger stopped with %llu records not written (logged to stderr): %s",
                       (unsigned long long)lost, reason);
    return 0;
}

void lg_ledger_close(lg_ledger *l)
{
    if (!l)
        return;
    lg_err err;
    if (lg_ledger_stop(l, 5000, &err))
        lg_log("%s", err.msg);
    lg_chunks_put(l, l->pending.head); /* empty after stop; defensive */
    for (lg_chunk *c = l->free_chunks; c;) {
        lg_chunk *next = c->next;
        free(c);
        c = next;
    }
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->settled);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---- health and counters ----------------------------------------------------------- */

bool lg_ledger_healthy(lg_ledger *l, char *reason, size_t reason_size)
{
    pthread_mutex_lock(&l->mu);
    bool full = l->pending.n + l->in_batch >= l->opt.max_backlog;
    bool ok = l->healthy && !full && !l->stopping;
    if (reason && reason_size) {
        if (!l->healthy)
            snprintf(reason, reason_size, "%s", l->reason);
        else if (full)
            snprintf(reason, reason_size, "usage ledger backlog is full (%lld records)",
                     (long long)(l->pending.n + l->in_batch));
        else if (l->stopping)
            snprintf(reason, reason_size, "usage ledger is stopping");
        else
            reason[0] = '\0';
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void lg_ledger_stats_get(lg_ledger *l, lg_ledger_stats *out)
{
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    out->backlog = (uint64_t)(l->pending.n + l->in_batch);
    out->healthy = l->healthy;
    pthread_mutex_unlock(&l->mu);
}
