/*
 * store.c — store handles, tenants, server settings, backup and integrity
 * check (keys: keys.c, adapters: adapters.c, usage: usage.c).
 *
 * Workload: admin writes are rare (a tenant or key a minute at most) and
 * wait for fsync; reads through a tenant name are index lookups. Every
 * statement is prepared per call: the hot paths (auth, usage records) do not
 * come through here (key snapshots, the ledger).
 *
 * Files: a read-write open makes loragate.db (and its -wal, -shm) 0600
 * whatever the umask, and a backup is 0600 too (lg_private_file).
 */
#include "db/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers shared by the db/ files ------------------------------------------- */

int lg_st_fail(lg_store *st, lg_err *err, const char *what)
{
    lg_db_fail(err, st->db, what);
    return LG_STORE_ERROR;
}

int lg_st_check_writable(lg_store *st, const char *what, lg_err *err)
{
    if (st->read_only)
        return lg_fail(err, "%s: this store handle is read-only (lg_store_open_reader)", what);
    return 0;
}

int lg_st_prepare(lg_store *st, const char *sql, sqlite3_stmt **out, lg_err *err)
{
    if (sqlite3_prepare_v2(st->db, sql, -1, out, NULL) != SQLITE_OK) {
        *out = NULL;
        return lg_st_fail(st, err, "preparing a statement");
    }
    return 0;
}

int lg_st_begin(lg_store *st, lg_err *err)
{
    if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return lg_st_fail(st, err, "starting a transaction");
    return 0;
}

int lg_st_commit(lg_store *st, lg_err *err)
{
    if (sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        lg_st_fail(st, err, "committing");
        lg_st_rollback(st);
        return LG_STORE_ERROR;
    }
    return 0;
}

void lg_st_rollback(lg_store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

void lg_st_col_text(sqlite3_stmt *s, int col, char *buf, size_t size)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(buf, size, "%s", t ? (const char *)t : "");
}

int64_t lg_st_col_i64(sqlite3_stmt *s, int col, int64_t null_value)
{
    return sqlite3_column_type(s, col) == SQLITE_NULL ? null_value : sqlite3_column_int64(s, col);
}

void lg_st_bind_i64(sqlite3_stmt *s, int idx, int64_t v, int64_t null_value)
{
    if (v == null_value)
        sqlite3_bind_null(s, idx);
    else
        sqlite3_bind_int64(s, idx, v);
}

void lg_st_bind_text(sqlite3_stmt *s, int idx, const char *text, bool empty_is_null)
{
    if (!text || (empty_is_null && !*text))
        sqlite3_bind_null(s, idx);
    else
        sqlite3_bind_text(s, idx, text, -1, SQLITE_TRANSIENT);
}

int lg_st_tenant_id(lg_store *st, const char *name, int64_t *id, lg_err *err)
{
    if (!name)
        return lg_fail(err, "expected a tenant name"), LG_STORE_INVALID;
    sqlite3_stmt *s;
    if (lg_st_prepare(st, "SELECT id FROM tenants WHERE name = ? AND deleted_at IS NULL", &s, err))
        return LG_STORE_ERROR;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s), ret = 0;
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        ret = (lg_fail(err, "no tenant named '%s'", name), LG_STORE_NOT_FOUND);
    else
        ret = lg_st_fail(st, err, "looking up a tenant");
    sqlite3_finalize(s);
    return ret;
}

int lg_st_grow(void **arr, int *cap, int n, size_t elem, lg_err *err)
{
    if (n < *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return lg_fail(err, "out of memory (%d rows)", nc);
    *arr = p;
    *cap = nc;
    return 0;
}

/* ---- handles -------------------------------------------------------------- */

/* The database holds every tenant's key hashes, prices and usage: the file
 * and its -wal and -shm are private (0600), whatever the umask. SQLite
 * creates a new main file 0644 & ~umask and gives -wal and -shm the main
 * file's mode, so the main file is created here, 0600, before SQLite opens
 * it; a main file (or -wal, -shm) that already exists with group/other bits
 * (made by an older loragate) loses them. Best effort: a file that cannot be
 * created or changed (read-only directory or disk, another owner) is left
 * to lg_db_open, which says what is wrong. The admin handle opens first in
 * `serve` (before the ledger writer, whose lg_db_open could also create the
 * file), and readers never create it. */
static void lg_private_file(const char *path, bool create)
{
    if (create) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            fchmod(fd, 0600); /* the umask may have taken owner bits too */
            close(fd);
            return;
        }
        if (errno != EEXIST)
            return;
    }
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() && (sb.st_mode & 077))
        chmod(path, sb.st_mode & 0700);
}

static void lg_private_db_files(const char *path)
{
    char p[PATH_MAX + 40];
    lg_private_file(path, true);
    snprintf(p, sizeof p, "%s-wal", path);
    lg_private_file(p, false);
    snprintf(p, sizeof p, "%s-shm", path);
    lg_private_file(p, false);
}

static int lg_store_open_impl(const char *data_dir, bool read_only, lg_store **out, lg_err *err)
{
    *out = NULL;
    char path[PATH_MAX + 32];
    if (lg_db_path(data_dir, path, sizeof path, err))
        return LG_STORE_INVALID;
    if (strlen(data_dir) >= PATH_MAX)
        return lg_fail(err, "data directory path too long"), LG_STORE_INVALID;
    if (!read_only && mkdir(data_dir, 0700) != 0 && errno != EEXIST)
        return lg_fail(err, "creating data directory %s: %s", data_dir, strerror(errno));
    if (!read_only)
        lg_private_db_files(path);
    lg_store *st = calloc(1, sizeof *st);
    if (!st)
        return lg_fail(err, "out of memory");
    if (lg_db_open(path, read_only, &st->db, err)) {
        free(st);
        return LG_STORE_ERROR;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->read_only = read_only;
    snprintf(st->data_dir, sizeof st->data_dir, "%s", data_dir);
    *out = st;
    return 0;
}

int lg_store_open(const char *data_dir, lg_store **out, lg_err *err)
{
    return lg_store_open_impl(data_dir, false, out, err);
}

int lg_store_open_reader(const char *data_dir, lg_store **out, lg_err *err)
{
    return lg_store_open_impl(data_dir, true, out, err);
}

void lg_store_close(lg_store *st)
{
    if (!st)
        return;
    sqlite3_close_v2(st->db);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

const char *lg_store_data_dir(const lg_store *st) { return st->data_dir; }

int lg_store_schema_latest(void) { return lg_store_n_migrations; }

/* ---- names ------------------------------------------------------------------ */

static bool lg_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* A tenant name is its URL slug (/t/<name>/v1) and its Host label
 * (<name>.<suffix>), so it is a DNS label: the same rule as the router's
 * lg_tenant_slug_valid (gateway/http/router.c; db/ does not include gateway/, so
 * the rule is written twice and tests/unit/gateway/test_tenant_names.c
 * checks that the two agree). */
int lg_store_check_tenant_name(const char *name, lg_err *err)
{
    if (!name || !*name)
        return lg_fail(err, "expected a tenant name, got an empty one"), LG_STORE_INVALID;
    size_t n = strlen(name);
    bool ok = n <= 63 && lg_lower_alnum(name[0]) && lg_lower_alnum(name[n - 1]);
    for (size_t i = 1; ok && i < n; i++)
        ok = lg_lower_alnum(name[i]) || name[i] == '-';
    if (!ok)
        return lg_fail(err, "invalid tenant name '%.80s': " LG_STORE_TENANT_NAME_RULE, name), LG_STORE_INVALID;
    return 0;
}

int lg_store_check_adapter_name(const char *name, lg_err *err)
{
    if (!name || !*name)
        return lg_fail(err, "expected an adapter name, got an empty one"), LG_STORE_INVALID;
    size_t n = strlen(name);
    bool ok = n <= 63;
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        bool alnum = lg_lower_alnum(c) || (c >= 'A' && c <= 'Z');
        ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '-'));
    }
    if (!ok)
        return lg_fail(err, "invalid adapter name '%.80s': expected 1-63 characters of A-Z, a-z, 0-9, '.', '_' "
                            "and '-', starting with a letter or digit",
                       name),
               LG_STORE_INVALID;
    return 0;
}

/* ---- tenants ------------------------------------------------------------------ */

#define LG_TENANT_COLS                                                                                    \
    "id, name, created_at, deleted_at, weight, price_input, price_cached_input, price_output, limit_rpm, " \
    "limit_tpm, limit_concurrent, limit_monthly_tokens"

static void lg_read_tenant(sqlite3_stmt *s, lg_tenant *t)
{
    memset(t, 0, sizeof *t);
    t->id = sqlite3_column_int64(s, 0);
    lg_st_col_text(s, 1, t->name, sizeof t->name);
    t->created_at = sqlite3_column_int64(s, 2);
    t->deleted_at = lg_st_col_i64(s, 3, 0);
    t->weight = sqlite3_column_int(s, 4);
    t->has_pricing = sqlite3_column_type(s, 5) != SQLITE_NULL;
    t->pricing = (lg_pricing){lg_st_col_i64(s, 5, 0), lg_st_col_i64(s, 6, 0), lg_st_col_i64(s, 7, 0)};
    t->limits = (lg_tenant_limits){lg_st_col_i64(s, 8, LG_UNLIMITED), lg_st_col_i64(s, 9, LG_UNLIMITED),
                                   lg_st_col_i64(s, 10, LG_UNLIMITED), lg_st_col_i64(s, 11, LG_UNLIMITED)};
}

lg_tenant_spec lg_tenant_spec_init(const char *name)
{
    return (lg_tenant_spec){
        .name = name,
        .weight = 1,
        .has_pricing = false,
        .limits = {LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED},
    };
}

static int lg_check_spec(const lg_tenant_spec *spec, lg_err *err)
{
    if (spec->weight < 1)
        return lg_fail(err, "tenant weight must be >= 1, got %d", spec->weight), LG_STORE_INVALID;
    const int64_t lim[4] = {spec->limits.rpm, spec->limits.tpm, spec->limits.concurrent, spec->limits.monthly_tokens};
    static const char *names[4] = {"requests per minute", "tokens per minute", "concurrent requests",
                                   "monthly tokens"};
    for (int i = 0; i < 4; i++)
        if (lim[i] < LG_UNLIMITED)
            return lg_fail(err, "tenant limit '%s' must be >= 0 or unlimited, got %lld", names[i], (long long)lim[i]),
                   LG_STORE_INVALID;
    if (spec->has_pricing && lg_money_pricing_check(&spec->pricing, err))
        return LG_STORE_INVALID;
    return 0;
}

/* Binds weight, pricing and limits at idx .. idx+7. */
static void lg_bind_spec(sqlite3_stmt *s, int idx, const lg_tenant_spec *spec)
{
    sqlite3_bind_int(s, idx, spec->weight);
    for (int i = 0; i < 3; i++) {
        const int64_t p[3] = {spec->pricing.input, spec->pricing.cached_input, spec->pricing.output};
        if (spec->has_pricing)
            sqlite3_bind_int64(s, idx + 1 + i, p[i]);
        else
            sqlite3_bind_null(s, idx + 1 + i);
    }
    lg_st_bind_i64(s, idx + 4, spec->limits.rpm, LG_UNLIMITED);
    lg_st_bind_i64(s, idx + 5, spec->limits.tpm, LG_UNLIMITED);
    lg_st_bind_i64(s, idx + 6, spec->limits.concurrent, LG_UNLIMITED);
    lg_st_bind_i64(s, idx + 7, spec->limits.monthly_tokens, LG_UNLIMITED);
}

static int lg_tenant_by(lg_store *st, const char *where, const char *name, int64_t id, lg_tenant *out, lg_err *err)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT " LG_TENANT_COLS " FROM tenants WHERE %s", where);
    sqlite3_stmt *s;
    if (lg_st_prepare(st, sql, &s, err))
        return LG_STORE_ERROR;
    if (name)
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    else
        sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s), ret = 0;
    if (rc == SQLITE_ROW)
        lg_read_tenant(s, out);
    else if (rc == SQLITE_DONE)
        ret = name ? (lg_fail(err, "no tenant named '%s'", name), LG_STORE_NOT_FOUND)
                   : (lg_fail(err, "no tenant with id %lld", (long long)id), LG_STORE_NOT_FOUND);
    else
        ret = lg_st_fail(st, err, "reading a tenant");
    sqlite3_finalize(s);
    return ret;
}

static int lg_tenant_create_locked(lg_store *st, const lg_tenant_spec *spec, lg_tenant *out, lg_err *err)
{
    int rc;
    if ((rc = lg_st_check_writable(st, "creating a tenant", err)) || (rc = lg_store_check_tenant_name(spec->name, err)) ||
        (rc = lg_check_spec(spec, err)))
        return rc;
    if ((rc = lg_st_begin(st, err)))
        return rc;
    int64_t id;
    rc = lg_st_tenant_id(st, spec->name, &id, err);
    if (rc == 0) {
        lg_st_rollback(st);
        return lg_fail(err, "a tenant named '%s' already exists", spec->name), LG_STORE_CONFLICT;
    }
    if (rc != LG_STORE_NOT_FOUND) {
        lg_st_rollback(st);
        return rc;
    }
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st,
                            "INSERT INTO tenants (name, created_at, weight, price_input, price_cached_input, "
                            "price_output, limit_rpm, limit_tpm, limit_concurrent, limit_monthly_tokens) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            &s, err))) {
        lg_st_rollback(st);
        return rc;
    }
    sqlite3_bind_text(s, 1, spec->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, lg_db_now_ms());
    lg_bind_spec(s, 3, spec);
    if (sqlite3_step(s) != SQLITE_DONE) {
        rc = lg_st_fail(st, err, "inserting a tenant");
        sqlite3_finalize(s);
        lg_st_rollback(st);
        return rc;
    }
    sqlite3_finalize(s);
    id = sqlite3_last_insert_rowid(st->db);
    if ((rc = lg_st_commit(st, err)))
        return rc;
    lg_tenant tmp;
    return lg_tenant_by(st, "id = ?", NULL, id, out ? out : &tmp, err);
}

int lg_store_tenant_create(lg_store *st, const lg_tenant_spec *spec, lg_tenant *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_tenant_create_locked(st, spec, out, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_tenant_update_locked(lg_store *st, const char *name, const lg_tenant_spec *spec, lg_tenant *out,
                                   lg_err *err)
{
    int rc;
    if ((rc = lg_st_check_writable(st, "updating a tenant", err)))
        return rc;
    if ((rc = lg_check_spec(spec, err)))
        return rc;
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st,
                            "UPDATE tenants SET weight = ?, price_input = ?, price_cached_input = ?, price_output = ?, "
                            "limit_rpm = ?, limit_tpm = ?, limit_concurrent = ?, limit_monthly_tokens = ? "
                            "WHERE name = ? AND deleted_at IS NULL",
                            &s, err)))
        return rc;
    lg_bind_spec(s, 1, spec);
    sqlite3_bind_text(s, 9, name ? name : "", -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
        rc = lg_st_fail(st, err, "updating a tenant");
        sqlite3_finalize(s);
        return rc;
    }
    sqlite3_finalize(s);
    if (sqlite3_changes(st->db) == 0)
        return lg_fail(err, "no tenant named '%s'", name ? name : ""), LG_STORE_NOT_FOUND;
    lg_tenant tmp;
    return lg_tenant_by(st, "name = ? AND deleted_at IS NULL", name, 0, out ? out : &tmp, err);
}

int lg_store_tenant_update(lg_store *st, const char *name, const lg_tenant_spec *spec, lg_tenant *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_tenant_update_locked(st, name, spec, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_tenant_get(lg_store *st, const char *name, lg_tenant *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_tenant_by(st, "name = ? AND deleted_at IS NULL", name ? name : "", 0, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_tenant_get_by_id(lg_store *st, int64_t id, lg_tenant *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_tenant_by(st, "id = ?", NULL, id, out, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_tenant_list_locked(lg_store *st, bool include_deleted, lg_tenant **out, int *n, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st,
                           include_deleted ? "SELECT " LG_TENANT_COLS " FROM tenants ORDER BY name, id"
                                           : "SELECT " LG_TENANT_COLS
                                             " FROM tenants WHERE deleted_at IS NULL ORDER BY name, id",
                           &s, err);
    if (rc)
        return rc;
    lg_tenant *arr = NULL;
    int cap = 0, cnt = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (lg_st_grow((void **)&arr, &cap, cnt, sizeof *arr, err)) {
            rc = SQLITE_NOMEM;
            break;
        }
        lg_read_tenant(s, &arr[cnt++]);
    }
    if (rc != SQLITE_DONE) {
        if (rc != SQLITE_NOMEM)
            lg_st_fail(st, err, "listing tenants");
        sqlite3_finalize(s);
        free(arr);
        return LG_STORE_ERROR;
    }
    sqlite3_finalize(s);
    *out = arr;
    *n = cnt;
    return 0;
}

int lg_store_tenant_list(lg_store *st, bool include_deleted, lg_tenant **out, int *n, lg_err *err)
{
    *out = NULL;
    *n = 0;
    lg_st_lock(st);
    int rc = lg_tenant_list_locked(st, include_deleted, out, n, err);
    lg_st_unlock(st);
    return rc;
}

/* Runs `sql` with ?1 = now, ?2 = id. */
static int lg_exec_now_id(lg_store *st, const char *sql, int64_t now, int64_t id, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, sql, &s, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(s, 1, now);
    sqlite3_bind_int64(s, 2, id);
    rc = sqlite3_step(s) == SQLITE_DONE ? 0 : lg_st_fail(st, err, "soft-deleting");
    sqlite3_finalize(s);
    return rc;
}

static int lg_tenant_delete_locked(lg_store *st, const char *name, lg_err *err)
{
    int rc;
    int64_t id, now = lg_db_now_ms();
    if ((rc = lg_st_check_writable(st, "deleting a tenant", err)) || (rc = lg_st_begin(st, err)))
        return rc;
    if ((rc = lg_st_tenant_id(st, name, &id, err)) ||
        (rc = lg_exec_now_id(st, "UPDATE tenants SET deleted_at = ?1 WHERE id = ?2", now, id, err)) ||
        (rc = lg_exec_now_id(st, "UPDATE api_keys SET revoked_at = ?1 WHERE tenant_id = ?2 AND revoked_at IS NULL",
                             now, id, err)) ||
        (rc = lg_exec_now_id(st, "UPDATE adapters SET deleted_at = ?1 WHERE tenant_id = ?2 AND deleted_at IS NULL",
                             now, id, err))) {
        lg_st_rollback(st);
        return rc;
    }
    return lg_st_commit(st, err);
}

int lg_store_tenant_delete(lg_store *st, const char *name, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_tenant_delete_locked(st, name, err);
    lg_st_unlock(st);
    return rc;
}

/* ---- settings ----------------------------------------------------------------- */

static int lg_default_pricing_locked(lg_store *st, lg_pricing *out, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, "SELECT price_input, price_cached_input, price_output FROM server_settings WHERE id = 1",
                           &s, err);
    if (rc)
        return rc;
    if (sqlite3_step(s) == SQLITE_ROW)
        *out = (lg_pricing){sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2)};
    else
        rc = lg_st_fail(st, err, "reading server settings");
    sqlite3_finalize(s);
    return rc;
}

int lg_store_default_pricing_get(lg_store *st, lg_pricing *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_default_pricing_locked(st, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_default_pricing_set(lg_store *st, const lg_pricing *p, lg_err *err)
{
    int rc;
    if (lg_money_pricing_check(p, err))
        return LG_STORE_INVALID;
    lg_st_lock(st);
    sqlite3_stmt *s = NULL;
    if (!(rc = lg_st_check_writable(st, "setting the default pricing", err)) &&
        !(rc = lg_st_prepare(st,
                             "UPDATE server_settings SET price_input = ?, price_cached_input = ?, price_output = ? "
                             "WHERE id = 1",
                             &s, err))) {
        sqlite3_bind_int64(s, 1, p->input);
        sqlite3_bind_int64(s, 2, p->cached_input);
        sqlite3_bind_int64(s, 3, p->output);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = lg_st_fail(st, err, "setting the default pricing");
    }
    sqlite3_finalize(s);
    lg_st_unlock(st);
    return rc;
}

int lg_store_effective_pricing(lg_store *st, int64_t tenant_id, lg_pricing *out, lg_err *err)
{
    lg_st_lock(st);
    lg_tenant t;
    int rc = lg_tenant_by(st, "id = ?", NULL, tenant_id, &t, err);
    if (rc == 0) {
        if (t.has_pricing)
            *out = t.pricing;
        else
            rc = lg_default_pricing_locked(st, out, err);
    }
    lg_st_unlock(st);
    return rc;
}

/* ---- maintenance ----------------------------------------------------------------- */

static int lg_fsync_path(const char *path, bool dir, lg_err *err)
{
    int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lg_fail(err, "opening %s to fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc)
        return lg_fail(err, "fsync %s: %s", path, strerror(e));
    return 0;
}

static int lg_backup_locked(lg_store *st, const char *dest, lg_err *err)
{
    char tmp[PATH_MAX + 8], dir[PATH_MAX];
    if (!dest || !*dest || snprintf(tmp, sizeof tmp, "%s.tmp", dest) >= (int)sizeof tmp)
        return lg_fail(err, "expected a backup file path"), LG_STORE_INVALID;
    struct stat sb;
    if (stat(dest, &sb) == 0)
        return lg_fail(err, "backup target %s already exists", dest), LG_STORE_CONFLICT;
    unlink(tmp); /* a leftover of an interrupted backup */
    /* a copy of the database is as private as the database (0600) */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return lg_fail(err, "creating the backup file %s: %s", tmp, strerror(errno)), LG_STORE_ERROR;
    fchmod(fd, 0600);
    close(fd);
    sqlite3 *out = NULL;
    if (sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        lg_db_fail(err, out, "creating the backup file");
        lg_err_prefix(err, "%s", tmp);
        sqlite3_close(out);
        unlink(tmp);
        return LG_STORE_ERROR;
    }
    /* one step copies everything inside one read transaction: a consistent
     * snapshot, and the ledger writer is never blocked (WAL) */
    sqlite3_backup *b = sqlite3_backup_init(out, "main", st->db, "main");
    int rc = SQLITE_ERROR;
    if (b) {
        for (int tries = 0; tries < 500; tries++) {
            rc = sqlite3_backup_step(b, -1);
            if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
                break;
            sqlite3_sleep(10);
        }
        sqlite3_backup_finish(b);
    }
    if (rc != SQLITE_DONE) {
        lg_db_fail(err, out, "copying the database");
        sqlite3_close(out);
        unlink(tmp);
        return LG_STORE_ERROR;
    }
    if (sqlite3_close(out) != SQLITE_OK) {
        unlink(tmp);
        return lg_fail(err, "closing backup file %s", tmp), LG_STORE_ERROR;
    }
    snprintf(dir, sizeof dir, "%s", dest);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    if (lg_fsync_path(tmp, false, err)) {
        unlink(tmp);
        return LG_STORE_ERROR;
    }
    if (rename(tmp, dest) != 0) {
        lg_fail(err, "renaming %s to %s: %s", tmp, dest, strerror(errno));
        unlink(tmp);
        return LG_STORE_ERROR;
    }
    if (lg_fsync_path(dir, true, err))
        return LG_STORE_ERROR;
    return 0;
}

int lg_store_backup(lg_store *st, const char *dest_path, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_backup_locked(st, dest_path, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_integrity_locked(lg_store *st, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, "PRAGMA integrity_check(5)", &s, err);
    if (rc)
        return rc;
    char report[400] = "";
    size_t len = 0;
    bool ok = false;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        const char *line = (const char *)sqlite3_column_text(s, 0);
        if (line && !strcmp(line, "ok") && len == 0) {
            ok = true;
            break;
        }
        int w = snprintf(report + len, sizeof report - len, "%s%s", len ? "; " : "", line ? line : "?");
        if (w > 0)
            len = len + (size_t)w < sizeof report ? len + (size_t)w : sizeof report - 1;
    }
    if (!ok && step != SQLITE_ROW && step != SQLITE_DONE)
        rc = lg_st_fail(st, err, "running the integrity check");
    else if (!ok)
        rc = (lg_fail(err, "integrity check failed: %s", report), LG_STORE_ERROR);
    sqlite3_finalize(s);
    return rc;
}

int lg_store_integrity_check(lg_store *st, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_integrity_locked(st, err);
    lg_st_unlock(st);
    return rc;
}
