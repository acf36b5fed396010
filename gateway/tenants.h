/*
 * tenants.h — the tenant view: every live tenant of the store, in memory,
 * for the event loops. The router's resolver, the key auth, the limits and
 * prices of a request, the metrics' label check and the operator's reads
 * all look tenants up here; none of them touches the disk.
 *
 * Objects. An lg_tenant_obj is made once per tenant id and never freed
 * while the view lives (a deleted tenant keeps its object, marked deleted),
 * so a pointer taken from the resolver stays valid for a whole request and
 * may cross threads. Its id and name never change and are read directly;
 * the mutable part (weight, pricing, limits, deleted) lives behind the
 * view's lock and is read as a copy with lg_tenants_get.
 *
 * Threads and workload. Readers (every request, on any loop thread) take a
 * read lock for a hash lookup or a copy of about 200 bytes. The writer is
 * lg_tenants_apply, after an admin change (rare), with the store's rows.
 */
#ifndef LG_GW_TENANTS_H
#define LG_GW_TENANTS_H

#include <stdbool.h>
#include <stdint.h>

#include "db/money.h"
#include "db/store.h"

typedef struct lg_tenants lg_tenants;

typedef struct lg_tenant_obj {
    int64_t id;                   /* the store's row id, never reused */
    char name[LG_STORE_NAME_MAX]; /* the slug */
} lg_tenant_obj;

int lg_tenants_create(lg_tenants **out, lg_err *err);
void lg_tenants_free(lg_tenants *tv); /* NULL: no-op; frees every object */

/* Makes the view say exactly `rows` (the store's live tenants): new ids get
 * an object, every other object is marked deleted. def is the price of a
 * tenant without its own. On failure the view keeps its previous names. */
int lg_tenants_apply(lg_tenants *tv, const lg_tenant *rows, int n, const lg_pricing *def, lg_err *err);

/* The router's resolver (router.h lg_tenant_resolve_fn; user: the view): a
 * live tenant by slug, 1 found, 0 not. Never blocks. */
int lg_tenants_resolve(void *tv, const char *slug, void **tenant);
/* The live tenant of that slug; NULL: none. */
const lg_tenant_obj *lg_tenants_find(lg_tenants *tv, const char *slug);
/* Any tenant object the view has made (live or deleted); NULL: unknown id. */
const lg_tenant_obj *lg_tenants_by_id(lg_tenants *tv, int64_t id);
/* A copy of the mutable part of t, an object of this view (either pointer
 * may be NULL): the store's row (weight, limits, own pricing) and the
 * effective pricing (its own or the default). Returns false when the tenant
 * is deleted (the copies are still made). */
bool lg_tenants_get(lg_tenants *tv, const lg_tenant_obj *t, lg_tenant *row, lg_pricing *pricing);

/* Copies of every live tenant with its effective pricing, sorted by name
 * (free() the array). -1: out of memory. */
typedef struct lg_tenant_copy {
    lg_tenant row;
    lg_pricing pricing;
} lg_tenant_copy;
int lg_tenants_list(lg_tenants *tv, lg_tenant_copy **out, int *n);

#endif
