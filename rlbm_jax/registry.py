"""`make(env_id)`: an env and its params from an id.  Every registered formulation is an
env id (`list_envs()`); ids are registered with gymnax as well, so `gymnax.make(id)`
gives the same env."""
from __future__ import annotations

from rlbm_jax import scenarios
from rlbm_jax.env import formulations
from rlbm_jax.env.randomize import RandomizedEnv, thesis_random_ranges
from rlbm_jax.env.rlbm_env import DEFAULT_FORMULATION, RLBMEnv


def make(env_id=DEFAULT_FORMULATION, *, scenario: str = "thesis", reward: str | None = None,
         randomize: bool | dict = False, agent_interval_s: float = 0.1, episode_s: float = 60.0,
         flows_scale: float = 10.0, **sim_overrides):
    """(env, params) of formulation `env_id` (an id, or a `Formulation`) on a scenario of
    `rlbm_jax.scenarios`.

    The switch runs the "rl" buffer policy, driven by the agent's action.  `reward`
    swaps the formulation's reward for a named one (`formulations.REWARDS`).
    `randomize=True` draws every episode's buffer, load and TCP from
    `scenarios.THESIS_RANDOM` (a dict gives other ranges: buffer_pkts, load, tcp,
    buffer_dist); the ring is sized for the largest buffer.  Other keyword arguments
    override the scenario's simulator parameters (`make_params` names)."""
    formulation = formulations.get(env_id) if isinstance(env_id, str) else env_id
    if reward is not None:
        formulation = formulation.with_reward(reward)
    ranges = {}
    if randomize:
        ranges, ring = thesis_random_ranges(**(randomize if isinstance(randomize, dict) else {}))
        sim_overrides = {**ring, **sim_overrides}
    sim_params = scenarios.params(scenario, **{"policy": "rl", **sim_overrides})
    env = RLBMEnv(sim_params, formulation=formulation, agent_interval_s=agent_interval_s, episode_s=episode_s,
                  flows_scale=flows_scale)
    if randomize:
        env = RandomizedEnv(env, **ranges)
    return env, env.default_params


def list_envs() -> tuple:
    """The env ids `make` takes: every registered formulation."""
    return formulations.ids()


def _register_with_gymnax(formulation) -> None:
    try:
        import gymnax
    except ImportError:  # pragma: no cover - gymnax is a dependency
        return
    register = getattr(gymnax, "register", None)  # gymnax >= 1.0.1
    if register is None or formulation.id in gymnax.registered_envs:
        return
    register(formulation.id, lambda **kw: make(formulation.id, **kw)[0])


formulations.on_register(_register_with_gymnax)
