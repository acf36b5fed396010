/*
 * tuning.h — the LG_* environment switches, all of them: one table
 * (lg_tuning_table, tuning.c) says each one's name, default, effect and
 * reader, and one struct (lg_tuning) holds their values. The table sits in
 * the shared utilities (engine/base) so that both backends, the CPU one in
 * engine/backend and the CUDA one in kernels/, read it without depending on
 * each other.
 *
 * Read once: each backend's create (lg_backend_cpu_create,
 * lg_backend_cuda_create) fills its lg_backend.tune with lg_tuning_read, and
 * code reads the switches from there: the CUDA kernels through their
 * cuda_ctx (c->tune), the model and the runtime through
 * lg_backend_tuning(be). Nothing else calls getenv for an LG_* variable
 * (one exception, a path rather than a switch: LG_NCCL_LIBRARY, the NCCL
 * library a tensor-parallel CUDA group opens, read by kernels/nccl.cu), and
 * no file caches a switch of its own. LG_* variables that the table does not
 * name are ignored.
 *
 * Values are integers: unset or empty, the default; else the number C's
 * atoi reads from the value (so "0" and "1" mean what the table says, and a
 * value that is not a number reads as 0). Most switches exist to compare a
 * kept path with its alternative (results and speed: tests/gpu/run_device.sh
 * runs them) or to print a diagnostic; none is needed to serve.
 *
 * Tests and benchmarks may change a backend's values between ops (for
 * example be->tune.gemv = 11 forces a GEMV variant in tests/gpu); the engine
 * only reads them. Values the model and the engine take at their create
 * (host_sample, no_graphs, step_timing, burst, device_penalties,
 * device_logprobs, device_masks, fast_forward) and the CUDA backend's slots and launch attribute (pdl,
 * fuse_*) are fixed from then on.
 */
#ifndef LG_TUNING_H
#define LG_TUNING_H

#include <stddef.h>

typedef struct lg_tuning {
    /* engine/runtime/engine.c */
    int burst;             /* LG_BURST */
    int device_penalties;  /* LG_DEVICE_PENALTIES */
    int device_logprobs;   /* LG_DEVICE_LOGPROBS */
    int device_masks;      /* LG_DEVICE_MASKS */
    int fast_forward;      /* LG_FAST_FORWARD */
    /* engine/model/model.c */
    int host_sample;       /* LG_HOST_SAMPLE */
    int no_graphs;         /* LG_NO_GRAPHS */
    int step_timing;       /* LG_STEP_TIMING (also kernels/graph.cu) */
    /* engine/backend/backend_cpu.c */
    int cpu_device_sample; /* LG_CPU_DEVICE_SAMPLE */
    int cpu_isa;           /* LG_CPU_ISA */
    /* engine/base/common.c (lg_err_locations) */
    int debug_errors;      /* LG_DEBUG_ERRORS */
    /* kernels/ (the CUDA backend) */
    int pdl;               /* LG_PDL */
    int fuse_rope_kv;      /* LG_FUSE_ROPE_KV */
    int fuse_lora;         /* LG_FUSE_LORA */
    int fuse_norm;         /* LG_FUSE_NORM */
    int norm_rope;         /* LG_NORM_ROPE */
    int lora_first;        /* LG_LORA_FIRST */
    int expand_rope;       /* LG_EXPAND_ROPE */
    int shrink_norm;       /* LG_SHRINK_NORM */
    int shrink_rg;         /* LG_SHRINK_RG */
    int l2_hint;           /* LG_L2_HINT */
    int attn_fa2;          /* LG_ATTN_FA2 */
    int streamk;           /* LG_STREAMK */
    int gemv;              /* LG_GEMV */
    int qmm_lt_min_t;      /* LG_QMM_LT_MIN_T */
    int qgemv;             /* LG_QGEMV */
    int dec_resident_kb;   /* LG_DEC_RESIDENT_KB */
    int sgmv_prefill;      /* LG_SGMV_PREFILL */
    int shrink_wide;       /* LG_SHRINK_WIDE */
    int exm_tpb;           /* LG_EXM_TPB */
    int sample_cluster;    /* LG_SAMPLE_CLUSTER */
    int sample_hist;       /* LG_SAMPLE_HIST */
} lg_tuning;

/* One switch: its environment variable, where its value lives in lg_tuning, its default, what a value
 * does and which code reads it (and which tests set it). */
typedef struct lg_tuning_switch {
    const char *name;
    size_t offset; /* offsetof(lg_tuning, field) */
    int def;
    const char *effect;
    const char *reader;
} lg_tuning_switch;

extern const lg_tuning_switch lg_tuning_table[];
extern const int lg_tuning_count;

/* Every switch at its default. */
void lg_tuning_defaults(lg_tuning *t);
/* Every switch from the environment (unset or empty: its default). Also sets the process-wide
 * lg_err_locations (engine/base/common.h) from LG_DEBUG_ERRORS. */
void lg_tuning_read(lg_tuning *t);
/* The value of switch i (< lg_tuning_count) in t. */
int lg_tuning_value(const lg_tuning *t, int i);

#endif
