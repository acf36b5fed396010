/*
 * jinja_value.c — the values a Jinja template computes with, with Python's
 * semantics, and the arena they live in.
 *
 * Templates were written against jinja2, i.e. against Python objects: what
 * `{{ x }}` prints is Python's str(x) (True, None, 1.0, ['a', 1]), `|tojson`
 * is json.dumps, == compares lists and dicts deeply and 1 == 1.0 == True.
 * This file reproduces exactly those: str(), repr() (strings quoted and
 * escaped as Python does, non-printable characters by their Unicode
 * category from utf8proc), json.dumps with its separators, indent,
 * sort_keys and ensure_ascii, and repr(float) (the shortest text that reads
 * back to the same double).
 *
 * Memory: one arena per parse or render, a list of malloc'd chunks; the
 * arena's cap bounds what a template can allocate, and passing it fails the
 * render (longjmp to the entry point), never the process.
 */
#include "engine/model/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

/* ---- arena ------------------------------------------------------------------ */

struct jchunk {
    jchunk *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

void ja_init(jarena *a, size_t cap, lg_err *err)
{
    a->head = NULL;
    a->total = 0;
    a->cap = cap;
    a->err = err;
}

void ja_free(jarena *a)
{
    for (jchunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

_Noreturn void jfail(jarena *a, const char *fmt, ...)
{
    if (a->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->err->msg, sizeof a->err->msg, fmt, ap);
        va_end(ap);
    }
    longjmp(a->jb, 1);
}

void *ja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (n > a->cap || a->total + cap + sizeof(jchunk) > a->cap)
            jfail(a, "chat template used more than %zu bytes of memory", a->cap);
        c = malloc(sizeof(jchunk) + cap);
        if (!c)
            jfail(a, "out of memory rendering chat template");
        c->cap = cap;
        c->used = 0;
        a->total += cap + sizeof(jchunk);
        /* a big block goes behind the head so the head's free space stays usable */
        if (a->head && n > 65536) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n)
{
    char *p = ja_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jb_put(jarena *a, jbuf *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (b->max && (n > b->max || b->n > b->max - n))
        jfail(a, "chat template output is longer than %zu bytes", b->max);
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 2)
                jfail(a, "chat template output too long");
            cap *= 2;
        }
        char *p = ja_alloc(a, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_printf(jarena *a, jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0)
        jb_put(a, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

int ju_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    int len = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 1;
    if (len == 1 || (size_t)len > n) {
        *cp = 0xfffd;
        return 1;
    }
    uint32_t c = s[0] & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        c = (c << 6) | (s[i] & 0x3f);
    }
    *cp = c;
    return len;
}

size_t ju_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += (size_t)ju_dec((const unsigned char *)s + i, n - i, &c);
        k++;
    }
    return k;
}

size_t ju_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0;
    while (cp > 0 && i < n) {
        uint32_t c;
        i += (size_t)ju_dec((const unsigned char *)s + i, n - i, &c);
        cp--;
    }
    return i;
}

void ju_enc(jarena *a, jbuf *b, uint32_t cp)
{
    char t[4];
    size_t k;
    if (cp < 0x80) {
        t[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        t[0] = (char)(0xf0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    jb_put(a, b, t, k);
}

bool ju_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* ---- lists and dicts ------------------------------------------------------------ */

jlist *jl_new(jarena *a, size_t cap)
{
    jlist *l = ja_alloc(a, sizeof *l);
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv))
            jfail(a, "list too long");
        l->v = ja_alloc(a, cap * sizeof(jv));
        l->cap = cap;
    }
    return l;
}

void jl_push(jarena *a, jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(jv))
            jfail(a, "list too long");
        jv *nv = ja_alloc(a, cap * sizeof(jv));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jdict *jd_new(jarena *a, size_t cap)
{
    jdict *d = ja_alloc(a, sizeof *d);
    if (cap) {
        d->k = ja_alloc(a, cap * sizeof(jv));
        d->v = ja_alloc(a, cap * sizeof(jv));
        d->cap = cap;
    }
    return d;
}

static bool key_eq(jv a, jv b)
{
    if (a.t == JT_STR && b.t == JT_STR)
        return a.n == b.n && (a.n == 0 || !memcmp(a.u.s, b.u.s, a.n));
    return jv_eq(a, b);
}

void jd_set(jarena *a, jdict *d, jv k, jv v)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(a, cap * sizeof(jv)), *nv = ja_alloc(a, cap * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

bool jd_get(const jdict *d, jv k, jv *out)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k)) {
            *out = d->v[i];
            return true;
        }
    return false;
}

bool jd_gets(const jdict *d, const char *k, jv *out) { return jd_get(d, jv_cstr(k), out); }

/* ---- Python semantics ---------------------------------------------------------- */

const char *jv_type_name(jv v)
{
    switch ((jtype)v.t) {
    case JT_UNDEF: return "Undefined";
    case JT_NONE: return "NoneType";
    case JT_BOOL: return "bool";
    case JT_INT: return "int";
    case JT_FLOAT: return "float";
    case JT_STR: return v.flag & JF_MARKUP ? "Markup" : "str";
    case JT_LIST: return v.flag & JF_TUPLE ? "tuple" : "list";
    case JT_DICT: return "dict";
    case JT_NS: return "Namespace";
    case JT_FUNC: return v.u.fn->kind == JFN_MACRO ? "Macro" : "builtin_function_or_method";
    case JT_LOOP: return "LoopContext";
    }
    return "object";
}

bool jv_truthy(jv v)
{
    switch ((jtype)v.t) {
    case JT_UNDEF:
    case JT_NONE: return false;
    case JT_BOOL: return v.u.b;
    case JT_INT: return v.u.i != 0;
    case JT_FLOAT: return v.u.f != 0.0;
    case JT_STR: return v.n > 0;
    case JT_LIST: return v.u.l->n > 0;
    case JT_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

static double num_f(jv v) { return v.t == JT_FLOAT ? v.u.f : v.t == JT_BOOL ? (double)v.u.b : (double)v.u.i; }

bool jv_eq(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT)
            return (a.t == JT_BOOL ? a.u.b : a.u.i) == (b.t == JT_BOOL ? b.u.b : b.u.i);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch ((jtype)a.t) {
    case JT_UNDEF:
    case JT_NONE: return true;
    case JT_STR: return a.n == b.n && (a.n == 0 || !memcmp(a.u.s, b.u.s, a.n));
    case JT_LIST:
        if ((a.flag & JF_TUPLE) != (b.flag & JF_TUPLE) || a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case JT_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv o;
            if (!jd_get(b.u.d, a.u.d->k[i], &o) || !jv_eq(a.u.d->v[i], o))
                return false;
        }
        return true;
    case JT_NS: return a.u.d == b.u.d;
    case JT_FUNC: return a.u.fn == b.u.fn;
    case JT_LOOP: return a.u.lp == b.u.lp;
    default: return false;
    }
}

/* Code-point order = byte order for valid UTF-8. */
int jv_cmp(jarena *a, jv x, jv y)
{
    if (jv_is_num(x) && jv_is_num(y)) {
        if (x.t != JT_FLOAT && y.t != JT_FLOAT) {
            int64_t p = x.t == JT_BOOL ? x.u.b : x.u.i, q = y.t == JT_BOOL ? y.u.b : y.u.i;
            return p < q ? -1 : p > q;
        }
        double p = num_f(x), q = num_f(y);
        return p < q ? -1 : p > q;
    }
    if (x.t == JT_STR && y.t == JT_STR) {
        size_t m = x.n < y.n ? x.n : y.n;
        int r = m ? memcmp(x.u.s, y.u.s, m) : 0;
        if (r)
            return r < 0 ? -1 : 1;
        return x.n < y.n ? -1 : x.n > y.n;
    }
    if (x.t == JT_LIST && y.t == JT_LIST) {
        for (size_t i = 0; i < x.u.l->n && i < y.u.l->n; i++)
            if (!jv_eq(x.u.l->v[i], y.u.l->v[i]))
                return jv_cmp(a, x.u.l->v[i], y.u.l->v[i]);
        return x.u.l->n < y.u.l->n ? -1 : x.u.l->n > y.u.l->n;
    }
    if (x.t == JT_UNDEF || y.t == JT_UNDEF)
        jfail(a, "'%.*s' is undefined", (int)(x.t == JT_UNDEF ? x.n : y.n),
              (x.t == JT_UNDEF ? x.u.s : y.u.s) ? (x.t == JT_UNDEF ? x.u.s : y.u.s) : "");
    jfail(a, "'<' not supported between instances of '%s' and '%s'", jv_type_name(x), jv_type_name(y));
}

void jfmt_float(double f, char out[40])
{
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        strcpy(out, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg)
        q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++)
                *o++ = '0';
            for (int i = 0; i < nd; i++)
                *o++ = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    *o++ = digits[i];
            else
                *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++)
                *o++ = digits[i];
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static bool py_printable(uint32_t c)
{
    if (c == ' ')
        return true;
    if (c < 0x20 || c == 0x7f)
        return false;
    if (c < 0x7f)
        return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
             k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
             k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
}

static void repr_str(jarena *a, jbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_put(a, b, &q, 1);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int k = ju_dec((const unsigned char *)s + i, n - i, &c);
        if (c == (uint32_t)q || c == '\\') {
            char t[2] = {'\\', (char)c};
            jb_put(a, b, t, 2);
        } else if (c == '\n') {
            jb_puts(a, b, "\\n");
        } else if (c == '\r') {
            jb_puts(a, b, "\\r");
        } else if (c == '\t') {
            jb_puts(a, b, "\\t");
        } else if (!py_printable(c)) {
            if (c < 0x100)
                jb_printf(a, b, "\\x%02x", c);
            else if (c < 0x10000)
                jb_printf(a, b, "\\u%04x", c);
            else
                jb_printf(a, b, "\\U%08x", c);
        } else {
            jb_put(a, b, s + i, (size_t)k);
        }
        i += (size_t)k;
    }
    jb_put(a, b, &q, 1);
}

static void write_any(jarena *a, jbuf *b, jv v, bool repr, int depth)
{
    if (depth > 200)
        jfail(a, "value nested too deeply to print");
    char t[40];
    switch ((jtype)v.t) {
    case JT_UNDEF: return;
    case JT_NONE: jb_puts(a, b, "None"); return;
    case JT_BOOL: jb_puts(a, b, v.u.b ? "True" : "False"); return;
    case JT_INT: jb_printf(a, b, "%lld", (long long)v.u.i); return;
    case JT_FLOAT: jfmt_float(v.u.f, t); jb_puts(a, b, t); return;
    case JT_STR:
        if (repr)
            repr_str(a, b, v.u.s, v.n);
        else
            jb_put(a, b, v.u.s, v.n);
        return;
    case JT_LIST: {
        bool tup = v.flag & JF_TUPLE;
        jb_puts(a, b, tup ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jb_puts(a, b, ", ");
            write_any(a, b, v.u.l->v[i], true, depth + 1);
        }
        if (tup && v.u.l->n == 1)
            jb_puts(a, b, ",");
        jb_puts(a, b, tup ? ")" : "]");
        return;
    }
    case JT_NS:
        jb_puts(a, b, "<Namespace ");
        /* fall through */
    case JT_DICT:
        jb_puts(a, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                jb_puts(a, b, ", ");
            write_any(a, b, v.u.d->k[i], true, depth + 1);
            jb_puts(a, b, ": ");
            write_any(a, b, v.u.d->v[i], true, depth + 1);
        }
        jb_puts(a, b, v.t == JT_NS ? "}>" : "}");
        return;
    case JT_FUNC:
        jb_printf(a, b, "<function %s>", v.u.fn->name ? v.u.fn->name : "");
        return;
    case JT_LOOP: jb_puts(a, b, "<LoopContext>"); return;
    }
}

void jv_write_str(jarena *a, jbuf *b, jv v) { write_any(a, b, v, false, 0); }
void jv_write_repr(jarena *a, jbuf *b, jv v) { write_any(a, b, v, true, 0); }

jv jv_to_str(jarena *a, jv v)
{
    if (v.t == JT_STR)
        return v;
    jbuf b = {0};
    jv_write_str(a, &b, v);
    return jv_str(b.p ? b.p : "", b.n);
}

/* ---- JSON ------------------------------------------------------------------------ */

static void json_str(jarena *a, jbuf *b, const char *s, size_t n, bool ascii)
{
    jb_puts(a, b, "\"");
    size_t run = 0; /* start of a run of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char u[16];
        size_t k = 1;
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", ch);
            esc = u;
        } else if (ch >= 0x80 && ascii) {
            uint32_t c;
            k = (size_t)ju_dec((const unsigned char *)s + i, n - i, &c);
            if (c >= 0x10000) {
                c -= 0x10000;
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
            } else {
                snprintf(u, sizeof u, "\\u%04x", c);
            }
            esc = u;
        }
        if (esc) {
            jb_put(a, b, s + run, i - run);
            jb_puts(a, b, esc);
            i += k;
            run = i;
        } else {
            i++;
        }
    }
    jb_put(a, b, s + run, n - run);
    jb_puts(a, b, "\"");
}

static void json_newline(jarena *a, jbuf *b, const jjson_opts *o, int level)
{
    jb_puts(a, b, "\n");
    for (int i = 0; i < level; i++)
        jb_puts(a, b, o->indent);
}

static void json_key(jarena *a, jbuf *b, jv k, const jjson_opts *o)
{
    char t[40];
    switch ((jtype)k.t) {
    case JT_STR: json_str(a, b, k.u.s, k.n, o->ensure_ascii); return;
    case JT_INT: jb_printf(a, b, "\"%lld\"", (long long)k.u.i); return;
    case JT_BOOL: jb_puts(a, b, k.u.b ? "\"true\"" : "\"false\""); return;
    case JT_NONE: jb_puts(a, b, "\"null\""); return;
    case JT_FLOAT: jfmt_float(k.u.f, t); jb_printf(a, b, "\"%s\"", t); return;
    default: jfail(a, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int cmp_keys_a(jarena *a, jv x, jv y) { return jv_cmp(a, x, y); }

void jv_write_json(jarena *a, jbuf *b, jv v, const jjson_opts *o, int level)
{
    if (level > 200)
        jfail(a, "value nested too deeply for tojson");
    char t[40];
    switch ((jtype)v.t) {
    case JT_NONE: jb_puts(a, b, "null"); return;
    case JT_BOOL: jb_puts(a, b, v.u.b ? "true" : "false"); return;
    case JT_INT: jb_printf(a, b, "%lld", (long long)v.u.i); return;
    case JT_FLOAT:
        if (isnan(v.u.f))
            jb_puts(a, b, "NaN");
        else if (isinf(v.u.f))
            jb_puts(a, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            jfmt_float(v.u.f, t);
            jb_puts(a, b, t);
        }
        return;
    case JT_STR: json_str(a, b, v.u.s, v.n, o->ensure_ascii); return;
    case JT_LIST: {
        jlist *l = v.u.l;
        if (v.flag & JF_GEN)
            jfail(a, "Object of type generator is not JSON serializable");
        if (l->n == 0) {
            jb_puts(a, b, "[]");
            return;
        }
        jb_puts(a, b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                jb_puts(a, b, o->item_sep);
            if (o->indent)
                json_newline(a, b, o, level + 1);
            jv_write_json(a, b, l->v[i], o, level + 1);
        }
        if (o->indent)
            json_newline(a, b, o, level);
        jb_puts(a, b, "]");
        return;
    }
    case JT_DICT: {
        jdict *d = v.u.d;
        if (d->n == 0) {
            jb_puts(a, b, "{}");
            return;
        }
        size_t *ord = ja_alloc(a, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++)
            ord[i] = i;
        if (o->sort_keys) /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && cmp_keys_a(a, d->k[ord[j]], d->k[ord[j - 1]]) < 0; j--) {
                    size_t s = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = s;
                }
        jb_puts(a, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                jb_puts(a, b, o->item_sep);
            if (o->indent)
                json_newline(a, b, o, level + 1);
            json_key(a, b, d->k[ord[i]], o);
            jb_puts(a, b, o->key_sep);
            jv_write_json(a, b, d->v[ord[i]], o, level + 1);
        }
        if (o->indent)
            json_newline(a, b, o, level);
        jb_puts(a, b, "}");
        return;
    }
    default:
        jfail(a, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

jv jv_from_json(jarena *a, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jlist *l = jl_new(a, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            l->v[l->n++] = jv_from_json(a, json_array_get(j, i));
        return jv_list(l);
    }
    case JSON_OBJECT: {
        jdict *d = jd_new(a, json_object_size(j));
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)j, k, x) {
            /* keys are unique in a jansson object: append without a lookup */
            d->k[d->n] = jv_cstr(k);
            d->v[d->n] = jv_from_json(a, x);
            d->n++;
        }
        return jv_dict(d);
    }
    }
    return jv_none();
}
