"""Simulator throughput after compilation: simulated seconds per wall second (summed
over envs) and env ticks per second, for several batch sizes.

    python scripts/bench_env.py --scenario thesis --num-envs 1 64 1024 4096 --seconds 2

With --ns3, one ns-3.37 process of the same scenario (`rlbm_jax.ns3.harness.time_ns3`: the same
rate, delays, buffer, TCP, load and flow sizes, flows fed from our schedule for seed 1,
arrivals on for the whole run) is timed from process start to exit over --ns3-seconds
simulated seconds before the batches, and every row gets `x_ns3`, its sim-s / wall-s
over ns-3's: the ratio measured side by side on this machine.  --ns3-rate gives that rate
from an earlier --ns3 run instead (recorded as given, not measured).

    python scripts/bench_env.py --scenario red-ecn --num-envs 512 --seconds 1 --ns3 --ns3-seconds 20

Envs are spread over every local device (one host device per core unless
RLBM_JAX_HOST_DEVICES says otherwise: `rlbm_jax.devices`).
"""
from __future__ import annotations

import math
import os
import platform
import sys
import time

import jax
import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.ns3 import harness as ns3
from rlbm_jax.cli import (add_backend_arg, add_model_args, apply_backend, fail, model_kw, name_flags, param_flags,
                          parser, printed_config)
from rlbm_jax.devices import batched, env_sharding, is_main_process
from rlbm_jax.simulate import check_memory
from rlbm_jax.env import backends, sim
from rlbm_jax.env.params import config_record, make_params

PROG = "bench_env.py"
# what each scenario is benchmarked on: the thesis cell as given, 16 long flows in a quarter BDP, the
# web-search dumbbell at 1 Gbit/s
BENCH = {"thesis": dict(), "long": dict(long_flows=16, buffer_bdp=0.25), "dumbbell": dict(rate_bps=1e9)}
# cells benchmarked under a name of their own: (scenario, its arguments); red-ecn is the AQM studies'
# long-flow cell (8 CUBIC flows with ECN through RED at 50 Mbit/s, a 1-BDP buffer)
BENCH_CELLS = {"red-ecn": ("long", dict(long_flows=8, bottleneck_rate_bps=50e6, buffer_bdp=1.0, policy="red",
                                        ecn=True, tcp="cubic"))}
REPEATS = 2  # timed calls per batch size; the fastest is reported
NS3_SEED = 1  # the seed of the ns-3 reference run
FLUID_RATE_SPREAD = 0.01  # the fluid backend's envs: bottleneck rates within +-1 % (no two the same run)


def scenario_kw(name: str, **overrides) -> dict:
    """The make_params arguments of the benchmarked scenario `name` (`BENCH`, or a cell of
    `BENCH_CELLS`) with overrides."""
    if name in BENCH_CELLS:
        base, kw = BENCH_CELLS[name]
        return scenarios.kw(base, **{**kw, **overrides})
    return scenarios.kw(name, **BENCH.get(name, {}), **overrides)


def ns3_cell(name: str, seconds: float, **model):
    """The ns-3 cell of the benchmarked scenario `name`, timed over `seconds` (`ns3.bench_cell`).
    The scenario binary has no plain fair queue: a run of one flow through "fq" (LFQ's cell)
    is a drop-tail FIFO of the flow's cap there, as LFQ's judging in ns-3 runs it
    (`rlbm_jax.lfq.ns3.cell_kw`)."""
    kw = scenario_kw(name, **model)
    if kw.get("policy") == "fq":
        if int(kw.get("long_flows", 0)) != 1 or float(kw.get("load", 0.0)) > 0:
            raise ValueError("--ns3: the ns-3 scenario has no fair queue; it stands in a drop-tail FIFO of the cap "
                             "for one long-lived flow alone, and this scenario has more")
        size = int(math.floor(float(kw["fq_flow_cap_pkts"])))
        kw = {**kw, "policy": "droptail", "buffer_per_class_pkts": size, "buffer_pkts": size}
    return ns3.bench_cell(name, kw, seconds)


def ns3_reference(name: str, seconds: float, seed: int = 1, **model) -> dict:
    """One ns-3 process of the benchmarked scenario `name`, timed (`ns3.time_ns3`); builds
    the scenario binary first if needed (RuntimeError when that fails)."""
    return ns3.time_ns3(ns3_cell(name, seconds, **model), seed, binary=ns3.build_ns3())


def bench_fluid(params, num_envs: int, seconds: float, repeats: int = REPEATS):
    """`bench` on the fluid backend: `num_envs` runs of `seconds` (each its own bottleneck
    rate, within 1 % of the scenario's) through `fluid.summary`, vmapped over the devices;
    "ticks" are its integration steps."""
    import jax.numpy as jnp

    from rlbm_jax.env.backends import fluid

    rates = float(params.bottleneck_rate_bps) * (1 + FLUID_RATE_SPREAD * jnp.linspace(-1, 1, num_envs))
    cfg = fluid.configure(params, overrides={"bottleneck_rate_bps": np.asarray(rates)},  # its step and rings
                          horizon_s=seconds)
    # with short flows every env draws its own Poisson schedule (its key), as the packet envs do
    args = (rates, jax.random.split(jax.random.PRNGKey(0), num_envs))
    run = batched(lambda rk: fluid.summary(params, seconds, warmup_s=0.0, config=cfg, key=rk[1] if cfg.n_short else None,
                                           overrides={"bottleneck_rate_bps": rk[0]})["util_wire"], num_envs)
    t0 = time.perf_counter()
    compiled = run.lower(args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(args))
        best = min(best, time.perf_counter() - t0)
    n = fluid.steps_for(seconds, cfg)
    return {"num_envs": num_envs, "pkts_per_tick": params.pkts_per_tick, "ticks": n,
            "sim_seconds_per_wall_s": num_envs * seconds / best, "env_ticks_per_s": num_envs * n / best,
            "wall_s": best, "compile_s": compile_s, "devices": len(env_sharding(num_envs).device_set)}


def bench(params, num_envs: int, seconds: float, repeats: int = REPEATS):
    if not backends.BACKENDS[backends.resolve(None, params)].ticks:
        return bench_fluid(params, num_envs, seconds, repeats)
    n = sim.ticks_for(seconds, params)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    state = batched(lambda k: sim.init(k, params), num_envs)(keys)
    step = batched(lambda s: backends.run(s, params, n)[0], num_envs)  # envs over the devices
    t0 = time.perf_counter()
    compiled = step.lower(state).compile()
    compile_s = time.perf_counter() - t0
    state = compiled(state)  # warm-up; the timed runs continue the same trajectories
    jax.block_until_ready(state)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = compiled(state)
        jax.block_until_ready(state)
        best = min(best, time.perf_counter() - t0)
    sim_s = n * float(params.tick_s)
    return {"num_envs": num_envs, "pkts_per_tick": params.pkts_per_tick, "ticks": n,
            "sim_seconds_per_wall_s": num_envs * sim_s / best, "env_ticks_per_s": num_envs * n / best,
            "wall_s": best, "compile_s": compile_s, "devices": len(env_sharding(num_envs).device_set)}


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--scenario", default="thesis", choices=[*scenarios.SCENARIOS, *BENCH_CELLS],
                    help="scenario, or a cell benchmarked under its own name (red-ecn: 8 long CUBIC flows with ECN "
                    "through RED at 50 Mbit/s, a 1-BDP buffer)")
    ap.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096], help="batch sizes")
    ap.add_argument("--pkts-per-tick", type=int, nargs="+", default=[1], help="packets per tick (k)")
    ap.add_argument("--seconds", type=float, default=2.0, help="simulated seconds per timed call")
    ap.add_argument("--json", default=None, help="write results to this path (- for stdout)")
    ap.add_argument("--ns3", action="store_true", help="time one ns-3.37 process of the same scenario and give "
                    "each row's ratio to it (x_ns3)")
    ap.add_argument("--ns3-seconds", type=float, default=20.0, help="simulated seconds of the ns-3 run (its speed follows its realised load: "
                    "a 20 s thesis run holds about 10 flows, so it varies with the seed; longer runs average it)")
    ap.add_argument("--ns3-rate", type=float, default=None, metavar="SIM_S_PER_WALL_S",
                    help="instead of --ns3: ns-3's sim-s / wall-s on this scenario from an earlier --ns3 run on "
                    "this machine (the `ns3` record of its --json output), each row's ratio taken against it")
    add_model_args(ap)
    add_backend_arg(ap, whole_scenarios=True)
    return ap


def plan(a):
    """(run_config(a), {packets per tick: the SimParams benchmarked})."""
    if min(a.num_envs) < 1:
        raise ValueError(f"num_envs must be >= 1, got {a.num_envs}")
    if not a.seconds > 0 or (a.ns3 and not a.ns3_seconds > 0):
        raise ValueError("--seconds and --ns3-seconds must be positive")
    if a.ns3_rate is not None and (a.ns3 or not (math.isfinite(a.ns3_rate) and a.ns3_rate > 0)):
        raise ValueError(f"--ns3-rate takes a positive number of sim-s / wall-s and stands for --ns3 (not with "
                         f"it), got {a.ns3_rate!r}")
    params, config = {}, []
    for k in a.pkts_per_tick:
        kw = scenario_kw(a.scenario, pkts_per_tick=k, **model_kw(a))
        params[k] = make_params(**kw)
        config.append(config_record(kw, params[k]))
        if (a.backend or backends.default()) != "auto":
            backends.resolve(a.backend, params[k])  # a named backend that cannot run it is refused by name
    fluid_run = (a.backend or backends.default()) == "fluid"
    if fluid_run:  # another model: no ticks, so one --pkts-per-tick
        from rlbm_jax.env.backends import fluid

        if a.pkts_per_tick != [1]:
            raise ValueError("the fluid backend has no ticks: --pkts-per-tick takes 1 with --backend fluid")
    ns3_run = None
    if a.ns3:
        cell = ns3_cell(a.scenario, a.ns3_seconds, **model_kw(a))
        ns3_run = {"seconds": a.ns3_seconds, "seed": NS3_SEED, "cell": cell.name, "kind": cell.kind,
                   "config": config_record(cell.kw)}
    elif a.ns3_rate is not None:
        ns3_run = {"cached_sim_seconds_per_wall_s": a.ns3_rate}
    return {"scenario": a.scenario, "num_envs": list(a.num_envs), "pkts_per_tick": list(a.pkts_per_tick),
            "seconds": a.seconds,
            "ticks": [fluid.steps_for(a.seconds, fluid.configure(p, horizon_s=a.seconds)) if fluid_run else sim.ticks_for(a.seconds, p)
                      for p in params.values()],
            **({"fluid_rate_spread": FLUID_RATE_SPREAD} if fluid_run else {}),
            "repeats": REPEATS, "ns3": ns3_run, "json": a.json, "backend": a.backend or backends.default(),
            "config": config}, params


def run_config(a) -> dict:
    """What this benchmark runs (`--print-config` prints it; the --json output holds it):
    the scenario and, per packets-per-tick k, every simulator parameter (`config`:
    `params.config_record`) and the ticks of one timed call; the batch sizes, the ns-3
    reference run, the backend and the output."""
    return plan(a)[0]


def main(argv=None):
    a = build_parser().parse_args(argv)
    flags = {**param_flags(), "num_envs": "--num-envs", "pkts_per_tick": "--pkts-per-tick"}
    try:
        cfg, params = plan(a)
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flags))
    if printed_config(a, cfg):
        return 0
    backend = apply_backend(a)
    rows, ref = [], {}
    if a.ns3 and is_main_process():  # one ns-3 process, also in a multi-process run
        try:
            ref = ns3_reference(a.scenario, a.ns3_seconds, NS3_SEED, **model_kw(a))
        except (RuntimeError, ValueError) as e:
            return fail(PROG, f"--ns3: {e}", 1)
        print(f"{a.scenario} ns-3.37, one process: {ref['ns3_sim_seconds']:g} sim-s in {ref['ns3_wall_s']:.2f} s "
              f"(Simulator::Run {ref['ns3_run_wall_s']:.2f} s, seed {ref['ns3_seed']}, bottleneck utilisation "
              f"{ref['ns3_util_wire']:.2f})  sim-s/wall-s {ref['ns3_sim_seconds_per_wall_s']:9.1f}", flush=True)
    elif a.ns3_rate is not None:
        ref = {"ns3_sim_seconds_per_wall_s": a.ns3_rate, "cached": True}
        print(f"{a.scenario} ns-3.37, one process: sim-s/wall-s {a.ns3_rate:9.1f} (given by --ns3-rate, not "
              "measured in this run)", flush=True)
    try:  # every batch size checked before the first compiles (the packet state's size)
        for k, p in (params.items() if backends.BACKENDS[backends.resolve(None, next(iter(params.values())))].ticks
                     else ()):
            for n in cfg["num_envs"]:
                check_memory(p, n, what="num_envs")
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flags))
    for k, p in params.items():
        for n in cfg["num_envs"]:
            r = bench(p, n, cfg["seconds"], cfg["repeats"])
            r["backend"] = backends.resolve(None, p)
            if ref:
                r["x_ns3"] = r["sim_seconds_per_wall_s"] / ref["ns3_sim_seconds_per_wall_s"]
            rows.append(r)
            print(f"{a.scenario} {r['backend']} k={k:2d} envs={n:5d}  sim-s/wall-s {r['sim_seconds_per_wall_s']:9.1f}  "
                  + (f"x ns-3 {r['x_ns3']:6.1f}  " if ref else "")
                  + f"env-ticks/s {r['env_ticks_per_s']:11.0f}  (compile {r['compile_s']:.1f}s, {r['devices']} "
                  "device(s))", flush=True)
    meta = {"scenario": a.scenario, "backend": backend, "machine": platform.machine(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "command": " ".join(["python", "scripts/bench_env.py"] + (argv if argv is not None else sys.argv[1:]))}
    if a.json and is_main_process():  # a multi-process run: process 0 writes for all
        jsonio.write(a.json, {"meta": meta, "config": cfg, "results": rows, **({"ns3": ref} if ref else {})})
    return 0


if __name__ == "__main__":
    sys.exit(main())
