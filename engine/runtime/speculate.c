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
 * Limits: proposals come from the sequence itself only (no draft model
 * yet); the verification rows are sampled on the host from downloaded
 * logits, and such steps run eagerly (no graph, no decode burst).
 */
#include "engine/runtime/engine_internal.h"

#include <math.h>

const char *lg_spec_mode_name(lg_spec_mode m) { return m == LG_SPEC_NGRAM ? "ngram" : "off"; }

int lg_spec_mode_parse(const char *s, lg_spec_mode *out)
{
    if (!strcmp(s, "off")) *out = LG_SPEC_OFF;
    else if (!strcmp(s, "ngram")) *out = LG_SPEC_NGRAM;
    else return -1;
    return 0;
}

#define SPEC_MAX_K 16 /* most proposed tokens a step */
#define SPEC_MAX_PAUSE 64

void lg_spec_init(lg_engine *e, const lg_spec_opts *o)
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
    e->spec = s;
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
    int n = lg_ngram_propose(r->tokens, r->n_tokens, e->spec.ngram_min, e->spec.ngram_max, k, d);
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
