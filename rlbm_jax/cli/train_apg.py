"""QueuePilot's marking policy trained by analytic policy gradients through the fluid model,
judged on the packet simulator against the classic AQMs (the study `queuepilot-apg`,
`rlbm_jax.studies.queuepilot_apg`; its agent `rlbm_jax.queuepilot.apg_agent`).

    python scripts/train_apg.py train --run-dir runs/apg --seed 10 --num-seeds 3
    python scripts/train_apg.py evaluate --run-dir runs/apg
    python scripts/train_apg.py export --run-dir runs/apg

train, evaluate and export are the study kit's stages (`scripts/study.py queuepilot-apg ...`):
train is `study.py queuepilot-apg train` (one APG run per training seed, one after another:
a deterministic MLP, the QueuePilot observation -> the marking probability,
`QueuePilot-continuous-v0`, trained by backpropagating short rollouts of the fluid model
over QueuePilot's training mix with long flows only, each configuration at several start
spreads; --updates: gradient updates per seed, unset the recipe's 1,500; it writes
config.json, metrics.csv, curves.png and policy_seed<s>/ with policy_seed<s>.onnx), evaluate
is `study.py queuepilot-apg select --runs <run-dir>` then `test` (QueuePilot's selection and
test configurations, seeds and classic AQMs, the web-search flows the fluid model never saw;
the ledger, per-run files and RESULTS.md in <run-dir>/kit, --out-dir), export writes each
seed's ONNX graph again and checks it against the JAX network.  The QueuePilot PPO agent is
the `queuepilot` study's: its verdict shares these test runs (`results/queuepilot/kit`).
"""
from __future__ import annotations

import sys

from rlbm_jax.cli import add_print_config, parser, subcommand_main
from rlbm_jax.cli.study import add_kit_stages, kit_commands, kit_stage_config

PROG = "train_apg.py"
STUDY = "queuepilot-apg"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for p in add_kit_stages(
            sub, study=STUDY, run_dir="runs/apg",
            train_help="train the marking policy by APG: the study kit's train (study.py queuepilot-apg train)",
            evaluate_help="judge it against the classic AQMs on the packet simulator: the study kit's select, then "
                          "test",
            export_help="each seed's ONNX graph, checked: the study kit's export"):
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    return kit_stage_config(STUDY, a)


def main(argv=None) -> int:
    return subcommand_main(PROG, build_parser, run_config, kit_commands(PROG), argv)


if __name__ == "__main__":
    sys.exit(main())
