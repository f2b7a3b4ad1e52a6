#!/usr/bin/env python
"""The fluid backend against the packet simulator (calibration/FLUID.md).

    python calibration/fluid.py grid             # every long-flow cell: flows x buffer x AQM x TCP
    python calibration/fluid.py probes           # the gradient probes: sign and size against the packet sim
    python calibration/fluid.py queuepilot       # QueuePilot's training mix, long flows only
    python calibration/fluid.py plot             # redraw grid.png from grid.json

grid: 1, 2, 4, 8, 16, 32 and 64 long flows through 0.25, 0.5, 1, 2 and 4 BDP at 100 Mbit/s,
under drop-tail, RED (thresholds at a quarter and three quarters of the buffer, max_p 0.1),
PIE and CoDel (ns-3.37's defaults), NewReno and CUBIC; RED, PIE and CoDel with ECN and ARED
at 1 BDP.  The packet values are means over `--seeds` seeds; the fluid model is
deterministic.  Agreement: utilisation within 3 points and mean queue within 25 %; the
verdict counts cells with 8 or more flows (the fluid model's domain; fewer flows are
listed as where it breaks down).  probes: `rlbm_jax.fluid_validation.PROBES`, the fluid
model's exact gradient and its gradient truncated every second against the packet
simulator's central difference averaged over `--seeds` seeds.  queuepilot: QueuePilot's
training configurations (`rlbm_jax.queuepilot.study`: 10, 20 and 25 flows, 20-80 ms, CUBIC
and NewReno, buffer BDP / sqrt(N), ECN senders) with their web-search flows left out (load
0), under drop-tail, PIE and CoDel (ns-3.37's defaults).

Writes `--out`/grid.json (and grid.png), probes.json or queuepilot.json (every row) and
prints the tables.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.fluid_validation import PROBES, compare, probe_rows, probe_table, table

FLOWS = (1, 2, 4, 8, 16, 32, 64)
BDPS = (0.25, 0.5, 1.0, 2.0, 4.0)
AQMS = ("droptail", "red", "pie", "codel")
TCPS = ("newreno", "cubic")
MIN_FLOWS = 8  # the verdict's domain


def grid_cells(flows=FLOWS, bdps=BDPS) -> list:
    cells = [(n, b, {"aqm": aqm, "tcp": tcp}) for tcp in TCPS for aqm in AQMS for n in flows for b in bdps]
    cells += [(n, 1.0, {"aqm": aqm, "tcp": tcp, "ecn": True}) for tcp in TCPS for aqm in ("red", "pie", "codel")
              for n in flows]
    cells += [(n, 1.0, {"aqm": "ared", "tcp": tcp}) for tcp in TCPS for n in flows]
    return cells


def verdict(rows, min_flows: int = MIN_FLOWS) -> dict:
    dom = [r for r in rows if r[0][0] >= min_flows]
    util_ok = sum(abs(r[1] - r[2]) <= 0.03 for r in dom)
    queue_ok = sum(abs(r[3] - r[4]) <= 0.25 * r[4] for r in dom)
    both = sum(r[-1] for r in dom)
    return {"cells": len(dom), "util_ok": int(util_ok), "queue_ok": int(queue_ok), "both_ok": int(both),
            "fraction_both": both / max(len(dom), 1)}


def plot_grid(rows: list, path) -> None:
    """Fluid against packet, utilisation and mean queue, every cell of the grid: the
    tolerance band shaded, cells with fewer than MIN_FLOWS flows hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    colors = {f: plt.cm.viridis(i / (len(FLOWS) - 1)) for i, f in enumerate(FLOWS)}
    for f in sorted({r["flows"] for r in rows}):
        sub = [r for r in rows if r["flows"] == f]
        kw = dict(s=16, label=f"{f} flows", edgecolors=colors.get(f, "k"), zorder=3)
        kw["facecolors"] = colors.get(f, "k") if f >= MIN_FLOWS else "none"
        ax1.scatter([r["util_packet"] for r in sub], [r["util_fluid"] for r in sub], **kw)
        ax2.scatter([r["queue_packet"] for r in sub], [r["queue_fluid"] for r in sub], **kw)
    lo = min(min(r["util_packet"], r["util_fluid"]) for r in rows) - 0.02
    x = np.linspace(lo, 1.0, 10)
    ax1.fill_between(x, x - 0.03, x + 0.03, color="0.85", label="±3 points", zorder=0)
    ax1.plot(x, x, "k-", lw=0.6)
    ax1.set(xlabel="utilisation, packet simulator", ylabel="utilisation, fluid model", xlim=(lo, 1.005),
            ylim=(lo, 1.005), title="utilisation")
    q = np.logspace(0, np.log10(max(max(r["queue_packet"], r["queue_fluid"]) for r in rows) * 1.2), 50)
    ax2.fill_between(q, q * 0.75, q * 1.25, color="0.85", label="±25 %", zorder=0)
    ax2.plot(q, q, "k-", lw=0.6)
    ax2.set(xscale="log", yscale="log", xlabel="mean queue (packets), packet simulator",
            ylabel="mean queue (packets), fluid model", title="mean queue")
    ax2.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"fluid model against the packet simulator, {len(rows)} long-flow cells "
                 f"(hollow: fewer than {MIN_FLOWS} flows)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("grid", "probes", "queuepilot", "plot"))
    ap.add_argument("--seeds", type=int, default=None, help="packet seeds per cell (grid: 2, probes: 8)")
    ap.add_argument("--seconds", type=float, default=None, help="each run's length (grid: 12 s, probes: 8 s); "
                                                                "the first 2 s are left out")
    ap.add_argument("--flows", type=int, nargs="+", default=list(FLOWS), help="grid: flow counts")
    ap.add_argument("--bdp", type=float, nargs="+", default=list(BDPS), help="grid: buffers in BDPs")
    ap.add_argument("--out", default="calibration/results/fluid", help="output directory")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if a.what == "plot":
        plot_grid(json.loads((out / "grid.json").read_text())["rows"], out / "grid.png")
    elif a.what == "grid":
        seeds, seconds = tuple(range(a.seeds or 2)), a.seconds or 12.0
        rows = compare(grid_cells(a.flows, a.bdp), seeds=seeds, seconds=seconds)
        v = verdict(rows)
        jsonio.write(out / "grid.json", {"seeds": list(seeds), "seconds": seconds, "verdict": v,
                                         "wall_s": time.perf_counter() - t0,
                                         "rows": [{"flows": r[0][0], "buffer_bdp": r[0][1], **r[0][2],
                                                   "util_fluid": r[1], "util_packet": r[2], "queue_fluid": r[3],
                                                   "queue_packet": r[4], "drop_fluid": r[5], "drop_packet": r[6],
                                                   "mark_fluid": r[7], "mark_packet": r[8], "ok": bool(r[9])}
                                                  for r in rows]})
        plot_grid(json.loads(jsonio.dumps([{"flows": r[0][0], "util_fluid": r[1], "util_packet": r[2],
                                            "queue_fluid": r[3], "queue_packet": r[4]} for r in rows])),
                  out / "grid.png")
        print(f"cells with >= {MIN_FLOWS} flows: {v['cells']}; utilisation within 3 points: {v['util_ok']}; "
              f"mean queue within 25 %: {v['queue_ok']}; both: {v['both_ok']} ({100 * v['fraction_both']:.0f} %)")
        print(table(rows))
    elif a.what == "queuepilot":
        from rlbm_jax.env.params import make_params
        from rlbm_jax.queuepilot import study as qp

        seeds, seconds = tuple(range(a.seeds or 2)), a.seconds or 12.0
        cells, params = [], []
        for tcp in TCPS:
            for aqm in ("droptail", "pie", "codel"):
                for n in qp.TRAIN_FLOWS:
                    for r in qp.TRAIN_RTTS_S:
                        p = make_params(**qp.config_kw(n, r, tcp, load=0.0, policy=aqm, warmup_s=2.0))
                        cells.append((n, round(float(p.buffer_pkts) / float(p.bdp_pkts), 3),
                                      {"aqm": aqm, "tcp": tcp, "rtt_ms": round(r * 1e3)}))
                        params.append(p)
        rows = compare(cells, seeds=seeds, seconds=seconds, params=params)
        v = verdict(rows)
        jsonio.write(out / "queuepilot.json", {"seeds": list(seeds), "seconds": seconds, "verdict": v,
                                               "wall_s": time.perf_counter() - t0,
                                               "rows": [{"flows": r[0][0], "buffer_bdp": r[0][1], **r[0][2],
                                                         "util_fluid": r[1], "util_packet": r[2],
                                                         "queue_fluid": r[3], "queue_packet": r[4],
                                                         "drop_fluid": r[5], "drop_packet": r[6], "ok": bool(r[9])}
                                                        for r in rows]})
        print(f"cells: {v['cells']}; utilisation within 3 points: {v['util_ok']}; mean queue within 25 %: "
              f"{v['queue_ok']}; both: {v['both_ok']} ({100 * v['fraction_both']:.0f} %)")
        print(table(rows))
    else:
        seeds, seconds = tuple(range(a.seeds or 8)), a.seconds or 8.0
        rows = probe_rows(PROBES, seeds=seeds, seconds=seconds)
        jsonio.write(out / "probes.json", {"seeds": list(seeds), "seconds": seconds, "wall_s": time.perf_counter() - t0,
                                           "rows": [{"probe": r[0], "grad_exact": r[1], "grad_truncated": r[2],
                                                     "packet_fd": r[3], "packet_se": r[4], "same_sign": bool(r[5])}
                                                    for r in rows]})
        same = sum(r[5] for r in rows)
        print(f"signs agree in {same} of {len(rows)} probes (the gradient truncated every second)")
        print(probe_table(rows))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
