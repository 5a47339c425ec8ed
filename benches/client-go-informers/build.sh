#!/usr/bin/env bash
# Builds (or reuses from the cache) the bench's client-go informers (main.go:
# the `raw-watching` peer's watcher) and prints the binary's path. Keyed by
# the module's own files, so an edit builds anew; the Go module proxy
# serves client-go. Cold: about a minute on 2 cores.
set -euo pipefail
LOG_TAG=informers
source "$(dirname "$0")/../../e2e/lib.sh"
src="$REPO_DIR/benches/client-go-informers"
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
dir="$TOOLS_DIR/client-go-informers-$key"
if [[ ! -x "$dir/bin/client-go-informers" ]]; then
  command -v go >/dev/null || die "go is needed to build the bench's client-go informers"
  log "building the client-go informers ($key)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$dir.tmp/bin/client-go-informers" .) \
    || die "building benches/client-go-informers failed (go build above)"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
echo "$dir/bin/client-go-informers"
