#!/usr/bin/env bash
# run_sample_test.sh — builds and runs tests/gpu/test_cuda_sample (the CUDA
# backend's sample / alloc_host / upload_async slots against the host sampler).
#
#   bash tests/gpu/run_sample_test.sh            (from the repo root, on a GPU machine)
#
# Builds build-cuda with the repo's CMake (jansson/pcre2/utf8proc taken from
# .deps/*.deb when present, as in run_device.sh) and its test_cuda_sample
# target. With
# SKIP_BUILD=1 and an existing build-cuda/test_cuda_sample that loads, it is
# run as is (a binary built on a machine with the same CUDA toolkit).
# Log: $OUT/test_cuda_sample.log (default build-cuda/). Exit status: the test's.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/build-cuda}
mkdir -p "$OUT"
BIN=build-cuda/test_cuda_sample

if [ "${SKIP_BUILD:-0}" != 1 ] || ! [ -x "$BIN" ] || ldd "$BIN" | grep -q "not found"; then
  . tests/gpu/deps_env.sh
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
  cmake --build build-cuda -j"$(nproc)" --target test_sampling test_cuda_sample >"$OUT/build.log" 2>&1 ||
    { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
  build-cuda/test_sampling >"$OUT/test_sampling.log" 2>&1
  echo "host sampler unit test: rc=$? $(tail -1 "$OUT/test_sampling.log")"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
"$BIN" >"$OUT/test_cuda_sample.log" 2>"$OUT/test_cuda_sample.stderr"
rc=$?
head -c 6000 "$OUT/test_cuda_sample.stderr"
cat "$OUT/test_cuda_sample.log"
exit $rc
