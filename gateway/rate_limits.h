/*
 * rate_limits.h — per-tenant limits (PUT /admin/v1/tenants/{t}/limits):
 * requests per minute, tokens per minute, concurrent requests and a monthly
 * token budget, enforced across all gateway threads (the rules:
 * rate_limits.c).
 *
 * A decision, not an answer: lg_limits_admit says admitted or refused and
 * what the response should carry (the x-ratelimit-* headers, a refusal's
 * 429 wording); the route answers and counts the refusal (routes_openai.c).
 * The caller passes the tenant's limits as it read them (the tenant view),
 * so an admin change applies to the next request. This file reads nothing
 * of the gateway: only the ledger's records, once, at creation.
 */
#ifndef LG_GW_RATE_LIMITS_H
#define LG_GW_RATE_LIMITS_H

#include <stdint.h>

#include "db/store.h"

typedef struct lg_limits lg_limits;

/* data_dir: the month so far is read from its usage ledger (one grouped
 * query); NULL: every tenant starts the month at 0. */
int lg_limits_create(const char *data_dir, lg_limits **out, lg_err *err);
void lg_limits_free(lg_limits *l); /* NULL: no-op */

typedef struct lg_limits_header {
    char name[40];  /* "x-ratelimit-remaining-tokens" */
    char value[32];
} lg_limits_header;

typedef struct lg_limits_verdict {
    /* The x-ratelimit-{limit,remaining,reset}-{requests,tokens} headers of
     * the per-minute limits the tenant has (what the buckets hold after
     * this request), for every answer, admitted or not. */
    int n_headers;
    lg_limits_header headers[6];
    /* Refused: a 429 of OpenAI's error type and code, Retry-After
     * (seconds) and retry-after-ms (read first by the OpenAI SDKs). */
    const char *type;   /* "requests", "tokens", "insufficient_quota"; NULL: admitted */
    const char *code;   /* "rate_limit_exceeded", "insufficient_quota" */
    const char *reason; /* for metrics.h: "rpm", "tpm", "concurrent", "monthly_tokens" */
    int retry_after_s;
    int64_t retry_after_ms;
    char message[400];
} lg_limits_verdict;

/* [loop] Before a generation request of this tenant is submitted:
 * est_tokens is its prompt plus its max output. Returns 0 when admitted
 * (the caller then calls lg_limits_finish exactly once), -1 when refused;
 * fills *v either way. Non-blocking. */
int lg_limits_admit(lg_limits *l, int64_t tenant_id, const lg_tenant_limits *lim, int64_t est_tokens,
                    lg_limits_verdict *v);
/* [any] The request admitted with est_tokens finished having used
 * actual_tokens: the billed prompt + completion tokens of its usage record
 * (the prompt as far as the engine prefilled it: 0 for a request cancelled
 * while queued or never run), which the monthly budget counts and the
 * tokens-per-minute bucket settles its estimate against. */
void lg_limits_finish(lg_limits *l, int64_t tenant_id, int64_t est_tokens, int64_t actual_tokens);

/* [any] What the limits know of a tenant now (usage page, tests). */
typedef struct lg_limits_state {
    int64_t inflight;        /* admitted, not finished */
    int64_t month_start;     /* Unix seconds: the UTC month counted */
    int64_t month_tokens;    /* prompt + completion tokens of finished requests this month */
    int64_t reserved_tokens; /* estimates of the requests in flight */
} lg_limits_state;
int lg_limits_usage(lg_limits *l, int64_t tenant_id, lg_limits_state *out);

#endif
