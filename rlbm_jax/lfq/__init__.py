"""LFQ (a flow's queue cap learnt inside a fair queue): the paper's offline A/B training done
as one batched step, its baselines and its evaluation (`rlbm_jax.lfq.study`)."""
