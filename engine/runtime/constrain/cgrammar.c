/*
 * cgrammar.c — grammar builder and lg_cgram_build: determinize every rule
 * with shared byte classes, lay the states out globally, then the checks
 * (productivity, co-reachability, left recursion). See cgrammar.h.
 *
 * Productivity: a rule is productive when its start reaches a final state
 * over byte edges and calls to productive rules (fixpoint over rules, each
 * pass a backward reachability over the rule's states). Nullable rules (a
 * final state reachable over calls to nullable rules only) give the
 * "left edge" graph: R -> A when A is called at a state reachable from R's
 * start without consuming a byte; a cycle there is left recursion.
 */
#include "engine/runtime/constrain/cgrammar.h"

#include <stdio.h>
#include <stdlib.h>

void lg_cgb_init(lg_cgb *g, lg_cbudget *b, int max_rules)
{
    memset(g, 0, sizeof *g);
    g->b = b;
    g->max_rules = max_rules;
}

void lg_cgb_clear(lg_cgb *g)
{
    for (int i = 0; i < g->n; i++) {
        lg_nfa_clear(g->rules[i]);
        free(g->rules[i]);
        free(g->names[i]);
    }
    free(g->rules);
    free(g->names);
    memset(g, 0, sizeof *g);
}

int lg_cgb_rule(lg_cgb *g, const char *name)
{
    if (g->b->failed)
        return -1;
    if (g->n >= g->max_rules)
        return lg_cfail(g->b, LG_CERR_LIMIT, "", "grammar exceeds max_rules (%d)", g->max_rules);
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 16;
        lg_nfa **nr = realloc(g->rules, (size_t)nc * sizeof *nr);
        if (!nr)
            return lg_cfail(g->b, LG_CERR_INTERNAL, "", "out of memory");
        g->rules = nr;
        char **nn = realloc(g->names, (size_t)nc * sizeof *nn);
        if (!nn)
            return lg_cfail(g->b, LG_CERR_INTERNAL, "", "out of memory");
        g->names = nn;
        g->cap = nc;
    }
    lg_nfa *a = malloc(sizeof *a);
    char *nm = strdup(name ? name : "rule");
    if (!a || !nm) {
        free(a);
        free(nm);
        return lg_cfail(g->b, LG_CERR_INTERNAL, "", "out of memory");
    }
    lg_nfa_init(a, g->b);
    g->rules[g->n] = a;
    g->names[g->n] = nm;
    return g->n++;
}

void lg_cgram_free(lg_cgram *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_rules; i++)
        free(c->rule_name[i]);
    free(c->rule_name);
    free(c->rule_start);
    free(c->node_rule);
    free(c->flags);
    free(c->next);
    free(c->call_off);
    free(c->call_rule);
    free(c->call_ret);
    free(c);
}

int lg_cgram_build(lg_cgb *g, int root, lg_cgram **out)
{
    lg_cbudget *b = g->b;
    *out = NULL;
    if (b->failed)
        return -1;
    int nr = g->n;
    uint8_t cls[256] = {0};
    int n_cls = 1;
    for (int r = 0; r < nr; r++)
        lg_cls_refine(cls, &n_cls, g->rules[r]);
    lg_dfa *d = calloc((size_t)nr, sizeof *d);
    lg_cgram *c = calloc(1, sizeof *c);
    if (!d || !c) {
        free(d);
        free(c);
        return lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
    }
    int rc = -1;
    c->n_rules = nr;
    c->root = root;
    c->n_cls = n_cls;
    memcpy(c->cls, cls, 256);
    for (int by = 0; by < 256; by++)
        c->cls_bytes[cls[by]][by >> 3] |= (uint8_t)(1u << (by & 7));
    c->rule_start = malloc((size_t)nr * 4);
    c->rule_name = calloc((size_t)nr, sizeof(char *));
    if (!c->rule_start || !c->rule_name) {
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
        goto done;
    }
    size_t total = 0, ncalls = 0;
    for (int r = 0; r < nr; r++) {
        c->rule_name[r] = strdup(g->names[r]);
        if (!c->rule_name[r]) {
            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
            goto done;
        }
        if (lg_nfa_to_dfa(g->rules[r], cls, n_cls, &d[r]))
            goto done;
        c->rule_start[r] = (int32_t)total;
        total += (size_t)d[r].n;
        if (d[r].call_off)
            ncalls += (size_t)d[r].call_off[d[r].n];
    }
    if (total > 0x3fffffff) {
        lg_cfail(b, LG_CERR_LIMIT, "", "grammar too large");
        goto done;
    }
    c->n_nodes = (int32_t)total;
    c->node_rule = malloc(total * 4 + 4);
    c->flags = calloc(total + 1, 1);
    c->next = malloc(total * (size_t)n_cls * 4 + 4);
    c->call_off = calloc(total + 1, 4);
    c->call_rule = malloc(ncalls * 4 + 4);
    c->call_ret = malloc(ncalls * 4 + 4);
    if (!c->node_rule || !c->flags || !c->next || !c->call_off || !c->call_rule || !c->call_ret) {
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
        goto done;
    }
    size_t k = 0;
    for (int r = 0; r < nr; r++) {
        int32_t base = c->rule_start[r];
        for (int32_t s = 0; s < d[r].n; s++) {
            int32_t gnode = base + s;
            c->node_rule[gnode] = r;
            c->flags[gnode] = d[r].final[s] ? LG_CN_FINAL : 0;
            for (int cl = 0; cl < n_cls; cl++) {
                int32_t t = d[r].next[(size_t)s * n_cls + cl];
                c->next[(size_t)gnode * n_cls + cl] = t >= 0 ? base + t : -1;
            }
            c->call_off[gnode] = (int32_t)k;
            if (d[r].call_off)
                for (int32_t j = d[r].call_off[s]; j < d[r].call_off[s + 1]; j++) {
                    c->call_rule[k] = d[r].call_rule[j];
                    c->call_ret[k] = base + d[r].call_to[j];
                    k++;
                }
        }
    }
    c->call_off[total] = (int32_t)k;

    /* productivity: live[node] = can reach FINAL over byte edges and calls to
     * productive rules; a rule is productive when its start is live. One
     * backward worklist over reversed edges: linear in the grammar. */
    {
        uint8_t *prod = calloc((size_t)nr, 1), *live = calloc(total + 1, 1);
        int32_t *boff = calloc(total + 2, 4), *badj = NULL, *coff = calloc((size_t)nr + 2, 4), *cadj = NULL;
        int32_t *roff = calloc(total + 2, 4), *radj = NULL, *wl = malloc((total + 1) * 4);
        size_t nb = 0, ncall = k;
        if (!prod || !live || !boff || !coff || !roff || !wl)
            goto prod_oom;
        /* reversed byte edges: boff/badj; calls by callee: coff/cadj; calls by return node: roff/radj */
        for (size_t s2 = 0; s2 < total; s2++)
            for (int cl = 0; cl < n_cls; cl++) {
                int32_t t = c->next[s2 * n_cls + cl];
                if (t >= 0 && (cl == 0 || c->next[s2 * n_cls + cl - 1] != t))
                    boff[t + 1]++, nb++;
            }
        for (size_t t = 0; t < total; t++)
            boff[t + 1] += boff[t];
        badj = malloc(nb * 4 + 4);
        cadj = malloc(ncall * 4 + 4);
        radj = malloc(ncall * 4 + 4);
        int32_t *fill = calloc(total + 1, 4);
        if (!badj || !cadj || !radj || !fill) {
            free(fill);
            goto prod_oom;
        }
        for (size_t s2 = 0; s2 < total; s2++)
            for (int cl = 0; cl < n_cls; cl++) {
                int32_t t = c->next[s2 * n_cls + cl];
                if (t >= 0 && (cl == 0 || c->next[s2 * n_cls + cl - 1] != t))
                    badj[boff[t] + fill[t]++] = (int32_t)s2;
            }
        free(fill);
        for (size_t j = 0; j < ncall; j++) {
            coff[c->call_rule[j] + 1]++;
            roff[c->call_ret[j] + 1]++;
        }
        for (int r = 0; r < nr; r++)
            coff[r + 1] += coff[r];
        for (size_t t = 0; t < total; t++)
            roff[t + 1] += roff[t];
        {
            int32_t *cf = calloc((size_t)nr + 1, 4), *rf = calloc(total + 1, 4);
            if (!cf || !rf) {
                free(cf);
                free(rf);
                goto prod_oom;
            }
            /* the call index j's source node: found by scanning call_off */
            for (size_t s2 = 0; s2 < total; s2++)
                for (int32_t j = c->call_off[s2]; j < c->call_off[s2 + 1]; j++) {
                    cadj[coff[c->call_rule[j]] + cf[c->call_rule[j]]++] = j;
                    radj[roff[c->call_ret[j]] + rf[c->call_ret[j]]++] = j;
                }
            free(cf);
            free(rf);
        }
        int32_t *call_src = malloc(ncall * 4 + 4);
        if (!call_src)
            goto prod_oom;
        for (size_t s2 = 0; s2 < total; s2++)
            for (int32_t j = c->call_off[s2]; j < c->call_off[s2 + 1]; j++)
                call_src[j] = (int32_t)s2;
        size_t nw = 0;
        for (size_t s2 = 0; s2 < total; s2++)
            if (c->flags[s2] & LG_CN_FINAL) {
                live[s2] = 1;
                wl[nw++] = (int32_t)s2;
            }
#define LG_MARK(x) do { if (!live[x]) { live[x] = 1; wl[nw++] = (x); } } while (0)
        while (nw) {
            int32_t t = wl[--nw];
            for (int32_t q = boff[t]; q < boff[t + 1]; q++)
                LG_MARK(badj[q]);
            /* t as a return node: the caller is live if the callee is productive */
            for (int32_t q = roff[t]; q < roff[t + 1]; q++) {
                int32_t j = radj[q];
                if (prod[c->call_rule[j]])
                    LG_MARK(call_src[j]);
            }
            /* t as a rule start: the rule becomes productive */
            int32_t r = c->node_rule[t];
            if (c->rule_start[r] == t && !prod[r]) {
                prod[r] = 1;
                for (int32_t q = coff[r]; q < coff[r + 1]; q++) {
                    int32_t j = cadj[q];
                    if (live[c->call_ret[j]])
                        LG_MARK(call_src[j]);
                }
            }
        }
#undef LG_MARK
        free(call_src);
        free(boff);
        free(badj);
        free(coff);
        free(cadj);
        free(roff);
        free(radj);
        free(wl);
        boff = badj = coff = cadj = roff = radj = wl = NULL;
        if (lg_cbudget_tick(b)) {
            free(prod);
            free(live);
            goto done;
        }
        if (0) {
        prod_oom:
            free(boff);
            free(badj);
            free(coff);
            free(cadj);
            free(roff);
            free(radj);
            free(wl);
            free(prod);
            free(live);
            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
            goto done;
        }
        if (!live[c->rule_start[root]]) {
            free(prod);
            free(live);
            lg_cfail(b, LG_CERR_UNSATISFIABLE, "", "the grammar matches no string");
            goto done;
        }
        /* cut edges into dead states and calls to unproductive rules */
        size_t kk = 0;
        for (size_t s = 0; s < total; s++) {
            for (int cl = 0; cl < n_cls; cl++) {
                int32_t *t = &c->next[s * n_cls + cl];
                if (*t >= 0 && !live[*t])
                    *t = -1;
            }
            int32_t j0 = c->call_off[s], j1 = c->call_off[s + 1];
            c->call_off[s] = (int32_t)kk;
            for (int32_t j = j0; j < j1; j++)
                if (prod[c->call_rule[j]] && live[c->call_ret[j]]) {
                    c->call_rule[kk] = c->call_rule[j];
                    c->call_ret[kk] = c->call_ret[j];
                    kk++;
                }
        }
        c->call_off[total] = (int32_t)kk;
        free(prod);
        free(live);
    }
    for (size_t s = 0; s < total; s++) {
        for (int cl = 0; cl < n_cls; cl++)
            if (c->next[s * n_cls + cl] >= 0) {
                c->flags[s] |= LG_CN_BYTES;
                break;
            }
        if (c->call_off[s + 1] > c->call_off[s])
            c->flags[s] |= LG_CN_CALLS;
    }

    /* nullable rules, then the left-edge graph and its cycles */
    {
        uint8_t *nul = calloc((size_t)nr, 1), *seen = calloc(total + 1, 1);
        int32_t *stk = malloc((total + 1) * 4);
        uint8_t *edge = NULL;
        if (!nul || !seen || !stk) {
            free(nul);
            free(seen);
            free(stk);
            lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
            goto done;
        }
        bool changed = true;
        while (changed) {
            changed = false;
            for (int r = 0; r < nr; r++) {
                if (nul[r])
                    continue;
                /* epsilon reach from start over nullable calls */
                int top = 0;
                memset(seen + c->rule_start[r], 0, (size_t)d[r].n);
                stk[top++] = c->rule_start[r];
                seen[c->rule_start[r]] = 1;
                while (top && !nul[r]) {
                    int32_t s = stk[--top];
                    if (c->flags[s] & LG_CN_FINAL) {
                        nul[r] = 1;
                        changed = true;
                        break;
                    }
                    for (int32_t j = c->call_off[s]; j < c->call_off[s + 1]; j++)
                        if (nul[c->call_rule[j]] && !seen[c->call_ret[j]]) {
                            seen[c->call_ret[j]] = 1;
                            stk[top++] = c->call_ret[j];
                        }
                }
            }
        }
        /* left-edge successors of each rule, as a DFS with colors */
        int *color = calloc((size_t)nr, sizeof(int));
        int *path = malloc((size_t)nr * sizeof(int)), *iter = malloc((size_t)nr * sizeof(int));
        /* adjacency: left-edge callees per rule */
        int32_t *loff = calloc((size_t)nr + 1, 4), *ladj = NULL;
        size_t nadj = 0, capadj = 0;
        if (!color || !path || !iter || !loff)
            goto left_oom;
        for (int r = 0; r < nr; r++) {
            loff[r] = (int32_t)nadj;
            int top = 0;
            memset(seen + c->rule_start[r], 0, (size_t)d[r].n);
            stk[top++] = c->rule_start[r];
            seen[c->rule_start[r]] = 1;
            while (top) {
                int32_t s = stk[--top];
                for (int32_t j = c->call_off[s]; j < c->call_off[s + 1]; j++) {
                    if (nadj == capadj) {
                        capadj = capadj ? capadj * 2 : 64;
                        int32_t *na = realloc(ladj, capadj * 4);
                        if (!na)
                            goto left_oom;
                        ladj = na;
                    }
                    ladj[nadj++] = c->call_rule[j];
                    if (nul[c->call_rule[j]] && !seen[c->call_ret[j]]) {
                        seen[c->call_ret[j]] = 1;
                        stk[top++] = c->call_ret[j];
                    }
                }
            }
        }
        loff[nr] = (int32_t)nadj;
        for (int r0 = 0; r0 < nr && !b->failed; r0++) {
            if (color[r0])
                continue;
            int dep = 0;
            path[dep] = r0;
            iter[dep] = loff[r0];
            color[r0] = 1;
            while (dep >= 0) {
                int r = path[dep];
                if (iter[dep] < loff[r + 1]) {
                    int t = ladj[iter[dep]++];
                    if (color[t] == 1) {
                        lg_cfail(b, LG_CERR_UNSUPPORTED, c->rule_name[t],
                                 "rule '%s' is left-recursive (reaches itself without consuming input); "
                                 "rewrite it with repetition", c->rule_name[t]);
                        break;
                    }
                    if (color[t] == 0) {
                        color[t] = 1;
                        path[++dep] = t;
                        iter[dep] = loff[t];
                    }
                } else {
                    color[r] = 2;
                    dep--;
                }
            }
        }
        goto left_done;
    left_oom:
        lg_cfail(b, LG_CERR_INTERNAL, "", "out of memory");
    left_done:
        free(nul);
        free(seen);
        free(stk);
        free(edge);
        free(color);
        free(path);
        free(iter);
        free(loff);
        free(ladj);
        if (b->failed)
            goto done;
    }
    c->bytes = sizeof *c + total * (5 + (size_t)n_cls * 4 + 4) + k * 8 + (size_t)nr * 16;
    rc = 0;
done:
    for (int r = 0; r < nr; r++)
        lg_dfa_free(&d[r]);
    free(d);
    if (rc) {
        lg_cgram_free(c);
        return -1;
    }
    *out = c;
    return 0;
}
