#!/usr/bin/env bash
# Checks what `make image` built (`make image-test`): the OCI image's config,
# its layers, the binary inside it, the image digest's reproducibility, the
# dependency list embedded in the binary (against Cargo.lock, the SBOM and the
# RustSec advisories) and the SBOM. Prints the sizes.
#
#   hack/image/test.sh [--arch amd64|arm64]   (the image in $TFJOB_IMAGE_DIR/ARCH,
#                                              default $CARGO_TARGET_DIR/image/amd64)
#   hack/image/test.sh --multiarch            (also the joined image of hack/image/multiarch.sh)
#
# An arm64 binary is run through qemu-aarch64-static (Debian's qemu-user-static).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
source hack/image/versions.env
export TFJOB_CACHE_DIR=${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$TFJOB_CACHE_DIR/target}
base=${TFJOB_IMAGE_DIR:-$CARGO_TARGET_DIR/image}
arches=(amd64)
case ${1:-} in
  --arch) arches=("$2") ;;
  --multiarch) arches=(amd64 arm64) ;;
esac
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
work=$(mktemp -d)
check() { # check DESCRIPTION COMMAND...: the command's output is shown only when it fails
  local what=$1; shift
  if "$@" >"$work/check.out" 2>&1; then ok "$what"; else fail "$what"; cat "$work/check.out"; fi
}
trap 'rm -rf "$work"' EXIT

test_image() {
  local arch=$1 dir=$base/$1 layout ref manifest_digest manifest blob layer layer_bytes
  local bin rootfs out dns epoch again other audit_info sbom image_bytes bad_blobs
  echo "--- the $arch image in $dir"
  [[ -f $dir/oci/index.json ]] || { fail "no $arch image in $dir/oci: run 'make image' first"; return; }
  layout=$dir/oci
  ref=oci:$layout:$version

  # --- the config, as a registry or a kubelet reads it
  skopeo inspect --config "$ref" >"$work/$arch.config.json"
  manifest_digest=$(skopeo inspect "$ref" | jq -r .Digest)
  jqcheck() { jq -e "$1" "$work/$arch.config.json" >/dev/null; }
  check "the image runs as the numeric user 65532:65532" jqcheck '.config.User == "65532:65532"'
  check "the entrypoint is the operator binary" jqcheck '.config.Entrypoint == ["/usr/local/bin/tfjob-operator"]'
  check "the default command is run" jqcheck '.config.Cmd == ["run"]'
  check "ports 8080 (metrics) and 8081 (probes) are declared" \
    jqcheck '.config.ExposedPorts | keys == ["8080/tcp", "8081/tcp"]'
  check "the image is linux/$arch" jqcheck ".os == \"linux\" and .architecture == \"$arch\""
  check "the version label is the crate's" jqcheck ".config.Labels[\"org.opencontainers.image.version\"] == \"$version\""

  # --- every blob is what its name says (the layout is not corrupt)
  bad_blobs=0
  for blob in "$layout"/blobs/sha256/*; do
    [[ $(sha256sum <"$blob" | cut -d' ' -f1) == "$(basename "$blob")" ]] || bad_blobs=$((bad_blobs + 1))
  done
  check "every blob's sha256 matches its name" test "$bad_blobs" -eq 0

  # --- the layers: only the binary and its directories
  manifest=$layout/blobs/sha256/${manifest_digest#sha256:}
  : >"$work/$arch.files"
  layer_bytes=0
  for layer in $(jq -r '.layers[].digest' "$manifest"); do
    blob=$layout/blobs/sha256/${layer#sha256:}
    layer_bytes=$((layer_bytes + $(stat -c %s "$blob")))
    tar -tzf "$blob" >>"$work/$arch.files"
  done
  printf '%s\n' usr/ usr/local/ usr/local/bin/ usr/local/bin/tfjob-operator >"$work/$arch.expected"
  check "the layers hold only usr/local/bin/tfjob-operator and its directories" \
    diff -u "$work/$arch.expected" "$work/$arch.files"
  check "no shell or busybox in any layer" \
    bash -c "! grep -Eq '(^|/)(sh|bash|dash|ash|busybox)\$' '$work/$arch.files'"

  # --- the binary inside the image
  umoci unpack --rootless --image "$layout:$version" "$work/$arch.bundle" >/dev/null
  rootfs=$work/$arch.bundle/rootfs
  bin=$rootfs/usr/local/bin/tfjob-operator
  check "the image's binary is the one make image built" cmp -s "$bin" "$dir/tfjob-operator"
  check "the binary is statically linked (no program interpreter)" \
    bash -c "! readelf --program-headers '$bin' | grep -q INTERP"
  check "the binary needs no shared library" bash -c "! readelf --dynamic '$bin' | grep -q NEEDED"
  # Run it as the image would: in a root that holds nothing else, as 65532.
  if [[ $arch == arm64 ]]; then
    run_in_image() { qemu-aarch64-static "$bin" "$@"; }
  elif [[ $(id -u) == 0 ]]; then
    run_in_image() { chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/tfjob-operator "$@"; }
  else
    run_in_image() { "$bin" "$@"; }
  fi
  out=$(run_in_image version 2>&1 || true)
  local how="from the image's root as 65532"
  [[ $arch == arm64 ]] && how="under qemu-aarch64-static"
  check "'tfjob-operator version' runs $how (printed: $out)" \
    test "$out" == "tfjob-operator $version"

  # Name resolution in a root with no NSS libraries: static glibc still reads
  # /etc/hosts (which the kubelet mounts into every container). A kubeconfig
  # naming apiserver.example on 127.0.0.1 port 1 must get as far as "connection
  # refused"; without the hosts entry, the same run must fail to resolve.
  if [[ $arch == amd64 && $(id -u) == 0 ]] && command -v openssl >/dev/null; then
    dns=$work/$arch.dns
    cp -a "$rootfs" "$dns"
    mkdir -p "$dns/etc" "$dns/cfg"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout /dev/null \
      -out "$work/ca.pem" -subj /CN=image-test -days 1 2>/dev/null
    cat >"$dns/cfg/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver.example:1", certificate-authority-data: "$(base64 -w0 "$work/ca.pem")"}}]
users: [{name: u, user: {token: image-test}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
KUBECONFIG
    chmod -R a+rX "$dns"
    echo "127.0.0.1 apiserver.example" >"$dns/etc/hosts"
    out=$(KUBECONFIG=/cfg/kubeconfig timeout 30 chroot --userspec=65532:65532 "$dns" /usr/local/bin/tfjob-operator run 2>&1 || true)
    check "in the image, a kubeconfig's host name resolves through /etc/hosts" grep -q "Connection refused" <<<"$out"
    rm "$dns/etc/hosts"
    out=$(KUBECONFIG=/cfg/kubeconfig timeout 30 chroot --userspec=65532:65532 "$dns" /usr/local/bin/tfjob-operator run 2>&1 || true)
    check "without the /etc/hosts entry the same name does not resolve" grep -q "failed to lookup address" <<<"$out"
  fi

  # --- reproducible: the same binary at the same commit gives the same digest;
  # another SOURCE_DATE_EPOCH gives another (so the digest does track the input)
  epoch=$(git log -1 --format=%ct)
  again=$(SOURCE_DATE_EPOCH=$epoch hack/image/assemble.sh --arch "$arch" --binary "$dir/tfjob-operator" --out "$work/$arch.again" | awk '{print $3}')
  check "a second assembly gives the same digest ($manifest_digest; an image older than HEAD differs: make image)" test "$again" == "$manifest_digest"
  other=$(SOURCE_DATE_EPOCH=$((epoch + 1)) hack/image/assemble.sh --arch "$arch" --binary "$dir/tfjob-operator" --out "$work/$arch.other" | awk '{print $3}')
  check "another SOURCE_DATE_EPOCH gives another digest" test "$other" != "$manifest_digest"

  # --- the dependency list cargo-auditable embedded, against Cargo.lock and the SBOM
  audit_info=$(hack/image/cargo-tool.sh rust-audit-info "$RUST_AUDIT_INFO_VERSION")
  "$audit_info" "$bin" >"$work/$arch.audit.json" 2>"$work/$arch.audit.err" \
    || { cat "$work/$arch.audit.err"; echo '{"packages": []}' >"$work/$arch.audit.json"; }
  jq -r '.packages[] | "\(.name) \(.version)"' "$work/$arch.audit.json" | sort -u >"$work/$arch.audit.txt"
  python3 -c 'import sys, tomllib
for p in tomllib.load(open(sys.argv[1], "rb"))["package"]:
    print(p["name"], p["version"])' "$repo/Cargo.lock" >"$work/$arch.lock.txt"
  check "the binary embeds a dependency list with the operator at its root" \
    jq -e --arg v "$version" '.packages[] | select(.root == true and .name == "tfjob-operator" and .version == $v)' "$work/$arch.audit.json"
  check "every embedded dependency is in Cargo.lock at that version" \
    bash -c "comm -23 '$work/$arch.audit.txt' <(sort -u '$work/$arch.lock.txt') | (! grep .)"
  check "the embedded list holds the runtime dependencies (kube-client, rustls, tokio)" \
    bash -c "grep -q '^kube-client ' '$work/$arch.audit.txt' && grep -q '^rustls ' '$work/$arch.audit.txt' && grep -q '^tokio ' '$work/$arch.audit.txt'"
  check "the embedded list holds no dev-dependency (proptest, kube-runtime)" \
    bash -c "! grep -Eq '^(proptest|kube-runtime) ' '$work/$arch.audit.txt'"
  check "no OpenSSL is linked (openssl-sys absent)" bash -c "! grep -q '^openssl-sys ' '$work/$arch.audit.txt'"
  # The same list against the RustSec snapshot `make deny` reads, offline and
  # with its staleness bound (hack/deny/audit-bin.sh); then proof that this
  # audit can fail (a fixture advisory in a temporary copy of the database).
  cargo_audit=$(hack/image/cargo-tool.sh cargo-audit "$CARGO_AUDIT_VERSION")
  check "cargo audit bin: no RustSec advisory matches the embedded dependencies (offline snapshot)" \
    bash hack/deny/audit-bin.sh "$cargo_audit" "$bin"
  check "cargo audit bin fails on a fixture advisory against tokio, and on a stale snapshot" \
    bash hack/deny/audit-bin-selftest.sh "$cargo_audit" "$bin"

  sbom=$dir/tfjob-operator.cdx.json
  check "the SBOM is CycloneDX and describes tfjob-operator $version" \
    jq -e --arg v "$version" '.bomFormat == "CycloneDX" and .metadata.component.name == "tfjob-operator" and .metadata.component.version == $v' "$sbom"
  jq -r '.components[] | "\(.name) \(.version)"' "$sbom" | sort -u >"$work/$arch.sbom.txt"
  check "the SBOM and the binary list the same crates" diff -u "$work/$arch.audit.txt" <(grep -v '^tfjob-operator ' "$work/$arch.sbom.txt" | cat - <(echo "tfjob-operator $version") | sort -u)

  # --- sizes
  image_bytes=$((layer_bytes + $(stat -c %s "$manifest") + $(stat -c %s "$layout/blobs/sha256/$(jq -r .config.digest "$manifest" | cut -d: -f2)")))
  echo "sizes ($arch): binary $(stat -c %s "$bin") B, image (manifest + config + compressed layers) $image_bytes B, $(wc -l <"$work/$arch.audit.txt") crates embedded"
  check "the image stays under 30 MB compressed" test "$image_bytes" -lt 30000000
}

for arch in "${arches[@]}"; do test_image "$arch"; done

if [[ ${1:-} == --multiarch ]]; then
  echo "--- the multi-platform image in $base/oci"
  skopeo inspect --raw "oci:$base/oci:$version" >"$work/index.json"
  check "the tag names an image index of linux/amd64 and linux/arm64" \
    jq -e '.mediaType == "application/vnd.oci.image.index.v1+json"
           and ([.manifests[].platform | "\(.os)/\(.architecture)"] == ["linux/amd64", "linux/arm64"])' "$work/index.json"
  for arch in amd64 arm64; do
    want=$(skopeo inspect "oci:$base/$arch/oci:$version" | jq -r .Digest)
    got=$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' "$work/index.json")
    check "the index's $arch entry is the $arch image ($want)" test "$got" == "$want"
    picked=$(skopeo --override-arch "$arch" --override-os linux inspect "oci:$base/oci:$version" | jq -r .Architecture)
    check "a $arch node resolves the index to the $arch image" test "$picked" == "$arch"
  done
fi

echo "image-test: $passed passed, $failed failed"
((failed == 0))
