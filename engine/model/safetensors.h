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
 * The header is read by a purpose-built streaming parser of exactly that
 * grammar (no general JSON DOM): a top-level object whose values are tensor
 * entries (an object with the keys dtype, shape and data_offsets, each once,
 * nothing else) or the one "__metadata__" object of string values. Anything
 * else — other keys, other value types, deeper nesting — is refused where it
 * is met, so the nesting depth is the grammar's (3) and nothing is allocated
 * for a value that is not part of the grammar.
 *
 * What is checked (each failure is -1 with one line in lg_err, never a crash):
 *   header length <= LG_ST_MAX_HEADER and within the file; the header starts
 *   with '{', is valid JSON (RFC 8259: escapes, UTF-8 without overlong forms
 *   or surrogates, no raw control characters, nothing but whitespace after
 *   the object; \u0000 is refused) in the grammar above; at most
 *   LG_ST_MAX_TENSORS tensors and LG_ST_MAX_METADATA metadata entries; tensor
 *   names and metadata keys at most LG_ST_MAX_NAME bytes (decoded), tensor
 *   names free of control characters; no duplicate tensor names, metadata
 *   keys or entry keys; every entry has a known dtype, a shape of
 *   non-negative integers (rank <= LG_ST_MAX_DIMS, each <= INT64_MAX) and two
 *   non-negative integer offsets (integers that overflow 64 bits are refused
 *   as such) with begin <= end <= the data buffer's size; prod(shape) * dtype
 *   size is computed with overflow checks and must equal end - begin; sorted
 *   by offset the tensors neither overlap nor leave holes and the last one
 *   ends exactly at the end of the file (the same rule as the reference
 *   implementation); __metadata__ maps strings to strings.
 *
 * Memory: every limit is checked by a first pass that allocates nothing;
 * the second pass fills one block of exactly the counted size (tensor table,
 * name index, metadata index, decoded strings). For a header of H bytes
 * that block is at most 3 x H (lg_st_table_bytes; the smallest tensor entry
 * takes 49 header bytes and 145 table bytes), blocks of 1 MiB or more are
 * their own anonymous mapping, so closing a file (or refusing one) gives the
 * memory back to the system. A refused header costs no heap at all.
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

#include "engine/base/common.h"

#define LG_ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference reader */
#define LG_ST_MAX_DIMS 8
#define LG_ST_MAX_TENSORS (1 << 20)   /* tensors in one file */
#define LG_ST_MAX_METADATA (1 << 16)  /* __metadata__ entries */
#define LG_ST_MAX_NAME 1024           /* bytes of a tensor name or metadata key (decoded UTF-8) */

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
/* __metadata__ entries in key order (strcmp): count, and the i-th key (NULL
 * if out of range; its value is lg_st_metadata(f, key)). */
int lg_st_metadata_count(const lg_st_file *f);
const char *lg_st_metadata_key(const lg_st_file *f, int i);

/* Moves the mapping out of f (for lg_weights_keep_mmap): tensor data pointers
 * stay valid for as long as the caller keeps *out mapped; f keeps its names
 * and shapes until lg_st_close. Fails for buffer-opened files or if already taken. */
int lg_st_take_mmap(lg_st_file *f, lg_mmap *out, lg_err *err);

/* Bytes the parsed header holds (tensor table, indexes, names, metadata):
 * at most 3 x the header length. For tests of the memory bound. */
size_t lg_st_table_bytes(const lg_st_file *f);

const char *lg_st_dtype_name(lg_st_dtype t);
size_t lg_st_dtype_size(lg_st_dtype t);

#endif
