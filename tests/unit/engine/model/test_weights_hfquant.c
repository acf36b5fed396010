/*
 * test_weights_hfquant.c — quantized HF checkpoints (weights_hfquant.c) read
 * into the planar layouts and decoded (quant_planar.c lg_dequant_planar),
 * against the dequantization of the package that wrote them.
 *
 * Fixtures: tests/fixtures/quant/hf/<case>/ from tests/quant/make_fixtures.py
 * (llm-compressor / compressed-tensors, GPTQModel, AutoAWQ's dequantize_gemm,
 * transformers' FineGrainedFP8 quantize/dequantize ops; versions in each
 * meta.json). reference.safetensors holds the package's
 * float32 dequantization of every quantized Linear.
 *
 * Bound: the planar tensors decode to the reference EXACTLY (0 difference):
 * our d is the checkpoint's scale (f32 for F8: a bf16/f32 scale converts
 * exactly; f16 for I4: the f16 scales of GPTQ/AWQ as they are, and
 * compressed-tensors' bf16 scales of these magnitudes convert exactly) and
 * the product d * code is one f32 multiplication, as the package's. Tensors
 * that cannot be planar (act-order g_idx, groups of 32) are expanded to f16
 * at load: within f16 rounding of the reference, |ours - ref| <= 2^-11 |ref|
 * + 2^-25.
 * Also: refusals of what cannot be served (one line naming the method).
 */
#include "tests/unit/test.h"
#include "engine/model/quant.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/quant/hf/"

typedef struct qcase {
    const char *name;
    lg_qtype q;       /* expected layout; LG_QNONE: expanded to f16 at load */
    const char *method;
    const char *expanded; /* tensors whose name has this are expanded to f16 (the others: layout q) */
} qcase;

static const qcase CASES[] = {
    {"ct_fp8_dynamic", LG_QF8_A8, "fp8", NULL},
    {"ct_fp8_dynamic_k192", LG_QF8_A8, "fp8", NULL},
    {"ct_fp8_static", LG_QF8_A8S, "fp8", NULL},
    {"ct_fp8_block", LG_QF8_A8G, "fp8-block", NULL},
    {"ct_fp8_weight_only", LG_QF8, "fp8", NULL},
    {"ct_w4a16", LG_QI4, "compressed-tensors-int4", NULL},
    {"ct_w4a16_asym", LG_QI4, "compressed-tensors-int4", NULL},
    {"ct_w4a16_channel_k192", LG_QI4, "compressed-tensors-int4", NULL},
    {"gptq_g128", LG_QI4, "gptq", NULL},
    {"gptq_g128_asym", LG_QI4, "gptq", NULL},
    {"gptq_v2_g128", LG_QI4, "gptq", NULL},
    {"gptq_per_channel", LG_QI4, "gptq", NULL},
    /* act-order: K = 128 has one group, so g_idx is trivial (I4) except for down_proj (K = 256) */
    {"gptq_act_order", LG_QI4, "gptq", "down_proj"},
    {"gptq_g32", LG_QNONE, "gptq", NULL},
    {"awq_g128", LG_QI4, "awq", NULL},
    {"hf_fp8_block", LG_QF8_A8G, "fp8-block", NULL},
    {"hf_fp8_tensor", LG_QF8_A8, "fp8", NULL},
};

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void check_case(const qcase *qc)
{
    char dir[512], ref[600];
    snprintf(dir, sizeof dir, FIX "%s", qc->name);
    snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
    CHECK_MSG(exists(ref), "fixture %s is missing", ref);
    if (!exists(ref))
        return;
    lg_err err = {{0}};
    lg_weights *w = NULL;
    const lg_load_opts o = {.dequant_dtype = LG_F16, .dummy_dtype = LG_F16};
    CHECK_MSG(lg_weights_load(dir, &o, &w, &err) == 0, "%s: %s", qc->name, err.msg);
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(ref, &f, &err) == 0, "%s", err.msg);
    if (!w || !f) {
        lg_weights_free(w);
        lg_st_close(f);
        return;
    }
    CHECK_MSG(!strcmp(lg_weights_config(w)->quant_method, qc->method), "%s: quant_method %s, expected %s", qc->name,
              lg_weights_config(w)->quant_method, qc->method);
    int n_checked = 0;
    for (int i = 0; i < lg_st_count(f); i++) {
        const lg_st_tensor *r = lg_st_at(f, i);
        const lg_wtensor *t = lg_weights_get(w, r->name);
        CHECK_MSG(t != NULL, "%s: %s not loaded", qc->name, r->name);
        if (!t)
            continue;
        const int64_t N = r->shape[0], K = r->shape[1];
        CHECK_MSG(t->shape[0] == N && t->shape[1] == K, "%s: %s shape [%lld, %lld], expected [%lld, %lld]", qc->name,
                  r->name, (long long)t->shape[0], (long long)t->shape[1], (long long)N, (long long)K);
        const lg_qtype want_q = qc->expanded && strstr(r->name, qc->expanded) ? LG_QNONE : qc->q;
        CHECK_MSG(t->q == want_q, "%s: %s layout %s, expected %s", qc->name, r->name, lg_qtype_get(t->q).name,
                  lg_qtype_get(want_q).name);
        if (t->shape[0] != N || t->shape[1] != K || t->q != want_q)
            continue;
        float *ours = malloc((size_t)(N * K) * sizeof *ours), *want = malloc((size_t)(N * K) * sizeof *want);
        memcpy(want, r->data, (size_t)(N * K) * 4);
        if (lg_qtype_is_planar(t->q)) {
            CHECK_MSG(t->nbytes == lg_planar_bytes(t->q, N, K), "%s: %s bytes", qc->name, r->name);
            CHECK_MSG(lg_dequant_planar(t->q, t->data, N, K, LG_F32, ours, &err) == 0, "%s", err.msg);
        } else {
            CHECK(t->dtype == LG_F16);
            lg_to_f32(ours, t->data, t->dtype, (size_t)(N * K));
        }
        long bad = 0;
        double worst = 0;
        for (int64_t e = 0; e < N * K; e++) {
            const double d = fabs((double)ours[e] - (double)want[e]);
            const double bound = lg_qtype_is_planar(t->q) ? 0.0 : ldexp(fabs(want[e]), -11) + ldexp(1.0, -25);
            if (d > bound) {
                bad++;
                worst = d > worst ? d : worst;
            }
        }
        CHECK_MSG(bad == 0, "%s: %s: %ld of %lld values off the reference (worst %g)", qc->name, r->name, bad,
                  (long long)(N * K), worst);
        free(ours);
        free(want);
        n_checked++;
    }
    CHECK_MSG(n_checked == 7, "%s: %d quantized tensors checked, expected 7", qc->name, n_checked);
    lg_st_close(f);
    lg_weights_free(w);
}

/* A config.json with the given quantization_config in a temporary directory, loaded as dummy weights: the
 * refusal must come from the config alone, in one line naming `want`. */
static void check_refused(const char *qcfg, const char *want)
{
    char dir[] = "/tmp/lg_hfquant_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    fprintf(fp, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 128, \"intermediate_size\": 256, "
                "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                "\"vocab_size\": 64, \"quantization_config\": %s}", qcfg);
    fclose(fp);
    lg_err err = {{0}};
    lg_weights *w = NULL;
    const lg_load_opts o = {.dequant_dtype = LG_F16, .dummy = true, .dummy_dtype = LG_F16};
    CHECK_MSG(lg_weights_load(dir, &o, &w, &err) != 0, "%s was not refused", qcfg);
    CHECK_MSG(strstr(err.msg, want) != NULL, "refusal of %s: '%s' does not name '%s'", qcfg, err.msg, want);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "refusal is not one line: %s", err.msg);
    lg_weights_free(w);
    unlink(path);
    rmdir(dir);
}

static void test_refusals(void)
{
    check_refused("{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}", "'bitsandbytes' is not supported");
    check_refused("{\"quant_method\": \"gptq\", \"bits\": 8, \"group_size\": 128}", "gptq with 8 bits");
    check_refused("{\"quant_method\": \"awq\", \"bits\": 4, \"version\": \"gemv\", \"group_size\": 128, "
                  "\"zero_point\": true}", "awq version 'gemv'");
    check_refused("{\"quant_method\": \"gptq\", \"bits\": 4, \"checkpoint_format\": \"marlin\"}", "'marlin'");
    check_refused("{\"quant_method\": \"gptq\", \"bits\": 4, \"dynamic\": {\"-:.*down\": {}}}", "dynamic");
    check_refused("{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}", "weight_block_size");
    check_refused("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": "
                  "{\"g\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"float\", "
                  "\"strategy\": \"channel\"}}}, \"frobnicate\": 1}", "\"frobnicate\"");
    check_refused("{\"quant_method\": \"compressed-tensors\", \"format\": \"nvfp4-pack-quantized\", \"config_groups\": "
                  "{\"g\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"float\"}}}}",
                  "'nvfp4-pack-quantized' is not supported");
    check_refused("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
                  "{\"g\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": \"int\", "
                  "\"strategy\": \"channel\"}}}}", "8 bits");
    /* a supported scheme with dummy weights: refused by name (not silently 16-bit) */
    check_refused("{\"quant_method\": \"awq\", \"bits\": 4, \"version\": \"gemm\", \"group_size\": 128, "
                  "\"zero_point\": true}", "dummy weights of a quantized checkpoint");
}

int main(void)
{
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        check_case(&CASES[i]);
    test_refusals();
    TEST_DONE();
}
