"""Class FIFOs of the switch as rings of packet runs.

A run is consecutive transmissions of one flow that entered the same FIFO in
the same tick: (flow slot, packets, retransmissions among its first packets,
transmission id of its first packet, enqueue tick, spurious retransmissions right
after the retransmissions, CE-marked packets: the last NCE of the run, new data).  A run's packets are, in order: retransmissions of lost
packets, spurious retransmissions (go-back-N resends of packets whose originals are
still in flight, `tcp.on_timeouts`), new data.  Each class FIFO is a ring
of runs of static capacity R (a run holds at least one packet, so R runs always
fit a FIFO capped at R packets).  Enqueue writes at most one run per flow per
tick and dequeue touches at most `k` runs, so per-tick work is O(flows + k),
never O(buffer).
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

# Field order of a run record (last axis of `runs`).
FLOW, COUNT, NRETX, TX0, ENQ, NSPUR, NCE = range(7)
RUN_FIELDS = 7


@struct.dataclass
class QueueState:
    runs: jnp.ndarray  # [P, R, RUN_FIELDS] int32 ring of run records
    head: jnp.ndarray  # [P] index of the oldest run
    nruns: jnp.ndarray  # [P] runs held
    pkts: jnp.ndarray  # [P] packets held (with per-flow queues, FQ-CoDel: its flows' queues' total)


def init_queue(num_classes: int, capacity: int) -> QueueState:
    return QueueState(
        runs=jnp.zeros((num_classes, capacity, RUN_FIELDS), jnp.int32),
        head=jnp.zeros((num_classes,), jnp.int32),
        nruns=jnp.zeros((num_classes,), jnp.int32),
        pkts=jnp.zeros((num_classes,), jnp.int32),
    )


def enqueue(q: QueueState, flow, cls, adm, nretx, tx0, rank, tick, nspur=None, nce=None) -> QueueState:
    """Append one run per sending flow with adm > 0.

    flow (slot ids), cls, adm, nretx, tx0, rank, nspur: [E]; rank is the flow's position among
    this tick's admitting flows of its class (their FIFO order); nspur (default none) the
    spurious retransmissions that follow the nretx retransmissions; nce (default none) the
    CE-marked packets at the run's end."""
    P, R, _ = q.runs.shape
    F = adm.shape[0]
    has = adm > 0
    pos = (q.head[cls] + q.nruns[cls] + rank) % R
    row = jnp.where(has, cls, P)  # out of range -> dropped by the scatter
    nspur = jnp.zeros_like(adm) if nspur is None else nspur
    nce = jnp.zeros_like(adm) if nce is None else nce
    rec = jnp.stack([flow, adm, nretx, tx0, jnp.full((F,), tick, jnp.int32), nspur, nce], axis=-1)
    # (indexed [class, position], not through a flattened view: a reshape of the batched ring
    # would make XLA copy it whole every tick where its layout is not the reshape's)
    runs = q.runs.at[row, pos].set(rec, mode="drop")
    onehot = (cls[:, None] == jnp.arange(P)[None, :]) & has[:, None]
    new_runs = jnp.sum(onehot, axis=0, dtype=jnp.int32)
    new_pkts = jnp.sum(jnp.where(onehot, adm[:, None], 0), axis=0, dtype=jnp.int32)
    return q.replace(runs=runs, nruns=q.nruns + new_runs, pkts=q.pkts + new_pkts)


def dequeue(q: QueueState, n_pkts, max_runs: int):
    """Remove n_pkts[c] packets from the head of each class FIFO.

    Returns the new state and the departed runs as a [P, max_runs, RUN_FIELDS] array
    (COUNT holds the packets taken from that run, NRETX, NSPUR and NCE how many of them are
    retransmissions, spurious ones and CE-marked; 0 marks an empty record)."""
    P, R, _ = q.runs.shape
    j = jnp.arange(max_runs, dtype=jnp.int32)
    idx = (q.head[:, None] + j[None, :]) % R  # [P, m]
    rows = jnp.take_along_axis(q.runs, idx[:, :, None], axis=1)  # [P, m, RUN_FIELDS]
    valid = j[None, :] < q.nruns[:, None]
    count = jnp.where(valid, rows[..., COUNT], 0)
    before = jnp.cumsum(count, axis=1) - count
    take = jnp.clip(n_pkts[:, None] - before, 0, count)
    full = valid & (take == count) & (count > 0)
    n_full = jnp.sum(full, axis=1, dtype=jnp.int32)
    partial = valid & (take > 0) & (take < count)  # at most one per class
    taken_retx = jnp.minimum(rows[..., NRETX], take)
    taken_spur = jnp.minimum(rows[..., NSPUR], take - taken_retx)
    taken_ce = jnp.clip(take - (count - rows[..., NCE]), 0, rows[..., NCE])
    rest = (rows.at[..., COUNT].add(-take).at[..., NRETX].add(-taken_retx).at[..., NSPUR].add(-taken_spur)
            .at[..., TX0].add(take).at[..., NCE].add(-taken_ce))
    row = jnp.where(partial, jnp.arange(P)[:, None], P)  # out of range -> dropped by the scatter
    # (indexed [class, position], not through a flattened view: see `enqueue`)
    runs = q.runs.at[row, idx].set(rest, mode="drop")
    out = (rows.at[..., COUNT].set(take).at[..., NRETX].set(taken_retx).at[..., NSPUR].set(taken_spur)
           .at[..., NCE].set(taken_ce))
    dq = jnp.sum(take, axis=1, dtype=jnp.int32)
    new = q.replace(runs=runs, head=(q.head + n_full) % R, nruns=q.nruns - n_full, pkts=q.pkts - dq)
    return new, out
