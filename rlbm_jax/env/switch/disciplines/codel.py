"""CoDel at dequeue, as ns-3.37's CoDelQueueDisc decides, dropping or (with ECN) marking
the head packet as it leaves.  Its state machine, `codel_step`, also runs in each of
FQ-CoDel's per-flow queues (`fq_codel.py`)."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.disciplines.base import Discipline

# ns-3.37 CoDelQueueDisc MinBytes: no drop while less than this is queued
CODEL_MIN_BYTES = 1500.0


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
    broadcast: [P] class FIFOs (`CoDel.on_dequeue`) or one flow queue (`fq_codel`).  The
    control law is interval / sqrt(count) in floating point (ns-3: Linux's integer Newton
    step).  A queue left empty leaves the dropping state."""
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


@struct.dataclass
class CodelState:
    """Per class FIFO, [P] each (`CodelVars`)."""

    codel_first_above_s: jnp.ndarray  # float 0: sojourn below target
    codel_drop_next_s: jnp.ndarray  # float
    codel_dropping: jnp.ndarray  # bool
    codel_count: jnp.ndarray  # int32
    codel_last_count: jnp.ndarray  # int32


@dataclasses.dataclass(frozen=True)
class CoDel(Discipline):
    def init(self, params) -> CodelState:
        P = params.num_classes
        zf, zi = jnp.zeros((P,), jnp.float32), jnp.zeros((P,), jnp.int32)
        return CodelState(codel_first_above_s=zf, codel_drop_next_s=zf, codel_dropping=jnp.zeros((P,), bool),
                          codel_count=zi, codel_last_count=zi)

    def on_dequeue(self, s: CodelState, head_sojourn_s, q_pkts, serving, marking, now_s, params):
        """ns-3.37 CoDelQueueDisc::DoDequeue on the head packet of each class served this
        tick.  At most one decision per class per tick (ns-3 may drop several in one dequeue
        once count is in the thousands); `codel_step`."""
        cv = CodelVars(s.codel_first_above_s, s.codel_drop_next_s, s.codel_dropping, s.codel_count,
                       s.codel_last_count)
        cv, act = codel_step(cv, head_sojourn_s, q_pkts, serving, marking, now_s, params)
        return CodelState(codel_first_above_s=cv.first_above_s, codel_drop_next_s=cv.drop_next_s,
                          codel_dropping=cv.dropping, codel_count=cv.count, codel_last_count=cv.last_count), act


CODEL = CoDel(name="codel")
