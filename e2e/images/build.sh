#!/usr/bin/env bash
# Images without a registry, for the real node (e2e/real-node/):
#
#   build.sh NAME [--print-ref] [--import]
#
#   sandbox    the Pod sandbox ("pause") image: Debian's busybox-static binary,
#              sleeping for ever (containerd kills it with SIGKILL at StopPodSandbox)
#   busybox    Debian's busybox-static with its applets, for test Pods
#   curl       Debian (mmdebstrap, variant essential) + curl + ca-certificates:
#              the chart's `helm test` Pod (busybox's wget cannot speak TLS 1.3
#              to the operator's rustls /metrics, and Debian's segfaults with -T)
#   operator   the image `make image` builds (hack/image/build.sh), unchanged
#   tensorflow Debian bookworm + python3 + tensorflow-cpu from pinned PyPI wheels,
#              for examples/real/ (built by e2e/images/tensorflow.sh)
#
# Each is assembled with umoci (no container engine), cached under
# $TFJOB_CACHE_DIR/images/<name>-<key>/ where the key hashes every input (this
# script, the Debian packages' SHA256 as the archive lists them, the
# operator's OCI manifest digest), and written as a docker-archive
# image.tar named tfjob-e2e.local/<name>:<key> (operator: the chart's default
# name, tfjob-operator:<crate version>). --print-ref prints that name;
# --import imports it into the running real node's containerd
# (`ctr -n k8s.io images import`) and records the name in
# $TFJOB_CLUSTER_DIR/real-node/images.env (REAL_NODE_IMAGE_<NAME>=<ref>). The runtime never pulls: Pods use these
# names with imagePullPolicy IfNotPresent or Never.
set -euo pipefail
export LOG_TAG=images
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/../lib.sh"

NAME="${1:?usage: build.sh sandbox|busybox|curl|operator|tensorflow [--print-ref] [--import]}"
shift
PRINT_REF=0 IMPORT=0
for arg in "$@"; do
  case "$arg" in
    --print-ref) PRINT_REF=1 ;;
    --import) IMPORT=1 ;;
    *) die "unknown option $arg" ;;
  esac
done
IMAGES_DIR="$TFJOB_CACHE_DIR/images"
# Image timestamps: fixed, so the same inputs give the same digest.
CREATED=1970-01-01T00:00:00Z

# "name version sha256" of the candidate .deb of each package, as the archive
# lists it (one apt-cache call: without a package cache, each costs seconds).
deb_ids() {
  local ids
  # On a fresh machine apt has no package lists yet: apt-cache fails, which
  # is what the update below is for, not an error.
  ids=$(apt-cache show --no-all-versions "$@" 2>/dev/null | awk '/^Package:/ {p=$2} /^Version:/ {v=$2} /^SHA256:/ {print p, v, $2}' || true)
  if [[ $(wc -l <<<"$ids") -lt $# || -z "$ids" ]]; then
    apt-get update -qq
    ids=$(apt-cache show --no-all-versions "$@" | awk '/^Package:/ {p=$2} /^Version:/ {v=$2} /^SHA256:/ {print p, v, $2}')
  fi
  echo "$ids"
}

# The key: the image's name, the recipe (the functions that assemble images:
# editing how this script imports or prints does not rebuild anything) and
# the inputs on stdin.
key_of() { { echo "$NAME"; declare -f assemble busybox_tree build_debian; cat; } | sha256sum | cut -c1-16; }

# umoci: an empty image, one layer from a directory, then its config.
assemble() {
  local work="$1" staging="$2" tag="$3"
  shift 3
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci insert --image "$work/oci:$tag" --history.created "$CREATED" --history.created_by "e2e/images/build.sh $NAME" "$staging" /
  umoci config --image "$work/oci:$tag" --created "$CREATED" --no-history --config.user 65532:65532 "$@"
  umoci gc --layout "$work/oci"
}

busybox_tree() {
  local staging="$1" links="$2" work="$3"
  (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root busybox-static >/dev/null)
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
  mkdir -p "$staging/bin" "$staging/tmp"
  chmod 1777 "$staging/tmp"
  cp "$work/deb/bin/busybox" "$staging/bin/busybox"
  if ((links)); then
    local applet
    for applet in $("$staging/bin/busybox" --list); do
      [[ "$applet" == busybox ]] || ln -s busybox "$staging/bin/$applet"
    done
  fi
}

build_debian() {
  local name="$1" work="$2" tag="$3"
  local staging="$work/rootfs"
  mkdir -p "$staging"
  case "$name" in
    sandbox)
      busybox_tree "$staging" 0 "$work"
      assemble "$work" "$staging" "$tag" --config.entrypoint /bin/busybox --config.cmd sleep --config.cmd 2147483647
      ;;
    busybox)
      busybox_tree "$staging" 1 "$work"
      assemble "$work" "$staging" "$tag" --config.cmd sh --config.env PATH=/bin
      ;;
    curl)
      log "  mmdebstrap (Debian bookworm, variant essential, + curl ca-certificates)"
      SOURCE_DATE_EPOCH=0 mmdebstrap --quiet --variant=essential --include=curl,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' bookworm "$work/rootfs.tar" >&2
      rm -rf "$staging" && mkdir -p "$staging"
      tar -C "$staging" -xf "$work/rootfs.tar"
      rm -rf "$staging/var/cache/apt"/* "$staging/var/lib/apt/lists"/* "$staging/var/log"/*
      assemble "$work" "$staging" "$tag" --config.cmd sh \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      ;;
  esac
}

main() {
  local key ref dir
  case "$NAME" in
    sandbox | busybox)
      key=$(deb_ids busybox-static | key_of)
      ;;
    curl)
      command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
      key=$(deb_ids curl ca-certificates libcurl4 base-files libc6 | key_of)
      ;;
    operator)
      local version oci
      version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_DIR/Cargo.toml" | head -n 1)
      oci="${TFJOB_IMAGE_DIR:-${CARGO_TARGET_DIR:-$TFJOB_CACHE_DIR/target}/image}/amd64/oci"
      [[ -f "$oci/index.json" ]] || die "no image in $oci: run 'make image' first"
      key=$(skopeo inspect --raw "oci:$oci:$version" | sha256sum | key_of)
      ;;
    tensorflow)
      # Its own script (a Debian rootfs + python3 + tensorflow-cpu's wheels),
      # which leaves image.tar and ref in the same cache layout.
      bash "$E2E_DIR/images/tensorflow.sh" >/dev/null
      key=$(bash "$E2E_DIR/images/tensorflow.sh" --key)
      ;;
    *) die "unknown image '$NAME' (sandbox, busybox, curl, operator, tensorflow)" ;;
  esac
  if [[ "$NAME" == operator ]]; then
    ref="docker.io/library/tfjob-operator:$version"
  elif [[ "$NAME" == tensorflow ]]; then
    ref=$(cat "$IMAGES_DIR/tensorflow-$key/ref") # the examples' fixed name
  else
    ref="tfjob-e2e.local/$NAME:$key"
  fi
  dir="$IMAGES_DIR/$NAME-$key"
  if [[ ! -f "$dir/image.tar" ]]; then
    local start=$SECONDS work
    log "building image $NAME ($ref)"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    work=$(mktemp -d) && chmod 755 "$work"
    # shellcheck disable=SC2064 # expand now
    trap "rm -rf '$work'" EXIT
    if [[ "$NAME" == operator ]]; then
      skopeo copy --quiet "oci:$oci:$version" "docker-archive:$dir.tmp/image.tar:$ref" >&2
    else
      build_debian "$NAME" "$work" "$key"
      skopeo copy --quiet "oci:$work/oci:$key" "docker-archive:$dir.tmp/image.tar:$ref" >&2
    fi
    echo "$ref" >"$dir.tmp/ref"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    log "  image $NAME built in $((SECONDS - start)) s: $(du -h "$dir/image.tar" | cut -f1)"
  fi
  if ((IMPORT)); then
    local sock="$TFJOB_CLUSTER_DIR/real-node/containerd.sock"
    [[ -S "$sock" ]] || die "no real node's containerd at $sock (e2e/cluster.sh up --real-node)"
    ctr --address "$sock" --namespace k8s.io images import --no-unpack=false "$dir/image.tar" >&2
    log "  imported $ref into the real node"
    # Tests and examples find the name here (tests/real/support.rs `image`).
    local envfile="$TFJOB_CLUSTER_DIR/real-node/images.env" var
    var="REAL_NODE_IMAGE_$(tr '[:lower:]' '[:upper:]' <<<"$NAME")"
    { grep -v "^export $var=" "$envfile" 2>/dev/null || true; echo "export $var=$ref"; } >"$envfile.tmp"
    mv "$envfile.tmp" "$envfile"
  fi
  if ((PRINT_REF)); then echo "$ref"; fi
}

main; exit $?
