/*
 * prefix_cache.c — see prefix_cache.h.
 *
 * Data structure. Every node (and every namespace root, a node without a
 * page) has a unique 64-bit uid. Children are found through one hash table
 * keyed by (parent uid, the child's P tokens); keys are compared exactly
 * (uid and every token), the hash only picks the bucket. A node also links
 * to its parent and its children (first_child / sibling list) so an
 * eviction can detach it in O(1) and, if it ever had children, drop them.
 * Namespace roots live in a second small table keyed by the 32-byte
 * namespace; a root goes away with its last child. A root also has a
 * root_info: its namespace (key, isolation domain, salted) and the tags of
 * the tenants that inserted under it, which lg_prefix_cache_purge reads (an
 * insert finds its root by walking up the parent links: a few pointer
 * steps per computed page).
 *
 * Purged nodes. A purge takes every node of a dropped namespace out of the
 * children table and the tree. Unpinned ones are freed with their pages at
 * once; pinned ones are marked `purged` and detached (no parent, no
 * children: each descendant is handled by itself): unreachable by match and
 * insert, they are freed, page and all, when release drops their last pin.
 */
#include "engine/runtime/prefix_cache.h"

#include <openssl/sha.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define PC_USER_TAGS 8 /* tenants remembered per namespace; more: "many" (a purge of any of them drops it) */

typedef struct root_info {
    lg_pc_ns ns;
    uint64_t users[PC_USER_TAGS]; /* tags of the tenants that inserted pages under this root */
    int n_users;
    bool many_users;
} root_info;

struct lg_pc_node {
    lg_pool_entry pe;          /* pages = &page, n_pages = 1; pe.owner = the cache */
    int32_t page;              /* -1 for a namespace root */
    uint64_t uid;
    uint64_t parent_uid;
    uint64_t hash;             /* of (parent_uid, tokens) */
    lg_pc_node *parent;        /* NULL for roots and for detached (orphaned, purged) nodes */
    lg_pc_node *first_child, *next_sib, *prev_sib;
    lg_pc_node *hnext;         /* bucket chain (children table, or roots table for roots) */
    root_info *ri;             /* roots only */
    bool in_table;
    bool purged;               /* out of the tree, still pinned: freed by the release of its last pin */
    int32_t tokens[];          /* [page_tokens]; absent for roots */
};

struct lg_prefix_cache {
    lg_page_pool *pool;
    int P;
    uint64_t next_uid;
    lg_pc_node **buckets;      /* children table */
    size_t n_buckets, n_nodes;
    lg_pc_node **roots;        /* namespace table */
    size_t n_root_buckets, n_roots;
    lg_prefix_cache_stats st;
};

/* Appends a length-prefixed string (at most 4 KiB of it, which is more
 * than any caller's limit) to buf at *n. */
static void put_len_str(unsigned char *buf, size_t *n, const char *s)
{
    uint32_t len = s ? (uint32_t)strnlen(s, 4096) : 0;
    memcpy(buf + *n, &len, 4);
    *n += 4;
    if (len)
        memcpy(buf + *n, s, len);
    *n += len;
}

/* FNV-1a 64 of a tenant string: a tag (a collision only makes a purge drop
 * more than it had to). */
static uint64_t user_tag(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

void lg_pc_ns_make(lg_pc_ns *ns, const char *domain, const char *adapter_digest, const char *salt)
{
    unsigned char buf[32 + 3 * (4 + 4096)];
    size_t n = 0;
    memcpy(buf, "loragate-prefix-v1", 18);
    n = 18;
    put_len_str(buf, &n, domain);
    put_len_str(buf, &n, adapter_digest);
    put_len_str(buf, &n, salt);
    SHA256(buf, n, ns->b);
    snprintf(ns->domain, sizeof ns->domain, "%s", domain ? domain : "");
    ns->salted = salt && salt[0];
    ns->user = user_tag(domain);
}

void lg_pc_ns_set_user(lg_pc_ns *ns, const char *user) { ns->user = user_tag(user); }

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t key_hash(uint64_t parent_uid, const int32_t *tokens, int P)
{
    uint64_t h = mix64(parent_uid + 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < P; i++) h = mix64(h ^ (uint32_t)tokens[i]);
    return h;
}

static uint64_t ns_hash(const lg_pc_ns *ns)
{
    uint64_t h;
    memcpy(&h, ns->b, sizeof h);
    return h;
}

int lg_prefix_cache_create(lg_page_pool *pool, int page_tokens, lg_prefix_cache **out, lg_err *err)
{
    *out = NULL;
    if (page_tokens <= 0)
        return lg_fail(err, "prefix cache: page_tokens must be positive");
    lg_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc)
        return lg_fail(err, "out of memory");
    pc->pool = pool;
    pc->P = page_tokens;
    pc->next_uid = 1;
    pc->n_buckets = 1024;
    pc->n_root_buckets = 64;
    pc->buckets = calloc(pc->n_buckets, sizeof *pc->buckets);
    pc->roots = calloc(pc->n_root_buckets, sizeof *pc->roots);
    if (!pc->buckets || !pc->roots) {
        free(pc->buckets);
        free(pc->roots);
        free(pc);
        return lg_fail(err, "out of memory");
    }
    *out = pc;
    return 0;
}

/* ---- tables -------------------------------------------------------------- */

static void table_grow(lg_pc_node ***tab, size_t *nb)
{
    size_t n2 = *nb * 2;
    lg_pc_node **t2 = calloc(n2, sizeof *t2);
    if (!t2)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < *nb; i++)
        for (lg_pc_node *x = (*tab)[i], *nx; x; x = nx) {
            nx = x->hnext;
            size_t b = x->hash & (n2 - 1);
            x->hnext = t2[b];
            t2[b] = x;
        }
    free(*tab);
    *tab = t2;
    *nb = n2;
}

static void table_put(lg_pc_node **tab, size_t nb, lg_pc_node *x)
{
    size_t b = x->hash & (nb - 1);
    x->hnext = tab[b];
    tab[b] = x;
    x->in_table = true;
}

static void table_del(lg_pc_node **tab, size_t nb, lg_pc_node *x)
{
    if (!x->in_table)
        return;
    for (lg_pc_node **pp = &tab[x->hash & (nb - 1)]; *pp; pp = &(*pp)->hnext)
        if (*pp == x) {
            *pp = x->hnext;
            break;
        }
    x->hnext = NULL;
    x->in_table = false;
}

static lg_pc_node *find_child(const lg_prefix_cache *pc, uint64_t parent_uid, const int32_t *tokens)
{
    uint64_t h = key_hash(parent_uid, tokens, pc->P);
    for (lg_pc_node *x = pc->buckets[h & (pc->n_buckets - 1)]; x; x = x->hnext)
        if (x->hash == h && x->parent_uid == parent_uid && !memcmp(x->tokens, tokens, (size_t)pc->P * sizeof(int32_t)))
            return x;
    return NULL;
}

static lg_pc_node *find_root(const lg_prefix_cache *pc, const lg_pc_ns *ns)
{
    uint64_t h = ns_hash(ns);
    for (lg_pc_node *x = pc->roots[h & (pc->n_root_buckets - 1)]; x; x = x->hnext)
        if (!memcmp(x->ri->ns.b, ns->b, sizeof ns->b))
            return x;
    return NULL;
}

/* ---- tree links ------------------------------------------------------------ */

static void link_child(lg_pc_node *parent, lg_pc_node *c)
{
    c->parent = parent;
    c->prev_sib = NULL;
    c->next_sib = parent->first_child;
    if (parent->first_child)
        parent->first_child->prev_sib = c;
    parent->first_child = c;
}

static void unlink_child(lg_pc_node *c)
{
    lg_pc_node *p = c->parent;
    if (!p)
        return;
    if (c->prev_sib) c->prev_sib->next_sib = c->next_sib;
    else p->first_child = c->next_sib;
    if (c->next_sib) c->next_sib->prev_sib = c->prev_sib;
    c->parent = c->next_sib = c->prev_sib = NULL;
}

static void root_maybe_free(lg_prefix_cache *pc, lg_pc_node *root)
{
    if (root->first_child)
        return;
    table_del(pc->roots, pc->n_root_buckets, root);
    pc->n_roots--;
    free(root->ri);
    free(root);
}

/* Remembers that `user` inserted under root. */
static void root_add_user(lg_pc_node *root, uint64_t user)
{
    root_info *ri = root->ri;
    if (ri->many_users)
        return;
    for (int i = 0; i < ri->n_users; i++)
        if (ri->users[i] == user)
            return;
    if (ri->n_users == PC_USER_TAGS)
        ri->many_users = true;
    else
        ri->users[ri->n_users++] = user;
}

static void on_evict(void *owner, lg_pool_entry *e);

/* Takes node x out of the tree (its page already freed or being freed by
 * the caller) and frees it. Children that are not pinned are dropped with
 * it; pinned ones (which the pin invariant rules out) are orphaned: still
 * pool entries, evicted and freed later like any other. */
static void forget(lg_prefix_cache *pc, lg_pc_node *x)
{
    while (x->first_child) {
        lg_pc_node *c = x->first_child;
        unlink_child(c);
        table_del(pc->buckets, pc->n_buckets, c);
        pc->n_nodes--;
        if (c->pe.pins == 0) {
            lg_page_pool_entry_drop(pc->pool, &c->pe);
            pc->st.evicted++;
            forget(pc, c);
        }
        /* else: orphan; pc->n_nodes no longer counts it, on_evict frees it */
    }
    lg_pc_node *parent = x->parent;
    if (x->in_table) {
        table_del(pc->buckets, pc->n_buckets, x);
        pc->n_nodes--;
    }
    unlink_child(x);
    free(x);
    if (parent && parent->page < 0)
        root_maybe_free(pc, parent);
}

static void on_evict(void *owner, lg_pool_entry *e)
{
    lg_prefix_cache *pc = owner;
    lg_pc_node *x = (lg_pc_node *)((char *)e - offsetof(lg_pc_node, pe));
    pc->st.evicted++;
    forget(pc, x);
}

/* ---- API ---------------------------------------------------------------------- */

int lg_prefix_cache_match(lg_prefix_cache *pc, const lg_pc_ns *ns, const int32_t *tokens, int max_pages,
                          int32_t *pages, lg_pc_node **nodes)
{
    lg_pc_node *root = find_root(pc, ns);
    if (!root)
        return 0;
    uint64_t parent = root->uid;
    int n = 0;
    while (n < max_pages) {
        lg_pc_node *x = find_child(pc, parent, tokens + (size_t)n * pc->P);
        if (!x)
            break;
        lg_page_pool_pin(pc->pool, &x->pe);
        pages[n] = x->page;
        nodes[n] = x;
        parent = x->uid;
        n++;
    }
    return n;
}

lg_pc_node *lg_prefix_cache_insert(lg_prefix_cache *pc, const lg_pc_ns *ns, lg_pc_node *parent,
                                   const int32_t *tokens, int32_t page, int32_t *page_out)
{
    *page_out = page;
    if (parent && !parent->in_table)
        return NULL; /* the chain above was orphaned: nothing to hang this on */
    lg_pc_node *p = parent;
    if (!p) {
        p = find_root(pc, ns);
        if (!p) {
            p = calloc(1, sizeof *p);
            root_info *ri = calloc(1, sizeof *ri);
            if (!p || !ri) {
                free(p);
                free(ri);
                return NULL;
            }
            p->page = -1;
            p->uid = pc->next_uid++;
            p->ri = ri;
            ri->ns = *ns;
            p->hash = ns_hash(ns);
            if (pc->n_roots + 1 > pc->n_root_buckets)
                table_grow(&pc->roots, &pc->n_root_buckets);
            table_put(pc->roots, pc->n_root_buckets, p);
            pc->n_roots++;
        }
    }
    lg_pc_node *root = p;
    while (root->parent) root = root->parent;
    if (root->page < 0) /* always, for a chain in the tree */
        root_add_user(root, ns->user);
    lg_pc_node *x = find_child(pc, p->uid, tokens);
    if (x) {
        lg_page_pool_pin(pc->pool, &x->pe);
        pc->st.duplicates++;
        *page_out = x->page;
        return x;
    }
    x = calloc(1, sizeof *x + (size_t)pc->P * sizeof(int32_t));
    if (!x) {
        if (!parent)
            root_maybe_free(pc, p);
        return NULL;
    }
    memcpy(x->tokens, tokens, (size_t)pc->P * sizeof(int32_t));
    x->page = page;
    x->uid = pc->next_uid++;
    x->parent_uid = p->uid;
    x->hash = key_hash(p->uid, tokens, pc->P);
    if (pc->n_nodes + 1 > pc->n_buckets)
        table_grow(&pc->buckets, &pc->n_buckets);
    table_put(pc->buckets, pc->n_buckets, x);
    pc->n_nodes++;
    link_child(p, x);
    x->pe = (lg_pool_entry){.kind = LG_PAGE_KV, .pages = &x->page, .n_pages = 1, .evict = on_evict, .owner = pc};
    lg_page_pool_entry_add(pc->pool, &x->pe); /* one pin, the caller's */
    pc->st.inserted++;
    return x;
}

void lg_prefix_cache_release(lg_prefix_cache *pc, lg_pc_node *const *nodes, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        lg_pc_node *x = nodes[i];
        if (!x)
            continue;
        if (x->purged && x->pe.pins == 1) { /* the last pin of a purged node: its page goes back now */
            lg_page_pool_entry_drop(pc->pool, &x->pe);
            pc->st.purged_pinned--;
            free(x);
            continue;
        }
        lg_page_pool_unpin(pc->pool, &x->pe);
    }
}

/* Takes x and its descendants out of the tree (x itself is already out of
 * its parent's child list, or a root). */
static void purge_subtree(lg_prefix_cache *pc, lg_pc_node *x)
{
    while (x->first_child) {
        lg_pc_node *c = x->first_child;
        unlink_child(c);
        purge_subtree(pc, c);
    }
    if (x->page < 0) { /* the root */
        table_del(pc->roots, pc->n_root_buckets, x);
        pc->n_roots--;
        free(x->ri);
        free(x);
        return;
    }
    if (x->in_table) {
        table_del(pc->buckets, pc->n_buckets, x);
        pc->n_nodes--;
    }
    pc->st.purged_nodes++;
    if (x->pe.pins == 0) {
        lg_page_pool_entry_drop(pc->pool, &x->pe);
        free(x);
    } else {
        x->purged = true;
        pc->st.purged_pinned++;
    }
}

static bool root_purged_by(const root_info *ri, const char *domain, const char *salted_user, uint64_t tag)
{
    if (domain && !strcmp(ri->ns.domain, domain))
        return true;
    if (!salted_user || !ri->ns.salted)
        return false;
    if (ri->many_users)
        return true;
    for (int i = 0; i < ri->n_users; i++)
        if (ri->users[i] == tag)
            return true;
    return false;
}

int lg_prefix_cache_purge(lg_prefix_cache *pc, const char *domain, const char *salted_user)
{
    if (!pc || (!domain && !salted_user))
        return 0;
    uint64_t tag = user_tag(salted_user);
    int n = 0;
    for (size_t b = 0; b < pc->n_root_buckets; b++)
        for (lg_pc_node *r = pc->roots[b], *nr; r; r = nr) {
            nr = r->hnext;
            if (root_purged_by(r->ri, domain, salted_user, tag)) {
                purge_subtree(pc, r);
                n++;
            }
        }
    pc->st.purged_namespaces += n;
    return n;
}

void lg_prefix_cache_get_stats(const lg_prefix_cache *pc, lg_prefix_cache_stats *s)
{
    *s = pc->st;
    s->nodes = (int)pc->n_nodes;
    s->namespaces = (int)pc->n_roots;
}

static void free_subtree(lg_prefix_cache *pc, lg_pc_node *x)
{
    while (x->first_child) {
        lg_pc_node *c = x->first_child;
        unlink_child(c);
        free_subtree(pc, c);
    }
    if (x->page >= 0)
        lg_page_pool_entry_drop(pc->pool, &x->pe);
    free(x->ri);
    free(x);
}

void lg_prefix_cache_free(lg_prefix_cache *pc)
{
    if (!pc)
        return;
    for (size_t b = 0; b < pc->n_root_buckets; b++)
        for (lg_pc_node *r = pc->roots[b], *nr; r; r = nr) {
            nr = r->hnext;
            free_subtree(pc, r);
        }
    free(pc->buckets);
    free(pc->roots);
    free(pc);
}
