"""Simulator parameters: one pytree holding every model choice.

Dynamic fields (rates, delays, loads, TCP constants, policy choice, ...) are
array leaves, so a batch of differently-configured simulators is one `vmap`.
Fields that fix array shapes (flow slots, ring capacities, classes, packets per
tick) are static: they live in the pytree structure and must agree across a
batch.

`make_params` builds a validated instance; `validate` raises a ValueError that
names the offending field for any bad value.  Names carry units.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

from rlbm_jax.env import traffic
from rlbm_jax.env.tcp.variants import TCP_NAMES, VARIANTS as TCP_VARIANTS  # the TCP registry: tcp_id indexes it

# Integer codes of the categorical choices (dynamic, so they can be vmapped).
# what a sender does after a retransmission timeout (tcp.on_timeouts): "go-back-n" resends
# every segment not yet ACKed or SACKed, those still in flight too, as ns-3.37 does; "sack"
# resends only the lost segments
RTO_RECOVERY_NAMES = ("go-back-n", "sack")
# PRR's proportional send count in fast recovery and CWR (tcp.on_acks, RFC 6937): "exact", or
# "ns-3.37" as ns-3.37's TcpPrrRecovery::DoRecovery computes it: prr_delivered x ssthresh in
# bytes is a 32-bit unsigned product that wraps once it reaches 2^32 (both above ~65 kB), and
# the send count it gives then falls below what was sent, so the sender goes silent until
# its flight falls to ssthresh (calibration/REPORT.md, section 6)
PRR_NAMES = ("exact", "ns-3.37")
# PRR's slow-start reduction bound, once the flight is at or below ssthresh in fast recovery
# (tcp.on_acks): "rfc6937" lets every ACK send what it delivered plus one segment (RFC 6937's
# SSRB); "ns-3.37" adds the segment only on an ACK of retransmitted data in fast recovery (never
# in CWR) and lets any other ACK send just what it delivered (ns-3.37's TcpPrrRecovery with
# m_isRetransDataAcked, as Linux's tcp_cwnd_reduction), so duplicate ACKs refill a window cut
# below its flight one for one
# (calibration/REPORT.md, section 6)
PRR_SSRB_NAMES = ("rfc6937", "ns-3.37")
# which states an echoed CE mark (ECE on an ACK that moves the cumulative ACK) cuts the window
# from, entering CWR (tcp.on_acks, RFC 3168): "open" only from OPEN, the echo of a mark on a
# packet sent after the last window reduction, loss or ECN; "ns-3.37" as ns-3.37's
# TcpSocketBase::ReceivedAck, from every state but CWR: an echo that arrives during fast
# recovery or after a timeout cuts again (ssthresh from the current window) and ends the
# recovery, and a loss's cut does not stop the receiver's echo (only CWR's flag does)
ECN_CWR_NAMES = ("open", "ns-3.37")
# which ACKs give the RTT estimator a sample (tcp.on_acks): "cumulative" as ns-3.37 (with
# timestamps, Karn's rule and a history emptied at every timeout): an ACK that moves the
# cumulative ACK over data sent once, in OPEN; not a SACK, not a retransmission's ACK, not
# during recovery; "every-ack": every ACK of the tick (the RTO then follows the queue that
# SACKed packets meet during a recovery)
RTT_SAMPLES_NAMES = ("cumulative", "every-ack")
# the TCP model of rlbm_jax 0.2, before go-back-N (the committed results of that version
# were made with it; a run config that names no model choice predates them)
LEGACY_TCP_MODEL = dict(rto_recovery="sack", rtt_samples="every-ack")
SCHEDULER_NAMES = ("rr", "strict")
ARRIVAL_NAMES = ("load", "thesis-code")

DATA_HEADER_BYTES = 54  # TCP with timestamps (32) + IPv4 (20) + PPP (2)
ACK_BYTES = 54


@struct.dataclass
class SimParams:
    """Every parameter of the simulator.  Shapes in brackets; P = classes, S = senders."""

    # ---- topology -------------------------------------------------------
    access_rate_bps: jnp.ndarray  # [] each sender's access link rate
    access_delay_s: jnp.ndarray  # [] access link one-way propagation delay
    bottleneck_rate_bps: jnp.ndarray  # [] switch -> sink link rate
    bottleneck_delay_s: jnp.ndarray  # [] switch -> sink one-way propagation delay
    # ---- buffer ---------------------------------------------------------
    buffer_pkts: jnp.ndarray  # [] shared buffer size B (all classes)
    class_cap_pkts: jnp.ndarray  # [P] FIFO cap of each class
    policy_id: jnp.ndarray  # [] index into buffer.POLICY_NAMES
    alpha: jnp.ndarray  # [P] policy weights (SB / DT / ABM alphas)
    beta: jnp.ndarray  # [P] RL threshold weights (threshold = a * beta * free)
    scheduler_id: jnp.ndarray  # [] 0 round robin, 1 strict priority
    class_threshold_bytes: jnp.ndarray  # [P-1] flow size above which class rises
    # ---- TCP -------------------------------------------------------------
    tcp_id: jnp.ndarray  # [] 0 NewReno, 1 CUBIC, 2 DCTCP
    mss_bytes: jnp.ndarray  # [] payload per data packet
    initial_cwnd_pkts: jnp.ndarray  # []
    min_rto_s: jnp.ndarray  # []
    max_rto_s: jnp.ndarray  # []
    syn_timeout_s: jnp.ndarray  # [] wait after a lost SYN (ns-3 TcpSocket::ConnTimeout)
    rto_granularity_s: jnp.ndarray  # [] clock granularity term of the RTO
    delayed_ack: jnp.ndarray  # [] 1 or 2 segments per ACK
    dupthresh: jnp.ndarray  # [] duplicate ACKs that declare a loss
    rto_recovery_id: jnp.ndarray  # [] index into RTO_RECOVERY_NAMES
    prr_id: jnp.ndarray  # [] index into PRR_NAMES
    prr_ssrb_id: jnp.ndarray  # [] index into PRR_SSRB_NAMES
    ecn_cwr_id: jnp.ndarray  # [] index into ECN_CWR_NAMES
    rtt_samples_id: jnp.ndarray  # [] index into RTT_SAMPLES_NAMES
    cubic_beta: jnp.ndarray  # []
    cubic_c: jnp.ndarray  # []
    cubic_fast_convergence: jnp.ndarray  # [] bool
    hystart: jnp.ndarray  # [] bool
    hystart_low_window_pkts: jnp.ndarray  # []
    hystart_min_samples: jnp.ndarray  # []
    hystart_ack_delta_s: jnp.ndarray  # []
    hystart_delay_min_s: jnp.ndarray  # []
    hystart_delay_max_s: jnp.ndarray  # []
    ecn: jnp.ndarray  # [] bool: senders mark data ECT and react to echoed CE marks (RFC 3168; always with DCTCP)
    dctcp_g: jnp.ndarray  # [] DCTCP: weight of a window's marked fraction in alpha (ns-3 DctcpShiftG)
    # ---- AQM (the policy's `aqm`, rlbm_jax.env.aqm; ns-3.37 queue-disc names) --------
    red_min_th_pkts: jnp.ndarray  # [] RED/ARED: average queue where early drops start
    red_max_th_pkts: jnp.ndarray  # [] ... where the probability reaches max_p (gentle: rises to 1 at 2x)
    red_max_p: jnp.ndarray  # [] ... drop probability at max_th (ARED's starting value)
    red_weight: jnp.ndarray  # [] ... EWMA weight of the average queue (per packet)
    red_gentle: jnp.ndarray  # [] bool
    pie_target_s: jnp.ndarray  # [] PIE: queueing delay reference
    pie_tupdate_s: jnp.ndarray  # [] ... probability update period
    pie_a: jnp.ndarray  # [] ... gain on the delay error (1/s)
    pie_b: jnp.ndarray  # [] ... gain on the delay change (1/s)
    pie_max_burst_s: jnp.ndarray  # [] ... burst allowance
    pie_mark_threshold: jnp.ndarray  # [] ... marks (ECN) only while its probability is at most this
    codel_target_s: jnp.ndarray  # [] CoDel: acceptable standing sojourn time
    codel_interval_s: jnp.ndarray  # [] ... window the sojourn must stay above target before a drop
    fq_quantum_bytes: jnp.ndarray  # [] FQ-CoDel: deficit round robin quantum (ns-3: the device MTU, 1500)
    # ---- traffic ---------------------------------------------------------
    arrival_id: jnp.ndarray  # [] 0: lambda = load*C/(8E[size]); 1: thesis code
    load: jnp.ndarray  # [] offered load as a fraction of bottleneck capacity
    arrival_stop_s: jnp.ndarray  # [] no new flows after this time
    long_flows: jnp.ndarray  # [] K long-lived flows started at t = 0
    long_flow_start_spread_s: jnp.ndarray  # [] long flows start uniformly in [0, spread)
    cdf_size_bytes: jnp.ndarray  # [M] flow-size table (padded)
    cdf_prob: jnp.ndarray  # [M]
    # ---- measurement -------------------------------------------------------
    warmup_s: jnp.ndarray  # [] excluded from time-averaged metrics
    # ---- static shapes -----------------------------------------------------
    num_senders: int = struct.field(pytree_node=False, default=10)
    num_classes: int = struct.field(pytree_node=False, default=2)
    num_flow_slots: int = struct.field(pytree_node=False, default=64)
    queue_capacity_pkts: int = struct.field(pytree_node=False, default=1000)
    pkts_per_tick: int = struct.field(pytree_node=False, default=1)
    delay_line_ticks: int = struct.field(pytree_node=False, default=64)
    completion_log_size: int = struct.field(pytree_node=False, default=1024)
    interval_log_size: int = struct.field(pytree_node=False, default=16)  # finished flows an agent interval lists
    # per-flow queues (rlbm_jax.env.flowqueue, FQ-CoDel): runs each flow slot's ring holds; 0
    # allocates none (policies without per-flow queues), and the tick then leaves their code out
    flow_queue_capacity_pkts: int = struct.field(pytree_node=False, default=0)
    # the run needs the JAX tick (an AQM policy, ECN or DCTCP: what the native tick lacks);
    # static, so that `sim.run` can choose its backend when the params are traced
    needs_jax_tick: bool = struct.field(pytree_node=False, default=False)

    # ---- derived quantities (pure functions of the leaves) ---------------
    @property
    def data_pkt_bits(self):
        return (self.mss_bytes + DATA_HEADER_BYTES) * 8.0

    @property
    def tick_s(self):
        """Tick length: `pkts_per_tick` data packets' serialisation at the bottleneck."""
        return self.pkts_per_tick * self.data_pkt_bits / self.bottleneck_rate_bps

    @property
    def base_rtt_s(self):
        """Propagation + serialisation RTT of an empty path (data one way, ACK back)."""
        ser_data = self.data_pkt_bits / self.access_rate_bps + self.data_pkt_bits / self.bottleneck_rate_bps
        ser_ack = ACK_BYTES * 8.0 / self.access_rate_bps + ACK_BYTES * 8.0 / self.bottleneck_rate_bps
        return 2.0 * (self.access_delay_s + self.bottleneck_delay_s) + ser_data + ser_ack

    @property
    def access_offset_s(self):
        """Sender -> switch time of a data packet.  The simulator runs senders on the
        switch's clock shifted by this constant (the access path is uncongested)."""
        return self.data_pkt_bits / self.access_rate_bps + self.access_delay_s

    @property
    def sink_delay_ticks(self):
        """Ticks from a packet's dequeue tick to its arrival at the sink."""
        return jnp.maximum(jnp.round(self.bottleneck_delay_s / self.tick_s).astype(jnp.int32) + 1, 1)

    @property
    def ack_delay_ticks(self):
        """Ticks from a packet's dequeue tick to its ACK reaching the sender
        (on the shifted sender clock), so that the empty-path RTT equals base_rtt_s."""
        rest = self.base_rtt_s - self.data_pkt_bits / self.bottleneck_rate_bps
        return jnp.maximum(jnp.round(rest / self.tick_s).astype(jnp.int32) + 1, 1)

    @property
    def event_slots(self) -> int:
        """Flows that get full per-tick work: every flow named by this tick's ACK records
        (k at most), the new flow, and two more with due timers or open windows (any
        further ones wait a tick and are counted in `events_deferred`)."""
        return self.pkts_per_tick + 3

    @property
    def bdp_pkts(self):
        return self.bottleneck_rate_bps * self.base_rtt_s / self.data_pkt_bits


# ---------------------------------------------------------------------------
# construction and validation
# ---------------------------------------------------------------------------

def _as_f32(x):
    return jnp.asarray(x, dtype=jnp.float32)


def _as_i32(x):
    return jnp.asarray(x, dtype=jnp.int32)


def make_params(
    *,
    num_senders: int = 10,
    num_classes: int = 2,
    num_flow_slots: int = 64,
    pkts_per_tick: int = 1,
    access_rate_bps: float = 100e6,
    access_delay_s: float = 0.1e-3,
    bottleneck_rate_bps: float = 10e6,
    bottleneck_delay_s: float = 10e-3,
    buffer_per_class_pkts: int | Sequence[int] = 100,
    buffer_pkts: int | None = None,
    queue_capacity_pkts: int | None = None,
    policy: str = "sb-naive",
    alpha: Sequence[float] | None = None,
    beta: Sequence[float] | None = None,
    scheduler: str = "rr",
    class_threshold_bytes: float | Sequence[float] = 2_000_000,
    tcp: str = "cubic",
    mss_bytes: int = 1000,
    initial_cwnd_pkts: int = 10,
    min_rto_s: float = 0.010,
    max_rto_s: float = 60.0,
    syn_timeout_s: float = 3.0,
    rto_granularity_s: float = 0.001,
    delayed_ack: int = 1,
    dupthresh: int = 3,
    rto_recovery: str = "go-back-n",
    prr: str = "exact",
    prr_ssrb: str = "rfc6937",
    ecn_cwr: str = "open",
    rtt_samples: str = "cumulative",
    cubic_beta: float = 0.7,
    cubic_c: float = 0.4,
    cubic_fast_convergence: bool = True,
    hystart: bool = True,
    hystart_low_window_pkts: int = 16,
    hystart_min_samples: int = 8,
    hystart_ack_delta_s: float = 0.002,
    hystart_delay_min_s: float = 0.004,
    hystart_delay_max_s: float = 1.0,
    ecn: bool = False,
    dctcp_g: float = 0.0625,
    red_min_th_pkts: float | None = None,
    red_max_th_pkts: float | None = None,
    red_max_p: float = 0.02,
    red_weight: float | None = None,
    red_gentle: bool = True,
    pie_target_s: float = 0.015,
    pie_tupdate_s: float = 0.015,
    pie_a: float = 0.125,
    pie_b: float = 1.25,
    pie_max_burst_s: float = 0.15,
    pie_mark_threshold: float = 0.1,
    codel_target_s: float = 0.005,
    codel_interval_s: float = 0.1,
    fq_quantum_bytes: int = 1500,
    flow_queue_capacity_pkts: int | None = None,
    arrival: str = "load",
    load: float = 0.7,
    arrival_stop_s: float = math.inf,
    long_flows: int = 0,
    long_flow_start_spread_s: float = 0.0,
    cdf: str | traffic.SizeTable = "websearch",
    warmup_s: float = 0.0,
    delay_line_ticks: int | None = None,
    completion_log_size: int = 1024,
    interval_log_size: int = 16,
) -> SimParams:
    """Build validated `SimParams`.

    `buffer_per_class_pkts` is each class's FIFO cap (a list gives one per class);
    the shared buffer `buffer_pkts` defaults to their sum, as in the thesis.
    `policy` is a name from `rlbm_jax.env.buffer.POLICY_NAMES`.  The AQM parameters
    take ns-3.37's queue-disc defaults; RED's thresholds and weight left as None are
    ns-3's (5, 15, 0.002), or for "ared" its automatic ones (`ared_defaults`).
    `flow_queue_capacity_pkts` (static) sizes the per-flow queues of a policy that has them
    ("fq-codel"): None gives buffer_pkts + 1 there (a flow may hold the whole buffer plus
    the tick's run before the overflow drops) and 0 elsewhere.
    """
    from rlbm_jax.env import buffer  # local: buffer imports nothing from here

    _check_int("num_senders", num_senders, 1)
    _check_int("num_classes", num_classes, 1)
    _check_int("pkts_per_tick", pkts_per_tick, 1)
    _check_int("num_flow_slots", num_flow_slots, 1)
    if num_flow_slots < num_senders:
        raise ValueError(
            f"num_flow_slots must be >= num_senders ({num_senders}), got {num_flow_slots}"
        )
    for name, val in (
        ("access_rate_bps", access_rate_bps),
        ("bottleneck_rate_bps", bottleneck_rate_bps),
        ("mss_bytes", mss_bytes),
        ("min_rto_s", min_rto_s),
        ("max_rto_s", max_rto_s),
        ("syn_timeout_s", syn_timeout_s),
        ("cubic_c", cubic_c),
    ):
        if not (np.isfinite(val) and val > 0):
            raise ValueError(f"{name} must be a positive finite number, got {val!r}")
    for name, val in (("access_delay_s", access_delay_s), ("bottleneck_delay_s", bottleneck_delay_s),
                      ("warmup_s", warmup_s), ("long_flow_start_spread_s", long_flow_start_spread_s)):
        if not (np.isfinite(val) and val >= 0):
            raise ValueError(f"{name} must be a non-negative finite number, got {val!r}")
    if not (0 < dctcp_g <= 1):
        raise ValueError(f"dctcp_g must be in (0, 1], got {dctcp_g!r}")
    if not (0 < cubic_beta < 1):
        raise ValueError(f"cubic_beta must be in (0, 1), got {cubic_beta!r}")
    if not (np.isfinite(load) and load >= 0):
        raise ValueError(f"load must be a non-negative number, got {load!r}")
    if not (arrival_stop_s >= 0):
        raise ValueError(f"arrival_stop_s must be >= 0, got {arrival_stop_s!r}")
    _check_int("initial_cwnd_pkts", initial_cwnd_pkts, 1)
    _check_int("dupthresh", dupthresh, 1)
    if delayed_ack not in (1, 2):
        raise ValueError(f"delayed_ack must be 1 or 2 segments per ACK, got {delayed_ack!r}")
    _check_int("long_flows", long_flows, 0)
    if long_flows > num_flow_slots:
        raise ValueError(f"long_flows ({long_flows}) must not exceed num_flow_slots ({num_flow_slots})")
    _check_int("completion_log_size", completion_log_size, 1)
    _check_int("interval_log_size", interval_log_size, 1)

    caps = np.broadcast_to(np.asarray(buffer_per_class_pkts), (num_classes,)).astype(np.int64)
    if np.any(caps <= 0):
        raise ValueError(f"buffer_per_class_pkts must be positive, got {buffer_per_class_pkts!r}")
    if buffer_pkts is None:
        buffer_pkts = int(caps.sum())
    _check_int("buffer_pkts", buffer_pkts, 1)
    if queue_capacity_pkts is None:
        queue_capacity_pkts = int(caps.max())
    if caps.max() > queue_capacity_pkts:
        raise ValueError(
            f"buffer_per_class_pkts ({int(caps.max())}) exceeds queue_capacity_pkts ({queue_capacity_pkts}),"
            " the static ring size; raise queue_capacity_pkts"
        )

    tcp_id = _lookup("tcp", tcp, TCP_NAMES)
    tcp_variant = TCP_VARIANTS[tcp_id]
    ecn_on = bool(ecn) or tcp_variant.ecn_always  # DCTCP turns ECN on itself (ns-3.37 TcpDctcp::Init)
    rto_recovery_id = _lookup("rto_recovery", rto_recovery, RTO_RECOVERY_NAMES)
    rtt_samples_id = _lookup("rtt_samples", rtt_samples, RTT_SAMPLES_NAMES)
    prr_id = _lookup("prr", prr, PRR_NAMES)
    prr_ssrb_id = _lookup("prr_ssrb", prr_ssrb, PRR_SSRB_NAMES)
    ecn_cwr_id = _lookup("ecn_cwr", ecn_cwr, ECN_CWR_NAMES)
    sched_id = _lookup("scheduler", scheduler, SCHEDULER_NAMES)
    arrival_id = _lookup("arrival", arrival, ARRIVAL_NAMES)
    policy_id = _lookup("policy", policy, buffer.POLICY_NAMES)
    if buffer.DEFAULT_AQM[buffer.POLICY_NAMES[policy_id]] == "mark" and not ecn_on:
        raise ValueError(f"ecn: policy {buffer.POLICY_NAMES[policy_id]!r} only marks (CE), so it needs ECN "
                         "senders (ecn=True or tcp='dctcp')")
    if alpha is None:  # the policy's defaults, cut or extended (last value) to num_classes
        alpha = buffer.default_alpha(buffer.POLICY_NAMES[policy_id], num_classes)
    elif np.ndim(alpha) and np.size(alpha) not in (1, num_classes):
        raise ValueError(f"alpha must have one value or num_classes ({num_classes}) values, got {list(alpha)}")
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (num_classes,))
    if np.any(alpha < 0) or not np.all(np.isfinite(alpha)):
        raise ValueError(f"alpha must be non-negative, got {alpha.tolist()}")
    if beta is None:
        beta = np.ones(num_classes)
    beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), (num_classes,))
    if np.any(beta < 0):
        raise ValueError(f"beta must be non-negative, got {beta.tolist()}")
    red_min_th_pkts, red_max_th_pkts, red_weight = _red_thresholds(
        buffer.POLICY_NAMES[policy_id], red_min_th_pkts, red_max_th_pkts, red_weight, bottleneck_rate_bps,
        mss_bytes)
    _check_aqm(red_min_th_pkts=red_min_th_pkts, red_max_th_pkts=red_max_th_pkts, red_max_p=red_max_p,
               red_weight=red_weight, pie_target_s=pie_target_s, pie_tupdate_s=pie_tupdate_s, pie_a=pie_a,
               pie_b=pie_b, pie_max_burst_s=pie_max_burst_s, pie_mark_threshold=pie_mark_threshold,
               codel_target_s=codel_target_s, codel_interval_s=codel_interval_s)
    fq_cap = flow_queue_capacity(buffer.POLICY_NAMES[policy_id], buffer_pkts, flow_queue_capacity_pkts)
    if buffer.needs_flow_queues(buffer.POLICY_NAMES[policy_id]):
        _check_int("fq_quantum_bytes", fq_quantum_bytes, 1)
        if fq_quantum_bytes < mss_bytes + 52:
            raise ValueError(f"fq_quantum_bytes ({fq_quantum_bytes}) must be at least one data packet at the queue "
                             f"(mss_bytes + 52 = {mss_bytes + 52} bytes)")
    thr = np.broadcast_to(np.asarray(class_threshold_bytes, dtype=np.float64), (max(num_classes - 1, 0),))

    table = traffic.load_table(cdf) if isinstance(cdf, str) else cdf
    if not isinstance(cdf, str):
        traffic.check_cdf(table.size_bytes, table.cdf, name=table.name)
    sizes, probs = traffic.pad_table(table)

    data_pkt_bits = (mss_bytes + DATA_HEADER_BYTES) * 8.0
    tick_s = pkts_per_tick * data_pkt_bits / bottleneck_rate_bps
    base_rtt = (2 * (access_delay_s + bottleneck_delay_s) + data_pkt_bits / access_rate_bps
                + data_pkt_bits / bottleneck_rate_bps + ACK_BYTES * 8 * (1 / access_rate_bps + 1 / bottleneck_rate_bps))
    need = int(math.ceil(base_rtt / tick_s)) + 3
    if delay_line_ticks is None:
        delay_line_ticks = need
    if delay_line_ticks < need:
        raise ValueError(
            f"delay_line_ticks ({delay_line_ticks}) must be >= {need} for a base RTT of {base_rtt * 1e3:.2f} ms"
        )

    return SimParams(
        access_rate_bps=_as_f32(access_rate_bps),
        access_delay_s=_as_f32(access_delay_s),
        bottleneck_rate_bps=_as_f32(bottleneck_rate_bps),
        bottleneck_delay_s=_as_f32(bottleneck_delay_s),
        buffer_pkts=_as_i32(buffer_pkts),
        class_cap_pkts=_as_i32(caps),
        policy_id=_as_i32(policy_id),
        alpha=_as_f32(alpha),
        beta=_as_f32(beta),
        scheduler_id=_as_i32(sched_id),
        class_threshold_bytes=_as_f32(thr),
        tcp_id=_as_i32(tcp_id),
        mss_bytes=_as_f32(mss_bytes),
        initial_cwnd_pkts=_as_f32(initial_cwnd_pkts),
        min_rto_s=_as_f32(min_rto_s),
        max_rto_s=_as_f32(max_rto_s),
        syn_timeout_s=_as_f32(syn_timeout_s),
        rto_granularity_s=_as_f32(rto_granularity_s),
        delayed_ack=_as_i32(delayed_ack),
        dupthresh=_as_i32(dupthresh),
        rto_recovery_id=_as_i32(rto_recovery_id),
        prr_id=_as_i32(prr_id),
        prr_ssrb_id=_as_i32(prr_ssrb_id),
        ecn_cwr_id=_as_i32(ecn_cwr_id),
        rtt_samples_id=_as_i32(rtt_samples_id),
        cubic_beta=_as_f32(cubic_beta),
        cubic_c=_as_f32(cubic_c),
        cubic_fast_convergence=jnp.asarray(bool(cubic_fast_convergence)),
        hystart=jnp.asarray(bool(hystart)),
        hystart_low_window_pkts=_as_f32(hystart_low_window_pkts),
        hystart_min_samples=_as_i32(hystart_min_samples),
        hystart_ack_delta_s=_as_f32(hystart_ack_delta_s),
        hystart_delay_min_s=_as_f32(hystart_delay_min_s),
        hystart_delay_max_s=_as_f32(hystart_delay_max_s),
        ecn=jnp.asarray(ecn_on),
        dctcp_g=_as_f32(dctcp_g),
        red_min_th_pkts=_as_f32(red_min_th_pkts),
        red_max_th_pkts=_as_f32(red_max_th_pkts),
        red_max_p=_as_f32(red_max_p),
        red_weight=_as_f32(red_weight),
        red_gentle=jnp.asarray(bool(red_gentle)),
        pie_target_s=_as_f32(pie_target_s),
        pie_tupdate_s=_as_f32(pie_tupdate_s),
        pie_a=_as_f32(pie_a),
        pie_b=_as_f32(pie_b),
        pie_max_burst_s=_as_f32(pie_max_burst_s),
        pie_mark_threshold=_as_f32(pie_mark_threshold),
        codel_target_s=_as_f32(codel_target_s),
        codel_interval_s=_as_f32(codel_interval_s),
        fq_quantum_bytes=_as_i32(fq_quantum_bytes),
        arrival_id=_as_i32(arrival_id),
        load=_as_f32(load),
        arrival_stop_s=_as_f32(min(arrival_stop_s, 3.0e38)),
        long_flows=_as_i32(long_flows),
        long_flow_start_spread_s=_as_f32(long_flow_start_spread_s),
        cdf_size_bytes=_as_f32(sizes),
        cdf_prob=_as_f32(probs),
        warmup_s=_as_f32(warmup_s),
        num_senders=int(num_senders),
        num_classes=int(num_classes),
        num_flow_slots=int(num_flow_slots),
        queue_capacity_pkts=int(queue_capacity_pkts),
        pkts_per_tick=int(pkts_per_tick),
        delay_line_ticks=int(delay_line_ticks),
        completion_log_size=int(completion_log_size),
        interval_log_size=int(interval_log_size),
        flow_queue_capacity_pkts=fq_cap,
        needs_jax_tick=jax_only(buffer.POLICY_NAMES[policy_id], ecn_on, tcp) or prr_id != 0 or prr_ssrb_id != 0
        or ecn_cwr_id != 0,
    )


def validate(params: SimParams) -> None:
    """Re-check a (possibly hand-modified) unbatched instance; raise ValueError naming the field."""
    leaves = {k: np.asarray(getattr(params, k)) for k in params.__dataclass_fields__
              if isinstance(getattr(params, k), (jnp.ndarray, np.ndarray))}
    for name in ("access_rate_bps", "bottleneck_rate_bps", "mss_bytes", "min_rto_s", "syn_timeout_s", "buffer_pkts"):
        if np.any(leaves[name] <= 0):
            raise ValueError(f"{name} must be positive, got {leaves[name].tolist()}")
    if np.any(leaves["class_cap_pkts"] <= 0):
        raise ValueError(f"class_cap_pkts must be positive, got {leaves['class_cap_pkts'].tolist()}")
    if np.any(leaves["class_cap_pkts"] > params.queue_capacity_pkts):
        raise ValueError("class_cap_pkts exceeds queue_capacity_pkts (the static ring size)")
    from rlbm_jax.env import buffer
    if np.any((leaves["policy_id"] < 0) | (leaves["policy_id"] >= len(buffer.POLICY_NAMES))):
        raise ValueError(f"policy_id out of range: {leaves['policy_id'].tolist()}")
    if np.any((leaves["tcp_id"] < 0) | (leaves["tcp_id"] >= len(TCP_NAMES))):
        raise ValueError(f"tcp_id out of range: {leaves['tcp_id'].tolist()}")
    if np.any((leaves["rto_recovery_id"] < 0) | (leaves["rto_recovery_id"] >= len(RTO_RECOVERY_NAMES))):
        raise ValueError(f"rto_recovery_id out of range: {leaves['rto_recovery_id'].tolist()}")
    if np.any((leaves["prr_id"] < 0) | (leaves["prr_id"] >= len(PRR_NAMES))):
        raise ValueError(f"prr_id out of range: {leaves['prr_id'].tolist()}")
    if np.any((leaves["prr_ssrb_id"] < 0) | (leaves["prr_ssrb_id"] >= len(PRR_SSRB_NAMES))):
        raise ValueError(f"prr_ssrb_id out of range: {leaves['prr_ssrb_id'].tolist()}")
    if np.any((leaves["ecn_cwr_id"] < 0) | (leaves["ecn_cwr_id"] >= len(ECN_CWR_NAMES))):
        raise ValueError(f"ecn_cwr_id out of range: {leaves['ecn_cwr_id'].tolist()}")
    if np.any((leaves["rtt_samples_id"] < 0) | (leaves["rtt_samples_id"] >= len(RTT_SAMPLES_NAMES))):
        raise ValueError(f"rtt_samples_id out of range: {leaves['rtt_samples_id'].tolist()}")
    traffic.check_cdf(leaves["cdf_size_bytes"], leaves["cdf_prob"])
    if params.num_flow_slots < params.num_senders:
        raise ValueError("num_flow_slots must be >= num_senders")
    need = int(np.ceil(np.max(np.asarray(params.base_rtt_s) / np.asarray(params.tick_s)))) + 3
    if params.delay_line_ticks < need:
        raise ValueError(f"delay_line_ticks ({params.delay_line_ticks}) must be >= {need}")
    fq = np.asarray([buffer.needs_flow_queues(buffer.POLICY_NAMES[int(i)]) for i in leaves["policy_id"].reshape(-1)])
    if fq.any():
        buf = np.broadcast_to(leaves["buffer_pkts"].reshape(-1), fq.shape)[fq]
        if params.flow_queue_capacity_pkts < int(buf.max()) + 1:
            raise ValueError(f"flow_queue_capacity_pkts ({params.flow_queue_capacity_pkts}) must be >= buffer_pkts + 1 "
                             f"({int(buf.max()) + 1}) for a policy with per-flow queues")
        pkt = np.broadcast_to((leaves["mss_bytes"] + 52).reshape(-1), fq.shape)[fq]
        quantum = np.broadcast_to(leaves["fq_quantum_bytes"].reshape(-1), fq.shape)[fq]
        if np.any(quantum < pkt):
            raise ValueError(f"fq_quantum_bytes ({quantum.min()}) must be at least one data packet at the queue "
                             f"(mss_bytes + 52 = {pkt.max():g} bytes)")


def flow_queue_capacity(policy: str, buffer_pkts: int, requested: int | None = None) -> int:
    """The static `flow_queue_capacity_pkts` of a run of `policy` with a shared buffer of
    `buffer_pkts`: `requested` (checked), else buffer_pkts + 1 for a policy with per-flow
    queues and 0 for one without."""
    from rlbm_jax.env import buffer

    need = buffer.needs_flow_queues(policy)
    if requested is None:
        return int(buffer_pkts) + 1 if need else 0
    _check_int("flow_queue_capacity_pkts", requested, 0)
    if need and requested < int(buffer_pkts) + 1:
        raise ValueError(f"flow_queue_capacity_pkts ({requested}) must be >= buffer_pkts + 1 ({int(buffer_pkts) + 1}) "
                         f"for policy {policy!r}: a flow's queue may hold the whole buffer and one tick's run")
    return int(requested)


def jax_only(policy: str, ecn: bool, tcp: str = "newreno") -> bool:
    """Whether a run of `policy` (with ECN when `ecn`) and TCP `tcp` needs the JAX tick (what
    the native tick lacks: AQMs, ECN, and the TCP variants it does not implement)."""
    from rlbm_jax.env import buffer

    native_tcp = TCP_VARIANTS[TCP_NAMES.index(tcp)].native if tcp in TCP_NAMES else False
    return bool(ecn) or buffer.DEFAULT_AQM.get(policy, "none") != "none" or not native_tcp


ARED_TARGET_DELAY_S = 0.005  # ns-3.37 RedQueueDisc TargetDelay


def ared_defaults(bottleneck_rate_bps: float, mss_bytes: float) -> tuple:
    """Adaptive RED's automatic (min_th, max_th, weight) as ns-3.37 sets them from the link's
    packet rate C (packets/s of data packets): min_th = max(5, TargetDelay * C / 2), max_th =
    3 min_th, weight = 1 - exp(-1 / C)."""
    ptc = bottleneck_rate_bps / ((mss_bytes + DATA_HEADER_BYTES) * 8.0)
    lo = max(5.0, ARED_TARGET_DELAY_S * ptc / 2.0)
    return lo, 3.0 * lo, 1.0 - math.exp(-1.0 / ptc)


def _red_thresholds(policy, lo, hi, weight, rate_bps, mss_bytes):
    auto = ared_defaults(rate_bps, mss_bytes) if policy == "ared" else (5.0, 15.0, 0.002)
    return (auto[0] if lo is None else lo), (auto[1] if hi is None else hi), (auto[2] if weight is None else weight)


def _check_aqm(**vals):
    for name, val in vals.items():
        if not (np.isfinite(val) and val > 0):
            raise ValueError(f"{name} must be a positive finite number, got {val!r}")
    if vals["red_min_th_pkts"] >= vals["red_max_th_pkts"]:
        raise ValueError(f"red_min_th_pkts ({vals['red_min_th_pkts']}) must be below red_max_th_pkts "
                         f"({vals['red_max_th_pkts']})")
    for name in ("red_max_p", "red_weight", "pie_mark_threshold"):
        if vals[name] > 1:
            raise ValueError(f"{name} must be a probability in (0, 1], got {vals[name]!r}")


def _check_int(name, val, lo):
    if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or val < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {val!r}")


def _lookup(field, name, names):
    if name not in names:
        raise ValueError(f"unknown {field} {name!r}; choose one of {', '.join(names)}")
    return names.index(name)


# ---------------------------------------------------------------------------
# batching
# ---------------------------------------------------------------------------

STATIC_FIELDS = tuple(f.name for f in dataclasses.fields(SimParams)
                      if not f.metadata.get("pytree_node", True))
# static fields that only size buffers: a larger value changes no result (rings are
# indexed modulo their size; logs only get more room), so a batch takes the largest
PADDABLE_FIELDS = ("queue_capacity_pkts", "delay_line_ticks", "completion_log_size", "interval_log_size",
                   "flow_queue_capacity_pkts", "needs_jax_tick")  # (a batch with one run that needs the JAX tick runs it)


def pad_params(items: Sequence) -> list:
    """Params (SimParams, or env params holding them in `.sim`) given one value of each
    static field, so that they can be stacked and vmapped: fields that only size buffers
    (`PADDABLE_FIELDS`, e.g. queue_capacity_pkts, the ring of the largest buffer) take
    the batch's largest value; any other static field must already agree, else a
    ValueError names it."""
    items = list(items)
    if not items:
        raise ValueError("stack_params: need at least one set of params")
    sims = [p.sim if hasattr(p, "sim") else p for p in items]
    if not all(isinstance(s, SimParams) for s in sims):
        raise TypeError("stack_params takes SimParams, or env params with a .sim field")
    common = {}
    for f in STATIC_FIELDS:
        vals = sorted({getattr(s, f) for s in sims})
        if len(vals) > 1 and f not in PADDABLE_FIELDS:
            raise ValueError(f"cannot batch params whose static field {f} differs ({vals}): it fixes array "
                             f"shapes and the simulation itself; build every set with the same {f}")
        common[f] = vals[-1]
    sims = [s.replace(**common) for s in sims]
    outer = [p for p in items if hasattr(p, "sim")]
    if outer:
        for name in [f.name for f in dataclasses.fields(outer[0])
                     if not f.metadata.get("pytree_node", True)]:
            vals = sorted({getattr(p, name) for p in outer})
            if len(vals) > 1:
                raise ValueError(f"cannot batch env params whose static field {name} differs ({vals})")
        return [p.replace(sim=s) for p, s in zip(items, sims)]
    return sims


def stack_params(items: Sequence):
    """Stack params (SimParams or env params) along a new leading axis for `jax.vmap`,
    padding buffer sizes to the largest (`pad_params`): different buffer sizes, TCPs,
    loads and policies batch together."""
    import jax

    padded = pad_params(items)
    return jax.tree.map(lambda *xs: jnp.stack(xs), *padded)
