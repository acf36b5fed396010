/*
 * test_engine_tp.c — tensor parallelism (engine/model/model_tp.c) on the
 * CPU backend: an engine over 2 ranks (two CPU backends in one group)
 * against the same engine over 1, on the tiny Llama of
 * tests/golden/lora_fixtures/base (4 heads, 2 KV heads) and its PEFT
 * adapters. Run from the repository root.
 *
 * What is checked: in one mixed batch (base model, four adapters of
 * different ranks and targets, two tenants, a prompt repeated so the second
 * copy is served from the prefix cache), every request's first logits equal
 * the unsharded engine's within f32 rounding of the split sums (rel. L2 <
 * 1e-5) and the greedy tokens are identical; the repeat reports the same
 * cached tokens; synthetic adapters give the same logits sharded and not
 * (their shards are slices of the same values); a model whose KV heads do
 * not divide by the ranks, and a bad rank list, are refused by name.
 * Quantized weights (--quantization, dummy weights of a small shape whose
 * shards fall on the 128-element groups): INT4 (weight-only) gives the same
 * logits sharded; FP8 W8A8 rounds each row-parallel layer's activations with
 * the amax of the rank's columns (as vLLM does), not of the whole row, so it
 * is held to the activation rounding's scale instead.
 * (The sharded engine against the HF/peft float64 fixtures: tests/golden
 * with LG_GENERATE_EXTRA="--tensor-parallel-size 2".)
 */
#include "engine/runtime/engine.h"
#include "tests/unit/test.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define FIX "tests/golden/lora_fixtures/"
#define NREQ 8
#define MAXTOK 12

static const char *ADAPTERS[] = {"r8_rslora_attn", "r16_all_linear", "r1_qv", "r64_mlp"};
#define N_AD 4

typedef struct treq {
    int adapter; /* 0 base, else ADAPTERS[adapter - 1], or -k: synthetic k */
    const char *tenant;
    int32_t prompt[64];
    int n_prompt;
    int n_tok, n_fin;
    int32_t toks[MAXTOK];
    float *logits;
    int n_vocab;
    lg_usage usage;
    lg_finish_reason reason;
} treq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    (void)id;
    treq *t = user;
    if (t->n_tok < MAXTOK)
        t->toks[t->n_tok] = o->token;
    t->n_tok++;
    if (o->logits && !t->logits) {
        t->logits = malloc((size_t)o->n_vocab * sizeof(float));
        memcpy(t->logits, o->logits, (size_t)o->n_vocab * sizeof(float));
        t->n_vocab = o->n_vocab;
    }
}

static void on_finish(void *user, int64_t id, lg_finish_reason r, const lg_usage *u, const char *error)
{
    (void)id;
    (void)error;
    treq *t = user;
    t->n_fin++;
    t->usage = *u;
    t->reason = r;
}

static lg_engine *mk(lg_backend *const *bes, int tp, const lg_weights *w, int *ids, int *synth, lg_err *err)
{
    lg_engine_opts o = {
        .model = {.max_step_tokens = 256, .max_seqs = 16, .page_tokens = 16, .max_context = 128, .lora_max_rank = 64},
        .n_pages = 200,
        .prefix_sharing = LG_PREFIX_TENANT,
        .tp_size = tp,
        .tp_backends = bes,
    };
    lg_engine *e = NULL;
    if (lg_engine_create(bes[0], w, &o, &e, err) != 0)
        return NULL;
    for (int i = 0; i < N_AD; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "%s", ADAPTERS[i]);
        CHECK_MSG(lg_engine_add_adapter(e, ADAPTERS[i], dir, &ids[i], err) == 0, "%s: %s", dir, err->msg);
    }
    for (int k = 0; k < 2; k++) {
        lg_synth_adapter s = {.rank = 8 << k, .targets = k ? 0x7Fu : 0x49u, .seed = 77u + (unsigned)k};
        char name[16];
        snprintf(name, sizeof name, "synth%d", k);
        CHECK_MSG(lg_engine_add_synthetic_adapter(e, name, &s, &synth[k], err) == 0, "%s", err->msg);
    }
    return e;
}

static void run(lg_engine *e, const int *ids, const int *synth, treq *rq, int n)
{
    lg_err err = {{0}};
    for (int i = 0; i < n; i++) {
        treq *t = &rq[i];
        lg_request_params p = {
            .prompt = t->prompt, .n_prompt = t->n_prompt, .max_tokens = MAXTOK, .sampling = {.temperature = 0, .top_p = 1},
            .ignore_eos = true, .want_first_logits = true, .tenant = t->tenant,
            .adapter_id = t->adapter > 0 ? ids[t->adapter - 1] : t->adapter < 0 ? synth[-t->adapter - 1] : 0,
            .cb = {on_token, on_finish}, .user = t,
        };
        int64_t id;
        CHECK_MSG(lg_engine_submit(e, &p, &id, &err) == 0, "submit: %s", err.msg);
    }
    for (int guard = 0; lg_engine_busy(e) && guard < 100000; guard++) {
        int rc = lg_engine_step(e, &err);
        CHECK_MSG(rc >= 0, "step: %s", err.msg);
        if (rc == 0)
            lg_engine_wait(e, 0.002);
    }
}

static double rel_l2(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void make_batch(treq *rq)
{
    uint64_t s = 12345;
    const int adapters[NREQ] = {0, 1, 2, 3, 4, -1, -2, 2};
    for (int i = 0; i < NREQ; i++) {
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].adapter = adapters[i];
        rq[i].tenant = i % 2 ? "t1" : "t2";
        rq[i].n_prompt = 20 + 3 * i;
        for (int k = 0; k < rq[i].n_prompt; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            rq[i].prompt[k] = (int32_t)((s >> 33) % 300) + 3;
        }
    }
    /* the last one repeats request 2 (same adapter, tenant and prompt): served from the prefix cache when it runs
     * after it; here it runs in a second batch */
    rq[NREQ - 1] = rq[2];
    rq[NREQ - 1].tenant = rq[2].tenant;
}

int main(void)
{
    lg_err err = {{0}};
    lg_load_opts lo = {0};
    lg_weights *w = NULL;
    if (lg_weights_load(FIX "base", &lo, &w, &err) != 0) {
        fprintf(stderr, "cannot load the tiny model: %s\n", err.msg);
        return 1;
    }
    lg_backend *b1 = NULL, *bt[2] = {NULL, NULL};
    lg_backend_opts bo = {.n_threads = 1};
    if (lg_backend_create("cpu", &bo, &b1, &err) || lg_backend_create("cpu", &bo, &bt[0], &err) ||
        lg_backend_create("cpu", &bo, &bt[1], &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    int ids1[N_AD], ids2[N_AD], syn1[2], syn2[2];
    lg_backend *one[1] = {b1};
    lg_engine *e1 = mk(one, 1, w, ids1, syn1, &err);
    CHECK_MSG(e1 != NULL, "tp 1: %s", err.msg);
    lg_engine *e2 = mk(bt, 2, w, ids2, syn2, &err);
    CHECK_MSG(e2 != NULL, "tp 2: %s", err.msg);
    if (!e1 || !e2)
        TEST_DONE();
    treq r1[NREQ], r2[NREQ];
    make_batch(r1);
    make_batch(r2);
    run(e1, ids1, syn1, r1, NREQ - 1);
    run(e1, ids1, syn1, r1 + NREQ - 1, 1);
    run(e2, ids2, syn2, r2, NREQ - 1);
    run(e2, ids2, syn2, r2 + NREQ - 1, 1);
    for (int i = 0; i < NREQ; i++) {
        CHECK_MSG(r1[i].n_fin == 1 && r2[i].n_fin == 1 && r2[i].reason == LG_FINISH_LENGTH, "request %d finished %d/%d",
                  i, r1[i].n_fin, r2[i].n_fin);
        CHECK_MSG(r1[i].logits && r2[i].logits && r1[i].n_vocab == r2[i].n_vocab, "request %d: no logits", i);
        if (r1[i].logits && r2[i].logits) {
            double d = rel_l2(r2[i].logits, r1[i].logits, r1[i].n_vocab);
            CHECK_MSG(d < 1e-5, "request %d (adapter %d): tp 2 logits differ from tp 1 by %.3g", i, r1[i].adapter, d);
        }
        CHECK_MSG(r1[i].n_tok == MAXTOK && r2[i].n_tok == MAXTOK &&
                      !memcmp(r1[i].toks, r2[i].toks, sizeof r1[i].toks),
                  "request %d (adapter %d): greedy tokens differ", i, r1[i].adapter);
        CHECK_MSG(r1[i].usage.cached_tokens == r2[i].usage.cached_tokens, "request %d: cached %d vs %d", i,
                  r1[i].usage.cached_tokens, r2[i].usage.cached_tokens);
        free(r1[i].logits);
        free(r2[i].logits);
    }
    CHECK_MSG(r2[NREQ - 1].usage.cached_tokens > 0, "the repeat was not served from the prefix cache (%d)",
              r2[NREQ - 1].usage.cached_tokens);
    lg_engine_free(e1);
    lg_engine_free(e2);
    lg_weights_free(w);

    /* quantized linear layers: dummy weights of a shape whose shards are whole 128-element groups */
    char dir[] = "/tmp/lg_tp_quant_XXXXXX";
    if (mkdtemp(dir)) {
        char cfgp[64];
        snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
        FILE *f = fopen(cfgp, "w");
        fputs("{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 256, "
              "\"intermediate_size\": 512, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
              "\"num_key_value_heads\": 2, \"vocab_size\": 320, \"max_position_embeddings\": 256, "
              "\"rms_norm_eps\": 1e-5, \"torch_dtype\": \"float32\", \"eos_token_id\": 2}\n", f);
        fclose(f);
        const lg_qtype qs[2] = {LG_QI4, LG_QF8_A8};
        const double tol[2] = {1e-5, 0.1}; /* W8A8: 0.033-0.049 measured (2026-11-28), the rounding noise itself */
        for (int k = 0; k < 2; k++) {
            lg_load_opts dq = {.dummy = true, .dummy_dtype = LG_F32, .dummy_seed = 5, .quantize = qs[k]};
            lg_weights *wd = NULL;
            if (lg_weights_load(dir, &dq, &wd, &err) != 0) {
                CHECK_MSG(0, "dummy %s: %s", lg_qtype_get(qs[k]).name, err.msg);
                continue;
            }
            lg_backend *q1[1] = {NULL}, *q2[2] = {NULL, NULL};
            lg_backend_create("cpu", &bo, &q1[0], &err);
            lg_backend_create("cpu", &bo, &q2[0], &err);
            lg_backend_create("cpu", &bo, &q2[1], &err);
            lg_engine_opts o = {.model = {.max_step_tokens = 256, .max_seqs = 16, .page_tokens = 16, .max_context = 128},
                                .n_pages = 64};
            lg_engine *ea = NULL, *eb = NULL;
            CHECK_MSG(lg_engine_create(q1[0], wd, &o, &ea, &err) == 0, "tp 1 %s: %s", lg_qtype_get(qs[k]).name, err.msg);
            o.tp_size = 2;
            o.tp_backends = q2;
            CHECK_MSG(lg_engine_create(q2[0], wd, &o, &eb, &err) == 0, "tp 2 %s: %s", lg_qtype_get(qs[k]).name, err.msg);
            if (ea && eb) {
                treq qa[3], qb[3];
                for (int i = 0; i < 3; i++) {
                    memset(&qa[i], 0, sizeof qa[i]);
                    qa[i].tenant = "q";
                    qa[i].n_prompt = 10 + 7 * i;
                    for (int t = 0; t < qa[i].n_prompt; t++) qa[i].prompt[t] = (int32_t)(3 + (t * 37 + i * 11) % 300);
                    qb[i] = qa[i];
                }
                run(ea, NULL, NULL, qa, 3);
                run(eb, NULL, NULL, qb, 3);
                for (int i = 0; i < 3; i++) {
                    double d = qa[i].logits && qb[i].logits ? rel_l2(qb[i].logits, qa[i].logits, qa[i].n_vocab) : 1;
                    printf("%s: request %d: tp 2 vs tp 1 logits rel. L2 %.3g\n", lg_qtype_get(qs[k]).name, i, d);
                    CHECK_MSG(d < tol[k], "%s request %d: tp 2 logits differ from tp 1 by %.3g", lg_qtype_get(qs[k]).name,
                              i, d);
                    free(qa[i].logits);
                    free(qb[i].logits);
                }
            }
            lg_engine_free(ea);
            lg_engine_free(eb);
            lg_backend_free(q1[0]);
            lg_backend_free(q2[0]);
            lg_backend_free(q2[1]);
            lg_weights_free(wd);
        }
        remove(cfgp);
        rmdir(dir);
    }

    /* refusals: 1 KV head over 2 ranks; a rank list that does not start with the engine's backend */
    lg_backend *bq[2] = {NULL, NULL};
    lg_backend_create("cpu", &bo, &bq[0], &err);
    lg_backend_create("cpu", &bo, &bq[1], &err);
    lg_weights *wq = NULL;
    if (lg_weights_load("tests/golden/fixtures/llama_mqa_f32_tied", &lo, &wq, &err) == 0) {
        lg_engine_opts o = {.model = {.max_step_tokens = 64, .max_seqs = 4, .max_context = 64}, .n_pages = 64,
                            .tp_size = 2, .tp_backends = bq};
        lg_engine *e = NULL;
        CHECK(lg_engine_create(bq[0], wq, &o, &e, &err) != 0 && strstr(err.msg, "KV heads"));
        o.tp_backends = (lg_backend *[2]){bq[1], bq[0]};
        CHECK(lg_engine_create(bq[0], wq, &o, &e, &err) != 0 && strstr(err.msg, "tp_backends[0]"));
        lg_weights_free(wq);
    } else {
        CHECK_MSG(0, "mqa fixture: %s", err.msg);
    }
    lg_backend_free(bq[0]);
    lg_backend_free(bq[1]);
    lg_backend_free(b1);
    lg_backend_free(bt[0]);
    lg_backend_free(bt[1]);
    TEST_DONE();
}
