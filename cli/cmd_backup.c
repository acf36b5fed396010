/*
 * cmd_backup.c — `loragate backup --data-dir D --out FILE`: an online backup
 * of DATA_DIR/loragate.db (tenants, keys, adapters' metadata and the usage
 * ledger) while `loragate serve` keeps running.
 *
 * It opens the database read-only and copies a consistent snapshot with
 * SQLite's online backup API (db/store.h lg_store_backup: one read
 * transaction, WAL mode, so the server's ledger writer is never blocked),
 * into FILE.tmp, fsynced, then renamed to FILE; an existing FILE is refused.
 * Then it runs PRAGMA integrity_check on the copy. Adapter files
 * (DATA_DIR/adapters/, content-addressed and never modified) are not in the
 * database: copy that directory too (docs/operations.md).
 *
 * Exit status: 0 backup written and checked, 1 failure (one line on
 * stderr), 2 bad usage.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "db/store.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: loragate backup --data-dir DIR --out FILE\n"
               "\n"
               "Online backup of DIR/loragate.db (safe while `loragate serve` runs) into FILE,\n"
               "then an integrity check of the copy. FILE must not exist. Copy DIR/adapters/\n"
               "as well to keep the adapters' files (see docs/operations.md).\n"
               "\n"
               "  --data-dir DIR   the server's data directory (default: loragate-data)\n"
               "  --out FILE       where to write the copy\n");
}

static int check_copy(const char *path, char *msg, size_t cap)
{
    sqlite3 *db = NULL;
    int ok = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check(3)", -1, &s, NULL) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW) {
            const char *r = (const char *)sqlite3_column_text(s, 0);
            snprintf(msg, cap, "%s", r ? r : "?");
            ok = r && !strcmp(r, "ok") ? 0 : -1;
        } else {
            snprintf(msg, cap, "%s", sqlite3_errmsg(db));
        }
        sqlite3_finalize(s);
    } else {
        snprintf(msg, cap, "%s", db ? sqlite3_errmsg(db) : "cannot open");
    }
    sqlite3_close(db);
    return ok;
}

int lg_cmd_backup(int argc, char **argv)
{
    const char *data_dir = "loragate-data", *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 < argc && !strcmp(argv[i], "--data-dir"))
            data_dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--out"))
            out = argv[++i];
        else {
            fprintf(stderr, "loragate backup: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!out || !*out) {
        fprintf(stderr, "loragate backup: --out FILE is required\n");
        usage(stderr);
        return 2;
    }
    lg_err err = {{0}};
    lg_store *st = NULL;
    if (lg_store_open_reader(data_dir, &st, &err) != 0) {
        fprintf(stderr, "loragate backup: %s\n", err.msg);
        return 1;
    }
    int rc = lg_store_backup(st, out, &err);
    lg_store_close(st);
    if (rc != 0) {
        fprintf(stderr, "loragate backup: %s\n", err.msg);
        return 1;
    }
    char msg[256];
    if (check_copy(out, msg, sizeof msg) != 0) {
        fprintf(stderr, "loragate backup: the copy %s failed its integrity check: %s\n", out, msg);
        return 1;
    }
    struct stat sb;
    long long size = stat(out, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("loragate backup: wrote %s (%lld bytes, schema %d, integrity ok)\n", out, size, lg_store_schema_latest());
    return 0;
}
