/*
 * schema.h — opening a connection to DATA_DIR/loragate.db and bringing its
 * schema up to date. Internal to db/ (and its tests).
 *
 * The schema is the files db/migrations/NNNN_name.sql. The build embeds
 * every file of that folder, in version order, into lg_store_migrations[]
 * (db/embed_migrations.cmake): the folder is the list, nothing else names
 * the migrations. The database's version is PRAGMA user_version: the
 * number of migrations applied.
 *
 * A read-write open applies the missing migrations inside one BEGIN
 * IMMEDIATE transaction (all or nothing; two processes opening at once
 * serialize), checks foreign keys before COMMIT, and refuses a database
 * whose version is newer than the binary knows. A read-only open refuses
 * any version but the latest. A file that is not a loragate database (other
 * application_id, or tables without a version) is refused too.
 *
 * Migrations run inside a transaction: they must not contain statements
 * SQLite refuses there (VACUUM, PRAGMA journal_mode, PRAGMA foreign_keys).
 *
 * Connection settings: WAL, synchronous=FULL, foreign_keys=ON,
 * busy_timeout 5 s, SQLITE_OPEN_NOMUTEX (one thread per connection at a
 * time: the callers serialize), extended result codes.
 */
#ifndef LG_SCHEMA_H
#define LG_SCHEMA_H

#include <sqlite3.h>

#include "engine/base/common.h"

typedef struct lg_store_migration {
    int version;      /* 1, 2, ... */
    const char *name; /* "0001_initial.sql" */
    const char *sql;  /* the file's text */
} lg_store_migration;

extern const lg_store_migration lg_store_migrations[]; /* generated */
extern const int lg_store_n_migrations;

#define LG_DB_APPLICATION_ID 1279738946 /* 0x4C474442 'LGDB', set by 0001 */
#define LG_DB_BUSY_TIMEOUT_MS 5000

/* DATA_DIR/loragate.db into buf. */
int lg_db_path(const char *data_dir, char *buf, size_t size, lg_err *err);

/* Opens path with the settings above. read_only: the file must exist and be
 * at the latest version. Otherwise it is created if missing and migrated to
 * the latest version. */
int lg_db_open(const char *path, bool read_only, sqlite3 **out, lg_err *err);

/* Applies migrations[v .. target) to a database at version v < target, in
 * one transaction; nothing when v >= target. Fails (changing nothing) when
 * the version is above n, or a migration fails. Tests use target and their
 * own lists; lg_db_open uses all of lg_store_migrations. */
int lg_db_migrate(sqlite3 *db, const lg_store_migration *migrations, int n, int target, lg_err *err);

/* PRAGMA user_version. */
int lg_db_user_version(sqlite3 *db, int *version, lg_err *err);

/* Formats "<what>: <sqlite message> (<code name>)" into err; returns -1. */
int lg_db_fail(lg_err *err, sqlite3 *db, const char *what);

/* Wall clock, Unix milliseconds. */
int64_t lg_db_now_ms(void);

#endif
