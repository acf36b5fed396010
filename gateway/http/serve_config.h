/*
 * serve_config.h — the options of `loragate serve`, from the command line
 * and from a --config file, kept apart from what the server does with them.
 *
 * One table (serve_config.c) lists every option once: its long name, its
 * kind, its range and its help line; the command-line parser, the config
 * file reader and the usage text are all driven by it. A --config FILE is a
 * JSON object whose keys are the long names without dashes-prefix
 * ({"listen": ["127.0.0.1:8443"], "threads": 4, "insecure-http": false});
 * an option given on the command line wins over the file; an unknown key,
 * a wrong type or a value out of range is refused naming the key.
 *
 * Engine options are parsed and range-checked here too (so a typo fails at
 * start, not at the first request); cmd_serve.c hands them to the engine.
 */
#ifndef LG_GW_SERVE_CONFIG_H
#define LG_GW_SERVE_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "engine/base/common.h"
#include "gateway/http/server.h"

typedef struct lg_serve_config {
    /* server */
    const char *model;
    const char *listen[LG_SERVER_MAX_LISTEN];
    int n_listen;
    const char *data_dir;             /* default "loragate-data" */
    const char *tls_cert, *tls_key;
    long threads;                     /* HTTP event loops, default 2 */
    bool insecure_http;
    long max_upload_mb;               /* default 1024 */
    long max_uploads_per_tenant;      /* default 2 */
    long upload_tmp_mb_per_tenant;    /* default 2 x max_upload_mb */
    long min_free_disk_mb;            /* default 256; 0: no floor */
    double drain_timeout_s;           /* default 30 */
    const char *served_model_name;    /* default: the model's name */
    const char *tenant_host_suffix;   /* NULL: no Host routing */
    const char *access_log;           /* "-" stderr (default), "off", or a file */
    /* engine */
    const char *backend;              /* "cpu" (default) or "cuda" */
    long ctx;                         /* 0: min(model, 4096) */
    long pool_mb;                     /* 0: engine default */
    long max_lora_rank;               /* default 64 */
    const char *dtype;                /* auto|f32|f16|bf16 */
    const char *kv_cache_dtype;       /* auto|fp8, NULL: auto */
    const char *quantization;         /* fp8|int4|none, or NULL: weights as stored */
    const char *dequant_dtype;        /* f16|f32, or NULL: quantized weights keep their blocks where the backend takes them */
    const char *chat_template;        /* chatml|llama3|llama2|mistral or a Jinja file, NULL: the model's */
    const char *tool_call_parser;     /* hermes|llama3_json|mistral|granite, NULL: from the template */
    long responses_retention_h;       /* stored /v1/responses kept this many hours, default 720; 0: none stored */
    long engine_threads;              /* CPU backend threads, 0: all cores (split over engines x ranks) */
    long data_parallel_size;          /* engines behind the router, default 1 */
    long tensor_parallel_size;        /* ranks (devices) per engine, default 1 */
    long max_queue;                   /* requests waiting for the engine before 503, default 256 */
    long default_max_tokens;          /* when a request gives none, default 256 */
    const char *gpu_memory_utilization; /* text of a fraction in (0, 1]; NULL: engine default 0.90 */
    const char *prefix_sharing;       /* tenant|global|off */
    const char *scheduler;            /* vtc|fcfs */
    const char *metrics_tenant_labels; /* on|off */
    const char *metrics_auth;          /* off|on */
    const char *decode_bursts;         /* on|off */
    /* speculative decoding (engine/runtime/speculate.c) */
    const char *speculative;           /* off|ngram|draft */
    const char *draft_model;           /* --speculative draft: its weights */
    long num_speculative_tokens;       /* 0: the engine's (4) */
    long ngram_min, ngram_max;         /* 0: the engine's (2, 4) */
    long speculative_max_batch;        /* 0: the engine's (16) */
    /* structured output (response_format, grammars): limits on compiling one, the compile cache */
    long grammar_compile_ms;           /* default 2000 */
    long grammar_max_states;           /* automaton states of one grammar, default 200000 */
    long grammar_max_depth;            /* schema / grammar nesting, default 64 */
    long grammar_cache_mb;             /* compiled grammars kept, default 256 */

    json_t *file_json;                /* the --config file (strings above may point into it) */
} lg_serve_config;

/* Parses argv (argv[0] is "serve"), then the --config file if one was
 * given, then fills defaults. Returns 0, 1 for --help (usage printed to
 * stdout), or -1 with err set (a usage error: the CLI exits 2). */
int lg_serve_config_parse(lg_serve_config *c, int argc, char **argv, lg_err *err);
void lg_serve_config_usage(FILE *f);
void lg_serve_config_dispose(lg_serve_config *c);

#endif
