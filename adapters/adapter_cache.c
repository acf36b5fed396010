/*
 * adapter_cache.c — see adapter_cache.h.
 *
 * Registration computes an adapter's page layout once (it depends only on
 * its module shapes and the page size) and builds the host image; residency
 * uploads each page's used bytes from the image. Host-tier LRU uses a tick
 * counter (adapters are few and touched once per residency, so a scan to
 * find the victim is cheap).
 */
#include "adapter_cache.h"
#include "peft.h"

#include <stddef.h>
#include <stdlib.h>

typedef struct placed {
    int page;      /* index into the adapter's own page list */
    size_t off;    /* byte offset inside that page */
} placed;

typedef struct entry {
    char *name, *dir;
    char digest[65];
    int n_pages;
    size_t *page_used;      /* [n_pages] bytes used per page */
    int32_t *rank;          /* [n_slots] 0 = not adapted */
    float *scale;           /* [n_slots] */
    placed *pa, *pb;        /* [n_slots] */
    unsigned char *image;   /* n_pages * page_bytes, act dtype; NULL when evicted from host */
    uint64_t host_tick;
    lg_pool_entry pe;
    int32_t *pages;         /* [n_pages] pool pages when resident */
    bool resident;
    bool loading;           /* pages allocated, async upload in flight */
    uint64_t ticket;        /* of the last page's upload */
    lg_lora_w *slots;       /* [n_slots] device pointers when resident */
} entry;

struct lg_adapter_cache {
    lg_backend *be;
    lg_page_pool *pool;
    lg_model_config cfg;
    lg_adapter_cache_opts opts;
    lg_dtype dt;
    size_t page_bytes;
    int n_slots;
    entry **e;      /* individually allocated: the pool keeps pointers to e[i]->pe */
    int n, cap;
    uint64_t tick;
    lg_adapter_cache_stats st;
};

size_t lg_adapter_max_tensor_bytes(const lg_model_config *cfg, int max_rank, lg_dtype dt)
{
    size_t m = 0;
    for (int t = 0; t < LG_LORA_N_TARGETS; t++) {
        int in, out;
        lg_lora_target_dims(cfg, (lg_lora_target)t, &in, &out);
        size_t a = (size_t)max_rank * (size_t)(in > out ? in : out) * lg_dtype_size(dt);
        if (a > m)
            m = a;
    }
    return m;
}

int lg_adapter_cache_create(lg_backend *be, lg_page_pool *pool, const lg_model_config *cfg,
                            const lg_adapter_cache_opts *opts, lg_adapter_cache **out, lg_err *err)
{
    *out = NULL;
    lg_adapter_cache *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    c->be = be;
    c->pool = pool;
    c->cfg = *cfg;
    c->opts = opts ? *opts : (lg_adapter_cache_opts){0};
    if (c->opts.max_rank <= 0) c->opts.max_rank = 64;
    if (c->opts.host_bytes == 0) c->opts.host_bytes = (size_t)1 << 30;
    c->dt = be->act_dtype;
    c->page_bytes = lg_page_pool_page_bytes(pool);
    c->n_slots = cfg->n_layers * LG_LORA_N_MODULES;
    size_t need = lg_adapter_max_tensor_bytes(cfg, c->opts.max_rank, c->dt);
    if (c->page_bytes % 256 != 0) { /* tensors are placed at 256-byte offsets inside pages */
        lg_fail(err, "pool pages of %zu bytes are not a multiple of 256 bytes", c->page_bytes);
        free(c);
        return -1;
    }
    if (need > c->page_bytes) {
        lg_fail(err, "pool pages of %zu bytes cannot hold an adapter tensor at rank %d (%zu bytes)", c->page_bytes,
                c->opts.max_rank, need);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

/* Host images live in page-locked memory when the backend offers it, so the
 * pool uploads from them are truly asynchronous. */
static unsigned char *image_alloc(lg_adapter_cache *c, size_t bytes)
{
    unsigned char *p = c->be->i.alloc_host ? c->be->i.alloc_host(c->be, bytes) : malloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

static void image_free(lg_adapter_cache *c, unsigned char *p)
{
    if (!p)
        return;
    if (c->be->i.alloc_host)
        c->be->i.free_host(c->be, p);
    else
        free(p);
}

static void entry_free_host(lg_adapter_cache *c, entry *e)
{
    if (!e->image)
        return;
    c->be->i.sync(c->be); /* an upload from the image may still be in flight */
    image_free(c, e->image);
    e->image = NULL;
    c->st.host_bytes -= (size_t)e->n_pages * c->page_bytes;
    c->st.host_evictions++;
}

void lg_adapter_cache_free(lg_adapter_cache *c)
{
    if (!c)
        return;
    if (c->n)
        c->be->i.sync(c->be);
    for (int i = 0; i < c->n; i++) {
        entry *e = c->e[i];
        if (e->resident)
            lg_page_pool_entry_drop(c->pool, &e->pe);
        else if (e->loading)
            lg_page_pool_release(c->pool, e->pages, e->n_pages);
        free(e->name);
        free(e->dir);
        free(e->page_used);
        free(e->rank);
        free(e->scale);
        free(e->pa);
        free(e->pb);
        image_free(c, e->image);
        free(e->pages);
        free(e->slots);
        free(e);
    }
    free(c->e);
    free(c);
}

/* First-fit placement of `bytes` in the adapter's pages. */
static placed place(lg_adapter_cache *c, entry *e, size_t bytes)
{
    for (int p = 0; p < e->n_pages; p++) {
        size_t off = (e->page_used[p] + 255) & ~(size_t)255;
        if (off + bytes <= c->page_bytes) {
            e->page_used[p] = off + bytes;
            return (placed){p, off};
        }
    }
    e->page_used[e->n_pages] = bytes;
    return (placed){e->n_pages++, 0};
}

/* Computes the layout (first call) and fills the image from a loaded adapter. */
static int build_image(lg_adapter_cache *c, entry *e, const lg_adapter *a, bool layout, lg_err *err)
{
    int nm = lg_adapter_n_modules(a);
    if (layout) {
        /* at most two pages per module */
        e->page_used = calloc((size_t)(2 * nm + 1), sizeof(size_t));
        e->rank = calloc((size_t)c->n_slots, sizeof(int32_t));
        e->scale = calloc((size_t)c->n_slots, sizeof(float));
        e->pa = calloc((size_t)c->n_slots, sizeof(placed));
        e->pb = calloc((size_t)c->n_slots, sizeof(placed));
        if (!e->page_used || !e->rank || !e->scale || !e->pa || !e->pb)
            return lg_fail(err, "out of memory");
        e->n_pages = 0;
        for (int i = 0; i < nm; i++) {
            const lg_lora_module *m = lg_adapter_module(a, i);
            int s = m->layer * LG_LORA_N_MODULES + (int)m->target;
            size_t es = lg_dtype_size(c->dt);
            e->rank[s] = m->rank;
            e->scale[s] = m->scale;
            e->pa[s] = place(c, e, (size_t)m->rank * (size_t)m->in_dim * es);
            e->pb[s] = place(c, e, (size_t)m->out_dim * (size_t)m->rank * es);
        }
        if (e->n_pages == 0)
            return lg_fail(err, "adapter has no modules");
    }
    size_t bytes = (size_t)e->n_pages * c->page_bytes;
    e->image = image_alloc(c, bytes);
    if (!e->image)
        return lg_fail(err, "out of memory for a %zu-byte adapter image", bytes);
    float *tmp = NULL;
    size_t tmp_n = 0;
    for (int i = 0; i < nm; i++) {
        const lg_lora_module *m = lg_adapter_module(a, i);
        int s = m->layer * LG_LORA_N_MODULES + (int)m->target;
        size_t na = (size_t)m->rank * m->in_dim, nb = (size_t)m->out_dim * m->rank;
        size_t mx = na > nb ? na : nb;
        if (mx > tmp_n) {
            float *t = realloc(tmp, mx * sizeof(float));
            if (!t) {
                free(tmp);
                return lg_fail(err, "out of memory");
            }
            tmp = t;
            tmp_n = mx;
        }
        lg_to_f32(tmp, m->A, lg_adapter_dtype(a), na);
        lg_from_f32(e->image + (size_t)e->pa[s].page * c->page_bytes + e->pa[s].off, c->dt, tmp, na);
        lg_to_f32(tmp, m->B, lg_adapter_dtype(a), nb);
        lg_from_f32(e->image + (size_t)e->pb[s].page * c->page_bytes + e->pb[s].off, c->dt, tmp, nb);
    }
    free(tmp);
    c->st.host_bytes += bytes;
    c->st.host_loads++;
    e->host_tick = ++c->tick;
    return 0;
}

/* Evicts host images (LRU, never `keep`) until the budget holds. */
static void trim_host(lg_adapter_cache *c, const entry *keep)
{
    while (c->st.host_bytes > c->opts.host_bytes) {
        entry *victim = NULL;
        for (int i = 0; i < c->n; i++) {
            entry *e = c->e[i];
            if (e != keep && e->image && !e->loading && (!victim || e->host_tick < victim->host_tick))
                victim = e;
        }
        if (!victim)
            return;
        entry_free_host(c, victim);
    }
}

int lg_adapter_cache_register(lg_adapter_cache *c, const char *name, const char *dir, int *id, lg_err *err)
{
    if (lg_adapter_cache_find(c, name) >= 0)
        return lg_fail(err, "an adapter named '%s' is already loaded", name);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        entry **ne = realloc(c->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return lg_fail(err, "out of memory");
        c->e = ne;
        c->cap = cap;
    }
    lg_adapter *a = NULL;
    if (lg_adapter_load(dir, name, &c->cfg, c->opts.max_rank, &a, err) != 0)
        return -1;
    entry *e = calloc(1, sizeof *e);
    if (!e) {
        lg_adapter_free(a);
        return lg_fail(err, "out of memory");
    }
    e->name = strdup(name);
    e->dir = strdup(dir);
    memcpy(e->digest, lg_adapter_digest(a), 64);
    int rc = e->name && e->dir ? build_image(c, e, a, true, err) : lg_fail(err, "out of memory");
    lg_adapter_free(a);
    if (rc == 0) {
        e->pages = malloc((size_t)e->n_pages * sizeof(int32_t));
        e->slots = calloc((size_t)c->n_slots, sizeof(lg_lora_w));
        if (!e->pages || !e->slots)
            rc = lg_fail(err, "out of memory");
    }
    if (rc != 0) {
        if (e->image) c->st.host_bytes -= (size_t)e->n_pages * c->page_bytes;
        free(e->name); free(e->dir); free(e->page_used); free(e->rank); free(e->scale);
        free(e->pa); free(e->pb); image_free(c, e->image); free(e->pages); free(e->slots);
        free(e);
        return -1;
    }
    c->e[c->n] = e;
    *id = c->n++;
    c->st.registered = c->n;
    trim_host(c, e);
    return 0;
}

int lg_adapter_cache_find(const lg_adapter_cache *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i]->name, name))
            return i;
    return -1;
}

const char *lg_adapter_cache_name(const lg_adapter_cache *c, int id)
{
    return id >= 0 && id < c->n ? c->e[id]->name : NULL;
}

const char *lg_adapter_cache_digest(const lg_adapter_cache *c, int id)
{
    return id >= 0 && id < c->n ? c->e[id]->digest : NULL;
}

static void on_evict(void *owner, lg_pool_entry *pe)
{
    lg_adapter_cache *c = owner;
    entry *e = (entry *)((char *)pe - offsetof(entry, pe)); /* pe is embedded in its entry */
    e->resident = false;
    c->st.resident--;
    c->st.pool_evictions++;
}

int lg_adapter_cache_acquire(lg_adapter_cache *c, int id, const lg_lora_w **slots, lg_err *err)
{
    if (id < 0 || id >= c->n)
        return lg_fail(err, "no adapter with id %d", id);
    entry *e = c->e[id];
    if (e->resident) {
        lg_page_pool_pin(c->pool, &e->pe);
        *slots = e->slots;
        return 0;
    }
    if (!e->loading && lg_page_pool_n_available(c->pool) < e->n_pages)
        return 1;
    if (!e->loading && !e->image) { /* rebuild the host image from disk */
        lg_adapter *a = NULL;
        if (lg_adapter_load(e->dir, e->name, &c->cfg, c->opts.max_rank, &a, err) != 0) {
            lg_err_prefix(err, "reloading adapter '%s'", e->name);
            return -1;
        }
        if (memcmp(lg_adapter_digest(a), e->digest, 64) != 0) {
            lg_adapter_free(a);
            return lg_fail(err, "adapter '%s' changed on disk since it was loaded (digest differs)", e->name);
        }
        int rc = build_image(c, e, a, false, err);
        lg_adapter_free(a);
        if (rc != 0)
            return -1;
        trim_host(c, e);
    }
    char *base = lg_page_pool_base(c->pool);
    if (e->loading) { /* an async upload was started by an earlier call */
        int d = c->be->i.upload_done(c->be, e->ticket);
        if (d == 0)
            return 1;
        e->loading = false;
        if (d < 0) {
            lg_page_pool_release(c->pool, e->pages, e->n_pages);
            return lg_fail(err, "uploading adapter '%s' failed", e->name);
        }
        goto placed;
    }
    e->host_tick = ++c->tick;
    if (lg_page_pool_alloc(c->pool, LG_PAGE_ADAPTER, e->n_pages, e->pages) != 0)
        return 1;
    if (c->be->i.upload_async) {
        /* copy on the upload stream; the requests that need it wait, the rest run */
        bool any = false;
        for (int p = 0; p < e->n_pages; p++) {
            if (c->be->i.upload_async(c->be, base + (size_t)e->pages[p] * c->page_bytes,
                                      e->image + (size_t)p * c->page_bytes, e->page_used[p], &e->ticket) != 0) {
                /* earlier copies may still be writing into the pages: wait for
                 * them (copies finish in ticket order) before freeing them */
                while (any && c->be->i.upload_done(c->be, e->ticket) == 0)
                    ;
                lg_page_pool_release(c->pool, e->pages, e->n_pages);
                return lg_fail(err, "uploading adapter '%s' failed", e->name);
            }
            any = true;
        }
        e->loading = true;
        return 1;
    }
    for (int p = 0; p < e->n_pages; p++)
        if (c->be->i.upload(c->be, base + (size_t)e->pages[p] * c->page_bytes, e->image + (size_t)p * c->page_bytes,
                            e->page_used[p]) != 0) {
            lg_page_pool_release(c->pool, e->pages, e->n_pages);
            return lg_fail(err, "uploading adapter '%s' failed", e->name);
        }
placed:
    for (int s = 0; s < c->n_slots; s++) {
        lg_lora_w *w = &e->slots[s];
        w->rank = e->rank[s];
        w->scale = e->scale[s];
        w->A = w->rank ? base + (size_t)e->pages[e->pa[s].page] * c->page_bytes + e->pa[s].off : NULL;
        w->B = w->rank ? base + (size_t)e->pages[e->pb[s].page] * c->page_bytes + e->pb[s].off : NULL;
    }
    e->pe = (lg_pool_entry){.kind = LG_PAGE_ADAPTER, .pages = e->pages, .n_pages = e->n_pages, .evict = on_evict,
                            .owner = c};
    lg_page_pool_entry_add(c->pool, &e->pe);
    e->resident = true;
    c->st.resident++;
    c->st.pool_loads++;
    *slots = e->slots;
    return 0;
}

void lg_adapter_cache_poll(lg_adapter_cache *c)
{
    /* finished uploads whose requests went away would otherwise hold their
     * pages (raw, unevictable) until the adapter is asked for again: make
     * them resident and idle (cached) */
    for (int i = 0; i < c->n; i++) {
        entry *e = c->e[i];
        if (!e->loading || c->be->i.upload_done(c->be, e->ticket) == 0)
            continue;
        const lg_lora_w *slots;
        lg_err err;
        if (lg_adapter_cache_acquire(c, i, &slots, &err) == 0)
            lg_page_pool_unpin(c->pool, &e->pe);
    }
}

void lg_adapter_cache_release(lg_adapter_cache *c, int id)
{
    if (id >= 0 && id < c->n && c->e[id]->resident)
        lg_page_pool_unpin(c->pool, &c->e[id]->pe);
}

void lg_adapter_cache_get_stats(const lg_adapter_cache *c, lg_adapter_cache_stats *s) { *s = c->st; }
