#!/usr/bin/env bash
# install.sh — the third-party clients that tests/e2e/test_clients_*.py run
# (lm-eval, guidellm) into their own venv, .venv/clients (or $LG_CLIENTS_VENV),
# so that their pins never touch the suites' .venv. Idempotent: a stamp named
# after requirements.txt's hash says the venv is complete. Needs PyPI (pip).
#
#   bash tests/clients/install.sh
#
# lm-eval comes with its `api` extra (no torch). guidellm is installed with
# --no-deps: its METADATA requires torch, whose Linux wheel on PyPI is the CUDA
# build (gigabytes; the CPU index is not reachable); its other requirements are
# in requirements.txt, and tests/clients/shims/torch stands in for the three
# names of torch.utils.data its data loader imports (the test puts it on the
# guidellm process's PYTHONPATH, with USE_TORCH=0 so that datasets and
# transformers do not look for a real torch).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${LG_CLIENTS_VENV:-$ROOT/.venv/clients}"
GUIDELLM=guidellm==0.8.1
stamp="$VENV/.installed-$( (cat "$HERE/requirements.txt"; echo "$GUIDELLM") | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
PY="${LG_CLIENTS_PYTHON:-python3}"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r "$HERE/requirements.txt"
"${pip[@]}" --no-deps "$GUIDELLM"
rm -f "$VENV"/.installed-*
touch "$stamp"
