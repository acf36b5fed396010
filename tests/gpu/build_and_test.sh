#!/bin/sh
# build_and_test.sh — builds loragate with the CUDA backend (the repo's CMake)
# and runs tests/gpu/test_cuda_ops against it on this machine's GPU.
#
# Run from the repository root on a machine with a GPU and nvcc. When
# jansson/pcre2 development files are missing, put their .deb files in .deps/
# (apt-get download libjansson4 libjansson-dev libpcre2-8-0 libpcre2-dev);
# they are unpacked into .deps/root and found through pkg-config.
# Logs go to $OUT (or build-cuda/) when set. Exit status: the test's.
set -eu
ROOT=$(pwd)
LOG=${OUT:-$ROOT/build-cuda}
mkdir -p "$LOG"
BUILD=${BUILD:-build-cuda}
. tests/gpu/deps_env.sh
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >"$LOG/cmake.log" 2>&1; then
    cmake --build "$BUILD" -j"$(nproc)" >"$LOG/build.log" 2>&1 || { grep -E "error|Error" "$LOG/build.log" | head -30; exit 1; }
else
    # no jansson/pcre2/libcrypto here: build just what the test needs, by hand
    echo "cmake configure failed (see cmake.log); building the backend files directly"
    tail -5 "$LOG/cmake.log"
    mkdir -p "$BUILD/direct"
    for f in kernels/*.cu; do
        nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -Iengine -I. -c "$f" -o "$BUILD/direct/$(basename "$f").o" &
    done
    for f in engine/backend_cpu.c engine/common.c engine/threadpool.c engine/cpu_matmul.c; do
        gcc -O3 -march=native -fopenmp-simd -std=c11 -D_GNU_SOURCE -DLG_HAVE_CUDA=1 -Iengine -I. -c "$f" \
            -o "$BUILD/direct/$(basename "$f").o" &
    done
    wait
    rm -f "$BUILD/liblgcore.a" "$BUILD/liblgcuda.a"
    ar rcs "$BUILD/liblgcuda.a" "$BUILD"/direct/*.cu.o
    ar rcs "$BUILD/liblgcore.a" "$BUILD"/direct/*.c.o
fi
gcc -O2 -std=c11 -D_GNU_SOURCE -DLG_HAVE_CUDA=1 -Iengine -I. tests/gpu/test_cuda_ops.c \
    "$BUILD/liblgcore.a" "$BUILD/liblgcuda.a" -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib64/stubs" \
    -lcudart -lcublas -lcublasLt -lstdc++ -lpthread -lm -ldl -lrt -o "$BUILD/test_cuda_ops"
echo "built $BUILD/test_cuda_ops"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
set +e
"$BUILD/test_cuda_ops" "$@" >"$LOG/test_cuda_ops.log" 2>"$LOG/test_cuda_ops.stderr"
rc=$?
tail -30 "$LOG/test_cuda_ops.stderr"
cat "$LOG/test_cuda_ops.log"
exit $rc
