/*
 * automaton.c — byte NFAs, subset construction, and the operations on pure
 * byte DFAs (intersection, difference, JSON quoting). See automaton.h.
 *
 * Subset construction: DFA states are epsilon-closed sets of NFA nodes,
 * interned in an open-addressing table keyed by the sorted node list. For a
 * state, every byte edge of every member contributes (class, target) pairs
 * (classes are contiguous per edge because they come from range
 * boundaries), which are bucketed by class; every call edge contributes
 * (callee, target), grouped by callee. Work per state is linear in the
 * members' edges plus the classes; every new state is charged to the
 * budget, so an exponential blow-up stops at max_dfa_states.
 */
#include "engine/runtime/constrain/automaton.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int lg_cfail(lg_cbudget *b, int code, const char *param, const char *fmt, ...)
{
    if (b->failed)
        return -1;
    b->failed = true;
    if (b->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err->msg, sizeof b->err->msg, fmt, ap);
        va_end(ap);
        b->err->code = code;
        snprintf(b->err->param, sizeof b->err->param, "%s", param ? param : "");
        if (param && *param) {
            size_t n = strlen(b->err->msg);
            snprintf(b->err->msg + n, sizeof b->err->msg - n, " (at %s)", param);
        }
    }
    return -1;
}

int lg_cbudget_tick(lg_cbudget *b)
{
    if (b->failed)
        return -1;
    if (++b->ticks & 1023)
        return 0;
    if (b->deadline > 0 && lg_now() > b->deadline)
        return lg_cfail(b, LG_CERR_LIMIT, "", "compilation took longer than max_compile_ms (%d)", b->max_ms);
    return 0;
}

/* ---- NFA ------------------------------------------------------------------------ */

void lg_nfa_init(lg_nfa *a, lg_cbudget *b)
{
    memset(a, 0, sizeof *a);
    a->b = b;
    a->start = lg_nfa_node(a);
}

void lg_nfa_clear(lg_nfa *a)
{
    free(a->final);
    free(a->e);
    memset(a, 0, sizeof *a);
}

int lg_nfa_node(lg_nfa *a)
{
    if (a->b->failed)
        return -1;
    if (a->b->nfa_states >= a->b->max_nfa) {
        lg_cfail(a->b, LG_CERR_LIMIT, "", "automaton exceeds max_nfa_states (%ld)", a->b->max_nfa);
        return -1;
    }
    if (lg_cbudget_tick(a->b))
        return -1;
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 16;
        uint8_t *f = realloc(a->final, (size_t)nc);
        if (!f) {
            lg_cfail(a->b, LG_CERR_INTERNAL, "", "out of memory");
            return -1;
        }
        a->final = f;
        a->cap = nc;
    }
    a->b->nfa_states++;
    a->final[a->n] = 0;
    return a->n++;
}

static void lg_nfa_edge_add(lg_nfa *a, lg_nfa_edge e)
{
    if (a->b->failed || e.from < 0 || e.to < 0)
        return;
    if (a->ne == a->cape) {
        size_t nc = a->cape ? a->cape * 2 : 32;
        lg_nfa_edge *p = realloc(a->e, nc * sizeof *p);
        if (!p) {
            lg_cfail(a->b, LG_CERR_INTERNAL, "", "out of memory");
            return;
        }
        a->e = p;
        a->cape = nc;
    }
    a->e[a->ne++] = e;
}

void lg_nfa_eps(lg_nfa *a, int from, int to)
{
    lg_nfa_edge_add(a, (lg_nfa_edge){.from = from, .to = to, .callee = -1, .kind = LG_NE_EPS});
}

void lg_nfa_range(lg_nfa *a, int from, int to, uint8_t lo, uint8_t hi)
{
    if (lo > hi)
        return;
    lg_nfa_edge_add(a, (lg_nfa_edge){.from = from, .to = to, .callee = -1, .lo = lo, .hi = hi, .kind = LG_NE_BYTES});
}

void lg_nfa_call(lg_nfa *a, int from, int to, int callee)
{
    lg_nfa_edge_add(a, (lg_nfa_edge){.from = from, .to = to, .callee = callee, .kind = LG_NE_CALL});
}

void lg_nfa_lit(lg_nfa *a, int from, int to, const char *s, size_t n)
{
    if (n == 0) {
        lg_nfa_eps(a, from, to);
        return;
    }
    int cur = from;
    for (size_t i = 0; i < n; i++) {
        int nx = i + 1 == n ? to : lg_nfa_node(a);
        if (nx < 0)
            return;
        lg_nfa_range(a, cur, nx, (uint8_t)s[i], (uint8_t)s[i]);
        cur = nx;
    }
}

/* ---- byte classes ---------------------------------------------------------------------- */

static void lg_cls_from_bounds(const bool bound[257], uint8_t cls[256], int *n_cls)
{
    int c = -1;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || bound[b])
            c++;
        cls[b] = (uint8_t)c;
    }
    *n_cls = c + 1;
}

static void lg_bounds_of(const uint8_t cls[256], bool bound[257])
{
    memset(bound, 0, 257);
    bound[0] = true;
    for (int b = 1; b < 256; b++)
        if (cls[b] != cls[b - 1])
            bound[b] = true;
}

void lg_cls_refine(uint8_t cls[256], int *n_cls, const lg_nfa *a)
{
    bool bound[257];
    lg_bounds_of(cls, bound);
    for (size_t i = 0; i < a->ne; i++) {
        if (a->e[i].kind != LG_NE_BYTES)
            continue;
        bound[a->e[i].lo] = true;
        bound[a->e[i].hi + 1] = true;
    }
    lg_cls_from_bounds(bound, cls, n_cls);
}

/* ---- DFA ------------------------------------------------------------------------------- */

void lg_dfa_free(lg_dfa *d)
{
    if (!d)
        return;
    free(d->next);
    free(d->final);
    free(d->call_off);
    free(d->call_rule);
    free(d->call_to);
    memset(d, 0, sizeof *d);
}

bool lg_dfa_empty(const lg_dfa *d)
{
    if (d->n == 0)
        return true;
    if (d->final[0])
        return false;
    for (int c = 0; c < d->n_cls; c++)
        if (d->next[c] >= 0)
            return false;
    return true;
}

bool lg_dfa_matches(const lg_dfa *d, const char *s, size_t n)
{
    int32_t st = 0;
    if (d->n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        st = d->next[(size_t)st * d->n_cls + d->cls[(uint8_t)s[i]]];
        if (st < 0)
            return false;
    }
    return d->final[st] != 0;
}

/* Growable DFA under construction. */
typedef struct lg_dfab {
    lg_dfa d;
    int32_t cap;
    /* calls, built as a list of (state, rule, to) then laid out */
    int32_t *cs, *cr, *ct;
    size_t nc, capc;
    lg_cbudget *b;
} lg_dfab;

static int lg_dfab_state(lg_dfab *x)
{
    if (x->b->failed)
        return -1;
    if (x->b->dfa_states >= x->b->max_dfa)
        return lg_cfail(x->b, LG_CERR_LIMIT, "", "automaton exceeds max_dfa_states (%ld)", x->b->max_dfa);
    if (lg_cbudget_tick(x->b))
        return -1;
    if (x->d.n == x->cap) {
        int32_t nc = x->cap ? x->cap * 2 : 16;
        int32_t *nx = realloc(x->d.next, (size_t)nc * x->d.n_cls * sizeof *nx);
        if (!nx)
            return lg_cfail(x->b, LG_CERR_INTERNAL, "", "out of memory");
        x->d.next = nx;
        uint8_t *f = realloc(x->d.final, (size_t)nc);
        if (!f)
            return lg_cfail(x->b, LG_CERR_INTERNAL, "", "out of memory");
        x->d.final = f;
        x->cap = nc;
    }
    x->b->dfa_states++;
    int32_t s = x->d.n++;
    for (int c = 0; c < x->d.n_cls; c++)
        x->d.next[(size_t)s * x->d.n_cls + c] = -1;
    x->d.final[s] = 0;
    return s;
}

static int lg_dfab_call(lg_dfab *x, int32_t s, int32_t r, int32_t t)
{
    if (x->nc == x->capc) {
        size_t nc = x->capc ? x->capc * 2 : 16;
        int32_t *a = realloc(x->cs, nc * 4), *b = a ? realloc(x->cr, nc * 4) : NULL, *c = b ? realloc(x->ct, nc * 4) : NULL;
        if (a)
            x->cs = a;
        if (b)
            x->cr = b;
        if (!c)
            return lg_cfail(x->b, LG_CERR_INTERNAL, "", "out of memory");
        x->ct = c;
        x->capc = nc;
    }
    x->cs[x->nc] = s;
    x->cr[x->nc] = r;
    x->ct[x->nc] = t;
    x->nc++;
    return 0;
}

/* Lays out the call list (sorted by state, as produced) into CSR form. */
static int lg_dfab_finish(lg_dfab *x, lg_dfa *out)
{
    if (x->nc) {
        x->d.call_off = calloc((size_t)x->d.n + 1, sizeof(int32_t));
        if (!x->d.call_off)
            return lg_cfail(x->b, LG_CERR_INTERNAL, "", "out of memory");
        for (size_t i = 0; i < x->nc; i++)
            x->d.call_off[x->cs[i] + 1]++;
        for (int32_t s = 0; s < x->d.n; s++)
            x->d.call_off[s + 1] += x->d.call_off[s];
        x->d.call_rule = x->cr;
        x->d.call_to = x->ct;
        x->cr = x->ct = NULL;
    }
    free(x->cs);
    free(x->cr);
    free(x->ct);
    *out = x->d;
    return 0;
}

static void lg_dfab_abort(lg_dfab *x)
{
    lg_dfa_free(&x->d);
    free(x->cs);
    free(x->cr);
    free(x->ct);
}

/* ---- subset construction -------------------------------------------------------------- */

typedef struct lg_sets {
    int32_t *pool;      /* concatenated sorted node sets */
    size_t np, capp;
    size_t *off;        /* [state] offset into pool */
    int32_t *len;       /* [state] */
    int32_t nstates, caps;
    int32_t *ht;        /* state ids, -1 empty */
    uint32_t htmask;
} lg_sets;

static uint32_t lg_hash_ints(const int32_t *v, int n)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)v[i];
        h *= 16777619u;
        h ^= h >> 15;
    }
    return h;
}

static int lg_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Finds or adds a sorted set; *is_new tells which. Returns the id or -1. */
static int32_t lg_sets_intern(lg_sets *S, const int32_t *v, int n, bool *is_new)
{
    *is_new = false;
    if ((uint32_t)S->nstates * 2 >= S->htmask) {
        uint32_t nm = S->htmask ? S->htmask * 2 + 1 : 255;
        int32_t *nh = malloc(((size_t)nm + 1) * sizeof *nh);
        if (!nh)
            return -1;
        for (uint32_t i = 0; i <= nm; i++)
            nh[i] = -1;
        for (int32_t s = 0; s < S->nstates; s++) {
            uint32_t h = lg_hash_ints(S->pool + S->off[s], S->len[s]) & nm;
            while (nh[h] >= 0)
                h = (h + 1) & nm;
            nh[h] = s;
        }
        free(S->ht);
        S->ht = nh;
        S->htmask = nm;
    }
    uint32_t h = lg_hash_ints(v, n) & S->htmask;
    while (S->ht[h] >= 0) {
        int32_t s = S->ht[h];
        if (S->len[s] == n && !memcmp(S->pool + S->off[s], v, (size_t)n * 4))
            return s;
        h = (h + 1) & S->htmask;
    }
    if (S->nstates == S->caps) {
        int32_t nc = S->caps ? S->caps * 2 : 64;
        size_t *no = realloc(S->off, (size_t)nc * sizeof *no);
        if (!no)
            return -1;
        S->off = no;
        int32_t *nl = realloc(S->len, (size_t)nc * sizeof *nl);
        if (!nl)
            return -1;
        S->len = nl;
        S->caps = nc;
    }
    if (S->np + (size_t)n > S->capp) {
        size_t nc = S->capp ? S->capp * 2 : 256;
        while (nc < S->np + (size_t)n)
            nc *= 2;
        int32_t *np = realloc(S->pool, nc * 4);
        if (!np)
            return -1;
        S->pool = np;
        S->capp = nc;
    }
    memcpy(S->pool + S->np, v, (size_t)n * 4);
    S->off[S->nstates] = S->np;
    S->len[S->nstates] = n;
    S->np += (size_t)n;
    S->ht[h] = S->nstates;
    *is_new = true;
    return S->nstates++;
}

static void lg_sets_free(lg_sets *S)
{
    free(S->pool);
    free(S->off);
    free(S->len);
    free(S->ht);
}

typedef struct lg_sc {
    const lg_nfa *a;
    int32_t *adj_off;   /* [n + 1] */
    int32_t *adj;       /* edge indices by from */
    uint32_t *mark;     /* [n] generation stamps */
    uint32_t gen;
    int32_t *stk;       /* [n] */
    int32_t *buf;       /* [n] closure output */
} lg_sc;

/* Epsilon closure of seeds[0..ns) into sc->buf (sorted); returns its size. */
static int lg_sc_closure(lg_sc *sc, const int32_t *seeds, int ns)
{
    sc->gen++;
    int top = 0, out = 0;
    for (int i = 0; i < ns; i++) {
        int32_t u = seeds[i];
        if (sc->mark[u] != sc->gen) {
            sc->mark[u] = sc->gen;
            sc->stk[top++] = u;
        }
    }
    while (top) {
        int32_t u = sc->stk[--top];
        sc->buf[out++] = u;
        for (int32_t k = sc->adj_off[u]; k < sc->adj_off[u + 1]; k++) {
            const lg_nfa_edge *e = &sc->a->e[sc->adj[k]];
            if (e->kind == LG_NE_EPS && sc->mark[e->to] != sc->gen) {
                sc->mark[e->to] = sc->gen;
                sc->stk[top++] = e->to;
            }
        }
    }
    qsort(sc->buf, (size_t)out, 4, lg_cmp_i32);
    return out;
}

typedef struct lg_pair {
    int32_t k, t;
} lg_pair;

static int lg_cmp_pair(const void *a, const void *b)
{
    const lg_pair *x = a, *y = b;
    if (x->k != y->k)
        return (x->k > y->k) - (x->k < y->k);
    return (x->t > y->t) - (x->t < y->t);
}

int lg_nfa_to_dfa(const lg_nfa *a, const uint8_t cls[256], int n_cls, lg_dfa *out)
{
    lg_cbudget *b = a->b;
    memset(out, 0, sizeof *out);
    if (b->failed)
        return -1;
    int32_t n = a->n;
    lg_sc sc = {.a = a};
    lg_sets S = {0};
    lg_dfab x = {.b = b};
    x.d.n_cls = n_cls;
    memcpy(x.d.cls, cls, 256);
    lg_pair *pairs = NULL;
    size_t np = 0, capp = 0;
    int32_t *tmp = NULL;
    int rc = -1;

    sc.adj_off = calloc((size_t)n + 1, 4);
    sc.adj = malloc((a->ne ? a->ne : 1) * 4);
    sc.mark = calloc((size_t)n + 1, 4);
    sc.stk = malloc(((size_t)n + 1) * 4);
    sc.buf = malloc(((size_t)n + 1) * 4);
    tmp = malloc(((size_t)n + 1) * 4);
    if (!sc.adj_off || !sc.adj || !sc.mark || !sc.stk || !sc.buf || !tmp) {
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < a->ne; i++)
        sc.adj_off[a->e[i].from + 1]++;
    for (int32_t i = 0; i < n; i++)
        sc.adj_off[i + 1] += sc.adj_off[i];
    {
        int32_t *fill = calloc((size_t)n + 1, 4);
        if (!fill) {
            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
            goto done;
        }
        for (size_t i = 0; i < a->ne; i++) {
            int32_t f = a->e[i].from;
            sc.adj[sc.adj_off[f] + fill[f]++] = (int32_t)i;
        }
        free(fill);
    }

    int32_t seed = a->start;
    int m = lg_sc_closure(&sc, &seed, 1);
    bool is_new;
    if (lg_sets_intern(&S, sc.buf, m, &is_new) < 0 || lg_dfab_state(&x) < 0) {
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
        goto done;
    }
    for (int32_t s = 0; s < S.nstates; s++) {
        if (lg_cbudget_tick(b))
            goto done;
        /* copy: the pool may move while we add states */
        int32_t len = S.len[s];
        int32_t *members = malloc(((size_t)len + 1) * 4);
        if (!members) {
            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
            goto done;
        }
        memcpy(members, S.pool + S.off[s], (size_t)len * 4);
        np = 0;
        bool fin = false;
        for (int32_t i = 0; i < len; i++) {
            int32_t u = members[i];
            fin |= a->final[u] != 0;
            for (int32_t k = sc.adj_off[u]; k < sc.adj_off[u + 1]; k++) {
                const lg_nfa_edge *e = &a->e[sc.adj[k]];
                if (e->kind == LG_NE_EPS)
                    continue;
                int c0 = e->kind == LG_NE_BYTES ? cls[e->lo] : 0, c1 = e->kind == LG_NE_BYTES ? cls[e->hi] : 0;
                for (int c = c0; c <= c1; c++) {
                    if (np == capp) {
                        size_t nc = capp ? capp * 2 : 64;
                        lg_pair *pp = realloc(pairs, nc * sizeof *pp);
                        if (!pp) {
                            free(members);
                            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
                            goto done;
                        }
                        pairs = pp;
                        capp = nc;
                    }
                    /* calls are keyed below the classes: -1 - callee */
                    pairs[np++] = (lg_pair){e->kind == LG_NE_BYTES ? c : -1 - e->callee, e->to};
                }
            }
        }
        free(members);
        x.d.final[s] = fin;
        if (np > 1)
            qsort(pairs, np, sizeof *pairs, lg_cmp_pair);
        /* calls first (negative keys, most negative = highest callee): collect to keep state order */
        for (size_t i = 0; i < np;) {
            size_t j = i;
            int nt = 0;
            while (j < np && pairs[j].k == pairs[i].k) {
                if (nt == 0 || tmp[nt - 1] != pairs[j].t)
                    tmp[nt++] = pairs[j].t;
                j++;
            }
            int mm = lg_sc_closure(&sc, tmp, nt);
            int32_t t = lg_sets_intern(&S, sc.buf, mm, &is_new);
            if (t < 0) {
                lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
                goto done;
            }
            if (is_new && lg_dfab_state(&x) < 0)
                goto done;
            if (pairs[i].k >= 0)
                x.d.next[(size_t)s * n_cls + pairs[i].k] = t;
            else if (lg_dfab_call(&x, s, -1 - pairs[i].k, t))
                goto done;
            i = j;
        }
    }
    if (lg_dfab_finish(&x, out))
        goto done;
    rc = 0;
done:
    if (rc)
        lg_dfab_abort(&x);
    lg_sets_free(&S);
    free(sc.adj_off);
    free(sc.adj);
    free(sc.mark);
    free(sc.stk);
    free(sc.buf);
    free(tmp);
    free(pairs);
    return rc;
}

int lg_nfa_determinize(const lg_nfa *a, lg_dfa *out)
{
    uint8_t cls[256] = {0};
    int n_cls = 1;
    lg_cls_refine(cls, &n_cls, a);
    return lg_nfa_to_dfa(a, cls, n_cls, out);
}

/* ---- operations on pure byte DFAs ------------------------------------------------------- */

int lg_dfa_trim(lg_dfa *d, lg_cbudget *b)
{
    if (d->n == 0)
        return 0;
    int32_t n = d->n;
    uint8_t *live = calloc((size_t)n, 1);
    int32_t *rmap = malloc((size_t)n * 4);
    if (!live || !rmap) {
        free(live);
        free(rmap);
        return lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
    }
    for (int32_t s = 0; s < n; s++)
        live[s] = d->final[s];
    /* backward reachability by iteration (DFAs here are small; n * classes per pass) */
    bool changed = true;
    while (changed) {
        changed = false;
        for (int32_t s = 0; s < n; s++) {
            if (live[s])
                continue;
            for (int c = 0; c < d->n_cls; c++) {
                int32_t t = d->next[(size_t)s * d->n_cls + c];
                if (t >= 0 && live[t]) {
                    live[s] = 1;
                    changed = true;
                    break;
                }
            }
        }
        if (lg_cbudget_tick(b)) {
            free(live);
            free(rmap);
            return -1;
        }
    }
    live[0] = 1; /* keep the start */
    int32_t m = 0;
    for (int32_t s = 0; s < n; s++)
        rmap[s] = live[s] ? m++ : -1;
    for (int32_t s = 0; s < n; s++) {
        if (!live[s])
            continue;
        int32_t ns = rmap[s];
        for (int c = 0; c < d->n_cls; c++) {
            int32_t t = d->next[(size_t)s * d->n_cls + c];
            d->next[(size_t)ns * d->n_cls + c] = t >= 0 ? rmap[t] : -1;
        }
        d->final[ns] = d->final[s];
    }
    d->n = m;
    free(live);
    free(rmap);
    return 0;
}

int lg_dfa_and(const lg_dfa *a, const lg_dfa *bb, bool negate_b, lg_dfa *out, lg_cbudget *b)
{
    memset(out, 0, sizeof *out);
    if (b->failed)
        return -1;
    bool bound[257], b2[257];
    lg_bounds_of(a->cls, bound);
    lg_bounds_of(bb->cls, b2);
    for (int i = 0; i < 257; i++)
        bound[i] |= b2[i];
    lg_dfab x = {.b = b};
    lg_cls_from_bounds(bound, x.d.cls, &x.d.n_cls);
    int ncl = x.d.n_cls;
    uint8_t rep[256];
    for (int c = 255; c >= 0; c--)
        rep[x.d.cls[c]] = (uint8_t)c;
    /* pair table: (sa, sb+1) -> state; open addressing on 64-bit keys */
    size_t cap = 1024, cnt = 0;
    uint64_t *keys = malloc(cap * 8);
    int32_t *vals = malloc(cap * 4);
    int32_t *qa = NULL, *qb = NULL;
    size_t qcap = 0;
    int rc = -1;
    if (!keys || !vals)
        goto oom;
    for (size_t i = 0; i < cap; i++)
        keys[i] = UINT64_MAX;
#define PAIR_KEY(sa, sb) (((uint64_t)(uint32_t)(sa) << 32) | (uint32_t)((sb) + 1))
    int32_t sb0 = bb->n ? 0 : -1;
    if (a->n == 0 || (!negate_b && sb0 < 0)) {
        /* empty */
        if (lg_dfab_state(&x) < 0)
            goto done;
        if (lg_dfab_finish(&x, out))
            goto done;
        free(keys);
        free(vals);
        return 0;
    }
    {
        if (lg_dfab_state(&x) < 0)
            goto done;
        qcap = 64;
        qa = malloc(qcap * 4);
        qb = malloc(qcap * 4);
        if (!qa || !qb)
            goto oom;
        qa[0] = 0;
        qb[0] = sb0;
        uint64_t k0 = PAIR_KEY(0, sb0);
        size_t h = (k0 * 0x9E3779B97F4A7C15ull) >> 54 & (cap - 1);
        keys[h] = k0;
        vals[h] = 0;
        cnt = 1;
    }
    for (int32_t s = 0; s < x.d.n; s++) {
        int32_t sa = qa[s], sbb = qb[s];
        bool fa = a->final[sa], fb = sbb >= 0 && bb->final[sbb];
        x.d.final[s] = negate_b ? (fa && !fb) : (fa && fb);
        for (int c = 0; c < ncl; c++) {
            uint8_t byte = rep[c];
            int32_t ta = a->next[(size_t)sa * a->n_cls + a->cls[byte]];
            if (ta < 0)
                continue;
            int32_t tb = sbb >= 0 ? bb->next[(size_t)sbb * bb->n_cls + bb->cls[byte]] : -1;
            if (!negate_b && tb < 0)
                continue;
            uint64_t k = PAIR_KEY(ta, tb);
            if (cnt * 2 >= cap) {
                size_t nc = cap * 2;
                uint64_t *nk = malloc(nc * 8);
                int32_t *nv = malloc(nc * 4);
                if (!nk || !nv) {
                    free(nk);
                    free(nv);
                    goto oom;
                }
                for (size_t i = 0; i < nc; i++)
                    nk[i] = UINT64_MAX;
                int bits = __builtin_ctzll(nc);
                for (size_t i = 0; i < cap; i++) {
                    if (keys[i] == UINT64_MAX)
                        continue;
                    size_t h = (keys[i] * 0x9E3779B97F4A7C15ull) >> (64 - bits);
                    while (nk[h] != UINT64_MAX)
                        h = (h + 1) & (nc - 1);
                    nk[h] = keys[i];
                    nv[h] = vals[i];
                }
                free(keys);
                free(vals);
                keys = nk;
                vals = nv;
                cap = nc;
            }
            int bits = __builtin_ctzll(cap);
            size_t h = (k * 0x9E3779B97F4A7C15ull) >> (64 - bits);
            while (keys[h] != UINT64_MAX && keys[h] != k)
                h = (h + 1) & (cap - 1);
            int32_t t;
            if (keys[h] == k)
                t = vals[h];
            else {
                t = lg_dfab_state(&x);
                if (t < 0)
                    goto done;
                keys[h] = k;
                vals[h] = t;
                cnt++;
                if ((size_t)t >= qcap) {
                    qcap *= 2;
                    int32_t *na = realloc(qa, qcap * 4), *nb = na ? realloc(qb, qcap * 4) : NULL;
                    if (na)
                        qa = na;
                    if (!nb)
                        goto oom;
                    qb = nb;
                }
                qa[t] = ta;
                qb[t] = tb;
            }
            x.d.next[(size_t)s * ncl + c] = t;
        }
    }
#undef PAIR_KEY
    if (lg_dfab_finish(&x, out))
        goto done;
    rc = lg_dfa_trim(out, b);
    free(keys);
    free(vals);
    free(qa);
    free(qb);
    return rc;
oom:
    lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
done:
    lg_dfab_abort(&x);
    free(keys);
    free(vals);
    free(qa);
    free(qb);
    return -1;
}

/* byte -> the letter of its short escape, 0 if none */
static char lg_short_escape(int byte)
{
    switch (byte) {
    case '"': return '"';
    case '\\': return '\\';
    case 0x08: return 'b';
    case 0x0C: return 'f';
    case 0x0A: return 'n';
    case 0x0D: return 'r';
    case 0x09: return 't';
    }
    return 0;
}

static bool lg_needs_quote(int byte) { return byte < 0x20 || byte == '"' || byte == '\\' || byte == 0x7F; }

int lg_dfa_json_quote(const lg_dfa *a, lg_dfa *out, lg_cbudget *b)
{
    memset(out, 0, sizeof *out);
    lg_nfa q;
    lg_nfa_init(&q, b);
    int rc = -1;
    int32_t *node = malloc(((size_t)a->n + 1) * 4);
    if (!node) {
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
        goto done;
    }
    for (int32_t s = 0; s < a->n; s++) {
        node[s] = s == 0 ? q.start : lg_nfa_node(&q);
        if (node[s] < 0)
            goto done;
    }
    for (int32_t s = 0; s < a->n; s++) {
        if (a->final[s])
            q.final[node[s]] = 1;
        /* plain bytes: runs with one target */
        int run_lo = -1;
        int32_t run_t = -1;
        for (int by = 0; by <= 256; by++) {
            int32_t t = -1;
            if (by < 256 && !lg_needs_quote(by))
                t = a->next[(size_t)s * a->n_cls + a->cls[by]];
            if (by == 256 || t != run_t) {
                if (run_t >= 0)
                    lg_nfa_range(&q, node[s], node[run_t], (uint8_t)run_lo, (uint8_t)(by - 1));
                run_lo = by;
                run_t = t;
            }
        }
        /* escaped bytes, grouped by target: "\" then a letter or u00XX */
        for (int by = 0; by < 256; by++) {
            if (!lg_needs_quote(by))
                continue;
            int32_t t = a->next[(size_t)s * a->n_cls + a->cls[by]];
            if (t < 0)
                continue;
            int bs = lg_nfa_node(&q);
            if (bs < 0)
                goto done;
            lg_nfa_range(&q, node[s], bs, '\\', '\\');
            char l = lg_short_escape(by);
            if (l)
                lg_nfa_range(&q, bs, node[t], (uint8_t)l, (uint8_t)l);
            if (by != '"' && by != '\\') {
                /* \u00XX: X hex digit pair, both cases */
                int u = lg_nfa_node(&q), z1 = lg_nfa_node(&q), z2 = lg_nfa_node(&q), h = lg_nfa_node(&q);
                if (h < 0)
                    goto done;
                lg_nfa_range(&q, bs, u, 'u', 'u');
                lg_nfa_range(&q, u, z1, '0', '0');
                lg_nfa_range(&q, z1, z2, '0', '0');
                char hi = "0123456789abcdef"[by >> 4];
                lg_nfa_range(&q, z2, h, (uint8_t)hi, (uint8_t)hi);
                char lo = "0123456789abcdef"[by & 15];
                lg_nfa_range(&q, h, node[t], (uint8_t)lo, (uint8_t)lo);
                if (lo >= 'a')
                    lg_nfa_range(&q, h, node[t], (uint8_t)(lo - 32), (uint8_t)(lo - 32));
            }
        }
    }
    rc = lg_nfa_determinize(&q, out);
done:
    free(node);
    lg_nfa_clear(&q);
    return rc;
}

int lg_dfa_emit(const lg_dfa *d, lg_nfa *a, int from, int to)
{
    if (a->b->failed || d->n == 0)
        return -1;
    int32_t *node = malloc((size_t)d->n * 4);
    if (!node)
        return lg_cfail(a->b, LG_CERR_INTERNAL, "", "out of memory");
    for (int32_t s = 0; s < d->n; s++) {
        node[s] = lg_nfa_node(a);
        if (node[s] < 0) {
            free(node);
            return -1;
        }
    }
    lg_nfa_eps(a, from, node[0]);
    for (int32_t s = 0; s < d->n; s++) {
        if (d->final[s])
            lg_nfa_eps(a, node[s], to);
        int run_lo = 0;
        int32_t run_t = -2;
        for (int by = 0; by <= 256; by++) {
            int32_t t = by < 256 ? d->next[(size_t)s * d->n_cls + d->cls[by]] : -2;
            if (t != run_t) {
                if (run_t >= 0)
                    lg_nfa_range(a, node[s], node[run_t], (uint8_t)run_lo, (uint8_t)(by - 1));
                run_lo = by;
                run_t = t;
            }
        }
        if (d->call_off)
            for (int32_t k = d->call_off[s]; k < d->call_off[s + 1]; k++)
                lg_nfa_call(a, node[s], node[d->call_to[k]], d->call_rule[k]);
    }
    free(node);
    return a->b->failed ? -1 : 0;
}

int lg_dfa_literal(const char *s, size_t n, lg_dfa *out, lg_cbudget *b)
{
    lg_nfa a;
    lg_nfa_init(&a, b);
    int end = lg_nfa_node(&a);
    if (end >= 0) {
        lg_nfa_lit(&a, a.start, end, s, n);
        a.final[end] = 1;
    }
    int rc = lg_nfa_determinize(&a, out);
    lg_nfa_clear(&a);
    return rc;
}
