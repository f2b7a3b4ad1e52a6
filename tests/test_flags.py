"""Every option of every script reaches what it names.

Each script (`rlbm_jax.cli.<name>` with a `main`) builds the configuration it runs in one
function, `run_config(args)`, from which it runs and which its output records; `--print-config`
prints it.  For every option of every parser (and of every subcommand), the test gives a
value other than the default and checks that the configuration changes; an option that
names a declared model parameter must also show its value under that parameter's name.
The options are read from the parsers, so a new option is covered without editing this
file; one whose value cannot be guessed from its type (a path that must exist) takes a
sample from `SAMPLES`."""
import argparse
import atexit
import functools
import importlib
import json
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest

from rlbm_jax import cli, jsonio
from rlbm_jax.env import model
from rlbm_jax.env import params as params_mod
from tests.conftest import other_value

ROOT = Path(__file__).resolve().parents[1]
CLI_DIR = Path(cli.__file__).parent
SCRIPTS = sorted(p.stem for p in CLI_DIR.glob("*.py") if p.stem != "__init__" and "\ndef main(" in p.read_text())
SKIP_DEST = {"help", "version", "print_config"}

POLICY = str(ROOT / "results/train_default/policy")
QP_RUN = str(ROOT / "results/queuepilot")
ABS_RUN = str(ROOT / "results/abs")
LFQ_RUN = str(ROOT / "results/lfq")
APG_RUN = str(ROOT / "results/apg")



@pytest.fixture(autouse=True, scope="module")
def _build_params_once():
    """The scripts' configurations resolve and build the same `SimParams` again and again
    (each study's training mix and test grid, each sized from a make_params); `params.resolve`
    and `params.build` are pure functions of their arguments, so this file computes each
    distinct one once (the checks and the leaves' move to the device are most of its cost): a
    fresh copy of the resolved dict (callers edit it), the same immutable params."""
    resolve, build, resolved, built = params_mod.resolve, params_mod.build, {}, {}

    def key(d):
        try:
            return pickle.dumps(sorted(d.items()))
        except Exception:  # (an unpicklable value: not cached)
            return None

    def cached_resolve(**kw):
        k = key(kw)
        if k is None:
            return resolve(**kw)
        if k not in resolved:
            resolved[k] = resolve(**kw)  # (a refusal raises, and is not cached)
        return dict(resolved[k])

    def cached_build(r, device=True):
        k = key(r)
        if k is None:
            return build(r, device)
        if (k, device) not in built:
            built[k, device] = build(r, device)
        return built[k, device]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(params_mod, "resolve", cached_resolve)
        mp.setattr(params_mod, "build", cached_build)
        yield


def _study_fixture() -> Path:
    """A training run of the kit's queuepilot study (its config; the weights are not read
    by a configuration) and two results folders whose ledgers hold a selection of it."""
    root = Path(tempfile.mkdtemp(prefix="rlbm_flags_study_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    run = root / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"study": "queuepilot", "recipe": "lstm", "ppo": {}, "seeds": [0],
                                                 "episode_s": 10.0}))
    (run / "trained.msgpack").write_bytes(b"")
    for r in ("results", "results2"):
        (root / r).mkdir()
        (root / r / "ledger.json").write_text(json.dumps({"study": "queuepilot", "entries": [
            {"stage": "select", "seeds": {"selection": [1000]}, "tried": [],
             "chosen": {"droptail": "droptail", "codel": "codel-5ms"},
             "chosen_recipe": {"recipe": "lstm", "run_dir": str(run)}}]}))
    return root


STUDY = _study_fixture()


def _tune_fixture(knob: str) -> Path:
    """A training run of the kit's tune-<knob> study (its config and tuned points; a
    configuration reads no more)."""
    run = STUDY / f"tune_{knob}"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"study": f"tune-{knob}", "recipe": "adam", "agent": "fluid-tune",
                                                 "fluid_tune": {"steps": 1}, "seeds": [0]}))
    (run / "tuned_seed0.json").write_text(json.dumps({"point": {}}))
    return run


TUNE_RUN, TUNE_BUFFER_RUN = str(_tune_fixture("red")), str(_tune_fixture("buffer"))
# what comes before a script's subcommand (study.py's study name)
PREFIX = {"study": ["queuepilot"]}

# the arguments every invocation of a script (or subcommand) starts from
BASE_ARGV = {
    ("study", ("train",)): ["--results", str(STUDY / "results")],
    ("study", ("select",)): ["--runs", str(STUDY / "run"), "--results", str(STUDY / "results")],
    ("study", ("test",)): ["--results", str(STUDY / "results")],
    ("study", ("export",)): ["--results", str(STUDY / "results")],
    ("study", ("ns3",)): ["--results", str(STUDY / "results")],
    ("study", ("report",)): ["--results", str(STUDY / "results")],
    ("export_onnx", ()): ["--checkpoint", POLICY, "--out", "policy.onnx"],
    ("eval_ns3", ()): ["--onnx", str(ROOT / "results/ns3_eval/policy.onnx")],  # required
    ("queuepilot", ("export",)): ["--run-dir", QP_RUN],
    ("queuepilot", ("ns3",)): ["--run-dir", QP_RUN],
    ("queuepilot", ("evaluate",)): ["--run-dir", QP_RUN],
    ("abs", ("evaluate",)): ["--run-dir", ABS_RUN],
    ("abs", ("export",)): ["--run-dir", ABS_RUN],
    ("abs", ("ns3",)): ["--run-dir", ABS_RUN],
    ("lfq", ("ns3",)): ["--run-dir", LFQ_RUN],  # its exported graphs
    ("lfq", ("evaluate",)): ["--run-dir", LFQ_RUN],
    ("train_apg", ("evaluate",)): ["--run-dir", APG_RUN],
    ("train_apg", ("export",)): ["--run-dir", APG_RUN],
    ("tune_aqm", ("evaluate",)): ["--run-dir", TUNE_RUN],
    ("tune_aqm", ("export",)): ["--run-dir", TUNE_RUN],
    ("lfq", ("export",)): ["--run-dir", LFQ_RUN],
}

# values that the parser's type and default cannot give: (script, subcommand, dest) -> argv tokens
SAMPLES = {
    **{("study", (stage,), "results"): [str(STUDY / "results2")]
       for stage in ("train", "select", "test", "export", "ns3", "report")},
    ("study", ("select",), "runs"): [str(STUDY / "run" / ".." / "run")],
    ("study", ("select",), "selection_seeds"): ["2"],  # at most len(queuepilot's SELECTION_SEEDS)
    ("study", ("select",), "baselines"): ["pie-5ms"],
    ("study", ("test",), "test_seeds"): ["2"],
    ("study", ("export",), "run_dir"): [str(STUDY / "run" / ".." / "run")],
    ("study", ("ns3",), "run_dir"): [str(STUDY / "run" / ".." / "run")],
    ("study", ("train",), "recipe"): ["lstm-paper-lr"],  # a declared recipe other than the first
    ("study", ("train",), "num_envs"): ["32"],
    ("study", ("select",), "seconds"): ["30"],  # above the study's warm-up
    ("study", ("test",), "seconds"): ["30"],
    ("study", ("train",), "run_dir"): ["runs/other"],
    ("simulate", (), "policy"): ["sb-sophisticated"],
    ("simulate", (), "json"): ["out.json"],
    ("simulate", (), "plot"): ["run.png"],
    ("train", (), "action_map"): ["pow2"],
    ("evaluate", (), "policy"): [POLICY],
    ("evaluate", (), "name"): [],  # with one --policy: see PAIRED
    ("evaluate", (), "reward"): ["penalties"],  # a name of formulations.REWARDS
    ("eval_ns3", (), "reward"): ["penalties"],
    # the one committed thesis ONNX policy, named by another path
    ("eval_ns3", (), "onnx"): [str(ROOT / "results/ns3_eval/../ns3_eval/policy.onnx")],
    ("reward_analysis", (), "policy"): [POLICY],
    ("bench_env", (), "json"): ["out.json"],
    ("bench_train", (), "json"): ["out.json"],
    ("export_onnx", (), "checkpoint"): [str(ROOT / "results/train_4096_h100")],  # another run's policy/
    ("export_onnx", (), "out"): ["other.onnx"],
    # the one committed QueuePilot run, named by another path
    ("queuepilot", ("evaluate",), "run_dir"): [str(ROOT / "results/queuepilot/../queuepilot")],
    ("queuepilot", ("export",), "run_dir"): [str(ROOT / "results/queuepilot/../queuepilot")],
    ("queuepilot", ("ns3",), "run_dir"): [str(ROOT / "results/queuepilot/../queuepilot")],
    ("queuepilot", ("train",), "init_from"): [str(ROOT / "results/queuepilot/trained.msgpack")],
    ("queuepilot", ("evaluate",), "out_dir"): ["out"],
    ("queuepilot", ("evaluate",), "seconds"): ["30"],  # above the study's warm-up
    ("queuepilot", ("evaluate",), "baselines"): ["pie-5ms"],  # a declared variant
    ("queuepilot", ("evaluate",), "test_seeds"): ["2"],  # at most len(TEST_SEEDS)
    ("queuepilot", ("evaluate",), "selection_seeds"): ["2"],  # at most len(SELECTION_SEEDS)
    ("queuepilot", ("ns3",), "out_dir"): ["out"],
    ("queuepilot", ("ns3",), "seeds"): ["2"],  # at most len(TEST_SEEDS)
    ("queuepilot", ("ns3",), "configs"): ["10:20:newreno"],  # N:RTT_MS:TCP
    ("queuepilot", ("ns3",), "variants"): ["pie-5ms"],  # a name of queuepilot.study.baseline_variants
    ("train_apg", ("evaluate",), "run_dir"): [str(ROOT / "results/apg/../apg")],
    ("train_apg", ("export",), "run_dir"): [str(ROOT / "results/apg/../apg")],
    ("train_apg", ("evaluate",), "out_dir"): ["out"],
    ("train_apg", ("export",), "out_dir"): ["out"],
    ("train_apg", ("evaluate",), "seconds"): ["30"],  # above the study's warm-up
    ("train_apg", ("evaluate",), "test_seeds"): ["2"],
    ("train_apg", ("evaluate",), "selection_seeds"): ["2"],
    ("train_apg", ("evaluate",), "baselines"): ["pie-5ms"],
    ("tune_aqm", ("evaluate",), "run_dir"): [TUNE_RUN + "/../tune_red"],
    ("tune_aqm", ("export",), "run_dir"): [TUNE_RUN + "/../tune_red"],
    ("tune_aqm", ("evaluate",), "out_dir"): ["out"],
    ("tune_aqm", ("export",), "out_dir"): ["out"],
    ("tune_aqm", ("evaluate",), "seconds"): ["30"],  # above the study's warm-up
    ("tune_aqm", ("evaluate",), "test_seeds"): ["2"],
    ("tune_aqm", ("evaluate",), "selection_seeds"): ["1"],
    ("tune_aqm", ("evaluate",), "baselines"): ["start"],
    ("lfq", ("train",), "num_envs"): ["32"],
    ("lfq", ("evaluate",), "test_seeds"): ["1"],  # at most len(lfq.study.TEST_SEEDS)
    ("lfq", ("evaluate",), "selection_seeds"): ["1"],  # at most len(studies.lfq.SELECTION_SEEDS)
    ("lfq", ("evaluate",), "baselines"): ["fq-100"],
    ("lfq", ("evaluate",), "run_dir"): [str(ROOT / "results/lfq/../lfq")],
    ("lfq", ("export",), "run_dir"): [str(ROOT / "results/lfq/../lfq")],
    ("lfq", ("evaluate",), "out_dir"): ["out"],
    ("lfq", ("export",), "out_dir"): ["out"],
    ("lfq", ("ns3",), "run_dir"): [str(ROOT / "results/lfq/../lfq")],
    ("lfq", ("ns3",), "test_seeds"): ["1"],  # at most len(lfq.study.TEST_SEEDS)
    ("lfq", ("ns3",), "out_dir"): ["out"],
    ("lfq", ("ns3",), "configs"): ["15.5:10.5:cubic"],  # RATE_MBPS:DELAY_MS:TCP
    ("lfq", ("ns3",), "baselines"): ["fq-100"],  # names of lfq.study.BASELINES
    ("bench_lfq", (), "json"): ["out.json"],
    ("abs", ("evaluate",), "run_dir"): [str(ROOT / "results/abs/../abs")],
    ("abs", ("export",), "run_dir"): [str(ROOT / "results/abs/../abs")],
    ("abs", ("ns3",), "run_dir"): [str(ROOT / "results/abs/../abs")],
    ("abs", ("evaluate",), "seconds"): ["30"],  # above the study's warm-up
    ("abs", ("train",), "num_envs"): ["32"],  # divisible by the recipe's minibatches
    ("abs", ("ns3",), "traces"): ["step"],
    ("abs", ("ns3",), "tcp"): ["cubic"],
    ("abs", ("evaluate",), "out_dir"): ["out"],
    ("abs", ("ns3",), "out_dir"): ["out"],
    ("abs", ("evaluate",), "test_seeds"): ["2"],  # at most len(abs.study.TEST_SEEDS)
    ("abs", ("evaluate",), "selection_seeds"): ["2"],  # at most len(abs.study.SELECTION_SEEDS)
    ("abs", ("evaluate",), "baselines"): ["fix-10"],
    ("abs", ("ns3",), "baselines"): ["fix-10"],
    ("tune_aqm", (), "grid"): ["max_p=0.2,0.4"],  # AXIS=V,V,... of the knob's grid
    ("tune_aqm", (), "tcp"): ["cubic"],  # a TCP the fluid model implements
    ("cc_bench", (), "rtts_ms"): ["20", "20:100"],  # R or R0:R1 in ms
    ("cc_bench", (), "orca"): [POLICY],  # a policy directory (not read by a configuration)
    ("cc_bench", (), "aurora"): [POLICY],
    ("cc_bench", (), "out"): ["out"],
}
# the same for an option of that name in every script
DEST_SAMPLES = {
    "backend": ["jax"],  # unset means auto
}
# options that only make sense with another: (script, subcommand, dest) -> the extra argv
PAIRED = {
    ("train", (), "resume"): ["--resume", "--run-dir", str(ROOT / "results/train_default")],
    ("evaluate", (), "name"): ["--policy", POLICY, "--name", "mine"],
    ("bench_env", (), "ns3_seconds"): ["--ns3", "--ns3-seconds", "41"],
    ("export_onnx", (), "seed"): ["--checkpoint", QP_RUN, "--seed", "1"],
    ("tune_aqm", ("evaluate",), "knob"): ["--knob", "buffer", "--run-dir", TUNE_BUFFER_RUN],
    ("tune_aqm", ("export",), "knob"): ["--knob", "buffer", "--run-dir", TUNE_BUFFER_RUN],
    # an agent drives long flows
    ("simulate", (), "agent_flows"): ["--long-flows", "2", "--agent-flows", "1"],
    # incast's fan-in and query rate come together
    ("simulate", (), "incast_fan_in"): ["--incast-fan-in", "1", "--incast-query-rate-per-s", "2"],
    ("simulate", (), "incast_query_rate_per_s"): ["--incast-query-rate-per-s", "2", "--incast-fan-in", "1"],
    # flow statistics measure long flows
    ("simulate", (), "flow_stats"): ["--scenario", "long", "--long-flows", "2", "--flow-stats"],
    ("simulate", (), "flow_sample_s"): ["--scenario", "long", "--long-flows", "2", "--flow-stats",
                                        "--flow-sample-s", "0.02"],
}


def invocations():
    """(script, subcommand tuple, parser) of every parser of every script."""
    out = []
    for name in SCRIPTS:
        mod = importlib.import_module(f"rlbm_jax.cli.{name}")
        if not hasattr(mod, "build_parser"):
            continue  # test_every_script_is_covered says so
        ap = mod.build_parser()
        subs = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            out += [(name, (cmd,), sp) for cmd, sp in subs[0].choices.items()]
        else:
            out.append((name, (), ap))
    return out


INVOCATIONS = invocations()


def options(ap):
    return [a for a in ap._actions if a.option_strings and a.dest not in SKIP_DEST
            and not isinstance(a, argparse._SubParsersAction)]


def _tokens(v) -> list[str]:
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


def sample_argv(script, sub, action) -> list[str]:
    """argv tokens giving `action` a value other than its default."""
    flag = next(o for o in action.option_strings if o.startswith("--"))
    key = (script, sub, action.dest)
    if key in PAIRED:
        return PAIRED[key]
    if key in SAMPLES:
        return [flag, *SAMPLES[key]]
    if action.dest in DEST_SAMPLES:
        return [flag, *DEST_SAMPLES[action.dest]]
    q = model.BY_NAME.get(action.dest)
    if q is not None and flag == q.option and not (isinstance(action.nargs, int) and action.nargs > 0):  # (a range)
        v = other_value(q)
        if q.kind == "bool":
            return [flag if v else "--no-" + flag[2:]]
        return [flag, *_tokens(v)]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [flag] if not action.default else ["--no-" + flag[2:]]
    if action.nargs == 0:  # store_true / store_false / store_const
        return [flag]
    default = action.default
    if action.choices:
        pool = [c for c in action.choices if c != default and not (isinstance(default, list) and [c] == default)]
        if isinstance(default, list) and action.nargs in ("*", "+"):
            return [flag, *_tokens([c for c in action.choices if c not in default][:1] or list(action.choices)[:1])]
        return [flag, str(pool[0])]
    if action.type in (int, float):
        base = default[0] if isinstance(default, (list, tuple)) and default else default
        if base is None or base == 0:
            v = action.type(1)
        else:  # halved (a float: a rate, a fraction, a step), doubled (an int: a count, a size)
            v = base * 2 if action.type is int else base * 0.5
        count = action.nargs if isinstance(action.nargs, int) else 1
        return [flag, *[str(action.type(v * (k + 1))) for k in range(count)]]
    if isinstance(default, str):
        return [flag, default + "-other"]
    pytest.fail(f"{script} {' '.join(sub)} {flag}: no sample value; add one to SAMPLES in tests/test_flags.py",
                pytrace=False)


def config_of(script, sub, argv):
    if not argv:
        return json.loads(_default_config(script, sub))
    return json.loads(_config_json(script, sub, argv))


def _config_json(script, sub, argv):
    mod = importlib.import_module(f"rlbm_jax.cli.{script}")
    a = mod.build_parser().parse_args([*PREFIX.get(script, []), *sub, *BASE_ARGV.get((script, sub), []), *argv])
    return jsonio.dumps(mod.run_config(a))


@functools.lru_cache(maxsize=None)
def _default_config(script, sub):
    """The configuration of a script with no option given: computed once per script (and
    subcommand) for every option's comparison; a fresh copy each time (json text)."""
    return _config_json(script, sub, [])


def _find(tree, key):
    """Every value stored under `key` anywhere in the nested config."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key:
                yield v
            yield from _find(v, key)
    elif isinstance(tree, list):
        for v in tree:
            yield from _find(v, key)


CASES = [pytest.param(s, sub, a.dest, id=f"{s}{'-' + sub[0] if sub else ''}-{a.dest}")
         for s, sub, ap in INVOCATIONS for a in options(ap)]


@pytest.mark.quick
def test_every_script_is_covered():
    """Every script has `build_parser` and `run_config`; the enumeration finds options."""
    for name in SCRIPTS:
        mod = importlib.import_module(f"rlbm_jax.cli.{name}")
        assert callable(getattr(mod, "build_parser", None)), f"rlbm_jax.cli.{name} has no build_parser()"
        assert callable(getattr(mod, "run_config", None)), f"rlbm_jax.cli.{name} has no run_config(args)"
    assert len(SCRIPTS) >= 9 and len(CASES) > 100


@pytest.mark.quick
@pytest.mark.parametrize("script,sub,dest", CASES)
def test_every_option_changes_the_run_config(script, sub, dest):
    ap = dict(((s, su), p) for s, su, p in INVOCATIONS)[(script, sub)]
    action = next(a for a in options(ap) if a.dest == dest)
    argv = sample_argv(script, sub, action)
    base = config_of(script, sub, [])
    got = config_of(script, sub, argv)
    assert got != base, f"{script} {' '.join(sub)} {' '.join(argv)} left the run's configuration unchanged"
    q = model.BY_NAME.get(dest)
    if q is not None and q.option in argv:
        v = getattr(ap.parse_args([*sub, *BASE_ARGV.get((script, sub), []), *argv][len(sub):]), dest)  # the sub's own
        want = model.json_value(v[0] if isinstance(v, list) and len(v) == 1 else v)
        seen = list(_find(got, q.name))
        assert seen, f"{script}: the configuration has no entry {q.name!r}"
        assert any(s == want or (isinstance(s, list) and s[:len(_tokens(want))] == (want if isinstance(want, list)
                                                                                      else [want]))
                   for s in seen), (q.name, want, seen)


@pytest.mark.quick
@pytest.mark.parametrize("script,sub", [(s, su) for s, su, _ in INVOCATIONS])
def test_print_config_prints_the_run_config_and_runs_nothing(script, sub, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: the folder stays empty
    mod = importlib.import_module(f"rlbm_jax.cli.{script}")
    argv = [*PREFIX.get(script, []), *sub, *BASE_ARGV.get((script, sub), [])]
    assert mod.main([*argv, "--print-config"]) in (0, None)
    printed = json.loads(capsys.readouterr().out)
    assert printed == config_of(script, sub, [])
    assert not any(tmp_path.iterdir()), f"{script} --print-config wrote {sorted(tmp_path.iterdir())}"
