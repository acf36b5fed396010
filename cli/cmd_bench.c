/*
 * cmd_bench.c — `loragate bench`: one fixed batch through the engine, timed.
 *
 *   loragate bench --model DIR [--load-format dummy|auto] [--backend cpu|cuda]
 *     [--num-seqs N] [--prompt-len P] [--output-len O] [--adapters K]
 *     [--rank R] [--targets q,k,v,o] [--dtype f16|bf16|f32] [--json]
 *
 * All N sequences are submitted at once (random prompt ids, ignore EOS, greedy)
 * and run to O new tokens each. With K > 0, K distinct random rank-R PEFT
 * adapters are written to a temporary directory as real PEFT files, loaded
 * through the normal path (--lora), and sequence i uses adapter i % K.
 * --load-format dummy needs only config.json: weights are random of --dtype.
 *
 * Reported: output tok/s (N * O / wall time of the whole batch), prefill
 * time, decode time per step, and the pool counters. One warm-up request
 * runs first so one-time initialisation stays out of the numbers.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cli.h"
#include "engine.h"
#include "weights.h"

typedef struct bench_opts {
    const char *model, *backend, *targets;
    bool dummy, json;
    int num_seqs, prompt_len, output_len, adapters, rank, threads, budget;
    lg_dtype dtype;
    uint64_t seed;
} bench_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: loragate bench --model DIR [--load-format dummy|auto] [--backend cpu|cuda]\n"
               "         [--num-seqs N] [--prompt-len P] [--output-len O] [--adapters K] [--rank R]\n"
               "         [--targets q,k,v,o,gate,up,down] [--dtype f16|bf16|f32] [--step-tokens T]\n"
               "         [--threads N] [--seed S] [--json]\n");
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int write_file(const char *path, const void *data, size_t n, lg_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return lg_fail(err, "cannot write %s: %s", path, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? 0 : lg_fail(err, "short write on %s", path);
}

static const char *const k_module_path[LG_LORA_N_MODULES] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};
static const char *const k_module_short[LG_LORA_N_MODULES] = {"q", "k", "v", "o", "gate", "up", "down"};

static void module_dims(const lg_model_config *c, int m, int *in, int *out)
{
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    int ins[] = {c->d_model, c->d_model, c->d_model, q, c->d_model, c->d_model, c->d_ff};
    int outs[] = {q, kv, kv, c->d_model, c->d_ff, c->d_ff, c->d_model};
    *in = ins[m];
    *out = outs[m];
}

/* Writes a random PEFT adapter (f16) for the given modules into dir. */
static int write_random_adapter(const char *dir, const lg_model_config *c, const bool *mods, int rank, uint64_t seed,
                                lg_err *err)
{
    json_t *hdr = json_object(), *cfg = json_object(), *tm = json_array();
    size_t off = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < LG_LORA_N_MODULES; m++) {
            if (!mods[m])
                continue;
            int in, out;
            module_dims(c, m, &in, &out);
            for (int ab = 0; ab < 2; ab++) {
                char name[160];
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", l, k_module_path[m],
                         ab ? 'B' : 'A');
                size_t n = (size_t)rank * (size_t)(ab ? out : in);
                json_t *t = json_object();
                json_object_set_new(t, "dtype", json_string("F16"));
                json_object_set_new(t, "shape", json_pack("[ii]", ab ? out : rank, ab ? rank : in));
                json_object_set_new(t, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + 2 * n)));
                json_object_set_new(hdr, name, t);
                off += 2 * n;
            }
        }
    for (int m = 0; m < LG_LORA_N_MODULES; m++)
        if (mods[m])
            json_array_append_new(tm, json_string(strchr(k_module_path[m], '.') + 1));
    char *h = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8;
    size_t total = 8 + hl + pad + off;
    unsigned char *buf = malloc(total);
    int rc = -1;
    if (buf) {
        uint64_t hlen = hl + pad;
        memcpy(buf, &hlen, 8);
        memcpy(buf + 8, h, hl);
        memset(buf + 8 + hl, ' ', pad);
        /* the data must be in the file's offset order: json_dumps sorted the
         * keys, so fill by walking the header again in sorted order */
        const char *key;
        json_t *val;
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
        json_object_foreach(hdr, key, val) {
            size_t b = (size_t)json_integer_value(json_array_get(json_object_get(val, "data_offsets"), 0));
            size_t e = (size_t)json_integer_value(json_array_get(json_object_get(val, "data_offsets"), 1));
            uint16_t *d = (uint16_t *)(buf + 8 + hlen + b);
            for (size_t i = 0; i < (e - b) / 2; i++) {
                float v = ((float)(rng_next(&s) >> 40) / (float)(1 << 24) - 0.5f) * 0.02f;
                d[i] = lg_f32_to_f16(v);
            }
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        rc = write_file(path, buf, total, err);
    } else {
        lg_fail(err, "out of memory");
    }
    free(buf);
    free(h);
    json_object_set_new(cfg, "peft_type", json_string("LORA"));
    json_object_set_new(cfg, "r", json_integer(rank));
    json_object_set_new(cfg, "lora_alpha", json_integer(2 * rank));
    json_object_set_new(cfg, "target_modules", tm);
    json_object_set_new(cfg, "bias", json_string("none"));
    json_object_set_new(cfg, "task_type", json_string("CAUSAL_LM"));
    char *cj = json_dumps(cfg, JSON_INDENT(2));
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        rc = write_file(path, cj, strlen(cj), err);
    }
    free(cj);
    json_decref(cfg);
    json_decref(hdr);
    return rc;
}

typedef struct bench_req {
    int n_out;
    bool done;
    lg_finish_reason reason;
} bench_req;

static void on_token(void *user, int64_t id, int32_t token, const float *logits, int n_vocab)
{
    ((bench_req *)user)->n_out++;
}
static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    bench_req *r = user;
    r->done = true;
    r->reason = reason;
}

static int parse_targets(const char *s, bool *mods, lg_err *err)
{
    memset(mods, 0, LG_LORA_N_MODULES * sizeof(bool));
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    int n = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int m = 0;
        while (m < LG_LORA_N_MODULES && strcmp(t, k_module_short[m])) m++;
        if (m == LG_LORA_N_MODULES)
            return lg_fail(err, "--targets: unknown module '%s' (q,k,v,o,gate,up,down)", t);
        mods[m] = true;
        n++;
    }
    return n ? 0 : lg_fail(err, "--targets is empty");
}

static void rm_tree(const char *dir, int n)
{
    char p[4096];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/a%d/adapter_model.safetensors", dir, i);
        unlink(p);
        snprintf(p, sizeof p, "%s/a%d/adapter_config.json", dir, i);
        unlink(p);
        snprintf(p, sizeof p, "%s/a%d", dir, i);
        rmdir(p);
    }
    rmdir(dir);
}

int lg_cmd_bench(int argc, char **argv)
{
    enum { O_MODEL = 1000, O_FMT, O_BACKEND, O_NSEQ, O_PLEN, O_OLEN, O_ADP, O_RANK, O_TGT, O_DT, O_JSON, O_THR,
           O_BUDGET, O_SEED, O_HELP };
    static const struct option lo[] = {
        {"model", 1, 0, O_MODEL}, {"load-format", 1, 0, O_FMT}, {"backend", 1, 0, O_BACKEND},
        {"num-seqs", 1, 0, O_NSEQ}, {"prompt-len", 1, 0, O_PLEN}, {"output-len", 1, 0, O_OLEN},
        {"adapters", 1, 0, O_ADP}, {"rank", 1, 0, O_RANK}, {"targets", 1, 0, O_TGT}, {"dtype", 1, 0, O_DT},
        {"json", 0, 0, O_JSON}, {"threads", 1, 0, O_THR}, {"step-tokens", 1, 0, O_BUDGET}, {"seed", 1, 0, O_SEED},
        {"help", 0, 0, O_HELP}, {0, 0, 0, 0},
    };
    bench_opts o = {.backend = "cpu", .targets = "q,k,v,o", .num_seqs = 32, .prompt_len = 128, .output_len = 64,
                    .rank = 16, .dtype = LG_F16, .seed = 1};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        bool num_ok = optarg && end && !*end && end != optarg && v >= 0 && v <= (1 << 24);
        switch (c) {
        case O_MODEL: o.model = optarg; break;
        case O_FMT:
            if (strcmp(optarg, "dummy") && strcmp(optarg, "auto")) goto bad;
            o.dummy = !strcmp(optarg, "dummy");
            break;
        case O_BACKEND: o.backend = optarg; break;
        case O_NSEQ: if (!num_ok || v < 1) goto bad; o.num_seqs = (int)v; break;
        case O_PLEN: if (!num_ok || v < 1) goto bad; o.prompt_len = (int)v; break;
        case O_OLEN: if (!num_ok || v < 1) goto bad; o.output_len = (int)v; break;
        case O_ADP: if (!num_ok) goto bad; o.adapters = (int)v; break;
        case O_RANK: if (!num_ok || v < 1) goto bad; o.rank = (int)v; break;
        case O_TGT: o.targets = optarg; break;
        case O_DT: if (lg_dtype_parse(optarg, &o.dtype) != 0) goto bad; break;
        case O_JSON: o.json = true; break;
        case O_THR: if (!num_ok || v < 1) goto bad; o.threads = (int)v; break;
        case O_BUDGET: if (!num_ok || v < 16) goto bad; o.budget = (int)v; break;
        case O_SEED: if (!num_ok) goto bad; o.seed = (uint64_t)v; break;
        case O_HELP: usage(stdout); return 0;
        default:
        bad:
            fprintf(stderr, "loragate bench: bad or unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (!o.model) {
        fprintf(stderr, "loragate bench: --model is required\n");
        return 2;
    }

    lg_err err = {{0}};
    lg_weights *w = NULL;
    lg_backend *be = NULL;
    lg_engine *e = NULL;
    bench_req *reqs = NULL;
    int32_t *prompt = NULL;
    char tmpdir[] = "/tmp/loragate-bench-XXXXXX";
    bool have_tmp = false;
    int exit_code = 1;
    bool mods[LG_LORA_N_MODULES];

    if (o.adapters && parse_targets(o.targets, mods, &err) != 0)
        goto out;
    lg_load_opts lopts = {.dequant_dtype = o.dtype, .dummy = o.dummy, .dummy_dtype = o.dtype, .dummy_seed = o.seed,
                          .progress = true};
    if (lg_weights_load(o.model, &lopts, &w, &err) != 0)
        goto out;
    const lg_model_config *cfg = lg_weights_config(w);
    lg_backend_opts bo = {.n_threads = o.threads, .act_dtype_hint = o.dtype == LG_BF16 ? LG_BF16 : LG_F16};
    if (lg_backend_create(o.backend, &bo, &be, &err) != 0)
        goto out;
    int ctx = o.prompt_len + o.output_len + 1;
    int budget = o.budget ? o.budget : (o.num_seqs * o.prompt_len < 8192 ? o.num_seqs * o.prompt_len : 8192);
    if (budget < o.num_seqs)
        budget = o.num_seqs;
    size_t kv_per_seq = (size_t)((ctx + 15) / 16 + 1) * 16 * cfg->n_layers * 2 * cfg->n_kv_heads * cfg->head_dim *
                        lg_dtype_size(be->act_dtype);
    lg_engine_opts eo = {
        .model = {.max_step_tokens = budget, .max_seqs = o.num_seqs, .page_tokens = 16, .max_context = ctx,
                  .lora_max_rank = o.adapters ? o.rank : 0},
        .pool_bytes = kv_per_seq * (size_t)(o.num_seqs + 1) + ((size_t)64 << 20) * (o.adapters ? 1 : 0) +
                      (size_t)o.adapters * 2 * (size_t)o.rank * (size_t)cfg->n_layers * 7 *
                          (size_t)(cfg->d_ff > cfg->d_model ? cfg->d_ff : cfg->d_model) * lg_dtype_size(be->act_dtype),
    };
    if (lg_engine_create(be, w, &eo, &e, &err) != 0)
        goto out;
    cfg = lg_engine_config(e); /* the weights' config goes away with them */
    lg_weights_free(w);         /* copied to the backend */
    w = NULL;

    int *ids = calloc((size_t)(o.adapters + 1), sizeof(int));
    if (o.adapters) {
        if (!mkdtemp(tmpdir)) {
            lg_fail(&err, "cannot create a temporary directory: %s", strerror(errno));
            free(ids);
            goto out;
        }
        have_tmp = true;
        for (int i = 0; i < o.adapters; i++) {
            char dir[4096], name[32];
            snprintf(dir, sizeof dir, "%s/a%d", tmpdir, i);
            snprintf(name, sizeof name, "a%d", i);
            if (mkdir(dir, 0700) != 0 || write_random_adapter(dir, cfg, mods, o.rank, o.seed + 1 + i, &err) != 0 ||
                lg_engine_add_adapter(e, name, dir, &ids[i], &err) != 0) {
                if (!err.msg[0])
                    lg_fail(&err, "cannot create %s", dir);
                free(ids);
                goto out;
            }
        }
    }

    reqs = calloc((size_t)o.num_seqs + 1, sizeof *reqs);
    prompt = malloc((size_t)o.prompt_len * sizeof(int32_t));
    if (!reqs || !prompt) {
        free(ids);
        lg_fail(&err, "out of memory");
        goto out;
    }
    uint64_t s = o.seed * 2654435761u + 7;
    /* warm-up: one short request per adapter (or one without), all at once:
     * one-time initialisation and adapter residency (timed separately, as
     * "adapter_load_s") stay out of the batch's numbers, as in the HF peft
     * baseline whose adapters are on the GPU before generate starts */
    double load_s = 0;
    {
        int nw = o.adapters ? o.adapters : 1;
        bench_req *wr = calloc((size_t)nw, sizeof *wr);
        for (int i = 0; i < 8 && i < o.prompt_len; i++) prompt[i] = (int32_t)(rng_next(&s) % (uint64_t)cfg->vocab_size);
        double tl = lg_now();
        for (int k = 0; wr && k < nw; k++) {
            lg_request_params rp = {.prompt = prompt, .n_prompt = o.prompt_len < 8 ? o.prompt_len : 8, .max_tokens = 2,
                                    .ignore_eos = true, .adapter_id = o.adapters ? ids[k] : 0,
                                    .cb = {on_token, on_finish}, .user = &wr[k]};
            lg_sampling_params_default(&rp.sampling);
            if (lg_engine_submit(e, &rp, NULL, &err) != 0) {
                free(wr);
                free(ids);
                goto out;
            }
        }
        for (int k = 0; wr && k < nw; k++)
            while (!wr[k].done)
                if (lg_engine_step(e, &err) != 0) {
                    free(wr);
                    free(ids);
                    goto out;
                }
        load_s = lg_now() - tl;
        free(wr);
    }
    lg_engine_stats s0;
    lg_engine_get_stats(e, &s0);
    for (int i = 0; i < o.num_seqs; i++) {
        for (int k = 0; k < o.prompt_len; k++) prompt[k] = (int32_t)(rng_next(&s) % (uint64_t)cfg->vocab_size);
        lg_request_params rp = {.prompt = prompt, .n_prompt = o.prompt_len, .max_tokens = o.output_len,
                                .ignore_eos = true, .adapter_id = o.adapters ? ids[i % o.adapters] : 0,
                                .cb = {on_token, on_finish}, .user = &reqs[i]};
        lg_sampling_params_default(&rp.sampling);
        if (lg_engine_submit(e, &rp, NULL, &err) != 0) {
            free(ids);
            goto out;
        }
    }
    free(ids);
    double t0 = lg_now();
    for (;;) {
        int done = 0;
        for (int i = 0; i < o.num_seqs; i++) done += reqs[i].done;
        if (done == o.num_seqs)
            break;
        if (lg_engine_step(e, &err) != 0)
            goto out;
    }
    double wall = lg_now() - t0;
    lg_engine_stats s1;
    lg_engine_get_stats(e, &s1);
    long out_tokens = 0;
    for (int i = 0; i < o.num_seqs; i++) out_tokens += reqs[i].n_out;
    int64_t pf_steps = s1.prefill_steps - s0.prefill_steps, dc_steps = s1.decode_steps - s0.decode_steps;
    double pf_s = s1.prefill_seconds - s0.prefill_seconds, dc_s = s1.decode_seconds - s0.decode_seconds;
    double tok_s = out_tokens / wall;
    double host_s = (s1.step_seconds - s0.step_seconds) - pf_s - dc_s, sample_s = s1.sample_seconds - s0.sample_seconds;
    if (o.json) {
        json_t *j = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:I,s:f,s:f,s:I,s:f,s:I,s:f,s:f,s:f,s:I,s:I}",
                              "backend", be->i.name, "dtype", lg_dtype_name(be->act_dtype), "num_seqs", o.num_seqs,
                              "prompt_len", o.prompt_len, "output_len", o.output_len, "adapters", o.adapters, "rank",
                              o.rank, "targets", o.targets, "output_tokens", (json_int_t)out_tokens, "wall_s", wall,
                              "output_tok_s", tok_s, "prefill_steps", (json_int_t)pf_steps, "prefill_s", pf_s,
                              "decode_steps", (json_int_t)dc_steps, "decode_s", dc_s,
                              "decode_ms_per_step", dc_steps ? 1e3 * dc_s / dc_steps : 0.0,
                              "prefill_tok_s", pf_s > 0 ? (s1.prefill_tokens - s0.prefill_tokens) / pf_s : 0.0,
                              "adapter_loads", (json_int_t)s1.adapter_loads, "pages_adapter", (json_int_t)s1.pages_adapter);
        json_object_set_new(j, "host_s", json_real(host_s));
        json_object_set_new(j, "sample_s", json_real(sample_s));
        json_object_set_new(j, "warmup_and_adapter_load_s", json_real(load_s));
        char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(txt);
        free(txt);
        json_decref(j);
    } else {
        printf("backend %s (%s): %d seqs x (prompt %d + output %d), %d adapters of rank %d on %s\n", be->i.name,
               lg_dtype_name(be->act_dtype), o.num_seqs, o.prompt_len, o.output_len, o.adapters, o.rank,
               o.adapters ? o.targets : "-");
        printf("output: %ld tokens in %.3f s = %.1f tok/s\n", out_tokens, wall, tok_s);
        printf("host work outside the forward: %.3f s (sampling %.3f s); warm-up incl. adapter loads %.3f s\n", host_s,
               sample_s, load_s);
        printf("prefill: %lld steps, %.3f s (%.1f tok/s); decode: %lld steps, %.2f ms/step\n", (long long)pf_steps,
               pf_s, pf_s > 0 ? (s1.prefill_tokens - s0.prefill_tokens) / pf_s : 0.0, (long long)dc_steps,
               dc_steps ? 1e3 * dc_s / dc_steps : 0.0);
    }
    exit_code = 0;
out:
    if (exit_code)
        fprintf(stderr, "loragate bench: %s\n", err.msg[0] ? err.msg : "failed");
    lg_engine_free(e);
    lg_backend_free(be);
    lg_weights_free(w);
    free(reqs);
    free(prompt);
    if (have_tmp)
        rm_tree(tmpdir, o.adapters);
    return exit_code;
}
