"""RL formulations of buffer management: observation, action (the switch's knobs it
sets) and reward, each computed from the raw interval record `metrics.Interval`.

    from rlbm_jax.env import formulations
    formulations.ids()                      # ("RLBM-thesis-v0", "RLBM-v0", ...)
    f = formulations.get("RLBM-thesis-v0")
    f.obs_layout(2), f.action_space(2), f.with_reward("flows")

A new formulation is one module that builds a `Formulation` and calls `register`
(import it, and `rlbm_jax.make` knows its id); see `base.py`.
"""
from rlbm_jax.env.formulations import rewards
from rlbm_jax.env.formulations.base import (Field, Formulation, capacity_pkts, get, ids, on_register, per_class,
                                            register)
from rlbm_jax.env.formulations.rewards import REWARDS, Reward
from rlbm_jax.env.formulations.thesis import DEFAULT, THESIS, ClassAlpha, ThesisObservation
from rlbm_jax.env.formulations.queuepilot import QUEUEPILOT, QUEUEPILOT_CONTINUOUS  # noqa: E402  (registers them)
from rlbm_jax.env.formulations.abs import ABS  # noqa: E402  (registers it)
from rlbm_jax.env.formulations.lfq import LFQ, LFQ_A10  # noqa: E402  (registers them)
from rlbm_jax.env.formulations.cc import AURORA, ORCA  # noqa: E402  (registers them)

__all__ = ["Field", "Formulation", "register", "get", "ids", "on_register", "per_class", "capacity_pkts", "rewards", "REWARDS",
           "Reward", "THESIS", "DEFAULT", "ThesisObservation", "ClassAlpha", "QUEUEPILOT",
           "QUEUEPILOT_CONTINUOUS", "ABS", "LFQ", "LFQ_A10", "ORCA", "AURORA"]
