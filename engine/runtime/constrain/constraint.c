/*
 * constraint.c — lg_constraint_compile: the front end for each kind, the
 * grammar build, and the constraint object's life (see constrain.h).
 *
 * One compilation: defaults for zero limits, the source size check, a
 * budget (automaton states and the max_compile_ms deadline) shared by every
 * step, the front end into an lg_cgb (json_schema.c, lark.c, or here: a
 * regex, a choice list), lg_cgram_build (determinize, check, lay out), then
 * the empty lazy mask table. Nothing is allocated on failure.
 */
#include "engine/runtime/constrain/cinternal.h"
#include "engine/runtime/constrain/compilers.h"
#include "engine/runtime/constrain/regex.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

void lg_climits_default(lg_climits *l)
{
    memset(l, 0, sizeof *l);
    l->max_source_bytes = 1 << 20;
    l->max_depth = 64;
    l->max_ref_expansions = 10000;
    l->max_rules = 20000;
    l->max_nfa_states = 2000000;
    l->max_dfa_states = 200000;
    l->max_compile_ms = 2000;
    l->max_stack = 1024;
    l->max_tops = 256;
    l->max_frames = 1000000;
    l->max_table_bytes = (size_t)256 << 20;
}

static void lg_climits_fill(lg_climits *l, const lg_climits *in)
{
    lg_climits d;
    lg_climits_default(&d);
    *l = in ? *in : d;
#define DEF(f) if (l->f <= 0) l->f = d.f
    DEF(max_source_bytes);
    DEF(max_depth);
    DEF(max_ref_expansions);
    DEF(max_rules);
    DEF(max_nfa_states);
    DEF(max_dfa_states);
    DEF(max_compile_ms);
    DEF(max_stack);
    DEF(max_tops);
    DEF(max_frames);
    DEF(max_table_bytes);
#undef DEF
}

/* A choice list: a JSON array of strings, the output is one of them. */
static int lg_choice_compile(lg_cgb *g, const char *src, size_t len, int *root)
{
    json_error_t je;
    json_t *doc = json_loadb(src, len, JSON_DECODE_ANY, &je);
    if (!doc) {
        char param[64];
        snprintf(param, sizeof param, "offset %d", je.position);
        return lg_cfail(g->b, LG_CERR_INVALID, param, "choices are not valid JSON: %s", je.text);
    }
    int rc = -1;
    if (!json_is_array(doc)) {
        lg_cfail(g->b, LG_CERR_INVALID, "", "choices must be an array of strings");
        goto out;
    }
    if (json_array_size(doc) == 0) {
        lg_cfail(g->b, LG_CERR_UNSATISFIABLE, "", "an empty choice list matches nothing");
        goto out;
    }
    if (json_array_size(doc) > 100000) {
        lg_cfail(g->b, LG_CERR_LIMIT, "choices", "more than 100000 choices");
        goto out;
    }
    int r = lg_cgb_rule(g, "start");
    if (r < 0)
        goto out;
    lg_nfa *a = lg_cgb_nfa(g, r);
    int end = lg_nfa_node(a);
    if (end < 0)
        goto out;
    a->final[end] = 1;
    size_t i;
    json_t *x;
    json_array_foreach(doc, i, x) {
        if (!json_is_string(x)) {
            char param[32];
            snprintf(param, sizeof param, "choices/%zu", i);
            lg_cfail(g->b, LG_CERR_INVALID, param, "choice %zu is not a string", i);
            goto out;
        }
        lg_nfa_lit(a, a->start, end, json_string_value(x), json_string_length(x));
        if (lg_cbudget_tick(g->b))
            goto out;
    }
    *root = r;
    rc = g->b->failed ? -1 : 0;
out:
    json_decref(doc);
    return rc;
}

static int lg_regex_compile(lg_cgb *g, const char *src, size_t len, const lg_climits *lim, int *root)
{
    int r = lg_cgb_rule(g, "start");
    if (r < 0)
        return -1;
    lg_nfa *a = lg_cgb_nfa(g, r);
    int end = lg_nfa_node(a);
    if (end < 0)
        return -1;
    a->final[end] = 1;
    if (lg_rx_emit(src, len, LG_RX_UNICODE, a, a->start, end, "", lim->max_depth))
        return -1;
    *root = r;
    return 0;
}

int lg_constraint_compile(const lg_cvocab *v, const lg_copts *opts, const char *src, size_t len,
                          lg_constraint **out, lg_cerr *err)
{
    *out = NULL;
    lg_cerr dummy;
    if (!err)
        err = &dummy;
    memset(err, 0, sizeof *err);
    lg_climits lim;
    lg_climits_fill(&lim, opts ? &opts->limits : NULL);
    lg_ckind kind = opts ? opts->kind : LG_CK_JSON_VALUE;
    lg_cws ws = opts ? opts->whitespace : LG_CWS_COMPACT;
    lg_cbudget b = {.max_nfa = lim.max_nfa_states, .max_dfa = lim.max_dfa_states,
                    .deadline = lg_now() + lim.max_compile_ms / 1000.0, .max_ms = lim.max_compile_ms, .err = err};
    bool needs_src = kind != LG_CK_JSON_OBJECT && kind != LG_CK_JSON_VALUE;
    if (needs_src && !src)
        src = "", len = 0;
    if (needs_src && len > lim.max_source_bytes)
        return lg_cfail(&b, LG_CERR_LIMIT, "", "source of %zu bytes exceeds max_source_bytes (%zu)", len,
                        lim.max_source_bytes);
    if ((int)kind < 0 || kind > LG_CK_CHOICE)
        return lg_cfail(&b, LG_CERR_INVALID, "", "unknown constraint kind %d", (int)kind);
    lg_cgb g;
    lg_cgb_init(&g, &b, lim.max_rules);
    int root = -1, rc = -1;
    switch (kind) {
    case LG_CK_JSON_SCHEMA:
    case LG_CK_JSON_OBJECT:
    case LG_CK_JSON_VALUE: rc = lg_cjson_compile(&g, kind, src, len, ws, &lim, &root); break;
    case LG_CK_REGEX: rc = lg_regex_compile(&g, src, len, &lim, &root); break;
    case LG_CK_LARK: rc = lg_clark_compile(&g, src, len, &lim, &root); break;
    case LG_CK_CHOICE: rc = lg_choice_compile(&g, src, len, &root); break;
    }
    lg_cgram *cg = NULL;
    if (!rc && !b.failed)
        rc = lg_cgram_build(&g, root, &cg);
    lg_cgb_clear(&g);
    if (rc || b.failed) {
        lg_cgram_free(cg);
        if (!err->code)
            lg_cfail(&b, LG_CERR_INTERNAL, "", "compilation failed");
        return -1;
    }
    lg_constraint *c = calloc(1, sizeof *c);
    if (c)
        c->table = calloc((size_t)cg->n_nodes + 1, sizeof *c->table);
    if (!c || !c->table) {
        free(c);
        lg_cgram_free(cg);
        b.failed = false;
        return lg_cfail(&b, LG_CERR_INTERNAL, "", "out of memory");
    }
    atomic_init(&c->refs, 1);
    c->v = v;
    c->g = cg;
    c->lim = lim;
    atomic_init(&c->table_bytes, 0);
    atomic_init(&c->table_entries, 0);
    c->bytes = sizeof *c + cg->bytes + ((size_t)cg->n_nodes + 1) * sizeof *c->table;
    *out = c;
    return 0;
}

lg_constraint *lg_constraint_ref(lg_constraint *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void lg_constraint_unref(lg_constraint *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (int32_t i = 0; i < c->g->n_nodes; i++)
        lg_centry_free(atomic_load(&c->table[i]));
    free(c->table);
    lg_cgram_free(c->g);
    free(c);
}

void lg_constraint_stats(const lg_constraint *c, lg_cstats *s)
{
    memset(s, 0, sizeof *s);
    s->n_rules = c->g->n_rules;
    s->n_states = c->g->n_nodes;
    s->grammar_bytes = c->bytes;
    s->table_bytes = atomic_load(&((lg_constraint *)c)->table_bytes);
    s->table_entries = atomic_load(&((lg_constraint *)c)->table_entries);
}
