#!/usr/bin/env bash
# install-test-deps.sh — the system packages only the tests need, on top of
# deploy/install-deps.sh's (building and running); tests/run_all.sh runs both.
# Debian 12 (bookworm). Idempotent: packages already installed are left alone
# and apt-get is not even called when nothing is missing (deploy/apt-install.sh).
# Run as root, or as a user with sudo. Exit status non-zero on any failure.
#
#   bash tests/install-test-deps.sh          # install what is missing
#   LG_APT_EXTRA="clang libclang-rt-14-dev" bash tests/install-test-deps.sh   # + the fuzzers' compiler
#
#   python3-venv    tests/run_all.sh's .venv for tests/requirements.txt
#   prometheus      promtool checks the /metrics exposition (tests/e2e/test_metrics.py)
#   chromium        the usage page in a headless browser (tests/e2e/test_usage_page.py)
#   nghttp2-client  h2load, the gateway benchmark (tests/bench/gateway_bench.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

PKGS=(python3-venv prometheus chromium nghttp2-client)
# shellcheck disable=SC2206
PKGS+=(${LG_APT_EXTRA:-})

bash "$ROOT/deploy/apt-install.sh" install-test-deps "${PKGS[@]}"
