"""CUBIC as ns-3.37's TcpCubic: beta 0.7, C 0.4, fast convergence, HyStart with ACK-train
and delay detection, no Reno-friendly region.  Like ns-3.37 it counts segments rather
than ACKs (byte counting in slow start, so with delayed ACKs it doubles its window per
round trip where NewReno grows 1.5x), and an ACK that finds cwnd below ssthresh adds all
its segments, so slow start may pass ssthresh by one ACK's segments less one.  Congestion
avoidance is ns-3.37's in whole segments: the target's distance from the origin truncated
to an integer, an integer cnt, a counter of ACKed segments that is never reset and at most
one segment per ACK, and the ACK that ends fast recovery counted in OPEN (it starts the
new epoch and its cumulative advance, taken as the flight at the loss, goes to the
counter, so cwnd often leaves recovery at ssthresh + 1)."""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import OPEN, Fields, Variant


def cubic_cnt(fl, t, params, tick_s):
    """CUBIC's cnt (segments to ACK in congestion avoidance before cwnd grows by one) and
    the epoch bookkeeping, in ns-3.37's whole segments (TcpCubic::Update): the window is
    floor(cwnd), the distance |C (t - K)^3| from the origin is truncated to an integer
    (so the target sits up to a segment closer to the origin, which at a few segments
    per flow brings cwnd back to W_max within about a round trip after a loss), and cnt
    is an integer division.  Returns (cnt, epoch_start, K, origin)."""
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


def cubic_grow(cwnd, bank, segs, calls, cnt):
    """ns-3.37 TcpCubic::IncreaseWindow in congestion avoidance: `segs` more segments
    ACKed by `calls` ACKs go to the counter; each ACK adds at most one segment, when the
    counter reaches cnt (which it then loses).  Returns (cwnd, counter)."""
    bank = bank + segs
    steps = jnp.where(segs > 0, jnp.minimum(jnp.floor(bank.astype(jnp.float32) / cnt), calls), 0.0)
    return cwnd + steps, bank - (steps * cnt).astype(jnp.int32)


class Cubic(Variant):
    def ssthresh(self, fl, flight, params):
        seg = jnp.floor(fl.cwnd)  # ns-3 works on whole segments here
        ss = jnp.maximum(2.0, jnp.floor(seg * params.cubic_beta))
        fc = params.cubic_fast_convergence & (seg < fl.w_max)
        w_max = jnp.where(fc, jnp.floor(seg * (1.0 + params.cubic_beta) / 2.0), seg)  # uint32 in ns-3
        return ss, {"w_max": w_max, "epoch_start": jnp.full_like(fl.epoch_start, -1)}

    def slow_start_extra(self, per_ack):
        return jnp.maximum(per_ack - 1.0, 0.0)

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        cnt, epoch, k, origin = cubic_cnt(fl, t, params, tick_s)
        cwnd, bank = cubic_grow(fl.cwnd, fl.cwnd_cnt, segs, calls, cnt)
        return cwnd, {"cwnd_cnt": bank, "epoch_start": epoch, "cubic_k_s": k, "cubic_origin": origin}

    def on_recovered(self, fl):
        return {"epoch_start": jnp.full_like(fl.epoch_start, -1)}

    def pkts_acked(self, fl, ack, params, tick_s):
        """HyStart (slow start, cwnd >= the low window): a round ends with the ACK of the
        data sent when it began; within it, an ACK train longer than the minimum RTT, or
        (after the first samples) a round's RTT above the minimum by the threshold, ends
        slow start (ssthresh = cwnd)."""
        t = ack.t
        round_over = ack.has & (ack.max_tx >= fl.hs_round_end_tx)
        round_end = jnp.where(round_over, fl.tx_next, fl.hs_round_end_tx)
        round_start = jnp.where(round_over, t, fl.hs_round_start)
        last_ack = jnp.where(round_over, t, fl.hs_last_ack)
        curr = jnp.where(round_over, jnp.inf, fl.hs_curr_rtt_s)
        samples = jnp.where(round_over, 0, fl.hs_samples)
        on = (ack.has & params.hystart & (fl.state == OPEN) & (fl.cwnd < fl.ssthresh)
              & (fl.cwnd >= params.hystart_low_window_pkts) & ~fl.hs_found)
        # ACK-train: ACKs closer than ack_delta.  ACKs in adjacent ticks may be closer than a
        # tick, so with coarse ticks a one-tick gap still counts as a train.
        train_gap = jnp.maximum(1, jnp.floor(params.hystart_ack_delta_s / tick_s)).astype(jnp.int32)
        train = on & ((t - last_ack) <= train_gap)
        last_ack = jnp.where(train, t, last_ack)
        found_train = train & ((t - round_start).astype(jnp.float32) * tick_s > fl.delay_min_s)
        sampling = on & (samples < params.hystart_min_samples)
        curr = jnp.where(sampling, jnp.minimum(curr, ack.rtt_s), curr)
        samples = samples + sampling.astype(jnp.int32)
        thresh = jnp.clip(fl.delay_min_s, params.hystart_delay_min_s, params.hystart_delay_max_s)  # HystartDelayThresh
        found = found_train | (on & ~sampling & (curr > fl.delay_min_s + thresh))
        return jnp.where(found, fl.cwnd, fl.ssthresh), {
            "hs_round_end_tx": round_end, "hs_round_start": round_start, "hs_last_ack": last_ack,
            "hs_curr_rtt_s": curr, "hs_samples": samples, "hs_found": fl.hs_found | found}

    def on_timeout(self, fl, params):
        # ns-3.37 CubicReset on entering LOSS; HyStart starts over
        return {"w_max": jnp.zeros_like(fl.w_max), "epoch_start": jnp.full_like(fl.epoch_start, -1),
                "hs_found": jnp.zeros_like(fl.hs_found), "hs_round_end_tx": fl.tx_next,
                "hs_samples": jnp.zeros_like(fl.hs_samples), "hs_curr_rtt_s": jnp.full_like(fl.hs_curr_rtt_s, jnp.inf)}


VARIANT = Cubic(
    name="cubic", counts_segments=True, native=True, grows_on_recovery_exit=True,
    fields=Fields(
        floats={"w_max": 0.0, "cubic_k_s": 0.0, "cubic_origin": 0.0,
                "hs_curr_rtt_s": float("inf")},  # HyStart: the round's smallest RTT so far
        ints={"epoch_start": -1,  # tick the epoch began, -1 = none
              "hs_round_end_tx": 0,  # HyStart: the round ends when this id is ACKed
              "hs_round_start": 0, "hs_last_ack": 0,  # ticks: the round's start, the train's last ACK
              "hs_samples": 0},  # RTT samples taken this round
        bools={"hs_found": False},  # HyStart ended slow start (until the next RTO)
    ),
)
