/*
 * jinja_internal.h — what the jinja*.c files share: the arena, the value
 * type, tokens, AST nodes and the render context. Not for use outside
 * engine/model/jinja*.c (the API is jinja.h).
 *
 * Errors unwind with longjmp to the entry point (lg_jinja_parse or
 * lg_jinja_render): every allocation of a parse or a render comes from one
 * arena that is freed as a whole, so nothing leaks on the way out, and the
 * evaluator needs no error checks after each call. Only the arena and the
 * final output buffer are malloc'd; both are owned by the entry point.
 */
#ifndef LG_JINJA_INTERNAL_H
#define LG_JINJA_INTERNAL_H

#include <setjmp.h>

#include "engine/model/jinja.h"

/* ---- arena ---------------------------------------------------------------- */

typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t total, cap; /* bytes malloc'd, the most allowed */
    jmp_buf jb;        /* where jfail() goes */
    lg_err *err;
} jarena;

void ja_init(jarena *a, size_t cap, lg_err *err);
void ja_free(jarena *a);
void *ja_alloc(jarena *a, size_t n);   /* zeroed, 8-aligned; fails (longjmp) past cap */
char *ja_strndup(jarena *a, const char *s, size_t n);
_Noreturn void jfail(jarena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A growable byte buffer in the arena. */
typedef struct jbuf {
    char *p;
    size_t n, cap, max; /* max: 0 = only the arena's cap */
} jbuf;
void jb_put(jarena *a, jbuf *b, const char *s, size_t n);
static inline void jb_puts(jarena *a, jbuf *b, const char *s) { jb_put(a, b, s, strlen(s)); }
void jb_printf(jarena *a, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- values ----------------------------------------------------------------- */

typedef enum jtype {
    JT_UNDEF = 0, /* jinja2's Undefined: prints as '', false, iterates as empty */
    JT_NONE,
    JT_BOOL,
    JT_INT,
    JT_FLOAT,
    JT_STR,  /* UTF-8 bytes p[0..n), not NUL-terminated; flag JF_MARKUP: |safe */
    JT_LIST, /* flag JF_TUPLE: a tuple (prints as (a, b)) */
    JT_DICT, /* insertion ordered */
    JT_NS,   /* namespace(): a dict whose attributes can be set */
    JT_FUNC, /* a global function, a bound method or a macro */
    JT_LOOP, /* the `loop` variable of a for loop */
} jtype;

enum { JF_TUPLE = 1, JF_MARKUP = 2, JF_GEN = 4 /* a list standing for a Python generator */ };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t t;
    uint8_t flag;
    size_t n; /* JT_STR and JT_UNDEF (name) length */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* JT_STR; JT_UNDEF: the missing name (may be NULL) */
        jlist *l;
        jdict *d;
        jfunc *fn;
        jloop *lp;
    } u;
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
};
struct jdict {
    jv *k, *v;
    size_t n, cap;
};

typedef struct jnode jnode;
struct jframe;

typedef enum jfunc_kind { JFN_GLOBAL, JFN_METHOD, JFN_MACRO, JFN_CALLER } jfunc_kind;
struct jfunc {
    jfunc_kind kind;
    const char *name; /* global or method name */
    jv self;          /* JFN_METHOD: the object */
    const jnode *macro;
    struct jframe *closure; /* JFN_CALLER: frame of the {% call %} */
};

struct jloop {
    jlist *items;
    size_t i; /* index0 */
};

static inline jv jv_undef(const char *name, size_t n) { jv v = {.t = JT_UNDEF, .n = n}; v.u.s = name; return v; }
static inline jv jv_none(void) { return (jv){.t = JT_NONE}; }
static inline jv jv_bool(bool b) { jv v = {.t = JT_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.t = JT_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.t = JT_FLOAT}; v.u.f = f; return v; }
static inline jv jv_str(const char *s, size_t n) { jv v = {.t = JT_STR, .n = n}; v.u.s = s; return v; }
static inline jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }
static inline jv jv_list(jlist *l) { jv v = {.t = JT_LIST}; v.u.l = l; return v; }
static inline jv jv_dict(jdict *d) { jv v = {.t = JT_DICT}; v.u.d = d; return v; }
static inline bool jv_is_num(jv v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }

jlist *jl_new(jarena *a, size_t cap);
void jl_push(jarena *a, jlist *l, jv v);
jdict *jd_new(jarena *a, size_t cap);
void jd_set(jarena *a, jdict *d, jv k, jv v); /* replaces an equal key */
bool jd_get(const jdict *d, jv k, jv *out);
bool jd_gets(const jdict *d, const char *k, jv *out);

const char *jv_type_name(jv v); /* Python's: 'str', 'int', 'dict', 'NoneType', ... */
bool jv_truthy(jv v);
bool jv_eq(jv a, jv b);
/* a < b as Python does for numbers, strings and lists; other types fail. */
int jv_cmp(jarena *a, jv x, jv y);
void jv_write_str(jarena *a, jbuf *b, jv v);  /* Python str() */
void jv_write_repr(jarena *a, jbuf *b, jv v); /* Python repr() */
jv jv_to_str(jarena *a, jv v);                /* str() as a value (strings returned as they are) */
typedef struct jjson_opts {
    const char *indent; /* NULL: none */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} jjson_opts;
void jv_write_json(jarena *a, jbuf *b, jv v, const jjson_opts *o, int level);
jv jv_from_json(jarena *a, const json_t *j);
void jfmt_float(double f, char out[40]); /* Python repr(float) */

/* UTF-8 */
size_t ju_len(const char *s, size_t n);                        /* code points */
size_t ju_offset(const char *s, size_t n, size_t cp);          /* byte offset of code point cp (clamped) */
int ju_dec(const unsigned char *s, size_t n, uint32_t *cp);    /* bytes used (1 on bad) */
void ju_enc(jarena *a, jbuf *b, uint32_t cp);
bool ju_space(uint32_t c);                                     /* Python str.isspace() */

/* ---- tokens (jinja_lex.c) ---------------------------------------------------- */

typedef enum jtok_kind {
    TK_EOF = 0,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP, /* s/n: the operator text */
} jtok_kind;

typedef struct jtok {
    jtok_kind k;
    int line;
    const char *s; /* text (decoded for strings and data) */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jtoks {
    jtok *v;
    size_t n, cap;
} jtoks;

void jlex(jarena *a, const char *text, size_t len, jtoks *out);

/* ---- AST (jinja_parse.c) ----------------------------------------------------- */

typedef enum jnode_kind {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_CMP, N_COND, N_CONCAT, N_NSREF,
    /* statements */
    S_BODY, S_TEXT, S_PRINT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK, S_BREAK,
    S_CONTINUE, S_WITH,
} jnode_kind;

/* Operators of N_BINOP / N_CMP */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

struct jnode {
    uint8_t kind;
    uint8_t op;  /* operator; N_TEST: negated; S_FOR: has filter */
    int line;
    jnode *a, *b, *c, *d;
    jnode **kids; /* items, args (positional then keyword), body statements */
    int nk;
    int npos;           /* N_CALL/N_FILTER/N_TEST: positional args in kids[0..npos) */
    const char **names; /* keyword names for kids[npos..nk); S_MACRO: params; targets */
    int nn;
    const char *name; /* N_NAME, N_GETATTR, N_FILTER, N_TEST, S_MACRO, N_NSREF attr */
    jv val;           /* N_CONST */
};

struct lg_jinja {
    jarena a; /* holds the AST and the token texts */
    jnode *root;
    bool iterates_content;
};

/* Parses tokens into t->root; fails via longjmp on t->a. */
void jparse(lg_jinja *t, const jtoks *toks);

/* ---- render context (jinja_eval.c, jinja_filters.c) -------------------------- */

typedef struct jframe {
    struct jframe *parent;
    jdict *vars;
    bool captured; /* a macro or caller closes over it: a loop must not reuse it */
} jframe;

typedef struct jctx {
    jarena a;
    const lg_jinja *t;
    lg_jinja_limits lim;
    jbuf *out;     /* where text goes now (captures swap it) */
    jframe *root;  /* the template's globals and top-level variables */
    jframe *frame; /* the innermost scope */
    jv hole;       /* the value a filter chain of a filter block or block set applies to */
    uint64_t steps;
    int depth;
} jctx;

typedef struct jargs {
    jv *pos;
    int npos;
    const char **kwn;
    jv *kwv;
    int nkw;
} jargs;

void jstep(jctx *c);
/* Filters, tests, globals, methods (jinja_filters.c). */
jv jfilter(jctx *c, const char *name, jv v, const jargs *args);
bool jtest(jctx *c, const char *name, jv v, const jargs *args);
bool jglobal_exists(const char *name);
bool jfilter_known(const char *name); /* the parser refuses other names, as jinja2's compiler does */
bool jtest_known(const char *name);
jv jcall_global(jctx *c, const char *name, const jargs *args);
/* Attribute of an object that is a method (str.strip, dict.items, ...);
 * false when the type has no such method. Fails on mutating methods. */
bool jmethod_lookup(jctx *c, jv self, const char *name, jv *out);
jv jcall_method(jctx *c, jv self, const char *name, const jargs *args);
/* The evaluator's calls back (jinja_eval.c). */
jv jcall_value(jctx *c, jv f, const jargs *args);
jv jgetattr(jctx *c, jv obj, const char *name);
jv jgetitem(jctx *c, jv obj, jv key);
jv jiter_list(jctx *c, jv v); /* list of the items `for` would see; fails on non-iterables */
jv jbinop(jctx *c, int op, jv x, jv y);
jv jstr_slice(jctx *c, jv s, int64_t start, int64_t stop, int64_t step, bool has_start, bool has_stop);

#endif
