/*
 * mask.c — the token sets behind every mask: per grammar state, computed
 * once by walking the token trie, then looked up (XGrammar's adaptive token
 * mask cache, with llguidance's trie walk).
 *
 * For a grammar node n of rule R (a node with byte transitions), the entry
 * holds what n decides by itself, whatever is below R on the stack:
 *   accepted  tokens whose bytes, fed from n, stay inside R (with any
 *             rules R calls) or make R return exactly at their last byte;
 *   exits     trie nodes x where R can return in the middle of a token: the
 *             tokens below x continue in R's caller, so they depend on the
 *             stack and are decided per step.
 * Every other token is rejected. It is computed by one preorder walk of the
 * trie with the parser started at (n, EXIT) - EXIT is a sentinel parent
 * that records the return instead of popping - pruning a subtree as soon as
 * no parse survives its prefix. Returns at the very first byte are not
 * exits: a state's closure already holds the caller's configuration as
 * another top, which has its own entry.
 *
 * The mask of a state is then, per top: OR the entry's accepted set, and
 * for each exit x walk x's subtree from the caller's state (the parent
 * frame's closure). Inside a JSON string, for example, the entry accepts
 * every token without a quote (a copy of one bitset) and the exits are the
 * trie nodes ending in '"': a few thousand short walks that die at the
 * first byte the enclosing object does not allow.
 *
 * Thread-safety: entries are immutable once built and published into the
 * constraint's table by compare-and-swap (two threads may both build one;
 * the loser frees its copy). The table's memory is bounded by
 * max_table_bytes; past it entries are built per use and freed.
 */
#include "engine/runtime/constrain/cinternal.h"

#include <stdio.h>
#include <stdlib.h>

void lg_centry_free(lg_centry *e)
{
    if (!e)
        return;
    free(e->bits);
    free(e->ids);
    free(e->exits);
    free(e);
}

int lg_walker_init(lg_walker *w, int max_len)
{
    w->nlvl = max_len + 2;
    w->lvl = calloc((size_t)w->nlvl, sizeof *w->lvl);
    return w->lvl ? 0 : -1;
}

void lg_walker_free(lg_walker *w)
{
    if (!w->lvl)
        return;
    for (int i = 0; i < w->nlvl; i++)
        lg_pstate_free(&w->lvl[i]);
    free(w->lvl);
    w->lvl = NULL;
}

static inline void lg_set_bits(uint32_t *mask, const lg_cvocab *v, int32_t tn)
{
    int32_t k0 = v->t_tok0[tn], k1 = k0 + v->t_ntok[tn];
    for (int32_t k = k0; k < k1; k++) {
        int32_t id = v->tok_sorted[k];
        mask[id >> 5] |= 1u << (id & 31);
    }
}

int lg_walk_subtree(lg_pda *p, lg_walker *w, const lg_cvocab *v, int32_t x, const lg_pstate *at, uint32_t *mask)
{
    int d0 = v->t_depth[x];
    if (lg_pstate_copy(p, &w->lvl[d0], at))
        return -1;
    for (int32_t i = x + 1; i < v->t_end[x];) {
        int d = v->t_depth[i];
        lg_pstate *s = &w->lvl[d];
        if (lg_pda_step(p, &w->lvl[d - 1], v->t_byte[i], s))
            return -1;
        if (s->n == 0) {
            if (s->accept)
                lg_set_bits(mask, v, i);
            i = v->t_end[i];
            continue;
        }
        lg_set_bits(mask, v, i);
        i++;
    }
    return 0;
}

typedef struct lg_ivec {
    int32_t *p;
    size_t n, cap;
} lg_ivec;

static int lg_ivec_push(lg_ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 256;
        int32_t *np = realloc(a->p, nc * 4);
        if (!np)
            return -1;
        a->p = np;
        a->cap = nc;
    }
    a->p[a->n++] = x;
    return 0;
}

static int lg_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static lg_centry *lg_entry_compute(lg_constraint *c, int32_t node, lg_err *err)
{
    const lg_cvocab *v = c->v;
    lg_frames fr;
    lg_pda p;
    lg_walker w = {0};
    lg_ivec acc = {0}, ex = {0};
    lg_centry *e = NULL;
    if (lg_frames_init(&fr, NULL, 0, c->lim.max_frames)) {
        lg_fail(err, "constraint: out of memory");
        return NULL;
    }
    lg_pda_init(&p, c->g, &fr, &c->lim);
    if (lg_walker_init(&w, v->max_len))
        goto oom;
    const lg_cgram *g = c->g;
    /* simple[d]: the grammar node when the parse at depth d is one top
     * (node, EXIT) on a node with byte edges only; then a step is one table
     * lookup, no frame, no closure (the common case: inside a string or a
     * number). -1: the full state is in w.lvl[d]. */
    int32_t *simple = malloc(((size_t)v->max_len + 2) * sizeof *simple);
    if (!simple)
        goto oom;
    simple[0] = node;
    int32_t f0 = lg_frames_intern(&p, node, LG_FR_EXIT);
    if (f0 < 0 || lg_pstate_reserve(&p, &w.lvl[0], 1)) {
        free(simple);
        goto fail;
    }
    w.lvl[0].tops[0] = f0;
    w.lvl[0].n = 1;
    for (int32_t i = 1; i < v->n_nodes;) {
        int d = v->t_depth[i];
        if (d == 1 && fr.n > 65536) {
            /* bound the arena: nothing below depth 1 is live between root children */
            lg_frames_reset(&fr);
            f0 = lg_frames_intern(&p, node, LG_FR_EXIT);
            if (f0 < 0) {
                free(simple);
                goto fail;
            }
            w.lvl[0].tops[0] = f0;
        }
        lg_pstate *s = &w.lvl[d];
        if (simple[d - 1] >= 0) {
            int32_t t = lg_cg_next(g, simple[d - 1], v->t_byte[i]);
            if (t < 0) {
                i = v->t_end[i];
                continue;
            }
            if (g->flags[t] == LG_CN_BYTES) {
                simple[d] = t;
                for (int32_t k = v->t_tok0[i]; k < v->t_tok0[i] + v->t_ntok[i]; k++)
                    if (lg_ivec_push(&acc, v->tok_sorted[k])) {
                        free(simple);
                        goto oom;
                    }
                i++;
                continue;
            }
            int32_t ft = lg_frames_intern(&p, t, LG_FR_EXIT);
            if (ft < 0 || lg_pda_closure(&p, &ft, 1, s)) {
                free(simple);
                goto fail;
            }
        } else if (lg_pda_step(&p, &w.lvl[d - 1], v->t_byte[i], s)) {
            free(simple);
            goto fail;
        }
        simple[d] = -1;
        if (s->n == 0 && !s->exit) {
            i = v->t_end[i];
            continue;
        }
        for (int32_t k = v->t_tok0[i]; k < v->t_tok0[i] + v->t_ntok[i]; k++)
            if (lg_ivec_push(&acc, v->tok_sorted[k]))
                goto oom;
        if (s->exit && v->t_end[i] > i + 1 && lg_ivec_push(&ex, i))
            goto oom;
        if (s->n == 0) {
            i = v->t_end[i];
            continue;
        }
        i++;
    }
    free(simple);
    e = calloc(1, sizeof *e);
    if (!e)
        goto oom;
    e->n_acc = (int32_t)acc.n;
    if (acc.n > (size_t)v->n_words) {
        e->bits = calloc((size_t)v->n_words, 4);
        if (!e->bits)
            goto oom;
        for (size_t k = 0; k < acc.n; k++)
            e->bits[acc.p[k] >> 5] |= 1u << (acc.p[k] & 31);
        e->bytes = (size_t)v->n_words * 4;
        free(acc.p);
    } else {
        qsort(acc.p, acc.n, 4, lg_cmp_i32);
        e->ids = acc.p;
        e->bytes = acc.n * 4;
    }
    acc.p = NULL;
    e->n_exit = (int32_t)ex.n;
    e->exits = ex.p;
    ex.p = NULL;
    e->bytes += (size_t)e->n_exit * 4 + sizeof *e;
    goto done;
oom:
    lg_fail(err, "constraint: out of memory");
    lg_centry_free(e);
    e = NULL;
    goto done;
fail:
    lg_fail(err, "%s", p.why[0] ? p.why : "constraint: out of memory");
    lg_centry_free(e);
    e = NULL;
done:
    free(acc.p);
    free(ex.p);
    lg_walker_free(&w);
    lg_pda_free(&p);
    lg_frames_free(&fr);
    return e;
}

const lg_centry *lg_constraint_entry(lg_constraint *c, int32_t node, lg_centry **tmp, lg_err *err)
{
    *tmp = NULL;
    lg_centry *e = atomic_load_explicit(&c->table[node], memory_order_acquire);
    if (e)
        return e;
    e = lg_entry_compute(c, node, err);
    if (!e)
        return NULL;
    size_t nb = atomic_fetch_add(&c->table_bytes, e->bytes) + e->bytes;
    if (nb > c->lim.max_table_bytes) {
        atomic_fetch_sub(&c->table_bytes, e->bytes);
        *tmp = e;
        return e;
    }
    lg_centry *expected = NULL;
    if (atomic_compare_exchange_strong(&c->table[node], &expected, e)) {
        atomic_fetch_add(&c->table_entries, 1);
        return e;
    }
    atomic_fetch_sub(&c->table_bytes, e->bytes);
    lg_centry_free(e);
    return expected;
}
