/*
 * adapter_cache.h — where adapters live between the disk and the kernels.
 *
 * Three tiers:
 *   disk  — the adapter's directory (adapter_config.json +
 *           adapter_model.safetensors), validated once at registration;
 *   host  — a packed image of the adapter in the backend's compute dtype,
 *           laid out exactly as it will sit in pool pages, in page-locked
 *           memory when the backend has it, kept under a byte budget (LRU);
 *           an evicted image is rebuilt from disk on demand;
 *   pool  — the image copied into pages of the unified page pool
 *           (engine/page_pool.h), as one pool entry of kind ADAPTER: pinned
 *           while any scheduled sequence uses it, cached (evictable, LRU
 *           shared with KV blocks) when idle.
 *
 * Packing: each (layer, module) has two tensors, A [rank, in] and B
 * [out, rank], at the adapter's own rank (never padded to a maximum). They
 * are placed first-fit into pages, 256-byte aligned, never straddling a page
 * (the page size is at least the largest tensor at the maximum rank), so a
 * kernel reaches each through one plain pointer into a page — nothing is
 * gathered or copied per step. The result of residency is a slot table:
 * lg_lora_w[n_layers * LG_LORA_N_MODULES] with device pointers (rank 0 for
 * modules the adapter does not touch).
 *
 * Not thread-safe: owned by the engine thread.
 */
#ifndef LG_ADAPTER_CACHE_H
#define LG_ADAPTER_CACHE_H

#include "backend.h"
#include "model_config.h"
#include "page_pool.h"

typedef struct lg_adapter_cache lg_adapter_cache;

typedef struct lg_adapter_cache_opts {
    int max_rank;          /* largest rank accepted (default 64) */
    size_t host_bytes;     /* host-tier budget for packed images (default 1 GiB) */
} lg_adapter_cache_opts;

typedef struct lg_adapter_cache_stats {
    int registered;
    int resident;              /* adapters with pages in the pool */
    int64_t pool_loads;        /* host -> pool copies */
    int64_t pool_evictions;    /* evicted from the pool by pressure */
    int64_t host_loads;        /* disk -> host (re)loads, registration included */
    int64_t host_evictions;
    size_t host_bytes;
} lg_adapter_cache_stats;

/* Largest single adapter tensor at max_rank for this model, in bytes of
 * dtype: the unified pool's pages must be at least this large. */
size_t lg_adapter_max_tensor_bytes(const lg_model_config *cfg, int max_rank, lg_dtype dt);

int lg_adapter_cache_create(lg_backend *be, lg_page_pool *pool, const lg_model_config *cfg,
                            const lg_adapter_cache_opts *opts, lg_adapter_cache **out, lg_err *err);
void lg_adapter_cache_free(lg_adapter_cache *c); /* NULL is a no-op; drops pool entries */

/* Loads and validates dir now; the name must be new. *id >= 0 on success. */
int lg_adapter_cache_register(lg_adapter_cache *c, const char *name, const char *dir, int *id, lg_err *err);
int lg_adapter_cache_find(const lg_adapter_cache *c, const char *name); /* id or -1 */
const char *lg_adapter_cache_name(const lg_adapter_cache *c, int id);
const char *lg_adapter_cache_digest(const lg_adapter_cache *c, int id);

/* Makes adapter id resident and pins it once. On success *slots points at
 * its slot table (valid while pinned). Returns 0; 1 if it is not ready yet:
 * the pool cannot hold it right now (everything pinned), or — on a backend
 * with upload_async — its pages are being copied on the upload stream
 * (started by this or an earlier call; the compute stream keeps running other
 * requests meanwhile): call again on a later step. -1 on a hard error (err
 * set, e.g. the directory changed and no longer validates). */
int lg_adapter_cache_acquire(lg_adapter_cache *c, int id, const lg_lora_w **slots, lg_err *err);
/* Turns finished async uploads into resident, idle adapters (call once per
 * step): an upload whose requests went away must not hold pages forever. */
void lg_adapter_cache_poll(lg_adapter_cache *c);
/* Drops one pin taken by acquire. */
void lg_adapter_cache_release(lg_adapter_cache *c, int id);

void lg_adapter_cache_get_stats(const lg_adapter_cache *c, lg_adapter_cache_stats *s);

#endif
