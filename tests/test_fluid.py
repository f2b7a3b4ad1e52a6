"""The differentiable fluid model of long-lived flows (rlbm_jax.env.backends.fluid): its
gradients against finite differences, its conservation of packets, its agreement with the
packet simulator, batching and compilation, and its refusals.

The cells, the agreement table and the probes are `rlbm_jax.fluid_validation`'s;
`python calibration/fluid.py grid` and `... probes` report them in full (calibration/FLUID.md)."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import backends, long_flow_params, make_params, sim, stack_params
from rlbm_jax.env.backends import fluid
from rlbm_jax.fluid_validation import cell_params, fluid_runs


# ---------------------------------------------------------------------------------------------
# 1. gradients against central finite differences of the same function (float64)
# ---------------------------------------------------------------------------------------------

def test_gradients_match_finite_differences():
    rel = 1e-4  # relative step: the function is smooth at this scale, float64 keeps 1e-12 of it
    with jax.enable_x64(True):
        # RED, 16 flows, 1 BDP: the mean queue against capacity, max_p and min_th
        p = long_flow_params(16, 1.0, policy="red", red_min_th_pkts=60, red_max_th_pkts=179, red_max_p=0.1)
        names = ("bottleneck_rate_bps", "red_max_p", "red_min_th_pkts")
        x0 = jnp.array([100e6, 0.1, 60.0], jnp.float64)
        cfg = fluid.configure(p, max_rtt_s=0.2)

        def f(x):
            return fluid.summary(p, 4.0, warmup_s=1.0, overrides=dict(zip(names, x)), config=cfg)["queue_mean_pkts"]

        grad = np.asarray(jax.jit(jax.grad(f))(x0))
        steps = [rel * float(v) for v in x0]
        pts = jnp.stack([x0.at[i].add(s * sign) for i, s in enumerate(steps) for sign in (1, -1)])
        vals = np.asarray(jax.jit(jax.vmap(f))(pts))
        fd = np.array([(vals[2 * i] - vals[2 * i + 1]) / (2 * s) for i, s in enumerate(steps)])
        # drop-tail, 16 flows, 0.5 BDP (the link idles after each synchronised cut): the mean queue
        # and the utilisation against the buffer
        p2 = long_flow_params(16, 0.5)
        cfg2 = fluid.configure(p2, max_rtt_s=0.2)

        def f2(b):
            out = fluid.summary(p2, 4.0, warmup_s=1.0, overrides={"buffer_pkts": b}, config=cfg2)
            return jnp.stack([out["queue_mean_pkts"], out["util_wire"]])

        b0 = jnp.float64(float(p2.buffer_pkts))
        jb = np.asarray(jax.jit(jax.jacrev(f2))(b0))  # both metrics' gradients, one compilation
        g_b = {m: float(jb[i]) for i, m in enumerate(("queue_mean_pkts", "util_wire"))}
        vb = jax.jit(jax.vmap(lambda b: fluid.summary(p2, 4.0, warmup_s=1.0, overrides={"buffer_pkts": b},
                                                      config=cfg2)))(jnp.stack([b0 * (1 + rel), b0 * (1 - rel)]))
        fd_b = {m: float((vb[m][0] - vb[m][1]) / (2 * rel * float(b0))) for m in g_b}
        # PIE, 16 flows, 2 BDP (its probability holds the queue near target: no overflow) and CoDel,
        # 16 flows, 1 BDP: the mean queue against their targets and PIE's gains
        aqm_grads, aqm_fds = {}, {}
        for b, aqm, names_a, xa in ((2.0, "pie", ("pie_target_s", "pie_a", "pie_b"), (0.015, 0.125, 1.25)),
                                    (1.0, "codel", ("codel_target_s",), (0.005,))):
            pa = long_flow_params(16, b, policy=aqm)
            cfg_a = fluid.configure(pa, max_rtt_s=0.2)

            def fa(x, pa=pa, cfg_a=cfg_a, names_a=names_a):
                return fluid.summary(pa, 4.0, warmup_s=1.0, overrides=dict(zip(names_a, x)),
                                     config=cfg_a)["queue_mean_pkts"]

            xa = jnp.array(xa, jnp.float64)
            ga = np.asarray(jax.jit(jax.grad(fa))(xa))
            sa = [rel * float(v) for v in xa]
            va = np.asarray(jax.jit(jax.vmap(fa))(jnp.stack([xa.at[i].add(s * sign) for i, s in enumerate(sa)
                                                             for sign in (1, -1)])))
            for i, k in enumerate(names_a):
                aqm_grads[f"queue / {k}"] = float(ga[i])
                aqm_fds[f"queue / {k}"] = float((va[2 * i] - va[2 * i + 1]) / (2 * sa[i]))
    # in float32 (the default) the same gradient, finite and within float32's noise
    g32 = float(jax.jit(jax.grad(lambda m: fluid.summary(p, 4.0, warmup_s=1.0, overrides={"red_max_p": m},
                                                          config=cfg)["queue_mean_pkts"]))(jnp.float32(0.1)))
    assert np.isfinite(g32) and abs(g32 - grad[1]) <= 0.01 * abs(grad[1]), (g32, grad[1])
    grads = {f"queue / {k}": v for k, v in zip(names, grad)}
    fds = {f"queue / {k}": v for k, v in zip(names, fd)}
    for m, short in (("queue_mean_pkts", "queue"), ("util_wire", "util")):
        grads[f"{short} / buffer_pkts"], fds[f"{short} / buffer_pkts"] = g_b[m], fd_b[m]
    grads.update(aqm_grads)
    fds.update(aqm_fds)
    print("\n" + "\n".join(f"d {k}: grad {grads[k]:.6g}  central FD {fds[k]:.6g}  "
                             f"({(grads[k] / fds[k] - 1) * 100:+.3f}%)" for k in grads))
    for k in grads:
        assert np.isfinite(grads[k]) and grads[k] != 0, (k, grads[k])
        assert abs(grads[k] - fds[k]) <= 0.02 * abs(fds[k]), (k, grads[k], fds[k])
    # and the physics has the right signs: a faster link or a harder RED holds less queue, a
    # higher threshold, a bigger buffer or a longer delay target more; below a BDP more buffer
    # idles the link less
    assert grads["queue / bottleneck_rate_bps"] < 0 and grads["queue / red_max_p"] < 0
    assert grads["queue / red_min_th_pkts"] > 0 and grads["queue / buffer_pkts"] > 0
    assert grads["util / buffer_pkts"] > 0
    assert grads["queue / pie_target_s"] > 0 and grads["queue / codel_target_s"] > 0


def test_dctcp_and_threshold_gradients_match_finite_differences():
    """DCTCP over step marking at K (16 flows, 1 BDP): the mean queue and the utilisation against
    g and the step's threshold (max_th = K + 1); DT (16 flows, 1 BDP): the mean queue and the
    utilisation against alpha.  Exact gradients against central differences of the same
    function (float64, relative step 1e-4), within 2 %."""
    rel = 1e-4
    with jax.enable_x64(True):
        cells = ((cell_params(16, 1.0, "red-step", "dctcp"), ("dctcp_g", "red_max_th_pkts")),
                 (cell_params(16, 1.0, "dt"), ("alpha",)))
        grads, fds = {}, {}
        for p, names in cells:
            cfg = fluid.configure(p, max_rtt_s=0.2)
            x0 = jnp.array([float(np.asarray(getattr(p, k)).reshape(-1)[0]) for k in names], jnp.float64)

            def f(x, p=p, cfg=cfg, names=names):
                out = fluid.summary(p, 4.0, warmup_s=1.0, overrides=dict(zip(names, x)), config=cfg)
                return jnp.stack([out["queue_mean_pkts"], out["util_wire"]])

            jac = np.asarray(jax.jit(jax.jacrev(f))(x0))  # [metric, parameter]
            steps = [rel * float(v) for v in x0]
            vals = np.asarray(jax.jit(jax.vmap(f))(jnp.stack([x0.at[i].add(h * sign) for i, h in enumerate(steps)
                                                              for sign in (1, -1)])))
            for i, k in enumerate(names):
                for j, m in enumerate(("queue", "util")):
                    grads[f"{m} / {k}"] = float(jac[j, i])
                    fds[f"{m} / {k}"] = float((vals[2 * i, j] - vals[2 * i + 1, j]) / (2 * steps[i]))
    print("\n" + "\n".join(f"d {k}: grad {grads[k]:.6g}  central FD {fds[k]:.6g}  "
                             f"({(grads[k] / fds[k] - 1) * 100:+.3f}%)" for k in grads))
    for k in grads:
        assert np.isfinite(grads[k]) and grads[k] != 0, (k, grads[k])
        assert abs(grads[k] - fds[k]) <= 0.02 * abs(fds[k]), (k, grads[k], fds[k])
    # DCTCP holds its queue near K (one packet of threshold, about one of queue); a larger DT
    # alpha admits a longer queue, which idles the link less
    assert 0.5 < grads["queue / red_max_th_pkts"] < 1.5
    assert grads["queue / alpha"] > 0 and grads["util / alpha"] > 0


# ---------------------------------------------------------------------------------------------
# 2. conservation: arrived = delivered + dropped + the queue's change
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x64", [False, True])
def test_packets_are_conserved(x64):
    with jax.enable_x64(x64):
        cases = [long_flow_params(8, 0.5),  # drop-tail overflow and an idle link
                 long_flow_params(16, 1.0, policy="red", ecn=True, red_min_th_pkts=60, red_max_th_pkts=179),
                 long_flow_params(8, 0.3, policy="red", red_min_th_pkts=5, red_max_th_pkts=40),  # RED + overflow
                 long_flow_params(8, 2.0, policy="pie"),  # PIE's early drops (no overflow)
                 long_flow_params(16, 0.5, policy="codel"),  # CoDel's drops at the head, and the overflow
                 cell_params(16, 1.0, "red-step", "dctcp"),  # DCTCP's marks at K
                 cell_params(8, 0.5, "dt")]  # the overflow at DT's cap
        for p in cases:
            out = {k: float(v) for k, v in jax.jit(lambda: fluid.summary(p, 4.0, warmup_s=1.0))().items()}
            lhs = out["arrived_pkts"]
            rhs = out["delivered_pkts"] + out["dropped_pkts"] + out["queue_end_pkts"] - out["queue_start_pkts"]
            # float32 sums of ~3000 steps: a few ulps of the total per step
            tol = 1e-9 if x64 else 2e-5
            assert abs(lhs - rhs) <= tol * lhs, (lhs, rhs, out)
            assert out["arrived_pkts"] > 0 and out["delivered_pkts"] > 0
            assert out["dropped_pkts"] + out["marked_pkts"] > 0  # congestion was signalled
            assert 0 <= out["queue_end_pkts"] <= float(p.buffer_pkts) * 1.001
            assert out["delay_clipped_s"] == 0.0
            # the link never carries more than its capacity
            assert out["util_wire"] <= 1.0 + 1e-6


# ---------------------------------------------------------------------------------------------
# 4. batching and compilation
# ---------------------------------------------------------------------------------------------

def test_vmap_over_capacities_equals_separate_calls():
    p = long_flow_params(16, 1.0, policy="red", red_min_th_pkts=60, red_max_th_pkts=179, red_max_p=0.1)
    caps = jnp.array([60e6, 100e6, 140e6], jnp.float32)
    # one static config for all: the feedback rings sized for the slowest link's RTT
    cfg = fluid.configure(p, overrides={"bottleneck_rate_bps": float(caps.min())})

    def run(c):
        return fluid.summary(p, 3.0, warmup_s=1.0, overrides={"bottleneck_rate_bps": c}, config=cfg)

    batched = jax.jit(jax.vmap(run))(caps)
    single = jax.jit(run)
    for i, c in enumerate(caps):
        one = single(c)
        for k in ("util_wire", "queue_mean_pkts", "drop_rate", "window_mean_pkts"):
            np.testing.assert_allclose(float(batched[k][i]), float(one[k]), rtol=1e-4, atol=1e-7, err_msg=k)
    q = np.asarray(batched["queue_mean_pkts"])
    assert q[0] > q[1] > q[2]  # a faster link holds a shorter queue (RED sets W, so the queue falls)


def test_vmap_over_stacked_params_equals_separate_calls():
    plist = [long_flow_params(8, b) for b in (0.5, 1.0, 2.0)]
    out = fluid_runs(plist, seconds=3.0, warmup_s=1.0)
    for i, p in enumerate(plist):
        one = jax.jit(lambda: fluid.summary(p, 3.0, warmup_s=1.0))()
        for k in ("util_wire", "queue_mean_pkts"):
            np.testing.assert_allclose(float(out[k][i]), float(one[k]), rtol=1e-4, err_msg=k)


def test_jit_compiles_once_for_two_values():
    p = long_flow_params(8, 1.0)
    traces = []

    def run(c, b):
        traces.append(1)
        return fluid.summary(p, 2.0, warmup_s=0.5, overrides={"bottleneck_rate_bps": c, "buffer_pkts": b})

    f = jax.jit(run)
    a = f(jnp.float32(90e6), jnp.float32(200.0))
    b = f(jnp.float32(110e6), jnp.float32(260.0))
    assert len(traces) == 1 and f._cache_size() == 1
    assert float(a["queue_mean_pkts"]) != float(b["queue_mean_pkts"])


# ---------------------------------------------------------------------------------------------
# refusals: never silently compute something else
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, name", [
    (dict(long_flows=4, load=0.5, num_classes=1, policy="droptail"), "arrival_stop_s = inf"),
    (dict(long_flows=0, load=0.0, num_classes=1), "long_flows=0 and load=0"),
    (dict(long_flows=4, load=0.0, num_classes=2), "num_classes=2"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="fq-codel"), "policy=fq-codel"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="rl"), "policy=rl"),
    (dict(long_flows=4, load=0.0, num_classes=2, policy="dt"), "num_classes=2"),
])
def test_refuses_what_it_cannot_represent(kw, name):
    p = make_params(**kw)
    with pytest.raises(ValueError, match=re.escape(name)):
        fluid.configure(p)
    with pytest.raises(ValueError, match="fluid"):
        fluid.summary(p, 1.0)


def test_threshold_policies_cap_the_one_queue():
    """With one class sb-naive is drop-tail at B (the same numbers), ABM is DT (its drain-rate
    factor is 1), and DT's and static-bdp's caps hold the queue: a B / (1 + a), min(a BDP, B / 2)."""
    plist = [cell_params(8, 0.5, aqm) for aqm in ("droptail", "sb-naive", "dt", "abm")]
    plist += [cell_params(8, 0.5, "dt", alpha=3.0), cell_params(8, 2.0, "static-bdp", alpha=0.3)]
    out = [fluid_runs([p], seconds=3.0, warmup_s=1.0) for p in plist]
    for k in ("util_wire", "queue_mean_pkts", "drop_rate"):
        assert out[0][k][0] == out[1][k][0] and out[2][k][0] == out[3][k][0], k
    assert out[2]["queue_mean_pkts"][0] < out[4]["queue_mean_pkts"][0] < out[0]["queue_mean_pkts"][0]
    for p, o, cap in ((plist[2], out[2], 0.5), (plist[4], out[4], 0.75),
                      (plist[5], out[5], 0.3 * float(plist[5].bdp_pkts) / float(plist[5].buffer_pkts))):
        b = float(p.buffer_pkts)
        assert o["queue_end_pkts"][0] <= cap * b + 1.0 and o["drop_rate"][0] > 0, (cap, o)


def test_dctcp_alpha_tracks_the_marked_fraction():
    """DCTCP's alpha (1 at start) settles near the fraction of packets marked, and its cuts by
    alpha / 2 keep the link full with the queue near K, where NewReno's halvings on the same marks
    idle it (tests/test_aqm.py's packet test, on the fluid model); a traced override of red_max_p
    is refused under step marking (it reads neither red_weight nor red_max_p)."""
    p = cell_params(16, 1.0, "red-step", "dctcp")
    cfg = fluid.configure(p)
    assert cfg.red_step and cfg.ecn and cfg.tcp == "dctcp"
    st = fluid.init(p, cfg)
    assert np.all(np.asarray(st.dctcp_alpha) == 1.0)
    st = jax.jit(lambda s: fluid.advance(s, p, fluid.steps_for(6.0, cfg), cfg))(st)
    out = fluid_runs([p], seconds=6.0, warmup_s=2.0)
    k = float(p.red_min_th_pkts)
    assert out["util_wire"][0] > 0.98 and out["drop_rate"][0] == 0.0 and 0.5 * k < out["queue_mean_pkts"][0] < 1.5 * k
    np.testing.assert_allclose(float(np.mean(st.dctcp_alpha)), out["mark_rate"][0], rtol=0.4)
    reno = fluid_runs([cell_params(16, 1.0, "red-step", "newreno", ecn=True)], seconds=6.0, warmup_s=2.0)
    assert reno["util_wire"][0] < out["util_wire"][0] - 0.05
    with pytest.raises(ValueError, match="red_max_th_pkts"):
        jax.jit(lambda m: fluid.summary(p, 1.0, overrides={"red_max_p": m}, config=fluid.configure(
            p, overrides={"red_max_p": m})))(jnp.float32(1.0))


def test_refuses_bad_batches_overrides_and_traced_params():
    a, b = long_flow_params(8, 1.0, tcp="newreno"), long_flow_params(8, 1.0, tcp="cubic")
    with pytest.raises(ValueError, match="TCP"):
        fluid.configure(stack_params([a, b]))
    with pytest.raises(ValueError, match="long flows"):
        fluid.configure(stack_params([long_flow_params(8, 1.0, num_senders=16, num_flow_slots=16),
                                      long_flow_params(16, 1.0)]))
    with pytest.raises(ValueError, match="cannot override 'load'"):
        fluid.summary(a, 1.0, overrides={"load": 0.5})
    with pytest.raises(ValueError, match="config="):
        jax.jit(lambda p: fluid.summary(p, 1.0))(a)


def test_cubic_and_ared_run_and_respond():
    """CUBIC holds a fuller queue than NewReno in the same drop-tail FIFO (its cut is 0.7, not
    0.5); ARED moves max_p from its start toward the band between its thresholds."""
    out = fluid_runs([long_flow_params(8, 1.0, tcp="cubic")], seconds=6.0, warmup_s=2.0)
    reno = fluid_runs([long_flow_params(8, 1.0, tcp="newreno")], seconds=6.0, warmup_s=2.0)
    assert out["queue_mean_pkts"][0] > reno["queue_mean_pkts"][0]
    p = long_flow_params(16, 1.0, policy="ared")
    cfg = fluid.configure(p)
    st = fluid.advance(fluid.init(p, cfg), p, fluid.steps_for(6.0, cfg), cfg)
    assert float(st.max_p) != pytest.approx(float(p.red_max_p))
    assert np.isfinite(float(st.q))


# ---- behind the backends' contract -------------------------------------------------------
def test_the_fluid_backend_is_run_only_when_named_and_never_as_ticks():
    p = cell_params(8, 1.0, "red")
    assert backends.resolve("fluid", p) == "fluid"
    assert backends.resolve("auto", p) != "fluid"  # another model: auto takes the same tick only
    with pytest.raises(ValueError, match="fluid backend runs whole scenarios"):
        backends.run(sim.init(jax.random.PRNGKey(0), p), p, 10, backend="fluid")
    why = backends.refusal("fluid", make_params())  # the thesis scenario: short flows, two classes, sb-naive
    assert "num_classes=2" in why and "policy=" not in why  # (sb-naive: one class's is modelled)
    assert "prr=ns-3.37" in backends.refusal("fluid", cell_params(8, 1.0, "red", prr="ns-3.37"))


def test_simulate_runs_the_fluid_backend_and_reports_what_it_models(tmp_path, monkeypatch):
    """simulate.py --backend fluid: the packet report's fields where the fluid model has
    them (close to the packet simulator's on a cell with 16 flows), null and listed in
    `not_modelled` where it has none; what it cannot run is refused by flag."""
    from rlbm_jax.cli import simulate as sim_cli

    monkeypatch.setattr(backends, "_default", None)  # --backend sets the process's default: undone after
    out = tmp_path / "f.json"
    argv = ["--scenario", "long", "--long-flows", "16", "--tcp", "newreno", "--policy", "droptail", "--seconds", "8",
            "--seeds", "2", "--no-progress", "--json", str(out)]
    assert sim_cli.main([*argv, "--backend", "fluid"]) == 0
    r = json.loads(out.read_text())
    assert r["backend"] == "fluid" and r["deterministic"] is True
    assert r["fct_mean_s"] is None and "fct_mean_s" in r["not_modelled"] and "util_wire" not in r["not_modelled"]
    assert sim_cli.main([*argv, "--backend", "native"]) == 0
    pk = json.loads(out.read_text())
    assert abs(r["util_wire"] - pk["util_wire"]) < 0.03
    assert abs(r["queue_mean_pkts"] / pk["queue_mean_pkts"] - 1) < 0.25
    assert sim_cli.main(["--scenario", "thesis", "--backend", "fluid", "--seconds", "1", "--seeds", "1",
                         "--no-progress", "--json", str(out)]) == 2



def test_what_the_fluid_model_does_not_read_is_refused_when_given(tmp_path, monkeypatch, capsys):
    """A parameter the fluid model never reads, given on the command line, is refused by
    its flag; a script that drives the tick refuses $RLBM_JAX_BACKEND=fluid before running."""
    from rlbm_jax.cli import evaluate as eval_cli, simulate as sim_cli
    from rlbm_jax.env import model

    assert all(n in model.BY_NAME and not model.BY_NAME[n].is_choice for n in fluid.IGNORES)
    monkeypatch.setattr(backends, "_default", None)
    argv = ["--scenario", "long", "--long-flows", "8", "--policy", "droptail", "--backend", "fluid", "--seconds", "2",
            "--seeds", "1", "--no-progress", "--json", str(tmp_path / "f.json")]
    assert sim_cli.main([*argv, "--min-rto-s", "5"]) == 2
    assert "--min-rto-s" in capsys.readouterr().err
    monkeypatch.setenv(backends.BACKEND_VAR, "fluid")
    with pytest.raises(SystemExit, match="drives the packet tick"):
        eval_cli.main(["--tcp", "cubic", "--buffer-pkts", "100", "--load", "0.5", "--seeds", "1", "--seconds", "1",
                       "--baselines", "sb-naive", "--out", str(tmp_path / "ev")])
    assert not (tmp_path / "ev").exists()


def test_the_ns3_comparison_builds_the_committed_cells():
    """`calibration/fluid.py ns3` (calibration/FLUID.md, "Against ns-3"): every cell it compares
    has the params of the committed calibration cell (calibration/run.py's cell, checked against
    results.json: the same SimParams, length and warm-up; a cell with short flows also each
    seed's, its delay moved by the committed shift), the committed ns3.json holds those cells
    with the committed seeds, its fluid means are the means of its per-seed values, every seed
    started the same flows in the three models, and its verdicts follow from its numbers.
    Nothing is simulated."""
    import importlib.util
    from pathlib import Path

    from rlbm_jax.fluid_validation import NS3_SHORT_METRICS, agrees, ns3_verdict, seed_means

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("calibration_fluid", root / "calibration" / "fluid.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    entries, skipped = mod.ns3_cells(root / "calibration" / "results")
    assert entries and all(e["flows"] >= 1 for e in entries if e["traffic"] == "long")
    assert {e["traffic"] for e in entries} == {"long", "websearch", "datamining"}
    assert not any("differ" in why for *_, why in skipped), skipped

    def same(p, ref, name):
        assert jax.tree.structure(p) == jax.tree.structure(ref), name
        for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(ref)):
            assert np.array_equal(np.asarray(a), np.asarray(b)), name

    committed = {}
    for e in entries:
        res = committed.setdefault(e["grid"], json.loads((root / "calibration" / "results" / e["grid"]
                                                          / "results.json").read_text()))
        cell = res["cells"][e["cell"]]
        assert (cell["kind"] == "long") == (e["traffic"] == "long") and e["seconds"] == cell["seconds"]
        assert e["warmup_s"] == cell["params"].get("warmup_s", 0.0) and e["seeds"] == res["seeds"]
        same(e["params"], make_params(**cell["params"]), e["cell"])
        if e["traffic"] != "long":
            assert len(e["seed_params"]) == len(res["seeds"])
            for p, shift in zip(e["seed_params"], cell["bottleneck_delay_shift_s"]):
                d = cell["params"]["bottleneck_delay_s"] + shift
                same(p, make_params(**{**cell["params"], "bottleneck_delay_s": d}), e["cell"])
    out = json.loads((root / "calibration" / "results" / "fluid" / "ns3.json").read_text())
    assert [(r["grid"], r["cell"]) for r in out["rows"]] == [(e["grid"], e["cell"]) for e in entries]
    assert out["skipped"]["count"] == len(skipped)
    for r in out["rows"]:
        assert r["fluid_vs_ns3"] == agrees(r["fluid"], r["ns3"]) and r["packet_vs_ns3"] == agrees(r["packet"], r["ns3"])
        if r["traffic"] != "long":
            assert len(r["fluid_seeds"]) == len(r["seeds"]) and "slowdown_ok" in r["fluid_vs_ns3"]
            means = seed_means(r["fluid_seeds"], NS3_SHORT_METRICS)
            assert all(means[k] == r["fluid"][k] for k in NS3_SHORT_METRICS), r["cell"]
            assert r["flows_started"]["fluid"] == r["flows_started"]["packet"] == r["flows_started"]["ns3"], r["cell"]
            assert r["fluid"]["slots_full"] == 0, r["cell"]
    assert out["verdict"]["all"] == ns3_verdict(out["rows"])
    for t in ("websearch", "datamining"):
        assert out["verdict_short_flows"][t] == ns3_verdict(out["rows"], 0, t)
