#!/usr/bin/env bash
# `make docs-diagrams`: renders every ```mermaid block in README.md and docs/
# with mermaid-cli in headless Chromium, as GitHub would draw them, and fails
# naming the file when one does not parse or renders nothing. The SVGs land
# in $TFJOB_CACHE_DIR/diagrams/ for a look; nothing is written to the repo.
#
# mermaid-cli comes from npm (MERMAID_CLI_VERSION in e2e/versions.env),
# installed once into $TFJOB_CACHE_DIR/tools/ with puppeteer told not to
# download a browser: Debian's chromium (`make chromium`) draws instead.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=e2e/versions.env
source "$REPO_DIR/e2e/versions.env"
CACHE="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
TOOL="$CACHE/tools/mermaid-cli-$MERMAID_CLI_VERSION"
MMDC="$TOOL/node_modules/.bin/mmdc"
OUT="$CACHE/diagrams"
CHROMIUM="${CHROMIUM:-$(command -v chromium || true)}"

log() { echo "$(date +%H:%M:%S) [docs-diagrams] $*" >&2; }
die() { log "error: $*"; exit 1; }

install_mermaid_cli() {
  [[ -x "$MMDC" ]] && return 0
  command -v npm >/dev/null || die "npm is missing (Debian: apt-get install npm)"
  log "installing mermaid-cli $MERMAID_CLI_VERSION (puppeteer $PUPPETEER_VERSION) into $TOOL"
  rm -rf "$TOOL.tmp"
  mkdir -p "$TOOL.tmp"
  # Into a temp dir, then renamed: an interrupted install is never taken for a finished one.
  PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$TOOL.tmp" --no-audit --no-fund --loglevel=error \
    "@mermaid-js/mermaid-cli@$MERMAID_CLI_VERSION" "puppeteer@$PUPPETEER_VERSION" >&2
  rm -rf "$TOOL"
  mv "$TOOL.tmp" "$TOOL"
}

main() {
  [[ -x "$CHROMIUM" ]] || die "no chromium (run: make chromium, or set CHROMIUM=/path/to/it)"
  install_mermaid_cli
  rm -rf "$OUT"
  mkdir -p "$OUT"
  printf '{"executablePath": "%s", "args": ["--no-sandbox", "--headless=new"]}\n' "$CHROMIUM" >"$OUT/puppeteer.json"
  local doc name blocks svgs total=0 failed=0
  for doc in "$REPO_DIR"/README.md "$REPO_DIR"/docs/*.md; do
    blocks=$(grep -c '^```mermaid' "$doc" || true)
    ((blocks > 0)) || continue
    name=$(basename "$doc" .md)
    if ! "$MMDC" -q -p "$OUT/puppeteer.json" -i "$doc" -o "$OUT/$name.md" >"$OUT/$name.log" 2>&1; then
      log "${doc#"$REPO_DIR"/}: a diagram does not render:"
      grep -v '^\s*at ' "$OUT/$name.log" | head -n 15 >&2
      failed=$((failed + 1))
      continue
    fi
    svgs=0
    for svg in "$OUT/$name"-*.svg; do
      [[ -s "$svg" ]] && grep -q '<svg' "$svg" && svgs=$((svgs + 1))
    done
    if ((svgs != blocks)); then
      log "${doc#"$REPO_DIR"/}: $blocks mermaid blocks but $svgs rendered SVGs"
      failed=$((failed + 1))
    fi
    total=$((total + svgs))
  done
  ((failed == 0)) || die "$failed document(s) with diagrams that do not render (SVGs and logs: $OUT)"
  ((total > 0)) || die "no mermaid diagrams found: is the docs/ glob right?"
  log "$total diagrams render (SVGs: $OUT)"
}

main "$@"
