/*
 * speculate.c — speculative decoding: what a decoding sequence proposes,
 * and when it proposes at all. The verification itself (which proposed
 * tokens are taken) runs where tokens are sampled (engine.c,
 * verify_proposals); the scheduler gives a sequence with proposals a chunk
 * of 1 + k tokens (scheduler.c).
 *
 * Proposals (prompt lookup, "n-gram"). A sequence whose last L tokens
 * (ngram_max >= L >= ngram_min, longest first) occurred earlier in its own
 * prompt or output proposes the (up to) K tokens that followed their
 * latest earlier occurrence. No model runs; a search costs O(n x L) token
 * compares, done on the host while nothing else waits for it (at 4K tokens
 * well under the step's time). Under structured output the proposal is cut
 * at the first token the grammar refuses (lg_cmatch_accepts / advance,
 * rolled back after), so no verification row is spent on a token the mask
 * would remove.
 *
 * Verification (engine.c). The step computes the chunk [last token, d_1 ..
 * d_k] and returns logits at all k + 1 positions (the last one as a
 * sequence's usual logits row, the k before it as lg_step_seq lp_first /
 * lp_count rows, the rows prompt logprobs use). Position i's row is
 * processed exactly as a decode step's (penalties over the tokens so far,
 * min_tokens, the grammar's mask at the matcher's state so far) and a token
 * t_i is drawn from it with the request's next uniform, as without
 * speculation; d_i is accepted when t_i == d_i, and the first t_i that
 * differs (or t_k after k acceptances, the bonus token) is the step's last.
 * This is the rejection rule of Leviathan et al. / Chen et al. for a
 * deterministic proposal (q = a point mass at d): P(accept) = p(d_i), and
 * a rejected position's token is distributed as p with d_i removed and
 * renormalised. Because t_i is drawn with the uniform the request would
 * have used without speculation, the output is the same token for token,
 * greedy or sampled with a seed (up to the arithmetic of a k + 1 token
 * chunk against one token at a time), and no second uniform stream is
 * needed. Only emitted tokens draw uniforms.
 *
 * The per-step policy ("only where it pays"). Verifying k tokens costs a
 * chunk of k + 1 rows: nearly free while a step is bound by reading the
 * weights (small batches), not once it is bound by compute. So: no
 * speculation when more than max_batch sequences decode, at most
 * max_tokens verified rows a step (k = max_tokens / n_decode - 1, at most
 * K), and a sequence whose recent acceptance rate (an exponential average,
 * weight 1/4 a step) falls below min_accept stops proposing for 1, 2, 4 ..
 * 64 of its steps, then tries again. A sequence with no match proposes
 * nothing (costs nothing).
 *
 * Draft model (LG_SPEC_DRAFT). A small model with the target's vocabulary
 * proposes greedily: a second lg_model on the same backend, base weights
 * only (the target verifies with the request's adapter), with its own KV
 * page pool. A request's draft KV covers tokens[0, d_computed): before
 * proposing, the tokens it lacks are run as one chunk (the whole prompt the
 * first time, after that the tokens the last verification accepted), then
 * k - 1 one-token steps extend the proposal. KV written for proposals lies
 * beyond d_computed and is overwritten later, as the target's. The draft
 * runs one sequence at a time, at most k + 1 small steps per sequence and
 * step; its pages come from free ones only (a dry draft pool: no
 * proposal), and go back with the request's (lg_spec_release). A draft's
 * proposal is a deterministic function of the sequence, so the same
 * verification rule holds.
 *
 * Decode bursts (engine.c) do not start while the policy lets sequences
 * propose: a burst's steps are planned without proposals.
 *
 * Limits: the draft model runs sequence by sequence (not batched across
 * sequences); the verification rows are sampled on the host from
 * downloaded logits, and such steps run eagerly (no graph, no decode
 * burst).
 */
#include "engine/runtime/engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *lg_spec_mode_name(lg_spec_mode m)
{
    return m == LG_SPEC_NGRAM ? "ngram" : m == LG_SPEC_DRAFT ? "draft" : "off";
}

int lg_spec_mode_parse(const char *s, lg_spec_mode *out)
{
    if (!strcmp(s, "off")) *out = LG_SPEC_OFF;
    else if (!strcmp(s, "ngram")) *out = LG_SPEC_NGRAM;
    else if (!strcmp(s, "draft")) *out = LG_SPEC_DRAFT;
    else return -1;
    return 0;
}

#define SPEC_MAX_K 16 /* most proposed tokens a step */
#define SPEC_MAX_PAUSE 64

int lg_spec_init(lg_engine *e, const lg_spec_opts *o, int n_pages, lg_err *err)
{
    lg_spec_opts s = *o;
    if (s.num_tokens <= 0) s.num_tokens = 4;
    if (s.num_tokens > SPEC_MAX_K) s.num_tokens = SPEC_MAX_K;
    if (s.ngram_min <= 0) s.ngram_min = 2;
    if (s.ngram_max <= 0) s.ngram_max = s.ngram_min > 4 ? s.ngram_min : 4;
    if (s.ngram_max < s.ngram_min) s.ngram_max = s.ngram_min;
    if (s.max_batch <= 0) s.max_batch = 16;
    if (s.max_tokens <= 0) s.max_tokens = 64;
    if (s.min_accept == 0) s.min_accept = 0.3f;
    if (s.bench_accept_on && !(s.bench_accept >= 0 && s.bench_accept <= 1)) s.bench_accept_on = false;
    s.draft = NULL; /* the engine keeps its own copy on the backend */
    e->spec = s;
    if (s.mode != LG_SPEC_DRAFT)
        return 0;
    if (!o->draft)
        return lg_fail(err, "speculative decoding with a draft model needs the draft model's weights");
    const lg_model_config *dc = lg_weights_config(o->draft);
    if (dc->vocab_size != e->cfg.vocab_size)
        return lg_fail(err, "the draft model's vocabulary has %d tokens, the model's %d: they must be the same",
                       dc->vocab_size, e->cfg.vocab_size);
    lg_model_opts mo = {.max_step_tokens = e->budget, .max_seqs = 1, .page_tokens = e->page_tokens,
                        .max_context = e->max_context, .prompt_logit_rows = 1,
                        .kv_fp8 = lg_model_options(e->model)->kv_fp8};
    if (lg_model_create(e->be, o->draft, &mo, &e->draft, err) != 0) {
        lg_err_prefix(err, "the draft model");
        return -1;
    }
    if (lg_model_options(e->draft)->max_context < e->max_context)
        return lg_fail(err, "the draft model's context (%d) is shorter than the model's (%d)",
                       lg_model_options(e->draft)->max_context, e->max_context);
    size_t pb = (lg_model_kv_page_bytes(e->draft) + 255) & ~(size_t)255;
    if (lg_page_pool_create(e->be, pb, n_pages, &e->dpool, err) != 0) {
        lg_err_prefix(err, "the draft model's page pool (%d pages of %zu bytes)", n_pages, pb);
        return -1;
    }
    e->dlogits = malloc((size_t)e->cfg.vocab_size * sizeof *e->dlogits);
    return e->dlogits ? 0 : lg_fail(err, "out of memory");
}

void lg_spec_free(lg_engine *e)
{
    lg_page_pool_free(e->dpool);
    lg_model_free(e->draft);
    free(e->dlogits);
    e->dpool = NULL;
    e->draft = NULL;
    e->dlogits = NULL;
}

void lg_spec_release(lg_engine *e, request *r)
{
    if (r->n_dpages)
        lg_page_pool_release(e->dpool, r->dpages, r->n_dpages);
    r->n_dpages = r->d_computed = 0;
}

/* One draft-model step of r: tokens[pos, pos + n) (their KV into r's draft pages), and with want the
 * argmax of the logits after the last into *tok. 0, or -1 (then no proposal). */
static int draft_step(lg_engine *e, request *r, int pos, int n, bool want, int32_t *tok)
{
    lg_err err = {{0}};
    const lg_step_seq q = {.tokens = r->tokens + pos, .n_tokens = n, .pos0 = pos, .pages = r->dpages,
                           .n_pages = r->n_dpages, .want_logits = want};
    if (lg_model_launch(e->draft, e->dpool, &q, 1, NULL, NULL, 0, false, false, want, NULL, &err) != 0 ||
        lg_model_collect(e->draft, NULL, NULL, want ? e->dlogits : NULL, NULL, &err) != 0) {
        lg_log("loragate engine: the draft model's step failed: %s", err.msg);
        return -1;
    }
    if (want)
        *tok = lg_argmax(e->dlogits, e->cfg.vocab_size);
    return 0;
}

/* The draft model's greedy proposal of up to k tokens after r's tokens, into tokens[n_tokens, ...). */
static int draft_propose(lg_engine *e, request *r, int k)
{
    const int P = e->page_tokens, upto = r->n_tokens + k - 1; /* positions that get draft KV */
    const int need = (upto + P - 1) / P - r->n_dpages;
    if (need > 0) {
        if (lg_page_pool_n_available(e->dpool) < need ||
            lg_page_pool_alloc(e->dpool, LG_PAGE_KV, need, r->dpages + r->n_dpages) != 0)
            return 0;
        r->n_dpages += need;
    }
    int32_t *d = r->tokens + r->n_tokens;
    if (r->d_computed >= r->n_tokens)
        r->d_computed = r->n_tokens - 1; /* the logits after the last token are needed */
    while (r->d_computed < r->n_tokens) { /* what the draft has not seen, in chunks of the step budget */
        int c = r->n_tokens - r->d_computed;
        if (c > e->budget) c = e->budget;
        const bool last = r->d_computed + c == r->n_tokens;
        if (draft_step(e, r, r->d_computed, c, last, d) != 0)
            return 0;
        r->d_computed += c;
    }
    int n = 1;
    for (; n < k; n++)
        if (draft_step(e, r, r->n_tokens + n - 1, 1, true, d + n) != 0)
            break;
    return n;
}

void lg_spec_plan(lg_engine *e, int n_decode)
{
    e->spec_k = 0;
    if (e->spec.mode == LG_SPEC_OFF || n_decode <= 0)
        return;
    if (n_decode > e->spec.max_batch) {
        e->stats.spec_batch_off_steps++;
        return;
    }
    int k = e->spec.max_tokens / n_decode - 1;
    int kb = (e->budget - n_decode) / n_decode; /* the step's token budget */
    if (k > kb) k = kb;
    if (k > e->spec.num_tokens) k = e->spec.num_tokens;
    e->spec_k = k > 0 ? k : 0;
}

int lg_ngram_propose(const int32_t *toks, int n, int nmin, int nmax, int k, int32_t *out)
{
    if (k <= 0)
        return 0;
    for (int L = nmax < n - 1 ? nmax : n - 1; L >= nmin && L >= 1; L--) {
        const int32_t *suf = toks + n - L;
        for (int j = n - L - 1; j >= 0; j--) { /* latest occurrence first; toks[j + L] follows it */
            if (toks[j] != suf[0] || memcmp(toks + j, suf, (size_t)L * sizeof *toks) != 0)
                continue;
            int m = 0;
            while (m < k && j + L + m < n) {
                out[m] = toks[j + L + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

int lg_spec_propose(lg_engine *e, request *r, int kmax)
{
    if (kmax <= 0 || e->spec.mode == LG_SPEC_OFF)
        return 0;
    if (r->spec_pause > 0) {
        r->spec_pause--;
        return 0;
    }
    int room = r->max_total - r->n_tokens - 1; /* the step emits up to k + 1 tokens */
    int k = kmax < room ? kmax : room;
    if (k <= 0)
        return 0;
    int32_t *d = r->tokens + r->n_tokens; /* capacity: max_total */
    int n = e->draft ? draft_propose(e, r, k)
                     : lg_ngram_propose(r->tokens, r->n_tokens, e->spec.ngram_min, e->spec.ngram_max, k, d);
    if (e->spec.bench_accept_on)
        for (; n < k; n++) /* the bench measures k proposals a step */
            d[n] = n ? d[n - 1] : r->tokens[r->n_tokens - 1];
    if (r->cm && n > 0) { /* cut at the first token the grammar refuses */
        int ok = 0;
        lg_err cerr;
        while (ok < n && lg_cmatch_accepts(r->cm, d[ok]) && lg_cmatch_advance(r->cm, d[ok], &cerr) == 0)
            ok++;
        if (ok > 0 && lg_cmatch_rollback(r->cm, ok) != 0)
            ok = 0; /* cannot happen: ok <= K <= LG_CMATCH_HISTORY */
        n = ok;
    }
    return n;
}

bool lg_spec_bench_accepts(lg_engine *e, request *r)
{
    if (!e->spec.bench_accept_on)
        return false;
    if (!r->spec_rng.s[0] && !r->spec_rng.s[1] && !r->spec_rng.s[2] && !r->spec_rng.s[3])
        lg_rng_seed(&r->spec_rng, r->p.sampling.seed ^ 0x5bd1e995u ^ (uint64_t)r->id);
    return lg_rng_uniform(&r->spec_rng) < (double)e->spec.bench_accept;
}

void lg_spec_observe(lg_engine *e, request *r, int proposed, int accepted)
{
    if (proposed <= 0)
        return;
    e->stats.spec_verify_rows++;
    e->stats.spec_proposed += proposed;
    e->stats.spec_accepted += accepted;
    const float rate = (float)accepted / (float)proposed;
    if (r->spec_backoff == 0) { /* its first verification */
        r->spec_rate = rate;
        r->spec_backoff = 1;
    } else {
        r->spec_rate = 0.75f * r->spec_rate + 0.25f * rate;
    }
    if (e->spec.min_accept > 0 && r->spec_rate < e->spec.min_accept) {
        r->spec_pause = r->spec_backoff;
        r->spec_backoff = r->spec_backoff * 2 < SPEC_MAX_PAUSE ? r->spec_backoff * 2 : SPEC_MAX_PAUSE;
        r->spec_rate = e->spec.min_accept; /* on probation when it resumes */
    } else if (rate >= e->spec.min_accept) {
        r->spec_backoff = 1;
    }
}
