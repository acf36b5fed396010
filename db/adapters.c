/*
 * adapters.c — adapter rows and their versions.
 *
 * An adapter is (tenant, name), unique among live adapters, and points at
 * its current version. Every upload adds an adapter_versions row (1, 2, ...
 * per adapter) naming its content-addressed directory (adapter_files.h);
 * "replace" adds a version and moves the pointer in one transaction, so a
 * reader sees the old version or the new one, never a mix. Old versions stay
 * (history, and what old usage records' digests name); delete is a soft
 * delete. The files must be in place before the row is written: a row never
 * names a directory that does not exist.
 */
#include <stdio.h>
#include <stdlib.h>

#include "db/store_internal.h"

#define LG_ADAPTER_COLS                                                                                     \
    "a.id, a.tenant_id, t.name, a.name, a.created_at, a.updated_at, a.deleted_at, v.id, v.version, v.digest, " \
    "v.path, v.size_bytes, v.max_rank, v.target_modules, v.created_at"
#define LG_ADAPTER_FROM                                                                                      \
    " FROM adapters a JOIN tenants t ON t.id = a.tenant_id LEFT JOIN adapter_versions v ON v.id = " \
    "a.current_version_id "
#define LG_VERSION_COLS "id, version, digest, path, size_bytes, max_rank, target_modules, created_at"

static void lg_read_version(sqlite3_stmt *s, int c, lg_adapter_version *v)
{
    memset(v, 0, sizeof *v);
    v->id = lg_st_col_i64(s, c, 0);
    v->version = (int32_t)lg_st_col_i64(s, c + 1, 0);
    lg_st_col_text(s, c + 2, v->digest, sizeof v->digest);
    lg_st_col_text(s, c + 3, v->path, sizeof v->path);
    v->size_bytes = lg_st_col_i64(s, c + 4, 0);
    v->max_rank = (int32_t)lg_st_col_i64(s, c + 5, 0);
    lg_st_col_text(s, c + 6, v->target_modules, sizeof v->target_modules);
    v->created_at = lg_st_col_i64(s, c + 7, 0);
}

static void lg_read_adapter(sqlite3_stmt *s, lg_adapter_rec *a)
{
    memset(a, 0, sizeof *a);
    a->id = sqlite3_column_int64(s, 0);
    a->tenant_id = sqlite3_column_int64(s, 1);
    lg_st_col_text(s, 2, a->tenant_name, sizeof a->tenant_name);
    lg_st_col_text(s, 3, a->name, sizeof a->name);
    a->created_at = sqlite3_column_int64(s, 4);
    a->updated_at = sqlite3_column_int64(s, 5);
    a->deleted_at = lg_st_col_i64(s, 6, 0);
    lg_read_version(s, 7, &a->current);
}

static int lg_check_version(const lg_adapter_version *v, lg_err *err)
{
    if (!v)
        return lg_fail(err, "expected an adapter version"), LG_STORE_INVALID;
    size_t dl = strnlen(v->digest, sizeof v->digest);
    bool hex = dl == 64;
    for (size_t i = 0; hex && i < 64; i++)
        hex = (v->digest[i] >= '0' && v->digest[i] <= '9') || (v->digest[i] >= 'a' && v->digest[i] <= 'f');
    if (!hex)
        return lg_fail(err, "adapter digest must be 64 lower-case hex characters"), LG_STORE_INVALID;
    size_t pl = strnlen(v->path, sizeof v->path);
    if (pl == 0 || pl == sizeof v->path || v->path[0] == '/' || strstr(v->path, ".."))
        return lg_fail(err, "adapter path must be a relative path inside the data directory, got '%.100s'", v->path),
               LG_STORE_INVALID;
    if (v->size_bytes < 0 || v->max_rank < 1)
        return lg_fail(err, "adapter size must be >= 0 and max rank >= 1 (got %lld, %d)", (long long)v->size_bytes,
                       v->max_rank),
               LG_STORE_INVALID;
    size_t tl = strnlen(v->target_modules, sizeof v->target_modules);
    if (tl == 0 || tl == sizeof v->target_modules)
        return lg_fail(err, "adapter target modules must be 1-%zu characters", sizeof v->target_modules - 1),
               LG_STORE_INVALID;
    for (size_t i = 0; i < tl; i++) {
        char c = v->target_modules[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ','))
            return lg_fail(err, "adapter target modules must be a comma-separated list of module names, got '%s'",
                           v->target_modules),
                   LG_STORE_INVALID;
    }
    return 0;
}

/* The live adapter's id, or NOT_FOUND. */
static int lg_adapter_id(lg_store *st, int64_t tenant_id, const char *tenant, const char *name, int64_t *id,
                         lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st, "SELECT id FROM adapters WHERE tenant_id = ? AND name = ? AND deleted_at IS NULL", &s,
                           err);
    if (rc)
        return rc;
    sqlite3_bind_int64(s, 1, tenant_id);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
        *id = sqlite3_column_int64(s, 0);
    else if (step == SQLITE_DONE)
        rc = (lg_fail(err, "tenant '%s' has no adapter named '%s'", tenant, name), LG_STORE_NOT_FOUND);
    else
        rc = lg_st_fail(st, err, "looking up an adapter");
    sqlite3_finalize(s);
    return rc;
}

/* Adds version (max + 1) to adapter `id` and makes it current. */
static int lg_add_version(lg_store *st, int64_t adapter_id, const lg_adapter_version *v, int64_t now, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st,
                           "INSERT INTO adapter_versions (adapter_id, version, digest, path, size_bytes, max_rank, "
                           "target_modules, created_at) VALUES (?1, (SELECT coalesce(max(version), 0) + 1 FROM "
                           "adapter_versions WHERE adapter_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
                           &s, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(s, 1, adapter_id);
    sqlite3_bind_text(s, 2, v->digest, 64, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, v->path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, v->size_bytes);
    sqlite3_bind_int(s, 5, v->max_rank);
    sqlite3_bind_text(s, 6, v->target_modules, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, now);
    rc = sqlite3_step(s) == SQLITE_DONE ? 0 : lg_st_fail(st, err, "inserting an adapter version");
    sqlite3_finalize(s);
    if (rc)
        return rc;
    int64_t vid = sqlite3_last_insert_rowid(st->db);
    if ((rc = lg_st_prepare(st, "UPDATE adapters SET current_version_id = ?, updated_at = ? WHERE id = ?", &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, vid);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_int64(s, 3, adapter_id);
    rc = sqlite3_step(s) == SQLITE_DONE ? 0 : lg_st_fail(st, err, "making an adapter version current");
    sqlite3_finalize(s);
    return rc;
}

static int lg_adapter_get_locked(lg_store *st, const char *tenant, const char *name, lg_adapter_rec *out, lg_err *err)
{
    int64_t tenant_id, id;
    int rc;
    if ((rc = lg_st_tenant_id(st, tenant, &tenant_id, err)) ||
        (rc = lg_adapter_id(st, tenant_id, tenant, name ? name : "", &id, err)))
        return rc;
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st, "SELECT " LG_ADAPTER_COLS LG_ADAPTER_FROM "WHERE a.id = ?", &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, id);
    if (sqlite3_step(s) == SQLITE_ROW)
        lg_read_adapter(s, out);
    else
        rc = lg_st_fail(st, err, "reading an adapter");
    sqlite3_finalize(s);
    return rc;
}

/* create (replace = false) or replace (true) */
static int lg_adapter_put_locked(lg_store *st, const char *tenant, const char *name, const lg_adapter_version *v,
                                 bool replace, lg_adapter_rec *out, lg_err *err)
{
    int rc;
    if ((rc = lg_st_check_writable(st, replace ? "replacing an adapter" : "creating an adapter", err)) ||
        (rc = lg_store_check_adapter_name(name, err)) || (rc = lg_check_version(v, err)))
        return rc;
    if ((rc = lg_st_begin(st, err)))
        return rc;
    int64_t tenant_id, id = 0, now = lg_db_now_ms();
    if ((rc = lg_st_tenant_id(st, tenant, &tenant_id, err)))
        goto fail;
    rc = lg_adapter_id(st, tenant_id, tenant, name, &id, err);
    if (replace && rc)
        goto fail;
    if (!replace) {
        if (rc == 0) {
            rc = (lg_fail(err, "tenant '%s' already has an adapter named '%s'", tenant, name), LG_STORE_CONFLICT);
            goto fail;
        }
        if (rc != LG_STORE_NOT_FOUND)
            goto fail;
        sqlite3_stmt *s;
        if ((rc = lg_st_prepare(st, "INSERT INTO adapters (tenant_id, name, created_at, updated_at) VALUES (?, ?, ?, ?)",
                                &s, err)))
            goto fail;
        sqlite3_bind_int64(s, 1, tenant_id);
        sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, now);
        sqlite3_bind_int64(s, 4, now);
        rc = sqlite3_step(s) == SQLITE_DONE ? 0 : lg_st_fail(st, err, "inserting an adapter");
        sqlite3_finalize(s);
        if (rc)
            goto fail;
        id = sqlite3_last_insert_rowid(st->db);
    }
    if ((rc = lg_add_version(st, id, v, now, err)) || (rc = lg_st_commit(st, err)))
        goto fail;
    lg_adapter_rec tmp;
    return lg_adapter_get_locked(st, tenant, name, out ? out : &tmp, err);
fail:
    lg_st_rollback(st);
    return rc;
}

int lg_store_adapter_create(lg_store *st, const char *tenant, const char *name, const lg_adapter_version *v,
                            lg_adapter_rec *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_adapter_put_locked(st, tenant, name, v, false, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_adapter_replace(lg_store *st, const char *tenant, const char *name, const lg_adapter_version *v,
                             lg_adapter_rec *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_adapter_put_locked(st, tenant, name, v, true, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_adapter_get(lg_store *st, const char *tenant, const char *name, lg_adapter_rec *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_adapter_get_locked(st, tenant, name, out, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_adapter_list_locked(lg_store *st, const char *tenant, lg_adapter_rec **out, int *n, lg_err *err)
{
    int64_t tenant_id = 0;
    int rc;
    if (tenant && (rc = lg_st_tenant_id(st, tenant, &tenant_id, err)))
        return rc;
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st,
                            "SELECT " LG_ADAPTER_COLS LG_ADAPTER_FROM
                            "WHERE a.deleted_at IS NULL AND t.deleted_at IS NULL AND (?1 = 0 OR a.tenant_id = ?1) "
                            "ORDER BY t.name, a.name",
                            &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, tenant_id);
    lg_adapter_rec *arr = NULL;
    int cap = 0, cnt = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (lg_st_grow((void **)&arr, &cap, cnt, sizeof *arr, err)) {
            step = SQLITE_NOMEM;
            break;
        }
        lg_read_adapter(s, &arr[cnt++]);
    }
    if (step != SQLITE_DONE) {
        if (step != SQLITE_NOMEM)
            lg_st_fail(st, err, "listing adapters");
        sqlite3_finalize(s);
        free(arr);
        return LG_STORE_ERROR;
    }
    sqlite3_finalize(s);
    *out = arr;
    *n = cnt;
    return 0;
}

int lg_store_adapter_list(lg_store *st, const char *tenant, lg_adapter_rec **out, int *n, lg_err *err)
{
    *out = NULL;
    *n = 0;
    lg_st_lock(st);
    int rc = lg_adapter_list_locked(st, tenant, out, n, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_versions_locked(lg_store *st, const char *tenant, const char *name, lg_adapter_version **out, int *n,
                              lg_err *err)
{
    int64_t tenant_id, id;
    int rc;
    if ((rc = lg_st_tenant_id(st, tenant, &tenant_id, err)) ||
        (rc = lg_adapter_id(st, tenant_id, tenant, name ? name : "", &id, err)))
        return rc;
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st, "SELECT " LG_VERSION_COLS " FROM adapter_versions WHERE adapter_id = ? ORDER BY version",
                            &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, id);
    lg_adapter_version *arr = NULL;
    int cap = 0, cnt = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (lg_st_grow((void **)&arr, &cap, cnt, sizeof *arr, err)) {
            step = SQLITE_NOMEM;
            break;
        }
        lg_read_version(s, 0, &arr[cnt++]);
    }
    if (step != SQLITE_DONE) {
        if (step != SQLITE_NOMEM)
            lg_st_fail(st, err, "listing adapter versions");
        sqlite3_finalize(s);
        free(arr);
        return LG_STORE_ERROR;
    }
    sqlite3_finalize(s);
    *out = arr;
    *n = cnt;
    return 0;
}

int lg_store_adapter_versions(lg_store *st, const char *tenant, const char *name, lg_adapter_version **out, int *n,
                              lg_err *err)
{
    *out = NULL;
    *n = 0;
    lg_st_lock(st);
    int rc = lg_versions_locked(st, tenant, name, out, n, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_adapter_delete_locked(lg_store *st, const char *tenant, const char *name, lg_err *err)
{
    int64_t tenant_id, id;
    int rc;
    if ((rc = lg_st_check_writable(st, "deleting an adapter", err)) || (rc = lg_st_tenant_id(st, tenant, &tenant_id, err)) ||
        (rc = lg_adapter_id(st, tenant_id, tenant, name ? name : "", &id, err)))
        return rc;
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st, "UPDATE adapters SET deleted_at = ? WHERE id = ?", &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, lg_db_now_ms());
    sqlite3_bind_int64(s, 2, id);
    rc = sqlite3_step(s) == SQLITE_DONE ? 0 : lg_st_fail(st, err, "deleting an adapter");
    sqlite3_finalize(s);
    return rc;
}

int lg_store_adapter_delete(lg_store *st, const char *tenant, const char *name, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_adapter_delete_locked(st, tenant, name, err);
    lg_st_unlock(st);
    return rc;
}
