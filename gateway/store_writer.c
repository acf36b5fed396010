/*
 * store_writer.c — see store_writer.h: a mutex around the handle.
 */
#include "gateway/store_writer.h"

#include <pthread.h>
#include <stdlib.h>

struct lg_store_writer {
    pthread_mutex_t mu;
    lg_store *st;
};

int lg_store_writer_create(lg_store *st, lg_store_writer **out, lg_err *err)
{
    lg_store_writer *w = calloc(1, sizeof *w);
    if (!w)
        return lg_fail(err, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    w->st = st;
    *out = w;
    return 0;
}

void lg_store_writer_free(lg_store_writer *w)
{
    if (!w)
        return;
    lg_store_close(w->st);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

lg_store *lg_store_writer_acquire(lg_store_writer *w)
{
    pthread_mutex_lock(&w->mu);
    return w->st;
}

void lg_store_writer_release(lg_store_writer *w) { pthread_mutex_unlock(&w->mu); }
