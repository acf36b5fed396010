/*
 * responses.h — stored /v1/responses (migration 0004): put, get and delete
 * a tenant's response by id, and the removal of expired ones.
 *
 * Every function names the tenant: a row of another tenant, or one past its
 * expires_at, is LG_STORE_NOT_FOUND exactly as a missing one. Writes need
 * the writer handle (they wait for fsync: worker threads only); gets work
 * on a reader (lg_store_open_reader). Times are Unix milliseconds.
 */
#ifndef LG_DB_RESPONSES_H
#define LG_DB_RESPONSES_H

#include <stdint.h>

#include "db/store.h"

/* Stores (or replaces) response `id` of tenant_id, and removes the rows
 * expired at now_ms, in one transaction. */
int lg_store_response_put(lg_store *st, const char *id, int64_t tenant_id, int64_t created_at, int64_t expires_at,
                          const char *response_json, const char *conversation_json, int64_t now_ms, lg_err *err);
/* *response_json and *conversation_json (either pointer may be NULL: not
 * wanted) are malloc'd. */
int lg_store_response_get(lg_store *st, const char *id, int64_t tenant_id, int64_t now_ms, char **response_json,
                          char **conversation_json, lg_err *err);
/* LG_STORE_NOT_FOUND when there was none (or it had expired). */
int lg_store_response_delete(lg_store *st, const char *id, int64_t tenant_id, int64_t now_ms, lg_err *err);

#endif
