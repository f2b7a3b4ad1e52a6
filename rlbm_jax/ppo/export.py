"""Write a trained actor in the deployable policy format of `rlbm_jax.policy`: a
Gaussian MLP with an action map, or a recurrent ("lstm") policy on a Discrete env."""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from rlbm_jax.policy import LSTMWeights, save_policy, save_recurrent_policy
from rlbm_jax.ppo.train import PPO

GATES = ("i", "f", "g", "o")  # flax OptimizedLSTMCell's gate order, kept in the policy file


def _formulation_action_values(form, num_classes):
    """The formulation's meaning of each discrete action, when its action part says
    (`action_values`: a sequence of floats, or a function of the class count)."""
    values = getattr(getattr(form, "action", None), "action_values", None)
    if callable(values):
        values = values(num_classes)
    return None if values is None else [float(v) for v in values]


def lstm_weights(params, hidden: Sequence[int]) -> LSTMWeights:
    """The actor of an `ActorCritic(recurrent=True)` as `LSTMWeights`: flax's per-gate
    kernels `ii, if, ig, io` / `hi, hf, hg, ho` (and the `h*` biases) concatenated in
    gate order i, f, g, o."""
    p = jax.device_get(params)["params"]
    cells = p["lstm"]
    (cell,) = cells.values()  # the one OptimizedLSTMCell under the scan
    arr = lambda x: np.asarray(x, np.float32)
    wx = np.concatenate([arr(cell[f"i{g}"]["kernel"]) for g in GATES], axis=-1)
    wh = np.concatenate([arr(cell[f"h{g}"]["kernel"]) for g in GATES], axis=-1)
    b = np.concatenate([arr(cell[f"h{g}"]["bias"]) for g in GATES], axis=-1)
    names = [f"actor_{i}" for i in range(len(hidden))] + ["actor_out"]
    return LSTMWeights((arr(p["embed"]["kernel"]), arr(p["embed"]["bias"])), wx, wh, b,
                       [(arr(p[n]["kernel"]), arr(p[n]["bias"])) for n in names])


def export_policy(ppo: PPO, params, obs_stats, path, env_info: dict | None = None,
                  action_values: Sequence[float] | None = None):
    """params/obs_stats of one seed (no seed axis).  Two kinds of run are held:
    a Gaussian MLP policy with an action map (the deterministic action is
    action_map(mean); "none": the mean), and an LSTM policy on a Discrete env (network="lstm", the env's
    action space `Discrete(n)`; the deterministic action is the argmax of the logits).
    `action_values` (optional, LSTM only) says what each action index means; without
    it the formulation's `action.action_values` is recorded when it has one."""
    cfg, adapter = ppo.cfg, ppo.adapter
    mlp = cfg.network == "mlp" and not adapter.discrete and adapter.kind == "box"
    lstm = cfg.network == "lstm" and adapter.kind == "discrete-env"
    if not (mlp or lstm):
        space = "Discrete" if adapter.kind == "discrete-env" else "Box"
        raise ValueError("export_policy: the policy format holds Gaussian MLP policies with an action map (Box "
                         "action space) and LSTM policies on a Discrete action space; this run has "
                         f"network={cfg.network!r}, a {space} action space, action={cfg.action!r}, "
                         f"action_map={cfg.action_map!r}")
    if action_values is not None and not lstm:
        raise ValueError("export_policy: action_values name the choices of a discrete (LSTM) policy")
    if ppo.obs_layout is None:
        raise ValueError("export_policy: the env names no observation layout (env.obs_layout); a deployable "
                         "policy records the observation it expects")
    if cfg.normalize_obs:
        mean = np.asarray(obs_stats.mean)
        std = np.sqrt(np.asarray(obs_stats.var) + 1e-8)
    else:
        mean = np.zeros(ppo.obs_dim, np.float32)
        std = np.ones(ppo.obs_dim, np.float32)
    form = getattr(ppo.env, "formulation", None)
    num_classes = getattr(ppo.env, "num_classes", None)
    common = dict(obs_mean=mean, obs_std=std, obs_layout=ppo.obs_layout,
                  formulation=None if form is None else form.id, num_classes=num_classes,
                  activation=cfg.activation, env=env_info or {}, obs_clip=cfg.obs_clip if cfg.normalize_obs else None)
    if lstm:
        if action_values is None and form is not None:
            action_values = _formulation_action_values(form, num_classes)
        return save_recurrent_policy(path, lstm_weights(params, cfg.hidden), action_values=action_values, **common)
    p = jax.device_get(params)["params"]
    names = [f"actor_{i}" for i in range(len(cfg.hidden))] + ["actor_out"]
    weights = [(np.asarray(p[n]["kernel"]), np.asarray(p[n]["bias"])) for n in names]
    return save_policy(path, weights, action_map=cfg.action_map, **common)
