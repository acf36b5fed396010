#!/bin/sh
# bench_sgmv.sh — builds tests/gpu/bench_sgmv.c against the CUDA build
# (build-cuda, as tests/gpu/run_device.sh leaves it) and runs it: SGMV
# shrink/expand alone vs the copy bandwidth. Run from the repository root
# on the GPU machine, after run_device.sh (or a cmake build of build-cuda).
# Output: the table on stdout, also in $OUT/bench_sgmv_${LABEL:-current}.txt when OUT is set
# (LABEL=old LG_SGMV_PREFILL=0: the prefill cases on the CUDA-core kernels).
# BASELINE=dir: first build and run the same bench against the
# lora_shrink.cu / lora_expand.cu found in dir (an earlier version, say
# `git show HEAD~1:kernels/lora_shrink.cu > dir/lora_shrink.cu`), for a
# before/after table from one call.
set -eu
BUILD=${BUILD:-build-cuda}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
[ -d .deps/root ] && export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build "$BUILD" --target bench_sgmv >/dev/null  # CMake target (CUDA builds)
run() { # binary label
    echo "== $2"
    if [ -n "${OUT:-}" ]; then "$1" | tee "$OUT/bench_sgmv_$2.txt"; else "$1"; fi
}
if [ -n "${BASELINE:-}" ]; then
    B=$BUILD/sgmv_baseline
    mkdir -p "$B"
    if ! grep -q lg_cuda_compute_stream "$BASELINE/lora_shrink.cu"; then
        printf '#include "ops.cuh"\nextern "C" cudaStream_t lg_cuda_compute_stream(lg_backend *be) { return CU_CTX(be)->stream; }\n' \
            >"$B/stream_hook.cu"
        nvcc -O3 -std=c++17 -arch=sm_90a -Iengine -I. -Ikernels -c "$B/stream_hook.cu" -o "$B/stream_hook.o"
    fi
    if ! grep -q lg_cuda_lora_expand_store "$BASELINE/lora_expand.cu"; then  # no store form there: "-"
        { echo '#include "ops.cuh"'
          echo 'int cu_lora_expand_store(lg_backend *, const lg_tensor *, lg_tensor, const lg_lora_meta *, const int *, int) { return 1; }'
          echo 'extern "C" int lg_cuda_lora_expand_store(lg_backend *, const lg_tensor *, lg_tensor, const lg_lora_meta *, const int *, int) { return 1; }'
        } >"$B/store_hook.cu"
        nvcc -O3 -std=c++17 -arch=sm_90a -Iengine -I. -Ikernels -c "$B/store_hook.cu" -o "$B/store_hook.o"
    fi
    for f in lora_shrink lora_expand; do
        nvcc -O3 -std=c++17 -arch=sm_90a -Iengine -I. -Ikernels -c "$BASELINE/$f.cu" -o "$B/$f.o" &
    done
    wait
    gcc -O2 -std=c11 -D_GNU_SOURCE -DLG_HAVE_CUDA=1 -Iengine -I. -I"$CUDA_HOME/include" tests/gpu/bench_sgmv.c \
        "$B"/*.o "$BUILD/liblgcore.a" "$BUILD/liblgcuda.a" -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib64/stubs" \
        -lcudart -lcublas -lcublasLt -lstdc++ -lpthread -lm -ldl -lrt -o "$B/bench_sgmv"
    run "$B/bench_sgmv" baseline
fi
run "$BUILD/bench_sgmv" "${LABEL:-current}"
