"""`make(env_id)`: an env and its params from an id.  Every registered formulation is an
env id (`list_envs()`); ids are registered with gymnax as well, so `gymnax.make(id)`
gives the same env."""
from __future__ import annotations

from rlbm_jax import scenarios
from rlbm_jax.env import formulations
from rlbm_jax.env.randomize import RandomizedEnv, thesis_random_ranges
from rlbm_jax.env.rlbm_env import DEFAULT_FORMULATION, RLBMEnv


def make(env_id=DEFAULT_FORMULATION, *, scenario: str | None = None, reward: str | None = None,
         randomize: bool | dict = False, agent_interval_s: float | None = None, episode_s: float = 60.0,
         flows_scale: float = 10.0, backend: str | None = None, **sim_overrides):
    """(env, params) of formulation `env_id` (an id, or a `Formulation`) on a scenario of
    `rlbm_jax.scenarios` (unset: the formulation's own, `Formulation.scenario`: "thesis" for
    the RLBM ids, "queuepilot" for QueuePilot's), stepping every `agent_interval_s` (unset:
    the formulation's, 0.1 s or QueuePilot's 5 ms, or LFQ's 10 packet slots: `Formulation.ticks_per_step`).

    The switch runs the buffer policy that the formulation's action drives (`agent_policy`:
    "rl" for the class thresholds, "rl-mark" for a marking probability) unless `policy` is
    given.  `reward`
    swaps the formulation's reward for a named one (`formulations.REWARDS`).
    `randomize=True` draws every episode's buffer, load and TCP from
    `scenarios.THESIS_RANDOM` (a dict gives other ranges: buffer_pkts, load, tcp,
    buffer_dist); the ring is sized for the largest buffer.  Other keyword arguments
    override the scenario's simulator parameters (`make_params` names).

    `backend`: None, "auto", "jax" or "native" step the packet simulator (`RLBMEnv`, through
    `backends.run`: None and "auto" the process's default); "fluid" the fluid model
    (`rlbm_jax.env.fluid_env.FluidEnv`: differentiable, long-lived flows only, so e.g.
    `make("QueuePilot-continuous-v0", scenario="queuepilot", load=0, backend="fluid")`),
    which refuses by name what it cannot represent."""
    from rlbm_jax.env import backends

    if backend is not None and backend not in backends.NAMES:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(backends.NAMES)}")
    formulation = formulations.get(env_id) if isinstance(env_id, str) else env_id
    scenario = formulation.scenario if scenario is None else scenario
    # a formulation whose interval is a tick count (LFQ's 10 packet slots) keeps it unless told seconds
    ticks_per_step = formulation.ticks_per_step if agent_interval_s is None else 0
    agent_interval_s = formulation.agent_interval_s if agent_interval_s is None else agent_interval_s
    if reward is not None:
        formulation = formulation.with_reward(reward)
    ranges = {}
    if randomize:
        ranges, ring = thesis_random_ranges(**(randomize if isinstance(randomize, dict) else {}))
        sim_overrides = {**ring, **sim_overrides}
    if "policy" not in sim_overrides:
        sim_overrides = {**sim_overrides, "policy": agent_policy(formulation, scenario, sim_overrides)}
    sim_params = scenarios.params(scenario, **sim_overrides)
    if backend == "fluid":
        if randomize:
            raise ValueError("randomize: the fluid backend's shapes are fixed per env (flow count, TCP); "
                             "build one FluidEnv per configuration instead")
        from rlbm_jax.env.fluid_env import FluidEnv

        env = FluidEnv(sim_params, formulation=formulation, agent_interval_s=agent_interval_s, episode_s=episode_s,
                       flows_scale=flows_scale)
        return env, env.default_params
    env = RLBMEnv(sim_params, formulation=formulation, agent_interval_s=agent_interval_s, episode_s=episode_s,
                  flows_scale=flows_scale, backend=backend, ticks_per_step=ticks_per_step)
    if randomize:
        env = RandomizedEnv(env, **ranges)
    return env, env.default_params


def agent_policy(formulation, scenario: str = "thesis", sim_overrides: dict | None = None) -> str:
    """The buffer policy that acts on every knob the formulation's action sets
    (`buffer.reads_knob`): "rl" for class_alpha, "rl-mark" for mark_prob; a sender agent's
    formulation, whose knobs are the senders' (`sim.FLOW_KNOBS`), the scenario's own.  A
    ValueError when none does."""
    import jax

    from rlbm_jax.env import metrics as mx, model, sim
    from rlbm_jax.env.rlbm_env import make_env_params
    from rlbm_jax.env.switch import buffer

    sim_params = scenarios.params(scenario, **{**(sim_overrides or {}), "policy": "rl"})
    ep = make_env_params(sim_params)
    P = int(sim_params.num_classes)
    rec = mx.init_interval(P, int(sim_params.interval_log_size), int(sim_params.agent_flows))
    act = formulation.action_space(P).sample(jax.random.PRNGKey(0))
    knobs = tuple(k for k in jax.eval_shape(lambda: formulation.knobs(act, rec, ep)) if k not in sim.FLOW_KNOBS)
    if not knobs:  # a sender agent's: the switch runs the scenario's own policy
        return scenarios.kw(scenario, **(sim_overrides or {})).get("policy", model.DEFAULTS["policy"])
    fits = [p for p in buffer.POLICY_NAMES if all(buffer.reads_knob(p, k) for k in knobs)]
    if not fits:
        raise ValueError(f"no buffer policy acts on the knobs {', '.join(knobs)} of {formulation.id}")
    return fits[0]


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
