/*
 * jinja_eval.c — runs a parsed template: statements, expressions, scopes,
 * and the entry points of jinja.h.
 *
 * Semantics are jinja2's, as transformers configures it (see jinja.h):
 *   - scopes: a for-loop iteration and a macro call get a new scope; `if`
 *     does not; `set` writes the innermost scope, so a `set` inside a loop
 *     is gone after the iteration (templates use namespace() to carry
 *     values out, which is why namespaces are the one mutable value);
 *   - undefined names and missing keys give Undefined, which prints as '',
 *     is false and iterates as empty, but whose attributes, items and
 *     arithmetic fail (UndefinedError);
 *   - `a.b` tries the Python attribute first (dict.items, str.strip) and
 *     then the key; `a['b']` tries the key first; the methods that mutate
 *     (list.append, dict.update, ...) fail, as the immutable sandbox does;
 *   - and/or return an operand, `x if c` without else is Undefined, `+` on a
 *     |safe string escapes the other operand (Markup).
 *
 * Bounds: every expression, statement and loop iteration is a step; the
 * depth of nested expressions and macro calls, the output and the arena are
 * capped (jinja.h). Errors longjmp to lg_jinja_render, which frees the arena.
 */
#include "engine/model/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

void jstep(jctx *c)
{
    if (++c->steps > c->lim.max_steps)
        jfail(&c->a, "chat template ran more than %llu steps", (unsigned long long)c->lim.max_steps);
}

static void enter(jctx *c)
{
    if (++c->depth > c->lim.max_depth)
        jfail(&c->a, "chat template nested deeper than %d", c->lim.max_depth);
}

_Noreturn static void fail_undef(jctx *c, jv u)
{
    if (u.u.s)
        jfail(&c->a, "'%.*s' is undefined", (int)(u.n > 200 ? 200 : u.n), u.u.s);
    jfail(&c->a, "undefined value used");
}

static jframe *new_frame(jctx *c, jframe *parent)
{
    jframe *f = ja_alloc(&c->a, sizeof *f);
    f->parent = parent;
    f->vars = jd_new(&c->a, 0);
    return f;
}

static jv lookup(jctx *c, const char *name)
{
    jv k = jv_cstr(name), v;
    for (jframe *f = c->frame; f; f = f->parent)
        if (jd_get(f->vars, k, &v))
            return v;
    if (jglobal_exists(name)) {
        jfunc *fn = ja_alloc(&c->a, sizeof *fn);
        fn->kind = JFN_GLOBAL;
        fn->name = name;
        jv r = {.t = JT_FUNC};
        r.u.fn = fn;
        return r;
    }
    return jv_undef(name, strlen(name));
}

static jv eval(jctx *c, const jnode *n);
static int exec(jctx *c, const jnode *n);

/* ---- items, attributes, slices -------------------------------------------------- */

static jv str_char(jctx *c, jv s, size_t cp)
{
    size_t o = ju_offset(s.u.s, s.n, cp), e = ju_offset(s.u.s + o, s.n - o, 1);
    (void)c;
    return jv_str(s.u.s + o, e);
}

jv jiter_list(jctx *c, jv v)
{
    switch ((jtype)v.t) {
    case JT_UNDEF: return jv_list(jl_new(&c->a, 0));
    case JT_LIST: return v;
    case JT_DICT: {
        jlist *l = jl_new(&c->a, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            l->v[l->n++] = v.u.d->k[i];
        return jv_list(l);
    }
    case JT_STR: {
        jlist *l = jl_new(&c->a, 0);
        for (size_t i = 0; i < v.n;) {
            uint32_t cp;
            int k = ju_dec((const unsigned char *)v.u.s + i, v.n - i, &cp);
            jstep(c);
            jl_push(&c->a, l, jv_str(v.u.s + i, (size_t)k));
            i += (size_t)k;
        }
        return jv_list(l);
    }
    default: jfail(&c->a, "'%s' object is not iterable", jv_type_name(v));
    }
}

static jv loop_attr(jctx *c, jloop *lp, const char *name)
{
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : jv_undef("previtem", 8);
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : jv_undef("nextitem", 8);
    if (!strcmp(name, "cycle")) {
        jfunc *fn = ja_alloc(&c->a, sizeof *fn);
        fn->kind = JFN_METHOD;
        fn->name = "cycle";
        fn->self.t = JT_LOOP;
        fn->self.u.lp = lp;
        jv r = {.t = JT_FUNC};
        r.u.fn = fn;
        return r;
    }
    return jv_undef(name, strlen(name));
}

jv jgetattr(jctx *c, jv obj, const char *name)
{
    jv v;
    switch ((jtype)obj.t) {
    case JT_UNDEF: fail_undef(c, obj);
    case JT_LOOP: return loop_attr(c, obj.u.lp, name);
    case JT_NS:
        if (jd_gets(obj.u.d, name, &v))
            return v;
        return jv_undef(name, strlen(name));
    case JT_DICT:
        if (jmethod_lookup(c, obj, name, &v))
            return v;
        if (jd_gets(obj.u.d, name, &v))
            return v;
        return jv_undef(name, strlen(name));
    default:
        if (jmethod_lookup(c, obj, name, &v))
            return v;
        return jv_undef(name, strlen(name));
    }
}

jv jgetitem(jctx *c, jv obj, jv key)
{
    jv v;
    switch ((jtype)obj.t) {
    case JT_UNDEF: fail_undef(c, obj);
    case JT_DICT:
        if (jd_get(obj.u.d, key, &v))
            return v;
        break;
    case JT_NS:
        if (key.t == JT_STR && jd_get(obj.u.d, key, &v))
            return v;
        break;
    case JT_LIST:
    case JT_STR:
        if (key.t == JT_INT || key.t == JT_BOOL) {
            int64_t i = key.t == JT_BOOL ? key.u.b : key.u.i;
            int64_t n = obj.t == JT_LIST ? (int64_t)obj.u.l->n : (int64_t)ju_len(obj.u.s, obj.n);
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return jv_undef(NULL, 0);
            return obj.t == JT_LIST ? obj.u.l->v[i] : str_char(c, obj, (size_t)i);
        }
        break;
    case JT_LOOP:
        if (key.t == JT_STR) {
            char *nm = ja_strndup(&c->a, key.u.s, key.n);
            return loop_attr(c, obj.u.lp, nm);
        }
        break;
    default: break;
    }
    if (key.t == JT_STR && obj.t != JT_NS) {
        char *nm = ja_strndup(&c->a, key.u.s, key.n);
        if (jmethod_lookup(c, obj, nm, &v))
            return v;
        return jv_undef(nm, key.n);
    }
    return jv_undef(NULL, 0);
}

static int64_t slice_arg(jctx *c, jv v, const char *what)
{
    if (v.t == JT_INT)
        return v.u.i;
    if (v.t == JT_BOOL)
        return v.u.b;
    jfail(&c->a, "slice %s must be an integer or None, not %s", what, jv_type_name(v));
}

/* Python's slice.indices(): fills start/stop/step for a sequence of length n. */
static void slice_indices(jctx *c, int64_t n, jv *s, jv *e, jv *st, int64_t *start, int64_t *stop, int64_t *step)
{
    *step = st->t == JT_NONE || st->t == JT_UNDEF ? 1 : slice_arg(c, *st, "step");
    if (*step == 0)
        jfail(&c->a, "slice step cannot be zero");
    bool neg = *step < 0;
    int64_t lo = neg ? -1 : 0, hi = neg ? n - 1 : n;
    if (s->t == JT_NONE || s->t == JT_UNDEF) {
        *start = neg ? hi : lo;
    } else {
        *start = slice_arg(c, *s, "start");
        if (*start < 0) {
            *start += n;
            if (*start < lo)
                *start = lo;
        } else if (*start > hi) {
            *start = hi;
        }
    }
    if (e->t == JT_NONE || e->t == JT_UNDEF) {
        *stop = neg ? lo : hi;
    } else {
        *stop = slice_arg(c, *e, "stop");
        if (*stop < 0) {
            *stop += n;
            if (*stop < lo)
                *stop = lo;
        } else if (*stop > hi) {
            *stop = hi;
        }
    }
}

static jv do_slice(jctx *c, jv obj, jv s, jv e, jv st)
{
    if (obj.t == JT_UNDEF)
        fail_undef(c, obj);
    if (obj.t != JT_LIST && obj.t != JT_STR)
        jfail(&c->a, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t start, stop, step;
    if (obj.t == JT_LIST) {
        slice_indices(c, (int64_t)obj.u.l->n, &s, &e, &st, &start, &stop, &step);
        jlist *l = jl_new(&c->a, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jstep(c);
            jl_push(&c->a, l, obj.u.l->v[i]);
        }
        jv r = jv_list(l);
        r.flag = obj.flag & JF_TUPLE;
        return r;
    }
    /* strings by code point */
    size_t ncp = ju_len(obj.u.s, obj.n);
    size_t *off = ja_alloc(&c->a, (ncp + 1) * sizeof(size_t));
    for (size_t i = 0, k = 0; k <= ncp; k++) {
        off[k] = i;
        if (i < obj.n) {
            uint32_t cp;
            i += (size_t)ju_dec((const unsigned char *)obj.u.s + i, obj.n - i, &cp);
        }
    }
    slice_indices(c, (int64_t)ncp, &s, &e, &st, &start, &stop, &step);
    if (step == 1) {
        if (stop <= start)
            return jv_str("", 0);
        return jv_str(obj.u.s + off[start], off[stop] - off[start]);
    }
    jbuf b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jstep(c);
        jb_put(&c->a, &b, obj.u.s + off[i], off[i + 1] - off[i]);
    }
    return jv_str(b.p ? b.p : "", b.n);
}

jv jstr_slice(jctx *c, jv s, int64_t start, int64_t stop, int64_t step, bool has_start, bool has_stop)
{
    return do_slice(c, s, has_start ? jv_int(start) : jv_none(), has_stop ? jv_int(stop) : jv_none(), jv_int(step));
}

/* ---- operators ----------------------------------------------------------------- */

static int64_t as_i(jv v) { return v.t == JT_BOOL ? v.u.b : v.u.i; }
static double as_f(jv v) { return v.t == JT_FLOAT ? v.u.f : (double)as_i(v); }

static void markup_escape(jctx *c, jbuf *b, jv s)
{
    for (size_t i = 0; i < s.n; i++) {
        const char *r = NULL;
        switch (s.u.s[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        }
        if (r)
            jb_puts(&c->a, b, r);
        else
            jb_put(&c->a, b, s.u.s + i, 1);
    }
}

_Noreturn static void bad_operands(jctx *c, const char *op, jv x, jv y)
{
    if (x.t == JT_UNDEF)
        fail_undef(c, x);
    if (y.t == JT_UNDEF)
        fail_undef(c, y);
    jfail(&c->a, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(x), jv_type_name(y));
}

static jv repeat(jctx *c, jv seq, jv k)
{
    int64_t n = as_i(k);
    if (n <= 0)
        return seq.t == JT_STR ? jv_str("", 0) : jv_list(jl_new(&c->a, 0));
    size_t unit = seq.t == JT_STR ? seq.n : seq.u.l->n * sizeof(jv);
    if (unit && (uint64_t)n > c->a.cap / unit)
        jfail(&c->a, "chat template used more than %zu bytes of memory", c->a.cap);
    if (seq.t == JT_STR) {
        jbuf b = {0};
        for (int64_t i = 0; i < n; i++) {
            jstep(c);
            jb_put(&c->a, &b, seq.u.s, seq.n);
        }
        jv r = jv_str(b.p ? b.p : "", b.n);
        r.flag = seq.flag & JF_MARKUP;
        return r;
    }
    jlist *l = jl_new(&c->a, 0);
    for (int64_t i = 0; i < n; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) {
            jstep(c);
            jl_push(&c->a, l, seq.u.l->v[j]);
        }
    jv r = jv_list(l);
    r.flag = seq.flag & JF_TUPLE;
    return r;
}

/* Python's '%' on a string: %s %r %d %i %f and %%, with a tuple or one value. */
static jv str_percent(jctx *c, jv fmt, jv args)
{
    jv *av = &args;
    size_t an = 1, ai = 0;
    if (args.t == JT_LIST && (args.flag & JF_TUPLE)) {
        av = args.u.l->v;
        an = args.u.l->n;
    }
    jbuf b = {0};
    for (size_t i = 0; i < fmt.n; i++) {
        char ch = fmt.u.s[i];
        if (ch != '%') {
            jb_put(&c->a, &b, &ch, 1);
            continue;
        }
        if (++i >= fmt.n)
            jfail(&c->a, "incomplete format");
        char f = fmt.u.s[i];
        if (f == '%') {
            jb_puts(&c->a, &b, "%");
            continue;
        }
        if (ai >= an)
            jfail(&c->a, "not enough arguments for format string");
        jv v = av[ai++];
        if (f == 's')
            jv_write_str(&c->a, &b, v);
        else if (f == 'r')
            jv_write_repr(&c->a, &b, v);
        else if ((f == 'd' || f == 'i') && jv_is_num(v))
            jb_printf(&c->a, &b, "%lld", (long long)(v.t == JT_FLOAT ? (int64_t)v.u.f : as_i(v)));
        else if (f == 'f' && jv_is_num(v))
            jb_printf(&c->a, &b, "%f", as_f(v));
        else
            jfail(&c->a, "unsupported format character '%c'", f);
    }
    if (ai < an)
        jfail(&c->a, "not all arguments converted during string formatting");
    return jv_str(b.p ? b.p : "", b.n);
}

jv jbinop(jctx *c, int op, jv x, jv y)
{
    static const char *names[] = {"+", "-", "*", "/", "//", "%", "**"};
    bool num = jv_is_num(x) && jv_is_num(y);
    bool ints = num && x.t != JT_FLOAT && y.t != JT_FLOAT;
    int64_t r;
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(as_i(x), as_i(y), &r))
                jfail(&c->a, "integer overflow");
            return jv_int(r);
        }
        if (num)
            return jv_float(as_f(x) + as_f(y));
        if (x.t == JT_STR && y.t == JT_STR) {
            jbuf b = {0};
            bool mk = (x.flag | y.flag) & JF_MARKUP;
            if (mk && !(x.flag & JF_MARKUP))
                markup_escape(c, &b, x);
            else
                jb_put(&c->a, &b, x.u.s, x.n);
            if (mk && !(y.flag & JF_MARKUP))
                markup_escape(c, &b, y);
            else
                jb_put(&c->a, &b, y.u.s, y.n);
            jv s = jv_str(b.p ? b.p : "", b.n);
            s.flag = mk ? JF_MARKUP : 0;
            return s;
        }
        if (x.t == JT_LIST && y.t == JT_LIST && (x.flag & JF_TUPLE) == (y.flag & JF_TUPLE)) {
            jlist *l = jl_new(&c->a, x.u.l->n + y.u.l->n);
            memcpy(l->v, x.u.l->v, x.u.l->n * sizeof(jv));
            memcpy(l->v + x.u.l->n, y.u.l->v, y.u.l->n * sizeof(jv));
            l->n = x.u.l->n + y.u.l->n;
            jv v = jv_list(l);
            v.flag = x.flag & JF_TUPLE;
            return v;
        }
        if (x.t == JT_STR && y.t != JT_UNDEF && x.t != JT_UNDEF)
            jfail(&c->a, "can only concatenate str (not \"%s\") to str", jv_type_name(y));
        bad_operands(c, "+", x, y);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(as_i(x), as_i(y), &r))
                jfail(&c->a, "integer overflow");
            return jv_int(r);
        }
        if (num)
            return jv_float(as_f(x) - as_f(y));
        bad_operands(c, "-", x, y);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(as_i(x), as_i(y), &r))
                jfail(&c->a, "integer overflow");
            return jv_int(r);
        }
        if (num)
            return jv_float(as_f(x) * as_f(y));
        if ((x.t == JT_STR || x.t == JT_LIST) && (y.t == JT_INT || y.t == JT_BOOL))
            return repeat(c, x, y);
        if ((y.t == JT_STR || y.t == JT_LIST) && (x.t == JT_INT || x.t == JT_BOOL))
            return repeat(c, y, x);
        bad_operands(c, "*", x, y);
    case OP_DIV:
        if (!num)
            bad_operands(c, "/", x, y);
        if (as_f(y) == 0)
            jfail(&c->a, "division by zero");
        return jv_float(as_f(x) / as_f(y));
    case OP_FDIV:
        if (!num)
            bad_operands(c, "//", x, y);
        if (as_f(y) == 0)
            jfail(&c->a, "integer division or modulo by zero");
        if (ints) {
            int64_t a = as_i(x), b = as_i(y);
            if (a == INT64_MIN && b == -1)
                jfail(&c->a, "integer overflow");
            int64_t q = a / b;
            if ((a % b != 0) && ((a < 0) != (b < 0)))
                q--;
            return jv_int(q);
        }
        return jv_float(floor(as_f(x) / as_f(y)));
    case OP_MOD:
        if (x.t == JT_STR)
            return str_percent(c, x, y);
        if (!num)
            bad_operands(c, "%", x, y);
        if (as_f(y) == 0)
            jfail(&c->a, "integer division or modulo by zero");
        if (ints) {
            int64_t a = as_i(x), b = as_i(y);
            if (b == -1)
                return jv_int(0);
            int64_t m = a % b;
            if (m != 0 && ((m < 0) != (b < 0)))
                m += b;
            return jv_int(m);
        } else {
            double a = as_f(x), b = as_f(y), m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0)))
                m += b;
            return jv_float(m);
        }
    case OP_POW:
        if (!num)
            bad_operands(c, "**", x, y);
        if (ints && as_i(y) >= 0) {
            int64_t base = as_i(x), e = as_i(y), acc = 1;
            while (e > 0) {
                jstep(c);
                if (e & 1 && __builtin_mul_overflow(acc, base, &acc))
                    jfail(&c->a, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base))
                    jfail(&c->a, "integer overflow");
            }
            return jv_int(acc);
        }
        return jv_float(pow(as_f(x), as_f(y)));
    }
    (void)names;
    jfail(&c->a, "unknown operator");
}

static bool contains(jctx *c, jv container, jv item)
{
    switch ((jtype)container.t) {
    case JT_UNDEF: return false;
    case JT_STR:
        if (item.t != JT_STR)
            jfail(&c->a, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (item.n == 0)
            return true;
        for (size_t i = 0; i + item.n <= container.n; i++) {
            if (!memcmp(container.u.s + i, item.u.s, item.n))
                return true;
        }
        return false;
    case JT_LIST:
        for (size_t i = 0; i < container.u.l->n; i++) {
            jstep(c);
            if (jv_eq(container.u.l->v[i], item))
                return true;
        }
        return false;
    case JT_DICT: {
        jv v;
        c->steps += container.u.d->n / 8;
        return jd_get(container.u.d, item, &v);
    }
    default: jfail(&c->a, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static bool compare(jctx *c, int op, jv x, jv y)
{
    switch (op) {
    case OP_EQ: return jv_eq(x, y);
    case OP_NE: return !jv_eq(x, y);
    case OP_LT: return jv_cmp(&c->a, x, y) < 0;
    case OP_LE: return jv_cmp(&c->a, x, y) <= 0;
    case OP_GT: return jv_cmp(&c->a, x, y) > 0;
    case OP_GE: return jv_cmp(&c->a, x, y) >= 0;
    case OP_IN: return contains(c, y, x);
    case OP_NOTIN: return !contains(c, y, x);
    }
    return false;
}

/* ---- calls ---------------------------------------------------------------------- */

static jv capture(jctx *c, const jnode *body, jframe *frame)
{
    jbuf *saved = c->out;
    jframe *sf = c->frame;
    jbuf b = {.max = c->lim.max_output};
    c->out = &b;
    c->frame = frame;
    exec(c, body);
    c->out = saved;
    c->frame = sf;
    return jv_str(b.p ? b.p : "", b.n);
}

static jv call_macro(jctx *c, const jnode *m, jframe *closure, const jargs *args, jv caller)
{
    enter(c);
    jframe *f = new_frame(c, closure);
    int np = m->nn;
    if (args->npos > np)
        jfail(&c->a, "macro '%s' takes not more than %d argument(s)", m->name ? m->name : "caller", np);
    bool *set = ja_alloc(&c->a, (size_t)(np ? np : 1) * sizeof(bool));
    for (int i = 0; i < args->npos; i++) {
        jd_set(&c->a, f->vars, jv_cstr(m->names[i]), args->pos[i]);
        set[i] = true;
    }
    for (int k = 0; k < args->nkw; k++) {
        int i = 0;
        while (i < np && strcmp(m->names[i], args->kwn[k]))
            i++;
        if (i == np)
            jfail(&c->a, "macro '%s' takes no keyword argument '%s'", m->name ? m->name : "caller", args->kwn[k]);
        jd_set(&c->a, f->vars, jv_cstr(m->names[i]), args->kwv[k]);
        set[i] = true;
    }
    if (caller.t == JT_FUNC)
        jd_set(&c->a, f->vars, jv_cstr("caller"), caller);
    jframe *sf = c->frame;
    c->frame = f;
    for (int i = 0; i < np; i++) {
        if (set[i])
            continue;
        jv d = m->kids[i] ? eval(c, m->kids[i]) : jv_undef(m->names[i], strlen(m->names[i]));
        jd_set(&c->a, f->vars, jv_cstr(m->names[i]), d);
    }
    c->frame = sf;
    jv r = capture(c, m->d, f);
    c->depth--;
    return r;
}

jv jcall_value(jctx *c, jv f, const jargs *args)
{
    if (f.t == JT_UNDEF)
        fail_undef(c, f);
    if (f.t != JT_FUNC)
        jfail(&c->a, "'%s' object is not callable", jv_type_name(f));
    jfunc *fn = f.u.fn;
    switch (fn->kind) {
    case JFN_GLOBAL: return jcall_global(c, fn->name, args);
    case JFN_METHOD: return jcall_method(c, fn->self, fn->name, args);
    case JFN_MACRO: return call_macro(c, fn->macro, fn->closure, args, jv_undef(NULL, 0));
    case JFN_CALLER: return call_macro(c, fn->macro, fn->closure, args, jv_undef(NULL, 0));
    }
    jfail(&c->a, "not callable");
}

static void eval_args(jctx *c, const jnode *n, jargs *a)
{
    a->npos = n->npos;
    a->nkw = n->nk - n->npos;
    a->pos = n->npos ? ja_alloc(&c->a, (size_t)n->npos * sizeof(jv)) : NULL;
    a->kwv = a->nkw ? ja_alloc(&c->a, (size_t)a->nkw * sizeof(jv)) : NULL;
    a->kwn = a->nkw ? n->names + n->npos : NULL;
    for (int i = 0; i < n->npos; i++)
        a->pos[i] = eval(c, n->kids[i]);
    for (int i = 0; i < a->nkw; i++)
        a->kwv[i] = eval(c, n->kids[n->npos + i]);
}

/* ---- expressions ---------------------------------------------------------------- */

static jv apply_filters(jctx *c, const jnode *f, jv hole)
{
    /* a chain parsed with a NULL innermost operand */
    jv saved = c->hole;
    c->hole = hole;
    jv r = eval(c, f);
    c->hole = saved;
    return r;
}

static jv eval(jctx *c, const jnode *n)
{
    jstep(c);
    enter(c);
    jv r;
    switch ((jnode_kind)n->kind) {
    case N_CONST: r = n->val; break;
    case N_NAME: r = lookup(c, n->name); break;
    case N_LIST:
    case N_TUPLE: {
        jlist *l = jl_new(&c->a, (size_t)n->nk);
        for (int i = 0; i < n->nk; i++)
            l->v[l->n++] = eval(c, n->kids[i]);
        r = jv_list(l);
        if (n->kind == N_TUPLE)
            r.flag = JF_TUPLE;
        break;
    }
    case N_DICT: {
        jdict *d = jd_new(&c->a, (size_t)n->nk / 2);
        for (int i = 0; i + 1 < n->nk; i += 2) {
            jv k = eval(c, n->kids[i]);
            if (k.t == JT_LIST && !(k.flag & JF_TUPLE))
                jfail(&c->a, "unhashable type: 'list'");
            if (k.t == JT_DICT || k.t == JT_NS)
                jfail(&c->a, "unhashable type: 'dict'");
            jd_set(&c->a, d, k, eval(c, n->kids[i + 1]));
        }
        r = jv_dict(d);
        break;
    }
    case N_GETATTR: r = jgetattr(c, eval(c, n->a), n->name); break;
    case N_GETITEM: {
        jv obj = eval(c, n->a);
        if (n->b->kind == N_SLICE) {
            const jnode *s = n->b;
            r = do_slice(c, obj, s->a ? eval(c, s->a) : jv_none(), s->b ? eval(c, s->b) : jv_none(),
                         s->c ? eval(c, s->c) : jv_none());
        } else {
            r = jgetitem(c, obj, eval(c, n->b));
        }
        break;
    }
    case N_SLICE: jfail(&c->a, "line %d: slice outside a subscript", n->line);
    case N_CALL: {
        jv f = eval(c, n->a);
        jargs a;
        eval_args(c, n, &a);
        r = jcall_value(c, f, &a);
        break;
    }
    case N_FILTER: {
        jv v = n->a ? eval(c, n->a) : c->hole;
        jargs a;
        eval_args(c, n, &a);
        r = jfilter(c, n->name, v, &a);
        break;
    }
    case N_TEST: {
        jv v = eval(c, n->a);
        jargs a;
        eval_args(c, n, &a);
        r = jv_bool(jtest(c, n->name, v, &a) != (n->op != 0));
        break;
    }
    case N_BINOP: r = jbinop(c, n->op, eval(c, n->a), eval(c, n->b)); break;
    case N_NEG:
    case N_POS: {
        jv v = eval(c, n->a);
        if (v.t == JT_UNDEF)
            fail_undef(c, v);
        if (!jv_is_num(v))
            jfail(&c->a, "bad operand type for unary %s: '%s'", n->kind == N_NEG ? "-" : "+", jv_type_name(v));
        if (n->kind == N_POS)
            r = v.t == JT_BOOL ? jv_int(v.u.b) : v;
        else if (v.t == JT_FLOAT)
            r = jv_float(-v.u.f);
        else {
            int64_t i = as_i(v);
            if (i == INT64_MIN)
                jfail(&c->a, "integer overflow");
            r = jv_int(-i);
        }
        break;
    }
    case N_NOT: r = jv_bool(!jv_truthy(eval(c, n->a))); break;
    case N_AND: {
        jv x = eval(c, n->a);
        r = jv_truthy(x) ? eval(c, n->b) : x;
        break;
    }
    case N_OR: {
        jv x = eval(c, n->a);
        r = jv_truthy(x) ? x : eval(c, n->b);
        break;
    }
    case N_CMP: {
        jv left = eval(c, n->a);
        r = jv_bool(true);
        for (int i = 0; i < n->nk; i++) {
            jv right = eval(c, n->kids[i]);
            if (!compare(c, (unsigned char)n->val.u.s[i], left, right)) {
                r = jv_bool(false);
                break;
            }
            left = right;
        }
        break;
    }
    case N_COND:
        if (jv_truthy(eval(c, n->a)))
            r = eval(c, n->b);
        else
            r = n->c ? eval(c, n->c) : jv_undef(NULL, 0);
        break;
    case N_CONCAT: {
        jbuf b = {0};
        for (int i = 0; i < n->nk; i++)
            jv_write_str(&c->a, &b, eval(c, n->kids[i]));
        r = jv_str(b.p ? b.p : "", b.n);
        break;
    }
    default: jfail(&c->a, "line %d: not an expression", n->line);
    }
    c->depth--;
    return r;
}

/* ---- statements ----------------------------------------------------------------- */

static void assign(jctx *c, const jnode *target, jv v)
{
    if (target->kind == N_NAME) {
        jd_set(&c->a, c->frame->vars, jv_cstr(target->name), v);
    } else if (target->kind == N_TUPLE) {
        jv items = jiter_list(c, v);
        if (items.u.l->n != (size_t)target->nk)
            jfail(&c->a, "%s values to unpack (expected %d, got %zu)",
                  items.u.l->n > (size_t)target->nk ? "too many" : "not enough", target->nk, items.u.l->n);
        for (int i = 0; i < target->nk; i++)
            assign(c, target->kids[i], items.u.l->v[i]);
    } else if (target->kind == N_NSREF) {
        jv ns = lookup(c, target->a->name);
        if (ns.t != JT_NS)
            jfail(&c->a, "line %d: cannot assign attribute on non-namespace object", target->line);
        if (target->name[0] == '_')
            jfail(&c->a, "chat templates cannot store underscore-prefixed attributes on a namespace");
        jd_set(&c->a, ns.u.d, jv_cstr(target->name), v);
    } else {
        jfail(&c->a, "line %d: cannot assign", target->line);
    }
}

static void emit(jctx *c, jv v)
{
    if (v.t == JT_STR)
        jb_put(&c->a, c->out, v.u.s, v.n);
    else
        jv_write_str(&c->a, c->out, v);
}

static int exec_for(jctx *c, const jnode *n)
{
    jlist *items = jiter_list(c, eval(c, n->b)).u.l;
    jframe *outer = c->frame;
    if (n->c) { /* the `if` filter sees the target, not `loop` */
        jlist *kept = jl_new(&c->a, 0);
        for (size_t i = 0; i < items->n; i++) {
            jstep(c);
            c->frame = new_frame(c, outer);
            assign(c, n->a, items->v[i]);
            if (jv_truthy(eval(c, n->c)))
                jl_push(&c->a, kept, items->v[i]);
        }
        c->frame = outer;
        items = kept;
    }
    /* one loop state and one scope, reset per iteration, unless a macro
     * defined in the body closed over the scope (then a fresh one) */
    jloop *lp = ja_alloc(&c->a, sizeof *lp);
    lp->items = items;
    jv lv = {.t = JT_LOOP};
    lv.u.lp = lp;
    jframe *f = NULL;
    for (size_t i = 0; i < items->n; i++) {
        jstep(c);
        lp->i = i;
        if (!f || f->captured)
            f = new_frame(c, outer);
        else
            f->vars->n = 0;
        c->frame = f;
        jd_set(&c->a, f->vars, jv_cstr("loop"), lv);
        assign(c, n->a, items->v[i]);
        int fl = exec(c, n->d);
        c->frame = outer;
        if (fl == FLOW_BREAK)
            break;
    }
    c->frame = outer;
    if (items->n == 0 && n->nk)
        return exec(c, n->kids[0]);
    return FLOW_NORMAL;
}

static int exec(jctx *c, const jnode *n)
{
    jstep(c);
    switch ((jnode_kind)n->kind) {
    case S_BODY:
        for (int i = 0; i < n->nk; i++) {
            int fl = exec(c, n->kids[i]);
            if (fl != FLOW_NORMAL)
                return fl;
        }
        return FLOW_NORMAL;
    case S_TEXT: jb_put(&c->a, c->out, n->val.u.s, n->val.n); return FLOW_NORMAL;
    case S_PRINT: emit(c, eval(c, n->a)); return FLOW_NORMAL;
    case S_IF:
        for (int i = 0; i + 1 < n->nk; i += 2)
            if (jv_truthy(eval(c, n->kids[i])))
                return exec(c, n->kids[i + 1]);
        return n->a ? exec(c, n->a) : FLOW_NORMAL;
    case S_FOR: {
        enter(c);
        int fl = exec_for(c, n);
        c->depth--;
        return fl;
    }
    case S_SET: assign(c, n->a, eval(c, n->b)); return FLOW_NORMAL;
    case S_SETBLOCK: {
        jv v = capture(c, n->d, c->frame);
        if (n->b)
            v = apply_filters(c, n->b, v);
        assign(c, n->a, v);
        return FLOW_NORMAL;
    }
    case S_FILTERBLOCK: {
        jv v = capture(c, n->d, c->frame);
        emit(c, apply_filters(c, n->b, v));
        return FLOW_NORMAL;
    }
    case S_MACRO: {
        jfunc *fn = ja_alloc(&c->a, sizeof *fn);
        fn->kind = JFN_MACRO;
        fn->name = n->name;
        fn->macro = n;
        fn->closure = c->frame;
        c->frame->captured = true;
        jv v = {.t = JT_FUNC};
        v.u.fn = fn;
        jd_set(&c->a, c->frame->vars, jv_cstr(n->name), v);
        return FLOW_NORMAL;
    }
    case S_CALLBLOCK: {
        jfunc *cl = ja_alloc(&c->a, sizeof *cl);
        cl->kind = JFN_CALLER;
        cl->name = "caller";
        cl->macro = n; /* params in names/kids, body in d */
        cl->closure = c->frame;
        c->frame->captured = true;
        jv caller = {.t = JT_FUNC};
        caller.u.fn = cl;
        const jnode *call = n->a;
        jv f = eval(c, call->a);
        jargs a;
        eval_args(c, call, &a);
        if (f.t != JT_FUNC || f.u.fn->kind != JFN_MACRO)
            jfail(&c->a, "line %d: {%% call %%} needs a macro", n->line);
        emit(c, call_macro(c, f.u.fn->macro, f.u.fn->closure, &a, caller));
        return FLOW_NORMAL;
    }
    case S_WITH: {
        jframe *outer = c->frame;
        jv *vals = ja_alloc(&c->a, (size_t)(n->nk / 2 + 1) * sizeof(jv));
        for (int i = 0; i + 1 < n->nk; i += 2)
            vals[i / 2] = eval(c, n->kids[i + 1]);
        c->frame = new_frame(c, outer);
        for (int i = 0; i + 1 < n->nk; i += 2)
            assign(c, n->kids[i], vals[i / 2]);
        int fl = exec(c, n->d);
        c->frame = outer;
        return fl;
    }
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    default: jfail(&c->a, "line %d: not a statement", n->line);
    }
}

/* ---- entry points ---------------------------------------------------------------- */

int lg_jinja_parse(const char *text, size_t len, lg_jinja **out, lg_err *err)
{
    *out = NULL;
    lg_jinja *t = calloc(1, sizeof *t);
    if (!t)
        return lg_fail(err, "out of memory");
    /* the AST of a template is a few times its text */
    size_t cap = len > SIZE_MAX / 64 ? SIZE_MAX : len * 64 + (4u << 20);
    ja_init(&t->a, cap, err);
    if (setjmp(t->a.jb)) {
        ja_free(&t->a);
        free(t);
        return -1;
    }
    jtoks toks = {0};
    jlex(&t->a, text, len, &toks);
    jparse(t, &toks);
    t->a.err = NULL;
    *out = t;
    return 0;
}

void lg_jinja_free(lg_jinja *t)
{
    if (!t)
        return;
    ja_free(&t->a);
    free(t);
}

bool lg_jinja_iterates_content(const lg_jinja *t) { return t->iterates_content; }

int lg_jinja_render(const lg_jinja *t, const json_t *vars, const lg_jinja_limits *lim, char **out,
                    size_t *out_len, lg_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (vars && !json_is_object(vars))
        return lg_fail(err, "chat template variables must be a JSON object");
    jctx *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    c->t = t;
    c->lim = lim ? *lim : (lg_jinja_limits){0};
    if (!c->lim.max_output) c->lim.max_output = 32u << 20;
    if (!c->lim.max_memory) c->lim.max_memory = 256u << 20;
    if (!c->lim.max_steps) c->lim.max_steps = 50000000;
    if (!c->lim.max_depth) c->lim.max_depth = 256;
    ja_init(&c->a, c->lim.max_memory, err);
    if (setjmp(c->a.jb)) {
        ja_free(&c->a);
        free(c);
        return -1;
    }
    jframe *root = ja_alloc(&c->a, sizeof *root);
    root->vars = vars ? jv_from_json(&c->a, vars).u.d : jd_new(&c->a, 0);
    c->root = c->frame = root;
    jbuf *b = ja_alloc(&c->a, sizeof *b);
    b->max = c->lim.max_output;
    c->out = b;
    exec(c, t->root);
    char *s = malloc(b->n + 1);
    if (!s) {
        ja_free(&c->a);
        free(c);
        return lg_fail(err, "out of memory");
    }
    if (b->n)
        memcpy(s, b->p, b->n);
    s[b->n] = 0;
    if (out_len)
        *out_len = b->n;
    *out = s;
    ja_free(&c->a);
    free(c);
    return 0;
}
