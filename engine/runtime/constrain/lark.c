/*
 * lark.c — Lark-style EBNF grammars to an lg_cgb grammar (see compilers.h;
 * the accepted syntax and its semantics are listed in constrain.h).
 *
 * What: a tokenizer and a recursive-descent parser for the Lark grammar
 * language into a small expression tree per definition, then emission:
 * every lowercase rule becomes a grammar rule (references are calls, so
 * recursion works); every uppercase terminal is inlined where it is used
 * (terminals are regular: a terminal that reaches itself is refused).
 * `start` is the root. `%json { schema }` as an item compiles the schema
 * (json_schema.c) into rules of the same grammar.
 *
 * Semantics: the grammar is context-free over bytes; terminals are not
 * lexed separately (no longest match between adjacent terminals), so a
 * grammar that relies on the lexer to split `ID ID` means here what its
 * context-free reading means. %ignore, priorities' effect on lexing,
 * templates and %declare are not supported (refused with the line);
 * priorities (`rule.2:`) and the `?` / `!` rule prefixes are accepted and
 * have no effect on the language. Left recursion is refused by the grammar
 * builder, naming the rule.
 *
 * Limits: source size (checked by the caller), nesting depth (max_depth),
 * automaton states and deadline through the compile budget.
 */
#include "engine/runtime/constrain/compilers.h"
#include "engine/runtime/constrain/regex.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

enum { LT_EOF, LT_NAME, LT_STR, LT_RX, LT_NUM, LT_OP, LT_DIR };

typedef struct ltok {
    int kind;
    const char *s;   /* into the source (names, ops, directives) */
    size_t n;
    char *val;       /* STR: decoded bytes; RX: the regex body */
    size_t vlen;
    int flags;       /* STR: 'i'; RX: LG_RX_* */
    int line;
    bool bol;        /* first token on its line */
} ltok;

enum { LX_LIT, LX_RX, LX_RANGE, LX_REF, LX_SEQ, LX_ALT, LX_REP, LX_JSON };

typedef struct lexpr {
    int kind;
    char *s;         /* LIT bytes / RX body / REF name / JSON source */
    size_t n;
    int flags;
    uint32_t lo, hi; /* RANGE */
    struct lexpr **k;
    int nk;
    int min, max;    /* REP, max -1 unbounded */
    int line;
} lexpr;

typedef struct ldef {
    char *name;
    bool terminal;
    lexpr *body;
    int line;
    int rule;        /* grammar rule (rules only) */
    int visiting;    /* terminal inlining guard */
} ldef;

typedef struct lk {
    lg_cgb *g;
    lg_cbudget *b;
    const lg_climits *lim;
    const char *src;
    size_t n;
    ltok *t;
    int nt, capt, pos;
    lexpr **all;
    size_t nall, capall;
    ldef *defs;
    int ndefs, capdefs;
    int depth;
} lk;

static int lk_fail(lk *c, int line, int code, const char *fmt, const char *a)
{
    char param[32];
    snprintf(param, sizeof param, "line %d", line);
    return lg_cfail(c->b, code, param, fmt, a ? a : "");
}

/* ---- tokenizer ------------------------------------------------------------------------- */

static int lk_push_tok(lk *c, ltok t)
{
    if (c->nt == c->capt) {
        int nc = c->capt ? c->capt * 2 : 256;
        ltok *nt = realloc(c->t, (size_t)nc * sizeof *nt);
        if (!nt)
            return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        c->t = nt;
        c->capt = nc;
    }
    c->t[c->nt++] = t;
    return 0;
}

static int lk_hexval(int ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static void lk_put_utf8(lg_strbuf *b, uint32_t cp)
{
    char u[4];
    int n;
    if (cp < 0x80)
        u[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    lg_strbuf_put(b, u, (size_t)n);
}

static int lk_tokenize(lk *c)
{
    const char *s = c->src;
    size_t i = 0, n = c->n;
    int line = 1;
    bool bol = true;
    while (i < n) {
        char ch = s[i];
        if (ch == '\n') {
            line++;
            bol = true;
            i++;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\r') {
            i++;
            continue;
        }
        if (ch == '/' && i + 1 < n && s[i + 1] == '/') {
            while (i < n && s[i] != '\n')
                i++;
            continue;
        }
        if (ch == '#' && bol) { /* a comment line, as some grammars write them */
            while (i < n && s[i] != '\n')
                i++;
            continue;
        }
        ltok t = {.line = line, .bol = bol, .s = s + i};
        bol = false;
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
                j++;
            t.kind = LT_NAME;
            t.n = j - i;
            i = j;
        } else if (isdigit((unsigned char)ch)) {
            size_t j = i;
            while (j < n && isdigit((unsigned char)s[j]))
                j++;
            t.kind = LT_NUM;
            t.n = j - i;
            i = j;
        } else if (ch == '"') {
            lg_strbuf b = {0};
            size_t j = i + 1;
            while (j < n && s[j] != '"' && s[j] != '\n') {
                if (s[j] == '\\' && j + 1 < n) {
                    char e = s[j + 1];
                    j += 2;
                    uint32_t cp;
                    switch (e) {
                    case 'n': lg_strbuf_puts(&b, "\n"); break;
                    case 't': lg_strbuf_puts(&b, "\t"); break;
                    case 'r': lg_strbuf_puts(&b, "\r"); break;
                    case 'f': lg_strbuf_puts(&b, "\f"); break;
                    case 'v': lg_strbuf_puts(&b, "\v"); break;
                    case '0': lg_strbuf_put(&b, "", 1); break;
                    case 'x':
                    case 'u':
                    case 'U': {
                        int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                        cp = 0;
                        for (int k = 0; k < nd; k++) {
                            int h = j < n ? lk_hexval(s[j]) : -1;
                            if (h < 0) {
                                free(b.p);
                                return lk_fail(c, line, LG_CERR_INVALID, "bad escape in a string%s", "");
                            }
                            cp = cp * 16 + (uint32_t)h;
                            j++;
                        }
                        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                            free(b.p);
                            return lk_fail(c, line, LG_CERR_INVALID, "bad code point in a string%s", "");
                        }
                        lk_put_utf8(&b, cp);
                        break;
                    }
                    default: lg_strbuf_put(&b, &e, 1);
                    }
                } else
                    lg_strbuf_put(&b, &s[j++], 1);
            }
            if (j >= n || s[j] != '"') {
                free(b.p);
                return lk_fail(c, line, LG_CERR_INVALID, "unterminated string%s", "");
            }
            j++;
            t.kind = LT_STR;
            if (j < n && s[j] == 'i' && !(j + 1 < n && (isalnum((unsigned char)s[j + 1]) || s[j + 1] == '_'))) {
                t.flags = 'i';
                j++;
            }
            if (b.oom) {
                free(b.p);
                return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
            }
            t.val = b.p ? b.p : strdup("");
            t.vlen = b.len;
            t.n = j - i;
            i = j;
        } else if (ch == '/') {
            size_t j = i + 1;
            bool in_cls = false;
            while (j < n && s[j] != '\n' && (in_cls || s[j] != '/')) {
                if (s[j] == '\\' && j + 1 < n)
                    j++;
                else if (s[j] == '[')
                    in_cls = true;
                else if (s[j] == ']')
                    in_cls = false;
                j++;
            }
            if (j >= n || s[j] != '/')
                return lk_fail(c, line, LG_CERR_INVALID, "unterminated regular expression%s", "");
            t.kind = LT_RX;
            t.val = strndup(s + i + 1, j - i - 1);
            if (!t.val)
                return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
            t.vlen = j - i - 1;
            j++;
            while (j < n && isalpha((unsigned char)s[j])) {
                if (s[j] == 'i')
                    t.flags |= LG_RX_ICASE;
                else if (s[j] == 's')
                    t.flags |= LG_RX_DOTALL;
                else if (s[j] != 'u') {
                    free(t.val);
                    return lk_fail(c, line, LG_CERR_UNSUPPORTED, "regular expression flag '%s' is not supported",
                                   (char[]){s[j], 0});
                }
                j++;
            }
            t.n = j - i;
            i = j;
        } else if (ch == '%') {
            size_t j = i + 1;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
                j++;
            t.kind = LT_DIR;
            t.n = j - i;
            i = j;
        } else if (ch == '.' && i + 1 < n && s[i + 1] == '.') {
            t.kind = LT_OP;
            t.n = 2;
            i += 2;
        } else if (strchr(":|()[]?*+~.,{}-><=!", ch)) {
            t.kind = LT_OP;
            t.n = 1;
            i++;
        } else {
            return lk_fail(c, line, LG_CERR_INVALID, "unexpected character '%s'", (char[]){ch, 0});
        }
        if (lk_push_tok(c, t)) {
            free(t.val);
            return -1;
        }
    }
    return lk_push_tok(c, (ltok){.kind = LT_EOF, .line = line, .bol = true, .s = s + n});
}

/* ---- parser ---------------------------------------------------------------------------------- */

static ltok *lk_peek(lk *c) { return &c->t[c->pos]; }
static bool lk_is_op(const ltok *t, const char *op) { return t->kind == LT_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }

static lexpr *lk_new(lk *c, int kind, int line)
{
    if (c->b->failed)
        return NULL;
    if (c->nall == c->capall) {
        size_t nc = c->capall ? c->capall * 2 : 128;
        lexpr **na = realloc(c->all, nc * sizeof *na);
        if (!na) {
            lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
            return NULL;
        }
        c->all = na;
        c->capall = nc;
    }
    lexpr *x = calloc(1, sizeof *x);
    if (!x) {
        lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        return NULL;
    }
    x->kind = kind;
    x->line = line;
    c->all[c->nall++] = x;
    return x;
}

static int lk_add(lk *c, lexpr *x, lexpr *kid)
{
    lexpr **nk = realloc(x->k, (size_t)(x->nk + 1) * sizeof *nk);
    if (!nk)
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    x->k = nk;
    x->k[x->nk++] = kid;
    return 0;
}

/* a new definition starts here: NAME (. NUM)? ':' at the start of a line, or a directive */
static bool lk_def_start(lk *c, int at)
{
    ltok *t = &c->t[at];
    if (!t->bol)
        return false;
    if (t->kind == LT_DIR || t->kind == LT_EOF)
        return true;
    if (lk_is_op(t, "?") || lk_is_op(t, "!"))
        t = &c->t[++at];
    if (t->kind != LT_NAME)
        return false;
    ltok *u = &c->t[at + 1];
    if (lk_is_op(u, "."))
        u = &c->t[at + 3 <= c->nt - 1 ? at + 3 : c->nt - 1];
    return lk_is_op(u, ":");
}

static lexpr *lk_alts(lk *c);

static bool lk_item_start(lk *c)
{
    ltok *t = lk_peek(c);
    if (t->kind == LT_EOF || lk_def_start(c, c->pos))
        return false;
    return t->kind == LT_NAME || t->kind == LT_STR || t->kind == LT_RX || lk_is_op(t, "(") || lk_is_op(t, "[") ||
           (t->kind == LT_DIR && t->n == 5 && !memcmp(t->s, "%json", 5));
}

/* %json { ... }: the balanced braces' text */
static lexpr *lk_json(lk *c)
{
    ltok *d = &c->t[c->pos++];
    ltok *o = lk_peek(c);
    if (!lk_is_op(o, "{")) {
        lk_fail(c, d->line, LG_CERR_INVALID, "%%json must be followed by a schema in braces%s", "");
        return NULL;
    }
    const char *start = o->s;
    int level = 0;
    const char *end = NULL;
    for (const char *p = start; p < c->src + c->n; p++) {
        if (*p == '"') {
            for (p++; p < c->src + c->n && *p != '"'; p++)
                if (*p == '\\')
                    p++;
            continue;
        }
        if (*p == '{')
            level++;
        else if (*p == '}' && --level == 0) {
            end = p + 1;
            break;
        }
    }
    if (!end) {
        lk_fail(c, d->line, LG_CERR_INVALID, "unbalanced braces after %%json%s", "");
        return NULL;
    }
    while (c->pos < c->nt - 1 && c->t[c->pos].s < end)
        c->pos++;
    lexpr *x = lk_new(c, LX_JSON, d->line);
    if (!x)
        return NULL;
    x->s = strndup(start, (size_t)(end - start));
    x->n = (size_t)(end - start);
    if (!x->s)
        lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    return c->b->failed ? NULL : x;
}

/* A literal or regex expression that takes over token t's decoded value. */
static lexpr *lk_take(lk *c, int kind, ltok *t)
{
    lexpr *x = lk_new(c, kind, t->line);
    if (!x)
        return NULL;
    x->s = t->val;
    x->n = t->vlen;
    x->flags = t->flags;
    t->val = NULL;
    return x;
}

static lexpr *lk_atom(lk *c)
{
    ltok *t = lk_peek(c);
    lexpr *x = NULL;
    if (t->kind == LT_DIR)
        return lk_json(c);
    if (t->kind == LT_NAME) {
        c->pos++;
        x = lk_new(c, LX_REF, t->line);
        if (x && !(x->s = strndup(t->s, t->n)))
            lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        return c->b->failed ? NULL : x;
    }
    if (t->kind == LT_STR) {
        c->pos++;
        if (lk_is_op(lk_peek(c), "..")) {
            c->pos++;
            ltok *u = lk_peek(c);
            if (u->kind != LT_STR) {
                lk_fail(c, t->line, LG_CERR_INVALID, "a range needs a string after ..%s", "");
                return NULL;
            }
            c->pos++;
            /* one code point each side */
            uint32_t cp[2];
            const ltok *e[2] = {t, u};
            for (int k = 0; k < 2; k++) {
                const unsigned char *p = (const unsigned char *)e[k]->val;
                size_t len = e[k]->vlen;
                int need = len == 0 ? 0 : p[0] < 0x80 ? 1 : p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : 2;
                if (need == 0 || (size_t)need != len) {
                    lk_fail(c, t->line, LG_CERR_INVALID, "a range needs one character each side%s", "");
                    return NULL;
                }
                uint32_t v = need == 1 ? p[0] : p[0] & (0x3F >> (need - 1));
                for (int j = 1; j < need; j++)
                    v = v << 6 | (p[j] & 63);
                cp[k] = v;
            }
            if (cp[0] > cp[1]) {
                lk_fail(c, t->line, LG_CERR_INVALID, "range out of order%s", "");
                return NULL;
            }
            x = lk_new(c, LX_RANGE, t->line);
            if (x)
                x->lo = cp[0], x->hi = cp[1];
            return x;
        }
        return lk_take(c, LX_LIT, t);
    }
    if (t->kind == LT_RX) {
        c->pos++;
        return lk_take(c, LX_RX, t);
    }
    if (lk_is_op(t, "(") || lk_is_op(t, "[")) {
        bool opt = lk_is_op(t, "[");
        c->pos++;
        if (++c->depth > c->lim->max_depth) {
            char lim[32];
            snprintf(lim, sizeof lim, "%d", c->lim->max_depth);
            lk_fail(c, t->line, LG_CERR_LIMIT, "grammar nests deeper than max_depth (%s)", lim);
            return NULL;
        }
        lexpr *in = lk_alts(c);
        c->depth--;
        if (!in)
            return NULL;
        if (!lk_is_op(lk_peek(c), opt ? "]" : ")")) {
            lk_fail(c, lk_peek(c)->line, LG_CERR_INVALID, "missing '%s'", opt ? "]" : ")");
            return NULL;
        }
        c->pos++;
        if (!opt)
            return in;
        x = lk_new(c, LX_REP, t->line);
        if (!x || lk_add(c, x, in))
            return NULL;
        x->min = 0;
        x->max = 1;
        return x;
    }
    lk_fail(c, t->line, LG_CERR_INVALID, "unexpected token%s", "");
    return NULL;
}

static bool lk_num(lk *c, long *v)
{
    ltok *t = lk_peek(c);
    if (t->kind != LT_NUM)
        return false;
    *v = 0;
    for (size_t k = 0; k < t->n && *v < 100000000; k++)
        *v = *v * 10 + (t->s[k] - '0');
    c->pos++;
    return true;
}

static lexpr *lk_postfix(lk *c)
{
    lexpr *x = lk_atom(c);
    while (x) {
        ltok *t = lk_peek(c);
        int mn, mx;
        if (lk_is_op(t, "?"))
            mn = 0, mx = 1;
        else if (lk_is_op(t, "*"))
            mn = 0, mx = -1;
        else if (lk_is_op(t, "+"))
            mn = 1, mx = -1;
        else if (lk_is_op(t, "~")) {
            c->pos++;
            long a, b;
            if (!lk_num(c, &a)) {
                lk_fail(c, t->line, LG_CERR_INVALID, "~ needs a count%s", "");
                return NULL;
            }
            b = a;
            if (lk_is_op(lk_peek(c), "..")) {
                c->pos++;
                if (!lk_num(c, &b)) {
                    lk_fail(c, t->line, LG_CERR_INVALID, "~ n..m needs m%s", "");
                    return NULL;
                }
            }
            if (b < a) {
                lk_fail(c, t->line, LG_CERR_INVALID, "~ n..m with m < n%s", "");
                return NULL;
            }
            if (b > 100000) {
                lk_fail(c, t->line, LG_CERR_LIMIT, "repetition count too large%s", "");
                return NULL;
            }
            c->pos--; /* consumed below */
            mn = (int)a, mx = (int)b;
        } else
            break;
        c->pos++;
        lexpr *r = lk_new(c, LX_REP, t->line);
        if (!r || lk_add(c, r, x))
            return NULL;
        r->min = mn;
        r->max = mx;
        x = r;
    }
    return x;
}

static lexpr *lk_seq(lk *c)
{
    lexpr *s = lk_new(c, LX_SEQ, lk_peek(c)->line);
    while (s && lk_item_start(c)) {
        lexpr *x = lk_postfix(c);
        if (!x || lk_add(c, s, x))
            return NULL;
    }
    /* "-> alias" names a production: no effect on the language */
    if (s && lk_is_op(lk_peek(c), "-") && lk_is_op(&c->t[c->pos + 1], ">")) {
        c->pos += 2;
        if (lk_peek(c)->kind == LT_NAME)
            c->pos++;
    }
    return s;
}

static lexpr *lk_alts(lk *c)
{
    lexpr *a = lk_new(c, LX_ALT, lk_peek(c)->line);
    for (;;) {
        lexpr *s = a ? lk_seq(c) : NULL;
        if (!s || lk_add(c, a, s))
            return NULL;
        if (lk_is_op(lk_peek(c), "|")) {
            c->pos++;
            continue;
        }
        return a;
    }
}

static int lk_find(lk *c, const char *name)
{
    for (int i = 0; i < c->ndefs; i++)
        if (!strcmp(c->defs[i].name, name))
            return i;
    return -1;
}

static int lk_add_def(lk *c, const char *name, size_t n, lexpr *body, int line)
{
    char *nm = strndup(name, n);
    if (!nm)
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    if (lk_find(c, nm) >= 0) {
        int r = lk_fail(c, line, LG_CERR_INVALID, "'%s' is defined twice", nm);
        free(nm);
        return r;
    }
    if (c->ndefs == c->capdefs) {
        int nc = c->capdefs ? c->capdefs * 2 : 32;
        ldef *nd = realloc(c->defs, (size_t)nc * sizeof *nd);
        if (!nd) {
            free(nm);
            return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        }
        c->defs = nd;
        c->capdefs = nc;
    }
    bool term = isupper((unsigned char)nm[0]) || (nm[0] == '_' && isupper((unsigned char)nm[1]));
    c->defs[c->ndefs++] = (ldef){nm, term, body, line, -1, 0};
    return 0;
}

/* the terminals of %import common.X, as regexes of our own */
static const struct {
    const char *name, *rx;
} LK_COMMON[] = {
    {"DIGIT", "[0-9]"},
    {"HEXDIGIT", "[0-9a-fA-F]"},
    {"INT", "[0-9]+"},
    {"SIGNED_INT", "[+-]?[0-9]+"},
    {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
    {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\\.[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?"},
    {"SIGNED_FLOAT", "[+-]?(?:[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\\.[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"},
    {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\\.[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+"},
    {"SIGNED_NUMBER", "[+-]?(?:[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\\.[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+)"},
    {"LCASE_LETTER", "[a-z]"},
    {"UCASE_LETTER", "[A-Z]"},
    {"LETTER", "[A-Za-z]"},
    {"WORD", "[A-Za-z]+"},
    {"CNAME", "[_A-Za-z][_A-Za-z0-9]*"},
    {"WS_INLINE", "[ \\t]+"},
    {"WS", "[ \\t\\f\\r\\n]+"},
    {"CR", "\\r"},
    {"LF", "\\n"},
    {"NEWLINE", "(?:\\r?\\n)+"},
    {"ESCAPED_STRING", "\"(?:[^\"\\\\\\n]|\\\\[^\\n])*\""},
};

static int lk_import(lk *c)
{
    ltok *d = &c->t[c->pos++];
    ltok *t = lk_peek(c);
    /* common.NAME or common (NAME, NAME) */
    if (t->kind != LT_NAME || t->n != 6 || memcmp(t->s, "common", 6))
        return lk_fail(c, d->line, LG_CERR_UNSUPPORTED, "only %%import common.<NAME> is supported%s", "");
    c->pos++;
    bool paren = false;
    if (lk_is_op(lk_peek(c), "."))
        c->pos++;
    else if (lk_is_op(lk_peek(c), "(")) {
        paren = true;
        c->pos++;
    } else
        return lk_fail(c, d->line, LG_CERR_INVALID, "bad %%import%s", "");
    for (;;) {
        t = lk_peek(c);
        if (t->kind != LT_NAME)
            return lk_fail(c, d->line, LG_CERR_INVALID, "bad %%import%s", "");
        c->pos++;
        const char *rx = NULL;
        for (size_t i = 0; i < sizeof LK_COMMON / sizeof LK_COMMON[0]; i++)
            if (strlen(LK_COMMON[i].name) == t->n && !memcmp(LK_COMMON[i].name, t->s, t->n))
                rx = LK_COMMON[i].rx;
        if (!rx) {
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s", (int)(t->n < 60 ? t->n : 60), t->s);
            return lk_fail(c, d->line, LG_CERR_UNSUPPORTED, "common.%s is not supported", nm);
        }
        const char *alias = t->s;
        size_t alen = t->n;
        if (!paren && lk_is_op(lk_peek(c), "-") && lk_is_op(&c->t[c->pos + 1], ">") &&
            c->t[c->pos + 2].kind == LT_NAME) {
            alias = c->t[c->pos + 2].s;
            alen = c->t[c->pos + 2].n;
            c->pos += 3;
        }
        lexpr *x = lk_new(c, LX_RX, d->line);
        if (!x)
            return -1;
        x->s = strdup(rx);
        x->n = strlen(rx);
        if (!x->s)
            return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        if (lk_add_def(c, alias, alen, x, d->line))
            return -1;
        if (!paren)
            return 0;
        if (lk_is_op(lk_peek(c), ",")) {
            c->pos++;
            continue;
        }
        if (lk_is_op(lk_peek(c), ")")) {
            c->pos++;
            return 0;
        }
        return lk_fail(c, d->line, LG_CERR_INVALID, "bad %%import%s", "");
    }
}

static int lk_parse(lk *c)
{
    while (!c->b->failed) {
        ltok *t = lk_peek(c);
        if (t->kind == LT_EOF)
            return 0;
        if (t->kind == LT_DIR) {
            char nm[32];
            snprintf(nm, sizeof nm, "%.*s", (int)(t->n < 30 ? t->n : 30), t->s);
            if (!strcmp(nm, "%import")) {
                if (lk_import(c))
                    return -1;
                continue;
            }
            return lk_fail(c, t->line, LG_CERR_UNSUPPORTED, "directive %s is not supported", nm);
        }
        bool bol = t->bol;
        if (lk_is_op(t, "?") || lk_is_op(t, "!")) {
            c->pos++;
            t = lk_peek(c);
        }
        if (t->kind != LT_NAME || !bol)
            return lk_fail(c, t->line, LG_CERR_INVALID, "expected a definition 'name: ...'%s", "");
        const char *name = t->s;
        size_t nlen = t->n;
        int line = t->line;
        c->pos++;
        if (lk_is_op(lk_peek(c), ".")) { /* priority */
            c->pos++;
            if (lk_is_op(lk_peek(c), "-"))
                c->pos++;
            long pr;
            if (!lk_num(c, &pr))
                return lk_fail(c, line, LG_CERR_INVALID, "bad priority%s", "");
        }
        if (lk_is_op(lk_peek(c), "{"))
            return lk_fail(c, line, LG_CERR_UNSUPPORTED, "template rules are not supported%s", "");
        if (!lk_is_op(lk_peek(c), ":"))
            return lk_fail(c, line, LG_CERR_INVALID, "expected ':' after the name%s", "");
        c->pos++;
        lexpr *body = lk_alts(c);
        if (!body)
            return -1;
        if (!lk_def_start(c, c->pos))
            return lk_fail(c, lk_peek(c)->line, LG_CERR_INVALID, "unexpected token%s", "");
        if (lk_add_def(c, name, nlen, body, line))
            return -1;
    }
    return -1;
}

/* ---- emission ----------------------------------------------------------------------------------- */

static int lk_emit(lk *c, lg_nfa *a, int from, int to, const lexpr *x, bool in_terminal, int depth);

static int lk_emit_lit(lg_nfa *a, int from, int to, const char *s, size_t n, bool icase)
{
    if (n == 0) {
        lg_nfa_eps(a, from, to);
        return 0;
    }
    int cur = from;
    for (size_t i = 0; i < n; i++) {
        int nx = i + 1 == n ? to : lg_nfa_node(a);
        if (nx < 0)
            return -1;
        unsigned char ch = (unsigned char)s[i];
        lg_nfa_range(a, cur, nx, ch, ch);
        if (icase && isalpha(ch)) {
            unsigned char o = (unsigned char)(islower(ch) ? toupper(ch) : tolower(ch));
            lg_nfa_range(a, cur, nx, o, o);
        }
        cur = nx;
    }
    return a->b->failed ? -1 : 0;
}

static int lk_emit(lk *c, lg_nfa *a, int from, int to, const lexpr *x, bool in_terminal, int depth)
{
    if (c->b->failed)
        return -1;
    if (depth > c->lim->max_depth + 64)
        return lk_fail(c, x->line, LG_CERR_LIMIT, "terminals nest too deep%s", "");
    if (lg_cbudget_tick(c->b))
        return -1;
    switch (x->kind) {
    case LX_LIT: return lk_emit_lit(a, from, to, x->s, x->n, x->flags == 'i');
    case LX_RX: {
        char param[32];
        snprintf(param, sizeof param, "line %d", x->line);
        return lg_rx_emit(x->s, x->n, x->flags | LG_RX_UNICODE, a, from, to, param, c->lim->max_depth);
    }
    case LX_RANGE: lg_rx_emit_cp_range(a, from, to, x->lo, x->hi); return a->b->failed ? -1 : 0;
    case LX_SEQ: {
        if (x->nk == 0) {
            lg_nfa_eps(a, from, to);
            return 0;
        }
        int cur = from;
        for (int i = 0; i < x->nk; i++) {
            int nx = i + 1 == x->nk ? to : lg_nfa_node(a);
            if (nx < 0 || lk_emit(c, a, cur, nx, x->k[i], in_terminal, depth + 1))
                return -1;
            cur = nx;
        }
        return 0;
    }
    case LX_ALT:
        for (int i = 0; i < x->nk; i++)
            if (lk_emit(c, a, from, to, x->k[i], in_terminal, depth + 1))
                return -1;
        return 0;
    case LX_REP: {
        /* the body is emitted once per required / optional copy: a rule
         * reference is one call edge, a terminal is inlined */
        int cur = from;
        for (int i = 0; i < x->min; i++) {
            int nx = lg_nfa_node(a);
            if (nx < 0 || lk_emit(c, a, cur, nx, x->k[0], in_terminal, depth + 1))
                return -1;
            cur = nx;
        }
        if (x->max < 0) {
            int loop = lg_nfa_node(a), back = lg_nfa_node(a);
            if (back < 0)
                return -1;
            lg_nfa_eps(a, cur, loop);
            if (lk_emit(c, a, loop, back, x->k[0], in_terminal, depth + 1))
                return -1;
            lg_nfa_eps(a, back, loop);
            lg_nfa_eps(a, loop, to);
            return 0;
        }
        for (int i = x->min; i < x->max; i++) {
            lg_nfa_eps(a, cur, to);
            int nx = lg_nfa_node(a);
            if (nx < 0 || lk_emit(c, a, cur, nx, x->k[0], in_terminal, depth + 1))
                return -1;
            cur = nx;
        }
        lg_nfa_eps(a, cur, to);
        return 0;
    }
    case LX_REF: {
        int d = lk_find(c, x->s);
        if (d < 0)
            return lk_fail(c, x->line, LG_CERR_INVALID, "'%s' is not defined", x->s);
        ldef *df = &c->defs[d];
        if (df->terminal) {
            if (df->visiting)
                return lk_fail(c, x->line, LG_CERR_UNSUPPORTED, "terminal '%s' is recursive (terminals must be regular)",
                               df->name);
            df->visiting = 1;
            int r = lk_emit(c, a, from, to, df->body, true, depth + 1);
            df->visiting = 0;
            return r;
        }
        if (in_terminal)
            return lk_fail(c, x->line, LG_CERR_INVALID, "terminal refers to rule '%s'", df->name);
        lg_nfa_call(a, from, to, df->rule);
        return a->b->failed ? -1 : 0;
    }
    case LX_JSON: {
        if (in_terminal)
            return lk_fail(c, x->line, LG_CERR_INVALID, "%%json inside a terminal%s", "");
        int root;
        if (lg_cjson_compile(c->g, LG_CK_JSON_SCHEMA, x->s, x->n, LG_CWS_COMPACT, c->lim, &root))
            return -1;
        lg_nfa_call(a, from, to, root);
        return a->b->failed ? -1 : 0;
    }
    }
    return -1;
}

int lg_clark_compile(lg_cgb *g, const char *src, size_t len, const lg_climits *lim, int *root)
{
    lk c = {.g = g, .b = g->b, .lim = lim, .src = src, .n = len};
    int rc = -1;
    if (lk_tokenize(&c) || lk_parse(&c))
        goto out;
    int start = lk_find(&c, "start");
    if (start < 0 || c.defs[start].terminal) {
        lg_cfail(g->b, LG_CERR_INVALID, "", "the grammar has no 'start' rule");
        goto out;
    }
    /* rules first (so references resolve), root first among them */
    c.defs[start].rule = lg_cgb_rule(g, "start");
    for (int i = 0; i < c.ndefs; i++)
        if (!c.defs[i].terminal && i != start)
            c.defs[i].rule = lg_cgb_rule(g, c.defs[i].name);
    if (g->b->failed)
        goto out;
    for (int i = 0; i < c.ndefs; i++) {
        if (c.defs[i].terminal)
            continue;
        lg_nfa *a = lg_cgb_nfa(g, c.defs[i].rule);
        int end = lg_nfa_node(a);
        if (end < 0)
            goto out;
        a->final[end] = 1;
        if (lk_emit(&c, a, a->start, end, c.defs[i].body, false, 0))
            goto out;
    }
    *root = c.defs[start].rule;
    rc = 0;
out:
    for (int i = 0; i < c.nt; i++)
        free(c.t[i].val);
    free(c.t);
    for (size_t i = 0; i < c.nall; i++) {
        free(c.all[i]->s);
        free(c.all[i]->k);
        free(c.all[i]);
    }
    free(c.all);
    for (int i = 0; i < c.ndefs; i++)
        free(c.defs[i].name);
    free(c.defs);
    return g->b->failed ? -1 : rc;
}
