"""The flow-slot table: the shared per-flow sender state, and the columns each registered
variant adds (`Variant.fields`).

Packets are counted, not numbered.  Each transmission of a flow gets the next
transmission id; a flow's transmissions cross the network in order (one FIFO per
class, losses only at the bottleneck's admission), so ids tell which ACKs are
duplicates and when a loss is detected.

Per flow the sender keeps:
  outstanding  transmissions sent whose fate the sender does not know yet
               (RFC 6675 "pipe": in flight plus undetected drops)
  undet        dropped new-data transmissions not yet detected, the first of
               them having id `undet_tx`; detected when a transmission with id
               >= undet_tx + dupthresh is ACKed (3 SACKed segments above a hole),
               or by the RTO
  lost_q       detected losses waiting for retransmission (sent before new data)
  retx_out     retransmissions in flight; retx_dropped: retransmissions dropped
               (like ns-3.37, only the RTO recovers a lost retransmission)
  ghost        transmissions in flight when the RTO fired; the RTO empties the
               pipe and their later ACKs count as new ACKs
  gbn_left     go-back-N (`params.rto_recovery` "go-back-n", ns-3.37): ghosts not yet
               resent whose ACK has not arrived either; the sender resends them, in
               order, after the lost packets and before new data.  A resend whose
               original is still in flight is *spurious*: the original arrives first,
               the receiver drops the copy and ACKs at once, and the sender ignores
               that ACK (it acknowledges nothing)
  gbn_ahead    ghosts resent whose original's ACK is still to come: that ACK takes the
               resend out of the pipe (ns-3 discards the segment, retransmitted or not)
  ecn_recover_tx  ECN (params.ecn): the transmission id at the last window reduction; a
               CE mark echoed for a packet sent before it is the same congestion event
               (with `params.ecn_cwr` "ns-3.37": at the last entry to CWR only)
  ece_pending  ECN, `params.ecn_cwr` "ns-3.37": a CE mark the receiver still echoes has
               been ACKed, and no ACK that moves the cumulative ACK has carried it yet
  pace_*       pacing (`params.pacing` "ns-3.37", `core.pace_allowed`): the pacing rate,
               and the time the pacer lets the next segment go, as an offset from the
               start of tick `pace_tick` (so it stays small and exact in float32)
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.tcp.variant import chosen, used
from rlbm_jax.env.tcp.variants import VARIANTS

BIG_PKTS = 1 << 30  # size of a long-lived flow


class _Shared:
    """The columns every flow slot has, whatever its TCP (shape [F] each)."""

    active: jnp.ndarray  # bool
    sender: jnp.ndarray  # int32
    cls: jnp.ndarray  # int32 class at the bottleneck
    size_pkts: jnp.ndarray  # int32 (BIG_PKTS for long-lived)
    size_bytes: jnp.ndarray  # float32
    start_s: jnp.ndarray  # float32 arrival time (real clock)
    data_tick: jnp.ndarray  # int32 first tick it may send data (after the handshake)
    next_new: jnp.ndarray  # int32 new packets sent
    tx_next: jnp.ndarray  # int32 id of the next transmission
    acked: jnp.ndarray  # int32 packets the sender knows delivered
    cwnd: jnp.ndarray  # float32 segments
    ssthresh: jnp.ndarray  # float32 segments
    outstanding: jnp.ndarray  # int32
    undet: jnp.ndarray  # int32
    undet_tx: jnp.ndarray  # int32
    lost_q: jnp.ndarray  # int32
    retx_out: jnp.ndarray  # int32
    retx_dropped: jnp.ndarray  # int32
    ghost: jnp.ndarray  # int32
    state: jnp.ndarray  # int32 OPEN / RECOVERY / LOSS / CWR
    prr_delivered: jnp.ndarray  # int32
    prr_out: jnp.ndarray  # int32
    recover_fs: jnp.ndarray  # float32
    srtt_s: jnp.ndarray  # float32
    rttvar_s: jnp.ndarray  # float32
    rto_s: jnp.ndarray  # float32
    rto_deadline: jnp.ndarray  # int32 tick
    da_parity: jnp.ndarray  # int32 delayed-ACK segments held by the receiver
    cwnd_cnt: jnp.ndarray  # int32 growth units ACKed in congestion avoidance toward the next +1
    delay_min_s: jnp.ndarray  # float32 smallest RTT sample since the last RTO, 0 = none yet
    rec_partial: jnp.ndarray  # bool: this RECOVERY episode has had its first partial ACK
    gbn_left: jnp.ndarray  # int32 go-back-N: ghosts neither resent nor ACKed yet
    gbn_ahead: jnp.ndarray  # int32 go-back-N: ghosts resent before their original's ACK
    ecn_recover_tx: jnp.ndarray  # int32 ECN: tx_next at the last window reduction
    ece_pending: jnp.ndarray  # bool ECN (ecn_cwr "ns-3.37"): an echo waits for a cumulative ACK
    pace_rate_pps: jnp.ndarray  # float32 pacing (params.pacing): the pacing rate, packets per second
    pace_wait_s: jnp.ndarray  # float32 pacing: when the next paced segment may leave, after the start of tick pace_tick
    pace_tick: jnp.ndarray  # int32 pacing: the tick pace_wait_s counts from


# shared columns that only runs asking for them store (`wide`), like the columns of a variant with
# `optional_columns`: (choice, value) that asks, and the columns with their initial values
OPTIONAL_SHARED = (
    (("rtt_clock", "ns-3.37"), {"echo_enq": -1}),  # int32 enqueue tick of the last packet ACKed in order (ns-3.37's
    # timestamp echo: the first segment a delayed ACK covers may be an earlier tick's), -1 none
    (("sack_credit", "ns-3.37"), {"sack_bank": 0}),  # int32 segments delivered above the lowest hole, not yet passed
    # by the cumulative ACK (`core._sack_bank`)
)

SHARED_FLOAT = ("size_bytes", "start_s", "cwnd", "ssthresh", "recover_fs", "srtt_s", "rttvar_s", "rto_s",
                "delay_min_s", "pace_rate_pps", "pace_wait_s")
SHARED_BOOL = ("active", "rec_partial", "ece_pending")
_INITIAL = {n: 0 for n in _Shared.__annotations__}
for _v in VARIANTS:
    _clash = set(_v.fields.names()) & set(_INITIAL)
    if _clash:
        raise ValueError(f"tcp variant {_v.name!r} redeclares flow columns {sorted(_clash)}")
    _INITIAL.update(_v.fields.ints | _v.fields.floats | _v.fields.bools)
for _choice, _cols in OPTIONAL_SHARED:
    _INITIAL.update(_cols)

# the columns of variants with `optional_columns` come last: a table without them (`wide` false)
# is a prefix of the full one, and a run that does not use those variants stores only the prefix
_ORDERED = tuple(v for v in VARIANTS if not v.optional_columns) + tuple(v for v in VARIANTS if v.optional_columns)
FLOAT_FIELDS = SHARED_FLOAT + tuple(n for v in _ORDERED for n in v.fields.floats)
BOOL_FIELDS = SHARED_BOOL + tuple(n for v in _ORDERED for n in v.fields.bools)
_OPT_SHARED_INTS = tuple(n for _, cols in OPTIONAL_SHARED for n in cols)
_variant_ints = lambda vs: tuple(n for v in vs for n in tuple(v.fields.ints) + tuple(v.fields.bools))
INT_FIELDS = (tuple(n for n in _Shared.__annotations__ if n not in FLOAT_FIELDS)
              + _variant_ints(v for v in VARIANTS if not v.optional_columns) + _OPT_SHARED_INTS
              + _variant_ints(v for v in VARIANTS if v.optional_columns))
OPTIONAL_FIELDS = frozenset(tuple(n for v in VARIANTS if v.optional_columns for n in v.fields.names())
                            + _OPT_SHARED_INTS)
BASE_INT_FIELDS = tuple(n for n in INT_FIELDS if n not in OPTIONAL_FIELDS)  # the narrow table's
BASE_FLOAT_FIELDS = tuple(n for n in FLOAT_FIELDS if n not in OPTIONAL_FIELDS)
_COL = {n: i for i, n in enumerate(INT_FIELDS)} | {n: i for i, n in enumerate(FLOAT_FIELDS)}


def widths(params) -> tuple[int, int]:
    """How many int and float columns runs of these params store (static, from the choices'
    record): every column where some flow group uses a variant with `optional_columns`; else
    the base ones and, where some run asks for a choice in `OPTIONAL_SHARED`, the shared
    optional ones after them; else the base ones.  Each is a prefix of the full table."""
    if any(v.optional_columns and used(params, v) for v in VARIANTS):
        return len(INT_FIELDS), len(FLOAT_FIELDS)
    shared = any(chosen(params, *choice) for choice, _ in OPTIONAL_SHARED)
    return len(BASE_INT_FIELDS) + (len(_OPT_SHARED_INTS) if shared else 0), len(BASE_FLOAT_FIELDS)


def wide(params) -> bool:
    """Whether runs of these params store optional columns (`widths` beyond the base ones)."""
    return widths(params) != (len(BASE_INT_FIELDS), len(BASE_FLOAT_FIELDS))

FlowState = struct.dataclass(type("FlowState", (), {
    "__annotations__": dict.fromkeys(_INITIAL, jnp.ndarray),
    "__module__": __name__,
    "__doc__": "Flow-slot table, one [F] array per field: the shared columns (`_Shared`) "
               "then each registered variant's own (`Variant.fields`).",
}))


@struct.dataclass
class FlowTable:
    """The flow-slot table as stored, field-major: scanning one field of every slot
    reads contiguous memory, and the few flows that have events in a tick are
    gathered and scattered back with one operation per array."""

    ints: jnp.ndarray  # [len(INT_FIELDS), F] int32 (bools as 0/1)
    floats: jnp.ndarray  # [len(FLOAT_FIELDS), F] float32

    def rows(self, idx):
        """The sub-table of slots idx (clipped into range)."""
        return FlowTable(ints=self.ints[:, idx], floats=self.floats[:, idx])

    def set_rows(self, idx, sub):
        """Write sub back at slots idx; indices out of range are skipped.  A narrow table keeps
        only its own columns of a wide `sub`."""
        ni, nf = self.ints.shape[0], self.floats.shape[0]
        return FlowTable(ints=self.ints.at[:, idx].set(sub.ints[:ni], mode="drop"),
                         floats=self.floats.at[:, idx].set(sub.floats[:nf], mode="drop"))


def pack(fl, widths: tuple[int, int] | None = None) -> FlowTable:
    """The table of `fl`: every column, or the first `widths` (ints, floats) of them (`widths(params)`)."""
    ni, nf = widths or (len(INT_FIELDS), len(FLOAT_FIELDS))
    ints = jnp.stack([getattr(fl, n).astype(jnp.int32) for n in INT_FIELDS[:ni]], axis=0)
    floats = jnp.stack([getattr(fl, n).astype(jnp.float32) for n in FLOAT_FIELDS[:nf]], axis=0)
    return FlowTable(ints=ints, floats=floats)


def unpack(tb: FlowTable):
    """The FlowState of a table; a narrow table's missing columns hold their initial values."""
    cols = {n: tb.ints[i] for i, n in enumerate(INT_FIELDS[:tb.ints.shape[0]])}
    cols.update({n: tb.floats[i] for i, n in enumerate(FLOAT_FIELDS[:tb.floats.shape[0]])})
    for n in _INITIAL:
        if n not in cols:
            cols[n] = jnp.full(tb.ints.shape[1:], _INITIAL[n], jnp.float32 if n in FLOAT_FIELDS else jnp.int32)
    for n in BOOL_FIELDS:
        cols[n] = cols[n] > 0
    return FlowState(**cols)


def column(tb: FlowTable, name: str):
    """One field of every slot, without unpacking the rest (a column a narrow table does not
    store: its initial value)."""
    arr = tb.floats if name in FLOAT_FIELDS else tb.ints
    if _COL[name] >= arr.shape[0]:
        col = jnp.full(arr.shape[1:], _INITIAL[name], arr.dtype)
    else:
        col = arr[_COL[name]]
    return col > 0 if name in BOOL_FIELDS else col


def with_column(tb: FlowTable, name: str, col) -> FlowTable:
    """The table with one field of every slot replaced by `col` [F] (a column the table stores)."""
    floats = name in FLOAT_FIELDS
    arr = tb.floats if floats else tb.ints
    if _COL[name] >= arr.shape[0]:
        raise ValueError(f"column {name} is not stored in this flow table (a variant's optional column)")
    arr = arr.at[_COL[name]].set(jnp.asarray(col, arr.dtype))
    return tb.replace(floats=arr) if floats else tb.replace(ints=arr)


def init_flows(num_slots: int):
    """An empty table of `num_slots` slots (every column at its initial value)."""
    def col(name):
        dtype = jnp.float32 if name in FLOAT_FIELDS else bool if name in BOOL_FIELDS else jnp.int32
        return jnp.full((num_slots,), _INITIAL[name], dtype)
    return FlowState(**{n: col(n) for n in _INITIAL})


def unsettled(fl):
    """Transmissions whose fate is open: the RTO timer runs while this is > 0."""
    return fl.outstanding + fl.ghost + fl.retx_out + fl.lost_q + fl.retx_dropped
