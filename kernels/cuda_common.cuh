/*
 * cuda_common.cuh — what every CUDA op file shares: the backend context,
 * error reporting, dtype dispatch and element load/store helpers.
 *
 * Error convention: host launchers return 0 or -1. On failure they print one
 * line "file:line: what was expected, what was found" to stderr (the op
 * signature in backend.h has no lg_err) and keep it in cuda_ctx.last_err.
 * Nothing here calls exit().
 *
 * Switches: the LG_* environment switches are read once, when the backend is
 * created, into lg_backend.tune (engine/base/tuning.h, the one table of
 * them); kernels and launchers read them through c->tune, never getenv.
 *
 * Dtypes: activations and the KV cache are F16 or BF16 (be->act_dtype);
 * some ops also take F32 tensors (matmul output for logits, norm weights,
 * biases, LoRA scratch). Kernels are templated on element types; the
 * launchers switch on lg_dtype once, in plain code.
 */
#ifndef LG_CUDA_COMMON_CUH
#define LG_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <stdint.h>

extern "C" {
#include "engine/backend/backend.h"
}

#define CU_ST_SAMPLES 4096 /* steps kept for LG_STEP_TIMING's quantiles */
#define CU_ST_LAST 48      /* and its median of the last steps (a bench's measured decode: 63 steps at 64 tokens) */
#define CU_ST_RING 4       /* steps LG_STEP_TIMING follows at once (two may be in flight: decode bursts) */

typedef struct cuda_ctx {
    int device;
    int n_sm;
    int cc_major;             /* compute capability (9 = Hopper: TMA, wgmma) */
    size_t max_smem_optin;    /* bytes of shared memory a block may opt into */
    size_t smem_per_sm;       /* bytes of shared memory of an SM at its largest carveout */
    size_t smem_reserved;     /* bytes of it the system takes per resident block */
    cudaStream_t stream;      /* compute stream: every op and upload/download */
    cudaStream_t upload_stream; /* reserved for adapter prefetch (not used by the backend.h ops) */
    const lg_tuning *tune;    /* the switches: &be->tune (engine/base/tuning.h), read at create */
    int pdl;                  /* 1: step kernels launch with programmatic dependent launch (cu_launch) */
    int *sem;                 /* [CU_SEM_COUNT] zeroed counters, left zero by every kernel (see CU_SEM_COUNT) */
    cublasHandle_t blas;      /* bound to `stream` */
    void *blas_ws;            /* cuBLAS workspace */
    size_t blas_ws_size;
    void *ws;                 /* op workspace (attention split-K partials), grown on demand */
    size_t ws_size;
    void *stage[2];           /* pinned staging for pageable uploads */
    cudaEvent_t stage_done[2];
    size_t stage_size;
    int stage_next;
    /* download_async / download_wait: event d % LG_DOWNLOAD_IN_FLIGHT follows copy d (tickets 1, 2, ...) */
    cudaEvent_t down_ev[LG_DOWNLOAD_IN_FLIGHT];
    uint64_t down_issued, down_waited;
    void *ws_retired[16];     /* outgrown workspaces: graphs may still name them (freed at cuda_free) */
    int n_ws_retired;
    /* step graphs (graph.cu): an LRU of instantiated recordings */
    struct cu_graph_entry {
        unsigned char key[LG_GRAPH_KEY_MAX];
        size_t key_len;
        cudaGraphExec_t exec;
        uint64_t used;        /* LRU clock; 0 = empty entry */
    } graphs[LG_GRAPH_CACHE];
    uint64_t graph_clock;
    int capturing;            /* 1 between a recording graph_begin and its graph_end */
    unsigned char cap_key[LG_GRAPH_KEY_MAX];
    size_t cap_key_len;
    /* recordings (graph.cu): host time from graph_begin's miss (rec_t0, lg_now seconds) to graph_end's launch
     * (rec_ms summed, rec_max_ms), for LG_STEP_TIMING */
    double rec_t0, rec_ms, rec_max_ms;
    long n_rec;
    /* LG_STEP_TIMING=1 (graph.cu): GPU time of replayed steps and the GPU's idle gap between them; st_failed: its
     * events could not be made (no timing from then on) */
    int st_failed;
    struct cu_step_timing {
        /* a ring of steps: step h's replay records start[h % CU_ST_RING], its result download end[h % CU_ST_RING]
         * (head: the step being enqueued; tail: the next one waited for) */
        cudaEvent_t start[CU_ST_RING], end[CU_ST_RING];
        int started[CU_ST_RING], prev_ok;
        unsigned head, tail;
        long n, n_gap;
        double busy_ms, gap_ms;
        float busy[CU_ST_SAMPLES], gap[CU_ST_SAMPLES]; /* the first CU_ST_SAMPLES of each, for quantiles */
    } *st;
    void *qf8;                /* matmul_f8_lt.cu's state (cuBLASLt handle, weights seen), NULL until used */
    /* tensor parallelism (group.cu): this rank's NCCL communicator (an ncclComm_t), its rank and the group's
     * size; NULL, 0, 1 outside a group. Destroyed by cuda_free (cu_group_leave). */
    void *nccl_comm;
    int tp_rank, tp_size;
    char last_err[512];
} cuda_ctx;

/* LG_STEP_TIMING (graph.cu): before a replay's launch; before the download that ends a step, and after its sync */
void cu_step_timing_start(cuda_ctx *c);
void cu_step_timing_mark(cuda_ctx *c);
void cu_step_timing_done(cuda_ctx *c);
void cu_step_timing_free(cuda_ctx *c);

#define CU_CTX(be) ((cuda_ctx *)(be)->ctx)

/* The entry points that any thread may call (backend.h: alloc .. sync, alloc_host, free_host, upload_async,
 * upload_done, download_async, download_wait, mem_info, graph_reset, free; a group's engine thread allocates
 * and copies for every rank) open one of these first: for its scope the backend's device is the calling
 * thread's current one, and the caller's device comes back after. One cudaGetDevice when the device is already
 * current; a cudaSetDevice each way when not. A thread that had no CUDA context yet keeps the backend's device
 * (setting "device 0" back would create a context on a GPU the process may not use). The ops do not take it:
 * they run on a thread whose device is the backend's (create leaves its device current; bind_thread).
 * backend_cuda.cu. */
struct cu_device_scope {
    int prev; /* the caller's device, set back at the end of the scope; -1: none */
    explicit cu_device_scope(int device);
    ~cu_device_scope();
    cu_device_scope(const cu_device_scope &) = delete;
    cu_device_scope &operator=(const cu_device_scope &) = delete;
};
#define CU_ON_DEVICE(c) cu_device_scope cu_on_device_((c)->device)

/* Per-kernel settings that the launchers cache (the dynamic shared-memory opt-in, occupancy) are kept per device
 * ordinal below this: cudaFuncSetAttribute applies to the current device only, and a group's ranks launch the
 * same kernels on different devices, each from its own thread. A device at or past it is not cached (asked at
 * every launch). cu_dev_slot: c's index into such caches, or -1. */
#define CU_MAX_DEVICES 32
static inline int cu_dev_slot(const cuda_ctx *c)
{
    return c->device >= 0 && c->device < CU_MAX_DEVICES ? c->device : -1;
}

/* Formats into ctx->last_err (ctx may be NULL) and stderr; returns -1. */
int cu_fail_at(cuda_ctx *c, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CU_FAIL(c, ...) cu_fail_at((c), __FILE__, __LINE__, __VA_ARGS__)
/* Checks a CUDA runtime status; on error reports it and returns -1 from the caller. */
#define CU_TRY(c, call)                                                                          \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess)                                                                   \
            return CU_FAIL((c), "%s failed: %s", #call, cudaGetErrorString(e_));                  \
    } while (0)
/* After a launch: catches bad configurations (a kernel's own faults surface at sync). */
#define CU_LAUNCHED(c) CU_TRY((c), cudaGetLastError())

/* Op workspace of at least n bytes on the compute stream; NULL on failure.
 * Growth never frees the old buffer (a recorded graph may name it): it is
 * retired and freed with the backend; so growth is legal while recording. */
void *cu_workspace(cuda_ctx *c, size_t n);

/* The preferred carveout, percent, that holds `blocks` blocks of `smem` bytes of shared memory (static and
 * dynamic) each with their reserve: the fewest, rounded up; 100 when they need more than the SM has. */
int cu_carve_for(const cuda_ctx *c, size_t smem, int blocks);

/* Resident blocks per SM of kernel f at `threads` threads and `smem` dynamic shared memory on c's device
 * (raising its dynamic shared memory limit there first), cached per device and kernel; 0 when it cannot run. */
int cu_resident_blocks(const cuda_ctx *c, const void *f, int threads, size_t smem);

/* Arrival counters for in-kernel split reductions (gemm_tma.cu, attention_decode.cu): each kernel waits (pdl_wait)
 * before touching them and leaves them zero. */
#define CU_SEM_COUNT 65536

static inline bool cu_is_float(lg_dtype t) { return t == LG_F32 || t == LG_F16 || t == LG_BF16; }
static inline bool cu_is_half(lg_dtype t) { return t == LG_F16 || t == LG_BF16; }
__host__ __device__ static inline bool cu_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- element conversion (device) ---- */
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__nv_fp8_e4m3 x) { return float(x); }
/* An e4m3 KV cache element (`--kv-cache-dtype fp8`, backend.h lg_kv_view): e4m3(x / scale), round to nearest
 * even, saturating to +-448 (lg_f32_to_e4m3's rounding); read back as to_f32(e) * scale. */
__device__ __forceinline__ uint8_t kv_e4m3(float x, float scale)
{
    return (uint8_t)__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* Loads one element of a runtime-typed float array (f32/f16/bf16) as float:
 * for small side arrays (norm weights, biases) where a switch costs nothing. */
__device__ __forceinline__ float load_any(const void *p, lg_dtype t, int64_t i)
{
    if (t == LG_F32) return ((const float *)p)[i];
    if (t == LG_F16) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* Host: pick(TX(), TY()) for the matmul types x in f16/bf16, y in f32 or x's type — one place that turns the
 * runtime dtypes into the template arguments of a kernel picker (gemm_tma.cu, gemv.cu). */
template <typename P> static inline auto cu_by_mm_types(lg_dtype xt, lg_dtype yt, P pick)
{
    if (xt == LG_F16)
        return yt == LG_F32 ? pick(__half(), float()) : pick(__half(), __half());
    return yt == LG_F32 ? pick(__nv_bfloat16(), float()) : pick(__nv_bfloat16(), __nv_bfloat16());
}

/* 8 half-precision elements <-> 8 floats through one 16-byte word. */
template <typename T> __device__ __forceinline__ void unpack8(uint4 u, float *f)
{
    const T *h = (const T *)&u;
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = to_f32(h[i]);
}
template <typename T> __device__ __forceinline__ uint4 pack8(const float *f)
{
    uint4 u;
    T *h = (T *)&u;
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = from_f32<T>(f[i]);
    return u;
}

/* 8 norm weights starting at element i (a multiple of 8) as floats (add_rmsnorm.cu, gemv.cuh). */
__device__ __forceinline__ void load_w8(const void *w, lg_dtype wdt, bool w_vec, int i, float *f)
{
    if (w_vec && wdt == LG_F32) {
        float4 a = ((const float4 *)w)[i / 4], b = ((const float4 *)w)[i / 4 + 1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else if (w_vec && wdt == LG_F16) {
        unpack8<__half>(((const uint4 *)w)[i / 8], f);
    } else if (w_vec) {
        unpack8<__nv_bfloat16>(((const uint4 *)w)[i / 8], f);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = load_any(w, wdt, i + e);
    }
}

/* add_rmsnorm's arithmetic on a chunk of 8 (add_rmsnorm.cu's vector kernel and gemv.cuh's norm
 * prologue, which must give the same floats): the residual plus delta, rounded to T, into v (returns
 * the rounded sum, packed); the squares of v added to ss in order; the normed chunk, packed. */
template <typename T> __device__ __forceinline__ uint4 norm_add8(uint4 r, uint4 d, float *v)
{
    float dv[8];
    unpack8<T>(r, v);
    unpack8<T>(d, dv);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] += dv[e];
    const uint4 s = pack8<T>(v); /* the rounded sum is what the norm sees */
    unpack8<T>(s, v);
    return s;
}
__device__ __forceinline__ float norm_sq8(const float *v, float ss)
{
#pragma unroll
    for (int e = 0; e < 8; e++) ss += v[e] * v[e];
    return ss;
}
template <typename T>
__device__ __forceinline__ uint4 norm_scale8(const float *v, float inv, const void *w, lg_dtype wdt, bool w_vec, int i)
{
    float wf[8], y[8];
    load_w8(w, wdt, w_vec, i, wf);
#pragma unroll
    for (int e = 0; e < 8; e++) y[e] = v[e] * inv * wf[e];
    return pack8<T>(y);
}

/* SwiGLU of one element, f32 math (silu_mul.cu, gemv.cuh's fused epilogue). */
__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* The cache row of slot sl (>= 0) in a layer's pages: page sl / page_tokens, row sl % page_tokens
 * of row_bytes; add the layer's k_off or v_off (lg_kv_view). kv_write, rope_kv, the GEMV's rope
 * epilogue and the expand's rope form. */
__device__ __forceinline__ char *kv_slot_row(char *base, size_t page_bytes, int page_tokens, size_t row_bytes, int sl)
{
    return base + (size_t)(sl / page_tokens) * page_bytes + (size_t)(sl % page_tokens) * row_bytes;
}

/* RoPE angle pos * f as cos/sin without the f32 product's rounding (rope.cu's note): hi = pos * f,
 * lo = fma(pos, f, -hi), cos/sin of hi corrected to first order in lo. rope.cu and rope_kv.cu. */
__device__ __forceinline__ void rope_cos_sin(float p, float f, float *co, float *si)
{
    const float hi = p * f, lo = fmaf(p, f, -hi);
    float s, c;
    sincosf(hi, &s, &c);
    *co = c - lo * s;
    *si = s + lo * c;
}

/* One rotated pair of RoPE: (a, b) -> (a cos - b sin, b cos + a sin), each
 * written as one product and one fused multiply-add so that every kernel
 * computing it (rope.cu, rope_kv.cu, the GEMV's rope epilogue in gemv.cuh)
 * gets the same floats whatever the compiler would contract. */
__device__ __forceinline__ void rope_rotate(float a, float b, float co, float si, float *ra, float *rb)
{
    *ra = __fmaf_rn(a, co, -__fmul_rn(b, si));
    *rb = __fmaf_rn(b, co, __fmul_rn(a, si));
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The warp's R x T sums of per-lane partials acc, each reduced over the warp, returned to lane r * T + t
 * (the lane that stores output (row r, token t) of a skinny matmul); other lanes get 0. */
template <int R, int T> __device__ __forceinline__ float warp_sums_to_lanes(const float (&acc)[R][T], int lane)
{
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float s = warp_sum(acc[r][t]);
            if (lane == r * T + t)
                mine = s;
        }
    return mine;
}
__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* add_rmsnorm's first half on one row of a block-wide norm prologue (gemv.cuh's norm, the LoRA
 * shrink's norm form), in the order of add_rmsnorm.cu's vector kernel: that kernel runs a row of
 * K8 <= 1024 chunks of 8 with K8 rounded up to 32 threads, one chunk each; thread c sums its 8
 * squares in order, each warp reduces by xor shuffles, warp 0 sums the warp totals the same way.
 * Here a block of WARPS warps plays those warps: warp w lane l takes chunk l + 32 (w + WARPS j),
 * j < NJ, so every sum is formed in the same order and the mean square is the same float (inv =
 * rsqrtf(it + eps), as there). Leaves in hu the thread's chunks of h = resid (+ delta, rounded; also
 * stored to ro when ro) and returns the mean of h's squares.
 * red: 32 floats of shared memory, free on entry; one __syncthreads (the caller syncs again before
 * red's next use). */
template <typename T, int NJ, int WARPS>
__device__ __forceinline__ float norm_row_ms(const uint4 *r, const uint4 *d, uint4 *ro, int K8, float *red,
                                             uint4 (&hu)[NJ])
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (K8 + 31) >> 5;
    uint4 du[NJ]; /* zeroed: with no value past K8, ptxas kept more registers live (GEMV T = 2: 139 against 120) */
#pragma unroll
    for (int j = 0; j < NJ; j++) du[j] = make_uint4(0, 0, 0, 0);
    float ss[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int ch = lane + 32 * (w + WARPS * j);
        if (ch < K8) {
            hu[j] = r[ch];
            if (d)
                du[j] = d[ch];
        }
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int ch = lane + 32 * (w + WARPS * j);
        float s = 0.0f;
        if (ch < K8) {
            float v[8];
            if (d) {
                hu[j] = norm_add8<T>(hu[j], du[j], v);
                if (ro)
                    ro[ch] = hu[j];
            } else {
                unpack8<T>(hu[j], v);
            }
            s = norm_sq8(v, s);
        }
        ss[j] = s;
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const float s = warp_sum(ss[j]);
        if (lane == 0 && w + WARPS * j < nw)
            red[w + WARPS * j] = s;
    }
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f) / (float)(K8 * 8);
}

/* SGMV blocks (lora_shrink*.cu, lora_expand.cu): the token tile `tile` of tm tokens of segment s,
 * as [*t0, *t0 + *nt); false when the segment ends before it (nothing to do). */
__device__ __forceinline__ bool sgmv_tile(const int32_t *seg_indptr, int s, int tile, int tm, int *t0, int *nt)
{
    const int a = seg_indptr[s] + tile * tm, e = seg_indptr[s + 1];
    if (a >= e)
        return false;
    *t0 = a, *nt = e - a < tm ? e - a : tm;
    return true;
}
/* slot[si] of a kernel parameter array, by plain selects (a dynamic index would copy the array to local memory) */
template <int N> __device__ __forceinline__ int sgmv_pick(const int (&slot)[N], int si)
{
    int v = slot[0];
#pragma unroll
    for (int i = 1; i < N; i++)
        if (si == i) v = slot[i];
    return v;
}

/* ---- programmatic dependent launch (PDL) ----------------------------------
 * A decode step is hundreds of short kernels back to back. Launched through
 * cu_launch with c->pdl set, a kernel may start while the kernel before it
 * on the stream is still finishing, so its launch latency and its first
 * loads overlap its predecessor's tail. Every kernel launched this way:
 *   - calls pdl_trigger() early (lets its own successor start), and
 *   - calls pdl_wait() before it reads anything a kernel of the step may
 *     write (activations, KV cache, LoRA scratch, workspaces, counters) and
 *     before its first global store.
 * Before pdl_wait it may read only what no kernel writes: weights, adapter
 * weights in pool pages, the step metadata uploaded before the step, and the
 * KV rows earlier steps wrote (every step begins with its metadata upload, a
 * stream copy, which waits for every kernel before it; backend.h).
 * pdl_wait returns once the predecessor grid has completed and its memory is
 * visible (so, transitively, every earlier kernel too); in a kernel launched
 * without the attribute both instructions are no-ops. Kernels launched with
 * <<<>>> (cuBLAS's too) keep full stream ordering. LG_PDL=0 turns it off.
 */
__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* ---- L2 eviction priority of streamed weights ------------------------------
 * A decode step streams ~13 GB of weights through the 50 MB L2, each byte used once; marked
 * evict_first they leave L2 before what the step does reuse (likely what gains: the x tiles every
 * block of a matmul reads, split-K partials, the step's activations; not measured apart). The TMA
 * decode matmul reads W (bit 1) and the decode SGMV kernels read the adapters' A and B (bit 2)
 * this way; LG_L2_HINT (default 3) picks, 0 = plain loads. On the H100 (docs/benchmarks.md,
 * GPU kernels, 2026-11-23) W1 without adapters went from 6.43 to 6.12-6.15 ms a step, with its 32
 * adapters from 7.02 to 6.74-6.76. A hint: results never change. */
static inline int cu_l2_hint(const cuda_ctx *c) { return c->tune->l2_hint; }
__device__ __forceinline__ uint64_t l2_policy_first()
{
    uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}
/* 16 bytes read once (streamed weights, K/V rows): past L1 (decode attention, the prefill LoRA shrink) */
__device__ __forceinline__ uint4 ld_stream16(const void *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
/* 16 bytes of a once-a-step weight stream: when hint, past L1 with L2 policy pol; else a plain load
 * (a policy of evict_normal is not the same: it measured slower; docs/benchmarks.md, Tried, not kept, 2026-11-23) */
__device__ __forceinline__ uint4 ld_weight16(const void *p, bool hint, uint64_t pol)
{
    uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (hint) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p), "l"(pol));
        return r;
    }
#endif
    r = *(const uint4 *)p;
    return r;
}

/* Launches kernel<<<grid, block, smem, c->stream>>>(args...), with the PDL
 * attribute when c->pdl (see above: the kernel must use pdl_wait). Returns
 * the launch status (also left for cudaGetLastError / CU_LAUNCHED). cu_launch_on: the same on stream st,
 * with the attribute when pdl (a caller that forces PDL on or off). cu_launch_carve: cu_launch_on with the
 * preferred shared-memory carveout `carve` (percent, cu_carve_for; < 0: the driver's choice).
 *
 * The carveout. An SM splits its 256 KB between L1 and shared memory in a few fixed ways (on the H100 0, 8,
 * 16, 32, 64, 100, 132, 164, 196 or 228 KB shared); it changes the split only while idle, so blocks that
 * start beside a running kernel (programmatic launch) get that kernel's split. Left to the driver, a kernel
 * of one large block per SM (the resident decode attention, 130 KB) got more shared memory than the block
 * needs, and the GEMV blocks that start beside it lost the L1 their loads in flight use (batch 1, H100: o
 * GEMV 13.7 -> 12.0 us a layer with the fewest that holds the block). The GEMV (no shared memory) asks for
 * none: batch 1 4.97 -> 4.93 ms a step (docs/benchmarks.md, GPU kernels, 2026-11-24). Asking the fewest of
 * the fused norm + GEMV (8 KB a block) measured slower (5.01 ms), as did the largest carveout on every launch
 * (batch 1 +0.27 ms; docs/benchmarks.md, Tried, not kept, 2026-11-23): only those two launches ask. */
template <typename... KArgs, typename... Args>
static inline cudaError_t cu_launch_carve(cudaStream_t st, bool pdl, int carve, void (*kernel)(KArgs...), dim3 grid,
                                          dim3 block, size_t smem, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (carve >= 0) {
        attr[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
        attr[n++].val.sharedMemCarveout = (unsigned)carve;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}
template <typename... KArgs, typename... Args>
static inline cudaError_t cu_launch_on(cudaStream_t st, bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                       size_t smem, Args... args)
{
    return cu_launch_carve(st, pdl, -1, kernel, grid, block, smem, args...);
}
template <typename... KArgs, typename... Args>
static inline cudaError_t cu_launch(const cuda_ctx *c, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    Args... args)
{
    return cu_launch_on(c->stream, c->pdl != 0, kernel, grid, block, smem, args...);
}

#endif
