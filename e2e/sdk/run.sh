#!/usr/bin/env bash
# Runs check_sdk.py in a venv with Kubeflow's SDK (cached under $TFJOB_CACHE_DIR, keyed by requirements.txt).
#   run.sh KUBECONFIG NAMESPACE
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
key=$(sha256sum "$here/requirements.txt" | cut -c1-12)
venv="$cache/venv-sdk-$key"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "sdk: installing kubeflow-training into $venv (once)" >&2
  python3 -m venv "$venv.tmp"
  "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  mv "$venv.tmp" "$venv"
fi
exec "$venv/bin/python" "$here/check_sdk.py" "$@"
