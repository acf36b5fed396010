/*
 * test_matcher.c — the per-request matcher: masks equal brute force (every
 * token tried with lg_cmatch_accepts, which feeds bytes through the parser
 * without the mask table) along seeded random walks over several grammars;
 * rollback restores earlier masks; clones are independent; forced bytes;
 * lg_cmask_single; refusals leave the state unchanged; EOS and done; a
 * constraint shared by threads gives each the masks it gives one.
 */
#include <pthread.h>

#include "tests/unit/engine/runtime/constrain/constrain_test.h"

static const char *const EXTRA[] = {"\"", "\",", "\"}", "\":", "{\"", "\":\"", "ab", "abc", "true", "null", "12",
                                    "1.", "e+", "],", "[{", "}]", "\\u00", "\\n", "yes", "no", "\xc3\xa9", "a\"b",
                                    "x", "xx", "xxx", "-0", "\",\"", ",\"", "00", "99"};

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* a random allowed token of the mask other than EOS, -1 if none */
static int pick(const uint32_t *mask, int nv, int32_t eos)
{
    int cnt = 0;
    for (int i = 0; i < nv; i++)
        cnt += i != eos && (mask[i >> 5] >> (i & 31) & 1);
    if (!cnt)
        return -1;
    int k = (int)(rnd() % (uint32_t)cnt);
    for (int i = 0; i < nv; i++)
        if (i != eos && (mask[i >> 5] >> (i & 31) & 1) && k-- == 0)
            return i;
    return -1;
}

typedef struct walk_arg {
    lg_constraint *c;
    const lg_cvocab *v;
    int32_t eos;
    uint32_t seed;
    uint64_t hash;
} walk_arg;

/* a deterministic walk; its masks hashed (threads compare hashes) */
static void *walk_hash(void *p)
{
    walk_arg *a = p;
    int nw = lg_cvocab_mask_words(a->v), nv = lg_cvocab_n_vocab(a->v);
    uint32_t *mask = calloc((size_t)nw, 4);
    lg_cmatch *m = lg_cmatch_new(a->c);
    uint32_t s = a->seed;
    uint64_t h = 1469598103934665603ull;
    lg_err err;
    for (int step = 0; step < 60; step++) {
        if (lg_cmatch_mask(m, mask, nw, &err) < 0)
            break;
        for (int i = 0; i < nw; i++)
            h = (h ^ mask[i]) * 1099511628211ull;
        int cnt = 0;
        for (int i = 0; i < nv; i++)
            cnt += i != a->eos && (mask[i >> 5] >> (i & 31) & 1);
        if (!cnt)
            break;
        s = s * 1664525u + 1013904223u;
        int k = (int)((s >> 8) % (uint32_t)cnt), tok = -1;
        for (int i = 0; i < nv && tok < 0; i++)
            if (i != a->eos && (mask[i >> 5] >> (i & 31) & 1) && k-- == 0)
                tok = i;
        lg_cmatch_advance(m, tok, &err);
    }
    a->hash = h;
    lg_cmatch_free(m);
    free(mask);
    return NULL;
}

int main(void)
{
    int32_t eos;
    lg_cvocab *v = ct_vocab(EXTRA, (int)(sizeof EXTRA / sizeof EXTRA[0]), &eos);
    int nw = lg_cvocab_mask_words(v), nv = lg_cvocab_n_vocab(v);
    uint32_t *mask = calloc((size_t)nw, 4), *mask2 = calloc((size_t)nw, 4);
    lg_err err;
    struct {
        lg_ckind k;
        const char *src;
    } G[] = {
        {LG_CK_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":5},"
                            "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":120}},"
                            "\"c\":{\"enum\":[true,null,\"x\\\"y\"]}},\"required\":[\"a\",\"b\"]}"},
        {LG_CK_JSON_SCHEMA, "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
                            "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":3}},"
                            "\"required\":[\"v\",\"kids\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}"},
        {LG_CK_JSON_OBJECT, NULL},
        {LG_CK_REGEX, "(ab|abc)*x{1,3}[0-9]?"},
        {LG_CK_LARK, "start: list\nlist: \"[\" (item (\",\" item)*)? \"]\"\nitem: list | WORD\nWORD: /[a-z]{1,3}/"},
        {LG_CK_CHOICE, "[\"yes\",\"no\",\"nob\",\"\\u00e9t\\u00e9\"]"},
    };
    for (size_t g = 0; g < sizeof G / sizeof G[0]; g++) {
        lg_cerr ce;
        lg_constraint *c = ct_compile(v, G[g].k, G[g].src, &ce);
        CHECK_MSG(c != NULL, "grammar %zu: %s", g, ce.msg);
        if (!c)
            continue;
        for (int w = 0; w < 4; w++) {
            lg_cmatch *m = lg_cmatch_new(c);
            int steps = 0;
            for (; steps < 40; steps++) {
                CHECK_MSG(ct_mask_vs_brute(m, v) == 0, "grammar %zu walk %d step %d", g, w, steps);
                int cnt = lg_cmatch_mask(m, mask, nw, &err);
                CHECK(cnt > 0); /* never a dead end */
                int tok = pick(mask, nv, eos);
                if (tok < 0 || (lg_cmatch_is_accepting(m) && rnd() % 4 == 0))
                    break;
                CHECK(lg_cmatch_advance(m, tok, &err) == 0);
            }
            /* rollback: one step back gives the earlier mask again */
            if (steps > 2) {
                lg_cmatch *cl = lg_cmatch_clone(m);
                CHECK(cl != NULL);
                CHECK(lg_cmatch_rollback(m, 2) == 0);
                lg_cmatch_mask(m, mask, nw, &err);
                lg_cmatch *fresh = lg_cmatch_new(c);
                /* replaying the history from a clone's perspective: the clone is still 2 ahead */
                CHECK(lg_cmatch_history(cl) == lg_cmatch_history(m) + 2);
                lg_cmatch_mask(cl, mask2, nw, &err);
                CHECK(ct_mask_vs_brute(cl, v) == 0 && ct_mask_vs_brute(m, v) == 0);
                CHECK(lg_cmatch_rollback(cl, 2) == 0);
                lg_cmatch_mask(cl, mask2, nw, &err);
                CHECK(!memcmp(mask, mask2, (size_t)nw * 4));
                CHECK(lg_cmatch_rollback(m, lg_cmatch_history(m)) == 0);
                lg_cmatch_mask(m, mask, nw, &err);
                lg_cmatch_mask(fresh, mask2, nw, &err);
                CHECK(!memcmp(mask, mask2, (size_t)nw * 4));
                CHECK(lg_cmatch_rollback(m, 1) == -1);
                lg_cmatch_free(cl);
                lg_cmatch_free(fresh);
            }
            lg_cmatch_free(m);
        }
        /* threads sharing the constraint see the masks one thread sees */
        walk_arg one = {c, v, eos, 99, 0};
        walk_hash(&one);
        pthread_t th[4];
        walk_arg a[4];
        lg_constraint *c2 = ct_compile(v, G[g].k, G[g].src, NULL); /* fresh table: threads fill it together */
        for (int i = 0; i < 4; i++) {
            a[i] = (walk_arg){c2, v, eos, 99, 0};
            pthread_create(&th[i], NULL, walk_hash, &a[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            CHECK(a[i].hash == one.hash);
        }
        lg_constraint_unref(c2);
        lg_constraint_unref(c);
    }

    /* forced bytes, single-token masks, refusals, EOS, done */
    {
        lg_constraint *c = ct_compile(v, LG_CK_JSON_SCHEMA,
                                      "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"abc\"}},"
                                      "\"required\":[\"name\"],\"additionalProperties\":false}", NULL);
        lg_cmatch *m = lg_cmatch_new(c);
        char buf[64];
        size_t n = lg_cmatch_forced_bytes(m, buf, sizeof buf);
        CHECK(n == strlen("{\"name\":\"abc\"}") && !memcmp(buf, "{\"name\":\"abc\"}", n));
        CHECK(lg_cmatch_forced_bytes(m, buf, 3) == 3);
        CHECK(lg_cmatch_advance_bytes(m, "{\"name\":\"ab", 11, &err) == 0);
        /* "c" and "c\"" and "c\"}"... only byte tokens here: c then "}  */
        lg_cmatch_mask(m, mask, nw, &err);
        CHECK(lg_cmask_single(mask, nw) == 'c');
        CHECK(lg_cmatch_advance(m, 'x', &err) == -1); /* refused: state unchanged */
        CHECK(lg_cmatch_advance(m, eos, &err) == -1);
        lg_cmatch_mask(m, mask2, nw, &err);
        CHECK(!memcmp(mask, mask2, (size_t)nw * 4));
        CHECK(lg_cmatch_advance_bytes(m, "c\"}", 3, &err) == 0);
        CHECK(lg_cmatch_is_accepting(m) && lg_cmatch_is_done(m));
        CHECK(lg_cmatch_mask(m, mask, nw, &err) == 1 && lg_cmask_single(mask, nw) == eos);
        CHECK(lg_cmatch_forced_bytes(m, buf, sizeof buf) == 0);
        CHECK(lg_cmatch_advance(m, eos, &err) == 0 && lg_cmatch_is_done(m) && !lg_cmatch_is_accepting(m));
        CHECK(lg_cmatch_mask(m, mask, nw, &err) == 0);
        CHECK(lg_cmatch_advance(m, 'a', &err) == -1);
        CHECK(lg_cmatch_rollback(m, 1) == 0 && lg_cmatch_is_accepting(m));
        CHECK(lg_cmatch_mask(m, mask, nw, &err) == 1);
        long cl = lg_cmatch_shortest_completion(m, buf, sizeof buf);
        CHECK(cl == 0);
        CHECK(lg_cmatch_mask(m, mask, 1, &err) == -1); /* too small a mask */
        lg_cmatch_free(m);
        lg_constraint_unref(c);
    }

    /* the history is bounded: LG_CMATCH_HISTORY steps back, not more */
    {
        lg_constraint *c = ct_compile(v, LG_CK_REGEX, "x*", NULL);
        lg_cmatch *m = lg_cmatch_new(c);
        for (int i = 0; i < LG_CMATCH_HISTORY + 10; i++)
            lg_cmatch_advance(m, 'x', &err);
        CHECK(lg_cmatch_history(m) == LG_CMATCH_HISTORY);
        CHECK(lg_cmatch_rollback(m, LG_CMATCH_HISTORY + 1) == -1);
        CHECK(lg_cmatch_rollback(m, LG_CMATCH_HISTORY) == 0);
        char buf[8];
        CHECK(lg_cmatch_shortest_completion(m, buf, sizeof buf) == 0);
        lg_cmatch_free(m);
        lg_constraint_unref(c);
    }

    /* shortest completion */
    {
        lg_constraint *c = ct_compile(v, LG_CK_REGEX, "ab(cd|e)f", NULL);
        lg_cmatch *m = lg_cmatch_new(c);
        char buf[16];
        long n = lg_cmatch_shortest_completion(m, buf, sizeof buf);
        CHECK(n == 4 && !memcmp(buf, "abef", 4));
        CHECK(lg_cmatch_shortest_completion(m, buf, 2) == -1);
        lg_cmatch_free(m);
        lg_constraint_unref(c);
    }
    free(mask);
    free(mask2);
    lg_cvocab_free(v);
    TEST_DONE();
}
