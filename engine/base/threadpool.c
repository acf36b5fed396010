/*
 * threadpool.c — see threadpool.h. Chunks are claimed from an atomic counter
 * (dynamic scheduling), so a slow thread never holds up the others for long.
 */
#include "engine/base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct lg_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;         /* bumped for each parallel-for */
    atomic_int stop;
    /* current job */
    lg_task_fn fn;
    void *arg;
    int64_t n, chunk;
    atomic_llong next;       /* next chunk start */
    atomic_int active;       /* workers still inside the job */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

typedef struct {
    lg_threadpool *tp;
    int tid;
} worker_arg;

static void run_chunks(lg_threadpool *tp, int tid)
{
    for (;;) {
        int64_t i0 = atomic_fetch_add(&tp->next, tp->chunk);
        if (i0 >= tp->n)
            break;
        int64_t i1 = i0 + tp->chunk;
        if (i1 > tp->n)
            i1 = tp->n;
        tp->fn(tp->arg, tid, i0, i1);
    }
}

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    lg_threadpool *tp = wa->tp;
    int tid = wa->tid;
    free(wa);
    /* gen is 0 when workers are created; reading it here instead could miss
     * a job posted before this thread first ran */
    unsigned seen = 0;
    for (;;) {
        /* spin a while, then sleep */
        int spins = 0;
        while (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen && !atomic_load(&tp->stop)) {
            ++spins;
            if (spins < 4000) {
                cpu_relax();
                continue;
            }
            if (spins < 4100) { /* let a thread we may be starving run */
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop))
            return NULL;
        seen = atomic_load(&tp->gen);
        run_chunks(tp, tid);
        atomic_fetch_sub_explicit(&tp->active, 1, memory_order_release);
    }
}

lg_threadpool *lg_threadpool_new(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    lg_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp)
        return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->tp = tp;
        wa->tid = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i;
            break;
        }
    }
    return tp;
}

void lg_threadpool_free(lg_threadpool *tp)
{
    if (!tp)
        return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++)
        pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int lg_threadpool_size(const lg_threadpool *tp) { return tp ? tp->n_threads : 1; }

void lg_threadpool_for(lg_threadpool *tp, int64_t n, int64_t grain, lg_task_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int nt = tp ? tp->n_threads : 1;
    if (nt == 1 || n <= grain) {
        fn(arg, 0, 0, n);
        return;
    }
    /* about 16 chunks per thread, never below grain: a decode step's ops are
     * tens of microseconds, and the thread that finishes last holds up the
     * next op by what is left of its chunk */
    int64_t chunk = (n + 16 * nt - 1) / (16 * nt);
    if (chunk < grain)
        chunk = grain;
    tp->fn = fn;
    tp->arg = arg;
    tp->n = n;
    tp->chunk = chunk;
    atomic_store(&tp->next, 0);
    atomic_store(&tp->active, nt - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    run_chunks(tp, 0);
    /* wait for the workers; yield after a short spin in case a worker was
     * preempted (an oversubscribed machine would otherwise burn our slice) */
    for (int spins = 0; atomic_load_explicit(&tp->active, memory_order_acquire) > 0; spins++) {
        if (spins < 2000)
            cpu_relax();
        else
            sched_yield();
    }
}
