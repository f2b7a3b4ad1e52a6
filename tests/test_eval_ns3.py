"""An exported policy inside ns-3: the scenario writes the raw interval record, this
process computes the formulation's observation from it (the env's own JAX function),
asks the ONNX policy and sends back the knobs, in lock-step over a pipe;
`scripts/eval_ns3.py` scores every run from its records and refuses a mismatched file
before simulating."""
import csv
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.ns3 import harness
from rlbm_jax.env import formulations, metrics as mx
from rlbm_jax.env.params import make_params
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.onnx_policy import load_checked, to_onnx
from rlbm_jax.policy import save_policy

ROOT = Path(__file__).resolve().parents[1]
P = 2
BETA = scenarios.THESIS_BETA
THESIS = formulations.get("RLBM-thesis-v0")
TRAINED = ROOT / "results" / "train_default" / "policy"


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _cell(name, policy="rl", intervals=150, **kw):
    """A thesis cell of `intervals` whole agent intervals (119 ticks of 0.8432 ms each: 0.10034 s)."""
    kw = scenarios.thesis_cell(kw.pop("tcp", "cubic"), kw.pop("buffer_per_class_pkts", 100), kw.pop("load", 0.9),
                               policy=policy, **kw)
    interval_s = float(RLBMEnv(make_params(**kw), formulation=THESIS).default_params.agent_interval_s)
    return harness.Cell(name, "thesis", kw, intervals * interval_s)


def _env(cell):
    return RLBMEnv(make_params(**cell.kw), formulation=THESIS, agent_interval_s=0.1)


def _agent(path, cell):
    fn, meta = load_checked(path, num_classes=P, agent_interval_s=0.1)
    return harness.Agent(fn=fn, digest=hashlib.sha256(Path(path).read_bytes()).hexdigest(), formulation=THESIS,
                         env_params=_env(cell).default_params)


def _constant_policy(tmp_path, alpha):
    """A policy whose action is `alpha` whatever it sees (zero weights, tanh01 bias)."""
    bias = np.arctanh(2 * np.asarray(alpha) - 1)
    d = len(THESIS.obs_layout(P))
    w = [(np.zeros((d, 4)), np.zeros(4)), (np.zeros((4, P)), bias)]
    src = save_policy(tmp_path / "const", w, obs_mean=np.zeros(d), obs_std=np.ones(d), obs_layout=THESIS.obs_layout(P),
                      formulation=THESIS.id, num_classes=P, action_map="tanh01",
                      env={"scenario": {"agent_interval_s": 0.1}})
    return to_onnx(src, tmp_path / "const.onnx")


def _metrics(rep):
    return {k: v for k, v in rep.items() if k not in ("wall_s", "config")}


def _intervals(run, drop=("class_alpha", "interval", "t_end_s")):
    return [{k: v for k, v in r.items() if k not in drop} for r in run]


def test_constant_onnx_policy_in_ns3_is_dynamic_thresholds_with_alpha_times_beta(ns3_binary, tmp_path):
    """rl thresholds alpha * beta * (B - Q) with a constant alpha are DT's alpha' * (B - Q)
    with alpha' = alpha * beta: the lock-step run must equal the native DT run exactly,
    interval record by interval record."""
    path = _constant_policy(tmp_path, [0.3, 0.2])
    cell = _cell("rl")
    agent = _agent(path, cell)
    alpha = load_checked(path)[0](np.zeros((1, len(THESIS.obs_layout(P))), np.float32))[0].astype(np.float64)
    dt_alpha = [float(a) * b for a, b in zip(alpha, BETA)]  # what the scenario computes in double
    rl = harness.run_ns3(ns3_binary, [cell], [2], 1, tmp_path, show_progress=False, agent=agent)["rl"]
    dt = harness.run_ns3(ns3_binary, [_cell("dt", policy="dt", alpha=dt_alpha)], [2], 1, tmp_path,
                         show_progress=False, interval_s=agent.interval_s)["dt"]
    a, b = rl["seeds"][0], dt["seeds"][0]
    assert a["drops_c0"] + a["drops_c1"] > 0 and a["flows_completed"] >= 3  # the thresholds were reached
    assert _metrics(a) == _metrics(b)
    assert rl["flows"] == dt["flows"]
    assert a["agent_intervals"] == 150 and len(rl["intervals"][0]) == 150
    assert _intervals(rl["intervals"][0]) == _intervals(dt["intervals"][0])
    assert {r["class_alpha"] for r in rl["intervals"][0]} == {",".join(repr(float(x)) for x in alpha.astype(np.float32))}
    # and the static alpha really is what DT needs to match: another alpha changes the run
    other = harness.run_ns3(ns3_binary, [_cell("dt2", policy="dt", alpha=[1.0, 0.5])], [2], 1, tmp_path,
                            show_progress=False, interval_s=agent.interval_s)["dt2"]
    assert other["seeds"][0]["drops_c0"] + other["seeds"][0]["drops_c1"] != a["drops_c0"] + a["drops_c1"]
    ep = agent.env_params.replace(sim=make_params(**cell.kw))
    assert np.mean(harness.score_records(THESIS, ep, other["intervals"][0])) != np.mean(
        harness.score_records(THESIS, ep, rl["intervals"][0]))


def test_trained_policy_runs_in_ns3_in_lockstep_on_the_env_observation(ns3_binary, tmp_path):
    """The committed policy, exported, inside ns-3: each interval's alpha is the ONNX
    policy's answer to the observation the formulation computes from ns-3's record of the
    interval before, the first is its answer to RLBMEnv's reset observation, and the
    records add up to the run's report."""
    path = to_onnx(TRAINED, tmp_path / "trained.onnx")
    cell = _cell("trained", intervals=200, load=0.8)
    agent = _agent(path, cell)
    fn = load_checked(path)[0]
    res = harness.run_ns3(ns3_binary, [cell], [3], 1, tmp_path, show_progress=False, agent=agent)["trained"]
    rep, rows = res["seeds"][0], res["intervals"][0]
    assert len(rows) == rep["agent_intervals"] == 200
    env = _env(cell)
    ep = env.default_params
    rec = harness.records_to_interval(rows, P, ep.sim.interval_log_size)
    obs = np.asarray(jax.jit(jax.vmap(lambda r: THESIS.observe(r, ep)))(rec))
    alpha = np.array([[float(x) for x in r["class_alpha"].split(",")] for r in rows], np.float32)
    obs0, _ = env.reset(jax.random.PRNGKey(3), ep)
    np.testing.assert_allclose(alpha[0], fn(np.asarray(obs0)[None])[0], rtol=1e-6)  # ns-3's t = 0 is the reset obs
    np.testing.assert_allclose(alpha[1:], fn(obs[:-1]), rtol=1e-6, atol=1e-7)  # lock-step, interval by interval
    assert np.ptp(alpha[:, 0]) > 0.01  # the policy reacted to what it saw
    np.testing.assert_allclose(obs[:, :P], np.broadcast_to(BETA, (len(obs), P)))
    np.testing.assert_allclose(obs[:, -1], float(ep.sim.buffer_pkts / ep.sim.bdp_pkts), rtol=1e-6)
    assert np.all((obs[:, 2 * P] >= 0) & (obs[:, 2 * P] <= 1))
    # the records add up to the whole-run counters
    assert int(np.asarray(rec.flows_done).sum()) == rep["flows_completed"]
    assert int(np.asarray(rec.rto_count).sum()) == rep["rto_count"]
    pkt_bits = (1000 + 54) * 8  # full data packet on the wire
    wire_pkts = rep["util_wire"] * cell.seconds * 10e6 / pkt_bits  # bytes sent, in full packets
    deq = int(np.asarray(rec.dequeues_pkts).sum())
    assert abs(deq - wire_pkts) < 0.01 * wire_pkts
    drops = rep["drops_c0"] + rep["drops_c1"]  # every segment, SYNs included
    data_drops = int(np.asarray(rec.drops_pkts).sum())
    assert 0.9 * drops <= data_drops <= drops and data_drops + int(np.asarray(rec.syn_drops).sum()) <= drops
    assert int(np.asarray(rec.arrivals_pkts).sum()) <= rep["arrivals_c0"] + rep["arrivals_c1"]
    # an interval starts with the open flows' cost the one before ended with
    np.testing.assert_allclose(np.asarray(rec.open_log_slowdown_start)[1:], np.asarray(rec.open_log_slowdown_end)[:-1],
                               rtol=1e-12)
    # the reward is the thesis's formula of the record, computed here by the env's own function
    cap = formulations.capacity_pkts(ep)
    assert cap == ep.ticks_per_step == 119  # one packet per tick
    r = harness.score_records(THESIS, ep, rows)
    done = np.asarray(rec.flows_done).sum(1)
    wfs = np.where(done > 0, np.maximum(np.asarray(rec.slowdown_max).max(1), 1e-6), 1.0)
    np.testing.assert_allclose(r, -np.log(wfs) + np.log1p(np.asarray(rec.sink_pkts) / cap), rtol=1e-5, atol=1e-6)


def test_ns3_writes_exactly_the_record_fields_the_formulations_read(ns3_binary, tmp_path):
    out = tmp_path / "iv.csv"
    subprocess.run([str(ns3_binary), f"--cdf={harness.cdf_path('websearch')}", "--seconds=0.3", "--load=0.5",
                    "--agent_interval_s=0.1", f"--intervals_out={out}", f"--out={tmp_path / 'r.json'}"], check=True)
    rows = harness.read_intervals(out)
    assert len(rows) == 3
    assert set(rows[0]) == {"interval", "t_end_s", "class_alpha", *harness.NS3_RECORD_FIELDS}
    rec = harness.records_to_interval(rows, P, 4)
    # every field but the agent flows' rows, which ns-3 has no sender agent to write (None)
    assert set(rec.__dataclass_fields__) == {n for n, _ in mx.INTERVAL_FIELDS} | set(mx.AGENT_RECORD_FIELDS)
    assert all(getattr(rec, n) is None for n in mx.AGENT_RECORD_FIELDS)
    with pytest.raises(ValueError, match="lacks"):
        harness.records_to_interval([{k: v for k, v in rows[0].items() if k != "sink_pkts"}], P, 4)
    with pytest.raises(ValueError, match="3 values for 2 classes"):
        harness.records_to_interval([dict(rows[0], drops_pkts="0,0,0")], P, 4)
    # more finished flows than the record lists: the rest are counted, as in the JAX simulator
    many = harness.records_to_interval([dict(rows[0], flows="1000:0:1.5;2000:0:2.5;3000:1:1.1")], P, 2)
    assert np.asarray(many.flows_logged).tolist() == [2] and np.asarray(many.flows_overflow).tolist() == [1]


def test_eval_ns3_writes_the_transfer_report(tmp_path):
    path = to_onnx(TRAINED, tmp_path / "trained.onnx")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_ns3.py"), "--onnx", str(path), "--tcp",
                           "newreno", "--buffer-pkts", "100", "--load", "0.5", "--seeds", "2", "--seconds", "10",
                           "--baselines", "sb-naive", "abm", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "transfer.md").read_text()
    assert "| newreno | 100 | 0.5 |" in text and "## Per cell: the transfer gap" in text and "`thesis`" in text
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["simulator"], r["policy"]) for r in rows} == {(s, p) for s in ("ns-3", "jax")
                                                             for p in ("rl", "sb-naive", "abm")}
    for r in rows:
        assert 0.0 < float(r["util_wire"]) < 1.0 and math.isfinite(float(r["reward_mean"]))
    assert (out / "ns3_vs_jax.png").stat().st_size > 0 and (out / "grid_newreno.png").stat().st_size > 0
    # the policy ran inside ns-3 in lock-step: one decision per 0.1 s, all 100 intervals scored
    runs = sorted((out / "ns3_runs").glob("eval_rl_*.json"))
    assert len(runs) == 2 and all(json.loads(r.read_text())["agent_intervals"] == 100 for r in runs)
    # and a baseline's ns-3 reward is the formulation's reward of its records
    rec_file = sorted((out / "ns3_runs").glob("eval_sb-naive_*_s100000.intervals.csv"))[0]
    ep = RLBMEnv(make_params(**scenarios.thesis_cell("newreno", 100, 0.5, policy="rl")), formulation=THESIS,
                 episode_s=10.0).default_params
    mine = float(np.mean(harness.score_records(THESIS, ep, harness.read_intervals(rec_file))))
    naive = [float(r["reward_mean"]) for r in rows if r["simulator"] == "ns-3" and r["policy"] == "sb-naive"][0]
    seed2 = sorted((out / "ns3_runs").glob("eval_sb-naive_*_s100001.intervals.csv"))[0]
    mine2 = float(np.mean(harness.score_records(THESIS, ep, harness.read_intervals(seed2))))
    assert naive == pytest.approx((mine + mine2) / 2, rel=1e-6)


@pytest.mark.parametrize("case", ["width", "interval", "not_onnx", "missing"])
def test_eval_ns3_refuses_a_mismatched_onnx_before_simulating(tmp_path, case):
    if case == "width":  # a policy for three classes: observation width 13
        rng = np.random.default_rng(0)
        d = len(THESIS.obs_layout(3))
        w = [(rng.normal(size=(d, 8)), np.zeros(8)), (rng.normal(size=(8, 3)), np.zeros(3))]
        src = save_policy(tmp_path / "p3", w, obs_mean=np.zeros(d), obs_std=np.ones(d), obs_layout=THESIS.obs_layout(3),
                          formulation=THESIS.id, num_classes=3)
        path, why = to_onnx(src, tmp_path / "p.onnx"), "3 classes"
    elif case == "interval":
        path, why = to_onnx(TRAINED, tmp_path / "p.onnx", agent_interval_s=0.2), "agent interval"
    elif case == "not_onnx":
        path, why = tmp_path / "p.onnx", "not a valid ONNX model"
        path.write_text(json.dumps({"obs_dim": 10}))
    else:
        path, why = tmp_path / "nothing.onnx", "no such file"
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_ns3.py"), "--onnx", str(path),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert why in proc.stderr
    assert not out.exists()  # refused before any output, let alone a simulation


def test_ns3_agent_parameters_and_protocol_errors_are_refused(ns3_binary, tmp_path):
    base = [str(ns3_binary), f"--cdf={harness.cdf_path('websearch')}", "--seconds=1", "--load=0.5"]
    for args, name in ((["--policy=rl", "--out=-"], "policy"),  # rl needs an agent
                       (["--policy=dt", "--agent=stdio", "--agent_interval_s=0.1", "--out=-"], "agent"),
                       (["--policy=rl", "--agent=stdio", "--agent_interval_s=0.1", "--out=-"], "out"),
                       (["--policy=rl", "--agent=stdio", "--out=x.json"], "agent_interval_s"),
                       (["--beta=1,2,3", "--out=-"], "beta"),
                       (["--intervals_out=x.csv", "--out=-"], "intervals_out")):
        proc = subprocess.run(base + args, capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and f"--{name}" in proc.stderr, (args, proc.stderr[-500:])
    rl = base + ["--policy=rl", "--agent=stdio", "--agent_interval_s=0.1", f"--out={tmp_path / 'r.json'}"]
    # an answer without the knob's name, of the wrong width, or none at all, ends the run with
    # status 3, naming the interval
    for reply, why in (("0.5 0.5\n", "expected class_alpha= and 2 finite alphas"),
                       ("class_alpha=0.5\n", "expected class_alpha= and 2 finite alphas"),
                       ("class_alpha=0.5,nan\n", "expected class_alpha= and 2 finite alphas"),
                       ("", "closed its pipe")):
        proc = subprocess.run(rl, input=reply, capture_output=True, text=True)
        assert proc.returncode == 3 and why in proc.stderr and "interval 0" in proc.stderr, proc.stderr[-500:]
        assert proc.stdout.startswith("rec 0 arrivals_pkts=0,0 ")
    # the driver: a reply the scenario refuses stops the run with its stderr; a policy that
    # answers out of shape is refused here, before anything is sent
    with pytest.raises(RuntimeError, match="expected class_alpha= and 2 finite alphas"):
        harness.drive(rl, lambda rec: "class_alpha=0.5,0.5,0.5")
    cell = _cell("x")
    agent = harness.Agent(fn=lambda obs: np.full((1, 3), 0.5, np.float32), digest="x", formulation=THESIS,
                          env_params=_env(cell).default_params)
    with pytest.raises(RuntimeError, match="record 0: policy gave"):
        harness.drive(rl, agent.responder(make_params(**cell.kw)))
    nan_agent = harness.Agent(fn=lambda obs: np.full((1, 2), np.nan, np.float32), digest="x", formulation=THESIS,
                              env_params=_env(cell).default_params)
    with pytest.raises(RuntimeError, match="record 0: policy gave"):
        harness.drive(rl, nan_agent.responder(make_params(**cell.kw)))
    assert harness.drive(rl, lambda rec: "class_alpha=0.5,0.5") == 10
