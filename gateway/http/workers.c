/*
 * workers.c — see workers.h.
 */
#include "gateway/http/workers.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct job {
    void (*fn)(void *);
    void *arg;
    struct job *next;
} job;

struct lg_workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    bool stopping, joined;
    int n;
    pthread_t *tids;
};

static void *worker_main(void *p)
{
    lg_workers *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        job *j = w->head;
        if (!j)
            break; /* stopping and nothing left */
        w->head = j->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int lg_workers_create(int n_threads, lg_workers **out, lg_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return lg_fail(err, "worker threads: %d (expected 1..256)", n_threads);
    lg_workers *w = calloc(1, sizeof *w);
    if (!w || !(w->tids = calloc(n_threads, sizeof *w->tids))) {
        free(w);
        return lg_fail(err, "out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* workers take no asynchronous signals: the application's thread does */
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV); /* faults stay deliverable (see server.c) */
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGABRT);
    sigdelset(&all, SIGTRAP);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < n_threads; i++) {
        if (pthread_create(&w->tids[i], NULL, worker_main, w) != 0) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            lg_workers_free(w);
            return lg_fail(err, "cannot start worker thread %d", i);
        }
        w->n++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = w;
    return 0;
}

int lg_workers_submit(lg_workers *w, void (*fn)(void *), void *arg)
{
    job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->stopping) {
        pthread_mutex_unlock(&w->mu);
        free(j);
        return -1;
    }
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void lg_workers_stop(lg_workers *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    bool join = !w->joined;
    w->joined = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (join)
        for (int i = 0; i < w->n; i++)
            pthread_join(w->tids[i], NULL);
}

void lg_workers_free(lg_workers *w)
{
    if (!w)
        return;
    lg_workers_stop(w);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->tids);
    free(w);
}
