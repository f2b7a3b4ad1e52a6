"""QueuePilot (an RL ECN-marking AQM) at 1/10 scale: its training mix, its PPO recipe, the
classic AQMs it is judged against and the evaluation that scores them all alike.

Scaling (`scenarios.queuepilot`): the paper's 1 Gbit/s bottleneck with 100-300 long-lived
TCP flows becomes 100 Mbit/s with 10-30 (the same rate per flow), its 10 % non-ECN UDP
background becomes ECN-capable web-search TCP flows at load 0.1, the buffer stays
B = BDP / sqrt(N), the step 5 ms.  The paper mixes CUBIC and Reno flows in one run; here an
episode runs one TCP for all its flows (NewReno or CUBIC, drawn per episode).
    training mix   N in {10, 20, 25} x base RTT in {20, 40, 60, 80} ms x {CUBIC, NewReno}
                   (the paper's {100, 200, 250} flows and RTTs), a configuration per episode
    test grid      N in {10, 20, 30} x RTT in {20, 40, 60, 80, 100} ms: N = 30 and 100 ms
                   are outside the training range, as in the paper
Seeds are fixed before any run and disjoint: training seeds 0.., selection seeds
(choosing each baseline's parameters and the agent's training seed to report)
SELECTION_SEEDS, test seeds TEST_SEEDS.

The agent acts on the observation of `formulations.queuepilot` (six rate and queue
features of the last step) through an LSTM(32) and two 64-64 tanh towers (the paper's
network); PPO with the paper's gamma 0.995, lambda 0.97, clip 0.08.
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import scenarios
from rlbm_jax.env import formulations, metrics as mx
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT
from rlbm_jax.env.params import make_params
from rlbm_jax.env.randomize import MixtureEnv
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.study import rollout, trainer
from rlbm_jax.study.stats import mean_se  # noqa: F401  (the tables' mean ± s.e.)

STEP_S = 0.005
EPISODE_S = 10.0
TRAIN_FLOWS, TRAIN_RTTS_S, TRAIN_TCPS = (10, 20, 25), (0.02, 0.04, 0.06, 0.08), ("cubic", "newreno")
TEST_FLOWS, TEST_RTTS_S = (10, 20, 30), (0.02, 0.04, 0.06, 0.08, 0.10)
MAX_RTT_S = 0.10
SELECTION_SEEDS = tuple(range(1000, 1004))
TEST_SEEDS = tuple(range(2000, 2005))
EVAL_S, EVAL_WARMUP_S = 15.0, 5.0

# the paper's network and PPO constants; lr, rollout and batch are this project's (the
# paper's lr 1e-4 moves too little in the updates an accelerator session affords)
PPO_RECIPE = dict(network="lstm", lstm_size=32, hidden=(64, 64), activation="tanh", gamma=0.995, gae_lambda=0.97,
                  clip_eps=0.08, lr=3e-4, anneal_lr=False, ent_coef=0.01, num_steps=128, update_epochs=4,
                  num_minibatches=4)


def _max_buffer() -> int:
    """The largest B = BDP / sqrt(N) of the training and test configurations (the ring)."""
    return max(int(make_params(**scenarios.queuepilot(n, r)).buffer_pkts)
               for n in set(TRAIN_FLOWS) | set(TEST_FLOWS) for r in set(TRAIN_RTTS_S) | set(TEST_RTTS_S))


MAX_BUFFER_PKTS = _max_buffer()


def config_kw(long_flows: int, rtt_s: float, tcp: str = "cubic", **overrides) -> dict:
    """One configuration's make_params arguments, with the static sizes every configuration
    of the training mix and the test grid shares (so they batch together)."""
    return scenarios.queuepilot(long_flows, rtt_s, tcp, max_rtt_s=MAX_RTT_S, max_buffer_pkts=MAX_BUFFER_PKTS,
                                completion_log_size=512, **overrides)


def train_configs(flows=TRAIN_FLOWS, rtts_s=TRAIN_RTTS_S, tcps=TRAIN_TCPS) -> list[dict]:
    return [config_kw(n, r, t) for t in tcps for n in flows for r in rtts_s]


def make_env(sim_params, episode_s: float = EPISODE_S, formulation=QUEUEPILOT) -> RLBMEnv:
    """The study's env (QueuePilot's 5 ms step) of one configuration; `formulation` another
    with QueuePilot's knob (QueuePilot-continuous-v0 for a policy that outputs the marking
    probability)."""
    return RLBMEnv(sim_params, formulation=formulation, agent_interval_s=STEP_S, episode_s=episode_s)


def train_env(episode_s: float = EPISODE_S, configs=None):
    """(env, params): every episode runs one configuration of the training mix."""
    sims = [make_params(**kw) for kw in (configs or train_configs())]
    env = MixtureEnv(make_env(sims[0], episode_s), sims)
    return env, env.default_params


def make_ppo(ppo_cfg: dict, episode_s: float = EPISODE_S):
    """(PPO, PPOConfig): the trainer of the PPO settings `ppo_cfg` on the training mix."""
    from rlbm_jax.ppo import PPO, PPOConfig

    env, env_params = train_env(episode_s)
    cfg = PPOConfig.from_dict(ppo_cfg)
    return PPO(env, env_params, cfg), cfg


def trained_run(run: Path, weights: bool = True) -> dict:
    """The config.json of the training run in `run` (a ValueError when it holds none, or,
    with `weights`, no trained.msgpack)."""
    return trainer.trained_run(run, weights=weights, how=f"`queuepilot.py train --run-dir {run}`")


def load_trained(run: Path):
    """(ppo, params [seeds], obs_stats [seeds], seeds, updates) of a training run: the
    trainer rebuilt from its config.json, the networks from its trained.msgpack."""
    return trainer.load_trained(run, lambda cfg: make_ppo(cfg["ppo"], cfg["episode_s"])[0])


# ---- the classic AQMs, each with the parameter variants tried ----------------------------
def baseline_variants(buffer_pkts: int) -> dict:
    """name -> make_params overrides.  ARED as the paper's (min_th = r B, max_th = 3 min_th,
    max_p 0.1, ECN, r in 0.1, 0.2, 0.3), PIE with ns-3's 15 ms target and 5 ms, CoDel with
    its 5 ms / 100 ms and an aggressive 2 ms / 20 ms, FQ-CoDel (ns-3's FqCoDelQueueDisc:
    1024 flow queues, quantum one MTU) with the same two CoDel settings, droptail.  Every one
    with ECN senders.  FQ-CoDel's per-flow queues are sized for the largest buffer of every
    configuration, so all of them batch together."""
    out = {"droptail": dict(policy="droptail")}
    for r in (0.1, 0.2, 0.3):
        lo = max(1.0, r * buffer_pkts)
        out[f"ared-r{r:g}"] = dict(policy="ared", red_min_th_pkts=lo, red_max_th_pkts=3 * lo, red_max_p=0.1)
    out["pie-15ms"] = dict(policy="pie", pie_target_s=0.015)
    out["pie-5ms"] = dict(policy="pie", pie_target_s=0.005)
    out["codel-5ms"] = dict(policy="codel", codel_target_s=0.005, codel_interval_s=0.1)
    out["codel-2ms"] = dict(policy="codel", codel_target_s=0.002, codel_interval_s=0.02)
    fq = dict(policy="fq-codel", fq_quantum_bytes=1500, flow_queue_capacity_pkts=MAX_BUFFER_PKTS + 1)
    out["fq-codel-5ms"] = dict(fq, codel_target_s=0.005, codel_interval_s=0.1)
    out["fq-codel-2ms"] = dict(fq, codel_target_s=0.002, codel_interval_s=0.02)
    return out


ALGORITHMS = ("droptail", "ared", "pie", "codel", "fq-codel")
# the variants judged in ns-3 when a run has no selection (kit/ledger.json, or a pre-kit results.json)
DEFAULT_VARIANTS = ("ared-r0.1", "pie-15ms", "codel-5ms")


def algorithm_of(variant: str) -> str:
    """The classic AQM a variant name belongs to ("fq-codel-2ms" -> "fq-codel")."""
    return next((a for a in sorted(ALGORITHMS, key=len, reverse=True) if variant == a or variant.startswith(a + "-")),
                variant.split("-")[0])


# ---- evaluation ------------------------------------------------------------------------
_EDGES = jnp.asarray((np.asarray(MARK_LEVELS[1:], np.float32) + np.asarray(MARK_LEVELS[:-1], np.float32)) / 2)


def record_step(st, r, info, a, ep):
    """Per step: a drop in the step, and the action as a one-hot over MARK_LEVELS: an index
    (QueuePilot-v0) as it is, a marking probability (QueuePilot-continuous-v0) by the level it
    is nearest to (the action's dtype tells them apart when traced)."""
    idx = a if jnp.issubdtype(a.dtype, jnp.integer) else jnp.searchsorted(_EDGES, a.reshape(()))
    return {"drop_steps": info["dropped_step"], "action_hist": jax.nn.one_hot(idx, len(MARK_LEVELS))}


_ENVS: dict = {}


def _env_maker(formulation):
    """make_env(sim_params, steps) of an evaluation run of `steps` steps (one function per
    formulation: the rollout cache's key)."""
    if formulation.id not in _ENVS:
        _ENVS[formulation.id] = lambda sp, steps: make_env(sp, episode_s=max(steps * STEP_S, STEP_S),
                                                           formulation=formulation)
    return _ENVS[formulation.id]


def run_batch(runs, steps, warm_steps, actor=None, args=None, chunk: int = 50, progress=None, formulation=QUEUEPILOT):
    """runs: list of (make_params kwargs, seed).  Per-run results (numpy;
    `rlbm_jax.study.rollout.run_batch`, compiled once per shape): the formulation's mean
    reward after `warm_steps`, the fraction of steps with a drop (`drop_steps`), the action
    histogram (`action_hist`: indices into MARK_LEVELS, or a continuous marking probability
    counted by its nearest level), the run summary (`metrics.summarize`, from the sims'
    warmup_s) and the completion log.  `actor` is None (the switch's own policy acts) or an
    actor of `rlbm_jax.study.rollout` (`rollout.lstm_actor` for a trained agent)."""
    return rollout.run_batch(_env_maker(formulation), runs, steps, warm_steps, actor, args, chunk=chunk,
                             step_record=record_step, progress=progress)


lstm_actor = rollout.lstm_actor
actor_args = rollout.actor_args


def fct_by_size(results, warmup_s: float) -> dict:
    """p99 and median FCT (seconds) and flows per size bucket (`metrics.SIZE_BUCKETS`),
    pooled over runs (`metrics.pooled_tail` on the FCT)."""
    tail = mx.pooled_tail([r["log"][: int(r["log_count"])] for r in results], warmup_s, column="fct_s")
    return {b: {"flows": t["flows"], "fct_p99_s": t["p99"], "fct_p50_s": t["p50"]} for b, t in tail.items()}


SCORE_FIELDS = ("reward", "drop_steps", "util_wire", "drop_rate", "mark_rate", "queue_mean_pkts")


__all__ = ["STEP_S", "EPISODE_S", "PPO_RECIPE", "TRAIN_FLOWS", "TRAIN_RTTS_S", "TRAIN_TCPS", "TEST_FLOWS",
           "TEST_RTTS_S", "SELECTION_SEEDS", "TEST_SEEDS", "config_kw", "train_configs", "train_env", "make_env",
           "baseline_variants", "lstm_actor", "actor_args", "run_batch", "fct_by_size", "mean_se",
           "formulations"]
