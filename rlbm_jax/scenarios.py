"""Scenarios, defined once: every script, evaluator, calibration grid and the domain
randomisation builds its simulator configuration here.

A scenario is a dict of `make_params` keyword arguments; the ns-3 scenario
(`rlbm_jax/ns3/scenario/rlbm_scenario.cc`) takes the same names, so one dict configures both
simulators.  `kw(name, **overrides)` gives the dict, `params(name, **overrides)` the
validated `SimParams`; `SCENARIOS` lists the names with what each models.

    thesis   10 senders -> 10 Mbit/s bottleneck (20 ms base RTT), two classes of N packets each
             (flows > 2 MB in class 1), shared buffer 2N, Poisson web-search flows at `load`
             (utilisation) during the first 45 s, CUBIC, initial cwnd 10, min RTO 10 ms
             (shared/reference section 1); beta (1, 0.5) for the rl policy
    long     `long_flows` long-lived flows from t = 0 through one droptail FIFO at 100 Mbit/s,
             1 Gbit/s access links, `buffer_bdp` x BDP packets (default 1), min RTO 200 ms
    dumbbell `senders` senders -> one droptail FIFO of `buffer_bdp` x BDP at `rate_bps`
             (default 100 Mbit/s; access links 10x faster), Poisson flows of a size table at
             `load` during the first 75 % of `seconds`, 20 ms base RTT, the thesis's TCP
             settings (initial cwnd 10, min RTO 10 ms, no delayed ACK)
    queuepilot  `long_flows` long-lived flows plus web-search flows at load 0.1 through one
             FIFO of BDP / sqrt(N) at 100 Mbit/s, base RTT `rtt_s`, ECN, the "rl-mark"
             policy (QueuePilot's scenario at 1/10 scale)
    abs-env2 the ABS paper's Env 2: `long_flows` (2) long-lived flows at a base RTT of `rtt_s`
             (100 ms) through one drop-tail FIFO whose size an agent sets ("rl-size", at
             most 100 packets), a constant `rate_bps` (6 Mbit/s) where the paper replays a
             cellular capacity trace
    abs-env2-trace  Env 2 on a capacity trace: the same flows, RTT and buffer with the
             bottleneck's rate following `capacity_schedule` (default the shipped "wifi"
             trace, 10 Mbit/s peak, 5.0 Mbit/s mean), the link's peak rate the trace's peak
    cc       the RL congestion-control benchmark (the fifth seed): flows side by side, each its
             own TCP and base RTT (default two CUBIC flows at 40 ms), one FIFO of `buffer_bdp`
             x BDP at `rate_bps` (100 Mbit/s), the first `agents` flows driven by a sender agent
    cc-rate  `cc` with the agent's flow a rate sender (tcp "rate") starting at half the link,
             against a CUBIC flow (Aurora's)
    sharing  where buffer sharing matters: the thesis's senders and classes at 100 Mbit/s, 2
             long-lived flows (class 1) beside web search at load 0.4 (class 0) throughout,
             one shared buffer of `buffer_bdp` x BDP (1) that either class may fill alone
    sharing-incast  `sharing` with incast: queries of 16 senders answering 20 KB each at
             once, 5 queries a second (`rlbm_jax.env.incast`), a buffer of 2 BDPs
The thesis grid (`THESIS_GRID`, `thesis_grid`) is TCP x per-class buffer N x load; a cell
is `thesis_cell(tcp, n, load)`.  `THESIS_RANDOM` holds the ranges training draws each
episode's scenario from (`rlbm_jax.env.randomize`).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from rlbm_jax.env.params import SimParams, host_params, make_params
# the thesis and long-flow scenarios live with the env, whose defaults they are; re-exported here
from rlbm_jax.env.presets import (LONG, THESIS, THESIS_BETA, THESIS_RANDOM, bdp_buffer_pkts,  # noqa: F401
                                  long_flow_params, long_flows, thesis, thesis_params)

# the thesis grid: every combination is a cell, scored 60 s with flows in the first 45 s
THESIS_GRID = dict(tcp=("cubic", "newreno"), buffer_per_class_pkts=(100, 500, 1000),
                   load=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8))
THESIS_EPISODE_S = 60.0


def thesis_cell(tcp: str, buffer_per_class_pkts: int, load: float, **overrides) -> dict:
    """One cell of the thesis grid."""
    return thesis(tcp=tcp, buffer_per_class_pkts=buffer_per_class_pkts, load=load, **overrides)


def thesis_grid(tcp: Sequence[str] = THESIS_GRID["tcp"],
                buffer_per_class_pkts: Sequence[int] = THESIS_GRID["buffer_per_class_pkts"],
                load: Sequence[float] = THESIS_GRID["load"]) -> list[tuple]:
    """The grid's cells as (tcp, N, load), TCP outermost."""
    return [(t, int(n), float(ld)) for t in tcp for n in buffer_per_class_pkts for ld in load]


DUMBBELL = dict(num_classes=1, policy="droptail", access_delay_s=0.1e-3, bottleneck_delay_s=10e-3, mss_bytes=1000,
                initial_cwnd_pkts=10, min_rto_s=0.010, delayed_ack=1, num_flow_slots=128,
                completion_log_size=8192)


def dumbbell(rate_bps: float = 100e6, senders: int = 16, buffer_bdp: float = 1.0, load: float = 0.6,
             cdf="websearch", tcp: str = "cubic", seconds: float = 20.0, **overrides) -> dict:
    """Poisson flows from `senders` senders through one droptail FIFO of `buffer_bdp` x
    BDP at `rate_bps` (access links 10x faster); flows arrive during the first 75 % of
    `seconds` (the rest lets them finish)."""
    rate_bps = overrides.pop("bottleneck_rate_bps", rate_bps)
    if not (math.isfinite(rate_bps) and rate_bps > 0):
        raise ValueError(f"rate_bps must be a positive number, got {rate_bps!r}")
    kw = {**DUMBBELL, "num_senders": int(senders), "bottleneck_rate_bps": float(rate_bps),
          "access_rate_bps": 10.0 * float(rate_bps), "load": load, "cdf": cdf, "tcp": tcp,
          "arrival_stop_s": 0.75 * float(seconds), **overrides}
    if "buffer_per_class_pkts" not in overrides:
        kw["buffer_per_class_pkts"] = bdp_buffer_pkts(kw, buffer_bdp)
    kw.setdefault("queue_capacity_pkts", kw["buffer_per_class_pkts"])
    return kw


# QueuePilot's backbone scenario scaled to 1/10: its 1 Gbit/s link carrying 100-300
# long-lived TCP flows becomes 100 Mbit/s carrying 10-30 (the same rate per flow), its
# 10 % non-ECN UDP background becomes web-search TCP flows at load 0.1 (whose FCTs give
# the FCT-by-size figure); every TCP flow is ECN-capable; buffer B = BDP / sqrt(N)
QUEUEPILOT = dict(num_classes=1, policy="rl-mark", ecn=True, num_senders=10, access_rate_bps=1e9,
                  access_delay_s=0.1e-3, bottleneck_rate_bps=100e6, mss_bytes=1448, initial_cwnd_pkts=10,
                  min_rto_s=0.2, delayed_ack=1, long_flow_start_spread_s=1.0, cdf="websearch", num_flow_slots=64,
                  pkts_per_tick=2)


def queuepilot(long_flows: int = 20, rtt_s: float = 0.040, tcp: str = "cubic", load: float = 0.1,
               seconds: float = 10.0, buffer_pkts: int | None = None, max_rtt_s: float | None = None,
               max_buffer_pkts: int | None = None, **overrides) -> dict:
    """`long_flows` long-lived flows (from t = 0, spread over 1 s) and Poisson web-search
    flows at `load` (during the whole `seconds`) through one FIFO at 100 Mbit/s with base
    RTT `rtt_s`, ECN on, the "rl-mark" policy; the buffer is BDP / sqrt(N) packets unless
    `buffer_pkts` is given.  `max_rtt_s` / `max_buffer_pkts` size the static delay line and
    ring for a batch of configurations (they must agree across it)."""
    n = int(long_flows)
    if n < 1:
        raise ValueError(f"long_flows must be >= 1, got {long_flows!r}")
    if not (math.isfinite(rtt_s) and rtt_s > 2 * QUEUEPILOT["access_delay_s"]):
        raise ValueError(f"rtt_s must exceed twice the access delay ({2 * QUEUEPILOT['access_delay_s']} s), got {rtt_s!r}")
    kw = {**QUEUEPILOT, "long_flows": n, "tcp": tcp, "load": load, "arrival_stop_s": float(seconds),
          "bottleneck_delay_s": rtt_s / 2 - QUEUEPILOT["access_delay_s"], **overrides}
    if buffer_pkts is None:
        bdp = float(host_params(**{**kw, "buffer_per_class_pkts": 1, "queue_capacity_pkts": 1}).bdp_pkts)
        buffer_pkts = max(1, int(round(bdp / math.sqrt(n))))
    kw["buffer_per_class_pkts"] = int(buffer_pkts)
    kw["queue_capacity_pkts"] = int(max_buffer_pkts or buffer_pkts)
    if max_rtt_s is not None:
        far = host_params(**{**kw, "bottleneck_delay_s": max_rtt_s / 2 - QUEUEPILOT["access_delay_s"]})
        kw["delay_line_ticks"] = far.delay_line_ticks
    return kw


# The ABS paper's Env 2 (its Sec. IV-A): 2 senders with long-lived flows that start together
# and last the run, every RTT 100 ms, access links of about 160 Mbit/s, a bottleneck whose
# capacity follows a cellular (Mahimahi) trace, the agent setting the bottleneck's drop-tail
# limit.  Here the capacity is constant (6 Mbit/s: about the mean throughput the paper's
# Table II reports with a fixed 100-packet buffer, 5.7 to 6.7 Mbit/s), the largest size the
# agent may set is 100 packets (the paper's code's action levels, 1 to 100), a packet is
# MTU-sized (1500 B on the wire: "buffer size in packets means how many MTU-sized packets",
# its footnote 2), NewReno (or CUBIC) with Linux's 200 ms minimum RTO, an ACK per segment.
ABS_ENV2 = dict(num_classes=1, policy="rl-size", load=0.0, access_rate_bps=160e6, access_delay_s=0.1e-3,
                mss_bytes=1446, initial_cwnd_pkts=10, min_rto_s=0.2, delayed_ack=1, buffer_per_class_pkts=100,
                completion_log_size=16)


def abs_env2(long_flows: int = 2, rtt_s: float = 0.1, rate_bps: float = 6e6, tcp: str = "newreno",
             **overrides) -> dict:
    """`long_flows` long-lived flows (one per sender, from t = 0) through one drop-tail FIFO at
    a constant `rate_bps` with base propagation RTT `rtt_s`, its size set by an agent (policy
    "rl-size"; `buffer_per_class_pkts`, default 100, is the largest size and the size until
    the agent sets one).  A capacity that changes over the run (the paper's trace) is not
    modelled here."""
    n = int(long_flows)
    if n < 1:
        raise ValueError(f"long_flows must be >= 1, got {long_flows!r}")
    if not (math.isfinite(rtt_s) and rtt_s > 2 * ABS_ENV2["access_delay_s"]):
        raise ValueError(f"rtt_s must exceed twice the access delay ({2 * ABS_ENV2['access_delay_s']} s), "
                         f"got {rtt_s!r}")
    rate_bps = overrides.pop("bottleneck_rate_bps", rate_bps)
    if not (math.isfinite(rate_bps) and rate_bps > 0):
        raise ValueError(f"rate_bps must be a positive number, got {rate_bps!r}")
    kw = {**ABS_ENV2, "num_senders": n, "num_flow_slots": n, "long_flows": n, "tcp": tcp,
          "bottleneck_rate_bps": float(rate_bps), "bottleneck_delay_s": rtt_s / 2 - ABS_ENV2["access_delay_s"],
          **overrides}
    kw.setdefault("queue_capacity_pkts", kw["buffer_per_class_pkts"])
    return kw


LFQ_SCENARIO = dict(num_classes=1, policy="fq", load=0.0, num_senders=1, num_flow_slots=1, long_flows=1,
                    access_rate_bps=1e9, access_delay_s=0.1e-3, mss_bytes=1446, initial_cwnd_pkts=1,
                    long_flow_start_spread_s=0.0, buffer_per_class_pkts=1000, buffer_pkts=1000, fq_flow_cap_pkts=100.0,
                    completion_log_size=16, pkts_per_tick=2)


def lfq(rate_bps: float = 15e6, delay_s: float = 0.015, tcp: str = "newreno", cap_pkts: float = 100.0,
        max_delay_s: float | None = None, **overrides) -> dict:
    """The LFQ paper's setting: one long flow (initial window 1, MSS 1446) through a fair
    queue (policy "fq") whose cap for the flow is `cap_pkts` until an agent sets it (at most
    1000), a bottleneck of `rate_bps` (the paper draws 5-25 Mbit/s) and a one-way `delay_s`
    (the paper's link delay, 5-25 ms: base RTT 2 x delay_s).  The paper's two hosts are
    joined by the bottleneck; here the sender's access link is 1 Gbit/s and 0.1 ms, taken
    out of the bottleneck's delay.  NewReno or CUBIC (the paper's BIC, which it chose as
    ns-3's stand-in for CUBIC).  `max_delay_s` sizes the static delay line for a batch."""
    if not (math.isfinite(rate_bps) and rate_bps > 0):
        raise ValueError(f"rate_bps must be a positive number, got {rate_bps!r}")
    if not (math.isfinite(delay_s) and delay_s > LFQ_SCENARIO["access_delay_s"]):
        raise ValueError(f"delay_s must exceed the access delay ({LFQ_SCENARIO['access_delay_s']} s), got {delay_s!r}")
    kw = {**LFQ_SCENARIO, "tcp": tcp, "bottleneck_rate_bps": float(rate_bps), "fq_flow_cap_pkts": float(cap_pkts),
          "bottleneck_delay_s": delay_s - LFQ_SCENARIO["access_delay_s"], **overrides}
    if max_delay_s is not None:
        far = host_params(**{**kw, "bottleneck_delay_s": max_delay_s - LFQ_SCENARIO["access_delay_s"]})
        kw["delay_line_ticks"] = far.delay_line_ticks
    return kw


def abs_env2_trace(capacity_schedule="wifi", long_flows: int = 2, rtt_s: float = 0.1, tcp: str = "newreno",
                   capacity_rows: int | None = None, rate_bps: float | None = None, **overrides) -> dict:
    """Env 2 of the ABS paper with its capacity trace: `abs_env2` with the bottleneck's rate
    following `capacity_schedule` (what `make_params(capacity_schedule=...)` takes: a shipped
    trace, a CSV or Mahimahi file, a `capacity.Schedule`), the link's peak rate `rate_bps`
    (default the trace's peak; at least it).

    Scaling against the paper: its trace is a measured cellular one (Mahimahi, the capacity
    changing every few ms, its Fig. 4) whose throughput with a 100-packet buffer is 5.7 to
    6.7 Mbit/s (Table II); here the default is the shipped synthetic "wifi" trace (PHY-rate
    adaptation, airtime share every 50 ms, interference bursts; 10 Mbit/s peak, 5.0 Mbit/s
    mean, repeating every 60 s), of the same order of rate and of change within an agent
    interval (0.1 s).  The shipped "cellular" trace has outages (rate 0), which the JAX
    simulator runs and ns-3's point-to-point device refuses.  Packets are MTU-sized (1500 B),
    the buffer at most 100 packets, 2 long flows at a 100 ms base RTT, as in `abs_env2`.
    `capacity_rows` pads the table (a batch of different traces shares one K)."""
    from rlbm_jax.env import capacity

    sched = capacity.load(capacity_schedule)
    if sched is None:
        raise ValueError("capacity_schedule: abs-env2-trace needs a trace (a shipped name, a file or a "
                         "capacity.Schedule), not 'none'; the constant-rate Env 2 is scenario abs-env2")
    kw = abs_env2(long_flows=long_flows, rtt_s=rtt_s, rate_bps=sched.peak_bps if rate_bps is None else rate_bps,
                  tcp=tcp, **overrides)
    kw["capacity_schedule"] = sched
    if capacity_rows is not None:
        kw["capacity_rows"] = int(capacity_rows)
    return kw


# The fifth seed's benchmark (RL congestion control): long-lived flows side by side on a
# dumbbell, each flow its own flow group (its own TCP and base RTT), the first `agents` of
# them driven by a sender agent (`agent_flows`); as calibration/flows.py's pairs (1 Gbit/s
# access links, MSS 1448, starts spread over 1 s).
CC = dict(num_classes=1, load=0.0, policy="droptail", access_rate_bps=1e9, mss_bytes=1448,
          long_flow_start_spread_s=1.0, completion_log_size=16)
CC_ACCESS_DELAY_S = 0.1e-3  # the access links' one-way delay of the flows with the smallest base RTT


def cc(agents: int = 1, tcp: Sequence[str] | str = ("cubic", "cubic"), rate_bps: float = 100e6,
       rtt_s: Sequence[float] | float = 0.04, buffer_bdp: float = 1.0, **overrides) -> dict:
    """len(`tcp`) long-lived flows from t = 0 (spread over 1 s), flow k with TCP `tcp[k]` and
    base RTT `rtt_s[k]` (one value: every flow's), through one FIFO of `buffer_bdp` x BDP (at
    the smallest base RTT) at `rate_bps`; the first `agents` flows are driven by a sender
    agent (Orca: on top of their TCP).  Each flow is its own flow group; the bottleneck's
    delay makes the smallest base RTT and each other flow's access link adds the rest."""
    tcps = [tcp] if isinstance(tcp, str) else list(tcp)
    n = len(tcps)
    if n < 1:
        raise ValueError("tcp must name at least one flow's TCP")
    rtts = [float(rtt_s)] * n if isinstance(rtt_s, (int, float)) else [float(x) for x in rtt_s]
    if len(rtts) != n:
        raise ValueError(f"rtt_s must be one value or one per flow ({n}), got {len(rtts)}")
    if not all(math.isfinite(r) and r > 2 * CC_ACCESS_DELAY_S for r in rtts):
        raise ValueError(f"every rtt_s must exceed twice the access delay ({2 * CC_ACCESS_DELAY_S} s), got {rtts}")
    if isinstance(agents, bool) or not isinstance(agents, int) or not 0 <= agents <= n:
        raise ValueError(f"agents must be a whole number in [0, {n}] (the flows), got {agents!r}")
    if not (math.isfinite(buffer_bdp) and buffer_bdp > 0):
        raise ValueError(f"buffer_bdp must be a positive number, got {buffer_bdp!r}")
    low = min(rtts)
    per = (lambda v: list(v)) if n > 1 else (lambda v: v[0])  # one flow: one group, the run's values
    kw = {**CC, "num_senders": n, "num_flow_slots": n, "long_flows": n, "flow_groups": n, "agent_flows": agents,
          "tcp": per(tcps), "access_delay_s": per([CC_ACCESS_DELAY_S + (r - low) / 2 for r in rtts]),
          "bottleneck_rate_bps": float(rate_bps), "bottleneck_delay_s": low / 2 - CC_ACCESS_DELAY_S, **overrides}
    if "buffer_per_class_pkts" not in overrides:
        bdp = float(host_params(**{**kw, "buffer_per_class_pkts": 1, "queue_capacity_pkts": 1}).bdp_pkts)
        kw["buffer_per_class_pkts"] = max(2, int(round(buffer_bdp * bdp)))
    kw.setdefault("queue_capacity_pkts", kw["buffer_per_class_pkts"])
    return kw


def cc_rate(rate_bps: float = 100e6, start_share: float = 0.5, **overrides) -> dict:
    """`cc` with the agent's flow a rate sender (tcp "rate", Aurora's) starting at
    `start_share` of `rate_bps`, against a CUBIC flow (`tcp` and the rest as `cc` takes them)."""
    if not (math.isfinite(start_share) and start_share > 0):
        raise ValueError(f"start_share must be a positive number, got {start_share!r}")
    overrides.setdefault("tcp", ("rate", "cubic"))
    overrides.setdefault("sender_rate_bps", start_share * float(rate_bps))
    return cc(rate_bps=rate_bps, **overrides)


# Where buffer sharing matters (the thesis scenario rarely has two classes active together): a
# faster bottleneck shared by short flows (class 0: web search under 2 MB, incast responses) and
# long flows (class 1, always active), in one shared buffer of `buffer_bdp` x BDP that either
# class may fill alone (each class's cap is the whole buffer), with the thesis's senders (CUBIC,
# initial cwnd 10, min RTO 10 ms, no delayed ACK).
SHARING = dict(bottleneck_rate_bps=100e6, access_rate_bps=1e9, num_senders=32, num_flow_slots=128, load=0.4,
               long_flows=2, arrival_stop_s=math.inf, completion_log_size=4096)
SHARING_INCAST = dict(incast_fan_in=16, incast_query_rate_per_s=5.0, incast_response_bytes=20_000.0)
SHARING_EPISODE_S = 10.0


def sharing(buffer_bdp: float = 1.0, incast: bool = False, **overrides) -> dict:
    """The thesis's senders and classes on a 100 Mbit/s bottleneck where the classes are
    active together: 2 long-lived flows (class 1) beside Poisson web-search flows at load 0.4
    (class 0 below 2 MB) for the whole run, one shared buffer of `buffer_bdp` x BDP packets
    that each class may fill alone; with `incast`, also queries of 16 senders answering 20 KB
    each at once, 5 queries a second (each burst's first windows 160 packets, 2/3 of a 1-BDP
    buffer; `sharing_incast` holds 2 BDPs)."""
    kw = thesis(**{**SHARING, **(SHARING_INCAST if incast else {}), **overrides})
    if "buffer_pkts" not in overrides:
        kw["buffer_pkts"] = bdp_buffer_pkts(kw, buffer_bdp)
        if "buffer_per_class_pkts" not in overrides:
            kw["buffer_per_class_pkts"] = kw["buffer_pkts"]
    return kw


def sharing_incast(buffer_bdp: float = 2.0, **overrides) -> dict:
    """`sharing` with incast queries (`SHARING_INCAST`) and a buffer of 2 BDPs (each burst's
    first windows a third of it): on 1 BDP the SYNs lost to the bursts put more than 1 % of
    the short flows behind a 3 s SYN timeout under 19 of the 25 baselines, so their p99
    short-flow slowdowns are all that timeout (results/sharing_incast_1bdp)."""
    return sharing(buffer_bdp, incast=True, **overrides)


SCENARIOS: dict[str, tuple[Callable[..., dict], str]] = {
    "thesis": (thesis, "10 senders, Poisson web-search flows at a load, 10 Mbit/s, two classes (the thesis)"),
    "long": (long_flows, "long-lived flows through one droptail FIFO at 100 Mbit/s"),
    "dumbbell": (dumbbell, "Poisson flows through one droptail FIFO sized in BDPs, 100 Mbit/s or faster"),
    "queuepilot": (queuepilot, "QueuePilot's scenario at 1/10 scale: N long flows and web search at 100 Mbit/s, "
                               "ECN, buffer BDP / sqrt(N), the agent's marker"),
    "abs-env2": (abs_env2, "the ABS paper's Env 2: 2 long flows at a 100 ms RTT, 6 Mbit/s (constant), a drop-tail "
                           "FIFO of at most 100 packets whose size the agent sets"),
    "lfq": (lfq, "the LFQ paper's setting: one long flow through a fair queue with a cap per flow, 15 Mbit/s, "
                 "15 ms one way (the paper draws 5-25 Mbit/s and 5-25 ms)"),
    "abs-env2-trace": (abs_env2_trace, "the ABS paper's Env 2 on a capacity trace (default the shipped wifi trace, "
                                       "10 Mbit/s peak, 5.0 Mbit/s mean), its buffer size set by the agent"),
    "cc": (cc, "the RL congestion-control benchmark's dumbbell: long flows side by side, each its own TCP and base "
               "RTT (default two CUBIC flows, 40 ms, 100 Mbit/s, 1 BDP drop-tail), the first driven by a sender agent"),
    "sharing": (sharing, "where buffer sharing matters: 2 long flows (class 1) beside web search at load 0.4 "
                         "(class 0) at 100 Mbit/s, one shared buffer of 1 BDP either class may fill alone"),
    "sharing-incast": (sharing_incast, "sharing with incast: queries of 16 senders answering 20 KB each at once, 5 a "
                                       "second, a shared buffer of 2 BDPs"),
    "cc-rate": (cc_rate, "cc with the agent's flow a rate sender (tcp rate, Aurora's) starting at half the link, "
                         "against a CUBIC flow"),
}


def register(name: str, builder: Callable[..., dict], text: str) -> None:
    """Add a scenario: builder(**overrides) -> make_params keyword arguments."""
    if name in SCENARIOS:
        raise ValueError(f"scenario {name!r} is already registered")
    SCENARIOS[name] = (builder, text)


def kw(name: str, **overrides) -> dict:
    """The make_params keyword arguments of scenario `name` with overrides."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    return SCENARIOS[name][0](**overrides)


def params(name: str, **overrides) -> SimParams:
    return make_params(**kw(name, **overrides))
