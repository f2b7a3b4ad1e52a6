"""LFQ: the fair queue's per-flow cap (policy "fq", knob flow_cap_pkts), `LFQ-v0` under jit
and vmap, its ONNX export, and the A/B fork as one batched step."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlbm_jax
from rlbm_jax import scenarios
from rlbm_jax.env import sim
from rlbm_jax.env.formulations import lfq as lfqf
from rlbm_jax.env.params import make_params
from rlbm_jax.lfq import study as S


SMALL = dict(buffer_per_class_pkts=100, buffer_pkts=100)  # a ring of 101 packets: quicker to compile


# one compiled run for every fair-queue run of this file (the params an argument: the cap is
# a value, not a shape; the tick count static): (final state, flow 0's queue after each tick)
_RUN = jax.jit(lambda s, p, n: sim.run(s, p, n, trace_fn=lambda x: x.flowq.pkts[0]), static_argnums=2)
SECONDS = 3.0


def _run(cap, seed=0, **kw):
    p = make_params(**scenarios.lfq(cap_pkts=cap, **{**SMALL, **kw}))
    s, q = _RUN(sim.init(jax.random.PRNGKey(seed), p), p, sim.ticks_for(SECONDS, p))
    return p, s, int(q.max())


@pytest.mark.parametrize("cap", [3.0, 17.0])
def test_cap_bounds_the_flow_queue_and_conserves_packets(cap):
    p, s, qmax = _run(cap)
    # NewReno fills its queue to the cap and never past it (seen at a tick's end, after its
    # pkts_per_tick departures)
    assert int(cap) - p.pkts_per_tick <= qmax <= int(cap)
    m = s.metrics
    arrived, dropped, sent = int(m.tx_total), int(m.drop_total), int(m.deq_total)
    queued = int(s.flowq.pkts.sum())
    assert dropped > 0
    assert int(s.queue.pkts.sum()) == queued  # the class counter holds the flow queues' total
    assert arrived == dropped + sent + queued


def test_lowering_the_cap_drops_nothing_queued():
    p, s, _ = _run(60.0, seed=1)
    held = int(s.flowq.pkts[0])
    assert held > 20
    s2 = sim.apply_knobs(s, {"flow_cap_pkts": 5.0})
    s3 = jax.jit(lambda s: sim.tick(s, p))(s2)
    # no drop from the queue itself: it only shrinks by what the link sends, arrivals are refused
    assert int(s3.flowq.pkts[0]) >= held - p.pkts_per_tick
    assert float(s3.aqm.fq.cap_pkts[0]) == 5.0


def test_fq_codel_unchanged_by_the_cap_code():
    """FQ-CoDel's runs trace the per-flow cap (a discipline with it can run with these
    shapes), whose room is unbounded for FQ-CoDel: its numbers are the same as when the
    cap is far above anything queued."""
    kw = dict(num_classes=1, policy="fq-codel", long_flows=4, num_senders=4, num_flow_slots=8, load=0.0,
              buffer_per_class_pkts=200, buffer_pkts=200)
    p = make_params(**kw)
    s = sim.init(jax.random.PRNGKey(2), p)
    out, _ = jax.jit(lambda s: sim.run(s, p, 3000))(s)
    room = jax.jit(lambda st: rlbm_jax.env.switch.disciplines.flow_room(
        st.aqm, sim._discipline(p), st.flowq.pkts, p))(out)
    assert int(room.min()) == np.iinfo(np.int32).max
    assert int(out.metrics.drop_total) > 0


def test_lfq_env_jit_vmap_and_onnx(tmp_path):
    env, ep = rlbm_jax.make("LFQ-v0", episode_s=5.0, **SMALL)
    assert env.obs_shape == (66,) and ep.ticks_per_step == lfqf.LFQ_TICKS_PER_STEP
    assert env.obs_layout[:6] == tuple(n for n, _, _ in lfqf.SIGNALS)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs, st = jax.vmap(env.reset, in_axes=(0, None))(keys, ep)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    caps = jnp.asarray([[2.0], [10.0], [50.0]])
    for _ in range(150):
        obs, st, r, term, trunc, info = step(keys, st, caps, ep)
    assert obs.shape == (3, 66)
    o = np.asarray(obs).reshape(3, 11, 6)
    np.testing.assert_allclose(o[:, 0, lfqf.CAP], [2.0, 10.0, 50.0])  # the cap in force is observed
    assert np.all(np.asarray(st.sim.flowq.pkts[:, 0]) <= np.asarray([2, 10, 50]))
    assert np.all(o[:, 1:, lfqf.STD] >= 0) and np.all(np.isfinite(o))
    # a larger cap buys bandwidth at 15 Mbit/s and 15 ms (BDP 37.5 packets)
    bw = np.asarray(info["bandwidth_mbps"])
    assert bw[0] < bw[2]
    # export: the network's cap, through ONNX
    from rlbm_jax.lfq import onnx as lfq_onnx
    params = S.CapNet().init(jax.random.PRNGKey(3), jnp.zeros((1, 66)))
    path = lfq_onnx.to_onnx(params, tmp_path / "lfq.onnx")
    assert lfq_onnx.check(path, params, np.asarray(obs)) < 1e-3


def test_ab_fork_branches_share_everything_before_and_differ_by_the_cap_after():
    """Flow 0 forks at step 20 of 40; flow 1's fork (step 40) never comes: its two copies
    are the same in every state leaf after 40 steps (what both copies of every flow are
    before its fork), and flow 0's copies hold caps 2 packets apart and earn different
    returns."""
    env, net = S.make_env(), S.CapNet()
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 66)))
    params["params"]["Dense_3"]["bias"] = jnp.full((1,), 3.0)  # caps near 30 packets: the copies' differ by 2
    sims = S.config_params([(15.0, 15.0, "newreno"), (7.0, 22.0, "cubic")], **SMALL)
    n = jnp.asarray([40, 40], jnp.int32)
    fork = jnp.asarray([20, 40], jnp.int32)
    out = jax.jit(lambda: S.rollout(env, net, params, jax.random.PRNGKey(1), sims, n, fork, 40,
                                    return_state=True))()
    st, cap_fork = out["state"], np.asarray(out["cap_fork"])
    for leaf in jax.tree.leaves(st):
        np.testing.assert_array_equal(np.asarray(leaf[1, 0]), np.asarray(leaf[1, 1]))
    caps = np.asarray(st.sim.aqm.fq.cap_pkts[0, :, 0])
    assert cap_fork[0] > 20
    np.testing.assert_allclose(caps, [cap_fork[0] + 1, cap_fork[0] - 1], rtol=1e-6)
    ret = np.asarray(out["ret"])
    assert np.all(np.isfinite(ret)) and ret[0, 0] != ret[0, 1] and np.all(ret[1] == 0)


TINY_CONFIGS = [(24.5, 15.5, "cubic"), (5.5, 15.5, "newreno")]  # the fastest flow and a slow one (its own steps)


def _tiny_study():
    """The lfq declaration with a tiny recipe (flows of 0.6-0.8 s on a ring of 101 packets) and
    a few configurations of the test sweep: the kit runs it as it runs the real one."""
    import dataclasses

    from rlbm_jax.study import get

    study = get("lfq")
    picked = S.labelled_configs
    return dataclasses.replace(
        study, recipes={"tiny": {"alpha": 0.01, "flows": 4, "iterations": 4, "lr": 1e-3, "duration_s": (0.6, 0.8),
                                 "sim_overrides": SMALL}},
        # (selection and test on the same two configurations, so that they share their compiled rollouts)
        selection_configs=lambda: picked(TINY_CONFIGS), test_configs=lambda: picked(TINY_CONFIGS),
        eval_s=0.3, legacy_runs={})


def test_lfq_is_a_study_of_the_kit_trained_judged_exported_and_equal_to_its_own_rollout(tmp_path, monkeypatch):
    """The A/B-fork trainer through the kit: an untrained network starts near a cap of 1
    packet (the paper's Fig. 4), where most forks' + 1 copy wins, so a few iterations raise
    the cap and the reward.  select, test, report and export run on its networks as on a PPO
    study's; the kit's rollout of a trained seed and of the BDP baseline gives `deploy`'s
    numbers (integers exact, float means to their summation order); options the trainer does
    not have are refused by name."""
    import csv

    from rlbm_jax.study import pipeline

    # the training grid thinned to every 20th cell (both TCPs, the rates and delays across their
    # ranges): the trainer draws its flows from it as from the whole grid, and the tiny run
    # does not build and stack the params of all 882 cells
    grid = S.train_configs()
    monkeypatch.setattr(S, "train_configs", lambda: grid[::20])
    assert {t for _, _, t in S.train_configs()} == {t for _, _, t in grid}
    study = _tiny_study()
    results, run = str(tmp_path / "kit"), str(tmp_path / "run")
    with pytest.raises(ValueError, match="--num-steps: the lfq-ab-fork trainer has no such setting"):
        pipeline.train_config(study, recipe="tiny", seeds=[0], run_dir=run, num_steps=8, results=results)
    with pytest.raises(ValueError, match="test"):
        pipeline.train_config(study, recipe="tiny", seeds=[5000], run_dir=run, results=results)
    cfg = pipeline.train_config(study, recipe="tiny", seeds=[0, 1], run_dir=run, updates=4, chunk=2, results=results)
    assert cfg["agent"] == "lfq-ab-fork" and cfg["ab_fork"]["iterations"] == 4 and cfg["ab_fork"]["flows"] == 4
    assert pipeline.train(study, cfg)["updates"] == 4
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["seed"] == "0"]
    assert float(rows[-1]["cap_pkts"]) > 2 * float(rows[0]["cap_pkts"])
    assert float(rows[-1]["reward"]) > float(rows[0]["reward"]) and float(rows[0]["up"]) > 0.5

    sel = pipeline.select(study, pipeline.select_config(study, runs=[run], selection_seeds=1, seconds=None,
                                                        warmup_s=None, chunk=8, results=results))
    assert set(sel["chosen"]) == {"fq-100", "fq-1000", "fq-bdp", "fq-codel"}
    tcfg = pipeline.test_config(study, test_seeds=1, seconds=None, warmup_s=None, chunk=8, results=results)
    with pytest.raises(ValueError, match="warm-up"):
        pipeline.test_config(study, test_seeds=1, seconds=None, warmup_s=0.1, chunk=8, results=results)
    rep = pipeline.test(study, tcfg)
    assert set(rep["comparisons"]["reward"]) == {"fq-100", "fq-1000", "fq-bdp", "fq-codel"}
    md = (tmp_path / "kit" / "RESULTS.md").read_text()
    assert "queue_max_pkts (lower is better)" in md and "ran part of the sweep" in md
    pipeline.report(study, results)
    assert (tmp_path / "kit" / "RESULTS.md").read_text() == md
    recs = pipeline.export(study, pipeline.export_config(study, run_dir=run, results=results))
    assert [r["seed"] for r in recs] == [0, 1] and all(r["ok"] for r in recs)

    # the kit's runs against LFQ's own rollout (`deploy`), on the same configurations and steps
    with open(tmp_path / "kit" / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    configs = TINY_CONFIGS
    env = S.make_env()
    n = jnp.asarray(S.steps_for(np.full(len(configs), 0.3), np.asarray([c[0] * 1e6 for c in configs])))
    steps = int(n.max())
    assert steps == tcfg["steps"]
    net, params = S.CapNet(), S.load_params(tmp_path / "run" / "trained_seed1.msgpack")
    bdp = jnp.asarray(np.clip(S.bdp_pkts([c[0] * 1e6 for c in configs], [c[1] * 1e-3 for c in configs]), 1, 1000),
                      jnp.float32)
    # one compiled `deploy` for both policies: the network's cap, or the BDP, as its argument says
    deploy = jax.jit(lambda k, net_caps: S.deploy(env, lambda o: jnp.where(net_caps, net.apply(params, o), bdp), k,
                                                  S.config_params(configs), n, steps))
    for policy, net_caps in (("tiny-seed1", True), ("fq-bdp", False)):
        want = jax.device_get(deploy(jax.random.PRNGKey(5000), net_caps))
        got = [r for r in runs if r["policy"] == policy]
        assert len(got) == len(configs)
        np.testing.assert_array_equal([float(r["queue_max_pkts"]) for r in got], want["queue_max_pkts"])
        for m in ("bandwidth_mbps", "queue_pkts", "cap_pkts", "reward"):
            np.testing.assert_allclose([float(r[m]) for r in got], want[m], rtol=2e-5, err_msg=f"{policy} {m}")


def test_refusals():
    with pytest.raises(ValueError, match="rate_bps"):
        scenarios.lfq(rate_bps=0)
    with pytest.raises(ValueError, match="fq_flow_cap_pkts"):
        make_params(**scenarios.lfq(cap_pkts=0.5))
    from rlbm_jax.env import model
    assert "fq" in model.BY_NAME["policy"].implemented("native")  # (tests/test_native.py holds it to the JAX tick)
    with pytest.raises(ValueError, match="LFQ-v0"):
        rlbm_jax.make("LFQ-v0", backend="fluid")


def test_one_flow_in_fq_is_droptail_at_its_cap():
    """With one flow the fair queue is a drop-tail FIFO of the flow's cap: the same run, bit
    for bit (so a FIFO of that size is its ns-3 counterpart)."""
    from rlbm_jax.env.metrics import summarize
    out = []
    for pol, kw in (("fq", dict(cap_pkts=20.0, **SMALL)), ("droptail", dict(buffer_per_class_pkts=20, buffer_pkts=20))):
        p = make_params(**scenarios.lfq(policy=pol, **kw))
        s, _ = _RUN(sim.init(jax.random.PRNGKey(0), p), p, sim.ticks_for(SECONDS, p))
        out.append({k: float(v) for k, v in summarize(s.metrics, p).items()})
    np.testing.assert_equal(out[0], out[1])  # (no flow finished: the FCT entries are NaN on both sides)
    assert out[0]["drop_rate"] > 0
