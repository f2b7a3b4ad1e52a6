"""A drop-tail buffer's size tuned by gradient through the fluid model (Kleinrock's power,
normalised, over 8, 16 and 32 long flows), against the packet grid search over 0.1-4 BDP:
`rlbm_jax.tune_study`."""
from rlbm_jax.tune_study import declare

STUDY = declare("tune-buffer", "buffer")
