"""Checks of the fluid backend against the packet simulator: the cells, the agreement table
and the gradient probes that tests/test_fluid.py asserts and calibration/fluid.py reports
(calibration/FLUID.md).

    cell_params(n, b, aqm, tcp, **extra)    a long-flow cell (n flows, b x BDP) under an AQM
    compare(cells, seeds, seconds)          rows: fluid and packet utilisation, mean queue,
                                            drop and mark rates, within tolerance or not
    probe_rows(probes, seeds, seconds)      the fluid gradient (exact and truncated) against the
                                            packet simulator's seed-averaged central difference
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import backends, long_flow_params, metrics as mx, stack_params
from rlbm_jax.env.backends import fluid
from rlbm_jax.env.presets import bdp_buffer_pkts, long_flows
from rlbm_jax.simulate import batch_reports


SECONDS, WARMUP = 8.0, 2.0  # the agreement runs (packet and fluid)
UTIL_TOL, QUEUE_TOL = 0.03, 0.25  # utilisation within 3 points, mean queue within 25 %


def cell_params(n, b, aqm="droptail", tcp="newreno", **extra):
    """n long flows through a FIFO of b x BDP: drop-tail, or RED with thresholds at a quarter and
    three quarters of the buffer (max_p 0.1), or ARED with ns-3's automatic ones, or PIE or
    CoDel with ns-3.37's defaults (PIE: 15 ms target; CoDel: 5 ms, 100 ms), or "red-step", DCTCP's
    marking (RED on the instantaneous queue, every arrival that finds K + 1 = BDP / 6 + 1 packets
    or more marked, as calibration/run.py's cells), or a shared-buffer threshold policy ("dt",
    "abm", "static-bdp", "sb-naive", "sb-sophisticated") with its default alpha; the starts
    spread over 0.2 s."""
    kw = dict(tcp=tcp, long_flow_start_spread_s=0.2, warmup_s=WARMUP, **extra)
    if aqm == "red":
        buf = bdp_buffer_pkts(long_flows(n, b), b)
        for k, v in dict(policy="red", red_min_th_pkts=round(buf / 4), red_max_th_pkts=round(3 * buf / 4),
                         red_max_p=0.1).items():
            kw.setdefault(k, v)  # (a probe moves one of them)
    elif aqm == "red-step":
        k_pkts = max(1.0, float(round(bdp_buffer_pkts(long_flows(n, 1.0), 1.0) / 6)))
        for k, v in dict(policy="red", red_min_th_pkts=k_pkts, red_max_th_pkts=k_pkts + 1, red_max_p=1.0,
                         red_weight=1.0).items():
            kw.setdefault(k, v)
    elif aqm in ("ared", "pie", "codel", "dt", "abm", "static-bdp", "sb-naive", "sb-sophisticated"):
        kw.update(policy=aqm)
    return long_flow_params(n, b, **kw)


def packet_runs(params_list, seeds, seconds=SECONDS):
    """The packet simulator's summary of each (params, seed), one vmapped batch (the backend
    `auto` picks: native for drop-tail, the JAX tick for RED): `simulate.batch_reports`."""
    return batch_reports(params_list, seeds, seconds)


def fluid_runs(params_list, seconds=SECONDS, warmup_s=WARMUP):
    """The fluid model's summary of each params, one vmapped batch (one compilation)."""
    stacked = stack_params(params_list)
    cfg = fluid.configure(stacked)
    out = jax.jit(jax.vmap(lambda p: fluid.summary(p, seconds, warmup_s=warmup_s, config=cfg)))(stacked)
    return jax.tree.map(np.asarray, out)


def compare(cells, seeds=(0, 1), seconds=SECONDS, params=None):
    """Rows (cell, fluid util, packet util, fluid queue, packet queue, fluid drop, packet drop,
    fluid mark, packet mark, ok) of cells (flows, buffer in BDP, cell_params keywords), or of
    `params` (one SimParams per cell, the cells then only labelling them); the packet values
    are means over seeds.  Cells run in batches: the packet simulator's by flow count and
    backend (RED runs on the JAX tick), the fluid model's by flow count, TCP and AQM."""
    plist = list(params) if params is not None else [cell_params(c[0], c[1], **c[2]) for c in cells]
    pk, fl = [None] * len(cells), [None] * len(cells)

    def batches(key):
        groups = {}
        for i, c in enumerate(cells):
            groups.setdefault(key(c), []).append(i)
        return groups.values()

    for idx in batches(lambda c: (c[0], backends.resolve(None, plist[cells.index(c)]),
                                  json.dumps(c[2], sort_keys=True) if params is not None else None)):
        r = packet_runs([plist[i] for i in idx for _ in seeds], [s for _ in idx for s in seeds], seconds)
        for j, i in enumerate(idx):
            pk[i] = {k: float(np.mean(r[k][j * len(seeds):(j + 1) * len(seeds)]))
                     for k in ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate")}
    for idx in batches(lambda c: (c[0], json.dumps(c[2], sort_keys=True))):
        r = fluid_runs([plist[i] for i in idx], seconds)
        for j, i in enumerate(idx):
            fl[i] = {k: float(r[k][j]) for k in ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate")}
    rows = []
    for c, f, p in zip(cells, fl, pk):
        ok = (abs(f["util_wire"] - p["util_wire"]) <= UTIL_TOL
              and abs(f["queue_mean_pkts"] - p["queue_mean_pkts"]) <= QUEUE_TOL * p["queue_mean_pkts"])
        rows.append((c, f["util_wire"], p["util_wire"], f["queue_mean_pkts"], p["queue_mean_pkts"], f["drop_rate"],
                     p["drop_rate"], f["mark_rate"], p["mark_rate"], ok))
    return rows


def table(rows) -> str:
    lines = [f"{'flows':>5} {'BDP':>4} {'scenario':28} {'util fluid':>10} {'packet':>7} {'queue fluid':>11} "
             f"{'packet':>7} {'err':>7} {'drop fluid':>10} {'packet':>8} {'mark fluid':>10} {'packet':>8}"]
    for c, fu, pu, fq, pq, fd, pd, fm, pm, ok in rows:
        what = " ".join(f"{v}" if k in ("aqm", "tcp") else f"{k}={v}" for k, v in sorted(c[2].items()))
        lines.append(f"{c[0]:>5} {c[1]:>4} {what:28} {fu:10.4f} {pu:7.4f} {fq:11.1f} {pq:7.1f} "
                     f"{(fq / pq - 1) * 100:+6.1f}% {fd:10.5f} {pd:8.5f} {fm:10.5f} {pm:8.5f} {'ok' if ok else 'MISS'}")
    return "\n".join(lines)


# ---- usefulness: does the fluid gradient point where the packet simulator moves? ----------
# (name, cell: (flows, buffer in BDP, cell_params keywords), parameter, metric); the parameter
# is a make_params keyword, moved by PROBE_STEP of its value (the buffer by whole packets)
PROBES = (
    ("RED max_p -> queue", (16, 1.0, {"aqm": "red"}), "red_max_p", "queue_mean_pkts"),
    ("RED max_p -> utilisation", (16, 0.5, {"aqm": "red"}), "red_max_p", "util_wire"),
    ("RED min_th -> queue", (16, 1.0, {"aqm": "red"}), "red_min_th_pkts", "queue_mean_pkts"),
    ("RED max_th -> queue", (8, 1.0, {"aqm": "red"}), "red_max_th_pkts", "queue_mean_pkts"),
    ("RED+ECN max_p -> queue", (16, 1.0, {"aqm": "red", "ecn": True}), "red_max_p", "queue_mean_pkts"),
    ("CUBIC RED max_p -> queue", (16, 1.0, {"aqm": "red", "tcp": "cubic"}), "red_max_p", "queue_mean_pkts"),
    ("drop-tail buffer -> utilisation", (16, 0.5, {}), "buffer_pkts", "util_wire"),
    ("drop-tail buffer -> queue", (16, 0.5, {}), "buffer_pkts", "queue_mean_pkts"),
    ("drop-tail buffer -> queue, 8 flows", (8, 1.0, {}), "buffer_pkts", "queue_mean_pkts"),
    ("CUBIC drop-tail buffer -> queue", (16, 1.0, {"tcp": "cubic"}), "buffer_pkts", "queue_mean_pkts"),
    ("drop-tail capacity -> queue", (16, 1.0, {}), "bottleneck_rate_bps", "queue_mean_pkts"),
    ("RED capacity -> utilisation", (16, 0.5, {"aqm": "red"}), "bottleneck_rate_bps", "util_wire"),
    # added with PIE and CoDel, before their packet differences were run
    ("PIE target -> queue", (16, 1.0, {"aqm": "pie"}), "pie_target_s", "queue_mean_pkts"),
    ("CUBIC PIE target -> queue", (16, 1.0, {"aqm": "pie", "tcp": "cubic"}), "pie_target_s", "queue_mean_pkts"),
    ("CoDel target -> queue", (16, 1.0, {"aqm": "codel"}), "codel_target_s", "queue_mean_pkts"),
    ("CUBIC CoDel target -> queue", (16, 1.0, {"aqm": "codel", "tcp": "cubic"}), "codel_target_s",
     "queue_mean_pkts"),
    ("RED max_p -> drop rate", (16, 1.0, {"aqm": "red"}), "red_max_p", "drop_rate"),
    ("RED max_p -> queue, 32 flows", (32, 1.0, {"aqm": "red"}), "red_max_p", "queue_mean_pkts"),
    ("drop-tail buffer -> utilisation, 32 flows", (32, 0.25, {}), "buffer_pkts", "util_wire"),
    ("drop-tail delay -> queue", (16, 1.0, {}), "bottleneck_delay_s", "queue_mean_pkts"),
)
PROBE_STEP = 0.2
GRAD_HORIZON_S = 1.0  # the probes' gradient: truncated every second (fluid.advance's grad_horizon_s)


def probe_rows(probes=PROBES, seeds=tuple(range(8)), seconds=SECONDS):
    """Per probe: (name, the fluid model's exact gradient, its gradient truncated every
    GRAD_HORIZON_S, the packet simulator's central difference over +-PROBE_STEP averaged over
    `seeds`, its standard error over seeds, the truncated gradient's sign agrees)."""
    rows = []
    for name, (n, b, kw), param, metric in probes:
        base = cell_params(n, b, **kw)
        x0 = float(np.asarray(getattr(base, param)).reshape(-1)[0])
        cfg = fluid.configure(base, overrides={"buffer_pkts": x0 * (1 + PROBE_STEP)} if param == "buffer_pkts"
                              else None, max_rtt_s=0.3)
        over = "buffer_pkts" if param == "buffer_pkts" else param
        g_exact, g = (float(jax.jit(jax.grad(lambda x: fluid.summary(
            base, seconds, warmup_s=WARMUP, config=cfg, overrides={over: x}, grad_horizon_s=h)[metric]))(jnp.float32(x0)))
            for h in (None, GRAD_HORIZON_S))
        if param == "buffer_pkts":
            pts = [int(round(x0 * (1 + s * PROBE_STEP))) for s in (1, -1)]
            plist = [cell_params(n, b, buffer_per_class_pkts=v, queue_capacity_pkts=v, **kw) for v in pts]
        else:
            pts = [x0 * (1 + s * PROBE_STEP) for s in (1, -1)]
            plist = [cell_params(n, b, **{param: v}, **kw) for v in pts]
            if param in ("bottleneck_rate_bps", "bottleneck_delay_s"):  # the same buffer in packets as the base
                plist = [cell_params(n, b, **{param: v}, buffer_per_class_pkts=int(base.buffer_pkts),
                                     queue_capacity_pkts=int(base.buffer_pkts), **kw) for v in pts]
        r = packet_runs([p for p in plist for _ in seeds], [s for _ in plist for s in seeds], seconds)[metric]
        up, down = np.asarray(r[:len(seeds)], np.float64), np.asarray(r[len(seeds):], np.float64)
        diffs = (up - down) / (pts[0] - pts[1])
        fd, se = float(diffs.mean()), float(diffs.std(ddof=1) / np.sqrt(len(seeds)))
        rows.append((name, g_exact, g, fd, se, np.sign(g) == np.sign(fd)))
    return rows


def probe_table(rows) -> str:
    lines = [f"{'probe':36} {'exact grad':>11} {'grad, 1 s':>11} {'packet FD':>11} {'s.e.':>9} {'sign':>5}"]
    lines += [f"{name:36} {ge:11.4g} {g:11.4g} {fd:11.4g} {se:9.2g} {'same' if ok else 'DIFF':>5}"
              for name, ge, g, fd, se, ok in rows]
    return "\n".join(lines)



# ---- against ns-3: the committed calibration cells (calibration/fluid.py ns3) ----------------
NS3_METRICS = ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate")
# cells with short flows: also each run's median FCT slowdown and mean FCT (over the flows that
# arrived after the warm-up and finished) and the flows started and finished
NS3_SHORT_METRICS = NS3_METRICS + ("slowdown_p50", "fct_mean_s", "flows_started", "flows_completed")
SLOWDOWN_TOL = 0.25  # median slowdown (the mean over seeds of each run's p50) within 25 %


def seed_means(seed_rows, metrics=NS3_METRICS) -> dict:
    """The mean over seeds of each metric of committed per-seed reports (calibration/run.py's
    results.json "ours" or "ns3"), or of the fluid model's per-seed runs; None where no seed
    reports it (a cell without ECN has no mark rate; a run that finished no flow has no
    slowdown)."""
    out = {}
    for m in metrics:
        vals = [float(r[m]) for r in seed_rows if r.get(m) is not None and np.isfinite(float(r[m]))]
        out[m] = float(np.mean(vals)) if vals else None
    return out


def agrees(model: dict, ref: dict) -> dict:
    """`model` against `ref` ({metric: value}): utilisation within UTIL_TOL (absolute), mean
    queue within QUEUE_TOL (relative), and both; where `ref` has a median slowdown (cells with
    short flows), also that within SLOWDOWN_TOL (relative), and "ok" then needs all three."""
    util = abs(model["util_wire"] - ref["util_wire"]) <= UTIL_TOL
    queue = abs(model["queue_mean_pkts"] - ref["queue_mean_pkts"]) <= QUEUE_TOL * ref["queue_mean_pkts"]
    if ref.get("slowdown_p50") is None:
        return {"util_ok": bool(util), "queue_ok": bool(queue), "ok": bool(util and queue)}
    slow = (model.get("slowdown_p50") is not None
            and abs(model["slowdown_p50"] - ref["slowdown_p50"]) <= SLOWDOWN_TOL * ref["slowdown_p50"])
    return {"util_ok": bool(util), "queue_ok": bool(queue), "slowdown_ok": bool(slow),
            "ok": bool(util and queue and slow)}


def _fluid_batch_key(p, seconds, warmup_s):
    """What a batch of fluid runs must share: the static configuration (flows, TCP, AQM, ECN,
    RED's gentle region, CUBIC's fast convergence), the params' static fields that
    `stack_params` cannot pad, the base RTT (it sets the Euler step: a batch takes its
    smallest) and the run's length and warm-up."""
    from rlbm_jax.env.params import PADDABLE_FIELDS, STATIC_FIELDS

    static = tuple(repr(getattr(p, f)) for f in STATIC_FIELDS if f not in PADDABLE_FIELDS and f != "model_choices")
    return (static, int(p.long_flows), int(p.tcp_id), int(p.policy_id), bool(p.ecn),
            bool(p.red_gentle), bool(p.cubic_fast_convergence), round(float(np.max(p.base_rtt_s)), 9),
            float(seconds), float(warmup_s))


def _ns3_fluid_seed_runs(plist, seeds, seconds, warmup_s):
    """The fluid model's summary of each (params, seed), one vmapped batch: the short flows'
    Poisson schedule drawn from `jax.random.PRNGKey(seed)`, as the packet simulator's
    `sim.init` and the ns-3 scenario's `--flows_in` (`ns3.harness.write_schedule`) draw it."""
    stacked = stack_params(plist)
    cfg = fluid.configure(stacked, horizon_s=seconds)
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    out = jax.jit(jax.vmap(lambda p, k: fluid.summary(p, seconds, warmup_s=warmup_s, config=cfg, key=k)))(stacked,
                                                                                                          keys)
    return jax.tree.map(np.asarray, out)


def ns3_rows(entries) -> list:
    """The fluid model beside the committed packet ("ours") and ns-3 numbers of calibration
    cells.  `entries`: dicts with "cell" (name), "params" (the cell's SimParams, as
    calibration/run.py builds it), "seconds", "warmup_s", "ours" and "ns3" (the committed
    per-seed reports) and any labels (kept); a cell with short flows also "seed_params" (one
    SimParams per seed of "seeds", the delay of each seed as the committed runs had it).

    Long-flow cells: the fluid model (deterministic) runs each cell once for its `seconds` and
    summarises after its `warmup_s`, the cells batched by `_fluid_batch_key` (one compilation
    each).  Cells with short flows: once per committed seed, on that seed's Poisson schedule
    (`_ns3_fluid_seed_runs`), the seeds of cells that share a batch key, flow-size table and
    link rate batched together (their Euler step: the batch's smallest base RTT), and averaged
    over the seeds as the committed means are.  Rows: the labels, "fluid", "packet", "ns3"
    ({metric: value} of NS3_METRICS, with short flows NS3_SHORT_METRICS; means over seeds) and
    "fluid_vs_ns3", "packet_vs_ns3", "fluid_vs_packet" (`agrees`); with short flows also
    "fluid_seeds" (the fluid model's per-seed values, slots_full: 1 where the short-flow slots
    ran out) and "flows_started" (per seed in each model: the same Poisson schedule)."""
    groups, short = {}, {}
    for i, e in enumerate(entries):
        key = _fluid_batch_key(e["params"], e["seconds"], e["warmup_s"])
        if "seed_params" in e:
            short.setdefault(key + (e.get("traffic"), float(e["params"].bottleneck_rate_bps)), []).append(i)
        else:
            groups.setdefault(key, []).append(i)
    fl, fl_seeds = [None] * len(entries), [None] * len(entries)
    for key, idx in groups.items():
        r = fluid_runs([entries[i]["params"] for i in idx], seconds=key[-2], warmup_s=key[-1])
        for j, i in enumerate(idx):
            fl[i] = {k: float(r[k][j]) for k in NS3_METRICS}
            fl[i]["delay_clipped_s"] = float(r["delay_clipped_s"][j])
    for key, idx in short.items():
        plist = [p for i in idx for p in entries[i]["seed_params"]]
        seeds = [s for i in idx for s in entries[i]["seeds"]]
        r = _ns3_fluid_seed_runs(plist, seeds, seconds=key[-4], warmup_s=key[-3])
        j = 0
        for i in idx:
            n = len(entries[i]["seeds"])
            fl_seeds[i] = [{**{k: float(r[k][j + s]) for k in NS3_SHORT_METRICS},
                            "flows_open": float(r["flows_open"][j + s]),
                            "slots_full": float(r["short_slots_full"][j + s]),
                            "delay_clipped_s": float(r["delay_clipped_s"][j + s])} for s in range(n)]
            j += n
            fl[i] = {**seed_means(fl_seeds[i], NS3_SHORT_METRICS),
                     **{k: float(max(x[k] for x in fl_seeds[i])) for k in ("slots_full", "delay_clipped_s")}}
    rows = []
    for e, f, fs in zip(entries, fl, fl_seeds):
        metrics = NS3_SHORT_METRICS if fs is not None else NS3_METRICS
        pk, ns = seed_means(e["ours"], metrics), seed_means(e["ns3"], metrics)
        row = {**{k: v for k, v in e.items() if k not in ("params", "seed_params", "ours", "ns3")},
               "fluid": f, "packet": pk, "ns3": ns,
               "fluid_vs_ns3": agrees(f, ns), "packet_vs_ns3": agrees(pk, ns), "fluid_vs_packet": agrees(f, pk)}
        if fs is not None:
            row["fluid_seeds"] = fs
            row["flows_started"] = {"fluid": [int(x["flows_started"]) for x in fs],
                                    "packet": [int(x["flows_started"]) for x in e["ours"]],
                                    "ns3": [int(x["flows_started"]) for x in e["ns3"]]}
        rows.append(row)
    return rows


def ns3_verdict(rows, min_flows: int = 1, traffic: str = "long") -> dict:
    """Counts over the rows of `traffic` ("long": long-lived flows only, the rows without a
    "traffic" label included; or a flow-size table, "websearch", "datamining": the cells with
    short flows of it) with at least `min_flows` long flows: fluid and packet against ns-3
    (utilisation, mean queue, both; with short flows also the median slowdown, and "ok": all
    three), and the fluid model against the packet simulator."""
    dom = [r for r in rows if r.get("traffic", "long") == traffic and r["flows"] >= min_flows]
    keys = ("util_ok", "queue_ok", "ok") if traffic == "long" else ("util_ok", "queue_ok", "slowdown_ok", "ok")
    out = {"cells": len(dom)}
    for side in ("fluid_vs_ns3", "packet_vs_ns3", "fluid_vs_packet"):
        out[side] = {k: sum(r[side][k] for r in dom) for k in keys}
    return out


def ns3_table(rows) -> str:
    """One line per cell: utilisation, mean queue and drop rate of fluid, packet and ns-3, and
    whether fluid and packet are within tolerance of ns-3 (u: utilisation, q: queue)."""
    def mark(a):
        return "ok" if a["ok"] else ("u" if not a["util_ok"] else "") + ("q" if not a["queue_ok"] else "")

    lines = [f"{'cell':42} {'util fluid':>10} {'packet':>7} {'ns-3':>7} {'queue fluid':>11} {'packet':>7} "
             f"{'ns-3':>7} {'drop fluid':>10} {'packet':>8} {'ns-3':>8} {'fluid':>5} {'packet':>6}"]
    for r in rows:
        f, p, n = r["fluid"], r["packet"], r["ns3"]
        lines.append(f"{r['cell']:42} {f['util_wire']:10.4f} {p['util_wire']:7.4f} {n['util_wire']:7.4f} "
                     f"{f['queue_mean_pkts']:11.1f} {p['queue_mean_pkts']:7.1f} {n['queue_mean_pkts']:7.1f} "
                     f"{f['drop_rate']:10.5f} {p['drop_rate']:8.5f} {n['drop_rate']:8.5f} "
                     f"{mark(r['fluid_vs_ns3']):>5} {mark(r['packet_vs_ns3']):>6}")
    return "\n".join(lines)


def ns3_short_table(rows) -> str:
    """One line per cell with short flows: utilisation, mean queue, median slowdown and mean FCT
    (ms) of fluid, packet and ns-3 (means over seeds), and whether fluid and packet are within
    tolerance of ns-3 (u: utilisation, q: queue, s: median slowdown)."""
    def mark(a):
        return "ok" if a["ok"] else "".join(c for c, k in (("u", "util_ok"), ("q", "queue_ok"), ("s", "slowdown_ok"))
                                            if not a[k])

    def num(x, fmt):
        return format(x, fmt) if x is not None else "-"

    lines = [f"{'cell':52} {'util fluid':>10} {'packet':>6} {'ns-3':>6} {'queue fluid':>11} {'packet':>6} "
             f"{'ns-3':>6} {'p50 sd fluid':>12} {'packet':>6} {'ns-3':>6} {'FCT ms fluid':>12} {'packet':>6} "
             f"{'ns-3':>6} {'fluid':>5} {'packet':>6}"]
    for r in rows:
        f, p, n = r["fluid"], r["packet"], r["ns3"]
        fct = [num(x["fct_mean_s"] * 1e3 if x["fct_mean_s"] is not None else None, ".0f") for x in (f, p, n)]
        lines.append(f"{r['cell']:52} {f['util_wire']:10.3f} {p['util_wire']:6.3f} {n['util_wire']:6.3f} "
                     f"{f['queue_mean_pkts']:11.1f} {p['queue_mean_pkts']:6.1f} {n['queue_mean_pkts']:6.1f} "
                     f"{num(f['slowdown_p50'], '12.2f')} {num(p['slowdown_p50'], '6.2f')} "
                     f"{num(n['slowdown_p50'], '6.2f')} {fct[0]:>12} {fct[1]:>6} {fct[2]:>6} "
                     f"{mark(r['fluid_vs_ns3']):>5} {mark(r['packet_vs_ns3']):>6}")
    return "\n".join(lines)


# ---- short (web-search) flows: flow by flow on the same Poisson schedules ------------------
WS_SECONDS, WS_WARMUP = 12.0, 2.0


def websearch_params(tcp, aqm, n, rtt_s, seconds=WS_SECONDS, **extra):
    """QueuePilot's scenario (`scenarios.queuepilot`: n long flows, web-search at load 0.1,
    100 Mbit/s, ECN on, B = BDP / sqrt(n)) under `aqm`."""
    from rlbm_jax.env.params import make_params
    from rlbm_jax.scenarios import queuepilot

    return make_params(**{**queuepilot(n, rtt_s, tcp, seconds=seconds), "policy": aqm, "warmup_s": WS_WARMUP,
                          **extra})


def websearch_pairs(cells, seeds=tuple(range(8)), seconds=WS_SECONDS):
    """Per short flow that arrived after the warm-up, in every (cell, seed): its size and its
    slowdown in the fluid model and in the packet simulator, which draw the same schedule
    from the seed (`fluid.init`), matched by arrival time.  cells: (tcp, aqm, long flows,
    RTT in s).  Rows: dict(cell, seed, size_bytes, fluid, packet), a slowdown NaN where that
    model had not finished the flow by the end."""
    from rlbm_jax.env import sim

    rows = []
    for cell in cells:
        p = websearch_params(*cell, seconds=seconds)
        plist = [p] * len(seeds)
        stacked = stack_params(plist)
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
        ticks = sim.ticks_for(seconds, p)

        def packet(q, k):
            s, _ = backends.run(sim.init(k, q), q, ticks)
            return s.metrics.log, s.metrics.log_count

        logs, counts = jax.tree.map(np.asarray, jax.jit(jax.vmap(packet))(stacked, keys))
        cfg = fluid.configure(stacked, horizon_s=seconds)

        def flows(q, k):
            st = fluid.advance(fluid.init(q, cfg, key=k), q, fluid.steps_for(seconds, cfg), cfg)
            return fluid.short_flows(st, fluid.values(q, cfg))

        ff = jax.tree.map(np.asarray, jax.jit(jax.vmap(flows))(stacked, keys))
        for i, seed in enumerate(seeds):
            done = {round(float(r[4]), 5): float(r[3]) for r in logs[i][:min(int(counts[i]), logs.shape[1])]}
            for j in range(ff["start_s"].shape[1]):
                s0 = float(ff["start_s"][i, j])
                if not WS_WARMUP <= s0 < seconds:
                    continue
                rows.append(dict(cell=list(cell), seed=int(seed), size_bytes=float(ff["size_bytes"][i, j]),
                                 fluid=float(ff["slowdown"][i, j]) if ff["done"][i, j] > 0.5 else float("nan"),
                                 packet=done.get(round(s0, 5), float("nan"))))
    return rows


def websearch_verdict(rows, tol=QUEUE_TOL):
    """Per cell: flows (arrived after the warm-up), pairs (finished in both), finished in one
    model only, the mean and median slowdown of the pairs in each (and per size bucket,
    `metrics.SIZE_BUCKETS`), the median |log ratio| flow by flow, and whether the median is
    within `tol` of the packet simulator's."""
    out = []
    for cell in dict.fromkeys(tuple(r["cell"]) for r in rows):
        rs = [r for r in rows if tuple(r["cell"]) == cell]
        f = np.array([r["fluid"] for r in rs])
        pk = np.array([r["packet"] for r in rs])
        both = np.isfinite(f) & np.isfinite(pk)
        fm, pm = float(np.median(f[both])), float(np.median(pk[both]))
        size = np.array([r["size_bytes"] for r in rs])
        by_size = {}
        for name, lo, hi in mx.SIZE_BUCKETS:
            sel = both & (size >= lo) & (size < hi)
            by_size[name] = {"pairs": int(sel.sum()),
                             "median_fluid": float(np.median(f[sel])) if sel.any() else float("nan"),
                             "median_packet": float(np.median(pk[sel])) if sel.any() else float("nan")}
        out.append(dict(cell=list(cell), flows=len(rs), pairs=int(both.sum()), by_size=by_size,
                        fluid_only=int((np.isfinite(f) & ~np.isfinite(pk)).sum()),
                        packet_only=int((~np.isfinite(f) & np.isfinite(pk)).sum()),
                        mean_fluid=float(f[both].mean()), mean_packet=float(pk[both].mean()),
                        median_fluid=fm, median_packet=pm,
                        median_abs_log_ratio=float(np.median(np.abs(np.log(f[both] / pk[both])))),
                        median_ok=bool(abs(fm / pm - 1) <= tol)))
    return out
