"""What the scripts hand a user: strict JSON, --version, the license, and train.py's
refusal of sizes that cannot run here (one line naming the flag, no run directory left
behind, never a hang or the kernel's kill)."""
import importlib.metadata
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import rlbm_jax
from rlbm_jax import jsonio
from rlbm_jax.cli import simulate as simulate_cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("*.py")) + [ROOT / "calibration" / "run.py"]
# an address-space limit for the train.py runs below, so that what fits is the same on
# every machine: the sizes asked for are far larger, and an allocation past it fails
# instead of eating the machine's memory
LIMIT_BYTES = 8 * 2**30


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as strict parsers do."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_strict_loads_refuses_what_python_writes_for_nan():
    try:
        strict_loads(json.dumps({"x": float("nan")}))
    except ValueError as e:
        assert "NaN" in str(e)
    else:
        raise AssertionError("a NaN was accepted")


def test_jsonio_writes_every_non_finite_number_as_null(tmp_path):
    obj = {"nan": float("nan"), "inf": np.float32("inf"), "ninf": -math.inf, "ok": np.float32(0.5),
           "ints": (np.int64(3), 4), np.int32(7): np.bool_(True),
           "arr": np.array([1.0, np.nan, 2.0]), "jax": jnp.asarray([np.inf, 1.0]), "scalar": jnp.asarray(np.nan),
           "nested": [{"deep": [float("nan"), "text", None]}]}
    want = {"nan": None, "inf": None, "ninf": None, "ok": 0.5, "ints": [3, 4], "7": True, "arr": [1.0, None, 2.0],
            "jax": [None, 1.0], "scalar": None, "nested": [{"deep": [None, "text", None]}]}
    assert strict_loads(jsonio.dumps(obj)) == want
    jsonio.write(tmp_path / "sub" / "out.json", obj)
    assert strict_loads((tmp_path / "sub" / "out.json").read_text()) == want


def test_simulate_with_no_finished_flow_writes_strict_json(capsys):
    # two long flows for one second: no flow finishes, so every completion statistic has no
    # sample (NaN inside, null in the file)
    assert simulate_cli.main(["--scenario", "long", "--long-flows", "2", "--seconds", "1", "--seeds", "1",
                              "--no-progress", "--json", "-"]) == 0
    d = strict_loads(capsys.readouterr().out)
    assert d["flows_completed"] == 0 and d["flows_started"] == 2
    assert d["slowdown_p99"] is None and d["fct_p99_s"] is None
    assert d["tail"]["all"]["p99"] is None
    assert d["util_wire"] > 0  # the statistics that have samples keep their numbers


def _start(args):
    """python `args` in the repository, on the CPU, under `LIMIT_BYTES` of address space
    (`ulimit -v`)."""
    limit = f"ulimit -v {LIMIT_BYTES // 1024} && exec \"$0\" \"$@\""
    return subprocess.Popen(["sh", "-c", limit, sys.executable, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})


def _finish(p, timeout_s: float):
    """(stdout, stderr) of a started process; one still running after `timeout_s` is killed
    and fails the test (a hang)."""
    try:
        return p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError(f"still running after {timeout_s} s: {p.args}") from None


# runs each script as `python SCRIPT --version` would (as __main__, with that argv), in one
# process so that the imports are paid once; prints {script: [exit code, stdout]}
VERSION_DRIVER = """
import contextlib, io, json, runpy, sys
out = {}
for path in sys.argv[1:]:
    sys.argv, buf, code = [path, "--version"], io.StringIO(), None
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code
    out[path] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def test_every_script_answers_version():
    p = subprocess.run([sys.executable, "-c", VERSION_DRIVER, *map(str, SCRIPTS)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert len(got) == len(SCRIPTS) >= 10
    for script in SCRIPTS:
        code, out = got[str(script)]
        assert code == 0, script.name  # argparse's version action exits with 0
        assert out.strip() == f"{script.name} (rlbm_jax {rlbm_jax.__version__})"


def test_version_is_the_installed_distributions():
    assert rlbm_jax.__version__ == importlib.metadata.version("rlbm_jax")


def test_license_and_its_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "Copyright 2026 The rlbm_jax Authors" in text
    assert importlib.metadata.metadata("rlbm_jax")["License-Expression"] == "Apache-2.0"


def _train(tmp_path, name, *flags, code=None):
    """train.py (or `code` calling its main) with one update and `flags`, started."""
    run = tmp_path / name
    head = ["-c", code] if code else [ROOT / "scripts" / "train.py"]
    return run, _start([*head, "--updates", "1", "--no-progress", "--run-dir", run, *flags])


# runs each script as `python SCRIPT ARGS` would (as __main__, with that argv), one after the
# other in one process (under the same limit: the imports are paid once); prints
# [[exit code, stdout, stderr], ...]
SCRIPTS_DRIVER = """
import contextlib, io, json, runpy, sys
out = []
for argv in json.loads(sys.argv[1]):
    sys.argv, o, e, code = argv, io.StringIO(), io.StringIO(), None
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as x:
            code = x.code
    out.append([code, o.getvalue(), e.getvalue()])
print(json.dumps(out))
"""


def test_train_and_bench_train_refuse_sizes_that_cannot_run_before_compiling(tmp_path):
    train = [str(ROOT / "scripts" / "train.py"), "--updates", "1", "--no-progress", "--run-dir"]
    runs = {
        # more memory than there is: refused by the estimate, before anything is allocated
        "1e6 envs": (tmp_path / "a", ["--num-envs", "1000000"], ["--num-envs", "more than"]),
        "3e5 envs": (tmp_path / "b", ["--num-envs", "300000"], ["--num-envs", "more than"]),
        # a batch past int32's indices
        "1e8 envs": (tmp_path / "c", ["--num-envs", "100000000"], ["--num-envs x --num-steps", "int32"]),
        # an optimiser step count past int32 (the later --updates wins)
        "1e9 updates": (tmp_path / "d", ["--updates", "1000000000"], ["--updates", "int32"]),
    }
    argvs = [[*train, str(run), *flags] for run, flags, _ in runs.values()]
    # bench_train.py checks every size asked for before it compiles the first
    argvs.append([str(ROOT / "scripts" / "bench_train.py"), "--num-envs", "64", "1000000"])
    p = _start(["-c", SCRIPTS_DRIVER, json.dumps(argvs)])
    out, err = _finish(p, 240)
    assert p.returncode == 0 and err == "", err  # nothing written past the scripts' own streams
    got = json.loads(out)
    for what, (run, _, words), (code, _, err) in zip(runs, runs.values(), got):
        assert code == 2, (what, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("train.py: error: "), (what, err)
        assert all(w in lines[0] for w in words), (what, lines[0])
        assert not run.exists(), what
    code, out, err = got[-1]
    assert code == 2 and out == "", err
    assert err.strip().startswith("bench_train.py: error: one update of 1,000,000 envs") and "--num-envs" in err
    assert len(err.strip().splitlines()) == 1


def test_train_that_runs_out_of_memory_fails_in_one_line_and_leaves_no_run_directory(tmp_path):
    # the estimate told that there is room (as it may be told wrongly): the allocation of the
    # initial env state fails, which XLA:CPU reports only to a caller that waits on it; the
    # first update that reads it would otherwise wait for ever
    code = ("import sys; from rlbm_jax.cli import train; from rlbm_jax.ppo import memory; "
            "memory.available = lambda device=None: (1e15, 'a test'); sys.exit(train.main(sys.argv[1:]))")
    run, p = _train(tmp_path, "oom", "--num-envs", "200000", "--backend", "jax", code=code)
    out, err = _finish(p, 120)
    assert p.returncode == 2, err
    errors = [ln for ln in err.splitlines() if ln.startswith("train.py: error: ")]
    assert len(errors) == 1 and "out of memory" in errors[0] and "--num-envs" in errors[0], err
    assert err.strip().splitlines()[-1] == errors[0]
    assert not run.exists()


def test_bad_numbers_on_the_command_line_fail_in_one_line_naming_the_flag(capsys):
    """inf, nan and sizes the machine cannot hold: one line on stderr, naming the option."""
    cases = [(["--seconds", "inf"], "--seconds must be a positive finite number"),
             (["--seconds", "nan"], "--seconds must be a positive finite number"),
             (["--load", "nan"], "--load must be a finite number"),
             (["--bottleneck-bps", "inf"], "--bottleneck-bps must be a finite number"),
             (["--seeds", "100000000"], "--seeds must be at most about"),
             (["--buffer-pkts", "1.5"], "invalid int value")]
    for args, message in cases:
        argv = ["--seconds", "1", "--seeds", "1", "--no-progress", *args]
        try:
            rc = simulate_cli.main(argv)
        except SystemExit as e:  # argparse's own refusal of a malformed value
            rc = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) >= 1 and message in err[-1], (args, err)
        assert "Traceback" not in "\n".join(err)


def test_simulate_draws_the_run(tmp_path, capsys):
    """--plot writes a figure of the run, and the JSON holds the series it draws."""
    png, out = tmp_path / "run.png", tmp_path / "run.json"
    assert simulate_cli.main(["--scenario", "thesis", "--load", "0.9", "--seconds", "6", "--seeds", "2",
                              "--no-progress", "--plot", str(png), "--json", str(out)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    series = json.loads(out.read_text())["series"]
    assert len(series["t_s"]) == len(series["queue_pkts"]) == len(series["util_wire"]) == 20
    assert 0.0 <= min(series["util_wire"]) and max(series["util_wire"]) <= 1.0 + 1e-6
    assert max(series["queue_pkts"]) > 0


def test_bench_env_refuses_a_batch_that_cannot_fit(capsys):
    from rlbm_jax.cli import bench_env

    assert bench_env.main(["--num-envs", "4", "100000000", "--seconds", "0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_env.py: error: --num-envs must be at most about")


def test_queuepilot_train_refuses_a_run_that_cannot_fit(tmp_path, capsys):
    from rlbm_jax.cli import queuepilot

    run = tmp_path / "qp"
    assert queuepilot.main(["train", "--num-envs", "10000000", "--updates", "1", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lower --num-envs" in err[0] and not run.exists()
