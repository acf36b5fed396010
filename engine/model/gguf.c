/*
 * gguf.c — GGUF parsing (see gguf.h for the format and the guarantees).
 *
 * Parsing is one forward pass with a bounds-checked cursor: every read asks
 * the cursor for n bytes and fails if fewer remain, so no count or length in
 * the file can make us read past the mapping. Counts are checked against
 * the bytes left before anything is allocated for them (each KV takes at
 * least 13 bytes, each tensor info at least 32), so a hostile n_tensors
 * cannot make us allocate more than a small multiple of the file size.
 *
 * Scalars are decoded on demand from their recorded offset; scalar strings,
 * keys and tensor names are copied out NUL-terminated at open. Arrays record
 * their element type, count and the offset of the first element; string
 * arrays are walked once at open to validate every length, and again by
 * lg_gguf_get_arr_str to copy them.
 *
 * Lookups use index arrays sorted by name (binary search); the same sort finds
 * duplicate names. A second sort of the tensors by offset proves the data
 * regions disjoint.
 */
#include "engine/model/gguf.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/model/quant.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gkv {
    char *key;
    uint32_t type;      /* lg_gguf_vtype */
    uint32_t arr_type;  /* element type for arrays */
    uint64_t n;         /* array element count */
    size_t off;         /* scalar value or first array element */
    char *str;          /* scalar string copy */
    size_t str_len;
} gkv;

struct lg_gguf {
    lg_mmap map;         /* owned mapping; data NULL for open_mem */
    const uint8_t *base;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    int n_kv;
    gkv *kv;
    int *kv_sorted;      /* kv indices sorted by key */
    int n_tensors;
    lg_gguf_tensor *tensors;
    int *t_sorted;       /* tensor indices sorted by name */
};

typedef struct cursor {
    const uint8_t *p;
    size_t size, pos;
    lg_err *err;
} cursor;

static const size_t k_vsize[] = {
    [LG_GGUF_U8] = 1, [LG_GGUF_I8] = 1, [LG_GGUF_U16] = 2, [LG_GGUF_I16] = 2, [LG_GGUF_U32] = 4,
    [LG_GGUF_I32] = 4, [LG_GGUF_F32] = 4, [LG_GGUF_BOOL] = 1, [LG_GGUF_STR] = 0, [LG_GGUF_ARR] = 0,
    [LG_GGUF_U64] = 8, [LG_GGUF_I64] = 8, [LG_GGUF_F64] = 8,
};

const char *lg_gguf_vtype_name(uint32_t t)
{
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* --- cursor ------------------------------------------------------------ */

static int cur_need(cursor *c, size_t n, const char *what)
{
    if (n > c->size - c->pos)
        return lg_fail(c->err, "gguf: %s at offset %zu needs %zu bytes, but the file ends at %zu", what,
                       c->pos, n, c->size);
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what)
{
    if (cur_need(c, 4, what))
        return -1;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what)
{
    if (cur_need(c, 8, what))
        return -1;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* Reads a string header and skips its bytes; *s points into the buffer. */
static int cur_str(cursor *c, const char **s, size_t *len, size_t max, const char *what)
{
    uint64_t n;
    if (cur_u64(c, &n, what))
        return -1;
    if (n > max)
        return lg_fail(c->err, "gguf: %s at offset %zu has length %llu, expected at most %zu", what,
                       c->pos - 8, (unsigned long long)n, max);
    if (cur_need(c, (size_t)n, what))
        return -1;
    *s = (const char *)c->p + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static char *dup_cstr(const char *s, size_t n, lg_err *err, const char *what)
{
    if (memchr(s, 0, n)) {
        lg_fail(err, "gguf: %s contains a NUL byte", what);
        return NULL;
    }
    char *d = malloc(n + 1);
    if (!d) {
        lg_fail(err, "gguf: out of memory copying %s (%zu bytes)", what, n);
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* --- sorting helpers (glibc qsort_r: comparator gets the array) --------- */

static int cmp_kv_key(const void *a, const void *b, void *ctx)
{
    const gkv *kv = ctx;
    return strcmp(kv[*(const int *)a].key, kv[*(const int *)b].key);
}
static int cmp_t_name(const void *a, const void *b, void *ctx)
{
    const lg_gguf_tensor *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}
static int cmp_t_off(const void *a, const void *b, void *ctx)
{
    const lg_gguf_tensor *t = ctx;
    size_t x = t[*(const int *)a].offset, y = t[*(const int *)b].offset;
    return x < y ? -1 : x > y;
}

/* --- parsing ----------------------------------------------------------- */

static int parse_kv(cursor *c, gkv *kv, int idx)
{
    const char *s;
    size_t n;
    char what[64];
    snprintf(what, sizeof what, "key of metadata entry %d", idx);
    if (cur_str(c, &s, &n, LG_GGUF_MAX_NAME, what))
        return -1;
    if (n == 0)
        return lg_fail(c->err, "gguf: metadata entry %d has an empty key", idx);
    if (!(kv->key = dup_cstr(s, n, c->err, what)))
        return -1;
    if (cur_u32(c, &kv->type, "metadata value type"))
        return -1;
    if (kv->type > LG_GGUF_F64)
        return lg_fail(c->err, "gguf: metadata '%s' has value type %u, expected 0..12", kv->key, kv->type);
    if (kv->type == LG_GGUF_STR) {
        if (cur_str(c, &s, &n, LG_GGUF_MAX_STR, kv->key))
            return -1;
        kv->off = (size_t)(s - (const char *)c->p);
        kv->str_len = n;
        if (!(kv->str = dup_cstr(s, n, c->err, kv->key)))
            return -1;
        return 0;
    }
    if (kv->type != LG_GGUF_ARR) {
        kv->off = c->pos;
        if (cur_need(c, k_vsize[kv->type], kv->key))
            return -1;
        c->pos += k_vsize[kv->type];
        return 0;
    }
    if (cur_u32(c, &kv->arr_type, "array element type") || cur_u64(c, &kv->n, "array length"))
        return -1;
    if (kv->arr_type == LG_GGUF_ARR)
        return lg_fail(c->err, "gguf: metadata '%s' is a nested array, which is not supported", kv->key);
    if (kv->arr_type > LG_GGUF_F64)
        return lg_fail(c->err, "gguf: metadata '%s' has array element type %u, expected 0..12", kv->key,
                       kv->arr_type);
    kv->off = c->pos;
    if (kv->arr_type == LG_GGUF_STR) {
        /* Each element takes >= 8 bytes, so this loop ends by the file's end. */
        for (uint64_t i = 0; i < kv->n; i++) {
            size_t save = c->pos;
            if (cur_str(c, &s, &n, LG_GGUF_MAX_STR, kv->key)) {
                /* re-read to name the element in the error */
                char ew[LG_GGUF_MAX_NAME + 48];
                c->pos = save;
                snprintf(ew, sizeof ew, "'%s' element %llu", kv->key, (unsigned long long)i);
                return cur_str(c, &s, &n, LG_GGUF_MAX_STR, ew);
            }
        }
        return 0;
    }
    size_t bytes;
    if (kv->n > SIZE_MAX || !lg_mul_ok((size_t)kv->n, k_vsize[kv->arr_type], &bytes))
        return lg_fail(c->err, "gguf: metadata '%s' array of %llu elements overflows", kv->key,
                       (unsigned long long)kv->n);
    if (cur_need(c, bytes, kv->key))
        return -1;
    c->pos += bytes;
    return 0;
}

static int parse_tensor_info(cursor *c, lg_gguf_tensor *t, int idx)
{
    const char *s;
    size_t n;
    char what[64];
    snprintf(what, sizeof what, "name of tensor %d", idx);
    if (cur_str(c, &s, &n, LG_GGUF_MAX_NAME, what))
        return -1;
    if (n == 0)
        return lg_fail(c->err, "gguf: tensor %d has an empty name", idx);
    char *name = dup_cstr(s, n, c->err, what);
    if (!name)
        return -1;
    t->name = name;
    uint32_t nd, type;
    if (cur_u32(c, &nd, "tensor n_dims"))
        return -1;
    if (nd < 1 || nd > LG_GGUF_MAX_DIMS)
        return lg_fail(c->err, "gguf: tensor '%s' has %u dimensions, expected 1..%d", name, nd, LG_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t total = 1;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v;
        if (cur_u64(c, &v, "tensor dimension"))
            return -1;
        if (v < 1 || v > (uint64_t)INT64_MAX)
            return lg_fail(c->err, "gguf: tensor '%s' dimension %u is %llu, expected 1..2^63-1", name, d,
                           (unsigned long long)v);
        if (__builtin_mul_overflow(total, v, &total))
            return lg_fail(c->err, "gguf: tensor '%s' element count overflows", name);
        t->ne[d] = (int64_t)v;
    }
    t->n_elems = total;
    if (cur_u32(c, &type, "tensor type"))
        return -1;
    uint32_t be, bb;
    if (!lg_ggml_type_info(type, &be, &bb))
        return lg_fail(c->err, "gguf: tensor '%s' has unknown ggml type id %u", name, type);
    t->type = type;
    if ((uint64_t)t->ne[0] % be)
        return lg_fail(c->err, "gguf: tensor '%s' of type %s has row length %lld, expected a multiple of %u",
                       name, lg_ggml_type_name(type), (long long)t->ne[0], be);
    if (total / be > SIZE_MAX || !lg_mul_ok((size_t)(total / be), bb, &t->nbytes))
        return lg_fail(c->err, "gguf: tensor '%s' byte size overflows", name);
    uint64_t off;
    if (cur_u64(c, &off, "tensor offset"))
        return -1;
    if (off > SIZE_MAX)
        return lg_fail(c->err, "gguf: tensor '%s' offset %llu is too large", name, (unsigned long long)off);
    t->offset = (size_t)off; /* relative for now; made absolute once data_offset is known */
    return 0;
}

static int parse(lg_gguf *g, lg_err *err)
{
    cursor c = {g->base, g->size, 0, err};
    uint64_t n_tensors, n_kv;
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        if (g->size >= 4)
            return lg_fail(err, "gguf: bad magic %02x %02x %02x %02x, expected \"GGUF\"", g->base[0], g->base[1],
                           g->base[2], g->base[3]);
        return lg_fail(err, "gguf: file is %zu bytes, too short for the \"GGUF\" magic", g->size);
    }
    c.pos = 4;
    if (cur_u32(&c, &g->version, "version"))
        return -1;
    if (g->version != 2 && g->version != 3) {
        if (g->version == 1)
            return lg_fail(err, "gguf: version 1 files are not supported, expected version 2 or 3 (re-convert the model)");
        return lg_fail(err, "gguf: version %u, expected 2 or 3%s", g->version,
                       (g->version & 0xffff) == 0 ? " (a big-endian file?)" : "");
    }
    if (cur_u64(&c, &n_tensors, "tensor count") || cur_u64(&c, &n_kv, "metadata count"))
        return -1;
    size_t left = g->size - c.pos;
    if (n_kv > LG_GGUF_MAX_KV || n_kv > left / 13)
        return lg_fail(err, "gguf: metadata count %llu is impossible for a file of %zu bytes (limit %u)",
                       (unsigned long long)n_kv, g->size, LG_GGUF_MAX_KV);
    if (n_tensors > LG_GGUF_MAX_TENSORS || n_tensors > left / 32)
        return lg_fail(err, "gguf: tensor count %llu is impossible for a file of %zu bytes (limit %u)",
                       (unsigned long long)n_tensors, g->size, LG_GGUF_MAX_TENSORS);

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->kv_sorted = calloc(n_kv ? n_kv : 1, sizeof *g->kv_sorted);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->t_sorted = calloc(n_tensors ? n_tensors : 1, sizeof *g->t_sorted);
    if (!g->kv || !g->kv_sorted || !g->tensors || !g->t_sorted)
        return lg_fail(err, "gguf: out of memory for %llu tensors and %llu metadata entries",
                       (unsigned long long)n_tensors, (unsigned long long)n_kv);

    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int)i + 1; /* so lg_gguf_free frees what was copied */
        if (parse_kv(&c, &g->kv[i], (int)i))
            return -1;
    }
    for (int i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = i;
    qsort_r(g->kv_sorted, (size_t)g->n_kv, sizeof(int), cmp_kv_key, g->kv);
    for (int i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv[g->kv_sorted[i]].key, g->kv[g->kv_sorted[i - 1]].key))
            return lg_fail(err, "gguf: metadata key '%s' appears twice", g->kv[g->kv_sorted[i]].key);

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t al;
    int r = lg_gguf_get_int(g, "general.alignment", &al, err);
    if (r < 0)
        return -1;
    if (r == 1) {
        if (al <= 0 || al > (1 << 20) || (al & (al - 1)))
            return lg_fail(err, "gguf: general.alignment is %lld, expected a power of two up to 1 MiB", (long long)al);
        g->alignment = (size_t)al;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int)i + 1;
        if (parse_tensor_info(&c, &g->tensors[i], (int)i))
            return -1;
    }

    /* Data starts at the next multiple of the alignment. */
    size_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    if (!lg_add_ok(c.pos, pad, &g->data_offset) || (g->n_tensors > 0 && g->data_offset > g->size))
        return lg_fail(err, "gguf: tensor data would start at offset %zu, past the end of the file (%zu bytes)",
                       c.pos + pad, g->size);

    for (int i = 0; i < g->n_tensors; i++) {
        lg_gguf_tensor *t = &g->tensors[i];
        size_t abs, end;
        if (t->offset % g->alignment)
            return lg_fail(err, "gguf: tensor '%s' offset %zu is not a multiple of the alignment %zu", t->name,
                           t->offset, g->alignment);
        if (!lg_add_ok(g->data_offset, t->offset, &abs) || !lg_add_ok(abs, t->nbytes, &end) || end > g->size)
            return lg_fail(err, "gguf: tensor '%s' data (offset %zu + %zu bytes) runs past the end of the file (%zu bytes)",
                           t->name, t->offset, t->nbytes, g->size - g->data_offset);
        t->offset = abs;
        t->data = g->base + abs;
        g->t_sorted[i] = i;
    }
    qsort_r(g->t_sorted, (size_t)g->n_tensors, sizeof(int), cmp_t_off, g->tensors);
    for (int i = 1; i < g->n_tensors; i++) {
        const lg_gguf_tensor *a = &g->tensors[g->t_sorted[i - 1]], *b = &g->tensors[g->t_sorted[i]];
        if (a->offset + a->nbytes > b->offset)
            return lg_fail(err, "gguf: data of tensors '%s' and '%s' overlap (offsets %zu+%zu and %zu)", a->name,
                           b->name, a->offset, a->nbytes, b->offset);
    }
    qsort_r(g->t_sorted, (size_t)g->n_tensors, sizeof(int), cmp_t_name, g->tensors);
    for (int i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[g->t_sorted[i]].name, g->tensors[g->t_sorted[i - 1]].name))
            return lg_fail(err, "gguf: tensor name '%s' appears twice", g->tensors[g->t_sorted[i]].name);
    return 0;
}

int lg_gguf_open_mem(const void *data, size_t size, lg_gguf **out, lg_err *err)
{
    *out = NULL;
    lg_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return lg_fail(err, "gguf: out of memory");
    g->base = data;
    g->size = data ? size : 0;
    if (parse(g, err)) {
        lg_gguf_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int lg_gguf_open(const char *path, lg_gguf **out, lg_err *err)
{
    *out = NULL;
    lg_mmap m;
    if (lg_mmap_open(path, &m, err))
        return -1;
    lg_gguf *g;
    if (lg_gguf_open_mem(m.data, m.size, &g, err)) {
        lg_err_prefix(err, "%s", path);
        lg_mmap_close(&m);
        return -1;
    }
    g->map = m;
    *out = g;
    return 0;
}

void lg_gguf_take_mmap(lg_gguf *g, lg_mmap *out)
{
    *out = g->map;
    g->map.data = NULL;
    g->map.size = 0;
}

void lg_gguf_free(lg_gguf *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
    }
    for (int i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    lg_mmap_close(&g->map);
    free(g);
}

uint32_t lg_gguf_version(const lg_gguf *g) { return g->version; }
size_t lg_gguf_alignment(const lg_gguf *g) { return g->alignment; }
size_t lg_gguf_data_offset(const lg_gguf *g) { return g->data_offset; }
size_t lg_gguf_file_size(const lg_gguf *g) { return g->size; }
int lg_gguf_n_kv(const lg_gguf *g) { return g->n_kv; }
const char *lg_gguf_kv_key(const lg_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL; }
lg_gguf_vtype lg_gguf_kv_type(const lg_gguf *g, int i) { return (lg_gguf_vtype)g->kv[i].type; }
int lg_gguf_n_tensors(const lg_gguf *g) { return g->n_tensors; }
const lg_gguf_tensor *lg_gguf_tensor_at(const lg_gguf *g, int i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

int lg_gguf_find_kv(const lg_gguf *g, const char *key)
{
    int lo = 0, hi = g->n_kv - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, i = g->kv_sorted[mid];
        int c = strcmp(key, g->kv[i].key);
        if (!c) return i;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

const lg_gguf_tensor *lg_gguf_find_tensor(const lg_gguf *g, const char *name)
{
    int lo = 0, hi = g->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, i = g->t_sorted[mid];
        int c = strcmp(name, g->tensors[i].name);
        if (!c) return &g->tensors[i];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* --- value decoding ---------------------------------------------------- */

static bool is_int_type(uint32_t t)
{
    return t <= LG_GGUF_I32 || t == LG_GGUF_U64 || t == LG_GGUF_I64;
}

/* Reads one numeric element of type t at p. Integer values come back in *iv
 * (u64 values > INT64_MAX flagged by *big), floats in *fv; both are set. */
static void rd_num(uint32_t t, const uint8_t *p, int64_t *iv, double *fv, bool *big)
{
    *big = false;
    *iv = 0;
    switch (t) {
    case LG_GGUF_U8: case LG_GGUF_BOOL: *iv = p[0]; break;
    case LG_GGUF_I8: *iv = (int8_t)p[0]; break;
    case LG_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case LG_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case LG_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case LG_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case LG_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        *big = v > (uint64_t)INT64_MAX;
        *iv = (int64_t)(v & (uint64_t)INT64_MAX);
        *fv = (double)v;
        return;
    }
    case LG_GGUF_I64: memcpy(iv, p, 8); break;
    case LG_GGUF_F32: { float v; memcpy(&v, p, 4); *fv = v; *iv = 0; return; }
    case LG_GGUF_F64: memcpy(fv, p, 8); *iv = 0; return;
    }
    *fv = (double)*iv;
}

static const gkv *lookup(const lg_gguf *g, const char *key)
{
    int i = lg_gguf_find_kv(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

int lg_gguf_get_int(const lg_gguf *g, const char *key, int64_t *out, lg_err *err)
{
    const gkv *kv = lookup(g, key);
    if (!kv)
        return 0;
    if (!is_int_type(kv->type))
        return lg_fail(err, "gguf: metadata '%s' is %s, expected an integer", key, lg_gguf_vtype_name(kv->type));
    int64_t iv;
    double fv;
    bool big;
    rd_num(kv->type, g->base + kv->off, &iv, &fv, &big);
    if (big)
        return lg_fail(err, "gguf: metadata '%s' is %.0f, too large", key, fv);
    *out = iv;
    return 1;
}

int lg_gguf_get_float(const lg_gguf *g, const char *key, double *out, lg_err *err)
{
    const gkv *kv = lookup(g, key);
    if (!kv)
        return 0;
    if (!is_int_type(kv->type) && kv->type != LG_GGUF_F32 && kv->type != LG_GGUF_F64)
        return lg_fail(err, "gguf: metadata '%s' is %s, expected a number", key, lg_gguf_vtype_name(kv->type));
    int64_t iv;
    bool big;
    rd_num(kv->type, g->base + kv->off, &iv, out, &big);
    return 1;
}

int lg_gguf_get_bool(const lg_gguf *g, const char *key, bool *out, lg_err *err)
{
    const gkv *kv = lookup(g, key);
    if (!kv)
        return 0;
    if (kv->type != LG_GGUF_BOOL && !is_int_type(kv->type))
        return lg_fail(err, "gguf: metadata '%s' is %s, expected a bool", key, lg_gguf_vtype_name(kv->type));
    int64_t iv;
    double fv;
    bool big;
    rd_num(kv->type, g->base + kv->off, &iv, &fv, &big);
    if (big || iv < 0 || iv > 1)
        return lg_fail(err, "gguf: metadata '%s' is %.0f, expected a bool (0 or 1)", key, fv);
    *out = iv != 0;
    return 1;
}

int lg_gguf_get_str(const lg_gguf *g, const char *key, const char **out, size_t *len, lg_err *err)
{
    const gkv *kv = lookup(g, key);
    if (!kv)
        return 0;
    if (kv->type != LG_GGUF_STR)
        return lg_fail(err, "gguf: metadata '%s' is %s, expected a string", key, lg_gguf_vtype_name(kv->type));
    *out = kv->str;
    if (len)
        *len = kv->str_len;
    return 1;
}

static const gkv *lookup_arr(const lg_gguf *g, const char *key, lg_err *err, int *rc)
{
    const gkv *kv = lookup(g, key);
    *rc = 0;
    if (kv && kv->type != LG_GGUF_ARR) {
        *rc = lg_fail(err, "gguf: metadata '%s' is %s, expected an array", key, lg_gguf_vtype_name(kv->type));
        return NULL;
    }
    if (kv)
        *rc = 1;
    return kv;
}

int lg_gguf_get_arr_info(const lg_gguf *g, const char *key, lg_gguf_vtype *elem_type, uint64_t *n, lg_err *err)
{
    int rc;
    const gkv *kv = lookup_arr(g, key, err, &rc);
    if (rc == 1) {
        if (elem_type) *elem_type = (lg_gguf_vtype)kv->arr_type;
        if (n) *n = kv->n;
    }
    return rc;
}

int lg_gguf_get_arr_f32(const lg_gguf *g, const char *key, float **out, size_t *n, lg_err *err)
{
    int rc;
    const gkv *kv = lookup_arr(g, key, err, &rc);
    if (rc != 1)
        return rc;
    if (kv->arr_type == LG_GGUF_STR)
        return lg_fail(err, "gguf: metadata '%s' is an array of strings, expected numbers", key);
    /* The array was bounds-checked at open, so n * 4 <= file size * 4 fits. */
    float *a = malloc((size_t)kv->n * sizeof(float) + 1);
    if (!a)
        return lg_fail(err, "gguf: out of memory for '%s' (%llu elements)", key, (unsigned long long)kv->n);
    size_t es = k_vsize[kv->arr_type];
    for (size_t i = 0; i < kv->n; i++) {
        int64_t iv;
        double fv;
        bool big;
        rd_num(kv->arr_type, g->base + kv->off + i * es, &iv, &fv, &big);
        a[i] = (float)fv;
    }
    *out = a;
    *n = (size_t)kv->n;
    return 1;
}

int lg_gguf_get_arr_i32(const lg_gguf *g, const char *key, int32_t **out, size_t *n, lg_err *err)
{
    int rc;
    const gkv *kv = lookup_arr(g, key, err, &rc);
    if (rc != 1)
        return rc;
    if (!is_int_type(kv->arr_type) && kv->arr_type != LG_GGUF_BOOL)
        return lg_fail(err, "gguf: metadata '%s' is an array of %s, expected integers", key,
                       lg_gguf_vtype_name(kv->arr_type));
    int32_t *a = malloc((size_t)kv->n * sizeof(int32_t) + 1);
    if (!a)
        return lg_fail(err, "gguf: out of memory for '%s' (%llu elements)", key, (unsigned long long)kv->n);
    size_t es = k_vsize[kv->arr_type];
    for (size_t i = 0; i < kv->n; i++) {
        int64_t iv;
        double fv;
        bool big;
        rd_num(kv->arr_type, g->base + kv->off + i * es, &iv, &fv, &big);
        if (big || iv < INT32_MIN || iv > INT32_MAX) {
            free(a);
            return lg_fail(err, "gguf: metadata '%s' element %zu is %.0f, expected a 32-bit integer", key, i, fv);
        }
        a[i] = (int32_t)iv;
    }
    *out = a;
    *n = (size_t)kv->n;
    return 1;
}

int lg_gguf_get_arr_str(const lg_gguf *g, const char *key, char ***out, size_t *n, lg_err *err)
{
    int rc;
    const gkv *kv = lookup_arr(g, key, err, &rc);
    if (rc != 1)
        return rc;
    if (kv->arr_type != LG_GGUF_STR)
        return lg_fail(err, "gguf: metadata '%s' is an array of %s, expected strings", key,
                       lg_gguf_vtype_name(kv->arr_type));
    /* Validated at open: the walk stays inside the buffer. Total text bytes
     * are < the file size, and each element takes >= 8 bytes in the file, so
     * the pointer table (8 bytes per element) is also bounded by it. */
    size_t cnt = (size_t)kv->n, text = 0, pos = kv->off;
    for (size_t i = 0; i < cnt; i++) {
        uint64_t l;
        memcpy(&l, g->base + pos, 8);
        if (memchr(g->base + pos + 8, 0, (size_t)l))
            return lg_fail(err, "gguf: metadata '%s' element %zu contains a NUL byte", key, i);
        pos += 8 + (size_t)l;
        text += (size_t)l + 1;
    }
    size_t total = cnt * sizeof(char *) + text + 1;
    char **a = malloc(total);
    if (!a)
        return lg_fail(err, "gguf: out of memory for '%s' (%zu strings)", key, cnt);
    char *dst = (char *)(a + cnt);
    pos = kv->off;
    for (size_t i = 0; i < cnt; i++) {
        uint64_t l;
        memcpy(&l, g->base + pos, 8);
        memcpy(dst, g->base + pos + 8, (size_t)l);
        dst[l] = 0;
        a[i] = dst;
        dst += l + 1;
        pos += 8 + (size_t)l;
    }
    *out = a;
    *n = cnt;
    return 1;
}
