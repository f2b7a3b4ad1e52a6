"""LFQ's agent as the study kit's `AgentKind` (`rlbm_jax.study.agents`): the cap network
(`study.CapNet`) trained offline by A/B forking (`study.make_trainer`), one network per
training seed (`trained_seed<s>.msgpack`), deployed as an actor that sets the flow's cap
every step, exported as ONNX (`rlbm_jax.lfq.onnx`).

A run's settings (`ab_fork` of its config.json): alpha (the reward's queue price), flows
per iteration (`study.py lfq train --num-envs`; twice as many envs: the two copies),
iterations (`--updates`), lr (`--lr`), duration_s (each training flow's length is drawn in
it).  `--chunk` is how many iterations pass between two checkpoints of the weights.
"""
from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env.formulations import lfq as lfqf
from rlbm_jax.lfq import study as S
from rlbm_jax.study.agents import refuse_options

EXPORT_TOL_PKTS = 1e-3  # the largest |ONNX cap - JAX cap| an export accepts


def weights_path(run, seed) -> Path:
    return Path(run) / f"trained_seed{seed}.msgpack"


def cap_actor(args, carry, obs, state, first, ep):
    """The trained network's cap (args["params"]), clipped to the action's range."""
    cap = S.CapNet().apply(args["params"], obs[None])[0]
    return carry, jnp.clip(cap, *lfqf.CAP_RANGE_PKTS)[None]


def declared_cap_actor(args, carry, obs, state, first, ep):
    """A baseline's cap: the configuration's own `fq_flow_cap_pkts`, held every step."""
    return carry, jnp.clip(lfqf.initial_cap_pkts(ep), *lfqf.CAP_RANGE_PKTS)[None]


def _check(settings: dict) -> dict:
    tc = S.TrainConfig(alpha=float(settings["alpha"]), flows=int(settings["flows"]),
                       iterations=int(settings["iterations"]), lr=float(settings["lr"]),
                       duration_s=tuple(float(x) for x in settings["duration_s"]))
    for name, v in (("flows", tc.flows), ("iterations", tc.iterations)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if not (np.isfinite(tc.alpha) and tc.alpha >= 0):
        raise ValueError(f"alpha must be a number >= 0, got {tc.alpha}")
    if not (np.isfinite(tc.lr) and tc.lr > 0):
        raise ValueError(f"lr must be positive, got {tc.lr}")
    lo, hi = tc.duration_s
    if not 0 < lo <= hi:
        raise ValueError(f"duration_s must be 0 < low <= high, got {tc.duration_s}")
    return {"alpha": tc.alpha, "flows": tc.flows, "iterations": tc.iterations, "lr": tc.lr,
            "duration_s": list(tc.duration_s), "sim_overrides": dict(settings.get("sim_overrides", {})),
            "network": {"hidden": list(S.CapNet.hidden), "activation": "leaky_relu",
                        "obs_scale": list(S.SIGNAL_SCALE), "out_scale_pkts": S.OUT_SCALE}}


class ABForkAgent:
    name = "lfq-ab-fork"
    settings_key = "ab_fork"
    updates_key = "iterations"
    options = {"num_envs": "flows", "lr": "lr"}
    # a run of scripts/lfq.py before the kit: its settings at the top of its config.json
    legacy_required = ("alpha", "flows", "seeds")

    def settings(self, recipe: dict, updates: int, overrides: dict) -> dict:
        refuse_options(self, overrides)
        s = dict(recipe)
        s.update({self.options[k]: v for k, v in overrides.items() if v is not None})
        if updates is not None:
            s["iterations"] = updates
        return _check(s)

    def train(self, study, cfg: dict, run: Path) -> dict:
        from flax import serialization

        from rlbm_jax.progress import Progress
        from rlbm_jax.study.trainer import write_rows

        st = cfg[self.settings_key]
        tc = S.TrainConfig(alpha=st["alpha"], flows=st["flows"], iterations=st["iterations"], lr=st["lr"],
                           duration_s=tuple(st["duration_s"]), sim_overrides=tuple(st["sim_overrides"].items()))
        init, iteration, _ = S.make_trainer(tc)  # one compilation serves every seed
        rows, done, budget = [], {}, cfg.get("time_budget_s")
        for seed in cfg["seeds"]:
            params, opt = init(jax.random.PRNGKey(seed))
            key = jax.random.PRNGKey(10_000 + seed)
            bar = Progress(tc.iterations, unit="it", label=f"{study.name} seed {seed} ", rate_unit="flows/s",
                           rate_scale=tc.flows)
            t0 = None
            for i in range(tc.iterations):
                params, opt, m = iteration(params, opt, jax.random.fold_in(key, i))
                m = {k: float(v) for k, v in m.items()}
                if t0 is None:
                    t0 = time.time()  # the first iteration of the first seed compiles
                wall = time.time() - t0
                rows.append({"seed": seed, "iteration": i, "flows_seen": (i + 1) * tc.flows, "wall_s": wall, **m})
                bar.update(i + 1, extra=f"cap {m['cap_pkts']:.1f} reward {m['reward']:.3f}")
                last = i + 1 == tc.iterations or (budget is not None and wall > budget)
                if last or (i + 1) % cfg["chunk"] == 0:
                    weights_path(run, seed).write_bytes(serialization.to_bytes(params))
                if last:
                    break
            bar.close()
            done[seed] = i + 1
        write_rows(run / "metrics.csv", rows)
        S.plot_curves(rows, run / "curves.png")
        return {"run_dir": str(run), "updates": min(done.values()), "iterations_per_seed": done}

    def weights_missing(self, run: Path, cfg: dict) -> list:
        return [s for s in cfg["seeds"] if not weights_path(run, s).is_file()]

    def policies(self, study, run: Path, cfg: dict):
        seeds = [int(s) for s in cfg["seeds"]]
        updates = cfg[self.settings_key]["iterations"] if self.settings_key in cfg else cfg.get("iterations")
        return cap_actor, [(s, {"params": S.load_params(weights_path(run, s)), "carry0": ()}) for s in seeds], updates

    def export(self, study, run: Path, cfg: dict, log=print) -> list:
        from rlbm_jax.lfq import onnx as lfq_onnx

        alpha = float(cfg[self.settings_key]["alpha"] if self.settings_key in cfg else cfg["alpha"])
        out = []
        for seed, path, err in lfq_onnx.export_run(run, cfg["seeds"], lfq_onnx.formulation_of(alpha)):
            ok = err <= EXPORT_TOL_PKTS
            log(f"seed {seed}: wrote {path} (largest |onnx - jax| cap {err:.2e} packets)" + ("" if ok else "  MISMATCH"))
            out.append({"seed": int(seed), "onnx": str(path), "max_abs_err_pkts": err, "tol": EXPORT_TOL_PKTS,
                        "ok": ok})
        return out


AB_FORK = ABForkAgent()

