/*
 * ops.cuh — the host launchers of the CUDA backend, one per file in
 * kernels/. Each checks shapes and dtypes, enqueues on the backend's
 * compute stream and returns 0 or -1 (see cuda_common.cuh). Signatures
 * follow lg_backend_i in engine/backend/backend.h; backend_cuda.cu wires them in.
 */
#ifndef LG_CUDA_OPS_CUH
#define LG_CUDA_OPS_CUH

#include "kernels/cuda_common.cuh"

int cu_embed(lg_backend *be, lg_tensor out, lg_tensor table, const int32_t *tok);
int cu_add_rmsnorm(lg_backend *be, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps);
/* add_rmsnorm's checks of views, dtypes and shapes (also lora_shrink.cu's norm form): 0, or -1 with
 * the message reported. */
int cu_add_rmsnorm_check(cuda_ctx *c, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out);
int cu_matmul(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
/* cu_matmul's shape and dtype checks (gemm.cu): 0, or -1 with the message reported. */
int cu_matmul_check(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias);
int cu_rope(lg_backend *be, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq, int n_heads,
            int n_kv_heads, int head_dim);
int cu_kv_write(lg_backend *be, lg_kv_view kv, lg_tensor k, lg_tensor v, const int32_t *slot, int n_tokens);
int cu_rope_kv_write(lg_backend *be, lg_tensor q, lg_tensor k, lg_tensor v, const int32_t *pos,
                     const float *inv_freq, int n_heads, int n_kv_heads, int head_dim, lg_kv_view kv,
                     const int32_t *slot);
int cu_attention(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m, int n_heads,
                 float scale);
int cu_silu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up);
int cu_gelu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up);
int cu_head_rmsnorm(lg_backend *be, lg_tensor x, lg_tensor w, int n_heads, int head_dim, float eps);
int cu_scale_cap(lg_backend *be, lg_tensor x, float s, float cap);
int cu_get_rows(lg_backend *be, lg_tensor out, lg_tensor x, const int32_t *rows, int n);
int cu_convert(lg_backend *be, lg_tensor dst, lg_tensor src);
int cu_lora_shrink(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot);
int cu_lora_expand(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot);
int cu_lora_shrink_multi(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k);
int cu_lora_expand_multi(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                         const int *slots, int k);
/* lora_expand.cu's store form, for matmul_lora's prefill order (expand, then the matmul adding
 * into y): ys[i] = the expand alone, zeros in the rows of segments without rank at slots[i]
 * (rows outside every segment untouched). 1 (nothing run) unless the launch takes the 32-token
 * tile kernel (multi-token segments filling the GPU, ranks <= 64); 0 done, -1 error. */
int cu_lora_expand_store(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                         int k);
/* lora_expand.cu's rope form, for matmul_lora's q,k,v with rope: the expand of ys = q, k, v
 * (slots[0..2]), then rope_kv_write(q, k, v, rope->...), in one launch; results equal the two ops'
 * bit for bit. 1 (nothing run) unless a decode step (every segment one token, covering the rows)
 * whose column blocks are whole heads; 0 done, -1 error. */
int cu_lora_expand_rope(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm, const int *slots,
                        int k, const lg_rope_kv *rope);
/* lora_shrink.cu's norm form, for matmul_lora.cu's norm_matmul_lora: add_rmsnorm of nm's rows into
 * xn (h into nm->rout when nm->delta.data), then lora_shrink_multi(tmp, xn, ...), in one launch; the
 * same bits as the two ops. 1 (nothing run) unless a decode step (every segment one token, in order,
 * covering the rows) with rows of at most 8,192 (% 8), 16-byte aligned; 0 done, -1 error. */
int cu_lora_shrink_norm(lg_backend *be, lg_tensor tmp, const lg_norm_in *nm, lg_tensor xn, const lg_lora_meta *lm,
                        const int *slots, int k);
/* Host helpers over lg_lora_meta (lora_shrink.cu): the longest segment (-1 when malformed), the
 * step's largest rank (step_max_rank, else max_rank), the number of tm-token tiles of all segments. */
int cu_lora_max_seg(const lg_lora_meta *lm);
int cu_lora_step_rank(const lg_lora_meta *lm);
int64_t cu_lora_tiles(const lg_lora_meta *lm, int tm);
/* The shrink of multi-token (prefill) segments on tensor cores (lora_shrink_mma.cu), called by
 * cu_lora_shrink_multi after its checks: true when launched, false when not taken (decode-sized
 * segments, x alignment, LG_SGMV_PREFILL=0). cu_sgmv_prefill: that switch, which also picks
 * lora_expand.cu's path for such segments. */
bool cu_lora_shrink_mma(cuda_ctx *c, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots, int k,
                        int max_seg);
int cu_sgmv_prefill(const cuda_ctx *c);
/* The compute stream, for benchmarks that time ops with events (lora_shrink.cu; C linkage). */
extern "C" cudaStream_t lg_cuda_compute_stream(lg_backend *be);
/* step graphs (graph.cu) */
int cu_graph_begin(lg_backend *be, const void *key, size_t key_len, bool *replayed);
int cu_graph_end(lg_backend *be, bool ok);
void cu_graph_reset(lg_backend *be);
void cu_graph_reset_ctx(cuda_ctx *c); /* syncs the stream, destroys every recording */
/* tensor parallelism (group.cu): backend.h's group_init, all_reduce, bind_thread; cu_group_leave: cuda_free's
 * end of the rank's membership (destroys its NCCL communicator; nothing outside a group) */
int cu_group_init(lg_backend *const *bes, int n, lg_err *err);
int cu_all_reduce(lg_backend *be, lg_tensor x);
int cu_bind_thread(lg_backend *be);
void cu_group_leave(cuda_ctx *c);

/* The two attention paths behind cu_attention (attention.cu picks one):
 * decode: any q length, split-K over the context, CUDA cores, any head_dim % 8 == 0;
 * prefill: FlashAttention-2 style on tensor cores (wmma), head_dim % 16 == 0. */
int cu_attention_decode(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                        int n_heads, float scale);
/* backend.h decode_kv_key (attention_decode.cu) */
extern "C" int cu_decode_kv_key(lg_backend *be, int n_tokens, int n_heads, const lg_kv_view *kv, int max_kv_len);
/* attention_window.cu: layers with a sliding window or soft-capped scores (kv.window, kv.softcap) */
int cu_attention_window(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m, int n_heads,
                        float scale);
int cu_attention_prefill(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                         int n_heads, float scale);
/* FlashAttention-2 on mma.sync for head_dim 64 / 128 (attention_prefill_fa2.cu): 0 done, -1 error,
 * 1 not taken (head_dim, alignment): use cu_attention_prefill. */
int cu_attention_prefill_fa2(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                             int n_heads, float scale);

/* Checks a view: float dtype, positive shape, stride >= cols, data non-NULL. */
int cu_check_view(cuda_ctx *c, const char *what, lg_tensor t, const char *file, int line);
#define CU_CHECK_VIEW(c, what, t)                                                                \
    do {                                                                                         \
        if (cu_check_view((c), (what), (t), __FILE__, __LINE__) != 0)                            \
            return -1;                                                                           \
    } while (0)

/* The skinny matmul for T <= 4 (gemv.cu), same contract as cu_matmul on already-checked
 * views: 0 done, -1 error, 1 not taken (T > 2 with N < 16384, T > 4, K % 8, alignment): use cuBLAS. */
int cu_gemv_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
/* For the fused norm + GEMV (norm_matmul.cu) too: how many of `blocks` blocks of rows_per_block rows issue
 * gemv.cu's L2 prefetch (none without programmatic launch) */
int cu_gemv_pf_blocks(bool pdl, int blocks, int rows_per_block, int K8);
/* The decode matmul over a planar checkpoint weight for T <= QGEMV_MAX_T token rows on the CUDA cores
 * (qgemv.cu), with qmm.cuh's arguments (a: one launch's, wf QMM_F8 / QMM_I4, xm its activation mode, xt
 * the activation dtype, yt y's): 0 done, -1 error, 1 not taken (LG_QGEMV = 0, T, layout or alignment):
 * use qmm.cuh's kernel. */
#define QGEMV_MAX_T 4
struct qmm_args;
int cu_qgemv_try(cuda_ctx *c, int wf, int xm, lg_dtype xt, lg_dtype yt, const struct qmm_args *a);
int cu_norm_matmul(lg_backend *be, lg_tensor y, lg_tensor resid, lg_tensor delta, lg_tensor w, float eps,
                   lg_tensor rout, lg_tensor W, lg_tensor bias, bool silu, const lg_rope_kv *rope);
int cu_matmul_lora(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, lg_tensor tmp,
                   const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k,
                   const lg_rope_kv *rope);
int cu_norm_matmul_lora(lg_backend *be, const lg_norm_in *nm, lg_tensor y, lg_tensor xn, lg_tensor W, lg_tensor bias,
                        lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols,
                        int k, const lg_rope_kv *rope);
/* The planar checkpoint layouts (backend.h: F8, F8_A8, F8_A8S, F8_A8G, I4): cu_matmul hands a W with
 * W.q set to cu_matmul_quant (qmm_prefill.cu), which picks matmul_f8.cu or matmul_i4.cu; cu_matmul_qcheck:
 * their checks (0, or -1 with the message reported); qmm_prefill: the large-T path both share (W
 * dequantized in row chunks of `chunk` rows into scratch [chunk, ldo], cuBLAS); cu_takes_quant: the
 * backend's takes_quant (the planar layouts). */
int cu_matmul_quant(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
int cu_matmul_qcheck(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias);
int cu_matmul_f8(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
int cu_matmul_i4(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
int qmm_prefill(cuda_ctx *c, lg_tensor y, lg_tensor x, lg_tensor W, lg_qplanes p, lg_tensor bias, bool accumulate,
                void *scratch, int64_t chunk, int64_t ldo, int r_begin, int r_end);
bool cu_takes_quant(lg_backend *be, lg_qtype q);
/* y[:, r0 : r0 + n] += bias[r0 : r0 + n] over T rows (qmm_prefill.cu) */
int qmm_bias(cuda_ctx *c, lg_tensor y, lg_tensor bias, int r0, int n, int T);
/* F8_A8's prefill on cuBLASLt's FP8 GEMM (matmul_f8_lt.cu) from the prepass's e4m3 rows xq [T, nb * 128] and
 * per-token scales s1 [T]; scratch: N floats + 256 bytes. 0 done, -1 error, 1 not taken (d not one per row,
 * recording a graph, no algorithm). cu_qf8_lt_free: its state in c->qf8 (backend_cuda.cu's free). */
int cu_qf8_lt_try(cuda_ctx *c, lg_tensor y, lg_tensor W, const uint8_t *xq, const float *s1, int T, lg_tensor bias,
                  bool accumulate, void *scratch);
void cu_qf8_lt_free(cuda_ctx *c);
/* forgets every weight matmul_f8_lt.cu has checked (by address): on each dealloc, as a freed address may come back
 * as another weight */
void cu_qf8_forget(cuda_ctx *c);
/* F8_A8S: W's rows as runs of one activation scale a (matmul_f8_lt.cu; its a plane downloaded once per weight,
 * cached): up to `max` runs into r0[i], a[i] (run i: rows [r0[i], r0[i + 1]), r0[n] = W.rows); the count, 0 when
 * not known (more runs, or a graph records and W was not seen before), -1 on error. */
int cu_qf8_a8s_runs(cuda_ctx *c, lg_tensor W, int *r0, float *a, int max);
/* The TMA + wgmma stream-K matmul for 2..64 token rows (forced variants: 1..64; gemm_tma.cu), same contract as
 * cu_gemv_try: taken when the stream-K mode (LG_STREAMK) is 2 or 20 + v. cu_tma_takes: on this GPU (Hopper:
 * wgmma), T is within the rows the stream-K mode gives the TMA matmul (the shape aside). */
int cu_tma_try(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
bool cu_tma_takes(const cuda_ctx *c, int T);

#endif
