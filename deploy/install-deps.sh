#!/usr/bin/env bash
# install-deps.sh — the system packages that building and running loragate
# need on Debian 12 (bookworm) or a close derivative: the compiler and CMake,
# the -dev libraries it links, curl (the commands `serve` prints use it) and
# python3 with pip (deploy/fetch-default-model.sh). What only the tests need
# is tests/install-test-deps.sh's. Idempotent: packages already installed are
# left alone and apt-get is not even called when nothing is missing
# (deploy/apt-install.sh). Run as root, or as a user with sudo. Exit status
# non-zero on any failure.
#
#   bash deploy/install-deps.sh            # install what is missing
#   LG_APT_EXTRA="gdb valgrind" bash deploy/install-deps.sh
#
# CUDA is not installed here: the build is CPU-only without nvcc (see
# CMakeLists.txt); GPU machines bring their own toolkit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PKGS=(
  build-essential cmake pkg-config ca-certificates curl
  libjansson-dev libpcre2-dev libutf8proc-dev libh2o-evloop-dev libssl-dev zlib1g-dev libsqlite3-dev
  python3 python3-pip
)
# shellcheck disable=SC2206
PKGS+=(${LG_APT_EXTRA:-})

bash "$HERE/apt-install.sh" install-deps "${PKGS[@]}"

for pc in jansson libpcre2-8 libh2o-evloop openssl sqlite3; do
  pkg-config --exists "$pc" || { printf '[install-deps] ERROR: pkg-config cannot find %s\n' "$pc" >&2; exit 1; }
done
