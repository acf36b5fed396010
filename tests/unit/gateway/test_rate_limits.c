/*
 * test_rate_limits.c — the tenant limits as a decision (gateway/rate_limits.h):
 * requests per minute, tokens per minute, concurrency and the monthly
 * budget, each refused with its own type, code, reason, Retry-After and
 * wording; the x-ratelimit-* headers of admitted and refused requests;
 * tenants kept apart. No HTTP: the verdict is data, the route answers it.
 */
#include "tests/unit/test.h"

#include "gateway/rate_limits.h"

static const char *header(const lg_limits_verdict *v, const char *name)
{
    for (int i = 0; i < v->n_headers; i++)
        if (!strcmp(v->headers[i].name, name))
            return v->headers[i].value;
    return NULL;
}

static const lg_tenant_limits NONE = {LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED};

static void test_rpm(lg_limits *l)
{
    lg_tenant_limits lim = NONE;
    lim.rpm = 2;
    lg_limits_verdict v;
    CHECK(lg_limits_admit(l, 1, &lim, 10, &v) == 0 && !v.type);
    CHECK(v.n_headers == 3);
    CHECK(header(&v, "x-ratelimit-limit-requests") && !strcmp(header(&v, "x-ratelimit-limit-requests"), "2"));
    CHECK(header(&v, "x-ratelimit-remaining-requests") && !strcmp(header(&v, "x-ratelimit-remaining-requests"), "1"));
    CHECK(header(&v, "x-ratelimit-reset-requests") != NULL);
    CHECK(!header(&v, "x-ratelimit-limit-tokens")); /* no token limit: none of its headers */
    CHECK(lg_limits_admit(l, 1, &lim, 10, &v) == 0);
    CHECK(!strcmp(header(&v, "x-ratelimit-remaining-requests"), "0"));
    CHECK(lg_limits_admit(l, 1, &lim, 10, &v) == -1);
    CHECK(v.type && !strcmp(v.type, "requests") && !strcmp(v.code, "rate_limit_exceeded") && !strcmp(v.reason, "rpm"));
    CHECK(v.retry_after_s >= 1 && v.retry_after_ms >= 1 && v.retry_after_ms <= 30000);
    CHECK(!strncmp(v.message, "Rate limit reached on requests per min (RPM): Limit 2", 52));
    CHECK(v.n_headers == 3); /* a refusal carries the headers too */
    /* another tenant has its own buckets */
    CHECK(lg_limits_admit(l, 2, &lim, 10, &v) == 0);
}

static void test_concurrent(lg_limits *l)
{
    lg_tenant_limits lim = NONE;
    lim.concurrent = 1;
    lg_limits_verdict v;
    CHECK(lg_limits_admit(l, 10, &lim, 5, &v) == 0 && v.n_headers == 0);
    CHECK(lg_limits_admit(l, 10, &lim, 5, &v) == -1);
    CHECK(!strcmp(v.reason, "concurrent") && !strcmp(v.type, "requests") && v.retry_after_s == 1 &&
          v.retry_after_ms == 1000);
    lg_limits_finish(l, 10, 5, 3);
    CHECK(lg_limits_admit(l, 10, &lim, 5, &v) == 0);
    lg_limits_state st;
    CHECK(lg_limits_usage(l, 10, &st) == 0 && st.inflight == 1 && st.month_tokens == 3 && st.reserved_tokens == 5);
}

static void test_budget(lg_limits *l)
{
    lg_tenant_limits lim = NONE;
    lim.monthly_tokens = 100;
    lg_limits_verdict v;
    CHECK(lg_limits_admit(l, 20, &lim, 60, &v) == 0);
    CHECK(lg_limits_admit(l, 20, &lim, 50, &v) == -1); /* 60 reserved + 50 > 100 */
    CHECK(!strcmp(v.type, "insufficient_quota") && !strcmp(v.code, "insufficient_quota") &&
          !strcmp(v.reason, "monthly_tokens"));
    CHECK(strstr(v.message, "monthly budget is 100 tokens, 40 are left") != NULL);
    CHECK(v.retry_after_s >= 1); /* the next month (or 60 s when over 40 days away) */
    lg_limits_finish(l, 20, 60, 30); /* used 30 of its 60 */
    CHECK(lg_limits_admit(l, 20, &lim, 70, &v) == 0); /* 30 + 70 = 100 */
    lg_limits_state st;
    CHECK(lg_limits_usage(l, 20, &st) == 0 && st.month_tokens == 30 && st.reserved_tokens == 70 && st.inflight == 1);
    CHECK(st.month_start > 0 && st.month_start % 86400 == 0);
}

static void test_tpm(lg_limits *l)
{
    lg_tenant_limits lim = NONE;
    lim.tpm = 100;
    lg_limits_verdict v;
    CHECK(lg_limits_admit(l, 30, &lim, 150, &v) == -1); /* larger than the bucket can ever hold */
    CHECK(!strcmp(v.type, "tokens") && !strcmp(v.reason, "tpm") && v.retry_after_s == 60);
    CHECK(!strncmp(v.message, "Request too large for tokens per min (TPM): Limit 100", 53));
    CHECK(v.n_headers == 3 && !strcmp(header(&v, "x-ratelimit-limit-tokens"), "100"));
    CHECK(lg_limits_admit(l, 30, &lim, 80, &v) == 0 && !strcmp(header(&v, "x-ratelimit-remaining-tokens"), "20"));
    CHECK(lg_limits_admit(l, 30, &lim, 80, &v) == -1 && !strcmp(v.reason, "tpm"));
    CHECK(strstr(v.message, "Please try again in") != NULL);
    lg_limits_finish(l, 30, 80, 10); /* 70 of the estimate come back */
    CHECK(lg_limits_admit(l, 30, &lim, 80, &v) == 0);
}

static void test_unlimited(lg_limits *l)
{
    lg_limits_verdict v;
    for (int i = 0; i < 100; i++)
        CHECK(lg_limits_admit(l, 40, &NONE, 1000000, &v) == 0 && v.n_headers == 0 && !v.type);
    CHECK(lg_limits_admit(NULL, 40, &NONE, 1, &v) == 0); /* no limits object: everything passes */
}

int main(void)
{
    lg_limits *l = NULL;
    lg_err err = {{0}};
    CHECK(lg_limits_create(NULL, &l, &err) == 0 && l);
    test_rpm(l);
    test_concurrent(l);
    test_budget(l);
    test_tpm(l);
    test_unlimited(l);
    lg_limits_free(l);
    lg_limits_free(NULL);
    TEST_DONE();
}
