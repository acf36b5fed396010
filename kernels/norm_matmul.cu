/*
 * norm_matmul.cu — add_rmsnorm + matmul (+ silu_mul) in one launch for
 * decode batches of T <= LG_NORM_MATMUL_MAX_T rows (the backend's optional
 * norm_matmul slot; contract in engine/backend/backend.h):
 *
 *   h = resid (+ delta, rounded; block 0 stores it to rout)
 *   xn = rmsnorm(h) * w                  in shared memory, never stored
 *   y = xn W^T (+ bias)                  or y = silu(g) * u over W = [gate; up]
 *   with rope (q,k,v): then rope_kv_write on y's q, k, v columns
 *
 * Why: at batch 1 a layer was nine launches (two norms, four GEMVs, rope +
 * KV write, attention, silu), each a latency-bound step of a chain in which
 * the GPU waits for the one before to complete. Dropping the norms and the
 * silu from the step (wrong results, timing only) took batch-1 decode from
 * 5.18 to 5.04 (norms) and 5.15 ms (silu) on the H100 (docs/benchmarks.md,
 * GPU kernels, 2026-11-23): the time between the launches, not their work.
 *
 * The kernel is the GEMV of gemv.cu (gemv.cuh) with a prologue: every block
 * computes the T normed rows into shared memory after pdl_wait (per row
 * 16 KB of resid and delta plus the norm weights, from L1/L2; 8 KB of
 * shared memory for a 4096-wide row), in the exact
 * arithmetic order of add_rmsnorm.cu's vector kernel, so results are those
 * of the separate ops bit for bit (tests/gpu/test_cuda_ops.c checks it).
 * The weight loads and L2 prefetch before pdl_wait are unchanged. With
 * silu, warp f reads gate row f and up row f + F (two rows per warp, as the
 * default GEMV variant) and stores one output column. With rope, warp p
 * reads the two rows that RoPE pairs (i and i + head_dim/2 of one head),
 * rotates them as rope_kv.cu does and stores them to y and, for k and v, to
 * the KV slot: a layer at batch 1 is five launches (norm + q,k,v + rope + KV
 * write, attention, o, norm + gate,up + silu, down), and batch-1 decode went
 * from 5.11 to 5.04 ms/step (docs/benchmarks.md, GPU kernels, 2026-11-23).
 * LG_NORM_ROPE=0: the GEMV without rope, then rope_kv_write (comparisons).
 *
 * Taken for the shapes the GEMV form serves (LG_GEMV != 0, T <= 2,
 * 16-byte aligned half rows) when the row is at most 4096 wide (the
 * prologue's four emulated warps per warp); LG_FUSE_NORM=0 clears the slot.
 * The engine offers it one row (LG_NORM_MATMUL_MAX_T): at batch 2 two rows gave 5.44-5.48 against
 * 5.45-5.49 ms/step, within the spread (the prologue's work doubles; docs/benchmarks.md, Tried, not kept,
 * 2026-11-23). Bit-identity holds against add_rmsnorm's vector kernel, the one it takes for 16-byte
 * aligned rows and output, and against the separate ops where their matmul also runs on the GEMV:
 * always for the engine's one-row steps; on Hopper a separate 2-row matmul and every matmul under a
 * forced TMA variant (LG_STREAMK=20 + v) run on the TMA matmul, whose sums differ in the last bits.
 */
#include "kernels/gemv.cuh"

#define NM_MAX_T 2 /* rows the kernel takes (the engine offers LG_NORM_MATMUL_MAX_T) */

template <typename TX, int T, int EPI> static cudaError_t launch(cuda_ctx *c, gemv_args a, int warps)
{
    const int blocks = (warps + GEMV_WARPS - 1) / GEMV_WARPS;
    const bool pdl = c->tune->gemv == 2 || c->pdl; /* as gemv.cu */
    a.pf_blocks = cu_gemv_pf_blocks(pdl, blocks, GEMV_WARPS * 2, a.K / 8);
    return cu_launch_on(c->stream, pdl, gemv_kernel<TX, TX, T, 2, 4, 1, EPI>, dim3((unsigned)blocks),
                        dim3(GEMV_WARPS * 32), (size_t)T * a.K * 2, a);
}

/* epi: 0 plain, 1 silu, 2 rope + KV write */
template <typename TX> static cudaError_t launch_t(cuda_ctx *c, gemv_args a, int T, int epi)
{
    const int warps = epi == 1 ? a.N : (a.N + 1) / 2;
    if (T == 1)
        return epi == 1 ? launch<TX, 1, 1>(c, a, warps) : epi == 2 ? launch<TX, 1, 2>(c, a, warps)
                                                                    : launch<TX, 1, 0>(c, a, warps);
    return epi == 1 ? launch<TX, 2, 1>(c, a, warps) : epi == 2 ? launch<TX, 2, 2>(c, a, warps)
                                                                : launch<TX, 2, 0>(c, a, warps);
}

/* The rope epilogue takes this call (y's columns are q|k|v, checked by the caller): even heads and a
 * cache of y's dtype; LG_NORM_ROPE=0: never (the GEMV without it, then rope_kv_write; comparisons). */
static bool rope_fits(const cuda_ctx *c, lg_tensor y, const lg_rope_kv *r)
{
    return c->tune->norm_rope && r->head_dim % 2 == 0 && y.cols <= INT32_MAX / 2 && r->pos && r->inv_freq &&
           r->slot && r->kv.base && r->kv.dtype == y.dtype && r->kv.head_dim == r->head_dim &&
           r->kv.n_kv_heads == r->n_kv_heads && r->kv.page_tokens > 0;
}

static bool rows_ok(lg_tensor t) { return t.stride % 8 == 0 && cu_aligned16(t.data); }

/* one past the last byte of view t */
static const char *view_end(lg_tensor t)
{
    return (const char *)t.data + ((size_t)(t.rows - 1) * t.stride + t.cols) * lg_dtype_size(t.dtype);
}
/* the bytes of view a and b intersect */
static bool overlap(lg_tensor a, lg_tensor b)
{
    return (const char *)a.data < view_end(b) && (const char *)b.data < view_end(a);
}

int cu_norm_matmul(lg_backend *be, lg_tensor y, lg_tensor resid, lg_tensor delta, lg_tensor w, float eps,
                   lg_tensor rout, lg_tensor W, lg_tensor bias, bool silu, const lg_rope_kv *rope)
{
    cuda_ctx *c = CU_CTX(be);
    if (rope && silu)
        return CU_FAIL(c, "norm_matmul: rope and silu together");
    if (rope && (rope->n_heads <= 0 || rope->n_kv_heads <= 0 || rope->head_dim <= 0 ||
                 y.cols != (rope->n_heads + 2 * (int64_t)rope->n_kv_heads) * rope->head_dim))
        return CU_FAIL(c, "norm_matmul: y has %lld columns, not q|k|v of %d + 2 x %d heads of %d", (long long)y.cols,
                       rope->n_heads, rope->n_kv_heads, rope->head_dim);
    CU_CHECK_VIEW(c, "norm_matmul resid", resid);
    CU_CHECK_VIEW(c, "norm_matmul w", w);
    if (delta.data) {
        CU_CHECK_VIEW(c, "norm_matmul delta", delta);
        CU_CHECK_VIEW(c, "norm_matmul rout", rout);
        if (delta.dtype != resid.dtype || delta.rows != resid.rows || delta.cols != resid.cols ||
            rout.dtype != resid.dtype || rout.rows != resid.rows || rout.cols != resid.cols)
            return CU_FAIL(c, "norm_matmul: delta and rout must match resid [%lld,%lld] %s", (long long)resid.rows,
                           (long long)resid.cols, lg_dtype_name(resid.dtype));
        if (overlap(rout, resid) || overlap(rout, delta))
            return CU_FAIL(c, "norm_matmul: rout overlaps resid or delta (every block reads them)");
    }
    if (bias.data && !cu_is_float(bias.dtype))
        return CU_FAIL(c, "norm_matmul: bias dtype %s", lg_dtype_name(bias.dtype));
    if (w.rows * w.cols < resid.cols)
        return CU_FAIL(c, "norm_matmul: %lld norm weights for rows of %lld", (long long)(w.rows * w.cols),
                       (long long)resid.cols);
    const int T = (int)resid.rows;
    const int64_t K = resid.cols, F = silu ? W.rows / 2 : W.rows;
    /* the shapes and dtypes the kernel takes; anything else runs the separate ops */
    if (W.q != LG_QNONE || !cu_is_half(resid.dtype) || W.dtype != resid.dtype || y.dtype != resid.dtype || W.cols != K ||
        y.rows != T || y.cols != F || (silu && W.rows % 2 != 0) || (bias.data && bias.rows * bias.cols < W.rows))
        return 1;
    if (c->tune->gemv == 0 || T < 1 || T > NM_MAX_T || K % 8 != 0 || K / 8 > 32 * GEMV_WARPS * GEMV_NORM_J ||
        W.rows > INT32_MAX / 2 || !rows_ok(resid) || !rows_ok(W) ||
        (delta.data && (!rows_ok(delta) || !rows_ok(rout))))
        return 1;
    CU_CHECK_VIEW(c, "norm_matmul y", y);
    CU_CHECK_VIEW(c, "norm_matmul W", W);
    gemv_args a = {};
    skm_set_call(&a, y, resid, W, bias, false);
    a.x = NULL, a.N = (int)F; /* x: the prologue's rows; N: output columns */
    a.resid = resid.data, a.ldr = resid.stride, a.delta = delta.data, a.ldd = delta.stride;
    a.rout = delta.data ? rout.data : NULL, a.ldro = delta.data ? rout.stride : 0;
    a.g = w.data, a.gdt = w.dtype, a.g_vec = cu_aligned16(w.data), a.eps = eps;
    const bool rope_epi = rope && rope_fits(c, y, rope);
    if (rope_epi) {
        a.pos = rope->pos, a.slot = rope->slot, a.inv_freq = rope->inv_freq, a.kv_base = (char *)rope->kv.base;
        a.page_bytes = rope->kv.page_bytes, a.k_off = rope->kv.k_off, a.v_off = rope->kv.v_off;
        a.page_tokens = rope->kv.page_tokens, a.nh = rope->n_heads, a.nkv = rope->n_kv_heads, a.hd = rope->head_dim;
    }
    const int epi = silu ? 1 : rope_epi ? 2 : 0;
    const cudaError_t e = resid.dtype == LG_F16 ? launch_t<__half>(c, a, T, epi) : launch_t<__nv_bfloat16>(c, a, T, epi);
    if (e != cudaSuccess)
        return CU_FAIL(c, "norm_matmul: launch (N=%lld T=%d K=%lld) failed: %s", (long long)W.rows, T, (long long)K,
                       cudaGetErrorString(e));
    CU_LAUNCHED(c);
    if (rope && !rope_epi) { /* rope_kv_write checks and reports the rest itself */
        const int64_t qd = (int64_t)rope->n_heads * rope->head_dim, kvd = (int64_t)rope->n_kv_heads * rope->head_dim;
        return cu_rope_kv_write(be, lg_tensor_cols(y, 0, qd), lg_tensor_cols(y, qd, kvd), lg_tensor_cols(y, qd + kvd, kvd),
                                rope->pos, rope->inv_freq, rope->n_heads, rope->n_kv_heads, rope->head_dim, rope->kv,
                                rope->slot);
    }
    return 0;
}
