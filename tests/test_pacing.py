"""Sender pacing (`pacing` "ns-3.37", `rlbm_jax.env.tcp.pacing`): a paced sender spaces its
segments at its pacing rate, ns-3.37's TcpSocketState semantics, declared once and refused by
name where it does not run."""
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import model, sim, tcp
from rlbm_jax.env.params import config_record, make_params, stack_params
from rlbm_jax.simulate import run_scenario
from tests.conftest import flow_reports

# long flows alone on a 10 Mbit/s dumbbell (base RTT 21.1 ms), drop-tail, no web traffic
ONE = dict(num_classes=1, policy="droptail", load=0.0, num_senders=1, num_flow_slots=2, long_flows=1,
           bottleneck_rate_bps=10e6, bottleneck_delay_s=10e-3, access_rate_bps=100e6, buffer_per_class_pkts=100)


def test_a_paced_sender_at_a_fixed_rate_below_capacity_gets_that_rate():
    """Two senders whose pacing rate is capped below their share of the link (CUBIC at 3
    Mbit/s, NewReno at 5 Mbit/s, `max_pacing_rate_bps` per flow group): each gets its rate
    in goodput (payload bits, as ns-3.37's pacing rate counts them) within 2%, nothing is
    lost, and the queue stays near empty although their windows are far above the path's."""
    p = make_params(**dict(ONE, num_senders=2, num_flow_slots=4, long_flows=2, warmup_s=2.0), flow_groups=2,
                    tcp=["cubic", "newreno"], pacing="ns-3.37", max_pacing_rate_bps=[3e6, 5e6])
    rep = run_scenario(p, seconds=8.0, seeds=[0, 1], flow_sample_s=0.05, show_progress=False)
    for f, want in zip(rep["flows"]["flows"], (3e6, 5e6)):
        assert f["goodput_bps"]["mean"] == pytest.approx(want, rel=0.02), f
        assert f["retx_pkts"]["mean"] == 0
        assert f["cwnd_mean_pkts"]["mean"] > 3 * want * float(p.base_rtt_s) / 8000  # the window does not limit it
    assert rep["queue_p99_pkts"] <= 2


def _queue_traces(plist, ticks):
    """The queue after every tick of each params' run (one batch: the params are traced)."""
    run = jax.vmap(lambda q: sim.run(sim.init(jax.random.PRNGKey(0), q), q, ticks,
                                     trace_fn=lambda s: jnp.sum(s.queue.pkts))[1])
    return list(np.asarray(jax.jit(run)(stack_params(plist))))


def test_the_initial_window_leaves_at_once_unless_it_is_paced():
    """ns-3.37 sends the first initial_cwnd_pkts segments back to back (PaceInitialWindow
    false): from a 100 Mbit/s access link they queue at the 10 Mbit/s bottleneck.  Paced
    (at 2 x IW / handshake RTT, 0.95 segments per bottleneck packet time) they arrive a gap
    apart and do not queue (the first 30 ms, one round trip).  Without pacing the same flow bursts as the first."""
    ticks = int(0.03 / float(make_params(**ONE).tick_s))
    q_iw, q_paced, q_off = _queue_traces([make_params(**ONE, pacing="ns-3.37"),
                                          make_params(**ONE, pacing="ns-3.37", pace_initial_window=True),
                                          make_params(**ONE)], ticks)
    assert q_iw.max() >= 8 and q_off.max() >= 8
    assert q_paced.max() <= 1


def test_pacing_runs_only_where_asked_and_is_declared_recorded_and_refused_by_name():
    """One paced group beside an unpaced one: the unpaced flow's pacer fields stay at their
    initial values; the choice is recorded per group; the native and fluid backends refuse
    it by name; an unknown value is refused."""
    kw = dict(ONE, num_senders=2, num_flow_slots=4, long_flows=2, flow_groups=2, pacing=["ns-3.37", "off"],
              max_pacing_rate_bps=[2e6, 4e9])
    p = make_params(**kw)
    s = jax.jit(lambda k: sim.run(sim.init(k, p), p, 5000)[0])(jax.random.PRNGKey(0))
    fl = tcp.unpack(s.flows)
    assert float(fl.pace_rate_pps[0]) == pytest.approx(2e6 / 8000) and float(fl.pace_wait_s[0]) > 0
    assert float(fl.pace_rate_pps[1]) == 0 and float(fl.pace_wait_s[1]) == 0 and int(fl.pace_tick[1]) == 0
    assert np.asarray(tcp.pacing.paced(fl.sender[:2], p)).tolist() == [True, False]
    rec = config_record(kw, p)
    assert rec["pacing"] == ["ns-3.37", "off"] and rec["max_pacing_rate_bps"] == [2e6, 4e9]
    assert config_record(ONE)["pacing"] == "off"
    for b in ("native", "fluid"):
        assert "pacing=ns-3.37" in model.refusal(b, make_params(**ONE, pacing="ns-3.37"))
    assert model.refusal("native", make_params(**ONE)) is None
    with pytest.raises(ValueError, match="unknown pacing 'on'"):
        make_params(**ONE, pacing="on")
    with pytest.raises(ValueError, match="max_pacing_rate_bps must be positive"):
        make_params(**ONE, max_pacing_rate_bps=0.0)


def test_pacing_moves_a_cubic_flow_as_in_ns3():
    """One CUBIC flow on a 100-packet buffer (5 BDP), 10 s with the first 2 left out, here and
    in ns-3.37 (2 seeds each; one long flow has no randomness): unpaced, it holds the link
    without a loss in both; paced (ns-3.37 pacing, 1.2 cwnd / sRTT in congestion avoidance)
    it fills the buffer, loses packets and sees a longer sRTT in both, with goodput within 2%
    and sRTT within 15% of ns-3's; at a 5 Mbit/s cap both give 5 Mbit/s within 0.5%."""
    from rlbm_jax.ns3.harness import Cell, build_ns3, run_ns3

    cells = {"off": dict(ONE, warmup_s=2.0), "paced": dict(ONE, warmup_s=2.0, pacing="ns-3.37"),
             "capped": dict(ONE, warmup_s=2.0, pacing="ns-3.37", max_pacing_rate_bps=5e6)}
    ns3 = run_ns3(build_ns3(), [Cell(n, "long", kw, 10.0) for n, kw in cells.items()], seeds=[1, 2], jobs=2,
                  workdir=Path(tempfile.mkdtemp()), show_progress=False)
    got = {}
    reps = flow_reports([make_params(**kw) for kw in cells.values()], [0, 1], 10.0)  # one batch
    for (name, kw), rep in zip(cells.items(), reps):
        runs = [r["long_flows"][0] for r in ns3[name]["seeds"]]
        theirs = {k: float(np.mean([f[k] for f in runs])) for k in ("goodput_bps", "retx_pkts", "srtt_mean_s")}
        f = rep["flows"][0]
        ours = {k: f[k]["mean"] for k in theirs}
        got[name] = (ours, theirs)
        assert ours["goodput_bps"] == pytest.approx(theirs["goodput_bps"], rel=0.02), (name, ours, theirs)
        assert ours["srtt_mean_s"] == pytest.approx(theirs["srtt_mean_s"], rel=0.15), (name, ours, theirs)
    for ours, theirs in got["off"], got["capped"]:
        assert ours["retx_pkts"] == 0 and theirs["retx_pkts"] == 0
    for i in (0, 1):
        assert got["paced"][i]["retx_pkts"] > 0
        assert got["paced"][i]["srtt_mean_s"] > 1.2 * got["off"][i]["srtt_mean_s"]
        assert got["capped"][i]["goodput_bps"] == pytest.approx(5e6, rel=0.005)


def test_the_timestamp_clock_reads_whole_milliseconds_and_keeps_rttvar_at_its_jitter():
    """`rtt_clock` "ns-3.37": ns-3.37's timestamp option reads a 1 ms clock, so a flow whose RTT
    never changes (paced at 3 Mbit/s on 10 Mbit/s: no queue; base RTT 21.1 ms) takes samples
    of 21 and 22 ms: its smallest RTT is 21 ms, as ns-3's min RTT (a whole number of
    milliseconds in its runs), its srtt stays within the clock's step of the true RTT, and
    its rttvar stays at the samples' jitter, where the exact samples let it decay to nothing
    (so ns-3.37's RTO stays a millisecond or two above srtt).  One compiled batch runs both;
    the table stores the echo's column only where the choice is asked for."""
    from rlbm_jax.env.params import stack_params

    kw = dict(ONE, pacing="ns-3.37", max_pacing_rate_bps=3e6)
    ps = [make_params(**kw, rtt_clock=c) for c in ("exact", "ns-3.37")]
    assert not tcp.wide(ps[0]) and tcp.wide(ps[1])
    # its columns sit before BBR's: the table grows by the two shared optional columns only
    assert tcp.widths(ps[1]) == (len(tcp.BASE_INT_FIELDS) + 2, len(tcp.BASE_FLOAT_FIELDS))
    p = stack_params(ps)
    n = int(2.0 / float(ps[0].tick_s))
    col = lambda st, c: np.asarray(jax.vmap(lambda t: tcp.column(t, c))(st.flows))[:, 0]
    st = jax.jit(jax.vmap(lambda q: sim.run(sim.init(jax.random.PRNGKey(0), q), q, n)[0]))(p)
    base_s = float(ps[0].base_rtt_s)
    dmin, srtt, rttvar = (col(st, c) for c in ("delay_min_s", "srtt_s", "rttvar_s"))
    assert int(col(st, "acked")[0]) == int(col(st, "acked")[1]) > 500  # the same paced flow, no loss
    assert dmin[0] == pytest.approx(base_s, abs=2e-4) and rttvar[0] < 2e-5
    assert dmin[1] == pytest.approx(np.floor(base_s * 1e3) * 1e-3, abs=1e-6)
    assert abs(srtt[1] - base_s) < 1e-3 and rttvar[1] > 1e-4
    assert config_record(dict(kw, rtt_clock="ns-3.37"), ps[1])["rtt_clock"] == "ns-3.37"
    assert "rtt_clock=ns-3.37" in model.refusal("native", ps[1])
