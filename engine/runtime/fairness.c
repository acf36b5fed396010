/*
 * fairness.c — see fairness.h.
 *
 * Tenants live in a name map and, while they have waiting requests, in a
 * "backlogged" list; picking scans that list (tens of tenants, once per
 * admission). The mutex guards tenant creation, weights and the counters
 * the metrics read; the engine thread takes it briefly in every call.
 */
#include "engine/runtime/fairness.h"
#include "engine/base/strmap.h"

#include <pthread.h>
#include <stdlib.h>

struct lg_fair_tenant {
    char *name;
    double weight, counter, service;
    int queued, running;
    bool skip;
    lg_fair_link *head, *tail;                 /* FIFO of waiting requests */
    lg_fair_tenant *bl_prev, *bl_next;         /* backlogged list */
    bool backlogged;
};

struct lg_fair {
    lg_fair_policy policy;
    pthread_mutex_t mu;
    lg_strmap *by_name;
    lg_fair_tenant **all;
    int n_all, cap_all;
    lg_fair_tenant *bl_head;
    double last_left;                          /* counter of the last tenant whose queue emptied */
    int queued;
};

lg_fair *lg_fair_new(lg_fair_policy policy)
{
    lg_fair *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->policy = policy;
    pthread_mutex_init(&f->mu, NULL);
    f->by_name = lg_strmap_new();
    if (!f->by_name) {
        free(f);
        return NULL;
    }
    return f;
}

void lg_fair_free(lg_fair *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_all; i++) {
        free(f->all[i]->name);
        free(f->all[i]);
    }
    free(f->all);
    lg_strmap_free(f->by_name);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static lg_fair_tenant *tenant_get_locked(lg_fair *f, const char *name)
{
    lg_fair_tenant *t = lg_strmap_get(f->by_name, name);
    if (t)
        return t;
    if (f->n_all == f->cap_all) {
        int cap = f->cap_all ? 2 * f->cap_all : 16;
        lg_fair_tenant **a = realloc(f->all, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        f->all = a;
        f->cap_all = cap;
    }
    t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return NULL;
    }
    t->weight = 1.0;
    if (lg_strmap_put(f->by_name, name, t) != 0) {
        free(t->name);
        free(t);
        return NULL;
    }
    f->all[f->n_all++] = t;
    return t;
}

lg_fair_tenant *lg_fair_tenant_get(lg_fair *f, const char *name)
{
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = tenant_get_locked(f, name ? name : "");
    pthread_mutex_unlock(&f->mu);
    return t;
}

const char *lg_fair_tenant_name(const lg_fair_tenant *t) { return t->name; }

int lg_fair_set_weight(lg_fair *f, const char *name, double weight, lg_err *err)
{
    if (!(weight > 0) || weight > 1e6)
        return lg_fail(err, "a tenant's weight must be in (0, 1e6], got %g", weight);
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = tenant_get_locked(f, name ? name : "");
    if (t)
        t->weight = weight;
    pthread_mutex_unlock(&f->mu);
    return t ? 0 : lg_fail(err, "out of memory");
}

static void bl_add(lg_fair *f, lg_fair_tenant *t)
{
    t->backlogged = true;
    t->bl_prev = NULL;
    t->bl_next = f->bl_head;
    if (f->bl_head)
        f->bl_head->bl_prev = t;
    f->bl_head = t;
}

static void bl_del(lg_fair *f, lg_fair_tenant *t)
{
    if (t->bl_prev) t->bl_prev->bl_next = t->bl_next;
    else f->bl_head = t->bl_next;
    if (t->bl_next) t->bl_next->bl_prev = t->bl_prev;
    t->bl_prev = t->bl_next = NULL;
    t->backlogged = false;
    f->last_left = t->counter;
}

/* VTC's counter lift for a tenant whose queue is about to become non-empty. */
static void lift(lg_fair *f, lg_fair_tenant *t)
{
    if (f->bl_head) {
        double mn = f->bl_head->counter;
        for (lg_fair_tenant *x = f->bl_head->bl_next; x; x = x->bl_next)
            if (x->counter < mn) mn = x->counter;
        if (t->counter < mn) t->counter = mn;
    } else if (t->counter < f->last_left) {
        t->counter = f->last_left;
    }
}

void lg_fair_enqueue(lg_fair *f, lg_fair_link *l)
{
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = l->tenant;
    if (!t->backlogged) {
        lift(f, t);
        bl_add(f, t);
    }
    /* FIFO by arrival: requests normally arrive in order, so this is an append */
    lg_fair_link *after = t->tail;
    while (after && after->arrival > l->arrival) after = after->prev;
    l->prev = after;
    l->next = after ? after->next : t->head;
    if (l->next) l->next->prev = l;
    else t->tail = l;
    if (after) after->next = l;
    else t->head = l;
    l->queued = true;
    t->queued++;
    f->queued++;
    pthread_mutex_unlock(&f->mu);
}

void lg_fair_remove(lg_fair *f, lg_fair_link *l)
{
    if (!l->queued)
        return;
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = l->tenant;
    if (l->prev) l->prev->next = l->next;
    else t->head = l->next;
    if (l->next) l->next->prev = l->prev;
    else t->tail = l->prev;
    l->prev = l->next = NULL;
    l->queued = false;
    t->queued--;
    f->queued--;
    if (!t->head)
        bl_del(f, t);
    pthread_mutex_unlock(&f->mu);
}

void lg_fair_round_begin(lg_fair *f)
{
    pthread_mutex_lock(&f->mu);
    for (lg_fair_tenant *t = f->bl_head; t; t = t->bl_next) t->skip = false;
    pthread_mutex_unlock(&f->mu);
}

lg_fair_tenant *lg_fair_pick(lg_fair *f)
{
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *best = NULL;
    for (lg_fair_tenant *t = f->bl_head; t; t = t->bl_next) {
        if (t->skip)
            continue;
        if (!best) {
            best = t;
            continue;
        }
        bool better;
        if (f->policy == LG_FAIR_FCFS)
            better = t->head->arrival < best->head->arrival;
        else /* ties: the older head first, so equal tenants alternate deterministically */
            better = t->counter < best->counter ||
                     (t->counter == best->counter && t->head->arrival < best->head->arrival);
        if (better)
            best = t;
    }
    pthread_mutex_unlock(&f->mu);
    return best;
}

void lg_fair_skip(lg_fair_tenant *t) { t->skip = true; }
lg_fair_link *lg_fair_first(lg_fair_tenant *t) { return t->head; }
lg_fair_link *lg_fair_next(lg_fair_link *l) { return l->next; }

void lg_fair_charge(lg_fair *f, lg_fair_tenant *t, double weighted_tokens)
{
    pthread_mutex_lock(&f->mu);
    t->service += weighted_tokens;
    t->counter += weighted_tokens / t->weight;
    pthread_mutex_unlock(&f->mu);
}

void lg_fair_running(lg_fair *f, lg_fair_tenant *t, int delta)
{
    pthread_mutex_lock(&f->mu);
    t->running += delta;
    pthread_mutex_unlock(&f->mu);
}

int lg_fair_tenant_stats(lg_fair *f, const char *name, lg_fair_stats *out)
{
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = lg_strmap_get(f->by_name, name ? name : "");
    if (t)
        *out = (lg_fair_stats){.service = t->service, .counter = t->counter, .weight = t->weight,
                               .queued = t->queued, .running = t->running};
    pthread_mutex_unlock(&f->mu);
    return t ? 0 : -1;
}

int lg_fair_queued(lg_fair *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->queued;
    pthread_mutex_unlock(&f->mu);
    return n;
}
