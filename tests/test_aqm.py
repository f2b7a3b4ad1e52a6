"""The AQMs (RED, ARED, PIE, CoDel; FQ-CoDel in test_fq_codel.py) and ECN: their rules against theory and ns-3.37's,
the TCP response to marks, and how the backends and the command line treat them."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import backends, metrics as mx, sim, tcp
from rlbm_jax.env.switch import queue as qm
from rlbm_jax.env.switch.disciplines import codel, pie, red
from rlbm_jax.env.params import ared_defaults, make_params, rederive, stack_params


def _params(policy="red", **kw):
    return make_params(num_classes=1, policy=policy, **kw)


def test_red_average_is_the_per_packet_ewma():
    p = _params(red_weight=0.01)
    s = red.RED.init(p).replace(red_avg=jnp.asarray([50.0]), red_idle_s=jnp.asarray([-1.0]))
    q, n, ticks = 10, 3, 40
    for _ in range(ticks):
        s, _ = red.RED.on_enqueue(s, jnp.asarray([n]), jnp.asarray([q]), jnp.asarray([0.5]), 1.0, p)
    want = q + (50.0 - q) * (1 - 0.01) ** (n * ticks)
    assert float(s.red_avg[0]) == pytest.approx(want, rel=1e-4)
    # an idle queue's average decays as if (idle time x link packet rate) packets of 0 arrived
    s0 = red.RED.init(p).replace(red_avg=jnp.asarray([50.0]), red_idle_s=jnp.asarray([0.0]))
    s1, _ = red.RED.on_enqueue(s0, jnp.asarray([1]), jnp.asarray([0]), jnp.asarray([0.5]), 0.1, p)
    m = 0.1 * float(p.bottleneck_rate_bps / p.data_pkt_bits)
    assert float(s1.red_avg[0]) == pytest.approx(50.0 * 0.99 ** (m + 1), rel=1e-3)


def _decision_rate(disc, p, avg_or_none, n_per_tick, ticks, q, seed=0):
    s = disc.init(p)
    if avg_or_none is not None:
        s = s.replace(red_avg=jnp.asarray([avg_or_none]), red_idle_s=jnp.asarray([-1.0]))
    if disc is pie.PIE:  # a fixed probability, no burst allowance, a delay above half the target
        s = s.replace(pie_p=jnp.asarray([0.05]), pie_burst_s=jnp.asarray([0.0]),
                      pie_burst_state=jnp.asarray([pie.IN_BURST]), pie_next_s=jnp.asarray([1e9]),
                      pie_qdelay_old_s=jnp.asarray([1.0]))
    us = jax.random.uniform(jax.random.PRNGKey(seed), (ticks, 1))

    def body(s, u):
        s, h = disc.on_enqueue(s, jnp.asarray([n_per_tick]), jnp.asarray([q]), u, 1.0, p)
        return s, h.count[0]

    _, counts = jax.lax.scan(body, s, us)
    return float(jnp.sum(counts)) / (ticks * n_per_tick)


@pytest.mark.parametrize("n_per_tick", [1, 5])
def test_red_decisions_follow_ns3_count_rule(n_per_tick):
    """ns-3's RED with Wait drops a packet at count c with probability p_b / (2 - c p_b)
    (c p_b in [1, 2)): one decision per 1.5 / p_b packets on average."""
    p = _params(red_min_th_pkts=10.0, red_max_th_pkts=30.0, red_max_p=0.1, red_weight=1e-9)
    avg = 20.0  # p_b = 0.05, constant (the average cannot move)
    rate = _decision_rate(red.RED, p, avg, n_per_tick, 20000 // n_per_tick * 4, q=20)
    assert rate == pytest.approx(0.05 / 1.5, rel=0.06)


@pytest.mark.parametrize("n_per_tick", [1, 5])
def test_red_drops_a_syn_as_often_as_data_under_the_count_rule(n_per_tick):
    """A SYN is one more packet of ns-3's count (params.red_syn "count"): its drop chance at
    a Poisson moment (here the start of each tick), averaged over the run, equals the data's
    decision rate, 2 p_b / 3 at a steady p_b, where the base probability p_b ("base", before
    0.5) loses SYNs 1.5 times as often."""
    for rule, want in (("count", 0.05 / 1.5), ("base", 0.05)):
        p = _params(red_min_th_pkts=10.0, red_max_th_pkts=30.0, red_max_p=0.1, red_weight=1e-9, red_syn=rule)
        s = red.RED.init(p).replace(red_avg=jnp.asarray([20.0]), red_idle_s=jnp.asarray([-1.0]))
        us = jax.random.uniform(jax.random.PRNGKey(3), (20000 // n_per_tick * 4, 1))

        def body(s, u):
            s, h = red.RED.on_enqueue(s, jnp.asarray([n_per_tick]), jnp.asarray([20]), u, 1.0, p)
            return s, (h.count[0], h.syn_p[0])

        _, (counts, syn_p) = jax.lax.scan(body, s, us)
        data_rate = float(jnp.sum(counts)) / (us.shape[0] * n_per_tick)
        assert data_rate == pytest.approx(0.05 / 1.5, rel=0.06)
        assert float(jnp.mean(syn_p)) == pytest.approx(want, rel=0.06), rule
        # no SYN is dropped while the count is below 1 / p_b packets (the Wait rule)
        if rule == "count":
            assert float(jnp.min(syn_p)) == 0.0 and float(jnp.max(syn_p)) <= 1.0


def test_pie_decisions_are_independent_with_its_probability():
    p = _params("pie")
    rate = _decision_rate(pie.PIE, p, None, 2, 40000, q=50)
    assert rate == pytest.approx(0.05, rel=0.06)


def test_red_forced_region_drops_everything_and_never_below_min_th():
    p = _params(red_min_th_pkts=10.0, red_max_th_pkts=20.0, red_weight=1e-9)
    s = red.RED.init(p).replace(red_avg=jnp.asarray([45.0]), red_idle_s=jnp.asarray([-1.0]))
    _, h = red.RED.on_enqueue(s, jnp.asarray([7]), jnp.asarray([45]), jnp.asarray([0.3]), 1.0, p)
    assert bool(h.forced[0]) and float(h.syn_p[0]) == 1.0  # gentle: at or above 2 max_th
    assert _decision_rate(red.RED, p, 5.0, 4, 2000, q=5) == 0.0


@pytest.mark.parametrize("q,n", [(30, 14), (35, 10), (39, 3), (40, 1), (41, 5), (20, 8), (0, 30), (60, 4)])
def test_step_marking_decides_each_arrival_on_the_queue_it_finds(q, n):
    """DCTCP's step marking (weight 1, max_p 1, K = 40): as ns-3 decides each packet on the
    queue it finds, the tick's earlier arrivals included, a tick that starts below K marks
    its arrivals from the one that finds max_th = K + 1 packets on (the whole tick was
    once judged on the queue at its start)."""
    k = 40.0
    p = _params(red_min_th_pkts=k, red_max_th_pkts=k + 1, red_max_p=1.0, red_weight=1.0)
    s = red.RED.init(p).replace(red_idle_s=jnp.asarray([-1.0]))
    _, h = red.RED.on_enqueue(s, jnp.asarray([n]), jnp.asarray([q]), jnp.asarray([0.3]), 1.0, p)
    hit = np.zeros(n, bool)
    for i in range(int(h.count[0])):
        hit[int(h.first[0]) + int(np.floor(i * float(h.spacing[0])))] = True
    # per packet: the queue it finds is q + i; at or above max_th the gentle line starts at
    # max_p = 1, so it is hit; at min_th RED's line gives 0
    want = np.array([q + i >= k + 1 for i in range(n)])
    assert not bool(h.forced[0])
    np.testing.assert_array_equal(hit, want)


def test_ared_defaults_follow_ns3():
    lo, hi, w = ared_defaults(100e6, 1000)
    ptc = 100e6 / (1054 * 8)
    assert lo == pytest.approx(max(5.0, 0.005 * ptc / 2)) and hi == pytest.approx(3 * lo)
    assert w == pytest.approx(1 - math.exp(-1 / ptc))
    p = make_params(num_classes=1, policy="ared")
    assert float(p.red_min_th_pkts) == pytest.approx(max(5.0, 0.005 * 10e6 / (1054 * 8) / 2), rel=1e-6)


def test_codel_drop_times_follow_the_control_law():
    """A standing sojourn above target: the first drop one interval after the sojourn went
    above it, then the n-th next one interval / sqrt(n) later (RFC 8289)."""
    p = _params("codel", codel_interval_s=0.1, codel_target_s=0.005)
    s = codel.CODEL.init(p)
    dt, times = 1e-3, []
    for i in range(600):
        now = i * dt
        s, act = codel.CODEL.on_dequeue(s, jnp.asarray([0.02]), jnp.asarray([50]), jnp.asarray([True]),
                                        jnp.asarray([False]), now, p)
        if bool(act[0]):
            times.append(now)
    assert times[0] == pytest.approx(0.1, abs=1.5 * dt)
    gaps = np.diff(times)
    want = [0.1 / math.sqrt(c) for c in range(1, 1 + len(gaps))]  # count 1 when the state is entered
    np.testing.assert_allclose(gaps, want, atol=1.5 * dt)
    # a sojourn under target ends the dropping state
    s, act = codel.CODEL.on_dequeue(s, jnp.asarray([0.001]), jnp.asarray([50]), jnp.asarray([True]),
                                    jnp.asarray([False]), 0.601, p)
    assert not bool(act[0]) and not bool(s.codel_dropping[0])


# the long-flow runs of the tests below: PIE and CoDel (each held near its target) and RED without
# ECN (early drops), one batch (the policy and its settings are traced parameters), run once
LONG_RUNS = {"pie": dict(policy="pie"), "codel": dict(policy="codel"),
             "red": dict(policy="red", red_min_th_pkts=10.0, red_max_th_pkts=30.0, red_max_p=0.1)}


@pytest.fixture(scope="module")
def long_runs():
    """{name: (params, final state)} of LONG_RUNS: 4 NewReno flows, 2 BDPs of buffer, no ECN,
    12 s (seed 3)."""
    ps = [make_params(**{**scenarios.long_flows(4, 2.0, tcp="newreno", long_flow_start_spread_s=0.5, warmup_s=4.0),
                         "ecn": False, "pkts_per_tick": 2, **kw}) for kw in LONG_RUNS.values()]
    n_ticks = sim.ticks_for(12.0, ps[0])
    fn = jax.jit(jax.vmap(lambda k, p: backends.run(sim.init(k, p), p, n_ticks, backend="jax")[0]))
    s = fn(jnp.stack([jax.random.PRNGKey(3)] * len(ps)), stack_params(ps))
    return {name: (p, jax.tree.map(lambda x, i=i: x[i], s)) for i, (name, p) in enumerate(zip(LONG_RUNS, ps))}


@pytest.mark.parametrize("policy,target", [("pie", 0.015), ("codel", 0.005)])
def test_delay_aqms_hold_the_queue_near_their_target(policy, target, long_runs):
    p, s = long_runs[policy]
    rep = mx.summarize(s.metrics, p)
    delay = float(rep["queue_mean_pkts"]) * float(p.data_pkt_bits / p.bottleneck_rate_bps)
    assert 0.4 * target < delay < 2.5 * target, delay
    assert float(rep["util_wire"]) > 0.95
    assert int(s.metrics.mark_total) == 0 and int(s.metrics.drop_total) > 0


def test_ecn_marks_replace_drops_and_cut_once_per_window():
    """RED with ECN: the flows react to marks, nothing is dropped after the start, and a
    flow cuts its window (enters CWR) at most once per round trip."""
    p = make_params(**{**scenarios.long_flows(2, 2.0, tcp="newreno", long_flow_start_spread_s=0.2, warmup_s=3.0),
                       "policy": "red", "ecn": True, "red_min_th_pkts": 20.0, "red_max_th_pkts": 60.0,
                       "red_max_p": 0.1, "pkts_per_tick": 2})
    n = sim.ticks_for(8.0, p)

    def trace(s):
        return (tcp.column(s.flows, "state")[:2], tcp.column(s.flows, "ssthresh")[:2],
                tcp.column(s.flows, "cwnd")[:2], s.metrics.drop_total, s.metrics.mark_total)

    run = jax.jit(lambda k: backends.run(sim.init(k, p), p, n, trace_fn=trace, backend="jax"))
    final, (st, ss, cw, drops, marks) = jax.tree.map(np.asarray, run(jax.random.PRNGKey(1)))
    warm = int(3.0 / float(p.tick_s))
    assert marks[-1] > marks[warm] > 0
    assert drops[-1] == drops[warm], "a drop after warm-up with ECN and a buffer that never fills"
    rtt_ticks = float(p.base_rtt_s / p.tick_s)
    for f in range(2):
        enter = np.flatnonzero((st[1:, f] == tcp.CWR) & (st[:-1, f] != tcp.CWR)) + 1
        assert len(enter) >= 3  # NewReno at 100 Mbit/s: a cut every ~1.5 s
        assert np.diff(enter).min() >= rtt_ticks, "two window cuts within one round trip"
        # the cut halves the window (NewReno: ssthresh = flight / 2) and cwnd follows it down
        before = cw[enter - 1, f]
        np.testing.assert_array_less(ss[enter, f], before * 0.6 + 1)


def test_a_run_split_by_the_link_keeps_its_mark_on_the_packet_still_queued():
    """One env, one class, one packet per tick, RED with ECN: the FIFO's head run holds 2
    packets, the last CE-marked.  The link takes the first: it leaves unmarked and the
    packet still queued keeps the mark.  XLA's CPU compiler once fused the tick's two
    dequeues wrongly in exactly these shapes (every axis of the FIFOs of size one, as in one
    env or a batch of one) and zeroed the queued run's CE count: the mark was counted, never
    echoed, and such runs took another regime (3 times the drops in the RED / ECN / 16-flow
    calibration cell, REPORT section 6).  `depart_phase` keeps the two dequeues apart."""
    p = make_params(num_classes=1, load=0.0, policy="red", bottleneck_rate_bps=100e6, bottleneck_delay_s=0.01,
                    access_rate_bps=1e9, tcp="cubic", num_senders=16, num_flow_slots=16, long_flows=16,
                    long_flow_start_spread_s=1.0, buffer_per_class_pkts=119, queue_capacity_pkts=119, ecn=True,
                    red_min_th_pkts=14.875, red_max_th_pkts=44.625, red_max_p=0.1, pkts_per_tick=1)
    s = sim.init(jax.random.PRNGKey(1), p)
    q = s.queue
    run = np.zeros(qm.RUN_FIELDS, np.int32)
    run[[qm.FLOW, qm.COUNT, qm.NCE]] = (0, 2, 1)
    s = s.replace(queue=q.replace(runs=q.runs.at[0, 0].set(jnp.asarray(run)), nruns=q.nruns.at[0].set(1),
                                  pkts=q.pkts.at[0].set(2)))
    o = jax.jit(sim.tick)(s, p)
    queued, left = np.asarray(o.queue.runs[0, 0]), np.asarray(o.wire[0, 0])
    assert (queued[qm.COUNT], queued[qm.TX0], queued[qm.NCE]) == (1, 1, 1), queued
    assert (left[qm.COUNT], left[qm.NCE]) == (1, 0), left
    assert int(o.metrics.mark_total) == int(s.metrics.mark_total)  # nothing new marked: the queue is below min_th


def test_without_ecn_the_aqm_drops_early_and_never_marks(long_runs):
    p, s = long_runs["red"]
    assert int(s.metrics.mark_total) == 0 and int(s.metrics.drop_total) > 0
    # the drops are early: the queue stays far below the buffer
    assert float(mx.summarize(s.metrics, p)["queue_p99_pkts"]) < 0.5 * int(p.buffer_pkts)


def test_native_backend_refuses_the_aqms_it_lacks_and_auto_falls_back():
    from rlbm_jax.env.backends import native

    for kw in (dict(policy="codel"), dict(policy="fq-codel"), dict(policy="pie", ecn=True)):
        p = make_params(**kw)
        assert not native.supports(p)
        assert backends.resolve("auto", p) == "jax"
        with pytest.raises(ValueError, match="native"):
            native.check_params(p)


def test_simulate_cli_runs_an_aqm_with_ecn(tmp_path, monkeypatch, capsys):
    from rlbm_jax.cli import simulate as sim_cli

    monkeypatch.setattr(backends, "_default", None)  # (a --backend would set the process's default)
    out = tmp_path / "r.json"
    assert sim_cli.main(["--scenario", "long", "--long-flows", "4", "--policy", "codel", "--ecn", "--seconds", "3",
                         "--seeds", "1", "--no-progress", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["policy"] == "codel" and r["config"]["ecn"] is True
    assert r["mark_rate"] > 0
    capsys.readouterr()
    code = sim_cli.main(["--policy", "red", "--red-max-p", "1.5", "--seconds", "1", "--seeds", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and ("red_max_p" in err or "--red-max-p" in err), err


def test_dctcp_alpha_tracks_the_marked_fraction_and_keeps_the_queue_near_k():
    """DCTCP over step marking at K (RED on the instantaneous queue, every packet above K):
    each flow's alpha estimates the fraction of its segments that come back marked, and
    the cuts in proportion to it keep the link full with the queue near K (Alizadeh et al.)."""
    k = 40.0
    p = make_params(**{**scenarios.long_flows(8, 2.0, tcp="dctcp", long_flow_start_spread_s=0.5, warmup_s=4.0),
                       "policy": "red", "red_min_th_pkts": k, "red_max_th_pkts": k + 1, "red_weight": 1.0,
                       "red_max_p": 1.0, "pkts_per_tick": 2})
    assert bool(p.ecn)  # DCTCP turns ECN on
    n = sim.ticks_for(10.0, p)
    # NewReno on the same marks in the same batch (the TCP is a traced parameter)
    p_nr = rederive(p.replace(tcp_id=jnp.asarray(0, jnp.int32)))  # (its record then names NewReno's code)
    both = jax.jit(jax.vmap(lambda key, q: backends.run(sim.init(key, q), q, n, backend="jax")[0]))(
        jnp.stack([jax.random.PRNGKey(1)] * 2), stack_params([p, p_nr]))
    s, s_nr = (jax.tree.map(lambda x, i=i: x[i], both) for i in (0, 1))
    rep = mx.summarize(s.metrics, p)
    alpha = np.asarray(tcp.column(s.flows, "dctcp_alpha"))[:8]
    assert float(rep["util_wire"]) > 0.98 and float(rep["drop_rate"]) == 0.0  # (slow start drops, before warm-up)
    assert 0.5 * k < float(rep["queue_mean_pkts"]) < 1.5 * k
    np.testing.assert_allclose(alpha.mean(), float(rep["mark_rate"]), rtol=0.4)
    # NewReno halving on the same marks leaves the link idle part of the time
    assert float(mx.summarize(s_nr.metrics, p_nr)["util_wire"]) < float(rep["util_wire"]) - 0.05
