#!/usr/bin/env bash
# Assembles the operator's OCI image from an already built static binary,
# without a container engine:
#
#   hack/image/assemble.sh --binary PATH --out DIR [--arch amd64|arm64] [--tag TAG]
#
# The image is one layer holding only the binary (usr/local/bin/tfjob-operator,
# root-owned, 0755) and its directories: no shell, no libc, no /etc. The
# binary is static (hack/image/build.sh), TLS is rustls with the cluster's CA
# (the service account's ca.crt in a Pod, or the kubeconfig's), and in a Pod
# the API server is reached by the IP in KUBERNETES_SERVICE_HOST, so nothing
# else is needed at run time. Config: user 65532:65532 (numeric, so
# Kubernetes can check runAsNonRoot), entrypoint the binary, command `run`,
# ports 8080 (metrics) and 8081 (probes), the same as the Dockerfile's.
#
# Reproducible: every timestamp (file mtimes, the config's `created`, the
# history entry) is SOURCE_DATE_EPOCH (default: the commit time of HEAD), the
# layer is written by GNU tar with sorted names and numeric root ownership,
# and umoci compresses and hashes it; so the same binary at the same commit
# gives the same manifest digest on every machine. DIR is an OCI image layout
# (https://github.com/opencontainers/image-spec/blob/main/image-layout.md):
# `skopeo copy oci:DIR:TAG docker://REGISTRY/tfjob-operator:TAG` pushes it.
set -euo pipefail

binary='' out='' arch=amd64 tag=''
while (($#)); do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "assemble.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $binary && -n $out ]] || { echo "usage: $0 --binary PATH --out DIR [--arch A] [--tag T]" >&2; exit 2; }
[[ -x $binary ]] || { echo "assemble.sh: $binary is not an executable" >&2; exit 1; }
for tool in umoci tar; do
  command -v "$tool" >/dev/null || { echo "assemble.sh: $tool not found (apt-get install umoci)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -1)
tag=${tag:-$version}
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || true)
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null) \
    || { echo "assemble.sh: set SOURCE_DATE_EPOCH (no git history to take it from)" >&2; exit 1; }
fi
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The root filesystem: the binary and its parent directories, every mtime
# SOURCE_DATE_EPOCH.
root=$work/rootfs
install -d -m 0755 "$root/usr/local/bin"
install -m 0755 "$binary" "$root/usr/local/bin/tfjob-operator"
find "$root" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +
# ustar: no pax headers (which would carry atime/ctime); names sorted; owner
# root by number only (no user or group names).
tar --create --file="$work/layer.tar" --directory="$root" --format=ustar \
  --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" usr

rm -rf "$out"
mkdir -p "$(dirname "$out")"
umoci init --layout "$out"
umoci new --image "$out:$tag"
umoci raw add-layer --image "$out:$tag" \
  --history.created "$created" \
  --history.created_by "hack/image/assemble.sh: usr/local/bin/tfjob-operator" \
  "$work/layer.tar"
umoci config --image "$out:$tag" --no-history \
  --created "$created" --os linux --architecture "$arch" \
  --config.user 65532:65532 \
  --config.entrypoint /usr/local/bin/tfjob-operator \
  --config.cmd run \
  --config.exposedports 8080/tcp --config.exposedports 8081/tcp \
  --config.label org.opencontainers.image.title=tfjob-operator \
  --config.label "org.opencontainers.image.description=Runs Kubeflow-compatible TFJobs (kubeflow.org/v1)" \
  --config.label org.opencontainers.image.licenses=Apache-2.0 \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.created=$created"
# Editing leaves the superseded config and manifest blobs behind: drop them.
umoci gc --layout "$out"

digest=$(jq -r --arg tag "$tag" \
  '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) | .digest' \
  "$out/index.json")
echo "assemble.sh: oci:$out:$tag $digest ($arch, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
