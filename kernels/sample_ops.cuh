/*
 * sample_ops.cuh — host launchers of the optional backend slots that live
 * outside ops.cuh: device sampling (sample.cu) and pinned host memory with
 * the asynchronous upload stream (host_mem.cu). Same conventions as ops.cuh:
 * check arguments, enqueue, return 0 or -1 (see cuda_common.cuh).
 */
#ifndef LG_CUDA_SAMPLE_OPS_CUH
#define LG_CUDA_SAMPLE_OPS_CUH

#include "kernels/cuda_common.cuh"

/* backend.h `sample`, on the compute stream:
 *   with pen: each row's penalties applied to its logits in place (see
 *              lg_sample_row), then
 *   for i < n: out_ids[i] = the token of engine/backend/sampling.h's rules for
 *              logits[i * V .. i * V + V) with rows[i] (u = rows[i].u),
 *   bit-identical to lg_sampler_sample_u(logits row, (double)rows[i].u),
 *   then with lp: cu_logprobs.
 * logits f32 [n, V] contiguous, rows [n], out_ids [n], pen, lp: all device memory. */
/* backend.h's mask_logits: the grammar masks of structured output, -inf outside them */
int cu_mask_logits(lg_backend *be, float *logits, int n, int V, const lg_sample_row *rows, const uint32_t *masks);
int cu_sample(lg_backend *be, int32_t *out_ids, float *logits, int n, int V, const lg_sample_row *rows,
              const int32_t *pen, lg_logprob_row *lp);

/* logprobs.cu: for i < n with rows[i].logprobs != 0, lp[i] = the
 * lg_logprob_row of logits row i and token ids[i] (backend.h). */
int cu_logprobs(cuda_ctx *c, lg_logprob_row *lp, const float *logits, int n, int V, const lg_sample_row *rows,
                const int32_t *ids);

/* Installs alloc_host, free_host, upload_async and upload_done on be and
 * creates their event ring. The ring is released by be->i.free, which this
 * wraps (the original free runs after). 0 or -1 (reason in last_err). */
int cu_host_mem_attach(lg_backend *be);

#endif
