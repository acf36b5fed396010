/*
 * jinja_filters.c — the filters, tests, global functions and methods a
 * template can call.
 *
 * The set is what real chat templates use (tests/chat/templates: tojson,
 * length, trim, string, default, join, items, dictsort, selectattr, map,
 * indent, ...; str.strip/split/startswith/replace, dict.get/items, ...),
 * with jinja2 3.1's behaviour for each, and transformers' additions
 * (tojson as json.dumps(ensure_ascii=False), raise_exception,
 * strftime_now, namespace, dict). What jinja2 returns as a generator
 * (select, map, items, reverse, unique) is a list here, marked so that
 * |length on it fails as it does in Python. An unknown filter or test is an
 * error naming it. Methods that would mutate a list or dict fail, as the
 * immutable sandbox does; so do underscore attributes.
 *
 * Limits: Python's full Unicode case mappings are the simple ones
 * (utf8proc), str.format takes only {} / {0} / {name} without format specs.
 */
#include "engine/model/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <utf8proc.h>

static jv gen(jlist *l)
{
    jv v = jv_list(l);
    v.flag = JF_GEN;
    return v;
}

/* ---- arguments ------------------------------------------------------------------ */

/* positional idx or keyword name; *found says which */
static jv arg(const jargs *a, int idx, const char *name, jv dflt)
{
    if (idx >= 0 && idx < a->npos)
        return a->pos[idx];
    for (int i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kwn[i], name))
            return a->kwv[i];
    return dflt;
}

static bool has_arg(const jargs *a, int idx, const char *name)
{
    if (idx >= 0 && idx < a->npos)
        return true;
    for (int i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kwn[i], name))
            return true;
    return false;
}

static void max_args(jctx *c, const jargs *a, int n, const char *what)
{
    if (a->npos > n)
        jfail(&c->a, "%s takes at most %d positional argument(s), %d given", what, n, a->npos);
}

static jv need_str(jctx *c, jv v, const char *what)
{
    if (v.t != JT_STR)
        jfail(&c->a, "%s expects a string, got %s", what, jv_type_name(v));
    return v;
}

/* soft_str: str(value) unless it is a string already */
static jv soft_str(jctx *c, jv v) { return jv_to_str(&c->a, v); }

static jv mkstr(jbuf *b) { return jv_str(b->p ? b->p : "", b->n); }

static int64_t to_int(jctx *c, jv v, const char *what)
{
    if (v.t == JT_INT)
        return v.u.i;
    if (v.t == JT_BOOL)
        return v.u.b;
    jfail(&c->a, "%s: expected an integer, got %s", what, jv_type_name(v));
}

/* ---- strings ---------------------------------------------------------------------- */

static bool in_set(jv chars, uint32_t cp)
{
    for (size_t i = 0; i < chars.n;) {
        uint32_t c;
        i += (size_t)ju_dec((const unsigned char *)chars.u.s + i, chars.n - i, &c);
        if (c == cp)
            return true;
    }
    return false;
}

/* Python str.strip/lstrip/rstrip; chars: JT_STR or none for whitespace */
static jv strip(jv s, jv chars, bool left, bool right)
{
    bool ws = chars.t != JT_STR;
    size_t b = 0, e = s.n;
    if (left)
        while (b < e) {
            uint32_t c;
            int k = ju_dec((const unsigned char *)s.u.s + b, e - b, &c);
            if (ws ? !ju_space(c) : !in_set(chars, c))
                break;
            b += (size_t)k;
        }
    if (right) {
        size_t end = b;
        for (size_t i = b; i < e;) {
            uint32_t c;
            int k = ju_dec((const unsigned char *)s.u.s + i, e - i, &c);
            i += (size_t)k;
            if (ws ? !ju_space(c) : !in_set(chars, c))
                end = i;
        }
        e = end;
    }
    jv r = jv_str(s.u.s + b, e - b);
    r.flag = s.flag & JF_MARKUP;
    return r;
}

typedef enum { CASE_UPPER, CASE_LOWER } case_kind;

static void put_case(jctx *c, jbuf *b, uint32_t cp, case_kind k)
{
    utf8proc_int32_t m = k == CASE_UPPER ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp);
    ju_enc(&c->a, b, (uint32_t)m);
}

static jv str_case(jctx *c, jv s, case_kind k)
{
    jbuf b = {0};
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        put_case(c, &b, cp, k);
    }
    return mkstr(&b);
}

static bool is_cased_letter(uint32_t cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Python str.capitalize: first character upper, the rest lower */
static jv str_capitalize(jctx *c, jv s)
{
    jbuf b = {0};
    bool first = true;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        put_case(c, &b, cp, first ? CASE_UPPER : CASE_LOWER);
        first = false;
    }
    return mkstr(&b);
}

/* Python str.title: a cased letter after an uncased character starts a word */
static jv str_title_py(jctx *c, jv s)
{
    jbuf b = {0};
    bool prev_cased = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        put_case(c, &b, cp, prev_cased ? CASE_LOWER : CASE_UPPER);
        prev_cased = is_cased_letter(cp);
    }
    return mkstr(&b);
}

/* jinja2's |title: words split at whitespace and - ( { [ < */
static jv filter_title(jctx *c, jv s)
{
    jbuf b = {0};
    bool start = true;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        bool sep = ju_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) {
            ju_enc(&c->a, &b, cp);
            start = true;
        } else {
            put_case(c, &b, cp, start ? CASE_UPPER : CASE_LOWER);
            start = false;
        }
    }
    return mkstr(&b);
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0)
        return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn))
            return h + i;
    return NULL;
}

static jv str_replace(jctx *c, jv s, jv old, jv new_, int64_t count)
{
    jbuf b = {0};
    if (old.n == 0) { /* Python inserts `new` before every character and at the end */
        int64_t done = 0;
        size_t i = 0;
        while (i < s.n) {
            if (count < 0 || done < count) {
                jb_put(&c->a, &b, new_.u.s, new_.n);
                done++;
            }
            uint32_t cp;
            int k = ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
            jb_put(&c->a, &b, s.u.s + i, (size_t)k);
            i += (size_t)k;
            jstep(c);
        }
        if (count < 0 || done < count)
            jb_put(&c->a, &b, new_.u.s, new_.n);
        return mkstr(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i <= s.n) {
        const char *p = (count < 0 || done < count) ? find_bytes(s.u.s + i, s.n - i, old.u.s, old.n) : NULL;
        if (!p) {
            jb_put(&c->a, &b, s.u.s + i, s.n - i);
            break;
        }
        jstep(c);
        jb_put(&c->a, &b, s.u.s + i, (size_t)(p - (s.u.s + i)));
        jb_put(&c->a, &b, new_.u.s, new_.n);
        i = (size_t)(p - s.u.s) + old.n;
        done++;
    }
    return mkstr(&b);
}

/* Python str.split(sep=None, maxsplit=-1) */
static jv str_split(jctx *c, jv s, jv sep, int64_t maxsplit)
{
    jlist *l = jl_new(&c->a, 0);
    if (sep.t != JT_STR) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < s.n) { /* skip whitespace */
                uint32_t cp;
                int k = ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
                if (!ju_space(cp))
                    break;
                i += (size_t)k;
            }
            if (i >= s.n)
                break;
            if (maxsplit >= 0 && done >= maxsplit) {
                /* the rest, right-stripped */
                jv rest = strip(jv_str(s.u.s + i, s.n - i), jv_none(), false, true);
                jl_push(&c->a, l, rest);
                break;
            }
            size_t j = i;
            while (j < s.n) {
                uint32_t cp;
                int k = ju_dec((const unsigned char *)s.u.s + j, s.n - j, &cp);
                if (ju_space(cp))
                    break;
                j += (size_t)k;
            }
            jstep(c);
            jl_push(&c->a, l, jv_str(s.u.s + i, j - i));
            done++;
            i = j;
        }
        return jv_list(l);
    }
    if (sep.n == 0)
        jfail(&c->a, "empty separator");
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *p = (maxsplit < 0 || done < maxsplit) ? find_bytes(s.u.s + i, s.n - i, sep.u.s, sep.n) : NULL;
        jstep(c);
        if (!p) {
            jl_push(&c->a, l, jv_str(s.u.s + i, s.n - i));
            break;
        }
        jl_push(&c->a, l, jv_str(s.u.s + i, (size_t)(p - (s.u.s + i))));
        i = (size_t)(p - s.u.s) + sep.n;
        done++;
    }
    return jv_list(l);
}

static jv str_rsplit(jctx *c, jv s, jv sep, int64_t maxsplit)
{
    if (maxsplit < 0 || sep.t != JT_STR)
        return str_split(c, s, sep, maxsplit); /* whitespace rsplit with a limit: rare, same when unlimited */
    if (sep.n == 0)
        jfail(&c->a, "empty separator");
    /* collect from the right */
    size_t end = s.n;
    int64_t done = 0;
    jlist *rev = jl_new(&c->a, 0);
    while (done < maxsplit) {
        const char *hit = NULL;
        for (size_t i = end >= sep.n ? end - sep.n + 1 : 0; i-- > 0;) {
            if (!memcmp(s.u.s + i, sep.u.s, sep.n)) {
                hit = s.u.s + i;
                break;
            }
        }
        jstep(c);
        if (!hit)
            break;
        jl_push(&c->a, rev, jv_str(hit + sep.n, (size_t)(s.u.s + end - (hit + sep.n))));
        end = (size_t)(hit - s.u.s);
        done++;
    }
    jlist *l = jl_new(&c->a, rev->n + 1);
    l->v[l->n++] = jv_str(s.u.s, end);
    for (size_t i = rev->n; i-- > 0;)
        l->v[l->n++] = rev->v[i];
    return jv_list(l);
}

/* Python str.splitlines (line boundaries \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029) */
static jv str_splitlines(jctx *c, jv s, bool keepends)
{
    jlist *l = jl_new(&c->a, 0);
    size_t i = 0, start = 0;
    while (i < s.n) {
        uint32_t cp;
        int k = ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        bool eol = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                   cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!eol) {
            i += (size_t)k;
            continue;
        }
        size_t next = i + (size_t)k;
        if (cp == '\r' && next < s.n && s.u.s[next] == '\n')
            next++;
        jstep(c);
        jl_push(&c->a, l, jv_str(s.u.s + start, (keepends ? next : i) - start));
        i = start = next;
    }
    if (start < s.n)
        jl_push(&c->a, l, jv_str(s.u.s + start, s.n - start));
    return jv_list(l);
}

static bool str_affix(jctx *c, jv s, jv affix, bool end)
{
    if (affix.t == JT_LIST && (affix.flag & JF_TUPLE)) {
        for (size_t i = 0; i < affix.u.l->n; i++)
            if (str_affix(c, s, affix.u.l->v[i], end))
                return true;
        return false;
    }
    if (affix.t != JT_STR)
        jfail(&c->a, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith",
              jv_type_name(affix));
    if (affix.n > s.n)
        return false;
    return !memcmp(end ? s.u.s + s.n - affix.n : s.u.s, affix.u.s, affix.n);
}

static jv str_format(jctx *c, jv fmt, const jargs *a)
{
    jbuf b = {0};
    int auto_i = 0;
    for (size_t i = 0; i < fmt.n; i++) {
        char ch = fmt.u.s[i];
        if (ch == '{' && i + 1 < fmt.n && fmt.u.s[i + 1] == '{') {
            jb_puts(&c->a, &b, "{");
            i++;
            continue;
        }
        if (ch == '}' && i + 1 < fmt.n && fmt.u.s[i + 1] == '}') {
            jb_puts(&c->a, &b, "}");
            i++;
            continue;
        }
        if (ch != '{') {
            jb_put(&c->a, &b, &ch, 1);
            continue;
        }
        size_t j = i + 1;
        while (j < fmt.n && fmt.u.s[j] != '}')
            j++;
        if (j >= fmt.n)
            jfail(&c->a, "Single '{' encountered in format string");
        const char *f = fmt.u.s + i + 1;
        size_t fl = j - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
            jfail(&c->a, "format specs and field access are not supported in str.format");
        jv v;
        if (fl == 0) {
            v = arg(a, auto_i++, NULL, jv_undef(NULL, 0));
            if (v.t == JT_UNDEF)
                jfail(&c->a, "Replacement index %d out of range for positional args tuple", auto_i - 1);
        } else if (f[0] >= '0' && f[0] <= '9') {
            int idx = atoi(f);
            if (idx >= a->npos)
                jfail(&c->a, "Replacement index %d out of range for positional args tuple", idx);
            v = a->pos[idx];
        } else {
            char *nm = ja_strndup(&c->a, f, fl);
            if (!has_arg(a, -1, nm))
                jfail(&c->a, "KeyError: '%s'", nm);
            v = arg(a, -1, nm, jv_none());
        }
        jv_write_str(&c->a, &b, v);
        i = j;
    }
    return mkstr(&b);
}

static int64_t str_find(jv s, jv sub, bool last)
{
    if (sub.n > s.n)
        return -1;
    const char *hit = NULL;
    if (!last)
        hit = find_bytes(s.u.s, s.n, sub.u.s, sub.n);
    else
        for (size_t i = s.n - sub.n + 1; i-- > 0;)
            if (!memcmp(s.u.s + i, sub.u.s, sub.n)) {
                hit = s.u.s + i;
                break;
            }
    if (!hit)
        return -1;
    return (int64_t)ju_len(s.u.s, (size_t)(hit - s.u.s));
}

static bool str_all(jv s, int kind)
{
    if (s.n == 0)
        return false;
    bool cased = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
        bool letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        bool digit = k == UTF8PROC_CATEGORY_ND;
        switch (kind) {
        case 'd': if (!digit) return false; break;
        case 'a': if (!letter) return false; break;
        case 'n': if (!letter && !digit && k != UTF8PROC_CATEGORY_NL && k != UTF8PROC_CATEGORY_NO) return false; break;
        case 's': if (!ju_space(cp)) return false; break;
        case 'l':
            if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
            if (k == UTF8PROC_CATEGORY_LL) cased = true;
            break;
        case 'u':
            if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return false;
            if (k == UTF8PROC_CATEGORY_LU) cased = true;
            break;
        }
    }
    return kind == 'l' || kind == 'u' ? cased : true;
}

/* ---- methods ---------------------------------------------------------------------- */

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "upper",
    "lower", "title", "capitalize", "find", "rfind", "index", "rindex", "count", "join", "format", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "isnumeric", "isdecimal", "removeprefix",
    "removesuffix", "casefold", "partition", "rpartition", "zfill", "center", "ljust", "rjust", "swapcase", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const dict_mutating[] = {"pop", "popitem", "setdefault", "update", "clear", "fromkeys", NULL};
static const char *const list_methods[] = {"index", "count", "copy", NULL};
static const char *const list_mutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", NULL};

static bool in_names(const char *const *v, const char *n)
{
    for (; *v; v++)
        if (!strcmp(*v, n))
            return true;
    return false;
}

bool jmethod_lookup(jctx *c, jv self, const char *name, jv *out)
{
    if (name[0] == '_' && name[1] == '_')
        jfail(&c->a, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(self));
    bool ok = false;
    if (self.t == JT_STR)
        ok = in_names(str_methods, name);
    else if (self.t == JT_DICT) {
        if (in_names(dict_mutating, name))
            jfail(&c->a, "access to attribute '%s' of 'dict' object is unsafe.", name);
        ok = in_names(dict_methods, name);
    } else if (self.t == JT_LIST) {
        if (in_names(list_mutating, name))
            jfail(&c->a, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(self));
        ok = in_names(list_methods, name);
    }
    if (!ok)
        return false;
    jfunc *fn = ja_alloc(&c->a, sizeof *fn);
    fn->kind = JFN_METHOD;
    fn->name = name;
    fn->self = self;
    out->t = JT_FUNC;
    out->flag = 0;
    out->u.fn = fn;
    return true;
}

static jv pad(jctx *c, jv s, int64_t width, jv fill, int where)
{
    int64_t len = (int64_t)ju_len(s.u.s, s.n);
    if (width <= len)
        return s;
    if (width - len > (int64_t)(c->a.cap / 4))
        jfail(&c->a, "padding too wide");
    jv f = fill.t == JT_STR ? fill : jv_str(" ", 1);
    int64_t total = width - len, left = where == 0 ? total / 2 + (total & width & 1) : where < 0 ? 0 : total;
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        jb_put(&c->a, &b, f.u.s, f.n);
    jb_put(&c->a, &b, s.u.s, s.n);
    for (int64_t i = 0; i < total - left; i++)
        jb_put(&c->a, &b, f.u.s, f.n);
    return mkstr(&b);
}

jv jcall_method(jctx *c, jv self, const char *m, const jargs *a)
{
    if (self.t == JT_LOOP && !strcmp(m, "cycle")) {
        if (a->npos == 0)
            jfail(&c->a, "no items for cycling given");
        return a->pos[self.u.lp->i % (size_t)a->npos];
    }
    if (self.t == JT_DICT) {
        jdict *d = self.u.d;
        if (!strcmp(m, "get")) {
            jv v;
            if (a->npos < 1)
                jfail(&c->a, "get expected at least 1 argument, got 0");
            return jd_get(d, a->pos[0], &v) ? v : arg(a, 1, NULL, jv_none());
        }
        if (!strcmp(m, "copy")) {
            jdict *n = jd_new(&c->a, d->n);
            for (size_t i = 0; i < d->n; i++)
                jd_set(&c->a, n, d->k[i], d->v[i]);
            return jv_dict(n);
        }
        jlist *l = jl_new(&c->a, d->n);
        for (size_t i = 0; i < d->n; i++) {
            if (!strcmp(m, "keys"))
                l->v[l->n++] = d->k[i];
            else if (!strcmp(m, "values"))
                l->v[l->n++] = d->v[i];
            else {
                jlist *p = jl_new(&c->a, 2);
                p->v[0] = d->k[i];
                p->v[1] = d->v[i];
                p->n = 2;
                jv t = jv_list(p);
                t.flag = JF_TUPLE;
                l->v[l->n++] = t;
            }
        }
        return jv_list(l);
    }
    if (self.t == JT_LIST) {
        jlist *l = self.u.l;
        if (!strcmp(m, "copy")) {
            jlist *n = jl_new(&c->a, l->n);
            memcpy(n->v, l->v, l->n * sizeof(jv));
            n->n = l->n;
            return jv_list(n);
        }
        jv x = arg(a, 0, NULL, jv_undef(NULL, 0));
        int64_t k = 0;
        for (size_t i = 0; i < l->n; i++) {
            jstep(c);
            if (jv_eq(l->v[i], x)) {
                if (!strcmp(m, "index"))
                    return jv_int((int64_t)i);
                k++;
            }
        }
        if (!strcmp(m, "index"))
            jfail(&c->a, "list.index(x): x not in list");
        return jv_int(k);
    }
    if (self.t != JT_STR)
        jfail(&c->a, "'%s' object has no method '%s'", jv_type_name(self), m);
    jv s = self;
    c->steps += s.n / 64;
    jstep(c);
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jv ch = arg(a, 0, NULL, jv_none());
        if (ch.t != JT_STR && ch.t != JT_NONE)
            jfail(&c->a, "%s arg must be None or str", m);
        return strip(s, ch, m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv sep = arg(a, 0, "sep", jv_none());
        if (sep.t != JT_STR && sep.t != JT_NONE)
            jfail(&c->a, "must be str or None, not %s", jv_type_name(sep));
        int64_t maxs = to_int(c, arg(a, 1, "maxsplit", jv_int(-1)), "maxsplit");
        return m[0] == 'r' ? str_rsplit(c, s, sep, maxs) : str_split(c, s, sep, maxs);
    }
    if (!strcmp(m, "splitlines"))
        return str_splitlines(c, s, jv_truthy(arg(a, 0, "keepends", jv_bool(false))));
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (a->npos > 1)
            jfail(&c->a, "%s with start/end is not supported", m);
        return jv_bool(str_affix(c, s, arg(a, 0, NULL, jv_none()), m[0] == 'e'));
    }
    if (!strcmp(m, "replace")) {
        jv o = need_str(c, arg(a, 0, NULL, jv_none()), "replace"), n = need_str(c, arg(a, 1, NULL, jv_none()), "replace");
        return str_replace(c, s, o, n, to_int(c, arg(a, 2, "count", jv_int(-1)), "count"));
    }
    if (!strcmp(m, "upper")) return str_case(c, s, CASE_UPPER);
    if (!strcmp(m, "lower") || !strcmp(m, "casefold")) return str_case(c, s, CASE_LOWER);
    if (!strcmp(m, "title")) return str_title_py(c, s);
    if (!strcmp(m, "capitalize")) return str_capitalize(c, s);
    if (!strcmp(m, "swapcase")) {
        jbuf b = {0};
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            i += (size_t)ju_dec((const unsigned char *)s.u.s + i, s.n - i, &cp);
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
            put_case(c, &b, cp, k == UTF8PROC_CATEGORY_LU ? CASE_LOWER : CASE_UPPER);
        }
        return mkstr(&b);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        if (a->npos > 1)
            jfail(&c->a, "%s with start/end is not supported", m);
        int64_t r = str_find(s, need_str(c, arg(a, 0, NULL, jv_none()), m), m[0] == 'r');
        if (r < 0 && strstr(m, "index"))
            jfail(&c->a, "substring not found");
        return jv_int(r);
    }
    if (!strcmp(m, "count")) {
        jv sub = need_str(c, arg(a, 0, NULL, jv_none()), "count");
        if (sub.n == 0)
            return jv_int((int64_t)ju_len(s.u.s, s.n) + 1);
        int64_t k = 0;
        for (size_t i = 0; i + sub.n <= s.n;) {
            if (!memcmp(s.u.s + i, sub.u.s, sub.n)) {
                k++;
                i += sub.n;
            } else {
                i++;
            }
        }
        return jv_int(k);
    }
    if (!strcmp(m, "join")) {
        jv items = jiter_list(c, arg(a, 0, NULL, jv_none()));
        jbuf b = {0};
        for (size_t i = 0; i < items.u.l->n; i++) {
            jv it = items.u.l->v[i];
            if (it.t != JT_STR)
                jfail(&c->a, "sequence item %zu: expected str instance, %s found", i, jv_type_name(it));
            if (i)
                jb_put(&c->a, &b, s.u.s, s.n);
            jb_put(&c->a, &b, it.u.s, it.n);
        }
        return mkstr(&b);
    }
    if (!strcmp(m, "format")) return str_format(c, s, a);
    if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric")) return jv_bool(str_all(s, 'd'));
    if (!strcmp(m, "isalpha")) return jv_bool(str_all(s, 'a'));
    if (!strcmp(m, "isalnum")) return jv_bool(str_all(s, 'n'));
    if (!strcmp(m, "isspace")) return jv_bool(str_all(s, 's'));
    if (!strcmp(m, "islower")) return jv_bool(str_all(s, 'l'));
    if (!strcmp(m, "isupper")) return jv_bool(str_all(s, 'u'));
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        jv x = need_str(c, arg(a, 0, NULL, jv_none()), m);
        bool suf = m[6] == 's';
        if (str_affix(c, s, x, suf))
            return suf ? jv_str(s.u.s, s.n - x.n) : jv_str(s.u.s + x.n, s.n - x.n);
        return s;
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        jv sep = need_str(c, arg(a, 0, NULL, jv_none()), m);
        if (sep.n == 0)
            jfail(&c->a, "empty separator");
        int64_t cp = str_find(s, sep, m[0] == 'r');
        jlist *l = jl_new(&c->a, 3);
        if (cp < 0) {
            jv e = jv_str("", 0);
            l->v[0] = m[0] == 'r' ? e : s;
            l->v[1] = e;
            l->v[2] = m[0] == 'r' ? s : e;
        } else {
            size_t off = ju_offset(s.u.s, s.n, (size_t)cp);
            l->v[0] = jv_str(s.u.s, off);
            l->v[1] = jv_str(s.u.s + off, sep.n);
            l->v[2] = jv_str(s.u.s + off + sep.n, s.n - off - sep.n);
        }
        l->n = 3;
        jv r = jv_list(l);
        r.flag = JF_TUPLE;
        return r;
    }
    if (!strcmp(m, "zfill")) {
        int64_t w = to_int(c, arg(a, 0, NULL, jv_int(0)), "zfill");
        int64_t len = (int64_t)ju_len(s.u.s, s.n);
        if (w <= len)
            return s;
        if (w > (int64_t)(c->a.cap / 4))
            jfail(&c->a, "zfill too wide");
        jbuf b = {0};
        size_t start = 0;
        if (s.n && (s.u.s[0] == '-' || s.u.s[0] == '+')) {
            jb_put(&c->a, &b, s.u.s, 1);
            start = 1;
        }
        for (int64_t i = 0; i < w - len; i++)
            jb_puts(&c->a, &b, "0");
        jb_put(&c->a, &b, s.u.s + start, s.n - start);
        return mkstr(&b);
    }
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust"))
        return pad(c, s, to_int(c, arg(a, 0, NULL, jv_int(0)), m), arg(a, 1, NULL, jv_none()),
                   m[0] == 'c' ? 0 : m[0] == 'l' ? 1 : -1);
    jfail(&c->a, "'str' object has no method '%s'", m);
}

/* ---- globals ------------------------------------------------------------------------ */

static const char *const globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

bool jglobal_exists(const char *name) { return in_names(globals, name); }

#define MAX_RANGE 100000

jv jcall_global(jctx *c, const char *name, const jargs *a)
{
    if (!strcmp(name, "raise_exception")) {
        jv m = soft_str(c, arg(a, 0, "message", jv_str("", 0)));
        jfail(&c->a, "%.*s", (int)(m.n > 400 ? 400 : m.n), m.u.s);
    }
    if (!strcmp(name, "range")) {
        int64_t start = 0, stop, step = 1;
        if (a->npos == 1) {
            stop = to_int(c, a->pos[0], "range");
        } else if (a->npos == 2 || a->npos == 3) {
            start = to_int(c, a->pos[0], "range");
            stop = to_int(c, a->pos[1], "range");
            if (a->npos == 3)
                step = to_int(c, a->pos[2], "range");
        } else {
            jfail(&c->a, "range expected 1 to 3 integer arguments");
        }
        if (step == 0)
            jfail(&c->a, "range() arg 3 must not be zero");
        jlist *l = jl_new(&c->a, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l->n >= MAX_RANGE)
                jfail(&c->a, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
            jl_push(&c->a, l, jv_int(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
                break;
        }
        return jv_list(l);
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        jdict *d = jd_new(&c->a, 0);
        for (int i = 0; i < a->npos; i++) {
            jv m = a->pos[i];
            if (m.t == JT_DICT || m.t == JT_NS) {
                for (size_t k = 0; k < m.u.d->n; k++)
                    jd_set(&c->a, d, m.u.d->k[k], m.u.d->v[k]);
            } else {
                jv items = jiter_list(c, m);
                for (size_t k = 0; k < items.u.l->n; k++) {
                    jv p = jiter_list(c, items.u.l->v[k]);
                    if (p.u.l->n != 2)
                        jfail(&c->a, "dictionary update sequence element has length %zu; 2 is required", p.u.l->n);
                    jd_set(&c->a, d, p.u.l->v[0], p.u.l->v[1]);
                }
            }
        }
        for (int i = 0; i < a->nkw; i++) {
            if (name[0] == 'n' && a->kwn[i][0] == '_')
                jfail(&c->a, "chat templates cannot store underscore-prefixed attributes on a namespace");
            jd_set(&c->a, d, jv_cstr(a->kwn[i]), a->kwv[i]);
        }
        jv r = jv_dict(d);
        if (name[0] == 'n')
            r.t = JT_NS;
        return r;
    }
    if (!strcmp(name, "strftime_now")) {
        jv f = need_str(c, arg(a, 0, "format", jv_none()), "strftime_now");
        char fmt[256], buf[512];
        if (f.n >= sizeof fmt)
            jfail(&c->a, "strftime_now: format too long");
        memcpy(fmt, f.u.s, f.n);
        fmt[f.n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(buf, sizeof buf, fmt, &tm);
        return jv_str(ja_strndup(&c->a, buf, k), k);
    }
    jfail(&c->a, "'%s' is undefined", name);
}

/* ---- tests ----------------------------------------------------------------------------- */

bool jtest(jctx *c, const char *name, jv v, const jargs *a)
{
    jv x = arg(a, 0, NULL, jv_undef(NULL, 0));
    if (!strcmp(name, "defined")) return v.t != JT_UNDEF;
    if (!strcmp(name, "undefined")) return v.t == JT_UNDEF;
    if (!strcmp(name, "none")) return v.t == JT_NONE;
    if (!strcmp(name, "boolean")) return v.t == JT_BOOL;
    if (!strcmp(name, "false")) return v.t == JT_BOOL && !v.u.b;
    if (!strcmp(name, "true")) return v.t == JT_BOOL && v.u.b;
    if (!strcmp(name, "integer")) return v.t == JT_INT;
    if (!strcmp(name, "float")) return v.t == JT_FLOAT;
    if (!strcmp(name, "number")) return jv_is_num(v);
    if (!strcmp(name, "string")) return v.t == JT_STR;
    if (!strcmp(name, "mapping")) return v.t == JT_DICT;
    if (!strcmp(name, "iterable")) return v.t == JT_STR || v.t == JT_LIST || v.t == JT_DICT || v.t == JT_UNDEF;
    if (!strcmp(name, "sequence"))
        return v.t == JT_STR || (v.t == JT_LIST && !(v.flag & JF_GEN)) || v.t == JT_DICT || v.t == JT_UNDEF;
    if (!strcmp(name, "callable")) return v.t == JT_FUNC;
    if (!strcmp(name, "escaped")) return v.t == JT_STR && (v.flag & JF_MARKUP);
    if (!strcmp(name, "sameas")) {
        if (v.t == JT_NONE || v.t == JT_BOOL || x.t == JT_NONE || x.t == JT_BOOL)
            return v.t == x.t && (v.t == JT_NONE || v.u.b == x.u.b);
        return v.t == x.t && jv_eq(v, x) && (v.t == JT_INT || v.u.l == x.u.l);
    }
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) return jv_eq(v, x);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jv_eq(v, x);
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) return jv_cmp(&c->a, v, x) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return jv_cmp(&c->a, v, x) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) return jv_cmp(&c->a, v, x) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return jv_cmp(&c->a, v, x) >= 0;
    if (!strcmp(name, "in")) {
        if (x.t == JT_STR) {
            if (v.t != JT_STR)
                jfail(&c->a, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
            for (size_t i = 0; i + v.n <= x.n; i++)
                if (!memcmp(x.u.s + i, v.u.s, v.n))
                    return true;
            return false;
        }
        jv items = jiter_list(c, x);
        if (x.t == JT_DICT) {
            jv tmp;
            return jd_get(x.u.d, v, &tmp);
        }
        for (size_t i = 0; i < items.u.l->n; i++)
            if (jv_eq(items.u.l->v[i], v))
                return true;
        return false;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (v.t != JT_INT && v.t != JT_BOOL)
            jfail(&c->a, "test '%s' needs an integer, got %s", name, jv_type_name(v));
        int64_t i = v.t == JT_BOOL ? v.u.b : v.u.i;
        if (name[0] == 'o') return (i % 2) != 0;
        if (name[0] == 'e') return (i % 2) == 0;
        int64_t d = to_int(c, x, "divisibleby");
        if (d == 0)
            jfail(&c->a, "integer division or modulo by zero");
        return d == -1 || i % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jv s = soft_str(c, v);
        return str_all(s, name[0] == 'l' ? 'l' : 'u');
    }
    jfail(&c->a, "No test named '%s'.", name);
}

/* ---- names known at parse time (jinja2 refuses unknown filters and tests when compiling) ---- */

static const char *const filter_names[] = {
    "tojson", "length", "count", "trim", "string", "default", "d", "join", "items", "upper", "lower", "capitalize",
    "title", "safe", "escape", "e", "forceescape", "list", "first", "last", "reverse", "selectattr", "rejectattr",
    "select", "reject", "map", "dictsort", "sort", "unique", "replace", "indent", "int", "float", "abs", "round",
    "min", "max", "sum", "attr", "format", "wordcount", "center", NULL};
static const char *const test_names[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "escaped", "sameas", "equalto", "eq", "==", "ne", "!=", "lt", "lessthan", "<",
    "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "lower", "upper", NULL};

bool jfilter_known(const char *name) { return in_names(filter_names, name); }
bool jtest_known(const char *name) { return in_names(test_names, name); }

/* ---- filters ----------------------------------------------------------------------------- */

static jv as_list(jctx *c, jv v) { return jiter_list(c, v); }

static jv attr_path(jctx *c, jv item, jv attr)
{
    /* jinja2 make_attrgetter: "a.b" and integer parts */
    if (attr.t == JT_INT)
        return jgetitem(c, item, attr);
    jv s = soft_str(c, attr);
    size_t i = 0;
    while (i <= s.n) {
        size_t j = i;
        while (j < s.n && s.u.s[j] != '.')
            j++;
        jv part = jv_str(s.u.s + i, j - i);
        bool num = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            num = num && part.u.s[k] >= '0' && part.u.s[k] <= '9';
        item = num ? jgetitem(c, item, jv_int(atoll(ja_strndup(&c->a, part.u.s, part.n))))
                   : jgetitem(c, item, jv_str(ja_strndup(&c->a, part.u.s, part.n), part.n));
        i = j + 1;
    }
    return item;
}

/* select/reject/selectattr/rejectattr */
static jv select_or_reject(jctx *c, jv seq, const jargs *a, bool attr, bool keep)
{
    if (!jv_truthy(seq)) /* jinja2: `if value:` before iterating */
        return gen(jl_new(&c->a, 0));
    jv items = as_list(c, seq);
    int base = attr ? 1 : 0;
    jv attrname = attr ? arg(a, 0, NULL, jv_none()) : jv_none();
    bool has_test = a->npos > base;
    const char *test = NULL;
    if (has_test) {
        jv t = a->pos[base];
        if (t.t != JT_STR)
            jfail(&c->a, "test name must be a string");
        test = ja_strndup(&c->a, t.u.s, t.n);
    }
    jargs ta = {.pos = a->npos > base + 1 ? a->pos + base + 1 : NULL, .npos = a->npos > base + 1 ? a->npos - base - 1 : 0};
    jlist *out = jl_new(&c->a, 0);
    for (size_t i = 0; i < items.u.l->n; i++) {
        jstep(c);
        jv it = items.u.l->v[i];
        jv val = attr ? attr_path(c, it, attrname) : it;
        bool ok = has_test ? jtest(c, test, val, &ta) : jv_truthy(val);
        if (ok == keep)
            jl_push(&c->a, out, it);
    }
    return gen(out);
}

static jv do_map(jctx *c, jv seq, const jargs *a)
{
    if (!jv_truthy(seq))
        return gen(jl_new(&c->a, 0));
    jv items = as_list(c, seq);
    jlist *out = jl_new(&c->a, items.u.l->n);
    if (a->npos == 0 && has_arg(a, -1, "attribute")) {
        jv attr = arg(a, -1, "attribute", jv_none());
        bool has_d = has_arg(a, -1, "default");
        jv d = arg(a, -1, "default", jv_none());
        for (size_t i = 0; i < items.u.l->n; i++) {
            jstep(c);
            jv v = attr_path(c, items.u.l->v[i], attr);
            out->v[out->n++] = v.t == JT_UNDEF && has_d ? d : v;
        }
        return gen(out);
    }
    if (a->npos == 0)
        jfail(&c->a, "map requires a filter argument");
    jv f = a->pos[0];
    if (f.t != JT_STR)
        jfail(&c->a, "map: filter name must be a string");
    const char *fname = ja_strndup(&c->a, f.u.s, f.n);
    jargs fa = {.pos = a->pos + 1, .npos = a->npos - 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
    for (size_t i = 0; i < items.u.l->n; i++) {
        jstep(c);
        out->v[out->n++] = jfilter(c, fname, items.u.l->v[i], &fa);
    }
    return gen(out);
}

static jv sort_key(jctx *c, jv v, bool case_sensitive)
{
    if (!case_sensitive && v.t == JT_STR)
        return str_case(c, v, CASE_LOWER);
    return v;
}

/* stable merge sort of a[0..n) by keys k[0..n) */
static void msort(jctx *c, jv *v, jv *k, size_t n, jv *tv, jv *tk, bool reverse)
{
    if (n < 2)
        return;
    size_t m = n / 2;
    msort(c, v, k, m, tv, tk, reverse);
    msort(c, v + m, k + m, n - m, tv, tk, reverse);
    size_t i = 0, j = m, o = 0;
    while (i < m && j < n) {
        jstep(c);
        int r = jv_cmp(&c->a, k[j], k[i]);
        bool take_right = reverse ? r > 0 : r < 0;
        if (take_right) {
            tv[o] = v[j];
            tk[o++] = k[j++];
        } else {
            tv[o] = v[i];
            tk[o++] = k[i++];
        }
    }
    while (i < m) {
        tv[o] = v[i];
        tk[o++] = k[i++];
    }
    while (j < n) {
        tv[o] = v[j];
        tk[o++] = k[j++];
    }
    memcpy(v, tv, n * sizeof(jv));
    memcpy(k, tk, n * sizeof(jv));
}

static jlist *sorted(jctx *c, jv seq, jv attr, bool case_sensitive, bool reverse)
{
    jv items = as_list(c, seq);
    size_t n = items.u.l->n;
    jlist *l = jl_new(&c->a, n);
    jv *k = ja_alloc(&c->a, (n + 1) * sizeof(jv)), *tv = ja_alloc(&c->a, (n + 1) * sizeof(jv)),
       *tk = ja_alloc(&c->a, (n + 1) * sizeof(jv));
    for (size_t i = 0; i < n; i++) {
        l->v[i] = items.u.l->v[i];
        jv key = attr.t == JT_NONE || attr.t == JT_UNDEF ? l->v[i] : attr_path(c, l->v[i], attr);
        k[i] = sort_key(c, key, case_sensitive);
    }
    l->n = n;
    msort(c, l->v, k, n, tv, tk, reverse);
    return l;
}

static jv tojson(jctx *c, jv v, const jargs *a)
{
    jv ind = arg(a, 1, "indent", jv_none());
    jv ea = arg(a, 0, "ensure_ascii", jv_bool(false));
    jv sep = arg(a, 2, "separators", jv_none());
    jv sk = arg(a, 3, "sort_keys", jv_bool(false));
    jjson_opts o = {.ensure_ascii = jv_truthy(ea), .sort_keys = jv_truthy(sk)};
    if (ind.t == JT_INT || ind.t == JT_BOOL) {
        int64_t n = ind.t == JT_BOOL ? ind.u.b : ind.u.i;
        if (n > 64)
            jfail(&c->a, "tojson indent too large");
        char *sp = ja_alloc(&c->a, (size_t)(n > 0 ? n : 0) + 1);
        for (int64_t i = 0; i < n; i++)
            sp[i] = ' ';
        o.indent = sp;
    } else if (ind.t == JT_STR) {
        o.indent = ja_strndup(&c->a, ind.u.s, ind.n);
    } else if (ind.t != JT_NONE) {
        jfail(&c->a, "tojson indent must be an integer or a string");
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (sep.t == JT_LIST && sep.u.l->n == 2 && sep.u.l->v[0].t == JT_STR && sep.u.l->v[1].t == JT_STR) {
        o.item_sep = ja_strndup(&c->a, sep.u.l->v[0].u.s, sep.u.l->v[0].n);
        o.key_sep = ja_strndup(&c->a, sep.u.l->v[1].u.s, sep.u.l->v[1].n);
    } else if (sep.t != JT_NONE) {
        jfail(&c->a, "tojson separators must be a pair of strings");
    }
    jbuf b = {0};
    jv_write_json(&c->a, &b, v, &o, 0);
    return mkstr(&b);
}

static int64_t length_of(jctx *c, jv v)
{
    switch ((jtype)v.t) {
    case JT_UNDEF: return 0;
    case JT_STR: return (int64_t)ju_len(v.u.s, v.n);
    case JT_LIST:
        if (v.flag & JF_GEN)
            jfail(&c->a, "object of type 'generator' has no len()");
        return (int64_t)v.u.l->n;
    case JT_DICT: return (int64_t)v.u.d->n;
    default: jfail(&c->a, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static jv do_indent(jctx *c, jv s, const jargs *a)
{
    jv w = arg(a, 0, "width", jv_int(4));
    bool first = jv_truthy(arg(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(arg(a, 2, "blank", jv_bool(false)));
    jv ind;
    if (w.t == JT_STR) {
        ind = w;
    } else {
        int64_t n = to_int(c, w, "indent");
        if (n > 4096)
            jfail(&c->a, "indent width too large");
        jbuf ib = {0};
        for (int64_t i = 0; i < n; i++)
            jb_puts(&c->a, &ib, " ");
        ind = mkstr(&ib);
    }
    jbuf sb = {0};
    jb_put(&c->a, &sb, s.u.s, s.n);
    jb_puts(&c->a, &sb, "\n");
    jlist *lines = str_splitlines(c, mkstr(&sb), false).u.l;
    jbuf b = {0};
    if (first)
        jb_put(&c->a, &b, ind.u.s, ind.n);
    for (size_t i = 0; i < lines->n; i++) {
        jv ln = lines->v[i];
        if (i) {
            jb_puts(&c->a, &b, "\n");
            if (blank || ln.n)
                jb_put(&c->a, &b, ind.u.s, ind.n);
        }
        jb_put(&c->a, &b, ln.u.s, ln.n);
    }
    return mkstr(&b);
}

static jv py_int(jctx *c, jv v, jv dflt)
{
    if (v.t == JT_INT)
        return v;
    if (v.t == JT_BOOL)
        return jv_int(v.u.b);
    if (v.t == JT_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18)
            return dflt;
        return jv_int((int64_t)v.u.f);
    }
    if (v.t == JT_STR) {
        jv s = strip(v, jv_none(), true, true);
        char *t = ja_strndup(&c->a, s.u.s, s.n), *end;
        bool ok = s.n > 0;
        for (size_t i = 0; i < s.n; i++)
            if (t[i] == '_')
                ok = false;
        if (ok) {
            long long x = strtoll(t, &end, 10);
            if (*end == 0)
                return jv_int(x);
            double d = strtod(t, &end);
            if (*end == 0 && isfinite(d) && fabs(d) < 9.2e18)
                return jv_int((int64_t)d);
        }
    }
    return dflt;
}

static jv py_float(jctx *c, jv v, jv dflt)
{
    if (v.t == JT_FLOAT)
        return v;
    if (v.t == JT_INT || v.t == JT_BOOL)
        return jv_float((double)(v.t == JT_BOOL ? v.u.b : v.u.i));
    if (v.t == JT_STR) {
        jv s = strip(v, jv_none(), true, true);
        char *t = ja_strndup(&c->a, s.u.s, s.n), *end;
        if (s.n) {
            double d = strtod(t, &end);
            if (*end == 0)
                return jv_float(d);
        }
    }
    return dflt;
}

jv jfilter(jctx *c, const char *f, jv v, const jargs *a)
{
    jstep(c);
    if (!strcmp(f, "tojson"))
        return tojson(c, v, a);
    if (!strcmp(f, "length") || !strcmp(f, "count"))
        return jv_int(length_of(c, v));
    if (!strcmp(f, "trim")) {
        jv ch = arg(a, 0, "chars", jv_none());
        return strip(soft_str(c, v), ch, true, true);
    }
    if (!strcmp(f, "string")) {
        jv s = soft_str(c, v);
        return s;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv d = arg(a, 0, "default_value", jv_str("", 0));
        bool boolean = jv_truthy(arg(a, 1, "boolean", jv_bool(false)));
        if (v.t == JT_UNDEF || (boolean && !jv_truthy(v)))
            return d;
        return v;
    }
    if (!strcmp(f, "join")) {
        jv sep = soft_str(c, arg(a, 0, "d", jv_str("", 0)));
        jv attr = arg(a, 1, "attribute", jv_none());
        jv items = as_list(c, v);
        jbuf b = {0};
        for (size_t i = 0; i < items.u.l->n; i++) {
            jstep(c);
            if (i)
                jb_put(&c->a, &b, sep.u.s, sep.n);
            jv it = attr.t == JT_NONE ? items.u.l->v[i] : attr_path(c, items.u.l->v[i], attr);
            jv_write_str(&c->a, &b, it);
        }
        return mkstr(&b);
    }
    if (!strcmp(f, "items")) {
        if (v.t == JT_UNDEF)
            return gen(jl_new(&c->a, 0));
        if (v.t != JT_DICT)
            jfail(&c->a, "Can only get item pairs from a mapping.");
        jargs none = {0};
        jv l = jcall_method(c, v, "items", &none);
        l.flag = JF_GEN;
        return l;
    }
    if (!strcmp(f, "upper")) return str_case(c, soft_str(c, v), CASE_UPPER);
    if (!strcmp(f, "lower")) return str_case(c, soft_str(c, v), CASE_LOWER);
    if (!strcmp(f, "capitalize")) return str_capitalize(c, soft_str(c, v));
    if (!strcmp(f, "title")) return filter_title(c, soft_str(c, v));
    if (!strcmp(f, "safe")) {
        jv s = soft_str(c, v);
        s.flag = JF_MARKUP;
        return s;
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e") || !strcmp(f, "forceescape")) {
        jv s = soft_str(c, v);
        if ((s.flag & JF_MARKUP) && f[0] != 'f')
            return s;
        jv x = jv_str("", 0), plain = jv_str(s.u.s, s.n);
        x.flag = JF_MARKUP;
        return jbinop(c, OP_ADD, x, plain); /* Markup('') + s escapes s */
    }
    if (!strcmp(f, "list")) {
        jv l = as_list(c, v);
        jlist *n = jl_new(&c->a, l.u.l->n);
        memcpy(n->v, l.u.l->v, l.u.l->n * sizeof(jv));
        n->n = l.u.l->n;
        return jv_list(n);
    }
    if (!strcmp(f, "first")) {
        jv l = as_list(c, v);
        return l.u.l->n ? l.u.l->v[0] : jv_undef("first", 5);
    }
    if (!strcmp(f, "last")) {
        if (v.t == JT_LIST && (v.flag & JF_GEN))
            jfail(&c->a, "'generator' object is not reversible");
        jv l = as_list(c, v);
        return l.u.l->n ? l.u.l->v[l.u.l->n - 1] : jv_undef("last", 4);
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == JT_STR)
            return jstr_slice(c, v, 0, 0, -1, false, false);
        jv l = as_list(c, v);
        jlist *n = jl_new(&c->a, l.u.l->n);
        for (size_t i = l.u.l->n; i-- > 0;)
            n->v[n->n++] = l.u.l->v[i];
        return gen(n);
    }
    if (!strcmp(f, "selectattr")) return select_or_reject(c, v, a, true, true);
    if (!strcmp(f, "rejectattr")) return select_or_reject(c, v, a, true, false);
    if (!strcmp(f, "select")) return select_or_reject(c, v, a, false, true);
    if (!strcmp(f, "reject")) return select_or_reject(c, v, a, false, false);
    if (!strcmp(f, "map")) return do_map(c, v, a);
    if (!strcmp(f, "dictsort")) {
        if (v.t != JT_DICT)
            jfail(&c->a, "dictsort: expected a mapping, got %s", jv_type_name(v));
        bool cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(false)));
        jv by = arg(a, 1, "by", jv_str("key", 3));
        bool rev = jv_truthy(arg(a, 2, "reverse", jv_bool(false)));
        bool by_value = by.t == JT_STR && by.n == 5 && !memcmp(by.u.s, "value", 5);
        jargs none = {0};
        jv pairs = jcall_method(c, v, "items", &none);
        return jv_list(sorted(c, pairs, jv_int(by_value ? 1 : 0), cs, rev));
    }
    if (!strcmp(f, "sort")) {
        bool rev = jv_truthy(arg(a, 0, "reverse", jv_bool(false)));
        bool cs = jv_truthy(arg(a, 1, "case_sensitive", jv_bool(false)));
        return jv_list(sorted(c, v, arg(a, 2, "attribute", jv_none()), cs, rev));
    }
    if (!strcmp(f, "unique")) {
        bool cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(false)));
        jv attr = arg(a, 1, "attribute", jv_none());
        jv items = as_list(c, v);
        jlist *out = jl_new(&c->a, 0), *keys = jl_new(&c->a, 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jv it = items.u.l->v[i];
            jv k = sort_key(c, attr.t == JT_NONE ? it : attr_path(c, it, attr), cs);
            bool seen = false;
            for (size_t j = 0; j < keys->n && !seen; j++) {
                jstep(c);
                seen = jv_eq(keys->v[j], k);
            }
            if (!seen) {
                jl_push(&c->a, keys, k);
                jl_push(&c->a, out, it);
            }
        }
        return gen(out);
    }
    if (!strcmp(f, "replace")) {
        jv s = soft_str(c, v);
        jv o = soft_str(c, arg(a, 0, "old", jv_str("", 0))), n = soft_str(c, arg(a, 1, "new", jv_str("", 0)));
        jv cnt = arg(a, 2, "count", jv_none());
        return str_replace(c, s, o, n, cnt.t == JT_NONE ? -1 : to_int(c, cnt, "replace"));
    }
    if (!strcmp(f, "indent")) return do_indent(c, soft_str(c, v), a);
    if (!strcmp(f, "int")) return py_int(c, v, arg(a, 0, "default", jv_int(0)));
    if (!strcmp(f, "float")) return py_float(c, v, arg(a, 0, "default", jv_float(0.0)));
    if (!strcmp(f, "abs")) {
        if (v.t == JT_FLOAT)
            return jv_float(fabs(v.u.f));
        if (v.t == JT_INT || v.t == JT_BOOL) {
            int64_t i = v.t == JT_BOOL ? v.u.b : v.u.i;
            if (i == INT64_MIN)
                jfail(&c->a, "integer overflow");
            return jv_int(i < 0 ? -i : i);
        }
        jfail(&c->a, "bad operand type for abs(): '%s'", jv_type_name(v));
    }
    if (!strcmp(f, "round")) {
        int64_t prec = to_int(c, arg(a, 0, "precision", jv_int(0)), "round");
        jv m = arg(a, 1, "method", jv_str("common", 6));
        if (!jv_is_num(v))
            jfail(&c->a, "round: expected a number, got %s", jv_type_name(v));
        double x = v.t == JT_FLOAT ? v.u.f : (double)(v.t == JT_BOOL ? v.u.b : v.u.i), p = pow(10.0, (double)prec);
        if (m.t == JT_STR && m.n == 4 && !memcmp(m.u.s, "ceil", 4))
            return jv_float(ceil(x * p) / p);
        if (m.t == JT_STR && m.n == 5 && !memcmp(m.u.s, "floor", 5))
            return jv_float(floor(x * p) / p);
        double r = nearbyint(x * p) / p; /* banker's rounding as Python's round() */
        return v.t == JT_FLOAT ? jv_float(r) : jv_int((int64_t)r);
    }
    if (!strcmp(f, "min") || !strcmp(f, "max")) {
        jv items = as_list(c, v);
        if (!items.u.l->n)
            return jv_undef(f, strlen(f));
        bool cs = jv_truthy(arg(a, 0, "case_sensitive", jv_bool(false)));
        jv attr = arg(a, 1, "attribute", jv_none());
        jv best = items.u.l->v[0];
        jv bk = sort_key(c, attr.t == JT_NONE ? best : attr_path(c, best, attr), cs);
        for (size_t i = 1; i < items.u.l->n; i++) {
            jv it = items.u.l->v[i];
            jv k = sort_key(c, attr.t == JT_NONE ? it : attr_path(c, it, attr), cs);
            int r = jv_cmp(&c->a, k, bk);
            if (f[1] == 'i' ? r < 0 : r > 0) {
                best = it;
                bk = k;
            }
        }
        return best;
    }
    if (!strcmp(f, "sum")) {
        jv attr = arg(a, 0, "attribute", jv_none());
        jv acc = arg(a, 1, "start", jv_int(0));
        jv items = as_list(c, v);
        for (size_t i = 0; i < items.u.l->n; i++)
            acc = jbinop(c, OP_ADD, acc, attr.t == JT_NONE ? items.u.l->v[i] : attr_path(c, items.u.l->v[i], attr));
        return acc;
    }
    if (!strcmp(f, "attr")) {
        jv n = need_str(c, arg(a, 0, "name", jv_none()), "attr");
        return jgetattr(c, v, ja_strndup(&c->a, n.u.s, n.n));
    }
    if (!strcmp(f, "format")) {
        jv s = soft_str(c, v);
        jlist *l = jl_new(&c->a, (size_t)a->npos);
        for (int i = 0; i < a->npos; i++)
            l->v[l->n++] = a->pos[i];
        jv t = jv_list(l);
        t.flag = JF_TUPLE;
        return jbinop(c, OP_MOD, s, t);
    }
    if (!strcmp(f, "wordcount")) {
        jv words = str_split(c, soft_str(c, v), jv_none(), -1);
        return jv_int((int64_t)words.u.l->n);
    }
    if (!strcmp(f, "center")) {
        int64_t w = to_int(c, arg(a, 0, "width", jv_int(80)), "center");
        return pad(c, soft_str(c, v), w, jv_none(), 0);
    }
    max_args(c, a, 0, f);
    jfail(&c->a, "No filter named '%s'.", f);
}
