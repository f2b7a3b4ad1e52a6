"""FQ-CoDel (rlbm_jax.env.switch.disciplines.fq_codel over the per-flow queues of flowqueue): ns-3.37's
FqCoDelQueueDisc rules (new flows first, byte deficit round robin, overflow drops from the
fattest flow) and what they are for (flow isolation, sparse flows unqueued, each flow's
sojourn held by its own CoDel); one flow is plain CoDel; bad params name their field."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import backends, sim, tcp, traffic
from rlbm_jax.env.switch import flowqueue, queue as qm
from rlbm_jax.env.switch.disciplines import fq_codel
from rlbm_jax.env.params import make_params, stack_params, validate

PKT = 1052  # a 1000-byte segment at the queue disc


def _small(**kw):
    return make_params(**{"policy": "fq-codel", "num_classes": 1, "num_senders": 1, "num_flow_slots": 4,
                          "buffer_per_class_pkts": 300, "mss_bytes": 1000, **kw})


def _fill(p, sizes, tx0=None, nretx=None):
    """Per-flow queues holding sizes[f] packets each (one run per flow, enqueued at tick 0)."""
    n = len(sizes)
    sizes = jnp.asarray(sizes, jnp.int32)
    z = jnp.zeros((n,), jnp.int32)
    return flowqueue.enqueue(flowqueue.init(p), jnp.arange(n, dtype=jnp.int32), sizes,
                             z if nretx is None else jnp.asarray(nretx, jnp.int32),
                             z if tx0 is None else jnp.asarray(tx0, jnp.int32), 0, z, z)


def test_overflow_drops_half_of_the_fattest_queue_at_its_head():
    p = _small()
    q = _fill(p, [5, 40, 10, 0], tx0=[0, 100, 0, 0], nretx=[0, 3, 0, 0])
    cls = jnp.zeros((4,), jnp.int32)
    q2, d = fq_codel.overflow(q, cls, 50, p)
    np.testing.assert_array_equal(np.asarray(q2.pkts), [5, 20, 10, 0])  # 55 > 50: half of flow 1's 40
    assert int(d.new[1]) == 17 and int(d.retx[1]) == 3 and int(d.first_new_tx[1]) == 103
    assert int(d.by_class[0]) == 20 and int(d.retx_spur) == 3 and int(jnp.sum(d.new)) == 17
    # the rest of the run is still at the head: its next packet is transmission 120
    assert int(flowqueue.head_run(q2, 1)[qm.TX0]) == 120
    # a batch stops at 64 packets, and the drops go on while the limit is exceeded
    q3, d3 = fq_codel.overflow(_fill(p, [0, 0, 0, 200]), cls, 100, p)
    assert int(q3.pkts[3]) == 200 - 64 - 64 and int(d3.by_class[0]) == 128
    # on a tie, the lowest slot (ns-3: the queue created first)
    q4, _ = fq_codel.overflow(_fill(p, [0, 30, 30, 0]), cls, 50, p)
    np.testing.assert_array_equal(np.asarray(q4.pkts), [0, 15, 30, 0])
    # within the limit nothing is dropped
    q5, d5 = fq_codel.overflow(_fill(p, [10, 20, 20, 0]), cls, 50, p)
    assert int(jnp.sum(q5.pkts)) == 50 and int(d5.by_class[0]) == 0


def test_new_flows_go_first_then_deficit_round_robin_in_bytes():
    """A queue with 10 packets on the old list and one that becomes active with 2: the new
    one is served first (its quantum of 1500 bytes covers two 1052-byte packets), then it
    moves to the old list; empty, it leaves the lists when its turn comes."""
    p = _small(pkts_per_tick=4)
    q = _fill(p, [10, 0, 2, 0])
    s = fq_codel.init(p).replace(lst=jnp.asarray([fq_codel.OLD, 0, 0, 0], jnp.int32),
                                deficit=jnp.asarray([1500, 0, 0, 0], jnp.int32))
    s = fq_codel.activate(s, jnp.asarray([2, 4]), jnp.asarray([2, 0]), jnp.asarray([0, 1]), 1500)
    assert int(s.lst[2]) == fq_codel.NEW and int(s.deficit[2]) == 1500
    cls = jnp.zeros((4,), jnp.int32)
    tick_s = float(p.tick_s)
    depart = jax.jit(lambda q, s, t: fq_codel.depart(q, s, cls, t, 0.0, tick_s, jnp.asarray(False), p))
    d = depart(q, s, 1)
    np.testing.assert_array_equal(np.asarray(d.records[:, qm.FLOW]), [2, 2, 0, 0])
    np.testing.assert_array_equal(np.asarray(d.records[:, qm.COUNT]), [1, 1, 1, 1])
    s = d.fq
    assert list(np.asarray(s.lst)[[0, 2]]) == [fq_codel.OLD, fq_codel.OLD]
    assert list(np.asarray(s.pos)[[0, 2]]) == [0, 1]
    assert list(np.asarray(s.deficit)[[0, 2]]) == [1500 - 2 * PKT, 1500 - 2 * PKT + 1500]
    # the next dequeue: flow 0's deficit is spent (a quantum more, to the tail), flow 2 is
    # empty with deficit left (inactive), flow 0 sends
    d2 = depart(d.queues, s, 2)
    np.testing.assert_array_equal(np.asarray(d2.records[:, qm.FLOW]), [0, 0, 0, 0])
    assert int(d2.fq.lst[2]) == fq_codel.INACTIVE and int(d2.served[0]) == 4
    # two backlogged queues share the packets equally (within a quantum)
    q = _fill(p, [200, 200, 0, 0])
    s = fq_codel.activate(fq_codel.init(p), jnp.arange(2), jnp.asarray([200, 200]), jnp.arange(2), 1500)
    sent = np.zeros(2, int)
    for i in range(25):
        d = depart(q, s, i)
        q, s = d.queues, d.fq
        sent += np.bincount(np.asarray(d.records[:, qm.FLOW]), minlength=4)[:2]
    assert sent.sum() == 100 and abs(sent[0] - sent[1]) <= 2


def test_one_flow_is_codel():
    """With one flow, FQ-CoDel is CoDel on one queue: the same drops, marks and queue, tick
    for tick (k = 1), as long as the buffer never overflows (CUBIC's HyStart leaves slow
    start before it does; at the limit CoDel drops the arrival, FQ-CoDel half its queue)."""
    ps = [make_params(**{**scenarios.long_flows(1, 2.0, tcp="cubic", warmup_s=1.0), "policy": pol, "ecn": ecn})
          for ecn in (False, True) for pol in ("codel", "fq-codel")]
    n = sim.ticks_for(4.0, ps[0])
    s = jax.jit(jax.vmap(lambda p: backends.run(sim.init(jax.random.PRNGKey(0), p), p, n, backend="jax")[0]))(
        stack_params(ps))
    m = jax.tree.map(np.asarray, s.metrics)
    out = np.stack([m.tx_total, m.drop_total, m.mark_total, m.deq_total, m.queue_sum[:, 0]], axis=1)
    np.testing.assert_array_equal(out[0], out[1])  # without ECN
    np.testing.assert_array_equal(out[2], out[3])  # with ECN
    assert out[0, 1] > 0 and out[2, 2] > 0, "CoDel never acted"


def _shares(policy, seconds=5.0, warm=2.0, seed=0):
    """One NewReno flow against one that never backs off (its window held at 400 packets,
    more than the path and the buffer of 2 BDPs hold): packets each delivered after warm-up."""
    p = make_params(**{**scenarios.long_flows(2, 2.0, tcp="newreno", long_flow_start_spread_s=0.2, warmup_s=warm),
                       "policy": policy, "pkts_per_tick": 2})
    n, L, row = sim.ticks_for(seconds, p), p.delay_line_ticks, jnp.asarray([0])

    def body(s, _):
        s = sim.tick(s, p)
        fl = tcp.unpack(s.flows.rows(row))
        s = s.replace(flows=s.flows.set_rows(row, tcp.pack(fl.replace(cwnd=jnp.maximum(fl.cwnd, 400.0)))))
        return s, s.wire[(s.tick - 1) % L]

    _, recs = jax.jit(lambda k: jax.lax.scan(body, sim.init(k, p), None, length=n))(jax.random.PRNGKey(seed))
    recs = np.asarray(recs)
    after = (np.arange(n) >= int(warm / float(p.tick_s)))[:, None] & (recs[..., qm.COUNT] > 0)
    return np.asarray([recs[..., qm.COUNT][after & (recs[..., qm.FLOW] == f)].sum() for f in range(2)], float)


def _jain(x):
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def test_flows_get_equal_shares_whatever_their_aggressiveness():
    fq, dt = _shares("fq-codel"), _shares("droptail")
    assert _jain(fq) > 0.95 and fq[1] / fq.sum() > 0.4, fq
    assert _jain(dt) < 0.85 and dt[1] / dt.sum() < 0.3, dt  # droptail: the buffer is the aggressive flow's


def _sojourns(policy, seconds=6.0, warm=3.0, n=4, seed=0):
    """Four long NewReno flows (2 BDPs of buffer) and sparse flows of 1-3 packets, 10 a
    second: the sojourn (s) of every packet that left after warm-up, per long flow and for
    the sparse flows' packets."""
    sparse = traffic.SizeTable(size_bytes=np.asarray([1000.0, 3000.0]), cdf=np.asarray([0.0, 1.0]), name="sparse")
    p = make_params(**{**scenarios.long_flows(n, 2.0, tcp="newreno", long_flow_start_spread_s=0.5, warmup_s=warm),
                       "policy": policy, "pkts_per_tick": 2, "load": 0.0016, "cdf": sparse, "num_flow_slots": 12})
    T, L = sim.ticks_for(seconds, p), p.delay_line_ticks
    run = jax.jit(lambda k: backends.run(sim.init(k, p), p, T, trace_fn=lambda s: s.wire[(s.tick - 1) % L], backend="jax"))
    _, recs = run(jax.random.PRNGKey(seed))
    recs = np.asarray(recs)
    t = np.arange(T)[:, None] + np.zeros((1, p.pkts_per_tick), int)
    soj = (t - recs[..., qm.ENQ]) * float(p.tick_s)
    ok = (t >= int(warm / float(p.tick_s))) & (recs[..., qm.COUNT] > 0)
    flow = recs[..., qm.FLOW]
    return p, [soj[ok & (flow == f)] for f in range(n)], soj[ok & (flow >= n)]


def test_sparse_flows_skip_the_queue_and_each_long_flow_is_held_near_target():
    p, longs, sparse = _sojourns("fq-codel")
    target = float(p.codel_target_s)
    assert len(sparse) > 30
    # new flows' packets go first: next to no queueing for the sparse flows
    assert sparse.mean() < 0.05 * target, sparse.mean()
    for s in longs:  # each long flow's own CoDel keeps its standing queue around the target
        assert 0.15 * target < s.mean() < 1.5 * target, s.mean()
        assert np.percentile(s, 99) < 4 * target
    _, longs_dt, sparse_dt = _sojourns("droptail")
    assert sparse_dt.mean() > 3 * target and min(s.mean() for s in longs_dt) > 3 * target


def test_memory_only_where_flow_queues_are_used():
    p = make_params(policy="droptail")
    s = jax.eval_shape(lambda: sim.init(jax.random.PRNGKey(0), p))
    assert p.flow_queue_capacity_pkts == 0  # a placeholder: one queue of one run, 18 numbers in all
    assert sum(x.size for x in jax.tree.leaves((s.flowq, s.aqm.fq_codel))) == 18
    q = make_params(policy="fq-codel", buffer_per_class_pkts=50, num_classes=1, num_flow_slots=8, num_senders=2)
    assert q.flow_queue_capacity_pkts == 51
    assert jax.eval_shape(lambda: sim.init(jax.random.PRNGKey(0), q)).flowq.runs.shape == (8, 51, qm.RUN_FIELDS)


def test_bad_fq_params_name_their_field(capsys):
    with pytest.raises(ValueError, match="fq_quantum_bytes"):
        make_params(policy="fq-codel", fq_quantum_bytes=1000)  # less than one packet (1052 bytes)
    with pytest.raises(ValueError, match="flow_queue_capacity_pkts"):
        make_params(policy="fq-codel", buffer_per_class_pkts=100, num_classes=1, flow_queue_capacity_pkts=50)
    p = make_params(policy="fq-codel", buffer_per_class_pkts=100, num_classes=1)
    with pytest.raises(ValueError, match="flow_queue_capacity_pkts"):
        validate(p.replace(flow_queue_capacity_pkts=10))
    with pytest.raises(ValueError, match="fq_quantum_bytes"):
        validate(p.replace(fq_quantum_bytes=jnp.asarray(500, jnp.int32)))
    from rlbm_jax.cli import simulate as sim_cli

    code = sim_cli.main(["--policy", "fq-codel", "--fq-quantum-bytes", "100", "--seconds", "1", "--seeds", "1",
                         "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--fq-quantum-bytes" in err, err


def test_simulate_cli_runs_fq_codel(tmp_path, monkeypatch):
    from rlbm_jax.cli import simulate as sim_cli

    monkeypatch.setattr(backends, "_default", None)  # (a --backend would set the process's default)
    out = tmp_path / "r.json"
    assert sim_cli.main(["--scenario", "long", "--long-flows", "2", "--policy", "fq-codel", "--seconds", "2",
                         "--seeds", "1", "--no-progress", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["policy"] == "fq-codel" and r["backend"] == "jax"
    assert r["util_wire"] > 0.5 and r["drop_rate"] > 0
