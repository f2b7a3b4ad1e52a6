"""The stages every declared study runs, alike: train -> select -> test -> export -> report
(and ns3 where the study declares it).  Each stage reads what the earlier ones left in the
study's results folder (`ledger.json`, `selection.csv`, `runs.csv`) and appends its own entry
to the ledger (`protocol.Ledger`), with the seeds it used and its provenance.

    train    a recipe's PPO agent from several training seeds (one vmapped call) on the
             training mix; the run directory gets config.json, metrics.csv, curves.png and
             trained.msgpack, the ledger the recipe as a configuration tried
    select   every baseline variant and every trained recipe given, on the selection
             configurations and seeds: the best variant of each family and the best recipe
             are chosen by mean reward; selection.csv holds every run, the ledger every score
    test     the chosen recipe (every training seed) and the chosen variants on the test
             configurations and seeds: runs.csv holds every run, paired by (config, seed)
    export   every training seed's policy of the chosen recipe, ONNX included, checked
    report   RESULTS.md and verdict.png regenerated from the committed files alone
"""
from __future__ import annotations

import csv
import hashlib
import time
from pathlib import Path

import numpy as np

from rlbm_jax.study import stats, trainer
from rlbm_jax.study.declare import Study
from rlbm_jax.study.protocol import Ledger, check_run_length, stale_fields

# the source tree's root (where a declaration's legacy runs, committed under results/, lie)
SOURCE_ROOT = Path(__file__).resolve().parents[2]

SELECTION_CSV, RUNS_CSV, RESULTS_MD, FIGURE = "selection.csv", "runs.csv", "RESULTS.md", "verdict.png"
AGENT = "agent"


# ---- training --------------------------------------------------------------------------
def train_config(study: Study, *, recipe: str, seeds: list, run_dir: str, num_envs: int | None = None,
                 num_steps: int | None = None, updates: int | None = None, chunk: int = 5, lr: float | None = None,
                 time_budget_s: float | None = None, overwrite: bool = False, results: str) -> dict:
    from rlbm_jax.env.model import json_value
    from rlbm_jax.env.params import config_record

    if recipe not in study.recipes:
        raise ValueError(f"--recipe {recipe!r}: study {study.name} declares {', '.join(study.recipes)}")
    if chunk < 1 or (updates is not None and updates < 1):
        raise ValueError("--updates and --chunk must be >= 1")
    if time_budget_s is not None and not time_budget_s > 0:
        raise ValueError(f"--time-budget-s must be positive, got {time_budget_s}")
    seeds = study.seeds.check("train", seeds)
    kind = study.agent_kind
    settings = kind.settings(study.recipes[recipe], updates,
                             {"num_envs": num_envs, "num_steps": num_steps, "lr": lr})
    updates = settings[kind.updates_key]  # given, or the recipe's (the kind's default where it names none)
    configs = study.train_configs()
    return {"study": study.name, "stage": "train", "recipe": recipe, "run_dir": run_dir, "results": results,
            "overwrite": overwrite, "agent": kind.name, kind.settings_key: settings, "episode_s": study.episode_s,
            "reward_scale": study.reward_scale, "seeds": seeds, "updates": updates, "chunk": chunk,
            "time_budget_s": time_budget_s,
            "configs": [{k: json_value(v) for k, v in kw.items()} for kw in configs],  # as given (a trace by name)
            "params": [config_record(kw) for kw in configs],
            **({"draws": study.train_draws} if study.train_env is not None else {})}


def train(study: Study, cfg: dict) -> dict:
    from rlbm_jax import jsonio
    from rlbm_jax.study.protocol import provenance

    kind = study.agent_kind
    ledger = Ledger(cfg["results"], study.name, study.seeds)
    ledger.use("train", "train", cfg["seeds"])
    run = Path(cfg["run_dir"])
    run.mkdir(parents=True, exist_ok=True)
    first = study.train_configs()[0]  # (cfg records them as JSON holds them)
    jsonio.write(run / "config.json", {**cfg, "provenance": provenance(first)})
    summary = kind.train(study, cfg, run)
    ledger.append("train", config_for_backend=first, seeds={"train": cfg["seeds"]},
                  tried=[{"kind": "recipe", "name": cfg["recipe"], "run_dir": str(run),
                          kind.settings_key: cfg[kind.settings_key], "updates": summary["updates"]}])
    return summary


def study_run(study: Study, run) -> dict:
    """The config.json of a training run of this study (a ValueError for none, one without
    weights, or another study's)."""
    how = f"`study.py {study.name} train --run-dir {run}`"
    kind = study.agent_kind
    legacy = _legacy_recipe(study, run)
    if legacy is not None:  # made by the study's own script before the kit: declared as such
        cfg = trainer.trained_run(run, required=getattr(kind, "legacy_required", (kind.settings_key, "seeds")),
                                  weights=False, how=how)
        if "study" in cfg:
            raise ValueError(f"{run}: declared a legacy run of {study.name} but its config names study {cfg['study']!r}")
        cfg = {**(kind.legacy(cfg) if hasattr(kind, "legacy") else cfg), "study": study.name, "recipe": legacy,
               "legacy_run": True}
    else:
        cfg = trainer.trained_run(run, required=("study", "recipe", kind.settings_key, "seeds"), weights=False,
                                  how=how)
        if cfg["study"] != study.name:
            raise ValueError(f"{run}: a training run of study {cfg['study']!r}, not {study.name!r}")
        if cfg.get("agent", "ppo") != kind.name:
            raise ValueError(f"{run}: trained by the {cfg.get('agent', 'ppo')} trainer; study {study.name}'s agent is "
                             f"{kind.name}")
    missing = kind.weights_missing(run, cfg)
    if len(missing) == len(cfg["seeds"]):
        raise ValueError(f"{run} holds no trained weights (run {how} first)")
    if missing:
        raise ValueError(f"{run}: training seeds {missing} have no weights (a run is judged whole or not at all)")
    study.seeds.check("train", list(cfg["seeds"]))  # a run trained on another role's seeds is judged by none
    return cfg


def _legacy_recipe(study: Study, run) -> str | None:
    """The recipe of `run` if the declaration names it among its legacy runs (a folder of the
    source tree, however the path is spelled), else None."""
    here = Path(run).resolve()
    for folder, recipe in study.legacy_runs.items():
        if here == (SOURCE_ROOT / folder).resolve():
            return recipe
    return None


def load_run(study: Study, run) -> tuple:
    """(actor, [(training seed, actor args)], updates, config) of a training run of this
    study: each training seed's policy as an actor (`rollout`)."""
    cfg = study_run(study, run)
    return (*study.agent_kind.policies(study, Path(run), cfg), cfg)


# ---- rollouts --------------------------------------------------------------------------
def _steps(study: Study, configs: dict, seconds: float, warmup_s: float) -> tuple[int, int]:
    """(the batch's steps: the longest run's, the warm-up steps) of runs of `seconds`."""
    check_run_length(seconds, warmup_s)
    if study.run_steps is not None and warmup_s != 0:
        raise ValueError(f"--warmup-s: study {study.name} counts its runs in packets and has no warm-up (0), got "
                         f"{warmup_s}")
    return max(study.steps(kw, seconds) for kw in configs.values()), int(round(warmup_s / study.step_s))


def _runs(study: Study, configs: dict, seeds, warmup_s: float, seconds: float, baseline=None) -> list:
    """[(make_params kwargs, seed, steps)] of every (configuration, seed), in that order."""
    out = []
    for label, kw in configs.items():
        for s in seeds:
            c = study.run_config(label, {**kw, "warmup_s": warmup_s}, s)
            out.append((baseline.kw(c) if baseline is not None else c, s, study.steps(c, seconds)))
    return out


def _rollouts(study: Study, runs, steps, warm, actor, args, chunk, name):
    from rlbm_jax.study import rollout

    # a sender study's baseline without an actor is the agent flow's own TCP, no agent acting
    make_env = study.undriven_env if actor is None and study.formulation.sender else study.eval_env
    res = rollout.run_batch(make_env, runs, steps, warm, actor, args, chunk=chunk,
                            step_record=study.step_record, traces=study.traces, log=False, name=name,
                            step_max=study.step_max)
    if study.score is not None:  # the study's objective of each run's summary is its reward
        for (kw, *_), r in zip(runs, res):
            r["reward"] = np.float64(study.score(r, kw))
    return res


def _actor_key(b):
    """What names a baseline's compiled rollout: its actor where that is a module's function
    (variants sharing one compile), else the variant (an actor made per declaration call)."""
    if b.actor is None or "<locals>" not in getattr(b.actor, "__qualname__", "<locals>"):
        return None
    return ("baseline", b.name)


def _policies(study: Study, names, runs_of, steps, warm, chunk, agents=()):
    """{policy: (meta, results)} of the baseline variants `names` and the agents (a list of
    (recipe name, run dir)), each on the runs `runs_of(baseline or None)`; a progress bar."""
    from rlbm_jax.progress import Progress

    base = study.baseline_map()
    loaded = [(recipe, load_run(study, run)) for recipe, run in agents]
    total = len(names) + sum(len(x[1]) for _, x in loaded)
    bar = Progress(total, unit=" policies", label=f"{study.name} ")
    out, done = {}, 0
    for v in names:
        b = base[v]
        args = {"carry0": b.carry0} if b.actor is not None else None
        meta = {"kind": "baseline", "family": b.family, "training_seed": ""}
        if b.fit is not None:  # trained before it runs, on declared training seeds
            fitted, meta["fit"] = b.fit(study.seeds.check("train", list(b.fit_seeds)))
            args.update(fitted)
        out[v] = (meta, _rollouts(study, runs_of(b), steps, warm, b.actor, args, chunk, name=_actor_key(b)))
        done += 1
        bar.update(done, extra=v)
    for recipe, (actor, per_seed, updates, cfg) in loaded:
        for s, args in per_seed:
            runs = runs_of(None)
            if actor is None:  # a tuned configuration: the switch's own policy at the agent's values
                runs = [({**kw, **args["overrides"](kw)}, *rest) for kw, *rest in runs]
            out[f"{recipe}-seed{s}"] = ({"kind": AGENT, "family": recipe, "training_seed": s, "updates": updates},
                                        _rollouts(study, runs, steps, warm, actor, args if actor else None, chunk,
                                                  name=None))
            done += 1
            bar.update(done, extra=f"{recipe} seed {s}")
    bar.close()
    return out


def _judge(study: Study, cfg: dict, stage: str, role: str, configs: dict, agents: list):
    """(ledger, seeds, {policy: (meta, results)}, results folder) of a stage that runs cfg's
    baselines and `agents` on `configs` with cfg's seeds, checked for `role` by the ledger."""
    ledger = Ledger(cfg["results"], study.name, study.seeds)
    seeds = ledger.use(stage, role, cfg["seeds"])
    table = _policies(study, cfg["baselines"], lambda b: _runs(study, configs, seeds, cfg["warmup_s"], cfg["seconds"], b),
                      cfg["steps"], cfg["warmup_steps"], cfg["chunk"], agents=agents)
    out = Path(cfg["results"])
    out.mkdir(parents=True, exist_ok=True)
    return ledger, seeds, table, out


def _fields(study: Study) -> list:
    return ["reward", *study.metrics, *study.recorded]


def _rows(study: Study, table: dict, configs: dict, seeds) -> list:
    """One CSV row per (policy, configuration, seed): the numbers exact (repr)."""
    keys = [(label, s) for label in configs for s in seeds]
    rows = []
    for pol, (meta, res) in table.items():
        for (label, s), r in zip(keys, res):
            row = {"policy": pol, "kind": meta["kind"], "family": meta["family"],
                   "training_seed": meta["training_seed"], "config": label, "seed": s}
            row.update({f: repr(float(r[f])) for f in _fields(study)})
            rows.append(row)
    return rows


def _write_csv(path: Path, rows: list) -> str:
    trainer.write_rows(path, rows)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_csv(path: Path) -> list:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


# ---- selection ---------------------------------------------------------------------------
def select_config(study: Study, *, runs: list, selection_seeds: int, seconds: float | None, warmup_s: float | None,
                  chunk: int, results: str, baselines: list | None = None) -> dict:
    from rlbm_jax.env.params import config_record

    seconds = study.eval_s if seconds is None else seconds
    warmup_s = study.warmup_s if warmup_s is None else warmup_s
    configs = study.selection_configs()
    steps, warm = _steps(study, configs, seconds, warmup_s)
    if chunk < 1:
        raise ValueError(f"--chunk must be >= 1, got {chunk}")
    known = list(study.baseline_map())
    names = list(baselines or known)
    unknown = [b for b in names if b not in known]
    if unknown:
        raise ValueError(f"--baselines: unknown {unknown}; study {study.name} declares {known}")
    agents = []
    for run in runs:
        rc = study_run(study, run)
        agents.append([rc["recipe"], str(run)])
    if not agents:
        raise ValueError("--runs: give at least one training run (a recipe) to select among")
    return {"study": study.name, "stage": "select", "results": results, "runs": agents,
            "seeds": study.seeds.first("selection", selection_seeds), "seconds": seconds, "warmup_s": warmup_s,
            "steps": steps, "warmup_steps": warm, "chunk": chunk, "baselines": names,
            "configs": list(configs), "params": {k: config_record(v) for k, v in configs.items()}}


def select(study: Study, cfg: dict) -> dict:
    t0 = time.perf_counter()
    configs = study.selection_configs()
    ledger, seeds, table, out = _judge(study, cfg, "select", "selection", configs, [tuple(a) for a in cfg["runs"]])
    sha = _write_csv(out / SELECTION_CSV, _rows(study, table, configs, seeds))
    score = {p: float(np.mean([r["reward"] for r in res])) for p, (_, res) in table.items()}
    families = {}
    for p, (meta, _) in table.items():
        if meta["kind"] == "baseline":
            families.setdefault(meta["family"], []).append(p)
    chosen = {f: max(vs, key=lambda v: score[v]) for f, vs in families.items()}
    recipes = {}
    for (recipe, run) in cfg["runs"]:
        per_seed = [score[p] for p, (m, _) in table.items() if m["kind"] == AGENT and m["family"] == recipe]
        recipes[f"{recipe} @ {run}"] = {"recipe": recipe, "run_dir": run, "score": float(np.mean(per_seed)),
                                        "per_seed": per_seed}
    best = max(recipes.values(), key=lambda r: r["score"])
    tried = [{"kind": "baseline", "name": p, "family": m["family"], "score": score[p],
              **({"fit": m["fit"]} if "fit" in m else {})}
             for p, (m, _) in table.items() if m["kind"] == "baseline"]
    tried += [{"kind": "recipe", **r} for r in recipes.values()]
    ledger.append("select", config_for_backend=next(iter(configs.values())), seeds={"selection": seeds},
                  config={k: v for k, v in cfg.items() if k != "params"},
                  tried=tried, chosen=chosen, chosen_recipe={"recipe": best["recipe"], "run_dir": best["run_dir"]},
                  selection_csv_sha256=sha, wall_s=round(time.perf_counter() - t0, 1))
    return {"chosen": chosen, "chosen_recipe": best, "scores": score}


# ---- test ------------------------------------------------------------------------------
def _chosen(ledger: Ledger, study: Study) -> dict:
    sel = ledger.last("select")
    if sel is None:
        raise ValueError(f"{ledger.path}: no selection yet (run `study.py {study.name} select` first): the test "
                         "judges what selection chose, nothing else")
    return sel


def test_config(study: Study, *, test_seeds: int, seconds: float | None, warmup_s: float | None, chunk: int,
                results: str) -> dict:
    from rlbm_jax.env.params import config_record

    ledger = Ledger(results, study.name, study.seeds)
    sel = _chosen(ledger, study)
    seconds = study.eval_s if seconds is None else seconds
    warmup_s = study.warmup_s if warmup_s is None else warmup_s
    configs = study.test_configs()
    steps, warm = _steps(study, configs, seconds, warmup_s)
    if chunk < 1:
        raise ValueError(f"--chunk must be >= 1, got {chunk}")
    base = study.baseline_map()
    chosen = list(dict.fromkeys(sel["chosen"].values()))
    return {"study": study.name, "stage": "test", "results": results, "recipe": sel["chosen_recipe"],
            "baselines": chosen, "seeds": study.seeds.first("test", test_seeds), "seconds": seconds,
            "warmup_s": warmup_s, "steps": steps, "warmup_steps": warm, "chunk": chunk, "configs": list(configs),
            "params": {k: config_record({**v, "warmup_s": warmup_s}) for k, v in configs.items()},
            "baseline_overrides": {b: {k: _overrides(base[b], v) for k, v in configs.items()} for b in chosen}}


def _overrides(b, config: dict) -> dict:
    from rlbm_jax import jsonio

    return jsonio.plain(b.overrides(config) if callable(b.overrides) else b.overrides)


def test(study: Study, cfg: dict) -> dict:
    t0 = time.perf_counter()
    configs = study.test_configs()
    ledger, seeds, table, out = _judge(study, cfg, "test", "test", configs,
                                       [(cfg["recipe"]["recipe"], cfg["recipe"]["run_dir"])])
    sha = _write_csv(out / RUNS_CSV, _rows(study, table, configs, seeds))
    ledger.append("test", config_for_backend=next(iter(configs.values())), seeds={"test": seeds}, config=cfg,
                  runs_csv_sha256=sha, **_fits(table),
                  wall_s=round(time.perf_counter() - t0, 1))
    return report(study, cfg["results"])


def _fits(table: dict) -> dict:
    """The ledger's record of the fitted baselines a stage ran (none: nothing)."""
    fits = {p: m["fit"] for p, (m, _) in table.items() if "fit" in m}
    return {"fits": fits} if fits else {}


# ---- export ----------------------------------------------------------------------------
def export_config(study: Study, *, run_dir: str | None, results: str) -> dict:
    if run_dir is None:
        sel = Ledger(results, study.name, study.seeds).last("select")
        if sel is None:
            raise ValueError(f"--run-dir not given and {Path(results) / 'ledger.json'} has no selection: name the "
                             "training run to export")
        run_dir = sel["chosen_recipe"]["run_dir"]
    rc = study_run(study, run_dir)
    return {"study": study.name, "stage": "export", "results": results, "run_dir": str(run_dir),
            "recipe": rc["recipe"], "seeds": rc["seeds"], "agent": study.agent_kind.name,
            "formulation": study.formulation.id}


def export(study: Study, cfg: dict) -> list:
    rc = study_run(study, cfg["run_dir"])
    recs = study.agent_kind.export(study, Path(cfg["run_dir"]), rc)
    Ledger(cfg["results"], study.name, study.seeds).append("export", config=cfg, policies=recs)
    return recs


# ---- ns-3 ------------------------------------------------------------------------------
def ns3_config(study: Study, *, run_dir: str | None, seeds: int, jobs: int, results: str) -> dict:
    """What the `ns3` stage hands the study's judging: the run (unset: the chosen recipe's),
    the variants selection chose (none before a selection), the first `seeds` test seeds,
    the jobs and where the results go (<results>/ns3)."""
    sel = Ledger(results, study.name, study.seeds).last("select")
    if run_dir is None:
        if sel is None:
            raise ValueError(f"--run-dir not given and {Path(results) / 'ledger.json'} has no selection: name the "
                             "training run to judge")
        run_dir = sel["chosen_recipe"]["run_dir"]
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    return {"study": study.name, "stage": "ns3", "results": results, "run_dir": str(run_dir),
            "chosen": list(dict.fromkeys(sel["chosen"].values())) if sel else [],
            "test_seeds": study.seeds.first("test", seeds), "seeds": seeds, "jobs": jobs,
            "out_dir": str(Path(results) / "ns3")}


def ns3_markdown(study: Study, folder) -> str:
    """The RESULTS.md of an ns-3 judging folder, made again from its results.json with the
    study's declared renderer (`Study.ns3_markdown`)."""
    import importlib
    import json

    if study.ns3_markdown is None:
        raise ValueError(f"study {study.name} declares no ns3_markdown: its ns-3 tables cannot be made again")
    mod, fn = study.ns3_markdown.split(":")
    rep = json.loads((Path(folder) / "results.json").read_text())
    return getattr(importlib.import_module(mod), fn)(rep)


def ns3_folders(study: Study, results: Path, sel: dict | None) -> list:
    """The ns-3 judgings whose tables `report` makes again: <results>/ns3 and the chosen
    run's ns3* folders (a study script's judging before the kit wrote them there), each
    with its results.json; none where the study declares no renderer."""
    if study.ns3_markdown is None:
        return []
    found = [Path(results) / "ns3"]
    if sel is not None:
        run = Path(sel["chosen_recipe"]["run_dir"])
        found += sorted(p for p in run.glob("ns3*") if p.is_dir())
    return [p for p in dict.fromkeys(found) if (p / "results.json").is_file()]


# ---- report ----------------------------------------------------------------------------
def _fmt(m, se=None, digits=4) -> str:
    return stats.fmt_mean_se((m, float("nan") if se is None else se), digits=digits, sign=True)


def report(study: Study, results: str) -> dict:
    """RESULTS.md and verdict.png of the study's results folder, from ledger.json,
    selection.csv and runs.csv alone (the same files give the same bytes); a result whose
    recorded simulator parameters differ from what the declaration resolves to now is marked
    stale, field by field."""
    from rlbm_jax.env.params import config_record

    out = Path(results)
    ledger = Ledger(out, study.name, study.seeds)
    t = ledger.last("test")
    if t is None or not (out / RUNS_CSV).is_file():
        raise ValueError(f"{out}: no test yet (run `study.py {study.name} test` first)")
    cfg = t["config"]
    rows = read_csv(out / RUNS_CSV)
    fields = ["reward", *study.metrics]  # judged (the recorded ones are the study's report_extra's)
    keys = sorted({(r["config"], int(r["seed"])) for r in rows}, key=lambda k: (cfg["configs"].index(k[0]), k[1]))
    index = {k: i for i, k in enumerate(keys)}

    def vec(rs, f):
        v = np.full(len(keys), np.nan)
        for r in rs:
            v[index[(r["config"], int(r["seed"]))]] = float(r[f])
        return v

    agent_rows = [r for r in rows if r["kind"] == AGENT]
    train_seeds = sorted({int(r["training_seed"]) for r in agent_rows})
    baselines = list(dict.fromkeys(r["policy"] for r in rows if r["kind"] == "baseline"))
    higher = {"reward": True, **study.metrics}
    A = {f: np.stack([vec([r for r in agent_rows if int(r["training_seed"]) == s], f) for s in train_seeds])
         for f in fields}
    B = {b: {f: vec([r for r in rows if r["policy"] == b], f) for f in fields} for b in baselines}
    comps = {f: stats.verdicts({b: stats.paired(A[f], B[b][f], higher[f]) for b in baselines}) for f in fields}
    # staleness: the test's recorded parameters against the declaration now
    now = {k: config_record({**v, "warmup_s": cfg["warmup_s"]}) for k, v in study.test_configs().items()}
    stale = {k: stale_fields(cfg["params"].get(k, {}), v) for k, v in now.items()}
    stale = {k: v for k, v in stale.items() if v}
    prov = t["provenance"]
    sel = ledger.last("select")
    L = [f"# {study.title}", "",
         f"Study `{study.name}`, formulation `{study.formulation.id}`. Regenerate with "
         f"`python scripts/study.py {study.name} report --results {results}`.", ""]
    if stale:
        fields_ = sorted({p for v in stale.values() for p in v})
        L += [f"**Stale**: made under another model than the one the study runs now ({', '.join(fields_)} differ; "
              f"recorded against now in `stale` of the report's JSON). Rerun `select` and `test`.", ""]
    L += [f"Made with rlbm_jax {prov['rlbm_jax']} ({prov['platform']}, {prov['device']}, simulator backend "
          f"{prov.get('sim_backend_ran', prov['sim_backend'])}). Recipe `{cfg['recipe']['recipe']}` "
          f"({cfg['recipe']['run_dir']}), "
          f"{len(train_seeds)} training seeds {train_seeds}; test seeds {cfg['seeds']} on {len(cfg['configs'])} "
          f"configurations ({len(keys)} paired runs); {cfg['seconds']:g} s per run, the first {cfg['warmup_s']:g} s "
          f"left out. The test seeds have been used by {ledger.times_tested()} test stage(s).", "",
          "## Verdict: the agent against each chosen baseline (reward)", "",
          "Paired by test run; mean over training seeds of each seed's mean difference, ± its standard error "
          f"across training seeds; Holm's correction over the {len(baselines)} baselines, alpha {stats.ALPHA}.", "",
          "| baseline | family | agent - baseline | p (Holm) | verdict |", "| --- | --- | --- | --- | --- |"]
    fam = {r["policy"]: r["family"] for r in rows}
    for b in baselines:
        c = comps["reward"][b]
        p = "n/a" if c["p_holm"] is None or c["p_holm"] != c["p_holm"] else f"{c['p_holm']:.3g}"
        L.append(f"| {b} | {fam[b]} | {_fmt(c['diff'], c['se'])} | {p} | {c['verdict']} |")
    wins = sum(comps["reward"][b]["verdict"] == "better" for b in baselines)
    losses = sum(comps["reward"][b]["verdict"] == "worse" for b in baselines)
    L += ["", f"Better than {wins}, worse than {losses}, tied with {len(baselines) - wins - losses} of "
              f"{len(baselines)} baselines.", "",
          "## Operator metrics: agent - baseline (paired, ± s.e. across training seeds)", "",
          "| baseline | " + " | ".join(f"{f} ({'higher' if higher[f] else 'lower'} is better)"
                                       for f in fields[1:]) + " |",
          "| --- |" + " --- |" * (len(fields) - 1)]
    for b in baselines:
        L.append(f"| {b} | " + " | ".join(_fmt(comps[f][b]["diff"], comps[f][b]["se"]) for f in fields[1:]) + " |")
    L += ["", "## Means over the test runs", "", "| policy | " + " | ".join(fields) + " |",
          "| --- |" + " --- |" * len(fields)]
    L.append("| agent (mean ± s.e. over training seeds) | " + " | ".join(
        _fmt(*stats.mean_se(np.nanmean(A[f], axis=1))) for f in fields) + " |")
    for b in baselines:
        L.append(f"| {b} | " + " | ".join(_fmt(*stats.mean_se(B[b][f])) for f in fields) + " |")
    if sel is not None:
        L += ["", "## Selection: every configuration tried (mean reward on the selection seeds)", "",
              f"Selection seeds {sel['seeds']['selection']}.", "", "| kind | name | family | score | chosen |",
              "| --- | --- | --- | --- | --- |"]
        chosen = set(sel["chosen"].values())
        for x in sel["tried"]:
            if x["kind"] == "baseline":
                L.append(f"| baseline | {x['name']} | {x['family']} | {_fmt(x['score'])} | "
                         f"{'yes' if x['name'] in chosen else ''} |")
            else:
                ch = x["run_dir"] == sel["chosen_recipe"]["run_dir"]
                L.append(f"| recipe | {x['recipe']} ({x['run_dir']}) | | {_fmt(x['score'])} | {'yes' if ch else ''} |")
        recipes = [e for e in ledger.entries if e["stage"] == "train"]
        L += ["", f"Training runs in the ledger: {len(recipes)} (" + ", ".join(
            f"{x['name']} at {x['run_dir']}" for e in recipes for x in e["tried"]) + ")."]
    if study.report_extra is not None:
        L += [""] + list(study.report_extra(rows, cfg, out))
    (out / RESULTS_MD).write_text("\n".join(L) + "\n")
    _figure(comps["reward"], baselines, out / FIGURE, study)
    written = [str(out / RESULTS_MD)]
    for folder in ns3_folders(study, out, sel):
        (folder / RESULTS_MD).write_text(ns3_markdown(study, folder))
        written.append(str(folder / RESULTS_MD))
    return {"comparisons": comps, "stale": stale, "markdown": str(out / RESULTS_MD), "written": written}


def _figure(comp: dict, baselines: list, path: Path, study: Study) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * max(len(baselines), 1), 3.4))
    m = [comp[b]["diff"] for b in baselines]
    e = [2 * np.nan_to_num(comp[b]["se"]) for b in baselines]
    col = {"better": "C2", "worse": "C3"}
    ax.bar(range(len(baselines)), m, yerr=e, capsize=3, color=[col.get(comp[b]["verdict"], "0.6") for b in baselines])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(baselines)), baselines, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("agent - baseline reward")
    ax.set_title(f"{study.name}: paired difference, ±2 s.e.", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def report_json(rep: dict) -> str:
    from rlbm_jax import jsonio

    return jsonio.dumps({"stale": rep["stale"], "verdicts": {b: {k: c[k] for k in ("diff", "se", "p_holm", "verdict")}
                                                             for b, c in rep["comparisons"]["reward"].items()}})


def stage_names() -> tuple:
    return ("train", "select", "test", "export", "report", "ns3")


__all__ = ["train_config", "train", "select_config", "select", "test_config", "test", "export_config",
           "export", "report", "load_run", "read_csv"]
