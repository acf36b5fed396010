/*
 * metrics.h — GET /metrics in Prometheus text format, and the counters the
 * rest of the gateway feeds (the implementation and the list of series:
 * metrics.c). Every function is thread-safe and non-blocking (a short
 * lock), callable from loop, engine and writer threads.
 *
 * What it reads, given once at creation (lg_metrics_sources): the tenant
 * view, to keep label values to real tenants; and, at scrape time only, the
 * engine's and the ledger's statistics and the access log's drop count.
 * Nothing calls back into its feeders.
 */
#ifndef LG_GW_METRICS_H
#define LG_GW_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/ledger.h"
#include "engine/runtime/dp_router.h"
#include "gateway/http/access_log.h"
#include "gateway/http/admin_key.h"
#include "gateway/http/router.h"
#include "gateway/tenants.h"

typedef struct lg_metrics lg_metrics;

/* Each may be NULL (then its series are left out; without tenants no label
 * value is accepted from a request, only from the feeders' own tenants). */
typedef struct lg_metrics_sources {
    lg_tenants *tenants;       /* request tenant labels must name a live tenant */
    lg_dp *engine;             /* the engines: queue, pool, prefix cache, adapters (summed, and per engine) */
    lg_ledger *ledger;         /* commit latency, backlog, health */
    lg_access_log *access_log; /* dropped lines */
    int64_t started_at;        /* Unix seconds; 0: no loragate_start_time_seconds */
} lg_metrics_sources;

/* tenant_labels false: series carry no tenant label (bounded cardinality).
 * Also sets request.h's observer (one per process), so that every answered
 * request is counted; lg_metrics_free unsets it. */
int lg_metrics_create(const lg_metrics_sources *src, bool tenant_labels, lg_metrics **out, lg_err *err);
void lg_metrics_free(lg_metrics *m); /* NULL: no-op */

/* One answered HTTP request: route name (lg_route.name, "" when no route
 * matched), status, tenant name (NULL/"" when none). */
void lg_metrics_request(lg_metrics *m, const char *route, int status, const char *tenant);
/* One finished generation (engine request): latencies in seconds (ttft < 0:
 * no token; tpot < 0: fewer than two tokens) and its tokens. */
void lg_metrics_generation(lg_metrics *m, const char *tenant, double ttft_s, double tpot_s, double e2e_s,
                           int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens);

/* One request refused by the tenant limits (rate_limits.h): reason is
 * "rpm", "tpm", "concurrent" or "monthly_tokens". */
void lg_metrics_limited(lg_metrics *m, const char *tenant, const char *reason);

/* The exposition text (malloc'd; *len its length), as GET /metrics answers. */
char *lg_metrics_render(lg_metrics *m, size_t *len);

/* GET /metrics. Public by default (it lists tenant names as label values
 * unless `--metrics-tenant-labels off`); with auth (`--metrics-auth on`) it
 * needs a bearer token: $LORAGATE_METRICS_KEY (a scraper's own key, at
 * least 32 characters) or the operator key (admin, may be NULL). */
#define LG_METRICS_KEY_ENV "LORAGATE_METRICS_KEY"
int lg_routes_metrics(lg_router *rt, lg_metrics *m, bool auth, const lg_admin_key *admin, lg_err *err);

#endif
