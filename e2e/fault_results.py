#!/usr/bin/env python3
"""Gather one fault-suite run's figures into the "results" of a results file.

Reads DIR/<scenario>.json (each scenario's figures, written by
tests/faults/harness.rs `report` when FAULT_RESULTS_DIR is set) and the
suite's cargo test output LOG, prints JSON: {"scenarios": [...by scenario],
"tests": {passed, failed, ignored, filtered_out}, "suite_s": N}.
e2e/run-suite.sh calls it after a run that passed (FAULT_RECORD) and
e2e/record.sh wraps it with the meta block. Standard library only.
"""

import argparse
import json
import pathlib
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("log", type=pathlib.Path)
    ap.add_argument("--suite-seconds", type=int, required=True)
    args = ap.parse_args()
    scenarios = [json.loads(f.read_text()) for f in sorted(args.dir.glob("*.json"))]
    if not scenarios:
        print(f"no scenario wrote its figures to {args.dir}", file=sys.stderr)
        return 1
    counts = re.findall(
        r"test result: ok\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out",
        args.log.read_text(errors="replace"),
    )
    if len(counts) != 1:
        print(f"{args.log}: expected one passing 'test result' line, found {len(counts)}", file=sys.stderr)
        return 1
    passed, failed, ignored, filtered = (int(n) for n in counts[0])
    doc = {
        "scenarios": sorted(scenarios, key=lambda s: s["scenario"]),
        "tests": {"passed": passed, "failed": failed, "ignored": ignored, "filtered_out": filtered},
        "suite_s": args.suite_seconds,
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
