"""Env wrappers that change how an env is seen, not what it simulates."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces
from gymnax.wrappers.purerl import GymnaxWrapper


def _forward(wrapper, name: str):
    """The wrapped env's attribute `name`, for a wrapper's `__getattr__`.  It reads the
    wrapped env from the instance's `__dict__`: while `copy.deepcopy` or `pickle` rebuilds
    a wrapper, the new object has no `_env` yet, and asking for it through `__getattr__`
    (as gymnax's wrappers do) recurses until Python gives up."""
    env = vars(wrapper).get("_env")
    if env is None:
        raise AttributeError(f"{type(wrapper).__name__} has no attribute {name!r}")
    return getattr(env, name)


class RewardScale(GymnaxWrapper):
    """The env with its reward times `scale` (what a trainer sees; a study's evaluation
    scores the env's own reward)."""

    def __init__(self, env, scale: float):
        super().__init__(env)
        self.scale = float(scale)

    def __getattr__(self, name):
        return _forward(self, name)

    def step(self, key, state, action, params=None):
        out = self._env.step(key, state, action, params)
        return (out[0], out[1], out[2] * self.scale, *out[3:])


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

    def __getattr__(self, name):
        return _forward(self, name)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, self._shape, jnp.float32)

    def to_env(self, action):
        a = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        return self._low + (a + 1.0) * 0.5 * (self._high - self._low)

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, self.to_env(action), params)

    def step_env(self, key, state, action, params):
        return self._env.step_env(key, state, self.to_env(action), params)


class FiveValueStep:
    """The env with gymnax's older `step`, which returns five values: (obs, state,
    reward, done, info), done = terminated or truncated.  `info` keeps both flags
    ("terminated", "truncated") and, as gymnax's `Environment.step` puts it there, the
    observation the step ended on before an auto-reset ("final_observation").  Trainers
    that unpack five values from `step` (rejax, purejaxrl and their kin) train on the env
    through it:

        env, params = rlbm_jax.make("QueuePilot-v0")
        ppo = rejax.PPO.create(env=FiveValueStep(env), env_params=params, ...)

    Every other attribute is the wrapped env's.  Unlike gymnax's `LegacyStepAPIWrapper`
    it survives `copy.deepcopy` (rejax deep-copies its config, env included)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return _forward(self, name)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        done = jnp.logical_or(terminated, truncated)
        return obs, state, reward, done, {**info, "terminated": terminated, "truncated": truncated}
