"""Write a trained MLP actor in the deployable policy format of `rlbm_jax.policy`."""
from __future__ import annotations

import jax
import numpy as np

from rlbm_jax.policy import save_policy
from rlbm_jax.ppo.train import PPO


def export_policy(ppo: PPO, params, obs_stats, path, env_info: dict | None = None):
    """params/obs_stats of one seed (no seed axis).  Gaussian MLP policies only: the
    deterministic action is action_map(mean)."""
    cfg = ppo.cfg
    if cfg.network != "mlp" or ppo.adapter.discrete or ppo.adapter.kind != "box" or cfg.action_map == "none":
        raise ValueError("export_policy: the policy format holds Gaussian MLP policies with an action map; "
                         f"this run has network={cfg.network!r}, action={cfg.action!r}, action_map={cfg.action_map!r}")
    p = jax.device_get(params)["params"]
    names = [f"actor_{i}" for i in range(len(cfg.hidden))] + ["actor_out"]
    weights = [(np.asarray(p[n]["kernel"]), np.asarray(p[n]["bias"])) for n in names]
    if cfg.normalize_obs:
        mean = np.asarray(obs_stats.mean)
        std = np.sqrt(np.asarray(obs_stats.var) + 1e-8)
    else:
        mean = np.zeros(ppo.obs_dim, np.float32)
        std = np.ones(ppo.obs_dim, np.float32)
    if ppo.obs_layout is None:
        raise ValueError("export_policy: the env names no observation layout (env.obs_layout); a deployable "
                         "policy records the observation it expects")
    form = getattr(ppo.env, "formulation", None)
    return save_policy(path, weights, obs_mean=mean, obs_std=std, obs_layout=ppo.obs_layout,
                       formulation=None if form is None else form.id, num_classes=getattr(ppo.env, "num_classes", None),
                       activation=cfg.activation, action_map=cfg.action_map, env=env_info or {},
                       obs_clip=cfg.obs_clip if cfg.normalize_obs else None)
