"""Tune an AQM by gradient descent through the fluid model, and judge it on the packet
simulator against a grid search run on the packet simulator itself.

    python scripts/tune_aqm.py --knob red --long-flows 8 16 32 --out results/tune_aqm/red

1. Adam on the knob's parameters (`--knob red`: RED's min_th, max_th and max_p; `buffer`:
   a drop-tail buffer's size) through fluid rollouts of every cell (long flows through
   `--buffer-bdp` x BDP, one cell per `--long-flows` value), maximising the mean objective
   (`--objective power`: utilisation / (1 + queueing delay / base RTT)); the gradient is
   truncated every `--grad-horizon-s` (fluid.advance).  The iterate with the best fluid
   objective is the result.
2. The knob's grid (`--grid AXIS=V,V,...` replaces an axis) on the packet simulator over
   the tuning seeds; the best mean objective is its result.
3. The starting point, the grid's best and the fluid-tuned point on the packet simulator
   over held-out seeds (disjoint from the tuning seeds, fixed here before any run):
   objective, utilisation, queue and drops per cell, and the paired difference tuned - grid
   with its standard error over seeds.  Beats: above by more than 2 s.e.; ties: within
   2 s.e.; loses: below by more.

Writes summary.md (the verdict, both wall times, the tables), results.json (everything,
the fluid path and the grid included), tuning.png (the fluid path; the grid's packet
objective with the tuned point's), command.txt and config.json (`run_config`, which
--print-config prints).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from rlbm_jax import jsonio, tune
from rlbm_jax.cli import add_backend_arg, add_param_args, apply_backend, fail, param_kw, parser, printed_config
from rlbm_jax.env import backends
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.evaluate import paired_diff
from rlbm_jax.progress import Progress

PROG = "tune_aqm.py"
TUNE_FIRST_SEED, TEST_FIRST_SEED = 10_000, 20_000  # the grid's seeds, then the held-out seeds: disjoint
SCENARIO_PARAMS = ("tcp", "bottleneck_rate_bps", "bottleneck_delay_s", "ecn")


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--knob", choices=list(tune.KNOBS), default="red",
                    help="what is tuned: " + "; ".join(f"{k}: {v.text}" for k, v in tune.KNOBS.items()))
    ap.add_argument("--objective", choices=list(tune.OBJECTIVES), default="power",
                    help="to maximise: " + "; ".join(f"{k}: {v}" for k, v in tune.OBJECTIVE_TEXT.items()))
    ap.add_argument("--delay-weight", type=float, default=1.0, help="the util-delay objective's weight")
    ap.add_argument("--long-flows", type=int, nargs="+", default=[8, 16, 32],
                    help="one cell per flow count; the objective is their mean")
    ap.add_argument("--buffer-bdp", type=float, default=1.0, help="the cells' buffer in BDPs (RED's buffer; the "
                                                                  "buffer knob's starting point)")
    ap.add_argument("--seconds", type=float, default=10.0, help="simulated time of every run (fluid and packet)")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="left out of every run's averages")
    ap.add_argument("--steps", type=int, default=60, help="Adam steps through the fluid model")
    ap.add_argument("--lr", type=float, default=0.2, help="Adam's learning rate (on the knob's logits)")
    ap.add_argument("--grad-horizon-s", type=float, default=1.0,
                    help="truncate the fluid gradient every this many simulated seconds (0: the exact gradient)")
    ap.add_argument("--grid", action="append", default=[], metavar="AXIS=V,V,...",
                    help="replace one axis of the knob's grid (red: min_th_frac, max_th_frac (of B - min_th), "
                         "max_p; buffer: buffer_bdp); repeatable")
    ap.add_argument("--tune-seeds", type=int, default=2, help=f"packet seeds of the grid search (from {TUNE_FIRST_SEED})")
    ap.add_argument("--test-seeds", type=int, default=8, help=f"held-out packet seeds of the final scoring (from "
                                                             f"{TEST_FIRST_SEED})")
    ap.add_argument("--out", default="results/tune_aqm", help="output directory")
    ap.add_argument("--no-plot", action="store_true", help="do not draw tuning.png")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_param_args(ap, SCENARIO_PARAMS, title="the cells (unset: the long-flow scenario's value)")
    add_backend_arg(ap)
    return ap


def _axes(a, knob) -> dict:
    axes = {k: tuple(v) for k, v in knob.axes.items()}
    for item in a.grid:
        name, sep, vals = item.partition("=")
        if not sep or name not in axes:
            raise ValueError(f"--grid {item!r}: give AXIS=V,V,... with AXIS one of {', '.join(axes)}")
        try:
            axes[name] = tuple(float(v) for v in vals.split(","))
        except ValueError:
            raise ValueError(f"--grid {item!r}: the values must be numbers") from None
        if not axes[name]:
            raise ValueError(f"--grid {item!r}: no values")
    return axes


def plan(a) -> tuple[dict, list, list]:
    """(run_config(a), the cells' make_params keywords, the grid's points); a ValueError
    names a bad option."""
    knob = tune.KNOBS[a.knob]
    for flag, v, ok in (("--seconds", a.seconds, a.seconds > a.warmup_s >= 0), ("--steps", a.steps, a.steps >= 0),
                        ("--lr", a.lr, a.lr > 0), ("--grad-horizon-s", a.grad_horizon_s, a.grad_horizon_s >= 0),
                        ("--tune-seeds", a.tune_seeds, a.tune_seeds >= 1),
                        ("--test-seeds", a.test_seeds, a.test_seeds >= 2),
                        ("--long-flows", a.long_flows, all(n >= 1 for n in a.long_flows)),
                        ("--buffer-bdp", a.buffer_bdp, a.buffer_bdp > 0)):
        if not ok:
            raise ValueError(f"{flag} {v}: out of range (--seconds above --warmup-s >= 0, --steps >= 0, --lr > 0, "
                             "--grad-horizon-s >= 0, --tune-seeds >= 1, --test-seeds >= 2, flows >= 1, --buffer-bdp > 0)")
    kws = tune.cells(knob, a.long_flows, a.buffer_bdp, a.warmup_s, **param_kw(a, SCENARIO_PARAMS))
    plist = [make_params(**kw) for kw in kws]
    from rlbm_jax.env.backends import fluid

    for p in plist:  # what the fluid model cannot run is refused by name, before any run
        fluid.check(p)
    axes = _axes(a, knob)
    points = knob.grid(plist[0], axes)
    config = {
        "knob": knob.name, "knob_text": knob.text, "objective": a.objective,
        "objective_text": tune.OBJECTIVE_TEXT[a.objective], "delay_weight": a.delay_weight,
        "cells": [config_record(kw) for kw in kws], "long_flows": list(a.long_flows), "buffer_bdp": a.buffer_bdp,
        "seconds": a.seconds, "warmup_s": a.warmup_s,
        "fluid": {"steps": a.steps, "lr": a.lr, "optimizer": "adam",
                  "grad_horizon_s": a.grad_horizon_s or None, "start": knob.start(plist[0])},
        "grid": {"axes": {k: list(v) for k, v in axes.items()}, "points": len(points)},
        "tune_seeds": list(range(TUNE_FIRST_SEED, TUNE_FIRST_SEED + a.tune_seeds)),
        "test_seeds": list(range(TEST_FIRST_SEED, TEST_FIRST_SEED + a.test_seeds)),
        "backend": a.backend or backends.default(), "out": str(a.out), "plot": not a.no_plot,
        "progress": not a.no_progress,
    }
    return config, kws, points


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): the knob
    and objective, every cell's parameters, the fluid optimiser's settings, the grid's axes,
    the tuning and held-out seeds, the packet backend asked for and the outputs."""
    return plan(a)[0]


def _packet(knob, kws, points, seeds, a, label, show):
    """tune.packet_objective, with a progress bar over the cells."""
    bar = Progress(len(kws), unit=" cells", label=label) if show else None
    if bar is not None:
        bar.update(0, measure=False)
    out = tune.packet_objective(knob, kws, points, seeds, a.objective, a.seconds, a.delay_weight, progress=bar)
    if bar is not None:
        bar.close()
    return out


def _verdict(d: float, se: float) -> str:
    if d > 2 * se:
        return "beats"
    if d >= -2 * se:
        return "ties"
    return "loses"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    try:
        cfg, kws, points = plan(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    apply_backend(a)
    knob = tune.KNOBS[a.knob]
    out_dir = Path(cfg["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "command.txt").write_text("python scripts/tune_aqm.py " + " ".join(argv) + "\n")
    jsonio.write(out_dir / "config.json", cfg)
    show = not a.no_progress

    # 1. Adam through the fluid model
    bar = Progress(a.steps + 1, unit=" steps", label="fluid Adam ") if show else None
    fl = tune.tune_fluid(knob, kws, a.objective, seconds=a.seconds, warmup_s=a.warmup_s, steps=a.steps, lr=a.lr,
                         grad_horizon_s=a.grad_horizon_s or None, delay_weight=a.delay_weight, progress=bar)
    if bar is not None:
        bar.close()
    tuned = fl["best"]
    if knob.name == "buffer":  # the tuned buffer in BDPs of the first cell, the grid's unit
        tuned_pt = {"buffer_bdp": tuned["buffer_pkts"] / float(make_params(**kws[0]).bdp_pkts)}
        start_pt = {"buffer_bdp": a.buffer_bdp}
    else:
        tuned_pt, start_pt = tuned, knob.start(make_params(**kws[0]))

    # 2. the grid on the packet simulator, tuning seeds
    t0 = time.perf_counter()
    grid = _packet(knob, kws, points, cfg["tune_seeds"], a, f"packet grid ({len(points)} points) ", show)
    grid_wall = time.perf_counter() - t0
    grid_mean = grid["objective"].mean(axis=(1, 2))
    best_i = int(np.argmax(grid_mean))
    grid_pt = points[best_i]

    # 3. held-out seeds: the start, the grid's best, the fluid-tuned point
    names = ("start", "grid best", "fluid-tuned")
    t0 = time.perf_counter()
    test = _packet(knob, kws, [start_pt, grid_pt, tuned_pt], cfg["test_seeds"], a, "held-out scoring ", show)
    score_wall = time.perf_counter() - t0
    per_seed = test["objective"].mean(axis=1)  # [3, seeds]: the mean over cells, per seed
    d, se = paired_diff(test["objective"][2], test["objective"][1])
    d0, se0 = paired_diff(test["objective"][2], test["objective"][0])
    verdict = _verdict(d, se)
    result = {
        "config": cfg, "fluid": fl, "fluid_wall_s": fl["wall_s"], "grid_wall_s": grid_wall, "score_wall_s": score_wall,
        "grid": [{**pt, "objective_tune_seeds": float(grid_mean[i])} for i, pt in enumerate(points)],
        "grid_best": {**grid_pt, "objective_tune_seeds": float(grid_mean[best_i])},
        "points": dict(zip(names, (start_pt, grid_pt, tuned_pt))),
        "held_out": {n: {"objective": float(per_seed[i].mean()),
                         "objective_se": float(per_seed[i].std(ddof=1) / np.sqrt(per_seed.shape[1])),
                         "per_cell": {int(kw["long_flows"]): {k: float(test[k][i, c].mean()) for k in test}
                                      for c, kw in enumerate(kws)}} for i, n in enumerate(names)},
        "tuned_minus_grid": {"mean": d, "se": se}, "tuned_minus_start": {"mean": d0, "se": se0}, "verdict": verdict,
    }
    jsonio.write(out_dir / "results.json", result)
    text = summary_md(result, kws, argv)
    (out_dir / "summary.md").write_text(text)
    if not a.no_plot:
        plot(out_dir / "tuning.png", result, knob)
    print(text)
    return 0


def _fmt_point(pt: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in pt.items())


def summary_md(r: dict, kws, argv) -> str:
    cfg = r["config"]
    h = r["held_out"]
    lines = [f"# Gradient-tuned {cfg['knob']} against a packet grid search ({cfg['objective']})", "",
             f"Command: `python scripts/tune_aqm.py {' '.join(argv)}`", "",
             f"**The fluid-tuned point {r['verdict']} the grid search's best** on {len(cfg['test_seeds'])} held-out "
             f"seeds: objective {h['fluid-tuned']['objective']:.4f} against {h['grid best']['objective']:.4f} "
             f"(difference {r['tuned_minus_grid']['mean']:+.4f} ± {r['tuned_minus_grid']['se']:.4f} s.e., paired over "
             f"seeds); the starting point scores {h['start']['objective']:.4f}.", "",
             f"Wall time: fluid Adam {r['fluid_wall_s']:.1f} s ({cfg['fluid']['steps']} steps, compilation included); "
             f"packet grid search {r['grid_wall_s']:.1f} s ({cfg['grid']['points']} points x {len(kws)} cells x "
             f"{len(cfg['tune_seeds'])} seeds of {cfg['seconds']:g} s); held-out scoring {r['score_wall_s']:.1f} s.", "",
             f"Objective: {cfg['objective_text']}, the mean over cells ({', '.join(str(n) for n in cfg['long_flows'])} "
             f"long flows, {cfg['buffer_bdp']:g} BDP). Knob: {cfg['knob_text']}.", "",
             "| point | values | objective (held-out, ± s.e.) | " + " | ".join(
                 f"{n} flows: util / queue / drops" for n in cfg["long_flows"]) + " |",
             "|---|---|---:|" + "---:|" * len(cfg["long_flows"])]
    for name, pt in r["points"].items():
        cells = " | ".join(f"{c['util_wire']:.4f} / {c['queue_mean_pkts']:.1f} / {c['drop_rate']:.5f}"
                           for c in h[name]["per_cell"].values())
        lines.append(f"| {name} | {_fmt_point(pt)} | {h[name]['objective']:.4f} ± {h[name]['objective_se']:.4f} "
                     f"| {cells} |")
    fl = r["fluid"]
    lines += ["", f"Fluid path: objective {fl['history'][0]['objective']:.4f} at the start, {fl['best_objective']:.4f} at "
                  f"step {fl['best_step']} (the fluid model's own value; the table's are the packet simulator's).",
              f"Grid's best on the tuning seeds: {r['grid_best']['objective_tune_seeds']:.4f}.", ""]
    return "\n".join(lines)


def plot(path, r: dict, knob) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    hist = r["fluid"]["history"]
    ax1.plot([x["step"] for x in hist], [x["objective"] for x in hist], label="fluid objective")
    ax1.set_xlabel("Adam step")
    ax1.set_ylabel("objective (fluid model)")
    ax1.set_title("gradient descent through the fluid model")
    g = sorted(x["objective_tune_seeds"] for x in r["grid"])
    ax2.plot(range(len(g)), g, ".", label="grid points (tuning seeds)")
    h = r["held_out"]
    for name, style in (("grid best", "C1--"), ("fluid-tuned", "C2-"), ("start", "C7:")):
        ax2.axhline(h[name]["objective"], color=style[:2], linestyle=style[2:], label=f"{name} (held-out)")
    ax2.set_xlabel("grid point (sorted)")
    ax2.set_ylabel("objective (packet simulator)")
    ax2.set_title(f"packet simulator: {len(g)}-point grid")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
