"""A time-varying bottleneck capacity (`rlbm_jax.env.capacity`): the link sends what the
schedule offers, tick by tick, at every packets-per-tick setting (departures per segment
are the rate's integral within one packet); packets are conserved across rate changes;
utilisation is against the capacity actually offered; envs with different traces batch in
one vmap; a constant schedule runs bit for bit as none; the backends that do not claim
schedules refuse them by name; the readers (CSV, Mahimahi) and the shipped traces."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.cli import simulate as simulate_cli
from rlbm_jax.env import backends, capacity, make_params, sim, traffic
from rlbm_jax.env import metrics as mx
from rlbm_jax.env.params import pad_params, stack_params, validate

# changes that fall inside ticks at every k, a low segment (0.5 Mbit/s), a repeat at 1.6 s
ODD = capacity.Schedule([0.0, 0.3137, 0.7771, 1.2345], [10e6, 3.3e6, 7.7e6, 0.5e6], 1.6, name="odd")
# an outage (rate 0) between two rates, repeating
OUTAGE = capacity.Schedule([0.0, 0.5, 0.9, 1.7], [8e6, 0.0, 10e6, 2e6], 2.5, name="outage")
# the last rate held for ever (no repeat)
HELD = capacity.from_csv("time_s,rate_bps\n0,6e6\n0.25,9e6\n1.1,4e6\n", name="held")
SMALL_FLOWS = traffic.SizeTable(np.array([1e3, 2e4, 2e5]), np.array([0.0, 0.6, 1.0]), "small")


# ---------------------------------------------------------------------------------------
# departures follow the schedule (a saturated link), utilisation against what it offered
# ---------------------------------------------------------------------------------------

def _mixed(schedule, **kw):
    """A small two-class configuration with `schedule` (k = 7 unless `kw` says otherwise)."""
    base = dict(num_senders=4, num_classes=2, num_flow_slots=16, pkts_per_tick=7, completion_log_size=64,
                buffer_per_class_pkts=[40, 60], cdf=SMALL_FLOWS, class_threshold_bytes=5e4, load=0.3,
                long_flows=0, min_rto_s=0.01)
    return make_params(**{**base, **kw, "capacity_schedule": schedule})


def _busy(**kw):
    """Two classes, short flows above the link's rate and two long flows: drops, timeouts
    (the static sizes and choices of `_saturated(1)`, whose compiled run it shares)."""
    return _mixed(kw.pop("capacity_schedule", "none"), load=1.1, long_flows=2, buffer_per_class_pkts=[30, 50],
                  pkts_per_tick=1, queue_capacity_pkts=1500, policy="droptail", tcp="newreno", **kw)


def _saturated(k):
    """16 long flows with a large initial window into a 1500-packet drop-tail FIFO: the queue
    never empties after the first RTT, so every packet time the link offers is used."""
    return _mixed(ODD, pkts_per_tick=k, buffer_per_class_pkts=[40, 1500], long_flows=16, load=0.0,
                  policy="droptail", initial_cwnd_pkts=100, tcp="newreno", warmup_s=0.3)


def _conservation(s, p):
    m = s.metrics
    return dict(tx=m.tx_total, drop=m.drop_total, deq=m.deq_total, sink=m.sink_total, queued=jnp.sum(s.queue.pkts),
                on_wire=sim.on_wire(s, p), offered=m.offered_total, credit=s.link_credit, qlen=s.queue.pkts)


def _run(p, key, n):
    return sim.run(sim.init(key, p), p, n, trace_fn=lambda s: _conservation(s, p))


RUN = jax.jit(_run, static_argnums=2)  # n ticks of one env, traced
SECONDS = 2.5  # over ODD's repeat at 1.6 s


@pytest.fixture(scope="module", params=[1, 7], ids=["k1", "k7"])
def saturated(request):
    """(params, final state, trace) of the saturated link at k = 1 (run here) and k = 7 (an
    env of the batch below, which runs at k = 7)."""
    if request.param == 7:
        configs, _, _, final, tr, _ = request.getfixturevalue("batch")
        i = SATURATED
        assert configs[i].pkts_per_tick == 7
        return configs[i], jax.tree.map(lambda x: x[i], final), {k: v[i] for k, v in tr.items()}
    p = _saturated(request.param)
    final, tr = RUN(p, jax.random.PRNGKey(0), sim.ticks_for(SECONDS, p))
    return p, final, jax.tree.map(np.asarray, tr)


def test_departures_follow_the_schedule(saturated):
    p, _, tr = saturated
    tick, bits = float(p.tick_s), float(p.data_pkt_bits)
    ends = (np.arange(tr["deq"].size) + 1) * tick
    # the packet times offered by the end of every tick (plus the credit carried) are the
    # schedule's integral, to float32 rounding
    want = np.array([ODD.bits_between(0.0, e) / bits for e in ends])
    np.testing.assert_allclose(tr["offered"] + tr["credit"], want, atol=0.01, rtol=0)
    assert tr["credit"].min() >= 0 and tr["credit"].max() < 1
    # saturated: after the first RTT the queue never empties and every offered slot is used
    busy = ends > 0.1
    assert tr["queued"][busy].min() > 0
    np.testing.assert_array_equal(np.diff(tr["deq"])[busy[1:]], np.diff(tr["offered"])[busy[1:]])
    # each constant-rate segment (its whole ticks) carries rate x duration / packet bits
    # departures, within one packet; the last two straddle the repeat
    deq = lambda i: tr["deq"][i - 1] if i > 0 else 0
    segments = [(0.3137, 0.7771, 3.3e6), (0.7771, 1.2345, 7.7e6), (1.2345, 1.6, 0.5e6), (1.6, 1.9137, 10e6),
                (1.9137, 2.3771, 3.3e6)]
    for a, b, rate in segments:
        i, j = math.ceil(a / tick), math.floor(b / tick)
        got = deq(j) - deq(i)
        assert abs(got - rate * (j - i) * tick / bits) <= 1.0, (p.pkts_per_tick, a, b, got)


def test_packets_are_conserved_across_rate_changes(saturated):
    _, _, tr = saturated
    np.testing.assert_array_equal(tr["tx"], tr["drop"] + tr["queued"] + tr["deq"])
    np.testing.assert_array_equal(tr["deq"], tr["sink"] + tr["on_wire"])


def test_utilisation_is_against_the_offered_capacity(saturated):
    p, final, _ = saturated
    rep = jax.jit(mx.summarize)(final.metrics, p)
    # the saturated link used every packet time the schedule offered after the warm-up ...
    assert float(rep["util_wire"]) == pytest.approx(1.0, abs=1e-6)
    # ... which averaged well below the 10 Mbit/s peak (against the peak it would read ~0.6)
    t0 = math.ceil(0.3 / float(p.tick_s)) * float(p.tick_s)
    t1 = float(final.tick) * float(p.tick_s)
    mean = ODD.bits_between(t0, t1) / (t1 - t0)
    assert float(rep["capacity_mean_bps"]) == pytest.approx(mean, rel=2e-3)
    assert mean < 0.7 * float(p.bottleneck_rate_bps)


# ---------------------------------------------------------------------------------------
# a batch of different traces (k = 7): conservation, every env its own run, utilisation moves
# ---------------------------------------------------------------------------------------

SATURATED = 6  # the batch's env that is `_saturated(7)`


@pytest.fixture(scope="module")
def batch():
    configs = pad_params([
        _mixed("none"),  # padded to the constant 10 Mbit/s schedule
        _mixed(capacity.Schedule([0.0], [5e6], name="half")),  # the same flows on half the capacity
        _mixed("cellular", scheduler="strict", policy="dt", load=1.2, long_flows=2),
        _mixed("wifi", policy="fq-codel", load=1.2, long_flows=1),
        _mixed(HELD, load=0.8, long_flows=3, tcp="newreno"),
        _mixed(OUTAGE, load=1.0, long_flows=2),
        _saturated(7),
    ])
    stacked = stack_params(configs)
    keys = jnp.stack([jax.random.PRNGKey(5), jax.random.PRNGKey(5)] + list(jax.random.split(jax.random.PRNGKey(6), 5)))
    n = sim.ticks_for(3.0, configs[0])

    def one(p, key):
        return sim.run(sim.init(key, p), p, n, trace_fn=lambda s: _conservation(s, p))

    run = jax.jit(jax.vmap(one))
    final, tr = run(stacked, keys)
    return configs, stacked, keys, final, jax.tree.map(np.asarray, tr), run


def test_conservation_and_vmap_over_different_traces(batch):
    configs, stacked, keys, final, tr, run = batch
    assert stacked.capacity_times_s.shape == (len(configs), capacity.load("wifi").rows)
    np.testing.assert_array_equal(tr["tx"], tr["drop"] + tr["queued"] + tr["deq"])
    np.testing.assert_array_equal(tr["deq"], tr["sink"] + tr["on_wire"])
    assert tr["drop"][:, -1].max() > 0 and tr["tx"][:, -1].min() > 0
    # the envs ran their own traces: the packet times offered differ
    assert len({int(x) for x in tr["offered"][:, -1]}) == len(configs)
    # each env runs its own trace whatever its place and company in the batch: the batch in
    # reverse order gives every env the same run (the wifi env's fq-codel serves a traced k)
    order = np.arange(len(configs))[::-1]
    final2, tr2 = run(jax.tree.map(lambda x: x[order], stacked), keys[order])
    for name in ("qlen", "offered", "deq", "drop"):
        np.testing.assert_array_equal(np.asarray(tr2[name])[order], tr[name])
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(final2)):
        np.testing.assert_array_equal(np.asarray(b)[order], np.asarray(a))


def test_a_capacity_change_shows_in_utilisation(batch):
    configs, stacked, _, final, tr, _ = batch
    rep = jax.jit(jax.vmap(mx.summarize))(final.metrics, stacked)
    full, half = (float(rep["util_wire"][i]) for i in (0, 1))
    # the same flows (same seed, same arrival rate) on half the capacity: about the same
    # packets sent, twice the utilisation
    assert abs(int(tr["deq"][0, -1]) - int(tr["deq"][1, -1])) <= 0.1 * int(tr["deq"][0, -1])
    assert 0.15 < full < 0.45 and 1.8 < half / full < 2.2
    # (the capacity offered, in whole packet times: within one packet of the run's ~1250)
    assert float(rep["capacity_mean_bps"][0]) == pytest.approx(10e6, rel=1e-6)
    assert float(rep["capacity_mean_bps"][1]) == pytest.approx(5e6, rel=1e-3)
    assert float(rep["util_wire"].max()) <= 1.0


# ---------------------------------------------------------------------------------------
# no schedule, a constant schedule: the same run, bit for bit
# ---------------------------------------------------------------------------------------

def test_a_constant_schedule_equals_no_schedule_bit_for_bit():
    p = _busy()
    # one row at 10 Mbit/s from 0, padded (as a batch pads) with rows that never start
    q = _busy(capacity_schedule=capacity.Schedule([0.0], [10e6], name="constant"), capacity_rows=ODD.rows)
    assert (p.capacity_rows, q.capacity_rows) == (0, 4)
    n = sim.ticks_for(SECONDS, p)
    alone, const = (RUN(x, jax.random.PRNGKey(3), n)[0] for x in (p, q))
    differ = [jax.tree_util.keystr(path) for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(alone)[0],
                                                                jax.tree.leaves(const))
              if not np.array_equal(np.asarray(a), np.asarray(b))]
    # only the counter of offered packet times, which a run without a schedule leaves at 0
    assert differ == [".metrics.offered_total", ".metrics.offered_warm"]
    assert int(const.metrics.offered_total) == n * p.pkts_per_tick
    assert int(alone.metrics.drop_total) > 0 and int(alone.metrics.flows_completed) > 10


# ---------------------------------------------------------------------------------------
# the manifest: native and fluid refuse a schedule by name
# ---------------------------------------------------------------------------------------

def test_native_and_fluid_refuse_a_schedule_by_name():
    from rlbm_jax.env.backends import fluid, native
    from rlbm_jax.env.presets import long_flow_params

    p = _mixed("cellular")
    assert p.needs_jax_tick
    for name, params in (("native", p), ("fluid", long_flow_params(8, 1.0, capacity_schedule="step"))):
        with pytest.raises(ValueError, match=f"the {name} backend does not implement capacity_schedule"):
            backends.resolve(name, params)
        assert backends.resolve("auto", params) == "jax"
    with pytest.raises(ValueError, match="capacity_schedule"):
        native.check_params(p)
    with pytest.raises(ValueError, match="capacity_schedule"):
        fluid.configure(long_flow_params(8, 1.0, capacity_schedule="step"))
    # a batch with one schedule among runs without is refused too (the table has rows)
    with pytest.raises(ValueError, match="capacity_schedule"):
        backends.resolve("native", stack_params([_mixed("none"), p]))
    assert backends.resolve("native", _mixed("none")) == "native"


# ---------------------------------------------------------------------------------------
# the schedules themselves: readers, shipped traces, checks
# ---------------------------------------------------------------------------------------

def test_shipped_traces_are_their_generators(tmp_path):
    for path in capacity.write_shipped(tmp_path):
        name = path.stem.removeprefix("capacity_")
        assert path.read_text() == capacity.shipped_path(name).read_text(), f"{name}: regenerate with write_shipped()"
        s = capacity.load(name)
        assert s.name == name and s.repeats and s.peak_bps == 10e6 and 0 < s.mean_bps < 10e6
        assert s.rows == capacity.shipped(name).rows
    cell = capacity.load("cellular")
    assert (cell.rates_bps == 0).any(), "the cellular-like trace has outages"
    assert capacity.load("wifi").rows > 200  # contention: a new share every 50 ms


def test_csv_reader_and_its_errors(tmp_path):
    s = capacity.from_csv(ODD.to_csv(), name="odd")
    np.testing.assert_array_equal(s.times_s, ODD.times_s)
    np.testing.assert_array_equal(s.rates_bps, ODD.rates_bps)
    assert s.period_s == 1.6
    held = capacity.from_csv("time_s,rate_bps\n0,1e6\n2.5,3e6\n")
    assert not held.repeats and held.rate_at(100.0) == 3e6
    assert held.bits_between(0, 3.5) == pytest.approx(2.5e6 + 3e6)
    f = tmp_path / "trace.csv"
    f.write_text("time_s,rate_bps\n0,1e6\n1,oops\n")
    with pytest.raises(ValueError, match="line 3"):
        capacity.load(str(f))
    for text, match in (("0,1e6\n0,2e6\n", "line 2: times must increase"),
                        ("0.5,1e6\n", "must start at time 0"), ("0,-1\n", "rate_bps must be >= 0"),
                        ("0,1e6\n1,2e6\n0.5,\n", "end row's time"), ("0,1e6\n2,\n3,1e6\n", "after the end row")):
        with pytest.raises(ValueError, match=match):
            capacity.from_csv(text)
    with pytest.raises(ValueError, match="neither a shipped trace"):
        capacity.load("no-such-trace")


def test_mahimahi_converter(tmp_path):
    # 1500-byte opportunities: 3 in each ms of the first 10 ms, 1 in each ms of the next 10,
    # none for 10 ms; the trace repeats after its last line, 30 ms
    ms = [m for m in range(10) for _ in range(3)] + list(range(10, 20)) + [30]
    f = tmp_path / "trace.mahi"
    f.write_text("\n".join(map(str, ms)) + "\n")
    s = capacity.load(str(f))  # told from a CSV by its content
    assert s.period_s == 0.03 and s.repeats
    np.testing.assert_allclose(s.times_s, [0.0, 0.01, 0.02])
    # the opportunity at 30 ms is the next period's first (Mahimahi moves its base time by
    # the period), so the first bin has 31; every opportunity of a period is counted
    np.testing.assert_allclose(s.rates_bps, [31 * 12000 / 0.01, 10 * 12000 / 0.01, 0.0])
    assert s.bits_between(0.0, 0.03) == pytest.approx(len(ms) * 12000)
    fine = capacity.mahimahi_to_schedule(f.read_text(), bin_s=0.001)
    assert fine.bits_between(0.0, 0.03) == pytest.approx(len(ms) * 12000)
    with pytest.raises(ValueError, match="line 2"):
        capacity.mahimahi_to_schedule("5\n3\n")


def test_make_params_checks_the_schedule_against_the_link():
    with pytest.raises(ValueError, match="raise bottleneck_rate_bps to at least 1e"):
        make_params(capacity_schedule="step", bottleneck_rate_bps=5e6)
    with pytest.raises(ValueError, match=r"capacity_rows \(2\) must be >= the capacity schedule's rows \(4\)"):
        make_params(capacity_schedule="step", capacity_rows=2)
    with pytest.raises(ValueError, match="shorter than a tick"):
        make_params(capacity_schedule=capacity.Schedule([0.0], [1e6], 1e-5), pkts_per_tick=4)
    p = make_params(capacity_schedule="step", capacity_rows=6)
    validate(p)
    assert p.capacity_rows == 6 and float(p.capacity_times_s[-1]) > 1e38
    with pytest.raises(ValueError, match="capacity_cum_bits"):
        validate(p.replace(capacity_rates_bps=p.capacity_rates_bps.at[1].set(1e6)))
    # the command line: the schedule and its record
    ap = simulate_cli.build_parser()
    run = simulate_cli.run_config(ap.parse_args(["--capacity-schedule", "cellular"]))
    assert run["config"]["capacity_schedule"] == "cellular" and run["capacity"]["peak_bps"] == 10e6
    assert "capacity" not in simulate_cli.run_config(ap.parse_args([]))
