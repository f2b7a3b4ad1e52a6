"""Deployable agent policies: a small file format and a jittable loader.

A policy directory holds `policy.json` (architecture, action mapping, observation
normalisation, the env it was trained for) and `policy.npz` (layer weights
`w0, b0, w1, b1, ...`).  The deterministic action is the network's mean output
mapped into [0, 1]: "tanh01" maps x to (tanh(x) + 1) / 2, "clip01" clips x, and
"exp2" maps x to 2 ** (4 * (tanh(x) - 1)), a log scale over (1/256, 1) for
thresholds that span orders of magnitude (x = 0 gives 1/16); "pow2" maps x to
2 ** clip(x, -8, 0), the same scale but linear in x, so a Gaussian policy explores
thresholds by the same factor (2 ** std) whatever its mean below 1.
"bdp" is for RLBMEnv's observation (`rlbm_jax.env.rlbm_env`, P classes): x_c is
log2 of class c's threshold in BDPs, and the map returns the alpha that gives it,
    alpha_c = clip(2 ** x_c / (beta_c * free * B/BDP), 0, 1)
with beta, the free fraction and B/BDP read from the observation (columns 0..P-1,
2P and 3P+3), so that alpha_c * beta_c * (B - Q) = 2 ** x_c BDPs.  A threshold in
BDPs means the same at every buffer size, where alpha for it spans 100 x.
Every map is fn(x [..., P], obs [..., D]) -> action; only "bdp" reads obs.
The trainer writes this format; `scripts/simulate.py --policy DIR` reads it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from rlbm_jax.env.rlbm_env import obs_dim, threshold_columns

FORMAT = "rlbm-policy-v1"
ACTIVATIONS = {"tanh": jnp.tanh, "relu": lambda x: jnp.maximum(x, 0.0)}
POW2_LOG2_RANGE = (-8.0, 0.0)  # "pow2": alpha from 1/256 to 1
BDP_LOG2_RANGE = (-4.0, 6.0)  # "bdp": thresholds from 1/16 to 64 BDPs


def _bdp_map(x, obs):
    p = x.shape[-1]
    if obs is None or obs.shape[-1] != obs_dim(p):
        raise ValueError(f"action map 'bdp' needs RLBMEnv's observation of width 3P + 4 = {obs_dim(p)}, "
                         f"got {None if obs is None else obs.shape[-1]}")
    beta_cols, free_col, bb_col = threshold_columns(p)
    room_bdp = obs[..., beta_cols] * (obs[..., free_col] * obs[..., bb_col])[..., None]
    return jnp.clip(jnp.exp2(jnp.clip(x, *BDP_LOG2_RANGE)) / jnp.maximum(room_bdp, 1e-6), 0.0, 1.0)


class ActionMap(NamedTuple):
    fn: Callable  # fn(x, obs) -> action
    inverse: Callable  # the pre-map x that fn sends to a (a strictly inside `reach`); for "bdp" a is in BDPs
    reach: tuple  # the open interval of actions (for "bdp": thresholds in BDPs) the map reaches


_MAPS = {
    "tanh01": ActionMap(lambda x, obs=None: (jnp.tanh(x) + 1.0) / 2.0, lambda a: float(np.arctanh(2.0 * a - 1.0)),
                        (0.0, 1.0)),
    "clip01": ActionMap(lambda x, obs=None: jnp.clip(x, 0.0, 1.0), float, (0.0, 1.0)),
    "exp2": ActionMap(lambda x, obs=None: jnp.exp2(4.0 * (jnp.tanh(x) - 1.0)),
                      lambda a: float(np.arctanh(1.0 + np.log2(a) / 4.0)), (2.0 ** -8, 1.0)),
    "pow2": ActionMap(lambda x, obs=None: jnp.exp2(jnp.clip(x, *POW2_LOG2_RANGE)), lambda a: float(np.log2(a)),
                      tuple(2.0 ** b for b in POW2_LOG2_RANGE)),
    "bdp": ActionMap(_bdp_map, lambda a: float(np.log2(a)), tuple(2.0 ** b for b in BDP_LOG2_RANGE)),
}
ACTION_MAPS = {k: m.fn for k, m in _MAPS.items()}


def map_inverse(name: str, a: float) -> float:
    """The pre-map value that action map `name` sends to `a`."""
    return _MAPS[name].inverse(float(a))


def map_reach(name: str) -> tuple:
    """The open interval of actions action map `name` reaches."""
    return _MAPS[name].reach


def save_policy(path, weights, *, obs_mean, obs_std, activation="tanh", action_map="tanh01", env=None,
                obs_clip=None):
    """weights: list of (W [in, out], b [out]) for each dense layer.  The network sees
    clip((obs - obs_mean) / obs_std, -obs_clip, obs_clip) (no clip when obs_clip is None)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, (w, b) in enumerate(weights):
        arrays[f"w{i}"] = np.asarray(w, np.float32)
        arrays[f"b{i}"] = np.asarray(b, np.float32)
    np.savez(path / "policy.npz", **arrays)
    meta = {"format": FORMAT, "layers": len(weights), "activation": activation, "action_map": action_map,
            "obs_dim": int(np.asarray(weights[0][0]).shape[0]), "act_dim": int(np.asarray(weights[-1][0]).shape[1]),
            "obs_mean": np.asarray(obs_mean, np.float32).tolist(), "obs_std": np.asarray(obs_std, np.float32).tolist(),
            "obs_clip": None if obs_clip is None else float(obs_clip), "env": env or {}}
    (path / "policy.json").write_text(json.dumps(meta, indent=2))
    return path


def read_policy(path):
    """(layers [(W [in, out], b [out]) as float32 numpy], metadata) of a policy directory,
    after checking its format, activation and action map."""
    path = Path(path)
    meta_f = path / "policy.json"
    if not meta_f.is_file():
        raise ValueError(f"policy: {path} is not a policy directory (no policy.json)")
    meta = json.loads(meta_f.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"policy: {meta_f} has format {meta.get('format')!r}, expected {FORMAT!r}")
    if meta["activation"] not in ACTIVATIONS or meta["action_map"] not in ACTION_MAPS:
        raise ValueError(f"policy: unknown activation or action_map in {meta_f}")
    data = np.load(path / "policy.npz")
    return [(np.asarray(data[f"w{i}"], np.float32), np.asarray(data[f"b{i}"], np.float32))
            for i in range(meta["layers"])], meta


def load_policy(path, obs_dim: int | None = None, act_dim: int | None = None):
    """Return (fn(obs [..., obs_dim]) -> action [..., act_dim], metadata); checks the shapes."""
    arrays, meta = read_policy(path)
    layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in arrays]
    if obs_dim is not None and layers[0][0].shape[0] != obs_dim:
        raise ValueError(f"policy: expects observations of width {layers[0][0].shape[0]}, the env gives {obs_dim}")
    if act_dim is not None and layers[-1][0].shape[1] != act_dim:
        raise ValueError(f"policy: produces {layers[-1][0].shape[1]} actions, the env takes {act_dim}")
    mean = jnp.asarray(meta["obs_mean"], jnp.float32)
    std = jnp.asarray(meta["obs_std"], jnp.float32)
    clip = meta.get("obs_clip")
    act = ACTIVATIONS[meta["activation"]]
    out_map = ACTION_MAPS[meta["action_map"]]

    def fn(obs):
        x = (obs - mean) / jnp.maximum(std, 1e-8)
        if clip is not None:
            x = jnp.clip(x, -clip, clip)
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = act(x)
        return out_map(x, obs)

    return fn, meta
