/*
 * dp_router.h — data parallelism: N engines (engine.h), each on its own
 * device (engine/runtime/placement.h), behind one handle that speaks the
 * part of engine.h the gateway and the command line use. Each request goes
 * to one engine; adapters, tenant weights and purges go to all of them.
 * `loragate serve --data-parallel-size N` runs one gateway, one store and
 * one usage ledger over them.
 *
 * What it owns: the N engine handles (freed with it) and its own routing
 * figures. Nothing of an engine's inside: it learns what it routes by from
 * what passes through it (where it sent each request, when each finished)
 * and from the engines' public snapshots. Engines never share KV: a prefix
 * cached on engine 0 is not seen by engine 1.
 *
 * The routing policy (route() in dp_router.c), per request:
 *   1. prefix affinity: a request of a prefix namespace (engine.h: tenant,
 *      adapter, cache salt; no tenant under --prefix-sharing global; none
 *      under off) goes to its namespace's home engine, fixed when the
 *      namespace is first seen (a table of 8,192 namespaces by hash; a
 *      collision forgets one), so a tenant's prompts keep finding their
 *      cached prefixes;
 *   2. adapter residency: a new namespace on an adapter gets the least
 *      loaded of the engines that adapter version was sent to before (where
 *      it is resident, or was until that pool needed the pages), so that
 *      under a skewed adapter workload each adapter is loaded about once in
 *      all, not once per engine;
 *   3. otherwise the least loaded engine (ties rotate).
 *   Load is the router's own count of an engine's requests submitted and
 *   not finished (queued + running, exact at the moment of routing).
 *   4. spill: when the preferred engine is full (load >= max_seqs: the
 *      request would queue), the router compares the queues a new request
 *      of this tenant would wait behind: on each engine, the requests of the
 *      tenants VTC would admit no later than it (counter <= this tenant's,
 *      its own included; every request under FCFS). The request goes to
 *      another engine when the preferred one's is longer by more than
 *      max_seqs (a full batch) and more than twice as long, and, if that
 *      engine has never had the request's adapter, only when the preferred
 *      one also has more than a batch waiting (load > 2 x max_seqs): below
 *      that, a short wait costs less than loading the adapter once more.
 *      Among several, an engine the adapter was sent to comes first, then
 *      the shortest such queue. With one tenant this compares loads; with
 *      several it also moves a tenant that its fair share entitles to more
 *      onto engines busy with over-served tenants, which is what lets
 *      weights hold across engines (below). A spilled request leaves its
 *      namespace's home where it was. A busy engine never refuses: a
 *      request is only ever placed, never dropped.
 * The affinity tables are not told about evictions: an adapter evicted
 * under pressure is loaded again on its engine (one load, as anywhere).
 *
 * Fairness across engines: lg_dp_create joins every engine's fairness
 * queue to engine 0's table of tenant counters (lg_engine_share_fairness),
 * so each engine admits by the global VTC counters: service on any engine
 * counts toward the share everywhere. Weights hold over the router where
 * the backlogged tenants meet on the engines (the spill rule brings them
 * together); a tenant whose requests all sit on an engine nobody else uses
 * gets that engine whatever its weight (work conservation).
 *
 * Ids. With N == 1 everything passes straight to the engine (the same ids,
 * no wrapping, no counting). With N > 1 a request's id is
 * (engine id - 1) x N + k + 1 for engine k, so cancel needs no table; the
 * callbacks are wrapped (a small allocation per request) to keep the
 * per-engine counts and translate ids; they run on the engine's thread as
 * engine.h says, and *id is set when lg_dp_submit returns (a callback gets
 * the id as its argument, and may run before that). Adapter version ids are
 * the same on every engine: registry changes are serialized, made on the
 * engine with the smallest pool first (where a size refusal would come, so
 * that a refusal changes nothing), and each engine's id is checked against
 * the first; if a later engine still refuses (out of memory), the name is
 * removed everywhere and the lagging engines' ids are brought level, so the
 * engines agree again. Tenant weights live in the shared table.
 *
 * Threads: as engine.h; every function is thread-safe. Limits: no
 * migration of a running request; a namespace stays on its engine until
 * the table forgets it; at most LG_MAX_DP engines.
 */
#ifndef LG_DP_ROUTER_H
#define LG_DP_ROUTER_H

#include "engine/runtime/engine.h"
#include "engine/runtime/placement.h"

typedef struct lg_dp lg_dp;

/* Wraps engines[0..n), made with the same weights and options eo (the
 * router reads eo's max_seqs, prefix_sharing and policy), not yet used (no
 * request, weight or adapter). Takes ownership of the engines, also on
 * failure. */
int lg_dp_create(lg_engine *const *engines, int n, const lg_engine_opts *eo, lg_dp **out, lg_err *err);
/* Makes pl->dp engines of w and eo, engine k on placement pl's backends,
 * and wraps them. w may be freed after. */
int lg_dp_create_engines(const lg_placement *pl, const lg_weights *w, const lg_engine_opts *eo, lg_dp **out,
                         lg_err *err);
/* NULL: no-op. Frees the engines (their unfinished requests get on_finish
 * CANCELLED "engine shut down"). */
void lg_dp_free(lg_dp *dp);

int lg_dp_size(const lg_dp *dp);
lg_engine *lg_dp_engine(const lg_dp *dp, int k); /* for tests and per-engine figures */
const lg_model_config *lg_dp_config(const lg_dp *dp);
int lg_dp_max_context(const lg_dp *dp);

int lg_dp_start(lg_dp *dp, lg_err *err); /* every engine's thread */
void lg_dp_stop(lg_dp *dp);

/* ---- adapters: every engine, the same version id ---- */
int lg_dp_add_adapter(lg_dp *dp, const char *name, const char *dir, int *adapter_id, lg_err *err);
int lg_dp_add_synthetic_adapter(lg_dp *dp, const char *name, const lg_synth_adapter *s, int *adapter_id, lg_err *err);
int lg_dp_remove_adapter(lg_dp *dp, const char *name, lg_err *err);
int lg_dp_find_adapter(lg_dp *dp, const char *name);
/* engine 0's record, with `requests` summed over the engines */
int lg_dp_adapter_info(lg_dp *dp, int adapter_id, lg_adapter_info *out);

/* ---- tenants ---- */
int lg_dp_set_tenant_weight(lg_dp *dp, const char *tenant, double weight, lg_err *err);
int lg_dp_purge_tenant(lg_dp *dp, const char *tenant, lg_err *err); /* every engine */
/* service and counter: the shared table's; queued and running: summed */
int lg_dp_tenant_stats(lg_dp *dp, const char *tenant, lg_tenant_stats *out);

/* ---- requests ---- */
int lg_dp_submit(lg_dp *dp, const lg_request_params *p, int64_t *id, lg_err *err);
void lg_dp_cancel(lg_dp *dp, int64_t id, lg_finish_reason reason);
bool lg_dp_busy(lg_dp *dp);

/* ---- counters ---- */

/* The engines' snapshots summed: counters, pages, requests and seconds
 * (engine-seconds) add up; page size, dtypes and adapters_registered (the
 * same versions on every engine) are engine 0's; adapters_resident counts
 * resident copies; the high-water marks are summed (an upper bound);
 * max_step_adapters is the sum (adapters all engines serve at once). */
void lg_dp_get_stats(lg_dp *dp, lg_engine_stats *s);
/* The adapters with requests, merged over the engines (ascending ids,
 * running and waiting summed), with the summed stats of the same snapshots
 * in *sum and, when per is not NULL, each engine's in per[0..n). As
 * lg_engine_adapter_activity otherwise. */
int lg_dp_adapter_activity(lg_dp *dp, lg_engine_stats *sum, lg_engine_stats *per, lg_adapter_activity **out);
/* Up to cap recent load latencies, shared out over the engines. */
int lg_dp_adapter_load_times(lg_dp *dp, float *ms, int cap);

/* The router's figures of engine k (0 with one engine: nothing is counted). */
typedef struct lg_dp_routing {
    int outstanding;          /* submitted to it, not finished */
    int64_t routed;           /* requests sent to it */
    int64_t spilled;          /* of those, sent past a busier preferred engine */
} lg_dp_routing;
void lg_dp_routing_get(lg_dp *dp, int k, lg_dp_routing *out);

#endif
