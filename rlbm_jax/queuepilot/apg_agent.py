"""Analytic policy gradients (`rlbm_jax.apg`) as the study kit's `AgentKind`
(`rlbm_jax.study.agents`): QueuePilot's marking policy, a deterministic MLP
(`QueuePilot-continuous-v0`), trained by backpropagating rollouts of the fluid model, one
training seed after another; deployed on the packet simulator as an actor; exported as an
"mlp" policy directory and ONNX graph (`policy_seed<s>/`, `policy_seed<s>.onnx`), each
checked against the JAX network.

The fluid model runs long-lived flows only: the study's training configurations
(`rlbm_jax.studies.queuepilot_apg`) are QueuePilot's mix without web-search flows, each at
several start spreads, grouped here by what the fluid model holds static (flow count,
TCP).  A run's settings (`apg` of its config.json) are `apg.APGConfig`'s fields (`--updates`:
its updates, `--lr`: its learning rate).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import apg
from rlbm_jax.study.agents import refuse_options

EXPORT_TOL = 1e-5  # the largest |ONNX - JAX| marking probability an export accepts


def policy_dir(run, seed) -> Path:
    return Path(run) / f"policy_seed{seed}"


def apg_actor(args, carry, obs, state, first, ep):
    """The APG policy (stateless): the marking probability of the observation."""
    return carry, apg.act(args["weights"], obs)


def _config(settings: dict, seed: int = 0) -> apg.APGConfig:
    keys = {f.name for f in dataclasses.fields(apg.APGConfig)} - {"seed"}
    unknown = sorted(set(settings) - keys)
    if unknown:
        raise ValueError(f"apg settings: unknown {unknown}; APGConfig has {sorted(keys)}")
    return apg.APGConfig(**{k: tuple(v) if k == "hidden" else v for k, v in settings.items()}, seed=seed)


def fluid_groups(study):
    """[(FluidEnv, its EnvParams, stacked SimParams)] of the study's training configurations,
    one group per (TCP, flow count)."""
    from rlbm_jax.env.fluid_env import FluidEnv
    from rlbm_jax.env.params import make_params, stack_params

    by = {}
    for kw in study.train_configs():
        p = make_params(**kw)
        by.setdefault((kw.get("tcp"), int(p.long_flows)), []).append(p)
    out = []
    for plist in by.values():
        batch = stack_params(plist)
        env = FluidEnv(plist[0], study.formulation.id, agent_interval_s=study.step_s, episode_s=study.episode_s,
                       batch=batch)
        out.append((env, env.default_params, batch))
    return out


class APGAgent:
    name = "apg"
    settings_key = "apg"
    updates_key = "updates"
    options = {"lr": "lr"}
    # a run of scripts/train_apg.py before the kit: its seeds under training_seeds
    legacy_required = ("apg", "training_seeds")

    def legacy(self, cfg: dict) -> dict:
        return {**cfg, "seeds": list(cfg["training_seeds"])}

    def settings(self, recipe: dict, updates: int, overrides: dict) -> dict:
        refuse_options(self, overrides)
        s = {**recipe, **{self.options[k]: v for k, v in overrides.items() if v is not None}}
        if updates is not None:
            s["updates"] = updates
        c = _config(s)  # refuses a bad value by name
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in c.__dict__.items() if k != "seed"}

    def train(self, study, cfg: dict, run: Path) -> dict:
        from rlbm_jax.onnx_policy import to_onnx
        from rlbm_jax.progress import Progress
        from rlbm_jax.study.trainer import write_rows

        groups = fluid_groups(study)
        rows, summary = [], {}
        for s in cfg["seeds"]:
            c = _config(cfg["apg"], int(s))
            bar = Progress(c.updates, unit=" updates", label=f"{study.name} APG seed {s} ")
            r = apg.train(groups, c, progress=bar)
            bar.close()
            apg.save(policy_dir(run, s), r["weights"], groups[0][0],
                     extra={"trainer": "apg", "apg": cfg["apg"], "seed": int(s), "study": study.name})
            to_onnx(policy_dir(run, s), Path(run) / f"policy_seed{s}.onnx", agent_interval_s=self._interval(groups))
            rows += [{"seed": int(s), **x} for x in r["curve"]]
            summary[int(s)] = {k: r[k] for k in ("env_steps", "num_envs", "wall_s", "compile_s")}
        write_rows(Path(run) / "metrics.csv", rows)
        plot_curves(rows, Path(run) / "curves.png")
        return {"run_dir": str(run), "updates": cfg["apg"]["updates"], "per_seed": summary}

    @staticmethod
    def _interval(groups) -> float:
        """The interval the envs ran (whole ticks), which the ONNX judges check against theirs."""
        return float(np.max(np.asarray(groups[0][0].default_params.agent_interval_s)))

    def weights_missing(self, run: Path, cfg: dict) -> list:
        return [s for s in cfg["seeds"] if not (policy_dir(run, s) / "policy.npz").is_file()]

    @staticmethod
    def _weights(run, s):
        from rlbm_jax.policy import read_policy

        arrays, _ = read_policy(policy_dir(run, s))
        return [(jax.numpy.asarray(w), jax.numpy.asarray(b)) for w, b in arrays]

    def policies(self, study, run: Path, cfg: dict):
        seeds = [int(s) for s in cfg["seeds"]]
        return apg_actor, [(s, {"weights": self._weights(run, s), "carry0": ()}) for s in seeds], cfg["apg"]["updates"]

    def export(self, study, run: Path, cfg: dict, log=print) -> list:
        """Each seed's ONNX graph written again from its policy directory and checked against
        the JAX network on 256 observations (the formulation's fields at 0-2 x their scale)."""
        from rlbm_jax.onnx_policy import load_checked, to_onnx

        out = []
        for s in cfg["seeds"]:
            path = Path(run) / f"policy_seed{s}.onnx"
            to_onnx(policy_dir(run, s), path, agent_interval_s=study.step_s)
            fn, _ = load_checked(path, formulation=study.formulation.id)
            w = self._weights(run, s)
            obs = np.random.default_rng(int(s)).uniform(0.0, 2.0, (256, w[0][0].shape[0])).astype(np.float32)
            err = float(np.max(np.abs(np.asarray(fn(obs)) - np.asarray(apg.act(w, obs)))))
            ok = err <= EXPORT_TOL
            log(f"seed {s}: wrote {path} (largest |onnx - jax| marking probability {err:.2e})"
                + ("" if ok else "  MISMATCH"))
            out.append({"seed": int(s), "onnx": str(path), "max_abs_err": err, "tol": EXPORT_TOL, "ok": ok})
        return out


APG = APGAgent()


def plot_curves(rows, path) -> None:
    from rlbm_jax.study.trainer import plot_seed_series

    plot_seed_series(rows, path, x="env_steps", series=[("reward", "reward (fluid)", "-"), ("surrogate", "surrogate", ":")],
                     xlabel="fluid env steps", ylabel="mean reward per step (fluid rollouts)",
                     title="APG through the fluid model")
