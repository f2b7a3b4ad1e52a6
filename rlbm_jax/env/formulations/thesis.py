"""The thesis formulation (its text, section "RL agent"), and the project's default
formulation, which keeps the thesis's observation and action and replaces its reward.

Observation, float32 [3P + 4] (P classes); the first five groups are the thesis's
state, the last P + 1 let one policy serve many buffer sizes:
    [0:P]        beta_c, the fixed per-class weights
    [P:2P]       data packets each class sent in the interval / capacity (drain rate)
    [2P]         free fraction of the shared buffer, (B - Q) / B, at the interval's end
    [2P+1]       flows finished in the interval / flows_scale
    [2P+2]       data packets dropped in the interval / capacity
    [2P+3:3P+3]  each class's queue at the interval's end / BDP
    [3P+3]       shared buffer size B / BDP
(capacity: data packets the bottleneck carries in one interval.)
Action, float32 [P] in [0, 1]: alpha_c (values outside are clipped); the switch then
admits a class-c packet while its queue is below alpha_c * beta_c * (B - Q), capped by
the class FIFO cap (knob `class_alpha`, buffer policy "rl").
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from gymnax.environments import spaces

from rlbm_jax.env.formulations import rewards
from rlbm_jax.env.formulations.base import Field, Formulation, capacity_pkts, per_class, register


@dataclasses.dataclass(frozen=True)
class ThesisObservation:
    def fields(self, P: int) -> tuple:
        return (per_class("beta", "1", "class {c}'s weight beta_c of the rl threshold", P)
                + per_class("drain_rate", "1", "class {c}'s data packets sent in the interval / capacity", P)
                + (Field("free_buffer_fraction", "1", "(B - Q) / B at the interval's end"),
                   Field("flows_finished_scaled", "flows", "flows finished in the interval / flows_scale"),
                   Field("drops_per_capacity", "1", "data packets dropped in the interval / capacity"))
                + per_class("queue_bdp", "BDP", "class {c}'s queue at the interval's end / BDP", P)
                + (Field("buffer_bdp", "BDP", "shared buffer B / BDP"),))

    def __call__(self, rec, params):
        p = params.sim
        cap = capacity_pkts(params)
        free = (p.buffer_pkts - jnp.sum(rec.queue_end_pkts)) / p.buffer_pkts
        return jnp.concatenate([
            p.beta.astype(jnp.float32),
            rec.dequeues_pkts.astype(jnp.float32) / cap,
            jnp.reshape(free, (1,)),
            jnp.reshape(jnp.sum(rec.flows_done) / params.flows_scale, (1,)),
            jnp.reshape(jnp.sum(rec.drops_pkts) / cap, (1,)),
            rec.queue_end_pkts.astype(jnp.float32) / p.bdp_pkts,
            jnp.reshape(p.buffer_pkts / p.bdp_pkts, (1,)),
        ]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class ClassAlpha:
    """alpha per class in [0, 1]: the rl buffer policy's threshold alpha_c * beta_c * (B - Q)."""

    text: str = ("alpha per class in [0, 1]; the switch admits a class-c packet while its queue is below "
                 "alpha_c * beta_c * (B - Q) (buffer policy 'rl'), capped by the class FIFO cap")

    def fields(self, P: int) -> tuple:
        return per_class("alpha", "1", "class {c}'s alpha in [0, 1]", P)

    def space(self, P: int):
        return spaces.Box(0.0, 1.0, (P,), jnp.float32)

    def knobs(self, action, rec, params) -> dict:
        P = params.sim.num_classes
        return {"class_alpha": jnp.clip(jnp.asarray(action, jnp.float32).reshape(P), 0.0, 1.0)}


THESIS = register(Formulation(
    "RLBM-thesis-v0", "the thesis formulation as published: its observation (plus queue and buffer in BDPs), "
    "alpha per class, reward -log(worst slowdown) + log(1 + throughput)",
    ThesisObservation(), ClassAlpha(), rewards.get("thesis")))

DEFAULT = register(Formulation(
    "RLBM-v0", "the thesis's observation and action with the default reward, flows-accrued: delivered / capacity "
    "minus every flow's log slowdown as it accrues (chosen in results/reward_analysis)",
    ThesisObservation(), ClassAlpha(), rewards.get("flows-accrued")))
