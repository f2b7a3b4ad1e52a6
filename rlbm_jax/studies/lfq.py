"""LFQ (a flow's queue cap learnt inside a fair queue, `LFQ-v0`) as a study of the kit: the
paper's offline training by A/B forking (`rlbm_jax.lfq.agent`), its test sweep and its
baselines (`rlbm_jax.lfq.study` states the grid, the sweep and the scaling).

    training    the cap network by A/B forks on the grid of whole Mbit/s and ms (882
                configurations, NewReno and CUBIC), one network per training seed
    selection   a 5 x 5 grid at quarter values (7.25-23.25 Mbit/s x 7.25-23.25 ms), both TCPs,
                off the training grid and off the test sweep, SELECTION_SEEDS
    test        the paper's Table VII sweep at half values (delays at 15.5 Mbit/s, bandwidths
                at 15.5 ms, both TCPs), TEST_SEEDS
    baselines   fq with a cap of 100 and of 1000 packets, fq capped at the flow's BDP, FQ-CoDel
                (each its own family: the test judges LFQ against all four)
A run is one flow of `eval_s` seconds counted in packet slots: the agent acts every 10
packet slots (`LFQ_TICKS_PER_STEP` ticks of `LFQ_PKTS_PER_TICK`), so a run's steps depend on
its bandwidth (`run_steps`) and there is no warm-up.  Judging inside ns-3 (`study.py lfq
ns3`) is `scripts/lfq.py ns3`'s lock-step run of the exported graphs and the chosen baselines.
"""
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import formulations
from rlbm_jax.env.formulations import lfq as lfqf
from rlbm_jax.lfq import agent
from rlbm_jax.lfq import study as S
from rlbm_jax.study import Baseline, Seeds, Study

SELECTION_SWEEP = (7.25, 11.25, 15.25, 19.25, 23.25)
SELECTION_SEEDS = (4000, 4001)
NOMINAL_RATE_BPS = 15e6  # step_s: the agent's interval at this bandwidth (a run's own depends on its bandwidth)


def selection_configs() -> dict:
    return S.labelled_configs([(r, d, t) for t in S.TCPS for r in SELECTION_SWEEP for d in SELECTION_SWEEP])


def test_configs() -> dict:
    return S.labelled_configs(S.test_configs())


def train_configs() -> list:
    """The training grid (what the A/B-fork trainer draws from)."""
    far = S.far_delay_line_ticks()
    return [S.config_kw(r, d, t, delay_line_ticks=far) for r, d, t in S.train_configs()]


def run_steps(config: dict, seconds: float) -> int:
    return int(S.steps_for(seconds, config["bottleneck_rate_bps"]))


def _bdp_cap(config: dict) -> dict:
    delay_s = config["bottleneck_delay_s"] + config["access_delay_s"]
    cap = float(np.clip(S.bdp_pkts(config["bottleneck_rate_bps"], delay_s), *lfqf.CAP_RANGE_PKTS))
    return {"fq_flow_cap_pkts": cap}


def baselines() -> list:
    held = dict(actor=agent.declared_cap_actor)
    return [Baseline("fq-100", "fq-100", {"fq_flow_cap_pkts": 100.0}, **held),
            Baseline("fq-1000", "fq-1000", {"fq_flow_cap_pkts": 1000.0}, **held),
            Baseline("fq-bdp", "fq-bdp", _bdp_cap, **held),
            Baseline("fq-codel", "fq-codel", {"policy": "fq-codel", "fq_flow_cap_pkts": 100.0}, **held)]


def record_step(state, reward, info, action, ep) -> dict:
    """The flow's bandwidth and queue, the cap in force and the largest queue so far (from
    the tick-by-tick queue histogram)."""
    hist = state.sim.metrics.queue_hist[0]
    qmax = jnp.max(jnp.where(hist > 0, jnp.arange(hist.shape[-1]), 0)).astype(jnp.float32)
    return {"bandwidth_mbps": info["bandwidth_mbps"], "queue_pkts": info["queue_pkts"], "cap_pkts": action[0],
            "queue_max_pkts": qmax}


def report_extra(rows, cfg, out) -> list:
    """The learnt cap against the configuration (the paper's Tables I-IV: its correlation with
    the bandwidth at a fixed delay and with the delay at a fixed bandwidth, its mean) from
    runs.csv, and caps.png (the cap against delay and bandwidth beside the BDP)."""
    triples = [c for c in S.test_configs() if S.label(*c) in cfg["configs"]]
    agent_rows = [r for r in rows if r["kind"] == "agent"]
    units = sorted({int(r["training_seed"]) for r in agent_rows})
    seeds = sorted({int(r["seed"]) for r in agent_rows})
    at = {(int(r["training_seed"]), int(r["seed"]), r["config"]): float(r["cap_pkts"]) for r in agent_rows}
    cap = np.asarray([[[at[(u, s, S.label(*c))] for c in triples] for s in seeds] for u in units])
    if not all(any(c[2] == t and c[0] == S.TEST_FIXED for c in triples) and
               any(c[2] == t and c[1] == S.TEST_FIXED for c in triples) for t in S.TCPS):
        return ["(The test ran part of the sweep: no cap correlations.)"]
    corr = S.correlations({"cap_pkts": cap}, triples)
    S.plot_caps({"cap_pkts": cap}, triples, out / "caps.png")
    L = ["## The learnt cap against the configuration (`caps.png`)", "",
         "Its Pearson correlation with the bandwidth at a fixed delay and with the delay at a fixed bandwidth (the "
         "paper's Tables I and III), and its mean over the sweep (Tables II and IV), over the training seeds' "
         "mean caps.", "", "| TCP | corr. bandwidth | corr. delay | mean cap (pkts) |", "| --- | --- | --- | --- |"]
    L += [f"| {t} | {c['bandwidth']:.3f} | {c['delay']:.3f} | {c['mean_cap_pkts']:.1f} |" for t, c in corr.items()]
    L += ["", "The paper's Table VII (400 flows, both CCAs; throughput Mbit/s, max / avg queue packets): "
          + "; ".join(f"{k} {v[0]}, {v[1]} / {v[2]}" for k, v in S.PAPER_TABLE7.items()) + "."]
    return L


STUDY = Study(
    name="lfq", title="LFQ: a flow's queue cap learnt inside fq, against fq and FQ-CoDel",
    formulation=formulations.get("LFQ-v0"),
    step_s=S.PKTS_PER_STEP * S.data_pkt_bits() / NOMINAL_RATE_BPS, episode_s=60.0,
    recipes={"paper-ab": {"alpha": 0.01, "flows": 512, "iterations": 23, "lr": 1e-3, "duration_s": S.DURATION_S}},
    train_configs=train_configs, selection_configs=selection_configs, test_configs=test_configs,
    baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=SELECTION_SEEDS, test=S.TEST_SEEDS),
    eval_s=S.TEST_DURATION_S, warmup_s=0.0,
    metrics={"bandwidth_mbps": True, "queue_pkts": False, "queue_max_pkts": False},
    step_record=record_step, step_max=("queue_max_pkts",), recorded=("cap_pkts",), report_extra=report_extra,
    agent=agent.AB_FORK, ticks_per_step=lfqf.LFQ_TICKS_PER_STEP, run_steps=run_steps,
    legacy_runs={"results/lfq": "paper-ab"},  # trained by scripts/lfq.py (512 flows, 23 iterations per seed)
    ns3="rlbm_jax.cli.lfq:study_ns3", ns3_markdown="rlbm_jax.lfq.ns3:markdown")
