#!/usr/bin/env python
"""The fluid backend against the packet simulator (calibration/FLUID.md).

    python calibration/fluid.py grid             # every long-flow cell: flows x buffer x AQM x TCP
    python calibration/fluid.py probes           # the gradient probes: sign and size against the packet sim
    python calibration/fluid.py queuepilot       # QueuePilot's training mix, long flows only
    python calibration/fluid.py ns3              # the committed calibration grids' cells it can model: fluid vs ns-3
    python calibration/fluid.py websearch        # QueuePilot's scenario with its web-search flows: FCTs flow by flow
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
0), under drop-tail, PIE and CoDel (ns-3.37's defaults).  ns3: every cell of the committed
calibration grids (`NS3_GRIDS`, calibration/results/<grid>/results.json) that the fluid
model can represent, its params built as calibration/run.py builds them, run for the cell's
length and warm-up, beside the committed packet ("ours") and ns-3 means over seeds (no
simulator but the fluid model runs): the long-flow cells once, the cells with short flows
(web search, data mining) once per committed seed on that seed's Poisson schedule (the same
flows the packet simulator and the ns-3 run of the seed had) and averaged over the seeds,
their median FCT slowdown and mean FCT compared too; the cells the fluid model refuses
(`fluid.refusal`: several classes, FQ-CoDel) are skipped and counted by reason.  websearch:
QueuePilot's scenario with its web-search flows (load 0.1), NewReno and CUBIC, drop-tail,
ARED and CoDel (ECN senders), 10 and 20 long flows at 40 ms; every short flow's slowdown in
the fluid model and in the packet simulator on the same Poisson schedule (the seed's),
flow by flow (`websearch_pairs`).

Writes `--out`/grid.json (and grid.png), probes.json, queuepilot.json, ns3.json or websearch.json (every row)
and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path


import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.fluid_validation import (PROBES, QUEUE_TOL, SLOWDOWN_TOL, UTIL_TOL, compare, ns3_rows, ns3_short_table,
                                       ns3_table, ns3_verdict, probe_rows, probe_table, table, websearch_pairs,
                                       websearch_verdict)

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


# the grids of calibration/run.py whose ns-3 runs are committed (calibration/results/<grid>/); the
# other directories there are ablations and reruns of these cells with changed ns-3 or model flags
NS3_GRIDS = ("long", "aqm", "thesis", "fast", "dial")
CALIBRATION = Path(__file__).resolve().parent


def load_runner():
    """calibration/run.py as a module (its grids, the cells' make_params arguments)."""
    import importlib.util

    if "calibration_run" in sys.modules:
        return sys.modules["calibration_run"]
    spec = importlib.util.spec_from_file_location("calibration_run", CALIBRATION / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration_run"] = mod
    spec.loader.exec_module(mod)
    return mod


def ns3_cells(results_dir=CALIBRATION / "results", grids=NS3_GRIDS) -> tuple:
    """(entries for `fluid_validation.ns3_rows`, skipped): every cell of each grid's committed
    results.json, its params built from calibration/run.py's own cell (`run.grid`, `seed_kw`:
    a long-flow cell's arguments are the same for every seed) and checked against the
    committed ones.  A cell with short flows (web search, data mining) also gets one params
    per committed seed ("seed_params": `seed_kw`, the bottleneck delay of a phase-spread
    cell moved by the seed's committed shift); the fluid model then runs it on each seed's
    Poisson schedule, `jax.random.PRNGKey(seed)`, the key run.py's `run_ours` gives
    `sim.init` and `ns3.harness.write_schedule` gives `sim.flow_schedule` for the ns-3 run's
    `--flows_in`: the same flows in all three.  skipped: (grid, cell, reason) for the cells
    the fluid model cannot represent (`fluid.refusal`) and any whose committed params differ
    from run.py's."""
    from rlbm_jax.env.backends import fluid
    from rlbm_jax.env.params import make_params
    from rlbm_jax.ns3.harness import delay_phase_s, seed_kw

    run = load_runner()
    entries, skipped = [], []
    for g in grids:
        path = Path(results_dir) / g / "results.json"
        if not path.exists():
            continue
        res = json.loads(path.read_text())
        cells = {c.name: c for c in run.grid(g)}
        for name, com in res["cells"].items():
            c = cells.get(name)
            if c is None:
                skipped.append((g, name, "not a cell of calibration/run.py's grid"))
                continue
            if (json.loads(jsonio.dumps(run.in_repo_terms(c.kw))) != com["params"] or c.seconds != com["seconds"]
                    or [delay_phase_s(c, s) for s in res["seeds"]] != com.get("bottleneck_delay_shift_s",
                                                                               [0.0] * len(res["seeds"]))):
                skipped.append((g, name, "committed params differ from calibration/run.py's cell"))
                continue
            p = make_params(**seed_kw(c, res["seeds"][0]))
            if why := fluid.refusal(p):
                skipped.append((g, name, f"the fluid model does not implement {why}"))
                continue
            m = re.search(r"/([0-9.]+)bdp", name)
            e = {"grid": g, "cell": name, "flows": int(p.long_flows),
                 "buffer_bdp": float(m.group(1)) if m else round(float(p.buffer_pkts / p.bdp_pkts), 3),
                 "buffer_pkts": int(p.buffer_pkts),
                 "rtt_ms": round(2e3 * (c.kw.get("access_delay_s", 0.0) + c.kw["bottleneck_delay_s"])),
                 "tcp": c.kw["tcp"], "aqm": c.kw.get("policy", "droptail"), "ecn": bool(c.kw.get("ecn")),
                 "traffic": "long" if c.kind == "long" else c.kw.get("cdf", "websearch"),
                 "seconds": c.seconds, "warmup_s": float(c.kw.get("warmup_s", 0.0)),
                 "seeds": res["seeds"], "params": p, "ours": com["ours"], "ns3": com["ns3"]}
            if c.kind != "long":  # Poisson flows: the committed params, and those of each seed
                e.update(rate_bps=float(c.kw["bottleneck_rate_bps"]), senders=int(p.num_senders),
                         load=float(c.kw["load"]), params=make_params(**c.kw),
                         seed_params=[make_params(**seed_kw(c, s)) for s in res["seeds"]])
            entries.append(e)
    return entries, skipped


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
    ap.add_argument("what", choices=("grid", "probes", "queuepilot", "ns3", "websearch", "plot"))
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
    elif a.what == "ns3":
        entries, skipped = ns3_cells()
        rows = ns3_rows(entries)
        why = {}
        for g, _, reason in skipped:
            why.setdefault(reason, {}).setdefault(g, 0)
            why[reason][g] += 1
        v = {"all": ns3_verdict(rows), f"flows_{MIN_FLOWS}_or_more": ns3_verdict(rows, MIN_FLOWS)}
        short = [r for r in rows if r["traffic"] != "long"]
        vs = {t: ns3_verdict(rows, 0, t) for t in dict.fromkeys(r["traffic"] for r in short)}
        same = sum(r["flows_started"]["fluid"] == r["flows_started"]["packet"] == r["flows_started"]["ns3"]
                   for r in short)
        jsonio.write(out / "ns3.json", {"grids": list(NS3_GRIDS), "tolerance": {"util_abs": UTIL_TOL,
                                                                              "queue_rel": QUEUE_TOL,
                                                                              "slowdown_p50_rel": SLOWDOWN_TOL},
                                        "verdict": v, "verdict_short_flows": vs,
                                        "short_flows_same_schedule": {"cells": len(short), "same": int(same)},
                                        "wall_s": time.perf_counter() - t0,
                                        "skipped": {"count": len(skipped), "by_reason": why,
                                                    "cells": [{"grid": g, "cell": n, "reason": r}
                                                              for g, n, r in skipped]},
                                        "rows": rows})
        print(ns3_table([r for r in rows if r["traffic"] == "long"]))
        print(ns3_short_table(short))
        for k, d in {**v, **vs}.items():
            f, p = d["fluid_vs_ns3"], d["packet_vs_ns3"]
            sd = (f", median slowdown within {SLOWDOWN_TOL:.0%} {f['slowdown_ok']}" if "slowdown_ok" in f else "")
            print(f"{k}: {d['cells']} cells; fluid vs ns-3: utilisation within 3 points {f['util_ok']}, mean queue "
                  f"within 25 % {f['queue_ok']}{sd}, all {f['ok']}; packet vs ns-3: {p['util_ok']}, {p['queue_ok']}"
                  + (f", {p['slowdown_ok']}" if sd else "") + f", {p['ok']}")
        print(f"short-flow cells whose seeds started the same flows in fluid, packet and ns-3: {same} of {len(short)}")
        print(f"skipped {len(skipped)} cells: " + "; ".join(f"{r}: {sum(n.values())}" for r, n in why.items()))
    elif a.what == "websearch":
        seeds, seconds = tuple(range(a.seeds or 8)), a.seconds or 12.0
        cells = [(tcp, aqm, n, 0.04) for tcp in TCPS for aqm in ("droptail", "ared", "codel") for n in (10, 20)]
        rows = websearch_pairs(cells, seeds=seeds, seconds=seconds)
        v = websearch_verdict(rows)
        jsonio.write(out / "websearch.json", {"seeds": list(seeds), "seconds": seconds, "tolerance_median": QUEUE_TOL,
                                              "wall_s": time.perf_counter() - t0, "cells": v, "flows": rows})
        print(f"{'cell':28} {'flows':>5} {'pairs':>5} {'fluid only':>10} {'packet only':>11} {'mean fluid':>10} "
              f"{'packet':>7} {'median fluid':>12} {'packet':>7} {'|log r|':>7}")
        for c in v:
            name = " ".join(str(x) for x in c["cell"])
            print(f"{name:28} {c['flows']:5d} {c['pairs']:5d} {c['fluid_only']:10d} {c['packet_only']:11d} "
                  f"{c['mean_fluid']:10.2f} {c['mean_packet']:7.2f} {c['median_fluid']:12.2f} {c['median_packet']:7.2f} "
                  f"{c['median_abs_log_ratio']:7.2f} {'ok' if c['median_ok'] else 'MISS'}")
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
