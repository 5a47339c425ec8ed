#!/usr/bin/env bash
# `make deny`: cargo deny check advisories bans licenses sources (deny.toml),
# then its self-test (hack/deny/selftest.sh). The RustSec advisory database,
# in this order:
#   1. a snapshot or checkout at $TFJOB_ADVISORY_DB, else ../shared/advisory-db
#      beside the clone (the project's machines and CI): read offline, in place
#      (hack/deny/advisory-db.sh);
#   2. else the database cargo-deny fetches itself into the cache, where the
#      network allows (TFJOB_ADVISORY_FETCH=0 forbids trying), updated on each
#      run and read offline afterwards; a copy fetched before is used when the
#      network is gone, as long as deny.toml's age limit allows;
#   3. else one line saying what is missing and how to get it.
#
#   hack/deny/check.sh CARGO_DENY DBS_DIR
set -euo pipefail
deny=${1:?usage: check.sh CARGO_DENY DBS_DIR}
dbs=${2:?usage: check.sh CARGO_DENY DBS_DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
# The directory cargo-deny keeps deny.toml's db-urls entry in (advisory-db.sh).
fetched="$dbs/fetched/advisory-db-3157b0e258782691"
mkdir -p "$dbs"

if root=$(bash "$repo/hack/deny/advisory-db.sh" "$dbs" 2>"$dbs.why"); then
  export TFJOB_ADVISORY_DB_PATH="$root"
else
  missing=$(cat "$dbs.why")
  mkdir -p "$dbs/fetched"
  if [[ "${TFJOB_ADVISORY_FETCH:-1}" != 0 ]]; then
    echo "deny: ${missing#advisory-db: }: fetching the database with cargo-deny into $dbs/fetched" >&2
    TFJOB_ADVISORY_DB_PATH="$dbs/fetched" "$deny" --manifest-path "$repo/Cargo.toml" --config "$repo/deny.toml" \
      fetch db >"$dbs/fetch.log" 2>&1 || echo "deny: the fetch failed (log: $dbs/fetch.log)" >&2
  fi
  if [[ ! -d "$fetched/crates" ]]; then
    echo "make deny: no RustSec advisory database (${missing#advisory-db: }; cargo-deny could not fetch one${TFJOB_ADVISORY_FETCH:+, TFJOB_ADVISORY_FETCH=$TFJOB_ADVISORY_FETCH}): git clone https://github.com/rustsec/advisory-db DIR, then TFJOB_ADVISORY_DB=DIR make deny" >&2
    exit 1
  fi
  export TFJOB_ADVISORY_DB_PATH="$dbs/fetched" TFJOB_ADVISORY_DB="$fetched"
fi
rm -f "$dbs.why"
"$deny" --offline --manifest-path "$repo/Cargo.toml" --config "$repo/deny.toml" \
  check --hide-inclusion-graph advisories bans licenses sources
bash "$repo/hack/deny/selftest.sh" "$deny"
