#!/usr/bin/env bash
# Proves that `make deny`'s advisory check can fail: in a temporary copy of
# the RustSec snapshot (outside the repository, removed afterwards), a fixture
# advisory against every tokio version (hack/deny/fixture/) must make
# `cargo deny check advisories` fail and name it; the same check on the copy
# without the fixture must pass (so the failure is the fixture's, not the
# copy's). And without any database (a clone outside the project's layout,
# no network), `make deny` must stop with one line saying how to get one.
#
#   hack/deny/selftest.sh CARGO_DENY
set -euo pipefail
deny=${1:?usage: selftest.sh CARGO_DENY}
repo=$(cd "$(dirname "$0")/../.." && pwd)
snapshot=$(bash "$repo/hack/deny/advisory-db.sh" --print-snapshot)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/snapshot" "$work/dbs"
cp -R "$snapshot/crates" "$work/snapshot/crates"
# The copy's day is the database's (a snapshot's SNAPSHOT file, or a checkout's last commit).
echo "A copy of $snapshot ($(bash "$repo/hack/deny/advisory-db.sh" --print-day))." >"$work/snapshot/SNAPSHOT"

check() {
  TFJOB_ADVISORY_DB_PATH=$(bash "$repo/hack/deny/advisory-db.sh" "$work/dbs" "$work/snapshot") \
    "$deny" --offline --manifest-path "$repo/Cargo.toml" --config "$repo/deny.toml" \
    check --hide-inclusion-graph advisories >"$work/out" 2>&1
}

check || { cat "$work/out"; echo "deny selftest: the copy without the fixture already fails" >&2; exit 1; }
mkdir -p "$work/snapshot/crates/tokio"
cp "$repo/hack/deny/fixture/RUSTSEC-2099-0001.md" "$work/snapshot/crates/tokio/"
if check; then
  cat "$work/out"
  echo "deny selftest: an advisory against tokio (a dependency) did not fail the check" >&2
  exit 1
fi
grep -q RUSTSEC-2099-0001 "$work/out" || {
  cat "$work/out"
  echo "deny selftest: the check failed, but not naming the fixture advisory" >&2
  exit 1
}

# No database anywhere, fetching forbidden: exit 1 and one line, naming where
# to get a database and the variable that points at it.
rc=0
TFJOB_ADVISORY_DB="$work/none" TFJOB_ADVISORY_FETCH=0 \
  bash "$repo/hack/deny/check.sh" "$deny" "$work/no-dbs" >"$work/out" 2>"$work/err" || rc=$?
if ((rc != 1)) || [[ $(wc -l <"$work/err") != 1 ]] \
  || ! grep -q "^make deny: no RustSec advisory database .*git clone https://github.com/rustsec/advisory-db DIR, then TFJOB_ADVISORY_DB=DIR make deny$" "$work/err"; then
  cat "$work/out" "$work/err"
  echo "deny selftest: without a database, make deny did not stop with its one line (exit $rc)" >&2
  exit 1
fi
echo "deny selftest: a matching advisory fails the check (RUSTSEC-2099-0001 against tokio), the snapshot alone passes; no database at all stops with one line saying how to get one"
