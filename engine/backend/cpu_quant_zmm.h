/*
 * cpu_quant_zmm.h — the AVX-512 VNNI set's dot products of the 32-element
 * layouts (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on 512-bit registers: two blocks
 * per instruction. Included by cpu_quant_avx512.c after cpu_quant_x86.h,
 * whose 256-bit dots of these layouts they replace in that table
 * (qz_install).
 *
 * A pair of blocks i, i+1 of a weight row is unpacked to 64 bytes in the
 * order of the activations' two blocks (element e of block i at byte e, of
 * block i+1 at byte 32 + e); one vpdpbusd gives 16 lanes of 4-element
 * integer sums, lanes 0-7 block i's and 8-15 block i+1's; they are
 * converted and scaled by [d_w(i) d_x(i) x 8 | d_w(i+1) d_x(i+1) x 8] into a
 * float accumulator. An odd last block runs as a pair whose second half
 * has scale 0 (adding exactly +0). Q8_0's signed weights go through the
 * unsigned product as w ^ 0x80 = w + 128, and 128 * (the lane sums of x),
 * one vpdpbusd per activation pair, is taken back out of each lane in
 * integers, exactly. The offset and min terms (k coef_w s_x a block: Q4_0
 * -8 d_w, Q5_0 -16 d_w, Q4_1 and Q5_1 + m_w) go into the same accumulator,
 * k / 8 of it on each of the block's 8 lanes (k / 8 a power of two).
 *
 * Every tile shape runs the same operations for each (row, token) pair,
 * so the same bits (cpu_quant.h); results differ from the 256-bit sets
 * only in the order of float additions.
 */

static inline __m512i qz_cat(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* 2 x 16 bytes of nibbles at p0, p1 -> [lo(p0) hi(p0) lo(p1) hi(p1)] */
static inline __m512i qz_nib64(const uint8_t *p0, const uint8_t *p1)
{
    const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                              _mm_loadu_si128((const __m128i *)p1), 1);
    __m512i z = qz_cat(a, _mm256_srli_epi16(a, 4));
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_and_si512(z, _mm512_set1_epi8(15));
}

static inline __m512i qz_un_q4_0(const uint8_t *b0, const uint8_t *b1) { return qz_nib64(b0 + 2, b1 + 2); }
static inline __m512i qz_un_q4_1(const uint8_t *b0, const uint8_t *b1) { return qz_nib64(b0 + 4, b1 + 4); }
static inline __m512i qz_un_q5_0(const uint8_t *b0, const uint8_t *b1)
{
    return _mm512_or_si512(qz_nib64(b0 + 6, b1 + 6), qz_cat(bits32_x10(b0 + 2), bits32_x10(b1 + 2)));
}
static inline __m512i qz_un_q5_1(const uint8_t *b0, const uint8_t *b1)
{
    return _mm512_or_si512(qz_nib64(b0 + 8, b1 + 8), qz_cat(bits32_x10(b0 + 4), bits32_x10(b1 + 4)));
}
static inline __m512i qz_un_q8_0(const uint8_t *b0, const uint8_t *b1)
{
    return _mm512_xor_si512(qz_cat(ld256(b0 + 2), ld256(b1 + 2)), _mm512_set1_epi8((char)0x80));
}

/* lanes 0-7 = a, 8-15 = b */
static inline __m512 qz_pair(float a, float b)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_unpacklo_ps(_mm_set_ss(a), _mm_set_ss(b))));
}

#define QZ_DOT32(name, bytes, SIGNED, COFF, CK)                                                      \
    static inline __attribute__((always_inline)) void qz_tile_##name(                                \
        const uint8_t *w, size_t ldw, const uint8_t *xq, size_t ldxq, int64_t nb, float *out,         \
        int64_t ldo, const int NR, const int NT)                                                     \
    {                                                                                                \
        __m512 acc[LG_QROWS][LG_QTOKS];                                                              \
        for (int r = 0; r < NR; r++)                                                                 \
            for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();                            \
        for (int64_t i = 0; i < nb; i += 2) {                                                        \
            const bool two = i + 1 < nb;                                                             \
            __m512i wu[LG_QROWS];                                                                    \
            __m512 dw[LG_QROWS], cw[LG_QROWS];                                                       \
            for (int r = 0; r < NR; r++) {                                                           \
                const uint8_t *b0 = w + (size_t)r * ldw + (size_t)i * (bytes);                       \
                const uint8_t *b1 = two ? b0 + (bytes) : b0;                                         \
                _mm_prefetch((const char *)b0 + QX_PF, _MM_HINT_T0);                                 \
                wu[r] = qz_un_##name(b0, b1);                                                        \
                dw[r] = qz_pair(h2f(b0), two ? h2f(b1) : 0.0f);                                      \
                if (CK != 0)                                                                         \
                    cw[r] = qz_pair((CK) * h2f(b0 + (COFF)), two ? (CK) * h2f(b1 + (COFF)) : 0.0f);  \
            }                                                                                        \
            for (int t = 0; t < NT; t++) {                                                           \
                const lg_q8a *y0 = (const lg_q8a *)(xq + (size_t)t * ldxq) + i;                       \
                const lg_q8a *y1 = two ? y0 + 1 : y0;                                                \
                const __m512i xv = qz_cat(ld256(y0->qs), ld256(y1->qs));                             \
                const __m512 dx = qz_pair(y0->d, y1->d);                                             \
                const __m512 sx = qz_pair(y0->s, y1->s);                                             \
                const __m512i cx = SIGNED ? _mm512_dpbusd_epi32(_mm512_setzero_si512(),              \
                                                                _mm512_set1_epi8((char)0x80), xv)     \
                                          : _mm512_setzero_si512();                                  \
                for (int r = 0; r < NR; r++) {                                                       \
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[r], xv);              \
                    if (SIGNED)                                                                      \
                        p = _mm512_sub_epi32(p, cx);                                                 \
                    __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[r], dx), acc[r][t]); \
                    if (CK != 0)                                                                     \
                        a = _mm512_fmadd_ps(cw[r], sx, a);                                           \
                    acc[r][t] = a;                                                                   \
                }                                                                                    \
            }                                                                                        \
        }                                                                                            \
        for (int t = 0; t < NT; t++)                                                                 \
            for (int r = 0; r < NR; r++) out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);         \
    }                                                                                                \
    static void qz_dot_##name(const void *w, size_t ldw, int nr, const void *xq, size_t ldxq, int nt, \
                              int64_t nb, float *out, int64_t ldo)                                   \
    {                                                                                                \
        const uint8_t *W = w, *X = xq;                                                               \
        if (nr == LG_QROWS) {                                                                        \
            int t = 0;                                                                               \
            for (; t + 4 <= nt; t += 4) qz_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 4); \
            for (; t + 2 <= nt; t += 2) qz_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 2); \
            for (; t < nt; t++) qz_tile_##name(W, ldw, X + t * ldxq, ldxq, nb, out + t * ldo, ldo, 4, 1); \
            return;                                                                                  \
        }                                                                                            \
        for (int t = 0; t < nt; t++)                                                                 \
            for (int r = 0; r < nr; r++)                                                             \
                qz_tile_##name(W + r * ldw, ldw, X + t * ldxq, ldxq, nb, out + t * ldo + r, ldo, 1, 1); \
    }

/* the offset / min term of a block, k * coef_w * s_x, spread over its 8 lanes: coef at COFF, CK = k / 8
 * (a power of two, so exact): Q4_0 -8 d, Q5_0 -16 d, Q4_1 and Q5_1 + m, Q8_0 none */
QZ_DOT32(q4_0, 18, false, 0, -1.0f)
QZ_DOT32(q4_1, 20, false, 2, 0.125f)
QZ_DOT32(q5_0, 22, false, 0, -2.0f)
QZ_DOT32(q5_1, 24, false, 2, 0.125f)
QZ_DOT32(q8_0, 34, true, 0, 0.0f)
#undef QZ_DOT32

static void qz_install(lg_qkern *k)
{
    k->dot[LG_Q4_0] = qz_dot_q4_0;
    k->dot[LG_Q4_1] = qz_dot_q4_1;
    k->dot[LG_Q5_0] = qz_dot_q5_0;
    k->dot[LG_Q5_1] = qz_dot_q5_1;
    k->dot[LG_Q8_0] = qz_dot_q8_0;
}
