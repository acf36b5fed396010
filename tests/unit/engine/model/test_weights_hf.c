/*
 * test_weights_hf.c — the HF directory loader, the weights container, the
 * Llama shape check and dummy weights. Fixtures come from
 * tests/fixtures/hf/make_fixtures.py; every tensor value is recomputed here
 * from the generator's formula and compared exactly. Config edge cases are
 * written to a temporary directory and loaded with dummy weights.
 */
#include "tests/unit/test.h"
#include "engine/model/weights.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/hf/"

static float fixture_value(const char *name, size_t i)
{
    unsigned k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        k += *p;
    k %= 97;
    return (float)((long)((i * 7 + k) % 97) - 48) / 64.0f;
}

static size_t n_elems(const lg_wtensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->n_dims; i++)
        n *= (size_t)t->shape[i];
    return n;
}

/* Number of elements of all tensors that differ from the generator's values. */
static long count_bad_values(const lg_weights *w)
{
    long bad = 0;
    for (int i = 0; i < lg_weights_count(w); i++) {
        const lg_wtensor *t = lg_weights_at(w, i);
        size_t n = n_elems(t);
        float *f = malloc(n * sizeof *f);
        lg_to_f32(f, t->data, t->dtype, n);
        for (size_t e = 0; e < n; e++)
            bad += f[e] != fixture_value(t->name, e);
        free(f);
    }
    return bad;
}

static const lg_load_opts opts0 = {.dequant_dtype = LG_F16, .dummy_dtype = LG_F16};

static void test_tiny_llama(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    CHECK_MSG(lg_weights_load(FIX "tiny_llama", &opts0, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    const lg_model_config *c = lg_weights_config(w);
    CHECK(!strcmp(c->arch, "llama"));
    CHECK(c->n_layers == 2 && c->d_model == 32 && c->n_heads == 4 && c->n_kv_heads == 2);
    CHECK(c->head_dim == 8 && c->d_ff == 64 && c->vocab_size == 64 && c->max_pos == 128);
    CHECK(fabsf(c->rms_eps - 1e-5f) < 1e-9f && c->rope_theta == 10000.0f);
    CHECK(c->rope_scaling == LG_ROPE_NONE && !c->tie_embeddings && !c->qkv_bias && !c->sliding_window);
    CHECK(c->weight_dtype == LG_F16);
    CHECK(c->bos_id == 1);
    CHECK(c->n_eos == 2 && c->eos_ids[0] == 2 && c->eos_ids[1] == 7); /* config 2 + generation_config [2, 7] */
    CHECK(lg_weights_count(w) == 21);
    CHECK_MSG(count_bad_values(w) == 0, "tensor values differ from the generator's");
    const lg_wtensor *t = lg_weights_get(w, "lm_head.weight");
    CHECK(t && t->dtype == LG_F16 && t->n_dims == 2 && t->shape[0] == 64 && t->shape[1] == 32 && t->nbytes == 4096);
    t = lg_weights_get(w, "model.layers.1.self_attn.o_proj.weight");
    CHECK(t && t->shape[0] == 32 && t->shape[1] == 32);
    if (t) /* one element by hand: k = sum(name) % 97, element 5 */
        CHECK(lg_f16_to_f32(((const uint16_t *)t->data)[5]) == fixture_value(t->name, 5));
    CHECK(lg_weights_get(w, "nope") == NULL && lg_weights_at(w, 21) == NULL);
    CHECK(lg_weights_tokenizer(w) == NULL); /* no tokenizer.json in the fixture */
    CHECK(lg_weights_chat_template(w) &&
          !strcmp(lg_weights_chat_template(w), "{% for m in messages %}{{ m['content'] }}{% endfor %}"));
    CHECK(lg_weights_check_llama(w, &err) == 0);
    lg_weights_free(w);
    lg_weights_free(NULL);
}

static void test_sharded(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    CHECK_MSG(lg_weights_load_hf(FIX "tiny_llama_sharded", NULL, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    const lg_model_config *c = lg_weights_config(w);
    CHECK(c->weight_dtype == LG_BF16 && c->max_pos == 64);
    CHECK(c->rope_scaling == LG_ROPE_LLAMA3 && c->rope_factor == 8.0f && c->rope_low_freq_factor == 1.0f &&
          c->rope_high_freq_factor == 4.0f && c->rope_orig_max_pos == 16);
    CHECK(c->n_eos == 2 && c->eos_ids[0] == 2 && c->eos_ids[1] == 3);
    CHECK(lg_weights_count(w) == 21); /* inv_freq skipped, unlisted tensor ignored */
    CHECK(lg_weights_get(w, "model.layers.0.self_attn.rotary_emb.inv_freq") == NULL);
    CHECK(lg_weights_get(w, "extra.unlisted") == NULL && lg_weights_get(w, "model.extra.unlisted") == NULL);
    CHECK_MSG(count_bad_values(w) == 0, "tensor values differ from the generator's");
    CHECK(lg_weights_chat_template(w) && !strcmp(lg_weights_chat_template(w), "{{ bos_token }}jinja-file-template"));
    lg_weights_free(w);
}

static void test_qwen2(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    CHECK_MSG(lg_weights_load(FIX "tiny_qwen2", &opts0, &w, &err) == 0, "%s", err.msg);
    if (!w)
        return;
    const lg_model_config *c = lg_weights_config(w);
    CHECK(!strcmp(c->arch, "qwen2") && c->qkv_bias && c->tie_embeddings);
    CHECK(c->weight_dtype == LG_F32 && c->rope_theta == 1000000.0f);
    CHECK(!c->sliding_window); /* use_sliding_window = false */
    CHECK(c->bos_id == -1 && c->n_eos == 1 && c->eos_ids[0] == 5);
    CHECK(lg_weights_count(w) == 26);
    CHECK(lg_weights_get(w, "lm_head.weight") == NULL);
    const lg_wtensor *b = lg_weights_get(w, "model.layers.1.self_attn.k_proj.bias"); /* "model." added */
    CHECK(b && b->n_dims == 1 && b->shape[0] == 16 && b->dtype == LG_F32);
    CHECK_MSG(count_bad_values(w) == 0, "tensor values differ from the generator's");
    CHECK(lg_weights_chat_template(w) && !strcmp(lg_weights_chat_template(w), "default-template"));
    lg_weights_free(w);
}

/* ---- a scratch directory ------------------------------------------------ */

static char g_dir[64];

static void put(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void copy_file(const char *src, const char *name)
{
    char *buf;
    size_t n;
    lg_err err;
    if (lg_read_file(src, 1 << 24, &buf, &n, &err))
        return;
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(buf, 1, n, f);
        fclose(f);
    }
    free(buf);
}

static void rm(const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    unlink(p);
}

#define BASE_CFG                                                                                   \
    "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "                   \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 64"

/* Loads g_dir with dummy weights after writing config.json = {cfg}. */
static int load_cfg(const char *cfg, lg_weights **w, lg_err *err)
{
    char text[2048];
    snprintf(text, sizeof text, "{%s}", cfg);
    put("config.json", text);
    lg_load_opts o = opts0;
    o.dummy = true;
    return lg_weights_load(g_dir, &o, w, err);
}

static void expect_cfg_error(const char *cfg, const char *needle)
{
    lg_err err = {{0}};
    lg_weights *w = (lg_weights *)1;
    int rc = load_cfg(cfg, &w, &err);
    CHECK_MSG(rc == -1 && w == NULL, "config accepted: %s", cfg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    CHECK_MSG(!strchr(err.msg, '\n'), "message not one line");
    if (getenv("LG_TEST_VERBOSE"))
        fprintf(stderr, "  expected error: %s\n", err.msg);
    if (rc == 0)
        lg_weights_free(w);
}

static void test_configs(void)
{
    lg_err err = {{0}};
    lg_weights *w = NULL;
    /* defaults: model_type only, no kv heads / head_dim / theta / eps */
    int rc = load_cfg("\"model_type\": \"mistral\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 50, "
                      "\"sliding_window\": 4096, \"head_dim\": null, \"eos_token_id\": [2, 2, 9], "
                      "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}",
                      &w, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (w) {
        const lg_model_config *c = lg_weights_config(w);
        CHECK(!strcmp(c->arch, "mistral") && c->n_kv_heads == 4 && c->head_dim == 8);
        CHECK(c->rope_theta == 10000.0f && c->rms_eps == 1e-6f && c->max_pos == 2048);
        CHECK(c->sliding_window && c->sliding_window_size == 4096);
        CHECK(c->rope_scaling == LG_ROPE_LINEAR && c->rope_factor == 2.0f);
        CHECK(c->n_eos == 2 && c->eos_ids[1] == 9 && c->bos_id == -1);
        CHECK(!c->tie_embeddings && lg_weights_get(w, "lm_head.weight"));
        lg_weights_free(w);
        w = NULL;
    }
    /* transformers 5 style rope_parameters */
    rc = load_cfg("\"architectures\": [\"LlamaForCausalLM\"], " BASE_CFG ", \"rope_parameters\": "
                  "{\"rope_type\": \"default\", \"rope_theta\": 500000.0}",
                  &w, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (w) {
        CHECK(lg_weights_config(w)->rope_theta == 500000.0f);
        lg_weights_free(w);
        w = NULL;
    }

    expect_cfg_error("\"architectures\": [\"GPT2LMHeadModel\"], " BASE_CFG, "GPT2LMHeadModel");
    expect_cfg_error("\"model_type\": \"gemma\", " BASE_CFG, "gemma");
    expect_cfg_error(BASE_CFG, "architectures");
    expect_cfg_error("\"model_type\": \"llama\", \"hidden_size\": 32", "intermediate_size");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"rope_scaling\": {\"rope_type\": \"yarn\", "
                     "\"factor\": 4.0}", "yarn");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"rope_scaling\": {\"rope_type\": \"llama3\", "
                     "\"factor\": 8.0}", "low_freq_factor");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"attention_bias\": true", "attention_bias");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"mlp_bias\": true", "mlp_bias");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"hidden_act\": \"gelu\"", "gelu");
    expect_cfg_error("\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 3, "
                     "\"vocab_size\": 64", "multiple");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"eos_token_id\": 64", "eos_token_id");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG ", \"hidden_size\": \"big\"", "integer");
    expect_cfg_error("\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 2000000000",
                     "vocab_size");
    put("config.json", "{not json");
    lg_weights_free(w);
    w = NULL;
    CHECK(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "config.json is not valid JSON"));
    rm("config.json");
    CHECK(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "config.json"));

    /* generation_config eos is unioned in; bad generation_config is an error */
    put("generation_config.json", "{\"eos_token_id\": [4, 5], \"bos_token_id\": 3}");
    rc = load_cfg("\"model_type\": \"llama\", " BASE_CFG ", \"eos_token_id\": 5", &w, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (w) {
        const lg_model_config *c = lg_weights_config(w);
        CHECK(c->n_eos == 2 && c->eos_ids[0] == 5 && c->eos_ids[1] == 4 && c->bos_id == 3);
        lg_weights_free(w);
        w = NULL;
    }
    put("generation_config.json", "{\"eos_token_id\": \"x\"}");
    expect_cfg_error("\"model_type\": \"llama\", " BASE_CFG, "generation_config.json");
    rm("generation_config.json");
}

static void test_dummy(void)
{
    lg_err err = {{0}};
    copy_file(FIX "tiny_llama/config.json", "config.json");
    lg_load_opts o = opts0;
    o.dummy = true;
    o.dummy_seed = 7;
    lg_weights *a = NULL, *b = NULL, *c = NULL;
    CHECK_MSG(lg_weights_load(g_dir, &o, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(lg_weights_load(g_dir, &o, &b, &err) == 0, "%s", err.msg);
    o.dummy_seed = 8;
    o.dummy_dtype = LG_BF16;
    CHECK_MSG(lg_weights_load(g_dir, &o, &c, &err) == 0, "%s", err.msg);
    if (!a || !b || !c)
        goto done;
    CHECK(lg_weights_count(a) == 21 && lg_weights_config(a)->weight_dtype == LG_F16);
    CHECK(lg_weights_config(c)->weight_dtype == LG_BF16);
    CHECK(lg_weights_check_llama(a, &err) == 0);
    bool same = true, differ = false;
    for (int i = 0; i < lg_weights_count(a); i++) {
        const lg_wtensor *x = lg_weights_at(a, i), *y = lg_weights_get(b, x->name), *z = lg_weights_get(c, x->name);
        same &= y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
        CHECK(((uintptr_t)x->data & 63) == 0);
        if (z && !strstr(x->name, "norm")) {
            float fx, fz;
            lg_to_f32(&fx, x->data, x->dtype, 1);
            lg_to_f32(&fz, z->data, z->dtype, 1);
            differ |= fx != fz;
        }
    }
    CHECK_MSG(same, "same seed gave different dummy weights");
    CHECK_MSG(differ, "different seeds gave the same dummy weights");
    const lg_wtensor *nrm = lg_weights_get(a, "model.layers.1.post_attention_layernorm.weight");
    const lg_wtensor *emb = lg_weights_get(c, "model.embed_tokens.weight");
    if (nrm && emb) {
        float f[2048];
        lg_to_f32(f, nrm->data, nrm->dtype, 32);
        bool ones = true;
        for (int i = 0; i < 32; i++)
            ones &= f[i] == 1.0f;
        CHECK(ones);
        lg_to_f32(f, emb->data, emb->dtype, 2048);
        double s = 0, s2 = 0;
        for (int i = 0; i < 2048; i++)
            s += f[i], s2 += (double)f[i] * f[i];
        double mean = s / 2048, sd = sqrt(s2 / 2048 - mean * mean);
        CHECK_MSG(fabs(mean) < 0.003 && sd > 0.017 && sd < 0.023, "dummy mean %g sd %g", mean, sd);
    }
    /* vocab_only: config (+ tokenizer, template) only */
    o.dummy = false;
    o.vocab_only = true;
    lg_weights *v = NULL;
    CHECK_MSG(lg_weights_load(g_dir, &o, &v, &err) == 0, "%s", err.msg);
    CHECK(v && lg_weights_count(v) == 0 && lg_weights_config(v)->n_layers == 2);
    lg_weights_free(v);
done:
    lg_weights_free(a);
    lg_weights_free(b);
    lg_weights_free(c);
}

static void test_check_llama(void)
{
    lg_err err = {{0}};
    lg_weights *src = NULL;
    if (lg_weights_load(FIX "tiny_llama", &opts0, &src, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    for (int pass = 0; pass < 3; pass++) {
        lg_weights *w = lg_weights_new();
        *lg_weights_config_mut(w) = *lg_weights_config(src);
        for (int i = 0; i < lg_weights_count(src); i++) {
            const lg_wtensor *t = lg_weights_at(src, i);
            int64_t shape[4] = {t->shape[0], t->shape[1]};
            if (pass == 0 && !strcmp(t->name, "model.layers.1.mlp.down_proj.weight"))
                continue;
            if (pass == 1 && !strcmp(t->name, "model.layers.1.mlp.down_proj.weight"))
                shape[0] = t->shape[1], shape[1] = t->shape[0];
            if (pass == 2 && !strcmp(t->name, "lm_head.weight"))
                continue;
            CHECK(lg_weights_add(w, t->name, t->dtype, t->n_dims, shape, t->data, NULL, &err) == 0);
        }
        CHECK(lg_weights_add(w, "model.norm.weight", LG_F16, 1, (int64_t[]){32}, "xx", NULL, &err) == -1 &&
              strstr(err.msg, "duplicate"));
        CHECK(lg_weights_add(w, "x", LG_I32, 1, (int64_t[]){1}, "xxxx", NULL, &err) == -1);
        CHECK(lg_weights_add(w, "y", LG_F32, 2, (int64_t[]){-1, 4}, "xxxx", NULL, &err) == -1);
        CHECK(lg_weights_add(w, "z", LG_F32, 2, (int64_t[]){INT64_MAX, 4}, "xxxx", NULL, &err) == -1);
        int rc = lg_weights_check_llama(w, &err);
        CHECK(rc == -1);
        if (pass == 0)
            CHECK_MSG(strstr(err.msg, "missing tensor 'model.layers.1.mlp.down_proj.weight' (expected shape [32, 64])"),
                      "%s", err.msg);
        if (pass == 1)
            CHECK_MSG(strstr(err.msg, "'model.layers.1.mlp.down_proj.weight' has shape [64, 32], expected [32, 64]"),
                      "%s", err.msg);
        if (pass == 2)
            CHECK_MSG(strstr(err.msg, "lm_head.weight") && strstr(err.msg, "tie_word_embeddings"), "%s", err.msg);
        lg_weights_free(w);
    }
    /* the container's hash table holds many names */
    lg_weights *w = lg_weights_new();
    char name[64];
    bool all = true;
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        all &= lg_weights_add(w, name, LG_F32, 1, (int64_t[]){1}, "abcd", NULL, &err) == 0;
    }
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        const lg_wtensor *t = lg_weights_get(w, name);
        all &= t && t == lg_weights_at(w, i);
    }
    CHECK(all && lg_weights_count(w) == 5000 && !lg_weights_get(w, "t.5000"));
    lg_weights_set_chat_template(w, "abc");
    lg_weights_set_chat_template(w, "def");
    CHECK(!strcmp(lg_weights_chat_template(w), "def"));
    lg_weights_free(w);
    lg_weights_free(src);
}

static void test_hostile_dirs(void)
{
    static const struct {
        const char *path, *needle;
    } cases[] = {
        {FIX "hostile/missing_shard", "model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing"},
        {FIX "hostile/index_lists_absent", "model.layers.9.mlp.up_proj.weight"},
        {FIX "hostile/index_escape", "expected a file name"},
        {FIX "hostile/valid.safetensors", "pass its directory"},
        {FIX "hostile/does_not_exist", "cannot open"},
        {FIX "hostile/header_not_json.safetensors", "pass its directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lg_err err = {{0}};
        lg_weights *w = (lg_weights *)1;
        int rc = lg_weights_load(cases[i].path, &opts0, &w, &err);
        CHECK_MSG(rc == -1 && w == NULL, "%s loaded", cases[i].path);
        CHECK_MSG(strstr(err.msg, cases[i].needle) != NULL, "%s: message '%s' lacks '%s'", cases[i].path, err.msg,
                  cases[i].needle);
        CHECK(!strchr(err.msg, '\n'));
        if (getenv("LG_TEST_VERBOSE"))
            fprintf(stderr, "  expected error: %s\n", err.msg);
    }
    /* model dirs with bad weight files */
    lg_err err = {{0}};
    lg_weights *w = NULL;
    copy_file(FIX "tiny_llama/config.json", "config.json");
    CHECK(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "model.safetensors"));
    copy_file(FIX "hostile/i64.safetensors", "model.safetensors");
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "dtype I64"), "%s", err.msg);
    copy_file(FIX "hostile/overlap.safetensors", "model.safetensors");
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "overlaps"), "%s", err.msg);
    copy_file(FIX "hostile/valid.safetensors", "model.safetensors"); /* valid file, wrong tensors */
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "missing tensor"), "%s", err.msg);
    /* a broken tokenizer.json is an error, not silently skipped */
    copy_file(FIX "tiny_llama/model.safetensors", "model.safetensors");
    put("tokenizer.json", "this is not a tokenizer");
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "tokenizer.json"), "%s", err.msg);
    rm("tokenizer.json");
    put("tokenizer_config.json", "{\"chat_template\": 42}");
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == -1 && strstr(err.msg, "chat_template"), "%s", err.msg);
    rm("tokenizer_config.json");
    CHECK_MSG(lg_weights_load(g_dir, &opts0, &w, &err) == 0, "%s", err.msg);
    CHECK(w && lg_weights_chat_template(w) == NULL);
    lg_weights_free(w);
    rm("model.safetensors");
    rm("config.json");
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/lg_test_hf_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_tiny_llama();
    test_sharded();
    test_qwen2();
    test_configs();
    test_dummy();
    test_check_llama();
    test_hostile_dirs();
    rm("config.json");
    rm("generation_config.json");
    rmdir(g_dir);
    TEST_DONE();
}
