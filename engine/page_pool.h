/*
 * page_pool.h — one backend-memory arena cut into equal pages.
 *
 * Today the pages hold KV-cache blocks (page_tokens tokens x all layers x
 * K and V); the pool is where adapter weights will live too (unified
 * paging, see docs/architecture.md), so it knows nothing about what a page
 * holds: callers get page indices, and address page p at
 * base + p * page_bytes. One allocation for the whole arena; pages are never
 * moved or defragmented.
 *
 * Free pages are kept on a LIFO stack (recently freed pages are warm in
 * cache). Not thread-safe: owned by the engine thread.
 */
#ifndef LG_PAGE_POOL_H
#define LG_PAGE_POOL_H

#include "backend.h"
#include "common.h"

typedef struct lg_page_pool lg_page_pool;

int lg_page_pool_create(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err);
void lg_page_pool_free(lg_page_pool *p); /* NULL is a no-op */

void *lg_page_pool_base(const lg_page_pool *p);
size_t lg_page_pool_page_bytes(const lg_page_pool *p);
int lg_page_pool_n_pages(const lg_page_pool *p);
int lg_page_pool_n_free(const lg_page_pool *p);

/* Takes n free pages into out[]; returns 0, or -1 (taking none) if fewer than
 * n are free. */
int lg_page_pool_alloc(lg_page_pool *p, int n, int32_t *out);
/* Returns pages to the free stack. */
void lg_page_pool_release(lg_page_pool *p, const int32_t *pages, int n);

#endif
