/*
 * matcher.c — the per-request matcher: the parser state advanced by each
 * accepted token, rollback, forced bytes, and the mask of the current state
 * (see constrain.h for the contract, mask.c for the token sets).
 *
 * State: `cur` (sorted tops + accept) whose frames live in the matcher's
 * main arena; a ring of the last LG_CMATCH_HISTORY states for rollback
 * (frames are immutable and never freed while the matcher lives, so an old
 * state stays valid). Everything that only looks (masks, accepts, forced
 * bytes, completions) runs in the scratch arena layered over main and
 * resets it afterwards. A small memo keeps the last few masks by state: a
 * sequence generating a long string or number sits in one state for many
 * steps, and then a mask is one memcpy.
 *
 * Memory: the main arena holds the distinct stacks a request passes
 * through (hash-consed: a non-recursive schema reaches a fixed set), bounded
 * by max_frames; the history is LG_CMATCH_HISTORY small arrays; the memo is
 * LG_CMEMO masks of n_words words each (64 KB for a 128k vocabulary).
 */
#include "engine/runtime/constrain/cinternal.h"

#include <stdio.h>
#include <stdlib.h>

#define LG_CMEMO 4

typedef struct lg_chist {
    lg_pstate s;
    uint8_t done;
} lg_chist;

typedef struct lg_cmemo {
    lg_pstate key;
    uint32_t *mask;
    int count;
    bool valid;
} lg_cmemo;

struct lg_cmatch {
    lg_constraint *c;
    lg_frames main, scratch;
    lg_pda pda;
    lg_pstate cur, a, b, par;
    lg_walker w;
    lg_chist hist[LG_CMATCH_HISTORY];
    int hh, hn;
    bool done;
    lg_cmemo memo[LG_CMEMO];
    int memo_next;
};

static void lg_cm_use_main(lg_cmatch *m)
{
    m->pda.fr = &m->main;
    m->pda.failed = false;
    m->pda.why[0] = 0;
}

static void lg_cm_use_scratch(lg_cmatch *m)
{
    lg_frames_reset(&m->scratch);
    m->pda.fr = &m->scratch;
    m->pda.failed = false;
    m->pda.why[0] = 0;
}

static lg_cmatch *lg_cm_alloc(lg_constraint *c)
{
    lg_cmatch *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->c = lg_constraint_ref(c);
    if (lg_frames_init(&m->main, NULL, 0, c->lim.max_frames) ||
        lg_frames_init(&m->scratch, &m->main, LG_FR_SCRATCH, c->lim.max_frames) ||
        lg_walker_init(&m->w, c->v->max_len)) {
        lg_cmatch_free(m);
        return NULL;
    }
    lg_pda_init(&m->pda, c->g, &m->main, &c->lim);
    return m;
}

lg_cmatch *lg_cmatch_new(lg_constraint *c)
{
    lg_cmatch *m = lg_cm_alloc(c);
    if (!m)
        return NULL;
    lg_cm_use_main(m);
    if (lg_pda_start(&m->pda, &m->cur)) {
        lg_cmatch_free(m);
        return NULL;
    }
    return m;
}

lg_cmatch *lg_cmatch_clone(const lg_cmatch *src)
{
    lg_cmatch *m = lg_cm_alloc(src->c);
    if (!m)
        return NULL;
    if (lg_frames_copy(&m->main, &src->main)) {
        lg_cmatch_free(m);
        return NULL;
    }
    m->scratch.base = &m->main;
    lg_cm_use_main(m);
    if (lg_pstate_copy(&m->pda, &m->cur, &src->cur)) {
        lg_cmatch_free(m);
        return NULL;
    }
    for (int i = 0; i < LG_CMATCH_HISTORY; i++) {
        if (src->hist[i].s.n || src->hist[i].s.accept || src->hist[i].s.cap) {
            if (lg_pstate_copy(&m->pda, &m->hist[i].s, &src->hist[i].s)) {
                lg_cmatch_free(m);
                return NULL;
            }
            m->hist[i].done = src->hist[i].done;
        }
    }
    m->hh = src->hh;
    m->hn = src->hn;
    m->done = src->done;
    return m;
}

void lg_cmatch_free(lg_cmatch *m)
{
    if (!m)
        return;
    lg_frames_free(&m->main);
    lg_frames_free(&m->scratch);
    lg_pda_free(&m->pda);
    lg_pstate_free(&m->cur);
    lg_pstate_free(&m->a);
    lg_pstate_free(&m->b);
    lg_pstate_free(&m->par);
    lg_walker_free(&m->w);
    for (int i = 0; i < LG_CMATCH_HISTORY; i++)
        lg_pstate_free(&m->hist[i].s);
    for (int i = 0; i < LG_CMEMO; i++) {
        lg_pstate_free(&m->memo[i].key);
        free(m->memo[i].mask);
    }
    lg_constraint_unref(m->c);
    free(m);
}

static bool lg_is_eos(const lg_cvocab *v, int32_t t)
{
    for (int i = 0; i < v->n_eos; i++)
        if (v->eos[i] == t)
            return true;
    return false;
}

static bool lg_pstate_eq(const lg_pstate *x, const lg_pstate *y)
{
    return x->n == y->n && x->accept == y->accept && (x->n == 0 || !memcmp(x->tops, y->tops, (size_t)x->n * 4));
}

/* Feeds bytes from `from` into m->a / m->b; returns the final state or NULL
 * if some byte is refused (or a limit hit: pda.failed). */
static lg_pstate *lg_cm_feed(lg_cmatch *m, const lg_pstate *from, const uint8_t *s, size_t n)
{
    const lg_pstate *in = from;
    lg_pstate *out = &m->a;
    if (n == 0) {
        if (lg_pstate_copy(&m->pda, &m->a, from))
            return NULL;
        return &m->a;
    }
    for (size_t i = 0; i < n; i++) {
        if (lg_pda_step(&m->pda, in, s[i], out))
            return NULL;
        if (out->n == 0 && !out->accept)
            return NULL;
        in = out;
        out = out == &m->a ? &m->b : &m->a;
    }
    return (lg_pstate *)in;
}

static int lg_cm_push_hist(lg_cmatch *m)
{
    lg_chist *h = &m->hist[m->hh];
    if (lg_pstate_copy(&m->pda, &h->s, &m->cur))
        return -1;
    h->done = m->done;
    m->hh = (m->hh + 1) % LG_CMATCH_HISTORY;
    if (m->hn < LG_CMATCH_HISTORY)
        m->hn++;
    return 0;
}

static int lg_cm_commit_bytes(lg_cmatch *m, const uint8_t *s, size_t n, lg_err *err, int32_t token)
{
    lg_cm_use_main(m);
    lg_pstate *r = lg_cm_feed(m, &m->cur, s, n);
    if (!r) {
        if (m->pda.failed)
            return lg_fail(err, "%s", m->pda.why);
        if (token >= 0)
            return lg_fail(err, "constraint: token %d is not allowed here", token);
        return lg_fail(err, "constraint: bytes not allowed here");
    }
    if (lg_cm_push_hist(m))
        return lg_fail(err, "constraint: out of memory");
    lg_pstate t = m->cur;
    m->cur = *r;
    *r = t;
    return 0;
}

int lg_cmatch_advance(lg_cmatch *m, int32_t token, lg_err *err)
{
    const lg_cvocab *v = m->c->v;
    if (m->done)
        return lg_fail(err, "constraint: the output is already complete (EOS accepted)");
    if (token < 0 || token >= v->n_vocab)
        return lg_fail(err, "constraint: token %d outside the vocabulary", token);
    if (lg_is_eos(v, token)) {
        if (!m->cur.accept)
            return lg_fail(err, "constraint: EOS before the output is complete");
        if (lg_cm_push_hist(m))
            return lg_fail(err, "constraint: out of memory");
        m->done = true;
        return 0;
    }
    if (v->excluded[token])
        return lg_fail(err, "constraint: special token %d is not allowed", token);
    return lg_cm_commit_bytes(m, v->blob + v->off[token], v->len[token], err, token);
}

int lg_cmatch_advance_bytes(lg_cmatch *m, const char *bytes, size_t n, lg_err *err)
{
    if (m->done)
        return lg_fail(err, "constraint: the output is already complete (EOS accepted)");
    return lg_cm_commit_bytes(m, (const uint8_t *)bytes, n, err, -1);
}

bool lg_cmatch_accepts(lg_cmatch *m, int32_t token)
{
    const lg_cvocab *v = m->c->v;
    if (m->done || token < 0 || token >= v->n_vocab)
        return false;
    if (lg_is_eos(v, token))
        return m->cur.accept;
    if (v->excluded[token])
        return false;
    lg_cm_use_scratch(m);
    bool ok = lg_cm_feed(m, &m->cur, v->blob + v->off[token], v->len[token]) != NULL;
    lg_cm_use_main(m);
    return ok;
}

int lg_cmatch_rollback(lg_cmatch *m, int k)
{
    if (k < 0 || k > m->hn)
        return -1;
    if (k == 0)
        return 0;
    int idx = (m->hh - k + LG_CMATCH_HISTORY) % LG_CMATCH_HISTORY;
    lg_pstate t = m->cur;
    m->cur = m->hist[idx].s;
    m->hist[idx].s = t;
    m->done = m->hist[idx].done;
    m->hh = idx;
    m->hn -= k;
    return 0;
}

int lg_cmatch_history(const lg_cmatch *m) { return m->hn; }
bool lg_cmatch_is_accepting(const lg_cmatch *m) { return !m->done && m->cur.accept; }
bool lg_cmatch_is_done(const lg_cmatch *m) { return m->done || (m->cur.accept && m->cur.n == 0); }

size_t lg_cmatch_forced_bytes(lg_cmatch *m, char *buf, size_t cap)
{
    if (m->done)
        return 0;
    lg_cm_use_scratch(m);
    size_t k = 0;
    if (lg_pstate_copy(&m->pda, &m->par, &m->cur))
        return 0;
    while (k < cap && !m->par.accept && m->par.n > 0) {
        uint8_t set[32];
        lg_pda_next_bytes(&m->pda, &m->par, set);
        int cnt = 0, only = -1;
        for (int by = 0; by < 256 && cnt < 2; by++)
            if (set[by >> 3] >> (by & 7) & 1)
                cnt++, only = by;
        if (cnt != 1)
            break;
        if (lg_pda_step(&m->pda, &m->par, (uint8_t)only, &m->a))
            break;
        buf[k++] = (char)only;
        lg_pstate t = m->par;
        m->par = m->a;
        m->a = t;
    }
    lg_cm_use_main(m);
    return k;
}

int32_t lg_cmask_single(const uint32_t *mask, int n_words)
{
    int32_t found = -1;
    for (int i = 0; i < n_words; i++) {
        if (!mask[i])
            continue;
        if (found >= 0 || (mask[i] & (mask[i] - 1)))
            return -1;
        found = i * 32 + __builtin_ctz(mask[i]);
    }
    return found;
}

int lg_cmatch_mask(lg_cmatch *m, uint32_t *mask, int n_words, lg_err *err)
{
    lg_constraint *c = m->c;
    const lg_cvocab *v = c->v;
    if (n_words < v->n_words)
        return lg_fail(err, "constraint: mask of %d words, the vocabulary needs %d", n_words, v->n_words);
    memset(mask, 0, (size_t)n_words * 4);
    if (m->done)
        return 0;
    for (int i = 0; i < LG_CMEMO; i++) {
        lg_cmemo *me = &m->memo[i];
        if (me->valid && lg_pstate_eq(&me->key, &m->cur)) {
            memcpy(mask, me->mask, (size_t)v->n_words * 4);
            return me->count;
        }
    }
    lg_cm_use_scratch(m);
    for (int t = 0; t < m->cur.n; t++) {
        int32_t f = m->cur.tops[t];
        int32_t node = lg_fr_node(&m->main, f);
        lg_centry *tmp = NULL;
        const lg_centry *e = lg_constraint_entry(c, node, &tmp, err);
        if (!e)
            return -1;
        if (e->bits)
            for (int i = 0; i < v->n_words; i++)
                mask[i] |= e->bits[i];
        else
            for (int32_t k = 0; k < e->n_acc; k++)
                mask[e->ids[k] >> 5] |= 1u << (e->ids[k] & 31);
        int32_t par = lg_fr_parent(&m->main, f);
        if (e->n_exit && par >= 0) {
            if (lg_pda_closure(&m->pda, &par, 1, &m->par)) {
                lg_centry_free(tmp);
                lg_cm_use_main(m);
                return lg_fail(err, "%s", m->pda.why);
            }
            if (m->par.n > 0)
                for (int32_t k = 0; k < e->n_exit; k++)
                    if (lg_walk_subtree(&m->pda, &m->w, v, e->exits[k], &m->par, mask)) {
                        lg_centry_free(tmp);
                        lg_cm_use_main(m);
                        return lg_fail(err, "%s", m->pda.why);
                    }
        }
        lg_centry_free(tmp);
    }
    lg_cm_use_main(m);
    if (m->cur.accept)
        for (int i = 0; i < v->n_eos; i++)
            mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
    int count = 0;
    for (int i = 0; i < v->n_words; i++)
        count += __builtin_popcount(mask[i]);
    lg_cmemo *me = &m->memo[m->memo_next];
    if (!me->mask)
        me->mask = malloc((size_t)v->n_words * 4);
    if (me->mask && !lg_pstate_copy(&m->pda, &me->key, &m->cur)) {
        memcpy(me->mask, mask, (size_t)v->n_words * 4);
        me->count = count;
        me->valid = true;
        m->memo_next = (m->memo_next + 1) % LG_CMEMO;
    }
    return count;
}

/* ---- shortest completion (tests) ------------------------------------------------------ */

typedef struct lg_bfs_node {
    size_t off;
    int n;
    uint8_t accept;
    int32_t parent;
    uint8_t byte;
} lg_bfs_node;

long lg_cmatch_shortest_completion(lg_cmatch *m, char *buf, size_t cap)
{
    if (m->done)
        return 0;
    const int max_nodes = 200000;
    lg_bfs_node *q = malloc((size_t)max_nodes * sizeof *q);
    int32_t *pool = NULL;
    size_t np = 0, capp = 0;
    uint32_t htmask = (1u << 19) - 1;
    int32_t *ht = malloc(((size_t)htmask + 1) * 4);
    long result = -1;
    if (!q || !ht)
        goto out;
    for (uint32_t i = 0; i <= htmask; i++)
        ht[i] = -1;
    lg_cm_use_scratch(m);
    int nq = 0;
#define BFS_ADD(st, par, by)                                                                 \
    do {                                                                                     \
        uint32_t h_ = (st)->accept * 31u;                                                     \
        for (int k_ = 0; k_ < (st)->n; k_++)                                                 \
            h_ = (h_ ^ (uint32_t)(st)->tops[k_]) * 16777619u;                                \
        h_ &= htmask;                                                                        \
        bool dup_ = false;                                                                   \
        while (ht[h_] >= 0) {                                                                \
            lg_bfs_node *o_ = &q[ht[h_]];                                                    \
            if (o_->n == (st)->n && o_->accept == (st)->accept &&                            \
                ((st)->n == 0 || !memcmp(pool + o_->off, (st)->tops, (size_t)(st)->n * 4))) {  \
                dup_ = true;                                                                 \
                break;                                                                       \
            }                                                                                \
            h_ = (h_ + 1) & htmask;                                                          \
        }                                                                                    \
        if (!dup_ && nq < max_nodes) {                                                       \
            if (np + (size_t)(st)->n > capp) {                                               \
                capp = (capp + (size_t)(st)->n) * 2 + 1024;                                  \
                int32_t *pp_ = realloc(pool, capp * 4);                                      \
                if (!pp_)                                                                    \
                    goto out;                                                                \
                pool = pp_;                                                                  \
            }                                                                                \
            if ((st)->n)                                                                     \
                memcpy(pool + np, (st)->tops, (size_t)(st)->n * 4);                          \
            q[nq] = (lg_bfs_node){np, (st)->n, (st)->accept, (par), (by)};                   \
            np += (size_t)(st)->n;                                                           \
            ht[h_] = nq++;                                                                   \
        }                                                                                    \
    } while (0)
    BFS_ADD(&m->cur, -1, 0);
    for (int qi = 0; qi < nq; qi++) {
        if (q[qi].accept) {
            size_t len = 0;
            for (int j = qi; q[j].parent >= 0; j = q[j].parent)
                len++;
            if (len > cap)
                goto out;
            size_t k = len;
            for (int j = qi; q[j].parent >= 0; j = q[j].parent)
                buf[--k] = (char)q[j].byte;
            result = (long)len;
            goto out;
        }
        lg_pstate cur = {.tops = pool ? pool + q[qi].off : NULL, .n = q[qi].n, .accept = q[qi].accept};
        uint8_t set[32];
        lg_pda_next_bytes(&m->pda, &cur, set);
        for (int by = 0; by < 256; by++) {
            if (!(set[by >> 3] >> (by & 7) & 1))
                continue;
            /* cur.tops points into pool, which BFS_ADD may move: copy first */
            if (lg_pstate_copy(&m->pda, &m->par, &cur))
                goto out;
            if (lg_pda_step(&m->pda, &m->par, (uint8_t)by, &m->a))
                goto out;
            if (m->a.n == 0 && !m->a.accept)
                continue;
            BFS_ADD(&m->a, qi, (uint8_t)by);
            cur.tops = pool ? pool + q[qi].off : NULL;
        }
    }
#undef BFS_ADD
out:
    lg_cm_use_main(m);
    free(q);
    free(pool);
    free(ht);
    return result;
}
