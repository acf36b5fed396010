/*
 * test_schema.c — migrations: a fresh database, one migrated from an older
 * version (data kept), a newer version refused with its one-line message,
 * a failing migration that changes nothing, files that are not ours, and
 * the read-only open rules.
 */
#include <sqlite3.h>

#include "tests/unit/db/db_test_util.h"
#include "db/schema.h"
#include "db/store.h"

static sqlite3 *raw_open(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/loragate.db", dir);
    sqlite3 *db = NULL;
    sqlite3_open(path, &db);
    return db;
}

static int64_t q1(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s = NULL;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static void test_embedded_list(void)
{
    /* the generated list: versions 1..n in order, names NNNN_*.sql */
    CHECK(lg_store_n_migrations >= 2);
    CHECK(lg_store_schema_latest() == lg_store_n_migrations);
    for (int i = 0; i < lg_store_n_migrations; i++) {
        char want[8];
        snprintf(want, sizeof want, "%04d_", i + 1);
        CHECK(lg_store_migrations[i].version == i + 1);
        CHECK(!strncmp(lg_store_migrations[i].name, want, 5));
        CHECK(strlen(lg_store_migrations[i].sql) > 0);
    }
}

static void test_fresh(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "schema");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/data", dir); /* open creates the data directory */
    lg_store *st = NULL;
    lg_err err = {{0}};
    CHECK_MSG(lg_store_open(sub, &st, &err) == 0, "%s", err.msg);
    lg_store_close(st);
    sqlite3 *db = raw_open(sub);
    CHECK(q1(db, "PRAGMA user_version") == lg_store_n_migrations);
    CHECK(q1(db, "PRAGMA application_id") == LG_DB_APPLICATION_ID);
    sqlite3_stmt *s = NULL;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL);
    CHECK(sqlite3_step(s) == SQLITE_ROW && !strcmp((const char *)sqlite3_column_text(s, 0), "wal"));
    sqlite3_finalize(s);
    const char *tables[] = {"tenants", "api_keys", "adapters", "adapter_versions", "server_settings",
                            "usage_records"};
    for (int i = 0; i < 6; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '%s'",
                 tables[i]);
        CHECK_MSG(q1(db, sql) == 1, "table %s", tables[i]);
    }
    CHECK(q1(db, "SELECT count(*) FROM server_settings") == 1);
    /* the ledger table is append-only */
    CHECK(sqlite3_exec(db,
                       "INSERT INTO usage_records (request_id, route, model, prompt_tokens, cached_tokens, "
                       "completion_tokens, http_status, received_at, finished_at, cost_pico) "
                       "VALUES ('r1', 'completions', 'm', 1, 0, 1, 200, 1, 2, 0)",
                       NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "UPDATE usage_records SET cost_pico = 5", NULL, NULL, NULL) != SQLITE_OK);
    CHECK(sqlite3_exec(db, "DELETE FROM usage_records", NULL, NULL, NULL) != SQLITE_OK);
    CHECK(q1(db, "SELECT count(*) FROM usage_records") == 1);
    sqlite3_close(db);

    /* opening again changes nothing */
    CHECK_MSG(lg_store_open(sub, &st, &err) == 0, "%s", err.msg);
    lg_store_close(st);
    tu_rmtree(dir);
}

static void test_from_version_1(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "schema");
    lg_err err = {{0}};
    /* a database as the first release left it: version 1, with a tenant */
    sqlite3 *db = raw_open(dir);
    CHECK(sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_MSG(lg_db_migrate(db, lg_store_migrations, lg_store_n_migrations, 1, &err) == 0, "%s", err.msg);
    CHECK(q1(db, "PRAGMA user_version") == 1);
    CHECK(q1(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'usage_records'") == 0);
    CHECK(sqlite3_exec(db, "INSERT INTO tenants (name, created_at, weight, limit_rpm) VALUES ('acme', 1000, 3, 60)",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);

    /* a reader refuses it: it would need a migration */
    lg_store *st = NULL;
    CHECK(lg_store_open_reader(dir, &st, &err) != 0 && st == NULL);
    CHECK_MSG(strstr(err.msg, "older than this loragate"), "%s", err.msg);

    /* the read-write open migrates and keeps the data */
    CHECK_MSG(lg_store_open(dir, &st, &err) == 0, "%s", err.msg);
    lg_tenant t;
    CHECK(lg_store_tenant_get(st, "acme", &t, &err) == 0);
    CHECK(t.weight == 3 && t.limits.rpm == 60 && t.limits.tpm == LG_UNLIMITED && !t.has_pricing);
    lg_store_close(st);
    db = raw_open(dir);
    CHECK(q1(db, "PRAGMA user_version") == lg_store_n_migrations);
    CHECK(q1(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'usage_records'") == 1);
    sqlite3_close(db);

    /* now the reader is happy */
    CHECK_MSG(lg_store_open_reader(dir, &st, &err) == 0, "%s", err.msg);
    CHECK(lg_store_tenant_get(st, "acme", &t, &err) == 0);
    lg_tenant_spec spec = lg_tenant_spec_init("other");
    CHECK(lg_store_tenant_create(st, &spec, NULL, &err) != 0); /* read-only handle */
    CHECK_MSG(strstr(err.msg, "read-only"), "%s", err.msg);
    lg_store_close(st);
    tu_rmtree(dir);
}

static void test_newer_refused(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "schema");
    lg_store *st = NULL;
    lg_err err = {{0}};
    CHECK(lg_store_open(dir, &st, &err) == 0);
    lg_store_close(st);
    sqlite3 *db = raw_open(dir);
    char sql[64];
    int newer = lg_store_n_migrations + 1;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", newer);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);

    char want[160];
    snprintf(want, sizeof want,
             "database schema version %d is newer than this loragate (knows up to %d); upgrade loragate", newer,
             lg_store_n_migrations);
    st = (lg_store *)1;
    CHECK(lg_store_open(dir, &st, &err) == LG_STORE_ERROR && st == NULL);
    CHECK_MSG(strstr(err.msg, want) != NULL, "got: %s", err.msg);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK(lg_store_open_reader(dir, &st, &err) != 0);
    CHECK_MSG(strstr(err.msg, want) != NULL, "got: %s", err.msg);
    lg_ledger *l = NULL;
    CHECK(lg_ledger_open(dir, NULL, &l, &err) != 0 && l == NULL);
    CHECK_MSG(strstr(err.msg, want) != NULL, "got: %s", err.msg);
    /* nothing was changed by the refusals */
    db = raw_open(dir);
    CHECK(q1(db, "PRAGMA user_version") == newer);
    sqlite3_close(db);
    tu_rmtree(dir);
}

static void test_failing_migration_changes_nothing(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "schema");
    lg_err err = {{0}};
    const lg_store_migration bad[] = {
        {1, "0001_ok.sql", "CREATE TABLE a (x INTEGER); PRAGMA application_id = 1279738946;"},
        {2, "0002_bad.sql", "CREATE TABLE b (y INTEGER); INSERT INTO nowhere VALUES (1);"},
    };
    sqlite3 *db = raw_open(dir);
    CHECK(lg_db_migrate(db, bad, 2, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "0002_bad.sql"), "%s", err.msg);
    CHECK(q1(db, "PRAGMA user_version") == 0);
    CHECK(q1(db, "SELECT count(*) FROM sqlite_schema") == 0); /* not even table a */
    /* a list with a gap is refused */
    const lg_store_migration gap[] = {{1, "0001_a.sql", "CREATE TABLE a (x);"}, {3, "0003_c.sql", "SELECT 1;"}};
    CHECK(lg_db_migrate(db, gap, 2, 2, &err) != 0);
    CHECK(q1(db, "SELECT count(*) FROM sqlite_schema") == 0);
    sqlite3_close(db);
    tu_rmtree(dir);
}

static void test_foreign_files(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "schema");
    lg_err err = {{0}};
    lg_store *st = NULL;
    /* some other application's SQLite file */
    sqlite3 *db = raw_open(dir);
    CHECK(sqlite3_exec(db, "CREATE TABLE notes (t TEXT)", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK(lg_store_open(dir, &st, &err) != 0);
    CHECK_MSG(strstr(err.msg, "not a loragate database"), "%s", err.msg);
    db = raw_open(dir);
    CHECK(q1(db, "SELECT count(*) FROM sqlite_schema") == 1); /* untouched */
    CHECK(sqlite3_exec(db, "DROP TABLE notes; PRAGMA application_id = 42", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK(lg_store_open(dir, &st, &err) != 0);
    CHECK_MSG(strstr(err.msg, "application_id 42"), "%s", err.msg);
    tu_rmtree(dir);

    /* not a database at all */
    tu_tmpdir(dir, sizeof dir, "schema");
    char path[600];
    snprintf(path, sizeof path, "%s/loragate.db", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 200; i++)
        fputs("this is not sqlite ", f);
    fclose(f);
    CHECK(lg_store_open(dir, &st, &err) != 0 && st == NULL);
    CHECK(strlen(err.msg) > 0);
    /* a reader of a missing database */
    tu_rmtree(dir);
    tu_tmpdir(dir, sizeof dir, "schema");
    CHECK(lg_store_open_reader(dir, &st, &err) != 0 && st == NULL);
    lg_store_close(NULL);
    tu_rmtree(dir);
}

int main(void)
{
    test_embedded_list();
    test_fresh();
    test_from_version_1();
    test_newer_refused();
    test_failing_migration_changes_nothing();
    test_foreign_files();
    TEST_DONE();
}
