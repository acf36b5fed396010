/*
 * test_engine_sampling_ext.c — what the engine adds for clients written for
 * vLLM and for evaluation harnesses: prompt logprobs, prompt-only requests,
 * the repetition penalty, min_tokens, stop token ids and ignore_eos. CPU
 * backend, the tiny Llama of tests/golden/lora_fixtures/base (vocab 320),
 * token ids. Run from the repository root.
 *
 * The outside reference is the CPU backend's own logits, read one position
 * at a time: a request for prompt[0 .. q + 1) with want_first_logits returns
 * the logits at position q (its last), and the test computes from them in
 * double what each feature must give:
 *   - prompt logprobs: log-softmax at prompt[q + 1] (within 2e-4: float
 *     logits of a different batch shape), its rank (1 + larger logits) and
 *     the top alternatives (ids, where no near-tie makes the order
 *     ambiguous). Every index 1 .. n - 1 exactly once, in order, before the
 *     first token; with chunked prefill (budget 16), a step's prompt rows
 *     capped (prompt_logit_rows 7), several such requests in one step, a
 *     prompt already in the prefix cache (cached_tokens 0: recomputed), a
 *     tiny pool that preempts, and prompt_only (max_tokens 0 with echo):
 *     finished LENGTH with 0 completion tokens and the whole prompt billed;
 *   - repetition penalty: each greedy token is the argmax of HF's
 *     RepetitionPenaltyLogitsProcessor (score < 0 ? score * p : score / p
 *     over the distinct tokens of prompt + output so far) applied to the
 *     reference logits of that position; the same seed gives the same
 *     tokens at temperature 1;
 *   - stop ids / EOS / ignore_eos / min_tokens (the model's EOS set, from
 *     the owner thread, to a token greedy decoding produces): greedy stops
 *     on it with STOP and lg_token_out.stop_token on that token only;
 *     ignore_eos runs on; min_tokens masks EOS and stop ids (each of the
 *     first min_tokens tokens is the argmax with them at -inf) and a stop
 *     token ends the request only after that.
 * All of it runs twice: the second time with speculative decoding (the
 * model as its own draft model), against the same reference rows.
 */
#include "engine/runtime/engine_internal.h"
#include "tests/unit/test.h"

#include <float.h>

#define FIX "tests/golden/lora_fixtures/"
#define CTX 256
#define V 320
#define MAXT 64

static lg_weights *g_w;
static lg_backend *g_be;

typedef struct treq {
    int64_t id;
    int n_fin, n_tok, n_stop_flags, stop_flag_at;
    int32_t toks[MAXT];
    lg_finish_reason reason;
    lg_usage usage;
    float first_logits[V];
    bool have_logits;
    /* prompt logprobs */
    int n_rows, bad_order, rows_after_token;
    lg_prompt_logprob rows[CTX];
} treq;

static void on_token(void *user, int64_t id, const lg_token_out *o)
{
    (void)id;
    treq *t = user;
    if (o->logits && !t->have_logits) {
        memcpy(t->first_logits, o->logits, sizeof t->first_logits);
        t->have_logits = true;
    }
    if (o->stop_token) {
        t->n_stop_flags++;
        t->stop_flag_at = t->n_tok;
    }
    if (t->n_tok < MAXT)
        t->toks[t->n_tok] = o->token;
    t->n_tok++;
}

static void on_finish(void *user, int64_t id, lg_finish_reason reason, const lg_usage *u, const char *error)
{
    (void)id, (void)error;
    treq *t = user;
    t->n_fin++;
    t->reason = reason;
    t->usage = *u;
}

static void on_plp(void *user, int64_t id, const lg_prompt_logprob *rows, int n)
{
    (void)id;
    treq *t = user;
    if (t->n_tok)
        t->rows_after_token++;
    for (int i = 0; i < n; i++) {
        if (rows[i].index != t->n_rows + 1)
            t->bad_order++;
        if (t->n_rows < CTX)
            t->rows[t->n_rows] = rows[i];
        t->n_rows++;
    }
}

static lg_spec_opts g_spec; /* speculative decoding of the engines mk makes (the reference's: off) */

/* With speculation on, e verified proposals and took some (the run exercised it). */
static void check_spec(lg_engine *e, const char *what)
{
    if (g_spec.mode == LG_SPEC_OFF)
        return;
    lg_engine_stats s;
    lg_engine_get_stats(e, &s);
    printf("%s, speculative: %lld proposed, %lld accepted\n", what, (long long)s.spec_proposed,
           (long long)s.spec_accepted);
    CHECK_MSG(s.spec_proposed > 0 && s.spec_accepted > 0, "%s: %lld proposed, %lld accepted", what,
              (long long)s.spec_proposed, (long long)s.spec_accepted);
}

static lg_engine *mk(int n_pages, int budget, int max_seqs, int plp_rows, lg_prefix_sharing sh)
{
    lg_err err = {{0}};
    lg_engine_opts o = {
        .model = {.max_step_tokens = budget, .max_seqs = max_seqs, .page_tokens = 16, .max_context = CTX,
                  .prompt_logit_rows = plp_rows},
        .n_pages = n_pages,
        .prefix_sharing = sh,
        .spec = g_spec,
    };
    lg_engine *e = NULL;
    int rc = lg_engine_create(g_be, g_w, &o, &e, &err);
    CHECK_MSG(rc == 0, "engine: %s", err.msg);
    if (rc)
        exit(1);
    return e;
}

static void run_idle(lg_engine *e)
{
    lg_err err = {{0}};
    for (int guard = 0; lg_engine_busy(e) && guard < 100000; guard++)
        CHECK_MSG(lg_engine_step(e, &err) >= 0, "step: %s", err.msg);
    CHECK(!lg_engine_busy(e));
}

static lg_request_params params(treq *t, const int32_t *p, int n, int max_tokens)
{
    memset(t, 0, sizeof *t);
    lg_request_params rp = {
        .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .sampling = {.temperature = 0, .top_p = 1},
        .cb = {on_token, on_finish, on_plp}, .user = t,
    };
    return rp;
}

static void submit(lg_engine *e, const lg_request_params *rp, treq *t)
{
    lg_err err = {{0}};
    CHECK_MSG(lg_engine_submit(e, rp, &t->id, &err) == 0, "submit: %s", err.msg);
}

static void prompt(int32_t *p, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((seed >> 8) % 300);
    }
}

/* The reference logits at position q of the token list p (positions 0 .. q computed, nothing cached). */
static lg_engine *g_ref;
static void ref_logits(const int32_t *p, int q, float *out)
{
    static treq t;
    lg_request_params rp = params(&t, p, q + 1, 1);
    rp.want_first_logits = true;
    rp.ignore_eos = true;
    submit(g_ref, &rp, &t);
    run_idle(g_ref);
    CHECK(t.have_logits);
    memcpy(out, t.first_logits, sizeof t.first_logits);
}

/* ---- prompt logprobs ---------------------------------------------------------------------------- */

/* t's rows against float64 log-softmax of the reference logits of every prompt position. */
static void check_rows(const treq *t, const int32_t *p, int n, int top, const char *what)
{
    CHECK_MSG(t->n_rows == n - 1 && t->bad_order == 0 && t->rows_after_token == 0,
              "%s: %d rows (want %d), %d out of order, %d after a token", what, t->n_rows, n - 1, t->bad_order,
              t->rows_after_token);
    float lg[V];
    double worst = 0;
    int bad_rank = 0, bad_top = 0;
    for (int k = 0; k < t->n_rows && k < n - 1; k++) {
        const lg_prompt_logprob *r = &t->rows[k];
        const int q = r->index - 1;
        ref_logits(p, q, lg);
        double mx = -DBL_MAX, z = 0;
        for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) z += exp((double)lg[i] - mx);
        const double lz = mx + log(z);
        const int32_t tok = p[r->index];
        double want = (double)lg[tok] - lz, d = fabs(want - (double)r->logprob);
        worst = d > worst ? d : worst;
        CHECK(r->token == tok);
        /* rank: 1 + logits larger than the token's, unless another logit is within 1e-5 of it */
        int rank = 1, near = 0;
        for (int i = 0; i < V; i++) {
            rank += lg[i] > lg[tok];
            near += i != tok && fabsf(lg[i] - lg[tok]) < 1e-5f;
        }
        if (!near && rank != r->rank)
            bad_rank++;
        /* the top alternatives: best logits, each value within tolerance, ids where no near-tie */
        CHECK(r->n_top == top);
        int32_t ids[LG_MAX_TOP_LOGPROBS];
        bool used[V] = {false};
        for (int j = 0; j < top; j++) {
            int b = -1;
            for (int i = 0; i < V; i++)
                if (!used[i] && (b < 0 || lg[i] > lg[b])) b = i;
            used[b] = true;
            ids[j] = b;
            double wv = (double)lg[b] - lz;
            if (fabs(wv - (double)r->top_logprobs[j]) > 2e-4)
                bad_top++;
        }
        for (int j = 0; j < top; j++) {
            bool ambiguous = false;
            for (int i = 0; i < V; i++)
                ambiguous |= i != ids[j] && fabsf(lg[i] - lg[ids[j]]) < 1e-5f;
            if (!ambiguous && r->top_ids[j] != ids[j])
                bad_top++;
        }
    }
    CHECK_MSG(worst < 2e-4, "%s: prompt logprob off by %g from the float64 reference", what, worst);
    CHECK_MSG(bad_rank == 0, "%s: %d ranks differ", what, bad_rank);
    CHECK_MSG(bad_top == 0, "%s: %d top alternatives differ", what, bad_top);
}

static void test_prompt_logprobs(void)
{
    enum { N1 = 61, N2 = 40, N3 = 23 };
    int32_t p1[N1], p2[N2], p3[N3];
    prompt(p1, N1, 11);
    prompt(p2, N2, 12);
    prompt(p3, N3, 13);
    /* chunked prefill (16-token budget), at most 7 prompt rows a step, three requests together */
    lg_engine *e = mk(200, 16, 4, 7, LG_PREFIX_TENANT);
    static treq a, b, c;
    lg_request_params ra = params(&a, p1, N1, 3), rb = params(&b, p2, N2, 2), rc = params(&c, p3, N3, 2);
    ra.prompt_logprobs = rb.prompt_logprobs = rc.prompt_logprobs = true;
    ra.prompt_top_logprobs = 5;
    rb.prompt_top_logprobs = 0;
    rc.prompt_top_logprobs = 20;
    rc.logprobs = true; /* and the generated tokens' */
    submit(e, &ra, &a);
    submit(e, &rb, &b);
    submit(e, &rc, &c);
    run_idle(e);
    CHECK(a.n_fin == 1 && a.reason == LG_FINISH_LENGTH && a.n_tok == 3 && a.usage.prompt_tokens == N1);
    check_rows(&a, p1, N1, 5, "chunked, 7 rows a step");
    check_rows(&b, p2, N2, 0, "no alternatives");
    check_rows(&c, p3, N3, 20, "20 alternatives");

    /* the prompt is in the prefix cache now (a's pages): a request asking prompt logprobs recomputes it
     * (cached_tokens 0) and gets the same rows; one without them is served from the cache */
    static treq d, f;
    lg_request_params rd = params(&d, p1, N1, 1), rf = params(&f, p1, N1, 1);
    rd.prompt_logprobs = true;
    rd.prompt_top_logprobs = 5;
    submit(e, &rf, &f);
    run_idle(e);
    CHECK_MSG(f.usage.cached_tokens == 48, "plain request over a cached prompt: cached %d", f.usage.cached_tokens);
    submit(e, &rd, &d);
    run_idle(e);
    CHECK_MSG(d.usage.cached_tokens == 0 && d.usage.prompt_tokens == N1, "cached %d prompt %d",
              d.usage.cached_tokens, d.usage.prompt_tokens);
    check_rows(&d, p1, N1, 5, "through the prefix cache");
    CHECK(d.toks[0] == a.toks[0]);

    /* prompt_only: the prompt and its rows, no token, LENGTH, the prompt billed */
    static treq g;
    lg_request_params rg = params(&g, p2, N2, 0);
    rg.prompt_logprobs = true;
    rg.prompt_top_logprobs = 1;
    rg.prompt_only = true;
    submit(e, &rg, &g);
    run_idle(e);
    CHECK_MSG(g.n_fin == 1 && g.reason == LG_FINISH_LENGTH && g.n_tok == 0 && g.usage.completion_tokens == 0 &&
                  g.usage.prompt_tokens == N2 && g.usage.t_first_token == 0,
              "prompt_only: fin %d reason %s tokens %d usage %d/%d", g.n_fin, lg_finish_reason_name(g.reason),
              g.n_tok, g.usage.prompt_tokens, g.usage.completion_tokens);
    check_rows(&g, p2, N2, 1, "prompt only");
    /* a one-token prompt has nothing to score */
    static treq h;
    lg_request_params rh = params(&h, p3, 1, 2);
    rh.prompt_logprobs = true;
    submit(e, &rh, &h);
    run_idle(e);
    CHECK(h.n_fin == 1 && h.n_rows == 0 && h.n_tok == 2);
    lg_engine_free(e);
}

/* A pool so small that a scoring request is preempted in the middle of its prompt: A (unscored, a prompt of
 * 15 pages) decodes into its 16th page while B scores its prompt in chunks; the 17-page pool runs dry and B,
 * admitted later, gives its pages back and is recomputed later (from the prefix cache below what it scored).
 * Each index still comes once, with the reference values, and the tokens equal an unpreempted run's. */
static void test_prompt_logprobs_preempted(void)
{
    enum { NA = 239, NB = 100, GA = 10, GB = 6 };
    int32_t pa[NA], pb[NB];
    prompt(pa, NA, 41);
    prompt(pb, NB, 42);
    static treq a, b, solo;
    lg_engine *e = mk(17, 32, 4, 9, LG_PREFIX_TENANT);
    lg_request_params ra = params(&a, pa, NA, GA), rb = params(&b, pb, NB, GB);
    ra.ignore_eos = rb.ignore_eos = true;
    rb.prompt_logprobs = true;
    rb.prompt_top_logprobs = 2;
    submit(e, &ra, &a);
    submit(e, &rb, &b);
    run_idle(e);
    lg_engine_stats st;
    lg_engine_get_stats(e, &st);
    CHECK_MSG(st.preemptions > 0, "the pool was meant to preempt");
    CHECK(a.n_fin == 1 && a.n_tok == GA && b.n_fin == 1 && b.n_tok == GB);
    CHECK(b.usage.prompt_tokens == NB && b.usage.cached_tokens == 0);
    check_rows(&b, pb, NB, 2, "preempted");
    lg_request_params rs = params(&solo, pb, NB, GB);
    rs.ignore_eos = true;
    submit(g_ref, &rs, &solo);
    run_idle(g_ref);
    CHECK(memcmp(solo.toks, b.toks, sizeof(int32_t) * GB) == 0);
    lg_engine_free(e);
}

/* ---- repetition penalty --------------------------------------------------------------------------- */

static void test_repetition_penalty(void)
{
    enum { N = 12, G = 16 };
    int32_t p[N + G];
    prompt(p, N, 21);
    lg_engine *e = mk(100, 64, 4, 0, LG_PREFIX_OFF);
    const float pens[] = {1.5f, 0.7f};
    for (int pi = 0; pi < 2; pi++) {
        const float pen = pens[pi];
        static treq t;
        lg_request_params rp = params(&t, p, N, G);
        rp.repetition_penalty = pen;
        rp.ignore_eos = true;
        submit(e, &rp, &t);
        run_idle(e);
        CHECK(t.n_tok == G);
        /* each token: the argmax of HF's formula over the prompt and the tokens before it */
        int32_t seq[N + G];
        memcpy(seq, p, sizeof(int32_t) * N);
        int bad = 0;
        float lg[V];
        for (int k = 0; k < G && k < t.n_tok; k++) {
            ref_logits(seq, N + k - 1, lg);
            bool seen[V] = {false};
            for (int i = 0; i < N + k; i++) seen[seq[i]] = true;
            double best = -DBL_MAX, chosen = 0;
            for (int i = 0; i < V; i++) {
                double l = lg[i];
                if (seen[i])
                    l = l < 0 ? l * pen : l / pen;
                if (l > best) best = l;
                if (i == t.toks[k]) chosen = l;
            }
            if (chosen < best - 1e-4)
                bad++;
            seq[N + k] = t.toks[k];
        }
        CHECK_MSG(bad == 0, "repetition_penalty %g: %d tokens are not HF's argmax", pen, bad);
    }
    /* sampled (so the whole row counts): each token is the draw of a sampler of the same seed over HF's
     * penalised reference row. The greedy tokens above hardly see the negative branch (the best logits are
     * positive); a prompt of 200 distinct ids (about every other token of the vocabulary is seen, half of
     * them with negative logits) at temperature 4 makes it count. */
    enum { NL = 200, GL = 40 };
    static int32_t wide[NL + GL];
    for (int i = 0; i < NL; i++) wide[i] = (int32_t)((i * 7 + 3) % V);
    for (int pi = 0; pi < 3; pi++) {
        const float pen = pi == 1 ? 0.5f : 2.0f;
        const int32_t *pp = pi == 2 ? wide : p;
        const int n = pi == 2 ? NL : N, gn = pi == 2 ? GL : G;
        static treq t;
        lg_request_params rp = params(&t, pp, n, gn);
        rp.repetition_penalty = pen;
        rp.ignore_eos = true;
        rp.sampling.temperature = pi == 2 ? 4.0f : 1.0f;
        rp.sampling.seed = 1234 + (uint64_t)pi;
        submit(e, &rp, &t);
        run_idle(e);
        lg_sampler *smp = lg_sampler_new(V, &rp.sampling);
        int32_t seq[NL + GL];
        memcpy(seq, pp, sizeof(int32_t) * n);
        int bad = 0;
        float lg[V];
        for (int k = 0; k < gn && k < t.n_tok; k++) {
            ref_logits(seq, n + k - 1, lg);
            bool seen[V] = {false};
            for (int i = 0; i < n + k; i++) seen[seq[i]] = true;
            for (int i = 0; i < V; i++)
                if (seen[i])
                    lg[i] = lg[i] < 0 ? lg[i] * pen : lg[i] / pen;
            bad += lg_sampler_sample(smp, lg) != t.toks[k];
            seq[n + k] = t.toks[k];
        }
        lg_sampler_free(smp);
        CHECK_MSG(t.n_tok == gn && bad == 0, "repetition_penalty %g, sampled: %d tokens differ from HF's row", pen,
                  bad);
    }
    /* the penalty changes the output (the test above is not vacuous), and a seed gives the same tokens */
    static treq plain, s1, s2;
    lg_request_params r0 = params(&plain, p, N, G);
    r0.ignore_eos = true;
    submit(e, &r0, &plain);
    lg_request_params r1 = params(&s1, p, N, G), r2 = params(&s2, p, N, G);
    r1.ignore_eos = r2.ignore_eos = true;
    r1.repetition_penalty = r2.repetition_penalty = 1.3f;
    r1.sampling.temperature = r2.sampling.temperature = 1.0f;
    r1.sampling.seed = r2.sampling.seed = 7;
    r1.logprobs = true;
    r1.top_logprobs = 3;
    submit(e, &r1, &s1);
    submit(e, &r2, &s2);
    run_idle(e);
    static treq pen;
    lg_request_params r3 = params(&pen, p, N, G);
    r3.ignore_eos = true;
    r3.repetition_penalty = 3.0f;
    submit(e, &r3, &pen);
    run_idle(e);
    CHECK(memcmp(plain.toks, pen.toks, sizeof(int32_t) * G) != 0);
    CHECK(s1.n_tok == G && s2.n_tok == G && memcmp(s1.toks, s2.toks, sizeof(int32_t) * G) == 0);
    /* a bad value is refused */
    static treq bad;
    lg_request_params rb = params(&bad, p, N, 2);
    rb.repetition_penalty = -1;
    lg_err err = {{0}};
    CHECK(lg_engine_submit(e, &rb, &bad.id, &err) != 0 && strstr(err.msg, "repetition_penalty"));
    check_spec(e, "repetition penalty");
    lg_engine_free(e);
}

/* ---- stop ids, EOS, ignore_eos, min_tokens -------------------------------------------------------------- */

static void test_stops(void)
{
    enum { N = 9, G = 12 };
    int32_t p[N + G];
    prompt(p, N, 31);
    lg_engine *e = mk(100, 64, 4, 0, LG_PREFIX_OFF);
    static treq base;
    lg_request_params r0 = params(&base, p, N, G);
    r0.ignore_eos = true;
    submit(e, &r0, &base);
    run_idle(e);
    CHECK(base.n_tok == G && base.n_stop_flags == 0);
    /* a token greedy decoding produces first at index 3 */
    int at = -1;
    for (int k = 3; k < G && at < 0; k++) {
        bool earlier = false;
        for (int i = 0; i < k; i++) earlier |= base.toks[i] == base.toks[k];
        if (!earlier) at = k;
    }
    CHECK(at >= 0);
    const int32_t T = base.toks[at];

    /* stop_ids: the request stops on it (STOP), flagged on that token only */
    static treq s;
    lg_request_params rs = params(&s, p, N, G);
    rs.ignore_eos = true;
    rs.stop_ids[0] = T;
    rs.n_stop_ids = 1;
    submit(e, &rs, &s);
    run_idle(e);
    CHECK_MSG(s.reason == LG_FINISH_STOP && s.n_tok == at + 1 && s.n_stop_flags == 1 && s.stop_flag_at == at,
              "stop id: reason %s, %d tokens (want %d), flags %d at %d", lg_finish_reason_name(s.reason), s.n_tok,
              at + 1, s.n_stop_flags, s.stop_flag_at);

    /* the same token as the model's EOS (set from the owner thread): STOP; ignore_eos runs on */
    e->cfg.eos_ids[0] = T;
    e->cfg.n_eos = 1;
    static treq eos, ign;
    lg_request_params re = params(&eos, p, N, G), ri = params(&ign, p, N, G);
    ri.ignore_eos = true;
    submit(e, &re, &eos);
    submit(e, &ri, &ign);
    run_idle(e);
    CHECK(eos.reason == LG_FINISH_STOP && eos.n_tok == at + 1 && eos.n_stop_flags == 1);
    CHECK(ign.reason == LG_FINISH_LENGTH && ign.n_tok == G && ign.n_stop_flags == 0 &&
          memcmp(ign.toks, base.toks, sizeof(int32_t) * G) == 0);

    /* min_tokens beyond `at`: EOS (and a stop id) masked until then; each early token is the masked argmax */
    const int32_t S2 = base.toks[0] == T ? base.toks[1] : base.toks[0];
    static treq m;
    lg_request_params rm = params(&m, p, N, G);
    rm.min_tokens = at + 2;
    rm.stop_ids[0] = S2;
    rm.n_stop_ids = 1;
    submit(e, &rm, &m);
    run_idle(e);
    int32_t seq[N + G];
    memcpy(seq, p, sizeof(int32_t) * N);
    int bad = 0, early_stop = 0;
    float lg[V];
    for (int k = 0; k < m.n_tok && k < G; k++) {
        if (k < rm.min_tokens) {
            ref_logits(seq, N + k - 1, lg);
            lg[T] = -INFINITY;
            lg[S2] = -INFINITY;
            int b = 0;
            for (int i = 1; i < V; i++)
                if (lg[i] > lg[b]) b = i;
            if (lg[m.toks[k]] < lg[b] - 1e-4f)
                bad++;
            early_stop += m.toks[k] == T || m.toks[k] == S2;
        }
        seq[N + k] = m.toks[k];
    }
    CHECK_MSG(bad == 0 && early_stop == 0, "min_tokens: %d tokens not the masked argmax, %d stop tokens early", bad,
              early_stop);
    CHECK(m.n_tok >= rm.min_tokens);
    CHECK(m.reason == LG_FINISH_LENGTH || (m.reason == LG_FINISH_STOP && m.stop_flag_at >= rm.min_tokens));
    CHECK(m.n_tok > at && m.toks[at] != T); /* the mask changed what greedy decoding gave */
    check_spec(e, "stops and min_tokens");
    lg_engine_free(e);
}

int main(void)
{
    lg_err err = {{0}};
    lg_load_opts lo = {0};
    if (lg_weights_load(FIX "base", &lo, &g_w, &err) != 0) {
        fprintf(stderr, "cannot load the tiny model: %s\n", err.msg);
        return 1;
    }
    lg_backend_opts bo = {.n_threads = 2};
    if (lg_backend_create("cpu", &bo, &g_be, &err) != 0) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    g_ref = mk(100, 256, 4, 0, LG_PREFIX_OFF);
    double t0 = lg_now();
    test_prompt_logprobs();
    test_prompt_logprobs_preempted();
    test_repetition_penalty();
    test_stops();
    /* again with speculative decoding, the model as its own draft (its greedy proposals, made without the
     * penalty, the min_tokens mask or the stop ids, are accepted or refused by the processed rows): the
     * same checks against the reference rows hold, and prompt logprobs share the step's rows with the
     * verifications */
    g_spec = (lg_spec_opts){.mode = LG_SPEC_DRAFT, .draft = g_w, .num_tokens = 3, .min_accept = -1};
    test_prompt_logprobs();
    test_prompt_logprobs_preempted();
    test_repetition_penalty();
    test_stops();
    g_spec = (lg_spec_opts){0};
    printf("%.1f s\n", lg_now() - t0);
    lg_engine_free(g_ref);
    lg_backend_free(g_be);
    lg_weights_free(g_w);
    TEST_DONE();
}
