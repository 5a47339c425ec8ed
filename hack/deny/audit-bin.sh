#!/usr/bin/env bash
# Audits the dependency list a binary carries (cargo-auditable's `.dep-v0`
# section) against the RustSec snapshot, offline, as `make deny` audits
# Cargo.lock (`make image-test` runs it on the binary in the image):
#
#   hack/deny/audit-bin.sh CARGO_AUDIT BINARY [SNAPSHOT_DIR]
#
# The database is the one `make deny` reads (../shared/advisory-db or
# $TFJOB_ADVISORY_DB, laid out by hack/deny/advisory-db.sh into a temporary
# folder: a symlink, nothing copied), with the same staleness bound:
# deny.toml's maximum-db-staleness, counted from the day in the snapshot's
# SNAPSHOT file. cargo-audit checks no age with --no-fetch, so this script
# does, before it runs. It fails on a vulnerability and, with --deny warnings,
# on an unmaintained or unsound crate, as cargo-deny's defaults do. Yanked
# crates are left to `make deny` (cargo-audit would ask crates.io).
set -euo pipefail
audit=${1:?usage: audit-bin.sh CARGO_AUDIT BINARY [SNAPSHOT_DIR]}
binary=${2:?usage: audit-bin.sh CARGO_AUDIT BINARY [SNAPSHOT_DIR]}
snapshot=${3:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)

bound=$(sed -n 's/^maximum-db-staleness = "P\([0-9]*\)D"$/\1/p' "$repo/deny.toml")
[[ -n $bound ]] || { echo "audit-bin: deny.toml has no maximum-db-staleness = \"P<days>D\"" >&2; exit 1; }
day=$(bash "$repo/hack/deny/advisory-db.sh" --print-day $snapshot)
age=$((($(date -u +%s) - $(date -u -d "$day" +%s)) / 86400))
if ((age > bound)); then
  echo "audit-bin: the advisory database snapshot of $day is $age days old, more than" \
    "deny.toml's maximum-db-staleness ($bound days): refresh ../shared/advisory-db" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$(bash "$repo/hack/deny/advisory-db.sh" "$work" $snapshot)
"$audit" audit --no-fetch --no-yanked --deny warnings --color never \
  --db "$root/advisory-db-3157b0e258782691" bin "$binary"
echo "audit-bin: no advisory matches the dependencies embedded in $binary (snapshot of $day, $age days old, bound $bound)"
