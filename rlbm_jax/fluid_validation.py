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

from rlbm_jax.env import backends, long_flow_params, stack_params
from rlbm_jax.env.backends import fluid
from rlbm_jax.env.presets import bdp_buffer_pkts, long_flows
from rlbm_jax.simulate import batch_reports


SECONDS, WARMUP = 8.0, 2.0  # the agreement runs (packet and fluid)
UTIL_TOL, QUEUE_TOL = 0.03, 0.25  # utilisation within 3 points, mean queue within 25 %


def cell_params(n, b, aqm="droptail", tcp="newreno", **extra):
    """n long flows through a FIFO of b x BDP: drop-tail, or RED with thresholds at a quarter and
    three quarters of the buffer (max_p 0.1), or ARED with ns-3's automatic ones, or PIE or
    CoDel with ns-3.37's defaults (PIE: 15 ms target; CoDel: 5 ms, 100 ms); the starts spread
    over 0.2 s."""
    kw = dict(tcp=tcp, long_flow_start_spread_s=0.2, warmup_s=WARMUP, **extra)
    if aqm == "red":
        buf = bdp_buffer_pkts(long_flows(n, b), b)
        for k, v in dict(policy="red", red_min_th_pkts=round(buf / 4), red_max_th_pkts=round(3 * buf / 4),
                         red_max_p=0.1).items():
            kw.setdefault(k, v)  # (a probe moves one of them)
    elif aqm in ("ared", "pie", "codel"):
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

