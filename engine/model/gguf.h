/*
 * gguf.h — a read-only GGUF (v2/v3) reader over an mmap'd file.
 *
 * File layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv x {string key, u32 value type, value}, n_tensors x {string name,
 * u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset}, padding to
 * general.alignment (default 32), then the tensor data; a tensor's offset is
 * relative to the start of the data. Strings are u64 length + bytes (no NUL).
 *
 * The file is untrusted: lg_gguf_open checks every count, length and offset
 * with overflow-checked arithmetic and never reads outside the mapping. After
 * a successful open these invariants hold, so callers need not re-check:
 *   - keys are unique, tensor names are unique;
 *   - 1 <= n_dims <= 4, every ne >= 1, ne[0] is a multiple of the type's
 *     block size, the type id is one ggml defines (maybe not one we decode);
 *   - each tensor's data [data, data + nbytes) lies inside the file, starts
 *     at a multiple of the alignment, and no two tensors' data overlap;
 *   - string values are valid C strings (a NUL inside is refused) of at most
 *     LG_GGUF_MAX_STR bytes; arrays are flat (nested arrays are refused).
 *
 * Ownership: lg_gguf owns the mapping (lg_gguf_open) or borrows the caller's
 * buffer (lg_gguf_open_mem, which must outlive it). Every pointer it returns
 * stays valid until lg_gguf_free; tensor data pointers stay valid as long as
 * the mapping lives (see lg_gguf_take_mmap).
 */
#ifndef LG_GGUF_H
#define LG_GGUF_H

#include "engine/base/common.h"

#define LG_GGUF_MAX_STR (1u << 20)    /* longest string value / array element */
#define LG_GGUF_MAX_NAME 256          /* longest key or tensor name */
#define LG_GGUF_MAX_TENSORS (1u << 20)
#define LG_GGUF_MAX_KV (1u << 20)
#define LG_GGUF_MAX_DIMS 4

typedef enum lg_gguf_vtype {
    LG_GGUF_U8 = 0,
    LG_GGUF_I8 = 1,
    LG_GGUF_U16 = 2,
    LG_GGUF_I16 = 3,
    LG_GGUF_U32 = 4,
    LG_GGUF_I32 = 5,
    LG_GGUF_F32 = 6,
    LG_GGUF_BOOL = 7,
    LG_GGUF_STR = 8,
    LG_GGUF_ARR = 9,
    LG_GGUF_U64 = 10,
    LG_GGUF_I64 = 11,
    LG_GGUF_F64 = 12,
} lg_gguf_vtype;

typedef struct lg_gguf lg_gguf;

typedef struct lg_gguf_tensor {
    const char *name;   /* NUL-terminated */
    uint32_t type;      /* ggml type id (quant.h) */
    int n_dims;
    int64_t ne[4];      /* ggml order: ne[0] innermost (row length); unused = 1 */
    uint64_t n_elems;
    size_t offset;      /* absolute offset of the data in the file */
    size_t nbytes;
    const void *data;   /* into the mapping */
} lg_gguf_tensor;

/* Maps and parses a file. Returns 0, or -1 with err naming what is wrong. */
int lg_gguf_open(const char *path, lg_gguf **out, lg_err *err);
/* Parses a buffer the caller keeps alive for the lifetime of the handle. */
int lg_gguf_open_mem(const void *data, size_t size, lg_gguf **out, lg_err *err);
void lg_gguf_free(lg_gguf *g); /* NULL is a no-op */
/* Moves the file mapping out of g into *out (the caller now unmaps it, e.g.
 * via lg_weights_keep_mmap); g stays usable while *out is mapped. For a
 * buffer from lg_gguf_open_mem, *out is zeroed. */
void lg_gguf_take_mmap(lg_gguf *g, lg_mmap *out);

uint32_t lg_gguf_version(const lg_gguf *g);
size_t lg_gguf_alignment(const lg_gguf *g);
size_t lg_gguf_data_offset(const lg_gguf *g);
size_t lg_gguf_file_size(const lg_gguf *g);

/* --- metadata ---------------------------------------------------------- */
int lg_gguf_n_kv(const lg_gguf *g);
const char *lg_gguf_kv_key(const lg_gguf *g, int i);
lg_gguf_vtype lg_gguf_kv_type(const lg_gguf *g, int i);
int lg_gguf_find_kv(const lg_gguf *g, const char *key); /* index or -1 */
const char *lg_gguf_vtype_name(uint32_t t);

/* Typed getters. Return 1 when found (and *out set), 0 when the key is
 * absent (*out untouched), -1 when present but not convertible (err set).
 *   get_int:   any integer type (value must fit int64)
 *   get_float: f32/f64 or any integer type
 *   get_bool:  bool, or an integer 0/1
 *   get_str:   string; *out is NUL-terminated, owned by g; len may be NULL */
int lg_gguf_get_int(const lg_gguf *g, const char *key, int64_t *out, lg_err *err);
int lg_gguf_get_float(const lg_gguf *g, const char *key, double *out, lg_err *err);
int lg_gguf_get_bool(const lg_gguf *g, const char *key, bool *out, lg_err *err);
int lg_gguf_get_str(const lg_gguf *g, const char *key, const char **out, size_t *len, lg_err *err);

/* Arrays: same 1/0/-1 convention. Results are malloc'd; the caller frees.
 *   get_arr_f32: any numeric element type, converted
 *   get_arr_i32: any integer element type, each value must fit int32
 *   get_arr_str: strings; *out is one allocation (pointer table followed by
 *                the NUL-terminated texts): free(*out) releases everything */
int lg_gguf_get_arr_info(const lg_gguf *g, const char *key, lg_gguf_vtype *elem_type, uint64_t *n,
                         lg_err *err);
int lg_gguf_get_arr_f32(const lg_gguf *g, const char *key, float **out, size_t *n, lg_err *err);
int lg_gguf_get_arr_i32(const lg_gguf *g, const char *key, int32_t **out, size_t *n, lg_err *err);
int lg_gguf_get_arr_str(const lg_gguf *g, const char *key, char ***out, size_t *n, lg_err *err);

/* --- tensors (in file order) -------------------------------------------- */
int lg_gguf_n_tensors(const lg_gguf *g);
const lg_gguf_tensor *lg_gguf_tensor_at(const lg_gguf *g, int i);
const lg_gguf_tensor *lg_gguf_find_tensor(const lg_gguf *g, const char *name); /* NULL if absent */

#endif
