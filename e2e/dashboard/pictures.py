#!/usr/bin/env python3
"""Draw the main panels of the chart's Grafana dashboard from a real
Prometheus, one PNG per panel.

    pictures.py PROMETHEUS_URL DASHBOARD_JSON OUT_DIR START END

START and END are Unix seconds. Each panel named in PANELS is looked up in
the dashboard by its title; its queries (Grafana's `$job` and
`$__rate_interval` filled in) are asked of Prometheus' range API over
[START, END] at a 1 s step, and each series is drawn with the panel's legend
format and unit. So the pictures show what the dashboard shows, from data a
real operator produced, without Grafana (AGPL: neither built nor shipped here)
and without Prometheus' web UI (its assets are not part of the Go module that
e2e/tools.sh builds Prometheus from).

Run by tests/e2e/observability.rs when TFJOB_DASHBOARD_PICTURES names a
directory (`make test-observability`: .cluster/dashboard/;
`make dashboard-pictures`: docs/dashboard/). Prints the files it wrote.
Exits non-zero if a panel is missing from the dashboard or a query fails; a
panel whose queries return no data is still drawn, with a note saying so.
"""
import json
import os
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The dashboard's main panels: title in the dashboard -> file name.
PANELS = {
    "Reconciles per second": "reconciles.png",
    "Reconcile errors per second": "reconcile-errors.png",
    "Reconcile duration (p50, p99)": "reconcile-duration.png",
    "Depth": "workqueue-depth.png",
    "Wait in queue (p99)": "workqueue-wait.png",
    "Jobs per hour": "jobs.png",
    "API requests per second": "api-requests.png",
}
# The scrape job, as in tests/e2e/prometheus.rs.
JOB = "tfjob-operator"
# The e2e scrapes every second over a run of about a minute: a 10 s rate
# window shows its bursts (Grafana would pick about 4 scrape intervals).
RATE_INTERVAL = "10s"
UNITS = {
    "ops": "per second",
    "reqps": "requests per second",
    "s": "seconds",
    "short": "",
    "bytes": "bytes",
    "percentunit": "fraction of a CPU",
}


def panels(dashboard):
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop(0)
        yield panel
        stack.extend(panel.get("panels", []))


def query_range(prometheus, expr, start, end):
    params = urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": "1"}
    )
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        reply = json.load(r)
    if reply.get("status") != "success":
        raise RuntimeError(f"query failed: {expr}: {reply}")
    return reply["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def draw(prometheus, panel, start, end, path):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    drawn = 0
    for target in panel.get("targets", []):
        expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL).replace("$job", JOB)
        for series in query_range(prometheus, expr, start, end):
            points = [(float(t) - start, float(v)) for t, v in series["values"]]
            points = [(t, v) for t, v in points if v == v]  # drop NaN (no rate yet)
            if not points:
                continue
            xs, ys = zip(*points)
            label = legend(target.get("legendFormat", ""), series["metric"]) or expr
            ax.plot(xs, ys, label=label, linewidth=1.5)
            drawn += 1
    ax.set_title(panel["title"], loc="left", fontsize=12)
    ax.set_xlabel("seconds since Prometheus' first scrape of the operator")
    ax.set_ylabel(UNITS.get(unit, unit))
    ax.set_xlim(0, end - start)
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no data in this run", transform=ax.transAxes, ha="center")
    fig.text(
        0.99, 0.01,
        "generated from the e2e's Prometheus (make dashboard-pictures)",
        ha="right", va="bottom", fontsize=7, color="gray",
    )
    fig.tight_layout()
    # No timestamp or version in the file: a regenerated picture differs
    # only where the data does.
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    prometheus, dashboard_file, out_dir = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    start, end = float(sys.argv[4]), float(sys.argv[5])
    # The time axis starts at the first scrape: before it there is nothing
    # to draw (the namespace, the operator and Prometheus were starting).
    scraped = query_range(prometheus, f'up{{job="{JOB}"}}', start, end)
    first = [float(s["values"][0][0]) for s in scraped if s["values"]]
    if not first:
        sys.exit(f"Prometheus never scraped job {JOB} between {start} and {end}")
    start = min(first)
    with open(dashboard_file) as f:
        by_title = {p.get("title"): p for p in panels(json.load(f))}
    missing = [t for t in PANELS if t not in by_title]
    if missing:
        sys.exit(f"panels not in {dashboard_file}: {missing}")
    os.makedirs(out_dir, exist_ok=True)
    for title, name in PANELS.items():
        path = os.path.join(out_dir, name)
        draw(prometheus, by_title[title], start, end, path)
        print(path)


if __name__ == "__main__":
    main()
