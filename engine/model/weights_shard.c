/*
 * weights_shard.c — see weights_shard.h.
 */
#include "engine/model/weights_shard.h"
#include "engine/model/quant.h"

#include <stdlib.h>
#include <string.h>

static int64_t rows_of(const lg_wtensor *t) { return t->n_dims == 1 ? 1 : t->shape[0]; }
static int64_t cols_of(const lg_wtensor *t) { return t->n_dims == 1 ? t->shape[0] : t->shape[1]; }

/* Planar t's planes cut to rows [r0, r0 + n) or columns (whole groups) [c0, c0 + n) into a new buffer. */
static int planar_slice(const lg_wtensor *t, bool by_cols, int64_t s0, int64_t n, lg_wtensor *out, void **owned,
                        lg_err *err)
{
    const int64_t rows = t->shape[0], cols = t->shape[1];
    const int64_t orows = by_cols ? rows : n, ocols = by_cols ? n : cols;
    if (by_cols && (s0 % 128 != 0 || (n % 128 != 0 && s0 + n != cols)))
        return lg_fail(err, "%s: columns [%lld, +%lld) do not fall on its groups of 128", t->name, (long long)s0,
                       (long long)n);
    const size_t bytes = lg_planar_bytes(t->q, orows, ocols);
    unsigned char *buf = calloc(1, bytes ? bytes : 1);
    if (!buf)
        return lg_fail(err, "out of memory slicing %s", t->name);
    const lg_qplanes sp = lg_qplanes_of(lg_tensor_quant((void *)t->data, t->q, rows, cols));
    const lg_qplanes dp = lg_qplanes_of(lg_tensor_quant(buf, t->q, orows, ocols));
    const bool i4 = t->q == LG_QI4;
    const size_t d_el = i4 ? 2 : 4, qg = i4 ? 64 : 128; /* bytes of d and of q a group */
    const int64_t g0 = by_cols ? s0 / 128 : 0, r0 = by_cols ? 0 : s0;
    for (int64_t r = 0; r < orows; r++) {
        const size_t sr = (size_t)(r0 + r);
        memcpy(dp.q + (size_t)r * dp.q_row, sp.q + sr * sp.q_row + (size_t)g0 * qg, (size_t)dp.nb * qg);
        memcpy((char *)dp.d + (size_t)r * dp.nb * d_el, (const char *)sp.d + (sr * sp.nb + (size_t)g0) * d_el,
               (size_t)dp.nb * d_el);
        if (dp.a)
            memcpy(dp.a + (size_t)r * dp.nb, sp.a + sr * sp.nb + (size_t)g0, (size_t)dp.nb * 4);
        if (dp.z) { /* zeros, and their padding plane after all rows */
            memcpy(dp.z + (size_t)r * dp.nb, sp.z + sr * sp.nb + (size_t)g0, (size_t)dp.nb);
            memcpy(dp.z + ((size_t)orows + (size_t)r) * dp.nb, sp.z + ((size_t)rows + sr) * sp.nb + (size_t)g0,
                   (size_t)dp.nb);
        }
    }
    *out = *t;
    out->shape[0] = orows;
    out->shape[1] = ocols;
    out->data = buf;
    out->nbytes = bytes;
    *owned = buf;
    return 0;
}

int lg_wtensor_slice(const lg_wtensor *t, bool by_cols, int64_t s0, int64_t n, lg_wtensor *out, void **owned,
                     lg_err *err)
{
    *owned = NULL;
    const int64_t rows = rows_of(t), cols = cols_of(t);
    if (t->n_dims == 1)
        by_cols = true; /* a bias: its elements */
    if (s0 < 0 || n <= 0 || s0 + n > (by_cols ? cols : rows))
        return lg_fail(err, "%s: slice [%lld, +%lld) outside its %lld %s", t->name, (long long)s0, (long long)n,
                       (long long)(by_cols ? cols : rows), by_cols ? "columns" : "rows");
    if (lg_qtype_is_planar(t->q))
        return planar_slice(t, by_cols, s0, n, out, owned, err);
    /* plain elements or ggml blocks: a row is row_bytes, and `el` elements take `eb` bytes */
    const size_t row_bytes = t->nbytes / (size_t)rows;
    const lg_qtype_info qi = lg_qtype_get(t->q);
    const int64_t el = t->q == LG_QNONE ? 1 : qi.block_elems;
    const size_t eb = t->q == LG_QNONE ? lg_dtype_size(t->dtype) : (size_t)qi.block_bytes;
    *out = *t;
    if (!by_cols) {
        out->shape[0] = n;
        out->data = (const char *)t->data + (size_t)s0 * row_bytes;
        out->nbytes = (size_t)n * row_bytes;
        return 0;
    }
    if (s0 % el != 0 || n % el != 0)
        return lg_fail(err, "%s: columns [%lld, +%lld) do not fall on its %s blocks of %lld", t->name, (long long)s0,
                       (long long)n, qi.name, (long long)el);
    const size_t orow = (size_t)(n / el) * eb, off = (size_t)(s0 / el) * eb;
    unsigned char *buf = malloc((size_t)rows * orow);
    if (!buf)
        return lg_fail(err, "out of memory slicing %s", t->name);
    for (int64_t r = 0; r < rows; r++)
        memcpy(buf + (size_t)r * orow, (const char *)t->data + (size_t)r * row_bytes + off, orow);
    if (t->n_dims == 1)
        out->shape[0] = n;
    else
        out->shape[1] = n;
    out->data = buf;
    out->nbytes = (size_t)rows * orow;
    *owned = buf;
    return 0;
}
