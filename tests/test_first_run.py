"""What a new user meets first: resuming a run that never checkpointed, progress that
moves every update and says how long a CPU run will take, progress written into a log,
--help with defaults, errors in the user's own flags, and flow-size tables that are
refused row by row instead of half-read."""
import csv
import io
import json
import time

import jax
import pytest

from rlbm_jax.cli import bench_env, bench_train, eval_ns3, evaluate, export_onnx, simulate, train
from rlbm_jax.env import make_params, traffic
from rlbm_jax.env.randomize import thesis_randomized_env
from rlbm_jax.ppo import PPO, PPOConfig
from rlbm_jax.progress import Progress

# (the three updates in one chunk between checkpoints: one compiled chunk; the bar still moves
# every update, from inside it)
TINY = ["--num-envs", "4", "--num-steps", "3", "--updates", "3", "--num-minibatches", "2", "--episode-s", "0.3",
        "--buffer-pkts", "20", "60", "--checkpoint-every", "3"]


def _rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_resume_before_the_first_checkpoint_starts_the_run_and_an_empty_dir_says_so(tmp_path, capsys):
    # a run stopped before its first checkpoint (config.json written, no checkpoint)
    assert train.main(["--run-dir", str(tmp_path / "a"), *TINY, "--stop-after", "0"]) == 0
    assert (tmp_path / "a" / "config.json").is_file() and not any((tmp_path / "a" / "checkpoints").iterdir())
    capsys.readouterr()
    # resumed, it runs from update 0 with the saved config; the bar reports rate and ETA every
    # update, and (told that any run is long) warns when there is no accelerator
    assert train.main(["--run-dir", str(tmp_path / "a"), "--resume", "--warn-after-min", "0"]) == 0
    err = capsys.readouterr().err
    assert "no checkpoint yet" in err and "env-steps/s" in err and "ETA" in err
    assert ("warning: no accelerator" in err) == (jax.default_backend() == "cpu")
    assert [int(r["update"]) for r in _rows(tmp_path / "a" / "metrics.csv")] == [1, 2, 3]
    assert (tmp_path / "a" / "policy" / "policy.json").is_file()
    # nothing at all to resume: a one-line error, no traceback, nothing written
    assert train.main(["--run-dir", str(tmp_path / "c"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "Traceback" not in err and not (tmp_path / "c").exists()


def test_progress_into_a_file_writes_lines_and_on_a_terminal_redraws_one():
    log = io.StringIO()
    bar = Progress(4, unit=" updates", stream=log, every_s=0.0)  # StringIO is no terminal
    for i in range(5):
        bar.update(i)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and text.count("\n") == 5 and "4/4 updates" in text
    quiet = io.StringIO()
    bar = Progress(100, stream=quiet, every_s=3600.0)
    for i in range(1, 101):
        bar.update(i)
    bar.close()
    assert quiet.getvalue().count("\n") == 2  # the first line, then the last one: no flood
    term = io.StringIO()
    bar = Progress(4, stream=term, tty=True)
    bar.update(1)
    bar.update(2)
    bar.close()
    assert term.getvalue().count("\r") == 2 and term.getvalue().endswith("\n")


def test_rate_and_eta_are_measured_from_the_first_update_not_from_compiling():
    bar = Progress(10, stream=None)
    bar.update(0, measure=False)
    time.sleep(0.3)  # "compiling"
    bar.update(1)
    time.sleep(0.05)
    bar.update(2)
    assert 5 < bar.rate() < 40  # about 1 update per 0.05 s; with the compile in it, about 3 per s
    assert bar.eta_s() < 8 * 0.2


def test_ppo_reports_every_update_from_inside_one_compiled_chunk():
    env, ep = thesis_randomized_env(buffer_pkts=(20, 60), episode_s=0.3, completion_log_size=4)
    seen = []
    ppo = PPO(env, ep, PPOConfig(num_envs=4, num_steps=3, total_updates=4, num_minibatches=2),
              on_update=lambda u, r: seen.append((int(u), float(r))))
    ts, m = ppo.run(ppo.init(jax.random.PRNGKey(0)), 4)  # one call, one scan of 4 updates
    jax.block_until_ready(ts)
    assert [u for u, _ in seen] == [1, 2, 3, 4]
    assert [r for _, r in seen] == pytest.approx([float(x) for x in m["reward_mean"]], rel=1e-6)


@pytest.mark.parametrize("module,option,default", [
    (train, "--num-envs", "256"), (train, "--updates", "160"), (train, "--env", "RLBM-thesis-v0"),
    (simulate, "--seconds", "60.0"), (simulate, "--policy", "sb-naive"), (evaluate, "--seeds", "5"),
    (eval_ns3, "--jobs", "2"), (export_onnx, "--flows-scale", "10.0"), (bench_env, "--pkts-per-tick", "[1]"),
    (bench_train, "--num-steps", "32")])
def test_help_shows_every_default(module, option, default, capsys):
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(option + " "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-")), len(lines))
    entry = " ".join(" ".join(lines[start:end]).split())  # the option's help, unwrapped
    assert f"(default: {default})" in entry, entry


@pytest.mark.parametrize("text,message", [
    ("size_bytes,cdf\n0,0\n0,1\n", "line 3: flows of 0 bytes get probability 1"),  # all-zero sizes: refused
    ("size_bytes,cdf\n100,0\n200,0.5,9\n300,1\n", "line 3: expected 2 columns"),  # an extra column
    ("size_bytes,cdf\n100,0\n2OO,0.5\n300,1\n", "line 3: '2OO,0.5' is not two numbers"),  # a typo, not a header
    ("# sizes\nsize_bytes,cdf\n100,0\n300,0.4\n200,1\n", "line 5: the size_bytes column must be non-decreasing"),
    ("size_bytes,cdf\n100,0\n200,0.6\n300,0.4\n400,1\n", "line 4: the cdf column must be non-decreasing"),
    ("100,0.1\n0,0.1\n", "line 2: the size_bytes column"),
    ("size_bytes,cdf\n", "no (size_bytes, cdf) rows"),
])
def test_bad_cdf_rows_are_refused_with_their_line(tmp_path, text, message):
    f = tmp_path / "sizes.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_params(cdf=str(f))


def test_simulate_records_the_cdf_used_and_refuses_a_bad_one(tmp_path, capsys):
    small = ["--seconds", "0.5", "--seeds", "1", "--load", "0.5", "--no-progress"]
    out = tmp_path / "ws.json"
    assert simulate.main([*small, "--json", str(out)]) == 0
    ws = json.loads(out.read_text())["cdf"]
    table = traffic.load_table("websearch")
    assert ws == {"name": "websearch", "rows": int(table.size_bytes.size), "mean_bytes": table.mean_bytes,
                  "sha256": table.digest}
    custom = tmp_path / "mine.csv"
    custom.write_text("size_bytes,cdf\n1000,0\n5000,1\n")
    assert simulate.main([*small, "--cdf", str(custom), "--json", str(tmp_path / "c.json")]) == 0
    mine = json.loads((tmp_path / "c.json").read_text())["cdf"]
    assert mine["name"] == "mine" and mine["sha256"] != ws["sha256"] and mine["mean_bytes"] == 3000.0
    custom.write_text("size_bytes,cdf\n1000,0\n5000,1\n")  # the same values, the same digest
    assert simulate.main([*small, "--cdf", str(custom), "--json", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["cdf"]["sha256"] == mine["sha256"]
    capsys.readouterr()
    custom.write_text("size_bytes,cdf\n0,0\n0,1\n")
    assert simulate.main([*small, "--cdf", str(custom)]) == 2
    assert "line 3: flows of 0 bytes" in capsys.readouterr().err
