"""The simulator: `init` and the pure `tick`, plus `run` (a `lax.scan` of ticks).

One tick covers `params.pkts_per_tick` packet times of the bottleneck.  `tick` runs
these phases in order (docs/DESIGN.md), each a function of this module:
  1. deliver_phase: packets that left sink_delay_ticks ago reach the sink (delivery,
     FCT log)
  2. ack_phase: the event flows are chosen; ACKs of packets that left ack_delay_ticks
     ago reach their senders (tcp.on_acks)
  3. timeout_phase: retransmission timers fire (tcp.on_timeouts)
  4. arrival_phase: the buffer policy sets this tick's class thresholds (buffer); at
     most one new flow starts (traffic)
  5. transmit_phase: senders transmit what cwnd and the access link allow (tcp.wanted)
  6. admit_phase: the run's queueing discipline decides on the arrivals, which are
     admitted or dropped against the thresholds and enqueued (disciplines, buffer,
     queue), the senders book them (tcp.on_sent), a new flow's SYN may be lost
  7. depart_phase: the scheduler picks up to `service_pkts` packets; they leave the class
     FIFOs (scheduler, queue), or a discipline that owns departure picks them from its
     own queues, and enter the delay line that carries them to the sink and their ACKs
     back
  8. record_phase: metrics, the agent interval's record, the drain-rate window
What flows from one phase to the next is a small named tuple (`Clock`, `Sink`,
`Events`, `Arrival`, `Transmit`, `Admission`, `Departure`, `Record`).  The queueing
disciplines (`disciplines`: RED, PIE, CoDel, the marker, FQ-CoDel) enter through the
registry's hooks and flags alone; the tick's code names none of them.
Senders run on the switch's clock shifted by the (uncongested) access-path delay,
so a packet a sender emits in tick t is at the switch in tick t.  With several flow
groups (`params.flow_groups`) each group's senders have their own access delay, so their
own shift, base RTT and ACK delay: the ACK phase reads each group's ACKs from its own
departure tick.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rlbm_jax.env import capacity, incast, metrics as mx, tcp, traffic
from rlbm_jax.env.switch import buffer, disciplines, flowqueue, queue as qm, scheduler
from rlbm_jax.env.params import SimParams, check_record

# Fields of a delay-line record: the queue's run record (FLOW, COUNT, NRETX, TX0, ENQ, NSPUR, NCE).
WIRE_FIELDS = qm.RUN_FIELDS


@struct.dataclass
class SimState:
    tick: jnp.ndarray  # [] int32
    seed: jnp.ndarray  # [] uint32, drives the per-tick hash randomness
    flows: tcp.FlowTable  # [F] rows (tcp.unpack gives the named fields)
    delivered: jnp.ndarray  # [F] packets of each flow received by the sink
    done_sink: jnp.ndarray  # [F] bool: the flow's last packet arrived (FCT logged)
    queue: qm.QueueState
    wire: jnp.ndarray  # [L, k, WIRE_FIELDS] departed runs by departure tick (ring)
    next_arrival_s: jnp.ndarray  # [] time of the next flow arrival
    access_credit: jnp.ndarray  # [S] packets each access link may still send
    rr_next: jnp.ndarray  # [] next class for round robin
    rl_alpha: jnp.ndarray  # [P] agent action (used by the "rl" policy)
    rl_size_pkts: jnp.ndarray  # [P] float the agent's buffer size per class (used by the "rl-size" policy)
    drain_norm: jnp.ndarray  # [P] dequeue rate / link rate over the last base RTT
    drain_window: jnp.ndarray  # [P] dequeues in the current window
    drain_window_start: jnp.ndarray  # [] tick
    thresholds: jnp.ndarray  # [P] admission thresholds used in the last tick
    aqm: disciplines.States  # every discipline's own state (`aqm.red`, ...); the run's is the policy's `aqm`
    metrics: mx.Metrics
    interval: mx.Interval
    flowq: flowqueue.FlowQueues  # per-flow queues (FQ-CoDel); a one-run placeholder without them
    # the bottleneck's departure credit (packets) carried into the next tick, a fraction of one,
    # under a capacity schedule (rlbm_jax.env.capacity); 0 without one
    link_credit: jnp.ndarray  # [] float32
    # query-response traffic (rlbm_jax.env.incast); None (no leaves) without it
    incast: incast.IncastState | None = None


# The switch's knobs that an agent sets (a formulation's action maps onto them), and the
# SimState field each one is held in.  class_alpha [P]: the "rl" buffer policy admits a
# class-c packet while its queue is below class_alpha_c * beta_c * (B - Q);
# buffer_size_pkts [P]: the "rl-size" policy (drop-tail) admits a class-c packet while
# its queue is below the size, clipped to [1, the class's FIFO cap], in place of the cap
# (`buffer._rl_size`; it starts at the cap); the disciplines declare theirs
# (`Discipline.knobs`: mark_prob [P], the marker's probability, held in `aqm.mark.mark_p`).
# The senders' knobs (a sender agent's action, `params.agent_flows` = A > 0): each acts on the
# flows slots 0..A-1, one value for all of them or one per agent flow.  cwnd_gain [A]: each
# agent flow's window is multiplied by it, within [1, MAX_CWND_PKTS] segments (a gain of
# exactly 1 leaves the window as it is, bit for bit), and its congestion control goes on from
# there (Orca's action on top of CUBIC).  rate_gain [A]: each agent flow's pacing rate is
# multiplied by it, within [MIN_RATE_PPS, MAX_RATE_PPS] segments per second (the rate a rate
# sender, tcp "rate", holds and paces at: Aurora's action).
# the largest window the knob sets (a gain held above 1 would otherwise grow it past float32's range)
MAX_CWND_PKTS = tcp.MAX_CWND_PKTS
# the rates the knob sets: at least a segment a second, at most 1e7 (120 Gbit/s of 1500 B)
MIN_RATE_PPS, MAX_RATE_PPS = 1.0, 1e7
# knob -> (the flow table's column it scales, the column's range)
_FLOW_KNOBS = {"cwnd_gain": ("cwnd", 1.0, MAX_CWND_PKTS), "rate_gain": ("rate_pps", MIN_RATE_PPS, MAX_RATE_PPS)}
FLOW_KNOBS = {k: "flows." + col for k, (col, _, _) in _FLOW_KNOBS.items()}
# knob -> the state field it sets (a dotted path names a field of a sub-state; a sender knob's
# "flows.<column>" is the flow table's column, scaled by `_scale_flows`)
KNOBS = {"class_alpha": "rl_alpha", "buffer_size_pkts": "rl_size_pkts",
         **{knob: f"aqm.{d.key}.{field}" for d in disciplines.DISCIPLINES for knob, field in d.knobs},
         **FLOW_KNOBS}


def agent_count(state: SimState) -> int:
    """A, the flows a sender agent drives (static: the interval record's agent rows; 0 without)."""
    counts = state.interval.agent_counts
    return 0 if counts is None else int(counts.shape[-2])


def _scale_flows(state: SimState, name: str, gain) -> SimState:
    """A sender knob (`FLOW_KNOBS`): the agent flows' column times `gain` (one value or [A]),
    within the knob's range; a gain of exactly 1 leaves it as it is."""
    A = agent_count(state)
    if A == 0:
        raise ValueError(f"knob {name} acts on the flows a sender agent drives, and this run has none: "
                         "give agent_flows >= 1 (the first long flows)")
    field, lo, hi = _FLOW_KNOBS[name]
    tb = state.flows
    col = tcp.column(tb, field)
    g = jnp.broadcast_to(jnp.asarray(gain, jnp.float32).reshape(-1), (A,))
    old = col[:A]
    new = jnp.where(g == 1.0, old, jnp.clip(old * g, lo, hi))
    return state.replace(flows=tcp.with_column(tb, field, col.at[:A].set(new)))


def apply_knobs(state: SimState, knobs: dict) -> SimState:
    """The state with the agent's knobs set (from the next tick on)."""
    for name, value in knobs.items():
        if name in FLOW_KNOBS:
            state = _scale_flows(state, name, value)
            continue
        *outer, field = KNOBS[name].split(".")
        subs = [state]
        for f in outer:
            subs.append(getattr(subs[-1], f))
        old = getattr(subs[-1], field)
        v = jnp.asarray(value, old.dtype)
        v = v.reshape(old.shape) if v.size == old.size else jnp.broadcast_to(v, old.shape)  # one value: every class
        new = subs[-1].replace(**{field: v})
        for sub, f in zip(reversed(subs[:-1]), reversed(outer)):
            new = sub.replace(**{f: new})
        state = new
    return state


def flow_base_rtt_s(sender, params: SimParams):
    """The empty-path RTT of flows of `sender` ([] or [F]): the run's `base_rtt_s`, or with
    several flow groups their group's."""
    return params.of_sender(params.base_rtt_s, params.group_base_rtt_s, sender)


def flow_access_offset_s(sender, params: SimParams):
    """The sender -> switch time (the senders' clock shift) of flows of `sender`."""
    return params.of_sender(params.access_offset_s, params.group_access_offset_s, sender)


def init(key, params: SimParams) -> SimState:
    P, F, S = params.num_classes, params.num_flow_slots, params.num_senders
    k = params.pkts_per_tick
    k_seed, k_arr, k_long = jax.random.split(key, 3)
    tick_s = params.tick_s
    rate = traffic.arrival_rate_per_s(params)
    # K long-lived flows in slots 0..K-1, one per sender in turn.
    slots = jnp.arange(F, dtype=jnp.int32)
    start = (jax.random.uniform(k_long, (F,)) * params.long_flow_start_spread_s
             + params.of_sender(params.long_flow_start_s, params.group_long_flow_start_s, slots % S))
    rtt = flow_base_rtt_s(slots % S, params)
    hs = rtt + flow_access_offset_s(slots % S, params)
    flows = tcp.start_flow(
        tcp.init_flows(F), slots < params.long_flows, sender=slots % S, cls=params.num_classes - 1,
        size_pkts=tcp.BIG_PKTS, size_bytes=jnp.inf, start_s=start,
        data_tick=jnp.ceil((start + hs) / tick_s).astype(jnp.int32), handshake_rtt_s=rtt,
        params=params)
    m = mx.init_metrics(P, params.queue_capacity_pkts, params.completion_log_size)
    m = m.replace(flows_started=jnp.asarray(params.long_flows, jnp.int32))
    seed = jax.random.bits(k_seed, (), jnp.uint32)
    return SimState(
        tick=jnp.zeros((), jnp.int32),
        seed=seed,
        flows=tcp.pack(flows, tcp.widths(params)),
        delivered=jnp.zeros((F,), jnp.int32),
        done_sink=jnp.zeros((F,), bool),
        queue=qm.init_queue(P, params.queue_capacity_pkts),
        wire=jnp.zeros((params.delay_line_ticks, k, WIRE_FIELDS), jnp.int32),
        next_arrival_s=traffic.next_gap_s(k_arr, rate).astype(jnp.float32),
        access_credit=jnp.zeros((S,), jnp.float32),
        rr_next=jnp.zeros((), jnp.int32),
        rl_alpha=jnp.ones((P,), jnp.float32),
        rl_size_pkts=jnp.broadcast_to(params.class_cap_pkts, (P,)).astype(jnp.float32),  # drop-tail at the cap
        drain_norm=jnp.ones((P,), jnp.float32),
        drain_window=jnp.zeros((P,), jnp.int32),
        drain_window_start=jnp.zeros((), jnp.int32),
        thresholds=jnp.zeros((P,), jnp.float32),
        aqm=disciplines.init(params),
        metrics=m,
        interval=mx.init_interval(P, params.interval_log_size, params.agent_flows),
        flowq=flowqueue.init(params),
        link_credit=jnp.zeros((), jnp.float32),
        incast=incast.init(seed, params),
    )


def _discipline(params: SimParams) -> disciplines.Chosen:
    """The run's queueing discipline (the registry's, named by its buffer policy): its id and
    the ids its batch's record allows (`buffer.chosen_discipline`; only those are compiled)."""
    return buffer.chosen_discipline(params)


def _flag(params: SimParams, name: str):
    """The run's discipline's flag `name` (`disciplines.flag`): Python False when no
    discipline these params can run has it (the tick then leaves that code out)."""
    return disciplines.flag(params, _discipline(params), name)


def _where(on, a, b):
    """a where `on` (a flag of `_flag`), else b (pytrees)."""
    if on is False:
        return b
    return jax.tree.map(lambda x, y: jnp.where(on, x, y), a, b)


def service_pkts(clk: "Clock", params: SimParams):
    """The packets the bottleneck can send in this tick (its packet slots): the one place
    the tick reads the link's service rate for its departures.  `pkts_per_tick`, or under a
    capacity schedule the whole packets of the link's departure credit (`clock`,
    `capacity.serve`), at most `pkts_per_tick`."""
    return clk.service_pkts if params.has_capacity_schedule else params.pkts_per_tick


def _rotated_exclusive_cumsum(x, offset):
    """Exclusive prefix sum of x [E, ...] taken in the order offset, offset+1, ... (cyclic)."""
    rolled = jnp.roll(x, -offset, axis=0)
    excl = jnp.cumsum(rolled, axis=0) - rolled
    return jnp.roll(excl, offset, axis=0)


def _select_events(table, rec_flows, rec_count, new_slot, t, num_events, sender_ok, pace_due=None):
    """Pick the flows that need work this tick: the flows named by this tick's ACK
    records and the new flow (they always have a place), then flows whose timer is
    due or whose window, pacer (`pace_due` [F], where some flow paces) and sender's
    access link let them send, taken from a starting slot that rotates every tick so that
    none waits for ever.  Returns ([E] slot ids, F marking an empty entry; number of such
    flows deferred to a later tick)."""
    F = table.ints.shape[1]
    k = rec_flows.shape[0]
    col = lambda n: tcp.column(table, n)
    active = col("active")
    started = t >= col("data_tick")
    unsettled = (col("outstanding") + col("ghost") + col("retx_out") + col("lost_q") + col("retx_dropped"))
    timer = (unsettled > 0) & (t >= col("rto_deadline"))
    window = jnp.floor(col("cwnd")).astype(jnp.int32) > col("outstanding")
    data = (col("lost_q") > 0) | (col("gbn_left") > 0) | (col("next_new") < col("size_pkts"))
    can_send = window & data & sender_ok[col("sender")]
    if pace_due is not None:
        can_send = can_send & pace_due
    has = rec_count > 0
    earlier_same = (rec_flows[None, :] == rec_flows[:, None]) & has[None, :] & (jnp.arange(k)[None, :] < jnp.arange(k)[:, None])
    rec = jnp.where(has & ~jnp.any(earlier_same, axis=1), rec_flows, F)  # [k], duplicates -> F
    must = jnp.zeros((F + 1,), bool).at[rec].set(True)[:F] | (jnp.arange(F) == new_slot)
    other = active & started & (timer | can_send) & ~must
    start = t % F
    order = (jnp.arange(F) - start) % F  # position of each slot in this tick's scan
    picks = []
    for _ in range(num_events - k - 1):
        i = jnp.argmin(jnp.where(other, order, F)).astype(jnp.int32)
        picks.append(jnp.where(other[i], i, F))
        other = other & (jnp.arange(F) != i)
    idx = jnp.concatenate([rec, jnp.asarray(new_slot, jnp.int32)[None]] + ([jnp.stack(picks)] if picks else []))
    return idx, jnp.sum(other, dtype=jnp.int32)


def _compact(records, k):
    """Keep the (at most k) non-empty records of [n, WIRE_FIELDS], in order, in a [k, WIRE_FIELDS] array."""
    has = records[:, qm.COUNT] > 0
    pos = jnp.where(has, jnp.cumsum(has) - 1, k)
    return jnp.zeros((k, WIRE_FIELDS), jnp.int32).at[pos].set(records, mode="drop")


def _deliver(table, delivered, done_sink, rows, sink_tick, m, iv, params):
    """Packets of `rows` [k, WIRE_FIELDS] (departed in sink_tick) reach the sink: count them
    per flow, and log each flow whose last packet arrived.  Spurious retransmissions are
    copies of packets already delivered (the receiver drops them): they count as arrivals,
    not as data.  Returns (..., packets arrived, of which spurious, distinct payload bytes)."""
    k = rows.shape[0]
    F = delivered.shape[0]
    flow, cnt, spur = rows[:, qm.FLOW], rows[:, qm.COUNT], rows[:, qm.NSPUR]
    real = cnt - spur
    has = real > 0  # a record of spurious copies alone (its flow may have ended) decides nothing
    delivered = delivered.at[jnp.where(has, flow, F)].add(real, mode="drop")
    # one decision per flow: the last record of each flow in this batch
    later_same = (flow[None, :] == flow[:, None]) & has[None, :] & (jnp.arange(k)[None, :] > jnp.arange(k)[:, None])
    last = has & ~jnp.any(later_same, axis=1)
    g = jnp.minimum(flow, F - 1)
    col = lambda name: tcp.column(table, name)[g]
    size_b = col("size_bytes")
    done = last & col("active") & ~done_sink[g] & (delivered[g] >= col("size_pkts"))
    done_sink = done_sink.at[jnp.where(done, flow, F)].set(True, mode="drop")
    arrive_s = (sink_tick + 1).astype(jnp.float32) * params.tick_s + params.bottleneck_delay_s
    fct = arrive_s - col("start_s")
    ideal = flow_base_rtt_s(col("sender"), params) + size_b * 8.0 / params.bottleneck_rate_bps
    log_rec = jnp.stack([size_b, col("cls").astype(jnp.float32), fct, fct / ideal, col("start_s")], axis=-1)
    m, iv = mx.log_completions(m, iv, done, log_rec)
    n, n_spur = jnp.sum(cnt), jnp.sum(spur)
    # payload bytes: whole segments, less the unused part of each finished flow's last one
    short = jnp.sum(jnp.where(done, col("size_pkts").astype(jnp.float32) * params.mss_bytes - size_b, 0.0))
    return delivered, done_sink, m, iv, n, n_spur, (n - n_spur).astype(jnp.float32) * params.mss_bytes - short


def _aggregate(records, idx):
    """One-hot [n, E] matching records (COUNT > 0) to the event flows idx [E]."""
    return (records[:, qm.FLOW][:, None] == idx[None, :]) & (records[:, qm.COUNT][:, None] > 0)


class Clock(NamedTuple):
    """This tick's time, computed once and shared by its phases.  `params.tick_s` is an
    expression of the params, not a stored value: XLA folds float arithmetic built on
    one shared node differently from arithmetic built on separate copies (the access
    links' credit per tick comes out 9.999999 instead of 10 packets, say), so taking it
    once per tick keeps the results fixed whatever the phases compute from it."""
    t: jnp.ndarray  # [] int32 tick index
    tick_s: jnp.ndarray  # [] tick length
    now_s: jnp.ndarray  # [] time at the start of the tick
    # under a capacity schedule (else pkts_per_tick and the state's credit, untouched):
    service_pkts: object = None  # [] int32 the link's packet slots this tick (`service_pkts`)
    link_credit: object = None  # [] float32 the departure credit it carries into the next tick
    # [] float32 the data packets the link could send in this tick: the schedule's integral of
    # the rate over the tick (`capacity.offered_pkts`), else pkts_per_tick
    offered_pkts: object = None


def clock(state: SimState, params: SimParams) -> Clock:
    """The clock of the tick `state` is at, and under a capacity schedule the link's packet
    slots in it: the credit carried in plus what the schedule offers over the tick
    (`capacity.serve`)."""
    tick_s = params.tick_s
    if not params.has_capacity_schedule:
        return Clock(t=state.tick, tick_s=tick_s, now_s=state.tick.astype(jnp.float32) * tick_s,
                     service_pkts=params.pkts_per_tick, link_credit=state.link_credit,
                     offered_pkts=jnp.asarray(params.pkts_per_tick, jnp.float32))
    slots, credit, offered = capacity.serve(state.link_credit, state.tick, tick_s, params)
    return Clock(t=state.tick, tick_s=tick_s, now_s=state.tick.astype(jnp.float32) * tick_s, service_pkts=slots,
                 link_credit=credit, offered_pkts=offered)


class Sink(NamedTuple):
    """What reached the sink this tick (deliver_phase)."""
    delivered: jnp.ndarray  # [F] packets of each flow received by the sink
    done_sink: jnp.ndarray  # [F] bool: the flow's last packet arrived
    metrics: mx.Metrics  # with this tick's completions logged
    interval: mx.Interval  # likewise
    arrived_pkts: jnp.ndarray  # [] packets that reached the sink
    spurious_pkts: jnp.ndarray  # [] of which spurious copies
    payload_bytes: jnp.ndarray  # [] distinct payload bytes


def _wire_rows(state: SimState, t, params: SimParams):
    """The delay line's rows tick t reads, in one gather: [1 + G, k, WIRE_FIELDS], the row
    reaching the sink (from `sink_delay_ticks` ago), then the rows whose ACKs reach their
    senders (from `ack_delay_ticks` ago; with G flow groups, group g's from its own
    `group_ack_delay_ticks` ago).  One read, so that XLA orders it before the tick's write of
    the delay line (`depart_phase`), which the ACKs feed: with the sink's read apart, which
    nothing written this tick depends on, XLA copied the whole delay line twice a tick."""
    L = params.delay_line_ticks
    ack = params.ack_delay_ticks if params.flow_groups == 1 else params.group_ack_delay_ticks
    ago = jnp.concatenate([jnp.reshape(params.sink_delay_ticks, (1,)), jnp.reshape(ack, (-1,))])
    return state.wire[(t - ago) % L]


def deliver_phase(state: SimState, clk: Clock, params: SimParams, wire_rows) -> Sink:
    """Phase 1: the packets that left the bottleneck `sink_delay_ticks` ago reach the
    sink; each flow's delivered count goes up and a flow whose last packet arrived gets
    its FCT logged (`_deliver`).  `wire_rows`: the tick's read of the delay line (`_wire_rows`)."""
    sink_tick = clk.t - params.sink_delay_ticks
    rows = jnp.where(sink_tick >= 0, wire_rows[0], 0)  # [k, WIRE_FIELDS]
    return Sink(*_deliver(state.flows, state.delivered, state.done_sink, rows, sink_tick,
                          state.metrics, state.interval, params))


class Events(NamedTuple):
    """The flows that get work this tick, with their ACKs applied (ack_phase)."""
    slots: jnp.ndarray  # [E] flow-table slot of each event flow, F marking an empty entry
    valid: jnp.ndarray  # [E] bool: the entry names a flow slot
    flows: tcp.FlowState  # [E] the event flows' rows after their ACKs
    deferred_flows: jnp.ndarray  # [] flows with work that wait for a later tick
    arrival_due: jnp.ndarray  # [] bool: a flow arrival falls in this tick
    new_slot: jnp.ndarray  # [] the free slot a new flow takes
    slot_free: jnp.ndarray  # [] bool: new_slot is free (some slot is)
    credit_pkts: jnp.ndarray  # [S] each access link's credit, this tick's share earned
    budget_pkts: jnp.ndarray  # [S] whole packets each access link may send now
    # with incast traffic: its state with a query falling in this tick taken, and whether one
    # of its responses is due (what arrival_phase starts); None without it
    incast: incast.IncastState | None = None
    response_due: jnp.ndarray | None = None  # [] bool


def _arrival_due(state: SimState, clk: Clock, params: SimParams):
    """Whether a flow arrival falls in this tick (and before `arrival_stop_s`), and the
    flow slot it would take: (due [] bool, slot [], free [] bool, the incast state with a
    query falling in this tick taken (`incast.take_query`), response due [] bool); the last
    two None without incast, and a due response makes the tick's arrival due."""
    due = (state.next_arrival_s <= clk.now_s + clk.tick_s) & (state.next_arrival_s < params.arrival_stop_s)
    inc = resp = None
    if incast.enabled(params):
        inc, resp = incast.take_query(state.incast, state.seed, clk.now_s, clk.tick_s, params)
        due = due | resp
    slot, free = traffic.free_slot(tcp.column(state.flows, "active"))
    return due, slot, free, inc, resp


def _earn_credit(access_credit_pkts, clk: Clock, params: SimParams):
    """Each access link earns its rate in packet credit per tick; unspent credit carries
    over up to one tick's worth rounded up (at least one packet).  Returns (credit [S],
    whole packets each link may send now [S])."""
    per_tick_pkts = params.access_rate_bps * clk.tick_s / params.data_pkt_bits
    credit = jnp.minimum(access_credit_pkts + per_tick_pkts, jnp.maximum(jnp.ceil(per_tick_pkts), 1.0))
    return credit, jnp.floor(credit).astype(jnp.int32)


def _apply_acks(fl: tcp.FlowState, ack_rows, slots, clk: Clock, params: SimParams) -> tcp.FlowState:
    """The ACK records `ack_rows` [k, WIRE_FIELDS] reach the event flows `slots` [E]
    (tcp.on_acks); a flow whose every packet is ACKed ends.  The ACK of a spurious
    retransmission acknowledges nothing: it carries no new data, no SACK and no RTT
    sample; it only makes the receiver ACK at once."""
    t, tick_s = clk.t, clk.tick_s
    oh = _aggregate(ack_rows, slots)  # [k, E]
    cnt, nretx, nspur, nce = (ack_rows[:, qm.COUNT], ack_rows[:, qm.NRETX], ack_rows[:, qm.NSPUR],
                              ack_rows[:, qm.NCE])
    real = cnt - nspur
    new_e = real - nretx
    tx_last = ack_rows[:, qm.TX0] + jnp.where(new_e > 0, cnt, nretx) - 1  # the last one that is not spurious
    pick = lambda v: jnp.sum(jnp.where(oh, v[None, :], 0), axis=1)  # per record, its flow's value
    undet_tx_e = pick(fl.undet_tx)
    holes_e = pick((fl.undet > 0).astype(jnp.int32)) > 0
    in_rec_e = pick((fl.state == tcp.RECOVERY).astype(jnp.int32)) > 0
    dup_e = jnp.where(in_rec_e, new_e, jnp.where(holes_e, jnp.clip(tx_last - undet_tx_e, 0, new_e), 0))
    agg = lambda v: jnp.sum(jnp.where(oh, v[:, None], 0), axis=0)  # per event flow, summed
    acked = agg(real)
    oh_real = oh & (real > 0)[:, None]
    max_tx = jnp.max(jnp.where(oh_real, tx_last[:, None], -1), axis=0)
    last_enq = jnp.max(jnp.where(oh_real, ack_rows[:, qm.ENQ][:, None], -1), axis=0)
    rtt_s = (t - last_enq).astype(jnp.float32) * tick_s
    echo = None
    if tcp.chosen(params, "rtt_clock", "ns-3.37"):  # some run asks for it (static)
        ts_rtt_s, echo = _timestamp_rtt(fl, ack_rows[:, qm.ENQ], real, oh_real, last_enq, clk, params)
        rtt_s = jnp.where(params.rtt_clock_id == tcp.RTT_CLOCK_NS3, ts_rtt_s, rtt_s)
    ce_max_tx = jnp.max(jnp.where(oh & (nce > 0)[:, None], tx_last[:, None], -1), axis=0)
    fl = tcp.on_acks(fl, t, acked, agg(nretx), agg(dup_e), max_tx, rtt_s, params, tick_s, spur_acked=agg(nspur),
                     ce_acked=agg(nce), ce_max_tx=ce_max_tx)
    if echo is not None:
        fl = fl.replace(echo_enq=echo)
    finished = fl.active & (fl.acked >= fl.size_pkts)
    return fl.replace(active=fl.active & ~finished)


def _timestamp_rtt(fl: tcp.FlowState, enq, real, oh_real, last_enq, clk: Clock, params: SimParams):
    """RTT samples as ns-3.37 takes them through the timestamp option (`rtt_clock` "ns-3.37"):
    the sender's clock reads whole milliseconds (TcpOptionTS), so a sample is the difference
    of two readings, and 1 us where they are equal; the receiver echoes the timestamp of the
    first segment its ACK covers (RFC 7323: with delayed ACKs of 2, the segment before the
    last one, whose ACK it held).  Of this tick's ACKs the last one gives the sample; where
    the last run ACKed holds a single packet, the segment before it is the previous run's
    (this tick's, else the flow's `echo_enq`, the enqueue tick of the last packet ACKed
    before).  Enqueue ticks stand for sending times: the path before the queue is the same
    for every packet of a flow.  (Which of a pair is first is not tracked: the echo is
    always the packet before the last, where ns-3's alternates between it and the last.)
    `enq`, `real` [k]: each record's enqueue tick and packets; `oh_real` [k, E] the records
    of each event flow; `last_enq` [E] (-1: none ACKed).  Returns (rtt_s [E], echo_enq [E])."""
    e = enq[:, None]
    n_last = jnp.sum(jnp.where(oh_real & (e == last_enq[None, :]), real[:, None], 0), axis=0)
    before = jnp.max(jnp.where(oh_real & (e < last_enq[None, :]), e, -1), axis=0)
    held = jnp.where(before >= 0, before, fl.echo_enq)
    ref = jnp.where((params.delayed_ack == 2) & (n_last < 2) & (held >= 0), held, last_enq)
    sent_s = clk.now_s - (clk.t - ref).astype(jnp.float32) * clk.tick_s
    ms = jnp.floor(clk.now_s * 1e3) - jnp.floor(sent_s * 1e3)
    rtt_s = jnp.where(ms > 0, ms * 1e-3, 1e-6)
    return rtt_s, jnp.where(last_enq >= 0, last_enq, fl.echo_enq)


def _ack_rows(state: SimState, t, params: SimParams, wire_rows):
    """The departure records whose ACKs reach their senders at tick t (from `wire_rows`,
    `_wire_rows`' read): [k, WIRE_FIELDS] from `ack_delay_ticks` ago; with G flow groups
    [G * k], group g's records from its own `group_ack_delay_ticks` ago (the others of that
    departure tick emptied)."""
    if params.flow_groups == 1:
        rows = wire_rows[1]
        return jnp.where(t >= params.ack_delay_ticks, rows, 0)
    G = params.flow_groups
    d = params.group_ack_delay_ticks  # [G]
    rows = wire_rows[1:]  # [G, k, WIRE_FIELDS]
    F = params.num_flow_slots
    sender = tcp.column(state.flows, "sender")[jnp.minimum(rows[..., qm.FLOW], F - 1)]  # [G, k]
    mine = (t >= d)[:, None] & (sender % G == jnp.arange(G)[:, None])
    return jnp.where(mine[..., None], rows, 0).reshape(G * rows.shape[1], rows.shape[2])


def ack_phase(state: SimState, clk: Clock, params: SimParams, wire_rows) -> Events:
    """Phase 2: the event flows are chosen (`_select_events`: the flows named by the ACK
    records due now, the slot a flow arriving now takes, and a few flows with a due timer
    or an open window and access-link credit), their rows gathered, and the ACKs of the
    packets that left the bottleneck `ack_delay_ticks` ago reach their senders (read from
    `wire_rows`, the tick's read of the delay line: `_wire_rows`)."""
    F = params.num_flow_slots
    t = clk.t
    ack_rows = _ack_rows(state, t, params, wire_rows)  # [k * flow_groups, WIRE_FIELDS]
    due, slot, free, inc, resp = _arrival_due(state, clk, params)
    credit, budget = _earn_credit(state.access_credit, clk, params)
    pace_due = None
    if tcp.pacing.enabled(params):
        col = lambda n: tcp.column(state.flows, n)
        pace_due = tcp.pacing.due(col("pace_wait_s"), col("pace_tick"), col("next_new"), col("sender"), t, params,
                                  clk.tick_s)
    slots, deferred = _select_events(state.flows, ack_rows[:, qm.FLOW], ack_rows[:, qm.COUNT],
                                     jnp.where(due & free, slot, F), t, params.event_slots, budget >= 1, pace_due)
    valid = slots < F
    fl = tcp.unpack(state.flows.rows(jnp.minimum(slots, F - 1)))
    fl = fl.replace(active=fl.active & valid)
    fl = _apply_acks(fl, ack_rows, slots, clk, params)
    return Events(slots=slots, valid=valid, flows=fl, deferred_flows=deferred, arrival_due=due, new_slot=slot,
                  slot_free=free, credit_pkts=credit, budget_pkts=budget, incast=inc, response_due=resp)


LONG_SYN_QUEUE = 1  # params.long_flow_syn_id of "queue"


def _long_flow_syns(state: SimState, clk: Clock, params: SimParams) -> SimState:
    """`long_flow_syn` "queue": a long-lived flow's SYN leaves at its start time and waits in
    its class queue as the tick finds it, as a web-search flow's does (`arrival_phase`): the
    flow is started afresh in its slot at the first tick at or after its start, with the
    handshake's RTT (base RTT + that queue's delay) as its srtt and its first data one
    handshake later.  (`init` planned it on the empty path; the flow has sent nothing yet.)"""
    fl = tcp.unpack(state.flows)
    F = params.num_flow_slots
    start_tick = jnp.ceil(fl.start_s / clk.tick_s).astype(jnp.int32)
    now = ((jnp.arange(F) < params.long_flows) & fl.active & (start_tick == clk.t)
           & (params.long_flow_syn_id == LONG_SYN_QUEUE))
    qdelay_s = state.queue.pkts[fl.cls].astype(jnp.float32) * params.data_pkt_bits / params.bottleneck_rate_bps
    qdelay_s = _where(_flag(params, "syn_skips_queue"), 0.0, qdelay_s)  # (FQ-CoDel: a new queue, served first)
    hs_rtt_s = flow_base_rtt_s(fl.sender, params) + qdelay_s
    data_tick = jnp.ceil((fl.start_s + hs_rtt_s + flow_access_offset_s(fl.sender, params)) / clk.tick_s)
    fl = tcp.start_flow(fl, now, sender=fl.sender, cls=fl.cls, size_pkts=fl.size_pkts, size_bytes=fl.size_bytes,
                        start_s=fl.start_s, data_tick=data_tick.astype(jnp.int32), handshake_rtt_s=hs_rtt_s,
                        params=params)
    return state.replace(flows=tcp.pack(fl, tcp.widths(params)))


def timeout_phase(fl: tcp.FlowState, clk: Clock, params: SimParams):
    """Phase 3: the event flows' retransmission timers that are due fire
    (tcp.on_timeouts).  Returns (flows [E], fired [E] bool)."""
    return tcp.on_timeouts(fl, clk.t, params, clk.tick_s)


class Arrival(NamedTuple):
    """This tick's flow arrival and the buffer it finds (arrival_phase)."""
    flows: tcp.FlowState  # [E] the event flows, a new flow started in its entry
    delivered: jnp.ndarray  # [F] sink counts, zero in a reused slot
    done_sink: jnp.ndarray  # [F] bool, cleared in a reused slot
    next_arrival_s: jnp.ndarray  # [] time of the next flow arrival
    is_new: jnp.ndarray  # [E] bool: the entry is the flow that started
    started: jnp.ndarray  # [] bool: a flow started
    refused: jnp.ndarray  # [] bool: an arrival found no free slot
    cls: jnp.ndarray  # [] class of the arriving flow
    thresholds_pkts: jnp.ndarray  # [P] the policy's admission thresholds this tick
    occupancy_pkts: jnp.ndarray  # [] buffer occupancy at the start of the tick
    incast: incast.IncastState | None = None  # the query-response state after this tick's start


def _buffer_thresholds(state: SimState, params: SimParams):
    """The buffer as this tick's arrivals find it: (the policy's thresholds [P],
    occupancy [])."""
    q = state.queue
    occ = jnp.sum(q.pkts)
    view = buffer.BufferView(queue_pkts=q.pkts, occupancy_pkts=occ, drain_norm=state.drain_norm,
                             rl_alpha=state.rl_alpha, rl_size_pkts=state.rl_size_pkts)
    return buffer.thresholds(view, params), occ


def arrival_phase(state: SimState, clk: Clock, sink: Sink, ev: Events, fl: tcp.FlowState,
                  params: SimParams) -> Arrival:
    """Phase 4: at most one new flow starts.  The buffer policy sets this tick's class
    thresholds from the tick-start queues (the new flow's SYN and this tick's packets are
    admitted against them).  An arrival due now takes the free slot reserved among the
    event flows; its handshake delays its first data by the base RTT plus its class
    queue's delay.  An arrival that finds no free slot is refused.  Sizes, senders and
    gaps are drawn from the arrival count, so every tick size sees the same flows.  With
    incast traffic a query's due response starts first (`incast`), timed from its query,
    and a web-search arrival due too waits for a later tick."""
    P, F = params.num_classes, params.num_flow_slots
    m = state.metrics
    drawn = m.flows_started + m.flows_refused  # arrivals so far (incast responses are not drawn here)
    if incast.enabled(params):
        drawn = drawn - state.incast.responses - state.incast.refused
    u = traffic.hash_uniform(state.seed, drawn, 3)  # gap, size, sender
    thr, occ = _buffer_thresholds(state, params)
    is_new = ev.valid & (ev.slots == ev.new_slot) & ev.arrival_due & ev.slot_free
    start = jnp.any(is_new)
    size_b, sender, gap_s = traffic.arrival_draw(u, traffic.arrival_rate_per_s(params), params)
    t_arr_s = state.next_arrival_s
    inc, resp = ev.incast, ev.response_due
    if incast.enabled(params):  # a due response goes first, timed from its query
        size_b = jnp.where(resp, params.incast_response_bytes, size_b)
        sender = jnp.where(resp, inc.sender, sender)
        t_arr_s = jnp.where(resp, inc.query_s, t_arr_s)
    cls = jnp.minimum(traffic.flow_class(size_b, params.class_threshold_bytes), P - 1)
    qdelay_s = state.queue.pkts[cls].astype(jnp.float32) * params.data_pkt_bits / params.bottleneck_rate_bps
    qdelay_s = _where(_flag(params, "syn_skips_queue"), 0.0, qdelay_s)  # (FQ-CoDel: a new queue, served first)
    hs_rtt_s = flow_base_rtt_s(sender, params) + qdelay_s
    fl = tcp.start_flow(
        fl, is_new, sender=sender, cls=cls, size_pkts=jnp.ceil(size_b / params.mss_bytes).astype(jnp.int32),
        size_bytes=size_b, start_s=t_arr_s,
        data_tick=jnp.ceil((t_arr_s + hs_rtt_s + flow_access_offset_s(sender, params)) / clk.tick_s).astype(jnp.int32),
        handshake_rtt_s=hs_rtt_s, params=params)
    reuse = (jnp.arange(F) == ev.new_slot) & start
    advance = ev.arrival_due & (start | ~ev.slot_free)
    if incast.enabled(params):  # (a response's start leaves the web arrival due)
        advance = advance & ~resp
        inc = incast.after_start(inc, resp, start, params)
    return Arrival(flows=fl, delivered=jnp.where(reuse, 0, sink.delivered), done_sink=sink.done_sink & ~reuse,
                   next_arrival_s=jnp.where(advance, t_arr_s + gap_s, state.next_arrival_s), is_new=is_new,
                   started=start, refused=ev.arrival_due & ~ev.slot_free, cls=cls, thresholds_pkts=thr,
                   occupancy_pkts=occ, incast=inc)


class Transmit(NamedTuple):
    """What the event flows send this tick (transmit_phase), [E] each."""
    sent_pkts: jnp.ndarray  # all packets sent
    retx_pkts: jnp.ndarray  # of which retransmissions of lost packets
    spur_pkts: jnp.ndarray  # of which go-back-N resends of packets in flight
    new_pkts: jnp.ndarray  # of which new data
    credit_pkts: jnp.ndarray  # [S] access-link credit left


def transmit_phase(fl: tcp.FlowState, ev: Events, clk: Clock, params: SimParams) -> Transmit:
    """Phase 5: each event flow wants retransmissions first, then go-back-N resends, then
    new data, as far as its window allows (tcp.wanted); each access link serves its event
    flows in turn with its whole packets of credit."""
    S = params.num_senders
    n_retx, n_spur, n_new = tcp.wanted(fl, clk.t, params, clk.tick_s)
    want = n_retx + n_spur + n_new
    by_sender = (fl.sender[:, None] == jnp.arange(S)[None, :]) & fl.active[:, None]  # [E, S]
    ahead = jnp.sum(jnp.where(by_sender, jnp.cumsum(jnp.where(by_sender, want[:, None], 0), axis=0)
                              - want[:, None], 0), axis=1)  # what this sender's earlier event flows want
    send = jnp.clip(ev.budget_pkts[fl.sender] - ahead, 0, want)
    n_retx = jnp.minimum(n_retx, send)
    n_spur = jnp.minimum(n_spur, send - n_retx)
    n_new = send - n_retx - n_spur
    credit_pkts = ev.credit_pkts - jnp.sum(jnp.where(by_sender, send[:, None], 0), axis=0)
    return Transmit(sent_pkts=send, retx_pkts=n_retx, spur_pkts=n_spur, new_pkts=n_new, credit_pkts=credit_pkts)


class Admission(NamedTuple):
    """The switch after this tick's arrivals (admit_phase)."""
    flows: tcp.FlowTable  # [F] the flow table, the event flows written back
    queue: qm.QueueState  # the class FIFOs, admitted runs enqueued
    arrivals_pkts: jnp.ndarray  # [P] data packets that arrived per class
    drops_pkts: jnp.ndarray  # [P] of which dropped
    retx_admitted_pkts: jnp.ndarray  # [E] retransmissions admitted
    spur_admitted_pkts: jnp.ndarray  # [E] go-back-N resends admitted
    syn_lost: jnp.ndarray  # [] bool: the new flow's SYN was dropped
    marks_pkts: jnp.ndarray  # [P] admitted packets CE-marked by the AQM
    aqm: disciplines.States  # after the discipline's enqueue decisions (and its `enqueue_flows`)
    flowq: flowqueue.FlowQueues  # the per-flow queues, admitted runs enqueued (FQ-CoDel)


def _aqm_at_enqueue(state: SimState, clk: Clock, fl: tcp.FlowState, tx: Transmit, by_cls, arr_c, before,
                    params: SimParams):
    """The discipline's enqueue decisions (`Discipline.on_enqueue`) on the event flows'
    packets, placed at their positions in their class's arrival order (`before` [E]: the
    packets of the class ahead of each flow's).  With ECN every data packet is ECT
    (ns-3.37's classic ECN marks retransmissions ECT too) and a decision marks it where
    the discipline marks.
    Returns (state, early drops [E], marks [E], the chance a SYN arriving now is dropped
    [P])."""
    u = traffic.hash_uniform(state.seed ^ jnp.uint32(0x3C6EF372), clk.t, params.num_classes)
    s, hits = disciplines.on_enqueue(state.aqm, _discipline(params), arr_c, state.queue.pkts, u, clk.now_s, params)
    h = disciplines.Hits(*(x[fl.cls] for x in hits))  # [E]: each flow's class's decisions
    end = before + tx.sent_pkts
    decided = disciplines.hits_below(end, h) - disciplines.hits_below(before, h)
    marks = jnp.where(params.ecn & h.may_mark, decided, 0)
    drops = jnp.where(h.forced, tx.sent_pkts, decided - marks)
    # SYNs of a variant that turns ECN on itself (DCTCP) are ECT too: marked, not dropped,
    # short of RED's forced region
    syn_ect = tcp.ect_syns(params) & hits.may_mark & ~hits.forced
    return s, drops, jnp.where(h.forced, 0, marks), jnp.where(syn_ect, 0.0, hits.syn_p)


def _flow_capped(state: SimState, slots, adm, params: SimParams):
    """adm [E] cut to the room each event flow's queue has under the discipline's per-flow
    cap (`Discipline.flow_room`); entries naming the same slot (a slot that ended and
    restarted within the tick) take its room in entry order."""
    n = state.flowq.pkts.shape[0]
    e = adm.shape[0]
    room = disciplines.flow_room(state.aqm, _discipline(params), state.flowq.pkts, params)
    r = jnp.where(slots < n, room[jnp.minimum(slots, n - 1)], 0)
    same = (slots[None, :] == slots[:, None]) & (jnp.arange(e)[None, :] < jnp.arange(e)[:, None])
    ahead = jnp.sum(jnp.where(same, adm[None, :], 0), axis=1)
    return jnp.clip(r - ahead, 0, adm)


def _enqueue_arrivals(state: SimState, clk: Clock, ev: Events, arr: Arrival, tx: Transmit, params: SimParams):
    """The event flows' packets reach the switch, this tick's senders in a random cyclic
    order; the discipline drops or marks some (`_aqm_at_enqueue`), each class admits the
    rest up to its threshold within the shared buffer, the tail of each class's burst is
    dropped, and every flow's admitted packets join its class FIFO as one run (a flow's
    dropped packets are taken as its burst's last), or its flow's queue where the
    discipline owns departure.  Returns (queue, arrivals [P], admitted [P], admitted per
    flow [E], of which retransmissions [E], of which go-back-N resends [E], marked packets
    admitted [P], discipline states, SYN drop chance [P], per-flow queues)."""
    P, F, E = params.num_classes, params.num_flow_slots, params.event_slots
    t = clk.t
    q = state.queue
    fl = arr.flows
    u_order = traffic.hash_uniform(state.seed ^ jnp.uint32(0x5BD1E995), t, 1)[0]
    by_cls = fl.cls[:, None] == jnp.arange(P)[None, :]  # [E, P]
    a_ec = jnp.where(by_cls, tx.sent_pkts[:, None], 0)
    arr_c = jnp.sum(a_ec, axis=0)
    offset = jnp.minimum((u_order * E).astype(jnp.int32), E - 1)  # first sender of the cyclic order
    before = jnp.sum(jnp.where(by_cls, _rotated_exclusive_cumsum(a_ec, offset), 0), axis=1)
    aqm_s, aqm_drops, aqm_marks, syn_p = _aqm_at_enqueue(state, clk, fl, tx, by_cls, arr_c, before, params)
    offered = tx.sent_pkts - aqm_drops  # what the AQM let through to the buffer's limits
    o_ec = jnp.where(by_cls, offered[:, None], 0)
    adm_c = buffer.admit(jnp.sum(o_ec, axis=0), q.pkts, arr.thresholds_pkts, params.buffer_pkts - arr.occupancy_pkts)
    before_o = jnp.sum(jnp.where(by_cls, _rotated_exclusive_cumsum(o_ec, offset), 0), axis=1)
    adm = jnp.clip(adm_c[fl.cls] - before_o, 0, offered)
    every = _flag(params, "takes_every_arrival")  # (FQ-CoDel: it drops from the fattest flow at dequeue)
    adm_c = _where(every, jnp.sum(o_ec, axis=0), adm_c)
    adm = _where(every, offered, adm)
    caps = _flag(params, "caps_flows")  # (fq: each flow's queue admits up to its cap, the rest drop at the tail)
    if caps is not False:
        adm_capped = _flow_capped(state, ev.slots, adm, params)
        adm = _where(caps, adm_capped, adm)
        adm_c = _where(caps, jnp.sum(jnp.where(by_cls, adm[:, None], 0), axis=0), adm_c)
    own = _flag(params, "owns_departure")
    has_run = (adm > 0)[:, None] & by_cls
    rank = jnp.sum(jnp.where(by_cls, _rotated_exclusive_cumsum(has_run.astype(jnp.int32), offset), 0), axis=1)
    adm_retx = jnp.minimum(tx.retx_pkts, adm)
    adm_spur = jnp.minimum(tx.spur_pkts, adm - adm_retx)
    nce = jnp.minimum(aqm_marks, adm)
    queue = qm.enqueue(q, jnp.minimum(ev.slots, F - 1), fl.cls, _where(own, 0, adm), adm_retx, fl.tx_next, rank, t,
                       nspur=adm_spur, nce=nce)
    flowq = state.flowq
    if own is not False:  # the runs go to their flows' queues; the class counts hold their totals
        queue = queue.replace(pkts=queue.pkts + jnp.where(own, adm_c, 0))
        adm_f = jnp.where(own, adm, 0)
        flowq = flowqueue.enqueue(flowq, ev.slots, adm_f, adm_retx, fl.tx_next, t, adm_spur, nce)
        aqm_s = disciplines.enqueue_flows(aqm_s, _discipline(params), ev.slots, adm_f, (jnp.arange(E) - offset) % E,
                                          params)
    marks_c = jnp.sum(jnp.where(by_cls, nce[:, None], 0), axis=0)
    return queue, arr_c, adm_c, adm, adm_retx, adm_spur, marks_c, aqm_s, syn_p, flowq


def _syn_lost(state: SimState, clk: Clock, arr: Arrival, arr_c, adm_c, syn_p, params: SimParams):
    """A new flow's SYN arrives among this tick's packets of its class; when it finds
    the class at its threshold it is lost (buffer.syn_lost), and an enqueue AQM drops
    it with its current drop chance syn_p [P] (a SYN is not ECT: never marked)."""
    u_syn = traffic.hash_uniform(state.seed ^ jnp.uint32(0x27D4EB2F), clk.t, 2)
    at_limit = buffer.syn_lost(u_syn[0], arr.cls, arr_c, adm_c, state.queue.pkts, arr.thresholds_pkts,
                               arr.occupancy_pkts, params.buffer_pkts)
    # a discipline that takes every arrival admits it (FQ-CoDel: a new queue's one packet,
    # never the fattest flow's while others queue)
    at_limit = _where(_flag(params, "takes_every_arrival"), False, at_limit)
    return arr.started & (at_limit | (u_syn[1] < syn_p[arr.cls]))


def admit_phase(state: SimState, clk: Clock, ev: Events, arr: Arrival, tx: Transmit, params: SimParams) -> Admission:
    """Phase 6: buffer admission.  The event flows' packets are admitted or dropped and
    enqueued (`_enqueue_arrivals`), the senders book what they sent and what the switch
    took (tcp.on_sent), a new flow whose SYN is lost retries after `syn_timeout_s`
    (ns-3's ConnTimeout), once, and the event flows' rows go back into the flow table."""
    queue, arr_c, adm_c, adm, adm_retx, adm_spur, marks_c, aqm_s, syn_p, flowq = _enqueue_arrivals(
        state, clk, ev, arr, tx, params)
    fl = tcp.on_sent(arr.flows, clk.t, tx.retx_pkts, tx.spur_pkts, tx.new_pkts, adm, params, clk.tick_s)
    syn_lost = _syn_lost(state, clk, arr, arr_c, adm_c, syn_p, params)
    wait_ticks = jnp.ceil(params.syn_timeout_s / clk.tick_s).astype(jnp.int32)
    fl = fl.replace(data_tick=jnp.where(arr.is_new & syn_lost, fl.data_tick + wait_ticks, fl.data_tick))
    return Admission(flows=state.flows.set_rows(ev.slots, tcp.pack(fl)), queue=queue, arrivals_pkts=arr_c,
                     drops_pkts=arr_c - adm_c, retx_admitted_pkts=adm_retx, spur_admitted_pkts=adm_spur,
                     syn_lost=syn_lost, marks_pkts=marks_c, aqm=aqm_s, flowq=flowq)


class Departure(NamedTuple):
    """What left the bottleneck this tick (depart_phase)."""
    queue: qm.QueueState  # the class FIFOs after service
    served_pkts: jnp.ndarray  # [P] packets served per class
    rr_next: jnp.ndarray  # [] next class for round robin
    wire: jnp.ndarray  # [L, k, WIRE_FIELDS] the delay line, this tick's departures written
    flows: tcp.FlowTable  # [F] the flow table, senders of packets dropped at the head told
    drops_pkts: jnp.ndarray  # [P] packets the discipline dropped at dequeue
    retx_drops_pkts: jnp.ndarray  # [] of which retransmissions or go-back-N resends
    marks_pkts: jnp.ndarray  # [P] packets the discipline CE-marked at dequeue
    aqm: disciplines.States
    flowq: flowqueue.FlowQueues  # the per-flow queues after service (FQ-CoDel)


def _aqm_at_dequeue(state: SimState, clk: Clock, adm: Admission, params: SimParams):
    """The discipline's dequeue decision (`Discipline.on_dequeue`, CoDel) on the head
    packet of each class about to be served: it is dropped, or with ECN (every data packet
    ECT) marked.  A dropped packet leaves the FIFO without using the link, and its sender
    books the loss (tcp.on_queue_drop).  Returns (queue, flows, discipline states, dropped
    [P], of which retransmissions [], marked [P], head sojourn [P])."""
    P, F = params.num_classes, params.num_flow_slots
    q = adm.queue
    head = q.runs[jnp.arange(P), q.head]  # [P, RUN_FIELDS]
    sojourn_s = (clk.t - head[:, qm.ENQ]).astype(jnp.float32) * clk.tick_s
    served0, _ = scheduler.serve(q.pkts, service_pkts(clk, params), state.rr_next, params.scheduler_id,
                                 params.pkts_per_tick)
    ect = jnp.broadcast_to(params.ecn, (P,))
    s, act = disciplines.on_dequeue(adm.aqm, _discipline(params), sojourn_s, q.pkts, served0 > 0, ect, clk.now_s,
                                    params)
    is_retx, is_spur = head[:, qm.NRETX] > 0, (head[:, qm.NRETX] == 0) & (head[:, qm.NSPUR] > 0)
    drop = act & ~ect
    q, _ = qm.dequeue(q, drop.astype(jnp.int32), 1)
    slots = jnp.where(drop, head[:, qm.FLOW], F)
    fl = tcp.unpack(adm.flows.rows(jnp.minimum(slots, F - 1)))
    fl = tcp.on_queue_drop(fl, drop, is_retx, is_spur, head[:, qm.TX0])
    flows = adm.flows.set_rows(slots, tcp.pack(fl))
    retx_drops = jnp.sum(drop & (is_retx | is_spur), dtype=jnp.int32)
    return q, flows, s, drop.astype(jnp.int32), retx_drops, (act & ect).astype(jnp.int32), sojourn_s


def depart_phase(state: SimState, clk: Clock, adm: Admission, params: SimParams) -> Departure:
    """Phase 7: the discipline's dequeue decision acts on the head packets
    (`_aqm_at_dequeue`); the scheduler shares the bottleneck's k packet slots
    (`service_pkts`) among the classes (round robin or strict priority); the served packets
    leave the class FIFOs and, compacted to k records, enter the delay line that carries
    them to the sink and their ACKs back to the senders.  The discipline sees the tick's
    end (`Discipline.on_tick_end`: PIE the last packet's sojourn, RED whether the queue
    went idle).  A run whose discipline owns departure takes `_owned_depart` instead."""
    chosen = _discipline(params)
    owners = disciplines.owners(params, chosen)  # (none without per-flow queues)
    for i, d in owners:
        if buffer.used_disciplines(params) == (i,):
            # every run of the batch has this discipline (its record says so): the class
            # FIFOs' path, which the select below would discard, is left out, and with it
            # a select of the whole per-flow queues every tick (O(their capacity) under vmap)
            return _owned_depart(state, clk, adm, d, params)
    P, k = params.num_classes, params.pkts_per_tick
    queue, flows, aqm_s, drops, retx_drops, marks, sojourn_s = _aqm_at_dequeue(state, clk, adm, params)
    served, rr_next = scheduler.serve(queue.pkts, service_pkts(clk, params), state.rr_next, params.scheduler_id, k)
    if P == 1 and k == 1:
        # A barrier between the two dequeues: XLA's CPU compiler (jaxlib 0.10.2 and 0.11.2;
        # not CUDA) fused them wrongly in these shapes in one env or a batch of one, zeroing
        # the CE count of a run split by the link (tests/test_aqm.py; calibration/REPORT.md
        # section 6).  Other shapes compile as before.
        queue = queue.replace(runs=jax.lax.optimization_barrier(queue.runs))
    queue, departed = qm.dequeue(queue, served, k)
    first = departed[:, 0]
    departed = departed.at[:, 0, qm.NCE].set(first[:, qm.NCE] + jnp.minimum(marks, first[:, qm.COUNT]
                                                                             - first[:, qm.NCE]))
    wire = state.wire.at[clk.t % params.delay_line_ticks].set(_compact(departed.reshape(P * k, WIRE_FIELDS), k))
    last = jnp.max(jnp.where(departed[:, :, qm.COUNT] > 0, departed[:, :, qm.ENQ], -1), axis=1)  # [P]
    aqm_s = disciplines.on_tick_end(aqm_s, chosen, (clk.t - last).astype(jnp.float32) * clk.tick_s,
                                    served, queue.pkts, clk.now_s + clk.tick_s, params)
    dep = Departure(queue=queue, served_pkts=served, rr_next=rr_next, wire=wire, flows=flows, drops_pkts=drops,
                    retx_drops_pkts=retx_drops, marks_pkts=marks, aqm=aqm_s, flowq=adm.flowq)
    for i, d in owners:
        dep = _where(chosen.id == i, _owned_depart(state, clk, adm, d, params), dep)
    return dep


def _owned_depart(state: SimState, clk: Clock, adm: Admission, d: disciplines.Discipline,
                  params: SimParams) -> Departure:
    """Phase 7 of a discipline that owns departure (FQ-CoDel): its `depart` hook drops and
    sends from the per-flow queues in the bottleneck's packet slots.  The senders book the
    drops (tcp.on_queue_drops); the class counts follow their flows' queues."""
    flow_cls = tcp.column(adm.flows, "cls")
    out = d.depart(adm.aqm[d.key], adm.flowq, flow_cls, clk.t, clk.now_s, clk.tick_s, service_pkts(clk, params),
                   params)
    drops = out.drops
    flows = tcp.on_queue_drops(adm.flows, drops.new, drops.retx, drops.first_new_tx)
    queue = adm.queue.replace(pkts=adm.queue.pkts - drops.by_class - out.served)
    wire = state.wire.at[clk.t % params.delay_line_ticks].set(out.records)
    return Departure(queue=queue, served_pkts=out.served, rr_next=state.rr_next, wire=wire, flows=flows,
                     drops_pkts=drops.by_class, retx_drops_pkts=drops.retx_spur, marks_pkts=out.marks,
                     aqm=adm.aqm.replace(**{d.key: out.state}), flowq=out.queues)


class Record(NamedTuple):
    """The statistics after this tick (record_phase)."""
    metrics: mx.Metrics
    interval: mx.Interval
    drain_norm: jnp.ndarray  # [P] dequeue rate / link rate over the last base RTT
    drain_window: jnp.ndarray  # [P] dequeues in the current window
    drain_window_start: jnp.ndarray  # [] tick the current window started


def _probe_rtt_s(qlen_pkts, params: SimParams):
    """The RTT a class-0 ping would see behind the queues qlen_pkts [P]: the base RTT
    plus the serialisation of the packets served before it (round robin: class 0's and
    up to one more than that of each other class; strict priority: class 0's alone)."""
    ser_s = params.data_pkt_bits / params.bottleneck_rate_bps
    ahead = jnp.where(params.scheduler_id == 0,
                      qlen_pkts[0] + jnp.sum(jnp.minimum(qlen_pkts[1:], qlen_pkts[0] + 1)), qlen_pkts[0])
    return params.base_rtt_s + ahead.astype(jnp.float32) * ser_s


def _count_packets(m: mx.Metrics, warm, sink: Sink, tx: Transmit, adm: Admission, dep: Departure,
                   params: SimParams) -> mx.Metrics:
    """Packet counters since t = 0 (conservation), warm-up-gated counters, per-class and
    total queue histograms and the probe RTT."""
    P, cap = params.num_classes, params.queue_capacity_pkts
    qlen = dep.queue.pkts
    occ_after = jnp.sum(qlen)
    probe = _probe_rtt_s(qlen, params)
    w = warm.astype(jnp.int32)
    n_deq = jnp.sum(dep.served_pkts)
    n_sink, n_spur_sink = sink.arrived_pkts, sink.spurious_pkts
    arr_c, drops_c = adm.arrivals_pkts, adm.drops_pkts + dep.drops_pkts
    marks_c = adm.marks_pkts + dep.marks_pkts
    n_rtx_sent = tx.retx_pkts + tx.spur_pkts  # what the buffer sees as repeated data (ns-3's retx_arrivals)
    return m.replace(
        retx_tx_total=m.retx_tx_total + jnp.sum(n_rtx_sent), spur_tx_total=m.spur_tx_total + jnp.sum(tx.spur_pkts),
        spur_sink_total=m.spur_sink_total + n_spur_sink,
        retx_arrive_warm=m.retx_arrive_warm + w * jnp.sum(n_rtx_sent),
        retx_drop_warm=m.retx_drop_warm + w * (jnp.sum(n_rtx_sent - adm.retx_admitted_pkts - adm.spur_admitted_pkts)
                                               + dep.retx_drops_pkts),
        mark_total=m.mark_total + jnp.sum(marks_c), mark_warm=m.mark_warm + w * marks_c,
        tx_total=m.tx_total + jnp.sum(tx.sent_pkts), drop_total=m.drop_total + jnp.sum(drops_c),
        deq_total=m.deq_total + n_deq, sink_total=m.sink_total + n_sink,
        arrive_warm=m.arrive_warm + w * arr_c, drop_warm=m.drop_warm + w * drops_c,
        deq_warm=m.deq_warm + w * n_deq, sink_warm=m.sink_warm + w * (n_sink - n_spur_sink), ticks_warm=m.ticks_warm + w,
        queue_sum=m.queue_sum + w * qlen.astype(jnp.float32),
        queue_hist=m.queue_hist.at[jnp.arange(P), jnp.minimum(qlen, cap)].add(w),
        occ_hist=m.occ_hist.at[jnp.minimum(occ_after, P * cap)].add(w),
        probe_rtt_sum_s=m.probe_rtt_sum_s + w * probe,
        probe_rtt_max_s=jnp.maximum(m.probe_rtt_max_s, jnp.where(warm, probe, 0.0)),
    )


def _count_interval(iv: mx.Interval, clk: Clock, sink: Sink, fired, adm: Admission,
                    dep: Departure) -> mx.Interval:
    """This tick's share of the agent interval's record."""
    return iv.replace(
        arrivals_pkts=iv.arrivals_pkts + adm.arrivals_pkts, drops_pkts=iv.drops_pkts + adm.drops_pkts + dep.drops_pkts,
        marks_pkts=iv.marks_pkts + adm.marks_pkts + dep.marks_pkts,
        dequeues_pkts=iv.dequeues_pkts + dep.served_pkts,
        queue_pkt_s=iv.queue_pkt_s + dep.queue.pkts.astype(jnp.float32) * clk.tick_s,
        queue_min_pkts=jnp.minimum(iv.queue_min_pkts, dep.queue.pkts),
        sink_pkts=iv.sink_pkts + sink.arrived_pkts - sink.spurious_pkts, sink_bytes=iv.sink_bytes + sink.payload_bytes,
        rto_count=iv.rto_count + jnp.sum(fired, dtype=jnp.int32), syn_drops=iv.syn_drops + adm.syn_lost,
        capacity_pkts=iv.capacity_pkts + clk.offered_pkts)


def _drain_rate(state: SimState, clk: Clock, served_pkts, params: SimParams):
    """Dequeue rate per class over the last base RTT as a fraction of the link rate
    (ABM's mu_p / b), refreshed once per base RTT.  Returns (drain_norm [P], drain_window
    [P], drain_window_start [])."""
    t = clk.t
    win_ticks = jnp.maximum(jnp.round(params.base_rtt_s / clk.tick_s).astype(jnp.int32), 1)
    dwin = state.drain_window + served_pkts
    roll = (t + 1 - state.drain_window_start) >= win_ticks
    drain_norm = jnp.where(roll, dwin.astype(jnp.float32) / (win_ticks * params.pkts_per_tick), state.drain_norm)
    return drain_norm, jnp.where(roll, 0, dwin), jnp.where(roll, t + 1, state.drain_window_start)


def record_phase(state: SimState, clk: Clock, sink: Sink, ev: Events, fired, arr: Arrival, tx: Transmit,
                 adm: Admission, dep: Departure, params: SimParams) -> Record:
    """Phase 8: the metrics (event and packet counters, warm-up-gated averages, queue
    histograms, probe RTT), the agent interval's record, and the drain-rate window."""
    warm = clk.now_s >= params.warmup_s
    m = sink.metrics
    m = m.replace(flows_started=m.flows_started + arr.started, flows_refused=m.flows_refused + arr.refused,
                  rto_total=m.rto_total + jnp.sum(fired), events_deferred=m.events_deferred + ev.deferred_flows,
                  syn_drops=m.syn_drops + adm.syn_lost)
    m = _count_packets(m, warm, sink, tx, adm, dep, params)
    if params.has_capacity_schedule:  # the packet times the link offered (utilisation's denominator)
        m = m.replace(offered_total=m.offered_total + clk.service_pkts,
                      offered_warm=m.offered_warm + warm.astype(jnp.int32) * clk.service_pkts)
    iv = _count_interval(sink.interval, clk, sink, fired, adm, dep)
    drain_norm, drain_window, drain_window_start = _drain_rate(state, clk, dep.served_pkts, params)
    return Record(metrics=m, interval=iv, drain_norm=drain_norm, drain_window=drain_window,
                  drain_window_start=drain_window_start)


class Phases(NamedTuple):
    """What each phase of one tick handed the next (`tick_phases`), for diagnostics that
    look inside a tick (calibration/retx_drops.py)."""
    clk: Clock
    sink: Sink
    ev: Events
    fired: jnp.ndarray  # [E] bool: the event flow's RTO fired this tick
    arr: Arrival
    tx: Transmit
    adm: Admission
    dep: Departure


def tick(state: SimState, params: SimParams) -> SimState:
    """Advance the switch and its senders by one tick: the eight phases in order."""
    return tick_phases(state, params)[0]


def tick_phases(state: SimState, params: SimParams) -> tuple[SimState, Phases]:
    """`tick`, also returning what each phase handed the next (under `jit`, what the caller
    does not use is not computed)."""
    if state.flows.ints.shape[0] < tcp.widths(params)[0]:
        raise ValueError("these params need optional flow columns (tcp=bbr, rtt_clock or sack_credit ns-3.37) but the "
                         "state's flow table was made without them: make the state with these params (sim.init / "
                         "env.reset)")
    clk = clock(state, params)
    if tcp.chosen(params, "long_flow_syn", "queue"):  # some run asks for it (static)
        state = _long_flow_syns(state, clk, params)
    wire_rows = _wire_rows(state, clk.t, params)  # (one read of the delay line: `_wire_rows`)
    sink = deliver_phase(state, clk, params, wire_rows)
    ev = ack_phase(state, clk, params, wire_rows)
    flows, fired = timeout_phase(ev.flows, clk, params)
    arr = arrival_phase(state, clk, sink, ev, flows, params)
    tx = transmit_phase(arr.flows, ev, clk, params)
    adm = admit_phase(state, clk, ev, arr, tx, params)
    dep = depart_phase(state, clk, adm, params)
    rec = record_phase(state, clk, sink, ev, fired, arr, tx, adm, dep, params)
    return SimState(
        tick=clk.t + 1, seed=state.seed, flows=dep.flows, delivered=arr.delivered, done_sink=arr.done_sink,
        queue=dep.queue, wire=dep.wire, next_arrival_s=arr.next_arrival_s, access_credit=tx.credit_pkts,
        rr_next=dep.rr_next, rl_alpha=state.rl_alpha, rl_size_pkts=state.rl_size_pkts, drain_norm=rec.drain_norm,
        drain_window=rec.drain_window, drain_window_start=rec.drain_window_start, thresholds=arr.thresholds_pkts,
        aqm=dep.aqm, metrics=rec.metrics, interval=rec.interval, flowq=dep.flowq, link_credit=clk.link_credit,
        incast=arr.incast,
    ), Phases(clk=clk, sink=sink, ev=ev, fired=fired, arr=arr, tx=tx, adm=adm, dep=dep)


def run(state: SimState, params: SimParams, num_ticks: int, trace_fn=None):
    """Advance `num_ticks` ticks (static) of the JAX tick, the reference, in a `lax.scan`.
    With `trace_fn(state) -> pytree`, also return its value after every tick (stacked),
    else None.  `rlbm_jax.env.backends.run` runs the same ticks on any backend.  Params
    whose leaves are concrete are refused where they hold a model choice their record
    lacks (`params.check_record`: the tick compiles only what the record names)."""
    check_record(params)

    def body(s, _):
        s = tick(s, params)
        return s, (trace_fn(s) if trace_fn is not None else None)

    return jax.lax.scan(body, state, None, length=num_ticks)


def open_cost(state: SimState, params: SimParams):
    """[P] `metrics.open_log_slowdown` of the flows open now."""
    col = lambda n: tcp.column(state.flows, n)
    return mx.open_log_slowdown(col("active"), state.done_sink, col("cls"), col("start_s"), col("size_bytes"),
                                state.tick.astype(jnp.float32) * params.tick_s, params,
                                base_rtt_s=flow_base_rtt_s(col("sender"), params))


def open_interval(state: SimState, params: SimParams) -> SimState:
    """Start an agent interval: an empty record, with the open flows' cost and the queues
    (the smallest so far) taken now."""
    iv = mx.init_interval(params.num_classes, params.interval_log_size, params.agent_flows)
    iv = iv.replace(open_log_slowdown_start=open_cost(state, params), queue_min_pkts=state.queue.pkts)
    if params.agent_flows:  # minus the agent flows' counters now, and their sRTT now
        iv = iv.replace(agent_counts=-_agent_counters(state, params),
                        agent_state=iv.agent_state.at[:, mx.AGENT_STATE.index("srtt_start_s")].set(
                            tcp.column(state.flows, "srtt_s")[:params.agent_flows]))
    return state.replace(interval=iv)


def close_interval(state: SimState, params: SimParams) -> SimState:
    """End an agent interval: the record gets the queues and the open flows' cost now (and
    the agent flows' counts over the interval and their state now)."""
    iv = state.interval.replace(queue_end_pkts=state.queue.pkts, open_log_slowdown_end=open_cost(state, params))
    if params.agent_flows:
        col = lambda n: tcp.column(state.flows, n)[:params.agent_flows]
        now = {"cwnd_pkts": col("cwnd"), "srtt_s": col("srtt_s"), "min_rtt_s": col("delay_min_s"),
               "pacing_rate_pps": col("pace_rate_pps"),
               "srtt_start_s": iv.agent_state[:, mx.AGENT_STATE.index("srtt_start_s")]}
        iv = iv.replace(agent_counts=iv.agent_counts + _agent_counters(state, params),
                        agent_state=jnp.stack([now[n] for n in mx.AGENT_STATE], axis=-1).astype(jnp.float32))
    return state.replace(interval=iv)


def _agent_counters(state: SimState, params: SimParams):
    """[A, 3] int32 (`metrics.AGENT_COUNTS`) the agent flows' counters since they started:
    transmissions, retransmissions (transmissions that were not new data), packets delivered."""
    A = params.agent_flows
    tx, new = tcp.column(state.flows, "tx_next")[:A], tcp.column(state.flows, "next_new")[:A]
    return jnp.stack([tx, tx - new, state.delivered[:A]], axis=-1).astype(jnp.int32)


def flow_schedule(key, params: SimParams, max_flows: int):
    """The Poisson flow arrivals that `init(key, params)` followed by ticks will start:
    (start_s [n], sender [n], size_bytes [n]) for the first `max_flows` arrivals, in
    order, whatever the tick size.  Times at or past `arrival_stop_s` are never started.

    Arrival i (counting every arrival, refused or started, after the long flows) draws
    its gap to the next arrival, its size and its sender from `hash_uniform(seed, i)`,
    as `tick` does; this replays that sequence, so another simulator can be fed exactly
    the same workload (calibration)."""
    k_seed, k_arr, _ = jax.random.split(key, 3)
    seed = jax.random.bits(k_seed, (), jnp.uint32)
    rate = traffic.arrival_rate_per_s(params)

    def one(t, i):
        size_b, sender, gap = traffic.arrival_draw(traffic.hash_uniform(seed, i + params.long_flows, 3), rate, params)
        return t + gap, (t, sender, size_b)

    t0 = traffic.next_gap_s(k_arr, rate).astype(jnp.float32)
    _, out = jax.lax.scan(one, t0, jnp.arange(max_flows, dtype=jnp.int32))
    return out


def ticks_for(seconds: float, params: SimParams) -> int:
    """Number of ticks covering `seconds` (Python int, for static scan lengths)."""
    return int(np.ceil(seconds / float(np.max(np.asarray(params.tick_s)))))


def on_wire(state: SimState, params: SimParams):
    """Packets that left the bottleneck but have not reached the sink yet."""
    L = params.delay_line_ticks
    ago = (state.tick - 1 - jnp.arange(L)) % L  # row written `a` ticks ago sits at (t-1-a) % L
    rows = state.wire[ago]  # [L, n, WIRE_FIELDS]; rows[a] departed in tick t-1-a
    a = jnp.arange(L)
    in_flight = (a < params.sink_delay_ticks) & (state.tick - 1 - a >= 0)
    return jnp.sum(jnp.where(in_flight[:, None], rows[:, :, qm.COUNT], 0))
