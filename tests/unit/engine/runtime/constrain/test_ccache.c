/*
 * test_ccache.c — the compile cache: hits return the same constraint, the
 * full key matters (kind, whitespace, limits, source, vocabulary), refusals
 * are cached, LRU eviction by count and by bytes keeps constraints that are
 * still referenced alive, and threads hitting one key agree.
 */
#include <pthread.h>

#include "tests/unit/engine/runtime/constrain/constrain_test.h"

static lg_ccache *CC;
static lg_cvocab *V;

static void *hammer(void *p)
{
    lg_copts o = {.kind = LG_CK_REGEX};
    for (int i = 0; i < 200; i++) {
        char src[32];
        snprintf(src, sizeof src, "x{%d}", i % 7 + 1);
        lg_constraint *c = NULL;
        lg_cerr e;
        if (lg_ccache_get(CC, V, &o, src, strlen(src), &c, &e) == 0) {
            if (!ct_member(c, "xxxxxxxx", (size_t)(i % 7 + 1)))
                *(int *)p += 1;
            lg_constraint_unref(c);
        } else
            *(int *)p += 1;
    }
    return NULL;
}

int main(void)
{
    V = ct_vocab(NULL, 0, NULL);
    const char *x[] = {"zz"};
    lg_cvocab *v2 = ct_vocab(x, 1, NULL);
    CC = lg_ccache_new(3, 0);
    lg_copts o = {.kind = LG_CK_REGEX};
    lg_constraint *a = NULL, *b = NULL, *c = NULL;
    lg_cerr e;
    lg_ccache_stats st;
    CHECK(lg_ccache_get(CC, V, &o, "a+", 2, &a, &e) == 0);
    CHECK(lg_ccache_get(CC, V, &o, "a+", 2, &b, &e) == 0 && a == b);
    lg_ccache_stats_get(CC, &st);
    CHECK(st.hits == 1 && st.misses == 1 && st.entries == 1 && st.bytes > 0);
    lg_constraint_unref(b);
    /* the key: another kind, another whitespace (JSON), other limits, another vocabulary */
    lg_copts o2 = {.kind = LG_CK_LARK};
    CHECK(lg_ccache_get(CC, V, &o2, "a+", 2, &b, &e) == -1); /* not a grammar: refused */
    o2.limits.max_depth = 7;
    o2.kind = LG_CK_REGEX;
    CHECK(lg_ccache_get(CC, V, &o2, "a+", 2, &b, &e) == 0 && b != a);
    lg_constraint_unref(b);
    CHECK(lg_ccache_get(CC, v2, &o, "a+", 2, &b, &e) == 0 && b != a);
    lg_constraint_unref(b);
    lg_ccache_stats_get(CC, &st);
    CHECK(st.entries == 3); /* bounded by max_entries: the oldest went */
    /* refusals are cached: same error again */
    lg_cerr e1 = {0}, e2 = {0};
    CHECK(lg_ccache_get(CC, V, &o, "(a", 2, &c, &e1) == -1 && c == NULL);
    lg_ccache_stats_get(CC, &st);
    long misses = st.misses;
    CHECK(lg_ccache_get(CC, V, &o, "(a", 2, &c, &e2) == -1);
    lg_ccache_stats_get(CC, &st);
    CHECK(st.misses == misses && e1.code == LG_CERR_INVALID && !strcmp(e1.msg, e2.msg) && !strcmp(e1.param, e2.param));
    /* an evicted constraint still referenced keeps working */
    CHECK(ct_member(a, "aaa", 3));
    lg_constraint_unref(a);
    /* JSON: whitespace is part of the key */
    lg_copts j1 = {.kind = LG_CK_JSON_OBJECT}, j2 = {.kind = LG_CK_JSON_OBJECT, .whitespace = LG_CWS_SPACED};
    CHECK(lg_ccache_get(CC, V, &j1, NULL, 0, &a, &e) == 0 && lg_ccache_get(CC, V, &j2, NULL, 0, &b, &e) == 0 && a != b);
    CHECK(ct_member(a, "{\"a\":1}", 7) && !ct_member(b, "{\"a\":1}", 7) && ct_member(b, "{\"a\": 1}", 8));
    lg_constraint_unref(a);
    lg_constraint_unref(b);
    lg_ccache_free(CC);

    /* by bytes: a tiny budget keeps one entry */
    CC = lg_ccache_new(100, 1);
    CHECK(lg_ccache_get(CC, V, &o, "a", 1, &a, &e) == 0);
    CHECK(lg_ccache_get(CC, V, &o, "b", 1, &b, &e) == 0);
    lg_ccache_stats_get(CC, &st);
    CHECK(st.entries == 1);
    CHECK(ct_member(a, "a", 1) && ct_member(b, "b", 1));
    lg_constraint_unref(a);
    lg_constraint_unref(b);
    lg_ccache_free(CC);

    /* threads */
    CC = lg_ccache_new(4, 0);
    pthread_t th[4];
    int bad[4] = {0};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer, &bad[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(bad[i] == 0);
    }
    lg_ccache_stats_get(CC, &st);
    CHECK(st.hits + st.misses == 800 && st.entries <= 4);
    lg_ccache_free(CC);
    lg_ccache_free(NULL);
    lg_cvocab_free(v2);
    lg_cvocab_free(V);
    TEST_DONE();
}
