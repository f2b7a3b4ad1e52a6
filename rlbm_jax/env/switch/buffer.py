"""Buffer management: per-class admission thresholds of the shared buffer.

A buffer policy is a pure function `thresholds(view, params) -> [P] float`
giving, for each class, the queue length up to which arriving packets are
admitted.  The switch additionally enforces each class's FIFO cap and the shared
buffer size B.  Policies live in a registry; `params.policy_id` picks one at run
time (`lax.switch`), so a batch of simulators can mix policies.  A new policy
plugs in with `register_policy` and nothing else changes.

A policy may also name a queueing discipline (`Policy.aqm`, a name of the registry
`rlbm_jax.env.switch.disciplines`) that drops or marks packets below its thresholds; "red",
"ared", "pie" and "codel" are the droptail limit (each class's FIFO cap within the shared
buffer) with that AQM in front; "rl-mark" the droptail limit with a marker whose
probability an agent sets (ECN only); "rl-size" drop-tail whose limit an agent sets (knob
`buffer_size_pkts`, `_rl_size`).  "fq-codel" queues each flow apart
(`disciplines/fq_codel.py`, over `flowqueue`): it takes every arrival and keeps the shared
buffer B by dropping from the fattest flow, so its thresholds are not used.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from rlbm_jax.env.switch.disciplines import registry as disciplines


class BufferView(NamedTuple):
    """What a policy may look at, at the start of a tick."""

    queue_pkts: jnp.ndarray  # [P] current length of each class FIFO
    occupancy_pkts: jnp.ndarray  # [] total packets in the shared buffer (Q)
    drain_norm: jnp.ndarray  # [P] measured dequeue rate / link rate, last RTT window
    rl_alpha: jnp.ndarray  # [P] the agent's last action (used by "rl")
    rl_size_pkts: jnp.ndarray  # [P] the agent's buffer size per class (used by "rl-size")


def _static(view, p):
    """Thesis "SB": threshold_p = alpha_p * B / sum(alpha)."""
    return p.alpha * p.buffer_pkts / jnp.maximum(jnp.sum(p.alpha), 1e-9)


def _droptail(view, p):
    return p.class_cap_pkts.astype(jnp.float32)


def _dynamic_thresholds(view, p):
    """Dynamic Thresholds (Choudhury & Hahne): alpha_p * (B - Q)."""
    return p.alpha * (p.buffer_pkts - view.occupancy_pkts)


def _abm(view, p):
    """ABM: alpha_p / n_p * (B - Q) * mu_p / b, drain rate clamped to [1/P, 1].

    One queue per priority at this port, so n_p (congested queues of priority p) is 1."""
    nprio = view.queue_pkts.shape[0]
    mu = jnp.clip(view.drain_norm, 1.0 / nprio, 1.0)
    return p.alpha * (p.buffer_pkts - view.occupancy_pkts) * mu


def _static_bdp(view, p):
    """Fixed thresholds in BDPs: alpha_c * BDP, never more than the free buffer B - Q
    (alpha_c >= B/BDP: the free buffer, DT with alpha 1)."""
    return jnp.minimum(p.alpha * p.bdp_pkts, (p.buffer_pkts - view.occupancy_pkts).astype(jnp.float32))


def _busy_bdp(view, p):
    """A hand rule: a class may take the buffer alone, and alpha_c x BDP while another class
    is busy (has a packet queued): threshold_c = its FIFO cap while every other class's
    queue is empty, else alpha_c * BDP (the shared buffer B bounds both, as for every
    policy)."""
    q = view.queue_pkts
    others_busy = (jnp.sum(q) - q) > 0
    return jnp.where(others_busy, p.alpha * p.bdp_pkts, p.class_cap_pkts.astype(jnp.float32))


def _rl(view, p):
    """Thesis RL formulation: threshold = action * beta * free buffer."""
    return view.rl_alpha * p.beta * (p.buffer_pkts - view.occupancy_pkts)


def _rl_size(view, p):
    """Drop-tail with a limit an agent sets at run time (the knob `buffer_size_pkts`,
    `sim.KNOBS`, held in `SimState.rl_size_pkts`; ABS's action, `formulations.abs`): class c
    admits an arriving packet while its queue is below floor(size_c), the size clipped to [1,
    the class's FIFO cap `buffer_per_class_pkts`], in place of that cap, which stays the
    largest buffer the agent may choose (and the size until an agent sets one: without an
    agent the policy is "droptail").  The shared buffer B bounds the classes together as
    for every policy.  The size holds from the first tick after it is set (the env sets it
    before an interval's first tick).

    Lowering it drops nothing: packets already queued above a lowered limit stay and
    leave as the link serves them, and every arrival is refused while the queue is at or
    above the limit (a SYN too, `syn_lost`) until it has drained below: a drop-tail queue
    whose limit is checked at each arrival, as ns-3's FifoQueueDisc checks its MaxSize
    (an arrival is dropped while current size + packet > MaxSize) and as the ABS paper's
    agent set the limit of ns-2's Drop-tail module (its Sec. IV-A).  ns-3's
    `QueueDisc::SetMaxSize` itself differs on a FIFO: it ignores a null size (returns
    false, as the 3.37 header says) and passes the size to the disc's internal queue, whose
    `QueueBase::SetMaxSize` aborts the simulation ("The new maximum queue size cannot be
    less than the current size") when the size is below the current occupancy (ns-3-dev's
    sources before 3.37's reformatting; 3.37's .cc files were not at hand), so an ns-3
    mirror of this policy should check its own limit at enqueue rather than call it.
    Clipping to the class cap, not to the ring `queue_capacity_pkts`, keeps a run's result
    independent of its batch: `stack_params` pads the ring to the batch's largest."""
    return jnp.clip(view.rl_size_pkts, 1.0, p.class_cap_pkts.astype(jnp.float32))


class Policy(NamedTuple):
    name: str
    thresholds: Callable
    default_alpha: tuple
    aqm: str = "none"  # the name of a registered discipline (`disciplines.names()`)
    native: bool = False  # the native (C++) tick implements it too (`model`'s manifest reads this)
    knobs: tuple = ()  # the agent's knobs (`sim.KNOBS`) its thresholds read (a discipline declares its own)


_REGISTRY: list[Policy] = [
    Policy("droptail", _droptail, (1.0,), native=True),
    Policy("sb-naive", _static, (1.0, 1.0), native=True),
    Policy("sb-sophisticated", _static, (8.0, 1.0), native=True),
    Policy("dt", _dynamic_thresholds, (1.0, 1.0), native=True),
    Policy("abm", _abm, (1.0, 1.0), native=True),
    Policy("rl", _rl, (1.0, 1.0), native=True, knobs=("class_alpha",)),
    Policy("static-bdp", _static_bdp, (1e6, 1e6), native=True),
    Policy("red", _droptail, (1.0,), "red", native=True),
    Policy("ared", _droptail, (1.0,), "ared", native=True),
    Policy("pie", _droptail, (1.0,), "pie"),
    Policy("codel", _droptail, (1.0,), "codel"),
    # the droptail limit with a marker whose probability the agent sets (knob `mark_prob`)
    Policy("rl-mark", _droptail, (1.0,), "mark"),
    Policy("fq-codel", _droptail, (1.0,), "fq-codel"),
    # the plain fair queue with a drop-tail cap per flow (fq_flow_cap_pkts; an agent's knob
    # flow_cap_pkts: LFQ)
    Policy("fq", _droptail, (1.0,), "fq", native=True),
    # drop-tail at a size the agent sets (knob `buffer_size_pkts`; ABS)
    Policy("rl-size", _rl_size, (1.0,), native=True, knobs=("buffer_size_pkts",)),
    # a hand rule: the whole buffer alone, alpha_c BDPs beside a busy class
    Policy("busy-bdp", _busy_bdp, (1.0, 1.0)),
]
POLICY_NAMES: tuple = tuple(p.name for p in _REGISTRY)
DEFAULT_ALPHA = {p.name: p.default_alpha for p in _REGISTRY}
DEFAULT_AQM = {p.name: p.aqm for p in _REGISTRY}


# disciplines that queue each flow apart (rlbm_jax.env.switch.flowqueue): they own departure
FLOW_QUEUE_AQMS = tuple(d.name for d in disciplines.DISCIPLINES if d.owns_departure)


def discipline(policy: str) -> disciplines.Discipline:
    """The discipline `policy` names."""
    return disciplines.by_name(DEFAULT_AQM.get(policy, "none"))


def needs_flow_queues(policy: str) -> bool:
    """Whether `policy` queues each flow apart (its params need `flow_queue_capacity_pkts`)."""
    return discipline(policy).owns_departure


def reads_knob(policy: str, knob: str) -> bool:
    """Whether `policy` acts on an agent's knob (`sim.KNOBS`): its thresholds read it
    (`Policy.knobs`: class_alpha the "rl" policy's, buffer_size_pkts the "rl-size" policy's),
    or its discipline declares it (mark_prob, read by the policies of the marker)."""
    if any(p.name == policy and knob in p.knobs for p in _REGISTRY):
        return True
    return any(k == knob for k, _ in discipline(policy).knobs)


def needs_ecn(policy: str) -> bool:
    """Whether `policy`'s discipline only marks (its runs need ECN senders)."""
    return discipline(policy).needs_ecn


def native_policies() -> tuple:
    """The policies the native tick implements (a policy registered at run time is not one)."""
    return tuple(p.name for p in _REGISTRY if p.native)


def default_alpha(policy: str, num_classes: int) -> tuple:
    """A policy's default alphas for `num_classes` classes (cut, or extended with the last value)."""
    d = [float(x) for x in np.atleast_1d(DEFAULT_ALPHA[policy])]
    return tuple((d + d[-1:] * num_classes)[:num_classes])


def register_policy(name: str, thresholds: Callable, default_alpha=(1.0, 1.0), aqm_name: str = "none") -> int:
    """Add a buffer policy (with a registered discipline in front, if named: `aqm_name`, a
    name of `disciplines.names()`); returns its id.  Call before building params and jitting."""
    global POLICY_NAMES, DEFAULT_ALPHA, DEFAULT_AQM

    if name in POLICY_NAMES:
        raise ValueError(f"policy {name!r} is already registered")
    if aqm_name not in disciplines.names():
        raise ValueError(f"unknown aqm {aqm_name!r}; choose one of {', '.join(disciplines.names())}")
    _REGISTRY.append(Policy(name, thresholds, tuple(default_alpha), aqm_name))
    POLICY_NAMES = tuple(p.name for p in _REGISTRY)
    DEFAULT_ALPHA = {p.name: p.default_alpha for p in _REGISTRY}
    DEFAULT_AQM = {p.name: p.aqm for p in _REGISTRY}
    return len(_REGISTRY) - 1


def aqm_id(params) -> jnp.ndarray:
    """The id (position in the discipline registry) of the selected policy's discipline."""
    codes = jnp.asarray([disciplines.index(p.aqm) for p in _REGISTRY], jnp.int32)
    return codes[params.policy_id]


def used_policies(params) -> tuple | None:
    """The ids of the policies the runs these params describe can have (static, sorted, from
    the record of model choices, `params.model_choices`); None where the record names no
    policy (params built by hand): any registered one."""
    names = {v for n, v in params.model_choices if n == "policy"}
    return tuple(i for i, p in enumerate(_REGISTRY) if p.name in names) or None


def used_disciplines(params) -> tuple | None:
    """The registry ids of the disciplines the runs these params describe can have (static,
    sorted; from `used_policies`); None where the record names no policy: any."""
    used = used_policies(params)
    return None if used is None else tuple(sorted({disciplines.index(_REGISTRY[i].aqm) for i in used}))


def chosen_discipline(params) -> disciplines.Chosen:
    """The run's discipline as the tick dispatches on it: its id (`aqm_id`) and, where every
    policy its batch can have (`used_policies`) runs no discipline ("none": the thresholds
    alone), that one: the registered disciplines' hooks are then not compiled.  A batch with
    a discipline keeps the whole registry in its switch: with fewer branches XLA fuses a
    discipline's arithmetic differently (which products become FMAs, in its default mode),
    which would move the last bits of RED's average and every result computed with it."""
    none = (disciplines.index("none"),)
    return disciplines.Chosen(aqm_id(params), none if used_disciplines(params) == none else None)


def thresholds(view: BufferView, params) -> jnp.ndarray:
    """Per-class admission threshold [P] of the selected policy, capped by the class FIFO cap
    (only the policies the params' record allows are compiled, `used_policies`)."""
    branches = [lambda v, p, f=pol.thresholds: f(v, p).astype(jnp.float32) for pol in _REGISTRY]
    thr = disciplines.switch_among(params.policy_id, used_policies(params), branches, view, params)
    return jnp.minimum(jnp.maximum(thr, 0.0), params.class_cap_pkts.astype(jnp.float32))


def admit(arrivals_pkts, queue_pkts, thr, buffer_free_pkts):
    """How many of each class's arriving packets are admitted this tick.

    arrivals_pkts [P]: packets arriving per class.  Class c admits up to
    floor(thr_c) - q_c, and all classes together no more than the free shared
    buffer (classes take the free space in index order).  Returns admitted [P].
    """
    room = jnp.maximum(jnp.floor(thr).astype(jnp.int32) - queue_pkts, 0)
    want = jnp.minimum(arrivals_pkts, room)
    before = jnp.cumsum(want) - want
    return jnp.clip(buffer_free_pkts - before, 0, want)


def syn_lost(u, cls, arrivals_pkts, admitted_pkts, queue_pkts, thr, occupancy_pkts, buffer_pkts):
    """Whether a new flow's SYN, arriving in class `cls` this tick, is dropped.

    The SYN takes a uniformly random place (u in [0, 1)) among the tick's
    arrivals_pkts[cls] packets of its class and finds the queue as it stands after
    the admitted ones ahead of it: it is lost if it came after the class began to
    drop, or if the class queue it finds is at floor(thr), or the shared buffer is full.
    """
    ahead = jnp.minimum((u * (arrivals_pkts[cls] + 1)).astype(jnp.int32), arrivals_pkts[cls])
    found = jnp.minimum(ahead, admitted_pkts[cls])
    return ((ahead > admitted_pkts[cls]) | (queue_pkts[cls] + found >= jnp.floor(thr[cls]).astype(jnp.int32))
            | (occupancy_pkts + found >= buffer_pkts))
