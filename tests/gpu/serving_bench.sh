#!/usr/bin/env bash
# serving_bench.sh — the serving-runtime figures of docs/benchmarks.md
# (Serving runtime), sourced by run_device.sh (mode `serving`,
# also part of `all`): W1 fixed batch (no regression), adapter load latency,
# W2 many adapters (rate sweep for the SLO knee, then 2,000 adapters), W3
# shared system prompts (prefix cache on/off), W4 one tenant floods (VTC vs
# FCFS). SERVING_ONLY=REGEX runs only the runs whose name matches. Needs $BIN, $OUT, note(), late() from run_device.sh.
M=tests/bench/llama2-7b-shape
C="--model $M --load-format dummy --backend cuda --dtype f16 --json --no-progress"
sb() { # name, args...: one bench run, JSON to $OUT/serving_<name>.json, one summary line
  local name=$1; shift
  if [ -n "${SERVING_ONLY:-}" ] && ! [[ $name =~ $SERVING_ONLY ]]; then return; fi
  if late "serving $name"; then return; fi
  $BIN bench $C "$@" >"$OUT/serving_$name.json" 2>"$OUT/serving_$name.err"
  local rc=$?
  note "serving $name (rc=$rc): $(python3 tests/gpu/bench_summary.py "$OUT/serving_$name.json" 2>&1 | tail -1)"
}
sb w1_lora --num-seqs 32 --prompt-len 128 --output-len 64 --adapters 32 --rank 16 --targets q,k,v,o
sb load_r16 --adapter-load-test --rank 16 --targets q,k,v,o
W2="--workload poisson --adapters 1000 --rank-mix 8,16,32,64 --targets q,k,v,o --popularity zipf:1.0
    --prompt-len-range 128:512 --output-len-range 64:256 --slo-ttft-ms 500 --slo-tpot-ms 50 --seed 1"
for rate in ${W2_RATES:-4 8 12 16 24 32}; do
  n=$(( rate * 25 )); [ $n -lt 100 ] && n=100
  sb w2_r$rate $W2 --rate $rate --requests $n
done
sb w2_2000 ${W2/--adapters 1000/--adapters 2000} --rate ${W2_RATE_2000:-16} --requests 400
W3="--workload poisson --rate ${W3_RATE:-8} --requests 200 --tenants 8 --shared-prefix-len 1024
    --shared-prefix-frac 1.0 --prompt-len-range 64:256 --output-len-range 64:128 --seed 3"
sb w3_prefix_on $W3 --prefix-sharing tenant
sb w3_prefix_off $W3 --prefix-sharing off
W4="--workload poisson --rate ${W4_RATE:-120} --requests 600 --tenants 2 --tenant-share 10,1
    --prompt-len-range 128:256 --output-len-range 64:128 --seed 4"
sb w4_vtc $W4 --policy vtc
sb w4_fcfs $W4 --policy fcfs
