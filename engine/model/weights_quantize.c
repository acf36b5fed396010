/*
 * weights_quantize.c — `--quantization fp8|int4`: a 16-bit (or f32, or
 * dummy) model's linear-layer weights quantized at load into backend.h's
 * planar layouts, so a checkpoint without a quantized release can be served
 * (and benchmarked) in FP8 or INT4.
 *
 *   fp8   LG_QF8_A8: per-channel weight scales d = amax(row) / 448 and
 *         dynamic per-token e4m3 activations (vLLM's `--quantization fp8`)
 *   int4  LG_QI4: round-to-nearest (RTN: no calibration data, no GPTQ/AWQ
 *         error compensation, so a little worse than a calibrated
 *         checkpoint), asymmetric, groups of 128 along K (W4A16)
 * The codec is quant_planar.c's lg_quantize_planar. Quantized: every
 * 2-D float tensor named model.layers.N.self_attn.{q,k,v,o,qkv}_proj.weight
 * or model.layers.N.mlp.{gate,up,down,gate_up}_proj.weight; embeddings,
 * lm_head, norms and biases keep their dtype. A model whose linear weights
 * are already quantized (a GGUF file's blocks, a quantized checkpoint) is
 * refused rather than quantized twice.
 *
 * Memory: each tensor's 16-bit copy is replaced by its quantized buffer (a
 * heap buffer of the weights is freed; a file mapping's or the dummy pool's
 * pages stay until the weights are freed). Tensors are quantized in
 * parallel, one worker a core taking the next tensor; the first failure
 * stops them and is reported.
 */
#include "engine/model/quant.h"
#include "engine/model/weights.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool lg_weights_is_linear(const char *name)
{
    static const char *const S[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
                                    ".self_attn.o_proj.weight", ".self_attn.qkv_proj.weight", ".mlp.gate_proj.weight",
                                    ".mlp.up_proj.weight", ".mlp.down_proj.weight", ".mlp.gate_up_proj.weight", NULL};
    if (strncmp(name, "model.layers.", 13))
        return false;
    size_t n = strlen(name);
    for (int i = 0; S[i]; i++) {
        size_t k = strlen(S[i]);
        if (n > k && !strcmp(name + n - k, S[i]))
            return true;
    }
    return false;
}

/* Tensors are independent: fn(arg) on one worker a core (at most 32, the caller one of them), each
 * taking the next tensor under the job's mutex until none is left. */
static void run_workers(void *(*fn)(void *), void *arg)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int nt = ncpu < 1 ? 1 : ncpu > 32 ? 32 : (int)ncpu;
    pthread_t th[32];
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, fn, arg))
            break; /* fewer workers is fine */
    fn(arg);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

/* The quantized tensors buf[k] (NULL: a worker ran out of memory) become w's tensors idx[k], owned by w; the
 * config then names the scheme (quant_method fp8 or int4-rtn, quant_desc desc). */
static int adopt(lg_weights *w, lg_qtype q, const int *idx, void **buf, const size_t *nb, int n, const char *desc,
                 lg_err *err)
{
    for (int k = 0; k < n; k++) {
        if (!buf[k])
            return lg_fail(err, "out of memory quantizing %s", lg_weights_at(w, idx[k])->name);
        if (lg_weights_set_quant(w, idx[k], q, buf[k], nb[k], buf[k], err))
            return -1;
        buf[k] = NULL; /* owned by w */
    }
    lg_model_config *c = lg_weights_config_mut(w);
    snprintf(c->quant_method, sizeof c->quant_method, "%s", q == LG_QI4 ? "int4-rtn" : "fp8");
    snprintf(c->quant_desc, sizeof c->quant_desc, "%s", desc);
    return 0;
}

static void free_results(int *idx, void **buf, size_t *nb, int n)
{
    for (int k = 0; buf && k < n; k++)
        free(buf[k]);
    free(idx);
    free(buf);
    free(nb);
}

typedef struct qjob {
    lg_weights *w;
    lg_qtype q;
    int *idx;     /* [n] tensor indices to quantize */
    void **buf;   /* [n] results */
    size_t *nb;   /* [n] their sizes */
    int n, next;  /* next: the next index to take (under mu) */
    pthread_mutex_t mu;
    lg_err err;   /* the first failure */
    bool failed;
} qjob;

static void *qworker(void *arg)
{
    qjob *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int k = j->failed ? j->n : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k >= j->n)
            return NULL;
        const lg_wtensor *t = lg_weights_at(j->w, j->idx[k]);
        lg_err e = {{0}};
        if (lg_quantize_planar(j->q, t->data, t->dtype, t->shape[0], t->shape[1], &j->buf[k], &j->nb[k], &e)) {
            pthread_mutex_lock(&j->mu);
            if (!j->failed) {
                j->failed = true;
                j->err = e;
                lg_err_prefix(&j->err, "%s", t->name);
            }
            pthread_mutex_unlock(&j->mu);
        }
    }
}

int lg_weights_quantize(lg_weights *w, lg_qtype q, lg_err *err)
{
    if (q != LG_QF8_A8 && q != LG_QI4)
        return lg_fail(err, "layout %s, expected fp8 (F8_A8) or int4 (I4)", lg_qtype_get(q).name);
    lg_model_config *c = lg_weights_config_mut(w);
    /* a GGUF file's blocks expanded at load (--dequant-dtype) are 16-bit weights again (the tensor check below
     * refuses blocks that were kept); a quantized checkpoint is refused whatever was expanded */
    if (c->quant_method[0] && strcmp(c->quant_method, "none") && strcmp(c->quant_method, "gguf"))
        return lg_fail(err, "the model is already quantized (%s); drop --quantization", c->quant_desc);
    const int n_all = lg_weights_count(w);
    qjob j = {.w = w, .q = q, .idx = calloc((size_t)n_all + 1, sizeof(int)),
              .buf = calloc((size_t)n_all + 1, sizeof(void *)), .nb = calloc((size_t)n_all + 1, sizeof(size_t))};
    int rc = -1;
    if (!j.idx || !j.buf || !j.nb) {
        lg_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_all; i++) {
        const lg_wtensor *t = lg_weights_at(w, i);
        if (!lg_weights_is_linear(t->name))
            continue;
        if (t->q != LG_QNONE) {
            lg_fail(err, "tensor %s is already quantized (%s): drop --quantization, or expand a GGUF file's blocks with --dequant-dtype first", t->name, lg_qtype_get(t->q).name);
            goto done;
        }
        if (t->n_dims != 2) {
            lg_fail(err, "tensor %s has rank %d, expected 2", t->name, t->n_dims);
            goto done;
        }
        j.idx[j.n++] = i;
    }
    if (j.n == 0) {
        lg_fail(err, "the model has no linear-layer weights to quantize");
        goto done;
    }
    pthread_mutex_init(&j.mu, NULL);
    run_workers(qworker, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.failed) {
        *err = j.err;
        goto done;
    }
    rc = adopt(w, q, j.idx, j.buf, j.nb, j.n,
               q == LG_QI4 ? "int4 (--quantization: RTN asymmetric g128, W4A16)"
                           : "fp8 (--quantization: W8A8 per-channel, dynamic per-token)",
               err);
done:
    free_results(j.idx, j.buf, j.nb, j.n);
    return rc;
}

/* ---- dummy weights made quantized ---------------------------------------------------------- */

typedef struct djob {
    lg_weights *w;
    lg_qtype q;
    uint64_t seed;
    int *idx, n, next;
    void **buf;
    size_t *nb;
    uint8_t codes[256]; /* F8: e4m3 codes of ~N(0, 64) */
    pthread_mutex_t mu;
} djob;

static uint64_t dsplit(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void *dworker(void *arg)
{
    djob *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int k = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k >= j->n)
            return NULL;
        const lg_wtensor *t = lg_weights_at(j->w, j->idx[k]);
        const int64_t rows = t->shape[0], cols = t->shape[1], nb = (cols + 127) / 128;
        const size_t bytes = lg_planar_bytes(j->q, rows, cols);
        uint8_t *b = malloc(bytes);
        if (!b)
            continue; /* reported by the caller (buf NULL) */
        lg_qplanes p = lg_qplanes_of(lg_tensor_quant(b, j->q, rows, cols));
        uint64_t x = j->seed ^ (0x9e37ull * (uint64_t)(j->idx[k] + 1));
        const size_t qbytes = (size_t)rows * (size_t)p.q_row;
        for (size_t i = 0; i < qbytes; i += 8) { /* 8 random bytes a step */
            uint64_t r = dsplit(&x);
            for (size_t c = 0; c < 8 && i + c < qbytes; c++, r >>= 8)
                b[i + c] = j->q == LG_QI4 ? (uint8_t)r : j->codes[r & 255];
        }
        const size_t ng = (size_t)rows * (size_t)nb;
        if (j->q == LG_QI4) {
            const uint16_t d = lg_f32_to_f16(0.02f / 4.61f); /* uniform 0..15 minus 8: std 4.61 */
            for (size_t g = 0; g < ng; g++) {
                memcpy((uint8_t *)p.d + 2 * g, &d, 2);
                p.z[g] = 8;
                p.z[ng + g] = 0;
            }
        } else {
            const float d = 0.02f / 64.0f;
            for (size_t g = 0; g < ng; g++) memcpy((uint8_t *)p.d + 4 * g, &d, 4);
        }
        j->buf[k] = b;
        j->nb[k] = bytes;
    }
}

int lg_weights_dummy_quantized(lg_weights *w, lg_qtype q, uint64_t seed, lg_err *err)
{
    if (q != LG_QF8_A8 && q != LG_QI4)
        return lg_fail(err, "layout %s, expected fp8 (F8_A8) or int4 (I4)", lg_qtype_get(q).name);
    const int n_all = lg_weights_count(w);
    djob j = {.w = w, .q = q, .seed = seed};
    j.idx = calloc((size_t)n_all + 1, sizeof *j.idx);
    j.buf = calloc((size_t)n_all + 1, sizeof *j.buf);
    j.nb = calloc((size_t)n_all + 1, sizeof *j.nb);
    int rc = -1;
    if (!j.idx || !j.buf || !j.nb) {
        lg_fail(err, "out of memory");
        goto done;
    }
    uint64_t ts = seed ^ 0xf8ull;
    for (int i = 0; i < 256; i++) { /* Irwin-Hall(12) ~ N(0, 1), times 64 */
        double sum = 0;
        for (int k = 0; k < 12; k++) sum += (double)(dsplit(&ts) >> 11) * (1.0 / 9007199254740992.0);
        j.codes[i] = lg_f32_to_e4m3((float)((sum - 6.0) * 64.0));
    }
    for (int i = 0; i < n_all; i++) {
        const lg_wtensor *t = lg_weights_at(w, i);
        if (lg_weights_is_linear(t->name) && t->n_dims == 2)
            j.idx[j.n++] = i;
    }
    pthread_mutex_init(&j.mu, NULL);
    run_workers(dworker, &j);
    pthread_mutex_destroy(&j.mu);
    rc = adopt(w, q, j.idx, j.buf, j.nb, j.n,
               q == LG_QI4 ? "int4 (dummy weights, W4A16 g128)" : "fp8 (dummy weights, W8A8 per-channel, dynamic per-token)",
               err);
done:
    free_results(j.idx, j.buf, j.nb, j.n);
    return rc;
}
