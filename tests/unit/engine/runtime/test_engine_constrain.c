/*
 * test_engine_constrain.c — structured output in the engine: requests under
 * a grammar (lg_request_params.constraint) in batches with unconstrained
 * ones, on the CPU backend with the tiny Llama of
 * tests/golden/lora_fixtures/base (vocab 320), whose ids are given byte
 * strings here (lg_cvocab_from_bytes: digits, letters, punctuation, and
 * multi-byte tokens such as "ab", "12", "-x").
 *
 * The outside reference is the C library's POSIX extended regular
 * expressions (regcomp / regexec): every output of a request under a regex
 * (a grammar the engine compiles itself), sampled at temperature 1 with
 * many seeds, decoded through the same byte strings, matches the regex in
 * full when it finished with STOP, and is a prefix of a match (some
 * extension matches: checked by appending the shortest completion the
 * matcher offers and matching again) when it finished with LENGTH. Also:
 *   - a grammar that allows one string gives it (several tokenizations
 *     may spell it: a step whose mask holds one token takes it without
 *     sampling, and the tokens forced after a sampled one are appended at
 *     once; the engine counts exactly those), greedy gives the same tokens
 *     in fewer steps with the appending on than off, and the request stops
 *     when it is complete without needing EOS;
 *   - the same seed gives the same tokens with the masks applied by the
 *     host and by the backend's mask_logits slot (the CPU backend's device
 *     sampler, LG_CPU_DEVICE_SAMPLE=1);
 *   - an unconstrained greedy request gives the same tokens alone and in a
 *     step full of constrained ones;
 *   - min_tokens with a grammar that is complete early: the request ends
 *     once the grammar allows nothing but EOS (never an empty mask).
 */
#include "engine/runtime/engine_internal.h"
#include "tests/unit/test.h"

#include <regex.h>
#include <stdlib.h>

#define FIX "tests/golden/lora_fixtures/"
#define V 320
#define MAXT 96
#define EOS 2

static lg_weights *g_w;
static char *g_tok[V];
static uint32_t g_len[V];

typedef struct treq {
    int n_fin, n_tok;
    int32_t toks[MAXT];
    lg_finish_reason reason;
    char err[256];
} treq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    (void)id;
    treq *t = user;
    if (t->n_tok < MAXT)
        t->toks[t->n_tok] = o->token;
    t->n_tok++;
}

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    (void)id, (void)u;
    treq *t = user;
    t->n_fin++;
    t->reason = reason;
    snprintf(t->err, sizeof t->err, "%s", error ? error : "");
}

/* The vocabulary's byte strings: 0..2 special (2 is EOS), then single characters, then pairs. */
static void make_vocab(void)
{
    const char *singles = "0123456789abcdefghijklmnopqrstuvwxyz-_.:,{}[]\" ";
    int id = 3;
    for (const char *c = singles; *c && id < V; c++, id++) {
        g_tok[id] = strndup(c, 1);
        g_len[id] = 1;
    }
    const char *pairs[] = {"ab", "12", "-x", "ba", "00", "ca", "x1", "c-", "9a", "aa", "bb", "--", "1-"};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs && id < V; i++, id++) {
        g_tok[id] = strdup(pairs[i]);
        g_len[id] = 2;
    }
    for (; id < V; id++) { /* the rest: 3-character runs over a small alphabet */
        char s[4] = {"abc0123-x"[id % 9], "abc0123-x"[(id / 9) % 9], "abc0123-x"[(id / 81) % 9], 0};
        g_tok[id] = strdup(s);
        g_len[id] = 3;
    }
}

static lg_cvocab *vocab(void)
{
    bool special[V] = {true, true, true};
    const int32_t eos[] = {EOS};
    lg_cvocab *v = NULL;
    lg_err err = {{0}};
    int rc = lg_cvocab_from_bytes(V, (const char *const *)g_tok, g_len, special, eos, 1, &v, &err);
    CHECK_MSG(rc == 0, "vocab: %s", err.msg);
    return v;
}

static lg_constraint *compile(lg_cvocab *v, lg_ckind kind, const char *src)
{
    lg_copts o = {.kind = kind};
    lg_cerr ce = {0};
    lg_constraint *c = NULL;
    int rc = lg_constraint_compile(v, &o, src, strlen(src), &c, &ce);
    CHECK_MSG(rc == 0, "compile %s: %s", src, ce.msg);
    return c;
}

static lg_engine *mk(lg_backend *be, int max_seqs)
{
    lg_err err = {{0}};
    lg_engine_opts o = {.model = {.max_step_tokens = 256, .max_seqs = max_seqs, .page_tokens = 16, .max_context = 256},
                        .n_pages = 200, .prefix_sharing = LG_PREFIX_OFF};
    lg_engine *e = NULL;
    int rc = lg_engine_create(be, g_w, &o, &e, &err);
    CHECK_MSG(rc == 0, "engine: %s", err.msg);
    if (rc)
        exit(1);
    /* the tiny model's EOS is the grammar's */
    e->cfg.eos_ids[0] = EOS;
    e->cfg.n_eos = 1;
    return e;
}

static void run_idle(lg_engine *e)
{
    lg_err err = {{0}};
    for (int guard = 0; lg_engine_busy(e) && guard < 100000; guard++)
        CHECK_MSG(lg_engine_step(e, &err) >= 0, "step: %s", err.msg);
}

static void submit(lg_engine *e, treq *t, lg_constraint *c, float temp, uint64_t seed, int max_tokens, int min_tokens,
                   uint32_t pseed)
{
    int32_t p[12];
    for (int i = 0; i < 12; i++) {
        pseed = pseed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((pseed >> 8) % 300);
    }
    memset(t, 0, sizeof *t);
    lg_request_params rp = {.prompt = p, .n_prompt = 12, .max_tokens = max_tokens, .min_tokens = min_tokens,
                            .sampling = {.temperature = temp, .top_p = 1, .seed = seed}, .constraint = c,
                            .cb = {on_token, on_finish}, .user = t};
    lg_err err = {{0}};
    CHECK_MSG(lg_engine_submit(e, &rp, NULL, &err) == 0, "submit: %s", err.msg);
}

/* The text of t's tokens (EOS left out). */
static void text_of(const treq *t, char *out, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i < t->n_tok && i < MAXT; i++) {
        if (t->toks[i] == EOS)
            break;
        for (uint32_t k = 0; k < g_len[t->toks[i]] && n + 1 < cap; k++) out[n++] = g_tok[t->toks[i]][k];
    }
    out[n] = 0;
}

static bool full_match(const char *re, const char *s)
{
    char anchored[512];
    snprintf(anchored, sizeof anchored, "^(%s)$", re);
    regex_t rx;
    if (regcomp(&rx, anchored, REG_EXTENDED | REG_NOSUB) != 0)
        return false;
    bool ok = regexec(&rx, s, 0, NULL, 0) == 0;
    regfree(&rx);
    return ok;
}

static const char *const REGEXES[] = {
    "[a-c]{2,4}-[0-9]+",
    "(ab|ba)+x?1",
    "[0-9]{3}:[a-z]{2}",
    "(a|b|c)*c-(0|1)",
    "x[0-9a]{1,5}(\\.[0-9]{1,2})?",
};

static void test_regex_outputs(lg_engine *e, lg_cvocab *v)
{
    enum { N = 12 };
    int checked = 0, stopped = 0;
    for (size_t ri = 0; ri < sizeof REGEXES / sizeof *REGEXES; ri++) {
        lg_constraint *c = compile(v, LG_CK_REGEX, REGEXES[ri]);
        if (!c)
            continue;
        static treq t[N], plain;
        for (int k = 0; k < N; k++)
            submit(e, &t[k], c, 1.0f, 1000 * ri + k, 40, 0, 7 + k);
        submit(e, &plain, NULL, 1.0f, 5, 20, 0, 99); /* shares the steps */
        run_idle(e);
        CHECK(plain.n_fin == 1 && plain.reason != LG_FINISH_ERROR);
        for (int k = 0; k < N; k++) {
            char s[512];
            text_of(&t[k], s, sizeof s);
            CHECK_MSG(t[k].n_fin == 1 && t[k].reason != LG_FINISH_ERROR, "regex %s: finish %d %s", REGEXES[ri],
                      t[k].reason, t[k].err);
            if (t[k].reason == LG_FINISH_STOP) {
                stopped++;
                CHECK_MSG(full_match(REGEXES[ri], s), "regex %s: output '%s' does not match", REGEXES[ri], s);
            } else {
                /* a prefix of a match: the matcher's shortest completion makes it one */
                lg_cmatch *m = lg_cmatch_new(c);
                lg_err err = {{0}};
                CHECK(lg_cmatch_advance_bytes(m, s, strlen(s), &err) == 0);
                char comp[256];
                long n = lg_cmatch_shortest_completion(m, comp, sizeof comp - 1);
                CHECK_MSG(n >= 0, "regex %s: no completion of '%s'", REGEXES[ri], s);
                if (n >= 0) {
                    comp[n] = 0;
                    char both[768];
                    snprintf(both, sizeof both, "%s%s", s, comp);
                    CHECK_MSG(full_match(REGEXES[ri], both), "regex %s: '%s' + '%s' does not match", REGEXES[ri], s,
                              comp);
                }
                lg_cmatch_free(m);
            }
            checked++;
        }
        lg_constraint_unref(c);
    }
    CHECK_MSG(stopped > checked / 2, "only %d of %d outputs finished", stopped, checked);
}

static void test_forced(lg_engine *e, lg_cvocab *v)
{
    lg_constraint *c = compile(v, LG_CK_CHOICE, "[\"abc-x12:9\"]");
    if (!c)
        return;
    static treq t;
    lg_engine_stats s0, s1;
    lg_engine_get_stats(e, &s0);
    submit(e, &t, c, 1.0f, 3, 60, 0, 11);
    run_idle(e);
    lg_engine_get_stats(e, &s1);
    char s[128];
    text_of(&t, s, sizeof s);
    CHECK_MSG(!strcmp(s, "abc-x12:9") && t.reason == LG_FINISH_STOP, "choice gave '%s' (finish %d: %s)", s, t.reason,
              t.err);
    /* the steps whose mask held one token (replayed through a fresh matcher) were taken without sampling,
     * and the request ended without an EOS */
    lg_cmatch *m = lg_cmatch_new(c);
    uint32_t mask[(V + 31) / 32];
    int single = 0;
    lg_err err = {{0}};
    for (int i = 0; i < t.n_tok; i++) {
        single += lg_cmatch_mask(m, mask, (V + 31) / 32, &err) == 1;
        CHECK(lg_cmatch_advance(m, t.toks[i], &err) == 0);
    }
    lg_cmatch_free(m);
    const long long forced = s1.forced_tokens - s0.forced_tokens, ff = s1.fast_forward_tokens - s0.fast_forward_tokens;
    CHECK_MSG(single > 0 && forced + ff == single && ff > 0, "forced %lld + appended %lld, single-token masks %d",
              forced, ff, single);
    CHECK(t.n_tok > 0 && t.toks[t.n_tok - 1] != EOS);
    /* greedy: the same tokens with the forced ones appended at once and each in its own step, in fewer steps */
    static treq g[2];
    int64_t steps[2];
    for (int k = 0; k < 2; k++) {
        e->fast_forward = k == 0;
        lg_engine_get_stats(e, &s0);
        submit(e, &g[k], c, 0.0f, 1, 60, 0, 11);
        run_idle(e);
        lg_engine_get_stats(e, &s1);
        steps[k] = s1.steps - s0.steps;
    }
    e->fast_forward = true;
    CHECK(g[0].n_tok == g[1].n_tok && !memcmp(g[0].toks, g[1].toks, sizeof(int32_t) * (size_t)g[0].n_tok));
    CHECK_MSG(steps[0] < steps[1], "steps with fast-forward %lld, without %lld", (long long)steps[0],
              (long long)steps[1]);
    lg_constraint_unref(c);
}

static void test_min_tokens(lg_engine *e, lg_cvocab *v)
{
    lg_constraint *c = compile(v, LG_CK_REGEX, "ab");
    if (!c)
        return;
    static treq t;
    submit(e, &t, c, 1.0f, 9, 30, 10, 13);
    run_idle(e);
    char s[128];
    text_of(&t, s, sizeof s);
    CHECK_MSG(t.reason == LG_FINISH_STOP && !strcmp(s, "ab"), "min_tokens: '%s' finish %d %s", s, t.reason, t.err);
    lg_constraint_unref(c);
}

/* the same tokens whether the host or the backend's mask_logits masks the rows */
static void test_device_masks(lg_cvocab *v, treq *host_out, int n)
{
    setenv("LG_CPU_DEVICE_SAMPLE", "1", 1);
    lg_backend *be = NULL;
    lg_err err = {{0}};
    lg_backend_opts bo = {.n_threads = 2};
    CHECK(lg_backend_create("cpu", &bo, &be, &err) == 0);
    unsetenv("LG_CPU_DEVICE_SAMPLE");
    CHECK(be->i.mask_logits != NULL);
    lg_engine *e = mk(be, 16);
    CHECK(e->dev_mask);
    lg_constraint *c = compile(v, LG_CK_REGEX, REGEXES[0]);
    static treq t[16];
    for (int k = 0; k < n; k++)
        submit(e, &t[k], c, 1.0f, 77 + k, 40, 0, 21 + k);
    run_idle(e);
    lg_engine_stats st;
    lg_engine_get_stats(e, &st);
    CHECK(st.constrained_rows > 0);
    for (int k = 0; k < n; k++)
        CHECK_MSG(t[k].n_tok == host_out[k].n_tok &&
                      !memcmp(t[k].toks, host_out[k].toks, sizeof(int32_t) * (size_t)(t[k].n_tok < MAXT ? t[k].n_tok : MAXT)),
                  "request %d: device masks gave other tokens", k);
    lg_constraint_unref(c);
    lg_engine_free(e);
    lg_backend_free(be);
}

static void test_batch_invariance(lg_engine *e, lg_cvocab *v)
{
    static treq alone, mixed, t[8];
    submit(e, &alone, NULL, 0.0f, 1, 24, 0, 55);
    run_idle(e);
    lg_constraint *c = compile(v, LG_CK_REGEX, REGEXES[1]);
    for (int k = 0; k < 8; k++)
        submit(e, &t[k], c, 1.0f, 300 + k, 30, 0, 60 + k);
    submit(e, &mixed, NULL, 0.0f, 1, 24, 0, 55);
    run_idle(e);
    CHECK(alone.n_tok == mixed.n_tok && !memcmp(alone.toks, mixed.toks, sizeof(int32_t) * (size_t)alone.n_tok));
    lg_constraint_unref(c);
}

int main(void)
{
    lg_err err = {{0}};
    lg_load_opts lo = {0};
    if (lg_weights_load(FIX "base", &lo, &g_w, &err) != 0) {
        fprintf(stderr, "cannot load the tiny model: %s\n", err.msg);
        return 1;
    }
    make_vocab();
    lg_cvocab *v = vocab();
    lg_backend *be = NULL;
    lg_backend_opts bo = {.n_threads = 2};
    if (!v || lg_backend_create("cpu", &bo, &be, &err) != 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    lg_engine *e = mk(be, 16);
    test_regex_outputs(e, v);
    test_forced(e, v);
    test_min_tokens(e, v);
    test_batch_invariance(e, v);
    /* the host path's tokens for test_device_masks */
    lg_constraint *c = compile(v, LG_CK_REGEX, REGEXES[0]);
    static treq host[8];
    for (int k = 0; k < 8; k++)
        submit(e, &host[k], c, 1.0f, 77 + k, 40, 0, 21 + k);
    run_idle(e);
    lg_constraint_unref(c);
    lg_engine_free(e);
    test_device_masks(v, host, 8);
    lg_cvocab_free(v);
    lg_backend_free(be);
    lg_weights_free(g_w);
    for (int i = 0; i < V; i++) free(g_tok[i]);
    TEST_DONE();
}
