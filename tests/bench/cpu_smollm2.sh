#!/usr/bin/env bash
# cpu_smollm2.sh — prompt and decode speed of the default model on the CPU
# backend: a 128-token prompt, 64 new tokens, greedy, 3 runs, median shown.
#
#   bash tests/bench/cpu_smollm2.sh [MODEL] [THREADS]
#
# Prompt tok/s = prompt tokens / time of the prefill step(s); decode tok/s =
# tokens generated in decode steps / their time (the first new token comes
# out of the prefill step). Model loading is not timed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODEL="${1:-.models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${2:-$(nproc)}"
IDS=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(100, 40000)) for _ in range(128)))")
for i in 1 2 3; do
  ${LG_BIN:-build/loragate} generate --model "$MODEL" --prompt-tokens "$IDS" --max-tokens 64 --threads "$THREADS" \
    --json --stats 2>/dev/null
done | python3 -c '
import json, statistics, sys
runs = [json.loads(l)["stats"] for l in sys.stdin if l.startswith("{")]
pf = [r["prefill_tokens"] / r["prefill_seconds"] for r in runs]
dc = [r["decode_tokens"] / r["decode_seconds"] for r in runs]
print(f"prompt (128 tokens): {statistics.median(pf):.1f} tok/s   decode (64 tokens): {statistics.median(dc):.1f} tok/s"
      f"   [runs: prompt {[round(x,1) for x in pf]}, decode {[round(x,1) for x in dc]}]")
'
