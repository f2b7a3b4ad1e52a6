"""Run a stage of a declared study (`rlbm_jax.studies`): every study's cycle, written once.

    python scripts/study.py queuepilot train --num-seeds 3 --time-budget-s 600
    python scripts/study.py queuepilot select            # baselines' variants and recipes, selection seeds
    python scripts/study.py queuepilot test              # the chosen ones on the test seeds; writes the report
    python scripts/study.py queuepilot export            # the chosen recipe's policies, ONNX checked
    python scripts/study.py queuepilot report            # RESULTS.md and verdict.png from the committed files

The results folder (--results, default runs/<study>/results; one that holds results the kit
did not make is refused) holds ledger.json (every stage run,
its seeds, every configuration tried and its score, provenance), selection.csv and runs.csv
(every run's numbers) and the report.  Seeds are the study's declared ones: training,
selection and test seeds are disjoint, and a seed used for testing is refused for selection.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rlbm_jax.cli import (add_overwrite_arg, add_print_config, fail, name_flags, parser, printed_config,
                          refuse_held_run)

PROG = "study.py"
TRAIN_FLAGS = {"num_envs": "--num-envs", "num_steps": "--num-steps", "total_updates": "--updates", "lr": "--lr"}


def _add_train_options(t, takes=("num_envs", "num_steps", "lr")) -> None:
    """The options of a training run besides its recipe and folder (`takes`: the trainer's
    settings it may override; study.py offers all, and refuses by name what a study's
    trainer lacks)."""
    add_overwrite_arg(t)
    t.add_argument("--seed", type=int, default=0, help="first training seed")
    t.add_argument("--num-seeds", type=int, default=3, help="independent training seeds (PPO: vmapped)")
    if "num_envs" in takes:
        t.add_argument("--num-envs", type=int, default=None, help="envs per seed (LFQ: flows per iteration; unset: "
                                                                  "the recipe's)")
    if "num_steps" in takes:
        t.add_argument("--num-steps", type=int, default=None, help="rollout length (unset: the recipe's)")
    if "lr" in takes:
        t.add_argument("--lr", type=float, default=None, help="learning rate (unset: the recipe's)")
    t.add_argument("--updates", type=int, default=None, help="updates at most (LFQ: iterations; unset: the recipe's, "
                                                            "PPO's 200 where it names none)")
    t.add_argument("--chunk", type=int, default=5, help="updates per compiled call (checkpoint and budget check)")
    t.add_argument("--time-budget-s", type=float, default=None, help="stop after this much training wall time")


def build_parser():
    from rlbm_jax.study import names

    ap = parser(__doc__, PROG, print_config=False)
    ap.add_argument("study", choices=names(), help="the declared study")
    sub = ap.add_subparsers(dest="stage", required=True)
    t = sub.add_parser("train", help="train a recipe's agent from several training seeds")
    t.add_argument("--recipe", default=None, help="the study's recipe (unset: its first)")
    t.add_argument("--run-dir", default=None, help="unset: runs/<study>/<recipe>")
    _add_train_options(t)
    s = sub.add_parser("select", help="choose each baseline family's variant and the recipe on the selection seeds")
    s.add_argument("--runs", nargs="+", default=None, help="training runs to choose among (unset: runs/<study>/"
                                                           "<recipe> of every recipe that has one)")
    s.add_argument("--selection-seeds", type=int, default=None, help="the first K selection seeds (unset: all)")
    s.add_argument("--baselines", nargs="+", default=None, help="baseline variants (unset: every declared one)")
    e = sub.add_parser("test", help="judge the chosen recipe against the chosen baselines on the test seeds")
    e.add_argument("--test-seeds", type=int, default=None, help="the first K test seeds (unset: all)")
    for p in (s, e):
        p.add_argument("--seconds", type=float, default=None, help="simulated seconds per run (unset: the study's)")
        p.add_argument("--warmup-s", type=float, default=None, help="left out of every score (unset: the study's)")
        p.add_argument("--chunk", type=int, default=50, help="runs per compiled batch")
    x = sub.add_parser("export", help="every training seed's policy of a run, ONNX included, checked")
    x.add_argument("--run-dir", default=None, help="unset: the recipe run that selection chose")
    sub.add_parser("report", help="RESULTS.md and verdict.png from the results folder's files")
    n = sub.add_parser("ns3", help="judge the exported agent and the chosen baselines inside ns-3 beside JAX (the "
                                   "studies that declare it)")
    n.add_argument("--run-dir", default=None, help="unset: the recipe run that selection chose")
    n.add_argument("--seeds", type=int, default=2, help="the first K test seeds")
    n.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    for p in sub.choices.values():
        p.add_argument("--results", default=None, help="the study's results folder (unset: runs/<study>/results; a committed one is named)")
        add_print_config(p)
    return ap


def run_config(a) -> dict:
    """What the stage runs (`--print-config` prints it; the ledger and the run's config.json
    record it)."""
    from rlbm_jax.study import get, pipeline

    study = get(a.study)
    results = a.results or str(Path("runs") / study.name / "results")
    if a.stage == "train":
        recipe = a.recipe or next(iter(study.recipes))
        if a.num_seeds < 1:
            raise ValueError(f"--num-seeds must be >= 1, got {a.num_seeds}")
        try:
            return pipeline.train_config(study, recipe=recipe, seeds=list(range(a.seed, a.seed + a.num_seeds)),
                                         run_dir=a.run_dir or str(Path("runs") / study.name / recipe),
                                         num_envs=a.num_envs, num_steps=a.num_steps, updates=a.updates,
                                         chunk=a.chunk, lr=a.lr, time_budget_s=a.time_budget_s,
                                         overwrite=a.overwrite, results=results)
        except ValueError as e:
            raise ValueError(name_flags(str(e), TRAIN_FLAGS)) from None
    if a.stage == "select":
        runs = a.runs or [str(Path("runs") / study.name / r) for r in study.recipes
                          if (Path("runs") / study.name / r / "config.json").is_file()]
        k = len(study.seeds.selection) if a.selection_seeds is None else a.selection_seeds
        return pipeline.select_config(study, runs=runs, selection_seeds=k, seconds=a.seconds, warmup_s=a.warmup_s,
                                      chunk=a.chunk, results=results, baselines=a.baselines)
    if a.stage == "test":
        k = len(study.seeds.test) if a.test_seeds is None else a.test_seeds
        return pipeline.test_config(study, test_seeds=k, seconds=a.seconds, warmup_s=a.warmup_s, chunk=a.chunk,
                                    results=results)
    if a.stage == "export":
        return pipeline.export_config(study, run_dir=a.run_dir, results=results)
    if a.stage == "ns3":
        if study.ns3 is None:
            raise ValueError(f"study {study.name} declares no ns-3 judging")
        return pipeline.ns3_config(study, run_dir=a.run_dir, seeds=a.seeds, jobs=a.jobs, results=results)
    return {"study": study.name, "stage": "report", "results": results}


# ---- a study script's `train`: the kit's train ---------------------------------------------
def add_kit_train_args(t, *, run_dir: str, study: str) -> None:
    """The options of a study script's `train`, which is `study.py NAME train` (its first
    recipe) with the same options, less those its trainer does not take."""
    from rlbm_jax.study import get

    t.add_argument("--run-dir", default=run_dir)
    _add_train_options(t, takes=tuple(get(study).agent_kind.options))


def kit_train_config(name: str, a) -> dict:
    """`study.py NAME train`'s configuration of a study script's `train` options (its ledger
    in <run-dir>/kit, where the script's `evaluate` writes)."""
    argv = [name, "train", "--run-dir", a.run_dir, "--seed", str(a.seed), "--num-seeds", str(a.num_seeds),
            "--chunk", str(a.chunk), "--results", str(Path(a.run_dir) / "kit")]
    for flag, v in (("--updates", a.updates), ("--num-envs", getattr(a, "num_envs", None)), ("--num-steps", getattr(a, "num_steps", None)),
                    ("--lr", getattr(a, "lr", None)), ("--time-budget-s", a.time_budget_s)):
        if v is not None:
            argv += [flag, repr(v)]
    return run_config(build_parser().parse_args(argv + (["--overwrite"] if a.overwrite else [])))


def kit_train(prog: str, cfg: dict) -> int:
    from rlbm_jax.study import get, pipeline

    try:
        pipeline.train(get(cfg["study"]), cfg)
    except ValueError as e:
        return fail(prog, str(e))
    print(f"wrote {cfg['run_dir']}/ (config.json, metrics.csv, curves.png and the trained weights)")
    return 0


# ---- a study script's `evaluate`: the kit's select then test ----------------------------------
def add_kit_eval_args(e, *, run_dir: str, study: str) -> None:
    """The options of a study script's `evaluate`, which is `study.py NAME select --runs
    RUN --results OUT` then `study.py NAME test --results OUT` (no --warmup-s for a study
    whose runs have none)."""
    from rlbm_jax.study import get

    e.add_argument("--run-dir", default=run_dir, help="the trained run to judge")
    e.add_argument("--out-dir", default=None, help="the kit's results folder (default: <run-dir>/kit)")
    e.add_argument("--seconds", type=float, default=None, help="simulated seconds per run (unset: the study's)")
    if get(study).run_steps is None:
        e.add_argument("--warmup-s", type=float, default=None, help="left out of every score (unset: the study's)")
    e.add_argument("--selection-seeds", type=int, default=None, help="the first K selection seeds (unset: all)")
    e.add_argument("--test-seeds", type=int, default=None, help="the first K test seeds (unset: all)")
    e.add_argument("--baselines", nargs="+", default=None, help="baseline variants (unset: every declared one)")
    e.add_argument("--chunk", type=int, default=50, help="runs per compiled batch")


def kit_eval_config(name: str, a) -> dict:
    """The select stage's configuration and what the test stage after it takes (its own
    configuration needs the selection)."""
    from rlbm_jax.study import get, pipeline

    study = get(name)
    out = a.out_dir or str(Path(a.run_dir) / "kit")
    warmup_s = getattr(a, "warmup_s", None)
    sel = pipeline.select_config(study, runs=[a.run_dir], selection_seeds=len(study.seeds.selection)
                                 if a.selection_seeds is None else a.selection_seeds, seconds=a.seconds, warmup_s=warmup_s,
                                 chunk=a.chunk, results=out, baselines=a.baselines)
    k = len(study.seeds.test) if a.test_seeds is None else a.test_seeds
    study.seeds.first("test", k)
    return {"study": name, "select": sel,
            "test": {"test_seeds": k, "seconds": a.seconds, "warmup_s": warmup_s, "chunk": a.chunk, "results": out}}


def kit_evaluate(prog: str, cfg: dict) -> int:
    """Select, then test, as `study.py` runs them (the ledger in the results folder)."""
    from rlbm_jax.study import get, pipeline

    study = get(cfg["study"])
    try:
        res = pipeline.select(study, cfg["select"])
        print(f"chosen: {res['chosen']}", file=sys.stderr)
        rep = pipeline.test(study, pipeline.test_config(study, **cfg["test"]))
    except ValueError as e:
        return fail(prog, str(e))
    print(pipeline.report_json(rep))
    print(f"wrote {rep['markdown']}", file=sys.stderr)
    return 0


# ---- a study script's train, evaluate and export, as the kit's stages ------------------------
def add_kit_stages(sub, *, study: str, run_dir: str, train_help: str, evaluate_help: str, export_help: str):
    """The `train`, `evaluate` and `export` subcommands of a study script (the kit's train;
    select then test; export, each ledger in <run-dir>/kit); returns their parsers."""
    t = sub.add_parser("train", help=train_help)
    add_kit_train_args(t, run_dir=run_dir, study=study)
    e = sub.add_parser("evaluate", help=evaluate_help)
    add_kit_eval_args(e, run_dir=run_dir, study=study)
    x = sub.add_parser("export", help=export_help)
    x.add_argument("--run-dir", default=run_dir, help="a train run's directory")
    x.add_argument("--out-dir", default=None, help="the kit's results folder whose ledger records it (default: "
                                                   "<run-dir>/kit)")
    return t, e, x


def kit_stage_config(study: str, a) -> dict:
    """The configuration of a study script's train, evaluate or export (`add_kit_stages`)."""
    if a.cmd == "train":
        return {"cmd": "train", **kit_train_config(study, a)}
    if a.cmd == "evaluate":
        return {"cmd": "evaluate", **kit_eval_config(study, a)}
    from rlbm_jax.study import get, pipeline

    return {"cmd": "export", **pipeline.export_config(get(study), run_dir=a.run_dir,
                                                      results=a.out_dir or str(Path(a.run_dir) / "kit"))}


def kit_export(prog: str, cfg: dict) -> int:
    """The kit's export of a study script's run (exit 1 where a policy disagrees with its network)."""
    from rlbm_jax.study import get, pipeline

    try:
        recs = pipeline.export(get(cfg["study"]), cfg)
    except ValueError as e:
        return fail(prog, str(e))
    return 0 if all(r["ok"] for r in recs) else fail(prog, "an exported policy disagrees with its network", 1)


def kit_commands(prog: str) -> dict:
    """{train, evaluate, export: the function running it} of a study script."""
    return {"train": lambda a, cfg, _: kit_train(prog, cfg), "evaluate": lambda a, cfg, _: kit_evaluate(prog, cfg),
            "export": lambda a, cfg, _: kit_export(prog, cfg)}


def main(argv=None) -> int:
    from rlbm_jax.study import get, pipeline

    a = build_parser().parse_args(argv)
    try:
        cfg = run_config(a)
        if a.stage == "train":
            refuse_held_run(cfg["run_dir"], overwrite=a.overwrite)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    study = get(a.study)
    try:
        if a.stage == "train":
            pipeline.train(study, cfg)
            print(f"wrote {cfg['run_dir']}/ (config.json, metrics.csv, curves.png and the trained weights)")
        elif a.stage == "select":
            res = pipeline.select(study, cfg)
            print(f"chosen: {res['chosen']}; recipe {res['chosen_recipe']['recipe']} "
                  f"({res['chosen_recipe']['run_dir']}); wrote {cfg['results']}/selection.csv, ledger.json")
        elif a.stage in ("test", "report"):
            rep = pipeline.test(study, cfg) if a.stage == "test" else pipeline.report(study, cfg["results"])
            print(pipeline.report_json(rep))
            print(f"wrote {', '.join(rep.get('written', [rep['markdown']]))}", file=sys.stderr)
        elif a.stage == "export":
            recs = pipeline.export(study, cfg)
            if not all(r["ok"] for r in recs):
                return fail(PROG, "an exported policy disagrees with the trained network", 1)
        else:
            import importlib

            mod, fn = study.ns3.split(":")
            return getattr(importlib.import_module(mod), fn)(cfg)
    except ValueError as e:
        return fail(PROG, str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
