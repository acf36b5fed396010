/*
 * jinja_parse.c — tokens to an AST, following jinja2's grammar.
 *
 * Expressions, loosest first, as jinja2's parser has them:
 *   cond:    or ['if' or ['else' cond]]        (no else: undefined)
 *   or/and/not, compare (== != < <= > >= in, not in; chains allowed),
 *   math1 (+ -), concat (~), math2 (* / // %), pow (**),
 *   unary (- +) then a primary with postfixes (.name, [subscript or
 *   slice], (call)) and filter-level postfixes (| filter(args), is [not]
 *   test [arg | (args)], (call)).
 * Statements: if/elif/else, for (targets, `if` filter, else), set (plain,
 * tuple targets, namespace attributes, block set with filters), macro,
 * call blocks, filter blocks, with, break/continue (loopcontrols) and
 * transformers' {% generation %} (its body is rendered as is).
 * include/import/extends/block and recursive loops are refused at parse
 * time: a template that uses them is an error, not a partial rendering.
 *
 * Nesting is bounded (a template of 100,000 '(' fails, it does not overflow
 * the stack). The AST lives in the template's arena.
 */
#include "engine/model/jinja_internal.h"

#define MAX_PARSE_DEPTH 200

typedef struct parser {
    lg_jinja *t;
    jarena *a;
    const jtoks *toks;
    size_t pos;
    int depth, loops;
} parser;

static const jtok *cur(parser *P) { return &P->toks->v[P->pos]; }
static const jtok *peek(parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->toks->v[i < P->toks->n ? i : P->toks->n - 1];
}
static void next(parser *P)
{
    if (P->pos + 1 < P->toks->n)
        P->pos++;
}

static bool is_op(const jtok *t, const char *op) { return t->k == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static bool is_name(const jtok *t, const char *nm) { return t->k == TK_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n); }

static const char *tok_desc(const jtok *t)
{
    switch (t->k) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_NAME: return t->s;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: return "operator";
    }
    return "?";
}

_Noreturn static void perr(parser *P, const char *what)
{
    const jtok *t = cur(P);
    if (t->k == TK_OP)
        jfail(P->a, "chat template syntax error, line %d: %s, got '%.*s'", t->line, what, (int)t->n, t->s);
    jfail(P->a, "chat template syntax error, line %d: %s, got %s", t->line, what, tok_desc(t));
}

static void expect_op(parser *P, const char *op)
{
    if (!is_op(cur(P), op)) {
        char m[64];
        snprintf(m, sizeof m, "expected '%s'", op);
        perr(P, m);
    }
    next(P);
}

static void expect_block_end(parser *P)
{
    if (cur(P)->k != TK_BLOCK_END)
        perr(P, "expected '%}'");
    next(P);
}

static jnode *mk(parser *P, int kind)
{
    jnode *n = ja_alloc(P->a, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = cur(P)->line;
    return n;
}

/* a growable array of node pointers in the arena */
typedef struct nvec {
    jnode **v;
    const char **nm;
    int n, cap;
} nvec;

static void nv_push(parser *P, nvec *v, jnode *x, const char *name)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = ja_alloc(P->a, (size_t)cap * sizeof *nv);
        const char **nn = ja_alloc(P->a, (size_t)cap * sizeof *nn);
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
            memcpy(nn, v->nm, (size_t)v->n * sizeof *nn);
        }
        v->v = nv;
        v->nm = nn;
        v->cap = cap;
    }
    v->nm[v->n] = name;
    v->v[v->n++] = x;
}

static void enter(parser *P)
{
    if (++P->depth > MAX_PARSE_DEPTH)
        jfail(P->a, "chat template syntax error, line %d: nested too deeply", cur(P)->line);
}

static jnode *parse_expression(parser *P, bool with_cond);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_or(parser *P);

/* `end` tokens of a tuple: %} }} ) and extra names (for-loop `in`, `recursive`). */
static bool tuple_end(parser *P, const char *extra)
{
    const jtok *t = cur(P);
    if (t->k == TK_VAR_END || t->k == TK_BLOCK_END || t->k == TK_EOF || is_op(t, ")"))
        return true;
    return extra && is_name(t, extra);
}

static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *node, bool filters);

/* simplified: targets (names only); returns one node or an N_TUPLE. */
static jnode *parse_tuple(parser *P, bool simplified, bool with_cond, const char *extra, bool explicit_parens)
{
    nvec items = {0};
    bool is_tuple = false;
    int line = cur(P)->line;
    for (;;) {
        if (items.n)
            expect_op(P, ",");
        if (tuple_end(P, extra))
            break;
        nv_push(P, &items, simplified ? parse_primary(P) : parse_expression(P, with_cond), NULL);
        if (is_op(cur(P), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!explicit_parens)
            perr(P, "expected an expression");
    }
    jnode *n = mk(P, N_TUPLE);
    n->line = line;
    n->kids = items.v;
    n->nk = items.n;
    return n;
}

static void parse_call_args(parser *P, jnode *n)
{
    expect_op(P, "(");
    nvec args = {0};
    int npos = 0;
    bool kw = false;
    while (!is_op(cur(P), ")")) {
        if (args.n)
            expect_op(P, ",");
        if (is_op(cur(P), ")"))
            break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            perr(P, "*args and **kwargs in calls are not supported");
        if (cur(P)->k == TK_NAME && is_op(peek(P, 1), "=")) {
            const char *name = cur(P)->s;
            next(P);
            next(P);
            nv_push(P, &args, parse_expression(P, true), name);
            kw = true;
        } else {
            if (kw)
                perr(P, "positional argument after a keyword argument");
            nv_push(P, &args, parse_expression(P, true), NULL);
            npos++;
        }
    }
    next(P);
    n->kids = args.v;
    n->nk = args.n;
    n->npos = npos;
    n->names = args.nm;
    n->nn = args.n;
}

/* a possibly dotted name (filters and tests) */
static const char *dotted_name(parser *P)
{
    if (cur(P)->k != TK_NAME)
        perr(P, "expected a name");
    jbuf b = {0};
    jb_put(P->a, &b, cur(P)->s, cur(P)->n);
    next(P);
    while (is_op(cur(P), ".") && peek(P, 1)->k == TK_NAME) {
        next(P);
        jb_puts(P->a, &b, ".");
        jb_put(P->a, &b, cur(P)->s, cur(P)->n);
        next(P);
    }
    return b.p;
}

static jnode *parse_filter(parser *P, jnode *node)
{
    /* at '|' */
    next(P);
    jnode *f = mk(P, N_FILTER);
    f->a = node;
    f->name = dotted_name(P);
    if (is_op(cur(P), "("))
        parse_call_args(P, f);
    return f;
}

static jnode *parse_test(parser *P, jnode *node)
{
    /* at 'is' */
    next(P);
    jnode *t = mk(P, N_TEST);
    t->a = node;
    if (is_name(cur(P), "not")) {
        next(P);
        t->op = 1;
    }
    t->name = dotted_name(P);
    const jtok *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->k == TK_NAME || c->k == TK_STRING || c->k == TK_INT || c->k == TK_FLOAT || is_op(c, "(") ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            perr(P, "you cannot chain multiple tests with is");
        enter(P);
        jnode *arg = parse_postfix(P, parse_primary(P), false);
        P->depth--;
        t->kids = ja_alloc(P->a, sizeof(jnode *));
        t->kids[0] = arg;
        t->nk = 1;
        t->npos = 1;
    }
    return t;
}

static jnode *parse_subscribed(parser *P)
{
    jnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        next(P);
    } else {
        jnode *node = parse_expression(P, true);
        if (!is_op(cur(P), ":"))
            return node;
        next(P);
        args[0] = node;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ","))
        args[1] = parse_expression(P, true);
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
            args[2] = parse_expression(P, true);
    }
    jnode *s = mk(P, N_SLICE);
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static jnode *parse_postfix(parser *P, jnode *node, bool filters)
{
    for (;;) {
        const jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            const jtok *k = cur(P);
            jnode *g;
            if (k->k == TK_NAME) {
                g = mk(P, N_GETATTR);
                g->name = k->s;
            } else if (k->k == TK_INT) {
                g = mk(P, N_GETITEM);
                g->b = mk(P, N_CONST);
                g->b->val = jv_int(k->i);
            } else {
                perr(P, "expected a name or number after '.'");
            }
            next(P);
            g->a = node;
            node = g;
        } else if (is_op(t, "[")) {
            next(P);
            nvec args = {0};
            while (!is_op(cur(P), "]")) {
                if (args.n)
                    expect_op(P, ",");
                if (is_op(cur(P), "]"))
                    break;
                nv_push(P, &args, parse_subscribed(P), NULL);
            }
            next(P);
            if (args.n == 0)
                perr(P, "expected a subscript");
            jnode *g = mk(P, N_GETITEM);
            g->a = node;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                g->b = mk(P, N_TUPLE);
                g->b->kids = args.v;
                g->b->nk = args.n;
            }
            node = g;
        } else if (is_op(t, "(")) {
            jnode *c = mk(P, N_CALL);
            c->a = node;
            parse_call_args(P, c);
            node = c;
        } else if (filters && is_op(t, "|")) {
            node = parse_filter(P, node);
        } else if (filters && is_name(t, "is")) {
            node = parse_test(P, node);
        } else {
            break;
        }
    }
    return node;
}

static jnode *parse_primary(parser *P)
{
    enter(P);
    const jtok *t = cur(P);
    jnode *n;
    if (t->k == TK_NAME) {
        n = mk(P, N_CONST);
        if (is_name(t, "true") || is_name(t, "True"))
            n->val = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False"))
            n->val = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None"))
            n->val = jv_none();
        else {
            n->kind = N_NAME;
            n->name = t->s;
        }
        next(P);
    } else if (t->k == TK_STRING) {
        n = mk(P, N_CONST);
        jbuf b = {0};
        while (cur(P)->k == TK_STRING) {
            jb_put(P->a, &b, cur(P)->s, cur(P)->n);
            next(P);
        }
        n->val = jv_str(b.p ? b.p : "", b.n);
    } else if (t->k == TK_INT || t->k == TK_FLOAT) {
        n = mk(P, N_CONST);
        n->val = t->k == TK_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
    } else if (is_op(t, "(")) {
        next(P);
        n = parse_tuple(P, false, true, NULL, true);
        expect_op(P, ")");
    } else if (is_op(t, "[")) {
        next(P);
        n = mk(P, N_LIST);
        nvec items = {0};
        while (!is_op(cur(P), "]")) {
            if (items.n)
                expect_op(P, ",");
            if (is_op(cur(P), "]"))
                break;
            nv_push(P, &items, parse_expression(P, true), NULL);
        }
        next(P);
        n->kids = items.v;
        n->nk = items.n;
    } else if (is_op(t, "{")) {
        next(P);
        n = mk(P, N_DICT);
        nvec items = {0};
        while (!is_op(cur(P), "}")) {
            if (items.n)
                expect_op(P, ",");
            if (is_op(cur(P), "}"))
                break;
            nv_push(P, &items, parse_expression(P, true), NULL);
            expect_op(P, ":");
            nv_push(P, &items, parse_expression(P, true), NULL);
        }
        next(P);
        n->kids = items.v;
        n->nk = items.n;
    } else {
        perr(P, "unexpected token");
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter)
{
    enter(P);
    jnode *n;
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        n = mk(P, is_op(cur(P), "-") ? N_NEG : N_POS);
        next(P);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n, false);
    if (with_filter)
        n = parse_postfix(P, n, true);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *l, jnode *r)
{
    jnode *n = mk(P, N_BINOP);
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *P)
{
    jnode *l = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        next(P);
        l = binop(P, OP_POW, l, parse_unary(P, true));
    }
    return l;
}

static jnode *parse_math2(parser *P)
{
    jnode *l = parse_pow(P);
    for (;;) {
        int op = is_op(cur(P), "*") ? OP_MUL : is_op(cur(P), "/") ? OP_DIV : is_op(cur(P), "//") ? OP_FDIV
               : is_op(cur(P), "%") ? OP_MOD : -1;
        if (op < 0)
            return l;
        next(P);
        l = binop(P, op, l, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P)
{
    jnode *first = parse_math2(P);
    if (!is_op(cur(P), "~"))
        return first;
    nvec v = {0};
    nv_push(P, &v, first, NULL);
    while (is_op(cur(P), "~")) {
        next(P);
        nv_push(P, &v, parse_math2(P), NULL);
    }
    jnode *n = mk(P, N_CONCAT);
    n->kids = v.v;
    n->nk = v.n;
    return n;
}

static jnode *parse_math1(parser *P)
{
    jnode *l = parse_concat(P);
    for (;;) {
        int op = is_op(cur(P), "+") ? OP_ADD : is_op(cur(P), "-") ? OP_SUB : -1;
        if (op < 0)
            return l;
        next(P);
        l = binop(P, op, l, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P)
{
    jnode *first = parse_math1(P);
    nvec operands = {0};
    jbuf ops = {0};
    for (;;) {
        const jtok *t = cur(P);
        uint8_t op;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            next(P);
        } else
            break;
        next(P);
        char c = (char)op;
        jb_put(P->a, &ops, &c, 1);
        nv_push(P, &operands, parse_math1(P), NULL);
    }
    if (!operands.n)
        return first;
    jnode *n = mk(P, N_CMP);
    n->a = first;
    n->kids = operands.v;
    n->nk = operands.n;
    n->val = jv_str(ops.p, ops.n);
    return n;
}

static jnode *parse_not(parser *P)
{
    if (is_name(cur(P), "not")) {
        enter(P);
        jnode *n = mk(P, N_NOT);
        next(P);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P)
{
    jnode *l = parse_not(P);
    while (is_name(cur(P), "and")) {
        next(P);
        jnode *n = mk(P, N_AND);
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *P)
{
    jnode *l = parse_and(P);
    while (is_name(cur(P), "or")) {
        next(P);
        jnode *n = mk(P, N_OR);
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    return l;
}

static jnode *parse_cond(parser *P)
{
    enter(P);
    jnode *e = parse_or(P);
    while (is_name(cur(P), "if")) {
        next(P);
        jnode *n = mk(P, N_COND);
        n->a = parse_or(P); /* test */
        n->b = e;
        if (is_name(cur(P), "else")) {
            next(P);
            n->c = parse_cond(P);
        }
        e = n;
    }
    P->depth--;
    return e;
}

static jnode *parse_expression(parser *P, bool with_cond) { return with_cond ? parse_cond(P) : parse_or(P); }

/* ---- statements --------------------------------------------------------------- */

static jnode *parse_body(parser *P, const char *const *ends);

static jnode *parse_assign_target(parser *P, bool with_ns, const char *extra)
{
    if (with_ns && cur(P)->k == TK_NAME && is_op(peek(P, 1), ".") && peek(P, 2)->k == TK_NAME) {
        jnode *n = mk(P, N_NSREF);
        n->a = mk(P, N_NAME);
        n->a->name = cur(P)->s;
        next(P);
        next(P);
        n->name = cur(P)->s;
        next(P);
        return n;
    }
    jnode *t = parse_tuple(P, true, false, extra, false);
    if (t->kind == N_NAME)
        return t;
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->nk; i++)
            if (t->kids[i]->kind != N_NAME)
                perr(P, "can only assign to names");
        return t;
    }
    perr(P, "can only assign to names");
}

static const char *block_name(parser *P)
{
    /* at {% ; returns the statement name without consuming */
    const jtok *t = peek(P, 1);
    return t->k == TK_NAME ? t->s : NULL;
}

static bool at_end(parser *P, const char *const *ends)
{
    if (cur(P)->k != TK_BLOCK_BEGIN || !ends)
        return false;
    const char *nm = block_name(P);
    if (!nm)
        return false;
    for (int i = 0; ends[i]; i++)
        if (!strcmp(nm, ends[i]))
            return true;
    return false;
}

/* consumes `{% name` for an end tag */
static void end_tag(parser *P, const char *name)
{
    if (cur(P)->k != TK_BLOCK_BEGIN || !is_name(peek(P, 1), name)) {
        char m[64];
        snprintf(m, sizeof m, "expected '{%% %s %%}'", name);
        perr(P, m);
    }
    next(P);
    next(P);
}

static jnode *parse_filter_chain(parser *P)
{
    /* after `filter` or `set x |`: name [args] (| name [args])* applied to a hole */
    jnode *f = NULL;
    bool first = true;
    while (first || is_op(cur(P), "|")) {
        if (!first)
            next(P);
        first = false;
        jnode *n = mk(P, N_FILTER);
        n->a = f;
        n->name = dotted_name(P);
        if (is_op(cur(P), "("))
            parse_call_args(P, n);
        f = n;
    }
    return f;
}

static void note_content_loop(parser *P, const jnode *it)
{
    while (it && (it->kind == N_FILTER))
        it = it->a;
    if (!it)
        return;
    if ((it->kind == N_NAME && !strcmp(it->name, "content")) ||
        (it->kind == N_GETATTR && !strcmp(it->name, "content")) ||
        (it->kind == N_GETITEM && it->b && it->b->kind == N_CONST && it->b->val.t == JT_STR && it->b->val.n == 7 &&
         !memcmp(it->b->val.u.s, "content", 7)))
        P->t->iterates_content = true;
}

/* A macro's or call block's parameter list "(name, name=default, ...)",
 * from its "(" through its ")": names and default expressions (NULL: none). */
static void parse_params(parser *P, nvec *params)
{
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (params->n)
            expect_op(P, ",");
        if (cur(P)->k != TK_NAME)
            perr(P, "expected a parameter name");
        const char *pn = cur(P)->s;
        next(P);
        jnode *dflt = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            dflt = parse_expression(P, true);
        }
        nv_push(P, params, dflt, pn);
    }
    next(P);
}

static jnode *parse_statement(parser *P)
{
    enter(P);
    int line = cur(P)->line;
    next(P); /* {% */
    const jtok *t = cur(P);
    if (t->k != TK_NAME)
        perr(P, "expected a statement name");
    jnode *n = NULL;
    if (is_name(t, "if")) {
        n = mk(P, S_IF);
        nvec parts = {0};
        next(P);
        for (;;) {
            jnode *cond = parse_tuple(P, false, true, NULL, false);
            expect_block_end(P);
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            jnode *body = parse_body(P, ends);
            nv_push(P, &parts, cond, NULL);
            nv_push(P, &parts, body, NULL);
            const char *nm = block_name(P);
            next(P);
            next(P);
            if (!strcmp(nm, "elif"))
                continue;
            if (!strcmp(nm, "else")) {
                expect_block_end(P);
                static const char *const ends2[] = {"endif", NULL};
                n->a = parse_body(P, ends2);
                end_tag(P, "endif");
            }
            break;
        }
        expect_block_end(P);
        n->kids = parts.v;
        n->nk = parts.n;
    } else if (is_name(t, "for")) {
        n = mk(P, S_FOR);
        next(P);
        n->a = parse_assign_target(P, false, "in");
        if (!is_name(cur(P), "in"))
            perr(P, "expected 'in'");
        next(P);
        n->b = parse_tuple(P, false, false, "recursive", false);
        note_content_loop(P, n->b);
        if (is_name(cur(P), "if")) {
            next(P);
            n->c = parse_expression(P, true);
        }
        if (is_name(cur(P), "recursive"))
            perr(P, "recursive for loops are not supported");
        expect_block_end(P);
        static const char *const ends[] = {"endfor", "else", NULL};
        P->loops++;
        n->d = parse_body(P, ends);
        P->loops--;
        if (is_name(peek(P, 1), "else")) {
            next(P);
            next(P);
            expect_block_end(P);
            static const char *const ends2[] = {"endfor", NULL};
            n->kids = ja_alloc(P->a, sizeof(jnode *));
            n->kids[0] = parse_body(P, ends2);
            n->nk = 1;
        }
        end_tag(P, "endfor");
        expect_block_end(P);
    } else if (is_name(t, "set")) {
        next(P);
        jnode *target = parse_assign_target(P, true, NULL);
        if (is_op(cur(P), "=")) {
            next(P);
            n = mk(P, S_SET);
            n->a = target;
            n->b = parse_tuple(P, false, true, NULL, false);
            expect_block_end(P);
        } else {
            n = mk(P, S_SETBLOCK);
            n->a = target;
            if (is_op(cur(P), "|")) {
                next(P);
                n->b = parse_filter_chain(P);
            }
            expect_block_end(P);
            static const char *const ends[] = {"endset", NULL};
            n->d = parse_body(P, ends);
            end_tag(P, "endset");
            expect_block_end(P);
        }
    } else if (is_name(t, "macro")) {
        n = mk(P, S_MACRO);
        next(P);
        if (cur(P)->k != TK_NAME)
            perr(P, "expected a macro name");
        n->name = cur(P)->s;
        next(P);
        nvec params = {0};
        parse_params(P, &params);
        expect_block_end(P);
        static const char *const ends[] = {"endmacro", NULL};
        int loops = P->loops;
        P->loops = 0;
        n->d = parse_body(P, ends);
        P->loops = loops;
        end_tag(P, "endmacro");
        if (cur(P)->k == TK_NAME && cur(P)->n == strlen(n->name) && !strcmp(cur(P)->s, n->name))
            next(P);
        expect_block_end(P);
        n->kids = params.v;
        n->nk = params.n;
        n->names = params.nm;
        n->nn = params.n;
    } else if (is_name(t, "call")) {
        n = mk(P, S_CALLBLOCK);
        next(P);
        nvec params = {0};
        if (is_op(cur(P), "("))
            parse_params(P, &params);
        n->a = parse_expression(P, true);
        if (n->a->kind != N_CALL)
            perr(P, "expected a call");
        expect_block_end(P);
        static const char *const ends[] = {"endcall", NULL};
        int loops = P->loops;
        P->loops = 0;
        n->d = parse_body(P, ends);
        P->loops = loops;
        end_tag(P, "endcall");
        expect_block_end(P);
        n->kids = params.v;
        n->nk = params.n;
        n->names = params.nm;
        n->nn = params.n;
    } else if (is_name(t, "filter")) {
        n = mk(P, S_FILTERBLOCK);
        next(P);
        n->b = parse_filter_chain(P);
        expect_block_end(P);
        static const char *const ends[] = {"endfilter", NULL};
        n->d = parse_body(P, ends);
        end_tag(P, "endfilter");
        expect_block_end(P);
    } else if (is_name(t, "with")) {
        n = mk(P, S_WITH);
        next(P);
        nvec parts = {0};
        while (cur(P)->k != TK_BLOCK_END) {
            if (parts.n)
                expect_op(P, ",");
            jnode *target = parse_assign_target(P, false, NULL);
            expect_op(P, "=");
            nv_push(P, &parts, target, NULL);
            nv_push(P, &parts, parse_expression(P, true), NULL);
        }
        expect_block_end(P);
        static const char *const ends[] = {"endwith", NULL};
        n->d = parse_body(P, ends);
        end_tag(P, "endwith");
        expect_block_end(P);
        n->kids = parts.v;
        n->nk = parts.n;
    } else if (is_name(t, "generation")) {
        next(P);
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        n = parse_body(P, ends);
        end_tag(P, "endgeneration");
        expect_block_end(P);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops)
            perr(P, "'break'/'continue' outside a loop");
        n = mk(P, is_name(t, "break") ? S_BREAK : S_CONTINUE);
        next(P);
        expect_block_end(P);
    } else {
        jfail(P->a, "chat template syntax error, line %d: unknown or unsupported tag '%s'", t->line, t->s);
    }
    n->line = line;
    P->depth--;
    return n;
}

static jnode *parse_body(parser *P, const char *const *ends)
{
    nvec v = {0};
    jnode *body = mk(P, S_BODY);
    for (;;) {
        const jtok *t = cur(P);
        if (t->k == TK_EOF) {
            if (ends)
                jfail(P->a, "chat template syntax error: unexpected end of template, expected '{%% %s %%}'", ends[0]);
            break;
        }
        if (at_end(P, ends))
            break;
        if (t->k == TK_DATA) {
            jnode *n = mk(P, S_TEXT);
            n->val = jv_str(t->s, t->n);
            next(P);
            nv_push(P, &v, n, NULL);
        } else if (t->k == TK_VAR_BEGIN) {
            jnode *n = mk(P, S_PRINT);
            next(P);
            n->a = parse_tuple(P, false, true, NULL, false);
            if (cur(P)->k != TK_VAR_END)
                perr(P, "expected '}}'");
            next(P);
            nv_push(P, &v, n, NULL);
        } else if (t->k == TK_BLOCK_BEGIN) {
            const char *nm = block_name(P);
            if (nm && (!strncmp(nm, "end", 3) || !strcmp(nm, "elif") || !strcmp(nm, "else"))) {
                next(P);
                perr(P, "unexpected end tag");
            }
            nv_push(P, &v, parse_statement(P), NULL);
        } else {
            perr(P, "unexpected token");
        }
    }
    body->kids = v.v;
    body->nk = v.n;
    return body;
}

/* jinja2's compiler refuses an unknown filter or test, except inside an `if`
 * (statement or expression) of the same scope, where it fails only when
 * reached; a loop, macro, call, filter or set block body is a new scope. */
static void check_names(parser *P, const jnode *n, bool soft, int depth)
{
    if (!n || depth > 2 * MAX_PARSE_DEPTH)
        return;
    if (!soft && n->kind == N_FILTER && !jfilter_known(n->name))
        jfail(P->a, "chat template error, line %d: no filter named '%s'", n->line, n->name);
    if (!soft && n->kind == N_TEST && !jtest_known(n->name))
        jfail(P->a, "chat template error, line %d: no test named '%s'", n->line, n->name);
    bool ks = soft, bs = soft; /* soft for kids / for a,b,c,d */
    switch ((jnode_kind)n->kind) {
    case S_IF: ks = bs = true; break;
    case N_COND: bs = true; break;
    case S_FOR:
        check_names(P, n->a, soft, depth + 1);
        check_names(P, n->b, soft, depth + 1);
        check_names(P, n->c, false, depth + 1);
        check_names(P, n->d, false, depth + 1);
        for (int i = 0; i < n->nk; i++)
            check_names(P, n->kids[i], false, depth + 1);
        return;
    case S_MACRO:
    case S_SETBLOCK:
    case S_FILTERBLOCK:
    case S_WITH:
        check_names(P, n->a, soft, depth + 1);
        check_names(P, n->b, n->kind == S_FILTERBLOCK ? false : soft, depth + 1);
        check_names(P, n->d, false, depth + 1);
        for (int i = 0; i < n->nk; i++)
            check_names(P, n->kids[i], soft, depth + 1);
        return;
    case S_CALLBLOCK:
        check_names(P, n->a, soft, depth + 1);
        check_names(P, n->d, false, depth + 1);
        for (int i = 0; i < n->nk; i++)
            check_names(P, n->kids[i], soft, depth + 1);
        return;
    default: break;
    }
    check_names(P, n->a, bs, depth + 1);
    check_names(P, n->b, bs, depth + 1);
    check_names(P, n->c, bs, depth + 1);
    check_names(P, n->d, bs, depth + 1);
    for (int i = 0; i < n->nk; i++)
        check_names(P, n->kids[i], ks, depth + 1);
}

void jparse(lg_jinja *t, const jtoks *toks)
{
    parser P = {.t = t, .a = &t->a, .toks = toks};
    t->root = parse_body(&P, NULL);
    check_names(&P, t->root, false, 0);
}
