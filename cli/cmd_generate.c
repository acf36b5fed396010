/*
 * cmd_generate.c — `loragate generate`: one prompt through a model.
 *
 * Contract relied on by tests and outside checks:
 *   loragate generate --model PATH [--backend cpu|cuda]
 *     (--prompt TEXT | --prompt-tokens 1,2,3) [--chat] [--max-tokens N]
 *     [--temperature T] [--top-p P] [--top-k K] [--seed S] [--json] [--logits]
 * --json prints one JSON object: "tokens" (generated ids), "text", and with
 * --logits "last_logits" (f32 logits at the last prompt position, i.e. the
 * distribution the first generated token was drawn from). --prompt-tokens
 * feeds ids as given, adding no BOS. Without --json the text streams to
 * stdout as it is generated.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "chat_template.h"
#include "cli.h"
#include "engine.h"
#include "stop_strings.h"
#include "tokenizer.h"
#include "weights.h"

#define MAX_STOPS 16

typedef struct gen_opts {
    const char *model, *backend, *prompt, *prompt_tokens, *system, *chat_template;
    bool chat, json, logits, stats;
    int max_tokens, top_k, threads, ctx, budget;
    float temperature, top_p, min_p;
    uint64_t seed;
    const char *stops[MAX_STOPS];
    int n_stops;
    lg_dtype dequant;
} gen_opts;

/* state shared with the engine callbacks */
typedef struct gen_state {
    const gen_opts *o;
    lg_engine *engine;
    const lg_tokenizer *tok;
    lg_detok *detok;
    lg_stopper *stopper;
    int32_t *out;
    int n_out, cap_out;
    float *first_logits;
    int n_vocab;
    char *text;          /* accumulated emitted text */
    size_t text_len, text_cap;
    bool done, stopped_by_string;
    lg_finish_reason reason;
    lg_usage usage;
    char error[512];
} gen_state;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loragate generate --model PATH (--prompt TEXT | --prompt-tokens 1,2,3) [options]\n"
            "  --model PATH           HF model directory or .gguf file\n"
            "  --backend cpu|cuda     compute backend (default cpu)\n"
            "  --prompt TEXT          prompt text (encoded with the model's tokenizer)\n"
            "  --prompt-tokens IDS    comma-separated token ids, used as given (no BOS added)\n"
            "  --chat                 wrap the prompt in the model's chat template as a user message\n"
            "  --system TEXT          system message (with --chat)\n"
            "  --chat-template NAME   built-in template when the model's is missing or unrecognised:\n"
            "                         chatml, llama3, llama2, mistral\n"
            "  --max-tokens N         most tokens to generate (default 256)\n"
            "  --temperature T        0 = greedy (default 0)\n"
            "  --top-p P, --top-k K, --min-p P, --seed S   sampling filters and seed\n"
            "  --stop TEXT            stop string (repeatable, up to %d)\n"
            "  --json                 print one JSON object: tokens, text, finish_reason, usage\n"
            "  --logits               with --json: add last_logits (logits at the last prompt position)\n"
            "  --stats                print prompt/decode speed to stderr\n"
            "  --threads N            CPU threads (default: all cores)\n"
            "  --ctx N                context length to allocate (default min(model, 4096))\n"
            "  --dequant-dtype f16|f32  dtype quantized GGUF weights are expanded to (default f16)\n",
            MAX_STOPS);
}

static int parse_int(const char *s, const char *what, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "loragate generate: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *what, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || end == s || v != v) {
        fprintf(stderr, "loragate generate: %s must be a number, got '%s'\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_token_list(const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    const char *p = s;
    while (ids && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            fprintf(stderr, "loragate generate: --prompt-tokens must be comma-separated non-negative ids, got '%s'\n", s);
            return -1;
        }
        if (k == cap) {
            int32_t *ni = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!ni) break;
            ids = ni;
        }
        ids[k++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    if (!ids || k == 0) {
        free(ids);
        fprintf(stderr, "loragate generate: --prompt-tokens is empty\n");
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

static void append_text(gen_state *st, const char *s, size_t n)
{
    if (!n)
        return;
    if (!st->o->json) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
    }
    if (st->text_len + n + 1 > st->text_cap) {
        size_t c = st->text_cap ? st->text_cap : 256;
        while (c < st->text_len + n + 1) c *= 2;
        char *nt = realloc(st->text, c);
        if (!nt)
            return;
        st->text = nt;
        st->text_cap = c;
    }
    memcpy(st->text + st->text_len, s, n);
    st->text_len += n;
    st->text[st->text_len] = 0;
}

static void on_token(void *user, int64_t id, int32_t token, const float *logits, int n_vocab)
{
    gen_state *st = user;
    if (logits && st->o->logits) {
        st->first_logits = malloc((size_t)n_vocab * sizeof(float));
        if (st->first_logits)
            memcpy(st->first_logits, logits, (size_t)n_vocab * sizeof(float));
        st->n_vocab = n_vocab;
    }
    if (st->stopped_by_string)
        return;
    if (st->n_out == st->cap_out) {
        int c = st->cap_out ? 2 * st->cap_out : 64;
        int32_t *no = realloc(st->out, (size_t)c * sizeof *no);
        if (!no)
            return;
        st->out = no;
        st->cap_out = c;
    }
    st->out[st->n_out++] = token;
    if (!st->detok)
        return;
    size_t n;
    const char *piece = lg_detok_push(st->detok, token, &n);
    bool matched = false;
    const char *safe = lg_stopper_push(st->stopper, piece, n, &n, &matched);
    append_text(st, safe, n);
    if (matched) {
        st->stopped_by_string = true;
        lg_engine_cancel(st->engine, id, LG_FINISH_STOP);
    }
}

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *usage, const char *error)
{
    gen_state *st = user;
    st->done = true;
    st->reason = reason;
    st->usage = *usage;
    if (error)
        snprintf(st->error, sizeof st->error, "%s", error);
    if (st->detok && !st->stopped_by_string) {
        size_t n;
        const char *piece = lg_detok_flush(st->detok, &n);
        bool matched;
        const char *safe = lg_stopper_push(st->stopper, piece, n, &n, &matched);
        append_text(st, safe, n);
        if (!matched) {
            safe = lg_stopper_flush(st->stopper, &n);
            append_text(st, safe, n);
        }
    }
}

static int parse_args(int argc, char **argv, gen_opts *o)
{
    enum { O_MODEL = 1000, O_BACKEND, O_PROMPT, O_PTOK, O_CHAT, O_SYSTEM, O_TMPL, O_MAXTOK, O_TEMP, O_TOPP, O_TOPK,
           O_MINP, O_SEED, O_STOP, O_JSON, O_LOGITS, O_STATS, O_THREADS, O_CTX, O_DQ, O_BUDGET, O_HELP };
    static const struct option longopts[] = {
        {"model", required_argument, 0, O_MODEL}, {"backend", required_argument, 0, O_BACKEND},
        {"prompt", required_argument, 0, O_PROMPT}, {"prompt-tokens", required_argument, 0, O_PTOK},
        {"chat", no_argument, 0, O_CHAT}, {"system", required_argument, 0, O_SYSTEM},
        {"chat-template", required_argument, 0, O_TMPL}, {"max-tokens", required_argument, 0, O_MAXTOK},
        {"temperature", required_argument, 0, O_TEMP}, {"top-p", required_argument, 0, O_TOPP},
        {"top-k", required_argument, 0, O_TOPK}, {"min-p", required_argument, 0, O_MINP},
        {"seed", required_argument, 0, O_SEED}, {"stop", required_argument, 0, O_STOP},
        {"json", no_argument, 0, O_JSON}, {"logits", no_argument, 0, O_LOGITS}, {"stats", no_argument, 0, O_STATS},
        {"threads", required_argument, 0, O_THREADS}, {"ctx", required_argument, 0, O_CTX},
        {"dequant-dtype", required_argument, 0, O_DQ}, {"step-tokens", required_argument, 0, O_BUDGET},
        {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0},
    };
    *o = (gen_opts){.backend = "cpu", .max_tokens = 256, .top_p = 1.0f, .dequant = LG_F16, .budget = 512};
    optind = 1;
    opterr = 0;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_BACKEND: o->backend = optarg; break;
        case O_PROMPT: o->prompt = optarg; break;
        case O_PTOK: o->prompt_tokens = optarg; break;
        case O_CHAT: o->chat = true; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_TMPL: o->chat_template = optarg; break;
        case O_MAXTOK: if (parse_int(optarg, "--max-tokens", 1, 1 << 24, &v)) return 2; o->max_tokens = (int)v; break;
        case O_TEMP: if (parse_float(optarg, "--temperature", &o->temperature) || o->temperature < 0) return 2; break;
        case O_TOPP: if (parse_float(optarg, "--top-p", &o->top_p) || o->top_p <= 0 || o->top_p > 1) return 2; break;
        case O_TOPK: if (parse_int(optarg, "--top-k", 0, 1 << 24, &v)) return 2; o->top_k = (int)v; break;
        case O_MINP: if (parse_float(optarg, "--min-p", &o->min_p) || o->min_p < 0 || o->min_p > 1) return 2; break;
        case O_SEED: {
            char *end;
            errno = 0;
            o->seed = strtoull(optarg, &end, 10);
            if (errno || *end || end == optarg) {
                fprintf(stderr, "loragate generate: --seed must be a non-negative integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case O_STOP:
            if (o->n_stops == MAX_STOPS) {
                fprintf(stderr, "loragate generate: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            o->stops[o->n_stops++] = optarg;
            break;
        case O_JSON: o->json = true; break;
        case O_LOGITS: o->logits = true; break;
        case O_STATS: o->stats = true; break;
        case O_THREADS: if (parse_int(optarg, "--threads", 1, 1024, &v)) return 2; o->threads = (int)v; break;
        case O_CTX: if (parse_int(optarg, "--ctx", 16, 1 << 24, &v)) return 2; o->ctx = (int)v; break;
        case O_BUDGET: if (parse_int(optarg, "--step-tokens", 16, 1 << 20, &v)) return 2; o->budget = (int)v; break;
        case O_DQ:
            if (lg_dtype_parse(optarg, &o->dequant) != 0 || o->dequant == LG_I32) {
                fprintf(stderr, "loragate generate: --dequant-dtype must be f16, bf16 or f32, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_HELP: usage(stdout); return 1000;
        default:
            fprintf(stderr, "loragate generate: unknown or incomplete option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "loragate generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "loragate generate: --model is required\n");
        return 2;
    }
    if (!o->prompt == !o->prompt_tokens) {
        fprintf(stderr, "loragate generate: give exactly one of --prompt and --prompt-tokens\n");
        return 2;
    }
    if (o->chat && o->prompt_tokens) {
        fprintf(stderr, "loragate generate: --chat needs --prompt text, not --prompt-tokens\n");
        return 2;
    }
    if (o->logits && !o->json) {
        fprintf(stderr, "loragate generate: --logits needs --json\n");
        return 2;
    }
    return 0;
}

/* Builds the prompt ids from the options. */
static int build_prompt(const gen_opts *o, const lg_weights *w, int32_t **ids, int *n, lg_err *err)
{
    if (o->prompt_tokens)
        return parse_token_list(o->prompt_tokens, ids, n) == 0 ? 0 : lg_fail(err, "bad --prompt-tokens");
    const lg_tokenizer *tok = lg_weights_tokenizer(w);
    if (!tok)
        return lg_fail(err, "model %s has no tokenizer; use --prompt-tokens", o->model);
    if (!o->chat)
        return lg_tokenizer_encode(tok, o->prompt, strlen(o->prompt), lg_tokenizer_add_bos(tok), true, ids, n, err);
    int bos = lg_tokenizer_bos(tok), eos = lg_tokenizer_eos(tok);
    lg_chat_template *ct = NULL;
    if (lg_chat_template_new(lg_weights_chat_template(w), o->chat_template, bos >= 0 ? lg_tokenizer_token_text(tok, bos) : NULL,
                             eos >= 0 ? lg_tokenizer_token_text(tok, eos) : NULL, &ct, err) != 0)
        return -1;
    lg_chat_msg msgs[2];
    int nm = 0;
    if (o->system)
        msgs[nm++] = (lg_chat_msg){"system", o->system};
    msgs[nm++] = (lg_chat_msg){"user", o->prompt};
    char *text = NULL;
    int rc = lg_chat_template_apply(ct, msgs, nm, &text, err);
    lg_chat_template_free(ct);
    if (rc != 0)
        return -1;
    rc = lg_tokenizer_encode(tok, text, strlen(text), false, true, ids, n, err);
    free(text);
    return rc;
}

static void print_json(const gen_state *st, const lg_engine_stats *es)
{
    json_t *o = json_object();
    json_t *toks = json_array();
    for (int i = 0; i < st->n_out; i++) json_array_append_new(toks, json_integer(st->out[i]));
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "text", json_stringn(st->text ? st->text : "", st->text_len));
    json_object_set_new(o, "finish_reason", json_string(lg_finish_reason_name(st->reason)));
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(st->usage.prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(st->usage.completion_tokens));
    json_object_set_new(o, "usage", u);
    if (st->o->logits && st->first_logits) {
        json_t *l = json_array();
        for (int i = 0; i < st->n_vocab; i++) json_array_append_new(l, json_real(st->first_logits[i]));
        json_object_set_new(o, "last_logits", l);
    }
    if (st->o->stats) {
        json_t *s = json_object();
        json_object_set_new(s, "prefill_tokens", json_integer(es->prefill_tokens));
        json_object_set_new(s, "prefill_seconds", json_real(es->prefill_seconds));
        json_object_set_new(s, "decode_tokens", json_integer(es->decode_tokens));
        json_object_set_new(s, "decode_seconds", json_real(es->decode_seconds));
        json_object_set_new(o, "stats", s);
    }
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (txt) {
        puts(txt);
        free(txt);
    }
    json_decref(o);
}

int lg_cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc == 1000)
        return 0;
    if (rc)
        return rc;
    lg_err err = {{0}};
    lg_weights *w = NULL;
    lg_backend *be = NULL;
    lg_engine *e = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    gen_state st = {.o = &o};
    int exit_code = 1;

    lg_load_opts lo = {.dequant_dtype = o.dequant, .progress = true};
    if (lg_weights_load(o.model, &lo, &w, &err) != 0)
        goto out;
    if (build_prompt(&o, w, &prompt, &n_prompt, &err) != 0)
        goto out;
    lg_backend_opts bo = {.n_threads = o.threads};
    if (lg_backend_create(o.backend, &bo, &be, &err) != 0)
        goto out;
    const lg_model_config *cfg = lg_weights_config(w);
    int ctx = o.ctx ? o.ctx : (cfg->max_pos < 4096 ? cfg->max_pos : 4096);
    if (ctx > cfg->max_pos)
        ctx = cfg->max_pos;
    if (n_prompt + 1 > ctx && !o.ctx) {
        ctx = n_prompt + o.max_tokens;
        if (ctx > cfg->max_pos) ctx = cfg->max_pos;
    }
    lg_engine_opts eo = {.model = {.max_step_tokens = o.budget, .max_seqs = 8, .page_tokens = 16, .max_context = ctx}};
    if (lg_engine_create(be, w, &eo, &e, &err) != 0)
        goto out;

    const lg_tokenizer *tok = lg_weights_tokenizer(w);
    st.engine = e;
    st.tok = tok;
    st.detok = tok ? lg_detok_new(tok, true) : NULL;
    st.stopper = lg_stopper_new(o.stops, o.n_stops);
    lg_request_params rp = {
        .prompt = prompt, .n_prompt = n_prompt, .max_tokens = o.max_tokens,
        .sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p, .seed = o.seed},
        .want_first_logits = o.logits, .cb = {on_token, on_finish}, .user = &st,
    };
    int64_t id;
    if (lg_engine_submit(e, &rp, &id, &err) != 0)
        goto out;
    while (!st.done) {
        if (lg_engine_step(e, &err) != 0)
            break;
    }
    if (!o.json && st.text_len && isatty(1))
        putchar('\n');
    if (st.reason == LG_FINISH_ERROR) {
        snprintf(err.msg, sizeof err.msg, "%s", st.error[0] ? st.error : err.msg);
        goto out;
    }
    lg_engine_stats es;
    lg_engine_get_stats(e, &es);
    if (o.json)
        print_json(&st, &es);
    else if (!isatty(1) && st.text_len)
        putchar('\n');
    if (o.stats)
        fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s)\n",
                (long long)es.prefill_tokens, es.prefill_seconds,
                es.prefill_seconds > 0 ? es.prefill_tokens / es.prefill_seconds : 0.0, (long long)es.decode_tokens,
                es.decode_seconds, es.decode_seconds > 0 ? es.decode_tokens / es.decode_seconds : 0.0);
    exit_code = 0;
out:
    if (exit_code)
        fprintf(stderr, "loragate generate: %s\n", err.msg[0] ? err.msg : "failed");
    lg_engine_free(e);
    lg_backend_free(be);
    lg_weights_free(w);
    lg_detok_free(st.detok);
    lg_stopper_free(st.stopper);
    free(st.out);
    free(st.text);
    free(st.first_logits);
    free(prompt);
    return exit_code;
}
