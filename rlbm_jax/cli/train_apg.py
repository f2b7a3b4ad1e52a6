"""Train QueuePilot's marking policy by analytic policy gradients through the fluid model,
and judge it on the packet simulator against the PPO agent and the classic AQMs.

    python scripts/train_apg.py --out results/apg

1. Training (`rlbm_jax.apg`), one run per `--seeds` value: a deterministic MLP (the
   QueuePilot observation -> the marking probability, `QueuePilot-continuous-v0`) trained
   by backpropagating `--horizon`-step rollouts of the fluid model through its weights.
   The mix is QueuePilot's training mix (`rlbm_jax.queuepilot.study`: 10, 20 and 25 flows,
   RTTs 20-80 ms, CUBIC and NewReno) with long flows only (the fluid model has no short
   flows), each configuration at several start spreads
   (`--spreads`) so that the envs are not in phase.
2. Evaluation on the packet simulator with the study's protocol (`--eval-set selection`:
   its training configurations and selection seeds instead): its 18 test
   configurations (10, 20, 30 flows; 20, 40, 100 ms; CUBIC and NewReno) with the web-search
   flows at `--eval-load` (0.1, the study's, which the fluid model never saw), the test
   seeds, 15 s runs with 5 s of warm-up, the formulation's own reward (-1 on a drop, else
   U^2 / sqrt(1 + D)).  Each policy is also exported to ONNX.
3. The comparison with the committed PPO study (`--ppo-results`, its results.json and
   train_summary.json): reward, steps with a drop, utilisation, drops, marks and delay as
   mean ± s.e. over training seeds, with the environment steps and wall time each took.

Writes RESULTS.md, results.json, curves.png (the fluid surrogate reward per update),
policy_seed<S>/ (+ .onnx), command.txt and config.json (`run_config`, which
--print-config prints).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import apg, jsonio
from rlbm_jax.cli import fail, parser, printed_config
from rlbm_jax.env.params import config_record, make_params, stack_params
from rlbm_jax.progress import Progress
from rlbm_jax.queuepilot import study as qp

PROG = "train_apg.py"
FORMULATION = "QueuePilot-continuous-v0"
TRAIN_LOAD = 0.0  # the fluid model runs long-lived flows only: training sees no web-search flows
FIELDS = ("reward", "drop_steps", "util_wire", "drop_rate", "mark_rate", "delay_ms")


def build_parser():
    ap = parser(__doc__, PROG)
    d = apg.APGConfig()
    ap.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12], help="training seeds (one run each)")
    ap.add_argument("--updates", type=int, default=d.updates, help="gradient updates per run")
    ap.add_argument("--horizon", type=int, default=d.horizon, help="agent steps backpropagated per update")
    ap.add_argument("--episode-steps", type=int, default=2000, help="steps before the fluid states restart from t = 0 "
                                                                    "(a multiple of --horizon; 2000 = 10 s)")
    ap.add_argument("--lr", type=float, default=d.lr, help="Adam's learning rate")
    ap.add_argument("--hidden", type=int, nargs="+", default=list(d.hidden), help="hidden layer sizes (tanh)")
    ap.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm, help="gradient clipping (global norm)")
    ap.add_argument("--drop-width-pkts", type=float, default=d.drop_width_pkts,
                    help="width of the smoothed drop penalty in the surrogate reward (packets)")
    ap.add_argument("--spreads", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0],
                    help="long-flow start spreads (s): every training configuration at each")
    ap.add_argument("--eval-load", type=float, default=0.1, help="web-search load of the packet evaluation")
    ap.add_argument("--eval-set", choices=("test", "selection"), default="test",
                    help="test: the study's 18 test configurations and test seeds; selection: its 24 training "
                         "configurations and selection seeds (to choose a recipe without the test data)")
    ap.add_argument("--eval-seeds", type=int, default=3, help=f"seeds of the evaluation set (the first of "
                                                             f"{list(qp.TEST_SEEDS)}, or of {list(qp.SELECTION_SEEDS)})")
    ap.add_argument("--eval-seconds", type=float, default=qp.EVAL_S, help="each evaluation run's length (s)")
    ap.add_argument("--eval-warmup-s", type=float, default=qp.EVAL_WARMUP_S, help="left out of the evaluation")
    ap.add_argument("--chunk", type=int, default=54, help="packet runs per batch")
    ap.add_argument("--ppo-results", default="results/queuepilot", help="the committed PPO study to compare with")
    ap.add_argument("--out", default="results/apg", help="output directory")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return ap


def train_groups(a):
    """[(tcp, flows, [make_params kwargs of each env])]: the study's training mix, long flows
    only, each configuration at every start spread."""
    out = []
    for t in qp.TRAIN_TCPS:
        for n in qp.TRAIN_FLOWS:
            out.append((t, n, [qp.config_kw(n, r, t, load=TRAIN_LOAD, long_flow_start_spread_s=sp)
                               for r in qp.TRAIN_RTTS_S for sp in a.spreads]))
    return out


def apg_config(a, seed: int) -> apg.APGConfig:
    return apg.APGConfig(hidden=tuple(a.hidden), lr=a.lr, horizon=a.horizon, updates=a.updates,
                         episode_steps=a.episode_steps, max_grad_norm=a.max_grad_norm,
                         drop_width_pkts=a.drop_width_pkts, seed=seed)


def plan(a) -> dict:
    """run_config(a); a ValueError names a bad option."""
    pool = qp.TEST_SEEDS if a.eval_set == "test" else qp.SELECTION_SEEDS
    if not 1 <= a.eval_seeds <= len(pool):
        raise ValueError(f"--eval-seeds must be in 1..{len(pool)}, got {a.eval_seeds}")
    if not a.eval_seconds > a.eval_warmup_s >= 0:
        raise ValueError(f"--eval-seconds ({a.eval_seconds}) must exceed --eval-warmup-s ({a.eval_warmup_s}) >= 0")
    if a.chunk < 1 or not a.spreads or min(a.spreads) < 0:
        raise ValueError("--chunk must be >= 1 and --spreads non-negative")
    if len(set(a.seeds)) != len(a.seeds):
        raise ValueError(f"--seeds must differ, got {a.seeds}")
    cfgs = [apg_config(a, s) for s in a.seeds]  # refuses bad values by name
    groups = train_groups(a)
    if a.eval_set == "test":
        test_cfgs = [(n, r, t) for t in qp.TRAIN_TCPS for n in qp.TEST_FLOWS for r in (0.02, 0.04, 0.10)]
    else:
        test_cfgs = [(n, r, t) for t in qp.TRAIN_TCPS for n in qp.TRAIN_FLOWS for r in qp.TRAIN_RTTS_S]
    return {"formulation": FORMULATION, "apg": {k: (list(v) if isinstance(v, tuple) else v)
                                                for k, v in cfgs[0].__dict__.items() if k != "seed"},
            "training_seeds": list(a.seeds), "step_s": qp.STEP_S,
            "train_groups": [{"tcp": t, "flows": n, "envs": len(kws), "params": [config_record(kw) for kw in kws]}
                             for t, n, kws in groups],
            "spreads_s": list(a.spreads), "train_load": TRAIN_LOAD, "eval_load": a.eval_load,
            "test_configs": [list(c) for c in test_cfgs], "test_seeds": list(pool[:a.eval_seeds]), "eval_set": a.eval_set,
            "eval_seconds": a.eval_seconds, "eval_warmup_s": a.eval_warmup_s, "chunk": a.chunk,
            "eval_params": [config_record(qp.config_kw(n, r, t, load=a.eval_load, warmup_s=a.eval_warmup_s))
                            for n, r, t in test_cfgs],
            "ppo_results": str(a.ppo_results), "out": str(a.out), "progress": not a.no_progress}


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): the APG
    settings and training seeds, every training env's parameters by group, the evaluation's
    configurations, seeds, load and length, the PPO study compared with, the outputs."""
    return plan(a)


def _actor(args, carry, obs, state, first, ep):
    """The APG policy as an actor of `rlbm_jax.study.rollout` (stateless)."""
    return carry, apg.act(args["weights"], obs)


def evaluate_policy(weights, cfg, a, progress=None):
    """The study's packet evaluation of one weight set: one result dict per (config, seed)."""
    runs = [(qp.config_kw(n, r, t, load=a.eval_load, warmup_s=a.eval_warmup_s), s)
            for n, r, t in cfg["test_configs"] for s in cfg["test_seeds"]]
    steps, warm = int(round(a.eval_seconds / qp.STEP_S)), int(round(a.eval_warmup_s / qp.STEP_S))
    from rlbm_jax.env import formulations

    res = qp.run_batch(runs, steps, warm, actor=_actor, args={"weights": weights, "carry0": ()}, chunk=a.chunk,
                       formulation=formulations.get(FORMULATION), progress=progress)
    for (kw, _), x in zip(runs, res):
        p = make_params(**kw)
        x["delay_ms"] = 1e3 * float(x["queue_mean_pkts"]) * float(p.data_pkt_bits / p.bottleneck_rate_bps)
    return res


def mean_se(v):
    return qp.mean_se(v)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    try:
        cfg = plan(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    from rlbm_jax.env.fluid_env import FluidEnv
    from rlbm_jax.onnx_policy import to_onnx

    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text("python scripts/train_apg.py " + " ".join(argv) + "\n")
    jsonio.write(out / "config.json", cfg)
    groups = []
    for t, n, kws in train_groups(a):
        plist = [make_params(**kw) for kw in kws]
        batch = stack_params(plist)
        env = FluidEnv(plist[0], FORMULATION, agent_interval_s=qp.STEP_S, episode_s=qp.EPISODE_S, batch=batch)
        groups.append((env, env.default_params, batch))
    runs = {}
    for s in a.seeds:
        bar = None if a.no_progress else Progress(a.updates, unit=" updates", label=f"APG seed {s} ")
        r = apg.train(groups, apg_config(a, s), progress=bar)
        if bar is not None:
            bar.close()
        pdir = out / f"policy_seed{s}"
        apg.save(pdir, r["weights"], groups[0][0], extra={"trainer": "apg", "apg": cfg["apg"], "seed": s})
        # the interval the envs ran (whole ticks), which the ONNX judges check against theirs
        to_onnx(pdir, out / f"policy_seed{s}.onnx",
                agent_interval_s=float(np.max(np.asarray(groups[0][0].default_params.agent_interval_s))))
        runs[s] = r
    evals = {}
    for s in a.seeds:
        n_runs = len(cfg["test_configs"]) * len(cfg["test_seeds"])
        bar = None if a.no_progress else Progress(n_runs, unit=" runs", label=f"packet evaluation seed {s} ")
        t0 = time.perf_counter()
        evals[s] = evaluate_policy(runs[s]["weights"], cfg, a, progress=None if bar is None else bar.update)
        runs[s]["eval_wall_s"] = time.perf_counter() - t0
        if bar is not None:
            bar.close()
    report = build_report(cfg, runs, evals, a)
    jsonio.write(out / "results.json", report)
    text = markdown(report, argv)
    (out / "RESULTS.md").write_text(text)
    plot_curves(out / "curves.png", report)
    print(text)
    return 0


def build_report(cfg, runs, evals, a) -> dict:
    per_seed = {s: {k: float(np.mean([x[k] for x in evals[s]])) for k in FIELDS} for s in evals}
    overall = {k: mean_se([per_seed[s][k] for s in per_seed]) for k in FIELDS}
    by_cfg = {}
    for i, c in enumerate(cfg["test_configs"]):
        n_seeds = len(cfg["test_seeds"])
        vals = [float(np.mean([evals[s][i * n_seeds + j]["reward"] for j in range(n_seeds)])) for s in evals]
        by_cfg[f"N={c[0]} rtt={round(c[1] * 1e3)}ms {c[2]}"] = mean_se(vals)
    ppo = {}
    ppo_dir = Path(a.ppo_results)
    if cfg.get("eval_set", "test") != "test":  # PPO's numbers are the test set's: nothing to put beside them
        pass
    elif (ppo_dir / "results.json").is_file():
        res = json.loads((ppo_dir / "results.json").read_text())
        ppo["protocol"] = {k: res.get(k) for k in ("test_seeds", "seconds", "warmup_s", "training_seeds",
                                                   "agent_updates")}
        ppo["overall"] = {name: {k: res["overall"][name][k] for k in FIELDS if k in res["overall"][name]}
                          for name in ["queuepilot", *res.get("chosen", {}).values()] if name in res["overall"]}
        ppo["per_config"] = {k: v.get("queuepilot") for k, v in res.get("per_config", {}).items()}
        ppo["chosen"] = res.get("chosen")
    if ppo and (ppo_dir / "train_summary.json").is_file():
        ts = json.loads((ppo_dir / "train_summary.json").read_text())
        calls = ts.get("calls", [])
        ppo["env_steps_per_seed"] = max((c.get("env_steps_per_seed", 0) for c in calls), default=None)
        ppo["train_wall_s"] = sum(c.get("wall_s", 0.0) for c in calls)
        ppo["train_device"] = calls[-1].get("device") if calls else None
    return {"config": cfg, "training": {s: {k: runs[s][k] for k in ("curve", "env_steps", "num_envs", "wall_s",
                                                                     "compile_s", "eval_wall_s")} for s in runs},
            "per_training_seed": per_seed, "overall": overall, "per_config": by_cfg, "ppo": ppo,
            "device": jax.devices()[0].device_kind}


def _fmt(v, pct=False):
    m, se = v
    if pct:
        return f"{100 * m:.3f} ± {100 * se:.3f} %"
    return f"{m:.3f} ± {se:.3f}"


def markdown(r, argv) -> str:
    cfg = r["config"]
    tr = r["training"]
    env_steps = np.mean([t["env_steps"] for t in tr.values()])
    wall = np.mean([t["wall_s"] for t in tr.values()])
    o = r["overall"]
    lines = ["# Analytic policy gradients through the fluid model, judged on the packet simulator", "",
             f"Command: `python scripts/train_apg.py {' '.join(argv)}`", "",
             f"APG: {len(tr)} training seeds, {cfg['apg']['updates']} updates of {cfg['apg']['horizon']}-step fluid "
             f"rollouts over {next(iter(tr.values()))['num_envs']} envs ({env_steps:,.0f} fluid env steps and "
             f"{wall:.0f} s per seed on {r['device']}, compilation included). Packet evaluation: the study's "
             f"{len(cfg['test_configs'])} {cfg.get('eval_set', 'test')} configurations x seeds {cfg['test_seeds']}, "
             f"{cfg['eval_seconds']:g} s "
             f"runs, the first {cfg['eval_warmup_s']:g} s left out, web-search load {cfg['eval_load']:g}. Mean ± s.e. "
             "over training seeds of each seed's mean over the test runs.", "",
             "| policy | reward | steps with a drop | utilisation | drop rate | mark rate | queueing delay (ms) "
             "| env steps per seed | training wall time |", "|---|---|---|---|---|---|---|---|---|"]
    lines.append(f"| APG (fluid) | {_fmt(o['reward'])} | {_fmt(o['drop_steps'])} | {_fmt(o['util_wire'])} "
                 f"| {_fmt(o['drop_rate'], True)} | {_fmt(o['mark_rate'], True)} | {_fmt(o['delay_ms'])} "
                 f"| {env_steps:,.0f} (fluid) | {wall:.0f} s ({r['device']}) |")
    ppo = r.get("ppo", {})
    for name, v in ppo.get("overall", {}).items():
        extra = (f"| {ppo.get('env_steps_per_seed', 0):,.0f} (packet) | {ppo.get('train_wall_s', 0):.0f} s "
                 f"({ppo.get('train_device')}, 3 seeds at once) |") if name == "queuepilot" else "| | |"
        label = "PPO (QueuePilot, LSTM)" if name == "queuepilot" else f"{name} (tuned on selection seeds)"
        lines.append(f"| {label} | {_fmt(v['reward'])} | {_fmt(v['drop_steps'])} | {_fmt(v['util_wire'])} "
                     f"| {_fmt(v['drop_rate'], True)} | {_fmt(v['mark_rate'], True)} | {_fmt(v['delay_ms'])} {extra}")
    if "queuepilot" in ppo.get("overall", {}):
        p = ppo["overall"]["queuepilot"]["reward"]
        d = o["reward"][0] - p[0]
        se = float(np.hypot(o["reward"][1], p[1]))
        verdict = ("not judged against (one training seed has no error)" if not np.isfinite(se) else
                   "above" if d > 2 * se else ("tied with" if d >= -2 * se else "below"))
        lines += ["", f"**APG's reward is {verdict} PPO's** ({d:+.3f} ± {se:.3f}, the standard errors over "
                      f"training seeds combined). The PPO row is the committed study "
                      f"(`{cfg['ppo_results']}`), evaluated with the same protocol "
                      f"(test seeds {ppo.get('protocol', {}).get('test_seeds')}).", ""]
    lines += ["## Reward per test configuration", "", "| configuration | APG | PPO |", "|---|---|---|"]
    for k, v in r["per_config"].items():
        p = ppo.get("per_config", {}).get(k)
        lines.append(f"| {k} | {_fmt(v)} | {_fmt(p['reward']) if p and 'reward' in p else '-'} |")
    lines.append("")
    return "\n".join(lines)


def plot_curves(path, r) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s, t in r["training"].items():
        c = t["curve"]
        ax.plot([x["env_steps"] for x in c], [x["reward"] for x in c], label=f"seed {s}: reward (fluid)")
        ax.plot([x["env_steps"] for x in c], [x["surrogate"] for x in c], ":", label=f"seed {s}: surrogate")
    ax.set_xlabel("fluid env steps")
    ax.set_ylabel("mean reward per step (fluid rollouts)")
    ax.set_title("APG through the fluid model")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
