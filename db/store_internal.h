/*
 * store_internal.h — what the db/ files share about an lg_store handle:
 * its struct and small SQLite helpers. Not for use outside db/.
 *
 * Locking: every public lg_store_* function takes st->mu for its whole
 * duration (lg_st_lock/lg_st_unlock) and calls only unlocked helpers.
 */
#ifndef LG_STORE_INTERNAL_H
#define LG_STORE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>

#include "db/schema.h"
#include "db/store.h"

struct lg_store {
    sqlite3 *db;
    pthread_mutex_t mu;
    bool read_only;
    char data_dir[PATH_MAX];
};

static inline void lg_st_lock(lg_store *st) { pthread_mutex_lock(&st->mu); }
static inline void lg_st_unlock(lg_store *st) { pthread_mutex_unlock(&st->mu); }

/* LG_STORE_ERROR with the SQLite message: "<what>: <message> (<code>)". */
int lg_st_fail(lg_store *st, lg_err *err, const char *what);
/* LG_STORE_ERROR when st is a reader. */
int lg_st_check_writable(lg_store *st, const char *what, lg_err *err);

int lg_st_prepare(lg_store *st, const char *sql, sqlite3_stmt **out, lg_err *err);
/* BEGIN IMMEDIATE / COMMIT; rollback never fails (it is the error path). */
int lg_st_begin(lg_store *st, lg_err *err);
int lg_st_commit(lg_store *st, lg_err *err);
void lg_st_rollback(lg_store *st);

/* Text column into a fixed buffer (NULL -> ""), truncating. */
void lg_st_col_text(sqlite3_stmt *s, int col, char *buf, size_t size);
/* Integer column, or null_value when NULL. */
int64_t lg_st_col_i64(sqlite3_stmt *s, int col, int64_t null_value);
/* Binds v, or NULL when v == null_value. */
void lg_st_bind_i64(sqlite3_stmt *s, int idx, int64_t v, int64_t null_value);
/* Binds text, or NULL when text is "" and empty_is_null. */
void lg_st_bind_text(sqlite3_stmt *s, int idx, const char *text, bool empty_is_null);

/* The id of the live tenant `name`: LG_STORE_NOT_FOUND if none. */
int lg_st_tenant_id(lg_store *st, const char *name, int64_t *id, lg_err *err);

/* Grows a malloc'd array by one element (doubling); NULL-safe. */
int lg_st_grow(void **arr, int *cap, int n, size_t elem, lg_err *err);

#endif
