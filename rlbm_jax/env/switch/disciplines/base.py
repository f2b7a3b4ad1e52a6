"""What a queueing discipline supplies to the switch (`sim.py`): the protocol every
discipline of the registry (`registry.py`) implements, and the decisions its hooks hand
back.

A discipline acts on the packets of the class FIFOs (an AQM: RED, ARED, PIE, CoDel, the
agent's marker) or holds the packets in queues of its own and chooses what leaves
(FQ-CoDel over the per-flow queues of `flowqueue`).  It owns its state: `init(params)`
builds it (any pytree; the registry keeps one per discipline, `registry.States`), and
each hook takes it and returns it.  The buffer policy names the discipline a run uses
(`buffer.Policy.aqm`); the policy's thresholds stay the hard limit, the discipline
decides on the packets below it.  Every hook works on whole [P] arrays of class FIFOs
(each class FIFO runs its own instance) and sees nothing of the switch but its
arguments.  The hooks, in the order of a tick:

  on_enqueue     this tick's decisions on the packets arriving in each class, as
                 positions in the class's arrival order (`Hits`); default: none
  enqueue_flows  (owns_departure) the admitted runs went to their flows' queues: what
                 its own state learns of them (FQ-CoDel's new list)
  on_dequeue     whether the head packet of each class FIFO that is served is dropped
                 or marked as it leaves (at most one per class per tick); default: none
  depart         (owns_departure) the tick's departures from its own queues, in place
                 of the scheduler over the class FIFOs
  on_tick_end    the queues as the tick leaves them (PIE's delay, RED's idle time)

Flags tell the tick where a discipline departs from the class FIFOs:

  owns_departure       its packets wait in the per-flow queues (`flowqueue`) and its
                       `depart` hook chooses which leave; the class FIFOs' counters hold
                       their flows' totals (the params must allocate the queues,
                       `flow_queue_capacity_pkts`)
  takes_every_arrival  every packet its enqueue hook lets through is admitted, whatever
                       the policy's thresholds (its departure keeps the shared buffer):
                       a new flow's SYN is never lost at the limit
  syn_skips_queue      a new flow's SYN waits behind no class queue (its handshake takes
                       the base RTT)
  needs_ecn            it only marks: its policies require ECN senders
  caps_flows           (owns_departure) each flow's queue admits at most its `flow_room`
                       of a tick's arrivals (fq's per-flow cap); the rest are dropped at
                       the tail

and `knobs`, the (knob, field of its state) pairs an agent sets (`sim.KNOBS`: the marker's
`mark_prob`).

A new discipline is a module with a `Discipline` subclass instance (`DISCIPLINE`) and one
line in `registry.py` (its position there is its id), plus a buffer policy naming it
(`buffer.register_policy(..., aqm_name=)`).  Parameters of its own go in `SimParams`
under its name's prefix (`red_*`, `pie_*`, `codel_*`, `fq_*`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlbm_jax.env.switch import flowqueue


class Hits(NamedTuple):
    """An enqueue discipline's decisions on this tick's arrivals of each class, [P] each.
    Hit i (i < count) falls on the packet at position first + floor(i * spacing) of the
    class's arrival order."""
    first: jnp.ndarray  # int32
    spacing: jnp.ndarray  # float packets between hits after the first
    count: jnp.ndarray  # int32
    forced: jnp.ndarray  # bool every arrival is dropped (RED above its top threshold)
    may_mark: jnp.ndarray  # bool a hit on an ECT packet marks it (else every hit drops)
    syn_p: jnp.ndarray  # float the chance that a SYN arriving now is dropped


def no_hits(arr_c) -> Hits:
    """No decision on the arrivals arr_c [P]."""
    return Hits(first=jnp.zeros_like(arr_c), spacing=jnp.ones(arr_c.shape, jnp.float32), count=jnp.zeros_like(arr_c),
                forced=jnp.zeros(arr_c.shape, bool), may_mark=jnp.zeros(arr_c.shape, bool),
                syn_p=jnp.zeros(arr_c.shape, jnp.float32))


def hits_below(limit, hits: Hits):
    """Per class, how many hits fall on positions < limit ([P] or [E, P] int)."""
    lim = (limit - hits.first).astype(jnp.float32)
    n = jnp.ceil(lim / jnp.maximum(hits.spacing, 1e-6)).astype(jnp.int32)
    return jnp.where(lim > 0, jnp.clip(n, 0, hits.count), 0)


BINOMIAL_EXACT_MAX = 64  # arrivals per tick up to which the count is drawn exactly


def independent_hits(n, prob, u):
    """Every one of a tick's n arrivals hit with probability prob, independently (PIE's
    drops, the marker's marks): the count is Binomial(n, prob), drawn by inverse CDF from u
    (exact up to BINOMIAL_EXACT_MAX arrivals, a normal approximation above), and the hits
    are spread evenly over the arrival order from an offset drawn from u's low bits.
    Memoryless, so nothing carries to the next tick.  Returns (first, spacing, count)."""
    n = n.astype(jnp.int32)
    p = jnp.clip(prob, 0.0, 1.0)
    k = jnp.arange(BINOMIAL_EXACT_MAX + 1, dtype=jnp.float32)
    nf = n.astype(jnp.float32)[..., None]
    pp = p[..., None]
    logpmf = (jax.lax.lgamma(nf + 1.0) - jax.lax.lgamma(k + 1.0) - jax.lax.lgamma(jnp.maximum(nf - k, 0.0) + 1.0)
              + k * jnp.log(jnp.maximum(pp, 1e-30)) + (nf - k) * jnp.log(jnp.maximum(1.0 - pp, 1e-30)))
    pmf = jnp.where(k <= nf, jnp.exp(logpmf), 0.0)
    exact = jnp.sum(jnp.cumsum(pmf, axis=-1) < u[..., None], axis=-1).astype(jnp.int32)
    z = jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * jnp.clip(u, 1e-6, 1 - 1e-6) - 1.0)
    approx = jnp.round(n * p + z * jnp.sqrt(n * p * (1.0 - p))).astype(jnp.int32)
    count = jnp.where(n <= BINOMIAL_EXACT_MAX, exact, approx)
    count = jnp.where(p >= 1.0, n, jnp.where(p <= 0.0, 0, jnp.clip(count, 0, n)))
    spacing = n.astype(jnp.float32) / jnp.maximum(count, 1).astype(jnp.float32)
    offset = jnp.mod(u * 4096.0, 1.0)  # the uniform's low bits
    first = jnp.clip(jnp.floor(offset * spacing).astype(jnp.int32), 0, jnp.maximum(n - 1, 0))
    return first, jnp.maximum(spacing, 1.0), count


class FlowDeparture(NamedTuple):
    """What left a discipline's own queues this tick (`Discipline.depart`)."""
    queues: flowqueue.FlowQueues  # the per-flow queues after the tick's drops and departures
    state: Any  # the discipline's own state after them
    records: jnp.ndarray  # [k, RUN_FIELDS] the packets that left, one per record, in order
    served: jnp.ndarray  # [P] packets that left per class
    marks: jnp.ndarray  # [P] packets CE-marked as they left
    drops: flowqueue.Drops  # every packet dropped from the queues this tick


@dataclasses.dataclass(frozen=True)
class Discipline:
    """A queueing discipline.  Subclasses override the hooks they need; this base is the
    discipline that does nothing ("none": the policy's thresholds alone).

    name                 the name a buffer policy gives (`buffer.Policy.aqm`)
    owns_departure, takes_every_arrival, syn_skips_queue, needs_ecn, caps_flows, knobs   see the module's doc
    """

    name: str = "none"
    owns_departure: bool = False
    takes_every_arrival: bool = False
    syn_skips_queue: bool = False
    needs_ecn: bool = False
    caps_flows: bool = False
    knobs: tuple = ()

    @property
    def key(self) -> str:
        """Its entry in `registry.States` (the name as an identifier)."""
        return self.name.replace("-", "_")

    def init(self, params) -> Any:
        """Its own state at t = 0 (any pytree; () when it keeps none)."""
        return ()

    def on_enqueue(self, s, arr_c, q_pkts, u, now_s, params) -> tuple[Any, Hits]:
        """Decisions on this tick's arrivals arr_c [P] at the class FIFOs holding q_pkts [P]
        at the tick's start (u [P] uniforms, now_s the tick's start).  Returns (state, Hits)."""
        return s, no_hits(arr_c)

    def enqueue_flows(self, s, slots, adm_pkts, order, params) -> Any:
        """(owns_departure) The event flows `slots` [E] had adm_pkts [E] packets enqueued in
        their flows' queues, in the senders' arrival order `order` [E] (distinct ranks)."""
        return s

    def flow_room(self, s, pkts, params):
        """(caps_flows) [Q] int32: how many more packets each flow's queue admits, given the
        packets pkts [Q] it holds; default: no per-flow limit."""
        return jnp.full_like(pkts, jnp.iinfo(jnp.int32).max)

    def on_dequeue(self, s, head_sojourn_s, q_pkts, serving, marking, now_s, params) -> tuple[Any, jnp.ndarray]:
        """A decision on the head packet of each class FIFO that is served this tick
        (`serving` [P]), whose sojourn is head_sojourn_s [P] and behind which q_pkts - 1
        packets wait; `marking` [P]: a decision marks it (ECT, ECN on) rather than drops it.
        Returns (state, act [P] bool)."""
        return s, jnp.zeros_like(serving)

    def depart(self, s, flowq: flowqueue.FlowQueues, flow_cls, t, now_s, tick_s, k, params) -> FlowDeparture:
        """(owns_departure) The tick's departures from its own queues `flowq`: up to k
        packets in the bottleneck's k packet slots, and whatever it drops.  flow_cls [Q]:
        each flow slot's class; t, now_s, tick_s: the tick's index, start and length."""
        raise NotImplementedError(f"discipline {self.name!r} does not own departure")

    def on_tick_end(self, s, last_sojourn_s, served, q_after, now_end_s, params) -> Any:
        """The class FIFOs as the tick leaves them: served [P] packets left, the last of
        them after last_sojourn_s [P], q_after [P] packets stay; now_end_s the tick's end."""
        return s
