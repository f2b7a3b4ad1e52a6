"""Queueing disciplines at the switch, each in its own module behind one protocol
(`base.Discipline`): RED and ARED (`red`), PIE (`pie`), CoDel (`codel`), the agent's
marker (`mark`), FQ-CoDel over the per-flow queues (`fq_codel`) and the plain fair queue
with a cap per flow (`fq`), registered by name in
`registry` (its order gives the ids).  See `base` for the hooks and how a new discipline
is added."""
from rlbm_jax.env.switch.disciplines.base import (Discipline, FlowDeparture, Hits, hits_below, independent_hits,
                                           no_hits)
from rlbm_jax.env.switch.disciplines.registry import (DISCIPLINES, NONE, Chosen, States, by_name, enqueue_flows, flag,
                                               flow_room,
                                               index,
                                               init, names, on_dequeue, on_enqueue, on_tick_end, owners,
                                               switch_among)

__all__ = ["Chosen", "DISCIPLINES", "Discipline", "FlowDeparture", "Hits", "NONE", "States", "by_name", "enqueue_flows",
           "flag", "flow_room", "hits_below", "independent_hits", "index", "init", "names", "no_hits", "on_dequeue", "on_enqueue",
           "on_tick_end", "owners", "switch_among"]
