/*
 * test_speculate.c — engine/runtime/speculate.c without a model: the
 * prompt-lookup proposal against a brute-force statement of its definition
 * on random token strings (small alphabets, so matches of every length
 * occur), hand cases, and the per-step policy (batch size, token cap,
 * budget) and the per-sequence pause after low acceptance. Exactness of the
 * verification (tokens equal to no speculation, greedy and sampled, under
 * preemption and cancels, no page left behind) is test_engine_runtime.c's
 * speculative workloads; the sampled distribution is
 * tests/cli/test_speculative.py's chi-square test.
 */
#include "engine/runtime/engine_internal.h"
#include "tests/unit/test.h"

/* The definition, stated directly: for L = nmax .. nmin, the largest j with j + L < n and toks[j, j + L) ==
 * toks[n - L, n); the proposal is toks[j + L, min(j + L + k, n)). */
static int brute(const int32_t *t, int n, int nmin, int nmax, int k, int32_t *out)
{
    for (int L = nmax; L >= nmin; L--) {
        if (L < 1 || L >= n)
            continue;
        int best = -1;
        for (int j = 0; j + L < n; j++) {
            bool eq = true;
            for (int i = 0; i < L; i++) eq = eq && t[j + i] == t[n - L + i];
            if (eq && j != n - L)
                best = j;
        }
        if (best >= 0) {
            int m = 0;
            for (; m < k && best + L + m < n; m++) out[m] = t[best + L + m];
            return m;
        }
    }
    return 0;
}

static void test_ngram(void)
{
    /* hand cases */
    const int32_t a[] = {5, 6, 7, 8, 9, 5, 6};
    int32_t out[16];
    CHECK(lg_ngram_propose(a, 7, 2, 4, 3, out) == 3 && out[0] == 7 && out[1] == 8 && out[2] == 9);
    CHECK(lg_ngram_propose(a, 7, 3, 4, 3, out) == 0); /* no earlier 3-gram "9 5 6" */
    CHECK(lg_ngram_propose(a, 7, 1, 1, 8, out) == 5 && out[0] == 7 && out[4] == 6); /* runs to the end */
    const int32_t b[] = {1, 2, 1, 2, 1, 2};
    CHECK(lg_ngram_propose(b, 6, 2, 2, 4, out) == 2 && out[0] == 1 && out[1] == 2); /* latest occurrence */
    CHECK(lg_ngram_propose(b, 1, 1, 4, 4, out) == 0);
    CHECK(lg_ngram_propose(b, 6, 2, 2, 0, out) == 0);
    /* random strings against the definition */
    uint64_t s = 12345;
    int mismatches = 0, proposed = 0;
    for (int it = 0; it < 20000; it++) {
        int32_t t[64], o1[16], o2[16];
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((s >> 33) % 64), alpha = 2 + (int)((s >> 45) % 6);
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            t[i] = (int32_t)((s >> 33) % (uint64_t)alpha);
        }
        int nmin = 1 + (int)((s >> 20) % 3), nmax = nmin + (int)((s >> 24) % 4), k = 1 + (int)((s >> 28) % 8);
        int m1 = lg_ngram_propose(t, n, nmin, nmax, k, o1), m2 = brute(t, n, nmin, nmax, k, o2);
        proposed += m1 > 0;
        if (m1 != m2 || memcmp(o1, o2, (size_t)m1 * sizeof *o1) != 0)
            mismatches++;
    }
    CHECK_MSG(mismatches == 0, "%d of 20000 proposals differ from the definition", mismatches);
    CHECK(proposed > 10000);
}

static void test_policy(void)
{
    lg_engine *e = calloc(1, sizeof *e);
    e->budget = 512;
    CHECK(lg_spec_init(e, &(lg_spec_opts){.mode = LG_SPEC_NGRAM}, 0, NULL) == 0);
    CHECK(e->spec.num_tokens == 4 && e->spec.ngram_min == 2 && e->spec.ngram_max == 4 && e->spec.max_batch == 16);
    lg_spec_plan(e, 1);
    CHECK(e->spec_k == 4);
    lg_spec_plan(e, 16);
    CHECK(e->spec_k == 3); /* 64 rows / 16 sequences - 1 */
    lg_spec_plan(e, 17);
    CHECK(e->spec_k == 0 && e->stats.spec_batch_off_steps == 1); /* too many sequences decode */
    lg_spec_plan(e, 32);
    CHECK(e->spec_k == 0);
    e->budget = 20;
    lg_spec_plan(e, 8);
    CHECK(e->spec_k == 1); /* (20 - 8) / 8 */
    CHECK(lg_spec_init(e, &(lg_spec_opts){.mode = LG_SPEC_OFF}, 0, NULL) == 0);
    lg_spec_plan(e, 1);
    CHECK(e->spec_k == 0);

    /* a sequence that keeps failing pauses 1, 2, 4 .. 64 of its steps; one that does well never pauses */
    CHECK(lg_spec_init(e, &(lg_spec_opts){.mode = LG_SPEC_NGRAM}, 0, NULL) == 0);
    request r = {0};
    lg_spec_observe(e, &r, 4, 0);
    CHECK(r.spec_pause == 1);
    int pauses[8];
    for (int i = 0; i < 8; i++) {
        r.spec_pause = 0;
        lg_spec_observe(e, &r, 4, 0);
        pauses[i] = r.spec_pause;
    }
    CHECK(pauses[0] == 2 && pauses[1] == 4 && pauses[4] == 32 && pauses[5] == 64 && pauses[7] == 64);
    r.spec_pause = 0;
    lg_spec_observe(e, &r, 4, 4);
    lg_spec_observe(e, &r, 4, 4);
    CHECK(r.spec_pause == 0 && r.spec_backoff == 1);
    request g = {0};
    for (int i = 0; i < 50; i++) lg_spec_observe(e, &g, 4, 2);
    CHECK(g.spec_pause == 0);
    CHECK(e->stats.spec_proposed == 4 * (1 + 8 + 2 + 50) && e->stats.spec_accepted == 8 + 100);
    free(e);
}

int main(void)
{
    test_ngram();
    test_policy();
    TEST_DONE();
}
