/*
 * test_compile_errors.c — refusals before anything runs: each bad or
 * hostile source gets its LG_CERR_* code and its place (a JSON pointer, a
 * regex offset, a grammar line, a choice index), quickly and within the
 * limits (no timing assertions: a hang would fail the ctest timeout).
 * Also what compiles: spaced whitespace, JSON mode, Lark features, stats.
 */
#include "tests/unit/engine/runtime/constrain/constrain_test.h"

static lg_cvocab *V;

static int expect(lg_ckind k, const char *src, int code, const char *param, const lg_climits *lim)
{
    lg_copts o = {.kind = k};
    if (lim)
        o.limits = *lim;
    lg_constraint *c = NULL;
    lg_cerr e = {0};
    int rc = lg_constraint_compile(V, &o, src, src ? strlen(src) : 0, &c, &e);
    lg_constraint_unref(c);
    if (!code)
        return rc == 0 ? 0 : (fprintf(stderr, "  unexpected refusal: %d %s: %s\n", e.code, e.param, e.msg), 1);
    bool ok = rc == -1 && e.code == code && (!param || !strcmp(param, e.param)) && e.msg[0] && !strchr(e.msg, '\n');
    if (!ok)
        fprintf(stderr, "  src %.80s: got %d '%s' (%s), want %d '%s'\n", src ? src : "", e.code, e.param, e.msg, code,
                param ? param : "*");
    return ok ? 0 : 1;
}

static char *repeat(const char *a, int n, const char *mid, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)n + 1), *p = s;
    for (int i = 0; i < n; i++, p += la)
        memcpy(p, a, la);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < n; i++, p += lb)
        memcpy(p, b, lb);
    *p = 0;
    return s;
}

int main(void)
{
    V = ct_vocab(NULL, 0, NULL);
    const lg_ckind J = LG_CK_JSON_SCHEMA;
    /* invalid */
    CHECK(!expect(J, "{\"type\": \"object\",", LG_CERR_INVALID, NULL, NULL));
    CHECK(!expect(J, "[1,2]", LG_CERR_INVALID, "", NULL));
    CHECK(!expect(J, "{\"type\":\"strin\"}", LG_CERR_INVALID, "/type", NULL));
    CHECK(!expect(J, "{\"properties\":{\"x\":{\"type\":7}}}", LG_CERR_INVALID, "/properties/x/type", NULL));
    CHECK(!expect(J, "{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":\"a\"}}}", LG_CERR_INVALID,
                  "/properties/n/minimum", NULL));
    CHECK(!expect(J, "{\"properties\":{\"a\":{\"$ref\":\"#/$defs/nope\"}}}", LG_CERR_INVALID, "/properties/a/$ref", NULL));
    CHECK(!expect(J, "{\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"(ab\"}}}", LG_CERR_INVALID,
                  "/properties/s/pattern offset 0", NULL));
    CHECK(!expect(J, "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
                  LG_CERR_INVALID, "/$defs/a/$ref", NULL));
    CHECK(!expect(J, "{\"$ref\":\"#\"}", LG_CERR_INVALID, "/$ref", NULL));
    /* unsupported, named with the keyword's pointer */
    CHECK(!expect(J, "{\"properties\":{\"x\":{\"not\":{}}}}", LG_CERR_UNSUPPORTED, "/properties/x/not", NULL));
    CHECK(!expect(J, "{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", LG_CERR_UNSUPPORTED,
                  "/patternProperties", NULL));
    CHECK(!expect(J, "{\"items\":{\"type\":\"array\",\"uniqueItems\":true}}", LG_CERR_UNSUPPORTED, "/items/uniqueItems", NULL));
    CHECK(!expect(J, "{\"properties\":{\"a\":{\"$ref\":\"https://x/y.json\"}}}", LG_CERR_UNSUPPORTED,
                  "/properties/a/$ref", NULL));
    CHECK(!expect(J, "{\"properties\":{\"c\":{\"type\":\"string\",\"format\":\"credit-card\"}}}", LG_CERR_UNSUPPORTED,
                  "/properties/c/format", NULL));
    CHECK(!expect(J, "{\"allOf\":[{\"type\":\"object\"},{\"required\":[\"a\"]}]}", LG_CERR_UNSUPPORTED, "/allOf", NULL));
    CHECK(!expect(J, "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", LG_CERR_UNSUPPORTED, "/oneOf", NULL));
    CHECK(!expect(J, "{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
                  LG_CERR_UNSUPPORTED, "/$defs/a", NULL)); /* left recursion, named by the rule */
    CHECK(!expect(J, "{\"type\":\"string\",\"pattern\":\"^(?=a)ab$\"}", LG_CERR_UNSUPPORTED, "/pattern offset 1", NULL));
    /* unsatisfiable */
    CHECK(!expect(J, "{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}}}", LG_CERR_UNSATISFIABLE,
                  "/properties/n", NULL));
    CHECK(!expect(J, "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", LG_CERR_UNSATISFIABLE, "", NULL));
    CHECK(!expect(J, "{\"enum\":[]}", LG_CERR_UNSATISFIABLE, "/enum", NULL));
    CHECK(!expect(J, "{\"type\":\"string\",\"enum\":[1,2]}", LG_CERR_UNSATISFIABLE, "/enum", NULL));
    CHECK(!expect(J, "{\"properties\":{\"x\":false},\"required\":[\"x\"]}", LG_CERR_UNSATISFIABLE, "/properties/x", NULL));
    CHECK(!expect(J, "{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", LG_CERR_UNSATISFIABLE, "/pattern", NULL));
    CHECK(!expect(J, "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}},"
                     "\"required\":[\"next\"]}},\"$ref\":\"#/$defs/n\"}",
                  LG_CERR_UNSATISFIABLE, NULL, NULL));
    /* what compiles */
    CHECK(!expect(J, "{\"type\":\"object\",\"title\":\"t\",\"description\":\"d\",\"x-anything\":1,\"uniqueItems\":false}", 0, NULL, NULL));
    CHECK(!expect(J, "true", 0, NULL, NULL));
    CHECK(!expect(J, "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", 0, NULL, NULL));
    CHECK(!expect(J, "{\"type\":\"integer\",\"minimum\":1e300}", 0, NULL, NULL));
    CHECK(!expect(LG_CK_JSON_OBJECT, NULL, 0, NULL, NULL));

    /* limits and hostile inputs */
    lg_climits lim = {0};
    char *s = repeat("{\"type\":\"object\",\"properties\":{\"p\":", 100, "{\"type\":\"string\"}", "}}");
    CHECK(!expect(J, s, LG_CERR_LIMIT, NULL, NULL)); /* inline nesting beyond max_depth */
    free(s);
    s = repeat("{\"type\":\"array\",\"items\":", 1000, "{\"type\":\"string\"}", "}");
    CHECK(!expect(J, s, 0, NULL, NULL)); /* items are rules of their own: no recursion in the compiler */
    free(s);
    {
        /* 300 levels: rule paths longer than 1 KB stay distinct (a truncated path once made a
         * level call itself and the schema "match nothing") */
        s = repeat("{\"type\":\"array\",\"minItems\":1,\"items\":", 300, "{\"type\":\"string\"}", "}");
        lg_constraint *c = ct_compile(V, J, s, NULL);
        CHECK(c != NULL);
        char want[700], got[700];
        memset(want, '[', 300);
        memcpy(want + 300, "\"\"", 2);
        memset(want + 302, ']', 300);
        lg_cmatch *m = c ? lg_cmatch_new(c) : NULL;
        CHECK(m && lg_cmatch_shortest_completion(m, got, sizeof got) == 602 && !memcmp(got, want, 602));
        lg_cmatch_free(m);
        lg_constraint_unref(c);
        free(s);
    }
    s = repeat("{\"anyOf\":[", 100, "{\"type\":\"integer\"}", ",{\"type\":\"null\"}]}");
    CHECK(!expect(J, s, LG_CERR_LIMIT, NULL, NULL));
    free(s);
    s = repeat("[", 10000, "", "]");
    CHECK(!expect(J, s, LG_CERR_LIMIT, NULL, NULL)); /* JSON text deeper than the parser allows */
    free(s);
    {
        /* a $ref chain longer than max_ref_expansions */
        lg_strbuf b = {0};
        lg_strbuf_puts(&b, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
        for (int i = 0; i < 3000; i++)
            lg_strbuf_printf(&b, "\"d%d\":{\"$ref\":\"#/$defs/d%d\"},", i, i + 1);
        lg_strbuf_puts(&b, "\"d3000\":{\"type\":\"string\"}}}");
        lim.max_ref_expansions = 1000;
        CHECK(!expect(J, b.p, LG_CERR_LIMIT, NULL, &lim));
        lim.max_ref_expansions = 0;
        CHECK(!expect(J, b.p, 0, NULL, NULL));
        free(b.p);
    }
    {
        /* an exponential schema: each level uses the one below twice */
        lg_strbuf b = {0};
        lg_strbuf_puts(&b, "{\"$ref\":\"#/$defs/l0\",\"$defs\":{");
        for (int i = 0; i < 40; i++)
            lg_strbuf_printf(&b, "\"l%d\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#/$defs/l%d\"},"
                                 "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/l%d\"}}}]}},",
                             i, i + 1, i + 1);
        lg_strbuf_puts(&b, "\"l40\":{\"type\":\"null\"}}}");
        CHECK(!expect(J, b.p, 0, NULL, NULL)); /* shared rules: linear, it compiles */
        free(b.p);
    }
    {
        lg_strbuf b = {0};
        lg_strbuf_puts(&b, "{\"enum\":[");
        for (int i = 0; i < 100001; i++)
            lg_strbuf_printf(&b, "%s%d", i ? "," : "", i);
        lg_strbuf_puts(&b, "]}");
        CHECK(!expect(J, b.p, LG_CERR_LIMIT, "/enum", NULL));
        free(b.p);
    }
    lim = (lg_climits){.max_source_bytes = 10};
    CHECK(!expect(LG_CK_REGEX, "abcdefghijklmnop", LG_CERR_LIMIT, "", &lim));
    lim = (lg_climits){.max_compile_ms = 1};
    CHECK(!expect(LG_CK_REGEX, "(?s)(.*a.{12}|[a-z]{1,200}x){1,50}", LG_CERR_LIMIT, NULL, &lim));
    CHECK(!expect(LG_CK_REGEX, "(a{1000}){1000}", LG_CERR_LIMIT, NULL, NULL));
    CHECK(!expect(LG_CK_REGEX, "(?s).*a.{24}", LG_CERR_LIMIT, NULL, NULL));
    s = repeat("(", 10000, "a", ")");
    CHECK(!expect(LG_CK_REGEX, s, LG_CERR_LIMIT, NULL, NULL));
    free(s);
    CHECK(!expect(LG_CK_REGEX, "(a*)*b|(x+x+)+y|(.*){12}z", 0, NULL, NULL)); /* backtracking bombs are small automata */
    CHECK(!expect(LG_CK_REGEX, "[z-a]", LG_CERR_INVALID, "offset 1", NULL));

    /* Lark */
    const lg_ckind L = LG_CK_LARK;
    CHECK(!expect(L, "start: foo\n", LG_CERR_INVALID, "line 1", NULL));
    CHECK(!expect(L, "start: \"a\" |\nfoo: ::\n", LG_CERR_INVALID, NULL, NULL));
    CHECK(!expect(L, "foo: \"a\"\n", LG_CERR_INVALID, "", NULL));
    CHECK(!expect(L, "start: x\n%ignore WS\nx: \"a\"\n", LG_CERR_UNSUPPORTED, "line 2", NULL));
    CHECK(!expect(L, "start: e\ne: e \"+\" \"1\" | \"1\"\n", LG_CERR_UNSUPPORTED, "e", NULL));
    CHECK(!expect(L, "start: A\nA: \"a\" A | \"b\"\n", LG_CERR_UNSUPPORTED, "line 2", NULL));
    CHECK(!expect(L, "start: /(?=a)/\n", LG_CERR_UNSUPPORTED, "line 1 offset 0", NULL));
    s = repeat("(", 10000, "\"a\"", ")");
    {
        char *g = malloc(strlen(s) + 16);
        sprintf(g, "start: %s\n", s);
        CHECK(!expect(L, g, LG_CERR_LIMIT, "line 1", NULL));
        free(g);
    }
    free(s);
    CHECK(!expect(L, "// a comment\n?start.2: item+ -> items\n!item: \"a\"i | %json {\"type\":\"integer\"}\n"
                     "%import common.WS_INLINE\n", 0, NULL, NULL));

    /* choices */
    const lg_ckind C = LG_CK_CHOICE;
    CHECK(!expect(C, "{\"a\":1}", LG_CERR_INVALID, "", NULL));
    CHECK(!expect(C, "[\"a\",2]", LG_CERR_INVALID, "choices/1", NULL));
    CHECK(!expect(C, "[]", LG_CERR_UNSATISFIABLE, "", NULL));

    /* spaced whitespace: ", " and ": " exactly */
    {
        lg_copts o = {.kind = J, .whitespace = LG_CWS_SPACED};
        const char *src = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
                          "\"b\":{\"const\":{\"x\":[1,2]}}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}";
        lg_constraint *c = NULL;
        lg_cerr e;
        CHECK(!lg_constraint_compile(V, &o, src, strlen(src), &c, &e));
        const char *good = "{\"a\": [1, 2], \"b\": {\"x\": [1, 2]}}", *bad = "{\"a\":[1,2],\"b\":{\"x\":[1,2]}}";
        CHECK(c && ct_member(c, good, strlen(good)) && !ct_member(c, bad, strlen(bad)));
        lg_cstats st;
        lg_constraint_stats(c, &st);
        CHECK(st.n_rules >= 2 && st.n_states > 10 && st.grammar_bytes > 0 && st.table_entries == 0);
        lg_cmatch *m = lg_cmatch_new(c);
        uint32_t mask[16];
        lg_err err;
        lg_cmatch_mask(m, mask, 16, &err);
        lg_constraint_stats(c, &st);
        CHECK(st.table_entries >= 1 && st.table_bytes > 0);
        lg_cmatch_free(m);
        lg_constraint_unref(c);
    }
    lg_cvocab_free(V);
    TEST_DONE();
}
