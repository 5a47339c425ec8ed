#!/usr/bin/env bash
# Prints the path of a cargo-installed tool, installing it first if the cache
# does not hold it yet:
#
#   hack/image/cargo-tool.sh CRATE VERSION [BINARY]
#
# Each tool lives in $TFJOB_CACHE_DIR/tools/CRATE-VERSION (pinned, so a new
# version is a new directory and never a silent upgrade), installed from
# crates.io with the tool's own Cargo.lock (--locked). A stamp file marks a
# finished install, so an interrupted one is redone. The build uses a
# throwaway target directory: never the operator's CARGO_TARGET_DIR.
#
# CARGO_TOOL_PROFILE=debug installs an unoptimized build: for a tool that runs
# for seconds on every cold `make test`, where its install is the cost
# (cargo-deny 0.20.2 from an empty target, idle 2 cores: 64 s debug, 167 s
# release; its check then takes 2.7 s instead of 0.8 s).
set -euo pipefail

crate=${1:?crate}
version=${2:?version}
binary=${3:-$crate}
cache=${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}
root=$cache/tools/$crate-$version

if [[ ! -f $root/.installed ]]; then
  rm -rf "$root"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  echo "installing $crate $version into $root (once)" >&2
  profile=()
  [[ "${CARGO_TOOL_PROFILE:-release}" != debug ]] || profile=(--debug)
  cargo install --quiet --locked "${profile[@]}" --root "$root" --version "=$version" \
    --target-dir "$build" "$crate" >&2
  touch "$root/.installed"
fi
echo "$root/bin/$binary"
