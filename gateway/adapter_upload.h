/*
 * adapter_upload.h — adapter management shared by the tenant adapter API
 * (routes_adapters.c, /v1/adapters) and the operator API
 * (routes_admin.c, /admin/v1/tenants/{t}/adapters): upload (multipart),
 * import from a server directory, list, get, delete; and the small
 * "blocking job" helper both route families use for their database writes.
 *
 * An upload, and why it is shaped so:
 *
 *   loop thread                         worker pool
 *   copy the next <= 4 MiB of the  -->  feed the multipart parser: `name`
 *   body into the job                   and `config` kept in memory,
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
 *   1. lg_app_adapter_inspect on the temporary directory: the same checks as
 *      `--lora` (config JSON, tensor names and shapes, targets, rank against
 *      --max-lora-rank); a failure is a 400 naming the problem;
 *   2. lg_store_put_adapter_files_from_tmp: DATA_DIR/adapters/<digest>
 *      (fsync + rename; the weights file is renamed, never copied);
 *   3. under the store lock: lg_store_adapter_create, or _replace when the
 *      tenant already has that name (a new version, atomically);
 *   4. lg_app_adapter_install: the engine and the registry switch to it
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

#include "gateway/app.h"
#include "gateway/http/request.h"

/* ---- blocking jobs --------------------------------------------------------
 * A job runs work(j) on the worker pool, then answers on the loop thread:
 * j->body with j->status when status < 400 (body may be NULL for an empty
 * object), else an OpenAI error (status, code, param, msg). Embed lg_job as
 * the first member of a larger struct; free_fn (optional) frees that. */
typedef struct lg_job lg_job;
struct lg_job {
    lg_app *app;
    void (*work)(lg_job *j);
    void (*free_fn)(lg_job *j);
    int status;
    const char *code;  /* static strings */
    const char *param;
    char msg[600];
    json_t *body;
};

/* Queues j; answers 503 (and frees j) when the pool is stopped. [loop] */
int lg_job_run(lg_request *r, lg_job *j);
/* Sets an error answer on j; returns -1. [any] */
int lg_job_fail(lg_job *j, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An lg_store status (LG_STORE_NOT_FOUND ...) as an answer: 404 with
 * not_found_code, 409 with conflict_code, 400 invalid, else 500. */
int lg_job_fail_store(lg_job *j, int store_status, const char *not_found_code, const char *conflict_code,
                      const char *param, const lg_err *err);

/* ---- adapters of a tenant --------------------------------------------------
 * t: the tenant the route acts for (the principal's, or the operator's {t}).
 * Every function answers r. */

/* {"id","object":"adapter","name","version","digest","rank","target_modules",
 *  "size_bytes","created_at","updated_at","owned_by"} */
json_t *lg_adapter_json(const char *name, const lg_adapter_version *v, int64_t created_at_ms, const char *owner);

/* POST multipart/form-data: fields name, config, weights. 201 (new) or 200 (replaced). */
int lg_adapters_upload(lg_request *r, lg_app *app, lg_app_tenant *t);
/* {"name","path"}: a PEFT directory on the server's disk (copied, then as an upload). */
int lg_adapters_import(lg_request *r, lg_app *app, lg_app_tenant *t);
int lg_adapters_list(lg_request *r, lg_app *app, lg_app_tenant *t);
int lg_adapters_get(lg_request *r, lg_app *app, lg_app_tenant *t, const char *name);
int lg_adapters_delete(lg_request *r, lg_app *app, lg_app_tenant *t, const char *name);

/* JSON body of an admin route: application/json, or curl -d's default
 * application/x-www-form-urlencoded when the body is JSON. 415 otherwise;
 * 400 for bad JSON. NULL after answering. [loop] */
json_t *lg_admin_json_body(lg_request *r);

#endif
