"""Command-line entry points and the policy file format."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import simulate as simulate_cli  # noqa: E402

from rlbm_jax.policy import load_policy, save_policy  # noqa: E402

REQUIRED = ["util_wire", "goodput_bps", "drop_rate", "queue_mean_pkts", "queue_p99_pkts", "fct_mean_s",
            "fct_p99_s", "slowdown_p50", "slowdown_p99", "flows_started", "flows_completed", "flows_refused",
            "sim_seconds", "wall_s"]
SMALL = ["--seconds", "2", "--seeds", "2", "--load", "0.9", "--long-flows", "1", "--no-progress"]


def test_simulate_baseline_json(tmp_path):
    out = tmp_path / "r.json"
    assert simulate_cli.main(["--scenario", "thesis", "--policy", "dt", "--tcp", "newreno", *SMALL,
                              "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    for k in REQUIRED:
        assert k in d, k
    assert d["policy"] == "dt" and len(d["per_seed"]) == 2
    assert d["sim_seconds"] == pytest.approx(2.0, abs=0.01)
    assert 0 < d["util_wire"] <= 1.0
    assert d["flows_started"] >= 1


def _random_policy(path, obs_dim=10, act_dim=2, seed=0):
    rng = np.random.default_rng(seed)
    w = [(rng.normal(size=(obs_dim, 16)) * 0.3, np.zeros(16)), (rng.normal(size=(16, act_dim)) * 0.3, np.zeros(act_dim))]
    return save_policy(path, w, obs_mean=np.zeros(obs_dim), obs_std=np.ones(obs_dim))


def test_simulate_with_policy_directory(tmp_path):
    pol = _random_policy(tmp_path / "pol")
    out = tmp_path / "r.json"
    assert simulate_cli.main(["--policy", str(pol), *SMALL, "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["policy"] == str(pol) and d["flows_started"] >= 1


def test_policy_loader_checks_shapes(tmp_path):
    pol = _random_policy(tmp_path / "pol", obs_dim=5)
    with pytest.raises(ValueError, match="width 5"):
        load_policy(pol, obs_dim=10, act_dim=2)
    fn, meta = load_policy(pol)
    a = np.asarray(fn(np.zeros((3, 5), np.float32)))
    assert a.shape == (3, 2) and (a >= 0).all() and (a <= 1).all()


def test_simulate_rejects_unknown_policy(capsys):
    assert simulate_cli.main(["--policy", "fifo-of-doom", *SMALL]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_simulate_rejects_bad_parameter(capsys):
    assert simulate_cli.main(["--bottleneck-bps", "0", *SMALL]) == 2
    assert "bottleneck_rate_bps" in capsys.readouterr().err


def test_bench_env_prints_numbers(capsys):
    import bench_env
    assert bench_env.main(["--num-envs", "2", "--seconds", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "sim-s/wall-s" in out and "env-ticks/s" in out
