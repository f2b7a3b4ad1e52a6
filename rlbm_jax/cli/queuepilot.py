"""QueuePilot (an RL ECN-marking AQM, `QueuePilot-v0`) at 1/10 scale: train it with PPO
on the training mix, then judge it against droptail, ARED, PIE and CoDel on held-out
seeds and configurations (`rlbm_jax.queuepilot.study` states the scaling and the seeds).

    python scripts/queuepilot.py train --run-dir runs/queuepilot --num-envs 2048 --num-seeds 3 --time-budget-s 600
    python scripts/queuepilot.py evaluate --run-dir runs/queuepilot
    python scripts/queuepilot.py export --run-dir runs/queuepilot
    python scripts/queuepilot.py ns3 --run-dir runs/queuepilot --seeds 3 --jobs 2
    python scripts/queuepilot.py ns3 --run-dir results/apg --agent-only   # train_apg.py's policies

train writes config.json, metrics.csv (one row per seed and update), curves.png and
trained.msgpack (every seed's network and observation statistics); it stops at --updates
or when --time-budget-s is spent (measured after compilation), whichever comes first; its
config.json names the study kit's `queuepilot` and the recipe `lstm` (with its own PPO
settings).  evaluate is the kit's `study.py queuepilot select --runs <run-dir>` then `test`
(the ledger, per-run files and RESULTS.md in <run-dir>/kit, --out-dir): each classic AQM's
variant chosen on the selection seeds over the training mix, then every training seed's
agent against the chosen variants on the test grid with the test seeds, paired, with
Holm's correction.
export writes one deployable policy per training seed, policy_seed<s>/ (the policy
format of `rlbm_jax.policy`) and policy_seed<s>.onnx (a one-step recurrent graph), and
checks each against the trained JAX network over carried-state sequences.
ns3 judges the exported agent inside ns-3.37 (`rlbm_jax.ns3.harness`; the scenario's rl-mark
policy driven in lock-step, its LSTM state carried from step to step) against droptail,
the chosen variant of each classic AQM (ns-3's own RED, PIE and CoDel queue discs) and
FQ-CoDel, on test configurations and seeds, scores every run from ns-3's interval
records with the formulation's own reward, runs the JAX simulator on the same
configurations and seeds, and writes <run>/ns3/results.json and RESULTS.md (ns-3 beside
JAX per policy).  It judges a `train_apg.py` run's policies as well (QueuePilot-continuous-v0:
stateless MLPs whose output is the marking probability, run in JAX as the same ONNX
graphs); what each exported policy's action means is read from its own metadata, and a
policy of any other formulation is refused.  --agent-only leaves the classic AQMs out.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rlbm_jax.cli import (add_export_ns3, add_model_args, add_ppo_train_args, add_print_config, model_kw, parser,
                          ppo_train_config, subcommand_main, train_ppo_run)
from rlbm_jax.cli.study import add_kit_eval_args, kit_eval_config, kit_evaluate
from rlbm_jax.env.params import config_record
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.study import DEFAULT_VARIANTS

PROG = "queuepilot.py"
# ns3: the default test configurations (long flows, RTT ms, TCP); its classic AQMs' variants
# when the run has no selection are `rlbm_jax.queuepilot.study.DEFAULT_VARIANTS`
NS3_CONFIGS = ("20:40:cubic", "20:40:newreno")


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the agent with PPO on the training mix")
    add_ppo_train_args(t, run_dir="runs/queuepilot", recipe=qp.PPO_RECIPE, episode_s=qp.EPISODE_S, step="5 ms")
    t.add_argument("--init-from", default=None,
                   help="trained.msgpack of an earlier run with the same seeds: continue from its networks and "
                        "observation statistics (fresh envs and optimiser moments; updates count on)")
    e = sub.add_parser("evaluate", help="judge the trained agent against the classic AQMs: the study kit's select, "
                                        "then test (study.py queuepilot select --runs RUN, then test)")
    add_kit_eval_args(e, run_dir="runs/queuepilot", study="queuepilot")
    x, n = add_export_ns3(sub, run_dir="runs/queuepilot", seeds=3, seconds=qp.EVAL_S, warmup_s=qp.EVAL_WARMUP_S,
                          ns3_help="judge the exported agent inside ns-3 against the classic AQMs, beside JAX")
    n.add_argument("--configs", nargs="+", default=list(NS3_CONFIGS), metavar="N:RTT_MS:TCP",
                   help="test configurations: long flows, base RTT in ms, TCP (cubic or newreno)")
    n.add_argument("--variants", nargs="+", default=None,
                   help="the classic AQMs' variants (default: the last selection of <run-dir>/kit/ledger.json, or "
                        "the 'chosen' of a pre-kit <run-dir>/results.json, else "
                        + ", ".join(DEFAULT_VARIANTS) + ")")
    n.add_argument("--no-fq-codel", action="store_true", help="leave out FQ-CoDel")
    n.add_argument("--agent-only", action="store_true",
                   help="judge the agent alone: no classic AQM in either simulator")
    n.add_argument("--no-jax", action="store_true", help="leave out the JAX side")
    n.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 even where a cached run matches")
    add_model_args(n)  # the JAX side's TCP model (ns-3 runs its own; its cached runs are reused)
    for p in (t, e, x, n):
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    """What the subcommand runs (`--print-config` prints it; train's config.json, the kit's
    ledger of evaluate and ns3's results.json hold it; export prints it): `cmd` and what
    `train_config`, `cli.study.kit_eval_config`, `queuepilot.ns3.export_config` or
    `queuepilot.ns3.ns3_config` resolve."""
    if a.cmd in ("export", "ns3"):
        from rlbm_jax.queuepilot import ns3 as qp_ns3

        cfg = (qp_ns3.export_config(a.run_dir) if a.cmd == "export"
               else qp_ns3.ns3_config(a, model=model_kw(a, complete=True), model_kw=model_kw(a)))
    else:
        cfg = train_config(a) if a.cmd == "train" else kit_eval_config("queuepilot", a)
    return {"cmd": a.cmd, **cfg}


# ---- training --------------------------------------------------------------------------
TRAIN_FLAGS = {"num_envs": "--num-envs", "num_steps": "--num-steps", "num_seeds": "--num-seeds",
               "total_updates": "--updates", "lr": "--lr"}


def train_config(a) -> dict:
    """What `train` runs: the PPO config (`PPOConfig.to_dict`), the episode length, the
    training seeds, the training mix (`configs`: make_params arguments; `params`: every
    simulator parameter of each, `params.config_record`), the updates, chunk and time
    budget, the run it continues from and the run directory."""
    ppo = ppo_train_config(a, qp.PPO_RECIPE, TRAIN_FLAGS)
    if a.init_from and not Path(a.init_from).is_file():
        raise ValueError(f"--init-from {a.init_from}: no such file (it must be a trained.msgpack of {a.num_seeds} "
                         "seeds)")
    from rlbm_jax.study import get

    get("queuepilot").seeds.check("train", list(range(a.seed, a.seed + a.num_seeds)))  # the kit's training seeds
    configs = qp.train_configs()
    # a run of the kit's queuepilot study (its recipe "lstm", these PPO settings): `evaluate` reads it
    return {"study": "queuepilot", "recipe": "lstm", "run_dir": a.run_dir, "overwrite": a.overwrite, "ppo": ppo,
            "episode_s": a.episode_s,
            "seeds": list(range(a.seed, a.seed + a.num_seeds)), "configs": configs,
            "params": [config_record(kw) for kw in configs], "updates": a.updates, "chunk": a.chunk,
            "time_budget_s": a.time_budget_s, "init_from": a.init_from}


def train(a, cfg: dict, argv=None) -> int:
    return train_ppo_run(PROG, lambda: qp.make_ppo(cfg["ppo"], cfg["episode_s"])[0], a, cfg, TRAIN_FLAGS,
                         "QueuePilot-v0", init_from=a.init_from)


# ---- evaluation: the study kit's select and test ---------------------------------------
def evaluate(a, cfg: dict, argv=None) -> int:
    return kit_evaluate(PROG, cfg)


def study_ns3(cfg: dict) -> int:
    """`study.py queuepilot ns3`: this script's `ns3` on the kit's run, with the variants
    its selection chose (`pipeline.ns3_config`)."""
    argv = ["ns3", "--run-dir", cfg["run_dir"], "--out-dir", cfg["out_dir"], "--seeds", str(cfg["seeds"]),
            "--jobs", str(cfg["jobs"])]
    return main(argv + (["--variants", *cfg["chosen"]] if cfg["chosen"] else []))


# each subcommand's function (a "module:function" is imported when it runs)
def export(a, cfg: dict, argv=None) -> int:
    from rlbm_jax.queuepilot import ns3 as qp_ns3

    return qp_ns3.export(cfg)


def ns3(a, cfg: dict, argv=None) -> int:
    from rlbm_jax.queuepilot import ns3 as qp_ns3

    return qp_ns3.ns3(cfg, argv)


COMMANDS = dict(train=train, evaluate=evaluate, export=export, ns3=ns3)


def main(argv=None):
    return subcommand_main(PROG, build_parser, run_config, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
