#!/usr/bin/env bash
# Proves that hack/deny/audit-bin.sh (the image test's audit of the binary's
# embedded dependency list) can fail, as hack/deny/selftest.sh does for
# `make deny`: in a temporary copy of the RustSec snapshot (outside the
# repository, removed afterwards), the audit of BINARY must pass as the copy
# is, fail naming the fixture advisory against tokio (hack/deny/fixture/)
# once it is added, and fail naming the bound when the copy's SNAPSHOT day is
# older than deny.toml's maximum-db-staleness.
#
#   hack/deny/audit-bin-selftest.sh CARGO_AUDIT BINARY
set -euo pipefail
audit=${1:?usage: audit-bin-selftest.sh CARGO_AUDIT BINARY}
binary=${2:?usage: audit-bin-selftest.sh CARGO_AUDIT BINARY}
repo=$(cd "$(dirname "$0")/../.." && pwd)
snapshot=$(bash "$repo/hack/deny/advisory-db.sh" --print-snapshot)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/snapshot"
cp -R "$snapshot/crates" "$work/snapshot/crates"
cp "$snapshot/SNAPSHOT" "$work/snapshot/SNAPSHOT"
check() { bash "$repo/hack/deny/audit-bin.sh" "$audit" "$binary" "$work/snapshot" >"$work/out" 2>&1; }
failed() { cat "$work/out"; echo "audit-bin selftest: $*" >&2; exit 1; }

check || failed "the copy without the fixture already fails"
mkdir -p "$work/snapshot/crates/tokio"
cp "$repo/hack/deny/fixture/RUSTSEC-2099-0001.md" "$work/snapshot/crates/tokio/"
! check || failed "an advisory against tokio (in the binary) did not fail the audit"
grep -q RUSTSEC-2099-0001 "$work/out" || failed "the audit failed, but not naming the fixture advisory"
rm "$work/snapshot/crates/tokio/RUSTSEC-2099-0001.md"

sed -i 's/([0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\})/(2000-01-01)/' "$work/snapshot/SNAPSHOT"
! check || failed "a snapshot of 2000-01-01 passed the staleness bound"
grep -q "maximum-db-staleness" "$work/out" || failed "the stale snapshot failed, but not naming the bound"
echo "audit-bin selftest: a matching advisory fails the binary's audit (RUSTSEC-2099-0001 against tokio), so does a stale snapshot; the snapshot alone passes"
