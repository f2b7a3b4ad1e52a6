"""RED's min_th, max_th and max_p tuned by gradient through the fluid model (Kleinrock's
power, normalised, over 8, 16 and 32 long flows through 1 BDP), against the packet grid
search over both grids `scripts/tune_aqm.py` ran (its default and the one extended down to
a min_th of 0.05 % of the buffer, where the optimum lies): `rlbm_jax.tune_study`."""
from rlbm_jax.tune_study import declare

STUDY = declare("tune-red", "red", axes={"min_th_frac": (0.0005, 0.002, 0.005, 0.02, 0.05, 0.15, 0.4),
                                         "max_th_frac": (0.1, 0.35, 1.0), "max_p": (0.01, 0.04, 0.15, 0.5)})
