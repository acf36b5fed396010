/*
 * adapter_upload.h — adapter management shared by the tenant adapter API
 * (routes_adapters.c, /v1/adapters) and the operator API
 * (routes_admin.c, /admin/v1/tenants/{t}/adapters): upload (multipart),
 * import from a server directory, list, get, delete. What it reads and
 * writes is in lg_adapter_admin below; its database writes are jobs
 * (job.h) on the worker pool.
 *
 * An upload, and why it is shaped so:
 *
 *   loop thread                         worker pool
 *   copy the next <= 4 MiB of the  -->  feed the multipart parser: `name`,
 *   body into the job                   `config` (and an optional chat
 *                                       template) kept in memory,
 *   (done: next slice, or answer)  <--  `weights` streamed into
 *                                       DATA_DIR/tmp/upload-XXXXXX/
 *                                       adapter_model.safetensors
 *                                       ... last slice: commit (below)
 *
 * h2o 2.2 hands the handler a fully buffered body, but frees it when the
 * client goes away (for HTTP/2 even before the request's pool), so a worker
 * never reads the body itself: the loop thread, which owns it, copies one
 * slice at a time into the job and checks that the client is still there
 * before each. A client that leaves stops the upload at the next slice and
 * its temporary files are removed; a body cut short never reaches the
 * handler at all (h2o waits for all of it).
 *
 * Commit (worker, in this order; nothing is visible before step 4):
 *   1. lg_tenant_adapters_inspect on the temporary directory: the same checks as
 *      `--lora` (config JSON, tensor names and shapes, targets, rank against
 *      --max-lora-rank); a failure is a 400 naming the problem;
 *   2. lg_store_put_adapter_files_from_tmp: DATA_DIR/adapters/<digest>
 *      (fsync + rename; the weights file is renamed, never copied);
 *   3. under the store lock: lg_store_adapter_create, or _replace when the
 *      tenant already has that name (a new version, atomically);
 *   4. lg_tenant_adapters_install: the engine and the registry switch to it
 *      (still under the store lock, so two replaces of one name install in
 *      commit order). Should the engine refuse it, the store change is
 *      undone (create: deleted; replace: the previous content is made
 *      current again as a new version) and the answer is a 500.
 * On any failure the temporary directory is removed. Not yet: a content
 * directory put in step 2 whose store step then failed stays (no garbage
 * collection of unreferenced content, see db/adapter_files.h).
 */
#ifndef LG_GW_ADAPTER_UPLOAD_H
#define LG_GW_ADAPTER_UPLOAD_H

#include <jansson.h>
#include <stddef.h>

#include "gateway/http/request.h"
#include "gateway/store_writer.h"
#include "gateway/tenant_adapters.h"
#include "gateway/tenants.h"

/* What adapter management reads and writes; the functions below copy it
 * into their jobs. */
typedef struct lg_adapter_admin {
    lg_store_writer *store;       /* adapter rows (worker pool) */
    lg_tenant_adapters *adapters; /* the in-memory registry and the engine */
    const char *data_dir;         /* DATA_DIR/tmp (uploads), DATA_DIR/adapters (content) */
    const char *model_id;         /* the base model's id: no adapter may take it */
    size_t max_upload;            /* bytes, --max-upload-mb: the largest weights file */
} lg_adapter_admin;

/* ---- adapters of a tenant --------------------------------------------------
 * t: the tenant the route acts for (the principal's, or the operator's {t}).
 * Every function answers r. */

/* {"id","object":"adapter","name","version","digest","rank","target_modules",
 *  "size_bytes","created_at","updated_at","owned_by"} */
json_t *lg_adapter_json(const char *name, const lg_adapter_version *v, int64_t created_at_ms, const char *owner);

/* POST multipart/form-data: fields name, config, weights, and optionally
 * chat_template (chat_template.jinja) or tokenizer_config (its
 * "chat_template"; adapter_template.h). 201 (new) or 200 (replaced). */
int lg_adapters_upload(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t);
/* {"name","path"}: a PEFT directory on the server's disk (copied with its
 * chat_template.jinja / tokenizer_config.json if any, then as an upload). */
int lg_adapters_import(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t);
int lg_adapters_list(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t);
int lg_adapters_get(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t, const char *name);
int lg_adapters_delete(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t, const char *name);

#endif
