/*
 * backend_cpu.c — the CPU backend: the reference implementation of every op
 * in backend.h, multithreaded over a fork-join pool. Activations and the KV
 * cache are f32; weights stay in their stored dtype (f32/f16/bf16), widened
 * inside the matmul, or in their quantized blocks (takes_quant: every
 * lg_qtype), which the matmul reads with the kernels of cpu_quant.h for the
 * best instruction set this machine runs (picked once, at create; LG_CPU_ISA
 * forces one; the planar checkpoint layouts: cpu_ckptq.h) and the embedding
 * decodes a row at a time. "Device" memory is host memory
 * (256-byte aligned), upload/download are memcpy, and every op completes
 * before it returns, so sync is a no-op.
 *
 * This is the oracle for the CUDA kernels: keep each op a readable loop over
 * the math its comment in backend.h states; speed comes from the matmul
 * (cpu_matmul.c, cpu_qmatmul.c) and from splitting work across threads.
 */
#include "engine/backend/backend.h"
#include "engine/backend/cpu_ckptq.h"
#include "engine/backend/cpu_group.h"
#include "engine/backend/cpu_matmul.h"
#include "engine/backend/cpu_qmatmul.h"
#include "engine/backend/sampling.h"
#include "engine/base/threadpool.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct cpu_ctx {
    lg_threadpool *tp;
    int nt;
    float **panels;      /* [nt] matmul panels */
    int64_t panel_k;     /* capacity in K */
    float **scratch;     /* [nt] attention scratch */
    size_t scratch_n;    /* capacity in floats */
    int32_t *seq_of_tok; /* attention: sequence of each token of the step */
    int seq_of_tok_n;    /* capacity */
    float *kvf;          /* attention over an e4m3 cache: the step's pages of the layer, decoded to f32 */
    size_t kvf_n;        /* capacity in floats */
    int32_t *kvf_ids;    /* [kvf_ids_n] 0, 1, 2, ...: the decoded pages' ids */
    int kvf_ids_n;
    uint64_t down_issued, down_waited; /* download_async tickets */
    const lg_qkern *qk;  /* quantized-weight kernels for this machine's instruction set */
    lg_qmm_scratch qs;   /* the quantized matmul's activations */
    lg_ckptq_scratch cs; /* the checkpoint layouts' rounded activations (W8A8) */
    lg_cpu_group *group; /* tensor parallelism: the group and this backend's rank in it, or NULL */
    int rank;
} cpu_ctx;

#define CTX(be) ((cpu_ctx *)(be)->ctx)

static void *cpu_alloc(lg_backend *be, size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, 256, size ? size : 256) != 0) /* cudaMalloc-like alignment */
        return NULL;
    return p;
}
static void cpu_dealloc(lg_backend *be, void *p) { free(p); }
static int cpu_memcpy(lg_backend *be, void *dst, const void *src, size_t n)
{
    if (n)
        memmove(dst, src, n);
    return 0;
}
static int cpu_sync(lg_backend *be) { return 0; }

/* The copy is done when download_async returns; the tickets keep the contract's order checks. */
static int cpu_download_async(lg_backend *be, void *dst, const void *src, size_t n, uint64_t *ticket)
{
    cpu_ctx *c = CTX(be);
    if (!ticket || c->down_issued - c->down_waited >= LG_DOWNLOAD_IN_FLIGHT)
        return -1;
    cpu_memcpy(be, dst, src, n);
    *ticket = ++c->down_issued;
    return 0;
}

static int cpu_download_wait(lg_backend *be, uint64_t ticket)
{
    cpu_ctx *c = CTX(be);
    if (ticket != c->down_waited + 1 || ticket > c->down_issued)
        return -1;
    c->down_waited = ticket;
    return 0;
}

/* backend.h's `sample` through engine/backend/sampling.h's own functions, so the engine's device-sampling paths (its
 * decode bursts among them) run in CPU tests. Off by default (LG_CPU_DEVICE_SAMPLE=1 turns it on): without
 * it the engine samples the downloaded logits itself, by the same rules. */
static int cpu_sample(lg_backend *be, int32_t *out_ids, float *logits, int n, int V, const lg_sample_row *rows,
                      const int32_t *pen, lg_logprob_row *lp)
{
    (void)be;
    for (int i = 0; i < n; i++) {
        const lg_sample_row *r = &rows[i];
        float *row = logits + (size_t)i * V;
        for (int j = 0; j < r->pen_n; j++) { /* the host's order of float subtractions (lg_sample_row) */
            const int32_t tok = pen[2 * (r->pen_off + j)], count = pen[2 * (r->pen_off + j) + 1];
            row[tok] -= r->frequency;
            row[tok] -= r->presence;
            for (int k = 1; k < count; k++) row[tok] -= r->frequency;
        }
        lg_sampling_params sp;
        lg_sampling_params_default(&sp);
        sp.temperature = r->temperature;
        sp.top_k = r->top_k;
        sp.top_p = r->top_p;
        sp.min_p = r->min_p;
        lg_sampler *smp = lg_sampler_new(V, &sp);
        if (!smp)
            return -1;
        out_ids[i] = lg_sampler_sample_u(smp, row, (double)r->u);
        lg_sampler_free(smp);
        if (lp && r->logprobs)
            lg_logprobs(row, V, out_ids[i], r->top_logprobs, &lp[i]);
    }
    return 0;
}

/* backend.h's `mask_logits`, beside cpu_sample (on with it). */
static int cpu_mask_logits(lg_backend *be, float *logits, int n, int V, const lg_sample_row *rows,
                           const uint32_t *masks)
{
    (void)be;
    for (int i = 0; i < n; i++) {
        if (!rows[i].masked)
            continue;
        float *row = logits + (size_t)i * V;
        const uint32_t *m = masks + rows[i].mask_off;
        for (int t = 0; t < V; t++)
            if (!(m[t / 32] >> (t % 32) & 1u))
                row[t] = -INFINITY;
    }
    return 0;
}

static int grow_per_thread(float **arr, int nt, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    for (int i = 0; i < nt; i++) {
        free(arr[i]);
        arr[i] = NULL;
        if (posix_memalign((void **)&arr[i], 64, need * sizeof(float)) != 0)
            return -1;
    }
    *cap = need;
    return 0;
}

/* ---- embed ---------------------------------------------------------------- */
typedef struct {
    lg_tensor out, table;
    const int32_t *tok;
    lg_qdeq_fn deq; /* a quantized table's row decoder */
} embed_job;
static void embed_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    embed_job *j = arg;
    for (int64_t t = i0; t < i1; t++) {
        int32_t id = j->tok[t];
        float *o = (float *)j->out.data + t * j->out.stride;
        if (id < 0 || id >= j->table.rows) {
            memset(o, 0, (size_t)j->out.cols * 4);
            continue;
        }
        const char *row = (const char *)j->table.data + (size_t)id * lg_tensor_bytes(j->table, j->table.stride);
        if (lg_qtype_is_planar(j->table.q))
            lg_ckptq_row(j->table, id, o);
        else if (j->table.q != LG_QNONE)
            j->deq(row, o, j->out.cols);
        else
            lg_to_f32(o, row, j->table.dtype, (size_t)j->out.cols);
    }
}
static int cpu_embed(lg_backend *be, lg_tensor out, lg_tensor table, const int32_t *tok)
{
    if (out.dtype != LG_F32 || out.q != LG_QNONE || out.cols != table.cols)
        return -1;
    lg_qdeq_fn deq = NULL;
    if (lg_qtype_is_planar(table.q) && table.stride != table.cols)
        return -1;
    if (table.q != LG_QNONE && !lg_qtype_is_planar(table.q) &&
        (table.q >= LG_QTYPE_COUNT || table.cols % lg_qtype_get(table.q).block_elems ||
         !(deq = CTX(be)->qk->deq[table.q])))
        return -1;
    embed_job j = {out, table, tok, deq};
    lg_threadpool_for(CTX(be)->tp, out.rows, 16, embed_task, &j);
    return 0;
}

/* ---- add + rmsnorm ---------------------------------------------------------- */
typedef struct {
    lg_tensor resid, delta, w, out;
    float eps;
    const float *wf;
} norm_job;
static void norm_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    norm_job *j = arg;
    int64_t d = j->resid.cols;
    for (int64_t t = i0; t < i1; t++) {
        float *r = (float *)j->resid.data + t * j->resid.stride;
        if (j->delta.data) {
            const float *dl = (const float *)j->delta.data + t * j->delta.stride;
            for (int64_t k = 0; k < d; k++) r[k] += dl[k];
        }
        double ss = 0;
        for (int64_t k = 0; k < d; k++) ss += (double)r[k] * r[k];
        float inv = (float)(1.0 / sqrt(ss / (double)d + (double)j->eps));
        float *o = (float *)j->out.data + t * j->out.stride;
        for (int64_t k = 0; k < d; k++) o[k] = r[k] * inv * j->wf[k];
    }
}
static int cpu_add_rmsnorm(lg_backend *be, lg_tensor resid, lg_tensor delta, lg_tensor w, lg_tensor out, float eps)
{
    if (resid.dtype != LG_F32 || out.dtype != LG_F32 || (delta.data && delta.dtype != LG_F32) || w.q != LG_QNONE)
        return -1;
    float *wf = NULL;
    if (w.dtype != LG_F32) {
        wf = malloc((size_t)w.cols * 4);
        if (!wf)
            return -1;
        lg_to_f32(wf, w.data, w.dtype, (size_t)w.cols);
    }
    norm_job j = {resid, delta, w, out, eps, wf ? wf : (const float *)w.data};
    lg_threadpool_for(CTX(be)->tp, resid.rows, 8, norm_task, &j);
    free(wf);
    return 0;
}

/* ---- matmul ------------------------------------------------------------------ */
static int cpu_matmul_op(lg_backend *be, lg_tensor y, lg_tensor x, lg_tensor W, lg_tensor bias, bool accumulate)
{
    cpu_ctx *c = CTX(be);
    if (y.dtype != LG_F32 || x.dtype != LG_F32 || x.cols != W.cols || y.cols != W.rows || y.rows != x.rows ||
        y.q != LG_QNONE || x.q != LG_QNONE || bias.q != LG_QNONE)
        return -1;
    if (W.q != LG_QNONE && !lg_qtype_is_planar(W.q) &&
        (W.q >= LG_QTYPE_COUNT || W.stride % lg_qtype_get(W.q).block_elems))
        return -1;
    size_t cap = (size_t)c->panel_k * 4;
    if (grow_per_thread(c->panels, c->nt, &cap, (size_t)W.cols * 4) != 0)
        return -1;
    c->panel_k = (int64_t)(cap / 4);
    float *bf = NULL;
    const float *b = NULL;
    if (bias.data) {
        if (bias.dtype == LG_F32) {
            b = bias.data;
        } else {
            bf = malloc((size_t)W.rows * 4);
            if (!bf)
                return -1;
            lg_to_f32(bf, bias.data, bias.dtype, (size_t)W.rows);
            b = bf;
        }
    }
    int rc = lg_qtype_is_planar(W.q)
                 ? lg_cpu_ckptq_matmul(c->tp, c->panels, &c->cs, y.data, y.stride, x.data, x.stride, W, b, x.rows,
                                       accumulate)
             : W.q != LG_QNONE
                 ? lg_cpu_qmatmul(c->tp, c->qk, &c->qs, y.data, y.stride, x.data, x.stride, W.data,
                                  lg_tensor_bytes(W, W.stride), W.q, b, x.rows, W.rows, W.cols, accumulate)
                 : lg_cpu_matmul(c->tp, c->panels, y.data, y.stride, x.data, x.stride, W.data, W.dtype, W.stride, b,
                                 x.rows, W.rows, W.cols, accumulate);
    free(bf);
    return rc;
}

/* Every layout: cpu_quant.h has a dot and a row decoder for each of ggml's, cpu_ckptq.h the
 * matmul and row decoder of the planar checkpoint layouts. */
static bool cpu_takes_quant(lg_backend *be, lg_qtype q)
{
    (void)be;
    return lg_qtype_is_ggml(q) || lg_qtype_is_planar(q);
}

/* ---- rope --------------------------------------------------------------------- */
typedef struct {
    lg_tensor q, k;
    const int32_t *pos;
    const float *inv_freq;
    int nh, nkv, hd;
} rope_job;
static void rope_rows(float *x, int nheads, int hd, const float *cs, const float *sn)
{
    int half = hd / 2;
    for (int h = 0; h < nheads; h++) {
        float *v = x + h * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}
static void rope_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    rope_job *j = arg;
    int half = j->hd / 2;
    float cs[512], sn[512];
    for (int64_t t = i0; t < i1; t++) {
        double p = (double)j->pos[t];
        for (int i = 0; i < half; i++) {
            double ang = p * (double)j->inv_freq[i];
            cs[i] = (float)cos(ang);
            sn[i] = (float)sin(ang);
        }
        rope_rows((float *)j->q.data + t * j->q.stride, j->nh, j->hd, cs, sn);
        rope_rows((float *)j->k.data + t * j->k.stride, j->nkv, j->hd, cs, sn);
    }
}
static int cpu_rope(lg_backend *be, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq,
                    int n_heads, int n_kv_heads, int head_dim)
{
    if (q.dtype != LG_F32 || k.dtype != LG_F32 || head_dim > 1024 || head_dim % 2)
        return -1;
    rope_job j = {q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim};
    lg_threadpool_for(CTX(be)->tp, q.rows, 4, rope_task, &j);
    return 0;
}

/* ---- kv write ----------------------------------------------------------------
 * The cache is f32 (a byte copy) or, with `--kv-cache-dtype fp8`, OCP e4m3:
 * each element stored as lg_f32_to_e4m3(x / scale) with the layer's k_scale
 * or v_scale (backend.h lg_kv_view), read back by attention as e4m3 * scale. */
static inline char *kv_ptr(const lg_kv_view *kv, int32_t slot, size_t off)
{
    int32_t page = slot / kv->page_tokens, s = slot % kv->page_tokens;
    return (char *)kv->base + (size_t)page * kv->page_bytes + off +
           (size_t)s * (size_t)(kv->n_kv_heads * kv->head_dim) * lg_dtype_size(kv->dtype);
}
static int cpu_kv_write(lg_backend *be, lg_kv_view kv, lg_tensor k, lg_tensor v, const int32_t *slot, int n_tokens)
{
    (void)be;
    if ((kv.dtype != LG_F32 && kv.dtype != LG_F8E4M3) || k.dtype != LG_F32 || v.dtype != LG_F32)
        return -1;
    const int n = kv.n_kv_heads * kv.head_dim;
    const float ks = lg_kv_kscale(&kv), vs = lg_kv_vscale(&kv);
    for (int t = 0; t < n_tokens; t++) {
        if (slot[t] < 0)
            continue;
        const float *kr = (const float *)k.data + (size_t)t * k.stride, *vr = (const float *)v.data + (size_t)t * v.stride;
        char *kd = kv_ptr(&kv, slot[t], kv.k_off), *vd = kv_ptr(&kv, slot[t], kv.v_off);
        if (kv.dtype == LG_F32) {
            memcpy(kd, kr, (size_t)n * 4);
            memcpy(vd, vr, (size_t)n * 4);
            continue;
        }
        for (int e = 0; e < n; e++) {
            ((uint8_t *)kd)[e] = lg_f32_to_e4m3(kr[e] / ks);
            ((uint8_t *)vd)[e] = lg_f32_to_e4m3(vr[e] / vs);
        }
    }
    return 0;
}

/* lg_e4m3_to_f32 of every code (filled once, at the first backend's creation) */
static float e4m3_lut[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_lut_fill(void)
{
    for (int i = 0; i < 256; i++) e4m3_lut[i] = lg_e4m3_to_f32((uint8_t)i);
}

/* Decoding an e4m3 cache for attention: page entry i of the step (page_ids[i]) -> f32 page i of dst, this
 * layer's K block then its V block, each element e4m3 x its scale (one f32 rounding). */
typedef struct {
    lg_kv_view kv;
    const int32_t *page_ids;
    float *dst;
} kvf_job;
static void kvf_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    (void)tid;
    const kvf_job *j = arg;
    const size_t n = (size_t)j->kv.page_tokens * (size_t)(j->kv.n_kv_heads * j->kv.head_dim);
    const float ks = lg_kv_kscale(&j->kv), vs = lg_kv_vscale(&j->kv);
    for (int64_t i = i0; i < i1; i++) {
        const uint8_t *pg = (const uint8_t *)j->kv.base + (size_t)j->page_ids[i] * j->kv.page_bytes;
        const uint8_t *k = pg + j->kv.k_off, *v = pg + j->kv.v_off;
        float *d = j->dst + (size_t)i * 2 * n;
        for (size_t e = 0; e < n; e++) d[e] = e4m3_lut[k[e]] * ks;
        for (size_t e = 0; e < n; e++) d[n + e] = e4m3_lut[v[e]] * vs;
    }
}

/* ---- attention ---------------------------------------------------------------
 * For token t of sequence s at position p, query head h (kv head h / group):
 *   out[t, h] = sum_{p - W < j <= p} softmax_j(cap(scale * q[t,h] . K_s[j, kvh])) V_s[j, kvh]
 * with W = kv.window (infinite when 0) and cap(x) = c tanh(x / c) for c = kv.softcap > 0 (else x).
 * K_s[j] is slot j % page_tokens of page page_ids[page_indptr[s] + j / page_tokens].
 * Work item = (token, query head), so a decode step's few tokens still give
 * every thread work (GQA's K/V rows are read once per query head; they sit
 * in cache). The q.k sums are cpu_matmul.c's vectorized dot. An e4m3 cache:
 * the layer's blocks of the step's pages are decoded first (e4m3 x scale, one
 * f32 rounding; each page entry once, whatever the tokens and heads reading
 * it) into f32 pages numbered in page-table order, and the f32 math runs on
 * those. */
typedef struct {
    lg_tensor out, q;
    lg_kv_view kv;
    const lg_step_meta *m;
    const int32_t *seq_of_tok;
    int nh, group;
    float scale;
    float **scratch;
} attn_job;

static void attn_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    attn_job *j = arg;
    const lg_kv_view *kv = &j->kv;
    const int hd = kv->head_dim;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t t = it / j->nh;
        const int h = (int)(it % j->nh), kvh = h / j->group;
        const int s = j->seq_of_tok[t];
        const int n_ctx = j->m->pos[t] + 1;
        /* a sliding-window layer: keys [k0, n_ctx) */
        const int k0 = kv->window > 0 && n_ctx > kv->window ? n_ctx - kv->window : 0;
        const float cap = kv->softcap;
        const int32_t *pages = j->m->page_ids + j->m->page_indptr[s];
        float *sc = j->scratch[tid]; /* [n_ctx] scores, from k0 */
        const float *qr = (const float *)j->q.data + t * j->q.stride + (size_t)h * hd;
        float mx = -INFINITY;
        for (int pos = k0; pos < n_ctx; pos++) {
            const int32_t slot = pages[pos / kv->page_tokens] * kv->page_tokens + pos % kv->page_tokens;
            float d = lg_cpu_dot_f32(qr, (const float *)kv_ptr(kv, slot, kv->k_off) + (size_t)kvh * hd, hd) * j->scale;
            if (cap > 0)
                d = cap * tanhf(d / cap);
            sc[pos] = d;
            if (d > mx)
                mx = d;
        }
        double ssum = 0;
        for (int pos = k0; pos < n_ctx; pos++) {
            sc[pos] = expf(sc[pos] - mx);
            ssum += sc[pos];
        }
        float *o = (float *)j->out.data + t * j->out.stride + (size_t)h * hd;
        memset(o, 0, (size_t)hd * 4);
        int pos = k0;
        for (; pos + 4 <= n_ctx; pos += 4) { /* four V rows a pass over o */
            const float *v4[4];
            for (int u = 0; u < 4; u++) {
                const int p = pos + u;
                const int32_t slot = pages[p / kv->page_tokens] * kv->page_tokens + p % kv->page_tokens;
                v4[u] = (const float *)kv_ptr(kv, slot, kv->v_off) + (size_t)kvh * hd;
            }
            const float w0 = sc[pos], w1 = sc[pos + 1], w2 = sc[pos + 2], w3 = sc[pos + 3];
            for (int e = 0; e < hd; e++) o[e] += w0 * v4[0][e] + w1 * v4[1][e] + w2 * v4[2][e] + w3 * v4[3][e];
        }
        for (; pos < n_ctx; pos++) {
            const int32_t slot = pages[pos / kv->page_tokens] * kv->page_tokens + pos % kv->page_tokens;
            const float *vr = (const float *)kv_ptr(kv, slot, kv->v_off) + (size_t)kvh * hd;
            const float w = sc[pos];
            for (int e = 0; e < hd; e++) o[e] += w * vr[e];
        }
        const float inv = 1.0f / (float)ssum;
        for (int e = 0; e < hd; e++) o[e] *= inv;
    }
}
static int cpu_attention(lg_backend *be, lg_tensor out, lg_tensor q, lg_kv_view kv, const lg_step_meta *m,
                         int n_heads, float scale)
{
    cpu_ctx *c = CTX(be);
    if ((kv.dtype != LG_F32 && kv.dtype != LG_F8E4M3) || q.dtype != LG_F32 || out.dtype != LG_F32 ||
        n_heads % kv.n_kv_heads)
        return -1;
    int group = n_heads / kv.n_kv_heads;
    if (grow_per_thread(c->scratch, c->nt, &c->scratch_n, (size_t)(m->max_kv_len + 1)) != 0)
        return -1;
    lg_step_meta mf;
    if (kv.dtype == LG_F8E4M3) { /* the step's pages of this layer as f32 pages 0, 1, 2, ... */
        const int n_pg = m->page_indptr[m->n_seqs];
        const size_t n = (size_t)kv.page_tokens * (size_t)(kv.n_kv_heads * kv.head_dim), need = (size_t)n_pg * 2 * n;
        if (need > c->kvf_n) {
            float *p = realloc(c->kvf, need * sizeof(float));
            if (!p)
                return -1;
            c->kvf = p;
            c->kvf_n = need;
        }
        if (n_pg > c->kvf_ids_n) {
            int32_t *p = realloc(c->kvf_ids, (size_t)n_pg * sizeof(int32_t));
            if (!p)
                return -1;
            for (int i = c->kvf_ids_n; i < n_pg; i++) p[i] = i;
            c->kvf_ids = p;
            c->kvf_ids_n = n_pg;
        }
        kvf_job kj = {kv, m->page_ids, c->kvf};
        lg_threadpool_for(c->tp, n_pg, 1, kvf_task, &kj);
        mf = *m;
        mf.page_ids = c->kvf_ids;
        m = &mf;
        kv.base = c->kvf;
        kv.page_bytes = 2 * n * sizeof(float);
        kv.k_off = 0;
        kv.v_off = n * sizeof(float);
        kv.dtype = LG_F32;
    }
    if (m->n_tokens > c->seq_of_tok_n) { /* grows to the largest step, then stays */
        int32_t *p = realloc(c->seq_of_tok, (size_t)m->n_tokens * sizeof(int32_t));
        if (!p)
            return -1;
        c->seq_of_tok = p;
        c->seq_of_tok_n = m->n_tokens;
    }
    int32_t *seq_of_tok = c->seq_of_tok;
    for (int s = 0; s < m->n_seqs; s++)
        for (int t = m->q_indptr[s]; t < m->q_indptr[s + 1]; t++) seq_of_tok[t] = s;
    attn_job j = {out, q, kv, m, seq_of_tok, n_heads, group, scale, c->scratch};
    lg_threadpool_for(c->tp, (int64_t)m->n_tokens * n_heads, 1, attn_task, &j);
    return 0;
}

/* ---- silu * mul ---------------------------------------------------------------- */
typedef struct {
    lg_tensor out, gu;
} silu_job;
static void silu_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    silu_job *j = arg;
    int64_t F = j->out.cols;
    for (int64_t t = i0; t < i1; t++) {
        const float *g = (const float *)j->gu.data + t * j->gu.stride, *u = g + F;
        float *o = (float *)j->out.data + t * j->out.stride;
        for (int64_t k = 0; k < F; k++) o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
    }
}
static int cpu_silu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up)
{
    if (out.dtype != LG_F32 || gate_up.dtype != LG_F32 || gate_up.cols != 2 * out.cols)
        return -1;
    silu_job j = {out, gate_up};
    lg_threadpool_for(CTX(be)->tp, out.rows, 4, silu_task, &j);
    return 0;
}

/* ---- gelu(tanh) * mul, per-head rmsnorm, scale / soft-cap ------------------------ */
static void gelu_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    silu_job *j = arg;
    int64_t F = j->out.cols;
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t t = i0; t < i1; t++) {
        const float *g = (const float *)j->gu.data + t * j->gu.stride, *u = g + F;
        float *o = (float *)j->out.data + t * j->out.stride;
        for (int64_t k = 0; k < F; k++) {
            const float x = g[k];
            o[k] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[k];
        }
    }
}
static int cpu_gelu_mul(lg_backend *be, lg_tensor out, lg_tensor gate_up)
{
    if (out.dtype != LG_F32 || gate_up.dtype != LG_F32 || gate_up.cols != 2 * out.cols)
        return -1;
    silu_job j = {out, gate_up};
    lg_threadpool_for(CTX(be)->tp, out.rows, 4, gelu_task, &j);
    return 0;
}

typedef struct {
    lg_tensor x;
    const float *w;
    int nh, hd;
    float eps;
} head_norm_job;
static void head_norm_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    head_norm_job *j = arg;
    for (int64_t t = i0; t < i1; t++)
        for (int h = 0; h < j->nh; h++) {
            float *r = (float *)j->x.data + t * j->x.stride + (size_t)h * j->hd;
            double ss = 0;
            for (int k = 0; k < j->hd; k++) ss += (double)r[k] * r[k];
            float inv = (float)(1.0 / sqrt(ss / (double)j->hd + (double)j->eps));
            for (int k = 0; k < j->hd; k++) r[k] = r[k] * inv * j->w[k];
        }
}
static int cpu_head_rmsnorm(lg_backend *be, lg_tensor x, lg_tensor w, int n_heads, int head_dim, float eps)
{
    if (x.dtype != LG_F32 || w.dtype != LG_F32 || w.cols != head_dim || x.cols != (int64_t)n_heads * head_dim)
        return -1;
    head_norm_job j = {x, w.data, n_heads, head_dim, eps};
    lg_threadpool_for(CTX(be)->tp, x.rows, 8, head_norm_task, &j);
    return 0;
}

static int cpu_scale_cap(lg_backend *be, lg_tensor x, float s, float cap)
{
    if (x.dtype != LG_F32)
        return -1;
    for (int64_t t = 0; t < x.rows; t++) {
        float *r = (float *)x.data + t * x.stride;
        if (cap > 0)
            for (int64_t k = 0; k < x.cols; k++) r[k] = cap * tanhf(s * r[k] / cap);
        else
            for (int64_t k = 0; k < x.cols; k++) r[k] *= s;
    }
    return 0;
}

static int cpu_get_rows(lg_backend *be, lg_tensor out, lg_tensor x, const int32_t *rows, int n)
{
    size_t es = lg_dtype_size(x.dtype);
    if (out.dtype != x.dtype || out.cols != x.cols || out.q != LG_QNONE || x.q != LG_QNONE)
        return -1;
    for (int i = 0; i < n; i++)
        memcpy((char *)out.data + (size_t)i * out.stride * es, (const char *)x.data + (size_t)rows[i] * x.stride * es,
               (size_t)x.cols * es);
    return 0;
}

static int cpu_convert(lg_backend *be, lg_tensor dst, lg_tensor src)
{
    if (dst.rows != src.rows || dst.cols != src.cols || dst.q != LG_QNONE || src.q != LG_QNONE)
        return -1;
    float *tmp = malloc((size_t)src.cols * 4);
    if (!tmp)
        return -1;
    for (int64_t r = 0; r < src.rows; r++) {
        lg_to_f32(tmp, (const char *)src.data + (size_t)r * src.stride * lg_dtype_size(src.dtype), src.dtype,
                  (size_t)src.cols);
        lg_from_f32((char *)dst.data + (size_t)r * dst.stride * lg_dtype_size(dst.dtype), dst.dtype, tmp,
                    (size_t)src.cols);
    }
    free(tmp);
    return 0;
}

/* ---- segmented LoRA (the reference semantics for the CUDA SGMV kernels) ---------
 * Work item = (segment, block of 4 output columns / 4 ranks); each segment
 * uses its own adapter's rank, A and B are read in place (pool pages). */
typedef struct {
    lg_tensor y, tmp, x;
    const lg_lora_meta *lm;
    int slot;
    float **panels;
} lora_job;

/* Segment s's weights at the job's slot and its token rows [*r0, *r1);
 * NULL when the segment has no LoRA there or no tokens. */
static const lg_lora_w *seg_weights(const lora_job *j, int64_t s, int *r0, int *r1)
{
    const lg_lora_w *w = &j->lm->w[s * j->lm->n_slots + j->slot];
    *r0 = j->lm->seg_indptr[s];
    *r1 = j->lm->seg_indptr[s + 1];
    return w->rank > 0 && *r1 > *r0 ? w : NULL;
}

static void shrink_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    lora_job *j = arg;
    for (int64_t s = i0; s < i1; s++) {
        int r0, r1;
        const lg_lora_w *w = seg_weights(j, s, &r0, &r1);
        if (!w)
            continue;
        lg_tensor x = lg_tensor_rows(j->x, r0, r1 - r0), t = lg_tensor_rows(j->tmp, r0, r1 - r0);
        /* tmp[rows, 0:rank] = x @ A^T ; single-threaded inside a segment */
        lg_cpu_matmul(NULL, &j->panels[tid], t.data, t.stride, x.data, x.stride, w->A, LG_F32, x.cols, NULL,
                      r1 - r0, w->rank, x.cols, false);
    }
}

static void expand_task(void *arg, int tid, int64_t i0, int64_t i1)
{
    lora_job *j = arg;
    for (int64_t s = i0; s < i1; s++) {
        int r0, r1;
        const lg_lora_w *w = seg_weights(j, s, &r0, &r1);
        if (!w)
            continue;
        int64_t out = j->y.cols, rank = w->rank;
        const float *B = w->B; /* [out, rank] */
        for (int r = r0; r < r1; r++) {
            const float *tr = (const float *)j->tmp.data + (size_t)r * j->tmp.stride;
            float *yr = (float *)j->y.data + (size_t)r * j->y.stride;
            for (int64_t o = 0; o < out; o++) {
                const float *br = B + o * rank;
                float acc = 0;
                for (int64_t k = 0; k < rank; k++) acc += tr[k] * br[k];
                yr[o] += w->scale * acc;
            }
        }
    }
}

static int lora_check(lg_backend *be, lg_tensor a, lg_tensor b, const lg_lora_meta *lm, int slot)
{
    if (a.dtype != LG_F32 || b.dtype != LG_F32 || slot < 0 || slot >= lm->n_slots)
        return -1;
    for (int s = 0; s < lm->n_segs; s++)
        if (lm->w[s * lm->n_slots + slot].rank > lm->max_rank)
            return -1;
    return 0;
}

static int cpu_lora_shrink(lg_backend *be, lg_tensor tmp, lg_tensor x, const lg_lora_meta *lm, int slot)
{
    cpu_ctx *c = CTX(be);
    if (lora_check(be, tmp, x, lm, slot) != 0 || tmp.cols < lm->max_rank)
        return -1;
    size_t cap = (size_t)c->panel_k * 4;
    if (grow_per_thread(c->panels, c->nt, &cap, (size_t)x.cols * 4) != 0)
        return -1;
    c->panel_k = (int64_t)(cap / 4);
    lora_job j = {.tmp = tmp, .x = x, .lm = lm, .slot = slot, .panels = c->panels};
    lg_threadpool_for(c->tp, lm->n_segs, 1, shrink_task, &j);
    return 0;
}

static int cpu_lora_expand(lg_backend *be, lg_tensor y, lg_tensor tmp, const lg_lora_meta *lm, int slot)
{
    if (lora_check(be, y, tmp, lm, slot) != 0)
        return -1;
    lora_job j = {.y = y, .tmp = tmp, .lm = lm, .slot = slot};
    lg_threadpool_for(CTX(be)->tp, lm->n_segs, 1, expand_task, &j);
    return 0;
}

/* backend.h group_init: CPU backends of one process, each driven by its own thread (cpu_group.h). */
static int cpu_group_init(lg_backend *const *bes, int n, lg_err *err)
{
    for (int r = 0; r < n; r++) {
        if (!bes[r] || strcmp(bes[r]->i.name, "cpu") != 0)
            return lg_fail(err, "cpu group: rank %d is not a CPU backend", r);
        if (CTX(bes[r])->group)
            return lg_fail(err, "cpu group: rank %d's backend is in a group already", r);
        for (int k = 0; k < r; k++)
            if (bes[k] == bes[r])
                return lg_fail(err, "cpu group: ranks %d and %d are the same backend", k, r);
    }
    lg_cpu_group *g;
    if (lg_cpu_group_new(n, &g, err) != 0)
        return -1;
    for (int r = 0; r < n; r++) {
        CTX(bes[r])->group = g;
        CTX(bes[r])->rank = r;
    }
    return 0;
}

static int cpu_all_reduce(lg_backend *be, lg_tensor x)
{
    cpu_ctx *c = CTX(be);
    return c->group ? lg_cpu_group_all_reduce(c->group, c->rank, x) : 0;
}

static void cpu_free(lg_backend *be)
{
    cpu_ctx *c = CTX(be);
    if (c) {
        lg_cpu_group_release(c->group);
        lg_threadpool_free(c->tp);
        for (int i = 0; i < c->nt; i++) {
            free(c->panels[i]);
            free(c->scratch[i]);
        }
        free(c->panels);
        free(c->scratch);
        free(c->seq_of_tok);
        free(c->kvf);
        free(c->kvf_ids);
        free(c->qs.xq);
        free(c->cs.xr);
        free(c);
    }
    free(be);
}

int lg_backend_cpu_create(const lg_backend_opts *opts, lg_backend **out, lg_err *err)
{
    int nt = opts && opts->n_threads > 0 ? opts->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1)
        nt = 1;
    pthread_once(&e4m3_once, e4m3_lut_fill);
    lg_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return lg_fail(err, "out of memory creating the CPU backend");
    }
    c->tp = lg_threadpool_new(nt);
    c->nt = lg_threadpool_size(c->tp);
    c->panels = calloc((size_t)c->nt, sizeof(float *));
    c->scratch = calloc((size_t)c->nt, sizeof(float *));
    be->ctx = c;
    be->act_dtype = LG_F32;
    be->n_threads = c->nt;
    lg_tuning_read(&be->tune);
    static const char *const isa[4] = {NULL, "c", "avx2", "avx512vnni"};
    c->qk = be->tune.cpu_isa > 0 && be->tune.cpu_isa < 4 ? lg_qkern_by_name(isa[be->tune.cpu_isa]) : NULL;
    if (!c->qk)
        c->qk = lg_qkern_best();
    be->i = (lg_backend_i){
        .name = "cpu",
        .free = cpu_free,
        .alloc = cpu_alloc,
        .dealloc = cpu_dealloc,
        .upload = cpu_memcpy,
        .download = cpu_memcpy,
        .copy = cpu_memcpy,
        .sync = cpu_sync,
        .alloc_host = cpu_alloc,     /* host memory is the device's: nothing to lock */
        .free_host = cpu_dealloc,
        .download_async = cpu_download_async,
        .download_wait = cpu_download_wait,
        .embed = cpu_embed,
        .add_rmsnorm = cpu_add_rmsnorm,
        .matmul = cpu_matmul_op,
        .rope = cpu_rope,
        .kv_write = cpu_kv_write,
        .attention = cpu_attention,
        .silu_mul = cpu_silu_mul,
        .gelu_mul = cpu_gelu_mul,
        .head_rmsnorm = cpu_head_rmsnorm,
        .scale_cap = cpu_scale_cap,
        .get_rows = cpu_get_rows,
        .convert = cpu_convert,
        .lora_shrink = cpu_lora_shrink,
        .lora_expand = cpu_lora_expand,
        .takes_quant = cpu_takes_quant,
        .group_init = cpu_group_init,
        .all_reduce = cpu_all_reduce,
    };
    if (be->tune.cpu_device_sample) { /* the device-sampling paths without a GPU (tests) */
        be->i.sample = cpu_sample;
        be->i.mask_logits = cpu_mask_logits;
    }
    *out = be;
    return 0;
}

int lg_backend_create(const char *name, const lg_backend_opts *opts, lg_backend **out, lg_err *err)
{
    if (!strcmp(name, "cpu"))
        return lg_backend_cpu_create(opts, out, err);
    if (!strcmp(name, "cuda")) {
#ifdef LG_HAVE_CUDA
        return lg_backend_cuda_create(opts, out, err);
#else
        return lg_fail(err, "backend 'cuda' is not built into this binary (configure on a machine with nvcc)");
#endif
    }
    return lg_fail(err, "unknown backend '%s' (expected cpu or cuda)", name);
}

void lg_backend_free(lg_backend *be)
{
    if (be)
        be->i.free(be);
}
