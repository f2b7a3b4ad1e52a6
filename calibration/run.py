#!/usr/bin/env python
"""Calibration runner: rlbm_jax against ns-3.37 on the same scenarios and seeds.

    python calibration/run.py --grid thesis --seeds 10        # 2 TCPs x 3 loads x 3 buffers
    python calibration/run.py --grid long --seeds 3           # long-lived flows, 100 Mbit/s
    python calibration/run.py --grid smoke --seeds 3          # two cells (the CI check)
    python calibration/run.py --grid dial --seeds 10          # tick-size dial: k = 1, 4, 16
    python calibration/run.py --grid fast --seeds 10          # 100 Mbit/s and 1 Gbit/s, web search and data mining
    python calibration/run.py --grid aqm --seeds 4            # RED, ARED, PIE, CoDel, FQ-CoDel, ECN off and on, 100 Mbit/s
    python calibration/run.py --grid capacity --seeds 3       # 8 long flows under the shipped step and wifi capacity traces
    python calibration/run.py --grid lfq --seeds 2            # LFQ's one flow through a FIFO of about one BDP and of 100

Each cell runs our simulator (all seeds of all cells in one vmapped batch per
static shape) and the ns-3 scenario `rlbm_jax/ns3/scenario/rlbm_scenario.cc` (built by
`rlbm_jax/ns3/scenario/build.sh`, one process per seed, `--jobs` at a time) with the same
parameters under the same names.  Poisson cells spread their seeds over the phase of
ns-3's packet clock (`rlbm_jax.ns3.harness.delay_phase_s`: seed s runs, in both simulators, with
the bottleneck delay lengthened by up to half a packet's serialisation).  The error of
a metric is that of the mean over seeds; `TOLERANCES` says what counts as agreement.  Writes, under `--out`:
results.json (every per-seed number, and "stalls"), errors.csv (one row per cell x metric),
plots, and `--report` (markdown error table, the tail, and the stall statistics of
`calibration/stalls.py`: slowed flows, lost SYNs, timeouts and pooled quantiles, ours over
ns-3's with paired-bootstrap intervals).  A rerun reads unchanged ns-3 runs back from
their cache (`--ns3-runs`) and reruns ours, so every report regenerates in ours' time.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # our simulator's batch over every core (rlbm_jax.devices); before rlbm_jax starts JAX
    os.environ.setdefault("RLBM_JAX_HOST_DEVICES", "auto")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rlbm_jax import jsonio, scenarios  # noqa: E402
from rlbm_jax.devices import batched, single_process_only  # noqa: E402
from rlbm_jax.env import backends, metrics as mx, model, sim, tcp  # noqa: E402
from rlbm_jax.env.params import ared_defaults, make_params, pad_params, stack_params  # noqa: E402
from rlbm_jax.ns3.harness import Cell, build_ns3, call as call_ns3, delay_phase_s, ns3_args, run_ns3, seed_kw  # noqa: E402
from rlbm_jax.cli import add_model_args, model_kw, parser, printed_config  # noqa: E402
from rlbm_jax.progress import Progress  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stalls  # noqa: E402  (calibration/stalls.py: the report's stall statistics)

ROOT = Path(__file__).resolve().parents[1]  # the checkout: results go under its calibration/

# metric: (relative tolerance, absolute tolerance that also passes or None)
TOLERANCES = {
    "util_wire": (0.03, None),
    "queue_mean_pkts": (0.15, None),
    "drop_rate": (0.25, 0.002),
    "mark_rate": (0.25, 0.002),  # ECN cells only
    "slowdown_p50": (0.15, None),
    "slowdown_p99": (0.25, None),  # the mean over seeds of each run's p99
    "pooled_p99_short": (0.25, None),  # p99 of short flows (< 100 KB), pooled over seeds
}
# pooled over the seeds' flows (metrics.pooled_tail): pooled_<p50|p99>_<bucket>
POOLED_METRICS = ("pooled_p99_short", "pooled_p50_short", "pooled_p50_medium", "pooled_p99_medium",
                  "pooled_p50_long", "pooled_p99_long")
# metrics that mean nothing for long-lived flows (no flow completes)
FLOW_METRICS = ("slowdown_p50", "slowdown_p99", *POOLED_METRICS)
EXTRA_METRICS = ("queue_p99_pkts", "fct_mean_s", "goodput_bps", "flows_completed", "rto_count", "retx_arrivals",
                 *POOLED_METRICS[1:])
# ---------------------------------------------------------------------------
# grids
# ---------------------------------------------------------------------------

def in_repo_terms(obj):
    """`obj` with every path inside the source tree written relative to its root (the ns-3
    runs' configs and commands name files): results read the same on any checkout."""
    root = str(ROOT) + "/"
    if isinstance(obj, dict):
        return {k: in_repo_terms(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [in_repo_terms(v) for v in obj]
    return obj.replace(root, "") if isinstance(obj, str) else obj


def thesis_cell(tcp, load, buffer_pkts, seconds=60.0, pkts_per_tick=1, policy="sb-naive"):
    kw = scenarios.thesis_cell(tcp, buffer_pkts, load, queue_capacity_pkts=400, policy=policy,
                               pkts_per_tick=pkts_per_tick, num_flow_slots=64)
    return Cell(f"thesis/{tcp}/load{load:g}/buf{buffer_pkts}" + (f"/k{pkts_per_tick}" if pkts_per_tick > 1 else ""),
                "thesis", kw, seconds, phase_spread=True)


def long_cell(tcp, n, bdp_mult, rtt_s, seconds=20.0, warmup_s=5.0):
    kw = scenarios.long_flows(n, bdp_mult, bottleneck_delay_s=rtt_s / 2, tcp=tcp, long_flow_start_spread_s=1.0,
                              warmup_s=warmup_s)
    return Cell(f"long/{tcp}/N{n}/{bdp_mult:g}bdp/rtt{int(rtt_s * 1e3)}ms", "long", kw, seconds)


def timeout_smoke_cell():
    """The CI's cell whose tail depends on what a sender does after a timeout: NewReno at
    load 0.9 with 400 packets per class (queueing up to 0.34 s against a 10 ms RTO floor)."""
    return thesis_cell("newreno", 0.9, 400)


def dumbbell_cell(rate_bps, tcp, cdf, load, buffer_bdp, senders, seconds, pkts_per_tick=1):
    kw = scenarios.dumbbell(rate_bps=rate_bps, senders=senders, buffer_bdp=buffer_bdp, load=load, cdf=cdf, tcp=tcp,
                            seconds=seconds, pkts_per_tick=pkts_per_tick)
    rate = f"{rate_bps / 1e9:g}G" if rate_bps >= 1e9 else f"{rate_bps / 1e6:g}M"
    return Cell(f"dumbbell/{rate}/{tcp}/{cdf}/N{senders}/load{load:g}/{buffer_bdp:g}bdp"
                + (f"/k{pkts_per_tick}" if pkts_per_tick > 1 else ""), "thesis", kw, seconds, phase_spread=True)


def aqm_kw(policy: str, ecn: bool, buffer_pkts: int, rate_bps: float, mss_bytes: float) -> dict:
    """An AQM cell's make_params arguments beyond the traffic: RED's thresholds at 1/8 and
    3/8 of the buffer with max_p 0.1 (its gentle region then ends at 3/4 of the buffer),
    ARED's automatic ones written out (the ns-3 scenario takes them as given), the other
    AQMs at ns-3's defaults (FQ-CoDel's quantum: the device MTU, 1500 bytes, on both sides)."""
    kw = {"policy": policy, "ecn": bool(ecn)}
    if policy == "red-step":  # DCTCP's marking: on the instantaneous queue, every packet above K = BDP / 6
        k = max(1.0, round(buffer_pkts / 6))  # (these cells' buffer is one BDP)
        kw.update(policy="red", red_min_th_pkts=k, red_max_th_pkts=k + 1, red_max_p=1.0, red_weight=1.0)
    elif policy == "red":
        kw.update(red_min_th_pkts=buffer_pkts / 8, red_max_th_pkts=3 * buffer_pkts / 8, red_max_p=0.1)
    elif policy == "ared":
        lo, hi, w = ared_defaults(rate_bps, mss_bytes)
        kw.update(red_min_th_pkts=lo, red_max_th_pkts=hi, red_weight=w)
    return kw


def aqm_cell(policy, ecn, traffic, buffer_bdp, tcp="cubic", seconds=None):
    """100 Mbit/s, 20 ms: `traffic` "longN" (N long-lived flows from 1 s, measured from 5 s)
    or "websearch" (Poisson web-search flows at load 0.6 from 16 senders, fed to ns-3)."""
    name = f"aqm/{policy}/{'ecn' if ecn else 'noecn'}/{tcp}/{traffic}/{buffer_bdp:g}bdp"
    seconds = seconds or (15.0 if traffic.startswith("long") else 20.0)
    if traffic.startswith("long"):
        base = scenarios.long_flows(int(traffic[4:]), buffer_bdp, tcp=tcp, long_flow_start_spread_s=1.0,
                                    warmup_s=5.0)
        kind = "long"
    else:
        base = scenarios.dumbbell(rate_bps=100e6, senders=16, buffer_bdp=buffer_bdp, load=0.6, cdf=traffic, tcp=tcp,
                                  seconds=seconds)
        kind = "thesis"
    kw = {**base, **aqm_kw(policy, ecn, base["buffer_per_class_pkts"], base["bottleneck_rate_bps"],
                           base["mss_bytes"])}
    return Cell(name, kind, kw, seconds, phase_spread=kind == "thesis")


AQM_TRAFFIC = (("long1", 1.0), ("long16", 0.5), ("long16", 4.0), ("websearch", 1.0))


# the fast grid: per rate, TCP and flow-size table, four (load, buffer in BDPs, senders) points
# that between them take every level of each; runs long enough for a few hundred short flows
FAST_POINTS = ((0.3, 1.0, 8), (0.6, 0.25, 16), (0.6, 4.0, 16), (0.9, 1.0, 32))
FAST_SECONDS = {100e6: 30.0, 1e9: 4.0}


def capacity_cell(tcp, trace="step", n=8, bdp_mult=1.0, rtt_s=0.04, seconds=30.0, warmup_s=5.0):
    """`n` long-lived flows at a 10 Mbit/s peak under the capacity schedule `trace` (ns-3
    gets the same table: `--capacity_in`), a droptail buffer of `bdp_mult` BDPs of the peak."""
    kw = scenarios.long_flows(n, bdp_mult, bottleneck_rate_bps=10e6, bottleneck_delay_s=rtt_s / 2, tcp=tcp,
                              long_flow_start_spread_s=1.0, warmup_s=warmup_s, capacity_schedule=trace)
    return Cell(f"capacity/{trace}/{tcp}/N{n}/{bdp_mult:g}bdp/rtt{int(rtt_s * 1e3)}ms", "long", kw, seconds)


def lfq_cell(tcp, rate_mbps, delay_ms, cap_pkts, seconds=10.0, warmup_s=2.0):
    """One flow of LFQ's scenario (initial window 1, MSS 1446, `delay_ms` one way) through a
    drop-tail FIFO of `cap_pkts`: with one flow the fair queue at that cap is this run bit for
    bit (tests/test_lfq.py), so ns-3's FIFO of that size is its counterpart."""
    kw = scenarios.lfq(rate_bps=rate_mbps * 1e6, delay_s=delay_ms * 1e-3, tcp=tcp, policy="droptail",
                       buffer_per_class_pkts=int(cap_pkts), buffer_pkts=int(cap_pkts), warmup_s=warmup_s)
    return Cell(f"lfq/{tcp}/{rate_mbps:g}mbps/{delay_ms:g}ms/cap{int(cap_pkts)}", "long", kw, seconds)


# LFQ's held-out points (off its training grid) and caps about one BDP and fq's default 100
LFQ_POINTS = ((7.5, 20.5, 26), (15.5, 10.5, 27), (24.5, 5.5, 22))


# the acceptance for a capacity change: utilisation within 3 points, mean queue within 20 %
CAPACITY_ACCEPT = {"util_wire": ("abs", 0.03), "queue_mean_pkts": ("rel", 0.20)}


def capacity_acceptance(cells, rows) -> list[str]:
    """The capacity grid's verdict on the issue's acceptance line (`CAPACITY_ACCEPT`)."""
    lines = ["## Acceptance: utilisation within 3 points, mean queue within 20 %", "",
             "`util_wire` on both sides is the packets sent over the packets the schedule offered in the measured "
             "window (ours: `offered_warm`; ns-3: the bits sent over the schedule's integral, computed in the "
             "scenario from the same table).", "",
             "| cell | util ours | util ns-3 | diff (points) | queue ours | queue ns-3 | queue err | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        u, q = row_of(rows, c, "util_wire"), row_of(rows, c, "queue_mean_pkts")
        du = 100 * (u["ours"] - u["ns3"])
        ok = abs(du) <= 100 * CAPACITY_ACCEPT["util_wire"][1] and abs(q["rel_err"]) <= CAPACITY_ACCEPT["queue_mean_pkts"][1]
        lines.append(f"| {c.name} | {u['ours']:.4f} | {u['ns3']:.4f} | {du:+.2f} | {q['ours']:.2f} | {q['ns3']:.2f} "
                     f"| {q['rel_err']:+.1%} | {'pass' if ok else 'FAIL'} |")
    return lines + [""]


GRIDS = ("thesis", "long", "smoke", "dial", "fast", "aqm", "capacity", "lfq")


def grid(name: str) -> list[Cell]:
    tcps = ("newreno", "cubic")
    if name == "thesis":
        return [thesis_cell(t, ld, b) for t in tcps for ld in (0.3, 0.6, 0.9) for b in (25, 100, 400)]
    if name == "long":
        return [long_cell(t, n, m, r) for t in tcps for r in (0.02, 0.08) for n in (1, 8, 64)
                for m in (0.25, 1.0, 4.0)]
    if name == "smoke":
        return [thesis_cell("newreno", 0.3, 100), thesis_cell("cubic", 0.3, 400)]
    if name == "dial":
        return [thesis_cell(t, 0.6, 100, pkts_per_tick=k) for t in tcps for k in (1, 4, 16)]
    if name == "aqm":
        return ([aqm_cell(q, e, tr, b) for q in ("red", "ared", "pie", "codel", "fq-codel") for e in (False, True)
                 for tr, b in AQM_TRAFFIC]
                + [aqm_cell("red-step", True, tr, 1.0, tcp="dctcp") for tr in ("long16", "websearch")])
    if name == "capacity":
        # (the shipped `cellular` trace has outages, rate 0, which ns-3's point-to-point device cannot run)
        return [capacity_cell(t, trace) for trace in ("step", "wifi") for t in tcps]
    if name == "lfq":
        return [lfq_cell(t, r, d, cap) for t in tcps for r, d, bdp in LFQ_POINTS for cap in (bdp, 100)]
    if name == "fast":
        return [dumbbell_cell(r, t, cdf, ld, b, n, FAST_SECONDS[r]) for r in (100e6, 1e9) for t in tcps
                for cdf in ("websearch", "datamining") for ld, b, n in FAST_POINTS]
    raise ValueError(f"unknown grid {name!r}")


# ---------------------------------------------------------------------------
# our simulator
# ---------------------------------------------------------------------------

def run_ours(cells: list[Cell], seeds: list[int], show_progress=True) -> dict:
    """{cell name: {"seeds": [per-seed report], "flows": [[rows]], "hist": [[fractions]], "wall_s",
    "backend": the tick that ran it (`backends.resolve`: auto picks native where it implements the cell)}}."""
    out = {}
    groups: dict = {}
    for c in cells:  # one batch per static shape (the treedef holds the static fields)
        # a phase-spread cell's delay, and so its delay line, differs per seed
        ps = pad_params([make_params(**seed_kw(c, s)) for s in seeds])
        groups.setdefault((jax.tree.structure(ps[0]), c.seconds), []).append((c, ps))
    for (_, seconds), pairs in groups.items():
        group = [c for c, _ in pairs]
        batch = stack_params([p for _, ps in pairs for p in ps])
        backend = backends.resolve(None, batch, ticks=True)
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for _ in group for s in seeds])
        total = sim.ticks_for(seconds, pairs[0][1][0])
        n_chunks = 20
        size = math.ceil(total / n_chunks)
        n = len(group) * len(seeds)  # cells x seeds, one flat batch spread over the devices (of every process)
        state = batched(sim.init, n)(keys, batch)
        advance = batched(lambda s, p: backends.run(s, p, size)[0], n)
        t0 = time.perf_counter()
        bar = Progress(n_chunks, unit=" chunks", label=f"ours: {len(group)} cell(s) x {len(seeds)} seeds ") \
            if show_progress else None
        for i in range(n_chunks):
            state = advance(state, batch)
            jax.block_until_ready(state)
            if bar:
                bar.update(i + 1)
        if bar:
            bar.close()
        wall = time.perf_counter() - t0
        m = state.metrics
        rep = batched(mx.summarize, n)(m, batch)
        rep = {k: np.asarray(v) for k, v in rep.items()}
        logs, counts, hists = np.asarray(m.log), np.asarray(m.log_count), np.asarray(m.occ_hist)
        for ci, c in enumerate(group):
            rows, flows, hist = [], [], []
            for si, _ in enumerate(seeds):
                j = ci * len(seeds) + si
                rows.append({k: _py(v[j]) for k, v in rep.items()})
                n = min(int(counts[j]), logs.shape[1])
                flows.append(logs[j, :n].tolist())
                h = hists[j].astype(np.float64)
                hist.append((h / max(h.sum(), 1)).tolist())
            out[c.name] = {"seeds": rows, "flows": flows, "hist": hist, "wall_s": wall / len(group),
                           "backend": backend}
    return out


# ---------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------

def relative_error(ours: float, ref: float) -> float:
    if not (np.isfinite(ours) and np.isfinite(ref)):
        return float("nan")
    if ref == 0:
        return 0.0 if ours == 0 else float("inf")
    return (ours - ref) / abs(ref)


def within(metric: str, ours: float, ref: float) -> bool:
    rel, absolute = TOLERANCES[metric]
    err = relative_error(ours, ref)
    if absolute is not None and np.isfinite(ours) and np.isfinite(ref) and abs(ours - ref) <= absolute:
        return True
    return bool(np.isfinite(err) and abs(err) <= rel)


def seed_mean(rows: list[dict], metric: str) -> float:
    vals = np.asarray([np.nan if r.get(metric) is None else r[metric] for r in rows], dtype=np.float64)
    return float(np.nanmean(vals)) if np.any(np.isfinite(vals)) else float("nan")


def tails(c: Cell, src: dict) -> dict:
    """The cell's pooled tail in one simulator: {"pooled_p99_short": ..., ...} and the flow counts."""
    t = mx.pooled_tail(src[c.name]["flows"], warmup_s=float(c.kw.get("warmup_s", 0.0)))
    out = {f"pooled_{q}_{b}": t[b][q] for b in ("short", "medium", "long") for q in ("p50", "p99")}
    out.update({f"flows_{b}": t[b]["flows"] for b in ("short", "medium", "long")})
    return out


def checked_metrics(c: Cell) -> tuple:
    """The metrics of `TOLERANCES` that a cell is judged on: no flow metrics for long-lived
    flows, the mark rate only with ECN."""
    return tuple(m for m in TOLERANCES if not (c.kind == "long" and m in FLOW_METRICS)
                 and not (m == "mark_rate" and not c.kw.get("ecn", False)))


def compare(cells: list[Cell], ours: dict, ns3: dict) -> list[dict]:
    rows = []
    for c in cells:
        pooled = (tails(c, ours), tails(c, ns3)) if c.kind != "long" else None
        for metric in (*checked_metrics(c), *EXTRA_METRICS):
            if c.kind == "long" and metric in FLOW_METRICS:
                continue
            if metric in POOLED_METRICS:
                a, b = pooled[0][metric], pooled[1][metric]
            else:
                a, b = seed_mean(ours[c.name]["seeds"], metric), seed_mean(ns3[c.name]["seeds"], metric)
            checked = metric in TOLERANCES
            rows.append({"cell": c.name, "metric": metric, "ours": a, "ns3": b, "rel_err": relative_error(a, b),
                         "tolerance": TOLERANCES[metric][0] if checked else None,
                         "within": within(metric, a, b) if checked else None})
    return rows


def _py(x):
    x = np.asarray(x)
    return float(x) if x.dtype.kind == "f" else int(x)


# ---------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------

def write_errors(rows, path: Path):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plots(cells, ours, ns3, rows, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in (*TOLERANCES, "queue_p99_pkts", "fct_mean_s") if any(r["metric"] == m for r in rows)]
    ncol = 4
    fig, axes = plt.subplots(math.ceil(len(metrics) / ncol), ncol, figsize=(4 * ncol, 3.6 * math.ceil(len(metrics) / ncol)))
    for ax, m in zip(np.ravel(axes), metrics):
        pts = [(r["ns3"], r["ours"], r["within"]) for r in rows if r["metric"] == m]
        x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        ok = np.array([p[2] is not False for p in pts])
        ax.scatter(x[ok], y[ok], s=14, c="tab:blue", label="within tolerance")
        ax.scatter(x[~ok], y[~ok], s=18, c="tab:red", marker="x", label="outside")
        finite = np.isfinite(x) & np.isfinite(y)
        if finite.any():
            lo, hi = min(x[finite].min(), y[finite].min()), max(x[finite].max(), y[finite].max())
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            if m in TOLERANCES:
                t = TOLERANCES[m][0]
                ax.fill_between([lo, hi], [lo * (1 - t), hi * (1 - t)], [lo * (1 + t), hi * (1 + t)],
                                color="0.85", zorder=0)
        ax.set_title(m)
        ax.set_xlabel("ns-3.37")
        ax.set_ylabel("rlbm_jax")
    for ax in np.ravel(axes)[len(metrics):]:
        ax.axis("off")
    np.ravel(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "ours_vs_ns3.png", dpi=110)
    plt.close(fig)

    flow_cells = [c for c in cells if c.kind == "thesis"]
    if flow_cells:
        ncol = min(len(flow_cells), 6)
        nrow = math.ceil(len(flow_cells) / ncol)
        for what, idx, fname, xlabel in (("slowdown", 3, "slowdown_cdf.png", "FCT slowdown"),):
            fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.8 * nrow), squeeze=False)
            for ax, c in zip(axes.ravel(), flow_cells):
                for src, col in ((ours, "tab:blue"), (ns3, "tab:orange")):
                    v = np.sort(np.concatenate([np.asarray(f, dtype=float).reshape(-1, 5)[:, idx]
                                                for f in src[c.name]["flows"]] or [np.zeros(0)]))
                    if v.size:
                        ax.plot(v, np.arange(1, v.size + 1) / v.size, color=col,
                                label="rlbm_jax" if src is ours else "ns-3")
                ax.set_xscale("log")
                ax.set_title(c.name.replace("thesis/", ""), fontsize=8)
                ax.set_xlabel(xlabel, fontsize=8)
            for ax in axes.ravel()[len(flow_cells):]:
                ax.axis("off")
            axes[0, 0].legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(out / fname, dpi=100)
            plt.close(fig)

    ncol = min(len(cells), 6)
    nrow = math.ceil(len(cells) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.8 * nrow), squeeze=False)
    for ax, c in zip(axes.ravel(), cells):
        for src, col, lab in ((ours, "tab:blue", "rlbm_jax"), (ns3, "tab:orange", "ns-3")):
            hs = [np.asarray(h, dtype=float) for h in src[c.name]["hist"] if len(h)]
            if not hs:
                continue
            n = max(len(h) for h in hs)
            h = np.mean([np.pad(x, (0, n - len(x))) for x in hs], axis=0)
            ax.plot(np.arange(n), np.cumsum(h), color=col, label=lab)
        ax.set_title(c.name.split("/", 1)[1], fontsize=8)
        ax.set_xlabel("buffer occupancy, pkts", fontsize=8)
    for ax in axes.ravel()[len(cells):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "queue_cdf.png", dpi=100)
    plt.close(fig)


def dial_table(cells, rows, ours, ns3, seeds) -> list[dict]:
    """Tick-size dial: per (tcp, k) the error of every checked metric and our speed."""
    out = []
    for c in cells:
        r = {"cell": c.name, "tcp": c.kw["tcp"], "pkts_per_tick": c.kw.get("pkts_per_tick", 1), "seconds": c.seconds,
             "ours_wall_s": ours[c.name]["wall_s"],
             "ours_sim_s_per_wall_s": len(seeds) * c.seconds / ours[c.name]["wall_s"],
             "ns3_wall_s_per_run": ns3[c.name]["wall_s"]}
        for m in dial_metrics(rows):
            e = next((x for x in rows if x["cell"] == c.name and x["metric"] == m), None)
            r[m] = e["rel_err"] if e else None  # None: not checked in this cell
            r[m + "_within"] = e["within"] if e else None
        out.append(r)
    return out


def dial_metrics(rows) -> list[str]:
    """The metrics checked in some cell of the dial (mark_rate only where a cell marks)."""
    return [m for m in TOLERANCES if any(x["metric"] == m for x in rows)]


def dial_plot(table, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(sorted((r for r in table if r["tcp"] == name), key=lambda r: r["pkts_per_tick"]), name, col)
              for name, col in (("newreno", "tab:blue"), ("cubic", "tab:red"))]
    metrics = [m for m in TOLERANCES if any(r.get(m) is not None for r in table)]
    fig, axes = plt.subplots(1, len(metrics) + 1, figsize=(3.3 * (len(metrics) + 1), 3.2))
    for ax, m in zip(axes, metrics):
        for rs, tcp_name, col in series:
            rs = [r for r in rs if r.get(m) is not None]
            ax.plot([r["pkts_per_tick"] for r in rs], [100 * r[m] for r in rs], "o-", color=col, label=tcp_name)
        t = 100 * TOLERANCES[m][0]
        ax.axhspan(-t, t, color="0.88", zorder=0)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{m} error, %", fontsize=9)
        ax.set_xlabel("packets per tick")
    ax = axes[-1]
    for rs, tcp_name, col in series:
        ax.plot([r["pkts_per_tick"] for r in rs], [r["ours_sim_s_per_wall_s"] for r in rs], "o-", color=col,
                label=f"rlbm_jax {tcp_name}")
    ns3_speed = np.mean([r["seconds"] / r["ns3_wall_s_per_run"] for r in table])
    ax.axhline(ns3_speed, color="tab:orange", ls="--", label="ns-3, one process")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title("simulated s per wall s", fontsize=9)
    ax.set_xlabel("packets per tick")
    axes[0].legend(fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "dial.png", dpi=100)
    plt.close(fig)


TRACE_CELLS = ("long/newreno/N1/1bdp/rtt20ms", "long/cubic/N1/1bdp/rtt20ms",
               "long/newreno/N1/0.25bdp/rtt80ms", "long/cubic/N1/0.25bdp/rtt80ms")


def our_flow_trace(c: Cell, seed: int, interval_s: float, **model):
    """Flow slot 0's cwnd and ssthresh (segments) every `interval_s` of the cell's seed-`seed`
    run (its make_params arguments updated by `model`), and the packets all flows sent in
    each interval: (absolute times, cwnd, ssthresh, sent, final state, params)."""
    p = make_params(**{**seed_kw(c, seed), **model})
    n = max(1, int(round(interval_s / float(p.tick_s))))
    steps = int(c.seconds / (n * float(p.tick_s)))

    def body(s, _):
        s = backends.run(s, p, n)[0]
        return s, (tcp.column(s.flows, "cwnd")[0], tcp.column(s.flows, "ssthresh")[0], s.metrics.tx_total)

    state, (cwnd, ssthresh, tx) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=steps))(
        sim.init(jax.random.PRNGKey(seed), p))
    t = np.arange(1, steps + 1) * n * float(p.tick_s)
    sent = np.diff(np.asarray(tx), prepend=0)
    return t, np.asarray(cwnd, float), np.asarray(ssthresh, float), sent, state, p


def our_cwnd_trace(c: Cell, seed: int, interval_s: float):
    """cwnd and ssthresh (segments) of flow slot 0 every `interval_s`, against time since its start."""
    t, cwnd, ssthresh, _, state, _ = our_flow_trace(c, seed, interval_s)
    t = t - float(tcp.column(state.flows, "start_s")[0])
    keep = t >= 0
    return t[keep], cwnd[keep], ssthresh[keep]


def ns3_flow_trace(binary: Path, c: Cell, seed: int, interval_s: float, workdir: Path, *extra: str):
    """ns-3's cwnd and ssthresh (segments) of the first long flow every `interval_s` of the
    cell's seed-`seed` run (`extra`: more scenario arguments); (absolute times, cwnd,
    ssthresh, the run's report, the files' common path prefix)."""
    pre = workdir / f"{c.name.replace('/', '_')}_s{seed}"
    call_ns3([str(binary), *ns3_args(c, seed), f"--cwnd_out={pre}.cwnd.csv", f"--trace_interval_s={interval_s}",
              f"--out={pre}.trace_run.json", *extra])
    d = np.loadtxt(f"{pre}.cwnd.csv", delimiter=",", skiprows=1, ndmin=2)
    return d[:, 0], d[:, 1], d[:, 2], json.loads(Path(f"{pre}.trace_run.json").read_text()), pre


def ns3_cwnd_trace(binary: Path, c: Cell, seed: int, interval_s: float, workdir: Path):
    t, cwnd, ssthresh, _, _ = ns3_flow_trace(binary, c, seed, interval_s, workdir)
    return t - t[0] + interval_s, cwnd, ssthresh


def cwnd_trace_plot(binary: Path, cells: list[Cell], out: Path, seed: int = 1, interval_s: float = 0.01,
                    ns3_dir: Path | None = None):
    """cwnd of one long-lived flow, ours over ns-3's, per TRACE_CELLS cell present; writes
    cwnd_trace.png and cwnd_trace.csv (ns-3's trace run beside the grid's runs, `ns3_dir`,
    default <out>/ns3_runs)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [c for c in cells if c.name in TRACE_CELLS]
    if not chosen:
        return
    fig, axes = plt.subplots(len(chosen), 1, figsize=(11, 2.6 * len(chosen)), squeeze=False)
    rows = []
    for ax, c in zip(axes[:, 0], chosen):
        for label, (t, w, _), col in (("rlbm_jax", our_cwnd_trace(c, seed, interval_s), "tab:blue"),
                                      ("ns-3.37", ns3_cwnd_trace(binary, c, seed, interval_s, ns3_dir or out / "ns3_runs"),
                                       "tab:orange")):
            ax.plot(t, w, color=col, lw=0.9, label=label)
            rows += [(c.name, label, float(a), float(b)) for a, b in zip(t, w)]
        bdp = float(make_params(**c.kw).bdp_pkts)
        buf = c.kw["buffer_per_class_pkts"]
        ax.axhline(bdp + buf, color="0.5", lw=0.7, ls="--", label="BDP + buffer")
        ax.set_title(f"{c.name} (seed {seed})", fontsize=9)
        ax.set_ylabel("cwnd, segments")
        ax.set_xlim(0, c.seconds - 1)
    axes[-1, 0].set_xlabel("time since the flow started, s")
    axes[0, 0].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out / "cwnd_trace.png", dpi=100)
    plt.close(fig)
    with (out / "cwnd_trace.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "simulator", "time_s", "cwnd_pkts"])
        w.writerows(rows)


def report(cells, rows, ours, ns3, seeds, args, path: Path, extra_lines=(), stall_stats=None):
    checked = [r for r in rows if r["within"] is not None]
    miss = [r for r in checked if not r["within"]]
    lines = [f"# Calibration: rlbm_jax vs ns-3.37 (grid `{args.grid}`)", "",
             f"Command: `python calibration/run.py {' '.join(sys.argv[1:])}`", "",
             f"{len(cells)} cells x {len(seeds)} seeds (seeds {seeds[0]}..{seeds[-1]}). For Poisson cells ns-3 "
             "starts exactly the flows our simulator starts (`sim.flow_schedule` -> `--flows_in`: same times, "
             "senders and sizes), so each seed is a paired comparison. Error = (ours - ns-3) / ns-3 of the "
             "seed means.", "",
             "Tolerances: " + ", ".join(f"{m} {t[0]:.0%}" + (f" (or {t[1]} absolute)" if t[1] else "")
                                        for m, t in TOLERANCES.items()), "",
             f"**{len(checked) - len(miss)} of {len(checked)} checked cell-metrics within tolerance.**", "",
             "| cell | " + " | ".join(m for m in TOLERANCES) + " |", "|---|" + "---:|" * len(TOLERANCES)]
    for c in cells:
        cols = []
        for m in TOLERANCES:
            r = next((r for r in rows if r["cell"] == c.name and r["metric"] == m), None)
            if r is None:
                cols.append("–")
                continue
            mark = "" if r["within"] else " ✗"
            cols.append(f"{_fmt(r['ours'])} / {_fmt(r['ns3'])} ({r['rel_err']:+.0%}){mark}")
        lines.append(f"| {c.name} | " + " | ".join(cols) + " |")
    lines += ["", "Cells read `ours / ns-3 (relative error)`; ✗ marks a miss. `slowdown_p99` is the mean over "
              "seeds of each run's p99 (a run's worst flow or two); `pooled_p99_short` is the p99 of every "
              "short flow (< 100 KB) of the cell's seeds together.", ""]
    lines += tail_table(cells, rows, ours, ns3)
    lines += stalls.section(stall_stats if stall_stats is not None else stall_stats_of(cells, ours, ns3, seeds))
    speed_ours = np.mean([ours[c.name]["wall_s"] for c in cells])
    speed_ns3 = np.mean([ns3[c.name]["wall_s"] for c in cells])
    ticks = sorted({ours[c.name]["backend"] for c in cells})
    lines += [f"Wall time per cell: ours {speed_ours:.1f} s for {len(seeds)} seeds in one batch "
              f"(the {' and '.join(ticks)} tick); ns-3 {speed_ns3:.2f} s per seed (one process).", ""]
    lines += list(extra_lines)
    if miss:
        lines += ["## Misses and their causes", "",
                  "Causes are explained, with the experiments behind them, in calibration/REPORT.md.", ""]
        for r in miss:
            c = next(c for c in cells if c.name == r["cell"])
            lines.append(f"- {r['cell']} {r['metric']}: ours {_fmt(r['ours'])}, ns-3 {_fmt(r['ns3'])} "
                         f"({r['rel_err']:+.0%}) - {explain_miss(r['cell'], r['metric'])}; "
                         f"{evidence(c, r['metric'], rows, ours, ns3)}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def row_of(rows, c: Cell, metric: str) -> dict:
    """The comparison row of cell `c` and `metric` (`compare`'s output)."""
    return next(r for r in rows if r["cell"] == c.name and r["metric"] == metric)


def tail_table(cells, rows, ours, ns3) -> list[str]:
    """The tail by flow size (pooled over seeds) and the retransmission counts, per cell."""
    flow_cells = [c for c in cells if c.kind != "long"]
    get = lambda c, m: row_of(rows, c, m)
    pair = lambda r: f"{_fmt(r['ours'])} / {_fmt(r['ns3'])}"
    lines = ["## Tail and retransmissions", "",
             "FCT slowdown p50 and p99 per flow size, pooled over the seeds (flows: how many each simulator "
             "finished; the two sets are the same flows, so a difference is flows that did not finish in "
             "time); retransmission timeouts and retransmitted packets offered to the buffer (ns-3: data "
             "that repeats bytes the buffer saw), per run. Cells read `ours / ns-3`. The last column is ns-3 "
             "against itself: the pooled p99 of short flows of its odd seeds over that of its even seeds, the "
             "spread the cell's sample allows.", ""]
    if flow_cells:
        lines += ["| cell | < 100 KB: flows, p50, p99 | 100 KB - 1 MB: flows, p50, p99 | > 1 MB: flows, p50, p99 "
                  "| RTOs per run | retransmissions per run | ns-3 p99 < 100 KB, odd / even seeds |",
                  "|---|---|---|---|---:|---:|---:|"]
        noise = []
        for c in flow_cells:
            t_o, t_n = tails(c, ours), tails(c, ns3)
            cols = [f"{t_o['flows_' + b]} / {t_n['flows_' + b]}: {pair(get(c, 'pooled_p50_' + b))}, "
                    f"{pair(get(c, 'pooled_p99_' + b))}" for b in ("short", "medium", "long")]
            halves = self_spread(ns3[c.name]["flows"])
            noise.append(halves)
            lines.append(f"| {c.name} | " + " | ".join(cols) + f" | {pair(get(c, 'rto_count'))} | "
                         f"{pair(get(c, 'retx_arrivals'))} | {halves:.2f} |")
        ok = sum(abs(x - 1) <= TOLERANCES["pooled_p99_short"][0] for x in noise if np.isfinite(x))
        lines += ["", f"ns-3's odd and even seeds agree within {TOLERANCES['pooled_p99_short'][0]:.0%} on the pooled "
                      f"p99 of short flows in {ok} of {len(noise)} cells."]
    else:
        lines += ["| cell | RTOs per run | retransmissions per run |", "|---|---:|---:|"]
        for c in cells:
            lines.append(f"| {c.name} | {pair(get(c, 'rto_count'))} | {pair(get(c, 'retx_arrivals'))} |")
    return lines + [""]


def stall_stats_of(cells, ours, ns3, seeds) -> dict:
    """The grid's stall statistics (`stalls.stall_stats`: counts of slowed flows, lost SYNs
    and timeouts, pooled quantiles per size, ours over ns-3's with paired-bootstrap
    intervals), ns-3's odd / even seeds beside each flow cell's p99."""
    spread = {c.name: self_spread(ns3[c.name]["flows"]) for c in cells if c.kind != "long"}
    return stalls.stall_stats(cells, ours, ns3, len(seeds), spread)


def self_spread(flows_per_seed) -> float:
    """ns-3 against itself: pooled p99 slowdown of short flows over its odd seeds / over its even seeds."""
    odd = mx.pooled_tail(flows_per_seed[0::2])["short"]["p99"]
    even = mx.pooled_tail(flows_per_seed[1::2])["short"]["p99"]
    return odd / even if even > 0 else float("nan")


# Causes of known misses; calibration/REPORT.md shows the experiment behind each.
CAUSES = {
    "small-buffer": "in small buffers ns-3.37 times out about twice as often as we do, in chains inside "
                    "fast recovery, and resends twice as much; after a go-back-N resend our flows climb back "
                    "on their retransmissions' ACKs only, ns-3's CUBIC also on hole-filling ACKs that count "
                    "every segment SACKed above the hole (REPORT section 1)",
    "tail": "a tail set by a handful of flows: 3-s stalls after a lost SYN and timeouts in recovery, "
            "whose counts per cell are small numbers in both simulators; a cell's p99 then moves "
            "with one or two flows, as ns-3's own odd and even seeds show (REPORT section 2)",
    "tick": "k packets per tick quantise RTTs and handshakes to whole ticks (REPORT section 4)",
    "overshoot": "one flow's first slow-start overshoot sets the whole run: ns-3 takes ssthresh from a "
                 "pipe that still counts the overshoot's undetected drops (and at 4 BDP its long recovery "
                 "then times out and cuts again); we take it from the segments known in flight "
                 "(REPORT section 3)",
    "rto-storm": "queueing delay of 4 BDP (320 ms) exceeds the 200 ms RTO floor: both simulators time "
                 "out spuriously and resend the window (go-back-N), but not alike: how much each timeout "
                 "resends and which resends the full buffer drops differ (REPORT section 3)",
    "aqm-ss-jump": "ns-3.37's CUBIC slow start adds every segment a cumulative ACK covers, with no cap at "
                   "ssthresh: after a timeout's go-back-N resend, the ACK that fills the first hole covers the "
                   "segments SACKed above it, and the window jumps past what the path holds (windows of 1,460-2,090 "
                   "segments at ns-3's timeouts in 5 of its 6 storm seeds, against 1,190 for BDP plus a 4-BDP "
                   "buffer); the burst overflows, the recovery outlasts its timer, the timeout's ssthresh is 0.7 of "
                   "that window, and the cycle repeats (a timeout storm in 1 or 2 of 3 seeds of a single queue; "
                   "with FQ-CoDel, a milder form in every seed). ns-3 with that "
                   "credit capped at one segment per ACK (--ss_ack_cap_segs=1) has no storm and agrees with ours "
                   "on every metric of these cells (REPORT section 6)",
    "aqm-ss-credit": "ns-3.37's CUBIC credits slow start with every segment a hole-filling ACK covers after a "
                     "go-back-N resend; over 30 seeds ns-3 with that credit capped at one segment per ACK holds our "
                     "queue (36.0 against 35.7 packets) and drops 1.82 % where it dropped 4.21 %: ours, 3.17 %, lies "
                     "between, and its drop rate is within tolerance there (-24.7 %; the 3-seed -33 % is a seed "
                     "draw: results/aqm-websearch-30-seeds, -30-seeds-ss-ack-cap; REPORT section 6)",
    "capacity-ss-credit": "the timeouts of 8 CUBIC flows in the trace's slow stretches (step: 2 and 5 Mbit/s, "
                          "about 6 packets a flow), after which ns-3.37's CUBIC credits slow start with every segment a "
                          "hole-filling ACK covers: ns-3 with that credit capped at one segment per ACK "
                          "(--ns3-arg=--ss_ack_cap_segs=1) drops 1.55 % (step) and 2.88 % (wifi) where it dropped "
                          "2.96 % and 5.08 %; ours, 2.00 % and 3.42 %, lies between (calibration/REPORT.md, the "
                          "capacity row)",
    "aqm-single-flow": "one CUBIC flow: a run holds one to three RED decisions, each followed by seconds below the "
                       "BDP (CUBIC's K is about 6 s here), so utilisation and queue follow when they fall; ARED's "
                       "drop and mark counts agree with ns-3's, the loss per decision does not yet (REPORT section 6)",
    "aqm-red-ecn": "RED with ECN: ns-3 cuts more (more marks, fewer drops, lower utilisation); ns-3.37 also "
                   "enters CWR on an echo during fast recovery and after a timeout, and computes PRR its own way "
                   "(our ecn_cwr and prr \"ns-3.37\", not the default). In web search over 30 seeds the two "
                   "together bring the drop rate to +23.5 %, utilisation to +0.4 %, the queue to -7.6 % and the "
                   "timeouts to -2.9 % of ns-3's, against +50 %, +7.1 %, +6.6 % and -46 % by default; the mark "
                   "rate is then -28 % (results/aqm-websearch-30-seeds*; REPORT section 6)",
    "aqm-pie-retx": "PIE's web-search drops are overflows, as droptail in both shows (results/aqm-pie-websearch-"
                    "droptail); the excess is fast recovery's retransmissions, which RFC 6937's reduction bound "
                    "sends two per duplicate ACK into the full queue where ns-3.37 sends one: with ns-3.37's rule "
                    "(prr_ssrb=\"ns-3.37\", not the default) +12 % / +10 % (results/aqm-websearch-prr-ssrb-ns3; "
                    "REPORT section 6)",
    "aqm-codel-ecn-queue": "CoDel with ECN, web search: within tolerance with any one of ns-3.37's rules that ours "
                           "does not run by default: its PRR arithmetic, its CWR entries or its PRR reduction bound "
                           "(prr, ecn_cwr, prr_ssrb \"ns-3.37\"; REPORT section 6)",
    "aqm-fq-ecn-tail": "FQ-CoDel with ECN, web search: systematic over 30 seeds (4.73 against 9.48, ns-3's odd "
                       "and even seeds agreeing), in the long flows, and not ns-3's hash collisions; ns-3.37's CWR "
                       "entries and PRR arithmetic (our ecn_cwr and prr \"ns-3.37\", not the default) bring it to "
                       "8.95 (-5.6 %), with every checked metric of the cell within tolerance (results/aqm-websearch-"
                       "30-seeds-fq-ecn-prr-ecn-cwr-ns3; REPORT section 6)",
    "aqm-red-ecn-startup": "RED with ECN, 16 flows at 0.5 BDP: ns-3's start-up (its flows in step, a second "
                           "congestion event at 3-4 s) lasts past the 5-s warm-up; measured from 8 s both agree "
                           "(utilisation +0.2 %, queue -0.2 % over 10 seeds: results/aqm-red-ecn-warmup8; REPORT "
                           "section 6)",
    "second-event": "ns-3 ends the first slow-start overshoot with a second congestion event (one "
                    "segment sent during its SACK recovery is dropped); CUBIC's fast convergence then "
                    "sets W_max below the BDP for the first 5 s epoch. Ours ends it in one event "
                    "(REPORT section 3)",
}

STALL_SIZE_BYTES = 100_000  # a "short" flow: under 0.1 s alone on the thesis link
SYN_HELD = 0.95  # a flow held about one SYN timeout: FCT beyond its ideal >= SYN_HELD x syn_timeout_s


def syn_stalls(flows_per_seed, syn_timeout_s: float = 3.0) -> tuple[int, int]:
    """(short flows delayed by at least ~one SYN timeout, all flows) over seeds; rows are
    LOG_FIELDS (size_bytes, cls, fct_s, slowdown, start_s) in both simulators."""
    stalled = total = 0
    for rows in flows_per_seed:
        a = np.asarray(rows, np.float64).reshape(-1, 5)
        extra = a[:, 2] - a[:, 2] / np.maximum(a[:, 3], 1e-12)  # FCT beyond the ideal
        stalled += int(np.sum((a[:, 0] < STALL_SIZE_BYTES) & (extra >= SYN_HELD * syn_timeout_s)))
        total += len(a)
    return stalled, total


def evidence(c: Cell, metric: str, rows, ours, ns3) -> str:
    """The cell's numbers behind an explanation: timeouts and retransmissions per run, and
    for a tail metric the sample (short flows, 3-s SYN stalls, ns-3 against itself)."""
    rto, retx = row_of(rows, c, "rto_count"), row_of(rows, c, "retx_arrivals")
    out = (f"here timeouts per run ours {_fmt(rto['ours'])} / ns-3 {_fmt(rto['ns3'])}, retransmissions "
           f"{_fmt(retx['ours'])} / {_fmt(retx['ns3'])}")
    if metric in ("slowdown_p99", "pooled_p99_short"):
        timeout = float(make_params(**c.kw).syn_timeout_s)
        (a, _), (b, _) = syn_stalls(ours[c.name]["flows"], timeout), syn_stalls(ns3[c.name]["flows"], timeout)
        n_short = tails(c, ns3)["flows_short"]
        syn = [seed_mean(src[c.name]["seeds"], "syn_drops") for src in (ours, ns3)]
        out += (f"; {n_short} short flows, of which held >= {0.95 * timeout:.2g} s (a lost SYN): ours {a}, ns-3 {b}; "
                f"lost SYNs per run ours {_fmt(syn[0])} / ns-3 {_fmt(syn[1])}; "
                f"ns-3's odd / even seeds: {self_spread(ns3[c.name]['flows']):.2f}")
    return out


TAIL = ("slowdown_p99", "pooled_p99_short")
# Which cause explains a miss, as data: (cell pattern, metrics or None for any, cause), the
# first rule whose pattern matches the cell name (`re.search`) and whose metrics hold the
# metric decides; a miss no rule covers is "not yet explained".  Each cause is in CAUSES.
MISS_RULES = (
    (r"^aqm/(.*/)?noecn/cubic/long16/(.*/)?4bdp$", None, "aqm-ss-jump"),
    (r"^aqm/fq-codel/(.*/)?noecn/cubic/long16/", None, "aqm-ss-jump"),
    (r"^aqm/fq-codel/noecn/cubic/websearch/", ("drop_rate", "queue_mean_pkts"), "aqm-ss-credit"),
    (r"^aqm/(.*/)?long1/", None, "aqm-single-flow"),
    (r"^capacity/(.*/)?cubic/", ("drop_rate",), "capacity-ss-credit"),
    (r"^aqm/fq-codel/ecn/cubic/websearch/", ("slowdown_p99",), "aqm-fq-ecn-tail"),
    (r"^aqm/", TAIL, "tail"),
    (r"^aqm/pie/(.*/)?websearch/", ("drop_rate",), "aqm-pie-retx"),
    (r"^aqm/codel/ecn/cubic/websearch/", ("queue_mean_pkts",), "aqm-codel-ecn-queue"),
    (r"^aqm/red/ecn/cubic/long16/0\.5bdp", None, "aqm-red-ecn-startup"),
    (r"^aqm/red/ecn/", None, "aqm-red-ecn"),
    (r"^aqm/", None, None),
    (r"/k(4|16)$", ("slowdown_p50", "queue_mean_pkts"), "tick"),
    (r"^long/(.*/)?newreno/N1/", None, "overshoot"),
    (r"^long/cubic/N1/0\.25bdp/rtt20ms", None, "second-event"),
    (r"^long/(.*/)?4bdp/rtt80ms$", None, "rto-storm"),
    (r"(/buf25|/0\.25bdp)", ("drop_rate", "queue_mean_pkts"), "small-buffer"),
    (r"", TAIL, "tail"),
)


def explain_miss(cell: str, metric: str) -> str:
    """The cause (`CAUSES`) of a cell's miss on `metric`, by the first rule of `MISS_RULES`
    that matches."""
    for pattern, metrics, cause in MISS_RULES:
        if re.search(pattern, cell) and (metrics is None or metric in metrics):
            if cause is None:
                break
            return CAUSES[cause]
    return "not yet explained (REPORT section 3)" if cell.startswith("long/") else "not yet explained"


def _fmt(x):
    if not np.isfinite(x):
        return "nan"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def parse_sets(items: list[str], ap) -> dict:
    """--set NAME=VALUE pairs as make_params keyword arguments (numbers, true/false, or text)."""
    known = model.NAMES
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in known:
            ap.error(f"--set takes NAME=VALUE with NAME a make_params argument, got {item!r}")
        try:
            value = json.loads(text.lower() if text.lower() in ("true", "false") else text)
        except json.JSONDecodeError:
            value = text
        out[name] = value
    return out


def build_parser():
    ap = parser(__doc__, "run.py")
    ap.add_argument("--grid", default="smoke", choices=list(GRIDS), help="cells to run")
    ap.add_argument("--cells", default=None, metavar="REGEX",
                    help="only the grid's cells whose name matches (re.search), e.g. 'red/ecn'")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a cell parameter (a make_params argument) in both simulators, e.g. "
                         "--set pie_max_burst_s=1000; repeatable")
    ap.add_argument("--seeds", type=int, default=10, help="seeds per cell")
    ap.add_argument("--first-seed", type=int, default=1, help="seeds are first-seed, first-seed+1, ...")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)), help="ns-3 processes at a time")
    ap.add_argument("--out", default=None, help="results directory (default calibration/results/<grid>)")
    ap.add_argument("--report", default=None, help="markdown report (default <out>/REPORT.md)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    ap.add_argument("--ns3-arg", action="append", default=[], metavar="--NAME=VALUE",
                    help="extra ns-3 scenario argument for every run (an ablation), repeatable")
    ap.add_argument("--fresh-ns3", action="store_true",
                    help="rerun every ns-3 run (by default a run whose source, command line and "
                         "flow schedule are unchanged is read back from --out)")
    ap.add_argument("--backend", choices=[n for n in backends.NAMES if n == "auto" or backends.BACKENDS[n].ticks],
                    default=None,
                    help="our simulator's tick (unset: $RLBM_JAX_BACKEND, else auto: native where it can run)")
    ap.add_argument("--ns3-runs", default=None,
                    help="directory of the ns-3 runs and their cache (default <out>/ns3_runs): an ablation of our "
                         "model (a TCP-model flag below) with its own --out reads the grid's ns-3 runs back")
    add_model_args(ap)
    return ap


def plan(args, ap):
    """(the cells to run, with every --set and TCP-model flag in them; the results
    directory): what the options resolve into, refused through `ap.error` as the run would."""
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    bad = [a for a in args.ns3_arg if not a.startswith("--") or "=" not in a]
    if bad:
        ap.error(f"--ns3-arg takes --name=value, got {bad}")
    out = Path(args.out or ROOT / "calibration" / "results" / args.grid)
    cells = grid(args.grid)
    if args.cells:
        try:
            pattern = re.compile(args.cells)
        except re.error as e:
            ap.error(f"--cells: {e}")
        cells = [c for c in cells if pattern.search(c.name)]
        if not cells:
            ap.error(f"--cells {args.cells!r} matches none of grid {args.grid!r}'s cells")
    if args.set:
        sets = parse_sets(args.set, ap)
        cells = [dataclasses.replace(c, kw={**c.kw, **sets}) for c in cells]
    if ours_model := model_kw(args):  # our side only: these choices are not ns-3 arguments (ns3.NOT_NS3)
        cells = [dataclasses.replace(c, kw={**c.kw, **ours_model}) for c in cells]
    return cells, out


def run_config(args, ap=None) -> dict:
    """What this command runs (`--print-config` prints it, and runs and writes nothing): the
    grid, each cell (its kind, seconds and parameters, --set and the TCP-model flags in
    them), the seeds, the ns-3 side (jobs, extra arguments, the runs' directory, a fresh
    rerun), our backend and the outputs."""
    return config_of(args, *plan(args, ap or build_parser()))


def config_of(args, cells, out: Path) -> dict:
    """`run_config` of the cells and results directory `plan` resolved."""
    return {"grid": args.grid, "cells_filter": args.cells, "set": list(args.set),
            "cells": {c.name: {"kind": c.kind, "seconds": c.seconds, "params": c.kw} for c in cells},
            "seeds": list(range(args.first_seed, args.first_seed + args.seeds)),
            "ns3": {"jobs": args.jobs, "args": list(args.ns3_arg), "fresh": args.fresh_ns3,
                    "runs": str(Path(args.ns3_runs).resolve() if args.ns3_runs else out / "ns3_runs")},
            "backend": args.backend or backends.default(), "tcp_model": model_kw(args, complete=True),
            "out": str(out), "report": str(Path(args.report or out / "REPORT.md")), "progress": not args.no_progress}


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    cells, out = plan(args, ap)
    cfg = config_of(args, cells, out)
    if printed_config(args, in_repo_terms(cfg)):
        return 0
    if args.backend:
        backends.set_default(args.backend)
    if refusal := single_process_only("run.py"):
        ap.error(refusal)
    out.mkdir(parents=True, exist_ok=True)
    seeds, ns3_dir = cfg["seeds"], Path(cfg["ns3"]["runs"])
    binary = build_ns3()
    t0 = time.perf_counter()
    ns3 = run_ns3(binary, cells, seeds, args.jobs, ns3_dir, show_progress=not args.no_progress,
                  extra=tuple(args.ns3_arg), fresh=args.fresh_ns3)
    t_ns3 = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = run_ours(cells, seeds, show_progress=not args.no_progress)
    t_ours = time.perf_counter() - t0
    rows = compare(cells, ours, ns3)
    stall = stall_stats_of(cells, ours, ns3, seeds)
    write_errors(rows, out / "errors.csv")
    (out / "results.json").write_text(jsonio.dumps(in_repo_terms(
        {"grid": args.grid, "seeds": seeds, "tolerances": TOLERANCES, "wall_s": {"ours": t_ours, "ns3": t_ns3},
         "cells": {c.name: {"kind": c.kind, "params": c.kw, "seconds": c.seconds, "backend": ours[c.name]["backend"],
                            "bottleneck_delay_shift_s": [delay_phase_s(c, s) for s in seeds],
                            "ours": ours[c.name]["seeds"], "ns3": [{k: v for k, v in r.items()
                                                                    if not k.startswith("queue_hist")}
                                                                   for r in ns3[c.name]["seeds"]],
                            "ns3_example_cmd": ns3[c.name]["example_cmd"]} for c in cells},
         "errors": rows, "stalls": stall}), indent=1) + "\n")
    plots(cells, ours, ns3, rows, out)
    extra = []
    if args.grid == "dial":
        table = dial_table(cells, rows, ours, ns3, seeds)
        dial_plot(table, out)
        write_errors(table, out / "dial.csv")
        dial_ms = dial_metrics(rows)
        extra += ["## Tick-size dial (`dial.png`, `dial.csv`)", "",
                  "| tcp | packets per tick | " + " | ".join(f"{m} err" for m in dial_ms)
                  + " | ours wall s (batch) | ours sim-s per wall-s | ns-3 wall s per run |",
                  "|---|---:|" + "---:|" * (len(dial_ms) + 3)]
        for r in sorted(table, key=lambda r: (r["tcp"], r["pkts_per_tick"])):
            extra.append(f"| {r['tcp']} | {r['pkts_per_tick']} | "
                         + " | ".join("–" if r[m] is None else f"{r[m]:+.1%}" + ("" if r[m + '_within'] else " ✗")
                                      for m in dial_ms)
                         + f" | {r['ours_wall_s']:.1f} | {r['ours_sim_s_per_wall_s']:.0f} "
                         f"| {r['ns3_wall_s_per_run']:.2f} |")
        extra.append("")
    if args.grid == "capacity":
        extra += capacity_acceptance(cells, rows)
    if any(c.name in TRACE_CELLS for c in cells):
        cwnd_trace_plot(binary, cells, out, ns3_dir=ns3_dir)
        extra += ["cwnd of one long-lived flow, ours over ns-3's: `cwnd_trace.png` (data in `cwnd_trace.csv`).", ""]
    report(cells, rows, ours, ns3, seeds, args, Path(cfg["report"]), extra, stall)
    miss = [r for r in rows if r["within"] is False]
    cached = sum(ns3[c.name]["cached_runs"] for c in cells)
    print(f"{len(miss)} misses of {sum(r['within'] is not None for r in rows)} checked; "
          f"wall ns-3 {t_ns3:.0f} s ({cached} of {len(cells) * len(seeds)} runs read back from {ns3_dir}), "
          f"ours {t_ours:.0f} s; wrote {out}")
    if stall["cells"]:
        acc = stall["acceptance"]
        parts = ", ".join(f"{k} {'held' if v['held'] else 'not held'}" for k, v in acc.items() if k != "held")
        print(f"stalls: the stall targets {'held' if acc['held'] else 'not held'} ({parts})")
    for r in miss:
        print(f"  MISS {r['cell']} {r['metric']}: ours {r['ours']:.4g} ns-3 {r['ns3']:.4g} ({r['rel_err']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
