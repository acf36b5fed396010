/*
 * rate_limits.h — per-tenant limits (PUT /admin/v1/tenants/{t}/limits): requests
 * per minute, tokens per minute, concurrent requests and a monthly token
 * budget, enforced across all gateway threads. (Interface fixed by the
 * serving work; the implementation is rate_limits.c.)
 */
#ifndef LG_GW_RATE_LIMITS_H
#define LG_GW_RATE_LIMITS_H

#include <stdint.h>

#include "gateway/http/request.h"

typedef struct lg_app lg_app;
typedef struct lg_app_tenant lg_app_tenant;
typedef struct lg_limits lg_limits;

int lg_limits_create(lg_app *app, lg_limits **out, lg_err *err);
void lg_limits_free(lg_limits *l); /* NULL: no-op */

/* [loop] Before a generation request is submitted: est_tokens is its prompt
 * plus its max output. Adds the x-ratelimit-* headers to r. Returns 0 when
 * admitted (the caller then calls lg_limits_finish exactly once), or -1
 * after answering 429 (rate_limit_exceeded / insufficient_quota, with
 * Retry-After). Non-blocking. */
int lg_limits_admit(lg_limits *l, lg_request *r, const lg_app_tenant *t, int64_t est_tokens);
/* [any] The request admitted with est_tokens finished having used
 * actual_tokens: the billed prompt + completion tokens of its usage record
 * (the prompt as far as the engine prefilled it: 0 for a request cancelled
 * while queued or never run), which the monthly budget counts and the
 * tokens-per-minute bucket settles its estimate against. */
void lg_limits_finish(lg_limits *l, const lg_app_tenant *t, int64_t est_tokens, int64_t actual_tokens);

/* [any] What the limits know of a tenant now (usage page, tests). */
typedef struct lg_limits_state {
    int64_t inflight;        /* admitted, not finished */
    int64_t month_start;     /* Unix seconds: the UTC month counted */
    int64_t month_tokens;    /* prompt + completion tokens of finished requests this month */
    int64_t reserved_tokens; /* estimates of the requests in flight */
} lg_limits_state;
int lg_limits_usage(lg_limits *l, const lg_app_tenant *t, lg_limits_state *out);

#endif
