"""Short (web-search) flows in the fluid model: the packet simulator's Poisson schedule,
conservation, completion times that are differentiable, the env's flow record, and
agreement with the packet simulator flow by flow."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import make_params, sim
from rlbm_jax.env.backends import fluid
from rlbm_jax.fluid_validation import websearch_pairs, websearch_verdict
from rlbm_jax.scenarios import QUEUEPILOT, queuepilot


def _short_only(**kw):
    """Web-search flows alone at half load through a buffer they never fill: no loss, so the
    FCTs are smooth functions of the capacity and the delays."""
    base = dict(QUEUEPILOT, long_flows=0, load=0.5, policy="droptail", tcp="newreno", bottleneck_delay_s=0.0099,
                buffer_per_class_pkts=1000, queue_capacity_pkts=1000, arrival_stop_s=2.0, warmup_s=0.0)
    return make_params(**{**base, **kw})


def test_short_flows_are_the_packet_simulators_schedule_and_conserve_packets():
    p = make_params(**{**queuepilot(4, 0.02, "newreno", load=0.3, seconds=3.0), "policy": "codel"})
    cfg = fluid.configure(p, horizon_s=3.0)
    key = jax.random.PRNGKey(5)
    st0 = fluid.init(p, cfg, key=key)
    start, sender, size = sim.flow_schedule(key, p, cfg.n_short)
    live = np.asarray(start) < float(p.arrival_stop_s)
    assert live.sum() >= 3 and not live.all()  # some arrive, the slots outlast the schedule
    np.testing.assert_array_equal(np.asarray(st0.s_start)[live], np.asarray(start)[live])
    np.testing.assert_array_equal(np.asarray(st0.s_size_b), np.asarray(size))
    np.testing.assert_array_equal(np.asarray(st0.s_sender), np.asarray(sender))
    st = fluid.advance(st0, p, fluid.steps_for(3.0, cfg), cfg)
    t = st.tot
    np.testing.assert_allclose(float(t.arrived), float(t.delivered + t.dropped + st.q), rtol=1e-5)
    done = np.asarray(st.done) > 0.5
    assert done.sum() >= 2 and not done[~live].any()
    assert np.all(np.asarray(st.r)[done] == 0) and np.all(np.asarray(st.r)[live & ~done] > 0)
    # what the finished flows carried went through the queue
    assert float(t.arrived) > float(np.sum(np.asarray(st0.r)[done]))
    f = fluid.short_flows(st, fluid.values(p, cfg))
    slow = np.asarray(f["slowdown"])[done]
    assert np.all(slow >= 1.0), slow  # no flow beats an empty path
    with pytest.raises(ValueError, match="pass key="):
        fluid.summary(p, 3.0)
    with pytest.raises(ValueError, match="arrival_stop_s = inf"):
        fluid.configure(make_params(**{**queuepilot(4, 0.02, load=0.3), "arrival_stop_s": float("inf")}))


@pytest.mark.parametrize("name, x0", [("bottleneck_rate_bps", 1e8), ("bottleneck_delay_s", 0.0099)])
def test_fct_gradient_matches_central_differences(name, x0):
    with jax.enable_x64(True):
        p = _short_only()
        cfg = fluid.configure(p, horizon_s=3.0, overrides={name: x0})
        key = jax.random.PRNGKey(1)

        def summary(x):
            return fluid.summary(p, 3.0, warmup_s=0.0, config=cfg, key=key, overrides={name: x})

        g = float(jax.jit(jax.grad(lambda x: summary(x)["fct_mean_s"]))(jnp.float64(x0)))
        h = 1e-5 * x0
        f = jax.jit(summary)  # (one compilation: the differences and the run at x0)
        cd = (float(f(jnp.float64(x0 + h))["fct_mean_s"]) - float(f(jnp.float64(x0 - h))["fct_mean_s"])) / (2 * h)
        assert g != 0 and np.isfinite(g)
        assert abs(g / cd - 1) < 0.02, (g, cd)
        assert int(f(jnp.float64(x0))["flows_completed"]) >= 5


def test_fluid_env_records_the_short_flows_that_finish():
    """The interval record of the fluid env counts each finished short flow once, with the
    slowdown the summary computes; reset's key draws the schedule."""
    import rlbm_jax

    env, ep = rlbm_jax.make("QueuePilot-continuous-v0", scenario="queuepilot", backend="fluid", episode_s=4.0,
                            load=0.6)
    steps = 400  # 2 s of 5 ms intervals

    def run(key):
        obs, st = env.reset(key, ep)

        def body(st, _):
            _, st, r, _, _, info = env.step(jax.random.PRNGKey(0), st, jnp.zeros((1,)), ep)
            iv = st.sim.interval
            return st, (iv.flows_done[0], iv.log_slowdown_sum[0], r)
        st, out = jax.lax.scan(body, st, None, length=steps)
        return st, out

    st, (n_done, logsum, rew) = jax.jit(run)(jax.random.PRNGKey(2))
    fs = st.sim.fluid
    assert float(jnp.sum(n_done)) == float(jnp.sum(fs.done)) >= 1
    f = fluid.short_flows(fs, fluid.values(ep.sim, env.config))
    expect = float(jnp.sum(jnp.where(fs.done > 0.5, jnp.log(jnp.maximum(f["slowdown"], 1.0)), 0.0)))
    np.testing.assert_allclose(float(jnp.sum(logsum)), expect, rtol=1e-3)
    assert np.all(np.isfinite(np.asarray(rew)))
    st2, _ = jax.jit(run)(jax.random.PRNGKey(3))
    assert not np.array_equal(np.asarray(st2.sim.fluid.s_start), np.asarray(fs.s_start))


def test_short_flow_slowdowns_agree_with_the_packet_simulator_where_losses_are_rare():
    """NewReno with CoDel in QueuePilot's scenario (10 long flows, 40 ms): flow by flow on
    the same schedules, the fluid model's median slowdown of the flows under 100 kB within
    20 % of the packet simulator's, and of all flows within 25 %; the fluid model is the
    optimistic one (no timeouts), and finishes every flow the packet simulator finishes."""
    rows = websearch_pairs([("newreno", "codel", 10, 0.04)], seeds=tuple(range(8)), seconds=8.0)
    v = websearch_verdict(rows)[0]
    print(v)
    short = v["by_size"]["short"]
    assert v["pairs"] >= 15 and short["pairs"] >= 10 and v["packet_only"] == 0
    assert abs(short["median_fluid"] / short["median_packet"] - 1) < 0.20
    assert abs(v["median_fluid"] / v["median_packet"] - 1) < 0.25
    assert v["mean_fluid"] < v["mean_packet"]
