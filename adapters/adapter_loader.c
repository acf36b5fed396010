/*
 * adapter_loader.c — see adapter_loader.h. One mutex, two lists (queued,
 * done) and a condition variable the thread sleeps on when idle.
 */
#include "adapters/adapter_loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct lg_loader {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    lg_load_job *q_head, *q_tail;   /* queued */
    lg_load_job *d_head, *d_tail;   /* done */
    bool running_job, stop;
    int pending;
    void (*wake)(void *ctx);
    void *wake_ctx;
};

static void push(lg_load_job **h, lg_load_job **t, lg_load_job *j)
{
    j->next = NULL;
    if (*t) (*t)->next = j;
    else *h = j;
    *t = j;
}

static void *loader_main(void *arg)
{
    lg_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !l->q_head)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        lg_load_job *j = l->q_head;
        l->q_head = j->next;
        if (!l->q_head)
            l->q_tail = NULL;
        l->running_job = true;
        pthread_mutex_unlock(&l->mu);

        double t0 = lg_now();
        lg_err err = {{0}};
        j->status = lg_adapter_image_fill(j->spec, j->pages, &err);
        j->seconds = lg_now() - t0;
        if (j->status != 0)
            snprintf(j->error, sizeof j->error, "%s", err.msg[0] ? err.msg : "adapter load failed");

        pthread_mutex_lock(&l->mu);
        l->running_job = false;
        push(&l->d_head, &l->d_tail, j);
        pthread_cond_broadcast(&l->idle_cv);
        pthread_mutex_unlock(&l->mu);
        if (l->wake)
            l->wake(l->wake_ctx);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int lg_loader_create(void (*wake)(void *ctx), void *wake_ctx, lg_loader **out, lg_err *err)
{
    *out = NULL;
    lg_loader *l = calloc(1, sizeof *l);
    if (!l)
        return lg_fail(err, "out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->idle_cv, NULL);
    l->wake = wake;
    l->wake_ctx = wake_ctx;
    if (pthread_create(&l->th, NULL, loader_main, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_cond_destroy(&l->idle_cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return lg_fail(err, "cannot start the adapter loader thread");
    }
    *out = l;
    return 0;
}

void lg_loader_free(lg_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->th, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->idle_cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void lg_loader_submit(lg_loader *l, lg_load_job *j)
{
    j->status = 0;
    j->error[0] = 0;
    j->seconds = 0;
    pthread_mutex_lock(&l->mu);
    push(&l->q_head, &l->q_tail, j);
    l->pending++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

lg_load_job *lg_loader_take_done(lg_loader *l)
{
    pthread_mutex_lock(&l->mu);
    lg_load_job *h = l->d_head;
    for (lg_load_job *j = h; j; j = j->next) l->pending--;
    l->d_head = l->d_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    return h;
}

void lg_loader_cancel_all(lg_loader *l)
{
    pthread_mutex_lock(&l->mu);
    for (lg_load_job *j = l->q_head, *n; j; j = n) {
        n = j->next;
        j->status = -1;
        snprintf(j->error, sizeof j->error, "cancelled");
        push(&l->d_head, &l->d_tail, j);
    }
    l->q_head = l->q_tail = NULL;
    while (l->running_job)
        pthread_cond_wait(&l->idle_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

int lg_loader_pending(lg_loader *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->pending;
    pthread_mutex_unlock(&l->mu);
    return n;
}
