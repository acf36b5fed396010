/*
 * page_pool.c — see page_pool.h.
 */
#include "page_pool.h"

#include <stdlib.h>

struct lg_page_pool {
    lg_backend *be;
    void *base;         /* n_pages * page_bytes of backend memory */
    size_t page_bytes;
    int n_pages;
    int32_t *free_stack; /* [n_pages]; the top n_free entries are free pages */
    int n_free;
    uint8_t *in_use;     /* [n_pages] guards against double release */
};

int lg_page_pool_create(lg_backend *be, size_t page_bytes, int n_pages, lg_page_pool **out, lg_err *err)
{
    *out = NULL;
    size_t total;
    if (n_pages <= 0 || page_bytes == 0 || !lg_mul_ok(page_bytes, (size_t)n_pages, &total))
        return lg_fail(err, "page pool: bad size (%d pages of %zu bytes)", n_pages, page_bytes);
    lg_page_pool *p = calloc(1, sizeof *p);
    if (!p)
        return lg_fail(err, "page pool: out of memory");
    p->be = be;
    p->page_bytes = page_bytes;
    p->n_pages = n_pages;
    p->base = be->i.alloc(be, total);
    p->free_stack = malloc((size_t)n_pages * sizeof(int32_t));
    p->in_use = calloc((size_t)n_pages, 1);
    if (!p->base || !p->free_stack || !p->in_use) {
        lg_page_pool_free(p);
        return lg_fail(err, "page pool: cannot allocate %zu bytes (%d pages of %zu) on backend %s", total, n_pages,
                       page_bytes, be->i.name);
    }
    /* lowest page index on top */
    for (int i = 0; i < n_pages; i++) p->free_stack[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    *out = p;
    return 0;
}

void lg_page_pool_free(lg_page_pool *p)
{
    if (!p)
        return;
    if (p->base)
        p->be->i.dealloc(p->be, p->base);
    free(p->free_stack);
    free(p->in_use);
    free(p);
}

void *lg_page_pool_base(const lg_page_pool *p) { return p->base; }
size_t lg_page_pool_page_bytes(const lg_page_pool *p) { return p->page_bytes; }
int lg_page_pool_n_pages(const lg_page_pool *p) { return p->n_pages; }
int lg_page_pool_n_free(const lg_page_pool *p) { return p->n_free; }

int lg_page_pool_alloc(lg_page_pool *p, int n, int32_t *out)
{
    if (n < 0 || n > p->n_free)
        return -1;
    for (int i = 0; i < n; i++) {
        int32_t pg = p->free_stack[--p->n_free];
        p->in_use[pg] = 1;
        out[i] = pg;
    }
    return 0;
}

void lg_page_pool_release(lg_page_pool *p, const int32_t *pages, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t pg = pages[i];
        if (pg < 0 || pg >= p->n_pages || !p->in_use[pg])
            continue; /* double release: ignore rather than corrupt the stack */
        p->in_use[pg] = 0;
        p->free_stack[p->n_free++] = pg;
    }
}
