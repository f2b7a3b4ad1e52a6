"""QueuePilot judged inside ns-3.37: the agents `ns3` drives (what a run directory holds and what its exported policies
say they are), the parsing of the configurations, the scoring of an ns-3 run as the JAX
evaluation scores one of its runs, and the report beside the JAX simulator
(`scripts/queuepilot.py export` and `ns3` drive these)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT, QUEUEPILOT_CONTINUOUS
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.study import DEFAULT_VARIANTS
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
    config.json's `seeds`) or a `train_apg.py` run ("apg", its `training_seeds`).  A
    ValueError names anything else."""
    f = run / "config.json"
    cfg = json.loads(f.read_text()) if f.is_file() else {}
    if "apg" in cfg and "training_seeds" in cfg:
        return "apg", [int(s) for s in cfg["training_seeds"]]
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
