/*
 * job.h — blocking work of the management APIs (routes_admin.c,
 * adapter_upload.c): a job runs work(j) on the worker pool (database
 * writes, file checks), then answers on the request's loop thread:
 * j->body with j->status when status < 400 (body may be NULL for an empty
 * object), else an OpenAI error (status, code, param, msg). Embed lg_job as
 * the first member of a larger struct that also holds what work needs;
 * free_fn (optional, default free) frees that.
 *
 * Also here: the JSON body of a management route, which is what most jobs
 * are made from.
 */
#ifndef LG_GW_JOB_H
#define LG_GW_JOB_H

#include <jansson.h>

#include "gateway/http/request.h"

typedef struct lg_job lg_job;
struct lg_job {
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
/* [loop] Answers r from j (when the client is still there) and frees j:
 * the done half of lg_job_run, for jobs that run in several steps. */
void lg_job_done(lg_request *r, lg_job *j);

/* JSON body of a management route: application/json, or curl -d's default
 * application/x-www-form-urlencoded when the body is JSON. 415 otherwise;
 * 400 for bad JSON. NULL after answering. [loop] */
json_t *lg_admin_json_body(lg_request *r);

#endif
