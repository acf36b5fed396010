/*
 * quant.c — ggml block formats decoded to float (see quant.h).
 *
 * Each decoder is a transcription of ggml-quants.c's dequantize_row_*: same
 * bit unpacking, same order of float operations (d * q, d * q + m,
 * d1 * q - m1, d * sc * q), so it agrees with ggml and gguf-py exactly.
 * (The CPU backend has its own decoders for its f32 panels,
 * engine/backend/cpu_quant_*.c; these are the load- and upload-time ones,
 * kept free of the backend so the GGUF fuzzer links them alone.)
 * Blocks are read through memcpy-free byte pointers; the only multi-byte
 * fields are f16 scales, read with memcpy because mmap'd blocks of 18, 20 or
 * 210 bytes leave them unaligned.
 *
 * Threads: lg_dequant hands each worker a contiguous range of rows; workers
 * cannot fail (the type is checked before they start), so there is no error
 * plumbing between them. If a thread cannot be created its rows are done by
 * the caller.
 */
#include "engine/model/quant.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#define QK4_0 32
#define QK4_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct type_row {
    const char *name;
    uint32_t blck;  /* elements per block */
    uint32_t size;  /* bytes per block */
} type_row;

/* Indexed by ggml_type id; name NULL = id not defined by ggml. */
static const type_row k_types[] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},
    [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},
    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},
    [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},
    [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},
    [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

const char *lg_ggml_type_name(uint32_t type)
{
    return type < N_TYPES ? k_types[type].name : NULL;
}

bool lg_ggml_type_info(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    if (type >= N_TYPES || !k_types[type].name)
        return false;
    if (block_elems) *block_elems = k_types[type].blck;
    if (block_bytes) *block_bytes = k_types[type].size;
    return true;
}

bool lg_quant_supported(uint32_t type)
{
    switch (type) {
    case LG_GGML_F32: case LG_GGML_F16: case LG_GGML_BF16:
        return true;
    }
    return lg_ggml_qtype(type) != LG_QNONE;
}

/* ggml id of each layout, indexed by lg_qtype */
static const uint32_t k_qtype_ggml[LG_QTYPE_COUNT] = {
    [LG_Q4_0] = LG_GGML_Q4_0, [LG_Q4_1] = LG_GGML_Q4_1, [LG_Q5_0] = LG_GGML_Q5_0, [LG_Q5_1] = LG_GGML_Q5_1,
    [LG_Q8_0] = LG_GGML_Q8_0, [LG_Q2_K] = LG_GGML_Q2_K, [LG_Q3_K] = LG_GGML_Q3_K, [LG_Q4_K] = LG_GGML_Q4_K,
    [LG_Q5_K] = LG_GGML_Q5_K, [LG_Q6_K] = LG_GGML_Q6_K,
};

lg_qtype lg_ggml_qtype(uint32_t type)
{
    for (int q = LG_QNONE + 1; q <= LG_Q6_K; q++)
        if (k_qtype_ggml[q] == type)
            return (lg_qtype)q;
    return LG_QNONE;
}

uint32_t lg_qtype_ggml(lg_qtype q) { return lg_qtype_is_ggml(q) ? k_qtype_ggml[q] : LG_GGML_F32; }

int lg_ggml_nbytes(uint32_t type, uint64_t n, size_t *out, lg_err *err)
{
    uint32_t be, bb;
    if (!lg_ggml_type_info(type, &be, &bb))
        return lg_fail(err, "unknown ggml tensor type id %u", type);
    if (n % be)
        return lg_fail(err, "%s row of %llu elements: expected a multiple of the block size %u",
                       k_types[type].name, (unsigned long long)n, be);
    if (n / be > SIZE_MAX || !lg_mul_ok((size_t)(n / be), bb, out))
        return lg_fail(err, "%s tensor of %llu elements: byte size overflows", k_types[type].name,
                       (unsigned long long)n);
    return 0;
}

/* --- f16 via a table: the decoders call it once per block or element ---- */

static float g_f16_table[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;
static void f16_table_init(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        g_f16_table[i] = lg_f16_to_f32((uint16_t)i);
}

static inline float rd_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return g_f16_table[h];
}

/* --- block decoders: nb blocks at x to 32/256 floats each --------------- */

static void deq_q4_0(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 18, y += QK4_0) {
        const float d = rd_f16(x);
        const uint8_t *qs = x + 2;
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int x0 = (qs[j] & 0x0F) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + QK4_0 / 2] = x1 * d;
        }
    }
}

static void deq_q4_1(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 20, y += QK4_1) {
        const float d = rd_f16(x);
        const float m = rd_f16(x + 2);
        const uint8_t *qs = x + 4;
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int x0 = qs[j] & 0x0F;
            const int x1 = qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + QK4_1 / 2] = x1 * d + m;
        }
    }
}

static void deq_q8_0(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 34, y += QK8_0) {
        const float d = rd_f16(x);
        const int8_t *qs = (const int8_t *)(x + 2);
        for (int j = 0; j < QK8_0; j++)
            y[j] = qs[j] * d;
    }
}

static inline uint32_t rd_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* block_q5_0: f16 d, qh[4] (the fifth bits), qs[16] */
static void deq_q5_0(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float d = rd_f16(x);
        const uint32_t qh = rd_u32(x + 2);
        const uint8_t *qs = x + 6;
        for (int j = 0; j < 16; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
            const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

/* block_q5_1: f16 d, f16 m, qh[4], qs[16] */
static void deq_q5_1(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float d = rd_f16(x);
        const float m = rd_f16(x + 2);
        const uint32_t qh = rd_u32(x + 4);
        const uint8_t *qs = x + 8;
        for (int j = 0; j < 16; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int x0 = (qs[j] & 0x0F) | xh_0;
            const int x1 = (qs[j] >> 4) | xh_1;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

/* block_q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], f16 d, f16 dmin */
static void deq_q2_k(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 84) {
        const float d = rd_f16(x + 80);
        const float min = rd_f16(x + 82);
        const uint8_t *q = x + 16;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[is++];
                float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
                sc = x[is++];
                dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

/* block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales), f16 d */
static void deq_q3_k(const uint8_t *x, float *y, int64_t nb)
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    for (int64_t i = 0; i < nb; i++, x += 110) {
        const float d_all = rd_f16(x + 108);
        const uint8_t *q = x + 32, *hm = x;
        uint8_t m = 1;
        uint32_t aux[4];
        memcpy(aux, x + 96, 12);
        uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        const int8_t *scales = (const int8_t *)aux;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m <<= 1;
            }
            q += 32;
        }
    }
}

/* ggml's get_scale_min_k4: 8 6-bit scales and 8 6-bit mins in 12 bytes. */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* block_q4_K: f16 d, f16 dmin, scales[12], qs[128] */
static void deq_q4_k(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 144) {
        const float d = rd_f16(x);
        const float min = rd_f16(x + 2);
        const uint8_t *scales = x + 4;
        const uint8_t *q = x + 4 + K_SCALE_SIZE;
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* block_q5_K: f16 d, f16 dmin, scales[12], qh[32], qs[128] */
static void deq_q5_k(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 176) {
        const float d = rd_f16(x);
        const float min = rd_f16(x + 2);
        const uint8_t *scales = x + 4, *qh = x + 16, *ql = x + 48;
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

/* block_q6_K: ql[128], qh[64], int8 scales[16], f16 d */
static void deq_q6_k(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 210) {
        const float d = rd_f16(x + 208);
        const uint8_t *ql = x;
        const uint8_t *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

/* Decodes n elements; type supported and n a block multiple (checked). */
static void deq_any(uint32_t type, const uint8_t *src, float *dst, int64_t n)
{
    switch (type) {
    case LG_GGML_F32: memcpy(dst, src, (size_t)n * 4); break;
    case LG_GGML_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = rd_f16(src + 2 * i);
        break;
    case LG_GGML_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, src + 2 * i, 2);
            dst[i] = lg_bf16_to_f32(b);
        }
        break;
    case LG_GGML_Q8_0: deq_q8_0(src, dst, n / QK8_0); break;
    case LG_GGML_Q4_0: deq_q4_0(src, dst, n / QK4_0); break;
    case LG_GGML_Q4_1: deq_q4_1(src, dst, n / QK4_1); break;
    case LG_GGML_Q5_0: deq_q5_0(src, dst, n / 32); break;
    case LG_GGML_Q5_1: deq_q5_1(src, dst, n / 32); break;
    case LG_GGML_Q2_K: deq_q2_k(src, dst, n / QK_K); break;
    case LG_GGML_Q3_K: deq_q3_k(src, dst, n / QK_K); break;
    case LG_GGML_Q4_K: deq_q4_k(src, dst, n / QK_K); break;
    case LG_GGML_Q5_K: deq_q5_k(src, dst, n / QK_K); break;
    case LG_GGML_Q6_K: deq_q6_k(src, dst, n / QK_K); break;
    }
}

static int check_decodable(uint32_t type, int64_t n, lg_err *err)
{
    const char *name = lg_ggml_type_name(type);
    if (!name)
        return lg_fail(err, "unknown ggml tensor type id %u", type);
    if (!lg_quant_supported(type))
        return lg_fail(err, "ggml type %s is not supported: expected one of F32, F16, BF16, Q4_0, Q4_1, "
                            "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (re-quantize the model to one of these)",
                       name);
    if (n < 0 || n % k_types[type].blck)
        return lg_fail(err, "%s row of %lld elements: expected a multiple of the block size %u", name,
                       (long long)n, k_types[type].blck);
    pthread_once(&g_f16_once, f16_table_init);
    return 0;
}

int lg_dequant_row(uint32_t type, const void *src, float *dst, int64_t n, lg_err *err)
{
    if (check_decodable(type, n, err))
        return -1;
    deq_any(type, src, dst, n);
    return 0;
}

/* --- whole tensors, threaded over rows --------------------------------- */

typedef struct deq_job {
    uint32_t type;
    const uint8_t *src;
    size_t src_row_bytes;
    int64_t row_len;
    lg_dtype dt;
    uint8_t *dst;
    size_t dst_row_bytes;
    const int64_t *row_map;
    int64_t r0, r1;  /* rows [r0, r1) */
    float *scratch;  /* [row_len] when dt != F32 */
} deq_job;

/* floats -> dst of type dt. With F16C (x86 -march=native) the f16 case is
 * done 8 at a time by the hardware (round to nearest even, like
 * lg_f32_to_f16); elsewhere it falls back to common.c. */
static void store_row(void *dst, lg_dtype dt, const float *src, size_t n)
{
#if defined(__F16C__) && defined(__AVX__)
    if (dt == LG_F16) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
        lg_from_f32((uint16_t *)dst + i, dt, src + i, n - i);
        return;
    }
#endif
    lg_from_f32(dst, dt, src, n);
}

/* Same-type copy when no decoding is needed (F32->F32, F16->F16, BF16->BF16). */
static bool is_passthrough(uint32_t type, lg_dtype dt)
{
    return (type == LG_GGML_F32 && dt == LG_F32) || (type == LG_GGML_F16 && dt == LG_F16) ||
           (type == LG_GGML_BF16 && dt == LG_BF16);
}

static void *deq_worker(void *arg)
{
    deq_job *j = arg;
    bool pass = is_passthrough(j->type, j->dt);
    for (int64_t r = j->r0; r < j->r1; r++) {
        const uint8_t *s = j->src + (size_t)r * j->src_row_bytes;
        int64_t out_r = j->row_map ? j->row_map[r] : r;
        uint8_t *d = j->dst + (size_t)out_r * j->dst_row_bytes;
        if (pass) {
            memcpy(d, s, j->dst_row_bytes);
        } else if (j->dt == LG_F32) {
            deq_any(j->type, s, (float *)d, j->row_len);
        } else {
            deq_any(j->type, s, j->scratch, j->row_len);
            store_row(d, j->dt, j->scratch, (size_t)j->row_len);
        }
    }
    return NULL;
}

int lg_dequant(uint32_t type, const void *src, int64_t n_rows, int64_t row_len, lg_dtype dt,
               void *dst, const int64_t *row_map, int n_threads, lg_err *err)
{
    if (check_decodable(type, row_len, err))
        return -1;
    if (dt != LG_F32 && dt != LG_F16 && dt != LG_BF16)
        return lg_fail(err, "dequantize: expected target dtype f32, f16 or bf16, found %s", lg_dtype_name(dt));
    if (n_rows < 0)
        return lg_fail(err, "dequantize: negative row count %lld", (long long)n_rows);
    size_t src_row_bytes, dst_row_bytes;
    if (lg_ggml_nbytes(type, (uint64_t)row_len, &src_row_bytes, err))
        return -1;
    if (!lg_mul_ok((size_t)row_len, lg_dtype_size(dt), &dst_row_bytes))
        return lg_fail(err, "dequantize: row of %lld elements overflows", (long long)row_len);
    if (n_rows == 0 || row_len == 0)
        return 0;

    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc < 1 ? 1 : nc > 8 ? 8 : (int)nc;
    }
    /* Below ~64K elements a thread costs more than it saves. */
    int64_t per_thread_min = 1 + (65536 / (row_len ? row_len : 1));
    if ((int64_t)n_threads > n_rows / per_thread_min)
        n_threads = (int)(n_rows / per_thread_min);
    if (n_threads < 1)
        n_threads = 1;

    deq_job jobs[8];
    pthread_t tids[8];
    bool started[8] = {0};
    if (n_threads > 8)
        n_threads = 8;
    float *scratch = NULL;
    if (dt != LG_F32 && !is_passthrough(type, dt)) {
        size_t sb;
        if (!lg_mul_ok((size_t)row_len * 4, (size_t)n_threads, &sb) || !(scratch = malloc(sb)))
            return lg_fail(err, "dequantize: out of memory for %d row buffers of %lld floats", n_threads,
                           (long long)row_len);
    }
    int64_t chunk = (n_rows + n_threads - 1) / n_threads;
    for (int t = 0; t < n_threads; t++) {
        int64_t r0 = t * chunk, r1 = r0 + chunk > n_rows ? n_rows : r0 + chunk;
        jobs[t] = (deq_job){type, src, src_row_bytes, row_len, dt, dst, dst_row_bytes, row_map,
                            r0 < n_rows ? r0 : n_rows, r1, scratch ? scratch + (size_t)t * row_len : NULL};
    }
    for (int t = 1; t < n_threads; t++)
        started[t] = pthread_create(&tids[t], NULL, deq_worker, &jobs[t]) == 0;
    deq_worker(&jobs[0]);
    for (int t = 1; t < n_threads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else deq_worker(&jobs[t]);
    }
    free(scratch);
    return 0;
}
