"""RED (gentle) and Adaptive RED at enqueue, as ns-3.37's RedQueueDisc decides, dropping or
(with ECN) marking.

A tick holds many packet arrivals with one queue length; the per-packet rules become
per-tick ones:
  - the average moves as n packets' updates with the tick-start queue: avg <- (1-w)^n avg
    + (1 - (1-w)^n) q, after an idle period's decay (1-w)^(idle * link packet rate).
  - the count-based drop probability (ns-3's "wait" form p_b / (2 - count p_b)) makes the
    sum of p_b over the packets since the last drop, reaching a threshold uniform in
    [1, 2), the moment of the next drop.  `hit_x` carries that sum, `hit_gap` the
    threshold, so a decision spacing longer than a tick is exact and the probability may
    change between ticks.  Within a tick, drops after the first are spaced by the next
    threshold.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.disciplines.base import Discipline, Hits

# ns-3.37 RedQueueDisc's adaptive max_p (AdaptMaxP): at an arrival at least `interval`
# after its last change, max_p shrinks by beta when the average sits in the lower 40 % of
# [min_th, max_th] and grows by min(alpha, max_p / 4) in the upper 40 %, within
# [bottom, top]; bottom = min(0.01, one mean packet's time x Rtt 0.1 s)
ARED_INTERVAL_S, ARED_ALPHA, ARED_BETA, ARED_TOP, ARED_BOTTOM, ARED_RTT_S = 0.5, 0.01, 0.9, 0.5, 0.01, 0.1
RED_SYN_COUNT = 0  # params.red_syn_id of "count" (params.RED_SYN_NAMES)


@struct.dataclass
class RedState:
    """Per class FIFO, [P] each."""

    red_avg: jnp.ndarray  # float the average queue (packets)
    hit_x: jnp.ndarray  # float sum of p_b over the packets since the last early drop or mark
    hit_gap: jnp.ndarray  # float the sum at which the next one falls
    red_max_p: jnp.ndarray  # float current max_p (ARED adapts it)
    red_idle_s: jnp.ndarray  # float time the queue went empty (-1: not idle)
    ared_next_s: jnp.ndarray  # float next max_p adaptation


def hits_from_progress(x, gap, add, n, next_gap):
    """Decision moments among n packets each adding add (= p) to the progress x, the
    next decision falling where x reaches gap; the gaps after it are next_gap.
    Returns (first position, spacing, count, x after, gap after)."""
    total = x + add * n.astype(jnp.float32)
    hit = (total >= gap) & (add > 0) & (n > 0)
    safe = jnp.maximum(add, 1e-12)
    first = jnp.clip(jnp.ceil((gap - x) / safe).astype(jnp.int32) - 1, 0, jnp.maximum(n - 1, 0))
    rest = jnp.maximum(n - first - 1, 0).astype(jnp.float32) * add
    more = jnp.minimum(jnp.floor(rest / next_gap).astype(jnp.int32), n - first - 1)  # one decision per packet
    count = jnp.where(hit, 1 + more, 0)
    x_new = jnp.where(hit, jnp.maximum(rest - more.astype(jnp.float32) * next_gap, 0.0), total)
    return first, jnp.maximum(next_gap / safe, 1.0), count, x_new, jnp.where(hit, next_gap, gap)


def red_pb(avg, max_p, p):
    """RED's base probability from the average (ns-3 CalculatePNew): linear from min_th
    to max_th up to the current max_p; above max_th (gentle) the line from the initial
    max_p at max_th to 1 at 2 max_th (ns-3 sets it up once, ARED does not move it)."""
    lin = max_p * (avg - p.red_min_th_pkts) / (p.red_max_th_pkts - p.red_min_th_pkts)
    gentle = p.red_max_p + (1.0 - p.red_max_p) * (avg - p.red_max_th_pkts) / p.red_max_th_pkts
    pb = jnp.where(avg < p.red_max_th_pkts, lin, jnp.where(p.red_gentle, gentle, 1.0))
    return jnp.clip(pb, 0.0, 1.0)


def syn_chance(x, pb, p):
    """The chance that a SYN arriving now is dropped early [P].  ns-3.37 counts a SYN as one
    more packet of its drop process (the Wait rule: no drop below count x p_b = 1, then
    p_b / (2 - count x p_b)), so the next drop falls where the progress x (the sum of p_b
    since the last one) reaches a threshold uniform in [1, 2) (`hits_from_progress`).  A
    SYN at progress x is that packet with the chance (x + p_b - max(x, 1)) / (2 - max(x, 1))
    (0 while x + p_b <= 1): on average the data's drop rate, 2 p_b / 3 at a steady p_b
    (params.red_syn "count").  "base" (before 0.5) takes p_b itself."""
    lo = jnp.maximum(x, 1.0)
    hazard = jnp.where(x + pb > 1.0, (x + pb - lo) / jnp.maximum(2.0 - lo, 1e-6), 0.0)
    return jnp.where(p.red_syn_id == RED_SYN_COUNT, jnp.clip(hazard, 0.0, 1.0), pb)


@dataclasses.dataclass(frozen=True)
class Red(Discipline):
    """RED; with `adaptive`, ARED (max_p adapted every ARED_INTERVAL_S)."""

    adaptive: bool = False

    def init(self, params) -> RedState:
        zf = jnp.zeros((params.num_classes,), jnp.float32)
        return RedState(red_avg=zf, hit_x=zf, hit_gap=zf + 1.5, red_max_p=zf + params.red_max_p, red_idle_s=zf,
                        ared_next_s=zf + ARED_INTERVAL_S)

    def on_enqueue(self, s: RedState, arr_c, q_pkts, u, now_s, p):
        """ns-3.37 RedQueueDisc::DoEnqueue: gentle, Wait, hard drops above the gentle region."""
        adaptive = self.adaptive
        ptc = p.bottleneck_rate_bps / p.data_pkt_bits  # link packets per second
        idle = (s.red_idle_s >= 0) & (q_pkts == 0) & (arr_c > 0)
        decay = jnp.where(idle, jnp.maximum(now_s - s.red_idle_s, 0.0) * ptc, 0.0)
        n = arr_c.astype(jnp.float32)
        old = s.red_avg * (1.0 - p.red_weight) ** decay
        avg = old * (1.0 - p.red_weight) ** n + (1.0 - (1.0 - p.red_weight) ** n) * q_pkts.astype(jnp.float32)
        avg = jnp.where(arr_c > 0, avg, s.red_avg)
        # adaptive max_p: checked at every arrival once ARED_INTERVAL_S has passed since the last change
        adapt = adaptive & (arr_c > 0) & (now_s > s.ared_next_s)
        part = 0.4 * (p.red_max_th_pkts - p.red_min_th_pkts)
        bottom = jnp.minimum(ARED_BOTTOM, p.data_pkt_bits * ARED_RTT_S / p.bottleneck_rate_bps)
        down = adapt & (avg < p.red_min_th_pkts + part) & (s.red_max_p > bottom)
        up = adapt & ~down & (avg > p.red_max_th_pkts - part) & (s.red_max_p < ARED_TOP)
        max_p = jnp.where(down, s.red_max_p * ARED_BETA,
                          jnp.where(up, s.red_max_p + jnp.minimum(ARED_ALPHA, s.red_max_p / 4.0), s.red_max_p))
        ared_next = jnp.where(down | up, now_s + ARED_INTERVAL_S, s.ared_next_s)
        top = jnp.where(p.red_gentle, 2.0 * p.red_max_th_pkts, p.red_max_th_pkts)
        active = (avg >= p.red_min_th_pkts) & (q_pkts > 1)
        forced = active & (avg >= top)
        pb = jnp.where(active & ~forced, red_pb(avg, max_p, p), 0.0)
        first, spacing, count, x, gap = hits_from_progress(s.hit_x, s.hit_gap, pb, arr_c, 1.0 + u)
        x = jnp.where(~active | forced, 0.0, x)  # ns-3 restarts its count (m_old = 0)
        # Step marking (the instantaneous queue, weight 1, and max_p 1: DCTCP's K): ns-3 decides each
        # packet on the queue it finds, the tick's earlier arrivals included, so every arrival from
        # the one that finds max_th packets on is hit, even in a tick that began below min_th.
        step = (p.red_weight >= 1.0) & (p.red_max_p >= 1.0) & (arr_c > 0)
        q_f = q_pkts.astype(jnp.float32)
        # (ns-3 decides nothing with fewer than 2 packets queued)
        step_first = jnp.clip(jnp.ceil(jnp.maximum(p.red_max_th_pkts, 2.0) - q_f).astype(jnp.int32), 0, arr_c)
        first = jnp.where(step, step_first, first)
        count = jnp.where(step, jnp.maximum(arr_c - first, 0), count)
        spacing = jnp.where(step, 1.0, spacing)
        hits = Hits(first=first, spacing=spacing, count=jnp.where(forced, 0, count), forced=forced,
                    may_mark=jnp.ones_like(forced), syn_p=jnp.where(forced, 1.0, syn_chance(s.hit_x, pb, p)))
        s = s.replace(red_avg=avg, hit_x=x, hit_gap=gap, red_max_p=max_p, ared_next_s=ared_next)
        return s, hits

    def on_tick_end(self, s: RedState, last_sojourn_s, served, q_after, now_end_s, params):
        """RED remembers when a queue went empty (its average decays over the idle time): at
        the end of the tick in which its last packet left (ns-3.37 marks the queue idle when a
        dequeue finds it empty, and busy at every dequeue of a packet)."""
        still_idle = (s.red_idle_s >= 0) & (served == 0)
        idle_s = jnp.where(q_after == 0, jnp.where(still_idle, s.red_idle_s, now_end_s), -1.0)
        return s.replace(red_idle_s=idle_s)


RED = Red(name="red")
ARED = Red(name="ared", adaptive=True)
