/*
 * quant.h — GGML tensor element types (as stored in GGUF) and their
 * dequantization to float.
 *
 * Every ggml type id is known here by name and block geometry (elements per
 * block, bytes per block), so the GGUF reader can size and bounds-check any
 * tensor, even one we cannot decode. Decoding is supported for
 *   F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
 * with block layouts exactly as ggml's ggml-common.h / ggml-quants.c and the
 * same float operation order, so results match ggml and gguf-py bit for bit
 * (barring FMA contraction by the compiler: within 1 ulp). Other types are
 * refused with an error naming them.
 *
 * The quantized ones among them are also backend block layouts
 * (engine/backend/backend.h lg_qtype): a backend that takes a layout keeps
 * the file's blocks as they are (weights_gguf.c, model.c); lg_dequant is
 * then the load-time expansion (`--dequant-dtype`) and the upload-time one
 * for backends that do not (CUDA).
 *
 * Workload: runs once per tensor at model load or upload (135M..7B
 * elements in all); lg_dequant splits a tensor's rows over a few pthreads.
 */
#ifndef LG_QUANT_H
#define LG_QUANT_H

#include "engine/backend/backend.h"
#include "engine/base/common.h"

/* ggml_type ids (ggml.h); gaps are ids ggml has retired. */
enum {
    LG_GGML_F32 = 0,
    LG_GGML_F16 = 1,
    LG_GGML_Q4_0 = 2,
    LG_GGML_Q4_1 = 3,
    LG_GGML_Q5_0 = 6,
    LG_GGML_Q5_1 = 7,
    LG_GGML_Q8_0 = 8,
    LG_GGML_Q8_1 = 9,
    LG_GGML_Q2_K = 10,
    LG_GGML_Q3_K = 11,
    LG_GGML_Q4_K = 12,
    LG_GGML_Q5_K = 13,
    LG_GGML_Q6_K = 14,
    LG_GGML_Q8_K = 15,
    LG_GGML_I8 = 24,
    LG_GGML_I16 = 25,
    LG_GGML_I32 = 26,
    LG_GGML_I64 = 27,
    LG_GGML_F64 = 28,
    LG_GGML_BF16 = 30,
};

/* Name of a ggml type id ("Q4_K"), or NULL for an id ggml does not define. */
const char *lg_ggml_type_name(uint32_t type);

/* Block geometry of a type: elements per block and bytes per block. Returns
 * false for an unknown id. */
bool lg_ggml_type_info(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);

/* Whether lg_dequant_row / lg_dequant can decode the type. */
bool lg_quant_supported(uint32_t type);

/* The backend block layout of a quantized ggml type (LG_Q4_0 for
 * LG_GGML_Q4_0, ...), LG_QNONE for a float type or one without a layout. */
lg_qtype lg_ggml_qtype(uint32_t type);
/* The ggml type id of a layout (q != LG_QNONE). */
uint32_t lg_qtype_ggml(lg_qtype q);

/* Bytes taken by n elements of the type. Fails (-1) for an unknown type, n
 * not a multiple of the block size, or overflow. */
int lg_ggml_nbytes(uint32_t type, uint64_t n, size_t *out, lg_err *err);

/* Decodes n elements (a multiple of the block size) at src to dst floats.
 * src may be unaligned. Returns -1 for an unsupported type or bad n. */
int lg_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, lg_err *err);

/* Decodes a [n_rows, row_len] tensor of the type to dst of type dt (F32, F16
 * or BF16), row r of the source going to row row_map[r] of dst (row_map may
 * be NULL for the identity; the caller guarantees it is a permutation).
 * Splits rows over up to n_threads threads (<= 0: one per online CPU, at
 * most 8). */
int lg_dequant(uint32_t type, const void *src, int64_t n_rows, int64_t row_len, lg_dtype dt,
               void *dst, const int64_t *row_map, int n_threads, lg_err *err);

/* --- the planar checkpoint layouts (quant_planar.c; backend.h LG_QF8 .. LG_QI4) --- */

/* Bytes of a [rows, cols] tensor of planar layout q (all its planes). */
size_t lg_planar_bytes(lg_qtype q, int64_t rows, int64_t cols);
/* Decodes a planar [rows, cols] tensor of layout q to dst [rows, cols] of dt (F32, F16, BF16): w = d * e4m3(q)
 * or d * (q - z), in f32, then one rounding to dt. For a W8A8 layout this drops the activation rounding (the
 * caller prints the notice: the model then runs W8A16). */
int lg_dequant_planar(lg_qtype q, const void *src, int64_t rows, int64_t cols, lg_dtype dt, void *dst, lg_err *err);
/* Rows [r0, r0 + n_rows) of it only, to dst [n_rows, cols]. */
int lg_dequant_planar_rows(lg_qtype q, const void *src, int64_t rows, int64_t cols, int64_t r0, int64_t n_rows,
                           lg_dtype dt, void *dst, lg_err *err);
/* Quantizes a float matrix src [rows, cols] of dtype st to layout q (LG_QF8_A8: per-row d = amax / 448; LG_QI4:
 * round to nearest, asymmetric, groups of 128). *out (malloc'd, lg_planar_bytes(q, rows, cols) = *nbytes bytes)
 * is the caller's to free. */
int lg_quantize_planar(lg_qtype q, const void *src, lg_dtype st, int64_t rows, int64_t cols, void **out,
                       size_t *nbytes, lg_err *err);

/* `--quantization` spelled "fp8" (LG_QF8_A8), "int4" (LG_QI4) or "none"/NULL (LG_QNONE); -1 for anything else. */
int lg_quantization_parse(const char *s, lg_qtype *out);

#endif
