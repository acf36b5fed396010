/*
 * test_money.c — exact prices and costs: parsing edge cases (decimals,
 * exponents, signs, overflow), doubles from JSON parsers, formatting of
 * micro-USD prices and pico-USD costs, and the cost formula against a
 * 128-bit reference on random inputs.
 */
#include <stdint.h>

#include "db/money.h"
#include "tests/unit/test.h"

static int64_t parse_ok(const char *s)
{
    int64_t v = -999;
    lg_err err = {{0}};
    int rc = lg_money_price_parse(s, strlen(s), &v, &err);
    CHECK_MSG(rc == 0, "'%s': %s", s, err.msg);
    return v;
}

static void parse_bad(const char *s, const char *why)
{
    int64_t v = 77;
    lg_err err = {{0}};
    CHECK_MSG(lg_money_price_parse(s, strlen(s), &v, &err) == -1, "'%s' accepted", s);
    CHECK_MSG(strstr(err.msg, why) != NULL, "'%s': got '%s', expected '%s'", s, err.msg, why);
    CHECK(v == 77);
}

static void test_parse(void)
{
    CHECK(parse_ok("0") == 0);
    CHECK(parse_ok("0.15") == 150000);
    CHECK(parse_ok("3") == 3000000);
    CHECK(parse_ok("2.5") == 2500000);
    CHECK(parse_ok("0.000001") == 1);
    CHECK(parse_ok("10.123456") == 10123456);
    CHECK(parse_ok("1.5000000000") == 1500000); /* trailing zeros are not decimals */
    CHECK(parse_ok("007.25") == 7250000);
    CHECK(parse_ok("0.0000000") == 0);
    CHECK(parse_ok("1e-6") == 1);
    CHECK(parse_ok("1E-6") == 1);
    CHECK(parse_ok("1.5e2") == 150000000);
    CHECK(parse_ok("1.5E+2") == 150000000);
    CHECK(parse_ok("15e-1") == 1500000);
    CHECK(parse_ok("0e99999999999") == 0);
    CHECK(parse_ok("100000e-11") == 1);
    parse_bad("120000e-11", "more than 6 decimals"); /* 1.2e-6 */
    CHECK(parse_ok("9223372036854.775807") == INT64_MAX);
    CHECK(parse_ok("9223372036854775807e-6") == INT64_MAX);

    parse_bad("", "empty");
    parse_bad("-1", "negative");
    parse_bad("-0", "negative");
    parse_bad("+1", "expected a decimal number");
    parse_bad(".5", "expected a decimal number");
    parse_bad("5.", "digits after '.'");
    parse_bad("1e", "exponent");
    parse_bad("1e+", "exponent");
    parse_bad(" 1", "expected a decimal number");
    parse_bad("1 ", "unexpected character");
    parse_bad("1,5", "unexpected character");
    parse_bad("0x10", "unexpected character");
    parse_bad("NaN", "expected a decimal number");
    parse_bad("inf", "expected a decimal number");
    parse_bad("0.0000001", "more than 6 decimals");
    parse_bad("1.1234567", "more than 6 decimals");
    parse_bad("1e-7", "more than 6 decimals");
    parse_bad("9223372036854.775808", "too large");
    parse_bad("99999999999999999999", "too large");
    parse_bad("1e13", "too large");
    parse_bad("1e99999999999", "too large");
    /* not NUL-terminated: only len bytes are read */
    int64_t v = 0;
    lg_err err;
    CHECK(lg_money_price_parse("2.50xyz", 4, &v, &err) == 0 && v == 2500000);
}

static void test_from_double(void)
{
    int64_t v = -1;
    lg_err err;
    CHECK(lg_money_price_from_double(0.15, &v, &err) == 0 && v == 150000);
    CHECK(lg_money_price_from_double(0.1, &v, &err) == 0 && v == 100000);
    CHECK(lg_money_price_from_double(0.000001, &v, &err) == 0 && v == 1);
    CHECK(lg_money_price_from_double(3.0, &v, &err) == 0 && v == 3000000);
    CHECK(lg_money_price_from_double(123456.654321, &v, &err) == 0 && v == 123456654321);
    CHECK(lg_money_price_from_double(0.0, &v, &err) == 0 && v == 0);
    CHECK(lg_money_price_from_double(0.0000001, &v, &err) == -1 && strstr(err.msg, "6 decimals"));
    CHECK(lg_money_price_from_double(0.1234565, &v, &err) == -1);
    CHECK(lg_money_price_from_double(-0.5, &v, &err) == -1 && strstr(err.msg, "negative"));
    CHECK(lg_money_price_from_double(1e300, &v, &err) == -1 && strstr(err.msg, "too large"));
    CHECK(lg_money_price_from_double(1.0 / 0.0, &v, &err) == -1);
    CHECK(lg_money_price_from_double(0.0 / 0.0, &v, &err) == -1);
    /* every 6-decimal value a JSON parser turns into a double comes back exactly */
    uint64_t x = 12345;
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t micro = (int64_t)(x >> 20) % 100000000000000LL; /* < 1e8 USD/Mtok */
        char text[40];
        snprintf(text, sizeof text, "%lld.%06lld", (long long)(micro / 1000000), (long long)(micro % 1000000));
        double d = strtod(text, NULL);
        int64_t back = -1;
        if (lg_money_price_from_double(d, &back, &err) != 0 || back != micro) {
            CHECK_MSG(0, "%s -> %lld", text, (long long)back);
            break;
        }
    }
}

static void test_format(void)
{
    char b[LG_MONEY_PRICE_BUF];
    lg_money_format_price(0, b); CHECK(!strcmp(b, "0"));
    lg_money_format_price(150000, b); CHECK(!strcmp(b, "0.15"));
    lg_money_format_price(2000000, b); CHECK(!strcmp(b, "2"));
    lg_money_format_price(1, b); CHECK(!strcmp(b, "0.000001"));
    lg_money_format_price(10123456, b); CHECK(!strcmp(b, "10.123456"));
    lg_money_format_price(INT64_MAX, b); CHECK(!strcmp(b, "9223372036854.775807"));
    lg_money_format_price(-2500000, b); CHECK(!strcmp(b, "-2.5"));
    /* format -> parse is the identity */
    uint64_t x = 99;
    for (int i = 0; i < 5000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t v = (int64_t)(x >> 1) >> (x % 60);
        lg_money_format_price(v, b);
        int64_t back = -1;
        lg_err err;
        if (lg_money_price_parse(b, strlen(b), &back, &err) != 0 || back != v) {
            CHECK_MSG(0, "%lld -> %s -> %lld", (long long)v, b, (long long)back);
            break;
        }
    }

    char u[LG_MONEY_USD_BUF];
    lg_money_format_usd(0, u); CHECK(!strcmp(u, "0.000000000000"));
    lg_money_format_usd(123456789, u); CHECK(!strcmp(u, "0.000123456789"));
    lg_money_format_usd(1, u); CHECK(!strcmp(u, "0.000000000001"));
    lg_money_format_usd(1000000000000LL, u); CHECK(!strcmp(u, "1.000000000000"));
    lg_money_format_usd(1234567890123456LL, u); CHECK(!strcmp(u, "1234.567890123456"));
    lg_money_format_usd(INT64_MAX, u); CHECK(!strcmp(u, "9223372.036854775807"));
    lg_money_format_usd(INT64_MIN, u); CHECK(!strcmp(u, "-9223372.036854775808"));
    lg_money_format_usd(-5, u); CHECK(!strcmp(u, "-0.000000000005"));
}

static void test_cost(void)
{
    lg_err err;
    int64_t c = -1;
    /* $0.15 / $0.075 / $0.60 per Mtok (micro-USD per Mtok) */
    lg_pricing p = {150000, 75000, 600000};
    /* 1000 prompt (400 cached) + 200 completion:
     * 600 * 150000 + 400 * 75000 + 200 * 600000 = 90e6 + 30e6 + 120e6 pico */
    CHECK(lg_money_cost(&p, 1000, 400, 200, &c, &err) == 0 && c == 240000000);
    char u[LG_MONEY_USD_BUF];
    lg_money_format_usd(c, u);
    CHECK(!strcmp(u, "0.000240000000"));
    CHECK(lg_money_cost(&p, 0, 0, 0, &c, &err) == 0 && c == 0);
    /* one token at the smallest price is one pico-USD */
    lg_pricing tiny = {1, 1, 1};
    CHECK(lg_money_cost(&tiny, 1, 0, 0, &c, &err) == 0 && c == 1);

    CHECK(lg_money_cost(&p, 10, 11, 0, &c, &err) == -1 && strstr(err.msg, "exceed"));
    CHECK(lg_money_cost(&p, -1, 0, 0, &c, &err) == -1 && strstr(err.msg, "negative"));
    CHECK(lg_money_cost(&p, 1, 0, -1, &c, &err) == -1);
    lg_pricing neg = {1, -1, 1};
    CHECK(lg_money_cost(&neg, 1, 0, 1, &c, &err) == -1 && strstr(err.msg, "negative"));
    lg_pricing huge = {INT64_MAX / 2, 0, INT64_MAX / 2};
    CHECK(lg_money_cost(&huge, 3, 0, 0, &c, &err) == -1 && strstr(err.msg, "overflow"));
    CHECK(lg_money_cost(&huge, 1, 0, 1, &c, &err) == 0 && c == INT64_MAX - 1);
    CHECK(lg_money_cost(&huge, 2, 0, 1, &c, &err) == -1);

    /* random inputs against a 128-bit reference */
    uint64_t x = 7;
    int mismatches = 0, overflows = 0;
    for (int i = 0; i < 100000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t prompt = (int64_t)(x >> 40) % 2000000;
        int64_t cached = prompt ? (int64_t)(x >> 20) % (prompt + 1) : 0;
        int64_t compl = (int64_t)(x >> 8) % 500000;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        lg_pricing q = {(int64_t)(x >> 24), (int64_t)(x >> 28), (int64_t)(x >> 20)}; /* up to ~1.8e13 */
        __int128 want = (__int128)(prompt - cached) * q.input + (__int128)cached * q.cached_input +
                        (__int128)compl * q.output;
        int64_t got = 0;
        int rc = lg_money_cost(&q, prompt, cached, compl, &got, &err);
        if (want > INT64_MAX) {
            overflows++;
            mismatches += rc != -1;
        } else {
            mismatches += rc != 0 || got != (int64_t)want;
        }
    }
    CHECK_MSG(mismatches == 0, "%d mismatches", mismatches);
    CHECK(overflows > 0); /* the overflow path was exercised */

    int64_t acc = INT64_MAX - 5;
    CHECK(lg_money_add(&acc, 5, &err) == 0 && acc == INT64_MAX);
    CHECK(lg_money_add(&acc, 1, &err) == -1 && acc == INT64_MAX && strstr(err.msg, "overflow"));
}

int main(void)
{
    test_parse();
    test_from_double();
    test_format();
    test_cost();
    TEST_DONE();
}
