#!/usr/bin/env bash
# run_all.sh — the whole CPU test suite from a clean clone:
#   system deps (deploy/install-deps.sh: build and run; tests/install-test-deps.sh:
#   what only the tests need) -> Python test env (.venv) -> default model -> build
#   -> ctest -> pytest
#
#   bash tests/run_all.sh
#
# One suite alone, and the fuzzers: tests/README.md.
# Env knobs: LG_SKIP_DEPS=1 (skip apt; deps already there), LG_PYTHON=path
# (use this interpreter instead of creating .venv), LG_BACKEND (golden tests'
# backend, default cpu), LG_JOBS (build parallelism, default 2), LG_SANITIZE=1
# (build in build-asan with AddressSanitizer + UBSan, CPU backend only, and run
# ctest and pytest against it: any memory error, undefined behaviour or leak in
# our code fails the test that hit it; libh2o's recycle pools are suppressed,
# tests/sanitize/lsan.supp).
# Exit status: non-zero if any step or any test fails. ctest and pytest both run
# even if the other failed, so one run shows every failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n=== %s\n' "$*"; }
die() { printf '[run_all] ERROR: %s\n' "$*" >&2; exit 1; }

# --- 1. system packages -------------------------------------------------------
if [ "${LG_SKIP_DEPS:-0}" != 1 ]; then
  step "system dependencies (deploy/install-deps.sh, tests/install-test-deps.sh)"
  bash deploy/install-deps.sh || die "installing system dependencies failed"
  bash tests/install-test-deps.sh || die "installing the tests' system dependencies failed"
fi

# --- 2. Python test environment ----------------------------------------------
step "python test requirements (tests/requirements.txt)"
if [ -n "${LG_PYTHON:-}" ]; then
  PY="$LG_PYTHON"
elif [ -x .venv/bin/python ] || python3 -m venv .venv; then
  PY="$ROOT/.venv/bin/python"
else
  # no venv module: the interpreter itself (PEP 668 systems need the override)
  PY="$(command -v python3)"
  printf '[run_all] warning: python3 -m venv failed; installing into %s\n' "$PY" >&2
fi
pip_flags=(-q --disable-pip-version-check)
if [ "$PY" != "$ROOT/.venv/bin/python" ] && "$PY" -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  pip_flags+=(--user --break-system-packages)
fi
"$PY" -m pip install "${pip_flags[@]}" -r tests/requirements.txt || die "pip install -r tests/requirements.txt failed"
# the third-party clients the client-compatibility tests run (lm-eval, guidellm), in their own venv
step "client venv (tests/clients/install.sh)"
LG_CLIENTS_PYTHON="$PY" bash tests/clients/install.sh || die "installing the test clients (tests/clients/install.sh) failed"

# --- 3. default model ---------------------------------------------------------
step "default model (deploy/fetch-default-model.sh)"
MODEL="$(PYTHON="$PY" bash deploy/fetch-default-model.sh)" || die "fetching the default model failed"
echo "default model: $MODEL"

# --- 4. build -------------------------------------------------------------------
BUILD=build
CFG=(-DCMAKE_BUILD_TYPE=Release)
if [ "${LG_SANITIZE:-0}" = 1 ]; then
  BUILD=build-asan
  CFG=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLG_SANITIZE=ON -DLG_CUDA=OFF)
  export ASAN_OPTIONS="halt_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitize/lsan.supp" LG_BUILD_DIR="$ROOT/$BUILD"
fi
step "configure + build ($BUILD)"
cmake -S . -B "$BUILD" "${CFG[@]}" || die "cmake configure failed"
cmake --build "$BUILD" -j"${LG_JOBS:-2}" || die "build failed"

# --- 5. unit tests (ctest) ------------------------------------------------------
status=0
step "ctest"
ctest --test-dir "$BUILD" --output-on-failure || { echo "[run_all] ctest FAILED"; status=1; }

# --- 6. python suites ------------------------------------------------------------
step "pytest"
dirs=()
for d in tests/golden tests/tokenizer tests/chat tests/constrain tests/quant tests/cli tests/e2e tests/deploy; do
  [ -d "$d" ] && dirs+=("$d")
done
export LG_BIN="${LG_BIN:-$ROOT/$BUILD/loragate}"
if [ ${#dirs[@]} -gt 0 ]; then
  "$PY" -m pytest -q "${dirs[@]}" || { echo "[run_all] pytest FAILED"; status=1; }
fi
# tensor parallelism on the CPU: the golden HF/peft fixtures again with every model split over two ranks
# (engine/model/model_tp.c; a fixture whose heads do not split is refused by name and skipped)
step "pytest: golden fixtures at --tensor-parallel-size 2"
LG_GENERATE_EXTRA="${LG_GENERATE_EXTRA:-} --tensor-parallel-size 2" "$PY" -m pytest -q tests/golden/test_golden.py \
  tests/golden/test_lora_golden.py tests/golden/test_prefix_golden.py tests/golden/test_arch_lora_golden.py \
  tests/golden/test_speculative_golden.py tests/golden/test_kv_fp8.py \
  || { echo "[run_all] pytest (tensor parallel) FAILED"; status=1; }

if [ $status -ne 0 ]; then
  step "FAILED"
  exit 1
fi
step "all tests passed"
