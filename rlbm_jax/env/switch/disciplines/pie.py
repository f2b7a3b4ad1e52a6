"""PIE at enqueue, as ns-3.37's PieQueueDisc decides (without the dequeue-rate
estimator), dropping or (with ECN, while its probability is low) marking.  Its drops hit
each packet independently with probability p: a tick's count is Binomial(n, p), spread
evenly over its arrivals (`base.independent_hits`)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.disciplines.base import Discipline, Hits, independent_hits

# PIE's burst states (ns-3.37 PieQueueDisc)
NO_BURST, IN_BURST_PROTECTING, IN_BURST = 0, 1, 2
PIE_BURST_RESET_UPDATES = 100  # calm updates in IN_BURST before the allowance re-arms


@struct.dataclass
class PieState:
    """Per class FIFO, [P] each."""

    pie_p: jnp.ndarray  # float PIE's drop probability
    pie_qdelay_s: jnp.ndarray  # float sojourn of the last packet dequeued
    pie_qdelay_old_s: jnp.ndarray  # float the delay at the last update
    pie_burst_s: jnp.ndarray  # float burst allowance left
    pie_burst_state: jnp.ndarray  # int32 NO_BURST / IN_BURST_PROTECTING / IN_BURST
    pie_burst_reset: jnp.ndarray  # int32 calm updates counted in IN_BURST
    pie_next_s: jnp.ndarray  # float next probability update


def update(s: PieState, now_s, p) -> PieState:
    """PIE's periodic probability update (ns-3.37 PieQueueDisc::CalculateP), from t = 0
    every tupdate: no drops while burst allowance is left; else p moves by a (qdelay -
    target) + b (qdelay - qdelay_old), scaled down while p is small, capped at +0.02 once
    p >= 0.1, decayed by 0.98 when the queue stays empty; the burst allowance runs down,
    and after 100 calm updates in IN_BURST it re-arms."""
    due = now_s >= s.pie_next_s
    qd, old = s.pie_qdelay_s, s.pie_qdelay_old_s
    prob = s.pie_p
    delta = p.pie_a * (qd - p.pie_target_s) + p.pie_b * (qd - old)
    scale = jnp.where(prob < 1e-6, 1 / 2048, jnp.where(prob < 1e-5, 1 / 512, jnp.where(
        prob < 1e-4, 1 / 128, jnp.where(prob < 1e-3, 1 / 32, jnp.where(prob < 1e-2, 1 / 8, jnp.where(
            prob < 0.1, 1 / 2, 1.0))))))
    delta = delta * scale
    delta = jnp.where((prob >= 0.1) & (delta > 0.02), 0.02, delta)
    new_p = prob + delta
    new_p = jnp.where((qd == 0) & (old == 0), new_p * 0.98, new_p)
    new_p = jnp.where(s.pie_burst_s > 0, 0.0, jnp.clip(new_p, 0.0, 1.0))
    burst = jnp.maximum(s.pie_burst_s - p.pie_tupdate_s, 0.0)
    calm = (qd < 0.5 * p.pie_target_s) & (old < 0.5 * p.pie_target_s) & (new_p == 0) & (burst == 0)
    st, reset = s.pie_burst_state, s.pie_burst_reset
    reset = jnp.where(calm & (st == IN_BURST), reset + 1, jnp.where(st == IN_BURST, 0, reset))
    reset = jnp.where(calm & (st == IN_BURST_PROTECTING), 0, reset)
    st = jnp.where(calm & (st == IN_BURST_PROTECTING), IN_BURST, st)
    st = jnp.where((st == IN_BURST) & (reset > PIE_BURST_RESET_UPDATES), NO_BURST, st)
    w = lambda new, cur: jnp.where(due, new, cur)
    return s.replace(pie_p=w(new_p, prob), pie_qdelay_old_s=w(qd, old), pie_burst_s=w(burst, s.pie_burst_s),
                     pie_burst_state=w(st, s.pie_burst_state), pie_burst_reset=w(reset, s.pie_burst_reset),
                     pie_next_s=w(s.pie_next_s + p.pie_tupdate_s, s.pie_next_s))


@dataclasses.dataclass(frozen=True)
class Pie(Discipline):
    def init(self, params) -> PieState:
        zf = jnp.zeros((params.num_classes,), jnp.float32)
        zi = jnp.zeros((params.num_classes,), jnp.int32)
        return PieState(pie_p=zf, pie_qdelay_s=zf, pie_qdelay_old_s=zf, pie_burst_s=zf, pie_burst_state=zi,
                        pie_burst_reset=zi, pie_next_s=zf)

    def on_enqueue(self, s: PieState, arr_c, q_pkts, u, now_s, p):
        """ns-3.37 DropEarly: the first arrival in NO_BURST arms the burst allowance; no drop
        while it lasts, while the delay is low (qdelay_old < target / 2 and p < 0.2) or with
        at most 2 packets queued; else each packet drops with p.  With ECN a decision marks
        an ECT packet while p < pie_mark_threshold."""
        s = update(s, now_s, p)
        arm = (s.pie_burst_state == NO_BURST) & (arr_c > 0)
        s = s.replace(pie_burst_state=jnp.where(arm, IN_BURST_PROTECTING, s.pie_burst_state),
                      pie_burst_s=jnp.where(arm, p.pie_max_burst_s, s.pie_burst_s))
        quiet = ((s.pie_burst_s > 0) | ((s.pie_qdelay_old_s < 0.5 * p.pie_target_s) & (s.pie_p < 0.2))
                 | (q_pkts <= 2))
        prob = jnp.where(quiet, 0.0, s.pie_p)
        first, spacing, count = independent_hits(arr_c, prob, u)
        hits = Hits(first=first, spacing=spacing, count=count, forced=jnp.zeros_like(quiet),
                    may_mark=s.pie_p < p.pie_mark_threshold, syn_p=prob)
        return s, hits

    def on_tick_end(self, s: PieState, last_sojourn_s, served, q_after, now_end_s, params):
        """PIE's delay: the sojourn of the last packet dequeued (this tick's last,
        `last_sojourn_s` [P]), 0 once the queue is empty; kept while nothing leaves."""
        qd = jnp.where(q_after == 0, 0.0, jnp.where(served > 0, last_sojourn_s, s.pie_qdelay_s))
        return s.replace(pie_qdelay_s=qd)


PIE = Pie(name="pie")
