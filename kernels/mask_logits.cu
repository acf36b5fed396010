/*
 * mask_logits.cu — structured output's grammar masks on the device
 * (backend.h mask_logits): before the sampler, each masked row's tokens
 * outside its allowed-token bitmask get logit -inf.
 *
 *   for r < n with rows[r].masked, t < V:
 *     if bit (t % 32) of masks[rows[r].mask_off + t / 32] is clear: logits[r, t] = -inf
 *
 * Grid (ceil(V / 8192), n), 256 threads: a block covers 8,192 tokens of
 * one row, a thread reads one mask word per 32 tokens through the read-only
 * cache and writes only the masked-out logits. W1's 32 rows at V = 32,000:
 * 128 blocks, ~4 MB touched at most. The engine computes the masks on the
 * host while the step's forward runs (engine.c, lg_model_launch's mask
 * callback) and uploads them after it.
 */
#include "kernels/sample_ops.cuh"

/* Grammar masks (lg_sample_row.masked): block (x, r) covers 32 x 256
 * tokens of row r, a thread per token: a clear bit sets the logit to -inf.
 * Rows without a mask return at once. */
__global__ void __launch_bounds__(256)
mask_kernel(float *logits, int V, const lg_sample_row *rows, const uint32_t *masks)
{
    const lg_sample_row *p = &rows[blockIdx.y];
    if (!p->masked)
        return;
    const uint32_t *m = masks + p->mask_off;
    float *x = logits + (size_t)blockIdx.y * (size_t)V;
    for (int t = blockIdx.x * 8192 + threadIdx.x; t < V && t < (int)(blockIdx.x + 1) * 8192; t += 256)
        if (!((__ldg(&m[t >> 5]) >> (t & 31)) & 1u))
            x[t] = __int_as_float(0xff800000); /* -inf */
}

int cu_mask_logits(lg_backend *be, float *logits, int n, int V, const lg_sample_row *rows, const uint32_t *masks)
{
    cuda_ctx *c = CU_CTX(be);
    if (n < 0 || V <= 0)
        return CU_FAIL(c, "mask_logits: expected n >= 0 and V > 0, found n=%d V=%d", n, V);
    if (n == 0)
        return 0;
    if (!logits || !rows || !masks)
        return CU_FAIL(c, "mask_logits: expected device pointers, found logits=%p rows=%p masks=%p",
                       (void *)logits, (const void *)rows, (const void *)masks);
    mask_kernel<<<dim3((unsigned)((V + 8191) / 8192), (unsigned)n), 256, 0, c->stream>>>(logits, V, rows, masks);
    CU_LAUNCHED(c);
    return 0;
}
