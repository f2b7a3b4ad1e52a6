"""The one-screen answer to "how close is rlbm_jax to ns-3.37?": the default model's verdict
per grid, from the committed per-cell errors (`calibration/results/<grid>/errors.csv`).

    python calibration/summary.py            # writes calibration/summary.png, prints the table

For each default grid: the cell-metrics within tolerance, and per metric the share of cells
within (utilisation 3 %, mean queue 15 %, drop and mark rate 25 %, median slowdown 15 %,
per-run p99 25 %, pooled p99 of short flows 25 %).  The figure is that share per grid and
metric, the number of cells on each square.

Below it, the stalls (`calibration/stalls.py`, results.json's "stalls") of the grids whose
flows the stall targets count: flows slowed more than 10x and 30x and lost SYNs, ours over
ns-3's with the paired-bootstrap interval, timeouts per run, and the short-flow p99 cells.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
# the grids run with the default model (the others under results/ are forensics)
GRIDS = {"thesis": "thesis scenario: 10 Mbit/s, two classes, web search (30 seeds)",
         "fast": "100 Mbit/s and 1 Gbit/s, web search and data mining (10 seeds)",
         "long": "long-lived flows at 100 Mbit/s, 0.25-4 BDP (3 seeds)",
         "aqm": "RED, ARED, PIE, CoDel, FQ-CoDel, ECN off and on (3 seeds)",
         "dial": "1, 4, 16 packets per tick (10 seeds)"}
# the grids whose stall statistics the stall targets sum, at the seeds they were rerun with for them
STALL_GRIDS = {"thesis": "thesis", "fast-100M-24-seeds": "fast, its 16 cells at 100 Mbit/s", "fast-24-seeds": "fast, all 32 cells",
               "aqm-websearch-30-seeds-all": "aqm, web-search cells"}
STALL_COUNTS = (("slow_10x", "flows > 10x"), ("slow_30x", "flows > 30x"), ("syn_drops", "lost SYNs per run"),
                ("rto_count", "timeouts per run"))
METRICS = ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate", "slowdown_p50", "slowdown_p99",
           "pooled_p99_short")
LABELS = ("utilisation", "mean queue", "drop rate", "mark rate", "median slowdown", "per-run p99", "pooled p99\nshort")


def verdicts(results: Path = HERE / "results") -> dict:
    """{grid: {metric: (within, checked)}} from each grid's errors.csv."""
    out = {}
    for grid in GRIDS:
        rows = list(csv.DictReader(open(results / grid / "errors.csv")))
        out[grid] = {m: (sum(r["within"] == "True" for r in rows if r["metric"] == m),
                         sum(r["within"] in ("True", "False") for r in rows if r["metric"] == m)) for m in METRICS}
        out[grid]["cells"] = len({r["cell"] for r in rows})
    return out


def markdown(v: dict) -> str:
    head = "| grid | cells | within tolerance | " + " | ".join(x.replace("\n", " ") for x in LABELS) + " |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(METRICS)]
    for grid, per in v.items():
        within = sum(per[m][0] for m in METRICS)
        checked = sum(per[m][1] for m in METRICS)
        cells = [f"{per[m][0]} / {per[m][1]}" if per[m][1] else "–" for m in METRICS]
        lines.append(f"| {grid} | {per['cells']} | **{within} / {checked}** ({100 * within / checked:.0f} %) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def stalls(results: Path = HERE / "results") -> dict:
    """{label: (seeds, the grid's stall statistics, the targets' verdict) or None where the
    grid has no results.json or one without stall statistics}."""
    out = {}
    for grid, label in STALL_GRIDS.items():
        path = results / grid / "results.json"
        d = json.loads(path.read_text()) if path.exists() else {}
        st = d.get("stalls")
        out[label] = (len(d["seeds"]), st["grid"], st["acceptance"]) if st else None
    return out


def stall_markdown(s: dict) -> str:
    """One row per grid: ours / ns-3 (ratio [95 % interval]) per count, the p99 cells, the verdict."""
    lines = ["| grid | seeds | " + " | ".join(label for _, label in STALL_COUNTS)
             + " | short-flow p99 within 25 % or interval reaching 0.8-1.25 | targets |",
             "|---|---:|" + "---|" * len(STALL_COUNTS) + "---:|---|"]
    for label, got in s.items():
        if got is None:
            lines.append(f"| {label} | – | " + " | ".join("not yet run with the stall statistics"
                                                          for _ in STALL_COUNTS) + " | – | – |")
            continue
        seeds, g, acc = got
        cells = []
        for key, _ in STALL_COUNTS:
            c = g["counts"][key]
            a, b = (c["ours_per_run"], c["ns3_per_run"]) if key in ("syn_drops", "rto_count") else (c["ours"], c["ns3"])
            fmt = (lambda x: f"{x:.2f}") if key in ("syn_drops", "rto_count") else (lambda x: f"{x:.0f}")
            r = lambda x: "inf" if x is None else f"{x:.2f}"
            cells.append(f"{fmt(a)} / {fmt(b)} ({r(c['ratio'])} [{r(c['lo'])}, {r(c['hi'])}])")
        p = acc["p99_short"]
        missed = [n for n, k in (("> 10x", "slow_10x"), ("> 30x", "slow_30x"), ("SYNs", "syn_drops"),
                                 ("p99", "p99_short")) if not acc[k]["held"]]
        verdict = "**held**" if acc["held"] else "not held: " + ", ".join(missed)
        lines.append(f"| {label} | {seeds} | " + " | ".join(cells) + f" | {p['cells_ok']} / {p['cells']} | {verdict} |")
    return "\n".join(lines)


def figure(v: dict, path: Path) -> None:
    share = np.full((len(v), len(METRICS)), np.nan)
    for i, per in enumerate(v.values()):
        for j, m in enumerate(METRICS):
            if per[m][1]:
                share[i, j] = per[m][0] / per[m][1]
    fig, ax = plt.subplots(figsize=(9.5, 3.6))
    im = ax.imshow(share, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    for i, per in enumerate(v.values()):
        for j, m in enumerate(METRICS):
            text = f"{per[m][0]}/{per[m][1]}" if per[m][1] else "–"
            ax.text(j, i, text, ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(METRICS)), LABELS, fontsize=8)
    ax.set_yticks(range(len(v)), [f"{g} ({per['cells']} cells)" for g, per in v.items()], fontsize=9)
    ax.set_title("rlbm_jax against ns-3.37, default model: cells within tolerance per metric", fontsize=10)
    fig.colorbar(im, ax=ax, label="share within tolerance")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(HERE / "results"), help="folder of the grids' results")
    ap.add_argument("--png", default=str(HERE / "summary.png"), help="the figure")
    a = ap.parse_args(argv)
    v = verdicts(Path(a.results))
    figure(v, Path(a.png))
    print(markdown(v))
    print()
    print(stall_markdown(stalls(Path(a.results))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
