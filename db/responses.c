/*
 * responses.c — see responses.h. One prepared statement per call (these
 * run a few times per response, off the loop threads).
 */
#include "db/responses.h"

#include <stdlib.h>
#include <string.h>

#include "db/store_internal.h"

int lg_store_response_put(lg_store *st, const char *id, int64_t tenant_id, int64_t created_at, int64_t expires_at,
                          const char *response_json, const char *conversation_json, int64_t now_ms, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_st_check_writable(st, "store response", err);
    sqlite3_stmt *s = NULL;
    if (rc == 0)
        rc = lg_st_begin(st, err);
    if (rc != 0) {
        lg_st_unlock(st);
        return rc;
    }
    if ((rc = lg_st_prepare(st, "DELETE FROM responses WHERE expires_at <= ?", &s, err)) == 0) {
        sqlite3_bind_int64(s, 1, now_ms);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = lg_st_fail(st, err, "expire responses");
        sqlite3_finalize(s);
    }
    if (rc == 0 && (rc = lg_st_prepare(st,
                                       "INSERT OR REPLACE INTO responses (id, tenant_id, created_at, expires_at, "
                                       "response, conversation) VALUES (?, ?, ?, ?, ?, ?)",
                                       &s, err)) == 0) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, tenant_id);
        sqlite3_bind_int64(s, 3, created_at);
        sqlite3_bind_int64(s, 4, expires_at);
        sqlite3_bind_text(s, 5, response_json, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, conversation_json, -1, SQLITE_STATIC);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = lg_st_fail(st, err, "store response");
        sqlite3_finalize(s);
    }
    if (rc == 0)
        rc = lg_st_commit(st, err);
    else
        lg_st_rollback(st);
    lg_st_unlock(st);
    return rc;
}

static char *col_dup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return strdup(t ? (const char *)t : "");
}

int lg_store_response_get(lg_store *st, const char *id, int64_t tenant_id, int64_t now_ms, char **response_json,
                          char **conversation_json, lg_err *err)
{
    if (response_json)
        *response_json = NULL;
    if (conversation_json)
        *conversation_json = NULL;
    lg_st_lock(st);
    sqlite3_stmt *s = NULL;
    int rc = lg_st_prepare(st,
                           "SELECT response, conversation FROM responses WHERE id = ? AND tenant_id = ? AND "
                           "expires_at > ?",
                           &s, err);
    if (rc == 0) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, tenant_id);
        sqlite3_bind_int64(s, 3, now_ms);
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) {
            if (response_json && !(*response_json = col_dup(s, 0)))
                rc = lg_fail(err, "out of memory");
            if (rc == 0 && conversation_json && !(*conversation_json = col_dup(s, 1)))
                rc = lg_fail(err, "out of memory");
        } else if (step == SQLITE_DONE) {
            lg_fail(err, "no response %s", id);
            rc = LG_STORE_NOT_FOUND;
        } else {
            rc = lg_st_fail(st, err, "get response");
        }
        sqlite3_finalize(s);
    }
    lg_st_unlock(st);
    if (rc != 0) {
        if (response_json) {
            free(*response_json);
            *response_json = NULL;
        }
        if (conversation_json) {
            free(*conversation_json);
            *conversation_json = NULL;
        }
    }
    return rc;
}

int lg_store_response_delete(lg_store *st, const char *id, int64_t tenant_id, int64_t now_ms, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_st_check_writable(st, "delete response", err);
    sqlite3_stmt *s = NULL;
    if (rc == 0 && (rc = lg_st_prepare(st, "DELETE FROM responses WHERE id = ? AND tenant_id = ? AND expires_at > ?",
                                       &s, err)) == 0) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, tenant_id);
        sqlite3_bind_int64(s, 3, now_ms);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = lg_st_fail(st, err, "delete response");
        else if (sqlite3_changes(st->db) == 0)
            rc = (lg_fail(err, "no response %s", id), LG_STORE_NOT_FOUND);
        sqlite3_finalize(s);
    }
    lg_st_unlock(st);
    return rc;
}
