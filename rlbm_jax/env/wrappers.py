"""Env wrappers that change how an env is seen, not what it simulates."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces
from gymnax.wrappers.purerl import GymnaxWrapper


class SymmetricActions(GymnaxWrapper):
    """Actions in [-1, 1] mapped linearly onto the env's Box (for RLBMEnv's alphas,
    a = -1 -> 0, a = 0 -> 0.5, a = 1 -> 1).

    Trainers in the purejaxrl style clip actions to [-1, 1] (`ClipAction`) and start a
    Gaussian policy around 0: on an env whose actions live in [0, 1] that blocks a class
    in half of the untrained policy's samples.  Behind this wrapper [-1, 1] is the whole
    action range and 0 its middle."""

    def __init__(self, env):
        super().__init__(env)
        space = env.action_space(env.default_params)
        if not isinstance(space, spaces.Box):
            raise ValueError(f"SymmetricActions needs a Box action space, got {type(space).__name__}")
        self._low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape)
        self._high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape)
        if not (np.all(np.isfinite(np.asarray(self._low))) and np.all(np.isfinite(np.asarray(self._high)))):
            raise ValueError("SymmetricActions needs finite action bounds")
        self._shape = space.shape

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, self._shape, jnp.float32)

    def to_env(self, action):
        a = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        return self._low + (a + 1.0) * 0.5 * (self._high - self._low)

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, self.to_env(action), params)

    def step_env(self, key, state, action, params):
        return self._env.step_env(key, state, self.to_env(action), params)
