/*
 * backend.h — the compute backend interface (CPU, CUDA).
 *
 * Shaped after ggml-backend: a struct of function pointers (lg_backend_i)
 * plus an opaque context. The engine (engine/model/model.c) describes the Llama
 * forward pass as a sequence of these ops over device buffers; nothing in
 * engine/ knows which backend it runs on. All ops are asynchronous on the
 * backend's compute stream: they enqueue and return; lg_backend_sync waits.
 * The CPU backend runs them immediately on its thread pool (its "stream" is
 * the calling thread) and is the oracle every CUDA kernel is tested against.
 *
 * Memory: buffers come from be->alloc (device memory for CUDA) and are
 * addressed by plain pointers. Tensor arguments are non-owning views passed
 * by value (lg_tensor); the engine owns all memory.
 *
 * Batch layout: every step is one flattened varlen batch (vLLM V1 / SGLang
 * style): the tokens of all scheduled sequences concatenated — prefill
 * chunks and single decode tokens together — with per-sequence metadata in
 * lg_step_meta (device-resident arrays, uploaded once per step). Linear
 * layers run once over all tokens; attention walks each sequence's pages.
 *
 * Activations are in be->act_dtype (F32 on CPU; F16/BF16 on CUDA). Weights
 * are in the model's weight dtype, or, on a backend whose takes_quant says
 * so (the CPU), in a quantized block layout (lg_qtype: a property of the
 * weight tensor, not of the model; matmul and embed pick their kernel by
 * it). Matmul accumulates in f32 everywhere.
 *
 * Switches: each backend reads the LG_* environment switches once, at
 * create, into be->tune (tuning.h, the one table of them); the model and
 * the runtime read them with lg_backend_tuning(be).
 */
#ifndef LG_BACKEND_H
#define LG_BACKEND_H

#include "engine/base/tuning.h"
#include "engine/base/common.h"

/* Quantized block layouts of weights: ggml's blocks byte for byte
 * (ggml-common.h), so a GGUF tensor's bytes are used as they are. A row of
 * `cols` elements is cols / block_elems consecutive blocks of block_bytes;
 * each block holds its own scales (f16) and packed integers:
 *   Q4_0  32 el, 18 B: d, 16 B of 4-bit q          x = d * (q - 8)
 *   Q4_1  32 el, 20 B: d, m, 16 B of 4-bit q       x = d * q + m
 *   Q5_0  32 el, 22 B: d, 4 B high bits, 16 B      x = d * (q - 16)
 *   Q5_1  32 el, 24 B: d, m, 4 B high bits, 16 B   x = d * q + m
 *   Q8_0  32 el, 34 B: d, 32 int8                  x = d * q
 *   Q2_K..Q6_K  256 el (super-blocks of 16 or 32-element sub-blocks with
 *         4/6/8-bit sub-scales): 84, 110, 144, 176, 210 B
 * and the layouts of the Hub's quantized checkpoints (FP8 and INT4; the
 * loader, engine/model/weights_hfquant.c, repacks their tensors into them,
 * and `--quantization fp8` quantizes 16-bit weights into F8_A8). These are
 * planar, not blocked, so that a GEMM library can read the data plane as a
 * plain matrix: a [rows, cols] tensor has nb = ceil(cols / 128) groups of
 * 128 elements a row and holds, one plane after the other (lg_qplanes_of):
 *   q  [rows, nb * 128] e4m3 bytes (F8*), or [rows, nb * 64] bytes of 4-bit
 *      values (I4: element 2i in the low nibble of byte i, 2i+1 in the high)
 *   d  [rows, nb] f32 (F8*) or f16 (I4): the scale of each group
 *   a  [rows, nb] f32 (F8_A8S only: the activation scale, the same for
 *      every group of a source tensor; fused rows of several may differ)
 *   z  [rows, nb] u8, then [rows, nb] u8 zeros as padding (I4 only)
 * so a group costs block_bytes (132, 136 or 68 B) and a tensor rows * nb *
 * block_bytes. Elements of a row past cols are 0 (F8) or q = z (I4).
 * e4m3 is OCP FP8 E4M3FN (lg_e4m3_to_f32); f32/f16 little-endian.
 *   F8      w = d * q; activations as they are (weight-only FP8, W8A16)
 *   F8_A8   w = d * q; W8A8: the matmul first rounds each activation row x
 *           to e4m3 with a dynamic per-token scale s = amax(|x|) / 448:
 *           x~ = s * e4m3(x / s)   (s = 0: x~ = 0)
 *   F8_A8S  w = d * q; W8A8 with its activation scale a: a > 0 a static
 *           scale, x~ = a * e4m3(clamp(x / a, +-448)); a < 0 dynamic per
 *           token with amax clamped to -a (fbgemm's upper bound):
 *           s = min(amax, -a) / 448
 *   F8_A8G  w = d * q; W8A8 with a dynamic scale per token and group of
 *           128 elements of K (block-scaled FP8 checkpoints; a group's d
 *           comes from its 128x128 block): s = amax(|x[k0 .. k0+127]|) / 448
 *   I4      w = d * (q - z), q and z in 0..15; activations as they are
 *           (W4A16: AWQ, GPTQ, compressed-tensors pack-quantized, groups of
 *           128 or one a row, whose d and z then repeat)
 * Only whole tensors of these layouts reach ops (no row or column views).
 * LG_QNONE: plain elements of the tensor's dtype. */
typedef enum lg_qtype {
    LG_QNONE = 0,
    LG_Q4_0,
    LG_Q4_1,
    LG_Q5_0,
    LG_Q5_1,
    LG_Q8_0,
    LG_Q2_K,
    LG_Q3_K,
    LG_Q4_K,
    LG_Q5_K,
    LG_Q6_K,
    LG_QF8,
    LG_QF8_A8,
    LG_QF8_A8S,
    LG_QF8_A8G,
    LG_QI4,
    LG_QTYPE_COUNT
} lg_qtype;

/* Block geometry of a layout (LG_QNONE: 1 element of 0 bytes: use the dtype). */
typedef struct lg_qtype_info {
    const char *name;
    int32_t block_elems, block_bytes;
} lg_qtype_info;
static inline lg_qtype_info lg_qtype_get(lg_qtype q)
{
    static const lg_qtype_info k[LG_QTYPE_COUNT] = {
        {"none", 1, 0},   {"Q4_0", 32, 18},  {"Q4_1", 32, 20},  {"Q5_0", 32, 22},
        {"Q5_1", 32, 24}, {"Q8_0", 32, 34},  {"Q2_K", 256, 84}, {"Q3_K", 256, 110},
        {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
        {"F8", 128, 132}, {"F8_A8", 128, 132}, {"F8_A8S", 128, 136}, {"F8_A8G", 128, 132},
        {"I4", 128, 68},
    };
    return (unsigned)q < LG_QTYPE_COUNT ? k[q] : k[0];
}

/* Whether q is one of ggml's layouts (a GGUF file's blocks) rather than a
 * quantized checkpoint's (F8*, I4). */
static inline bool lg_qtype_is_ggml(lg_qtype q) { return q > LG_QNONE && q <= LG_Q6_K; }
/* Whether q is a planar checkpoint layout (F8*, I4; see above). */
static inline bool lg_qtype_is_planar(lg_qtype q) { return q >= LG_QF8 && q < LG_QTYPE_COUNT; }
/* Whether the matmul rounds its activations to e4m3 for a weight of layout q (W8A8). */
static inline bool lg_qtype_is_w8a8(lg_qtype q) { return q == LG_QF8_A8 || q == LG_QF8_A8S || q == LG_QF8_A8G; }

/* A 2-D row-major view: rows x cols, `stride` elements between rows.
 * A quantized weight (q != LG_QNONE; only as matmul's W or embed's table,
 * on a backend whose takes_quant(q) is true) holds blocks of layout q:
 * for ggml's layouts cols and stride are multiples of its block_elems and a
 * row is stride / block_elems blocks; a planar layout's tensor is its planes
 * (stride == cols); dtype is unused (LG_F32). */
typedef struct lg_tensor {
    void *data;
    lg_dtype dtype;
    int64_t rows, cols, stride;
    lg_qtype q;
} lg_tensor;

static inline lg_tensor lg_tensor_2d(void *data, lg_dtype dt, int64_t rows, int64_t cols)
{
    lg_tensor t = {data, dt, rows, cols, cols, LG_QNONE};
    return t;
}
/* A [rows, cols] matrix of blocks of layout q. */
static inline lg_tensor lg_tensor_quant(void *data, lg_qtype q, int64_t rows, int64_t cols)
{
    lg_tensor t = {data, LG_F32, rows, cols, cols, q};
    return t;
}
/* Bytes of n elements of t's rows (a multiple of the block for ggml's layouts; a planar t's n
 * elements a row take ceil(n / 128) groups, and its bytes are only a size: see lg_qplanes_of). */
static inline size_t lg_tensor_bytes(lg_tensor t, int64_t n)
{
    if (t.q == LG_QNONE)
        return (size_t)n * lg_dtype_size(t.dtype);
    const lg_qtype_info qi = lg_qtype_get(t.q);
    return (size_t)((n + qi.block_elems - 1) / qi.block_elems) * (size_t)qi.block_bytes;
}
/* The planes of a planar quantized tensor t (lg_qtype_is_planar(t.q)). */
typedef struct lg_qplanes {
    int64_t nb;     /* groups of 128 a row: ceil(cols / 128) */
    int64_t q_row;  /* bytes of q a row: nb * 128 (F8*) or nb * 64 (I4) */
    uint8_t *q;     /* [rows, q_row] */
    void *d;        /* [rows, nb] f32 (F8*) or f16 (I4) */
    float *a;       /* [rows, nb] (F8_A8S), else NULL */
    uint8_t *z;     /* [rows, nb] (I4), else NULL */
} lg_qplanes;
static inline lg_qplanes lg_qplanes_of(lg_tensor t)
{
    lg_qplanes p;
    const bool i4 = t.q == LG_QI4;
    p.nb = (t.cols + 127) / 128;
    p.q_row = p.nb * (i4 ? 64 : 128);
    p.q = (uint8_t *)t.data;
    p.d = p.q + (size_t)t.rows * (size_t)p.q_row;
    char *after_d = (char *)p.d + (size_t)t.rows * (size_t)p.nb * (i4 ? 2 : 4);
    p.a = t.q == LG_QF8_A8S ? (float *)after_d : NULL;
    p.z = i4 ? (uint8_t *)after_d : NULL;
    return p;
}

/* Rows [r0, r0 + n) of t. */
static inline lg_tensor lg_tensor_rows(lg_tensor t, int64_t r0, int64_t n)
{
    t.data = (char *)t.data + (size_t)r0 * lg_tensor_bytes(t, t.stride);
    t.rows = n;
    return t;
}
/* Columns [c0, c0 + n) of every row of t (a strided view; whole blocks of a quantized t). */
static inline lg_tensor lg_tensor_cols(lg_tensor t, int64_t c0, int64_t n)
{
    t.data = (char *)t.data + lg_tensor_bytes(t, c0);
    t.cols = n;
    return t;
}

/* Paged KV cache view for one layer. The pool is an array of equal pages; a
 * page holds `page_tokens` consecutive token slots of one sequence for all
 * layers. Inside a page, this layer's K block starts at k_off and V at
 * v_off, each [page_tokens, n_kv_heads * head_dim] in `dtype`.
 *   K(page p, slot s) = base + p * page_bytes + k_off + s * kv_dim * esize
 */
typedef struct lg_kv_view {
    void *base;
    size_t page_bytes;
    size_t k_off, v_off;
    int page_tokens;
    int n_kv_heads, head_dim;
    lg_dtype dtype;
    /* which keys a query sees and how its scores are bounded (attention only; zero for the
     * other ops): window > 0: a query at position p attends to keys p - window + 1 .. p (a
     * sliding-window layer), else to keys 0 .. p; softcap > 0: scores are
     * softcap * tanh(scale * q.k / softcap) before the softmax (Gemma 2) */
    int window;
    float softcap;
    /* dtype LG_F8E4M3 (`--kv-cache-dtype fp8`): a K element x is stored as e4m3(x / k_scale)
     * (round to nearest even, saturating to +-448) and read back as e4m3 * k_scale; V likewise
     * with v_scale. The layer's scales (the checkpoint's self_attn.k_scale / v_scale, else 1);
     * 0 reads as 1. Ignored for 16/32-bit caches. */
    float k_scale, v_scale;
} lg_kv_view;

/* The view's scales as the ops use them (0: 1). */
static inline float lg_kv_kscale(const lg_kv_view *kv) { return kv->k_scale > 0 ? kv->k_scale : 1.0f; }
static inline float lg_kv_vscale(const lg_kv_view *kv) { return kv->v_scale > 0 ? kv->v_scale : 1.0f; }

/* rope_kv_write's arguments after q, k, v (norm_matmul's qkv form). */
typedef struct lg_rope_kv {
    const int32_t *pos;     /* [T] positions */
    const float *inv_freq;  /* [head_dim / 2] */
    int n_heads, n_kv_heads, head_dim;
    lg_kv_view kv;          /* the layer's K and V pages */
    const int32_t *slot;    /* [T] cache slots (< 0: no cache row) */
} lg_rope_kv;

/* add_rmsnorm's inputs for an op that norms its own input (norm_matmul_lora):
 * h = delta.data ? round(resid + delta) : resid, stored to rout when delta.data;
 * xn = rmsnorm(h) * w. */
typedef struct lg_norm_in {
    lg_tensor resid, delta, w, rout;
    float eps;
} lg_norm_in;

/* Per-step metadata for the flattened batch. Arrays live in backend memory.
 * Token t belongs to the sequence s with q_indptr[s] <= t < q_indptr[s+1];
 * its position is pos[t]; positions of one sequence's new tokens are
 * consecutive and end at kv_len[s] - 1 (its KV for this step is written
 * before attention runs). The KV rows before a sequence's first new token
 * were written by earlier steps and nothing of this step writes them, so a
 * kernel may read them before the kernels ahead of it in the step complete
 * (the CUDA decode attention does: kernels/attention_decode.cu). */
typedef struct lg_step_meta {
    int n_tokens, n_seqs;
    int max_q_len;               /* host-side maximum of the query runs, for launch shapes */
    int max_kv_len;              /* host-side upper bound of every kv_len, for launch shapes; not
                                  * necessarily tight (decode steps round it up to a bucket, see
                                  * model.c); kernels take each sequence's length from kv_len/pos */
    const int32_t *tok;          /* [n_tokens] token ids */
    const int32_t *pos;          /* [n_tokens] positions */
    const int32_t *slot;         /* [n_tokens] KV slot: page * page_tokens + offset */
    const int32_t *q_indptr;     /* [n_seqs + 1] */
    const int32_t *kv_len;       /* [n_seqs] */
    const int32_t *page_indptr;  /* [n_seqs + 1] into page_ids */
    const int32_t *page_ids;     /* pages of each sequence, in logical order */
    const int32_t *logit_rows;   /* [n_logits] token rows that produce logits */
    int n_logits;
} lg_step_meta;

/* LoRA weights of one (adapter, layer, module) as the kernels see them:
 * pointers into pool pages (never gathered), the adapter's own rank.
 * rank == 0 means "no LoRA here" (a no-adapter segment, or a module the
 * adapter does not target). */
typedef struct lg_lora_w {
    const void *A;   /* [rank, in] row-major, act dtype */
    const void *B;   /* [out, rank] row-major, act dtype */
    int32_t rank;
    float scale;     /* alpha / rank, or alpha / sqrt(rank) with rsLoRA */
} lg_lora_w;

/* Segmented-LoRA metadata for one step (Punica SGMV layout). The step's
 * tokens are grouped by adapter into n_segs segments: segment s covers
 * token rows [seg_indptr[s], seg_indptr[s+1]). w is a device array
 * [n_segs][n_slots] with n_slots = n_layers * LG_LORA_N_MODULES; the
 * weights of segment s for (layer l, module m) are
 * w[s * n_slots + l * LG_LORA_N_MODULES + m]. max_rank bounds every rank in
 * this step (the scratch width); it is never a padding size. */
#define LG_LORA_N_MODULES 7 /* q, k, v, o, gate, up, down */
typedef struct lg_lora_meta {
    int n_segs;
    int n_slots;
    int max_rank;
    const int32_t *seg_indptr; /* device [n_segs + 1] */
    const lg_lora_w *w;        /* device [n_segs * n_slots] */
    const int32_t *seg_indptr_host; /* host copy, for launch shapes */
    /* The largest rank of any segment at any slot in this step (<= max_rank), for launch shapes;
     * 0 = not given (max_rank bounds them). It must bound every rank of the table: kernels sized
     * by it do not compute ranks above it. Columns of tmp stay max_rank apart either way. */
    int step_max_rank;
} lg_lora_meta;

/* Per-row sampling parameters for the device sampler (see sampling.h for the
 * rules; u is the request's next uniform in [0, 1), drawn on the host). */
typedef struct lg_sample_row {
    float temperature; /* 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    float u;
    /* OpenAI's presence and frequency penalties, applied to the row in place
     * before it is sampled: for each of the pen_n pairs (token, count) at
     * pen[2 * pen_off ...] (distinct tokens; count >= 1 occurrences among
     * the request's generated tokens, pairs in order of first occurrence),
     * logit -= frequency, logit -= presence, then count - 1 more times
     * logit -= frequency: per token the host's sequence of float
     * subtractions (engine.c penalised()), so the same floats. pen_n = 0:
     * the row is not changed. */
    float presence, frequency;
    int32_t pen_off, pen_n;
    /* logprobs != 0: the backend also reports the row's log-softmax (at
     * temperature 1, of the logits it sampled from: after the penalties)
     * in an lg_logprob_row: the chosen token's logprob and the
     * top_logprobs (0..LG_LOGPROB_TOP) best alternatives. */
    int32_t logprobs, top_logprobs;
    /* masked != 0: a grammar's allowed tokens (structured output) at
     * masks[mask_off ...], ceil(V / 32) words, bit (t % 32) of word t / 32
     * for token t; every other token's logit becomes -inf before the
     * penalties and the sampler (the backend's mask_logits). */
    int32_t masked, mask_off;
} lg_sample_row;

#define LG_LOGPROB_TOP 20
/* One row's logprobs from the device sampler: logprob = logit(token) - L
 * with L = log(sum_i exp(logit_i)) (max-shifted, summed in double), and the
 * n_top (<= the row's top_logprobs; fewer only when fewer logits are not
 * NaN) largest logits, ordered by logit descending then id ascending (the
 * host's lg_logprobs order, sampling.h), each minus L. NaN logits are never
 * listed; a NaN anywhere in the row (or +inf, or a row of -inf) makes L,
 * and so every logprob, NaN, as on the host. */
typedef struct lg_logprob_row {
    float logprob;
    int32_t n_top;
    int32_t top_ids[LG_LOGPROB_TOP];
    float top_logprobs[LG_LOGPROB_TOP];
} lg_logprob_row;

typedef struct lg_backend lg_backend;

typedef struct lg_backend_i {
    const char *name;
    void (*free)(lg_backend *be);

    /* memory */
    void *(*alloc)(lg_backend *be, size_t size);           /* NULL on failure */
    void (*dealloc)(lg_backend *be, void *p);
    int (*upload)(lg_backend *be, void *dst, const void *src, size_t n);   /* host -> device */
    int (*download)(lg_backend *be, void *dst, const void *src, size_t n); /* device -> host, synchronous */
    int (*copy)(lg_backend *be, void *dst, const void *src, size_t n);     /* device -> device */
    int (*sync)(lg_backend *be);

    /* ops; each returns 0 or -1 (shape/dtype errors are programming errors,
     * reported, never fatal) */

    /* out[t, :] = table[tok[t], :]  (table may be quantized: see takes_quant) */
    int (*embed)(lg_backend *be, lg_tensor out, lg_tensor table, const int32_t *tok);
    /* if delta.data: resid += delta; out = resid / rms(resid) * w  (per row) */
    int (*add_rmsnorm)(lg_backend *be, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out,
                       float eps);
    /* y[T, N] (+)= x[T, K] @ W[N, K]^T (+ bias[N] when bias.data). W may be
     * quantized (W.q, see takes_quant): the op picks its kernel by the layout;
     * x may then be quantized on the fly (the CPU: to 8 bits per 32 or 256
     * elements, as llama.cpp does), so results are within that rounding of
     * the dequantized W's product. */
    int (*matmul)(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate);
    /* rotate-half RoPE in place on q [T, n_heads*hd] and k [T, n_kv*hd];
     * inv_freq [hd/2] f32 (scaling already folded in) */
    int (*rope)(lg_backend *be, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq,
                int n_heads, int n_kv_heads, int head_dim);
    /* K/V rows of this step into their slots */
    int (*kv_write)(lg_backend *be, lg_kv_view kv, lg_tensor k, lg_tensor v, const int32_t *slot,
                    int n_tokens);
    /* causal attention of the step's queries over each sequence's pages (kv.window, kv.softcap) */
    int (*attention)(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                     int n_heads, float scale);
    /* out[T, F] = silu(gu[T, :F]) * gu[T, F:] */
    int (*silu_mul)(lg_backend *be, lg_tensor out, lg_tensor gate_up);
    /* out[T, F] = gelu_tanh(gu[T, :F]) * gu[T, F:], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
     * (PyTorch's gelu with approximate='tanh'; Gemma) */
    int (*gelu_mul)(lg_backend *be, lg_tensor out, lg_tensor gate_up);
    /* in place, each head h < n_heads of each row: x[t, h] = x[t, h] / rms(x[t, h]) * w (w: [head_dim] f32;
     * the q/k norms of Qwen3 and Gemma 3) */
    int (*head_rmsnorm)(lg_backend *be, lg_tensor x, lg_tensor w, int n_heads, int head_dim, float eps);
    /* in place: x = cap > 0 ? cap * tanh(s * x / cap) : s * x (Gemma's embedding scale; the logits' soft-cap) */
    int (*scale_cap)(lg_backend *be, lg_tensor x, float s, float cap);
    /* out[i, :] = x[rows[i], :] for i < n */
    int (*get_rows)(lg_backend *be, lg_tensor out, lg_tensor x, const int32_t *rows, int n);
    /* converts between dtypes, same shape */
    int (*convert)(lg_backend *be, lg_tensor dst, lg_tensor src);

    /* SGMV shrink for slot `slot` (= layer * LG_LORA_N_MODULES + module):
     *   for s, t in segment s, w = lm->w[s * n_slots + slot], w.rank > 0:
     *     tmp[t, 0:w.rank] = x[t, :] @ w.A^T
     * Rows of segments with rank 0 are left untouched. */
    int (*lora_shrink)(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot);
    /* SGMV expand, accumulating into y (a column slice of a fused output is fine):
     *   for s, t in segment s, w.rank > 0:  y[t, :] += w.scale * tmp[t, 0:w.rank] @ w.B^T */
    int (*lora_expand)(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot);

    /* ---- optional slots (NULL: the engine falls back as noted) ---- */

    /* Whether matmul's W and embed's table may be quantized weights of layout
     * q (kept in their blocks on the device, read by the op's own kernels).
     * NULL, or false: the model dequantizes such weights at upload (the CUDA
     * backend: to its activation dtype). Only matmul and embed take them. */
    bool (*takes_quant)(lg_backend *be, lg_qtype q);

    /* Page-locked host memory for data that is copied to the device often
     * (the adapter host tier). NULL: malloc/free. */
    void *(*alloc_host)(lg_backend *be, size_t size);
    void (*free_host)(lg_backend *be, void *p);
    /* Asynchronous host-to-device copy on the backend's upload stream (not the
     * compute stream), from memory of alloc_host that must stay untouched until
     * the copy is done; *ticket identifies it. upload_done: 1 when finished,
     * 0 while in flight, -1 on error. The engine launches no op that reads dst
     * before upload_done says 1. NULL: the engine uses `upload`. */
    int (*upload_async)(lg_backend *be, void *dst, const void *src, size_t n, uint64_t *ticket);
    int (*upload_done)(lg_backend *be, uint64_t ticket);
    /* Device-to-host copy enqueued on the compute stream after every op
     * enqueued so far, into page-locked memory of alloc_host, without waiting
     * for it; *ticket identifies it. download_wait(ticket) blocks until the
     * copy is done (0, or -1 on error); dst must not be read before. Waits
     * come in ticket order, one per ticket, with at most
     * LG_DOWNLOAD_IN_FLIGHT copies not yet waited for. A step can so be
     * enqueued before the previous step's results are read (engine.c's decode
     * bursts). NULL: the engine downloads synchronously and never enqueues
     * a step before reading the previous one's results. */
    int (*download_async)(lg_backend *be, void *dst, const void *src, size_t n, uint64_t *ticket);
    int (*download_wait)(lg_backend *be, uint64_t ticket);
    /* Sampling on the device: for each row i < n of logits (f32 [n, V]),
     * params rows[i] (device memory), out_ids[i] (device) = the token chosen
     * by exactly the rules of engine/backend/sampling.h given the uniform rows[i].u,
     * after the row's penalties (pen: device (token, count) pairs that the
     * rows index; NULL: no row has any) are applied to logits in place;
     * then for rows with rows[i].logprobs != 0, lp[i] (device; NULL when no
     * row asks) = the row's lg_logprob_row for token out_ids[i]. Other
     * rows' lp entries are left as they were.
     * NULL: logits are downloaded and sampled on the host. */
    int (*sample)(lg_backend *be, int32_t *out_ids, float *logits, int n, int V, const struct lg_sample_row *rows,
                  const int32_t *pen, struct lg_logprob_row *lp);
    /* Structured output on the device: for each row i < n of logits (f32
     * [n, V], device) whose rows[i].masked (rows: device) is set, the logit
     * of every token whose bit is clear in masks[rows[i].mask_off ...]
     * (device, ceil(V / 32) words a row) becomes -inf, in place. NULL
     * where sample is NULL; the engine then masks rows on the host. */
    int (*mask_logits)(lg_backend *be, float *logits, int n, int V, const struct lg_sample_row *rows,
                       const uint32_t *masks);

    /* Several LoRA slots over one input in one launch (q,k,v; gate,up). With
     * R = lm->max_rank and tmp [T, k * R]:
     *   for i < k:  lora_shrink(be, cols [i*R, i*R + R) of tmp, x, lm, slots[i])
     * and
     *   for i < k:  lora_expand(be, ys[i], cols [i*R, i*R + R) of tmp, lm, slots[i])
     * k <= LG_LORA_MULTI_MAX; the ys are disjoint (column slices of one fused
     * output, typically). Results equal the single-slot ops'. NULL: model.c
     * calls lora_shrink/lora_expand once per slot. */
    int (*lora_shrink_multi)(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, const int *slots,
                             int k);
    int (*lora_expand_multi)(lg_backend *be, const lg_tensor *ys, lg_tensor tmp, const lg_lora_meta *lm,
                             const int *slots, int k);

    /* Step graphs (CUDA graphs): record a step's ops once per shape, replay after.
     * graph_begin looks up `key` (key_len <= LG_GRAPH_KEY_MAX bytes, compared
     * exactly). Found: the recorded ops are launched on the compute stream,
     * *replayed = true, and the caller enqueues nothing until graph_end.
     * Not found: the backend starts recording (*replayed = false); the caller
     * enqueues the ops as usual (recorded, not run) and graph_end(be, true)
     * keeps the recording (LRU of LG_GRAPH_CACHE) and launches it;
     * graph_end(be, false) drops a recording after an op failed (nothing ran).
     * graph_end after a replay returns 0.
     * Caller's contract: (1) equal keys mean equal op arguments: the same
     * pointers, and every host value a launch shape depends on (token and
     * sequence counts, n_logits, LoRA segment count and lengths, max_kv_len)
     * is in the key; (2) what changes between steps lives in fixed device
     * buffers uploaded before graph_begin (ordered before the replay on the
     * stream); (3) no upload/download/sync between begin and end.
     * A replay computes bit-identical results to running the ops eagerly.
     * graph_reset drops every recording: call it before freeing a buffer that
     * a recording names. NULL: no graphs, ops run eagerly. */
    int (*graph_begin)(lg_backend *be, const void *key, size_t key_len, bool *replayed);
    int (*graph_end)(lg_backend *be, bool ok);
    void (*graph_reset)(lg_backend *be);
    /* For step-graph keys: the value of a decode step's max_kv_len (its
     * n_tokens rows one query each, n_heads query heads over kv's layout)
     * that the step's launches depend on. Decode steps that differ only in
     * max_kv_len and get equal values here enqueue the same launches with the
     * same arguments, so one recording serves them all. NULL: max_kv_len
     * itself. (CUDA: 0 where decode attention runs one chunk of its split
     * form, whatever the length: a batch of 32 sequences records once as its
     * sequences grow instead of once per bucket of kv_bucket.) */
    int (*decode_kv_key)(lg_backend *be, int n_tokens, int n_heads, const lg_kv_view *kv, int max_kv_len);

    /* Device memory now free and in total, in bytes (cudaMemGetInfo), for
     * sizing the page pool. NULL: the backend's memory is host memory. */
    int (*mem_info)(lg_backend *be, size_t *free_bytes, size_t *total_bytes);

    /* rope followed by kv_write, in one op (one launch on CUDA):
     *   rope(be, q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim);
     *   kv_write(be, kv, k, v, slot, q.rows);
     * Results equal the two ops'. NULL: model.c calls both. */
    int (*rope_kv_write)(lg_backend *be, lg_tensor q, lg_tensor k, lg_tensor v, const int32_t *pos,
                         const float *inv_freq, int n_heads, int n_kv_heads, int head_dim, lg_kv_view kv,
                         const int32_t *slot);

    /* A matmul with the LoRA of k <= LG_LORA_MULTI_MAX slots whose outputs
     * are column ranges of its output, in one op (CUDA: for prefill the
     * expand stores y first and the matmul adds into it):
     *   lora_shrink_multi(be, tmp, x, lm, slots, k);
     *   matmul(be, y, x, W, bias, false);
     *   for i < k:  lora_expand(be, cols [col0[i], col0[i] + ncols[i]) of y,
     *                           cols [i*R, i*R + R) of tmp, lm, slots[i])     R = lm->max_rank
     * tmp is scratch (left holding the shrink when a segment has tokens). y
     * may be rounded in another order (base + round(lora); within the ops'
     * rounding, not bit for bit); a given shape always computes the same
     * way.
     * With rope (y's first columns q | k | v of rope's heads): then also
     *   rope_kv_write(be, q, k, v of y, rope->pos, ...)
     * with the same results as that op after this one (CUDA: a decode step's
     * q,k,v expand does it in its launch). NULL: model.c calls the ops. */
    int (*matmul_lora)(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, lg_tensor tmp,
                       const lg_lora_meta *lm, const int *slots, const int *col0, const int *ncols, int k,
                       const lg_rope_kv *rope);

    /* add_rmsnorm followed by the matmul of the normed rows (and SwiGLU), in
     * one op (CUDA: steps of 1-2 rows, one launch instead of two or three;
     * model.c offers steps of up to LG_NORM_MATMUL_MAX_T rows):
     *   h = delta.data ? resid + delta (rounded; stored to rout) : resid
     *   xn = rmsnorm(h) * w
     *   silu ? y = silu_mul(xn W^T (+ bias))    W [2F, K], y [T, F]
     *        : y = xn W^T (+ bias)
     * resid is not written (rout must not overlap resid or delta) and xn is
     * not stored. Results equal add_rmsnorm + matmul (+ silu_mul) bit for bit
     * where the backend's matmul of those rows is the same kernel (CUDA: the
     * engine's one-row steps; see kernels/norm_matmul.cu).
     * With rope (not with silu; y = the q|k|v columns [T, (n_heads + 2 n_kv_heads) head_dim]):
     * then also rope_kv_write(q, k, v of y, rope->...), as one op (CUDA: in the GEMV's
     * epilogue) or as the two.
     * 0 done, -1 error, 1 shape not taken (the caller runs the separate ops).
     * NULL: model.c runs the separate ops. */
    int (*norm_matmul)(lg_backend *be, lg_tensor y, lg_tensor resid, lg_tensor delta, lg_tensor w, float eps,
                       lg_tensor rout, lg_tensor W, lg_tensor bias, bool silu, const lg_rope_kv *rope);

    /* add_rmsnorm followed by matmul_lora of the normed rows, in one op (CUDA: in a decode step
     * the LoRA shrink norms the rows itself, so the layer has no add_rmsnorm launch):
     *   h = nm->delta.data ? nm->resid + nm->delta (rounded; stored to nm->rout) : nm->resid
     *   xn = rmsnorm(h) * nm->w                    (stored to xn, which the matmul reads)
     *   matmul_lora(be, y, xn, W, bias, tmp, lm, slots, col0, ncols, k, rope)
     * nm->resid is not written (nm->rout must not overlap it, nm->delta or xn). Results equal
     * add_rmsnorm + matmul_lora bit for bit (y, xn, h, tmp, the KV pages with rope).
     * 0 done, -1 error, 1 shape not taken (nothing run; the caller runs the two ops).
     * NULL: model.c runs the two ops. */
    int (*norm_matmul_lora)(lg_backend *be, const lg_norm_in *nm, lg_tensor y, lg_tensor xn, lg_tensor W,
                            lg_tensor bias, lg_tensor tmp, const lg_lora_meta *lm, const int *slots, const int *col0,
                            const int *ncols, int k, const lg_rope_kv *rope);

    /* ---- tensor parallelism (engine/model/model_tp.c; NULL: the backend serves one rank only) ---- */

    /* Joins bes[0 .. n), n >= 2 distinct backends of this kind, into one group in which bes[r] is
     * rank r (CUDA: one NCCL communicator per device, ncclCommInitAll; the CPU: shared memory).
     * Called once, through bes[0]->i.group_init, before any op of the group is enqueued; the group
     * lives until its backends are freed (all of them together). 0, or -1 with err set (CUDA:
     * NCCL could not be loaded, naming where it looked). */
    int (*group_init)(lg_backend *const *bes, int n, lg_err *err);
    /* In place over the group: x = the sum over ranks of x, enqueued on the compute stream after
     * the ops before it (CUDA: ncclAllReduce, recorded by step graphs). Every rank calls it in the
     * same order with the same shape. x is contiguous (stride == cols) in the act dtype, F32 or
     * I32; a 16-bit sum is rounded once per addition, in rank order on the CPU. A backend outside
     * a group returns x unchanged. */
    int (*all_reduce)(lg_backend *be, lg_tensor x);
    /* Makes the calling thread one that may enqueue this backend's ops (CUDA: its device becomes
     * the thread's current device). A group's ranks are driven by one thread each; the memory
     * entry points (alloc .. sync, alloc_host, upload_async, upload_done, mem_info) work from any
     * thread without it. NULL: nothing to do. */
    int (*bind_thread)(lg_backend *be);
} lg_backend_i;

#define LG_LORA_MULTI_MAX 3
#define LG_NORM_MATMUL_MAX_T 1 /* rows model.c offers to norm_matmul (batch 1: the measured case) */
#define LG_GRAPH_KEY_MAX 64
#define LG_GRAPH_CACHE 32
#define LG_DOWNLOAD_IN_FLIGHT 4 /* download_async copies not yet waited for, at most */

struct lg_backend {
    lg_backend_i i;
    void *ctx;
    lg_dtype act_dtype;  /* activation / KV dtype this backend computes in */
    int n_threads;       /* CPU: worker threads */
    lg_tuning tune;      /* the LG_* switches, read from the environment at create (tuning.h) */
};

/* The backend's switches (tuning.h): how the model and the runtime read them. */
static inline const lg_tuning *lg_backend_tuning(const lg_backend *be) { return &be->tune; }

typedef struct lg_backend_opts {
    int n_threads;   /* CPU: 0 = number of online cores */
    int device;      /* CUDA: device ordinal */
    lg_dtype act_dtype_hint; /* CUDA: F16 or BF16; ignored by CPU */
} lg_backend_opts;

/* Factory: "cpu" or "cuda". A backend that was not built returns a clear error. */
int lg_backend_create(const char *name, const lg_backend_opts *opts, lg_backend **out, lg_err *err);
void lg_backend_free(lg_backend *be); /* NULL is a no-op */

int lg_backend_cpu_create(const lg_backend_opts *opts, lg_backend **out, lg_err *err);
#ifdef LG_HAVE_CUDA
int lg_backend_cuda_create(const lg_backend_opts *opts, lg_backend **out, lg_err *err);
#endif

#endif
