#!/usr/bin/env bash
# multi_gpu.sh — the two-GPU checks and figures of docs/benchmarks.md (Multi-GPU), sourced by
# run_device.sh (mode `multi`, on the nvidia-h200-x2 machine). MULTI_ONLY=REGEX runs only the parts
# whose name matches: group, golden, parity, w1, w2, 70b. Needs $BIN, $OUT, note(), late(), bench()
# and the CASE table of run_device.sh.
#   group   the CUDA group's all-reduce against host sums (tests/gpu/test_cuda_group)
#   golden  the golden HF/peft fixtures at --tensor-parallel-size 2 on the GPUs (f16)
#   parity  tests/golden/test_tp_golden.py on the GPUs: TP=2 vs TP=1 logits, graphs vs eager at TP=2
#   w1      Llama-2-7B shape: W1 (32 adapters) and batch 1 at TP=1 and TP=2
#   w2      W2 (1,000 adapters, Zipf 1.0, Poisson) at DP=1 and DP=2: rates W2_DP1_RATES / W2_DP2_RATES
#   70b     Llama-3-70B shape in bf16 (dummy weights) at TP=2: batch 1 and W1, then batch 1 under the
#           CUPTI tracer (the all-reduce kernels' share of a step)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the machine's rule: no NVLink multicast
mpart() { [ -z "${MULTI_ONLY:-}" ] || [[ $1 =~ $MULTI_ONLY ]]; }
note "GPUs: $(nvidia-smi --query-gpu=index,name --format=csv,noheader | tr '\n' ';')"
note "NCCL: $(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>&1 | tail -1)"

if mpart group && [ -x build-cuda/test_cuda_group ]; then
  late "group test" || {
    timeout 180 build-cuda/test_cuda_group >"$OUT/test_cuda_group.log" 2>&1
    note "cuda group all-reduce: rc=$? $(tail -1 "$OUT/test_cuda_group.log")"
    grep -E "FAIL" "$OUT/test_cuda_group.log" | head -10
  }
fi
if mpart golden; then
  late "golden tp2" || {
    xd=""; python3 -c "import xdist" 2>/dev/null && xd="-n 4"
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype f16 --pool-mb 1024 --tensor-parallel-size 2" \
      LG_COMPUTE_DTYPE=float16 timeout 300 python3 -m pytest -q $xd tests/golden/test_golden.py \
      tests/golden/test_lora_golden.py tests/golden/test_prefix_golden.py tests/golden/test_arch_lora_golden.py \
      >"$OUT/golden_tp2.log" 2>&1
    note "golden on cuda at TP=2 (f16): $(tail -1 "$OUT/golden_tp2.log")"
    grep -E "^FAILED" "$OUT/golden_tp2.log" | head -10
  }
fi
if mpart parity; then
  late "tp parity" || {
    LG_BIN=$BIN LG_BACKEND=cuda LG_GENERATE_EXTRA="--dtype f16 --pool-mb 1024" LG_COMPUTE_DTYPE=float16 \
      timeout 240 python3 -m pytest -q tests/golden/test_tp_golden.py >"$OUT/tp_parity.log" 2>&1
    note "TP=2 vs TP=1, graphs vs eager on cuda: $(tail -1 "$OUT/tp_parity.log")"
    grep -E "^E  |^FAILED" "$OUT/tp_parity.log" | head -10
  }
fi
if mpart w1; then
  for c in w1_lora b1; do
    bench tp1 "LG_STEP_TIMING=1" $c
    bench tp2 "LG_STEP_TIMING=1" $c "--tensor-parallel-size 2"
  done
fi
if mpart w2; then
  W2M="$B --no-progress --workload poisson --adapters 1000 --rank-mix 8,16,32,64 --targets q,k,v,o --popularity zipf:1.0
       --prompt-len-range 128:512 --output-len-range 64:256 --slo-ttft-ms 500 --slo-tpot-ms 50 --seed 1"
  for dp in 1 2; do
    rates=${W2_DP1_RATES:-32 40}; [ $dp = 2 ] && rates=${W2_DP2_RATES:-48 64 80}
    for rate in $rates; do
      late "w2 dp$dp rate $rate" && continue
      n=$(( rate * 25 ))
      $BIN bench $W2M --rate $rate --requests $n --data-parallel-size $dp >"$OUT/w2_dp${dp}_r$rate.json" \
        2>"$OUT/w2_dp${dp}_r$rate.err"
      note "w2 dp$dp rate $rate (rc=$?): $(python3 tests/gpu/bench_summary.py "$OUT/w2_dp${dp}_r$rate.json" 2>&1 | tail -1)"
      python3 -c "import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[t.find('{'):]); print('   engines:', json.dumps(j.get('engines')))" \
        "$OUT/w2_dp${dp}_r$rate.json" 2>/dev/null | tee -a "$OUT/w2_engines.txt"
    done
  done
fi
if mpart 70b; then
  B70="--model tests/bench/llama3-70b-shape --load-format dummy --backend cuda --dtype bf16 --json --no-progress
       --tensor-parallel-size 2"
  CASE[b1_70b]="$B70 --num-seqs 1 --prompt-len 128 --output-len 128"
  CASE[w1_70b]="$B70 --num-seqs 32 --prompt-len 128 --output-len 64 --adapters 32 --rank 16 --targets q,k,v,o"
  bench tp2 "LG_STEP_TIMING=1" b1_70b
  bench tp2 "LG_STEP_TIMING=1" w1_70b
  if [ "${TRACE70:-1}" = 1 ] && [ -e build-cuda/libcupti_trace.so ]; then
    bench trace "CUDA_INJECTION64_PATH=$ROOT/build-cuda/libcupti_trace.so LG_CUPTI_FILE=$OUT/b1_70b.cupti LG_STEP_TIMING=1 LG_BURST=0" b1_70b
    python3 tests/gpu/cupti_summary.py "$OUT/b1_70b.cupti" ${TRACE_ARGS:-} >"$OUT/trace.b1_70b.txt" 2>&1
    note "trace b1_70b: $(head -3 "$OUT/trace.b1_70b.txt" | tr '\n' ' ')"
    grep -iE "nccl" "$OUT/trace.b1_70b.txt" | head -5
    xz -f "$OUT/b1_70b.cupti"
  fi
fi
