/*
 * test_store_modes.c — the database is private whatever the umask: a new
 * data directory made by the store is 0700, loragate.db and its -wal and
 * -shm are 0600 (also once the ledger writer and a reader have their own
 * connections), a database left 0644 by an older loragate loses its
 * group/other bits at the next read-write open, and a backup is 0600.
 */
#include <sys/stat.h>

#include "tests/unit/db/db_test_util.h"
#include "db/ledger.h"
#include "db/store.h"

static unsigned mode_of(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffffffu;
}

static void check_private(const char *dir, bool need_wal)
{
    CHECK_MSG(mode_of(dir, "loragate.db") == 0600, "loragate.db mode %o", mode_of(dir, "loragate.db"));
    const char *side[] = {"loragate.db-wal", "loragate.db-shm"};
    for (int i = 0; i < 2; i++) {
        unsigned m = mode_of(dir, side[i]);
        if (need_wal)
            CHECK_MSG(m == 0600, "%s mode %o", side[i], m);
        else
            CHECK_MSG(m == 0600 || m == 0xffffffffu, "%s mode %o", side[i], m);
    }
}

static void done(void *ctx, int status) { (void)ctx, (void)status; }

int main(void)
{
    umask(022);
    char root[512], dir[600];
    tu_tmpdir(root, sizeof root, "modes");
    snprintf(dir, sizeof dir, "%s/data", root); /* does not exist yet */
    lg_err err = {{0}};
    lg_store *st = NULL, *rd = NULL;
    lg_ledger *l = NULL;
    CHECK_MSG(lg_store_open(dir, &st, &err) == 0, "%s", err.msg);
    CHECK_MSG(mode_of(root, "data") == 0700, "data dir mode %o", mode_of(root, "data"));
    check_private(dir, true);
    CHECK_MSG(lg_ledger_open(dir, NULL, &l, &err) == 0, "%s", err.msg);
    CHECK_MSG(lg_store_open_reader(dir, &rd, &err) == 0, "%s", err.msg);
    lg_usage_record r = tu_record("mode-1", 1, 1700000000000LL);
    CHECK(l && lg_ledger_append(l, &r, done, NULL, &err) == 0 && lg_ledger_flush(l, 10000, &err) == 0);
    check_private(dir, true);

    char dest[700];
    snprintf(dest, sizeof dest, "%s/backup.db", root);
    CHECK_MSG(lg_store_backup(st, dest, &err) == 0, "%s", err.msg);
    CHECK_MSG(mode_of(root, "backup.db") == 0600, "backup mode %o", mode_of(root, "backup.db"));
    lg_store_close(rd);
    lg_ledger_close(l);
    lg_store_close(st);

    /* an older loragate's 0644 database: private again at the next open */
    char db[700];
    snprintf(db, sizeof db, "%s/loragate.db", dir);
    CHECK(chmod(db, 0644) == 0);
    CHECK_MSG(lg_store_open(dir, &st, &err) == 0, "%s", err.msg);
    check_private(dir, true);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records") == 1);
    lg_store_close(st);

    /* a read-only database stays read-only (only group/other bits go) */
    CHECK(chmod(db, 0444) == 0);
    CHECK(lg_store_open_reader(dir, &rd, &err) == 0);
    lg_store_close(rd);
    CHECK_MSG(mode_of(dir, "loragate.db") == 0444, "a reader changed the mode: %o", mode_of(dir, "loragate.db"));
    if (geteuid() != 0) {
        CHECK(lg_store_open(dir, &st, &err) != 0 && st == NULL);
        CHECK_MSG(mode_of(dir, "loragate.db") == 0400, "mode %o", mode_of(dir, "loragate.db"));
    }
    chmod(db, 0600);
    tu_rmtree(root);
    TEST_DONE();
}
