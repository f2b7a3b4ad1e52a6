"""The two scenarios the environment itself builds on: the thesis's (the env's default
configuration, and the ranges domain randomisation draws from) and long-lived flows
through one droptail FIFO.  They live here so that `rlbm_jax.env` needs nothing outside
it; `rlbm_jax.scenarios` re-exports every name and describes them beside the others.
"""
from __future__ import annotations

import math

from rlbm_jax.env.params import SimParams, make_params

# the thesis's per-class weights beta_c of the rl threshold alpha_c * beta_c * (B - Q)
THESIS_BETA = (1.0, 0.5)

THESIS = dict(
    num_senders=10,
    access_rate_bps=100e6,
    access_delay_s=0.1e-3,
    bottleneck_rate_bps=10e6,
    bottleneck_delay_s=10e-3,
    buffer_per_class_pkts=100,
    num_classes=2,
    tcp="cubic",
    mss_bytes=1000,
    initial_cwnd_pkts=10,
    min_rto_s=0.010,
    delayed_ack=1,
    load=0.7,
    arrival_stop_s=45.0,
    cdf="websearch",
    class_threshold_bytes=2_000_000,
    policy="sb-naive",
    beta=THESIS_BETA,
    scheduler="rr",
    warmup_s=0.0,
)

# what training draws each episode from: per-class buffer N, load, TCP
# (the thesis's TCPs; DCTCP, which needs ECN marks and the JAX tick, only when asked for)
THESIS_RANDOM = dict(buffer_pkts=(100, 1000), load=(0.1, 0.9), tcp=("newreno", "cubic"), buffer_dist="uniform")


def thesis(**overrides) -> dict:
    """The thesis scenario with any field overridden.  With another `num_classes` and no
    `beta` given, the thesis's per-class beta is cut, or extended with its last value, to
    the class count (as a policy's default alphas are)."""
    kw = {**THESIS, **overrides}
    if "beta" not in overrides and "num_classes" in overrides:
        n = int(kw["num_classes"])
        kw["beta"] = tuple((list(THESIS_BETA) + [THESIS_BETA[-1]] * n)[:n])
    return kw


def thesis_params(**overrides) -> SimParams:
    """SimParams of the thesis scenario with any field overridden."""
    return make_params(**thesis(**overrides))


LONG = dict(num_classes=1, load=0.0, policy="droptail", access_rate_bps=1e9, access_delay_s=0.0,
            bottleneck_rate_bps=100e6, bottleneck_delay_s=10e-3, tcp="newreno", mss_bytes=1000,
            # Linux's 200 ms: with the thesis's 10 ms floor, RTTs of 20-80 ms plus queueing make
            # ns-3 time out spuriously thousands of times per run
            min_rto_s=0.2, completion_log_size=16)


def bdp_buffer_pkts(kw: dict, buffer_bdp: float) -> int:
    """`buffer_bdp` x the BDP of the configuration `kw`, in whole packets (at least 1)."""
    if not (math.isfinite(buffer_bdp) and buffer_bdp > 0):
        raise ValueError(f"buffer_bdp must be a positive number, got {buffer_bdp!r}")
    bdp = float(make_params(**{**kw, "buffer_per_class_pkts": 1, "queue_capacity_pkts": 1}).bdp_pkts)
    return max(1, int(round(buffer_bdp * bdp)))


def long_flows(long_flows: int = 1, buffer_bdp: float = 1.0, **overrides) -> dict:
    """`long_flows` long-lived flows (one per sender) through one droptail FIFO of
    `buffer_bdp` x BDP packets (unless `buffer_per_class_pkts` is given)."""
    n = int(long_flows)
    kw = {**LONG, "num_senders": max(1, n), "num_flow_slots": max(1, n), "long_flows": n, **overrides}
    if "buffer_per_class_pkts" not in overrides:
        kw["buffer_per_class_pkts"] = bdp_buffer_pkts(kw, buffer_bdp)
    kw.setdefault("queue_capacity_pkts", kw["buffer_per_class_pkts"])
    return kw


def long_flow_params(n_flows: int, buffer_bdp: float, **overrides) -> SimParams:
    """SimParams of `n_flows` long-lived flows through a droptail FIFO of `buffer_bdp` x BDP."""
    return make_params(**long_flows(n_flows, buffer_bdp, **overrides))
