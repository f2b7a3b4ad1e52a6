"""The QueuePilot study: its scenario at 1/10 scale, training mix, seeds, baselines and
batched rollouts (`study`), and its judging inside ns-3.37 (`ns3`).  The env formulation
itself (`QueuePilot-v0`) is `rlbm_jax.env.formulations.queuepilot`."""
