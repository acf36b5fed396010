/*
 * jinja_lex.c — Jinja template text to tokens, with jinja2's whitespace rules.
 *
 * The environment is transformers': trim_blocks (the first newline after a
 * block or comment tag is dropped), lstrip_blocks (spaces and tabs from the
 * start of a line up to a block or comment tag are dropped), `{%-`/`-%}`
 * (and the same on `{{ }}` and `{# #}`) strip all whitespace on that side,
 * `{%+` and `+%}` turn lstrip/trim off for that tag. As jinja2 does, \r\n and
 * \r become \n first and one trailing newline of the template is dropped
 * (keep_trailing_newline=False). Inside a tag, `}}`/`%}` end the tag only
 * outside brackets, so `{{ {'a': {'b': 1}} }}` works.
 *
 * Output: TK_DATA (text to print, already stripped), TK_VAR_BEGIN ...
 * TK_VAR_END and TK_BLOCK_BEGIN ... TK_BLOCK_END around expression tokens
 * (names, strings with Python escapes decoded, ints, floats, operators).
 * {% raw %} ... {% endraw %} comes out as data. Comments produce nothing.
 */
#include "engine/model/jinja_internal.h"

#include <errno.h>
#include <stdlib.h>

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    jtoks *out;
} lexer;

static jtok *push(lexer *L, jtok_kind k, const char *s, size_t n)
{
    jtoks *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jtok *v = ja_alloc(L->a, cap * sizeof(jtok));
        if (t->n)
            memcpy(v, t->v, t->n * sizeof(jtok));
        t->v = v;
        t->cap = cap;
    }
    jtok *k_ = &t->v[t->n++];
    memset(k_, 0, sizeof *k_);
    k_->k = k;
    k_->s = s;
    k_->n = n;
    k_->line = L->line;
    return k_;
}

static void count_lines(lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n')
            L->line++;
}

/* Python's \s on one code point at s[i]; returns its byte length, 0 if not whitespace. */
static size_t ws_at(const char *s, size_t n, size_t i)
{
    uint32_t c;
    int k = ju_dec((const unsigned char *)s + i, n - i, &c);
    return ju_space(c) ? (size_t)k : 0;
}

/* Length of data[0..n) without trailing Python whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int k = ju_dec((const unsigned char *)s + i, n - i, &c);
        i += (size_t)k;
        if (!ju_space(c))
            end = i;
    }
    return end;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    size_t k;
    while (i < n && (k = ws_at(s, n, i)) > 0)
        i += k;
    return i;
}

static bool starts(const lexer *L, size_t i, const char *w)
{
    size_t k = strlen(w);
    return i + k <= L->n && !memcmp(L->s + i, w, k);
}

static void decode_string(lexer *L, size_t b, size_t e, jtok *t)
{
    jbuf o = {0};
    const char *s = L->s;
    for (size_t i = b; i < e; i++) {
        if (s[i] != '\\' || i + 1 >= e) {
            jb_put(L->a, &o, s + i, 1);
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int hex = 0;
        switch (c) {
        case '\n': break; /* line continuation */
        case '\\': jb_puts(L->a, &o, "\\"); break;
        case '\'': jb_puts(L->a, &o, "'"); break;
        case '"': jb_puts(L->a, &o, "\""); break;
        case 'a': jb_puts(L->a, &o, "\a"); break;
        case 'b': jb_puts(L->a, &o, "\b"); break;
        case 'f': jb_puts(L->a, &o, "\f"); break;
        case 'n': jb_puts(L->a, &o, "\n"); break;
        case 'r': jb_puts(L->a, &o, "\r"); break;
        case 't': jb_puts(L->a, &o, "\t"); break;
        case 'v': jb_puts(L->a, &o, "\v"); break;
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                int k = 0;
                while (k < 3 && i < e && s[i] >= '0' && s[i] <= '7') {
                    cp = cp * 8 + (uint32_t)(s[i] - '0');
                    i++;
                    k++;
                }
                i--;
                ju_enc(L->a, &o, cp);
            } else {
                char t2[2] = {'\\', c};
                jb_put(L->a, &o, t2, 2);
            }
        }
        if (hex) {
            if (i + (size_t)hex >= e)
                jfail(L->a, "chat template syntax error, line %d: truncated \\%c escape in string", L->line, c);
            for (int k = 0; k < hex; k++) {
                char h = s[i + 1 + (size_t)k];
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0)
                    jfail(L->a, "chat template syntax error, line %d: bad \\%c escape in string", L->line, c);
                cp = cp * 16 + (uint32_t)d;
            }
            if (cp > 0x10ffff)
                jfail(L->a, "chat template syntax error, line %d: bad \\%c escape in string", L->line, c);
            i += (size_t)hex;
            ju_enc(L->a, &o, cp);
        }
    }
    t->s = o.p ? o.p : "";
    t->n = o.n;
}

/* Lexes the inside of a tag from L->pos; stops after the end marker. Returns
 * the strip sign of the end marker ('-', '+' or 0). */
static char lex_tag(lexer *L, bool block)
{
    char stack[256];
    int depth = 0;
    const char *end = block ? "%}" : "}}";
    for (;;) {
        size_t i = skip_ws(L->s, L->n, L->pos);
        count_lines(L, L->pos, i);
        L->pos = i;
        if (i >= L->n)
            jfail(L->a, "chat template syntax error, line %d: unexpected end of template, expected '%s'", L->line, end);
        if (depth == 0) {
            if (starts(L, i, end)) {
                L->pos = i + 2;
                return 0;
            }
            if ((L->s[i] == '-' || L->s[i] == '+') && starts(L, i + 1, end)) {
                L->pos = i + 3;
                return L->s[i];
            }
        }
        char c = L->s[i];
        unsigned char uc = (unsigned char)c;
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || uc >= 0x80) {
            size_t j = i;
            while (j < L->n && (L->s[j] == '_' || (L->s[j] >= 'a' && L->s[j] <= 'z') || (L->s[j] >= 'A' && L->s[j] <= 'Z') ||
                                (L->s[j] >= '0' && L->s[j] <= '9') || (unsigned char)L->s[j] >= 0x80))
                j++;
            push(L, TK_NAME, ja_strndup(L->a, L->s + i, j - i), j - i);
            L->pos = j;
        } else if (c >= '0' && c <= '9') {
            size_t j = i;
            bool is_float = false;
            while (j < L->n && ((L->s[j] >= '0' && L->s[j] <= '9') || (L->s[j] == '_' && j + 1 < L->n && L->s[j + 1] >= '0' && L->s[j + 1] <= '9')))
                j++;
            if (j + 1 < L->n && L->s[j] == '.' && L->s[j + 1] >= '0' && L->s[j + 1] <= '9') {
                is_float = true;
                j++;
                while (j < L->n && ((L->s[j] >= '0' && L->s[j] <= '9') || L->s[j] == '_'))
                    j++;
            }
            if (j < L->n && (L->s[j] == 'e' || L->s[j] == 'E')) {
                size_t k = j + 1;
                if (k < L->n && (L->s[k] == '+' || L->s[k] == '-'))
                    k++;
                if (k < L->n && L->s[k] >= '0' && L->s[k] <= '9') {
                    is_float = true;
                    j = k;
                    while (j < L->n && L->s[j] >= '0' && L->s[j] <= '9')
                        j++;
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t k = i; k < j && m < sizeof num - 1; k++)
                if (L->s[k] != '_')
                    num[m++] = L->s[k];
            num[m] = 0;
            jtok *t = push(L, is_float ? TK_FLOAT : TK_INT, L->s + i, j - i);
            errno = 0;
            if (is_float) {
                t->f = strtod(num, NULL);
            } else {
                t->i = strtoll(num, NULL, 10);
                if (errno == ERANGE || j - i >= 63)
                    jfail(L->a, "chat template syntax error, line %d: integer literal too large", L->line);
            }
            L->pos = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < L->n && L->s[j] != c) {
                if (L->s[j] == '\\' && j + 1 < L->n)
                    j++;
                j++;
            }
            if (j >= L->n)
                jfail(L->a, "chat template syntax error, line %d: unterminated string", L->line);
            jtok *t = push(L, TK_STRING, NULL, 0);
            decode_string(L, i + 1, j, t);
            count_lines(L, i, j);
            L->pos = j + 1;
        } else {
            static const char *two[] = {"//", "**", "==", "!=", "<=", ">="};
            size_t k = 0;
            for (size_t q = 0; q < sizeof two / sizeof *two; q++)
                if (starts(L, i, two[q]))
                    k = 2;
            if (!k) {
                if (!strchr("+-*/%~<>=()[]{},.:|;", c) || c == 0)
                    jfail(L->a, "chat template syntax error, line %d: unexpected character '%c' in tag", L->line, c);
                k = 1;
                if (c == '(' || c == '[' || c == '{') {
                    if (depth == (int)sizeof stack)
                        jfail(L->a, "chat template syntax error, line %d: brackets nested too deeply", L->line);
                    stack[depth++] = c;
                } else if (c == ')' || c == ']' || c == '}') {
                    char want = c == ')' ? '(' : c == ']' ? '[' : '{';
                    if (depth == 0 || stack[depth - 1] != want)
                        jfail(L->a, "chat template syntax error, line %d: unexpected '%c'", L->line, c);
                    depth--;
                }
            }
            push(L, TK_OP, L->s + i, k);
            L->pos = i + k;
        }
    }
}

/* After a tag end: '-' strips all whitespace, otherwise a block/comment drops one newline. */
static bool after_tag(lexer *L, char sign, bool trim)
{
    size_t i = L->pos;
    if (sign == '-')
        i = skip_ws(L->s, L->n, i);
    else if (sign != '+' && trim && i < L->n && L->s[i] == '\n')
        i++;
    count_lines(L, L->pos, i);
    L->pos = i;
    return i > 0 && L->s[i - 1] == '\n';
}

/* Is the block at i `{% raw %}` (any sign)? Returns the position after it, or 0. */
static size_t raw_begin(lexer *L, size_t i, char *end_sign)
{
    size_t j = i + 2;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        j++;
    j = skip_ws(L->s, L->n, j);
    if (!starts(L, j, "raw"))
        return 0;
    j = skip_ws(L->s, L->n, j + 3);
    *end_sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        *end_sign = L->s[j++];
    return starts(L, j, "%}") ? j + 2 : 0;
}

void jlex(jarena *a, const char *text, size_t len, jtoks *out)
{
    /* newlines normalised, one trailing newline dropped */
    char *s = ja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n')
                i++;
        } else {
            s[n++] = text[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--;
    s[n] = 0;
    lexer L = {.a = a, .s = s, .n = n, .line = 1, .out = out};
    bool line_starting = true;
    while (L.pos < n) {
        /* next tag opener */
        size_t p = L.pos;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        for (; p + 1 < n; p++) {
            if (s[p] != '{')
                continue;
            if (s[p + 1] == '{') { kind = 1; break; }
            if (s[p + 1] == '%') { kind = 2; break; }
            if (s[p + 1] == '#') { kind = 3; break; }
        }
        if (!kind)
            p = n;
        const char *data = s + L.pos;
        size_t dn = p - L.pos;
        char sign = kind && p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        if (kind && sign == '-') {
            dn = rstrip_len(data, dn);
        } else if (kind && sign != '+' && kind != 1) {
            size_t l = dn;
            while (l > 0 && data[l - 1] != '\n')
                l--;
            if (l > 0 || line_starting) {
                bool all_ws = l < dn;
                for (size_t i = l; i < dn && all_ws;) {
                    size_t k = ws_at(data, dn, i);
                    if (!k)
                        all_ws = false;
                    i += k;
                }
                if (all_ws)
                    dn = l;
            }
        }
        if (dn)
            push(&L, TK_DATA, data, dn);
        count_lines(&L, L.pos, p);
        if (!kind)
            break;
        char esign;
        size_t rb;
        if (kind == 3) {
            size_t q = p + 2;
            while (q + 1 < n && !(s[q] == '#' && s[q + 1] == '}'))
                q++;
            if (q + 1 >= n)
                jfail(a, "chat template syntax error, line %d: missing end of comment tag", L.line);
            char cs = q > p + 2 && (s[q - 1] == '-' || s[q - 1] == '+') ? s[q - 1] : 0;
            count_lines(&L, p, q + 2);
            L.pos = q + 2;
            line_starting = after_tag(&L, cs, true);
        } else if (kind == 2 && (rb = raw_begin(&L, p, &esign)) > 0) {
            L.pos = rb;
            after_tag(&L, esign, true);
            /* find {% endraw %} */
            size_t q = L.pos, body_end = 0, after = 0;
            char es = 0, bs = 0;
            for (; q + 1 < n; q++) {
                if (s[q] != '{' || s[q + 1] != '%')
                    continue;
                size_t j = q + 2;
                bs = 0;
                if (j < n && (s[j] == '-' || s[j] == '+'))
                    bs = s[j++];
                j = skip_ws(s, n, j);
                if (!starts(&L, j, "endraw"))
                    continue;
                j = skip_ws(s, n, j + 6);
                es = 0;
                if (j < n && (s[j] == '-' || s[j] == '+'))
                    es = s[j++];
                if (starts(&L, j, "%}")) {
                    body_end = q;
                    after = j + 2;
                    break;
                }
            }
            if (!after)
                jfail(a, "chat template syntax error, line %d: missing {%% endraw %%}", L.line);
            size_t bl = body_end - L.pos;
            if (bs == '-')
                bl = rstrip_len(s + L.pos, bl);
            if (bl)
                push(&L, TK_DATA, s + L.pos, bl);
            count_lines(&L, L.pos, after);
            L.pos = after;
            line_starting = after_tag(&L, es, true);
        } else {
            push(&L, kind == 1 ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, NULL, 0);
            L.pos = p + 2 + (sign ? 1 : 0);
            char es2 = lex_tag(&L, kind == 2);
            push(&L, kind == 1 ? TK_VAR_END : TK_BLOCK_END, NULL, 0);
            line_starting = after_tag(&L, es2, kind == 2);
        }
    }
    push(&L, TK_EOF, NULL, 0);
}
