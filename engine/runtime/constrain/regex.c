/*
 * regex.c — regex syntax -> AST -> byte NFA fragment (see regex.h).
 *
 * A recursive-descent parser (depth bounded by max_depth) builds a small
 * AST in an arena; classes are sorted, merged code point ranges. A second
 * pass resolves anchors the way derivre does (only at the ends; in search
 * mode unanchored sides are padded with (?s:.*), per alternative when the
 * alternatives disagree). Emission is Thompson's construction; a class
 * becomes the UTF-8 byte sequences of its ranges (the usual split of a code
 * point range into ranges of equal encoded length and common prefixes).
 * Repetitions are expanded (a{3,5} = aaa(a(a)?)?), bounded by the NFA
 * budget, so `(a{1000}){1000}` fails on max_nfa_states quickly.
 */
#include "engine/runtime/constrain/regex.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

enum { RX_EMPTY, RX_CLASS, RX_CONCAT, RX_ALT, RX_REPEAT, RX_BOL, RX_EOL };

typedef struct rx_node {
    int kind;
    uint32_t *r;          /* CLASS: [lo0, hi0, lo1, hi1, ...] sorted, merged */
    int nr;
    struct rx_node **k;   /* CONCAT / ALT children; REPEAT: k[0] */
    int nk;
    int min, max;         /* REPEAT; max -1 = unbounded */
} rx_node;

typedef struct rx_parser {
    const char *s;
    size_t n, i;
    bool icase, dotall;
    bool unicode;         /* \d \w are Unicode (Rust regex), else ASCII (JSON Schema) */
    int depth, max_depth;
    rx_node **all;
    size_t nall, capall;
    lg_cbudget *b;
    const char *pp;       /* param prefix */
    bool failed;
} rx_parser;

static rx_node *rx_fail(rx_parser *p, size_t at, int code, const char *msg)
{
    if (!p->failed) {
        char param[256];
        snprintf(param, sizeof param, "%s%soffset %zu", p->pp ? p->pp : "", p->pp && *p->pp ? " " : "", at);
        lg_cfail(p->b, code, param, "regex: %s", msg);
        p->failed = true;
    }
    return NULL;
}

static rx_node *rx_new(rx_parser *p, int kind)
{
    if (p->failed)
        return NULL;
    if (p->nall == p->capall) {
        size_t nc = p->capall ? p->capall * 2 : 64;
        rx_node **na = realloc(p->all, nc * sizeof *na);
        if (!na)
            return rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
        p->all = na;
        p->capall = nc;
    }
    rx_node *x = calloc(1, sizeof *x);
    if (!x)
        return rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
    x->kind = kind;
    p->all[p->nall++] = x;
    return x;
}

static int rx_add_kid(rx_parser *p, rx_node *x, rx_node *kid)
{
    rx_node **nk = realloc(x->k, (size_t)(x->nk + 1) * sizeof *nk);
    if (!nk) {
        rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
        return -1;
    }
    x->k = nk;
    x->k[x->nk++] = kid;
    return 0;
}

/* ---- classes ------------------------------------------------------------------------- */

static int rx_cls_add(rx_parser *p, rx_node *c, uint32_t lo, uint32_t hi)
{
    if (lo > hi)
        return 0;
    uint32_t *nr = realloc(c->r, (size_t)(c->nr + 1) * 2 * sizeof *nr);
    if (!nr) {
        rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
        return -1;
    }
    c->r = nr;
    c->r[2 * c->nr] = lo;
    c->r[2 * c->nr + 1] = hi;
    c->nr++;
    return 0;
}

static int rx_cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static void rx_cls_norm(rx_node *c)
{
    if (c->nr == 0)
        return;
    qsort(c->r, (size_t)c->nr, 2 * sizeof(uint32_t), rx_cmp_range);
    int m = 0;
    for (int i = 0; i < c->nr; i++) {
        uint32_t lo = c->r[2 * i], hi = c->r[2 * i + 1];
        if (m && lo <= c->r[2 * (m - 1) + 1] + 1) {
            if (hi > c->r[2 * (m - 1) + 1])
                c->r[2 * (m - 1) + 1] = hi;
        } else {
            c->r[2 * m] = lo;
            c->r[2 * m + 1] = hi;
            m++;
        }
    }
    c->nr = m;
}

static int rx_cls_negate(rx_parser *p, rx_node *c)
{
    rx_cls_norm(c);
    uint32_t *old = c->r;
    int n = c->nr;
    c->r = NULL;
    c->nr = 0;
    uint32_t next = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (old[2 * i] > next)
            rc = rx_cls_add(p, c, next, old[2 * i] - 1);
        next = old[2 * i + 1] + 1;
    }
    if (!rc && next <= 0x10FFFF)
        rc = rx_cls_add(p, c, next, 0x10FFFF);
    free(old);
    return rc;
}

static int rx_cls_add_cls(rx_parser *p, rx_node *c, const uint32_t *r, int nr)
{
    for (int i = 0; i < nr; i++)
        if (rx_cls_add(p, c, r[2 * i], r[2 * i + 1]))
            return -1;
    return 0;
}

static const uint32_t RX_DIGIT[] = {'0', '9'};
static const uint32_t RX_WORD[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const uint32_t RX_SPACE[] = {0x09, 0x0D, 0x20, 0x20, 0x85, 0x85, 0xA0, 0xA0, 0x1680, 0x1680,
                                    0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F,
                                    0x3000, 0x3000};

/* Unicode general categories, computed once from utf8proc. */
static struct {
    uint32_t *r;
    int n, cap;
} rx_gc[32];
static pthread_once_t rx_gc_once = PTHREAD_ONCE_INIT;
static bool rx_gc_ok;

static void rx_gc_build(void)
{
    int prev = -1;
    uint32_t start = 0;
    rx_gc_ok = true;
    for (uint32_t cp = 0; cp <= 0x110000; cp++) {
        int cat = cp <= 0x10FFFF ? (int)utf8proc_category((utf8proc_int32_t)cp) : -2;
        if (cat != prev) {
            if (prev >= 0 && prev < 32) {
                if (rx_gc[prev].n == rx_gc[prev].cap) {
                    int nc = rx_gc[prev].cap ? rx_gc[prev].cap * 2 : 64;
                    uint32_t *nr = realloc(rx_gc[prev].r, (size_t)nc * 2 * sizeof *nr);
                    if (!nr) {
                        rx_gc_ok = false;
                        return;
                    }
                    rx_gc[prev].r = nr;
                    rx_gc[prev].cap = nc;
                }
                rx_gc[prev].r[2 * rx_gc[prev].n] = start;
                rx_gc[prev].r[2 * rx_gc[prev].n + 1] = cp - 1;
                rx_gc[prev].n++;
            }
            prev = cat;
            start = cp;
        }
    }
}

static const struct {
    const char *name;
    int cats[8];
} RX_GC_NAMES[] = {
    {"L", {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM, UTF8PROC_CATEGORY_LO, -1}},
    {"Letter", {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM, UTF8PROC_CATEGORY_LO, -1}},
    {"Lu", {UTF8PROC_CATEGORY_LU, -1}}, {"Ll", {UTF8PROC_CATEGORY_LL, -1}}, {"Lt", {UTF8PROC_CATEGORY_LT, -1}},
    {"Lm", {UTF8PROC_CATEGORY_LM, -1}}, {"Lo", {UTF8PROC_CATEGORY_LO, -1}},
    {"M", {UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME, -1}},
    {"Mn", {UTF8PROC_CATEGORY_MN, -1}}, {"Mc", {UTF8PROC_CATEGORY_MC, -1}}, {"Me", {UTF8PROC_CATEGORY_ME, -1}},
    {"N", {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO, -1}},
    {"Number", {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO, -1}},
    {"Nd", {UTF8PROC_CATEGORY_ND, -1}}, {"Nl", {UTF8PROC_CATEGORY_NL, -1}}, {"No", {UTF8PROC_CATEGORY_NO, -1}},
    {"P", {UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE, UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO, -1}},
    {"Pc", {UTF8PROC_CATEGORY_PC, -1}}, {"Pd", {UTF8PROC_CATEGORY_PD, -1}}, {"Ps", {UTF8PROC_CATEGORY_PS, -1}},
    {"Pe", {UTF8PROC_CATEGORY_PE, -1}}, {"Pi", {UTF8PROC_CATEGORY_PI, -1}}, {"Pf", {UTF8PROC_CATEGORY_PF, -1}},
    {"Po", {UTF8PROC_CATEGORY_PO, -1}},
    {"S", {UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK, UTF8PROC_CATEGORY_SO, -1}},
    {"Sm", {UTF8PROC_CATEGORY_SM, -1}}, {"Sc", {UTF8PROC_CATEGORY_SC, -1}}, {"Sk", {UTF8PROC_CATEGORY_SK, -1}},
    {"So", {UTF8PROC_CATEGORY_SO, -1}},
    {"Z", {UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZL, UTF8PROC_CATEGORY_ZP, -1}},
    {"Zs", {UTF8PROC_CATEGORY_ZS, -1}}, {"Zl", {UTF8PROC_CATEGORY_ZL, -1}}, {"Zp", {UTF8PROC_CATEGORY_ZP, -1}},
    {"C", {UTF8PROC_CATEGORY_CC, UTF8PROC_CATEGORY_CF, UTF8PROC_CATEGORY_CS, UTF8PROC_CATEGORY_CO, UTF8PROC_CATEGORY_CN, -1}},
    {"Cc", {UTF8PROC_CATEGORY_CC, -1}}, {"Cf", {UTF8PROC_CATEGORY_CF, -1}}, {"Co", {UTF8PROC_CATEGORY_CO, -1}},
    {"Cn", {UTF8PROC_CATEGORY_CN, -1}},
};

static int rx_cls_add_gc(rx_parser *p, rx_node *c, const char *name, size_t at)
{
    pthread_once(&rx_gc_once, rx_gc_build);
    if (!rx_gc_ok) {
        rx_fail(p, at, LG_CERR_INTERNAL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < sizeof RX_GC_NAMES / sizeof RX_GC_NAMES[0]; i++) {
        if (strcmp(RX_GC_NAMES[i].name, name))
            continue;
        for (int j = 0; RX_GC_NAMES[i].cats[j] >= 0; j++) {
            int cat = RX_GC_NAMES[i].cats[j];
            if (rx_cls_add_cls(p, c, rx_gc[cat].r, rx_gc[cat].n))
                return -1;
        }
        return 0;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "Unicode property \\p{%.40s} is not supported (general categories only: L, Lu, Nd, P, ...)", name);
    rx_fail(p, at, LG_CERR_UNSUPPORTED, msg);
    return -1;
}

/* \d \w \s. Unicode mode (regex constraints and grammars, as Rust's regex
 * crate): \d = Nd; \w = letters, marks, Nd, Nl, Pc, the joiners and the
 * alphabetic symbols (circled and squared letters: Other_Alphabetic outside
 * the marks); ASCII mode (JSON Schema patterns): [0-9] and [0-9A-Za-z_].
 * \s is Unicode White_Space in both. */
static int rx_cls_perl(rx_parser *p, rx_node *c, char e)
{
    static const uint32_t RX_ALPHA_SYM[] = {0x200C, 0x200D, 0x24B6, 0x24E9, 0x1F130, 0x1F149, 0x1F150, 0x1F169,
                                            0x1F170, 0x1F189};
    if (e == 's')
        return rx_cls_add_cls(p, c, RX_SPACE, 10);
    if (!p->unicode)
        return e == 'd' ? rx_cls_add_cls(p, c, RX_DIGIT, 1) : rx_cls_add_cls(p, c, RX_WORD, 4);
    if (e == 'd')
        return rx_cls_add_gc(p, c, "Nd", p->i);
    if (rx_cls_add_gc(p, c, "L", p->i) || rx_cls_add_gc(p, c, "M", p->i) || rx_cls_add_gc(p, c, "Nd", p->i) ||
        rx_cls_add_gc(p, c, "Nl", p->i) || rx_cls_add_gc(p, c, "Pc", p->i))
        return -1;
    return rx_cls_add_cls(p, c, RX_ALPHA_SYM, 5);
}

/* Simple case folding (Unicode mode, and ASCII letters everywhere): code
 * points are grouped by tolower(toupper(cp)) from utf8proc; a folded class
 * gains every member of the groups it touches. The groups are built once. */
static uint32_t *rx_fold_cp, *rx_fold_key; /* cased code points and their keys, sorted by cp */
static int rx_fold_n;
static uint32_t *rx_fold_bykey;            /* the same code points sorted by key */
static int *rx_fold_kidx;
static pthread_once_t rx_fold_once = PTHREAD_ONCE_INIT;

static uint32_t rx_fold_of(uint32_t cp)
{
    return (uint32_t)utf8proc_tolower(utf8proc_toupper((utf8proc_int32_t)cp));
}

static int rx_cmp_key(const void *a, const void *b)
{
    uint32_t x = rx_fold_key[*(const int *)a], y = rx_fold_key[*(const int *)b];
    if (x != y)
        return x < y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* Appends the pair (c, k) to the parallel arrays cp / key of *n entries,
 * doubling *cap when full. false when out of memory: both arrays are then
 * freed. */
static bool pair_push(uint32_t **cp, uint32_t **key, int *n, int *cap, uint32_t c, uint32_t k)
{
    if (*n == *cap) {
        *cap *= 2;
        uint32_t *a = realloc(*cp, (size_t)*cap * 4), *b = a ? realloc(*key, (size_t)*cap * 4) : NULL;
        if (a)
            *cp = a;
        if (!b) {
            free(*cp);
            free(*key);
            return false;
        }
        *key = b;
    }
    (*cp)[*n] = c;
    (*key)[*n] = k;
    (*n)++;
    return true;
}

static void rx_fold_build(void)
{
    int cap = 4096, n = 0;
    uint32_t *cp = malloc((size_t)cap * 4), *key = malloc((size_t)cap * 4);
    for (uint32_t u = 0; u <= 0x10FFFF && cp && key; u++) {
        if (u >= 0xD800 && u <= 0xDFFF)
            continue;
        uint32_t k = rx_fold_of(u);
        if (k == u && (uint32_t)utf8proc_toupper((utf8proc_int32_t)u) == u)
            continue; /* not cased, or its own group's key with nothing mapping away: checked below */
        if (!pair_push(&cp, &key, &n, &cap, u, k))
            return;
    }
    if (!cp || !key) {
        free(cp);
        free(key);
        return;
    }
    /* keys themselves belong to their groups (e.g. 'k', the key of 'K' and U+212A) */
    int n0 = n;
    for (int i = 0; i < n0; i++) {
        uint32_t k = key[i];
        bool have = false;
        int lo = 0, hi = n0 - 1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (cp[mid] == k) {
                have = true;
                break;
            }
            if (cp[mid] < k)
                lo = mid + 1;
            else
                hi = mid - 1;
        }
        if (have)
            continue;
        if (!pair_push(&cp, &key, &n, &cap, k, k))
            return;
    }
    /* sort by cp (insertion of keys broke the order); dedupe */
    int *idx = malloc((size_t)n * sizeof *idx);
    uint32_t *c2 = malloc((size_t)n * 4), *k2 = malloc((size_t)n * 4);
    uint32_t *bykey = malloc((size_t)n * 4);
    int *kidx = malloc((size_t)n * sizeof *kidx);
    if (!idx || !c2 || !k2 || !bykey || !kidx) {
        free(idx), free(c2), free(k2), free(bykey), free(kidx), free(cp), free(key);
        return;
    }
    for (int i = 0; i < n; i++)
        idx[i] = i;
    /* sort by code point */
    for (int i = 0; i < n; i++)
        idx[i] = i;
    {
        /* shell sort keeps this dependency-free and fast enough for ~3k entries */
        for (int gap = n / 2; gap > 0; gap /= 2)
            for (int i = gap; i < n; i++)
                for (int j = i; j >= gap && cp[idx[j - gap]] > cp[idx[j]]; j -= gap) {
                    int t = idx[j];
                    idx[j] = idx[j - gap];
                    idx[j - gap] = t;
                }
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && c2[m - 1] == cp[idx[i]])
            continue;
        c2[m] = cp[idx[i]];
        k2[m] = key[idx[i]];
        m++;
    }
    free(cp);
    free(key);
    rx_fold_cp = c2;
    rx_fold_key = k2;
    rx_fold_n = m;
    for (int i = 0; i < m; i++)
        kidx[i] = i;
    qsort(kidx, (size_t)m, sizeof *kidx, rx_cmp_key);
    for (int i = 0; i < m; i++)
        bykey[i] = c2[kidx[i]];
    rx_fold_bykey = bykey;
    rx_fold_kidx = kidx;
    free(idx);
}

/* adds every code point folding like one of c's cased members */
static int rx_cls_fold(rx_parser *p, rx_node *c)
{
    pthread_once(&rx_fold_once, rx_fold_build);
    if (!rx_fold_cp) {
        rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
        return -1;
    }
    rx_cls_norm(c);
    int n = c->nr;
    uint32_t *r = malloc((size_t)(n ? n : 1) * 2 * sizeof *r);
    if (!r) {
        rx_fail(p, p->i, LG_CERR_INTERNAL, "out of memory");
        return -1;
    }
    memcpy(r, c->r, (size_t)n * 2 * sizeof *r);
    for (int i = 0; i < n; i++) {
        /* the cased code points inside [r0, r1] */
        int lo = 0, hi = rx_fold_n;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (rx_fold_cp[mid] < r[2 * i])
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int j = lo; j < rx_fold_n && rx_fold_cp[j] <= r[2 * i + 1]; j++) {
            uint32_t k = rx_fold_key[j];
            /* its group: the run of bykey with this key */
            int a = 0, b = rx_fold_n;
            while (a < b) {
                int mid = (a + b) / 2;
                if (rx_fold_key[rx_fold_kidx[mid]] < k)
                    a = mid + 1;
                else
                    b = mid;
            }
            for (int q = a; q < rx_fold_n && rx_fold_key[rx_fold_kidx[q]] == k; q++)
                if (rx_cls_add(p, c, rx_fold_bykey[q], rx_fold_bykey[q])) {
                    free(r);
                    return -1;
                }
        }
    }
    free(r);
    rx_cls_norm(c);
    return 0;
}

/* [:name:] inside a class: the POSIX classes, ASCII */
static int rx_cls_posix(rx_parser *p, rx_node *c, const char *name, bool neg)
{
    static const struct {
        const char *n;
        uint32_t r[8];
        int nr;
    } P[] = {
        {"alnum", {'0', '9', 'A', 'Z', 'a', 'z'}, 3}, {"alpha", {'A', 'Z', 'a', 'z'}, 2},
        {"ascii", {0, 0x7F}, 1}, {"blank", {'\t', '\t', ' ', ' '}, 2},
        {"cntrl", {0, 0x1F, 0x7F, 0x7F}, 2}, {"digit", {'0', '9'}, 1},
        {"graph", {0x21, 0x7E}, 1}, {"lower", {'a', 'z'}, 1},
        {"print", {0x20, 0x7E}, 1}, {"punct", {0x21, 0x2F, 0x3A, 0x40, 0x5B, 0x60, 0x7B, 0x7E}, 4},
        {"space", {'\t', '\r', ' ', ' '}, 2}, {"upper", {'A', 'Z'}, 1},
        {"word", {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'}, 4}, {"xdigit", {'0', '9', 'A', 'F', 'a', 'f'}, 3},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcmp(P[i].n, name))
            continue;
        rx_node *t = rx_new(p, RX_CLASS);
        if (!t || rx_cls_add_cls(p, t, P[i].r, P[i].nr) || (neg && rx_cls_negate(p, t)))
            return -1;
        return rx_cls_add_cls(p, c, t->r, t->nr);
    }
    char msg[96];
    snprintf(msg, sizeof msg, "unknown POSIX class [:%.40s:]", name);
    rx_fail(p, p->i, LG_CERR_INVALID, msg);
    return -1;
}

/* ---- lexing -------------------------------------------------------------------------------- */

static int rx_utf8(rx_parser *p, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)left, &c);
    if (k <= 0) {
        rx_fail(p, p->i, LG_CERR_INVALID, "invalid UTF-8 in the pattern");
        return -1;
    }
    p->i += (size_t)k;
    *cp = (uint32_t)c;
    return 0;
}

static int rx_hex(rx_parser *p, int ndig, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < ndig; k++) {
        if (p->i >= p->n) {
            rx_fail(p, p->i, LG_CERR_INVALID, "truncated hex escape");
            return -1;
        }
        char ch = p->s[p->i++];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) {
            rx_fail(p, p->i - 1, LG_CERR_INVALID, "bad hex digit in escape");
            return -1;
        }
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Parses an escape after '\'. Fills class c (a single code point or a
 * class). in_class: inside [...] (\b is backspace there). */
static int rx_escape(rx_parser *p, rx_node *c, bool in_class)
{
    size_t at = p->i - 1;
    if (p->i >= p->n) {
        rx_fail(p, at, LG_CERR_INVALID, "pattern ends with a backslash");
        return -1;
    }
    char e = p->s[p->i++];
    uint32_t v;
    switch (e) {
    case 'n': return rx_cls_add(p, c, '\n', '\n');
    case 't': return rx_cls_add(p, c, '\t', '\t');
    case 'r': return rx_cls_add(p, c, '\r', '\r');
    case 'f': return rx_cls_add(p, c, '\f', '\f');
    case 'v': return rx_cls_add(p, c, '\v', '\v');
    case 'a': return rx_cls_add(p, c, 7, 7);
    case 'e': return rx_cls_add(p, c, 27, 27);
    case 'x':
        if (p->i < p->n && p->s[p->i] == '{')
            goto brace_hex;
        if (rx_hex(p, 2, &v))
            return -1;
        return rx_cls_add(p, c, v, v);
    case 'u':
        if (p->i < p->n && p->s[p->i] == '{') {
        brace_hex:
            p->i++;
            v = 0;
            int nd = 0;
            while (p->i < p->n && p->s[p->i] != '}') {
                uint32_t d;
                if (rx_hex(p, 1, &d))
                    return -1;
                v = v * 16 + d;
                if (++nd > 6) {
                    rx_fail(p, at, LG_CERR_INVALID, "code point escape too long");
                    return -1;
                }
            }
            if (p->i >= p->n || nd == 0) {
                rx_fail(p, at, LG_CERR_INVALID, "unterminated \\u{...} escape");
                return -1;
            }
            p->i++;
        } else if (rx_hex(p, 4, &v))
            return -1;
        if (v > 0x10FFFF) {
            rx_fail(p, at, LG_CERR_INVALID, "code point out of range");
            return -1;
        }
        return rx_cls_add(p, c, v, v);
    case 'U':
        if (rx_hex(p, 8, &v))
            return -1;
        if (v > 0x10FFFF) {
            rx_fail(p, at, LG_CERR_INVALID, "code point out of range");
            return -1;
        }
        return rx_cls_add(p, c, v, v);
    case 'd': case 'w': case 's': return rx_cls_perl(p, c, e);
    case 'D': case 'W': case 'S': {
        rx_node *t = rx_new(p, RX_CLASS);
        if (!t || rx_cls_perl(p, t, (char)(e + 32)) || rx_cls_negate(p, t))
            return -1;
        return rx_cls_add_cls(p, c, t->r, t->nr);
    }
    case 'p': case 'P': {
        char name[48];
        size_t k = 0;
        if (p->i < p->n && p->s[p->i] == '{') {
            p->i++;
            while (p->i < p->n && p->s[p->i] != '}' && k + 1 < sizeof name)
                name[k++] = p->s[p->i++];
            if (p->i >= p->n || p->s[p->i] != '}') {
                rx_fail(p, at, LG_CERR_INVALID, "unterminated \\p{...}");
                return -1;
            }
            p->i++;
        } else if (p->i < p->n)
            name[k++] = p->s[p->i++];
        name[k] = 0;
        if (e == 'p')
            return rx_cls_add_gc(p, c, name, at);
        rx_node *t = rx_new(p, RX_CLASS);
        if (!t || rx_cls_add_gc(p, t, name, at) || rx_cls_negate(p, t))
            return -1;
        return rx_cls_add_cls(p, c, t->r, t->nr);
    }
    case 'b':
        if (in_class)
            return rx_cls_add(p, c, 8, 8);
        rx_fail(p, at, LG_CERR_UNSUPPORTED, "word boundaries (\\b) are not supported");
        return -1;
    case 'B':
        rx_fail(p, at, LG_CERR_UNSUPPORTED, "non-word boundaries (\\B) are not supported");
        return -1;
    case 'A': case 'Z': case 'z': case 'G':
        rx_fail(p, at, LG_CERR_UNSUPPORTED, "anchors \\A \\Z \\z \\G are not supported (use ^ and $)");
        return -1;
    case 'k':
        rx_fail(p, at, LG_CERR_UNSUPPORTED, "backreferences (\\k<name>) are not supported");
        return -1;
    case 'N':
        rx_fail(p, at, LG_CERR_UNSUPPORTED, "named characters (\\N{...}) are not supported");
        return -1;
    case 'c':
        if (p->i < p->n && ((p->s[p->i] >= 'a' && p->s[p->i] <= 'z') || (p->s[p->i] >= 'A' && p->s[p->i] <= 'Z'))) {
            v = (uint32_t)(p->s[p->i++] & 31);
            return rx_cls_add(p, c, v, v);
        }
        rx_fail(p, at, LG_CERR_INVALID, "bad \\c escape");
        return -1;
    case '0':
        /* \0 and octal \0oo */
        v = 0;
        for (int k = 0; k < 2 && p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '7'; k++)
            v = v * 8 + (uint32_t)(p->s[p->i++] - '0');
        return rx_cls_add(p, c, v, v);
    default:
        if (e >= '1' && e <= '9') {
            if (in_class) {
                rx_fail(p, at, LG_CERR_UNSUPPORTED, "octal escapes in classes are not supported");
                return -1;
            }
            rx_fail(p, at, LG_CERR_UNSUPPORTED, "backreferences (\\1 .. \\9) are not supported");
            return -1;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            char msg[64];
            snprintf(msg, sizeof msg, "unknown escape \\%c", e);
            rx_fail(p, at, LG_CERR_INVALID, msg);
            return -1;
        }
        p->i--;
        if (rx_utf8(p, &v))
            return -1;
        return rx_cls_add(p, c, v, v);
    }
}

/* ---- parser ------------------------------------------------------------------------------ */

static rx_node *rx_alt(rx_parser *p);

static rx_node *rx_class(rx_parser *p)
{
    size_t at = p->i - 1; /* '[' */
    rx_node *c = rx_new(p, RX_CLASS);
    if (!c)
        return NULL;
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    bool first = true;
    for (;;) {
        if (p->i >= p->n)
            return rx_fail(p, at, LG_CERR_INVALID, "unterminated character class");
        char ch = p->s[p->i];
        if (ch == ']' && !first) {
            p->i++;
            break;
        }
        first = false;
        if (ch == '[' && p->i + 1 < p->n && p->s[p->i + 1] == ':') {
            size_t j = p->i + 2;
            bool pneg = j < p->n && p->s[j] == '^';
            if (pneg)
                j++;
            size_t k0 = j;
            while (j < p->n && p->s[j] >= 'a' && p->s[j] <= 'z')
                j++;
            if (j + 1 < p->n && p->s[j] == ':' && p->s[j + 1] == ']' && j - k0 < 16) {
                char nm[17];
                memcpy(nm, p->s + k0, j - k0);
                nm[j - k0] = 0;
                p->i = j + 2;
                if (rx_cls_posix(p, c, nm, pneg))
                    return NULL;
                continue;
            }
        }
        /* one item: a code point (maybe the start of a range) or an escape class */
        rx_node *item = rx_new(p, RX_CLASS);
        if (!item)
            return NULL;
        size_t item_at = p->i;
        if (ch == '\\') {
            p->i++;
            if (rx_escape(p, item, true))
                return NULL;
        } else {
            uint32_t v;
            if (rx_utf8(p, &v) || rx_cls_add(p, item, v, v))
                return NULL;
        }
        bool single = item->nr == 1 && item->r[0] == item->r[1];
        if (single && p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            rx_node *hi = rx_new(p, RX_CLASS);
            if (!hi)
                return NULL;
            if (p->s[p->i] == '\\') {
                p->i++;
                if (rx_escape(p, hi, true))
                    return NULL;
            } else {
                uint32_t v;
                if (rx_utf8(p, &v) || rx_cls_add(p, hi, v, v))
                    return NULL;
            }
            if (!(hi->nr == 1 && hi->r[0] == hi->r[1]))
                return rx_fail(p, item_at, LG_CERR_INVALID, "bad character range");
            if (hi->r[0] < item->r[0])
                return rx_fail(p, item_at, LG_CERR_INVALID, "character range out of order");
            if (rx_cls_add(p, c, item->r[0], hi->r[0]))
                return NULL;
        } else if (rx_cls_add_cls(p, c, item->r, item->nr))
            return NULL;
    }
    rx_cls_norm(c);
    if (p->icase && rx_cls_fold(p, c))
        return NULL;
    if (neg && rx_cls_negate(p, c))
        return NULL;
    return c;
}

static rx_node *rx_atom(rx_parser *p)
{
    size_t at = p->i;
    char ch = p->s[p->i];
    if (ch == '(') {
        p->i++;
        bool save_i = p->icase, save_s = p->dotall;
        if (p->i < p->n && p->s[p->i] == '?') {
            p->i++;
            if (p->i >= p->n)
                return rx_fail(p, at, LG_CERR_INVALID, "unterminated group");
            char g = p->s[p->i];
            if (g == ':') {
                p->i++;
            } else if (g == 'P' && p->i + 1 < p->n && p->s[p->i + 1] == '<') {
                p->i += 2;
                while (p->i < p->n && p->s[p->i] != '>')
                    p->i++;
                if (p->i >= p->n)
                    return rx_fail(p, at, LG_CERR_INVALID, "unterminated group name");
                p->i++;
            } else if (g == 'P' && p->i + 1 < p->n && p->s[p->i + 1] == '=') {
                return rx_fail(p, at, LG_CERR_UNSUPPORTED, "backreferences ((?P=name)) are not supported");
            } else if (g == '<' && p->i + 1 < p->n && (p->s[p->i + 1] == '=' || p->s[p->i + 1] == '!')) {
                return rx_fail(p, at, LG_CERR_UNSUPPORTED, "lookbehind assertions ((?<= (?<!) are not supported");
            } else if (g == '<') {
                p->i++;
                while (p->i < p->n && p->s[p->i] != '>')
                    p->i++;
                if (p->i >= p->n)
                    return rx_fail(p, at, LG_CERR_INVALID, "unterminated group name");
                p->i++;
            } else if (g == '=' || g == '!') {
                return rx_fail(p, at, LG_CERR_UNSUPPORTED, "lookahead assertions ((?= (?!) are not supported");
            } else if (g == '>') {
                return rx_fail(p, at, LG_CERR_UNSUPPORTED, "atomic groups ((?>...)) are not supported");
            } else if (g == '(') {
                return rx_fail(p, at, LG_CERR_UNSUPPORTED, "conditional groups are not supported");
            } else if (g == '#') {
                while (p->i < p->n && p->s[p->i] != ')')
                    p->i++;
                if (p->i >= p->n)
                    return rx_fail(p, at, LG_CERR_INVALID, "unterminated comment");
                p->i++;
                return rx_new(p, RX_EMPTY);
            } else {
                /* flags: (?is-i) or (?is-i: ...) */
                bool on = true;
                while (p->i < p->n && p->s[p->i] != ')' && p->s[p->i] != ':') {
                    char f = p->s[p->i++];
                    if (f == '-')
                        on = false;
                    else if (f == 'i')
                        p->icase = on;
                    else if (f == 's')
                        p->dotall = on;
                    else if (f == 'u')
                        ;
                    else if (f == 'm')
                        return rx_fail(p, at, LG_CERR_UNSUPPORTED, "multi-line mode (?m) is not supported");
                    else if (f == 'x')
                        return rx_fail(p, at, LG_CERR_UNSUPPORTED, "verbose mode (?x) is not supported");
                    else {
                        char msg[64];
                        snprintf(msg, sizeof msg, "unknown flag '%c'", f);
                        return rx_fail(p, at, LG_CERR_INVALID, msg);
                    }
                }
                if (p->i >= p->n)
                    return rx_fail(p, at, LG_CERR_INVALID, "unterminated group");
                if (p->s[p->i] == ')') {
                    /* flags for the rest of the enclosing group */
                    p->i++;
                    return rx_new(p, RX_EMPTY);
                }
                p->i++; /* ':' */
            }
        }
        if (++p->depth > p->max_depth) {
            char msg[80];
            snprintf(msg, sizeof msg, "groups nest deeper than max_depth (%d)", p->max_depth);
            return rx_fail(p, at, LG_CERR_LIMIT, msg);
        }
        rx_node *x = rx_alt(p);
        p->depth--;
        p->icase = save_i;
        p->dotall = save_s;
        if (!x)
            return NULL;
        if (p->i >= p->n || p->s[p->i] != ')')
            return rx_fail(p, at, LG_CERR_INVALID, "missing )");
        p->i++;
        return x;
    }
    if (ch == '[') {
        p->i++;
        return rx_class(p);
    }
    if (ch == '.') {
        p->i++;
        rx_node *c = rx_new(p, RX_CLASS);
        if (!c)
            return NULL;
        if (p->dotall)
            rx_cls_add(p, c, 0, 0x10FFFF);
        else {
            rx_cls_add(p, c, 0, '\n' - 1);
            rx_cls_add(p, c, '\n' + 1, 0x10FFFF);
        }
        return p->failed ? NULL : c;
    }
    if (ch == '^') {
        p->i++;
        return rx_new(p, RX_BOL);
    }
    if (ch == '$') {
        p->i++;
        return rx_new(p, RX_EOL);
    }
    if (ch == '*' || ch == '+' || ch == '?')
        return rx_fail(p, at, LG_CERR_INVALID, "nothing to repeat");
    if (ch == ')')
        return rx_fail(p, at, LG_CERR_INVALID, "unbalanced )");
    rx_node *c = rx_new(p, RX_CLASS);
    if (!c)
        return NULL;
    if (ch == '\\') {
        p->i++;
        if (rx_escape(p, c, false))
            return NULL;
    } else {
        uint32_t v;
        if (rx_utf8(p, &v) || rx_cls_add(p, c, v, v))
            return NULL;
    }
    rx_cls_norm(c);
    if (p->icase && rx_cls_fold(p, c))
        return NULL;
    return c;
}

/* {n}, {n,}, {,m}, {n,m}; returns false (position restored) if not a quantifier */
static bool rx_braces(rx_parser *p, int *mn, int *mx)
{
    size_t save = p->i;
    p->i++;
    long a = -1, b = -1;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        a = (a < 0 ? 0 : a) * 10 + (p->s[p->i++] - '0');
        if (a > 1000000)
            a = 1000000;
    }
    bool comma = false;
    if (p->i < p->n && p->s[p->i] == ',') {
        comma = true;
        p->i++;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            b = (b < 0 ? 0 : b) * 10 + (p->s[p->i++] - '0');
            if (b > 1000000)
                b = 1000000;
        }
    }
    if (p->i >= p->n || p->s[p->i] != '}' || (a < 0 && (!comma || b < 0))) {
        p->i = save;
        return false;
    }
    p->i++;
    *mn = a < 0 ? 0 : (int)a;
    *mx = comma ? (b < 0 ? -1 : (int)b) : (int)a;
    return true;
}

static rx_node *rx_repeat(rx_parser *p)
{
    rx_node *x = rx_atom(p);
    if (!x)
        return NULL;
    bool quantified = false;
    while (p->i < p->n) {
        size_t at = p->i;
        char ch = p->s[p->i];
        int mn, mx;
        if (ch == '*') {
            mn = 0, mx = -1;
            p->i++;
        } else if (ch == '+') {
            mn = 1, mx = -1;
            p->i++;
        } else if (ch == '?') {
            mn = 0, mx = 1;
            p->i++;
        } else if (ch == '{') {
            if (!rx_braces(p, &mn, &mx))
                break;
            if (mx >= 0 && mx < mn)
                return rx_fail(p, at, LG_CERR_INVALID, "repetition {n,m} with m < n");
        } else
            break;
        if (quantified)
            return rx_fail(p, at, LG_CERR_INVALID, "multiple repeat");
        if (x->kind == RX_BOL || x->kind == RX_EOL)
            return rx_fail(p, at, LG_CERR_UNSUPPORTED, "repeated anchor");
        quantified = true;
        if (p->i < p->n && p->s[p->i] == '?')
            p->i++; /* lazy: same language */
        else if (p->i < p->n && p->s[p->i] == '+')
            return rx_fail(p, at, LG_CERR_UNSUPPORTED, "possessive quantifiers are not supported");
        rx_node *r = rx_new(p, RX_REPEAT);
        if (!r || rx_add_kid(p, r, x))
            return NULL;
        r->min = mn;
        r->max = mx;
        x = r;
    }
    return x;
}

static rx_node *rx_concat(rx_parser *p)
{
    rx_node *c = rx_new(p, RX_CONCAT);
    if (!c)
        return NULL;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        rx_node *x = rx_repeat(p);
        if (!x || rx_add_kid(p, c, x))
            return NULL;
    }
    return c;
}

static rx_node *rx_alt(rx_parser *p)
{
    rx_node *a = rx_new(p, RX_ALT);
    if (!a)
        return NULL;
    for (;;) {
        rx_node *c = rx_concat(p);
        if (!c || rx_add_kid(p, a, c))
            return NULL;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    return a;
}

/* ---- anchors (derivre's rules) -------------------------------------------------------------- */

static rx_node *rx_any_star(rx_parser *p)
{
    rx_node *c = rx_new(p, RX_CLASS), *r = rx_new(p, RX_REPEAT);
    if (!c || !r || rx_cls_add(p, c, 0, 0x10FFFF) || rx_add_kid(p, r, c))
        return NULL;
    r->min = 0;
    r->max = -1;
    return r;
}

static rx_node *rx_wrap(rx_parser *p, rx_node *x, bool pre, bool post)
{
    if (!pre && !post)
        return x;
    rx_node *c = rx_new(p, RX_CONCAT);
    if (!c)
        return NULL;
    if (pre && rx_add_kid(p, c, rx_any_star(p)))
        return NULL;
    if (rx_add_kid(p, c, x))
        return NULL;
    if (post && rx_add_kid(p, c, rx_any_star(p)))
        return NULL;
    return p->failed ? NULL : c;
}

/* Replaces allowed anchors by EMPTY; fails on others; reports anchoring. */
static int rx_anchors(rx_parser *p, rx_node *x, bool at_s, bool at_e, bool search, bool *as, bool *ae)
{
    *as = *ae = false;
    switch (x->kind) {
    case RX_BOL:
        if (!at_s) {
            rx_fail(p, 0, LG_CERR_UNSUPPORTED, "^ is only supported at the start of the pattern");
            return -1;
        }
        x->kind = RX_EMPTY;
        *as = true;
        return 0;
    case RX_EOL:
        if (!at_e) {
            rx_fail(p, 0, LG_CERR_UNSUPPORTED, "$ is only supported at the end of the pattern");
            return -1;
        }
        x->kind = RX_EMPTY;
        *ae = true;
        return 0;
    case RX_CONCAT: {
        if (x->nk == 0)
            return 0;
        for (int i = 0; i < x->nk; i++) {
            bool s, e;
            if (rx_anchors(p, x->k[i], at_s && i == 0, at_e && i == x->nk - 1, search, &s, &e))
                return -1;
            if (i == 0)
                *as = s;
            if (i == x->nk - 1)
                *ae = e;
        }
        return 0;
    }
    case RX_ALT: {
        if (x->nk == 1)
            return rx_anchors(p, x->k[0], at_s, at_e, search, as, ae);
        bool all_s = true, all_e = true, some_s = false, some_e = false;
        bool *bs = malloc((size_t)x->nk * 2);
        if (!bs) {
            rx_fail(p, 0, LG_CERR_INTERNAL, "out of memory");
            return -1;
        }
        for (int i = 0; i < x->nk; i++) {
            if (rx_anchors(p, x->k[i], at_s, at_e, search, &bs[2 * i], &bs[2 * i + 1])) {
                free(bs);
                return -1;
            }
            all_s &= bs[2 * i];
            all_e &= bs[2 * i + 1];
            some_s |= bs[2 * i];
            some_e |= bs[2 * i + 1];
        }
        if (search && (at_s || at_e) && (some_s || some_e)) {
            *as = some_s;
            *ae = some_e;
            if (!all_s || !all_e)
                for (int i = 0; i < x->nk; i++) {
                    x->k[i] = rx_wrap(p, x->k[i], !bs[2 * i] && some_s, !bs[2 * i + 1] && some_e);
                    if (!x->k[i]) {
                        free(bs);
                        return -1;
                    }
                }
        }
        free(bs);
        return 0;
    }
    case RX_REPEAT: {
        bool s, e;
        return rx_anchors(p, x->k[0], false, false, search, &s, &e);
    }
    default:
        return 0;
    }
}

/* ---- emission ------------------------------------------------------------------------------- */

static int rx_enc(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 63));
        out[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 63));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 63));
    out[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

static void rx_emit_same_len(lg_nfa *a, int from, int to, uint32_t lo, uint32_t hi)
{
    uint8_t bl[4], bh[4];
    int n = rx_enc(lo, bl);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                rx_emit_same_len(a, from, to, lo, lo | m);
                rx_emit_same_len(a, from, to, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                rx_emit_same_len(a, from, to, lo, (hi & ~m) - 1);
                rx_emit_same_len(a, from, to, hi & ~m, hi);
                return;
            }
        }
    }
    rx_enc(hi, bh);
    int cur = from;
    for (int i = 0; i < n; i++) {
        int nx = i + 1 == n ? to : lg_nfa_node(a);
        if (nx < 0)
            return;
        lg_nfa_range(a, cur, nx, bl[i], bh[i]);
        cur = nx;
    }
}

void lg_rx_emit_cp_range(lg_nfa *a, int from, int to, uint32_t lo, uint32_t hi)
{
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return;
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800)
            lg_rx_emit_cp_range(a, from, to, lo, 0xD7FF);
        if (hi > 0xDFFF)
            lg_rx_emit_cp_range(a, from, to, 0xE000, hi);
        return;
    }
    static const uint32_t lim[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int k = 0; k < 4; k++) {
        uint32_t start = k == 0 ? 0 : lim[k - 1] + 1;
        uint32_t l = lo > start ? lo : start, h = hi < lim[k] ? hi : lim[k];
        if (l <= h)
            rx_emit_same_len(a, from, to, l, h);
    }
}

static int rx_emit_node(rx_parser *p, const rx_node *x, lg_nfa *a, int from, int to)
{
    if (a->b->failed)
        return -1;
    switch (x->kind) {
    case RX_EMPTY:
    case RX_BOL:
    case RX_EOL:
        lg_nfa_eps(a, from, to);
        return 0;
    case RX_CLASS:
        for (int i = 0; i < x->nr; i++)
            lg_rx_emit_cp_range(a, from, to, x->r[2 * i], x->r[2 * i + 1]);
        return a->b->failed ? -1 : 0;
    case RX_CONCAT: {
        int cur = from;
        for (int i = 0; i < x->nk; i++) {
            int nx = i + 1 == x->nk ? to : lg_nfa_node(a);
            if (nx < 0 || rx_emit_node(p, x->k[i], a, cur, nx))
                return -1;
            cur = nx;
        }
        if (x->nk == 0)
            lg_nfa_eps(a, from, to);
        return 0;
    }
    case RX_ALT:
        for (int i = 0; i < x->nk; i++)
            if (rx_emit_node(p, x->k[i], a, from, to))
                return -1;
        return 0;
    case RX_REPEAT: {
        int cur = from;
        for (int i = 0; i < x->min; i++) {
            int nx = lg_nfa_node(a);
            if (nx < 0 || rx_emit_node(p, x->k[0], a, cur, nx))
                return -1;
            cur = nx;
        }
        if (x->max < 0) {
            int loop = lg_nfa_node(a), back = lg_nfa_node(a);
            if (back < 0)
                return -1;
            lg_nfa_eps(a, cur, loop);
            if (rx_emit_node(p, x->k[0], a, loop, back))
                return -1;
            lg_nfa_eps(a, back, loop);
            lg_nfa_eps(a, loop, to);
            return 0;
        }
        for (int i = x->min; i < x->max; i++) {
            lg_nfa_eps(a, cur, to);
            int nx = lg_nfa_node(a);
            if (nx < 0 || rx_emit_node(p, x->k[0], a, cur, nx))
                return -1;
            cur = nx;
        }
        lg_nfa_eps(a, cur, to);
        return 0;
    }
    }
    return -1;
}

static void rx_free_all(rx_parser *p)
{
    for (size_t i = 0; i < p->nall; i++) {
        free(p->all[i]->r);
        free(p->all[i]->k);
        free(p->all[i]);
    }
    free(p->all);
}

int lg_rx_emit(const char *re, size_t len, int flags, lg_nfa *a, int from, int to,
               const char *param_prefix, int max_depth)
{
    rx_parser p = {.s = re, .n = len, .b = a->b, .pp = param_prefix, .max_depth = max_depth > 0 ? max_depth : 64,
                   .icase = (flags & LG_RX_ICASE) != 0, .dotall = (flags & LG_RX_DOTALL) != 0,
                   .unicode = (flags & LG_RX_UNICODE) != 0};
    if (a->b->failed)
        return -1;
    int rc = -1;
    rx_node *root = rx_alt(&p);
    if (root && p.i < p.n)
        rx_fail(&p, p.i, LG_CERR_INVALID, "unbalanced )");
    if (root && !p.failed) {
        bool s, e;
        bool search = (flags & LG_RX_SEARCH) != 0;
        if (!rx_anchors(&p, root, true, true, search, &s, &e)) {
            if (search)
                root = rx_wrap(&p, root, !s, !e);
            if (root && !p.failed)
                rc = rx_emit_node(&p, root, a, from, to);
        }
    }
    rx_free_all(&p);
    return a->b->failed ? -1 : rc;
}

int lg_rx_dfa(const char *re, size_t len, int flags, lg_cbudget *b, lg_dfa *out,
              const char *param_prefix, int max_depth)
{
    memset(out, 0, sizeof *out);
    lg_nfa a;
    lg_nfa_init(&a, b);
    int end = lg_nfa_node(&a);
    int rc = -1;
    if (end >= 0 && !lg_rx_emit(re, len, flags, &a, a.start, end, param_prefix, max_depth)) {
        a.final[end] = 1;
        rc = lg_nfa_determinize(&a, out);
        if (!rc)
            rc = lg_dfa_trim(out, b);
    }
    lg_nfa_clear(&a);
    return rc;
}
