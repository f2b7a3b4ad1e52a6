"""The agent's marker (QueuePilot's action): each arriving packet is CE-marked with
probability `mark_p`, independently (as PIE's drops, `base.independent_hits`), which an
agent sets (knob `mark_prob`, `sim.KNOBS`).  It only marks: the policies that use it
require ECN (every data packet ECT) and it never drops a SYN; packets are dropped only
when the buffer is full."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.disciplines.base import Discipline, Hits, independent_hits


@struct.dataclass
class MarkState:
    mark_p: jnp.ndarray  # [P] float the marking probability of each class (set by an agent)


@dataclasses.dataclass(frozen=True)
class Marker(Discipline):
    def init(self, params) -> MarkState:
        return MarkState(mark_p=jnp.zeros((params.num_classes,), jnp.float32))

    def on_enqueue(self, s: MarkState, arr_c, q_pkts, u, now_s, params):
        first, spacing, count = independent_hits(arr_c, s.mark_p, u)
        hits = Hits(first=first, spacing=spacing, count=count, forced=jnp.zeros(arr_c.shape, bool),
                    may_mark=jnp.ones(arr_c.shape, bool), syn_p=jnp.zeros_like(s.mark_p))
        return s, hits


MARK = Marker(name="mark", needs_ecn=True, knobs=(("mark_prob", "mark_p"),))
