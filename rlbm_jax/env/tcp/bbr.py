"""BBR (v1) as ns-3.37's TcpBbr (docs/NS3_PACING_BBR.md, section B): STARTUP, DRAIN,
PROBE_BW's gain cycle and PROBE_RTT; a windowed max filter of the delivery rate over
`bbr_bw_window_rounds` rounds and the min-RTT (RTprop) from the smoothed RTT with a
`bbr_rtt_window_s` expiry; the pacing rate (gain x bandwidth, pacing always on) and the
window (gain x bandwidth x RTprop + 3 segments) set after every ACK, as ns-3.37's
CongControl does, in place of the shared sender's growth and PRR.

Rates are in segments per second (ns-3 counts payload bits, the same thing), windows in
segments.  What the shared sender (`core`) still does for a BBR flow: loss detection and
the RECOVERY / LOSS states (whose entry and exit rules here follow ns-3.37's BBR: entry
sets cwnd = pipe + the segments ACKed and starts packet conservation until the next round;
in recovery each newly lost or retransmitted-and-ACKed segment comes off cwnd; the exit
sets cwnd = ssthresh, which in STARTUP is 2^32 - 1 bytes and later wraps around as ns-3.37's
uint32 does), the RTO (cwnd 1 segment, no restore), RTT estimation and pacing's timer.

Approximations (documented in DESIGN.md):
- the delivery rate is sampled once per round trip, over the round (the segments delivered
  between the ACK that starts a round and the ACK of the first segment sent after it, over
  the time between the two), where ns-3.37 takes a sample from every ACK; so the max filter
  sees one sample per round.  ns-3.37's sample-interval bug (docs, B3) is a choice
  (`bbr_rate_sample` "ns-3.37": the interval one ACK gap longer, the gap before the round's
  first ACK);
- no flow is ever app-limited (the flows here always have data while their size lasts);
- the extra-ACKed term is its steady value under ns-3.37's 4096-byte epoch reset: the
  largest run of whole ACKs (of `delayed_ack` segments each) below 4096 bytes;
- PROBE_BW starts at a phase drawn from a hash of the tick and the flow's state, not
  ns-3's random stream (the same six phases, equally likely).
"""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import RECOVERY, Fields, Variant

STARTUP, DRAIN, PROBE_BW, PROBE_RTT = 0, 1, 2, 3
STATE_NAMES = ("startup", "drain", "probe_bw", "probe_rtt")
CYCLE = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # PROBE_BW's pacing gains
MIN_PIPE_PKTS = 4.0  # m_minPipeCwnd (also PROBE_RTT's window)
QUANTA_PKTS = 3.0  # InFlight's 3 x send quantum (1 MSS in ns-3.37)
UINT32_BYTES = 4294967296.0  # ns-3.37 keeps cwnd in uint32 bytes
RATE_SAMPLE_NS3 = 1  # params.bbr_rate_sample_id of "ns-3.37"


def _cycle_gain(idx):
    return jnp.where(idx == 0, CYCLE[0], jnp.where(idx == 1, CYCLE[1], 1.0))


def pacing_gain(state, idx, params):
    """[F] the pacing gain of each flow's BBR state (PROBE_BW: its phase's)."""
    g = jnp.where(state == STARTUP, params.bbr_high_gain, 1.0 / params.bbr_high_gain)
    g = jnp.where(state == PROBE_BW, _cycle_gain(idx), g)
    return jnp.where(state == PROBE_RTT, 1.0, g)


def cwnd_gain(state, params):
    """[F] the window gain: high gain in STARTUP and DRAIN, 2 in PROBE_BW, 1 in PROBE_RTT."""
    g = jnp.where(state == PROBE_BW, 2.0, params.bbr_high_gain)
    return jnp.where(state == PROBE_RTT, 1.0, g)


def in_flight(gain, best_pps, rtprop_s, state, idx):
    """ns-3.37 InFlight(gain) in segments: gain x BDP + 3 quanta (+2 in PROBE_BW's first phase)."""
    extra = jnp.where((state == PROBE_BW) & (idx == 0), 2.0, 0.0)
    return gain * best_pps * rtprop_s + QUANTA_PKTS + extra


def extra_acked_pkts(params):
    """The extra-ACKed window term of ns-3.37 once the pipe is full, in segments: its epoch of
    ACKed bytes restarts when the next ACK would reach 4096 bytes, so with ACKs of `delayed_ack`
    segments it peaks at the largest whole number of ACKs below 4096 bytes."""
    ack = params.delayed_ack.astype(jnp.float32) * params.mss_bytes.astype(jnp.float32)
    return (jnp.ceil(4096.0 / ack) - 1.0) * params.delayed_ack.astype(jnp.float32)


def _ge(a, b):
    """ns-3.37 MaxFilter's a >= b (false where either is 0)."""
    return (a >= b) & (a > 0) & (b > 0)


def max_filter(fl, v, rnd, params):
    """ns-3.37's WindowedFilter<MaxFilter> (three samples stamped with the round count) after
    a sample `v` [F] in round `rnd` [F]: the new (s0, t0, s1, t1, s2, t2)."""
    w = params.bbr_bw_window_rounds
    s0, t0, s1, t1, s2, t2 = fl.bbr_bw0, fl.bbr_bw_t0, fl.bbr_bw1, fl.bbr_bw_t1, fl.bbr_bw2, fl.bbr_bw_t2
    reset = ~fl.bbr_bw_real | _ge(v, s0) | (rnd - t2 > w)
    a = _ge(v, s1)
    b = ~a & _ge(v, s2)
    s1, t1 = jnp.where(a, v, s1), jnp.where(a, rnd, t1)
    s2, t2 = jnp.where(a | b, v, s2), jnp.where(a | b, rnd, t2)
    e1 = rnd - t0 > w
    s0, t0, s1, t1, s2, t2 = (jnp.where(e1, s1, s0), jnp.where(e1, t1, t0), jnp.where(e1, s2, s1),
                              jnp.where(e1, t2, t1), jnp.where(e1, v, s2), jnp.where(e1, rnd, t2))
    e2 = e1 & (rnd - t0 > w)
    s0, t0, s1, t1 = jnp.where(e2, s1, s0), jnp.where(e2, t1, t0), jnp.where(e2, s2, s1), jnp.where(e2, t2, t1)
    c = ~e1 & (s1 == s0) & (rnd - t1 > w // 4)
    s1, t1 = jnp.where(c, v, s1), jnp.where(c, rnd, t1)
    s2, t2 = jnp.where(c, v, s2), jnp.where(c, rnd, t2)
    d = ~e1 & ~c & (s2 == s1) & (rnd - t2 > w // 2)
    s2, t2 = jnp.where(d, v, s2), jnp.where(d, rnd, t2)
    out = [jnp.where(reset, v, s0), jnp.where(reset, rnd, t0), jnp.where(reset, v, s1),
           jnp.where(reset, rnd, t1), jnp.where(reset, v, s2), jnp.where(reset, rnd, t2)]
    return out


def _start_phase(t, fl):
    """PROBE_BW's first phase: one of {0, 3, 4, 5, 6, 7}, from a hash of the tick and the flow."""
    h = (t.astype(jnp.uint32) * jnp.uint32(2654435761) + fl.sender.astype(jnp.uint32) * jnp.uint32(40503)
         + fl.tx_next.astype(jnp.uint32) * jnp.uint32(97))
    r = ((h >> 16) % 6).astype(jnp.int32)
    return jnp.where(r == 0, 0, r + 2)


def _ticks(seconds, tick_s):
    return jnp.ceil(seconds / tick_s).astype(jnp.int32)


class Bbr(Variant):
    def on_start(self, params, fresh):
        # ns-3.37 CongestionStateSet(CA_OPEN) at the end of the handshake: RTprop = the handshake's
        # RTT; the filter's zero value (and best until the first sample) cwnd / RTT truncated to ms
        rtt_ms = jnp.maximum(jnp.floor(fresh.srtt_s * 1000.0), 1.0) / 1000.0
        return {"bbr_rtprop_s": fresh.srtt_s, "bbr_rtprop_tick": fresh.data_tick, "bbr_cycle_tick": fresh.data_tick,
                "bbr_round_tick": fresh.data_tick, "bbr_last_ack_tick": fresh.data_tick, "bbr_prior_cwnd": fresh.cwnd, "bbr_bw0": fresh.cwnd / rtt_ms}

    def initial_rate_pps(self, fresh, params):
        """InitPacingRate: high gain x the filter's zero value."""
        return params.bbr_high_gain * fresh.bbr_bw0

    def ssthresh(self, fl, flight, params):
        return fl.ssthresh, {"bbr_prior_cwnd": _saved(fl)}  # GetSsThresh: SaveCwnd, ssthresh unchanged

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        return fl.cwnd, {}  # (the window is set in `cong_control`)

    def on_timeout(self, fl, params):
        return {"bbr_prior_cwnd": _saved(fl)}

    def cong_control(self, fl, ev, params, tick_s):
        """ns-3.37 TcpBbr::CongControl after one tick's ACKs (with the recovery entry or exit the
        shared sender made on them).  `fl` is the flow after the shared sender's update (its
        state, ssthresh and the cut's saved cwnd; its cwnd is not used), `ev` the `core.CongEvents`.  Returns (cwnd [F], pacing rate [F] pps, own
        fields)."""
        has, t = ev.has, ev.t
        cwnd = ev.cwnd_before
        # recovery entry: cwnd = pipe + the ACKed, packet conservation; the cut's GetSsThresh
        # has saved cwnd (`ssthresh`), and saves it again now in recovery: the larger of the two
        cwnd_rec = ev.pipe + jnp.maximum(ev.acked, 1.0)
        prior = jnp.where(ev.enter_rec, jnp.maximum(fl.bbr_prior_cwnd, cwnd_rec), fl.bbr_prior_cwnd)
        cwnd = jnp.where(ev.enter_rec, cwnd_rec, cwnd)
        conservation = (fl.bbr_conservation | ev.enter_rec) & ~ev.leave_rec
        # recovery exit: RestoreCwnd, then the socket's cwnd = ssthresh (uint32 bytes)
        mss = params.mss_bytes.astype(jnp.float32)
        cwnd = jnp.where(ev.leave_rec, jnp.minimum(fl.ssthresh, (UINT32_BYTES - 1.0) / mss), cwnd)

        # ---- the round and the delivery-rate sample ------------------------------------
        round_start = has & (ev.max_tx >= fl.bbr_round_end_tx)
        # (bbr_rate_sample "ns-3.37": the interval starts one ACK gap early, the gap before the
        # round's first ACK, as ns-3.37's ackElapsed from the previous sample's prior time)
        late = jnp.where(params.bbr_rate_sample_id == RATE_SAMPLE_NS3, fl.bbr_round_gap, 0)
        interval_s = (t - fl.bbr_round_tick + late).astype(jnp.float32) * tick_s
        sample = (ev.delivered - fl.bbr_round_delivered).astype(jnp.float32) / jnp.maximum(interval_s, 1e-9)
        valid = round_start & (interval_s > 0) & (sample > 0)
        rnd = fl.bbr_round + round_start.astype(jnp.int32)
        conservation = conservation & ~round_start
        filt = max_filter(fl, sample, rnd, params)
        s0, t0, s1, t1, s2, t2 = [jnp.where(valid, new, old) for new, old in zip(
            filt, (fl.bbr_bw0, fl.bbr_bw_t0, fl.bbr_bw1, fl.bbr_bw_t1, fl.bbr_bw2, fl.bbr_bw_t2))]
        best = s0
        bw_real = fl.bbr_bw_real | valid
        round_end_tx = jnp.where(round_start, fl.tx_next, fl.bbr_round_end_tx)
        round_tick = jnp.where(round_start, t, fl.bbr_round_tick)
        round_delivered = jnp.where(round_start, ev.delivered, fl.bbr_round_delivered)
        round_gap = jnp.where(round_start, t - fl.bbr_last_ack_tick, fl.bbr_round_gap)
        last_ack_tick = jnp.where(has, t, fl.bbr_last_ack_tick)

        state, idx, cycle_tick = fl.bbr_state, fl.bbr_cycle_idx, fl.bbr_cycle_tick
        rtprop = fl.bbr_rtprop_s
        # ---- PROBE_BW's gain cycle -------------------------------------------------------
        gain = _cycle_gain(idx)
        full = (t - cycle_tick).astype(jnp.float32) * tick_s > rtprop
        adv = jnp.where(gain == 1.0, full,
                        jnp.where(gain > 1.0, full & ((ev.loss > 0)
                                                      | (ev.prior_pipe >= in_flight(gain, best, rtprop, state, idx))),
                                  full | (ev.prior_pipe <= in_flight(1.0, best, rtprop, state, idx))))
        adv = has & (state == PROBE_BW) & adv
        idx = jnp.where(adv, (idx + 1) % len(CYCLE), idx)
        cycle_tick = jnp.where(adv, t, cycle_tick)
        # ---- the full pipe (3 rounds without 25% growth) ---------------------------------
        check = has & ~fl.bbr_filled & round_start
        grew = best >= 1.25 * fl.bbr_full_bw
        full_bw = jnp.where(check & grew, best, fl.bbr_full_bw)
        full_cnt = jnp.where(check, jnp.where(grew, 0, fl.bbr_full_cnt + 1), fl.bbr_full_cnt)
        filled = fl.bbr_filled | (check & (full_cnt >= 3))
        # ---- DRAIN, then PROBE_BW ----------------------------------------------------------
        to_drain = has & (state == STARTUP) & filled
        state = jnp.where(to_drain, DRAIN, state)
        ssthresh = jnp.where(to_drain, jnp.floor(in_flight(1.0, best, rtprop, state, idx) * mss) / mss, fl.ssthresh)
        to_bw = has & (state == DRAIN) & (ev.pipe <= in_flight(1.0, best, rtprop, state, idx))
        state = jnp.where(to_bw, PROBE_BW, state)
        idx = jnp.where(to_bw, _start_phase(t, fl), idx)
        cycle_tick = jnp.where(to_bw, t, cycle_tick)
        # ---- RTprop and PROBE_RTT ------------------------------------------------------------
        expired = (t - fl.bbr_rtprop_tick).astype(jnp.float32) * tick_s > params.bbr_rtt_window_s
        take = has & ((ev.srtt_s <= rtprop) | expired)
        rtprop = jnp.where(take, ev.srtt_s, rtprop)
        rtprop_tick = jnp.where(take, t, fl.bbr_rtprop_tick)
        enter_prt = has & (state != PROBE_RTT) & expired
        prior = jnp.where(enter_prt, jnp.where(fl.state == RECOVERY, jnp.maximum(prior, cwnd), cwnd), prior)
        state = jnp.where(enter_prt, PROBE_RTT, state)
        done = jnp.where(enter_prt, -1, fl.bbr_probe_done_tick)
        in_prt = has & (state == PROBE_RTT)
        arm = in_prt & (done < 0) & (ev.pipe <= MIN_PIPE_PKTS)
        round_done = jnp.where(arm, False, fl.bbr_probe_round_done)
        done = jnp.where(arm, t + _ticks(params.bbr_probe_rtt_s, tick_s), done)
        round_end_tx = jnp.where(arm, fl.tx_next, round_end_tx)
        armed = in_prt & ~arm & (done >= 0)
        round_done = round_done | (armed & round_start)
        leave_prt = armed & round_done & (t > done)
        rtprop_tick = jnp.where(leave_prt, t, rtprop_tick)
        cwnd = jnp.where(leave_prt, jnp.maximum(cwnd, prior), cwnd)
        state = jnp.where(leave_prt, jnp.where(filled, PROBE_BW, STARTUP), state)
        bw_again = leave_prt & filled
        idx = jnp.where(bw_again, _start_phase(t, fl), idx)
        cycle_tick = jnp.where(bw_again, t, cycle_tick)

        # ---- the pacing rate (rises only until the pipe is full) -----------------------------
        # (pacing.max_rate_pps, written out: pacing reads the registry, which holds this module)
        top = params.of_sender(params.max_pacing_rate_bps, params.group_max_pacing_rate_bps, fl.sender) / (mss * 8.0)
        rate = jnp.minimum(pacing_gain(state, idx, params) * best, top)
        rate = jnp.where(has & (filled | (rate > fl.pace_rate_pps)), rate, fl.pace_rate_pps)

        # ---- the window --------------------------------------------------------------------
        acked = ev.acked
        on = has & (acked > 0)
        in_rec = fl.state == RECOVERY
        c_rec = jnp.where(ev.loss > 0, jnp.maximum(cwnd - ev.loss, 1.0), cwnd)
        modulated = in_rec & conservation
        c_rec = jnp.where(conservation, jnp.maximum(c_rec, ev.pipe + acked), c_rec)
        cwnd = jnp.where(on & in_rec, c_rec, cwnd)
        target = (in_flight(cwnd_gain(state, params), best, rtprop, state, idx)
                  + jnp.where(filled, jnp.minimum(extra_acked_pkts(params), best * 0.1), 0.0))
        grown = cwnd + acked
        wrapped = jnp.where(grown * mss >= UINT32_BYTES, (cwnd - UINT32_BYTES / mss) + acked, grown)
        c_full = jnp.minimum(wrapped, target)
        c_grow = jnp.where((cwnd < target) | (ev.delivered.astype(jnp.float32) < params.initial_cwnd_pkts), grown, cwnd)
        c_set = jnp.maximum(jnp.where(filled, c_full, c_grow), MIN_PIPE_PKTS)
        cwnd = jnp.where(on & ~modulated, c_set, cwnd)
        cwnd = jnp.where(state == PROBE_RTT, jnp.minimum(cwnd, MIN_PIPE_PKTS), cwnd)
        own = {
            "bbr_state": state, "bbr_round": rnd, "bbr_round_end_tx": round_end_tx, "bbr_round_tick": round_tick,
            "bbr_round_delivered": round_delivered, "bbr_bw0": s0, "bbr_bw_t0": t0, "bbr_bw1": s1, "bbr_bw_t1": t1,
            "bbr_bw2": s2, "bbr_bw_t2": t2, "bbr_bw_real": bw_real, "bbr_rtprop_s": rtprop,
            "bbr_rtprop_tick": rtprop_tick, "bbr_cycle_idx": idx, "bbr_cycle_tick": cycle_tick,
            "bbr_full_bw": full_bw, "bbr_full_cnt": full_cnt, "bbr_filled": filled, "bbr_prior_cwnd": prior,
            "bbr_probe_done_tick": done, "bbr_round_gap": round_gap, "bbr_last_ack_tick": last_ack_tick, "bbr_probe_round_done": round_done, "bbr_conservation": conservation,
            "ssthresh": ssthresh,
        }
        return cwnd, rate, own


def _saved(fl):
    """SaveCwnd: cwnd, or the larger of it and the saved one in recovery or PROBE_RTT."""
    keep = (fl.state == RECOVERY) | (fl.bbr_state == PROBE_RTT)
    return jnp.where(keep, jnp.maximum(fl.bbr_prior_cwnd, fl.cwnd), fl.cwnd)


VARIANT = Bbr(
    name="bbr", counts_segments=True, sets_pacing_rate=True, optional_columns=True,
    fields=Fields(
        ints={"bbr_state": STARTUP, "bbr_round": 0,
              "bbr_round_end_tx": 0,  # the round ends when this id is ACKed
              "bbr_round_tick": 0, "bbr_round_delivered": 0,  # the round's start: tick, segments delivered
              "bbr_bw_t0": 0, "bbr_bw_t1": 0, "bbr_bw_t2": 0,  # the max filter's samples' rounds
              "bbr_rtprop_tick": 0,  # when RTprop was last taken
              "bbr_cycle_idx": 0, "bbr_cycle_tick": 0,  # PROBE_BW's phase and when it began
              "bbr_full_cnt": 0,  # rounds without 25% growth
              "bbr_probe_done_tick": -1,
              "bbr_last_ack_tick": 0,  # the last tick with ACKs
              "bbr_round_gap": 0},  # ticks between the round's first ACK and the one before  # PROBE_RTT may end after this tick (-1: not armed)
        floats={"bbr_bw0": 0.0, "bbr_bw1": 0.0, "bbr_bw2": 0.0,  # the max filter's samples (segments/s)
                "bbr_rtprop_s": 0.0, "bbr_prior_cwnd": 0.0, "bbr_full_bw": 0.0},
        bools={"bbr_bw_real": False,  # the filter holds a real sample (not the initial zero value)
               "bbr_filled": False, "bbr_probe_round_done": False, "bbr_conservation": False},
    ),
)
