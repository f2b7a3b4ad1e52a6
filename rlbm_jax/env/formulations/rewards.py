"""Rewards: named functions of one interval record (`metrics.Interval`) and the env's
params, returning (reward, parts).

Every reward here is one `Reward`: a throughput term, a flow term and penalties.
  throughput  "log": log(1 + delivered / capacity) (the thesis's, concave: spreading the
              same bytes over more intervals scores more); "linear": delivered / capacity
              (delivered = distinct data packets at the sink; capacity = packets the
              bottleneck carries in one interval)
  flows       "worst": -log of the interval's worst FCT slowdown, 0 when no flow finished
              (the thesis's: one flow per interval counts);
              "finished": -sum over the flows finished in the interval of
              w_c * log(max(slowdown, 1)) (every finished flow counts);
              "accrued": the same total, paid while the flows wait: each open flow adds the
              growth of log(max(age, ideal) / ideal) over the interval, a flow that finishes
              adds the rest (a flow's increments add up to its log slowdown), so a flow that
              is held back costs from the first interval it waits in, and one that never
              finishes costs too
  penalties   - drop_weight * drops / capacity - rto_weight * timeouts - syn_weight * lost SYNs
`REWARDS` holds the named variants; results/reward_analysis compares how each ranks
policies against the operator metrics and chose `flows-accrued` as the default
formulation's (`RLBM-v0`).
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

THROUGHPUT_TERMS = ("log", "linear")
FLOW_TERMS = ("worst", "finished", "accrued")


def capacity_pkts(params) -> int:
    """Data packets the bottleneck carries in one agent interval at its (peak) rate (a Python
    int: both factors are static).  The rewards here scale by it; under a capacity schedule
    the capacity actually offered in an interval is the record's `capacity_pkts`
    (`metrics.Interval`), which ABS's formulation reads instead."""
    return params.ticks_per_step * params.sim.pkts_per_tick


@dataclasses.dataclass(frozen=True)
class Reward:
    name: str
    text: str
    throughput: str = "linear"
    flows: str = "accrued"
    class_weights: tuple = (1.0,)  # w_c of the flow term, per class (the last value extends)
    drop_weight: float = 0.0
    rto_weight: float = 0.0
    syn_weight: float = 0.0

    def __post_init__(self):
        if self.throughput not in THROUGHPUT_TERMS:
            raise ValueError(f"reward {self.name}: throughput must be one of {THROUGHPUT_TERMS}, got {self.throughput!r}")
        if self.flows not in FLOW_TERMS:
            raise ValueError(f"reward {self.name}: flows must be one of {FLOW_TERMS}, got {self.flows!r}")
        if not self.class_weights or any(w < 0 for w in self.class_weights):
            raise ValueError(f"reward {self.name}: class_weights must be non-empty and >= 0, got {self.class_weights}")
        for n in ("drop_weight", "rto_weight", "syn_weight"):
            if not getattr(self, n) >= 0:
                raise ValueError(f"reward {self.name}: {n} must be >= 0, got {getattr(self, n)!r}")

    def weights(self, num_classes: int):
        w = list(self.class_weights) + [self.class_weights[-1]] * num_classes
        return jnp.asarray(w[:num_classes], jnp.float32)

    def __call__(self, rec, params):
        cap = capacity_pkts(params)
        thr = rec.sink_pkts / cap
        done = jnp.sum(rec.flows_done)
        wfs = jnp.where(done > 0, jnp.maximum(jnp.max(rec.slowdown_max), 1e-6), 1.0)
        parts = {}
        r = jnp.log1p(thr) if self.throughput == "log" else thr.astype(jnp.float32)
        if self.flows == "worst":
            r = -jnp.log(wfs) + r
        else:
            w = self.weights(rec.flows_done.shape[0])
            cost = rec.log_slowdown_sum
            if self.flows == "accrued":
                cost = cost + rec.open_log_slowdown_end - rec.open_log_slowdown_start
            flow_term = -jnp.sum(w * cost)
            parts["flow_term"] = flow_term
            r = r + flow_term
        if self.drop_weight or self.rto_weight or self.syn_weight:
            pen = (self.drop_weight * jnp.sum(rec.drops_pkts) / cap + self.rto_weight * rec.rto_count
                   + self.syn_weight * rec.syn_drops)
            parts["penalty"] = -pen
            r = r - pen
        return r, parts


REWARDS = {r.name: r for r in (
    Reward("thesis", "the thesis's: -log(worst FCT slowdown of the interval) + log(1 + delivered / capacity)",
           throughput="log", flows="worst"),
    Reward("thesis-linear", "the thesis's with a linear throughput term: -log(worst slowdown) + delivered / capacity",
           throughput="linear", flows="worst"),
    Reward("flows", "delivered / capacity - sum over finished flows of log(slowdown)", flows="finished"),
    Reward("flows-accrued", "delivered / capacity - log slowdown accrued by every flow while it waits",
           flows="accrued"),
    Reward("penalties", "flows-accrued - drops / capacity - 0.1 per timeout - 1 per lost SYN (rejected: a drop "
           "penalty ranks throttling long flows above serving them, results/reward_analysis)", flows="accrued",
           drop_weight=1.0, rto_weight=0.1, syn_weight=1.0),
)}


def get(name: str) -> Reward:
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; choose one of {', '.join(REWARDS)}") from None
