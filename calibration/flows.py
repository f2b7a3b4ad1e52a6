#!/usr/bin/env python
"""Calibration of flows that differ: two long flows side by side, in rlbm_jax and in ns-3.37.

    python calibration/flows.py --rates 10e6 --seeds 10                 # the 10 Mbit/s half of the grid
    python calibration/flows.py --rates 10e6 100e6 --seeds 10           # the whole grid
    python calibration/flows.py --pairs cubic-rtt --buffers 1 --seeds 3 # a slice

The grid: pairs of long flows (`cubic-cubic`: two CUBIC flows, the same base RTT;
`cubic-rtt`: two CUBIC flows whose access delays are 0.1 and 20 ms; `cubic-newreno`: a CUBIC
flow and a NewReno flow, the same base RTT; `bbr-cubic`: a BBR flow and a CUBIC flow, the
same base RTT) and one BBR flow alone (`bbr`), each flow its own flow group (`flow_groups`),
on a dumbbell of `--rates` with a 10 ms bottleneck delay, a drop-tail FIFO or FQ-CoDel whose
buffer is 0.2, 1 or 4 BDP (of the first flow's path), `--seeds` seeds. 60 s runs at 10
Mbit/s, 30 s at 100 Mbit/s, the first sixth left out; long flows start in the first second.

Each cell runs in both simulators on the same parameters: ours through
`simulate.run_scenario` (the long flows sampled every 10 ms, `rlbm_jax.flowstats`), ns-3's
scenario with the same flags (its `long_flows` record). Agreement (seed means, per cell):
utilisation (`util_wire`) within 3 points, each flow's goodput share within 0.1 absolute,
each flow's retransmissions within 30 % (or 20 packets), the mean queue within 25 % (or 1
packet). Writes `--out`/results.json (every per-seed number) and the markdown report
`--report` (the verdict per cell, then every number). ns-3's runs are cached under
`--ns3-runs` (default `<out>/ns3_runs`; a rerun reads unchanged runs back).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # our seeds over every core; before rlbm_jax starts JAX
    os.environ.setdefault("RLBM_JAX_HOST_DEVICES", "auto")

import numpy as np  # noqa: E402

from rlbm_jax import jsonio  # noqa: E402
from rlbm_jax.env.params import make_params  # noqa: E402
from rlbm_jax.ns3.harness import Cell, build_ns3, run_ns3  # noqa: E402
from rlbm_jax.simulate import run_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {  # name: (tcp per group, access delay per group)
    "cubic-cubic": (("cubic", "cubic"), (1e-4, 1e-4)),
    "cubic-rtt": (("cubic", "cubic"), (1e-4, 0.02)),
    "cubic-newreno": (("cubic", "newreno"), (1e-4, 1e-4)),
    "bbr": (("bbr",), (1e-4,)),
    "bbr-cubic": (("bbr", "cubic"), (1e-4, 1e-4)),
}
BUFFERS_BDP = (0.2, 1.0, 4.0)
DISCIPLINES = ("droptail", "fq-codel")
SECONDS = {10e6: 60.0, 100e6: 30.0}
# metric: ("abs" | "rel", tolerance, absolute floor for "rel" or None)
ACCEPT = {"util_wire": ("abs", 0.03, None), "share": ("abs", 0.10, None), "retx_pkts": ("rel", 0.30, 20.0),
          "queue_mean_pkts": ("rel", 0.25, 1.0)}


# our model's choices a command may set for its cells (ours only: ns-3.37 does as it does); default first
OURS = {"long_flow_syn": ("base-rtt", "queue"), "rtt_clock": ("exact", "ns-3.37"), "sack_credit": ("off", "ns-3.37")}


def cell(pair: str, rate_bps: float, buffer_bdp: float, disc: str, bbr_rate_sample: str = "exact",
         ours: dict | None = None) -> Cell:
    tcps, delays = PAIRS[pair]
    n = len(tcps)
    seconds = SECONDS.get(rate_bps, 30.0)
    per = (lambda v: list(v)) if n > 1 else (lambda v: v[0])  # one flow: one group, the run's values
    kw = dict(num_classes=1, load=0.0, num_senders=n, num_flow_slots=2 * n, long_flows=n, flow_groups=n,
              tcp=per(tcps), access_delay_s=per(delays), access_rate_bps=1e9, bottleneck_rate_bps=rate_bps,
              bottleneck_delay_s=0.01, long_flow_start_spread_s=1.0, warmup_s=seconds / 6, mss_bytes=1448)
    bdp = float(make_params(**{**kw, "policy": "droptail"}).bdp_pkts)
    kw.update(policy=disc, buffer_per_class_pkts=max(2, int(round(buffer_bdp * bdp))))
    if "bbr" in tcps and bbr_rate_sample != "exact":  # (ours only: ns-3.37 has its own)
        kw["bbr_rate_sample"] = bbr_rate_sample
    kw.update({k: v for k, v in (ours or {}).items() if v != OURS[k][0]})  # (ours only; the default left out)
    return Cell(f"flows/{pair}/{rate_bps / 1e6:g}mbps/{buffer_bdp:g}bdp/{disc}", "long", kw, seconds)


def grid(pairs, rates, buffers, discs, bbr_rate_sample="exact", ours=None) -> list[Cell]:
    return [cell(p, r, b, d, bbr_rate_sample, ours) for r in rates for p in pairs for d in discs for b in buffers]


def _ours(a) -> dict:
    return {k: getattr(a, k) for k in OURS}


def run_ours(c: Cell, seeds: list[int]) -> dict:
    """Per seed: util_wire, queue_mean_pkts, and per flow share, goodput and retransmissions."""
    p = make_params(**c.kw)
    res = run_scenario(p, seconds=c.seconds, seeds=seeds, flow_sample_s=0.01, show_progress=False)
    fl = res["flows"]["per_seed"]["flows"]
    return {"backend": res["backend"], "wall_s": res["wall_s"],
            "seeds": [{"util_wire": r["util_wire"], "queue_mean_pkts": r["queue_mean_pkts"],
                       "flows": [{"share": fl["share"][i][k], "goodput_bps": fl["goodput_bps"][i][k],
                                  "retx_pkts": fl["retx_pkts"][i][k], "srtt_mean_s": fl["srtt_mean_s"][i][k],
                                  "cwnd_mean_pkts": fl["cwnd_mean_pkts"][i][k]} for k in range(len(fl["share"][i]))]}
                      for i, r in enumerate(res["per_seed"])]}


def from_ns3(runs: list[dict]) -> list[dict]:
    out = []
    for r in runs:
        lf = sorted(r["long_flows"], key=lambda f: f["flow"])
        total = sum(f["goodput_bps"] for f in lf)
        out.append({"util_wire": r["util_wire"], "queue_mean_pkts": r["queue_mean_pkts"],
                    "flows": [{"share": f["goodput_bps"] / total if total > 0 else float("nan"),
                               "goodput_bps": f["goodput_bps"], "retx_pkts": f["retx_pkts"],
                               "srtt_mean_s": f["srtt_mean_s"], "cwnd_mean_pkts": f["cwnd_mean_pkts"]} for f in lf]})
    return out


def _mean(rows, key, k=None):
    v = [r[key] if k is None else r["flows"][k][key] for r in rows]
    return float(np.mean(v))


def verdict(ours: list[dict], ns3: list[dict]) -> list[dict]:
    """One row per checked quantity: ours, ns-3's, the error, whether it is within ACCEPT."""
    rows = []
    for metric, (kind, tol, floor) in ACCEPT.items():
        for k in ((None,) if metric in ("util_wire", "queue_mean_pkts") else range(len(ours[0]["flows"]))):
            a, b = _mean(ours, metric, k), _mean(ns3, metric, k)
            err = a - b if kind == "abs" else (a - b) / abs(b) if b else (0.0 if a == 0 else math.inf)
            ok = abs(err) <= tol or (floor is not None and abs(a - b) <= floor)
            rows.append({"metric": metric if k is None else f"{metric}[{k}]", "ours": a, "ns3": b, "err": err,
                         "kind": kind, "ok": bool(ok)})
    return rows


def model_flags(cfg: dict) -> str:
    """Our side's model choices a run's configuration set away from the defaults, as flags."""
    flags = [f"--{k.replace('_', '-')} {cfg[k]}" for k, vals in OURS.items() if cfg.get(k, vals[0]) != vals[0]]
    if cfg.get("bbr_rate_sample", "exact") != "exact":
        flags.insert(0, f"--bbr-rate-sample {cfg['bbr_rate_sample']}")
    return " ".join(flags)


def report(cells, res, seeds, flags: str = "") -> str:
    cmd = "python calibration/flows.py" + (f" {flags}" if flags else "")
    L = ["# Two long flows side by side: rlbm_jax against ns-3.37", "",
         f"`{cmd}` ({len(cells)} cells, seeds {seeds}; flags other than the grid's shown). Agreement per cell: utilisation within "
         "3 points, each flow's goodput share within 0.1, each flow's retransmissions within 30 % (or 20 packets), "
         "the mean queue within 25 % (or 1 packet); seed means.", ""]
    passed = sum(all(r["ok"] for r in res[c.name]["verdict"]) for c in cells)
    L += [f"**{passed} of {len(cells)} cells agree on every quantity.**", "",
          "| cell | util | share[0] | retx[0] | retx[1] | queue | verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]

    def cellfmt(v, metric, pct=False):
        r = next((x for x in v if x["metric"] == metric), None)
        if r is None:  # (a cell of one flow)
            return "-"
        mark = "" if r["ok"] else " **x**"
        if r["kind"] == "abs":
            return f"{r['ours']:.3f} / {r['ns3']:.3f}{mark}"
        return f"{r['ours']:.0f} / {r['ns3']:.0f} ({r['err'] * 100:+.0f} %){mark}"

    for c in cells:
        v = res[c.name]["verdict"]
        misses = [r["metric"] for r in v if not r["ok"]]
        L.append(f"| {c.name} | {cellfmt(v, 'util_wire')} | {cellfmt(v, 'share[0]')} | {cellfmt(v, 'retx_pkts[0]')} | "
                 f"{cellfmt(v, 'retx_pkts[1]')} | {cellfmt(v, 'queue_mean_pkts')} | "
                 f"{'agrees' if not misses else 'misses ' + ', '.join(misses)} |")
    L += ["", "Each entry is ours / ns-3's; **x** marks a miss. Every per-seed number is in results.json."]
    L += retx_by_seed(cells, res)
    return "\n".join(L) + "\n"


BURST_PKTS = 100  # a seed whose flow retransmits more than this resent a window after a timeout (go-back-N)


def retx_by_seed(cells, res) -> list[str]:
    """The retransmissions seed by seed: a flow's count over a run is a few packets per loss,
    except in a run where a timeout fires with a window in flight and go-back-N resends it
    (hundreds); a seed mean is then one or two such runs.  Per flow: the median over seeds,
    ours / ns-3's (within 30 % or 20 packets?), and the seeds with more than BURST_PKTS."""
    L = ["", "## Retransmissions seed by seed", "",
         f"A seed mean of retransmissions is mostly the one or two seeds whose flow resent a window after a timeout "
         f"(more than {BURST_PKTS} packets: go-back-N). Per flow, the median over seeds (ours / ns-3's; **x**: not "
         f"within 30 % or 20 packets) and the seeds above {BURST_PKTS} (ours / ns-3's).", ""]
    rows, ok_n, n = [], 0, 0
    for c in cells:
        r = res[c.name]
        ours = [[f["retx_pkts"] for f in sd["flows"]] for sd in r["ours"]["seeds"]]
        ns3 = [[f["retx_pkts"] for f in sd["flows"]] for sd in r["ns3"]]
        parts = []
        for k in range(len(ours[0])):
            a, b = (float(np.median([x[k] for x in v])) for v in (ours, ns3))
            ok = abs(a - b) <= 20 or (b > 0 and abs(a - b) / b <= 0.30)
            ok_n, n = ok_n + ok, n + 1
            burst = (sum(x[k] > BURST_PKTS for x in ours), sum(x[k] > BURST_PKTS for x in ns3))
            parts.append(f"{a:.0f} / {b:.0f}{'' if ok else ' **x**'} | {burst[0]} / {burst[1]}")
        parts += ["- | -"] * (2 - len(parts))
        rows.append(f"| {c.name} | {' | '.join(parts)} |")
    return L + [f"**Medians within tolerance: {ok_n} of {n} flows.**", "",
                "| cell | median retx[0] | seeds > 100 [0] | median retx[1] | seeds > 100 [1] |",
                "| --- | --- | --- | --- | --- |"] + rows


def run_config(a) -> dict:
    """What a command runs: the grid's cells (each one's make_params arguments), seeds, ns-3
    processes and outputs (results.json records it)."""
    out = Path(a.out)
    cells = grid(a.pairs, a.rates, a.buffers, a.disciplines, a.bbr_rate_sample, _ours(a))
    return {"pairs": a.pairs, "bbr_rate_sample": a.bbr_rate_sample, **_ours(a), "rates_bps": a.rates, "buffers_bdp": a.buffers, "disciplines": a.disciplines,
            "seeds": list(range(1, a.seeds + 1)), "jobs": a.jobs, "out": str(out),
            "report": str(a.report or out / "REPORT.md"), "ns3_runs": str(a.ns3_runs or out / "ns3_runs"),
            "cells": {c.name: {"kw": c.kw, "seconds": c.seconds} for c in cells}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", nargs="+", choices=list(PAIRS), default=list(PAIRS))
    ap.add_argument("--rates", nargs="+", type=float, default=[10e6, 100e6])
    ap.add_argument("--buffers", nargs="+", type=float, default=list(BUFFERS_BDP), help="buffers in BDPs")
    ap.add_argument("--disciplines", nargs="+", choices=list(DISCIPLINES), default=list(DISCIPLINES))
    ap.add_argument("--bbr-rate-sample", choices=("exact", "ns-3.37"), default="exact",
                    help="our BBR's delivery-rate samples (the model's bbr_rate_sample) in cells with BBR")
    for k, vals in OURS.items():
        ap.add_argument("--" + k.replace("_", "-"), choices=vals, default=vals[0],
                        help=f"our model's {k} in every cell (ns-3.37 runs as it does)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    ap.add_argument("--out", default="calibration/results/flows")
    ap.add_argument("--report", default=None, help="markdown report (default: <out>/REPORT.md)")
    ap.add_argument("--ns3-runs", default=None, help="ns-3's run cache (default <out>/ns3_runs)")
    ap.add_argument("--print-config", action="store_true", help="print what this command would run (JSON) and exit")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.jobs < 1:
        ap.error("--seeds and --jobs must be at least 1")
    cfg = run_config(a)
    if a.print_config:
        print(json.dumps(cfg, indent=1))
        return 0
    cells = grid(a.pairs, a.rates, a.buffers, a.disciplines, a.bbr_rate_sample, _ours(a))
    seeds = cfg["seeds"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    binary = build_ns3()
    res = {}
    t0 = time.perf_counter()
    for i, c in enumerate(cells):
        ns3 = run_ns3(binary, [c], seeds, a.jobs, Path(a.ns3_runs) if a.ns3_runs else out / "ns3_runs",
                      show_progress=False)[c.name]
        ours = run_ours(c, seeds)
        theirs = from_ns3(ns3["seeds"])
        res[c.name] = {"kw": c.kw, "seconds": c.seconds, "ours": ours, "ns3": theirs, "ns3_cmd": ns3["example_cmd"],
                       "verdict": verdict(ours["seeds"], theirs)}
        ok = all(r["ok"] for r in res[c.name]["verdict"])
        print(f"[{i + 1}/{len(cells)}] {c.name}: {'agrees' if ok else 'misses'} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        jsonio.write(out / "results.json", {"config": cfg, "seeds": seeds, "cells": res})  # a partial grid is kept as it grows
    text = report([c for c in cells if c.name in res], res, seeds, model_flags(cfg))
    Path(cfg["report"]).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
