#!/bin/sh
# bench_sgmv.sh — builds tests/gpu/bench_sgmv.c against the CUDA build
# (build-cuda, as tests/gpu/run_device.sh leaves it) and runs it: SGMV
# shrink/expand alone vs the copy bandwidth. Run from the repository root
# on the GPU machine, after run_device.sh (or a cmake build of build-cuda).
# Output: the table on stdout, also in $OUT/bench_sgmv_${LABEL:-current}.txt when OUT is set
# (LABEL=old LG_SGMV_PREFILL=0: the prefill cases on the CUDA-core kernels).
# A before/after table of a kernel change: run it on each tree (git keeps the
# earlier one) with its own LABEL.
set -eu
BUILD=${BUILD:-build-cuda}
[ -d .deps/root ] && export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build "$BUILD" --target bench_sgmv >/dev/null  # CMake target (CUDA builds)
echo "== ${LABEL:-current}"
if [ -n "${OUT:-}" ]; then
    "$BUILD/bench_sgmv" | tee "$OUT/bench_sgmv_${LABEL:-current}.txt"
else
    "$BUILD/bench_sgmv"
fi
