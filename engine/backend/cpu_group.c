/*
 * cpu_group.c — see cpu_group.h.
 */
#include "engine/backend/cpu_group.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct lg_cpu_group {
    int n;
    atomic_int refs;
    pthread_barrier_t bar;
    void *buf[64];
    int64_t count[64];
    int dtype[64];
};

int lg_cpu_group_new(int n, lg_cpu_group **out, lg_err *err)
{
    *out = NULL;
    if (n < 2 || n > 64)
        return lg_fail(err, "cpu group: %d ranks (2..64)", n);
    lg_cpu_group *g = calloc(1, sizeof *g);
    if (!g)
        return lg_fail(err, "out of memory");
    if (pthread_barrier_init(&g->bar, NULL, (unsigned)n) != 0) {
        free(g);
        return lg_fail(err, "cpu group: cannot create a barrier of %d", n);
    }
    g->n = n;
    atomic_init(&g->refs, n);
    *out = g;
    return 0;
}

void lg_cpu_group_release(lg_cpu_group *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
        pthread_barrier_destroy(&g->bar);
        free(g);
    }
}

static float load(const void *p, int64_t i, lg_dtype dt)
{
    float v;
    if (dt == LG_F32)
        return ((const float *)p)[i];
    lg_to_f32(&v, (const uint16_t *)p + i, dt, 1);
    return v;
}

static void store(void *p, int64_t i, lg_dtype dt, float v)
{
    if (dt == LG_F32)
        ((float *)p)[i] = v;
    else
        lg_from_f32((uint16_t *)p + i, dt, &v, 1);
}

int lg_cpu_group_all_reduce(lg_cpu_group *g, int rank, lg_tensor x)
{
    const int64_t count = x.rows * x.cols;
    if (x.q != LG_QNONE || (x.rows > 1 && x.stride != x.cols) ||
        (x.dtype != LG_F32 && x.dtype != LG_F16 && x.dtype != LG_BF16 && x.dtype != LG_I32))
        return -1;
    g->buf[rank] = x.data;
    g->count[rank] = count;
    g->dtype[rank] = (int)x.dtype;
    pthread_barrier_wait(&g->bar);
    int rc = 0;
    for (int k = 0; k < g->n; k++)
        if (g->count[k] != count || g->dtype[k] != (int)x.dtype)
            rc = -1; /* every rank sees the mismatch and skips the sum */
    const int64_t lo = count * rank / g->n, hi = count * (rank + 1) / g->n;
    if (rc == 0 && x.dtype == LG_I32) {
        for (int64_t i = lo; i < hi; i++) {
            int64_t acc = 0;
            for (int k = 0; k < g->n; k++) acc += ((const int32_t *)g->buf[k])[i];
            for (int k = 0; k < g->n; k++) ((int32_t *)g->buf[k])[i] = (int32_t)acc;
        }
    } else if (rc == 0) {
        for (int64_t i = lo; i < hi; i++) {
            float acc = load(g->buf[0], i, x.dtype);
            for (int k = 1; k < g->n; k++) {
                acc += load(g->buf[k], i, x.dtype);
                if (x.dtype != LG_F32) { /* rounded after each addition, as a 16-bit sum is */
                    uint16_t h;
                    lg_from_f32(&h, x.dtype, &acc, 1);
                    lg_to_f32(&acc, &h, x.dtype, 1);
                }
            }
            for (int k = 0; k < g->n; k++) store(g->buf[k], i, x.dtype, acc);
        }
    }
    pthread_barrier_wait(&g->bar);
    return rc;
}
