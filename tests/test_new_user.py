"""What a new user trips on after the first run: an output into a folder that is not there
yet, a figure that cannot be written, a dry run that must refuse what the run refuses, a run
directory that holds a run, the policy list, the fluid backend's help, means over seeds
that some seeds have no sample for, the README's own snippets, the console commands' names,
a progress bar on a very long run, and the fluid observation's sign."""
import io
import json
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlbm_jax
from rlbm_jax import cli, jsonio
from rlbm_jax import simulate as api
from rlbm_jax.cli import simulate, train
from rlbm_jax.env import make_params
from rlbm_jax.env.switch import buffer
from rlbm_jax.evaluate import mean_rows

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--num-envs", "4", "--num-steps", "3", "--updates", "2", "--num-minibatches", "2", "--episode-s", "0.3",
        "--buffer-pkts", "20", "60", "--checkpoint-every", "1"]
SHORT = ["--scenario", "thesis", "--seconds", "0.5", "--seeds", "1", "--no-progress"]


def readme_block(marker: str) -> str:
    """The README's ```python block that contains `marker`."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"README: {len(found)} python blocks contain {marker!r}"
    return found[0]


# 1. outputs into folders that do not exist yet; a figure that fails keeps the results

def test_plot_and_json_into_missing_folders_are_made_and_the_results_kept(tmp_path, capsys):
    plot, out = tmp_path / "fresh" / "t.png", tmp_path / "other" / "deep" / "r.json"
    assert simulate.main([*SHORT, "--plot", str(plot), "--json", str(out)]) == 0
    assert plot.stat().st_size > 0
    res = json.loads(out.read_text())
    assert res["plot"] == str(plot) and "plot_error" not in res and res["flows_started"] > 0


def test_a_figure_that_fails_loses_no_result(tmp_path, capsys, monkeypatch):
    def broken(*args, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(api, "plot_run", broken)
    assert simulate.main([*SHORT, "--plot", str(tmp_path / "t.png")]) == 1  # the JSON on stdout
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert res["plot_error"] == "OSError: disk full" and res["flows_started"] > 0
    assert "the figure was not written" in captured.err and "the results were" in captured.err


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(simulate, "run_scenario", lambda *a, **k: pytest.fail("ran"))
    (tmp_path / "file").write_text("")
    assert simulate.main([*SHORT, "--plot", str(tmp_path / "t.nosuchformat")]) == 2
    assert "no figure format 'nosuchformat'" in capsys.readouterr().err
    assert simulate.main([*SHORT, "--json", str(tmp_path / "file" / "r.json")]) == 2  # a file in the way
    assert "--json" in capsys.readouterr().err


# 3. a dry run refuses what the run refuses

@pytest.mark.parametrize("argv,message", [
    (["--load", "-1", "0.5"], "--load range must satisfy 0 <= lo <= hi"),
    (["--buffer-pkts", "0", "5"], "--buffer-pkts range must satisfy 1 <= lo <= hi"),
    (["--episode-s", "-1"], "--episode-s (-1.0) must be at least --agent-interval-s"),
])
def test_a_dry_run_refuses_what_the_run_refuses(argv, message, tmp_path, capsys):
    run = ["--run-dir", str(tmp_path / "r"), *argv]
    assert train.main([*run, "--print-config"]) == 2
    dry = capsys.readouterr()
    assert dry.out == "" and message in dry.err
    assert train.main(run) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "r").exists()


# 4. a run directory that holds a run

def test_a_run_directory_that_holds_a_run_is_refused_without_resume_or_overwrite(tmp_path, capsys):
    run = tmp_path / "big"
    run.mkdir()
    (run / "config.json").write_text('{"ppo": "an earlier run"}')
    (run / "metrics.csv").write_text("seed,update\n0,1\n")
    (run / "notes.txt").write_text("mine")
    assert train.main(["--run-dir", str(run), *TINY]) == 2
    err = capsys.readouterr().err
    assert "holds a run (config.json, metrics.csv)" in err and "--overwrite" in err
    assert train.main(["--run-dir", str(run), *TINY, "--print-config"]) == 2  # the dry run says so too
    assert (run / "config.json").read_text() == '{"ppo": "an earlier run"}'
    assert train.main(["--run-dir", str(run), "--resume", "--overwrite"]) == 2
    assert "give one" in capsys.readouterr().err
    # --overwrite replaces the run (nothing of the old one left), and keeps what is not a run's
    assert train.main(["--run-dir", str(run), *TINY, "--overwrite", "--stop-after", "0"]) == 0
    assert json.loads((run / "config.json").read_text())["overwrite"] is True
    assert not (run / "metrics.csv").exists() and (run / "notes.txt").read_text() == "mine"
    # a fresh directory, or one with no run in it, needs neither
    assert train.main(["--run-dir", str(tmp_path / "new"), *TINY, "--stop-after", "0"]) == 0


@pytest.mark.parametrize("study", ["queuepilot", "abs", "lfq"])
def test_a_study_run_directory_that_holds_a_run_is_refused_without_overwrite(study, tmp_path, capsys):
    """The studies' `train` keeps the same rule as train.py (`cli.refuse_held_run`), for the
    run and its dry run alike; --overwrite is recorded in the configuration."""
    import importlib

    mod = importlib.import_module(f"rlbm_jax.cli.{study}")
    run = tmp_path / "r"
    run.mkdir()
    assert mod.main(["train", "--run-dir", str(run), "--print-config"]) == 0  # an empty folder holds no run
    assert json.loads(capsys.readouterr().out)["overwrite"] is False
    (run / "trained.msgpack").write_bytes(b"weights")
    for argv in (["--print-config"], []):
        assert mod.main(["train", "--run-dir", str(run), *argv]) == 2
        err = capsys.readouterr().err
        assert f"{run} holds a run (trained.msgpack): --overwrite replaces it" in err
    assert (run / "trained.msgpack").read_bytes() == b"weights" and sorted(run.iterdir()) == [run / "trained.msgpack"]
    assert mod.main(["train", "--run-dir", str(run), "--overwrite", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["overwrite"] is True


# 5. the policy list is the registry

def test_the_policy_list_in_errors_and_help_is_the_registry(capsys):
    assert simulate.main(["--policy", "nosuch"]) == 2
    err = capsys.readouterr().err
    listed = re.search(r"neither one of (.*) nor a directory", err).group(1).split(", ")
    assert sorted(listed) == sorted(buffer.POLICY_NAMES)
    for name in ("static-bdp", "rl-size", "fq"):
        assert name in listed
    help_ = " ".join(simulate.build_parser().format_help().split())
    entry = re.search(r"--policy POLICY a registered buffer policy \((.*?)\) or a policy directory", help_)
    assert sorted(entry.group(1).replace("- ", "-").split("|")) == sorted(buffer.POLICY_NAMES)


# 6. the fluid backend's help says what it reports

def test_the_fluid_backends_help_says_it_reports_flow_completions(monkeypatch, capsys):
    from rlbm_jax.env import backends

    help_ = " ".join(simulate.build_parser().format_help().split())
    assert "no flow completions" not in help_ and "flow completions and mean slowdowns" in help_
    monkeypatch.setattr(backends, "_default", None)  # (--backend sets this process's default: undone after)
    assert simulate.main(["--scenario", "queuepilot", "--backend", "fluid", "--seconds", "1", "--seeds", "1",
                          "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["backend"] == "fluid" and "flows_completed" not in res["not_modelled"]
    assert res["flows_completed"] >= 1 and res["slowdown_p50"] >= 1.0


# 7. a mean over seeds says how many seeds it holds, and no std from one

def test_means_over_seeds_count_their_seeds_and_give_no_std_from_one():
    rows = [{"seed": 0, "slowdown_p99": 1.79, "util_wire": 0.5},
            {"seed": 1, "slowdown_p99": float("nan"), "util_wire": 0.7}]
    mean, std, n = api.over_seeds(rows)
    assert mean["slowdown_p99"] == 1.79 and n["slowdown_p99"] == 1 and np.isnan(std["slowdown_p99"])
    assert mean["util_wire"] == pytest.approx(0.6) and std["util_wire"] == pytest.approx(0.1) and n["util_wire"] == 2
    assert json.loads(jsonio.dumps({"std": std}))["std"]["slowdown_p99"] is None  # written as null
    out = mean_rows({"x": {"f": [[1.79, np.nan], [np.nan, np.nan], [1.0, 3.0]]}}, [("cubic", 100, 0.5)] * 3, ["f"])
    assert [(r["f_n"], r["f_std"] == r["f_std"]) for r in out] == [(1, False), (0, False), (2, True)]
    assert out[2]["f_std"] == pytest.approx(1.0)


def test_a_simulate_run_reports_how_many_seeds_each_field_holds(capsys):
    assert simulate.main(["--scenario", "thesis", "--seconds", "0.3", "--seeds", "2", "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_seeds"]["util_wire"] == 2
    for field, n in res["n_seeds"].items():
        per_seed = [r[field] for r in res["per_seed"]]
        assert n == sum(v is not None for v in per_seed), field
        assert (res["std"][field] is None) == (n < 2), field


# 8 and 9. the README's snippets run as written

def test_the_readme_rejax_snippet_trains_in_short_episodes(capsys):
    """The README's rejax recipe on QueuePilot-v0 (a Discrete action) trains as written:
    every step asked for taken, its one evaluation of 128 episodes run to the time limit,
    the networks moved (tests/test_third_party.py trains RLBM-v0, a Box action)."""
    ns = {}
    exec(compile(readme_block("rejax.PPO.create"), "README.md", "exec"), ns)
    steps, ret = capsys.readouterr().out.split()
    assert int(steps) == 4096 and np.isfinite(float(ret))
    lengths, returns, params = ns["lengths"], ns["returns"], ns["params"]
    assert lengths.shape == returns.shape == (1, 128)  # skip_initial_evaluation: one evaluation, at the end
    assert np.all(np.asarray(lengths) == int(params.max_steps_in_episode)) and int(params.max_steps_in_episode) == 40
    before = ns["algo"].init_state(jax.random.PRNGKey(0))
    moved = [not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(ns["ts"].actor_ts.params),
                                                     jax.tree.leaves(before.actor_ts.params))]
    assert any(moved)


def test_the_readme_bare_simulator_snippet_runs(capsys):
    exec(compile(readme_block("rlbm_jax.env.run("), "README.md", "exec"), {})
    util, flows = capsys.readouterr().out.split()
    assert 0.0 < float(util) <= 1.0 and int(flows) > 0


def test_the_readme_fluid_gradient_is_not_zero(capsys):
    exec(compile(readme_block("jax.grad(episode_return)"), "README.md", "exec"), {})
    g = float(capsys.readouterr().out.split()[-1])
    assert np.isfinite(g) and g < -10.0  # marking slows the ramp-up: the return falls


# 9. the console commands under their own names

def test_console_commands_go_by_their_own_names(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/rlbm-simulate"])
    with pytest.raises(SystemExit):
        simulate.main(["--version"])
    assert capsys.readouterr().out.startswith("rlbm-simulate (rlbm_jax ")
    assert simulate.main(["--policy", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("rlbm-simulate: error:")
    monkeypatch.setattr(sys, "argv", ["scripts/simulate.py"])
    assert cli.prog_name("simulate.py") == "simulate.py"


# 9. a long run shows progress before its first stretch ends; splitting a stretch changes nothing

def test_a_long_stretch_moves_the_bar_and_gives_the_same_run(monkeypatch):
    p = make_params(**rlbm_jax.scenarios.kw("thesis", load=0.9))
    whole = api.run_scenario(p, seconds=3.0, seeds=[3, 4], show_progress=False)
    seen = []
    monkeypatch.setattr(api, "CALL_MAX_TICKS", 25)  # a stretch of 125 ticks: 5 calls of 25 ticks
    monkeypatch.setattr(api.Progress, "update", lambda self, done, extra="", measure=True: seen.append((done, extra)))
    split = api.run_scenario(p, seconds=3.0, seeds=[3, 4], show_progress=True)
    assert seen[0] == (0, "compiling")  # a first line before anything compiles
    stretch = whole["series"]["t_s"][0]
    assert sum(0 < d < stretch for d, _ in seen) >= 4  # the bar moved inside the first stretch
    assert whole["flows_completed"] > 0
    for k in ("per_seed", "tail", "series"):
        assert jsonio.dumps(split[k]) == jsonio.dumps(whole[k]), k


# 9. the fluid observation's queue is never below 0

def test_the_fluid_queue_observation_is_never_negative():
    env, ep = rlbm_jax.make("QueuePilot-continuous-v0", scenario="queuepilot", load=0, backend="fluid")
    i = env.obs_layout.index("queue_buffer")

    def body(c, _):
        obs, st, _, _, _, _ = env.step(jax.random.PRNGKey(0), c[1], jnp.full((1,), 0.3), ep)
        return (obs, st), obs

    obs, st = env.reset(jax.random.PRNGKey(0), ep)
    obs_seq = jax.jit(lambda c: jax.lax.scan(body, c, None, length=60)[1])((obs, st))
    assert float(jnp.min(obs_seq[:, i])) >= 0.0
