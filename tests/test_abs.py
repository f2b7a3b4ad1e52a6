"""ABS (`ABS-v0`, `formulations/abs.py`) and the buffer-size knob it sets (`buffer_size_pkts`,
read by the drop-tail policy "rl-size"): the knob moves admission (a lowered limit refuses
arrivals and keeps what is queued, a raised one admits more, packets are conserved across
each change, and at the FIFO cap it is "droptail" exactly), the env steps under jit and vmap
with its window of observations, the reward is the paper's QoE on hand-made records, the
manifest refuses the policy by name on the native and fluid backends, and an LSTM policy
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
    np.testing.assert_allclose(np.asarray(obs[:, 4]), 6.0)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    actions = jnp.asarray([[99, 4, 39], [99, 9, 0], [99, 0, 49], [99, 49, 9]], jnp.int32)
    for t, a in enumerate(actions):
        prev = obs
        obs, st, r, term, trunc, info = step(jax.random.split(jax.random.PRNGKey(t + 1), n), st, a, p)
        if t < 3:
            np.testing.assert_array_equal(np.asarray(st.sim.rl_size_pkts[:, 0]), np.asarray(a) + 1)
            np.testing.assert_array_equal(np.asarray(obs[:, :20]), np.asarray(prev[:, 5:]))  # the window shifts
            assert not np.asarray(trunc).any()
        want = np.asarray(info["qoe_throughput"]) * np.asarray(info["qoe_delay"])
        np.testing.assert_allclose(np.asarray(r), want, rtol=1e-6)
        assert np.all(np.asarray(r) >= 0) and np.all(np.asarray(r) <= 100)
    # the fourth interval ends the episode: auto-reset, the final window in `info`
    assert np.asarray(trunc).all()
    np.testing.assert_array_equal(np.asarray(obs[:, :5]), np.asarray(obs[:, 20:]))  # a fresh window
    fin = np.asarray(info["final_observation"])
    assert fin.shape == (n, 25) and np.asarray(info["throughput"]).max() > 0


def _record(dequeues, delay_s, params):
    """A one-class record whose link sent `dequeues` packets and whose average queueing
    delay is `delay_s` (its queue integral)."""
    sim_p = params.sim
    interval_s = params.ticks_per_step * float(sim_p.tick_s)
    q_avg = delay_s * float(sim_p.bottleneck_rate_bps) / float(sim_p.data_pkt_bits)
    rec = mx.init_interval(1)
    return rec.replace(arrivals_pkts=jnp.asarray([dequeues + 7]), drops_pkts=jnp.asarray([3]),
                       dequeues_pkts=jnp.asarray([dequeues]), queue_pkt_s=jnp.asarray([q_avg * interval_s]))


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


def test_native_and_fluid_refuse_the_policy_by_name():
    p = scenarios.params("abs-env2")
    for b in ("native", "fluid"):
        assert model.missing(b, p) == ["policy=rl-size"]
        assert "does not implement policy=rl-size" in model.refusal(b, p)
    with pytest.raises(ValueError, match="the native backend does not implement policy=rl-size"):
        backends.resolve("native", p)
    assert backends.resolve("auto", p) == "jax"
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
