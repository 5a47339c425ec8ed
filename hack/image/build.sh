#!/usr/bin/env bash
# Builds what ships, without a container engine (`make image`):
#
#   hack/image/build.sh [--arch amd64|arm64]
#
#   1. the release binary (profile `dist`), statically linked against glibc
#      (`-C target-feature=+crt-static`), built with `cargo auditable` so it
#      carries its exact dependency list in a `.dep-v0` section;
#   2. a CycloneDX SBOM of the same dependency graph (cargo-cyclonedx);
#   3. the OCI image holding only that binary (hack/image/assemble.sh).
#
# Everything lands in $TFJOB_IMAGE_DIR/ARCH (default $CARGO_TARGET_DIR/image,
# i.e. under $TFJOB_CACHE_DIR), never in the repository:
#
#   tfjob-operator            the binary that is in the image (debug info stripped)
#   tfjob-operator.debug      the same binary with its debug info
#   tfjob-operator.cdx.json   its SBOM
#   oci/                      the OCI image layout, tag = the crate version
#
# amd64 is built by the rustup toolchain; arm64 by Debian's rustc-web, the one
# Rust whose aarch64 std a package registry ships (hack/image/rust-arm64.sh).
#
# Paths are remapped (--remap-path-prefix), so the binary names neither this
# checkout nor $CARGO_HOME, and two checkouts build the same bytes.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
source hack/image/versions.env
export TFJOB_CACHE_DIR=${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$TFJOB_CACHE_DIR/target}
arch=amd64
if [[ ${1:-} == --arch ]]; then arch=$2; fi
out=${TFJOB_IMAGE_DIR:-$CARGO_TARGET_DIR/image}/$arch
case $arch in
  amd64) triple=x86_64-unknown-linux-gnu ;;
  arm64)
    triple=aarch64-unknown-linux-gnu
    RUSTC=$(hack/image/rust-arm64.sh)
    export RUSTC
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    ;;
  *) echo "build.sh: --arch amd64 or arm64" >&2; exit 2 ;;
esac

auditable=$(hack/image/cargo-tool.sh cargo-auditable "$CARGO_AUDITABLE_VERSION")
cyclonedx=$(hack/image/cargo-tool.sh cargo-cyclonedx "$CARGO_CYCLONEDX_VERSION")

cargo_home=${CARGO_HOME:-$HOME/.cargo}
start=$SECONDS
# --target, even though it is the host's: RUSTFLAGS then apply to the binary
# only, not to build scripts and proc macros (which cannot be static).
PATH=$(dirname "$auditable"):$PATH \
RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$repo=/src --remap-path-prefix=$cargo_home=/cargo" \
TFJOB_GIT_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || true) \
  cargo auditable build --profile dist --locked --target "$triple" --bin tfjob-operator
echo "build.sh: $arch binary built in $((SECONDS - start)) s"
binary=$CARGO_TARGET_DIR/$triple/dist/tfjob-operator
# A dynamically linked binary would not start in an image without libc.
if readelf --program-headers "$binary" | grep -q INTERP; then
  echo "build.sh: $binary asks for a dynamic loader; it must be static" >&2
  exit 1
fi

mkdir -p "$out"
# The image gets the binary without its DWARF (80 -> 20 MB; 22 -> 8 MB
# compressed): the symbol table stays, so a panic's backtrace still names
# functions, and so does the .dep-v0 section. The full binary (same build id)
# is kept beside it as tfjob-operator.debug, for addr2line or gdb on a crash.
objcopy=objcopy
[[ $arch == arm64 ]] && objcopy=aarch64-linux-gnu-objcopy
install -m 0755 "$binary" "$out/tfjob-operator.debug"
"$objcopy" --strip-debug "$binary" "$out/tfjob-operator"

# cargo-cyclonedx writes beside Cargo.toml; move the file out at once. Its
# serialNumber and timestamp differ per run; the image does not contain it.
sbom=$repo/tfjob-operator_bin.cdx.json
trap 'rm -f "$sbom"' EXIT
PATH=$(dirname "$cyclonedx"):$PATH cargo cyclonedx --format json --spec-version 1.5 \
  --target "$triple" --describe binaries >/dev/null
mv "$sbom" "$out/tfjob-operator.cdx.json"

hack/image/assemble.sh --binary "$out/tfjob-operator" --out "$out/oci" --arch "$arch"
echo "build.sh: $out: binary $(stat -c %s "$out/tfjob-operator") B, $(du -sb "$out/oci" | cut -f1) B of OCI layout"
