"""Tune an AQM by gradient descent through the fluid model, and judge it on the packet
simulator against a grid search run on the packet simulator itself (the studies `tune-red`
and `tune-buffer`, `rlbm_jax.tune_study`: the tuner is the agent, the knob's grid the
baselines, the run's reward the objective of its summary).

    python scripts/tune_aqm.py train --knob red --run-dir runs/tune_red
    python scripts/tune_aqm.py evaluate --knob red --run-dir runs/tune_red

train, evaluate and export are the study kit's stages (`scripts/study.py tune-red ...`):
train is `study.py tune-<knob> train` (Adam on the knob's parameters, `--knob red`: RED's
min_th, max_th and max_p, `buffer`: a drop-tail buffer's size, through fluid rollouts of 8,
16 and 32 long flows at 1 BDP, maximising Kleinrock's power normalised; one run per
training seed, each from its own start; --updates: Adam steps, unset the recipe's 60;
tuned_seed<s>.json, metrics.csv, curves.png), evaluate is `study.py tune-<knob> select --runs
<run-dir>` (every grid point and the start on the packet simulator, selection seeds: the
grid search) then `test` (the tuned points against the grid's best and the start on held-out
seeds, paired by run; the ledger, per-run files and RESULTS.md in <run-dir>/kit, --out-dir),
export checks each tuned point is a configuration the packet simulator takes.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rlbm_jax import tune
from rlbm_jax.cli import add_print_config, fail, parser, subcommand_main
from rlbm_jax.cli.study import (add_kit_eval_args, add_kit_train_args, kit_eval_config, kit_evaluate, kit_train,
                                kit_train_config)

PROG = "tune_aqm.py"


def _study(a) -> str:
    return f"tune-{a.knob}"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="tune the knob through the fluid model: the study kit's train")
    add_kit_train_args(t, run_dir="runs/tune_aqm", study="tune-red")  # (both studies' tuner takes the same options)
    e = sub.add_parser("evaluate", help="the grid search, then the tuned points against its best: the study kit's "
                                        "select, then test")
    add_kit_eval_args(e, run_dir="runs/tune_aqm", study="tune-red")
    x = sub.add_parser("export", help="each tuned point, checked: the study kit's export")
    x.add_argument("--run-dir", default="runs/tune_aqm", help="a train run's directory")
    x.add_argument("--out-dir", default=None, help="the kit's results folder whose ledger records it (default: "
                                                   "<run-dir>/kit)")
    for p in (t, e, x):
        p.add_argument("--knob", choices=list(tune.KNOBS), default="red",
                       help="what is tuned: " + "; ".join(f"{k}: {v.text}" for k, v in tune.KNOBS.items()))
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    if a.cmd == "train":
        return {"cmd": "train", **kit_train_config(_study(a), a)}
    if a.cmd == "evaluate":
        return {"cmd": "evaluate", **kit_eval_config(_study(a), a)}
    from rlbm_jax.study import get, pipeline

    return {"cmd": "export", **pipeline.export_config(get(_study(a)), run_dir=a.run_dir,
                                                      results=a.out_dir or str(Path(a.run_dir) / "kit"))}


def _export(a, cfg, argv) -> int:
    from rlbm_jax.study import get, pipeline

    try:
        pipeline.export(get(_study(a)), cfg)
    except ValueError as e:
        return fail(PROG, str(e))
    return 0


def main(argv=None) -> int:
    return subcommand_main(PROG, build_parser, run_config,
                           {"train": lambda a, cfg, _: kit_train(PROG, cfg),
                            "evaluate": lambda a, cfg, _: kit_evaluate(PROG, cfg), "export": _export}, argv)


if __name__ == "__main__":
    sys.exit(main())
