/* bench_cuda.cuh — what the standalone CUDA microbenchmarks (tests/gpu/bench_*.cu) share: the kernels'
 * device helpers (cuda_common.cuh: ld_stream16, the engine's load past L1) and a status check that
 * reports and returns 1 from the caller. */
#pragma once
#include "kernels/cuda_common.cuh"

#include <stdio.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)
