#!/usr/bin/env python3
"""Gather one first-hour run (e2e/first-hour.sh) into the JSON a results file holds.

{"target": "make demo", "exit": 0, "total_s": 812,
 "caches": "...", "steps": [{"what", "seconds", "go_packages", "load1"}, ...],
 "load": {"samples": n, "mean_1min": x, "max_1min": y},
 "disk_mb": {"cache": ..., "gocache": ..., "gomod": ..., "cargo": ...}}

`steps` are the lines the run appended to the scratch cache's
tool-builds.jsonl (e2e/lib.sh, record_build): every tool build, the
operator's cargo build, and for `make demo` its own steps. `load` is the
1-minute load average sampled every 15 s; the run's own builds count in it
(cargo and Go side by side kept a cold `make demo` near 4 on 2 cores,
2026-11-28), so a mean far above that means something else ran beside it.
`disk_mb` is what the run left in each scratch directory (`--disk`), the
disk a newcomer needs for that target. Standard library only.
"""

import argparse
import json
import os
import pathlib
import sys

CACHES = "empty: TFJOB_CACHE_DIR, GOCACHE, GOMODCACHE, CARGO_HOME; a fresh git clone"


def steps(builds):
    found = []
    if not builds.exists():
        return found
    for line in builds.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        found.append({k: rec.get(k) for k in ("what", "seconds", "go_packages", "load1")})
    return found


def load(samples):
    ones = []
    if samples.exists():
        for line in samples.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                ones.append(float(parts[1]))
    if not ones:
        return {"samples": 0, "mean_1min": None, "max_1min": None}
    return {
        "samples": len(ones),
        "mean_1min": round(sum(ones) / len(ones), 2),
        "max_1min": max(ones),
    }


def disk_mb(dirs):
    sizes = {}
    for d in dirs:
        total = 0
        for root, _, files in os.walk(d):
            for f in files:
                try:
                    total += os.lstat(os.path.join(root, f)).st_size
                except OSError:
                    pass
        sizes[pathlib.Path(d).name] = round(total / 1e6)
    return sizes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--exit", type=int, required=True)
    ap.add_argument("--builds", type=pathlib.Path, required=True)
    ap.add_argument("--load", type=pathlib.Path, required=True)
    ap.add_argument("--disk", nargs="*", default=[], metavar="DIR")
    args = ap.parse_args()
    json.dump(
        {
            "target": args.target,
            "exit": args.exit,
            "total_s": args.total,
            "caches": CACHES,
            "steps": steps(args.builds),
            "load": load(args.load),
            "disk_mb": disk_mb(args.disk),
        },
        sys.stdout,
        indent=2,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
