import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# One persistent XLA compilation cache for the session, this process and the scripts the
# tests start (they inherit the environment): many tests compile the same computations (the
# tick, the trainer) through different jit wrappers or in fresh processes, and a hit skips
# the compile.  Keyed by XLA on the computation and the compile options, so it changes no
# result; emptied when the session ends.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _XLA_CACHE = tempfile.mkdtemp(prefix="rlbm_jax_test_xla_cache_")
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
    os.environ.update(JAX_COMPILATION_CACHE_DIR=_XLA_CACHE, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

# The suite compiles with XLA:CPU's loop emitters for fusions in place of its fusion emitters
# (this process and the scripts it starts): a compilation of the tick takes a third less time,
# and compiling is two thirds of the suite (docs/BENCHMARKS.md).  The two give the same
# integer state; floats may differ in their last bits (the order of a fused reduction), and
# no test asserts closer than that except against a run compiled the same way.
# `test_compile_mode.py` holds the two modes equal on one scenario.  A user's XLA_FLAGS that
# names the switch is kept.
SUITE_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "").strip(), SUITE_XLA_FLAG]).strip()

from rlbm_jax.env import make_params
from rlbm_jax.env.params import pad_params, stack_params


AQM_POLICIES = ("red", "ared", "pie", "codel", "fq-codel")


def random_configs(n: int, seed: int, aqm: bool | tuple = False, **static):
    """n parameter sets with random dynamic values and identical static shapes, stacked
    along a leading axis (for vmap; static sizes padded to the largest, `stack_params`), plus
    the list of unbatched sets.  With `aqm`, every set runs an AQM (RED, ARED, PIE, CoDel or
    FQ-CoDel, or the policies `aqm` names, with random settings, in turn), every other one
    with ECN (half of those with ns-3.37's CWR entries, `ecn_cwr`), every third one with
    ns-3.37's PRR arithmetic, every other one with its PRR reduction bound (`prr_ssrb`)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        caps = rng.integers(5, 120, size=static.get("num_classes", 2))
        extra = {}
        if aqm:
            lo = float(rng.uniform(2, 20))
            policies = AQM_POLICIES if aqm is True else tuple(aqm)
            # (an odd number of policies meets ECN and ns-3.37's CWR entries in turn; an even one
            # is taken a round at a time so that each policy meets each)
            j = i if len(policies) % 2 else i // len(policies)
            extra = dict(policy=policies[i % len(policies)], ecn=bool(j % 2),
                         red_min_th_pkts=lo, red_max_th_pkts=lo * float(rng.uniform(1.5, 4)),
                         red_max_p=float(rng.uniform(0.02, 0.5)), pie_target_s=float(rng.uniform(0.002, 0.02)),
                         codel_target_s=float(rng.uniform(0.001, 0.01)),
                         codel_interval_s=float(rng.uniform(0.02, 0.1)),
                         prr="ns-3.37" if i % 3 == 0 else "exact",  # (drawing nothing: the other draws stay)
                         ecn_cwr="ns-3.37" if j % 4 == 1 else "open",
                         prr_ssrb="ns-3.37" if i % 2 == 0 else "rfc6937")
        out.append(make_params(
            num_senders=static.get("num_senders", 4), num_classes=static.get("num_classes", 2),
            num_flow_slots=static.get("num_flow_slots", 12), pkts_per_tick=static.get("pkts_per_tick", 1),
            queue_capacity_pkts=120, delay_line_ticks=static.get("delay_line_ticks", 80),
            completion_log_size=64,
            access_rate_bps=float(rng.choice([20e6, 100e6, 1e9])),
            access_delay_s=float(rng.uniform(0, 1e-3)),
            bottleneck_rate_bps=10e6, bottleneck_delay_s=float(rng.uniform(1e-3, 15e-3)),
            buffer_per_class_pkts=caps.tolist(), buffer_pkts=int(rng.integers(10, caps.sum() + 1)),
            policy=extra.pop("policy", str(rng.choice(["droptail", "sb-naive", "sb-sophisticated", "dt", "abm"]))),
            scheduler=str(rng.choice(["rr", "strict"])), tcp=str(rng.choice(["newreno", "cubic"])),
            delayed_ack=int(rng.choice([1, 2])), initial_cwnd_pkts=int(rng.integers(1, 20)),
            min_rto_s=float(rng.choice([0.01, 0.2])), load=float(rng.uniform(0.3, 1.5)),
            long_flows=int(rng.integers(1, 4)), class_threshold_bytes=float(rng.choice([5e4, 2e6])),
            cdf=str(rng.choice(["websearch", "datamining"])),
            rto_recovery=str(rng.choice(["go-back-n", "go-back-n", "sack"])),
            rtt_samples=str(rng.choice(["cumulative", "every-ack"])),
            rto_rearm=str(rng.choice(["cumulative", "any-ack"])),
            **extra,
        ))
    out = pad_params(out)  # one static record of model choices (the union), the largest rings
    return stack_params(out), out


def flow_reports(plist, seeds, seconds, sample_s=0.05):
    """`simulate.run_scenario(p, seconds=..., seeds=..., flow_sample_s=sample_s)["flows"]` of
    every p in plist (the same tick and long flows), all in one vmapped batch whose params
    are traced (one compilation, where run_scenario compiles each params anew): the long
    flows sampled every sample_s from t = 0, as run_scenario samples them."""
    import jax
    import jax.numpy as jnp

    from rlbm_jax import flowstats
    from rlbm_jax.env import backends, sim

    K, tick_s = int(plist[0].long_flows), float(plist[0].tick_s)
    per = int(round(sample_s / tick_s))
    n = -(-sim.ticks_for(seconds, plist[0]) // per)
    stacked = stack_params([p for p in plist for _ in seeds])
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for _ in plist for s in seeds])
    st = jax.jit(jax.vmap(sim.init))(keys, stacked)

    def step(s, q):
        s = backends.run(s, q, per)[0]
        return s, flowstats.sample(s, K)

    step = jax.jit(jax.vmap(step))
    xs = [np.asarray(jax.jit(jax.vmap(lambda s: flowstats.sample(s, K)))(st), np.float64)]
    for _ in range(n):
        st, x = step(st, stacked)
        xs.append(np.asarray(x, np.float64))
    x = np.stack(xs, axis=1).reshape(len(plist), len(seeds), n + 1, K, -1)
    times = np.arange(n + 1) * per * tick_s
    return [flowstats.summarize(x[i], times, p, seeds=list(seeds)) for i, p in enumerate(plist)]


ROOT = Path(__file__).resolve().parents[1]


def copy_package(tmp_path) -> Path:
    """A copy of the rlbm_jax package under tmp_path (to add a module to, as a user would):
    its folder."""
    pkg = tmp_path / "rlbm_jax"
    shutil.copytree(ROOT / "rlbm_jax", pkg, ignore=shutil.ignore_patterns("__pycache__", "build"))
    return pkg


def run_in_copy(tmp_path, script: str, *args, timeout: float = 900) -> str:
    """Runs `script` in a fresh Python that imports the package copied under tmp_path
    (`copy_package`); returns its stdout, failing the test with its stderr if it fails."""
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def other_value(q):
    """A valid value of `q` other than its default, for the thesis scenario."""
    special = dict(buffer_pkts=150, queue_capacity_pkts=500, flow_queue_capacity_pkts=300, delay_line_ticks=200,
                   red_min_th_pkts=3.0, red_max_th_pkts=30.0, red_weight=0.01, alpha=[2.0, 0.5], beta=[0.5, 0.25],
                   buffer_per_class_pkts=[50, 70], class_threshold_bytes=[1e5], num_classes=3, cdf="datamining",
                   num_senders=12, long_flows=3, num_flow_slots=80, capacity_schedule="step", capacity_rows=8)
    if q.name in special:
        return special[q.name]
    if q.is_choice:
        from rlbm_jax import scenarios

        return next(v for v in q.values() if v != scenarios.thesis().get(q.name, q.default))
    d = float(q.default)
    v = d * 0.5 if q.hi is not None else d * 2 + 1
    return int(v) if q.kind == "int" else v


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_code():
    """After each test file, drop JAX's in-memory compiled code (a worker process runs many
    files one after another; a later file that needs the same computation reads it back
    from the compilation cache on disk), so no worker's memory grows with the suite."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(1234)
