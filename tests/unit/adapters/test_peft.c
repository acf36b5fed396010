/*
 * test_peft.c — PEFT LoRA adapter loading against the fixtures written by
 * tests/fixtures/peft/make_fixtures.py (real `safetensors` package, PEFT's
 * on-disk layout), plus in-memory configs for the JSON type checks and a
 * mutation loop. Every rejection must give -1, *out == NULL and a message
 * naming the problem; run under ASan/UBSan to prove "no crash, no leak".
 * test_values: NaN / Inf weights in each stored dtype (F32, F16, BF16) are
 * refused naming the tensor and the first bad element; lora_alpha and
 * alpha_pattern values that are not finite or not > 0, and ranks < 1, are
 * refused naming the field; the config's size, nesting and value count are
 * bounded before it is parsed.
 * Run from the repository root.
 */
#include "adapters/peft.h"
#include "engine/model/safetensors.h"
#include "tests/unit/test.h"

#include <stdint.h>

#define FIX "tests/fixtures/peft/"

#include "tests/unit/adapters/peft_base.h" /* base_config(): the fixtures' tiny base model */

/* value(key, i) of make_fixtures.py, key = "<layer>.<proj>.<A|B>". */
static float fixture_value(const char *key, size_t i)
{
    unsigned k = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        k += *p;
    k %= 97;
    return (float)((long)((i * 7 + k) % 97) - 48) / 64.0f;
}

static float elem(lg_dtype dt, const void *p, size_t i)
{
    float f;
    lg_to_f32(&f, (const char *)p + i * lg_dtype_size(dt), dt, 1);
    return f;
}

/* Every element of A and B equals the generator's canonical [r, in] / [out, r] value. */
static void check_values(const lg_adapter *a, const lg_lora_module *m)
{
    char key[64];
    size_t bad = 0;
    snprintf(key, sizeof key, "%d.%s.A", m->layer, lg_lora_target_name(m->target));
    for (size_t i = 0; i < (size_t)m->rank * m->in_dim; i++)
        bad += elem(lg_adapter_dtype(a), m->A, i) != fixture_value(key, i);
    snprintf(key, sizeof key, "%d.%s.B", m->layer, lg_lora_target_name(m->target));
    for (size_t i = 0; i < (size_t)m->out_dim * m->rank; i++)
        bad += elem(lg_adapter_dtype(a), m->B, i) != fixture_value(key, i);
    CHECK_MSG(bad == 0, "%s layer %d %s: %zu wrong elements", lg_adapter_name(a), m->layer,
              lg_lora_target_name(m->target), bad);
    CHECK((uintptr_t)m->A % 64 == 0 && (uintptr_t)m->B % 64 == 0);
}

static lg_adapter *load_ok(const char *dir, int max_rank)
{
    lg_model_config base = base_config();
    lg_err err = {{0}};
    lg_adapter *a = NULL;
    int rc = lg_adapter_load(dir, dir, &base, max_rank, &a, &err);
    CHECK_MSG(rc == 0 && a, "%s: %s", dir, err.msg);
    if (a)
        for (int i = 0; i < lg_adapter_n_modules(a); i++)
            check_values(a, lg_adapter_module(a, i));
    return a;
}

/* Expected modules as (layer, target, rank, scale), in order. */
typedef struct { int layer; lg_lora_target t; int rank; float scale; } exp_mod;

static void check_modules(const lg_adapter *a, const exp_mod *e, int n)
{
    if (!a)
        return;
    lg_model_config base = base_config();
    CHECK_MSG(lg_adapter_n_modules(a) == n, "%s: %d modules, expected %d", lg_adapter_name(a),
              lg_adapter_n_modules(a), n);
    int maxr = 0;
    for (int i = 0; i < n && i < lg_adapter_n_modules(a); i++) {
        const lg_lora_module *m = lg_adapter_module(a, i);
        int in, out;
        lg_lora_target_dims(&base, e[i].t, &in, &out);
        CHECK_MSG(m->layer == e[i].layer && m->target == e[i].t, "%s module %d: layer %d %s, expected %d %s",
                  lg_adapter_name(a), i, m->layer, lg_lora_target_name(m->target), e[i].layer,
                  lg_lora_target_name(e[i].t));
        CHECK_MSG(m->rank == e[i].rank, "%s module %d: rank %d, expected %d", lg_adapter_name(a), i, m->rank, e[i].rank);
        CHECK_MSG(fabsf(m->scale - e[i].scale) <= 1e-6f * fabsf(e[i].scale), "%s module %d: scale %g, expected %g",
                  lg_adapter_name(a), i, m->scale, e[i].scale);
        CHECK(m->in_dim == in && m->out_dim == out);
        CHECK(lg_adapter_find(a, m->layer, m->target) == m);
        if (m->rank > maxr)
            maxr = m->rank;
    }
    CHECK(lg_adapter_max_rank(a) == maxr);
    CHECK(lg_adapter_module(a, -1) == NULL && lg_adapter_module(a, n) == NULL);
}

static void test_valid(void)
{
    /* list targets, F16, extra README ignored, digest */
    lg_adapter *a = load_ok(FIX "list_f16", 64);
    exp_mod e1[] = {{0, LG_LORA_Q, 4, 2}, {0, LG_LORA_V, 4, 2}, {1, LG_LORA_Q, 4, 2}, {1, LG_LORA_V, 4, 2}};
    check_modules(a, e1, 4);
    if (a) {
        CHECK(lg_adapter_dtype(a) == LG_F16);
        CHECK(!strcmp(lg_adapter_name(a), FIX "list_f16"));
        /* 2 layers x (q: 4*64 + 64*4, v: 4*64 + 32*4) elements x 2 bytes */
        CHECK(lg_adapter_weight_bytes(a) == 2 * (512 + 384) * 2);
        CHECK(lg_adapter_find(a, 0, LG_LORA_K) == NULL && lg_adapter_find(a, 2, LG_LORA_Q) == NULL);
        CHECK(lg_adapter_find(a, -1, LG_LORA_Q) == NULL && lg_adapter_find(a, 0, LG_LORA_N_TARGETS) == NULL);
        char *want = NULL;
        lg_err err = {{0}};
        CHECK(lg_read_file(FIX "list_f16.sha256", 1000, &want, NULL, &err) == 0);
        CHECK_MSG(want && !strncmp(lg_adapter_digest(a), want, 64) && strlen(lg_adapter_digest(a)) == 64,
                  "digest %s, expected %s", lg_adapter_digest(a), want ? want : "?");
        free(want);
    }
    lg_adapter_free(a);

    /* "all-linear" minus exclude_modules ["down_proj"], F32, r 2 alpha 4 */
    a = load_ok(FIX "all_linear_f32", 64);
    exp_mod e2[12];
    for (int l = 0, k = 0; l < 2; l++)
        for (int t = 0; t < LG_LORA_DOWN; t++, k++)
            e2[k] = (exp_mod){l, (lg_lora_target)t, 2, 2.0f};
    check_modules(a, e2, 12);
    CHECK(a && lg_adapter_dtype(a) == LG_F32 && lg_adapter_find(a, 1, LG_LORA_DOWN) == NULL);
    lg_adapter_free(a);

    /* regex string, full-match semantics */
    a = load_ok(FIX "regex", 64);
    exp_mod e3[] = {{1, LG_LORA_Q, 4, 1}, {1, LG_LORA_K, 4, 1}};
    check_modules(a, e3, 2);
    lg_adapter_free(a);

    /* rank_pattern / alpha_pattern: PEFT get_pattern_key, first key in file order wins;
     * "proj" must not match "q_proj" ((.*\.)? needs a dot), a full path matches itself */
    a = load_ok(FIX "patterns", 64);
    exp_mod e4[] = {
        {0, LG_LORA_Q, 4, 32.0f / 4}, {0, LG_LORA_V, 2, 8.0f / 2}, {0, LG_LORA_DOWN, 3, 8.0f / 3},
        {1, LG_LORA_Q, 4, 2.0f / 4},  {1, LG_LORA_V, 2, 2.0f / 2}, {1, LG_LORA_DOWN, 6, 8.0f / 6},
    };
    check_modules(a, e4, 6);
    lg_adapter_free(a);

    /* layers_to_transform as an int with layers_pattern, and as a list */
    a = load_ok(FIX "layers_int", 64);
    exp_mod e5[] = {{1, LG_LORA_Q, 4, 2}, {1, LG_LORA_O, 4, 2}};
    check_modules(a, e5, 2);
    lg_adapter_free(a);
    a = load_ok(FIX "layers_list", 64);
    exp_mod e6[] = {{0, LG_LORA_GATE, 4, 2}, {0, LG_LORA_UP, 4, 2}};
    check_modules(a, e6, 2);
    lg_adapter_free(a);

    /* fan_in_fan_out: PEFT keeps lora_A [r, in], lora_B [out, r]: no transposition */
    a = load_ok(FIX "fan_in_fan_out", 64);
    exp_mod e7[] = {{0, LG_LORA_O, 4, 2}, {0, LG_LORA_DOWN, 4, 2}, {1, LG_LORA_O, 4, 2}, {1, LG_LORA_DOWN, 4, 2}};
    check_modules(a, e7, 4);
    const lg_lora_module *m = a ? lg_adapter_find(a, 1, LG_LORA_DOWN) : NULL;
    CHECK(m && m->in_dim == 128 && m->out_dim == 64);
    if (m) {
        CHECK(((const float *)m->A)[1 * 128 + 5] == fixture_value("1.down_proj.A", 1 * 128 + 5));
        CHECK(((const float *)m->B)[63 * 4 + 3] == fixture_value("1.down_proj.B", 63 * 4 + 3));
    }
    lg_adapter_free(a);

    /* use_rslora: 8 / sqrt(4) */
    a = load_ok(FIX "rslora", 64);
    exp_mod e8[] = {{0, LG_LORA_K, 4, 4}, {1, LG_LORA_K, 4, 4}};
    check_modules(a, e8, 2);
    lg_adapter_free(a);

    /* lora_A.default.weight naming, BF16 */
    a = load_ok(FIX "default_bf16", 4);
    exp_mod e9[] = {{0, LG_LORA_UP, 4, 2}, {0, LG_LORA_DOWN, 4, 2}, {1, LG_LORA_UP, 4, 2}, {1, LG_LORA_DOWN, 4, 2}};
    check_modules(a, e9, 4);
    CHECK(a && lg_adapter_dtype(a) == LG_BF16);
    lg_adapter_free(a);
    lg_adapter_free(NULL);
}

static void expect_fail_dir(const char *dir, int max_rank, const char *needle, const char *needle2)
{
    lg_model_config base = base_config();
    lg_err err = {{0}};
    lg_adapter *a = (lg_adapter *)&err; /* must be reset to NULL */
    int rc = lg_adapter_load(dir, "bad", &base, max_rank, &a, &err);
    CHECK_MSG(rc == -1 && a == NULL, "%s: loaded, expected an error about '%s'", dir, needle);
    CHECK_MSG(strstr(err.msg, needle) && (!needle2 || strstr(err.msg, needle2)) && !strchr(err.msg, '\n') &&
                  !strncmp(err.msg, "adapter 'bad': ", 15),
              "%s: message '%s' does not mention '%s'%s%s", dir, err.msg, needle, needle2 ? " / " : "",
              needle2 ? needle2 : "");
    if (rc == 0)
        lg_adapter_free(a);
}

static void test_reject_files(void)
{
    static const struct { const char *dir, *needle, *needle2; } cases[] = {
        {"dora_config", "DoRA", "use_dora"},
        {"dora_tensor", "DoRA", "lora_magnitude_vector"},
        {"modules_to_save", "modules_to_save", "lm_head"},
        {"bias_all", "bias", "\"all\""},
        {"embed_target", "embedding/lm_head", "embed_tokens"},
        {"lm_head_target", "embedding/lm_head", "lm_head"},
        {"embedding_tensor", "embedding/lm_head", "lora_embedding_A"},
        {"unknown_target", "unknown module", "c_attn"},
        {"unknown_tensor", "unknown tensor", "qkv_proj"},
        {"shape_in", "model.layers.1.self_attn.v_proj: lora_A has shape [4, 48]", "expected [rank, 64]"},
        {"shape_out", "model.layers.0.self_attn.v_proj: lora_B has shape [64, 4]", "expected [32, rank]"},
        {"transposed", "stored transposed", "o_proj"},
        {"rank_ab", "rank mismatch between lora_A (4) and lora_B (2)", "layers.0.self_attn.q_proj"},
        {"rank_config", "rank mismatch", "config r says 8"},
        {"rank_pattern", "rank mismatch", "rank_pattern['v_proj'] says 8"},
        {"layer_range", "layer 2 is out of range", "2 layers"},
        {"a_without_b", "layers.1.self_attn.q_proj.lora_A.weight' has no matching lora_B", NULL},
        {"b_without_a", "layers.0.self_attn.v_proj.lora_B.weight' has no matching lora_A", NULL},
        {"duplicate", "duplicate lora_", "lora_A.default.weight"},
        {"overlap", "overlap", NULL},
        {"dtype_f64", "dtype F64", "expected F32, F16 or BF16"},
        {"dtype_mixed", "mixed dtypes", "F32"},
        {"truncated", "adapter_model.safetensors", NULL},
        {"json_invalid", "invalid JSON", "adapter_config.json"},
        {"json_types", "\"r\"", "integer"},
        {"peft_type", "\"peft_type\": \"LORA\"", "LOHA"},
        {"no_match", "matches no module", "layers_to_transform"},
        {"no_match_regex", "matches no module", "q_projection"},
        {"inconsistent_target", "inconsistent adapter", "k_proj"},
        {"inconsistent_layer", "inconsistent adapter", "layers.1."},
        {"missing_module", "inconsistent adapter", "v_proj"},
        {"lora_bias", "bias", "lora_B.bias"},
        {"not_linear", "not a linear layer", "mlp"},
        {"regex_all", "target_modules selects", NULL},
        {"missing_files", "adapter_model.safetensors", NULL},
        {"no_such_adapter", "adapter_config.json", NULL},
    };
    char dir[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, FIX "reject/%s", cases[i].dir);
        expect_fail_dir(dir, 64, cases[i].needle, cases[i].needle2);
    }
    expect_fail_dir(FIX "list_f16", 3, "rank 4 is above the maximum rank 3", NULL);
    expect_fail_dir(FIX "list_f16", 0, "max_rank", NULL);
}

/* ---- in-memory configs --------------------------------------------------- */

static char *g_st;
static size_t g_st_len;

static int parse_cfg(const char *json, lg_adapter **a, lg_err *err)
{
    lg_model_config base = base_config();
    return lg_adapter_parse(json, strlen(json), g_st, g_st_len, "mem", &base, 64, a, err);
}

/* json is a whole document */
static void expect_fail_doc(const char *json, const char *needle)
{
    lg_err err = {{0}};
    lg_adapter *a = NULL;
    int rc = parse_cfg(json, &a, &err);
    CHECK_MSG(rc == -1 && !a, "config %s: loaded", json);
    CHECK_MSG(strstr(err.msg, needle), "config %s: message '%s' does not mention '%s'", json, err.msg, needle);
    lg_adapter_free(a);
}

/* extra: the fields after "peft_type" */
static void expect_fail_cfg(const char *extra, const char *needle)
{
    char json[2048];
    snprintf(json, sizeof json, "{\"peft_type\": \"LORA\", %s}", extra);
    expect_fail_doc(json, needle);
}

#define STD "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"]"

static void test_reject_json(void)
{
    lg_err err = {{0}};
    if (lg_read_file(FIX "list_f16/adapter_model.safetensors", 1 << 20, &g_st, &g_st_len, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    /* the minimal config is enough, and the digest covers exactly these bytes */
    lg_adapter *a = NULL;
    CHECK_MSG(parse_cfg("{\"peft_type\": \"LORA\", " STD "}", &a, &err) == 0, "%s", err.msg);
    lg_adapter_free(a);
    a = NULL;
    CHECK_MSG(parse_cfg("{\"peft_type\": \"LORA\", " STD ", \"exclude_modules\": \"nothing\", "
                        "\"layers_to_transform\": [], \"layers_pattern\": []}", &a, &err) == 0, "%s", err.msg);
    lg_adapter_free(a);

    expect_fail_doc("[1, 2]", "expected a JSON object");
    expect_fail_doc("\"LORA\"", "expected a JSON object");
    expect_fail_doc("{\"r\": 4, " STD "}", "invalid JSON"); /* duplicate key */
    expect_fail_doc("{" STD "}", "\"peft_type\": \"LORA\", found none");
    expect_fail_doc("{\"peft_type\": 1, " STD "}", "\"peft_type\": \"LORA\", found an integer");
    expect_fail_cfg("\"r\": \"4\", \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "\"r\" to be an integer >= 1, found a string");
    expect_fail_cfg("\"r\": 4.0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "\"r\" to be an integer >= 1, found a real");
    expect_fail_cfg("\"r\": true, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "\"r\" to be an integer >= 1, found a boolean");
    expect_fail_cfg("\"r\": 0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "\"r\" to be an integer >= 1");
    expect_fail_cfg("\"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "\"r\" to be an integer >= 1, found none");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": \"8\", \"target_modules\": [\"q_proj\"]", "\"lora_alpha\" to be a number, found a string");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8", "\"target_modules\"");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": 5", "\"target_modules\" to be a string or a list");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", 1]", "\"target_modules\"[1] to be a string");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": []", "matches no module");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \"(q_proj\"", "valid regular expression");
    expect_fail_cfg(STD ", \"use_rslora\": \"yes\"", "\"use_rslora\" to be true or false, found a string");
    expect_fail_cfg(STD ", \"fan_in_fan_out\": 1", "\"fan_in_fan_out\" to be true or false");
    expect_fail_cfg(STD ", \"use_dora\": true", "DoRA");
    expect_fail_cfg(STD ", \"bias\": 0", "\"bias\" to be a string");
    expect_fail_cfg(STD ", \"bias\": \"lora_only\"", "\"lora_only\"");
    expect_fail_cfg(STD ", \"lora_bias\": true", "lora_bias");
    expect_fail_cfg(STD ", \"modules_to_save\": \"lm_head\"", "\"modules_to_save\" to be a list");
    expect_fail_cfg(STD ", \"modules_to_save\": [\"score\"]", "modules_to_save is not supported");
    expect_fail_cfg(STD ", \"use_qalora\": true", "QALoRA");
    expect_fail_cfg(STD ", \"target_parameters\": [\"experts.w1\"]", "target_parameters");
    expect_fail_cfg(STD ", \"layer_replication\": [[0, 1]]", "layer replication");
    expect_fail_cfg(STD ", \"alora_invocation_tokens\": [1, 2]", "aLoRA");
    expect_fail_cfg(STD ", \"trainable_token_indices\": [5]", "trainable tokens");
    expect_fail_cfg(STD ", \"rank_pattern\": []", "\"rank_pattern\" to be an object, found a list");
    expect_fail_cfg(STD ", \"rank_pattern\": {\"q_proj\": \"4\"}", "\"rank_pattern\"[\"q_proj\"] to be an integer");
    expect_fail_cfg(STD ", \"rank_pattern\": {\"q_proj\": 0}", "\"rank_pattern\"[\"q_proj\"] >= 1");
    expect_fail_cfg(STD ", \"rank_pattern\": {\"q_(proj\": 4}", "valid regular expression");
    expect_fail_cfg(STD ", \"alpha_pattern\": {\"q_proj\": null}", "\"alpha_pattern\"[\"q_proj\"] to be a number");
    expect_fail_cfg(STD ", \"layers_to_transform\": \"0\"", "\"layers_to_transform\" to be an integer or a list");
    expect_fail_cfg(STD ", \"layers_to_transform\": [0, \"1\"]", "\"layers_to_transform\"[1] to be an integer");
    expect_fail_cfg(STD ", \"layers_to_transform\": [0, 5]", "layers_to_transform entry 5 is out of range");
    expect_fail_cfg(STD ", \"layers_to_transform\": -1", "layers_to_transform entry -1 is out of range");
    expect_fail_cfg(STD ", \"layers_to_transform\": [0], \"layers_pattern\": 3", "\"layers_pattern\" to be a string or a list");
    expect_fail_cfg(STD ", \"layers_pattern\": \"layers\"", "expected \"layers_to_transform\" with \"layers_pattern\"");
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \".*_proj\", \"layers_to_transform\": [0]",
                    "no \"layers_to_transform\" when \"target_modules\" is a string");
    expect_fail_cfg(STD ", \"exclude_modules\": 3", "\"exclude_modules\" to be a string or a list");
    expect_fail_cfg(STD ", \"exclude_modules\": \".*\"", "matches no module");
    /* tensors for layer 1 but layers_to_transform keeps layer 0 only */
    expect_fail_cfg(STD ", \"layers_to_transform\": 0", "inconsistent adapter");
    /* a full path is matched exactly, without the layer filter */
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"model.layers.0.self_attn.q_proj\"]",
                    "inconsistent adapter");
    /* hostile regexes: an error or no match, quickly, never a hang */
    expect_fail_cfg("\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \"(.*.*)*(a|a)*(.*)*[#]\"", "adapter 'mem'");

    lg_model_config base = base_config();
    CHECK(lg_adapter_parse("{}", 2, g_st, g_st_len, "", &base, 64, &a, &err) == -1 && strstr(err.msg, "name"));
    base.n_layers = 0;
    CHECK(lg_adapter_parse("{}", 2, g_st, g_st_len, "x", &base, 64, &a, &err) == -1 && strstr(err.msg, "base model"));
}

/* Random byte changes in the config and the safetensors header: every result
 * is a clean success or a one-line error. */
static void test_mutations(void)
{
    char *cfg = NULL;
    size_t cfg_len = 0;
    lg_err err = {{0}};
    if (lg_read_file(FIX "list_f16/adapter_config.json", 1 << 20, &cfg, &cfg_len, &err) || !g_st) {
        CHECK_MSG(0, "%s", err.msg);
        free(cfg);
        return;
    }
    char *c2 = malloc(cfg_len), *s2 = malloc(g_st_len);
    lg_model_config base = base_config();
    uint32_t rng = 12345;
    int ok = 0, failed = 0;
    static const char alphabet[] = "{}[]\",:0123456789.-*()|\\eE truefalsnul";
    for (int it = 0; it < 3000; it++) {
        memcpy(c2, cfg, cfg_len);
        memcpy(s2, g_st, g_st_len);
        for (int k = 0; k < 1 + it % 3; k++) {
            rng = rng * 1664525u + 1013904223u;
            if (it & 1)
                c2[(rng >> 8) % cfg_len] = alphabet[(rng >> 20) % (sizeof alphabet - 1)];
            else
                s2[(rng >> 8) % 600] = (char)(rng >> 24);
        }
        lg_adapter *a = NULL;
        const char *cfgp = (it & 1) ? c2 : cfg;
        int rc = lg_adapter_parse(cfgp, cfg_len, (it & 1) ? g_st : s2, g_st_len, "mut", &base, 64, &a, &err);
        if (rc == 0) {
            ok++;
            CHECK(a != NULL);
        } else {
            failed++;
            CHECK(a == NULL && err.msg[0] && !strchr(err.msg, '\n'));
        }
        lg_adapter_free(a);
    }
    printf("mutations: %d loaded, %d rejected\n", ok, failed);
    free(c2);
    free(s2);
    free(cfg);
}

/* ---- values: weights, alpha, ranks; the config's bounds ----------------------------- */

static int read_fix(const char *dir, const char *file, char **out, size_t *len)
{
    char path[256];
    lg_err err = {{0}};
    snprintf(path, sizeof path, FIX "%s/%s", dir, file);
    int rc = lg_read_file(path, 1 << 24, out, len, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

/* dir's adapter with element el of its ti-th tensor (data order) set to the raw
 * bits (2 or 4 bytes, as the tensor's dtype): refused naming the tensor, the
 * element and what it is; or, with what == NULL, loaded. */
static void expect_weight(const char *dir, int ti, size_t el, uint32_t bits, const char *what, const char *coords)
{
    char *cfg = NULL, *st = NULL;
    size_t cl = 0, sl = 0;
    if (read_fix(dir, "adapter_config.json", &cfg, &cl) || read_fix(dir, "adapter_model.safetensors", &st, &sl)) {
        free(cfg);
        free(st);
        return;
    }
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    char name[LG_ST_MAX_NAME + 1] = "";
    if (lg_st_open_buffer(st, sl, "st", &f, &err) == 0) {
        const lg_st_tensor *t = lg_st_at(f, ti);
        size_t es = lg_dtype_size(t->dtype);
        CHECK(el < t->n_elems);
        snprintf(name, sizeof name, "%s", t->name);
        if (es == 4)
            memcpy(st + t->offset + el * 4, &bits, 4);
        else {
            uint16_t h = (uint16_t)bits;
            memcpy(st + t->offset + el * 2, &h, 2);
        }
        lg_st_close(f);
    }
    CHECK_MSG(name[0], "%s: %s", dir, err.msg);
    lg_model_config base = base_config();
    lg_adapter *a = NULL;
    int rc = lg_adapter_parse(cfg, cl, st, sl, "w", &base, 64, &a, &err);
    if (!what) {
        CHECK_MSG(rc == 0 && a, "%s: finite bits %08x refused: %s", dir, bits, err.msg);
    } else {
        char want[64];
        snprintf(want, sizeof want, "element %zu (%s) is %s;", el, coords, what);
        CHECK_MSG(rc == -1 && !a, "%s: %s at element %zu of '%s' loaded", dir, what, el, name);
        CHECK_MSG(strstr(err.msg, name) && strstr(err.msg, want) && strstr(err.msg, "adapter_model.safetensors") &&
                      !strchr(err.msg, '\n'),
                  "%s: message '%s' lacks '%s' / '%s'", dir, err.msg, name, want);
    }
    lg_adapter_free(a);
    free(cfg);
    free(st);
}

static void test_values(void)
{
    /* NaN and Inf as stored: F32 (all_linear_f32), F16 (list_f16), BF16 (default_bf16);
     * lora_A is [r, in] = [2 or 4, 64], so element 133 of an [4, 64] A is [2, 5] */
    expect_weight("all_linear_f32", 0, 0, 0x7fc00000u, "NaN", "[0, 0]");
    expect_weight("all_linear_f32", 3, 5, 0x7f800000u, "+Inf", "[2, 1]"); /* a lora_B [128, 2] */
    expect_weight("all_linear_f32", 7, 1, 0xff800000u, "-Inf", "[0, 1]");
    expect_weight("all_linear_f32", 2, 3, 0x7f800001u, "NaN", "[0, 3]"); /* signalling NaN */
    expect_weight("list_f16", 0, 133, 0x7e00u, "NaN", "[2, 5]");
    expect_weight("list_f16", 5, 0, 0x7c00u, "+Inf", "[0, 0]");
    expect_weight("list_f16", 7, 1, 0xfc00u, "-Inf", "[0, 1]");
    expect_weight("list_f16", 1, 2, 0xfe01u, "NaN", "[0, 2]");
    expect_weight("default_bf16", 0, 70, 0x7fc0u, "NaN", "[1, 6]");
    expect_weight("default_bf16", 2, 9, 0xff80u, "-Inf", "[0, 9]");
    expect_weight("default_bf16", 4, 0, 0x7f80u, "+Inf", "[0, 0]");
    expect_weight("default_bf16", 1, 1, 0xff81u, "NaN", "[0, 1]");
    /* the last element of the last tensor is checked too */
    {
        char *st = NULL;
        size_t sl = 0;
        lg_err err = {{0}};
        lg_st_file *f = NULL;
        if (read_fix("list_f16", "adapter_model.safetensors", &st, &sl) == 0 &&
            lg_st_open_buffer(st, sl, "st", &f, &err) == 0) {
            int last = lg_st_count(f) - 1;
            const lg_st_tensor *t = lg_st_at(f, last);
            char coords[32];
            snprintf(coords, sizeof coords, "[%lld, %lld]", (long long)t->shape[0] - 1, (long long)t->shape[1] - 1);
            size_t n = t->n_elems;
            lg_st_close(f);
            expect_weight("list_f16", last, n - 1, 0x7c01u, "NaN", coords);
        }
        free(st);
    }
    /* the largest finite values, zeros, subnormals: fine */
    expect_weight("all_linear_f32", 0, 0, 0x7f7fffffu, NULL, NULL);
    expect_weight("all_linear_f32", 0, 0, 0x80000000u, NULL, NULL);
    expect_weight("all_linear_f32", 0, 0, 0x00000001u, NULL, NULL);
    expect_weight("list_f16", 0, 0, 0x7bffu, NULL, NULL);
    expect_weight("list_f16", 0, 0, 0xfbffu, NULL, NULL);
    expect_weight("list_f16", 0, 0, 0x0001u, NULL, NULL);
    expect_weight("default_bf16", 0, 0, 0x7f7fu, NULL, NULL);
    expect_weight("default_bf16", 0, 0, 0xff7fu, NULL, NULL);

    /* lora_alpha and alpha_pattern: finite and > 0; r and rank_pattern >= 1 */
    static const struct { const char *extra, *needle, *needle2; } cfgs[] = {
        {"\"r\": 4, \"lora_alpha\": 0, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "expected \"lora_alpha\" to be a finite number > 0, found 0", NULL},
        {"\"r\": 4, \"lora_alpha\": -1, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "expected \"lora_alpha\" to be a finite number > 0, found -1", NULL},
        {"\"r\": 4, \"lora_alpha\": -0.0, \"target_modules\": [\"q_proj\", \"v_proj\"]", "\"lora_alpha\"", "> 0"},
        {"\"r\": 4, \"lora_alpha\": 1e-320, \"target_modules\": [\"q_proj\", \"v_proj\"]", NULL, NULL}, /* tiny but > 0 */
        {"\"r\": 4, \"lora_alpha\": NaN, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "expected \"lora_alpha\" to be a finite number, found NaN", NULL},
        {"\"r\": 4, \"lora_alpha\": Infinity, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "expected \"lora_alpha\" to be a finite number, found Infinity", NULL},
        {"\"r\": 4, \"lora_alpha\": -Infinity, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "\"lora_alpha\"", "-Infinity"},
        {"\"r\": 4, \"lora_alpha\": 1e999, \"target_modules\": [\"q_proj\", \"v_proj\"]",
         "expected \"lora_alpha\" to be a finite number, found 1e999", NULL},
        {STD ", \"alpha_pattern\": {\"q_proj\": 0}", "expected \"alpha_pattern\"[\"q_proj\"] to be a finite number > 0", NULL},
        {STD ", \"alpha_pattern\": {\"v_proj\": 16, \"q_proj\": -2.5}", "\"alpha_pattern\"[\"q_proj\"]", "found -2.5"},
        {STD ", \"alpha_pattern\": {\"q_proj\": NaN}", "expected \"alpha_pattern\"[\"q_proj\"] to be a finite number, found NaN", NULL},
        {STD ", \"alpha_pattern\": {\"q_proj\": -Infinity}", "\"alpha_pattern\"[\"q_proj\"]", "-Infinity"},
        {STD ", \"alpha_pattern\": {\"q_proj\": 1e400}", "\"alpha_pattern\"[\"q_proj\"]", "1e400"},
        {"\"r\": -1, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"]", "\"r\" to be an integer >= 1", NULL},
        {"\"r\": 99999999999999999999, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]",
         "expected \"r\" to be a 64-bit integer, found 99999999999999999999", NULL},
        {STD ", \"rank_pattern\": {\"q_proj\": -4}", "\"rank_pattern\"[\"q_proj\"] >= 1", NULL},
        {STD ", \"rank_pattern\": {\"q_proj\": 4.5}", "\"rank_pattern\"[\"q_proj\"] to be an integer", NULL},
        {STD ", \"layers_to_transform\": [0, NaN]", "expected \"layers_to_transform\"[1] to be a finite number, found NaN", NULL},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        if (!cfgs[i].needle) {
            char json[512];
            lg_adapter *a = NULL;
            lg_err err = {{0}};
            snprintf(json, sizeof json, "{\"peft_type\": \"LORA\", %s}", cfgs[i].extra);
            CHECK_MSG(parse_cfg(json, &a, &err) == 0, "%s: %s", json, err.msg);
            lg_adapter_free(a);
            continue;
        }
        expect_fail_cfg(cfgs[i].extra, cfgs[i].needle);
        if (cfgs[i].needle2)
            expect_fail_cfg(cfgs[i].extra, cfgs[i].needle2);
    }

    /* the config's bounds: size, nesting, values, number length */
    lg_model_config base = base_config();
    lg_adapter *a = NULL;
    lg_err err = {{0}};
    size_t big = LG_ADAPTER_MAX_CONFIG + 1;
    char *doc = malloc(big + 64);
    if (!doc) {
        CHECK_MSG(0, "out of memory");
        return;
    }
    int o = sprintf(doc, "{\"peft_type\": \"LORA\", " STD ", \"x\": \"");
    memset(doc + o, 'x', big - (size_t)o - 2);
    memcpy(doc + big - 2, "\"}", 2);
    CHECK(lg_adapter_parse(doc, big, g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 && !a &&
          strstr(err.msg, "adapter_config.json: 1048577 bytes, expected at most 1048576"));
    /* 1 MiB exactly is fine */
    memcpy(doc + big - 3, "\"}", 2);
    CHECK_MSG(lg_adapter_parse(doc, big - 1, g_st, g_st_len, "mem", &base, 64, &a, &err) == 0, "%s", err.msg);
    lg_adapter_free(a);
    a = NULL;
    /* nesting: 32 levels are fine (PEFT writes 3), 33 are not */
    o = sprintf(doc, "{\"peft_type\": \"LORA\", " STD ", \"x\": ");
    memset(doc + o, '[', 31);
    memset(doc + o + 31, ']', 31);
    strcpy(doc + o + 62, "}");
    CHECK_MSG(lg_adapter_parse(doc, strlen(doc), g_st, g_st_len, "mem", &base, 64, &a, &err) == 0, "%s", err.msg);
    lg_adapter_free(a);
    a = NULL;
    memset(doc + o, '[', 32);
    memset(doc + o + 32, ']', 32);
    strcpy(doc + o + 64, "}");
    CHECK(lg_adapter_parse(doc, strlen(doc), g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 &&
          strstr(err.msg, "adapter_config.json: nesting deeper than 32 levels") && strstr(err.msg, "\"x\"[0][0]"));
    memset(doc, '[', 500000);
    CHECK(lg_adapter_parse(doc, 500000, g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 &&
          strstr(err.msg, "nesting deeper than 32 levels (at byte 32"));
    memset(doc, '{', 500000);
    CHECK(lg_adapter_parse(doc, 500000, g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 &&
          strstr(err.msg, "nesting deeper than 32 levels"));
    /* values: the {"a":[[],[],...]} of the outside probe, within 1 MiB */
    o = sprintf(doc, "{\"peft_type\": \"LORA\", " STD ", \"a\": [");
    for (int i = 0; i < 300000; i++)
        o += sprintf(doc + o, "%s[]", i ? "," : "");
    o += sprintf(doc + o, "]}");
    CHECK(lg_adapter_parse(doc, (size_t)o, g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 &&
          strstr(err.msg, "adapter_config.json: more than 65536 JSON values"));
    o = sprintf(doc, "{\"peft_type\": \"LORA\", " STD ", \"x\": 1");
    memset(doc + o, '0', 600);
    strcpy(doc + o + 600, "}");
    CHECK(lg_adapter_parse(doc, strlen(doc), g_st, g_st_len, "mem", &base, 64, &a, &err) == -1 &&
          strstr(err.msg, "expected \"x\" to be a number of at most 512 characters"));
    free(doc);
}

int main(void)
{
    test_valid();
    test_reject_files();
    test_reject_json();
    test_values();
    test_mutations();
    free(g_st);
    TEST_DONE();
}
