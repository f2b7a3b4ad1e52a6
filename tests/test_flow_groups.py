"""Flow groups: senders with their own base RTT and TCP in one run (`flow_groups`, one value
of `access_delay_s` and `tcp` per group), the long flows' statistics and fairness
(`rlbm_jax.flowstats`), and what refuses them by name."""
import json
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

from rlbm_jax.env import backends, model, sim, tcp
from rlbm_jax.env.params import config_record, make_params, validate
from rlbm_jax.simulate import run_scenario

ROOT = Path(__file__).resolve().parents[1]
# two long flows on a 10 Mbit/s dumbbell (base RTT 21.2 ms with the default access delay)
TWO = dict(num_classes=1, policy="droptail", load=0.0, num_senders=2, num_flow_slots=4, long_flows=2,
           bottleneck_rate_bps=10e6, bottleneck_delay_s=10e-3, access_rate_bps=100e6, long_flow_start_spread_s=1.0)


def _bdp_pkts(**kw):
    return int(round(float(make_params(**{**TWO, **kw}).bdp_pkts)))


def _flows(p, *, seconds, seeds, show_progress=False):
    """The long flows' report of a run (`simulate.run_scenario`, sampled every 10 ms)."""
    return run_scenario(p, seconds=seconds, seeds=seeds, flow_sample_s=0.01, show_progress=show_progress)["flows"]


def _run(p, ticks, key=1):
    return jax.jit(lambda k: sim.run(sim.init(k, p), p, ticks)[0])(jax.random.PRNGKey(key))


def test_groups_of_one_delay_and_one_tcp_run_exactly_as_one_group():
    """Two flow groups given the same access delay and TCP are one population: the run's
    integers (flow table, queue, counters) and floats equal the one-group run's exactly."""
    kw = dict(TWO, buffer_per_class_pkts=30, warmup_s=0.0)
    one = _run(make_params(**kw), 20000)
    two = _run(make_params(**kw, flow_groups=2, access_delay_s=[1e-4, 1e-4], tcp=["cubic", "cubic"]), 20000)
    a, b = jax.tree.leaves(one), jax.tree.leaves(two)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(one.metrics.drop_total) > 0  # the run had losses and recoveries to agree on


def test_each_group_sees_its_own_base_rtt():
    """With no loss (a buffer larger than any window reaches) each long flow's smallest RTT
    sample is its group's empty-path RTT, 2 x its access delay apart, and its sRTT is above it."""
    p = make_params(**dict(TWO, bottleneck_rate_bps=100e6, buffer_per_class_pkts=5000, queue_capacity_pkts=5000),
                    flow_groups=2, access_delay_s=[0.1e-3, 20e-3])
    rep = _flows(p, seconds=2.0, seeds=[0], show_progress=False)
    base = np.asarray(p.group_base_rtt_s)
    assert base[1] - base[0] == pytest.approx(2 * (20e-3 - 0.1e-3), rel=1e-5)
    for f in rep["flows"]:
        assert f["base_rtt_s"] == pytest.approx(float(base[f["group"]]))
        assert f["min_rtt_s"]["mean"] == pytest.approx(f["base_rtt_s"], abs=2 * float(p.tick_s))
        assert f["srtt_mean_s"]["mean"] >= f["min_rtt_s"]["mean"]
        assert f["retx_pkts"]["mean"] == 0


def test_two_identical_cubic_flows_share_a_one_bdp_buffer_fairly():
    """Two CUBIC flows, same RTT, a 1-BDP drop-tail buffer, 60 s with the first 10 left out,
    8 seeds: the goodput ratio within 0.8-1.25 and Jain's index >= 0.95 (seed means), the
    link nearly full, and the flows' shares adding up to one."""
    p = make_params(**TWO, buffer_per_class_pkts=_bdp_pkts(), warmup_s=10.0)
    rep = _flows(p, seconds=60.0, seeds=range(8), show_progress=False)
    fr = rep["fairness"]
    assert 0.8 <= fr["goodput_ratio"]["mean"] <= 1.25, fr
    assert fr["jain"]["mean"] >= 0.95, fr
    assert fr["utilisation"]["mean"] > 0.85, fr
    shares = np.asarray(rep["per_seed"]["flows"]["share"])
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, rtol=1e-9)


def test_cubic_favours_the_shorter_base_rtt_as_ns3_does():
    """Two CUBIC flows whose base RTTs are 21 and 61 ms on a 1-BDP buffer, 35 s with the
    first 5 left out: in ns-3.37 (the same cell, 10 seeds) and here (4 seeds) the shorter
    one takes the larger share: the log of its goodput ratio above 0 by more than twice its
    seed error in both (per seed the ratio is heavy-tailed: 0.7 to 6.5 in ns-3); and each
    simulator's flows show their own base RTTs (min RTT, sRTT)."""
    from rlbm_jax.ns3.harness import Cell, build_ns3, run_ns3

    kw = dict(TWO, buffer_per_class_pkts=_bdp_pkts(), warmup_s=5.0, flow_groups=2, access_delay_s=[0.1e-3, 20e-3])
    rep = _flows(make_params(**kw), seconds=35.0, seeds=range(4), show_progress=False)
    g = rep["groups"]
    assert g[0]["srtt_mean_s"]["mean"] < g[1]["srtt_mean_s"]["mean"]

    def above_one(ratio):
        lr = np.log(np.asarray(ratio))
        return lr.mean() - 2 * lr.std(ddof=1) / np.sqrt(len(lr)) > 0

    assert above_one(rep["per_seed"]["fairness"]["goodput_ratio"]), rep["per_seed"]["fairness"]
    ns3 = run_ns3(build_ns3(), [Cell("rtt", "long", kw, 35.0)], seeds=list(range(1, 11)), jobs=2,
                  workdir=Path(tempfile.mkdtemp()), show_progress=False)["rtt"]["seeds"]
    good = np.asarray([[f["goodput_bps"] for f in run["long_flows"]] for run in ns3])
    assert above_one(good[:, 0] / good[:, 1]), good
    for run in ns3:
        f0, f1 = run["long_flows"]
        assert (f0["group"], f1["group"]) == (0, 1) and f0["base_rtt_s"] + 0.039 < f1["base_rtt_s"]
        assert f0["min_rtt_s"] < f1["min_rtt_s"] and f0["srtt_mean_s"] < f1["srtt_mean_s"]


def test_each_group_runs_its_own_tcp():
    """CUBIC and NewReno in one run: each flow's congestion control is its group's. The
    NewReno flow never touches CUBIC's columns; the CUBIC flow has set its W_max at a loss;
    after the run each flow's ssthresh is what its own variant's cut would leave."""
    p = make_params(**TWO, buffer_per_class_pkts=20, flow_groups=2, tcp=["cubic", "newreno"])
    s = _run(p, 40000)
    fl = tcp.unpack(s.flows)
    assert int(fl.tx_next[0] - fl.next_new[0]) > 0 and int(fl.tx_next[1] - fl.next_new[1]) > 0  # both lost packets
    assert float(fl.w_max[0]) > 0 and float(fl.w_max[1]) == 0  # CUBIC's origin, set at its losses only
    assert int(fl.epoch_start[1]) == -1
    # the registry's own choice for each flow (core.flow_tcp)
    ids = np.asarray(tcp.core.flow_tcp(fl.sender[:2], p))
    assert [tcp.TCP_NAMES[i] for i in ids] == ["cubic", "newreno"]


def test_flow_groups_are_declared_recorded_and_refused_by_name():
    """Per-group values are checked against flow_groups, recorded per group in the config,
    and every place that cannot run groups refuses them by name: native and fluid (the
    manifest) and the randomized env; the ns-3 scenario takes them (one value per group);
    DCTCP's ECN cannot be split."""
    p = make_params(**TWO, flow_groups=2, tcp=["cubic", "newreno"], access_delay_s=[1e-3, 5e-3])
    validate(p)
    rec = config_record({**TWO, "flow_groups": 2, "tcp": ["cubic", "newreno"], "access_delay_s": [1e-3, 5e-3]}, p)
    assert rec["tcp"] == ["cubic", "newreno"] and rec["access_delay_s"] == [1e-3, 5e-3] and rec["flow_groups"] == 2
    assert ("tcp", "cubic") in p.model_choices and ("tcp", "newreno") in p.model_choices
    assert config_record(TWO)["tcp"] == "cubic" and config_record(TWO)["access_delay_s"] == 1e-4  # unchanged
    for b in ("native", "fluid"):
        assert "flow_groups=2" in model.refusal(b, p)
    with pytest.raises(ValueError, match="flow_groups is 2"):
        make_params(**TWO, flow_groups=2, access_delay_s=[1e-3, 2e-3, 3e-3])
    with pytest.raises(ValueError, match="one per flow group"):
        make_params(**TWO, tcp=["cubic", "newreno"])
    with pytest.raises(ValueError, match="must not exceed num_senders"):
        make_params(**TWO, flow_groups=3)
    with pytest.raises(ValueError, match="dctcp turns ECN on"):
        make_params(**TWO, flow_groups=2, tcp=["dctcp", "cubic"])
    with pytest.raises(ValueError, match="unknown tcp"):
        make_params(**TWO, flow_groups=2, tcp=["cubic", "bbr9"])
    from rlbm_jax.ns3.harness import Cell, ns3_args

    args = ns3_args(Cell("two", "long", {**TWO, "flow_groups": 2, "tcp": ["cubic", "newreno"],
                                         "access_delay_s": [1e-3, 5e-3]}, 1.0), 1)
    assert {"--flow_groups=2", "--tcp=cubic,newreno", "--access_delay_s=0.001,0.005"} <= set(args)
    from rlbm_jax.env.randomize import make_randomized_params
    from rlbm_jax.env.rlbm_env import RLBMEnv

    env = RLBMEnv(make_params(**{**TWO, "policy": "rl"}, flow_groups=2, tcp=["cubic", "newreno"]))
    with pytest.raises(ValueError, match="flow_groups 1"):
        make_randomized_params(env.default_params)
    assert backends.resolve("auto", p) == "jax"


def test_simulate_reports_two_groups_and_their_fairness(tmp_path, capsys):
    """`simulate.py` with two groups: the flags reach the params and the record, and the
    output holds each group's statistics and the fairness lines (on by themselves)."""
    from rlbm_jax.cli import simulate

    out = tmp_path / "two.json"
    code = simulate.main(["--scenario", "long", "--senders", "2", "--long-flows", "2", "--flow-groups", "2",
                          "--access-delay-s", "0.0001", "0.02", "--tcp", "cubic", "newreno", "--bottleneck-bps", "10e6",
                          "--seconds", "4", "--warmup-s", "1", "--seeds", "2", "--no-progress", "--json", str(out)])
    r = capsys.readouterr()
    assert code == 0, r.err
    res = json.loads(out.read_text())
    assert res["config"]["tcp"] == ["cubic", "newreno"] and res["config"]["access_delay_s"] == [0.0001, 0.02]
    assert res["flow_stats"] is True and res["backend"] == "jax"
    g = res["flows"]["groups"]
    assert [x["tcp"] for x in g] == ["cubic", "newreno"] and g[1]["base_rtt_s"] > g[0]["base_rtt_s"] + 0.039
    assert "group 1 (newreno, base RTT" in r.err and "Jain's index" in r.err and "goodput ratio" in r.err
    assert res["flows"]["window_s"][0] == pytest.approx(1.0, abs=0.011)


def test_a_flow_sample_period_without_flow_statistics_is_refused(capsys):
    """--flow-sample-s in a run that takes no flow statistics would be dropped: refused."""
    from rlbm_jax.cli import simulate

    assert simulate.main(["--scenario", "long", "--long-flows", "2", "--flow-sample-s", "0.02", "--print-config"]) == 2
    assert "--flow-sample-s: no flow statistics" in capsys.readouterr().err


def test_the_readme_s_two_flow_lines_are_the_committed_run_s():
    """The fairness lines the README quotes are those `flowstats.lines` gives of the committed
    run (results/two_flows/run.json), which its command made."""
    from rlbm_jax.flowstats import lines

    run = json.loads((ROOT / "results" / "two_flows" / "run.json").read_text())
    readme = (ROOT / "README.md").read_text()
    for line in lines(run["flows"]):
        assert f"    {line}\n" in readme, line
    assert run["config"]["tcp"] == ["cubic", "newreno"] and run["config"]["flow_groups"] == 2


def test_a_group_without_a_long_flow_is_reported_not_fatal():
    """One long flow in two groups: the empty group reads "no long flow", there is no ratio
    to give, and every other number is there; an agent's run is not sampled more finely
    than its agent acts."""
    from rlbm_jax.flowstats import lines

    p = make_params(**{**TWO, "long_flows": 1}, flow_groups=2, access_delay_s=[1e-4, 0.02])
    rep = _flows(p, seconds=2.0, seeds=[0, 1])
    text = "\n".join(lines(rep))
    assert "group 1 (cubic, base RTT 61.0 ms): no long flow" in text and "goodput ratio" not in text, text
    assert rep["groups"][0]["flows"] == 1 and rep["groups"][0]["share"]["mean"] == pytest.approx(1.0)
    assert rep["fairness"]["jain"]["mean"] == pytest.approx(1.0)
    assert rep["sample_s"] == pytest.approx(0.01, rel=0.05)
    with pytest.raises(ValueError, match="shorter than the agent's interval"):
        run_scenario(p, seconds=1.0, seeds=[0], agent=lambda obs: obs, flow_sample_s=0.01, show_progress=False)


@pytest.mark.parametrize("argv,key", [(["--pairs", "cubic-rtt"], "pairs"), (["--rates", "100e6"], "rates_bps"),
                                      (["--buffers", "2"], "buffers_bdp"), (["--disciplines", "fq-codel"], "disciplines"),
                                      (["--seeds", "3"], "seeds"), (["--jobs", "1"], "jobs"), (["--out", "x/y"], "out"),
                                      (["--report", "r.md"], "report"), (["--ns3-runs", "cache"], "ns3_runs"),
                                      (["--bbr-rate-sample", "ns-3.37"], "bbr_rate_sample"),
                                      (["--long-flow-syn", "queue"], "long_flow_syn"),
                                      (["--rtt-clock", "ns-3.37"], "rtt_clock"),
                                      (["--sack-credit", "ns-3.37"], "sack_credit")])
def test_every_option_of_the_flows_calibration_reaches_its_configuration(argv, key, capsys):
    """calibration/flows.py: each option changes what --print-config says it runs (the
    record results.json keeps), and the grid's cells follow the pair, rate, buffer and
    discipline options."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("calibration_flows", ROOT / "calibration" / "flows.py")
    flows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flows)

    def config(extra):
        assert flows.main(["--print-config", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    base, changed = config([]), config(argv)
    assert base[key] != changed[key], key
    if key in ("pairs", "rates_bps", "buffers_bdp", "disciplines"):
        assert set(changed["cells"]) < set(base["cells"]) or set(changed["cells"]) - set(base["cells"])
    if key == "bbr_rate_sample":  # it reaches the params of the cells with BBR, and only those
        for name, c in changed["cells"].items():
            assert c["kw"].get("bbr_rate_sample") == ("ns-3.37" if "bbr" in name.split("/")[1] else None), name
            assert "bbr_rate_sample" not in base["cells"][name]["kw"]
    if key in ("long_flow_syn", "rtt_clock", "sack_credit"):  # ours only, in every cell; the default left out of the params
        assert all(c["kw"][key] == changed[key] for c in changed["cells"].values())
        assert not any(key in c["kw"] for c in base["cells"].values())


def test_a_group_starts_its_long_flows_at_its_own_time():
    """`long_flow_start_s` per flow group (a newcomer against an incumbent): the second
    group's flow sends nothing before its start time and the first holds the link alone;
    afterwards both send. The value is recorded per group and reaches the ns-3 scenario's
    options."""
    from rlbm_jax.ns3.harness import Cell, ns3_args

    kw = dict(TWO, buffer_per_class_pkts=30, long_flow_start_spread_s=0.0, flow_groups=2, tcp=["cubic", "bbr"],
              long_flow_start_s=[0.0, 1.5])
    p = make_params(**kw)
    tick_s = float(p.tick_s)
    # one run of 3 s, the flows' columns traced after every tick: at 1.4 s and at 3 s
    cols = ("next_new", "start_s", "acked")
    tr = jax.jit(lambda k: sim.run(sim.init(k, p), p, int(3.0 / tick_s),
                                   trace_fn=lambda s: [tcp.column(s.flows, c)[:2] for c in cols])[1])(
        jax.random.PRNGKey(1))
    early, late = ({c: np.asarray(v)[int(t / tick_s) - 1] for c, v in zip(cols, tr)} for t in (1.4, 3.0))
    assert int(early["next_new"][1]) == 0 < int(early["next_new"][0])
    assert float(early["start_s"][1]) == pytest.approx(1.5)
    assert int(late["acked"][1]) > 100
    rec = config_record(kw, p)
    assert rec["long_flow_start_s"] == [0.0, 1.5] and config_record(TWO)["long_flow_start_s"] == 0.0
    assert "--long_flow_start_s=0.0,1.5" in ns3_args(Cell("c", "long", kw, 3.0), 1)
    with pytest.raises(ValueError, match="long_flow_start_s"):
        make_params(**dict(kw, long_flow_start_s=[0.0, -1.0]))


def test_a_long_flow_that_starts_behind_a_standing_queue_learns_that_rtt_in_its_handshake():
    """`long_flow_syn` "queue": a newcomer's SYN waits in the queue the incumbent built (4 BDP
    of drop-tail), as in ns-3, so its first srtt is the base RTT plus that queue's delay,
    its data start one such handshake after its start, and its first RTO is above the RTT
    its first window sees.  With "base-rtt" (the handshake planned on the empty path, the
    default, kept for the committed results) its RTO starts below that RTT: every packet
    of its first window times out (at 100 Mbit/s the flow then never leaves its timeouts:
    calibration/REPORT.md section 7).  One compiled batch runs both."""
    from rlbm_jax.env.params import stack_params

    kw = dict(TWO, buffer_per_class_pkts=4 * _bdp_pkts(), long_flow_start_spread_s=0.0, flow_groups=2,
              tcp=["cubic", "cubic"], long_flow_start_s=[0.0, 1.0])
    ps = [make_params(**kw, long_flow_syn=syn) for syn in ("base-rtt", "queue")]
    p = stack_params(ps)
    tick_s, base_s = float(ps[0].tick_s), float(ps[0].base_rtt_s)
    pkt_s = float(ps[0].data_pkt_bits / ps[0].bottleneck_rate_bps)
    n = int(1.0 / tick_s) + 2  # the newcomer's start tick has passed
    st = jax.jit(jax.vmap(lambda q: sim.run(sim.init(jax.random.PRNGKey(1), q), q, n)[0]))(p)
    queue = np.asarray(st.queue.pkts).sum(axis=1)
    srtt, rto = (np.asarray(jax.vmap(lambda t: tcp.column(t, c))(st.flows))[:, 1] for c in ("srtt_s", "rto_s"))
    data_tick = np.asarray(jax.vmap(lambda t: tcp.column(t, "data_tick"))(st.flows))[:, 1]
    assert queue[0] == queue[1] > 2 * _bdp_pkts()  # the same standing queue at the newcomer's start
    rtt_seen = base_s + queue[1] * pkt_s
    assert srtt[0] == pytest.approx(base_s, rel=1e-5) and rto[0] < rtt_seen
    assert srtt[1] == pytest.approx(rtt_seen, rel=1e-3) and rto[1] > rtt_seen
    assert data_tick[1] * tick_s == pytest.approx(1.0 + rtt_seen, abs=2e-3) and data_tick[0] < data_tick[1]
    assert config_record(dict(kw, long_flow_syn="queue"), ps[1])["long_flow_syn"] == "queue"
    for backend in ("native", "fluid"):  # declared for the reference tick only: the others refuse it by name
        assert "long_flow_syn=queue" in model.missing(backend, ps[1])
        assert not any(m.startswith("long_flow_syn") for m in model.missing(backend, ps[0]))
