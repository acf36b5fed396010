/*
 * page_pool.h — the unified page pool: one backend-memory arena cut into
 * equal pages that hold both KV-cache blocks and LoRA adapter weights
 * (S-LoRA's unified paging). There is no static split between the two
 * kinds: whichever needs pages takes them, and idle data of either kind is
 * evicted least-recently-used first.
 *
 * A page is in one of three states:
 *   free    — on the free stack;
 *   pinned  — in use: a running sequence's KV block, or the weights of an
 *             adapter some scheduled sequence uses;
 *   cached  — valid data nobody uses right now (an idle adapter; later, a
 *             prefix-cache KV block). Cached pages belong to an *entry*
 *             (lg_pool_entry: a group of pages evicted together) sitting in
 *             one LRU list shared by both kinds.
 * Allocation takes free pages first, then evicts cached entries from the
 * LRU end (calling the entry's evict callback so its owner forgets the
 * pages) until enough pages are free. It never touches pinned pages, and
 * it evicts nothing when even evicting everything would not be enough.
 *
 * Callers address page p at base + p * page_bytes; pages never move, so
 * kernels reach data through plain pointers into pages. One allocation for
 * the whole arena. Not thread-safe: owned by the engine thread.
 */
#ifndef LG_PAGE_POOL_H
#define LG_PAGE_POOL_H

#include "engine/backend/backend.h"
#include "engine/base/common.h"

typedef enum lg_page_kind {
    LG_PAGE_KV = 0,
    LG_PAGE_ADAPTER = 1,
} lg_page_kind;

typedef struct lg_page_pool lg_page_pool;
typedef struct lg_pool_entry lg_pool_entry;

/* Called when the pool evicts a cached entry; its pages are already free.
 * The owner must not touch the entry's pages afterwards. */
typedef void (*lg_pool_evict_fn)(void *owner, lg_pool_entry *e);

struct lg_pool_entry {
    lg_page_kind kind;
    int32_t *pages;          /* owned by the caller */
    int n_pages;
    int pins;                /* > 0: pinned; 0: cached (in the LRU) */
    lg_pool_evict_fn evict;
    void *owner;
    lg_pool_entry *lru_prev, *lru_next; /* internal */
    bool live;                          /* internal: registered */
};

typedef struct lg_pool_stats {
    int pages_total, pages_free;
    int pages_kv, pages_adapter;       /* allocated (pinned or cached) by kind */
    int pages_cached;                  /* of those, cached (evictable) */
    int64_t evictions_kv, evictions_adapter; /* entries evicted */
} lg_pool_stats;

int lg_page_pool_create(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err);
/* The same arena in host memory: page-locked (be->i.alloc_host) when the
 * backend has it, else malloc. The adapter host tier is such a pool. */
int lg_page_pool_create_host(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err);
void lg_page_pool_free(lg_page_pool *p); /* NULL is a no-op */

/* A tensor-parallel pool (engine/model/model_tp.c): one arena of n_pages pages of page_bytes on each
 * rank's backend, bes[r] rank r (bes[0] is the pool's backend, as lg_page_pool_create's be). Page p
 * means the same slot on every rank (rank r's page p holds rank r's shard: its KV heads, its slice of
 * an adapter), so the allocator, the prefix cache and the scheduler see one pool. */
int lg_page_pool_create_ranks(lg_backend *const *bes, int n_ranks, size_t page_bytes, int n_pages,
                              lg_page_pool **out, lg_err *err);
void *lg_page_pool_base(const lg_page_pool *p);
/* Ranks of the pool (1 unless made by lg_page_pool_create_ranks), and rank r's arena and backend
 * (rank 0: lg_page_pool_base and the pool's backend). */
int lg_page_pool_n_ranks(const lg_page_pool *p);
void *lg_page_pool_rank_base(const lg_page_pool *p, int rank);
lg_backend *lg_page_pool_rank_backend(const lg_page_pool *p, int rank);
size_t lg_page_pool_page_bytes(const lg_page_pool *p);
int lg_page_pool_n_pages(const lg_page_pool *p);
int lg_page_pool_n_free(const lg_page_pool *p);
/* Pages that an allocation could get now: free + cached. */
int lg_page_pool_n_available(const lg_page_pool *p);
void lg_page_pool_stats(const lg_page_pool *p, lg_pool_stats *s);

/* Takes n pages of `kind` into out[] (pinned, not part of any entry),
 * evicting cached entries LRU-first if needed. Returns 0, or -1 (taking and
 * evicting nothing) if fewer than n are available. */
int lg_page_pool_alloc(lg_page_pool *p, lg_page_kind kind, int n, int32_t *out);
/* Returns pinned pages that belong to no entry to the free stack. */
void lg_page_pool_release(lg_page_pool *p, const int32_t *pages, int n);

/* Makes e (pages already allocated with lg_page_pool_alloc, same kind) an
 * entry with one pin. */
void lg_page_pool_entry_add(lg_page_pool *p, lg_pool_entry *e);
void lg_page_pool_pin(lg_page_pool *p, lg_pool_entry *e);
/* Drops one pin; at zero the entry becomes cached (most recently used). */
void lg_page_pool_unpin(lg_page_pool *p, lg_pool_entry *e);
/* Frees an entry's pages now (pinned or cached); no evict callback. */
void lg_page_pool_entry_drop(lg_page_pool *p, lg_pool_entry *e);

#endif
