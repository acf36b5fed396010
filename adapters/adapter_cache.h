/*
 * adapter_cache.h — where adapter versions live between the disk and the
 * kernels: three tiers, moved between by two threads.
 *
 *   disk  — the PEFT directory (or a synthetic adapter's seed), validated
 *           once when the version was registered (its spec, with digest and
 *           page layout: adapters/adapter_image.h);
 *   host  — the image in the compute dtype, laid out page by page exactly as
 *           it will sit in the pool, in a host page pool (page-locked memory
 *           when the backend has it) of opts.host_bytes; filled by the
 *           loader thread (adapters/adapter_loader.h); idle images are
 *           evicted LRU;
 *   pool  — the image copied into pages of the unified page pool
 *           (engine/backend/page_pool.h) as one entry of kind ADAPTER: pinned while
 *           a running sequence uses it, cached (evictable, in the LRU shared
 *           with prefix-cache KV pages) when idle. The copy runs on the
 *           backend's upload stream when it has one (upload_async), so the
 *           compute stream keeps running other requests.
 *
 * The engine thread only ever starts copies: acquire() answers "not yet"
 * (1) while a tier below is being filled, and the request that needs the
 * adapter waits while the others run. prefetch() starts the disk -> host
 * step early for queued requests. The result of residency is a slot table:
 * lg_lora_w[n_layers * LG_LORA_N_MODULES] with pointers into pool pages
 * (rank 0 for modules the adapter leaves alone).
 *
 * Versions are keyed by the caller's id (>= 1, never reused). remove()
 * frees a version's pages and image as soon as nothing uses them: no pin,
 * no load or copy in flight.
 *
 * Load latency is measured from the first acquire/prefetch that found the
 * adapter absent from the pool to the moment it is resident; the last
 * LG_ADAPTER_LOAD_SAMPLES of them are kept.
 *
 * Not thread-safe: owned by the engine thread (the loader thread only fills
 * pages it was handed). lg_adapter_cache_geom is immutable and may be read
 * from any thread to make specs.
 */
#ifndef LG_ADAPTER_CACHE_H
#define LG_ADAPTER_CACHE_H

#include "adapters/adapter_image.h"
#include "engine/backend/backend.h"
#include "engine/model/model_config.h"
#include "engine/backend/page_pool.h"

typedef struct lg_adapter_cache lg_adapter_cache;

#define LG_ADAPTER_LOAD_SAMPLES 4096
#define LG_ADAPTER_MAX_RANKS 16 /* tensor-parallel ranks a pool may span */

typedef struct lg_adapter_cache_opts {
    int max_rank;              /* largest rank accepted (default 64) */
    size_t host_bytes;         /* host tier (default 1 GiB) */
    void (*wake)(void *ctx);   /* called by the loader thread when a load finished (may be NULL) */
    void *wake_ctx;
} lg_adapter_cache_opts;

typedef struct lg_adapter_cache_stats {
    int registered;            /* versions alive */
    int resident;              /* versions with pages in the pool */
    int host_images;           /* versions with an image in the host tier */
    int64_t pool_loads;        /* host -> pool copies */
    int64_t pool_evictions;    /* evicted from the pool by pressure */
    int64_t host_loads;        /* disk (or generator) -> host, by the loader */
    int64_t host_evictions;
    int64_t load_failures;
    double load_seconds;       /* summed over pool loads: absent -> resident */
    double host_load_seconds;  /* summed loader fill time */
    size_t host_bytes;         /* host-tier bytes holding images */
    size_t host_capacity;      /* host-tier bytes in all */
    int64_t load_samples;      /* load latencies recorded so far */
} lg_adapter_cache_stats;

int lg_adapter_cache_create(lg_backend *be, lg_page_pool *pool, const lg_model_config *cfg,
                            const lg_adapter_cache_opts *opts, lg_adapter_cache **out, lg_err *err);
/* NULL is a no-op. Waits for the loader, drops every pool entry. */
void lg_adapter_cache_free(lg_adapter_cache *c);

/* The layout parameters specs must be made with (any thread). */
const lg_adapter_geom *lg_adapter_cache_geom(const lg_adapter_cache *c);

/* Adds a version under `id` (>= 1, unused). Takes ownership of spec, also
 * on failure (a spec too large for the host tier or the pool is refused). */
int lg_adapter_cache_add(lg_adapter_cache *c, int id, lg_adapter_spec *spec, lg_err *err);
/* The version is gone: freed now or once nothing uses it. Unknown ids are ignored. */
void lg_adapter_cache_remove(lg_adapter_cache *c, int id);
/* NULL if the id is unknown (or removed). */
const lg_adapter_spec *lg_adapter_cache_spec(const lg_adapter_cache *c, int id);

/* Makes version id resident and pins it once. Returns 0 with *slots set
 * (valid while pinned; with a pool over several tensor-parallel ranks, rank
 * r's table, pointing into rank r's arena, follows at *slots + r * n_slots); 1 if not ready yet (loading into host, copying into
 * the pool, or the pool/host tier is full of pinned data: call again on a
 * later step); -1 when it cannot be served (err set: the files changed, an
 * unknown id). */
int lg_adapter_cache_acquire(lg_adapter_cache *c, int id, const lg_lora_w **slots, lg_err *err);
/* Starts the disk -> host load of id if it is in neither tier (and the
 * loader is not already busy with many jobs). Never takes pool pages. */
void lg_adapter_cache_prefetch(lg_adapter_cache *c, int id);
/* Drops one pin taken by acquire. */
void lg_adapter_cache_release(lg_adapter_cache *c, int id);
/* Takes finished loads and copies into account (call once per step). */
void lg_adapter_cache_poll(lg_adapter_cache *c);
/* true while a load or a copy is in flight (a caller with nothing else to do
 * waits a little and polls again). */
bool lg_adapter_cache_busy(const lg_adapter_cache *c);

/* Test and benchmark hook: drops id's pool copy (if not pinned) and, with
 * host_too, its host image (if not in use), so the next acquire loads again. */
void lg_adapter_cache_evict(lg_adapter_cache *c, int id, bool host_too);

void lg_adapter_cache_get_stats(const lg_adapter_cache *c, lg_adapter_cache_stats *s);
/* The most recent load latencies in ms (absent -> resident), oldest first. */
int lg_adapter_cache_load_times(const lg_adapter_cache *c, float *ms, int cap);

#endif
