"""A study, declared: what is learned (env formulation, scenario configurations, recipes),
what it is judged against (baselines, each a family of variants), on which seeds, by which
metrics.  `rlbm_jax.study.pipeline` runs every stage of every declared study alike.

A declaration is a module of `rlbm_jax.studies` whose `STUDY` is a `Study`; the module's
name is the study's name on the command line (`scripts/study.py NAME STAGE`).

Shapes: every configuration of a study (training, selection, test) must batch with the
others (the same static sizes: flow slots, buffer ring, capacity rows, delay line); a
configuration is a dict of `make_params` arguments.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Callable

from rlbm_jax.study.protocol import Seeds


@dataclasses.dataclass(frozen=True)
class Baseline:
    """One variant of a baseline family.  `overrides`: make_params arguments it changes on
    a configuration (a dict, or a function of the configuration's arguments: an AQM threshold
    from the buffer); `actor`: None (the switch's own policy acts; the action is ignored) or
    an actor of `rlbm_jax.study.rollout` (a rule that sets the knob each step), with its
    first carry `carry0`.  `fit`: None, or a baseline trained before it runs (a supervised
    predictor): fit(seeds) -> (its actor's args besides carry0, a JSON record of the fit),
    deterministic, called by every stage that scores the baseline with `fit_seeds`, which
    must be declared training seeds of the study; the record goes into the ledger."""

    name: str
    family: str
    overrides: dict | Callable[[dict], dict] = dataclasses.field(default_factory=dict)
    actor: Callable | None = None
    carry0: Any = ()
    fit: Callable | None = None
    fit_seeds: tuple = ()

    def __post_init__(self):
        if self.fit is not None and (self.actor is None or not self.fit_seeds):
            raise ValueError(f"baseline {self.name}: a fitted baseline needs its actor and its fit_seeds")

    def kw(self, config: dict) -> dict:
        ov = self.overrides(config) if callable(self.overrides) else self.overrides
        return {**config, **ov}


@dataclasses.dataclass(frozen=True)
class Study:
    """A study's declaration.

    name, title          its name (the module's) and a one-line title for reports
    formulation          the env formulation the agent acts on (`rlbm_jax.env.formulations`)
    step_s, episode_s    the agent's interval and a training episode's length
    recipes              {recipe name: PPO settings (`PPOConfig` fields)}; the first is the default
    train_configs        () -> [configuration]: the training mix (one drawn per episode); with
                         `train_env`, the configurations its draws span (recorded)
    selection_configs    () -> {label: configuration}: where baselines and recipes are chosen
    test_configs         () -> {label: configuration}: the verdict's configurations
    baselines            () -> [Baseline]: every variant tried; one per family is chosen
    seeds                the declared `Seeds` (train, selection, test), disjoint
    eval_s, warmup_s     an evaluation run's length and the part left out of every score
    metrics              {summary field: True if higher is better}: the operator metrics
                         reported beside the reward (`metrics.summarize`'s fields, or a
                         `step_record` name)
    reward_scale         what PPO's reward is multiplied by (the evaluation scores the env's own)
    run_kw               (label, configuration, seed) -> configuration: a run's own changes
                         (where in a trace it starts); default none
    step_record, traces  extra per-step scalars of the rollout (`rollout.rollout_fn`)
    train_env            None, or (episode_s) -> (env, env params): a training env of the study's
                         own (a scenario randomised at reset) in place of the mix of
                         train_configs; `train_draws` says what it draws (recorded by `train`)
    legacy_runs          {folder under the source tree: recipe name}: committed training runs
                         made by the study's own script before the kit (their config.json
                         names no study or recipe), so that select, test and export take
                         them; the recipe is the declared one they trained (their own
                         config.json's PPO settings are what is loaded)
    ns3                  None, or "module:function" of the study's judging inside ns-3:
                         function(config) -> exit code, config = the `ns3` stage's (the run,
                         its exported policies, the chosen baselines, seeds, jobs, out_dir);
                         imported when the stage runs (a script's module may hold it)
    ns3_markdown         None, or "module:function" that renders a judging's ns3/results.json
                         as its RESULTS.md: (the results.json record) -> text; `report`
                         writes <results>/ns3/RESULTS.md again with it, so the ns-3 table
                         too is made from a committed file
    agent                how the agent is trained, loaded and exported (`rlbm_jax.study.agents`:
                         an AgentKind; None is PPO, `agents.PPO`)
    ticks_per_step       > 0: the agent's interval is that many ticks (a packet-timed study,
                         whose interval in seconds differs by configuration), not step_s
    run_steps            None, or (configuration, seconds) -> the steps of an evaluation run of
                         that length (a packet-timed study); a run then scores its own steps, and
                         warmup_s must be 0; default round(seconds / step_s)
    step_max             names of step_record scored by their largest value over the run's
                         scored steps, not their mean
    recorded             names of step_record written to selection.csv and runs.csv beside the
                         judged metrics, not judged (what a study's report reads)
    report_extra         None, or (runs.csv rows, the test's config, results folder) ->
                         markdown lines the report appends (it may write a figure there)
    score                None, or (a run's results, its configuration) -> the run's reward: an
                         objective of the run's summary (a tuner's: utilisation and queue) in
                         place of the mean of the env's reward over the scored steps
    record_metrics       None, or (an interval's record, env params) -> {name: float32 []}: step_record's
                         metrics computed from the record alone, so that a simulator that writes
                         records (ns-3: `rlbm_jax.study.ns3_sender`) is scored by the same function
    """

    name: str
    title: str
    formulation: Any
    step_s: float
    episode_s: float
    recipes: dict
    train_configs: Callable[[], list]
    selection_configs: Callable[[], dict]
    test_configs: Callable[[], dict]
    baselines: Callable[[], list]
    seeds: Seeds
    eval_s: float
    warmup_s: float
    metrics: dict = dataclasses.field(default_factory=lambda: {"util_wire": True, "drop_rate": False})
    reward_scale: float = 1.0
    run_kw: Callable | None = None
    step_record: Callable | None = None
    traces: tuple = ()
    train_env: Callable | None = None
    train_draws: dict = dataclasses.field(default_factory=dict)
    legacy_runs: dict = dataclasses.field(default_factory=dict)
    ns3: str | None = None
    ns3_markdown: str | None = None
    agent: Any = None
    ticks_per_step: int = 0
    run_steps: Callable | None = None
    step_max: tuple = ()
    recorded: tuple = ()
    report_extra: Callable | None = None
    score: Callable | None = None
    record_metrics: Callable | None = None

    def __post_init__(self):
        if not self.recipes:
            raise ValueError(f"study {self.name}: no recipe declared")
        if not self.eval_s > self.warmup_s >= 0:
            raise ValueError(f"study {self.name}: eval_s ({self.eval_s}) must exceed warmup_s ({self.warmup_s}) >= 0")
        for k in (self.step_s, self.episode_s):
            if not k > 0:
                raise ValueError(f"study {self.name}: step_s and episode_s must be positive")
        if self.train_env is not None and not self.train_draws:
            raise ValueError(f"study {self.name}: a train_env needs its train_draws (what it draws, for the record)")
        for run, recipe in self.legacy_runs.items():
            if recipe not in self.recipes:
                raise ValueError(f"study {self.name}: legacy run {run} names recipe {recipe!r}, not declared")
        if self.run_steps is not None and self.warmup_s != 0:
            raise ValueError(f"study {self.name}: a study that counts its runs' steps itself (run_steps) has no "
                             f"warm-up (warmup_s 0, got {self.warmup_s})")
        extra = set(self.step_max) | set(self.recorded)
        if extra and self.step_record is None:
            raise ValueError(f"study {self.name}: step_max and recorded name step_record's scalars; it has none")

    @property
    def agent_kind(self):
        """How the study's agent is trained and loaded (`rlbm_jax.study.agents`)."""
        if self.agent is not None:
            return self.agent
        from rlbm_jax.study.agents import PPO

        return PPO

    def steps(self, config: dict, seconds: float) -> int:
        """The agent steps of an evaluation run of `seconds` on `config`."""
        if self.run_steps is not None:
            return int(self.run_steps(config, seconds))
        return int(round(seconds / self.step_s))

    def make_env(self, sim_params, episode_s: float | None = None, driven: bool = True):
        """The env of one configuration at the study's interval (`driven` False: a sender
        formulation's baseline, no agent acting, `RLBMEnv`)."""
        from rlbm_jax.env.rlbm_env import RLBMEnv

        return RLBMEnv(sim_params, formulation=self.formulation, agent_interval_s=self.step_s,
                       episode_s=self.episode_s if episode_s is None else episode_s,
                       ticks_per_step=self.ticks_per_step, driven=driven)

    def eval_env(self, sim_params, steps: int):
        """The env of an evaluation run of `steps` steps (its episode one step longer: no
        truncation inside the run)."""
        return self.make_env(sim_params, (steps + 1) * self.step_s)

    def undriven_env(self, sim_params, steps: int):
        """`eval_env` with no agent acting: a sender study's baseline that is the agent flow's
        own TCP (any, BBR included), scored by the formulation on the agent flow's record."""
        return self.make_env(sim_params, (steps + 1) * self.step_s, driven=False)

    def baseline_map(self) -> dict:
        out = {}
        for b in self.baselines():
            if b.name in out:
                raise ValueError(f"study {self.name}: baseline {b.name!r} declared twice")
            out[b.name] = b
        return out

    def run_config(self, label: str, config: dict, seed: int) -> dict:
        return self.run_kw(label, config, seed) if self.run_kw is not None else dict(config)


STUDIES_PACKAGE = "rlbm_jax.studies"


def names() -> list[str]:
    """The declared studies: the modules of `rlbm_jax.studies`."""
    pkg = importlib.import_module(STUDIES_PACKAGE)
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def get(name: str) -> Study:
    """The study declared by `rlbm_jax.studies.<name>` (a ValueError names the declared ones)."""
    known = names()
    if name not in known:
        raise ValueError(f"study {name!r}: no such declaration; declared: {', '.join(known) or 'none'}")
    mod = importlib.import_module(f"{STUDIES_PACKAGE}.{name.replace('-', '_')}")
    study = getattr(mod, "STUDY", None)
    if not isinstance(study, Study):
        raise ValueError(f"{mod.__name__} declares no STUDY (a rlbm_jax.study.Study)")
    if study.name != name:
        raise ValueError(f"{mod.__name__}: STUDY.name is {study.name!r}; it must be the module's name {name!r}")
    return study
