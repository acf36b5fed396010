/*
 * cmd_tokenize.c — `loragate tokenize`: a batch front-end to the tokenizer,
 * used by the parity tests (tests/tokenizer/) and for debugging.
 *
 *   loragate tokenize (--tokenizer tokenizer.json [--config tokenizer_config.json]
 *                      | --gguf model.gguf) [--no-special] [--add-bos] [--pieces]
 *
 * Reads JSON lines from stdin and writes one JSON line per input line:
 *   {"text": "..."} -> {"ids": [...], "decoded": "...", "decoded_skip": "..."}
 *   {"ids": [...]}  -> {"decoded": "...", "decoded_skip": "..."}
 * --pieces adds "pieces"/"pieces_skip": the incremental detokenizer's output
 * per id (skip_special false/true), then the flush as the last piece.
 * --add-bos encodes with HF add_special_tokens=True semantics (BOS only when
 * the tokenizer's own config adds one). --no-special leaves special tokens
 * in the text as plain text. A bad line yields {"error": "..."}; the exit
 * status is 1 if any line failed.
 *
 * For --gguf only the tokenizer.* metadata is read (engine/model/gguf.h; tensor
 * data is never touched), with llama.cpp's defaults for absent keys.
 */
#include "engine/base/common.h"
#include "engine/model/gguf.h"
#include "engine/model/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- GGUF tokenizer metadata ---------------------------------------------------------- */

typedef struct {
    lg_vocab_spec spec;
    char **tokens, **merges; /* lg_gguf_get_arr_str: one allocation each */
    float *scores;
    int32_t *types;
    char pre[64];
} lg_gguf_vocab;

static void lg_gguf_vocab_free(lg_gguf_vocab *v)
{
    free(v->tokens);
    free(v->merges);
    free(v->scores);
    free(v->types);
}

static int lg_tok_id_kv(const lg_gguf *g, const char *key, int n, int *out, lg_err *err)
{
    int64_t v;
    int r = lg_gguf_get_int(g, key, &v, err);
    if (r < 0)
        return -1;
    *out = r == 1 && v >= 0 && v < n ? (int)v : -1;
    return 0;
}

/* Reads tokenizer.ggml.* into v (llama.cpp's defaults for absent keys). */
static int lg_gguf_read_vocab(const char *path, lg_gguf_vocab *v, lg_err *err)
{
    memset(v, 0, sizeof *v);
    lg_gguf *g = NULL;
    if (lg_gguf_open(path, &g, err))
        return -1;
    const char *model = NULL, *pre = NULL;
    size_t nt = 0, nm = 0, ns = 0, ny = 0;
    int r;
    if (lg_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL, err) < 0 ||
        lg_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL, err) < 0)
        goto fail;
    if (!model || (strcmp(model, "gpt2") && strcmp(model, "llama"))) {
        lg_fail(err, "tokenizer.ggml.model \"%s\" is unsupported (gpt2, llama)", model ? model : "(absent)");
        goto fail;
    }
    v->spec.kind = !strcmp(model, "gpt2") ? LG_TOK_BYTE_BPE : LG_TOK_SPM_BPE;
    if (pre) {
        snprintf(v->pre, sizeof v->pre, "%s", pre);
        v->spec.pre = v->pre;
    }
    if ((r = lg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", &v->tokens, &nt, err)) < 0)
        goto fail;
    if (r == 0 || nt == 0 || nt > (1u << 24)) {
        lg_fail(err, "tokenizer.ggml.tokens is missing, empty or has over 16M entries");
        goto fail;
    }
    if (lg_gguf_get_arr_f32(g, "tokenizer.ggml.scores", &v->scores, &ns, err) < 0 ||
        lg_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", &v->types, &ny, err) < 0 ||
        lg_gguf_get_arr_str(g, "tokenizer.ggml.merges", &v->merges, &nm, err) < 0)
        goto fail;
    if ((v->scores && ns != nt) || (v->types && ny != nt) || nm > (1u << 24)) {
        lg_fail(err, "tokenizer arrays disagree: %zu tokens, %zu scores, %zu types, %zu merges", nt, ns, ny, nm);
        goto fail;
    }
    v->spec.n_tokens = (int)nt;
    v->spec.tokens = (const char *const *)v->tokens;
    v->spec.scores = v->scores;
    v->spec.types = v->types;
    v->spec.n_merges = (int)nm;
    v->spec.merges = (const char *const *)v->merges;
    v->spec.add_bos = v->spec.add_space_prefix = v->spec.kind == LG_TOK_SPM_BPE;
    if (lg_tok_id_kv(g, "tokenizer.ggml.bos_token_id", (int)nt, &v->spec.bos_id, err) ||
        lg_tok_id_kv(g, "tokenizer.ggml.eos_token_id", (int)nt, &v->spec.eos_id, err) ||
        lg_tok_id_kv(g, "tokenizer.ggml.unknown_token_id", (int)nt, &v->spec.unk_id, err) ||
        lg_tok_id_kv(g, "tokenizer.ggml.padding_token_id", (int)nt, &v->spec.pad_id, err) ||
        lg_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v->spec.add_bos, err) < 0 ||
        lg_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &v->spec.add_space_prefix, err) < 0)
        goto fail;
    lg_gguf_free(g);
    return 0;
fail:
    lg_err_prefix(err, "%s", path);
    lg_gguf_free(g);
    lg_gguf_vocab_free(v);
    memset(v, 0, sizeof *v);
    return -1;
}

/* ---- the command ---------------------------------------------------------------------- */

static void lg_tok_usage(void)
{
    fprintf(stderr,
            "usage: loragate tokenize (--tokenizer tokenizer.json [--config tokenizer_config.json] |\n"
            "                          --gguf model.gguf) [--no-special] [--add-bos] [--pieces]\n"
            "  stdin: JSON lines {\"text\": \"...\"} or {\"ids\": [...]}\n"
            "  stdout: {\"ids\": [...], \"decoded\": \"...\", \"decoded_skip\": \"...\"[, \"pieces\": [...]]}\n");
}

static json_t *lg_tok_pieces(const lg_tokenizer *t, const int32_t *ids, int n, bool skip, bool *bad)
{
    json_t *arr = json_array();
    lg_detok *d = lg_detok_new(t, skip);
    if (!arr || !d) {
        json_decref(arr);
        lg_detok_free(d);
        *bad = true;
        return NULL;
    }
    for (int i = 0; i <= n; i++) {
        size_t len;
        const char *p = i < n ? lg_detok_push(d, ids[i], &len) : lg_detok_flush(d, &len);
        json_t *s = json_stringn(p, len);
        if (!s) {
            *bad = true; /* not valid UTF-8 */
            break;
        }
        json_array_append_new(arr, s);
    }
    lg_detok_free(d);
    return arr;
}

static json_t *lg_tok_line(const lg_tokenizer *t, json_t *in, bool special, bool add_bos, bool pieces)
{
    lg_err err = { { 0 } };
    json_t *res = json_object();
    json_t *text = json_object_get(in, "text"), *jids = json_object_get(in, "ids");
    int32_t *ids = NULL;
    int n = 0;
    if (json_is_string(text)) {
        if (lg_tokenizer_encode(t, json_string_value(text), json_string_length(text), add_bos, special, &ids,
                                &n, &err))
            goto fail;
        json_t *a = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(a, json_integer(ids[i]));
        json_object_set_new(res, "ids", a);
    } else if (json_is_array(jids)) {
        n = (int)json_array_size(jids);
        ids = malloc(((size_t)n + 1) * sizeof *ids);
        for (int i = 0; ids && i < n; i++) {
            json_t *v = json_array_get(jids, i);
            if (!json_is_integer(v)) {
                lg_fail(&err, "ids[%d] is not an integer", i);
                goto fail;
            }
            ids[i] = (int32_t)json_integer_value(v);
        }
        if (!ids) {
            lg_fail(&err, "out of memory");
            goto fail;
        }
    } else {
        lg_fail(&err, "expected {\"text\": string} or {\"ids\": [int]}");
        goto fail;
    }
    for (int skip = 0; skip < 2; skip++) {
        char *dec = NULL;
        size_t dlen;
        if (lg_tokenizer_decode_n(t, ids, n, skip, &dec, &dlen, &err))
            goto fail;
        json_t *s = json_stringn(dec, dlen);
        free(dec);
        if (!s) {
            lg_fail(&err, "decode produced invalid UTF-8");
            goto fail;
        }
        json_object_set_new(res, skip ? "decoded_skip" : "decoded", s);
        if (pieces) {
            bool bad = false;
            json_t *p = lg_tok_pieces(t, ids, n, skip, &bad);
            if (bad) {
                json_decref(p);
                lg_fail(&err, "detok produced an invalid UTF-8 piece");
                goto fail;
            }
            json_object_set_new(res, skip ? "pieces_skip" : "pieces", p);
        }
    }
    free(ids);
    return res;
fail:
    free(ids);
    json_decref(res);
    res = json_object();
    json_object_set_new(res, "error", json_string(err.msg[0] ? err.msg : "error"));
    return res;
}

int lg_cmd_tokenize(int argc, char **argv)
{
    const char *tj = NULL, *cfgp = NULL, *gguf = NULL;
    bool special = true, add_bos = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 < argc) tj = argv[++i];
        else if (!strcmp(a, "--config") && i + 1 < argc) cfgp = argv[++i];
        else if (!strcmp(a, "--gguf") && i + 1 < argc) gguf = argv[++i];
        else if (!strcmp(a, "--no-special")) special = false;
        else if (!strcmp(a, "--add-bos")) add_bos = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "tokenize")) continue; /* tolerate being passed the subcommand */
        else {
            lg_tok_usage();
            return 2;
        }
    }
    if (!tj == !gguf) {
        lg_tok_usage();
        return 2;
    }
    lg_err err = { { 0 } };
    lg_tokenizer *t = NULL;
    if (tj) {
        char *txt = NULL, *cfg = NULL;
        size_t n;
        if (lg_read_file(tj, (size_t)1 << 30, &txt, &n, &err) ||
            (cfgp && lg_read_file(cfgp, (size_t)1 << 24, &cfg, &n, &err)) ||
            lg_tokenizer_from_json(txt, cfg, &t, &err)) {
            fprintf(stderr, "loragate tokenize: %s\n", err.msg);
            free(txt);
            free(cfg);
            return 1;
        }
        free(txt);
        free(cfg);
    } else {
        lg_gguf_vocab g;
        if (lg_gguf_read_vocab(gguf, &g, &err)) {
            fprintf(stderr, "loragate tokenize: %s\n", err.msg);
            return 1;
        }
        int rc = lg_tokenizer_from_vocab(&g.spec, &t, &err);
        lg_gguf_vocab_free(&g);
        if (rc) {
            fprintf(stderr, "loragate tokenize: %s: %s\n", gguf, err.msg);
            return 1;
        }
    }
    /* --add-bos: HF add_special_tokens=True, i.e. the tokenizer's own default */
    bool bos = add_bos && lg_tokenizer_add_bos(t);

    int status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len == 0)
            continue;
        json_error_t je;
        json_t *in = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je), *res;
        if (!json_is_object(in)) {
            res = json_object();
            json_object_set_new(res, "error", json_string(in ? "line is not a JSON object" : je.text));
        } else {
            res = lg_tok_line(t, in, special, bos, pieces);
        }
        if (json_object_get(res, "error"))
            status = 1;
        char *s = json_dumps(res, JSON_COMPACT);
        if (s) {
            fputs(s, stdout);
            fputc('\n', stdout);
            free(s);
        }
        json_decref(res);
        json_decref(in);
    }
    free(line);
    lg_tokenizer_free(t);
    return status;
}
