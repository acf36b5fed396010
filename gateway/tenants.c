/*
 * tenants.c — see tenants.h. Each object is the public lg_tenant_obj (id,
 * name) followed by its mutable part, which only this file reads, under the
 * view's lock. Objects are kept in creation order (an id lookup is a linear
 * scan: rare, and over thousands at most) and live ones by name in a hash
 * map that lg_tenants_apply rebuilds and swaps.
 */
#include "gateway/tenants.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/strmap.h"

typedef struct entry {
    lg_tenant_obj pub;  /* first: an lg_tenant_obj * is an entry * */
    lg_tenant row;      /* under lock */
    lg_pricing pricing; /* under lock: effective */
    bool deleted;       /* under lock */
} entry;

struct lg_tenants {
    pthread_rwlock_t lock;
    lg_strmap *by_name; /* slug -> entry* (live ones) */
    entry **all;        /* every object ever made, by creation */
    int n, cap;
};

int lg_tenants_create(lg_tenants **out, lg_err *err)
{
    lg_tenants *tv = calloc(1, sizeof *tv);
    if (!tv || !(tv->by_name = lg_strmap_new())) {
        free(tv);
        return lg_fail(err, "out of memory");
    }
    pthread_rwlock_init(&tv->lock, NULL);
    *out = tv;
    return 0;
}

void lg_tenants_free(lg_tenants *tv)
{
    if (!tv)
        return;
    lg_strmap_free(tv->by_name);
    for (int i = 0; i < tv->n; i++)
        free(tv->all[i]);
    free(tv->all);
    pthread_rwlock_destroy(&tv->lock);
    free(tv);
}

static entry *by_id_locked(lg_tenants *tv, int64_t id)
{
    for (int i = 0; i < tv->n; i++)
        if (tv->all[i]->pub.id == id)
            return tv->all[i];
    return NULL;
}

/* The object of this id, made when new (write lock held); NULL: out of memory. */
static entry *obtain_locked(lg_tenants *tv, const lg_tenant *row)
{
    entry *e = by_id_locked(tv, row->id);
    if (e)
        return e;
    if (tv->n == tv->cap) {
        int cap = tv->cap ? 2 * tv->cap : 16;
        entry **a = realloc(tv->all, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        tv->all = a;
        tv->cap = cap;
    }
    if (!(e = calloc(1, sizeof *e)))
        return NULL;
    e->pub.id = row->id;
    snprintf(e->pub.name, sizeof e->pub.name, "%s", row->name);
    tv->all[tv->n++] = e;
    return e;
}

int lg_tenants_apply(lg_tenants *tv, const lg_tenant *rows, int n, const lg_pricing *def, lg_err *err)
{
    lg_strmap *by_name = lg_strmap_new();
    if (!by_name)
        return lg_fail(err, "out of memory");
    pthread_rwlock_wrlock(&tv->lock);
    for (int i = 0; i < tv->n; i++)
        tv->all[i]->deleted = true;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        entry *e = obtain_locked(tv, &rows[i]);
        if (!e) {
            rc = lg_fail(err, "out of memory");
            break;
        }
        e->row = rows[i];
        e->pricing = rows[i].has_pricing ? rows[i].pricing : *def;
        e->deleted = false;
        if (lg_strmap_put(by_name, e->pub.name, e) != 0)
            rc = lg_fail(err, "out of memory");
    }
    if (rc == 0) {
        lg_strmap *old = tv->by_name;
        tv->by_name = by_name;
        by_name = old;
    }
    pthread_rwlock_unlock(&tv->lock);
    lg_strmap_free(by_name);
    return rc;
}

const lg_tenant_obj *lg_tenants_find(lg_tenants *tv, const char *slug)
{
    pthread_rwlock_rdlock(&tv->lock);
    entry *e = lg_strmap_get(tv->by_name, slug);
    pthread_rwlock_unlock(&tv->lock);
    return e ? &e->pub : NULL;
}

int lg_tenants_resolve(void *tv, const char *slug, void **tenant)
{
    const lg_tenant_obj *t = lg_tenants_find(tv, slug);
    *tenant = (void *)t;
    return t ? 1 : 0;
}

const lg_tenant_obj *lg_tenants_by_id(lg_tenants *tv, int64_t id)
{
    pthread_rwlock_rdlock(&tv->lock);
    entry *e = by_id_locked(tv, id);
    pthread_rwlock_unlock(&tv->lock);
    return e ? &e->pub : NULL;
}

bool lg_tenants_get(lg_tenants *tv, const lg_tenant_obj *t, lg_tenant *row, lg_pricing *pricing)
{
    const entry *e = (const entry *)t;
    pthread_rwlock_rdlock(&tv->lock);
    bool live = !e->deleted;
    if (row)
        *row = e->row;
    if (pricing)
        *pricing = e->pricing;
    pthread_rwlock_unlock(&tv->lock);
    return live;
}

static int by_row_name(const void *a, const void *b)
{
    return strcmp(((const lg_tenant_copy *)a)->row.name, ((const lg_tenant_copy *)b)->row.name);
}

int lg_tenants_list(lg_tenants *tv, lg_tenant_copy **out, int *n)
{
    pthread_rwlock_rdlock(&tv->lock);
    int k = 0;
    lg_tenant_copy *v = malloc(((size_t)tv->n + 1) * sizeof *v);
    for (int i = 0; v && i < tv->n; i++)
        if (!tv->all[i]->deleted) {
            v[k].row = tv->all[i]->row;
            v[k].pricing = tv->all[i]->pricing;
            k++;
        }
    pthread_rwlock_unlock(&tv->lock);
    if (!v)
        return -1;
    qsort(v, (size_t)k, sizeof *v, by_row_name);
    *out = v;
    *n = k;
    return 0;
}
