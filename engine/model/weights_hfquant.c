/*
 * weights_hfquant.c — the Hub's quantized checkpoints (config.json
 * "quantization_config") repacked into backend.h's planar layouts.
 *
 * What loads (each quantized Linear becomes one tensor "<module>.weight" of
 * [out_features, in_features] in a planar layout; everything else of the
 * checkpoint loads as usual):
 *   compressed-tensors, format float-quantized (FP8 e4m3 weights, scale per
 *     tensor or per output channel, or 128x128 blocks): input_activations
 *     null -> F8; dynamic per token -> F8_A8; static per tensor -> F8_A8S
 *     (a = input_scale); dynamic per group of 128 with block weights ->
 *     F8_A8G. Tensors weight, weight_scale, input_scale. (naive-quantized
 *     with 8-bit float weights, as llm-compressor writes weight-only FP8,
 *     stores the same tensors and is read the same way.)
 *   compressed-tensors, format pack-quantized (int4, symmetric or not, group
 *     or channel): weight_packed int32 [N, K/8] (value + 8, element k in
 *     nibble k % 8), weight_scale [N, groups], weight_zero_point (int32
 *     packed along N, or one int8 a group), weight_shape -> I4 with z = zp + 8.
 *   quant_method fp8 (transformers' FineGrainedFP8): weight_block_size
 *     [128, 128], weight_scale_inv [ceil(N/128), ceil(K/128)], dynamic
 *     activations -> F8_A8G; without a block size (vLLM / AutoFP8): per
 *     tensor weight_scale (transformers: weight_scale_inv [1, 1]) -> F8_A8
 *     (dynamic: rounded per token, finer than vLLM's per-tensor dynamic
 *     scale) or F8_A8S with input_scale / activation_scale (static).
 *     scale_fmt ue8m0 is refused.
 *   fbgemm_fp8: weight_scale [N, 1], activations dynamic per token with the
 *     upper bound activation_scale_ub (tensor input_scale_ub, else the
 *     config's) -> F8_A8S with a = -ub.
 *   awq, version gemm, 4 bits, zero_point: qweight int32 [K, N/8] in AWQ's
 *     nibble order (column 8j + c in nibble {0,4,1,5,2,6,3,7}[c]), qzeros
 *     [K/G, N/8] likewise, scales [K/G, N] -> I4.
 *   gptq (checkpoint_format / format gptq, v1, zeros stored minus one; or
 *     gptq_v2), 4 bits, sym or not: qweight int32 [K/8, N] (element k in
 *     nibble k % 8), qzeros [K/G, N/8], scales [K/G, N], g_idx [K] -> I4.
 *     v1 zeros are read as gptqmodel converts them: the packed word plus
 *     0x11111111 (a stored -1 then carries, exactly as the reference does).
 * Group size: a multiple of 128, or one group a row (channel, group -1),
 * maps onto I4's groups of 128 (d and z repeat). Groups of 32 or 64, and a
 * g_idx that is not k / G (act-order), cannot: that tensor is dequantized
 * at load to 16 bits (opts->dequant_dtype) with one notice line on stderr
 * — correct, only slower. opts->dequantize expands every tensor at load.
 * Scales of f16, bf16, f32 (f64) are read; I4's d is f16, so a bf16 or f32
 * scale is rounded to f16 once (the F8 layouts keep an f32 d: exact).
 *
 * Refused, one line naming the method and what loads: other methods
 * (bitsandbytes, hqq, eetq, ...), other bit widths, awq gemv / marlin /
 * exllama, gptq marlin / bitblas, per-module overrides (gptq dynamic),
 * sparsity or transforms, and any key of a known method that this file does
 * not know (never served wrong). compressed-tensors' kv_cache_scheme is
 * accepted and its k_scale / v_scale tensors are kept as plain f32 values
 * (model.c uses them for an e4m3 cache, --kv-cache-dtype fp8): the KV cache's
 * dtype is the engine's own option (`--kv-cache-dtype`), not the
 * checkpoint's.
 *
 * Memory: tensors are held as views into the file mappings until finish;
 * each module is repacked into one heap buffer owned by the weights.
 */
#include "engine/model/weights_hfquant.h"

#include "engine/model/quant.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { QF_CT_FLOAT, QF_CT_PACK, QF_FP8, QF_FBGEMM, QF_AWQ, QF_GPTQ } qformat;

#define MAX_GROUPS 8
#define MAX_IGNORE 256

typedef struct ct_group {
    regex_t re[16];
    int n_re;
    bool all_linear;
    char *names[16];
    int n_names;
    lg_qtype layout;   /* F8*: the layout; I4 for pack-quantized */
    int strategy;      /* 0 tensor, 1 channel, 2 group, 3 block */
    int group;         /* int4 group size (0: channel) */
} ct_group;

typedef struct held {
    char *name;
    lg_st_tensor t;
    bool used;
} held;

struct lg_hfquant {
    qformat fmt;
    lg_dtype deq_dt;
    bool dequantize;
    lg_qtype f8;          /* QF_FP8 / QF_FBGEMM: the layout */
    bool block;           /* QF_FP8: 128x128 blocks */
    float ub;             /* fbgemm: activation_scale_ub */
    int group;            /* awq / gptq: group size (-1: a row) */
    bool v1;              /* gptq: zeros stored minus one */
    ct_group g[MAX_GROUPS];
    int n_g;
    char *ignore[MAX_IGNORE];
    regex_t ignore_re[MAX_IGNORE];
    bool ignore_is_re[MAX_IGNORE];
    int n_ignore;
    held *h;
    int n_h, cap_h;
    bool expand_noticed;  /* the int4-expanded-to-16-bit notice was printed */
    char method[24], desc[96];
};

/* ---- config --------------------------------------------------------------------- */

static const char SUPPORTED[] =
    "compressed-tensors float-quantized (fp8) and pack-quantized (int4), fp8 (block 128x128 or per tensor), "
    "fbgemm_fp8, awq (gemm, 4 bits), gptq (4 bits)";

static bool absent(json_t *v) { return !v || json_is_null(v); }

static int check_keys(json_t *o, const char *where, const char *const *known, lg_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(known[i], k);
        if (!ok)
            return lg_fail(err, "config.json quantization_config%s: key \"%s\" is not supported by loragate's "
                                "reader of this method (refused rather than ignored)", where, k);
    }
    return 0;
}

static const char *str_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int int_of(json_t *o, const char *key, int def)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static int add_pattern(lg_hfquant *h, const char *p, regex_t *re, bool *is_re, char **name, lg_err *err)
{
    if (!strncmp(p, "re:", 3)) {
        char buf[1024];
        snprintf(buf, sizeof buf, "^(%s)", p + 3); /* Python's re.match: anchored at the start */
        if (regcomp(re, buf, REG_EXTENDED | REG_NOSUB))
            return lg_fail(err, "config.json quantization_config: pattern '%s' is not a regular expression loragate "
                                "can read", p);
        *is_re = true;
        *name = NULL;
        return 0;
    }
    (void)h;
    *is_re = false;
    *name = strdup(p);
    return *name ? 0 : lg_fail(err, "out of memory");
}

/* modules_to_not_convert / ignored_layers / ignore: names or "re:" patterns */
static int read_ignore(lg_hfquant *h, json_t *qc, const char *key, lg_err *err)
{
    json_t *l = json_object_get(qc, key);
    if (absent(l))
        return 0;
    if (!json_is_array(l))
        return lg_fail(err, "config.json quantization_config: \"%s\" is not a list", key);
    size_t i;
    json_t *e;
    json_array_foreach(l, i, e)
    {
        if (!json_is_string(e))
            return lg_fail(err, "config.json quantization_config: \"%s\"[%zu] is not a string", key, i);
        if (h->n_ignore == MAX_IGNORE)
            return lg_fail(err, "config.json quantization_config: more than %d entries in \"%s\"", MAX_IGNORE, key);
        if (add_pattern(h, json_string_value(e), &h->ignore_re[h->n_ignore], &h->ignore_is_re[h->n_ignore],
                        &h->ignore[h->n_ignore], err))
            return -1;
        h->n_ignore++;
    }
    return 0;
}

/* Whether a module (its name without "model." prefix variants) matches name or pattern. */
static bool module_matches(const char *mod, const char *name, const regex_t *re)
{
    const char *bare = !strncmp(mod, "model.", 6) ? mod + 6 : mod;
    if (re)
        return !regexec(re, mod, 0, NULL, 0) || !regexec(re, bare, 0, NULL, 0);
    if (!strcmp(mod, name) || !strcmp(bare, name))
        return true;
    /* transformers' modules_to_not_convert: a name matches a module ending with it */
    size_t a = strlen(mod), b = strlen(name);
    return a > b && mod[a - b - 1] == '.' && !strcmp(mod + a - b, name);
}

static bool ignored(const lg_hfquant *h, const char *mod)
{
    for (int i = 0; i < h->n_ignore; i++)
        if (module_matches(mod, h->ignore[i], h->ignore_is_re[i] ? &h->ignore_re[i] : NULL))
            return true;
    return false;
}

static const char *const CT_ARGS[] = {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
                                      "dynamic", "actorder", "observer", "observer_kwargs", "scale_dtype",
                                      "zp_dtype", NULL};

static int ct_args(json_t *a, const char *where, int *bits, const char **type, bool *sym, const char **strategy,
                   int *group, bool *dynamic, json_t **block, lg_err *err)
{
    if (check_keys(a, where, CT_ARGS, err))
        return -1;
    *bits = int_of(a, "num_bits", 8);
    *type = str_of(a, "type") ? str_of(a, "type") : "int";
    *sym = !json_is_false(json_object_get(a, "symmetric"));
    *strategy = str_of(a, "strategy") ? str_of(a, "strategy") : "tensor";
    *group = int_of(a, "group_size", 0);
    *dynamic = json_is_true(json_object_get(a, "dynamic"));
    *block = json_object_get(a, "block_structure");
    const char *ao = str_of(a, "actorder");
    if (ao && strcmp(ao, "weight") && strcmp(ao, "group") && strcmp(ao, "static"))
        return lg_fail(err, "config.json quantization_config%s: actorder '%s' is not supported", where, ao);
    return 0;
}

static int parse_ct_group(lg_hfquant *h, const char *gname, json_t *g, const char *fmt_top, lg_err *err)
{
    static const char *const KEYS[] = {"targets", "weights", "input_activations", "output_activations", "format",
                                       NULL};
    char where[160];
    snprintf(where, sizeof where, " config_groups.%s", gname);
    if (check_keys(g, where, KEYS, err))
        return -1;
    if (h->n_g == MAX_GROUPS)
        return lg_fail(err, "config.json quantization_config: more than %d config_groups", MAX_GROUPS);
    ct_group *cg = &h->g[h->n_g++];
    const char *fmt = str_of(g, "format") ? str_of(g, "format") : fmt_top;
    /* naive-quantized stores the codes in the weight's own tensor: for 8-bit float weights that is the same
     * e4m3 tensor as float-quantized (llm-compressor writes it for FP8 weight-only schemes) */
    json_t *wnaive = json_object_get(g, "weights");
    if (fmt && !strcmp(fmt, "naive-quantized") && json_is_object(wnaive) && str_of(wnaive, "type") &&
        !strcmp(str_of(wnaive, "type"), "float") && int_of(wnaive, "num_bits", 0) == 8)
        fmt = "float-quantized";
    if (!fmt || (strcmp(fmt, "float-quantized") && strcmp(fmt, "pack-quantized")))
        return lg_fail(err, "config.json quantization_config: compressed-tensors format '%s' is not supported "
                            "(supported: %s)", fmt ? fmt : "(none)", SUPPORTED);
    json_t *ts = json_object_get(g, "targets");
    if (!json_is_array(ts) || !json_array_size(ts))
        return lg_fail(err, "config.json quantization_config%s: expected a list \"targets\"", where);
    size_t i;
    json_t *e;
    json_array_foreach(ts, i, e)
    {
        const char *t = json_string_value(e);
        if (!t)
            return lg_fail(err, "config.json quantization_config%s: targets[%zu] is not a string", where, i);
        if (!strcmp(t, "Linear")) {
            cg->all_linear = true;
            continue;
        }
        bool is_re;
        char *nm;
        if (cg->n_re == 16 || cg->n_names == 16)
            return lg_fail(err, "config.json quantization_config%s: more than 16 targets", where);
        if (add_pattern(h, t, &cg->re[cg->n_re], &is_re, &nm, err))
            return -1;
        if (is_re)
            cg->n_re++;
        else
            cg->names[cg->n_names++] = nm;
    }
    if (!absent(json_object_get(g, "output_activations")))
        return lg_fail(err, "config.json quantization_config%s: output_activations is set, which loragate does "
                            "not implement", where);
    json_t *wa = json_object_get(g, "weights"), *ia = json_object_get(g, "input_activations");
    if (!json_is_object(wa))
        return lg_fail(err, "config.json quantization_config%s: expected an object \"weights\"", where);
    int bits, group, ibits = 0, igroup = 0;
    const char *type, *strategy, *itype = NULL, *istrategy = NULL;
    bool sym, dyn, isym = true, idyn = false;
    json_t *block, *iblock = NULL;
    if (ct_args(wa, where, &bits, &type, &sym, &strategy, &group, &dyn, &block, err))
        return -1;
    if (!absent(ia) && ct_args(ia, where, &ibits, &itype, &isym, &istrategy, &igroup, &idyn, &iblock, err))
        return -1;
    if (!strcmp(fmt, "float-quantized")) {
        if (bits != 8 || strcmp(type, "float") || !sym)
            return lg_fail(err, "config.json quantization_config%s: float-quantized weights of %d bits, type %s%s "
                                "are not supported (expected 8-bit symmetric float)", where, bits, type,
                           sym ? "" : ", asymmetric");
        if (!strcmp(strategy, "tensor"))
            cg->strategy = 0;
        else if (!strcmp(strategy, "channel"))
            cg->strategy = 1;
        else if (!strcmp(strategy, "block")) {
            json_t *b0 = json_array_get(block, 0), *b1 = json_array_get(block, 1);
            if (json_array_size(block) != 2 || json_integer_value(b0) != 128 || json_integer_value(b1) != 128)
                return lg_fail(err, "config.json quantization_config%s: block_structure other than [128, 128] is "
                                    "not supported", where);
            cg->strategy = 3;
        } else
            return lg_fail(err, "config.json quantization_config%s: FP8 weight strategy '%s' is not supported "
                                "(expected tensor, channel or block)", where, strategy);
        if (absent(ia)) {
            cg->layout = LG_QF8;
        } else {
            if (ibits != 8 || strcmp(itype, "float") || !isym)
                return lg_fail(err, "config.json quantization_config%s: input activations of %d bits, type %s are "
                                    "not supported (expected 8-bit symmetric float)", where, ibits, itype);
            if (idyn && !strcmp(istrategy, "token"))
                cg->layout = LG_QF8_A8;
            else if (!idyn && !strcmp(istrategy, "tensor"))
                cg->layout = LG_QF8_A8S;
            else if (idyn && !strcmp(istrategy, "group") && igroup == 128)
                cg->layout = LG_QF8_A8G;
            else
                return lg_fail(err, "config.json quantization_config%s: %s input activations with strategy '%s' are "
                                    "not supported (expected dynamic token, static tensor or dynamic group 128)",
                               where, idyn ? "dynamic" : "static", istrategy);
            if ((cg->layout == LG_QF8_A8G) != (cg->strategy == 3))
                return lg_fail(err, "config.json quantization_config%s: block weights go with dynamic group-128 "
                                    "activations only", where);
        }
        h->fmt = QF_CT_FLOAT;
    } else {
        if (bits != 4 || strcmp(type, "int"))
            return lg_fail(err, "config.json quantization_config%s: pack-quantized weights of %d bits, type %s are "
                                "not supported (expected 4-bit int)", where, bits, type);
        if (!absent(ia))
            return lg_fail(err, "config.json quantization_config%s: int4 weights with quantized input activations "
                                "are not supported (expected input_activations null)", where);
        if (!strcmp(strategy, "channel"))
            cg->group = 0;
        else if (!strcmp(strategy, "group") && group > 0)
            cg->group = group;
        else
            return lg_fail(err, "config.json quantization_config%s: int4 strategy '%s' is not supported (expected "
                                "group or channel)", where, strategy);
        cg->layout = LG_QI4;
        h->fmt = QF_CT_PACK;
    }
    return 0;
}

static int parse_ct(lg_hfquant *h, json_t *qc, lg_err *err)
{
    static const char *const KEYS[] = {"quant_method", "format", "config_groups", "ignore", "kv_cache_scheme",
                                       "quantization_status", "global_compression_ratio", "version",
                                       "sparsity_config", "moe_sparsity_config", "transform_config", NULL};
    if (check_keys(qc, "", KEYS, err))
        return -1;
    static const char *const OFF[] = {"sparsity_config", "moe_sparsity_config", "transform_config"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(qc, OFF[i]);
        if (!absent(v) && !(json_is_object(v) && !json_object_size(v)))
            return lg_fail(err, "config.json quantization_config: %s is set, which loragate does not implement", OFF[i]);
    }
    json_t *gs = json_object_get(qc, "config_groups");
    if (!json_is_object(gs) || !json_object_size(gs))
        return lg_fail(err, "config.json quantization_config: expected an object \"config_groups\"");
    const char *k;
    json_t *v;
    int fmts = 0;
    json_object_foreach(gs, k, v)
    {
        if (!json_is_object(v) || parse_ct_group(h, k, v, str_of(qc, "format"), err))
            return json_is_object(v) ? -1 : lg_fail(err, "config.json quantization_config: group %s is not an object", k);
        fmts |= h->fmt == QF_CT_FLOAT ? 1 : 2;
    }
    if (fmts == 3)
        return lg_fail(err, "config.json quantization_config: mixed float-quantized and pack-quantized groups are "
                            "not supported");
    if (read_ignore(h, qc, "ignore", err))
        return -1;
    const ct_group *g = &h->g[0];
    if (h->fmt == QF_CT_FLOAT) {
        snprintf(h->method, sizeof h->method, "%s", g->strategy == 3 ? "fp8-block" : "fp8");
        snprintf(h->desc, sizeof h->desc, "fp8 (compressed-tensors, %s, %s)",
                 g->layout == LG_QF8 ? "W8A16" : "W8A8",
                 g->strategy == 3 ? "128x128 blocks, dynamic per-group activations"
                 : g->layout == LG_QF8_A8 ? (g->strategy ? "per-channel, dynamic per-token" : "per-tensor, dynamic per-token")
                 : g->layout == LG_QF8_A8S ? (g->strategy ? "per-channel, static per-tensor" : "per-tensor, static per-tensor")
                 : (g->strategy ? "per-channel weights" : "per-tensor weights"));
    } else {
        snprintf(h->method, sizeof h->method, "compressed-tensors-int4");
        if (g->group)
            snprintf(h->desc, sizeof h->desc, "int4 (compressed-tensors pack-quantized, g%d)", g->group);
        else
            snprintf(h->desc, sizeof h->desc, "int4 (compressed-tensors pack-quantized, per-channel)");
    }
    return 0;
}

static int parse_fp8(lg_hfquant *h, json_t *qc, lg_err *err)
{
    static const char *const KEYS[] = {"quant_method", "activation_scheme", "weight_block_size",
                                       "modules_to_not_convert", "ignored_layers", "fmt", "dequantize",
                                       "modules_to_convert", "scale_fmt", "expert_dtype", NULL};
    if (check_keys(qc, "", KEYS, err))
        return -1;
    const char *sf = str_of(qc, "scale_fmt");
    if (sf && strcmp(sf, "float"))
        return lg_fail(err, "config.json quantization_config: fp8 scale_fmt '%s' is not supported (expected float)", sf);
    if (!absent(json_object_get(qc, "modules_to_convert")))
        return lg_fail(err, "config.json quantization_config: fp8 \"modules_to_convert\" is not supported");
    const char *fmt = str_of(qc, "fmt"), *as = str_of(qc, "activation_scheme");
    if (fmt && strcmp(fmt, "e4m3"))
        return lg_fail(err, "config.json quantization_config: fp8 fmt '%s' is not supported (expected e4m3)", fmt);
    if (json_is_true(json_object_get(qc, "dequantize")))
        return lg_fail(err, "config.json quantization_config: fp8 \"dequantize\": true is not supported");
    if (!as)
        as = "dynamic";
    if (strcmp(as, "dynamic") && strcmp(as, "static"))
        return lg_fail(err, "config.json quantization_config: fp8 activation_scheme '%s' is not supported", as);
    json_t *bs = json_object_get(qc, "weight_block_size");
    if (!absent(bs)) {
        if (json_array_size(bs) != 2 || json_integer_value(json_array_get(bs, 0)) != 128 ||
            json_integer_value(json_array_get(bs, 1)) != 128)
            return lg_fail(err, "config.json quantization_config: fp8 weight_block_size other than [128, 128] is not "
                                "supported");
        if (strcmp(as, "dynamic"))
            return lg_fail(err, "config.json quantization_config: fp8 blocks with static activations are not "
                                "supported (expected activation_scheme dynamic)");
        h->block = true;
        h->f8 = LG_QF8_A8G;
        snprintf(h->method, sizeof h->method, "fp8-block");
        snprintf(h->desc, sizeof h->desc, "fp8 (128x128 blocks, W8A8 dynamic per-group)");
    } else {
        h->f8 = strcmp(as, "dynamic") ? LG_QF8_A8S : LG_QF8_A8;
        snprintf(h->method, sizeof h->method, "fp8");
        snprintf(h->desc, sizeof h->desc, "fp8 (W8A8 per-tensor, %s)",
                 h->f8 == LG_QF8_A8 ? "dynamic per-token" : "static per-tensor");
    }
    h->fmt = QF_FP8;
    return read_ignore(h, qc, "modules_to_not_convert", err) || read_ignore(h, qc, "ignored_layers", err);
}

static int parse_fbgemm(lg_hfquant *h, json_t *qc, lg_err *err)
{
    static const char *const KEYS[] = {"quant_method", "activation_scale_ub", "modules_to_not_convert", NULL};
    if (check_keys(qc, "", KEYS, err))
        return -1;
    json_t *ub = json_object_get(qc, "activation_scale_ub");
    h->ub = json_is_number(ub) ? (float)json_number_value(ub) : 1200.0f; /* transformers' default */
    if (!(h->ub > 0))
        return lg_fail(err, "config.json quantization_config: activation_scale_ub must be > 0");
    h->fmt = QF_FBGEMM;
    h->f8 = LG_QF8_A8S;
    snprintf(h->method, sizeof h->method, "fbgemm_fp8");
    snprintf(h->desc, sizeof h->desc, "fp8 (fbgemm, W8A8 per-channel, dynamic per-token, ub %g)", h->ub);
    return read_ignore(h, qc, "modules_to_not_convert", err);
}

static int parse_awq(lg_hfquant *h, json_t *qc, lg_err *err)
{
    static const char *const KEYS[] = {"quant_method", "version", "bits", "w_bit", "group_size", "q_group_size",
                                       "zero_point", "modules_to_not_convert", "do_fuse", "fuse_max_seq_len",
                                       "backend", "exllama_config", /* GPTQModel's AWQ: */ "checkpoint_format",
                                       "format", "desc_act", "lm_head", "meta", "method", "pack_dtype", "sym", NULL};
    if (check_keys(qc, "", KEYS, err))
        return -1;
    const char *ver = str_of(qc, "version") ? str_of(qc, "version") : "gemm";
    static const char *const SAME[] = {"checkpoint_format", "format"};
    for (int i = 0; i < 2; i++)
        if (str_of(qc, SAME[i]) && strcasecmp(str_of(qc, SAME[i]), ver))
            return lg_fail(err, "config.json quantization_config: awq %s '%s' is not supported (supported: %s)", SAME[i],
                           str_of(qc, SAME[i]), SUPPORTED);
    const char *pd = str_of(qc, "pack_dtype");
    if (pd && strcmp(pd, "int32") && strcmp(pd, "torch.int32"))
        return lg_fail(err, "config.json quantization_config: awq pack_dtype '%s' is not supported (expected int32)", pd);
    if (json_is_true(json_object_get(qc, "desc_act")) || json_is_true(json_object_get(qc, "lm_head")))
        return lg_fail(err, "config.json quantization_config: awq with desc_act or a quantized lm_head is not supported");
    if (str_of(qc, "method") && strcmp(str_of(qc, "method"), "awq"))
        return lg_fail(err, "config.json quantization_config: awq \"method\" '%s' is not supported", str_of(qc, "method"));
    int bits = int_of(qc, "bits", int_of(qc, "w_bit", 4));
    int group = int_of(qc, "group_size", int_of(qc, "q_group_size", 128));
    if (strcasecmp(ver, "gemm"))
        return lg_fail(err, "config.json quantization_config: awq version '%s' is not supported (supported: %s)", ver,
                       SUPPORTED);
    if (bits != 4)
        return lg_fail(err, "config.json quantization_config: awq with %d bits is not supported (supported: %s)", bits,
                       SUPPORTED);
    /* zero_point false (symmetric): the GEMM format still stores qzeros (all 8), read as they are */
    if (!absent(json_object_get(qc, "exllama_config")))
        return lg_fail(err, "config.json quantization_config: awq exllama_config is not supported (supported: %s)",
                       SUPPORTED);
    if (group <= 0 && group != -1)
        return lg_fail(err, "config.json quantization_config: awq group_size %d is not supported", group);
    h->fmt = QF_AWQ;
    h->group = group;
    snprintf(h->method, sizeof h->method, "awq");
    snprintf(h->desc, sizeof h->desc, "awq int4 g%d", group);
    return read_ignore(h, qc, "modules_to_not_convert", err);
}

static int parse_gptq(lg_hfquant *h, json_t *qc, lg_err *err)
{
    static const char *const KEYS[] = {
        "quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format", "format", "damp_percent",
        "damp_auto_increment", "static_groups", "true_sequential", "model_name_or_path", "model_file_base_name",
        "meta", "pack_dtype", "lm_head", "dynamic", "mse", "v2", "v2_alpha", "act_group_aware", "hyb_act",
        "tokenizer", "dataset", "batch_size", "use_exllama", "exllama_config", "max_input_length",
        "cache_block_outputs", "module_name_preceding_first_block", "modules_in_block_to_quantize", "use_cuda_fp16",
        "backend", "modules_to_not_convert", "quantizer", "pack_impl", "adapter", "rotation", "offload_to_disk",
        "offload_to_disk_path", "failsafe", "fail_safe", "gar", "gptaq", "foem", "zero_point", "moe", "method",
        NULL};
    if (check_keys(qc, "", KEYS, err))
        return -1;
    int bits = int_of(qc, "bits", 4), group = int_of(qc, "group_size", 128);
    const char *meth = str_of(qc, "method");
    if (meth && strcmp(meth, "gptq"))
        return lg_fail(err, "config.json quantization_config: gptq \"method\" '%s' is not supported (supported: %s)",
                       meth, SUPPORTED);
    const char *fmt = str_of(qc, "checkpoint_format") ? str_of(qc, "checkpoint_format") : str_of(qc, "format");
    if (!fmt)
        fmt = "gptq";
    if (bits != 4)
        return lg_fail(err, "config.json quantization_config: gptq with %d bits is not supported (supported: %s)", bits,
                       SUPPORTED);
    if (strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
        return lg_fail(err, "config.json quantization_config: gptq checkpoint format '%s' is not supported (expected "
                            "gptq or gptq_v2)", fmt);
    const char *pd = str_of(qc, "pack_dtype");
    if (pd && strcmp(pd, "int32") && strcmp(pd, "torch.int32"))
        return lg_fail(err, "config.json quantization_config: gptq pack_dtype '%s' is not supported (expected int32)", pd);
    json_t *dyn = json_object_get(qc, "dynamic");
    if (!absent(dyn) && !(json_is_object(dyn) && !json_object_size(dyn)))
        return lg_fail(err, "config.json quantization_config: gptq \"dynamic\" (per-module overrides) is not supported");
    if (json_is_true(json_object_get(qc, "lm_head")))
        return lg_fail(err, "config.json quantization_config: gptq with a quantized lm_head is not supported");
    json_t *ex = json_object_get(qc, "exllama_config");
    (void)ex; /* the exllama kernel's choice: the checkpoint's bytes are gptq's either way */
    if (group <= 0 && group != -1)
        return lg_fail(err, "config.json quantization_config: gptq group_size %d is not supported", group);
    h->fmt = QF_GPTQ;
    h->group = group;
    h->v1 = !strcmp(fmt, "gptq");
    snprintf(h->method, sizeof h->method, "gptq");
    if (group > 0)
        snprintf(h->desc, sizeof h->desc, "gptq int4 g%d%s%s", group, json_is_false(json_object_get(qc, "sym")) ? " asym" : "",
                 json_is_true(json_object_get(qc, "desc_act")) ? " act-order" : "");
    else
        snprintf(h->desc, sizeof h->desc, "gptq int4 per-channel%s", json_is_false(json_object_get(qc, "sym")) ? " asym" : "");
    return read_ignore(h, qc, "modules_to_not_convert", err);
}

int lg_hfquant_open(json_t *qc, const lg_load_opts *opts, lg_hfquant **out, lg_err *err)
{
    *out = NULL;
    if (!json_is_object(qc))
        return lg_fail(err, "config.json: quantization_config is not an object");
    const char *m = str_of(qc, "quant_method");
    if (!m)
        return lg_fail(err, "config.json quantization_config: expected a string \"quant_method\" (supported: %s)",
                       SUPPORTED);
    lg_hfquant *h = calloc(1, sizeof *h);
    if (!h)
        return lg_fail(err, "out of memory");
    h->deq_dt = opts && (opts->dequant_dtype == LG_F32 || opts->dequant_dtype == LG_BF16) ? opts->dequant_dtype : LG_F16;
    h->dequantize = opts && opts->dequantize;
    int rc;
    if (!strcmp(m, "compressed-tensors"))
        rc = parse_ct(h, qc, err);
    else if (!strcmp(m, "fp8"))
        rc = parse_fp8(h, qc, err);
    else if (!strcmp(m, "fbgemm_fp8"))
        rc = parse_fbgemm(h, qc, err);
    else if (!strcmp(m, "awq"))
        rc = parse_awq(h, qc, err);
    else if (!strcmp(m, "gptq"))
        rc = parse_gptq(h, qc, err);
    else
        rc = lg_fail(err, "config.json quantization_config: quant_method '%s' is not supported (supported: %s)", m,
                     SUPPORTED);
    if (rc) {
        lg_hfquant_free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void lg_hfquant_free(lg_hfquant *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_g; i++) {
        for (int k = 0; k < h->g[i].n_re; k++)
            regfree(&h->g[i].re[k]);
        for (int k = 0; k < h->g[i].n_names; k++)
            free(h->g[i].names[k]);
    }
    for (int i = 0; i < h->n_ignore; i++) {
        if (h->ignore_is_re[i])
            regfree(&h->ignore_re[i]);
        free(h->ignore[i]);
    }
    for (int i = 0; i < h->n_h; i++)
        free(h->h[i].name);
    free(h->h);
    free(h);
}

void lg_hfquant_describe(const lg_hfquant *h, lg_model_config *cfg)
{
    snprintf(cfg->quant_method, sizeof cfg->quant_method, "%s", h->method);
    snprintf(cfg->quant_desc, sizeof cfg->quant_desc, "%s", h->desc);
}

/* ---- tensors --------------------------------------------------------------------- */

static const char *suffix(const char *name)
{
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

static bool quant_suffix(const char *s)
{
    static const char *const S[] = {"weight_scale", "weight_scale_inv", "input_scale", "input_scale_ub", "qweight",
                                    "qzeros", "scales", "g_idx", "weight_packed", "weight_zero_point",
                                    "weight_shape", "weight_g_idx", "k_scale", "v_scale", "kv_scale", "activation_scale", NULL};
    for (int i = 0; S[i]; i++)
        if (!strcmp(S[i], s))
            return true;
    return false;
}

int lg_hfquant_take(lg_hfquant *h, const char *name, const lg_st_tensor *t, lg_err *err)
{
    const bool plain = t->st_dtype == LG_ST_F32 || t->st_dtype == LG_ST_F16 || t->st_dtype == LG_ST_BF16;
    if (!quant_suffix(suffix(name)) && plain)
        return 0;
    if (h->n_h == h->cap_h) {
        int nc = h->cap_h ? h->cap_h * 2 : 256;
        held *n = realloc(h->h, (size_t)nc * sizeof *n);
        if (!n)
            return lg_fail(err, "out of memory");
        h->h = n;
        h->cap_h = nc;
    }
    held *e = &h->h[h->n_h];
    e->name = strdup(name);
    if (!e->name)
        return lg_fail(err, "out of memory");
    e->t = *t;
    e->t.name = e->name;
    e->used = false;
    h->n_h++;
    return 1;
}

static held *get(lg_hfquant *h, const char *mod, const char *suf)
{
    char name[600];
    snprintf(name, sizeof name, "%s.%s", mod, suf);
    for (int i = 0; i < h->n_h; i++)
        if (!strcmp(h->h[i].name, name)) {
            h->h[i].used = true;
            return &h->h[i];
        }
    return NULL;
}

/* Element i of a numeric tensor as double (unaligned-safe). */
static double num_at(const lg_st_tensor *t, size_t i)
{
    const uint8_t *p = t->data;
    switch (t->st_dtype) {
    case LG_ST_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case LG_ST_F64: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case LG_ST_F16: { uint16_t u; memcpy(&u, p + 2 * i, 2); return lg_f16_to_f32(u); }
    case LG_ST_BF16: { uint16_t u; memcpy(&u, p + 2 * i, 2); return lg_bf16_to_f32(u); }
    case LG_ST_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case LG_ST_U32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case LG_ST_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case LG_ST_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case LG_ST_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case LG_ST_I8: return (int8_t)p[i];
    case LG_ST_U8: case LG_ST_BOOL: return p[i];
    case LG_ST_F8_E4M3: return lg_e4m3_to_f32(p[i]);
    default: return NAN;
    }
}

static uint32_t u32_at(const lg_st_tensor *t, size_t i)
{
    uint32_t v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

static bool is_float(const held *e)
{
    const lg_st_tensor *t = &e->t;
    return t->st_dtype == LG_ST_F32 || t->st_dtype == LG_ST_F16 || t->st_dtype == LG_ST_BF16 || t->st_dtype == LG_ST_F64;
}

static int expect(const held *e, bool ok, const char *what, lg_err *err)
{
    if (ok)
        return 0;
    char shape[96] = "[";
    for (int i = 0; i < e->t.n_dims; i++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", i ? ", " : "", (long long)e->t.shape[i]);
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    return lg_fail(err, "tensor '%s' (%s %s): expected %s", e->name, e->t.dtype_name, shape, what);
}

/* Adds the planar tensor (or its 16-bit expansion under --dequant-dtype). Takes buf. */
static int add_planar(lg_hfquant *h, lg_weights *w, const char *mod, lg_qtype q, int64_t N, int64_t K, void *buf,
                      lg_err *err)
{
    char name[600];
    snprintf(name, sizeof name, "%s.weight", mod);
    const int64_t shape[2] = {N, K};
    if (!h->dequantize) {
        if (lg_weights_add_quant(w, name, q, shape, buf, buf, err)) {
            free(buf);
            return -1;
        }
        return 0;
    }
    void *d = malloc((size_t)N * (size_t)K * lg_dtype_size(h->deq_dt));
    if (!d || lg_dequant_planar(q, buf, N, K, h->deq_dt, d, err) ||
        lg_weights_add(w, name, h->deq_dt, 2, shape, d, d, err)) {
        if (!d)
            lg_fail(err, "out of memory expanding %s", name);
        free(d);
        free(buf);
        return -1;
    }
    free(buf);
    return 0;
}

/* F8: e4m3 weight [N, K] and d [N, nb] (a [N, nb] for A8S) into planes. */
static int pack_f8(lg_hfquant *h, lg_weights *w, const char *mod, lg_qtype q, const held *wt, const float *d,
                   const float *a, lg_err *err)
{
    const int64_t N = wt->t.shape[0], K = wt->t.shape[1];
    void *buf = calloc(1, lg_planar_bytes(q, N, K));
    if (!buf)
        return lg_fail(err, "out of memory repacking %s", wt->name);
    lg_qplanes p = lg_qplanes_of(lg_tensor_quant(buf, q, N, K));
    for (int64_t r = 0; r < N; r++)
        memcpy(p.q + (size_t)r * (size_t)p.q_row, (const uint8_t *)wt->t.data + (size_t)r * (size_t)K, (size_t)K);
    memcpy(p.d, d, (size_t)N * (size_t)p.nb * 4);
    if (p.a)
        memcpy(p.a, a, (size_t)N * (size_t)p.nb * 4);
    return add_planar(h, w, mod, q, N, K, buf, err);
}

/* Notice when a W8A8 weight will run W8A16 (printed once a load). */
static void w8a8_notice(lg_hfquant *h, lg_qtype q)
{
    static bool said;
    if (h->dequantize && lg_qtype_is_w8a8(q) && !said) {
        said = true;
        fprintf(stderr, "notice: --dequant-dtype expands the W8A8 weights to 16 bits: the model runs W8A16 (no "
                        "activation rounding)\n");
    }
}

/* The compressed-tensors config group whose targets (all Linear layers, a re: pattern or a name) match
 * module mod; NULL when none does. */
static const ct_group *group_of(const lg_hfquant *h, const char *mod)
{
    for (int i = 0; i < h->n_g; i++) {
        bool m = h->g[i].all_linear;
        for (int k = 0; k < h->g[i].n_re && !m; k++)
            m = module_matches(mod, NULL, &h->g[i].re[k]);
        for (int k = 0; k < h->g[i].n_names && !m; k++)
            m = module_matches(mod, h->g[i].names[k], NULL);
        if (m)
            return &h->g[i];
    }
    return NULL;
}

static int do_f8(lg_hfquant *h, lg_weights *w, const char *mod, held *wt, lg_err *err)
{
    if (expect(wt, wt->t.st_dtype == LG_ST_F8_E4M3 && wt->t.n_dims == 2, "F8_E4M3 of rank 2", err))
        return -1;
    const int64_t N = wt->t.shape[0], K = wt->t.shape[1], nb = (K + 127) / 128;
    lg_qtype q;
    int strategy; /* 0 tensor, 1 channel, 3 block */
    held *ws, *is = NULL;
    float ub = 0;
    if (h->fmt == QF_CT_FLOAT) {
        const ct_group *g = group_of(h, mod);
        if (!g)
            return lg_fail(err, "tensor '%s.weight' is FP8 but no config group of quantization_config targets it", mod);
        q = g->layout;
        strategy = g->strategy;
        ws = get(h, mod, "weight_scale");
        if (q == LG_QF8_A8S)
            is = get(h, mod, "input_scale");
    } else if (h->fmt == QF_FP8) {
        q = h->f8;
        strategy = h->block ? 3 : 0;
        ws = get(h, mod, h->block ? "weight_scale_inv" : "weight_scale");
        if (!ws && !h->block)
            ws = get(h, mod, "weight_scale_inv");
        if (q == LG_QF8_A8S && !(is = get(h, mod, "input_scale")))
            is = get(h, mod, "activation_scale"); /* transformers' name */
    } else {
        q = LG_QF8_A8S;
        strategy = 1;
        ws = get(h, mod, "weight_scale");
        held *u = get(h, mod, "input_scale_ub");
        ub = h->ub;
        if (u) {
            if (expect(u, is_float(u) && u->t.n_elems == 1, "one float", err))
                return -1;
            ub = (float)num_at(&u->t, 0);
        }
    }
    if (!ws)
        return lg_fail(err, "tensor '%s.weight' is FP8 but its scale tensor is missing", mod);
    if (q == LG_QF8_A8S && h->fmt != QF_FBGEMM && !is)
        return lg_fail(err, "tensor '%s.input_scale' (static activation scale) is missing", mod);
    const int64_t nbr = (N + 127) / 128;
    if (strategy == 0 && expect(ws, is_float(ws) && ws->t.n_elems == 1, "one float (per-tensor scale)", err))
        return -1;
    if (strategy == 0 && ws->t.n_elems != 1)
        return -1;
    if (strategy == 1 && expect(ws, is_float(ws) && ws->t.n_elems == (size_t)N, "N floats (per-channel scale)", err))
        return -1;
    if (strategy == 3 && expect(ws, is_float(ws) && ws->t.n_dims == 2 && ws->t.shape[0] == nbr && ws->t.shape[1] == nb,
                                "[ceil(N/128), ceil(K/128)] floats (block scales)", err))
        return -1;
    if (is && expect(is, is_float(is) && is->t.n_elems == 1, "one float (static activation scale)", err))
        return -1;
    float *d = malloc((size_t)N * (size_t)nb * 4), *a = malloc((size_t)N * (size_t)nb * 4);
    if (!d || !a) {
        free(d);
        free(a);
        return lg_fail(err, "out of memory");
    }
    const float av = h->fmt == QF_FBGEMM ? -ub : is ? (float)num_at(&is->t, 0) : 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t g = 0; g < nb; g++) {
            size_t i = (size_t)r * (size_t)nb + (size_t)g;
            d[i] = (float)num_at(&ws->t, strategy == 0 ? 0 : strategy == 1 ? (size_t)r : (size_t)(r / 128 * nb + g));
            a[i] = av;
        }
    w8a8_notice(h, q);
    int rc = pack_f8(h, w, mod, q, wt, d, a, err);
    free(d);
    free(a);
    return rc;
}

/* An int4 module unpacked: q [N, K] (0..15), per (row, source group) scale and zero, g_idx [K]. */
typedef struct i4src {
    int64_t N, K, ng;
    uint8_t *q;
    float *s;    /* [N, ng] */
    uint8_t *z;  /* [N, ng] */
    int32_t *gi; /* [K] */
    int group;   /* source group size; 0: one a row */
} i4src;

static void i4_free(i4src *s)
{
    free(s->q);
    free(s->s);
    free(s->z);
    free(s->gi);
}

static int i4_alloc(i4src *s, int64_t N, int64_t K, int64_t ng, lg_err *err)
{
    s->N = N;
    s->K = K;
    s->ng = ng;
    s->q = malloc((size_t)N * (size_t)K);
    s->s = malloc((size_t)N * (size_t)ng * 4);
    s->z = malloc((size_t)N * (size_t)ng);
    s->gi = malloc((size_t)K * 4);
    if (!s->q || !s->s || !s->z || !s->gi)
        return lg_fail(err, "out of memory unpacking a [%lld, %lld] int4 tensor", (long long)N, (long long)K);
    for (int64_t k = 0; k < K; k++)
        s->gi[k] = s->group > 0 ? (int32_t)(k / s->group) : 0;
    return 0;
}

/* Into I4 planes, or (groups that do not map onto 128, act-order) expanded to 16 bits with a notice. */
static int i4_emit(lg_hfquant *h, lg_weights *w, const char *mod, const i4src *s, lg_err *err)
{
    const int64_t N = s->N, K = s->K, nb = (K + 127) / 128;
    bool trivial = true;
    for (int64_t k = 0; k < K && trivial; k++)
        trivial = s->gi[k] == (s->group > 0 ? k / s->group : 0);
    const bool maps = s->group <= 0 || s->group % 128 == 0 || s->group >= K;
    if (!trivial || !maps) {
        char name[600];
        snprintf(name, sizeof name, "%s.weight", mod);
        if (!h->expand_noticed)
            fprintf(stderr, "notice: %s and every such tensor: %s; expanded to %s at load (correct, slower than "
                            "int4)\n", name,
                    !trivial ? "act-order g_idx (desc_act) does not map onto groups of 128"
                             : "int4 groups smaller than 128 do not map onto groups of 128",
                    lg_dtype_name(h->deq_dt));
        h->expand_noticed = true;
        float *f = malloc((size_t)N * (size_t)K * 4);
        void *o = malloc((size_t)N * (size_t)K * lg_dtype_size(h->deq_dt));
        if (!f || !o) {
            free(f);
            free(o);
            return lg_fail(err, "out of memory expanding %s", name);
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                const size_t gi = (size_t)n * (size_t)s->ng + (size_t)s->gi[k];
                f[(size_t)n * (size_t)K + (size_t)k] = s->s[gi] * (float)((int)s->q[(size_t)n * (size_t)K + (size_t)k] - (int)s->z[gi]);
            }
        lg_from_f32(o, h->deq_dt, f, (size_t)N * (size_t)K);
        free(f);
        const int64_t shape[2] = {N, K};
        if (lg_weights_add(w, name, h->deq_dt, 2, shape, o, o, err)) {
            free(o);
            return -1;
        }
        return 0;
    }
    void *buf = calloc(1, lg_planar_bytes(LG_QI4, N, K));
    if (!buf)
        return lg_fail(err, "out of memory repacking %s", mod);
    lg_qplanes p = lg_qplanes_of(lg_tensor_quant(buf, LG_QI4, N, K));
    for (int64_t n = 0; n < N; n++) {
        uint8_t *qr = p.q + (size_t)n * (size_t)p.q_row;
        for (int64_t g = 0; g < nb; g++) {
            const size_t gi = (size_t)n * (size_t)s->ng + (size_t)s->gi[g * 128];
            const uint16_t dh = lg_f32_to_f16(s->s[gi]);
            memcpy((uint8_t *)p.d + ((size_t)n * (size_t)nb + (size_t)g) * 2, &dh, 2);
            p.z[(size_t)n * (size_t)nb + (size_t)g] = s->z[gi];
            for (int64_t k = g * 128; k < (g + 1) * 128; k++) {
                const int v = k < K ? s->q[(size_t)n * (size_t)K + (size_t)k] : s->z[gi];
                qr[k / 2] |= (uint8_t)(v << ((k & 1) * 4));
            }
        }
    }
    return add_planar(h, w, mod, LG_QI4, N, K, buf, err);
}

/* AWQ: nibble c of a packed word holds column 8j + AWQ_COL[c]... stored as nibble order {0,2,4,6,1,3,5,7}. */
static const int AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7}; /* column c of a word is in nibble AWQ_NIBBLE[c] */

static int do_awq(lg_hfquant *h, lg_weights *w, const char *mod, held *qw, lg_err *err)
{
    held *qz = get(h, mod, "qzeros"), *sc = get(h, mod, "scales");
    if (!qz || !sc)
        return lg_fail(err, "AWQ module %s: expected qweight, qzeros and scales, found qweight without %s", mod,
                       !qz ? "qzeros" : "scales");
    if (expect(qw, qw->t.st_dtype == LG_ST_I32 && qw->t.n_dims == 2, "I32 [K, N/8]", err))
        return -1;
    const int64_t K = qw->t.shape[0], N = qw->t.shape[1] * 8;
    const int G = h->group > 0 ? h->group : (int)K;
    const int64_t ng = (K + G - 1) / G;
    if (expect(sc, is_float(sc) && sc->t.n_dims == 2 && sc->t.shape[0] == ng && sc->t.shape[1] == N, "scales [K/G, N]", err) ||
        expect(qz, qz->t.st_dtype == LG_ST_I32 && qz->t.n_dims == 2 && qz->t.shape[0] == ng && qz->t.shape[1] == N / 8,
               "I32 qzeros [K/G, N/8]", err))
        return -1;
    i4src s = {.group = h->group > 0 ? h->group : 0};
    int rc = -1;
    if (i4_alloc(&s, N, K, ng, err))
        goto done;
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++)
            s.q[(size_t)n * (size_t)K + (size_t)k] =
                (uint8_t)((u32_at(&qw->t, (size_t)k * (size_t)(N / 8) + (size_t)(n / 8)) >> (4 * AWQ_NIBBLE[n % 8])) & 15);
    for (int64_t g = 0; g < ng; g++)
        for (int64_t n = 0; n < N; n++) {
            s.z[(size_t)n * (size_t)ng + (size_t)g] =
                (uint8_t)((u32_at(&qz->t, (size_t)g * (size_t)(N / 8) + (size_t)(n / 8)) >> (4 * AWQ_NIBBLE[n % 8])) & 15);
            s.s[(size_t)n * (size_t)ng + (size_t)g] = (float)num_at(&sc->t, (size_t)g * (size_t)N + (size_t)n);
        }
    rc = i4_emit(h, w, mod, &s, err);
done:
    i4_free(&s);
    return rc;
}

static int do_gptq(lg_hfquant *h, lg_weights *w, const char *mod, held *qw, lg_err *err)
{
    held *qz = get(h, mod, "qzeros"), *sc = get(h, mod, "scales"), *gi = get(h, mod, "g_idx");
    if (!qz || !sc)
        return lg_fail(err, "GPTQ module %s: expected qweight, qzeros and scales, found qweight without %s", mod,
                       !qz ? "qzeros" : "scales");
    if (expect(qw, qw->t.st_dtype == LG_ST_I32 && qw->t.n_dims == 2, "I32 [K/8, N]", err))
        return -1;
    const int64_t K = qw->t.shape[0] * 8, N = qw->t.shape[1];
    const int G = h->group > 0 ? h->group : (int)K;
    const int64_t ng = (K + G - 1) / G;
    if (expect(sc, is_float(sc) && sc->t.n_dims == 2 && sc->t.shape[0] == ng && sc->t.shape[1] == N, "scales [K/G, N]", err) ||
        expect(qz, qz->t.st_dtype == LG_ST_I32 && qz->t.n_dims == 2 && qz->t.shape[0] == ng && qz->t.shape[1] * 8 == N,
               "I32 qzeros [K/G, N/8]", err) ||
        (gi && expect(gi, (gi->t.st_dtype == LG_ST_I32 || gi->t.st_dtype == LG_ST_I64) && gi->t.n_elems == (size_t)K,
                      "an integer g_idx of K elements", err)))
        return -1;
    i4src s = {.group = h->group > 0 ? h->group : 0};
    int rc = -1;
    if (i4_alloc(&s, N, K, ng, err))
        goto done;
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++)
            s.q[(size_t)n * (size_t)K + (size_t)k] =
                (uint8_t)((u32_at(&qw->t, (size_t)(k / 8) * (size_t)N + (size_t)n) >> (4 * (k % 8))) & 15);
    for (int64_t g = 0; g < ng; g++)
        for (int64_t n = 0; n < N; n++) {
            uint32_t word = u32_at(&qz->t, (size_t)g * (size_t)(N / 8) + (size_t)(n / 8));
            if (h->v1)
                word += 0x11111111u; /* gptq v1 stores zero - 1: gptqmodel's v1 -> v2 conversion */
            s.z[(size_t)n * (size_t)ng + (size_t)g] = (uint8_t)((word >> (4 * (n % 8))) & 15);
            s.s[(size_t)n * (size_t)ng + (size_t)g] = (float)num_at(&sc->t, (size_t)g * (size_t)N + (size_t)n);
        }
    if (gi)
        for (int64_t k = 0; k < K; k++) {
            const double v = num_at(&gi->t, (size_t)k);
            if (!(v >= 0 && v < (double)ng)) {
                lg_fail(err, "tensor '%s': g_idx[%lld] = %g, expected 0..%lld", gi->name, (long long)k, v, (long long)ng - 1);
                goto done;
            }
            s.gi[k] = (int32_t)v;
        }
    rc = i4_emit(h, w, mod, &s, err);
done:
    i4_free(&s);
    return rc;
}

static int do_ct_pack(lg_hfquant *h, lg_weights *w, const char *mod, held *wp, lg_err *err)
{
    const ct_group *g = group_of(h, mod);
    if (!g)
        return lg_fail(err, "tensor '%s.weight_packed' has no config group of quantization_config targeting it", mod);
    held *sc = get(h, mod, "weight_scale"), *zp = get(h, mod, "weight_zero_point"), *sh = get(h, mod, "weight_shape"),
         *gi = get(h, mod, "weight_g_idx");
    if (!sc || !sh)
        return lg_fail(err, "pack-quantized module %s: expected weight_packed, weight_scale and weight_shape", mod);
    if (expect(sh, sh->t.n_elems == 2 && !is_float(sh), "two integers (weight_shape)", err) ||
        expect(wp, wp->t.st_dtype == LG_ST_I32 && wp->t.n_dims == 2, "I32 [N, K/8]", err))
        return -1;
    const int64_t N = (int64_t)num_at(&sh->t, 0), K = (int64_t)num_at(&sh->t, 1);
    if (expect(wp, wp->t.shape[0] == N && wp->t.shape[1] == (K + 7) / 8, "[N, ceil(K/8)] as weight_shape says", err))
        return -1;
    const int G = g->group > 0 ? g->group : (int)K;
    const int64_t ng = (K + G - 1) / G;
    if (expect(sc, is_float(sc) && sc->t.n_elems == (size_t)(N * ng), "scales [N, groups]", err))
        return -1;
    bool zp_packed = false;
    if (zp) {
        zp_packed = zp->t.st_dtype == LG_ST_I32 && zp->t.n_dims == 2 && zp->t.shape[0] == (N + 7) / 8 && zp->t.shape[1] == ng;
        if (expect(zp, zp_packed || (!is_float(zp) && zp->t.n_elems == (size_t)(N * ng)),
                   "zero points [N, groups] or I32 packed [ceil(N/8), groups]", err))
            return -1;
    }
    i4src s = {.group = g->group};
    int rc = -1;
    if (i4_alloc(&s, N, K, ng, err))
        goto done;
    const int64_t wcols = wp->t.shape[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            s.q[(size_t)n * (size_t)K + (size_t)k] =
                (uint8_t)((u32_at(&wp->t, (size_t)n * (size_t)wcols + (size_t)(k / 8)) >> (4 * (k % 8))) & 15);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < ng; j++) {
            const size_t i = (size_t)n * (size_t)ng + (size_t)j;
            int z = 0;
            if (zp && zp_packed) {
                const uint32_t word = u32_at(&zp->t, (size_t)(n / 8) * (size_t)ng + (size_t)j);
                z = (int)((word >> (4 * (n % 8))) & 15) - 8;
            } else if (zp) {
                z = (int)num_at(&zp->t, i);
            }
            if (z < -8 || z > 7) {
                lg_fail(err, "tensor '%s.weight_zero_point': zero point %d outside -8..7", mod, z);
                goto done;
            }
            s.z[i] = (uint8_t)(z + 8);
            s.s[i] = (float)num_at(&sc->t, i);
        }
    if (gi) {
        if (expect(gi, !is_float(gi) && gi->t.n_elems == (size_t)K, "K integers (weight_g_idx)", err))
            goto done;
        for (int64_t k = 0; k < K; k++) {
            const double v = num_at(&gi->t, (size_t)k);
            if (!(v >= 0 && v < (double)ng)) {
                lg_fail(err, "tensor '%s.weight_g_idx': [%lld] = %g out of range", mod, (long long)k, v);
                goto done;
            }
            s.gi[k] = (int32_t)v;
        }
    }
    rc = i4_emit(h, w, mod, &s, err);
done:
    i4_free(&s);
    return rc;
}

int lg_hfquant_finish(lg_hfquant *h, lg_weights *w, lg_err *err)
{
    for (int i = 0; i < h->n_h; i++) {
        held *e = &h->h[i];
        const char *suf = suffix(e->name);
        char mod[600];
        snprintf(mod, sizeof mod, "%.*s", (int)(suf - e->name - (suf > e->name ? 1 : 0)), e->name);
        if (!strcmp(suf, "k_scale") || !strcmp(suf, "v_scale") || !strcmp(suf, "kv_scale")) {
            /* KV cache scales: kept as one f32 each under their own name, for an e4m3 cache
             * (--kv-cache-dtype fp8; model.c read_kv_scales); a 16-bit cache ignores them */
            e->used = true;
            if (e->t.n_elems != 1)
                return lg_fail(err, "tensor %s: a KV cache scale must be one value, got %zu", e->name, e->t.n_elems);
            float *v = malloc(sizeof *v);
            const int64_t one = 1;
            if (!v)
                return lg_fail(err, "out of memory");
            *v = (float)num_at(&e->t, 0);
            if (lg_weights_add(w, e->name, LG_F32, 1, &one, v, v, err)) {
                free(v);
                return -1;
            }
            continue;
        }
        int rc = 0;
        const bool f8w = !strcmp(suf, "weight") && e->t.st_dtype == LG_ST_F8_E4M3;
        if (f8w && (h->fmt == QF_CT_FLOAT || h->fmt == QF_FP8 || h->fmt == QF_FBGEMM))
            rc = do_f8(h, w, mod, e, err);
        else if (!strcmp(suf, "qweight") && h->fmt == QF_AWQ)
            rc = do_awq(h, w, mod, e, err);
        else if (!strcmp(suf, "qweight") && h->fmt == QF_GPTQ)
            rc = do_gptq(h, w, mod, e, err);
        else if (!strcmp(suf, "weight_packed") && h->fmt == QF_CT_PACK)
            rc = do_ct_pack(h, w, mod, e, err);
        else
            continue;
        if (rc == 0 && ignored(h, mod))
            rc = lg_fail(err, "module %s is quantized but quantization_config lists it as not converted", mod);
        if (rc)
            return -1;
        e->used = true;
    }
    for (int i = 0; i < h->n_h; i++)
        if (!h->h[i].used)
            return lg_fail(err, "tensor '%s' (%s) is not part of a %s quantized module loragate can read", h->h[i].name,
                           h->h[i].t.dtype_name, h->method);
    return 0;
}
