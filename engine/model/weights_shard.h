/*
 * weights_shard.h — a tensor-parallel rank's slice of a weight tensor, on
 * the host, before it is uploaded (engine/model/model.c; the scheme is in
 * engine/model/model_tp.c).
 *
 * Column-parallel layers (q, k, v, gate, up) keep a block of output rows;
 * row-parallel layers (o, down) keep a block of input columns. A row slice
 * of a plain or ggml-blocked tensor is a view (rows are contiguous); a row
 * slice of a planar layout (backend.h: F8*, I4, whose planes follow each
 * other) and every column slice are copies into *owned (the caller frees it
 * once the slice is uploaded). Column slices of a quantized tensor must fall
 * on its blocks (ggml: 32 or 256 elements; planar: 128), or it is refused by
 * name. 1-D tensors (biases) are sliced as one row of elements.
 */
#ifndef LG_WEIGHTS_SHARD_H
#define LG_WEIGHTS_SHARD_H

#include "engine/model/weights.h"

/* *out = rows [r0, r0 + n) of t (columns with by_cols: [r0, r0 + n) of every row). */
int lg_wtensor_slice(const lg_wtensor *t, bool by_cols, int64_t r0, int64_t n, lg_wtensor *out, void **owned,
                     lg_err *err);

#endif
