"""Retransmission timeouts, ours beside ns-3.37's: where in a flow's life the timer fires.

The Stalls section of a calibration report counts timeouts per run; this splits them, per
cell and over the grid's chosen cells, by

- the sender's state when the timer fired: OPEN, fast RECOVERY, LOSS (a timeout after a
  timeout), CWR, and ns-3's DISORDER (duplicate ACKs below the threshold; we have no such
  state, such a flow is OPEN here);
- the flow's size (< 100 KB, 100 KB - 1 MB, > 1 MB) and its window (cwnd <= 4 segments or
  more) at that moment;
- chains: timeouts of one flow less than `CHAIN_GAP_S` apart, by chain length;
- the short flows (< 100 KB) with a timeout, by the state of their first;

and it names what held each flow slowed more than 10x and 30x (the stall counts): a
timeout (by the state of the flow's first), else a lost SYN (its FCT beyond the ideal at
least 0.95 of `syn_timeout_s`), else neither (queueing alone).

ns-3 writes every timeout with the flow and its state (the scenario's `--rto_out`, from
the congestion-ops object's CA_EVENT_LOSS); ours are read inside the tick
(`sim.tick_phases`, the event flows whose timer fired), into a fixed buffer per run whose
overflow is counted and refused, never dropped.  Both sides run the same flow schedule, so
each seed is paired; per-flow comparisons still mean little once the runs' queues have
diverged, so the tables are counts per run over many seeds.

    python calibration/timeouts.py --cells . --seeds 30          # the thesis grid: results/timeouts-thesis
    python calibration/timeouts.py --grid aqm --cells 'red/ecn/cubic/websearch' --seeds 10 --out <folder>
"""
from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as cal  # noqa: E402  (calibration/run.py: grids, cells, --set)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from rlbm_jax.cli import add_model_args, model_kw  # noqa: E402
from rlbm_jax.env import sim  # noqa: E402
from rlbm_jax.env.params import make_params, pad_params, stack_params  # noqa: E402
from rlbm_jax.env.tcp.variant import CWR, LOSS, OPEN, RECOVERY  # noqa: E402
from rlbm_jax.ns3.harness import build_ns3, run_ns3, seed_kw  # noqa: E402

STATES = ("OPEN", "DISORDER", "RECOVERY", "LOSS", "CWR")
OURS_STATE = {OPEN: "OPEN", RECOVERY: "RECOVERY", LOSS: "LOSS", CWR: "CWR"}
NS3_STATE = {0: "OPEN", 1: "DISORDER", 2: "CWR", 3: "RECOVERY", 4: "LOSS"}  # TcpSocketState::TcpCongState_t
SIZES = (("< 100 KB", 1e5), ("100 KB - 1 MB", 1e6), ("> 1 MB", float("inf")))
SMALL_CWND_PKTS = 4.0  # "cwnd <= 4": a window too small for three duplicate ACKs after a loss
CHAIN_GAP_S = 1.0  # timeouts of one flow closer than this belong to one chain
CHAINS = (("1", 1, 1), ("2", 2, 2), ("3-9", 3, 9), ("10+", 10, 10 ** 9))
FIELDS = ("time_s", "flow_start_s", "size_bytes", "cwnd_pkts", "state")
SLOW_FACTORS = cal.stalls.SLOW_FACTORS  # the stall counts' "slowed more than Fx"
SYN_HELD = cal.SYN_HELD  # the calibration report's rule for a flow held by a lost SYN
HELD_BY = tuple(f"a timeout in {s}" for s in STATES) + ("a lost SYN", "neither")


@dataclasses.dataclass(frozen=True)
class Timeout:
    seed: int
    time_s: float
    flow_start_s: float
    size_bytes: float
    cwnd_pkts: float
    state: str  # one of STATES


def ours(c: cal.Cell, seeds: list[int], capacity: int = 8192) -> tuple[list[Timeout], list]:
    """Every timeout of our runs of `c` (all seeds in one vmapped batch), and each run's
    finished flows (LOG_FIELDS rows).  Each run writes its timeouts into a buffer of
    `capacity` rows; a run with more is refused (with its count) rather than cut short, as
    is one whose completion log overflowed."""
    ps = pad_params([make_params(**seed_kw(c, s)) for s in seeds])
    batch = stack_params(ps)
    n_ticks = sim.ticks_for(c.seconds, ps[0])

    def one(key, p):
        def body(carry, _):
            s, buf, n = carry
            s2, ph = sim.tick_phases(s, p)
            f, fired = ph.ev.flows, ph.fired
            row = jnp.stack([jnp.broadcast_to(ph.clk.now_s, fired.shape).astype(jnp.float32), f.start_s, f.size_bytes,
                             f.cwnd, f.state.astype(jnp.float32)], axis=1)  # [E, FIELDS]
            at = n + jnp.cumsum(fired) - 1
            buf = buf.at[jnp.where(fired & (at < capacity), at, capacity)].set(row, mode="drop")
            return (s2, buf, n + jnp.sum(fired, dtype=jnp.int32)), None

        s0 = sim.init(key, p)
        buf0 = jnp.zeros((capacity, len(FIELDS)), jnp.float32)
        (s, buf, n), _ = jax.lax.scan(body, (s0, buf0, jnp.int32(0)), None, length=n_ticks)
        return buf, n, s.metrics.rto_total, s.metrics.log, s.metrics.log_count

    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    buf, n, total, log, log_n = map(np.asarray, jax.jit(jax.vmap(one))(keys, batch))
    over = [s for i, s in enumerate(seeds) if log_n[i] > log.shape[1]]
    if over:
        raise RuntimeError(f"{c.name} seeds {over}: more finished flows than the completion log holds "
                           f"({log.shape[1]}; raise completion_log_size)")
    return collect(c.name, seeds, buf, n, total), [log[i, :log_n[i]].tolist() for i in range(len(seeds))]


def collect(name: str, seeds: list[int], buf, n, total) -> list[Timeout]:
    """Each run's buffer rows [seeds, capacity, FIELDS] as Timeouts: a run that fired more
    timers than its buffer holds (n > capacity), or other than its metrics counted (total),
    is refused, never cut short."""
    capacity = buf.shape[1]
    out = []
    for i, s in enumerate(seeds):
        if n[i] > capacity:
            raise RuntimeError(f"{name} seed {s}: {int(n[i])} timeouts, more than the buffer's {capacity} "
                               f"(raise --capacity)")
        if n[i] != total[i]:  # every timer that fired is one the metrics counted
            raise RuntimeError(f"{name} seed {s}: recorded {int(n[i])} timeouts, the metrics count {int(total[i])}")
        out += [Timeout(s, float(r[0]), float(r[1]), float(r[2]), float(r[3]), OURS_STATE[int(r[4])])
                for r in buf[i, :n[i]]]
    return out


def read_ns3(path: Path, seed: int, rto_count: int | None = None) -> list[Timeout]:
    """ns-3's `--rto_out` CSV as Timeouts.  The scenario leaves out a timeout it cannot tie
    to a flow; with the run's `rto_count`, such a gap is refused."""
    with Path(path).open() as f:
        rows = [Timeout(seed, float(r["time_s"]), float(r["flow_start_s"]), float(r["size_bytes"]),
                        float(r["cwnd_pkts"]), NS3_STATE[int(r["cong_state"])]) for r in csv.DictReader(f)]
    if rto_count is not None and len(rows) != rto_count:
        raise RuntimeError(f"{path}: {len(rows)} timeouts listed, the run counted {rto_count}")
    return rows


def ns3(binary: Path, c: cal.Cell, seeds: list[int], jobs: int, workdir: Path, show_progress=True,
        extra: tuple = ()) -> tuple[list[Timeout], list]:
    """Every timeout of ns-3's runs of `c` (`harness.run_ns3` with `--rto_out`: a run is
    reused while its source, command line and flow schedule are unchanged), and each run's
    finished flows; `extra`: more scenario arguments (an ns-3 ablation)."""
    got = run_ns3(binary, [c], seeds, jobs, workdir, show_progress=show_progress, rtos=True, extra=tuple(extra),
                  label=f"ns-3 {c.name} ")[c.name]
    events = [e for s, rep, path in zip(seeds, got["seeds"], got["rto_csv"])
              for e in read_ns3(path, s, int(rep["rto_count"]))]
    return events, got["flows"]


def size_bucket(size_bytes: float) -> str:
    return next(name for name, top in SIZES if size_bytes < top)


def chains(events: list[Timeout]) -> collections.Counter:
    """Chain lengths: the timeouts of one flow (seed and start time) split wherever two in a
    row are `CHAIN_GAP_S` or more apart."""
    by_flow = collections.defaultdict(list)
    for e in events:
        by_flow[(e.seed, round(e.flow_start_s, 4), e.size_bytes)].append(e.time_s)
    out = collections.Counter()
    for times in by_flow.values():
        times.sort()
        run = 1
        for a, b in zip(times, times[1:]):
            if b - a < CHAIN_GAP_S:
                run += 1
            else:
                out[run] += 1
                run = 1
        out[run] += 1
    return out


def _flow(seed, start_s: float, size_bytes: float) -> tuple:
    """One flow's key in both simulators' records (seed, start to the ms, size)."""
    return seed, round(float(start_s), 3), int(round(float(size_bytes)))


def first_states(events: list[Timeout]) -> dict:
    """{flow key: the sender's state at the flow's first timeout}."""
    out = {}
    for e in sorted(events, key=lambda e: e.time_s):
        out.setdefault(_flow(e.seed, e.flow_start_s, e.size_bytes), e.state)
    return out


def held_by(flows_per_seed, seeds, events: list[Timeout], syn_timeout_s: float, factors=SLOW_FACTORS) -> dict:
    """{factor: {cause: flows}}: each finished flow slowed more than a factor (LOG_FIELDS
    rows per seed, paired with `seeds`) by what held it: a timeout (by the state of the
    flow's first), else a lost SYN (FCT beyond the ideal >= SYN_HELD x `syn_timeout_s`),
    else neither.  Counts over the runs; flows from t = 0 (the thesis grid has no warm-up)."""
    first = first_states(events)
    out = {f: collections.Counter({k: 0 for k in HELD_BY}) for f in factors}
    for seed, rows in zip(seeds, flows_per_seed):
        for size, _cls, fct, slow, start in rows:
            st = first.get(_flow(seed, start, size))
            cause = f"a timeout in {st}" if st else \
                ("a lost SYN" if fct - fct / max(slow, 1e-12) >= SYN_HELD * syn_timeout_s else "neither")
            for f in factors:
                if slow > f:
                    out[f][cause] += 1
    return {f"{f:g}x": dict(c) for f, c in out.items()}


def summary(events: list[Timeout], runs: int) -> dict:
    """Timeouts per run by state, by size and window, by chain length; flows with one;
    short flows with one by the state of their first."""
    per = lambda n: n / runs
    by_state = collections.Counter(e.state for e in events)
    short_first = collections.Counter(st for (_, _, size), st in first_states(events).items() if size < SIZES[0][1])
    by_kind = collections.Counter((size_bucket(e.size_bytes), e.cwnd_pkts <= SMALL_CWND_PKTS) for e in events)
    ch = chains(events)
    return {
        "per_run": per(len(events)),
        "flows_per_run": per(sum(ch.values())),
        "state": {s: per(by_state[s]) for s in STATES},
        "size_window": {f"{b}, cwnd {'<=' if small else '>'} {SMALL_CWND_PKTS:g}": per(by_kind[(b, small)])
                        for b, _ in SIZES for small in (True, False)},
        "chains": {name: per(sum(n for k, n in ch.items() if lo <= k <= hi)) for name, lo, hi in CHAINS},
        "in_chains": {name: per(sum(k * n for k, n in ch.items() if lo <= k <= hi)) for name, lo, hi in CHAINS},
        "short_flows_first": {s: per(short_first[s]) for s in STATES},
    }


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "–" if a == 0 else "inf"
    return f"{a / b:.2f}"


def table(ours_s: dict, ns3_s: dict) -> list[str]:
    """Markdown rows: each category, ours and ns-3's per run, ours over ns-3's."""
    lines = ["| timeouts per run | ours | ns-3 | ours / ns-3 |", "|---|---:|---:|---:|"]
    row = lambda label, a, b: lines.append(f"| {label} | {a:.2f} | {b:.2f} | {_ratio(a, b)} |")
    row("all", ours_s["per_run"], ns3_s["per_run"])
    row("flows with one", ours_s["flows_per_run"], ns3_s["flows_per_run"])
    for s in STATES:
        row(f"in {s}", ours_s["state"][s], ns3_s["state"][s])
    for k in ours_s["size_window"]:
        row(k, ours_s["size_window"][k], ns3_s["size_window"][k])
    for k in ours_s["in_chains"]:
        row(f"in chains of {k} (chains: {ours_s['chains'][k]:.2f} / {ns3_s['chains'][k]:.2f})",
            ours_s["in_chains"][k], ns3_s["in_chains"][k])
    for st in STATES:
        row(f"short flows whose first is in {st}", ours_s["short_flows_first"][st], ns3_s["short_flows_first"][st])
    return lines


def held_table(ours_h: dict, ns3_h: dict) -> list[str]:
    """Markdown rows: the flows slowed more than each factor, by what held them, ours and ns-3's."""
    fs = list(ours_h)
    lines = ["| flows slowed more than ... held by | " + " | ".join(f"> {f}: ours | ns-3" for f in fs) + " |",
             "|---|" + "---:|---:|" * len(fs)]
    for k in (*HELD_BY, "all"):
        cell = lambda h, f: sum(h[f].values()) if k == "all" else h[f][k]
        lines.append(f"| {k} | " + " | ".join(f"{cell(ours_h, f)} | {cell(ns3_h, f)}" for f in fs) + " |")
    return lines


def plot(results: dict, total: dict, path: Path):
    """Timeouts per run by state, ours beside ns-3's: the chosen cells together, then each cell."""
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("all chosen cells", total)] + list(results.items())
    ncol = min(len(panels), 5)
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.0 * ncol, 2.6 * nrow), squeeze=False)
    x = np.arange(len(STATES))
    for ax, (name, r) in zip(axes.ravel(), panels):
        o, n = r["ours"]["state"], r["ns3"]["state"]
        ax.bar(x - 0.2, [o[s] for s in STATES], 0.4, label="ours")
        ax.bar(x + 0.2, [n[s] for s in STATES], 0.4, label="ns-3")
        ax.set_xticks(x, STATES, rotation=30, fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(name, fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("timeouts per run", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Retransmission timeouts by the sender's state when the timer fired", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default="thesis", choices=list(cal.GRIDS))
    ap.add_argument("--cells", required=True, help="regular expression over the grid's cell names")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="ns-3 processes at a time")
    ap.add_argument("--capacity", type=int, default=8192, help="our timeouts a run may record")
    ap.add_argument("--out", default=None, help="folder for REPORT.md, timeouts.png, timeouts.json and the ns-3 "
                                                "runs (default calibration/results/timeouts-<grid>)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a make_params argument for every chosen cell, in both simulators (as calibration/run.py's)")
    ap.add_argument("--ns3-arg", action="append", default=[], metavar="--NAME=VALUE",
                    help="extra ns-3 scenario argument for every run (an ablation, as calibration/run.py's), repeatable")
    add_model_args(ap)
    args = ap.parse_args(argv)
    bad = [a for a in args.ns3_arg if not a.startswith("--") or "=" not in a]
    if bad:
        ap.error(f"--ns3-arg takes --name=value, got {bad}")
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.jobs < 1 or args.capacity < 1:
        ap.error("--jobs and --capacity must be >= 1")
    try:
        pattern = re.compile(args.cells)
    except re.error as e:
        ap.error(f"--cells: {e}")
    cells = [c for c in cal.grid(args.grid) if pattern.search(c.name) and c.kind == "thesis"]
    if not cells:
        ap.error(f"--cells {args.cells!r} matches none of grid {args.grid!r}'s flow cells")
    sets = cal.parse_sets(args.set, ap)
    model = model_kw(args)  # our side only (ns-3 runs ns-3.37's own rules)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"timeouts-{args.grid}"
    out.mkdir(parents=True, exist_ok=True)
    binary = build_ns3()
    results, all_ours, all_ns3 = {}, [], []
    held_total = {"ours": {}, "ns3": {}}
    for c in cells:
        c_ns3 = dataclasses.replace(c, kw={**c.kw, **sets})
        c_ours = dataclasses.replace(c_ns3, kw={**c_ns3.kw, **model})
        syn_s = float(make_params(**seed_kw(c_ns3, seeds[0])).syn_timeout_s)
        o, o_flows = ours(c_ours, seeds, args.capacity)
        n, n_flows = ns3(binary, c_ns3, seeds, args.jobs, out / "ns3_runs", not args.no_progress, args.ns3_arg)
        all_ours += [dataclasses.replace(e, seed=(c.name, e.seed)) for e in o]
        all_ns3 += [dataclasses.replace(e, seed=(c.name, e.seed)) for e in n]
        held = {"ours": held_by(o_flows, seeds, o, syn_s), "ns3": held_by(n_flows, seeds, n, syn_s)}
        for side, h in held.items():
            for f, counts in h.items():
                tot = held_total[side].setdefault(f, {k: 0 for k in HELD_BY})
                for k, v in counts.items():
                    tot[k] += v
        results[c.name] = {"ours": summary(o, len(seeds)), "ns3": summary(n, len(seeds)), "held_by": held}
    runs = len(seeds) * len(cells)
    total = {"ours": summary(all_ours, runs), "ns3": summary(all_ns3, runs), "held_by": held_total}
    cmd = "python calibration/timeouts.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# Timeouts by where they fire: ours and ns-3.37 (grid `{args.grid}`)", "", f"Command: `{cmd}`", "",
             f"{len(cells)} cell(s) x {len(seeds)} seeds (seeds {seeds[0]}..{seeds[-1]}), same flow schedules; "
             f"counts per run. Chains: timeouts of one flow less than {CHAIN_GAP_S:g} s apart. "
             + (f"Our model: {model}. " if model else "") + (f"Both: {sets}. " if sets else "")
             + (f"ns-3 with {' '.join(args.ns3_arg)}." if args.ns3_arg else ""), "",
             f"## All {len(cells)} cell(s)", "", *table(total["ours"], total["ns3"]), "",
             "Flows slowed more than 10x and 30x (summed over the runs, as the stall counts), by what held "
             "them: a timeout, by the state of the flow's first; else a lost SYN (FCT beyond the ideal at least "
             f"{SYN_HELD:g} of the SYN timeout); else neither (queueing).", "",
             *held_table(held_total["ours"], held_total["ns3"]), "",
             "![timeouts per run by the sender's state, per cell](timeouts.png)", ""]
    for name, r in results.items():
        lines += [f"## {name}", "", *table(r["ours"], r["ns3"]), "",
                  *held_table(r["held_by"]["ours"], r["held_by"]["ns3"]), ""]
    (out / "REPORT.md").write_text("\n".join(lines))
    (out / "timeouts.json").write_text(json.dumps({"grid": args.grid, "cells_regex": args.cells, "seeds": seeds,
                                                    "capacity": args.capacity, "jobs": args.jobs, "model": model,
                                                    "set": sets, "ns3_args": args.ns3_arg, "cells": results,
                                                    "total": total}, indent=1))
    plot(results, total, out / "timeouts.png")
    print("\n".join(lines[:next(i for i, ln in enumerate(lines) if ln.startswith("![timeouts"))]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
