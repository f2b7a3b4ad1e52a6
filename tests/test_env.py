"""RLBMEnv: gymnax API, compile-once, truncation (visible to 5-value trainers through
gymnax's own wrapper), the thesis reward, gradients refused, symmetric actions."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.wrappers.compat import LegacyStepAPIWrapper

from rlbm_jax.env import NotDifferentiableError, RLBMEnv, SymmetricActions, thesis_params


@pytest.fixture(scope="module")
def env():
    # a busy, short scenario: 0.3 s episodes of 0.1 s intervals
    return RLBMEnv(thesis_params(policy="rl", load=0.9, long_flows=2, buffer_per_class_pkts=50),
                   formulation="RLBM-thesis-v0", agent_interval_s=0.1, episode_s=0.3)


def test_spaces_and_shapes(env):
    p = env.default_params
    obs, state = env.reset(jax.random.PRNGKey(0), p)
    assert obs.shape == env.observation_space(p).shape == (10,) == (len(env.obs_layout),)
    assert env.action_space(p).shape == (2,) and env.num_actions == 2
    assert env.observation_space(p).contains(obs)
    np.testing.assert_allclose(np.asarray(obs[:2]), [1.0, 0.5])  # beta
    assert env.name == "RLBM-thesis-v0" and env.obs_layout[:2] == ("beta_c0", "beta_c1")
    out = env.step(jax.random.PRNGKey(1), state, env.action_space(p).sample(jax.random.PRNGKey(2)), p)
    assert len(out) == 6
    obs2, state2, reward, terminated, truncated, info = out
    assert obs2.shape == (10,) and reward.shape == () and bool(terminated) is False
    assert int(state2.time) == 1


def test_step_and_reset_compile_once(env, monkeypatch):
    traces = {"step": 0, "reset": 0}
    orig_step, orig_reset = RLBMEnv.step_env, RLBMEnv.reset_env

    def step_env(self, *a):
        traces["step"] += 1
        return orig_step(self, *a)

    def reset_env(self, *a):
        traces["reset"] += 1
        return orig_reset(self, *a)

    monkeypatch.setattr(RLBMEnv, "step_env", step_env)
    monkeypatch.setattr(RLBMEnv, "reset_env", reset_env)
    e = RLBMEnv(env.default_params.sim, formulation="RLBM-thesis-v0", agent_interval_s=0.05, episode_s=1.0)
    p = e.default_params
    reset = jax.jit(e.reset)
    step = jax.jit(e.step)
    obs, st = reset(jax.random.PRNGKey(0), p)
    for i in range(4):
        obs, st, r, term, trunc, info = step(jax.random.PRNGKey(i), st, jnp.full((2,), 0.25 * i), p)
    obs, st = reset(jax.random.PRNGKey(5), p)
    # one trace of reset for `reset`, one of step_env plus one of the auto-reset inside `step`
    assert traces["step"] == 1
    assert traces["reset"] == 2


def test_truncation_auto_resets_and_reaches_a_five_value_trainer(env):
    """gymnax's own LegacyStepAPIWrapper folds truncation into `done` and keeps
    `truncated` and `final_observation` in info, so a 5-value trainer can bootstrap."""
    p = env.default_params
    assert p.max_steps_in_episode == 3
    obs, st = env.reset(jax.random.PRNGKey(0), p)
    flags = []
    for i in range(4):
        obs, st, r, term, trunc, info = env.step(jax.random.PRNGKey(i), st, jnp.ones(2), p)
        flags.append((bool(term), bool(trunc), int(st.time)))
    assert flags == [(False, False, 1), (False, False, 2), (False, True, 0), (False, False, 1)]
    legacy = LegacyStepAPIWrapper(env)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs, st = jax.vmap(legacy.reset, in_axes=(0, None))(keys, p)
    for i in range(3):
        out = jax.vmap(legacy.step, in_axes=(0, 0, 0, None))(keys, st, jnp.ones((3, 2)), p)
        assert len(out) == 5
        obs2, st, r, done, info = out
    assert done.all() and info["truncated"].all() and not info["terminated"].any()
    # the observation the episode ended in, not the reset one that replaced it
    assert info["final_observation"].shape == (3, 10)
    assert not np.allclose(np.asarray(info["final_observation"]), np.asarray(obs2))


def test_thesis_reward_definition_and_empty_interval_choice(env):
    p = env.default_params
    obs, st = env.reset(jax.random.PRNGKey(3), p)
    seen_empty = seen_done = False
    step = jax.jit(env.step)
    for i in range(80):
        if seen_empty and seen_done:
            break
        _, st, r, _, trunc, info = step(jax.random.PRNGKey(i), st, jnp.array([1.0, 0.5]), p)
        thr = float(info["throughput"])
        assert 0.0 <= thr <= 1.0
        if int(info["flows_done"]) == 0:
            # documented choice: no finished flow -> slowdown term 0 (WFS = 1)
            assert float(info["worst_slowdown"]) == 1.0
            np.testing.assert_allclose(float(r), np.log1p(thr), rtol=1e-6, atol=1e-7)
            seen_empty = True
        else:
            wfs = float(info["worst_slowdown"])
            assert wfs >= 1.0
            np.testing.assert_allclose(float(r), -np.log(wfs) + np.log1p(thr), rtol=1e-5, atol=1e-6)
            seen_done = True
    assert seen_empty and seen_done


def test_action_changes_dynamics(env):
    """alpha = 0 admits nothing once the buffer holds anything; alpha = 1 keeps the link busy."""
    p = env.default_params
    rewards = {}
    for a in (0.02, 1.0):
        obs, st = env.reset(jax.random.PRNGKey(0), p)
        thr = []
        for i in range(2):
            obs, st, r, *_, info = env.step(jax.random.PRNGKey(i), st, jnp.full((2,), a), p)
            thr.append(float(info["throughput"]))
        rewards[a] = np.mean(thr)
    assert rewards[1.0] > rewards[0.02]


def test_gradients_through_the_env_are_refused(env):
    """The transitions are discrete, so a gradient through them would be zero (w.r.t. the
    action) or wrong (w.r.t. the load); the env says so instead of returning a number."""
    p = env.default_params
    obs, st = env.reset(jax.random.PRNGKey(0), p)
    assert env.supports_transition_gradients is False
    with pytest.raises(ValueError, match="transition gradients"):
        env.with_transition_gradients()
    reward_of_action = lambda a: env.step_env(jax.random.PRNGKey(1), st, a, p)[2]
    reward_of_load = lambda load: env.step_env(jax.random.PRNGKey(1), st, jnp.ones(2),
                                               p.replace(sim=p.sim.replace(load=load)))[2]
    with pytest.raises(NotDifferentiableError, match="not differentiable"):
        jax.grad(reward_of_action)(jnp.full((2,), 0.5))
    with pytest.raises(NotDifferentiableError, match="not differentiable"):
        jax.grad(reward_of_load)(jnp.float32(0.9))
    with pytest.raises(NotDifferentiableError):
        jax.grad(lambda load: env.reset(jax.random.PRNGKey(0), p.replace(sim=p.sim.replace(load=load)))[0].sum())(
            jnp.float32(0.9))
    with pytest.raises(NotDifferentiableError):
        jax.jvp(reward_of_action, (jnp.full((2,), 0.5),), (jnp.ones(2),))
    # without a derivative the guard is the identity: the same step, the same reward
    r1, r2 = (float(jax.jit(reward_of_action)(jnp.full((2,), 0.5))) for _ in range(2))
    assert r1 == r2 and np.isfinite(r1)


def test_symmetric_actions_map_minus_one_to_one_onto_the_alpha_range(env):
    """Behind SymmetricActions, [-1, 1] is the whole action range: 0 is alpha 0.5, not a
    blocked class, so a purejaxrl-style ClipAction(-1, 1) and a policy starting at 0 work."""
    sym = SymmetricActions(env)
    p = env.default_params
    space = sym.action_space(p)
    assert (float(space.low), float(space.high)) == (-1.0, 1.0)
    np.testing.assert_allclose(np.asarray(sym.to_env(jnp.array([-1.0, 0.0]))), [0.0, 0.5])
    np.testing.assert_allclose(np.asarray(sym.to_env(jnp.array([1.0, 3.0]))), [1.0, 1.0])
    obs, st = sym.reset(jax.random.PRNGKey(0), p)
    _, st2, *_ = sym.step(jax.random.PRNGKey(1), st, jnp.array([0.0, -0.5]), p)
    np.testing.assert_allclose(np.asarray(st2.sim.rl_alpha), [0.5, 0.25])
    assert sym.obs_layout == env.obs_layout  # everything else is the env's
