"""PPO for gymnax environments, built for the RLBM env (see `train.py`)."""
from rlbm_jax.ppo.config import THESIS_PPO, PPOConfig
from rlbm_jax.ppo.train import PPO, TrainState, ObsStats, gae

__all__ = ["PPOConfig", "THESIS_PPO", "PPO", "TrainState", "ObsStats", "gae"]
