#!/usr/bin/env python3
"""Write one results file: a measuring run's raw JSON wrapped with its meta.

The one writer of benches/results/<name>.json (benches/results/README.md):
{"meta": {commit, command, machine, date}, "results": ...}, where results is

  --e2e FILE    `make bench-e2e`: target/bench/e2e.json as written;
  --scale DIR   `make bench-scale`: {"runs": [...], "restart": [...],
                "invocations": {...}} from DIR/<series>-<size>.json (the
                bench's e2e.json of each size, every run with its "series"
                and "size" added) and DIR/restart-<jobs>.json;
  --json FILE   a JSON file as written (the fault suite's, gathered by
                e2e/fault_results.py);
  --bench DIR   `make bench`: {"workqueue": ..., "memory": ..., "sync": ...,
                "latency": ...} from DIR/<bench>.json, those that ran.

e2e/record.sh calls it (commit, command and machine as each script saw
them). Standard library only (runs outside the plotting venv).
"""

import argparse
import datetime
import json
import pathlib
import re
import sys

# `make bench`'s benchmarks, in the order benches/run.sh runs them.
MACHINERY_BENCHES = ("workqueue", "memory", "sync", "latency")


def scale_results(results_dir):
    runs, restart, invocations = [], [], {}
    for f in sorted(results_dir.glob("*.json")):
        m = re.fullmatch(r"(jobs|big|noise)-(\d+)\.json", f.name)
        if m:
            doc = json.loads(f.read_text())
            for r in doc.pop("runs"):
                runs.append({"series": m[1], "size": int(m[2]), **r})
            invocations[f.stem] = doc
        elif re.fullmatch(r"restart-\d+\.json", f.name):
            restart.append(json.loads(f.read_text()))
    if not runs and not restart:
        return None
    runs.sort(key=lambda r: (r["series"], r["size"]))
    return {"runs": runs, "restart": restart, "invocations": invocations}


def machinery_results(results_dir):
    found = {}
    for name in MACHINERY_BENCHES:
        f = results_dir / f"{name}.json"
        if f.exists():
            found[name] = json.loads(f.read_text())
    return found or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--machine", required=True)
    kind = ap.add_mutually_exclusive_group(required=True)
    kind.add_argument("--e2e", type=pathlib.Path, metavar="FILE")
    kind.add_argument("--scale", type=pathlib.Path, metavar="DIR")
    kind.add_argument("--bench", type=pathlib.Path, metavar="DIR")
    kind.add_argument("--json", type=pathlib.Path, metavar="FILE")
    args = ap.parse_args()
    if args.e2e or args.json:
        source = args.e2e or args.json
        results = json.loads(source.read_text())
    elif args.scale:
        results = scale_results(args.scale)
        source = args.scale
    else:
        results = machinery_results(args.bench)
        source = args.bench
    if not results:
        print(f"no results in {source}", file=sys.stderr)
        return 1
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {
        "meta": {
            "commit": args.commit,
            "command": args.command,
            "machine": args.machine,
            "date": date,
        },
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
