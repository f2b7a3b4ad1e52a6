"""LFQ (Learning Fair Qdisc, Bachl et al.; `LFQ-v0`, `LFQ-a10-v0`): inside a fair queue the
agent sets a flow's queue cap in packets; it sees the flow through exponentially weighted
averages of six signals and is paid the flow's bandwidth less alpha times its queue.

The switch runs the plain fair queue (policy "fq", `disciplines.fq`): a drop-tail cap per
flow, the knob `flow_cap_pkts`.  As in the paper every simulation carries one flow (two
hosts joined by the bottleneck, scenario "lfq"), so the record of the flow's class is the
flow's own and a batch of envs is a batch of flows.

Interval: 10 of the link's packet slots (the paper decides every 10th packet; at a
saturated link the two agree), `LFQ_PKTS_PER_TICK` x `LFQ_TICKS_PER_STEP`.

Observation, float32 [11 x 6] (`window_fields`): six signals per interval
    queue_pkts       the flow's time-average queue over the interval
    queue_std_pkts   its exponentially weighted standard deviation
    cap_pkts         the cap in force (the agent's last action)
    in_rate_mbps     packets arriving at the queue (Mbit/s of data packets)
    out_rate_mbps    packets sent on the link (Mbit/s)
    since_loss_s     time since the flow's last drop at the queue (the middle of the last
                     interval that dropped; the episode's age before any)
row 0 is the last interval's values, rows 1..10 their exponentially weighted averages with
the paper's per-packet weights 2^-4 .. 2^-13 (Sec. III), applied once per interval with the
weight of the packets it saw: 1 - (1 - 2^-n)^m, m the packets that arrived at the queue
(at least one: an idle interval still moves the averages), which is what m per-packet
updates with one value give.  The paper averages interarrival and interdeparture times and
inverts them; here the rates themselves are averaged.  Row 0 (the raw signals) is this
project's addition: the time since the last loss needs it carried.  Inputs are in packets,
Mbit/s and seconds, of order 1-100.

Action, `spaces.Box(1, 1000, (1,))`: the flow's cap in packets (the paper's range; the
network's one output), from the interval's first tick.
Reward (Eq. 1): bandwidth - alpha x queue size, read as bytes per second delivered (payload
reaching the receiver) less alpha x the average queue in bytes (data packets of mss + 52
bytes), divided by 10^6: alpha = 0.01 (`LFQ-v0`) or 10 (`LFQ-a10-v0`), the paper's two
values.  The paper does not give the units; with bandwidth in Mbit/s and the queue in
packets alpha = 10 would price one queued packet at 10 Mbit/s and the best cap would be 1,
which its Table VII (α = 10: 12.5 Mbit/s at an average queue of 3.4 packets) rules out;
bytes for both keep its tradeoff.

Training is the paper's offline A/B test (`rlbm_jax.lfq`), not PPO: the env is the same
for it and for any RL trainer.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from gymnax.environments import spaces

from rlbm_jax.env.formulations.base import Field, Formulation, register

EWMA_EXPONENTS = tuple(range(4, 14))  # weights 2^-4 .. 2^-13
SIGNALS = (("queue_pkts", "pkts", "the flow's time-average queue"),
           ("queue_std_pkts", "pkts", "standard deviation of the flow's queue"),
           ("cap_pkts", "pkts", "the flow's queue cap in force"),
           ("in_rate_mbps", "Mbit/s", "data arriving at the flow's queue"),
           ("out_rate_mbps", "Mbit/s", "data the link sent of the flow"),
           ("since_loss_s", "s", "time since the flow's last drop at the queue"))
Q, STD, CAP, IN, OUT, LOSS = range(6)
CAP_RANGE_PKTS = (1.0, 1000.0)
LFQ_PKTS_PER_TICK, LFQ_TICKS_PER_STEP = 2, 5  # an interval of 10 packet slots


def initial_cap_pkts(params):
    """The cap before the agent acts (the scenario's `fq_flow_cap_pkts`)."""
    return jnp.asarray(params.sim.fq_flow_cap_pkts, jnp.float32)


def interval_signals(rec, params, cap_pkts):
    """The interval's raw signals [6] (since_loss_s: the part the interval itself gives,
    half the interval when it dropped, else -1) and the packets that arrived."""
    sim = params.sim
    interval_s = params.ticks_per_step * sim.tick_s
    pkt_bits = sim.data_pkt_bits
    q = jnp.sum(rec.queue_pkt_s) / interval_s
    arrived = jnp.sum(rec.arrivals_pkts)
    dropped = jnp.sum(rec.drops_pkts) > 0
    return (jnp.stack([q, 0.0, jnp.asarray(cap_pkts, jnp.float32).reshape(()),
                       arrived * pkt_bits / interval_s / 1e6, jnp.sum(rec.dequeues_pkts) * pkt_bits / interval_s / 1e6,
                       jnp.where(dropped, 0.5 * interval_s, -1.0)]).astype(jnp.float32),
            arrived, interval_s)


@dataclasses.dataclass(frozen=True)
class LFQObservation:
    """Six signals and their ten exponentially weighted averages (the module's doc)."""

    def fields(self, P: int) -> tuple:
        return tuple(Field(n, u, t) for n, u, t in SIGNALS)

    def window_fields(self, P: int) -> tuple:
        rows = [("", "the last interval's value")] + [(f"_ewma{n}", f"average with per-packet weight 2^-{n}")
                                                     for n in EWMA_EXPONENTS]
        return tuple(Field(f"{name}{suffix}", unit, f"{text}: {what}") for suffix, what in rows
                     for name, unit, text in SIGNALS)

    def __call__(self, rec, params):
        raw, _, interval_s = interval_signals(rec, params, initial_cap_pkts(params))
        return raw.at[LOSS].set(jnp.where(raw[LOSS] < 0, interval_s, raw[LOSS]))

    def _cap(self, params, knobs):
        return initial_cap_pkts(params) if knobs is None else jnp.asarray(knobs["flow_cap_pkts"], jnp.float32).reshape(())

    def first_window(self, rec, params, knobs=None):
        raw, _, interval_s = interval_signals(rec, params, self._cap(params, knobs))
        raw = raw.at[LOSS].set(jnp.where(raw[LOSS] < 0, 0.0, raw[LOSS]))  # an episode's start: no age yet
        return jnp.broadcast_to(raw, (1 + len(EWMA_EXPONENTS), len(SIGNALS)))

    def next_window(self, carry, rec, params, knobs=None):
        raw, arrived, interval_s = interval_signals(rec, params, self._cap(params, knobs))
        raw = raw.at[LOSS].set(jnp.where(raw[LOSS] < 0, carry[0, LOSS] + interval_s, raw[LOSS]))
        n = jnp.asarray(EWMA_EXPONENTS, jnp.float32)[:, None]
        m = jnp.maximum(arrived, 1).astype(jnp.float32)
        w = 1.0 - (1.0 - 2.0 ** -n) ** m  # [10, 1]
        old = carry[1:]
        diff = raw[Q] - old[:, Q]
        var = (1.0 - w[:, 0]) * (old[:, STD] ** 2 + w[:, 0] * diff ** 2)
        new = old + w * (raw[None, :] - old)
        new = new.at[:, STD].set(jnp.sqrt(var))
        return jnp.concatenate([raw[None, :], new], axis=0)


@dataclasses.dataclass(frozen=True)
class FlowCap:
    """The flow's queue cap in packets, continuous in CAP_RANGE_PKTS."""

    text: str = (f"the flow's queue cap in packets, {CAP_RANGE_PKTS[0]:g} to {CAP_RANGE_PKTS[1]:g} (policy 'fq', "
                 "knob flow_cap_pkts: a drop-tail limit of the flow's own queue)")

    def fields(self, P: int) -> tuple:
        return (Field("flow_cap_pkts", "pkts", "the flow's queue cap"),)

    def space(self, P: int):
        return spaces.Box(CAP_RANGE_PKTS[0], CAP_RANGE_PKTS[1], (1,), jnp.float32)

    def knobs(self, action, rec, params) -> dict:
        cap = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), *CAP_RANGE_PKTS)
        return {"flow_cap_pkts": cap}


@dataclasses.dataclass(frozen=True)
class LFQReward:
    """(bytes/s delivered - alpha x average queue bytes) / 10^6 (Eq. 1)."""

    alpha: float = 0.01
    name: str = "lfq"

    @property
    def text(self) -> str:
        return f"(payload bytes/s delivered - {self.alpha:g} x average queue bytes) / 1e6, LFQ's Eq. 1"

    def __call__(self, rec, params):
        sim = params.sim
        interval_s = params.ticks_per_step * sim.tick_s
        bw = rec.sink_bytes / interval_s
        q_bytes = jnp.sum(rec.queue_pkt_s) / interval_s * (sim.mss_bytes + 52)
        r = (bw - self.alpha * q_bytes) / 1e6
        return r, {"bandwidth_mbps": bw * 8 / 1e6, "queue_pkts": jnp.sum(rec.queue_pkt_s) / interval_s}


def _formulation(fid: str, alpha: float) -> Formulation:
    return Formulation(
        fid, f"LFQ: a flow's queue cap inside a fair queue (1 to 1000 packets every 10 packet slots), 6 signals and "
             f"their 10 exponentially weighted averages, reward bandwidth - {alpha:g} x queue (bytes)",
        LFQObservation(), FlowCap(), LFQReward(alpha=alpha, name=f"lfq-alpha{alpha:g}"), scenario="lfq",
        window=1 + len(EWMA_EXPONENTS), ticks_per_step=LFQ_TICKS_PER_STEP)


LFQ = register(_formulation("LFQ-v0", 0.01))
LFQ_A10 = register(_formulation("LFQ-a10-v0", 10.0))
