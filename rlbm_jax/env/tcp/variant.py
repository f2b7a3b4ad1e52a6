"""What a TCP variant (congestion control) supplies to the shared sender in `core`.

The shared part (`core`) keeps everything the variants have in common, as ns-3.37's
TcpSocketBase does: the flow table, loss detection, fast recovery with PRR, the RTO and
go-back-N, RTT estimation, delayed ACKs and the ECN response (CWR).  A variant is what
ns-3.37 puts in a TcpCongestionOps: the window after a congestion event, the growth per
ACK, what it learns from each ACK, and its own per-flow state.  Every hook works on
whole [F] arrays of flow slots; `core` evaluates every registered variant and keeps, per
flow, the one its TCP id names (`core.flow_tcp`: the run's `params.tcp_id`, or with several
flow groups its group's `params.group_tcp_id`), so configurations with different TCPs
batch under `vmap` and flows with different TCPs share a run.  Hooks return the variant's own fields they change as a dict; a field a hook
leaves out keeps its value.

A new variant is a module with a `Variant` subclass instance and one line in
`variants.py` (its position there is its `tcp_id`).  Parameters of its own go in
`SimParams` under its name's prefix (`cubic_*`, `dctcp_*`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

OPEN, RECOVERY, LOSS, CWR = 0, 1, 2, 3  # a flow's state (`core`)
# the largest window a sender keeps: ns-3.37 holds cwnd in a uint32 of bytes, about 3e6 segments
# of 1448 B (what a rate sender keeps, `rate`, and the most an agent's `cwnd_gain` sets, `sim`)
MAX_CWND_PKTS = float(1 << 21)


@dataclasses.dataclass(frozen=True)
class Fields:
    """A variant's own per-flow columns: name -> initial value, by type."""

    ints: dict = dataclasses.field(default_factory=dict)  # int32 columns
    floats: dict = dataclasses.field(default_factory=dict)  # float32 columns
    bools: dict = dataclasses.field(default_factory=dict)  # bool columns (stored as int32)

    def names(self):
        return tuple(self.ints) + tuple(self.floats) + tuple(self.bools)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A congestion control.  Subclasses override the hooks they need.

    name              the `tcp=` name (`make_params`, `--tcp`, the ns-3 scenario's `--tcp`)
    counts_segments   growth is fed the segments each ACK covers (ns-3.37 CUBIC, Linux
                      Reno); otherwise one unit per ACK (ns-3.37 NewReno)
    ecn_always        the variant turns ECN on by itself and marks its SYNs ECT (DCTCP)
    native            the native (C++) tick implements it too
    grows_on_recovery_exit  the ACK that ends fast recovery goes to `increase_window`
                      (in OPEN, after cwnd = ssthresh) as the flight at the loss in one ACK
    sets_pacing_rate  ns-3.37's HasCongControl (BBR): the variant paces whatever `pacing`
                      says and, after every tick's ACKs, sets the window and the pacing rate
                      itself (`cong_control`), in place of the shared growth, PRR and rate
    optional_columns  its columns are stored only in runs that use it (`flows.wide`); they
                      come last in the table, so every other run's table is unchanged
    fields            its own per-flow columns
    """

    name: str = ""
    counts_segments: bool = False
    ecn_always: bool = False
    native: bool = False
    grows_on_recovery_exit: bool = False
    sets_pacing_rate: bool = False
    optional_columns: bool = False
    fields: Fields = Fields()

    def on_start(self, params, fresh) -> dict:
        """Initial values of its own fields for a new connection, as offsets from the columns'
        declared initial values, that depend on params or on the new connection `fresh` (its
        shared columns set: cwnd, the handshake's sRTT, data_tick)."""
        return {}

    def initial_rate_pps(self, fresh, params):
        """(sets_pacing_rate) the pacing rate of a new connection, `fresh` with its own fields set."""
        raise NotImplementedError

    def cong_control(self, fl, ev, params, tick_s):
        """(sets_pacing_rate) after a tick's ACKs: (cwnd [F], pacing rate [F] segments/s, own
        fields and `ssthresh` to set).  `ev` is the tick's `core.CongEvents`."""
        raise NotImplementedError

    def ssthresh(self, fl, flight, params) -> tuple[Any, dict]:
        """ns-3 GetSsThresh on a loss or an echoed mark: (ssthresh [F], own fields to set
        where the cut happens).  `flight` [F] float: segments in the pipe."""
        raise NotImplementedError

    def slow_start_extra(self, per_ack):
        """Segments slow start may add beyond ssthresh in one tick, given the segments
        `per_ack` [F] each ACK covers (0: stop at ssthresh)."""
        return jnp.zeros_like(per_ack)

    def increase_window(self, fl, segs, calls, t, params, tick_s) -> tuple[Any, dict]:
        """Congestion avoidance (ns-3 IncreaseWindow past slow start): `segs` [F] int32
        growth units (segments or ACKs, see counts_segments) from `calls` [F] ACKs, on
        `fl.cwnd`.  Returns (cwnd [F], own fields and `cwnd_cnt`, the shared counter of
        growth units towards the next segment, to set where there was growth)."""
        raise NotImplementedError

    def on_recovered(self, fl) -> dict:
        """Own fields to set where fast recovery or CWR ends (cwnd = ssthresh)."""
        return {}

    def pkts_acked(self, fl, ack, params, tick_s) -> tuple[Any, dict]:
        """After this tick's growth (ns-3 PktsAcked): (ssthresh [F], own fields).  `ack` is
        the tick's `core.AckView`."""
        return fl.ssthresh, {}

    def on_timeout(self, fl, params) -> dict:
        """Own fields to set where the RTO fires (entering LOSS)."""
        return {}


def chosen(params, name: str, value) -> bool:
    """Whether some run of the batch these params describe has choice `name` = `value` (a
    static Python bool from the choices' record, `params.model_choices`)."""
    return any(n == name and v == value for n, v in params.model_choices)


def used(params, v: Variant) -> bool:
    """Whether some run of the batch these params describe uses variant `v` (a static Python
    bool from the choices' record, `params.model_choices`)."""
    return chosen(params, "tcp", v.name)


def select(tcp_id, values):
    """values[tcp_id], elementwise: the variant's value for each run.  An entry None is a
    variant no flow of the batch uses (`core.variants_of`), left out."""
    out = values[0]
    for i, v in enumerate(values[1:], start=1):
        if v is not None:
            out = jnp.where(tcp_id == i, v, out)
    return out


def flag(tcp_id, flags):
    """A per-variant Python bool as a traced bool for this run's `tcp_id` (None: a variant
    the batch does not use, taken as False)."""
    flags = [bool(f) for f in flags]
    if all(flags) or not any(flags):
        return jnp.asarray(bool(flags[0]))
    return jnp.asarray(flags)[tcp_id]


def merge(tcp_id, old, per_variant: list) -> dict:
    """One dict of field values from every variant's updates: for each field some variant
    sets, that variant's value where it is this run's, the old value (attribute of `old`)
    elsewhere.  An entry None is a variant the batch does not use."""
    names = dict.fromkeys(n for d in per_variant if d is not None for n in d)
    return {n: select(tcp_id, [None if d is None else d.get(n, getattr(old, n)) for d in per_variant])
            for n in names}
