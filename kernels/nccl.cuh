/*
 * nccl.cuh — the part of NCCL's C interface the CUDA backend calls, declared
 * here so that the build needs no NCCL header or library (nccl.cu loads
 * libnccl.so.2 at run time; group.cu calls it).
 *
 * ABI: the values below are NCCL's public nccl.h (src/nccl.h.in in
 * NVIDIA/nccl), which NCCL keeps stable across 2.x releases: ncclComm_t is
 * `struct ncclComm *` (opaque here), ncclResult_t, ncclDataType_t and
 * ncclRedOp_t are C enums (int-sized): ncclSuccess = 0, ncclInt32 = 2,
 * ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9 (since 2.10), ncclSum =
 * 0; NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z from 2.9 on (X * 1000 +
 * Y * 100 + Z before), the code ncclGetVersion returns.
 */
#ifndef LG_CUDA_NCCL_CUH
#define LG_CUDA_NCCL_CUH

#include <cuda_runtime.h>
#include <stddef.h>

extern "C" {
#include "engine/base/common.h"
}

typedef struct cu_nccl_comm_opaque *cu_nccl_comm; /* ncclComm_t */

enum {
    CU_NCCL_SUCCESS = 0, /* ncclResult_t ncclSuccess */
    CU_NCCL_INT32 = 2,   /* ncclDataType_t */
    CU_NCCL_FLOAT16 = 6,
    CU_NCCL_FLOAT32 = 7,
    CU_NCCL_BFLOAT16 = 9,
    CU_NCCL_SUM = 0, /* ncclRedOp_t */
};
#define CU_NCCL_VERSION(x, y, z) ((x) * 10000 + (y) * 100 + (z)) /* NCCL_VERSION for 2.9 and later */

/* The loaded library: where it came from, its version code, and its entry points (NCCL's signatures, with
 * the enums as int). */
typedef struct cu_nccl {
    char path[512];
    int version;
    int (*get_version)(int *version);
    const char *(*error_string)(int result);
    int (*comm_init_all)(cu_nccl_comm *comms, int ndev, const int *devlist);
    int (*comm_destroy)(cu_nccl_comm comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int datatype, int op, cu_nccl_comm comm,
                      cudaStream_t stream);
    int (*group_start)(void);
    int (*group_end)(void);
} cu_nccl;

/* NCCL, loaded on the first call (any thread; once per process): NULL with err set to one line naming every
 * place looked in and how to fix it. The library stays loaded for the process's life. */
const cu_nccl *cu_nccl_load(lg_err *err);
/* "x.y.z" of a version code, into buf */
const char *cu_nccl_version_str(int version, char *buf, size_t n);

#endif
