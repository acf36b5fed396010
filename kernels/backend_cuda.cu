/*
 * backend_cuda.cu — the CUDA backend's context and memory slots; the ops
 * live one per file beside this (see ops.cuh).
 *
 * Context: one device, a compute stream that every op, upload, download and
 * copy is ordered on, a cuBLAS handle bound to that stream (with its own
 * workspace, so cuBLAS never allocates mid-step), a grow-only op workspace,
 * and two pinned staging buffers for uploads from pageable memory.
 *
 * upload: the caller's buffer may be reused as soon as upload returns
 * (small or pageable copies go through pinned staging; each staging buffer
 * is reused only after the event of its previous copy has fired). download
 * is synchronous; a large one into pageable memory is pipelined through
 * the pinned staging buffers in DOWN_CHUNK pieces. alloc is cudaMalloc (pool-sized, rare); dealloc is
 * cudaFree (synchronises the device: never on the step path).
 *
 * Activation dtype: F16, or BF16 when opts->act_dtype_hint == LG_BF16.
 *
 * Devices and threads: create makes its device the calling thread's current
 * one (and leaves it so); the ops launch on the calling thread's current
 * device, so they run on a thread bound to the backend (create, or the
 * bind_thread slot: group.cu). The memory slots here and in host_mem.cu,
 * graph_reset and free work from any thread: each opens a cu_device_scope
 * (below), which makes the backend's device current for the call and puts
 * the caller's back after.
 *
 * Switches: lg_tuning_read fills be->tune from the environment here, once;
 * the optional slots below (LG_FUSE_*), programmatic launch (LG_PDL) and
 * every kernel's choices (c->tune) come from it (engine/base/tuning.h).
 */
#include "kernels/ops.cuh"
#include "kernels/sample_ops.cuh" /* optional slots: sample.cu, host_mem.cu */

#include <cuda.h> /* CUcontext, CUresult: cuCtxGetCurrent's types (cu_device_scope); no libcuda link */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define STAGE_BYTES ((size_t)8 << 20)
#define BLAS_WS_BYTES ((size_t)32 << 20)
#define DOWN_CHUNK ((size_t)512 << 10) /* pageable downloads at least this large go through staging */

int cu_fail_at(cuda_ctx *c, const char *file, int line, const char *fmt, ...)
{
    char buf[512];
    const char *base = strrchr(file, '/');
    int n = snprintf(buf, sizeof buf, "%s:%d: ", base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof buf)
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (c)
        memcpy(c->last_err, buf, sizeof buf);
    fprintf(stderr, "cuda backend: %s\n", buf);
    return -1;
}

int cu_check_view(cuda_ctx *c, const char *what, lg_tensor t, const char *file, int line)
{
    if (!t.data)
        return cu_fail_at(c, file, line, "%s: expected data, found NULL", what);
    if (!cu_is_float(t.dtype))
        return cu_fail_at(c, file, line, "%s: expected f32/f16/bf16, found %s", what, lg_dtype_name(t.dtype));
    if (t.rows < 0 || t.cols <= 0 || t.stride < t.cols || t.rows > INT32_MAX || t.cols > INT32_MAX ||
        t.stride > INT32_MAX)
        return cu_fail_at(c, file, line, "%s: bad shape rows=%lld cols=%lld stride=%lld", what, (long long)t.rows,
                          (long long)t.cols, (long long)t.stride);
    return 0;
}

int cu_carve_for(const cuda_ctx *c, size_t smem, int blocks)
{
    const size_t need = (smem + c->smem_reserved) * (size_t)(blocks > 0 ? blocks : 1);
    if (c->smem_per_sm == 0 || need >= c->smem_per_sm)
        return 100;
    return (int)((need * 100 + c->smem_per_sm - 1) / c->smem_per_sm);
}

/* the op tests' view of cu_carve_for on this backend's device */
extern "C" int lg_cuda_carve_for(lg_backend *be, size_t smem, int blocks) { return cu_carve_for(CU_CTX(be), smem, blocks); }

int cu_resident_blocks(const cuda_ctx *c, const void *f, int threads, size_t smem)
{
    /* per device: the attribute is set on the current device only (a device's ops come from one thread) */
    static const void *keys[CU_MAX_DEVICES][128];
    static int vals[CU_MAX_DEVICES][128];
    const int d = cu_dev_slot(c);
    int i = 0;
    if (d >= 0)
        for (; i < 128 && keys[d][i]; i++)
            if (keys[d][i] == f)
                return vals[d][i];
    int n = 0;
    if ((smem > 0 && cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (d >= 0 && i < 128)
        vals[d][i] = n, keys[d][i] = f;
    return n;
}

/* ---- the calling thread's device (cu_device_scope, cuda_common.cuh) ------------------ */

/* cuCtxGetCurrent, through the runtime (the library links no libcuda); resolved once, at the first create */
typedef CUresult (*ctx_get_current_fn)(CUcontext *);
static ctx_get_current_fn ctx_get_current(void)
{
    static const ctx_get_current_fn f = [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            p = NULL;
        }
        return (ctx_get_current_fn)p;
    }();
    return f;
}

cu_device_scope::cu_device_scope(int device) : prev(-1)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) {
        cudaGetLastError();
        cur = -1;
    }
    if (cur == device)
        return;
    /* a thread without a context (never used CUDA) keeps the backend's device */
    CUcontext ctx = NULL;
    const ctx_get_current_fn f = ctx_get_current();
    const bool had_context = cur >= 0 && (!f || (f(&ctx) == CUDA_SUCCESS && ctx != NULL));
    if (cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError(); /* the guarded call fails and says so */
        return;
    }
    prev = had_context ? cur : -1;
}

cu_device_scope::~cu_device_scope()
{
    if (prev >= 0 && cudaSetDevice(prev) != cudaSuccess)
        cudaGetLastError();
}

void *cu_workspace(cuda_ctx *c, size_t n)
{
    if (n <= c->ws_size)
        return c->ws;
    /* the old buffer may be in use by enqueued work or named by a recorded
     * graph: retire it (no sync, so this is legal while recording) */
    if (c->ws) {
        if (c->n_ws_retired == (int)(sizeof c->ws_retired / sizeof *c->ws_retired)) {
            if (c->capturing)
                return NULL;
            cu_graph_reset_ctx(c); /* syncs; no recording names a retired buffer after this */
            for (int i = 0; i < c->n_ws_retired; i++) cudaFree(c->ws_retired[i]);
            c->n_ws_retired = 0;
        }
        c->ws_retired[c->n_ws_retired++] = c->ws;
    }
    c->ws = NULL;
    c->ws_size = 0;
    size_t sz = n + n / 2;
    if (cudaMalloc(&c->ws, sz) != cudaSuccess) {
        c->ws = NULL;
        return NULL;
    }
    c->ws_size = sz;
    return c->ws;
}

/* ---- memory ------------------------------------------------------------------ */

static void *cuda_alloc(lg_backend *be, size_t size)
{
    CU_ON_DEVICE(CU_CTX(be));
    void *p = NULL;
    if (cudaMalloc(&p, size ? size : 256) != cudaSuccess) {
        cudaGetLastError(); /* clear the (non-sticky) allocation error */
        CU_FAIL(CU_CTX(be), "cudaMalloc of %zu bytes failed", size);
        return NULL;
    }
    return p;
}

static void cuda_dealloc(lg_backend *be, void *p)
{
    if (p) {
        CU_ON_DEVICE(CU_CTX(be));
        cudaFree(p);
        cu_qf8_forget(CU_CTX(be)); /* what matmul_f8_lt.cu learned of weights by their addresses */
    }
}

static bool is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

static int cuda_mem_info(lg_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    CU_ON_DEVICE(CU_CTX(be));
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return CU_FAIL(CU_CTX(be), "cudaMemGetInfo failed: %s", cudaGetErrorString(e));
    return 0;
}

static int cuda_upload(lg_backend *be, void *dst, const void *src, size_t n)
{
    cuda_ctx *c = CU_CTX(be);
    if (!n)
        return 0;
    CU_ON_DEVICE(c);
    if (is_pinned(src) && n > STAGE_BYTES) {
        /* large pinned source: direct DMA; the caller keeps src until sync */
        CU_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
        return 0;
    }
    for (size_t off = 0; off < n; off += c->stage_size) {
        size_t len = n - off < c->stage_size ? n - off : c->stage_size;
        int i = c->stage_next;
        c->stage_next ^= 1;
        CU_TRY(c, cudaEventSynchronize(c->stage_done[i]));
        memcpy(c->stage[i], (const char *)src + off, len);
        CU_TRY(c, cudaMemcpyAsync((char *)dst + off, c->stage[i], len, cudaMemcpyHostToDevice, c->stream));
        CU_TRY(c, cudaEventRecord(c->stage_done[i], c->stream));
    }
    return 0;
}

static int cuda_download(lg_backend *be, void *dst, const void *src, size_t n)
{
    cuda_ctx *c = CU_CTX(be);
    if (!n)
        return 0;
    CU_ON_DEVICE(c);
    if (n < DOWN_CHUNK || is_pinned(dst)) {
        cu_step_timing_mark(c);
        CU_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
        CU_TRY(c, cudaStreamSynchronize(c->stream));
        cu_step_timing_done(c);
        return 0;
    }
    /* large pageable destination (the step's logits): DMA chunks into the two
     * pinned staging buffers and copy each out while the next one is in flight */
    size_t prev_off = 0, prev_len = 0;
    int prev = -1;
    for (size_t off = 0; off < n; off += DOWN_CHUNK) {
        size_t len = n - off < DOWN_CHUNK ? n - off : DOWN_CHUNK;
        int i = c->stage_next;
        c->stage_next ^= 1;
        CU_TRY(c, cudaEventSynchronize(c->stage_done[i])); /* an earlier upload from this buffer */
        CU_TRY(c, cudaMemcpyAsync(c->stage[i], (const char *)src + off, len, cudaMemcpyDeviceToHost, c->stream));
        CU_TRY(c, cudaEventRecord(c->stage_done[i], c->stream));
        if (prev >= 0) {
            CU_TRY(c, cudaEventSynchronize(c->stage_done[prev]));
            memcpy((char *)dst + prev_off, c->stage[prev], prev_len);
        }
        prev = i, prev_off = off, prev_len = len;
    }
    CU_TRY(c, cudaEventSynchronize(c->stage_done[prev]));
    memcpy((char *)dst + prev_off, c->stage[prev], prev_len);
    return 0;
}

/* dst: page-locked (alloc_host). The step's end for LG_STEP_TIMING is marked here and its timing
 * read at the wait, as the synchronous download does. */
static int cuda_download_async(lg_backend *be, void *dst, const void *src, size_t n, uint64_t *ticket)
{
    cuda_ctx *c = CU_CTX(be);
    if (!ticket || (n && (!dst || !src)))
        return CU_FAIL(c, "download_async: expected dst, src and a ticket pointer");
    if (c->down_issued - c->down_waited >= LG_DOWNLOAD_IN_FLIGHT)
        return CU_FAIL(c, "download_async: %d copies already in flight (at most %d)",
                       (int)(c->down_issued - c->down_waited), LG_DOWNLOAD_IN_FLIGHT);
    CU_ON_DEVICE(c);
    cu_step_timing_mark(c);
    if (n)
        CU_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    const uint64_t t = ++c->down_issued;
    CU_TRY(c, cudaEventRecord(c->down_ev[t % LG_DOWNLOAD_IN_FLIGHT], c->stream));
    *ticket = t;
    return 0;
}

static int cuda_download_wait(lg_backend *be, uint64_t ticket)
{
    cuda_ctx *c = CU_CTX(be);
    if (ticket != c->down_waited + 1 || ticket > c->down_issued)
        return CU_FAIL(c, "download_wait: expected ticket %llu (waits in ticket order), found %llu",
                       (unsigned long long)(c->down_waited + 1), (unsigned long long)ticket);
    c->down_waited = ticket;
    CU_ON_DEVICE(c);
    CU_TRY(c, cudaEventSynchronize(c->down_ev[ticket % LG_DOWNLOAD_IN_FLIGHT]));
    cu_step_timing_done(c);
    return 0;
}

static int cuda_copy(lg_backend *be, void *dst, const void *src, size_t n)
{
    cuda_ctx *c = CU_CTX(be);
    if (!n)
        return 0;
    CU_ON_DEVICE(c);
    CU_TRY(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream));
    return 0;
}

static int cuda_sync(lg_backend *be)
{
    cuda_ctx *c = CU_CTX(be);
    CU_ON_DEVICE(c);
    CU_TRY(c, cudaStreamSynchronize(c->stream));
    CU_TRY(c, cudaGetLastError());
    return 0;
}

static void cuda_free(lg_backend *be)
{
    if (!be)
        return;
    cuda_ctx *c = CU_CTX(be);
    if (c) {
        CU_ON_DEVICE(c);
        if (c->capturing) { /* freed while recording (an op failed and the caller gave up): drop the recording */
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g)
                cudaGraphDestroy(g);
            cudaGetLastError();
            c->capturing = 0;
        }
        if (c->stream)
            cudaStreamSynchronize(c->stream);
        /* the recordings first: NCCL's communicator waits, when the group's last one is destroyed, until no
         * graph holds a collective of it (group.cu) */
        cu_graph_reset_ctx(c);
        cu_group_leave(c);
        if (c->blas)
            cublasDestroy(c->blas);
        cu_qf8_lt_free(c);
        cudaFree(c->blas_ws);
        cudaFree(c->sem);
        cu_step_timing_free(c);
        cudaFree(c->ws);
        for (int i = 0; i < c->n_ws_retired; i++) cudaFree(c->ws_retired[i]);
        for (int i = 0; i < 2; i++) {
            if (c->stage[i])
                cudaFreeHost(c->stage[i]);
            if (c->stage_done[i])
                cudaEventDestroy(c->stage_done[i]);
        }
        for (int i = 0; i < LG_DOWNLOAD_IN_FLIGHT; i++)
            if (c->down_ev[i])
                cudaEventDestroy(c->down_ev[i]);
        if (c->upload_stream)
            cudaStreamDestroy(c->upload_stream);
        if (c->stream)
            cudaStreamDestroy(c->stream);
        free(c);
    }
    free(be);
}

static int create_fail(lg_err *err, lg_backend *be, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int create_fail(lg_err *err, lg_backend *be, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    cuda_free(be);
    return -1;
}

extern "C" int lg_backend_cuda_create(const lg_backend_opts *opts, lg_backend **out, lg_err *err)
{
    *out = NULL;
    int dev = opts ? opts->device : 0, n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        cudaGetLastError();
        return create_fail(err, NULL, "cuda backend: no usable CUDA device (%s)",
                           e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    if (dev < 0 || dev >= n_dev)
        return create_fail(err, NULL, "cuda backend: device %d requested, %d present", dev, n_dev);
    lg_dtype act = opts && opts->act_dtype_hint == LG_BF16 ? LG_BF16 : LG_F16;
    if (opts && opts->act_dtype_hint != LG_F16 && opts->act_dtype_hint != LG_BF16 && opts->act_dtype_hint != LG_F32)
        return create_fail(err, NULL, "cuda backend: act dtype hint must be f16 or bf16");

    lg_backend *be = (lg_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(c);
        return create_fail(err, be, "cuda backend: out of host memory");
    }
    be->ctx = c;
    c->device = dev;
    c->tp_size = 1; /* one rank until group_init */
    lg_tuning_read(&be->tune);
    c->tune = &be->tune;
#define CREATE_TRY(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess)                                                                    \
            return create_fail(err, be, "cuda backend: %s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)
    CREATE_TRY(cudaSetDevice(dev));
    (void)ctx_get_current(); /* resolved once, here (cu_device_scope) */
    cudaDeviceProp prop;
    CREATE_TRY(cudaGetDeviceProperties(&prop, dev));
    if (prop.major < 8)
        return create_fail(err, be, "cuda backend: device %d (%s) has compute capability %d.%d; 8.0+ needed", dev,
                           prop.name, prop.major, prop.minor);
    c->n_sm = prop.multiProcessorCount;
    c->cc_major = prop.major;
    c->max_smem_optin = prop.sharedMemPerBlockOptin;
    c->smem_per_sm = prop.sharedMemPerMultiprocessor;
    c->smem_reserved = prop.reservedSharedMemPerBlock;
    CREATE_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CREATE_TRY(cudaStreamCreateWithFlags(&c->upload_stream, cudaStreamNonBlocking));
    c->stage_size = STAGE_BYTES;
    for (int i = 0; i < 2; i++) {
        CREATE_TRY(cudaMallocHost(&c->stage[i], c->stage_size));
        CREATE_TRY(cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming));
        CREATE_TRY(cudaEventRecord(c->stage_done[i], c->stream));
    }
    for (int i = 0; i < LG_DOWNLOAD_IN_FLIGHT; i++)
        CREATE_TRY(cudaEventCreateWithFlags(&c->down_ev[i], cudaEventDisableTiming));
    c->pdl = c->tune->pdl != 0 && prop.major >= 9; /* programmatic dependent launch of step kernels (cuda_common.cuh) */
    CREATE_TRY(cudaMalloc(&c->sem, CU_SEM_COUNT * sizeof(int)));
    CREATE_TRY(cudaMemset(c->sem, 0, CU_SEM_COUNT * sizeof(int)));
    CREATE_TRY(cudaDeviceSynchronize());
    c->blas_ws_size = BLAS_WS_BYTES;
    CREATE_TRY(cudaMalloc(&c->blas_ws, c->blas_ws_size));
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return create_fail(err, be, "cuda backend: cublasCreate failed");
    }
    if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_size) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        return create_fail(err, be, "cuda backend: configuring cuBLAS failed");
#undef CREATE_TRY

    be->act_dtype = act;
    be->n_threads = 1;
    lg_backend_i *i = &be->i;
    i->name = "cuda";
    i->free = cuda_free;
    i->alloc = cuda_alloc;
    i->dealloc = cuda_dealloc;
    i->upload = cuda_upload;
    i->download = cuda_download;
    i->copy = cuda_copy;
    i->download_async = cuda_download_async;
    i->download_wait = cuda_download_wait;
    i->sync = cuda_sync;
    i->embed = cu_embed;
    i->add_rmsnorm = cu_add_rmsnorm;
    i->matmul = cu_matmul;
    i->takes_quant = cu_takes_quant; /* the planar checkpoint layouts (matmul_f8.cu, matmul_i4.cu) */
    i->rope = cu_rope;
    i->kv_write = cu_kv_write;
    i->attention = cu_attention;
    i->silu_mul = cu_silu_mul;
    i->gelu_mul = cu_gelu_mul;
    i->head_rmsnorm = cu_head_rmsnorm;
    i->scale_cap = cu_scale_cap;
    i->get_rows = cu_get_rows;
    i->convert = cu_convert;
    i->lora_shrink = cu_lora_shrink;
    i->lora_expand = cu_lora_expand;
    i->lora_shrink_multi = cu_lora_shrink_multi;
    i->lora_expand_multi = cu_lora_expand_multi;
    i->graph_begin = cu_graph_begin;
    i->graph_end = cu_graph_end;
    i->decode_kv_key = cu_decode_kv_key;
    i->graph_reset = cu_graph_reset;
    i->mem_info = cuda_mem_info;
    /* tensor parallelism (group.cu): NCCL, loaded at run time (nccl.cu) */
    i->group_init = cu_group_init;
    i->all_reduce = cu_all_reduce;
    i->bind_thread = cu_bind_thread;
    /* LG_FUSE_ROPE_KV=0: rope and kv_write as two ops (comparisons) */
    i->rope_kv_write = c->tune->fuse_rope_kv ? cu_rope_kv_write : NULL;
    /* the matmul_lora slot (matmul_lora.cu: prefill expands before the matmul); LG_FUSE_LORA=0: off, model.c
     * runs shrink, matmul, expand */
    i->matmul_lora = c->tune->fuse_lora ? cu_matmul_lora : NULL;
    /* LG_FUSE_NORM=0: add_rmsnorm, matmul (and silu_mul) as separate ops (comparisons) */
    i->norm_matmul = c->tune->fuse_norm ? cu_norm_matmul : NULL;
    /* the norm inside a decode step's LoRA shrink (lora_shrink.cu); off with matmul_lora, or with
     * LG_SHRINK_NORM=0 (per launch) */
    i->norm_matmul_lora = i->matmul_lora ? cu_norm_matmul_lora : NULL;
    /* optional slots (sample.cu, host_mem.cu): device sampling; pinned host
     * memory + async uploads (attach also wraps i->free to release its ring) */
    i->sample = cu_sample;
    i->mask_logits = cu_mask_logits;
    if (cu_host_mem_attach(be) != 0)
        return create_fail(err, be, "cuda backend: %s", c->last_err);
    *out = be;
    return 0;
}
