/*
 * graph.cu — step graphs: CUDA-graph recordings of a step's ops, keyed by
 * the caller's shape key, replayed after (backend.h, graph_begin/graph_end).
 *
 * Why: a decode step of a 7B model is ~600 small launches; launched one by
 * one from the host the GPU idles between them. One cudaGraphLaunch per
 * step removes those gaps.
 *
 * Recording uses stream capture of the compute stream in relaxed mode (an
 * op may still grow its workspace with cudaMalloc while recording:
 * cu_workspace never frees a buffer a recording may name). The cache is a
 * small LRU (LG_GRAPH_CACHE entries, linear search: a step looks up once).
 * Evicting or resetting synchronises the stream first, so no destroyed
 * executable is still in flight.
 *
 * Invariants: c->capturing is 1 exactly between a recording graph_begin and
 * its graph_end; a replay leaves it 0. Keys are compared bytewise.
 */
#include "kernels/ops.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void drop_entry(cuda_ctx *c, struct cuda_ctx::cu_graph_entry *e)
{
    if (e->exec)
        cudaGraphExecDestroy(e->exec);
    e->exec = NULL;
    e->used = 0;
    e->key_len = 0;
}

void cu_graph_reset_ctx(cuda_ctx *c)
{
    if (!c || c->capturing)
        return;
    bool any = false;
    for (int i = 0; i < LG_GRAPH_CACHE; i++) any |= c->graphs[i].used != 0;
    if (!any)
        return;
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < LG_GRAPH_CACHE; i++) drop_entry(c, &c->graphs[i]);
}

/* the slot: any thread (cu_device_scope) */
void cu_graph_reset(lg_backend *be)
{
    CU_ON_DEVICE(CU_CTX(be));
    cu_graph_reset_ctx(CU_CTX(be));
}

int cu_graph_begin(lg_backend *be, const void *key, size_t key_len, bool *replayed)
{
    cuda_ctx *c = CU_CTX(be);
    *replayed = false;
    if (c->capturing)
        return CU_FAIL(c, "graph_begin: a recording is already open");
    if (!key || key_len == 0 || key_len > LG_GRAPH_KEY_MAX)
        return CU_FAIL(c, "graph_begin: key of %zu bytes (1..%d)", key_len, LG_GRAPH_KEY_MAX);
    for (int i = 0; i < LG_GRAPH_CACHE; i++) {
        struct cuda_ctx::cu_graph_entry *e = &c->graphs[i];
        if (e->used && e->key_len == key_len && memcmp(e->key, key, key_len) == 0) {
            e->used = ++c->graph_clock;
            cu_step_timing_start(c);
            CU_TRY(c, cudaGraphLaunch(e->exec, c->stream));
            *replayed = true;
            return 0;
        }
    }
    memcpy(c->cap_key, key, key_len);
    c->cap_key_len = key_len;
    c->rec_t0 = lg_now();
    CU_TRY(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    return 0;
}

int cu_graph_end(lg_backend *be, bool ok)
{
    cuda_ctx *c = CU_CTX(be);
    if (!c->capturing)
        return 0; /* after a replay */
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    if (e != cudaSuccess || !g) {
        cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        return ok ? CU_FAIL(c, "graph_end: recording the step failed: %s", cudaGetErrorString(e)) : -1;
    }
    if (!ok) {
        cudaGraphDestroy(g);
        return -1;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return CU_FAIL(c, "graph_end: cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
    }
    /* slot: an empty one, else the least recently used (synchronise before destroying it) */
    struct cuda_ctx::cu_graph_entry *slot = NULL;
    for (int i = 0; i < LG_GRAPH_CACHE && !slot; i++)
        if (!c->graphs[i].used)
            slot = &c->graphs[i];
    if (!slot) {
        slot = &c->graphs[0];
        for (int i = 1; i < LG_GRAPH_CACHE; i++)
            if (c->graphs[i].used < slot->used)
                slot = &c->graphs[i];
        CU_TRY(c, cudaStreamSynchronize(c->stream));
        drop_entry(c, slot);
    }
    memcpy(slot->key, c->cap_key, c->cap_key_len);
    slot->key_len = c->cap_key_len;
    slot->exec = exec;
    slot->used = ++c->graph_clock;
    CU_TRY(c, cudaGraphLaunch(exec, c->stream));
    const double ms = (lg_now() - c->rec_t0) * 1e3; /* the op calls, capture, instantiation and the launch */
    c->n_rec++;
    c->rec_ms += ms;
    c->rec_max_ms = ms > c->rec_max_ms ? ms : c->rec_max_ms;
    return 0;
}

/* ---- LG_STEP_TIMING=1: how long replayed decode steps keep the GPU busy, and how long it
 * idles between two of them (host work, uploads, the launch), from events on the stream;
 * printed to stderr when the backend is freed. A diagnostic for benchmarks: the events
 * add no synchronisation (the step's download already waits). */
void cu_step_timing_start(cuda_ctx *c)
{
    if (!c->st) {
        if (!c->tune->step_timing || c->st_failed)
            return;
        c->st = (struct cuda_ctx::cu_step_timing *)calloc(1, sizeof *c->st);
        bool ok = c->st != NULL;
        for (int i = 0; ok && i < CU_ST_RING; i++)
            ok = cudaEventCreate(&c->st->start[i]) == cudaSuccess && cudaEventCreate(&c->st->end[i]) == cudaSuccess;
        if (!ok) {
            cu_step_timing_free(c);
            c->st_failed = 1;
            return;
        }
    }
    struct cuda_ctx::cu_step_timing *t = c->st;
    cudaEventRecord(t->start[t->head % CU_ST_RING], c->stream);
    t->started[t->head % CU_ST_RING] = 1;
}

/* before the step's result download: its end on the stream (replayed steps only); the next step is enqueued next */
void cu_step_timing_mark(cuda_ctx *c)
{
    struct cuda_ctx::cu_step_timing *t = c->st;
    if (!t)
        return;
    if (t->started[t->head % CU_ST_RING])
        cudaEventRecord(t->end[t->head % CU_ST_RING], c->stream);
    t->head++;
}

static void add_sample(float *v, long *n, double *sum, float ms)
{
    if (*n < CU_ST_SAMPLES)
        v[*n] = ms;
    *sum += ms;
    ++*n;
}

/* after the wait for a step's download (steps in the order they were enqueued): its GPU time, and the idle gap since
 * the step before */
void cu_step_timing_done(cuda_ctx *c)
{
    struct cuda_ctx::cu_step_timing *t = c->st;
    if (!t || t->tail == t->head)
        return;
    const unsigned i = t->tail % CU_ST_RING, p = (t->tail - 1) % CU_ST_RING;
    t->tail++;
    if (!t->started[i]) { /* an eager step (prefill): the next gap would span it */
        t->prev_ok = 0;
        return;
    }
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, t->start[i], t->end[i]) == cudaSuccess)
        add_sample(t->busy, &t->n, &t->busy_ms, ms);
    if (t->prev_ok && cudaEventElapsedTime(&ms, t->end[p], t->start[i]) == cudaSuccess)
        add_sample(t->gap, &t->n_gap, &t->gap_ms, ms);
    t->prev_ok = 1;
    t->started[i] = 0;
}

static int cmp_f(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void quantiles(const char *what, float *v, long n)
{
    if (n > CU_ST_SAMPLES)
        n = CU_ST_SAMPLES;
    if (n <= 0)
        return;
    qsort(v, (size_t)n, sizeof *v, cmp_f);
    fprintf(stderr, "step timing: %s ms: min %.4f p10 %.4f median %.4f p90 %.4f max %.4f\n", what, v[0], v[n / 10],
            v[n / 2], v[n - 1 - n / 10], v[n - 1]);
}

void cu_step_timing_free(cuda_ctx *c)
{
    struct cuda_ctx::cu_step_timing *t = c->st;
    if (!t)
        return;
    if (c->n_rec)
        fprintf(stderr, "step timing: %ld step recordings, host ms from the lookup's miss to the launch: mean %.3f max %.3f\n",
                c->n_rec, c->rec_ms / (double)c->n_rec, c->rec_max_ms);
    if (t->n)
        fprintf(stderr, "step timing: %ld replayed steps, GPU %.4f ms/step from launch to result; %ld gaps, GPU idle %.4f ms/gap\n",
                t->n, t->busy_ms / (double)t->n, t->n_gap, t->n_gap ? t->gap_ms / (double)t->n_gap : 0.0);
    if (t->n >= CU_ST_LAST && t->n <= CU_ST_SAMPLES) {
        /* the last steps alone: a bench's measured decode, without its warm-up's replays of other shapes */
        float last[CU_ST_LAST];
        memcpy(last, t->busy + t->n - CU_ST_LAST, sizeof last);
        qsort(last, CU_ST_LAST, sizeof *last, cmp_f);
        fprintf(stderr, "step timing: GPU per replayed step, last %d, ms: median %.4f\n", CU_ST_LAST,
                (last[CU_ST_LAST / 2 - 1] + last[CU_ST_LAST / 2]) / 2);
    }
    quantiles("GPU per replayed step", t->busy, t->n);
    quantiles("GPU idle between steps", t->gap, t->n_gap);
    for (int i = 0; i < CU_ST_RING; i++) {
        if (t->start[i])
            cudaEventDestroy(t->start[i]);
        if (t->end[i])
            cudaEventDestroy(t->end[i]);
    }
    free(t);
    c->st = NULL;
}
