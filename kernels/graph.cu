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
#include "ops.cuh"

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

void cu_graph_reset(lg_backend *be) { cu_graph_reset_ctx(CU_CTX(be)); }

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
            CU_TRY(c, cudaGraphLaunch(e->exec, c->stream));
            *replayed = true;
            return 0;
        }
    }
    memcpy(c->cap_key, key, key_len);
    c->cap_key_len = key_len;
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
    return 0;
}
