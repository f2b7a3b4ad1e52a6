"""Incast (query-response) traffic: every response of every query accounted for, the
responses of a query timed from it and from distinct senders, the web-search draws left as
they were, and the backends and ns-3 that lack it refusing it."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import backends, incast, make_params, sim, thesis_params
from rlbm_jax.env import metrics as mx
from rlbm_jax.ns3 import harness

FAN_IN, RESPONSE_B, SECONDS = 6, 12_000.0, 6.0


def _params(**kw):
    # a light load and a table large enough that every response and arrival starts
    return thesis_params(incast_fan_in=FAN_IN, incast_query_rate_per_s=3.0, incast_response_bytes=RESPONSE_B,
                         load=0.3, arrival_stop_s=1e9, num_flow_slots=96, buffer_per_class_pkts=200,
                         completion_log_size=512, **kw)


@pytest.fixture(scope="module")
def runs():
    p = _params()
    n = sim.ticks_for(SECONDS, p)
    fn = jax.jit(jax.vmap(lambda k: sim.run(sim.init(k, p), p, n)[0]))
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (0, 1, 0)])
    return p, jax.device_get(fn(keys))


def _one(states, i):
    return jax.tree_util.tree_map(lambda x: x[i], states)


def test_every_response_of_every_query_is_accounted_for(runs):
    p, st = runs
    for i in range(2):
        s = _one(st, i)
        inc, m = s.incast, s.metrics
        assert int(inc.queries) > 5
        # a taken query's responses have started, been refused, or wait their tick
        assert int(inc.responses) + int(inc.refused) + int(inc.pending) == FAN_IN * int(inc.queries)
        assert int(inc.refused) == 0 and int(m.flows_refused) == 0  # the table never filled here
        # the run's starts are the long flows, the web-search arrivals and the responses
        rows = np.asarray(m.log)[:int(m.log_count)]
        is_resp = rows[:, 0] == RESPONSE_B
        assert int(m.log_overflow) == 0 and is_resp.sum() <= int(inc.responses)
        # the queries come at their rate (Poisson: within 4 sigma)
        lam = 3.0 * SECONDS
        assert abs(int(inc.queries) - lam) < 4 * np.sqrt(lam) + 1


def test_responses_are_timed_from_their_query_and_come_from_distinct_senders(runs):
    p, st = runs
    s = _one(st, 0)
    rows = np.asarray(s.metrics.log)[:int(s.metrics.log_count)]
    resp = rows[rows[:, 0] == RESPONSE_B]
    # a query's responses share its time as their start: the finished ones group by it
    starts, counts = np.unique(resp[:, mx.LOG_FIELDS.index("start_s")], return_counts=True)
    assert counts.max() == FAN_IN and np.mean(counts == FAN_IN) > 0.8
    # consecutive queries are apart by exponential gaps (not a tick each)
    assert np.min(np.diff(starts)) > 0
    # the senders of one query: a take hands out fan_in consecutive distinct senders
    inc = incast.IncastState(*(jnp.zeros((), jnp.float32 if f in ("query_s", "next_query_s") else jnp.int32)
                               for f in incast.IncastState.__dataclass_fields__))
    inc, due = incast.take_query(inc, jnp.uint32(7), 0.0, 1e-3, p)
    assert bool(due) and int(inc.pending) == FAN_IN
    senders = []
    for _ in range(FAN_IN):
        senders.append(int(inc.sender))
        inc = incast.after_start(inc, jnp.asarray(True), jnp.asarray(True), p)
    assert len(set(senders)) == FAN_IN and int(inc.pending) == 0 and int(inc.responses) == FAN_IN
    assert not bool(incast.take_query(inc, jnp.uint32(7), 0.0, 1e-3, p)[1])  # the next query is later


def test_web_search_arrivals_keep_their_draws_and_runs_are_seeded(runs):
    p, st = runs
    s0, s1, again = (_one(st, i) for i in range(3))
    for a, b in zip(jax.tree_util.tree_leaves(s0), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(s0.metrics.log), np.asarray(s1.metrics.log))
    # the web-search flows that finished started at the arrival times the schedule draws
    # without incast (their own hash stream), each at its own exact time
    start, _, size = jax.device_get(sim.flow_schedule(jax.random.PRNGKey(0), p, 200))
    rows = np.asarray(s0.metrics.log)[:int(s0.metrics.log_count)]
    web = rows[rows[:, 0] != RESPONSE_B]
    assert len(web) > 3
    for r in web:
        hit = np.isclose(start, r[mx.LOG_FIELDS.index("start_s")], atol=1e-6)
        assert hit.any() and np.isclose(size[hit][0], r[0], rtol=1e-5)


def test_a_full_table_refuses_responses_counted_and_leaves_the_web_draws_in_place():
    """Few flow slots and bursts larger than them: responses are refused and counted, queries
    fall while responses wait, web arrivals meet responses in the same tick; every start is
    accounted for (long flows, web arrivals, responses) and the web flows that finished still
    started at the arrival times the schedule draws without incast."""
    p = thesis_params(incast_fan_in=10, incast_query_rate_per_s=8.0, incast_response_bytes=30_000.0, load=0.4,
                      arrival="thesis-code", arrival_stop_s=1e9, num_flow_slots=12, long_flows=1,
                      completion_log_size=1024)
    n = sim.ticks_for(4.0, p)
    s = jax.jit(lambda k: sim.run(sim.init(k, p), p, n)[0])(jax.random.PRNGKey(3))
    inc, m = s.incast, s.metrics
    assert int(inc.refused) > 0 and int(m.flows_refused) > int(inc.refused)  # web arrivals refused too
    assert int(inc.responses) + int(inc.refused) + int(inc.pending) == 10 * int(inc.queries)
    web = int(m.flows_started) - int(p.long_flows) - int(inc.responses)  # the web arrivals that started
    web_drawn = web + int(m.flows_refused) - int(inc.refused)
    start, _, size = jax.device_get(sim.flow_schedule(jax.random.PRNGKey(3), p, web_drawn + 1))
    # the arrivals drawn so far are exactly those before the next one the state holds
    np.testing.assert_allclose(float(s.next_arrival_s), start[web_drawn], rtol=1e-6)
    rows = np.asarray(m.log)[:int(m.log_count)]
    done = rows[rows[:, 0] != 30_000.0]
    assert len(done) > 5 and int(m.log_overflow) == 0
    for r in done:
        hit = np.isclose(start, r[mx.LOG_FIELDS.index("start_s")], atol=1e-6)
        assert hit.any() and np.isclose(size[hit][0], r[0], rtol=1e-5)


def test_incast_is_declared_and_refused_where_it_is_not_implemented():
    p = _params()
    s = sim.init(jax.random.PRNGKey(0), p)
    assert backends.resolve("auto", p) == "jax"
    with pytest.raises(ValueError, match="incast_fan_in"):
        backends.run(s, p, 1, backend="native")
    assert "incast_fan_in" in backends.refusal("fluid", p)
    cell = harness.Cell("incast", "thesis", {**scenarios.thesis(), "incast_fan_in": FAN_IN,
                                             "incast_query_rate_per_s": 3.0}, 5.0)
    with pytest.raises(ValueError, match="incast"):
        harness.ns3_args(cell, 0)
    # without incast the state has no incast leaves (the native tick's layout is unchanged)
    assert sim.init(jax.random.PRNGKey(0), thesis_params()).incast is None
    with pytest.raises(ValueError, match="num_senders"):
        make_params(incast_fan_in=11, incast_query_rate_per_s=1.0)
    with pytest.raises(ValueError, match="incast_query_rate_per_s"):
        make_params(incast_fan_in=4)
    with pytest.raises(ValueError, match="incast_fan_in"):
        make_params(incast_query_rate_per_s=2.0)


def test_the_sharing_presets_let_either_class_fill_the_buffer():
    for name, bdps in (("sharing", 1), ("sharing-incast", 2)):
        p = scenarios.params(name)
        b = int(p.buffer_pkts)
        assert np.all(np.asarray(p.class_cap_pkts) == b) and b == round(bdps * float(p.bdp_pkts))
        assert int(p.long_flows) == 2 and float(p.bottleneck_rate_bps) == 100e6
    p = scenarios.params("sharing-incast", buffer_bdp=1.0)
    assert p.incast_fan_in == 16 and int(p.buffer_pkts) == round(float(p.bdp_pkts))
    assert scenarios.params("sharing").incast_fan_in == 0
