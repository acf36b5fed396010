/*
 * fairness.h — the admission queue: per-tenant FIFO queues of waiting
 * requests, and the order in which tenants get to admit one (Virtual Token
 * Counters, Sheng et al., "Fairness in Serving Large Language Models",
 * OSDI'24; or first-come-first-served for comparison).
 *
 * VTC. Every tenant u has a virtual counter c_u: the service it received,
 * divided by its weight. Service is counted in weighted tokens: each prompt
 * token the engine computes for u costs w_p = 1, each output token w_q = 2
 * (the paper's choice: a decode token costs more than a prefill token).
 * Admission always goes to the backlogged tenant (one with waiting requests)
 * with the smallest counter. When a tenant's queue goes from empty to
 * non-empty its counter is lifted to max(c_u, min over backlogged c_v) — or,
 * if nobody is backlogged, to the counter of the last tenant that left the
 * queue — so a tenant that was idle cannot bank credit and then starve the
 * others with a burst. The paper's bound: for two tenants backlogged during
 * [t1, t2), |W_f - W_g| <= 2 * max(w_p * L_input, w_q * M) with L_input the
 * longest prompt and M the most tokens a batch can hold. Work conservation
 * is the caller's part: when the chosen tenant has nothing admissible (its
 * adapter is still loading), the scheduler tries the next one
 * (lg_fair_pick with a `skip` mark), and it stops admitting only when the
 * batch or the pool is full.
 *
 * The queue stores links embedded in the caller's requests (lg_fair_link);
 * it never owns a request. Thread-safety: one engine thread drives it; the
 * read-side functions for metrics (lg_fair_tenant_stats) and
 * lg_fair_set_weight may be called from any thread (an internal mutex).
 *
 * Several engines, one share (engine/runtime/dp_router.h). What VTC orders
 * by — each tenant's weight, service and counter, and which tenants are
 * backlogged for the lift — lives in a table of its own; each lg_fair has a
 * private one, and lg_fair_join makes another lg_fair use the same table.
 * The queues stay per lg_fair (an engine admits only its own requests), but
 * every charge counts in the one counter, so a tenant served on engine 0
 * comes after the others on engine 1 too, and the lift looks at the tenants
 * backlogged on any engine (a tenant is idle when no engine holds a request
 * of it). With a private table this is exactly the single queue above. The
 * table has its own mutex, taken after the queue's (never the other way).
 */
#ifndef LG_FAIRNESS_H
#define LG_FAIRNESS_H

#include "engine/base/common.h"

#define LG_VTC_WP 1.0 /* weight of a computed prompt token */
#define LG_VTC_WQ 2.0 /* weight of an output token */

typedef struct lg_fair lg_fair;
typedef struct lg_fair_tenant lg_fair_tenant;

typedef enum lg_fair_policy { LG_FAIR_VTC = 0, LG_FAIR_FCFS = 1 } lg_fair_policy;

/* Embedded in a request; zero-initialised. */
typedef struct lg_fair_link {
    struct lg_fair_link *prev, *next;
    lg_fair_tenant *tenant;
    int64_t arrival;     /* global arrival order (FCFS, and FIFO within a tenant) */
    bool queued;
} lg_fair_link;

lg_fair *lg_fair_new(lg_fair_policy policy);
void lg_fair_free(lg_fair *f); /* NULL is a no-op; links are not touched */

/* The tenant of that name, created on first use (weight 1). NULL: out of memory. */
lg_fair_tenant *lg_fair_tenant_get(lg_fair *f, const char *name);
const char *lg_fair_tenant_name(const lg_fair_tenant *t);
int lg_fair_set_weight(lg_fair *f, const char *name, double weight, lg_err *err);

/* Appends l to its tenant's queue (l->tenant and l->arrival set by the
 * caller), lifting the tenant's counter if its queue was empty. */
void lg_fair_enqueue(lg_fair *f, lg_fair_link *l);
/* Takes l out of its queue (admitted, cancelled). No-op if not queued. */
void lg_fair_remove(lg_fair *f, lg_fair_link *l);

/* Starts an admission round: clears every tenant's skip mark. */
void lg_fair_round_begin(lg_fair *f);
/* The tenant to admit from next (smallest counter, or oldest head under
 * FCFS) among those with waiting requests and no skip mark; NULL if none. */
lg_fair_tenant *lg_fair_pick(lg_fair *f);
void lg_fair_skip(lg_fair_tenant *t);
/* The first waiting link of t, and the one after l (NULL at the end). */
lg_fair_link *lg_fair_first(lg_fair_tenant *t);
lg_fair_link *lg_fair_next(lg_fair_link *l);

/* Charges t for service: weighted tokens (w_p per prompt token computed,
 * w_q per output token). The counter grows by tokens / weight. */
void lg_fair_charge(lg_fair *f, lg_fair_tenant *t, double weighted_tokens);
/* Running-request count bookkeeping (for stats). */
void lg_fair_running(lg_fair *f, lg_fair_tenant *t, int delta);

typedef struct lg_fair_stats {
    double service, counter, weight;
    int queued, running;
} lg_fair_stats;
/* -1 if no tenant of that name. */
/* service, counter and weight are the table's (every joined lg_fair's);
 * queued and running this lg_fair's. -1 if the table has no tenant of that name. */
int lg_fair_tenant_stats(lg_fair *f, const char *name, lg_fair_stats *out);
int lg_fair_queued(lg_fair *f); /* waiting requests over all tenants */

/* f gives up its own table and uses with's (shared with every lg_fair
 * joined to it; freed with the last of them). Only before f knows any
 * tenant (no request, no weight) and with the same policy; -1 otherwise. */
int lg_fair_join(lg_fair *f, lg_fair *with, lg_err *err);

#endif
