/*
 * safetensors.c — parse and check a .safetensors header; see safetensors.h for
 * the format, the grammar and the list of checks.
 *
 * Workload: opened a few times per model or adapter load; headers have a few
 * hundred to a few thousand entries. Nothing here touches tensor data, so
 * opening a 10 GB shard costs one mmap and two linear scans of the header.
 * Adapter files are uploaded by tenants, so the header is hostile input: up
 * to LG_ST_MAX_HEADER bytes of anything.
 *
 * Why not a JSON library: a DOM of arbitrary JSON costs tens of times the
 * input ({"a":[[],[],...]} of 30 MiB took 1.4 GiB in jansson) before any
 * structural check could refuse it. The header grammar is fixed and shallow,
 * so it is parsed here by a small recursive-descent reader of exactly that
 * grammar; there is no generic "skip a value", so no input can make it
 * recurse or allocate beyond the grammar.
 *
 * Two passes over the header with the same code (st_parser.fill false, then
 * true):
 *   1. validates everything that can be checked per entry (syntax, limits,
 *      dtypes, shapes, offsets against the data buffer) and counts tensors,
 *      metadata entries and decoded string bytes; allocates nothing (names
 *      are decoded into a stack buffer of LG_ST_MAX_NAME + 1 bytes);
 *   2. fills one block of exactly that size:
 *        [n tensors][n name-index pointers][m metadata (key, value) offsets][strings]
 *      For a header of H bytes the block is <= 3 x H: a tensor entry takes
 *      at least 49 + name bytes of header ("":{"dtype":"U8","shape":[],
 *      "data_offsets":[0,0]} plus a separator) and 136 + 8 + name + 1 bytes
 *      of block; a metadata entry at least 5 + key + value bytes of header
 *      and 8 + key + value + 2 of block. Blocks of 1 MiB or more are an
 *      anonymous mapping of their own (munmap on close): the memory goes back
 *      to the system whatever the allocator's thresholds, which matters on a
 *      server refusing large uploads from worker threads.
 *      Pass 2 writes only within pass 1's counts: a mapped file rewritten by
 *      another process between the passes fails ("the header changed"),
 *      it cannot overflow the block.
 * Then the checks across entries: tensors sorted by data offset, names sorted
 * (duplicates are adjacent), overlaps and holes, metadata keys sorted
 * (duplicates). Sorting is an in-place heapsort (qsort may malloc a copy of
 * the array), so the block is all the memory a header costs: peak <= 3 x H
 * plus a few KiB of stack. Messages name the file, the tensor (at most 120
 * bytes of its name, control characters shown as '?') and, for syntax, the
 * header byte.
 *
 * No global state: files may be opened from several threads at once.
 */
#include "engine/model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define ST_MMAP_MIN (1u << 20) /* blocks this large get their own mapping */
#define ST_SHOW 120            /* bytes of a name quoted in a message */

typedef struct st_meta {
    uint32_t key, val; /* offsets into the string area (headers are < 4 GiB) */
} st_meta;

struct lg_st_file {
    char *name;          /* for messages */
    lg_mmap map;         /* data == NULL when opened from a buffer or taken */
    bool owns_map;
    void *block;         /* everything below lives in it */
    size_t block_size;
    bool block_mapped;   /* mmap'd (else malloc'd) */
    lg_st_tensor *t;     /* [n], sorted by offset */
    const lg_st_tensor **by_name; /* [n], into t, sorted by name */
    int n;
    st_meta *meta;       /* [n_meta], sorted by key */
    int n_meta;
    char *strings;       /* NUL-terminated names, keys, values */
};

static const struct {
    const char *name;
    size_t size;
} st_types[] = {
    [LG_ST_BOOL] = {"BOOL", 1},       [LG_ST_U8] = {"U8", 1},
    [LG_ST_I8] = {"I8", 1},           [LG_ST_F8_E5M2] = {"F8_E5M2", 1},
    [LG_ST_F8_E4M3] = {"F8_E4M3", 1}, [LG_ST_I16] = {"I16", 2},
    [LG_ST_U16] = {"U16", 2},         [LG_ST_F16] = {"F16", 2},
    [LG_ST_BF16] = {"BF16", 2},       [LG_ST_I32] = {"I32", 4},
    [LG_ST_U32] = {"U32", 4},         [LG_ST_F32] = {"F32", 4},
    [LG_ST_I64] = {"I64", 8},         [LG_ST_U64] = {"U64", 8},
    [LG_ST_F64] = {"F64", 8},
};
#define N_ST_TYPES ((int)(sizeof st_types / sizeof st_types[0]))

const char *lg_st_dtype_name(lg_st_dtype t)
{
    return (int)t >= 0 && (int)t < N_ST_TYPES ? st_types[t].name : "?";
}

size_t lg_st_dtype_size(lg_st_dtype t)
{
    return (int)t >= 0 && (int)t < N_ST_TYPES ? st_types[t].size : 0;
}

static int parse_dtype(const char *s, lg_st_dtype *out)
{
    for (int i = 0; i < N_ST_TYPES; i++)
        if (!strcmp(s, st_types[i].name)) {
            *out = (lg_st_dtype)i;
            return 0;
        }
    return -1;
}

static bool to_lg_dtype(lg_st_dtype t, lg_dtype *out)
{
    switch (t) {
    case LG_ST_F32: *out = LG_F32; return true;
    case LG_ST_F16: *out = LG_F16; return true;
    case LG_ST_BF16: *out = LG_BF16; return true;
    case LG_ST_I32: *out = LG_I32; return true;
    default: return false;
    }
}

static void free_block(lg_st_file *f)
{
    if (f->block_mapped)
        munmap(f->block, f->block_size);
    else
        free(f->block);
    f->block = NULL;
    f->block_size = 0;
}

void lg_st_close(lg_st_file *f)
{
    if (!f)
        return;
    if (f->owns_map)
        lg_mmap_close(&f->map);
    free_block(f);
    free(f->name);
    free(f);
}

/* A name as quoted in messages: at most ST_SHOW bytes (cut on a UTF-8
 * boundary, "..." appended), control characters as '?'. */
static const char *show(const char *s, char buf[ST_SHOW + 4])
{
    size_t n = 0;
    for (; s[n] && n < ST_SHOW; n++)
        buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    if (s[n]) {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* s[n] is the first byte left out: not inside a UTF-8 sequence */
        memcpy(buf + n, "...", 4);
    } else {
        buf[n] = 0;
    }
    return buf;
}

/* ---- the streaming header parser ------------------------------------------ */

typedef struct st_parser {
    const uint8_t *s, *p, *end; /* the header: [s, end) */
    const char *fn;             /* file name for messages */
    lg_err *err;
    const uint8_t *buf;         /* data buffer (after the header) */
    size_t buf_len;
    bool fill;                  /* pass 2: write into the block */
    /* counted by both passes */
    size_t n_t, n_meta, str_bytes;
    bool seen_meta;
    /* pass 2 destinations, with the capacities pass 1 counted: a file that
     * changes between the passes (another process writing to a mapped
     * file) must fail, never write past them */
    lg_st_tensor *t;
    st_meta *meta;
    char *str;
    size_t t_cap, meta_cap, str_cap;
} st_parser;

static size_t at(const st_parser *P) { return (size_t)(P->p - P->s); }

static void ws(st_parser *P)
{
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r'))
        P->p++;
}

/* The next byte, or 0 at the end of the header (0 is never valid there). */
static int peek(const st_parser *P) { return P->p < P->end ? *P->p : 0; }

static int syntax(st_parser *P, const char *what)
{
    if (P->p >= P->end)
        return lg_fail(P->err, "%s: header is not valid JSON: %s, found the end of the header (byte %zu)", P->fn,
                       what, at(P));
    return lg_fail(P->err, "%s: header is not valid JSON: %s at byte %zu", P->fn, what, at(P));
}

/* What a value starting with c is, for messages. */
static const char *kind(int c)
{
    switch (c) {
    case '{': return "an object";
    case '[': return "a list";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    case 0: return "the end of the header";
    default: return c == '-' || (c >= '0' && c <= '9') ? "a number" : "something that is not JSON";
    }
}

static int hex4(const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0];
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

enum { STR_OK = 0, STR_TOO_LONG = 1, STR_CONTROL = 2 };

/* Reads the JSON string at P->p (which is '"'). Decoded UTF-8 goes to dst
 * (NUL-terminated, at most max bytes + the NUL) when dst is given; *len gets
 * the decoded length either way. Returns -1 on a JSON error (message set),
 * STR_TOO_LONG when the decoded string passes max bytes (stops there; the
 * caller words the message), STR_CONTROL (no_ctl: a control character in
 * the decoded string, raw ones are always a JSON error). */
static int parse_string(st_parser *P, char *dst, size_t max, size_t *len, bool no_ctl)
{
    const uint8_t *p = P->p + 1, *end = P->end;
    size_t n = 0;
    for (;;) {
        if (p >= end) {
            P->p = p;
            return syntax(P, "unterminated string");
        }
        uint8_t c = *p;
        uint8_t tmp[4];
        size_t k = 1;
        const uint8_t *src = p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            P->p = p;
            return syntax(P, "control character in a string (escape it)");
        }
        if (c == '\\') {
            if (end - p < 2) {
                P->p = p;
                return syntax(P, "unterminated escape");
            }
            uint32_t cp;
            switch (p[1]) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u': cp = 0x110000; break;
            default:
                P->p = p;
                return syntax(P, "invalid escape in a string");
            }
            size_t used = 2;
            if (cp == 0x110000) {
                if (end - p < 6 || hex4(p + 2, &cp)) {
                    P->p = p;
                    return syntax(P, "invalid \\u escape (expected 4 hex digits)");
                }
                used = 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    P->p = p;
                    return syntax(P, "unpaired low surrogate in a \\u escape");
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || hex4(p + 8, &lo) || lo < 0xDC00 ||
                        lo > 0xDFFF) {
                        P->p = p;
                        return syntax(P, "unpaired high surrogate in a \\u escape");
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    used = 12;
                }
                if (cp == 0) {
                    P->p = p;
                    return syntax(P, "\\u0000 in a string is not allowed");
                }
            }
            if (cp < 0x80) {
                tmp[0] = (uint8_t)cp;
                k = 1;
            } else if (cp < 0x800) {
                tmp[0] = (uint8_t)(0xC0 | cp >> 6);
                tmp[1] = (uint8_t)(0x80 | (cp & 0x3F));
                k = 2;
            } else if (cp < 0x10000) {
                tmp[0] = (uint8_t)(0xE0 | cp >> 12);
                tmp[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
                tmp[2] = (uint8_t)(0x80 | (cp & 0x3F));
                k = 3;
            } else {
                tmp[0] = (uint8_t)(0xF0 | cp >> 18);
                tmp[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
                tmp[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
                tmp[3] = (uint8_t)(0x80 | (cp & 0x3F));
                k = 4;
            }
            src = tmp;
            if (no_ctl && (cp < 0x20 || cp == 0x7f)) {
                *len = n;
                return STR_CONTROL;
            }
            p += used;
        } else if (c >= 0x80) {
            k = utf8_len(p, end);
            if (!k) {
                P->p = p;
                return syntax(P, "invalid UTF-8 in a string");
            }
            p += k;
        } else {
            if (no_ctl && c == 0x7f) {
                *len = n;
                return STR_CONTROL;
            }
            p++;
        }
        if (k > max - n) {
            *len = n;
            return STR_TOO_LONG; /* P->p still at the opening quote */
        }
        if (dst)
            memcpy(dst + n, src, k);
        n += k;
    }
    if (dst)
        dst[n] = 0;
    *len = n;
    P->p = p;
    return STR_OK;
}

enum { NUM_OK, NUM_NOT_UINT, NUM_TOO_BIG };

/* Reads a JSON number at P->p as an unsigned 64-bit integer. NUM_NOT_UINT for
 * a negative or non-integral number or a value that is not a number at all
 * (then nothing is consumed); NUM_TOO_BIG past UINT64_MAX; -1 on a JSON
 * syntax error. "-0" reads as 0, as a JSON parser would. */
static int parse_uint(st_parser *P, uint64_t *out)
{
    const uint8_t *p = P->p, *end = P->end;
    int c = peek(P);
    if (c != '-' && (c < '0' || c > '9'))
        return NUM_NOT_UINT;
    bool neg = false, frac = false, big = false;
    uint64_t v = 0;
    if (*p == '-') {
        neg = true;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') {
        P->p = p;
        return syntax(P, "expected a digit");
    }
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (v > (UINT64_MAX - d) / 10)
                big = true;
            else
                v = v * 10 + d;
            p++;
        }
    if (p < end && *p == '.') {
        frac = true;
        p++;
        if (p >= end || *p < '0' || *p > '9') {
            P->p = p;
            return syntax(P, "expected a digit after '.'");
        }
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        frac = true;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9') {
            P->p = p;
            return syntax(P, "expected a digit in the exponent");
        }
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    P->p = p;
    if ((neg && (v != 0 || big)) || frac)
        return NUM_NOT_UINT;
    if (big)
        return NUM_TOO_BIG;
    *out = v;
    return NUM_OK;
}

/* After a member value: ',' (then *more) or the closing byte. */
static int next_member(st_parser *P, int close, bool *more)
{
    ws(P);
    int c = peek(P);
    if (c == ',') {
        P->p++;
        ws(P);
        *more = true;
        return 0;
    }
    if (c == close) {
        P->p++;
        *more = false;
        return 0;
    }
    return syntax(P, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* `"key" :` of an entry object into k[32]; *fits false when longer than 31
 * bytes (k then holds the first bytes, for the message). */
static int entry_key(st_parser *P, char k[32], bool *fits)
{
    if (peek(P) != '"')
        return syntax(P, "expected a string key");
    size_t len;
    int rc = parse_string(P, k, 31, &len, false);
    if (rc < 0)
        return -1;
    *fits = rc == STR_OK;
    if (!*fits) {
        /* keep the first bytes for the message; the entry is refused anyway */
        k[len] = 0;
        return 0;
    }
    ws(P);
    if (peek(P) != ':')
        return syntax(P, "expected ':'");
    P->p++;
    ws(P);
    return 0;
}

/* One tensor entry, the value of key `name` (decoded, namelen bytes). */
static int parse_entry(st_parser *P, const char *name, size_t namelen)
{
    const char *fn = P->fn;
    char sh[ST_SHOW + 4];
    const char *nm = show(name, sh);
    if (peek(P) != '{')
        return lg_fail(P->err, "%s: tensor '%s': expected an object with dtype/shape/data_offsets, found %s", fn, nm,
                       kind(peek(P)));
    P->p++;
    ws(P);
    bool has_dtype = false, has_shape = false, has_off = false;
    lg_st_dtype dt = LG_ST_U8;
    int n_dims = 0, n_off = 0;
    uint64_t shape[LG_ST_MAX_DIMS], off[2] = {0, 0};
    bool more = peek(P) != '}';
    if (!more)
        P->p++;
    while (more) {
        char k[32];
        bool fits;
        if (entry_key(P, k, &fits))
            return -1;
        bool is_dtype = fits && !strcmp(k, "dtype"), is_shape = fits && !strcmp(k, "shape"),
             is_off = fits && !strcmp(k, "data_offsets");
        if (!is_dtype && !is_shape && !is_off)
            return lg_fail(P->err,
                           "%s: tensor '%s': unexpected key '%s%s' (expected only dtype, shape and data_offsets)", fn,
                           nm, show(k, (char[ST_SHOW + 4]){0}), fits ? "" : "...");
        if ((is_dtype && has_dtype) || (is_shape && has_shape) || (is_off && has_off))
            return lg_fail(P->err, "%s: tensor '%s': duplicate key \"%s\"", fn, nm, k);
        if (is_dtype) {
            if (peek(P) != '"')
                return lg_fail(P->err, "%s: tensor '%s': expected a string \"dtype\", found %s", fn, nm, kind(peek(P)));
            char d[32];
            size_t dl;
            int rc = parse_string(P, d, 31, &dl, false);
            if (rc < 0)
                return -1;
            if (rc != STR_OK || parse_dtype(d, &dt)) {
                if (rc != STR_OK)
                    d[dl] = 0;
                return lg_fail(P->err, "%s: tensor '%s': unknown dtype '%s%s'", fn, nm, show(d, (char[ST_SHOW + 4]){0}),
                               rc == STR_OK ? "" : "...");
            }
            has_dtype = true;
        } else if (is_shape) {
            if (peek(P) != '[')
                return lg_fail(P->err, "%s: tensor '%s': expected an array \"shape\", found %s", fn, nm, kind(peek(P)));
            P->p++;
            ws(P);
            bool el = peek(P) != ']';
            if (!el)
                P->p++;
            while (el) {
                if (n_dims == LG_ST_MAX_DIMS)
                    return lg_fail(P->err, "%s: tensor '%s': rank above %d, expected at most %d", fn, nm,
                                   LG_ST_MAX_DIMS, LG_ST_MAX_DIMS);
                uint64_t d = 0;
                int rc = parse_uint(P, &d);
                if (rc < 0)
                    return -1;
                if (rc == NUM_NOT_UINT)
                    return lg_fail(P->err, "%s: tensor '%s': shape[%d] is not a non-negative integer", fn, nm, n_dims);
                if (rc == NUM_TOO_BIG || d > (uint64_t)INT64_MAX)
                    return lg_fail(P->err, "%s: tensor '%s': shape[%d] is too large (the limit is 2^63 - 1)", fn, nm,
                                   n_dims);
                shape[n_dims++] = d;
                if (next_member(P, ']', &el))
                    return -1;
            }
            has_shape = true;
        } else {
            if (peek(P) != '[')
                return lg_fail(P->err, "%s: tensor '%s': expected \"data_offsets\": [begin, end], found %s", fn, nm,
                               kind(peek(P)));
            P->p++;
            ws(P);
            bool el = peek(P) != ']';
            if (!el)
                P->p++;
            while (el) {
                if (n_off == 2)
                    return lg_fail(P->err,
                                   "%s: tensor '%s': expected \"data_offsets\": [begin, end], found more than two", fn,
                                   nm);
                int rc = parse_uint(P, &off[n_off]);
                if (rc < 0)
                    return -1;
                if (rc == NUM_NOT_UINT)
                    return lg_fail(P->err, "%s: tensor '%s': data_offsets must be non-negative integers", fn, nm);
                if (rc == NUM_TOO_BIG)
                    return lg_fail(P->err, "%s: tensor '%s': data_offsets[%d] is too large (more than 64 bits)", fn, nm,
                                   n_off);
                n_off++;
                if (next_member(P, ']', &el))
                    return -1;
            }
            has_off = true;
        }
        if (next_member(P, '}', &more))
            return -1;
    }

    /* the entry is complete: the same checks, in the same order, as ever */
    if (!has_dtype)
        return lg_fail(P->err, "%s: tensor '%s': expected a string \"dtype\", found none", fn, nm);
    if (!has_shape)
        return lg_fail(P->err, "%s: tensor '%s': expected an array \"shape\", found none", fn, nm);
    if (!has_off || n_off != 2)
        return lg_fail(P->err, "%s: tensor '%s': expected \"data_offsets\": [begin, end]", fn, nm);
    size_t n = 1;
    for (int i = 0; i < n_dims; i++)
        if (shape[i] > SIZE_MAX || !lg_mul_ok(n, (size_t)shape[i], &n))
            return lg_fail(P->err, "%s: tensor '%s': the product of the shape overflows", fn, nm);
    size_t want;
    if (!lg_mul_ok(n, st_types[dt].size, &want))
        return lg_fail(P->err, "%s: tensor '%s': %zu elements of %s overflow a byte count", fn, nm, n,
                       st_types[dt].name);
    uint64_t b = off[0], e = off[1];
    if (e < b)
        return lg_fail(P->err, "%s: tensor '%s': data_offsets [%llu, %llu) end before they begin", fn, nm,
                       (unsigned long long)b, (unsigned long long)e);
    if (e > P->buf_len)
        return lg_fail(P->err, "%s: tensor '%s': data_offsets end at %llu, past the %zu-byte data buffer", fn, nm,
                       (unsigned long long)e, P->buf_len);
    if (e - b != want)
        return lg_fail(P->err, "%s: tensor '%s': shape and %s need %zu bytes, data_offsets give %llu", fn, nm,
                       st_types[dt].name, want, (unsigned long long)(e - b));

    if (P->fill) {
        if (P->n_t >= P->t_cap || P->str_bytes + namelen + 1 > P->str_cap)
            return lg_fail(P->err, "%s: the header changed while it was read", fn);
        lg_st_tensor *t = &P->t[P->n_t];
        char *nmcopy = P->str + P->str_bytes;
        memcpy(nmcopy, name, namelen + 1);
        t->name = nmcopy;
        t->st_dtype = dt;
        t->dtype_name = st_types[dt].name;
        t->has_lg_dtype = to_lg_dtype(dt, &t->dtype);
        t->n_dims = n_dims;
        for (int i = 0; i < n_dims; i++)
            t->shape[i] = (int64_t)shape[i];
        t->n_elems = n;
        t->offset = (size_t)b; /* relative for now; made absolute by the caller */
        t->nbytes = want;
        t->data = P->buf + b;
    }
    P->n_t++;
    P->str_bytes += namelen + 1;
    return 0;
}

/* The value of "__metadata__": an object of strings. */
static int parse_metadata(st_parser *P)
{
    const char *fn = P->fn;
    if (peek(P) != '{')
        return lg_fail(P->err, "%s: __metadata__ is not an object (found %s)", fn, kind(peek(P)));
    P->p++;
    ws(P);
    bool more = peek(P) != '}';
    if (!more)
        P->p++;
    while (more) {
        if (peek(P) != '"')
            return syntax(P, "expected a string key in __metadata__");
        char key[LG_ST_MAX_NAME + 1];
        size_t klen, vlen;
        size_t key_at = at(P);
        int rc = parse_string(P, key, LG_ST_MAX_NAME, &klen, false);
        if (rc < 0)
            return -1;
        if (rc == STR_TOO_LONG)
            return lg_fail(P->err, "%s: __metadata__ key at header byte %zu is longer than %d bytes", fn, key_at,
                           LG_ST_MAX_NAME);
        ws(P);
        if (peek(P) != ':')
            return syntax(P, "expected ':'");
        P->p++;
        ws(P);
        char sh[ST_SHOW + 4];
        if (peek(P) != '"')
            return lg_fail(P->err, "%s: __metadata__['%s'] is not a string (found %s)", fn, show(key, sh),
                           kind(peek(P)));
        if (P->n_meta == LG_ST_MAX_METADATA)
            return lg_fail(P->err, "%s: __metadata__ has more than %d entries", fn, LG_ST_MAX_METADATA);
        if (P->fill) {
            size_t kat = P->str_bytes, vat = kat + klen + 1;
            if (P->n_meta >= P->meta_cap || vat >= P->str_cap)
                return lg_fail(P->err, "%s: the header changed while it was read", fn);
            memcpy(P->str + kat, key, klen + 1);
            rc = parse_string(P, P->str + vat, P->str_cap - vat - 1, &vlen, false);
            if (rc == STR_TOO_LONG)
                return lg_fail(P->err, "%s: the header changed while it was read", fn);
            P->meta[P->n_meta].key = (uint32_t)kat;
            P->meta[P->n_meta].val = (uint32_t)vat;
        } else {
            rc = parse_string(P, NULL, SIZE_MAX, &vlen, false);
        }
        if (rc < 0)
            return -1;
        P->n_meta++;
        P->str_bytes += klen + 1 + vlen + 1;
        if (next_member(P, '}', &more))
            return -1;
    }
    return 0;
}

/* The whole header: { member (, member)* } and nothing but whitespace after. */
static int parse_header(st_parser *P)
{
    const char *fn = P->fn;
    P->p = P->s + 1; /* the caller checked the '{' */
    P->n_t = P->n_meta = P->str_bytes = 0;
    P->seen_meta = false;
    ws(P);
    bool more = peek(P) != '}';
    if (!more)
        P->p++;
    while (more) {
        if (peek(P) != '"')
            return syntax(P, "expected a string key");
        char key[LG_ST_MAX_NAME + 1];
        size_t klen, key_at = at(P);
        int rc = parse_string(P, key, LG_ST_MAX_NAME, &klen, true);
        if (rc < 0)
            return -1;
        if (rc == STR_TOO_LONG)
            return lg_fail(P->err, "%s: tensor name at header byte %zu is longer than %d bytes", fn, key_at,
                           LG_ST_MAX_NAME);
        if (rc == STR_CONTROL)
            return lg_fail(P->err, "%s: tensor name at header byte %zu contains a control character", fn, key_at);
        ws(P);
        if (peek(P) != ':')
            return syntax(P, "expected ':'");
        P->p++;
        ws(P);
        if (!strcmp(key, "__metadata__")) {
            if (P->seen_meta)
                return lg_fail(P->err, "%s: duplicate key \"__metadata__\" in the header", fn);
            P->seen_meta = true;
            if (parse_metadata(P))
                return -1;
        } else {
            if (P->n_t == LG_ST_MAX_TENSORS)
                return lg_fail(P->err, "%s: more than %d tensors in the header", fn, LG_ST_MAX_TENSORS);
            if (parse_entry(P, key, klen))
                return -1;
        }
        if (next_member(P, '}', &more))
            return -1;
    }
    ws(P);
    if (P->p != P->end)
        return syntax(P, "expected only whitespace after the header object");
    return 0;
}

/* Heapsort of n elements of `size` (<= 16) bytes: in place, O(n log n) at
 * worst, and — unlike qsort, which may malloc a copy of the array — no
 * allocation, so the block stays the only memory a header costs. */
typedef int (*st_cmp)(const void *a, const void *b, const void *ctx);

static void swap_el(uint8_t *a, uint8_t *b, size_t size)
{
    uint8_t t[16];
    memcpy(t, a, size);
    memcpy(a, b, size);
    memcpy(b, t, size);
}

static void sift(uint8_t *base, size_t size, size_t root, size_t n, st_cmp cmp, const void *ctx)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && cmp(base + c * size, base + (c + 1) * size, ctx) < 0)
            c++;
        if (cmp(base + root * size, base + c * size, ctx) >= 0)
            return;
        swap_el(base + root * size, base + c * size, size);
        root = c;
    }
}

static void heapsort_st(void *v, size_t n, size_t size, st_cmp cmp, const void *ctx)
{
    uint8_t *base = v;
    if (n < 2)
        return;
    for (size_t i = n / 2; i-- > 0;)
        sift(base, size, i, n, cmp, ctx);
    for (size_t end = n - 1; end > 0; end--) {
        swap_el(base, base + end * size, size);
        sift(base, size, 0, end, cmp, ctx);
    }
}

static int cmp_offset_ptr(const void *a, const void *b, const void *ctx)
{
    const lg_st_tensor *x = *(const lg_st_tensor *const *)a, *y = *(const lg_st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return x < y ? -1 : x > y; /* stable: file order among equals */
}

static int cmp_name_ptr(const void *a, const void *b, const void *ctx)
{
    return strcmp((*(const lg_st_tensor *const *)a)->name, (*(const lg_st_tensor *const *)b)->name);
}

static int cmp_meta(const void *a, const void *b, const void *ctx)
{
    const char *s = ctx;
    return strcmp(s + ((const st_meta *)a)->key, s + ((const st_meta *)b)->key);
}

/* Sorts t[0..n) by data offset, using idx[0..n) (then free again) as the
 * permutation: sort pointers, then move the tensors along its cycles. */
static void sort_by_offset(lg_st_tensor *t, const lg_st_tensor **idx, size_t n)
{
    for (size_t i = 0; i < n; i++)
        idx[i] = &t[i];
    heapsort_st(idx, n, sizeof *idx, cmp_offset_ptr, NULL);
    for (size_t i = 0; i < n; i++) {
        if (!idx[i])
            continue;
        lg_st_tensor tmp = t[i];
        size_t j = i;
        for (;;) {
            size_t k = (size_t)(idx[j] - t); /* t[j] gets the tensor now at t[k] */
            idx[j] = NULL;
            if (k == i) {
                t[j] = tmp;
                break;
            }
            t[j] = t[k];
            j = k;
        }
    }
}

static int parse(lg_st_file *f, const uint8_t *p, size_t size, lg_err *err)
{
    const char *fn = f->name;
    if (size < 8)
        return lg_fail(err, "%s: file is %zu bytes, expected at least 8 (the header length)", fn, size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | p[i];
    if (hl > LG_ST_MAX_HEADER)
        return lg_fail(err, "%s: header length %llu exceeds the limit of %u bytes", fn, (unsigned long long)hl,
                       LG_ST_MAX_HEADER);
    if (hl > size - 8)
        return lg_fail(err, "%s: header length %llu runs past the end of the %zu-byte file", fn,
                       (unsigned long long)hl, size);
    if (hl == 0 || p[8] != '{')
        return lg_fail(err, "%s: header does not start with '{'", fn);

    st_parser P = {.s = p + 8, .end = p + 8 + hl, .fn = fn, .err = err, .buf = p + 8 + hl,
                   .buf_len = size - 8 - (size_t)hl};
    /* pass 1: every per-entry check and the counts; no allocation */
    if (parse_header(&P))
        return -1;

    /* one block of exactly the counted size (see the note at the top) */
    size_t n_t = P.n_t, n_meta = P.n_meta;
    size_t sz_t = n_t * sizeof(lg_st_tensor), sz_idx = n_t * sizeof(lg_st_tensor *),
           sz_meta = n_meta * sizeof(st_meta), total = sz_t + sz_idx + sz_meta + P.str_bytes;
    if (total == 0)
        total = 1;
    if (total >= ST_MMAP_MIN) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            f->block = m;
            f->block_mapped = true;
        }
    } else {
        f->block = calloc(1, total);
    }
    if (!f->block)
        return lg_fail(err, "%s: out of memory for %zu header entries (%zu bytes)", fn, n_t + n_meta, total);
    f->block_size = total;
    char *b = f->block;
    f->t = (lg_st_tensor *)b;
    f->by_name = (const lg_st_tensor **)(b + sz_t);
    f->meta = (st_meta *)(b + sz_t + sz_idx);
    f->strings = b + sz_t + sz_idx + sz_meta;

    /* pass 2: the same parse, writing */
    P.fill = true;
    P.t = f->t;
    P.meta = f->meta;
    P.str = f->strings;
    P.t_cap = n_t;
    P.meta_cap = n_meta;
    P.str_cap = P.str_bytes;
    if (parse_header(&P))
        return -1;
    if (P.n_t != n_t || P.n_meta != n_meta || P.str_bytes != P.str_cap)
        return lg_fail(err, "%s: the header changed while it was read", fn);
    f->n = (int)n_t;
    f->n_meta = (int)n_meta;

    /* duplicates: names sorted, equal ones are adjacent */
    sort_by_offset(f->t, f->by_name, n_t);
    for (size_t i = 0; i < n_t; i++)
        f->by_name[i] = &f->t[i];
    heapsort_st(f->by_name, n_t, sizeof *f->by_name, cmp_name_ptr, NULL);
    char sh[ST_SHOW + 4];
    for (size_t i = 1; i < n_t; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
            return lg_fail(err, "%s: duplicate tensor name '%s' in the header", fn, show(f->by_name[i]->name, sh));
    heapsort_st(f->meta, n_meta, sizeof *f->meta, cmp_meta, f->strings);
    for (size_t i = 1; i < n_meta; i++)
        if (!strcmp(f->strings + f->meta[i - 1].key, f->strings + f->meta[i].key))
            return lg_fail(err, "%s: duplicate __metadata__ key '%s'", fn, show(f->strings + f->meta[i].key, sh));

    /* sorted by offset: no overlap, no hole, the buffer covered exactly */
    size_t pos = 0;
    char sh2[ST_SHOW + 4];
    for (size_t i = 0; i < n_t; i++) {
        lg_st_tensor *t = &f->t[i];
        if (t->offset < pos)
            return lg_fail(err, "%s: tensor '%s' [%zu, %zu) overlaps '%s' which ends at %zu", fn, show(t->name, sh),
                           t->offset, t->offset + t->nbytes, show(f->t[i - 1].name, sh2), pos);
        if (t->offset > pos)
            return lg_fail(err, "%s: bytes [%zu, %zu) of the data buffer belong to no tensor (before '%s')", fn, pos,
                           t->offset, show(t->name, sh));
        pos = t->offset + t->nbytes; /* cannot overflow: end <= buf_len was checked */
        t->offset += 8 + (size_t)hl;
    }
    if (pos != P.buf_len)
        return lg_fail(err, "%s: the tensors cover %zu bytes of a %zu-byte data buffer", fn, pos, P.buf_len);
    return 0;
}

static lg_st_file *new_file(const char *name)
{
    lg_st_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(name ? name : "<buffer>"))) {
        free(f);
        f = NULL;
    }
    return f;
}

int lg_st_open_buffer(const void *buf, size_t size, const char *name, lg_st_file **out, lg_err *err)
{
    *out = NULL;
    lg_st_file *f = new_file(name);
    if (!f)
        return lg_fail(err, "out of memory opening %s", name ? name : "<buffer>");
    if (parse(f, buf, size, err)) {
        lg_st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int lg_st_open(const char *path, lg_st_file **out, lg_err *err)
{
    *out = NULL;
    lg_st_file *f = new_file(path);
    if (!f)
        return lg_fail(err, "out of memory opening %s", path);
    if (lg_mmap_open(path, &f->map, err)) {
        lg_st_close(f);
        return -1;
    }
    f->owns_map = true;
    if (parse(f, f->map.data, f->map.size, err)) {
        lg_st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int lg_st_count(const lg_st_file *f) { return f ? f->n : 0; }

const lg_st_tensor *lg_st_at(const lg_st_file *f, int i)
{
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const lg_st_tensor *lg_st_get(const lg_st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const lg_st_tensor *t = f->by_name[mid];
        int c = strcmp(name, t->name);
        if (!c)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *lg_st_metadata(const lg_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    int lo = 0, hi = f->n_meta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(key, f->strings + f->meta[mid].key);
        if (!c)
            return f->strings + f->meta[mid].val;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

int lg_st_metadata_count(const lg_st_file *f) { return f ? f->n_meta : 0; }

const char *lg_st_metadata_key(const lg_st_file *f, int i)
{
    return f && i >= 0 && i < f->n_meta ? f->strings + f->meta[i].key : NULL;
}

size_t lg_st_table_bytes(const lg_st_file *f) { return f ? f->block_size : 0; }

int lg_st_take_mmap(lg_st_file *f, lg_mmap *out, lg_err *err)
{
    if (!f->owns_map)
        return lg_fail(err, "%s: expected a file-backed mapping to take, found none (buffer or already taken)",
                       f->name);
    *out = f->map;
    f->map.data = NULL;
    f->map.size = 0;
    f->owns_map = false;
    return 0;
}
