/*
 * threadpool.h — a fork-join pool for the CPU backend's data-parallel ops.
 *
 * Workload: hundreds of small ops per decode step (one per layer and kind),
 * each split into a few ranges. Waking sleeping threads per op would cost
 * more than the op, so workers spin briefly on a generation counter before
 * they sleep; the calling thread always takes a share of the work.
 *
 * lg_threadpool_for splits [0, n) into chunks of at least `grain` indices
 * and calls fn(arg, tid, i0, i1) on each, tid in [0, n_threads). Returns
 * when all chunks are done. Not reentrant: one parallel-for at a time.
 */
#ifndef LG_THREADPOOL_H
#define LG_THREADPOOL_H

#include <stdint.h>

typedef struct lg_threadpool lg_threadpool;
typedef void (*lg_task_fn)(void *arg, int tid, int64_t i0, int64_t i1);

lg_threadpool *lg_threadpool_new(int n_threads); /* n_threads includes the caller */
void lg_threadpool_free(lg_threadpool *tp);      /* NULL is a no-op */
int lg_threadpool_size(const lg_threadpool *tp);
void lg_threadpool_for(lg_threadpool *tp, int64_t n, int64_t grain, lg_task_fn fn, void *arg);

#endif
