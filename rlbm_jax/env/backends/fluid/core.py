"""The fluid model's implementation: configuration, state, one Euler step, the scan and the
summary.  The equations, their sources and the API are described in the package docstring
(`rlbm_jax.env.backends.fluid`)."""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rlbm_jax.env import model
from rlbm_jax.env.params import ACK_BYTES, DATA_HEADER_BYTES, SimParams

# ---------------------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------------------

STEPS_PER_RTT = 20  # Euler steps per smallest base RTT
SHARPNESS = 0.003  # width of every smoothed kink, as a fraction of its natural scale
RTT_MARGIN = 2.0  # history covers this x the params' largest RTT when an override is traced
NEWRENO_BETA = 0.5  # window after a reduction / before (ssthresh = flight / 2)
RED_MIN_QUEUE, RED_MIN_QUEUE_WIDTH = 1.5, 0.25  # ns-3 RED: no early decision below 2 queued packets
RED_WAIT_GAP = 1.5  # ns-3 RED "Wait": gaps between early drops uniform in [1/p_b, 2/p_b) packets
CUBIC_MAX_CNT = 100.0  # ns-3.37 TcpCubic: cnt = 100 cwnd when the target is not above cwnd
CUBIC_MIN_CNT = 2.0  # ns-3.37 TcpCubic: cnt >= 2 (at most +1/2 window per RTT)
# ns-3.37 RedQueueDisc's adaptive max_p (rlbm_jax.env.switch.disciplines.red)
ARED_INTERVAL_S, ARED_ALPHA, ARED_BETA, ARED_TOP, ARED_BOTTOM, ARED_RTT_S = 0.5, 0.01, 0.9, 0.5, 0.01, 0.1
# ns-3.37 PieQueueDisc::CalculateP (rlbm_jax.env.switch.disciplines.pie): the increment is divided
# by 2048 below p = 1e-6, and by 4 less at each threshold up to 0.1 (/2 below 0.1, x1 above)
PIE_SCALE_STEPS = ((1e-6, 2.0), (1e-5, 2.0), (1e-4, 2.0), (1e-3, 2.0), (1e-2, 2.0), (0.1, 1.0))  # (p, log2 step)
PIE_SCALE_LOG2_MIN = -11.0  # 1/2048
PIE_CAP_FROM_P, PIE_CAP_INC = 0.1, 0.02  # from p >= 0.1 an update adds at most 0.02
PIE_DECAY = 0.98  # p x 0.98 per update while the queue stays empty
PIE_QUIET_P = 0.2  # no early drop while qdelay_old < target / 2 and p < 0.2 ...
PIE_MIN_QUEUE = 2.5  # ... or while at most 2 packets are queued (q > 2, smoothed)
PIE_P_FLOOR = 1e-6  # p's scale at its lower clip (the smallest threshold of the scaling)
# ns-3.37 CoDelQueueDisc (rlbm_jax.env.switch.disciplines.codel)
CODEL_MIN_BYTES = 1500.0  # MinBytes: no drop while less than this waits behind the head packet
CODEL_RECENT_INTERVALS = 16.0  # count resumes from the last run's drops if it ended within 16 intervals
EMPTY_QUEUE = 0.5  # a fluid queue below half a packet is the packet simulator's empty queue
# RED's step marking (red_weight >= 1 and red_max_p >= 1, DCTCP's K: rlbm_jax.env.switch.disciplines.red):
# every arrival that finds at least max(max_th, 2) packets is hit, a fluid queue above that less
# half a packet (the packet queue is whole packets, as RED_MIN_QUEUE)
STEP_MIN_QUEUE, STEP_HALF_PKT = 2.0, 0.5
DCTCP_ALPHA_INIT = 1.0  # ns-3.37 TcpDctcp DctcpAlphaOnInit
# the shared-buffer threshold policies (rlbm_jax.env.switch.buffer) whose one-class form the
# fluid model implements: a cap on the one queue (`queue_cap`)
THRESHOLD_POLICIES = ("sb-naive", "sb-sophisticated", "dt", "abm", "static-bdp")
SB_MIN_ALPHA_SUM = 1e-9  # buffer._static's floor of sum(alpha)

TINY_PKTS = 1e-6  # floor of divisors in packets
SHORT_SLOT_SIGMAS = 8.0  # short-flow slots: the expected arrivals + this many standard deviations ...
SHORT_SLOT_EXTRA = 16  # ... + this many (`configure`; a schedule that outruns them is reported)
NEVER_S = 1e9  # the start of a scheduled arrival at or past arrival_stop_s: never
TCPS = model.BY_NAME["tcp"].implemented("fluid")  # what the fluid model implements (declared in the model)
AQMS = model.BY_NAME["policy"].implemented("fluid")

# the values an override may replace inside a traced function (each names a SimParams field;
# buffer_pkts replaces the FIFO's limit, the class cap and the shared buffer alike, one class;
# alpha replaces the one class's policy weight; a new rate or delay moves the base RTT, and
# the BDP of static-bdp, with it)
OVERRIDABLE = ("bottleneck_rate_bps", "bottleneck_delay_s", "access_rate_bps", "access_delay_s", "buffer_pkts",
               "mss_bytes", "initial_cwnd_pkts", "red_min_th_pkts", "red_max_th_pkts", "red_max_p",
               "red_weight", "pie_target_s", "pie_tupdate_s", "pie_a", "pie_b", "pie_max_burst_s",
               "pie_mark_threshold", "codel_target_s", "codel_interval_s", "cubic_beta", "cubic_c",
               "long_flow_start_spread_s", "dctcp_g", "alpha")


# ---------------------------------------------------------------------------------------
# configuration (static) and the continuous values (traced)
# ---------------------------------------------------------------------------------------

class Config(NamedTuple):
    """What fixes the fluid model's shapes and branches (static, hashable).

    n_flows     N long-lived flows
    tcp         "newreno", "cubic" or "dctcp"
    aqm         the policy: "droptail", "red", "ared", "pie", "codel", "rl-mark" (an agent's marking
                probability), or a shared-buffer threshold policy of THRESHOLD_POLICIES (a cap
                on the one queue)
    ecn         the AQM's early decisions mark instead of drop
    gentle      RED's gentle region
    fast_conv   CUBIC's fast convergence
    dt_s        the Euler step (s): the smallest base RTT / steps_per_rtt
    hist_len    L, slots of the rings of scheduled feedback (covers the largest RTT)
    sharpness   width of every smoothed kink, relative to its scale
    sender_flows  per long flow, the long flows sharing its sender's access link
    red_step    RED's step marking on the instantaneous queue (red_weight >= 1 and red_max_p
                >= 1, as the packet simulator decides it: DCTCP's marking at K)
    n_short     M slots of short (web-search) flows, one per scheduled arrival (0: none)
    n_senders   senders (access links); short flows share them with the long flows
    """

    n_flows: int
    tcp: str
    aqm: str
    ecn: bool
    gentle: bool
    fast_conv: bool
    dt_s: float
    hist_len: int
    sharpness: float
    sender_flows: tuple
    red_step: bool = False
    n_short: int = 0
    n_senders: int = 1


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _concrete(params: SimParams, name: str) -> np.ndarray:
    v = getattr(params, name)
    if _is_traced(v):
        raise ValueError("fluid: params are traced here (inside jit or vmap), so the static configuration cannot "
                         "be read from them; build it outside with fluid.configure(params) and pass config=")
    return np.asarray(v)


def _one(params, name, what):
    """The single value a (possibly batched) leaf holds; a ValueError if a batch disagrees."""
    vals = np.unique(_concrete(params, name).reshape(-1))
    if vals.size != 1:
        raise ValueError(f"fluid: a batch must agree on {what} ({name} takes {vals.tolist()}): it selects the "
                         "fluid model's equations")
    return vals[0]


# declared parameters whose value the fluid model never reads (the choices it does not model
# are the manifest's business): a run that sets one on purpose is refused (`ignored`)
IGNORES = ("min_rto_s", "max_rto_s", "syn_timeout_s", "rto_granularity_s", "dupthresh", "hystart_low_window_pkts",
           "hystart_min_samples", "hystart_ack_delta_s", "hystart_delay_min_s", "hystart_delay_max_s",
           "fq_quantum_bytes", "pkts_per_tick", "class_threshold_bytes", "beta")


def ignored(names) -> list[str]:
    """Of the parameter names a user set (`names`), those the fluid model does not read."""
    return [n for n in names if n in IGNORES]


def limits(params: SimParams) -> list[str]:
    """What the fluid model cannot represent that the declared model's manifest does not
    say (values of continuous parameters): ["load=0.7 (...)", ...]; reads concrete params
    (a stacked batch included)."""
    why = []
    load = _concrete(params, "load")
    long_flows = _concrete(params, "long_flows")
    if np.any((long_flows < 1) & ~(load > 0)):
        why.append("long_flows=0 and load=0 (nothing to model: give long_flows >= 1 or a load)")
    return why


def refusal(params: SimParams) -> str | None:
    """Why the fluid model cannot represent `params` (None: it can): the choices and sizes
    the manifest (`model.Param.backends["fluid"]`) does not list, and `limits`."""
    why = model.missing("fluid", params) + limits(params)
    return "; ".join(why) if why else None


def check(params: SimParams) -> None:
    """Raise a ValueError naming what the fluid model cannot represent in `params`."""
    why = refusal(params)
    if why:
        raise ValueError(f"the fluid backend does not implement {why}")


def _check_overrides(overrides):
    overrides = dict(overrides or {})
    for k in overrides:
        if k not in OVERRIDABLE:
            raise ValueError(f"fluid: cannot override {k!r}; overridable values: {', '.join(OVERRIDABLE)}")
    return overrides


def _rtt_bounds(params: SimParams, overrides: dict):
    """(smallest base RTT, largest RTT with a full buffer) over a (batched) concrete params,
    concrete overrides taken into account."""
    def val(name, field=None):
        v = overrides.get(name)
        if v is not None and not _is_traced(v):
            return np.asarray(v, np.float64)
        return _concrete(params, field or name).astype(np.float64)

    rate, acc = val("bottleneck_rate_bps"), val("access_rate_bps")
    bits = (val("mss_bytes") + DATA_HEADER_BYTES) * 8.0
    delay = val("access_delay_s") + val("bottleneck_delay_s")
    base = 2 * delay + bits / acc + bits / rate + ACK_BYTES * 8.0 * (1 / acc + 1 / rate)
    if "buffer_pkts" in overrides:
        buf = val("buffer_pkts")
    else:
        buf = np.minimum(_concrete(params, "buffer_pkts"), _concrete(params, "class_cap_pkts")[..., 0])
    full = base + buf * bits / rate
    return float(np.min(base)), float(np.max(full))


def _flows_per_sender(n_flows: int, n_senders: int) -> tuple:
    """Per long flow, how many long flows share its sender (the packet sim puts flow i on
    sender i % num_senders)."""
    sender = np.arange(n_flows) % n_senders
    counts = np.bincount(sender, minlength=n_senders)
    return tuple(int(counts[s]) for s in sender)


def configure(params: SimParams, *, overrides: Mapping | None = None, steps_per_rtt: int = STEPS_PER_RTT,
              sharpness: float = SHARPNESS, rtt_margin: float = RTT_MARGIN, max_rtt_s: float | None = None,
              dt_s: float | None = None, horizon_s: float | None = None, short_slots: int | None = None) -> Config:
    """The static configuration of the fluid model of concrete `params` (one set, or a stack
    of sets for vmap, which must agree on the flow count, TCP, AQM, ECN and RED's gentle
    region); a ValueError names what it cannot represent.

    steps_per_rtt  Euler steps per smallest base RTT (dt = base RTT / steps_per_rtt), unless
                   dt_s is given
    sharpness      width of every smoothed kink relative to its scale (the buffer B for the
                   queue's limits, max_th - min_th for RED's kinks)
    max_rtt_s      the largest RTT the feedback rings must hold; default: base RTT + B / C of
                   the params (and of concrete overrides) x 1.25, or x rtt_margin when an
                   override is traced (its value is unknown here).  A step whose RTT exceeds
                   the ring is delayed less and counted in the summary's `delay_clipped_s`.
    horizon_s      the run's length (s): with load > 0 the short-flow slots cover the Poisson
                   arrivals until min(arrival_stop_s, horizon_s)
    short_slots    M, the short-flow slots (one per scheduled arrival); default: the expected
                   arrivals + SHORT_SLOT_SIGMAS standard deviations + SHORT_SLOT_EXTRA (a
                   schedule that needs more is reported: the summary's `short_slots_full`)"""
    check(params)
    overrides = _check_overrides(overrides)
    from rlbm_jax.env.switch import buffer
    from rlbm_jax.env.tcp.variants import TCP_NAMES

    n = int(_one(params, "long_flows", "the number of long flows"))
    tcp = TCP_NAMES[int(_one(params, "tcp_id", "the TCP"))]
    aqm = buffer.POLICY_NAMES[int(_one(params, "policy_id", "the policy"))]
    ecn = bool(_one(params, "ecn", "ECN"))
    gentle = bool(_one(params, "red_gentle", "RED's gentle region"))
    fast_conv = bool(_one(params, "cubic_fast_convergence", "CUBIC's fast convergence"))
    if not (isinstance(steps_per_rtt, (int, np.integer)) and steps_per_rtt >= 4):
        raise ValueError(f"fluid: steps_per_rtt must be an integer >= 4, got {steps_per_rtt!r}")
    if not (math.isfinite(sharpness) and sharpness > 0):
        raise ValueError(f"fluid: sharpness must be a positive number, got {sharpness!r}")
    base_min, full_max = _rtt_bounds(params, overrides)
    dt = float(dt_s) if dt_s is not None else base_min / steps_per_rtt
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"fluid: dt_s must be a positive number, got {dt!r}")
    if max_rtt_s is None:
        traced = any(_is_traced(v) for v in overrides.values())
        max_rtt_s = full_max * (rtt_margin if traced else 1.25)
    hist = int(math.ceil(max_rtt_s / dt)) + 3
    red_step = aqm in ("red", "ared") and _red_step(params, overrides)
    return Config(n_flows=n, tcp=tcp, aqm=aqm, ecn=ecn, gentle=gentle, fast_conv=fast_conv, dt_s=dt,
                  hist_len=hist, sharpness=float(sharpness),
                  sender_flows=_flows_per_sender(n, params.num_senders), red_step=red_step,
                  n_short=_short_slots(params, horizon_s, short_slots), n_senders=int(params.num_senders))


def _short_slots(params: SimParams, horizon_s, short_slots) -> int:
    """M, the short-flow slots `configure` sizes (0 when no params has a load)."""
    from rlbm_jax.env import traffic

    load = _concrete(params, "load")
    if not np.any(load > 0):
        return 0
    if short_slots is not None:
        if not (isinstance(short_slots, (int, np.integer)) and short_slots >= 1):
            raise ValueError(f"fluid: short_slots must be an integer >= 1, got {short_slots!r}")
        return int(short_slots)
    stop = _concrete(params, "arrival_stop_s").astype(np.float64)
    stop = np.where(stop < 1e30, stop, np.inf)  # SimParams holds "never" as float32's largest
    if horizon_s is not None:
        stop = np.minimum(stop, float(horizon_s))
    if not np.all(np.isfinite(stop)):
        raise ValueError("fluid: short flows arrive until arrival_stop_s = inf: give the run's length (horizon_s=) "
                         "or the number of short-flow slots (short_slots=)")
    f = traffic.arrival_rate_per_s
    for _ in range(np.ndim(load)):  # a stacked batch: one rate per params
        f = jax.vmap(f)
    rate = np.asarray(f(params), np.float64)
    mean = float(np.max(rate * stop))
    return int(math.ceil(mean + SHORT_SLOT_SIGMAS * math.sqrt(mean) + SHORT_SLOT_EXTRA))



def _red_step(params: SimParams, overrides: dict) -> bool:
    """Whether RED marks by steps on the instantaneous queue (the packet simulator's rule:
    red_weight >= 1 and red_max_p >= 1, DCTCP's K), from the concrete params and overrides;
    a batch must agree, and a traced override of either value is refused where the params
    select the step (it reads neither: its derivative would be 0 whatever the value)."""
    vals = {}
    for name in ("red_weight", "red_max_p"):
        v = overrides.get(name)
        vals[name] = _concrete(params, name) if v is None or _is_traced(v) else np.asarray(v)
    on = np.broadcast_to((vals["red_weight"] >= 1.0) & (vals["red_max_p"] >= 1.0),
                         np.broadcast_shapes(vals["red_weight"].shape, vals["red_max_p"].shape)).reshape(-1)
    if on.size and on.any() != on.all():
        raise ValueError("fluid: a batch must agree on RED's step marking (red_weight = red_max_p = 1 in some sets, "
                         "not in others): it selects the fluid model's equations")
    step_on = bool(on.any())
    traced = [k for k in ("red_weight", "red_max_p") if k in overrides and _is_traced(overrides[k])]
    if step_on and traced:
        raise ValueError(f"fluid: RED marks by steps at max_th here (red_weight = red_max_p = 1), which reads neither "
                         f"red_weight nor red_max_p: a traced override of {', '.join(traced)} would have a zero "
                         "derivative; override red_max_th_pkts (the step's threshold) instead")
    return step_on


def _dtype():
    return jnp.zeros((), float).dtype  # float64 where x64 is enabled, else float32


def values(params: SimParams, cfg: Config, overrides: Mapping | None = None) -> dict:
    """The continuous values the equations read (traceable; overrides replace the params'
    values): capacity C (packets/s), buffer B (packets), base RTT per flow (s), RED's, PIE's,
    CoDel's and CUBIC's constants (times in s, gains in 1/s), each long flow's start time and
    access-link cap (packets/s), and what the short flows' timing reads."""
    overrides = _check_overrides(overrides)
    dt = _dtype()

    def get(name, field=None):
        v = overrides[name] if name in overrides else getattr(params, field or name)
        return jnp.asarray(v, dt)

    rate, acc = get("bottleneck_rate_bps"), get("access_rate_bps")
    mss = get("mss_bytes")
    bits = (mss + DATA_HEADER_BYTES) * 8.0
    delay = get("access_delay_s") + get("bottleneck_delay_s")
    base = 2 * delay + bits / acc + bits / rate + ACK_BYTES * 8.0 * (1 / acc + 1 / rate)
    access_offset = bits / acc + get("access_delay_s")
    if "buffer_pkts" in overrides:
        buf = shared = get("buffer_pkts")
    else:
        buf = jnp.minimum(jnp.asarray(params.buffer_pkts, dt), jnp.asarray(params.class_cap_pkts, dt)[..., 0])
        shared = jnp.asarray(params.buffer_pkts, dt)
    alpha = get("alpha") if "alpha" in overrides else jnp.asarray(params.alpha, dt)[..., 0]  # the one class's
    n = cfg.n_flows
    i = jnp.arange(n, dtype=dt)
    # the packet sim draws each start uniformly in [0, spread); here flow i starts at its
    # quantile (i + 1/2) / N, and sends after the handshake (base RTT + access path)
    start = (get("long_flow_start_spread_s") * (i + 0.5) / n + jnp.asarray(params.long_flow_start_s, dt)
             + base + access_offset)
    share = jnp.asarray(cfg.sender_flows, dt)
    return dict(
        cap_pps=rate / bits, buffer=buf, pkt_bits=bits, base_rtt=jnp.broadcast_to(base, (n + cfg.n_short,)),
        start_s=start, access_pps=acc / bits / share, init_cwnd=get("initial_cwnd_pkts"), delayed_ack=get("delayed_ack"),
        # short flows: their data reaches the queue base RTT + access_offset after the arrival
        # (the handshake), a packet leaving the queue reaches the sink fwd_s later
        base_rtt_s=base, access_offset_s=access_offset, fwd_s=bits / rate + get("bottleneck_delay_s"),
        link_pps=acc / bits, rate_bps=rate, mss=mss,
        red_min=get("red_min_th_pkts"), red_max=get("red_max_th_pkts"), red_max_p=get("red_max_p"),
        red_weight=get("red_weight"), cubic_beta=get("cubic_beta"), cubic_c=get("cubic_c"),
        pie_target=get("pie_target_s"), pie_tupdate=get("pie_tupdate_s"), pie_a=get("pie_a"), pie_b=get("pie_b"),
        pie_max_burst=get("pie_max_burst_s"), pie_mark_th=get("pie_mark_threshold"),
        codel_target=get("codel_target_s"), codel_interval=get("codel_interval_s"),
        dctcp_g=get("dctcp_g"), alpha=alpha, shared_buffer=shared, bdp=rate / bits * base,
    )


# ---------------------------------------------------------------------------------------
# state
# ---------------------------------------------------------------------------------------

@struct.dataclass
class Totals:
    """Integrals since t = 0 (packets, or packets x s, or s)."""

    arrived: jnp.ndarray  # [] offered to the FIFO
    delivered: jnp.ndarray  # [] sent on the bottleneck wire
    dropped: jnp.ndarray  # [] dropped (the AQM's early / forced drops and the overflow at B)
    marked: jnp.ndarray  # [] CE-marked (ECN)
    queue_s: jnp.ndarray  # [] integral of the queue (packets x s)
    window_s: jnp.ndarray  # [] integral of the mean window over flows (packets x s)
    rtt_s: jnp.ndarray  # [] integral of the RTT (s x s)
    time_s: jnp.ndarray  # [] time
    clipped_s: jnp.ndarray  # [] time during which some flow's RTT exceeded the feedback ring


@struct.dataclass
class FluidState:
    """The fluid model's state.  N = n_flows + n_short flows (the long ones first), M =
    `Config.n_short` short-flow slots, L = `Config.hist_len` ring slots."""

    step: jnp.ndarray  # [] int32 Euler steps taken (time = step * dt)
    w: jnp.ndarray  # [N] congestion window (packets)
    ss: jnp.ndarray  # [N] weight of slow start (1 until the first reduction)
    rec: jnp.ndarray  # [N] weight of recovery (a reduction in the last RTT: no growth, no further cut)
    wmax: jnp.ndarray  # [N] CUBIC W_max (packets)
    kc: jnp.ndarray  # [N] CUBIC K (s)
    tau: jnp.ndarray  # [N] CUBIC time since the epoch began (s)
    dctcp_alpha: jnp.ndarray  # [N] DCTCP's estimate of the marked fraction (1 at start, DctcpAlphaOnInit)
    q: jnp.ndarray  # [] queue (packets)
    avg: jnp.ndarray  # [] RED's average queue (packets)
    max_p: jnp.ndarray  # [] RED's max_p (ARED adapts it)
    pie_p: jnp.ndarray  # [] PIE's drop probability
    mark_p: jnp.ndarray  # [] the "rl-mark" policy's marking probability (an agent's knob, `fluid_env`; 0 at start)
    cd_above_s: jnp.ndarray  # [] CoDel: how long the sojourn has stayed above target (s; 0 below it), of the
    #                             share not dropping
    cd_dropping: jnp.ndarray  # [] CoDel: weight (share) of the dropping state
    cd_count: jnp.ndarray  # [] CoDel: count of the dropping state (its drops are interval / sqrt(count) apart)
    cd_run: jnp.ndarray  # [] CoDel: drops since the dropping state was entered (ns-3's count - lastcount)
    cd_last_run: jnp.ndarray  # [] CoDel: cd_run when the dropping state was last left (of the share not dropping)
    cd_idle_s: jnp.ndarray  # [] CoDel: time since the dropping state was last left (s)
    sig: jnp.ndarray  # [L, N] congestion signals (drops + marks) due at each sender per future step
    rec_end: jnp.ndarray  # [L, N] ends of recovery due per future step
    ack_ce: jnp.ndarray  # [L, N] DCTCP: ACKs echoing a mark due per future step ([0, N] for other TCPs)
    ack_all: jnp.ndarray  # [L, N] DCTCP: ACKs due per future step ([0, N] for other TCPs)
    r: jnp.ndarray  # [M] short flows: packets not yet delivered (sent and not dropped)
    done: jnp.ndarray  # [M] short flows: 1 once finished
    fin_s: jnp.ndarray  # [M] short flows: when the last packet reached the sink (s; 0 until done)
    s_start: jnp.ndarray  # [M] short flows: arrival time (s; NEVER_S at or past arrival_stop_s)
    s_sender: jnp.ndarray  # [M] int32 short flows: sender
    s_size_b: jnp.ndarray  # [M] short flows: size (bytes)
    s_next: jnp.ndarray  # [] the arrival after the M slots (s): it and later ones are never started
    tot: Totals
    tot_err: Totals  # Kahan compensation of each total (float32 sums of many steps stay exact to an ulp)


def init(params: SimParams, config: Config | None = None, overrides: Mapping | None = None,
         key=None) -> FluidState:
    """The state at t = 0: every window at the initial cwnd, in slow start, empty queue; with
    short flows (`Config.n_short` > 0) their Poisson schedule drawn from `key` exactly as the
    packet simulator's `sim.init(key, params)` draws it (`sim.flow_schedule`), so a fluid
    run and a packet run of one seed carry the same flows."""
    cfg = configure(params, overrides=overrides) if config is None else config
    v = values(params, cfg, overrides)
    dt = _dtype()
    M = cfg.n_short
    n, L = cfg.n_flows + M, cfg.hist_len
    if M:
        if key is None:
            raise ValueError("fluid: this scenario has short flows (load > 0): pass key= (the seed of their Poisson "
                             "schedule, as the packet simulator's)")
        from rlbm_jax.env import sim

        start, sender, size_b = sim.flow_schedule(key, params, M + 1)
        start = start.astype(dt)
        start = jnp.where(start < params.arrival_stop_s, start, NEVER_S)
        s_start, s_next = start[:M], start[M]
        s_sender, s_size_b = sender[:M].astype(jnp.int32), size_b[:M].astype(dt)
        r0 = jnp.ceil(s_size_b / jnp.asarray(params.mss_bytes, dt))
    else:
        s_start = s_size_b = r0 = jnp.zeros((0,), dt)
        s_sender = jnp.zeros((0,), jnp.int32)
        s_next = jnp.asarray(NEVER_S, dt)
    zn = jnp.zeros((n,), dt)
    z = jnp.zeros((), dt)
    w0 = jnp.broadcast_to(v["init_cwnd"], (n,)).astype(dt)
    tot = Totals(arrived=z, delivered=z, dropped=z, marked=z, queue_s=z, window_s=z, rtt_s=z, time_s=z, clipped_s=z)
    l_ack = L if cfg.tcp == "dctcp" else 0
    return FluidState(step=jnp.zeros((), jnp.int32), w=w0, ss=zn + 1.0, rec=zn, wmax=w0, kc=zn, tau=zn,
                      dctcp_alpha=zn + DCTCP_ALPHA_INIT, q=z, avg=z,
                      max_p=v["red_max_p"] + z, pie_p=z, mark_p=z, cd_above_s=z, cd_dropping=z, cd_count=z + 1.0, cd_run=z,
                      cd_last_run=z, cd_idle_s=z, sig=jnp.zeros((L, n), dt), rec_end=jnp.zeros((L, n), dt),
                      ack_ce=jnp.zeros((l_ack, n), dt), ack_all=jnp.zeros((l_ack, n), dt), r=r0,
                      done=jnp.zeros((M,), dt), fin_s=jnp.zeros((M,), dt), s_start=s_start, s_sender=s_sender,
                      s_size_b=s_size_b, s_next=s_next, tot=tot, tot_err=tot)


# ---------------------------------------------------------------------------------------
# smooth pieces
# ---------------------------------------------------------------------------------------

def _ramp(x, h):
    """Smooth max(x, 0): h * softplus(x / h)."""
    return h * jax.nn.softplus(x / h)


def _step_fn(x, h):
    """Smooth 1{x > 0}: sigmoid(x / h)."""
    return jax.nn.sigmoid(x / h)


def _softmin0(x, cap, h):
    """Smooth min(x, cap) for x >= 0 that is 0 at x = 0 and increasing, so never negative:
    x - h softplus((x - cap) / h) + h softplus(-cap / h)."""
    return x - _ramp(x - cap, h) + _ramp(-cap, h)


def red_prob(avg, max_p, v, cfg: Config):
    """RED's (early, forced) probabilities at average `avg`: the base probability p_b of ns-3.37
    (linear from 0 at min_th to max_p at max_th; gentle: on to 1 at 2 max_th, its slope set by
    the initial max_p) with its kinks smoothed over sharpness x (max_th - min_th), and the
    weight of the forced region (avg above 2 max_th, gentle, or max_th) as a sigmoid of the
    same width.  The early probability per packet is p_b / 1.5 (ns-3's Wait spacing)."""
    lo, hi = v["red_min"], v["red_max"]
    h = cfg.sharpness * (hi - lo)
    lin = max_p / (hi - lo) * (_ramp(avg - lo, h) - _ramp(avg - hi, h))
    if cfg.gentle:
        pb = lin + (1.0 - v["red_max_p"]) / hi * _ramp(avg - hi, h)
        top = 2.0 * hi
    else:
        pb = lin
        top = hi
    forced = _step_fn(avg - top, h)
    return jnp.clip(pb, 0.0, 1.0) / RED_WAIT_GAP, forced


def pie_scale(p, cfg: Config):
    """ns-3.37 PIE's scaling of an update by the magnitude of p (1/2048 below 1e-6, x4 at each
    decade up to 1/2 below 0.1, 1 above), each step a sigmoid of p - threshold of width
    sharpness x the threshold."""
    log2 = PIE_SCALE_LOG2_MIN + sum(w * _step_fn(p - th, cfg.sharpness * th) for th, w in PIE_SCALE_STEPS)
    return jnp.exp2(log2)


def pie_early(p, qd, q, t, v, cfg: Config, first_s=None):
    """PIE's early-decision probability per arriving packet (ns-3.37 DropEarly): p, but none
    during the burst allowance (pie_max_burst_s from the first arrival: the long flows keep the
    queue busy, so it never re-arms), while qdelay < target / 2 and p < 0.2, or while at most
    2 packets are queued; each condition a sigmoid of width sharpness x its scale (a quarter
    packet for the queue's).  `qd` the queue's delay (s), `q` packets, `t` s, `first_s` the
    first arrival (s; default the first long flow's).  Returns (the probability, the weight of
    the burst allowance)."""
    s = cfg.sharpness
    first = jnp.min(v["start_s"]) if first_s is None else first_s
    burst = _step_fn(first + v["pie_max_burst"] - t, s * v["pie_max_burst"])
    low = _step_fn(0.5 * v["pie_target"] - qd, s * 0.5 * v["pie_target"]) * _step_fn(PIE_QUIET_P - p, s * PIE_QUIET_P)
    busy = _step_fn(q - PIE_MIN_QUEUE, RED_MIN_QUEUE_WIDTH)
    return (1.0 - burst) * (1.0 - low) * busy * p, burst


def pie_update(p, qd, qd_new, q_new, burst, v, cfg: Config):
    """PIE's probability one step of dt later (ns-3.37 CalculateP as a rate: each update's
    increment spread over tupdate, so dp/dt = scale(p) [a (qd - target) / tupdate + b dqd/dt]),
    the increment capped at 0.02 per tupdate from p = 0.1, x 0.98 per tupdate while the queue
    is empty, clipped to [0, 1], and 0 during the burst allowance (weight `burst`).  `qd`,
    `qd_new` the queue's delay before and after the step (s), `q_new` packets."""
    s, dt, tup = cfg.sharpness, cfg.dt_s, v["pie_tupdate"]
    inc = pie_scale(p, cfg) * (v["pie_a"] * (qd_new - v["pie_target"]) * dt / tup + v["pie_b"] * (qd_new - qd))
    cap = PIE_CAP_INC * dt / tup
    inc = inc - _step_fn(p - PIE_CAP_FROM_P, s * PIE_CAP_FROM_P) * _ramp(inc - cap, s * cap)
    empty = _step_fn(EMPTY_QUEUE - q_new, RED_MIN_QUEUE_WIDTH)
    p = (p + inc) * jnp.exp(math.log(PIE_DECAY) * empty * dt / tup)
    p = _ramp(p, s * PIE_P_FLOOR)
    p = p - _ramp(p - 1.0, s)
    return (1.0 - burst) * p


def codel_update(st: FluidState, qd, v, cfg: Config, wire_bytes):
    """CoDel's decisions on the head of the queue over one step (ns-3.37 CoDelQueueDisc with
    smooth state variables), with the sojourn `qd` (s) of the head packet and `wire_bytes` per
    packet.  A sojourn above target (with at least MinBytes behind the head) for more than an
    interval enters the dropping state (one drop at once), which then acts sqrt(count) /
    interval times per second, each act adding to count, and is left as soon as the sojourn
    is below target; on entry count is the last run's drops (count - lastcount) if there were
    more than one and that run ended within 16 intervals, else 1.

    Smoothed, the state is a population split between dropping (weight `cd_dropping`, with its
    count and the drops of its run) and not (with its above-target timer, the run it brought
    when it left and the time since): a sigmoid moves a share from one to the other, and a
    share moving brings its own values (a mean weighted by the shares), so that a share just
    left, whose timer is 0, does not re-enter at once.  Returns (decisions this step
    (packets), the updated CoDel fields)."""
    s, dt = cfg.sharpness, cfg.dt_s
    T, I = v["codel_target"], v["codel_interval"]
    d = st.cd_dropping
    # the sojourn above target with at least MinBytes behind the head packet
    above = _step_fn(qd - T, s * T) * _step_fn(st.q - 1.0 - CODEL_MIN_BYTES / wire_bytes, RED_MIN_QUEUE_WIDTH)
    timer = st.cd_above_s + dt  # of the share still above target; the rest resets to 0
    past = _step_fn(timer - I, s * I)  # above target for more than an interval
    enter = (1.0 - d) * above * past  # entering the dropping state now (one drop each at once)
    leave = (1.0 - above) * d  # leaving it (the sojourn is below target)
    d_new = d + enter - leave
    # the dropping share acts at the control law's rate while the sojourn stays above target;
    # its count and run grow by those drops, and entrants bring count max(last run, 1) if the
    # last run ended less than 16 intervals ago (else 1) and a run of 0
    rate = jnp.sqrt(jnp.maximum(st.cd_count, 1.0)) / I
    acts = d * above * rate * dt + enter
    grown = above * rate * dt
    recent = _step_fn(CODEL_RECENT_INTERVALS * I - st.cd_idle_s, s * CODEL_RECENT_INTERVALS * I)
    count_in = 1.0 + recent * _ramp(st.cd_last_run - 1.0, s)
    joined = jnp.clip(enter / jnp.maximum(d_new, TINY_PKTS), 0.0, 1.0)  # entrants' share of the dropping state
    count = st.cd_count + grown + joined * (count_in - st.cd_count - grown)
    run = (st.cd_run + grown) * (1.0 - joined)
    # the share not dropping: its timer (0 for the part below target and for the leavers),
    # and the leavers' run and an idle time of 0
    rest = jnp.maximum(1.0 - d_new, TINY_PKTS)
    timer_new = (1.0 - d) * above * (1.0 - past) * timer / rest  # (at most timer: rest holds that share)
    left = jnp.clip(leave / rest, 0.0, 1.0)  # the leavers' share of the state not dropping
    last_run = st.cd_last_run + left * (st.cd_run + grown - st.cd_last_run)
    idle = (st.cd_idle_s + dt) * (1.0 - left)
    return acts, dict(cd_above_s=timer_new, cd_dropping=d_new, cd_count=count, cd_run=run, cd_last_run=last_run,
                      cd_idle_s=idle)


# ---------------------------------------------------------------------------------------
# one step
# ---------------------------------------------------------------------------------------

def _schedule(ring, slot, delay_steps, amount, L):
    """Add `amount` [N] into `ring` [L, N] `delay_steps` [N] (fractional) after `slot`, split
    linearly between the two neighbouring slots.  Returns (ring, clipped [N] bool)."""
    clipped = delay_steps > L - 2
    d = jnp.clip(delay_steps, 1.0, L - 2.0)
    j = jnp.floor(jax.lax.stop_gradient(d))
    frac = d - j
    j = j.astype(jnp.int32)
    cols = jnp.arange(amount.shape[0])
    ring = ring.at[(slot + j) % L, cols].add((1.0 - frac) * amount)
    ring = ring.at[(slot + j + 1) % L, cols].add(frac * amount)
    return ring, clipped


def _kahan(total, err, inc):
    """Compensated (Kahan) summation of every field: (total + inc, its new compensation)."""
    def add(s, c, x):
        y = x - c
        t = s + y
        return t, (t - s) - y
    pairs = jax.tree.map(add, total, err, inc)
    return (jax.tree.map(lambda _, p: p[0], total, pairs), jax.tree.map(lambda _, p: p[1], total, pairs))


def _growth(st: FluidState, v: dict, cfg: Config, rtt):
    """Each flow's window growth rate (packets/s) outside recovery: slow start weighted by
    `ss`, congestion avoidance by 1 - ss."""
    if cfg.tcp == "newreno":
        # ns-3.37 NewReno: slow start +1 per ACK, one ACK per delayed_ack segments (x (1 + 1/d)
        # per RTT); congestion avoidance +1/cwnd per ACK (+1/d per RTT)
        d = v["delayed_ack"]
        return st.ss * jnp.log1p(1.0 / d) * st.w / rtt + (1.0 - st.ss) / (d * rtt)
    if cfg.tcp == "dctcp":
        # ns-3.37 TcpDctcp grows as TcpLinuxReno, counting the segments each ACK covers (so
        # delayed ACKs change nothing): slow start +1 per segment (x 2 per RTT), congestion
        # avoidance +1 per cwnd segments (+1 per RTT)
        return st.ss * jnp.log(2.0) * st.w / rtt + (1.0 - st.ss) / rtt
    # ns-3.37 CUBIC: target = W_max + C (tau + min RTT - K)^3; cnt = cwnd / (target - cwnd), 100 cwnd
    # when the target is not above cwnd, at least 2: growth per RTT (target - cwnd) within
    # [0.01, cwnd / 2]; slow start counts bytes (x 2 per RTT)
    target = st.wmax + v["cubic_c"] * (st.tau + v["base_rtt"] - st.kc) ** 3
    g_ca = jnp.clip((target - st.w) / rtt, 1.0 / (CUBIC_MAX_CNT * rtt), st.w / (CUBIC_MIN_CNT * rtt))
    return st.ss * jnp.log(2.0) * st.w / rtt + (1.0 - st.ss) * g_ca


def queue_cap(v: dict, cfg: Config):
    """The limit of the one queue (packets): the buffer B (the class FIFO's cap within the
    shared buffer) for drop-tail and the AQMs, and for a shared-buffer threshold policy the
    largest queue its one-class threshold admits (rlbm_jax.env.switch.buffer; a packet is
    admitted while the queue it finds is below the threshold, B_s the shared buffer, a the
    class's alpha):
        sb-naive, sb-sophisticated  a B_s / a (the one class takes the whole buffer: B)
        dt                          q <= a (B_s - q):  a B_s / (1 + a)
        abm                         DT's, its drain-rate factor clamped to [1/1, 1] = 1
        static-bdp                  q <= min(a BDP, B_s - q):  min(a BDP, B_s / 2)
    each at most B.  The minimum of constants (the parameters'), so exact where one cap is
    below the other."""
    B = v["buffer"]
    if cfg.aqm not in THRESHOLD_POLICIES:
        return B
    a, bs = v["alpha"], v["shared_buffer"]
    if cfg.aqm in ("sb-naive", "sb-sophisticated"):
        cap = a * bs / jnp.maximum(a, SB_MIN_ALPHA_SUM)
    elif cfg.aqm in ("dt", "abm"):
        cap = a * bs / (1.0 + a)
    else:  # static-bdp
        cap = jnp.minimum(a * v["bdp"], 0.5 * bs)
    return jnp.minimum(jnp.maximum(cap, 0.0), B)


def step(st: FluidState, v: dict, cfg: Config) -> FluidState:
    """One explicit Euler step of length cfg.dt_s (the package docstring's equations)."""
    L, dt, s = cfg.hist_len, cfg.dt_s, cfg.sharpness
    C, B = v["cap_pps"], queue_cap(v, cfg)
    slot = st.step % L
    t = st.step.astype(C.dtype) * dt
    # ---- feedback due now: congestion signals and ends of recovery ----------------------
    sig = st.sig[slot]
    ends = st.rec_end[slot]
    sig_ring = st.sig.at[slot].set(0.0)
    end_ring = st.rec_end.at[slot].set(0.0)
    # ---- senders: the ACK clock W / R plus the window's growth --------------------------
    n, M = cfg.n_flows, cfg.n_short
    if M:
        # a short flow's data reaches the queue after its handshake and stops when it is done;
        # a sender's access link is shared by its long flows and its open short flows
        # (a short flow's first step counts the part of it after its start: its FCT moves
        # continuously with the delays)
        s_send = st.s_start + v["base_rtt_s"] + v["access_offset_s"]  # [M] its data reaches the queue
        s_on = jnp.clip((t + dt - s_send) / dt, 0.0, 1.0)
        active = jnp.concatenate([(t >= v["start_s"]).astype(C.dtype), s_on * (1.0 - st.done)])
        long_sender = np.arange(n) % cfg.n_senders
        count = (jnp.asarray(np.bincount(long_sender, minlength=cfg.n_senders), C.dtype)
                 + jax.ops.segment_sum(active[n:], st.s_sender, cfg.n_senders))
        senders = jnp.concatenate([jnp.asarray(long_sender, jnp.int32), st.s_sender])
        access = v["link_pps"] / jnp.maximum(count[senders], 1.0)
    else:
        active = (t >= v["start_s"]).astype(C.dtype)
        access = v["access_pps"]
    rtt = v["base_rtt"] + st.q / C  # [N]
    grow = active * (1.0 - st.rec) * _growth(st, v, cfg, rtt)  # [N] packets/s
    x = active * jnp.minimum(st.w / rtt + grow, access)  # [N] packets/s
    a = x * dt  # [N] packets offered this step
    if M:  # a short flow sends no more than it has left
        a_short = jnp.minimum(a[n:], st.r)
        a = jnp.concatenate([a[:n], a_short])
    A = jnp.sum(a)
    # ---- the AQM at enqueue ---------------------------------------------------------------
    qd = st.q / C  # the queue's delay (s): the sojourn PIE and CoDel measure
    burst = jnp.zeros((), C.dtype)
    h = s * jnp.minimum(B, C * jnp.min(v["base_rtt"]))  # sharpness x min(B, BDP) packets
    if cfg.red_step:
        # step marking on the instantaneous queue (weight 1, max_p 1: DCTCP's K): every arrival
        # that finds max(max_th, 2) packets or more is hit; at or above the top (2 max_th, gentle,
        # or max_th) forced; both steps sigmoids of the queue's width h
        top = 2.0 * v["red_max"] if cfg.gentle else v["red_max"]
        early = _step_fn(st.q - (jnp.maximum(v["red_max"], STEP_MIN_QUEUE) - STEP_HALF_PKT), h)
        forced = _step_fn(st.q - (top - STEP_HALF_PKT), h)
        p_drop = forced + (1.0 - forced) * (0.0 if cfg.ecn else early)
        p_mark = (1.0 - forced) * early if cfg.ecn else jnp.zeros_like(early)
    elif cfg.aqm in ("red", "ared"):
        # RED's max_p is the parameter itself (ARED's moves, a state of its own)
        early, forced = red_prob(st.avg, st.max_p if cfg.aqm == "ared" else v["red_max_p"], v, cfg)
        # ns-3 RED decides nothing while fewer than 2 packets are queued (q > 1, smoothed)
        early = early * _step_fn(st.q - RED_MIN_QUEUE, RED_MIN_QUEUE_WIDTH)
        p_drop = forced + (1.0 - forced) * (0.0 if cfg.ecn else early)
        p_mark = (1.0 - forced) * early if cfg.ecn else jnp.zeros_like(early)
    elif cfg.aqm == "pie":
        # (the burst allowance runs from the first arrival, a short flow's when it is first)
        first = jnp.min(jnp.concatenate([v["start_s"], s_send])) if M else None
        early, burst = pie_early(st.pie_p, qd, st.q, t, v, cfg, first)
        if cfg.ecn:  # ns-3.37 PIE marks an ECT packet while p < mark_threshold, else drops it
            may = _step_fn(v["pie_mark_th"] - st.pie_p, s * v["pie_mark_th"])
            p_drop = early * (1.0 - may)
            p_mark = early * may / jnp.maximum(1.0 - p_drop, TINY_PKTS)  # of the admitted packets
        else:
            p_drop, p_mark = early, jnp.zeros_like(early)
    elif cfg.aqm == "rl-mark":  # the agent's marker: every arrival CE-marked with probability mark_p
        p_drop = jnp.zeros((), C.dtype)
        p_mark = jnp.clip(st.mark_p, 0.0, 1.0)
    else:
        p_drop = jnp.zeros((), C.dtype)
        p_mark = jnp.zeros((), C.dtype)
    adm = A * (1.0 - p_drop)
    # ---- CoDel at dequeue: its decisions act on the head of the queue ----------------------
    if cfg.aqm == "codel":
        acts, codel = codel_update(st, qd, v, cfg, v["pkt_bits"] / 8.0)
        if cfg.ecn:  # every data packet is ECT: the head packets are marked as they leave
            head_drop, head_mark = jnp.zeros((), C.dtype), _softmin0(acts, C * dt, h)
        else:  # dropped from the head
            head_drop, head_mark = _softmin0(acts, st.q, h), jnp.zeros((), C.dtype)
    else:
        codel = {}
        head_drop = head_mark = jnp.zeros((), C.dtype)
    # ---- the FIFO: a smooth projection of q + admitted - C dt onto [0, B] (B: the policy's cap) -
    u = st.q - head_drop + adm - C * dt
    under = _ramp(-u, h)  # service the link could not give (it idles)
    over = _ramp(u - B, h)  # overflow at the buffer's limit (dropped)
    q_new = u + under - over
    delivered = C * dt - under
    dropped = A * p_drop + over + head_drop
    marked = adm * p_mark + head_mark
    share = a / jnp.maximum(A, TINY_PKTS)  # (a floor, not an epsilon: its square underflows in float32)
    drops_i = a * p_drop + over * share
    marks_i = a * (1.0 - p_drop) * p_mark
    # ---- congestion signals reach each sender one RTT later --------------------------------
    sig_ring, clip_sig = _schedule(sig_ring, slot, rtt / dt, drops_i + marks_i, L)
    if cfg.aqm == "codel":
        # a decision on the head reaches its sender one base RTT later (the packets behind it, or
        # the marked packet itself, leave now): shared as the arrivals are
        sig_ring, clip_head = _schedule(sig_ring, slot, v["base_rtt"] / dt, (head_drop + head_mark) * share, L)
        clip_sig = clip_sig | clip_head
    if cfg.tcp == "dctcp":
        # the ACKs of the packets the AQM admitted, and of the marked ones, reach the sender one
        # RTT later (CoDel's marks at the head one base RTT later)
        ce_due, all_due = st.ack_ce[slot], st.ack_all[slot]
        ack_ce, _ = _schedule(st.ack_ce.at[slot].set(0.0), slot, rtt / dt, marks_i, L)
        ack_all, _ = _schedule(st.ack_all.at[slot].set(0.0), slot, rtt / dt, a * (1.0 - p_drop), L)
        if cfg.aqm == "codel":
            ack_ce, _ = _schedule(ack_ce, slot, v["base_rtt"] / dt, head_mark * share, L)
    else:
        ack_ce, ack_all = st.ack_ce, st.ack_all
    # ---- RED's average: d avg/dt = ln(1 - w_q) * (arrivals + idle link slots)/s * (avg - q) -
    if cfg.red_step:
        avg = q_new  # (weight 1: the average is the queue)
    elif cfg.aqm in ("red", "ared"):
        idle = under / (C * dt)
        k = -jnp.log1p(-v["red_weight"]) * (A / dt + idle * C)
        avg = st.q + (st.avg - st.q) * jnp.exp(-k * dt)
    else:
        avg = st.avg
    pie_p = st.pie_p
    if cfg.aqm == "pie":
        pie_p = pie_update(st.pie_p, qd, q_new / C, q_new, burst, v, cfg)
    max_p = st.max_p
    if cfg.aqm == "ared":
        lo, hi = v["red_min"], v["red_max"]
        part = 0.4 * (hi - lo)
        hh = s * (hi - lo)
        bottom = jnp.minimum(ARED_BOTTOM, ARED_RTT_S / C)  # ns-3: min(0.01, one packet's time x 0.1 s / 1 s)
        up = _step_fn(st.avg - (hi - part), hh) * _step_fn(ARED_TOP - st.max_p, s * ARED_TOP)
        down = _step_fn(lo + part - st.avg, hh) * _step_fn(st.max_p - bottom, s * ARED_TOP)
        rate = (up * jnp.minimum(ARED_ALPHA, st.max_p / 4.0) - down * (1.0 - ARED_BETA) * st.max_p) / ARED_INTERVAL_S
        max_p = st.max_p + rate * dt
    # ---- reductions: at most one per RTT ------------------------------------------------------
    # the share of the flow's population that starts a reduction now: the signals, up to the
    # share not yet in recovery, saturating smoothly; it leaves recovery one RTT later
    free = 1.0 - st.rec
    e = active * free * -jnp.expm1(-sig / (free + 1e-6))
    end_ring, clip_end = _schedule(end_ring, slot, rtt / dt, e, L)
    rec = jnp.clip(st.rec + e - ends, 0.0, 1.0)
    ss = st.ss * (1.0 - e)
    # the cut lands on the windows of the share not yet cut, W / (1 - rec (1 - beta))
    if cfg.tcp == "dctcp":
        beta = 1.0 - st.dctcp_alpha / 2.0  # ns-3.37 TcpDctcp: ssthresh = (1 - alpha / 2) cwnd, on a mark or a loss
    else:
        beta = NEWRENO_BETA if cfg.tcp == "newreno" else v["cubic_beta"]
    cut = e * (1.0 - beta) / (1.0 - st.rec * (1.0 - beta))
    w = jnp.maximum(st.w * (1.0 - cut) + grow * dt, 1.0)
    if cfg.tcp == "cubic":
        # a reduction sets W_max (fast convergence: W (1 + beta) / 2 below the last W_max), K and
        # the epoch's start; the population's values move by the share e
        if cfg.fast_conv:
            fc = 1.0 - (1.0 - beta) / 2.0 * _step_fn(st.wmax - st.w, 1.0)
        else:
            fc = 1.0
        wmax_cut = st.w * fc
        k_cut = jnp.cbrt(jnp.maximum(wmax_cut - beta * st.w, TINY_PKTS) / v["cubic_c"])
        wmax = st.wmax + e * (wmax_cut - st.wmax)
        kc = st.kc + e * (k_cut - st.kc)
        tau = (1.0 - e) * st.tau + active * (1.0 - st.rec) * dt
    else:
        wmax, kc, tau = st.wmax, st.kc, st.tau
    if cfg.tcp == "dctcp":
        # AJP's d alpha/dt = g / R (p(t - R) - alpha), as ns-3 counts it: each window of W ACKed
        # segments moves alpha by g toward the window's marked fraction, so every ACK moves it by
        # g / W toward 1 (echo) or 0; after this step's cut (ns-3 cuts before PktsAcked)
        dalpha = v["dctcp_g"] * (ce_due - st.dctcp_alpha * all_due) / st.w
        dctcp_alpha = jnp.clip(st.dctcp_alpha + dalpha, 0.0, 1.0)
    else:
        dctcp_alpha = st.dctcp_alpha
    # ---- short flows: what is left, and the completions (interpolated inside the step) -----
    if M:
        # a dropped packet is sent again (at once: no timeout); the flow's last packet is sent
        # when nothing is left, part of the step (frac) in; it reaches the sink after the
        # queue ahead of it and the bottleneck link, one RTT later for the share of that
        # last step that was dropped (its retransmission)
        fin_now = (st.done < 0.5) & (a_short > 0) & (st.r - a_short <= 0.0)
        frac = a_short / jnp.maximum(x[n:] * dt, TINY_PKTS)  # of the step its last packet took
        lost = drops_i[n:] / jnp.maximum(a_short, TINY_PKTS)
        fin_s = jnp.where(fin_now, t + frac * dt + q_new / C + v["fwd_s"] + lost * rtt[n:], st.fin_s)
        done = jnp.where(fin_now, 1.0, st.done)
        r_left = jnp.where(fin_now, 0.0, st.r - a_short + drops_i[n:])
    else:
        fin_s, done, r_left = st.fin_s, st.done, st.r
    # ---- integrals ------------------------------------------------------------------------
    clipped = jnp.any(clip_sig | clip_end).astype(C.dtype)
    if M:  # the mean window and RTT of the long flows (of every flow when there are none)
        w_mean, rtt_mean = (jnp.mean(st.w[:n]), jnp.mean(rtt[:n])) if n else (jnp.zeros((), C.dtype), rtt[0])
    else:
        w_mean, rtt_mean = jnp.mean(st.w), jnp.mean(rtt)
    inc = Totals(arrived=A, delivered=delivered, dropped=dropped, marked=marked, queue_s=0.5 * (st.q + q_new) * dt,
                 window_s=w_mean * dt, rtt_s=rtt_mean * dt, time_s=jnp.asarray(dt, C.dtype),
                 clipped_s=clipped * dt)
    tot, tot_err = _kahan(st.tot, st.tot_err, inc)
    return FluidState(step=st.step + 1, w=w, ss=ss, rec=rec, wmax=wmax, kc=kc, tau=tau, dctcp_alpha=dctcp_alpha,
                      q=q_new, avg=avg, max_p=max_p, pie_p=pie_p, mark_p=st.mark_p, sig=sig_ring, rec_end=end_ring,
                      ack_ce=ack_ce, ack_all=ack_all, r=r_left, done=done, fin_s=fin_s, s_start=st.s_start,
                      s_sender=st.s_sender, s_size_b=st.s_size_b, s_next=st.s_next, tot=tot, tot_err=tot_err,
                      **{f: codel.get(f, getattr(st, f)) for f in CODEL_FIELDS})


CODEL_FIELDS = ("cd_above_s", "cd_dropping", "cd_count", "cd_run", "cd_last_run", "cd_idle_s")  # codel_update's
# the state that carries one step's effect into the next (what a gradient horizon cuts)
DYNAMIC = ("w", "ss", "rec", "wmax", "kc", "tau", "dctcp_alpha", "q", "avg", "max_p", "pie_p", *CODEL_FIELDS, "sig",
           "rec_end", "ack_ce", "ack_all", "r")


def advance(state: FluidState, params: SimParams, num_steps: int, config: Config | None = None,
            overrides: Mapping | None = None, grad_horizon_s: float | None = None) -> FluidState:
    """`num_steps` (static) Euler steps of `config.dt_s` each, in a `lax.scan`.

    grad_horizon_s  None: exact derivatives.  A number: the values are the same, but at every
                    step whose index (`state.step`, counted from t = 0) is a positive multiple
                    of `grad_horizon_s` / dt, the dynamic state (`DYNAMIC`: windows, queue,
                    RED's average and ARED's max_p, PIE's and CoDel's states, DCTCP's alpha,
                    the feedback rings) is passed through `stop_gradient` before the step, so a derivative
                    sums each stretch's own sensitivity and forgets what reached it from
                    earlier stretches (truncated backpropagation through time).  The cuts sit
                    on the absolute clock, so splitting a run into calls (`summary`'s warm-up,
                    an env's agent intervals) moves none of them, and a horizon longer than
                    the run gives the exact derivative.  Where the loop oscillates the exact
                    derivative of a time average grows with the horizon; this one stays of
                    the size of the metric's response (calibration/FLUID.md measures both
                    against the packet simulator)."""
    cfg = configure(params, overrides=overrides) if config is None else config
    v = values(params, cfg, overrides)
    num_steps = int(num_steps)
    if grad_horizon_s is None:
        body = lambda st, _: (step(st, v, cfg), None)  # noqa: E731
    else:
        if not (math.isfinite(grad_horizon_s) and grad_horizon_s > 0):
            raise ValueError(f"fluid: grad_horizon_s must be a positive number of seconds or None, got "
                             f"{grad_horizon_s!r}")
        k = max(1, int(round(grad_horizon_s / cfg.dt_s)))

        def body(st, _):
            cut = (st.step > 0) & (st.step % k == 0)
            st = st.replace(**{f: jnp.where(cut, jax.lax.stop_gradient(getattr(st, f)), getattr(st, f))
                               for f in DYNAMIC})
            return step(st, v, cfg), None
    return jax.lax.scan(body, state, None, length=num_steps)[0] if num_steps else state


def steps_for(seconds: float, config: Config) -> int:
    """Euler steps covering `seconds` (Python int)."""
    return int(round(float(seconds) / config.dt_s))


def short_flows(state: FluidState, v: dict) -> dict:
    """Per short-flow slot [M]: start_s (arrival), size_bytes, done (0/1), fct_s (the last
    packet's arrival at the sink - the arrival; 0 until done) and slowdown (fct_s / (base
    RTT + size x 8 / rate), the packet simulator's ideal; 0 until done)."""
    ideal = v["base_rtt_s"] + state.s_size_b * 8.0 / v["rate_bps"]
    fct = jnp.where(state.done > 0.5, state.fin_s - state.s_start, 0.0)
    return {"start_s": state.s_start, "size_bytes": state.s_size_b, "done": state.done, "fct_s": fct,
            "slowdown": fct / ideal}


def _short_summary(st: FluidState, v: dict, params: SimParams, warmup_s: float, end_s, n_long: int) -> dict:
    """The summary's short-flow fields (the packet report's: flows_started counts the
    `n_long` long flows too; the FCTs are over short flows that arrived after the warm-up and
    finished by the end)."""
    from rlbm_jax.env import metrics as mx

    f = short_flows(st, v)
    valid = (f["done"] > 0.5) & (f["start_s"] >= warmup_s)
    nvalid = jnp.sum(valid)
    some = nvalid > 0
    started = jnp.sum(f["start_s"] < end_s)
    stop = jnp.minimum(jnp.asarray(params.arrival_stop_s, end_s.dtype), end_s)
    return {
        "flows_started": started + n_long, "flows_completed": jnp.sum(f["done"]),
        "flows_open": started - jnp.sum(f["done"]),
        "fct_mean_s": jnp.where(some, jnp.sum(jnp.where(valid, f["fct_s"], 0.0)) / jnp.maximum(nvalid, 1), jnp.nan),
        "slowdown_mean": jnp.where(some, jnp.sum(jnp.where(valid, f["slowdown"], 0.0)) / jnp.maximum(nvalid, 1),
                                   jnp.nan),
        "slowdown_p50": mx.masked_quantile(f["slowdown"], valid, 0.5),
        "short_slots_full": (st.s_next < stop).astype(end_s.dtype),
    }


def summary(params: SimParams, seconds: float, warmup_s: float | None = None, overrides: Mapping | None = None,
            config: Config | None = None, grad_horizon_s: float | None = None, key=None, **config_kw) -> dict:
    """Simulate `seconds` (static) from t = 0 and summarise the time after `warmup_s`
    (static; default the params' warmup_s): a dict of scalars, jittable and differentiable
    with respect to the params' float leaves and `overrides` (a dict of OVERRIDABLE names
    to arrays that replace the params' values inside the traced function).

    util_wire         delivered / (C x measured time)
    queue_mean_pkts   time-average queue
    drop_rate         dropped / arrived;  mark_rate  marked / arrived
    window_mean_pkts  time-average of the mean window over flows
    rtt_mean_s        time-average of the mean RTT (base + q / C)
    throughput_bps    delivered data packets' bits (headers included) per second
    arrived_pkts, delivered_pkts, dropped_pkts, marked_pkts, queue_start_pkts, queue_end_pkts
                      the measured stretch's totals (arrived = delivered + dropped + end - start)
    measured_s        the measured time
    delay_clipped_s   time during which an RTT exceeded the feedback ring (0 unless the
                      config's max_rtt_s was too small: then raise it)

    With short flows (load > 0; `key` draws their schedule, `init`), also the packet report's
    flows_started, flows_completed, fct_mean_s and slowdown_p50 (over flows that arrived
    after the warm-up and finished), and
    flows_open        short flows arrived and not finished at the end
    slowdown_mean     the mean slowdown of the flows fct_mean_s averages
    short_slots_full  1 if arrivals before the end were left out because the config's
                      short-flow slots ran out (`configure`'s short_slots): rerun with more

    `grad_horizon_s` (`advance`): None for exact derivatives, or the truncation horizon of a
    smoothed one (the values do not change)."""
    if config is None:
        config_kw.setdefault("horizon_s", seconds)
    cfg = configure(params, overrides=overrides, **config_kw) if config is None else config
    if warmup_s is None:
        if _is_traced(params.warmup_s):
            raise ValueError("fluid: params are traced here, so warmup_s cannot be read from them; pass warmup_s=")
        warmup_s = float(np.max(np.asarray(params.warmup_s)))
    n_total, n_warm = steps_for(seconds, cfg), steps_for(warmup_s, cfg)
    if not 0 <= n_warm < n_total:
        raise ValueError(f"fluid: warmup_s ({warmup_s}) must be in [0, seconds) ({seconds})")
    st0 = init(params, cfg, overrides, key=key)
    st1 = advance(st0, params, n_warm, cfg, overrides, grad_horizon_s) if n_warm else st0
    st2 = advance(st1, params, n_total - n_warm, cfg, overrides, grad_horizon_s)
    a, b = st1.tot, st2.tot
    dur = b.time_s - a.time_s
    v = values(params, cfg, overrides)
    arrived = b.arrived - a.arrived
    delivered = b.delivered - a.delivered
    dropped = b.dropped - a.dropped
    marked = b.marked - a.marked
    short = _short_summary(st2, v, params, warmup_s, b.time_s, cfg.n_flows) if cfg.n_short else {}
    return {
        **short,
        "util_wire": delivered / (v["cap_pps"] * dur),
        "queue_mean_pkts": (b.queue_s - a.queue_s) / dur,
        "drop_rate": dropped / jnp.maximum(arrived, TINY_PKTS),
        "mark_rate": marked / jnp.maximum(arrived, TINY_PKTS),
        "window_mean_pkts": (b.window_s - a.window_s) / dur,
        "rtt_mean_s": (b.rtt_s - a.rtt_s) / dur,
        "throughput_bps": delivered * v["pkt_bits"] / dur,
        "arrived_pkts": arrived, "delivered_pkts": delivered, "dropped_pkts": dropped, "marked_pkts": marked,
        "queue_start_pkts": st1.q, "queue_end_pkts": st2.q,
        "measured_s": dur,
        "delay_clipped_s": b.clipped_s,
    }
