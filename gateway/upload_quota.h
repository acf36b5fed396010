/*
 * upload_quota.h — how much adapter uploading a tenant may have in flight,
 * and the free disk the data directory keeps.
 *
 * An upload's body is buffered (past 32 MiB in an unlinked file under
 * DATA_DIR/tmp) and its weights are written out again while the multipart
 * body is parsed, on the same disk as the usage ledger; a full ledger disk
 * answers 503 to every tenant. So the upload routes admit a body from its
 * head (router.h lg_body_admit_fn, run by the connection guard before a
 * byte of it is read, once the key is known) only while
 *  - the tenant has fewer than max_per_tenant uploads in flight (429),
 *  - the bytes it has in flight stay within bytes_per_tenant, a body of
 *    unknown length (chunked) counting as max_body (429),
 *  - the disk keeps min_free bytes after twice this body and twice every
 *    reservation in flight (507, "insufficient_storage").
 * The operator's uploads count as one more tenant (id 0). A reservation is
 * released when its request ends, however it ends (conn.c / request.c).
 *
 * Threads: admit and release run on loop threads; one mutex, held for a
 * hash lookup and a statvfs(2) (microseconds).
 */
#ifndef LG_GW_UPLOAD_QUOTA_H
#define LG_GW_UPLOAD_QUOTA_H

#include <stdint.h>

#include "engine/base/common.h"
#include "gateway/http/router.h"

typedef struct lg_upload_quota lg_upload_quota;

int lg_upload_quota_create(const char *data_dir, int max_per_tenant, uint64_t bytes_per_tenant, uint64_t min_free,
                           uint64_t max_body, lg_upload_quota **out, lg_err *err);
void lg_upload_quota_free(lg_upload_quota *q); /* NULL: no-op; no reservation may be held */

/* lg_body_admit_fn (user: the quota). who: lg_principal bytes for a tenant
 * key (tenant_auth.h), or the operator key's pointer. */
int lg_upload_quota_admit(const lg_auth_result *who, int64_t declared, void *q, void **hold, lg_auth_result *out);
void lg_upload_quota_release(void *hold);

/* Reservations held now (tests, metrics). */
int lg_upload_quota_in_flight(lg_upload_quota *q, uint64_t *bytes);

#endif
