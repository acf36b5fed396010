/*
 * json_schema.c — JSON Schema (and JSON mode) to an lg_cgb grammar (see
 * compilers.h; the supported subset and its semantics are in constrain.h).
 *
 * What: one pass over the schema that emits NFA fragments. Everything
 * regular is inlined into the current rule (strings, numbers, literals,
 * object layouts, anyOf branches), so the matcher's per-state token sets
 * stay context independent over whole objects; three things become rules
 * of their own, reached by call edges: every $ref target (compiled once per
 * JSON pointer, so recursive and shared definitions cost one rule), array
 * items (repeated up to maxItems times without copying the item), and the
 * generic "any JSON value" (recursive by nature).
 *
 * Rules are compiled from a worklist, not by recursion, so a chain of 10,000
 * $refs costs 10,000 rules (bounded by max_ref_expansions), not stack;
 * inline nesting is bounded by max_depth. Every construction draws on the
 * compile budget (automaton states, deadline).
 *
 * Objects: properties in schema order, each optional unless required. The
 * layout is a two-track automaton (nothing emitted yet / something emitted,
 * which decides whether a comma comes first) where both tracks meet before
 * each value, so every value schema is emitted once: linear in the schema.
 * Strings with pattern / format / length bounds are built as a DFA over the
 * decoded text (pattern in search mode, format whole, length as
 * (?s:.){min,max}; intersected), then quoted (lg_dfa_json_quote).
 *
 * Errors carry the JSON pointer of the offending keyword in param.
 */
#include "engine/base/strmap.h"
#include "engine/runtime/constrain/compilers.h"
#include "engine/runtime/constrain/regex.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct js_work {
    json_t *schema;
    char *path;
    int rule;
    int end;                /* the rule's final node */
} js_work;

typedef struct js {
    lg_cgb *g;
    lg_cbudget *b;
    const lg_climits *lim;
    json_t *doc;
    const char *sep_item, *sep_key;
    js_work *work;          /* every rule made for a $ref or items */
    int nwork, capwork, done;
    lg_strmap *memo;        /* path -> index + 1 into work */
    int any_rule;           /* the generic value rule, -1 until needed */
    int n_refs;
    char path[8192];        /* JSON pointer of the schema being compiled */
} js;

static int js_emit(js *c, lg_nfa *a, int from, int to, json_t *s, int depth);

/* ---- paths --------------------------------------------------------------------------- */

/* Appends "/seg" (escaped) to the path. A path that does not fit fails the
 * compilation (LIMIT): paths name rules, so a truncated one must never be used. */
static size_t js_push(js *c, const char *seg)
{
    size_t old = strlen(c->path), n = old;
    if (old + 1 + 2 * strlen(seg) + 1 > sizeof c->path) {
        lg_cfail(c->b, LG_CERR_LIMIT, "", "schema path longer than %zu bytes", sizeof c->path);
        return old;
    }
    c->path[n++] = '/';
    for (const char *p = seg; *p; p++) {
        if (*p == '~' || *p == '/') {
            c->path[n++] = '~';
            c->path[n++] = *p == '~' ? '0' : '1';
        } else
            c->path[n++] = *p;
    }
    c->path[n] = 0;
    return old;
}

static size_t js_push_i(js *c, size_t i)
{
    char b[32];
    snprintf(b, sizeof b, "%zu", i);
    return js_push(c, b);
}

static void js_pop(js *c, size_t old) { c->path[old] = 0; }

/* An error at the current path + "/kw" (the schema's own pointer when kw is NULL). */
static int js_fail(js *c, int code, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int js_fail(js *c, int code, const char *kw, const char *fmt, ...)
{
    char param[256], msg[400];
    snprintf(param, sizeof param, "%s%s%s", c->path, kw ? "/" : "", kw ? kw : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lg_cfail(c->b, code, param, "%s", msg);
}

/* ---- literal JSON text ------------------------------------------------------------------- */

/* A JSON string encoded as our string grammar writes it (the escapes llguidance's
 * accepts: \" \\ \b \f \n \r \t, \u00xx for other controls and DEL). */
static void js_put_string(lg_strbuf *b, const char *s, size_t n)
{
    lg_strbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': lg_strbuf_puts(b, "\\\""); break;
        case '\\': lg_strbuf_puts(b, "\\\\"); break;
        case '\b': lg_strbuf_puts(b, "\\b"); break;
        case '\f': lg_strbuf_puts(b, "\\f"); break;
        case '\n': lg_strbuf_puts(b, "\\n"); break;
        case '\r': lg_strbuf_puts(b, "\\r"); break;
        case '\t': lg_strbuf_puts(b, "\\t"); break;
        default:
            if (ch < 0x20 || ch == 0x7F)
                lg_strbuf_printf(b, "\\u%04x", ch);
            else
                lg_strbuf_put(b, (const char *)&ch, 1);
        }
    }
    lg_strbuf_puts(b, "\"");
}

static void js_dump(js *c, lg_strbuf *b, json_t *v)
{
    char num[64];
    switch (json_typeof(v)) {
    case JSON_NULL: lg_strbuf_puts(b, "null"); break;
    case JSON_TRUE: lg_strbuf_puts(b, "true"); break;
    case JSON_FALSE: lg_strbuf_puts(b, "false"); break;
    case JSON_INTEGER: lg_strbuf_printf(b, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL:
        lg_num_to_str(json_real_value(v), num, sizeof num);
        lg_strbuf_puts(b, num);
        break;
    case JSON_STRING: js_put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY: {
        lg_strbuf_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                lg_strbuf_puts(b, c->sep_item);
            js_dump(c, b, json_array_get(v, i));
        }
        lg_strbuf_puts(b, "]");
        break;
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        lg_strbuf_puts(b, "{");
        json_object_foreach(v, k, x) {
            if (!first)
                lg_strbuf_puts(b, c->sep_item);
            first = false;
            js_put_string(b, k, strlen(k));
            lg_strbuf_puts(b, c->sep_key);
            js_dump(c, b, x);
        }
        lg_strbuf_puts(b, "}");
        break;
    }
    }
}

/* ---- primitive fragments ------------------------------------------------------------------ */

static void js_lit(lg_nfa *a, int from, int to, const char *s) { lg_nfa_lit(a, from, to, s, strlen(s)); }

/* one character of a JSON string body, encoded */
static void js_char(lg_nfa *a, int from, int to)
{
    lg_nfa_range(a, from, to, 0x20, 0x21);
    lg_nfa_range(a, from, to, 0x23, 0x5B);
    lg_nfa_range(a, from, to, 0x5D, 0x7E);
    lg_rx_emit_cp_range(a, from, to, 0x80, 0x10FFFF);
    int bs = lg_nfa_node(a), u = lg_nfa_node(a), z1 = lg_nfa_node(a), z2 = lg_nfa_node(a), h7 = lg_nfa_node(a);
    if (h7 < 0)
        return;
    lg_nfa_range(a, from, bs, '\\', '\\');
    static const char esc[] = "\"\\bfnrt";
    for (const char *e = esc; *e; e++)
        lg_nfa_range(a, bs, to, (uint8_t)*e, (uint8_t)*e);
    lg_nfa_range(a, bs, u, 'u', 'u');
    lg_nfa_range(a, u, z1, '0', '0');
    lg_nfa_range(a, z1, z2, '0', '0');
    int h01 = lg_nfa_node(a);
    if (h01 < 0)
        return;
    lg_nfa_range(a, z2, h01, '0', '1');
    lg_nfa_range(a, h01, to, '0', '9');
    lg_nfa_range(a, h01, to, 'a', 'f');
    lg_nfa_range(a, h01, to, 'A', 'F');
    lg_nfa_range(a, z2, h7, '7', '7');
    lg_nfa_range(a, h7, to, 'f', 'f');
    lg_nfa_range(a, h7, to, 'F', 'F');
}

/* "..." with min..max characters (max < 0: unbounded) */
static int js_string_plain(js *c, lg_nfa *a, int from, int to, long min, long max)
{
    int cur = lg_nfa_node(a);
    if (cur < 0)
        return -1;
    lg_nfa_range(a, from, cur, '"', '"');
    for (long i = 0; i < min; i++) {
        int nx = lg_nfa_node(a);
        if (nx < 0)
            return -1;
        js_char(a, cur, nx);
        cur = nx;
    }
    int end = lg_nfa_node(a);
    if (end < 0)
        return -1;
    if (max < 0) {
        int back = lg_nfa_node(a);
        if (back < 0)
            return -1;
        js_char(a, cur, back);
        lg_nfa_eps(a, back, cur);
        lg_nfa_eps(a, cur, end);
    } else {
        for (long i = min; i < max; i++) {
            lg_nfa_eps(a, cur, end);
            int nx = lg_nfa_node(a);
            if (nx < 0)
                return -1;
            js_char(a, cur, nx);
            cur = nx;
        }
        lg_nfa_eps(a, cur, end);
    }
    lg_nfa_range(a, end, to, '"', '"');
    return c->b->failed ? -1 : 0;
}

static const char JS_INT_RX[] = "-?(?:0|[1-9][0-9]*)";
static const char JS_NUM_RX[] = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?";

/* The generic value rule: any JSON value, recursive through calls. */
static int js_any_rule(js *c)
{
    if (c->any_rule >= 0)
        return c->any_rule;
    int r = lg_cgb_rule(c->g, "json_value");
    if (r < 0)
        return -1;
    c->any_rule = r;
    lg_nfa *a = lg_cgb_nfa(c->g, r);
    int end = lg_nfa_node(a);
    if (end < 0)
        return -1;
    a->final[end] = 1;
    int s = a->start;
    js_lit(a, s, end, "null");
    js_lit(a, s, end, "true");
    js_lit(a, s, end, "false");
    js_string_plain(c, a, s, end, 0, -1);
    lg_rx_emit(JS_NUM_RX, strlen(JS_NUM_RX), 0, a, s, end, "", 8);
    /* array: [ (v (, v)*)? ] */
    int ao = lg_nfa_node(a), av = lg_nfa_node(a);
    if (av < 0)
        return -1;
    js_lit(a, s, ao, "[");
    js_lit(a, ao, end, "]");
    lg_nfa_call(a, ao, av, r);
    int ac = lg_nfa_node(a);
    if (ac < 0)
        return -1;
    js_lit(a, av, ac, c->sep_item);
    lg_nfa_call(a, ac, av, r);
    js_lit(a, av, end, "]");
    /* object: { (k: v (, k: v)*)? } */
    int oo = lg_nfa_node(a), ok = lg_nfa_node(a), oc = lg_nfa_node(a), ov = lg_nfa_node(a), on = lg_nfa_node(a);
    if (on < 0)
        return -1;
    js_lit(a, s, oo, "{");
    js_lit(a, oo, end, "}");
    js_string_plain(c, a, oo, ok, 0, -1);
    js_lit(a, ok, oc, c->sep_key);
    lg_nfa_call(a, oc, ov, r);
    js_lit(a, ov, end, "}");
    js_lit(a, ov, on, c->sep_item);
    js_string_plain(c, a, on, ok, 0, -1);
    return c->b->failed ? -1 : r;
}

/* A rule compiled later from the worklist (memo by path). */
static int js_deferred_rule(js *c, json_t *s, const char *path, const char *kind)
{
    intptr_t hit = (intptr_t)lg_strmap_get(c->memo, path);
    if (hit)
        return c->work[hit - 1].rule;
    if (c->nwork == c->capwork) {
        int nc = c->capwork ? c->capwork * 2 : 16;
        js_work *w = realloc(c->work, (size_t)nc * sizeof *w);
        if (!w)
            return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        c->work = w;
        c->capwork = nc;
    }
    char name[300];
    snprintf(name, sizeof name, "%s%s", path[0] ? path : "#", kind); /* display only */
    int r = lg_cgb_rule(c->g, name);
    if (r < 0)
        return -1;
    char *p = strdup(path);
    if (!p)
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    c->work[c->nwork++] = (js_work){s, p, r, -1};
    if (lg_strmap_put(c->memo, path, (void *)(intptr_t)c->nwork))
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    return r;
}

/* ---- $ref ---------------------------------------------------------------------------------- */

static int js_hex(int ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* Resolves "#..." against the document; the canonical pointer goes to out. */
static json_t *js_resolve(js *c, const char *ref, char *out, size_t cap)
{
    if (ref[0] != '#')
        return NULL;
    json_t *cur = c->doc;
    const char *p = ref + 1;
    out[0] = 0;
    size_t on = 0;
    if (*p && *p != '/')
        return NULL; /* anchors ("#foo") are not supported */
    while (*p == '/') {
        p++;
        char seg[512];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            int ch = (unsigned char)*p++;
            if (ch == '%' && js_hex(p[0]) >= 0 && js_hex(p[1]) >= 0) {
                ch = js_hex(p[0]) * 16 + js_hex(p[1]);
                p += 2;
            }
            if (ch == '~' && (*p == '0' || *p == '1')) {
                ch = *p++ == '0' ? '~' : '/';
            }
            seg[n++] = (char)ch;
        }
        seg[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);
            cur = (*seg && !*e && i >= 0) ? json_array_get(cur, (size_t)i) : NULL;
        } else
            cur = NULL;
        if (!cur)
            return NULL;
        if (on + 2 * n + 2 > cap)
            return NULL; /* a pointer longer than the buffer: never truncated */
        out[on++] = '/';
        for (size_t j = 0; j < n; j++) {
            if (seg[j] == '~' || seg[j] == '/') {
                out[on++] = '~';
                out[on++] = seg[j] == '~' ? '0' : '1';
            } else
                out[on++] = seg[j];
        }
        out[on] = 0;
    }
    return cur;
}

/* ---- keywords ---------------------------------------------------------------------------------- */

static const char *const JS_UNSUPPORTED[] = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
    "dependentSchemas", "dependencies", "minProperties", "maxProperties", "uniqueItems", "contains",
    "minContains", "maxContains", "prefixItems", "additionalItems", "unevaluatedProperties",
    "unevaluatedItems", "multipleOf", "$dynamicRef", "$recursiveRef", "contentSchema", NULL};

/* keywords that constrain a value (besides anyOf/oneOf/allOf/$ref/type/enum/const) */
static const char *const JS_VALIDATION[] = {
    "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "pattern",
    "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "type", "enum", "const", NULL};

static bool js_in(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k))
            return true;
    return false;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };

static int js_type_bit(const char *t)
{
    static const struct {
        const char *n;
        int b;
    } T[] = {{"null", T_NULL}, {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
             {"string", T_STR}, {"number", T_NUM}, {"integer", T_INT}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(T[i].n, t))
            return T[i].b;
    return 0;
}

/* the types a schema allows by its "type" keyword (T_ALL if none); -1 on error */
static int js_types(js *c, json_t *s)
{
    json_t *t = json_object_get(s, "type");
    if (!t)
        return T_ALL;
    int m = 0;
    if (json_is_string(t)) {
        m = js_type_bit(json_string_value(t));
        if (!m)
            return js_fail(c, LG_CERR_INVALID, "type", "unknown type '%s'", json_string_value(t));
    } else if (json_is_array(t)) {
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) {
            int bit = json_is_string(x) ? js_type_bit(json_string_value(x)) : 0;
            if (!bit)
                return js_fail(c, LG_CERR_INVALID, "type", "bad entry in type%s", "");
            m |= bit;
        }
    } else
        return js_fail(c, LG_CERR_INVALID, "type", "type must be a string or an array%s", "");
    if (m & T_NUM)
        m &= ~T_INT;
    return m;
}

/* the JSON type bit of a value (integral reals are integers too) */
static int js_value_type(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJ;
    case JSON_ARRAY: return T_ARR;
    case JSON_STRING: return T_STR;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: {
        double d = json_real_value(v);
        return d == floor(d) ? (T_INT | T_NUM) : T_NUM;
    }
    }
    return 0;
}

static bool js_get_num(json_t *s, const char *k, double *out)
{
    json_t *v = json_object_get(s, k);
    if (!v || !json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static int js_get_count(js *c, json_t *s, const char *k, long *out)
{
    json_t *v = json_object_get(s, k);
    if (!v)
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (d < 0 || d != floor(d))
        return js_fail(c, LG_CERR_INVALID, k, "%s must be a non-negative integer", k);
    if (d > 1e7)
        return js_fail(c, LG_CERR_LIMIT, k, "%s is too large", k);
    *out = (long)d;
    return 1;
}

/* ---- enum / const ------------------------------------------------------------------------------ */

static int js_literals(js *c, lg_nfa *a, int from, int to, json_t *s, int types)
{
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const char *kw = cst ? "const" : "enum";
    if (en && !json_is_array(en))
        return js_fail(c, LG_CERR_INVALID, "enum", "enum must be an array%s", "");
    size_t n = cst ? 1 : json_array_size(en);
    if (n > 100000)
        return js_fail(c, LG_CERR_LIMIT, kw, "enum has too many values%s", "");
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = cst ? cst : json_array_get(en, i);
        if (!(js_value_type(v) & types))
            continue;
        if (cst && en) {
            /* both: the const must be among the enum values */
            bool found = false;
            for (size_t j = 0; j < json_array_size(en) && !found; j++)
                found = json_equal(json_array_get(en, j), v);
            if (!found)
                continue;
        }
        lg_strbuf b = {0};
        js_dump(c, &b, v);
        if (b.oom) {
            free(b.p);
            return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
        }
        lg_nfa_lit(a, from, to, b.p, b.len);
        free(b.p);
        kept++;
        if (lg_cbudget_tick(c->b))
            return -1;
    }
    if (!kept)
        return js_fail(c, LG_CERR_UNSATISFIABLE, kw, "no %s value satisfies the schema", kw);
    return c->b->failed ? -1 : 0;
}

/* ---- strings ---------------------------------------------------------------------------------- */

static int js_string(js *c, lg_nfa *a, int from, int to, json_t *s)
{
    long min = 0, max = -1;
    if (js_get_count(c, s, "minLength", &min) < 0 || js_get_count(c, s, "maxLength", &max) < 0)
        return -1;
    if (max >= 0 && min > max)
        return js_fail(c, LG_CERR_UNSATISFIABLE, NULL, "minLength exceeds maxLength%s", "");
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat))
        return js_fail(c, LG_CERR_INVALID, "pattern", "pattern must be a string%s", "");
    if (fmt && !json_is_string(fmt))
        return js_fail(c, LG_CERR_INVALID, "format", "format must be a string%s", "");
    const char *frx = NULL;
    if (fmt) {
        frx = lg_json_format_regex(json_string_value(fmt));
        if (!frx)
            return js_fail(c, LG_CERR_UNSUPPORTED, "format", "string format '%s' is not supported",
                           json_string_value(fmt));
    }
    if (!pat && !frx)
        return js_string_plain(c, a, from, to, min, max);

    /* decoded-text DFA: pattern AND format AND length, then quoted */
    lg_dfa d = {0}, t = {0}, q = {0};
    char param[300];
    int rc = -1, depth = c->lim->max_depth;
    if (pat) {
        snprintf(param, sizeof param, "%s/pattern", c->path);
        if (lg_rx_dfa(json_string_value(pat), json_string_length(pat), LG_RX_SEARCH, c->b, &d, param, depth))
            goto out;
    }
    if (frx) {
        snprintf(param, sizeof param, "%s/format", c->path);
        lg_dfa f = {0};
        if (lg_rx_dfa(frx, strlen(frx), 0, c->b, &f, param, depth))
            goto out;
        if (pat) {
            int r2 = lg_dfa_and(&d, &f, false, &t, c->b);
            lg_dfa_free(&f);
            lg_dfa_free(&d);
            if (r2)
                goto out;
            d = t;
            memset(&t, 0, sizeof t);
        } else
            d = f;
    }
    if (min > 0 || max >= 0) {
        char lrx[64];
        if (max >= 0)
            snprintf(lrx, sizeof lrx, "(?s:.){%ld,%ld}", min, max);
        else
            snprintf(lrx, sizeof lrx, "(?s:.){%ld,}", min);
        lg_dfa l = {0};
        if (lg_rx_dfa(lrx, strlen(lrx), 0, c->b, &l, "", depth))
            goto out;
        int r2 = lg_dfa_and(&d, &l, false, &t, c->b);
        lg_dfa_free(&l);
        lg_dfa_free(&d);
        if (r2)
            goto out;
        d = t;
        memset(&t, 0, sizeof t);
    }
    if (lg_dfa_empty(&d)) {
        js_fail(c, LG_CERR_UNSATISFIABLE, pat ? "pattern" : "format", "no string satisfies the pattern, format and lengths%s", "");
        goto out;
    }
    if (lg_dfa_json_quote(&d, &q, c->b))
        goto out;
    int o = lg_nfa_node(a), e = lg_nfa_node(a);
    if (e < 0)
        goto out;
    lg_nfa_range(a, from, o, '"', '"');
    if (lg_dfa_emit(&q, a, o, e))
        goto out;
    lg_nfa_range(a, e, to, '"', '"');
    rc = c->b->failed ? -1 : 0;
out:
    lg_dfa_free(&d);
    lg_dfa_free(&t);
    lg_dfa_free(&q);
    return c->b->failed ? -1 : rc;
}

/* ---- numbers ---------------------------------------------------------------------------------- */

static int js_number(js *c, lg_nfa *a, int from, int to, json_t *s, bool integer)
{
    double lo = 0, hi = 0, v;
    bool has_lo = false, has_hi = false, lo_x = false, hi_x = false;
    if (js_get_num(s, "minimum", &v))
        has_lo = true, lo = v;
    if (js_get_num(s, "maximum", &v))
        has_hi = true, hi = v;
    json_t *xmin = json_object_get(s, "exclusiveMinimum"), *xmax = json_object_get(s, "exclusiveMaximum");
    /* draft 4: a boolean modifying minimum / maximum; later drafts: a number */
    if (json_is_boolean(xmin))
        lo_x = has_lo && json_is_true(xmin);
    else if (json_is_number(xmin)) {
        v = json_number_value(xmin);
        if (!has_lo || v >= lo)
            has_lo = true, lo = v, lo_x = true;
    }
    if (json_is_boolean(xmax))
        hi_x = has_hi && json_is_true(xmax);
    else if (json_is_number(xmax)) {
        v = json_number_value(xmax);
        if (!has_hi || v <= hi)
            has_hi = true, hi = v, hi_x = true;
    }
    static const char *const nkw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *x = json_object_get(s, nkw[i]);
        if (x && !json_is_number(x) && !(i >= 2 && json_is_boolean(x)))
            return js_fail(c, LG_CERR_INVALID, nkw[i], "%s must be a number", nkw[i]);
    }
    const char *rx = integer ? JS_INT_RX : JS_NUM_RX;
    char *owned = NULL;
    if (has_lo || has_hi) {
        const char *why;
        owned = lg_rx_number_range(integer, has_lo, lo, lo_x, has_hi, hi, hi_x, &why);
        if (!owned)
            return js_fail(c, strcmp(why, "out of memory") ? LG_CERR_UNSATISFIABLE : LG_CERR_INTERNAL, NULL, "%s", why);
        rx = owned;
    }
    int rc = lg_rx_emit(rx, strlen(rx), 0, a, from, to, c->path, 64);
    free(owned);
    return rc;
}

/* ---- arrays ----------------------------------------------------------------------------------- */

static int js_array(js *c, lg_nfa *a, int from, int to, json_t *s)
{
    long min = 0, max = -1;
    if (js_get_count(c, s, "minItems", &min) < 0 || js_get_count(c, s, "maxItems", &max) < 0)
        return -1;
    if (max >= 0 && min > max)
        return js_fail(c, LG_CERR_UNSATISFIABLE, NULL, "minItems exceeds maxItems%s", "");
    json_t *items = json_object_get(s, "items");
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return js_fail(c, LG_CERR_UNSUPPORTED, "items", "items must be a schema (tuple forms are not supported)%s", "");
    int item;
    if (json_is_false(items)) {
        if (min > 0)
            return js_fail(c, LG_CERR_UNSATISFIABLE, "items", "items is false but minItems > 0%s", "");
        max = 0;
        item = -1;
    } else if (!items || json_is_true(items) || (json_is_object(items) && json_object_size(items) == 0))
        item = js_any_rule(c);
    else {
        size_t old = js_push(c, "items");
        item = js_deferred_rule(c, items, c->path, "");
        js_pop(c, old);
    }
    if (c->b->failed)
        return -1;
    int open = lg_nfa_node(a);
    if (open < 0)
        return -1;
    js_lit(a, from, open, "[");
    if (min == 0)
        js_lit(a, open, to, "]");
    if (max == 0)
        return c->b->failed ? -1 : 0;
    /* e_k: after k items */
    int cur = lg_nfa_node(a);
    if (cur < 0)
        return -1;
    lg_nfa_call(a, open, cur, item);
    long k = 1;
    long fixed = max >= 0 ? max : (min > 1 ? min : 1);
    for (; k < fixed; k++) {
        if (k >= min)
            js_lit(a, cur, to, "]");
        int sep = lg_nfa_node(a), nx = lg_nfa_node(a);
        if (nx < 0)
            return -1;
        js_lit(a, cur, sep, c->sep_item);
        lg_nfa_call(a, sep, nx, item);
        cur = nx;
    }
    js_lit(a, cur, to, "]");
    if (max < 0) {
        int sep = lg_nfa_node(a);
        if (sep < 0)
            return -1;
        js_lit(a, cur, sep, c->sep_item);
        lg_nfa_call(a, sep, cur, item);
    }
    return c->b->failed ? -1 : 0;
}

/* ---- objects ----------------------------------------------------------------------------------- */

/* A DFA of the quoted keys allowed for additional properties: any string but
 * the listed names. */
static int js_extra_keys(js *c, json_t *props, json_t *extra_req, lg_dfa *out)
{
    lg_nfa n;
    lg_nfa_init(&n, c->b);
    int end = lg_nfa_node(&n);
    lg_dfa any = {0}, names = {0};
    int rc = -1;
    if (end < 0)
        goto out;
    n.final[end] = 1;
    js_string_plain(c, &n, n.start, end, 0, -1);
    if (lg_nfa_determinize(&n, &any))
        goto out;
    lg_nfa_clear(&n);
    size_t nn = json_object_size(props) + json_array_size(extra_req);
    if (nn == 0) {
        *out = any;
        memset(&any, 0, sizeof any);
        rc = 0;
        goto out;
    }
    lg_nfa_init(&n, c->b);
    end = lg_nfa_node(&n);
    if (end < 0)
        goto out;
    n.final[end] = 1;
    const char *k;
    json_t *x;
    json_object_foreach(props, k, x) {
        lg_strbuf b = {0};
        js_put_string(&b, k, strlen(k));
        lg_nfa_lit(&n, n.start, end, b.p ? b.p : "", b.len);
        free(b.p);
    }
    size_t i;
    json_array_foreach(extra_req, i, x) {
        lg_strbuf b = {0};
        js_put_string(&b, json_string_value(x), json_string_length(x));
        lg_nfa_lit(&n, n.start, end, b.p ? b.p : "", b.len);
        free(b.p);
    }
    if (lg_nfa_determinize(&n, &names))
        goto out;
    rc = lg_dfa_and(&any, &names, true, out, c->b);
out:
    lg_nfa_clear(&n);
    lg_dfa_free(&any);
    lg_dfa_free(&names);
    return c->b->failed ? -1 : rc;
}

static bool js_is_required(json_t *req, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x)
        if (json_is_string(x) && !strcmp(json_string_value(x), name))
            return true;
    return false;
}

/* key + separator + value, from the junction node k to `to` */
static int js_member(js *c, lg_nfa *a, int e, int s, int to, const char *name, size_t nlen, json_t *vs,
                     int value_rule, int depth)
{
    lg_strbuf key = {0};
    js_put_string(&key, name, nlen);
    lg_strbuf_puts(&key, c->sep_key);
    if (key.oom) {
        free(key.p);
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    }
    int k = lg_nfa_node(a);
    if (k < 0) {
        free(key.p);
        return -1;
    }
    if (e >= 0)
        lg_nfa_lit(a, e, k, key.p, key.len);
    if (s >= 0) {
        int sep = lg_nfa_node(a);
        if (sep < 0) {
            free(key.p);
            return -1;
        }
        js_lit(a, s, sep, c->sep_item);
        lg_nfa_lit(a, sep, k, key.p, key.len);
    }
    free(key.p);
    if (value_rule >= 0) {
        lg_nfa_call(a, k, to, value_rule);
        return c->b->failed ? -1 : 0;
    }
    return js_emit(c, a, k, to, vs, depth);
}

static int js_object(js *c, lg_nfa *a, int from, int to, json_t *s, int depth)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return js_fail(c, LG_CERR_INVALID, "properties", "properties must be an object%s", "");
    if (req && !json_is_array(req))
        return js_fail(c, LG_CERR_INVALID, "required", "required must be an array%s", "");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return js_fail(c, LG_CERR_INVALID, "additionalProperties", "additionalProperties must be a schema%s", "");
    bool extra_ok = !json_is_false(addl);
    bool extra_any = !addl || json_is_true(addl) || json_object_size(addl) == 0;
    int rc = -1;
    /* required names that are not properties: members of the additional schema */
    json_t *extra_req = json_array();
    if (!extra_req)
        return lg_cfail(c->b, LG_CERR_INTERNAL, "", "out of memory");
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x) {
        if (!json_is_string(x)) {
            json_decref(extra_req);
            return js_fail(c, LG_CERR_INVALID, "required", "required must list strings%s", "");
        }
        if (!props || !json_object_get(props, json_string_value(x))) {
            if (!extra_ok) {
                json_decref(extra_req);
                return js_fail(c, LG_CERR_UNSATISFIABLE, "required",
                               "required property '%s' is not in properties and additionalProperties is false",
                               json_string_value(x));
            }
            json_array_append(extra_req, x);
        }
    }
    int open = lg_nfa_node(a);
    if (open < 0)
        goto out;
    js_lit(a, from, open, "{");
    int e = open, sn = -1; /* the two tracks: nothing emitted yet / something */
    const char *k;
    json_t *ps;
    size_t old = js_push(c, "properties");
    json_object_foreach(props, k, ps) {
        bool r = js_is_required(req, k);
        int s2 = lg_nfa_node(a);
        if (s2 < 0)
            goto out;
        size_t o2 = js_push(c, k);
        int vr = -1;
        if (json_is_true(ps) || (json_is_object(ps) && json_object_size(ps) == 0))
            vr = js_any_rule(c);
        if (json_is_false(ps)) {
            if (r) {
                js_fail(c, LG_CERR_UNSATISFIABLE, NULL, "required property '%s' has schema false", k);
                js_pop(c, o2);
                js_pop(c, old);
                goto out;
            }
            js_pop(c, o2);
            continue;
        }
        if (js_member(c, a, e, sn, s2, k, strlen(k), ps, vr, depth + 1)) {
            js_pop(c, o2);
            goto out;
        }
        js_pop(c, o2);
        if (!r) {
            int e2 = lg_nfa_node(a);
            if (e2 < 0)
                goto out;
            lg_nfa_eps(a, e, e2);
            if (sn >= 0)
                lg_nfa_eps(a, sn, s2);
            e = e2;
        } else
            e = -1;
        sn = s2;
        if (e < 0) {
            /* from now on only the "something" track is alive */
        }
    }
    js_pop(c, old);
    /* required names outside properties, in the order listed */
    json_array_foreach(extra_req, i, x) {
        int s2 = lg_nfa_node(a);
        if (s2 < 0)
            goto out;
        size_t o2 = js_push(c, "additionalProperties");
        int vr = extra_any ? js_any_rule(c) : -1;
        int r2 = js_member(c, a, e, sn, s2, json_string_value(x), json_string_length(x), addl, vr, depth + 1);
        js_pop(c, o2);
        if (r2)
            goto out;
        e = -1;
        sn = s2;
    }
    if (extra_ok) {
        lg_dfa keys = {0};
        if (js_extra_keys(c, props, extra_req, &keys))
            goto out;
        int sadd = lg_nfa_node(a), j = lg_nfa_node(a), j2 = lg_nfa_node(a), sep = lg_nfa_node(a);
        if (sep < 0 || lg_dfa_empty(&keys)) {
            lg_dfa_free(&keys);
            goto out;
        }
        if (e >= 0)
            lg_dfa_emit(&keys, a, e, j);
        if (sn >= 0)
            lg_nfa_eps(a, sn, sadd);
        js_lit(a, sadd, sep, c->sep_item);
        lg_dfa_emit(&keys, a, sep, j);
        lg_dfa_free(&keys);
        js_lit(a, j, j2, c->sep_key);
        size_t o2 = js_push(c, "additionalProperties");
        int r2;
        if (extra_any)
            lg_nfa_call(a, j2, sadd, js_any_rule(c)), r2 = c->b->failed ? -1 : 0;
        else
            r2 = js_emit(c, a, j2, sadd, addl, depth + 1);
        js_pop(c, o2);
        if (r2)
            goto out;
        sn = sadd;
    }
    if (e >= 0)
        js_lit(a, e, to, "}");
    if (sn >= 0)
        js_lit(a, sn, to, "}");
    rc = c->b->failed ? -1 : 0;
out:
    json_decref(extra_req);
    return c->b->failed ? -1 : rc;
}

/* ---- the dispatcher ------------------------------------------------------------------------------ */

/* oneOf is anyOf when the branches cannot overlap: each names its types and
 * no type is in two branches (integer counts as number). */
static bool js_oneof_exact(json_t *arr)
{
    int seen = 0;
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        json_t *t = json_is_object(x) ? json_object_get(x, "type") : NULL;
        int m = 0;
        if (json_is_string(t))
            m = js_type_bit(json_string_value(t));
        else if (json_is_array(t)) {
            size_t j;
            json_t *y;
            json_array_foreach(t, j, y) {
                int bit = json_is_string(y) ? js_type_bit(json_string_value(y)) : 0;
                if (!bit)
                    return false;
                m |= bit;
            }
        }
        if (!m)
            return false;
        if (m & (T_INT | T_NUM))
            m |= T_INT | T_NUM;
        if (seen & m)
            return false;
        seen |= m;
    }
    return true;
}

static int js_emit(js *c, lg_nfa *a, int from, int to, json_t *s, int depth)
{
    if (c->b->failed)
        return -1;
    if (depth > c->lim->max_depth)
        return js_fail(c, LG_CERR_LIMIT, NULL, "schema nests deeper than max_depth (%d)", c->lim->max_depth);
    if (lg_cbudget_tick(c->b))
        return -1;
    if (json_is_true(s)) {
        lg_nfa_call(a, from, to, js_any_rule(c));
        return c->b->failed ? -1 : 0;
    }
    if (json_is_false(s))
        return 0; /* no string: the branch is dead */
    if (!json_is_object(s))
        return js_fail(c, LG_CERR_INVALID, NULL, "a schema must be an object or a boolean%s", "");
    const char *k;
    json_t *v;
    bool validation = false;
    json_object_foreach(s, k, v) {
        if (js_in(JS_UNSUPPORTED, k)) {
            if (!strcmp(k, "uniqueItems") && json_is_false(v))
                continue;
            if ((!strcmp(k, "minProperties") || !strcmp(k, "minContains")) && json_is_number(v) &&
                json_number_value(v) == 0)
                continue;
            return js_fail(c, LG_CERR_UNSUPPORTED, k, "keyword '%s' is not supported", k);
        }
        if (js_in(JS_VALIDATION, k))
            validation = true;
    }
    /* $ref */
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref))
            return js_fail(c, LG_CERR_INVALID, "$ref", "$ref must be a string%s", "");
        if (validation || json_object_get(s, "anyOf") || json_object_get(s, "oneOf") || json_object_get(s, "allOf"))
            return js_fail(c, LG_CERR_UNSUPPORTED, "$ref", "$ref next to other validation keywords is not supported%s", "");
        char target[8192];
        json_t *t = js_resolve(c, json_string_value(ref), target, sizeof target);
        if (!t) {
            if (json_string_value(ref)[0] != '#')
                return js_fail(c, LG_CERR_UNSUPPORTED, "$ref", "only local references (#/...) are supported: '%s'",
                               json_string_value(ref));
            return js_fail(c, LG_CERR_INVALID, "$ref", "$ref '%s' does not resolve", json_string_value(ref));
        }
        /* a chain of bare $refs that comes back to itself matches nothing */
        {
            json_t *t2 = t;
            char hop[8192] = "";
            /* bounded: a longer cycle is refused later as matching nothing */
            for (int k = 0; k < 64 && json_is_object(t2) && !lg_strmap_get(c->memo, hop); k++) {
                json_t *r2 = json_object_get(t2, "$ref");
                if (!json_is_string(r2))
                    break;
                t2 = js_resolve(c, json_string_value(r2), hop, sizeof hop);
                if (t2 == t || (t2 && t2 == s)) {
                    char param[8300];
                    snprintf(param, sizeof param, "%s/$ref", target);
                    return lg_cfail(c->b, LG_CERR_INVALID, param, "$ref cycle through '%s' matches nothing", target);
                }
            }
        }
        intptr_t hit = (intptr_t)lg_strmap_get(c->memo, target);
        int r = hit ? c->work[hit - 1].rule : -1;
        if (r < 0) {
            if (++c->n_refs > c->lim->max_ref_expansions)
                return js_fail(c, LG_CERR_LIMIT, "$ref", "more than max_ref_expansions (%d) $ref targets", c->lim->max_ref_expansions);
            r = js_deferred_rule(c, t, target, "");
        }
        if (r < 0)
            return -1;
        lg_nfa_call(a, from, to, r);
        return c->b->failed ? -1 : 0;
    }
    /* anyOf / oneOf / allOf */
    const char *comb[] = {"anyOf", "oneOf", "allOf"};
    for (int ci = 0; ci < 3; ci++) {
        json_t *arr = json_object_get(s, comb[ci]);
        if (!arr)
            continue;
        if (!json_is_array(arr) || json_array_size(arr) == 0)
            return js_fail(c, LG_CERR_INVALID, comb[ci], "%s must be a non-empty array", comb[ci]);
        if (validation)
            return js_fail(c, LG_CERR_UNSUPPORTED, comb[ci], "%s next to other validation keywords is not supported",
                           comb[ci]);
        for (int cj = ci + 1; cj < 3; cj++)
            if (json_object_get(s, comb[cj]))
                return js_fail(c, LG_CERR_UNSUPPORTED, comb[cj], "%s next to another combinator is not supported",
                               comb[cj]);
        if (ci == 1 && !js_oneof_exact(arr))
            return js_fail(c, LG_CERR_UNSUPPORTED, "oneOf",
                           "oneOf is only supported when its branches have disjoint types%s", "");
        if (ci == 2 && json_array_size(arr) != 1)
            return js_fail(c, LG_CERR_UNSUPPORTED, "allOf", "allOf is only supported with one schema%s", "");
        size_t old = js_push(c, comb[ci]);
        size_t i;
        json_t *x;
        json_array_foreach(arr, i, x) {
            size_t o2 = js_push_i(c, i);
            int r = js_emit(c, a, from, to, x, depth + 1);
            js_pop(c, o2);
            if (r) {
                js_pop(c, old);
                return -1;
            }
        }
        js_pop(c, old);
        return 0;
    }
    int types = js_types(c, s);
    if (types < 0)
        return -1;
    if (json_object_get(s, "const") || json_object_get(s, "enum"))
        return js_literals(c, a, from, to, s, types);
    if (types & T_NULL)
        js_lit(a, from, to, "null");
    if (types & T_BOOL) {
        js_lit(a, from, to, "true");
        js_lit(a, from, to, "false");
    }
    if ((types & T_STR) && js_string(c, a, from, to, s))
        return -1;
    if ((types & (T_NUM | T_INT)) && js_number(c, a, from, to, s, !(types & T_NUM)))
        return -1;
    if ((types & T_ARR) && js_array(c, a, from, to, s))
        return -1;
    if ((types & T_OBJ) && js_object(c, a, from, to, s, depth))
        return -1;
    return c->b->failed ? -1 : 0;
}

/* JSON mode: an object of any members. */
static int js_any_object(js *c, lg_nfa *a, int from, int to)
{
    int r = js_any_rule(c);
    if (r < 0)
        return -1;
    int oo = lg_nfa_node(a), ok = lg_nfa_node(a), oc = lg_nfa_node(a), ov = lg_nfa_node(a), on = lg_nfa_node(a);
    if (on < 0)
        return -1;
    js_lit(a, from, oo, "{");
    js_lit(a, oo, to, "}");
    js_string_plain(c, a, oo, ok, 0, -1);
    js_lit(a, ok, oc, c->sep_key);
    lg_nfa_call(a, oc, ov, r);
    js_lit(a, ov, to, "}");
    js_lit(a, ov, on, c->sep_item);
    js_string_plain(c, a, on, ok, 0, -1);
    return c->b->failed ? -1 : 0;
}

int lg_cjson_compile(lg_cgb *g, lg_ckind kind, const char *src, size_t len, lg_cws ws, const lg_climits *lim,
                     int *root)
{
    js c = {.g = g, .b = g->b, .lim = lim, .any_rule = -1};
    c.sep_item = ws == LG_CWS_SPACED ? ", " : ",";
    c.sep_key = ws == LG_CWS_SPACED ? ": " : ":";
    int rc = -1;
    int r = lg_cgb_rule(g, "start");
    if (r < 0)
        return -1;
    *root = r;
    lg_nfa *a = lg_cgb_nfa(g, r);
    int end = lg_nfa_node(a);
    if (end < 0)
        return -1;
    a->final[end] = 1;
    if (kind == LG_CK_JSON_OBJECT)
        return js_any_object(&c, a, a->start, end);
    if (kind == LG_CK_JSON_VALUE) {
        lg_nfa_call(a, a->start, end, js_any_rule(&c));
        return g->b->failed ? -1 : 0;
    }
    c.memo = lg_strmap_new();
    if (!c.memo)
        return lg_cfail(g->b, LG_CERR_INTERNAL, "", "out of memory");
    json_error_t je;
    c.doc = json_loadb(src, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!c.doc) {
        char param[64];
        snprintf(param, sizeof param, "offset %d", je.position);
        lg_strmap_free(c.memo);
        if (strstr(je.text, "maximum parsing depth"))
            return lg_cfail(g->b, LG_CERR_LIMIT, param, "schema nests deeper than the JSON parser allows: %s", je.text);
        return lg_cfail(g->b, LG_CERR_INVALID, param, "schema is not valid JSON: %s", je.text);
    }
    if (!json_is_object(c.doc) && !json_is_boolean(c.doc)) {
        lg_cfail(g->b, LG_CERR_INVALID, "", "a schema must be an object or a boolean");
        goto out;
    }
    if (js_emit(&c, a, a->start, end, c.doc, 0))
        goto out;
    /* the worklist: $ref targets and array items, each into its own rule */
    while (c.done < c.nwork) {
        js_work w = c.work[c.done++];
        lg_nfa *ra = lg_cgb_nfa(g, w.rule);
        int re = lg_nfa_node(ra);
        if (re < 0)
            goto out;
        ra->final[re] = 1;
        snprintf(c.path, sizeof c.path, "%s", w.path);
        if (js_emit(&c, ra, ra->start, re, w.schema, 0))
            goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < c.nwork; i++)
        free(c.work[i].path);
    free(c.work);
    lg_strmap_free(c.memo);
    json_decref(c.doc);
    return g->b->failed ? -1 : rc;
}
