"""Typed PPO configuration.  Every field is checked by `PPOConfig.validate`, which
names the offending field."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple, Union

from rlbm_jax.policy import ACTION_MAPS, map_inverse, map_reach

NETWORKS = ("mlp", "lstm")
ACTIONS = ("gaussian", "discrete")
ACTIVATIONS = ("tanh", "relu")
INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    # ---- data collection --------------------------------------------------
    num_envs: int = 256  # envs stepped in parallel (per training seed)
    num_steps: int = 32  # env steps per env per update (rollout length)
    total_updates: int = 160  # PPO updates in the whole run
    # ---- optimisation -------------------------------------------------------
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 3e-4
    anneal_lr: bool = True  # linear decay to 0 over total_updates
    max_grad_norm: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    normalize_obs: bool = True  # running mean/std of observations, inside the graph
    normalize_adv: bool = True  # per minibatch
    obs_clip: float = 10.0
    # ---- network ------------------------------------------------------------
    network: str = "mlp"  # "mlp" or "lstm" (recurrent; minibatches are whole env sequences)
    hidden: Tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    lstm_size: int = 32
    # ---- action distribution ------------------------------------------------
    action: str = "gaussian"  # "gaussian": squashed by action_map; "discrete": categorical
    action_map: str = "exp2"  # for Box envs with "gaussian": see rlbm_jax.policy.ACTION_MAPS, or "none"
    init_log_std: float = -0.5
    # the mean action of the untrained policy (Box envs, "gaussian" with an action map):
    # the actor's output bias starts at the map's inverse of it.  None: bias 0, i.e.
    # action_map(0) (exp2: 1/16, tanh01: 1/2, clip01: 0, pow2: 1).  With "bdp" it is
    # the threshold in BDPs (bias 0: 1 BDP).  A tuple gives one value per action
    # dimension (its length must be the env's action size, checked by PPO).
    init_action: Optional[Union[float, Tuple[float, ...]]] = None
    num_bins: int = 11  # "discrete" on a Box env: levels per action dimension

    @property
    def init_mean(self) -> Union[float, Tuple[float, ...]]:
        """The actor's initial output bias (pre-map), from `init_action`: a float, or a
        tuple with one bias per action dimension."""
        if self.init_action is None:
            return 0.0
        if isinstance(self.init_action, tuple):
            return tuple(map_inverse(self.action_map, v) for v in self.init_action)
        return map_inverse(self.action_map, self.init_action)

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    def validate(self) -> "PPOConfig":
        def pos_int(name, lo=1):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"PPOConfig.{name} must be an integer >= {lo}, got {v!r}")

        for n in ("num_envs", "num_steps", "total_updates", "update_epochs", "num_minibatches", "lstm_size"):
            pos_int(n)
        pos_int("num_bins", 2)
        # XLA indexes a batch with int32, and optax counts optimiser steps in int32
        if self.batch_size > INT32_MAX:
            raise ValueError(f"PPOConfig.num_envs x PPOConfig.num_steps = {self.batch_size:,} transitions per update "
                             f"is more than {INT32_MAX:,} (2**31 - 1), the most an int32 index reaches")
        opt_steps = self.total_updates * self.update_epochs * self.num_minibatches
        if opt_steps > INT32_MAX:
            raise ValueError(f"PPOConfig.total_updates x PPOConfig.update_epochs x PPOConfig.num_minibatches = "
                             f"{opt_steps:,} optimiser steps is more than {INT32_MAX:,} (2**31 - 1), the most "
                             "optax's int32 step count reaches")
        for n, lo, hi in (("gamma", 0.0, 1.0), ("gae_lambda", 0.0, 1.0)):
            v = getattr(self, n)
            if not (lo <= v <= hi):
                raise ValueError(f"PPOConfig.{n} must be in [{lo}, {hi}], got {v!r}")
        for n in ("lr", "max_grad_norm", "clip_eps", "obs_clip"):
            v = getattr(self, n)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"PPOConfig.{n} must be a positive number, got {v!r}")
        for n in ("vf_coef", "ent_coef"):
            if not getattr(self, n) >= 0:
                raise ValueError(f"PPOConfig.{n} must be >= 0, got {getattr(self, n)!r}")
        if self.network not in NETWORKS:
            raise ValueError(f"PPOConfig.network must be one of {NETWORKS}, got {self.network!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"PPOConfig.action must be one of {ACTIONS}, got {self.action!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"PPOConfig.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.action_map not in ACTION_MAPS:
            raise ValueError(f"PPOConfig.action_map must be one of {ACTION_MAPS}, got {self.action_map!r}")
        if self.init_action is not None:
            if self.action != "gaussian" or self.action_map == "none":
                raise ValueError(f"PPOConfig.init_action needs action='gaussian' and an action map, got "
                                 f"action={self.action!r}, action_map={self.action_map!r}")
            lo, hi = map_reach(self.action_map)
            vs = self.init_action if isinstance(self.init_action, tuple) else (self.init_action,)
            if not vs or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v < hi) for v in vs):
                raise ValueError(f"PPOConfig.init_action must be a number, or a non-empty tuple of numbers, strictly "
                                 f"inside ({lo:g}, {hi:g}), the range of action_map {self.action_map!r}, "
                                 f"got {self.init_action!r}")
        if not self.hidden or any((not isinstance(h, int)) or h < 1 for h in self.hidden):
            raise ValueError(f"PPOConfig.hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
        if self.network == "lstm":
            if self.num_envs % self.num_minibatches:
                raise ValueError(f"PPOConfig: with an LSTM, num_envs ({self.num_envs}) must be divisible by "
                                 f"num_minibatches ({self.num_minibatches})")
        elif self.batch_size % self.num_minibatches:
            raise ValueError(f"PPOConfig: num_envs * num_steps ({self.batch_size}) must be divisible by "
                             f"num_minibatches ({self.num_minibatches})")
        return self

    def to_dict(self) -> dict:
        """Plain JSON types: tuple fields (hidden, a per-dimension init_action) as lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "PPOConfig":
        """The inverse of `to_dict` (lists back to tuples), validated."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"PPOConfig: unknown fields {sorted(unknown)}")
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d).validate()


# The thesis scenario's own PPO settings, on top of PPOConfig's generic defaults (used by
# scripts/train.py and scripts/bench_train.py): the action is log2 of each class's
# threshold in BDPs, so one output means the same queue at every buffer size; class 0
# starts at 4 BDPs (the thesis's N = 100), class 1 at 0.5 BDP (a short queue for a long
# flow's slow start), and a larger step lets them move in 160 updates.
# results/README.md ("What made the default") has the runs that chose them.
THESIS_PPO = dict(action_map="bdp", init_action=(4.0, 0.5), init_log_std=0.5, lr=1e-3)
