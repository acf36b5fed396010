/*
 * test_prefix_cache.c — the radix tree of engine/runtime/prefix_cache.h on a page
 * pool in host memory (be = NULL), without a model.
 *
 * What is checked, and why:
 *   - namespaces: lg_pc_ns_make differs when the isolation domain, the
 *     adapter digest or the salt differs (and is length-prefixed, so
 *     ("ab","c") and ("a","bc") differ); NULL means ""; a chain inserted in
 *     one namespace is never matched from another (isolation);
 *   - match / insert: the longest chain of full pages, stopping at the first
 *     page whose tokens differ and at max_pages; a duplicate insert (the
 *     same page computed twice) hands back the existing node's page;
 *   - pins: a matched or inserted node is pinned (its page cannot be
 *     evicted: an allocation that would need it fails and evicts nothing);
 *     released nodes are cached in the pool's LRU shared with everything
 *     else, and the pool evicts them leaves first (release unpins deepest
 *     first); an inner node evicted before its children takes the cached
 *     children with it;
 *   - stats (nodes, namespaces, inserted, evicted, duplicates) and no page
 *     leaks: after releasing and freeing, the pool's free count is back to
 *     where it started;
 *   - a seeded random workload of "requests" (match, compute the rest,
 *     insert, hold, release) under pool pressure, where every computed page
 *     carries a signature of (namespace, tokens so far): every page the
 *     cache serves must carry the signature of the prefix asked for (it
 *     never serves another namespace's or another prefix's KV).
 */
#include "engine/runtime/prefix_cache.h"
#include "tests/unit/test.h"

#include <stdint.h>

#define P 4          /* tokens per page */
#define PAGE_BYTES 64

static lg_pool_stats pstats(const lg_page_pool *p)
{
    lg_pool_stats s;
    lg_page_pool_stats(p, &s);
    return s;
}

static lg_prefix_cache_stats cstats(const lg_prefix_cache *pc)
{
    lg_prefix_cache_stats s;
    lg_prefix_cache_get_stats(pc, &s);
    return s;
}

static bool ns_eq(const lg_pc_ns *a, const lg_pc_ns *b) { return !memcmp(a->b, b->b, sizeof a->b); }

static void test_namespaces(void)
{
    lg_pc_ns a, b;
    lg_pc_ns_make(&a, "tenant1", "digest", "salt");
    lg_pc_ns_make(&b, "tenant1", "digest", "salt");
    CHECK(ns_eq(&a, &b));
    lg_pc_ns_make(&b, "tenant2", "digest", "salt");
    CHECK(!ns_eq(&a, &b));
    lg_pc_ns_make(&b, "tenant1", "digest2", "salt");
    CHECK(!ns_eq(&a, &b));
    lg_pc_ns_make(&b, "tenant1", "digest", "salt2");
    CHECK(!ns_eq(&a, &b));
    lg_pc_ns_make(&b, "tenant1", "digest", NULL);
    CHECK(!ns_eq(&a, &b));
    /* NULL counts as "" */
    lg_pc_ns_make(&a, NULL, NULL, NULL);
    lg_pc_ns_make(&b, "", "", "");
    CHECK(ns_eq(&a, &b));
    /* length-prefixed: moving bytes between fields changes the namespace */
    lg_pc_ns_make(&a, "ab", "c", "");
    lg_pc_ns_make(&b, "a", "bc", "");
    CHECK(!ns_eq(&a, &b));
    lg_pc_ns_make(&a, "", "x", "");
    lg_pc_ns_make(&b, "", "", "x");
    CHECK(!ns_eq(&a, &b));
}

/* A "request" computing pages [from, to) of tokens after the chain nodes[0,
 * from): allocates a page per page, offers it; returns pages that ended in
 * the tree (== to unless the pool ran dry). Duplicates give back the
 * caller's own page, as engine/runtime/scheduler.c does. */
static int compute_and_insert(lg_page_pool *pool, lg_prefix_cache *pc, const lg_pc_ns *ns, const int32_t *tokens,
                              int from, int to, int32_t *pages, lg_pc_node **nodes)
{
    for (int k = from; k < to; k++) {
        int32_t pg;
        if (lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &pg) != 0)
            return k;
        int32_t got;
        lg_pc_node *x = lg_prefix_cache_insert(pc, ns, k ? nodes[k - 1] : NULL, tokens + k * P, pg, &got);
        if (!x) {
            lg_page_pool_release(pool, &pg, 1);
            return k;
        }
        if (got != pg)
            lg_page_pool_release(pool, &pg, 1);
        pages[k] = got;
        nodes[k] = x;
    }
    return to;
}

static void test_basic(void)
{
    lg_err err = {{0}};
    lg_page_pool *pool;
    lg_prefix_cache *pc;
    CHECK(lg_page_pool_create(NULL, PAGE_BYTES, 8, &pool, &err) == 0);
    CHECK(lg_prefix_cache_create(pool, P, &pc, &err) == 0);
    CHECK(lg_prefix_cache_create(pool, 0, &(lg_prefix_cache *){NULL}, &err) != 0);
    int free0 = lg_page_pool_n_free(pool);

    lg_pc_ns ns1, ns2;
    lg_pc_ns_make(&ns1, "t1", "", "");
    lg_pc_ns_make(&ns2, "t2", "", "");
    int32_t toks[4 * P], other[4 * P];
    for (int i = 0; i < 4 * P; i++) toks[i] = other[i] = 100 + i;
    other[2 * P + 1] = 7; /* differs in page 2 */

    int32_t pages[4], pages2[4];
    lg_pc_node *nodes[4], *nodes2[4];
    CHECK(lg_prefix_cache_match(pc, &ns1, toks, 4, pages, nodes) == 0); /* empty */

    /* a request computes 3 pages and offers them */
    CHECK(compute_and_insert(pool, pc, &ns1, toks, 0, 3, pages, nodes) == 3);
    lg_prefix_cache_stats cs = cstats(pc);
    CHECK(cs.nodes == 3 && cs.namespaces == 1 && cs.inserted == 3 && cs.duplicates == 0 && cs.evicted == 0);
    lg_pool_stats ps = pstats(pool);
    CHECK(ps.pages_kv == 3 && ps.pages_cached == 0 && ps.pages_free == free0 - 3);

    /* while it holds them, a second request of the namespace matches them */
    CHECK(lg_prefix_cache_match(pc, &ns1, toks, 4, pages2, nodes2) == 3);
    CHECK(!memcmp(pages, pages2, sizeof(int32_t) * 3) && nodes2[2] == nodes[2]);
    lg_prefix_cache_release(pc, nodes2, 3);
    /* max_pages limits the match (the caller never matches its last token's page) */
    CHECK(lg_prefix_cache_match(pc, &ns1, toks, 2, pages2, nodes2) == 2);
    lg_prefix_cache_release(pc, nodes2, 2);
    /* a different token in page 2 stops the match there */
    CHECK(lg_prefix_cache_match(pc, &ns1, other, 4, pages2, nodes2) == 2);
    lg_prefix_cache_release(pc, nodes2, 2);
    /* another namespace sees nothing */
    CHECK(lg_prefix_cache_match(pc, &ns2, toks, 4, pages2, nodes2) == 0);

    /* duplicate: another request computed page 0 and page 1 itself (it
     * arrived before the first inserted them): it gets the tree's pages and
     * gives its own back */
    int32_t mine[2];
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 2, mine) == 0);
    int32_t got;
    lg_pc_node *d0 = lg_prefix_cache_insert(pc, &ns1, NULL, toks, mine[0], &got);
    CHECK(d0 == nodes[0] && got == pages[0]);
    lg_page_pool_release(pool, &mine[0], 1);
    lg_pc_node *d1 = lg_prefix_cache_insert(pc, &ns1, d0, toks + P, mine[1], &got);
    CHECK(d1 == nodes[1] && got == pages[1]);
    lg_page_pool_release(pool, &mine[1], 1);
    cs = cstats(pc);
    CHECK(cs.duplicates == 2 && cs.inserted == 3 && cs.nodes == 3);
    lg_prefix_cache_release(pc, (lg_pc_node *[]){d0, d1}, 2);
    CHECK(pstats(pool).pages_free == free0 - 3);

    /* the same tokens in another namespace are separate pages */
    CHECK(compute_and_insert(pool, pc, &ns2, toks, 0, 1, pages2, nodes2) == 1);
    CHECK(pages2[0] != pages[0]);
    cs = cstats(pc);
    CHECK(cs.nodes == 4 && cs.namespaces == 2);

    /* pins prevent eviction: everything is pinned (4 tree pages), the other
     * 4 pages go to a raw allocation; one more fails and evicts nothing */
    int32_t raw[8];
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 4, raw) == 0);
    int32_t one;
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &one) != 0);
    CHECK(cstats(pc).nodes == 4 && cstats(pc).evicted == 0);

    /* release: cached, in the LRU. ns1's chain unpins 2, 1, 0 (deepest
     * first), then ns2's page */
    lg_prefix_cache_release(pc, nodes, 3);
    lg_prefix_cache_release(pc, nodes2, 1);
    ps = pstats(pool);
    CHECK(ps.pages_cached == 4 && ps.pages_free == 0);
    /* eviction takes the leaf of ns1's chain first */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &one) == 0);
    cs = cstats(pc);
    CHECK(cs.evicted == 1 && cs.nodes == 3);
    CHECK(lg_prefix_cache_match(pc, &ns1, toks, 4, pages2, nodes2) == 2);
    lg_prefix_cache_release(pc, nodes2, 2); /* now ns1's chain is the most recently used */
    /* next: ns2's page (least recently used now), then ns1's leaf again */
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &raw[4]) == 0);
    cs = cstats(pc);
    CHECK(cs.nodes == 2 && cs.namespaces == 1); /* ns2's root went with its last node */
    CHECK(lg_prefix_cache_match(pc, &ns2, toks, 4, pages2, nodes2) == 0);
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &raw[5]) == 0);
    CHECK(lg_prefix_cache_match(pc, &ns1, toks, 4, pages2, nodes2) == 1);
    lg_prefix_cache_release(pc, nodes2, 1);
    CHECK(cstats(pc).evicted == 3);

    /* give everything back: the pool is whole again */
    lg_page_pool_release(pool, raw, 6);
    lg_page_pool_release(pool, &one, 1);
    CHECK(pstats(pool).pages_free == free0 - 1 && pstats(pool).pages_cached == 1);
    lg_prefix_cache_free(pc);
    ps = pstats(pool);
    CHECK_MSG(ps.pages_free == free0 && ps.pages_kv == 0 && ps.pages_cached == 0, "free %d of %d, kv %d",
              ps.pages_free, free0, ps.pages_kv);
    lg_page_pool_free(pool);
}

/* An inner node that goes before its children (a caller that released out
 * of order) takes its cached children with it; the tree stays consistent. */
static void test_inner_eviction(void)
{
    lg_err err = {{0}};
    lg_page_pool *pool;
    lg_prefix_cache *pc;
    CHECK(lg_page_pool_create(NULL, PAGE_BYTES, 6, &pool, &err) == 0);
    CHECK(lg_prefix_cache_create(pool, P, &pc, &err) == 0);
    lg_pc_ns ns;
    lg_pc_ns_make(&ns, "t", "d", "s");
    int32_t toks[3 * P], alt[3 * P];
    for (int i = 0; i < 3 * P; i++) toks[i] = alt[i] = i;
    alt[P] = 99; /* shares page 0, branches at page 1 */
    int32_t pages[3], apages[3];
    lg_pc_node *nodes[3], *anodes[3];
    CHECK(compute_and_insert(pool, pc, &ns, toks, 0, 3, pages, nodes) == 3);
    CHECK(lg_prefix_cache_match(pc, &ns, alt, 1, apages, anodes) == 1);
    CHECK(compute_and_insert(pool, pc, &ns, alt, 1, 2, apages, anodes) == 2);
    CHECK(cstats(pc).nodes == 4);
    /* out of order: the root page first, then the rest */
    lg_prefix_cache_release(pc, nodes, 1);
    lg_prefix_cache_release(pc, anodes, 1);
    lg_prefix_cache_release(pc, nodes + 1, 2);
    lg_prefix_cache_release(pc, anodes + 1, 1);
    CHECK(pstats(pool).pages_cached == 4 && pstats(pool).pages_free == 2);
    /* 3 pages: the 2 free ones, then the LRU head, the shared root page,
     * which drops every descendant (4 pages back) */
    int32_t got[3];
    CHECK(lg_page_pool_alloc(pool, LG_PAGE_KV, 3, got) == 0);
    lg_prefix_cache_stats cs = cstats(pc);
    CHECK_MSG(cs.nodes == 0 && cs.namespaces == 0 && cs.evicted == 4, "nodes %d ns %d evicted %lld", cs.nodes,
              cs.namespaces, (long long)cs.evicted);
    lg_pool_stats ps = pstats(pool);
    CHECK(ps.pages_free == 3 && ps.pages_cached == 0 && ps.pages_kv == 3);
    CHECK(lg_prefix_cache_match(pc, &ns, toks, 3, pages, nodes) == 0);
    lg_page_pool_release(pool, got, 3);
    CHECK(compute_and_insert(pool, pc, &ns, toks, 0, 2, pages, nodes) == 2); /* usable again */
    lg_prefix_cache_release(pc, nodes, 2);
    lg_prefix_cache_free(pc);
    CHECK(lg_page_pool_n_free(pool) == 6);
    lg_page_pool_free(pool);
}

/* ---- random workload with page signatures ------------------------------------------------ */

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The "KV" of page k: a function of the namespace and tokens[0, (k+1)P). */
static uint64_t sig(const lg_pc_ns *ns, const int32_t *tokens, int k)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 32; i++) h = (h ^ ns->b[i]) * 1099511628211ull;
    for (int i = 0; i < (k + 1) * P; i++) h = (h ^ (uint32_t)tokens[i]) * 1099511628211ull;
    return h;
}

#define MAXP 8
typedef struct held {
    bool live;
    int ns;
    int32_t tokens[MAXP * P];
    int n_chain;
    lg_pc_node *nodes[MAXP];
    int32_t pages[MAXP];
} held;

static void test_random(void)
{
    enum { N_PAGES = 40, N_HELD = 6, N_NS = 3, ITERS = 20000 };
    lg_err err = {{0}};
    lg_page_pool *pool;
    lg_prefix_cache *pc;
    CHECK(lg_page_pool_create(NULL, PAGE_BYTES, N_PAGES, &pool, &err) == 0);
    CHECK(lg_prefix_cache_create(pool, P, &pc, &err) == 0);
    unsigned char *base = lg_page_pool_base(pool);
    lg_pc_ns ns[N_NS];
    lg_pc_ns_make(&ns[0], "a", "", "");
    lg_pc_ns_make(&ns[1], "b", "", "");
    lg_pc_ns_make(&ns[2], "a", "digest", "");
    held h[N_HELD];
    memset(h, 0, sizeof h);
    uint64_t seed = 0x12345678abcull;
    int64_t served = 0, bad = 0, invariant_errors = 0;
    for (int it = 0; it < ITERS; it++) {
        held *x = &h[rng(&seed) % N_HELD];
        if (x->live) { /* finish: release the chain */
            lg_prefix_cache_release(pc, x->nodes, x->n_chain);
            x->live = false;
        } else { /* a new request: tokens from a small alphabet so prefixes repeat */
            x->ns = (int)(rng(&seed) % N_NS);
            int n_pages = 1 + (int)(rng(&seed) % MAXP);
            int pre = (int)(rng(&seed) % 4); /* one of 4 two-page prefixes, then 0/1 tokens */
            for (int i = 0; i < n_pages * P; i++)
                x->tokens[i] = i < 2 * P ? (int32_t)(pre * 7 + i) % 5 : (int32_t)(rng(&seed) % 2);
            int m = lg_prefix_cache_match(pc, &ns[x->ns], x->tokens, n_pages, x->pages, x->nodes);
            for (int k = 0; k < m; k++) {
                uint64_t got;
                memcpy(&got, base + (size_t)x->pages[k] * PAGE_BYTES, 8);
                served++;
                if (got != sig(&ns[x->ns], x->tokens, k))
                    bad++;
            }
            /* compute the rest and offer it; stop when the pool is dry */
            int k = m;
            for (; k < n_pages; k++) {
                int32_t pg;
                if (lg_page_pool_alloc(pool, LG_PAGE_KV, 1, &pg) != 0)
                    break;
                uint64_t s = sig(&ns[x->ns], x->tokens, k);
                memcpy(base + (size_t)pg * PAGE_BYTES, &s, 8);
                int32_t out;
                lg_pc_node *node = lg_prefix_cache_insert(pc, &ns[x->ns], k ? x->nodes[k - 1] : NULL,
                                                          x->tokens + k * P, pg, &out);
                if (!node) {
                    lg_page_pool_release(pool, &pg, 1);
                    break;
                }
                if (out != pg) {
                    lg_page_pool_release(pool, &pg, 1);
                    uint64_t got;
                    memcpy(&got, base + (size_t)out * PAGE_BYTES, 8);
                    if (got != s)
                        bad++;
                }
                x->pages[k] = out;
                x->nodes[k] = node;
            }
            x->n_chain = k;
            x->live = true;
        }
        /* every KV page is a tree node; pinned ones are held by someone */
        lg_pool_stats ps = pstats(pool);
        lg_prefix_cache_stats cs = cstats(pc);
        if (ps.pages_kv != cs.nodes || ps.pages_free + ps.pages_kv != N_PAGES || ps.pages_cached > cs.nodes)
            invariant_errors++;
    }
    printf("random: %lld pages served from the cache, %lld wrong; %lld inserted, %lld evicted, %lld duplicates\n",
           (long long)served, (long long)bad, (long long)cstats(pc).inserted, (long long)cstats(pc).evicted,
           (long long)cstats(pc).duplicates);
    CHECK(served > 1000);
    CHECK_MSG(bad == 0, "%lld pages served with another prefix's or namespace's content", (long long)bad);
    CHECK(invariant_errors == 0);
    CHECK(cstats(pc).evicted > 100 && cstats(pc).duplicates == 0);
    for (int i = 0; i < N_HELD; i++)
        if (h[i].live)
            lg_prefix_cache_release(pc, h[i].nodes, h[i].n_chain);
    CHECK(pstats(pool).pages_cached == pstats(pool).pages_kv); /* nothing pinned */
    lg_prefix_cache_free(pc);
    CHECK(lg_page_pool_n_free(pool) == N_PAGES);
    lg_page_pool_free(pool);
}

int main(void)
{
    test_namespaces();
    test_basic();
    test_inner_eviction();
    test_random();
    TEST_DONE();
}
