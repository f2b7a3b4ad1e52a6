"""Gradient tuning through the fluid model as a study of the kit: the tuner is the agent
(`FluidTuneAgent`, an `rlbm_jax.study.agents` kind), the knob's grid the baselines.

    train     Adam on the knob through fluid rollouts of the study's cells (`tune.tune_fluid`),
              one run per training seed: seed 0 starts at the knob's starting point, seed s > 0
              at that point moved by a normal draw of `start_jitter` on the knob's logits, so
              the verdict is the recipe's, not one start's; tuned_seed<s>.json holds the
              best iterate
    select    every point of the knob's grid (one family, `grid`) and the starting point
              (`start`) on the packet simulator over the selection seeds: the grid search's
              best point is chosen there, as `scripts/tune_aqm.py` did on its tuning seeds
    test      the tuned points (every training seed) against the grid's best and the start on
              held-out seeds, paired by run
A run's reward is the tuner's objective of its summary (`tune.OBJECTIVES`: utilisation and
mean queue), not an env reward (`Study.score`); the env acts through the switch's own policy
at the tuned values (an agent of no actor: `Study` rollouts take its `overrides`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlbm_jax import tune
from rlbm_jax.env.params import host_params, make_params
from rlbm_jax.study.agents import refuse_options

SETTINGS = ("objective", "delay_weight", "seconds", "warmup_s", "steps", "lr", "grad_horizon_s", "start_jitter")


def tuned_path(run, seed) -> Path:
    return Path(run) / f"tuned_seed{seed}.json"


def _point(knob, values: dict, cell0: dict) -> dict:
    """The tuned values as the grid's unit (a buffer in BDPs of the first cell)."""
    if knob.name == "buffer":
        return {"buffer_bdp": float(values["buffer_pkts"]) / float(host_params(**cell0).bdp_pkts)}
    return {k: float(v) for k, v in values.items()}


class FluidTuneAgent:
    name = "fluid-tune"
    settings_key = "fluid_tune"
    updates_key = "steps"
    options = {"lr": "lr"}

    def __init__(self, knob: str):
        self.knob = tune.KNOBS[knob]

    def settings(self, recipe: dict, updates: int | None, overrides: dict) -> dict:
        refuse_options(self, overrides)
        s = {**recipe, **{self.options[k]: v for k, v in overrides.items() if v is not None}}
        if updates is not None:
            s["steps"] = updates
        unknown = sorted(set(s) - set(SETTINGS))
        if unknown:
            raise ValueError(f"fluid-tune settings: unknown {unknown}; it takes {list(SETTINGS)}")
        if s.get("objective") not in tune.OBJECTIVES:
            raise ValueError(f"objective {s.get('objective')!r}: one of {list(tune.OBJECTIVES)}")
        for k, ok in (("seconds", s["seconds"] > s["warmup_s"] >= 0), ("steps", s["steps"] >= 0),
                      ("lr", s["lr"] > 0), ("start_jitter", s["start_jitter"] >= 0),
                      ("grad_horizon_s", s["grad_horizon_s"] is None or s["grad_horizon_s"] > 0)):
            if not ok:
                raise ValueError(f"fluid-tune setting {k} = {s[k]!r}: out of range (seconds > warmup_s >= 0, steps "
                                 ">= 0, lr > 0, start_jitter >= 0, grad_horizon_s None or > 0)")
        return {k: s[k] for k in SETTINGS}

    def train(self, study, cfg: dict, run: Path) -> dict:
        from rlbm_jax import jsonio
        from rlbm_jax.progress import Progress
        from rlbm_jax.study.trainer import write_rows

        st = cfg[self.settings_key]
        kws = study.train_configs()
        plist = [make_params(**kw) for kw in kws]
        u_start = self.knob.to_u(self.knob.start(plist[0]), self.knob.bounds(plist[0]))
        rows = []
        for s in cfg["seeds"]:
            jitter = np.random.default_rng(int(s)).normal(size=np.shape(u_start)) * st["start_jitter"]
            u0 = np.asarray(u_start) + (jitter if int(s) != 0 else 0.0)
            bar = Progress(st["steps"] + 1, unit=" steps", label=f"{study.name} seed {s} fluid Adam ")
            r = tune.tune_fluid(self.knob, kws, st["objective"], seconds=st["seconds"], warmup_s=st["warmup_s"],
                                steps=st["steps"], lr=st["lr"], grad_horizon_s=st["grad_horizon_s"],
                                delay_weight=st["delay_weight"], progress=bar, u0=u0)
            bar.close()
            jsonio.write(tuned_path(run, s), {"knob": self.knob.name, "seed": int(s), "u0": np.asarray(u0).tolist(),
                                              "best": r["best"], "point": _point(self.knob, r["best"], kws[0]),
                                              "best_objective_fluid": r["best_objective"],
                                              "best_step": r["best_step"], "wall_s": r["wall_s"]})
            rows += [{"seed": int(s), **h} for h in r["history"]]
        write_rows(Path(run) / "metrics.csv", rows)
        _plot(rows, Path(run) / "curves.png")
        return {"run_dir": str(run), "updates": st["steps"]}

    def weights_missing(self, run: Path, cfg: dict) -> list:
        return [s for s in cfg["seeds"] if not tuned_path(run, s).is_file()]

    def _overrides(self, point: dict):
        knob = self.knob

        def overrides(kw: dict) -> dict:
            return knob.packet_kw(point, host_params(**kw))
        return overrides

    def policies(self, study, run: Path, cfg: dict):
        per = []
        for s in cfg["seeds"]:
            point = json.loads(tuned_path(run, s).read_text())["point"]
            per.append((int(s), {"overrides": self._overrides(point), "point": point}))
        return None, per, cfg[self.settings_key]["steps"]

    def export(self, study, run: Path, cfg: dict, log=print) -> list:
        """A tuned point is deployed as its values (tuned_seed<s>.json): each is read back and
        checked to be a configuration the packet simulator takes on every test cell."""
        out = []
        for s in cfg["seeds"]:
            point = json.loads(tuned_path(run, s).read_text())["point"]
            ov = self._overrides(point)
            for kw in study.test_configs().values():
                host_params(**{**kw, **ov(kw)})  # a ValueError names a value the simulator refuses
            log(f"seed {s}: {tuned_path(run, s)}: " + ", ".join(f"{k} {v:.4g}" for k, v in point.items()))
            out.append({"seed": int(s), "point": point, "file": str(tuned_path(run, s)), "ok": True})
        return out


def _plot(rows, path) -> None:
    from rlbm_jax.study.trainer import plot_seed_series

    plot_seed_series(rows, path, x="step", series=[("objective", "", "-")], xlabel="Adam step",
                     ylabel="fluid objective (mean over cells)", title="gradient tuning through the fluid model")


def point_name(knob, point: dict) -> str:
    if knob.name == "buffer":
        return f"buffer-{point['buffer_bdp']:g}bdp"
    return (f"red-min{point['red_min_th_pkts']:.3g}-max{point['red_max_th_pkts']:.3g}-p{point['red_max_p']:g}")


def declare(name: str, knob_name: str, *, flows=(8, 16, 32), buffer_bdp: float = 1.0, seconds: float = 10.0,
            warmup_s: float = 2.0, objective: str = "power", lr: float = 0.2, steps: int = 60,
            grad_horizon_s: float | None = 1.0, axes: dict | None = None, selection=range(10_000, 10_002),
            test=range(20_000, 20_008)):
    """The Study of tuning `knob_name` on long-flow cells (`tune.cells`) against its grid
    (`axes`: the knob's own unless given), scored by `objective`."""
    from rlbm_jax.env import formulations
    from rlbm_jax.study import Baseline, Seeds, Study

    knob = tune.KNOBS[knob_name]
    axes = {k: tuple(v) for k, v in (axes or knob.axes).items()}

    def cells() -> list:
        return tune.cells(knob, flows, buffer_bdp, warmup_s)

    def configs() -> dict:
        return {f"{int(kw['long_flows'])} flows": kw for kw in cells()}

    def baselines() -> list:
        p0 = host_params(**cells()[0])
        out = [Baseline("start", "start", {})]
        for pt in knob.grid(p0, axes):
            out.append(Baseline(point_name(knob, pt), "grid",
                                (lambda pt: lambda kw: knob.packet_kw(pt, host_params(**kw)))(pt)))
        return out

    def score(result: dict, kw: dict) -> float:
        return float(tune.OBJECTIVES[objective](float(result["util_wire"]), float(result["queue_mean_pkts"]),
                                                host_params(**kw), 1.0))

    return Study(
        name=name, title=f"{knob.name} tuned by gradient through the fluid model, against a packet grid search",
        formulation=formulations.get("QueuePilot-v0"),  # the env steps; the switch's own policy acts (no actor)
        step_s=0.1, episode_s=seconds, recipes={"adam": {"objective": objective, "delay_weight": 1.0,
                                                         "seconds": seconds, "warmup_s": warmup_s, "steps": steps,
                                                         "lr": lr, "grad_horizon_s": grad_horizon_s,
                                                         "start_jitter": 0.5}},
        train_configs=cells, selection_configs=configs, test_configs=configs, baselines=baselines,
        seeds=Seeds(train=range(0, 1000), selection=tuple(selection), test=tuple(test)),
        eval_s=seconds, warmup_s=warmup_s,
        metrics={"util_wire": True, "queue_mean_pkts": False, "drop_rate": False},
        agent=FluidTuneAgent(knob_name), score=score)
