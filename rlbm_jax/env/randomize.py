"""Domain randomisation: every episode draws its own scenario.

`RandomizedEnv(env)` wraps an `RLBMEnv`.  On each reset it draws, from the ranges
in `RandomizedParams`, the per-class buffer N (integer in [buffer_lo_pkts, buffer_hi_pkts],
uniform, or log-uniform so that every factor of 2 in N gets the same share of
episodes; shared buffer B = P * N as in the thesis), the load
(uniform in [load_lo, load_hi]) and the TCP variant (uniform over `tcp_allowed`), and
keeps the drawn `SimParams` in its state, so `step` stays a pure function of
(key, state, action, params) and auto-reset draws a new scenario.  Observations,
actions and rewards are the wrapped env's.  `MixtureEnv(env, sims)` instead draws each
episode's configuration from a given list (QueuePilot's training mix).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from rlbm_jax.env import model
from rlbm_jax.env.params import TCP_NAMES, TCP_VARIANTS, SimParams, stack_params
from rlbm_jax.env.presets import THESIS_RANDOM, thesis_params
from rlbm_jax.env.rlbm_env import DEFAULT_FORMULATION, EnvParams, EnvState, RLBMEnv


@struct.dataclass
class RandomizedState(environment.EnvState):
    inner: EnvState
    sim: SimParams  # this episode's scenario


@struct.dataclass
class RandomizedParams(environment.EnvParams):
    env: EnvParams = None
    buffer_lo_pkts: int = 100
    buffer_hi_pkts: int = 1000
    load_lo: float = 0.1
    load_hi: float = 0.9
    tcp_allowed: jnp.ndarray = None  # [len(TCP_NAMES)] bool
    buffer_log_uniform: jnp.ndarray = None  # [] bool: N log-uniform instead of uniform


BUFFER_DISTS = ("uniform", "log-uniform")


def make_randomized_params(env_params: EnvParams, *, buffer_pkts=(100, 1000), load=(0.1, 0.9),
                           tcp=("newreno", "cubic"), buffer_dist: str = "uniform") -> RandomizedParams:
    """Ranges checked against the wrapped env (the ring must hold the largest buffer).
    The wrapped sim's record of model choices gains every TCP the range allows (the draw is
    traced), so a backend that lacks one (native: DCTCP) is not chosen; drawing DCTCP turns
    ECN on, as its `make_params` does."""
    if env_params.sim.flow_groups > 1:
        raise ValueError(f"the randomized env draws one TCP for the whole run; its sim has flow_groups "
                         f"{env_params.sim.flow_groups}, each with its own TCP: build it with flow_groups 1")
    lo, hi = (int(b) for b in buffer_pkts)
    if not 1 <= lo <= hi:
        raise ValueError(f"buffer_pkts range must satisfy 1 <= lo <= hi, got {buffer_pkts!r}")
    if hi > env_params.sim.queue_capacity_pkts:
        raise ValueError(f"buffer_pkts upper bound {hi} exceeds the sim's queue_capacity_pkts "
                         f"({env_params.sim.queue_capacity_pkts}); build the sim with queue_capacity_pkts >= {hi}")
    llo, lhi = (float(x) for x in load)
    if not (np.isfinite(llo) and np.isfinite(lhi) and 0 <= llo <= lhi):
        raise ValueError(f"load range must satisfy 0 <= lo <= hi, got {load!r}")
    tcp = (tcp,) if isinstance(tcp, str) else tuple(tcp)
    bad = [t for t in tcp if t not in TCP_NAMES]
    if bad or not tcp:
        raise ValueError(f"tcp must be a non-empty subset of {TCP_NAMES}, got {tcp!r}")
    if buffer_dist not in BUFFER_DISTS:
        raise ValueError(f"buffer_dist must be one of {BUFFER_DISTS}, got {buffer_dist!r}")
    mask = jnp.asarray([n in tcp for n in TCP_NAMES])
    # the draw is traced: the sim's record of choices names every TCP it may draw (and ECN, if
    # one of them turns it on), so that a backend that lacks one refuses the env
    drawn = [("tcp", t) for t in tcp] + [("ecn", True) for t in tcp if TCP_VARIANTS[TCP_NAMES.index(t)].ecn_always]
    env_params = env_params.replace(sim=env_params.sim.replace(
        model_choices=model.merge_choices(env_params.sim.model_choices, drawn)))
    return RandomizedParams(env=env_params, buffer_lo_pkts=lo, buffer_hi_pkts=hi, load_lo=llo, load_hi=lhi,
                            tcp_allowed=mask, buffer_log_uniform=jnp.asarray(buffer_dist == "log-uniform"),
                            max_steps_in_episode=env_params.max_steps_in_episode)


def sample_scenario(key, params: RandomizedParams) -> SimParams:
    """One draw of (N, load, TCP) applied to the wrapped env's sim params."""
    base = params.env.sim
    kb, kl, kt = jax.random.split(key, 3)
    lo, hi = params.buffer_lo_pkts, params.buffer_hi_pkts
    n_lin = jax.random.randint(kb, (), lo, hi + 1)
    # log-uniform on [lo, hi + 1), floored: P(N = n) = log((n + 1) / n) / log((hi + 1) / lo)
    u = jax.random.uniform(kb, ())
    n_log = jnp.floor(lo * jnp.exp(u * jnp.log((hi + 1.0) / lo))).astype(n_lin.dtype)
    n = jnp.where(params.buffer_log_uniform, jnp.clip(n_log, lo, hi), n_lin)
    load = jax.random.uniform(kl, (), minval=params.load_lo, maxval=params.load_hi)
    logits = jnp.where(params.tcp_allowed, 0.0, -jnp.inf)
    tcp_id = jax.random.categorical(kt, logits)
    ecn_always = jnp.asarray([v.ecn_always for v in TCP_VARIANTS])[tcp_id]  # DCTCP turns ECN on itself
    return base.replace(class_cap_pkts=jnp.full_like(base.class_cap_pkts, n),
                        buffer_pkts=(n * base.num_classes).astype(base.buffer_pkts.dtype),
                        load=load.astype(base.load.dtype), tcp_id=tcp_id.astype(base.tcp_id.dtype),
                        ecn=base.ecn | ecn_always)


class RandomizedEnv(environment.Environment[RandomizedState, RandomizedParams]):
    """An `RLBMEnv` whose scenario is redrawn at every reset."""

    def __init__(self, env: RLBMEnv, **ranges):
        super().__init__()
        self.env = env
        self.formulation = env.formulation
        self.obs_layout = env.obs_layout
        self.obs_shape = env.obs_shape
        self.num_classes = env.num_classes
        self._default = make_randomized_params(env.default_params, **ranges)

    @property
    def default_params(self) -> RandomizedParams:
        return self._default

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def num_actions(self) -> int:
        return self.env.num_actions

    def action_space(self, params=None):
        return self.env.action_space(None)

    def observation_space(self, params=None):
        return self.env.observation_space(None)

    def _inner_params(self, params: RandomizedParams, sim_params: SimParams) -> EnvParams:
        return params.env.replace(sim=sim_params)

    def reset_env(self, key, params: RandomizedParams):
        ks, kr = jax.random.split(key)
        sp = sample_scenario(ks, params)
        obs, inner = self.env.reset_env(kr, self._inner_params(params, sp))
        return obs, RandomizedState(time=jnp.zeros((), jnp.int32), inner=inner, sim=sp)

    def step_env(self, key, state: RandomizedState, action, params: RandomizedParams):
        obs, inner, reward, terminated, info = self.env.step_env(key, state.inner, action,
                                                                 self._inner_params(params, state.sim))
        info = dict(info, load=state.sim.load, buffer_pkts=state.sim.buffer_pkts, tcp_id=state.sim.tcp_id)
        # the wrapper keeps its own step count (a trainer may offset it to spread episodes)
        new = RandomizedState(time=(state.time + 1).astype(jnp.int32), inner=inner, sim=state.sim)
        return obs, new, reward, terminated, info

    def is_terminated(self, state, params):
        return jnp.asarray(False)


def thesis_random_ranges(**ranges) -> tuple[dict, dict]:
    """(ranges, ring): the ranges a randomised env draws from, `THESIS_RANDOM` with any of
    buffer_pkts, load, tcp and buffer_dist replaced, and the simulator overrides that size
    the ring (and the configured buffer) for the largest buffer drawn."""
    ranges = dict(THESIS_RANDOM, **ranges)
    hi_pkts = int(ranges["buffer_pkts"][1])
    return ranges, {"queue_capacity_pkts": hi_pkts, "buffer_per_class_pkts": hi_pkts}


def thesis_randomized_env(*, buffer_pkts=None, load=None, tcp=None, buffer_dist: str | None = None,
                          episode_s: float = 60.0, agent_interval_s: float = 0.1, pkts_per_tick: int = 1,
                          formulation=DEFAULT_FORMULATION, **sim_overrides):
    """The thesis scenario (flows start during the first 45 s of each 60 s episode),
    "rl" policy, a ring that holds the largest buffer, and every episode's N, load and
    TCP drawn at reset from `THESIS_RANDOM` (or the ranges given): what
    `rlbm_jax.make(formulation, randomize=...)` builds, with a 16-flow completion log
    (training reads no whole-run statistics).  Returns (env, params)."""
    ranges, ring = thesis_random_ranges(**{k: v for k, v in dict(buffer_pkts=buffer_pkts, load=load, tcp=tcp,
                                                                 buffer_dist=buffer_dist).items() if v is not None})
    sim_params = thesis_params(**{"policy": "rl", **ring, "pkts_per_tick": pkts_per_tick, "completion_log_size": 16,
                                  **sim_overrides})
    env = RandomizedEnv(RLBMEnv(sim_params, formulation=formulation, agent_interval_s=agent_interval_s,
                                episode_s=episode_s), **ranges)
    return env, env.default_params


@struct.dataclass
class MixtureParams(environment.EnvParams):
    env: EnvParams = None
    table: SimParams = None  # K configurations stacked on a leading axis


class MixtureEnv(RandomizedEnv):
    """An `RLBMEnv` whose every episode runs one of K given simulator configurations,
    drawn uniformly at reset (a scenario mix: link, RTT, flow counts, buffer, TCP).  The
    configurations must agree on the static fields (shapes, ticks per step); the drawn
    one travels in the state, as with `RandomizedEnv`."""

    def __init__(self, env: RLBMEnv, sims):
        environment.Environment.__init__(self)
        sims = list(sims)
        if not sims:
            raise ValueError("MixtureEnv needs at least one configuration")
        merged = model.merge_choices(*(s.model_choices for s in sims))  # the mix asks for every one's choices
        sims = [s.replace(model_choices=merged) for s in sims]
        ref = jax.tree.structure(sims[0])
        for i, s in enumerate(sims[1:], 1):
            if jax.tree.structure(s) != ref:
                raise ValueError(f"configuration {i} differs from configuration 0 in a static field (shapes, "
                                 "packets per tick, delay line, ring): build them with the same static sizes")
        tick = {round(float(s.tick_s), 12) for s in sims}
        if len(tick) > 1:
            raise ValueError(f"configurations have different tick lengths {sorted(tick)}; an agent step is a fixed "
                             "number of ticks, so they must share the bottleneck rate and packet size")
        self.env = env
        self.formulation = env.formulation
        self.obs_layout = env.obs_layout
        self.obs_shape = env.obs_shape
        self.num_classes = env.num_classes
        self.num_configs = len(sims)
        table = stack_params(sims)
        base = env.default_params
        self._default = MixtureParams(env=base.replace(sim=sims[0]), table=table,
                                      max_steps_in_episode=base.max_steps_in_episode)

    def reset_env(self, key, params: MixtureParams):
        ks, kr = jax.random.split(key)
        k = jax.tree.leaves(params.table)[0].shape[0]
        i = jax.random.randint(ks, (), 0, k)
        sp = jax.tree.map(lambda x: x[i], params.table)
        obs, inner = self.env.reset_env(kr, self._inner_params(params, sp))
        return obs, RandomizedState(time=jnp.zeros((), jnp.int32), inner=inner, sim=sp)
