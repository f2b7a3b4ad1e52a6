"""What gradients through the fluid backend give: the formulations on the fluid model
(`FluidEnv`, `rlbm_jax.make(..., backend="fluid")`), gradients of an episode's return that
agree with central differences, analytic policy gradients (`rlbm_jax.apg`) and gradient
tuning of an AQM (`rlbm_jax.tune`, scripts/tune_aqm.py)."""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlbm_jax
from rlbm_jax import apg, tune
from rlbm_jax.env import make_params, stack_params
from rlbm_jax.env.backends import fluid
from rlbm_jax.env.fluid_env import FluidEnv
from rlbm_jax.env.switch import buffer
from rlbm_jax.queuepilot import study as qp


def qp_env(n=20, rtt=0.04, tcp="cubic", **kw):
    p = make_params(**qp.config_kw(n, rtt, tcp, load=0.0, **kw))
    return FluidEnv(p, "QueuePilot-continuous-v0", agent_interval_s=qp.STEP_S, episode_s=2.0), p


def episode_return(env, ep, marks, steps):
    """Sum of rewards of `steps` steps at the constant marking probability `marks`, and the
    interval records' totals."""
    obs, st = env.reset_env(jax.random.PRNGKey(0), ep)

    def body(c, _):
        obs, st = c
        obs, st, r, _, info = env.step_env(jax.random.PRNGKey(0), st, jnp.reshape(marks, (1,)), ep)
        rec = st.sim.interval
        return (obs, st), (r, rec.arrivals_pkts[0], rec.dequeues_pkts[0], rec.drops_pkts[0], rec.queue_end_pkts[0])

    (_, st), out = jax.lax.scan(body, (obs, st), None, length=steps)
    return out, st


def test_make_selects_the_fluid_backend_and_the_policy_the_action_drives():
    env, ep = rlbm_jax.make("QueuePilot-continuous-v0", scenario="queuepilot", load=0, backend="fluid")
    assert isinstance(env, FluidEnv) and env.supports_transition_gradients and env.config.aqm == "rl-mark"
    # the packet env of the same id runs the marker the action drives (not the class thresholds)
    for fid in ("QueuePilot-v0", "QueuePilot-continuous-v0"):
        _, p = rlbm_jax.make(fid, scenario="queuepilot")
        assert buffer.POLICY_NAMES[int(p.sim.policy_id)] == "rl-mark"
    _, p = rlbm_jax.make("RLBM-v0")
    assert buffer.POLICY_NAMES[int(p.sim.policy_id)] == "rl"
    # the scenario's web-search flows run as fluid short flows; what the fluid model cannot
    # represent is refused by name
    env_ws, _ = rlbm_jax.make("QueuePilot-continuous-v0", scenario="queuepilot", backend="fluid")
    assert env_ws.config.n_short > 0 and env.config.n_short == 0
    with pytest.raises(ValueError, match="policy=rl"):
        rlbm_jax.make("RLBM-v0", scenario="long", long_flows=8, backend="fluid")
    with pytest.raises(ValueError, match="knob"):  # the thesis action sets class thresholds
        FluidEnv(make_params(**qp.config_kw(10, 0.04, load=0.0)), "RLBM-v0")
    with pytest.raises(ValueError, match="unknown backend"):
        rlbm_jax.make("RLBM-v0", backend="gpu")
    with pytest.raises(ValueError, match="another model"):
        rlbm_jax.env.RLBMEnv(backend="fluid")


def test_interval_records_conserve_packets_and_marking_acts():
    env, p = qp_env()
    ep = env.default_params
    run = jax.jit(lambda m: episode_return(env, ep, m, 300))
    (r0, arr, deq, drop, q), _ = run(jnp.float32(0.0))
    # per interval: offered = sent + dropped + the queue's change
    dq = np.diff(np.concatenate([[0.0], np.asarray(q)]))
    np.testing.assert_allclose(np.asarray(arr), np.asarray(deq) + np.asarray(drop) + dq, rtol=1e-4, atol=1e-3)
    (r1, _, deq1, drop1, q1), _ = run(jnp.float32(0.05))
    # marking 5 % of the packets keeps the queue and the drops down (ECN senders back off)
    assert float(np.mean(q1[100:])) < float(np.mean(q[100:])) and float(np.sum(drop1[100:])) < float(np.sum(drop[100:]))
    assert np.all(np.isfinite(np.asarray(r0))) and np.all(np.isfinite(np.asarray(r1)))


def test_env_steps_under_jit_and_vmap_over_configurations():
    plist = [make_params(**qp.config_kw(20, r, "cubic", load=0.0)) for r in (0.02, 0.04, 0.08)]
    batch = stack_params(plist)
    env = FluidEnv(plist[0], "QueuePilot-continuous-v0", agent_interval_s=qp.STEP_S, episode_s=2.0, batch=batch)
    ep = env.default_params

    def one(sp):
        (r, *_), _ = episode_return(env, ep.replace(sim=sp), jnp.float32(0.0), 200)
        return r.mean()

    batched = np.asarray(jax.jit(jax.vmap(one))(batch))
    for i, p in enumerate(plist):
        np.testing.assert_allclose(batched[i], float(jax.jit(one)(p)), rtol=2e-4)
    assert len(set(np.round(batched, 4))) == 3  # the RTTs give three different returns


def test_episode_gradients_match_central_differences():
    """d(return)/d(marking probability) and d(return)/d(capacity) through 200 steps of the
    fluid env (the model in float64; the action enters the formulation as float32), against
    central differences of the same function, within 2 %."""
    with jax.enable_x64(True):
        env, p = qp_env(20, 0.04, "newreno")
        ep = env.default_params

        def ret(m, c):
            e = ep.replace(sim=ep.sim.replace(bottleneck_rate_bps=c))
            (r, *_), _ = episode_return(env, e, m, 200)
            return jnp.sum(jnp.where(jnp.arange(200) >= 100, r, 0.0))

        x0 = (jnp.float64(0.004), jnp.float64(100e6))
        # one compiled function gives the return and its gradient (the differences take its value)
        vg = jax.jit(jax.value_and_grad(ret, argnums=(0, 1)))
        g = [float(v) for v in vg(*x0)[1]]
        f = lambda m, c: vg(m, c)[0]  # noqa: E731
        rel = 1e-4
        fd = [(float(f(x0[0] * (1 + rel), x0[1])) - float(f(x0[0] * (1 - rel), x0[1]))) / (2 * rel * float(x0[0])),
              (float(f(x0[0], x0[1] * (1 + rel))) - float(f(x0[0], x0[1] * (1 - rel)))) / (2 * rel * float(x0[1]))]
    for gi, fi in zip(g, fd):
        assert np.isfinite(gi) and gi != 0, (g, fd)
        assert abs(gi - fi) <= 0.02 * abs(fi), (g, fd)


def test_apg_trains_saves_and_exports_the_same_policy(tmp_path):
    """A few updates on two small groups: finite, the weights move, the fluid reward of the
    last updates is logged; the saved policy directory and its ONNX graph compute apg.act."""
    import onnxruntime as ort

    from rlbm_jax.onnx_policy import to_onnx
    from rlbm_jax.policy import load_policy

    groups = []
    for n, t in ((10, "newreno"), (20, "cubic")):
        plist = [make_params(**qp.config_kw(n, r, t, load=0.0)) for r in (0.02, 0.06)]
        batch = stack_params(plist)
        env = FluidEnv(plist[0], "QueuePilot-continuous-v0", agent_interval_s=qp.STEP_S, episode_s=10.0, batch=batch)
        groups.append((env, env.default_params, batch))
    cfg = apg.APGConfig(hidden=(16,), horizon=10, updates=12, episode_steps=60, lr=3e-3)
    out = apg.train(groups, cfg, log_every=4)
    w0 = apg.init_weights(jax.random.PRNGKey(0), groups[0][0].obs_shape[0], cfg)
    assert out["env_steps"] == 12 * 10 * 4 and len(out["curve"]) == 3
    assert all(np.isfinite(c["surrogate"]) and c["grad_norm"] > 0 for c in out["curve"])
    assert any(not np.allclose(a, b) for (a, _), (b, _) in zip(out["weights"], w0))
    apg.save(tmp_path / "pol", out["weights"], groups[0][0])
    fn, meta = load_policy(tmp_path / "pol", obs_layout=groups[0][0].obs_layout, act_dim=1)
    obs = jax.random.uniform(jax.random.PRNGKey(3), (5, groups[0][0].obs_shape[0]))
    want = np.asarray(apg.act(out["weights"], obs))
    np.testing.assert_allclose(np.asarray(fn(obs)), want, rtol=1e-5, atol=1e-6)
    assert meta["formulation"] == "QueuePilot-continuous-v0"
    to_onnx(tmp_path / "pol", tmp_path / "pol.onnx", agent_interval_s=qp.STEP_S)
    sess = ort.InferenceSession(str(tmp_path / "pol.onnx"))
    got = sess.run(None, {"obs": np.asarray(obs, np.float32)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_apg_surrogate_smooths_the_drop_penalty_only():
    info = {"utilisation": jnp.float32(0.9), "delay_steps": jnp.float32(1.0), "drops": jnp.float32(0.0)}
    ok = 0.9 ** 2 / np.sqrt(2.0)
    s = 1 / (1 + np.exp(5.0))  # the penalty's weight at no drop: (0 - 1/2) / 0.1 = -5
    assert float(apg.surrogate(info, 0.1)) == pytest.approx((1 - s) * ok - s, rel=1e-5)
    assert float(apg.surrogate(info, 0.1)) == pytest.approx(ok, abs=0.011)  # close to the reward itself
    assert float(apg.surrogate({**info, "drops": jnp.float32(5.0)}, 0.1)) == pytest.approx(-1.0, abs=1e-6)
    g = jax.grad(lambda d: apg.surrogate({**info, "drops": d}, 0.1))(jnp.float32(0.5))
    assert float(g) < 0  # more drops, less reward: a gradient the -1 jump does not give


def test_queuepilot_reward_reads_half_a_packet_as_a_drop():
    """The fluid record's expected drops: below half a packet the step counts as drop-free;
    on integer counts the test is the packet simulator's (>= 1)."""
    from rlbm_jax.env import metrics as mx
    from rlbm_jax.env.formulations import QUEUEPILOT

    env, _ = rlbm_jax.make("QueuePilot-v0", scenario="queuepilot")
    ep = env.default_params
    rec = mx.init_interval(1, 16).replace(arrivals_pkts=jnp.array([100]), dequeues_pkts=jnp.array([100]))
    assert float(QUEUEPILOT.reward_of(rec, ep)[0]) > 0
    assert float(QUEUEPILOT.reward_of(rec.replace(drops_pkts=jnp.array([1])), ep)[0]) == -1.0
    frec = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), rec)
    assert float(QUEUEPILOT.reward_of(frec.replace(drops_pkts=jnp.array([0.3])), ep)[0]) > 0
    assert float(QUEUEPILOT.reward_of(frec.replace(drops_pkts=jnp.array([0.6])), ep)[0]) == -1.0


def test_gradient_tuning_raises_the_fluid_objective():
    knob = tune.KNOBS["red"]
    kws = tune.cells(knob, [8], 1.0, 1.0)
    r = tune.tune_fluid(knob, kws, "power", seconds=3.0, warmup_s=1.0, steps=6, lr=0.3, grad_horizon_s=1.0)
    h = r["history"]
    assert len(h) == 7 and r["best_objective"] > h[0]["objective"] + 0.01
    p = make_params(**kws[0])
    lo, hi = r["best"]["red_min_th_pkts"], r["best"]["red_max_th_pkts"]
    assert 0 < lo < hi <= float(p.buffer_pkts) and 0 < r["best"]["red_max_p"] < 1
    # the knob's map and its inverse agree
    u = knob.to_u(r["best"], knob.bounds(p))
    back = knob.values(jnp.asarray(u, jnp.float32), knob.bounds(p))
    for k in knob.names:
        assert float(back[k]) == pytest.approx(r["best"][k], rel=1e-3)


def test_gradient_tuning_is_a_study_of_the_kit(tmp_path):
    """tune_study at toy size through the kit: the tuner trains from several starts, the grid
    points are baselines that selection picks among (the grid search), the test pairs the
    tuned points with the grid's best and the start on held-out seeds, and every run's reward
    is the objective of its own summary; tune_aqm.py is the kit's stages."""
    from rlbm_jax.cli import tune_aqm
    from rlbm_jax.study import pipeline
    from rlbm_jax.study.pipeline import read_csv
    from rlbm_jax.tune_study import declare

    study = declare("tune-red", "red", flows=(4, 8), seconds=1.5, warmup_s=0.5, steps=2,
                    axes={"min_th_frac": (0.002, 0.15), "max_th_frac": (1.0,), "max_p": (0.15,)},
                    selection=(10_000,), test=(20_000,))  # (one seed each: selection and test share their compiles)
    run, results = str(tmp_path / "run"), str(tmp_path / "kit")
    cfg = pipeline.train_config(study, recipe="adam", seeds=[0, 1], run_dir=run, results=results)
    assert cfg["agent"] == "fluid-tune" and cfg["fluid_tune"]["steps"] == 2
    pipeline.train(study, cfg)
    t0, t1 = (json.loads((tmp_path / "run" / f"tuned_seed{s}.json").read_text()) for s in (0, 1))
    assert t0["u0"] != t1["u0"] and set(t0["point"]) == set(tune.KNOBS["red"].names)
    sel = pipeline.select(study, pipeline.select_config(study, runs=[run], selection_seeds=1, seconds=None,
                                                        warmup_s=None, chunk=8, results=results))
    assert set(sel["chosen"]) == {"start", "grid"}
    rep = pipeline.test(study, pipeline.test_config(study, test_seeds=1, seconds=None, warmup_s=None, chunk=8,
                                                    results=results))
    assert set(rep["comparisons"]["reward"]) == {"start", sel["chosen"]["grid"]}
    cells = study.test_configs()
    for r in read_csv(tmp_path / "kit" / "runs.csv"):
        want = tune.power(float(r["util_wire"]), float(r["queue_mean_pkts"]), make_params(**cells[r["config"]]), 1.0)
        assert float(r["reward"]) == pytest.approx(float(want), rel=1e-6)
    assert all(r["ok"] for r in pipeline.export(study, pipeline.export_config(study, run_dir=run, results=results)))
    assert tune_aqm.main(["train", "--knob", "buffer", "--run-dir", str(tmp_path / "b"), "--print-config"]) == 0
    assert tune_aqm.main(["train", "--knob", "red", "--run-dir", str(tmp_path / "b"), "--seed", "20000"]) == 2


def test_rl_mark_without_an_agent_is_drop_tail():
    """simulate.py's fluid path with policy rl-mark and no agent: the marker at 0 is drop-tail."""
    p_mark = make_params(**qp.config_kw(20, 0.04, "newreno", load=0.0))
    p_dt = make_params(**qp.config_kw(20, 0.04, "newreno", load=0.0, policy="droptail"))
    a = fluid.summary(p_mark, 4.0, warmup_s=1.0)
    b = fluid.summary(p_dt, 4.0, warmup_s=1.0)
    assert float(a["queue_mean_pkts"]) == pytest.approx(float(b["queue_mean_pkts"]), rel=1e-5)
    assert float(a["mark_rate"]) == 0.0


def test_apg_is_a_trainer_of_the_study_kit(tmp_path):
    """The study `queuepilot-apg` at toy size through the kit: APG trains through the fluid
    model (one run per training seed), its policies are judged on the packet simulator by
    select and test against QueuePilot's AQMs, the report regenerates, and export checks
    each ONNX graph against the JAX network; train_apg.py is the kit's stages."""
    import dataclasses

    from rlbm_jax.cli import train_apg
    from rlbm_jax.study import get, pipeline

    base = get("queuepilot-apg")
    one = {k: v for k, v in list(base.selection_configs().items())[:1]}
    study = dataclasses.replace(base, recipes={"toy": {"hidden": [8], "horizon": 2, "episode_steps": 2}},
                                train_configs=lambda: base.train_configs()[::16],
                                selection_configs=lambda: one, test_configs=lambda: one, eval_s=0.5, warmup_s=0.1,
                                legacy_runs={})
    run, results = str(tmp_path / "run"), str(tmp_path / "kit")
    with pytest.raises(ValueError, match="--num-envs: the apg trainer has no such setting"):
        pipeline.train_config(study, recipe="toy", seeds=[0], run_dir=run, num_envs=8, results=results)
    cfg = pipeline.train_config(study, recipe="toy", seeds=[0, 1], run_dir=run, updates=2, results=results)
    assert cfg["agent"] == "apg" and cfg["apg"]["updates"] == 2 and cfg["apg"]["hidden"] == [8]
    assert pipeline.train(study, cfg)["updates"] == 2
    assert (tmp_path / "run" / "policy_seed1.onnx").stat().st_size > 0
    pipeline.select(study, pipeline.select_config(study, runs=[run], selection_seeds=1, seconds=None, warmup_s=None,
                                                  chunk=4, results=results, baselines=["droptail", "codel-2ms"]))
    rep = pipeline.test(study, pipeline.test_config(study, test_seeds=1, seconds=None, warmup_s=None, chunk=4,
                                                    results=results))
    assert set(rep["comparisons"]["reward"]) == {"droptail", "codel-2ms"}
    assert all(np.isfinite(c["diff"]) for c in rep["comparisons"]["reward"].values())
    recs = pipeline.export(study, pipeline.export_config(study, run_dir=run, results=results))
    assert [r["seed"] for r in recs] == [0, 1] and all(r["ok"] for r in recs)
    # the script is the kit's stages: its train refuses a test seed, its evaluate takes the committed run
    assert train_apg.main(["train", "--run-dir", str(tmp_path / "x"), "--seed", "2000", "--print-config"]) == 2
    committed = Path(__file__).resolve().parents[1] / "results" / "apg"
    assert train_apg.main(["evaluate", "--run-dir", str(committed), "--print-config"]) == 0


def test_gradient_horizon_keeps_values_and_sits_on_the_absolute_clock():
    """grad_horizon_s changes no value; a horizon longer than the run gives the exact
    derivative whatever the calls (summary's warm-up split, an env's intervals); a short
    one gives a finite derivative of the same sign where the loop is stable; the env's
    cuts do not fall at every interval."""
    from rlbm_jax.fluid_validation import cell_params

    p = cell_params(16, 1.0, "red")
    cfg = fluid.configure(p, max_rtt_s=0.3)

    def f(m, h):
        return fluid.summary(p, 4.0, warmup_s=1.0, overrides={"red_max_p": m}, config=cfg, grad_horizon_s=h)[
            "queue_mean_pkts"]

    # each horizon's value and derivative from one compiled function
    vg = jax.jit(jax.value_and_grad(f), static_argnums=1)
    out = {h: [float(x) for x in vg(jnp.float32(0.1), h)] for h in (None, 0.5, 100.0)}
    vals, g = ({h: v[i] for h, v in out.items()} for i in (0, 1))
    assert vals[0.5] == pytest.approx(vals[None], rel=1e-5) and vals[100.0] == pytest.approx(vals[None], rel=1e-5)
    assert g[100.0] == pytest.approx(g[None], rel=1e-4)
    assert np.isfinite(g[0.5]) and np.sign(g[0.5]) == np.sign(g[None]) < 0
    # through the env: a 10 s horizon over 40 intervals of 5 ms is the exact derivative
    with jax.enable_x64(True):
        p2 = make_params(**qp.config_kw(20, 0.04, "newreno", load=0.0))
        envs = {h: FluidEnv(p2, "QueuePilot-continuous-v0", agent_interval_s=qp.STEP_S, episode_s=1.0,
                            grad_horizon_s=h) for h in (None, 10.0)}

        def ret(m, h):
            env = envs[h]
            (r, *_), _ = episode_return(env, env.default_params, m, 40)
            return jnp.sum(r[20:])

        ge = [float(jax.jit(jax.grad(ret), static_argnums=1)(jnp.float64(0.01), h)) for h in (None, 10.0)]
    assert ge[0] != 0 and ge[1] == pytest.approx(ge[0], rel=1e-6)
