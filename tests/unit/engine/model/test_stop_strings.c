/*
 * test_stop_strings.c — stop strings split across pieces, overlapping
 * candidates, no stop strings, and text after a match.
 */
#include "engine/model/stop_strings.h"
#include "tests/unit/test.h"

static void run(const char *const *stops, int n, const char *const *pieces, int np, const char *want, bool want_match)
{
    lg_stopper *s = lg_stopper_new(stops, n);
    char out[256] = "";
    bool matched = false;
    for (int i = 0; i < np; i++) {
        size_t len;
        bool m;
        const char *r = lg_stopper_push(s, pieces[i], strlen(pieces[i]), &len, &m);
        strncat(out, r, len);
        matched |= m;
    }
    if (!matched) {
        size_t len;
        const char *r = lg_stopper_flush(s, &len);
        strncat(out, r, len);
    }
    CHECK_MSG(!strcmp(out, want), "got '%s' want '%s'", out, want);
    CHECK(matched == want_match);
    lg_stopper_free(s);
}

int main(void)
{
    const char *st1[] = {"\n\nUser:"};
    const char *p1[] = {"Hello", " world\n", "\nUs", "er: more"};
    run(st1, 1, p1, 4, "Hello world", true);
    const char *p2[] = {"Hello", " world\n", "\nUs", "ual"};
    run(st1, 1, p2, 4, "Hello world\n\nUsual", false);
    const char *st2[] = {"abc", "bcd", ""};
    const char *p3[] = {"xab", "cd"};
    run(st2, 3, p3, 2, "x", true);
    const char *p4[] = {"xxb", "cd"};
    run(st2, 3, p4, 2, "xx", true);
    run(NULL, 0, p1, 4, "Hello world\n\nUser: more", false);
    TEST_DONE();
}
