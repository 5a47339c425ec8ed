#!/usr/bin/env bash
# Runs pictures.py in a venv with matplotlib (cached under $TFJOB_CACHE_DIR,
# keyed by requirements.txt).
#   run.sh PROMETHEUS_URL DASHBOARD_JSON OUT_DIR START END
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
key=$(sha256sum "$here/requirements.txt" | cut -c1-12)
venv="$cache/venv-dashboard-$key"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "dashboard: installing matplotlib into $venv (once)" >&2
  rm -rf "$venv.tmp"
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  mv "$venv.tmp" "$venv"
fi
exec "$venv/bin/python" "$here/pictures.py" "$@"
