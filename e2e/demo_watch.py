"""Shows the demo's TFJobs progressing, live, and plays the training.

KWOK stands in for the kubelet, so no container really runs: once a job is
Running, this script "finishes the training" by annotating Pods the way the
e2e tests do (e2e/kwok/stages.yaml): first a 137 kill on a worker of each
ExitCode job (to show a restart), then exit 0 on the replica that decides
success. It prints every state change as it happens, pods per replica type,
and a final table with durations. Uses only kubectl (from .cluster/env).
"""
import json
import subprocess
import sys
import time

NS = sys.argv[1] if len(sys.argv) > 1 else "demo"
EXIT = "e2e.tfjob-operator.local/exit-code"
CONTAINER = "e2e.tfjob-operator.local/exit-container"
T0 = time.time()
# How long each job "trains" (stays Running) before KWOK is told to finish it.
TRAIN_SECONDS = 3


def kubectl(*args):
    out = subprocess.run(["kubectl", *args], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else ""


def get(kind):
    text = kubectl("get", kind, "-n", NS, "-o", "json")
    return json.loads(text)["items"] if text else []


def state(job):
    conds = job.get("status", {}).get("conditions", [])
    true = [c["type"] for c in conds if c.get("status") == "True"]
    for t in ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created"):
        if t in true:
            return t
    return "New"  # no condition yet: the operator has not seen it


def pods_summary(pods, job):
    by_type = {}
    for p in pods:
        labels = p["metadata"].get("labels", {})
        if labels.get("training.kubeflow.org/job-name") != job:
            continue
        rt = labels.get("training.kubeflow.org/replica-type", "?")
        phase = "Terminating" if p["metadata"].get("deletionTimestamp") else p.get("status", {}).get("phase", "Pending")
        by_type.setdefault(rt, {}).setdefault(phase, 0)
        by_type[rt][phase] += 1
    return ", ".join(
        f"{rt}: " + " ".join(f"{n} {ph.lower()}" for ph, n in sorted(phases.items()))
        for rt, phases in sorted(by_type.items())
    ) or "no pods"


def say(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def annotate(pod, code):
    kubectl("annotate", "pod", pod, "-n", NS, "--overwrite", f"{EXIT}={code}", f"{CONTAINER}=tensorflow")


def deciding_pods(job):
    specs = {k.lower(): v for k, v in job["spec"]["tfReplicaSpecs"].items()}
    name = job["metadata"]["name"]
    for chief in ("chief", "master"):
        if chief in specs:
            return [f"{name}-{chief}-0"]
    if job["spec"].get("successPolicy") == "AllWorkers":
        n = specs.get("worker", {}).get("replicas", 1)
        return [f"{name}-worker-{i}" for i in range(n)]
    return [f"{name}-worker-0"]


def main():
    seen, restarted, finishing, gone = {}, set(), set(), set()
    running_since, restarts_seen = {}, {}
    deadline = time.time() + 240
    while time.time() < deadline:
        jobs, pods = get("tfjobs"), get("pods")
        names = {j["metadata"]["name"] for j in jobs}
        for name in list(seen):
            if name not in names and name not in gone:
                gone.add(name)
                say(f"{name}: deleted (ttlSecondsAfterFinished)")
        for job in jobs:
            name = job["metadata"]["name"]
            st = state(job)
            summary = pods_summary(pods, name)
            if seen.get(name, (None,))[0] != st:
                say(f"{name}: {seen.get(name, ('-',))[0]} -> {st}   ({summary})")
            seen[name] = (st, job)
            policies = {v.get("restartPolicy") for v in job["spec"]["tfReplicaSpecs"].values()}
            restarts = sum(r.get("restarts", 0) for r in job.get("status", {}).get("replicaStatuses", {}).values())
            if restarts != restarts_seen.get(name, 0):
                restarts_seen[name] = restarts
                say(f"{name}: restart #{restarts}: the operator re-created the killed Pod   ({summary})")
            if st != "Running" or name in finishing:
                continue
            running_since.setdefault(name, time.time())
            if time.time() - running_since[name] < TRAIN_SECONDS:
                continue
            if "ExitCode" in policies and name not in restarted:
                restarted.add(name)
                say(f"{name}: KWOK kills {name}-worker-0 with exit code 137 (retryable under ExitCode)")
                annotate(f"{name}-worker-0", 137)
            elif name not in restarted or (restarts > 0 and "running" in summary and "terminating" not in summary.lower()):
                finishing.add(name)
                for pod in deciding_pods(job):
                    say(f"{name}: KWOK ends {pod} with exit code 0 (training done)")
                    annotate(pod, 0)
        active = [n for n, (st, _) in seen.items() if n not in gone and st not in ("Succeeded", "Failed", "Suspended")]
        ttl_pending = [n for n, (st, j) in seen.items() if n not in gone and st in ("Succeeded", "Failed")
                       and j["spec"].get("runPolicy", {}).get("ttlSecondsAfterFinished") is not None]
        if seen and not active and not ttl_pending:
            break
        time.sleep(1)
    print()
    print(f"{'JOB':28} {'STATE':11} {'DURATION':>9}  PODS")
    for name, (st, job) in sorted(seen.items()):
        status = job.get("status", {})
        dur = ""
        if status.get("startTime") and status.get("completionTime"):
            from datetime import datetime
            f = "%Y-%m-%dT%H:%M:%SZ"
            d = datetime.strptime(status["completionTime"], f) - datetime.strptime(status["startTime"], f)
            dur = f"{int(d.total_seconds())}s"
        print(f"{name:28} {('Deleted' if name in gone else st):11} {dur:>9}  {pods_summary(get('pods'), name)}")


if __name__ == "__main__":
    main()
