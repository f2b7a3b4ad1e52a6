"""QueuePilot inside ns-3: the scenario's rl-mark policy (droptail limits, every admitted
ECT packet CE-marked with the agent's probability) and the lock-step driving of a
recurrent, discrete ONNX policy whose LSTM state is carried from step to step."""
import hashlib
import json
import math
import subprocess
from pathlib import Path

import jax
import numpy as np
import pytest

from rlbm_jax.queuepilot import study as qp
from rlbm_jax.ns3 import harness
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT
from rlbm_jax.env.params import make_params
from rlbm_jax.onnx_policy import load_checked, to_onnx
from rlbm_jax.policy import LSTMWeights, save_recurrent_policy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _kw(long_flows=4, rtt_s=0.02, **over):
    return qp.config_kw(long_flows, rtt_s, "cubic", **over)


def _run(binary, tmp_path, kw, seconds, seed, *extra, interval_s=0.005):
    """One native ns-3 run of the queuepilot scenario `kw`: (report, interval rows)."""
    c = harness.Cell("qp", "thesis", kw, seconds)
    stem = tmp_path / f"run{len(list(tmp_path.glob('*.json')))}"
    harness.write_schedule(c, seed, Path(f"{stem}.schedule.csv"))
    subprocess.run([str(binary), *harness.ns3_args(c, seed), *extra, f"--flows_in={stem}.schedule.csv",
                    f"--out={stem}.json", f"--agent_interval_s={interval_s!r}", f"--intervals_out={stem}.iv.csv"],
                   check=True, capture_output=True, text=True)
    return json.loads(Path(f"{stem}.json").read_text()), harness.read_intervals(f"{stem}.iv.csv")


def _sum(rows, name):
    return sum(float(r[name]) for r in rows)


def test_rl_mark_at_a_constant_probability_marks_at_that_rate_and_drops_only_at_the_limit(ns3_binary, tmp_path):
    kw = _kw(long_flows=10)
    buffer = kw["buffer_per_class_pkts"]
    # p = 0.1: about a tenth of the admitted data packets carry CE, each independently
    rep, rows = _run(ns3_binary, tmp_path, kw, 2.0, 7, "--mark_prob=0.1")
    arr, marks, drops = _sum(rows, "arrivals_pkts"), _sum(rows, "marks_pkts"), _sum(rows, "drops_pkts")
    admitted = arr - drops
    assert admitted > 1500
    assert abs(marks / admitted - 0.1) < 4 * math.sqrt(0.1 * 0.9 / admitted), (marks, admitted)
    assert rep["config"]["mark_prob"] == 0.1 and {r["mark_prob"] for r in rows} == {"0.10000000000000001"}
    assert rep["marks_c0"] > 0 and rep["mark_rate"] == pytest.approx(rep["marks_c0"] / rep["arrivals_c0"], rel=0.05)
    # a drop only where the buffer is full: the occupancy reached B whenever anything was dropped
    assert drops == 0 or rep["queue_hist"][buffer] > 0
    # p = 0: the marker is off and the policy is droptail's, packet for packet
    rep0, rows0 = _run(ns3_binary, tmp_path, kw, 1.5, 7)
    dt, rows_dt = _run(ns3_binary, tmp_path, dict(kw, policy="droptail"), 1.5, 7)
    assert _sum(rows0, "marks_pkts") == 0 and rep0["marks_c0"] == 0 and _sum(rows0, "drops_pkts") > 0
    assert [{k: v for k, v in r.items() if k != "mark_prob"} for r in rows0] == rows_dt
    assert rep0["drops_c0"] == dt["drops_c0"] and rep0["queue_hist"][buffer] > 0
    # below the limit nothing is dropped, however much is marked: a buffer the flows never fill
    big, rows_big = _run(ns3_binary, tmp_path, dict(kw, buffer_per_class_pkts=2000, queue_capacity_pkts=2000), 1.5, 7,
                         "--mark_prob=0.5")
    assert _sum(rows_big, "drops_pkts") == 0 and big["drops_c0"] == 0 and _sum(rows_big, "marks_pkts") > 500
    # rl-mark marks; without ECN it would have nothing to mark, so the scenario refuses it
    proc = subprocess.run([str(ns3_binary), *harness.ns3_args(harness.Cell("x", "long", dict(kw, ecn=False), 0.1), 1),
                           "--out=-"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--ecn" in proc.stderr


def _tiny_lstm_onnx(tmp_path, interval_s, seed=0, H=8):
    """An untrained recurrent policy on QueuePilot-v0 with random weights, its forget gate
    biased open so that what it saw steps ago still moves its choice."""
    rng = np.random.default_rng(seed)
    layout = QUEUEPILOT.obs_layout(1)
    D = len(layout)
    b = np.zeros(4 * H, np.float32)
    b[H:2 * H] = 2.0  # forget gate mostly open
    w = LSTMWeights(embed=(rng.normal(size=(D, H)), rng.normal(size=H) * 0.5), wx=rng.normal(size=(H, 4 * H)),
                    wh=rng.normal(size=(H, 4 * H)) * 1.5, b=b,
                    actor=[(rng.normal(size=(H, 8)), np.zeros(8)), (rng.normal(size=(8, len(MARK_LEVELS))) * 2,
                                                                     np.zeros(len(MARK_LEVELS)))])
    src = save_recurrent_policy(tmp_path / "tiny", w, obs_mean=np.zeros(D),
                                obs_std=np.array([0.5, 0.2, 0.02, 0.05, 0.3, 1.0]), obs_layout=layout,
                                formulation=QUEUEPILOT.id, num_classes=1, action_values=MARK_LEVELS,
                                env={"scenario": {"agent_interval_s": interval_s}})
    return to_onnx(src, tmp_path / "tiny.onnx")


def test_lockstep_drives_a_recurrent_discrete_onnx_policy_with_its_state_carried(ns3_binary, tmp_path):
    """ns-3's marking probability in every interval is the tiny LSTM's choice for the
    observation of the interval before, the state carried through the whole run: the same
    graph stepped here over the recorded observations (the first: the env's reset one)
    chooses the same levels, and the same graph without its state would not."""
    kw = _kw(long_flows=6, warmup_s=0.0)
    sp = make_params(**kw)
    env = qp.make_env(sp, 1.0)
    ep = env.default_params
    interval_s = float(ep.agent_interval_s)
    path = _tiny_lstm_onnx(tmp_path, interval_s)
    fn, meta = load_checked(path, num_classes=1, agent_interval_s=interval_s, formulation=QUEUEPILOT.id)
    assert meta["network"] == "lstm" and meta["action_values"] == list(MARK_LEVELS)
    agent = harness.Agent(fn=fn, digest=hashlib.sha256(path.read_bytes()).hexdigest(), formulation=QUEUEPILOT,
                          env_params=ep, recurrent=True)
    n = 160
    cell = harness.Cell("tiny", "thesis", kw, n * interval_s)
    res = harness.run_ns3(ns3_binary, [cell], [5], 1, tmp_path, show_progress=False, agent=agent)["tiny"]
    rows = res["intervals"][0]
    assert len(rows) == res["seeds"][0]["agent_intervals"] == n
    levels = np.asarray(MARK_LEVELS, np.float32)
    given = np.array([float(r["mark_prob"]) for r in rows], np.float32)
    got = np.argmin(np.abs(given[:, None] - levels[None]), axis=1)
    np.testing.assert_array_equal(given, levels[got])  # exactly the level (as float32) the driver sent
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    obs = np.asarray(jax.jit(jax.vmap(lambda r: QUEUEPILOT.observe(r, ep)))(rec))
    obs0, _ = env.reset(jax.random.PRNGKey(5), ep)
    seq = np.concatenate([np.asarray(obs0)[None], obs[:-1]]).astype(np.float32)  # what decided each interval
    h, c = fn.initial_state(1)
    carried, fresh = [], []
    for o in seq:
        a, h, c, _ = fn(o[None], h, c)
        carried.append(int(a[0]))
        fresh.append(int(fn(o[None], *fn.initial_state(1))[0][0]))
    np.testing.assert_array_equal(got, carried)
    assert len(set(carried)) >= 2  # it reacted to what it saw
    assert np.mean(np.array(fresh) != got) > 0.05  # and its memory mattered
    # the marks ns-3 made follow the probabilities it was given
    marks, arrivals = np.asarray(rec.marks_pkts)[:, 0], np.asarray(rec.arrivals_pkts)[:, 0]
    p = np.asarray(MARK_LEVELS)[got]
    assert np.all(marks[p == 0] == 0) and np.all(marks <= arrivals)
    assert marks.sum() == pytest.approx((p * (arrivals - np.asarray(rec.drops_pkts)[:, 0])).sum(), rel=0.2)
    # an index outside the action space is refused before anything is sent
    rl = [str(ns3_binary), *harness.ns3_args(harness.Cell("x", "long", dict(kw, load=0.0), 0.02), 1),
          "--agent=stdio", f"--agent_interval_s={interval_s!r}", f"--out={tmp_path / 'x.json'}"]

    class Bad:
        def initial_state(self, n):
            return fn.initial_state(n)

        def __call__(self, obs, h, c):
            return np.array([len(MARK_LEVELS)]), h, c, None

    bad = harness.Agent(fn=Bad(), digest="x", formulation=QUEUEPILOT, env_params=ep, recurrent=True)
    with pytest.raises(RuntimeError, match=r"record 0: policy gave .* action index in \[0, 6\)"):
        harness.drive(rl, bad.responder(sp))
    assert harness.drive(rl, lambda rec: "mark_prob=0.5") == 4
    with pytest.raises(RuntimeError, match="expected mark_prob= and one finite probability"):
        harness.drive(rl, lambda rec: "class_alpha=0.5")
