/*
 * test_ledger_crash.c — kill -9 in the middle of a load. A child process
 * appends usage records as fast as it can from two threads; each done
 * callback writes the record's number to a pipe (an "ack": the gateway
 * would send the response's last bytes now). The parent reads acks, kills
 * the child with SIGKILL mid-load (three times, at different points), then
 * reopens the database: every acked record is there exactly once, the
 * integrity check passes, and appending the acked records again (a client
 * retry after the restart) adds nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "tests/unit/db/db_test_util.h"
#include "db/ledger.h"
#include "db/store.h"

enum { MAX_ACK = 1 << 22 };

static int ack_fd;

static void on_done(void *ctx, int status)
{
    if (status != LG_LEDGER_COMMITTED)
        return;
    uint32_t n = (uint32_t)(uintptr_t)ctx;
    if (write(ack_fd, &n, sizeof n) != sizeof n)
        _exit(3);
}

typedef struct child_arg {
    lg_ledger *l;
    uint32_t first, step;
} child_arg;

static void *child_appender(void *p)
{
    child_arg *a = p;
    lg_err err;
    for (uint32_t n = a->first;; n += a->step) {
        char id[40];
        snprintf(id, sizeof id, "crash-%u", n);
        lg_usage_record r = tu_record(id, 1, 1700000000000LL + n);
        r.completion_tokens = n % 1000;
        while (lg_ledger_append(a->l, &r, on_done, (void *)(uintptr_t)n, &err) != 0)
            usleep(100); /* backlog full: wait for the writer */
    }
    return NULL;
}

static void child(const char *dir, uint32_t base)
{
    lg_err err;
    lg_ledger *l = NULL;
    lg_ledger_options o = lg_ledger_options_default();
    o.max_backlog = 20000;
    if (lg_ledger_open(dir, &o, &l, &err)) {
        fprintf(stderr, "child: %s\n", err.msg);
        _exit(2);
    }
    pthread_t t[2];
    child_arg a[2] = {{l, base, 2}, {l, base + 1, 2}};
    pthread_create(&t[0], NULL, child_appender, &a[0]);
    pthread_create(&t[1], NULL, child_appender, &a[1]);
    pause(); /* until SIGKILL */
    _exit(0);
}

/* One round: fork, wait for `acks_before_kill` acks, SIGKILL, collect every
 * ack the child managed to write, verify. */
static void round_trip(const char *dir, uint32_t base, int acks_before_kill)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ack_fd = fds[1];
        child(dir, base);
    }
    close(fds[1]);
    uint32_t *acked = malloc(MAX_ACK * sizeof *acked);
    size_t n_acked = 0;
    bool killed = false;
    uint32_t v;
    for (;;) {
        ssize_t r = read(fds[0], &v, sizeof v);
        if (r == sizeof v) {
            if (n_acked < MAX_ACK)
                acked[n_acked++] = v;
            if (!killed && (int)n_acked >= acks_before_kill) {
                kill(pid, SIGKILL);
                killed = true;
            }
        } else if (r == 0) {
            break; /* the child is gone: no more acks can come */
        } else if (r < 0 && errno != EINTR) {
            perror("read");
            break;
        } else if (r > 0) {
            CHECK_MSG(0, "torn ack of %zd bytes", r);
            break;
        }
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
    CHECK(n_acked >= (size_t)acks_before_kill);

    /* reopen: the store migrates nothing, runs the WAL recovery */
    lg_err err = {{0}};
    lg_store *st = NULL;
    CHECK_MSG(lg_store_open(dir, &st, &err) == 0, "%s", err.msg);
    CHECK_MSG(lg_store_integrity_check(st, &err) == 0, "%s", err.msg);
    char path[600];
    snprintf(path, sizeof path, "%s/loragate.db", dir);
    sqlite3 *db = NULL;
    sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    sqlite3_stmt *q = NULL;
    sqlite3_prepare_v2(db, "SELECT count(*), max(completion_tokens) FROM usage_records WHERE request_id = ?", -1, &q,
                       NULL);
    size_t missing = 0, wrong = 0;
    for (size_t i = 0; i < n_acked; i++) {
        char id[40];
        snprintf(id, sizeof id, "crash-%u", acked[i]);
        sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(q) != SQLITE_ROW || sqlite3_column_int(q, 0) != 1)
            missing++;
        else if (sqlite3_column_int(q, 1) != (int)(acked[i] % 1000))
            wrong++;
        sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    CHECK_MSG(missing == 0, "%zu of %zu acked records missing", missing, n_acked);
    CHECK(wrong == 0);
    int64_t rows = tu_query_int(dir, "SELECT count(*) FROM usage_records");
    CHECK(rows >= (int64_t)n_acked);
    printf("round at %u: killed after %zu acks, %lld rows in the database\n", base, n_acked, (long long)rows);

    /* the clients retry the acked requests after the restart: no new rows */
    lg_ledger *l = NULL;
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == 0);
    size_t retry = n_acked < 2000 ? n_acked : 2000;
    for (size_t i = 0; i < retry; i++) {
        char id[40];
        snprintf(id, sizeof id, "crash-%u", acked[i]);
        lg_usage_record r = tu_record(id, 1, 5);
        lg_ledger_append(l, &r, NULL, NULL, &err);
    }
    CHECK(lg_ledger_stop(l, 20000, &err) == 0);
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);
    CHECK(s.duplicates == retry && s.records_written == 0);
    lg_ledger_close(l);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records") == rows);
    lg_store_close(st);
    free(acked);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "crash");
    lg_err err;
    lg_store *st = NULL;
    if (lg_store_open(dir, &st, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    lg_store_close(st);
    round_trip(dir, 0, 3000);
    round_trip(dir, 10000000, 20000);
    round_trip(dir, 20000000, 1);
    tu_rmtree(dir);
    TEST_DONE();
}
