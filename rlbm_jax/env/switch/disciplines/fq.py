"""fq: the plain fair queue (Linux's `fq` qdisc, the scheduler LFQ learns inside) over the
per-flow queues of `flowqueue.py`, with a drop-tail cap per flow that an agent may set.

Every flow slot has its own queue (no hashing), served by the deficit round robin of
FQ-CoDel (`fq_codel.select`, `fq_codel.depart` with CoDel off: the same new and old
lists, the quantum `fq_quantum_bytes`) and nothing decides on the head packet.  A flow's
queue admits an arriving packet while it holds fewer than floor(cap) packets (Linux fq's
`flow_limit`, default 100): the cap is per flow slot, `FqCapState.cap_pkts` [Q], set at
t = 0 from `fq_flow_cap_pkts` and at run time by an agent (knob `flow_cap_pkts`, one value
for every flow or one per flow slot; LFQ's action, `formulations.lfq`), clipped to
[1, `flow_queue_capacity_pkts` - 1].  Lowering a cap drops nothing: packets already
queued above it stay and leave as they are served, and arrivals are refused until the
queue is below it.  The shared buffer B (`buffer_pkts`) bounds all queues together as
FQ-CoDel's does (the fattest flow drops at its head, `fq_codel.overflow`; Linux fq's
global limit, 10000 packets, drops the arrival instead, which a run only meets with B
below the caps' sum).

Per tick (docs/DESIGN.md): each event flow's arrivals are admitted up to its queue's room
(`flow_room`, the tick's per-flow admission), the rest dropped at the tail as a drop-tail
queue would; a new flow's SYN finds its empty queue (`syn_skips_queue`); then the k
dequeues of deficit round robin.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch import flowqueue
from rlbm_jax.env.switch.disciplines import fq_codel
from rlbm_jax.env.switch.disciplines.base import Discipline, FlowDeparture
from rlbm_jax.env.switch.flowqueue import merge_drops


@struct.dataclass
class FqCapState:
    """The scheduler's lists (FQ-CoDel's, its CoDel fields unused) and each flow's cap."""

    sched: fq_codel.FqState
    cap_pkts: jnp.ndarray  # [Q] float32 each flow slot's queue cap (packets; knob flow_cap_pkts)


def max_cap_pkts(params) -> int:
    """The largest cap a queue can hold (static): its ring less one."""
    return max(int(params.flow_queue_capacity_pkts) - 1, 1)


def room(s: FqCapState, pkts, params):
    """[Q] int32: how many more packets each flow's queue admits (pkts [Q] held)."""
    cap = jnp.floor(jnp.clip(s.cap_pkts, 1.0, float(max_cap_pkts(params)))).astype(jnp.int32)
    return jnp.maximum(cap - pkts, 0)


@dataclasses.dataclass(frozen=True)
class Fq(Discipline):
    def init(self, params) -> FqCapState:
        n = flowqueue.num_queues(params)
        return FqCapState(sched=fq_codel.init(params),
                          cap_pkts=jnp.broadcast_to(jnp.asarray(params.fq_flow_cap_pkts, jnp.float32), (n,)))

    def flow_room(self, s: FqCapState, pkts, params):
        return room(s, pkts, params)

    def enqueue_flows(self, s: FqCapState, slots, adm_pkts, order, params) -> FqCapState:
        return s.replace(sched=fq_codel.activate(s.sched, slots, adm_pkts, order, params.fq_quantum_bytes))

    def depart(self, s: FqCapState, flowq, flow_cls, t, now_s, tick_s, k, params) -> FlowDeparture:
        """The shared buffer's overflow drops (from the fattest flow), then the k dequeues of
        deficit round robin."""
        q, over = fq_codel.overflow(flowq, flow_cls, params.buffer_pkts, params)
        d = fq_codel.depart(q, s.sched, flow_cls, t, now_s, tick_s, params.ecn, params, k, codel=False)
        return FlowDeparture(queues=d.queues, state=s.replace(sched=d.fq), records=d.records, served=d.served,
                             marks=d.marks, drops=merge_drops(over, d.drops))


FQ = Fq(name="fq", owns_departure=True, takes_every_arrival=True, syn_skips_queue=True, caps_flows=True,
        knobs=(("flow_cap_pkts", "cap_pkts"),))
