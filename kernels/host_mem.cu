/*
 * host_mem.cu — the optional memory slots of backend.h: page-locked host
 * memory (alloc_host / free_host) and asynchronous host-to-device copies on
 * the context's upload stream (upload_async / upload_done), so adapter
 * weights can move while the compute stream runs a step.
 *
 * Tickets: upload_async numbers its copies 1, 2, 3, ... per backend and
 * records event ring[t % RING] on the upload stream after copy t. Copies on
 * one stream finish in order, so once copy t is seen done every ticket <= t
 * is done too (`done` keeps that floor). Invariant: for done < t <= issued,
 * ring[t % RING] still holds copy t's event; upload_async keeps it by
 * waiting for copy t - RING before reusing its slot (the host blocks only
 * with RING copies in flight).
 *
 * Ordering: the upload stream is not ordered against the compute stream in
 * either direction. The caller guarantees that no enqueued op reads or writes
 * dst until upload_done(ticket) == 1 (backend.h), and that src, from
 * alloc_host, stays untouched until then.
 *
 * State: cuda_ctx has no field for the ring, so rings live in a small table
 * keyed by backend, created by cu_host_mem_attach and released by the
 * be->i.free it wraps. TODO: once cuda_common.cuh can change, a pointer in
 * cuda_ctx and a call in cuda_free replace the table and the wrap.
 * Not thread-safe per backend (like every slot); the table itself is locked.
 * Any thread may call these (each makes the backend's device current for
 * the call: cu_device_scope, cuda_common.cuh).
 */
#include "kernels/sample_ops.cuh"

#include <pthread.h>
#include <string.h>
#include <stdlib.h>

#define UPLOAD_RING 64
#define MAX_BACKENDS 16

typedef struct upload_ring {
    lg_backend *be;               /* NULL: free table slot */
    void (*inner_free)(lg_backend *be);
    cudaEvent_t ev[UPLOAD_RING];
    uint64_t issued;              /* last ticket handed out */
    uint64_t done;                /* every ticket <= done has finished */
} upload_ring;

static upload_ring rings[MAX_BACKENDS];
static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;

static upload_ring *ring_of(lg_backend *be)
{
    upload_ring *r = NULL;
    pthread_mutex_lock(&rings_lock);
    for (int i = 0; i < MAX_BACKENDS && !r; i++)
        if (rings[i].be == be)
            r = &rings[i];
    pthread_mutex_unlock(&rings_lock);
    return r;
}

/* ---- pinned memory ------------------------------------------------------------ */

static void *cu_alloc_host(lg_backend *be, size_t size)
{
    CU_ON_DEVICE(CU_CTX(be));
    void *p = NULL;
    if (cudaHostAlloc(&p, size ? size : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError(); /* non-sticky */
        CU_FAIL(CU_CTX(be), "cudaHostAlloc of %zu bytes failed", size);
        return NULL;
    }
    return p;
}

/* May synchronise the device (cudaFreeHost): not on the step path. */
static void cu_free_host(lg_backend *be, void *p)
{
    if (!p)
        return;
    CU_ON_DEVICE(CU_CTX(be));
    if (cudaFreeHost(p) != cudaSuccess) {
        cudaGetLastError();
        CU_FAIL(CU_CTX(be), "cudaFreeHost(%p) failed", p);
    }
}

/* ---- asynchronous uploads ---------------------------------------------------- */

static int cu_upload_async(lg_backend *be, void *dst, const void *src, size_t n, uint64_t *ticket)
{
    cuda_ctx *c = CU_CTX(be);
    upload_ring *r = ring_of(be);
    if (!r || !ticket)
        return CU_FAIL(c, "upload_async: expected an attached backend and a ticket pointer");
    if (n && (!dst || !src))
        return CU_FAIL(c, "upload_async: expected dst and src, found dst=%p src=%p", dst, src);
    CU_ON_DEVICE(c);
    cudaPointerAttributes at;
    if (n && (cudaPointerGetAttributes(&at, src) != cudaSuccess || at.type != cudaMemoryTypeHost)) {
        cudaGetLastError();
        return CU_FAIL(c, "upload_async: expected src from alloc_host (page-locked), found %p", src);
    }
    uint64_t t = r->issued + 1;
    cudaEvent_t ev = r->ev[t % UPLOAD_RING];
    if (t > UPLOAD_RING && r->done < t - UPLOAD_RING) { /* the slot's previous copy */
        CU_TRY(c, cudaEventSynchronize(ev));
        r->done = t - UPLOAD_RING;
    }
    if (n)
        CU_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->upload_stream));
    CU_TRY(c, cudaEventRecord(ev, c->upload_stream));
    r->issued = t;
    *ticket = t;
    return 0;
}

static int cu_upload_done(lg_backend *be, uint64_t ticket)
{
    cuda_ctx *c = CU_CTX(be);
    upload_ring *r = ring_of(be);
    if (!r || ticket == 0 || ticket > r->issued)
        return CU_FAIL(c, "upload_done: expected a ticket in [1, %llu], found %llu",
                       (unsigned long long)(r ? r->issued : 0), (unsigned long long)ticket);
    if (ticket <= r->done)
        return 1;
    CU_ON_DEVICE(c);
    cudaError_t e = cudaEventQuery(r->ev[ticket % UPLOAD_RING]);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess)
        return CU_FAIL(c, "upload_done: copy %llu failed: %s", (unsigned long long)ticket, cudaGetErrorString(e));
    r->done = ticket;
    return 1;
}

/* ---- attach / release ---------------------------------------------------------- */

static void ring_release(upload_ring *r)
{
    for (int i = 0; i < UPLOAD_RING; i++)
        if (r->ev[i])
            cudaEventDestroy(r->ev[i]);
    pthread_mutex_lock(&rings_lock);
    memset(r, 0, sizeof *r);
    pthread_mutex_unlock(&rings_lock);
}

/* The wrapped be->i.free: waits for copies in flight, frees the ring, then
 * the backend itself. */
static void host_mem_free(lg_backend *be)
{
    if (!be)
        return;
    upload_ring *r = ring_of(be);
    if (!r) /* not attached (cannot happen): nothing of ours to release */
        return;
    void (*inner)(lg_backend *) = r->inner_free;
    if (CU_CTX(be)) {
        CU_ON_DEVICE(CU_CTX(be));
        if (CU_CTX(be)->upload_stream)
            cudaStreamSynchronize(CU_CTX(be)->upload_stream);
        ring_release(r);
    } else {
        ring_release(r);
    }
    if (inner)
        inner(be);
}

int cu_host_mem_attach(lg_backend *be)
{
    cuda_ctx *c = CU_CTX(be);
    upload_ring *r = NULL;
    pthread_mutex_lock(&rings_lock);
    for (int i = 0; i < MAX_BACKENDS && !r; i++)
        if (!rings[i].be) {
            r = &rings[i];
            r->be = be; /* claimed; events follow */
        }
    pthread_mutex_unlock(&rings_lock);
    if (!r)
        return CU_FAIL(c, "host_mem: more than %d CUDA backends alive", MAX_BACKENDS);
    for (int i = 0; i < UPLOAD_RING; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            r->ev[i] = NULL;
            ring_release(r);
            return CU_FAIL(c, "cudaEventCreateWithFlags failed: %s", cudaGetErrorString(e));
        }
    }
    r->inner_free = be->i.free;
    be->i.free = host_mem_free;
    be->i.alloc_host = cu_alloc_host;
    be->i.free_host = cu_free_host;
    be->i.upload_async = cu_upload_async;
    be->i.upload_done = cu_upload_done;
    return 0;
}
