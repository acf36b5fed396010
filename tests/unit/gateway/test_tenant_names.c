/*
 * test_tenant_names.c — one rule for tenant names: the store's check
 * (db/store.c, what the admin API and the store refuse) and the router's
 * slug rule (gateway/http/router.c, what /t/<name>/ and <name>.<suffix> can
 * reach) agree on every string up to 3 characters over an alphabet with
 * the edge cases, and at the length limits. A name the store accepts is
 * always routable: no "bad-" tenant that no URL reaches.
 */
#include <string.h>

#include "db/store.h"
#include "gateway/http/router.h"
#include "tests/unit/test.h"

static bool store_ok(const char *s)
{
    lg_err err = {{0}};
    return lg_store_check_tenant_name(s, &err) == 0;
}

static void test_agree_exhaustive(void)
{
    static const char alpha[] = "az09-A_. \xc3";
    const size_t na = sizeof alpha - 1;
    int disagree = 0;
    char s[4];
    for (size_t len = 1; len <= 3; len++) {
        size_t total = 1;
        for (size_t i = 0; i < len; i++)
            total *= na;
        for (size_t k = 0; k < total; k++) {
            size_t x = k;
            for (size_t i = 0; i < len; i++, x /= na)
                s[i] = alpha[x % na];
            s[len] = 0;
            if (store_ok(s) != lg_tenant_slug_valid(s, len)) {
                if (disagree++ < 5)
                    fprintf(stderr, "disagree on '%s': store %d router %d\n", s, store_ok(s),
                            lg_tenant_slug_valid(s, len));
            }
        }
    }
    CHECK_MSG(disagree == 0, "%d strings judged differently", disagree);
}

static void test_cases(void)
{
    const char *good[] = {"a", "9", "acme", "acme-corp", "a-b-c", "a--b", "x1"};
    const char *bad[] = {"", "bad-", "-bad", "-", "--", "UPPER", "Acme", "a_b", "a.b", "a b", "acme-corp-"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        CHECK_MSG(store_ok(good[i]), "store refuses '%s'", good[i]);
        CHECK_MSG(lg_tenant_slug_valid(good[i], strlen(good[i])), "router refuses '%s'", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(!store_ok(bad[i]), "store accepts '%s'", bad[i]);
        CHECK_MSG(!lg_tenant_slug_valid(bad[i], strlen(bad[i])), "router accepts '%s'", bad[i]);
    }
    /* the length limits: 63 is a DNS label's maximum */
    char s[80];
    memset(s, 'a', sizeof s);
    s[63] = 0;
    CHECK(store_ok(s) && lg_tenant_slug_valid(s, 63));
    s[62] = '-';
    CHECK(!store_ok(s) && !lg_tenant_slug_valid(s, 63));
    s[62] = 'a';
    s[63] = 'a';
    s[64] = 0;
    CHECK(!store_ok(s) && !lg_tenant_slug_valid(s, 64));
    /* the message states the rule */
    lg_err err = {{0}};
    CHECK(lg_store_check_tenant_name("bad-", &err) == LG_STORE_INVALID);
    CHECK_MSG(strstr(err.msg, "starting and ending with a letter or digit") && strstr(err.msg, "1 to 63") &&
                  !strchr(err.msg, '\n'),
              "%s", err.msg);
    CHECK(lg_store_check_tenant_name(NULL, &err) == LG_STORE_INVALID);
}

int main(void)
{
    test_agree_exhaustive();
    test_cases();
    TEST_DONE();
}
