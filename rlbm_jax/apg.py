"""Analytic policy gradients (APG) through the fluid backend.

A deterministic MLP policy (obs -> an action in [0, 1], the "tanh01" map of
`rlbm_jax.policy`) is trained by backpropagating the return of short rollouts of
`FluidEnv` (`rlbm_jax.env.fluid_env`) into its weights, as Brax's APG and short-horizon
actor-critic methods (SHAC, Xu et al. 2022) do, without a critic:

    for every update:
        from the carried states s_0 (no gradient flows into them), roll `horizon` steps
        of every env of every group with the current weights θ;
        loss(θ) = -mean over envs and steps of the surrogate reward;
        θ <- Adam(clip_by_global_norm(∇θ loss))
    every `episode_steps` steps the states restart from t = 0

The surrogate reward is QueuePilot's (the formulations it trains: QueuePilot-continuous-v0;
another reward is refused) with its jump (-1 when a packet was dropped, whose derivative
is zero almost everywhere) smoothed, `surrogate`: the jump as a logistic function of the
dropped amount with width `drop_width_pkts`.  The reward the result is
judged by is always the formulation's own, on the packet simulator.

Groups: the fluid model's static configuration (flow count, TCP) differs between groups;
inside a group, the envs differ in continuous values (RTTs, buffers), batched by vmap.
`train` returns the weights and the learning curve; `save` writes a policy directory
(`rlbm_jax.policy` format, "mlp", action map "tanh01"), which `rlbm_jax.onnx_policy`
exports and the packet simulator runs.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env.fluid_env import FluidEnv


@dataclasses.dataclass(frozen=True)
class APGConfig:
    hidden: tuple = (64, 64)  # the MLP's hidden layers (tanh)
    lr: float = 1e-3
    horizon: int = 40  # agent steps backpropagated per update
    updates: int = 1500
    episode_steps: int = 2000  # steps before the states restart from t = 0 (a multiple of horizon; 10 s of 5 ms)
    max_grad_norm: float = 1.0
    drop_width_pkts: float = 0.25  # the smoothed drop penalty's width (packets): 12 % of it at no drop
    init_bias: float = -3.0  # the output layer's bias at start: (tanh(-3) + 1) / 2 = 0.0025 marking
    seed: int = 0

    def __post_init__(self):
        for name, ok in (("hidden", all(int(h) > 0 for h in self.hidden)), ("lr", self.lr > 0),
                         ("horizon", self.horizon >= 1), ("updates", self.updates >= 1),
                         ("episode_steps", self.episode_steps >= self.horizon
                          and self.episode_steps % self.horizon == 0),
                         ("max_grad_norm", self.max_grad_norm > 0), ("drop_width_pkts", self.drop_width_pkts > 0)):
            if not ok:
                raise ValueError(f"APGConfig.{name} is out of range ({getattr(self, name)!r}): hidden sizes > 0, "
                                 "lr > 0, horizon >= 1, updates >= 1, episode_steps a multiple of horizon, "
                                 "max_grad_norm > 0, drop_width_pkts > 0")


def init_weights(key, obs_dim: int, cfg: APGConfig) -> list:
    """[(W [in, out], b [out]), ...]: LeCun-normal hidden layers, a small output layer."""
    sizes = [obs_dim, *[int(h) for h in cfg.hidden], 1]
    keys = jax.random.split(key, len(sizes) - 1)
    out = []
    for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        scale = 0.01 if last else 1.0 / np.sqrt(a)
        out.append((jax.random.normal(k, (a, b), jnp.float32) * scale,
                    jnp.full((b,), cfg.init_bias if last else 0.0, jnp.float32)))
    return out


def act(weights, obs):
    """The policy: obs [..., D] -> action [..., 1] in (0, 1) ((tanh(x) + 1) / 2 of the MLP's output)."""
    x = obs
    for w, b in weights[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = weights[-1]
    return (jnp.tanh(x @ w + b) + 1.0) / 2.0


def surrogate(info, drop_width_pkts: float):
    """QueuePilot's reward with its jump smoothed: (1 - s) U^2 / sqrt(1 + D) - s, s the
    logistic function of (dropped packets - 1/2) / drop_width_pkts."""
    from rlbm_jax.env.formulations.queuepilot import DELAY_CAP_STEPS, DROPPED_PKTS

    ok = info["utilisation"] ** 2 / jnp.sqrt(1.0 + jnp.minimum(info["delay_steps"], DELAY_CAP_STEPS))
    s = jax.nn.sigmoid((info["drops"] - DROPPED_PKTS) / drop_width_pkts)
    return (1.0 - s) * ok - s


def train(groups: Sequence[tuple], cfg: APGConfig, progress=None, log_every: int = 10) -> dict:
    """groups: (FluidEnv, its EnvParams, SimParams stacked over the group's envs [E]).  Returns {"weights",
    "curve": [{"update", "env_steps", "surrogate", "reward", "drop_steps", "grad_norm",
    "wall_s"}], "env_steps", "wall_s", "compile_s"}."""
    env0 = groups[0][0]
    obs_dim = env0.obs_shape[0]
    if getattr(env0.formulation.reward, "name", None) != "queuepilot":
        raise ValueError(f"apg.train: the surrogate (`surrogate`) is QueuePilot's reward smoothed; "
                         f"{env0.formulation.id} is paid by {getattr(env0.formulation.reward, 'name', '?')!r}")
    for env, _, _ in groups:
        if env.obs_shape != env0.obs_shape or env.formulation.id != env0.formulation.id:
            raise ValueError("apg.train: every group must run the same formulation")
    weights = init_weights(jax.random.PRNGKey(cfg.seed), obs_dim, cfg)
    reset_all, update, opt = _programs(groups, cfg)
    opt_state = opt.init(weights)
    H = cfg.horizon
    key = jax.random.PRNGKey(cfg.seed)
    n_envs = sum(int(np.shape(sims.bottleneck_rate_bps)[0]) for _, _, sims in groups)
    t0 = time.perf_counter()
    carry = reset_all(key)
    curve = []
    per_episode = cfg.episode_steps // H
    compile_s = None
    for i in range(cfg.updates):
        if i and i % per_episode == 0:
            carry = reset_all(key)
        weights, opt_state, carry, sur, r, d, gn = update(weights, opt_state, carry, key)
        if compile_s is None:
            jax.block_until_ready(weights)
            compile_s = time.perf_counter() - t0
        if (i + 1) % log_every == 0 or i == cfg.updates - 1:
            sur, r, d, gn = (float(x) for x in (sur, r, d, gn))
            if not all(np.isfinite([sur, r, gn])):
                raise FloatingPointError(f"apg: a non-finite loss or gradient at update {i + 1}")
            curve.append({"update": i + 1, "env_steps": (i + 1) * H * n_envs, "surrogate": sur, "reward": r,
                          "drop_steps": d, "grad_norm": gn, "wall_s": time.perf_counter() - t0})
            if progress is not None:
                progress.update(i + 1, extra=f"surrogate {sur:.3f} reward {r:.3f}")
    wall = time.perf_counter() - t0
    return {"weights": jax.device_get(weights), "curve": curve, "env_steps": cfg.updates * H * n_envs,
            "num_envs": n_envs, "wall_s": wall, "compile_s": compile_s}


# the programs of the last `train` call: (its groups, its settings but the seed, the programs)
_LAST_PROGRAMS: list = []


def _programs(groups: Sequence[tuple], cfg: APGConfig):
    """(reset_all(key), update(weights, opt_state, carry, key), the optimiser) of `groups`
    and `cfg`.  The seed reaches them only as their `key` argument, so the next call for the
    same groups with the same settings but the seed (a run's next training seed) reuses
    them, traced and compiled once."""
    import optax

    from rlbm_jax.ppo.optim import clip_by_global_norm

    settings = repr(dataclasses.replace(cfg, seed=0))
    if _LAST_PROGRAMS and _LAST_PROGRAMS[0] is groups and _LAST_PROGRAMS[1] == settings:
        return _LAST_PROGRAMS[2]
    opt = optax.chain(clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))
    H = cfg.horizon

    def reset(env, ep, sims, key):
        return jax.vmap(lambda sp: env.reset_env(key, ep.replace(sim=sp)))(sims)

    def rollout(w, env, ep, sims, obs, st, key):
        def body(c, _):
            obs, st = c
            a = act(w, obs)
            obs, st, r, _, info = jax.vmap(lambda s_, a_, sp: env.step_env(key, s_, a_, ep.replace(sim=sp)))(
                st, a, sims)
            return (obs, st), (surrogate(info, cfg.drop_width_pkts), r, info["dropped_step"])

        (obs, st), (sur, r, dropped) = jax.lax.scan(body, (obs, st), None, length=H)
        return obs, st, sur.mean(), r.mean(), dropped.mean()

    def loss(w, carry, key):
        sur, rew, drop, new = [], [], [], []
        for (env, ep, sims), (obs, st) in zip(groups, carry):
            obs, st, s, r, d = rollout(w, env, ep, sims, obs, st, key)
            sur.append(s)
            rew.append(r)
            drop.append(d)
            new.append((obs, st))
        return -jnp.mean(jnp.stack(sur)), (new, jnp.mean(jnp.stack(rew)), jnp.mean(jnp.stack(drop)))

    @jax.jit
    def update(w, opt_state, carry, key):
        carry = jax.lax.stop_gradient(carry)
        (l, (new, r, d)), g = jax.value_and_grad(loss, has_aux=True)(w, carry, key)
        upd, opt_state = opt.update(g, opt_state, w)
        gn = jnp.sqrt(sum(jnp.sum(x ** 2) for x in jax.tree.leaves(g)))
        return optax.apply_updates(w, upd), opt_state, new, -l, r, d, gn

    reset_all = jax.jit(lambda key: [reset(env, ep, sims, key) for env, ep, sims in groups])
    _LAST_PROGRAMS[:] = [groups, settings, (reset_all, update, opt)]
    return reset_all, update, opt


def save(path, weights, env: FluidEnv, extra: dict | None = None) -> None:
    """A policy directory (`rlbm_jax.policy`, "mlp", tanh hidden layers, action map
    "tanh01", no observation normalisation)."""
    from rlbm_jax.policy import save_policy

    d = env.obs_shape[0]
    save_policy(path, [(np.asarray(w), np.asarray(b)) for w, b in weights], obs_mean=np.zeros(d, np.float32),
                obs_std=np.ones(d, np.float32), obs_layout=env.obs_layout, formulation=env.formulation.id,
                num_classes=env.num_classes, activation="tanh", action_map="tanh01", env=extra)
