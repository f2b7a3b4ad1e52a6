"""ABS (Adaptive Buffer Sizing, Tang et al.; its RL model ABSRL, Sec. III-B; `ABS-v0`):
every interval the agent sets the bottleneck's buffer size in packets, the limit of a
drop-tail queue (buffer policy "rl-size", knob `buffer_size_pkts`: packets queued above a
lowered limit stay, arrivals are refused until the queue is below it).

Observation, float32 [5 w]: the last w = WINDOW intervals, oldest first (the paper feeds the
sequence sq_t of the last w states to an LSTM, Sec. III-A and III-B-2; `Formulation.window`,
the env keeps them), each interval's state s_t = (qDelay, inPackets, throughput, pDelay,
capacity) of Sec. III-B-2 computed from its record (C = the record's capacity_pkts: the
data packets the link could send in the interval, the integral of its rate over it, so the
capacity actually offered under a capacity trace; 0 for the record an episode starts from):
    [0] queue_delay_s          average queueing delay (s): the time-average queue over the
                               interval over the rate offered (C / the interval; at a constant
                               rate one packet's serialisation per packet queued)
    [1] enqueued_per_capacity  data packets enqueued (arrived less dropped: a drop-tail
                               queue drops only at arrival) / C
    [2] throughput             data packets sent on the link / C, retransmissions included
                               (the link's utilisation: QoE_throughput, Eq. 8)
    [3] propagation_delay_s    the base RTT (s): every flow's propagation delay here (the
                               paper's pDelay is the flows' measured RTT less qDelay)
    [4] capacity_mbps          the capacity offered in the interval (Mbit/s): C's bits / the interval
Action, `spaces.Discrete(100)`: index i sets the buffer size to i + 1 packets (the paper's
text says the action "is the buffer size measured by the number of packets", Sec. III-B-2;
its public code picks one of 100 levels, 1 to 100
packets), from the interval's first tick, clipped to [1, the FIFO cap].
Reward (Sec. III-B-2, Eq. 7-9): QoE = QoE_throughput^alpha x QoE_delay(x)^beta, with
QoE_throughput = throughput / link capacity (Eq. 8: the packets the link sent / C) and
QoE_delay the piecewise curve of Eq. 9 at x = the interval's average queueing delay (s):
    a1 x + b1            x <= t1
    a2 x + b2            t1 < x <= t2
    a3 exp(-b3 x) + c3   x > t2
`ABS-v0` uses Env 2's values (Sec. IV-B-3): a1 = -62.5, b1 = 100, a2 = -1214.3, b2 = 192.1,
a3 = 27.4, b3 = 6.8, c3 = 0.07, t1 = 0.08 s, t2 = 0.15 s, alpha = beta = 1 (so a reward in
[0, 100], the paper's scale; its Table II scores runs by the same QoE2).  The paper prints
b3 = -6.8 under Eq. 9's exp(-b3 x); with that sign the curve would jump from 10 to 76 at t2
and rise with the delay, so the decay rate 6.8 is taken (the curve is then continuous at both
breakpoints, as Eq. 11 writes Env 1's exponent: 22 exp(-3988.6 x) + 0.1).  Env 1's curve
(Eq. 11, QOE_DELAY_ENV1) is here too.

Its scenario is the paper's Env 2 (`scenarios.abs_env2`: 2 long flows, 100 ms RTT) with a
constant capacity where the paper replays a cellular trace; every 0.1 s, Env 2's interval.
`ABS-trace-v0` is the same agent on Env 2 with a capacity trace (`scenarios.abs_env2_trace`:
the shipped wifi trace, 10 Mbit/s peak; `rlbm_jax.abs.study` trains and judges it).
(On the trace the paper's ABSRL "can hardly converge" and its Table II scores ABSSL there,
Sec. IV-B-3; ABSRL's own results are Env 1's, Table I and III.)
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from gymnax.environments import spaces

from rlbm_jax.env.formulations.base import Field, Formulation, register

WINDOW = 5  # w, the intervals the agent sees (the paper's text names no value; its public code's)
SIZE_LEVELS = tuple(float(n) for n in range(1, 101))  # buffer sizes in packets, one per action index


@dataclasses.dataclass(frozen=True)
class QoEDelay:
    """QoE_delay(x), x the average queueing delay in seconds (Eq. 9), with the decay rate b3
    of its last piece taken positive (`a3 * exp(-b3 * x) + c3`)."""

    a1: float
    b1: float
    a2: float
    b2: float
    a3: float
    b3: float
    c3: float
    t1: float
    t2: float

    def __call__(self, x):
        x = jnp.asarray(x, jnp.float32)
        return jnp.where(x <= self.t1, self.a1 * x + self.b1,
                         jnp.where(x <= self.t2, self.a2 * x + self.b2, self.a3 * jnp.exp(-self.b3 * x) + self.c3))


# Env 1 (data centre, Eq. 11) and Env 2 (wireless, Sec. IV-B-3)
QOE_DELAY_ENV1 = QoEDelay(a1=-5.0e4, b1=100.0, a2=-8.5e5, b2=180.0, a3=22.0, b3=3988.6, c3=0.1, t1=1e-4, t2=2e-4)
QOE_DELAY_ENV2 = QoEDelay(a1=-62.5, b1=100.0, a2=-1214.3, b2=192.1, a3=27.4, b3=6.8, c3=0.07, t1=0.08, t2=0.15)


def interval_state(rec, params) -> dict:
    """One interval's ABS state and the QoE's inputs from its record (float32 [] each).  C is
    the record's `capacity_pkts`, the data packets the link could send in the interval (the
    integral of its rate: constant, or a capacity schedule's); an interval that offered
    nothing (an outage, or the empty record an episode starts from) has C = 0 and its
    ratios are 0 (nothing enqueued or sent over nothing offered: QoE 0).  The queueing delay
    is the time-average queue over the rate the link offered in the interval (C / its
    length; at a constant rate one packet's serialisation per queued packet), the link's
    peak rate where C = 0."""
    sim = params.sim
    interval_s = params.ticks_per_step * sim.tick_s
    cap = jnp.asarray(rec.capacity_pkts, jnp.float32)
    per_cap = lambda x: jnp.where(cap > 0, x / jnp.maximum(cap, 1e-6), 0.0)
    q_avg = jnp.sum(rec.queue_pkt_s) / interval_s
    enq = jnp.sum(rec.arrivals_pkts - rec.drops_pkts).astype(jnp.float32)
    # the average queue over the average rate the link offered (its constant rate, or a trace's)
    delay = jnp.where(cap > 0, q_avg * interval_s / jnp.maximum(cap, 1e-6), q_avg * sim.data_pkt_bits / sim.bottleneck_rate_bps)
    return {"queue_delay_s": delay,
            "enqueued_per_capacity": per_cap(enq), "throughput": per_cap(jnp.sum(rec.dequeues_pkts)),
            "propagation_delay_s": jnp.asarray(sim.base_rtt_s, jnp.float32),
            "capacity_mbps": (cap * sim.data_pkt_bits / interval_s / 1e6).astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class ABSObservation:
    def fields(self, P: int) -> tuple:
        return (Field("queue_delay_s", "s", "average queueing delay (time-average queue x a packet's serialisation)"),
                Field("enqueued_per_capacity", "1", "data packets enqueued / link capacity of the interval"),
                Field("throughput", "1", "data packets sent on the link / link capacity of the interval"),
                Field("propagation_delay_s", "s", "propagation RTT of the flows (the base RTT)"),
                Field("capacity_mbps", "Mbit/s", "bottleneck link capacity"))

    def __call__(self, rec, params):
        s = interval_state(rec, params)
        return jnp.stack([s[f.name] for f in self.fields(1)]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class BufferSize:
    """One of `levels`, the bottleneck's drop-tail limit in packets (every class)."""

    levels: tuple = SIZE_LEVELS
    text: str = (f"index i into the buffer sizes {SIZE_LEVELS[0]:g} to {SIZE_LEVELS[-1]:g} packets (i + 1); the "
                 "bottleneck's drop-tail limit (buffer policy 'rl-size', clipped to its FIFO cap)")

    @property
    def action_values(self) -> tuple:
        """What each action index sets (recorded in exported policies)."""
        return self.levels

    def fields(self, P: int) -> tuple:
        return (Field("buffer_size_level", "index", f"index into {len(self.levels)} buffer sizes, "
                                                    f"{self.levels[0]:g} to {self.levels[-1]:g} packets"),)

    def space(self, P: int):
        return spaces.Discrete(len(self.levels))

    def knobs(self, action, rec, params) -> dict:
        idx = jnp.clip(jnp.asarray(action, jnp.int32).reshape(()), 0, len(self.levels) - 1)
        return {"buffer_size_pkts": jnp.asarray(self.levels, jnp.float32)[idx]}


@dataclasses.dataclass(frozen=True)
class QoEReward:
    """QoE = QoE_throughput^alpha x QoE_delay^beta (Eq. 7)."""

    name: str = "abs-qoe"
    alpha: float = 1.0
    beta: float = 1.0
    delay: QoEDelay = QOE_DELAY_ENV2
    text: str = ("(packets sent / link capacity)^alpha x QoE_delay(average queueing delay)^beta, the ABS paper's QoE "
                 "(Eq. 7-9; Env 2's QoE_delay, alpha = beta = 1)")

    def __call__(self, rec, params):
        s = interval_state(rec, params)
        qoe_thr, qoe_delay = s["throughput"], self.delay(s["queue_delay_s"])
        r = qoe_thr ** self.alpha * qoe_delay ** self.beta
        return r, {"qoe_throughput": qoe_thr, "qoe_delay": qoe_delay, "queue_delay_s": s["queue_delay_s"]}


ABS = register(Formulation(
    "ABS-v0", "ABS (ABSRL): the bottleneck's drop-tail buffer size every 0.1 s (1 to 100 packets), a window of 5 "
    "intervals of queueing delay, enqueued packets, throughput, propagation delay and capacity, reward the paper's "
    "QoE (Env 2)", ABSObservation(), BufferSize(), QoEReward(), scenario="abs-env2", agent_interval_s=0.1,
    window=WINDOW))

# the same agent on Env 2's capacity trace (scenario abs-env2-trace: the shipped wifi trace,
# 10 Mbit/s peak): the observation's capacity and the QoE's throughput are against the capacity
# the trace offered in each interval (the record's capacity_pkts)
ABS_TRACE = register(Formulation(
    "ABS-trace-v0", "ABS (ABSRL) on a capacity trace (Env 2: the bottleneck's rate follows the shipped wifi "
    "trace): the drop-tail buffer size every 0.1 s, a window of 5 intervals, reward the paper's QoE (Env 2) "
    "against the capacity offered", ABSObservation(), BufferSize(), QoEReward(), scenario="abs-env2-trace",
    agent_interval_s=0.1, window=WINDOW))
