"""`queuepilot.py export` and `queuepilot.py ns3` (`rlbm_jax.cli.queuepilot` describes
both): the trained QueuePilot agent as deployable policies, and judged inside ns-3.37
beside the JAX simulator (the PPO agent of a `queuepilot.py train` run, or the marking
policies of a `train_apg.py` run)."""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import jax

from rlbm_jax import jsonio
from rlbm_jax.cli import fail, model_kw
from rlbm_jax.env.formulations.queuepilot import QUEUEPILOT
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.ns3 import (agent_of, build_report, cfg_key, choose_variants, markdown, parse_config,
                                     run_seeds, score_ns3_run)
from rlbm_jax.queuepilot.study import load_trained
from rlbm_jax.study.ns3 import check_judging, write_judging
from rlbm_jax.study.export import export_plan, policy_paths

PROG = "queuepilot.py"


def export_config(a) -> dict:
    """What `export` writes (`study.export.export_plan`)."""
    return export_plan(Path(a.run_dir), qp.trained_run(Path(a.run_dir)), QUEUEPILOT)


def export(a, cfg: dict, argv=None) -> int:
    from rlbm_jax.study.export import export_seeds

    run = Path(cfg["run_dir"])
    print(f"config: {jsonio.dumps(cfg)}")
    ppo, params, stats, seeds, updates = load_trained(run)
    interval_s = float(ppo.env_params.env.agent_interval_s)
    env_info = {"scenario": {"name": "queuepilot", "agent_interval_s": interval_s, "buffer_policy": "rl-mark",
                             "training_mix": {"long_flows": list(qp.TRAIN_FLOWS), "rtts_s": list(qp.TRAIN_RTTS_S),
                                              "tcps": list(qp.TRAIN_TCPS)}},
                "updates": updates}
    try:
        recs = export_seeds(ppo, params, stats, seeds, run, formulation=QUEUEPILOT, interval_s=interval_s,
                            env_info=env_info, tol=1e-5)
    except ValueError as e:
        return fail(PROG, str(e))
    if not all(r["ok"] for r in recs):
        print(f"{PROG}: error: an exported policy disagrees with the trained network", file=sys.stderr)
        return 1
    return 0


# ---- ns-3 ------------------------------------------------------------------------------
def _overrides(v: str, n: int, r: float, t: str) -> dict:
    """The make_params overrides of classic-AQM variant `v` on configuration (n, r, t)."""
    return qp.baseline_variants(int(make_params(**qp.config_kw(n, r, t)).buffer_pkts))[v]


def run_kw(a, v: str | None, cfg_: tuple) -> dict:
    """The make_params arguments of policy `v` (a classic-AQM variant; None: the agent's
    marker) on configuration `cfg_` (N, rtt_s, tcp), for both simulators (the TCP-model
    choices are ours only: ns3.NOT_NS3 keeps them off ns-3's command)."""
    return qp.config_kw(*cfg_, warmup_s=a.warmup_s, **(_overrides(v, *cfg_) if v else {}), **model_kw(a))


def agent_env(a, configs):
    """The agent's env params on the first configuration (its interval: both simulators'
    step)."""
    sp0 = make_params(**qp.config_kw(*configs[0], warmup_s=a.warmup_s))
    return qp.make_env(sp0, a.seconds).default_params


def ns3_config(a) -> dict:
    """What `ns3` runs: the test configurations and seeds, the trained run's trainer and
    seeds, the exported policy of each (ONNX file and its SHA-256) and what they are by
    their own metadata (`agent`: formulation, network, action), the classic AQMs' variants and
    where they were chosen, the run length and warm-up in seconds and steps at the agent's
    interval, every simulator parameter of each policy on each configuration (`params`:
    `params.config_record`), the jobs, the ns-3 cache's use, the JAX side and where the
    results go."""
    run = Path(a.run_dir)
    configs = [parse_config(c) for c in a.configs]
    check_judging(a.seeds, len(qp.TEST_SEEDS), a.jobs, a.seconds, a.warmup_s)
    chosen, source = choose_variants(run, a.variants)
    trainer, seeds = run_seeds(run)
    if trainer == "ppo":
        qp.trained_run(run, weights=not a.no_jax)  # its JAX side runs the trained networks
    steps, warm = int(round(a.seconds / qp.STEP_S)), int(round(a.warmup_s / qp.STEP_S))
    interval_s = float(agent_env(a, configs).agent_interval_s)  # whole ticks: both simulators step exactly this
    policies = {}
    for s in seeds:
        _, onnx_path = policy_paths(run, s)
        if not onnx_path.is_file():
            how = f"`{PROG} export --run-dir {run}`" if trainer == "ppo" else "`train_apg.py`, which writes it,"
            raise ValueError(f"{onnx_path} is missing: run {how} first")
        policies[str(s)] = {"onnx": str(onnx_path), "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest()}
    agent = agent_of([p["onnx"] for p in policies.values()], interval_s)
    if agent["network"] == "lstm" and trainer != "ppo" and not a.no_jax:
        raise ValueError(f"{run} holds recurrent policies but no `queuepilot.py train` run: the JAX side runs a "
                         "recurrent agent's trained networks (--no-jax leaves it out)")
    baselines = {"droptail": "droptail", **{alg: v for alg, v in chosen.items() if alg != "droptail"}}
    baseline_names = [] if a.agent_only else list(dict.fromkeys(baselines.values()))
    if a.no_fq_codel:
        baseline_names = [v for v in baseline_names if qp.algorithm_of(v) != "fq-codel"]
    return {"run_dir": str(run), "out_dir": str(Path(a.out_dir) if a.out_dir else run / "ns3"),
            "configs": [list(c) for c in configs], "seeds": list(qp.TEST_SEEDS[: a.seeds]), "trainer": trainer,
            "training_seeds": seeds, "policies": policies, "agent": agent, "chosen": chosen, "variant_source": source,
            "agent_only": a.agent_only, "baselines": baseline_names, "fq_codel": not a.no_fq_codel,
            "seconds": a.seconds, "warmup_s": a.warmup_s,
            "steps": steps, "warmup_steps": warm, "agent_interval_s": interval_s, "seconds_ns3": steps * interval_s,
            "jobs": a.jobs, "fresh_ns3": a.fresh_ns3, "jax": not a.no_jax, "model": model_kw(a, complete=True),
            "params": {v or "queuepilot": {cfg_key(c): config_record(run_kw(a, v, c)) for c in configs}
                       for v in (None, *baseline_names)}}


def ns3(a, cfg: dict, argv) -> int:
    from rlbm_jax.env import formulations
    from rlbm_jax.ns3 import harness
    from rlbm_jax.onnx_policy import jax_policy, load_checked

    run, out = Path(cfg["run_dir"]), Path(cfg["out_dir"])
    configs = [tuple(c) for c in cfg["configs"]]
    chosen, source, train_seeds = cfg["chosen"], cfg["variant_source"], cfg["training_seeds"]
    steps, warm, interval_s = cfg["steps"], cfg["warmup_steps"], cfg["agent_interval_s"]
    ep0 = agent_env(a, configs)
    # the action's meaning: the formulation the exported policies name (`agent_of` checked them)
    form, recurrent = formulations.get(cfg["agent"]["formulation"]), cfg["agent"]["network"] == "lstm"
    policies = {}
    try:
        for s in train_seeds:
            p = cfg["policies"][str(s)]
            fn, _ = load_checked(p["onnx"], num_classes=1, agent_interval_s=interval_s, formulation=form.id)
            policies[s] = (fn, p["sha256"])
    except ValueError as e:
        return fail(PROG, str(e))
    seeds = cfg["seeds"]
    seconds_ns3 = cfg["seconds_ns3"]
    baseline_names = cfg["baselines"]
    out.mkdir(parents=True, exist_ok=True)
    command = f"python scripts/queuepilot.py {' '.join(argv)}"
    (out / "command.txt").write_text(command + "\n")
    t0 = time.perf_counter()

    def sim_of(kw):  # the simulator params the formulation scores with (the policy plays no part)
        return make_params(**kw)

    def pkt_s_of(cfg_):
        p = make_params(**qp.config_kw(*cfg_))
        return float(p.data_pkt_bits / p.bottleneck_rate_bps)

    binary = harness.build_ns3()
    workdir = run / "ns3_runs"  # ignored by git (results/*/ns3_runs/)
    slug = lambda cfg_: f"{cfg_[2]}_N{cfg_[0]}_rtt{cfg_[1] * 1e3:g}ms"
    ns3_runs = {}  # policy -> cfg -> [scored runs over test seeds]
    wall, cached = {}, {"runs": 0, "reused": 0}

    def run_cells(label, v, agent=None, formulation=QUEUEPILOT):
        cells = [harness.Cell(f"qp/{label}/{slug(c)}", "thesis", run_kw(a, v, c), seconds_ns3) for c in configs]
        tc = time.perf_counter()
        res = harness.run_ns3(binary, cells, seeds, cfg["jobs"], workdir, fresh=cfg["fresh_ns3"], agent=agent,
                              interval_s=interval_s, label=f"ns-3 {label} ")
        wall[label] = round(time.perf_counter() - tc, 1)
        cached["runs"] += len(cells) * len(seeds)
        cached["reused"] += sum(res[cell.name]["cached_runs"] for cell in cells)
        by_cfg = {}
        for c, cell in zip(configs, cells):
            ep = ep0.replace(sim=sim_of(cell.kw))
            r = res[cell.name]
            by_cfg[c] = [score_ns3_run(rep, fl, rows, ep, warm, pkt_s_of(c), formulation)
                         for rep, fl, rows in zip(r["seeds"], r["flows"], r["intervals"])]
        return by_cfg

    for s, (fn, digest) in policies.items():
        agent = harness.Agent(fn=fn, digest=digest, formulation=form, env_params=ep0, recurrent=recurrent)
        ns3_runs[f"queuepilot-seed{s}"] = run_cells(f"queuepilot-seed{s}", None, agent, form)
    for v in baseline_names:
        ns3_runs[v] = run_cells(v, v)
    t_ns3 = time.perf_counter() - t0

    jax_runs = {}
    if cfg["jax"]:
        tj = time.perf_counter()
        runs_of = lambda v: [(run_kw(a, v, c), s) for c in configs for s in seeds]

        def split(res):
            out_ = {c: [] for c in configs}
            for k, r in enumerate(res):
                c = configs[k // len(seeds)]
                r["_pkt_s"] = pkt_s_of(c)
                out_[c].append(r)
            return out_

        for v in baseline_names:
            jax_runs[v] = split(qp.run_batch(runs_of(v), steps, warm, chunk=len(configs) * len(seeds)))
        if recurrent:  # the trained networks (`export` checked their graphs against them)
            ppo, params, stats, seeds_trained, _ = load_trained(run)
            actor = qp.lstm_actor(ppo)
            for j, s in enumerate(seeds_trained):
                args = qp.actor_args(ppo, jax.tree.map(lambda x: x[j], params), jax.tree.map(lambda x: x[j], stats))
                jax_runs[f"queuepilot-seed{s}"] = split(qp.run_batch(runs_of(None), steps, warm, actor=actor,
                                                                     args=args, chunk=len(configs) * len(seeds)))
        else:  # a stateless graph: the very file ns-3 ran, node by node in JAX
            for s in train_seeds:
                g, _ = jax_policy(cfg["policies"][str(s)]["onnx"], num_classes=1, agent_interval_s=interval_s,
                                  formulation=form.id)
                actor = lambda args, carry, obs, state, first, ep, g=g: (carry, g(obs[None])[0])
                jax_runs[f"queuepilot-seed{s}"] = split(qp.run_batch(
                    runs_of(None), steps, warm, actor=actor, args={"carry0": ()}, chunk=len(configs) * len(seeds),
                    formulation=form))
        wall["jax"] = round(time.perf_counter() - tj, 1)

    report = build_report(ns3_runs, jax_runs, configs, seeds, train_seeds, baseline_names, chosen, source,
                          cfg["seconds"], cfg["warmup_s"], steps, warm, interval_s, seconds_ns3)
    report["command"] = command
    report["agent"] = cfg["agent"]
    report["config"] = cfg
    report["ns3_runs"] = {**cached, "cache": str(workdir.relative_to(run)) if workdir.is_relative_to(run) else None}
    return write_judging(out, report, markdown, wall, t_ns3, t0)
