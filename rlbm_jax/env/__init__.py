"""Simulator (params -> state -> tick) and the gymnax environment built on it."""
from rlbm_jax.env.params import SimParams, make_params, host_params, validate, stack_params, pad_params, STATIC_FIELDS
from rlbm_jax.env.sim import SimState, init, tick, ticks_for, KNOBS
from rlbm_jax.env.backends import run
from rlbm_jax.env import backends, model
from rlbm_jax.env import capacity, formulations, metrics, tcp, traffic
from rlbm_jax.env import switch
from rlbm_jax.env.switch import buffer, queue, scheduler
from rlbm_jax.env.rlbm_env import (RLBMEnv, EnvParams, EnvState, NotDifferentiableError, make_env_params,
                                   DEFAULT_FORMULATION)
from rlbm_jax.env.fluid_env import FluidEnv
from rlbm_jax.env.wrappers import FiveValueStep, SymmetricActions
from rlbm_jax.env.presets import THESIS_BETA, long_flow_params, thesis_params

__all__ = ["SimParams", "SimState", "make_params", "host_params", "thesis_params", "long_flow_params", "validate", "stack_params", "pad_params", "THESIS_BETA",
           "STATIC_FIELDS", "init", "tick", "run", "ticks_for", "KNOBS", "RLBMEnv", "FluidEnv", "EnvParams", "EnvState",
           "NotDifferentiableError", "make_env_params", "DEFAULT_FORMULATION", "SymmetricActions", "FiveValueStep",
           "backends", "model",
           "buffer", "capacity", "formulations", "metrics", "queue", "scheduler", "switch", "tcp", "traffic"]
