"""Long-lived TCP flows against buffer-sizing theory."""
import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import long_flow_params, metrics as mx, sim, tcp as tcp_mod

SECONDS, WARMUP = 30.0, 5.0


def _run_batch(configs, seconds=SECONDS):
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *configs)
    n = sim.ticks_for(seconds, configs[0])
    keys = jax.random.split(jax.random.PRNGKey(0), len(configs))

    def one(p, k):
        s, _ = sim.run(sim.init(k, p), p, n)
        return mx.summarize(s.metrics, p)

    return jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(stacked, keys))


def sawtooth_utilisation(b):
    """Fluid model of one Reno flow with a buffer of b x BDP (window in BDP units):
    W falls to (1 + b) / 2 after a loss and grows by one segment per RTT; below the BDP
    the link idles in proportion, above it the RTT stretches with the queue."""
    w0, wm = (1 + b) / 2, 1 + b
    lo = min(w0, 1.0)
    num = (1.0 - lo ** 2) / 2 + (wm ** 2 - max(w0, 1.0) ** 2) / 2
    den = (1.0 - lo) + (wm ** 2 - max(w0, 1.0) ** 2) / 2
    return num / den


def test_one_newreno_flow_small_and_large_buffer():
    kw = dict(tcp="newreno", warmup_s=WARMUP, queue_capacity_pkts=400)
    configs = [long_flow_params(1, 0.1, **kw), long_flow_params(1, 1.5, **kw)]
    r = _run_batch(configs)
    small, large = r["util_wire"]
    assert 0.75 <= small <= 0.85, small
    assert abs(small - sawtooth_utilisation(0.1)) < 0.03, (small, sawtooth_utilisation(0.1))
    assert large >= 0.98, large
    assert r["drops_c0"][0] > 0  # the small buffer really overflows


def test_sixteen_cubic_flows_with_bdp_over_sqrt_n():
    n = 16
    kw = dict(warmup_s=WARMUP, long_flow_start_spread_s=0.0)
    configs = [long_flow_params(n, 1 / np.sqrt(n), tcp="cubic", **kw),
               long_flow_params(n, 1 / np.sqrt(n), tcp="newreno", **kw)]
    r = _run_batch(configs)
    cubic, newreno = r["util_wire"]
    assert cubic >= 0.95, cubic
    # NewReno flows that start together synchronise (as in ns-3); reported, not forced
    print(f"16 flows, BDP/sqrt(N): cubic {cubic:.3f}  newreno {newreno:.3f}")
    assert 0.6 < newreno <= 1.0


def test_access_link_limits_and_shares_its_rate():
    """A sender's access link carries its rate, fractions of a packet per tick included,
    and its flows share it: one flow behind a 62.5 Mbit/s link at 4 packets per tick
    (2.5 per tick) uses 62.5 % of a 100 Mbit/s bottleneck; two flows on one sender
    whose link is as fast as the bottleneck fill it."""
    kw = dict(warmup_s=2.0, queue_capacity_pkts=300, bottleneck_delay_s=2e-3, num_flow_slots=2, num_senders=1,
              delay_line_ticks=40)
    a = long_flow_params(1, 2.0, access_rate_bps=62.5e6, pkts_per_tick=4, **kw)
    b = long_flow_params(2, 2.0, access_rate_bps=62.5e6, pkts_per_tick=4, **kw)
    c = long_flow_params(2, 2.0, access_rate_bps=100e6, pkts_per_tick=4, **kw)
    r = _run_batch([a, b, c], seconds=8.0)
    limited, shared, full = r["util_wire"]
    assert abs(limited - 0.625) < 0.03, limited
    assert abs(shared - 0.625) < 0.03, shared
    assert full > 0.97, full


def test_slow_start_growth_per_round_trip_with_delayed_acks():
    """ns-3.37 with DelAckCount = 2: NewReno adds a segment per ACK (x1.5 per round trip),
    CUBIC counts the segments each ACK covers (x2 per round trip)."""
    factors = {}
    for tcp in ("newreno", "cubic"):
        p = long_flow_params(1, 4.0, tcp=tcp, delayed_ack=2, hystart=False, long_flow_start_spread_s=0.0)
        rtt_ticks = int(round(float(p.base_rtt_s) / float(p.tick_s)))
        advance = jax.jit(lambda s: sim.run(s, p, rtt_ticks)[0])
        state, cwnd = sim.init(jax.random.PRNGKey(0), p), []
        for _ in range(12):
            state = advance(state)
            cwnd.append(float(tcp_mod.column(state.flows, "cwnd")[0]))
        cwnd = np.asarray(cwnd)
        ratios = cwnd[1:] / cwnd[:-1]
        growing = (cwnd[:-1] >= 12) & (cwnd[1:] < 0.5 * float(p.bdp_pkts))  # past IW, no queue yet
        assert growing.sum() >= 2, cwnd
        factors[tcp] = float(np.median(ratios[growing]))
    assert abs(factors["newreno"] - 1.5) < 0.12, factors
    assert abs(factors["cubic"] - 2.0) < 0.15, factors


def test_newreno_congestion_avoidance_adds_whole_bytes_like_ns3():
    """ns-3.37 TcpNewReno adds max(1, floor(MSS^2 / cwnd)) bytes per ACK: at 400 segments of
    1000 bytes that is 2 bytes, a fifth less than the textbook 1/cwnd segment."""
    p = long_flow_params(1, 1.0, tcp="newreno", mss_bytes=1000)
    fl = tcp_mod.init_flows(1).replace(
        active=jnp.array([True]), size_pkts=jnp.array([tcp_mod.BIG_PKTS]), cwnd=jnp.array([400.0]),
        ssthresh=jnp.array([100.0]), outstanding=jnp.array([400]), tx_next=jnp.array([400]),
        srtt_s=jnp.array([0.02]), rttvar_s=jnp.array([0.001]), rto_s=jnp.array([0.2]))
    one = jnp.array([1])
    zero = jnp.array([0])
    out = tcp_mod.on_acks(fl, jnp.int32(10), one, zero, zero, jnp.array([0]), jnp.array([0.02]), p,
                          float(p.tick_s))
    # float32 resolves 400 + 0.002 to about 3e-5; the textbook rule would add 0.0025
    np.testing.assert_allclose(float(out.cwnd[0]) - 400.0, 2.0 / 1000.0, rtol=0.05)
    # CUBIC is unaffected by the NewReno rule: its increment comes from the cubic
    out_c = tcp_mod.on_acks(fl, jnp.int32(10), one, zero, zero, jnp.array([0]), jnp.array([0.02]),
                            p.replace(tcp_id=jnp.int32(tcp_mod.CUBIC)), float(p.tick_s))
    assert float(out_c.cwnd[0]) != float(out.cwnd[0])


def test_only_the_first_partial_ack_restarts_the_rto_in_recovery():
    """ns-3.37 (RFC 6582's impatient timer): in fast recovery only the first partial ACK
    restarts the retransmission timer, so a recovery that outlasts one RTO after it times
    out; outside recovery every advancing ACK restarts it."""
    p = long_flow_params(1, 1.0, tcp="newreno", mss_bytes=1000)
    tick_s = float(p.tick_s)
    fl = tcp_mod.init_flows(1).replace(
        active=jnp.array([True]), size_pkts=jnp.array([tcp_mod.BIG_PKTS]), cwnd=jnp.array([50.0]),
        ssthresh=jnp.array([50.0]), outstanding=jnp.array([100]), tx_next=jnp.array([110]),
        lost_q=jnp.array([5]), state=jnp.array([tcp_mod.RECOVERY]), recover_fs=jnp.array([105.0]),
        srtt_s=jnp.array([0.02]), rttvar_s=jnp.array([0.001]), rto_s=jnp.array([0.2]),
        rto_deadline=jnp.array([1]))
    one, zero = jnp.array([1]), jnp.array([0])

    def ack(f, t):
        return tcp_mod.on_acks(f, jnp.int32(t), one, zero, zero, jnp.array([0]), jnp.array([0.02]), p, tick_s)

    first = ack(fl, 10)
    assert int(first.state[0]) == tcp_mod.RECOVERY and bool(first.rec_partial[0])
    armed = int(first.rto_deadline[0])
    assert armed > 10
    later = ack(first, 20)  # a later partial ACK leaves the timer where the first one set it
    assert int(later.rto_deadline[0]) == armed
    _, fired = tcp_mod.on_timeouts(later, jnp.int32(armed), p, tick_s)
    assert bool(fired[0])
    # the full ACK that ends recovery restarts it, and so does every advancing ACK in OPEN
    done = ack(later.replace(lost_q=jnp.array([0])), 30)
    assert int(done.state[0]) == tcp_mod.OPEN and int(done.rto_deadline[0]) > armed
    opened = ack(done, 40)
    assert int(opened.rto_deadline[0]) > int(done.rto_deadline[0])
    # entering a new recovery clears the mark
    again = tcp_mod.on_acks(opened.replace(undet=jnp.array([3]), undet_tx=jnp.array([60])), jnp.int32(50), one,
                            zero, one, jnp.array([70]), jnp.array([0.02]), p, tick_s)
    assert int(again.state[0]) == tcp_mod.RECOVERY and not bool(again.rec_partial[0])


def test_cubic_target_and_cnt_are_whole_segments_like_ns3():
    """ns-3.37 TcpCubic::Update truncates C |t - K|^3 to whole segments and divides
    integers: after a loss at 5 segments (ssthresh 3, W_max 5, K = 1.71 s) the target
    is 4 at once (cnt 3), then W_max once C |t - K|^3 < 1 (t > K - 1.357 s); a
    continuous curve would ask for ~40 ACKs per segment at first."""
    p = long_flow_params(1, 1.0, tcp="cubic", mss_bytes=1000)
    tick_s = float(p.tick_s)
    fl = tcp_mod.init_flows(1).replace(cwnd=jnp.array([3.0]), w_max=jnp.array([5.0]),
                                       delay_min_s=jnp.array([0.02]), epoch_start=jnp.array([-1]))
    at = lambda s: jnp.int32(round(s / tick_s))
    cnt, epoch, k, origin = tcp_mod._cubic_cnt(fl, at(1.0), p, tick_s)
    assert (float(cnt[0]), float(origin[0])) == (3.0, 5.0)
    np.testing.assert_allclose(float(k[0]), (2 / 0.4) ** (1 / 3), rtol=1e-5)
    run = fl.replace(epoch_start=epoch, cubic_k_s=k, cubic_origin=origin)
    assert float(tcp_mod._cubic_cnt(run.replace(cwnd=jnp.array([4.0])), at(1.1), p, tick_s)[0][0]) == 400.0
    assert float(tcp_mod._cubic_cnt(run.replace(cwnd=jnp.array([4.0])), at(1.4), p, tick_s)[0][0]) == 4.0
    # the counter: every ACK adds at most one segment, the rest waits (never reset)
    cwnd, bank = tcp_mod._cubic_grow(jnp.array([3.0]), jnp.array([0]), jnp.array([2]), 1.0, cnt)
    assert (float(cwnd[0]), int(bank[0])) == (3.0, 2)
    cwnd, bank = tcp_mod._cubic_grow(cwnd, bank, jnp.array([5]), 1.0, cnt)
    assert (float(cwnd[0]), int(bank[0])) == (4.0, 4)


def test_cubic_leaves_recovery_one_segment_above_ssthresh_like_ns3():
    """ns-3.37 passes the ACK that ends fast recovery to CUBIC in OPEN: cwnd = ssthresh,
    then the new epoch's cnt (= ssthresh: the truncated target is ssthresh + 1) is met by
    that ACK's cumulative advance, the flight at the loss."""
    p = long_flow_params(1, 1.0, tcp="cubic", mss_bytes=1000)
    fl = tcp_mod.init_flows(1).replace(
        active=jnp.array([True]), size_pkts=jnp.array([tcp_mod.BIG_PKTS]), cwnd=jnp.array([3.0]),
        ssthresh=jnp.array([3.0]), w_max=jnp.array([5.0]), state=jnp.array([tcp_mod.RECOVERY]),
        recover_fs=jnp.array([5.0]), retx_out=jnp.array([1]), outstanding=jnp.array([3]), tx_next=jnp.array([8]),
        srtt_s=jnp.array([0.02]), rttvar_s=jnp.array([0.001]), rto_s=jnp.array([0.2]), delay_min_s=jnp.array([0.02]))
    one = jnp.array([1])
    out = tcp_mod.on_acks(fl, jnp.int32(1000), one, one, jnp.array([0]), jnp.array([7]), jnp.array([0.02]), p,
                          float(p.tick_s))
    assert int(out.state[0]) == tcp_mod.OPEN
    assert float(out.cwnd[0]) == 4.0 and int(out.cwnd_cnt[0]) == 2
