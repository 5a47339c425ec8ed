"""`make bench-scale`, series `restart` (issue #19, point 6): fleet restart.

    restart.py --jobs N --operator BIN --cluster-dir DIR --kubectl KUBECTL --out FILE

On the cluster e2e/bench-scale.sh started (TFJOB_AUDIT=1, so the user
bench-peer's requests are in DIR/logs/audit.log):

1. creates N TFJobs × (1 Chief + 1 PS + 2 Workers) in the namespace
   bench-restart and starts one operator (as bench-peer) until every job is
   Running with its 4 Pods Running and the operator's work queue is empty;
2. stops it (SIGTERM) and starts a second operator on the same jobs,
   measuring from its start: ready (/readyz, caches synced), the first
   reconcile (`controller_runtime_reconcile_total` > 0), every job reconciled
   once (that counter ≥ N with the work queue empty: every job was queued by
   the initial list, so an empty queue means each was taken), and after a
   further settle period its peak RSS, CPU seconds and every request it sent
   by verb and resource, from the audit log. Nothing changed while it was
   down, so the goal is no writes at all.

Writes FILE (JSON) and exits 1 when a phase times out or the operator dies.
"""

import argparse
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

NS = "bench-restart"
USER = "bench-peer"
SETTLE_S = 10.0


def log(msg):
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} [restart] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kubectl:
    def __init__(self, binary, kubeconfig):
        self.base = [binary, "--kubeconfig", str(kubeconfig)]

    def __call__(self, *args, stdin=None, check=True):
        p = subprocess.run(self.base + list(args), input=stdin, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def json(self, *args):
        return json.loads(self(*args, "-o", "json"))


def tfjob(name):
    container = {"name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1",
                 "ports": [{"name": "tfjob-port", "containerPort": 2222}]}
    spec = lambda n: {"replicas": n, "restartPolicy": "Never",  # noqa: E731
                      "template": {"spec": {"containers": [container]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"tfReplicaSpecs": {"Chief": spec(1), "PS": spec(1), "Worker": spec(2)}}}


class Operator:
    def __init__(self, binary, kubeconfig, log_path):
        self.metrics, self.probe = free_port(), free_port()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, "run", "--leader-elect=false",
             f"--metrics-bind-address=127.0.0.1:{self.metrics}",
             f"--health-probe-bind-address=127.0.0.1:{self.probe}"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=open(log_path, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def elapsed(self):
        return time.monotonic() - self.started

    def alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited ({self.proc.returncode})")

    def get(self, port, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except OSError:
            return None, ""

    def ready(self):
        return self.get(self.probe, "/readyz")[0] == 200

    def metric(self, name, labels=""):
        """Sum of a metric's samples whose labels contain `labels`."""
        _, text = self.get(self.metrics, "/metrics")
        total, seen = 0.0, False
        for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M):
            if labels in (m[1] or ""):
                total, seen = total + float(m[2]), True
        return total if seen else None

    def cpu_s(self):
        fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait(what, timeout, done, op=None, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        if op:
            op.alive()
        if done():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def all_running(kubectl, n):
    jobs = kubectl.json("get", "tfjobs", "-n", NS)["items"]
    running = sum(
        any(c.get("type") == "Running" and c.get("status") == "True"
            for c in j.get("status", {}).get("conditions", []))
        for j in jobs)
    pods = kubectl("get", "pods", "-n", NS, "--field-selector=status.phase=Running",
                   "-o", "name").split()
    log(f"  {running}/{n} jobs Running, {len(pods)}/{4 * n} Pods Running")
    return running >= n and len(pods) >= 4 * n


def queue_idle(op):
    depth = op.metric("workqueue_depth", 'name="tfjob"')
    return depth is not None and depth == 0


def audit(path, offset):
    by_verb = {}
    with open(path, "rb") as f:
        f.seek(offset)
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("user", {}).get("username") != USER:
                continue
            ref = e.get("objectRef", {})
            key = f"{e.get('verb')} {ref.get('resource', '-')}" + (
                f"/{ref['subresource']}" if ref.get("subresource") else "")
            by_verb[key] = by_verb.get(key, 0) + 1
    return by_verb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--operator", required=True)
    ap.add_argument("--cluster-dir", type=pathlib.Path, required=True)
    ap.add_argument("--kubectl", required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--timeout", type=float, default=None)
    args = ap.parse_args()
    n = args.jobs
    timeout = args.timeout or 600 + n * 0.4
    repo = pathlib.Path(__file__).resolve().parents[2]
    admin = Kubectl(args.kubectl, args.cluster_dir / "kubeconfig")
    peer_kc = args.cluster_dir / "kubeconfigs" / USER
    logs = args.out.parent / f"logs-restart-{n}"
    logs.mkdir(parents=True, exist_ok=True)
    result = {"jobs": n, "pods": 4 * n, "outcome": "ok"}
    op = None
    try:
        admin("delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=600s")
        admin("apply", "--server-side", "--force-conflicts", "-f", str(repo / "crds/kubeflow.org_tfjobs.yaml"))
        # A CRD created a moment ago has no conditions yet, and `kubectl
        # wait` fails on that instead of waiting.
        wait("the TFJob CRD to be Established", 60, lambda: "True" in admin(
            "get", "crd/tfjobs.kubeflow.org", "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False), every=0.5)
        admin("create", "namespace", NS)
        log(f"creating {n} TFJobs in {NS}")
        for i in range(0, n, 500):
            items = [tfjob(f"restart-{j:05}") for j in range(i, min(n, i + 500))]
            admin("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        log("first operator: bringing every job to Running")
        op = Operator(args.operator, peer_kc, logs / "first.log")
        wait("every job Running", timeout, lambda: all_running(admin, n), op, every=3)
        wait("the first operator's queue to empty", 120, lambda: queue_idle(op), op)
        time.sleep(SETTLE_S)
        op.stop()
        op = None

        audit_log = args.cluster_dir / "logs/audit.log"
        offset = audit_log.stat().st_size
        log("second operator: restart on the same jobs")
        op = Operator(args.operator, peer_kc, logs / "second.log")
        wait("ready", 300, op.ready, op, every=0.05)
        result["ready_s"] = op.elapsed()
        wait("a first reconcile", 300,
             lambda: (op.metric("controller_runtime_reconcile_total", 'controller="tfjob"') or 0) > 0,
             op, every=0.05)
        result["first_reconcile_s"] = op.elapsed()
        wait("every job reconciled once", timeout,
             lambda: (op.metric("controller_runtime_reconcile_total", 'controller="tfjob"') or 0) >= n
             and queue_idle(op), op, every=0.1)
        result["all_reconciled_s"] = op.elapsed()
        result["reconciles"] = op.metric("controller_runtime_reconcile_total", 'controller="tfjob"')
        time.sleep(SETTLE_S)
        result["reconciles_after_settle"] = op.metric("controller_runtime_reconcile_total", 'controller="tfjob"')
        result["cpu_s"] = op.cpu_s()
        result["peak_rss_mb"] = op.peak_rss_mb()
        op.stop()
        op = None
        time.sleep(2)  # watches are logged when they end
        by_verb = audit(audit_log, offset)
        result["requests_by_verb"] = by_verb
        result["requests"] = sum(by_verb.values())
    except (RuntimeError, TimeoutError, OSError) as e:
        result["outcome"] = str(e).splitlines()[0]
    finally:
        if op:
            op.stop()
    args.out.write_text(json.dumps(result, indent=2))
    log(json.dumps(result))
    return 0 if result["outcome"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
