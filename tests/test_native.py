"""The native backend (the C++ tick, `rlbm_jax.env.backends.native`) against the JAX tick, the
reference: integer state identical, float state within a few float32 roundings (XLA
contracts multiply-adds and rewrites some divisions, the C++ code does neither), on
randomised configs; plus its own conservation, determinism and independence of batch,
threads and compilation count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import backends, sim, traffic
from rlbm_jax.env.backends import native
from rlbm_jax.env.switch import buffer
from rlbm_jax.env.params import make_params, pad_params
from tests.conftest import random_configs

TICKS = 6000


def _split(state):
    leaves = native.state_leaves(state)
    ints = {n: np.asarray(x) for n, x in leaves if x.dtype != jnp.float32}
    floats = {n: np.asarray(x) for n, x in leaves if x.dtype == jnp.float32}
    return ints, floats


def _run_both(stacked, keys, n):
    init = jax.vmap(sim.init)(keys, stacked)
    ref = jax.jit(jax.vmap(lambda s, p: backends.run(s, p, n, backend="jax")[0]))(init, stacked)
    nat = jax.jit(jax.vmap(lambda s, p: backends.run(s, p, n, backend="native")[0]))(init, stacked)
    return ref, nat


def _assert_equivalent(ref, nat):
    ri, rf = _split(ref)
    ni, nf = _split(nat)
    for name in ri:
        np.testing.assert_array_equal(ni[name], ri[name], err_msg=f"integer leaf {name}")
    for name in rf:
        np.testing.assert_allclose(nf[name], rf[name], rtol=2e-4, atol=1e-6, equal_nan=True,
                                   err_msg=f"float leaf {name}")


# short flows at a high load: many starts, so SYNs meet full queues and slots run out
SMALL_FLOWS = traffic.SizeTable(np.array([1e3, 2e4, 2e5]), np.array([0.0, 0.6, 1.0]), "small")


def _busy(configs, rng):
    """The configs, every other one with short flows at loads 0.8-1.2 and no long flow."""
    sizes, probs = traffic.pad_table(SMALL_FLOWS)
    out = []
    for i, p in enumerate(configs):
        if i % 2:
            p = p.replace(cdf_size_bytes=jnp.asarray(sizes, jnp.float32), cdf_prob=jnp.asarray(probs, jnp.float32),
                          load=jnp.asarray(rng.uniform(0.8, 1.2), jnp.float32), long_flows=jnp.asarray(0, jnp.int32))
        out.append(p)
    return jax.tree.map(lambda *xs: jnp.stack(xs), *out), out


@pytest.mark.parametrize("k,classes", [(1, 2), (4, 3)], ids=["k1-2cls", "k4-3cls"])
def test_native_tick_agrees_with_the_jax_tick(k, classes):
    _, configs = random_configs(8, seed=100 + k, pkts_per_tick=k, num_classes=classes)
    stacked, configs = _busy(configs, np.random.default_rng(k))
    keys = jax.random.split(jax.random.PRNGKey(k), len(configs))
    ref, nat = _run_both(stacked, keys, TICKS)
    _assert_equivalent(ref, nat)
    m = ref.metrics
    # the horizon exercised what the two must agree on: losses, timeouts, go-back-N, lost SYNs
    assert int(jnp.sum(m.drop_total)) > 100 and int(jnp.sum(m.rto_total)) > 5
    assert int(jnp.sum(m.spur_tx_total)) > 0 and int(jnp.sum(m.syn_drops)) > 0
    assert int(jnp.sum(m.flows_completed)) > 100 and int(jnp.sum(m.flows_refused)) > 0


# RED and ARED at enqueue (early drops, the forced region, the idle decay, ARED's max_p), ECN
# (CE in the run records and through partial dequeues, the echo, CWR, ns-3.37's CWR entries)
# and ns-3.37's PRR arithmetic, in one batch of two classes and one of one class, run by a
# process that compiles as a user's does (XLA's fusion emitters, not the suite's loop emitters,
# tests/conftest.py): XLA rounds RED's products and sums differently in the two modes (which
# products it fuses into FMAs), and by the shape (one class or several), and the native tick
# follows the default mode.
RED_AS_USERS_COMPILE = r"""
import jax, numpy as np
from rlbm_jax.env import model
from tests.conftest import random_configs
from tests.test_native import TICKS, _assert_equivalent, _busy, _run_both
red, ared = model.choice_index("policy", "red"), model.choice_index("policy", "ared")
for seed, k, classes in ((41, 2, 2), (43, 1, 1)):
    _, configs = random_configs(8, seed=seed, aqm=("red", "ared"), pkts_per_tick=k, num_classes=classes)
    # thresholds a third of conftest's (2-20 packets): small shared buffers still reach them
    configs = [p.replace(red_min_th_pkts=p.red_min_th_pkts / 3, red_max_th_pkts=p.red_max_th_pkts / 3) for p in configs]
    stacked, configs = _busy(configs, np.random.default_rng(seed))
    ref, nat = _run_both(stacked, jax.random.split(jax.random.PRNGKey(seed), len(configs)), TICKS)
    _assert_equivalent(ref, nat)
    marks, drops = np.asarray(ref.metrics.mark_total), np.asarray(ref.metrics.drop_total)
    ecn, pol = np.asarray(stacked.ecn), np.asarray(stacked.policy_id)
    assert set(pol.tolist()) == {red, ared} and ecn.any() and not ecn.all()
    assert marks[~ecn].max() == 0 and drops.min() > 20, (marks, drops)
    assert marks[ecn & (pol == red)].max() > 20 and marks[ecn & (pol == ared)].max() > 20, marks
    # ARED moved its max_p; SYNs were lost
    is_ared = pol == ared
    assert np.any(np.asarray(ref.aqm.ared.red_max_p)[is_ared] != np.asarray(stacked.red_max_p)[is_ared, None])
    assert int(np.sum(ref.metrics.syn_drops)) > 0
    print("ok", classes, marks.tolist(), drops.tolist())
"""


def test_native_tick_agrees_on_red_ared_and_ecn_as_users_compile_it():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}  # XLA's default, named
    res = subprocess.run([sys.executable, "-c", RED_AS_USERS_COMPILE], cwd=Path(__file__).resolve().parents[1],
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and res.stdout.count("ok") == 2, res.stdout + res.stderr[-3000:]


def test_native_tick_agrees_on_the_agents_buffer_size():
    """`rl-size` (ABS's knob: drop-tail at a size the agent sets per interval) on ABS's Env 2
    with web-search traffic beside the long flows: the size set before each stretch of ticks,
    on both ticks, gives the JAX tick's integers, and the sizes are what decide the drops."""
    p = scenarios.params("abs-env2", load=0.5)
    n = 4
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *([p] * n))
    keys = jax.random.split(jax.random.PRNGKey(11), n)
    ref = nat = jax.vmap(sim.init)(keys, stacked)
    step = {b: jax.jit(jax.vmap(lambda s, q, b=b: backends.run(s, q, 1500, backend=b)[0])) for b in ("jax", "native")}
    rng = np.random.default_rng(11)
    for _ in range(3):  # the agent's sizes for the next interval, one per env
        size = jnp.asarray(rng.uniform(2.0, float(p.class_cap_pkts[0]) + 20.0, size=(n, 1)), jnp.float32)
        ref = step["jax"](sim.apply_knobs(ref, {"buffer_size_pkts": size}), stacked)
        nat = step["native"](sim.apply_knobs(nat, {"buffer_size_pkts": size}), stacked)
        _assert_equivalent(ref, nat)
    drops = np.asarray(ref.metrics.drop_total)
    assert drops.min() > 0 and len(set(drops.tolist())) == n


def test_native_tick_agrees_on_fq_and_the_agents_flow_caps():
    """fq (LFQ's scheduler: deficit round robin over per-flow queues, the shared buffer's
    overflow dropped from the fattest flow, a drop-tail cap per flow) with the caps an agent
    sets before each stretch of ticks (knob `flow_cap_pkts`, one per flow slot), over two
    classes and two packets per tick: the JAX tick's integers."""
    _, configs = random_configs(8, seed=5, aqm=("fq",), pkts_per_tick=2, num_classes=2)
    stacked, configs = _busy(configs, np.random.default_rng(5))
    n = len(configs)
    ref = nat = jax.vmap(sim.init)(jax.random.split(jax.random.PRNGKey(5), n), stacked)
    step = {b: jax.jit(jax.vmap(lambda s, q, b=b: backends.run(s, q, 1500, backend=b)[0])) for b in ("jax", "native")}
    rng = np.random.default_rng(5)
    for _ in range(3):
        cap = jnp.asarray(rng.uniform(0.5, 40.0, size=ref.aqm.fq.cap_pkts.shape), jnp.float32)
        ref = step["jax"](sim.apply_knobs(ref, {"flow_cap_pkts": cap}), stacked)
        nat = step["native"](sim.apply_knobs(nat, {"flow_cap_pkts": cap}), stacked)
        _assert_equivalent(ref, nat)
    m = ref.metrics
    assert int(jnp.min(m.drop_total)) > 20 and int(jnp.sum(m.flows_completed)) > 200 and int(jnp.sum(m.rto_total)) > 50


# each case: scenarios that share their static shapes, so that they run in one batch (one
# compilation of each tick, with the union of their model choices), each twice; then the
# horizon in seconds
@pytest.mark.parametrize("cases,seconds", [
    ((("thesis", dict(policy="rl", load=0.95, buffer_per_class_pkts=15, tcp="cubic")),
      ("thesis", dict(policy="static-bdp", alpha=[0.3, 0.2], load=0.9, arrival="thesis-code"))), 10.0),
    ((("long", dict(long_flows=16, buffer_bdp=0.25, tcp="cubic")),), 3.0),
    ((("dumbbell", dict(rate_bps=1e9, cdf="websearch", pkts_per_tick=8, load=0.9, buffer_bdp=0.25)),), 1.5),
], ids=["thesis-rl-and-static-bdp", "long16", "dumbbell-1g-k8"])
def test_native_tick_agrees_on_the_scenarios(cases, seconds):
    plist = pad_params([p for scenario, kw in cases for p in [scenarios.params(scenario, **kw)] * 2])
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *plist)
    keys = jnp.concatenate([jax.random.split(jax.random.PRNGKey(3), 2)] * len(cases))
    ref, nat = _run_both(stacked, keys, sim.ticks_for(seconds, plist[0]))
    _assert_equivalent(ref, nat)
    # each scenario (its two runs) sent packets and dropped some
    deq = np.asarray(ref.metrics.deq_total).reshape(len(cases), -1).sum(-1)
    drops = np.asarray(ref.metrics.drop_total).reshape(len(cases), -1).sum(-1)
    assert (deq > 1000).all() and (drops > 0).all(), (deq, drops)


def test_native_conserves_packets_and_is_deterministic():
    stacked, configs = random_configs(6, seed=7, pkts_per_tick=2)
    keys = jax.random.split(jax.random.PRNGKey(5), len(configs))
    init = jax.vmap(sim.init)(keys, stacked)
    n = 3000

    def one(s, p):
        s = backends.run(s, p, n, backend="native")[0]
        return s, sim.on_wire(s, p)

    s, wire = jax.jit(jax.vmap(one))(init, stacked)
    m = s.metrics
    queued = jnp.sum(s.queue.pkts, axis=-1)
    np.testing.assert_array_equal(m.tx_total, m.drop_total + queued + m.deq_total)
    np.testing.assert_array_equal(m.deq_total, m.sink_total + wire)
    assert int(jnp.min(m.tx_total)) > 0 and int(jnp.sum(m.drop_total)) > 0
    # the same envs again, one at a time (another batch size, another compilation): identical
    pick = lambda tree, i: jax.tree.map(lambda x: x[i], tree)
    for i in (0, 3):
        alone, _ = jax.jit(one)(pick(init, i), pick(stacked, i))
        for (name, a), (_, b) in zip(native.state_leaves(alone), native.state_leaves(pick(s, i))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_native_results_do_not_depend_on_threads(monkeypatch):
    stacked, configs = random_configs(5, seed=3)
    keys = jax.random.split(jax.random.PRNGKey(9), len(configs))
    init = jax.vmap(sim.init)(keys, stacked)
    out = []
    for threads in ("1", "3"):
        monkeypatch.setenv(native.THREADS_VAR, threads)
        out.append(jax.jit(jax.vmap(lambda s, p: backends.run(s, p, 1500, backend="native")[0]))(init, stacked))
    for (name, a), (_, b) in zip(native.state_leaves(out[0]), native.state_leaves(out[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    monkeypatch.setenv(native.THREADS_VAR, "none")
    with pytest.raises(ValueError, match=native.THREADS_VAR):
        native.threads()


def test_native_run_compiles_once():
    p = scenarios.params("thesis")
    traces = []

    def advance(s):
        traces.append(1)
        return backends.run(s, p, 50, backend="native")[0]

    f = jax.jit(advance)
    s = sim.init(jax.random.PRNGKey(0), p)
    for _ in range(3):
        s = f(s)
    assert len(traces) == 1 and int(s.tick) == 150


def test_auto_backend_choice_and_refusals():
    p = scenarios.params("thesis")
    s = sim.init(jax.random.PRNGKey(0), p)
    assert backends.resolve("auto", p) == "native"
    # a per-tick trace needs the JAX tick: auto takes it, native refuses
    assert backends.resolve("auto", p, trace=True) == "jax"
    with pytest.raises(ValueError, match="trace_fn"):
        backends.run(s, p, 5, trace_fn=lambda s: s.tick, backend="native")
    with pytest.raises(ValueError, match="backend"):
        backends.run(s, p, 5, backend="fortran")
    big = make_params(pkts_per_tick=native.MAX_PKTS_PER_TICK + 1)
    assert backends.resolve("auto", big) == "jax"
    with pytest.raises(ValueError, match=f"pkts_per_tick={native.MAX_PKTS_PER_TICK + 1}"):
        backends.run(sim.init(jax.random.PRNGKey(0), big), big, 1, backend="native")


def test_a_registered_policy_runs_on_the_jax_tick(monkeypatch):
    monkeypatch.setattr(buffer, "_REGISTRY", list(buffer._REGISTRY))
    monkeypatch.setattr(buffer, "POLICY_NAMES", buffer.POLICY_NAMES)
    monkeypatch.setattr(buffer, "DEFAULT_ALPHA", dict(buffer.DEFAULT_ALPHA))
    buffer.register_policy("half-cap", lambda v, p: 0.5 * p.class_cap_pkts.astype(jnp.float32))
    p = make_params(policy="half-cap", load=0.9)
    assert backends.resolve("auto", p) == "jax"
    with pytest.raises(ValueError, match="half-cap"):
        backends.run(sim.init(jax.random.PRNGKey(0), p), p, 1, backend="native")
    # traced params that might name it: auto keeps to the JAX tick, and the result is its
    s = jax.jit(lambda p: backends.run(sim.init(jax.random.PRNGKey(0), p), p, 300)[0])(p)
    assert int(s.tick) == 300 and int(jnp.max(s.queue.pkts)) <= 50


def test_build_is_cached_and_keyed_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBM_JAX_CACHE", str(tmp_path))
    path = native.build()
    assert path.exists() and path.is_relative_to(tmp_path)
    mtime = path.stat().st_mtime_ns
    assert native.build() == path and path.stat().st_mtime_ns == mtime  # cached, not rebuilt
    assert "L_flows_ints" in native.layout_header() and "FI_cwnd_cnt" in native.layout_header()
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(native.NativeUnavailable, match="compiler"):
        native.build()


def test_simulate_backend_flag_and_record(tmp_path, monkeypatch):
    import json

    from rlbm_jax.cli import simulate

    monkeypatch.setattr(backends, "_default", None)  # the flag sets the process default: undone after
    out = {}
    for b in ("jax", "native"):
        path = tmp_path / f"{b}.json"
        assert simulate.main(["--scenario", "thesis", "--seconds", "3", "--seeds", "2", "--load", "0.9",
                              "--backend", b, "--json", str(path), "--no-progress"]) == 0
        out[b] = json.loads(path.read_text())
        assert out[b]["backend"] == b and backends.default() == b
    # simulate.py folds the params in as constants, where XLA rounds a few divisions of the
    # JAX tick otherwise than with params passed in (docs/DESIGN.md, "Backends"): the two
    # runs are the same scenario, the same flows, to within rounding
    started = {b: [r["flows_started"] for r in out[b]["per_seed"]] for b in out}
    assert started["jax"] == started["native"]
    for key in ("drop_rate", "queue_mean_pkts", "util_wire"):
        np.testing.assert_allclose(out["native"][key], out["jax"][key], rtol=0.05, err_msg=key)
    assert out["native"]["flows_started"] > 0 and out["native"]["drop_rate"] > 0
