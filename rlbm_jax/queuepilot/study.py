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

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from rlbm_jax import scenarios
from rlbm_jax.env import formulations, metrics as mx
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT
from rlbm_jax.env.params import make_params, stack_params
from rlbm_jax.env.randomize import MixtureEnv
from rlbm_jax.env.rlbm_env import RLBMEnv

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
    if weights and not (run / "trained.msgpack").is_file():
        raise ValueError(f"{run} holds no trained.msgpack (run `queuepilot.py train --run-dir {run}` first)")
    if not (run / "config.json").is_file():
        raise ValueError(f"{run} holds no config.json (a training run of `queuepilot.py train`)")
    cfg = json.loads((run / "config.json").read_text())
    missing = [k for k in ("ppo", "episode_s", "seeds") if k not in cfg]
    if missing:
        raise ValueError(f"{run / 'config.json'} lacks {', '.join(missing)} (a training run of `queuepilot.py train`)")
    return cfg


def load_trained(run: Path):
    """(ppo, params [seeds], obs_stats [seeds], seeds, updates) of a training run: the
    trainer rebuilt from its config.json, the networks from its trained.msgpack."""
    from flax import serialization

    cfg = json.loads((run / "config.json").read_text())
    ppo, _ = make_ppo(cfg["ppo"], cfg["episode_s"])
    seeds = cfg["seeds"]
    tmpl = jax.eval_shape(ppo.init_seeds, jnp.stack([jax.random.PRNGKey(s) for s in seeds]))
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), {"params": tmpl.params, "obs_stats": tmpl.obs_stats})
    zeros["updates"] = 0
    state = serialization.from_bytes(zeros, (run / "trained.msgpack").read_bytes())
    return ppo, state["params"], state["obs_stats"], seeds, int(state["updates"])


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
# the variants judged in ns-3 when a run's results.json has chosen none
DEFAULT_VARIANTS = ("ared-r0.1", "pie-15ms", "codel-5ms")


def algorithm_of(variant: str) -> str:
    """The classic AQM a variant name belongs to ("fq-codel-2ms" -> "fq-codel")."""
    return next((a for a in sorted(ALGORITHMS, key=len, reverse=True) if variant == a or variant.startswith(a + "-")),
                variant.split("-")[0])


# ---- evaluation ------------------------------------------------------------------------
def rollout_fn(env: RLBMEnv, steps: int, warm_steps: int, actor=None):
    """A jitted function (sims [N] stacked SimParams, keys [N], actor_args) -> per-run
    results: the formulation's mean reward after `warm_steps`, the fraction of steps with
    a drop, the action histogram, the run summary (`metrics.summarize`, measured from the
    sims' warmup_s) and the completion log.  `actor` is None (the switch's own policy acts;
    the action is ignored) or a function (actor_args, carry, obs [D], first) -> (carry,
    action); its carry is made by actor_args["carry0"].  With a discrete action (an index into
    MARK_LEVELS) the histogram counts indices; with a continuous one (the marking probability,
    QueuePilot-continuous-v0) it counts the probabilities by the level each is nearest to."""
    n_levels = len(MARK_LEVELS)
    discrete = isinstance(env.action_space(), spaces.Discrete)
    levels = np.asarray(MARK_LEVELS, np.float32)
    edges = jnp.asarray((levels[1:] + levels[:-1]) / 2)

    def one(sp, key, actor_args):
        ep = env.default_params.replace(sim=sp)
        k0, key = jax.random.split(key)
        obs, st = env.reset_env(k0, ep)
        carry = actor_args["carry0"] if actor is not None else ()

        def body(c, i):
            st, obs, carry, key, first = c
            key, k = jax.random.split(key)
            if actor is None:
                a = jnp.zeros((), jnp.int32) if discrete else jnp.zeros((1,), jnp.float32)
            else:
                carry, a = actor(actor_args, carry, obs, first)
            obs, st, r, _, info = env.step_env(k, st, a, ep)
            warm = i >= warm_steps
            out = dict(reward=jnp.where(warm, r, 0.0), drop_step=jnp.where(warm, info["dropped_step"], 0.0),
                       hist=jnp.where(warm, jax.nn.one_hot(a if discrete else jnp.searchsorted(edges, a.reshape(())),
                                                           n_levels), 0.0))
            return (st, obs, carry, key, jnp.zeros((), bool)), out

        init = (st, obs, carry, key, jnp.ones((), bool))
        (st, _, _, _, _), tr = jax.lax.scan(body, init, jnp.arange(steps))
        n = max(steps - warm_steps, 1)
        res = {"reward": tr["reward"].sum() / n, "drop_steps": tr["drop_step"].sum() / n,
               "action_hist": tr["hist"].sum(0) / n}
        res.update(mx.summarize(st.sim.metrics, sp))
        res["log"] = st.sim.metrics.log
        res["log_count"] = st.sim.metrics.log_count
        return res

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))


def lstm_actor(ppo):
    """The trained policy's deterministic action (argmax) as an `actor` of rollout_fn;
    actor_args = {"params", "obs_stats", "carry0"}."""
    def act(args, carry, obs, first):
        carry = jax.tree.map(lambda x: x[None], carry)
        carry, a = ppo.act_deterministic(args["params"], args["obs_stats"], obs[None], carry, first[None])
        return jax.tree.map(lambda x: x[0], carry), jnp.asarray(a).reshape(()).astype(jnp.int32)
    return act


def actor_args(ppo, params, obs_stats) -> dict:
    from rlbm_jax.ppo import networks

    carry0 = jax.tree.map(lambda x: x[0], networks.initial_carry(1, ppo.cfg.lstm_size))
    return {"params": params, "obs_stats": obs_stats, "carry0": carry0}


_COMPILED: dict = {}


def run_batch(runs, steps, warm_steps, actor=None, args=None, chunk: int = 50, progress=None, formulation=QUEUEPILOT):
    """runs: list of (make_params kwargs, seed).  Returns a list of per-run result dicts
    (numpy), evaluated in batches of `chunk` runs (the last padded): one compiled function
    per (steps, warm_steps, actor, formulation, static sizes, chunk), reused across calls."""
    sims = [make_params(**kw) for kw, _ in runs]
    key = (steps, warm_steps, actor, formulation.id, jax.tree.structure(sims[0]), chunk)
    if key not in _COMPILED:
        env = make_env(sims[0], episode_s=max(steps * STEP_S, STEP_S), formulation=formulation)
        _COMPILED[key] = rollout_fn(env, steps, warm_steps, actor)
    fn = _COMPILED[key]
    out = []
    for i in range(0, len(runs), chunk):
        part = list(range(i, min(i + chunk, len(runs))))
        pad = part + [part[-1]] * (chunk - len(part))  # one shape: one compilation
        sp = stack_params([sims[j] for j in pad])
        keys = jnp.stack([jax.random.PRNGKey(runs[j][1]) for j in pad])
        res = jax.device_get(fn(sp, keys, args if args is not None else {}))
        for k, j in enumerate(part):
            out.append({name: np.asarray(v[k]) for name, v in res.items()})
        if progress is not None:
            progress(len(out))
    return out


def fct_by_size(results, warmup_s: float) -> dict:
    """p99 and median FCT (seconds) and flows per size bucket (`metrics.SIZE_BUCKETS`),
    pooled over runs (`metrics.pooled_tail` on the FCT)."""
    tail = mx.pooled_tail([r["log"][: int(r["log_count"])] for r in results], warmup_s, column="fct_s")
    return {b: {"flows": t["flows"], "fct_p99_s": t["p99"], "fct_p50_s": t["p50"]} for b, t in tail.items()}


SCORE_FIELDS = ("reward", "drop_steps", "util_wire", "drop_rate", "mark_rate", "queue_mean_pkts")


def mean_se(values) -> tuple:
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


__all__ = ["STEP_S", "EPISODE_S", "PPO_RECIPE", "TRAIN_FLOWS", "TRAIN_RTTS_S", "TRAIN_TCPS", "TEST_FLOWS",
           "TEST_RTTS_S", "SELECTION_SEEDS", "TEST_SEEDS", "config_kw", "train_configs", "train_env", "make_env",
           "baseline_variants", "rollout_fn", "lstm_actor", "actor_args", "run_batch", "fct_by_size", "mean_se",
           "formulations"]
