/*
 * group.cu — tensor parallelism on the CUDA backend: the group_init,
 * all_reduce and bind_thread slots of backend.h, over NCCL (loaded at run
 * time: nccl.cu). Host code only.
 *
 * A group is n >= 2 CUDA backends on distinct devices of this process;
 * bes[r] is rank r. group_init makes one NCCL communicator per device with
 * ncclCommInitAll (one call, from one thread), enables peer access between
 * the devices where the hardware allows (NCCL does not need it; copies
 * between the ranks' memory can use it), runs one small all-reduce over
 * every rank (ncclGroupStart/End from this thread) so that NCCL's connections
 * exist and a broken link is reported here rather than in the first step,
 * and keeps the communicator, rank and size in each backend's cuda_ctx.
 *
 * all_reduce: ncclAllReduce (sum, in place) on the rank's compute stream,
 * ordered after the ops before it. It is recorded by step graphs like any
 * op (graph.cu captures in relaxed mode; NCCL supports capture from 2.9,
 * which group_init requires); a recorded collective is collective again at
 * every replay, so every rank records and replays the same steps. Each rank
 * is driven by its own thread (bind_thread): with several GPUs a thread,
 * NCCL documents that cudaGraphLaunch may block and deadlock.
 *
 * Freeing: cuda_free destroys the rank's communicator (cu_group_leave)
 * after its stream is idle and its recordings are destroyed. For
 * communicators of one ncclCommInitAll, ncclCommDestroy is local to its
 * rank until the last of the group, which frees what they share once no
 * graph holds a collective of any of them; so the backends may be freed in
 * any order (rank 0 first included) and from any thread. A rank whose
 * stream still holds a collective that the other ranks never enqueue waits
 * for it forever at free (as at sync): the caller enqueues the same
 * collectives on every rank.
 */
#include "kernels/nccl.cuh"
#include "kernels/ops.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_MIN_CAPTURE CU_NCCL_VERSION(2, 9, 0)  /* graph capture of collectives */
#define NCCL_MIN_BF16 CU_NCCL_VERSION(2, 10, 0)    /* ncclBfloat16 */
#define GROUP_MAX 64

/* NCCL's calls may leave another device current (a group's end sets each communicator's device in turn): the
 * calling thread's device before such a call, and putting it back after */
static int device_now(void)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return d;
}
static void device_back(int dev)
{
    if (dev >= 0 && device_now() != dev && cudaSetDevice(dev) != cudaSuccess)
        cudaGetLastError();
}

/* peer access both ways between every two devices of the group, where the hardware allows */
static void enable_peers(cuda_ctx *const *cs, int n)
{
    for (int i = 0; i < n; i++) {
        CU_ON_DEVICE(cs[i]);
        for (int j = 0; j < n; j++) {
            int can = 0;
            if (j == i || cudaDeviceCanAccessPeer(&can, cs[i]->device, cs[j]->device) != cudaSuccess || !can) {
                cudaGetLastError();
                continue;
            }
            if (cudaDeviceEnablePeerAccess(cs[j]->device, 0) != cudaSuccess)
                cudaGetLastError(); /* already enabled, or not possible: NCCL does not need it */
        }
    }
}

/* one all-reduce of one float over every rank, from this thread (grouped), waited for: 0 or -1 with err */
static int warm_up(const cu_nccl *nc, cuda_ctx *const *cs, const cu_nccl_comm *comms, int n, lg_err *err)
{
    float *buf[GROUP_MAX] = {0};
    int rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        CU_ON_DEVICE(cs[r]);
        if (cudaMalloc(&buf[r], sizeof(float)) != cudaSuccess ||
            cudaMemsetAsync(buf[r], 0, sizeof(float), cs[r]->stream) != cudaSuccess) {
            cudaGetLastError();
            rc = lg_fail(err, "cuda group: a scratch float on device %d failed", cs[r]->device);
        }
    }
    if (rc == 0) {
        const int dev = device_now();
        int e = nc->group_start();
        for (int r = 0; r < n && e == CU_NCCL_SUCCESS; r++)
            e = nc->all_reduce(buf[r], buf[r], 1, CU_NCCL_FLOAT32, CU_NCCL_SUM, comms[r], cs[r]->stream);
        const int e2 = nc->group_end();
        device_back(dev);
        if (e == CU_NCCL_SUCCESS)
            e = e2;
        if (e != CU_NCCL_SUCCESS)
            rc = lg_fail(err, "cuda group: the first all-reduce over %d ranks failed: %s", n, nc->error_string(e));
    }
    for (int r = 0; r < n; r++) {
        CU_ON_DEVICE(cs[r]);
        cudaError_t ce = cudaStreamSynchronize(cs[r]->stream);
        if (ce != cudaSuccess && rc == 0)
            rc = lg_fail(err, "cuda group: the first all-reduce on device %d failed: %s", cs[r]->device,
                         cudaGetErrorString(ce));
        cudaFree(buf[r]);
        cudaGetLastError();
    }
    return rc;
}

int cu_group_init(lg_backend *const *bes, int n, lg_err *err)
{
    if (!bes || n < 2 || n > GROUP_MAX)
        return lg_fail(err, "cuda group: expected 2..%d backends, found %d", GROUP_MAX, bes ? n : 0);
    cuda_ctx *cs[GROUP_MAX];
    int devs[GROUP_MAX];
    for (int r = 0; r < n; r++) {
        if (!bes[r] || bes[r]->i.group_init != cu_group_init)
            return lg_fail(err, "cuda group: rank %d is not a CUDA backend (%s)", r,
                           bes[r] && bes[r]->i.name ? bes[r]->i.name : "NULL");
        cs[r] = CU_CTX(bes[r]);
        devs[r] = cs[r]->device;
        if (cs[r]->nccl_comm)
            return lg_fail(err, "cuda group: rank %d (device %d) is already in a group of %d", r, devs[r],
                           cs[r]->tp_size);
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return lg_fail(err, "cuda group: ranks %d and %d are both on device %d (one device a rank)", q, r,
                               devs[r]);
    }
    const cu_nccl *nc = cu_nccl_load(err);
    if (!nc)
        return -1;
    char ver[32];
    if (nc->version < NCCL_MIN_CAPTURE)
        return lg_fail(err, "cuda group: NCCL %s (%s) is older than 2.9, which step graphs need; install a newer "
                            "nvidia-nccl-cu12 wheel or point LG_NCCL_LIBRARY at one",
                       cu_nccl_version_str(nc->version, ver, sizeof ver), nc->path);
    enable_peers(cs, n);
    cu_nccl_comm comms[GROUP_MAX] = {0};
    const int dev = device_now();
    const int e = nc->comm_init_all(comms, n, devs);
    device_back(dev);
    if (e != CU_NCCL_SUCCESS) {
        char list[GROUP_MAX * 4] = "";
        for (int r = 0, o = 0; r < n && o < (int)sizeof list; r++)
            o += snprintf(list + o, sizeof list - (size_t)o, r ? ",%d" : "%d", devs[r]);
        return lg_fail(err, "cuda group: ncclCommInitAll over devices %s failed: %s (NCCL %s, %s; NCCL_DEBUG=WARN says "
                            "more)",
                       list, nc->error_string(e), cu_nccl_version_str(nc->version, ver, sizeof ver), nc->path);
    }
    if (warm_up(nc, cs, comms, n, err) != 0) {
        for (int r = 0; r < n; r++) {
            nc->comm_destroy(comms[r]);
            device_back(dev);
        }
        return -1;
    }
    for (int r = 0; r < n; r++) {
        cs[r]->nccl_comm = comms[r];
        cs[r]->tp_rank = r;
        cs[r]->tp_size = n;
    }
    return 0;
}

int cu_all_reduce(lg_backend *be, lg_tensor x)
{
    cuda_ctx *c = CU_CTX(be);
    if (!c->nccl_comm)
        return 0; /* not in a group: x is its own sum */
    int dt;
    switch (x.dtype) {
    case LG_F32: dt = CU_NCCL_FLOAT32; break;
    case LG_F16: dt = CU_NCCL_FLOAT16; break;
    case LG_BF16: dt = CU_NCCL_BFLOAT16; break;
    case LG_I32: dt = CU_NCCL_INT32; break;
    default: return CU_FAIL(c, "all_reduce: expected f32, f16, bf16 or i32, found %s", lg_dtype_name(x.dtype));
    }
    if (x.q != LG_QNONE || x.rows < 0 || x.cols < 0 || x.stride != x.cols)
        return CU_FAIL(c, "all_reduce: expected a contiguous plain tensor (stride == cols), found rows=%lld cols=%lld "
                          "stride=%lld q=%s",
                       (long long)x.rows, (long long)x.cols, (long long)x.stride, lg_qtype_get(x.q).name);
    const size_t count = (size_t)x.rows * (size_t)x.cols;
    if (count == 0)
        return 0;
    if (!x.data)
        return CU_FAIL(c, "all_reduce: expected data, found NULL");
    const cu_nccl *nc = cu_nccl_load(NULL); /* loaded by group_init */
    if (!nc)
        return CU_FAIL(c, "all_reduce: NCCL is not loaded");
    if (dt == CU_NCCL_BFLOAT16 && nc->version < NCCL_MIN_BF16) {
        char ver[32];
        return CU_FAIL(c, "all_reduce: bf16 needs NCCL 2.10 or later, found %s",
                       cu_nccl_version_str(nc->version, ver, sizeof ver));
    }
    const int e = nc->all_reduce(x.data, x.data, count, dt, CU_NCCL_SUM, (cu_nccl_comm)c->nccl_comm, c->stream);
    if (e != CU_NCCL_SUCCESS)
        return CU_FAIL(c, "all_reduce: ncclAllReduce of %zu %s on rank %d of %d failed: %s", count,
                       lg_dtype_name(x.dtype), c->tp_rank, c->tp_size, nc->error_string(e));
    return 0;
}

int cu_bind_thread(lg_backend *be)
{
    cuda_ctx *c = CU_CTX(be);
    CU_TRY(c, cudaSetDevice(c->device));
    return 0;
}

/* Called by cuda_free with c's device current (its cu_device_scope), which it leaves current: the last
 * communicator's destroy cleans up every rank's, setting their devices. */
void cu_group_leave(cuda_ctx *c)
{
    if (!c || !c->nccl_comm)
        return;
    const cu_nccl *nc = cu_nccl_load(NULL);
    if (nc) {
        const int e = nc->comm_destroy((cu_nccl_comm)c->nccl_comm);
        device_back(c->device);
        if (e != CU_NCCL_SUCCESS)
            CU_FAIL(c, "ncclCommDestroy of rank %d failed: %s", c->tp_rank, nc->error_string(e));
    }
    c->nccl_comm = NULL;
    c->tp_rank = 0;
    c->tp_size = 1;
}
