"""ABS (ABSRL, `ABS-trace-v0`) on Env 2 with a capacity trace: train the buffer-sizing agent
with PPO (an LSTM) on the training traces, then judge it against fixed sizes, BDP rules, Cocoa,
ABSSL, RED and CoDel on held-out seeds and traces (the study `abs`, `rlbm_jax.studies.abs`,
on `rlbm_jax.abs.study`'s traces, baselines and seeds), and inside ns-3.37.

    python scripts/abs.py train --run-dir runs/abs --num-envs 64 --num-seeds 3 --time-budget-s 600
    python scripts/abs.py evaluate --run-dir runs/abs
    python scripts/abs.py export --run-dir runs/abs
    python scripts/abs.py ns3 --run-dir runs/abs --seeds 2

train and evaluate are the study kit's stages (`scripts/study.py abs ...`): train is `study.py
abs train` (config.json, metrics.csv, curves.png, trained.msgpack; it stops at --updates or
when --time-budget-s is spent), evaluate is `study.py abs select --runs <run-dir>` then `test`,
their ledger, per-run files and RESULTS.md in <run-dir>/kit (--out-dir): each baseline
family's variant chosen on the selection seeds, then the agent's training seeds against the
chosen variants on the test seeds, paired, with Holm's correction.  export writes
policy_seed<s>/ and policy_seed<s>.onnx per training seed, checked against the trained
network.  ns3 drives the exported agents inside ns-3.37 in lock-step (the scenario's rl-size
policy, the window of 5 observations kept by the driver, the LSTM state carried) and runs the
baselines there (fixed sizes and the static BDP rules as the drop-tail limit, ns-3's own RED
and CoDel), scored by the formulation's QoE from ns-3's interval records, beside the same runs
in JAX.
"""
from __future__ import annotations

import sys

from rlbm_jax.abs import study as S
from rlbm_jax.abs.ns3 import DEFAULT_NS3_BASELINES
from rlbm_jax.cli import add_export_ns3, add_print_config, parser, subcommand_main
from rlbm_jax.cli.study import (add_kit_eval_args, add_kit_train_args, kit_eval_config, kit_evaluate, kit_train,
                                kit_train_config)

PROG = "abs.py"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the agent with PPO on the training traces: the study kit's train "
                                     "(study.py abs train)")
    add_kit_train_args(t, run_dir="runs/abs", study="abs")
    e = sub.add_parser("evaluate", help="judge the trained agent against the buffer-sizing baselines: the study "
                                        "kit's select, then test (study.py abs select --runs RUN, then test)")
    add_kit_eval_args(e, run_dir="runs/abs", study="abs")
    x, n = add_export_ns3(sub, run_dir="runs/abs", seeds=2, seconds=20.0, warmup_s=S.EVAL_WARMUP_S,
                          ns3_help="judge the exported agent and the baselines inside ns-3, beside JAX")
    n.add_argument("--traces", nargs="+", default=["wifi"], help="test traces (no outage: ns-3 refuses rate 0)")
    n.add_argument("--tcp", nargs="+", default=["newreno"])
    n.add_argument("--baselines", nargs="+", default=None,
                   help="baselines to run (default: Fix(10), Fix(100), bdp-sqrt and the fix, red and codel "
                        "variants chosen in <run-dir>/kit/ledger.json (or a pre-kit <run-dir>/results.json), "
                        "else " + ", ".join(DEFAULT_NS3_BASELINES) + ")")
    n.add_argument("--agent-only", action="store_true", help="no baselines")
    n.add_argument("--no-jax", action="store_true", help="leave out the JAX side")
    n.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 even where a cached run matches")
    for p in (t, e, x, n):
        add_print_config(p)
    return ap




# ---- training: the study kit's train ----------------------------------------------------
def train(a, cfg: dict, argv=None) -> int:
    return kit_train(PROG, cfg)


# ---- evaluation: the study kit's select and test ---------------------------------------
def evaluate(a, cfg: dict, argv=None) -> int:
    return kit_evaluate(PROG, cfg)


def run_config(a) -> dict:
    if a.cmd in ("export", "ns3"):
        from rlbm_jax.abs import ns3 as abs_ns3

        cfg = abs_ns3.export_config(a) if a.cmd == "export" else abs_ns3.ns3_config(a)
    else:
        cfg = kit_train_config("abs", a) if a.cmd == "train" else kit_eval_config("abs", a)
    if a.cmd == "ns3":
        cfg = {**cfg, "tcp": list(a.tcp)}  # the TCPs the command runs, under the model parameter's name
    return {"cmd": a.cmd, **cfg}


def study_ns3(cfg: dict) -> int:
    """`study.py abs ns3`: this script's `ns3` on the kit's run, with the chosen variants of
    the families ns-3 runs (fixed limits and ns-3's AQMs; `pipeline.ns3_config`)."""
    from rlbm_jax.abs.ns3 import NS3_CAPABLE

    chosen = [v for v in cfg["chosen"] if S.family_of(v) in NS3_CAPABLE]
    argv = ["ns3", "--run-dir", cfg["run_dir"], "--out-dir", cfg["out_dir"], "--seeds", str(cfg["seeds"]),
            "--jobs", str(cfg["jobs"])]
    return main(argv + (["--baselines", *chosen] if chosen else []))


# each subcommand's function (a "module:function" is imported when it runs)
COMMANDS = dict(train=train, evaluate=evaluate, export="rlbm_jax.abs.ns3:export", ns3="rlbm_jax.abs.ns3:ns3")


def main(argv=None):
    return subcommand_main(PROG, build_parser, run_config, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
