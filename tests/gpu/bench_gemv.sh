#!/bin/sh
# bench_gemv.sh — builds tests/gpu/bench_gemv.c against the CUDA build
# (build-cuda, as tests/gpu/run_device.sh leaves it) and runs it: the decode
# matmul (T = 1, 2, 4) on the Llama-2-7B shapes, kernels/gemv.cu vs cuBLAS,
# in TB/s of weights read. Run from the repository root on the GPU machine.
# Arguments go to the binary (--sweep: also every GEMV variant and the
# launch without programmatic dependent launch). Output: the table on
# stdout, also in $OUT/bench_gemv.txt when OUT is set.
set -eu
BUILD=${BUILD:-build-cuda}
[ -d .deps/root ] && export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build "$BUILD" --target bench_gemv >/dev/null  # CMake target (CUDA builds)
if [ -n "${OUT:-}" ]; then "$BUILD/bench_gemv" "$@" | tee "$OUT/bench_gemv.txt"; else "$BUILD/bench_gemv" "$@"; fi
