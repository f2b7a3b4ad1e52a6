"""LFQ (a flow's queue cap learnt inside a fair queue, `LFQ-v0`): train it the paper's
offline way, by A/B forking every flow into a cap + 1 and a cap - 1 copy as one batched
step, then judge it against fq with 100 and 1000 packets per flow, fq with a per-flow BDP
cap and FQ-CoDel on held-out configurations and seeds (the study `lfq`,
`rlbm_jax.studies.lfq`, on `rlbm_jax.lfq.study`'s grid, test sweep and seeds).

    python scripts/lfq.py train --run-dir runs/lfq --num-envs 32 --updates 100
    python scripts/lfq.py train --run-dir runs/lfq --num-envs 2048 --time-budget-s 150   # on an accelerator
    python scripts/lfq.py evaluate --run-dir runs/lfq
    python scripts/lfq.py export --run-dir runs/lfq
    python scripts/lfq.py ns3 --run-dir runs/lfq

train, evaluate and export are the study kit's stages (`scripts/study.py lfq ...`): train is
`study.py lfq train` (--num-envs: flows per iteration, twice as many envs; --updates:
iterations per seed; --chunk: iterations between checkpoints; it writes config.json,
metrics.csv, curves.png and trained_seed<s>.msgpack), evaluate is `study.py lfq select --runs
<run-dir>` then `test` (the ledger, per-run files, RESULTS.md, verdict.png and caps.png in
<run-dir>/kit, --out-dir: the paper's Table VII sweep, every training seed's network against
the baselines, paired by test run, with Holm's correction; the learnt cap's correlation with
bandwidth and delay, its Tables I and III), export writes policy_seed<s>.onnx per seed
(`rlbm_jax.lfq.onnx`: the observation's raw 66 values in, the cap out), each checked against
the JAX network.
ns3 runs every exported graph in ns-3.37 in lock-step, and the baselines there, on the test
sweep (`rlbm_jax.lfq.ns3`), and writes ns3/results.json, RESULTS.md (both simulators side by
side, LFQ's verdict against each baseline in each) and ns3_vs_jax.png.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rlbm_jax.cli import add_print_config, fail, parser, subcommand_main
from rlbm_jax.cli.study import add_kit_stages, kit_commands, kit_stage_config
from rlbm_jax.lfq import study as S
from rlbm_jax.progress import fmt_s

PROG = "lfq.py"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t, e, x = add_kit_stages(
        sub, study="lfq", run_dir="runs/lfq",
        train_help="train the cap network by A/B forking: the study kit's train (study.py lfq train)",
        evaluate_help="the trained seeds against the baselines on the test sweep: the study kit's select, then test "
                      "(study.py lfq select --runs RUN, then test)",
        export_help="one ONNX graph per training seed, checked: the study kit's export")
    n = sub.add_parser("ns3", help="the exported graphs and the baselines in ns-3.37, beside JAX")
    n.add_argument("--run-dir", default="runs/lfq", help="a train run's directory, its graphs exported")
    n.add_argument("--test-seeds", type=int, default=len(S.TEST_SEEDS),
                   help=f"how many of the test seeds {S.TEST_SEEDS} to run")
    n.add_argument("--duration-s", type=float, default=S.TEST_DURATION_S, help="each test flow's duration (s)")
    n.add_argument("--configs", nargs="+", default=None, metavar="RATE_MBPS:DELAY_MS:TCP",
                   help="configurations to run (default: the test sweep of `evaluate`)")
    n.add_argument("--baselines", nargs="+", default=None, help=f"baselines to run (default: all of {list(S.BASELINES)})")
    n.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    n.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 runs found in the run's cache")
    n.add_argument("--no-jax", action="store_true", help="ns-3 only (no JAX column)")
    n.add_argument("--out-dir", default=None, help="where results go (default: the run's ns3/)")
    n.add_argument("--no-progress", action="store_true", help="no progress bar")
    for p in (t, e, x, n):
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    if a.cmd != "ns3":
        return kit_stage_config("lfq", a)
    from rlbm_jax.lfq import ns3
    return {"cmd": "ns3", **ns3.ns3_config(Path(a.run_dir), a.test_seeds, a.duration_s, a.configs, a.baselines, a.jobs,
                                           a.fresh_ns3, not a.no_jax, a.out_dir), "progress": not a.no_progress}


def _ns3(a, cfg, argv) -> int:
    from rlbm_jax.lfq import ns3
    try:
        rep = ns3.evaluate(cfg, argv, progress=cfg["progress"])
    except (ValueError, RuntimeError) as e:
        return fail(PROG, str(e))
    print(rep["markdown"])
    print(f"wrote {cfg['out_dir']}/ (results.json, RESULTS.md, ns3_vs_jax.png, command.txt) in "
          f"{fmt_s(rep['wall_s']['total'])}")
    return 0


def study_ns3(kit: dict) -> int:
    """`study.py lfq ns3`: this script's `ns3` on the kit's run with the chosen baselines (all
    four before a selection), its first `seeds` test seeds, into <results>/ns3."""
    argv = ["ns3", "--run-dir", kit["run_dir"], "--out-dir", kit["out_dir"], "--test-seeds", str(kit["seeds"]),
            "--jobs", str(kit["jobs"])]
    return main(argv + (["--baselines", *kit["chosen"]] if kit["chosen"] else []))


def main(argv=None) -> int:
    return subcommand_main(PROG, build_parser, run_config, {**kit_commands(PROG), "ns3": _ns3}, argv)


if __name__ == "__main__":
    sys.exit(main())
