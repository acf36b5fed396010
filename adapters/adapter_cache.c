/*
 * adapter_cache.c — see adapter_cache.h.
 *
 * Per version two small state machines:
 *   host:   NONE -> LOADING (host pages allocated and pinned, a loader job
 *           queued) -> READY (unpinned: cached in the host LRU, or pinned
 *           again while a pool copy reads it); evicted -> NONE.
 *   pool:   NONE -> COPYING (pool pages taken raw, copies in flight on the
 *           upload stream) -> RESIDENT (a pool entry: pinned by running
 *           sequences, cached when idle); evicted -> NONE.
 * A failed load marks the version failed: every later acquire returns -1
 * with the loader's message (a new version must be registered).
 * Versions with a load or a copy in flight are listed in `inflight` so a
 * step polls them without scanning every version.
 */
#include "adapters/adapter_cache.h"
#include "adapters/adapter_loader.h"
#include "adapters/peft.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

enum { H_NONE, H_LOADING, H_READY };
enum { D_NONE, D_COPYING, D_RESIDENT };

typedef struct entry {
    int id;
    lg_adapter_spec *spec;
    /* host tier */
    int hstate;
    lg_pool_entry hpe;
    int32_t *hpages;          /* [tp * n_pages] host pool pages (the shards, rank after rank) */
    unsigned char **hptrs;    /* [tp * n_pages] their addresses, for the loader */
    lg_load_job job;
    /* pool tier */
    int dstate;
    lg_pool_entry pe;
    int32_t *pages;           /* [n_pages] pool pages */
    uint64_t ticket[LG_ADAPTER_MAX_RANKS]; /* of the last page's async copy, a rank */
    lg_lora_w *slots;         /* [tp * n_slots]: rank r's table at r * n_slots (its arena's pointers) */
    /* bookkeeping */
    double t_asked;           /* 0: no load in progress */
    bool failed, removed, inflight;
    char error[256];
} entry;

struct lg_adapter_cache {
    lg_backend *be;
    lg_page_pool *pool;       /* the unified pool (device) */
    lg_page_pool *hpool;      /* the host tier */
    lg_adapter_geom geom;
    int tp;                   /* the pool's ranks: each gets its shard of an image (adapter_image.h) */
    lg_loader *loader;
    entry **e;                /* [cap] indexed by id; NULL: none */
    int cap;
    int *inflight;            /* ids with a load or copy in flight */
    int n_inflight, cap_inflight;
    lg_adapter_cache_stats st;
    float samples[LG_ADAPTER_LOAD_SAMPLES];
    int64_t n_samples;
};

const lg_adapter_geom *lg_adapter_cache_geom(const lg_adapter_cache *c) { return &c->geom; }

int lg_adapter_cache_create(lg_backend *be, lg_page_pool *pool, const lg_model_config *cfg,
                            const lg_adapter_cache_opts *opts, lg_adapter_cache **out, lg_err *err)
{
    *out = NULL;
    lg_adapter_cache_opts o = opts ? *opts : (lg_adapter_cache_opts){0};
    if (o.max_rank <= 0) o.max_rank = 64;
    if (o.host_bytes == 0) o.host_bytes = (size_t)1 << 30;
    size_t pb = lg_page_pool_page_bytes(pool);
    size_t need = lg_adapter_max_tensor_bytes(cfg, o.max_rank, be->act_dtype);
    if (pb % 256 != 0) /* tensors are placed at 256-byte offsets inside pages */
        return lg_fail(err, "pool pages of %zu bytes are not a multiple of 256 bytes", pb);
    if (need > pb)
        return lg_fail(err, "pool pages of %zu bytes cannot hold an adapter tensor at rank %d (%zu bytes)", pb,
                       o.max_rank, need);
    lg_adapter_cache *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    c->be = be;
    c->pool = pool;
    c->tp = lg_page_pool_n_ranks(pool);
    if (c->tp > LG_ADAPTER_MAX_RANKS) {
        free(c);
        return lg_fail(err, "adapter cache: %d tensor-parallel ranks (at most %d)", lg_page_pool_n_ranks(pool),
                       LG_ADAPTER_MAX_RANKS);
    }
    c->geom = (lg_adapter_geom){.cfg = *cfg, .max_rank = o.max_rank, .dt = be->act_dtype, .page_bytes = pb,
                                .tp = c->tp};
    int n_host = (int)(o.host_bytes / pb);
    if (n_host < 1)
        n_host = 1;
    if (lg_page_pool_create_host(be, pb, n_host, &c->hpool, err) != 0 ||
        lg_loader_create(o.wake, o.wake_ctx, &c->loader, err) != 0) {
        lg_adapter_cache_free(c);
        return -1;
    }
    c->st.host_capacity = (size_t)n_host * pb;
    *out = c;
    return 0;
}

static entry *get(const lg_adapter_cache *c, int id)
{
    return id >= 1 && id < c->cap ? c->e[id] : NULL;
}

/* Waits for every async copy of e's pages still in flight (a failed start, or the cache going away). */
static void copies_wait(lg_adapter_cache *c, entry *e)
{
    for (int r = 0; r < c->tp; r++) {
        lg_backend *rb = lg_page_pool_rank_backend(c->pool, r);
        while (e->ticket[r] && rb->i.upload_done && rb->i.upload_done(rb, e->ticket[r]) == 0)
            ;
    }
}

static void entry_free(entry *e)
{
    lg_adapter_spec_free(e->spec);
    free(e->hpages);
    free(e->hptrs);
    free(e->pages);
    free(e->slots);
    free(e);
}

void lg_adapter_cache_free(lg_adapter_cache *c)
{
    if (!c)
        return;
    if (c->loader) {
        lg_loader_cancel_all(c->loader);
        lg_loader_take_done(c->loader); /* jobs live in their entries */
        lg_loader_free(c->loader);
    }
    for (int r = 0; c->cap && r < c->tp; r++) { /* async copies may still read host images */
        lg_backend *rb = lg_page_pool_rank_backend(c->pool, r);
        rb->i.sync(rb);
    }
    for (int i = 0; i < c->cap; i++) {
        entry *e = c->e[i];
        if (!e)
            continue;
        if (e->dstate == D_RESIDENT)
            lg_page_pool_entry_drop(c->pool, &e->pe);
        else if (e->dstate == D_COPYING) {
            copies_wait(c, e);
            lg_page_pool_release(c->pool, e->pages, e->spec->n_pages);
        }
        entry_free(e);
    }
    free(c->e);
    free(c->inflight);
    lg_page_pool_free(c->hpool);
    free(c);
}

int lg_adapter_cache_add(lg_adapter_cache *c, int id, lg_adapter_spec *spec, lg_err *err)
{
    if (id < 1 || get(c, id)) {
        lg_adapter_spec_free(spec);
        return lg_fail(err, "adapter id %d is invalid or in use", id);
    }
    if (spec->tp != c->tp) {
        lg_fail(err, "adapter '%s' was laid out for %d ranks, the pool has %d", spec->name, spec->tp, c->tp);
        lg_adapter_spec_free(spec);
        return -1;
    }
    if (spec->n_pages * c->tp > lg_page_pool_n_pages(c->hpool) || spec->n_pages > lg_page_pool_n_pages(c->pool)) {
        int np = spec->n_pages * c->tp;
        lg_fail(err, "adapter '%s' needs %d pages of %zu bytes: more than the %s holds (%d)", spec->name, np,
                c->geom.page_bytes, np > lg_page_pool_n_pages(c->hpool) ? "adapter host tier" : "page pool",
                np > lg_page_pool_n_pages(c->hpool) ? lg_page_pool_n_pages(c->hpool) : lg_page_pool_n_pages(c->pool));
        lg_adapter_spec_free(spec);
        return -1;
    }
    if (id >= c->cap) {
        int cap = c->cap ? c->cap : 64;
        while (cap <= id) cap *= 2;
        entry **ne = realloc(c->e, (size_t)cap * sizeof *ne);
        if (!ne) {
            lg_adapter_spec_free(spec);
            return lg_fail(err, "out of memory");
        }
        memset(ne + c->cap, 0, (size_t)(cap - c->cap) * sizeof *ne);
        c->e = ne;
        c->cap = cap;
    }
    entry *e = calloc(1, sizeof *e);
    int n = spec->n_pages, nh = n * c->tp;
    if (e) {
        e->hpages = malloc((size_t)nh * sizeof *e->hpages);
        e->hptrs = malloc((size_t)nh * sizeof *e->hptrs);
        e->pages = malloc((size_t)n * sizeof *e->pages);
        e->slots = calloc((size_t)spec->n_slots * (size_t)c->tp, sizeof *e->slots);
    }
    if (!e || !e->hpages || !e->hptrs || !e->pages || !e->slots) {
        if (e) {
            e->spec = spec;
            entry_free(e);
        } else {
            lg_adapter_spec_free(spec);
        }
        return lg_fail(err, "out of memory");
    }
    e->id = id;
    e->spec = spec;
    c->e[id] = e;
    c->st.registered++;
    return 0;
}

const lg_adapter_spec *lg_adapter_cache_spec(const lg_adapter_cache *c, int id)
{
    entry *e = get(c, id);
    return e && !e->removed ? e->spec : NULL;
}

/* ---- in-flight list -------------------------------------------------------- */

static void inflight_add(lg_adapter_cache *c, entry *e)
{
    if (e->inflight)
        return;
    if (c->n_inflight == c->cap_inflight) {
        int cap = c->cap_inflight ? 2 * c->cap_inflight : 32;
        int *n = realloc(c->inflight, (size_t)cap * sizeof *n);
        if (!n)
            return; /* poll also scans when the list could not grow: see poll */
        c->inflight = n;
        c->cap_inflight = cap;
    }
    c->inflight[c->n_inflight++] = e->id;
    e->inflight = true;
}

/* ---- host tier -------------------------------------------------------------- */

static void on_host_evict(void *owner, lg_pool_entry *pe)
{
    lg_adapter_cache *c = owner;
    entry *e = (entry *)((char *)pe - offsetof(entry, hpe));
    e->hstate = H_NONE;
    c->st.host_images--;
    c->st.host_bytes -= (size_t)e->spec->n_pages * (size_t)c->tp * c->geom.page_bytes;
    c->st.host_evictions++;
}

/* Starts the loader on e. Returns false when the host tier has no room now. */
static bool start_host_load(lg_adapter_cache *c, entry *e)
{
    int n = e->spec->n_pages * c->tp;
    if (lg_page_pool_alloc(c->hpool, LG_PAGE_ADAPTER, n, e->hpages) != 0)
        return false;
    unsigned char *base = lg_page_pool_base(c->hpool);
    for (int p = 0; p < n; p++) e->hptrs[p] = base + (size_t)e->hpages[p] * c->geom.page_bytes;
    e->hpe = (lg_pool_entry){.kind = LG_PAGE_ADAPTER, .pages = e->hpages, .n_pages = n, .evict = on_host_evict,
                             .owner = c};
    lg_page_pool_entry_add(c->hpool, &e->hpe); /* pinned while the loader writes */
    e->hstate = H_LOADING;
    c->st.host_images++;
    c->st.host_bytes += (size_t)n * c->geom.page_bytes;
    e->job = (lg_load_job){.id = e->id, .spec = e->spec, .pages = e->hptrs};
    lg_loader_submit(c->loader, &e->job);
    inflight_add(c, e);
    return true;
}

/* ---- pool tier ----------------------------------------------------------------- */

static void on_evict(void *owner, lg_pool_entry *pe)
{
    lg_adapter_cache *c = owner;
    entry *e = (entry *)((char *)pe - offsetof(entry, pe));
    e->dstate = D_NONE;
    c->st.resident--;
    c->st.pool_evictions++;
}

static void record_load(lg_adapter_cache *c, entry *e)
{
    if (e->t_asked > 0) {
        double dt = lg_now() - e->t_asked;
        c->st.load_seconds += dt;
        c->samples[c->n_samples++ % LG_ADAPTER_LOAD_SAMPLES] = (float)(dt * 1e3);
        e->t_asked = 0;
    }
}

/* The copy into pool pages is done: e becomes a resident pool entry with
 * one pin (the caller's, or dropped at once by poll). */
static void make_resident(lg_adapter_cache *c, entry *e)
{
    const lg_adapter_spec *s = e->spec;
    size_t pb = c->geom.page_bytes;
    for (int r = 0; r < c->tp; r++) { /* one table a rank: the same pages and offsets in its own arena */
        char *base = lg_page_pool_rank_base(c->pool, r);
        for (int k = 0; k < s->n_slots; k++) {
            lg_lora_w *w = &e->slots[(size_t)r * (size_t)s->n_slots + (size_t)k];
            w->rank = s->rank[k];
            w->scale = s->scale[k];
            w->A = w->rank ? base + (size_t)e->pages[s->pa[k].page] * pb + s->pa[k].off : NULL;
            w->B = w->rank ? base + (size_t)e->pages[s->pb[k].page] * pb + s->pb[k].off : NULL;
        }
    }
    e->pe = (lg_pool_entry){.kind = LG_PAGE_ADAPTER, .pages = e->pages, .n_pages = s->n_pages, .evict = on_evict,
                            .owner = c};
    lg_page_pool_entry_add(c->pool, &e->pe);
    lg_page_pool_unpin(c->hpool, &e->hpe); /* the image is no longer read */
    e->dstate = D_RESIDENT;
    c->st.resident++;
    c->st.pool_loads++;
    record_load(c, e);
}

/* Starts the host -> pool copy (host image READY). 0: resident now
 * (synchronous backend); 1: copying or no room; -1: failed (e->failed). */
static int start_copy(lg_adapter_cache *c, entry *e)
{
    const lg_adapter_spec *s = e->spec;
    if (lg_page_pool_alloc(c->pool, LG_PAGE_ADAPTER, s->n_pages, e->pages) != 0)
        return 1;
    lg_page_pool_pin(c->hpool, &e->hpe); /* the image must stay while it is read */
    size_t pb = c->geom.page_bytes;
    lg_backend *be = c->be;
    memset(e->ticket, 0, sizeof e->ticket);
    for (int r = 0; r < c->tp; r++) { /* rank r's shard into rank r's arena, the same page ids */
        lg_backend *rb = lg_page_pool_rank_backend(c->pool, r);
        char *base = lg_page_pool_rank_base(c->pool, r);
        for (int p = 0; p < s->n_pages; p++) {
            void *dst = base + (size_t)e->pages[p] * pb;
            const unsigned char *src = e->hptrs[(size_t)r * (size_t)s->n_pages + (size_t)p];
            int rc = rb->i.upload_async ? rb->i.upload_async(rb, dst, src, s->page_used[p], &e->ticket[r])
                                        : rb->i.upload(rb, dst, src, s->page_used[p]);
            if (rc != 0) {
                /* copies already queued may still write into the pages: wait for them */
                copies_wait(c, e);
                lg_page_pool_release(c->pool, e->pages, s->n_pages);
                lg_page_pool_unpin(c->hpool, &e->hpe);
                e->failed = true;
                snprintf(e->error, sizeof e->error, "copying adapter '%s' into the page pool failed", s->name);
                c->st.load_failures++;
                return -1;
            }
        }
    }
    if (be->i.upload_async) {
        e->dstate = D_COPYING;
        inflight_add(c, e);
        return 1;
    }
    make_resident(c, e);
    lg_page_pool_unpin(c->pool, &e->pe);
    return 0;
}

/* An async copy of e (COPYING): 1 still in flight; 0 done, e resident with
 * one pin; -1 failed (e->failed, its pool pages freed). */
static int finish_copy(lg_adapter_cache *c, entry *e)
{
    int d = 1;
    for (int r = 0; r < c->tp && d > 0; r++) {
        lg_backend *rb = lg_page_pool_rank_backend(c->pool, r);
        d = e->ticket[r] && rb->i.upload_done ? rb->i.upload_done(rb, e->ticket[r]) : 1;
    }
    if (d == 0)
        return 1;
    if (d > 0) {
        make_resident(c, e);
        return 0;
    }
    lg_page_pool_release(c->pool, e->pages, e->spec->n_pages);
    lg_page_pool_unpin(c->hpool, &e->hpe);
    e->dstate = D_NONE;
    e->failed = true;
    snprintf(e->error, sizeof e->error, "copying adapter '%s' into the page pool failed", e->spec->name);
    c->st.load_failures++;
    return -1;
}

/* ---- removal ------------------------------------------------------------------------ */

static void try_free(lg_adapter_cache *c, entry *e)
{
    if (!e->removed || e->hstate == H_LOADING || e->dstate == D_COPYING)
        return;
    if (e->dstate == D_RESIDENT) {
        if (e->pe.pins > 0)
            return;
        lg_page_pool_entry_drop(c->pool, &e->pe);
        e->dstate = D_NONE;
        c->st.resident--;
    }
    if (e->hstate == H_READY) {
        lg_page_pool_entry_drop(c->hpool, &e->hpe);
        e->hstate = H_NONE;
        c->st.host_images--;
        c->st.host_bytes -= (size_t)e->spec->n_pages * (size_t)c->tp * c->geom.page_bytes;
    }
    c->e[e->id] = NULL;
    c->st.registered--;
    entry_free(e);
}

void lg_adapter_cache_remove(lg_adapter_cache *c, int id)
{
    entry *e = get(c, id);
    if (!e)
        return;
    e->removed = true;
    try_free(c, e);
}

/* ---- acquire / release ---------------------------------------------------------------- */

int lg_adapter_cache_acquire(lg_adapter_cache *c, int id, const lg_lora_w **slots, lg_err *err)
{
    entry *e = get(c, id);
    if (!e || e->removed)
        return lg_fail(err, "no adapter with id %d", id);
    if (e->failed)
        return lg_fail(err, "%s", e->error);
    if (e->dstate == D_RESIDENT) {
        lg_page_pool_pin(c->pool, &e->pe);
        *slots = e->slots;
        return 0;
    }
    if (e->t_asked == 0)
        e->t_asked = lg_now();
    if (e->dstate == D_COPYING) {
        int rc = finish_copy(c, e);
        if (rc < 0)
            return lg_fail(err, "%s", e->error);
        if (rc == 0) /* resident and pinned once: ours */
            *slots = e->slots;
        return rc;
    }
    if (e->hstate == H_LOADING)
        return 1;
    if (e->hstate == H_NONE) {
        start_host_load(c, e);
        return 1;
    }
    int rc = start_copy(c, e); /* H_READY */
    if (rc < 0)
        return lg_fail(err, "%s", e->error);
    if (rc > 0)
        return 1;
    lg_page_pool_pin(c->pool, &e->pe);
    *slots = e->slots;
    return 0;
}

void lg_adapter_cache_prefetch(lg_adapter_cache *c, int id)
{
    entry *e = get(c, id);
    if (!e || e->removed || e->failed || e->dstate != D_NONE || e->hstate != H_NONE)
        return;
    if (lg_loader_pending(c->loader) >= 4)
        return;
    if (e->t_asked == 0)
        e->t_asked = lg_now();
    start_host_load(c, e);
}

void lg_adapter_cache_release(lg_adapter_cache *c, int id)
{
    entry *e = get(c, id);
    if (!e || e->dstate != D_RESIDENT)
        return;
    lg_page_pool_unpin(c->pool, &e->pe);
    if (e->removed)
        try_free(c, e);
}

void lg_adapter_cache_poll(lg_adapter_cache *c)
{
    for (lg_load_job *j = lg_loader_take_done(c->loader), *n; j; j = n) {
        n = j->next;
        entry *e = get(c, j->id);
        if (!e)
            continue;
        c->st.host_load_seconds += j->seconds;
        if (j->status == 0) {
            e->hstate = H_READY;
            c->st.host_loads++;
            lg_page_pool_unpin(c->hpool, &e->hpe); /* cached until a copy reads it */
        } else {
            lg_page_pool_entry_drop(c->hpool, &e->hpe);
            e->hstate = H_NONE;
            c->st.host_images--;
            c->st.host_bytes -= (size_t)e->spec->n_pages * (size_t)c->tp * c->geom.page_bytes;
            e->failed = true;
            e->t_asked = 0;
            snprintf(e->error, sizeof e->error, "%s", j->error);
            c->st.load_failures++;
        }
    }
    for (int i = 0; i < c->n_inflight;) {
        entry *e = get(c, c->inflight[i]);
        bool busy = false;
        if (e && e->dstate == D_COPYING) {
            int rc = finish_copy(c, e);
            if (rc == 1)
                busy = true;
            else if (rc == 0)
                lg_page_pool_unpin(c->pool, &e->pe); /* idle until a request pins it */
        } else if (e && e->hstate == H_LOADING) {
            busy = true;
        }
        if (busy) {
            i++;
            continue;
        }
        if (e) {
            e->inflight = false;
            try_free(c, e);
        }
        c->inflight[i] = c->inflight[--c->n_inflight];
    }
}

bool lg_adapter_cache_busy(const lg_adapter_cache *c) { return c->n_inflight > 0; }

void lg_adapter_cache_evict(lg_adapter_cache *c, int id, bool host_too)
{
    entry *e = get(c, id);
    if (!e)
        return;
    if (e->dstate == D_RESIDENT && e->pe.pins == 0) {
        lg_page_pool_entry_drop(c->pool, &e->pe);
        e->dstate = D_NONE;
        c->st.resident--;
    }
    if (host_too && e->hstate == H_READY && e->hpe.pins == 0) {
        lg_page_pool_entry_drop(c->hpool, &e->hpe);
        e->hstate = H_NONE;
        c->st.host_images--;
        c->st.host_bytes -= (size_t)e->spec->n_pages * (size_t)c->tp * c->geom.page_bytes;
    }
}

void lg_adapter_cache_get_stats(const lg_adapter_cache *c, lg_adapter_cache_stats *s)
{
    *s = c->st;
    s->load_samples = c->n_samples;
}

int lg_adapter_cache_load_times(const lg_adapter_cache *c, float *ms, int cap)
{
    int64_t n = c->n_samples < LG_ADAPTER_LOAD_SAMPLES ? c->n_samples : LG_ADAPTER_LOAD_SAMPLES;
    if (n > cap)
        n = cap;
    int64_t first = c->n_samples - n;
    for (int64_t i = 0; i < n; i++) ms[i] = c->samples[(first + i) % LG_ADAPTER_LOAD_SAMPLES];
    return (int)n;
}
