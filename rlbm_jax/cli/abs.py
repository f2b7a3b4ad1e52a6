"""ABS (ABSRL, `ABS-trace-v0`) on Env 2 with a capacity trace: train the buffer-sizing agent
with PPO (an LSTM) on the training traces, then judge it against fixed sizes, BDP rules, Cocoa,
RED and CoDel on held-out seeds and traces (`rlbm_jax.abs.study` states the scaling, the
baselines and the seeds), and inside ns-3.37.

    python scripts/abs.py train --run-dir runs/abs --num-envs 64 --num-seeds 3 --time-budget-s 600
    python scripts/abs.py evaluate --run-dir runs/abs
    python scripts/abs.py export --run-dir runs/abs
    python scripts/abs.py ns3 --run-dir runs/abs --seeds 2

train writes config.json, metrics.csv (one row per seed and update; its reward is the QoE /
100), curves.png and trained.msgpack; it stops at --updates or when --time-budget-s is spent
(measured after compilation).  evaluate picks each baseline family's best variant by mean QoE
on the training traces with the selection seeds, then runs every variant and every training
seed's agent on the test traces with the test seeds and writes results.json, RESULTS.md (QoE,
utilisation, mean queueing delay, throughput and mean buffer size, mean ± s.e.: over test runs
for a baseline, over training seeds for the agent) and plots.  export writes policy_seed<s>/
and policy_seed<s>.onnx per training seed, checked against the trained network.  ns3 drives
the exported agents inside ns-3.37 in lock-step (the scenario's rl-size policy, the window of 5
observations kept by the driver, the LSTM state carried) and runs the baselines there (fixed
sizes and the static BDP rules as the drop-tail limit, ns-3's own RED and CoDel), scored by the
formulation's QoE from ns-3's interval records, beside the same runs in JAX.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.abs import study as S
from rlbm_jax.abs.ns3 import DEFAULT_NS3_BASELINES
from rlbm_jax.cli import (add_eval_args, add_export_ns3, add_ppo_train_args, add_print_config, check_eval_args, fail,
                          parser, ppo_train_config, subcommand_main, train_ppo_run)
from rlbm_jax.progress import Progress, fmt_s
from rlbm_jax.study.plots import overall_bars
from rlbm_jax.study.stats import fmt_mean_se, per_config_rows

PROG = "abs.py"


def build_parser():
    ap = parser(__doc__, PROG, print_config=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the agent with PPO on the training traces")
    add_ppo_train_args(t, run_dir="runs/abs", recipe=S.PPO_RECIPE, episode_s=S.EPISODE_S, step="0.1 s")
    t.add_argument("--traces", nargs="+", default=list(S.TRAIN_TRACES), help="training traces (study.trace names)")
    t.add_argument("--tcp", nargs="+", default=list(S.TRAIN_TCPS))
    e = sub.add_parser("evaluate", help="judge the trained agent against the buffer-sizing baselines")
    add_eval_args(e, run_dir="runs/abs", seconds=S.EVAL_S, warmup_s=S.EVAL_WARMUP_S, test_seeds=len(S.TEST_SEEDS),
                  selection_seeds=len(S.SELECTION_SEEDS))
    e.add_argument("--selection-traces", type=int, default=None,
                   help="how many of the training traces the selection runs on (the first K; default 2, at most "
                        "the run's)")
    e.add_argument("--traces", nargs="+", default=list(S.TEST_TRACES), help="test traces (held out)")
    e.add_argument("--tcp", nargs="+", default=list(S.TRAIN_TCPS))
    e.add_argument("--baselines", nargs="+", default=None, help="baselines to run (default: every one of "
                                                                 "study.baselines())")
    e.add_argument("--abssl-rounds", type=int, default=4, help="ABSSL's in-place training rounds")
    e.add_argument("--chunk", type=int, default=40, help="runs per compiled batch")
    x, n = add_export_ns3(sub, run_dir="runs/abs", seeds=2, seconds=20.0, warmup_s=S.EVAL_WARMUP_S,
                          ns3_help="judge the exported agent and the baselines inside ns-3, beside JAX")
    n.add_argument("--traces", nargs="+", default=["wifi"], help="test traces (no outage: ns-3 refuses rate 0)")
    n.add_argument("--tcp", nargs="+", default=["newreno"])
    n.add_argument("--baselines", nargs="+", default=None,
                   help="baselines to run (default: Fix(10), Fix(100), bdp-sqrt and the fix, red and codel "
                        "variants chosen in <run-dir>/results.json, else " + ", ".join(DEFAULT_NS3_BASELINES) + ")")
    n.add_argument("--agent-only", action="store_true", help="no baselines")
    n.add_argument("--no-jax", action="store_true", help="leave out the JAX side")
    n.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 even where a cached run matches")
    for p in (t, e, x, n):
        add_print_config(p)
    return ap




# ---- training --------------------------------------------------------------------------
TRAIN_FLAGS = {"num_envs": "--num-envs", "num_steps": "--num-steps", "total_updates": "--updates", "lr": "--lr"}


def train_config(a) -> dict:
    ppo = ppo_train_config(a, S.PPO_RECIPE, TRAIN_FLAGS)
    for tr in a.traces:
        S.trace(tr)
    overlap = sorted(set(a.traces) & set(S.TEST_TRACES))
    if overlap:
        raise ValueError(f"--traces: {overlap} are test traces (held out); train on others")
    return {"run_dir": a.run_dir, "overwrite": a.overwrite, "ppo": ppo, "episode_s": a.episode_s,
            "seeds": list(range(a.seed, a.seed + a.num_seeds)), "train_traces": list(a.traces),
            "train_tcps": list(a.tcp), "train_offsets_s": list(S.TRAIN_OFFSETS_S), "reward_scale": S.REWARD_SCALE, "updates": a.updates, "chunk": a.chunk,
            "time_budget_s": a.time_budget_s}


def train(a, cfg: dict, argv=None) -> int:
    configs = S.train_configs(cfg["train_traces"], cfg["train_tcps"], cfg["train_offsets_s"])
    return train_ppo_run(PROG, lambda: S.make_ppo(cfg["ppo"], cfg["episode_s"], configs)[0], a, cfg, TRAIN_FLAGS,
                         "ABS-trace-v0", reward_name="QoE/100")


# ---- evaluation ------------------------------------------------------------------------
def evaluate_config(a) -> dict:
    run = Path(a.run_dir)
    trained = S.trained_run(run)
    check_eval_args(a, test_seeds=len(S.TEST_SEEDS), selection_seeds=len(S.SELECTION_SEEDS))
    if a.selection_traces is None:
        a.selection_traces = min(2, len(trained["train_traces"]))
    if not 1 <= a.selection_traces <= len(trained["train_traces"]):
        raise ValueError(f"--selection-traces must be in 1..{len(trained['train_traces'])}, got {a.selection_traces}")
    for tr in a.traces:
        S.trace(tr)
    seen = sorted(set(a.traces) & set(trained["train_traces"]))
    if seen:
        raise ValueError(f"--traces: {seen} were trained on; the test traces must be held out")
    known = list(S.baselines()) + ["abssl"]
    unknown = [v for v in (a.baselines or []) if v not in known]
    if unknown:
        raise ValueError(f"--baselines: unknown {unknown}; choose among {known}")
    sel = [[t, c] for c in trained.get("train_tcps", S.TRAIN_TCPS) for t in trained["train_traces"][: a.selection_traces]]
    return {"run_dir": str(run), "out_dir": str(Path(a.out_dir or run)), "ppo": trained["ppo"],
            "training_seeds": list(trained["seeds"]), "train_traces": trained["train_traces"],
            "seconds": a.seconds, "warmup_s": a.warmup_s, "steps": int(round(a.seconds / S.STEP_S)),
            "warmup_steps": int(round(a.warmup_s / S.STEP_S)), "chunk": a.chunk, "selection_configs": sel,
            "selection_seeds": list(S.SELECTION_SEEDS[: a.selection_seeds]),
            "test_configs": [[t, c] for c in a.tcp for t in a.traces],
            "test_seeds": list(S.TEST_SEEDS[: a.test_seeds]), "baselines": list(a.baselines or known),
            "train_tcps": list(trained.get("train_tcps", S.TRAIN_TCPS)), "abssl_rounds": a.abssl_rounds}


def evaluate(a, cfg: dict, argv=None) -> int:
    run, out = Path(cfg["run_dir"]), Path(cfg["out_dir"])
    try:
        ppo, params, stats, train_seeds, updates = S.load_trained(run)
    except ValueError as e:
        return fail(PROG, str(e))
    out.mkdir(parents=True, exist_ok=True)
    steps, warm, chunk = cfg["steps"], cfg["warmup_steps"], cfg["chunk"]
    base = S.baselines()
    t0 = time.perf_counter()

    def runs_of(configs, seeds, overrides):
        return [(S.run_kw(t, c, s, warmup_s=cfg["warmup_s"], **overrides), s) for (t, c) in configs for s in seeds]

    names = cfg["baselines"]
    if "abssl" in names:  # ABSSL trained in place on the training traces with the training seeds
        tc = time.perf_counter()
        abssl_cfgs = [S.config_kw(t, c, o) for c in cfg["train_tcps"] for t in cfg["train_traces"]
                      for o in S.TRAIN_OFFSETS_S[::2]]
        abssl_params, abssl_hist = S.train_abssl(abssl_cfgs, train_seeds, rounds=cfg["abssl_rounds"],
                                                 log=lambda h: print(f"abssl round {h}", file=sys.stderr))
        abssl_hist = {"rounds": abssl_hist, "runs_per_round": len(abssl_cfgs) * len(train_seeds),
                      "wall_s": round(time.perf_counter() - tc, 1)}
        base["abssl"] = ({}, None, jnp.asarray(S.ABSSL_START_PKTS, jnp.float32))
    else:
        abssl_params, abssl_hist = None, None

    def actor_of(v):
        ov, fn, c0 = base[v]
        if v == "abssl":
            return ov, S.abssl_actor(), {"abssl": abssl_params, "carry0": c0}
        return ov, S.baseline_actor(fn), {"carry0": c0}

    sel_cfgs = [tuple(c) for c in cfg["selection_configs"]]
    bar = Progress(len(names), unit=" baselines", label="select ")
    sel = {}
    for i, v in enumerate(names):
        ov, act, args = actor_of(v)
        res = S.run_batch(runs_of(sel_cfgs, cfg["selection_seeds"], ov), steps, warm, act, args, chunk, key=v)
        sel[v] = float(np.mean([x["qoe"] for x in res]))
        bar.update(i + 1, extra=f"{v} {sel[v]:.2f}")
    bar.close()
    chosen = {}
    for v in names:
        f = S.family_of(v)
        if f not in chosen or sel[v] > sel[chosen[f]]:
            chosen[f] = v
    # the agent's training seed to report alone: the best by mean QoE on the selection runs
    actor = S.lstm_actor(ppo)
    agent_sel = {}
    for j, s in enumerate(train_seeds):
        args = S.actor_args(ppo, jax.tree.map(lambda x: x[j], params), jax.tree.map(lambda x: x[j], stats))
        res = S.run_batch(runs_of(sel_cfgs, cfg["selection_seeds"], {}), steps, warm, actor, args, chunk)
        agent_sel[str(s)] = float(np.mean([x["qoe"] for x in res]))

    test_cfgs = [tuple(c) for c in cfg["test_configs"]]
    table = {}
    bar = Progress(len(names) + len(train_seeds), unit=" policies", label="test ")
    for i, v in enumerate(names):
        ov, act, args = actor_of(v)
        res = S.run_batch(runs_of(test_cfgs, cfg["test_seeds"], ov), steps, warm, act, args, chunk, key=v)
        for k, x in enumerate(res):
            x["_cfg"] = test_cfgs[k // len(cfg["test_seeds"])]
        table[v] = res
        bar.update(i + 1, extra=v)
    for j, s in enumerate(train_seeds):
        args = S.actor_args(ppo, jax.tree.map(lambda x: x[j], params), jax.tree.map(lambda x: x[j], stats))
        res = S.run_batch(runs_of(test_cfgs, cfg["test_seeds"], {}), steps, warm, actor, args, chunk)
        for k, x in enumerate(res):
            x["_cfg"] = test_cfgs[k // len(cfg["test_seeds"])]
        table[f"absrl-seed{s}"] = res
        bar.update(len(names) + j + 1, extra=f"agent seed {s}")
    bar.close()
    report = _report(table, test_cfgs, cfg, train_seeds, chosen, sel, agent_sel, names, updates)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["abssl_training"] = abssl_hist
    report["config"] = cfg
    jsonio.write(out / "results.json", report)
    (out / "RESULTS.md").write_text(markdown(report))
    _plots(report, table, train_seeds, out)
    print(markdown(report))
    print(f"wrote {out / 'results.json'}, {out / 'RESULTS.md'} ({fmt_s(report['wall_s'])})", file=sys.stderr)
    return 0


def _agent(table, train_seeds, cfg=None) -> dict:
    per = [S.score([x for x in table[f"absrl-seed{s}"] if cfg is None or x["_cfg"] == cfg]) for s in train_seeds]
    out = S.mean_over_seeds(per)
    out["per_training_seed"] = {str(s): {k: p[k][0] for k in ("qoe", "util_wire", "delay_s", "size_mean_pkts")}
                                for s, p in zip(train_seeds, per)}
    return out


def _report(table, test_cfgs, cfg, train_seeds, chosen, sel, agent_sel, names, updates) -> dict:
    overall = {v: S.score(table[v]) for v in names}
    overall["absrl"] = _agent(table, train_seeds)
    per_cfg = {}
    for c in test_cfgs:
        key = f"{c[0]} {c[1]}"
        per_cfg[key] = {v: S.score([x for x in table[v] if x["_cfg"] == c]) for v in names}
        per_cfg[key]["absrl"] = _agent(table, train_seeds, c)
    return {"test_configs": [list(c) for c in test_cfgs], "test_seeds": cfg["test_seeds"],
            "selection_seeds": cfg["selection_seeds"], "selection_configs": cfg["selection_configs"],
            "training_seeds": list(train_seeds), "agent_updates": updates, "seconds": cfg["seconds"],
            "warmup_s": cfg["warmup_s"], "selection_qoe": sel, "agent_selection_qoe": agent_sel, "chosen": chosen,
            "baselines": names, "overall": overall, "per_config": per_cfg, "device": jax.devices()[0].device_kind}


_fmt = lambda ms, scale=1.0, digits=2: fmt_mean_se(ms, scale, digits)  # noqa: E731


def markdown(rep) -> str:
    L = ["# ABS (ABSRL) on Env 2 with a capacity trace, against the buffer-sizing baselines", "",
         f"Agent: {len(rep['training_seeds'])} training seeds ({rep['agent_updates']} PPO updates each), mean ± "
         "standard error over training seeds of each seed's mean over the test runs; baselines: mean ± s.e. over "
         f"the test runs. Test traces and TCPs {', '.join(' '.join(c) for c in rep['test_configs'])} (held out), "
         f"test seeds {rep['test_seeds']}; selection on {', '.join(' '.join(c) for c in rep['selection_configs'])} "
         f"with seeds {rep['selection_seeds']}. {rep['seconds']:g} s per run, the first {rep['warmup_s']:g} s left "
         "out. QoE is the paper's QoE2 (Eq. 7-9, Env 2's curve, 0-100) per 0.1 s interval, averaged; utilisation "
         "is the packets sent over the packets the trace offered; the queueing delay the interval's average queue "
         "over the rate offered.", "",
         "Each family's variant chosen on the selection runs (mean QoE): "
         + ", ".join(f"{k}: {v}" for k, v in rep["chosen"].items()) + ".", "",
         "## Overall (every test trace and TCP)", "",
         "| policy | QoE | utilisation | queueing delay (ms) | throughput (Mbit/s) | drop rate (%) | mean buffer (pkts) |",
         "| --- | --- | --- | --- | --- | --- | --- |"]
    chosen = set(rep["chosen"].values())
    for v in ["absrl"] + list(rep["baselines"]):
        o = rep["overall"][v]
        star = " (chosen)" if v in chosen else ""
        L.append(f"| {v}{star} | {_fmt(o['qoe'])} | {_fmt(o['util_wire'], 1, 3)} | {_fmt(o['delay_s'], 1e3, 1)} | "
                 f"{_fmt(o['throughput_mbps'])} | {_fmt(o['drop_rate'], 100, 2)} | {_fmt(o['size_mean_pkts'], 1, 1)} |")
    L += ["", "## QoE per test trace (the chosen variant of each family)", "",
          "| trace, TCP | absrl | " + " | ".join(rep["chosen"].values()) + " | agent best? |",
          "| --- | --- |" + " --- |" * len(rep["chosen"]) + " --- |"]
    rows, wins = per_config_rows(rep["per_config"], "absrl", "qoe", list(rep["chosen"].values()), _fmt)
    L += rows
    o = rep["overall"]
    best_b = max(rep["chosen"].values(), key=lambda v: o[v]["qoe"][0])
    ratio = {v: o["absrl"]["qoe"][0] / max(o[v]["qoe"][0], 1e-9) for v in rep["baselines"]}
    L += ["", f"The agent's mean QoE is above every chosen baseline's in {wins} of {len(rep['per_config'])} test "
              f"configurations. Overall the agent's QoE is {o['absrl']['qoe'][0]:.2f}, the best chosen baseline's "
              f"({best_b}) {o[best_b]['qoe'][0]:.2f}; the agent's QoE over each baseline's ranges from "
              f"{min(ratio.values()):.2f}x to {max(ratio.values()):.2f}x.", ""]
    return "\n".join(L) + "\n"


def _plots(rep, table, train_seeds, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = ["absrl"] + list(rep["chosen"].values())
    overall_bars(rep["overall"], pols, (("qoe", "QoE (0-100)", 1), ("util_wire", "utilisation", 1), ("delay_s", "queueing delay (ms)", 1e3)), out / "overall.png")
    # one test run's buffer size over time, against the capacity the trace offered
    first = table[f"absrl-seed{train_seeds[0]}"][0]
    t = np.arange(len(first["size_trace"])) * S.STEP_S
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.plot(t, first["size_trace"], label=f"absrl seed {train_seeds[0]}", color="C3")
    others = [x for x in rep["chosen"].values() if x.startswith(("bdp-resize", "cocoa", "abssl"))]
    for v, col in zip(others, ("C0", "C1", "C2", "C4", "C5", "C6")):
        ax.plot(t, table[v][0]["size_trace"], label=v, lw=0.8, color=col)
    ax.set_ylabel("buffer size (packets)")
    ax.set_xlabel("time (s)")
    ax2 = ax.twinx()
    ax2.plot(t, first["capacity_trace_mbps"], color="0.6", lw=0.6, label="capacity")
    ax2.set_ylabel("capacity offered (Mbit/s)")
    ax.set_title(f"{' '.join(first['_cfg'])}, test seed {rep['test_seeds'][0]}")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "buffer_size.png", dpi=120)
    plt.close(fig)


def run_config(a) -> dict:
    if a.cmd in ("export", "ns3"):
        from rlbm_jax.abs import ns3 as abs_ns3

        cfg = abs_ns3.export_config(a) if a.cmd == "export" else abs_ns3.ns3_config(a)
    else:
        cfg = train_config(a) if a.cmd == "train" else evaluate_config(a)
    if getattr(a, "tcp", None) is not None:
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
