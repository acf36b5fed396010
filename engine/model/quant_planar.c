/*
 * quant_planar.c — the planar checkpoint layouts (backend.h: LG_QF8,
 * LG_QF8_A8, LG_QF8_A8S, LG_QF8_A8G, LG_QI4) decoded to float, and 16-bit
 * weights quantized into them (`--quantization fp8|int4`).
 *
 * Decoding is the contract's formula and nothing else:
 *   F8*  w[r, k] = d[r, k / 128] * e4m3(q[r, k])           (f32 product)
 *   I4   w[r, k] = f16(d[r, k / 128]) * (q[r, k] - z[r, k / 128])
 * computed in f32 and stored in the destination dtype (one rounding). The
 * activation rounding of the W8A8 layouts cannot be expressed in a weight:
 * decoding one gives the W8A16 model (the caller says so once, see
 * lg_dequant_planar's comment).
 *
 * Quantizing (lg_quantize_planar):
 *   F8_A8  d[r] = amax(|w[r, :]|) / 448 (f32, every group of the row),
 *          q = e4m3(w / d) (round to nearest even, saturating), d = 0: q = 0
 *          — vLLM's `--quantization fp8` (per-channel weights, dynamic
 *          per-token activations).
 *   I4     round to nearest (RTN: no calibration, no error feedback),
 *          asymmetric, groups of 128 along K: lo = min(0, min w), hi =
 *          max(0, max w), d = f16((hi - lo) / 15), z = clamp(round(-lo / d),
 *          0, 15), q = clamp(round(w / d) + z, 0, 15) with the f16 d.
 *
 * Workload: once per tensor at load or upload; single-threaded per tensor
 * (weights_quantize.c runs tensors in parallel).
 */
#include "engine/model/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t lg_planar_bytes(lg_qtype q, int64_t rows, int64_t cols)
{
    const int64_t nb = (cols + 127) / 128;
    return (size_t)rows * (size_t)nb * (size_t)lg_qtype_get(q).block_bytes;
}

static float planar_d(const lg_qplanes *p, bool i4, int64_t r, int64_t g)
{
    if (i4) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)p->d + ((size_t)r * (size_t)p->nb + (size_t)g) * 2, 2);
        return lg_f16_to_f32(h);
    }
    float d;
    memcpy(&d, (const uint8_t *)p->d + ((size_t)r * (size_t)p->nb + (size_t)g) * 4, 4);
    return d;
}

int lg_dequant_planar_rows(lg_qtype q, const void *src, int64_t rows, int64_t cols, int64_t r0, int64_t n_rows,
                           lg_dtype dt, void *dst, lg_err *err)
{
    if (!lg_qtype_is_planar(q))
        return lg_fail(err, "lg_dequant_planar: layout %s is not planar", lg_qtype_get(q).name);
    if (dt != LG_F32 && dt != LG_F16 && dt != LG_BF16)
        return lg_fail(err, "lg_dequant_planar: dtype %s, expected f32, f16 or bf16", lg_dtype_name(dt));
    if (r0 < 0 || n_rows < 0 || r0 + n_rows > rows || cols <= 0)
        return lg_fail(err, "lg_dequant_planar: rows [%lld, %lld) of %lld", (long long)r0, (long long)(r0 + n_rows),
                       (long long)rows);
    const bool i4 = q == LG_QI4;
    lg_qplanes p = lg_qplanes_of(lg_tensor_quant((void *)src, q, rows, cols));
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row)
        return lg_fail(err, "lg_dequant_planar: out of memory");
    for (int64_t r = r0; r < r0 + n_rows; r++) {
        const uint8_t *qr = p.q + (size_t)r * (size_t)p.q_row;
        for (int64_t g = 0; g < p.nb; g++) {
            const float d = planar_d(&p, i4, r, g);
            const int64_t k1 = (g + 1) * 128 < cols ? (g + 1) * 128 : cols;
            if (i4) {
                const int z = p.z[(size_t)r * (size_t)p.nb + (size_t)g];
                for (int64_t k = g * 128; k < k1; k++) {
                    const int v = (qr[k / 2] >> ((k & 1) * 4)) & 15;
                    row[k] = d * (float)(v - z);
                }
            } else {
                for (int64_t k = g * 128; k < k1; k++)
                    row[k] = d * lg_e4m3_to_f32(qr[k]);
            }
        }
        lg_from_f32((char *)dst + (size_t)(r - r0) * (size_t)cols * lg_dtype_size(dt), dt, row, (size_t)cols);
    }
    free(row);
    return 0;
}

int lg_dequant_planar(lg_qtype q, const void *src, int64_t rows, int64_t cols, lg_dtype dt, void *dst, lg_err *err)
{
    return lg_dequant_planar_rows(q, src, rows, cols, 0, rows, dt, dst, err);
}

static int quantize_f8(const float *w, int64_t rows, int64_t cols, uint8_t *out)
{
    lg_qplanes p = lg_qplanes_of(lg_tensor_quant(out, LG_QF8_A8, rows, cols));
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + (size_t)r * (size_t)cols;
        float amax = 0;
        for (int64_t k = 0; k < cols; k++)
            amax = fmaxf(amax, fabsf(x[k]));
        const float d = amax / 448.0f;
        uint8_t *qr = p.q + (size_t)r * (size_t)p.q_row;
        for (int64_t k = 0; k < cols; k++)
            qr[k] = d > 0 ? lg_f32_to_e4m3(x[k] / d) : 0;
        for (int64_t g = 0; g < p.nb; g++)
            memcpy((uint8_t *)p.d + ((size_t)r * (size_t)p.nb + (size_t)g) * 4, &d, 4);
    }
    return 0;
}

static int quantize_i4(const float *w, int64_t rows, int64_t cols, uint8_t *out)
{
    lg_qplanes p = lg_qplanes_of(lg_tensor_quant(out, LG_QI4, rows, cols));
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + (size_t)r * (size_t)cols;
        uint8_t *qr = p.q + (size_t)r * (size_t)p.q_row;
        for (int64_t g = 0; g < p.nb; g++) {
            const int64_t k0 = g * 128, k1 = k0 + 128 < cols ? k0 + 128 : cols;
            float lo = 0, hi = 0;
            for (int64_t k = k0; k < k1; k++) {
                lo = fminf(lo, x[k]);
                hi = fmaxf(hi, x[k]);
            }
            const uint16_t dh = lg_f32_to_f16((hi - lo) / 15.0f);
            const float d = lg_f16_to_f32(dh);
            int z = 0;
            if (d > 0) {
                z = (int)nearbyintf(-lo / d);
                z = z < 0 ? 0 : z > 15 ? 15 : z;
            }
            for (int64_t k = k0; k < k0 + 128; k++) {
                int v = z;
                if (k < k1 && d > 0) {
                    v = (int)nearbyintf(x[k] / d) + z;
                    v = v < 0 ? 0 : v > 15 ? 15 : v;
                }
                qr[k / 2] |= (uint8_t)(v << ((k & 1) * 4));
            }
            memcpy((uint8_t *)p.d + ((size_t)r * (size_t)p.nb + (size_t)g) * 2, &dh, 2);
            p.z[(size_t)r * (size_t)p.nb + (size_t)g] = (uint8_t)z;
        }
    }
    return 0;
}

int lg_quantize_planar(lg_qtype q, const void *src, lg_dtype st, int64_t rows, int64_t cols, void **out,
                       size_t *nbytes, lg_err *err)
{
    *out = NULL;
    if (q != LG_QF8_A8 && q != LG_QI4)
        return lg_fail(err, "quantizing to %s is not implemented (expected F8_A8 or I4)", lg_qtype_get(q).name);
    if (rows <= 0 || cols <= 0)
        return lg_fail(err, "quantizing a [%lld, %lld] tensor", (long long)rows, (long long)cols);
    const size_t n = lg_planar_bytes(q, rows, cols);
    uint8_t *buf = calloc(1, n);
    float *w = malloc((size_t)rows * (size_t)cols * sizeof *w);
    if (!buf || !w) {
        free(buf);
        free(w);
        return lg_fail(err, "out of memory quantizing a [%lld, %lld] tensor", (long long)rows, (long long)cols);
    }
    lg_to_f32(w, src, st, (size_t)rows * (size_t)cols);
    if (q == LG_QF8_A8)
        quantize_f8(w, rows, cols, buf);
    else
        quantize_i4(w, rows, cols, buf);
    free(w);
    *out = buf;
    *nbytes = n;
    return 0;
}

int lg_quantization_parse(const char *s, lg_qtype *out)
{
    if (!s || !strcmp(s, "none"))
        *out = LG_QNONE;
    else if (!strcmp(s, "fp8"))
        *out = LG_QF8_A8;
    else if (!strcmp(s, "int4"))
        *out = LG_QI4;
    else
        return -1;
    return 0;
}
