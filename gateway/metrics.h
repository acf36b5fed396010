/*
 * metrics.h — GET /metrics in Prometheus text format, and the counters the
 * rest of the gateway feeds. (Interface fixed by the serving work; the
 * implementation is metrics.c.) Every function is thread-safe and
 * non-blocking (atomics or a short lock), callable from loop, engine and
 * writer threads.
 */
#ifndef LG_GW_METRICS_H
#define LG_GW_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/http/router.h"

typedef struct lg_app lg_app;
typedef struct lg_metrics lg_metrics;

/* tenant_labels false: series carry no tenant label (bounded cardinality). */
int lg_metrics_create(lg_app *app, bool tenant_labels, lg_metrics **out, lg_err *err);
void lg_metrics_free(lg_metrics *m); /* NULL: no-op */

/* One answered HTTP request: route name (lg_route.name, "" when no route
 * matched), status, tenant name (NULL/"" when none). */
void lg_metrics_request(lg_metrics *m, const char *route, int status, const char *tenant);
/* One finished generation (engine request): latencies in seconds (ttft < 0:
 * no token; tpot < 0: fewer than two tokens) and its tokens. */
void lg_metrics_generation(lg_metrics *m, const char *tenant, double ttft_s, double tpot_s, double e2e_s,
                           int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens);

/* One request refused by the tenant limits (rate_limits.c): reason is
 * "rpm", "tpm", "concurrent" or "monthly_tokens". */
void lg_metrics_limited(lg_metrics *m, const char *tenant, const char *reason);

/* The exposition text (malloc'd; *len its length), as GET /metrics answers. */
char *lg_metrics_render(lg_metrics *m, size_t *len);

/* GET /metrics. Public by default (it lists tenant names as label values
 * unless `--metrics-tenant-labels off`); with `--metrics-auth on` it needs
 * a bearer token: $LORAGATE_METRICS_KEY (a scraper's own key, at least 32
 * characters) or the operator key. */
#define LG_METRICS_KEY_ENV "LORAGATE_METRICS_KEY"
int lg_routes_metrics(lg_router *rt, lg_app *app, lg_err *err);

#endif
