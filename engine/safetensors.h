/*
 * safetensors.h — a safe reader of one .safetensors file (the Hugging Face
 * format): the whole file is mmap'd read-only, the JSON header is parsed and
 * checked, and tensors are handed out as zero-copy views into the mapping.
 *
 * File layout:
 *   u64 N (little-endian) | N bytes of JSON header | byte buffer
 *   header = { "<name>": {"dtype": "F16", "shape": [..], "data_offsets": [b, e]},
 *              ..., "__metadata__": {"k": "v", ...} (optional) }
 *   data_offsets are [begin, end) relative to the first byte after the header.
 *
 * What is checked (each failure is -1 with one line in lg_err, never a crash):
 *   header length <= LG_ST_MAX_HEADER and within the file; the header is one
 *   JSON object with no duplicate keys; every entry has a known dtype, a shape
 *   of non-negative integers (rank <= LG_ST_MAX_DIMS) and two offsets with
 *   begin <= end; prod(shape) * dtype size is computed with overflow checks
 *   and must equal end - begin; sorted by offset the tensors neither overlap
 *   nor leave holes and the last one ends exactly at the end of the file (the
 *   same rule as the reference implementation); __metadata__ maps strings to
 *   strings.
 *
 * Generic on purpose: no model knowledge here (it reads model shards and
 * PEFT adapter files alike). Every safetensors dtype is parsed so sizes can be
 * checked; only F32/F16/BF16/I32 map to an lg_dtype (has_lg_dtype), the
 * caller decides what to reject.
 *
 * Ownership: lg_st_file owns the mapping; tensor views and names are valid
 * until lg_st_close, or — for views — for as long as whoever took the mapping
 * with lg_st_take_mmap keeps it.
 */
#ifndef LG_SAFETENSORS_H
#define LG_SAFETENSORS_H

#include "common.h"

#define LG_ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference reader */
#define LG_ST_MAX_DIMS 8

typedef enum lg_st_dtype {
    LG_ST_BOOL, LG_ST_U8, LG_ST_I8, LG_ST_F8_E5M2, LG_ST_F8_E4M3,
    LG_ST_I16, LG_ST_U16, LG_ST_F16, LG_ST_BF16,
    LG_ST_I32, LG_ST_U32, LG_ST_F32,
    LG_ST_I64, LG_ST_U64, LG_ST_F64,
} lg_st_dtype;

typedef struct lg_st_tensor {
    const char *name;
    lg_st_dtype st_dtype;
    const char *dtype_name;   /* as spelled in the file: "F16", "I64", ... */
    bool has_lg_dtype;        /* true for F32, F16, BF16, I32 */
    lg_dtype dtype;           /* valid when has_lg_dtype */
    int n_dims;               /* 0 for a scalar */
    int64_t shape[LG_ST_MAX_DIMS];
    size_t n_elems;
    const void *data;         /* into the mapping; may be unaligned if the writer did not pad */
    size_t nbytes;
    size_t offset;            /* absolute offset of data in the file */
} lg_st_tensor;

typedef struct lg_st_file lg_st_file;

/* Maps and validates path. */
int lg_st_open(const char *path, lg_st_file **out, lg_err *err);
/* Same checks on a caller's buffer (borrowed: must outlive the result).
 * name is used in messages only. Used by tests and fuzzers. */
int lg_st_open_buffer(const void *buf, size_t size, const char *name, lg_st_file **out, lg_err *err);
void lg_st_close(lg_st_file *f); /* NULL is a no-op */

/* Tensors in order of their data offset. */
int lg_st_count(const lg_st_file *f);
const lg_st_tensor *lg_st_at(const lg_st_file *f, int i);     /* NULL if out of range */
const lg_st_tensor *lg_st_get(const lg_st_file *f, const char *name); /* NULL if absent */
/* __metadata__ value for key, NULL if absent. */
const char *lg_st_metadata(const lg_st_file *f, const char *key);

/* Moves the mapping out of f (for lg_weights_keep_mmap): tensor data pointers
 * stay valid for as long as the caller keeps *out mapped; f keeps its names
 * and shapes until lg_st_close. Fails for buffer-opened files or if already taken. */
int lg_st_take_mmap(lg_st_file *f, lg_mmap *out, lg_err *err);

const char *lg_st_dtype_name(lg_st_dtype t);
size_t lg_st_dtype_size(lg_st_dtype t);

#endif
