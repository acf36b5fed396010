/*
 * workers.h — a small pool of threads for blocking work that loop threads
 * must not do (database writes, file validation, writing uploads). A FIFO
 * under one mutex: the expected load is tens of jobs per second, each
 * milliseconds long, so contention is not a concern. Route code reaches it
 * through lg_request_defer (request.h), which brings the completion back
 * to the request's loop thread.
 */
#ifndef LG_GW_WORKERS_H
#define LG_GW_WORKERS_H

#include "engine/base/common.h"

typedef struct lg_workers lg_workers;

int lg_workers_create(int n_threads, lg_workers **out, lg_err *err);
/* Queues fn(arg) [any thread]. -1 once lg_workers_stop has begun. */
int lg_workers_submit(lg_workers *w, void (*fn)(void *arg), void *arg);
/* Runs what is queued, then joins the threads. Idempotent. */
void lg_workers_stop(lg_workers *w);
void lg_workers_free(lg_workers *w); /* stops first; NULL: no-op */

#endif
