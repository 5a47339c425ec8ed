#!/usr/bin/env bash
# Runs check_sdk.py with Kubeflow's SDK, in the pinned venv e2e/pyvenv.sh keeps
# under $TFJOB_CACHE_DIR (keyed by requirements.txt; same venv name as before).
#   run.sh KUBECONFIG NAMESPACE
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../pyvenv.sh" sdk "$here/requirements.txt" "$here/check_sdk.py" "$@"
