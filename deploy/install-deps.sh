#!/usr/bin/env bash
# install-deps.sh — system packages to build and test loragate on Debian 12
# (bookworm) or a close derivative. Idempotent: packages already installed are
# left alone and apt-get is not even called when nothing is missing.
# Run as root, or as a user with sudo. Exit status non-zero on any failure.
#
#   bash deploy/install-deps.sh            # install what is missing
#   LG_APT_EXTRA="gdb valgrind" bash deploy/install-deps.sh
#
# CUDA is not installed here: the build is CPU-only without nvcc (see
# CMakeLists.txt); GPU machines bring their own toolkit.
set -euo pipefail

say() { printf '[install-deps] %s\n' "$*"; }
die() { printf '[install-deps] ERROR: %s\n' "$*" >&2; exit 1; }

PKGS=(
  build-essential cmake pkg-config git ca-certificates curl
  libjansson-dev libpcre2-dev libutf8proc-dev libh2o-evloop-dev libssl-dev zlib1g-dev libsqlite3-dev
  python3 python3-pip python3-venv
  # tests: promtool checks /metrics (prometheus), the usage page runs in headless chromium,
  # h2load for the gateway benchmark (nghttp2-client)
  prometheus chromium nghttp2-client
)
# shellcheck disable=SC2206
PKGS+=(${LG_APT_EXTRA:-})

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian/Ubuntu (apt) only"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian/Ubuntu (apt) only"

if [ -r /etc/os-release ]; then
  . /etc/os-release
  say "system: ${PRETTY_NAME:-unknown}"
  case "${ID:-}:${VERSION_ID:-}" in
    debian:12) ;;
    *) say "warning: written for Debian 12; continuing on ${ID:-?} ${VERSION_ID:-?}" ;;
  esac
fi

missing=()
for p in "${PKGS[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    :
  else
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  say "all ${#PKGS[@]} packages already installed: nothing to do"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "not root and sudo not found: run as root, or install: ${missing[*]}"
  SUDO=(sudo)
  say "not root: using sudo"
fi

export DEBIAN_FRONTEND=noninteractive
say "missing: ${missing[*]}"
say "running: apt-get update"
"${SUDO[@]}" apt-get update -q || die "apt-get update failed (network? apt sources?)"
say "running: apt-get install -y --no-install-recommends ${missing[*]}"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
  || die "apt-get install failed for: ${missing[*]}"

for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || die "package $p still not installed after apt-get"
done
for pc in jansson libpcre2-8 libh2o-evloop openssl sqlite3; do
  pkg-config --exists "$pc" || die "pkg-config cannot find $pc after install"
done
say "done: installed ${#missing[@]} package(s)"
