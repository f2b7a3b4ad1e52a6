"""The simulator's model, declared once.

Every parameter and model choice of the simulator is one `Param` in `PARAMS`: its name
(with its unit), the group of the physics it belongs to, its kind and default, the
values or range it allows, one line of doc, whether it is static (it fixes array shapes,
so a batch must agree on it) and which `SimParams` leaf it sets, and, for a model choice
(a categorical or boolean parameter) and for a size a backend bounds, which values each
backend implements.  `params.make_params` (defaults, validation), the command-line flags
of every script (`rlbm_jax.cli.add_param_args`), the `config` record of every output
(`config_record`), the ns-3 scenario's options table and the backends' refusals
(`missing`) are derived from it.

Backends (`rlbm_jax.env.backends`): "jax" is the reference and implements every value.
Any other backend implements, of a model choice, the values its entry in `Param.backends`
lists, and only the default where it has no entry; of a bounded size, values up to its
entry's bound.  A new choice therefore runs on the reference and is refused by name
everywhere else until a backend declares it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

REFERENCE_BACKEND = "jax"

GROUPS = ("topology", "buffer", "tcp", "tcp-model", "aqm", "traffic", "measurement", "shapes")
KINDS = ("float", "int", "bool", "choice", "floats", "ints", "table", "schedule")


@dataclasses.dataclass(frozen=True)
class Param:
    """One declared parameter.

    name      the `make_params` keyword (units in the name)
    group     one of GROUPS
    kind      float, int, bool, choice (one of `choices`), floats / ints (a value or one per
              class), table (a flow-size table: a built-in name, a CSV path or a SizeTable),
              schedule (a capacity schedule: "none", a shipped trace, a CSV or Mahimahi path,
              or a capacity.Schedule)
    default   the simulator's default; None where it is derived from other parameters
              (`derived` says how)
    doc       one line
    lo, hi    the allowed range (inclusive unless lo_open / hi_open); infinity only where
              `allow_inf`
    choices   the allowed values (a tuple, or a function returning the registry's names)
    static    it fixes array shapes (a `SimParams` static field)
    leaf      the `SimParams` field it sets ("" for none: a table's leaves are `TABLE_LEAVES`);
              a choice's leaf holds its index
    flag      the command-line option (default: --name with dashes)
    backends  backend -> the values it implements (a tuple or a function returning one)
              for a choice, the largest value it runs for a bounded size, or True for a
              schedule it runs (without an entry a backend runs none: only the default)
    ns3       the ns-3 scenario's option (default: the name; "": it has none, ours only)
    per_group a value, or one per flow group (`flow_groups`; sender s is in group s mod
              flow_groups): `leaf` holds the first group's, and `group_leaf` all of them
    """

    name: str
    group: str
    kind: str
    default: Any
    doc: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    allow_inf: bool = False
    choices: tuple | Callable[[], tuple] | None = None
    static: bool = False
    leaf: str | None = None
    flag: str | None = None
    derived: str = ""
    backends: dict = dataclasses.field(default_factory=dict)
    ns3: str | None = None
    per_group: bool = False

    @property
    def field(self) -> str:
        """The SimParams field this parameter sets ("" if none)."""
        if self.leaf is not None:
            return self.leaf
        return self.name + "_id" if self.kind == "choice" and not self.keeps_value else self.name

    @property
    def group_leaf(self) -> str:
        """The [flow_groups] SimParams field of a per-group parameter ("" for others)."""
        return "group_" + self.field if self.per_group else ""

    @property
    def keeps_value(self) -> bool:
        """A choice stored as its value (delayed_ack's 1 or 2), not as an index."""
        return self.kind == "choice" and all(isinstance(v, (int, np.integer)) for v in self.values())

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def default_text(self) -> str:
        """The default as help and tables show it (how it is derived, where it is)."""
        return self.derived if self.default is None else value_text(self.default)

    @property
    def ns3_option(self) -> str:
        """The ns-3 scenario's option for this parameter ("" where it has none)."""
        return self.name if self.ns3 is None else self.ns3

    @property
    def is_choice(self) -> bool:
        """A model choice: a categorical or boolean parameter, enumerated by the backends' manifest."""
        return self.kind in ("choice", "bool")

    def values(self) -> tuple:
        """The allowed values of a choice or bool."""
        if self.kind == "bool":
            return (False, True)
        c = self.choices() if callable(self.choices) else self.choices
        return tuple(c or ())

    def implemented(self, backend: str):
        """Of a choice: the values `backend` implements; of a bounded size: its bound (None: no
        bound); of a schedule: whether it runs one (else only the default, none)."""
        if self.kind == "schedule":  # whether it runs a schedule (the reference runs every one)
            return backend == REFERENCE_BACKEND or bool(self.backends.get(backend, False))
        if backend == REFERENCE_BACKEND:
            return self.values() if self.is_choice else None
        got = self.backends.get(backend)
        if self.is_choice:
            if got is None:
                return (self.default,)
            return tuple(got() if callable(got) else got)
        return got

    # ---- validation ---------------------------------------------------------
    def check(self, value) -> None:
        """Raise a ValueError naming this parameter if `value` is not allowed (None only
        where the default is derived)."""
        if value is None:
            if self.default is None:
                return
            raise ValueError(f"{self.name} must be given a value, got None")
        if self.per_group and isinstance(value, (list, tuple, np.ndarray)):
            if len(value) == 0:
                raise ValueError(f"{self.name} must have one value, or one per flow group, got {value!r}")
            for v in value:
                self.check(v)
            return
        n = self.name
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
                raise ValueError(f"{n} must be true or false, got {value!r}")
            return
        if self.kind == "choice":
            if value not in self.values():
                raise ValueError(f"unknown {n} {value!r}; choose one of {', '.join(map(str, self.values()))}")
            return
        if self.kind in ("table", "schedule"):
            return  # traffic.load_table / check_cdf, capacity.load / check say what is wrong with one
        items = np.ravel(np.asarray(value, dtype=object)) if self.kind in ("floats", "ints") else [value]
        if len(items) == 0:
            raise ValueError(f"{n} must have at least one value, got {value!r}")
        for v in items:
            self._check_number(v, value)

    def _check_number(self, v, whole) -> None:
        n = self.name
        integer = self.kind in ("int", "ints")
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ValueError(f"{n} must be {'an integer' if integer else 'a number'}, got {whole!r}")
        if integer and not float(v).is_integer():
            raise ValueError(f"{n} must be an integer, got {whole!r}")
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not self.allow_inf):
            raise ValueError(f"{n} must be a finite number, got {whole!r}")
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            raise ValueError(f"{n} must be {self.range_text()}, got {whole!r}")
        if self.hi is not None and (x > self.hi or (self.hi_open and x == self.hi)):
            raise ValueError(f"{n} must be {self.range_text()}, got {whole!r}")

    def range_text(self) -> str:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo:g}, {hi:g}{')' if self.hi_open else ']'}"
        if lo is not None:
            if lo == 0 and self.lo_open:
                return "positive"
            return f"{'>' if self.lo_open else '>='} {lo:g}"
        if hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi:g}"
        return "any number"


def _tcp_names():
    from rlbm_jax.env.tcp.variants import TCP_NAMES
    return TCP_NAMES


def _native_tcps():
    from rlbm_jax.env.tcp.variants import VARIANTS
    return tuple(v.name for v in VARIANTS if v.native)


def _policy_names():
    from rlbm_jax.env.switch import buffer
    return buffer.POLICY_NAMES


def _native_policies():
    from rlbm_jax.env.switch import buffer
    return buffer.native_policies()


def _tables():
    from rlbm_jax.env.traffic import BUILTIN_TABLES
    return BUILTIN_TABLES


POS = dict(lo=0.0, lo_open=True)
NONNEG = dict(lo=0.0)
PROB = dict(lo=0.0, lo_open=True, hi=1.0)

PARAMS: tuple[Param, ...] = (
    # ---- topology ---------------------------------------------------------------------
    Param("num_senders", "topology", "int", 10, "senders (one access link each)", lo=1, static=True,
          flag="--senders", backends={"native": 1024}),
    Param("access_rate_bps", "topology", "float", 100e6, "each sender's access link rate (bit/s)", **POS,
          flag="--access-bps"),
    Param("flow_groups", "topology", "int", 1, "sender groups, each with its own access delay and TCP (sender s "
          "is in group s mod flow_groups; access_delay_s and tcp take one value per group)", lo=1, static=True,
          backends={"native": 1, "fluid": 1}),
    Param("access_delay_s", "topology", "float", 0.1e-3, "access link one-way propagation delay (s): one value, or "
          "one per flow group (the first group's path is the reference: BDP, base RTT of the AQMs and formulations)",
          **NONNEG, per_group=True),
    Param("bottleneck_rate_bps", "topology", "float", 10e6, "switch -> sink link rate (bit/s)", **POS,
          flag="--bottleneck-bps"),
    Param("bottleneck_delay_s", "topology", "float", 10e-3, "switch -> sink one-way propagation delay (s)", **NONNEG),
    Param("capacity_schedule", "topology", "schedule", "none", "the bottleneck's rate over time, each rate at "
          "most bottleneck_rate_bps: none (that rate throughout), a shipped trace (step, cellular, wifi), a CSV "
          "of time_s,rate_bps rows or a Mahimahi trace", leaf="", ns3="capacity_in"),
    # ---- buffer -------------------------------------------------------------------------
    Param("num_classes", "buffer", "int", 2, "priority classes at the bottleneck (one FIFO each)", lo=1,
          static=True, flag="--classes", backends={"native": 16, "fluid": 1}),
    Param("buffer_per_class_pkts", "buffer", "ints", 100, "FIFO cap of each class (one value, or one per class)",
          lo=1, leaf="class_cap_pkts", flag="--buffer-pkts", ns3="class_cap_pkts"),
    Param("buffer_pkts", "buffer", "int", None, "shared buffer size B of all classes (packets)", lo=1,
          flag="--shared-buffer-pkts", derived="the sum of the class caps"),
    Param("queue_capacity_pkts", "buffer", "int", None, "ring size of each class FIFO (static; >= every class cap)",
          lo=1, static=True, derived="the largest class cap", ns3=""),
    Param("policy", "buffer", "choice", "sb-naive", "buffer policy (thresholds, AQM or discipline)",
          choices=_policy_names,
          backends={"native": _native_policies, "fluid": ("droptail", "sb-naive", "sb-sophisticated", "dt", "abm",
                                                           "static-bdp", "red", "ared", "pie", "codel", "rl-mark")}),
    Param("alpha", "buffer", "floats", None, "policy weights per class (SB, DT, ABM, static-bdp)", lo=0.0,
          derived="the policy's defaults"),
    Param("beta", "buffer", "floats", None, "rl policy threshold weights per class (threshold = a * beta * free)",
          lo=0.0, derived="1 for every class"),
    Param("scheduler", "buffer", "choice", "rr", "between classes: per-packet round robin or strict priority",
          choices=("rr", "strict"), backends={"native": ("rr", "strict")}),
    Param("class_threshold_bytes", "buffer", "floats", 2_000_000, "flow size above which a flow rises a class",
          lo=0.0),
    # ---- TCP ----------------------------------------------------------------------------
    Param("tcp", "tcp", "choice", "cubic", "congestion control of the senders: one, or one per flow group",
          choices=_tcp_names, backends={"native": _native_tcps, "fluid": ("newreno", "cubic", "dctcp")},
          per_group=True),
    Param("mss_bytes", "tcp", "int", 1000, "payload per data packet (bytes)", lo=1),
    Param("initial_cwnd_pkts", "tcp", "int", 10, "initial congestion window (segments)", lo=1, flag="--initial-cwnd"),
    Param("min_rto_s", "tcp", "float", 0.010, "minimum retransmission timeout (s)", **POS),
    Param("max_rto_s", "tcp", "float", 60.0, "maximum retransmission timeout (s)", **POS, ns3=""),
    Param("syn_timeout_s", "tcp", "float", 3.0, "wait after a lost SYN (ns-3 TcpSocket::ConnTimeout, s)", **POS),
    Param("rto_granularity_s", "tcp", "float", 0.001, "clock granularity term of the RTO (s)", **NONNEG),
    Param("delayed_ack", "tcp", "choice", 1, "segments per ACK", choices=(1, 2),
          backends={"native": (1, 2), "fluid": (1, 2)}),
    Param("dupthresh", "tcp", "int", 3, "duplicate ACKs that declare a loss", lo=1),
    Param("cubic_beta", "tcp", "float", 0.7, "CUBIC multiplicative decrease", lo=0.0, hi=1.0, lo_open=True,
          hi_open=True),
    Param("cubic_c", "tcp", "float", 0.4, "CUBIC scaling constant", **POS),
    Param("cubic_fast_convergence", "tcp", "bool", True, "CUBIC fast convergence",
          backends={"native": (False, True), "fluid": (False, True)}),
    Param("hystart", "tcp", "bool", True, "CUBIC's HyStart (slow start left on rising delay)",
          backends={"native": (False, True)}),
    Param("hystart_low_window_pkts", "tcp", "float", 16, "HyStart: window below which it does not act (segments)",
          **POS),
    Param("hystart_min_samples", "tcp", "int", 8, "HyStart: RTT samples per round", lo=1),
    Param("hystart_ack_delta_s", "tcp", "float", 0.002, "HyStart: ACK train spacing (s)", **POS),
    Param("hystart_delay_min_s", "tcp", "float", 0.004, "HyStart: least delay increase that counts (s)", **POS),
    Param("hystart_delay_max_s", "tcp", "float", 1.0, "HyStart: largest delay increase threshold (s)", **POS),
    Param("ecn", "tcp", "bool", False, "ECN-capable senders (RFC 3168); AQMs mark instead of drop "
          "(always on with dctcp)", backends={"native": (False, True), "fluid": (False, True)}),
    Param("dctcp_g", "tcp", "float", 0.0625, "DCTCP: weight of a window's marked fraction in alpha", **PROB),
    Param("pacing", "tcp", "choice", "off", "sender pacing: off (a sender sends whenever its window allows), or "
          "ns-3.37's TcpSocketState pacing (one segment per MSS / pacing rate; the rate max(cwnd, pipe) x "
          "pacing_ss_ratio (cwnd < ssthresh / 2) or pacing_ca_ratio / sRTT after every ACK, at most "
          "max_pacing_rate_bps): one, or one per flow group", choices=("off", "ns-3.37"), per_group=True),
    Param("max_pacing_rate_bps", "tcp", "float", 4e9, "pacing: the highest pacing rate in payload bit/s (ns-3.37 "
          "MaxPacingRate); below the bottleneck's rate a paced sender sends at it: one, or one per flow group",
          **POS, per_group=True),
    Param("sender_rate_bps", "tcp", "float", 1e6, "tcp=rate: the payload rate a rate sender starts at and holds "
          "until an agent moves it (no congestion window; knob rate_gain, Aurora's action): one, or one per flow "
          "group", **POS, per_group=True),
    Param("pacing_ss_ratio", "tcp", "float", 2.0, "pacing: the rate as a multiple of cwnd / sRTT while cwnd < "
          "ssthresh / 2 (ns-3.37 PacingSsRatio: 200, in percent)", **POS),
    Param("pacing_ca_ratio", "tcp", "float", 1.2, "pacing: the rate as a multiple of cwnd / sRTT from cwnd >= "
          "ssthresh / 2 (ns-3.37 PacingCaRatio: 120, in percent)", **POS),
    Param("pace_initial_window", "tcp", "bool", False, "pacing: pace the first initial_cwnd_pkts segments too "
          "(ns-3.37 PaceInitialWindow; off: they leave at once)"),
    Param("bbr_high_gain", "tcp", "float", 2.89, "BBR: the pacing and window gain of STARTUP (its inverse paces "
          "DRAIN; ns-3.37 TcpBbr HighGain)", lo=1.0, lo_open=True),
    Param("bbr_bw_window_rounds", "tcp", "int", 10, "BBR: rounds the max filter of the delivery rate spans "
          "(ns-3.37 BwWindowLength)", lo=1),
    Param("bbr_rtt_window_s", "tcp", "float", 10.0, "BBR: the min RTT expires after this long, and PROBE_RTT "
          "follows (ns-3.37 RttWindowLength, s)", **POS),
    Param("bbr_probe_rtt_s", "tcp", "float", 0.2, "BBR: least time in PROBE_RTT at 4 segments in flight "
          "(ns-3.37 ProbeRttDuration, s)", **POS),
    # ---- TCP model choices (ns-3.37's where it departs from the RFCs) ----------------------
    Param("rto_recovery", "tcp-model", "choice", "go-back-n", "after a timeout resend everything not yet ACKed or "
          "SACKed (go-back-n, ns-3.37) or only the losses (sack)", choices=("go-back-n", "sack"),
          backends={"native": ("go-back-n", "sack")}, ns3=""),
    Param("prr", "tcp-model", "choice", "exact", "PRR's send count in fast recovery and CWR: exact (RFC 6937), or "
          "ns-3.37's 32-bit product, which wraps above ~65 kB windows", choices=("exact", "ns-3.37"),
          backends={"native": ("exact", "ns-3.37")}, ns3=""),
    Param("prr_ssrb", "tcp-model", "choice", "rfc6937", "PRR at or below ssthresh: every ACK sends what it "
          "delivered plus a segment (rfc6937), or the segment only on an ACK of retransmitted data (ns-3.37)",
          choices=("rfc6937", "ns-3.37"), backends={"native": ("rfc6937", "ns-3.37")}, ns3=""),
    Param("bbr_rate_sample", "tcp-model", "choice", "exact", "BBR's delivery-rate samples: over the exact "
          "interval, or ns-3.37's (its ackElapsed starts at the previous sample's start, one ACK gap early: fixed "
          "in ns-3.41), which biases samples low where ACKs are sparse", choices=("exact", "ns-3.37"), ns3=""),
    Param("rtt_clock", "tcp-model", "choice", "exact", "RTT samples: the exact time from the last packet's "
          "sending to its ACK (exact), or as ns-3.37's timestamp option takes them (ns-3.37): the difference of "
          "two readings of a 1 ms clock, from the sending of the first segment a delayed ACK covers (its echo); "
          "rttvar then stays near the clock's jitter, so an RTO stays a millisecond or two above srtt",
          choices=("exact", "ns-3.37"), ns3=""),
    Param("long_flow_syn", "tcp-model", "choice", "base-rtt", "the long-lived flows' handshakes: planned at t = 0 "
          "on the empty path (base-rtt: data one base RTT after the start, srtt the base RTT), or the SYN waits in "
          "its class queue as the flow's start finds it (queue, as a web-search flow's does and ns-3's: a flow "
          "that starts behind a standing queue learns that RTT, where with base-rtt its RTO can stay below it)",
          choices=("base-rtt", "queue"), ns3=""),
    Param("sack_credit", "tcp-model", "choice", "off", "after a timeout, what the ACK that fills a hole credits "
          "slow start with: the retransmission alone (off), or every segment it carries the cumulative ACK over, "
          "those SACKed above the hole before and after the timeout included (ns-3.37: CUBIC's byte-counted slow "
          "start on the cumulative advance; a spurious timeout in fast recovery then costs it almost no window)",
          choices=("off", "ns-3.37"), ns3=""),
    Param("ecn_cwr", "tcp-model", "choice", "open", "which states an echoed CE mark cuts the window from: OPEN "
          "only (open, RFC 3168), or every state but CWR (ns-3.37)", choices=("open", "ns-3.37"), backends={"native": ("open", "ns-3.37")}, ns3=""),
    Param("rtt_samples", "tcp-model", "choice", "cumulative", "RTT samples from cumulative ACKs of data sent once "
          "(cumulative, ns-3.37) or every ACK (every-ack)", choices=("cumulative", "every-ack"),
          backends={"native": ("cumulative", "every-ack")}, ns3=""),
    Param("rto_rearm", "tcp-model", "choice", "cumulative", "what restarts the retransmission timer: an ACK "
          "that moves the cumulative ACK (cumulative, ns-3.37's NewAck: after a timeout, ACKs of data above a "
          "still-missing retransmission do not), or any ACK of new data (any-ack, rlbm_jax before 0.4: those "
          "ACKs restart it and can hold a flow at two segments per RTT for seconds)",
          choices=("cumulative", "any-ack"), backends={"native": ("cumulative", "any-ack")}, ns3=""),
    Param("red_syn", "tcp-model", "choice", "count", "RED/ARED: a SYN's early-drop chance: the count-based "
          "probability of its place in the drop process (count, ns-3.37: a SYN is one more packet of RedQueueDisc's "
          "count, so on average it drops as often as data, 2 p_b / 3 under the Wait rule), or the base probability "
          "p_b (base, rlbm_jax before 0.5: SYNs lost 1.5 times as often); the fluid model runs either, as it has "
          "no handshakes",
          choices=("count", "base"), backends={"native": ("count", "base"), "fluid": ("count", "base")}, ns3=""),
    # ---- AQM (ns-3.37's queue-disc names and defaults) ---------------------------------------
    Param("red_min_th_pkts", "aqm", "float", None, "RED/ARED: average queue where early drops start", **POS,
          derived="5; ared: max(5, 5 ms of link packets / 2)"),
    Param("red_max_th_pkts", "aqm", "float", None, "RED/ARED: average queue of max_p (gentle: rises to 1 at 2x)",
          **POS, derived="15; ared: 3 x min"),
    Param("red_max_p", "aqm", "float", 0.02, "RED: drop probability at max_th (ARED's starting value)", **PROB),
    Param("red_weight", "aqm", "float", None, "RED: EWMA weight of the average queue per packet", **PROB,
          derived="0.002; ared: 1 - exp(-1 / link packets per s)"),
    Param("red_gentle", "aqm", "bool", True, "RED: the gentle region above max_th",
          backends={"native": (False, True), "fluid": (False, True)}),
    Param("pie_target_s", "aqm", "float", 0.015, "PIE: queueing delay reference (s)", **POS),
    Param("pie_tupdate_s", "aqm", "float", 0.015, "PIE: probability update period (s)", **POS),
    Param("pie_a", "aqm", "float", 0.125, "PIE: gain on the delay error (1/s)", **POS),
    Param("pie_b", "aqm", "float", 1.25, "PIE: gain on the delay change (1/s)", **POS),
    Param("pie_max_burst_s", "aqm", "float", 0.15, "PIE: burst allowance (s)", **POS),
    Param("pie_mark_threshold", "aqm", "float", 0.1, "PIE: marks (ECN) only while its probability is at most this",
          **PROB),
    Param("codel_target_s", "aqm", "float", 0.005, "CoDel, FQ-CoDel: acceptable standing sojourn time (s)", **POS),
    Param("codel_interval_s", "aqm", "float", 0.1, "CoDel, FQ-CoDel: window the sojourn must stay above target "
          "before a drop (s)", **POS),
    Param("fq_quantum_bytes", "aqm", "int", 1500, "FQ-CoDel: deficit round robin quantum, at least one data packet "
          "(MSS + 52)", lo=1),
    Param("fq_flow_cap_pkts", "aqm", "float", 100.0, "fq (the plain fair queue): each flow's queue cap in packets "
          "(drop-tail per flow; Linux fq's flow_limit, 100); the knob flow_cap_pkts sets it per flow at run time",
          lo=1.0, ns3=""),
    Param("flow_queue_capacity_pkts", "aqm", "int", None, "ring size of each per-flow queue (static)", lo=0,
          static=True, derived="buffer_pkts + 1 for a policy with per-flow queues, else 0", ns3=""),
    # ---- traffic -------------------------------------------------------------------------------
    Param("arrival", "traffic", "choice", "load", "flow arrival rate: load * C / (8 E[size]) (load), or 5 * load "
          "flows/s per sender (thesis-code)", choices=("load", "thesis-code"),
          backends={"native": ("load", "thesis-code")}),
    Param("load", "traffic", "float", 0.7, "offered load as a fraction of the bottleneck capacity", **NONNEG),
    Param("arrival_stop_s", "traffic", "float", math.inf, "no new flows after this time (s)", **NONNEG,
          allow_inf=True),
    Param("long_flows", "traffic", "int", 0, "long-lived flows started at t = 0", lo=0),
    Param("agent_flows", "traffic", "int", 0, "long-lived flows a sender agent drives (flow slots 0..A-1, the "
          "first A long flows): their window or rate takes the agent's knobs, and each interval's record lists "
          "their packets, window and RTTs (`metrics.Interval.agent_counts`, `agent_state`); static", lo=0,
          static=True, backends={"fluid": 0, "native": 0}),
    Param("long_flow_start_spread_s", "traffic", "float", 0.0, "long flows start uniformly in [0, this) (s)",
          **NONNEG),
    Param("long_flow_start_s", "traffic", "float", 0.0, "the long flows of a flow group start this long after "
          "t = 0, then within the spread (s): one value, or one per flow group (a newcomer against incumbents)",
          **NONNEG, per_group=True),
    Param("incast_fan_in", "traffic", "int", 0, "incast: distinct senders each query asks for a response at once "
          "(0: no incast traffic; static)", lo=0, static=True, backends={"native": 0, "fluid": 0}, ns3=""),
    Param("incast_query_rate_per_s", "traffic", "float", 0.0, "incast: queries per second (Poisson), until "
          "arrival_stop_s", **NONNEG, ns3=""),
    Param("incast_response_bytes", "traffic", "float", 20_000.0, "incast: each response's size (bytes; its class by "
          "size, as any flow's)", lo=1.0, ns3=""),
    Param("cdf", "traffic", "table", "websearch", "flow sizes: a built-in table or a CSV of size_bytes,cdf rows",
          leaf=""),
    # ---- measurement -----------------------------------------------------------------------------
    Param("warmup_s", "measurement", "float", 0.0, "excluded from time-averaged metrics (s)", **NONNEG),
    Param("completion_log_size", "measurement", "int", 1024, "finished flows kept per run (overflow is counted)",
          lo=1, static=True, flag="--flow-log-size", ns3=""),
    Param("interval_log_size", "measurement", "int", 16, "finished flows an agent interval lists (the rest are "
          "counted)", lo=1, static=True, ns3=""),
    # ---- shapes ----------------------------------------------------------------------------------
    Param("num_flow_slots", "shapes", "int", 64, "flow slots per env (a full table refuses and counts arrivals)",
          lo=1, static=True, flag="--flow-slots", ns3=""),
    Param("pkts_per_tick", "shapes", "int", 1, "bottleneck packets per tick (the fidelity / speed dial)", lo=1,
          static=True, backends={"native": 61}, ns3=""),
    Param("delay_line_ticks", "shapes", "int", None, "ring of the bottleneck -> sink delay line (static)", lo=1,
          static=True, derived="the base RTT in ticks + 3", ns3=""),
    Param("capacity_rows", "shapes", "int", None, "rows of the capacity schedule's table (static; a batch pads "
          "to its largest; > 0 without a schedule: bottleneck_rate_bps as a one-row schedule)", lo=0, static=True,
          derived="the schedule's rows, 0 without one", ns3=""),
)

BY_NAME: dict[str, Param] = {p.name: p for p in PARAMS}
# the leaves of a parameter that sets several (`leaf` ""): the flow-size table's, and the
# capacity schedule's (rlbm_jax.env.capacity: segment starts, rates, bits before each
# start, the period)
TABLE_LEAVES = {"cdf": ("cdf_size_bytes", "cdf_prob"),
                "capacity_schedule": ("capacity_times_s", "capacity_rates_bps", "capacity_cum_bits",
                                      "capacity_period_s")}
SCHEDULES = tuple(p for p in PARAMS if p.kind == "schedule")
# a schedule's static table length (0: no schedule)
SCHEDULE_ROWS = {"capacity_schedule": "capacity_rows"}
NAMES = tuple(BY_NAME)
PER_GROUP = tuple(p for p in PARAMS if p.per_group)
CHOICES = tuple(p for p in PARAMS if p.is_choice)
BOUNDED = tuple(p for p in PARAMS if not p.is_choice and p.kind != "schedule" and p.backends)
DEFAULTS = {p.name: p.default for p in PARAMS}
# parameters the ns-3 scenario has no option for: our shapes, our TCP-model choices (ns-3
# runs its own model), and the few the scenario does not expose
NOT_NS3 = tuple(p.name for p in PARAMS if not p.ns3_option)


def get(name: str) -> Param:
    if name not in BY_NAME:
        import difflib

        near = difflib.get_close_matches(name, NAMES, n=1)
        raise ValueError(f"unknown parameter {name!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
    return BY_NAME[name]


def check_names(kw: dict) -> None:
    """Refuse a keyword that names no declared parameter."""
    for k in kw:
        get(k)


def choice_index(name: str, value) -> int:
    """The index a choice's leaf holds for `value`."""
    p = BY_NAME[name]
    p.check(value)
    return p.values().index(value)


def choice_value(name: str, index: int):
    """The choice value a leaf index stands for."""
    return BY_NAME[name].values()[int(index)]


def used_choices(resolved: dict) -> tuple:
    """The static record of a run's model choices: ((name, value), ...) for every choice,
    in declaration order (`SimParams.model_choices`; a batch holds the union); a per-group
    choice given one value per group is recorded once per value it takes."""
    return merge_choices(tuple((p.name, v) for p in CHOICES for v in group_values(p, resolved[p.name])))


def group_values(p: Param, value) -> tuple:
    """The values of a parameter as a tuple: one per flow group where a per-group parameter
    is given several, else the one value."""
    if p.per_group and isinstance(value, (list, tuple, np.ndarray)):
        return tuple(value)
    return (value,)


def merge_choices(*records) -> tuple:
    """The union of several runs' `used_choices` records (a batch's), in declaration order."""
    order = {p.name: i for i, p in enumerate(CHOICES)}
    seen = {}
    for rec in records:
        for name, value in rec:
            seen[(name, _key(value))] = (name, value)
    return tuple(sorted(seen.values(), key=lambda nv: (order.get(nv[0], len(order)), _key(nv[1]))))


def _key(v):
    return (type(v).__name__, str(v))


def missing(backend: str, params) -> list[str]:
    """What `params` ask for that `backend` does not implement: ["prr=ns-3.37", ...] (empty:
    it runs them).  Reads the static record of choices and the static sizes, so it works on
    traced and batched params."""
    out = []
    for name, value in params.model_choices:
        p = BY_NAME.get(name)
        if p is not None and value not in p.implemented(backend):
            out.append(f"{name}={value_text(value)}")
    for p in BOUNDED:
        bound = p.implemented(backend)
        v = getattr(params, p.name)
        if bound is not None and v > bound:
            out.append(f"{p.name}={v} (it runs at most {bound})")
    for p in SCHEDULES:  # a table of one row or more: a schedule (its static length says so)
        if not p.implemented(backend) and getattr(params, SCHEDULE_ROWS[p.name]) > 0:
            out.append(f"{p.name} (a time-varying bottleneck capacity)")
    return out


def refusal(backend: str, params, miss: list[str] | None = None) -> str | None:
    """Why `backend` will not run `params`, naming each value it lacks (None: it will);
    `miss`: what it lacks, if more than `missing` says (a backend's own limits)."""
    miss = missing(backend, params) if miss is None else miss
    if not miss:
        return None
    return (f"the {backend} backend does not implement {', '.join(miss)}; use backend 'jax' or 'auto' "
            "(--backend jax or auto)")


def value_text(v) -> str:
    """A value as flags and messages write it (booleans in lower case)."""
    return str(v).lower() if isinstance(v, (bool, np.bool_)) else str(v)


def json_value(v):
    """A resolved value as JSON can hold it (infinity as the string "inf", arrays as lists)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else str(float(v))
    if isinstance(v, (list, tuple, np.ndarray)):
        return [json_value(x) for x in np.asarray(v, dtype=object).reshape(-1).tolist()]
    if hasattr(v, "name") and (hasattr(v, "size_bytes") or hasattr(v, "rates_bps")):  # a SizeTable, a Schedule
        return v.name
    return v


def table_markdown() -> str:
    """The declared model as a markdown table (name, group, default, allowed values, native)."""
    rows = ["| parameter | group | default | allowed | native backend | |", "|---|---|---|---|---|---|"]
    for p in PARAMS:
        if p.is_choice:
            allowed = ", ".join(value_text(v) for v in p.values())
            nat = ", ".join(value_text(v) for v in p.implemented("native"))
        elif p.kind == "schedule":
            from rlbm_jax.env.capacity import BUILTIN, NONE

            allowed = ", ".join((NONE, *BUILTIN)) + ", or a CSV or Mahimahi file"
            nat = "all" if p.implemented("native") else "none only"
        else:
            allowed = p.range_text() if p.kind != "table" else ", ".join(_tables()) + ", or a CSV"
            b = p.implemented("native")
            nat = f"<= {b}" if b is not None else "all"
            if any(rows == p.name and not BY_NAME[s].implemented("native") for s, rows in SCHEDULE_ROWS.items()):
                nat = "0 only"
        default = p.default_text
        rows.append(f"| `{p.name}` | {p.group} | {default} | {allowed} | {nat} | {p.doc} |")
    return "\n".join(rows)
