"""`RLBMEnv`: buffer management at the bottleneck as a gymnax 1.0 environment.

Every agent interval (default 0.1 s of simulated time) the agent acts; the simulator
then runs the interval's ticks and fills the interval record (`metrics.Interval`: per
class arrivals, drops, departures and queues, the flows finished with their sizes and
slowdowns, timeouts, lost SYNs, data delivered).  A formulation
(`rlbm_jax.env.formulations`) turns that record into everything the agent sees:
    observation  float32 [D]: `formulation.obs_layout(P)` names each entry (a formulation
                 with a window of w intervals: the last w intervals' observations, oldest
                 first, kept in the state, `WindowedEnvState`)
    action       `formulation.action_space(P)`; `formulation.knobs` turns it into the
                 switch's knobs (`sim.KNOBS`), applied from the interval's first tick
    reward       float32 [], `formulation.reward`; its parts go to `info`
    state        `EnvState(sim=SimState, time=steps taken)`
A sender formulation on a run of A > 1 agent flows (`agent_flows`) has an agent axis: one
policy acts for each flow, observation [A, D], action [A, ...] (`action_space`), reward
and its parts [A], each flow's computed from its own rows of the record (`per_agent`).
The thesis formulation ("RLBM-thesis-v0"): observation [3P + 4] (beta, drain rates,
free buffer, flows finished, drops, queues and buffer in BDPs), action alpha per class
in [0, 1], reward -log(worst slowdown) + log(1 + throughput); the default ("RLBM-v0")
keeps its observation and action with the reward chosen in results/reward_analysis.
`info` always holds the interval's `throughput` (delivered / capacity),
`worst_slowdown` (1 when no flow finished), `flows_done` and `drops`.

Episodes never terminate; they are truncated after `max_steps_in_episode` intervals
(gymnax auto-resets and reports `truncated` and `final_observation`).  `step` is a pure
function of (key, state, action, params); all physics lives in `params.sim`.  The
transitions are discrete (packet counts, integer thresholds), so the env is not
differentiable: `supports_transition_gradients` is False, and `jax.grad` through
`step` or `reset` (or `jax.jvp`) with respect to the action, the state or the params
raises `NotDifferentiableError` instead of returning a silently wrong number.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from rlbm_jax.env import backends, formulations, sim
from rlbm_jax.env.params import SimParams
from rlbm_jax.env.presets import thesis_params

DEFAULT_FORMULATION = "RLBM-v0"


class NotDifferentiableError(ValueError):
    """Raised when a gradient is taken through the env's transitions."""


_GRAD_MESSAGE = ("RLBMEnv is not differentiable: its transitions are discrete (packet counts, integer "
                 "thresholds, event scans), so a gradient through step or reset is zero or wrong "
                 "(supports_transition_gradients is False). Train with a gradient-free estimator such as "
                 "the PPO in rlbm_jax.ppo, or compare runs with finite differences over seeds.")


@jax.custom_jvp
def _opaque(x):
    return x


@_opaque.defjvp
def _opaque_jvp(primals, tangents):
    # reached whenever an input of the env carries a derivative (jax.grad, jax.jvp, ...)
    raise NotDifferentiableError(_GRAD_MESSAGE)


def no_gradient(tree):
    """The same values; differentiating with respect to any float leaf raises
    NotDifferentiableError (at trace time: jitted, the guard is the identity)."""
    return jax.tree.map(lambda x: _opaque(x) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, tree)


@struct.dataclass
class EnvState(environment.EnvState):
    sim: sim.SimState
    time: int


@struct.dataclass
class WindowedEnvState(EnvState):
    """The state of an env whose formulation observes a window of intervals
    (`Formulation.window` > 1): the window's observations, oldest first."""
    obs_window: jnp.ndarray  # [window, D] float32 ([A, window, D] with an agent axis)


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
                    episode_s: float = 60.0, flows_scale: float = 10.0, ticks_per_step: int = 0) -> EnvParams:
    """EnvParams for a simulator configuration (default: the thesis scenario, "rl" policy).
    `ticks_per_step` > 0 fixes the interval in ticks (then `agent_interval_s` is unused and
    the episode is `episode_s` at the batch's longest tick)."""
    if sim_params is None:
        sim_params = thesis_params(policy="rl")
    if not agent_interval_s > 0:
        raise ValueError(f"agent_interval_s must be positive, got {agent_interval_s!r}")
    if not episode_s >= agent_interval_s:
        raise ValueError(f"episode_s ({episode_s}) must be at least agent_interval_s ({agent_interval_s})")
    if not flows_scale > 0:
        raise ValueError(f"flows_scale must be positive, got {flows_scale!r}")
    tick_s = float(np.max(np.asarray(sim_params.tick_s)))
    if isinstance(ticks_per_step, bool) or not isinstance(ticks_per_step, (int, np.integer)) or ticks_per_step < 0:
        raise ValueError(f"ticks_per_step must be a whole number >= 0, got {ticks_per_step!r}")
    if ticks_per_step:
        agent_interval_s = ticks_per_step * tick_s
    ticks = int(ticks_per_step) or max(1, int(round(agent_interval_s / tick_s)))
    return EnvParams(sim=sim_params, flows_scale=flows_scale,
                     max_steps_in_episode=int(round(episode_s / (ticks * tick_s))), ticks_per_step=ticks)


def interval_info(rec, params: EnvParams) -> dict:
    """The interval's summary every env step reports in `info`."""
    done = jnp.sum(rec.flows_done)
    return {"throughput": rec.sink_pkts / formulations.capacity_pkts(params),
            "worst_slowdown": jnp.where(done > 0, jnp.maximum(jnp.max(rec.slowdown_max), 1e-6), 1.0),
            "flows_done": done, "drops": jnp.sum(rec.drops_pkts)}


class FormulationEnv(environment.Environment):
    """What every env of a formulation shares, whatever simulates it (`RLBMEnv`: the packet
    tick; `fluid_env.FluidEnv`: the fluid model): the formulation, the default params, the
    spaces, the observation from the state's interval record (`state.sim.interval`), or
    from the window of them the state keeps (`keeps_window`: the envs that keep one)."""

    keeps_window = False  # it keeps a formulation's window of observations (`WindowedEnvState`)

    def _set_formulation(self, formulation, num_classes: int) -> None:
        self.formulation = formulations.get(formulation) if isinstance(formulation, str) else formulation
        if not isinstance(self.formulation, formulations.Formulation):
            raise TypeError(f"formulation must be an id or a Formulation, got {type(formulation).__name__}")
        if self.formulation.window > 1 and not self.keeps_window:
            raise ValueError(f"{type(self).__name__} keeps no window of observations, and {self.formulation.id} "
                             f"observes the last {self.formulation.window} intervals: step it on the packet "
                             "simulator (RLBMEnv, backend 'jax' or 'auto')")
        self.num_classes = num_classes
        self.obs_layout = self.formulation.obs_layout(num_classes)
        self.obs_shape = (len(self.obs_layout),)

    @property
    def default_params(self) -> EnvParams:
        return self._default

    @property
    def name(self) -> str:
        return self.formulation.id

    @property
    def num_actions(self) -> int:
        return int(np.prod(self.action_space().shape))

    def action_space(self, params: EnvParams | None = None):
        return self.formulation.action_space(self.num_classes)

    def observation_space(self, params: EnvParams | None = None):
        return spaces.Box(-jnp.inf, jnp.inf, self.obs_shape, jnp.float32)

    def state_space(self, params: EnvParams | None = None):
        raise NotImplementedError("the simulator state is a large pytree; see the env's state class")

    def get_obs(self, state, params: EnvParams, key=None):
        if self.formulation.window > 1:
            return state.obs_window.reshape(-1)
        return self.formulation.observe(state.sim.interval, params)

    def is_terminated(self, state, params: EnvParams):
        return jnp.asarray(False)


class RLBMEnv(FormulationEnv):
    """The switch's buffer set by an agent through a formulation (gymnax 1.0 API: `step`
    returns obs, state, reward, terminated, truncated, info).  With a baseline buffer
    policy in the sim params the action is ignored, which scores that baseline on the
    same reward."""

    keeps_window = True

    def __init__(self, sim_params: SimParams | None = None, formulation=DEFAULT_FORMULATION, backend: str | None = None,
                 driven: bool = True, **kwargs):
        super().__init__()
        # driven False (a sender formulation's baseline run: no agent acts): the action is
        # ignored and no knob is applied, so the agent flow runs its TCP alone, whichever it is
        # (BBR included), and the formulation still reads and scores its record
        self.driven = bool(driven)
        if backend is not None and backend not in backends.NAMES:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(backends.NAMES)}")
        if backend is not None and backend != "auto" and not backends.BACKENDS[backend].ticks:
            raise ValueError(f"RLBMEnv steps the packet tick; the {backend} backend runs another model: use "
                             f"rlbm_jax.make(..., backend={backend!r}) (rlbm_jax.env.fluid_env.FluidEnv)")
        self.backend = backend  # None: the process's default (`backends.set_default`, $RLBM_JAX_BACKEND)
        self._default = make_env_params(sim_params, **kwargs)
        self._set_formulation(formulation, self._default.sim.num_classes)
        if not self.driven and not self.formulation.sender:
            raise ValueError("driven=False is for a sender formulation's baseline runs; a switch formulation's "
                             "baseline is the switch's own policy (it ignores the action)")
        agents = self._default.sim.agent_flows
        if self.formulation.sender and agents == 0:
            raise ValueError(f"{self.formulation.id} is a sender agent and drives a flow of the scenario: give "
                             "agent_flows=1 (scenario 'cc' sets it), got agent_flows=0")
        if self.formulation.sender and self.formulation.agent_tcps and self.driven:
            from rlbm_jax.env import tcp

            sp = self._default.sim
            ids = np.asarray(sp.group_tcp_id if sp.flow_groups > 1 else sp.tcp_id).reshape(-1, sp.flow_groups)[:, 0]
            wrong = sorted({tcp.TCP_NAMES[int(i)] for i in ids} - set(self.formulation.agent_tcps))
            if wrong:
                raise ValueError(f"{self.formulation.id}'s agent flow (the first flow group's) runs tcp {wrong[0]}, "
                                 f"and its action acts on {', '.join(self.formulation.agent_tcps)} only")
        # several agent flows: one policy acts for each, on an agent axis (obs [A, D], action [A, ...], reward [A])
        self.agents = agents if self.formulation.sender and agents > 1 else 0
        if self.agents:
            self.obs_shape = (self.agents,) + self.obs_shape

    def action_space(self, params: EnvParams | None = None):
        space = self.formulation.action_space(self.num_classes)
        if self.agents:  # one action per agent flow
            return spaces.Box(space.low, space.high, (self.agents,) + tuple(space.shape), space.dtype)
        return space

    def per_agent(self, fn, rec, *xs):
        """fn(rec, *xs) of a formulation's part; with several agent flows (`agents` = A > 1)
        fn of each flow's view of the record (its rows of `agent_counts` and `agent_state`
        alone, as a one-agent run has them) and its slice of xs, stacked on a leading axis
        [A, ...]."""
        if not self.agents:
            return fn(rec, *xs)

        def one(counts, state, *x):
            return fn(rec.replace(agent_counts=counts[None], agent_state=state[None]), *x)
        return jax.vmap(one)(rec.agent_counts, rec.agent_state, *xs)

    def get_obs(self, state, params: EnvParams, key=None):
        if not self.agents:
            return super().get_obs(state, params, key)
        if self.formulation.window > 1:
            return state.obs_window.reshape(self.agents, -1)
        return self.per_agent(lambda r: self.formulation.observe(r, params), state.sim.interval)

    def reset_env(self, key, params: EnvParams):
        params = no_gradient(params)
        s = sim.close_interval(sim.init(key, params.sim), params.sim)
        state = EnvState(sim=s, time=jnp.zeros((), jnp.int32))
        if self.formulation.window > 1:
            window = self.per_agent(lambda r: self.formulation.first_window(r, params), s.interval)
            state = WindowedEnvState(sim=s, time=state.time, obs_window=window)
        return self.get_obs(state, params), state

    def step_env(self, key, state: EnvState, action, params: EnvParams):
        # a derivative with respect to any input is refused: through floors and integer
        # thresholds it would be a silent 0 (the action) or a wrong number (the load)
        action, state, params = no_gradient((action, state, params))
        f = self.formulation
        # the action answers the record of the interval that just ended (still in the state)
        knobs = self.per_agent(lambda r, a: f.knobs(a, r, params), state.sim.interval, action)
        s = sim.apply_knobs(state.sim, knobs) if self.driven else state.sim
        s = sim.open_interval(s, params.sim)
        s, _ = backends.run(s, params.sim, params.ticks_per_step, backend=self.backend)
        s = sim.close_interval(s, params.sim)
        new = EnvState(sim=s, time=(state.time + 1).astype(jnp.int32))
        if f.window > 1:
            window = self.per_agent(lambda r, w, k: f.next_window(w, r, params, k), s.interval, state.obs_window,
                                    knobs)
            new = WindowedEnvState(sim=s, time=new.time, obs_window=window)
        reward, parts = self.per_agent(lambda r: f.reward_of(r, params), s.interval)
        info = {**interval_info(s.interval, params), **parts}
        return self.get_obs(new, params), new, reward, jnp.asarray(False), info
