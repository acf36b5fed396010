#!/usr/bin/env bash
# profile_decode.sh — per-kernel GPU time of one decode step under ncu
# (eager, LG_NO_GRAPHS=1, so every kernel is its own launch; ncu serialises
# kernels, so programmatic dependent launch overlaps nothing here: these are
# kernel durations, not the step's wall time). Cases: W1 with 32 rank-16
# adapters with this tree's defaults ("new") and with its own decode paths off
# ("old", as run_device.sh), and batch 1 new; PROF_PREFILL=1 adds W1's
# measured prefill step with and without its adapters. Prints, per case,
# each kernel's time summed over one step (embed_kernel to the next
# embed_kernel), its launches, and the step's total.
#   bash tests/gpu/profile_decode.sh        (repo root, after run_device.sh built build-cuda)
set -uo pipefail
OUT=${OUT:-build-cuda/out}
mkdir -p "$OUT"
[ -d .deps/root ] && export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BIN=build-cuda/loragate
M=tests/bench/llama2-7b-shape
B="--model $M --load-format dummy --backend cuda --dtype f16"
prof() { # name "env assignments" skip count args...  (PICK=prefill: the last prefill step instead)
  local name=$1 envs=$2 skip=$3 count=$4; shift 4
  env LG_NO_GRAPHS=1 $envs ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip "$skip" \
    --launch-count "$count" $BIN bench $B "$@" >"$OUT/prof_$name.csv" 2>"$OUT/prof_$name.err"
  python3 - "$OUT/prof_$name.csv" "$name" "${PICK:-decode}" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    print(sys.argv[2], "no ncu rows:", open(sys.argv[1].replace(".csv", ".err")).read()[-600:]); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
ks = [(r[ki].split("(")[0][:100], float(r[vi].replace(",", "")) * {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[r[ui]]) for r in rows[1:]]
idx = [i for i, k in enumerate(ks) if k[0].startswith("void embed_kernel") or k[0].startswith("embed_kernel")]
if sys.argv[3] == "prefill":  # the last step with a prefill attention kernel: the measured prefill
    steps = [ks[a:b] for a, b in zip(idx, idx[1:] + [len(ks)]) if any("prefill" in n for n, _ in ks[a:b])][-1:]
else:
    steps = [ks[a:b] for a, b in zip(idx, idx[1:]) if not any("prefill" in n for n, _ in ks[a:b])]
if not steps: print(sys.argv[2], "no full %s step among" % sys.argv[3], len(ks), "kernels"); sys.exit()
step = steps[0]
agg = collections.OrderedDict()
for n, t in step:
    a = agg.setdefault(n, [0, 0.0]); a[0] += 1; a[1] += t
print("== %s: one step, %d kernels, %.1f us GPU time" % (sys.argv[2], len(step), sum(t for _, t in step)))
for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print("  %8.1f us %4d x  %s" % (t, c, n))
PY
}
# PROF_OLD / PROF_OLD_LABEL: the reference configuration (default: the tree's own decode paths off);
# PROF_B1=0 skips batch 1, PROF_W1=0 both W1 runs; PROF_W3=1 adds W3
OLD=${PROF_OLD:-"LG_PDL=0 LG_ATTN_FA2=0 LG_FUSE_ROPE_KV=0 LG_FUSE_LORA=0 LG_FUSE_NORM=0"}
W1L="--num-seqs 32 --prompt-len 128 --output-len 24 --adapters 32 --rank 16 --targets q,k,v,o"
if [ "${PROF_W1:-1}" != 0 ]; then
  prof w1_lora_new "" 5000 1000 $W1L
  prof "w1_lora_${PROF_OLD_LABEL:-old}" "$OLD" 5000 1500 $W1L
fi
# PROF_W3=1: also W3 (32 rank-8 adapters on all seven modules), this tree's defaults
W3L="--num-seqs 32 --prompt-len 128 --output-len 24 --adapters 32 --rank 8 --targets q,k,v,o,gate,up,down"
[ "${PROF_W3:-0}" = 1 ] && prof w3_lora_new "" 9000 1500 $W3L
[ "${PROF_B1:-1}" != 0 ] && prof b1_new "" 1500 800 --num-seqs 1 --prompt-len 128 --output-len 16
# PROF_PREFILL=1: W1's prefill step (4,096 tokens) with its 32 adapters and without (warm-up prefill and
# decode step, then the measured prefill: the last step with a prefill kernel)
if [ "${PROF_PREFILL:-0}" = 1 ]; then
  W1P="--num-seqs 32 --prompt-len 128 --output-len 1"
  PICK=prefill prof w1_prefill_lora "" 0 6000 $W1P --adapters 32 --rank 16 --targets q,k,v,o
  PICK=prefill prof w1_prefill_base "" 0 6000 $W1P
fi
# PROF_B1_ENV="LG_FUSE_NORM=0": batch 1 again with those switches ("b1_alt")
[ -n "${PROF_B1_ENV:-}" ] && prof b1_alt "$PROF_B1_ENV" 1500 800 --num-seqs 1 --prompt-len 128 --output-len 16
