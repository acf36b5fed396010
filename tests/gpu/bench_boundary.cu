/*
 * bench_boundary.cu — what a kernel boundary costs inside a replayed graph, by the way the dependent kernel
 * waits for the one before it (issue 10: the W1 decode step has 352 launches, and the trace of its layer puts
 * 1.5-3.5 us above the bytes at every small launch).
 *
 *   cmake --build build-cuda --target bench_boundary && build-cuda/bench_boundary
 *
 * A chain of N launches of one kernel, each block reading its own `kb` KB of a buffer (16-byte loads, the
 * sum stored, so that the reads are kept), captured in a graph and replayed; per launch us for four ways
 * to order launch i + 1 after launch i (each launch reads the same buffer, so shapes of up to ~40 MB read from L2):
 *   plain  no programmatic dependent launch (stream order: launch i + 1 starts after launch i completes)
 *   pdl    the attribute; each block calls griddepcontrol.launch_dependents at its start, then
 *          griddepcontrol.wait (returns once launch i has completed and its memory is visible): the engine's way
 *   flag   the attribute and launch_dependents as pdl, but no griddepcontrol.wait: thread 0 of each block spins
 *          (ld.acquire.gpu) until launch i's counter holds launch i's block count, and each block adds 1 to its
 *          own launch's counter after its stores (__syncthreads, __threadfence, atomicAdd); the counters are
 *          zeroed by a memset at the graph's start (waiting with __nanosleep(32) between polls). The order holds
 *          transitively: every block waits before it signals.
 *   flag2  as flag, signalled by one red.release.gpu add after the block's barrier, polled without a sleep
 * The reads before the wait are a hint of what the engine's kernels do before pdl_wait (weights): with
 * pre = 1 each block loads its bytes before the wait and only the store after it.
 */
#include "tests/gpu/bench_cuda.cuh"

#include <stdlib.h>

struct args {
    const uint4 *src;
    float *dst;
    unsigned *cnt; /* [N + 1]: cnt[i + 1] counts the exits of launch i (cnt[0] preset: launch 0 waits on nothing) */
    int i, mode, words, prev_blocks, pre;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(256) chain_kernel(args a)
{
    if (a.mode)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const uint4 *p = a.src + (size_t)blockIdx.x * a.words;
    float s = 0.0f;
    auto work = [&]() {
        for (int w = threadIdx.x; w < a.words; w += 256) {
            const uint4 v = ld_stream16(p + w);
            s += __uint_as_float(v.x) + __uint_as_float(v.w);
        }
    };
    if (a.pre)
        work();
    if (a.mode == 1) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else if (a.mode >= 2) {
        if (threadIdx.x == 0) {
            if (a.mode == 2)
                while (ld_acquire(a.cnt + a.i) < (unsigned)a.prev_blocks) __nanosleep(32);
            else
                while (ld_acquire(a.cnt + a.i) < (unsigned)a.prev_blocks) {
                }
        }
        __syncthreads();
    }
    if (!a.pre)
        work();
    /* the previous launch's value: a real dependency on the kernel before */
    s += a.dst[(blockIdx.x + 1) % gridDim.x];
    __syncthreads();
    if (threadIdx.x == 0)
        a.dst[blockIdx.x] = s * 1e-30f;
    if (a.mode == 2) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(a.cnt + a.i + 1, 1u);
        }
    } else if (a.mode == 3) { /* the block's stores, then one release add (cumulative through the barrier) */
        __syncthreads();
        if (threadIdx.x == 0)
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.cnt + a.i + 1) : "memory");
    }
}

static int run(int mode, int blocks, int kb, int pre, int n, float *us)
{
    static uint4 *src;
    static float *dst;
    static unsigned *cnt;
    const size_t words = (size_t)kb * 1024 / 16;
    static size_t have;
    if (have < blocks * words) {
        if (src)
            cudaFree(src);
        CK(cudaMalloc(&src, blocks * words * 16));
        CK(cudaMemset(src, 0, blocks * words * 16));
        have = blocks * words;
    }
    if (!dst) {
        CK(cudaMalloc(&dst, 65536 * sizeof(float)));
        CK(cudaMemset(dst, 0, 65536 * sizeof(float)));
        CK(cudaMalloc(&cnt, 65536 * sizeof(unsigned)));
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(cnt, 0, (n + 1) * sizeof(unsigned), st));
    CK(cudaMemsetAsync(cnt, 0xff, sizeof(unsigned), st)); /* launch 0 waits on nothing */
    for (int i = 0; i < n; i++) {
        args a = {src, dst, cnt, i, mode, (int)words, i ? blocks : 0, pre};
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks);
        cfg.blockDim = dim3(256);
        cfg.stream = st;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = mode ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, chain_kernel, a));
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 10;
    CK(cudaEventRecord(e0, st));
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    *us = ms * 1000.0f / reps / n;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(st);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

int main(void)
{
    static const struct {
        int blocks, kb;
    } shapes[] = {{132, 1}, {132, 16}, {264, 16}, {1024, 1}, {1024, 16}, {132, 256}, {528, 64}};
    const int n = 1000;
    printf("per launch us in a graph of %d launches (10 replays): plain / pdl / flag / flag2\n", n);
    for (int pre = 0; pre < 2; pre++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            float t[4];
            for (int m = 0; m < 4; m++)
                if (run(m, shapes[s].blocks, shapes[s].kb, pre, n, &t[m]))
                    return 1;
            const double mb = shapes[s].blocks * (double)shapes[s].kb / 1024.0;
            printf("blocks %5d  KB a block %4d  (%6.2f MB)  loads %s the wait:  %7.3f  %7.3f  %7.3f  %7.3f   flag - pdl %+.3f %+.3f\n",
                   shapes[s].blocks, shapes[s].kb, mb, pre ? "before" : "after ", t[0], t[1], t[2], t[3], t[2] - t[1], t[3] - t[1]);
        }
    return 0;
}
