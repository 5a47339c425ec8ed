#!/usr/bin/env python3
"""Chief exit -> job Succeeded, per job, from the logs of a bench run:
   python3 hack/profile/succeeded.py target/bench/cluster/logs/kwok.log \
       target/bench/logs/jobs-ours-default.log
KWOK logs every status patch it makes to a Pod ("Patch pod"); the last
patch of a chief is the one that ends it (Succeeded). The operator logs
"job state changed ... state=Succeeded" when its status write returned.
So per job: how long the operator took from the chief's end to the
written condition, and how long after the last chief ended the last job
was Succeeded. (Both clocks are this machine's.) KWOK's log holds every
run of the cluster: only chiefs patched within the operator's run count."""
import json
import re
import statistics
import sys
from datetime import datetime


def ts(text):
    # Nanoseconds are more than fromisoformat takes: cut to microseconds.
    text = re.sub(r"(\.\d{6})\d*", r"\1", text.rstrip("Z"))
    return datetime.fromisoformat(text).timestamp()


def main(kwok_log, operator_log):
    done = {}
    for line in open(operator_log):
        m = re.match(r"(\S+Z) .*job state changed job=\S+/(\S+) state=Succeeded", line)
        if m:
            done[m.group(2)] = ts(m.group(1))
    if not done:
        sys.exit("no Succeeded in the operator's log")
    start, end = min(done.values()) - 60, max(done.values())
    chief_end = {}
    for line in open(kwok_log):
        if '"Patch pod"' not in line or "-chief-0" not in line:
            continue
        e = json.loads(line)
        t = ts(e["time"])
        job = e["pod"].split("/")[1].removesuffix("-chief-0")
        if start <= t <= end and job in done:
            chief_end[job] = max(chief_end.get(job, 0), t)
    lag = sorted(done[j] - chief_end[j] for j in done if j in chief_end)
    q = statistics.quantiles(lag, n=20)
    print(f"jobs: {len(lag)}")
    print(f"chief ended -> Succeeded written: median {statistics.median(lag) * 1000:.0f} ms, "
          f"p90 {q[17] * 1000:.0f} ms, max {lag[-1] * 1000:.0f} ms")
    first, last = min(chief_end.values()), max(chief_end.values())
    print(f"chiefs ended over {last - first:.2f} s; the last job was Succeeded "
          f"{(max(done.values()) - last) * 1000:.0f} ms after the last chief ended")


main(sys.argv[1], sys.argv[2])
