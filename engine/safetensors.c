/*
 * safetensors.c — parse and check a .safetensors header; see safetensors.h for
 * the format and the list of checks.
 *
 * Workload: opened a few times per model or adapter load; headers have a few
 * hundred to a few thousand entries. Nothing here touches tensor data, so
 * opening a 10 GB shard costs one mmap and one JSON parse.
 *
 * The parsed JSON root is kept until close: tensor names point at its keys.
 * Tensors are kept sorted by data offset (needed for the overlap check); a
 * second array of pointers sorted by name serves lg_st_get by binary search.
 * No global state: files may be opened from several threads at once.
 */
#include "safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

struct lg_st_file {
    char *name;          /* for messages */
    lg_mmap map;         /* data == NULL when opened from a buffer or taken */
    bool owns_map;
    json_t *root;        /* owns the name strings */
    json_t *meta;        /* borrowed from root, may be NULL */
    lg_st_tensor *t;     /* [n], sorted by offset */
    const lg_st_tensor **by_name; /* [n], into t, sorted by name */
    int n;
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

void lg_st_close(lg_st_file *f)
{
    if (!f)
        return;
    if (f->owns_map)
        lg_mmap_close(&f->map);
    json_decref(f->root);
    free(f->t);
    free(f->by_name);
    free(f->name);
    free(f);
}

static int cmp_offset(const void *a, const void *b)
{
    const lg_st_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int cmp_name_ptr(const void *a, const void *b)
{
    return strcmp((*(const lg_st_tensor *const *)a)->name, (*(const lg_st_tensor *const *)b)->name);
}

/* Reads a non-negative JSON integer. */
static bool get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_entry(lg_st_file *f, const char *key, json_t *v, const uint8_t *buf, size_t buf_len,
                       lg_st_tensor *t, lg_err *err)
{
    const char *fn = f->name;
    if (!json_is_object(v))
        return lg_fail(err, "%s: tensor '%s': expected an object with dtype/shape/data_offsets", fn, key);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return lg_fail(err, "%s: tensor '%s': expected a string \"dtype\", found none", fn, key);
    if (parse_dtype(json_string_value(jd), &t->st_dtype))
        return lg_fail(err, "%s: tensor '%s': unknown dtype '%s'", fn, key, json_string_value(jd));
    if (!json_is_array(js))
        return lg_fail(err, "%s: tensor '%s': expected an array \"shape\", found none", fn, key);
    if (json_array_size(js) > LG_ST_MAX_DIMS)
        return lg_fail(err, "%s: tensor '%s': rank %zu, expected at most %d", fn, key, json_array_size(js),
                       LG_ST_MAX_DIMS);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return lg_fail(err, "%s: tensor '%s': expected \"data_offsets\": [begin, end]", fn, key);

    t->name = key;
    t->dtype_name = st_types[t->st_dtype].name;
    t->has_lg_dtype = to_lg_dtype(t->st_dtype, &t->dtype);
    t->n_dims = (int)json_array_size(js);
    size_t n = 1;
    for (int i = 0; i < t->n_dims; i++) {
        uint64_t d;
        if (!get_u64(json_array_get(js, i), &d) || d > (uint64_t)INT64_MAX)
            return lg_fail(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", fn, key, i);
        t->shape[i] = (int64_t)d;
        if (d > SIZE_MAX || !lg_mul_ok(n, (size_t)d, &n))
            return lg_fail(err, "%s: tensor '%s': the product of the shape overflows", fn, key);
    }
    t->n_elems = n;
    size_t want;
    if (!lg_mul_ok(n, st_types[t->st_dtype].size, &want))
        return lg_fail(err, "%s: tensor '%s': %zu elements of %s overflow a byte count", fn, key, n, t->dtype_name);

    uint64_t b, e;
    if (!get_u64(json_array_get(jo, 0), &b) || !get_u64(json_array_get(jo, 1), &e))
        return lg_fail(err, "%s: tensor '%s': data_offsets must be non-negative integers", fn, key);
    if (e < b)
        return lg_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu) end before they begin", fn, key,
                       (unsigned long long)b, (unsigned long long)e);
    if (e > buf_len)
        return lg_fail(err, "%s: tensor '%s': data_offsets end at %llu, past the %zu-byte data buffer", fn, key,
                       (unsigned long long)e, buf_len);
    if (e - b != want)
        return lg_fail(err, "%s: tensor '%s': shape and %s need %zu bytes, data_offsets give %llu", fn, key,
                       t->dtype_name, want, (unsigned long long)(e - b));
    t->offset = (size_t)b; /* relative for now; made absolute by the caller */
    t->nbytes = want;
    t->data = buf + b;
    return 0;
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

    json_error_t je;
    f->root = json_loadb((const char *)p + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!f->root)
        return lg_fail(err, "%s: header is not valid JSON: %s (line %d, column %d)", fn, je.text, je.line,
                       je.column);
    if (!json_is_object(f->root))
        return lg_fail(err, "%s: header is JSON but not an object", fn);

    const uint8_t *buf = p + 8 + hl;
    size_t buf_len = size - 8 - (size_t)hl;
    size_t cap = json_object_size(f->root);
    f->t = calloc(cap ? cap : 1, sizeof *f->t);
    f->by_name = calloc(cap ? cap : 1, sizeof *f->by_name);
    if (!f->t || !f->by_name)
        return lg_fail(err, "%s: out of memory for %zu header entries", fn, cap);

    const char *key;
    json_t *v;
    json_object_foreach(f->root, key, v)
    {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v))
                return lg_fail(err, "%s: __metadata__ is not an object", fn);
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv)
            {
                if (!json_is_string(mv))
                    return lg_fail(err, "%s: __metadata__['%s'] is not a string", fn, mk);
            }
            f->meta = v;
            continue;
        }
        if (parse_entry(f, key, v, buf, buf_len, &f->t[f->n], err))
            return -1;
        f->n++;
    }

    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        lg_st_tensor *t = &f->t[i];
        if (t->offset < at)
            return lg_fail(err, "%s: tensor '%s' [%zu, %zu) overlaps '%s' which ends at %zu", fn, t->name, t->offset,
                           t->offset + t->nbytes, f->t[i - 1].name, at);
        if (t->offset > at)
            return lg_fail(err, "%s: bytes [%zu, %zu) of the data buffer belong to no tensor (before '%s')", fn, at,
                           t->offset, t->name);
        at = t->offset + t->nbytes; /* cannot overflow: end <= buf_len was checked */
        t->offset += 8 + (size_t)hl;
    }
    if (at != buf_len)
        return lg_fail(err, "%s: the tensors cover %zu bytes of a %zu-byte data buffer", fn, at, buf_len);

    for (int i = 0; i < f->n; i++)
        f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_ptr);
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
    if (!f || !f->meta || !key)
        return NULL;
    return json_string_value(json_object_get(f->meta, key));
}

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
