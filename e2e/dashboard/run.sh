#!/usr/bin/env bash
# Runs pictures.py in a venv with matplotlib (e2e/pyvenv.sh: cached under
# $TFJOB_CACHE_DIR, keyed by requirements.txt).
#   run.sh PROMETHEUS_URL DASHBOARD_JSON OUT_DIR START END
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../pyvenv.sh" dashboard "$here/requirements.txt" "$here/pictures.py" "$@"
