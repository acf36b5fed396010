#!/usr/bin/env bash
# run_device.sh — everything the GPU test machine checks and measures, in one
# call: build with CUDA, the op tests against the CPU backend, the golden
# HF/peft fixtures end to end on the CUDA backend, and the benchmarks of
# docs/benchmarks.md next to their HF references.
#
#   bash tests/gpu/run_device.sh [all|test|bench|serving]     (from the repo root)
#
# serving: the serving-runtime workloads (tests/gpu/serving_bench.sh: W1,
# adapter load latency, W2 many adapters, W3 shared prompts, W4 flooding
# tenant); DEADLINE=s (default 540) skips later steps past it, saying so.
# TARGETS=loragate builds only the binary (default: all targets).
#
# Needs nvcc, cmake, python3 with torch/transformers/peft/pytest (the GPU
# machine's image). Missing Debian libraries (jansson, pcre2, utf8proc) are
# taken from .deps/*.deb when present (tests/gpu/deps_env.sh).
# Logs and JSON results go to $OUT (default build-cuda/out); a summary is
# printed last. SKIP_HF=1 skips the HF baselines; BENCH_EAGER=1 adds the W1
# runs with step graphs off (LG_NO_GRAPHS=1).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/build-cuda/out}
mkdir -p "$OUT"
WHAT=${1:-all}
export PYTHONUNBUFFERED=1

. tests/gpu/deps_env.sh

summary=()
note() { summary+=("$*"); echo "== $*"; }
DEADLINE=${DEADLINE:-540}
late() { if [ "$SECONDS" -gt "$DEADLINE" ]; then note "SKIPPED (past ${DEADLINE}s): $*"; return 0; fi; return 1; }

t0=$(date +%s)
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
cmake --build build-cuda -j"$(nproc)" --target ${TARGETS:-all} >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
note "build: $(( $(date +%s) - t0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
BIN=$ROOT/build-cuda/loragate

if [ "$WHAT" = all ] || [ "$WHAT" = test ]; then
  build-cuda/test_cuda_ops >"$OUT/test_cuda_ops.log" 2>&1
  note "op tests: rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_ops.log" | tail -1)"
  build-cuda/test_cuda_sample >"$OUT/test_cuda_sample.log" 2>&1
  note "device sampler vs host: rc=$? $(tail -1 "$OUT/test_cuda_sample.log")"
  # f16: every fixture computed in f16; auto: each in its weight dtype (f32
  # weights in f16 until the CUDA backend computes in f32). Forcing bf16 on
  # f16 weights loses mantissa bits and is not a configuration we serve.
  for dt in f16 auto; do
    cdt=float16
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype $dt" LG_COMPUTE_DTYPE=$cdt python3 -m pytest -q tests/golden \
      >"$OUT/golden_cuda_$dt.log" 2>&1
    note "golden on cuda (--dtype $dt): $(tail -1 "$OUT/golden_cuda_$dt.log")"
  done
fi

if [ "$WHAT" = all ] || [ "$WHAT" = serving ]; then
  . tests/gpu/serving_bench.sh
fi

if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  M=tests/bench/llama2-7b-shape
  W1="--model $M --load-format dummy --backend cuda --dtype f16 --num-seqs 32 --prompt-len 128 --output-len 64"
  $BIN bench $W1 --adapters 32 --rank 16 --targets q,k,v,o --json >"$OUT/w1_lora.json" 2>"$OUT/w1_lora.err"
  note "W1 ours, 32 rank-16 adapters: $(cat "$OUT/w1_lora.json") $(tail -1 "$OUT/w1_lora.err")"
  $BIN bench $W1 --json >"$OUT/w1_base.json" 2>"$OUT/w1_base.err"
  note "W1 ours, no adapters: $(cat "$OUT/w1_base.json") $(tail -1 "$OUT/w1_base.err")"
  $BIN bench --model $M --load-format dummy --backend cuda --dtype f16 --num-seqs 1 --prompt-len 128 \
    --output-len 128 --json >"$OUT/b1.json" 2>"$OUT/b1.err"
  note "batch-1 decode: $(cat "$OUT/b1.json")"
  $BIN bench --model $M --load-format dummy --backend cuda --dtype f16 --num-seqs 1 --prompt-len 2048 \
    --output-len 1 --step-tokens 2048 --json >"$OUT/pf2048.json" 2>"$OUT/pf2048.err"
  note "prefill 2048: $(cat "$OUT/pf2048.json")"
  if [ -n "${BENCH_EAGER:-}" ]; then  # the same W1 runs without step graphs, for comparison
    LG_NO_GRAPHS=1 $BIN bench $W1 --adapters 32 --rank 16 --targets q,k,v,o --json >"$OUT/w1_lora_eager.json" 2>&1
    note "W1 ours, 32 adapters, LG_NO_GRAPHS=1: $(cat "$OUT/w1_lora_eager.json")"
    LG_NO_GRAPHS=1 $BIN bench $W1 --json >"$OUT/w1_base_eager.json" 2>&1
    note "W1 ours, no adapters, LG_NO_GRAPHS=1: $(cat "$OUT/w1_base_eager.json")"
  fi
  if [ -n "${SKIP_HF:-}" ]; then
    echo; echo "================ summary ================"; printf '%s\n' "${summary[@]}"; exit 0
  fi
  python3 tests/bench/hf_w1.py --mode base >"$OUT/hf_base.json" 2>"$OUT/hf_base.err"
  note "W1 HF transformers: $(tail -1 "$OUT/hf_base.json")"
  python3 tests/bench/hf_w1.py --mode peft --adapters 32 --rank 16 >"$OUT/hf_peft.json" 2>"$OUT/hf_peft.err"
  note "W1 HF peft: $(tail -1 "$OUT/hf_peft.json") $(tail -2 "$OUT/hf_peft.err" | head -1)"
fi

echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
