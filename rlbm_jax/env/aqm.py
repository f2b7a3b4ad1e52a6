"""Active queue management at the class FIFOs: RED (gentle), Adaptive RED, PIE and CoDel,
as ns-3.37's queue discs decide, dropping or (with ECN) marking; and "mark", a marker
whose probability an agent sets (QueuePilot's action: each arriving packet is CE-marked
with probability `mark_p`, independently).

An AQM is chosen by the buffer policy (`buffer.Policy.aqm`): the policy's thresholds
stay the hard limit, the AQM decides on packets below it.  Each class FIFO runs its
own instance; the state is a few numbers per class (`AqmState`, [P] each).  Two hooks:

  `on_enqueue` (RED, ARED, PIE, mark): this tick's decisions on the packets arriving in each
     class, as positions in the class's arrival order: `Hits` (the first position, the
     spacing of the next ones and their number; `forced` drops every arrival).
  `on_dequeue` (CoDel): whether the packet at the head of each class FIFO is dropped or
     marked as it leaves (at most one per class per tick); its state machine,
     `codel_step`, also runs in each of FQ-CoDel's per-flow queues (`fqcodel.py`).

A tick holds many packet arrivals with one queue length; the per-packet rules become
per-tick ones:
  - RED's average moves as n packets' updates with the tick-start queue: avg <- (1-w)^n
    avg + (1 - (1-w)^n) q, after an idle period's decay (1-w)^(idle * link packet rate).
  - RED's count-based drop probability (ns-3's "wait" form p_b / (2 - count p_b)) makes
    the sum of p_b over the packets since the last drop, reaching a threshold uniform in
    [1, 2), the moment of the next drop.  `hit_x` carries that sum, `hit_gap` the
    threshold, so a decision spacing longer than a tick is exact and the probability may
    change between ticks.  Within a tick, drops after the first are spaced by the next
    threshold.
  - PIE's drops and the marker's marks hit each packet independently with probability
    p: a tick's count is Binomial(n, p), spread evenly over its arrivals.
Which packets a decision hits follows from the positions (sim._enqueue_arrivals): a hit on
an ECT packet (new data of an ECN flow) is a mark where the AQM marks, else a drop.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

AQM_NAMES = ("none", "red", "ared", "pie", "codel", "mark", "fq-codel")
NONE, RED, ARED, PIE, CODEL, MARK, FQ_CODEL = range(len(AQM_NAMES))

# ns-3.37 RedQueueDisc's adaptive max_p (AdaptMaxP): at an arrival at least `interval`
# after its last change, max_p shrinks by beta when the average sits in the lower 40 % of
# [min_th, max_th] and grows by min(alpha, max_p / 4) in the upper 40 %, within
# [bottom, top]; bottom = min(0.01, one mean packet's time x Rtt 0.1 s)
ARED_INTERVAL_S, ARED_ALPHA, ARED_BETA, ARED_TOP, ARED_BOTTOM, ARED_RTT_S = 0.5, 0.01, 0.9, 0.5, 0.01, 0.1
# ns-3.37 CoDelQueueDisc MinBytes: no drop while less than this is queued
CODEL_MIN_BYTES = 1500.0


@struct.dataclass
class AqmState:
    """Per class FIFO, [P] each."""

    red_avg: jnp.ndarray  # float RED's average queue (packets)
    hit_x: jnp.ndarray  # float sum of p_b over the packets since the last early drop or mark
    hit_gap: jnp.ndarray  # float the sum at which the next one falls
    red_max_p: jnp.ndarray  # float current max_p (ARED adapts it)
    red_idle_s: jnp.ndarray  # float time the queue went empty (-1: not idle)
    ared_next_s: jnp.ndarray  # float next max_p adaptation
    pie_p: jnp.ndarray  # float PIE's drop probability
    pie_qdelay_s: jnp.ndarray  # float sojourn of the last packet dequeued
    pie_qdelay_old_s: jnp.ndarray  # float the delay at the last update
    pie_burst_s: jnp.ndarray  # float burst allowance left
    pie_burst_state: jnp.ndarray  # int32 NO_BURST / IN_BURST_PROTECTING / IN_BURST
    pie_burst_reset: jnp.ndarray  # int32 calm updates counted in IN_BURST
    pie_next_s: jnp.ndarray  # float next probability update
    codel_first_above_s: jnp.ndarray  # float 0: sojourn below target
    codel_drop_next_s: jnp.ndarray  # float
    codel_dropping: jnp.ndarray  # bool
    codel_count: jnp.ndarray  # int32
    codel_last_count: jnp.ndarray  # int32
    mark_p: jnp.ndarray  # float the marker's probability (set by an agent: knob `mark_prob`)


def init_aqm(params) -> AqmState:
    P = params.num_classes
    zf = jnp.zeros((P,), jnp.float32)
    zi = jnp.zeros((P,), jnp.int32)
    return AqmState(
        red_avg=zf, hit_x=zf, hit_gap=zf + 1.5, red_max_p=zf + params.red_max_p, red_idle_s=zf,
        ared_next_s=zf + ARED_INTERVAL_S, pie_p=zf, pie_qdelay_s=zf, pie_qdelay_old_s=zf,
        pie_burst_s=zf, pie_burst_state=zi, pie_burst_reset=zi, pie_next_s=zf,
        codel_first_above_s=zf, codel_drop_next_s=zf, codel_dropping=jnp.zeros((P,), bool), codel_count=zi,
        codel_last_count=zi, mark_p=zf)


class Hits(NamedTuple):
    """An enqueue AQM's decisions on this tick's arrivals of each class, [P] each.  Hit i
    (i < count) falls on the packet at position first + floor(i * spacing) of the class's
    arrival order."""
    first: jnp.ndarray  # int32
    spacing: jnp.ndarray  # float packets between hits after the first
    count: jnp.ndarray  # int32
    forced: jnp.ndarray  # bool every arrival is dropped (RED above its top threshold)
    may_mark: jnp.ndarray  # bool a hit on an ECT packet marks it (else every hit drops)
    syn_p: jnp.ndarray  # float the chance that a SYN arriving now is dropped


def hits_below(limit, hits: Hits):
    """Per class, how many hits fall on positions < limit ([P] or [E, P] int)."""
    lim = (limit - hits.first).astype(jnp.float32)
    n = jnp.ceil(lim / jnp.maximum(hits.spacing, 1e-6)).astype(jnp.int32)
    return jnp.where(lim > 0, jnp.clip(n, 0, hits.count), 0)


def _hits_from_progress(x, gap, add, n, next_gap):
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


BINOMIAL_EXACT_MAX = 64  # arrivals per tick up to which the count is drawn exactly


def _independent_hits(n, prob, u):
    """Every one of a tick's n arrivals hit with probability prob, independently (PIE's
    drops, the marker's marks): the count is Binomial(n, prob), drawn by inverse CDF from u
    (exact up to BINOMIAL_EXACT_MAX arrivals, a normal approximation above), and the hits
    are spread evenly over the arrival order from an offset drawn from u's low bits.
    Memoryless, so nothing carries to the next tick.  Returns (first, spacing, count)."""
    n = n.astype(jnp.int32)
    p = jnp.clip(prob, 0.0, 1.0)
    k = jnp.arange(BINOMIAL_EXACT_MAX + 1, dtype=jnp.float32)
    nf = n.astype(jnp.float32)[..., None]
    pp = p[..., None]
    logpmf = (jax.lax.lgamma(nf + 1.0) - jax.lax.lgamma(k + 1.0) - jax.lax.lgamma(jnp.maximum(nf - k, 0.0) + 1.0)
              + k * jnp.log(jnp.maximum(pp, 1e-30)) + (nf - k) * jnp.log(jnp.maximum(1.0 - pp, 1e-30)))
    pmf = jnp.where(k <= nf, jnp.exp(logpmf), 0.0)
    exact = jnp.sum(jnp.cumsum(pmf, axis=-1) < u[..., None], axis=-1).astype(jnp.int32)
    z = jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * jnp.clip(u, 1e-6, 1 - 1e-6) - 1.0)
    approx = jnp.round(n * p + z * jnp.sqrt(n * p * (1.0 - p))).astype(jnp.int32)
    count = jnp.where(n <= BINOMIAL_EXACT_MAX, exact, approx)
    count = jnp.where(p >= 1.0, n, jnp.where(p <= 0.0, 0, jnp.clip(count, 0, n)))
    spacing = n.astype(jnp.float32) / jnp.maximum(count, 1).astype(jnp.float32)
    offset = jnp.mod(u * 4096.0, 1.0)  # the uniform's low bits
    first = jnp.clip(jnp.floor(offset * spacing).astype(jnp.int32), 0, jnp.maximum(n - 1, 0))
    return first, jnp.maximum(spacing, 1.0), count


def _red_pb(avg, max_p, p):
    """RED's base probability from the average (ns-3 CalculatePNew): linear from min_th
    to max_th up to the current max_p; above max_th (gentle) the line from the initial
    max_p at max_th to 1 at 2 max_th (ns-3 sets it up once, ARED does not move it)."""
    lin = max_p * (avg - p.red_min_th_pkts) / (p.red_max_th_pkts - p.red_min_th_pkts)
    gentle = p.red_max_p + (1.0 - p.red_max_p) * (avg - p.red_max_th_pkts) / p.red_max_th_pkts
    pb = jnp.where(avg < p.red_max_th_pkts, lin, jnp.where(p.red_gentle, gentle, 1.0))
    return jnp.clip(pb, 0.0, 1.0)


def _red(s: AqmState, arr_c, q_pkts, u, now_s, p, adaptive):
    """RED at enqueue (ns-3.37 RedQueueDisc::DoEnqueue, gentle, Wait, hard drops above the
    gentle region), with ARED's max_p adaptation when `adaptive`."""
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
    pb = jnp.where(active & ~forced, _red_pb(avg, max_p, p), 0.0)
    first, spacing, count, x, gap = _hits_from_progress(s.hit_x, s.hit_gap, pb, arr_c, 1.0 + u)
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
                may_mark=jnp.ones_like(forced), syn_p=jnp.where(forced, 1.0, pb))
    s = s.replace(red_avg=avg, hit_x=x, hit_gap=gap, red_max_p=max_p, ared_next_s=ared_next)
    return s, hits


# PIE's burst states (ns-3.37 PieQueueDisc)
NO_BURST, IN_BURST_PROTECTING, IN_BURST = 0, 1, 2
PIE_BURST_RESET_UPDATES = 100  # calm updates in IN_BURST before the allowance re-arms


def _pie_update(s: AqmState, now_s, p):
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


def _pie(s: AqmState, arr_c, q_pkts, u, now_s, p):
    """PIE at enqueue (ns-3.37 DropEarly): the first arrival in NO_BURST arms the burst
    allowance; no drop while it lasts, while the delay is low (qdelay_old < target / 2
    and p < 0.2) or with at most 2 packets queued; else each packet drops with p.  With
    ECN a decision marks an ECT packet while p < pie_mark_threshold."""
    s = _pie_update(s, now_s, p)
    arm = (s.pie_burst_state == NO_BURST) & (arr_c > 0)
    s = s.replace(pie_burst_state=jnp.where(arm, IN_BURST_PROTECTING, s.pie_burst_state),
                  pie_burst_s=jnp.where(arm, p.pie_max_burst_s, s.pie_burst_s))
    quiet = ((s.pie_burst_s > 0) | ((s.pie_qdelay_old_s < 0.5 * p.pie_target_s) & (s.pie_p < 0.2))
             | (q_pkts <= 2))
    prob = jnp.where(quiet, 0.0, s.pie_p)
    first, spacing, count = _independent_hits(arr_c, prob, u)
    hits = Hits(first=first, spacing=spacing, count=count, forced=jnp.zeros_like(quiet),
                may_mark=s.pie_p < p.pie_mark_threshold, syn_p=prob)
    return s, hits


def _mark(s: AqmState, arr_c, u):
    """The agent's marker (QueuePilot): every arriving packet is marked with probability
    mark_p, independently (as PIE's drops: `_independent_hits`).
    It only marks: the policies that use it require ECN (every data packet ECT) and it
    never drops a SYN; packets are dropped only when the buffer is full."""
    first, spacing, count = _independent_hits(arr_c, s.mark_p, u)
    hits = Hits(first=first, spacing=spacing, count=count, forced=jnp.zeros(arr_c.shape, bool),
                may_mark=jnp.ones(arr_c.shape, bool), syn_p=jnp.zeros_like(s.mark_p))
    return s, hits


def on_enqueue(s: AqmState, aqm_id, arr_c, q_pkts, u, now_s, params):
    """The enqueue AQM's decisions on this tick's arrivals arr_c [P] at queues q_pkts [P]
    (u [P] uniforms).  Returns (state, Hits); no hits for the other AQMs."""
    none = Hits(first=jnp.zeros_like(arr_c), spacing=jnp.ones_like(s.red_avg), count=jnp.zeros_like(arr_c),
                forced=jnp.zeros(arr_c.shape, bool), may_mark=jnp.zeros(arr_c.shape, bool),
                syn_p=jnp.zeros_like(s.red_avg))
    branches = [
        lambda s: (s, none),
        lambda s: _red(s, arr_c, q_pkts, u, now_s, params, False),
        lambda s: _red(s, arr_c, q_pkts, u, now_s, params, True),
        lambda s: _pie(s, arr_c, q_pkts, u, now_s, params),
        lambda s: (s, none),  # CoDel acts at dequeue
        lambda s: _mark(s, arr_c, u),
        lambda s: (s, none),  # FQ-CoDel: per-flow queues (fqcodel.py), nothing at the class FIFOs
    ]
    return jax.lax.switch(aqm_id, branches, s)


def on_idle(s: AqmState, aqm_id, q_after, served, now_end_s):
    """RED remembers when a queue went empty (its average decays over the idle time): at
    the end of the tick in which its last packet left (ns-3.37 marks the queue idle when a
    dequeue finds it empty, and busy at every dequeue of a packet)."""
    red = (aqm_id == RED) | (aqm_id == ARED)
    still_idle = (s.red_idle_s >= 0) & (served == 0)
    idle_s = jnp.where(q_after == 0, jnp.where(still_idle, s.red_idle_s, now_end_s), -1.0)
    return s.replace(red_idle_s=jnp.where(red, idle_s, s.red_idle_s))


def _control_law(t, count, p):
    return t + p.codel_interval_s / jnp.sqrt(jnp.maximum(count, 1).astype(jnp.float32))


class CodelVars(NamedTuple):
    """CoDel's state machine (ns-3.37 CoDelQueueDisc), one entry per queue it runs on."""
    first_above_s: jnp.ndarray  # float 0: sojourn below target
    drop_next_s: jnp.ndarray  # float
    dropping: jnp.ndarray  # bool
    count: jnp.ndarray  # int32
    last_count: jnp.ndarray  # int32


def codel_step(s: CodelVars, head_sojourn_s, q_pkts, serving, marking, now_s, p):
    """One CoDel decision on the head packet of each queue that is served (`serving`), whose
    sojourn is head_sojourn_s and behind which q_pkts - 1 packets wait; `marking`: a
    decision marks it (ECT, ECN on) rather than drops it.  Returns (state, act).  Shapes
    broadcast: [P] class FIFOs (`on_dequeue`) or one flow queue (`fqcodel`).  The control
    law is interval / sqrt(count) in floating point (ns-3: Linux's integer Newton step).  A
    queue left empty leaves the dropping state."""
    wire_bytes = p.mss_bytes + 52.0
    left_bytes = (q_pkts - 1).astype(jnp.float32) * wire_bytes
    below = (head_sojourn_s < p.codel_target_s) | (left_bytes < CODEL_MIN_BYTES)
    first_above = jnp.where(below, 0.0, jnp.where(s.first_above_s == 0, now_s + p.codel_interval_s,
                                                  s.first_above_s))
    ok = ~below & (s.first_above_s != 0) & (now_s > s.first_above_s)
    dropping = s.dropping
    # in the dropping state: leave it when the sojourn is fine, else act at drop_next
    act_in = dropping & ok & (now_s >= s.drop_next_s)
    count_in = s.count + act_in.astype(jnp.int32)
    # the next one: from drop_next after a drop, from now after a mark
    next_in = jnp.where(act_in, _control_law(jnp.where(marking, now_s, s.drop_next_s), count_in, p),
                        s.drop_next_s)
    # entering the dropping state
    enter = ~dropping & ok
    delta = s.count - s.last_count
    recent = (now_s - s.drop_next_s) < 16.0 * p.codel_interval_s
    count_en = jnp.where((delta > 1) & recent, delta, 1)
    act = serving & (act_in | enter)
    upd = lambda new, old: jnp.where(serving, new, old)
    new = CodelVars(
        first_above_s=upd(first_above, s.first_above_s),
        dropping=upd(jnp.where(dropping, ok, enter), dropping) & (q_pkts > 0),
        count=upd(jnp.where(enter, count_en, count_in), s.count),
        last_count=upd(jnp.where(enter, count_en, s.last_count), s.last_count),
        drop_next_s=upd(jnp.where(enter, _control_law(now_s, count_en, p), next_in), s.drop_next_s),
    )
    return new, act


def on_dequeue(s: AqmState, aqm_id, head_sojourn_s, q_pkts, serving, marking, now_s, params):
    """CoDel (ns-3.37 CoDelQueueDisc::DoDequeue) on the head packet of each class that is
    served this tick (`serving` [P]), whose sojourn is head_sojourn_s [P] and behind which
    q_pkts - 1 packets wait; `marking` [P]: a decision marks it (ECT, ECN on) rather than
    drops it.  Returns (state, act [P] bool).  At most one decision per class per tick
    (ns-3 may drop several in one dequeue once count is in the thousands); `codel_step`."""
    cv = CodelVars(s.codel_first_above_s, s.codel_drop_next_s, s.codel_dropping, s.codel_count,
                   s.codel_last_count)
    cv, act = codel_step(cv, head_sojourn_s, q_pkts, serving, marking, now_s, params)
    new = s.replace(codel_first_above_s=cv.first_above_s, codel_drop_next_s=cv.drop_next_s,
                    codel_dropping=cv.dropping, codel_count=cv.count, codel_last_count=cv.last_count)
    is_codel = aqm_id == CODEL
    new = jax.tree.map(lambda a, b: jnp.where(is_codel, a, b), new, s)
    return new, act & is_codel


def pie_measure(s: AqmState, aqm_id, last_sojourn_s, served, q_after):
    """PIE's delay (ns-3.37, without the dequeue-rate estimator): the sojourn of the
    last packet dequeued (this tick's last, `last_sojourn_s` [P]), 0 once the queue is
    empty; kept while nothing leaves."""
    qd = jnp.where(q_after == 0, 0.0, jnp.where(served > 0, last_sojourn_s, s.pie_qdelay_s))
    return s.replace(pie_qdelay_s=jnp.where(aqm_id == PIE, qd, s.pie_qdelay_s))
