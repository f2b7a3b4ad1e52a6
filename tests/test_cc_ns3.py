"""A sender agent inside ns-3 (issue: RL congestion control judged in ns-3): the scenario's
`--agent_flows` rows and its `cwnd_gain` / `rate_gain` answers, its rate sender (tcp rate,
Aurora's), the lock-step driver's sender path, and the study kit's sender judging
(`rlbm_jax.study.ns3_sender`).

The known cases: Orca's action 0 is cwnd x 4^0 = x 1, so a scripted agent that always answers
0 must leave ns-3's CUBIC flow exactly as it is, as it does in JAX (test_cc); Aurora's action 0
holds the rate sender's rate, which below capacity it gets, in ns-3 as in JAX."""
import dataclasses
import json
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlbm_jax
from rlbm_jax import scenarios
from rlbm_jax.env import metrics as mx
from rlbm_jax.env.formulations.cc import AURORA, AURORA_STEP, ORCA
from rlbm_jax.env.params import make_params
from rlbm_jax.ns3 import harness
from rlbm_jax.studies import orca
from rlbm_jax.study import ns3_sender

SECONDS = 6.0


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _cell(rtt_s=(0.05, 0.05), buffer_bdp=1.0, **extra):
    kw = {**orca.config(rtt_s, buffer_bdp), "warmup_s": 0.0, **extra}
    return harness.Cell("orca-test", "long", kw, SECONDS), kw


def _agent(kw, action: float):
    env = orca.STUDY.make_env(make_params(**kw))
    ep = env.default_params.replace(sim=make_params(**kw))
    fn = lambda obs: np.full((obs.shape[0], 1), action, np.float32)
    return harness.Agent(fn=fn, digest=f"const{action}", formulation=ORCA, env_params=ep), ep


def _run(binary, cell, path, *extra, agent=None, seed=3):
    cmd = [str(binary), *harness.ns3_args(cell, seed), f"--out={path}", *extra]
    if agent is None:
        subprocess.run(cmd, check=True, capture_output=True)
        decisions = None
    else:
        decisions = harness.drive(cmd + agent.args() + [f"--intervals_out={path}.csv"],
                                  agent.responder(make_params(**cell.kw)))
    return json.loads(path.read_text()), decisions


def _same(a: dict, b: dict) -> dict:
    return {k: (a[k], b.get(k)) for k in a if k not in ("wall_s", "config", "agent_intervals") and a[k] != b.get(k)}


def test_orca_scripted_at_zero_leaves_ns3_cubic_flow_exactly_as_it_is(ns3_binary, tmp_path):
    # one run without any agent (agent_flows 0: no agent rows, the socket's own RTT estimator),
    # one driven in lock-step by a policy that always answers a = 0 (cwnd_gain 4^0 = 1)
    cell, kw = _cell()
    plain, _ = _run(ns3_binary, dataclasses.replace(cell, kw={**kw, "agent_flows": 0}), tmp_path / "plain.json")
    agent, ep = _agent(kw, 0.0)
    driven, decisions = _run(ns3_binary, cell, tmp_path / "zero.json", agent=agent)
    n = int(SECONDS / float(ep.agent_interval_s))  # whole intervals (17 packet slots each) in the run
    assert driven["agent_intervals"] == n and decisions in (n, n + 1)  # (a boundary at the run's end: no answer)
    assert _same(plain, driven) == {}
    assert driven["config"]["agent_flows"] == 1 and "agent_flows" not in plain["config"]
    # and the record's agent rows add up to the flow's own report: every retransmission counted once
    rows = harness.read_intervals(tmp_path / "zero.json.csv")
    rec = harness.records_to_interval(rows, 1, 16, 1)
    counts = np.asarray(rec.agent_counts)[:, 0, :]
    assert counts[:, mx.AGENT_COUNTS.index("retx_pkts")].sum() == driven["long_flows"][0]["retx_pkts"]
    sent, retx, delivered = counts.sum(0)
    assert 0 < delivered <= sent - retx  # nothing delivered that was not sent as new data


def test_orca_scripted_at_minus_one_starves_its_flow_in_ns3_as_in_jax(ns3_binary, tmp_path):
    # a = -1 every 20 ms: the window a quarter of itself each interval, so the agent's flow
    # keeps about one segment in flight and the competing CUBIC flow takes the link
    cell, kw = _cell()
    agent, ep = _agent(kw, -1.0)
    rep, _ = _run(ns3_binary, cell, tmp_path / "min.json", agent=agent)
    mine, theirs = (f["goodput_bps"] for f in rep["long_flows"])
    assert mine < 0.1 * theirs
    rows = harness.read_intervals(tmp_path / "min.json.csv")
    state = np.asarray(harness.records_to_interval(rows, 1, 16, 1).agent_state)[:, 0, :]
    cwnd = state[len(state) // 2:, mx.AGENT_STATE.index("cwnd_pkts")]
    assert np.median(cwnd) <= 2.0


def test_the_scenario_refuses_a_sender_agent_it_cannot_run(ns3_binary, tmp_path):
    cell, kw = _cell()
    args = [str(ns3_binary), *harness.ns3_args(cell, 1), f"--out={tmp_path / 'x.json'}"]
    for extra, word in ((["--agent_interval_s=0"], "agent_flows"),
                        (["--agent_interval_s=0.02", "--agent=stdio", "--policy=rl"], "one agent per run"),
                        (["--agent_flows=3", "--agent_interval_s=0.02"], "agent_flows")):
        p = subprocess.run(args + extra, capture_output=True, text=True)
        assert p.returncode == 2 and word in p.stderr, (extra, p.stderr[-300:])
    # an answer that is not a positive gain ends the run with status 3, naming it
    cmd = args + ["--agent_interval_s=0.02", "--agent=stdio"]
    with pytest.raises(RuntimeError, match="cwnd_gain must be positive"):
        harness.drive(cmd, lambda fields: "cwnd_gain=0")
    with pytest.raises(RuntimeError, match="cwnd_gain= and 1 or 1 finite gains"):
        harness.drive(cmd, lambda fields: "class_alpha=1")


def test_records_with_agent_rows_parse_into_the_interval_and_a_bad_row_is_refused():
    base = {n: "0" for n in harness.NS3_RECORD_FIELDS}
    base["flows"] = ""
    row = {**base, "agent_counts": "10,2,7", "agent_state": "12.5,0.06,0.05,0,0.055"}
    rec = harness.records_to_interval([row, row], 1, 4, 1)
    assert rec.agent_counts.shape == (2, 1, 3) and rec.agent_counts.dtype == np.int32
    assert rec.agent_counts[1, 0].tolist() == [10, 2, 7]
    assert rec.agent_state[0, 0, mx.AGENT_STATE.index("srtt_s")] == np.float32(0.06)
    with pytest.raises(ValueError, match="lacks agent_counts"):
        harness.records_to_interval([base], 1, 4, 1)
    with pytest.raises(ValueError, match="3 values for 2 agent flows"):
        harness.records_to_interval([row], 1, 4, 2)


def test_the_sender_judging_scores_ns3_records_with_the_studys_functions(ns3_binary, tmp_path):
    # the kit's sender judging on one configuration and one seed: the CUBIC and NewReno
    # baselines and the delay rule (driven in lock-step); the shares of the two flows add up
    # to at most what the link carried, and the rule that only ever cuts CUBIC's window
    # leaves its flow no larger a share than CUBIC alone gets
    label = "rtt=50/50ms B=1BDP vs cubic"
    study = dataclasses.replace(orca.STUDY, test_configs=lambda: {label: orca.STUDY.test_configs()[label]},
                                eval_s=4.0, warmup_s=1.0)
    kit = {"study": "orca", "run_dir": str(tmp_path), "chosen": ["cubic", "newreno", "delay-target-k4"],
           "test_seeds": [620_000], "jobs": 2, "out_dir": str(tmp_path / "ns3")}
    pols = ns3_sender.policies(study, kit, agents=False)
    rows, _ = ns3_sender.run_all(study, kit, progress=False, pols=pols)
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"cubic", "newreno", "delay-target-k4"}
    for r in rows:
        assert 0 < r["agent_share"] + r["competitor_share"] <= r["util_wire"] + 0.05
        assert np.isfinite(r["reward"])
    assert by["delay-target-k4"]["agent_share"] <= by["cubic"]["agent_share"] + 0.05
    assert by["delay-target-k4"]["agent_queueing_delay"] < by["cubic"]["agent_queueing_delay"]


def _aurora(kw, action: float):
    env, ep = rlbm_jax.make("Aurora-v0", backend="jax", **kw)
    fn = lambda obs: np.full((obs.shape[0], 1), action, np.float32)
    return env, ep, harness.Agent(fn=fn, digest=f"aurora{action}", formulation=AURORA, env_params=ep)


def test_aurora_scripted_at_zero_holds_its_rate_in_ns3_as_in_jax(ns3_binary, tmp_path):
    # one rate sender alone at 3 of 10 Mbit/s: both simulators hold the rate and deliver it
    kw = {**scenarios.cc_rate(rate_bps=10e6, tcp=("rate",), sender_rate_bps=3e6), "warmup_s": 0.0}
    env, ep, agent = _aurora(kw, 0.0)
    cell = harness.Cell("aurora-test", "long", kw, SECONDS)
    rep, _ = _run(ns3_binary, cell, tmp_path / "rate.json", agent=agent)
    rows = harness.read_intervals(tmp_path / "rate.json.csv")
    rec = harness.records_to_interval(rows, 1, 16, 1)
    state, counts = np.asarray(rec.agent_state)[:, 0], np.asarray(rec.agent_counts)[:, 0]
    pps = 3e6 / (1448 * 8)
    rate = state[:, mx.AGENT_STATE.index("pacing_rate_pps")]
    assert rate[-1] == pytest.approx(pps, rel=1e-6) and np.all(np.abs(rate[rate > 0] - pps) < 1e-3 * pps)
    iv = float(ep.agent_interval_s)
    late_ns3 = counts[-100:, mx.AGENT_COUNTS.index("delivered_pkts")].sum() / (100 * iv)
    assert late_ns3 == pytest.approx(pps, rel=0.02) and counts[:, 1].sum() == 0
    assert rep["long_flows"][0]["tcp"] == "rate"

    _, st = env.reset(jax.random.PRNGKey(3), ep)

    def body(st, _):
        _, st, _, _, _ = env.step_env(jax.random.PRNGKey(0), st, jnp.zeros((1,)), ep)
        return st, st.sim.interval.agent_counts[0, mx.AGENT_COUNTS.index("delivered_pkts")]

    _, delivered = jax.jit(lambda s: jax.lax.scan(body, s, None, len(rows)))(st)
    late_jax = float(np.asarray(delivered)[-100:].sum()) / (100 * iv)
    assert late_jax == pytest.approx(late_ns3, rel=0.02)


def test_aurora_moves_the_rate_senders_rate_by_its_action_inside_ns3(ns3_binary, tmp_path):
    # a = 2 every interval: the rate x 1.05 each time, from 1 Mbit/s, as the JAX env moves it (test_cc)
    kw = {**scenarios.cc_rate(rate_bps=10e6, tcp=("rate",), sender_rate_bps=1e6), "warmup_s": 0.0}
    _, _, agent = _aurora(kw, 2.0)
    cell = harness.Cell("aurora-up", "long", kw, 1.5)
    _run(ns3_binary, cell, tmp_path / "up.json", agent=agent)
    state = np.asarray(harness.records_to_interval(harness.read_intervals(tmp_path / "up.json.csv"), 1, 16, 1)
                       .agent_state)[:, 0]
    rate = state[:, mx.AGENT_STATE.index("pacing_rate_pps")]
    rate = rate[rate > 0]
    assert len(rate) >= 20  # (the flow starts within its first second)
    np.testing.assert_allclose(rate[1:] / rate[:-1], 1.0 + 2.0 * AURORA_STEP, rtol=1e-3)
