/*
 * ledger.h — the usage ledger writer: one record per request that started,
 * written durably in group commits by one thread with its own connection.
 *
 * Flow. lg_ledger_append copies the record into an in-memory queue and
 * returns at once: it never touches the disk and may be called from any
 * thread, h2o event loops included (it takes a mutex for a few hundred
 * nanoseconds). The writer thread commits everything queued in one
 * transaction (synchronous=FULL: the commit is on disk when COMMIT
 * returns); records appended meanwhile form the next transaction (group
 * commit). By default it starts a commit as soon as it is idle and a record
 * is queued (max_delay_us 0): at 20,000 records/s a record is durable
 * ~0.4 ms after its append, about 6 records per fsync. A max_delay_us > 0
 * makes it wait that long after the first queued record (or until
 * batch_records are queued) to put more records in each fsync, at the cost
 * of that much latency on every response (docs/benchmarks.md, Ledger). Records are inserted with ON CONFLICT (request_id) DO NOTHING,
 * so appending the same request twice leaves one row. Then, on the writer
 * thread and in append order, it calls each record's done callback with
 * LG_LEDGER_COMMITTED. The gateway sends the last bytes of a response only
 * from that callback: every response a client completed has its record.
 *
 * Failures. When a commit fails (disk full, read-only file system, I/O
 * error, database locked too long) the transaction is rolled back, the
 * records stay queued, the writer reopens its connection and retries with
 * backoff (5 ms doubling to 1 s), and lg_ledger_healthy turns false with a
 * one-line reason (the gateway answers 503 to new requests then). Nothing is
 * dropped: done callbacks wait for the retry that succeeds. A record the
 * database itself refuses (a constraint, which lg_ledger_append's checks
 * make impossible) is reported as LG_LEDGER_REJECTED and logged in full, so
 * one bad record never blocks the others. Only lg_ledger_stop, when its
 * timeout passes with the disk still failing, gives records up: each gets
 * LG_LEDGER_ABANDONED, is logged in full to stderr, and stop returns -1 with
 * the count. Nothing crashes and nothing disappears silently.
 *
 * Memory: the queue is a list of chunks of records (one record is about
 * 700 bytes); appends beyond max_backlog uncommitted records fail with
 * LG_STORE_ERROR rather than grow without bound while the disk is gone.
 */
#ifndef LG_LEDGER_H
#define LG_LEDGER_H

#include "engine/base/common.h"
#include "db/store.h"

typedef struct lg_ledger lg_ledger;

enum {
    LG_LEDGER_REQUEST_ID_MAX = 128,
    LG_LEDGER_ROUTE_MAX = 32,
    LG_LEDGER_MODEL_MAX = 128,
    LG_LEDGER_FINISH_MAX = 16,
    LG_LEDGER_ERROR_TYPE_MAX = 48,
};

/* One request. Strings are NUL-terminated inside their arrays; "" (or 0 for
 * the numbers marked so) is stored as NULL. */
typedef struct lg_usage_record {
    char request_id[LG_LEDGER_REQUEST_ID_MAX]; /* required, unique: the idempotency key */
    int64_t tenant_id;                         /* 0: the request never authenticated */
    char key_id[LG_KEY_ID_LEN + 1];            /* "": none */
    char route[LG_LEDGER_ROUTE_MAX];           /* required: "chat.completions", "completions", ... */
    char model[LG_LEDGER_MODEL_MAX];           /* the model name the client asked for (may be "") */
    char adapter_name[LG_STORE_NAME_MAX];      /* "": the base model */
    char adapter_digest[65];                   /* "": the base model; else 64 hex */
    int64_t prompt_tokens;                     /* including cached; as far as the engine prefilled them */
    int64_t cached_tokens;                     /* <= prompt_tokens */
    int64_t completion_tokens;
    char finish_reason[LG_LEDGER_FINISH_MAX]; /* "": none */
    int32_t http_status;                      /* 0..999 (499: client went away) */
    /* "": success; for a 499 how far it got: "cancelled_before_prefill" (queued:
     * no tokens), "cancelled_during_prefill", "client_disconnected" (docs/api.md) */
    char error_type[LG_LEDGER_ERROR_TYPE_MAX];
    int64_t received_at;                       /* Unix ms, >= 0: buckets of usage queries use it */
    int64_t first_token_at;                    /* Unix ms; 0: no token */
    int64_t finished_at;                       /* Unix ms */
    int64_t cost_pico;                         /* lg_money_cost, >= 0 */
} lg_usage_record;

enum {
    LG_LEDGER_COMMITTED = 0,  /* the record is durably in the database (or was already) */
    LG_LEDGER_REJECTED = -1,  /* the database refused the record (logged) */
    LG_LEDGER_ABANDONED = -2, /* lg_ledger_stop gave up on it: disk still failing (logged) */
};

/* Runs on the writer thread: keep it short (post a message to the owner's
 * loop). It must not call lg_ledger_flush/stop/close. */
typedef void (*lg_ledger_done_fn)(void *ctx, int status);

typedef struct lg_ledger_options {
    int max_delay_us;    /* gather this long after the first queued record (0: commit at once) */
    int batch_records;   /* ... or until this many are queued (256) */
    int max_batch;       /* at most this many records per transaction (16384) */
    int64_t max_backlog; /* appends fail beyond this many uncommitted records (1,000,000) */
} lg_ledger_options;
lg_ledger_options lg_ledger_options_default(void);

/* Opens its own read-write connection to DATA_DIR/loragate.db (migrating it
 * like lg_store_open) and starts the writer thread. opt NULL: defaults. */
int lg_ledger_open(const char *data_dir, const lg_ledger_options *opt, lg_ledger **out, lg_err *err);

/* A new request id: prefix (e.g. "chatcmpl-", at most 32 bytes) + the
 * time in Unix ms as 12 hex digits + 16 hex digits from RAND_bytes, e.g.
 * "chatcmpl-019ab5c3d2e8f1a2b3c4d5e6f7a8b9". Ids made this way sort by
 * time, so ledger inserts land at the end of the request_id index and the
 * writer's speed does not fall as the table grows (random ids slow it from
 * ~90,000 to ~32,000 records/s by 3 million rows; docs/benchmarks.md).
 * Any thread. Returns 0, or -1 if the prefix is too long or RAND_bytes
 * failed. */
int lg_ledger_request_id(const char *prefix, char out[LG_LEDGER_REQUEST_ID_MAX]);

/* Validates and copies *rec (the caller may reuse it at once) and queues it.
 * done may be NULL. Fails with LG_STORE_INVALID for a malformed record and
 * LG_STORE_ERROR when stopped or the backlog is full; then done is never
 * called. */
int lg_ledger_append(lg_ledger *l, const lg_usage_record *rec, lg_ledger_done_fn done, void *ctx, lg_err *err);

/* Waits until everything appended before the call is committed and its done
 * callbacks have returned, or timeout_ms passes (-1 if so, with the reason). */
int lg_ledger_flush(lg_ledger *l, int timeout_ms, lg_err *err);

/* Graceful shutdown: refuses further appends, commits what is queued
 * (retrying for up to timeout_ms), joins the thread. Records still
 * uncommitted then get LG_LEDGER_ABANDONED; returns -1 saying how many. */
int lg_ledger_stop(lg_ledger *l, int timeout_ms, lg_err *err);
/* lg_ledger_stop(l, 5000) if not stopped yet, then frees. NULL: no-op. */
void lg_ledger_close(lg_ledger *l);

/* false after a failed commit until the next successful one, or while the
 * backlog is full; reason (may be NULL) gets one line. */
bool lg_ledger_healthy(lg_ledger *l, char *reason, size_t reason_size);

/* Commit latency buckets, seconds (Prometheus "le"); +Inf is implied. */
#define LG_LEDGER_HIST_N 12
extern const double lg_ledger_hist_bounds[LG_LEDGER_HIST_N];

typedef struct lg_ledger_stats {
    uint64_t appended;         /* accepted by lg_ledger_append */
    uint64_t records_written;  /* rows inserted */
    uint64_t duplicates;       /* committed records whose request_id was already there */
    uint64_t rejected;         /* LG_LEDGER_REJECTED */
    uint64_t abandoned;        /* LG_LEDGER_ABANDONED */
    uint64_t batches;          /* committed transactions */
    uint64_t errors;           /* failed commit attempts */
    uint64_t backlog;          /* appended, not yet committed */
    double last_commit_seconds; /* BEGIN to COMMIT of the last committed batch */
    /* commit latency histogram, cumulative like Prometheus: hist[i] counts
     * commits <= lg_ledger_hist_bounds[i]; hist[LG_LEDGER_HIST_N] = all */
    uint64_t hist[LG_LEDGER_HIST_N + 1];
    double commit_seconds_sum;
    bool healthy;
} lg_ledger_stats;
void lg_ledger_stats_get(lg_ledger *l, lg_ledger_stats *out);

#endif
