/*
 * matmul_lora.cu — a matmul with the LoRA of up to LG_LORA_MULTI_MAX slots
 * whose outputs are column ranges of its output (the backend's optional
 * matmul_lora slot):
 *
 *   tmp = lora_shrink_multi(x, slots)                          R = lm->max_rank
 *   y   = x W^T (+ bias);
 *   for i < k:  lora_expand(cols [col0[i], col0[i] + ncols[i]) of y,
 *                           cols [i * R, i * R + R) of tmp, lm, slots[i])
 *
 *   with rope (the q,k,v columns of a layer): then rope_kv_write(q, k, v of y)
 *
 * The slot is on by default (LG_FUSE_LORA=0: off, model.c runs the three
 * ops). Orders:
 *  - Prefill (segments of many tokens, where lora_expand.cu takes its
 *    32-token tile kernel): shrink, then the expand *stores* y (rows of
 *    segments without rank at a slot get zeros, columns of y outside every
 *    slot's range are zeroed by a memset), then the matmul adds x W^T into y
 *    (cuBLAS beta = 1; its epilogue reads y while the GEMM is compute-bound).
 *    The expand after the matmul read and wrote y (a read-modify-write of
 *    the whole output, 200 MB per q,k,v launch of W1's prefill); this way it
 *    only writes it. y is rounded as base + round(lora) instead of
 *    round(base) + lora. Needs the segments to cover every row of y (model.c's
 *    always do); LG_LORA_FIRST=0 turns it off (comparisons).
 *  - Otherwise the order model.c uses without the slot (shrink, matmul,
 *    expand: measured fastest with the TMA decode matmul, docs/benchmarks.md,
 *    GPU kernels, 2026-11-23). With rope, a decode step's expand takes
 *    lora_expand.cu's rope form (rope + KV write in the expand's launch, the
 *    same bits as the two ops); any other shape runs rope_kv_write after the
 *    op's launches.
 * The norm form (cu_norm_matmul_lora, the backend's norm_matmul_lora slot:
 * add_rmsnorm, then this op on the normed rows): in a decode step's order the
 * shrink takes lora_shrink.cu's norm form, which norms the rows itself and
 * stores xn and the new residual for the matmul, so the layer has no
 * add_rmsnorm launch; any other shape returns 1 and model.c runs the two
 * ops.
 * Both orders are within the tests' tolerance of the CPU backend, and a
 * given shape always takes the same path (graph replay == eager).
 */
#include "kernels/ops.cuh"

/* Zeroes the columns of y outside every range [col0[i], col0[i] + ncols[i]) (k <= 3 disjoint
 * ranges, checked by the caller), so that the store-form expand and the zeros cover y. */
static int zero_gaps(cuda_ctx *c, lg_tensor y, const int *col0, const int *ncols, int k)
{
    int o[LG_LORA_MULTI_MAX];
    for (int i = 0; i < k; i++) o[i] = i;
    for (int i = 1; i < k; i++) /* by first column */
        for (int j = i; j > 0 && col0[o[j]] < col0[o[j - 1]]; j--) {
            const int t = o[j];
            o[j] = o[j - 1], o[j - 1] = t;
        }
    const size_t es = lg_dtype_size(y.dtype);
    int64_t at = 0;
    for (int i = 0; i <= k; i++) {
        const int64_t end = i < k ? col0[o[i]] : y.cols;
        if (end > at && cudaMemset2DAsync((char *)y.data + at * es, (size_t)y.stride * es, 0, (size_t)(end - at) * es,
                                          (size_t)y.rows, c->stream) != cudaSuccess)
            return CU_FAIL(c, "matmul_lora: cudaMemset2DAsync of columns [%lld, %lld) failed", (long long)at,
                           (long long)end);
        if (i < k)
            at = (int64_t)col0[o[i]] + ncols[o[i]];
    }
    return 0;
}


/* The decode order's matmul and expand, after the shrink (rope: as mlora). */
static int matmul_expand(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, const lg_tensor *ys,
                         lg_tensor tmp, const lg_lora_meta *lm, const int *slots, int k, const lg_rope_kv *rope,
                         bool *roped)
{
    if (cu_matmul(be, y, x, W, bias, false) != 0)
        return -1;
    if (rope) { /* decode q,k,v: the expand with rope + KV write in one launch */
        const int rc = cu_lora_expand_rope(be, ys, tmp, lm, slots, k, rope);
        *roped = rc == 0;
        if (rc <= 0)
            return rc;
    }
    return cu_lora_expand_multi(be, ys, tmp, lm, slots, k);
}

/* The op without rope's part; rope: offer the expand's rope form (the three slots are y's q, k, v
 * columns), *roped set when it did rope_kv_write's work. nm: the norm form (x = xn, which the
 * shrink's norm form stores; a decode step's order only): 1 (nothing run) when not taken. */
static int mlora(lg_backend *be, const lg_norm_in *nm, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias,
                 lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k,
                 const lg_rope_kv *rope, bool *roped)
{
    cuda_ctx *c = CU_CTX(be);
    /* a planar quantized W (matmul_f8.cu, matmul_i4.cu) takes every path here through cu_matmul */
    if ((W.q != LG_QNONE ? cu_matmul_qcheck(c, y, x, W, bias) : cu_matmul_check(c, y, x, W, bias)) != 0)
        return -1;
    CU_CHECK_VIEW(c, "matmul_lora tmp", tmp);
    if (!lm || !lm->seg_indptr || !lm->w || !lm->seg_indptr_host || !slots || !col0 || !ncols)
        return CU_FAIL(c, "matmul_lora: lora meta, its arrays, slots or column ranges are NULL");
    if (k < 1 || k > LG_LORA_MULTI_MAX || lm->n_segs < 0 || lm->n_segs > 65535)
        return CU_FAIL(c, "matmul_lora: %d slots (1..%d), %d segments", k, LG_LORA_MULTI_MAX, lm->n_segs);
    lg_tensor ys[LG_LORA_MULTI_MAX];
    for (int i = 0; i < k; i++) {
        if (col0[i] < 0 || ncols[i] <= 0 || (int64_t)col0[i] + ncols[i] > y.cols)
            return CU_FAIL(c, "matmul_lora: column range [%d, %d) outside y's %lld columns", col0[i],
                           col0[i] + ncols[i], (long long)y.cols);
        if (slots[i] < 0 || slots[i] >= lm->n_slots)
            return CU_FAIL(c, "matmul_lora: slot %d of %d", slots[i], lm->n_slots);
        for (int j = 0; j < i; j++)
            if (col0[i] < col0[j] + ncols[j] && col0[j] < col0[i] + ncols[i])
                return CU_FAIL(c, "matmul_lora: column ranges [%d, %d) and [%d, %d) overlap", col0[j],
                               col0[j] + ncols[j], col0[i], col0[i] + ncols[i]);
        ys[i] = lg_tensor_cols(y, col0[i], ncols[i]);
    }
    if (tmp.rows < y.rows || tmp.cols < (int64_t)k * lm->max_rank)
        return CU_FAIL(c, "matmul_lora: tmp [%lld,%lld] vs %lld rows, %d slots x max_rank %d", (long long)tmp.rows,
                       (long long)tmp.cols, (long long)y.rows, k, lm->max_rank);
    const int max_seg = cu_lora_max_seg(lm);
    if (max_seg < 0 || lm->seg_indptr_host[lm->n_segs] > y.rows)
        return CU_FAIL(c, "matmul_lora: segments are malformed or cover more than y's %lld rows", (long long)y.rows);
    if (nm) { /* a decode step's order with the norm in the shrink: shrink, matmul, expand */
        if (y.rows == 0 || max_seg != 1)
            return 1;
        const int rc = cu_lora_shrink_norm(be, tmp, nm, x, lm, slots, k);
        return rc != 0 ? rc : matmul_expand(be, y, x, W, bias, ys, tmp, lm, slots, k, rope, roped);
    }
    if (y.rows == 0)
        return 0;
    if (max_seg == 0) /* no token has an adapter this step */
        return cu_matmul(be, y, x, W, bias, false);
    if (cu_lora_shrink_multi(be, tmp, x, lm, slots, k) != 0)
        return -1;
    /* LG_LORA_FIRST=0: never the prefill order (comparisons) */
    if (c->tune->lora_first && y.dtype == x.dtype && lm->seg_indptr_host[0] == 0 &&
        lm->seg_indptr_host[lm->n_segs] == y.rows) {
        const int rc = cu_lora_expand_store(be, ys, tmp, lm, slots, k);
        if (rc < 0)
            return -1;
        if (rc == 0) /* y holds the expand: the gaps zeroed, then y += x W^T (+ bias) */
            return zero_gaps(c, y, col0, ncols, k) != 0 ? -1 : cu_matmul(be, y, x, W, bias, true);
        /* not taken (decode-sized segments): the matmul, then the expand */
    }
    return matmul_expand(be, y, x, W, bias, ys, tmp, lm, slots, k, rope, roped);
}

/* cu_matmul_lora (nm NULL) and cu_norm_matmul_lora */
static int op(lg_backend *be, const lg_norm_in *nm, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias,
              lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k,
              const lg_rope_kv *rope)
{
    cuda_ctx *c = CU_CTX(be);
    if (rope && (rope->n_heads <= 0 || rope->n_kv_heads <= 0 || rope->head_dim <= 0 ||
                 (int64_t)(rope->n_heads + 2 * rope->n_kv_heads) * rope->head_dim > y.cols))
        return CU_FAIL(c, "matmul_lora: rope's %d + 2 x %d heads of %d do not fit y's %lld columns", rope->n_heads,
                       rope->n_kv_heads, rope->head_dim, (long long)y.cols);
    const int64_t qd = rope ? (int64_t)rope->n_heads * rope->head_dim : 0;
    const int64_t kvd = rope ? (int64_t)rope->n_kv_heads * rope->head_dim : 0;
    const bool qkv = rope && k == 3 && col0[0] == 0 && col0[1] == qd && col0[2] == qd + kvd;
    bool roped = false;
    const int rc = mlora(be, nm, y, x, W, bias, tmp, lm, slots, col0, ncols, k, qkv ? rope : NULL, &roped);
    if (rc != 0 || !rope || roped)
        return rc;
    return cu_rope_kv_write(be, lg_tensor_cols(y, 0, qd), lg_tensor_cols(y, qd, kvd), lg_tensor_cols(y, qd + kvd, kvd),
                            rope->pos, rope->inv_freq, rope->n_heads, rope->n_kv_heads, rope->head_dim, rope->kv,
                            rope->slot);
}

int cu_matmul_lora(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, lg_tensor tmp,
                   const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k,
                   const lg_rope_kv *rope)
{
    return op(be, NULL, y, x, W, bias, tmp, lm, slots, col0, ncols, k, rope);
}

int cu_norm_matmul_lora(lg_backend *be, const lg_norm_in *nm, lg_tensor y, lg_tensor xn, lg_tensor W, lg_tensor bias,
                        lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols,
                        int k, const lg_rope_kv *rope)
{
    if (!nm)
        return CU_FAIL(CU_CTX(be), "norm_matmul_lora: no norm inputs");
    return op(be, nm, y, xn, W, bias, tmp, lm, slots, col0, ncols, k, rope);
}
