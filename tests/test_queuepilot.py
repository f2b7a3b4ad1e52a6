"""QueuePilot: the agent's marker (rate, no drops below the limit, ECN required), the
formulation's observation and reward against their definitions, the knob, the scenario
mix, and the command line's refusals."""
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.queuepilot import study as qp
from rlbm_jax import scenarios
from rlbm_jax.env import backends, metrics as mx, sim
from rlbm_jax.env.formulations.queuepilot import MARK_LEVELS, QUEUEPILOT
from rlbm_jax.env.params import make_params


def _marker_run(mark_prob, seconds=3.0, buffer_pkts=400, seed=0):
    kw = scenarios.queuepilot(8, 0.02, "newreno", load=0.0, buffer_pkts=buffer_pkts, warmup_s=1.0,
                              num_flow_slots=8, num_senders=8, completion_log_size=8)
    p = make_params(**kw)
    s = sim.apply_knobs(sim.init(jax.random.PRNGKey(seed), p), {"mark_prob": mark_prob})
    n = int(seconds / float(p.tick_s))
    s, _ = jax.jit(lambda s: backends.run(s, p, n))(s)
    return s.metrics, p


@pytest.mark.parametrize("mark_prob", [0.05, 0.5])
def test_marker_marks_at_its_probability_and_never_drops_below_the_limit(mark_prob):
    m, p = _marker_run(mark_prob)
    arr = int(jnp.sum(m.arrive_warm))
    marks = int(jnp.sum(m.mark_warm))
    assert arr > 1000
    # independent marks: binomial, within 4 standard deviations
    sd = math.sqrt(arr * mark_prob * (1 - mark_prob))
    assert abs(marks - mark_prob * arr) < 4 * sd + 1
    # a buffer of 8 flows' windows never fills under marking: no drop at all
    assert int(m.drop_total) == 0
    # conservation: what was offered is queued, on the wire, or dropped
    assert int(m.tx_total) >= int(m.deq_total)


def test_marker_without_ecn_is_refused_and_zero_probability_never_marks():
    kw = scenarios.queuepilot(4, 0.02, "cubic", load=0.0, num_flow_slots=4, num_senders=4)
    with pytest.raises(ValueError, match="ecn"):
        make_params(**{**kw, "ecn": False})
    m, _ = _marker_run(0.0, seconds=1.5, buffer_pkts=40)
    assert int(m.mark_total) == 0
    assert int(m.drop_total) > 0  # with nothing marked the small buffer overflows (droptail)


def test_the_action_sets_the_marking_probability():
    p = make_params(**scenarios.queuepilot(4, 0.02, load=0.0, num_flow_slots=4, num_senders=4))
    s = sim.init(jax.random.PRNGKey(0), p)
    rec = s.interval
    for i, level in enumerate(MARK_LEVELS):
        s2 = sim.apply_knobs(s, QUEUEPILOT.knobs(jnp.asarray(i), rec, None))
        assert np.allclose(np.asarray(s2.aqm.mark.mark_p), level)
    assert QUEUEPILOT.action_space(1).n == len(MARK_LEVELS)


def test_observation_and_reward_follow_their_definitions():
    env = qp.make_env(make_params(**qp.config_kw(20, 0.04)))
    ep = env.default_params
    cap = ep.ticks_per_step * ep.sim.pkts_per_tick
    step_s = ep.ticks_per_step * float(ep.sim.tick_s)
    B = float(ep.sim.buffer_pkts)
    rec = mx.init_interval(1)
    q_avg = 30.0
    rec = rec.replace(arrivals_pkts=jnp.asarray([50]), dequeues_pkts=jnp.asarray([cap - 3]),
                      marks_pkts=jnp.asarray([5]), queue_pkt_s=jnp.asarray([q_avg * step_s]))
    obs = np.asarray(QUEUEPILOT.observe(rec, ep))
    u, d = (cap - 3) / cap, q_avg / cap
    want = [50 / cap, u, 0.0, 5 / 50, q_avg / B, d]
    assert obs == pytest.approx(want, rel=1e-5)
    r, parts = QUEUEPILOT.reward_of(rec, ep)
    assert float(r) == pytest.approx(u ** 2 / math.sqrt(1 + d), rel=1e-5)
    # any drop: -1, whatever the utilisation
    r_drop, _ = QUEUEPILOT.reward_of(rec.replace(drops_pkts=jnp.asarray([1])), ep)
    assert float(r_drop) == -1.0
    # rx and the delay are capped (3 and 30 steps)
    big = rec.replace(arrivals_pkts=jnp.asarray([10 * cap]), queue_pkt_s=jnp.asarray([100.0 * cap * step_s]))
    o = np.asarray(QUEUEPILOT.observe(big, ep))
    assert o[0] == pytest.approx(3.0) and o[5] == pytest.approx(30.0)
    assert len(obs) == len(QUEUEPILOT.obs_layout(1))


def test_the_scenario_buffer_is_bdp_over_sqrt_n():
    for n, rtt in ((10, 0.02), (25, 0.08)):
        p = make_params(**scenarios.queuepilot(n, rtt))
        assert int(p.buffer_pkts) == round(float(p.bdp_pkts) / math.sqrt(n))
        assert float(p.base_rtt_s) == pytest.approx(rtt, rel=0.02)


def test_every_baseline_variant_batches_over_the_configurations_and_names_its_algorithm():
    """Each classic-AQM variant (FQ-CoDel's per-flow queues included) builds on every
    training and test configuration with the same static shapes, so one compiled batch
    runs it everywhere; each belongs to one of the algorithms the report chooses among."""
    from rlbm_jax.env.params import stack_params

    cfgs = [(n, r, t) for t in ("cubic", "newreno") for n in set(qp.TRAIN_FLOWS) | set(qp.TEST_FLOWS)
            for r in set(qp.TRAIN_RTTS_S) | set(qp.TEST_RTTS_S)]
    names = list(qp.baseline_variants(100))
    assert {qp.algorithm_of(v) for v in names} == set(qp.ALGORITHMS)
    assert qp.algorithm_of("fq-codel-2ms") == "fq-codel" and qp.algorithm_of("codel-2ms") == "codel"
    bufs = [int(make_params(**qp.config_kw(n, r, t)).buffer_pkts) for n, r, t in cfgs]  # (made once: every variant's)
    for v in names:
        ps = []
        for (n, r, t), buf in zip(cfgs, bufs):
            ps.append(make_params(**qp.config_kw(n, r, t, **qp.baseline_variants(buf)[v])))
            assert int(ps[-1].buffer_pkts) == buf and bool(ps[-1].ecn)
        stacked = stack_params(ps)
        assert {p.flow_queue_capacity_pkts for p in ps} == {stacked.flow_queue_capacity_pkts}, v


def test_the_mixture_env_draws_every_configuration_and_refuses_mismatched_shapes():
    cfgs = [qp.config_kw(n, 0.04, "cubic", num_flow_slots=32) for n in (10, 20, 25)]
    env, ep = qp.train_env(episode_s=0.05, configs=cfgs)
    keys = jax.random.split(jax.random.PRNGKey(0), 24)
    _, st = jax.vmap(env.reset, in_axes=(0, None))(keys, ep)
    drawn = set(np.asarray(st.sim.long_flows).tolist())
    assert drawn == {10, 20, 25}
    # a step runs the drawn configuration: its buffer is that configuration's
    bufs = {int(make_params(**c).long_flows): int(make_params(**c).buffer_pkts) for c in cfgs}
    assert all(bufs[int(n)] == int(b) for n, b in zip(st.sim.long_flows, st.sim.buffer_pkts))
    with pytest.raises(ValueError, match="static"):
        from rlbm_jax.env.randomize import MixtureEnv
        MixtureEnv(env.env, [make_params(**cfgs[0]), make_params(**{**cfgs[0], "num_flow_slots": 16})])


def test_cli_refuses_an_evaluation_without_a_trained_run(tmp_path):
    r = subprocess.run([sys.executable, "scripts/queuepilot.py", "evaluate", "--run-dir", str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "holds no config.json (`study.py queuepilot train --run-dir" in r.stderr
    # a run with its config but no weights is refused, naming what is missing
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config.json").write_text('{"study": "queuepilot", "recipe": "lstm", "ppo": {}, "seeds": [0]}')
    r = subprocess.run([sys.executable, "scripts/queuepilot.py", "evaluate", "--run-dir", str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "holds no trained weights" in r.stderr


def test_a_run_of_the_script_is_a_run_of_the_kits_study_and_evaluate_is_its_select_and_test(tmp_path):
    """queuepilot.py train records the kit's study and recipe (with its own PPO settings), so
    that evaluate, the kit's select then test, takes the run; both stages' ledger is
    <run-dir>/kit."""
    from rlbm_jax import jsonio
    from rlbm_jax.cli import queuepilot as cli
    from rlbm_jax.study import get
    from rlbm_jax.study.pipeline import study_run

    run = tmp_path / "run"
    ap = cli.build_parser()
    cfg = cli.run_config(ap.parse_args(["train", "--run-dir", str(run), "--lr", "0.0002", "--num-seeds", "2"]))
    run.mkdir()
    jsonio.write(run / "config.json", {k: v for k, v in cfg.items() if k != "cmd"})
    (run / "trained.msgpack").write_bytes(b"")
    rc = study_run(get("queuepilot"), run)
    assert (rc["study"], rc["recipe"], rc["ppo"]["lr"], rc["seeds"]) == ("queuepilot", "lstm", 0.0002, [0, 1])
    ev = cli.run_config(ap.parse_args(["evaluate", "--run-dir", str(run), "--test-seeds", "2"]))
    assert ev["select"]["runs"] == [["lstm", str(run)]] and ev["select"]["results"] == str(run / "kit")
    assert ev["test"] == {"test_seeds": 2, "seconds": None, "warmup_s": None, "chunk": 50, "results": str(run / "kit")}
    assert ev["select"]["seeds"] == list(qp.SELECTION_SEEDS)
    # a run on another role's seeds is refused when it is trained and when it is judged
    with pytest.raises(ValueError, match="2000: test"):
        cli.run_config(ap.parse_args(["train", "--run-dir", str(tmp_path / "x"), "--seed", "2000"]))
    jsonio.write(run / "config.json", {**{k: v for k, v in cfg.items() if k != "cmd"}, "seeds": [2000]})
    with pytest.raises(ValueError, match="2000: test"):
        study_run(get("queuepilot"), run)


def test_ns3_judging_takes_the_tcp_model_for_the_jax_side_only():
    """`queuepilot.py ns3 --prr ns-3.37 --ecn-cwr ns-3.37` runs the JAX side with ns-3.37's
    arithmetic; the ns-3 command line (and so its run cache) is the same as without."""
    from rlbm_jax.ns3 import harness
    from rlbm_jax.cli import model_kw
    from rlbm_jax.cli.queuepilot import build_parser

    a = build_parser().parse_args(["ns3", "--prr", "ns-3.37", "--ecn-cwr", "ns-3.37"])
    assert model_kw(a) == {"prr": "ns-3.37", "ecn_cwr": "ns-3.37"}
    kw = qp.config_kw(20, 0.04, "cubic", **model_kw(a))
    p = make_params(**kw)
    assert int(p.prr_id) == 1 and int(p.ecn_cwr_id) == 1 and p.needs_jax_tick
    plain = harness.Cell("qp/x", "thesis", qp.config_kw(20, 0.04, "cubic"), 15.0)
    ours = harness.Cell("qp/x", "thesis", kw, 15.0)
    assert harness.ns3_args(ours, 2000) == harness.ns3_args(plain, 2000)
