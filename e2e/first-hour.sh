#!/usr/bin/env bash
# The first hour, timed as a newcomer meets it (issue #41): one `make`
# target run from a fresh clone of this checkout's HEAD with every cache
# empty — TFJOB_CACHE_DIR, GOCACHE, GOMODCACHE and CARGO_HOME on new
# directories — so each tool, module and crate is downloaded and built as
# on a fresh machine. Times the whole target and, through the scratch
# cache's tool-builds.jsonl (lib.sh, record_build), each step; samples the
# load average every 15 s, so a run beside other work shows as such.
#
#   bash e2e/first-hour.sh TARGET [NAME]
#       TARGET: demo, test, demo-real or test-real (a `make` target)
#       NAME:   keep the figures as benches/results/NAME.json (after a run
#               that passed; benches/results/README.md), e.g.
#               2026-11-28-first-hour-demo
#
# FIRST_HOUR_DIR (default $HOME/.cache/tfjob-first-hour) holds the clone and
# the empty caches; it is emptied first and kept afterwards for reading
# (its size: a few GB for `demo`, more for `test`). `make demo` leaves its
# cluster up: it is stopped (`make demo-down`) once the live table printed.
# A `../shared` beside this checkout (the advisory database `make deny`
# reads) is linked beside the clone, as CI has it; FIRST_HOUR_OUTSIDE=1
# leaves it out, to see what a clone outside this layout meets.
set -euo pipefail
export LOG_TAG=first-hour
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=e2e/record.sh
source "$E2E_DIR/record.sh"

target=${1:-}
name=${2:-}
case "$target" in
  demo | test | demo-real | test-real) ;;
  *) die "usage: e2e/first-hour.sh demo|test|demo-real|test-real [NAME]" ;;
esac
[[ -z "$name" ]] || record_check_name "$name"

scratch=${FIRST_HOUR_DIR:-$HOME/.cache/tfjob-first-hour}
case "$scratch" in
  "$REPO_DIR" | "$REPO_DIR"/*) die "FIRST_HOUR_DIR must be outside the repository: $scratch" ;;
esac
log "a fresh clone of HEAD and empty caches in $scratch"
rm -rf "$scratch"
mkdir -p "$scratch"/{cache,gocache,gomod,cargo}
git clone --quiet "$REPO_DIR" "$scratch/repo"
if [[ "${FIRST_HOUR_OUTSIDE:-0}" != 1 && -d "$REPO_DIR/../shared" ]]; then
  ln -s "$(cd "$REPO_DIR/../shared" && pwd)" "$scratch/shared"
fi

record_begin
sampler() { while sleep 15; do echo "$(date -u +%FT%TZ) $(cut -d' ' -f1-3 /proc/loadavg)"; done; }
sampler >"$scratch/load.log" &
sampler_pid=$!
trap 'kill "$sampler_pid" 2>/dev/null || true' EXIT

# `make $1` in the clone, with only what a newcomer's shell would have: the
# caches empty, no target dir or cluster of ours inherited (this script runs
# under our make, which exports TFJOB_CLUSTER_DIR: inherited, `demo-down`
# stopped this checkout's cluster and left the clone's, real node and all).
newcomer_make() (
  cd "$scratch/repo"
  unset CARGO_TARGET_DIR TFJOB_CLUSTER_DIR TFJOB_ADVISORY_DB
  export TFJOB_CACHE_DIR="$scratch/cache" GOCACHE="$scratch/gocache" \
    GOMODCACHE="$scratch/gomod" CARGO_HOME="$scratch/cargo"
  make "$1" </dev/null
)

log "make $target (its own progress follows; the whole run is timed)"
start=$SECONDS
rc=0
newcomer_make "$target" || rc=$?
total=$((SECONDS - start))
# The demos leave their cluster up (and the real node: one per machine).
if [[ "$target" == demo || "$target" == demo-real ]]; then
  newcomer_make demo-down >"$scratch/demo-down.log" 2>&1 \
    || log "make demo-down failed: stop the clone's cluster yourself (log: $scratch/demo-down.log)"
fi
kill "$sampler_pid" 2>/dev/null || true
log "make $target: exit $rc after $total s"

gathered="$scratch/first-hour.json"
python3 "$E2E_DIR/first_hour_results.py" --target "make $target" --total "$total" --exit "$rc" \
  --builds "$scratch/cache/tool-builds.jsonl" --load "$scratch/load.log" \
  --disk "$scratch"/{cache,gocache,gomod,cargo} >"$gathered"
log "steps and load: $gathered"
((rc == 0)) || die "make $target failed (exit $rc) after $total s: nothing recorded"
if [[ -n "$name" ]]; then
  record_write "$name" "bash e2e/first-hour.sh $target" 'FIRST_HOUR' json "$gathered"
fi
