#!/usr/bin/env bash
# Runs a real example as local processes, with a hand-written TF_CONFIG of the
# shape the operator writes (cluster by role, task type and index), on
# 127.0.0.1 ports: TensorFlow itself, without Kubernetes. Shows that the
# programs train, and what the operator's TF_CONFIG must say for them to.
#
#   examples/real/run-local.sh mwms    Chief + 2 Workers, MultiWorkerMirroredStrategy
#   examples/real/run-local.sh ps      Chief (coordinator) + 2 PS + 2 Workers + Evaluator,
#                                      ParameterServerStrategy
#
# Settings pass through the environment (EPOCHS, STEPS_PER_EPOCH, ... see
# trainlib.py). TensorFlow comes from a venv installed once, offline, from
# the same pinned wheels as the image (e2e/images/tensorflow.sh downloads
# them): $TFJOB_CACHE_DIR/venv-tensorflow-<key>; TFJOB_TF_VENV names another.
# Each process' output is prefixed with its replica name; the exit code is the
# Chief's (the PS and Workers of `ps` serve until they are stopped; its Chief
# waits for the Evaluator to evaluate the last checkpoint, see ps.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${TFJOB_CACHE_DIR:-$HOME/.cache/tfjob-operator}"
example="${1:-}"
case "$example" in
  mwms) roles=(chief:1 worker:2) ;;
  ps) roles=(chief:1 ps:2 worker:2 evaluator:1) ;;
  *)
    echo "usage: $0 mwms|ps" >&2
    exit 2
    ;;
esac

venv="${TFJOB_TF_VENV:-}"
if [[ -z "$venv" ]]; then
  wheels=$(bash "$repo/e2e/images/tensorflow.sh" --wheels)
  venv="$cache/venv-tensorflow-${wheels##*/wheels-}"
  if [[ ! -f "$venv/.complete" ]]; then
    echo "installing TensorFlow into $venv from $wheels (once, offline, ~1 min)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
      --no-deps --require-hashes -r "$repo/e2e/images/tensorflow-requirements.txt"
    touch "$venv/.complete"
  fi
fi

# Free local ports, one per replica, and the cluster spec that names them.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cluster=""
for entry in "${roles[@]}"; do
  role=${entry%%:*} count=${entry##*:}
  addresses=""
  for ((i = 0; i < count; i++)); do
    addresses+="${addresses:+,}\"127.0.0.1:$(free_port)\""
  done
  cluster+="${cluster:+,}\"$role\":[$addresses]"
done
cluster="{$cluster}"

export CHECKPOINT_DIR="${CHECKPOINT_DIR:-$(mktemp -d /tmp/tfjob-example-XXXXXX)}"
echo "cluster: $cluster" >&2
echo "checkpoints: $CHECKPOINT_DIR" >&2

pids=()
chief_pid=""
# shellcheck disable=SC2317 # run by the EXIT trap
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
for entry in "${roles[@]}"; do
  role=${entry%%:*} count=${entry##*:}
  for ((i = 0; i < count; i++)); do
    TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"$role\",\"index\":$i}}" \
      "$venv/bin/python" -u "$here/$example.py" > >(sed -u "s/^/$role-$i| /") 2>&1 &
    pids+=($!)
    [[ $role == chief ]] && chief_pid=$!
  done
done

status=0
if [[ $example == mwms ]]; then
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
else
  wait "$chief_pid" || status=$?
fi
echo "$example: chief exited $status" >&2
exit "$status"
