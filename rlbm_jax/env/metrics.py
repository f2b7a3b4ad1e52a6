"""Measurements taken inside `jit`: counters, histograms and the flow-completion log.

Counters since t = 0 (`*_total`) serve packet conservation.  Time averages and
rates (`*_warm`) cover only ticks after `params.warmup_s`.  Completed flows go to
a fixed-size log; completions beyond its size are counted in `log_overflow`,
never dropped silently.  `summarize` turns a final state into the report
fields (jit-able, vmappable).
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

LOG_FIELDS = ("size_bytes", "cls", "fct_s", "slowdown", "start_s")


@struct.dataclass
class Metrics:
    tx_total: jnp.ndarray  # [] transmissions offered to the switch
    drop_total: jnp.ndarray  # [] dropped at the port (admission, and an AQM at the FIFO's head)
    mark_total: jnp.ndarray  # [] CE-marked by an AQM (ECN; a marked packet is not dropped)
    deq_total: jnp.ndarray  # [] sent on the bottleneck wire
    sink_total: jnp.ndarray  # [] received by the sink (spurious copies included)
    arrive_warm: jnp.ndarray  # [P] arrivals at the buffer after warm-up
    drop_warm: jnp.ndarray  # [P] drops after warm-up
    mark_warm: jnp.ndarray  # [P] CE marks after warm-up
    deq_warm: jnp.ndarray  # [] packets on the wire after warm-up
    sink_warm: jnp.ndarray  # [] distinct packets delivered after warm-up (goodput)
    ticks_warm: jnp.ndarray  # []
    queue_sum: jnp.ndarray  # [P] float sum of per-tick queue lengths (queue_* in the report: all
    # classes together, i.e. the shared buffer's occupancy; *_c{c}: one class)
    queue_hist: jnp.ndarray  # [P, R+1] ticks spent at each queue length
    occ_hist: jnp.ndarray  # [P*R+1] ticks spent at each total occupancy
    probe_rtt_sum_s: jnp.ndarray  # [] sum of the RTT a class-0 probe would see
    probe_rtt_max_s: jnp.ndarray  # []
    flows_started: jnp.ndarray  # []
    flows_completed: jnp.ndarray  # []
    flows_refused: jnp.ndarray  # []
    rto_total: jnp.ndarray  # [] retransmission timeouts
    retx_tx_total: jnp.ndarray  # [] retransmissions sent (of lost packets, and spurious ones)
    spur_tx_total: jnp.ndarray  # [] spurious retransmissions sent (go-back-N resends of packets in flight)
    spur_sink_total: jnp.ndarray  # [] spurious copies that reached the sink (the receiver drops them)
    retx_arrive_warm: jnp.ndarray  # [] retransmissions offered to the buffer after warm-up (ns-3's retx_arrivals)
    retx_drop_warm: jnp.ndarray  # [] ... of which dropped
    syn_drops: jnp.ndarray  # [] connections whose SYN was dropped (they wait syn_timeout_s)
    events_deferred: jnp.ndarray  # [] timer/send work postponed a tick (event slots full)
    log: jnp.ndarray  # [L, 5] completion records (LOG_FIELDS)
    log_count: jnp.ndarray  # [] records written
    log_overflow: jnp.ndarray  # [] completions that found the log full
    # under a capacity schedule (rlbm_jax.env.capacity; 0 without one, when every tick offers
    # pkts_per_tick): the packet times the link offered, since t = 0 and after warm-up
    offered_total: jnp.ndarray  # []
    offered_warm: jnp.ndarray  # []


def init_metrics(num_classes: int, capacity: int, log_size: int) -> Metrics:
    zi = jnp.zeros((), jnp.int32)
    return Metrics(
        tx_total=zi, drop_total=zi, mark_total=zi, deq_total=zi, sink_total=zi,
        arrive_warm=jnp.zeros((num_classes,), jnp.int32), drop_warm=jnp.zeros((num_classes,), jnp.int32),
        mark_warm=jnp.zeros((num_classes,), jnp.int32),
        deq_warm=zi, sink_warm=zi, ticks_warm=zi,
        queue_sum=jnp.zeros((num_classes,), jnp.float32),
        queue_hist=jnp.zeros((num_classes, capacity + 1), jnp.int32),
        occ_hist=jnp.zeros((num_classes * capacity + 1,), jnp.int32),
        probe_rtt_sum_s=jnp.zeros((), jnp.float32), probe_rtt_max_s=jnp.zeros((), jnp.float32),
        flows_started=zi, flows_completed=zi, flows_refused=zi, rto_total=zi, syn_drops=zi, events_deferred=zi,
        retx_tx_total=zi, spur_tx_total=zi, spur_sink_total=zi, retx_arrive_warm=zi, retx_drop_warm=zi,
        log=jnp.zeros((log_size, len(LOG_FIELDS)), jnp.float32), log_count=zi, log_overflow=zi,
        offered_total=zi, offered_warm=zi,
    )


@struct.dataclass
class Interval:
    """Raw statistics of one agent interval: the record every formulation computes its
    observation and reward from (`rlbm_jax.env.formulations`).  The env opens a fresh one
    at each step (`sim.open_interval`), the simulator fills it tick by tick, the env
    closes it (`sim.close_interval`); the ns-3 scenario writes the same record at every
    agent boundary (`rlbm_jax.ns3.harness.records_to_interval` reads it).  P classes,
    M = `interval_log_size`.  Data packets only (a SYN takes no queue space here; in
    ns-3 it is not counted as data).
    """

    arrivals_pkts: jnp.ndarray  # [P] data packets offered to the buffer (admitted + dropped)
    drops_pkts: jnp.ndarray  # [P] dropped (at admission, or by an AQM at the FIFO's head)
    marks_pkts: jnp.ndarray  # [P] CE-marked by an AQM
    dequeues_pkts: jnp.ndarray  # [P] sent on the bottleneck wire
    queue_end_pkts: jnp.ndarray  # [P] each class's queue at the interval's end
    queue_pkt_s: jnp.ndarray  # [P] time integral of each class's queue (packets x seconds)
    # [P] each class's smallest queue in the interval (its queue at the start included; the
    # simulator's as each tick leaves it, ns-3's at every departure): the standing queue
    queue_min_pkts: jnp.ndarray
    sink_pkts: jnp.ndarray  # [] distinct data packets that reached the sink
    sink_bytes: jnp.ndarray  # [] their payload bytes
    rto_count: jnp.ndarray  # [] retransmission timeouts
    syn_drops: jnp.ndarray  # [] SYNs dropped (each costs its flow syn_timeout_s)
    flows_done: jnp.ndarray  # [P] flows whose last byte reached the sink
    slowdown_max: jnp.ndarray  # [P] largest FCT slowdown among them (0 when none)
    log_slowdown_sum: jnp.ndarray  # [P] sum of log(max(slowdown, 1)) over them
    open_log_slowdown_start: jnp.ndarray  # [P] sum over flows open at the start of log(max(age, ideal) / ideal)
    open_log_slowdown_end: jnp.ndarray  # [P] the same at the interval's end (long-lived flows count 0)
    flows: jnp.ndarray  # [M, 3] (size_bytes, cls, slowdown) of the first M flows finished
    flows_logged: jnp.ndarray  # [] rows of `flows` written (<= M)
    flows_overflow: jnp.ndarray  # [] finished flows beyond M (in the sums above, not in `flows`)
    # [] float: the data packets the bottleneck could have sent in the interval, the integral
    # of its rate over the interval / a data packet's bits: pkts_per_tick a tick at a
    # constant rate, the schedule's integral under a capacity schedule (what the link
    # offered, used or not; ns-3 writes the same integral)
    capacity_pkts: jnp.ndarray
    # sender agents (`params.agent_flows` = A > 0; None without, and ns-3's records have none):
    # per agent flow a (flow slot a), `AGENT_COUNTS` over the interval, int32 [A, 3], and
    # `AGENT_STATE` at its end (srtt_start_s: at its start), float32 [A, 5].  While the interval
    # is open the counts hold minus the flows' counters at its start (`sim.open_interval`);
    # closing it adds the counters then (int32, exact across a wrap), leaving the interval's.
    agent_counts: jnp.ndarray = None
    agent_state: jnp.ndarray = None


# the record's fields in order, with their shape: "P" per class, "" scalar, "flows" [M, 3]
INTERVAL_FIELDS = (("arrivals_pkts", "P"), ("drops_pkts", "P"), ("marks_pkts", "P"), ("dequeues_pkts", "P"), ("queue_end_pkts", "P"),
                   ("queue_pkt_s", "P"), ("queue_min_pkts", "P"), ("sink_pkts", ""), ("sink_bytes", ""), ("rto_count", ""),
                   ("syn_drops", ""), ("flows_done", "P"), ("slowdown_max", "P"), ("log_slowdown_sum", "P"),
                   ("open_log_slowdown_start", "P"), ("open_log_slowdown_end", "P"), ("flows", "flows"),
                   ("flows_logged", ""), ("flows_overflow", ""), ("capacity_pkts", ""))
INTERVAL_INT_FIELDS = ("arrivals_pkts", "drops_pkts", "marks_pkts", "dequeues_pkts", "queue_end_pkts",
                       "queue_min_pkts", "sink_pkts", "rto_count",
                       "syn_drops", "flows_done", "flows_logged", "flows_overflow")
FLOW_FIELDS = ("size_bytes", "cls", "slowdown")
# per agent flow (`Interval.agent_counts`): transmissions sent (retransmissions included), of them
# retransmissions (go-back-N resends included), distinct data packets delivered to the sink
AGENT_COUNTS = ("sent_pkts", "retx_pkts", "delivered_pkts")
# per agent flow (`Interval.agent_state`): cwnd (segments), smoothed RTT, smallest RTT sample
# (a timeout clears it: 0 until the next sample), pacing rate (segments/s; 0 unpaced), the
# smoothed RTT at the interval's start
AGENT_STATE = ("cwnd_pkts", "srtt_s", "min_rtt_s", "pacing_rate_pps", "srtt_start_s")
AGENT_RECORD_FIELDS = ("agent_counts", "agent_state")


def init_interval(num_classes: int, log_size: int = 16, agent_flows: int = 0) -> Interval:
    """An empty record (with `agent_flows` > 0, the agent flows' tables, zero)."""
    zi, zf = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)
    agents = {} if not agent_flows else {
        "agent_counts": jnp.zeros((agent_flows, len(AGENT_COUNTS)), jnp.int32),
        "agent_state": jnp.zeros((agent_flows, len(AGENT_STATE)), jnp.float32)}
    pi, pf = jnp.zeros((num_classes,), jnp.int32), jnp.zeros((num_classes,), jnp.float32)
    return Interval(arrivals_pkts=pi, drops_pkts=pi, marks_pkts=pi, dequeues_pkts=pi, queue_end_pkts=pi, queue_pkt_s=pf,
                    queue_min_pkts=pi,
                    sink_pkts=zi, sink_bytes=zf, rto_count=zi, syn_drops=zi, flows_done=pi, slowdown_max=pf,
                    log_slowdown_sum=pf, open_log_slowdown_start=pf, open_log_slowdown_end=pf,
                    flows=jnp.zeros((log_size, len(FLOW_FIELDS)), jnp.float32), flows_logged=zi, flows_overflow=zi,
                    capacity_pkts=zf, **agents)


def open_log_slowdown(active, done_sink, cls, start_s, size_bytes, now_s, params, base_rtt_s=None):
    """[P] sum over open flows (started, last byte not yet at the sink, finite size) of
    log(max(age, ideal) / ideal), ideal = base RTT + size * 8 / C: the log slowdown each
    would have if it finished now, at least 0.  A flow's increments over the intervals
    it spans add up to the log slowdown it finishes with.  `base_rtt_s`: each flow's (its
    flow group's), default the run's."""
    ideal = (params.base_rtt_s if base_rtt_s is None else base_rtt_s) + size_bytes * 8.0 / params.bottleneck_rate_bps
    is_open = active & ~done_sink & jnp.isfinite(size_bytes)
    cost = jnp.log(jnp.maximum(now_s - start_s, ideal) / jnp.where(is_open, ideal, 1.0))
    by_cls = cls[:, None] == jnp.arange(params.num_classes)[None, :]
    return jnp.sum(jnp.where(is_open[:, None] & by_cls, cost[:, None], 0.0), axis=0)


def log_completions(m: Metrics, iv: Interval, done, records) -> tuple[Metrics, Interval]:
    """Append the [n, 5] records (LOG_FIELDS) where done [n] is true to the run's log and
    to the interval's record."""
    L = m.log.shape[0]
    rank = jnp.cumsum(done) - done
    pos = jnp.where(done, m.log_count + rank, L)
    n = jnp.sum(done, dtype=jnp.int32)
    log = m.log.at[pos].set(records, mode="drop")
    written = jnp.minimum(n, jnp.maximum(L - m.log_count, 0))
    m = m.replace(log=log, log_count=m.log_count + written, log_overflow=m.log_overflow + n - written,
                  flows_completed=m.flows_completed + n)
    P = iv.flows_done.shape[0]
    M = iv.flows.shape[0]
    slow = records[:, 3]
    mine = done[:, None] & (records[:, 1].astype(jnp.int32)[:, None] == jnp.arange(P)[None, :])  # [n, P]
    ipos = jnp.where(done, iv.flows_logged + rank, M)
    rows = records[:, jnp.asarray([0, 1, 3])]  # FLOW_FIELDS
    iv_written = jnp.minimum(n, jnp.maximum(M - iv.flows_logged, 0))
    iv = iv.replace(
        flows_done=iv.flows_done + jnp.sum(mine, axis=0, dtype=jnp.int32),
        slowdown_max=jnp.maximum(iv.slowdown_max, jnp.max(jnp.where(mine, slow[:, None], 0.0), axis=0)),
        log_slowdown_sum=iv.log_slowdown_sum + jnp.sum(
            jnp.where(mine, jnp.log(jnp.maximum(slow, 1.0))[:, None], 0.0), axis=0),
        flows=iv.flows.at[ipos].set(rows, mode="drop"), flows_logged=iv.flows_logged + iv_written,
        flows_overflow=iv.flows_overflow + n - iv_written)
    return m, iv


def _hist_quantile(hist, q):
    c = jnp.cumsum(hist)
    total = c[-1]
    return jnp.argmax(c >= q * jnp.maximum(total, 1)).astype(jnp.float32)


def masked_quantile(x, mask, q):
    n = jnp.sum(mask)
    xs = jnp.sort(jnp.where(mask, x, jnp.inf))
    pos = q * jnp.maximum(n - 1, 0).astype(jnp.float32)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(n - 1, 0))
    frac = pos - lo
    v = xs[lo] * (1 - frac) + jnp.where(frac > 0, xs[hi], 0.0) * frac
    return jnp.where(n > 0, v, jnp.nan)


def summarize(m: Metrics, params) -> dict:
    """Report fields of one run (scalars; jit- and vmap-able).  `util_wire` is the packets
    sent over the packet times the link offered in the measured time: C x time, or under a
    capacity schedule the schedule's integral of the rate in whole packets (`offered_warm`),
    so that it stays the fraction of the capacity actually offered as C changes; such a run
    also reports `capacity_mean_bps`, that capacity's mean over the measured time."""
    dur = jnp.maximum(m.ticks_warm, 1).astype(jnp.float32) * params.tick_s
    if params.capacity_rows > 0:
        cap_pkts = jnp.maximum(m.offered_warm, 1).astype(jnp.float32)
    else:
        cap_pkts = dur * params.bottleneck_rate_bps / params.data_pkt_bits
    arrivals = jnp.sum(m.arrive_warm)
    drops = jnp.sum(m.drop_warm)
    rec = m.log
    valid = (jnp.arange(rec.shape[0]) < m.log_count) & (rec[:, 4] >= params.warmup_s)
    fct, slow = rec[:, 2], rec[:, 3]
    nvalid = jnp.maximum(jnp.sum(valid), 1)
    queue_mean = m.queue_sum / jnp.maximum(m.ticks_warm, 1)
    out = {
        "util_wire": m.deq_warm / cap_pkts,
        "goodput_bps": m.sink_warm * params.mss_bytes * 8.0 / dur,
        "drop_rate": drops / jnp.maximum(arrivals, 1),
        "mark_rate": jnp.sum(m.mark_warm) / jnp.maximum(arrivals, 1),
        "queue_mean_pkts": jnp.sum(queue_mean),
        "queue_p99_pkts": _hist_quantile(m.occ_hist, 0.99),  # of the whole shared buffer
        "fct_mean_s": jnp.where(jnp.sum(valid) > 0, jnp.sum(jnp.where(valid, fct, 0.0)) / nvalid, jnp.nan),
        "fct_p99_s": masked_quantile(fct, valid, 0.99),
        "slowdown_p50": masked_quantile(slow, valid, 0.50),
        "slowdown_p99": masked_quantile(slow, valid, 0.99),
        "probe_rtt_mean_s": m.probe_rtt_sum_s / jnp.maximum(m.ticks_warm, 1),
        "probe_rtt_max_s": m.probe_rtt_max_s,
        "flows_started": m.flows_started,
        "flows_completed": m.flows_completed,
        "flows_refused": m.flows_refused,
        "log_overflow": m.log_overflow,
        "rto_count": m.rto_total,
        "retx_arrivals": m.retx_arrive_warm,  # retransmitted data offered to the buffer (ns-3's field)
        "retx_drops": m.retx_drop_warm,
        "spurious_retx": m.spur_sink_total,  # copies of delivered data the receiver got (since t = 0)
        "syn_drops": m.syn_drops,
        "events_deferred": m.events_deferred,
        "measured_s": dur,
    }
    if params.capacity_rows > 0:
        out["capacity_mean_bps"] = m.offered_warm.astype(jnp.float32) * params.data_pkt_bits / dur
    for c in range(params.num_classes):
        out[f"queue_mean_pkts_c{c}"] = queue_mean[c]
        out[f"queue_p99_pkts_c{c}"] = _hist_quantile(m.queue_hist[c], 0.99)
        out[f"arrivals_c{c}"] = m.arrive_warm[c]
        out[f"drops_c{c}"] = m.drop_warm[c]
        out[f"marks_c{c}"] = m.mark_warm[c]
    return out


# ---------------------------------------------------------------------------
# the tail over many runs (host side)
# ---------------------------------------------------------------------------

def seed_stats(values) -> tuple[float, float, int]:
    """(mean, std, n) of one field over seeds: a seed without a sample (NaN or None: the p99
    of a seed that finished no flow) is left out and not counted in n; NaN mean from no
    sample, NaN std (written null) from fewer than two."""
    import numpy as np

    v = np.asarray([np.nan if x is None else x for x in np.ravel(np.asarray(values, object))], np.float64)
    v = v[np.isfinite(v)]
    return (float(v.mean()) if v.size else float("nan"), float(v.std()) if v.size >= 2 else float("nan"),
            int(v.size))


# flow-size buckets of the pooled tail: name, sizes in [lo, hi) bytes
SIZE_BUCKETS = (("short", 0.0, 100e3), ("medium", 100e3, 1e6), ("long", 1e6, float("inf")))


def pooled_tail(rows_per_run, warmup_s: float = 0.0, column: str = "slowdown") -> dict:
    """FCT slowdown per flow-size bucket, pooled over runs: {bucket: {"flows", "p50", "p99"}}
    for every bucket of `SIZE_BUCKETS` and "all".  `rows_per_run` holds each run's finished
    flows as LOG_FIELDS rows (this simulator's completion log, or the ns-3 scenario's flows
    CSV); flows that started before `warmup_s` are left out.  A per-run p99 over 10-30 flows
    is its worst flow or two; pooled over seeds the p99 of a bucket sits inside its
    distribution.  Quantiles are linear interpolations; a bucket with no flow gives NaN.
    `column` (a LOG_FIELDS name) picks the quantity: the slowdown, or "fct_s"."""
    import numpy as np

    parts = [np.asarray(r, np.float64).reshape(-1, len(LOG_FIELDS)) for r in rows_per_run]
    rows = np.concatenate(parts) if parts else np.zeros((0, len(LOG_FIELDS)))
    rows = rows[rows[:, 4] >= warmup_s]
    out = {}
    for name, lo, hi in (*SIZE_BUCKETS, ("all", 0.0, float("inf"))):
        s = rows[(rows[:, 0] >= lo) & (rows[:, 0] < hi), LOG_FIELDS.index(column)]
        q = np.percentile(s, [50, 99]) if s.size else (np.nan, np.nan)
        out[name] = {"flows": int(s.size), "p50": float(q[0]), "p99": float(q[1])}
    return out
