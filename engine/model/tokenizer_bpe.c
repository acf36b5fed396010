/*
 * tokenizer_bpe.c — the BPE model: vocab/merge hash maps and word merging.
 *
 * One pre-token ("word") at a time:
 *   1. ignore_merges: a word that is itself in the vocab is one token.
 *   2. split into UTF-8 chars; a char not in the vocab becomes its <0xXX>
 *      byte tokens (byte_fallback), else unk (fused when fuse_unk), else is
 *      dropped — HF's BPE::merge_word.
 *   3. merge adjacent symbols until no pair merges, best pair first:
 *        by rank  (HF, tokenizer.json merges): lowest rank, then leftmost;
 *        by score (llama.cpp SPM, GGUF without merges): the pair whose
 *                 concatenation is a vocab token of highest score, then
 *                 leftmost; chars not in the vocab fall back to bytes at the end.
 *      A binary heap of candidate pairs, entries checked for staleness when
 *      popped (both symbols alive, still adjacent, same lengths), which is
 *      HF Word::merge_all and llama.cpp llm_tokenizer_spm in one loop.
 * Words are short (pre-tokenized) except for SPM, where the whole text
 * between special tokens is one word; the heap keeps that O(n log n).
 */
#include "engine/model/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>

static uint32_t lg_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t lg_pow2_for(size_t n)
{
    uint32_t cap = 16;
    while (cap < n * 2 && cap < (1u << 30))
        cap <<= 1;
    return cap;
}

int lg_tok_strmap_init(lg_tok_strmap *m, size_t n_keys)
{
    uint32_t cap = lg_pow2_for(n_keys);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots)
        return -1;
    memset(m->slots, 0xff, cap * sizeof *m->slots);
    m->mask = cap - 1;
    return 0;
}

void lg_tok_strmap_free(lg_tok_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

void lg_tok_strmap_put(lg_tok_strmap *m, const lg_tokenizer *t, int32_t id)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    for (uint32_t h = lg_hash(s, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t o = m->slots[h];
        if (o < 0) {
            m->slots[h] = id;
            return;
        }
        if (t->text_len[o] == n && !memcmp(t->text[o], s, n))
            return;
    }
}

int32_t lg_tok_strmap_get(const lg_tok_strmap *m, const lg_tokenizer *t, const char *s, size_t n)
{
    if (!m->slots)
        return -1;
    for (uint32_t h = lg_hash(s, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t o = m->slots[h];
        if (o < 0)
            return -1;
        if (t->text_len[o] == n && !memcmp(t->text[o], s, n))
            return o;
    }
}

int lg_tok_pairmap_init(lg_tok_pairmap *m, size_t n_keys)
{
    uint32_t cap = lg_pow2_for(n_keys);
    m->keys = calloc(cap, sizeof *m->keys);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) {
        lg_tok_pairmap_free(m);
        return -1;
    }
    m->mask = cap - 1;
    return 0;
}

void lg_tok_pairmap_free(lg_tok_pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = NULL;
    m->rank = m->merged = NULL;
}

static uint32_t lg_hash64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

void lg_tok_pairmap_put(lg_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (uint32_t h = lg_hash64(k) & m->mask;; h = (h + 1) & m->mask) {
        if (m->keys[h] == 0) {
            m->keys[h] = k;
            m->rank[h] = rank;
            m->merged[h] = merged;
            return;
        }
        if (m->keys[h] == k)
            return;
    }
}

bool lg_tok_pairmap_get(const lg_tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
    if (!m->keys || a < 0 || b < 0)
        return false;
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (uint32_t h = lg_hash64(k) & m->mask;; h = (h + 1) & m->mask) {
        if (m->keys[h] == 0)
            return false;
        if (m->keys[h] == k) {
            *rank = m->rank[h];
            *merged = m->merged[h];
            return true;
        }
    }
}

/* ---- word merging ---------------------------------------------------------- */

typedef struct {
    int32_t id;     /* -1: not in vocab (score mode only) */
    int prev, next; /* -1 at the ends */
    uint32_t start, len; /* bytes in the word; len 0 = merged away */
} lg_sym;

typedef struct {
    double key;     /* lower is better: rank, or -score */
    int left, right;
    uint32_t size;  /* bytes of the pair when pushed */
    int32_t merged;
} lg_cand;

typedef struct {
    lg_cand *a;
    int n, cap;
} lg_heap;

static bool lg_cand_less(const lg_cand *x, const lg_cand *y)
{
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

static int lg_heap_push(lg_heap *h, lg_cand c)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        lg_cand *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!lg_cand_less(&c, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
    return 0;
}

static lg_cand lg_heap_pop(lg_heap *h)
{
    lg_cand top = h->a[0], last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const lg_cand *best = &last;
        if (l < h->n && lg_cand_less(&h->a[l], best)) { m = l; best = &h->a[l]; }
        if (r < h->n && lg_cand_less(&h->a[r], best)) { m = r; }
        if (m == i)
            break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

/* Pushes the candidate (l, r) if that pair merges. */
static int lg_try_pair(const lg_tokenizer *t, const char *w, lg_sym *s, int l, int r, lg_heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    lg_cand c = { .left = l, .right = r, .size = s[l].len + s[r].len };
    if (t->merge_by_score) {
        int32_t id = lg_tok_strmap_get(&t->vocab, t, w + s[l].start, c.size);
        if (id < 0)
            return 0;
        c.key = -(double)(t->scores ? t->scores[id] : 0.0f);
        c.merged = id;
    } else {
        int32_t rank;
        if (!lg_tok_pairmap_get(&t->merges, s[l].id, s[r].id, &rank, &c.merged))
            return 0;
        c.key = rank;
    }
    return lg_heap_push(h, c);
}

static int lg_ids_push(int32_t **ids, int *n, int *cap, int32_t id)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        int32_t *p = realloc(*ids, (size_t)c * sizeof *p);
        if (!p)
            return -1;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

static int lg_sym_push(lg_sym **s, int *n, int *cap, lg_sym v)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 32;
        lg_sym *p = realloc(*s, (size_t)c * sizeof *p);
        if (!p)
            return -1;
        *s = p;
        *cap = c;
    }
    (*s)[(*n)++] = v;
    return 0;
}

int lg_tok_bpe_word(const lg_tokenizer *t, const char *w, size_t len, int32_t **ids, int *n,
                    int *cap, lg_err *err)
{
    if (len == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = lg_tok_strmap_get(&t->vocab, t, w, len);
        if (id >= 0)
            return lg_ids_push(ids, n, cap, id) ? lg_fail(err, "out of memory") : 0;
    }
    if (len > (size_t)1 << 30)
        return lg_fail(err, "pre-token of %zu bytes is too long", len);

    lg_sym *s = NULL;
    int ns = 0, scap = 0;
    lg_heap h = { 0 };
    int rc = -1;
    int unk_sym = -1; /* index of a pending fused unk symbol */

    /* 1. initial symbols */
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int cl;
        if (lg_utf8_next((const unsigned char *)w + i, len - i, &cp, &cl) != LG_U8_OK)
            cl = 1; /* input was validated; defensive */
        int32_t id = lg_tok_strmap_get(&t->vocab, t, w + i, (size_t)cl);
        lg_sym v = { .id = id, .start = (uint32_t)i, .len = (uint32_t)cl };
        if (id >= 0 || t->merge_by_score) {
            unk_sym = -1;
            if (lg_sym_push(&s, &ns, &scap, v))
                goto oom;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (int k = 0; k < cl; k++)
                    all = all && t->byte_tok[(unsigned char)w[i + k]] >= 0;
                if (all) {
                    for (int k = 0; k < cl; k++) {
                        lg_sym b = { .id = t->byte_tok[(unsigned char)w[i + k]],
                                     .start = (uint32_t)(i + k), .len = 1};
                        if (lg_sym_push(&s, &ns, &scap, b))
                            goto oom;
                    }
                    unk_sym = -1;
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk_sym >= 0 && t->fuse_unk) {
                    s[unk_sym].len += (uint32_t)cl;
                } else {
                    v.id = t->unk_id;
                    if (lg_sym_push(&s, &ns, &scap, v))
                        goto oom;
                    unk_sym = ns - 1;
                }
            }
            /* else: HF drops the char */
        }
        i += (size_t)cl;
    }
    for (int i = 0; i < ns; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < ns ? i + 1 : -1;
    }

    /* 2. merge */
    for (int i = 0; i + 1 < ns; i++)
        if (lg_try_pair(t, w, s, i, i + 1, &h))
            goto oom;
    while (h.n) {
        lg_cand c = lg_heap_pop(&h);
        lg_sym *l = &s[c.left], *r = &s[c.right];
        if (l->len == 0 || r->len == 0 || l->next != c.right || l->len + r->len != c.size)
            continue; /* stale */
        l->len += r->len;
        l->id = c.merged;
        l->next = r->next;
        r->len = 0;
        if (l->next >= 0)
            s[l->next].prev = c.left;
        if (lg_try_pair(t, w, s, l->prev, c.left, &h) || lg_try_pair(t, w, s, c.left, l->next, &h))
            goto oom;
    }

    /* 3. emit */
    for (int i = 0; i < ns; i++) {
        if (s[i].len == 0)
            continue;
        if (s[i].id >= 0) {
            if (lg_ids_push(ids, n, cap, s[i].id))
                goto oom;
            continue;
        }
        /* score mode: a char outside the vocab -> bytes, else unk */
        for (uint32_t k = 0; k < s[i].len; k++) {
            int32_t b = t->byte_tok[(unsigned char)w[s[i].start + k]];
            if (b < 0) {
                if (t->unk_id >= 0 && lg_ids_push(ids, n, cap, t->unk_id))
                    goto oom;
                break;
            }
            if (lg_ids_push(ids, n, cap, b))
                goto oom;
        }
    }
    rc = 0;
    goto out;
oom:
    rc = lg_fail(err, "out of memory in BPE");
out:
    free(s);
    free(h.a);
    return rc;
}
