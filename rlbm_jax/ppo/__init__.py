"""PPO for gymnax environments, built for the RLBM env (see `train.py`)."""
from rlbm_jax.ppo.config import PPOConfig
from rlbm_jax.ppo.train import PPO, TrainState, ObsStats, gae

__all__ = ["PPOConfig", "PPO", "TrainState", "ObsStats", "gae"]
