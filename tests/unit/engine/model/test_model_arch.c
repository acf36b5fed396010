/*
 * test_model_arch.c — the family table's lookups, and the q/k row transform
 * of partial rotary: RoPE over the engine's full-width pairs (e, e + hd/2),
 * with inv_freq 0 past rot/2, on the transformed rows equals transformers'
 * partial rotate-half (rotated dims [0, r), pairs (i, i + r/2)) on the
 * original rows, moved by the same transform; the transform is a bijection
 * and scales exactly the rotated rows by LongRoPE's attention factor.
 */
#include "engine/model/model_arch.h"
#include "tests/unit/test.h"

#include <math.h>

static void check_partial(int hd, int rot, float m)
{
    lg_model_config c = {0};
    c.head_dim = hd;
    c.rot_dim = rot == hd ? 0 : rot;
    c.rope_attn_factor = m;
    int seen[64] = {0};
    double x[64], hf[64], eng_in[64], eng[64];
    for (int e = 0; e < hd; e++) x[e] = sin(1.7 * e + 0.3);
    const double pos = 5.0;
    /* transformers: rotate-half over [0, rot), scaled by m; the rest passes */
    for (int e = 0; e < hd; e++) hf[e] = x[e];
    for (int i = 0; i < rot / 2; i++) {
        const double a = pos * pow(10000.0, -2.0 * i / rot), cs = cos(a) * m, sn = sin(a) * m;
        hf[i] = x[i] * cs - x[i + rot / 2] * sn;
        hf[i + rot / 2] = x[i + rot / 2] * cs + x[i] * sn;
    }
    /* the engine: transformed rows, pairs (e, e + hd/2), inv_freq 0 past rot/2 */
    for (int e = 0; e < hd; e++) {
        int src;
        float f;
        lg_arch_qk_row(&c, e, &src, &f);
        CHECK(src >= 0 && src < hd);
        if (src >= 0 && src < hd)
            seen[src]++;
        eng_in[e] = x[src] * f;
    }
    for (int e = 0; e < hd; e++) CHECK_MSG(seen[e] == 1, "hd %d rot %d: HF dim %d taken %d times", hd, rot, e, seen[e]);
    for (int e = 0; e < hd; e++) eng[e] = eng_in[e];
    for (int i = 0; i < hd / 2; i++) {
        const double a = i < rot / 2 ? pos * pow(10000.0, -2.0 * i / rot) : 0.0;
        eng[i] = eng_in[i] * cos(a) - eng_in[i + hd / 2] * sin(a);
        eng[i + hd / 2] = eng_in[i + hd / 2] * cos(a) + eng_in[i] * sin(a);
    }
    for (int e = 0; e < hd; e++) {
        int src;
        float f;
        lg_arch_qk_row(&c, e, &src, &f);
        CHECK_MSG(fabs(eng[e] - hf[src]) < 1e-6, "hd %d rot %d: engine dim %d = %g, transformers' dim %d = %g", hd,
                  rot, e, eng[e], src, hf[src]);
    }
    CHECK(lg_arch_qk_identity(&c) == (rot == hd && m == 1.0f));
}

int main(void)
{
    static const char *const types[] = {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const lg_arch *a = lg_arch_by_type(types[i]);
        CHECK_MSG(a != NULL, "%s", types[i]);
        if (!a)
            continue;
        CHECK(lg_arch_by_class(a->hf_class) == a);
        CHECK(a->gguf && lg_arch_by_gguf(a->gguf) == a);
        lg_model_config c = {0};
        lg_arch_apply(a, &c);
        CHECK(!strcmp(c.arch, types[i]));
        CHECK(c.post_norms == c.norm_plus_one && c.post_norms == (c.act == LG_ACT_GELU_TANH));
    }
    CHECK(lg_arch_by_type("gemma3") == NULL); /* the multimodal model, not its text part */
    CHECK(lg_arch_by_class("MixtralForCausalLM") == NULL);
    CHECK(strstr(lg_arch_type_list(), "qwen3") && strstr(lg_arch_class_list(), "Phi3ForCausalLM"));
    check_partial(16, 16, 1.0f);
    check_partial(16, 8, 1.0f);
    check_partial(16, 12, 1.3f);
    check_partial(32, 24, 1.0f);
    check_partial(16, 16, 1.19f);
    TEST_DONE();
}
