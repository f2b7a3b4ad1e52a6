"""QueuePilot's marking policy trained by analytic policy gradients through the fluid model
(`rlbm_jax.queuepilot.apg_agent`), judged on the packet simulator as the `queuepilot` study
judges its PPO agent: the same selection and test configurations, seeds, baselines and
operator metrics (`rlbm_jax.studies.queuepilot`), on `QueuePilot-continuous-v0` (the same
observation and reward; the action a marking probability in [0, 1]).

    training    QueuePilot's mix (10, 20, 25 flows; RTTs 20-80 ms; CUBIC and NewReno) with long
                flows only (the fluid model has none other), each at start spreads of
                0.5-2 s so that the envs are not in phase; the packet evaluation keeps the
                web-search flows the fluid model never saw
The PPO agent is the `queuepilot` study's; its verdict and this one share their test runs
(configurations, seeds, length), so `results/apg/kit` and `results/queuepilot/kit` read side
by side.
"""
import dataclasses
import json

import numpy as np

from rlbm_jax.env import formulations
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.apg_agent import APG
from rlbm_jax.studies.queuepilot import STUDY as QUEUEPILOT

SPREADS_S = (0.5, 1.0, 1.5, 2.0)


def train_configs() -> list:
    """The fluid training envs: every configuration of QueuePilot's mix, no web-search
    flows, at each start spread."""
    return [qp.config_kw(n, r, t, load=0.0, long_flow_start_spread_s=sp) for t in qp.TRAIN_TCPS
            for n in qp.TRAIN_FLOWS for r in qp.TRAIN_RTTS_S for sp in SPREADS_S]


PPO_RESULTS = "results/queuepilot/kit"  # the queuepilot study's committed verdict (under the source tree)


def beside_ppo(rows, cfg, out) -> list:
    """APG beside the `queuepilot` study's PPO agent on the test runs both ran (its committed
    `PPO_RESULTS`): each recipe's training seeds' means over those runs, the difference and
    its Welch error and test (the two recipes have different training seeds: no pairing)."""
    from rlbm_jax.study import stats
    from rlbm_jax.study.pipeline import SOURCE_ROOT, read_csv

    ppo_dir = SOURCE_ROOT / PPO_RESULTS
    head = ["## Beside the PPO agent (the `queuepilot` study)", ""]
    if not (ppo_dir / "runs.csv").is_file():
        return head + [f"(No {PPO_RESULTS}/runs.csv here: no comparison.)"]
    ledger = json.loads((ppo_dir / "ledger.json").read_text())
    theirs = [e for e in ledger["entries"] if e["stage"] == "test"][-1]["config"]
    same = all(theirs[k] == cfg[k] for k in ("seconds", "warmup_s", "params"))
    runs = {(c, str(s)) for c in cfg["configs"] for s in cfg["seeds"]} & \
           {(c, str(s)) for c in theirs["configs"] for s in theirs["seeds"]}
    if not same or not runs:
        return head + [f"(The test runs of {PPO_RESULTS} are not these: no comparison.)"]
    fields = {"reward": True, **QUEUEPILOT.metrics}

    def per_seed(rs, f):
        seeds = sorted({r["training_seed"] for r in rs if r["kind"] == "agent"})
        return [np.mean([float(r[f]) for r in rs if r["kind"] == "agent" and r["training_seed"] == s
                         and (r["config"], r["seed"]) in runs]) for s in seeds]

    ppo_rows = read_csv(ppo_dir / "runs.csv")
    L = head + [f"On the {len(runs)} test runs both studies ran (`{PPO_RESULTS}`, the same configurations, seeds and "
                "length). Each recipe: mean ± s.e. over its training seeds of each seed's mean over the runs; the "
                "difference with its Welch error and test (different training seeds: no pairing), alpha "
                f"{stats.ALPHA}.", "", "| field | APG | PPO | APG - PPO | p | verdict |",
                "| --- | --- | --- | --- | --- | --- |"]
    for f, hb in fields.items():
        a, b = per_seed(rows, f), per_seed(ppo_rows, f)
        c = stats.unpaired(a, b, hb)
        p = "n/a" if c["p"] is None else f"{c['p']:.3g}"
        L.append(f"| {f} ({'higher' if hb else 'lower'} is better) | {stats.fmt_mean_se(stats.mean_se(a), digits=4)} "
                 f"| {stats.fmt_mean_se(stats.mean_se(b), digits=4)} | "
                 f"{stats.fmt_mean_se((c['diff'], c['se']), digits=4, sign=True)} | {p} | {c['verdict']} |")
    return L


STUDY = dataclasses.replace(
    QUEUEPILOT, name="queuepilot-apg",
    title="QueuePilot by analytic policy gradients through the fluid model, against the classic AQMs",
    formulation=formulations.get("QueuePilot-continuous-v0"), agent=APG,
    recipes={"apg": {"hidden": [64, 64], "lr": 1e-3, "horizon": 40, "episode_steps": 2000, "max_grad_norm": 1.0,
                     "drop_width_pkts": 0.25, "init_bias": -3.0}},
    train_configs=train_configs,
    legacy_runs={"results/apg": "apg"},  # trained by scripts/train_apg.py (1,500 updates, seeds 10-12)
    ns3=None, ns3_markdown="rlbm_jax.queuepilot.ns3:markdown", report_extra=beside_ppo)
