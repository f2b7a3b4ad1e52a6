"""ABS inside ns-3.37: every interval record carries capacity_pkts (the capacity schedule's
integral over the interval) and queue_min_pkts (the standing queue), the scenario's rl-size policy holds the queue at the size the
driver answers (drop-tail at that size, packet for packet), and the lock-step driver gives
a windowed formulation the last 5 observations, oldest first, as the packet env keeps them."""
import jax
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import capacity, make_params
from rlbm_jax.env.formulations.abs import ABS_TRACE, WINDOW
from rlbm_jax.env.rlbm_env import make_env_params
from rlbm_jax.ns3 import harness

# rate changes inside the 0.1 s intervals, no outage, repeating after 1.3 s
SCHED = capacity.Schedule([0.0, 0.237, 0.55, 0.901], [10e6, 4e6, 7.5e6, 2.5e6], 1.3, name="abs-steps")
SECONDS = 2.0


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _kw(**over):
    return scenarios.abs_env2_trace(SCHED, rate_bps=10e6, warmup_s=0.5, **over)


class _Recorder:
    """A stateless policy that answers a fixed size (action index size - 1) and keeps every
    observation it was given."""

    def __init__(self, size_pkts):
        self.action = np.asarray([size_pkts - 1], np.int32)
        self.seen = []

    def __call__(self, obs):
        self.seen.append(np.asarray(obs, np.float32).copy())
        return self.action


def _agent_run(ns3_binary, tmp_path, size_pkts, name):
    fn = _Recorder(size_pkts)
    ep = make_env_params(make_params(**_kw()), agent_interval_s=0.1)
    agent = harness.Agent(fn=fn, digest=f"fixed{size_pkts}", formulation=ABS_TRACE, env_params=ep)
    out = harness.run_ns3(ns3_binary, [harness.Cell(name, "long", _kw(), SECONDS)], [3], 1, tmp_path,
                          show_progress=False, agent=agent, fresh=True)[name]
    return fn, out, ep


def test_rl_size_holds_the_queue_at_the_answered_size_and_the_window_is_kept(ns3_binary, tmp_path):
    size = 3
    fn, out, ep = _agent_run(ns3_binary, tmp_path, size, "abs-size")
    rows, rep = out["intervals"][0], out["seeds"][0]
    assert len(rows) == round(SECONDS / 0.1) and len(fn.seen) in (len(rows), len(rows) + 1)
    # the limit the agent set, from the first boundary (t = 0) on: the queue never above it
    assert {float(r["buffer_size_pkts"]) for r in rows} == {float(size)}
    hist = np.asarray(rep["queue_hist"], np.float64).reshape(-1)
    assert hist[size + 1:].sum() == 0 and hist[size] > 0, "the queue passed the size, or never reached it"
    assert sum(int(r["drops_pkts"]) for r in rows) > 0  # the size binds: arrivals refused at it
    assert max(int(r["queue_end_pkts"]) for r in rows) <= size
    # the standing queue: at most the queue at either end of the interval
    qend, qmin = ([int(r[f]) for r in rows] for f in ("queue_end_pkts", "queue_min_pkts"))
    assert all(m <= min(a, b) for m, a, b in zip(qmin[1:], qend[1:], qend[:-1])) and qmin[0] == 0
    # the same as drop-tail at that size, packet for packet (the limit is checked at each
    # arrival), with the boundaries at the same times (the agent's interval, float32's 0.1)
    dt = harness.run_ns3(ns3_binary, [harness.Cell("abs-dt", "long", _kw(policy="droptail", buffer_per_class_pkts=size,
                                                                          queue_capacity_pkts=100), SECONDS)],
                         [3], 1, tmp_path, show_progress=False, interval_s=float(ep.agent_interval_s),
                         fresh=True)["abs-dt"]
    for f in ("dequeues_pkts", "drops_pkts", "arrivals_pkts", "queue_end_pkts", "queue_pkt_s", "capacity_pkts"):
        assert [r[f] for r in rows] == [r[f] for r in dt["intervals"][0]], f
    # the window: the observation answered at boundary k is the last 5 records' (the empty
    # record before interval 0 in every place at first), oldest first
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    obs = np.asarray([np.asarray(ABS_TRACE.observe(jax.tree.map(lambda x: x[i], rec), ep)) for i in range(len(rows))])
    D = obs.shape[1]
    first = np.zeros(D, np.float32)
    first[3] = float(ep.sim.base_rtt_s)  # the empty record: only the propagation delay is not 0
    for k in range(1, len(fn.seen)):
        hist_k = [obs[j] if j >= 0 else first for j in range(k - WINDOW, k)]
        np.testing.assert_allclose(fn.seen[k].reshape(WINDOW, D), np.stack(hist_k), rtol=1e-5, atol=1e-7,
                                   err_msg=f"boundary {k}")
    np.testing.assert_allclose(fn.seen[0].reshape(WINDOW, D), np.broadcast_to(first, (WINDOW, D)), atol=1e-7)


def test_every_record_carries_the_capacity_offered(ns3_binary, tmp_path):
    out = harness.run_ns3(ns3_binary, [harness.Cell("abs-cap", "long", _kw(policy="droptail"), SECONDS)], [1], 1,
                          tmp_path, show_progress=False, interval_s=0.1, fresh=True)["abs-cap"]
    rows = out["intervals"][0]
    bits = float(make_params(**_kw()).data_pkt_bits)
    got = np.asarray([float(r["capacity_pkts"]) for r in rows])
    want = np.asarray([SCHED.bits_between(float(r["t_end_s"]) - 0.1, float(r["t_end_s"])) / bits for r in rows])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)
    assert want.min() < 0.4 * want.max()
    # the link never sends more than it was offered (within the packet on the wire at a change)
    deq = np.asarray([float(r["dequeues_pkts"]) for r in rows])
    assert np.all(deq <= got + 2) and deq.sum() > 0.5 * got.sum()
    # without a schedule: the constant rate's packets
    kw0 = scenarios.abs_env2(rate_bps=6e6)
    out0 = harness.run_ns3(ns3_binary, [harness.Cell("abs-const", "long", {**kw0, "policy": "droptail"}, 0.5)], [1],
                           1, tmp_path, show_progress=False, interval_s=0.1, fresh=True)["abs-const"]
    np.testing.assert_allclose([float(r["capacity_pkts"]) for r in out0["intervals"][0]], 6e6 * 0.1 / 12000, rtol=1e-9)
