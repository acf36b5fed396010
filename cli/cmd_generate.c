/*
 * cmd_generate.c — `loragate generate`: one prompt through a model.
 *
 * Contract relied on by tests and outside checks:
 *   loragate generate --model PATH [--backend cpu|cuda]
 *     (--prompt TEXT | --prompt-tokens 1,2,3) [--chat] [--max-tokens N]
 *     [--temperature T] [--top-p P] [--top-k K] [--seed S] [--json] [--logits]
 * --json prints one JSON object: "tokens" (generated ids), "text", and with
 * --logits "last_logits" (f32 logits at the last prompt position, i.e. the
 * distribution the first generated token was drawn from); with
 * --logprobs N "logprobs": per generated token {"token", "logprob", "top":
 * [[id, logprob], ...] (N best, best first)}, log-softmax of the raw logits
 * (null where not finite). --prompt-tokens
 * feeds ids as given, adding no BOS. Without --json the text streams to
 * stdout as it is generated.
 *
 * LoRA: --lora NAME=DIR (repeatable) loads PEFT adapters, --use-lora NAME
 * picks one for the prompt. --batch FILE.jsonl submits every line
 * ({"prompt_tokens":[...]} or {"prompt":"..."}, optional "lora",
 * "max_tokens", "temperature", "seed", "logprobs") at once so they share batches, and
 * prints one JSON line per input line, in input order. A line may also name
 * a "tenant" and a "cache_salt" (the prefix cache's namespace); with
 * --sequential each line is submitted only once the previous one finished,
 * so a later line can reuse what an earlier one cached ("usage" reports
 * "cached_tokens").
 * Structured output: --json-schema FILE, --json-object, --regex RE,
 * --grammar FILE (Lark) or --choice TEXT... make every output follow that
 * grammar (engine/runtime/constrain); a --batch line's own "json_schema"
 * (an object) or "regex" replaces it for that line. A grammar that cannot
 * be compiled is a usage error (exit 2) naming the option or line and the
 * place in it.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/model/chat_template.h"
#include "cli/cli.h"
#include "engine/model/quant.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/placement.h"
#include "engine/model/stop_strings.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"

#define MAX_STOPS 16
#define MAX_LORAS 256
#define MAX_CHOICES 256

typedef struct gen_opts {
    const char *model, *backend, *prompt, *prompt_tokens, *system, *chat_template;
    bool chat, json, logits, stats;
    int max_tokens, top_k, threads, ctx, budget;
    int tp; /* --tensor-parallel-size */
    int logprobs; /* -1: off; else each token's logprob and this many alternatives */
    float temperature, top_p, min_p, presence_penalty, frequency_penalty;
    uint64_t seed;
    const char *stops[MAX_STOPS];
    int n_stops;
    lg_dtype dequant;
    bool dequantize; /* --dequant-dtype given: expand quantized GGUF weights at load */
    bool kv_fp8;     /* --kv-cache-dtype fp8 */
    lg_qtype quantize; /* --quantization fp8|int4: the linear layers quantized at load */
    const char *loras[MAX_LORAS]; /* NAME=DIR */
    int n_loras;
    const char *use_lora, *batch;
    int max_lora_rank;
    int pool_mb;
    float gpu_util;
    const char *act_dtype; /* "auto" or a dtype name */
    bool sequential;
    lg_prefix_sharing sharing;
    /* structured output: at most one of these */
    const char *json_schema, *regex, *grammar; /* FILE, RE, FILE */
    bool json_object;
    const char *choices[MAX_CHOICES];
    int n_choices;
    lg_spec_opts spec; /* speculative decoding */
    const char *draft_model;
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
    lg_token_out *lps; /* with logprobs: each generated token's (parallel to out) */
    char *text;          /* accumulated emitted text */
    size_t text_len, text_cap;
    bool done, stopped_by_string, failed, quiet, want_lps;
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
            "  --chat-template NAME   a built-in template instead of the model's own (or for a model without one):\n"
            "                         chatml, llama3, llama2, mistral\n"
            "  --max-tokens N         most tokens to generate (default 256)\n"
            "  --temperature T        0 = greedy (default 0)\n"
            "  --top-p P, --top-k K, --min-p P, --seed S   sampling filters and seed\n"
            "  --presence-penalty P, --frequency-penalty F  OpenAI's penalties over the generated tokens, [-2, 2]\n"
            "  --stop TEXT            stop string (repeatable, up to %d)\n"
            "  --json                 print one JSON object: tokens, text, finish_reason, usage\n"
            "  --logits               with --json: add last_logits (logits at the last prompt position)\n"
            "  --logprobs N           with --json: add logprobs, each generated token's log-softmax and its\n"
            "                         N (0..%d) most likely alternatives\n"
            "  --stats                print prompt/decode speed to stderr\n"
            "  --threads N            CPU threads (default: all cores; split over the tensor-parallel ranks)\n"
            "  --tensor-parallel-size M  split the model over M devices (CUDA devices 0..M-1; CPU: M backends)\n"
            "  --ctx N                context length to allocate (default min(model, 4096))\n"
            "  --dequant-dtype f16|f32  expand quantized weights (GGUF, FP8/INT4 checkpoints) to this dtype at\n"
            "                           load (default: a backend that takes their layout keeps them; others\n"
            "                           expand them at upload)\n"
            "  --quantization fp8|int4  quantize the linear layers' 16-bit weights at load: fp8 = W8A8 per-channel,\n"
            "                           dynamic per-token; int4 = W4A16 round-to-nearest, asymmetric, g128\n"
            "  --lora NAME=DIR        load a PEFT LoRA adapter (repeatable)\n"
            "  --use-lora NAME        run the prompt with that adapter\n"
            "  --max-lora-rank N      largest adapter rank accepted (default 64)\n"
            "  --dtype auto|f32|f16|bf16  GPU compute dtype (default auto: the model's weight dtype;\n"
            "                         the CPU backend always computes in f32)\n"
            "  --kv-cache-dtype auto|fp8  KV cache elements: auto (default) the compute dtype; fp8 OCP e4m3\n"
            "                         with per-layer K/V scales (the checkpoint's k_scale/v_scale, else 1):\n"
            "                         half the bytes of a 16-bit cache, twice the tokens in the pool\n"
            "  --pool-mb N            size of the unified KV + adapter page pool (default: on a GPU\n"
            "                         --gpu-memory-utilization of its memory, on the CPU min(2 GiB, RAM/4);\n"
            "                         at least one full-context sequence always fits)\n"
            "  --gpu-memory-utilization F  fraction of the GPU's memory for weights + pool (default 0.90)\n"
            "  --prefix-sharing tenant|global|off  who shares cached prompt prefixes (default tenant)\n"
            "  --batch FILE.jsonl     one request per line: {\"prompt_tokens\":[..]} or {\"prompt\":\"..\"},\n"
            "                         optional \"lora\", \"max_tokens\", \"temperature\", \"seed\", \"logprobs\",\n"
            "                         \"tenant\", \"cache_salt\"; prints JSONL\n"
            "  --sequential           with --batch: submit each line after the previous one finished\n"
            "  --json-schema FILE     the output is JSON valid against the JSON schema in FILE (compact JSON)\n"
            "  --json-object          the output is a JSON object\n"
            "  --regex RE             the output matches the regular expression RE (whole output)\n"
            "  --grammar FILE         the output follows the Lark grammar in FILE (start rule `start`)\n"
            "  --choice TEXT          the output is one of the --choice texts (repeatable)\n"
            "                         (--batch lines may carry their own \"json_schema\" or \"regex\")\n"
            "  --speculative off|ngram|draft  speculative decoding (default off); ngram: proposals from the\n"
            "                         sequence's own prompt and output; draft: from --draft-model; verified\n"
            "                         in one step (exact output)\n"
            "  --draft-model PATH     a small model with the same vocabulary (HF directory or .gguf)\n"
            "  --num-speculative-tokens K  most tokens proposed a step (default 4, at most 16)\n"
            "  --ngram-min N, --ngram-max M  suffix lengths looked up (default 2 and 4)\n"
            "  --speculative-max-batch N  no speculation in a step where more than N sequences decode\n"
            "                         (default 16)\n"
            "  --speculative-max-tokens N  at most N verified tokens a step in all (default 64)\n"
            "  --speculative-min-accept A  a sequence whose recent acceptance rate is below A pauses its\n"
            "                         proposals for a while (default 0.3; 0: never)\n"
            "  --speculative-accept-rate A  benchmarks and tests only: accept each proposed token with\n"
            "                         probability A whatever the model says (the output is not the model's)\n",
            MAX_STOPS, LG_MAX_TOP_LOGPROBS);
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
    if (!st->quiet) {
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

static void on_token(void *user, int64_t id, const lg_token_out *t)
{
    gen_state *st = user;
    int32_t token = t->token;
    if (t->logits && st->o->logits) {
        st->first_logits = malloc((size_t)t->n_vocab * sizeof(float));
        if (st->first_logits)
            memcpy(st->first_logits, t->logits, (size_t)t->n_vocab * sizeof(float));
        st->n_vocab = t->n_vocab;
    }
    if (st->stopped_by_string)
        return;
    if (st->n_out == st->cap_out) {
        int c = st->cap_out ? 2 * st->cap_out : 64;
        int32_t *no = realloc(st->out, (size_t)c * sizeof *no);
        if (!no)
            return;
        st->out = no;
        if (st->want_lps) {
            lg_token_out *nl = realloc(st->lps, (size_t)c * sizeof *nl);
            if (!nl)
                return;
            st->lps = nl;
        }
        st->cap_out = c;
    }
    if (st->want_lps && st->lps) { /* lps has cap_out entries, as out */
        st->lps[st->n_out] = *t;
        st->lps[st->n_out].logits = NULL; /* the engine's buffer: valid only during this call */
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
           O_MINP, O_PRES, O_FREQ, O_SEED, O_STOP, O_JSON, O_LOGITS, O_STATS, O_THREADS, O_CTX, O_DQ, O_QUANT, O_BUDGET, O_HELP, O_LORA, O_USELORA, O_BATCH, O_MAXRANK, O_POOL, O_DTYPE, O_GPUUTIL, O_SHARING, O_SEQ, O_LOGPROBS, O_JSCHEMA, O_JOBJ, O_REGEX, O_GRAMMAR, O_CHOICE, O_SPEC, O_SPECK, O_NGMIN, O_NGMAX, O_SPECACC, O_SPECMB, O_SPECMT, O_SPECMA, O_DRAFT, O_KVDT, O_TP };
    static const struct option longopts[] = {
        {"model", required_argument, 0, O_MODEL}, {"backend", required_argument, 0, O_BACKEND},
        {"prompt", required_argument, 0, O_PROMPT}, {"prompt-tokens", required_argument, 0, O_PTOK},
        {"chat", no_argument, 0, O_CHAT}, {"system", required_argument, 0, O_SYSTEM},
        {"chat-template", required_argument, 0, O_TMPL}, {"max-tokens", required_argument, 0, O_MAXTOK},
        {"temperature", required_argument, 0, O_TEMP}, {"top-p", required_argument, 0, O_TOPP},
        {"top-k", required_argument, 0, O_TOPK}, {"min-p", required_argument, 0, O_MINP},
        {"presence-penalty", required_argument, 0, O_PRES}, {"frequency-penalty", required_argument, 0, O_FREQ},
        {"seed", required_argument, 0, O_SEED}, {"stop", required_argument, 0, O_STOP},
        {"json", no_argument, 0, O_JSON}, {"logits", no_argument, 0, O_LOGITS}, {"stats", no_argument, 0, O_STATS},
        {"threads", required_argument, 0, O_THREADS}, {"ctx", required_argument, 0, O_CTX},
        {"dequant-dtype", required_argument, 0, O_DQ}, {"quantization", required_argument, 0, O_QUANT}, {"step-tokens", required_argument, 0, O_BUDGET},
        {"help", no_argument, 0, O_HELP}, {"lora", required_argument, 0, O_LORA},
        {"use-lora", required_argument, 0, O_USELORA}, {"batch", required_argument, 0, O_BATCH},
        {"max-lora-rank", required_argument, 0, O_MAXRANK}, {"pool-mb", required_argument, 0, O_POOL},
        {"kv-cache-dtype", required_argument, 0, O_KVDT},
        {"dtype", required_argument, 0, O_DTYPE}, {"gpu-memory-utilization", required_argument, 0, O_GPUUTIL},
        {"prefix-sharing", required_argument, 0, O_SHARING}, {"sequential", no_argument, 0, O_SEQ},
        {"logprobs", required_argument, 0, O_LOGPROBS},
        {"json-schema", required_argument, 0, O_JSCHEMA}, {"json-object", no_argument, 0, O_JOBJ},
        {"regex", required_argument, 0, O_REGEX}, {"grammar", required_argument, 0, O_GRAMMAR},
        {"choice", required_argument, 0, O_CHOICE},
        {"speculative", required_argument, 0, O_SPEC}, {"num-speculative-tokens", required_argument, 0, O_SPECK},
        {"ngram-min", required_argument, 0, O_NGMIN}, {"ngram-max", required_argument, 0, O_NGMAX},
        {"speculative-accept-rate", required_argument, 0, O_SPECACC},
        {"speculative-max-batch", required_argument, 0, O_SPECMB},
        {"speculative-max-tokens", required_argument, 0, O_SPECMT},
        {"speculative-min-accept", required_argument, 0, O_SPECMA},
        {"draft-model", required_argument, 0, O_DRAFT},
        {"tensor-parallel-size", required_argument, 0, O_TP},
        {0, 0, 0, 0},
    };
    *o = (gen_opts){.backend = "cpu", .max_tokens = 256, .top_p = 1.0f, .dequant = LG_F16, .budget = 512,
                    .max_lora_rank = 64, .logprobs = -1};
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
        case O_LOGPROBS:
            if (parse_int(optarg, "--logprobs", 0, LG_MAX_TOP_LOGPROBS, &v)) return 2;
            o->logprobs = (int)v;
            break;
        case O_TEMP:
            if (parse_float(optarg, "--temperature", &o->temperature)) return 2;
            if (o->temperature < 0) {
                fprintf(stderr, "loragate generate: --temperature must be >= 0, got %s\n", optarg);
                return 2;
            }
            break;
        case O_TOPP:
            if (parse_float(optarg, "--top-p", &o->top_p)) return 2;
            if (o->top_p <= 0 || o->top_p > 1) {
                fprintf(stderr, "loragate generate: --top-p must be in (0, 1], got %s\n", optarg);
                return 2;
            }
            break;
        case O_TOPK: if (parse_int(optarg, "--top-k", 0, 1 << 24, &v)) return 2; o->top_k = (int)v; break;
        case O_MINP:
            if (parse_float(optarg, "--min-p", &o->min_p)) return 2;
            if (o->min_p < 0 || o->min_p > 1) {
                fprintf(stderr, "loragate generate: --min-p must be in [0, 1], got %s\n", optarg);
                return 2;
            }
            break;
        case O_PRES:
        case O_FREQ: {
            float *pv = c == O_PRES ? &o->presence_penalty : &o->frequency_penalty;
            if (parse_float(optarg, c == O_PRES ? "--presence-penalty" : "--frequency-penalty", pv)) return 2;
            if (!(*pv >= -2 && *pv <= 2)) {
                fprintf(stderr, "loragate generate: --%s-penalty must be in [-2, 2], got %s\n",
                        c == O_PRES ? "presence" : "frequency", optarg);
                return 2;
            }
            break;
        }
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
            o->dequantize = true;
            if (lg_dtype_parse(optarg, &o->dequant) != 0 || o->dequant == LG_I32) {
                fprintf(stderr, "loragate generate: --dequant-dtype must be f16, bf16 or f32, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_QUANT:
            if (lg_quantization_parse(optarg, &o->quantize) != 0) {
                fprintf(stderr, "loragate generate: --quantization must be fp8, int4 or none, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_HELP: usage(stdout); return 1000;
        case O_JSCHEMA: o->json_schema = optarg; break;
        case O_JOBJ: o->json_object = true; break;
        case O_REGEX: o->regex = optarg; break;
        case O_GRAMMAR: o->grammar = optarg; break;
        case O_CHOICE:
            if (o->n_choices == MAX_CHOICES) {
                fprintf(stderr, "loragate generate: at most %d --choice texts\n", MAX_CHOICES);
                return 2;
            }
            o->choices[o->n_choices++] = optarg;
            break;
        case O_LORA:
            if (o->n_loras == MAX_LORAS || !strchr(optarg, '=') || optarg[0] == '=') {
                fprintf(stderr, "loragate generate: --lora takes NAME=DIR (at most %d), got '%s'\n", MAX_LORAS, optarg);
                return 2;
            }
            o->loras[o->n_loras++] = optarg;
            break;
        case O_USELORA: o->use_lora = optarg; break;
        case O_BATCH: o->batch = optarg; break;
        case O_MAXRANK: if (parse_int(optarg, "--max-lora-rank", 1, 1024, &v)) return 2; o->max_lora_rank = (int)v; break;
        case O_DTYPE: {
            lg_dtype d;
            if (strcmp(optarg, "auto") && (lg_dtype_parse(optarg, &d) != 0 || d == LG_I32)) {
                fprintf(stderr, "loragate generate: --dtype must be auto, f32, f16 or bf16, got '%s'\n", optarg);
                return 2;
            }
            o->act_dtype = optarg;
            break;
        }
        case O_POOL: if (parse_int(optarg, "--pool-mb", 1, 1 << 24, &v)) return 2; o->pool_mb = (int)v; break;
        case O_KVDT:
            if (lg_kv_cache_dtype_parse(optarg, &o->kv_fp8) != 0) {
                fprintf(stderr, "loragate generate: --kv-cache-dtype must be auto or fp8, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_GPUUTIL:
            if (parse_float(optarg, "--gpu-memory-utilization", &o->gpu_util)) return 2;
            if (!(o->gpu_util > 0) || o->gpu_util > 1) {
                fprintf(stderr, "loragate generate: --gpu-memory-utilization must be in (0, 1], got %s\n", optarg);
                return 2;
            }
            break;
        case O_SHARING:
            if (lg_prefix_sharing_parse(optarg, &o->sharing) != 0) {
                fprintf(stderr, "loragate generate: --prefix-sharing must be tenant, global or off, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_SEQ: o->sequential = true; break;
        case O_SPEC:
            if (lg_spec_mode_parse(optarg, &o->spec.mode) != 0) {
                fprintf(stderr, "loragate generate: --speculative must be off, ngram or draft, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_SPECK: if (parse_int(optarg, "--num-speculative-tokens", 1, 16, &v)) return 2; o->spec.num_tokens = (int)v; break;
        case O_NGMIN: if (parse_int(optarg, "--ngram-min", 1, 64, &v)) return 2; o->spec.ngram_min = (int)v; break;
        case O_SPECMB: if (parse_int(optarg, "--speculative-max-batch", 1, 1 << 20, &v)) return 2; o->spec.max_batch = (int)v; break;
        case O_SPECMT: if (parse_int(optarg, "--speculative-max-tokens", 1, 1 << 20, &v)) return 2; o->spec.max_tokens = (int)v; break;
        case O_DRAFT: o->draft_model = optarg; break;
        case O_TP: if (parse_int(optarg, "--tensor-parallel-size", 1, LG_MAX_TP, &v)) return 2; o->tp = (int)v; break;
        case O_SPECMA:
            if (parse_float(optarg, "--speculative-min-accept", &o->spec.min_accept)) return 2;
            if (!(o->spec.min_accept >= 0 && o->spec.min_accept <= 1)) {
                fprintf(stderr, "loragate generate: --speculative-min-accept must be in [0, 1], got %s\n", optarg);
                return 2;
            }
            if (o->spec.min_accept == 0)
                o->spec.min_accept = -1; /* the engine's "never" */
            break;
        case O_NGMAX: if (parse_int(optarg, "--ngram-max", 1, 64, &v)) return 2; o->spec.ngram_max = (int)v; break;
        case O_SPECACC:
            if (parse_float(optarg, "--speculative-accept-rate", &o->spec.bench_accept)) return 2;
            if (!(o->spec.bench_accept >= 0 && o->spec.bench_accept <= 1)) {
                fprintf(stderr, "loragate generate: --speculative-accept-rate must be in [0, 1], got %s\n", optarg);
                return 2;
            }
            o->spec.bench_accept_on = true;
            break;
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
    if ((o->spec.mode == LG_SPEC_DRAFT) != (o->draft_model != NULL)) {
        fprintf(stderr, "loragate generate: --speculative draft and --draft-model go together\n");
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "loragate generate: --model is required\n");
        return 2;
    }
    if (!!o->json_schema + o->json_object + !!o->regex + !!o->grammar + (o->n_choices > 0) > 1) {
        fprintf(stderr, "loragate generate: give one of --json-schema, --json-object, --regex, --grammar, --choice\n");
        return 2;
    }
    if ((o->prompt != NULL) + (o->prompt_tokens != NULL) + (o->batch != NULL) != 1) {
        fprintf(stderr, "loragate generate: give exactly one of --prompt, --prompt-tokens and --batch\n");
        return 2;
    }
    if (o->batch && (o->chat || o->use_lora)) {
        fprintf(stderr, "loragate generate: with --batch, put \"lora\" in each line; --chat is not available\n");
        return 2;
    }
    if (o->chat && o->prompt_tokens) {
        fprintf(stderr, "loragate generate: --chat needs --prompt text, not --prompt-tokens\n");
        return 2;
    }
    if (o->sequential && !o->batch) {
        fprintf(stderr, "loragate generate: --sequential needs --batch\n");
        return 2;
    }
    if (o->logits && !o->json && !o->batch) {
        fprintf(stderr, "loragate generate: --logits needs --json\n");
        return 2;
    }
    if (o->logprobs >= 0 && !o->json && !o->batch) {
        fprintf(stderr, "loragate generate: --logprobs needs --json\n");
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

/* JSON has no NaN or infinity: those become null */
static json_t *json_num_or_null(float v) { return isfinite(v) ? json_real(v) : json_null(); }

static void print_json(const gen_state *st, const lg_engine_stats *es)
{
    json_t *o = json_object();
    if (st->failed) {
        json_object_set_new(o, "error", json_string(st->error));
    } else {
        json_t *toks = json_array();
        for (int i = 0; i < st->n_out; i++) json_array_append_new(toks, json_integer(st->out[i]));
        json_object_set_new(o, "tokens", toks);
        json_object_set_new(o, "text", json_stringn(st->text ? st->text : "", st->text_len));
        json_object_set_new(o, "finish_reason", json_string(lg_finish_reason_name(st->reason)));
        json_t *u = json_object();
        json_object_set_new(u, "prompt_tokens", json_integer(st->usage.prompt_tokens));
        json_object_set_new(u, "completion_tokens", json_integer(st->usage.completion_tokens));
        json_object_set_new(u, "cached_tokens", json_integer(st->usage.cached_tokens));
        json_object_set_new(o, "usage", u);
        if (st->want_lps) {
            json_t *a = json_array();
            for (int i = 0; i < st->n_out && st->lps; i++) {
                const lg_token_out *t = &st->lps[i];
                json_t *e = json_object(), *top = json_array();
                json_object_set_new(e, "token", json_integer(t->token));
                json_object_set_new(e, "logprob", json_num_or_null(t->logprob));
                for (int k = 0; k < t->n_top; k++)
                    json_array_append_new(top, json_pack("[io]", t->top_ids[k], json_num_or_null(t->top_logprobs[k])));
                json_object_set_new(e, "top", top);
                json_array_append_new(a, e);
            }
            json_object_set_new(o, "logprobs", a);
        }
        if (st->o->logits && st->first_logits) {
            json_t *l = json_array();
            for (int i = 0; i < st->n_vocab; i++) json_array_append_new(l, json_real(st->first_logits[i]));
            json_object_set_new(o, "last_logits", l);
        }
    }
    if (st->o->stats && es) {
        json_t *s = json_object();
        json_object_set_new(s, "prefill_tokens", json_integer(es->prefill_tokens));
        json_object_set_new(s, "prefill_seconds", json_real(es->prefill_seconds));
        json_object_set_new(s, "decode_tokens", json_integer(es->decode_tokens));
        json_object_set_new(s, "decode_seconds", json_real(es->decode_seconds));
        json_object_set_new(s, "decode_steps", json_integer(es->decode_steps));
        json_object_set_new(s, "chained_steps", json_integer(es->chained_steps));
        json_object_set_new(s, "spec_verify_rows", json_integer(es->spec_verify_rows));
        json_object_set_new(s, "spec_proposed", json_integer(es->spec_proposed));
        json_object_set_new(s, "spec_accepted", json_integer(es->spec_accepted));
        json_object_set_new(o, "stats", s);
    }
    char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (txt) {
        puts(txt);
        free(txt);
    }
    json_decref(o);
}

/* One request to run: its prompt and overrides (batch lines set them). */
typedef struct gen_job {
    int32_t *prompt;
    int n_prompt;
    int adapter_id;
    int max_tokens;
    float temperature;
    int logprobs; /* as gen_opts.logprobs */
    uint64_t seed;
    char *tenant, *cache_salt;
    lg_constraint *constraint; /* the line's "json_schema" / "regex", else NULL (--json-schema etc. apply) */
    gen_state st;
} gen_job;

/* The vocabulary structured output compiles for (built on first use). */
static int cvocab_get(const lg_weights *w, lg_cvocab **vocab, lg_err *err)
{
    if (*vocab)
        return 0;
    const lg_tokenizer *tok = lg_weights_tokenizer(w);
    if (!tok)
        return lg_fail(err, "structured output needs the model's tokenizer, and it has none");
    const lg_model_config *cfg = lg_weights_config(w);
    return lg_cvocab_from_tokenizer(tok, cfg->eos_ids, cfg->n_eos, vocab, err);
}

/* A --batch line's own constraint: "json_schema" (an object) or "regex" (a string). */
static int line_constraint(json_t *root, int lineno, const lg_weights *w, lg_cvocab **vocab, gen_job *j, lg_err *err)
{
    json_t *js = json_object_get(root, "json_schema"), *rx = json_object_get(root, "regex");
    if ((!js || json_is_null(js)) && (!rx || json_is_null(rx)))
        return 0;
    if (js && !json_is_null(js) && rx && !json_is_null(rx))
        return lg_fail(err, "--batch line %d: give one of \"json_schema\" and \"regex\"", lineno);
    lg_copts co = {.kind = LG_CK_JSON_SCHEMA};
    char *src;
    if (js && !json_is_null(js)) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return lg_fail(err, "--batch line %d: \"json_schema\" must be a JSON schema object", lineno);
        src = json_dumps(js, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    } else {
        if (!json_is_string(rx))
            return lg_fail(err, "--batch line %d: \"regex\" must be a string", lineno);
        co.kind = LG_CK_REGEX;
        src = strdup(json_string_value(rx));
    }
    if (!src)
        return lg_fail(err, "out of memory");
    lg_cerr ce = {0};
    int rc = cvocab_get(w, vocab, err);
    if (rc == 0 && lg_constraint_compile(*vocab, &co, src, strlen(src), &j->constraint, &ce) != 0)
        rc = lg_fail(err, "--batch line %d: %s", lineno, ce.msg);
    free(src);
    return rc;
}

static int parse_batch_line(const char *line, int lineno, const gen_opts *o, const lg_weights *w, lg_engine *e,
                            lg_cvocab **vocab, gen_job *j, lg_err *err)
{
    json_error_t je;
    json_t *root = json_loads(line, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return lg_fail(err, "--batch line %d: not a JSON object (%s)", lineno, root ? "" : je.text);
    }
    int rc = 0;
    json_t *pt = json_object_get(root, "prompt_tokens"), *pr = json_object_get(root, "prompt");
    json_t *lo = json_object_get(root, "lora"), *mt = json_object_get(root, "max_tokens");
    json_t *te = json_object_get(root, "temperature"), *se = json_object_get(root, "seed");
    json_t *tn = json_object_get(root, "tenant"), *cs = json_object_get(root, "cache_salt");
    json_t *lp = json_object_get(root, "logprobs");
    j->logprobs = o->logprobs;
    j->max_tokens = o->max_tokens;
    j->temperature = o->temperature;
    j->seed = o->seed;
    if (!pt == !pr) {
        rc = lg_fail(err, "--batch line %d: give exactly one of \"prompt_tokens\" and \"prompt\"", lineno);
    } else if (pt) {
        size_t n = json_array_size(pt);
        if (!json_is_array(pt) || n == 0 || n > (1u << 24)) {
            rc = lg_fail(err, "--batch line %d: \"prompt_tokens\" must be a non-empty array of ids", lineno);
        } else if (!(j->prompt = malloc(n * sizeof(int32_t)))) {
            rc = lg_fail(err, "out of memory");
        } else {
            for (size_t i = 0; i < n && rc == 0; i++) {
                json_t *v = json_array_get(pt, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                    rc = lg_fail(err, "--batch line %d: prompt_tokens[%zu] is not a token id", lineno, i);
                else
                    j->prompt[i] = (int32_t)json_integer_value(v);
            }
            j->n_prompt = (int)n;
        }
    } else if (!json_is_string(pr)) {
        rc = lg_fail(err, "--batch line %d: \"prompt\" must be a string", lineno);
    } else {
        const lg_tokenizer *tok = lg_weights_tokenizer(w);
        if (!tok)
            rc = lg_fail(err, "--batch line %d: the model has no tokenizer; use \"prompt_tokens\"", lineno);
        else
            rc = lg_tokenizer_encode(tok, json_string_value(pr), json_string_length(pr), lg_tokenizer_add_bos(tok),
                                     true, &j->prompt, &j->n_prompt, err);
    }
    if (rc == 0 && lo && !json_is_null(lo)) {
        if (!json_is_string(lo) || !(j->adapter_id = lg_engine_find_adapter(e, json_string_value(lo))))
            rc = lg_fail(err, "--batch line %d: no adapter named %s was loaded with --lora", lineno,
                         json_is_string(lo) ? json_string_value(lo) : "(not a string)");
    }
    if (rc == 0 && mt) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > (1 << 24))
            rc = lg_fail(err, "--batch line %d: \"max_tokens\" must be a positive integer", lineno);
        else
            j->max_tokens = (int)json_integer_value(mt);
    }
    if (rc == 0 && te) {
        if (!json_is_number(te) || json_number_value(te) < 0)
            rc = lg_fail(err, "--batch line %d: \"temperature\" must be a number >= 0", lineno);
        else
            j->temperature = (float)json_number_value(te);
    }
    if (rc == 0 && lp && !json_is_null(lp)) {
        if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > LG_MAX_TOP_LOGPROBS)
            rc = lg_fail(err, "--batch line %d: \"logprobs\" must be an integer in [0, %d]", lineno,
                         LG_MAX_TOP_LOGPROBS);
        else
            j->logprobs = (int)json_integer_value(lp);
    }
    if (rc == 0 && se) {
        if (!json_is_integer(se) || json_integer_value(se) < 0)
            rc = lg_fail(err, "--batch line %d: \"seed\" must be a non-negative integer", lineno);
        else
            j->seed = (uint64_t)json_integer_value(se);
    }
    if (rc == 0 && tn && !json_is_null(tn)) {
        if (!json_is_string(tn) || json_string_length(tn) > LG_MAX_TENANT)
            rc = lg_fail(err, "--batch line %d: \"tenant\" must be a string of at most %d bytes", lineno, LG_MAX_TENANT);
        else if (!(j->tenant = strdup(json_string_value(tn))))
            rc = lg_fail(err, "out of memory");
    }
    if (rc == 0 && cs && !json_is_null(cs)) {
        if (!json_is_string(cs) || json_string_length(cs) > LG_MAX_CACHE_SALT)
            rc = lg_fail(err, "--batch line %d: \"cache_salt\" must be a string of at most %d bytes", lineno,
                         LG_MAX_CACHE_SALT);
        else if (!(j->cache_salt = strdup(json_string_value(cs))))
            rc = lg_fail(err, "out of memory");
    }
    if (rc == 0)
        rc = line_constraint(root, lineno, w, vocab, j, err);
    json_decref(root);
    return rc;
}

/* Reads the --batch file into jobs. */
static int load_batch(const gen_opts *o, const lg_weights *w, lg_engine *e, lg_cvocab **vocab, gen_job **jobs,
                      int *n_jobs, lg_err *err)
{
    char *text;
    size_t len;
    if (lg_read_file(o->batch, (size_t)1 << 30, &text, &len, err) != 0)
        return -1;
    int cap = 16, n = 0, lineno = 0, rc = 0;
    gen_job *js = calloc((size_t)cap, sizeof *js);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && rc == 0 && js; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        if (!*line)
            continue;
        if (n == cap) {
            gen_job *nj = realloc(js, (size_t)(cap *= 2) * sizeof *nj);
            if (!nj) {
                rc = lg_fail(err, "out of memory");
                break;
            }
            js = nj;
        }
        memset(&js[n], 0, sizeof js[n]);
        rc = parse_batch_line(line, lineno, o, w, e, vocab, &js[n], err);
        n++;
    }
    free(text);
    if (!js)
        return lg_fail(err, "out of memory");
    if (rc == 0 && n == 0)
        rc = lg_fail(err, "--batch file %s has no requests", o->batch);
    *jobs = js;
    *n_jobs = n;
    return rc;
}

/* The grammar the output must follow (--json-schema, --json-object,
 * --regex, --grammar, --choice), compiled for the model's vocabulary;
 * *c stays NULL when none was asked. -1 with err naming the option and the
 * place in its text (a JSON pointer, an offset, a line). */
static int build_constraint(const gen_opts *o, const lg_weights *w, lg_cvocab **vocab, lg_constraint **c, lg_err *err)
{
    lg_copts co = {.kind = LG_CK_JSON_SCHEMA};
    const char *opt = NULL;
    char *src = NULL;
    size_t len = 0;
    if (o->json_schema) {
        opt = "--json-schema";
        if (lg_read_file(o->json_schema, 16u << 20, &src, &len, err) != 0) {
            lg_err_prefix(err, "--json-schema %s", o->json_schema);
            return -1;
        }
    } else if (o->grammar) {
        opt = "--grammar";
        co.kind = LG_CK_LARK;
        if (lg_read_file(o->grammar, 16u << 20, &src, &len, err) != 0) {
            lg_err_prefix(err, "--grammar %s", o->grammar);
            return -1;
        }
    } else if (o->regex) {
        opt = "--regex";
        co.kind = LG_CK_REGEX;
        src = strdup(o->regex);
        len = src ? strlen(src) : 0;
    } else if (o->json_object) {
        opt = "--json-object";
        co.kind = LG_CK_JSON_OBJECT;
        src = strdup("");
    } else if (o->n_choices) {
        opt = "--choice";
        co.kind = LG_CK_CHOICE;
        json_t *a = json_array();
        for (int i = 0; a && i < o->n_choices; i++)
            json_array_append_new(a, json_string(o->choices[i]));
        src = a ? json_dumps(a, JSON_COMPACT) : NULL;
        json_decref(a);
        len = src ? strlen(src) : 0;
    } else {
        return 0;
    }
    if (!src)
        return lg_fail(err, "out of memory");
    if (cvocab_get(w, vocab, err) != 0) {
        free(src);
        lg_err_prefix(err, "%s", opt);
        return -1;
    }
    lg_cerr ce = {0};
    int rc = lg_constraint_compile(*vocab, &co, src, len, c, &ce);
    free(src);
    if (rc != 0)
        return lg_fail(err, "%s: %s", opt, ce.msg);
    return 0;
}

/* Submits one job; -1 (err set) only for a single prompt, whose failure is
 * the command's. A --batch line that is refused reports it on its own line. */
static int submit_job(const gen_opts *o, lg_engine *e, const lg_tokenizer *tok, bool json_out, gen_job *j,
                      lg_constraint *constraint, lg_err *err)
{
    gen_state *st = &j->st;
    st->o = o;
    st->engine = e;
    st->tok = tok;
    st->quiet = json_out;
    st->want_lps = j->logprobs >= 0;
    st->detok = tok ? lg_detok_new(tok, true) : NULL;
    st->stopper = lg_stopper_new(o->stops, o->n_stops);
    lg_request_params rp = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
        .sampling = {.temperature = j->temperature, .top_k = o->top_k, .top_p = o->top_p, .min_p = o->min_p,
                     .seed = j->seed},
        .presence_penalty = o->presence_penalty, .frequency_penalty = o->frequency_penalty,
        .want_first_logits = o->logits, .logprobs = j->logprobs >= 0,
        .top_logprobs = j->logprobs > 0 ? j->logprobs : 0, .adapter_id = j->adapter_id, .tenant = j->tenant,
        .cache_salt = j->cache_salt, .constraint = j->constraint ? j->constraint : constraint, .cb = {on_token, on_finish}, .user = st,
    };
    lg_err rerr;
    if (lg_engine_submit(e, &rp, NULL, &rerr) == 0)
        return 0;
    if (!o->batch) {
        *err = rerr;
        return -1;
    }
    st->failed = st->done = true;
    snprintf(st->error, sizeof st->error, "%s", rerr.msg);
    return 0;
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
    lg_weights *w = NULL, *dw = NULL;
    lg_placement pl = {0}; /* --tensor-parallel-size ranks: one backend each */
    lg_engine *e = NULL;
    lg_cvocab *cvocab = NULL;
    lg_constraint *constraint = NULL;
    gen_job *jobs = NULL;
    int n_jobs = 0;
    int exit_code = 1;

    lg_load_opts lo = {.dequant_dtype = o.dequant, .dequantize = o.dequantize, .progress = true,
                       .quantize = o.quantize};
    if (lg_weights_load(o.model, &lo, &w, &err) != 0)
        goto out;
    lo.quantize = LG_QNONE; /* a draft model loads as stored */
    if (lg_weights_config(w)->quant_method[0] && strcmp(lg_weights_config(w)->quant_method, "none"))
        fprintf(stderr, "model %s: quantization %s [%s]\n", o.model, lg_weights_config(w)->quant_desc,
                lg_weights_config(w)->quant_method);
    if (o.draft_model && lg_weights_load(o.draft_model, &lo, &dw, &err) != 0) {
        lg_err_prefix(&err, "--draft-model %s", o.draft_model);
        goto out;
    }
    o.spec.draft = dw;
    const lg_model_config *cfg = lg_weights_config(w);
    if (build_constraint(&o, w, &cvocab, &constraint, &err) != 0) {
        exit_code = 2; /* bad input, like a usage error */
        goto out;
    }
    lg_backend_opts bo = {.n_threads = o.threads, .act_dtype_hint = cfg->weight_dtype};
    if (o.act_dtype && strcmp(o.act_dtype, "auto"))
        lg_dtype_parse(o.act_dtype, &bo.act_dtype_hint);
    if (lg_placement_create(o.backend, &bo, 1, o.tp > 0 ? o.tp : 1, &pl, &err) != 0)
        goto out;
    lg_backend *be = lg_placement_backend(&pl, 0);
    int ctx = o.ctx ? o.ctx : (cfg->max_pos < 4096 ? cfg->max_pos : 4096);
    if (ctx > cfg->max_pos)
        ctx = cfg->max_pos;
    lg_engine_opts eo = {
        .model = {.max_step_tokens = o.budget, .max_seqs = 64, .page_tokens = 16, .max_context = ctx,
                  .lora_max_rank = o.n_loras ? o.max_lora_rank : 0, .kv_fp8 = o.kv_fp8},
        .pool_bytes = (size_t)o.pool_mb << 20,
        .gpu_memory_utilization = o.gpu_util,
        .prefix_sharing = o.sharing,
        .spec = o.spec,
    };
    lg_placement_engine_opts(&pl, 0, &eo);
    if (lg_engine_create(be, w, &eo, &e, &err) != 0)
        goto out;
    for (int i = 0; i < o.n_loras; i++) {
        char name[256];
        const char *eq = strchr(o.loras[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - o.loras[i]), o.loras[i]);
        int id;
        if (lg_engine_add_adapter(e, name, eq + 1, &id, &err) != 0) {
            lg_err_prefix(&err, "--lora %s", name);
            goto out;
        }
    }

    if (o.batch) {
        if (load_batch(&o, w, e, &cvocab, &jobs, &n_jobs, &err) != 0)
            goto out;
    } else {
        jobs = calloc(1, sizeof *jobs);
        n_jobs = 1;
        if (!jobs) {
            lg_fail(&err, "out of memory");
            goto out;
        }
        jobs[0].max_tokens = o.max_tokens;
        jobs[0].temperature = o.temperature;
        jobs[0].logprobs = o.logprobs;
        jobs[0].seed = o.seed;
        if (o.use_lora && !(jobs[0].adapter_id = lg_engine_find_adapter(e, o.use_lora))) {
            lg_fail(&err, "--use-lora %s: no adapter of that name was loaded with --lora", o.use_lora);
            goto out;
        }
        if (build_prompt(&o, w, &jobs[0].prompt, &jobs[0].n_prompt, &err) != 0)
            goto out;
    }

    const lg_tokenizer *tok = lg_weights_tokenizer(w);
    bool json_out = o.json || o.batch;
    /* submit (all at once, or one after another with --sequential) and step
     * until every job is done */
    int next = 0, step_rc = 0;
    for (;;) {
        while (next < n_jobs && (!o.sequential || next == 0 || jobs[next - 1].st.done)) {
            if (submit_job(&o, e, tok, json_out, &jobs[next], constraint, &err) != 0)
                goto out;
            next++;
        }
        int done = 0;
        for (int i = 0; i < next; i++) done += jobs[i].st.done;
        if (next == n_jobs && done == n_jobs)
            break;
        if (o.sequential && jobs[next - 1].st.done)
            continue;
        step_rc = lg_engine_step(e, &err);
        if (step_rc < 0)
            break;
        if (step_rc == 0) /* waiting for an adapter load */
            lg_engine_wait(e, 0.01);
    }
    if (!json_out && jobs[0].st.text_len)
        putchar('\n');
    fflush(stdout);
    if (!o.batch && jobs[0].st.reason == LG_FINISH_ERROR) {
        snprintf(err.msg, sizeof err.msg, "%s", jobs[0].st.error[0] ? jobs[0].st.error : err.msg);
        goto out;
    }
    lg_engine_stats es;
    lg_engine_get_stats(e, &es);
    if (json_out)
        for (int i = 0; i < n_jobs; i++) {
            if (jobs[i].st.reason == LG_FINISH_ERROR && !jobs[i].st.failed) {
                jobs[i].st.failed = true;
                if (!jobs[i].st.error[0])
                    snprintf(jobs[i].st.error, sizeof jobs[i].st.error, "%s", "generation failed");
            }
            print_json(&jobs[i].st, i == n_jobs - 1 ? &es : NULL);
        }
    if (o.stats)
        fprintf(stderr,
                "prompt: %lld tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %.3f s (%.1f tok/s); "
                "decode steps %lld (%lld chained); speculation: %lld proposed, %lld accepted; pages: %d total, %d kv, %d adapter, %d cached; adapter loads %lld, "
                "evictions %lld; kv cache: %s, %lld tokens\n",
                (long long)es.prefill_tokens, es.prefill_seconds,
                es.prefill_seconds > 0 ? es.prefill_tokens / es.prefill_seconds : 0.0, (long long)es.decode_tokens,
                es.decode_seconds, es.decode_seconds > 0 ? es.decode_tokens / es.decode_seconds : 0.0,
                (long long)es.decode_steps, (long long)es.chained_steps, (long long)es.spec_proposed,
                (long long)es.spec_accepted, es.pages_total, es.pages_kv, es.pages_adapter,
                es.pages_cached, (long long)es.adapter_loads, (long long)es.adapter_evictions, es.kv_dtype,
                (long long)es.kv_tokens_capacity);
    exit_code = 0;
out:
    if (exit_code)
        fprintf(stderr, "loragate generate: %s\n", err.msg[0] ? err.msg : "failed");
    lg_engine_free(e);
    lg_constraint_unref(constraint);
    lg_cvocab_free(cvocab);
    for (int i = 0; i < n_jobs; i++) {
        gen_state *st = &jobs[i].st;
        lg_detok_free(st->detok);
        lg_stopper_free(st->stopper);
        free(st->out);
        free(st->text);
        free(st->first_logits);
        free(st->lps);
        free(jobs[i].prompt);
        free(jobs[i].tenant);
        free(jobs[i].cache_salt);
        lg_constraint_unref(jobs[i].constraint);
    }
    free(jobs);
    lg_placement_free(&pl);
    lg_weights_free(w);
    lg_weights_free(dw);
    return exit_code;
}
