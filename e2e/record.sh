# shellcheck shell=bash
# Keeps a measuring run's results in benches/results/<name>.json with where
# they came from (benches/results/README.md: {"meta": {commit, command,
# machine, date}, "results": …}). Sourced after lib.sh by the scripts that
# record: e2e/bench.sh (BENCH_RECORD, `make bench-e2e`) and
# e2e/run-suite.sh (FAULT_RECORD, `make test-faults`). Call them in order:
#   record_name VAR VALUE            refuse a name that is not a plain file name
#   record_begin [PATHSPEC ...]      at the start: the commit and the load average
#   record_load                      (again) when the measuring starts, if later
#   record_write NAME COMMAND JSON   after a run that passed: writes the file
# A failed run is never recorded: the callers write only when it passed.

# The directory the files go to (relative to the repository).
RECORD_DIR=benches/results

# Exits when $2, the value of setting $1, cannot be a results file's name.
record_name() {
  [[ "$2" =~ ^[A-Za-z0-9._-]+$ ]] || die "$1=$2: use letters, digits, '.', '_' and '-'"
}

# The measured tree is the one built now: a results file names this commit
# even if the worktree changes while the run goes on, "-dirty" when what is
# built or run differs from it (the sources, and the PATHSPECs the caller
# adds; docs and results may change meanwhile). Also notes the load average.
record_begin() {
  RECORD_COMMIT=$(git -C "$REPO_DIR" rev-parse HEAD)
  git -C "$REPO_DIR" diff --quiet HEAD -- src benches e2e crds Cargo.toml Cargo.lock build.rs \
    "$@" ":!$RECORD_DIR" || RECORD_COMMIT="$RECORD_COMMIT-dirty"
  record_load
}

# The load average "before" the run: other work on the machine slows it.
record_load() { RECORD_LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg); }

# Writes $RECORD_DIR/NAME.json: the meta block, then the file JSON as
# "results", unchanged.
record_write() {
  local name="$1" command="$2" results="$3" out
  json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
  out="$REPO_DIR/$RECORD_DIR/$name.json"
  {
    printf '{\n  "meta": {\n'
    printf '    "commit": %s,\n' "$(json_str "$RECORD_COMMIT")"
    printf '    "command": %s,\n' "$(json_str "$command")"
    printf '    "machine": %s,\n' "$(json_str "$(nproc) cores, $(uname -sr); load average $RECORD_LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after")"
    printf '    "date": %s\n  },\n  "results": ' "$(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)")"
    cat "$results"
    printf '\n}\n'
  } >"$out"
  log "recorded $RECORD_DIR/$name.json"
}
