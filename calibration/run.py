#!/usr/bin/env python
"""Calibration runner: rlbm_jax against ns-3.37 on the same scenarios and seeds.

    python calibration/run.py --grid thesis --seeds 10        # 2 TCPs x 3 loads x 3 buffers
    python calibration/run.py --grid long --seeds 3           # long-lived flows, 100 Mbit/s
    python calibration/run.py --grid smoke --seeds 3          # two cells (the CI check)
    python calibration/run.py --grid dial --seeds 10          # tick-size dial: k = 1, 4, 16

Each cell runs our simulator (all seeds of all cells in one vmapped batch per
static shape) and the ns-3 scenario `calibration/ns3/rlbm_scenario.cc` (built by
`calibration/ns3/build.sh`, one process per seed, `--jobs` at a time) with the same
parameters under the same names.  The error of a metric is that of the mean over
seeds; `TOLERANCES` says what counts as agreement.  Writes, under `--out`:
results.json (every per-seed number), errors.csv (one row per cell x metric),
plots, and `--report` (markdown error table).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from calibration import lockstep  # noqa: E402
from rlbm_jax.env import metrics as mx, sim, tcp, traffic  # noqa: E402
from rlbm_jax.env.params import make_params  # noqa: E402
from rlbm_jax.progress import Progress  # noqa: E402

# metric: (relative tolerance, absolute tolerance that also passes or None)
TOLERANCES = {
    "util_wire": (0.03, None),
    "queue_mean_pkts": (0.15, None),
    "drop_rate": (0.25, 0.002),
    "slowdown_p50": (0.15, None),
    "slowdown_p99": (0.25, None),
}
# metrics that mean nothing for long-lived flows (no flow completes)
FLOW_METRICS = ("slowdown_p50", "slowdown_p99")
EXTRA_METRICS = ("queue_p99_pkts", "fct_mean_s", "goodput_bps", "flows_completed", "rto_count")
BUILD = ROOT / "calibration" / "ns3" / "build.sh"
SOURCE = ROOT / "calibration" / "ns3" / "rlbm_scenario.cc"
LOCKSTEP = ROOT / "calibration" / "lockstep.py"


@dataclasses.dataclass
class Cell:
    name: str
    kind: str  # "thesis" or "long"
    kw: dict  # make_params keyword arguments, the same names the ns-3 scenario takes
    seconds: float


# ---------------------------------------------------------------------------
# grids
# ---------------------------------------------------------------------------

def thesis_cell(tcp, load, buffer_pkts, seconds=60.0, pkts_per_tick=1, policy="sb-naive"):
    kw = dict(num_senders=10, num_classes=2, tcp=tcp, load=load, buffer_per_class_pkts=buffer_pkts,
              queue_capacity_pkts=400, arrival_stop_s=45.0, policy=policy, pkts_per_tick=pkts_per_tick,
              num_flow_slots=64)
    return Cell(f"thesis/{tcp}/load{load:g}/buf{buffer_pkts}" + (f"/k{pkts_per_tick}" if pkts_per_tick > 1 else ""),
                "thesis", kw, seconds)


def long_cell(tcp, n, bdp_mult, rtt_s, seconds=20.0, warmup_s=5.0):
    kw = dict(num_senders=n, num_classes=1, num_flow_slots=n, long_flows=n, load=0.0, policy="droptail",
              access_rate_bps=1e9, access_delay_s=0.0, bottleneck_rate_bps=100e6,
              bottleneck_delay_s=rtt_s / 2, tcp=tcp, mss_bytes=1000, long_flow_start_spread_s=1.0,
              warmup_s=warmup_s,
              # Linux's 200 ms, as `long_flow_params`: with the thesis's 10 ms floor, RTTs of
              # 20-80 ms plus queueing make ns-3 time out spuriously thousands of times per run
              min_rto_s=0.2)
    bdp = float(make_params(**kw, buffer_per_class_pkts=1).bdp_pkts)
    buf = max(2, int(round(bdp_mult * bdp)))
    kw.update(buffer_per_class_pkts=buf, queue_capacity_pkts=buf)
    return Cell(f"long/{tcp}/N{n}/{bdp_mult:g}bdp/rtt{int(rtt_s * 1e3)}ms", "long", kw, seconds)


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
    raise ValueError(f"unknown grid {name!r}")


# ---------------------------------------------------------------------------
# our simulator
# ---------------------------------------------------------------------------

def run_ours(cells: list[Cell], seeds: list[int], show_progress=True) -> dict:
    """{cell name: {"seeds": [per-seed report], "flows": [[rows]], "hist": [[fractions]], "wall_s"}}."""
    out = {}
    groups: dict = {}
    for c in cells:  # one batch per static shape (the treedef holds the static fields)
        p = make_params(**c.kw)
        groups.setdefault((jax.tree.structure(p), c.seconds), []).append((c, p))
    for (_, seconds), pairs in groups.items():
        group, params = [c for c, _ in pairs], [p for _, p in pairs]
        batch = jax.tree.map(lambda *xs: jnp.stack([x for x in xs for _ in seeds]), *params)
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for _ in group for s in seeds])
        p0 = params[0]
        total = sim.ticks_for(seconds, p0)
        n_chunks = 20
        size = math.ceil(total / n_chunks)
        state = jax.jit(jax.vmap(sim.init))(keys, batch)
        advance = jax.jit(jax.vmap(lambda s, p: sim.run(s, p, size)[0]))
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
        rep = jax.jit(jax.vmap(mx.summarize))(m, batch)
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
            out[c.name] = {"seeds": rows, "flows": flows, "hist": hist, "wall_s": wall / len(group)}
    return out


# ---------------------------------------------------------------------------
# ns-3
# ---------------------------------------------------------------------------

def build_ns3() -> Path:
    """Builds (if needed) the ns-3 scenario; installs libns3-dev when it is missing."""
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 scenario build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def cdf_path(name: str) -> str:
    if Path(name).exists():
        return str(Path(name).resolve())
    return str(resources.files("rlbm_jax.env") / "data" / f"{name}.csv")


def ns3_args(c: Cell, seed: int) -> list[str]:
    kw = dict(c.kw)
    args = {"seconds": c.seconds, "seed": seed}
    for k, v in kw.items():
        if k in ("num_flow_slots", "queue_capacity_pkts", "pkts_per_tick"):
            continue  # shapes of our simulator only
        if k == "buffer_per_class_pkts":
            k = "class_cap_pkts"
        if k == "cdf":
            v = cdf_path(v)
        args[k] = v
    args.setdefault("cdf", cdf_path("websearch"))
    flat = []
    for k, v in args.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = int(v)
        flat.append(f"--{k}={v}")
    return flat


def write_schedule(c: Cell, seed: int, path: Path) -> int:
    """Writes the flows our simulator starts for (cell, seed) as ns-3's `--flows_in` CSV,
    so both simulators carry the same workload; returns the number of flows."""
    params = make_params(**c.kw)
    stop = min(float(params.arrival_stop_s), c.seconds)
    rate = float(traffic.arrival_rate_per_s(params))
    n = int(rate * stop * 1.5 + 10 * math.sqrt(rate * stop + 1) + 16)
    t, sender, size = _schedule(jax.random.PRNGKey(int(seed)), params, n)
    t, sender, size = np.asarray(t, np.float64), np.asarray(sender), np.asarray(size, np.float64)
    if t[-1] < stop:
        raise RuntimeError(f"flow schedule of {c.name} seed {seed} needs more than {n} flows")
    keep = t < stop
    with path.open("w") as f:
        f.write("start_s,sender,size_bytes\n")
        for a, b, d in zip(t[keep], sender[keep], size[keep]):
            f.write(f"{a:.9f},{int(b)},{d:.3f}\n")
    return int(keep.sum())


_schedule = jax.jit(sim.flow_schedule, static_argnums=2)


def _call_ns3(cmd: list[str]):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 run failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


@dataclasses.dataclass(frozen=True)
class Agent:
    """A policy that sets the rl buffer policy's alphas inside ns-3 (`lockstep.drive`):
    fn(obs [1, obs_dim]) -> [1, act_dim]; `digest` identifies it in the run cache."""
    fn: object
    digest: str
    obs_dim: int
    act_dim: int
    interval_s: float
    flows_scale: float

    def args(self) -> list[str]:
        return ["--agent=stdio", f"--agent_interval_s={float(self.interval_s)!r}",
                f"--flows_scale={float(self.flows_scale)!r}"]


def _run_one_ns3(binary: Path, c: Cell, seed: int, workdir: Path, extra: tuple, fresh: bool,
                 source_digest: bytes, agent: Agent | None = None) -> dict:
    """One ns-3 run; reuses an earlier result when the scenario source, the command line,
    the flow schedule and the agent are all unchanged (unless `fresh`).  With `agent`,
    the run's rl policy is driven by it in lock-step, and its per-interval log is kept."""
    stem = workdir / (f"{c.name.replace('/', '_')}_s{seed}" + (f"_{agent.digest[:10]}" if agent else ""))
    cmd = [str(binary), *ns3_args(c, seed), *extra, f"--out={stem}.json", f"--flows_out={stem}.flows.csv"]
    if agent is not None:
        cmd += [*agent.args(), f"--intervals_out={stem}.intervals.csv"]
    key = hashlib.sha256(source_digest)
    if agent is not None:  # the policy and the driver that answers for it
        key.update(agent.digest.encode())
        key.update(LOCKSTEP.read_bytes())
    if c.kind == "thesis":
        schedule = Path(f"{stem}.schedule.csv")
        write_schedule(c, seed, schedule)
        cmd.append(f"--flows_in={schedule}")
        key.update(schedule.read_bytes())
    key.update(" ".join(cmd[1:]).encode())
    key_file, out_json = Path(f"{stem}.key"), Path(f"{stem}.json")
    cached = not fresh and key_file.exists() and out_json.exists() and key_file.read_text() == key.hexdigest()
    if not cached:
        key_file.unlink(missing_ok=True)
        if agent is None:
            _call_ns3(cmd)
        else:
            decisions = lockstep.drive(cmd, agent.fn, agent.obs_dim, agent.act_dim)
            done = json.loads(out_json.read_text())["agent_intervals"]
            if decisions not in (done, done + 1):  # the last interval's end gets no decision
                raise RuntimeError(f"{stem}: {decisions} agent decisions for {done} intervals")
        key_file.write_text(key.hexdigest())
    rep = json.loads(out_json.read_text())
    flows = np.loadtxt(f"{stem}.flows.csv", delimiter=",", skiprows=1, ndmin=2).tolist() \
        if Path(f"{stem}.flows.csv").stat().st_size > 40 else []
    return {"rep": rep, "flows": flows, "cmd": " ".join(cmd[1:]).replace(str(ROOT) + os.sep, ""), "cached": cached}


def run_ns3(binary: Path, cells: list[Cell], seeds: list[int], jobs: int, workdir: Path,
            show_progress=True, extra: tuple = (), fresh: bool = False, agent: Agent | None = None,
            label: str = "ns-3 ") -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    tasks = [(c, s) for c in cells for s in seeds]
    res = {}
    bar = Progress(len(tasks), unit=" runs", label=label) if show_progress else None
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        digest = hashlib.sha256(SOURCE.read_bytes()).digest()  # the cache key covers the scenario source
        futs = {ex.submit(_run_one_ns3, binary, c, s, workdir, extra, fresh, digest, agent): (c.name, s)
                for c, s in tasks}
        for i, f in enumerate(cf.as_completed(futs)):
            res[futs[f]] = f.result()
            if bar:
                bar.update(i + 1)
    if bar:
        bar.close()
    out = {}
    for c in cells:
        runs = [res[(c.name, s)] for s in seeds]
        out[c.name] = {"seeds": [r["rep"] for r in runs], "flows": [r["flows"] for r in runs],
                       "hist": [r["rep"].get("queue_hist", []) for r in runs],
                       "wall_s": float(np.mean([r["rep"].get("wall_s", np.nan) for r in runs])),
                       "example_cmd": runs[0]["cmd"], "cached_runs": sum(r["cached"] for r in runs)}
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


def compare(cells: list[Cell], ours: dict, ns3: dict) -> list[dict]:
    rows = []
    for c in cells:
        for metric in (*TOLERANCES, *EXTRA_METRICS):
            if c.kind == "long" and metric in FLOW_METRICS:
                continue
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
        for m in TOLERANCES:
            e = next(x for x in rows if x["cell"] == c.name and x["metric"] == m)
            r[m] = e["rel_err"]
            r[m + "_within"] = e["within"]
        out.append(r)
    return out


def dial_plot(table, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(sorted((r for r in table if r["tcp"] == name), key=lambda r: r["pkts_per_tick"]), name, col)
              for name, col in (("newreno", "tab:blue"), ("cubic", "tab:red"))]
    fig, axes = plt.subplots(1, len(TOLERANCES) + 1, figsize=(3.3 * (len(TOLERANCES) + 1), 3.2))
    for ax, m in zip(axes, TOLERANCES):
        for rs, tcp_name, col in series:
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


def our_cwnd_trace(c: Cell, seed: int, interval_s: float):
    """cwnd and ssthresh (segments) of flow slot 0 every `interval_s`, against time since its start."""
    p = make_params(**c.kw)
    n = max(1, int(round(interval_s / float(p.tick_s))))
    steps = int(c.seconds / (n * float(p.tick_s)))

    def body(s, _):
        s = sim.run(s, p, n)[0]
        return s, (tcp.column(s.flows, "cwnd")[0], tcp.column(s.flows, "ssthresh")[0])

    state, (cwnd, ssthresh) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=steps))(
        sim.init(jax.random.PRNGKey(seed), p))
    t = (np.arange(1, steps + 1) * n * float(p.tick_s)) - float(tcp.column(state.flows, "start_s")[0])
    keep = t >= 0
    return t[keep], np.asarray(cwnd)[keep], np.asarray(ssthresh)[keep]


def ns3_cwnd_trace(binary: Path, c: Cell, seed: int, interval_s: float, workdir: Path):
    path = workdir / f"{c.name.replace('/', '_')}_s{seed}.cwnd.csv"
    cmd = [str(binary), *ns3_args(c, seed), f"--cwnd_out={path}", f"--trace_interval_s={interval_s}",
           f"--out={workdir / 'cwnd_trace_run.json'}"]
    _call_ns3(cmd)
    d = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return d[:, 0] - d[0, 0] + interval_s, d[:, 1], d[:, 2]


def cwnd_trace_plot(binary: Path, cells: list[Cell], out: Path, seed: int = 1, interval_s: float = 0.01):
    """cwnd of one long-lived flow, ours over ns-3's, per TRACE_CELLS cell present; writes
    cwnd_trace.png and cwnd_trace.csv."""
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
                                      ("ns-3.37", ns3_cwnd_trace(binary, c, seed, interval_s, out / "ns3_runs"),
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


def report(cells, rows, ours, ns3, seeds, args, path: Path, extra_lines=()):
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
    lines += ["", "Cells read `ours / ns-3 (relative error)`; ✗ marks a miss.", ""]
    speed_ours = np.mean([ours[c.name]["wall_s"] for c in cells])
    speed_ns3 = np.mean([ns3[c.name]["wall_s"] for c in cells])
    lines += [f"Wall time per cell: ours {speed_ours:.1f} s for {len(seeds)} seeds in one batch; "
              f"ns-3 {speed_ns3:.2f} s per seed (one process).", ""]
    lines += list(extra_lines)
    if miss:
        lines += ["## Misses and their causes", "",
                  "Causes are explained, with the experiments behind them, in calibration/REPORT.md.", ""]
        for r in miss:
            why = explain_miss(r['cell'], r['metric'])
            if r["metric"] == "slowdown_p99":
                timeout = float(make_params(**next(c for c in cells if c.name == r["cell"]).kw).syn_timeout_s)
                (a, n), (b, _) = syn_stalls(ours[r["cell"]]["flows"], timeout), syn_stalls(ns3[r["cell"]]["flows"], timeout)
                why += f"; here short flows stalled >= {0.95 * timeout:.2g} s: ours {a}, ns-3 {b}, of {n} flows"
            lines.append(f"- {r['cell']} {r['metric']}: ours {_fmt(r['ours'])}, ns-3 {_fmt(r['ns3'])} "
                         f"({r['rel_err']:+.0%}) - {why}")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


# Causes of known misses; calibration/REPORT.md shows the experiment behind each.
CAUSES = {
    "cubic-rto": "ns-3.37 CUBIC credits slow start with every segment a cumulative ACK covers, and its "
                 "go-back-N resends after spurious RTOs make such ACKs common; we do not resend "
                 "(REPORT section 1: the --ss_ack_cap_segs=1 ablation closes most of the gap)",
    "cubic-queue": "ns-3.37 CUBIC's byte-counted slow start after go-back-N resends drops twice as much "
                   "and keeps its queue lower; against the --ss_ack_cap_segs=1 ablation this queue "
                   "agrees (REPORT section 1)",
    "tail": "a run's p99 over 10-30 flows is its worst flow, often a short flow held 3 s by a lost "
            "SYN; such stalls are rare (about 0.5 % of flows) and their count per cell is a small "
            "Poisson number in both simulators (REPORT section 2)",
    "tick": "k packets per tick quantise RTTs and handshakes to whole ticks (REPORT section 4)",
    "overshoot": "one flow's first slow-start overshoot sets the whole run: ns-3 takes ssthresh from a "
                 "pipe that still counts the overshoot's undetected drops (and at 4 BDP its long recovery "
                 "then times out and cuts again); we take it from the segments known in flight "
                 "(REPORT section 3)",
    "rto-storm": "queueing delay of 4 BDP (320 ms) exceeds the 200 ms RTO floor: ns-3 times out "
                 "spuriously and resends the window, which we do not (REPORT sections 1 and 3)",
    "second-event": "ns-3 ends the first slow-start overshoot with a second congestion event (one "
                    "segment sent during its SACK recovery is dropped); CUBIC's fast convergence then "
                    "sets W_max below the BDP for the first 5 s epoch. Ours ends it in one event "
                    "(REPORT section 3)",
}

STALL_SIZE_BYTES = 100_000  # a "short" flow: under 0.1 s alone on the thesis link


def syn_stalls(flows_per_seed, syn_timeout_s: float = 3.0) -> tuple[int, int]:
    """(short flows delayed by at least ~one SYN timeout, all flows) over seeds; rows are
    LOG_FIELDS (size_bytes, cls, fct_s, slowdown, start_s) in both simulators."""
    stalled = total = 0
    for rows in flows_per_seed:
        a = np.asarray(rows, np.float64).reshape(-1, 5)
        extra = a[:, 2] - a[:, 2] / np.maximum(a[:, 3], 1e-12)  # FCT beyond the ideal
        stalled += int(np.sum((a[:, 0] < STALL_SIZE_BYTES) & (extra >= 0.95 * syn_timeout_s)))
        total += len(a)
    return stalled, total


def explain_miss(cell: str, metric: str) -> str:
    if cell.endswith(("/k4", "/k16")) and metric in ("slowdown_p50", "queue_mean_pkts"):
        return CAUSES["tick"]
    if cell.startswith("long/") and "/newreno/N1/" in cell:
        return CAUSES["overshoot"]
    if cell.startswith("long/cubic/N1/0.25bdp/rtt20ms"):
        return CAUSES["second-event"]
    if cell.startswith("long/") and cell.endswith("/4bdp/rtt80ms"):
        return CAUSES["rto-storm"]
    if metric == "drop_rate" and cell.startswith("thesis/cubic/"):
        return CAUSES["cubic-rto"]
    if metric == "queue_mean_pkts" and cell.startswith("thesis/cubic/"):
        return CAUSES["cubic-queue"]
    if metric == "slowdown_p99":
        return CAUSES["tail"]
    return "not yet explained (REPORT section 3)" if cell.startswith("long/") else "not yet explained"


def _fmt(x):
    if not np.isfinite(x):
        return "nan"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="smoke", choices=["thesis", "long", "smoke", "dial"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--out", default=None, help="results directory (default calibration/results/<grid>)")
    ap.add_argument("--report", default=None, help="markdown report (default <out>/REPORT.md)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--ns3-arg", action="append", default=[], metavar="--NAME=VALUE",
                    help="extra ns-3 scenario argument for every run (an ablation), repeatable")
    ap.add_argument("--fresh-ns3", action="store_true",
                    help="rerun every ns-3 run (by default a run whose source, command line and "
                         "flow schedule are unchanged is read back from --out)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    out = Path(args.out or ROOT / "calibration" / "results" / args.grid)
    out.mkdir(parents=True, exist_ok=True)
    cells = grid(args.grid)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    binary = build_ns3()
    t0 = time.perf_counter()
    bad = [a for a in args.ns3_arg if not a.startswith("--") or "=" not in a]
    if bad:
        ap.error(f"--ns3-arg takes --name=value, got {bad}")
    ns3 = run_ns3(binary, cells, seeds, args.jobs, out / "ns3_runs", show_progress=not args.no_progress,
                  extra=tuple(args.ns3_arg), fresh=args.fresh_ns3)
    t_ns3 = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = run_ours(cells, seeds, show_progress=not args.no_progress)
    t_ours = time.perf_counter() - t0
    rows = compare(cells, ours, ns3)
    write_errors(rows, out / "errors.csv")
    (out / "results.json").write_text(json.dumps(
        {"grid": args.grid, "seeds": seeds, "tolerances": TOLERANCES, "wall_s": {"ours": t_ours, "ns3": t_ns3},
         "cells": {c.name: {"kind": c.kind, "params": c.kw, "seconds": c.seconds,
                            "ours": ours[c.name]["seeds"], "ns3": [{k: v for k, v in r.items()
                                                                    if not k.startswith("queue_hist")}
                                                                   for r in ns3[c.name]["seeds"]],
                            "ns3_example_cmd": ns3[c.name]["example_cmd"]} for c in cells},
         "errors": rows}, indent=1, default=float) + "\n")
    plots(cells, ours, ns3, rows, out)
    extra = []
    if args.grid == "dial":
        table = dial_table(cells, rows, ours, ns3, seeds)
        dial_plot(table, out)
        write_errors(table, out / "dial.csv")
        extra += ["## Tick-size dial (`dial.png`, `dial.csv`)", "",
                  "| tcp | packets per tick | " + " | ".join(f"{m} err" for m in TOLERANCES)
                  + " | ours wall s (batch) | ours sim-s per wall-s | ns-3 wall s per run |",
                  "|---|---:|" + "---:|" * (len(TOLERANCES) + 3)]
        for r in sorted(table, key=lambda r: (r["tcp"], r["pkts_per_tick"])):
            extra.append(f"| {r['tcp']} | {r['pkts_per_tick']} | "
                         + " | ".join(f"{r[m]:+.1%}" + ("" if r[m + '_within'] else " ✗") for m in TOLERANCES)
                         + f" | {r['ours_wall_s']:.1f} | {r['ours_sim_s_per_wall_s']:.0f} "
                         f"| {r['ns3_wall_s_per_run']:.2f} |")
        extra.append("")
    if any(c.name in TRACE_CELLS for c in cells):
        cwnd_trace_plot(binary, cells, out)
        extra += ["cwnd of one long-lived flow, ours over ns-3's: `cwnd_trace.png` (data in `cwnd_trace.csv`).", ""]
    report(cells, rows, ours, ns3, seeds, args, Path(args.report or out / "REPORT.md"), extra)
    miss = [r for r in rows if r["within"] is False]
    print(f"{len(miss)} misses of {sum(r['within'] is not None for r in rows)} checked; "
          f"wall ns-3 {t_ns3:.0f} s, ours {t_ours:.0f} s; wrote {out}")
    for r in miss:
        print(f"  MISS {r['cell']} {r['metric']}: ours {r['ours']:.4g} ns-3 {r['ns3']:.4g} ({r['rel_err']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
