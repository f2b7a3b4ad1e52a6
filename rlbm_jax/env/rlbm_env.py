"""`RLBMEnv`: the thesis buffer-management task as a gymnax 1.0 environment.

Every agent interval (default 0.1 s of simulated time) the agent sets, per class,
alpha in [0, 1]; the switch then admits a class-c packet while its queue is below
    threshold_c = alpha_c * beta_c * (B - Q)       (B shared buffer, Q occupancy)
(the "rl" buffer policy), capped by the class FIFO cap.

Observation, float32 [3P + 4] (P classes); the first five rows are the thesis's state,
the last P + 1 let one policy serve many buffer sizes (thresholds are absolute in effect):
    [0:P]      beta_c, the fixed per-class weights
    [P:2P]     drain rate of each class over the interval / bottleneck capacity
    [2P]       free fraction of the shared buffer, (B - Q) / B, at the interval's end
    [2P+1]     flows finished in the interval / `flows_scale`
    [2P+2]     packets dropped in the interval / bottleneck capacity in packets per interval
    [2P+3:3P+3] each class's queue at the interval's end / BDP (packets)
    [3P+3]     shared buffer size B / BDP
Action, float32 [P] in [0, 1]: alpha_c (values outside are clipped).
Reward: -log(WFS) + log(1 + throughput), WFS the worst FCT slowdown
    (FCT / (base RTT + size * 8 / C)) among flows that finished in the interval and
    throughput the packets received by the sink / capacity in packets per interval
    (so in [0, 1]).  An interval in which no flow finished contributes WFS = 1, i.e.
    a zero slowdown term: nothing finished means nothing to blame.  (Carrying an old
    WFS forward would punish the agent for the past; the choice is tested.)
State: `EnvState(sim=SimState, time=steps taken)`.
Episodes never terminate; they are truncated after `max_steps_in_episode` intervals
(gymnax auto-resets and reports `truncated`).  `step` is a pure function of
(key, state, action, params); all physics lives in `params.sim`.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from rlbm_jax.env import metrics as mx, sim
from rlbm_jax.env.params import THESIS_BETA, SimParams, thesis_params


def obs_dim(num_classes: int) -> int:
    """Width of the observation for P classes (layout in the module docstring)."""
    return 3 * num_classes + 4


def threshold_columns(num_classes: int):
    """Columns of the observation that fix a class threshold's scale: (beta [P],
    free fraction of the shared buffer, B/BDP)."""
    return list(range(num_classes)), 2 * num_classes, 3 * num_classes + 3


@struct.dataclass
class EnvState(environment.EnvState):
    sim: sim.SimState
    time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
    sim: SimParams = None
    flows_scale: float = 10.0
    max_steps_in_episode: int = 600
    ticks_per_step: int = struct.field(pytree_node=False, default=1186)

    @property
    def agent_interval_s(self):
        return self.ticks_per_step * self.sim.tick_s


def make_env_params(sim_params: SimParams | None = None, *, agent_interval_s: float = 0.1,
                    episode_s: float = 60.0, flows_scale: float = 10.0) -> EnvParams:
    """EnvParams for a simulator configuration (default: the thesis scenario, "rl" policy)."""
    if sim_params is None:
        sim_params = thesis_params(policy="rl", beta=THESIS_BETA)
    if not agent_interval_s > 0:
        raise ValueError(f"agent_interval_s must be positive, got {agent_interval_s!r}")
    if not episode_s >= agent_interval_s:
        raise ValueError(f"episode_s ({episode_s}) must be at least agent_interval_s ({agent_interval_s})")
    tick_s = float(np.max(np.asarray(sim_params.tick_s)))
    ticks = max(1, int(round(agent_interval_s / tick_s)))
    return EnvParams(sim=sim_params, flows_scale=flows_scale,
                     max_steps_in_episode=int(round(episode_s / (ticks * tick_s))), ticks_per_step=ticks)


class RLBMEnv(environment.Environment[EnvState, EnvParams]):
    """Shared-buffer thresholds set by an agent (gymnax 1.0 API: `step` returns
    obs, state, reward, terminated, truncated, info).  With a baseline buffer policy
    in the sim params the action is ignored, which scores that baseline on the same
    reward."""

    def __init__(self, sim_params: SimParams | None = None, **kwargs):
        super().__init__()
        self._default = make_env_params(sim_params, **kwargs)
        self.num_classes = self._default.sim.num_classes
        self.obs_shape = (obs_dim(self.num_classes),)

    @property
    def default_params(self) -> EnvParams:
        return self._default

    @property
    def name(self) -> str:
        return "RLBM-v0"

    @property
    def num_actions(self) -> int:
        return self.num_classes

    def action_space(self, params: EnvParams | None = None):
        return spaces.Box(0.0, 1.0, (self.num_classes,), jnp.float32)

    def observation_space(self, params: EnvParams | None = None):
        return spaces.Box(0.0, jnp.inf, self.obs_shape, jnp.float32)

    def state_space(self, params: EnvParams | None = None):
        raise NotImplementedError("the simulator state is a large pytree; see EnvState")

    def reset_env(self, key, params: EnvParams):
        s = sim.init(key, params.sim)
        state = EnvState(sim=s, time=jnp.zeros((), jnp.int32))
        return self.get_obs(state, params), state

    def step_env(self, key, state: EnvState, action, params: EnvParams):
        alpha = jnp.clip(jnp.asarray(action, jnp.float32).reshape(self.num_classes), 0.0, 1.0)
        s = state.sim.replace(rl_alpha=alpha, interval=mx.init_interval(self.num_classes))
        s, _ = sim.run(s, params.sim, params.ticks_per_step)
        new = EnvState(sim=s, time=(state.time + 1).astype(jnp.int32))
        reward, parts = self.reward(s, params)
        obs = self.get_obs(new, params)
        info = {"throughput": parts["throughput"], "worst_slowdown": parts["worst_slowdown"],
                "flows_done": s.interval.flows_done, "drops": s.interval.drops}
        return obs, new, reward, jnp.asarray(False), info

    def capacity_pkts(self, params: EnvParams):
        return params.ticks_per_step * params.sim.pkts_per_tick

    def reward(self, s: sim.SimState, params: EnvParams):
        iv = s.interval
        thr = iv.sink_pkts / self.capacity_pkts(params)
        wfs = jnp.where(iv.flows_done > 0, jnp.maximum(iv.worst_slowdown, 1e-6), 1.0)
        r = -jnp.log(wfs) + jnp.log1p(thr)
        return r.astype(jnp.float32), {"throughput": thr, "worst_slowdown": wfs}

    def get_obs(self, state: EnvState, params: EnvParams, key=None):
        s, p = state.sim, params.sim
        iv = s.interval
        cap = self.capacity_pkts(params)
        free = (p.buffer_pkts - jnp.sum(s.queue.pkts)) / p.buffer_pkts
        obs = jnp.concatenate([
            p.beta.astype(jnp.float32),
            iv.deq.astype(jnp.float32) / cap,
            jnp.reshape(free, (1,)),
            jnp.reshape(iv.flows_done / params.flows_scale, (1,)),
            jnp.reshape(iv.drops / cap, (1,)),
            s.queue.pkts.astype(jnp.float32) / p.bdp_pkts,
            jnp.reshape(p.buffer_pkts / p.bdp_pkts, (1,)),
        ])
        return obs.astype(jnp.float32)

    def is_terminated(self, state: EnvState, params: EnvParams):
        return jnp.asarray(False)


class LegacyStep:
    """Wraps an env so that `step` returns the 5 values (obs, state, reward, done, info)
    that purejaxrl-style trainers expect; `info` keeps "terminated", "truncated" and
    "final_observation" so that truncation can still be bootstrapped."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None) -> tuple[Any, Any, Any, Any, dict]:
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info
