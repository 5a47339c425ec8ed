#!/usr/bin/env bash
# `make test`'s Go tool builds, started at its beginning and run in the
# background, so that on a cold machine they overlap the cargo builds of
# `make lint` and `make unit` (whose long single-threaded tails leave one of
# 2 cores idle) instead of waiting for them (issue #41):
#
#   tools-background.sh start PID SET...
#       Returns at once. Builds each SET in turn under nice 10: a set of
#       e2e/tools.sh, or `peers` (e2e/peers.sh: Kubeflow's training-operator
#       for the e2e suite's migration tests). Each set's output goes to
#       <dir>/<set>.log and its status to <dir>/<set>.status (queued,
#       running, ok, failed (exit N)); <dir> is $TFJOB_CLUSTER_DIR/tools-background
#       (lib.sh, TOOLS_BACKGROUND_DIR). Stops, its builds killed, within
#       2 s of process PID's end (the make that runs `make test`: a make that
#       failed or was interrupted leaves no build behind).
#
# Why this is safe: every build takes its set's lock (lib.sh, with_set_lock),
# so a step's own `tools.sh <set>` waits only for the set it names (or builds
# it itself when the background has not reached it yet; the background then
# finds it built). A background build that failed leaves its set unbuilt: the
# step that needs it prints that failure with the end of its log
# (background_note) and builds the set itself, so a real failure ends there
# with its own cause, never in a bare `Error 1`.
#
# TFJOB_TOOLS_BACKGROUND_BUILD names a command run as `<command> SET` instead
# of tools.sh and peers.sh: the harness's self-check (e2e/selftest.sh) builds
# fake sets with it.
set -euo pipefail
export LOG_TAG=tools-background
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

build_one() {
  local set="$1"
  if [[ -n "${TFJOB_TOOLS_BACKGROUND_BUILD:-}" ]]; then
    "$TFJOB_TOOLS_BACKGROUND_BUILD" "$set"
  elif [[ "$set" == peers ]]; then
    # The version the e2e suite's Kubeflow CRD phase asks for (run-suite.sh).
    TRAINING_OPERATOR_VERSION="$KUBEFLOW_TRAINING_OPERATOR_VERSION" bash "$E2E_DIR/peers.sh"
  else
    bash "$E2E_DIR/tools.sh" "$set"
  fi
}

start() {
  local parent="$1" set
  shift
  kill -0 "$parent" 2>/dev/null || die "no process $parent to stop with"
  rm -rf "$TOOLS_BACKGROUND_DIR"
  mkdir -p "$TOOLS_BACKGROUND_DIR"
  for set in "$@"; do echo queued >"$TOOLS_BACKGROUND_DIR/$set.status"; done
  # A session of its own: one process group the watchdog can end whole,
  # and no terminal's signals (the watchdog follows make instead).
  setsid nice -n 10 bash "$E2E_DIR/tools-background.sh" run "$parent" "$@" \
    </dev/null >"$TOOLS_BACKGROUND_DIR/runner.log" 2>&1 &
  log "building $* in the background (nice 10) beside the next steps; logs in $TOOLS_BACKGROUND_DIR"
}

run() {
  local parent="$1" set rc
  shift
  # The watchdog: once make is gone, the whole process group (this script,
  # the build it runs, the compilers under it) ends. Builds land whole or
  # not at all (tools.sh), so an interrupted one leaves nothing half-built.
  (
    while kill -0 "$parent" 2>/dev/null; do sleep 2; done
    log "process $parent (make) is gone: stopping the background builds"
    kill -TERM 0
  ) &
  local watchdog=$!
  for set in "$@"; do
    echo running >"$TOOLS_BACKGROUND_DIR/$set.status"
    log "building $set"
    rc=0
    build_one "$set" >"$TOOLS_BACKGROUND_DIR/$set.log" 2>&1 </dev/null || rc=$?
    if ((rc == 0)); then
      echo ok >"$TOOLS_BACKGROUND_DIR/$set.status"
    else
      echo "failed (exit $rc)" >"$TOOLS_BACKGROUND_DIR/$set.status"
    fi
    log "$set: $(cat "$TOOLS_BACKGROUND_DIR/$set.status")"
  done
  kill "$watchdog" 2>/dev/null || true
}

main() {
  case "${1:-}" in
    start | run)
      local what="$1"
      shift
      (($# >= 2)) || die "usage: e2e/tools-background.sh start PID SET..."
      "$what" "$@"
      ;;
    *) die "usage: e2e/tools-background.sh start PID SET..." ;;
  esac
}

# One line: bash has read the whole script before it runs.
main "$@"; exit $?
