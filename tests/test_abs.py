"""ABS (`ABS-v0`, `formulations/abs.py`) and the buffer-size knob it sets (`buffer_size_pkts`,
read by the drop-tail policy "rl-size"): the knob moves admission (a lowered limit refuses
arrivals and keeps what is queued, a raised one admits more, packets are conserved across
each change, and at the FIFO cap it is "droptail" exactly), the env steps under jit and vmap
with its window of observations, the reward is the paper's QoE on hand-made records, the
native backend runs the policy and the fluid one refuses it by name, and an LSTM policy
on it exports to ONNX."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlbm_jax
from rlbm_jax import scenarios
from rlbm_jax.env import backends, metrics as mx, model, sim
from rlbm_jax.env.formulations import abs as abs_f
from rlbm_jax.env.params import pad_params, stack_params
from rlbm_jax.env.rlbm_env import make_env_params
from rlbm_jax.env.switch import buffer

CAP, LOW = 60, 10
TICKS = 1500  # per phase: 1.8 s at 10 Mbit/s, long enough for three flows to fill 60 packets


def _trace(s):
    m = s.metrics
    return dict(q=s.queue.pkts[0], thr=s.thresholds[0], tx=m.tx_total, drop=m.drop_total, deq=m.deq_total,
                size=s.rl_size_pkts[0])


def test_the_knob_moves_admission_and_conserves_packets():
    kw = dict(long_flows=3, rtt_s=0.02, rate_bps=10e6, buffer_per_class_pkts=CAP)
    batch = pad_params([scenarios.params("abs-env2", **kw), scenarios.params("abs-env2", **kw, policy="droptail")])
    p = stack_params(batch)
    run = jax.jit(jax.vmap(lambda s, p: sim.run(s, p, TICKS, trace_fn=_trace)))
    s = jax.jit(jax.vmap(sim.init))(jnp.broadcast_to(jax.random.PRNGKey(1), (2, 2)), p)
    np.testing.assert_array_equal(np.asarray(s.rl_size_pkts), [[CAP], [CAP]])  # it starts at the FIFO cap
    phases = []
    for size in (None, LOW, 10 * CAP):  # the cap, lowered, raised past the cap (clipped to it)
        if size is not None:
            s = sim.apply_knobs(s, {"buffer_size_pkts": jnp.full((2, 1), size)})
        q0 = np.asarray(s.queue.pkts[:, 0])
        tot0 = {k: np.asarray(getattr(s.metrics, k + "_total")) for k in ("tx", "drop", "deq")}
        s, tr = run(s, p)
        phases.append((q0, tot0, jax.tree.map(np.asarray, tr)))
    (_, _, t1), (q_low, tot_low, t2), (_, _, t3) = phases
    # at the cap the agent's policy is droptail, packet for packet (env 1 runs "droptail")
    for k in t1:
        if k != "size":
            np.testing.assert_array_equal(t1[k][0], t1[k][1], err_msg=k)
    assert t1["q"][0].max() == CAP - 1  # (the queue as a tick leaves it: filled to the cap, one packet served)
    np.testing.assert_array_equal(t2["thr"][0], LOW)  # the lowered size is the threshold from the first tick
    np.testing.assert_array_equal(t3["thr"][0], CAP)  # a size above the cap is clipped to it
    assert q_low[0] > LOW + 10, "the queue was not above the lowered size when it was lowered"
    # conservation across every tick, the changes included: every transmission is dropped,
    # queued or gone on the wire, and the queue moves only by what is admitted and served
    for _, _, tr in phases:
        np.testing.assert_array_equal(tr["tx"], tr["drop"] + tr["q"] + tr["deq"])
    q = np.concatenate([q_low[:1], t2["q"][0]])
    tx, drop, deq = (np.concatenate([tot_low[k][:1], t2[k][0]]) for k in ("tx", "drop", "deq"))
    admitted, served = np.diff(tx) - np.diff(drop), np.diff(deq)
    np.testing.assert_array_equal(np.diff(q), admitted - served)
    # lowered: nothing queued is dropped, every arrival is refused while the queue is at or
    # above the size, and once below it the queue never passes it again
    above = q[:-1] >= LOW
    assert above[0] and np.all(admitted[above] == 0) and np.all(served[above] == 1)
    assert np.diff(tx)[above].sum() > 0, "nothing arrived while the queue drained: the refusal is not tested"
    np.testing.assert_array_equal(np.diff(drop)[above], np.diff(tx)[above])
    below = int(np.argmax(q < LOW))
    assert 0 < below < TICKS // 2 and q[below:].max() == LOW - 1  # filled to the size again, never past it
    # raised again: it admits more than the lowered size (droptail, env 1, never changed)
    assert t3["q"][0].max() > LOW + 20
    assert t2["q"][1].max() > LOW + 20


def test_abs_env_steps_under_jit_and_vmap_with_its_window():
    env, p = rlbm_jax.make("ABS-v0", episode_s=0.4)
    assert buffer.POLICY_NAMES[int(p.sim.policy_id)] == "rl-size" and int(p.ticks_per_step) == 50
    assert env.action_space(p).n == 100 and len(env.obs_layout) == 5 * abs_f.WINDOW
    assert env.obs_layout[:5] == tuple(f"{n}_lag4" for n in ("queue_delay_s", "enqueued_per_capacity", "throughput",
                                                           "propagation_delay_s", "capacity_mbps"))
    assert env.obs_layout[-1] == "capacity_mbps_lag0"
    n = 3
    obs, st = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.PRNGKey(0), n), p)
    assert obs.shape == (n, 25)
    np.testing.assert_allclose(np.asarray(obs[:, 3]), float(p.sim.base_rtt_s), rtol=1e-6)
    # the record an episode starts from covers no time: nothing offered (capacity 0, ratios 0)
    np.testing.assert_array_equal(np.asarray(obs[:, 4]), 0.0)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    actions = jnp.asarray([[99, 4, 39], [99, 9, 0], [99, 0, 49], [99, 49, 9]], jnp.int32)
    for t, a in enumerate(actions):
        prev = obs
        obs, st, r, term, trunc, info = step(jax.random.split(jax.random.PRNGKey(t + 1), n), st, a, p)
        if t < 3:
            np.testing.assert_array_equal(np.asarray(st.sim.rl_size_pkts[:, 0]), np.asarray(a) + 1)
            np.testing.assert_array_equal(np.asarray(obs[:, :20]), np.asarray(prev[:, 5:]))  # the window shifts
            assert not np.asarray(trunc).any()
            # every interval offered 50 packets at the constant 6 Mbit/s: capacity_mbps reads 6
            np.testing.assert_allclose(np.asarray(obs[:, -1]), 6.0, rtol=1e-5)
            np.testing.assert_allclose(np.asarray(st.sim.interval.capacity_pkts), 50.0, rtol=1e-6)
        want = np.asarray(info["qoe_throughput"]) * np.asarray(info["qoe_delay"])
        np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)
        assert np.all(np.asarray(r) >= 0) and np.all(np.asarray(r) <= 100)
    # the fourth interval ends the episode: auto-reset, the final window in `info`
    assert np.asarray(trunc).all()
    np.testing.assert_array_equal(np.asarray(obs[:, :5]), np.asarray(obs[:, 20:]))  # a fresh window
    fin = np.asarray(info["final_observation"])
    assert fin.shape == (n, 25) and np.asarray(info["throughput"]).max() > 0


def _record(dequeues, delay_s, params, capacity_pkts=50.0):
    """A one-class record whose link sent `dequeues` packets of the `capacity_pkts` it
    offered and whose average queueing delay is `delay_s` (its queue integral)."""
    sim_p = params.sim
    interval_s = params.ticks_per_step * float(sim_p.tick_s)
    q_avg = delay_s * float(sim_p.bottleneck_rate_bps) / float(sim_p.data_pkt_bits)
    rec = mx.init_interval(1)
    return rec.replace(arrivals_pkts=jnp.asarray([dequeues + 7]), drops_pkts=jnp.asarray([3]),
                       dequeues_pkts=jnp.asarray([dequeues]), queue_pkt_s=jnp.asarray([q_avg * interval_s]),
                       capacity_pkts=jnp.asarray(capacity_pkts, jnp.float32))


def test_the_reward_is_the_papers_qoe():
    ep = make_env_params(scenarios.params("abs-env2"), agent_interval_s=0.1)
    cap = ep.ticks_per_step  # 50 packets in 0.1 s at 6 Mbit/s
    assert cap == 50
    # Env 2's QoE_delay (Sec. IV-B-3) typed from the paper, b3's decay taken positive
    env2 = lambda x: (-62.5 * x + 100.0 if x <= 0.08 else -1214.3 * x + 192.1 if x <= 0.15
                      else 27.4 * math.exp(-6.8 * x) + 0.07)
    reward = abs_f.ABS.reward
    for deq, x in ((40, 0.05), (50, 0.1), (25, 0.3), (0, 0.0)):
        rec = _record(deq, x, ep)
        r, parts = reward(rec, ep)
        assert float(parts["queue_delay_s"]) == pytest.approx(x, rel=1e-5, abs=1e-9)
        assert float(r) == pytest.approx(deq / cap * env2(x), rel=1e-5), (deq, x)
        # the observation is the same interval's state
        obs = np.asarray(abs_f.ABS.observe(rec, ep))
        np.testing.assert_allclose(obs, [x, (deq + 4) / cap, deq / cap, float(ep.sim.base_rtt_s), 6.0],
                                   rtol=1e-5, atol=1e-9)
    assert float(reward(_record(40, 0.05, ep), ep)[0]) == pytest.approx(77.5, rel=1e-6)  # 0.8 x 96.875
    # the weights (Eq. 7): alpha = 2, beta = 1
    r2, _ = abs_f.QoEReward(alpha=2.0)(_record(40, 0.1, ep), ep)
    assert float(r2) == pytest.approx(0.8 ** 2 * env2(0.1), rel=1e-5)
    # both published curves are continuous at their breakpoints and fall with the delay
    for curve in (abs_f.QOE_DELAY_ENV1, abs_f.QOE_DELAY_ENV2):
        for t in (curve.t1, curve.t2):
            assert float(curve(t * (1 + 1e-6))) == pytest.approx(float(curve(t)), rel=2e-3)
        assert np.all(np.diff(np.asarray(curve(jnp.linspace(0.0, 3 * curve.t2, 301)))) <= 1e-2)
    assert float(abs_f.QOE_DELAY_ENV1(1e-4)) == pytest.approx(95.0) and float(abs_f.QOE_DELAY_ENV1(0.0)) == 100.0


def test_native_runs_the_policy_and_fluid_refuses_it_by_name():
    p = scenarios.params("abs-env2")
    assert model.missing("fluid", p) == ["policy=rl-size"]
    assert "does not implement policy=rl-size" in model.refusal("fluid", p)
    # (the native tick runs it: tests/test_native.py holds it to the JAX tick, the knob moved)
    assert model.missing("native", p) == [] and backends.resolve("auto", p) == "native"
    from rlbm_jax.env.backends import fluid

    with pytest.raises(ValueError, match="the fluid backend does not implement policy=rl-size"):
        fluid.check(p)
    with pytest.raises(ValueError, match="ABS-v0 observes the last 5 intervals"):
        rlbm_jax.make("ABS-v0", backend="fluid")
    # the knob is the rl-size policy's alone, and make picks it
    assert [pol for pol in buffer.POLICY_NAMES if buffer.reads_knob(pol, "buffer_size_pkts")] == ["rl-size"]
    assert sim.KNOBS["buffer_size_pkts"] == "rl_size_pkts"


def test_an_lstm_policy_on_abs_exports_to_onnx(tmp_path):
    from rlbm_jax.onnx_policy import load_checked, to_onnx
    from rlbm_jax.ppo import PPO, PPOConfig
    from rlbm_jax.ppo.export import export_policy

    env, ep = rlbm_jax.make("ABS-v0", episode_s=0.3)
    ppo = PPO(env, ep, PPOConfig(num_envs=2, num_steps=3, total_updates=1, num_minibatches=1, network="lstm",
                                 lstm_size=8))
    assert ppo.adapter.kind == "discrete-env" and ppo.adapter.bins == 100
    ts = jax.jit(ppo.init)(jax.random.PRNGKey(0))  # an untrained network exports as a trained one (the update is PPO's)
    path = export_policy(ppo, ts.params, ts.obs_stats, tmp_path / "pol", {"scenario": {"agent_interval_s": 0.1}})
    fn, meta = load_checked(to_onnx(path, tmp_path / "abs.onnx"), num_classes=1, agent_interval_s=0.1,
                            formulation="ABS-v0")
    assert meta["obs_layout"] == list(env.obs_layout) and meta["action_values"] == list(abs_f.SIZE_LEVELS)
    action, h, c, logits = fn(np.zeros((2, 25), np.float32), *fn.initial_state(2))
    assert action.shape == (2,) and logits.shape == (2, 100) and 0 <= action.min() and action.max() < 100


# ---------------------------------------------------------------------------------------
# the record's capacity_pkts, the baselines, the study's CLI
# ---------------------------------------------------------------------------------------

def _intervals(p, n_intervals, ticks_per, queues=False):
    """Every interval's capacity_pkts in a run of `p` cut into intervals of `ticks_per` ticks
    (with `queues`: also each record's queue_min_pkts, the queue at its start and the queue
    after each of its ticks)."""
    @jax.jit
    def go(s):
        def body(s, _):
            q0 = s.queue.pkts[0]
            s = sim.open_interval(s, p)
            s, tr = sim.run(s, p, ticks_per, trace_fn=lambda x: x.queue.pkts[0])
            s = sim.close_interval(s, p)
            return s, (s.interval.capacity_pkts, s.interval.queue_min_pkts[0], q0, tr)
        return jax.lax.scan(body, s, None, length=n_intervals)[1]
    out = jax.tree.map(np.asarray, go(sim.init(jax.random.PRNGKey(0), p)))
    return out if queues else out[0].astype(np.float64)


def test_capacity_pkts_is_the_integral_of_the_rate_over_each_interval_and_queue_min_the_least_queue():
    from rlbm_jax.env import capacity

    sched = capacity.Schedule([0.0, 0.137, 0.2911, 0.52], [10e6, 3.3e6, 7.7e6, 0.5e6], 0.7, name="steppy")
    p = scenarios.params("abs-env2-trace", capacity_schedule=sched, rate_bps=10e6)
    ticks_per, n = 50, 24  # 60 ms intervals over 2 periods: changes fall inside them and in the wrap
    cap, qmin, q0, tr = _intervals(p, n, ticks_per, queues=True)
    got = cap.astype(np.float64)
    # the record's smallest queue is the smallest of the queue at its start and after each tick
    np.testing.assert_array_equal(qmin, np.minimum(q0, tr.min(axis=1)))
    assert qmin.max() > 0 and (qmin < tr.max(axis=1)).any()
    tick_s, bits = float(p.tick_s), float(p.data_pkt_bits)
    want = np.asarray([sched.bits_between(i * ticks_per * tick_s, (i + 1) * ticks_per * tick_s) / bits
                       for i in range(n)])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-3)
    assert want.min() < 0.2 * want.max()  # the slow segment is in it
    # without a schedule: pkts_per_tick a tick, exactly
    p0 = scenarios.params("abs-env2", pkts_per_tick=3)
    np.testing.assert_array_equal(_intervals(p0, 3, 40), 3 * 40)


def test_abs_reads_the_capacity_offered_not_the_link_rate():
    ep = make_env_params(scenarios.params("abs-env2-trace", capacity_schedule="step"), agent_interval_s=0.1)
    assert float(ep.sim.bottleneck_rate_bps) == 10e6
    interval_s = int(ep.ticks_per_step) * float(ep.sim.tick_s)  # 83 ticks of 1.2 ms
    rec = _record(20, 0.0, ep, capacity_pkts=41.5)  # an interval at about 5 Mbit/s of a 10 Mbit/s link
    obs = np.asarray(abs_f.ABS_TRACE.observe(rec, ep))
    np.testing.assert_allclose(obs[[1, 2, 4]], [24 / 41.5, 20 / 41.5,
                                                41.5 * float(ep.sim.data_pkt_bits) / interval_s / 1e6], rtol=1e-5)
    r, parts = abs_f.ABS_TRACE.reward(rec, ep)
    assert float(parts["qoe_throughput"]) == pytest.approx(20 / 41.5, rel=1e-5)
    # a queue of 10 packets on average drains at the offered rate, 41.5 packets an interval
    rec = _record(20, 0.0, ep, capacity_pkts=41.5).replace(queue_pkt_s=jnp.asarray([10 * interval_s]))
    assert float(abs_f.interval_state(rec, ep)["queue_delay_s"]) == pytest.approx(10 * interval_s / 41.5, rel=1e-5)
    # nothing offered (an outage; the episode's first record): ratios 0, no division by 0
    s = abs_f.interval_state(_record(0, 0.0, ep, capacity_pkts=0.0), ep)
    assert float(s["throughput"]) == 0.0 and float(s["capacity_mbps"]) == 0.0 and np.isfinite(float(s["queue_delay_s"]))
    assert rlbm_jax.make("ABS-trace-v0")[1].sim.capacity_rows > 0


def test_the_baselines_size_the_buffer_from_the_record():
    from rlbm_jax.abs import study

    ep = make_env_params(study.make_params(**study.config_kw("step")), agent_interval_s=0.1)
    B = study.baselines()
    act = lambda name, rec, carry=None: B[name][1](B[name][2] if carry is None else carry, rec, ep)
    rec = lambda cap, sent=None, q_end=0: _record(cap if sent is None else sent, 0.0, ep, capacity_pkts=cap).replace(
        queue_end_pkts=jnp.asarray([q_end]))
    for n in study.FIX_SIZES:
        assert int(act(f"fix-{n}", rec(80.0))[1]) + 1 == n
    # static BDP: 10 Mbit/s x the base RTT (100 ms and the packets' serialisation) in 1500-byte
    # packets, about 84; / sqrt(2) flows, 60
    rtt_s, bits = float(ep.sim.base_rtt_s), float(ep.sim.data_pkt_bits)
    assert 0.1 < rtt_s < 0.102 and bits == 12000
    assert int(act("bdp", rec(80.0))[1]) + 1 == round(10e6 * rtt_s / bits) == 84
    assert int(act("bdp-sqrt", rec(80.0))[1]) + 1 == round(10e6 * rtt_s / bits / math.sqrt(2)) == 60
    # re-sizing follows a capacity step: the last interval's capacity over its length x the RTT
    interval_s = int(ep.ticks_per_step) * float(ep.sim.tick_s)
    caps = (80.0, 80.0, 20.0, 20.0, 55.0)
    sizes = [int(act("bdp-resize", rec(c))[1]) + 1 for c in caps]
    assert sizes == [round(c / interval_s * rtt_s) for c in caps] == [81, 81, 20, 20, 56]
    assert [int(act("bdp-resize-sqrt", rec(c))[1]) + 1 for c in (80.0, 20.0)] == [
        round(c / interval_s * rtt_s / math.sqrt(2)) for c in (80.0, 20.0)]
    # Cocoa: spare capacity grows the buffer by the packets left unsent, a standing queue (the
    # interval's smallest queue) shrinks it by itself
    size, a = act("cocoa-1", rec(80.0, sent=60, q_end=0), jnp.asarray(30.0))
    assert float(size) == pytest.approx(50.0) and int(a) == 49
    size, a = act("cocoa-1", rec(80.0, sent=80, q_end=20).replace(queue_min_pkts=jnp.asarray([12])), jnp.asarray(30.0))
    assert float(size) == pytest.approx(18.0) and int(a) == 17
    size, a = act("cocoa-0.5", rec(80.0, sent=40), jnp.asarray(30.0))
    assert float(size) == pytest.approx(50.0)  # half the 40 packets unsent
    # ABSSL's ground truth (Eq. 10): y + Y with a standing queue, y - C x sr with spare capacity
    assert float(study.abssl_truth(3.0, rec(80.0, sent=80).replace(queue_min_pkts=jnp.asarray([5])))) == 8.0
    assert float(study.abssl_truth(3.0, rec(80.0, sent=60))) == pytest.approx(3.0 - 20.0)
    assert float(study.abssl_truth(-2.0, rec(80.0, sent=80))) == -2.0
    # and its step moves the buffer by the prediction, at most 10 packets
    p0 = study.abssl_init(jax.random.PRNGKey(0))
    big = jax.tree.map(lambda x: x * 0, p0)
    big["params"]["Dense_0"]["bias"] = jnp.asarray([5.0])  # the output layer: 10 x 5 packets, clipped to 10
    new, y = study.abssl_step(big, jnp.asarray(40.0), jnp.zeros((25,)))
    assert float(y) == 10.0 and float(new) == 30.0
    # RED and CoDel are the switch's own AQMs in front of a 100-packet drop-tail
    assert B["red-r0.1"][0]["policy"] == "red" and B["codel-5ms"][0]["policy"] == "codel"
    assert study.family_of("bdp-resize-sqrt") == "bdp-resize-sqrt" and study.family_of("fix-20") == "fix"
    assert study.family_of("cocoa-0.5") == "cocoa" and study.family_of("red-r0.05") == "red"
    # a trace started 25 s into its period: the same rates, shifted
    s0 = study.trace("wifi")
    s25 = study.rotated(s0, 25.0)
    t = np.linspace(0, 59.99, 997)
    np.testing.assert_array_equal(s25.rate_at(t), s0.rate_at(t + 25.0))
    assert s25.rows <= study.MAX_ROWS and study.offset_of(2003) == 50.0


def test_the_study_keeps_its_seeds_and_traces_apart():
    from rlbm_jax.abs import study

    assert not set(study.SELECTION_SEEDS) & set(study.TEST_SEEDS)
    assert max(study.SELECTION_SEEDS) < min(study.TEST_SEEDS) and min(study.SELECTION_SEEDS) >= 100
    assert not set(study.TRAIN_TRACES) & set(study.TEST_TRACES)
    assert "wifi-s2" not in study.TRAIN_TRACES  # the shipped wifi trace (seed 2) is a test trace
    with pytest.raises(ValueError, match="trace 'nope'"):
        study.trace("nope")
    with pytest.raises(ValueError, match="needs a trace"):
        scenarios.kw("abs-env2-trace", capacity_schedule="none")


def test_the_cli_is_the_study_kit_and_trains_exports_and_evaluates(tmp_path):
    """scripts/abs.py train is `study.py abs train` and evaluate its select then test (one
    ledger in <run-dir>/kit); export and ns3 read the kit's run."""
    import csv
    import json

    from rlbm_jax.cli import abs as abs_cli

    run = tmp_path / "run"
    assert abs_cli.main(["train", "--run-dir", str(run), "--num-seeds", "2", "--num-envs", "4", "--num-steps", "4",
                         "--updates", "1", "--chunk", "1"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["study"], cfg["recipe"], cfg["seeds"]) == ("abs", "lstm", [0, 1])
    assert abs_cli.main(["train", "--run-dir", str(run)]) == 2  # it holds a run
    assert abs_cli.main(["train", "--run-dir", str(tmp_path / "x"), "--seed", "1000"]) == 2  # a selection seed
    assert abs_cli.main(["export", "--run-dir", str(run)]) == 0
    assert (run / "policy_seed1.onnx").is_file()
    # (batches of 2 runs: each TCP's selection runs, 2 traces x 1 seed, are one batch, so the test's
    # batches have the selection's shape and reuse its compiled rollouts)
    assert abs_cli.main(["evaluate", "--run-dir", str(run), "--seconds", "0.6", "--warmup-s", "0.2", "--test-seeds",
                         "2", "--selection-seeds", "1", "--baselines", "fix-10", "--chunk", "2"]) == 0
    ledger = json.loads((run / "kit" / "ledger.json").read_text())
    assert [e["stage"] for e in ledger["entries"]] == ["train", "select", "test"]
    sel, test = ledger["entries"][1:]
    assert sel["chosen"] == {"fix": "fix-10"} and sel["seeds"] == {"selection": [1000]}
    assert test["seeds"] == {"test": [2000, 2001]}
    rows = list(csv.DictReader((run / "kit" / "runs.csv").open()))
    assert {r["policy"] for r in rows} == {"fix-10", "lstm-seed0", "lstm-seed1"}
    assert len(rows) == 3 * 8 * 2  # every policy on the 8 test configurations x 2 test seeds
    assert all(0 <= float(r["reward"]) <= 100 for r in rows)
    assert "fix-10" in (run / "kit" / "RESULTS.md").read_text()
    from rlbm_jax.abs.ns3 import default_baselines

    names, source = default_baselines(run)
    assert "fix-10" in names and source.endswith("kit/ledger.json")
