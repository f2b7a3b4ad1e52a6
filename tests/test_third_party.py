"""A JAX RL library written elsewhere trains on the envs: rejax's PPO, which unpacks five
values from `step` and deep-copies its config (env included), through `FiveValueStep`."""
import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rejax
from gymnax.environments import spaces

import rlbm_jax
from rlbm_jax.env import FiveValueStep, SymmetricActions

ENV_IDS = ("RLBM-v0", "QueuePilot-v0")
# short episodes keep rejax's evaluation (128 episodes after every EVAL_EVERY steps) cheap:
# 20 steps of RLBM-v0 (0.1 s each), 40 of QueuePilot-v0 (its 5 ms steps)
EPISODE_S = {"RLBM-v0": 2.0, "QueuePilot-v0": 0.2}
TOTAL_STEPS = 4096
EVAL_EVERY = 2048
NUM_ENVS, NUM_STEPS = 16, 32


def five_value_env(env_id):
    """The env as a five-value trainer gets it (a Box action behind SymmetricActions, as
    trainers that clip to [-1, 1] want it), and its params."""
    env, params = rlbm_jax.make(env_id, episode_s=EPISODE_S[env_id])
    if isinstance(env.action_space(params), spaces.Box):
        env = SymmetricActions(env)
    return FiveValueStep(env), params


def test_wrappers_survive_deepcopy_and_pickle():
    env, params = rlbm_jax.make("RLBM-v0", episode_s=0.5)
    key = jax.random.PRNGKey(3)
    for w in (SymmetricActions(env), FiveValueStep(env), FiveValueStep(SymmetricActions(env))):
        for twin in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
            assert type(twin) is type(w) and type(twin._env) is type(w._env) and twin.name == w.name == "RLBM-v0"
            space, space2 = w.action_space(params), twin.action_space(params)
            assert space.shape == space2.shape and np.all(space.low == space2.low) and np.all(space.high == space2.high)
            np.testing.assert_array_equal(w.reset(key, params)[0], twin.reset(key, params)[0])
    # the copy of both wrappers steps as the original does
    twin = copy.deepcopy(w)
    state = w.reset(key, params)[1]
    action = jnp.full(w.action_space(params).shape, 0.25)
    a, b = w.step(key, state, action, params), twin.step(key, state, action, params)
    assert len(a) == len(b) == 5
    for x, y in zip(jax.tree.leaves(a[:4]), jax.tree.leaves(b[:4])):  # obs, state, reward, done
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_five_value_step_ends_episodes_as_the_six_value_step_does(env_id):
    env, params = five_value_env(env_id)  # flows have come: the last observation is not a reset's
    inner = env._env
    n = int(params.max_steps_in_episode)
    action = env.action_space(params).sample(jax.random.PRNGKey(0))
    # both steps from the same (key, state, action) in one compiled call
    both = jax.jit(lambda *a: (env.step(*a), inner.step(*a)))
    obs, state = env.reset(jax.random.PRNGKey(1), params)
    for t in range(1, n + 1):
        key = jax.random.PRNGKey(100 + t)
        (obs5, state5, reward5, done, info), (obs6, _, reward6, terminated, truncated, _) = both(
            key, state, action, params)
        np.testing.assert_array_equal(obs5, obs6)
        assert float(reward5) == float(reward6)
        assert bool(done) == (bool(terminated) or bool(truncated))
        assert bool(info["terminated"]) == bool(terminated) and bool(info["truncated"]) == bool(truncated)
        if t < n:  # mid-episode: the observation is the step's own
            assert not bool(done)
            np.testing.assert_array_equal(info["final_observation"], obs5)
        else:  # the time limit: done, and the env reset itself; the last observation is in info
            assert bool(done) and bool(info["truncated"]) and not bool(info["terminated"])
            assert int(state5.time) == 0
            assert not np.array_equal(info["final_observation"], obs5)
        state = state5


# (QueuePilot-v0, a Discrete action, trains through the README's own rejax snippet:
# tests/test_new_user.py)
@pytest.mark.parametrize("env_id", ["RLBM-v0"])
def test_rejax_ppo_trains_on_the_env(env_id):
    env, params = five_value_env(env_id)
    algo = rejax.PPO.create(env=env, env_params=params, num_envs=NUM_ENVS, num_steps=NUM_STEPS, num_epochs=2,
                            num_minibatches=4, total_timesteps=TOTAL_STEPS, eval_freq=EVAL_EVERY,
                            agent_kwargs={"hidden_layer_sizes": (32, 32)})
    assert isinstance(algo.env, FiveValueStep) and algo.env is not env  # rejax trains on its deep copy
    key = jax.random.PRNGKey(0)
    before = algo.init_state(key)  # what `train` starts from with this key
    ts, (lengths, returns) = jax.jit(algo.train)(key)
    assert int(ts.global_step) == TOTAL_STEPS  # every env step asked for was taken
    # evaluations: before training and after each EVAL_EVERY steps, 128 episodes each,
    # every one run to the time limit (these envs never terminate)
    assert lengths.shape == returns.shape == (1 + TOTAL_STEPS // EVAL_EVERY, 128)
    assert np.all(np.asarray(lengths) == int(params.max_steps_in_episode))
    assert np.all(np.isfinite(np.asarray(returns)))
    for new, old in ((ts.actor_ts.params, before.actor_ts.params), (ts.critic_ts.params, before.critic_ts.params)):
        leaves, leaves0 = jax.tree.leaves(new), jax.tree.leaves(old)
        assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves)
        assert any(not np.array_equal(x, y) for x, y in zip(leaves, leaves0))  # the updates moved the network
