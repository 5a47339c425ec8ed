#!/usr/bin/env python3
"""Wrap one `make bench-scale` invocation's results into a results file.

Reads RESULTS_DIR/<series>-<size>.json (the bench's e2e.json of each size)
and restart-<jobs>.json, writes OUT as benches/results/README.md describes:
{"meta": {commit, command, machine, date}, "results": {"runs": [...],
"restart": [...], "invocations": {...}}}, every run with its "series" and
"size" added. Standard library only (runs outside the plotting venv).
"""

import argparse
import datetime
import json
import pathlib
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--machine", required=True)
    args = ap.parse_args()
    runs, restart, invocations = [], [], {}
    for f in sorted(args.results.glob("*.json")):
        m = re.fullmatch(r"(jobs|big|noise)-(\d+)\.json", f.name)
        if m:
            doc = json.loads(f.read_text())
            for r in doc.pop("runs"):
                runs.append({"series": m[1], "size": int(m[2]), **r})
            invocations[f.stem] = doc
        elif re.fullmatch(r"restart-\d+\.json", f.name):
            restart.append(json.loads(f.read_text()))
    if not runs and not restart:
        print(f"no results in {args.results}", file=sys.stderr)
        return 1
    runs.sort(key=lambda r: (r["series"], r["size"]))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {
        "meta": {
            "commit": args.commit,
            "command": args.command,
            "machine": args.machine,
            "date": date,
        },
        "results": {"runs": runs, "restart": restart, "invocations": invocations},
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
