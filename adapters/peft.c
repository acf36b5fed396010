/*
 * peft.c — PEFT LoRA adapter loading; the rules are in peft.h.
 *
 * Order of work (each step fails with one line, nothing is allocated for the
 * result before the last step):
 *   0. adapter_config.json is bounded before jansson sees it: at most
 *      LG_ADAPTER_MAX_CONFIG bytes (1 MiB), and a scan that allocates
 *      nothing (lg_cfg_prescan) refuses nesting deeper than
 *      LG_PEFT_MAX_DEPTH (32; PEFT writes 3), more than LG_PEFT_MAX_VALUES
 *      (65,536) JSON values, and — naming the field, which jansson's own
 *      error would not — the NaN / Infinity that Python's json writes and
 *      numbers that overflow a double or a 64-bit integer. So the DOM is at
 *      most ~65,536 small nodes (a few MiB) whatever the upload;
 *   1. adapter_config.json -> lg_peft_cfg (types checked, variants refused,
 *      regexes compiled; lora_alpha and every alpha_pattern value finite and
 *      > 0, r and every rank_pattern value >= 1);
 *   2. every module path of a Llama causal LM ("model.layers.3.mlp.up_proj",
 *      but also "model.norm", "lm_head", ...) is run through PEFT's selection
 *      rules -> a selected[layer][target] table; selecting a non-linear or an
 *      embedding module is an error, as PEFT itself would raise;
 *   3. every tensor name is parsed into (layer, target, A|B) -> slots table;
 *   4. slots vs selection vs base shapes vs ranks;
 *   5. one aligned block is filled, modules sorted by (layer, target) come
 *      out of the slot order for free; every element of every lora_A and
 *      lora_B is checked to be finite in its stored dtype (F32, F16, BF16:
 *      exponent bits all ones is NaN or +/-Inf), the first bad one named by
 *      tensor and index.
 * The safetensors header itself is parsed by engine/model/safetensors.c in memory
 * bounded by 3 x its size (no JSON DOM), so nothing in an upload can make
 * this parse cost more than a small multiple of the upload.
 * Regexes come from untrusted files: PCRE2 runs them under a match limit and
 * module paths are short, so a hostile pattern costs at most milliseconds.
 */
#include "adapters/peft.h"
#include "engine/model/model_arch.h"
#include "engine/model/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define LG_PEFT_MAX_PATTERN 4096   /* bytes of one regex from the config */
#define LG_PEFT_MAX_LIST 4096      /* entries of any list / dict in the config */
#define LG_PEFT_MAX_LAYERS 100000
#define LG_PEFT_ALIGN 64
#define LG_PEFT_MAX_DEPTH 32       /* nesting of adapter_config.json */
#define LG_PEFT_MAX_VALUES 65536   /* JSON values in adapter_config.json */
#define LG_PEFT_MAX_NUMBER 512     /* characters of one number in adapter_config.json */

static const char *const lg_target_names[LG_LORA_N_TARGETS] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};

const char *lg_lora_target_name(lg_lora_target t)
{
    return (unsigned)t < LG_LORA_N_TARGETS ? lg_target_names[t] : "?";
}

static bool lg_target_is_attn(lg_lora_target t) { return t <= LG_LORA_O; }

/* The module that holds target t in base b: its own, or in a fused base (Phi-3) qkv_proj for q, k, v and
 * gate_up_proj for gate, up; NULL for the targets that share their group's first (k, v, up). */
static const char *lg_module_name(const lg_model_config *b, lg_lora_target t)
{
    if (!b->fused_qkv)
        return lg_target_names[t];
    switch (t) {
    case LG_LORA_Q: return "qkv_proj";
    case LG_LORA_K:
    case LG_LORA_V:
    case LG_LORA_UP: return NULL;
    case LG_LORA_GATE: return "gate_up_proj";
    default: return lg_target_names[t];
    }
}

/* A fused module's targets: [first, first + count), and target t's first output row in it. */
static void lg_fused_group(const lg_model_config *b, lg_lora_target t, lg_lora_target *first, int *count, int *row0)
{
    const int q = b->n_heads * b->head_dim, kv = b->n_kv_heads * b->head_dim;
    *first = t;
    *count = 1;
    *row0 = 0;
    if (!b->fused_qkv)
        return;
    if (t <= LG_LORA_V) {
        *first = LG_LORA_Q;
        *count = 3;
        *row0 = t == LG_LORA_Q ? 0 : t == LG_LORA_K ? q : q + kv;
    } else if (t == LG_LORA_GATE || t == LG_LORA_UP) {
        *first = LG_LORA_GATE;
        *count = 2;
        *row0 = t == LG_LORA_GATE ? 0 : b->d_ff;
    }
}

void lg_lora_target_dims(const lg_model_config *b, lg_lora_target t, int *in_dim, int *out_dim)
{
    int q = b->n_heads * b->head_dim, kv = b->n_kv_heads * b->head_dim;
    int in = 0, out = 0;
    switch (t) {
    case LG_LORA_Q: in = b->d_model; out = q; break;
    case LG_LORA_K:
    case LG_LORA_V: in = b->d_model; out = kv; break;
    case LG_LORA_O: in = q; out = b->d_model; break;
    case LG_LORA_GATE:
    case LG_LORA_UP: in = b->d_model; out = b->d_ff; break;
    case LG_LORA_DOWN: in = b->d_ff; out = b->d_model; break;
    default: break;
    }
    *in_dim = in;
    *out_dim = out;
}

struct lg_adapter {
    char name[LG_ADAPTER_MAX_NAME + 1];
    char digest[65];
    lg_dtype dtype;
    size_t weight_bytes;
    int max_rank;
    int n_layers;
    int n_modules;
    lg_lora_module *modules; /* [n_modules] sorted by (layer, target) */
    int *index;              /* [n_layers * LG_LORA_N_TARGETS] module index or -1 */
    void *data;              /* one block: every A and B, each 64-byte aligned */
};

/* ---- regexes ---------------------------------------------------------------- */

typedef struct lg_rx {
    pcre2_match_context *mctx;
    pcre2_match_data *md;
} lg_rx;

/* Compiles pre + pat + post (pat is the user's part, quoted in messages). */
static int lg_rx_compile(const char *what, const char *pre, const char *pat, const char *post,
                         pcre2_code **out, lg_err *err)
{
    *out = NULL;
    size_t n = strlen(pat);
    if (n > LG_PEFT_MAX_PATTERN)
        return lg_fail(err, "expected %s of at most %d bytes, found %zu bytes", what, LG_PEFT_MAX_PATTERN, n);
    size_t len = strlen(pre) + n + strlen(post) + 1;
    char *full = malloc(len);
    if (!full)
        return lg_fail(err, "out of memory compiling %s", what);
    snprintf(full, len, "%s%s%s", pre, pat, post);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)full, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    free(full);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return lg_fail(err, "expected a valid regular expression in %s, found '%s' (%s)", what, pat, (char *)msg);
    }
    *out = re;
    return 0;
}

/* Anchored at the start; `full` also anchors at the end (Python re.fullmatch,
 * not just re.match). group1 (optional) receives group 1 as a number, or
 * INT_MAX if it does not fit. */
static int lg_rx_match(lg_rx *rx, const pcre2_code *re, const char *s, bool full, bool *hit, long *group1,
                       lg_err *err)
{
    uint32_t opt = PCRE2_ANCHORED | (full ? PCRE2_ENDANCHORED : 0);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, opt, rx->md, rx->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) {
        *hit = false;
        return 0;
    }
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return lg_fail(err, "regular expression from adapter_config.json failed on '%s': %s", s, (char *)msg);
    }
    *hit = true;
    if (group1) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
        long v = 0;
        if (rc < 2 || ov[2] == PCRE2_UNSET)
            v = INT_MAX;
        for (PCRE2_SIZE i = ov[2]; v != INT_MAX && i < ov[3]; i++) {
            char c = s[i];
            if (c < '0' || c > '9' || v > (INT_MAX - 9) / 10)
                v = INT_MAX;
            else
                v = v * 10 + (c - '0');
        }
        *group1 = v;
    }
    return 0;
}

/* ---- config ------------------------------------------------------------------ */

typedef struct lg_pattern {
    const char *key;   /* borrowed from the JSON */
    pcre2_code *re;    /* (.*\.)?(key)$ */
    double value;
} lg_pattern;

typedef enum { LG_TM_LIST, LG_TM_REGEX } lg_tm_kind;

typedef struct lg_peft_cfg {
    int n_layers;                /* of the base model */
    int r;
    double alpha;
    bool use_rslora;
    lg_tm_kind tm_kind;
    const char *tm_regex_src;
    pcre2_code *tm_regex;
    const char **tm_list;        /* borrowed strings */
    int n_tm;
    bool all_linear;
    pcre2_code *ex_regex;        /* exclude_modules as a string */
    const char **ex_list;
    int n_ex;
    bool use_layers;             /* layers_to_transform given and not [] */
    bool *layer_on;              /* [n_layers] */
    pcre2_code **lp;             /* compiled layers_pattern regexes (default if none given) */
    int n_lp;
    lg_pattern *rank_pat;
    int n_rank_pat;
    lg_pattern *alpha_pat;
    int n_alpha_pat;
} lg_peft_cfg;

static void lg_cfg_free(lg_peft_cfg *c)
{
    pcre2_code_free(c->tm_regex);
    pcre2_code_free(c->ex_regex);
    free(c->tm_list);
    free(c->ex_list);
    free(c->layer_on);
    for (int i = 0; i < c->n_lp; i++)
        pcre2_code_free(c->lp[i]);
    free(c->lp);
    for (int i = 0; i < c->n_rank_pat; i++)
        pcre2_code_free(c->rank_pat[i].re);
    free(c->rank_pat);
    for (int i = 0; i < c->n_alpha_pat; i++)
        pcre2_code_free(c->alpha_pat[i].re);
    free(c->alpha_pat);
}

static const char *lg_json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Field that is absent or null reads as NULL. */
static json_t *lg_opt(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int lg_cfg_bool(json_t *root, const char *key, bool *out, lg_err *err)
{
    json_t *v = lg_opt(root, key);
    *out = false;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return lg_fail(err, "adapter_config.json: expected \"%s\" to be true or false, found %s", key, lg_json_kind(v));
    *out = json_is_true(v);
    return 0;
}

/* A string, or a list of strings (copied as borrowed pointers into *list). */
static int lg_cfg_str_or_list(json_t *v, const char *key, const char **str, const char ***list, int *n,
                              lg_err *err)
{
    *str = NULL;
    *list = NULL;
    *n = 0;
    if (json_is_string(v)) {
        *str = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return lg_fail(err, "adapter_config.json: expected \"%s\" to be a string or a list of strings, found %s",
                       key, lg_json_kind(v));
    size_t m = json_array_size(v);
    if (m > LG_PEFT_MAX_LIST)
        return lg_fail(err, "adapter_config.json: expected at most %d entries in \"%s\", found %zu",
                       LG_PEFT_MAX_LIST, key, m);
    *list = calloc(m ? m : 1, sizeof **list);
    if (!*list)
        return lg_fail(err, "out of memory");
    for (size_t i = 0; i < m; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e))
            return lg_fail(err, "adapter_config.json: expected \"%s\"[%zu] to be a string, found %s", key, i,
                           lg_json_kind(e));
        (*list)[i] = json_string_value(e);
    }
    *n = (int)m;
    return 0;
}

/* Fields that switch on a LoRA variant whose math we do not implement: null,
 * false, [] and {} are fine, anything else is refused. */
static int lg_cfg_refuse_variant(json_t *root, const char *key, const char *what, lg_err *err)
{
    json_t *v = lg_opt(root, key);
    if (!v || json_is_false(v) || (json_is_array(v) && json_array_size(v) == 0) ||
        (json_is_object(v) && json_object_size(v) == 0))
        return 0;
    return lg_fail(err, "adapter_config.json: %s (\"%s\") is not supported", what, key);
}

static int lg_cfg_patterns(json_t *root, const char *key, bool integer, lg_pattern **out, int *n, lg_err *err)
{
    *out = NULL;
    *n = 0;
    json_t *v = lg_opt(root, key);
    if (!v)
        return 0;
    if (!json_is_object(v))
        return lg_fail(err, "adapter_config.json: expected \"%s\" to be an object, found %s", key, lg_json_kind(v));
    size_t m = json_object_size(v);
    if (m > LG_PEFT_MAX_LIST)
        return lg_fail(err, "adapter_config.json: expected at most %d entries in \"%s\", found %zu",
                       LG_PEFT_MAX_LIST, key, m);
    *out = calloc(m ? m : 1, sizeof **out);
    if (!*out)
        return lg_fail(err, "out of memory");
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e) { /* jansson keeps file order, as Python dicts do */
        lg_pattern *p = &(*out)[*n];
        if (integer ? !json_is_integer(e) : !json_is_number(e))
            return lg_fail(err, "adapter_config.json: expected \"%s\"[\"%s\"] to be %s, found %s", key, k,
                           integer ? "an integer" : "a number", lg_json_kind(e));
        p->value = json_number_value(e);
        if (!integer && (!isfinite(p->value) || p->value <= 0))
            return lg_fail(err, "adapter_config.json: expected \"%s\"[\"%.60s\"] to be a finite number > 0, found %g",
                           key, k, p->value);
        if (integer && (json_integer_value(e) < 1 || json_integer_value(e) > INT_MAX))
            return lg_fail(err, "adapter_config.json: expected \"%s\"[\"%s\"] >= 1, found %lld", key, k,
                           (long long)json_integer_value(e));
        p->key = k;
        char what[64];
        snprintf(what, sizeof what, "a \"%s\" key", key);
        if (lg_rx_compile(what, "(.*\\.)?(", k, ")$", &p->re, err))
            return -1;
        (*n)++;
    }
    return 0;
}

/* ---- the config's bounds, before jansson -------------------------------------- */

typedef struct lg_scan_level {
    bool obj;           /* object (else list) */
    const char *key;    /* current member's key (raw JSON text), objects only */
    size_t key_len;
    size_t index;       /* current element, lists only */
} lg_scan_level;

/* "lora_alpha", "alpha_pattern"["q_proj"], "target_modules"[2]: where the
 * scan is, for messages; control bytes shown as '?'. */
static void lg_scan_path(const lg_scan_level *lv, int depth, char *buf, size_t size)
{
    size_t o = 0;
    for (int d = 0; d < depth && o + 80 < size; d++) { /* each level writes < 80 bytes */
        if (lv[d].obj && !lv[d].key)
            break;
        if (!lv[d].obj) {
            o += (size_t)snprintf(buf + o, size - o, "[%zu]", lv[d].index);
            continue;
        }
        if (d > 0)
            buf[o++] = '[';
        buf[o++] = '"';
        for (size_t i = 0; i < lv[d].key_len && i < 60; i++) {
            unsigned char c = (unsigned char)lv[d].key[i];
            buf[o++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
        }
        buf[o++] = '"';
        if (d > 0)
            buf[o++] = ']';
    }
    buf[o] = 0;
    if (!o)
        snprintf(buf, size, "the document");
}

/* One pass over the raw bytes that allocates nothing: depth, value count,
 * non-finite and overflowing numbers. Anything else that is wrong is left to
 * jansson's parse, which reports it with a line and column. */
static int lg_cfg_prescan(const char *s, size_t n, lg_err *err)
{
    lg_scan_level lv[LG_PEFT_MAX_DEPTH];
    int depth = 0;
    size_t values = 1;
    const char *last = NULL; /* the last string's text, a key once ':' follows */
    size_t last_len = 0;
    char path[200];
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            if (j >= n)
                return 0; /* unterminated: jansson says where */
            last = s + i + 1;
            last_len = j - i - 1;
            i = j + 1;
            continue;
        }
        if (c == '[' || c == '{') {
            if (depth == LG_PEFT_MAX_DEPTH) {
                lg_scan_path(lv, depth, path, sizeof path);
                return lg_fail(err, "adapter_config.json: nesting deeper than %d levels (at byte %zu, in %s)",
                               LG_PEFT_MAX_DEPTH, i, path);
            }
            lv[depth++] = (lg_scan_level){.obj = c == '{'};
            values++;
        } else if (c == ']' || c == '}') {
            if (depth > 0)
                depth--;
        } else if (c == ',') {
            values++;
            if (depth > 0) {
                lv[depth - 1].index++;
                lv[depth - 1].key = NULL;
            }
        } else if (c == ':') {
            if (depth > 0) {
                lv[depth - 1].key = last;
                lv[depth - 1].key_len = last_len;
            }
        } else if (c == 'N' || c == 'I' || (c == '-' && i + 1 < n && s[i + 1] == 'I')) {
            static const char *const words[] = {"NaN", "Infinity", "-Infinity"};
            for (int w = 0; w < 3; w++) {
                size_t len = strlen(words[w]);
                if (n - i >= len && !memcmp(s + i, words[w], len)) {
                    lg_scan_path(lv, depth, path, sizeof path);
                    return lg_fail(err, "adapter_config.json: expected %s to be a finite number, found %s", path,
                                   words[w]);
                }
            }
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            bool real = false;
            while (j < n && ((s[j] >= '0' && s[j] <= '9') || s[j] == '-' || s[j] == '+' || s[j] == '.' ||
                             s[j] == 'e' || s[j] == 'E')) {
                real |= s[j] == '.' || s[j] == 'e' || s[j] == 'E';
                j++;
            }
            size_t len = j - i;
            if (len > LG_PEFT_MAX_NUMBER) {
                lg_scan_path(lv, depth, path, sizeof path);
                return lg_fail(err,
                               "adapter_config.json: expected %s to be a number of at most %d characters, found %zu",
                               path, LG_PEFT_MAX_NUMBER, len);
            }
            char num[LG_PEFT_MAX_NUMBER + 1];
            memcpy(num, s + i, len);
            num[len] = 0;
            errno = 0;
            char *e = NULL;
            bool bad;
            if (real) {
                double d = strtod(num, &e);
                bad = !isfinite(d);
            } else {
                (void)strtoll(num, &e, 10);
                bad = errno == ERANGE;
            }
            if (bad && e == num + len) {
                lg_scan_path(lv, depth, path, sizeof path);
                return lg_fail(err, "adapter_config.json: expected %s to be a %s, found %.40s%s (out of range)", path,
                               real ? "finite number" : "64-bit integer", num, len > 40 ? "..." : "");
            }
            i = j;
            continue;
        }
        if (values > LG_PEFT_MAX_VALUES)
            return lg_fail(err, "adapter_config.json: more than %d JSON values (at byte %zu)", LG_PEFT_MAX_VALUES, i);
        i++;
    }
    return 0;
}

static int lg_cfg_parse(json_t *root, const lg_model_config *base, lg_peft_cfg *c, lg_err *err)
{
    c->n_layers = base->n_layers;
    if (!json_is_object(root))
        return lg_fail(err, "adapter_config.json: expected a JSON object, found %s", lg_json_kind(root));

    json_t *v = lg_opt(root, "peft_type");
    if (!v || !json_is_string(v))
        return lg_fail(err, "adapter_config.json: expected \"peft_type\": \"LORA\", found %s",
                       v ? lg_json_kind(v) : "none");
    if (strcmp(json_string_value(v), "LORA"))
        return lg_fail(err, "adapter_config.json: expected \"peft_type\": \"LORA\", found \"%s\"",
                       json_string_value(v));

    v = lg_opt(root, "r");
    if (!v || !json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX)
        return lg_fail(err, "adapter_config.json: expected \"r\" to be an integer >= 1, found %s",
                       !v ? "none" : json_is_integer(v) ? "a smaller integer" : lg_json_kind(v));
    c->r = (int)json_integer_value(v);

    v = lg_opt(root, "lora_alpha");
    if (!v || !json_is_number(v))
        return lg_fail(err, "adapter_config.json: expected \"lora_alpha\" to be a number, found %s",
                       v ? lg_json_kind(v) : "none");
    c->alpha = json_number_value(v);
    if (!isfinite(c->alpha) || c->alpha <= 0)
        return lg_fail(err, "adapter_config.json: expected \"lora_alpha\" to be a finite number > 0, found %g",
                       c->alpha);

    bool b;
    if (lg_cfg_bool(root, "use_rslora", &c->use_rslora, err) || lg_cfg_bool(root, "fan_in_fan_out", &b, err))
        return -1;
    /* fan_in_fan_out: no effect on the stored layout, see peft.h. */

    if (lg_cfg_bool(root, "use_dora", &b, err))
        return -1;
    if (b)
        return lg_fail(err, "adapter_config.json: DoRA adapters (\"use_dora\": true) are not supported");
    if (lg_cfg_bool(root, "lora_bias", &b, err))
        return -1;
    if (b)
        return lg_fail(err, "adapter_config.json: LoRA bias (\"lora_bias\": true) is not supported");

    v = lg_opt(root, "bias");
    if (v && !json_is_string(v))
        return lg_fail(err, "adapter_config.json: expected \"bias\" to be a string, found %s", lg_json_kind(v));
    if (v && strcmp(json_string_value(v), "none"))
        return lg_fail(err, "adapter_config.json: expected \"bias\": \"none\", found \"%s\" (trained biases are not supported)",
                       json_string_value(v));

    v = lg_opt(root, "modules_to_save");
    if (v && !json_is_array(v))
        return lg_fail(err, "adapter_config.json: expected \"modules_to_save\" to be a list or null, found %s",
                       lg_json_kind(v));
    if (v && json_array_size(v) > 0) {
        json_t *e = json_array_get(v, 0);
        return lg_fail(err, "adapter_config.json: modules_to_save is not supported (found %zu, first %s%s%s): "
                       "only LoRA on q/k/v/o/gate/up/down_proj can be served",
                       json_array_size(v), json_is_string(e) ? "\"" : "",
                       json_is_string(e) ? json_string_value(e) : lg_json_kind(e), json_is_string(e) ? "\"" : "");
    }

    static const struct { const char *key, *what; } variants[] = {
        {"use_qalora", "QALoRA"},
        {"alora_invocation_tokens", "aLoRA"},
        {"target_parameters", "LoRA on parameters"},
        {"layer_replication", "layer replication"},
        {"trainable_token_indices", "trainable tokens"},
        {"velora_config", "VeLoRA"},
        {"kasa_config", "KaSA"},
        {"monteclora_config", "MonteCLoRA"},
        {"arrow_config", "Arrow routing"},
        {"use_bdlora", "BD-LoRA"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (lg_cfg_refuse_variant(root, variants[i].key, variants[i].what, err))
            return -1;

    /* target_modules */
    v = lg_opt(root, "target_modules");
    if (!v)
        return lg_fail(err, "adapter_config.json: expected \"target_modules\" (a list of module names or a regex), found none");
    const char *s;
    if (lg_cfg_str_or_list(v, "target_modules", &s, &c->tm_list, &c->n_tm, err))
        return -1;
    if (s && !strcasecmp(s, "all-linear")) {
        c->all_linear = true;
        c->tm_kind = LG_TM_LIST;
        c->tm_list = calloc(LG_LORA_N_TARGETS, sizeof *c->tm_list);
        if (!c->tm_list)
            return lg_fail(err, "out of memory");
        c->n_tm = 0;
        for (int t = 0; t < LG_LORA_N_TARGETS; t++)
            if (lg_module_name(base, (lg_lora_target)t))
                c->tm_list[c->n_tm++] = lg_module_name(base, (lg_lora_target)t);
    } else if (s) {
        c->tm_kind = LG_TM_REGEX;
        c->tm_regex_src = s;
        if (lg_rx_compile("\"target_modules\"", "", s, "", &c->tm_regex, err))
            return -1;
    } else {
        c->tm_kind = LG_TM_LIST;
    }

    /* exclude_modules */
    v = lg_opt(root, "exclude_modules");
    if (v) {
        if (lg_cfg_str_or_list(v, "exclude_modules", &s, &c->ex_list, &c->n_ex, err))
            return -1;
        if (s && lg_rx_compile("\"exclude_modules\"", "", s, "", &c->ex_regex, err))
            return -1;
    }

    /* layers_to_transform / layers_pattern, with LoraConfig.__post_init__'s rules */
    json_t *ltt = lg_opt(root, "layers_to_transform");
    json_t *lpat = lg_opt(root, "layers_pattern");
    bool lpat_set = lpat && !(json_is_string(lpat) && !*json_string_value(lpat)) &&
                    !(json_is_array(lpat) && json_array_size(lpat) == 0);
    if (json_is_string(v = lg_opt(root, "target_modules")) && (ltt || lpat))
        return lg_fail(err, "adapter_config.json: expected no \"%s\" when \"target_modules\" is a string (as PEFT)",
                       ltt ? "layers_to_transform" : "layers_pattern");
    if (lpat_set && !ltt)
        return lg_fail(err, "adapter_config.json: expected \"layers_to_transform\" with \"layers_pattern\", found none");
    if (ltt) {
        size_t m = json_is_array(ltt) ? json_array_size(ltt) : 1;
        if (!json_is_integer(ltt) && !json_is_array(ltt))
            return lg_fail(err, "adapter_config.json: expected \"layers_to_transform\" to be an integer or a list of integers, found %s",
                           lg_json_kind(ltt));
        c->use_layers = m > 0;
        c->layer_on = calloc((size_t)base->n_layers, sizeof *c->layer_on);
        if (!c->layer_on)
            return lg_fail(err, "out of memory");
        for (size_t i = 0; i < m; i++) {
            json_t *e = json_is_array(ltt) ? json_array_get(ltt, i) : ltt;
            if (!json_is_integer(e))
                return lg_fail(err, "adapter_config.json: expected \"layers_to_transform\"[%zu] to be an integer, found %s",
                               i, lg_json_kind(e));
            json_int_t l = json_integer_value(e);
            if (l < 0 || l >= base->n_layers)
                return lg_fail(err, "adapter_config.json: layers_to_transform entry %lld is out of range (base model has %d layers)",
                               (long long)l, base->n_layers);
            c->layer_on[l] = true;
        }
    }
    if (lpat && !json_is_string(lpat) && !json_is_array(lpat))
        return lg_fail(err, "adapter_config.json: expected \"layers_pattern\" to be a string or a list of strings, found %s",
                       lg_json_kind(lpat));
    if (c->use_layers) {
        const char **pl = NULL;
        int npl = 0;
        if (lpat && lg_cfg_str_or_list(lpat, "layers_pattern", &s, &pl, &npl, err)) {
            free(pl);
            return -1;
        }
        if (lpat && s) {
            pl = calloc(1, sizeof *pl);
            if (!pl)
                return lg_fail(err, "out of memory");
            pl[0] = s;
            npl = *s ? 1 : 0;
        }
        c->lp = calloc(npl ? (size_t)npl : 1, sizeof *c->lp);
        if (!c->lp) {
            free(pl);
            return lg_fail(err, "out of memory");
        }
        int rc = 0;
        if (npl == 0) /* PEFT: no pattern means any "<name>.<index>." segment */
            rc = lg_rx_compile("the default layers pattern", ".*\\.[^.]*\\.(\\d+)\\.", "", "", &c->lp[c->n_lp++], err);
        for (int i = 0; i < npl && !rc; i++)
            rc = lg_rx_compile("\"layers_pattern\"", ".*\\.", pl[i], "\\.(\\d+)\\.", &c->lp[c->n_lp++], err);
        free(pl);
        if (rc)
            return -1;
    }

    if (lg_cfg_patterns(root, "rank_pattern", true, &c->rank_pat, &c->n_rank_pat, err) ||
        lg_cfg_patterns(root, "alpha_pattern", false, &c->alpha_pat, &c->n_alpha_pat, err))
        return -1;
    return 0;
}

/* ---- selection: PEFT's check_target_module_exists ------------------------------ */

static bool lg_ends_with_dot(const char *key, const char *t)
{
    size_t n = strlen(key), m = strlen(t);
    return n > m && key[n - m - 1] == '.' && !memcmp(key + n - m, t, m);
}

static bool lg_in_list(const char *key, const char **list, int n, bool suffix)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(key, list[i]) || (suffix && lg_ends_with_dot(key, list[i])))
            return true;
    return false;
}

static int lg_selected(const lg_peft_cfg *c, lg_rx *rx, const char *key, bool *sel, lg_err *err)
{
    bool hit;
    *sel = false;
    if (c->ex_regex) {
        if (lg_rx_match(rx, c->ex_regex, key, true, &hit, NULL, err))
            return -1;
        if (hit)
            return 0;
    } else if (lg_in_list(key, c->ex_list, c->n_ex, true)) {
        return 0;
    }
    if (c->tm_kind == LG_TM_REGEX)
        return lg_rx_match(rx, c->tm_regex, key, true, sel, NULL, err);
    if (lg_in_list(key, c->tm_list, c->n_tm, false)) {
        *sel = true; /* named exactly: no layer filter */
        return 0;
    }
    if (!lg_in_list(key, c->tm_list, c->n_tm, true))
        return 0;
    if (!c->use_layers) {
        *sel = true;
        return 0;
    }
    for (int i = 0; i < c->n_lp; i++) {
        long idx;
        if (lg_rx_match(rx, c->lp[i], key, false, &hit, &idx, err))
            return -1;
        if (hit) {
            *sel = idx >= 0 && idx < c->n_layers && c->layer_on[idx];
            return 0;
        }
    }
    return 0;
}

/* Every module path of a Llama causal LM, as torch named_modules() lists them. */
enum { LG_MOD_LINEAR, LG_MOD_EMBED, LG_MOD_OTHER };
typedef struct lg_modkey {
    char key[96];
    int kind;
    int layer;
    lg_lora_target target;
} lg_modkey;

static int lg_universe(const lg_model_config *b, lg_modkey **out, int *n_out, lg_err *err)
{
    static const char *const per_layer_other[] = {"", ".self_attn", ".mlp", ".mlp.act_fn", ".input_layernorm",
                                                  ".post_attention_layernorm"};
    static const char *const top[][2] = {
        {"", "o"}, {"model", "o"}, {"model.embed_tokens", "e"}, {"model.layers", "o"},
        {"model.norm", "o"}, {"model.rotary_emb", "o"}, {"lm_head", "e"},
    };
    int nt = (int)(sizeof top / sizeof top[0]), np = (int)(sizeof per_layer_other / sizeof per_layer_other[0]);
    size_t n = (size_t)nt + (size_t)b->n_layers * (size_t)(np + LG_LORA_N_TARGETS);
    lg_modkey *m = calloc(n, sizeof *m);
    if (!m)
        return lg_fail(err, "out of memory");
    int k = 0;
    for (int i = 0; i < nt; i++, k++) {
        snprintf(m[k].key, sizeof m[k].key, "%s", top[i][0]);
        m[k].kind = top[i][1][0] == 'e' ? LG_MOD_EMBED : LG_MOD_OTHER;
        m[k].layer = -1;
    }
    for (int l = 0; l < b->n_layers; l++) {
        for (int i = 0; i < np; i++, k++) {
            snprintf(m[k].key, sizeof m[k].key, "model.layers.%d%s", l, per_layer_other[i]);
            m[k].kind = LG_MOD_OTHER;
            m[k].layer = l;
        }
        for (int t = 0; t < LG_LORA_N_TARGETS; t++) {
            const char *mod = lg_module_name(b, (lg_lora_target)t);
            if (!mod)
                continue; /* in its fused group's module */
            snprintf(m[k].key, sizeof m[k].key, "model.layers.%d.%s.%s", l,
                     lg_target_is_attn((lg_lora_target)t) ? "self_attn" : "mlp", mod);
            m[k].kind = LG_MOD_LINEAR;
            m[k].layer = l;
            m[k].target = (lg_lora_target)t;
            k++;
        }
    }
    *out = m;
    *n_out = k;
    return 0;
}

static void lg_describe_targets(const lg_peft_cfg *c, char *buf, size_t size)
{
    if (c->tm_kind == LG_TM_REGEX) {
        snprintf(buf, size, "regex '%.120s'", c->tm_regex_src);
        return;
    }
    size_t o = (size_t)snprintf(buf, size, c->all_linear ? "\"all-linear\" = [" : "[");
    for (int i = 0; i < c->n_tm && i < 8 && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s'%.40s'", i ? ", " : "", c->tm_list[i]);
    if (o < size)
        snprintf(buf + o, size - o, "%s]%s%s", c->n_tm > 8 ? ", ..." : "",
                 c->use_layers ? " with layers_to_transform" : "", c->ex_regex || c->n_ex ? " minus exclude_modules" : "");
}

/* selected[layer * LG_LORA_N_TARGETS + target] = PEFT would put LoRA there. */
static int lg_select(const lg_peft_cfg *c, const lg_model_config *b, lg_rx *rx, bool *selected, int *n_sel,
                     lg_err *err)
{
    lg_modkey *u = NULL;
    int n = 0;
    if (lg_universe(b, &u, &n, err))
        return -1;
    int rc = 0;
    *n_sel = 0;
    /* list entries first, so that a typo or an embedding target is named as such */
    for (int i = 0; i < c->n_tm && !c->all_linear && !rc; i++) {
        int kind = -1;
        for (int k = 0; k < n; k++)
            if (!strcmp(u[k].key, c->tm_list[i]) || lg_ends_with_dot(u[k].key, c->tm_list[i]))
                if (kind != LG_MOD_EMBED)
                    kind = u[k].kind;
        if (kind == LG_MOD_EMBED)
            rc = lg_fail(err, "embedding/lm_head LoRA is not supported: target_modules names '%.60s'", c->tm_list[i]);
        else if (kind < 0)
            rc = lg_fail(err, "unknown module '%.60s' in target_modules: expected q_proj, k_proj, v_proj, o_proj, "
                         "gate_proj, up_proj, down_proj or a path to one in a %d-layer model",
                         c->tm_list[i], b->n_layers);
    }
    for (int k = 0; k < n && !rc; k++) {
        bool sel;
        if ((rc = lg_selected(c, rx, u[k].key, &sel, err)) || !sel)
            continue;
        if (u[k].kind == LG_MOD_EMBED)
            rc = lg_fail(err, "embedding/lm_head LoRA is not supported: target_modules selects '%s'", u[k].key);
        else if (u[k].kind == LG_MOD_OTHER)
            rc = lg_fail(err, "target_modules selects %s%s%s, which is not a linear layer LoRA can adapt "
                         "(expected only q/k/v/o/gate/up/down_proj)", *u[k].key ? "'" : "",
                         *u[k].key ? u[k].key : "the whole model (module path '')", *u[k].key ? "'" : "");
        else {
            lg_lora_target f;
            int cnt, row0;
            lg_fused_group(b, u[k].target, &f, &cnt, &row0);
            for (int i = 0; i < cnt; i++)
                selected[u[k].layer * LG_LORA_N_TARGETS + f + i] = true;
            (*n_sel)++;
        }
    }
    free(u);
    if (!rc && *n_sel == 0) {
        char d[400];
        lg_describe_targets(c, d, sizeof d);
        rc = lg_fail(err, "adapter matches no module of the base model (target_modules %s)", d);
    }
    return rc;
}

/* PEFT get_pattern_key + dict lookup: the value of the first key matching
 * key, or dflt. *which names the key for messages. */
static int lg_pattern_value(lg_rx *rx, const lg_pattern *p, int n, const char *key, double dflt, double *out,
                            const char **which, lg_err *err)
{
    *out = dflt;
    *which = NULL;
    for (int i = 0; i < n; i++) {
        bool hit;
        if (lg_rx_match(rx, p[i].re, key, false, &hit, NULL, err))
            return -1;
        if (hit) {
            *out = p[i].value;
            *which = p[i].key;
            return 0;
        }
    }
    return 0;
}

/* ---- tensor names ---------------------------------------------------------------- */

static bool lg_eat(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n))
        return false;
    *p += n;
    return true;
}

/* "base_model.model.model.layers.<N>.<self_attn|mlp>.<proj>.lora_<A|B>[.<adapter>].weight"; <proj> as the
 * base names its modules (lg_module_name: a fused base's qkv_proj is target q, gate_up_proj gate). */
static int lg_parse_tensor_name(const char *name, const lg_model_config *b, int *layer, lg_lora_target *target,
                                int *which, lg_err *err)
{
    const int n_layers = b->n_layers;
    if (strstr(name, "lora_magnitude_vector"))
        return lg_fail(err, "DoRA adapters are not supported (tensor '%s')", name);
    if (strstr(name, "lora_embedding_A") || strstr(name, "lora_embedding_B") || strstr(name, "embed_tokens") ||
        strstr(name, "lm_head"))
        return lg_fail(err, "embedding/lm_head LoRA is not supported (tensor '%s')", name);
    if (strstr(name, "modules_to_save"))
        return lg_fail(err, "modules_to_save is not supported (tensor '%s')", name);

    const char *p = name;
    if (!lg_eat(&p, "base_model.model.model.layers."))
        goto unknown;
    long l = 0;
    const char *d0 = p;
    while (*p >= '0' && *p <= '9') {
        if (l < LG_PEFT_MAX_LAYERS)
            l = l * 10 + (*p - '0');
        p++;
    }
    if (p == d0 || (*d0 == '0' && p - d0 > 1) || *p != '.')
        goto unknown;
    p++;
    int t = -1;
    bool attn = lg_eat(&p, "self_attn.");
    if (!attn && !lg_eat(&p, "mlp."))
        goto unknown;
    for (int i = 0; i < LG_LORA_N_TARGETS && t < 0; i++) {
        const char *q = p, *mod = lg_module_name(b, (lg_lora_target)i);
        if (mod && lg_target_is_attn((lg_lora_target)i) == attn && lg_eat(&q, mod) && *q == '.') {
            t = i;
            p = q + 1;
        }
    }
    if (t < 0)
        goto unknown;
    int w;
    if (lg_eat(&p, "lora_A"))
        w = 0;
    else if (lg_eat(&p, "lora_B"))
        w = 1;
    else
        goto unknown;
    if (*p != '.')
        goto unknown;
    p++;
    const char *dot = strchr(p, '.');
    if (dot && dot > p && !strchr(dot + 1, '.')) /* adapter-name infix, e.g. "default" */
        p = dot + 1;
    if (!strcmp(p, "bias"))
        return lg_fail(err, "LoRA bias tensors are not supported (tensor '%s')", name);
    if (strcmp(p, "weight"))
        goto unknown;
    if (l >= n_layers)
        return lg_fail(err, "tensor '%s': layer %ld is out of range (base model has %d layers)", name, l, n_layers);
    *layer = (int)l;
    *target = (lg_lora_target)t;
    *which = w;
    return 0;
unknown:
    return lg_fail(err, "unknown tensor '%s': expected "
                   "base_model.model.model.layers.N.%s.lora_{A,B}.weight", name,
                   b->fused_qkv ? "{self_attn.{qkv,o}_proj|mlp.{gate_up,down}_proj}"
                                : "{self_attn.{q,k,v,o}_proj|mlp.{gate,up,down}_proj}");
}

/* ---- assembly ---------------------------------------------------------------------- */

static size_t lg_round_up(size_t n) { return (n + LG_PEFT_ALIGN - 1) / LG_PEFT_ALIGN * LG_PEFT_ALIGN; }

/* The first element of p[0..n) (dtype dt, aligned) that is NaN or +/-Inf:
 * true and *at / *what ("NaN", "+Inf", "-Inf"), or false. Every element is
 * read; the exponent bits all ones is the test in each format. */
static bool lg_non_finite(const void *p, lg_dtype dt, size_t n, size_t *at, const char **what)
{
    if (dt == LG_F32) {
        const uint32_t *u = p;
        for (size_t i = 0; i < n; i++)
            if ((u[i] & 0x7f800000u) == 0x7f800000u) {
                *at = i;
                *what = u[i] & 0x007fffffu ? "NaN" : u[i] >> 31 ? "-Inf" : "+Inf";
                return true;
            }
        return false;
    }
    const uint16_t *h = p;
    const uint16_t exp = dt == LG_F16 ? 0x7c00 : 0x7f80, man = dt == LG_F16 ? 0x03ff : 0x007f;
    for (size_t i = 0; i < n; i++)
        if ((h[i] & exp) == exp) {
            *at = i;
            *what = h[i] & man ? "NaN" : h[i] >> 15 ? "-Inf" : "+Inf";
            return true;
        }
    return false;
}

static int lg_digest(const char *cfg, size_t cfg_len, const void *st, size_t st_len, char hex[65], lg_err *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, cfg, cfg_len) &&
             EVP_DigestUpdate(ctx, st, st_len) && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return lg_fail(err, "SHA-256 of the adapter files failed (OpenSSL)");
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

static int lg_check_base(const lg_model_config *b, lg_err *err)
{
    if (!b || b->n_layers < 1 || b->n_layers > LG_PEFT_MAX_LAYERS || b->d_model < 1 || b->n_heads < 1 ||
        b->n_kv_heads < 1 || b->head_dim < 1 || b->d_ff < 1)
        return lg_fail(err, "expected a base model config with positive dimensions");
    if ((int64_t)b->n_heads * b->head_dim > INT_MAX || (int64_t)b->n_kv_heads * b->head_dim > INT_MAX)
        return lg_fail(err, "expected base model dimensions that fit an int");
    return 0;
}

/* B rows of a q or k target in the engine's RoPE layout (model_arch.h lg_arch_qk_row), in place. */
static int qk_rows(const lg_model_config *b, void *B, lg_dtype dt, int n_heads, int rank)
{
    const int hd = b->head_dim;
    const size_t es = lg_dtype_size(dt), row = (size_t)rank * es;
    char *copy = malloc((size_t)n_heads * hd * row);
    float *f = malloc((size_t)rank * 4);
    if (!copy || !f) {
        free(copy);
        free(f);
        return -1;
    }
    memcpy(copy, B, (size_t)n_heads * hd * row);
    for (int h = 0; h < n_heads; h++)
        for (int e = 0; e < hd; e++) {
            int src;
            float k;
            lg_arch_qk_row(b, e, &src, &k);
            lg_to_f32(f, copy + ((size_t)h * hd + (size_t)src) * row, dt, (size_t)rank);
            for (int i = 0; i < rank; i++) f[i] *= k;
            lg_from_f32((char *)B + ((size_t)h * hd + (size_t)e) * row, dt, f, (size_t)rank);
        }
    free(copy);
    free(f);
    return 0;
}

typedef struct lg_slot {
    const lg_st_tensor *t[2]; /* lora_A, lora_B */
} lg_slot;

static int lg_build(const lg_peft_cfg *c, lg_rx *rx, const lg_model_config *b, const lg_st_file *st,
                    int max_rank, const bool *selected, lg_adapter *a, lg_err *err)
{
    size_t n_slots = (size_t)b->n_layers * LG_LORA_N_TARGETS;
    lg_slot *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return lg_fail(err, "out of memory");
    int rc = -1;
    const lg_st_tensor *first = NULL; /* fixes the adapter's dtype */
    static const char *const ab[2] = {"lora_A", "lora_B"};

    for (int i = 0; i < lg_st_count(st); i++) {
        const lg_st_tensor *t = lg_st_at(st, i);
        int layer = 0, which = 0;
        lg_lora_target tg = LG_LORA_Q;
        if (lg_parse_tensor_name(t->name, b, &layer, &tg, &which, err))
            goto out;
        if (!t->has_lg_dtype || t->dtype == LG_I32) {
            lg_fail(err, "tensor '%s' has dtype %s, expected F32, F16 or BF16", t->name, t->dtype_name);
            goto out;
        }
        if (!first) {
            first = t;
            a->dtype = t->dtype;
        } else if (t->dtype != a->dtype) {
            lg_fail(err, "mixed dtypes: tensor '%s' is %s but '%s' is %s (expected one dtype for all tensors)",
                    t->name, t->dtype_name, first->name, first->dtype_name);
            goto out;
        }
        lg_slot *s = &slots[(size_t)layer * LG_LORA_N_TARGETS + tg];
        if (s->t[which]) {
            lg_fail(err, "duplicate %s for model.layers.%d.%s.%s: '%s' and '%s'", ab[which], layer,
                    lg_target_is_attn(tg) ? "self_attn" : "mlp", lg_lora_target_name(tg), s->t[which]->name, t->name);
            goto out;
        }
        s->t[which] = t;
    }
    /* a fused module's tensors serve each target of its group (lg_fused_group: row slices of B) */
    for (size_t k = 0; b->fused_qkv && k < n_slots; k++) {
        lg_lora_target f;
        int cnt, row0;
        lg_fused_group(b, (lg_lora_target)(k % LG_LORA_N_TARGETS), &f, &cnt, &row0);
        if (f == (lg_lora_target)(k % LG_LORA_N_TARGETS))
            continue;
        slots[k] = slots[k - (size_t)((int)(k % LG_LORA_N_TARGETS) - (int)f)];
    }

    /* pairing and consistency with the config */
    int n_mod = 0;
    for (size_t k = 0; k < n_slots; k++) {
        lg_slot *s = &slots[k];
        int layer = (int)(k / LG_LORA_N_TARGETS);
        lg_lora_target tg = (lg_lora_target)(k % LG_LORA_N_TARGETS);
        if (!s->t[0] && !s->t[1]) {
            if (selected[k]) {
                lg_fail(err, "inconsistent adapter: the config selects model.layers.%d.%s.%s but the file has no "
                        "lora_A/lora_B for it", layer, lg_target_is_attn(tg) ? "self_attn" : "mlp", lg_target_names[tg]);
                goto out;
            }
            continue;
        }
        if (!s->t[0] || !s->t[1]) {
            lg_fail(err, "'%s' has no matching %s", s->t[0] ? s->t[0]->name : s->t[1]->name, ab[s->t[0] ? 1 : 0]);
            goto out;
        }
        if (!selected[k]) {
            lg_fail(err, "inconsistent adapter: tensor '%s' is for a module that the config's target_modules/"
                    "layers_to_transform do not select", s->t[0]->name);
            goto out;
        }
        n_mod++;
    }

    a->modules = calloc((size_t)n_mod, sizeof *a->modules);
    a->index = malloc(n_slots * sizeof *a->index);
    if (!a->modules || !a->index) {
        lg_fail(err, "out of memory");
        goto out;
    }
    /* shapes, ranks, scales, sizes */
    size_t total = 0;
    for (size_t k = 0; k < n_slots; k++) {
        a->index[k] = -1;
        lg_slot *s = &slots[k];
        if (!s->t[0])
            continue;
        lg_lora_module *m = &a->modules[a->n_modules];
        m->layer = (int)(k / LG_LORA_N_TARGETS);
        m->target = (lg_lora_target)(k % LG_LORA_N_TARGETS);
        lg_lora_target_dims(b, m->target, &m->in_dim, &m->out_dim);
        const lg_st_tensor *A = s->t[0], *B = s->t[1];
        lg_lora_target gf;
        int gcnt, grow0, b_rows = 0;
        lg_fused_group(b, m->target, &gf, &gcnt, &grow0);
        for (int i = 0; i < gcnt; i++) {
            int in_i, out_i;
            lg_lora_target_dims(b, (lg_lora_target)(gf + i), &in_i, &out_i);
            b_rows += out_i;
        }
        char key[96];
        snprintf(key, sizeof key, "model.layers.%d.%s.%s", m->layer, lg_target_is_attn(m->target) ? "self_attn" : "mlp",
                 lg_module_name(b, gf));
        if (A->n_dims != 2 || B->n_dims != 2) {
            lg_fail(err, "%s: expected 2-D lora_A and lora_B, found %d-D and %d-D", key, A->n_dims, B->n_dims);
            goto out;
        }
        if (A->shape[1] != m->in_dim) {
            lg_fail(err, "%s: lora_A has shape [%lld, %lld], expected [rank, %d] (in_features of the base model)%s", key,
                    (long long)A->shape[0], (long long)A->shape[1], m->in_dim,
                    A->shape[0] == m->in_dim ? " — stored transposed? PEFT writes lora_A as [r, in]" : "");
            goto out;
        }
        if (B->shape[0] != b_rows) {
            lg_fail(err, "%s: lora_B has shape [%lld, %lld], expected [%d, rank] (out_features of the base model)%s", key,
                    (long long)B->shape[0], (long long)B->shape[1], b_rows,
                    B->shape[1] == b_rows ? " — stored transposed? PEFT writes lora_B as [out, r]" : "");
            goto out;
        }
        if (A->shape[0] != B->shape[1]) {
            lg_fail(err, "%s: rank mismatch between lora_A (%lld) and lora_B (%lld)", key, (long long)A->shape[0],
                    (long long)B->shape[1]);
            goto out;
        }
        double r, alpha;
        const char *rkey, *akey;
        if (lg_pattern_value(rx, c->rank_pat, c->n_rank_pat, key, c->r, &r, &rkey, err) ||
            lg_pattern_value(rx, c->alpha_pat, c->n_alpha_pat, key, c->alpha, &alpha, &akey, err))
            goto out;
        if ((double)A->shape[0] != r) {
            if (rkey)
                lg_fail(err, "%s: rank mismatch: tensors have rank %lld, config rank_pattern['%.60s'] says %d", key,
                        (long long)A->shape[0], rkey, (int)r);
            else
                lg_fail(err, "%s: rank mismatch: tensors have rank %lld, config r says %d", key, (long long)A->shape[0],
                        (int)r);
            goto out;
        }
        m->rank = (int)r;
        if (m->rank > max_rank) {
            lg_fail(err, "%s: rank %d is above the maximum rank %d this server accepts", key, m->rank, max_rank);
            goto out;
        }
        double scale = c->use_rslora ? alpha / sqrt(r) : alpha / r;
        m->scale = (float)scale;
        if (!isfinite(m->scale)) {
            lg_fail(err, "%s: expected a finite scale, found lora_alpha %g / rank %d", key, alpha, m->rank);
            goto out;
        }
        if (m->rank > a->max_rank)
            a->max_rank = m->rank;
        const size_t b_bytes = (size_t)m->out_dim * (size_t)m->rank * lg_dtype_size(a->dtype);
        size_t sz = lg_round_up(A->nbytes), szb = lg_round_up(b_bytes);
        if (!lg_add_ok(total, sz, &total) || !lg_add_ok(total, szb, &total) ||
            !lg_add_ok(a->weight_bytes, A->nbytes + b_bytes, &a->weight_bytes)) {
            lg_fail(err, "adapter too large");
            goto out;
        }
        a->index[k] = a->n_modules++;
    }

    a->data = aligned_alloc(LG_PEFT_ALIGN, total ? total : LG_PEFT_ALIGN);
    if (!a->data) {
        lg_fail(err, "out of memory for %zu bytes of adapter weights", total);
        goto out;
    }
    /* fan_in_fan_out never changes the stored layout (see peft.h): plain copies */
    size_t off = 0;
    for (int i = 0; i < a->n_modules; i++) {
        lg_lora_module *m = &a->modules[i];
        lg_slot *s = &slots[(size_t)m->layer * LG_LORA_N_TARGETS + m->target];
        lg_lora_target gf;
        int gcnt, grow0;
        lg_fused_group(b, m->target, &gf, &gcnt, &grow0);
        for (int w = 0; w < 2; w++) {
            void *dst = (char *)a->data + off;
            const lg_st_tensor *t = s->t[w];
            /* B: the target's rows of a fused module's B (all of it otherwise) */
            const size_t es = lg_dtype_size(a->dtype), row_bytes = (size_t)m->rank * es;
            const size_t nbytes = w == 0 ? t->nbytes : (size_t)m->out_dim * row_bytes;
            memcpy(dst, (const char *)t->data + (w == 0 ? 0 : (size_t)grow0 * row_bytes), nbytes);
            size_t bad;
            const char *what;
            if (lg_non_finite(dst, a->dtype, nbytes / es, &bad, &what)) {
                size_t cols = (size_t)t->shape[1]; /* n_elems > 0: no zero dimension */
                lg_fail(err, "adapter_model.safetensors: tensor '%s': element %zu ([%zu, %zu]) is %s; expected finite "
                        "LoRA weights", t->name, bad, bad / cols, bad % cols, what);
                goto out;
            }
            if (w == 1 && (m->target == LG_LORA_Q || m->target == LG_LORA_K) && !lg_arch_qk_identity(b) &&
                qk_rows(b, dst, a->dtype, m->target == LG_LORA_Q ? b->n_heads : b->n_kv_heads, m->rank) != 0) {
                lg_fail(err, "out of memory");
                goto out;
            }
            if (w == 0)
                m->A = dst;
            else
                m->B = dst;
            off += lg_round_up(nbytes);
        }
    }
    a->n_layers = b->n_layers;
    rc = 0;
out:
    free(slots);
    return rc;
}

static int lg_parse_impl(const char *config_json, size_t config_len, const void *stbuf, size_t st_len,
                         const char *st_name, const char *name, const lg_model_config *base, int max_rank,
                         lg_adapter **out, lg_err *err)
{
    if (!name || !*name || strlen(name) > LG_ADAPTER_MAX_NAME)
        return lg_fail(err, "expected an adapter name of 1..%d bytes", LG_ADAPTER_MAX_NAME);
    if (max_rank < 1)
        return lg_fail(err, "expected max_rank >= 1, found %d", max_rank);
    if (lg_check_base(base, err))
        return -1;
    if (!config_json || !stbuf)
        return lg_fail(err, "expected adapter_config.json and adapter_model.safetensors contents");

    lg_peft_cfg cfg = {0};
    lg_rx rx = {0};
    lg_st_file *st = NULL;
    lg_adapter *a = NULL;
    bool *selected = NULL;
    int rc = -1, n_sel;

    json_t *root = NULL;
    if (config_len > LG_ADAPTER_MAX_CONFIG) {
        lg_fail(err, "adapter_config.json: %zu bytes, expected at most %u", config_len, LG_ADAPTER_MAX_CONFIG);
        goto out;
    }
    if (lg_cfg_prescan(config_json, config_len, err))
        goto out;
    json_error_t je;
    root = json_loadb(config_json, config_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        lg_fail(err, "adapter_config.json: invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        goto out;
    }
    rx.mctx = pcre2_match_context_create(NULL);
    rx.md = pcre2_match_data_create(8, NULL);
    selected = calloc((size_t)base->n_layers * LG_LORA_N_TARGETS, sizeof *selected);
    a = calloc(1, sizeof *a);
    if (!rx.mctx || !rx.md || !selected || !a) {
        lg_fail(err, "out of memory");
        goto out;
    }
    pcre2_set_match_limit(rx.mctx, 20000);
    pcre2_set_depth_limit(rx.mctx, 1000);

    if (lg_cfg_parse(root, base, &cfg, err) || lg_select(&cfg, base, &rx, selected, &n_sel, err) ||
        lg_st_open_buffer(stbuf, st_len, st_name, &st, err) ||
        lg_build(&cfg, &rx, base, st, max_rank, selected, a, err) ||
        lg_digest(config_json, config_len, stbuf, st_len, a->digest, err))
        goto out;
    snprintf(a->name, sizeof a->name, "%s", name);
    *out = a;
    a = NULL;
    rc = 0;
out:
    lg_adapter_free(a);
    lg_st_close(st);
    free(selected);
    lg_cfg_free(&cfg);
    pcre2_match_data_free(rx.md);
    pcre2_match_context_free(rx.mctx);
    json_decref(root);
    return rc;
}

int lg_adapter_parse(const char *config_json, size_t config_len, const void *st, size_t st_len, const char *name,
                     const lg_model_config *base, int max_rank, lg_adapter **out, lg_err *err)
{
    *out = NULL;
    int rc = lg_parse_impl(config_json, config_len, st, st_len, "adapter_model.safetensors", name, base, max_rank,
                           out, err);
    if (rc)
        lg_err_prefix(err, "adapter '%.80s'", name ? name : "(null)");
    return rc;
}

int lg_adapter_load(const char *dir, const char *name, const lg_model_config *base, int max_rank,
                    lg_adapter **out, lg_err *err)
{
    *out = NULL;
    char cpath[4096], spath[4096];
    char *cfg = NULL;
    size_t cfg_len = 0;
    lg_mmap m = {0};
    int rc = -1;
    if (!dir || snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir) >= (int)sizeof cpath ||
        snprintf(spath, sizeof spath, "%s/adapter_model.safetensors", dir) >= (int)sizeof spath)
        lg_fail(err, "expected an adapter directory path shorter than %zu bytes", sizeof cpath - 32);
    else if (!lg_read_file(cpath, LG_ADAPTER_MAX_CONFIG, &cfg, &cfg_len, err) && !lg_mmap_open(spath, &m, err))
        rc = lg_parse_impl(cfg, cfg_len, m.data, m.size, spath, name, base, max_rank, out, err);
    if (rc)
        lg_err_prefix(err, "adapter '%.80s'", name ? name : "(null)");
    lg_mmap_close(&m);
    free(cfg);
    return rc;
}

void lg_adapter_free(lg_adapter *a)
{
    if (!a)
        return;
    free(a->modules);
    free(a->index);
    free(a->data);
    free(a);
}

const char *lg_adapter_name(const lg_adapter *a) { return a->name; }
const char *lg_adapter_digest(const lg_adapter *a) { return a->digest; }
lg_dtype lg_adapter_dtype(const lg_adapter *a) { return a->dtype; }
size_t lg_adapter_weight_bytes(const lg_adapter *a) { return a->weight_bytes; }
int lg_adapter_max_rank(const lg_adapter *a) { return a->max_rank; }
int lg_adapter_n_modules(const lg_adapter *a) { return a->n_modules; }

const lg_lora_module *lg_adapter_module(const lg_adapter *a, int i)
{
    return i >= 0 && i < a->n_modules ? &a->modules[i] : NULL;
}

const lg_lora_module *lg_adapter_find(const lg_adapter *a, int layer, lg_lora_target t)
{
    if (layer < 0 || layer >= a->n_layers || (unsigned)t >= LG_LORA_N_TARGETS)
        return NULL;
    int i = a->index[(size_t)layer * LG_LORA_N_TARGETS + t];
    return i >= 0 ? &a->modules[i] : NULL;
}
