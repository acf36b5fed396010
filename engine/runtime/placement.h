/*
 * placement.h — which backend each engine and each tensor-parallel rank
 * runs on, for `--data-parallel-size N --tensor-parallel-size M` (serve,
 * bench, generate): N engines (engine/runtime/dp_router.h) of M ranks each
 * (lg_engine_opts.tp_size / tp_backends), N x M backends in all.
 *
 * Devices. CUDA: engine k, rank r gets device ordinal k x M + r, so an
 * engine's ranks are neighbours (one NVLink island on the usual 8-GPU
 * host) and engine k's rank 0 is device k x M. A device that is not there
 * fails at its backend's creation with the backend's message, prefixed by
 * which engine and rank wanted it. CPU: N x M CPU backends that split the
 * thread count (the opts' n_threads, 0: every online core) evenly, at
 * least one thread each; with N = M = 1 the options pass through untouched
 * (the backend's own default).
 *
 * Ownership: lg_placement_create makes the backends, lg_placement_free frees
 * them (after the engines that use them). lg_placement_engine_opts points
 * an engine's options at its backends; the pointer stays valid while the
 * placement lives.
 */
#ifndef LG_PLACEMENT_H
#define LG_PLACEMENT_H

#include "engine/runtime/engine.h"

#define LG_MAX_DP 64 /* --data-parallel-size */
#define LG_MAX_TP 64 /* --tensor-parallel-size */

typedef struct lg_placement {
    int dp, tp;
    int device0;     /* the opts' device: engine k's rank r is device0 + k * tp + r */
    lg_backend **be; /* [dp * tp]: engine k's rank r at k * tp + r */
} lg_placement;

/* Checks dp in [1, LG_MAX_DP] and tp in [1, LG_MAX_TP] (one line naming the
 * flag otherwise) and makes the backends. On failure nothing is left. */
int lg_placement_create(const char *backend, const lg_backend_opts *opts, int dp, int tp, lg_placement *out,
                        lg_err *err);
void lg_placement_free(lg_placement *p); /* zeroed or NULL: no-op */

/* Engine k's backend (its rank 0). */
lg_backend *lg_placement_backend(const lg_placement *p, int k);
/* Sets eo->tp_size and eo->tp_backends for engine k. */
void lg_placement_engine_opts(const lg_placement *p, int k, lg_engine_opts *eo);

/* One line for logs: "2 engines x 2 ranks on cuda devices 0-3". */
void lg_placement_describe(const lg_placement *p, const char *backend, char *buf, size_t n);

#endif
