/*
 * test_languages.c — the languages of JSON Schema number bounds, regexes and
 * Lark grammars equal llguidance's: fixtures/languages.tsv holds strings and
 * whether llguidance accepts them (made by make_fixtures.py); each is fed
 * to our matcher and the answers compared. Rows marked as a documented
 * difference (bounded non-integers judged by value: trailing zeros and
 * negative zero, see constrain.h) are counted, not compared.
 */
#include "tests/unit/engine/runtime/constrain/constrain_test.h"

static const char *const KIND[] = {"json_schema", "regex", "lark"};
static const lg_ckind KINDV[] = {LG_CK_JSON_SCHEMA, LG_CK_REGEX, LG_CK_LARK};

int main(void)
{
    lg_cvocab *v = ct_vocab(NULL, 0, NULL);
    FILE *f = fopen("tests/unit/engine/runtime/constrain/fixtures/languages.tsv", "r");
    CHECK(f != NULL);
    if (!f)
        TEST_DONE();
    char line[8192], prev_src[4096] = "";
    int prev_kind = -1, rows = 0, documented = 0, per_kind[3] = {0};
    lg_constraint *c = NULL;
    while (fgets(line, sizeof line, f)) {
        char *fl[5];
        if (ct_split(line, fl, 5) != 5)
            continue;
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(fl[0], KIND[i]))
                k = i;
        size_t sn, tn;
        char *src = ct_json_str(fl[1], &sn), *text = ct_json_str(fl[2], &tn);
        CHECK(k >= 0 && src && text);
        if (k < 0 || !src || !text) {
            free(src);
            free(text);
            continue;
        }
        if (k != prev_kind || strcmp(src, prev_src)) {
            lg_constraint_unref(c);
            lg_cerr err;
            c = ct_compile(v, KINDV[k], src, &err);
            CHECK_MSG(c != NULL, "%s %s: %s", fl[0], src, err.msg);
            prev_kind = k;
            snprintf(prev_src, sizeof prev_src, "%s", src);
        }
        if (c) {
            int want = atoi(fl[3]), doc = atoi(fl[4]);
            int got = ct_member(c, text, tn);
            if (doc)
                documented += got != want;
            else {
                CHECK_MSG(got == want, "%s %s: %s -> %d, llguidance %d", fl[0], src, fl[2], got, want);
                per_kind[k]++;
            }
            rows++;
        }
        free(src);
        free(text);
    }
    fclose(f);
    lg_constraint_unref(c);
    printf("%d rows (%d json_schema, %d regex, %d lark compared), %d documented differences\n", rows, per_kind[0],
           per_kind[1], per_kind[2], documented);
    CHECK(rows > 1000);
    lg_cvocab_free(v);
    TEST_DONE();
}
