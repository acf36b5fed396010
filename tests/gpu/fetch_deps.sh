#!/usr/bin/env bash
# fetch_deps.sh — downloads (here, with network) the Debian packages the GPU
# machine lacks into .deps/, where tests/gpu/deps_env.sh unpacks them there:
# jansson, pcre2, utf8proc (engine), libh2o-evloop + wslay, sqlite3, OpenSSL
# (gateway and store, so the full binary builds there), zlib (compressed request bodies).
#   bash tests/gpu/fetch_deps.sh        (from the repo root)
set -euo pipefail
mkdir -p .deps
cd .deps
apt-get download libjansson4 libjansson-dev libpcre2-8-0 libpcre2-dev libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libutf8proc2 libutf8proc-dev libh2o-evloop-dev libh2o-evloop0.13 libh2o-dev-common \
  libwslay1 libsqlite3-dev libsqlite3-0 libssl-dev libssl3 zlib1g-dev zlib1g
ls -1 *.deb
