/*
 * test_regex.c — regex syntax errors and refusals (code and offset), the
 * DFA operations regexes need (intersection, difference, JSON quoting) and
 * the byte automata under them.
 *
 * References: JSON string encoding from Python's json module
 * (fixtures/json_quote.tsv: every json.dumps encoding is accepted by the
 * quoted DFA, and the escapes JSON allows are); intersections and
 * differences checked on strings whose membership is plain to see.
 */
#include "engine/runtime/constrain/regex.h"
#include "tests/unit/engine/runtime/constrain/constrain_test.h"

static int rx_err(const char *re, int flags, char *param)
{
    lg_cerr e = {0};
    lg_cbudget b = {.max_nfa = 1000000, .max_dfa = 100000, .err = &e};
    lg_dfa d;
    int rc = lg_rx_dfa(re, strlen(re), flags, &b, &d, "", 64);
    if (!rc)
        lg_dfa_free(&d);
    if (param)
        strcpy(param, e.param);
    return rc ? e.code : 0;
}

static bool rx_match(const char *re, int flags, const char *s)
{
    lg_cerr e = {0};
    lg_cbudget b = {.max_nfa = 1000000, .max_dfa = 100000, .err = &e};
    lg_dfa d;
    if (lg_rx_dfa(re, strlen(re), flags, &b, &d, "", 64))
        return false;
    bool r = lg_dfa_matches(&d, s, strlen(s));
    lg_dfa_free(&d);
    return r;
}

int main(void)
{
    char p[256];
    /* errors: code and offset */
    CHECK(rx_err("(ab", 0, p) == LG_CERR_INVALID);
    CHECK(rx_err("[z-a]", 0, p) == LG_CERR_INVALID && !strcmp(p, "offset 1"));
    CHECK(rx_err("*a", 0, p) == LG_CERR_INVALID && !strcmp(p, "offset 0"));
    CHECK(rx_err("a{3,2}", 0, p) == LG_CERR_INVALID);
    CHECK(rx_err("(?=a)b", 0, p) == LG_CERR_UNSUPPORTED && !strcmp(p, "offset 0"));
    CHECK(rx_err("(a)\\1", 0, p) == LG_CERR_UNSUPPORTED && !strcmp(p, "offset 3"));
    CHECK(rx_err("\\bx", 0, p) == LG_CERR_UNSUPPORTED);
    CHECK(rx_err("a^b", 0, p) == LG_CERR_UNSUPPORTED);
    CHECK(rx_err("(a{1000}){1000}", 0, p) == LG_CERR_LIMIT);
    CHECK(rx_err("\\p{Greek}", 0, p) == LG_CERR_UNSUPPORTED);
    CHECK(rx_err("[[:nope:]]", 0, p) == LG_CERR_INVALID);

    /* syntax that is accepted, and what it means */
    CHECK(rx_match("(?P<y>[0-9]{4})-(?:x|y)", 0, "2024-y"));
    CHECK(rx_match("a{,2}b", 0, "aab") && !rx_match("a{,2}b", 0, "aaab"));
    CHECK(rx_match("[\\d]+", 0, "12") && !rx_match("\\d", 0, "\xd9\xa3"));
    CHECK(rx_match("\\d", LG_RX_UNICODE, "\xd9\xa3")); /* ARABIC-INDIC DIGIT THREE */
    CHECK(rx_match("(?i)k", LG_RX_UNICODE, "\xe2\x84\xaa")); /* KELVIN SIGN folds to k */
    CHECK(rx_match("\\u00e9\\x41", 0, "\xc3\xa9" "A"));
    CHECK(!rx_match(".", 0, "\n") && rx_match("(?s).", 0, "\n"));
    CHECK(rx_match("[^a]", 0, "\xe6\x97\xa5") && !rx_match("[^a]", 0, "\xff"));
    /* search mode (JSON Schema pattern): unanchored sides are open */
    CHECK(rx_match("b+", LG_RX_SEARCH, "abba") && !rx_match("^b+", LG_RX_SEARCH, "abba"));
    CHECK(rx_match("^b+", LG_RX_SEARCH, "bba") && !rx_match("^b+$", LG_RX_SEARCH, "bba"));
    CHECK(rx_match("^a|b$", LG_RX_SEARCH, "ax") && rx_match("^a|b$", LG_RX_SEARCH, "xb") &&
          !rx_match("^a|b$", LG_RX_SEARCH, "xa"));
    /* invalid UTF-8 is never matched */
    CHECK(!rx_match("(?s).*", 0, "\xc0\x80") && !rx_match("(?s).*", 0, "\xed\xa0\x80"));

    /* intersection and difference */
    {
        lg_cerr e = {0};
        lg_cbudget b = {.max_nfa = 1000000, .max_dfa = 100000, .err = &e};
        lg_dfa a, c, x, y;
        CHECK(!lg_rx_dfa("[a-z]+", 6, 0, &b, &a, "", 64));
        CHECK(!lg_rx_dfa("(?s).{2,3}", 10, 0, &b, &c, "", 64));
        CHECK(!lg_dfa_and(&a, &c, false, &x, &b));
        CHECK(!lg_dfa_and(&a, &c, true, &y, &b));
        CHECK(lg_dfa_matches(&x, "ab", 2) && lg_dfa_matches(&x, "abc", 3) && !lg_dfa_matches(&x, "a", 1) &&
              !lg_dfa_matches(&x, "abcd", 4) && !lg_dfa_matches(&x, "a1", 2));
        CHECK(lg_dfa_matches(&y, "a", 1) && lg_dfa_matches(&y, "abcd", 4) && !lg_dfa_matches(&y, "ab", 2));
        lg_dfa_free(&a);
        lg_dfa_free(&c);
        lg_dfa_free(&x);
        lg_dfa_free(&y);
    }

    /* JSON quoting against Python's json.dumps */
    {
        lg_cerr e = {0};
        lg_cbudget b = {.max_nfa = 1000000, .max_dfa = 100000, .err = &e};
        lg_dfa any, q;
        CHECK(!lg_rx_dfa("(?s).*", 6, 0, &b, &any, "", 64));
        CHECK(!lg_dfa_json_quote(&any, &q, &b));
        FILE *f = fopen("tests/unit/engine/runtime/constrain/fixtures/json_quote.tsv", "r");
        CHECK(f != NULL);
        char line[4096];
        int n = 0;
        while (f && fgets(line, sizeof line, f)) {
            char *fl[2];
            if (ct_split(line, fl, 2) != 2)
                continue;
            size_t dn, en;
            char *dec = ct_json_str(fl[0], &dn), *enc = ct_json_str(fl[1], &en);
            /* a single-string DFA quoted must accept exactly its encodings: json.dumps' one at least */
            lg_dfa lit, ql;
            CHECK(!lg_dfa_literal(dec, dn, &lit, &b));
            CHECK(!lg_dfa_json_quote(&lit, &ql, &b));
            CHECK_MSG(lg_dfa_matches(&ql, enc, en), "encoding %s", fl[1]);
            CHECK(lg_dfa_matches(&q, enc, en));
            lg_dfa_free(&lit);
            lg_dfa_free(&ql);
            free(dec);
            free(enc);
            n++;
        }
        if (f)
            fclose(f);
        CHECK(n >= 100);
        /* what the encoding refuses: raw controls, raw DEL, a lone quote or backslash, \/ and \u0041 */
        CHECK(!lg_dfa_matches(&q, "\n", 1) && !lg_dfa_matches(&q, "\x7f", 1) && !lg_dfa_matches(&q, "\"", 1));
        CHECK(!lg_dfa_matches(&q, "\\", 1) && !lg_dfa_matches(&q, "\\/", 2) && !lg_dfa_matches(&q, "\\u0041", 6));
        CHECK(lg_dfa_matches(&q, "\\u001F", 6) && lg_dfa_matches(&q, "\\u007f", 6) && lg_dfa_matches(&q, "\\b", 2));
        lg_dfa_free(&any);
        lg_dfa_free(&q);
    }

    /* the budget stops a blow-up with LIMIT */
    {
        lg_cerr e = {0};
        lg_cbudget b = {.max_nfa = 1000000, .max_dfa = 5000, .err = &e};
        lg_dfa d;
        CHECK(lg_rx_dfa("(?s).*a.{20}", 12, 0, &b, &d, "", 64) == -1 && e.code == LG_CERR_LIMIT);
    }
    TEST_DONE();
}
