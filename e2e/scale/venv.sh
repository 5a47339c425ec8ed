#!/usr/bin/env bash
# Runs a script of e2e/scale/ in a venv with numpy and matplotlib
# (e2e/pyvenv.sh: pinned in requirements.txt, cached under $TFJOB_CACHE_DIR).
#   venv.sh SCRIPT.py ARGS...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../pyvenv.sh" scale "$here/requirements.txt" "$@"
