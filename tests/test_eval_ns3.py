"""An exported policy inside ns-3: the scenario's rl buffer policy driven in lock-step
by an ONNX policy over a pipe computes RLBMEnv's observation and applies the policy's
thresholds; `scripts/eval_ns3.py` refuses a mismatched file before simulating."""
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

from rlbm_jax.env.params import THESIS_BETA as BETA, THESIS_DEFAULTS, make_params
from rlbm_jax.env.rlbm_env import RLBMEnv, obs_dim
from rlbm_jax.onnx_policy import load_checked, obs_layout, to_onnx
from rlbm_jax.policy import save_policy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration import lockstep, run as cal  # noqa: E402

P = 2
TRAINED = ROOT / "results" / "train_default" / "policy"


@pytest.fixture(scope="module")
def ns3_binary():
    return cal.build_ns3()


def _cell(name, policy="rl", seconds=15.0, **kw):
    kw = dict(THESIS_DEFAULTS, **{"tcp": "cubic", "load": 0.9, "buffer_per_class_pkts": 100, "policy": policy,
                                  "beta": BETA, **kw})
    return cal.Cell(name, "thesis", kw, seconds)


def _agent(path, interval_s=0.1):
    fn, meta = load_checked(path, num_classes=P, agent_interval_s=0.1)
    return cal.Agent(fn=fn, digest=hashlib.sha256(Path(path).read_bytes()).hexdigest(), obs_dim=meta["obs_dim"],
                     act_dim=meta["act_dim"], interval_s=interval_s, flows_scale=meta["flows_scale"])


def _constant_policy(tmp_path, alpha):
    """A policy whose action is `alpha` whatever it sees (zero weights, tanh01 bias)."""
    bias = np.arctanh(2 * np.asarray(alpha) - 1)
    w = [(np.zeros((obs_dim(P), 4)), np.zeros(4)), (np.zeros((4, P)), bias)]
    src = save_policy(tmp_path / "const", w, obs_mean=np.zeros(obs_dim(P)), obs_std=np.ones(obs_dim(P)),
                      action_map="tanh01", env={"scenario": {"agent_interval_s": 0.1}})
    return to_onnx(src, tmp_path / "const.onnx")


def _metrics(rep):
    return {k: v for k, v in rep.items() if k not in ("wall_s", "config")}


def test_constant_onnx_policy_in_ns3_is_dynamic_thresholds_with_alpha_times_beta(ns3_binary, tmp_path):
    """rl thresholds alpha * beta * (B - Q) with a constant alpha are DT's alpha' * (B - Q)
    with alpha' = alpha * beta: the lock-step run must equal the native DT run exactly."""
    path = _constant_policy(tmp_path, [0.3, 0.2])
    agent = _agent(path)
    alpha = load_checked(path)[0](np.zeros((1, obs_dim(P)), np.float32))[0].astype(np.float64)
    dt_alpha = [float(a) * b for a, b in zip(alpha, BETA)]  # what the scenario computes in double
    rl = cal.run_ns3(ns3_binary, [_cell("rl")], [2], 1, tmp_path, show_progress=False, agent=agent)["rl"]
    dt = cal.run_ns3(ns3_binary, [_cell("dt", policy="dt", alpha=dt_alpha)], [2], 1, tmp_path, show_progress=False,
                     extra=("--agent_interval_s=0.1", "--flows_scale=10.0"))["dt"]
    a, b = rl["seeds"][0], dt["seeds"][0]
    assert a["drops_c0"] + a["drops_c1"] > 0 and a["flows_completed"] >= 3  # the thresholds were reached
    assert _metrics(a) == _metrics(b)
    assert rl["flows"] == dt["flows"]
    assert a["agent_intervals"] == 150
    # and the static alpha really is what DT needs to match: another alpha changes the run
    other = cal.run_ns3(ns3_binary, [_cell("dt2", policy="dt", alpha=[1.0, 0.5])], [2], 1, tmp_path,
                        show_progress=False, extra=("--agent_interval_s=0.1", "--flows_scale=10.0"))["dt2"]["seeds"][0]
    assert other["drops_c0"] + other["drops_c1"] != a["drops_c0"] + a["drops_c1"]
    assert other["reward_mean"] != a["reward_mean"]


def test_trained_policy_runs_in_ns3_in_lockstep_on_the_env_observation(ns3_binary, tmp_path):
    """The committed policy, exported, inside ns-3: each interval's alpha is the ONNX
    policy's answer to the observation ns-3 computed at its start, the first observation
    is RLBMEnv's reset observation, and the per-interval log adds up to the run's report."""
    path = to_onnx(TRAINED, tmp_path / "trained.onnx")
    agent = _agent(path)
    fn = load_checked(path)[0]
    cell = _cell("trained", seconds=20.0, load=0.8)
    res = cal.run_ns3(ns3_binary, [cell], [3], 1, tmp_path, show_progress=False, agent=agent)["trained"]
    rep = res["seeds"][0]
    (log,) = tmp_path.glob("trained_s3_*.intervals.csv")
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == rep["agent_intervals"] == 200
    obs = np.array([[float(r[k]) for k in obs_layout(P)] for r in rows], np.float32)
    alpha = np.array([[float(r[f"alpha_c{c}"]) for c in range(P)] for r in rows], np.float32)

    env = RLBMEnv(make_params(**dict(cell.kw, queue_capacity_pkts=100)), agent_interval_s=0.1)
    obs0, _ = env.reset(jax.random.PRNGKey(3), env.default_params)
    np.testing.assert_allclose(alpha[0], fn(np.asarray(obs0)[None])[0], rtol=1e-6)  # ns-3's t = 0 is the reset obs
    np.testing.assert_allclose(alpha[1:], fn(obs[:-1]), rtol=1e-6, atol=1e-7)  # lock-step, interval by interval
    assert np.ptp(alpha[:, 0]) > 0.01  # the policy reacted to what it saw
    np.testing.assert_allclose(obs[:, :P], np.broadcast_to(BETA, (len(obs), P)))
    np.testing.assert_allclose(obs[:, -1], float(env.default_params.sim.buffer_pkts / env.default_params.sim.bdp_pkts),
                               rtol=1e-6)
    assert np.all((obs[:, 2 * P] >= 0) & (obs[:, 2 * P] <= 1))
    # the interval counters add up to the whole-run counters
    assert sum(int(r["flows_done"]) for r in rows) == rep["flows_completed"]
    assert math.isclose(np.mean([float(r["reward"]) for r in rows]), rep["reward_mean"], rel_tol=1e-8)
    pkt_bits = (1000 + 54) * 8  # full data packet on the wire
    cap = 0.1 * 10e6 / pkt_bits  # data packets the link carries in one interval
    data_deq, data_drops = obs[:, P:2 * P].sum() * cap, obs[:, 2 * P + 2].sum() * cap
    wire_pkts = rep["util_wire"] * 20.0 * 10e6 / pkt_bits  # bytes sent, in full packets
    drops = rep["drops_c0"] + rep["drops_c1"]  # every segment, SYNs included
    assert abs(data_deq - wire_pkts) < 0.01 * wire_pkts
    assert 0.9 * drops <= round(data_drops) <= drops


def test_eval_ns3_writes_the_transfer_report(tmp_path):
    path = to_onnx(TRAINED, tmp_path / "trained.onnx")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_ns3.py"), "--onnx", str(path), "--tcp",
                           "newreno", "--buffer-pkts", "100", "--load", "0.5", "--seeds", "2", "--seconds", "10",
                           "--baselines", "sb-naive", "abm", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "transfer.md").read_text()
    assert "| newreno | 100 | 0.5 |" in text and "## Per cell: the transfer gap" in text
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


@pytest.mark.parametrize("case", ["width", "interval", "not_onnx", "missing"])
def test_eval_ns3_refuses_a_mismatched_onnx_before_simulating(tmp_path, case):
    if case == "width":  # a policy for three classes: observation width 13
        rng = np.random.default_rng(0)
        w = [(rng.normal(size=(obs_dim(3), 8)), np.zeros(8)), (rng.normal(size=(8, 3)), np.zeros(3))]
        src = save_policy(tmp_path / "p3", w, obs_mean=np.zeros(obs_dim(3)), obs_std=np.ones(obs_dim(3)))
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
    base = [str(ns3_binary), f"--cdf={cal.cdf_path('websearch')}", "--seconds=1", "--load=0.5"]
    for args, name in ((["--policy=rl", "--out=-"], "policy"),  # rl needs an agent
                       (["--policy=dt", "--agent=stdio", "--agent_interval_s=0.1", "--out=-"], "agent"),
                       (["--policy=rl", "--agent=stdio", "--agent_interval_s=0.1", "--out=-"], "out"),
                       (["--policy=rl", "--agent=stdio", "--out=x.json"], "agent_interval_s"),
                       (["--beta=1,2,3", "--out=-"], "beta"),
                       (["--intervals_out=x.csv", "--out=-"], "intervals_out")):
        proc = subprocess.run(base + args, capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and f"--{name}" in proc.stderr, (args, proc.stderr[-500:])
    rl = base + ["--policy=rl", "--agent=stdio", "--agent_interval_s=0.1", f"--out={tmp_path / 'r.json'}"]
    # an answer of the wrong width, or none at all, ends the run with status 3, naming the interval
    for reply, why in (("0.5\n", "expected 2 finite alphas"), ("", "closed its pipe")):
        proc = subprocess.run(rl, input=reply, capture_output=True, text=True)
        assert proc.returncode == 3 and why in proc.stderr and "interval 0" in proc.stderr, proc.stderr[-500:]
        assert proc.stdout.startswith("obs 0 ")
    # the driver refuses a policy that answers out of shape, and stops the scenario
    with pytest.raises(RuntimeError, match="expected 2 finite alphas"):
        lockstep.drive(rl, lambda obs: np.full((1, 3), 0.5, np.float32), obs_dim(P), P)
    with pytest.raises(RuntimeError, match="expected 2 finite alphas"):
        lockstep.drive(rl, lambda obs: np.full((1, 2), np.nan, np.float32), obs_dim(P), P)
    assert lockstep.drive(rl, lambda obs: np.full((1, 2), 0.5, np.float32), obs_dim(P), P) == 10
