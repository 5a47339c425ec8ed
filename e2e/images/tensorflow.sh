#!/usr/bin/env bash
# Builds the TensorFlow image the real examples train in (examples/real/),
# from registry packages only: a Debian bookworm rootfs from mmdebstrap with
# Debian's python3 (3.11), tensorflow-cpu and its dependency closure from PyPI
# installed offline from pinned wheels (tensorflow-requirements.txt), one
# layer assembled with umoci into an OCI layout. No image registry is used.
#
#   e2e/images/tensorflow.sh           build (or reuse); print the image's directory
#   e2e/images/tensorflow.sh --key     print the cache key only
#   e2e/images/tensorflow.sh --wheels  download (or reuse) the wheels, print their dir
#   e2e/images/build.sh tensorflow [--print-ref] [--import]   the same, as the
#                                      other images (build.sh runs this script)
#
# Cached under $TFJOB_CACHE_DIR/images/tensorflow-<key>/ where the key hashes
# the recipe and every input (the requirements, the Debian suite and package
# list, SOURCE_DATE_EPOCH): oci/ (the layout), image.tar (that layout as an
# OCI archive, which `ctr images import` takes with its layers still
# compressed), ref (the name it imports as, fixed because the examples name
# it: tfjob-e2e.local/tensorflow:2.20.0),
# packages.txt and requirements.txt (what is inside). The wheels are cached
# under images/wheels-<key of the requirements>/ (run-local.sh installs its
# venv from the same wheels).
# Reproducible: SOURCE_DATE_EPOCH fixes every timestamp (mmdebstrap, pip's
# hash-checked .pyc files, the layer's mtimes, the image config), umoci walks
# the rootfs in sorted order, so the same inputs and the same Debian mirror
# content give the same digest. The programs are not in the image: the TFJobs
# mount them from a ConfigMap, so the image stays generic.
# Cold: 597 s measured on 2 cores shared with five other builds (mmdebstrap
# and the wheels' install ~2/3, umoci's compression the rest; 1151 s under a
# heavier load), plus ~30 s for the wheels once; 437 MiB compressed. Warm: a
# cache check. Progress every 30 s.
set -euo pipefail
IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LOG_TAG=image-tensorflow
# shellcheck source=e2e/lib.sh
source "$IMAGES_DIR/../lib.sh"

TF_VERSION=2.20.0
SUITE=bookworm
# Debian packages beyond minbase: the interpreter TensorFlow's cp311 wheels
# need, and nothing else (no pip, no compilers: the wheels are prebuilt).
DEBIAN_PACKAGES=python3
# pip runs from its wheel inside the rootfs' chroot to install the others,
# and is not left in the image.
PIP_VERSION=26.3
PIP_WHEEL=pip-$PIP_VERSION-py3-none-any.whl
PIP_WHEEL_SHA256=f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13
# 2026-01-01T00:00:00Z: every timestamp in the image.
export SOURCE_DATE_EPOCH=1767225600
REQUIREMENTS="$IMAGES_DIR/tensorflow-requirements.txt"

# The key: the recipe (the functions that make the rootfs and the layer, not
# the ones that print or import), its pinned inputs, and the requirements.
image_key() {
  {
    declare -f customize_hook build_image
    sha256sum "$REQUIREMENTS" | cut -d' ' -f1
    echo "$TF_VERSION $SUITE $DEBIAN_PACKAGES $PIP_WHEEL_SHA256 $SOURCE_DATE_EPOCH"
  } | sha256sum | cut -c1-16
}
wheels_key() { sha256sum "$REQUIREMENTS" | cut -c1-16; }
wheels_dir() { echo "$TFJOB_CACHE_DIR/images/wheels-$(wheels_key)"; }
image_dir() { echo "$TFJOB_CACHE_DIR/images/tensorflow-$(image_key)"; }

# Downloads the pinned wheels once (pip checks every hash); .complete marks a
# finished download so an interrupted one is never taken for done.
fetch_wheels() {
  local dir
  dir=$(wheels_dir)
  [[ -f "$dir/.complete" ]] && return
  log "downloading the pinned wheels of tensorflow-cpu $TF_VERSION into $dir (once, ~330 MB)"
  local start=$SECONDS
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  local platform=(--only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux_2_28_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    "${platform[@]}" -r "$REQUIREMENTS" -d "$dir.tmp"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps "pip==$PIP_VERSION" -d "$dir.tmp"
  echo "$PIP_WHEEL_SHA256  $dir.tmp/$PIP_WHEEL" | sha256sum --check --quiet ||
    die "$PIP_WHEEL does not have the pinned sha256 $PIP_WHEEL_SHA256"
  touch "$dir.tmp/.complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  log "  wheels downloaded in $((SECONDS - start)) s"
}

# mmdebstrap's customize hook (it runs `tensorflow.sh --customize-hook ROOT
# WHEELS`): installs the wheels with the rootfs' own python3, so they land
# where Debian's python looks (/usr/local/lib/python3.11/dist-packages), then
# fixes the files that would differ between hosts or runs.
customize_hook() {
  local root="$1" wheels="$2"
  mkdir -p "$root/tmp/wheels"
  cp "$wheels"/*.whl "$REQUIREMENTS" "$root/tmp/wheels/"
  # --break-system-packages: bookworm marks its python EXTERNALLY-MANAGED;
  # these go to /usr/local, apart from Debian's own packages.
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
    python3 "/tmp/wheels/$PIP_WHEEL/pip" install --no-index --find-links /tmp/wheels --no-deps \
    --require-hashes --break-system-packages --root-user-action=ignore --disable-pip-version-check \
    --no-cache-dir --progress-bar off -r /tmp/wheels/tensorflow-requirements.txt
  rm -rf "$root/tmp/wheels"
  # The host's files mmdebstrap copies in for debootstrap compatibility; the
  # kubelet mounts its own in every container.
  : >"$root/etc/resolv.conf"
  echo tensorflow >"$root/etc/hostname"
  rm -f "$root/var/cache/ldconfig/aux-cache"
}

build_image() {
  local dir work wheels created
  dir=$(image_dir)
  wheels=$(wheels_dir)
  work="$dir.tmp"
  rm -rf "$work" && mkdir -p "$work"
  local start=$SECONDS
  with_progress "making the Debian $SUITE rootfs with python3 and the wheels" "$work/mmdebstrap.log" \
    mmdebstrap --mode=root --variant=minbase --format=directory --include="$DEBIAN_PACKAGES" \
    --aptopt='Acquire::Retries "3"' \
    --customize-hook="bash '$IMAGES_DIR/tensorflow.sh' --customize-hook \"\$1\" '$wheels'" \
    "$SUITE" "$work/rootfs"
  # What pip and the hook wrote carries today's time: clamp every mtime to
  # SOURCE_DATE_EPOCH (after mmdebstrap, once /proc and /sys are unmounted).
  find "$work/rootfs" -xdev -newermt "@$SOURCE_DATE_EPOCH" -print0 |
    xargs -0 -r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"
  # shellcheck disable=SC2016 # dpkg-query's format, not shell
  chroot "$work/rootfs" dpkg-query -W -f '${Package} ${Version}\n' >"$work/packages.txt"
  cp "$REQUIREMENTS" "$work/requirements.txt"
  created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$TF_VERSION"
  with_progress "packing the rootfs into one layer" "$work/umoci.log" \
    umoci insert --image "$work/oci:$TF_VERSION" --history.created "$created" \
    --history.created_by "e2e/images/tensorflow.sh" "$work/rootfs" /
  umoci config --image "$work/oci:$TF_VERSION" --no-history --created "$created" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONUNBUFFERED=1 --config.env TF_CPP_MIN_LOG_LEVEL=1 \
    --config.workingdir / --config.cmd python3 --architecture amd64 --os linux
  umoci gc --layout "$work/oci"
  rm -rf "$work/rootfs" "$work"/*.log
  rm -rf "$dir" && mv "$work" "$dir"
  log "built $(manifest_digest "$dir") ($(du -sm "$dir/oci" | cut -f1) MiB compressed) in $((SECONDS - start)) s"
}

# The OCI archive ctr imports, named by the io.containerd.image.name
# annotation (index.json only: the manifest and its digest are unchanged).
write_archive() {
  local dir="$1" ref
  ref="tfjob-e2e.local/tensorflow:$TF_VERSION"
  rm -rf "$dir/archive.tmp" && cp -a "$dir/oci" "$dir/archive.tmp"
  python3 - "$dir/archive.tmp/index.json" "$ref" <<'PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for manifest in index["manifests"]:
    annotations = manifest.setdefault("annotations", {})
    annotations["io.containerd.image.name"] = ref
    annotations["org.opencontainers.image.ref.name"] = ref
json.dump(index, open(path, "w"))
PY
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    -C "$dir/archive.tmp" -cf "$dir/image.tar.tmp" .
  rm -rf "$dir/archive.tmp"
  echo "$ref" >"$dir/ref"
  mv "$dir/image.tar.tmp" "$dir/image.tar"
}

manifest_digest() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$1/oci/index.json"
}

case "${1:-}" in
  --key)
    image_key
    exit 0
    ;;
  --wheels)
    fetch_wheels
    wheels_dir
    exit 0
    ;;
  --customize-hook)
    customize_hook "$2" "$3"
    exit 0
    ;;
  "") ;;
  *) die "usage: $0 [--key]" ;;
esac
[[ $EUID -eq 0 ]] || die "mmdebstrap --mode=root and chroot need root"
for tool in mmdebstrap umoci python3; do
  command -v "$tool" >/dev/null || die "$tool not found: apt-get install mmdebstrap umoci python3-pip"
done
if [[ -f "$(image_dir)/oci/index.json" ]]; then
  log "cached: $(image_dir) ($(manifest_digest "$(image_dir)"))"
else
  fetch_wheels
  log "building the TensorFlow $TF_VERSION image into $(image_dir) (once: ~10 min on 2 cores)"
  build_image
fi
[[ -f "$(image_dir)/image.tar" ]] || write_archive "$(image_dir)"
image_dir
