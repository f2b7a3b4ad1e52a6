"""LFQ (a flow's queue cap learnt inside a fair queue, `LFQ-v0`): train it the paper's
offline way, by A/B forking every flow into a cap + 1 and a cap - 1 copy as one batched
step, then judge it against fq with 100 and 1000 packets per flow, fq with a per-flow BDP
cap and FQ-CoDel on held-out configurations and seeds (`rlbm_jax.lfq.study` states the
grid, the test sweep and the seeds).

    python scripts/lfq.py train --run-dir runs/lfq --flows 32 --iterations 100
    python scripts/lfq.py train --run-dir runs/lfq --flows 2048 --time-budget-s 150   # on an accelerator
    python scripts/lfq.py evaluate --run-dir runs/lfq
    python scripts/lfq.py export --run-dir runs/lfq
    python scripts/lfq.py ns3 --run-dir runs/lfq

train writes config.json, metrics.csv (one row per seed and iteration: flows seen, wall
time, the mean cap, bandwidth, queue, reward, the share of forks whose copies tied, the
loss), curves.png and trained_seed<s>.msgpack; it stops at --iterations or when
--time-budget-s is spent (per seed, measured after compilation).
evaluate runs every training seed's network and the baselines on the test sweep with the
test seeds and writes results.json, RESULTS.md (the paper's Table VII: average throughput,
largest and average queue, per TCP and overall, mean and standard error over training
seeds or test seeds; the learnt cap's correlation with bandwidth and delay, its Table I and
III) and caps.png (the learnt cap against delay and bandwidth, per TCP, beside the BDP).
export writes policy_seed<s>.onnx per seed (`rlbm_jax.lfq.onnx`: the observation's raw
66 values in, the cap out) and checks each against the JAX network.
ns3 runs every exported graph in ns-3.37 in lock-step, and the baselines there, on the test
sweep (`rlbm_jax.lfq.ns3`), and writes ns3/results.json, RESULTS.md (both simulators side by
side, LFQ's verdict against each baseline in each) and ns3_vs_jax.png.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.cli import add_overwrite_arg, add_print_config, fail, parser, subcommand_main
from rlbm_jax.lfq import study as S
from rlbm_jax.progress import Progress, fmt_s
from rlbm_jax.study.trainer import write_rows

PROG = "lfq.py"


def _judging_args(p, run_dir_help: str) -> None:
    """The options `evaluate` and `ns3` share: the run, the test seeds, the flows' duration."""
    add_print_config(p)
    p.add_argument("--run-dir", default="runs/lfq", help=run_dir_help)
    p.add_argument("--test-seeds", type=int, default=len(S.TEST_SEEDS),
                   help=f"how many of the test seeds {S.TEST_SEEDS} to run")
    p.add_argument("--duration-s", type=float, default=S.TEST_DURATION_S, help="each test flow's duration (s)")


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the cap network by A/B forking")
    add_print_config(t)
    t.add_argument("--run-dir", default="runs/lfq", help="output directory")
    add_overwrite_arg(t)
    t.add_argument("--alpha", type=float, default=0.01, help="the reward's queue price (the paper: 0.01 or 10)")
    t.add_argument("--seeds", type=int, nargs="+", default=list(S.TRAIN_SEEDS), help="training seeds")
    t.add_argument("--flows", type=int, default=32, help="flows per iteration (2 x as many envs: the two copies)")
    t.add_argument("--iterations", type=int, default=100, help="iterations per seed")
    t.add_argument("--time-budget-s", type=float, default=None, help="stop a seed after this wall time (s)")
    t.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    e = sub.add_parser("evaluate", help="the trained seeds and the baselines on the test sweep")
    _judging_args(e, "a train run's directory")
    e.add_argument("--out-dir", default=None, help="where results go (default: the run's directory)")
    x = sub.add_parser("export", help="one ONNX graph per training seed")
    add_print_config(x)
    x.add_argument("--run-dir", default="runs/lfq", help="a train run's directory")
    n = sub.add_parser("ns3", help="the exported graphs and the baselines in ns-3.37, beside JAX")
    _judging_args(n, "a train run's directory, its graphs exported")
    n.add_argument("--configs", nargs="+", default=None, metavar="RATE_MBPS:DELAY_MS:TCP",
                   help="configurations to run (default: the test sweep of `evaluate`)")
    n.add_argument("--baselines", nargs="+", default=None, help=f"baselines to run (default: all of {list(S.BASELINES)})")
    n.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    n.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 runs found in the run's cache")
    n.add_argument("--no-jax", action="store_true", help="ns-3 only (no JAX column)")
    n.add_argument("--out-dir", default=None, help="where results go (default: the run's ns3/)")
    n.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def run_config(a) -> dict:
    if a.cmd == "train":
        for name, v, lo in (("--flows", a.flows, 1), ("--iterations", a.iterations, 1)):
            if v < lo:
                raise ValueError(f"{name} must be >= {lo}, got {v}")
        if not (np.isfinite(a.alpha) and a.alpha >= 0):
            raise ValueError(f"--alpha must be a number >= 0, got {a.alpha}")
        if not (np.isfinite(a.lr) and a.lr > 0):
            raise ValueError(f"--lr must be positive, got {a.lr}")
        if a.time_budget_s is not None and not a.time_budget_s > 0:
            raise ValueError(f"--time-budget-s must be positive, got {a.time_budget_s}")
        if len(set(a.seeds)) != len(a.seeds):
            raise ValueError(f"--seeds must be distinct, got {a.seeds}")
        if set(a.seeds) & set(S.TEST_SEEDS):
            raise ValueError(f"--seeds must not be test seeds {S.TEST_SEEDS}")
        return {"cmd": "train", "run_dir": a.run_dir, "overwrite": a.overwrite, "alpha": a.alpha,
                "seeds": list(a.seeds), "flows": a.flows, "iterations": a.iterations, "time_budget_s": a.time_budget_s, "lr": a.lr,
                "progress": not a.no_progress, "train_grid": {"rates_mbps": S.TRAIN_RATES_MBPS,
                                                              "delays_ms": S.TRAIN_DELAYS_MS, "tcps": S.TCPS,
                                                              "duration_s": S.DURATION_S},
                "network": {"hidden": [256, 256, 256], "activation": "leaky_relu", "obs_scale": S.SIGNAL_SCALE,
                            "out_scale_pkts": S.OUT_SCALE}}
    run = Path(a.run_dir)
    if a.cmd == "evaluate":
        if not 1 <= a.test_seeds <= len(S.TEST_SEEDS):
            raise ValueError(f"--test-seeds must be 1..{len(S.TEST_SEEDS)}, got {a.test_seeds}")
        if not a.duration_s > 0:
            raise ValueError(f"--duration-s must be positive, got {a.duration_s}")
        return {"cmd": "evaluate", "run_dir": str(run), "test_seeds": list(S.TEST_SEEDS[:a.test_seeds]),
                "duration_s": a.duration_s, "out_dir": str(Path(a.out_dir) if a.out_dir else run),
                "test_configs": S.test_configs(), "baselines": list(S.BASELINES)}
    if a.cmd == "ns3":
        from rlbm_jax.lfq import ns3
        return {**ns3.ns3_config(run, a.test_seeds, a.duration_s, a.configs, a.baselines, a.jobs, a.fresh_ns3,
                                 not a.no_jax, a.out_dir), "progress": not a.no_progress}
    return {"cmd": "export", "run_dir": str(run)}


def _train(cfg: dict) -> int:
    from flax import serialization

    run = Path(cfg["run_dir"])
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(jsonio.dumps(cfg) + "\n")
    rows = []
    tc = S.TrainConfig(alpha=cfg["alpha"], flows=cfg["flows"], iterations=cfg["iterations"], lr=cfg["lr"])
    init, iteration, _ = S.make_trainer(tc)  # one compilation serves every seed
    for seed in cfg["seeds"]:
        params, opt = init(jax.random.PRNGKey(seed))
        key = jax.random.PRNGKey(10_000 + seed)
        bar = Progress(cfg["iterations"], unit="it", label=f"seed {seed}", rate_unit="flows/s",
                       rate_scale=cfg["flows"]) if cfg["progress"] else None
        t0 = None
        for i in range(cfg["iterations"]):
            params, opt, m = iteration(params, opt, jax.random.fold_in(key, i))
            m = {k: float(v) for k, v in m.items()}
            if t0 is None:
                t0 = time.time()  # the first iteration of the first seed compiles
            wall = time.time() - t0
            rows.append({"seed": seed, "iteration": i, "flows_seen": (i + 1) * cfg["flows"], "wall_s": wall, **m})
            if bar:
                bar.update(i + 1, extra=f"cap {m['cap_pkts']:.1f} reward {m['reward']:.3f}")
            if cfg["time_budget_s"] is not None and wall > cfg["time_budget_s"]:
                break
        (run / f"trained_seed{seed}.msgpack").write_bytes(serialization.to_bytes(params))
    write_rows(run / "metrics.csv", rows)
    S.plot_curves(rows, run / "curves.png")
    print(f"wrote {run}/ (config.json, metrics.csv, curves.png, trained_seed<s>.msgpack)")
    return 0


def _need_run(cfg: dict):
    run = Path(cfg["run_dir"])
    if not (run / "config.json").exists():
        raise ValueError(f"--run-dir {run}: no config.json (run `{PROG} train --run-dir {run}` first)")
    return run


def _evaluate(a, cfg, argv) -> int:
    try:
        run = _need_run(cfg)
    except ValueError as e:
        return fail(PROG, str(e))
    t = time.time()
    res = S.evaluate_run(run, cfg["test_seeds"], cfg["duration_s"], Path(cfg["out_dir"]))
    print(f"wrote {cfg['out_dir']}/ (results.json, RESULTS.md, caps.png) in {fmt_s(time.time() - t)}")
    print(res["markdown_table"])
    return 0


def _ns3(a, cfg, argv) -> int:
    from rlbm_jax.lfq import ns3
    try:
        _need_run(cfg)
        rep = ns3.evaluate(cfg, argv, progress=cfg["progress"])
    except (ValueError, RuntimeError) as e:
        return fail(PROG, str(e))
    print(rep["markdown"])
    print(f"wrote {cfg['out_dir']}/ (results.json, RESULTS.md, ns3_vs_jax.png, command.txt) in "
          f"{fmt_s(rep['wall_s']['total'])}")
    return 0


def _export(a, cfg, argv) -> int:
    from rlbm_jax.lfq import onnx as lfq_onnx
    try:
        run = _need_run(cfg)
    except ValueError as e:
        return fail(PROG, str(e))
    missing = 0
    for path, err in lfq_onnx.export_run(run):
        if path is None:
            print(err, file=sys.stderr)
            missing += 1
            continue
        print(f"wrote {path} (largest difference from the JAX network: {err:.2e} packets)")
    return 1 if missing else 0


def main(argv=None) -> int:
    return subcommand_main(PROG, build_parser, run_config, {"train": lambda a, cfg, _: _train(cfg),
                                                            "evaluate": _evaluate, "ns3": _ns3, "export": _export},
                           argv)


if __name__ == "__main__":
    sys.exit(main())
