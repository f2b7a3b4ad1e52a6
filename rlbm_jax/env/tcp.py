"""TCP senders: NewReno, CUBIC and DCTCP as in ns-3.37, vectorised over flow slots.

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
States: OPEN, RECOVERY (fast recovery with PRR, ns-3.37's default), LOSS (after RTO),
CWR (ECN, RFC 3168 as ns-3.37: an ACK that moves the cumulative ACK and echoes a CE mark
cuts ssthresh as a loss would (GetSsThresh of the data in flight), PRR brings cwnd down
to it (at least one segment goes out at once), no growth meanwhile, and the state ends,
cwnd = ssthresh, with the ACK of the first packet sent after the cut; losses found in
CWR are retransmitted without a second cut or fast recovery).  The receiver echoes CE
until the sender's next new packet (CWR) reaches it, so a mark on a packet sent after
the cut is the next congestion event.  ns-3.37 also enters CWR from RECOVERY and LOSS on
an echo; here only OPEN does.
NewReno grows per ACK: +1 segment in slow start; in congestion avoidance
max(1, floor(MSS^2 / cwnd)) whole bytes, as ns-3.37 (a little under 1/cwnd).
CUBIC follows ns-3.37 (beta 0.7, C 0.4, fast convergence, HyStart with ACK-train
and delay detection, no Reno-friendly region) and, like ns-3.37, counts segments
rather than ACKs (byte counting in slow start, so with delayed ACKs it doubles
its window per round trip where NewReno grows 1.5x).  Its congestion avoidance is
ns-3.37's in whole segments: the target's distance from the origin truncated to an
integer, an integer cnt, a counter of ACKed segments that is never reset and at most
one segment per ACK, and the ACK that ends fast recovery counted in OPEN.
DCTCP follows ns-3.37's TcpDctcp: Linux Reno's growth (per segment ACKed: +1 in slow
start, +1 per window of segments in congestion avoidance), ECN on with every packet ECT
(SYNs too), and on an echoed mark or a loss ssthresh = (1 - alpha / 2) cwnd, where alpha,
starting at 1, moves by g = 1/16 towards the fraction of segments ACKed with an echo
over each window of data.
After an RTO the sender resends either like ns-3.37 (go-back-N over everything not
yet ACKed or SACKed, in flight or not; the default) or only what was lost
(`rto_recovery="sack"`, as Linux with F-RTO would once it sees the timeout was
spurious).  RTT samples come, as in ns-3.37, only from ACKs that move the cumulative
ACK over data sent once (`rtt_samples`).  Not modelled (documented in DESIGN.md): the
delayed-ACK timer (an odd segment is ACKed with the next, when the pipe empties, or
with a duplicate's ACK).  Lost SYNs are handled where a flow starts (`sim.tick`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

OPEN, RECOVERY, LOSS, CWR = 0, 1, 2, 3
NEWRENO, CUBIC, DCTCP = 0, 1, 2
BIG_PKTS = 1 << 30  # size of a long-lived flow


@struct.dataclass
class FlowState:
    """Flow-slot table; every field has shape [F]."""

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
    state: jnp.ndarray  # int32 OPEN / RECOVERY / LOSS
    prr_delivered: jnp.ndarray  # int32
    prr_out: jnp.ndarray  # int32
    recover_fs: jnp.ndarray  # float32
    srtt_s: jnp.ndarray  # float32
    rttvar_s: jnp.ndarray  # float32
    rto_s: jnp.ndarray  # float32
    rto_deadline: jnp.ndarray  # int32 tick
    da_parity: jnp.ndarray  # int32 delayed-ACK segments held by the receiver
    w_max: jnp.ndarray  # float32 CUBIC
    epoch_start: jnp.ndarray  # int32 tick, -1 = no epoch
    cubic_k_s: jnp.ndarray  # float32
    cubic_origin: jnp.ndarray  # float32
    cwnd_cnt: jnp.ndarray  # int32 CUBIC: segments ACKed in CA toward the next +1 (m_cWndCnt, never reset)
    delay_min_s: jnp.ndarray  # float32, 0 = none yet
    hs_round_end_tx: jnp.ndarray  # int32 HyStart round
    hs_round_start: jnp.ndarray  # int32 tick
    hs_last_ack: jnp.ndarray  # int32 tick
    hs_curr_rtt_s: jnp.ndarray  # float32
    hs_samples: jnp.ndarray  # int32
    hs_found: jnp.ndarray  # bool
    rec_partial: jnp.ndarray  # bool: this RECOVERY episode has had its first partial ACK
    gbn_left: jnp.ndarray  # int32 go-back-N: ghosts neither resent nor ACKed yet
    gbn_ahead: jnp.ndarray  # int32 go-back-N: ghosts resent before their original's ACK
    ecn_recover_tx: jnp.ndarray  # int32 ECN: tx_next at the last window reduction
    dctcp_alpha: jnp.ndarray  # float32 DCTCP: estimated fraction of marked segments
    dctcp_acked: jnp.ndarray  # int32 DCTCP: segments ACKed in the current observation window
    dctcp_ce: jnp.ndarray  # int32 DCTCP: ... of which ACKed with an echoed mark
    dctcp_next_tx: jnp.ndarray  # int32 DCTCP: the window ends when this id is ACKed (0: not started)


FLOAT_FIELDS = ("size_bytes", "start_s", "cwnd", "ssthresh", "recover_fs", "srtt_s", "rttvar_s", "rto_s",
                "w_max", "cubic_k_s", "cubic_origin", "delay_min_s", "hs_curr_rtt_s", "dctcp_alpha")
BOOL_FIELDS = ("active", "hs_found", "rec_partial")
INT_FIELDS = tuple(n for n in FlowState.__dataclass_fields__ if n not in FLOAT_FIELDS)
_COL = {n: i for i, n in enumerate(INT_FIELDS)} | {n: i for i, n in enumerate(FLOAT_FIELDS)}


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
        """Write sub back at slots idx; indices out of range are skipped."""
        return FlowTable(ints=self.ints.at[:, idx].set(sub.ints, mode="drop"),
                         floats=self.floats.at[:, idx].set(sub.floats, mode="drop"))


def pack(fl: FlowState) -> FlowTable:
    ints = jnp.stack([getattr(fl, n).astype(jnp.int32) for n in INT_FIELDS], axis=0)
    floats = jnp.stack([getattr(fl, n).astype(jnp.float32) for n in FLOAT_FIELDS], axis=0)
    return FlowTable(ints=ints, floats=floats)


def unpack(tb: FlowTable) -> FlowState:
    cols = {n: tb.ints[i] for i, n in enumerate(INT_FIELDS)}
    cols.update({n: tb.floats[i] for i, n in enumerate(FLOAT_FIELDS)})
    for n in BOOL_FIELDS:
        cols[n] = cols[n] > 0
    return FlowState(**cols)


def column(tb: FlowTable, name: str):
    """One field of every slot, without unpacking the rest."""
    if name in FLOAT_FIELDS:
        return tb.floats[_COL[name]]
    col = tb.ints[_COL[name]]
    return col > 0 if name in BOOL_FIELDS else col


def unsettled(fl):
    """Transmissions whose fate is open: the RTO timer runs while this is > 0."""
    return fl.outstanding + fl.ghost + fl.retx_out + fl.lost_q + fl.retx_dropped


GO_BACK_N, SACK_ONLY = 0, 1  # params.rto_recovery_id (params.RTO_RECOVERY_NAMES)
RTT_CUMULATIVE, RTT_EVERY_ACK = 0, 1  # params.rtt_samples_id (params.RTT_SAMPLES_NAMES)


def init_flows(num_slots: int) -> FlowState:
    zi = jnp.zeros((num_slots,), jnp.int32)
    zf = jnp.zeros((num_slots,), jnp.float32)
    zb = jnp.zeros((num_slots,), bool)
    return FlowState(
        active=zb, sender=zi, cls=zi, size_pkts=zi, size_bytes=zf, start_s=zf, data_tick=zi,
        next_new=zi, tx_next=zi, acked=zi, cwnd=zf, ssthresh=zf,
        outstanding=zi, undet=zi, undet_tx=zi, lost_q=zi, retx_out=zi, retx_dropped=zi, ghost=zi,
        state=zi, prr_delivered=zi, prr_out=zi, recover_fs=zf, srtt_s=zf,
        rttvar_s=zf, rto_s=zf, rto_deadline=zi, da_parity=zi, w_max=zf, epoch_start=zi - 1,
        cubic_k_s=zf, cubic_origin=zf, cwnd_cnt=zi, delay_min_s=zf, hs_round_end_tx=zi, hs_round_start=zi,
        hs_last_ack=zi, hs_curr_rtt_s=zf + jnp.inf, hs_samples=zi, hs_found=zb, rec_partial=zb,
        gbn_left=zi, gbn_ahead=zi, ecn_recover_tx=zi, dctcp_alpha=zf, dctcp_acked=zi, dctcp_ce=zi,
        dctcp_next_tx=zi,
    )


def start_flow(fl: FlowState, mask, *, sender, cls, size_pkts, size_bytes, start_s, data_tick,
               handshake_rtt_s, params) -> FlowState:
    """Occupy the slots where `mask` [F] is true with a fresh connection (attributes are
    scalars or [F] arrays)."""
    fresh = init_flows(fl.active.shape[0])
    srtt = jnp.asarray(handshake_rtt_s, jnp.float32)
    fresh = fresh.replace(
        active=fresh.active | True, sender=fresh.sender + sender, cls=fresh.cls + cls,
        size_pkts=fresh.size_pkts + size_pkts, size_bytes=fresh.size_bytes + size_bytes,
        start_s=fresh.start_s + start_s, data_tick=fresh.data_tick + data_tick,
        cwnd=fresh.cwnd + params.initial_cwnd_pkts, ssthresh=fresh.ssthresh + 1e9,
        srtt_s=fresh.srtt_s + srtt, rttvar_s=fresh.rttvar_s + srtt / 2,
        rto_s=fresh.rto_s + _rto(srtt, srtt / 2, params),
        dctcp_alpha=fresh.dctcp_alpha + jnp.where(params.tcp_id == DCTCP, 1.0, 0.0),  # DctcpAlphaOnInit
    )
    return jax.tree.map(lambda new, old: jnp.where(mask, new.astype(old.dtype), old), fresh, fl)


def _rto(srtt, rttvar, params):
    rto = srtt + jnp.maximum(params.rto_granularity_s, 4.0 * rttvar)
    return jnp.clip(rto, params.min_rto_s, params.max_rto_s)


def _ticks(seconds, tick_s):
    return jnp.ceil(seconds / tick_s).astype(jnp.int32)


def _loss_ssthresh(fl, flight, params):
    """ssthresh and CUBIC's W_max after a loss or an echoed mark (ns-3.37 GetSsThresh;
    DCTCP: (1 - alpha / 2) cwnd in whole bytes)."""
    reno = jnp.maximum(2.0, flight / 2.0)
    seg = jnp.floor(fl.cwnd)  # ns-3 works on whole segments here
    cub = jnp.maximum(2.0, jnp.floor(seg * params.cubic_beta))
    fc = params.cubic_fast_convergence & (seg < fl.w_max)
    w_max = jnp.where(fc, jnp.floor(seg * (1.0 + params.cubic_beta) / 2.0), seg)  # uint32 in ns-3
    is_cubic = params.tcp_id == CUBIC
    dctcp = jnp.maximum(jnp.floor((1.0 - fl.dctcp_alpha / 2.0) * fl.cwnd * params.mss_bytes) / params.mss_bytes, 1.0)
    return (jnp.where(is_cubic, cub, jnp.where(params.tcp_id == DCTCP, dctcp, reno)),
            jnp.where(is_cubic, w_max, fl.w_max))


def _cubic_cnt(fl, t, params, tick_s):
    """CUBIC's cnt (segments to ACK in congestion avoidance before cwnd grows by one) and
    the epoch bookkeeping, in ns-3.37's whole segments (TcpCubic::Update): the window is
    floor(cwnd), the distance |C (t - K)^3| from the origin is truncated to an integer
    (so the target sits up to a segment closer to the origin, which at a few segments
    per flow brings cwnd back to W_max within about a round trip after a loss), and cnt
    is an integer division."""
    seg = jnp.floor(fl.cwnd)
    new_epoch = fl.epoch_start < 0
    below = fl.w_max > seg
    k_new = jnp.where(below, jnp.cbrt(jnp.maximum(fl.w_max - seg, 0.0) / params.cubic_c), 0.0)
    origin_new = jnp.where(below, fl.w_max, seg)
    epoch = jnp.where(new_epoch, t, fl.epoch_start)
    k = jnp.where(new_epoch, k_new, fl.cubic_k_s)
    origin = jnp.where(new_epoch, origin_new, fl.cubic_origin)
    el = (t - epoch).astype(jnp.float32) * tick_s + fl.delay_min_s - k
    delta = jnp.floor(params.cubic_c * jnp.abs(el) ** 3)
    target = jnp.where(el < 0, origin - delta, origin + delta)
    cnt = jnp.where(target > seg, jnp.floor(seg / jnp.maximum(target - seg, 1.0)), 100.0 * seg)
    cnt = jnp.where((fl.w_max == 0) & (cnt > 20.0), 20.0, cnt)
    cnt = jnp.maximum(cnt, 2.0)
    return cnt, epoch, k, origin


def _cubic_grow(cwnd, bank, segs, calls, cnt):
    """ns-3.37 TcpCubic::IncreaseWindow in congestion avoidance: `segs` more segments
    ACKed by `calls` ACKs go to the counter; each ACK adds at most one segment, when the
    counter reaches cnt (which it then loses).  Returns (cwnd, counter)."""
    bank = bank + segs
    steps = jnp.where(segs > 0, jnp.minimum(jnp.floor(bank.astype(jnp.float32) / cnt), calls), 0.0)
    return cwnd + steps, bank - (steps * cnt).astype(jnp.int32)


def on_acks(fl: FlowState, t, acked, acked_retx, n_dup, max_tx, rtt_s, params, tick_s, spur_acked=None,
            ce_acked=None, ce_max_tx=None) -> FlowState:
    """Apply one tick's ACKs.  All arguments are [F]: transmissions ACKed, of which
    retransmissions, of which duplicate ACKs (a hole below them), the highest id
    ACKed, an RTT sample (valid where acked > 0), the ACKs of spurious
    retransmissions (they acknowledge nothing; each makes the receiver ACK at once), and
    the CE-marked packets among those ACKed with the highest id of them (ECN echo)."""
    has = acked > 0
    is_cubic = params.tcp_id == CUBIC
    is_dctcp = params.tcp_id == DCTCP
    counts_segments = is_cubic | is_dctcp  # growth per segment ACKed, not per ACK

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

    enter = detect & (fl.state == OPEN)
    # ECN: a cumulative ACK echoing a CE mark on a packet sent since the last cut, in OPEN
    ce = jnp.zeros_like(acked) if ce_acked is None else ce_acked
    ce_tx = jnp.full_like(acked, -1) if ce_max_tx is None else ce_max_tx
    enter_cwr = (params.ecn & has & (n_dup < acked) & (ce > 0) & (ce_tx >= fl.ecn_recover_tx)
                 & (fl.state == OPEN) & ~enter)
    cut = enter | enter_cwr
    ss_new, wmax_new = _loss_ssthresh(fl, outstanding.astype(jnp.float32), params)
    ssthresh = jnp.where(cut, ss_new, fl.ssthresh)
    w_max = jnp.where(cut & is_cubic, wmax_new, fl.w_max)
    epoch_start = jnp.where(cut, -1, fl.epoch_start)
    state = jnp.where(enter, RECOVERY, jnp.where(enter_cwr, CWR, fl.state))
    prr_delivered = jnp.where(cut, 0, fl.prr_delivered)
    prr_out = jnp.where(cut, 0, fl.prr_out)
    recover_fs = jnp.where(cut, (outstanding + lost_q).astype(jnp.float32), fl.recover_fs)
    ecn_recover_tx = jnp.where(cut & params.ecn, fl.tx_next, fl.ecn_recover_tx)
    # DCTCP's alpha, after this tick's cut (ns-3 cuts on the echo before PktsAcked): the
    # segments ACKed and those ACKed with an echo add up until the ACK of the data sent
    # before the window began; then alpha += g (fraction - alpha) and a window starts
    d_on = is_dctcp & has
    d_first = fl.dctcp_next_tx == 0
    d_acked, d_ce = fl.dctcp_acked + acked, fl.dctcp_ce + ce
    d_end = d_on & ~d_first & (max_tx >= fl.dctcp_next_tx - 1)
    frac = d_ce.astype(jnp.float32) / jnp.maximum(d_acked, 1).astype(jnp.float32)
    dctcp_alpha = jnp.where(d_end, (1.0 - params.dctcp_g) * fl.dctcp_alpha + params.dctcp_g * frac, fl.dctcp_alpha)
    dctcp_acked = jnp.where(d_on, jnp.where(d_end, 0, d_acked), fl.dctcp_acked)
    dctcp_ce = jnp.where(d_on, jnp.where(d_end, 0, d_ce), fl.dctcp_ce)
    dctcp_next_tx = jnp.where(d_on & (d_first | d_end), fl.tx_next, fl.dctcp_next_tx)

    # ---- window growth in OPEN and LOSS ---------------------------------------
    grow = has & ((state == OPEN) | (state == LOSS)) & ~enter
    # NewReno counts ACKs; ns-3.37's CUBIC counts the segments each ACK covers (byte
    # counting in slow start, m_cWndCnt in congestion avoidance)
    growth = jnp.where(counts_segments, acked, n_acks) - jnp.where(state == OPEN, n_dup, 0)
    growth = jnp.maximum(growth, 0)
    # after an RTO, ACKs of packets above a still-missing one are SACKs: only
    # retransmissions (which fill holes) advance the cumulative ACK then
    holes = (fl.lost_q + fl.retx_out + fl.retx_dropped) > 0
    growth = jnp.where((state == LOSS) & holes, jnp.minimum(growth, acked_retx), growth)
    growth_acks = growth.astype(jnp.float32)
    cwnd = fl.cwnd
    # slow start: NewReno +1 per ACK up to ssthresh, the rest in CA; CUBIC (ns-3.37) adds
    # every segment of an ACK that finds cwnd below ssthresh, so it may pass ssthresh by
    # the segments of one ACK less one (a tick's ACKs taken as equal)
    calls = jnp.maximum(n_acks - jnp.where(state == OPEN, n_dup, 0), 1).astype(jnp.float32)  # non-duplicate ACKs
    per_ack = jnp.ceil(growth_acks / calls)
    room = jnp.maximum(jnp.ceil(ssthresh - cwnd), 0.0) + jnp.where(is_cubic, jnp.maximum(per_ack - 1.0, 0.0), 0.0)
    ss_acks = jnp.where(cwnd < ssthresh, jnp.minimum(growth_acks, room), 0.0)
    ca_acks = growth_acks - ss_acks
    cwnd_ss = cwnd + ss_acks
    # ns-3.37 hands the ACK that ends recovery to CUBIC's IncreaseWindow, in OPEN, after
    # cwnd = ssthresh: it starts the new epoch and its cumulative advance goes to the
    # counter, so cwnd often leaves recovery at ssthresh + 1.  That advance is taken as
    # the flight at the loss, which it is when the episode had one hole (after several,
    # ns-3's is smaller).  A flow grows in CA or leaves recovery, never both in one tick,
    # so one CUBIC update serves both.
    repaired = (lost_q == 0) & (retx_out == 0) & (fl.retx_dropped == 0)
    leave_rec = has & (state == RECOVERY) & repaired
    exit_c = leave_rec & is_cubic
    cwnd_in = jnp.where(exit_c, ssthresh, cwnd_ss)
    cnt_c, ep_c, k_c, or_c = _cubic_cnt(fl.replace(cwnd=cwnd_in, w_max=w_max,
                                                   epoch_start=jnp.where(exit_c, -1, epoch_start),
                                                   delay_min_s=delay_min), t, params, tick_s)
    # ns-3.37 NewReno adds max(1, floor(MSS^2 / cwnd)) bytes per ACK, in integer bytes (its
    # cwnd is a byte count, so cwnd * MSS is whole here): integer division keeps it exact,
    # and vmapped and single runs agree bit for bit
    mss_i = params.mss_bytes.astype(jnp.int32)
    cwnd_bytes = jnp.maximum(jnp.round(cwnd_ss * mss_i.astype(jnp.float32)).astype(jnp.int32), 1)
    inc_reno = jnp.maximum(1, (mss_i * mss_i) // cwnd_bytes).astype(jnp.float32) / mss_i.astype(jnp.float32)
    ca_on = grow & (ca_acks > 0)
    cwnd_cubic, bank = _cubic_grow(cwnd_in, fl.cwnd_cnt,
                                   jnp.where(exit_c, jnp.ceil(recover_fs), ca_acks).astype(jnp.int32),
                                   jnp.where(exit_c, 1.0, calls), cnt_c)
    # DCTCP (ns-3.37 TcpLinuxReno): +1 segment per floor(cwnd) segments ACKed, several per ACK
    w_lr = jnp.maximum(jnp.floor(cwnd_ss), 1.0)
    bank_lr = fl.cwnd_cnt + ca_acks.astype(jnp.int32)
    steps_lr = jnp.floor(bank_lr.astype(jnp.float32) / w_lr)
    cwnd_grown = jnp.where(is_cubic, cwnd_cubic, cwnd_ss + ca_acks * inc_reno)
    cwnd_grown = jnp.where(is_dctcp, cwnd_ss + steps_lr, cwnd_grown)
    cwnd = jnp.where(grow, cwnd_grown, cwnd)
    cwnd_cnt = jnp.where(ca_on & is_cubic, bank, fl.cwnd_cnt)
    cwnd_cnt = jnp.where(ca_on & is_dctcp, bank_lr - (steps_lr * w_lr).astype(jnp.int32), cwnd_cnt)
    epoch_start = jnp.where(ca_on & is_cubic, ep_c, epoch_start)
    cubic_k = jnp.where(ca_on & is_cubic, k_c, fl.cubic_k_s)
    cubic_origin = jnp.where(ca_on & is_cubic, or_c, fl.cubic_origin)

    # ---- HyStart (CUBIC, slow start, cwnd >= low window) ------------------------
    round_over = has & (max_tx >= fl.hs_round_end_tx)
    hs_round_end = jnp.where(round_over, fl.tx_next, fl.hs_round_end_tx)
    hs_round_start = jnp.where(round_over, t, fl.hs_round_start)
    hs_last_ack = jnp.where(round_over, t, fl.hs_last_ack)
    hs_curr = jnp.where(round_over, jnp.inf, fl.hs_curr_rtt_s)
    hs_samples = jnp.where(round_over, 0, fl.hs_samples)
    hs_on = (has & is_cubic & params.hystart & (state == OPEN) & (cwnd < ssthresh)
             & (cwnd >= params.hystart_low_window_pkts) & ~fl.hs_found)
    # ACK-train: ACKs closer than ack_delta.  ACKs in adjacent ticks may be closer than a
    # tick, so with coarse ticks a one-tick gap still counts as a train.
    train_gap = jnp.maximum(1, jnp.floor(params.hystart_ack_delta_s / tick_s)).astype(jnp.int32)
    train = hs_on & ((t - hs_last_ack) <= train_gap)
    hs_last_ack = jnp.where(train, t, hs_last_ack)
    found_train = train & ((t - hs_round_start).astype(jnp.float32) * tick_s > delay_min)
    sampling = hs_on & (hs_samples < params.hystart_min_samples)
    hs_curr = jnp.where(sampling, jnp.minimum(hs_curr, rtt_s), hs_curr)
    hs_samples = hs_samples + sampling.astype(jnp.int32)
    thresh = jnp.clip(delay_min, params.hystart_delay_min_s, params.hystart_delay_max_s)  # ns-3.37 HystartDelayThresh
    found_delay = hs_on & ~sampling & (hs_curr > delay_min + thresh)
    found = found_train | found_delay
    ssthresh = jnp.where(found, cwnd, ssthresh)
    hs_found = fl.hs_found | found

    # ---- PRR in RECOVERY (RFC 6937, ns-3.37 TcpPrrRecovery, SSRB) ---------------
    in_rec = has & ((state == RECOVERY) | (state == CWR))
    prr_delivered = prr_delivered + jnp.where(in_rec, acked, 0)
    pipe = outstanding.astype(jnp.float32)
    prop = jnp.ceil(prr_delivered * ssthresh / jnp.maximum(recover_fs, 1.0)) - prr_out
    ssrb = jnp.minimum(ssthresh - pipe, jnp.maximum(prr_delivered - prr_out, acked).astype(jnp.float32) + 1.0)
    sndcnt = jnp.maximum(jnp.where(pipe > ssthresh, prop, ssrb), 0.0)
    sndcnt = jnp.where(cut, jnp.maximum(sndcnt, 1.0), sndcnt)  # the fast retransmission (CWR: a segment) goes out
    cwnd = jnp.where(in_rec, pipe + sndcnt, cwnd)

    # ---- leaving RECOVERY / LOSS once every hole of the episode is repaired --------
    leave_loss = has & (state == LOSS) & repaired & (ghost == 0)
    # CWR ends with the ACK of a packet sent after the cut (ns-3.37: ack > m_recover)
    leave_cwr = has & (state == CWR) & ~enter_cwr & (max_tx >= ecn_recover_tx)
    cwnd = jnp.where(leave_rec | leave_cwr, ssthresh, cwnd)
    epoch_start = jnp.where(leave_rec | leave_cwr, -1, epoch_start)
    state = jnp.where(leave_rec | leave_loss | leave_cwr, OPEN, state)
    # CUBIC's update on the recovery-ending ACK (above)
    cwnd = jnp.where(exit_c, cwnd_cubic, cwnd)
    cwnd_cnt = jnp.where(exit_c, bank, cwnd_cnt)
    epoch_start = jnp.where(exit_c, ep_c, epoch_start)
    cubic_k = jnp.where(exit_c, k_c, cubic_k)
    cubic_origin = jnp.where(exit_c, or_c, cubic_origin)

    # RTO timer restarts on any ACK that is not a pure duplicate, except that in RECOVERY
    # only the first partial ACK restarts it (ns-3.37, RFC 6582's "impatient" timer): a
    # recovery that outlasts one RTO after its first partial ACK times out.
    progress = has & (n_dup < acked)
    was_rec = fl.state == RECOVERY  # (entering needs OPEN)
    rearm = progress & ~(was_rec & fl.rec_partial & ~leave_rec)
    rto_deadline = jnp.where(rearm, t + _ticks(rto_s, tick_s), fl.rto_deadline)
    rec_partial = jnp.where(enter, False, fl.rec_partial | (was_rec & progress))

    return fl.replace(
        ghost=ghost, outstanding=outstanding, retx_out=retx_out, acked=n_acked, srtt_s=srtt, rttvar_s=rttvar,
        rto_s=rto_s, delay_min_s=delay_min, da_parity=da_parity, lost_q=lost_q, undet=undet,
        ssthresh=ssthresh, w_max=w_max, epoch_start=epoch_start, state=state,
        prr_delivered=prr_delivered, prr_out=prr_out, recover_fs=recover_fs, cwnd=jnp.maximum(cwnd, 1.0),
        cubic_k_s=cubic_k, cubic_origin=cubic_origin, cwnd_cnt=cwnd_cnt, hs_round_end_tx=hs_round_end,
        hs_round_start=hs_round_start, hs_last_ack=hs_last_ack, hs_curr_rtt_s=hs_curr,
        hs_samples=hs_samples, hs_found=hs_found, rto_deadline=rto_deadline, rec_partial=rec_partial,
        gbn_left=gbn_left, gbn_ahead=gbn_ahead, ecn_recover_tx=ecn_recover_tx, dctcp_alpha=dctcp_alpha,
        dctcp_acked=dctcp_acked, dctcp_ce=dctcp_ce, dctcp_next_tx=dctcp_next_tx,
    )


def on_timeouts(fl: FlowState, t, params, tick_s):
    """Retransmission timeouts: cwnd = 1, ssthresh cut, every known or undetected loss
    queued for retransmission, the pipe emptied, RTO doubled; with go-back-N (ns-3.37's
    SetSentListLost) every segment still in flight is marked for resending too, and a
    resend made before an earlier timeout may be made again.  Returns (state, fired [F])."""
    fire = fl.active & (unsettled(fl) > 0) & (t >= fl.rto_deadline) & (t >= fl.data_tick)
    ss_new, wmax_new = _loss_ssthresh(fl, fl.outstanding.astype(jnp.float32), params)
    # ns-3.37 ReTxTimeout: a timeout in LOSS whose head was already retransmitted keeps ssthresh
    ss_new = jnp.where(fl.state == LOSS, fl.ssthresh, ss_new)
    # in flight: what the pipe holds, less undetected drops and lost retransmissions, and
    # less go-back-N resends of ghosts (the ghost already stands for their segment)
    in_flight = fl.outstanding - fl.undet - fl.retx_dropped - fl.gbn_ahead
    ghost = fl.ghost + in_flight
    rto_s = jnp.minimum(fl.rto_s * 2.0, params.max_rto_s)
    w = lambda new, old: jnp.where(fire, new, old)
    fl = fl.replace(
        ssthresh=w(ss_new, fl.ssthresh),
        w_max=w(0.0, fl.w_max),  # ns-3.37 CubicReset on entering LOSS
        cwnd=w(jnp.ones_like(fl.cwnd), fl.cwnd),
        state=w(LOSS, fl.state),
        lost_q=w(fl.lost_q + fl.undet + fl.retx_dropped, fl.lost_q),
        undet=w(0, fl.undet), retx_dropped=w(0, fl.retx_dropped),
        ghost=w(ghost, fl.ghost), outstanding=w(0, fl.outstanding),
        gbn_left=w(jnp.where(params.rto_recovery_id == GO_BACK_N, ghost, 0), fl.gbn_left),
        gbn_ahead=w(0, fl.gbn_ahead),
        rto_s=w(rto_s, fl.rto_s), rto_deadline=w(t + _ticks(rto_s, tick_s), fl.rto_deadline),
        epoch_start=w(-1, fl.epoch_start), delay_min_s=w(0.0, fl.delay_min_s),
        hs_found=w(False, fl.hs_found), hs_round_end_tx=w(fl.tx_next, fl.hs_round_end_tx),
        hs_samples=w(0, fl.hs_samples), hs_curr_rtt_s=w(jnp.inf, fl.hs_curr_rtt_s),
    )
    return fl, fire


def wanted(fl: FlowState, t):
    """Retransmissions of lost packets, go-back-N resends of packets in flight (spurious)
    and new packets each flow's window lets it send now ([F] each), in that order."""
    ready = fl.active & (t >= fl.data_tick)
    allow = jnp.maximum(jnp.floor(fl.cwnd).astype(jnp.int32) - fl.outstanding, 0)
    allow = jnp.where(ready, allow, 0)
    n_retx = jnp.minimum(allow, fl.lost_q)
    n_spur = jnp.minimum(allow - n_retx, fl.gbn_left)
    n_new = jnp.clip(allow - n_retx - n_spur, 0, jnp.maximum(fl.size_pkts - fl.next_new, 0))
    return n_retx, n_spur, n_new


def on_sent(fl: FlowState, t, n_retx, n_spur, n_new, adm, params, tick_s) -> FlowState:
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
        gbn_left=fl.gbn_left - n_spur, gbn_ahead=fl.gbn_ahead + n_spur,
    )


def on_queue_drop(fl: FlowState, drop, is_retx, is_spur, tx_id) -> FlowState:
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
