/*
 * job.c — see job.h.
 */
#include "gateway/job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "db/store.h"
#include "gateway/http/http_util.h"

int lg_job_fail(lg_job *j, int status, const char *code, const char *param, const char *fmt, ...)
{
    j->status = status;
    j->code = code;
    j->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->msg, sizeof j->msg, fmt, ap);
    va_end(ap);
    json_decref(j->body);
    j->body = NULL;
    return -1;
}

int lg_job_fail_store(lg_job *j, int st, const char *not_found_code, const char *conflict_code, const char *param,
                      const lg_err *err)
{
    switch (st) {
    case LG_STORE_NOT_FOUND: return lg_job_fail(j, 404, not_found_code, param, "%s", err->msg);
    case LG_STORE_CONFLICT: return lg_job_fail(j, 409, conflict_code, param, "%s", err->msg);
    case LG_STORE_INVALID: return lg_job_fail(j, 400, "invalid_value", param, "%s", err->msg);
    default: return lg_job_fail(j, 500, "store_error", NULL, "The store failed: %s", err->msg);
    }
}

static void job_free(lg_job *j)
{
    json_decref(j->body);
    if (j->free_fn)
        j->free_fn(j);
    else
        free(j);
}

static void job_work(void *arg)
{
    lg_job *j = arg;
    j->work(j);
}

void lg_job_done(lg_request *r, lg_job *j)
{
    if (lg_request_h2o(r)) {
        if (j->status >= 400) {
            lg_respond_error_ex(r, j->status, NULL, j->code, j->param, j->status == 503 ? 1 : 0, j->msg);
        } else {
            json_t *b = j->body ? j->body : json_object();
            j->body = NULL;
            lg_respond_json(r, j->status ? j->status : 200, b);
        }
    }
    job_free(j);
}

static void job_done(lg_request *r, void *arg) { lg_job_done(r, arg); }

int lg_job_run(lg_request *r, lg_job *j)
{
    if (lg_request_defer(r, job_work, job_done, j) != 0) {
        job_free(j);
        return lg_respond_unavailable(r, 1, "The server is shutting down."), 0;
    }
    return 0;
}

json_t *lg_admin_json_body(lg_request *r)
{
    size_t len = 0;
    lg_request_body(r, &len);
    if (len > 0) {
        size_t cl;
        const char *ct = lg_request_header(r, "content-type", &cl);
        if (ct && !lg_media_type_is(ct, cl, "application/json") &&
            !lg_media_type_is(ct, cl, "application/x-www-form-urlencoded")) {
            lg_respond_error(r, 415, "unsupported_media_type", NULL,
                             "Content-Type '%.*s' is not supported here; send application/json.",
                             (int)(cl > 100 ? 100 : cl), ct);
            return NULL;
        }
    }
    return lg_request_json(r);
}
