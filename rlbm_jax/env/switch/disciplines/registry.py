"""The discipline registry: a discipline's position in `DISCIPLINES` is its id, the value
`buffer.aqm_id(params)` gives for a run (its buffer policy names it, `buffer.Policy.aqm`).

The switch keeps every registered discipline's state (`States`, one entry per discipline
under its `key`: `state.aqm.red`, `state.aqm.mark.mark_p`, ...) and each run uses the one
its id names.  The hooks are dispatched with `lax.switch` over the registry: each branch
calls one discipline's hook on its own entry and leaves the others as they are, so a
batch of runs with different disciplines is one `vmap`.  The tick passes `Chosen`: the run's
id and, static, the ids its batch can have; only those branches are traced (under `vmap` a
switch computes every branch it holds).  `buffer.chosen_discipline` narrows it only to
"none", for a batch whose policies run no discipline (it says why not further).

A new discipline is one module (`base.Discipline`) and its line here (with its import).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import GetAttrKey

from rlbm_jax.env.switch import flowqueue
from rlbm_jax.env.switch.disciplines import codel, fq, fq_codel, mark, pie, red
from rlbm_jax.env.switch.disciplines.base import Discipline, FlowDeparture, Hits

NONE = Discipline(name="none")  # the policy's thresholds alone
DISCIPLINES = (NONE, red.RED, red.ARED, pie.PIE, codel.CODEL, mark.MARK, fq_codel.FQ_CODEL, fq.FQ)


def names() -> tuple:
    """The registered disciplines' names, in id order."""
    return tuple(d.name for d in DISCIPLINES)


def index(name: str) -> int:
    """The id of the discipline called `name` (ValueError naming the choices otherwise)."""
    return names().index(by_name(name).name)


def by_name(name: str) -> Discipline:
    """The registered discipline called `name` (ValueError naming the choices otherwise)."""
    for d in DISCIPLINES:
        if d.name == name:
            return d
    raise ValueError(f"unknown aqm {name!r}; registered: {', '.join(names())}")


class States:
    """Every registered discipline's own state, one entry per discipline under its `key`
    in registry order (`states.red`, `states.fq_codel`); a pytree whose leaves are named
    by the entries (`aqm_red_red_avg`, as the native backend's layout names them)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: dict):
        object.__setattr__(self, "_entries", dict(entries))

    def __getattr__(self, key):
        try:
            return object.__getattribute__(self, "_entries")[key]
        except KeyError:
            raise AttributeError(f"no discipline with key {key!r}; registered: "
                                 f"{', '.join(object.__getattribute__(self, '_entries'))}") from None

    def __setattr__(self, key, value):
        raise AttributeError("States is immutable: use .replace")

    def __getitem__(self, key):
        return self._entries[key]

    def keys(self):
        return self._entries.keys()

    def replace(self, **entries) -> "States":
        """A copy with the named entries replaced."""
        unknown = set(entries) - set(self._entries)
        if unknown:
            raise AttributeError(f"no discipline with key {', '.join(sorted(unknown))}")
        return States({**self._entries, **entries})

    def __repr__(self):
        return f"States({', '.join(f'{k}={v!r}' for k, v in self._entries.items())})"


jax.tree_util.register_pytree_with_keys(
    States,
    lambda s: ([(GetAttrKey(k), v) for k, v in s._entries.items()], tuple(s._entries)),
    lambda keys, children: States(dict(zip(keys, children))),
    lambda s: (list(s._entries.values()), tuple(s._entries)),
)


def init(params) -> States:
    """Every registered discipline's state at t = 0."""
    return States({d.key: d.init(params) for d in DISCIPLINES})


class Chosen(NamedTuple):
    """A run's discipline as the tick dispatches on it: `id`, its registry id (traced), and
    `among`, the ids any run of the batch can have (static, sorted; None: any registered
    one).  The hooks take a `Chosen` or a bare id (any registered discipline)."""
    id: Any
    among: tuple | None = None


def _unpack(discipline) -> tuple:
    return (discipline.id, discipline.among) if isinstance(discipline, Chosen) else (discipline, None)


def switch_among(index, among, branches, *operands):
    """`lax.switch(index, branches, *operands)` where `index` can only take the values
    `among` (static ids into `branches`; None: any): the other branches are not traced,
    and one possible value calls its branch directly."""
    if among is None:
        return jax.lax.switch(index, branches, *operands)
    among = tuple(among)
    if len(among) == 1:
        return branches[among[0]](*operands)
    pos = np.zeros(len(branches), np.int32)
    pos[list(among)] = np.arange(len(among), dtype=np.int32)
    return jax.lax.switch(jnp.asarray(pos)[index], [branches[i] for i in among], *operands)


def _can_run(d: Discipline, params, among=None) -> bool:
    """Whether `d` can be a run's discipline with these params' shapes (static): one that
    owns departure needs the per-flow queues; with `among` (static ids), one of them."""
    return (not d.owns_departure or flowqueue.used(params)) and (among is None or DISCIPLINES.index(d) in among)


def flag(params, discipline, name: str):
    """The run's discipline's flag `name` (`Discipline.owns_departure`, ...): Python False
    when no discipline that can run with these params has it (the tick then leaves the
    code it guards out of the trace), else a traced bool.  `discipline`: a `Chosen` or an id."""
    discipline_id, among = _unpack(discipline)
    on = [bool(getattr(d, name)) and _can_run(d, params, among) for d in DISCIPLINES]
    if not any(on):
        return False
    return jnp.asarray(on)[discipline_id]


def owners(params, discipline=None) -> list:
    """[(id, discipline)] of the disciplines that own departure and can run with these params
    (and, given a `Chosen`, that its runs can have)."""
    among = _unpack(discipline)[1]
    return [(i, d) for i, d in enumerate(DISCIPLINES) if d.owns_departure and _can_run(d, params, among)]


def _switch(discipline, hook, states: States):
    """The switch over the registry (`switch_among`: the disciplines `discipline` allows):
    branch i runs hook(discipline i, its state) -> (state, out) and puts the state back in
    its own entry, leaving the others as they are."""
    def branch(d):
        def run(st):
            s, out = hook(d, st[d.key])
            return st.replace(**{d.key: s}), out
        return run

    discipline_id, among = _unpack(discipline)
    return switch_among(discipline_id, among, [branch(d) for d in DISCIPLINES], states)


def on_enqueue(states: States, discipline, arr_c, q_pkts, u, now_s, params) -> tuple[States, Hits]:
    """The run's discipline's decisions on this tick's arrivals (`Discipline.on_enqueue`)."""
    return _switch(discipline, lambda d, s: d.on_enqueue(s, arr_c, q_pkts, u, now_s, params), states)


def on_dequeue(states: States, discipline, head_sojourn_s, q_pkts, serving, marking, now_s,
               params) -> tuple[States, jnp.ndarray]:
    """The run's discipline's decisions on the class FIFOs' head packets (`Discipline.on_dequeue`)."""
    return _switch(discipline, lambda d, s: d.on_dequeue(s, head_sojourn_s, q_pkts, serving, marking, now_s,
                                                            params), states)


def on_tick_end(states: States, discipline, last_sojourn_s, served, q_after, now_end_s, params) -> States:
    """The run's discipline sees the class FIFOs as the tick leaves them (`Discipline.on_tick_end`)."""
    return _switch(discipline, lambda d, s: (d.on_tick_end(s, last_sojourn_s, served, q_after, now_end_s,
                                                              params), ()), states)[0]


def flow_room(states: States, discipline, pkts, params):
    """[Q] int32: how many more packets each flow's queue (holding pkts [Q]) admits under
    the run's discipline (`Discipline.flow_room`); the caller skips it unless
    `flag(params, id, "caps_flows")` can be true."""
    return _switch(discipline, lambda d, s: (s, d.flow_room(s, pkts, params)), states)[1]


def enqueue_flows(states: States, discipline, slots, adm_pkts, order, params) -> States:
    """The run's discipline learns of the runs enqueued in the per-flow queues
    (`Discipline.enqueue_flows`); the caller skips it when `owners(params)` is empty."""
    return _switch(discipline, lambda d, s: (d.enqueue_flows(s, slots, adm_pkts, order, params), ()), states)[0]


__all__ = ["Chosen", "DISCIPLINES", "NONE", "Discipline", "FlowDeparture", "Hits", "States", "by_name", "enqueue_flows",
           "flag", "flow_room", "index", "init", "names", "on_dequeue", "on_enqueue", "on_tick_end", "owners",
           "switch_among"]
