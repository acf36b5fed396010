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
 * pages stay until the weights are freed). Single-threaded: about a minute
 * for a 7B model (load time, not serving time).
 */
#include "engine/model/quant.h"
#include "engine/model/weights.h"

#include <stdio.h>
#include <string.h>

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

int lg_weights_quantize(lg_weights *w, lg_qtype q, lg_err *err)
{
    if (q != LG_QF8_A8 && q != LG_QI4)
        return lg_fail(err, "layout %s, expected fp8 (F8_A8) or int4 (I4)", lg_qtype_get(q).name);
    lg_model_config *c = lg_weights_config_mut(w);
    if (c->quant_method[0] && strcmp(c->quant_method, "none"))
        return lg_fail(err, "the model is already quantized (%s); drop --quantization", c->quant_desc);
    int n_done = 0;
    for (int i = 0; i < lg_weights_count(w); i++) {
        const lg_wtensor *t = lg_weights_at(w, i);
        if (!is_linear(t->name))
            continue;
        if (t->q != LG_QNONE)
            return lg_fail(err, "tensor %s is already quantized (%s); drop --quantization", t->name,
                           lg_qtype_get(t->q).name);
        if (t->n_dims != 2)
            return lg_fail(err, "tensor %s has rank %d, expected 2", t->name, t->n_dims);
        void *buf;
        size_t nb;
        if (lg_quantize_planar(q, t->data, t->dtype, t->shape[0], t->shape[1], &buf, &nb, err) ||
            lg_weights_set_quant(w, i, q, buf, nb, buf, err)) {
            lg_err_prefix(err, "%s", t->name);
            return -1;
        }
        n_done++;
    }
    if (n_done == 0)
        return lg_fail(err, "the model has no linear-layer weights to quantize");
    snprintf(c->quant_method, sizeof c->quant_method, "%s", q == LG_QI4 ? "int4-rtn" : "fp8");
    snprintf(c->quant_desc, sizeof c->quant_desc, "%s",
             q == LG_QI4 ? "int4 (--quantization: RTN asymmetric g128, W4A16)"
                         : "fp8 (--quantization: W8A8 per-channel, dynamic per-token)");
    return 0;
}
