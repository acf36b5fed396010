#!/usr/bin/env bash
# run_device.sh — everything the GPU test machine checks and measures, in one
# call: build with CUDA, the op tests against the CPU backend, the golden
# HF/peft fixtures end to end on the CUDA backend, and every GPU figure of
# docs/benchmarks.md next to its reference.
#
#   bash tests/gpu/run_device.sh [all|test|serving|bench|profile|kernels|structured|models|spec|quant|group|multi]     (from the repo root)
#
# group: builds only test_cuda_group and runs it: the tensor-parallel group on 2 GPUs (NCCL all-reduce from a
# thread a rank, in a step graph, rank 1's memory from device 0; NCCL from the nvidia-nccl wheel or
# LG_NCCL_LIBRARY; NVLink multicast kept off). test runs it too (it skips on one GPU).
#
# multi: the two-GPU checks and figures (tests/gpu/multi_gpu.sh: the group test, the golden fixtures at
# --tensor-parallel-size 2, TP=2 vs TP=1 and graphs vs eager, W1 at TP=1/2, W2 at DP=1/2, the 70B shape at
# TP=2); MULTI_ONLY=REGEX picks parts.
#
# kernels: quick loop for kernel work — builds only test_cuda_ops,
# bench_kernels and test_cuda_qmatmul (unless TARGETS says otherwise), runs the op tests of the
# groups in LG_ONLY (test_cuda_ops.c; e.g. LG_ONLY=attention; qmatmul: test_cuda_qmatmul.c's, the
# planar checkpoint layouts' matmul) and the bench_kernels section ONLY (matmul, prefill or decode;
# empty: all; qmatmul: test_cuda_qmatmul --bench only, which also runs when ONLY is empty);
# ATTN_REF=1 adds PyTorch's SDPA prefill attention (tests/bench/attn_ref.py).
#
# serving: the serving-runtime workloads (tests/gpu/serving_bench.sh: W1,
# adapter load latency, W2 many adapters, W3 shared prompts, W4 flooding
# tenant). TARGETS=loragate builds only the binary (default: all targets).
#
# bench: the ceilings and kernel tables (tests/gpu/bench_kernels.c), then the
# engine workloads, each run twice in a row: with this tree's defaults
# ("new") and with its own decode paths switched off ("old": LG_PDL=0
# LG_ATTN_FA2=0 LG_FUSE_ROPE_KV=0 LG_FUSE_LORA=0 LG_STREAMK=0 LG_FUSE_NORM=0 LG_L2_HINT=0, i.e. separate
# LoRA shrink/expand and rope/kv launches in stream order, the wmma prefill
# attention, cuBLAS for decode batches, no programmatic dependent launch), plus W1 and batch-1 with one
# switch flipped at a time (LG_LORA_FIRST=0: the prefill expand after its matmul; LG_L2_HINT=0: weights read with
# the default L2 policy; LG_EXPAND_ROPE=0: rope + KV write after the q,k,v expand; LG_SHRINK_NORM=0: add_rmsnorm
# before the LoRA shrink, also on W3; LG_SHRINK_RG=4: the decode shrink's blocks at 4 rank rows on W3, whose down
# shrink takes 1). The switches: engine/base/tuning.c.
# EXTRA="label|env|case[|bench options];..." adds runs of any case under any environment (a label run again keeps its
# files as case.label.N.json/.err; with LG_STEP_TIMING=1 in env the line adds the GPU's median time of the last
# 48 replayed steps). TRACE="case ...": each case once more under the CUPTI tracer
# (tests/gpu/cupti_trace.c, a GPU timeline with cuBLAS's kernels), summarised in
# $OUT/trace.<case>.txt by cupti_summary.py (TRACE_ARGS: its options). profile: ncu per-kernel time of one W1 decode step
# (tests/gpu/profile_decode.sh), new and old (PROF_OLD / PROF_OLD_LABEL set the
# reference's environment, PROF_B1=0 skips batch 1). all = test + serving +
# bench + profile.
#
# Needs nvcc, cmake, python3 with torch/transformers/peft/pytest (the GPU
# machine's image). Missing Debian libraries (jansson, pcre2, utf8proc) are
# taken from .deps/*.deb when present (tests/gpu/deps_env.sh). PREBUILT=f.tar.xz:
# binaries built elsewhere with the same CUDA (loragate, test_cuda_ops,
# test_cuda_sample, bench_kernels, ...), used when they load, else built here.
# Logs and JSON results go to $OUT (default build-cuda/out); a summary is
# printed last. bench also runs the HF transformers / peft W1 baselines (slow)
# unless SKIP_HF=1; BENCH_EAGER=1 adds W1 without step graphs.
# DEADLINE=s (default 540): later steps are skipped, and said so, past it.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/build-cuda/out}
mkdir -p "$OUT"
WHAT=${1:-all}
DEADLINE=${DEADLINE:-540}
export PYTHONUNBUFFERED=1

. tests/gpu/deps_env.sh

summary=()
note() { summary+=("$*"); echo "== $*"; }
late() { if [ "$SECONDS" -gt "$DEADLINE" ]; then note "SKIPPED (past ${DEADLINE}s): $*"; return 0; fi; return 1; }
want() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }

BIN=$ROOT/build-cuda/loragate
built=0
if [ -n "${PREBUILT:-}" ] && [ -f "$PREBUILT" ]; then
  mkdir -p build-cuda && tar -xJf "$PREBUILT" -C build-cuda
  if ! ldd "$BIN" build-cuda/test_cuda_ops | grep -q "not found" && "$BIN" --help >/dev/null 2>&1; then
    built=1; note "binaries: prebuilt ($PREBUILT)"
  else
    note "binaries: prebuilt ones do not load here; building"; rm -f build-cuda/loragate
  fi
fi
if [ $built = 0 ]; then
  t0=$SECONDS
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
  [ "$WHAT" = kernels ] && TARGETS=${TARGETS:-"test_cuda_ops bench_kernels test_cuda_qmatmul"}
  [ "$WHAT" = group ] && TARGETS=${TARGETS:-test_cuda_group}
  cmake --build build-cuda -j"$(nproc)" --target ${TARGETS:-all} >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
  note "build: $((SECONDS - t0)) s"
fi
note "device: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader)"

# OLD / OLD_LABEL: the reference configuration of the "old" runs (default: the tree's own decode paths off)
OLD=${OLD:-"LG_PDL=0 LG_ATTN_FA2=0 LG_FUSE_ROPE_KV=0 LG_FUSE_LORA=0 LG_STREAMK=0 LG_FUSE_NORM=0 LG_L2_HINT=0"}
OLD_LABEL=${OLD_LABEL:-old}

if [ "$WHAT" = kernels ]; then
  # KTIMEOUT (s, default 240): a hung kernel ends that step, not the call
  timeout "${KTIMEOUT:-240}" build-cuda/test_cuda_ops --no-bench >"$OUT/test_cuda_ops.log" 2>&1
  note "op tests (LG_ONLY=${LG_ONLY:-all}): rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_ops.log" | tail -1)"
  grep -E "FAIL" "$OUT/test_cuda_ops.log" | head -20
  if [ "${ONLY:-}" != qmatmul ]; then
    timeout "${KTIMEOUT:-240}" build-cuda/bench_kernels ${ONLY:+--only $ONLY} ${BENCH_KERNELS_ARGS:-} 2>&1 | tee "$OUT/bench_kernels.txt"
  fi
  # the planar checkpoint layouts' matmul (tests/gpu/test_cuda_qmatmul.c): its tests when LG_ONLY is empty or
  # names qmatmul, its bench (F8_A8, F8, I4 next to f16) when ONLY is empty or qmatmul
  if [ -x build-cuda/test_cuda_qmatmul ]; then
    if [ -z "${LG_ONLY:-}" ] || [[ ",$LG_ONLY," == *",qmatmul,"* ]]; then
      timeout "${KTIMEOUT:-240}" build-cuda/test_cuda_qmatmul >"$OUT/test_cuda_qmatmul.log" 2>&1
      note "planar-layout matmul tests: rc=$? $(tail -1 "$OUT/test_cuda_qmatmul.log")"
      grep -E "FAIL" "$OUT/test_cuda_qmatmul.log" | head -20
    fi
    if [ -z "${ONLY:-}" ] || [ "$ONLY" = qmatmul ]; then
      timeout "${KTIMEOUT:-240}" build-cuda/test_cuda_qmatmul --bench 2>&1 | tee "$OUT/bench_qmatmul.txt"
    fi
  fi
  # ATTN_REF=1: PyTorch's SDPA (FlashAttention-2, cuDNN) at bench_kernels' prefill lengths
  [ "${ATTN_REF:-0}" = 1 ] && timeout "${KTIMEOUT:-240}" python3 tests/bench/attn_ref.py 2>&1 | tee "$OUT/attn_ref.txt"
fi

if [ "$WHAT" = group ] || { want test && [ -x build-cuda/test_cuda_group ]; }; then
  NCCL_NVLS_ENABLE=0 timeout "${KTIMEOUT:-300}" build-cuda/test_cuda_group >"$OUT/test_cuda_group.log" 2>&1
  note "tensor-parallel group (NCCL, 2 GPUs): rc=$? $(tail -1 "$OUT/test_cuda_group.log")"
  grep -E "FAIL|NCCL" "$OUT/test_cuda_group.log" | head -20
fi

if want test; then
  build-cuda/test_cuda_ops >"$OUT/test_cuda_ops.log" 2>&1
  rc=$?
  note "op tests: rc=$rc $(grep -E 'passed|failed' "$OUT/test_cuda_ops.log" | tail -1)"
  grep -E "FAIL" "$OUT/test_cuda_ops.log" | head -20
  if [ $rc != 0 ]; then
    env $OLD build-cuda/test_cuda_ops --no-bench >"$OUT/test_cuda_ops_old.log" 2>&1
    note "op tests under OLD ($OLD): rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_ops_old.log" | tail -1)"
  fi
  build-cuda/test_cuda_qmatmul >"$OUT/test_cuda_qmatmul.log" 2>&1
  note "planar-layout matmul tests (F8*, I4): rc=$? $(tail -1 "$OUT/test_cuda_qmatmul.log")"
  grep -E "FAIL" "$OUT/test_cuda_qmatmul.log" | head -20
  build-cuda/test_cuda_sample >"$OUT/test_cuda_sample.log" 2>&1
  note "device sampler vs host: rc=$? $(tail -1 "$OUT/test_cuda_sample.log")"
  LG_SAMPLE_CLUSTER=1 build-cuda/test_cuda_sample >"$OUT/test_cuda_sample_c1.log" 2>&1
  note "device sampler vs host, one block per row (LG_SAMPLE_CLUSTER=1): rc=$? $(tail -1 "$OUT/test_cuda_sample_c1.log")"
  LG_SAMPLE_HIST=0 build-cuda/test_cuda_sample >"$OUT/test_cuda_sample_h0.log" 2>&1
  note "device sampler vs host, match_any histograms (LG_SAMPLE_HIST=0): rc=$? $(tail -1 "$OUT/test_cuda_sample_h0.log")"
  LG_SAMPLE_CLUSTER=8 build-cuda/test_cuda_sample >"$OUT/test_cuda_sample_c8.log" 2>&1
  note "device sampler vs host, 8 blocks per row at any size (LG_SAMPLE_CLUSTER=8): rc=$? $(tail -1 "$OUT/test_cuda_sample_c8.log")"
  # f16: every fixture computed in f16; auto: each in its weight dtype (f32
  # weights in f16 until the CUDA backend computes in f32).
  xd=""; python3 -c "import xdist" 2>/dev/null && xd="-n 8"
  for dt in f16 auto; do
    # --pool-mb: the 8 parallel workers share one GPU; each sizing its pool from the free memory
    # raced (one measured before another allocated: cudaMalloc of ~70 GB failed, 1 in 134, 2026-11-22)
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype $dt --pool-mb 1024" LG_COMPUTE_DTYPE=float16 python3 -m pytest -q $xd \
      tests/golden >"$OUT/golden_cuda_$dt.log" 2>&1
    note "golden on cuda (--dtype $dt): $(tail -1 "$OUT/golden_cuda_$dt.log")"
  done
  # the fp8 KV cache (tests/golden/test_kv_fp8.py, run above in f16 and auto) with bf16 activations too
  LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype bf16 --pool-mb 1024" LG_COMPUTE_DTYPE=bfloat16 python3 -m pytest \
    -q $xd tests/golden/test_kv_fp8.py >"$OUT/kv_fp8_cuda_bf16.log" 2>&1
  note "fp8 KV cache on cuda (--dtype bf16): $(tail -1 "$OUT/kv_fp8_cuda_bf16.log")"
fi

if want serving; then
  . tests/gpu/serving_bench.sh
fi

M=tests/bench/llama2-7b-shape
B="--model $M --load-format dummy --backend cuda --dtype f16 --json"
W1="$B --num-seqs 32 --prompt-len 128 --output-len 64"
W2="$B --num-seqs 128 --prompt-len 128 --output-len 64"
declare -A CASE=(
  [w1_lora]="$W1 --adapters 32 --rank 16 --targets q,k,v,o"
  [w1_base]="$W1"
  [w2_lora]="$W2 --adapters 128 --rank 16 --targets q,k,v,o"
  [w2_base]="$W2"
  [w3_lora]="$W1 --adapters 32 --rank 8 --targets q,k,v,o,gate,up,down"
  # W1 run to 896 positions: its decode crosses the 256-key buckets of model.c's kv_bucket
  [w1_long]="$W1 --output-len 768 --adapters 32 --rank 16 --targets q,k,v,o"
  [b1]="$B --num-seqs 1 --prompt-len 128 --output-len 128"
  [b2]="$B --num-seqs 2 --prompt-len 128 --output-len 128"
  [b4]="$B --num-seqs 4 --prompt-len 128 --output-len 128"
  [w48_base]="$B --num-seqs 48 --prompt-len 128 --output-len 64"
  [w64_base]="$B --num-seqs 64 --prompt-len 128 --output-len 64"
  [b1_lora]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --adapters 1 --rank 16 --targets q,k,v,o"
  [pf2048]="$B --num-seqs 1 --prompt-len 2048 --output-len 1 --step-tokens 2048"
  # sampled decoding (top-p 0.9 at T = 0.8): the device sampler inside the step's time
  [b1_topp]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --temperature 0.8 --top-p 0.9"
  [w2_topp]="$W2 --temperature 0.8 --top-p 0.9"
  # OpenAI's penalties (applied by the device sampler; LG_DEVICE_PENALTIES=0: on the host)
  [w2_pen]="$W2 --temperature 0.8 --top-p 0.9 --frequency-penalty 0.5 --presence-penalty 0.3"
  [b1_pen]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --temperature 0.8 --frequency-penalty 0.5"
  # OpenAI's logprobs with 5 alternatives per token (reported by the device sampler; LG_DEVICE_LOGPROBS=0:
  # every row's logits downloaded and the log-softmax computed on the host)
  [b1_lp]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --logprobs 5"
  [w1_lp]="$W1 --logprobs 5"
  # W1 on the other families' shapes (dummy weights): Gemma-2-9B (soft-capped attention, GeGLU, 256k vocabulary)
  # and Qwen3-8B (per-head q/k norms, 152k vocabulary)
  [w1_gemma2]="--model tests/bench/gemma2-9b-shape --load-format dummy --backend cuda --dtype bf16 --json --num-seqs 32 --prompt-len 128 --output-len 64 --adapters 32 --rank 16 --targets q,k,v,o"
  [w1_qwen3]="--model tests/bench/qwen3-8b-shape --load-format dummy --backend cuda --dtype bf16 --json --num-seqs 32 --prompt-len 128 --output-len 64 --adapters 32 --rank 16 --targets q,k,v,o"
  # W1 with every sequence under a different JSON schema (tests/bench/w1_schemas.json, 32 schemas that keep
  # every row masked for the 64 tokens), masks for a 32,000-token SentencePiece vocabulary like Llama-2's
  [w1_schema]="$W1 --adapters 32 --rank 16 --targets q,k,v,o --json-schemas tests/bench/w1_schemas.json --schema-tokenizer tests/tokenizer/fixtures/mistral/tokenizer.json"
  [w2_lp]="$W2 --logprobs 5"
  # quantized base weights (dummy 16-bit weights quantized at load: FP8 W8A8 per-channel with dynamic per-token
  # activations; INT4 W4A16 groups of 128, the layout AWQ and GPTQ checkpoints load into) and the FP8 KV cache
  [w1_fp8]="$W1 --adapters 32 --rank 16 --targets q,k,v,o --quantization fp8"
  [w1_int4]="$W1 --adapters 32 --rank 16 --targets q,k,v,o --quantization int4"
  [w1_fp8kv]="$W1 --adapters 32 --rank 16 --targets q,k,v,o --quantization fp8 --kv-cache-dtype fp8"
  [w1_kvfp8]="$W1 --adapters 32 --rank 16 --targets q,k,v,o --kv-cache-dtype fp8"
  [b1_kvfp8]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --kv-cache-dtype fp8"
  [b1_fp8]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --quantization fp8"
  [b1_int4]="$B --num-seqs 1 --prompt-len 128 --output-len 128 --quantization int4"
  [pf2048_fp8]="$B --num-seqs 1 --prompt-len 2048 --output-len 1 --step-tokens 2048 --quantization fp8"
  [pf2048_int4]="$B --num-seqs 1 --prompt-len 2048 --output-len 1 --step-tokens 2048 --quantization int4"
)
table=()
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.6g' % d.get(sys.argv[2], float('nan')))" "$1" "$2" 2>/dev/null || echo nan; }
bench() { # label env-assignments case [more bench options]
  local label=$1 envs=$2 c=$3 args=${4:-} t0=$SECONDS n=1
  late "$c $label" && return
  # a label run again (interleaved pairs) keeps every run's files: case.label.json, then case.label.2.json, ...
  local base="$OUT/$c.$label"
  while [ -e "$base.json" ]; do n=$((n + 1)); base="$OUT/$c.$label.$n"; done
  local f="$base.json" e="$base.err"
  env $envs $BIN bench ${CASE[$c]} $args >"$f" 2>"$e" || { note "$c $label FAILED: $(tail -2 "$e")"; return; }
  table+=("$(printf '%-8s %-16s %10s tok/s  decode %8s ms/step  prefill %8s s (%s steps)  [%ds]' "$c" "$label" \
    "$(field "$f" output_tok_s)" "$(field "$f" decode_ms_per_step)" "$(field "$f" prefill_s)" "$(field "$f" prefill_steps)" \
    $((SECONDS - t0)))")
  # the last warm-up pass ran other prefill steps than the measured batch: its prefill may hold a first use
  [ "$(field "$f" warmup_prefill_steps)" = "$(field "$f" prefill_steps)" ] || table[-1]+="  WARM-UP SHAPES DIFFER"
  # with LG_STEP_TIMING=1: the median GPU time of the last 48 replayed steps (kernels/graph.cu; the measured
  # decode, not the warm-up's other shapes), a steadier A/B figure than the bench's mean (docs/benchmarks.md,
  # GPU kernels, 2026-11-27)
  local gm
  gm=$(sed -n 's/^step timing: GPU per replayed step, last [0-9]*, ms: median \([0-9.]*\)$/\1/p' "$e" | tail -1)
  [ -n "$gm" ] && table[-1]+="  gpu median $gm ms"
  echo "${table[-1]}"
}

if want bench; then
  # KERNELS=0 skips bench_kernels; CASES picks the engine cases (new, then old, each);
  # ABLATE=0 skips the one-switch-at-a-time runs.
  if [ "${KERNELS:-1}" != 0 ]; then
    late "bench_kernels" || { build-cuda/bench_kernels ${BENCH_KERNELS_ARGS:-} 2>&1 | tee "$OUT/bench_kernels.txt" | tail -45; }
  fi
  for c in ${CASES:-w1_lora w1_base w3_lora b1 pf2048 w2_lora w2_base}; do
    bench new "" $c
    bench "$OLD_LABEL" "$OLD" $c
  done
  # EXTRA="label|env assignments|case;..." adds runs (e.g. EXTRA="wide0|LG_SHRINK_WIDE=0|w3_lora")
  IFS=';' read -ra extra <<<"${EXTRA:-}"
  for x in "${extra[@]}"; do
    IFS='|' read -r xl xe xc xa <<<"$x"
    bench "$xl" "$xe" "$xc" "$xa"
  done
  # TRACE="w1_lora pf2048": each case once more under tests/gpu/cupti_trace.c (a GPU timeline of the
  # unmodified run, cuBLAS's kernels and the host's waits included), summarised by cupti_summary.py
  # into $OUT/trace.<case>.txt, the raw timeline as $OUT/<case>.cupti.xz
  for c in ${TRACE:-}; do
    lib=$ROOT/build-cuda/libcupti_trace.so
    [ -e "$lib" ] || { note "TRACE: $lib not built (CUDA::cupti missing?)"; break; }
    bench trace "CUDA_INJECTION64_PATH=$lib LG_CUPTI_FILE=$OUT/$c.cupti LG_STEP_TIMING=1 LG_BURST=0" "$c"   # bursts off: cut into steps
    python3 tests/gpu/cupti_summary.py "$OUT/$c.cupti" ${TRACE_ARGS:-} >"$OUT/trace.$c.txt" 2>&1
    note "trace $c: $(head -1 "$OUT/trace.$c.txt")"
    xz -f "$OUT/$c.cupti"
  done
  if [ "${ABLATE:-1}" != 0 ]; then   # one path switched at a time
    for sw in LG_PDL=0 LG_FUSE_ROPE_KV=0 LG_LORA_FIRST=0 LG_FUSE_LORA=0 LG_L2_HINT=0 LG_EXPAND_ROPE=0 \
              LG_SHRINK_NORM=0; do
      bench "${sw//LG_/}" "${sw//,/ }" w1_lora
    done
    bench "SHRINK_NORM=0" "LG_SHRINK_NORM=0" w3_lora   # two norms a layer in the shrink there
    bench "SHRINK_RG=4" "LG_SHRINK_RG=4" w3_lora       # the decode shrink's 4 rank rows a block everywhere
    for sw in LG_PDL=0 LG_FUSE_ROPE_KV=0 LG_FUSE_NORM=0 LG_NORM_ROPE=0; do bench "${sw#LG_}" "$sw" b1; done
    bench "ATTN_FA2=0" "LG_ATTN_FA2=0" pf2048
  fi
  if [ -n "${BENCH_EAGER:-}" ]; then  # W1 without step graphs, for comparison
    bench eager "LG_NO_GRAPHS=1" w1_lora
    bench eager "LG_NO_GRAPHS=1" w1_base
  fi
  if [ -z "${SKIP_HF:-}" ] && ! late "HF baselines"; then
    python3 tests/bench/hf_w1.py --mode base >"$OUT/hf_base.json" 2>"$OUT/hf_base.err"
    note "W1 HF transformers: $(tail -1 "$OUT/hf_base.json")"
    python3 tests/bench/hf_w1.py --mode peft --adapters 32 --rank 16 >"$OUT/hf_peft.json" 2>"$OUT/hf_peft.err"
    note "W1 HF peft: $(tail -1 "$OUT/hf_peft.json") $(tail -2 "$OUT/hf_peft.err" | head -1)"
  fi
fi

# spec: speculative decoding at a fixed acceptance rate (the bench's --speculative-accept-rate: dummy weights
# make real acceptance meaningless), Llama-2-7B shape with rank-16 adapters, against no speculation, and the
# greedy-equality golden test on CUDA
if [ "$WHAT" = spec ]; then
  late "spec golden" || {
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype f16 --pool-mb 1024" LG_COMPUTE_DTYPE=float16 python3 -m pytest -q \
      tests/golden/test_speculative_golden.py >"$OUT/spec_golden.log" 2>&1
    note "speculative greedy == plain on cuda: $(tail -1 "$OUT/spec_golden.log")"
  }
  SP="--speculative ngram --num-speculative-tokens"
  for n in 1 8 32; do
    a=$n; [ $a -gt 32 ] && a=32
    CASE[sb$n]="$B --num-seqs $n --prompt-len 128 --output-len 128 --adapters $a --rank 16 --targets q,k,v,o"
    bench off "" sb$n
    bench "a0.7k4" "" sb$n "$SP 4 --speculative-accept-rate 0.7"
  done
  bench "a0.5k4" "" sb1 "$SP 4 --speculative-accept-rate 0.5"
  bench "a0.9k4" "" sb1 "$SP 4 --speculative-accept-rate 0.9"
  bench "a0.7k2" "" sb1 "$SP 2 --speculative-accept-rate 0.7"
  bench "a0.7k6" "" sb1 "$SP 6 --speculative-accept-rate 0.7"
fi

# models: the op tests and the golden HF/peft fixtures of every family on CUDA (f16), then W1 on the Llama-2,
# Gemma-2-9B and Qwen3-8B shapes (W1 again last: the Llama-2 shape must not move)
if [ "$WHAT" = models ]; then
  late "op tests" || {
    build-cuda/test_cuda_ops --no-bench >"$OUT/test_cuda_ops.log" 2>&1
    note "op tests: rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_ops.log" | tail -1)"
    grep -E "FAIL" "$OUT/test_cuda_ops.log" | head -10
  }
  late "golden" || {
    xd=""; python3 -c "import xdist" 2>/dev/null && xd="-n 8"
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype f16 --pool-mb 1024" LG_COMPUTE_DTYPE=float16 python3 -m pytest -q $xd \
      tests/golden >"$OUT/golden_cuda_f16.log" 2>&1
    note "golden on cuda (--dtype f16): $(tail -1 "$OUT/golden_cuda_f16.log")"
    grep -E "^FAILED" "$OUT/golden_cuda_f16.log" | head -10
  }
  for c in w1_lora w1_gemma2 w1_qwen3 w1_lora; do bench new "" $c; done
fi

# structured: the grammar masks on the device against the host (tests/gpu/check_structured.py), then W1
# unconstrained and W1 with a schema a sequence, interleaved (REPS pairs), and once with the masks on the host
if [ "$WHAT" = structured ]; then
  late "check_structured" || {
    python3 tests/gpu/check_structured.py "$BIN" >"$OUT/check_structured.log" 2>&1
    note "structured output, device masks vs host masks: rc=$? $(tail -1 "$OUT/check_structured.log")"
    grep -E "^schema|differs|invalid|not JSON" "$OUT/check_structured.log" | head -20
  }
  for i in $(seq "${REPS:-3}"); do
    bench new "" w1_lora
    bench new "" w1_schema
  done
  bench hostmask "LG_DEVICE_MASKS=0" w1_schema
  for f in "$OUT"/w1_schema.*json; do
    note "$(basename "$f"): $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('mask_s %.4f rows %d forced %d' % (d['mask_s'], d['constrained_rows'], d['forced_tokens']))" "$f")"
  done
fi

# quant: the op tests (the quantized matmuls and the FP8 KV cache against their host references), then the
# 16-bit, FP8 and INT4 cases of the Llama-2 shape interleaved in one call (QCASES picks them), then (QW2=1) the
# W2 rate sweep with 16-bit weights + KV against FP8 weights + FP8 KV (QW2_RATES)
if [ "$WHAT" = quant ]; then
  late "op tests" || {
    build-cuda/test_cuda_ops --no-bench >"$OUT/test_cuda_ops.log" 2>&1
    note "op tests: rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_ops.log" | tail -1)"
    grep -E "FAIL" "$OUT/test_cuda_ops.log" | head -20
  }
  [ -x build-cuda/test_cuda_qmatmul ] && for dt in f16 bf16; do
    late "test_cuda_qmatmul --$dt" || {
      build-cuda/test_cuda_qmatmul --$dt >"$OUT/test_cuda_qmatmul_$dt.log" 2>&1
      note "quantized matmuls vs float64 (--$dt): rc=$? $(grep -E 'passed|failed' "$OUT/test_cuda_qmatmul_$dt.log" | tail -1)"
      grep -E "FAIL" "$OUT/test_cuda_qmatmul_$dt.log" | head -20
    }
  done
  late "golden kv fp8" || {
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype f16 --pool-mb 1024" LG_COMPUTE_DTYPE=float16 python3 -m pytest -q \
      tests/golden/test_kv_fp8.py >"$OUT/golden_kvfp8_cuda.log" 2>&1
    note "golden fp8 KV on cuda (f16): $(tail -1 "$OUT/golden_kvfp8_cuda.log")"
    grep -E "^FAILED" "$OUT/golden_kvfp8_cuda.log" | head -10
  }
  [ -x build-cuda/test_cuda_qmatmul ] && { late "bench qmatmul" || build-cuda/test_cuda_qmatmul --bench 2>&1 | tee "$OUT/bench_qmatmul.txt" | tail -40; }
  late "quant logits on cuda" || {
    LG_BIN=$BIN LG_BACKEND=cuda python3 -m pytest -q tests/quant/test_quant_logits.py >"$OUT/quant_logits_cuda.log" 2>&1
    note "quantized checkpoints' logits on cuda: $(tail -1 "$OUT/quant_logits_cuda.log")"
    grep -E "^E  .*rel L2" "$OUT/quant_logits_cuda.log" | head -20
  }
  for c in ${QCASES:-b1 b1_fp8 b1_int4 w1_lora w1_fp8 w1_int4 w1_fp8kv pf2048 pf2048_fp8 pf2048_int4 w1_lora}; do
    bench new "LG_STEP_TIMING=1" $c
  done
  # QLT=T: W1 in FP8 once more with F8_A8 matmuls of T or more rows on cuBLASLt's FP8 GEMM (LG_QMM_LT_MIN_T), and the
  # kernel table under it
  if [ -n "${QLT:-}" ]; then
    bench "lt$QLT" "LG_STEP_TIMING=1 LG_QMM_LT_MIN_T=$QLT" w1_fp8
    late "bench qmatmul lt" || LG_QMM_LT_MIN_T=$QLT build-cuda/test_cuda_qmatmul --bench 2>&1 | tee "$OUT/bench_qmatmul_lt$QLT.txt" | grep -A8 'T = 32'
  fi
  if [ "${QW2:-0}" = 1 ]; then
    for rate in ${QW2_RATES:-16 24 32}; do
      n=$(( rate * 25 ))
      for q in "" "--quantization fp8 --kv-cache-dtype fp8"; do
        late "w2 $rate $q" && continue
        tag=$([ -n "$q" ] && echo fp8 || echo f16)
        $BIN bench $B --no-progress --workload poisson --adapters 1000 --rank-mix 8,16,32,64 --targets q,k,v,o \
          --popularity zipf:1.0 --prompt-len-range 128:512 --output-len-range 64:256 --slo-ttft-ms 500 \
          --slo-tpot-ms 50 --seed 1 --rate $rate --requests $n $q >"$OUT/w2q_${tag}_r$rate.json" 2>"$OUT/w2q_${tag}_r$rate.err"
        note "w2 $tag rate $rate (rc=$?): $(python3 tests/gpu/bench_summary.py "$OUT/w2q_${tag}_r$rate.json" 2>&1 | tail -1)"
      done
    done
  fi
fi

# multi: the two-GPU checks and figures (tensor and data parallelism; tests/gpu/multi_gpu.sh)
if [ "$WHAT" = multi ]; then
  . tests/gpu/multi_gpu.sh
fi

if want profile; then
  late "ncu profile" || { OUT=$OUT bash tests/gpu/profile_decode.sh 2>&1 | tee "$OUT/profile.txt" | tail -60; }
fi

echo
echo "================ summary ($SECONDS s) ================"
printf '%s\n' "${summary[@]}"
[ ${#table[@]} -gt 0 ] && printf '%s\n' "${table[@]}"
exit 0
