#!/usr/bin/env bash
# Joins the per-architecture images that hack/image/build.sh wrote into one
# multi-platform image (`make image-multiarch`):
#
#   hack/image/multiarch.sh            ($TFJOB_IMAGE_DIR, default $CARGO_TARGET_DIR/image)
#
# reads amd64/oci and arm64/oci and writes oci/: an OCI layout whose tag (the
# crate version) names an image index listing both manifests with their
# platforms, so a node pulls the one for its architecture. umoci edits single
# manifests only, so the index is written here; its bytes are jq's compact
# JSON of fixed input, so it is as reproducible as the two images.
# `skopeo copy --all oci:DIR/oci:VERSION docker://REGISTRY/tfjob-operator:VERSION`
# pushes all of it.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
export TFJOB_CACHE_DIR=${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$TFJOB_CACHE_DIR/target}
dir=${TFJOB_IMAGE_DIR:-$CARGO_TARGET_DIR/image}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -1)
out=$dir/oci

rm -rf "$out"
mkdir -p "$out/blobs/sha256"
echo '{"imageLayoutVersion":"1.0.0"}' >"$out/oci-layout"
entries=()
for arch in amd64 arm64; do
  src=$dir/$arch/oci
  [[ -f $src/index.json ]] || { echo "multiarch.sh: no $arch image in $src (hack/image/build.sh --arch $arch)" >&2; exit 1; }
  cp -n "$src"/blobs/sha256/* "$out/blobs/sha256/"
  entries+=("$(jq -c --arg tag "$version" --arg arch "$arch" \
    '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag)
     | {mediaType, digest, size, platform: {architecture: $arch, os: "linux"}}' "$src/index.json")")
done
printf '%s\n' "${entries[@]}" \
  | jq -cs '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: .}' \
  | tr -d '\n' >"$out/index.blob"
digest=sha256:$(sha256sum <"$out/index.blob" | cut -d' ' -f1)
size=$(stat -c %s "$out/index.blob")
mv "$out/index.blob" "$out/blobs/sha256/${digest#sha256:}"
jq -cn --arg d "$digest" --argjson s "$size" --arg tag "$version" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $d, size: $s,
                 annotations: {"org.opencontainers.image.ref.name": $tag}}]}' >"$out/index.json"
echo "multiarch.sh: oci:$out:$version $digest (linux/amd64, linux/arm64)"
