"""A continuous-action QueuePilot policy inside ns-3: `QueuePilot-continuous-v0`, a
stateless MLP whose output is the marking probability itself (what `train_apg.py`
exports), through the lock-step driver's action path (`harness.Agent`) and through
`queuepilot.py ns3`; what the action means is read from the policy's own metadata, and a
policy `ns3` cannot drive is refused by name."""
import hashlib
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from rlbm_jax.cli.queuepilot import main as queuepilot_main
from rlbm_jax.env import formulations
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT_CONTINUOUS
from rlbm_jax.env.params import make_params
from rlbm_jax.ns3 import harness
from rlbm_jax.onnx_policy import load_checked, to_onnx
from rlbm_jax.policy import save_policy
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.queuepilot.ns3 import agent_of

OBS_STD = np.array([0.5, 0.2, 0.02, 0.05, 0.3, 1.0])


def _env(long_flows=6, rtt_s=0.02):
    kw = qp.config_kw(long_flows, rtt_s, "cubic", warmup_s=0.0)
    env = qp.make_env(make_params(**kw), 1.0, formulation=QUEUEPILOT_CONTINUOUS)
    return kw, env, env.default_params


def _mlp_onnx(tmp_path, interval_s, formulation=QUEUEPILOT_CONTINUOUS.id, name="mlp", seed=0, action_map="tanh01",
              bias=-1.0):
    """An untrained stateless MLP policy (random weights, the output's bias at `bias`)."""
    rng = np.random.default_rng(seed)
    layout = formulations.get(formulation).obs_layout(1)
    D = len(layout)
    layers = [(rng.normal(size=(D, 16)), np.zeros(16)), (rng.normal(size=(16, 1)), np.full(1, bias))]
    src = save_policy(tmp_path / name, layers, obs_mean=np.zeros(D), obs_std=OBS_STD[:D] if D == 6 else np.ones(D),
                      obs_layout=layout, formulation=formulation, num_classes=1, activation="tanh",
                      action_map=action_map)
    return to_onnx(src, tmp_path / f"{name}.onnx", agent_interval_s=interval_s)


def _agent(path, ep):
    """The driver's agent of the exported file, its formulation the one the file names."""
    fn, meta = load_checked(path, num_classes=1, agent_interval_s=float(ep.agent_interval_s))
    return harness.Agent(fn=fn, digest=hashlib.sha256(Path(path).read_bytes()).hexdigest(),
                         formulation=formulations.get(meta["formulation"]), env_params=ep,
                         recurrent=meta["network"] == "lstm"), fn


def _record(rng, cap):
    """An interval record as the scenario writes it (one class), around `cap` packets a step."""
    arr = int(rng.integers(0, 2 * cap))
    drops = int(rng.integers(0, 3)) * int(rng.random() < 0.3)
    return {"arrivals_pkts": str(arr), "drops_pkts": str(drops), "marks_pkts": str(int(rng.integers(0, arr // 4 + 1))),
            "dequeues_pkts": str(int(rng.integers(cap // 2, cap + 1))), "queue_end_pkts": str(int(rng.integers(0, 30))),
            "queue_pkt_s": repr(float(rng.uniform(0, 0.1))), "sink_pkts": "0", "sink_bytes": "0", "rto_count": "0",
            "syn_drops": "0", "flows_done": "0", "slowdown_max": "0", "log_slowdown_sum": "0",
            "open_log_slowdown_start": "0", "open_log_slowdown_end": "0", "flows": "",
            "queue_min_pkts": "0", "capacity_pkts": repr(float(cap))}


def test_the_driver_sends_a_continuous_policys_output_as_the_marking_probability(tmp_path):
    """For every record the reply is `mark_prob=p` with p the graph's output (as float32,
    within the rounding of another compilation of the observation) for the formulation's
    observation of that record: the probability itself, not an index into QueuePilot-v0's
    levels; the formulation clips it to [0, 1]."""
    kw, _, ep = _env()
    interval_s = float(ep.agent_interval_s)
    path = _mlp_onnx(tmp_path, interval_s)
    assert agent_of([path], interval_s) == {"formulation": QUEUEPILOT_CONTINUOUS.id, "network": "mlp",
                                            "action": QUEUEPILOT_CONTINUOUS.action.text}
    agent, fn = _agent(path, ep)
    assert agent.formulation is QUEUEPILOT_CONTINUOUS and not agent.recurrent
    answer = agent.responder(make_params(**kw))
    cap = round(float(ep.agent_interval_s) * 100e6 / 12e3)
    rng = np.random.default_rng(1)
    sent = []
    for _ in range(40):
        fields = _record(rng, cap)
        reply = answer(fields)
        name, _, value = reply.partition("=")
        assert name == "mark_prob" and " " not in value
        rec = jax.tree.map(lambda x: x[0], harness.records_to_interval([fields], 1, ep.sim.interval_log_size))
        obs = np.asarray(QUEUEPILOT_CONTINUOUS.observe(rec, ep), np.float32)[None]
        want = np.float32(np.clip(fn(obs)[0, 0], 0.0, 1.0))
        assert float(value) == pytest.approx(float(want), rel=1e-5, abs=1e-7)
        assert float(np.float32(value)) == float(value)  # a float32, written exactly
        sent.append(float(value))
    assert len(set(sent)) == len(sent) and not set(sent) & set(MARK_LEVELS)  # a continuum, not the levels
    # a graph whose output leaves [0, 1] (action map clip01 before the formulation's clip): 0 or 1 is sent
    wide = _mlp_onnx(tmp_path, interval_s, name="wide", action_map="clip01", bias=0.5, seed=3)
    answer = _agent(wide, ep)[0].responder(make_params(**kw))
    got = {float(answer(_record(rng, cap)).partition("=")[2]) for _ in range(40)}
    assert all(0.0 <= p <= 1.0 for p in got) and len(got) > 2


def test_only_queuepilots_marking_policies_are_driven(tmp_path):
    """`agent_of` refuses, naming the file, a policy of another formulation and a run whose
    policies are not all of one kind; load_checked refuses another agent interval."""
    _, _, ep = _env()
    interval_s = float(ep.agent_interval_s)
    ok = _mlp_onnx(tmp_path, interval_s)
    other = _mlp_onnx(tmp_path, interval_s, formulation="RLBM-v0", name="rlbm")
    with pytest.raises(ValueError, match=r"rlbm\.onnx: a mlp policy of formulation RLBM-v0; `ns3` drives"):
        agent_of([ok, other], interval_s)
    nominal = _mlp_onnx(tmp_path, 0.005, name="nominal")
    with pytest.raises(ValueError, match=r"nominal\.onnx: trained with an agent interval of 0.005 s"):
        agent_of([nominal], interval_s)
    lstm = Path(__file__).resolve().parents[1] / "results" / "queuepilot" / "policy_seed0.onnx"
    assert agent_of([lstm], interval_s)["network"] == "lstm"
    with pytest.raises(ValueError, match=r"mlp\.onnx: a mlp policy of QueuePilot-continuous-v0, the run's other "
                                         r"policies are lstm policies of QueuePilot-v0"):
        agent_of([lstm, ok], interval_s)


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def test_lockstep_drives_ns3_with_a_continuous_marking_probability(ns3_binary, tmp_path):
    """Inside ns-3 the marking probability of every interval is the graph's output for the
    observation of the interval before (the first: the env's reset observation), and the
    marks follow it."""
    kw, env, ep = _env()
    interval_s = float(ep.agent_interval_s)
    path = _mlp_onnx(tmp_path, interval_s)
    agent, fn = _agent(path, ep)
    n = 120
    cell = harness.Cell("mlp", "thesis", kw, n * interval_s)
    res = harness.run_ns3(ns3_binary, [cell], [5], 1, tmp_path, show_progress=False, agent=agent)["mlp"]
    rows = res["intervals"][0]
    assert len(rows) == res["seeds"][0]["agent_intervals"] == n
    given = np.array([float(r["mark_prob"]) for r in rows], np.float32)
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    obs = np.asarray(jax.jit(jax.vmap(lambda r: QUEUEPILOT_CONTINUOUS.observe(r, ep)))(rec))
    obs0, _ = env.reset(jax.random.PRNGKey(5), ep)
    seq = np.concatenate([np.asarray(obs0)[None], obs[:-1]]).astype(np.float32)
    want = np.clip(fn(seq)[:, 0], 0.0, 1.0).astype(np.float32)
    np.testing.assert_allclose(given, want, rtol=1e-5, atol=1e-7)
    assert len(np.unique(given)) > 10 and not set(np.unique(given).tolist()) & set(MARK_LEVELS)
    marks, arrivals, drops = (np.asarray(getattr(rec, k))[:, 0] for k in ("marks_pkts", "arrivals_pkts", "drops_pkts"))
    assert np.all(marks <= arrivals)
    assert marks.sum() == pytest.approx((given * (arrivals - drops)).sum(), rel=0.2)


def test_queuepilot_ns3_judges_a_train_apg_run(ns3_binary, tmp_path, capsys):
    """`queuepilot.py ns3` on a run laid out as train_apg.py writes it (config.json with
    `apg` and `training_seeds`, policy_seed<S>.onnx): the agent is the continuous policy its
    files name, run in ns-3 (here without the JAX side, briefly); a run holding a policy of
    another formulation is refused with the file's name."""
    _, _, ep = _env()
    interval_s = float(ep.agent_interval_s)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"formulation": QUEUEPILOT_CONTINUOUS.id, "apg": {},
                                                 "training_seeds": [3, 4]}))
    for s in (3, 4):
        _mlp_onnx(tmp_path, interval_s, name=f"p{s}", seed=s).rename(run / f"policy_seed{s}.onnx")
    argv = ["ns3", "--run-dir", str(run), "--agent-only", "--no-jax", "--configs", "10:20:cubic", "--seeds", "1",
            "--seconds", "0.3", "--warmup-s", "0.1", "--jobs", "1"]
    assert queuepilot_main(argv) == 0
    rep = json.loads((run / "ns3" / "results.json").read_text())
    assert rep["agent"]["formulation"] == QUEUEPILOT_CONTINUOUS.id and rep["config"]["trainer"] == "apg"
    assert rep["config"]["baselines"] == [] and rep["policies"] == ["queuepilot"]
    assert set(rep["reward_per_run"]["ns3"]) == {"queuepilot-seed3", "queuepilot-seed4"}
    assert "stateless MLP whose output is the marking probability" in (run / "ns3" / "RESULTS.md").read_text()
    _mlp_onnx(tmp_path, interval_s, formulation="RLBM-v0", name="rlbm").rename(run / "policy_seed4.onnx")
    capsys.readouterr()
    assert queuepilot_main(argv) == 2
    assert "policy_seed4.onnx: a mlp policy of formulation RLBM-v0" in capsys.readouterr().err
