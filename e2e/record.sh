# shellcheck shell=bash
# Keeping a measuring run in benches/results/ (benches/results/README.md):
# sourced by e2e/bench.sh (BENCH_RECORD), e2e/bench-scale.sh (SCALE_RECORD),
# benches/run.sh (BENCH_RECORD), e2e/run-suite.sh (FAULT_RECORD) and
# e2e/first-hour.sh (FIRST_HOUR_RECORD), so that the commit, command and
# machine of every results file are taken the same way. e2e/record.py
# writes the file. Needs nothing from e2e/lib.sh.
#
#   record_check_name NAME     fail early on a name that is no file name
#   record_begin [PATHSPEC ...]
#                              before the build: the commit measured (also
#                              -dirty when PATHSPECs differ) and the load
#                              average before (RECORD_COMMIT, RECORD_LOAD_BEFORE)
#   record_write NAME COMMAND PREFIXES KIND SOURCE
#                              after a run that passed: writes
#                              benches/results/NAME.json from SOURCE
#                              (record.py's --e2e, --scale, --bench or --json
#                              KIND), the command being COMMAND (e.g. `make
#                              bench`) after every env setting whose name
#                              starts with one of PREFIXES (a regex, e.g.
#                              'BENCH' or 'SCALE|BENCH')

record_check_name() {
  if [[ ! "$1" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "record: '$1' is not a results file name: use letters, digits, '.', '_' and '-'" >&2
    return 1
  fi
}

record_begin() {
  local repo
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  # The measured tree is the one built now: a results file names this commit
  # even if the worktree changes while the run goes on, and "-dirty" when
  # what is built or run differs from it (docs and results may change meanwhile).
  RECORD_COMMIT=$(git -C "$repo" rev-parse HEAD)
  git -C "$repo" diff --quiet HEAD -- src benches e2e crds Cargo.toml Cargo.lock build.rs "$@" ':!benches/results' ||
    RECORD_COMMIT="$RECORD_COMMIT-dirty"
  RECORD_LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
}

record_write() {
  local name="$1" command="$2" prefixes="$3" kind="$4" source="$5" repo settings out
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  record_check_name "$name" || return 1
  # Every knob it ran with, but not the paths (directories, binaries) of this
  # machine; none at all is fine (grep finding nothing is not a failure).
  settings=$(env | grep -E "^($prefixes)_[A-Z_]+=" | grep -Ev '^[A-Z]+_RECORD=' |
    grep -Ev '_(DIR|BIN)=' | sort | tr '\n' ' ' || true)
  out="$repo/benches/results/$name.json"
  python3 "$repo/e2e/record.py" "$out" "--$kind" "$source" \
    --commit "${RECORD_COMMIT:?record_begin was not called}" \
    --command "${settings}$command" \
    --machine "$(nproc) cores, $(uname -sr); load average $RECORD_LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after" &&
    echo "recorded benches/results/$name.json" >&2
}
