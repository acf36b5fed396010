/*
 * fairness.c — see fairness.h.
 *
 * Tenants live in a name map and, while they have waiting requests, in a
 * "backlogged" list; picking scans that list (tens of tenants, once per
 * admission). The mutex guards tenant creation and the queues; the engine
 * thread takes it briefly in every call. The counters (weight, service,
 * counter) and the lift's view of who is backlogged live in a table (one
 * per lg_fair, or one for several after lg_fair_join) under its own mutex,
 * always taken after the queue's: a charge or a pick on one engine is a
 * few loads and stores under it, shared with the other engines.
 */
#include "engine/runtime/fairness.h"
#include "engine/base/strmap.h"

#include <pthread.h>
#include <stdlib.h>

/* A tenant's VTC figures, in the table every joined lg_fair shares. */
typedef struct fair_share {
    char *name;
    double weight, counter, service;
    int queued;                                /* waiting requests over every lg_fair of the table */
    struct fair_share *bl_prev, *bl_next;      /* the table's backlogged list (queued > 0) */
} fair_share;

typedef struct fair_table {
    pthread_mutex_t mu;
    lg_strmap *by_name;                        /* name -> fair_share */
    fair_share **all;
    int n_all, cap_all;
    fair_share *bl_head;
    double last_left;                          /* counter of the last tenant whose queues all emptied */
    int refs;                                  /* the lg_fair using it */
} fair_table;

/* A tenant as one lg_fair sees it: its queue here, and its share. */
struct lg_fair_tenant {
    fair_share *sh;
    int queued, running;
    bool skip;
    lg_fair_link *head, *tail;                 /* FIFO of waiting requests */
    lg_fair_tenant *bl_prev, *bl_next;         /* backlogged list (this lg_fair's) */
    bool backlogged;
};

struct lg_fair {
    lg_fair_policy policy;
    pthread_mutex_t mu;
    lg_strmap *by_name;
    lg_fair_tenant **all;
    int n_all, cap_all;
    lg_fair_tenant *bl_head;
    int queued;
    fair_table *tab;
};

static fair_table *table_new(void)
{
    fair_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->refs = 1;
    if (!(t->by_name = lg_strmap_new())) {
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    return t;
}

static void table_unref(fair_table *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    bool last = --t->refs == 0;
    pthread_mutex_unlock(&t->mu);
    if (!last)
        return;
    for (int i = 0; i < t->n_all; i++) {
        free(t->all[i]->name);
        free(t->all[i]);
    }
    free(t->all);
    lg_strmap_free(t->by_name);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* The share of that name, created on first use (weight 1); table mu held. */
static fair_share *share_get_locked(fair_table *t, const char *name)
{
    fair_share *s = lg_strmap_get(t->by_name, name);
    if (s)
        return s;
    if (t->n_all == t->cap_all) {
        int cap = t->cap_all ? 2 * t->cap_all : 16;
        fair_share **a = realloc(t->all, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        t->all = a;
        t->cap_all = cap;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->name = strdup(name))) {
        free(s);
        return NULL;
    }
    s->weight = 1.0;
    if (lg_strmap_put(t->by_name, name, s) != 0) {
        free(s->name);
        free(s);
        return NULL;
    }
    t->all[t->n_all++] = s;
    return s;
}

lg_fair *lg_fair_new(lg_fair_policy policy)
{
    lg_fair *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->policy = policy;
    pthread_mutex_init(&f->mu, NULL);
    f->by_name = lg_strmap_new();
    f->tab = table_new();
    if (!f->by_name || !f->tab) {
        lg_strmap_free(f->by_name);
        table_unref(f->tab);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    return f;
}

void lg_fair_free(lg_fair *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_all; i++)
        free(f->all[i]);
    free(f->all);
    lg_strmap_free(f->by_name);
    table_unref(f->tab);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int lg_fair_join(lg_fair *f, lg_fair *with, lg_err *err)
{
    if (f == with || f->tab == with->tab)
        return 0;
    if (f->policy != with->policy)
        return lg_fail(err, "fairness queues of different policies cannot share their counters");
    pthread_mutex_lock(&f->mu);
    pthread_mutex_lock(&f->tab->mu);
    bool fresh = f->n_all == 0 && f->tab->n_all == 0;
    pthread_mutex_unlock(&f->tab->mu);
    if (!fresh) {
        pthread_mutex_unlock(&f->mu);
        return lg_fail(err, "a fairness queue can share its counters only before it knows any tenant");
    }
    fair_table *t = with->tab; /* with's table is only replaced by a join of with, before its use */
    pthread_mutex_lock(&t->mu);
    t->refs++;
    pthread_mutex_unlock(&t->mu);
    fair_table *old = f->tab;
    f->tab = t;
    pthread_mutex_unlock(&f->mu);
    table_unref(old);
    return 0;
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
    if (!t)
        return NULL;
    pthread_mutex_lock(&f->tab->mu);
    t->sh = share_get_locked(f->tab, name);
    pthread_mutex_unlock(&f->tab->mu);
    if (!t->sh || lg_strmap_put(f->by_name, name, t) != 0) {
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

const char *lg_fair_tenant_name(const lg_fair_tenant *t) { return t->sh->name; }

int lg_fair_set_weight(lg_fair *f, const char *name, double weight, lg_err *err)
{
    if (!(weight > 0) || weight > 1e6)
        return lg_fail(err, "a tenant's weight must be in (0, 1e6], got %g", weight);
    fair_table *tab = f->tab;
    pthread_mutex_lock(&tab->mu);
    fair_share *s = share_get_locked(tab, name ? name : "");
    if (s)
        s->weight = weight;
    pthread_mutex_unlock(&tab->mu);
    return s ? 0 : lg_fail(err, "out of memory");
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
}

/* A request of s joins a queue (table mu held). A tenant that was idle
 * everywhere gets VTC's counter lift first and joins the backlogged list. */
static void share_enqueue_locked(fair_table *tab, fair_share *s)
{
    if (s->queued++ > 0)
        return;
    if (tab->bl_head) {
        double mn = tab->bl_head->counter;
        for (fair_share *x = tab->bl_head->bl_next; x; x = x->bl_next)
            if (x->counter < mn) mn = x->counter;
        if (s->counter < mn) s->counter = mn;
    } else if (s->counter < tab->last_left) {
        s->counter = tab->last_left;
    }
    s->bl_prev = NULL;
    s->bl_next = tab->bl_head;
    if (tab->bl_head)
        tab->bl_head->bl_prev = s;
    tab->bl_head = s;
}

/* A request of s left its queue (table mu held). */
static void share_dequeue_locked(fair_table *tab, fair_share *s)
{
    if (--s->queued > 0)
        return;
    if (s->bl_prev) s->bl_prev->bl_next = s->bl_next;
    else tab->bl_head = s->bl_next;
    if (s->bl_next) s->bl_next->bl_prev = s->bl_prev;
    s->bl_prev = s->bl_next = NULL;
    tab->last_left = s->counter;
}

void lg_fair_enqueue(lg_fair *f, lg_fair_link *l)
{
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = l->tenant;
    pthread_mutex_lock(&f->tab->mu);
    share_enqueue_locked(f->tab, t->sh);
    pthread_mutex_unlock(&f->tab->mu);
    if (!t->backlogged)
        bl_add(f, t);
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
    pthread_mutex_lock(&f->tab->mu);
    share_dequeue_locked(f->tab, t->sh);
    pthread_mutex_unlock(&f->tab->mu);
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
    pthread_mutex_lock(&f->tab->mu); /* the counters */
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
            better = t->sh->counter < best->sh->counter ||
                     (t->sh->counter == best->sh->counter && t->head->arrival < best->head->arrival);
        if (better)
            best = t;
    }
    pthread_mutex_unlock(&f->tab->mu);
    pthread_mutex_unlock(&f->mu);
    return best;
}

void lg_fair_skip(lg_fair_tenant *t) { t->skip = true; }
lg_fair_link *lg_fair_first(lg_fair_tenant *t) { return t->head; }
lg_fair_link *lg_fair_next(lg_fair_link *l) { return l->next; }

void lg_fair_charge(lg_fair *f, lg_fair_tenant *t, double weighted_tokens)
{
    fair_table *tab = f->tab; /* replaced only by lg_fair_join, before any tenant exists */
    pthread_mutex_lock(&tab->mu);
    t->sh->service += weighted_tokens;
    t->sh->counter += weighted_tokens / t->sh->weight;
    pthread_mutex_unlock(&tab->mu);
}

void lg_fair_running(lg_fair *f, lg_fair_tenant *t, int delta)
{
    pthread_mutex_lock(&f->mu);
    t->running += delta;
    pthread_mutex_unlock(&f->mu);
}

int lg_fair_tenant_stats(lg_fair *f, const char *name, lg_fair_stats *out)
{
    name = name ? name : "";
    pthread_mutex_lock(&f->mu);
    lg_fair_tenant *t = lg_strmap_get(f->by_name, name);
    pthread_mutex_lock(&f->tab->mu);
    fair_share *s = lg_strmap_get(f->tab->by_name, name);
    if (s)
        *out = (lg_fair_stats){.service = s->service, .counter = s->counter, .weight = s->weight,
                               .queued = t ? t->queued : 0, .running = t ? t->running : 0};
    pthread_mutex_unlock(&f->tab->mu);
    pthread_mutex_unlock(&f->mu);
    return s ? 0 : -1;
}

int lg_fair_queued(lg_fair *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->queued;
    pthread_mutex_unlock(&f->mu);
    return n;
}
