/*
 * placement.c — see placement.h: N x M backends, device k x M + r for
 * engine k's rank r, CPU threads split evenly.
 */
#include "engine/runtime/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lg_placement_create(const char *backend, const lg_backend_opts *opts, int dp, int tp, lg_placement *out,
                        lg_err *err)
{
    memset(out, 0, sizeof *out);
    if (dp < 1 || dp > LG_MAX_DP)
        return lg_fail(err, "--data-parallel-size %d: expected 1 to %d engines", dp, LG_MAX_DP);
    if (tp < 1 || tp > LG_MAX_TP)
        return lg_fail(err, "--tensor-parallel-size %d: expected 1 to %d ranks", tp, LG_MAX_TP);
    int n = dp * tp;
    lg_backend **be = calloc((size_t)n, sizeof *be);
    if (!be)
        return lg_fail(err, "out of memory");
    lg_backend_opts bo = *opts;
    if (n > 1 && !strcmp(backend, "cpu")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int total = opts->n_threads > 0 ? opts->n_threads : cores > 0 ? (int)cores : 1;
        bo.n_threads = total / n > 0 ? total / n : 1;
    }
    for (int i = 0; i < n; i++) {
        bo.device = opts->device + i; /* engine k, rank r: k * tp + r */
        if (lg_backend_create(backend, &bo, &be[i], err) != 0) {
            if (n > 1)
                lg_err_prefix(err, "engine %d rank %d of %d x %d (%s device %d)", i / tp, i % tp, dp, tp, backend,
                              bo.device);
            for (int j = 0; j < i; j++) lg_backend_free(be[j]);
            free(be);
            return -1;
        }
    }
    *out = (lg_placement){.dp = dp, .tp = tp, .device0 = opts->device, .be = be};
    return 0;
}

void lg_placement_free(lg_placement *p)
{
    if (!p || !p->be)
        return;
    for (int i = 0; i < p->dp * p->tp; i++) lg_backend_free(p->be[i]);
    free(p->be);
    memset(p, 0, sizeof *p);
}

lg_backend *lg_placement_backend(const lg_placement *p, int k) { return p->be[k * p->tp]; }

void lg_placement_engine_opts(const lg_placement *p, int k, lg_engine_opts *eo)
{
    eo->tp_size = p->tp;
    eo->tp_backends = p->be + (size_t)k * (size_t)p->tp;
}

void lg_placement_describe(const lg_placement *p, const char *backend, char *buf, size_t n)
{
    int last = p->dp * p->tp - 1;
    if (!strcmp(backend, "cpu"))
        snprintf(buf, n, "%d engine%s x %d rank%s on the cpu, %d thread%s each", p->dp, p->dp > 1 ? "s" : "", p->tp,
                 p->tp > 1 ? "s" : "", p->be[0]->n_threads, p->be[0]->n_threads > 1 ? "s" : "");
    else if (last > 0)
        snprintf(buf, n, "%d engine%s x %d rank%s on %s devices %d-%d", p->dp, p->dp > 1 ? "s" : "", p->tp,
                 p->tp > 1 ? "s" : "", backend, p->device0, p->device0 + last);
    else
        snprintf(buf, n, "1 engine on %s device %d", backend, p->device0);
}
