/*
 * tuning.c — the table of LG_* switches (see tuning.h) and its reader.
 *
 * One row per switch, in the order of lg_tuning's fields. A switch that
 * only selected a path no longer built, or reproduced an experiment already
 * decided, is not here (docs/benchmarks.md keeps the measurements; git keeps
 * the code). Adding a switch: a field in lg_tuning, a row here, the reader
 * takes it from its backend; tests/unit/engine/backend/test_tuning.c checks
 * that every field has exactly one row.
 */
#include "engine/base/tuning.h"

#include "engine/base/common.h"

#include <stdlib.h>

const lg_tuning_switch lg_tuning_table[] = {
    {"LG_BURST", offsetof(lg_tuning, burst), 1,
        "0: no decode bursts (the next decode step is not enqueued before the last one's tokens are read)",
        "engine/runtime/engine.c; tests/cli/test_bursts.py, tests/e2e/test_decode_bursts.py"},
    {"LG_DEVICE_PENALTIES", offsetof(lg_tuning, device_penalties), 1,
        "0: rows with presence/frequency penalties are downloaded and sampled on the host",
        "engine/runtime/engine.c; tests/golden/test_golden.py"},
    {"LG_DEVICE_LOGPROBS", offsetof(lg_tuning, device_logprobs), 1,
        "0: logprobs computed on the host from downloaded logits, not by the device sampler",
        "engine/runtime/engine.c; tests/golden/test_golden.py"},
    {"LG_DEVICE_MASKS", offsetof(lg_tuning, device_masks), 1,
        "0: rows under a structured-output grammar are downloaded, masked and sampled on the host",
        "engine/runtime/engine.c; tests/constrain/test_generate_schema.py, tests/gpu/check_structured.py"},
    {"LG_FAST_FORWARD", offsetof(lg_tuning, fast_forward), 1,
        "0: a token a structured-output grammar forces takes its own step instead of being appended at once",
        "engine/runtime/engine.c; tests/unit/engine/runtime/test_engine_constrain.c"},
    {"LG_HOST_SAMPLE", offsetof(lg_tuning, host_sample), 0,
        "1: every row sampled on the host from downloaded logits (the backend's sampler unused)",
        "engine/model/model.c; tests/golden/test_golden.py, tests/cli/test_bursts.py"},
    {"LG_NO_GRAPHS", offsetof(lg_tuning, no_graphs), 0, "1: no step graphs, every step runs eagerly",
        "engine/model/model.c; tests/gpu/run_device.sh, tests/gpu/profile_decode.sh"},
    {"LG_STEP_TIMING", offsetof(lg_tuning, step_timing), 0,
        "1: print where replayed steps' GPU time and decode steps' host time go, when the model and the backend "
        "are freed (a benchmark diagnostic)",
        "engine/model/model.c, kernels/graph.cu; tests/gpu/run_device.sh"},
    {"LG_CPU_DEVICE_SAMPLE", offsetof(lg_tuning, cpu_device_sample), 0,
        "1: the CPU backend offers the `sample` slot, so the device-sampling paths (decode bursts included) run "
        "without a GPU",
        "engine/backend/backend_cpu.c; tests/cli/test_bursts.py, tests/e2e/test_decode_bursts.py"},
    {"LG_CPU_ISA", offsetof(lg_tuning, cpu_isa), 0,
        "the CPU backend's quantized-weight kernels: 0 the best this CPU and OS run, 1 portable C, 2 AVX2, "
        "3 AVX-512 VNNI (a set the machine does not run falls back to the best one it does)",
        "engine/backend/backend_cpu.c; docs/benchmarks.md"},
    {"LG_DEBUG_ERRORS", offsetof(lg_tuning, debug_errors), 0,
        "1: error messages end with the file:line that raised them (from the first backend's creation on)",
        "engine/base/common.c (lg_err_locations)"},
    {"LG_PDL", offsetof(lg_tuning, pdl), 1,
        "0: no programmatic dependent launch: each step kernel starts after the one before ends",
        "kernels/backend_cuda.cu (cuda_ctx.pdl); tests/gpu/run_device.sh"},
    {"LG_FUSE_ROPE_KV", offsetof(lg_tuning, fuse_rope_kv), 1,
        "0: no rope_kv_write slot: rope and kv_write as two launches",
        "kernels/backend_cuda.cu; tests/gpu/run_device.sh"},
    {"LG_FUSE_LORA", offsetof(lg_tuning, fuse_lora), 1,
        "0: no matmul_lora / norm_matmul_lora slots: model.c runs LoRA shrink, matmul and expand as separate ops",
        "kernels/backend_cuda.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_ops.c"},
    {"LG_FUSE_NORM", offsetof(lg_tuning, fuse_norm), 1,
        "0: no norm_matmul slot: add_rmsnorm, the matmul (and silu_mul) as separate ops",
        "kernels/backend_cuda.cu; tests/golden/test_lora_golden.py, tests/gpu/run_device.sh"},
    {"LG_NORM_ROPE", offsetof(lg_tuning, norm_rope), 1,
        "0: the one-row norm + q,k,v GEMV without its rope + KV write epilogue (rope_kv_write after it)",
        "kernels/norm_matmul.cu; tests/golden/test_lora_golden.py, tests/gpu/run_device.sh"},
    {"LG_LORA_FIRST", offsetof(lg_tuning, lora_first), 1,
        "0: a prefill matmul_lora expands after the matmul instead of storing its expand before it",
        "kernels/matmul_lora.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_ops.c"},
    {"LG_EXPAND_ROPE", offsetof(lg_tuning, expand_rope), 1,
        "0: a decode step's q,k,v LoRA expand without rope + KV write (rope_kv_write after it)",
        "kernels/lora_expand.cu; tests/gpu/run_device.sh"},
    {"LG_SHRINK_NORM", offsetof(lg_tuning, shrink_norm), 1,
        "0: a decode step's LoRA shrink without add_rmsnorm (add_rmsnorm runs before it)",
        "kernels/lora_shrink.cu; tests/gpu/run_device.sh"},
    {"LG_SHRINK_RG", offsetof(lg_tuning, shrink_rg), 0,
        "4, 2 or 1: rank rows a block of the decode LoRA shrink (0: by the launch's size; the same bits)",
        "kernels/lora_shrink.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_ops.c"},
    {"LG_L2_HINT", offsetof(lg_tuning, l2_hint), 3,
        "bits of the weight streams read with L2 evict_first: 1 the TMA matmul's W, 2 the decode LoRA kernels' A "
        "and B (0: plain loads)",
        "kernels/gemm_tma.cu, kernels/lora_shrink.cu, kernels/lora_expand.cu; tests/gpu/run_device.sh"},
    {"LG_ATTN_FA2", offsetof(lg_tuning, attn_fa2), 1,
        "0: prefill attention on the wmma kernel for every head_dim (not FlashAttention-2; an e4m3 KV cache: the split-K kernel)",
        "kernels/attention.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_ops.c, tests/gpu/bench_kernels.c"},
    {"LG_STREAMK", offsetof(lg_tuning, streamk), 2,
        "decode matmuls of 2..64 rows on Hopper: 2 the TMA + wgmma stream-K matmul; 0 off (cuBLAS, and the GEMV "
        "up to 4 rows); 20 + v its variant v (0..5) for 1..64 rows",
        "kernels/gemm_tma.cu, kernels/gemm.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_ops.c, "
        "tests/gpu/bench_kernels.c"},
    {"LG_GEMV", offsetof(lg_tuning, gemv), 1,
        "the decode GEMV (1..4 rows): 1 auto; 0 off (cuBLAS, or the TMA matmul); 2 auto with programmatic launch "
        "always; 10 + v its variant v (0..3) for every row count it can take",
        "kernels/gemv.cu, kernels/gemm.cu, kernels/norm_matmul.cu; tests/gpu/test_cuda_ops.c, tests/gpu/bench_gemv.c"},
    {"LG_QMM_LT_MIN_T", offsetof(lg_tuning, qmm_lt_min_t), 129,
        "F8_A8 matmuls (one weight scale a row) of at least this many token rows on cuBLASLt's FP8 GEMM; fewer: "
        "the planar weight stream (qmm.cuh)",
        "kernels/matmul_f8.cu; tests/gpu/test_cuda_qmatmul.c, tests/gpu/run_device.sh"},
    {"LG_QGEMV", offsetof(lg_tuning, qgemv), 1,
        "1: decode matmuls of 1..4 token rows over an FP8 / INT4 checkpoint weight on the CUDA-core GEMV; 0 off "
        "(the tensor-core weight stream, qmm.cuh); 10 + m: the GEMV for 1..m rows only",
        "kernels/qgemv.cu, kernels/matmul_f8.cu, kernels/matmul_i4.cu; tests/gpu/test_cuda_qmatmul.c"},
    {"LG_DEC_RESIDENT_KB", offsetof(lg_tuning, dec_resident_kb), 200,
        "KB of K/V rows a block of the resident decode attention may hold (0: never the resident form)",
        "kernels/attention_decode.cu; tests/gpu/test_cuda_ops.c"},
    {"LG_SGMV_PREFILL", offsetof(lg_tuning, sgmv_prefill), 1,
        "LoRA segments of more than 4 tokens: 1 the tensor-core shrink and tile expand where their grid fills the "
        "GPU; 0 always the CUDA-core kernels; 2 always the prefill kernels",
        "kernels/lora_shrink_mma.cu, kernels/lora_expand.cu; tests/gpu/test_cuda_ops.c, tests/gpu/bench_sgmv.c"},
    {"LG_SHRINK_WIDE", offsetof(lg_tuning, shrink_wide), 1,
        "0: the prefill LoRA shrink always in its shared-memory ring form",
        "kernels/lora_shrink_mma.cu; tests/gpu/test_cuda_ops.c"},
    {"LG_EXM_TPB", offsetof(lg_tuning, exm_tpb), 0,
        "1, 2 or 4: token tiles a block of the prefill store-form expand (0: by the launch's size)",
        "kernels/lora_expand.cu; tests/gpu/test_cuda_ops.c"},
    {"LG_SAMPLE_CLUSTER", offsetof(lg_tuning, sample_cluster), 0,
        "1, 2, 4 or 8: blocks a row of the device sampler (0: by the batch and the vocabulary; the same tokens)",
        "kernels/sample.cu; tests/gpu/run_device.sh, tests/gpu/test_cuda_sample.c"},
    {"LG_SAMPLE_HIST", offsetof(lg_tuning, sample_hist), 1,
        "0: the device sampler's radix histograms by match_any and warp sums instead of shared-memory atomics",
        "kernels/sample.cu; tests/gpu/run_device.sh"},
};

const int lg_tuning_count = (int)(sizeof lg_tuning_table / sizeof lg_tuning_table[0]);
_Static_assert(sizeof lg_tuning_table / sizeof lg_tuning_table[0] == sizeof(lg_tuning) / sizeof(int),
               "one row of lg_tuning_table per field of lg_tuning");

static int *field(lg_tuning *t, int i) { return (int *)((char *)t + lg_tuning_table[i].offset); }

int lg_tuning_value(const lg_tuning *t, int i) { return *(const int *)((const char *)t + lg_tuning_table[i].offset); }

void lg_tuning_defaults(lg_tuning *t)
{
    for (int i = 0; i < lg_tuning_count; i++) *field(t, i) = lg_tuning_table[i].def;
}

void lg_tuning_read(lg_tuning *t)
{
    for (int i = 0; i < lg_tuning_count; i++) {
        const char *e = getenv(lg_tuning_table[i].name);
        *field(t, i) = e && *e ? atoi(e) : lg_tuning_table[i].def;
    }
    lg_err_locations = t->debug_errors != 0;
}
