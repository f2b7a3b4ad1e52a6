"""The sender every TCP variant shares, as ns-3.37's TcpSocketBase: ACK processing, loss
detection, fast recovery with PRR, the RTO with go-back-N, RTT estimation, delayed ACKs and
the ECN response, vectorised over flow slots.  The congestion control itself (the window
after a congestion event, its growth, what it learns per ACK) is the registered variant's
(`variant.Variant`, `variants.VARIANTS`).

States: OPEN, RECOVERY (fast recovery with PRR, ns-3.37's default), LOSS (after RTO),
CWR (ECN, RFC 3168 as ns-3.37: an ACK that moves the cumulative ACK and echoes a CE mark
cuts ssthresh as a loss would (the variant's GetSsThresh of the data in flight), PRR
brings cwnd down to it (at least one segment goes out at once), no growth meanwhile, and
the state ends, cwnd = ssthresh, with the ACK of the first packet sent after the cut;
losses found in CWR are retransmitted without a second cut or fast recovery).  The
receiver echoes CE until the sender's next new packet (CWR) reaches it, so a mark on a
packet sent after the cut is the next congestion event.  ns-3.37 also enters CWR from
RECOVERY and LOSS on an echo, and a loss's cut does not stop the echo; only
`ecn_cwr="ns-3.37"` does that, the default enters CWR from OPEN only.
After an RTO the sender resends either like ns-3.37 (go-back-N over everything not
yet ACKed or SACKed, in flight or not; the default) or only what was lost
(`rto_recovery="sack"`, as Linux with F-RTO would once it sees the timeout was
spurious).  RTT samples come, as in ns-3.37, only from ACKs that move the cumulative
ACK over data sent once (`rtt_samples`).  Not modelled (documented in DESIGN.md): the
delayed-ACK timer (an odd segment is ACKed with the next, when the pipe empties, or
with a duplicate's ACK).  Lost SYNs are handled where a flow starts (`sim.tick`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlbm_jax.env.tcp import pacing
from rlbm_jax.env.tcp.flows import _COL, FlowTable, column, init_flows, unsettled
from rlbm_jax.env.tcp.variant import CWR, LOSS, OPEN, RECOVERY, chosen, flag, merge, select, used
from rlbm_jax.env.tcp.variants import VARIANTS

GO_BACK_N, SACK_ONLY = 0, 1  # params.rto_recovery_id (params.RTO_RECOVERY_NAMES)
RTT_CUMULATIVE, RTT_EVERY_ACK = 0, 1  # params.rtt_samples_id (params.RTT_SAMPLES_NAMES)
SACK_CREDIT_NS3 = 1  # params.sack_credit_id of "ns-3.37" (a hole-filling ACK after a timeout credits the SACKed)
RTT_CLOCK_NS3 = 1  # params.rtt_clock_id of "ns-3.37" (a 1 ms timestamp clock, the echo of a delayed ACK's first segment)
REARM_CUMULATIVE = 0  # params.rto_rearm_id of "cumulative" (params.RTO_REARM_NAMES)
PRR_NS3 = 1  # params.prr_id of "ns-3.37" (params.PRR_NAMES)
ECN_CWR_NS3 = 1  # params.ecn_cwr_id of "ns-3.37" (params.ECN_CWR_NAMES)
PRR_SSRB_NS3 = 1  # params.prr_ssrb_id of "ns-3.37" (params.PRR_SSRB_NAMES)


class CongEvents(NamedTuple):
    """A tick's ACKs as a variant that sets its own window and rate (`Variant.cong_control`,
    ns-3.37's CongControl) sees them ([F] each), beside the flow after the shared sender's
    update of them (its state, ssthresh and tx_next)."""

    t: jnp.ndarray  # tick
    has: jnp.ndarray  # bool: ACKs arrived
    acked: jnp.ndarray  # float: transmissions ACKed or SACKed
    loss: jnp.ndarray  # float: ns-3.37's |change in lost|: losses found, and retransmissions ACKed
    prior_pipe: jnp.ndarray  # float: the pipe before these ACKs
    pipe: jnp.ndarray  # float: the pipe after them
    delivered: jnp.ndarray  # int32: transmissions delivered so far
    enter_rec: jnp.ndarray  # bool: fast recovery began on these ACKs
    leave_rec: jnp.ndarray  # bool: fast recovery ended on them
    max_tx: jnp.ndarray  # highest id ACKed
    srtt_s: jnp.ndarray  # the smoothed RTT after them
    cwnd_before: jnp.ndarray  # float: cwnd before them


class AckView(NamedTuple):
    """A tick's ACKs as the variants' `pkts_acked` sees them ([F] each)."""

    t: jnp.ndarray  # tick
    has: jnp.ndarray  # bool: ACKs arrived
    acked: jnp.ndarray  # transmissions ACKed
    max_tx: jnp.ndarray  # highest id ACKed
    ce: jnp.ndarray  # CE-marked packets among those ACKed (echoed)
    rtt_s: jnp.ndarray  # RTT sample (valid where has)


def flow_tcp(sender, params):
    """The TCP variant id (`tcp_id`) of flows of `sender` ([] or [F]): the run's, or with
    several flow groups their group's (sender s is in group s mod flow_groups)."""
    return params.of_sender(params.tcp_id, params.group_tcp_id, sender)


def ect_syns(params):
    """Whether this run's SYNs are ECT (a variant that turns ECN on by itself: DCTCP)."""
    return params.ecn & flag(params.tcp_id, [v.ecn_always for v in VARIANTS])


def loss_ssthresh(fl, flight, params):
    """The variant's ssthresh after a loss or an echoed mark, and its own fields to set
    with the cut."""
    out = _each(variants_of(params), lambda v: v.ssthresh(fl, flight, params))
    tcp_id = flow_tcp(fl.sender, params)
    return select(tcp_id, _part(out, 0)), merge(tcp_id, fl, _part(out, 1))


def _each(variants, fn) -> list:
    """fn(v) for each variant the batch uses (`variants_of`), None for the others."""
    return [None if v is None else fn(v) for v in variants]


def _part(results, i) -> list:
    """The i-th part of each variant's result tuple (None stays None)."""
    return [None if r is None else r[i] for r in results]


def variants_of(params) -> list:
    """The registered variants, each replaced by None where no run of the batch uses it and
    its columns are optional (`Variant.optional_columns`: BBR), so its code is left out."""
    return [v if not v.optional_columns or used(params, v) else None for v in VARIANTS]


def start_flow(fl, mask, *, sender, cls, size_pkts, size_bytes, start_s, data_tick, handshake_rtt_s, params):
    """Occupy the slots where `mask` [F] is true with a fresh connection (attributes are
    scalars or [F] arrays)."""
    fresh = init_flows(fl.active.shape[0])
    srtt = jnp.asarray(handshake_rtt_s, jnp.float32)
    tcp_id = flow_tcp(sender, params)
    fresh = fresh.replace(
        active=fresh.active | True, sender=fresh.sender + sender, cls=fresh.cls + cls,
        size_pkts=fresh.size_pkts + size_pkts, size_bytes=fresh.size_bytes + size_bytes,
        start_s=fresh.start_s + start_s, data_tick=fresh.data_tick + data_tick,
        cwnd=fresh.cwnd + params.initial_cwnd_pkts, ssthresh=fresh.ssthresh + 1e9,
        srtt_s=fresh.srtt_s + srtt, rttvar_s=fresh.rttvar_s + srtt / 2,
        rto_s=fresh.rto_s + _rto(srtt, srtt / 2, params),
    )
    variants = variants_of(params)
    own = merge(tcp_id, fresh, [None if v is None else {n: getattr(fresh, n) + val for n, val in
                                                        v.on_start(params, fresh).items()}
                                for v in variants])  # e.g. DCTCP's alpha = 1 (DctcpAlphaOnInit)
    fresh = fresh.replace(**own)
    if pacing.enabled(params):  # ns-3.37 sets the rate once the handshake's RTT is known
        rate = pacing.rate_pps(fresh.cwnd, 0.0, fresh.ssthresh, srtt, sender, params)
        if any(v is not None and v.sets_pacing_rate for v in variants):  # (BBR: its own initial rate)
            rate = select(tcp_id, _each(variants, lambda v: v.initial_rate_pps(fresh, params) if v.sets_pacing_rate
                                        else rate))
        fresh = fresh.replace(pace_rate_pps=jnp.where(pacing.paced(sender, params), rate, fresh.pace_rate_pps))
    return jax.tree.map(lambda new, old: jnp.where(mask, new.astype(old.dtype), old), fresh, fl)


def _rto(srtt, rttvar, params):
    rto = srtt + jnp.maximum(params.rto_granularity_s, 4.0 * rttvar)
    return jnp.clip(rto, params.min_rto_s, params.max_rto_s)


def _ticks(seconds, tick_s):
    return jnp.ceil(seconds / tick_s).astype(jnp.int32)


def on_acks(fl, t, acked, acked_retx, n_dup, max_tx, rtt_s, params, tick_s, spur_acked=None,
            ce_acked=None, ce_max_tx=None):
    """Apply one tick's ACKs.  All arguments are [F]: transmissions ACKed, of which
    retransmissions, of which duplicate ACKs (a hole below them), the highest id
    ACKed, an RTT sample (valid where acked > 0), the ACKs of spurious
    retransmissions (they acknowledge nothing; each makes the receiver ACK at once), and
    the CE-marked packets among those ACKed with the highest id of them (ECN echo)."""
    has = acked > 0
    tcp_id = flow_tcp(fl.sender, params)

    g = jnp.minimum(acked, fl.ghost)
    # ghosts' ACKs arrive in the order go-back-N resends them: first those already resent
    # (the resend leaves the pipe), then those the resends have not reached (never resent)
    ahead = jnp.minimum(g, fl.gbn_ahead)
    gbn_ahead = fl.gbn_ahead - ahead
    gbn_left = fl.gbn_left - jnp.minimum(g - ahead, fl.gbn_left)
    ghost = fl.ghost - g
    outstanding = fl.outstanding - (acked - g) - ahead
    retx_out = fl.retx_out - acked_retx
    n_acked = fl.acked + acked

    # RTT estimator (RFC 6298, ns-3 RttMeanDeviation), at most one sample per tick: from
    # an ACK that moves the cumulative ACK over data sent once, in OPEN (ns-3.37: Karn's
    # rule, no sample from a SACK or during recovery), or from every ACK ("every-ack")
    cumulative = (params.rtt_samples_id == RTT_CUMULATIVE)
    sample = has & (~cumulative | ((fl.state == OPEN) & (acked - n_dup - acked_retx > 0)))
    first = fl.srtt_s <= 0
    rttvar = jnp.where(first, rtt_s / 2, 0.75 * fl.rttvar_s + 0.25 * jnp.abs(fl.srtt_s - rtt_s))
    srtt = jnp.where(first, rtt_s, 0.875 * fl.srtt_s + 0.125 * rtt_s)
    srtt = jnp.where(sample, srtt, fl.srtt_s)
    rttvar = jnp.where(sample, rttvar, fl.rttvar_s)
    # the timeout is recomputed from the estimate (undoing a backoff) when the cumulative
    # ACK moves (ns-3.37 NewAck), or on every ACK ("every-ack")
    rto_s = jnp.where(jnp.where(cumulative, has & (n_dup < acked), has), _rto(srtt, rttvar, params), fl.rto_s)
    delay_min = jnp.where(has & ((fl.delay_min_s <= 0) | (rtt_s < fl.delay_min_s)), rtt_s, fl.delay_min_s)

    # ACK count the receiver generated (delayed ACK: out-of-order segments are ACKed at once).
    in_order = acked - n_dup
    two = params.delayed_ack == 2
    pairs = (fl.da_parity + in_order) // 2
    parity = (fl.da_parity + in_order) % 2
    spur = jnp.zeros_like(acked) if spur_acked is None else spur_acked
    flush = two & (parity == 1) & ((outstanding + ghost <= 0) | (spur > 0))
    n_acks = jnp.where(two, n_dup + pairs + flush.astype(jnp.int32), acked)
    da_parity = jnp.where(two & ~flush, parity, 0)

    # Loss detection by duplicate ACKs (SACK scoreboard: dupthresh segments above the hole).
    # Drops of data sent during RECOVERY / LOSS are found after it ends (a new episode).
    # (in CWR the holes SACKs reveal are resent within PRR's window, with no second cut)
    detect = (has & (fl.undet > 0) & (max_tx >= fl.undet_tx + params.dupthresh)
              & ((fl.state == OPEN) | (fl.state == CWR)))
    lost_q = fl.lost_q + jnp.where(detect, fl.undet, 0)
    outstanding = outstanding - jnp.where(detect, fl.undet, 0)
    undet = jnp.where(detect, 0, fl.undet)

    # ECN: a cumulative ACK echoing a CE mark on a packet sent since the last cut, in OPEN;
    # or (ecn_cwr "ns-3.37") a cumulative ACK in any state but CWR while the receiver still
    # echoes a mark on a packet sent since the last CWR, which then takes the place of a loss
    # found on the same tick's ACKs, or ends a fast recovery or the LOSS state with a cut
    ce = jnp.zeros_like(acked) if ce_acked is None else ce_acked
    ce_tx = jnp.full_like(acked, -1) if ce_max_tx is None else ce_max_tx
    ns3_cwr = params.ecn_cwr_id == ECN_CWR_NS3
    echo = params.ecn & has & (ce > 0) & (ce_tx >= fl.ecn_recover_tx)
    holes = (fl.lost_q + fl.retx_out + fl.retx_dropped) > 0
    # after an RTO only a retransmission moves the cumulative ACK over a hole (below)
    moves = has & jnp.where((fl.state == LOSS) & holes, acked_retx > 0, n_dup < acked)
    echo_ns3 = (fl.ece_pending | echo) & ns3_cwr  # (ece_pending is only ever set with ECN)
    cwr_ns3 = echo_ns3 & moves & (fl.state != CWR)
    enter = detect & (fl.state == OPEN) & ~cwr_ns3
    enter_cwr = jnp.where(ns3_cwr, cwr_ns3, echo & (n_dup < acked) & (fl.state == OPEN) & ~enter)
    ece_pending = echo_ns3 & ~enter_cwr
    cut = enter | enter_cwr
    ss_new, cut_own = loss_ssthresh(fl, outstanding.astype(jnp.float32), params)
    ssthresh = jnp.where(cut, ss_new, fl.ssthresh)
    state = jnp.where(enter, RECOVERY, jnp.where(enter_cwr, CWR, fl.state))
    prr_delivered = jnp.where(cut, 0, fl.prr_delivered)
    prr_out = jnp.where(cut, 0, fl.prr_out)
    recover_fs = jnp.where(cut, (outstanding + lost_q).astype(jnp.float32), fl.recover_fs)
    ecn_recover_tx = jnp.where(jnp.where(ns3_cwr, enter_cwr, cut) & params.ecn, fl.tx_next, fl.ecn_recover_tx)
    fl_cut = fl.replace(ssthresh=ssthresh, state=state, delay_min_s=delay_min,
                        **{n: jnp.where(cut, v, getattr(fl, n)) for n, v in cut_own.items()})

    # ---- window growth in OPEN and LOSS ---------------------------------------
    grow = has & ((state == OPEN) | (state == LOSS)) & ~enter
    # the variant counts ACKs (ns-3.37 NewReno) or the segments each ACK covers (CUBIC:
    # byte counting in slow start, m_cWndCnt in congestion avoidance)
    variants = variants_of(params)
    counts_segments = flag(tcp_id, [v is not None and v.counts_segments for v in variants])
    growth = jnp.where(counts_segments, acked, n_acks) - jnp.where(state == OPEN, n_dup, 0)
    growth = jnp.maximum(growth, 0)
    # after an RTO, ACKs of packets above a still-missing one are SACKs: only
    # retransmissions (which fill holes) advance the cumulative ACK then
    growth = jnp.where((state == LOSS) & holes, jnp.minimum(growth, acked_retx), growth)
    bank = None
    if chosen(params, "sack_credit", "ns-3.37"):  # some run asks for it (static)
        bank, credit = _sack_bank(fl, acked, acked_retx, n_dup, holes, lost_q, retx_out, undet)
        on = (params.sack_credit_id == SACK_CREDIT_NS3) & (state == LOSS) & counts_segments
        growth = growth + jnp.where(on, credit, 0)
    growth_acks = growth.astype(jnp.float32)
    cwnd = fl.cwnd
    # slow start: +1 per growth unit up to ssthresh, the rest in CA; a variant may pass
    # ssthresh within one ACK (a tick's ACKs taken as equal)
    calls = jnp.maximum(n_acks - jnp.where(state == OPEN, n_dup, 0), 1).astype(jnp.float32)  # non-duplicate ACKs
    per_ack = jnp.ceil(growth_acks / calls)
    room = (jnp.maximum(jnp.ceil(ssthresh - cwnd), 0.0)
            + select(tcp_id, _each(variants, lambda v: v.slow_start_extra(per_ack))))
    ss_acks = jnp.where(cwnd < ssthresh, jnp.minimum(growth_acks, room), 0.0)
    ca_acks = growth_acks - ss_acks
    cwnd_ss = cwnd + ss_acks
    # Congestion avoidance is the variant's.  A variant may also take the ACK that ends
    # fast recovery (ns-3.37 hands it to CUBIC's IncreaseWindow, in OPEN, after cwnd =
    # ssthresh; its cumulative advance is taken as the flight at the loss, which it is when
    # the episode had one hole).  A flow grows in CA or leaves recovery, never both in one
    # tick, so one call serves both.
    repaired = (lost_q == 0) & (retx_out == 0) & (fl.retx_dropped == 0)
    leave_rec = has & (state == RECOVERY) & repaired
    ca_on = grow & (ca_acks > 0)
    grown, grown_own = [], []
    for v in variants:
        if v is None:
            c, own = None, None
        elif v.grows_on_recovery_exit:
            rec_own = v.on_recovered(fl_cut)
            fl_in = fl_cut.replace(cwnd=jnp.where(leave_rec, ssthresh, cwnd_ss),
                                   **{n: jnp.where(leave_rec, x, getattr(fl_cut, n)) for n, x in rec_own.items()})
            segs = jnp.where(leave_rec, jnp.ceil(recover_fs), ca_acks).astype(jnp.int32)
            c, own = v.increase_window(fl_in, segs, jnp.where(leave_rec, 1.0, calls), t, params, tick_s)
        else:
            c, own = v.increase_window(fl_cut.replace(cwnd=cwnd_ss), ca_acks.astype(jnp.int32), calls,
                                       t, params, tick_s)
        grown.append(c)
        grown_own.append(own)
    cwnd_grown = select(tcp_id, grown)
    grown_own = merge(tcp_id, fl_cut, grown_own)
    exit_grow = leave_rec & flag(tcp_id, [v is not None and v.grows_on_recovery_exit for v in variants])
    cwnd = jnp.where(grow, cwnd_grown, cwnd)
    own = {n: jnp.where(ca_on, x, getattr(fl_cut, n)) for n, x in grown_own.items()}

    # ---- what the variant learns from the ACKs (HyStart, DCTCP's alpha) -----------
    fl_mid = fl_cut.replace(cwnd=cwnd, **own)
    ack = AckView(t=t, has=has, acked=acked, max_tx=max_tx, ce=ce, rtt_s=rtt_s)
    learned = _each(variants, lambda v: v.pkts_acked(fl_mid, ack, params, tick_s))
    ssthresh = select(tcp_id, _part(learned, 0))
    own.update(merge(tcp_id, fl_mid, _part(learned, 1)))

    # ---- PRR in RECOVERY (RFC 6937, ns-3.37 TcpPrrRecovery, SSRB) ---------------
    in_rec = has & ((state == RECOVERY) | (state == CWR))
    prr_delivered = prr_delivered + jnp.where(in_rec, acked, 0)
    pipe = outstanding.astype(jnp.float32)
    prop = jnp.ceil(prr_delivered * ssthresh / jnp.maximum(recover_fs, 1.0)) - prr_out
    # ns-3.37 multiplies delivered bytes by ssthresh bytes in 32 unsigned bits (params.PRR_NAMES)
    mss = params.mss_bytes.astype(jnp.float32)
    wrapped = (jnp.floor(prr_delivered * mss).astype(jnp.uint32) * jnp.floor(ssthresh * mss).astype(jnp.uint32))
    prop_ns3 = jnp.floor((jnp.ceil(wrapped.astype(jnp.float32) / jnp.maximum(recover_fs * mss, 1.0))
                          - prr_out * mss) / mss)
    prop = jnp.where(params.prr_id == PRR_NS3, prop_ns3, prop)
    # the slow-start reduction bound (pipe at or below ssthresh): RFC 6937 lets every ACK send
    # what was delivered plus a segment; ns-3.37 (as Linux) adds the segment only on an ACK of
    # retransmitted data in fast recovery (its m_isRetransDataAcked is never set in CWR), and
    # any other ACK sends just what it delivered (params.PRR_SSRB_NAMES)
    grows = (params.prr_ssrb_id != PRR_SSRB_NS3) | ((acked_retx > 0) & (state == RECOVERY))
    limit = jnp.where(grows, jnp.maximum(prr_delivered - prr_out, acked) + 1, acked).astype(jnp.float32)
    ssrb = jnp.minimum(ssthresh - pipe, limit)
    sndcnt = jnp.maximum(jnp.where(pipe > ssthresh, prop, ssrb), 0.0)
    sndcnt = jnp.where(cut, jnp.maximum(sndcnt, 1.0), sndcnt)  # the fast retransmission (CWR: a segment) goes out
    cwnd = jnp.where(in_rec, pipe + sndcnt, cwnd)

    # ---- leaving RECOVERY / LOSS once every hole of the episode is repaired --------
    leave_loss = has & (state == LOSS) & repaired & (ghost == 0)
    # CWR ends with the ACK of a packet sent after the cut (ns-3.37: ack > m_recover)
    leave_cwr = has & (state == CWR) & ~enter_cwr & (max_tx >= ecn_recover_tx)
    recovered = leave_rec | leave_cwr
    cwnd = jnp.where(recovered, ssthresh, cwnd)
    fl_mid = fl_mid.replace(**own)
    rec_own = merge(tcp_id, fl_mid, _each(variants, lambda v: v.on_recovered(fl_mid)))
    own.update({n: jnp.where(recovered, x, getattr(fl_mid, n)) for n, x in rec_own.items()})
    state = jnp.where(leave_rec | leave_loss | leave_cwr, OPEN, state)
    # the variant's update on the recovery-ending ACK (above)
    cwnd = jnp.where(exit_grow, cwnd_grown, cwnd)
    own.update({n: jnp.where(exit_grow, x, own.get(n, getattr(fl_mid, n))) for n, x in grown_own.items()})

    # RTO timer restarts on an ACK that moves the cumulative ACK (ns-3.37's NewAck; after a
    # timeout, ACKs of data above a still-missing hole are SACKs and do not: `moves`), or on
    # any ACK that is not a pure duplicate (params.rto_rearm "any-ack"); in RECOVERY only the
    # first partial ACK restarts it (ns-3.37, RFC 6582's "impatient" timer): a recovery that
    # outlasts one RTO after its first partial ACK times out.
    progress = has & (n_dup < acked)
    was_rec = fl.state == RECOVERY  # (entering needs OPEN)
    rearm = (jnp.where(params.rto_rearm_id == REARM_CUMULATIVE, moves, progress)
             & ~(was_rec & fl.rec_partial & ~leave_rec))
    rto_deadline = jnp.where(rearm, t + _ticks(rto_s, tick_s), fl.rto_deadline)
    rec_partial = jnp.where(enter, False, fl.rec_partial | (was_rec & progress))

    cwnd = jnp.maximum(cwnd, 1.0)
    if pacing.enabled(params):  # ns-3.37 UpdatePacingRate at the end of every ACK
        rate = pacing.rate_pps(cwnd, outstanding.astype(jnp.float32), ssthresh, srtt, fl.sender, params)
        own["pace_rate_pps"] = jnp.where(has & pacing.paced(fl.sender, params), rate, fl.pace_rate_pps)
    controls = [v is not None and v.sets_pacing_rate for v in variants]
    if any(controls):  # ns-3.37 CongControl (BBR): the variant sets the window and the rate itself
        fl_now = fl_mid.replace(ssthresh=ssthresh, state=state, **own)
        ev = CongEvents(
            t=t, has=has, acked=acked.astype(jnp.float32),
            loss=(jnp.where(detect, fl.undet, 0) + acked_retx).astype(jnp.float32),
            prior_pipe=fl.outstanding.astype(jnp.float32), pipe=outstanding.astype(jnp.float32), delivered=n_acked,
            enter_rec=enter, leave_rec=leave_rec, max_tx=max_tx, srtt_s=srtt,
            cwnd_before=fl.cwnd)
        for i, v in enumerate(variants):
            if not controls[i]:
                continue
            c, rate, cc_own = v.cong_control(fl_now, ev, params, tick_s)
            mine = tcp_id == i
            cwnd = jnp.where(mine, c, cwnd)
            ssthresh = jnp.where(mine, cc_own.pop("ssthresh", ssthresh), ssthresh)
            own["pace_rate_pps"] = jnp.where(mine, rate, own.get("pace_rate_pps", fl.pace_rate_pps))
            own.update({n: jnp.where(mine, x, own.get(n, getattr(fl_mid, n))) for n, x in cc_own.items()})
    return fl_cut.replace(
        ghost=ghost, outstanding=outstanding, retx_out=retx_out, acked=n_acked, srtt_s=srtt, rttvar_s=rttvar,
        rto_s=rto_s, da_parity=da_parity, lost_q=lost_q, undet=undet, ssthresh=ssthresh, state=state,
        prr_delivered=prr_delivered, prr_out=prr_out, recover_fs=recover_fs, cwnd=cwnd,
        rto_deadline=rto_deadline, rec_partial=rec_partial, gbn_left=gbn_left, gbn_ahead=gbn_ahead,
        ecn_recover_tx=ecn_recover_tx, ece_pending=ece_pending, **own,
        # (leaving RECOVERY or LOSS the cumulative ACK has passed the episode's holes and what
        # was SACKed above them; a hole found later starts a new count)
        **({} if bank is None else {"sack_bank": jnp.where(leave_rec | leave_loss | leave_cwr, 0, bank)}),
    )


def _sack_bank(fl, acked, acked_retx, n_dup, holes, lost_q, retx_out, undet):
    """`sack_credit` "ns-3.37": the segments delivered above the lowest hole that the
    cumulative ACK has not passed yet (`sack_bank`, SACKed before or after a timeout).  The
    ACK that fills a hole carries the cumulative ACK over those above it, up to the next
    hole (with several holes, a share of the bank per hole filled; all of it once none is
    left), and after a timeout ns-3.37's CUBIC credits slow start with every segment it
    covers (`TcpCubic::IncreaseWindow` takes the cumulative advance): from a spurious
    timeout in fast recovery a window of 1 comes back to the flight at the loss on that
    one ACK.  Returns (the bank after this tick's ACKs, the segments released) [F]."""
    in_loss = (fl.state == LOSS) & holes
    sacked = jnp.where(in_loss, jnp.maximum(acked - acked_retx, 0), n_dup)  # ACKed above a hole this tick
    bank = fl.sack_bank + sacked
    n_holes = jnp.maximum(fl.lost_q + fl.retx_out + fl.retx_dropped, 1)
    left = (lost_q + retx_out + fl.retx_dropped + undet) > 0
    share = jnp.floor(bank.astype(jnp.float32) * acked_retx.astype(jnp.float32) / n_holes).astype(jnp.int32)
    release = jnp.where(acked_retx > 0, jnp.where(left, jnp.minimum(share, bank), bank), 0)
    bank = jnp.where(left, bank - release, 0)
    return bank, release


def on_timeouts(fl, t, params, tick_s):
    """Retransmission timeouts: cwnd = 1, ssthresh cut, every known or undetected loss
    queued for retransmission, the pipe emptied, RTO doubled; with go-back-N (ns-3.37's
    SetSentListLost) every segment still in flight is marked for resending too, and a
    resend made before an earlier timeout may be made again.  Returns (state, fired [F])."""
    fire = fl.active & (unsettled(fl) > 0) & (t >= fl.rto_deadline) & (t >= fl.data_tick)
    ss_new, _ = loss_ssthresh(fl, fl.outstanding.astype(jnp.float32), params)
    # ns-3.37 ReTxTimeout: a timeout in LOSS whose head was already retransmitted keeps ssthresh
    ss_new = jnp.where(fl.state == LOSS, fl.ssthresh, ss_new)
    # in flight: what the pipe holds, less undetected drops and lost retransmissions, and
    # less go-back-N resends of ghosts (the ghost already stands for their segment)
    in_flight = fl.outstanding - fl.undet - fl.retx_dropped - fl.gbn_ahead
    ghost = fl.ghost + in_flight
    rto_s = jnp.minimum(fl.rto_s * 2.0, params.max_rto_s)
    w = lambda new, old: jnp.where(fire, new, old)
    own = merge(flow_tcp(fl.sender, params), fl, _each(variants_of(params), lambda v: v.on_timeout(fl, params)))
    if pacing.enabled(params):
        own.update(pacing.on_timeout(fl, fire, t, params))
    fl = fl.replace(
        ssthresh=w(ss_new, fl.ssthresh),
        cwnd=w(jnp.ones_like(fl.cwnd), fl.cwnd),
        state=w(LOSS, fl.state),
        lost_q=w(fl.lost_q + fl.undet + fl.retx_dropped, fl.lost_q),
        undet=w(0, fl.undet), retx_dropped=w(0, fl.retx_dropped),
        ghost=w(ghost, fl.ghost), outstanding=w(0, fl.outstanding),
        gbn_left=w(jnp.where(params.rto_recovery_id == GO_BACK_N, ghost, 0), fl.gbn_left),
        gbn_ahead=w(0, fl.gbn_ahead),
        rto_s=w(rto_s, fl.rto_s), rto_deadline=w(t + _ticks(rto_s, tick_s), fl.rto_deadline),
        delay_min_s=w(0.0, fl.delay_min_s),
        **{n: w(x, getattr(fl, n)) for n, x in own.items()},
    )
    return fl, fire


def wanted(fl, t, params=None, tick_s=None):
    """Retransmissions of lost packets, go-back-N resends of packets in flight (spurious)
    and new packets each flow's window (and, where it paces, its pacer: `pacing.allowed`)
    lets it send now ([F] each), in that order."""
    ready = fl.active & (t >= fl.data_tick)
    allow = jnp.maximum(jnp.floor(fl.cwnd).astype(jnp.int32) - fl.outstanding, 0)
    if params is not None and pacing.enabled(params):
        allow = jnp.minimum(allow, pacing.allowed(fl, t, params, tick_s))
    allow = jnp.where(ready, allow, 0)
    n_retx = jnp.minimum(allow, fl.lost_q)
    n_spur = jnp.minimum(allow - n_retx, fl.gbn_left)
    n_new = jnp.clip(allow - n_retx - n_spur, 0, jnp.maximum(fl.size_pkts - fl.next_new, 0))
    return n_retx, n_spur, n_new


def on_sent(fl, t, n_retx, n_spur, n_new, adm, params, tick_s):
    """Book this tick's transmissions: n_retx retransmissions, n_spur go-back-N resends,
    then n_new new packets, of which the first `adm` entered the switch and the rest were
    dropped (a dropped resend costs nothing: its original is on its way)."""
    sent = n_retx + n_spur + n_new
    drop_retx = jnp.maximum(n_retx - adm, 0)
    adm_new = jnp.maximum(adm - n_retx - n_spur, 0)
    drop_new = n_new - adm_new
    idle = unsettled(fl) == 0
    first_drop = fl.tx_next + n_retx + n_spur + adm_new
    undet_tx = jnp.where((drop_new > 0) & (fl.undet == 0), first_drop, fl.undet_tx)
    deadline = jnp.where(idle & (sent > 0), t + _ticks(fl.rto_s, tick_s), fl.rto_deadline)
    paced = pacing.after_send(fl, t, sent, params, tick_s) if pacing.enabled(params) else {}
    return fl.replace(
        outstanding=fl.outstanding + sent,
        lost_q=fl.lost_q - n_retx,
        retx_out=fl.retx_out + n_retx - drop_retx,
        retx_dropped=fl.retx_dropped + drop_retx,
        undet=fl.undet + drop_new,
        undet_tx=undet_tx,
        next_new=fl.next_new + n_new,
        tx_next=fl.tx_next + sent,
        prr_out=fl.prr_out + jnp.where((fl.state == RECOVERY) | (fl.state == CWR), sent, 0),
        rto_deadline=deadline,
        gbn_left=fl.gbn_left - n_spur, gbn_ahead=fl.gbn_ahead + n_spur, **paced,
    )


def on_queue_drop(fl, drop, is_retx, is_spur, tx_id):
    """A packet the switch had queued is dropped as it leaves (an AQM at dequeue): where
    `drop` [F], the packet with transmission id `tx_id` [F], a retransmission
    (`is_retx`), a go-back-N resend (`is_spur`: costs nothing, its original is on its
    way) or new data.  The sender learns of it as of a drop at admission: a lost new
    packet is an undetected loss (found by the SACKs above it), a lost retransmission
    waits for the RTO."""
    new = drop & fl.active & ~is_retx & ~is_spur
    retx = drop & fl.active & is_retx
    first = jnp.where(fl.undet > 0, jnp.minimum(fl.undet_tx, tx_id), tx_id)
    return fl.replace(
        undet=fl.undet + new.astype(jnp.int32), undet_tx=jnp.where(new, first, fl.undet_tx),
        retx_out=fl.retx_out - retx.astype(jnp.int32), retx_dropped=fl.retx_dropped + retx.astype(jnp.int32))


def on_queue_drops(tb: FlowTable, n_new, n_retx, first_new_tx) -> FlowTable:
    """`on_queue_drop` for several packets per flow, on the whole table: where a flow slot
    [F] lost n_new new packets (the first with transmission id first_new_tx) and n_retx
    retransmissions from the switch's queue (a per-flow queue's head drops: FQ-CoDel's
    overflow and CoDel).  Only the four loss counters change."""
    col = lambda n: column(tb, n)
    active = col("active")
    new = active & (n_new > 0)
    retx = jnp.where(active, n_retx, 0)
    undet = col("undet")
    first = jnp.where(undet > 0, jnp.minimum(col("undet_tx"), first_new_tx), first_new_tx)
    ints = tb.ints
    for name, val in (("undet", undet + jnp.where(new, n_new, 0)),
                      ("undet_tx", jnp.where(new, first, col("undet_tx"))),
                      ("retx_out", col("retx_out") - retx), ("retx_dropped", col("retx_dropped") + retx)):
        ints = ints.at[_COL[name]].set(val.astype(jnp.int32))
    return FlowTable(ints=ints, floats=tb.floats)
