"""FQ-CoDel (ns-3.37's FqCoDelQueueDisc) over the per-flow queues of `flowqueue.py`.

A discipline that owns departure (`base.Discipline`): its packets wait in the switch's
per-flow queues (`flowqueue`, `SimState.flowq`), its own state is the scheduler's lists
and every queue's CoDel (`FqState`).  Every flow slot has its own queue (no hash
collisions; ns-3 hashes 5-tuples into 1024 buckets) running its own CoDel
(`codel.codel_step`: target, interval, ECN marking of ECT packets, CeThreshold off).  The
scheduler is deficit round robin in bytes with two lists:

  - a queue that receives a packet while on neither list (inactive) joins the tail of the
    new list with a deficit of one quantum;
  - each dequeue serves the front of the new list, else of the old list: a front queue
    with a deficit <= 0 gets one quantum more and moves to the tail of the old list; a
    front queue found empty leaves for the old list (from the new list) or becomes
    inactive (from the old list); the queue served pays the packet's bytes;
  - when the packets held exceed the limit (MaxSize, the shared buffer B), the fattest
    queue (most bytes: packets, as all data packets have one size; the lowest slot on a
    tie) loses packets at its head until half its bytes are gone, at most 64
    (DropBatchSize).

The lists are kept as a list tag and a dense position per queue (`FqState.lst`, `pos`),
so moving the front of a list to the tail of another is O(flow slots) vector work: one
packet's dequeue costs O(F), a tick's k dequeues O(k F), whatever the buffer holds.

Per tick (docs/DESIGN.md): every arrival is enqueued (`takes_every_arrival`; a new flow's
SYN is a new queue's one packet, served first: `syn_skips_queue`), then the overflow drops
run until the queues fit the limit (ns-3 drops at the packet that crosses it, so within a
tick the fattest queue is judged after all of the tick's arrivals); then k dequeues, each
with one CoDel decision on the served queue's head (a dropped head is followed by the next
packet, which leaves; ns-3 may drop several in one dequeue).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch import flowqueue
from rlbm_jax.env.switch.disciplines.base import Discipline, FlowDeparture
from rlbm_jax.env.switch.disciplines.codel import CodelVars, codel_step
from rlbm_jax.env.switch.flowqueue import Drops, merge_drops
from rlbm_jax.env.switch.queue import ENQ, NCE, RUN_FIELDS

INACTIVE, NEW, OLD = 0, 1, 2
DROP_BATCH_PKTS = 64  # ns-3.37 FqCoDelQueueDisc DropBatchSize
IP_HEADER_BYTES = 52  # a data packet's size at the queue disc: payload + TCP (32, timestamps) + IPv4 (20)


@struct.dataclass
class FqState:
    """FQ-CoDel's scheduler and per-queue CoDel, [Q] each (Q = flow slots; 1 when unused)."""

    lst: jnp.ndarray  # int32 INACTIVE / NEW / OLD
    pos: jnp.ndarray  # int32 position in its list (0 = front; dense)
    deficit: jnp.ndarray  # int32 bytes
    codel_first_above_s: jnp.ndarray  # float
    codel_drop_next_s: jnp.ndarray  # float
    codel_dropping: jnp.ndarray  # bool
    codel_count: jnp.ndarray  # int32
    codel_last_count: jnp.ndarray  # int32


def init(params) -> FqState:
    n = flowqueue.num_queues(params)
    zi, zf = jnp.zeros((n,), jnp.int32), jnp.zeros((n,), jnp.float32)
    return FqState(lst=zi, pos=zi, deficit=zi, codel_first_above_s=zf, codel_drop_next_s=zf,
                   codel_dropping=jnp.zeros((n,), bool), codel_count=zi, codel_last_count=zi)


def pkt_bytes(params):
    """A data packet's size as FQ-CoDel counts it (ns-3's queue disc item: the IP packet)."""
    return (params.mss_bytes + IP_HEADER_BYTES).astype(jnp.int32)


def activate(s: FqState, slot, adm, order, quantum) -> FqState:
    """This tick's arrivals: each inactive queue that receives packets (adm [E] > 0 at flow
    `slot` [E]) joins the new list's tail, in the arrival order `order` [E] (distinct
    ranks), with a deficit of one quantum."""
    n = s.lst.shape[0]
    sl = jnp.minimum(slot, n - 1)
    has = (adm > 0) & (slot < n)
    e = adm.shape[0]
    dup = jnp.any(has[None, :] & (slot[None, :] == slot[:, None]) & (jnp.arange(e)[None, :] < jnp.arange(e)[:, None]),
                  axis=1)
    joins = has & ~dup & (s.lst[sl] == INACTIVE)
    ahead = jnp.sum(joins[None, :] & (order[None, :] < order[:, None]), axis=1, dtype=jnp.int32)
    n_new = jnp.sum(s.lst == NEW, dtype=jnp.int32)
    dst = jnp.where(joins, slot, n)
    return s.replace(lst=s.lst.at[dst].set(NEW, mode="drop"), pos=s.pos.at[dst].set(n_new + ahead, mode="drop"),
                     deficit=s.deficit.at[dst].set(quantum, mode="drop"))


def overflow(q: flowqueue.FlowQueues, flow_cls, limit_pkts, params):
    """FqCoDelDrop until the queues hold at most `limit_pkts`: the fattest queue drops at its
    head until half its bytes are gone (ns-3: up to a length of floor(bytes / 2)), at most
    DROP_BATCH_PKTS.  flow_cls [Q]: each slot's class.  Returns (queues, Drops)."""
    n = q.pkts.shape[0]
    size = pkt_bytes(params)

    def cond(c):
        return jnp.sum(c[0].pkts) > limit_pkts

    def body(c):
        q, d = c
        g = jnp.argmax(q.pkts).astype(jnp.int32)  # the first of the fattest
        half = (q.pkts[g] * size) // 2
        batch = jnp.clip((half + size - 1) // size, 1, DROP_BATCH_PKTS)
        q, hd = flowqueue.drop_head(q, g, batch, DROP_BATCH_PKTS)
        return q, flowqueue.add_drop(d, g, hd, flow_cls[g])

    return jax.lax.while_loop(cond, body, (q, flowqueue.no_drops(n, params.num_classes)))


def _removed_before(flag, pos, n):
    """For each queue, how many queues with `flag` sit at a smaller position of its list."""
    at = jnp.zeros((n + 1,), jnp.int32).at[jnp.where(flag, pos, n)].add(1)[:n]
    excl = jnp.cumsum(at) - at
    return excl[jnp.clip(pos, 0, n - 1)]


def select(s: FqState, nonempty, quantum):
    """One dequeue's walk of the lists (ns-3.37 FqCoDelQueueDisc::DoDequeue): returns (state,
    the queue to serve [] (valid where found), found [] bool, queues found empty [Q] bool:
    their CoDel leaves its dropping state).  A quantum of at least one packet makes one
    pass over the old list give every queue a positive deficit, so two passes suffice."""
    n = s.lst.shape[0]
    lst, pos, deficit = s.lst, s.pos, s.deficit
    # the new list: its front queues that cannot send (deficit spent, or empty) move to the
    # old list's tail, in order; the first one that can is served
    is_new = lst == NEW
    n_old = jnp.sum(lst == OLD, dtype=jnp.int32)
    elig = is_new & (deficit > 0) & nonempty
    first = jnp.min(jnp.where(elig, pos, n))
    found_new = first < n
    m = jnp.where(found_new, first, jnp.sum(is_new, dtype=jnp.int32))
    move = is_new & (pos < m)
    probed = move & (deficit > 0)  # found empty
    deficit = jnp.where(move & (deficit <= 0), deficit + quantum, deficit)
    pos = jnp.where(move, n_old + pos, jnp.where(is_new, pos - m, pos))
    lst = jnp.where(move, OLD, lst)
    # the old list (when no new queue was served): front queues with a spent deficit get a
    # quantum and go to the tail, empty ones with a deficit left become inactive
    for _ in range(2):
        is_old = lst == OLD
        n_old = jnp.sum(is_old, dtype=jnp.int32)
        elig = is_old & (deficit > 0) & nonempty
        first = jnp.min(jnp.where(elig, pos, n))
        m = jnp.where(found_new, 0, jnp.where(first < n, first, n_old))
        before = is_old & (pos < m)
        remove = before & (deficit > 0)
        rotate = before & (deficit <= 0)
        gone = _removed_before(remove, pos, n)
        pos = jnp.where(rotate, n_old - m + pos - gone, jnp.where(is_old & ~before, pos - m, pos))
        deficit = jnp.where(rotate, deficit + quantum, deficit)
        lst = jnp.where(remove, INACTIVE, lst)
        probed = probed | remove
    front = pos == 0
    cand = jnp.where(found_new, (lst == NEW) & front, (lst == OLD) & front & (deficit > 0) & nonempty)
    c = jnp.argmax(cand).astype(jnp.int32)
    return s.replace(lst=lst, pos=pos, deficit=deficit), c, jnp.any(cand), probed


class Departure(NamedTuple):
    queues: flowqueue.FlowQueues
    fq: FqState
    records: jnp.ndarray  # [k, RUN_FIELDS] the packets that left, one per record, in order
    served: jnp.ndarray  # [P] packets that left per class
    marks: jnp.ndarray  # [P] packets CE-marked by CoDel
    drops: Drops  # CoDel's drops


def depart(q: flowqueue.FlowQueues, s: FqState, flow_cls, t, now_s, tick_s, ecn, params, k=None,
           codel: bool = True) -> Departure:
    """The tick's k dequeues (the bottleneck's k packet slots, traced under a capacity
    schedule; default `pkts_per_tick`), slot j at now_s + j/pkts_per_tick tick: select a
    queue, let its CoDel decide on the head packet (sojourn from its enqueue tick), drop it
    (or, with ECN, mark it: every data packet is ECT), and send the head.  `codel` False
    (static): deficit round robin alone, no decision on the head (the plain fair queue,
    `disciplines.fq`)."""
    k = params.pkts_per_tick if k is None else k
    P = params.num_classes
    n = q.pkts.shape[0]
    size = pkt_bytes(params)
    quantum = params.fq_quantum_bytes

    def slot(j, c):
        q, s, recs, served, marks, d = c
        s, f, found, probed = select(s, q.pkts > 0, quantum)
        frac = j.astype(jnp.float32) / params.pkts_per_tick
        now_j = now_s + frac * tick_s
        run = flowqueue.head_run(q, f)
        sojourn = ((t - run[ENQ]).astype(jnp.float32) + frac) * tick_s
        cv = CodelVars(s.codel_first_above_s[f], s.codel_drop_next_s[f], s.codel_dropping[f], s.codel_count[f],
                       s.codel_last_count[f])
        if codel:
            cv, act = codel_step(cv, sojourn, q.pkts[f], found, ecn, now_j, params)
        else:
            act = jnp.zeros((), bool)
        drop, mark = act & ~ecn, act & ecn
        q, gone = flowqueue.pop(q, f, drop)
        q, rec = flowqueue.pop(q, f, found)  # a drop leaves at least one packet (CoDel's MinBytes)
        rec = rec.at[NCE].set(jnp.where(mark, 1, rec[NCE]))
        set_f = lambda a, v: a.at[f].set(jnp.where(found, v, a[f]))  # only the served queue's CoDel moves
        s = s.replace(deficit=s.deficit.at[f].add(jnp.where(found, -size, 0)),
                      codel_first_above_s=set_f(s.codel_first_above_s, cv.first_above_s),
                      codel_drop_next_s=set_f(s.codel_drop_next_s, cv.drop_next_s),
                      codel_dropping=set_f(s.codel_dropping, cv.dropping) & ~probed,
                      codel_count=set_f(s.codel_count, cv.count),
                      codel_last_count=set_f(s.codel_last_count, cv.last_count))
        cls = flow_cls[f]
        hd = flowqueue.HeadDrop(pkts=gone[1], new=gone[1] - gone[2] - gone[5], retx=gone[2], spur=gone[5],
                                first_new_tx=gone[3])
        d = flowqueue.add_drop(d, f, hd, cls)
        served = served.at[cls].add(rec[1])
        marks = marks.at[cls].add(mark.astype(jnp.int32))
        return q, s, recs.at[j].set(rec), served, marks, d

    zP = jnp.zeros((P,), jnp.int32)
    init = (q, s, jnp.zeros((params.pkts_per_tick, RUN_FIELDS), jnp.int32), zP, zP, flowqueue.no_drops(n, P))
    q, s, recs, served, marks, d = jax.lax.fori_loop(0, k, slot, init)
    return Departure(queues=q, fq=s, records=recs, served=served, marks=marks, drops=d)


@dataclasses.dataclass(frozen=True)
class FqCoDel(Discipline):
    def init(self, params) -> FqState:
        return init(params)

    def enqueue_flows(self, s: FqState, slots, adm_pkts, order, params) -> FqState:
        return activate(s, slots, adm_pkts, order, params.fq_quantum_bytes)

    def depart(self, s: FqState, flowq, flow_cls, t, now_s, tick_s, k, params) -> FlowDeparture:
        """The overflow drops bring the queues within the shared buffer (from the fattest
        flow), then the k dequeues of deficit round robin with CoDel at each served queue's
        head."""
        q, over = overflow(flowq, flow_cls, params.buffer_pkts, params)
        d = depart(q, s, flow_cls, t, now_s, tick_s, params.ecn, params, k)
        return FlowDeparture(queues=d.queues, state=d.fq, records=d.records, served=d.served, marks=d.marks,
                             drops=merge_drops(over, d.drops))


FQ_CODEL = FqCoDel(name="fq-codel", owns_departure=True, takes_every_arrival=True, syn_skips_queue=True)
