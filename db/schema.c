/*
 * schema.c — connection setup and migrations (see schema.h).
 *
 * Expected workload: a handful of opens per process (the admin handle, the
 * ledger writer, one reader per gateway thread), so clarity beats speed.
 */
#include "db/schema.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static const char *lg_db_code_name(int code)
{
    switch (code & 0xff) {
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_NOMEM: return "SQLITE_NOMEM";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_MISMATCH: return "SQLITE_MISMATCH";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    default: return "SQLITE";
    }
}

int lg_db_fail(lg_err *err, sqlite3 *db, const char *what)
{
    int code = db ? sqlite3_extended_errcode(db) : SQLITE_ERROR;
    const char *msg = db ? sqlite3_errmsg(db) : "no connection";
    return lg_fail(err, "%s: %s (%s, code %d)", what, msg, lg_db_code_name(code), code);
}

int64_t lg_db_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int lg_db_path(const char *data_dir, char *buf, size_t size, lg_err *err)
{
    if (!data_dir || !*data_dir)
        return lg_fail(err, "expected a data directory, got an empty path");
    int n = snprintf(buf, size, "%s/loragate.db", data_dir);
    if (n < 0 || (size_t)n >= size)
        return lg_fail(err, "data directory path too long (%zu bytes)", strlen(data_dir));
    return 0;
}

static int lg_db_pragma_int(sqlite3 *db, const char *sql, int *out, lg_err *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return lg_db_fail(err, db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        lg_db_fail(err, db, sql);
        sqlite3_finalize(st);
        return -1;
    }
    *out = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

int lg_db_user_version(sqlite3 *db, int *version, lg_err *err)
{
    return lg_db_pragma_int(db, "PRAGMA user_version", version, err);
}

/* Checks that the file is ours (or empty) and not from a newer binary. */
static int lg_db_check_identity(sqlite3 *db, int version, int known, lg_err *err)
{
    int app = 0, n_tables = 0;
    if (lg_db_pragma_int(db, "PRAGMA application_id", &app, err) ||
        lg_db_pragma_int(db, "SELECT count(*) FROM sqlite_schema", &n_tables, err))
        return -1;
    if (app != 0 && app != LG_DB_APPLICATION_ID)
        return lg_fail(err, "not a loragate database (application_id %d, expected %d)", app, LG_DB_APPLICATION_ID);
    if (version == 0 && n_tables > 0)
        return lg_fail(err, "not a loragate database: it has %d schema objects but no loragate schema version",
                       n_tables);
    if (version > known)
        return lg_fail(err, "database schema version %d is newer than this loragate (knows up to %d); upgrade loragate",
                       version, known);
    return 0;
}

int lg_db_migrate(sqlite3 *db, const lg_store_migration *migrations, int n, int target, lg_err *err)
{
    if (target > n)
        target = n;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return lg_db_fail(err, db, "starting the schema migration");
    int version = 0;
    if (lg_db_user_version(db, &version, err) || lg_db_check_identity(db, version, n, err))
        goto fail;
    for (int v = version; v < target; v++) {
        const lg_store_migration *m = &migrations[v];
        if (m->version != v + 1) {
            lg_fail(err, "migration list is broken: entry %d (%s) has version %d", v, m->name, m->version);
            goto fail;
        }
        char *msg = NULL;
        if (sqlite3_exec(db, m->sql, NULL, NULL, &msg) != SQLITE_OK) {
            lg_fail(err, "schema migration %s failed: %s", m->name, msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            goto fail;
        }
    }
    if (target > version) {
        /* a migration that rebuilds a table must leave every reference valid */
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK) {
            lg_db_fail(err, db, "checking foreign keys after migrating");
            goto fail;
        }
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            lg_fail(err, "schema migration to version %d leaves a broken foreign key in table %s", target,
                    (const char *)sqlite3_column_text(st, 0));
            sqlite3_finalize(st);
            goto fail;
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) {
            lg_db_fail(err, db, "checking foreign keys after migrating");
            goto fail;
        }
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", target);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            lg_db_fail(err, db, "setting the schema version");
            goto fail;
        }
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        lg_db_fail(err, db, "committing the schema migration");
        goto fail;
    }
    return 0;
fail:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

/* After a failed read-write open: when the database's directory is not
 * writable (read-only file system, permissions), say that first, since
 * SQLite's own message ("unable to open database file") does not. */
static void lg_db_writable_hint(const char *path, lg_err *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (access(dir, W_OK) != 0) {
        int e = errno;
        lg_err_prefix(err, "data directory %s is not writable (%s)", dir, strerror(e));
    }
}

int lg_db_open(const char *path, bool read_only, sqlite3 **out, lg_err *err)
{
    *out = NULL;
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
                (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        lg_db_fail(err, db, "opening the database");
        lg_err_prefix(err, "%s", path);
        sqlite3_close(db);
        return -1;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, LG_DB_BUSY_TIMEOUT_MS);
    const int known = lg_store_n_migrations;
    if (read_only) {
        int version = 0;
        if (lg_db_user_version(db, &version, err) || lg_db_check_identity(db, version, known, err))
            goto fail;
        if (version < known) {
            lg_fail(err, "database schema version %d is older than this loragate's (%d); open it read-write once "
                         "(loragate serve) to migrate it",
                    version, known);
            goto fail;
        }
    } else {
        /* SQLite opens a file it may not write read-only without a word (an
         * existing WAL database then passes every step below): refuse here,
         * or serve would start, say it is ready, and fail every write later */
        if (sqlite3_db_readonly(db, "main") == 1) {
            int e = access(path, W_OK) != 0 ? errno : EACCES;
            lg_fail(err, "the database file is not writable (%s)", strerror(e));
            goto fail;
        }
        /* settings that cannot change inside a transaction come first */
        char *msg = NULL;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
            sqlite3_step(st) != SQLITE_ROW) {
            lg_db_fail(err, db, "switching to WAL mode");
            sqlite3_finalize(st);
            goto fail;
        }
        const char *mode = (const char *)sqlite3_column_text(st, 0);
        if (!mode || strcmp(mode, "wal") != 0) {
            lg_fail(err, "the database refused WAL mode (journal_mode is %s)", mode ? mode : "?");
            sqlite3_finalize(st);
            goto fail;
        }
        sqlite3_finalize(st);
        if (sqlite3_exec(db, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON", NULL, NULL, &msg) != SQLITE_OK) {
            lg_fail(err, "configuring the connection: %s", msg ? msg : "?");
            sqlite3_free(msg);
            goto fail;
        }
        if (lg_db_migrate(db, lg_store_migrations, known, known, err))
            goto fail;
    }
    *out = db;
    return 0;
fail:
    lg_err_prefix(err, "%s", path);
    if (!read_only)
        lg_db_writable_hint(path, err);
    sqlite3_close(db);
    return -1;
}
