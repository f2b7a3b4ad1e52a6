"""Command-line entry points and the policy file format."""
import json

import numpy as np
import pytest

from rlbm_jax.cli import bench_env, simulate as simulate_cli
from rlbm_jax.env import formulations
from rlbm_jax.policy import load_policy, save_policy

THESIS = formulations.get("RLBM-thesis-v0")

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
    # the tail by flow size, pooled over the seeds: every finished flow in exactly one bucket
    tail = d["tail"]
    assert sum(tail[b]["flows"] for b in ("short", "medium", "long")) == tail["all"]["flows"]
    assert tail["all"]["flows"] == sum(r["flows_completed"] for r in d["per_seed"])
    assert tail["all"]["p50"] <= tail["all"]["p99"]
    assert {"rto_count", "retx_arrivals", "retx_drops", "spurious_retx"} <= set(d)


def test_pooled_tail_buckets_flows_by_size_and_pools_runs():
    from rlbm_jax.env.metrics import pooled_tail

    run1 = [[50_000, 0, 0.1, 2.0, 1.0], [500_000, 0, 0.5, 3.0, 1.0], [2_000_000, 1, 2.0, 1.5, 1.0]]
    run2 = [[10_000, 0, 0.1, float(s), 2.0] for s in range(1, 100)]
    t = pooled_tail([run1, run2])
    assert (t["short"]["flows"], t["medium"]["flows"], t["long"]["flows"], t["all"]["flows"]) == (100, 1, 1, 102)
    assert t["short"]["p99"] == pytest.approx(np.percentile([2.0, *range(1, 100)], 99))
    assert t["long"]["p50"] == 1.5 and pooled_tail([run1])["short"]["p99"] == 2.0
    assert pooled_tail([run1], warmup_s=1.5)["all"]["flows"] == 0 and np.isnan(pooled_tail([[]])["short"]["p50"])


def test_simulate_takes_the_tcp_model_flags(tmp_path):
    out = tmp_path / "m.json"
    assert simulate_cli.main(["--tcp", "cubic", *SMALL, "--rto-recovery", "sack", "--rtt-samples", "every-ack",
                              "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["config"]["rto_recovery"] == "sack" and d["spurious_retx"] == 0


def _random_policy(path, layout=THESIS.obs_layout(2), act_dim=2, seed=0):
    rng = np.random.default_rng(seed)
    obs_dim = len(layout)
    w = [(rng.normal(size=(obs_dim, 16)) * 0.3, np.zeros(16)), (rng.normal(size=(16, act_dim)) * 0.3, np.zeros(act_dim))]
    return save_policy(path, w, obs_mean=np.zeros(obs_dim), obs_std=np.ones(obs_dim), obs_layout=layout,
                       formulation=THESIS.id, num_classes=2)


def test_simulate_with_policy_directory(tmp_path):
    pol = _random_policy(tmp_path / "pol")
    out = tmp_path / "r.json"
    assert simulate_cli.main(["--policy", str(pol), *SMALL, "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["policy"] == str(pol) and d["flows_started"] >= 1


def test_policy_loader_checks_the_observation_layout(tmp_path):
    layout = THESIS.obs_layout(2)
    pol = _random_policy(tmp_path / "pol", layout=layout[:5])
    with pytest.raises(ValueError, match="width 5"):
        load_policy(pol, obs_layout=layout, act_dim=2)
    # the same width with another entry order is refused too, naming the first difference
    swapped = _random_policy(tmp_path / "swapped", layout=(layout[1], layout[0]) + layout[2:])
    with pytest.raises(ValueError, match="entry 0: 'beta_c1' expected, 'beta_c0' given"):
        load_policy(swapped, obs_layout=layout)
    fn, meta = load_policy(pol)
    a = np.asarray(fn(np.zeros((3, 5), np.float32)))
    assert a.shape == (3, 2) and (a >= 0).all() and (a <= 1).all()
    with pytest.raises(ValueError, match="obs_layout names 4 entries, the network takes 5"):
        save_policy(tmp_path / "bad", [(np.zeros((5, 2)), np.zeros(2))], obs_mean=np.zeros(5), obs_std=np.ones(5),
                    obs_layout=layout[:4])
    # a map that reads the observation refuses a layout without its entries
    with pytest.raises(ValueError, match="action map 'bdp' reads"):
        save_policy(tmp_path / "bdp", [(np.zeros((5, 2)), np.zeros(2))], obs_mean=np.zeros(5), obs_std=np.ones(5),
                    obs_layout=[f"x{i}" for i in range(5)], action_map="bdp")


def test_simulate_rejects_unknown_policy(capsys):
    assert simulate_cli.main(["--policy", "fifo-of-doom", *SMALL]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_simulate_errors_name_the_flag_not_the_field(capsys):
    for args, flag, field in ((["--bottleneck-bps", "0"], "--bottleneck-bps", "bottleneck_rate_bps"),
                              (["--buffer-pkts", "0"], "--buffer-pkts", "buffer_per_class_pkts"),
                              (["--flow-slots", "2", "--senders", "4"], "--flow-slots", "num_flow_slots")):
        assert simulate_cli.main([*args, *SMALL]) == 2
        err = capsys.readouterr().err
        assert flag in err and field not in err, err


def test_bench_env_prints_numbers(capsys):
    assert bench_env.main(["--num-envs", "2", "--seconds", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "sim-s/wall-s" in out and "env-ticks/s" in out
