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
or when --time-budget-s is spent (measured after compilation), whichever comes first.
evaluate picks each classic AQM's best parameter variant on the selection seeds (mean
reward over the training mix), then runs every variant and every training seed's agent
on the test grid with the test seeds, and writes results.json, RESULTS.md (tables: per
configuration and overall, reward, utilisation, drop rate, queueing delay, p99 FCT by
flow size, mean and standard error over seeds) and plots.
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
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.cli import (add_eval_args, add_export_ns3, add_model_args, add_ppo_train_args, add_print_config,
                          check_eval_args, fail, parser, ppo_train_config, subcommand_main, train_ppo_run)
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.progress import Progress, fmt_s
from rlbm_jax.queuepilot.study import DEFAULT_VARIANTS, load_trained
from rlbm_jax.study.plots import overall_bars
from rlbm_jax.study.stats import fmt_mean_se, per_config_rows

PROG = "queuepilot.py"
# ns3: the default test configurations (long flows, RTT ms, TCP); its classic AQMs' variants
# when the run's results.json has chosen none are `rlbm_jax.queuepilot.study.DEFAULT_VARIANTS`
NS3_CONFIGS = ("20:40:cubic", "20:40:newreno")


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the agent with PPO on the training mix")
    add_ppo_train_args(t, run_dir="runs/queuepilot", recipe=qp.PPO_RECIPE, episode_s=qp.EPISODE_S, step="5 ms")
    t.add_argument("--init-from", default=None,
                   help="trained.msgpack of an earlier run with the same seeds: continue from its networks and "
                        "observation statistics (fresh envs and optimiser moments; updates count on)")
    e = sub.add_parser("evaluate", help="judge the trained agent against the classic AQMs")
    add_eval_args(e, run_dir="runs/queuepilot", seconds=qp.EVAL_S, warmup_s=qp.EVAL_WARMUP_S,
                  test_seeds=len(qp.TEST_SEEDS), selection_seeds=len(qp.SELECTION_SEEDS))
    e.add_argument("--flows", type=int, nargs="+", default=list(qp.TEST_FLOWS))
    e.add_argument("--rtts-ms", type=float, nargs="+", default=[1000 * r for r in qp.TEST_RTTS_S])
    e.add_argument("--tcp", nargs="+", default=["cubic", "newreno"])
    e.add_argument("--chunk", type=int, default=50, help="runs per compiled batch")
    x, n = add_export_ns3(sub, run_dir="runs/queuepilot", seeds=3, seconds=qp.EVAL_S, warmup_s=qp.EVAL_WARMUP_S,
                          ns3_help="judge the exported agent inside ns-3 against the classic AQMs, beside JAX")
    n.add_argument("--configs", nargs="+", default=list(NS3_CONFIGS), metavar="N:RTT_MS:TCP",
                   help="test configurations: long flows, base RTT in ms, TCP (cubic or newreno)")
    n.add_argument("--variants", nargs="+", default=None,
                   help="the classic AQMs' variants (default: the 'chosen' of <run-dir>/results.json, else "
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
    """What the subcommand runs (`--print-config` prints it; train's config.json and the
    results.json of evaluate and ns3 hold it; export prints it): `cmd` and what
    `train_config`, `evaluate_config`, `queuepilot_ns3.export_config` or
    `queuepilot_ns3.ns3_config` resolve."""
    if a.cmd in ("export", "ns3"):
        from rlbm_jax.cli import queuepilot_ns3

        cfg = queuepilot_ns3.export_config(a) if a.cmd == "export" else queuepilot_ns3.ns3_config(a)
    else:
        cfg = train_config(a) if a.cmd == "train" else evaluate_config(a)
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
    configs = qp.train_configs()
    return {"run_dir": a.run_dir, "overwrite": a.overwrite, "ppo": ppo, "episode_s": a.episode_s,
            "seeds": list(range(a.seed, a.seed + a.num_seeds)), "configs": configs,
            "params": [config_record(kw) for kw in configs], "updates": a.updates, "chunk": a.chunk,
            "time_budget_s": a.time_budget_s, "init_from": a.init_from}


def train(a, cfg: dict, argv=None) -> int:
    return train_ppo_run(PROG, lambda: qp.make_ppo(cfg["ppo"], cfg["episode_s"])[0], a, cfg, TRAIN_FLAGS,
                         "QueuePilot-v0", init_from=a.init_from)


# ---- evaluation ------------------------------------------------------------------------
def _score(results) -> dict:
    out = {}
    for k in qp.SCORE_FIELDS:
        out[k] = qp.mean_se([r[k] for r in results])
    out["delay_ms"] = qp.mean_se([1e3 * r["queue_mean_pkts"] * r["_pkt_s"] for r in results])
    out["action_hist"] = np.mean([r["action_hist"] for r in results], axis=0).round(4).tolist()
    return out


def evaluate_config(a) -> dict:
    """What `evaluate` runs: the trained run (its PPO config and training seeds), the
    selection mix and seeds, the test configurations and seeds (`params`: every simulator
    parameter of the agent's run on each test configuration, `params.config_record`), the
    classic AQMs' variants, the run length and warm-up in seconds and steps, the batch
    size and where the results go."""
    run = Path(a.run_dir)
    trained = qp.trained_run(run)
    check_eval_args(a, test_seeds=len(qp.TEST_SEEDS), selection_seeds=len(qp.SELECTION_SEEDS))
    if a.chunk < 1:
        raise ValueError(f"--chunk must be >= 1, got {a.chunk}")
    test_cfgs = [(n, r / 1e3, t) for t in a.tcp for n in a.flows for r in a.rtts_ms]
    sel_cfgs = [(n, r, t) for t in qp.TRAIN_TCPS for n in qp.TRAIN_FLOWS for r in qp.TRAIN_RTTS_S]
    return {"run_dir": str(run), "out_dir": str(Path(a.out_dir or run)), "ppo": trained["ppo"],
            "episode_s": trained["episode_s"], "training_seeds": list(trained["seeds"]), "seconds": a.seconds,
            "warmup_s": a.warmup_s, "steps": int(round(a.seconds / qp.STEP_S)),
            "warmup_steps": int(round(a.warmup_s / qp.STEP_S)), "chunk": a.chunk,
            "selection_configs": [list(c) for c in sel_cfgs],
            "selection_seeds": list(qp.SELECTION_SEEDS[: a.selection_seeds]), "tcp": list(a.tcp),
            "flows": list(a.flows), "rtts_ms": list(a.rtts_ms), "test_configs": [list(c) for c in test_cfgs],
            "test_seeds": list(qp.TEST_SEEDS[: a.test_seeds]), "variants": list(qp.baseline_variants(100)),
            "params": [config_record(qp.config_kw(n, r, t, warmup_s=a.warmup_s)) for (n, r, t) in test_cfgs]}


def evaluate(a, cfg: dict, argv=None) -> int:
    run = Path(cfg["run_dir"])
    out = Path(cfg["out_dir"])
    try:
        ppo, params, stats, train_seeds, updates = load_trained(run)
    except ValueError as e:
        return fail(PROG, str(e))
    out.mkdir(parents=True, exist_ok=True)
    steps, warm = cfg["steps"], cfg["warmup_steps"]
    test_seeds = tuple(cfg["test_seeds"])
    actor = qp.lstm_actor(ppo)
    t0 = time.perf_counter()

    def runs_of(configs, seeds, overrides=None):
        return [(qp.config_kw(n, r, t, warmup_s=a.warmup_s, **(overrides(n, r, t) if overrides else {})), s)
                for (n, r, t) in configs for s in seeds]

    def buffer_of(n, r, t):
        return int(make_params(**qp.config_kw(n, r, t)).buffer_pkts)

    def variants(n, r, t):
        return qp.baseline_variants(buffer_of(n, r, t))

    names = cfg["variants"]
    # 1. selection: each classic AQM's variant with the best mean reward over the training mix
    sel_cfgs = [tuple(c) for c in cfg["selection_configs"]]
    bar = Progress(len(names), unit=" variants", label="select ")
    sel = {}
    for i, v in enumerate(names):
        res = qp.run_batch(runs_of(sel_cfgs, cfg["selection_seeds"], lambda n, r, t: variants(n, r, t)[v]), steps,
                           warm, chunk=cfg["chunk"])
        sel[v] = float(np.mean([x["reward"] for x in res]))
        bar.update(i + 1, extra=f"{v} {sel[v]:+.4f}")
    bar.close()
    chosen = {alg: max((v for v in names if qp.algorithm_of(v) == alg), key=lambda v: sel[v]) for alg in qp.ALGORITHMS}

    # 2. test grid, test seeds: every variant, and the agent of every training seed
    test_cfgs = [tuple(c) for c in cfg["test_configs"]]
    table = {}
    bar = Progress(len(names) + len(train_seeds), unit=" policies", label="test ")
    for i, v in enumerate(names):
        res = qp.run_batch(runs_of(test_cfgs, test_seeds, lambda n, r, t: variants(n, r, t)[v]), steps, warm,
                           chunk=cfg["chunk"])
        table[v] = res
        bar.update(i + 1, extra=v)
    for j, s in enumerate(train_seeds):
        args = qp.actor_args(ppo, jax.tree.map(lambda x: x[j], params), jax.tree.map(lambda x: x[j], stats))
        table[f"queuepilot-seed{s}"] = qp.run_batch(runs_of(test_cfgs, test_seeds), steps, warm, actor=actor,
                                                    args=args, chunk=cfg["chunk"])
        bar.update(len(names) + j + 1, extra=f"agent seed {s}")
    bar.close()
    pkt_s = {}
    for name, res in table.items():
        for k, x in enumerate(res):
            c = test_cfgs[k // len(test_seeds)]
            if c not in pkt_s:
                pk = make_params(**qp.config_kw(*c))
                pkt_s[c] = float(pk.data_pkt_bits / pk.bottleneck_rate_bps)
            x["_pkt_s"] = pkt_s[c]
            x["_cfg"] = c
    report = _report(table, test_cfgs, test_seeds, train_seeds, chosen, sel, names, updates, a)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["config"] = cfg
    jsonio.write(out / "results.json", report)
    (out / "RESULTS.md").write_text(_markdown(report))
    _plots(report, out)
    print(f"wrote {out / 'results.json'}, {out / 'RESULTS.md'} ({fmt_s(report['wall_s'])})", file=sys.stderr)
    return 0


def _agent_over_seeds(table, train_seeds, cfg=None):
    """The agent's score as a recipe: each training seed's mean over test runs, then mean
    and standard error over training seeds."""
    per = []
    for s in train_seeds:
        res = [x for x in table[f"queuepilot-seed{s}"] if cfg is None or x["_cfg"] == cfg]
        per.append(_score(res))
    out = {}
    for k in (*qp.SCORE_FIELDS, "delay_ms"):
        out[k] = qp.mean_se([p[k][0] for p in per])
    out["action_hist"] = np.mean([p["action_hist"] for p in per], axis=0).round(4).tolist()
    out["per_training_seed"] = {str(s): {k: p[k][0] for k in ("reward", "util_wire", "drop_rate", "delay_ms")}
                                for s, p in zip(train_seeds, per)}
    return out


def _report(table, test_cfgs, test_seeds, train_seeds, chosen, sel, names, updates, a) -> dict:
    overall = {v: _score(table[v]) for v in names}
    overall["queuepilot"] = _agent_over_seeds(table, train_seeds)
    per_cfg = {}
    for cfg in test_cfgs:
        key = f"N={cfg[0]} rtt={cfg[1] * 1e3:g}ms {cfg[2]}"
        per_cfg[key] = {v: _score([x for x in table[v] if x["_cfg"] == cfg]) for v in names}
        per_cfg[key]["queuepilot"] = _agent_over_seeds(table, train_seeds, cfg)
    fct = {v: qp.fct_by_size(table[v], a.warmup_s) for v in names}
    fct["queuepilot"] = qp.fct_by_size([x for s in train_seeds for x in table[f"queuepilot-seed{s}"]], a.warmup_s)
    return {"test_configs": [list(c) for c in test_cfgs], "test_seeds": list(test_seeds),
            "selection_seeds": list(qp.SELECTION_SEEDS[: a.selection_seeds]), "training_seeds": list(train_seeds),
            "agent_updates": updates, "seconds": a.seconds, "warmup_s": a.warmup_s,
            "selection_reward": sel, "chosen": chosen, "variants": names, "overall": overall,
            "per_config": per_cfg, "fct_by_size": fct, "device": jax.devices()[0].device_kind}


_fmt = lambda ms, scale=1.0, digits=3: fmt_mean_se(ms, scale, digits)  # noqa: E731


def _markdown(rep) -> str:
    L = ["# QueuePilot at 1/10 scale against the classic AQMs", "",
         f"Agent: {len(rep['training_seeds'])} training seeds ({rep['agent_updates']} PPO updates each); mean ± "
         f"standard error over training seeds of each seed's mean over the test runs. Classic AQMs: mean ± s.e. "
         f"over the test runs. Test seeds {rep['test_seeds']}, selection seeds {rep['selection_seeds']}; "
         f"{rep['seconds']:g} s per run, the first {rep['warmup_s']:g} s left out.", "",
         "Each classic AQM's variant chosen on the selection seeds (mean reward over the training mix): "
         + ", ".join(f"{k}: {v}" for k, v in rep["chosen"].items()) + ".", "",
         "## Overall (every test configuration)", "",
         "| policy | reward | steps with a drop | utilisation | drop rate | mark rate | queueing delay (ms) |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
    order = ["queuepilot"] + [v for v in rep["variants"]]
    for v in order:
        o = rep["overall"][v]
        star = " (chosen)" if v in rep["chosen"].values() else ""
        L.append(f"| {v}{star} | {_fmt(o['reward'])} | {_fmt(o['drop_steps'])} | {_fmt(o['util_wire'])} | "
                 f"{_fmt(o['drop_rate'], 100, 3)} % | {_fmt(o['mark_rate'], 100, 2)} % | {_fmt(o['delay_ms'], 1, 2)} |")
    L += ["", "## p99 flow completion time by flow size (web-search flows, pooled over test runs)", "",
          "| policy | " + " | ".join(f"{b} (flows)" for b in rep["fct_by_size"]["queuepilot"]) + " |",
          "| --- |" + " --- |" * len(rep["fct_by_size"]["queuepilot"])]
    for v in ["queuepilot"] + list(rep["chosen"].values()):
        f = rep["fct_by_size"][v]
        L.append(f"| {v} | " + " | ".join(f"{x['fct_p99_s'] * 1e3:.1f} ms ({x['flows']})" for x in f.values()) + " |")
    L += ["", "## Reward per test configuration (the chosen variant of each classic AQM)", "",
          "| configuration | queuepilot | " + " | ".join(rep["chosen"].values()) + " | agent best? |",
          "| --- | --- |" + " --- |" * len(rep["chosen"]) + " --- |"]
    rows, wins = per_config_rows(rep["per_config"], "queuepilot", "reward", list(rep["chosen"].values()), _fmt)
    L += rows
    L += ["", f"The agent's mean reward is above every chosen classic AQM's in {wins} of {len(rep['per_config'])} "
              "test configurations.", ""]
    return "\n".join(L) + "\n"


def _plots(rep, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = ["queuepilot"] + list(rep["chosen"].values())
    overall_bars(rep["overall"], pols, (("reward", "reward per step", 1), ("util_wire", "utilisation", 1),
                  ("drop_rate", "drop rate (%)", 100), ("delay_ms", "queueing delay (ms)", 1)), out / "overall.png")
    buckets = list(rep["fct_by_size"]["queuepilot"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    w = 0.8 / len(pols)
    for i, p in enumerate(pols):
        ax.bar(np.arange(len(buckets)) + i * w, [rep["fct_by_size"][p][b]["fct_p99_s"] * 1e3 for b in buckets],
               w, label=p)
    ax.set_xticks(np.arange(len(buckets)) + 0.4 - w / 2, buckets)
    ax.set_ylabel("p99 FCT (ms)")
    vals = [rep["fct_by_size"][p][b]["fct_p99_s"] for p in pols for b in buckets]
    if any(v == v and v > 0 for v in vals):
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fct_by_size.png", dpi=120)
    plt.close(fig)


def study_ns3(cfg: dict) -> int:
    """`study.py queuepilot ns3`: this script's `ns3` on the kit's run, with the variants
    its selection chose (`pipeline.ns3_config`)."""
    argv = ["ns3", "--run-dir", cfg["run_dir"], "--out-dir", cfg["out_dir"], "--seeds", str(cfg["seeds"]),
            "--jobs", str(cfg["jobs"])]
    return main(argv + (["--variants", *cfg["chosen"]] if cfg["chosen"] else []))


# each subcommand's function (a "module:function" is imported when it runs)
COMMANDS = dict(train=train, evaluate=evaluate, export="rlbm_jax.cli.queuepilot_ns3:export", ns3="rlbm_jax.cli.queuepilot_ns3:ns3")


def main(argv=None):
    return subcommand_main(PROG, build_parser, run_config, COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
