"""Command-line entry points: `scripts/<name>.py` runs `rlbm_jax.cli.<name>.main`.

Shared here: the help format (every option shows its default) and the translation of
errors that name a library field (`buffer_per_class_pkts`, `PPOConfig.num_envs`) into the
option a user typed (`--buffer-pkts`, `--num-envs`).
"""
from __future__ import annotations

import argparse
import os
import re
import sys


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and "(default: X)" after every option's help that
    has a default of its own (an option left unset, None, says in its help what applies)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def prog_name(script: str | None) -> str | None:
    """The name a user typed for this command: a console command (`rlbm-simulate`, from
    pyproject.toml's [project.scripts]) under its own name, else the script's (`simulate.py`)."""
    typed = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return typed if typed.startswith("rlbm-") else script


def parser(doc: str, prog: str | None = None, print_config: bool = True) -> argparse.ArgumentParser:
    """The parser of a script: its docstring as the description, --version and (unless
    `print_config` is False: a parent of subcommands, which take it each) --print-config.
    Its name in usage, errors and --version is the command typed (`prog_name`)."""
    from rlbm_jax import __version__

    ap = argparse.ArgumentParser(description=doc, formatter_class=HelpFormatter, prog=prog_name(prog))
    ap.add_argument("--version", action="version", version=f"%(prog)s (rlbm_jax {__version__})",
                    help="print the script's name and rlbm_jax's version, and exit")
    if print_config:
        add_print_config(ap)
    return ap


def add_print_config(ap) -> None:
    ap.add_argument("--print-config", action="store_true",
                    help="print the configuration this command would run (every option resolved: the env's "
                         "parameters, seeds, outputs; what its output records) as JSON, and exit without running")


def printed_config(a, config: dict) -> bool:
    """Print `config` (a script's `run_config(a)`) and say so when --print-config was given.

    Every script builds the configuration it runs in one function, `run_config(args)`:
    each option it takes resolved into the objects it runs (the env's parameters through
    `params.config_record`, the grid, the seeds, the trainer's config, the output paths).
    Its output records that configuration, and tests/test_flags.py checks that every
    option of every script changes it."""
    if getattr(a, "print_config", False):
        from rlbm_jax import jsonio

        print(jsonio.dumps(config))
        return True
    return False


def flag_of(ap: argparse.ArgumentParser) -> dict:
    """{dest: its first long option} of every option of `ap`."""
    out = {}
    for action in ap._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in out:
            out[action.dest] = longs[0]
    return out


def name_flags(message: str, fields: dict) -> str:
    """`message` with each library field name in `fields` ({field: "--flag"}) replaced by
    its option: the error a user can act on.  A name with an underscore (or written
    `PPOConfig.name`) is replaced wherever it stands; a plain word ("load") only where it
    is the subject of the complaint ("load must ...", "load range ..."), so that prose
    ("nothing to resume") is left alone."""
    for field in sorted(fields, key=len, reverse=True):
        flag = fields[field]
        name = rf"(?<![\w.-])(?:PPOConfig\.)?{re.escape(field)}(?![\w-])"
        message = re.sub(rf"(?<![\w-])PPOConfig\.{re.escape(field)}(?![\w-])", flag, message)
        if "_" in field:
            message = re.sub(name, flag, message)
        else:
            message = re.sub(name + r"(?=\s+(?:must|range|has)\b)", flag, message)
    return message


def add_param_args(ap, names=None, *, groups=None, exclude=(), title: str | None = None) -> None:
    """One option per declared parameter (`rlbm_jax.env.model.PARAMS`; `names` or the
    `groups` given, less `exclude`), each left unset (None) unless given, so that the
    scenario's value applies; `param_kw` reads them back.  Flags, types, choices and help
    come from the declaration, so a new parameter is an option of every script that takes
    its group."""
    from rlbm_jax.env import model

    chosen = [p for p in model.PARAMS if (names is None or p.name in names) and (groups is None or p.group in groups)
              and p.name not in exclude]
    by_group = {}
    for p in chosen:
        by_group.setdefault(p.group, []).append(p)
    for group, params in by_group.items():
        g = ap.add_argument_group(title or f"{group} (unset: the scenario's value, else the simulator's default)")
        for p in params:
            help_ = f"{p.doc} (simulator default: {p.default_text})"
            kw = dict(dest=p.name, default=None, help=help_)
            if p.per_group:  # one value, or one per flow group
                kw = {**kw, "nargs": "+", "help": help_.replace(" (simulator default", "; several: one per flow group "
                                                                "(simulator default")}
            if p.kind == "bool":
                g.add_argument(p.option, action=argparse.BooleanOptionalAction, **kw)
            elif p.kind == "choice":
                typ = int if p.keeps_value else str
                g.add_argument(p.option, type=typ, choices=list(p.values()), **kw)
            elif p.kind in ("floats", "ints"):
                g.add_argument(p.option, type=float if p.kind == "floats" else int, nargs="+", **kw)
            else:
                g.add_argument(p.option, type={"float": float, "int": int}.get(p.kind, str), **kw)


def param_kw(a, names=None) -> dict:
    """The declared parameters given on the command line (`add_param_args`), as make_params
    keyword arguments (a per-class list of one value as that value)."""
    from rlbm_jax.env import model

    out = {}
    for p in model.PARAMS:
        v = getattr(a, p.name, None)
        if v is None or (names is not None and p.name not in names):
            continue
        out[p.name] = v[0] if isinstance(v, list) and len(v) == 1 else v
    return out


def param_flags() -> dict:
    """{parameter name: its option} of every declared parameter (errors name the option)."""
    from rlbm_jax.env import model

    return {p.name: p.option for p in model.PARAMS}


# the simulator's TCP-model choices (`model`'s "tcp-model" group), as flags of the scripts
# that build a scenario; unset, a flag keeps the simulator's default (ns-3.37's)
def _model_flags() -> tuple:
    from rlbm_jax.env import model

    return tuple(p.name for p in model.PARAMS if p.group == "tcp-model")


MODEL_FLAGS = _model_flags()


def add_model_args(ap) -> None:
    """One option per TCP-model choice (--rto-recovery, --prr, ...; `model_kw` reads them back)."""
    add_param_args(ap, MODEL_FLAGS, title="TCP model (unset: the simulator's default, which follows ns-3.37)")


def model_kw(a, complete: bool = False) -> dict:
    """The TCP-model flags that were given, as make_params keyword arguments; with
    `complete`, every choice, the simulator's default where a flag is unset."""
    from rlbm_jax.env import model

    out = param_kw(a, MODEL_FLAGS)
    if complete:
        out = {k: out.get(k, model.DEFAULTS[k]) for k in MODEL_FLAGS}
    return out


def add_backend_arg(ap, whole_scenarios: bool = False) -> None:
    """--backend: which engine runs the simulator (`apply_backend` sets it).  Only scripts
    that run whole scenarios (`whole_scenarios`: simulate.py, bench_env.py) offer a backend
    that does not advance the packet tick (fluid); the others drive the tick."""
    from rlbm_jax.env import backends

    names = [n for n in backends.NAMES if whole_scenarios or n == "auto" or backends.BACKENDS[n].ticks]
    extra = (", fluid (the fluid model of the one-FIFO scenarios, long-lived and web-search flows: "
             "differentiable; flow completions and mean slowdowns, no timeouts, retransmissions or tails)") \
        if "fluid" in names else ""
    ap.set_defaults(tick_backends_only=not whole_scenarios)
    ap.add_argument("--backend", choices=names, default=None,
                    help="the simulator's tick: native (C++, compiled on first use), jax (the reference), or auto "
                         f"(native where it can run){extra}; unset: $RLBM_JAX_BACKEND, else auto")


def apply_backend(a) -> str:
    """Make --backend the simulator's default for this process; returns the backend in force."""
    from rlbm_jax.env import backends

    if getattr(a, "backend", None):
        backends.set_default(a.backend)
    name = backends.default()
    if getattr(a, "tick_backends_only", False) and name != "auto" and not backends.BACKENDS[name].ticks:
        raise SystemExit(f"error: ${backends.BACKEND_VAR}={name}: the {name} backend runs whole scenarios, and "
                         "this script drives the packet tick (use jax, native or auto)")
    return name


# what a training run leaves in its directory: any one of them, and the directory holds a run
RUN_FILES = ("config.json", "metrics.csv", "checkpoints", "trained.msgpack", "policy")


def held_run(run) -> list[str]:
    """The files of a training run that the directory `run` holds (empty: none, or no directory)."""
    from pathlib import Path

    return [f for f in RUN_FILES if (Path(run) / f).exists()]


def add_overwrite_arg(ap) -> None:
    ap.add_argument("--overwrite", action="store_true",
                    help="replace the run that --run-dir holds (without it a run directory that holds a run is "
                         "refused: nothing trained is replaced silently)")


def refuse_held_run(run, *, overwrite: bool, resume: bool = False, how: str = "") -> None:
    """A ValueError when the training run directory `run` holds a run (`held_run`) and
    neither --overwrite nor a resume (`resume`) was given; `how` names another way on (", --resume
    continues it")."""
    if resume and overwrite:
        raise ValueError("--resume continues the run in --run-dir and --overwrite replaces it: give one")
    if not resume and not overwrite and (held := held_run(run)):
        raise ValueError(f"{run} holds a run ({', '.join(held)}){how}: --overwrite replaces it, or name another "
                         "--run-dir")


def add_ppo_train_args(t, *, run_dir: str, recipe: dict, episode_s: float, step: str) -> None:
    """The options of a study's PPO `train` subcommand: the run directory, --overwrite, the
    training seeds, the PPO sizes (defaults from `recipe`), updates, time budget, chunk, lr
    and episode length (`step` says what a step is: "5 ms")."""
    t.add_argument("--run-dir", default=run_dir)
    add_overwrite_arg(t)
    t.add_argument("--seed", type=int, default=0, help="first training seed")
    t.add_argument("--num-seeds", type=int, default=3, help="independent training seeds, vmapped")
    t.add_argument("--num-envs", type=int, default=64, help="envs per seed")
    t.add_argument("--num-steps", type=int, default=recipe["num_steps"], help=f"rollout length ({step} steps)")
    t.add_argument("--updates", type=int, default=200, help="PPO updates at most")
    t.add_argument("--time-budget-s", type=float, default=None, help="stop after this much training wall time")
    t.add_argument("--chunk", type=int, default=5, help="updates per compiled call (checkpoint and budget check)")
    t.add_argument("--lr", type=float, default=recipe["lr"])
    t.add_argument("--episode-s", type=float, default=episode_s)


def ppo_train_config(a, recipe: dict, flags: dict) -> dict:
    """The PPO config (`PPOConfig.to_dict`) of a study's `train` options (`add_ppo_train_args`)
    on `recipe`, their ranges checked (a ValueError names the option, `flags`)."""
    from rlbm_jax.ppo import PPOConfig

    if a.num_seeds < 1 or a.chunk < 1:
        raise ValueError("--num-seeds and --chunk must be >= 1")
    if a.time_budget_s is not None and not a.time_budget_s > 0:
        raise ValueError(f"--time-budget-s must be positive, got {a.time_budget_s}")
    ppo = {**recipe, "num_envs": a.num_envs, "num_steps": a.num_steps, "total_updates": a.updates, "lr": a.lr}
    try:
        return PPOConfig.from_dict(ppo).to_dict()
    except ValueError as e:
        raise ValueError(name_flags(str(e), flags)) from None


def train_ppo_run(prog: str, make_ppo, a, cfg: dict, flags: dict, label: str, reward_name: str = "reward",
                  init_from: str | None = None) -> int:
    """A study's `train`: the trainer `make_ppo()` checked against the device's memory (a
    ValueError names the option, `flags`), config.json with the device, then
    `study.trainer.train_seeds` on cfg's seeds into cfg's run_dir; prints the summary."""
    from pathlib import Path

    import jax

    from rlbm_jax import jsonio
    from rlbm_jax.ppo import memory
    from rlbm_jax.study import trainer

    run = Path(cfg["run_dir"])
    try:
        ppo = make_ppo()
        note = memory.check(ppo, len(cfg["seeds"]))  # refuses a run too large for the device, before compiling
    except ValueError as e:
        return fail(prog, name_flags(str(e), flags))
    if note:
        print(note, file=sys.stderr)
    run.mkdir(parents=True, exist_ok=True)
    jsonio.write(run / "config.json", {**cfg, "device": jax.devices()[0].device_kind, "backend": jax.default_backend()})
    try:
        summary = trainer.train_seeds(ppo, seeds=cfg["seeds"], run=run, updates=a.updates, chunk=a.chunk,
                                      time_budget_s=a.time_budget_s, init_from=init_from, label=label,
                                      reward_name=reward_name)
    except ValueError as e:
        return fail(prog, str(e))
    print(jsonio.dumps(summary))
    return 0


def add_export_ns3(sub, *, run_dir: str, ns3_help: str, seeds: int, seconds: float, warmup_s: float):
    """A study's `export` and `ns3` subcommands with the options they share (the run, where
    ns3's results go, the test seeds, jobs, run length and warm-up); returns (export, ns3)."""
    x = sub.add_parser("export", help="write each training seed's policy (policy dir and ONNX), checked")
    x.add_argument("--run-dir", default=run_dir)
    n = sub.add_parser("ns3", help=ns3_help)
    n.add_argument("--run-dir", default=run_dir)
    n.add_argument("--out-dir", default=None, help="where results go (default: <run-dir>/ns3)")
    n.add_argument("--seeds", type=int, default=seeds, help="the first K test seeds")
    n.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    n.add_argument("--seconds", type=float, default=seconds, help="simulated seconds per run")
    n.add_argument("--warmup-s", type=float, default=warmup_s, help="left out of every score")
    return x, n


def subcommand_main(prog: str, build_parser, run_config, commands: dict, argv=None) -> int:
    """The `main` of a script with subcommands (a study's train, evaluate, export, ns3):
    parse, resolve `run_config(args)` (a ValueError is the user's error, exit 2), refuse a
    `train` into a directory that holds a run without --overwrite, print the config for
    --print-config, else run `commands[cmd](args, config, argv)` (a "module:function" string
    is imported first: a subcommand's heavy imports wait until it runs)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    try:
        cfg = run_config(a)
        if a.cmd == "train":
            refuse_held_run(a.run_dir, overwrite=a.overwrite)
    except ValueError as e:
        return fail(prog, str(e))
    if printed_config(a, cfg):
        return 0
    fn = commands[a.cmd]
    if isinstance(fn, str):
        import importlib

        mod, name = fn.split(":")
        fn = getattr(importlib.import_module(mod), name)
    return fn(a, cfg, argv)


def fail(prog: str, message: str, code: int = 2) -> int:
    print(f"{prog_name(prog)}: error: {message}", file=sys.stderr)
    return code


def add_grid_args(ap, *, seeds: int):
    """The thesis-grid options that scripts/evaluate.py and scripts/eval_ns3.py share."""
    from rlbm_jax import scenarios
    from rlbm_jax.simulate import BASELINES

    g = scenarios.THESIS_GRID
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=BASELINES, help="baselines to run")
    ap.add_argument("--tcp", nargs="+", default=list(g["tcp"]), choices=list(g["tcp"]), help="TCPs of the grid")
    ap.add_argument("--buffer-pkts", type=int, nargs="+", default=list(g["buffer_per_class_pkts"]),
                    help="per-class buffers N of the grid")
    ap.add_argument("--load", type=float, nargs="+", default=list(g["load"]), help="loads of the grid")
    ap.add_argument("--seeds", type=int, default=seeds, help="held-out seeds per cell")
    ap.add_argument("--first-seed", type=int, default=100_000, help="seeds are first-seed, first-seed+1, ...")
    ap.add_argument("--reward", default=None, help="reward to score on (a name of rlbm_jax.env.formulations."
                    "REWARDS); default: the policy's formulation's")
    add_model_args(ap)
