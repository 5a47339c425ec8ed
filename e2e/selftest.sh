#!/usr/bin/env bash
# The harness's own checks that need no cluster and no tools (`make unit`
# runs it; a second or so):
#   - a failing command in a harness script is named (script, line, command,
#     exit status, under the step's LOG_TAG), never make's bare `Error 1`;
#     a failure the script handles (`||`, `if`) says nothing;
#   - the real node's list of network namespaces is empty, not an error, on a
#     fresh machine where /var/run/netns does not exist yet.
set -euo pipefail
export LOG_TAG=selftest
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/lib.sh"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() {
  log "FAILED: $*"
  failures=$((failures + 1))
}

# A script as the harness writes them, failing two functions deep.
cat >"$TMP/step.sh" <<SH
set -euo pipefail
export LOG_TAG=some-step
source "$E2E_DIR/lib.sh"
inner() { ls "$TMP/absent"; }
outer() { inner; }
handled() { false || true; if false; then :; fi; x=\$(false) || true; }
handled
outer
echo "not reached"
SH
status=0
bash "$TMP/step.sh" >"$TMP/out" 2>"$TMP/err" || status=$?
err=$(cat "$TMP/err")
((status == 2)) || fail "a failing step exited with $status, not the command's 2"
want="[some-step] error: $TMP/step.sh line 4: 'ls \"$TMP/absent\"' exited with status 2 (in inner < outer)"
[[ "$err" == *"$want"* ]] || fail "the failing step's stderr does not name it: want '$want', got: $err"
(($(grep -c 'error:' <<<"$err") == 1)) || fail "want exactly one error line, got: $err"
[[ ! -s "$TMP/out" ]] || fail "the step went on after its failure: $(cat "$TMP/out")"

# `die` says its own line and nothing more.
status=0
LOG_TAG=some-step bash -c "set -euo pipefail; source '$E2E_DIR/lib.sh'; die 'no widget'" 2>"$TMP/err" || status=$?
((status == 1)) && [[ "$(cat "$TMP/err")" == *"[some-step] error: no widget" ]] \
  || fail "die: status $status, stderr: $(cat "$TMP/err")"

# The real node's netns list on a machine with no /var/run/netns, and with one.
status=0
out=$(TFJOB_CLUSTER_DIR="$TMP/cluster" bash -c "
  set -euo pipefail
  source '$E2E_DIR/real-node/node.sh'
  NETNS_DIR='$TMP/netns'
  netns_list >'$TMP/netns.before'
  mkdir -p '$TMP/netns' && touch '$TMP/netns/cni-2' '$TMP/netns/cni-1'
  netns_list | tr '\n' ' '
" 2>"$TMP/err") || status=$?
((status == 0)) || fail "netns_list without the netns directory: status $status, stderr: $(cat "$TMP/err")"
[[ -f "$TMP/netns.before" && ! -s "$TMP/netns.before" ]] || fail "netns_list without the netns directory did not list nothing"
[[ "$out" == "cni-1 cni-2 " ]] || fail "netns_list with two namespaces printed '$out'"

((failures == 0)) || die "$failures harness self-check(s) failed"
log "harness self-checks passed"
