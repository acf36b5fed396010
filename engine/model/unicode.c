/*
 * unicode.c — the small amount of Unicode the tokenizer needs.
 *
 * UTF-8 validation follows the Unicode "maximal subpart" rule that Rust's
 * String::from_utf8_lossy uses (and so HF tokenizers): an invalid sequence
 * is replaced by one U+FFFD per maximal prefix of a would-be-valid sequence.
 * The GPT-2 byte-level alphabet maps the 188 printable Latin-1 bytes to
 * themselves and the other 68 bytes to U+0100.. in byte order.
 * Everything else (letters, digits, categories) is PCRE2's business.
 */
#include "engine/model/tokenizer_impl.h"

#include <stdlib.h>

lg_u8_status lg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *len)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        *len = 1;
        return LG_U8_OK;
    }
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1;
        return LG_U8_BAD;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) {
            *len = i;
            return LG_U8_SHORT;
        }
        unsigned d = s[i];
        if (d < lo || d > hi) {
            *len = i;
            return LG_U8_BAD;
        }
        lo = 0x80;
        hi = 0xBF;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    *len = need + 1;
    return LG_U8_OK;
}

bool lg_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l;
        if (lg_utf8_next(p + i, n - i, &cp, &l) != LG_U8_OK)
            return false;
        i += (size_t)l;
    }
    return true;
}

int lg_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool lg_byte_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t lg_byte_to_cp(unsigned char b)
{
    /* non-printable bytes: 0x00-0x20 (k 0..32), 0x7F-0xA0 (k 33..66), 0xAD (k 67) */
    if (lg_byte_printable(b))
        return b;
    if (b <= 0x20)
        return 256 + b;
    if (b >= 0x7F && b <= 0xA0)
        return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

int lg_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return lg_byte_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    if (k < 33)
        return (int)k;
    if (k < 67)
        return (int)(0x7F + k - 33);
    return 0xAD;
}

bool lg_cp_is_whitespace(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int lg_tbuf_put(lg_tbuf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void lg_tbuf_free(lg_tbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
