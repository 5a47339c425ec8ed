#!/usr/bin/env bash
# Prints the path of a rustc that can build for aarch64-unknown-linux-gnu,
# installing it into the cache first if needed:
#
#   hack/image/rust-arm64.sh        -> $TFJOB_CACHE_DIR/tools/rust-web-<version>/usr/bin/rustc
#
# rustup cannot add a target here (its download server is not a package
# registry), so the arm64 standard library comes from Debian instead: the
# `rustc-web` compiler (bookworm's up-to-date Rust, kept for Firefox and
# Chromium) together with the amd64 and arm64 builds of its
# `libstd-rust-web-dev`. A rustc only links a std built by the very same
# compiler, so the arm64 binary is compiled by Debian's rustc-web, not by the
# rustup toolchain. The .debs are fetched with a private apt state (this
# script never changes the machine's apt configuration or installed packages)
# and unpacked into the cache; the wrapper sets LD_LIBRARY_PATH for the
# compiler's own libraries (librustc_driver, libLLVM).
#
# The C parts (ring) and the final link need the cross gcc and arm64 libc
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross); `make image-arm64`
# installs those Debian packages.
set -euo pipefail

source "$(dirname "$0")/versions.env"
cache=${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}
prefix=$cache/tools/rust-web-$RUST_WEB_DEB_VERSION

if [[ ! -f $prefix/.installed ]]; then
  echo "fetching Debian's rustc-web $RUST_WEB_DEB_VERSION (amd64 compiler, amd64 + arm64 std) into $prefix (once)" >&2
  rm -rf "$prefix"
  state=$(mktemp -d)
  trap 'rm -rf "$state"' EXIT
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/debs"
  chmod -R a+rwx "$state"
  apt=(-o "APT::Architecture=amd64" -o "APT::Architectures::=amd64" -o "APT::Architectures::=arm64"
    -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "Dir::State::status=/dev/null")
  apt-get "${apt[@]}" update -qq
  (cd "$state/debs" && apt-get "${apt[@]}" download -qq \
    "rustc-web:amd64=$RUST_WEB_DEB_VERSION" \
    "libstd-rust-web-1.96:amd64=$RUST_WEB_DEB_VERSION" \
    "libstd-rust-web-dev:amd64=$RUST_WEB_DEB_VERSION" \
    "libstd-rust-web-dev:arm64=$RUST_WEB_DEB_VERSION" \
    "libllvm22:amd64=$LIBLLVM_DEB_VERSION")
  for deb in "$state"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
  # rustc finds its std relative to its own binary: $prefix/usr/lib/rustlib/<target>/lib.
  cat >"$prefix/rustc" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$prefix/usr/bin/rustc" "\$@"
WRAP
  chmod +x "$prefix/rustc"
  "$prefix/rustc" --version >&2
  compgen -G "$prefix/usr/lib/rustlib/aarch64-unknown-linux-gnu/lib/libstd-*.rlib" >/dev/null \
    || { echo "rust-arm64.sh: no aarch64 std in $prefix" >&2; exit 1; }
  touch "$prefix/.installed"
fi
echo "$prefix/rustc"
