"""PPO training throughput on the domain-randomised thesis env: env steps per second
and updates per second after compilation, for several env counts.

    python scripts/bench_train.py --num-envs 64 1024 4096
"""
from __future__ import annotations

import os
import platform
import sys
import time

import jax

from rlbm_jax import jsonio
from rlbm_jax.cli import add_backend_arg, apply_backend, fail, flag_of, name_flags, parser, printed_config
from rlbm_jax.cli.train import TRAIN_ENV
from rlbm_jax.env import backends
from rlbm_jax.env.params import config_record
from rlbm_jax.env.randomize import thesis_random_ranges, thesis_randomized_env
from rlbm_jax.ppo import PPO, THESIS_PPO, PPOConfig, memory

PROG = "bench_train.py"


def ppo_config(num_envs: int, num_steps: int, network: str) -> PPOConfig:
    return PPOConfig(**THESIS_PPO, num_envs=num_envs, num_steps=num_steps, network=network)


def make_ppo(num_envs: int, num_steps: int, network: str, pkts_per_tick: int):
    env, ep = thesis_randomized_env(pkts_per_tick=pkts_per_tick, formulation=TRAIN_ENV)
    return PPO(env, ep, ppo_config(num_envs, num_steps, network)), ep


def bench(num_envs: int, num_steps: int, updates: int, network: str, pkts_per_tick: int):
    ppo, ep = make_ppo(num_envs, num_steps, network, pkts_per_tick)
    ts = jax.block_until_ready(ppo.init(jax.random.PRNGKey(0)))  # an allocation that fails is reported here
    t0 = time.perf_counter()
    ts, _ = ppo.run(ts, updates)  # compiles; the timed call continues the same run
    jax.block_until_ready(ts)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ts, _ = ppo.run(ts, updates)
    jax.block_until_ready(ts)
    dt = time.perf_counter() - t0
    steps = updates * num_envs * num_steps
    return {"num_envs": num_envs, "num_steps": num_steps, "updates": updates, "network": network,
            "pkts_per_tick": pkts_per_tick, "env_steps_per_s": steps / dt, "updates_per_s": updates / dt,
            "sim_seconds_per_wall_s": steps * float(ep.env.agent_interval_s) / dt,
            "wall_s": dt, "compile_and_first_s": first_s}


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024, 4096], help="env counts")
    ap.add_argument("--num-steps", type=int, default=32, help="env steps per env per update")
    ap.add_argument("--updates", type=int, default=1, help="updates per timed call")
    ap.add_argument("--network", default="mlp", choices=["mlp", "lstm"], help="actor-critic network")
    ap.add_argument("--pkts-per-tick", type=int, default=1, help="packets per tick (k)")
    ap.add_argument("--json", default=None, help="write results to this path (- for stdout)")
    add_backend_arg(ap)
    return ap


def run_config(a) -> dict:
    """What this benchmark runs (`--print-config` prints it; the --json output holds it):
    the formulation, the randomised env's ranges and every simulator parameter of its
    base configuration (`config`: `params.config_record`), the PPO config of each env
    count, the updates per timed call, the backend and the output."""
    from rlbm_jax.env.presets import thesis

    if a.updates < 1:
        raise ValueError(f"--updates must be >= 1, got {a.updates}")
    ppo = [ppo_config(n, a.num_steps, a.network).validate().to_dict() for n in a.num_envs]
    _, ep = thesis_randomized_env(pkts_per_tick=a.pkts_per_tick, formulation=TRAIN_ENV)
    ranges, ring = thesis_random_ranges()
    kw = thesis(**{"policy": "rl", **ring, "pkts_per_tick": a.pkts_per_tick, "completion_log_size": 16})
    return {"env": TRAIN_ENV, "randomize": ranges, "agent_interval_s": float(ep.env.agent_interval_s),
            "num_envs": list(a.num_envs), "num_steps": a.num_steps, "updates": a.updates, "network": a.network,
            "pkts_per_tick": a.pkts_per_tick, "ppo": ppo, "json": a.json, "backend": a.backend or backends.default(),
            "config": config_record(kw, ep.env.sim)}


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        cfg = run_config(a)
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flag_of(ap)))
    if printed_config(a, cfg):
        return 0
    backend = apply_backend(a)
    try:  # every size checked before the first is compiled
        for n in cfg["num_envs"]:
            note = memory.check(make_ppo(n, a.num_steps, a.network, a.pkts_per_tick)[0])
            if note:
                print(note, file=sys.stderr)
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flag_of(ap)))
    rows = []
    for n in cfg["num_envs"]:
        r = bench(n, a.num_steps, a.updates, a.network, a.pkts_per_tick)
        rows.append(r)
        print(f"envs={n:5d} {a.network} k={a.pkts_per_tick} {backend}  env-steps/s {r['env_steps_per_s']:9.0f}  "
              f"updates/s {r['updates_per_s']:.4f}  (compile+first {r['compile_and_first_s']:.1f}s)", flush=True)
    meta = {"backend": backend, "machine": platform.machine(), "cpus": os.cpu_count(), "devices": [str(d) for d in jax.devices()],
            "jax": jax.__version__,
            "command": " ".join(["python", "scripts/bench_train.py"] + (argv if argv is not None else sys.argv[1:]))}
    if a.json:
        jsonio.write(a.json, {"meta": meta, "config": cfg, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
