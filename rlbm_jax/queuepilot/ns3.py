"""QueuePilot judged inside ns-3.37, and its trained agent exported: the agents `ns3` drives
(what a run directory holds and what its exported policies say they are), the parsing of
the configurations, the scoring of an ns-3 run as the JAX evaluation scores one of its runs,
the report beside the JAX simulator, and `scripts/queuepilot.py export` and `ns3` themselves
(`export_config`/`export`, `ns3_config`/`ns3`; the PPO agent of a `queuepilot.py train` run,
or the marking policies of a `train_apg.py` run)."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT, QUEUEPILOT_CONTINUOUS
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.study import DEFAULT_VARIANTS, load_trained
from rlbm_jax.study.export import export_plan, policy_paths
from rlbm_jax.study.ns3 import check_judging, write_judging
from rlbm_jax.study.stats import fmt_mean_se



# the exported policies `ns3` drives as the scenario's rl-mark policy: formulation -> network.
# QueuePilot-v0: a recurrent graph (`queuepilot.py train`/`export`) whose action is an index
# into its rlbm.action_values, the LSTM state carried from step to step;
# QueuePilot-continuous-v0: a stateless MLP (`train_apg.py`) whose action is the marking
# probability itself.  Either way the formulation named in the file maps the action to the
# knob (`Formulation.knobs`: mark_prob).
AGENTS = {QUEUEPILOT.id: "lstm", QUEUEPILOT_CONTINUOUS.id: "mlp"}


def run_seeds(run: Path) -> tuple[str, list]:
    """(trainer, training seeds) of a run directory: a `queuepilot.py train` run ("ppo",
    config.json's `seeds`) or an APG run ("apg": a kit run of `queuepilot-apg`, its `seeds`,
    or a pre-kit `train_apg.py` run, its `training_seeds`).  A ValueError names anything
    else."""
    f = run / "config.json"
    cfg = json.loads(f.read_text()) if f.is_file() else {}
    if "apg" in cfg and ("training_seeds" in cfg or "seeds" in cfg):
        return "apg", [int(s) for s in cfg.get("training_seeds", cfg.get("seeds"))]
    if "ppo" in cfg or not cfg:
        return "ppo", list(qp.trained_run(run, weights=False)["seeds"])
    raise ValueError(f"{f} is neither a `queuepilot.py train` run (ppo, seeds) nor a `train_apg.py` run "
                     "(apg, training_seeds)")


def agent_of(paths, interval_s: float) -> dict:
    """What the exported policies at `paths` are, from their own metadata
    (`onnx_policy.load_checked`): {"formulation", "network", "action"}.  Refuses, naming the
    file, a policy `ns3` cannot drive (a formulation other than `AGENTS`' or another network
    for it, a discrete policy whose levels are not its formulation's, another agent
    interval) and policies that differ from one another in formulation or network."""
    from rlbm_jax.env import formulations
    from rlbm_jax.onnx_policy import load_checked

    out = None
    for p in paths:
        _, meta = load_checked(p, num_classes=1, agent_interval_s=interval_s)
        f, net = meta["formulation"], meta["network"]
        if AGENTS.get(f) != net:
            raise ValueError(f"policy {p}: a {net} policy of formulation {f}; `ns3` drives the rl-mark marking "
                             "probability from " + " or ".join(f"{k} ({v})" for k, v in AGENTS.items()))
        values = meta.get("action_values")
        levels = getattr(formulations.get(f).action, "action_values", None)
        if values is not None and (levels is None or not np.allclose(values, levels)):
            raise ValueError(f"policy {p}: its action indices mean {values}; formulation {f}'s mean {levels}")
        this = {"formulation": f, "network": net, "action": meta["action"]}
        if out is not None and this != out:
            raise ValueError(f"policy {p}: a {net} policy of {f}, the run's other policies are {out['network']} "
                             f"policies of {out['formulation']}")
        out = this
    if out is None:
        raise ValueError("no exported policy to drive")
    return out


def parse_config(text: str) -> tuple:
    """"N:RTT_MS:TCP" -> (N, rtt_s, tcp)."""
    parts = text.split(":")
    if len(parts) != 3 or parts[2] not in ("cubic", "newreno"):
        raise ValueError(f"--configs: expected N:RTT_MS:TCP (TCP cubic or newreno), got {text!r}")
    try:
        n, rtt_ms = int(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--configs: expected N:RTT_MS:TCP with integer N and numeric RTT, got {text!r}") from None
    if n < 1 or not rtt_ms > 0:
        raise ValueError(f"--configs: N must be >= 1 and the RTT positive, got {text!r}")
    return n, rtt_ms / 1e3, parts[2]


def cfg_key(cfg) -> str:
    return f"N={cfg[0]} rtt={cfg[1] * 1e3:g}ms {cfg[2]}"


def choose_variants(run: Path, given) -> tuple[dict, str]:
    """{algorithm: variant} of the classic AQMs, and where it came from."""
    names = list(qp.baseline_variants(100))
    if given:
        unknown = [v for v in given if v not in names]
        if unknown:
            raise ValueError(f"--variants: unknown {unknown}; choose among {names}")
        return {qp.algorithm_of(v): v for v in given}, "--variants"
    from rlbm_jax.study.protocol import LEDGER, chosen_variants

    kit = chosen_variants(run / "kit")  # evaluated by the kit (queuepilot.py evaluate)
    if kit:
        return kit, f"the last selection of kit/{LEDGER} (selection seeds)"
    res = run / "results.json"
    if res.is_file():
        r = json.loads(res.read_text())
        if r.get("chosen"):
            return dict(r["chosen"]), f"the 'chosen' of {res.name} (selection seeds)"
        if (r.get("ppo") or {}).get("chosen"):  # a train_apg.py run: the PPO study it was compared with
            return dict(r["ppo"]["chosen"]), f"the 'chosen' of the PPO study in {res.name} (its selection seeds)"
    return {qp.algorithm_of(v): v for v in DEFAULT_VARIANTS}, "default (no chosen variants in the run)"


def _actions_of(rows) -> list:
    """The action index in effect in every interval (from the mark_prob column)."""
    levels = np.asarray(MARK_LEVELS, np.float32)
    p = np.asarray([float(r["mark_prob"]) for r in rows], np.float32)
    return np.argmin(np.abs(p[:, None] - levels[None]), axis=1).tolist()


def score_ns3_run(rep: dict, flows: list, rows: list, ep, warm: int, pkt_s: float, formulation=QUEUEPILOT) -> dict:
    """One ns-3 run scored as the JAX evaluation scores one of its runs: the formulation's
    reward and the steps with a drop averaged over the steps after `warm`, from ns-3's
    interval records; utilisation, drop and mark rates and the mean queue from the
    report (its measured window starts at warmup_s); the completion log from its flows.
    The histogram of the marking probability counts each step's at its nearest level."""
    from rlbm_jax.ns3 import harness

    r = harness.score_records(formulation, ep, rows)
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    drops = np.asarray(rec.drops_pkts).sum(-1)
    out = {"reward": float(np.mean(r[warm:])), "drop_steps": float(np.mean(drops[warm:] > 0)),
           "util_wire": float(rep["util_wire"]), "drop_rate": float(rep["drop_rate"]),
           "mark_rate": float(rep["mark_rate"]), "queue_mean_pkts": float(rep["queue_mean_pkts"]),
           "steps": len(rows), "_pkt_s": pkt_s}
    if rows and "mark_prob" in rows[0]:
        acts = np.asarray(_actions_of(rows[warm:]))
        out["action_hist"] = np.bincount(acts, minlength=len(MARK_LEVELS)) / max(len(acts), 1)
    out["log"] = np.asarray(flows, np.float64).reshape(-1, 5)
    out["log_count"] = len(out["log"])
    return out


def _score(results) -> dict:
    out = {k: qp.mean_se([r[k] for r in results]) for k in qp.SCORE_FIELDS}
    out["delay_ms"] = qp.mean_se([1e3 * r["queue_mean_pkts"] * r["_pkt_s"] for r in results])
    hists = [r["action_hist"] for r in results if "action_hist" in r]
    if hists:
        out["action_hist"] = np.mean(hists, axis=0).round(4).tolist()
    return out


def _agent_score(per_seed: dict) -> dict:
    """Each training seed's mean over its runs, then mean ± s.e. over training seeds."""
    per = {s: _score(res) for s, res in per_seed.items()}
    out = {k: qp.mean_se([p[k][0] for p in per.values()]) for k in (*qp.SCORE_FIELDS, "delay_ms")}
    hists = [p["action_hist"] for p in per.values() if "action_hist" in p]
    if hists:
        out["action_hist"] = np.mean(hists, axis=0).round(4).tolist()
    out["per_training_seed"] = {str(s): {k: p[k][0] for k in ("reward", "util_wire", "drop_rate", "delay_ms")}
                                for s, p in per.items()}
    return out


def build_report(ns3_runs, jax_runs, configs, seeds, train_seeds, baseline_names, chosen, source, seconds: float,
                 warmup_s: float, steps, warm, interval_s, seconds_ns3) -> dict:
    agent_keys = [f"queuepilot-seed{s}" for s in train_seeds]
    policies = ["queuepilot", *baseline_names]

    def scores(runs, cfgs):
        if not runs:
            return {}
        out = {}
        if all(k in runs for k in agent_keys):
            out["queuepilot"] = _agent_score({s: [x for c in cfgs for x in runs[f"queuepilot-seed{s}"][c]]
                                              for s in train_seeds})
        for v in baseline_names:
            if v in runs:
                out[v] = _score([x for c in cfgs for x in runs[v][c]])
        return out

    def fct(runs):
        out = {}
        if not runs:
            return out
        if all(k in runs for k in agent_keys):
            out["queuepilot"] = qp.fct_by_size([x for k in agent_keys for c in configs for x in runs[k][c]],
                                               warmup_s)
        for v in baseline_names:
            if v in runs:
                out[v] = qp.fct_by_size([x for c in configs for x in runs[v][c]], warmup_s)
        return out

    per_cfg, best = {}, {}
    for c in configs:
        sn, sj = scores(ns3_runs, [c]), scores(jax_runs, [c])
        per_cfg[cfg_key(c)] = {p: {"ns3": sn.get(p), "jax": sj.get(p)} for p in policies}
        best[cfg_key(c)] = {sim: (max(sc, key=lambda p: sc[p]["reward"][0]) if sc else None)
                            for sim, sc in (("ns3", sn), ("jax", sj))}
    on, oj = scores(ns3_runs, configs), scores(jax_runs, configs)
    fn_, fj = fct(ns3_runs), fct(jax_runs)
    per_run = {}
    for k, runs in (("ns3", ns3_runs), ("jax", jax_runs)):
        per_run[k] = {p: {cfg_key(c): [round(float(x["reward"]), 6) for x in runs[p][c]] for c in configs}
                      for p in runs}
    return {"configs": [list(c) for c in configs], "test_seeds": seeds, "training_seeds": train_seeds,
            "seconds": seconds, "warmup_s": warmup_s, "steps": steps, "warmup_steps": warm,
            "step_s": interval_s, "ns3_seconds": seconds_ns3, "variants": chosen, "variants_source": source,
            "policies": policies, "per_config": per_cfg, "best_reward": best,
            "overall": {p: {"ns3": on.get(p), "jax": oj.get(p)} for p in policies},
            "fct_by_size": {p: {"ns3": fn_.get(p), "jax": fj.get(p)} for p in policies},
            "reward_per_run": per_run}


_fmt = lambda ms, scale=1.0, digits=3: fmt_mean_se(ms, scale, digits)  # noqa: E731


COLUMNS = (("reward", "reward", 1.0, 3), ("drop_steps", "steps with a drop", 1.0, 3),
           ("util_wire", "utilisation", 1.0, 3), ("drop_rate", "drop rate (%)", 100.0, 3),
           ("mark_rate", "mark rate (%)", 100.0, 2), ("delay_ms", "queueing delay (ms)", 1.0, 2))


def _table(rows: dict, policies) -> list:
    L = ["| policy | simulator | " + " | ".join(t for _, t, _, _ in COLUMNS) + " |",
         "| --- | --- |" + " --- |" * len(COLUMNS)]
    for p in policies:
        for sim, label in (("ns3", "ns-3"), ("jax", "JAX")):
            sc = rows[p][sim]
            if sc is None:
                L.append(f"| {p} | {label} |" + " n/a |" * len(COLUMNS))
                continue
            L.append(f"| {p} | {label} | " + " | ".join(_fmt(sc[k], f, d) for k, _, f, d in COLUMNS) + " |")
    return L


def markdown(rep) -> str:
    pol = rep["policies"]
    v = ", ".join(f"{k}: {x}" for k, x in rep["variants"].items())
    agent = rep.get("agent") or {"formulation": QUEUEPILOT.id, "network": "lstm"}
    if agent["network"] == "lstm":
        how = "rl-mark driven in lock-step, LSTM state carried), the trained network in JAX"
    else:
        how = (f"{agent['formulation']}: a stateless MLP whose output is the marking probability, driving rl-mark "
               "in lock-step), the same graph in JAX (`onnx_policy.jax_policy`)")
    base = (f"Baselines: mean ± s.e. over runs; classic AQM variants {v} ({rep['variants_source']}); fq-codel runs "
            "ns-3's FqCoDelQueueDisc (1024 flow queues, quantum one MTU) with the variant's CoDel target and "
            "interval, ECN and the same buffer." if len(pol) > 1 else "No classic AQM in this run (`--agent-only`).")
    L = ["# QueuePilot in ns-3.37 beside the JAX simulator", "",
         f"Configurations {', '.join(cfg_key(c) for c in rep['configs'])}; test seeds {rep['test_seeds']}; "
         f"{rep['steps']} steps of {rep['step_s'] * 1e3:.4f} ms ({rep['ns3_seconds']:.3f} s) per run, scored after "
         f"the first {rep['warmup_steps']} steps ({rep['warmup_s']:g} s). Agent (`queuepilot`): the ONNX export of "
         f"each training seed {rep['training_seeds']} in ns-3 ({how}; mean ± s.e. over training seeds of each "
         f"seed's mean. {base} Reward, steps with a drop: "
         "from the interval records with the formulation's reward; utilisation, drop and mark rates, queueing "
         "delay: each simulator's run summary from the warm-up on.", "",
         f"Command: `{rep.get('command', '')}`"
         + (f" (ns-3 runs: {rep['ns3_runs']['runs']}, of which {rep['ns3_runs']['reused']} reused from the run cache; "
            f"wall time {rep['wall_s']['ns3']:.0f} s in ns-3, {rep['wall_s'].get('jax', 0):.0f} s in JAX)"
            if "ns3_runs" in rep and "wall_s" in rep else ""), ""]
    L += ["## Overall (every configuration)", ""] + _table(rep["overall"], pol)
    for key, rows in rep["per_config"].items():
        L += ["", f"## {key}", ""] + _table(rows, pol)
    L += ["", "## Best mean reward per configuration", "", "| configuration | ns-3 | JAX |", "| --- | --- | --- |"]
    for key, b in rep["best_reward"].items():
        L.append(f"| {key} | {b['ns3'] or 'n/a'} | {b['jax'] or 'n/a'} |")
    L += ["", "## p99 flow completion time by flow size (web-search flows started after the warm-up, pooled over "
              "runs and configurations): ns-3 / JAX, ms (flows)", ""]
    buckets = None
    for p in pol:
        for sim in ("ns3", "jax"):
            if rep["fct_by_size"][p][sim]:
                buckets = list(rep["fct_by_size"][p][sim])
                break
        if buckets:
            break
    if buckets:
        L += ["| policy | " + " | ".join(buckets) + " |", "| --- |" + " --- |" * len(buckets)]
        for p in pol:
            cells = []
            for b in buckets:
                part = []
                for sim in ("ns3", "jax"):
                    f = rep["fct_by_size"][p][sim]
                    x = f[b] if f else None
                    part.append("n/a" if x is None or x["fct_p99_s"] != x["fct_p99_s"]
                                else f"{x['fct_p99_s'] * 1e3:.0f} ({x['flows']})")
                cells.append(" / ".join(part))
            L.append(f"| {p} | " + " | ".join(cells) + " |")
    same = [p for p in pol if p not in ("queuepilot", "droptail") and p in rep["reward_per_run"]["ns3"]
            and "droptail" in rep["reward_per_run"]["ns3"]
            and all(rep["reward_per_run"][sim].get(p) == rep["reward_per_run"][sim].get("droptail")
                    for sim in ("ns3", "jax") if rep["reward_per_run"][sim])]
    if same:
        L += ["", f"{', '.join(same)} ran exactly as droptail in every run of both simulators: it never acted on "
                  "these configurations."]
    L += ["", "The FCT tails rest on few flows (the counts in brackets): web-search flows at load 0.1 start "
              "under one a second."]
    hist = [(p, rep["overall"][p][sim].get("action_hist")) for p in ("queuepilot",) for sim in ("ns3", "jax")
            if rep["overall"][p][sim]]
    if any(h for _, h in hist):
        L += ["", "Agent's marking probability after the warm-up (share of steps at "
              + ("" if agent["network"] == "lstm" else "the level nearest to it among ")
              + ", ".join(f"{x:g}" for x in MARK_LEVELS) + "): ns-3 "
              + str(rep["overall"]["queuepilot"]["ns3"].get("action_hist") if rep["overall"]["queuepilot"]["ns3"]
                    else "n/a")
              + ", JAX " + str(rep["overall"]["queuepilot"]["jax"].get("action_hist")
                              if rep["overall"]["queuepilot"]["jax"] else "n/a") + "."]
    return "\n".join(L) + "\n"


# ---- `queuepilot.py export` and `queuepilot.py ns3` ------------------------------------
PROG = "queuepilot.py"


def export_config(run_dir) -> dict:
    """What `export` writes (`study.export.export_plan`)."""
    return export_plan(Path(run_dir), qp.trained_run(Path(run_dir)), QUEUEPILOT)


def export(cfg: dict) -> int:
    from rlbm_jax.study.export import export_run

    run = Path(cfg["run_dir"])
    print(f"config: {jsonio.dumps(cfg)}")
    ppo, params, stats, seeds, updates = load_trained(run)
    interval_s = float(ppo.env_params.env.agent_interval_s)
    env_info = {"scenario": {"name": "queuepilot", "agent_interval_s": interval_s, "buffer_policy": "rl-mark",
                             "training_mix": {"long_flows": list(qp.TRAIN_FLOWS), "rtts_s": list(qp.TRAIN_RTTS_S),
                                              "tcps": list(qp.TRAIN_TCPS)}},
                "updates": updates}
    return export_run(PROG, ppo, params, stats, seeds, run, formulation=QUEUEPILOT, interval_s=interval_s,
                      env_info=env_info, tol=1e-5)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


# ---- ns-3 ------------------------------------------------------------------------------
def _overrides(v: str, n: int, r: float, t: str) -> dict:
    """The make_params overrides of classic-AQM variant `v` on configuration (n, r, t)."""
    return qp.baseline_variants(int(make_params(**qp.config_kw(n, r, t)).buffer_pkts))[v]


def run_kw(warmup_s: float, model_kw: dict, v: str | None, cfg_: tuple) -> dict:
    """The make_params arguments of policy `v` (a classic-AQM variant; None: the agent's
    marker) on configuration `cfg_` (N, rtt_s, tcp), for both simulators, with the TCP-model
    flags given (`model_kw`; ours only: ns3.NOT_NS3 keeps them off ns-3's command)."""
    return qp.config_kw(*cfg_, warmup_s=warmup_s, **(_overrides(v, *cfg_) if v else {}), **model_kw)


def agent_env(warmup_s: float, seconds: float, configs):
    """The agent's env params on the first configuration (its interval: both simulators'
    step)."""
    sp0 = make_params(**qp.config_kw(*configs[0], warmup_s=warmup_s))
    return qp.make_env(sp0, seconds).default_params


def ns3_config(a, model: dict, model_kw: dict) -> dict:
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
    interval_s = float(agent_env(a.warmup_s, a.seconds, configs).agent_interval_s)  # whole ticks: both simulators step exactly this
    policies = {}
    for s in seeds:
        _, onnx_path = policy_paths(run, s)
        if not onnx_path.is_file():
            how = f"`{PROG} export --run-dir {run}`" if trainer == "ppo" else "`train_apg.py export`"
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
            "jobs": a.jobs, "fresh_ns3": a.fresh_ns3, "jax": not a.no_jax, "model": model, "model_flags": model_kw,
            "params": {v or "queuepilot": {cfg_key(c): config_record(run_kw(a.warmup_s, model_kw, v, c))
                                           for c in configs} for v in (None, *baseline_names)}}


def ns3(cfg: dict, argv) -> int:
    from rlbm_jax.env import formulations
    from rlbm_jax.ns3 import harness
    from rlbm_jax.onnx_policy import jax_policy, load_checked

    run, out = Path(cfg["run_dir"]), Path(cfg["out_dir"])
    configs = [tuple(c) for c in cfg["configs"]]
    chosen, source, train_seeds = cfg["chosen"], cfg["variant_source"], cfg["training_seeds"]
    steps, warm, interval_s = cfg["steps"], cfg["warmup_steps"], cfg["agent_interval_s"]
    ep0 = agent_env(cfg["warmup_s"], cfg["seconds"], configs)

    def kw_of(v, c):
        return run_kw(cfg["warmup_s"], cfg["model_flags"], v, c)

    # the action's meaning: the formulation the exported policies name (`agent_of` checked them)
    form, recurrent = formulations.get(cfg["agent"]["formulation"]), cfg["agent"]["network"] == "lstm"
    policies = {}
    try:
        for s in train_seeds:
            p = cfg["policies"][str(s)]
            fn, _ = load_checked(p["onnx"], num_classes=1, agent_interval_s=interval_s, formulation=form.id)
            policies[s] = (fn, p["sha256"])
    except ValueError as e:
        return _fail(str(e))
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
        cells = [harness.Cell(f"qp/{label}/{slug(c)}", "thesis", kw_of(v, c), seconds_ns3) for c in configs]
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
        runs_of = lambda v: [(kw_of(v, c), s) for c in configs for s in seeds]

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
