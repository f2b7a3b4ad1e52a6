"""What LFQ's A/B fork costs: one forked iteration's rollout (B flows as [B, 2] envs, both
copies stepped by one vmapped env step, `rlbm_jax.lfq.study.rollout`) timed against the same
B flows unforked ([B] envs, `deploy`) and against 2B flows unforked, over the same steps,
on whatever device JAX finds.  A forked step that costs about one batched step of B flows
(ratio near 1) is the fork done the JAX way; 2 would be two simulations.

    python scripts/bench_lfq.py                       # 16 flows, 200 steps
    python scripts/bench_lfq.py --flows 256 1024 4096 # on an accelerator
"""
from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp

from rlbm_jax import jsonio
from rlbm_jax.cli import fail, parser, printed_config

PROG = "bench_lfq.py"


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--flows", type=int, nargs="+", default=[16], help="flows per batch (B)")
    ap.add_argument("--steps", type=int, default=200, help="agent steps timed (10 packet slots each)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per case (the best is kept)")
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return ap


def run_config(a) -> dict:
    if any(f < 1 for f in a.flows) or a.steps < 1 or a.repeats < 1:
        raise ValueError("--flows, --steps and --repeats must be >= 1")
    return {"flows": list(a.flows), "steps": a.steps, "repeats": a.repeats, "json": a.json,
            "config": "(15 Mbit/s, 15 ms, NewReno) and (7 Mbit/s, 22 ms, CUBIC) alternating; fork at step steps/2"}


def _best(fn, repeats):
    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cfg = run_config(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    from rlbm_jax.lfq import study as S
    env, net = S.make_env(), S.CapNet()
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, len(S.OBS_SCALE))))
    params = jax.tree.map(lambda x: x * 0.0, params)
    params["params"]["Dense_3"]["bias"] = jnp.full((1,), 3.0)  # a cap of 30 packets
    steps = cfg["steps"]
    rows = []
    print(f"device: {jax.devices()[0].device_kind}; {steps} steps of 10 packet slots")
    for B in cfg["flows"]:
        base = [(15.0, 15.0, "newreno"), (7.0, 22.0, "cubic")]
        sims1 = S.config_params([base[i % 2] for i in range(B)])
        sims2 = S.config_params([base[i % 2] for i in range(2 * B)])
        n1, n2 = jnp.full((B,), steps, jnp.int32), jnp.full((2 * B,), steps, jnp.int32)
        fork = jnp.full((B,), steps // 2, jnp.int32)
        key = jax.random.PRNGKey(1)
        forked = jax.jit(lambda: S.rollout(env, net, params, key, sims1, n1, fork, steps))
        plain = jax.jit(lambda: S.deploy(env, lambda o: net.apply(params, o), key, sims1, n1, steps))
        double = jax.jit(lambda: S.deploy(env, lambda o: net.apply(params, o), key, sims2, n2, steps))
        t_f, t_1, t_2 = (_best(f, cfg["repeats"]) for f in (forked, plain, double))
        row = {"flows": B, "forked_s": t_f, "unforked_s": t_1, "unforked_2x_s": t_2, "forked_over_unforked": t_f / t_1,
               "forked_over_2x": t_f / t_2}
        rows.append(row)
        print(f"B={B:6d}  forked [B,2] {t_f:8.3f} s   unforked [B] {t_1:8.3f} s   unforked [2B] {t_2:8.3f} s   "
              f"forked/unforked {t_f / t_1:5.2f}   forked/2B {t_f / t_2:5.2f}")
    if cfg["json"]:
        jsonio.write(cfg["json"], {"config": cfg, "device": jax.devices()[0].device_kind, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
