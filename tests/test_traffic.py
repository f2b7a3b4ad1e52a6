"""Flow sizes, Poisson arrivals, refused starts and FCTs against theory."""
import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import backends, make_params, sim, thesis_params, traffic


def test_inverse_cdf_sampling_matches_table_mean():
    for name in traffic.BUILTIN_TABLES:
        t = traffic.load_table(name)
        sizes, probs = traffic.pad_table(t)
        u = (jnp.arange(400_000) + 0.5) / 400_000  # stratified: exact up to quadrature error
        draws = jax.vmap(lambda x: traffic.sample_size_bytes(x, jnp.asarray(sizes), jnp.asarray(probs)))(u)
        assert float(jnp.min(draws)) > 0
        np.testing.assert_allclose(float(jnp.mean(draws)), t.mean_bytes, rtol=1e-3)
    assert abs(traffic.load_table("websearch").mean_bytes - 1_711_222.5) < 1.0


def test_hash_uniforms_are_uniform_and_seeded():
    u = jax.vmap(lambda c: traffic.hash_uniform(jnp.uint32(12345), c, 4))(jnp.arange(200_000))
    assert u.shape == (200_000, 4)
    hist, _ = np.histogram(np.asarray(u).ravel(), bins=20, range=(0, 1))
    expected = u.size / 20
    assert ((hist - expected) ** 2 / expected).sum() < 60  # chi2, 19 dof: p ~ 1e-6
    v = jax.vmap(lambda c: traffic.hash_uniform(jnp.uint32(54321), c, 4))(jnp.arange(1000))
    assert not np.allclose(np.asarray(u[:1000]), np.asarray(v))


def _run(p, seconds, seed=0):
    n = sim.ticks_for(seconds, p)
    s, _ = jax.jit(lambda s: backends.run(s, p, n))(sim.init(jax.random.PRNGKey(seed), p))
    return s


def test_poisson_arrivals_and_refused_starts_are_counted():
    # thesis-code arrivals (5 * load flows/s per sender) swamp 8 flow slots
    p = thesis_params(arrival="thesis-code", load=0.4, num_flow_slots=10, completion_log_size=256)
    secs = 20.0
    s = _run(p, secs)
    m = s.metrics
    arrivals = int(m.flows_started) + int(m.flows_refused)
    lam = 5 * 0.4 * 10
    assert abs(arrivals - lam * secs) < 4 * np.sqrt(lam * secs), arrivals
    assert int(m.flows_refused) > 0
    assert int(m.log_overflow) == 0


def test_offered_load_matches_definition():
    p = thesis_params(load=0.5, cdf="datamining", buffer_per_class_pkts=400, arrival_stop_s=1e9)
    rate = float(traffic.arrival_rate_per_s(p))
    mean = traffic.load_table("datamining").mean_bytes
    np.testing.assert_allclose(rate, 0.5 * 10e6 / (8 * mean), rtol=1e-5)


def test_lone_short_flow_fct_matches_path_model():
    """5-packet flows (inside the initial window) on an idle path: FCT = handshake RTT +
    access hop + 5 serialisations + bottleneck propagation."""
    size = 5000.0
    table = traffic.SizeTable(np.array([size, size]), np.array([0.0, 1.0]))
    p = make_params(cdf=table, load=0.01, num_senders=2, num_flow_slots=4, completion_log_size=128)
    s = _run(p, 30.0)
    rec = np.asarray(s.metrics.log)[: int(s.metrics.log_count)]
    assert len(rec) > 20
    ser = float(p.data_pkt_bits / p.bottleneck_rate_bps)
    theory = float(p.base_rtt_s + p.access_offset_s + 5 * ser + p.bottleneck_delay_s)
    fct = rec[:, 2]
    err_ticks = np.abs(fct - theory) / float(p.tick_s)
    # ticks quantise times to one packet time; a flow that overlaps another queues behind it
    assert np.median(err_ticks) < 1.0, (np.median(err_ticks), theory)
    assert np.quantile(err_ticks, 0.9) < 1.5, np.sort(err_ticks)
    ideal = float(p.base_rtt_s) + size * 8 / 10e6
    np.testing.assert_allclose(rec[:, 3], fct / ideal, rtol=1e-5)


def test_many_flows_on_few_slow_senders_all_progress():
    """64 busy slots behind two 20 Mbit/s access links: the access links share their
    packets among their flows and event slots rotate, so nothing starves."""
    p = thesis_params(access_rate_bps=20e6, num_senders=2, arrival="thesis-code", load=0.7)
    s = _run(p, 15.0)
    m = s.metrics
    n = sim.ticks_for(15.0, p)
    assert int(m.deq_total) / n > 0.95  # the bottleneck stays busy
    assert int(m.flows_completed) > 50
    assert int(m.events_deferred) < 0.01 * n


def test_flow_schedule_replays_the_simulators_arrivals():
    # the schedule handed to ns-3 for calibration is exactly what the simulator starts
    p = make_params(load=0.9, buffer_per_class_pkts=100, arrival_stop_s=20.0)
    key = jax.random.PRNGKey(11)
    t, sender, size = (np.asarray(x) for x in sim.flow_schedule(key, p, 64))
    assert np.all(np.diff(t) > 0) and np.all((sender >= 0) & (sender < p.num_senders)) and np.all(size >= 1)
    st = _run(p, 25.0, seed=11)
    m = st.metrics
    assert int(m.flows_started) + int(m.flows_refused) == int(np.sum(t < 20.0))
    log = np.asarray(m.log)[: int(m.log_count)]
    assert len(log) >= 8
    for size_b, _, _, _, start in log:
        i = int(np.argmin(np.abs(t - start)))
        assert abs(t[i] - start) < 1e-5 * max(1.0, start) and abs(size[i] - size_b) < 1e-3 * size_b
    # and the senders spread uniformly over the first 64 arrivals
    assert len(set(sender.tolist())) == p.num_senders


def test_lost_syn_delays_the_connection_by_the_syn_timeout():
    # eight long flows keep a 10-packet buffer full: some new flows' SYNs are lost, and
    # a short flow that lost its SYN waits the timeout before its first data
    base = dict(num_senders=8, num_classes=1, policy="droptail", arrival="thesis-code", load=0.1,
                arrival_stop_s=20.0, tcp="newreno", syn_timeout_s=2.5)
    st = _run(make_params(**base, buffer_per_class_pkts=10, long_flows=8), 30.0, seed=3)
    log = np.asarray(st.metrics.log)[: int(st.metrics.log_count)]
    short = log[:, 0] < 100_000  # about 0.1 s alone on the link
    assert int(st.metrics.syn_drops) > 0
    assert np.sum(short & (log[:, 2] >= 2.5)) >= 1
    assert np.sum(short & (log[:, 2] >= 2.5)) <= int(st.metrics.syn_drops) + np.sum(short) // 2
    assert int(st.metrics.syn_drops) <= int(st.metrics.flows_started)
