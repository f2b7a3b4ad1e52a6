"""`FluidEnv`: a formulation (`rlbm_jax.env.formulations`) on the fluid backend, with
gradients through its transitions.

The same contract as `RLBMEnv` (gymnax 1.0: `step` returns obs, state, reward,
terminated, truncated, info; `EnvParams` with the simulator's params in `.sim`), the same
formulation code and the same interval record (`metrics.Interval`), but the simulator is
the fluid model (`rlbm_jax.env.backends.fluid`): every agent interval it integrates
`steps_per_interval` Euler steps and writes the record from its integrals.  So the
observation, the action's knobs and the reward are computed by the formulation's own
functions, and `jax.grad` of a return with respect to the actions, a policy's weights or
the continuous simulator parameters (`EnvParams.sim`'s float leaves) is defined:
`supports_transition_gradients` is True.

What the record holds here (P = 1 class):
    arrivals_pkts, drops_pkts, marks_pkts, dequeues_pkts, queue_end_pkts, queue_pkt_s,
    sink_pkts, sink_bytes     the fluid model's amounts over the interval (float: expected
                              packets, not counts; `sink` = what left the bottleneck, as
                              the fluid model loses nothing after it)
    rto_count, syn_drops      0: the fluid model has no timeouts and no handshakes that
                              fail (`fluid.IGNORES`, the package docstring)
    flows_done, slowdown_max, log_slowdown_sum, open_log_slowdown_*, flows, flows_logged,
    flows_overflow            the short (web-search) flows that finished in the interval,
                              their slowdowns (completion time interpolated inside the
                              Euler step) and those open at its ends, as the packet
                              simulator writes them; 0 without short flows (load 0)
A reward that tests "a packet was dropped" on the record (QueuePilot's) reads drops of at
least half a packet, which on the packet simulator's integer counts is the same test.

Knobs: the fluid model implements `FLUID_KNOBS` (the marker's probability, `mark_prob`,
with the "rl-mark" policy); a formulation whose action sets another knob is refused when
the env is built.  The state is `FluidEnvState(sim=FluidSimState(fluid, interval), time)`;
reset's key draws the short flows' Poisson schedule as the packet env's reset draws it
(their slots cover `episode_s`, `fluid.configure`); the long flows start at the quantiles
of the packet simulator's random start times.  Params passed to `step` must agree
with the env's static configuration (flow count, TCP, AQM: `fluid.configure`), which the
env builds once from its default params (or `batch`); a batch may vary the continuous values,
but not `tick_s` (the agent interval the formulation scales by is ticks_per_step x tick_s,
and the fluid model integrates that one interval: a batch that disagrees is refused; a
capacity changed inside a traced function by `replace` keeps tick_s, so the interval).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from rlbm_jax.env import metrics as mx
from rlbm_jax.env.backends import fluid
from rlbm_jax.env.rlbm_env import DEFAULT_FORMULATION, EnvParams, FormulationEnv, interval_info, make_env_params

FLUID_KNOBS = {"mark_prob": "mark_p"}  # knob -> the FluidState field it sets


@struct.dataclass
class FluidSimState:
    fluid: fluid.FluidState
    interval: mx.Interval


@struct.dataclass
class FluidEnvState(environment.EnvState):
    sim: FluidSimState
    time: int


def _completions(prev: fluid.FluidState, st: fluid.FluidState, params, log_size: int) -> dict:
    """The record's flow fields (P = 1) from the short flows that finished between the states
    `prev` and `st`, and the log slowdown of those open at each end (`metrics.open_log_slowdown`)."""
    dt = st.q.dtype
    ideal = params.base_rtt_s + st.s_size_b * 8.0 / params.bottleneck_rate_bps
    new = (st.done > 0.5) & (prev.done < 0.5)
    slow = jnp.where(new, (st.fin_s - st.s_start) / ideal, 0.0)
    n = jnp.sum(new)
    rank = jnp.cumsum(new) - new
    rows = jnp.stack([st.s_size_b, jnp.zeros_like(slow), slow], axis=-1)
    flows = jnp.zeros((log_size, len(mx.FLOW_FIELDS)), dt).at[jnp.where(new, rank, log_size)].set(rows, mode="drop")
    logged = jnp.minimum(n, log_size)

    def open_cost(s):
        now = s.tot.time_s
        is_open = (s.s_start <= now) & (s.done < 0.5)
        return jnp.sum(jnp.where(is_open, jnp.log(jnp.maximum(now - s.s_start, ideal) / ideal), 0.0))

    one = lambda x: jnp.reshape(x, (1,)).astype(dt)
    return dict(flows_done=one(n), slowdown_max=one(jnp.max(slow, initial=0.0)),
                log_slowdown_sum=one(jnp.sum(jnp.log(jnp.maximum(slow, 1.0)))),
                open_log_slowdown_start=one(open_cost(prev)), open_log_slowdown_end=one(open_cost(st)), flows=flows,
                flows_logged=logged.astype(dt), flows_overflow=(n - logged).astype(dt))


def interval_record(prev: fluid.FluidState, st: fluid.FluidState, params, log_size: int,
                    dt_s: float = 0.0) -> mx.Interval:
    """The interval record of the stretch between the states `prev` and `st` (P = 1), `dt_s`
    the Euler step (the stretch lasts (st.step - prev.step) x dt_s: its `capacity_pkts` is
    the constant rate's packets over it)."""
    a, before = st.tot, prev.tot
    one = lambda x: jnp.reshape(x, (1,))
    delivered = a.delivered - before.delivered
    z = jnp.zeros((), delivered.dtype)
    flows = _completions(prev, st, params, log_size) if st.done.shape[0] else {}
    rec = mx.Interval(
        arrivals_pkts=one(a.arrived - before.arrived), drops_pkts=one(a.dropped - before.dropped),
        marks_pkts=one(a.marked - before.marked), dequeues_pkts=one(delivered), queue_end_pkts=one(st.q),
        queue_pkt_s=one(jnp.maximum(a.queue_s - before.queue_s, 0.0)),  # (a difference of sums: >= 0 exactly)
        queue_min_pkts=one(jnp.minimum(prev.q, st.q)),  # the smaller end: the model keeps no minimum within
        sink_pkts=delivered, sink_bytes=delivered * params.mss_bytes,
        rto_count=z, syn_drops=z, flows_done=one(z), slowdown_max=one(z), log_slowdown_sum=one(z),
        open_log_slowdown_start=one(z), open_log_slowdown_end=one(z),
        flows=jnp.zeros((log_size, len(mx.FLOW_FIELDS)), delivered.dtype), flows_logged=z, flows_overflow=z,
        # the fluid model's link runs at its constant rate: what it offered over the stretch
        capacity_pkts=((st.step - prev.step).astype(jnp.float32) * dt_s * params.bottleneck_rate_bps
                       / params.data_pkt_bits).astype(jnp.float32))
    return rec.replace(**flows) if flows else rec


class FluidEnv(FormulationEnv):
    """A formulation on the fluid model (gymnax 1.0 API), differentiable end to end.

    sim_params        a scenario the fluid model represents (`fluid.check` names what it
                      cannot: short flows, classes, AQMs it lacks, ...)
    formulation       an id or a `Formulation` whose knobs are in `FLUID_KNOBS`
    grad_horizon_s    None: exact derivatives; a number: the state's derivative is cut
                      every that many simulated seconds inside each interval's integration
                      (`fluid.advance`; between steps a trainer cuts it with
                      `jax.lax.stop_gradient` on the state, as short-horizon methods do)
    steps_per_rtt, sharpness   the fluid model's resolution (`fluid.configure`); the step is
                      shortened so that an agent interval is a whole number of steps
    agent_interval_s, episode_s, flows_scale   as RLBMEnv's
    batch             the params of every env this env will step, stacked (`stack_params`):
                      the static configuration is built to cover them all (the step from
                      their smallest RTT, the feedback rings from their largest); default
                      `sim_params` alone
    """

    supports_transition_gradients = True

    def __init__(self, sim_params, formulation=DEFAULT_FORMULATION, *, agent_interval_s: float = 0.1,
                 episode_s: float = 60.0, flows_scale: float = 10.0, grad_horizon_s: float | None = None,
                 steps_per_rtt: int = fluid.STEPS_PER_RTT, sharpness: float = fluid.SHARPNESS, batch=None):
        super().__init__()
        self._set_formulation(formulation, 1)
        fluid.check(sim_params)
        cover = sim_params if batch is None else batch
        self._default = make_env_params(sim_params, agent_interval_s=agent_interval_s, episode_s=episode_s,
                                        flows_scale=flows_scale)
        base = fluid.configure(cover, steps_per_rtt=steps_per_rtt, sharpness=sharpness, horizon_s=episode_s)
        interval_s = float(np.max(np.asarray(self._default.agent_interval_s)))
        # the formulations scale by the interval the packet env would run (ticks_per_step x
        # tick_s); the fluid model integrates one fixed interval: they must be the same time
        ticks = self._default.ticks_per_step * np.asarray(cover.tick_s, np.float64).reshape(-1)
        if not np.allclose(ticks, interval_s, rtol=1e-6):
            raise ValueError(f"FluidEnv: the batch's params give agent intervals of {sorted(set(ticks.round(9)))} s "
                             f"(ticks_per_step x tick_s; tick_s follows the rate and pkts_per_tick), the env one of "
                             f"{interval_s} s: build one env per interval")
        self.steps_per_interval = max(1, math.ceil(interval_s / base.dt_s - 1e-9))
        self.config = fluid.configure(cover, steps_per_rtt=steps_per_rtt, sharpness=sharpness,
                                      dt_s=interval_s / self.steps_per_interval, horizon_s=episode_s)
        self.grad_horizon_s = grad_horizon_s
        self.log_size = int(np.max(np.asarray(sim_params.interval_log_size)))
        knobs = self._knob_names()
        unknown = sorted(set(knobs) - set(FLUID_KNOBS))
        if unknown:
            raise ValueError(f"the fluid backend does not implement the knob(s) {', '.join(unknown)} that "
                             f"{self.formulation.id}'s action sets (it has {', '.join(FLUID_KNOBS)})")
        if "mark_prob" in knobs and self.config.aqm != "rl-mark":
            raise ValueError(f"{self.formulation.id} sets the marking probability: its scenario needs the "
                             f"policy 'rl-mark' (this one runs {self.config.aqm})")

    def _knob_names(self) -> tuple:
        p = self._default
        st = fluid.init(p.sim, self.config, key=jax.random.PRNGKey(0))
        rec = self._record(st, st, p)
        act = self.action_space().sample(jax.random.PRNGKey(0))
        return tuple(jax.eval_shape(lambda: self.formulation.knobs(act, rec, p)))

    def _record(self, prev, st, params):
        return interval_record(prev, st, params.sim, self.log_size, self.config.dt_s)

    @property
    def name(self) -> str:
        return self.formulation.id + "/fluid"

    def reset_env(self, key, params: EnvParams):
        st = fluid.init(params.sim, self.config, key=key)
        state = FluidEnvState(sim=FluidSimState(fluid=st, interval=self._record(st, st, params)),
                              time=jnp.zeros((), jnp.int32))
        return self.get_obs(state, params), state

    def step_env(self, key, state: FluidEnvState, action, params: EnvParams):
        f = self.formulation
        st = state.sim.fluid
        knobs = f.knobs(action, state.sim.interval, params)
        st = st.replace(**{FLUID_KNOBS[k]: jnp.reshape(jnp.asarray(v, st.q.dtype), ()) for k, v in knobs.items()})
        prev = st
        st = fluid.advance(st, params.sim, self.steps_per_interval, self.config, grad_horizon_s=self.grad_horizon_s)
        rec = self._record(prev, st, params)
        new = FluidEnvState(sim=FluidSimState(fluid=st, interval=rec), time=(state.time + 1).astype(jnp.int32))
        reward, parts = f.reward_of(rec, params)
        info = {**interval_info(rec, params), **parts}
        return self.get_obs(new, params), new, reward, jnp.asarray(False), info
