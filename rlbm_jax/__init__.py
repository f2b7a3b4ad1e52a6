"""rlbm_jax: a JAX simulator and RL environment of a congested switch buffer."""

__version__ = "0.1.0"
