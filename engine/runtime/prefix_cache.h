/*
 * prefix_cache.h — the prefix cache: a radix tree over full KV pages
 * (SGLang's RadixAttention, at the granularity of one page = page_tokens
 * tokens), whose pages are entries of the unified page pool.
 *
 * What is cached. A KV page holds positions [k*P, (k+1)*P) of a sequence for
 * every layer (P = page_tokens). Its content is a function of the tokens
 * [0, (k+1)*P) and of everything else that changes the residual stream: the
 * adapter (a LoRA in layer l changes the input of layer l+1). So a node is
 * keyed by its parent node and its own P tokens, and the tree's roots are
 * *namespaces*: SHA-256 of (isolation domain, adapter content digest, cache
 * salt). Two requests can only share a page when every one of those is equal
 * and their token prefixes are equal page for page. The isolation domain is
 * the tenant by default (sharing across tenants is a timing side channel);
 * the engine's tenant strings are identities that are never reused (the
 * gateway's "t<tenant id>"), never names.
 *
 * Purge. The key is a hash, so each root also keeps what it was made from
 * that a purge needs: its isolation domain (exactly) and whether it has a
 * cache salt, plus small tags of the tenants ("users") that inserted pages
 * under it. lg_prefix_cache_purge drops the namespaces of one isolation
 * domain (a deleted tenant's) and, for shared domains (--prefix-sharing
 * global), the salted namespaces that tenant inserted into: nodes nobody
 * pins give their pages back to the pool at once; pinned ones leave the
 * tree at once (no match or insert finds them again) and give their page
 * back when their last pin goes.
 *
 * Ownership and states. A node owns one pool page (kind KV, one pool entry
 * per node). Every request that uses a node holds one pin on it: a request
 * pins the whole chain from the root to the deepest node it uses, so a
 * parent is pinned at least as often as any child. A node without pins is
 * *cached*: its page sits in the pool's LRU (shared with idle adapters) and
 * the pool may evict it; the tree then forgets it (and, should an inner node
 * ever go before its children, the children too). Release unpins deepest
 * first, so ancestors are more recently used than descendants and the LRU
 * takes leaves first.
 *
 * Only full pages are cached, and only pages whose KV has been computed. A
 * page is never written once it is in the tree: callers match at most the
 * pages strictly before a sequence's last prompt token (that token must be
 * recomputed to get its logits), so every write of a step goes to the
 * request's own (raw) pages.
 *
 * Workload: one match per admission (a hash lookup per page), one insert
 * per computed page, one release per finish/preemption. Not thread-safe:
 * owned by the engine thread.
 */
#ifndef LG_PREFIX_CACHE_H
#define LG_PREFIX_CACHE_H

#include "engine/base/common.h"
#include "engine/backend/page_pool.h"

typedef struct lg_prefix_cache lg_prefix_cache;
typedef struct lg_pc_node lg_pc_node;

#define LG_PC_DOMAIN_MAX 127 /* bytes of an isolation domain kept for purges (the engine's tenant limit) */

/* A namespace: the key b = SHA-256 over the length-prefixed (domain, adapter
 * digest, salt); the rest is not part of the key but goes with the
 * namespace's root, for lg_prefix_cache_purge. */
typedef struct lg_pc_ns {
    uint8_t b[32];
    char domain[LG_PC_DOMAIN_MAX + 1]; /* the isolation domain (longer ones are cut: never purged by name) */
    bool salted;                       /* a non-empty cache salt */
    uint64_t user;                     /* tag of the tenant inserting through it (default: of the domain) */
} lg_pc_ns;
/* NULL strings count as "". */
void lg_pc_ns_make(lg_pc_ns *ns, const char *domain, const char *adapter_digest, const char *salt);
/* Sets who inserts through ns (a tenant; with a shared domain it differs
 * from the domain). */
void lg_pc_ns_set_user(lg_pc_ns *ns, const char *user);

int lg_prefix_cache_create(lg_page_pool *pool, int page_tokens, lg_prefix_cache **out, lg_err *err);
/* NULL is a no-op. Every node's page goes back to the pool; nobody may hold
 * a pin any more. */
void lg_prefix_cache_free(lg_prefix_cache *pc);

/* The longest chain of cached pages that covers tokens[0, n*P) for n <=
 * max_pages, in namespace ns. Pins each matched node once; writes their
 * pages to pages[] and the nodes to nodes[]. Returns n. */
int lg_prefix_cache_match(lg_prefix_cache *pc, const lg_pc_ns *ns, const int32_t *tokens, int max_pages,
                          int32_t *pages, lg_pc_node **nodes);

/* Offers a computed page to the tree: `page` (allocated by the caller from
 * the pool, kind KV, not yet part of any entry) holds the KV of `tokens`
 * (P tokens) following the chain that ends in `parent` (NULL: the page is
 * the first of namespace ns); the caller holds a pin on `parent`.
 * If the tree has no such node, the page becomes a new node's, pinned once
 * for the caller; *page_out = page. If it has one already (computed by
 * someone else), that node is pinned for the caller and *page_out is its
 * page: the caller then releases its own copy. Returns the node, or NULL
 * when out of memory (the caller keeps its page and stops offering). */
lg_pc_node *lg_prefix_cache_insert(lg_prefix_cache *pc, const lg_pc_ns *ns, lg_pc_node *parent,
                                   const int32_t *tokens, int32_t page, int32_t *page_out);

/* Drops the pins of a chain nodes[0..n) (root first), deepest first. A
 * node purged meanwhile gives its page back with its last pin. */
void lg_prefix_cache_release(lg_prefix_cache *pc, lg_pc_node *const *nodes, int n);

/* Drops every namespace whose isolation domain is `domain` (NULL: none by
 * domain) and every salted namespace that `salted_user` inserted a page
 * into (NULL: none by user; a namespace with more inserting tenants than it
 * keeps tags for counts as theirs). Pages of unpinned nodes are free when it
 * returns; pinned nodes are out of the tree and free their page with their
 * last pin (lg_prefix_cache_release). Returns the namespaces dropped. */
int lg_prefix_cache_purge(lg_prefix_cache *pc, const char *domain, const char *salted_user);

typedef struct lg_prefix_cache_stats {
    int nodes;              /* == pages held by the tree */
    int namespaces;
    int64_t inserted, evicted, duplicates; /* duplicates: offers that found a node already there */
    int64_t purged_namespaces, purged_nodes; /* lg_prefix_cache_purge */
    int purged_pinned;      /* purged nodes still pinned (their pages not yet back) */
} lg_prefix_cache_stats;
void lg_prefix_cache_get_stats(const lg_prefix_cache *pc, lg_prefix_cache_stats *s);

#endif
