#!/usr/bin/env bash
# The harness's own checks that need no cluster and no tools (`make unit`
# runs it; a second or so):
#   - a failing command in a harness script is named (script, line, command,
#     exit status, under the step's LOG_TAG), never make's bare `Error 1`;
#     a failure the script handles (`||`, `if`) says nothing;
#   - the real node's list of network namespaces is empty, not an error, on a
#     fresh machine where /var/run/netns does not exist yet;
#   - the tool sets' locks (lib.sh, with_set_lock): a step waits for a build
#     of its own set, never for another set's;
#   - make test's background tool builds (e2e/tools-background.sh), with fake
#     sets: a failed one is told, with its cause, by the step that needs the
#     set, once; all of them stop when the make they follow is gone.
# (A few seconds: the background's watchdog looks every 2 s.)
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

# Polls COMMAND... every 0.05 s until it succeeds, for at most $1 seconds.
eventually() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
# A bash with lib.sh sourced and the tools, cluster and background dirs in $TMP.
in_lib() {
  TFJOB_CACHE_DIR="$TMP/cache" TFJOB_CLUSTER_DIR="$TMP/cluster" TFJOB_TOOLS_BACKGROUND_DIR="$TMP/bg" \
    bash -c "set -euo pipefail; source '$E2E_DIR/lib.sh'; $1"
}

# Per-set locks: while a build of `core` holds its lock, `helm` goes ahead
# and another `core` waits (saying so) until the first is done.
in_lib "with_set_lock core bash -c 'touch $TMP/held; while [[ -d $TMP && ! -f $TMP/release ]]; do sleep 0.05; done'" \
  2>/dev/null &
holder=$!
eventually 10 test -f "$TMP/held" || fail "the first core build never took its lock"
in_lib "with_set_lock helm touch $TMP/helm-built" 2>/dev/null &
other=$!
eventually 10 test -f "$TMP/helm-built" || fail "a helm build waited for a core build's lock"
in_lib "with_set_lock core touch $TMP/core-built" 2>"$TMP/waiter.err" &
waiter=$!
eventually 10 grep -qs "waiting for another build of core" "$TMP/waiter.err" \
  || fail "a second core build did not say it waits: $(cat "$TMP/waiter.err")"
[[ ! -f "$TMP/core-built" ]] || fail "a second core build ran while the first held the lock"
touch "$TMP/release"
wait "$other" || fail "the helm build failed"
wait "$holder" || fail "the first core build failed"
wait "$waiter" || fail "the second core build failed once the first was done"
[[ -f "$TMP/core-built" ]] || fail "the second core build did not run after the first"

# make test's background builds, of fake sets: one fails, one builds, one
# blocks until the make it follows (a sleep here) is gone.
cat >"$TMP/fake-build.sh" <<SH
#!/usr/bin/env bash
case "\$1" in
  broken) echo "fake: the module proxy answered 503 for broken"; exit 3 ;;
  fine) echo "fake: built" ;;
  blocking) echo "\$\$" >"$TMP/blocking.pid"; while [[ -d "$TMP" ]]; do sleep 0.1; done ;;
esac
SH
chmod +x "$TMP/fake-build.sh"
sleep 300 &
fake_make=$!
TFJOB_TOOLS_BACKGROUND_BUILD="$TMP/fake-build.sh" TFJOB_TOOLS_BACKGROUND_DIR="$TMP/bg" \
  bash "$E2E_DIR/tools-background.sh" start "$fake_make" broken fine blocking 2>/dev/null
status_is() { [[ "$(cat "$TMP/bg/$1.status" 2>/dev/null)" == "$2" ]]; }
eventually 20 status_is blocking running || fail "the background builds did not reach the third set: $(cat "$TMP/bg/runner.log")"
status_is broken "failed (exit 3)" || fail "the failed set's status: $(cat "$TMP/bg/broken.status")"
status_is fine ok || fail "the built set's status: $(cat "$TMP/bg/fine.status")"
note=$(in_lib "background_note broken" 2>&1)
[[ "$note" == *"background build of broken failed (exit 3)"* && "$note" == *"fake: the module proxy answered 503 for broken"* ]] \
  || fail "the step needing a set whose background build failed did not say why: $note"
[[ -z "$(in_lib "background_note broken" 2>&1)" ]] || fail "a background failure was told twice"
[[ -z "$(in_lib "background_note fine" 2>&1)" ]] || fail "a background build that passed was told as a failure"
blocking=$(cat "$TMP/blocking.pid" 2>/dev/null) || blocking=""
kill "$fake_make"
wait "$fake_make" 2>/dev/null || true
[[ -n "$blocking" ]] && eventually 15 bash -c "! kill -0 $blocking 2>/dev/null" \
  || fail "a background build outlived the make it follows by 15 s"

((failures == 0)) || die "$failures harness self-check(s) failed"
log "harness self-checks passed"
