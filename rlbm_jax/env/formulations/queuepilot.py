"""QueuePilot (an ECN-marking AQM learned with RL; `QueuePilot-v0`): every step (5 ms in
its paper) the agent picks the probability with which the switch CE-marks each arriving
packet; the switch drops only when the buffer is full.

Observation, float32 [6], all of the step that just ended (C = data packets the link
carries in one step; the buffer policy "rl-mark", ECN senders):
    [0] rx_per_capacity      data packets offered to the buffer / C, at most 3
    [1] utilisation          data packets sent on the link / C (U, in [0, 1])
    [2] drops_per_capacity   data packets dropped / C
    [3] mark_fraction        CE-marked / offered (0 when nothing arrived)
    [4] queue_buffer         average queue / buffer B
    [5] queue_delay_steps    average queue / C (D: the delay a new packet meets, in steps), at most 30
Action, `spaces.Discrete(6)`: index into MARK_LEVELS = (0, 0.01, 0.05, 0.1, 0.5, 1); the
marking probability holds from the step's first tick (knob `mark_prob`, every class).
Reward: -1 when any data packet was dropped in the step, else U^2 / sqrt(1 + D).  ("Any":
at least half a packet, which on the packet simulator's counts is at least one; the fluid
backend's record holds expected amounts, `rlbm_jax.env.fluid_env`.)

`QueuePilot-continuous-v0`: the same observation and reward, the marking probability itself
as the action (`spaces.Box(0, 1, (1,))`, clipped to [0, 1]): the action an analytic policy
gradient differentiates through (`rlbm_jax.apg`).

The paper's average queue is an EWMA of the queue with weight 2^-9 per packet: at its
1 Gbit/s that is a time constant of 512 packet times, 6 ms, about one step.  Here it is
the time average of the queue over the step (from the interval record's queue integral),
the same quantity without a memory beyond the step; the LSTM carries the history.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from gymnax.environments import spaces

from rlbm_jax.env.formulations.base import Field, Formulation, capacity_pkts, register

MARK_LEVELS = (0.0, 0.01, 0.05, 0.1, 0.5, 1.0)
DROPPED_PKTS = 0.5  # a step "had a drop" when at least this many packets were dropped (integer counts: >= 1)
RX_CAP, DELAY_CAP_STEPS = 3.0, 30.0


def step_stats(rec, params) -> dict:
    """The step's rates from the interval record: rx, U, drops and marks per capacity or
    per arrival, average queue in packets, D in steps (all float32 [])."""
    cap = capacity_pkts(params)
    step_s = params.ticks_per_step * params.sim.tick_s
    arr = jnp.sum(rec.arrivals_pkts).astype(jnp.float32)
    q_avg = jnp.sum(rec.queue_pkt_s) / step_s
    return {"rx": arr / cap, "utilisation": jnp.sum(rec.dequeues_pkts) / cap,
            "drops": jnp.sum(rec.drops_pkts).astype(jnp.float32), "drop_rate": jnp.sum(rec.drops_pkts) / cap,
            "dropped": jnp.sum(rec.drops_pkts) >= DROPPED_PKTS,
            "mark_fraction": jnp.sum(rec.marks_pkts) / jnp.maximum(arr, 1.0), "queue_avg_pkts": q_avg,
            "delay_steps": q_avg / cap}


@dataclasses.dataclass(frozen=True)
class QueuePilotObservation:
    def fields(self, P: int) -> tuple:
        return (Field("rx_per_capacity", "1", f"data packets offered / link capacity of the step, at most {RX_CAP:g}"),
                Field("utilisation", "1", "data packets sent / link capacity of the step"),
                Field("drops_per_capacity", "1", "data packets dropped / link capacity of the step"),
                Field("mark_fraction", "1", "CE-marked / offered data packets"),
                Field("queue_buffer", "1", "average queue over the step / buffer B"),
                Field("queue_delay_steps", "steps", f"average queue / link capacity of a step, at most "
                                                    f"{DELAY_CAP_STEPS:g}"))

    def __call__(self, rec, params):
        s = step_stats(rec, params)
        return jnp.stack([jnp.minimum(s["rx"], RX_CAP), s["utilisation"], s["drop_rate"], s["mark_fraction"],
                          s["queue_avg_pkts"] / params.sim.buffer_pkts,
                          jnp.minimum(s["delay_steps"], DELAY_CAP_STEPS)]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class MarkProbability:
    """One of MARK_LEVELS, the probability of CE-marking each arriving packet."""

    levels: tuple = MARK_LEVELS
    text: str = ("index into the marking probabilities " + ", ".join(f"{v:g}" for v in MARK_LEVELS)
                 + "; every arriving packet is CE-marked with it (buffer policy 'rl-mark')")

    @property
    def action_values(self) -> tuple:
        """What each action index sets (recorded in exported policies)."""
        return self.levels

    def fields(self, P: int) -> tuple:
        return (Field("mark_level", "index", "index into " + ", ".join(f"{v:g}" for v in self.levels)),)

    def space(self, P: int):
        return spaces.Discrete(len(self.levels))

    def knobs(self, action, rec, params) -> dict:
        idx = jnp.clip(jnp.asarray(action, jnp.int32).reshape(()), 0, len(self.levels) - 1)
        return {"mark_prob": jnp.asarray(self.levels, jnp.float32)[idx]}


@dataclasses.dataclass(frozen=True)
class QueuePilotReward:
    name: str = "queuepilot"
    text: str = "-1 if a data packet was dropped in the step, else U^2 / sqrt(1 + D) (D: average queue in steps)"

    def __call__(self, rec, params):
        s = step_stats(rec, params)
        d = jnp.minimum(s["delay_steps"], DELAY_CAP_STEPS)
        ok = s["utilisation"] ** 2 / jnp.sqrt(1.0 + d)
        r = jnp.where(s["dropped"], -1.0, ok)
        return r, {"utilisation": s["utilisation"], "delay_steps": s["delay_steps"],
                   "dropped_step": s["dropped"].astype(jnp.float32), "mark_fraction": s["mark_fraction"]}


QUEUEPILOT = register(Formulation(
    "QueuePilot-v0", "QueuePilot: the ECN marking probability every step (6 levels, 0 to 1), its six rate and "
    "queue features, reward -1 on a drop else U^2 / sqrt(1 + D)",
    QueuePilotObservation(), MarkProbability(), QueuePilotReward(), scenario="queuepilot", agent_interval_s=0.005))


@dataclasses.dataclass(frozen=True)
class MarkProbabilityContinuous:
    """The marking probability itself, in [0, 1]."""

    text: str = ("the probability of CE-marking each arriving packet, in [0, 1] (clipped; buffer policy "
                 "'rl-mark')")

    def fields(self, P: int) -> tuple:
        return (Field("mark_prob", "1", "probability of CE-marking each arriving packet"),)

    def space(self, P: int):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def knobs(self, action, rec, params) -> dict:
        return {"mark_prob": jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)}


QUEUEPILOT_CONTINUOUS = register(Formulation(
    "QueuePilot-continuous-v0", "QueuePilot's observation and reward with the marking probability in [0, 1] as the "
    "action (for analytic policy gradients through the fluid backend)",
    QueuePilotObservation(), MarkProbabilityContinuous(), QueuePilotReward(), scenario="queuepilot",
    agent_interval_s=0.005))
