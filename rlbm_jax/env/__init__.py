"""Simulator (params -> state -> tick) and the gymnax environment built on it."""
from rlbm_jax.env.params import SimParams, make_params, thesis_params, long_flow_params, validate
from rlbm_jax.env.sim import SimState, init, tick, run, ticks_for
from rlbm_jax.env import buffer, metrics, queue, scheduler, tcp, traffic
from rlbm_jax.env.rlbm_env import RLBMEnv, EnvParams, EnvState, LegacyStep, make_env_params

__all__ = ["SimParams", "SimState", "make_params", "thesis_params", "long_flow_params", "validate",
           "init", "tick", "run", "ticks_for", "RLBMEnv", "EnvParams", "EnvState", "LegacyStep", "make_env_params", "buffer", "metrics", "queue", "scheduler", "tcp", "traffic"]
