"""What one AQM decision costs a lone long-lived flow, in rlbm_jax and in ns-3.37.

The `aqm` grid's one-flow cells (one CUBIC flow at 1 BDP, 100 Mbit/s, 20 ms) hold one to
three AQM decisions per measured 10 s, so their utilisation and mean queue turn on when
those decisions fall and on what each one costs.  This experiment traces the flow's cwnd
and ssthresh every 10 ms in both simulators (same cells, same seeds as the grid), finds
every window reduction (a change of ssthresh), and per reduction measures the window
before it, the window it falls to, and how long the window then stays below the BDP (the
link idles for part of that time).  Writes one_flow.csv (one row per reduction),
one_flow_runs.csv (one row per run) and one_flow.png (the traces), and prints a summary.

    python calibration/one_flow.py --policies red ared pie --seeds 3
    python calibration/one_flow.py --zoom pie 1 1.5 1.54     # one reduction, per 0.5 ms

What it found (calibration/REPORT.md, section 6): ns-3.37's sender goes silent after a
loss until its flight is down to ssthresh, because TcpPrrRecovery multiplies delivered
bytes by ssthresh bytes in 32 unsigned bits, which wrap; `prr="ns-3.37"` models that.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as cal  # noqa: E402  (calibration/run.py: cells, ns-3 build and runs)

from rlbm_jax.env.params import PRR_NAMES, make_params  # noqa: E402

WARMUP_S, END_S = 5.0, 15.0  # the grid's measured window (absolute simulation time)


def _events(ssthresh):
    """Indices of the samples at which ssthresh changed (a window reduction)."""
    ch = np.flatnonzero(np.diff(ssthresh) != 0) + 1
    return [i for i in ch if ssthresh[i] < ssthresh[i - 1] or ssthresh[i - 1] > 1e6]


def analyse(t, cwnd, ssthresh, bdp, sim_name, cell, seed):
    """Per-reduction rows and the run's row (times absolute, in seconds)."""
    rows = []
    ev = _events(ssthresh)
    for j, i in enumerate(ev):
        before = float(np.max(cwnd[max(0, i - 20):i + 1]))
        nxt = ev[j + 1] if j + 1 < len(ev) else len(t)
        after = float(np.min(cwnd[i:nxt]))
        below = np.flatnonzero(cwnd[i:nxt] >= bdp)
        back_s = float(t[i + below[0]] - t[i]) if below.size else float("nan")
        rows.append({"simulator": sim_name, "cell": cell, "seed": seed, "time_s": round(float(t[i]), 3),
                     "cwnd_before_pkts": before, "ssthresh_pkts": float(ssthresh[i]), "cwnd_min_pkts": after,
                     "below_bdp_s": back_s})
    win = (t >= WARMUP_S) & (t < END_S)
    run = {"simulator": sim_name, "cell": cell, "seed": seed,
           "reductions_in_window": sum(1 for i in ev if WARMUP_S <= t[i] < END_S),
           "first_reduction_s": round(float(t[ev[0]]), 3) if ev else float("nan"),
           "window_util_proxy": float(np.mean(np.minimum(cwnd[win] / bdp, 1.0))),
           "cwnd_mean_pkts": float(np.mean(cwnd[win])), "time_below_bdp_frac": float(np.mean(cwnd[win] < bdp))}
    return rows, run


def ours_trace(c, seed, interval_s, prr="exact"):
    """cwnd and ssthresh at absolute times, and the run's own utilisation and mean queue."""
    from rlbm_jax.env import metrics as mx

    t, cwnd, ssthresh, _, state, p = cal.our_flow_trace(c, seed, interval_s, prr=prr)
    rep = mx.summarize(state.metrics, p)
    return t, cwnd, ssthresh, float(rep["util_wire"]), float(rep["queue_mean_pkts"])


def ns3_trace(binary, c, seed, interval_s, workdir: Path):
    t, cwnd, ssthresh, rep, _ = cal.ns3_flow_trace(binary, c, seed, interval_s, workdir)
    return t, cwnd, ssthresh, float(rep["util_wire"]), float(rep["queue_mean_pkts"])


def zoom(binary, c, seed, t0, t1, prrs, workdir: Path, step_s=0.0005):
    """Packets the flow hands to the bottleneck queue per `step_s` from its first window
    reduction after t0, for t1 - t0 seconds, with its cwnd and ssthresh: ns-3 from its
    interval record (agent intervals of step_s, no agent); ours per PRR choice."""
    t, w, ss, _, _ = cal.ns3_flow_trace(binary, c, seed, step_s, workdir, f"--agent_interval_s={step_s}",
                                        f"--intervals_out={workdir / 'zoom'}.iv.csv")
    iv = np.genfromtxt(f"{workdir / 'zoom'}.iv.csv", delimiter=",", names=True)
    cols = {"ns-3.37": (iv["t_end_s"], iv["arrivals_pkts_c0"], np.interp(iv["t_end_s"], t, w),
                        np.interp(iv["t_end_s"], t, ss))}
    for prr in prrs:
        t, w, ss, sent, _, _ = cal.our_flow_trace(c, seed, step_s, prr=prr)
        cols[f"ours prr={prr}"] = (t, sent, w, ss)
    for name, (t, sent, w, ss) in cols.items():
        cut = np.flatnonzero((t >= t0) & (np.diff(ss, prepend=ss[0]) < 0))  # each simulator's own next reduction
        start = t[cut[0]] - 2 * step_s if cut.size else t0
        keep = (t >= start) & (t <= start + (t1 - t0))
        print(f"\n{name}: time_s, packets into the queue in the last {step_s * 1e3:g} ms, cwnd, ssthresh "
              f"(from its first reduction after {t0:g} s)")
        for a, b, x, y in zip(t[keep], sent[keep], w[keep], ss[keep]):
            print(f"  {a:.4f} {int(b):3d} {x:7.1f} {y:9.1f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", default=["red", "ared", "pie"])
    ap.add_argument("--ecn", action="store_true", help="the ECN twins of the cells")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--prr", nargs="+", default=list(PRR_NAMES), choices=PRR_NAMES,
                    help="our PRR send counts to run (params.PRR_NAMES), each against the same ns-3 runs")
    ap.add_argument("--interval-s", type=float, default=0.01)
    ap.add_argument("--out", default=str(cal.ROOT / "calibration" / "results" / "aqm" / "one_flow"))
    ap.add_argument("--zoom", nargs=4, metavar=("POLICY", "SEED", "T0", "T1"), default=None,
                    help="instead: what the flow sends per 0.5 ms over T1 - T0 s from its first window reduction after T0 "
                         "s, in each simulator")
    args = ap.parse_args(argv)
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    binary = cal.build_ns3()
    if args.zoom:
        pol, seed, t0, t1 = args.zoom
        zoom(binary, cal.aqm_cell(pol, args.ecn, "long1", 1.0), int(seed), float(t0), float(t1), args.prr, out / "runs")
        return
    cells = [cal.aqm_cell(q, args.ecn, "long1", 1.0) for q in args.policies]
    ev_rows, run_rows, traces = [], [], {}
    for c in cells:
        bdp = float(make_params(**c.kw).bdp_pkts)
        for seed in range(1, args.seeds + 1):
            runs = [(f"ours prr={prr}", lambda prr=prr: ours_trace(c, seed, args.interval_s, prr)) for prr in args.prr]
            runs.append(("ns-3.37", lambda: ns3_trace(binary, c, seed, args.interval_s, out / "runs")))
            for name, fn in runs:
                t, w, ss, util, q = fn()
                ev, run = analyse(t, w, ss, bdp, name, c.name, seed)
                run.update(util_wire=util, queue_mean_pkts=q)
                ev_rows += ev
                run_rows.append(run)
                traces[(c.name, seed, name)] = (t, w)
                print(f"{c.name} s{seed} {name:16s}: util {util:.3f} (proxy {run['window_util_proxy']:.3f}) queue "
                      f"{q:6.1f}  reductions in window {run['reductions_in_window']}  "
                      + "  ".join(f"[{e['time_s']:.2f}s {e['cwnd_before_pkts']:.0f}->{e['ssthresh_pkts']:.0f} "
                                  f"min {e['cwnd_min_pkts']:.0f} below BDP {e['below_bdp_s']:.2f}s]" for e in ev),
                      flush=True)
    for fname, rows in (("one_flow.csv", ev_rows), ("one_flow_runs.csv", run_rows)):
        with (out / fname).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    sims = [f"ours prr={prr}" for prr in args.prr] + ["ns-3.37"]
    print("\nper reduction, mean over every run (" + " / ".join(sims) + "):")
    for c in cells:
        for key in ("cwnd_before_pkts", "ssthresh_pkts", "cwnd_min_pkts", "below_bdp_s"):
            vals = [np.nanmean([e[key] for e in ev_rows if e["cell"] == c.name and e["simulator"] == s] or [np.nan])
                    for s in sims]
            print(f"  {c.name} {key}: " + " / ".join(f"{v:.2f}" for v in vals))
    print("\nper cell, seed means (" + " / ".join(sims) + "):")
    for c in cells:
        for key in ("util_wire", "queue_mean_pkts", "reductions_in_window"):
            vals = [np.mean([r[key] for r in run_rows if r["cell"] == c.name and r["simulator"] == s]) for s in sims]
            print(f"  {c.name} {key}: " + " / ".join(f"{v:.3f}" for v in vals))
    _plot(cells, args.seeds, traces, sims, out / "one_flow.png")


def _plot(cells, seeds, traces, sims, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(cells), seeds, figsize=(4.2 * seeds, 2.6 * len(cells)), squeeze=False)
    for r, c in enumerate(cells):
        bdp = float(make_params(**c.kw).bdp_pkts)
        for s in range(seeds):
            ax = axes[r, s]
            for i, name in enumerate(sims):
                col = "tab:orange" if name == "ns-3.37" else ("tab:blue", "tab:green")[i]
                t, w = traces[(c.name, s + 1, name)]
                ax.plot(t, w, color=col, lw=0.8, label=name)
            ax.axhline(bdp, color="0.4", lw=0.6, ls="--", label="BDP")
            ax.axvspan(WARMUP_S, END_S, color="0.93", zorder=0)
            ax.set_title(f"{c.name} seed {s + 1}", fontsize=8)
            ax.set_ylim(0, None)
    axes[0, 0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("time, s (grey: measured window)")
    for ax in axes[:, 0]:
        ax.set_ylabel("cwnd, packets")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
