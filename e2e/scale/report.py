"""`make bench-scale` (issue #19, point 3): checks, fits and plots the runs.

    report.py RESULTS_DIR|RESULTS_FILE [--plots DIR]

RESULTS_FILE is a recorded invocation in benches/results/ (SCALE_RECORD,
e2e/record.py): the committed plots are drawn from it. RESULTS_DIR holds one e2e.json of benches/e2e/ per size, named
<series>-<size>.json (e2e/bench-scale.sh writes them), and optionally
restart-<jobs>.json (e2e/scale/restart.py). Prints markdown tables (every
figure and its ratio to the bare client, `raw`, of the same size), the fitted
slopes, and writes RESULTS_DIR/scale.json and one PNG per series to --plots.

Exits 1 when a run did not end "ok", created a duplicate, or met an API error
other than 409 Conflict / 429 Too Many Requests: the benchmark's numbers are
only worth reading when all of its jobs finished cleanly.
"""

import argparse
import json
import pathlib
import re
import sys

import numpy as np

SERIES = {
    # series: (x label, unit of the fitted slope, how many Pods one unit of x is)
    "jobs": ("jobs (× 1 Chief + 1 PS + 2 Workers)", "job", 4),
    "big": ("workers of one job", "worker Pod", 1),
    "noise": ("unrelated Pods (200 jobs present)", "unrelated Pod", 0),
}
METRICS = [
    ("running_s", "apply → all Running (s)"),
    ("succeeded_s", "chief exit → all Succeeded (s)"),
    ("cpu_s", "operator CPU (s)"),
    ("peak_rss_mb", "peak RSS (MB)"),
    ("api_requests", "API requests"),
]
PEER_LABEL = {
    "ours-default": "tfjob-operator",
    "ours-matched": "tfjob-operator (QPS 20/30)",
    "raw": "bare client (raw)",
    "training-operator-default": "training-operator",
    "training-operator-matched": "training-operator (4 threads)",
}
ALLOWED_ERROR_CODES = {"409", "429"}
# A segment's slope this many times the first segment's, and growing by more
# than noise, is reported as super-linear.
SUPERLINEAR_FACTOR = 1.5


def load(results: pathlib.Path):
    """{series: {size: e2e.json}} and the restart runs, from the bench's
    directory or from a recorded results file (e2e/record.py)."""
    out, restarts = {}, []
    if results.is_file():
        doc = json.loads(results.read_text())["results"]
        for r in doc["runs"]:
            out.setdefault(r["series"], {}).setdefault(r["size"], {"runs": []})["runs"].append(r)
        return out, doc.get("restart", [])
    for f in sorted(results.glob("*.json")):
        m = re.fullmatch(r"(jobs|big|noise)-(\d+)\.json", f.name)
        if m:
            out.setdefault(m[1], {})[int(m[2])] = json.loads(f.read_text())
        elif re.fullmatch(r"restart-\d+\.json", f.name):
            restarts.append(json.loads(f.read_text()))
    return out, restarts


def problems(series, size, run):
    """What makes a run's numbers unusable, as sentences."""
    where = f"{series} {size} × {run['peer']}"
    found = []
    if run.get("outcome") != "ok":
        found.append(f"{where}: {run.get('outcome')}")
    dups = (
        run.get("duplicate_pod_creates", 0)
        + run.get("duplicate_service_creates", 0)
        + run.get("already_exists", 0)
    )
    if dups:
        found.append(f"{where}: {dups} duplicate creates")
    for key, n in run.get("api_errors_by_code", {}).items():
        code = key.split(" ", 1)[0]
        if code not in ALLOWED_ERROR_CODES:
            found.append(f"{where}: {n} × API error {key}")
    return found


def fit(xs, ys):
    """Least-squares line: (slope, intercept)."""
    if len(xs) < 2:
        return None
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def segments(xs, ys):
    """Slope between each pair of consecutive sizes."""
    return [(ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1)]


def superlinear(xs, ys, noise):
    """True when a later segment grows markedly faster than the first one."""
    seg = segments(xs, ys)
    if len(seg) < 2:
        return False
    first = max(seg[0], 0.0)
    return any(
        s > SUPERLINEAR_FACTOR * first and (s - first) * (xs[i + 2] - xs[i + 1]) > noise
        for i, s in enumerate(seg[1:])
    )


def runs_of(data, peer):
    """[(size, run)] of one peer, sizes ascending, usable runs only."""
    return [
        (size, r)
        for size, doc in sorted(data.items())
        for r in doc["runs"]
        if r["peer"] == peer and r.get("outcome") == "ok"
    ]


def num(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}×"


def table(series, data):
    sizes = sorted(data)
    lines = [f"### {series}: {SERIES[series][0]}", ""]
    lines.append(
        "| size | peer | Running (s) | Succeeded (s) | CPU (s) | peak RSS (MB) | requests "
        "| ÷ raw: Running | Succeeded | CPU | RSS | requests | outcome |"
    )
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for size in sizes:
        runs = data[size]["runs"]
        raw = next((r for r in runs if r["peer"] == "raw"), None)
        for r in runs:
            cells = [
                f"{size:,}",
                PEER_LABEL.get(r["peer"], r["peer"]),
                num(r.get("running_s")),
                num(r.get("succeeded_s")),
                num(r.get("cpu_s"), 2),
                num(r.get("peak_rss_mb"), 0),
                f"{r.get('api_requests', 0):,}",
            ]
            for key, _ in METRICS:
                a = r.get(key)
                cells.append(
                    "" if r["peer"] == "raw" or raw is None else ratio(a, raw.get(key))
                )
            cells.append(r.get("outcome", "?"))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fits(series, data):
    """Slopes of ours and raw per unit of the series, and super-linear flags."""
    unit = SERIES[series][1]
    out = {}
    for peer in ("ours-default", "raw"):
        pts = runs_of(data, peer)
        if len(pts) < 2:
            continue
        xs = [s for s, _ in pts]
        peer_fits = {}
        for key, noise in (("peak_rss_mb", 4.0), ("cpu_s", 0.5), ("running_s", 3.0),
                           ("succeeded_s", 2.0), ("api_requests", 20)):
            ys = [r.get(key) for _, r in pts]
            if any(y is None for y in ys):
                continue
            slope, intercept = fit(xs, ys)
            peer_fits[key] = {
                "slope_per_unit": slope,
                "intercept": intercept,
                "segment_slopes": segments(xs, ys),
                "superlinear": superlinear(xs, ys, noise),
            }
        out[peer] = {"unit": unit, "sizes": xs, "fits": peer_fits}
    return out


def fit_lines(series, f):
    unit = SERIES[series][1]
    lines = []
    for peer, v in f.items():
        fs = v["fits"]
        parts = []
        if "peak_rss_mb" in fs:
            parts.append(f"RSS {fs['peak_rss_mb']['slope_per_unit'] * 1024:,.1f} KB per {unit}")
        if "cpu_s" in fs:
            parts.append(f"CPU {fs['cpu_s']['slope_per_unit'] * 1000:,.2f} ms per {unit}")
        if "running_s" in fs:
            parts.append(f"Running {fs['running_s']['slope_per_unit'] * 1000:,.1f} ms per {unit}")
        if "api_requests" in fs:
            parts.append(f"{fs['api_requests']['slope_per_unit']:,.2f} requests per {unit}")
        flagged = [k for k, x in fs.items() if x["superlinear"]]
        lines.append(
            f"- {PEER_LABEL.get(peer, peer)} ({', '.join(f'{s:,}' for s in v['sizes'])}): "
            + "; ".join(parts)
            + (f". **Super-linear: {', '.join(flagged)}**" if flagged else ". Nothing super-linear.")
        )
    return "\n".join(lines)


def plot(series, data, plots: pathlib.Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    peers = sorted({r["peer"] for doc in data.values() for r in doc["runs"]})
    for ax, (key, title) in zip(axes.flat, METRICS):
        for peer in peers:
            pts = [(s, r.get(key)) for s, r in runs_of(data, peer) if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", label=PEER_LABEL.get(peer, peer))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(SERIES[series][0], fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes.flat[5]
    raw = dict(runs_of(data, "raw"))
    for key, title in METRICS:
        pts = [
            (s, r[key] / raw[s][key])
            for s, r in runs_of(data, "ours-default")
            if s in raw and r.get(key) is not None and raw[s].get(key)
        ]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label=title.split(" (")[0])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_title("tfjob-operator ÷ bare client, same size", fontsize=10)
    ax.set_xlabel(SERIES[series][0], fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"make bench-scale: {series}", fontsize=12)
    fig.tight_layout()
    plots.mkdir(parents=True, exist_ok=True)
    path = plots / f"{series}.png"
    # No timestamps in the file: the same JSON gives the same PNG.
    fig.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(fig)
    return path


def restart_table(restarts):
    lines = [
        "### restart: a second operator started on jobs already Running",
        "",
        "| jobs | Pods | ready (s) | first reconcile (s) | every job reconciled (s) "
        "| requests | writes | writes by verb | peak RSS (MB) | CPU (s) | outcome |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in restarts:
        writes = {k: v for k, v in r.get("requests_by_verb", {}).items()
                  if not k.startswith(("get ", "list ", "watch "))}
        lines.append(
            f"| {r['jobs']:,} | {r.get('pods', 0):,} | {num(r.get('ready_s'), 2)} "
            f"| {num(r.get('first_reconcile_s'), 2)} | {num(r.get('all_reconciled_s'), 2)} "
            f"| {r.get('requests', 0):,} | {sum(writes.values()):,} "
            f"| {', '.join(f'{k}: {v}' for k, v in sorted(writes.items())) or '-'} "
            f"| {num(r.get('peak_rss_mb'), 0)} | {num(r.get('cpu_s'), 2)} | {r.get('outcome')} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=pathlib.Path)
    ap.add_argument("--plots", type=pathlib.Path, default=None)
    args = ap.parse_args()
    all_data, restarts = load(args.results)
    if not all_data and not restarts:
        print(f"no results in {args.results}", file=sys.stderr)
        return 1
    found, summary = [], {"series": {}, "restart": restarts}
    for series in SERIES:
        data = all_data.get(series)
        if not data:
            continue
        for size, doc in sorted(data.items()):
            for r in doc["runs"]:
                found += problems(series, size, r)
        f = fits(series, data)
        summary["series"][series] = {"sizes": sorted(data), "fits": f}
        print(table(series, data))
        print()
        print(fit_lines(series, f))
        if args.plots:
            path = plot(series, data, args.plots)
            print(f"\n![{series}]({path.parent.name}/{path.name}) (written to {path})")
        print()
    for r in restarts:
        if r.get("outcome") != "ok":
            found.append(f"restart {r['jobs']}: {r.get('outcome')}")
    if restarts:
        print(restart_table(restarts))
        print()
    if args.results.is_dir():
        (args.results / "scale.json").write_text(json.dumps(summary, indent=2))
    if found:
        print("**Unusable runs:**", file=sys.stderr)
        for p in found:
            print(f"- {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
