/*
 * model_arch.c — the table of model families (see model_arch.h) and the q/k
 * row transform of partial-rotary and LongRoPE models.
 *
 * A row says how a family differs from Llama, nothing more; every switch is
 * read in exactly one place of the forward (engine/model/model.c) or the
 * loaders. Defaults are transformers' config-class defaults for the family.
 */
#include "engine/model/model_arch.h"

#include <stdio.h>

static const lg_arch ARCHS[] = {
    /* model_type    HF class                 GGUF        bias   qknorm post   1+w    escale fused  act               window             pat tie    eps    theta  local */
    {"llama",       "LlamaForCausalLM",       "llama",    false, false, false, false, false, false, LG_ACT_SILU,      LG_WINDOW_NONE,    0, false, 1e-6,  1e4,   0},
    {"mistral",     "MistralForCausalLM",     "mistral",  false, false, false, false, false, false, LG_ACT_SILU,      LG_WINDOW_ALL,     0, false, 1e-6,  1e4,   0},
    {"qwen2",       "Qwen2ForCausalLM",       "qwen2",    true,  false, false, false, false, false, LG_ACT_SILU,      LG_WINDOW_QWEN,    0, false, 1e-6,  1e4,   0},
    {"qwen3",       "Qwen3ForCausalLM",       "qwen3",    false, true,  false, false, false, false, LG_ACT_SILU,      LG_WINDOW_QWEN,    0, false, 1e-6,  1e4,   0},
    {"gemma2",      "Gemma2ForCausalLM",      "gemma2",   false, false, true,  true,  true,  false, LG_ACT_GELU_TANH, LG_WINDOW_PATTERN, 2, true,  1e-6,  1e4,   0},
    {"gemma3_text", "Gemma3ForCausalLM",      "gemma3",   false, true,  true,  true,  true,  false, LG_ACT_GELU_TANH, LG_WINDOW_PATTERN, 6, true,  1e-6,  1e6,   1e4},
    {"phi3",        "Phi3ForCausalLM",        "phi3",     false, false, false, false, false, true,  LG_ACT_SILU,      LG_WINDOW_ALL,     0, false, 1e-5,  1e4,   0},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

const lg_arch *lg_arch_by_type(const char *t)
{
    for (size_t i = 0; t && i < N_ARCHS; i++)
        if (!strcmp(t, ARCHS[i].model_type))
            return &ARCHS[i];
    return NULL;
}

const lg_arch *lg_arch_by_class(const char *cls)
{
    for (size_t i = 0; cls && i < N_ARCHS; i++)
        if (!strcmp(cls, ARCHS[i].hf_class))
            return &ARCHS[i];
    return NULL;
}

const lg_arch *lg_arch_by_gguf(const char *g)
{
    for (size_t i = 0; g && i < N_ARCHS; i++)
        if (ARCHS[i].gguf && !strcmp(g, ARCHS[i].gguf))
            return &ARCHS[i];
    return NULL;
}

static const char *list(char *buf, size_t cap, int which)
{
    if (buf[0])
        return buf;
    size_t n = 0;
    for (size_t i = 0; i < N_ARCHS; i++) {
        const char *s = which == 0 ? ARCHS[i].model_type : which == 1 ? ARCHS[i].hf_class : ARCHS[i].gguf;
        if (!s)
            continue;
        int k = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", s);
        if (k < 0 || (size_t)k >= cap - n)
            break;
        n += (size_t)k;
    }
    return buf;
}

const char *lg_arch_type_list(void)
{
    static char buf[256];
    return list(buf, sizeof buf, 0);
}
const char *lg_arch_class_list(void)
{
    static char buf[512];
    return list(buf, sizeof buf, 1);
}
const char *lg_arch_gguf_list(void)
{
    static char buf[256];
    return list(buf, sizeof buf, 2);
}

void lg_arch_apply(const lg_arch *a, lg_model_config *c)
{
    snprintf(c->arch, sizeof c->arch, "%s", a->model_type);
    c->qkv_bias = a->qkv_bias;
    c->qk_norm = a->qk_norm;
    c->post_norms = a->post_norms;
    c->norm_plus_one = a->norm_plus_one;
    c->embed_scale = a->embed_scale;
    c->fused_qkv = a->fused_qkv;
    c->act = a->act;
}

bool lg_arch_qk_identity(const lg_model_config *c)
{
    const int r = c->rot_dim > 0 ? c->rot_dim : c->head_dim;
    return r == c->head_dim && (c->rope_attn_factor == 0 || c->rope_attn_factor == 1);
}

void lg_arch_qk_row(const lg_model_config *c, int e, int *src, float *factor)
{
    const int hd = c->head_dim, r = c->rot_dim > 0 ? c->rot_dim : hd;
    const int half = hd / 2, rh = r / 2, ph = (hd - r) / 2; /* rotated pairs, pass-through pairs */
    const float m = c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0f;
    const int i = e < half ? e : e - half; /* index within the engine's half */
    const bool hi = e >= half;
    if (i < rh) { /* rotated */
        *src = hi ? rh + i : i;
        *factor = m;
    } else { /* pass-through */
        *src = r + (hi ? ph : 0) + (i - rh);
        *factor = 1.0f;
    }
}
