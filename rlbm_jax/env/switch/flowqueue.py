"""Per-flow queues at the switch: one FIFO per flow slot, for the disciplines that queue
each flow apart (FQ-CoDel, `disciplines/fq_codel.py`; a per-flow cap would reuse them).
They are the switch's, not one discipline's: `SimState.flowq`.

Each flow slot's FIFO is a ring of packet runs, the record of `queue.py` (flow, packets,
retransmissions, first transmission id, enqueue tick, spurious copies, CE-marked packets).
A flow adds at most one run per tick, so a ring of C runs holds any queue of up to C
packets.  Flow slots are queues one to one ("perfect hashing"): two flows never share a
queue (ns-3's FQ-CoDel hashes 5-tuples into 1024 buckets, where they can).

The ring capacity C is the static `flow_queue_capacity_pkts`; 0 (the default of every
policy without per-flow queues) allocates one queue of one run as a placeholder (arrays of
size 0 would not checkpoint), and the tick leaves the per-flow code out at trace time.

Operations touch a fixed number of records: `enqueue` one run per sending flow, `pop`
one packet at the head of one queue, `drop_head` up to `max_pkts` packets at the head of
one queue: per-tick work O(flow slots + packets per tick), never O(buffer).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.queue import COUNT, ENQ, FLOW, NCE, NRETX, NSPUR, RUN_FIELDS, TX0


@struct.dataclass
class FlowQueues:
    runs: jnp.ndarray  # [Q, C, RUN_FIELDS] int32 ring of run records per flow slot (Q = F; 1 x 1 when unused)
    head: jnp.ndarray  # [Q] index of the oldest run
    nruns: jnp.ndarray  # [Q] runs held
    pkts: jnp.ndarray  # [Q] packets held


def used(params) -> bool:
    """Whether the params allocate per-flow queues (static)."""
    return params.flow_queue_capacity_pkts > 0


def num_queues(params) -> int:
    """Flow queues allocated: one per flow slot; a placeholder of one without per-flow queues."""
    return params.num_flow_slots if used(params) else 1


def init(params) -> FlowQueues:
    n, cap = num_queues(params), max(params.flow_queue_capacity_pkts, 1)
    z = jnp.zeros((n,), jnp.int32)
    return FlowQueues(runs=jnp.zeros((n, cap, RUN_FIELDS), jnp.int32), head=z, nruns=z, pkts=z)


def enqueue(q: FlowQueues, slot, adm, nretx, tx0, tick, nspur, nce) -> FlowQueues:
    """Append one run per entry with adm > 0 to the queue of flow `slot` (entries [E]; an
    out-of-range slot is skipped)."""
    n, cap, _ = q.runs.shape
    e = adm.shape[0]
    has = (adm > 0) & (slot < n)
    s = jnp.minimum(slot, n - 1)
    # entries naming the same slot (a slot that ended and restarted within the tick) queue in entry order
    ahead = jnp.sum(has[None, :] & (slot[None, :] == slot[:, None]) & (jnp.arange(e)[None, :] < jnp.arange(e)[:, None]),
                    axis=1, dtype=jnp.int32)
    pos = (q.head[s] + q.nruns[s] + ahead) % cap
    row = jnp.where(has, s, n)  # out of range -> dropped by the scatter
    rec = jnp.stack([slot, adm, nretx, tx0, jnp.full_like(adm, tick), nspur, nce], axis=-1)
    runs = q.runs.at[row, pos].set(rec, mode="drop")  # (no flattened view: see queue.enqueue)
    dst = jnp.where(has, slot, n)
    return q.replace(runs=runs, nruns=q.nruns.at[dst].add(1, mode="drop"),
                     pkts=q.pkts.at[dst].add(adm, mode="drop"))


def head_run(q: FlowQueues, f):
    """The record of the run at the head of queue f ([] index): [RUN_FIELDS]."""
    return q.runs[f, q.head[f]]


def pop(q: FlowQueues, f, take):
    """Take the head packet of queue f where `take` ([] bool; the queue must hold a
    packet).  Returns (state, its record: COUNT 1, NRETX / NSPUR / NCE 1 where it is a
    retransmission / spurious copy / CE-marked; all zero where nothing is taken)."""
    cap = q.runs.shape[1]
    h = q.head[f]
    run = q.runs[f, h]
    is_retx = run[NRETX] > 0
    is_spur = ~is_retx & (run[NSPUR] > 0)
    is_ce = run[NCE] >= run[COUNT]  # the run's CE-marked packets are its last
    one = lambda b: b.astype(jnp.int32)
    out = jnp.stack([run[FLOW], jnp.int32(1), one(is_retx), run[TX0], run[ENQ], one(is_spur), one(is_ce)])
    rest = jnp.stack([run[FLOW], run[COUNT] - 1, run[NRETX] - one(is_retx), run[TX0] + 1, run[ENQ],
                      run[NSPUR] - one(is_spur), run[NCE] - one(is_ce)])
    emptied = take & (run[COUNT] <= 1)
    runs = q.runs.at[f, h].set(jnp.where(take, rest, run))
    q = q.replace(runs=runs, head=q.head.at[f].set(jnp.where(emptied, (h + 1) % cap, h)),
                  nruns=q.nruns.at[f].add(-one(emptied)), pkts=q.pkts.at[f].add(-one(take)))
    return q, jnp.where(take, out, 0)


class HeadDrop(NamedTuple):
    """What `drop_head` removed from one queue."""
    pkts: jnp.ndarray  # [] packets dropped
    new: jnp.ndarray  # [] of which new data
    retx: jnp.ndarray  # [] of which retransmissions of lost packets
    spur: jnp.ndarray  # [] of which spurious copies (go-back-N resends of packets in flight)
    first_new_tx: jnp.ndarray  # [] transmission id of the first new packet dropped (if any)


def drop_head(q: FlowQueues, f, n_pkts, max_pkts: int):
    """Drop min(n_pkts, what it holds) packets (n_pkts <= max_pkts, static) from the head of
    queue f ([] index).  Returns (state, HeadDrop)."""
    cap = q.runs.shape[1]
    m = min(max_pkts, cap)  # a run holds at least one packet
    j = jnp.arange(m, dtype=jnp.int32)
    idx = (q.head[f] + j) % cap
    rows = q.runs[f, idx]  # [m, RUN_FIELDS]
    valid = j < q.nruns[f]
    count = jnp.where(valid, rows[:, COUNT], 0)
    before = jnp.cumsum(count) - count
    take = jnp.clip(n_pkts - before, 0, count)
    full = valid & (take == count) & (count > 0)
    t_retx = jnp.minimum(rows[:, NRETX], take)
    t_spur = jnp.minimum(rows[:, NSPUR], take - t_retx)
    t_ce = jnp.clip(take - (count - rows[:, NCE]), 0, rows[:, NCE])
    t_new = take - t_retx - t_spur
    rest = (rows.at[:, COUNT].add(-take).at[:, NRETX].add(-t_retx).at[:, NSPUR].add(-t_spur)
            .at[:, TX0].add(take).at[:, NCE].add(-t_ce))
    runs = q.runs.at[f, idx].set(jnp.where((take > 0)[:, None], rest, rows))
    n_full = jnp.sum(full, dtype=jnp.int32)
    dropped = jnp.sum(take, dtype=jnp.int32)
    first_new = jnp.min(jnp.where(t_new > 0, rows[:, TX0] + rows[:, NRETX] + rows[:, NSPUR], jnp.iinfo(jnp.int32).max))
    q = q.replace(runs=runs, head=q.head.at[f].set((q.head[f] + n_full) % cap), nruns=q.nruns.at[f].add(-n_full),
                  pkts=q.pkts.at[f].add(-dropped))
    return q, HeadDrop(pkts=dropped, new=jnp.sum(t_new, dtype=jnp.int32), retx=jnp.sum(t_retx, dtype=jnp.int32),
                       spur=jnp.sum(t_spur, dtype=jnp.int32), first_new_tx=first_new)


class Drops(NamedTuple):
    """Packets the switch dropped from the flow queues, per flow slot [Q] (for the senders,
    `tcp.on_queue_drops`) and per class [P] (for the counters)."""
    new: jnp.ndarray  # [Q] new data
    retx: jnp.ndarray  # [Q] retransmissions of lost packets
    first_new_tx: jnp.ndarray  # [Q] transmission id of the first new packet dropped
    by_class: jnp.ndarray  # [P] all packets
    retx_spur: jnp.ndarray  # [] retransmissions and spurious copies


def no_drops(n, num_classes) -> Drops:
    """Nothing dropped from n queues of num_classes classes."""
    z = jnp.zeros((n,), jnp.int32)
    return Drops(new=z, retx=z, first_new_tx=z + jnp.iinfo(jnp.int32).max,
                 by_class=jnp.zeros((num_classes,), jnp.int32), retx_spur=jnp.zeros((), jnp.int32))


def add_drop(d: Drops, f, hd: HeadDrop, cls) -> Drops:
    """`d` with what `drop_head` (or a head packet's drop) removed from queue f ([] index) of class cls."""
    return d._replace(new=d.new.at[f].add(hd.new), retx=d.retx.at[f].add(hd.retx),
                      first_new_tx=d.first_new_tx.at[f].min(jnp.where(hd.new > 0, hd.first_new_tx,
                                                                      jnp.iinfo(jnp.int32).max)),
                      by_class=d.by_class.at[cls].add(hd.pkts), retx_spur=d.retx_spur + hd.retx + hd.spur)


def merge_drops(a: Drops, b: Drops) -> Drops:
    return Drops(new=a.new + b.new, retx=a.retx + b.retx, first_new_tx=jnp.minimum(a.first_new_tx, b.first_new_tx),
                 by_class=a.by_class + b.by_class, retx_spur=a.retx_spur + b.retx_spur)
