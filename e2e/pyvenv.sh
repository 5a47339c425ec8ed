#!/usr/bin/env bash
# Runs Python in a venv with the pinned packages of a requirements file,
# created once under $TFJOB_CACHE_DIR and keyed by that file's hash (a new
# pin makes a new venv; an interrupted install is never taken for a done one).
#   pyvenv.sh NAME REQUIREMENTS.txt PYTHON-ARGS...
set -euo pipefail
name="$1" requirements="$2"
shift 2
cache="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
key=$(sha256sum "$requirements" | cut -c1-12)
venv="$cache/venv-$name-$key"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "$name: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv (once)" >&2
  rm -rf "$venv.tmp"
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  mv "$venv.tmp" "$venv"
fi
exec "$venv/bin/python" "$@"
