"""Deployable agent policies: a small file format and a jittable loader.

A policy directory holds `policy.json` (architecture, action mapping, observation
normalisation, the formulation and observation layout it was trained on, the env) and
`policy.npz` (layer weights `w0, b0, w1, b1, ...`).  The deterministic action is the
network's mean output mapped into the env's action: "tanh01" maps x to (tanh(x) + 1) / 2,
"clip01" clips x to [0, 1], and "exp2" maps x to 2 ** (4 * (tanh(x) - 1)), a log scale
over (1/256, 1) for thresholds that span orders of magnitude (x = 0 gives 1/16);
"pow2" maps x to 2 ** clip(x, -8, 0), the same scale but linear in x, so a Gaussian
policy explores thresholds by the same factor (2 ** std) whatever its mean below 1.
"bdp" is for observations that carry the rl threshold's scale (the thesis
formulation's, `rlbm_jax.env.formulations.thesis`, P classes): x_c is log2 of class
c's threshold in BDPs, and the map returns the alpha that gives it,
    alpha_c = clip(2 ** x_c / (beta_c * free * B/BDP), 0, 1)
with beta_c, the free fraction and B/BDP read from the observation by name
(`beta_c*`, `free_buffer_fraction`, `buffer_bdp`), so that alpha_c * beta_c * (B - Q) =
2 ** x_c BDPs.  A threshold in BDPs means the same at every buffer size, where alpha for
it spans 100 x.  `build_action_map(name, layout)` gives fn(x [..., A], obs [..., D]) -> action;
only "bdp" reads obs, and it refuses a layout without those entries.
The trainer writes this format; `scripts/simulate.py --policy DIR` reads it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

FORMAT = "rlbm-policy-v1"
ACTIVATIONS = {"tanh": jnp.tanh, "relu": lambda x: jnp.maximum(x, 0.0)}
POW2_LOG2_RANGE = (-8.0, 0.0)  # "pow2": alpha from 1/256 to 1
BDP_LOG2_RANGE = (-4.0, 6.0)  # "bdp": thresholds from 1/16 to 64 BDPs


def bdp_columns(layout: Sequence[str] | None, num_actions: int) -> tuple:
    """Columns of (beta per class [A], free fraction, B/BDP) in an observation layout, for
    the "bdp" map; a ValueError names what is missing."""
    need = [f"beta_c{c}" for c in range(num_actions)] + ["free_buffer_fraction", "buffer_bdp"]
    have = list(layout or [])
    missing = [n for n in need if n not in have]
    if missing:
        raise ValueError(f"action map 'bdp' reads {need} from the observation; "
                         + ("the env names no observation layout" if layout is None
                            else f"this observation lacks {missing}"))
    idx = [have.index(n) for n in need]
    return idx[:num_actions], idx[num_actions], idx[num_actions + 1]


def _bdp_build(layout):
    def fn(x, obs):
        beta_cols, free_col, bb_col = bdp_columns(layout, x.shape[-1])
        room_bdp = obs[..., beta_cols] * (obs[..., free_col] * obs[..., bb_col])[..., None]
        return jnp.clip(jnp.exp2(jnp.clip(x, *BDP_LOG2_RANGE)) / jnp.maximum(room_bdp, 1e-6), 0.0, 1.0)

    return fn


def _pure(f):
    return lambda layout: (lambda x, obs=None: f(x))


class ActionMap(NamedTuple):
    build: Callable  # build(layout) -> fn(x, obs) -> action
    inverse: Callable  # the pre-map x that fn sends to a (a strictly inside `reach`); for "bdp" a is in BDPs
    reach: tuple  # the open interval of actions (for "bdp": thresholds in BDPs) the map reaches
    reads_obs: bool = False


_MAPS = {
    "tanh01": ActionMap(_pure(lambda x: (jnp.tanh(x) + 1.0) / 2.0), lambda a: float(np.arctanh(2.0 * a - 1.0)),
                        (0.0, 1.0)),
    "clip01": ActionMap(_pure(lambda x: jnp.clip(x, 0.0, 1.0)), float, (0.0, 1.0)),
    "exp2": ActionMap(_pure(lambda x: jnp.exp2(4.0 * (jnp.tanh(x) - 1.0))),
                      lambda a: float(np.arctanh(1.0 + np.log2(a) / 4.0)), (2.0 ** -8, 1.0)),
    "pow2": ActionMap(_pure(lambda x: jnp.exp2(jnp.clip(x, *POW2_LOG2_RANGE))), lambda a: float(np.log2(a)),
                      tuple(2.0 ** b for b in POW2_LOG2_RANGE)),
    "bdp": ActionMap(_bdp_build, lambda a: float(np.log2(a)), tuple(2.0 ** b for b in BDP_LOG2_RANGE), True),
}
ACTION_MAPS = tuple(_MAPS)


def build_action_map(name: str, layout: Sequence[str] | None = None, num_actions: int | None = None) -> Callable:
    """fn(x, obs) -> action of map `name` for observations with entry names `layout`
    (checked now when the map reads the observation and `num_actions` is given)."""
    if name not in _MAPS:
        raise ValueError(f"unknown action map {name!r}; choose one of {', '.join(_MAPS)}")
    m = _MAPS[name]
    if m.reads_obs and num_actions is not None:
        bdp_columns(layout, num_actions)
    return m.build(None if layout is None else tuple(layout))


def map_inverse(name: str, a: float) -> float:
    """The pre-map value that action map `name` sends to `a`."""
    return _MAPS[name].inverse(float(a))


def map_reach(name: str) -> tuple:
    """The open interval of actions action map `name` reaches."""
    return _MAPS[name].reach


def save_policy(path, weights, *, obs_mean, obs_std, obs_layout: Sequence[str], formulation: str | None = None,
                num_classes: int | None = None, activation="tanh", action_map="tanh01", env=None, obs_clip=None):
    """weights: list of (W [in, out], b [out]) for each dense layer.  The network sees
    clip((obs - obs_mean) / obs_std, -obs_clip, obs_clip) (no clip when obs_clip is None).
    `obs_layout` names the observation's entries (the formulation's, `Formulation.obs_layout`);
    `formulation` (its id) and `num_classes` say which env it drives."""
    path = Path(path)
    obs_dim = int(np.asarray(weights[0][0]).shape[0])
    act_dim = int(np.asarray(weights[-1][0]).shape[1])
    obs_layout = [str(n) for n in obs_layout]
    if len(obs_layout) != obs_dim:
        raise ValueError(f"policy: obs_layout names {len(obs_layout)} entries, the network takes {obs_dim}")
    build_action_map(action_map, obs_layout, act_dim)  # refuses a map this layout cannot feed
    path.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, (w, b) in enumerate(weights):
        arrays[f"w{i}"] = np.asarray(w, np.float32)
        arrays[f"b{i}"] = np.asarray(b, np.float32)
    np.savez(path / "policy.npz", **arrays)
    meta = {"format": FORMAT, "layers": len(weights), "activation": activation, "action_map": action_map,
            "obs_dim": obs_dim, "act_dim": act_dim, "formulation": formulation,
            "num_classes": None if num_classes is None else int(num_classes), "obs_layout": obs_layout,
            "obs_mean": np.asarray(obs_mean, np.float32).tolist(), "obs_std": np.asarray(obs_std, np.float32).tolist(),
            "obs_clip": None if obs_clip is None else float(obs_clip), "env": env or {}}
    (path / "policy.json").write_text(json.dumps(meta, indent=2))
    return path


def read_policy(path):
    """(layers [(W [in, out], b [out]) as float32 numpy], metadata) of a policy directory,
    after checking its format, activation, action map and observation layout."""
    path = Path(path)
    meta_f = path / "policy.json"
    if not meta_f.is_file():
        raise ValueError(f"policy: {path} is not a policy directory (no policy.json)")
    meta = json.loads(meta_f.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"policy: {meta_f} has format {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("activation") not in ACTIVATIONS or meta.get("action_map") not in ACTION_MAPS:
        raise ValueError(f"policy: unknown activation or action_map in {meta_f}")
    layout = meta.get("obs_layout")
    if not isinstance(layout, list) or len(layout) != meta.get("obs_dim"):
        raise ValueError(f"policy: {meta_f} has no obs_layout of {meta.get('obs_dim')} entry names (the "
                         "formulation's Formulation.obs_layout); without it the observation it expects is unknown")
    data = np.load(path / "policy.npz")
    return [(np.asarray(data[f"w{i}"], np.float32), np.asarray(data[f"b{i}"], np.float32))
            for i in range(meta["layers"])], meta


def check_layout(expected: Sequence[str], given: Sequence[str], what: str = "policy") -> None:
    """Refuse an observation whose entries differ from the ones a policy was trained on."""
    expected, given = list(expected), list(given)
    if expected == given:
        return
    diff = next((i for i, (a, b) in enumerate(zip(expected, given)) if a != b), min(len(expected), len(given)))
    raise ValueError(f"{what}: expects observations of width {len(expected)}, the env gives width {len(given)}; "
                     f"they first differ at entry {diff}: {expected[diff] if diff < len(expected) else None!r} "
                     f"expected, {given[diff] if diff < len(given) else None!r} given")


def load_policy(path, obs_layout: Sequence[str] | None = None, act_dim: int | None = None):
    """Return (fn(obs [..., obs_dim]) -> action [..., act_dim], metadata); checks that the
    env's observation layout and action size are the policy's."""
    arrays, meta = read_policy(path)
    layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in arrays]
    if obs_layout is not None:
        check_layout(meta["obs_layout"], obs_layout)
    if act_dim is not None and layers[-1][0].shape[1] != act_dim:
        raise ValueError(f"policy: produces {layers[-1][0].shape[1]} actions, the env takes {act_dim}")
    mean = jnp.asarray(meta["obs_mean"], jnp.float32)
    std = jnp.asarray(meta["obs_std"], jnp.float32)
    clip = meta.get("obs_clip")
    act = ACTIVATIONS[meta["activation"]]
    out_map = build_action_map(meta["action_map"], meta["obs_layout"], meta["act_dim"])

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
