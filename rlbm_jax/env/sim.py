"""The simulator: `init` and the pure `tick`, plus `run` (a `lax.scan` of ticks).

One tick covers `params.pkts_per_tick` packet times of the bottleneck.  Order
inside a tick (docs/DESIGN.md):
  1. packets that left sink_delay_ticks ago reach the sink (delivery, FCT log)
  2. the event flows are chosen; ACKs of packets that left ack_delay_ticks ago reach
     their senders (tcp.on_acks)
  3. retransmission timers fire (tcp.on_timeouts)
  4. at most one new flow starts (traffic)
  5. senders transmit what cwnd and the access link allow (tcp.wanted)
  6. the buffer policy sets class thresholds; arrivals are admitted or dropped (buffer)
  7. the scheduler picks up to k packets; they leave the class FIFOs (scheduler, queue)
     and enter the delay line that carries them to the sink and their ACKs back
  8. metrics
Senders run on the switch's clock shifted by the (uncongested) access-path delay,
so a packet a sender emits in tick t is at the switch in tick t.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rlbm_jax.env import buffer, metrics as mx, queue as qm, scheduler, tcp, traffic
from rlbm_jax.env.params import SimParams

# Fields of a delay-line record: the queue's run record (FLOW, COUNT, NRETX, TX0, ENQ, NSPUR).
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
    drain_norm: jnp.ndarray  # [P] dequeue rate / link rate over the last base RTT
    drain_window: jnp.ndarray  # [P] dequeues in the current window
    drain_window_start: jnp.ndarray  # [] tick
    thresholds: jnp.ndarray  # [P] admission thresholds used in the last tick
    metrics: mx.Metrics
    interval: mx.Interval


# The switch's knobs that an agent sets (a formulation's action maps onto them), and the
# SimState field each one is held in.  class_alpha [P]: the "rl" buffer policy admits a
# class-c packet while its queue is below class_alpha_c * beta_c * (B - Q).
KNOBS = {"class_alpha": "rl_alpha"}


def apply_knobs(state: SimState, knobs: dict) -> SimState:
    """The state with the agent's knobs set (from the next tick on)."""
    upd = {}
    for name, value in knobs.items():
        field = KNOBS[name]
        old = getattr(state, field)
        upd[field] = jnp.asarray(value, old.dtype).reshape(old.shape)
    return state.replace(**upd)


def init(key, params: SimParams) -> SimState:
    P, F, S = params.num_classes, params.num_flow_slots, params.num_senders
    k = params.pkts_per_tick
    k_seed, k_arr, k_long = jax.random.split(key, 3)
    tick_s = params.tick_s
    rate = traffic.arrival_rate_per_s(params)
    # K long-lived flows in slots 0..K-1, one per sender in turn.
    slots = jnp.arange(F, dtype=jnp.int32)
    start = jax.random.uniform(k_long, (F,)) * params.long_flow_start_spread_s
    hs = params.base_rtt_s + params.access_offset_s
    flows = tcp.start_flow(
        tcp.init_flows(F), slots < params.long_flows, sender=slots % S, cls=params.num_classes - 1,
        size_pkts=tcp.BIG_PKTS, size_bytes=jnp.inf, start_s=start,
        data_tick=jnp.ceil((start + hs) / tick_s).astype(jnp.int32), handshake_rtt_s=params.base_rtt_s,
        params=params)
    m = mx.init_metrics(P, params.queue_capacity_pkts, params.completion_log_size)
    m = m.replace(flows_started=jnp.asarray(params.long_flows, jnp.int32))
    return SimState(
        tick=jnp.zeros((), jnp.int32),
        seed=jax.random.bits(k_seed, (), jnp.uint32),
        flows=tcp.pack(flows),
        delivered=jnp.zeros((F,), jnp.int32),
        done_sink=jnp.zeros((F,), bool),
        queue=qm.init_queue(P, params.queue_capacity_pkts),
        wire=jnp.zeros((params.delay_line_ticks, k, WIRE_FIELDS), jnp.int32),
        next_arrival_s=traffic.next_gap_s(k_arr, rate).astype(jnp.float32),
        access_credit=jnp.zeros((S,), jnp.float32),
        rr_next=jnp.zeros((), jnp.int32),
        rl_alpha=jnp.ones((P,), jnp.float32),
        drain_norm=jnp.ones((P,), jnp.float32),
        drain_window=jnp.zeros((P,), jnp.int32),
        drain_window_start=jnp.zeros((), jnp.int32),
        thresholds=jnp.zeros((P,), jnp.float32),
        metrics=m,
        interval=mx.init_interval(P, params.interval_log_size),
    )


def _rotated_exclusive_cumsum(x, offset):
    """Exclusive prefix sum of x [E, ...] taken in the order offset, offset+1, ... (cyclic)."""
    rolled = jnp.roll(x, -offset, axis=0)
    excl = jnp.cumsum(rolled, axis=0) - rolled
    return jnp.roll(excl, offset, axis=0)


def _select_events(table, rec_flows, rec_count, new_slot, t, num_events, sender_ok):
    """Pick the flows that need work this tick: the flows named by this tick's ACK
    records and the new flow (they always have a place), then flows whose timer is
    due or whose window and sender's access link let them send, taken from a starting
    slot that rotates every tick so that none waits for ever.  Returns ([E] slot ids,
    F marking an empty entry; number of such flows deferred to a later tick)."""
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
    ideal = params.base_rtt_s + size_b * 8.0 / params.bottleneck_rate_bps
    log_rec = jnp.stack([size_b, col("cls").astype(jnp.float32), fct, fct / ideal, col("start_s")], axis=-1)
    m, iv = mx.log_completions(m, iv, done, log_rec)
    n, n_spur = jnp.sum(cnt), jnp.sum(spur)
    # payload bytes: whole segments, less the unused part of each finished flow's last one
    short = jnp.sum(jnp.where(done, col("size_pkts").astype(jnp.float32) * params.mss_bytes - size_b, 0.0))
    return delivered, done_sink, m, iv, n, n_spur, (n - n_spur).astype(jnp.float32) * params.mss_bytes - short


def _aggregate(records, idx):
    """One-hot [n, E] matching records (COUNT > 0) to the event flows idx [E]."""
    return (records[:, qm.FLOW][:, None] == idx[None, :]) & (records[:, qm.COUNT][:, None] > 0)


def tick(state: SimState, params: SimParams) -> SimState:
    P, F, S = params.num_classes, params.num_flow_slots, params.num_senders
    k = params.pkts_per_tick
    L = params.delay_line_ticks
    E = params.event_slots
    t = state.tick
    tick_s = params.tick_s
    now_s = t.astype(jnp.float32) * tick_s
    warm = now_s >= params.warmup_s
    m = state.metrics
    iv = state.interval
    # arrivals draw from the arrival count, so every tick size sees the same flows
    u = traffic.hash_uniform(state.seed, m.flows_started + m.flows_refused, 3)  # gap, size, sender
    u_order = traffic.hash_uniform(state.seed ^ jnp.uint32(0x5BD1E995), t, 1)[0]  # FIFO order

    # ---- 1. packets reach the sink (a column update of the flow table) ------------------
    sink_tick = t - params.sink_delay_ticks
    sink_rows = jnp.where(sink_tick >= 0, state.wire[sink_tick % L], 0)  # [k, WIRE_FIELDS]
    table = state.flows
    delivered, done_sink, m, iv, n_sink, n_spur_sink, sink_bytes = _deliver(
        table, state.delivered, state.done_sink, sink_rows, sink_tick, m, iv, params)

    # ---- 2. ACK records, the flow that may start, the event flows ---------------------------
    ack_rows = state.wire[(t - params.ack_delay_ticks) % L]  # [k, WIRE_FIELDS]
    ack_rows = jnp.where(t >= params.ack_delay_ticks, ack_rows, 0)
    rate = traffic.arrival_rate_per_s(params)
    due = (state.next_arrival_s <= now_s + tick_s) & (state.next_arrival_s < params.arrival_stop_s)
    slot, free = traffic.free_slot(tcp.column(table, "active"))
    per_tick = params.access_rate_bps * tick_s / params.data_pkt_bits
    credit = jnp.minimum(state.access_credit + per_tick, jnp.maximum(jnp.ceil(per_tick), 1.0))
    budget = jnp.floor(credit).astype(jnp.int32)  # [S] whole packets each access link may send now
    idx, deferred = _select_events(table, ack_rows[:, qm.FLOW], ack_rows[:, qm.COUNT],
                                   jnp.where(due & free, slot, F), t, E, budget >= 1)
    valid = idx < F
    gidx = jnp.minimum(idx, F - 1)
    fl = tcp.unpack(table.rows(gidx))
    fl = fl.replace(active=fl.active & valid)

    # ACKs reach the senders
    # (a spurious retransmission's ACK acknowledges nothing: it carries no new data, no SACK
    # and no RTT sample; it only makes the receiver ACK at once)
    oh = _aggregate(ack_rows, idx)  # [k, E]
    cnt, nretx, nspur = ack_rows[:, qm.COUNT], ack_rows[:, qm.NRETX], ack_rows[:, qm.NSPUR]
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
    fl = tcp.on_acks(fl, t, acked, agg(nretx), agg(dup_e), max_tx, rtt_s, params, tick_s, spur_acked=agg(nspur))
    finished = fl.active & (fl.acked >= fl.size_pkts)
    fl = fl.replace(active=fl.active & ~finished)

    # ---- 3. retransmission timeouts ----------------------------------------------------
    fl, fired = tcp.on_timeouts(fl, t, params, tick_s)

    # the buffer as this tick's arrivals find it: the policy's thresholds (a new flow's
    # SYN and the senders' packets below are admitted against them)
    q = state.queue
    occ = jnp.sum(q.pkts)
    view = buffer.BufferView(queue_pkts=q.pkts, occupancy_pkts=occ, drain_norm=state.drain_norm,
                             rl_alpha=state.rl_alpha)
    thr = buffer.thresholds(view, params)

    # ---- 4. a new flow (at most one per tick) ------------------------------------------
    is_new = valid & (idx == slot) & due & free
    start = jnp.any(is_new)
    size_b, sender, gap = traffic.arrival_draw(u, rate, params)
    cls = jnp.minimum(traffic.flow_class(size_b, params.class_threshold_bytes), P - 1)
    qdelay = q.pkts[cls].astype(jnp.float32) * params.data_pkt_bits / params.bottleneck_rate_bps
    hs_rtt = params.base_rtt_s + qdelay
    t_arr = state.next_arrival_s
    fl = tcp.start_flow(
        fl, is_new, sender=sender, cls=cls, size_pkts=jnp.ceil(size_b / params.mss_bytes).astype(jnp.int32),
        size_bytes=size_b, start_s=t_arr,
        data_tick=jnp.ceil((t_arr + hs_rtt + params.access_offset_s) / tick_s).astype(jnp.int32),
        handshake_rtt_s=hs_rtt, params=params)
    reuse = (jnp.arange(F) == slot) & start
    delivered = jnp.where(reuse, 0, delivered)
    done_sink = done_sink & ~reuse
    advance = due & (start | ~free)  # an arrival that found no free slot is refused
    next_arrival = jnp.where(advance, t_arr + gap, state.next_arrival_s)
    m = m.replace(flows_started=m.flows_started + start, flows_refused=m.flows_refused + (due & ~free),
                  rto_total=m.rto_total + jnp.sum(fired), events_deferred=m.events_deferred + deferred)

    # ---- 5. senders transmit -------------------------------------------------------------
    n_retx, n_spur, n_new = tcp.wanted(fl, t)
    want = n_retx + n_spur + n_new
    by_sender = (fl.sender[:, None] == jnp.arange(S)[None, :]) & fl.active[:, None]  # [E, S]
    ahead = jnp.sum(jnp.where(by_sender, jnp.cumsum(jnp.where(by_sender, want[:, None], 0), axis=0)
                              - want[:, None], 0), axis=1)  # what this sender's earlier event flows want
    send = jnp.clip(budget[fl.sender] - ahead, 0, want)  # the access link serves its flows in turn
    n_retx = jnp.minimum(n_retx, send)
    n_spur = jnp.minimum(n_spur, send - n_retx)
    n_new = send - n_retx - n_spur
    credit = credit - jnp.sum(jnp.where(by_sender, send[:, None], 0), axis=0)

    # ---- 6. buffer admission ---------------------------------------------------------------
    by_cls = fl.cls[:, None] == jnp.arange(P)[None, :]  # [E, P]
    a_ec = jnp.where(by_cls, send[:, None], 0)
    arr_c = jnp.sum(a_ec, axis=0)
    adm_c = buffer.admit(arr_c, q.pkts, thr, params.buffer_pkts - occ)
    offset = jnp.minimum((u_order * E).astype(jnp.int32), E - 1)  # random FIFO order of this tick's senders
    before = jnp.sum(jnp.where(by_cls, _rotated_exclusive_cumsum(a_ec, offset), 0), axis=1)
    adm = jnp.clip(adm_c[fl.cls] - before, 0, send)
    has_run = (adm > 0)[:, None] & by_cls
    rank = jnp.sum(jnp.where(by_cls, _rotated_exclusive_cumsum(has_run.astype(jnp.int32), offset), 0), axis=1)
    adm_retx = jnp.minimum(n_retx, adm)
    adm_spur = jnp.minimum(n_spur, adm - adm_retx)
    queue = qm.enqueue(q, gidx, fl.cls, adm, adm_retx, fl.tx_next, rank, t, nspur=adm_spur)
    fl = tcp.on_sent(fl, t, n_retx, n_spur, n_new, adm, params, tick_s)
    drops_c = arr_c - adm_c
    # a new flow's SYN arrives among this tick's packets of its class; when it finds the
    # class at its threshold it is lost, and the connection retries after syn_timeout_s
    # (ns-3's ConnTimeout), once
    u_syn = traffic.hash_uniform(state.seed ^ jnp.uint32(0x27D4EB2F), t, 1)[0]
    syn_lost = start & buffer.syn_lost(u_syn, cls, arr_c, adm_c, q.pkts, thr, occ, params.buffer_pkts)
    wait = jnp.ceil(params.syn_timeout_s / tick_s).astype(jnp.int32)
    fl = fl.replace(data_tick=jnp.where(is_new & syn_lost, fl.data_tick + wait, fl.data_tick))
    m = m.replace(syn_drops=m.syn_drops + syn_lost)
    table = table.set_rows(idx, tcp.pack(fl))

    # ---- 7. scheduling and departure -------------------------------------------------------
    served, rr_next = scheduler.serve(queue.pkts, k, state.rr_next, params.scheduler_id)
    queue, departed = qm.dequeue(queue, served, k)
    wire = state.wire.at[t % L].set(_compact(departed.reshape(P * k, WIRE_FIELDS), k))
    n_deq = jnp.sum(served)

    # ---- 8. metrics ----------------------------------------------------------------------
    qlen = queue.pkts
    occ_after = jnp.sum(qlen)
    ser = params.data_pkt_bits / params.bottleneck_rate_bps
    ahead = jnp.where(params.scheduler_id == 0, qlen[0] + jnp.sum(jnp.minimum(qlen[1:], qlen[0] + 1)), qlen[0])
    probe = params.base_rtt_s + ahead.astype(jnp.float32) * ser
    w = warm.astype(jnp.int32)
    cap = params.queue_capacity_pkts
    n_rtx_sent = n_retx + n_spur  # what the buffer sees as repeated data (ns-3's retx_arrivals)
    m = m.replace(
        retx_tx_total=m.retx_tx_total + jnp.sum(n_rtx_sent), spur_tx_total=m.spur_tx_total + jnp.sum(n_spur),
        spur_sink_total=m.spur_sink_total + n_spur_sink,
        retx_arrive_warm=m.retx_arrive_warm + w * jnp.sum(n_rtx_sent),
        retx_drop_warm=m.retx_drop_warm + w * jnp.sum(n_rtx_sent - adm_retx - adm_spur),
        tx_total=m.tx_total + jnp.sum(send), drop_total=m.drop_total + jnp.sum(drops_c),
        deq_total=m.deq_total + n_deq, sink_total=m.sink_total + n_sink,
        arrive_warm=m.arrive_warm + w * arr_c, drop_warm=m.drop_warm + w * drops_c,
        deq_warm=m.deq_warm + w * n_deq, sink_warm=m.sink_warm + w * (n_sink - n_spur_sink), ticks_warm=m.ticks_warm + w,
        queue_sum=m.queue_sum + w * qlen.astype(jnp.float32),
        queue_hist=m.queue_hist.at[jnp.arange(P), jnp.minimum(qlen, cap)].add(w),
        occ_hist=m.occ_hist.at[jnp.minimum(occ_after, P * cap)].add(w),
        probe_rtt_sum_s=m.probe_rtt_sum_s + w * probe,
        probe_rtt_max_s=jnp.maximum(m.probe_rtt_max_s, jnp.where(warm, probe, 0.0)),
    )
    iv = iv.replace(arrivals_pkts=iv.arrivals_pkts + arr_c, drops_pkts=iv.drops_pkts + drops_c,
                    dequeues_pkts=iv.dequeues_pkts + served, queue_pkt_s=iv.queue_pkt_s + qlen.astype(jnp.float32) * tick_s,
                    sink_pkts=iv.sink_pkts + n_sink - n_spur_sink, sink_bytes=iv.sink_bytes + sink_bytes,
                    rto_count=iv.rto_count + jnp.sum(fired, dtype=jnp.int32), syn_drops=iv.syn_drops + syn_lost)

    # drain rate per class, refreshed once per base RTT (ABM's mu_p / b)
    win = jnp.maximum(jnp.round(params.base_rtt_s / tick_s).astype(jnp.int32), 1)
    dwin = state.drain_window + served
    roll = (t + 1 - state.drain_window_start) >= win
    drain_norm = jnp.where(roll, dwin.astype(jnp.float32) / (win * k), state.drain_norm)

    return SimState(
        tick=t + 1, seed=state.seed, flows=table, delivered=delivered, done_sink=done_sink, queue=queue, wire=wire, next_arrival_s=next_arrival,
        access_credit=credit, rr_next=rr_next, rl_alpha=state.rl_alpha, drain_norm=drain_norm,
        drain_window=jnp.where(roll, 0, dwin), drain_window_start=jnp.where(roll, t + 1, state.drain_window_start),
        thresholds=thr, metrics=m, interval=iv,
    )


def run(state: SimState, params: SimParams, num_ticks: int, trace_fn=None):
    """Advance `num_ticks` ticks (static).  With `trace_fn(state) -> pytree`, also return
    its value after every tick (stacked)."""
    def body(s, _):
        s = tick(s, params)
        return s, (trace_fn(s) if trace_fn is not None else None)

    return jax.lax.scan(body, state, None, length=num_ticks)


def open_cost(state: SimState, params: SimParams):
    """[P] `metrics.open_log_slowdown` of the flows open now."""
    col = lambda n: tcp.column(state.flows, n)
    return mx.open_log_slowdown(col("active"), state.done_sink, col("cls"), col("start_s"), col("size_bytes"),
                                state.tick.astype(jnp.float32) * params.tick_s, params)


def open_interval(state: SimState, params: SimParams) -> SimState:
    """Start an agent interval: an empty record, with the open flows' cost taken now."""
    iv = mx.init_interval(params.num_classes, params.interval_log_size)
    return state.replace(interval=iv.replace(open_log_slowdown_start=open_cost(state, params)))


def close_interval(state: SimState, params: SimParams) -> SimState:
    """End an agent interval: the record gets the queues and the open flows' cost now."""
    return state.replace(interval=state.interval.replace(queue_end_pkts=state.queue.pkts,
                                                         open_log_slowdown_end=open_cost(state, params)))


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
