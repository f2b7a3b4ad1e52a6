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

from rlbm_jax import tune
from rlbm_jax.cli import add_print_config, parser, subcommand_main
from rlbm_jax.cli.study import add_kit_stages, kit_commands, kit_stage_config

PROG = "tune_aqm.py"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for p in add_kit_stages(  # (both studies' tuner takes the same options)
            sub, study="tune-red", run_dir="runs/tune_aqm",
            train_help="tune the knob through the fluid model: the study kit's train",
            evaluate_help="the grid search, then the tuned points against its best: the study kit's select, then test",
            export_help="each tuned point, checked: the study kit's export"):
        p.add_argument("--knob", choices=list(tune.KNOBS), default="red",
                       help="what is tuned: " + "; ".join(f"{k}: {v.text}" for k, v in tune.KNOBS.items()))
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    return kit_stage_config(f"tune-{a.knob}", a)


def main(argv=None) -> int:
    return subcommand_main(PROG, build_parser, run_config, kit_commands(PROG), argv)


if __name__ == "__main__":
    sys.exit(main())
