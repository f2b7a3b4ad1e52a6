"""How a study's agent is trained, loaded and exported: an `AgentKind`, declared by the study
(`Study.agent`, default `PPO`).  The pipeline's stages call it and nothing else of the
trainer, so a study whose agent is not a PPO policy (LFQ's cap network, trained offline by
A/B forking) is a declaration like the others.

An agent kind has
    name            what a run's config.json records (`agent`)
    settings_key    where the run's config.json keeps its training settings (`ppo` for PPO)
    options         {option of `study.py NAME train`: the setting it sets} (an option the kind
                    does not list is refused by name when given)
    updates_key     the setting that counts its updates (`--updates`)
    settings(recipe, updates, overrides) -> the run's training settings (checked; JSON);
                    updates None: the recipe's (or the kind's default)
    train(study, cfg, run) -> a summary (`updates`: what was done); writes the run folder
    policies(study, run, cfg) -> (actor, [(training seed, actor args)], updates): each
                    training seed's policy as an actor of `rlbm_jax.study.rollout`; actor None:
                    a tuned configuration, args["overrides"](configuration) -> the make_params
                    arguments it sets, the switch's own policy acting
    export(study, run, cfg, log) -> one record per seed (`ok`: the exported graph agrees
                    with the trained network)
    weights_missing(run, cfg) -> the seeds of a run without weights (a run that has none
                    is judged by no stage)
"""
from __future__ import annotations

import sys
from pathlib import Path

from rlbm_jax.study import trainer

# the options of `study.py NAME train` an agent kind may take (flag: generic name)
OPTIONS = {"--num-envs": "num_envs", "--num-steps": "num_steps", "--lr": "lr"}


def refuse_options(kind, overrides: dict) -> None:
    """A ValueError naming every given option the kind does not take."""
    bad = [f for f, k in OPTIONS.items() if overrides.get(k) is not None and k not in kind.options]
    if bad:
        raise ValueError(f"{', '.join(bad)}: the {kind.name} trainer has no such setting (it takes "
                         f"{', '.join(f for f, k in OPTIONS.items() if k in kind.options) or 'none of them'})")


class PPOAgent:
    """A PPO policy (`rlbm_jax.ppo`) trained from several seeds in one vmapped call on the
    study's training mix; its deterministic action acts."""

    name = "ppo"
    settings_key = "ppo"
    updates_key = "total_updates"
    options = {"num_envs": "num_envs", "num_steps": "num_steps", "lr": "lr"}
    DEFAULT_UPDATES = 200

    def settings(self, recipe: dict, updates: int | None, overrides: dict) -> dict:
        from rlbm_jax.ppo import PPOConfig

        refuse_options(self, overrides)
        ppo = dict(recipe)
        ppo.update({self.options[k]: v for k, v in overrides.items() if v is not None})
        ppo["total_updates"] = updates if updates is not None else recipe.get("total_updates", self.DEFAULT_UPDATES)
        return PPOConfig.from_dict(ppo).to_dict()

    @staticmethod
    def make_ppo(study, ppo: dict, episode_s: float | None = None):
        """The PPO trainer of settings `ppo` on the study's training mix (one configuration
        drawn per episode) or its own training env (`train_env`); the reward times
        `reward_scale`."""
        from rlbm_jax.env.params import make_params
        from rlbm_jax.env.randomize import MixtureEnv
        from rlbm_jax.env.wrappers import RewardScale
        from rlbm_jax.ppo import PPO, PPOConfig

        if study.train_env is not None:
            env, params = study.train_env(study.episode_s if episode_s is None else episode_s)
        else:
            sims = [make_params(**kw) for kw in study.train_configs()]
            env = MixtureEnv(study.make_env(sims[0], episode_s), sims)
            params = env.default_params
        if study.reward_scale != 1.0:
            env = RewardScale(env, study.reward_scale)
        return PPO(env, params, PPOConfig.from_dict(ppo))

    def train(self, study, cfg: dict, run: Path) -> dict:
        from rlbm_jax.ppo import memory

        ppo = self.make_ppo(study, cfg["ppo"])
        note = memory.check(ppo, len(cfg["seeds"]))
        if note:
            print(note, file=sys.stderr)
        return trainer.train_seeds(ppo, seeds=cfg["seeds"], run=run, updates=cfg["updates"], chunk=cfg["chunk"],
                                   time_budget_s=cfg["time_budget_s"], label=f"{study.name} ({cfg['recipe']})")

    def weights_missing(self, run: Path, cfg: dict) -> list:
        return [] if (Path(run) / trainer.WEIGHTS).is_file() else list(cfg["seeds"])

    def load(self, study, run: Path, cfg: dict):
        """(ppo, params [seeds], obs_stats [seeds], seeds, updates)."""
        return trainer.load_trained(run, lambda c: self.make_ppo(study, c["ppo"], c.get("episode_s")), cfg)

    def policies(self, study, run: Path, cfg: dict):
        from rlbm_jax.study import rollout

        ppo, params, obs_stats, seeds, updates = self.load(study, run, cfg)
        args = [(s, rollout.actor_args(ppo, trainer.seed_slice(params, j), trainer.seed_slice(obs_stats, j)))
                for j, s in enumerate(seeds)]
        return self._actor(study, cfg, ppo), args, updates

    # {(study, PPO settings, episode_s): (study, actor)}: see `_actor`
    _actors: dict = {}

    def _actor(self, study, cfg: dict, ppo):
        """The actor of `ppo`, one per (study, PPO settings, episode length): the network and
        action map it applies are those alone (the weights are its args), so every stage of
        a process that judges a run of those settings (select, then test) hands
        `rollout.run_batch` the same actor, and the rollout compiled for the first serves the
        others in place of a fresh trace and compilation."""
        import json

        from rlbm_jax.study import rollout

        key = (id(study), json.dumps(cfg[self.settings_key], sort_keys=True, default=repr), cfg.get("episode_s"))
        held = self._actors.get(key)
        if held is None or held[0] is not study:  # (the study is held, so its id is not another's)
            held = self._actors[key] = (study, rollout.lstm_actor(ppo))
        return held[1]

    def export(self, study, run: Path, cfg: dict, log=print) -> list:
        from rlbm_jax.study.export import export_seeds

        ppo, params, obs_stats, seeds, updates = self.load(study, run, cfg)
        return export_seeds(ppo, params, obs_stats, seeds, Path(run), formulation=study.formulation,
                            interval_s=study.step_s, log=log,
                            env_info={"scenario": {"study": study.name, "agent_interval_s": study.step_s},
                                      "updates": updates, "recipe": cfg["recipe"]})


PPO = PPOAgent()
