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

static bool is_linear(const char *name)
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
        if (!is_linear(t->name))
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
    /* tensors are independent: one worker a core (at most 32), each taking the next tensor */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 32 ? 32 : (int)ncpu;
    pthread_t th[32];
    int started = 0;
    pthread_mutex_init(&j.mu, NULL);
    for (; started < nt - 1; started++)
        if (pthread_create(&th[started], NULL, qworker, &j))
            break;
    qworker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.failed) {
        *err = j.err;
        goto done;
    }
    for (int k = 0; k < j.n; k++) {
        if (lg_weights_set_quant(w, j.idx[k], q, j.buf[k], j.nb[k], j.buf[k], err))
            goto done;
        j.buf[k] = NULL; /* owned by w */
    }
    snprintf(c->quant_method, sizeof c->quant_method, "%s", q == LG_QI4 ? "int4-rtn" : "fp8");
    snprintf(c->quant_desc, sizeof c->quant_desc, "%s",
             q == LG_QI4 ? "int4 (--quantization: RTN asymmetric g128, W4A16)"
                         : "fp8 (--quantization: W8A8 per-channel, dynamic per-token)");
    rc = 0;
done:
    for (int k = 0; j.buf && k < j.n; k++)
        free(j.buf[k]);
    free(j.idx);
    free(j.buf);
    free(j.nb);
    return rc;
}
