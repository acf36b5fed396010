/*
 * db_test_util.h — what the db/ tests share: a temporary data directory
 * that is removed afterwards, a usage record builder, and a row counter.
 * Every test works on real SQLite files (WAL) in its own directory.
 */
#ifndef LG_DB_TEST_UTIL_H
#define LG_DB_TEST_UTIL_H

#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/ledger.h"
#include "tests/unit/test.h"

/* mkdtemp under $TMPDIR (or /tmp) into buf. */
static inline void tu_tmpdir(char *buf, size_t size, const char *tag)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, size, "%s/lgdb-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(2);
    }
}

static int tu_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* rm -rf dir */
static inline void tu_rmtree(const char *dir) { nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A plausible record with request id `id`. */
static inline lg_usage_record tu_record(const char *id, int64_t tenant_id, int64_t received_ms)
{
    lg_usage_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.request_id, sizeof r.request_id, "%s", id);
    r.tenant_id = tenant_id;
    snprintf(r.key_id, sizeof r.key_id, "key_aaaaaaaaaaaaaaaa");
    snprintf(r.route, sizeof r.route, "chat.completions");
    snprintf(r.model, sizeof r.model, "support-bot");
    snprintf(r.adapter_name, sizeof r.adapter_name, "support-bot");
    snprintf(r.adapter_digest, sizeof r.adapter_digest, "%064d", 7);
    r.prompt_tokens = 100;
    r.cached_tokens = 32;
    r.completion_tokens = 20;
    snprintf(r.finish_reason, sizeof r.finish_reason, "stop");
    r.http_status = 200;
    r.received_at = received_ms;
    r.first_token_at = received_ms + 30;
    r.finished_at = received_ms + 400;
    r.cost_pico = 123456;
    return r;
}

/* Result of a one-integer query on DATA_DIR/loragate.db (opened read-only,
 * fresh connection); -1 on error. */
static inline int64_t tu_query_int(const char *data_dir, const char *sql)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/loragate.db", data_dir);
    sqlite3 *db = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return v;
}

#endif
