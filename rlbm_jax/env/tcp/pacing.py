"""Sender pacing as ns-3.37's TcpSocketBase does it (`params.pacing` "ns-3.37"), on [F]
arrays of flow slots.

ns-3.37 sends one segment, then holds the next until a timer of MSS x 8 / pacing rate
expires (the payload only; one segment per expiry, no credit: a sender that was window-
limited when the timer expired sends its next segment at once and the following ones a gap
apart).  The first `initial_cwnd_pkts` segments of a connection leave unpaced unless
`pace_initial_window`.  The pacing rate is set after the handshake and after every ACK
(UpdatePacingRate): max(cwnd, pipe) x ratio / sRTT, the ratio `pacing_ss_ratio` while cwnd <
ssthresh / 2 and `pacing_ca_ratio` from there on, at most `max_pacing_rate_bps`; an RTO
cancels the timer, so the retransmission leaves at once, and keeps the rate.

Here a tick is a slot of `pkts_per_tick` packet times.  Each flow keeps the time its next
paced segment may leave as an offset from the start of a recent tick (`pace_wait_s` after
tick `pace_tick`, small and exact in float32): in tick t the pacer lets go the segments whose
times fall inside the tick, the first at that time (or at the tick's start if it is past)
and the others a gap apart.  Not modelled: ns-3.37 lets the fast retransmission that starts
a recovery and a partial ACK's retransmission skip a running timer (here they wait for it,
one gap at most), and a new rate takes effect at the next segment there but for the whole
tick here.

A congestion control that sets its own rate (ns-3.37's HasCongControl, BBR) paces whatever
its group's `pacing` says and writes `pace_rate_pps` itself (`Variant.cong_control`); the
others get `rate_pps` after every tick's ACKs (`core.on_acks`).
"""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import used
from rlbm_jax.env.tcp.variants import VARIANTS

PACING_OFF, PACING_NS3 = 0, 1  # params.pacing_id (params.PACING_NAMES)
UNPACED = 1 << 20  # what `allowed` returns for a flow the pacer does not hold back


def enabled(params) -> bool:
    """Whether any run these params describe paces (a static Python bool from the
    choices' record, so an unpaced tick leaves the pacing code out): some flow group
    asks for pacing or runs a variant that always paces (BBR)."""
    return (any(name == "pacing" and value != "off" for name, value in params.model_choices)
            or any(v.sets_pacing_rate and used(params, v) for v in VARIANTS))  # (ns-3.37 turns pacing on for BBR)


def paced(sender, params):
    """[F] bool: flows of `sender` pace (their flow group's `pacing`, or their TCP paces
    whatever it says: BBR)."""
    on = params.of_sender(params.pacing_id, params.group_pacing_id, sender) == PACING_NS3
    for i, v in enumerate(VARIANTS):
        if v.sets_pacing_rate and used(params, v):
            on = on | (params.of_sender(params.tcp_id, params.group_tcp_id, sender) == i)
    return on


def max_rate_pps(sender, params):
    """[F] the highest pacing rate of flows of `sender`, in segments per second."""
    bps = params.of_sender(params.max_pacing_rate_bps, params.group_max_pacing_rate_bps, sender)
    return bps / (params.mss_bytes.astype(jnp.float32) * 8.0)


def rate_pps(cwnd, pipe, ssthresh, srtt_s, sender, params):
    """ns-3.37 UpdatePacingRate in segments per second: max(cwnd, pipe) x the slow-start ratio
    (cwnd < ssthresh / 2) or the congestion-avoidance ratio, over sRTT, at most the maximum
    (the maximum where sRTT is not known yet)."""
    ratio = jnp.where(cwnd < ssthresh / 2.0, params.pacing_ss_ratio, params.pacing_ca_ratio)
    top = max_rate_pps(sender, params)
    rate = jnp.maximum(cwnd, pipe) * ratio / jnp.maximum(srtt_s, 1e-9)
    return jnp.where(srtt_s > 0, jnp.minimum(rate, top), top)


def _unpaced_left(next_new, params):
    """[F] int32: segments still to go before pacing starts (the initial window's), given the
    new segments sent so far."""
    iw = params.initial_cwnd_pkts.astype(jnp.int32)
    return jnp.where(params.pace_initial_window, 0, jnp.maximum(iw - next_new, 0))


def _next_offset_s(pace_wait_s, pace_tick, t, tick_s):
    """When the next paced segment may leave, from the start of tick t (0 if already due)."""
    return jnp.maximum(pace_wait_s - (t - pace_tick).astype(jnp.float32) * tick_s, 0.0)


def due(pace_wait_s, pace_tick, next_new, sender, t, params, tick_s):
    """[F] bool: the pacer would let the flow send in tick t (always, for an unpaced flow)."""
    return (~paced(sender, params) | (_unpaced_left(next_new, params) > 0)
            | (_next_offset_s(pace_wait_s, pace_tick, t, tick_s) < tick_s))


def allowed(fl, t, params, tick_s):
    """[F] int32: transmissions the pacer lets each flow make in tick t (`UNPACED` where it
    does not pace)."""
    rel = _next_offset_s(fl.pace_wait_s, fl.pace_tick, t, tick_s)
    n = jnp.where(rel < tick_s, jnp.ceil((tick_s - rel) * fl.pace_rate_pps), 0.0)
    n = jnp.minimum(n, float(UNPACED)).astype(jnp.int32)
    return jnp.where(paced(fl.sender, params), jnp.minimum(_unpaced_left(fl.next_new, params) + n, UNPACED), UNPACED)


def after_send(fl, t, sent, params, tick_s) -> dict:
    """The pacer's fields after the flows sent `sent` [F] segments in tick t: the segments
    past the initial window's left a gap apart from the first one's time."""
    rel = _next_offset_s(fl.pace_wait_s, fl.pace_tick, t, tick_s)
    n = jnp.maximum(sent - jnp.minimum(sent, _unpaced_left(fl.next_new, params)), 0)
    moved = paced(fl.sender, params) & (n > 0)
    wait = rel + n.astype(jnp.float32) / jnp.maximum(fl.pace_rate_pps, 1e-30)
    return {"pace_wait_s": jnp.where(moved, wait, fl.pace_wait_s), "pace_tick": jnp.where(moved, t, fl.pace_tick)}


def on_timeout(fl, fire, t, params) -> dict:
    """An RTO cancels the timer: the retransmission leaves at once."""
    fire = fire & paced(fl.sender, params)
    return {"pace_wait_s": jnp.where(fire, 0.0, fl.pace_wait_s), "pace_tick": jnp.where(fire, t, fl.pace_tick)}
