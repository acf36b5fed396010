/*
 * test_ledger_faults.c — the ledger when the disk fails: records stay
 * queued, lg_ledger_healthy turns false with a reason, done callbacks wait,
 * nothing crashes; when the disk comes back everything is committed once.
 *
 * Ways to make the disk fail:
 *   1. A real full file system: a 512 KiB tmpfs mounted in a private mount
 *      namespace (needs root or CAP_SYS_ADMIN; skipped with a note
 *      otherwise), grown afterwards with a remount.
 *   2. A SQLite VFS shim registered as the default VFS, whose writes fail
 *      with SQLITE_FULL ("disk full") or SQLITE_IOERR_WRITE / fsync errors
 *      (a read-only or broken disk) while a flag is set. It runs
 *      everywhere, root or not: chmod cannot make a directory read-only
 *      for root, and a file system with open writable files cannot be
 *      remounted read-only.
 *   3. RLIMIT_FSIZE (any user, in a forked child): writes past the limit
 *      fail with EFBIG, as on a full disk; raising the limit is the
 *      operator freeing space.
 *   4. A read-only data directory (a read-only bind mount for root, chmod
 *      otherwise, in a forked child): opening refuses with a message that
 *      says the directory is not writable. Linux refuses to remount
 *      read-only a mount with files open for writing (EBUSY), so a running
 *      ledger meets a read-only disk only as write errors (EROFS after the
 *      kernel forces it read-only): case 2's FAULT_IO.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/unit/db/db_test_util.h"
#include "db/ledger.h"
#include "db/store.h"

/* ---- the fault-injecting VFS ---- */

enum { FAULT_NONE = 0, FAULT_FULL = 1, FAULT_IO = 2 };
static atomic_int fault_mode;
static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;

typedef struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* follows this struct in the same allocation */
} fault_file;

#define REAL(f) (((fault_file *)(f))->real)
#define RM(f) (REAL(f)->pMethods)

static int f_close(sqlite3_file *f) { return RM(f)->xClose(REAL(f)); }
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return RM(f)->xRead(REAL(f), b, n, o); }
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    int m = atomic_load(&fault_mode);
    if (m == FAULT_FULL)
        return SQLITE_FULL;
    if (m == FAULT_IO)
        return SQLITE_IOERR_WRITE;
    return RM(f)->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 s)
{
    if (atomic_load(&fault_mode) == FAULT_IO)
        return SQLITE_IOERR_TRUNCATE;
    return RM(f)->xTruncate(REAL(f), s);
}
static int f_sync(sqlite3_file *f, int flags)
{
    if (atomic_load(&fault_mode) == FAULT_IO)
        return SQLITE_IOERR_FSYNC;
    return RM(f)->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *s) { return RM(f)->xFileSize(REAL(f), s); }
static int f_lock(sqlite3_file *f, int l) { return RM(f)->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return RM(f)->xUnlock(REAL(f), l); }
static int f_reserved(sqlite3_file *f, int *r) { return RM(f)->xCheckReservedLock(REAL(f), r); }
static int f_fcntl(sqlite3_file *f, int op, void *a) { return RM(f)->xFileControl(REAL(f), op, a); }
static int f_sector(sqlite3_file *f) { return RM(f)->xSectorSize(REAL(f)); }
static int f_devchar(sqlite3_file *f) { return RM(f)->xDeviceCharacteristics(REAL(f)); }
static int f_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{
    return RM(f)->xShmMap(REAL(f), i, sz, ext, p);
}
static int f_shmlock(sqlite3_file *f, int off, int n, int flags) { return RM(f)->xShmLock(REAL(f), off, n, flags); }
static void f_shmbarrier(sqlite3_file *f) { RM(f)->xShmBarrier(REAL(f)); }
static int f_shmunmap(sqlite3_file *f, int del) { return RM(f)->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{
    *p = NULL; /* no memory-mapped I/O through the shim */
    return SQLITE_OK;
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return SQLITE_OK; }

static const sqlite3_io_methods fault_io = {
    3,        f_close,   f_read,    f_write,   f_truncate,   f_sync,    f_size,   f_lock,   f_unlock,
    f_reserved, f_fcntl, f_sector,  f_devchar, f_shmmap,     f_shmlock, f_shmbarrier, f_shmunmap, f_fetch,
    f_unfetch,
};

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags)
{
    fault_file *f = (fault_file *)file;
    f->real = (sqlite3_file *)(f + 1);
    f->base.pMethods = NULL;
    if (atomic_load(&fault_mode) == FAULT_IO && (flags & SQLITE_OPEN_CREATE) && name && access(name, F_OK) != 0)
        return SQLITE_CANTOPEN;
    int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
    if (rc == SQLITE_OK)
        f->base.pMethods = &fault_io;
    return rc;
}

static void install_fault_vfs(void)
{
    real_vfs = sqlite3_vfs_find(NULL);
    fault_vfs = *real_vfs;
    fault_vfs.pNext = NULL;
    fault_vfs.zName = "lgfault";
    fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
    fault_vfs.xOpen = f_open;
    sqlite3_vfs_register(&fault_vfs, 1);
}

/* tu_query_int opens the default VFS, which is the shim once installed:
 * this one reads through the real VFS, whatever the fault. */
static int64_t real_query_int(const char *data_dir, const char *sql)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/loragate.db", data_dir);
    sqlite3 *db = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, real_vfs ? real_vfs->zName : NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
    return v;
}

/* ---- callbacks ---- */

static atomic_int cb_ok, cb_abandoned, cb_other;

static void on_done(void *ctx, int status)
{
    (void)ctx;
    if (status == LG_LEDGER_COMMITTED)
        atomic_fetch_add(&cb_ok, 1);
    else if (status == LG_LEDGER_ABANDONED)
        atomic_fetch_add(&cb_abandoned, 1);
    else
        atomic_fetch_add(&cb_other, 1);
}

static void reset_cb(void)
{
    atomic_store(&cb_ok, 0);
    atomic_store(&cb_abandoned, 0);
    atomic_store(&cb_other, 0);
}

static int next_id;

static void append_n(lg_ledger *l, int n, bool fat)
{
    lg_err err;
    for (int i = 0; i < n; i++) {
        char id[40];
        snprintf(id, sizeof id, "f-%d", next_id++);
        lg_usage_record r = tu_record(id, 1, 1700000000000LL + next_id);
        if (fat) {
            memset(r.model, 'm', sizeof r.model - 1);
            memset(r.error_type, 'e', sizeof r.error_type - 1);
        }
        if (lg_ledger_append(l, &r, on_done, NULL, &err) != 0)
            CHECK_MSG(0, "append: %s", err.msg);
    }
}

/* Polls until the ledger reports unhealthy (or 5 s). */
static bool wait_unhealthy(lg_ledger *l, char *reason, size_t size)
{
    for (int i = 0; i < 500; i++) {
        if (!lg_ledger_healthy(l, reason, size))
            return true;
        usleep(10000);
    }
    return false;
}

static void test_vfs_faults(const char *dir)
{
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    CHECK_MSG(lg_ledger_open(dir, NULL, &l, &err) == 0, "%s", err.msg);
    if (!l)
        return;
    reset_cb();
    int base = next_id;
    append_n(l, 100, false);
    CHECK(lg_ledger_flush(l, 10000, &err) == 0 && atomic_load(&cb_ok) == 100);

    for (int mode = FAULT_FULL; mode <= FAULT_IO; mode++) {
        reset_cb();
        atomic_store(&fault_mode, mode);
        append_n(l, 50, false);
        char reason[400] = "";
        CHECK(wait_unhealthy(l, reason, sizeof reason));
        CHECK_MSG(strstr(reason, mode == FAULT_FULL ? "full" : "I/O") != NULL, "reason: %s", reason);
        CHECK(strchr(reason, '\n') == NULL);
        usleep(300000); /* several retries happen meanwhile */
        lg_ledger_stats s;
        lg_ledger_stats_get(l, &s);
        CHECK(s.backlog == 50 && s.errors >= 2 && !s.healthy);
        CHECK(atomic_load(&cb_ok) == 0 && atomic_load(&cb_other) == 0); /* no acks while failing */
        CHECK(lg_ledger_flush(l, 100, &err) != 0);
        CHECK_MSG(strstr(err.msg, "50 records not committed"), "%s", err.msg);
        /* appends are still accepted (queued) and readers still read; the
         * count is taken while the fault holds (through the real VFS), so
         * the writer's next retry cannot commit between it and the fault
         * being cleared */
        append_n(l, 5, false);
        int64_t rows = real_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'f-%'");
        atomic_store(&fault_mode, FAULT_NONE);
        CHECK_MSG(rows == next_id - base - 55, "rows while failing: %lld, expected %d", (long long)rows,
                  next_id - base - 55);
        /* the disk is back: everything goes in, once */
        CHECK_MSG(lg_ledger_flush(l, 20000, &err) == 0, "%s", err.msg);
        CHECK(atomic_load(&cb_ok) == 55 && atomic_load(&cb_other) == 0);
        CHECK(lg_ledger_healthy(l, reason, sizeof reason) && reason[0] == '\0');
        CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'f-%'") == next_id - base);
    }

    /* stop while the disk is failing: records are given up loudly */
    reset_cb();
    atomic_store(&fault_mode, FAULT_FULL);
    append_n(l, 10, false);
    CHECK(lg_ledger_stop(l, 300, &err) != 0);
    CHECK_MSG(strstr(err.msg, "10 records not written"), "%s", err.msg);
    CHECK(atomic_load(&cb_abandoned) == 10 && atomic_load(&cb_ok) == 0);
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);
    CHECK(s.abandoned == 10 && s.backlog == 0);
    atomic_store(&fault_mode, FAULT_NONE);
    lg_ledger_close(l);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'f-%'") == next_id - base - 10);

    lg_store *st = NULL;
    CHECK(lg_store_open(dir, &st, &err) == 0 && lg_store_integrity_check(st, &err) == 0);
    lg_store_close(st);
}

/* A real tmpfs that fills up, then grows. */
static void test_full_tmpfs(const char *tmp)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        printf("SKIP full-tmpfs test: no private mount namespace (%s); needs root or CAP_SYS_ADMIN\n",
               strerror(errno));
        return;
    }
    char mnt[600];
    snprintf(mnt, sizeof mnt, "%s/mnt", tmp);
    mkdir(mnt, 0700);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=512k") != 0) {
        printf("SKIP full-tmpfs test: mounting a tmpfs failed (%s)\n", strerror(errno));
        return;
    }
    lg_err err = {{0}};
    lg_store *st = NULL;
    lg_ledger *l = NULL;
    CHECK_MSG(lg_store_open(mnt, &st, &err) == 0, "%s", err.msg);
    CHECK_MSG(lg_ledger_open(mnt, NULL, &l, &err) == 0, "%s", err.msg);
    if (!st || !l) {
        lg_ledger_close(l);
        lg_store_close(st);
        umount2(mnt, MNT_DETACH);
        return;
    }
    reset_cb();
    int base = next_id, groups = 0;
    bool full = false;
    while (!full && groups < 2000) {
        append_n(l, 100, true);
        groups++;
        full = lg_ledger_flush(l, 1000, &err) != 0;
    }
    CHECK_MSG(full, "512 KiB tmpfs never filled up (%d records)", next_id - base);
    char reason[400] = "";
    CHECK(!lg_ledger_healthy(l, reason, sizeof reason));
    CHECK_MSG(strstr(reason, "full"), "reason: %s", reason);
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);
    int appended = next_id - base;
    CHECK(s.backlog > 0 && (int)s.backlog <= 100);
    CHECK(atomic_load(&cb_ok) == appended - (int)s.backlog); /* acked = committed */
    printf("tmpfs full after %d committed records; %llu queued; reason: %s\n", atomic_load(&cb_ok),
           (unsigned long long)s.backlog, reason);
    /* admin writes fail cleanly too */
    lg_tenant_spec spec = lg_tenant_spec_init("while-full");
    int rc = lg_store_tenant_create(st, &spec, NULL, &err);
    (void)rc; /* may or may not fit in the last free page: either way, no crash */

    /* the operator grows the file system */
    CHECK(mount(NULL, mnt, "tmpfs", MS_REMOUNT, "size=64m") == 0);
    CHECK_MSG(lg_ledger_flush(l, 20000, &err) == 0, "%s", err.msg);
    CHECK(atomic_load(&cb_ok) == appended && atomic_load(&cb_other) == 0);
    CHECK(lg_ledger_healthy(l, NULL, 0));
    append_n(l, 100, true);
    CHECK(lg_ledger_flush(l, 20000, &err) == 0);
    CHECK(tu_query_int(mnt, "SELECT count(*) FROM usage_records") == appended + 100);
    CHECK_MSG(lg_store_integrity_check(st, &err) == 0, "%s", err.msg);
    lg_ledger_close(l);
    lg_store_close(st);
    CHECK(umount2(mnt, MNT_DETACH) == 0);
}

/* Runs fn(dir) in a forked child; the child's CHECK failures fail the parent. */
static void in_child(void (*fn)(const char *), const char *dir, const char *what)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        lg_t_pass = lg_t_fail = 0;
        fn(dir);
        printf("%s: %d passed, %d failed\n", what, lg_t_pass, lg_t_fail);
        fflush(stdout);
        _exit(lg_t_fail ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child status %#x", what, status);
}

/* A file-size limit as a full disk: the WAL cannot grow, commits fail, the
 * ledger keeps the records and says why; with the limit lifted everything
 * goes in once. */
static void fsize_child(const char *dir)
{
    signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG */
    lg_err err = {{0}};
    lg_ledger *l = NULL;
    CHECK_MSG(lg_ledger_open(dir, NULL, &l, &err) == 0, "%s", err.msg);
    if (!l)
        return;
    reset_cb();
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = {.rlim_cur = 1 << 20, .rlim_max = old.rlim_max}; /* 1 MiB per file */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int base = next_id, groups = 0;
    bool full = false;
    while (!full && groups < 2000) {
        append_n(l, 100, true);
        groups++;
        full = lg_ledger_flush(l, 1000, &err) != 0;
    }
    CHECK_MSG(full, "1 MiB file-size limit never reached (%d records)", next_id - base);
    char reason[400] = "";
    CHECK(!lg_ledger_healthy(l, reason, sizeof reason));
    lg_ledger_stats s;
    lg_ledger_stats_get(l, &s);
    int appended = next_id - base;
    CHECK(s.backlog > 0 && (int)s.backlog <= 100 && s.errors >= 1);
    CHECK(atomic_load(&cb_ok) == appended - (int)s.backlog && atomic_load(&cb_other) == 0);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'f-%'") ==
          appended - (int)s.backlog);
    printf("file-size limit: %d records committed, %llu queued; reason: %s\n", atomic_load(&cb_ok),
           (unsigned long long)s.backlog, reason);
    /* space again */
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK_MSG(lg_ledger_flush(l, 20000, &err) == 0, "%s", err.msg);
    CHECK(atomic_load(&cb_ok) == appended && lg_ledger_healthy(l, NULL, 0));
    lg_ledger_close(l);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'f-%'") == appended);
    lg_store *st = NULL;
    CHECK(lg_store_open(dir, &st, &err) == 0 && lg_store_integrity_check(st, &err) == 0);
    lg_store_close(st);
}

/* Makes dir read-only for this process: a read-only bind mount in a private
 * mount namespace (root), or chmod (anyone else: root ignores modes). */
static bool make_read_only(const char *dir, bool *bind)
{
    *bind = false;
    if (geteuid() != 0)
        return chmod(dir, 0555) == 0;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(dir, dir, NULL, MS_BIND, NULL) != 0)
        return false;
    *bind = true;
    return mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0;
}

static void read_only_child(const char *dir)
{
    lg_err err = {{0}};
    lg_store *st = NULL;
    lg_ledger *l = NULL;
    /* a database that exists, in a directory that is not writable */
    CHECK(lg_store_open(dir, &st, &err) == 0);
    lg_store_close(st);
    st = NULL;
    bool bind;
    if (!make_read_only(dir, &bind)) {
        printf("SKIP read-only test: cannot make %s read-only (%s)\n", dir, strerror(errno));
        return;
    }
    CHECK(lg_store_open(dir, &st, &err) == LG_STORE_ERROR && st == NULL);
    CHECK_MSG(strstr(err.msg, "is not writable"), "%s", err.msg);
    CHECK(lg_ledger_open(dir, NULL, &l, &err) == LG_STORE_ERROR && l == NULL);
    CHECK_MSG(strstr(err.msg, "is not writable"), "%s", err.msg);
    printf("read-only data dir: %s\n", err.msg);
    if (bind)
        umount2(dir, MNT_DETACH);
    else
        chmod(dir, 0700);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "faults");
    lg_err err;
    lg_store *st = NULL;
    /* the real file system first (the shim is not installed yet) */
    test_full_tmpfs(dir);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/fsize", dir);
    mkdir(sub, 0700);
    in_child(fsize_child, sub, "file-size limit");
    snprintf(sub, sizeof sub, "%s/ro", dir);
    mkdir(sub, 0700);
    in_child(read_only_child, sub, "read-only data dir");
    install_fault_vfs();
    if (lg_store_open(dir, &st, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    lg_store_close(st);
    test_vfs_faults(dir);
    tu_rmtree(dir);
    TEST_DONE();
}
