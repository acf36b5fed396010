/*
 * pda.c — the parser: hash-consed stack frames, closure and byte steps
 * over an lg_cgram (see cinternal.h for the model).
 *
 * Workload: the hot loop of mask computation (a walk of the token trie is
 * one lg_pda_step per trie node visited) and of every accepted token. A
 * step is, per top, one table lookup plus one intern (open addressing on
 * (node, parent)); the closure is a worklist with generation-stamped
 * visited marks, so it allocates nothing once the buffers have grown.
 */
#include "engine/runtime/constrain/cinternal.h"

#include <stdio.h>
#include <stdlib.h>

int lg_frames_init(lg_frames *f, lg_frames *base, int32_t bit, int32_t max)
{
    memset(f, 0, sizeof *f);
    f->base = base;
    f->bit = bit;
    f->max = max;
    f->epoch = 1;
    f->htmask = 255;
    f->ht = malloc(256 * sizeof *f->ht);
    f->ht_epoch = calloc(256, sizeof *f->ht_epoch);
    if (!f->ht || !f->ht_epoch) {
        lg_frames_free(f);
        return -1;
    }
    return 0;
}

void lg_frames_free(lg_frames *f)
{
    free(f->node);
    free(f->parent);
    free(f->depth);
    free(f->mark);
    free(f->ht);
    free(f->ht_epoch);
    memset(f, 0, sizeof *f);
}

void lg_frames_reset(lg_frames *f)
{
    f->n = 0;
    if (++f->epoch == 0) {
        memset(f->ht_epoch, 0, ((size_t)f->htmask + 1) * sizeof *f->ht_epoch);
        f->epoch = 1;
    }
}

int lg_frames_copy(lg_frames *dst, const lg_frames *src)
{
    lg_frames_free(dst);
    *dst = *src;
    dst->node = dst->parent = dst->depth = NULL;
    dst->mark = NULL;
    dst->ht = NULL;
    dst->ht_epoch = NULL;
    size_t cap = (size_t)src->cap, slots = (size_t)src->htmask + 1;
    dst->node = malloc(cap * 4 + 4);
    dst->parent = malloc(cap * 4 + 4);
    dst->depth = malloc(cap * 4 + 4);
    dst->mark = calloc(cap + 1, 4);
    dst->ht = malloc(slots * 4);
    dst->ht_epoch = malloc(slots * 4);
    if (!dst->node || !dst->parent || !dst->depth || !dst->mark || !dst->ht || !dst->ht_epoch) {
        lg_frames_free(dst);
        return -1;
    }
    memcpy(dst->node, src->node, (size_t)src->n * 4);
    memcpy(dst->parent, src->parent, (size_t)src->n * 4);
    memcpy(dst->depth, src->depth, (size_t)src->n * 4);
    memcpy(dst->ht, src->ht, slots * 4);
    memcpy(dst->ht_epoch, src->ht_epoch, slots * 4);
    return 0;
}

static inline uint32_t lg_fr_hash(int32_t node, int32_t parent)
{
    uint64_t h = ((uint64_t)(uint32_t)node << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* Looks (node, parent) up in one arena; local index or -1. */
static int32_t lg_fr_find(const lg_frames *f, int32_t node, int32_t parent, uint32_t *slot)
{
    uint32_t h = lg_fr_hash(node, parent) & f->htmask;
    while (f->ht_epoch[h] == f->epoch) {
        int32_t i = f->ht[h];
        if (f->node[i] == node && f->parent[i] == parent)
            return i;
        h = (h + 1) & f->htmask;
    }
    if (slot)
        *slot = h;
    return -1;
}

static int lg_fr_grow(lg_frames *f)
{
    if (f->n == f->cap) {
        int32_t nc = f->cap ? f->cap * 2 : 64;
        int32_t *a = realloc(f->node, (size_t)nc * 4);
        if (!a)
            return -1;
        f->node = a;
        a = realloc(f->parent, (size_t)nc * 4);
        if (!a)
            return -1;
        f->parent = a;
        a = realloc(f->depth, (size_t)nc * 4);
        if (!a)
            return -1;
        f->depth = a;
        uint32_t *m = realloc(f->mark, (size_t)nc * 4);
        if (!m)
            return -1;
        memset(m + f->cap, 0, (size_t)(nc - f->cap) * 4);
        f->mark = m;
        f->cap = nc;
    }
    if ((uint32_t)(f->n + 1) * 2 > f->htmask) {
        uint32_t nm = f->htmask * 2 + 1;
        int32_t *nh = malloc(((size_t)nm + 1) * 4);
        uint32_t *ne = calloc((size_t)nm + 1, 4);
        if (!nh || !ne) {
            free(nh);
            free(ne);
            return -1;
        }
        for (int32_t i = 0; i < f->n; i++) {
            uint32_t h = lg_fr_hash(f->node[i], f->parent[i]) & nm;
            while (ne[h] == 1)
                h = (h + 1) & nm;
            ne[h] = 1;
            nh[h] = i;
        }
        free(f->ht);
        free(f->ht_epoch);
        f->ht = nh;
        f->ht_epoch = ne;
        f->htmask = nm;
        f->epoch = 1;
    }
    return 0;
}

int32_t lg_frames_intern(lg_pda *p, int32_t node, int32_t parent)
{
    lg_frames *f = p->fr;
    if (f->base) {
        int32_t i = lg_fr_find(f->base, node, parent, NULL);
        if (i >= 0)
            return i | f->base->bit;
    }
    uint32_t slot;
    int32_t i = lg_fr_find(f, node, parent, &slot);
    if (i >= 0)
        return i | f->bit;
    int32_t d = parent >= 0 ? lg_fr_layer(f, parent)->depth[parent & ~LG_FR_SCRATCH] + 1 : 1;
    if (d > p->max_stack) {
        p->failed = true;
        snprintf(p->why, sizeof p->why, "constraint: grammar nesting exceeds max_stack (%d)", p->max_stack);
        return -1;
    }
    if (f->n >= f->max) {
        p->failed = true;
        snprintf(p->why, sizeof p->why, "constraint: parser state exceeds max_frames (%d)", f->max);
        return -1;
    }
    int32_t before = (int32_t)f->htmask;
    if (lg_fr_grow(f)) {
        p->failed = true;
        snprintf(p->why, sizeof p->why, "constraint: out of memory");
        return -1;
    }
    if ((int32_t)f->htmask != before)
        lg_fr_find(f, node, parent, &slot);
    i = f->n++;
    f->node[i] = node;
    f->parent[i] = parent;
    f->depth[i] = d;
    f->mark[i] = 0;
    f->ht[slot] = i;
    f->ht_epoch[slot] = f->epoch;
    return i | f->bit;
}

void lg_pda_init(lg_pda *p, const lg_cgram *g, lg_frames *fr, const lg_climits *lim)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->fr = fr;
    p->max_stack = lim->max_stack;
    p->max_tops = lim->max_tops;
}

void lg_pda_free(lg_pda *p)
{
    free(p->work);
    free(p->seeds);
    p->work = p->seeds = NULL;
}

int lg_pstate_reserve(lg_pda *p, lg_pstate *s, int n)
{
    if (n <= s->cap)
        return 0;
    int nc = s->cap ? s->cap : 8;
    while (nc < n)
        nc *= 2;
    int32_t *t = realloc(s->tops, (size_t)nc * 4);
    if (!t) {
        p->failed = true;
        snprintf(p->why, sizeof p->why, "constraint: out of memory");
        return -1;
    }
    s->tops = t;
    s->cap = nc;
    return 0;
}

void lg_pstate_free(lg_pstate *s)
{
    free(s->tops);
    memset(s, 0, sizeof *s);
}

int lg_pstate_copy(lg_pda *p, lg_pstate *dst, const lg_pstate *src)
{
    if (lg_pstate_reserve(p, dst, src->n))
        return -1;
    if (src->n)
        memcpy(dst->tops, src->tops, (size_t)src->n * 4);
    dst->n = src->n;
    dst->accept = src->accept;
    dst->exit = src->exit;
    return 0;
}

static inline uint32_t *lg_fr_markp(lg_frames *f, int32_t id)
{
    return &lg_fr_layer(f, id)->mark[id & ~LG_FR_SCRATCH];
}

static int lg_pda_push(lg_pda *p, int *nw, int32_t id)
{
    if (*nw == p->capwork) {
        int nc = p->capwork ? p->capwork * 2 : 64;
        int32_t *w = realloc(p->work, (size_t)nc * 4);
        if (!w) {
            p->failed = true;
            snprintf(p->why, sizeof p->why, "constraint: out of memory");
            return -1;
        }
        p->work = w;
        p->capwork = nc;
    }
    p->work[(*nw)++] = id;
    return 0;
}

static void lg_sort_tops(int32_t *t, int n)
{
    for (int i = 1; i < n; i++) {
        int32_t x = t[i];
        int j = i - 1;
        while (j >= 0 && t[j] > x) {
            t[j + 1] = t[j];
            j--;
        }
        t[j + 1] = x;
    }
}

int lg_pda_closure(lg_pda *p, const int32_t *seeds, int ns, lg_pstate *out)
{
    const lg_cgram *g = p->g;
    lg_frames *f = p->fr;
    out->n = 0;
    out->accept = out->exit = 0;
    if (++p->gen == 0)
        p->gen = 1; /* marks of the wrapped generation are stale but harmless after 4G closures */
    uint32_t gen = p->gen;
    int nw = 0;
    for (int i = 0; i < ns; i++) {
        int32_t id = seeds[i];
        if (id == LG_FR_NONE) {
            out->accept = 1;
            continue;
        }
        if (id == LG_FR_EXIT) {
            out->exit = 1;
            continue;
        }
        uint32_t *m = lg_fr_markp(f, id);
        if (*m != gen) {
            *m = gen;
            if (lg_pda_push(p, &nw, id))
                return -1;
        }
    }
    while (nw) {
        int32_t id = p->work[--nw];
        int32_t node = lg_fr_node(f, id), par = lg_fr_parent(f, id);
        uint8_t fl = g->flags[node];
        if (fl & LG_CN_BYTES) {
            if (out->n >= p->max_tops) {
                p->failed = true;
                snprintf(p->why, sizeof p->why, "constraint: more than max_tops (%d) simultaneous parses", p->max_tops);
                return -1;
            }
            if (lg_pstate_reserve(p, out, out->n + 1))
                return -1;
            out->tops[out->n++] = id;
        }
        if (fl & LG_CN_CALLS) {
            for (int32_t j = g->call_off[node]; j < g->call_off[node + 1]; j++) {
                int32_t ret = g->call_ret[j];
                int32_t retf = g->flags[ret] == LG_CN_FINAL ? par : lg_frames_intern(p, ret, par);
                if (retf == -1 && g->flags[ret] != LG_CN_FINAL)
                    return -1;
                int32_t h = lg_frames_intern(p, g->rule_start[g->call_rule[j]], retf);
                if (h < 0)
                    return -1;
                uint32_t *m = lg_fr_markp(f, h);
                if (*m != gen) {
                    *m = gen;
                    if (lg_pda_push(p, &nw, h))
                        return -1;
                }
            }
        }
        if (fl & LG_CN_FINAL) {
            if (par == LG_FR_NONE)
                out->accept = 1;
            else if (par == LG_FR_EXIT)
                out->exit = 1;
            else {
                uint32_t *m = lg_fr_markp(f, par);
                if (*m != gen) {
                    *m = gen;
                    if (lg_pda_push(p, &nw, par))
                        return -1;
                }
            }
        }
    }
    if (out->n > 1)
        lg_sort_tops(out->tops, out->n);
    return 0;
}

int lg_pda_step(lg_pda *p, const lg_pstate *in, uint8_t byte, lg_pstate *out)
{
    const lg_cgram *g = p->g;
    if (in->n > p->capseeds) {
        int nc = in->n * 2;
        int32_t *s = realloc(p->seeds, (size_t)nc * 4);
        if (!s) {
            p->failed = true;
            snprintf(p->why, sizeof p->why, "constraint: out of memory");
            return -1;
        }
        p->seeds = s;
        p->capseeds = nc;
    }
    int ns = 0;
    uint8_t c = g->cls[byte];
    for (int i = 0; i < in->n; i++) {
        int32_t id = in->tops[i];
        int32_t node = lg_fr_node(p->fr, id);
        int32_t t = g->next[(size_t)node * g->n_cls + c];
        if (t < 0)
            continue;
        int32_t nf = lg_frames_intern(p, t, lg_fr_parent(p->fr, id));
        if (nf < 0)
            return -1;
        p->seeds[ns++] = nf;
    }
    if (ns == 0) {
        out->n = 0;
        out->accept = out->exit = 0;
        return 0;
    }
    /* fast path: one target with bytes only (the common case inside a regex) */
    if (ns == 1) {
        int32_t node = lg_fr_node(p->fr, p->seeds[0]);
        if (g->flags[node] == LG_CN_BYTES) {
            if (lg_pstate_reserve(p, out, 1))
                return -1;
            out->tops[0] = p->seeds[0];
            out->n = 1;
            out->accept = out->exit = 0;
            return 0;
        }
    }
    return lg_pda_closure(p, p->seeds, ns, out);
}

int lg_pda_start(lg_pda *p, lg_pstate *out)
{
    int32_t f0 = lg_frames_intern(p, p->g->rule_start[p->g->root], LG_FR_NONE);
    if (f0 < 0)
        return -1;
    return lg_pda_closure(p, &f0, 1, out);
}

void lg_pda_next_bytes(lg_pda *p, const lg_pstate *s, uint8_t set[32])
{
    const lg_cgram *g = p->g;
    memset(set, 0, 32);
    for (int i = 0; i < s->n; i++) {
        int32_t node = lg_fr_node(p->fr, s->tops[i]);
        for (int c = 0; c < g->n_cls; c++)
            if (g->next[(size_t)node * g->n_cls + c] >= 0)
                for (int k = 0; k < 32; k++)
                    set[k] |= g->cls_bytes[c][k];
    }
}
