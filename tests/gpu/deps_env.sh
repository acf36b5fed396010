# deps_env.sh — sourced by the GPU scripts (repo root as cwd): the GPU machine
# has no jansson/pcre2/utf8proc; their Debian packages travel in .deps/*.deb
# (see tests/gpu/run_device.sh) and are unpacked into .deps/root, then found
# through pkg-config (sysroot) and the loader paths.
if ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p .deps/root
  for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
  export PKG_CONFIG_SYSROOT_DIR=$PWD/.deps/root
  export PKG_CONFIG_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  # the .pc files name /usr/lib...; the sysroot covers -I/-L, the linker needs the libs too
  export LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}
fi
