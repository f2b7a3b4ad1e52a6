"""The ns-3 side of `bench_env --ns3`: one ns-3.37 process of the benchmarked scenario,
timed from start to exit (`rlbm_jax.ns3.harness.time_ns3`), and every row's ratio to it."""
import json

import pytest

from rlbm_jax import scenarios
from rlbm_jax.ns3 import harness
from rlbm_jax.cli import bench_env


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def test_time_ns3_covers_the_requested_time_under_load(ns3_binary):
    # 1 Gbit/s, load 0.6: about 35 web-search flows a second, so the schedule's last flow
    # starts near the end of the half second and ns-3 must reach it
    kw = scenarios.kw("dumbbell", rate_bps=1e9, seconds=0.5)
    cell = harness.bench_cell("dumbbell/1G", kw, 0.5)
    assert cell.kind == "thesis" and cell.kw["arrival_stop_s"] == 0.5 > kw["arrival_stop_s"]
    r = harness.time_ns3(cell, seed=3, binary=ns3_binary)
    assert r["ns3_sim_seconds"] == 0.5 and r["ns3_seed"] == 3
    assert r["ns3_flows_scheduled"] >= 5
    assert r["ns3_flows_started"] == r["ns3_flows_scheduled"]
    assert 0.35 < r["ns3_last_flow_start_s"] < 0.5
    assert 0 < r["ns3_util_wire"] <= 1.0
    # the process (start to exit) holds ns-3's own Simulator::Run
    assert r["ns3_wall_s"] >= r["ns3_run_wall_s"] > 0
    assert r["ns3_sim_seconds_per_wall_s"] == pytest.approx(0.5 / r["ns3_wall_s"])
    for arg in ("--seconds=0.5", "--seed=3", "--bottleneck_rate_bps=1000000000.0", "--arrival_stop_s=0.5",
                "--flows_in=<tmp>/schedule.csv"):
        assert arg in r["ns3_cmd"].split(), (arg, r["ns3_cmd"])


def test_time_ns3_refuses_a_missing_binary(tmp_path):
    cell = harness.bench_cell("thesis", scenarios.kw("thesis"), 0.5)
    with pytest.raises(RuntimeError, match="no ns-3 scenario binary"):
        harness.time_ns3(cell, binary=tmp_path / "rlbm_scenario")


def test_bench_env_ns3_times_the_same_scenario_and_gives_each_row_its_ratio(ns3_binary, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench_env.main(["--scenario", "thesis", "--num-envs", "2", "--seconds", "0.05", "--ns3",
                           "--ns3-seconds", "0.5", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    ref = d["ns3"]
    assert ref["ns3_sim_seconds"] == 0.5 and ref["ns3_sim_seconds_per_wall_s"] > 0
    assert ref["ns3_flows_started"] == ref["ns3_flows_scheduled"]
    # the thesis cell as benchmarked: its rate, delays, buffer, TCP, load, sizes; arrivals as given (45 s)
    args = ref["ns3_cmd"].split()
    for k, v in scenarios.kw("thesis").items():
        if k in harness.NOT_NS3:
            continue
        flag = {"buffer_per_class_pkts": "class_cap_pkts"}.get(k, k)
        shown = {"cdf": "rlbm_jax/env/data/websearch.csv"}.get(k, ",".join(map(str, v)) if isinstance(v, tuple) else v)
        assert f"--{flag}={shown}" in args, (flag, args)
    (row,) = d["results"]
    assert row["x_ns3"] == pytest.approx(row["sim_seconds_per_wall_s"] / ref["ns3_sim_seconds_per_wall_s"])
    text = capsys.readouterr().out
    assert "ns-3.37, one process" in text and "x ns-3" in text


def test_bench_env_ns3_fails_clearly_when_the_build_fails(monkeypatch, capsys):
    def broken():
        raise RuntimeError("ns-3 scenario build failed: no compiler")

    monkeypatch.setattr(harness, "build_ns3", broken)
    assert bench_env.main(["--num-envs", "1", "--ns3"]) == 1
    assert "--ns3: ns-3 scenario build failed: no compiler" in capsys.readouterr().err


def test_bench_env_takes_a_cached_ns3_rate_and_the_aqm_cell(tmp_path, capsys, monkeypatch):
    """--ns3-rate stands for --ns3 (each row's ratio against the rate given, recorded as
    given); the red-ecn cell is the AQM studies' one: 8 CUBIC flows with ECN through RED at
    50 Mbit/s.  (The timing itself is `bench`'s, which the thesis case above runs: here a
    stand-in row, so that no tick is compiled.)"""
    monkeypatch.setattr(bench_env, "bench", lambda p, n, seconds, repeats=2: {
        "num_envs": n, "pkts_per_tick": p.pkts_per_tick, "ticks": 1, "sim_seconds_per_wall_s": 10.0,
        "env_ticks_per_s": 1.0, "wall_s": 1.0, "compile_s": 0.0, "devices": 1})
    out = tmp_path / "bench.json"
    assert bench_env.main(["--scenario", "red-ecn", "--num-envs", "2", "--seconds", "0.02", "--ns3-rate", "4.0",
                           "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    (cfg,) = d["config"]["config"]
    assert (cfg["policy"], cfg["ecn"], cfg["tcp"], cfg["long_flows"], cfg["bottleneck_rate_bps"]) == \
        ("red", True, "cubic", 8, 50e6)
    assert d["config"]["ns3"] == {"cached_sim_seconds_per_wall_s": 4.0}
    (row,) = d["results"]
    assert row["x_ns3"] == pytest.approx(10.0 / 4.0)
    assert "given by --ns3-rate, not measured" in capsys.readouterr().out
    for bad in (["--ns3-rate", "0"], ["--ns3-rate", "5", "--ns3"]):
        assert bench_env.main(["--num-envs", "1", *bad]) == 2
        assert "--ns3-rate takes a positive number" in capsys.readouterr().err


def test_time_ns3_counts_long_flows_beside_the_schedule_and_lfq_runs_its_drop_tail_stand_in(ns3_binary):
    """QueuePilot's cell starts long-lived flows beside the scheduled web-search ones (ns-3
    counts both); LFQ's one flow through a fair queue of cap c is a drop-tail FIFO of floor(c)
    in ns-3, which has no plain fair queue."""
    kw = scenarios.kw("queuepilot")
    r = harness.time_ns3(harness.bench_cell("queuepilot", kw, 1.5), seed=2, binary=ns3_binary)
    assert kw["long_flows"] > 0 and 1.5 > kw.get("long_flow_start_s", 0.0) + kw["long_flow_start_spread_s"]
    assert r["ns3_flows_started"] == r["ns3_flows_scheduled"] + kw["long_flows"]
    cell = bench_env.ns3_cell("lfq", 1.0)
    cap = scenarios.kw("lfq")["fq_flow_cap_pkts"]
    assert cell.kind == "long" and cell.kw["policy"] == "droptail"
    assert cell.kw["buffer_per_class_pkts"] == cell.kw["buffer_pkts"] == int(cap)
    with pytest.raises(ValueError, match="no fair queue"):
        bench_env.ns3_cell("lfq", 1.0, long_flows=2)
