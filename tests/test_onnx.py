"""ONNX export: the exported graph computes the JAX policy's action, and a file that does
not match what it will be fed is refused before anything runs."""
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from rlbm_jax.env import thesis_params
from rlbm_jax.env import formulations
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.onnx_policy import jax_policy, load_checked, to_onnx
from rlbm_jax.policy import ACTION_MAPS, load_policy, save_policy

ROOT = Path(__file__).resolve().parents[1]
P = 2
THESIS = formulations.get("RLBM-thesis-v0")


def obs_layout(num_classes):
    return list(THESIS.obs_layout(num_classes))


def obs_dim(num_classes):
    return len(obs_layout(num_classes))


def _random_policy(path, action_map, seed=0, obs_clip=5.0, activation="tanh"):
    rng = np.random.default_rng(seed)
    sizes = [obs_dim(P), 32, 16, P]
    weights = [(rng.normal(0, 1 / np.sqrt(a), (a, b)), rng.normal(0, 0.3, b)) for a, b in zip(sizes, sizes[1:])]
    return save_policy(path, weights, obs_mean=rng.normal(0, 0.5, sizes[0]), obs_std=rng.uniform(0.2, 3, sizes[0]),
                       obs_layout=obs_layout(P), formulation=THESIS.id, num_classes=P,
                       activation=activation, action_map=action_map, obs_clip=obs_clip,
                       env={"scenario": {"agent_interval_s": 0.1}})


def _recorded_observations(fn_jax, steps=40):
    """Observations of the thesis env driven by the policy itself (its own operating range)."""
    env = RLBMEnv(thesis_params(policy="rl", beta=(1.0, 0.5), load=0.8, long_flows=2, buffer_per_class_pkts=100),
                  formulation=THESIS, agent_interval_s=0.1, episode_s=10.0)
    p = env.default_params
    obs, st = env.reset(jax.random.PRNGKey(7), p)
    step = jax.jit(env.step)
    out = []
    for i in range(steps):
        out.append(np.asarray(obs))
        obs, st, *_ = step(jax.random.PRNGKey(i), st, fn_jax(obs), p)
    return np.stack(out)


@pytest.mark.parametrize("action_map,activation", [("tanh01", "tanh"), ("clip01", "relu"), ("exp2", "tanh"),
                                                       ("pow2", "tanh"), ("bdp", "tanh")])
def test_onnx_matches_jax_on_random_and_recorded_observations(tmp_path, action_map, activation):
    src = _random_policy(tmp_path / "pol", action_map, activation=activation)
    fn_jax, _ = load_policy(src)
    fn_onnx, meta = load_checked(to_onnx(src, tmp_path / "p.onnx"), num_classes=P, agent_interval_s=0.1)
    fn_graph = jax.jit(jax_policy(tmp_path / "p.onnx")[0])  # the file's graph, run by JAX (eval_ns3's JAX side)
    assert meta["obs_layout"] == obs_layout(P) and meta["action_map"] == action_map
    assert meta["formulation"] == THESIS.id and meta["action"] == THESIS.action.text
    rng = np.random.default_rng(1)
    random_obs = (rng.normal(size=(500, obs_dim(P))) * rng.choice([0.1, 1, 30], size=(500, 1))).astype(np.float32)
    recorded = _recorded_observations(jax.jit(fn_jax)).astype(np.float32)
    assert np.ptp(recorded, axis=0).max() > 0  # the env moved
    for obs in (random_obs, recorded, random_obs[:1]):  # batch is dynamic, a single row included
        np.testing.assert_allclose(fn_onnx(obs), np.asarray(fn_jax(jnp.asarray(obs))), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(fn_graph(obs)), fn_onnx(obs), rtol=1e-5, atol=1e-5)


def test_export_script_writes_the_trained_policy(tmp_path):
    out = tmp_path / "policy.onnx"
    r = subprocess.run([sys.executable, "scripts/export_onnx.py", "--checkpoint", "results/train_default",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fn_onnx, meta = load_checked(out, num_classes=2)
    policy = json.loads((ROOT / "results/train_default/policy/policy.json").read_text())
    assert meta["env"] == policy["env"] and meta["agent_interval_s"] == policy["env"]["scenario"]["agent_interval_s"]
    fn_jax, _ = load_policy(ROOT / "results/train_default/policy")
    obs = np.random.default_rng(2).normal(size=(64, obs_dim(2))).astype(np.float32)
    np.testing.assert_allclose(fn_onnx(obs), np.asarray(fn_jax(obs)), rtol=1e-5, atol=1e-5)
    bad = subprocess.run([sys.executable, "scripts/export_onnx.py", "--checkpoint", str(tmp_path), "--out",
                          str(tmp_path / "x.onnx")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "no policy found" in bad.stderr


def _tamper(src, dst, **props):
    m = onnx.load(str(src))
    kept = {p.key: p.value for p in m.metadata_props}
    for k, v in props.items():
        if v is None:
            kept.pop(f"rlbm.{k}", None)
        else:
            kept[f"rlbm.{k}"] = v
    del m.metadata_props[:]
    onnx.helper.set_model_props(m, kept)
    onnx.save(m, str(dst))
    return dst


def test_mismatched_or_malformed_onnx_files_are_refused(tmp_path):
    good = to_onnx(_random_policy(tmp_path / "pol", "tanh01"), tmp_path / "good.onnx")
    load_checked(good, num_classes=P, agent_interval_s=0.1)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not a model at all" * 10)
    cases = [
        (tmp_path / "absent.onnx", {}, "no such file"),
        (garbage, {}, "not a valid ONNX model"),
        (good, {"num_classes": 3}, "trained for 2 classes, the scenario has 3"),
        (good, {"agent_interval_s": 0.05}, "agent interval"),
        (_tamper(good, tmp_path / "fmt.onnx", format="something-else"), {}, "rlbm.format"),
        (_tamper(good, tmp_path / "nolayout.onnx", obs_layout=None), {}, "lacks rlbm.obs_layout"),
        (_tamper(good, tmp_path / "wide.onnx", obs_dim="13", num_classes="3", act_dim="3",
                 obs_layout=json.dumps(obs_layout(3))), {}, "graph takes width 10"),
        (_tamper(good, tmp_path / "layout.onnx", obs_layout=json.dumps(list(reversed(obs_layout(P))))), {},
         "not formulation RLBM-thesis-v0's"),
        (_tamper(good, tmp_path / "noform.onnx", formulation="RLBM-nonesuch-v0"), {}, "unknown formulation"),
        (good, {"formulation": "RLBM-v0"}, "trained on formulation RLBM-thesis-v0, the scenario uses RLBM-v0"),
        (_tamper(good, tmp_path / "nan.onnx", obs_dim="ten"), {}, "malformed rlbm metadata"),
    ]
    for path, kw, message in cases:
        with pytest.raises(ValueError, match=message):
            load_checked(path, **kw)
    fn, _ = load_checked(good)
    with pytest.raises(ValueError, match=r"must be \[n, 10\]"):
        fn(np.zeros((4, 9), np.float32))
    assert set(ACTION_MAPS) == {"tanh01", "clip01", "exp2", "pow2", "bdp"}  # every map has an ONNX form (parametrised above)
