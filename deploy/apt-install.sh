#!/usr/bin/env bash
# apt-install.sh — installs the Debian packages named on the command line that
# are not installed yet: the one apt step of deploy/install-deps.sh (what
# building and running loragate need) and tests/install-test-deps.sh (what
# only the tests need). Written for Debian 12 (bookworm); warns and goes on
# elsewhere. Idempotent: packages already installed are left alone and
# apt-get is not even called when nothing is missing. Run as root, or as a
# user with sudo. Exit status non-zero on any failure.
#
#   bash deploy/apt-install.sh TAG PKG...     # TAG names the caller in messages
set -euo pipefail

TAG="${1:?usage: apt-install.sh TAG PKG...}"
shift
PKGS=("$@")

say() { printf '[%s] %s\n' "$TAG" "$*"; }
die() { printf '[%s] ERROR: %s\n' "$TAG" "$*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script supports Debian/Ubuntu (apt) only"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian/Ubuntu (apt) only"

if [ -r /etc/os-release ]; then
  # shellcheck source=/dev/null
  . /etc/os-release
  say "system: ${PRETTY_NAME:-unknown}"
  case "${ID:-}:${VERSION_ID:-}" in
    debian:12) ;;
    *) say "warning: written for Debian 12; continuing on ${ID:-?} ${VERSION_ID:-?}" ;;
  esac
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${PKGS[@]}"; do
  installed "$p" || missing+=("$p")
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
  installed "$p" || die "package $p still not installed after apt-get"
done
say "done: installed ${#missing[@]} package(s)"
