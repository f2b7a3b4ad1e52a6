"""The differentiable fluid model of long-lived flows (rlbm_jax.env.backends.fluid): its
gradients against finite differences, its conservation of packets, its agreement with the
packet simulator, batching and compilation, and its refusals.

`python tests/test_fluid.py` prints the full agreement table (NewReno and CUBIC, drop-tail,
RED, RED+ECN and ARED, 8 and 16 flows, 0.5 / 1 / 2 BDP, two seeds; a few minutes)."""
import json
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import backends, long_flow_params, make_params, metrics as mx, sim, stack_params
from rlbm_jax.env.backends import fluid
from rlbm_jax.env.presets import bdp_buffer_pkts, long_flows

SECONDS, WARMUP = 8.0, 2.0  # the agreement runs (packet and fluid)
UTIL_TOL, QUEUE_TOL = 0.03, 0.25  # utilisation within 3 points, mean queue within 25 %


def cell_params(n, b, aqm="droptail", tcp="newreno", **extra):
    """n long flows through a FIFO of b x BDP: drop-tail, or RED with thresholds at a quarter and
    three quarters of the buffer (max_p 0.1), or ARED with ns-3's automatic ones; the starts
    spread over 0.2 s."""
    kw = dict(tcp=tcp, long_flow_start_spread_s=0.2, warmup_s=WARMUP, **extra)
    if aqm == "red":
        buf = bdp_buffer_pkts(long_flows(n, b), b)
        for k, v in dict(policy="red", red_min_th_pkts=round(buf / 4), red_max_th_pkts=round(3 * buf / 4),
                         red_max_p=0.1).items():
            kw.setdefault(k, v)  # (a probe moves one of them)
    elif aqm == "ared":
        kw.update(policy="ared")
    return long_flow_params(n, b, **kw)


def packet_runs(params_list, seeds, seconds=SECONDS):
    """The packet simulator's summary of each (params, seed), one vmapped batch (the backend
    `auto` picks: native for drop-tail, the JAX tick for RED)."""
    stacked = stack_params(params_list)
    ticks = sim.ticks_for(seconds, params_list[0])

    def one(p, k):
        s, _ = backends.run(sim.init(k, p), p, ticks)
        return mx.summarize(s.metrics, p)

    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(stacked, keys))


def fluid_runs(params_list, seconds=SECONDS, warmup_s=WARMUP):
    """The fluid model's summary of each params, one vmapped batch (one compilation)."""
    stacked = stack_params(params_list)
    cfg = fluid.configure(stacked)
    out = jax.jit(jax.vmap(lambda p: fluid.summary(p, seconds, warmup_s=warmup_s, config=cfg)))(stacked)
    return jax.tree.map(np.asarray, out)


def compare(cells, seeds=(0, 1), seconds=SECONDS):
    """Rows (cell, fluid util, packet util, fluid queue, packet queue, fluid drop, packet drop,
    fluid mark, packet mark, ok) of cells (flows, buffer in BDP, cell_params keywords); the
    packet values are means over seeds.  Cells run in batches: the packet simulator's by flow
    count and backend (RED runs on the JAX tick), the fluid model's by flow count, TCP and AQM."""
    plist = [cell_params(c[0], c[1], **c[2]) for c in cells]
    pk, fl = [None] * len(cells), [None] * len(cells)

    def batches(key):
        groups = {}
        for i, c in enumerate(cells):
            groups.setdefault(key(c), []).append(i)
        return groups.values()

    for idx in batches(lambda c: (c[0], backends.resolve(None, plist[cells.index(c)]))):
        r = packet_runs([plist[i] for i in idx for _ in seeds], [s for _ in idx for s in seeds], seconds)
        for j, i in enumerate(idx):
            pk[i] = {k: float(np.mean(r[k][j * len(seeds):(j + 1) * len(seeds)]))
                     for k in ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate")}
    for idx in batches(lambda c: (c[0], json.dumps(c[2], sort_keys=True))):
        r = fluid_runs([plist[i] for i in idx], seconds)
        for j, i in enumerate(idx):
            fl[i] = {k: float(r[k][j]) for k in ("util_wire", "queue_mean_pkts", "drop_rate", "mark_rate")}
    rows = []
    for c, f, p in zip(cells, fl, pk):
        ok = (abs(f["util_wire"] - p["util_wire"]) <= UTIL_TOL
              and abs(f["queue_mean_pkts"] - p["queue_mean_pkts"]) <= QUEUE_TOL * p["queue_mean_pkts"])
        rows.append((c, f["util_wire"], p["util_wire"], f["queue_mean_pkts"], p["queue_mean_pkts"], f["drop_rate"],
                     p["drop_rate"], f["mark_rate"], p["mark_rate"], ok))
    return rows


def table(rows) -> str:
    lines = [f"{'flows':>5} {'BDP':>4} {'scenario':28} {'util fluid':>10} {'packet':>7} {'queue fluid':>11} "
             f"{'packet':>7} {'err':>7} {'drop fluid':>10} {'packet':>8} {'mark fluid':>10} {'packet':>8}"]
    for c, fu, pu, fq, pq, fd, pd, fm, pm, ok in rows:
        what = " ".join(f"{v}" if k in ("aqm", "tcp") else f"{k}={v}" for k, v in sorted(c[2].items()))
        lines.append(f"{c[0]:>5} {c[1]:>4} {what:28} {fu:10.4f} {pu:7.4f} {fq:11.1f} {pq:7.1f} "
                     f"{(fq / pq - 1) * 100:+6.1f}% {fd:10.5f} {pd:8.5f} {fm:10.5f} {pm:8.5f} {'ok' if ok else 'MISS'}")
    return "\n".join(lines)


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

        def f2(b, metric):
            return fluid.summary(p2, 4.0, warmup_s=1.0, overrides={"buffer_pkts": b}, config=cfg2)[metric]

        b0 = jnp.float64(float(p2.buffer_pkts))
        g_b = {m: float(jax.jit(jax.grad(f2), static_argnums=1)(b0, m)) for m in ("queue_mean_pkts", "util_wire")}
        vb = jax.jit(jax.vmap(lambda b: fluid.summary(p2, 4.0, warmup_s=1.0, overrides={"buffer_pkts": b},
                                                      config=cfg2)))(jnp.stack([b0 * (1 + rel), b0 * (1 - rel)]))
        fd_b = {m: float((vb[m][0] - vb[m][1]) / (2 * rel * float(b0))) for m in g_b}
    # in float32 (the default) the same gradient, finite and within float32's noise
    g32 = float(jax.jit(jax.grad(lambda m: fluid.summary(p, 4.0, warmup_s=1.0, overrides={"red_max_p": m},
                                                          config=cfg)["queue_mean_pkts"]))(jnp.float32(0.1)))
    assert np.isfinite(g32) and abs(g32 - grad[1]) <= 0.01 * abs(grad[1]), (g32, grad[1])
    grads = {f"queue / {k}": v for k, v in zip(names, grad)}
    fds = {f"queue / {k}": v for k, v in zip(names, fd)}
    for m, short in (("queue_mean_pkts", "queue"), ("util_wire", "util")):
        grads[f"{short} / buffer_pkts"], fds[f"{short} / buffer_pkts"] = g_b[m], fd_b[m]
    print("\n" + "\n".join(f"d {k}: grad {grads[k]:.6g}  central FD {fds[k]:.6g}  "
                             f"({(grads[k] / fds[k] - 1) * 100:+.3f}%)" for k in grads))
    for k in grads:
        assert np.isfinite(grads[k]) and grads[k] != 0, (k, grads[k])
        assert abs(grads[k] - fds[k]) <= 0.02 * abs(fds[k]), (k, grads[k], fds[k])
    # and the physics has the right signs: a faster link or a harder RED holds less queue, a
    # higher threshold or a bigger buffer more; below a BDP more buffer idles the link less
    assert grads["queue / bottleneck_rate_bps"] < 0 and grads["queue / red_max_p"] < 0
    assert grads["queue / red_min_th_pkts"] > 0 and grads["queue / buffer_pkts"] > 0
    assert grads["util / buffer_pkts"] > 0


# ---------------------------------------------------------------------------------------------
# 2. conservation: arrived = delivered + dropped + the queue's change
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x64", [False, True])
def test_packets_are_conserved(x64):
    with jax.enable_x64(x64):
        cases = [long_flow_params(8, 0.5),  # drop-tail overflow and an idle link
                 long_flow_params(16, 1.0, policy="red", ecn=True, red_min_th_pkts=60, red_max_th_pkts=179),
                 long_flow_params(8, 0.3, policy="red", red_min_th_pkts=5, red_max_th_pkts=40)]  # RED + overflow
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
# 3. agreement with the packet simulator
# ---------------------------------------------------------------------------------------------

def test_agrees_with_the_packet_simulator():
    """NewReno, 8 and 16 flows: drop-tail at 0.5 / 1 / 2 BDP, RED (16 flows, 0.5 and 1 BDP), CUBIC
    drop-tail at two cells; two seeds of 8 s (2 s warm-up) each; utilisation within 3 points, mean queue within
    25 % of the packet simulator's mean over the seeds."""
    rows = compare([(n, b, {}) for n in (8, 16) for b in (0.5, 1.0, 2.0)]
                   + [(8, 1.0, {"tcp": "cubic"}), (16, 0.5, {"tcp": "cubic"}),
                      (16, 0.5, {"aqm": "red"}), (16, 1.0, {"aqm": "red"})])
    print("\n" + table(rows))
    missed = [r for r in rows if not r[-1]]
    assert not missed, "\n" + table(missed)


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
    (dict(long_flows=4, load=0.5, num_classes=1), "load=0.5"),
    (dict(long_flows=0, load=0.0, num_classes=1), "long_flows=0"),
    (dict(long_flows=4, load=0.0, num_classes=2), "num_classes=2"),
    (dict(long_flows=4, load=0.0, num_classes=1, tcp="dctcp", policy="red"), "tcp=dctcp"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="pie"), "policy=pie"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="codel"), "policy=codel"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="fq-codel"), "policy=fq-codel"),
    (dict(long_flows=4, load=0.0, num_classes=1, policy="dt"), "policy=dt"),
])
def test_refuses_what_it_cannot_represent(kw, name):
    p = make_params(**kw)
    with pytest.raises(ValueError, match=re.escape(name)):
        fluid.configure(p)
    with pytest.raises(ValueError, match="fluid"):
        fluid.summary(p, 1.0)


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
    assert "load=0.7" in why and "num_classes=2" in why and "policy=sb-naive" in why
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

# ---- usefulness: does the fluid gradient point where the packet simulator moves? ----------
# (name, cell: (flows, buffer in BDP, cell_params keywords), parameter, metric); the parameter
# is a make_params keyword, moved by PROBE_STEP of its value (the buffer by whole packets)
PROBES = (
    ("RED max_p -> queue", (16, 1.0, {"aqm": "red"}), "red_max_p", "queue_mean_pkts"),
    ("RED max_p -> utilisation", (16, 0.5, {"aqm": "red"}), "red_max_p", "util_wire"),
    ("RED min_th -> queue", (16, 1.0, {"aqm": "red"}), "red_min_th_pkts", "queue_mean_pkts"),
    ("RED max_th -> queue", (8, 1.0, {"aqm": "red"}), "red_max_th_pkts", "queue_mean_pkts"),
    ("RED+ECN max_p -> queue", (16, 1.0, {"aqm": "red", "ecn": True}), "red_max_p", "queue_mean_pkts"),
    ("CUBIC RED max_p -> queue", (16, 1.0, {"aqm": "red", "tcp": "cubic"}), "red_max_p", "queue_mean_pkts"),
    ("drop-tail buffer -> utilisation", (16, 0.5, {}), "buffer_pkts", "util_wire"),
    ("drop-tail buffer -> queue", (16, 0.5, {}), "buffer_pkts", "queue_mean_pkts"),
    ("drop-tail buffer -> queue, 8 flows", (8, 1.0, {}), "buffer_pkts", "queue_mean_pkts"),
    ("CUBIC drop-tail buffer -> queue", (16, 1.0, {"tcp": "cubic"}), "buffer_pkts", "queue_mean_pkts"),
    ("drop-tail capacity -> queue", (16, 1.0, {}), "bottleneck_rate_bps", "queue_mean_pkts"),
    ("RED capacity -> utilisation", (16, 0.5, {"aqm": "red"}), "bottleneck_rate_bps", "util_wire"),
)
PROBE_STEP = 0.2


def probe_rows(probes=PROBES, seeds=tuple(range(8)), seconds=SECONDS):
    """Per probe: (name, the fluid gradient, the packet simulator's central difference over
    +-PROBE_STEP averaged over `seeds`, its standard error over seeds, signs agree)."""
    rows = []
    for name, (n, b, kw), param, metric in probes:
        base = cell_params(n, b, **kw)
        x0 = float(np.asarray(getattr(base, param)).reshape(-1)[0])
        cfg = fluid.configure(base, overrides={"buffer_pkts": x0 * (1 + PROBE_STEP)} if param == "buffer_pkts"
                              else None, max_rtt_s=0.3)
        over = "buffer_pkts" if param == "buffer_pkts" else param
        g = float(jax.jit(jax.grad(lambda x: fluid.summary(base, seconds, warmup_s=WARMUP, config=cfg,
                                                           overrides={over: x})[metric]))(jnp.float32(x0)))
        if param == "buffer_pkts":
            pts = [int(round(x0 * (1 + s * PROBE_STEP))) for s in (1, -1)]
            plist = [cell_params(n, b, buffer_per_class_pkts=v, queue_capacity_pkts=v, **kw) for v in pts]
        else:
            pts = [x0 * (1 + s * PROBE_STEP) for s in (1, -1)]
            plist = [cell_params(n, b, **{param: v}, **kw) for v in pts]
            if param == "bottleneck_rate_bps":  # the same buffer in packets as the base cell
                plist = [cell_params(n, b, **{param: v}, buffer_per_class_pkts=int(base.buffer_pkts),
                                     queue_capacity_pkts=int(base.buffer_pkts), **kw) for v in pts]
        r = packet_runs([p for p in plist for _ in seeds], [s for _ in plist for s in seeds], seconds)[metric]
        up, down = np.asarray(r[:len(seeds)], np.float64), np.asarray(r[len(seeds):], np.float64)
        diffs = (up - down) / (pts[0] - pts[1])
        fd, se = float(diffs.mean()), float(diffs.std(ddof=1) / np.sqrt(len(seeds)))
        rows.append((name, g, fd, se, np.sign(g) == np.sign(fd)))
    return rows


def probe_table(rows) -> str:
    lines = [f"{'probe':36} {'fluid gradient':>15} {'packet FD':>12} {'s.e.':>10} {'sign':>5}"]
    lines += [f"{name:36} {g:15.4g} {fd:12.4g} {se:10.2g} {'same' if ok else 'DIFF':>5}"
              for name, g, fd, se, ok in rows]
    return "\n".join(lines)


def test_fluid_gradients_point_where_the_packet_simulator_moves():
    """Four probes whose packet-side effect stands well clear of the seeds' noise: the sign
    of the fluid gradient is the sign of the packet simulator's seed-averaged difference."""
    rows = probe_rows([p for p in PROBES if p[0] in ("RED max_p -> queue", "RED min_th -> queue",
                                                      "drop-tail buffer -> queue", "drop-tail buffer -> utilisation")],
                      seeds=(0, 1, 2, 3), seconds=6.0)
    print("\n" + probe_table(rows))
    assert all(ok for *_, ok in rows), probe_table(rows)


if __name__ == "__main__" and sys.argv[1:2] == ["probes"]:  # the gradient probes (a few minutes)
    print(probe_table(probe_rows()))
    sys.exit(0)
if __name__ == "__main__":  # the full agreement table (a few minutes)
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    all_rows = compare([(n, b, {"tcp": tcp, "aqm": aqm}) for tcp in ("newreno", "cubic")
                        for aqm in ("droptail", "red") for n in (8, 16) for b in (0.5, 1.0, 2.0)]
                       + [(n, 1.0, {"aqm": "red", "ecn": True}) for n in (8, 16)]
                       + [(n, 1.0, {"aqm": "ared"}) for n in (8, 16)], seconds=seconds)
    print(table(all_rows))
    print(json.dumps([[r[0][0], r[0][1], r[0][2]] + list(r[1:]) for r in all_rows]))
