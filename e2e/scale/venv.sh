#!/usr/bin/env bash
# Runs a script of e2e/scale/ in a venv with numpy and matplotlib (pinned in
# requirements.txt; cached under $TFJOB_CACHE_DIR, keyed by that file's hash).
#   venv.sh SCRIPT.py ARGS...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
key=$(sha256sum "$here/requirements.txt" | cut -c1-12)
venv="$cache/venv-scale-$key"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "bench-scale: installing numpy and matplotlib into $venv (once)" >&2
  rm -rf "$venv.tmp"
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  mv "$venv.tmp" "$venv"
fi
exec "$venv/bin/python" "$@"
