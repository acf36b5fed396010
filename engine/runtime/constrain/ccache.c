/*
 * ccache.c — the compile cache (see constrain.h, lg_ccache).
 *
 * A hash table of entries chained per bucket plus a doubly linked LRU list,
 * under one mutex held only for lookups and list edits: compilation runs
 * outside it, so a slow schema never blocks hits of other keys. Two threads
 * missing the same key both compile; the second to insert finds the first's
 * entry and returns that (its own result is dropped). The key is the full
 * (kind, whitespace, limits, vocabulary digest, source bytes), compared in
 * full. An entry's size is its grammar plus its mask table as it stands
 * when sizes are summed (the table grows as matchers use it), re-read on
 * every insert; eviction drops least recently used entries until both
 * bounds hold. Refusals are entries too (the error, no constraint).
 */
#include "engine/runtime/constrain/cinternal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct lg_cce {
    struct lg_cce *hnext, *prev, *next;
    uint64_t hash;
    lg_ckind kind;
    lg_cws ws;
    lg_climits lim;
    uint64_t vdigest;
    const lg_cvocab *v;
    char *src;
    size_t len;
    lg_constraint *c;   /* NULL for a cached refusal */
    lg_cerr err;
} lg_cce;

struct lg_ccache {
    pthread_mutex_t mu;
    lg_cce **buckets;
    size_t nb;
    lg_cce *head, *tail; /* most recent first */
    long entries, hits, misses;
    int max_entries;
    size_t max_bytes;
};

static uint64_t lg_cc_hash(const void *p, size_t n, uint64_t h)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

lg_ccache *lg_ccache_new(int max_entries, size_t max_bytes)
{
    lg_ccache *cc = calloc(1, sizeof *cc);
    if (!cc)
        return NULL;
    cc->nb = 256;
    cc->buckets = calloc(cc->nb, sizeof *cc->buckets);
    if (!cc->buckets || pthread_mutex_init(&cc->mu, NULL)) {
        free(cc->buckets);
        free(cc);
        return NULL;
    }
    cc->max_entries = max_entries > 0 ? max_entries : 1;
    cc->max_bytes = max_bytes;
    return cc;
}

static void lg_cce_free(lg_cce *e)
{
    lg_constraint_unref(e->c);
    free(e->src);
    free(e);
}

void lg_ccache_free(lg_ccache *cc)
{
    if (!cc)
        return;
    for (lg_cce *e = cc->head, *n; e; e = n) {
        n = e->next;
        lg_cce_free(e);
    }
    free(cc->buckets);
    pthread_mutex_destroy(&cc->mu);
    free(cc);
}

static void lg_lru_unlink(lg_ccache *cc, lg_cce *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        cc->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        cc->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lg_lru_front(lg_ccache *cc, lg_cce *e)
{
    e->next = cc->head;
    e->prev = NULL;
    if (cc->head)
        cc->head->prev = e;
    cc->head = e;
    if (!cc->tail)
        cc->tail = e;
}

static void lg_bucket_remove(lg_ccache *cc, lg_cce *e)
{
    lg_cce **pp = &cc->buckets[e->hash % cc->nb];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
}

static lg_cce *lg_cc_find(lg_ccache *cc, uint64_t h, const lg_cvocab *v, const lg_copts *o, const lg_climits *lim,
                          const char *src, size_t len)
{
    for (lg_cce *e = cc->buckets[h % cc->nb]; e; e = e->hnext)
        if (e->hash == h && e->kind == o->kind && e->ws == o->whitespace && e->v == v &&
            e->vdigest == lg_cvocab_digest(v) && !memcmp(&e->lim, lim, sizeof *lim) && e->len == len &&
            !memcmp(e->src, src, len))
            return e;
    return NULL;
}

static size_t lg_cce_bytes(const lg_cce *e)
{
    if (!e->c)
        return sizeof *e + e->len;
    lg_cstats s;
    lg_constraint_stats(e->c, &s);
    return sizeof *e + e->len + s.grammar_bytes + s.table_bytes;
}

static void lg_cc_evict(lg_ccache *cc)
{
    size_t total = 0;
    for (lg_cce *e = cc->head; e; e = e->next)
        total += lg_cce_bytes(e);
    while (cc->tail && cc->tail != cc->head &&
           (cc->entries > cc->max_entries || (cc->max_bytes && total > cc->max_bytes))) {
        lg_cce *e = cc->tail;
        total -= lg_cce_bytes(e);
        lg_lru_unlink(cc, e);
        lg_bucket_remove(cc, e);
        cc->entries--;
        lg_cce_free(e); /* a constraint still in use lives on in its references */
    }
}

static int lg_cc_answer(lg_cce *e, lg_constraint **out, lg_cerr *err)
{
    if (e->c) {
        *out = lg_constraint_ref(e->c);
        return 0;
    }
    if (err)
        *err = e->err;
    *out = NULL;
    return -1;
}

int lg_ccache_get(lg_ccache *cc, const lg_cvocab *v, const lg_copts *opts, const char *src, size_t len,
                  lg_constraint **out, lg_cerr *err)
{
    lg_copts o = *opts;
    if (o.kind == LG_CK_JSON_OBJECT || o.kind == LG_CK_JSON_VALUE || !src)
        src = "", len = 0;
    if (o.kind != LG_CK_JSON_SCHEMA && o.kind != LG_CK_JSON_OBJECT && o.kind != LG_CK_JSON_VALUE)
        o.whitespace = LG_CWS_COMPACT;
    uint64_t h = 1469598103934665603ull;
    h = lg_cc_hash(&o.kind, sizeof o.kind, h);
    h = lg_cc_hash(&o.whitespace, sizeof o.whitespace, h);
    h = lg_cc_hash(&o.limits, sizeof o.limits, h);
    uint64_t vd = lg_cvocab_digest(v);
    h = lg_cc_hash(&vd, sizeof vd, h);
    h = lg_cc_hash(src, len, h);

    pthread_mutex_lock(&cc->mu);
    lg_cce *e = lg_cc_find(cc, h, v, &o, &o.limits, src, len);
    if (e) {
        cc->hits++;
        lg_lru_unlink(cc, e);
        lg_lru_front(cc, e);
        int rc = lg_cc_answer(e, out, err);
        pthread_mutex_unlock(&cc->mu);
        return rc;
    }
    cc->misses++;
    pthread_mutex_unlock(&cc->mu);

    lg_cce *n = calloc(1, sizeof *n);
    char *copy = malloc(len + 1);
    if (!n || !copy) {
        free(n);
        free(copy);
        if (err) {
            memset(err, 0, sizeof *err);
            err->code = LG_CERR_INTERNAL;
            snprintf(err->msg, sizeof err->msg, "out of memory");
        }
        return -1;
    }
    memcpy(copy, src, len);
    copy[len] = 0;
    n->hash = h;
    n->kind = o.kind;
    n->ws = o.whitespace;
    n->lim = o.limits;
    n->vdigest = vd;
    n->v = v;
    n->src = copy;
    n->len = len;
    int rc = lg_constraint_compile(v, &o, src, len, &n->c, &n->err);
    (void)rc;
    if (n->err.code == LG_CERR_INTERNAL || (n->err.code == LG_CERR_LIMIT && strstr(n->err.msg, "max_compile_ms"))) {
        /* out of memory or out of time: not a property of the key, do not cache */
        int r2 = lg_cc_answer(n, out, err);
        lg_cce_free(n);
        return r2;
    }

    pthread_mutex_lock(&cc->mu);
    e = lg_cc_find(cc, h, v, &o, &o.limits, src, len);
    if (e) {
        /* another thread compiled it meanwhile: keep theirs */
        int r2 = lg_cc_answer(e, out, err);
        pthread_mutex_unlock(&cc->mu);
        lg_cce_free(n);
        return r2;
    }
    lg_cce **bk = &cc->buckets[h % cc->nb];
    n->hnext = *bk;
    *bk = n;
    lg_lru_front(cc, n);
    cc->entries++;
    int r2 = lg_cc_answer(n, out, err);
    lg_cc_evict(cc);
    pthread_mutex_unlock(&cc->mu);
    return r2;
}

void lg_ccache_stats_get(lg_ccache *cc, lg_ccache_stats *s)
{
    pthread_mutex_lock(&cc->mu);
    s->hits = cc->hits;
    s->misses = cc->misses;
    s->entries = cc->entries;
    s->bytes = 0;
    for (lg_cce *e = cc->head; e; e = e->next)
        s->bytes += lg_cce_bytes(e);
    pthread_mutex_unlock(&cc->mu);
}
