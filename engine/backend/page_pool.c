/*
 * page_pool.c — see page_pool.h.
 *
 * Bookkeeping: a LIFO stack of free page indices (recently freed pages are
 * warm), a per-page state byte (guards against double release and feeds the
 * counters), and a doubly linked LRU list of cached entries (head = least
 * recently used). Allocation is O(pages taken + entries evicted).
 */
#include "engine/backend/page_pool.h"

#include <stdlib.h>

enum { PG_FREE = 0, PG_RAW = 1, PG_ENTRY = 2 };

#define POOL_MAX_RANKS 16

struct lg_page_pool {
    lg_backend *be;
    bool host;                /* base from alloc_host (or malloc), not alloc */
    void *base;
    /* one arena a rank (a tensor-parallel pool), the same page ids in each; rank 0's is be / base */
    int n_ranks;
    lg_backend *rank_be[POOL_MAX_RANKS];
    void *rank_base[POOL_MAX_RANKS];
    size_t page_bytes;
    int n_pages;
    int32_t *free_stack;
    int n_free;
    uint8_t *state;           /* [n_pages] PG_* */
    uint8_t *kind;            /* [n_pages] lg_page_kind when not free */
    int by_kind[2];
    int n_cached;             /* pages in cached entries */
    lg_pool_entry *lru_head, *lru_tail;
    int64_t evictions[2];
};

static int pool_create(lg_backend *be, bool host, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err)
{
    *out = NULL;
    size_t total;
    if (n_pages <= 0 || page_bytes == 0 || !lg_mul_ok(page_bytes, (size_t)n_pages, &total))
        return lg_fail(err, "page pool: bad size (%d pages of %zu bytes)", n_pages, page_bytes);
    lg_page_pool *p = calloc(1, sizeof *p);
    if (!p)
        return lg_fail(err, "page pool: out of memory");
    p->be = be;
    p->n_ranks = 1;
    p->rank_be[0] = be;
    p->host = host;
    p->page_bytes = page_bytes;
    p->n_pages = n_pages;
    if (host)
        p->base = be && be->i.alloc_host ? be->i.alloc_host(be, total) : malloc(total);
    else
        p->base = be ? be->i.alloc(be, total) : malloc(total);
    p->free_stack = malloc((size_t)n_pages * sizeof(int32_t));
    p->state = calloc((size_t)n_pages, 1);
    p->kind = calloc((size_t)n_pages, 1);
    if (!p->base || !p->free_stack || !p->state || !p->kind) {
        lg_page_pool_free(p);
        return lg_fail(err, "page pool: cannot allocate %zu bytes (%d pages of %zu)", total, n_pages, page_bytes);
    }
    for (int i = 0; i < n_pages; i++) p->free_stack[i] = n_pages - 1 - i; /* page 0 on top */
    p->n_free = n_pages;
    *out = p;
    return 0;
}

int lg_page_pool_create(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err)
{
    return pool_create(be, false, page_bytes, n_pages, out, err);
}

int lg_page_pool_create_ranks(lg_backend *const *bes, int n_ranks, size_t page_bytes, int n_pages,
                              lg_page_pool **out, lg_err *err)
{
    if (n_ranks < 1 || n_ranks > POOL_MAX_RANKS)
        return lg_fail(err, "page pool: %d ranks (1..%d)", n_ranks, POOL_MAX_RANKS);
    if (lg_page_pool_create(bes[0], page_bytes, n_pages, out, err) != 0)
        return -1;
    lg_page_pool *p = *out;
    for (int r = 1; r < n_ranks; r++) {
        p->rank_be[r] = bes[r];
        p->rank_base[r] = bes[r]->i.alloc(bes[r], page_bytes * (size_t)n_pages);
        p->n_ranks = r + 1;
        if (!p->rank_base[r]) {
            lg_page_pool_free(p);
            *out = NULL;
            return lg_fail(err, "page pool: cannot allocate %zu bytes (%d pages of %zu) on rank %d",
                           page_bytes * (size_t)n_pages, n_pages, page_bytes, r);
        }
    }
    return 0;
}

int lg_page_pool_create_host(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err)
{
    return pool_create(be, true, page_bytes, n_pages, out, err);
}

void lg_page_pool_free(lg_page_pool *p)
{
    if (!p)
        return;
    for (int r = 1; r < p->n_ranks; r++)
        if (p->rank_base[r])
            p->rank_be[r]->i.dealloc(p->rank_be[r], p->rank_base[r]);
    if (p->base) {
        if (p->host && p->be && p->be->i.alloc_host)
            p->be->i.free_host(p->be, p->base);
        else if (!p->host && p->be)
            p->be->i.dealloc(p->be, p->base);
        else
            free(p->base);
    }
    free(p->free_stack);
    free(p->state);
    free(p->kind);
    free(p);
}

void *lg_page_pool_base(const lg_page_pool *p) { return p->base; }
int lg_page_pool_n_ranks(const lg_page_pool *p) { return p->n_ranks; }
void *lg_page_pool_rank_base(const lg_page_pool *p, int rank) { return rank == 0 ? p->base : p->rank_base[rank]; }
lg_backend *lg_page_pool_rank_backend(const lg_page_pool *p, int rank) { return p->rank_be[rank]; }
size_t lg_page_pool_page_bytes(const lg_page_pool *p) { return p->page_bytes; }
int lg_page_pool_n_pages(const lg_page_pool *p) { return p->n_pages; }
int lg_page_pool_n_free(const lg_page_pool *p) { return p->n_free; }
int lg_page_pool_n_available(const lg_page_pool *p) { return p->n_free + p->n_cached; }

void lg_page_pool_stats(const lg_page_pool *p, lg_pool_stats *s)
{
    s->pages_total = p->n_pages;
    s->pages_free = p->n_free;
    s->pages_kv = p->by_kind[LG_PAGE_KV];
    s->pages_adapter = p->by_kind[LG_PAGE_ADAPTER];
    s->pages_cached = p->n_cached;
    s->evictions_kv = p->evictions[LG_PAGE_KV];
    s->evictions_adapter = p->evictions[LG_PAGE_ADAPTER];
}

static void lru_unlink(lg_page_pool *p, lg_pool_entry *e)
{
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
    else p->lru_head = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
    else p->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_mru(lg_page_pool *p, lg_pool_entry *e)
{
    e->lru_next = NULL;
    e->lru_prev = p->lru_tail;
    if (p->lru_tail) p->lru_tail->lru_next = e;
    else p->lru_head = e;
    p->lru_tail = e;
}

static void free_pages(lg_page_pool *p, const int32_t *pages, int n, int expect_state)
{
    for (int i = 0; i < n; i++) {
        int32_t pg = pages[i];
        if (pg < 0 || pg >= p->n_pages || p->state[pg] != expect_state)
            continue; /* double release or foreign page: ignore rather than corrupt the stack */
        p->state[pg] = PG_FREE;
        p->by_kind[p->kind[pg]]--;
        p->free_stack[p->n_free++] = pg;
    }
}

/* Evicts the entry (cached, in the LRU): frees its pages, tells the owner. */
static void evict(lg_page_pool *p, lg_pool_entry *e)
{
    lru_unlink(p, e);
    p->n_cached -= e->n_pages;
    free_pages(p, e->pages, e->n_pages, PG_ENTRY);
    e->live = false;
    p->evictions[e->kind]++;
    if (e->evict)
        e->evict(e->owner, e);
}

int lg_page_pool_alloc(lg_page_pool *p, lg_page_kind kind, int n, int32_t *out)
{
    if (n < 0 || n > p->n_free + p->n_cached)
        return -1;
    while (p->n_free < n && p->lru_head)
        evict(p, p->lru_head);
    if (p->n_free < n)
        return -1; /* unreachable: n_cached counts exactly the LRU's pages */
    for (int i = 0; i < n; i++) {
        int32_t pg = p->free_stack[--p->n_free];
        p->state[pg] = PG_RAW;
        p->kind[pg] = (uint8_t)kind;
        p->by_kind[kind]++;
        out[i] = pg;
    }
    return 0;
}

void lg_page_pool_release(lg_page_pool *p, const int32_t *pages, int n) { free_pages(p, pages, n, PG_RAW); }

void lg_page_pool_entry_add(lg_page_pool *p, lg_pool_entry *e)
{
    for (int i = 0; i < e->n_pages; i++) {
        int32_t pg = e->pages[i];
        if (pg >= 0 && pg < p->n_pages && p->state[pg] == PG_RAW)
            p->state[pg] = PG_ENTRY;
    }
    e->pins = 1;
    e->live = true;
    e->lru_prev = e->lru_next = NULL;
}

void lg_page_pool_pin(lg_page_pool *p, lg_pool_entry *e)
{
    if (!e->live)
        return;
    if (e->pins++ == 0) {
        lru_unlink(p, e);
        p->n_cached -= e->n_pages;
    }
}

void lg_page_pool_unpin(lg_page_pool *p, lg_pool_entry *e)
{
    if (!e->live || e->pins <= 0)
        return;
    if (--e->pins == 0) {
        lru_push_mru(p, e);
        p->n_cached += e->n_pages;
    }
}

void lg_page_pool_entry_drop(lg_page_pool *p, lg_pool_entry *e)
{
    if (!e->live)
        return;
    if (e->pins == 0) {
        lru_unlink(p, e);
        p->n_cached -= e->n_pages;
    }
    free_pages(p, e->pages, e->n_pages, PG_ENTRY);
    e->live = false;
    e->pins = 0;
}
