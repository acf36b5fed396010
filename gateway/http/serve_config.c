/*
 * serve_config.c — see serve_config.h. `set[]` remembers which options the
 * command line gave, so the file only fills the others.
 */
#include "gateway/http/serve_config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind { K_STR, K_CHOICE, K_INT, K_SECONDS, K_FLAG, K_LISTEN, K_CONFIG } kind;

typedef struct opt {
    const char *name; /* without "--" */
    kind k;
    size_t off;
    long lo, hi;         /* K_INT */
    const char *choices; /* K_CHOICE: "cpu|cuda" */
    const char *arg, *help;
} opt;

#define O(f) offsetof(lg_serve_config, f)
static const opt opts[] = {
    {"model", K_STR, O(model), 0, 0, NULL, "PATH", "base model (HF directory or GGUF file); required"},
    {"listen", K_LISTEN, O(listen), 0, 0, NULL, "ADDR:PORT", "address to serve on, repeatable (default 127.0.0.1:8443; IPv6 as [::1]:8443)"},
    {"data-dir", K_STR, O(data_dir), 0, 0, NULL, "DIR", "state: TLS files, admin.key, store, upload buffers (default ./loragate-data)"},
    {"tls-cert", K_STR, O(tls_cert), 0, 0, NULL, "FILE", "PEM certificate chain (with --tls-key; default: self-signed in DATA_DIR/tls)"},
    {"tls-key", K_STR, O(tls_key), 0, 0, NULL, "FILE", "PEM private key"},
    {"threads", K_INT, O(threads), 1, 256, NULL, "N", "HTTP event-loop threads (default 2)"},
    {"insecure-http", K_FLAG, O(insecure_http), 0, 0, NULL, NULL, "plain HTTP (behind a TLS proxy); refused unless every --listen is loopback"},
    {"max-upload-mb", K_INT, O(max_upload_mb), 1, 1 << 20, NULL, "N", "largest request body, e.g. an adapter upload (default 1024)"},
    {"max-uploads-per-tenant", K_INT, O(max_uploads_per_tenant), 1, 1 << 16, NULL, "N", "adapter uploads one tenant may have in flight (default 2)"},
    {"upload-tmp-mb-per-tenant", K_INT, O(upload_tmp_mb_per_tenant), 1, 1 << 24, NULL, "N", "bytes of uploads in flight one tenant may hold (default 2 x --max-upload-mb)"},
    {"min-free-disk-mb", K_INT, O(min_free_disk_mb), 0, 1 << 24, NULL, "N", "free space the data dir's disk keeps (for the ledger): an upload that would go below it gets 507 (default 256, 0: none)"},
    {"drain-timeout", K_SECONDS, O(drain_timeout_s), 0, 0, NULL, "S", "on SIGTERM, how long in-flight requests may take (default 30)"},
    {"served-model-name", K_STR, O(served_model_name), 0, 0, NULL, "NAME", "the base model's id in the API (default: the model's name)"},
    {"tenant-host-suffix", K_STR, O(tenant_host_suffix), 0, 0, NULL, ".SUFFIX", "route by Host too: acme.SUFFIX is tenant acme (e.g. .api.example.com)"},
    {"access-log", K_STR, O(access_log), 0, 0, NULL, "FILE", "one JSON line per request: '-' stderr (default), 'off', or a file"},
    {"backend", K_CHOICE, O(backend), 0, 0, "cpu|cuda", "cpu|cuda", "compute backend (default cpu)"},
    {"ctx", K_INT, O(ctx), 16, 1 << 20, NULL, "N", "context length per sequence (default min(model, 4096))"},
    {"pool-mb", K_INT, O(pool_mb), 1, 1 << 24, NULL, "N", "unified KV + adapter page pool size (default: the engine's)"},
    {"max-lora-rank", K_INT, O(max_lora_rank), 1, 1024, NULL, "N", "largest adapter rank accepted (default 64)"},
    {"dtype", K_CHOICE, O(dtype), 0, 0, "auto|f32|f16|bf16", "auto|f32|f16|bf16", "GPU compute dtype (default auto)"},
    {"kv-cache-dtype", K_CHOICE, O(kv_cache_dtype), 0, 0, "auto|fp8", "auto|fp8", "KV cache elements: auto (default) the compute dtype; fp8 OCP e4m3 with per-layer K/V scales (the checkpoint's k_scale/v_scale, else 1): twice the tokens in the pool"},
    {"quantization", K_CHOICE, O(quantization), 0, 0, "fp8|int4|none", "fp8|int4", "quantize the linear layers' 16-bit weights at load: fp8 (W8A8, per-channel weights, dynamic per-token activations) or int4 (W4A16, round-to-nearest, asymmetric, groups of 128); quantized checkpoints load as they are without it"},
    {"dequant-dtype", K_CHOICE, O(dequant_dtype), 0, 0, "f16|f32", "f16|f32", "expand quantized weights (GGUF, FP8, INT4 checkpoints) at load (default: a backend that takes their layout keeps them)"},
    {"chat-template", K_STR, O(chat_template), 0, 0, NULL, "FILE|NAME", "the chat template: a Jinja file (instead of the model's own), or a built-in family (chatml|llama3|llama2|mistral)"},
    {"tool-call-parser", K_CHOICE, O(tool_call_parser), 0, 0, "hermes|llama3_json|mistral|granite", "NAME", "how tool calls are read from tool_choice auto output: hermes|llama3_json|mistral|granite (default: the format the chat template teaches)"},
    {"responses-retention", K_INT, O(responses_retention_h), 0, 24 * 3650, NULL, "HOURS", "how long /v1/responses keeps stored responses (store, previous_response_id) (default 720; 0: none are stored)"},
    {"engine-threads", K_INT, O(engine_threads), 1, 1024, NULL, "N", "CPU backend threads (default: all cores; split over the engines and ranks)"},
    {"data-parallel-size", K_INT, O(data_parallel_size), 1, 64, NULL, "N", "engines behind this server, each on its own device (CUDA: engine k on devices k x M ..; CPU: N engines), one router, store and usage ledger (default 1)"},
    {"tensor-parallel-size", K_INT, O(tensor_parallel_size), 1, 64, NULL, "M", "devices each engine is split over (tensor parallelism; CUDA device k x M + r for engine k's rank r) (default 1)"},
    {"max-queue", K_INT, O(max_queue), 1, 1 << 20, NULL, "N", "requests waiting for the engine before 503 (default 256)"},
    {"default-max-tokens", K_INT, O(default_max_tokens), 1, 1 << 20, NULL, "N", "max_tokens when a request gives none (default 256)"},
    {"gpu-memory-utilization", K_STR, O(gpu_memory_utilization), 0, 0, NULL, "F", "fraction of GPU memory for weights + pool (default 0.90)"},
    {"prefix-sharing", K_CHOICE, O(prefix_sharing), 0, 0, "tenant|global|off", "tenant|global|off", "who shares cached prompt prefixes (default tenant)"},
    {"scheduler", K_CHOICE, O(scheduler), 0, 0, "vtc|fcfs", "vtc|fcfs", "admission order across tenants: fair share (default) or arrival order"},
    {"decode-bursts", K_CHOICE, O(decode_bursts), 0, 0, "on|off", "on|off", "enqueue each decode step before the last one's tokens are read (default on; off: no extra step before an arriving request's prefill)"},
    {"speculative", K_CHOICE, O(speculative), 0, 0, "off|ngram|draft", "off|ngram|draft", "speculative decoding: ngram proposes a sequence's next tokens from its own prompt and output, draft from --draft-model; one step verifies them; output is exact (default off)"},
    {"draft-model", K_STR, O(draft_model), 0, 0, NULL, "PATH", "with --speculative draft: a small model with the same vocabulary (base weights only)"},
    {"num-speculative-tokens", K_INT, O(num_speculative_tokens), 1, 16, NULL, "K", "most tokens proposed a step (default 4)"},
    {"ngram-min", K_INT, O(ngram_min), 1, 64, NULL, "N", "shortest suffix --speculative ngram looks up (default 2)"},
    {"ngram-max", K_INT, O(ngram_max), 1, 64, NULL, "M", "longest suffix --speculative ngram looks up (default 4)"},
    {"speculative-max-batch", K_INT, O(speculative_max_batch), 1, 1 << 20, NULL, "N", "no speculation in a step where more than N sequences decode (default 16)"},
    {"grammar-compile-ms", K_INT, O(grammar_compile_ms), 1, 600000, NULL, "MS", "longest a response_format schema, regex or grammar may take to compile before its request gets 400 (default 2000)"},
    {"grammar-max-states", K_INT, O(grammar_max_states), 1000, 100000000, NULL, "N", "automaton states one compiled grammar may have (default 200000)"},
    {"grammar-max-depth", K_INT, O(grammar_max_depth), 4, 4096, NULL, "N", "nesting a schema, regex or grammar may have (default 64)"},
    {"grammar-cache-mb", K_INT, O(grammar_cache_mb), 1, 1 << 20, NULL, "N", "memory for compiled grammars and their mask tables, reused across requests (default 256)"},
    {"metrics-tenant-labels", K_CHOICE, O(metrics_tenant_labels), 0, 0, "on|off", "on|off", "tenant label on /metrics series (default on)"},
    {"metrics-auth", K_CHOICE, O(metrics_auth), 0, 0, "off|on", "off|on", "GET /metrics needs the metrics key ($LORAGATE_METRICS_KEY or DATA_DIR/metrics.key) or the operator key (default off)"},
    {"config", K_CONFIG, 0, 0, 0, NULL, "FILE", "JSON object of these options (long names); command-line options win"},
};
#undef O
#define N_OPTS (int)(sizeof opts / sizeof opts[0])

void lg_serve_config_usage(FILE *f)
{
    fprintf(f, "usage: loragate serve --model PATH [options]\n\n");
    for (int i = 0; i < N_OPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
        fprintf(f, "  %-30s %s\n", left, opts[i].help);
    }
    fprintf(f, "\nThe operator key comes from LORAGATE_ADMIN_KEY, else DATA_DIR/admin.key (created, mode 0600).\n"
               "SIGTERM or SIGINT drains: no new requests, in-flight ones finish (up to --drain-timeout), exit 0.\n");
}

static const opt *find(const char *name)
{
    for (int i = 0; i < N_OPTS; i++)
        if (!strcmp(opts[i].name, name))
            return &opts[i];
    return NULL;
}

static bool in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !strncmp(p, v, n))
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

/* Stores one value (text form) of o into c. `where` names the source for messages. */
static int store(lg_serve_config *c, const opt *o, const char *v, const char *where, lg_err *err)
{
    char *base = (char *)c;
    switch (o->k) {
    case K_STR:
        if (!*v)
            return lg_fail(err, "%s%s: empty value", where, o->name);
        *(const char **)(base + o->off) = v;
        return 0;
    case K_CHOICE:
        if (!in_choices(o->choices, v))
            return lg_fail(err, "%s%s %s: expected one of %s", where, o->name, v, o->choices);
        *(const char **)(base + o->off) = v;
        return 0;
    case K_INT: {
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < o->lo || x > o->hi)
            return lg_fail(err, "%s%s %s: expected an integer in %ld..%ld", where, o->name, v, o->lo, o->hi);
        *(long *)(base + o->off) = x;
        return 0;
    }
    case K_SECONDS: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !(x > 0 && x <= 86400))
            return lg_fail(err, "%s%s %s: expected seconds in (0, 86400]", where, o->name, v);
        *(double *)(base + o->off) = x;
        return 0;
    }
    case K_LISTEN:
        if (c->n_listen == LG_SERVER_MAX_LISTEN)
            return lg_fail(err, "%sat most %d listen addresses", where, LG_SERVER_MAX_LISTEN);
        c->listen[c->n_listen++] = v;
        return 0;
    case K_FLAG:
    case K_CONFIG:
        break;
    }
    return lg_fail(err, "internal: option %s", o->name);
}

static int apply_file(lg_serve_config *c, const char *path, const bool *set, lg_err *err)
{
    json_error_t je;
    c->file_json = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!c->file_json)
        return lg_fail(err, "--config %s: %s (line %d)", path, je.text, je.line);
    if (!json_is_object(c->file_json))
        return lg_fail(err, "--config %s: expected a JSON object of options", path);
    char where[300];
    snprintf(where, sizeof where, "--config %s: ", path);
    const char *key;
    json_t *v;
    json_object_foreach(c->file_json, key, v)
    {
        const opt *o = find(key);
        if (!o)
            return lg_fail(err, "--config %s: unknown key \"%s\"", path, key);
        if (o->k == K_CONFIG)
            return lg_fail(err, "--config %s: a config file cannot name another config file", path);
        if (set[o - opts])
            continue; /* the command line wins */
        char num[64];
        switch (o->k) {
        case K_FLAG:
            if (!json_is_boolean(v))
                return lg_fail(err, "--config %s: \"%s\" must be true or false", path, key);
            *(bool *)((char *)c + o->off) = json_is_true(v);
            break;
        case K_LISTEN:
            if (json_is_string(v)) {
                if (store(c, o, json_string_value(v), where, err))
                    return -1;
            } else if (json_is_array(v) && json_array_size(v) >= 1) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e)
                {
                    if (!json_is_string(e))
                        return lg_fail(err, "--config %s: \"listen\" must hold strings", path);
                    if (store(c, o, json_string_value(e), where, err))
                        return -1;
                }
            } else {
                return lg_fail(err, "--config %s: \"listen\" must be a string or a non-empty array of strings", path);
            }
            break;
        case K_INT:
        case K_SECONDS:
            if (!json_is_number(v))
                return lg_fail(err, "--config %s: \"%s\" must be a number", path, key);
            if (json_is_integer(v))
                snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            else
                snprintf(num, sizeof num, "%.17g", json_real_value(v));
            if (store(c, o, num, where, err))
                return -1;
            break;
        default:
            if (!json_is_string(v))
                return lg_fail(err, "--config %s: \"%s\" must be a string", path, key);
            if (store(c, o, json_string_value(v), where, err))
                return -1;
        }
    }
    return 0;
}

int lg_serve_config_parse(lg_serve_config *c, int argc, char **argv, lg_err *err)
{
    memset(c, 0, sizeof *c);
    c->min_free_disk_mb = -1; /* 0 is a value: no floor */
    c->responses_retention_h = -1; /* 0 is a value: nothing stored */
    bool set[N_OPTS] = {0};
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            lg_serve_config_usage(stdout);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0)
            return lg_fail(err, "unexpected argument '%s' (loragate serve --help)", a);
        char name[64];
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name)
            return lg_fail(err, "unknown option '%.80s' (loragate serve --help)", a);
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        const opt *o = find(name);
        if (!o)
            return lg_fail(err, "unknown option '--%s' (loragate serve --help)", name);
        if (o->k == K_FLAG) {
            if (eq)
                return lg_fail(err, "--%s takes no value", name);
            *(bool *)((char *)c + o->off) = true;
            set[o - opts] = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc)
                return lg_fail(err, "--%s needs a value", name);
            v = argv[++i];
        }
        if (o->k == K_CONFIG) {
            config = v;
            continue;
        }
        if (set[o - opts] && o->k != K_LISTEN)
            return lg_fail(err, "--%s given twice", name);
        if (store(c, o, v, "--", err))
            return -1;
        set[o - opts] = true;
    }
    if (config && apply_file(c, config, set, err) != 0)
        return -1;
    if (!c->model)
        return lg_fail(err, "--model PATH is required");
    if (!c->tls_cert != !c->tls_key)
        return lg_fail(err, "--tls-cert and --tls-key go together");
    if (c->insecure_http && c->tls_cert)
        return lg_fail(err, "--insecure-http and --tls-cert exclude each other");
    if (c->tenant_host_suffix && c->tenant_host_suffix[0] != '.')
        return lg_fail(err, "--tenant-host-suffix %s: must start with '.' (e.g. .api.example.com)", c->tenant_host_suffix);
    if (!c->n_listen)
        c->listen[c->n_listen++] = "127.0.0.1:8443";
    if (!c->data_dir)
        c->data_dir = "loragate-data";
    if (!c->threads)
        c->threads = 2;
    if (!c->max_upload_mb)
        c->max_upload_mb = 1024;
    if (!c->max_uploads_per_tenant)
        c->max_uploads_per_tenant = 2;
    if (!c->upload_tmp_mb_per_tenant)
        c->upload_tmp_mb_per_tenant = 2 * c->max_upload_mb;
    if (c->min_free_disk_mb < 0)
        c->min_free_disk_mb = 256;
    if (c->responses_retention_h < 0)
        c->responses_retention_h = 720;
    if (!c->drain_timeout_s)
        c->drain_timeout_s = 30;
    if (!c->access_log)
        c->access_log = "-";
    if (!c->backend)
        c->backend = "cpu";
    if (!c->dtype)
        c->dtype = "auto";
    if (!c->max_lora_rank)
        c->max_lora_rank = 64;
    if (!c->max_queue)
        c->max_queue = 256;
    if (!c->data_parallel_size)
        c->data_parallel_size = 1;
    if (!c->tensor_parallel_size)
        c->tensor_parallel_size = 1;
    if (!c->prefix_sharing)
        c->prefix_sharing = "tenant";
    if (!c->scheduler)
        c->scheduler = "vtc";
    if (!c->metrics_tenant_labels)
        c->metrics_tenant_labels = "on";
    if (!c->metrics_auth)
        c->metrics_auth = "off";
    if (!c->decode_bursts)
        c->decode_bursts = "on";
    if (!c->speculative)
        c->speculative = "off";
    if (c->gpu_memory_utilization) {
        char *end;
        double u = strtod(c->gpu_memory_utilization, &end);
        if (*end || !(u > 0 && u <= 1))
            return lg_fail(err, "--gpu-memory-utilization %s: expected a fraction in (0, 1]", c->gpu_memory_utilization);
    }
    if (!c->default_max_tokens)
        c->default_max_tokens = 256;
    if (!c->grammar_compile_ms)
        c->grammar_compile_ms = 2000;
    if (!c->grammar_max_states)
        c->grammar_max_states = 200000;
    if (!c->grammar_max_depth)
        c->grammar_max_depth = 64;
    if (!c->grammar_cache_mb)
        c->grammar_cache_mb = 256;
    return 0;
}

void lg_serve_config_dispose(lg_serve_config *c)
{
    if (!c)
        return;
    json_decref(c->file_json);
    c->file_json = NULL;
}
