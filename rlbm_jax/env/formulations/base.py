"""What a formulation is made of, and the registry of formulations.

A formulation is one object with three parts, each a small object of its own:
  observation  `fields(P)` names the observation's entries (name, unit, normalisation)
               and `__call__(rec, params)` computes it, float32 [D], from the interval
               record (`metrics.Interval`) and the env's params;
  action       `space(P)` (gymnax), `fields(P)`, and `knobs(action, rec, params)`: the
               switch's knobs the action sets (`sim.KNOBS`), given the record of the
               interval the action answers;
  reward       `__call__(rec, params) -> (reward [], parts {name: []})`.
Every part is a pure function of the interval record and the params, so the env, the
evaluators and the ns-3 lock-step driver compute the same numbers with the same code.
A formulation whose agent sees several intervals (`window` w > 1, ABS's) observes the
last w intervals' observations, oldest first: the env keeps them (`RLBMEnv`), and the
layout names each entry with its lag (`name_lag{k}`, k intervals before the last).
An observation may keep its own carry in place of a window of past observations (LFQ's
exponentially weighted averages): it defines `first_window(rec, params, knobs)`,
`next_window(carry, rec, params, knobs)` (knobs: the switch's knobs in force over the
interval, None before an agent set any) and `window_fields(P)` (the carry's entries in
order), and the formulation's `window` is the carry's row count.
A sender formulation (`sender`: RL congestion control, `formulations.cc`) is the same three
parts with the agent as one of the senders: it reads the agent flow's rows of the record
(`Interval.agent_counts`, `agent_state`) and its action sets the senders' knobs
(`sim.FLOW_KNOBS`).
A new formulation is one module that builds a `Formulation` and calls `register`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp

from rlbm_jax.env import sim
from rlbm_jax.env.formulations import rewards
from rlbm_jax.env.formulations.rewards import capacity_pkts  # noqa: F401  (re-exported: observations scale by it)


@dataclasses.dataclass(frozen=True)
class Field:
    """One entry of an observation or action: its name, unit and how it is scaled."""

    name: str
    unit: str
    text: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def per_class(name: str, unit: str, text: str, num_classes: int) -> tuple:
    """One `Field` per class: `name_c0`, `name_c1`, ..."""
    return tuple(Field(f"{name}_c{c}", unit, text.format(c=c)) for c in range(num_classes))


@dataclasses.dataclass(frozen=True)
class Formulation:
    """An RL formulation of buffer management: observation, action and reward."""

    id: str  # the env id `rlbm_jax.make` takes, e.g. "RLBM-thesis-v0"
    description: str
    observation: Any
    action: Any
    reward: Any
    scenario: str = "thesis"  # the scenario `rlbm_jax.make` builds unless told another (`rlbm_jax.scenarios`)
    agent_interval_s: float = 0.1  # the agent's step `rlbm_jax.make` uses unless told another
    window: int = 1  # the agent observes the last `window` intervals (oldest first); 1: the last one
    # an interval of this many ticks whatever the tick's length (LFQ: 10 of the link's packet
    # slots at any rate); 0: `agent_interval_s` seconds
    ticks_per_step: int = 0
    # a sender agent (`formulations.cc`): its action sets the senders' knobs (`sim.FLOW_KNOBS`) of
    # the scenario's agent flow (`agent_flows` = 1), not the switch's, and it reads that flow's record
    sender: bool = False
    # the TCPs a sender agent's flow may run (() any): a knob its TCP overrides every tick would
    # otherwise be lost (BBR and the rate sender set their own windows; only a rate sender holds a rate)
    agent_tcps: tuple = ()

    def __post_init__(self):
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"formulation {self.id}: window must be a whole number >= 1, got {self.window!r}")
        if isinstance(self.ticks_per_step, bool) or not isinstance(self.ticks_per_step, int) or self.ticks_per_step < 0:
            raise ValueError(f"formulation {self.id}: ticks_per_step must be a whole number >= 0, got "
                             f"{self.ticks_per_step!r}")

    def step_fields(self, num_classes: int) -> tuple:
        """The entries of one interval's observation (`observe`)."""
        return tuple(self.observation.fields(num_classes))

    def obs_fields(self, num_classes: int) -> tuple:
        """The entries of what the agent sees: one interval's (`step_fields`), or with a
        window each of them for every interval of it, oldest first (`name_lag{k}`: k
        intervals before the last)."""
        if hasattr(self.observation, "window_fields"):
            return tuple(self.observation.window_fields(num_classes))
        step = self.step_fields(num_classes)
        if self.window == 1:
            return step
        return tuple(Field(f"{f.name}_lag{k}", f.unit, f"{f.text} ({k} intervals before the last)" if k else
                           f"{f.text} (the last interval)") for k in range(self.window - 1, -1, -1) for f in step)

    def obs_layout(self, num_classes: int) -> tuple:
        """The observation's entry names, in order."""
        return tuple(f.name for f in self.obs_fields(num_classes))

    def observe(self, rec, params):
        """One interval's observation, float32 [len(step_fields)]."""
        return self.observation(rec, params).astype(jnp.float32)

    def first_window(self, rec, params, knobs=None):
        """The window at an episode's start, float32 [window, D]: the first record's
        observation in every place (as if it had lasted the whole window); an observation
        that keeps its own carry builds it (`observation.first_window`)."""
        if hasattr(self.observation, "first_window"):
            return self.observation.first_window(rec, params, knobs).astype(jnp.float32)
        obs = self.observe(rec, params)
        return jnp.broadcast_to(obs, (self.window,) + obs.shape)

    def next_window(self, window, rec, params, knobs=None):
        """The window [window, D] with the interval that just ended (its record) appended
        and the oldest dropped, or the observation's own carry moved on by the interval
        (`observation.next_window`, knobs: those in force over it)."""
        if hasattr(self.observation, "next_window"):
            return self.observation.next_window(window, rec, params, knobs).astype(jnp.float32)
        return jnp.concatenate([window[1:], self.observe(rec, params)[None]], axis=0)

    def action_space(self, num_classes: int):
        return self.action.space(num_classes)

    def knobs(self, action, rec, params) -> dict:
        knobs = self.action.knobs(action, rec, params)
        unknown = set(knobs) - set(sim.KNOBS)
        if unknown:
            raise ValueError(f"formulation {self.id}: unknown knobs {sorted(unknown)}; the switch has {sim.KNOBS}")
        return knobs

    def reward_of(self, rec, params):
        r, parts = self.reward(rec, params)
        return r.astype(jnp.float32), parts

    def with_reward(self, reward) -> "Formulation":
        """The same observation and action with another reward (a name from
        `rewards.REWARDS`, or a reward object)."""
        r = rewards.get(reward) if isinstance(reward, str) else reward
        return dataclasses.replace(self, reward=r)

    def metadata(self, num_classes: int) -> dict:
        """What a policy file or an ONNX graph records about the formulation."""
        meta = {"formulation": self.id, "obs_layout": list(self.obs_layout(num_classes)),
                "obs_fields": [f.as_dict() for f in self.obs_fields(num_classes)],
                "action_fields": [f.as_dict() for f in self.action.fields(num_classes)],
                "action": self.action.text, "reward": getattr(self.reward, "name", type(self.reward).__name__)}
        if self.window > 1:
            meta["obs_window"] = self.window
        return meta


_REGISTRY: dict[str, Formulation] = {}
_LISTENERS: list[Callable[[Formulation], None]] = []


def register(formulation: Formulation) -> Formulation:
    """Add a formulation; `rlbm_jax.make(formulation.id)` then builds its env."""
    if not isinstance(formulation, Formulation):
        raise TypeError(f"register takes a Formulation, got {type(formulation).__name__}")
    if formulation.id in _REGISTRY:
        raise ValueError(f"formulation {formulation.id!r} is already registered")
    _REGISTRY[formulation.id] = formulation
    for fn in _LISTENERS:
        fn(formulation)
    return formulation


def get(formulation_id: str) -> Formulation:
    try:
        return _REGISTRY[formulation_id]
    except KeyError:
        raise ValueError(f"unknown formulation {formulation_id!r}; registered: {', '.join(_REGISTRY)}") from None


def ids() -> tuple:
    return tuple(_REGISTRY)


def on_register(fn: Callable[[Formulation], None]) -> None:
    """Call fn for every formulation registered, now and later (the env registry uses it)."""
    _LISTENERS.append(fn)
    for f in list(_REGISTRY.values()):
        fn(f)
