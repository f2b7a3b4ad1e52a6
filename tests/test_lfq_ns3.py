"""LFQ inside ns-3.37: the lock-step driver sets the one flow's cap through rl-size (a FIFO
of floor(cap), the fair queue's admission with one flow), gives the observation the cap
that was in force over each interval (its carry reads it, as the packet env's does), and
`lfq.py ns3` judges an exported graph beside the baselines there."""
import json

import jax
import numpy as np
import pytest

from rlbm_jax.env.params import make_params
from rlbm_jax.lfq import ns3 as L
from rlbm_jax.lfq import study as S
from rlbm_jax.ns3 import harness

CONFIG = (15.5, 10.5, "cubic")
SECONDS = 1.0


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


class _Caps:
    """A stateless policy answering caps from a fixed cycle, keeping every observation."""

    def __init__(self, caps):
        self.caps, self.seen = list(caps), []

    def __call__(self, obs):
        self.seen.append(np.asarray(obs, np.float32).copy())
        return np.asarray([[self.caps[(len(self.seen) - 1) % len(self.caps)]]], np.float32)


def _agent_run(ns3_binary, tmp_path, caps, name, knob_names=L.KNOB_NAMES):
    env = S.make_env()
    kw = L.cell_kw(CONFIG, "LFQ")
    ep = env.default_params.replace(sim=make_params(**kw))
    fn = _Caps(caps)
    agent = harness.Agent(fn=fn, digest=name, formulation=env.formulation, env_params=ep, knob_names=knob_names)
    out = harness.run_ns3(ns3_binary, [harness.Cell(name, "long", kw, SECONDS)], [5000], 1, tmp_path,
                          show_progress=False, agent=agent, fresh=True)[name]
    return fn, out, ep, env


def test_a_constant_cap_is_the_fifo_of_its_floor(ns3_binary, tmp_path):
    fn, out, ep, _ = _agent_run(ns3_binary, tmp_path, [20.7], "lfq-const")
    rows = out["intervals"][0]
    assert {float(r["buffer_size_pkts"]) for r in rows} == {20.0}
    hist = np.asarray(out["seeds"][0]["queue_hist"], np.float64)
    assert hist[21:].sum() == 0 and hist[20] > 0  # the limit binds, never passed
    kw = L.cell_kw(CONFIG, "fq-bdp") | {"buffer_per_class_pkts": 20, "buffer_pkts": 20}
    dt = harness.run_ns3(ns3_binary, [harness.Cell("lfq-dt", "long", kw, SECONDS)], [5000], 1, tmp_path,
                         show_progress=False, interval_s=float(ep.agent_interval_s), fresh=True)["lfq-dt"]
    for f in ("arrivals_pkts", "drops_pkts", "dequeues_pkts", "queue_end_pkts", "queue_pkt_s", "sink_bytes"):
        assert [r[f] for r in rows] == [r[f] for r in dt["intervals"][0]], f
    assert sum(int(r["drops_pkts"]) for r in rows) > 0


def test_the_driver_gives_the_carry_the_cap_in_force(ns3_binary, tmp_path):
    caps = [7.9, 30.2, 12.5, 55.0, 3.3]
    fn, out, ep, env = _agent_run(ns3_binary, tmp_path, caps, "lfq-cycle")
    rows = out["intervals"][0]
    assert [float(r["buffer_size_pkts"]) for r in rows] == [float(np.floor(caps[k % len(caps)])) for k in range(len(rows))]
    f = env.formulation
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    at = lambda k: jax.tree.map(lambda x: x[k], rec)
    empty = harness.records_to_interval([{**rows[0], **{k: "0" for k in ("arrivals_pkts", "drops_pkts", "marks_pkts",
                                                                           "dequeues_pkts", "queue_end_pkts",
                                                                           "queue_pkt_s", "queue_min_pkts", "sink_pkts",
                                                                           "sink_bytes")}}], 1,
                                        ep.sim.interval_log_size)
    w = f.first_window(jax.tree.map(lambda x: x[0], empty), ep)
    np.testing.assert_allclose(fn.seen[0].reshape(w.shape), w, rtol=1e-6, atol=1e-6)
    assert len(fn.seen) >= len(rows) > 100
    for k in range(1, len(rows) + 1):
        knobs = {"flow_cap_pkts": np.float32(caps[(k - 1) % len(caps)])}
        w = f.next_window(w, at(k - 1), ep, knobs)
        if k < len(fn.seen):
            got = fn.seen[k].reshape(w.shape)
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, err_msg=f"boundary {k}")
            assert got[0, 2] == np.float32(caps[(k - 1) % len(caps)])  # the cap signal: the one in force


def test_a_knob_the_scenario_does_not_read_is_refused(ns3_binary, tmp_path):
    with pytest.raises(RuntimeError, match="flow_cap_pkts"):
        _agent_run(ns3_binary, tmp_path, [20.0], "lfq-unnamed", knob_names=())


def test_lfq_ns3_cli_judges_an_exported_graph(tmp_path):
    from flax import serialization

    from rlbm_jax import jsonio
    from rlbm_jax.cli import lfq as cli

    run = tmp_path / "run"
    run.mkdir()
    from rlbm_jax.lfq import onnx as lfq_onnx

    (run / "config.json").write_text(jsonio.dumps({"study": "lfq", "recipe": "paper-ab", "agent": "lfq-ab-fork",
                                                   "ab_fork": {"alpha": 0.01}, "seeds": [0, 1]}))
    params = S.CapNet().init(jax.random.PRNGKey(3), np.zeros((1, len(S.OBS_SCALE)), np.float32))
    (run / "trained_seed0.msgpack").write_bytes(serialization.to_bytes(params))
    assert cli.main(["ns3", "--run-dir", str(run)]) == 2  # nothing exported yet
    assert cli.main(["export", "--run-dir", str(run)]) == 2  # seed 1 has no weights: the run is refused whole
    lfq_onnx.export_run(run, [0])  # seed 0 alone, so that ns3 names seed 1 as without a policy
    argv = ["ns3", "--run-dir", str(run), "--configs", "15.5:10.5:cubic", "7.5:20.5:newreno", "--test-seeds", "1",
            "--duration-s", "0.5", "--jobs", "1", "--no-progress"]
    assert cli.main(argv[:3] + ["--configs", "15.5:10.5:bbr"]) == 2
    assert cli.main(argv[:3] + ["--configs", "30:10:cubic"]) == 2  # beyond LFQ's 25 Mbit/s
    assert cli.main(argv + ["--no-jax"]) == 0
    assert cli.main(argv) == 0  # (ns-3's runs from the run's cache) beside JAX's, the kit's rollout
    jx = json.loads((run / "ns3" / "results.json").read_text())["runs"]["jax"]
    assert np.asarray(jx["LFQ"]["bandwidth_mbps"]).shape == (1, 1, 2)
    assert np.asarray(jx["fq-100"]["queue_max_pkts"]).shape == (1, 1, 2)
    assert np.all(np.asarray(jx["fq-bdp"]["queue_max_pkts"]) <= np.asarray(jx["fq-bdp"]["cap_pkts"]))
    rep = json.loads((run / "ns3" / "results.json").read_text())
    assert rep["config"]["training_seeds"] == [0] and rep["config"]["training_seeds_without_policy"] == [1]
    assert np.asarray(rep["runs"]["ns3"]["LFQ"]["bandwidth_mbps"]).shape == (1, 1, 2)
    assert np.asarray(rep["runs"]["ns3"]["fq-100"]["bandwidth_mbps"]).shape == (1, 1, 2)
    md = (run / "ns3" / "RESULTS.md").read_text()
    for p in L.POLICIES:
        assert f"| {p} | ns-3 |" in md
    # a FIFO at the BDP never holds more than it
    q = rep["runs"]["ns3"]
    assert np.all(np.asarray(q["fq-bdp"]["queue_max_pkts"]) <= np.asarray(q["fq-bdp"]["cap_pkts"]))
    assert np.all(np.asarray(q["fq-1000"]["bandwidth_mbps"]) > 0)
    assert (run / "ns3" / "ns3_vs_jax.png").stat().st_size > 0
