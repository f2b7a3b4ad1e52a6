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

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rlbm_jax.env import capacity, model, traffic
from rlbm_jax.env.tcp.variants import TCP_NAMES, VARIANTS as TCP_VARIANTS  # the TCP registry: tcp_id indexes it

# The names of the categorical choices, in leaf-index order, as `model` declares them (each
# choice's doc is there; calibration/REPORT.md section 6 measures the TCP-model ones).
RTO_RECOVERY_NAMES = model.BY_NAME["rto_recovery"].values()
PRR_NAMES = model.BY_NAME["prr"].values()
PRR_SSRB_NAMES = model.BY_NAME["prr_ssrb"].values()
ECN_CWR_NAMES = model.BY_NAME["ecn_cwr"].values()
RTT_SAMPLES_NAMES = model.BY_NAME["rtt_samples"].values()
RTO_REARM_NAMES = model.BY_NAME["rto_rearm"].values()
RED_SYN_NAMES = model.BY_NAME["red_syn"].values()
PACING_NAMES = model.BY_NAME["pacing"].values()
# the TCP model of rlbm_jax 0.2, before go-back-N (the committed results of that version
# were made with it; a run config that names no model choice predates them)
LEGACY_TCP_MODEL = dict(rto_recovery="sack", rtt_samples="every-ack")
# model choices whose default changed: a run config without one predates it and ran this value
# (rto_rearm: rlbm_jax before 0.4 restarted the timer on any ACK of new data)
# (red_syn: rlbm_jax before 0.5 dropped a SYN with RED's base probability)
PREVIOUS_DEFAULTS = dict(rto_rearm="any-ack", red_syn="base")


def recorded_tcp_model(record: dict) -> dict:
    """Every TCP-model choice (`model`'s "tcp-model" group) of a run from what its config
    `record` names: a record that names none of `LEGACY_TCP_MODEL`'s predates them and was
    made with that model; one without a choice of `PREVIOUS_DEFAULTS` ran that choice's
    earlier default; any other choice it does not name ran the simulator's default (`prr`,
    `prr_ssrb`, `ecn_cwr`: added with their earlier behaviour as the default)."""
    names = [p.name for p in model.PARAMS if p.group == "tcp-model"]
    out = {k: model.DEFAULTS[k] for k in names}
    if not any(k in record for k in LEGACY_TCP_MODEL):
        out.update(LEGACY_TCP_MODEL)
    out.update({k: v for k, v in PREVIOUS_DEFAULTS.items() if k not in record})
    out.update({k: record[k] for k in names if k in record})
    return out


SCHEDULER_NAMES = model.BY_NAME["scheduler"].values()
ARRIVAL_NAMES = model.BY_NAME["arrival"].values()

DATA_HEADER_BYTES = 54  # TCP with timestamps (32) + IPv4 (20) + PPP (2)
ACK_BYTES = 54


@struct.dataclass
class SimParams:
    """Every parameter of the simulator.  Shapes in brackets; P = classes, S = senders."""

    # ---- topology -------------------------------------------------------
    access_rate_bps: jnp.ndarray  # [] each sender's access link rate
    access_delay_s: jnp.ndarray  # [] access link one-way propagation delay (the first flow group's)
    # per flow group (G = flow_groups; sender s is in group s mod G): read by the tick only where G > 1
    group_access_delay_s: jnp.ndarray  # [G] each group's access delay
    group_tcp_id: jnp.ndarray  # [G] each group's TCP (tcp_id: the first group's)
    group_pacing_id: jnp.ndarray  # [G] each group's pacing (pacing_id: the first group's)
    group_max_pacing_rate_bps: jnp.ndarray  # [G] each group's highest pacing rate
    group_sender_rate_bps: jnp.ndarray  # [G] each group's rate sender's starting rate (tcp=rate)
    group_long_flow_start_s: jnp.ndarray  # [G] each group's long flows' start offset
    bottleneck_rate_bps: jnp.ndarray  # [] switch -> sink link rate
    bottleneck_delay_s: jnp.ndarray  # [] switch -> sink one-way propagation delay
    # the bottleneck's capacity schedule (rlbm_jax.env.capacity), K = capacity_rows rows (0: none,
    # bottleneck_rate_bps throughout); padding rows start at +inf (3e38)
    capacity_times_s: jnp.ndarray  # [K] start of each segment (the first at 0)
    capacity_rates_bps: jnp.ndarray  # [K] its rate (<= bottleneck_rate_bps, the peak the tick is sized by)
    capacity_cum_bits: jnp.ndarray  # [K] bits offered from the period's start to the segment's start
    capacity_period_s: jnp.ndarray  # [] the table repeats every period_s (3e38: the last rate holds)
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
    bbr_rate_sample_id: jnp.ndarray  # [] index into the bbr_rate_sample choices (1: ns-3.37's interval)
    rtt_clock_id: jnp.ndarray  # [] index into the rtt_clock choices (1: ns-3.37's 1 ms timestamp clock)
    long_flow_syn_id: jnp.ndarray  # [] index into the long_flow_syn choices (1: the SYN waits in the queue)
    sack_credit_id: jnp.ndarray  # [] index into the sack_credit choices (1: ns-3.37's credit after a timeout)
    ecn_cwr_id: jnp.ndarray  # [] index into ECN_CWR_NAMES
    rtt_samples_id: jnp.ndarray  # [] index into RTT_SAMPLES_NAMES
    rto_rearm_id: jnp.ndarray  # [] index into RTO_REARM_NAMES
    red_syn_id: jnp.ndarray  # [] index into RED_SYN_NAMES
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
    pacing_id: jnp.ndarray  # [] index into PACING_NAMES (0 off, 1 ns-3.37's TcpSocketState pacing)
    max_pacing_rate_bps: jnp.ndarray  # [] pacing: the highest rate (payload bit/s)
    sender_rate_bps: jnp.ndarray  # [] tcp=rate: the rate a rate sender starts at (payload bit/s)
    pacing_ss_ratio: jnp.ndarray  # [] pacing: rate / (cwnd / sRTT) while cwnd < ssthresh / 2
    pacing_ca_ratio: jnp.ndarray  # [] pacing: rate / (cwnd / sRTT) otherwise
    pace_initial_window: jnp.ndarray  # [] bool: the first initial_cwnd_pkts segments are paced too
    bbr_high_gain: jnp.ndarray  # [] BBR: STARTUP's pacing and window gain (DRAIN paces at its inverse)
    bbr_bw_window_rounds: jnp.ndarray  # [] int32 BBR: rounds of the delivery rate's max filter
    bbr_rtt_window_s: jnp.ndarray  # [] BBR: the min RTT's expiry
    bbr_probe_rtt_s: jnp.ndarray  # [] BBR: least time in PROBE_RTT
    # ---- AQM (the policy's `aqm`, rlbm_jax.env.switch.disciplines; ns-3.37 queue-disc names) --
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
    fq_flow_cap_pkts: jnp.ndarray  # [] fq: each flow's queue cap (packets) until an agent sets one (knob flow_cap_pkts)
    # ---- traffic ---------------------------------------------------------
    arrival_id: jnp.ndarray  # [] 0: lambda = load*C/(8E[size]); 1: thesis code
    load: jnp.ndarray  # [] offered load as a fraction of bottleneck capacity
    arrival_stop_s: jnp.ndarray  # [] no new flows after this time
    long_flows: jnp.ndarray  # [] K long-lived flows started at t = 0
    long_flow_start_spread_s: jnp.ndarray  # [] long flows start uniformly in [0, spread)
    long_flow_start_s: jnp.ndarray  # [] ... after this offset (the first flow group's)
    incast_query_rate_per_s: jnp.ndarray  # [] incast queries per second (rlbm_jax.env.incast)
    incast_response_bytes: jnp.ndarray  # [] each incast response's size
    cdf_size_bytes: jnp.ndarray  # [M] flow-size table (padded)
    cdf_prob: jnp.ndarray  # [M]
    # ---- measurement -------------------------------------------------------
    warmup_s: jnp.ndarray  # [] excluded from time-averaged metrics
    # ---- static shapes -----------------------------------------------------
    num_senders: int = struct.field(pytree_node=False, default=10)
    flow_groups: int = struct.field(pytree_node=False, default=1)
    num_classes: int = struct.field(pytree_node=False, default=2)
    num_flow_slots: int = struct.field(pytree_node=False, default=64)
    queue_capacity_pkts: int = struct.field(pytree_node=False, default=1000)
    pkts_per_tick: int = struct.field(pytree_node=False, default=1)
    delay_line_ticks: int = struct.field(pytree_node=False, default=64)
    completion_log_size: int = struct.field(pytree_node=False, default=1024)
    interval_log_size: int = struct.field(pytree_node=False, default=16)  # finished flows an agent interval lists
    # long flows (slots 0..A-1) a sender agent drives (`sim.FLOW_KNOBS`; their statistics in the interval record)
    agent_flows: int = struct.field(pytree_node=False, default=0)
    incast_fan_in: int = struct.field(pytree_node=False, default=0)  # senders each incast query asks (0: none)
    # per-flow queues (rlbm_jax.env.switch.flowqueue, FQ-CoDel): runs each flow slot's ring holds; 0
    # allocates none (policies without per-flow queues), and the tick then leaves their code out
    flow_queue_capacity_pkts: int = struct.field(pytree_node=False, default=0)
    # rows of the capacity schedule's table (0: no schedule, and the tick leaves its code out)
    capacity_rows: int = struct.field(pytree_node=False, default=0)
    # the run's model choices, ((name, value), ...) for every choice `model` declares (a batch
    # holds the union): static, so that a backend's refusal (`model.missing`) holds for traced
    # and batched params alike
    model_choices: tuple = struct.field(pytree_node=False, default=())

    # ---- derived quantities (pure functions of the leaves) ---------------
    @property
    def needs_jax_tick(self) -> bool:
        """Whether the run asks for something the native tick does not implement."""
        return bool(model.missing("native", self))

    @property
    def has_capacity_schedule(self) -> bool:
        """Whether the run has a capacity schedule (static: its table has rows)."""
        return self.capacity_rows > 0

    @property
    def data_pkt_bits(self):
        return (self.mss_bytes + DATA_HEADER_BYTES) * 8.0

    @property
    def tick_s(self):
        """Tick length: `pkts_per_tick` data packets' serialisation at the bottleneck (its
        peak rate, `bottleneck_rate_bps`, when a capacity schedule varies it)."""
        return self.pkts_per_tick * self.data_pkt_bits / self.bottleneck_rate_bps

    @property
    def base_rtt_s(self):
        """Propagation + serialisation RTT of an empty path (data one way, ACK back)."""
        ser_data = self.data_pkt_bits / self.access_rate_bps + self.data_pkt_bits / self.bottleneck_rate_bps
        ser_ack = ACK_BYTES * 8.0 / self.access_rate_bps + ACK_BYTES * 8.0 / self.bottleneck_rate_bps
        return 2.0 * (self.access_delay_s + self.bottleneck_delay_s) + ser_data + ser_ack

    def of_sender(self, run_value, group_values, sender):
        """A per-group quantity for flows of `sender` ([] or [F]): `run_value` (the run's
        scalar) with one flow group, so the one-group tick is unchanged; else
        `group_values[sender mod flow_groups]`."""
        if self.flow_groups == 1:
            return run_value
        return group_values[sender % self.flow_groups]

    @property
    def group_base_rtt_s(self):
        """[G] each flow group's empty-path RTT (`base_rtt_s` with its access delay)."""
        return self.base_rtt_s + 2.0 * (self.group_access_delay_s - self.access_delay_s)

    @property
    def group_access_offset_s(self):
        """[G] each flow group's sender -> switch time of a data packet (its senders' clock
        shift, `access_offset_s`)."""
        return self.data_pkt_bits / self.access_rate_bps + self.group_access_delay_s

    @property
    def group_ack_delay_ticks(self):
        """[G] each flow group's `ack_delay_ticks`."""
        rest = self.group_base_rtt_s - self.data_pkt_bits / self.bottleneck_rate_bps
        return jnp.maximum(jnp.round(rest / self.tick_s).astype(jnp.int32) + 1, 1)

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
        further ones wait a tick and are counted in `events_deferred`); with several flow
        groups, each group's ACKs come from its own departure tick, k records each."""
        return self.pkts_per_tick * self.flow_groups + 3

    @property
    def bdp_pkts(self):
        return self.bottleneck_rate_bps * self.base_rtt_s / self.data_pkt_bits


# ---------------------------------------------------------------------------
# construction and validation
# ---------------------------------------------------------------------------

# `build` makes its leaves on the host and moves them to the device in one `jax.device_put`
# (one eager `jnp.asarray` per leaf cost about 0.1 ms each, 90 of them per build); the
# leaves are the same arrays either way: strong float32 / int32 / bool, the same values.
def _as_f32(x):
    return np.asarray(x, dtype=np.float32)


def _as_i32(x):
    return np.asarray(x, dtype=np.int32)


def resolve(**kw) -> dict:
    """Every declared parameter (`model.PARAMS`) of a run: `kw` over the declared defaults,
    checked (a ValueError names the parameter), with the derived defaults filled in: the
    shared buffer, the ring sizes, the policy's alphas, RED's thresholds, the delay line."""
    from rlbm_jax.env.switch import buffer  # local: buffer imports nothing from here

    model.check_names(kw)
    r = {**model.DEFAULTS, **kw}
    for p in model.PARAMS:
        p.check(r[p.name])
    num_classes, num_senders, num_flow_slots = int(r["num_classes"]), int(r["num_senders"]), int(r["num_flow_slots"])
    if num_flow_slots < num_senders:
        raise ValueError(f"num_flow_slots must be >= num_senders ({num_senders}), got {num_flow_slots}")
    if r["agent_flows"] > r["long_flows"]:
        raise ValueError(f"agent_flows ({r['agent_flows']}) must not exceed long_flows ({r['long_flows']}): an "
                         "agent drives long-lived flows (slots 0..agent_flows-1)")
    if r["incast_fan_in"] > num_senders:
        raise ValueError(f"incast_fan_in ({r['incast_fan_in']}) must not exceed num_senders ({num_senders}): a "
                         "query asks that many distinct senders")
    if r["incast_fan_in"] > 0 and not r["incast_query_rate_per_s"] > 0:
        raise ValueError(f"incast_fan_in ({r['incast_fan_in']}) asks for incast traffic, but incast_query_rate_per_s "
                         f"is {r['incast_query_rate_per_s']}: give a positive query rate, or incast_fan_in 0")
    if r["incast_fan_in"] == 0 and r["incast_query_rate_per_s"] > 0:
        raise ValueError(f"incast_query_rate_per_s ({r['incast_query_rate_per_s']}) asks for incast queries, but "
                         "incast_fan_in is 0: give the senders each query asks (incast_fan_in > 0)")
    if r["long_flows"] > num_flow_slots:
        raise ValueError(f"long_flows ({r['long_flows']}) must not exceed num_flow_slots ({num_flow_slots})")
    caps = _per_class("buffer_per_class_pkts", r["buffer_per_class_pkts"], num_classes).astype(np.int64)
    r["buffer_per_class_pkts"] = caps
    if r["buffer_pkts"] is None:
        r["buffer_pkts"] = int(caps.sum())
    if r["queue_capacity_pkts"] is None:
        r["queue_capacity_pkts"] = int(caps.max())
    if caps.max() > r["queue_capacity_pkts"]:
        raise ValueError(f"buffer_per_class_pkts ({int(caps.max())}) exceeds queue_capacity_pkts "
                         f"({r['queue_capacity_pkts']}), the static ring size; raise queue_capacity_pkts")
    policy = r["policy"]
    groups = _resolve_groups(r, num_senders)
    variants = [TCP_VARIANTS[TCP_NAMES.index(t)] for t in groups["tcp"]]
    if len({v.ecn_always for v in variants}) > 1:
        raise ValueError(f"tcp: {', '.join(v.name for v in variants if v.ecn_always)} turns ECN on for its own "
                         "senders, and ECN is one choice of the run here: give every flow group such a TCP, or none")
    r["ecn"] = bool(r["ecn"]) or variants[0].ecn_always  # DCTCP turns ECN on itself (ns-3.37 TcpDctcp::Init)
    if buffer.needs_ecn(policy) and not r["ecn"]:
        raise ValueError(f"ecn: policy {policy!r} only marks (CE), so it needs ECN senders (ecn=True or tcp='dctcp')")
    alpha = buffer.default_alpha(policy, num_classes) if r["alpha"] is None else r["alpha"]
    r["alpha"] = _per_class("alpha", alpha, num_classes)
    r["beta"] = _per_class("beta", np.ones(num_classes) if r["beta"] is None else r["beta"], num_classes)
    r["red_min_th_pkts"], r["red_max_th_pkts"], r["red_weight"] = _red_thresholds(
        policy, r["red_min_th_pkts"], r["red_max_th_pkts"], r["red_weight"], r["bottleneck_rate_bps"], r["mss_bytes"])
    for name in ("red_min_th_pkts", "red_max_th_pkts", "red_weight"):
        model.BY_NAME[name].check(r[name])
    if r["red_min_th_pkts"] >= r["red_max_th_pkts"]:
        raise ValueError(f"red_min_th_pkts ({r['red_min_th_pkts']}) must be below red_max_th_pkts "
                         f"({r['red_max_th_pkts']})")
    r["flow_queue_capacity_pkts"] = flow_queue_capacity(policy, r["buffer_pkts"], r["flow_queue_capacity_pkts"])
    if buffer.needs_flow_queues(policy) and r["fq_quantum_bytes"] < r["mss_bytes"] + 52:
        raise ValueError(f"fq_quantum_bytes ({r['fq_quantum_bytes']}) must be at least one data packet at the queue "
                         f"(mss_bytes + 52 = {r['mss_bytes'] + 52} bytes)")
    thr = np.asarray(r["class_threshold_bytes"], dtype=np.float64).reshape(-1)
    if thr.size not in (1, num_classes - 1) and num_classes > 1:
        raise ValueError(f"class_threshold_bytes must have one value or num_classes - 1 ({num_classes - 1}) values, "
                         f"got {thr.tolist()}")
    r["class_threshold_bytes"] = np.broadcast_to(thr[:1] if thr.size == 1 else thr, (max(num_classes - 1, 0),))
    cdf = r["cdf"]
    if isinstance(cdf, str):
        r["cdf"] = traffic.load_table(cdf)
    elif isinstance(cdf, traffic.SizeTable):
        traffic.check_cdf(cdf.size_bytes, cdf.cdf, name=cdf.name)
    else:
        raise ValueError(f"cdf must be a table name, a CSV path or a SizeTable, got {type(cdf).__name__}")
    rate, delays = r["bottleneck_rate_bps"], max(groups["access_delay_s"]) + r["bottleneck_delay_s"]
    data_pkt_bits = (r["mss_bytes"] + DATA_HEADER_BYTES) * 8.0
    tick_s = r["pkts_per_tick"] * data_pkt_bits / rate
    _resolve_schedule(r, tick_s)
    base_rtt = (2 * delays + data_pkt_bits / r["access_rate_bps"] + data_pkt_bits / rate
                + ACK_BYTES * 8 * (1 / r["access_rate_bps"] + 1 / rate))
    need = int(math.ceil(base_rtt / tick_s)) + 3
    if r["delay_line_ticks"] is None:
        r["delay_line_ticks"] = need
    if r["delay_line_ticks"] < need:
        raise ValueError(f"delay_line_ticks ({r['delay_line_ticks']}) must be >= {need} for a base RTT of "
                         f"{base_rtt * 1e3:.2f} ms")
    return r


def _resolve_groups(r: dict, num_senders: int) -> dict:
    """The per-group parameters (`model.PER_GROUP`) as one value per flow group: {name:
    [G values]}.  A list of one value is that value; a list of several needs flow_groups of
    that many (a ValueError names what disagrees); flow_groups may not exceed the senders."""
    G = int(r["flow_groups"])
    if G > num_senders:
        raise ValueError(f"flow_groups ({G}) must not exceed num_senders ({num_senders}): sender s is in group "
                         "s mod flow_groups, so a group needs a sender")
    out = {}
    for p in model.PER_GROUP:
        v = model.group_values(p, r[p.name])
        if len(v) == 1:
            r[p.name] = v[0]
        elif len(v) != G:
            raise ValueError(f"{p.name} has {len(v)} values ({', '.join(map(str, v))}) but flow_groups is {G}: give "
                             f"one value, or one per flow group (--flow-groups {len(v)})")
        else:
            r[p.name] = tuple(v)
        out[p.name] = list(v) * G if len(v) == 1 else list(v)
    return out


def _resolve_schedule(r: dict, tick_s: float) -> None:
    """The capacity schedule loaded (`capacity.load`: None for "none") and checked against the
    link (every rate at most bottleneck_rate_bps, a period of at least one tick), and its
    table's static rows (`capacity_rows`) derived or checked."""
    sched = capacity.load(r["capacity_schedule"])
    rows = r["capacity_rows"]
    if sched is not None:
        r["capacity_schedule"] = sched
        if sched.peak_bps > r["bottleneck_rate_bps"]:
            raise ValueError(f"capacity_schedule {sched.name}: its peak rate ({sched.peak_bps:g} bit/s) exceeds "
                             f"bottleneck_rate_bps ({r['bottleneck_rate_bps']:g}), the link's peak that sizes the tick; "
                             f"raise bottleneck_rate_bps to at least {sched.peak_bps:g}")
        if sched.repeats and sched.period_s < tick_s:
            raise ValueError(f"capacity_schedule {sched.name}: its period ({sched.period_s:g} s) is shorter than a "
                             f"tick ({tick_s:g} s)")
        if rows is not None and rows < sched.rows:
            raise ValueError(f"capacity_rows ({rows}) must be >= the capacity schedule's rows ({sched.rows})")
    r["capacity_rows"] = (sched.rows if sched is not None else 0) if rows is None else int(rows)


def config_record(kw: dict, params: SimParams | None = None) -> dict:
    """Every declared parameter of a run as JSON holds it: `kw` resolved (`resolve`: the
    defaults and derived values filled in), and where the built `params` are given, the
    model choices read back from them (what ran, e.g. the "rl" policy an agent drives)."""
    r = resolve(**kw)
    if params is not None:
        for name, value in choices_of(params):
            if not model.BY_NAME[name].per_group or params.flow_groups == 1:
                r[name] = value
        for c in model.PER_GROUP:  # several flow groups: each group's value, in group order
            if c.is_choice and params.flow_groups > 1 and np.ndim(getattr(params, c.group_leaf)) == 1:
                r[c.name] = tuple(c.values()[int(i)] for i in np.asarray(getattr(params, c.group_leaf)))
    return {p.name: model.json_value(r[p.name]) for p in model.PARAMS}


def _per_class(name, value, num_classes):
    """A per-class vector: one value for every class, or one per class (a ValueError names `name`)."""
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    if a.size not in (1, num_classes):
        raise ValueError(f"{name} must have one value or num_classes ({num_classes}) values, got {a.tolist()}")
    return np.broadcast_to(a, (num_classes,)).copy()


def make_params(**kw) -> SimParams:
    """Build validated `SimParams` from keyword arguments named as `model.PARAMS` declares
    them (each has its default there; an unknown name is refused).

    `buffer_per_class_pkts` is each class's FIFO cap (a list gives one per class);
    the shared buffer `buffer_pkts` defaults to their sum, as in the thesis.
    `policy` is a name from `rlbm_jax.env.switch.buffer.POLICY_NAMES`.  The AQM parameters
    take ns-3.37's queue-disc defaults; RED's thresholds and weight left as None are
    ns-3's (5, 15, 0.002), or for "ared" its automatic ones (`ared_defaults`).
    `flow_queue_capacity_pkts` (static) sizes the per-flow queues of a policy that has them
    ("fq-codel"): None gives buffer_pkts + 1 there (a flow may hold the whole buffer plus
    the tick's run before the overflow drops) and 0 elsewhere.
    """
    return build(resolve(**kw))


def host_params(**kw) -> SimParams:
    """`make_params(**kw)` with its leaves left on the host (numpy arrays of the same dtypes
    and values), checked the same way: for reading a configuration's derived quantities
    (`bdp_pkts`, `tick_s`, `buffer_pkts`) without moving about 90 arrays to the device.
    The simulator takes `make_params`'."""
    return build(resolve(**kw), device=False)


def choices_of(p: SimParams) -> tuple:
    """The model choices that concrete params hold in their leaves ((name, value), ...; a
    batch: the union), read back through `model`'s declarations."""
    recs = []
    for c in model.CHOICES:
        for v in np.unique(np.asarray(getattr(p, c.group_leaf if c.per_group and p.flow_groups > 1
                                              else c.field)).reshape(-1)):
            recs.append((c.name, bool(v) if c.kind == "bool" else int(v) if c.keeps_value else c.values()[int(v)]))
    return model.merge_choices(recs)


def unrecorded_choices(p: SimParams) -> list:
    """[(name, value)] of the model choices that params' leaves hold and their record
    (`model_choices`) lacks: a leaf edited by hand without `rederive`.  The tick compiles
    only what the record names (each TCP variant's code and columns, the model choices'
    optional columns), so such params would run another model than their leaves ask for.
    Empty where the leaves are traced (nothing to read)."""
    try:
        found = choices_of(p)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return []
    recorded = set(model.merge_choices(p.model_choices))
    return [c for c in model.merge_choices(p.model_choices, found) if c not in recorded]


def check_record(p: SimParams) -> None:
    """Refuse (ValueError, naming each) params whose leaves hold a model choice their record
    lacks (`unrecorded_choices`)."""
    extra = unrecorded_choices(p)
    if extra:
        raise ValueError("the params' leaves hold model choices their record (model_choices) lacks: "
                         + ", ".join(f"{n}={v!r}" for n, v in extra)
                         + "; after editing a leaf by hand, call rlbm_jax.env.params.rederive(params)")


def rederive(p: SimParams, *extra_choices) -> SimParams:
    """`p` with its static derived fields recomputed from its (concrete) leaves: the record of
    model choices (`choices_of`, with `extra_choices` records joined, e.g. the values a traced
    draw may take) and the per-flow queues' ring.  Whatever edits leaves by hand calls this,
    so that no backend runs params whose record understates what they ask for."""
    from rlbm_jax.env.switch import buffer

    names = {buffer.POLICY_NAMES[int(i)] for i in np.unique(np.asarray(p.policy_id).reshape(-1))}
    buf = int(np.max(np.asarray(p.buffer_pkts)))
    fq = max([p.flow_queue_capacity_pkts] + [flow_queue_capacity(n, buf) for n in names])
    return p.replace(model_choices=model.merge_choices(choices_of(p), *extra_choices), flow_queue_capacity_pkts=fq)


# integer parameters the tick reads as float32 leaves
FLOAT_LEAVES = ("mss_bytes", "initial_cwnd_pkts")


def build(r: dict, device: bool = True) -> SimParams:
    """SimParams of a resolved parameter dict (`resolve`): each declared parameter to its
    leaf (a choice as its index), the flow-size table padded, the choices' static record.
    `device=False` leaves the leaves as numpy arrays (`host_params`)."""
    sizes, probs = traffic.pad_table(r["cdf"])
    sched = r["capacity_schedule"]
    times, rates, cum, period = capacity.table(sched if isinstance(sched, capacity.Schedule) else None,
                                               int(r["capacity_rows"]), float(r["bottleneck_rate_bps"]))
    out = {}
    G = int(r["flow_groups"])
    for p in model.PARAMS:
        if not p.field or p.static:
            continue
        v = r[p.name]
        if p.per_group:
            vals = model.group_values(p, v) * (G if not isinstance(v, (list, tuple, np.ndarray)) else 1)
            out[p.group_leaf] = (_as_i32([p.values().index(x) for x in vals]) if p.kind == "choice"
                                 else _as_f32(vals))
            v = vals[0]
        if p.kind == "choice" and not p.keeps_value:
            out[p.field] = _as_i32(p.values().index(v))
        elif p.kind == "bool":
            out[p.field] = np.asarray(bool(v))
        elif p.kind in ("int", "ints", "choice") and p.field not in FLOAT_LEAVES:
            out[p.field] = _as_i32(v)
        else:
            out[p.field] = _as_f32(min(v, 3.0e38) if p.allow_inf else v)
    out.update(cdf_size_bytes=_as_f32(sizes), cdf_prob=_as_f32(probs), capacity_times_s=_as_f32(times),
               capacity_rates_bps=_as_f32(rates), capacity_cum_bits=_as_f32(cum), capacity_period_s=_as_f32(period))
    statics = {p.name: int(r[p.name]) for p in model.PARAMS if p.static}
    return SimParams(**(jax.device_put(out) if device else out), **statics, model_choices=model.used_choices(r))


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
    from rlbm_jax.env.switch import buffer
    for c in model.CHOICES:  # every choice's leaf holds one of its declared values (an index, or the value)
        codes = [int(v) for v in c.values()] if c.keeps_value or c.kind == "bool" else range(len(c.values()))
        if not np.all(np.isin(leaves[c.field].astype(np.int64), list(codes))):
            raise ValueError(f"{c.field} out of range: {leaves[c.field].tolist()}")
    traffic.check_cdf(leaves["cdf_size_bytes"], leaves["cdf_prob"])
    _validate_schedule(params, leaves)
    if params.num_flow_slots < params.num_senders:
        raise ValueError("num_flow_slots must be >= num_senders")
    G = params.flow_groups
    for c in model.PER_GROUP:
        g = leaves[c.group_leaf]
        if g.shape[-1:] != (G,):
            raise ValueError(f"{c.group_leaf} must have flow_groups ({G}) values, got {g.tolist()}")
        if G > 1 and not np.array_equal(g[..., 0], leaves[c.field]):
            raise ValueError(f"{c.field} must be the first flow group's value ({c.group_leaf}[0]), got "
                             f"{leaves[c.field].tolist()} against {g[..., 0].tolist()}")
    if G > params.num_senders:
        raise ValueError("flow_groups must not exceed num_senders")
    rtt = params.group_base_rtt_s if G > 1 else params.base_rtt_s
    need = int(np.ceil(np.max(np.asarray(rtt) / np.asarray(params.tick_s)))) + 3
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


def _validate_schedule(params: SimParams, leaves: dict) -> None:
    """The capacity schedule's table (unbatched): its static rows, starts from 0 increasing then
    padding, rates within [0, bottleneck_rate_bps], a period after the last start and at least
    a tick long, and the bits before each start as its rates and starts give them."""
    times, rates = leaves["capacity_times_s"].astype(np.float64), leaves["capacity_rates_bps"].astype(np.float64)
    cum, period = leaves["capacity_cum_bits"].astype(np.float64), float(leaves["capacity_period_s"])
    if times.shape != (params.capacity_rows,) or rates.shape != times.shape or cum.shape != times.shape:
        raise ValueError(f"capacity_times_s, capacity_rates_bps and capacity_cum_bits must have capacity_rows "
                         f"({params.capacity_rows}) entries")
    if params.capacity_rows == 0:
        return
    n = int(np.sum(times < capacity.PAD_S / 2))
    if n == 0 or np.any(times[n:] < capacity.PAD_S / 2):
        raise ValueError("capacity_times_s: the segments come first, then padding rows (3e38)")
    capacity.check(times[:n], rates[:n], period if period < capacity.PAD_S / 2 else np.inf)
    if np.any(rates[:n] > float(leaves["bottleneck_rate_bps"]) * (1 + 1e-6)):
        raise ValueError("capacity_rates_bps must not exceed bottleneck_rate_bps")
    if period < float(np.asarray(params.tick_s)):
        raise ValueError("capacity_period_s must be at least one tick")
    sched = capacity.Schedule(times[:n], rates[:n], period if period < capacity.PAD_S / 2 else np.inf)
    want = capacity.table(sched, n, 1.0)[2]
    if not np.allclose(cum[:n], want, rtol=1e-5, atol=1.0):
        raise ValueError("capacity_cum_bits does not match capacity_times_s and capacity_rates_bps "
                         "(build the table with rlbm_jax.env.capacity.table)")


def flow_queue_capacity(policy: str, buffer_pkts: int, requested: int | None = None) -> int:
    """The static `flow_queue_capacity_pkts` of a run of `policy` with a shared buffer of
    `buffer_pkts`: `requested` (checked), else buffer_pkts + 1 for a policy with per-flow
    queues and 0 for one without."""
    from rlbm_jax.env.switch import buffer

    need = buffer.needs_flow_queues(policy)
    if requested is None:
        return int(buffer_pkts) + 1 if need else 0
    _check_int("flow_queue_capacity_pkts", requested, 0)
    if need and requested < int(buffer_pkts) + 1:
        raise ValueError(f"flow_queue_capacity_pkts ({requested}) must be >= buffer_pkts + 1 ({int(buffer_pkts) + 1}) "
                         f"for policy {policy!r}: a flow's queue may hold the whole buffer and one tick's run")
    return int(requested)


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


def _check_int(name, val, lo):
    if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or val < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {val!r}")


# ---------------------------------------------------------------------------
# batching
# ---------------------------------------------------------------------------

STATIC_FIELDS = tuple(f.name for f in dataclasses.fields(SimParams)
                      if not f.metadata.get("pytree_node", True))
# static fields that only size buffers: a larger value changes no result (rings are
# indexed modulo their size; logs only get more room), so a batch takes the largest
PADDABLE_FIELDS = ("queue_capacity_pkts", "delay_line_ticks", "completion_log_size", "interval_log_size",
                   "flow_queue_capacity_pkts", "model_choices",  # (a batch's choices: the union of its runs')
                   "capacity_rows")  # (padding rows never start; no schedule pads to its constant rate)


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
        if f == "model_choices":
            common[f] = model.merge_choices(*(s.model_choices for s in sims))
            continue
        vals = sorted({getattr(s, f) for s in sims})
        if len(vals) > 1 and f not in PADDABLE_FIELDS:
            raise ValueError(f"cannot batch params whose static field {f} differs ({vals}): it fixes array "
                             f"shapes and the simulation itself; build every set with the same {f}")
        common[f] = vals[-1]
    sims = [_pad_schedule(s, common["capacity_rows"]).replace(**common) for s in sims]
    outer = [p for p in items if hasattr(p, "sim")]
    if outer:
        for name in [f.name for f in dataclasses.fields(outer[0])
                     if not f.metadata.get("pytree_node", True)]:
            vals = sorted({getattr(p, name) for p in outer})
            if len(vals) > 1:
                raise ValueError(f"cannot batch env params whose static field {name} differs ({vals})")
        return [p.replace(sim=s) for p, s in zip(items, sims)]
    return sims


def _pad_schedule(p: SimParams, rows: int) -> SimParams:
    """`p` with its capacity schedule's table padded to `rows` rows (none: the constant
    schedule at its bottleneck_rate_bps, which runs bit for bit as none)."""
    if p.capacity_rows == rows:
        return p
    t, r, c, per = capacity.pad_leaves(p.capacity_times_s, p.capacity_rates_bps, p.capacity_cum_bits,
                                       p.capacity_period_s, p.bottleneck_rate_bps, rows)
    return p.replace(capacity_times_s=t, capacity_rates_bps=r, capacity_cum_bits=c, capacity_period_s=per,
                     capacity_rows=rows)


def stack_params(items: Sequence):
    """Stack params (SimParams or env params) along a new leading axis for `jax.vmap`,
    padding buffer sizes to the largest (`pad_params`): different buffer sizes, TCPs,
    loads and policies batch together."""
    padded = pad_params(items)
    flat = [jax.tree.flatten(p) for p in padded]
    treedef = flat[0][1]
    if any(td != treedef for _, td in flat):
        raise ValueError("stack_params: the params differ in structure (every item must be the same kind of params)")
    cols = list(zip(*(leaves for leaves, _ in flat)))
    # concrete strong-typed arrays (what `make_params` builds) are stacked on the host and
    # put on the device together (`jnp.stack` compiles a program for every leaf shape and
    # batch size: seconds each for a large batch; one `device_put` per leaf costs about as
    # much as the stacking); anything else (traced, weak-typed, Python numbers) by
    # `jnp.stack`, which keeps its types
    host = [all(isinstance(x, np.ndarray) or (isinstance(x, jax.Array) and not x.weak_type
                                              and not isinstance(x, jax.core.Tracer)) for x in col)
            for col in cols]
    moved = iter(jax.device_put([np.stack([np.asarray(x) for x in col]) for col, h in zip(cols, host) if h]))
    return jax.tree.unflatten(treedef, [next(moved) if h else jnp.stack(col) for col, h in zip(cols, host)])
