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
    rto_count, syn_drops, flows_done, slowdown_max, log_slowdown_sum, open_log_slowdown_*,
    flows, flows_logged, flows_overflow
                              0: the fluid model has no timeouts, no handshakes and no
                              finite flows (`fluid.IGNORES`, the package docstring)
A reward that tests "a packet was dropped" on the record (QueuePilot's) reads drops of at
least half a packet, which on the packet simulator's integer counts is the same test.

Knobs: the fluid model implements `FLUID_KNOBS` (the marker's probability, `mark_prob`,
with the "rl-mark" policy); a formulation whose action sets another knob is refused when
the env is built.  The state is `FluidEnvState(sim=FluidSimState(fluid, interval), time)`;
reset is deterministic (the fluid model's flows start at the quantiles of the packet
simulator's random start times), so the key is unused.  Params passed to `step` must agree
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


def interval_record(before: fluid.Totals, st: fluid.FluidState, params, log_size: int) -> mx.Interval:
    """The interval record of the stretch between totals `before` and the state `st` (P = 1)."""
    a = st.tot
    one = lambda x: jnp.reshape(x, (1,))
    delivered = a.delivered - before.delivered
    z = jnp.zeros((), delivered.dtype)
    return mx.Interval(
        arrivals_pkts=one(a.arrived - before.arrived), drops_pkts=one(a.dropped - before.dropped),
        marks_pkts=one(a.marked - before.marked), dequeues_pkts=one(delivered), queue_end_pkts=one(st.q),
        queue_pkt_s=one(a.queue_s - before.queue_s), sink_pkts=delivered, sink_bytes=delivered * params.mss_bytes,
        rto_count=z, syn_drops=z, flows_done=one(z), slowdown_max=one(z), log_slowdown_sum=one(z),
        open_log_slowdown_start=one(z), open_log_slowdown_end=one(z),
        flows=jnp.zeros((log_size, len(mx.FLOW_FIELDS)), delivered.dtype), flows_logged=z, flows_overflow=z)


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
        base = fluid.configure(cover, steps_per_rtt=steps_per_rtt, sharpness=sharpness)
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
                                      dt_s=interval_s / self.steps_per_interval)
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
        rec = self._record(fluid.init(p.sim, self.config).tot, fluid.init(p.sim, self.config), p)
        act = self.action_space().sample(jax.random.PRNGKey(0))
        return tuple(jax.eval_shape(lambda: self.formulation.knobs(act, rec, p)))

    def _record(self, before, st, params):
        return interval_record(before, st, params.sim, self.log_size)

    @property
    def name(self) -> str:
        return self.formulation.id + "/fluid"

    def reset_env(self, key, params: EnvParams):
        st = fluid.init(params.sim, self.config)
        state = FluidEnvState(sim=FluidSimState(fluid=st, interval=self._record(st.tot, st, params)),
                              time=jnp.zeros((), jnp.int32))
        return self.get_obs(state, params), state

    def step_env(self, key, state: FluidEnvState, action, params: EnvParams):
        f = self.formulation
        st = state.sim.fluid
        knobs = f.knobs(action, state.sim.interval, params)
        st = st.replace(**{FLUID_KNOBS[k]: jnp.reshape(jnp.asarray(v, st.q.dtype), ()) for k, v in knobs.items()})
        before = st.tot
        st = fluid.advance(st, params.sim, self.steps_per_interval, self.config, grad_horizon_s=self.grad_horizon_s)
        rec = self._record(before, st, params)
        new = FluidEnvState(sim=FluidSimState(fluid=st, interval=rec), time=(state.time + 1).astype(jnp.int32))
        reward, parts = f.reward_of(rec, params)
        info = {**interval_info(rec, params), **parts}
        return self.get_obs(new, params), new, reward, jnp.asarray(False), info
