"""ONNX export: the exported graph computes the JAX policy's action (an MLP's, and a
recurrent discrete policy's over a sequence with its state carried), and a file that
does not match what it will be fed is refused before anything runs."""
import dataclasses
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from gymnax.environments import spaces

import rlbm_jax
from rlbm_jax.env import thesis_params
from rlbm_jax.env import formulations
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.onnx_policy import jax_policy, load_checked, to_onnx
from rlbm_jax.env.formulations import Field
from rlbm_jax.policy import ACTION_MAPS, load_policy, load_recurrent_policy, save_policy

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
                                                       ("pow2", "tanh"), ("bdp", "tanh"), ("none", "tanh")])
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


def _export_script(monkeypatch, capsys, *args):
    """scripts/export_onnx.py run as `python scripts/export_onnx.py ARGS` runs it (as __main__,
    with that argv, from the repository's root), in this process: (exit code, stdout, stderr)."""
    import runpy

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["scripts/export_onnx.py", *map(str, args)])
    capsys.readouterr()
    try:
        runpy.run_path("scripts/export_onnx.py", run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_export_script_writes_the_trained_policy(tmp_path, monkeypatch, capsys):
    out = tmp_path / "policy.onnx"
    code, _, err = _export_script(monkeypatch, capsys, "--checkpoint", "results/train_default", "--out", out)
    assert code == 0, err
    fn_onnx, meta = load_checked(out, num_classes=2)
    policy = json.loads((ROOT / "results/train_default/policy/policy.json").read_text())
    assert meta["env"] == policy["env"] and meta["agent_interval_s"] == policy["env"]["scenario"]["agent_interval_s"]
    fn_jax, _ = load_policy(ROOT / "results/train_default/policy")
    obs = np.random.default_rng(2).normal(size=(64, obs_dim(2))).astype(np.float32)
    np.testing.assert_allclose(fn_onnx(obs), np.asarray(fn_jax(obs)), rtol=1e-5, atol=1e-5)
    code, _, err = _export_script(monkeypatch, capsys, "--checkpoint", tmp_path, "--out", tmp_path / "x.onnx")
    assert code == 2 and "no policy found" in err


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
    assert set(ACTION_MAPS) == {"tanh01", "clip01", "exp2", "pow2", "bdp", "none"}  # every map has an ONNX form (parametrised above)


# ---- recurrent (LSTM) policies on a discrete action ------------------------------------------

@dataclasses.dataclass(frozen=True)
class SharedLevel:
    """A discrete action: one of three alphas, set for every class."""

    text: str = "index into the alpha levels (0.125, 0.5, 1.0), one alpha for every class"
    action_values: tuple = (0.125, 0.5, 1.0)

    def fields(self, P):
        return (Field("alpha_level", "index", "which alpha level every class gets"),)

    def space(self, P):
        return spaces.Discrete(len(self.action_values))

    def knobs(self, action, rec, params):
        a = jnp.asarray(self.action_values, jnp.float32)[jnp.asarray(action, jnp.int32).reshape(())]
        return {"class_alpha": jnp.full((params.sim.num_classes,), a)}


LEVELS = formulations.Formulation("RLBM-toy-levels-v0", "the thesis observation, one of three alphas for all classes",
                                  formulations.ThesisObservation(), SharedLevel(), formulations.rewards.get("thesis"))
LSTM_SIZE = 16


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    """A tiny LSTM PPO trained for two updates on a discrete formulation, and its export."""
    from rlbm_jax.ppo import PPO, PPOConfig
    from rlbm_jax.ppo.export import export_policy

    if LEVELS.id not in formulations.ids():
        formulations.register(LEVELS)
    env, ep = rlbm_jax.make(LEVELS.id, episode_s=0.5, load=0.9, long_flows=2, buffer_per_class_pkts=40,
                            completion_log_size=4)
    ppo = PPO(env, ep, PPOConfig(num_envs=4, num_steps=3, total_updates=2, num_minibatches=2, network="lstm",
                                 lstm_size=LSTM_SIZE))
    assert ppo.adapter.kind == "discrete-env" and ppo.adapter.bins == 3
    ts, m = ppo.run(ppo.init(jax.random.PRNGKey(0)), 2)
    assert np.all(np.isfinite(np.asarray(m["reward_mean"])))
    tmp = tmp_path_factory.mktemp("lstm")
    path = export_policy(ppo, ts.params, ts.obs_stats, tmp / "pol", {"scenario": {"agent_interval_s": 0.1}})
    return ppo, ts, path, to_onnx(path, tmp / "lstm.onnx")


def _sequence(T=50, B=3, seed=3):
    """Raw observations [T, B, D] over several scales, and `first` [T, B]: every row starts
    at 0 and restarts at 25, row 1 also at 17."""
    rng = np.random.default_rng(seed)
    obs = (rng.normal(size=(T, B, obs_dim(P))) * rng.choice([0.1, 1, 5], size=(T, B, 1))).astype(np.float32)
    first = np.zeros((T, B), bool)
    first[0] = first[25] = True
    first[17, 1] = True
    return obs, first


def test_lstm_policy_and_onnx_reproduce_the_trained_network(lstm_run):
    ppo, ts, path, onnx_path = lstm_run
    obs, first = _sequence()
    T, B = first.shape
    carry, logits, _ = ppo.net.apply(ts.params, ppo._carry(B), ppo.normalize(ts.obs_stats, jnp.asarray(obs)),
                                     jnp.asarray(first))
    want = np.asarray(logits)[:, :, 0, :]  # [T, B, n]: the trainer's network over the sequence, resets at `first`
    c_end, h_end = (np.asarray(x) for x in carry)  # flax's carry is (c, h)
    assert np.abs(np.diff(want, axis=0)).max() > 1e-4  # the logits move with the observation and the state

    policy, _ = load_recurrent_policy(path, obs_layout=obs_layout(P), num_actions=3)
    fn_onnx, _ = load_checked(onnx_path, num_classes=P, agent_interval_s=0.1, formulation=LEVELS.id)
    fn_graph = jax.jit(jax_policy(onnx_path)[0])  # the file's graph, run by JAX
    step, logits_of = jax.jit(policy.step), jax.jit(policy.logits)
    runs = {"policy": policy.initial_state(B), "onnx": fn_onnx.initial_state(B), "graph": policy.initial_state(B)}
    for t in range(T):
        keep = (~first[t])[:, None]
        runs = {k: (h * keep, c * keep) for k, (h, c) in runs.items()}  # the caller resets at an episode's start
        h, c = runs["policy"]
        got, h2, c2 = logits_of(obs[t], h, c)
        action, _, _ = step(obs[t], h, c)
        a_onnx, ho, co, l_onnx = fn_onnx(obs[t], *runs["onnx"])
        a_graph, hg, cg, l_graph = fn_graph(obs[t], *runs["graph"])
        for lg in (got, l_onnx, l_graph):
            np.testing.assert_allclose(np.asarray(lg), want[t], rtol=1e-5, atol=1e-5)
        assert a_onnx.dtype == np.int64 and a_onnx.shape == (B,)
        for a in (action, a_onnx, a_graph):
            np.testing.assert_array_equal(np.asarray(a), want[t].argmax(-1))
        runs = {"policy": (h2, c2), "onnx": (ho, co), "graph": (hg, cg)}
    for h, c in runs.values():  # the state after the sequence is the trainer's final carry
        np.testing.assert_allclose(np.asarray(h), h_end, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(c), c_end, rtol=1e-5, atol=1e-5)
    # a batch of one, and the trainer's deterministic action on the first step
    a1, _, _, _ = fn_onnx(obs[0, :1], *fn_onnx.initial_state(1))
    _, a_env = ppo.act_deterministic(ts.params, ts.obs_stats, jnp.asarray(obs[0]), ppo._carry(B), jnp.ones(B, bool))
    assert a1[0] == np.asarray(a_env)[0] and np.asarray(a_env).shape == (B,)


def test_lstm_metadata_round_trips(lstm_run, tmp_path):
    from rlbm_jax.ppo.export import export_policy

    ppo, ts, path, onnx_path = lstm_run
    meta = json.loads((path / "policy.json").read_text())
    assert {k: meta[k] for k in ("network", "lstm_size", "action", "action_map", "num_actions", "act_dim",
                                 "action_values", "formulation", "num_classes", "obs_layout", "layers")} == {
        "network": "lstm", "lstm_size": LSTM_SIZE, "action": "discrete", "action_map": "argmax", "num_actions": 3,
        "act_dim": 1, "action_values": [0.125, 0.5, 1.0], "formulation": LEVELS.id, "num_classes": P,
        "obs_layout": obs_layout(P), "layers": 3}  # actor_0, actor_1, actor_out
    props = {p.key: p.value for p in onnx.load(str(onnx_path)).metadata_props}
    assert props["rlbm.network"] == "lstm" and props["rlbm.lstm_size"] == str(LSTM_SIZE)
    assert props["rlbm.num_actions"] == "3" and json.loads(props["rlbm.action_values"]) == [0.125, 0.5, 1.0]
    _, m = load_checked(onnx_path)
    assert m["network"] == "lstm" and m["lstm_size"] == LSTM_SIZE and m["num_actions"] == 3
    assert m["action_values"] == [0.125, 0.5, 1.0] and m["obs_layout"] == obs_layout(P)
    assert m["action"] == LEVELS.action.text and m["formulation"] == LEVELS.id and m["act_dim"] == 1
    assert m["env"] == meta["env"] and m["agent_interval_s"] == 0.1
    policy, _ = load_recurrent_policy(path)
    np.testing.assert_allclose(np.asarray(policy.values(jnp.array([2, 0]))), [1.0, 0.125])
    # action_values given to the export win over the formulation's; a wrong count is refused
    other = export_policy(ppo, ts.params, ts.obs_stats, tmp_path / "other", action_values=[1, 2, 3])
    assert load_recurrent_policy(other)[1]["action_values"] == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="2 action_values for 3 actions"):
        export_policy(ppo, ts.params, ts.obs_stats, tmp_path / "bad", action_values=[1, 2])
    # MLP files are as before recurrent policies (no `network`), and read as "mlp"
    mlp = _random_policy(tmp_path / "mlp", "tanh01")
    assert "network" not in json.loads((mlp / "policy.json").read_text())
    assert load_policy(mlp)[1]["network"] == "mlp"
    mlp_onnx = to_onnx(mlp, tmp_path / "mlp.onnx")
    assert not any(p.key == "rlbm.network" for p in onnx.load(str(mlp_onnx)).metadata_props)
    assert load_checked(mlp_onnx)[1]["network"] == "mlp"


def test_lstm_policy_refuses_bad_inputs_and_mismatched_files(lstm_run, tmp_path):
    from rlbm_jax.ppo import PPO, PPOConfig
    from rlbm_jax.ppo.export import export_policy

    ppo, ts, path, good = lstm_run
    policy, _ = load_recurrent_policy(path)
    fn, _ = load_checked(good)
    h, c = policy.initial_state(4)
    with pytest.raises(ValueError, match=r"observations must be \[batch, 10\], got \(4, 9\)"):
        policy.step(np.zeros((4, 9), np.float32), h, c)
    with pytest.raises(ValueError, match=r"state h and c must be \[batch, 16\]"):
        policy.step(np.zeros((4, 10), np.float32), h[:, :8], c)
    with pytest.raises(ValueError, match=r"observations must be \[n, 10\], got \(4, 9\)"):
        fn(np.zeros((4, 9), np.float32), h, c)
    with pytest.raises(ValueError, match=r"state h_in and c_in must be \[n, 16\]"):
        fn(np.zeros((4, 10), np.float32), h, np.zeros((3, 16), np.float32))
    with pytest.raises(ValueError, match="is recurrent.*load_recurrent_policy"):
        load_policy(path)
    with pytest.raises(ValueError, match="chooses among 3 actions, the env has 2"):
        load_recurrent_policy(path, num_actions=2)
    with pytest.raises(ValueError, match="first differ at entry 0"):
        load_recurrent_policy(path, obs_layout=list(reversed(obs_layout(P))))
    cases = [
        (good, {"num_classes": 3}, "trained for 2 classes, the scenario has 3"),
        (good, {"formulation": THESIS.id}, f"trained on formulation {LEVELS.id}"),
        (_tamper(good, tmp_path / "n4.onnx", num_actions="4"), {}, "discrete policy of 4 actions"),
        (_tamper(good, tmp_path / "h8.onnx", lstm_size="8"), {}, "graph widths"),
        (_tamper(good, tmp_path / "nosize.onnx", lstm_size=None), {}, "lacks rlbm.lstm_size"),
        (_tamper(good, tmp_path / "gru.onnx", network="gru"), {}, "rlbm.network is 'gru'"),
        (_tamper(good, tmp_path / "mlp.onnx", network="mlp"), {}, "continuous .mlp. policy; formulation"),
        (_tamper(good, tmp_path / "thesis.onnx", formulation=THESIS.id), {}, "not formulation RLBM-thesis-v0's"),
        (_tamper(good, tmp_path / "vals.onnx", action_values="[1, 2]"), {}, "action_values has 2 entries"),
    ]
    for p, kw, message in cases:
        with pytest.raises(ValueError, match=message):
            load_checked(p, **kw)
    # what the format still cannot hold is refused by name
    thesis_env, thesis_p = rlbm_jax.make(THESIS.id, episode_s=0.5)
    lstm_box = PPO(thesis_env, thesis_p, PPOConfig(num_envs=4, num_steps=3, num_minibatches=2, network="lstm"))
    mlp_discrete = PPO(ppo.env, ppo.env_params, PPOConfig(num_envs=4, num_steps=3, num_minibatches=2))
    for run, what in ((lstm_box, "network='lstm', a Box action space"), (mlp_discrete, "network='mlp', a Discrete")):
        with pytest.raises(ValueError, match=f"LSTM policies on a Discrete action space; this run has {what}"):
            export_policy(run, None, None, tmp_path / "x")


def test_export_script_writes_an_lstm_policy(lstm_run, tmp_path, monkeypatch, capsys):
    _, _, path, _ = lstm_run
    out = tmp_path / "lstm.onnx"
    # the script itself, in this process, where `lstm_run` registered this module's discrete formulation
    assert LEVELS.id in formulations.ids()
    code, stdout, err = _export_script(monkeypatch, capsys, "--checkpoint", path, "--out", out)
    assert code == 0, err
    assert "h_out, c_out, logits" in stdout and "argmax agreement 1.000" in stdout, stdout
    assert load_checked(out)[1]["num_actions"] == 3
