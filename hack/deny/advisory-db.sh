#!/usr/bin/env bash
# Lays out the RustSec advisory database snapshot in ../shared/advisory-db
# (or $TFJOB_ADVISORY_DB: a snapshot, or a git checkout of the database) so
# that cargo-deny can read it offline, in place (hack/deny/check.sh falls back
# to cargo-deny's own fetch when there is none):
#
#   hack/deny/advisory-db.sh ROOT [SNAPSHOT_DIR]     prints ROOT, ready for
#                                                     deny.toml's db-path
#   hack/deny/advisory-db.sh --print-snapshot        prints the snapshot's folder
#   hack/deny/advisory-db.sh --print-day [SNAPSHOT_DIR]  prints its day (YYYY-MM-DD)
#
# cargo-deny opens `<db-path>/advisory-db-<hash of the URL>/crates` and takes
# the database's age from that directory's `.git/FETCH_HEAD` (else its HEAD
# commit). The snapshot is data only, no git repository, and is read-only,
# so ROOT gets a directory of that name holding a symlink `crates` to the
# snapshot's own `crates/` (nothing is copied) and an empty git repository
# whose FETCH_HEAD is dated as the snapshot is (its SNAPSHOT file names the
# day). The age check then measures the data's real age, not the time this
# script ran.
#
# ROOT must be outside the repository (the Makefile uses the cache).
set -euo pipefail

root=${1:?usage: advisory-db.sh ROOT [SNAPSHOT_DIR] | --print-snapshot}
repo=$(cd "$(dirname "$0")/../.." && pwd)
# Beside the clone, as CI lays it out; in a git worktree, beside the main one.
default=$repo/../shared/advisory-db
if [[ ! -d $default ]] && common=$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  default=$(dirname "$common")/../shared/advisory-db
fi
snapshot=${2:-${TFJOB_ADVISORY_DB:-$default}}

[[ -d $snapshot/crates ]] || {
  echo "advisory-db: no RustSec database at $snapshot (expected its crates/ folder);" \
    "set TFJOB_ADVISORY_DB to a checkout or snapshot of github.com/rustsec/advisory-db" >&2
  exit 1
}
snapshot=$(cd "$snapshot" && pwd)
if [[ $root == --print-snapshot ]]; then
  echo "$snapshot"
  exit 0
fi
# "... snapshot of its git history at commit <sha> (YYYY-MM-DD)."; a git
# checkout (git clone of the database) instead has its last commit's day.
day=$(sed -n 's/.*(\([0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}\)).*/\1/p' "$snapshot/SNAPSHOT" 2>/dev/null | head -n 1 || true)
if [[ -z $day && -e $snapshot/.git ]]; then
  day=$(git -C "$snapshot" log -1 --format=%cs 2>/dev/null || true)
fi
[[ -n $day ]] || {
  echo "advisory-db: neither $snapshot/SNAPSHOT names the snapshot's day as (YYYY-MM-DD) nor is $snapshot a git checkout" >&2
  exit 1
}
if [[ $root == --print-day ]]; then
  echo "$day"
  exit 0
fi

# cargo-deny's directory name for deny.toml's db-urls entry
# https://github.com/rustsec/advisory-db: the URL's last path segment and the
# XxHash64 (seed 0xca80de71) of the lower-cased URL (cargo-deny 0.20,
# src/advisories/helpers/db.rs, url_to_db_path). A wrong name is not silent:
# cargo-deny then fails with "failed to get 'HEAD' metadata".
db="$root/advisory-db-3157b0e258782691"
rm -rf "$db"
mkdir -p "$db"
ln -s "$snapshot/crates" "$db/crates"
git -C "$db" init -q
GIT_AUTHOR_DATE="${day}T00:00:00Z" GIT_COMMITTER_DATE="${day}T00:00:00Z" \
  git -C "$db" -c user.name=snapshot -c user.email=snapshot@localhost \
  commit -q --allow-empty -m "RustSec advisory database snapshot of $day ($snapshot)"
touch -d "${day}T00:00:00Z" "$db/.git/FETCH_HEAD"
echo "$root"
