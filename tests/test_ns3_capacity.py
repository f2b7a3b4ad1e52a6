"""The ns-3 scenario under a capacity schedule (`--capacity_in`): the bottleneck device's rate
follows the table, utilisation is against the capacity it offered, and the harness passes a
cell's `capacity_schedule` to ns-3 as that table (calibration/run.py --grid capacity pairs
it with our simulator)."""
import json
import math
import subprocess

import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import capacity, model
from rlbm_jax.ns3 import harness

HALVES = capacity.Schedule(np.array([0.0, 1.0]), np.array([10e6, 5e6]), name="halves")  # 10, then 5 Mbit/s


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _cell(schedule, seconds=2.0, **over):
    # 8 long NewReno flows (a saturated link), one droptail FIFO of 1 BDP at 10 Mbit/s, RTT 20 ms
    kw = scenarios.long_flows(8, 1.0, bottleneck_rate_bps=10e6, warmup_s=0.5, capacity_schedule=schedule, **over)
    return harness.Cell("cap", "long", kw, seconds)


def test_the_rate_halves_at_one_second_and_utilisation_is_against_the_offered_capacity(ns3_binary, tmp_path):
    out = harness.run_ns3(ns3_binary, [_cell(HALVES)], [1], 1, tmp_path, show_progress=False, interval_s=0.5)["cap"]
    rows, rep = out["intervals"][0], out["seeds"][0]
    deq = [float(r["dequeues_pkts"]) for r in rows]
    assert len(deq) == 4
    # a full 0.5 s at 10 Mbit/s: 10e6 * 0.5 / (1040 B * 8) = 601 data packets; then half that
    per_pkt = (1000 + 40) * 8
    assert deq[1] == pytest.approx(10e6 * 0.5 / per_pkt, rel=0.02)
    assert deq[3] == pytest.approx(5e6 * 0.5 / per_pkt, rel=0.02)
    assert deq[3] / deq[1] == pytest.approx(0.5, abs=0.02)
    # the measured window [0.5, 2]: 5 Mbit at 10 Mbit/s, 5 Mbit at 5 Mbit/s
    assert rep["capacity_mean_bps"] == pytest.approx(10e6 / 1.5)
    assert 0.97 < rep["util_wire"] <= 1.001
    assert rep["config"]["capacity_rows"] == 2 and rep["config"]["capacity_period_s"] == "inf"
    assert "--capacity_in=" in out["example_cmd"]


def test_a_repeating_schedule_repeats_and_a_new_schedule_is_not_read_from_the_cache(ns3_binary, tmp_path):
    # 10 Mbit/s for 0.25 s, 2.5 Mbit/s for 0.25 s, repeating every 0.5 s: a mean of 6.25 Mbit/s
    flip = capacity.Schedule(np.array([0.0, 0.25]), np.array([10e6, 2.5e6]), 0.5, name="flip")
    a = harness.run_ns3(ns3_binary, [_cell(flip)], [1], 1, tmp_path, show_progress=False)["cap"]
    assert a["seeds"][0]["capacity_mean_bps"] == pytest.approx(6.25e6)
    assert a["seeds"][0]["goodput_bps"] == pytest.approx(6.25e6 * 1000 / 1040, rel=0.03)
    b = harness.run_ns3(ns3_binary, [_cell(HALVES)], [1], 1, tmp_path, show_progress=False)["cap"]
    assert b["cached_runs"] == 0 and b["seeds"][0]["capacity_mean_bps"] == pytest.approx(10e6 / 1.5)
    assert harness.run_ns3(ns3_binary, [_cell(HALVES)], [1], 1, tmp_path, show_progress=False)["cap"]["cached_runs"] == 1
    # the runs' records (committed as caches by some grids) name the package's files relative to the repository
    root = str(harness.repo_root())
    assert all(root not in f.read_text() for f in tmp_path.glob("*.json"))


def test_the_harness_passes_a_schedule_as_its_table_and_nothing_without_one(tmp_path):
    assert model.BY_NAME["capacity_schedule"].ns3_option == "capacity_in"
    assert not any(a.startswith("--capacity_in") for a in harness.ns3_args(_cell("none"), 1))
    args = harness.ns3_args(_cell("step"), 1, tmp_path / "run")
    assert f"--capacity_in={tmp_path / 'run'}.capacity.csv" in args
    assert capacity.from_csv(tmp_path / "run.capacity.csv").digest == capacity.load("step").digest
    with pytest.raises(ValueError, match="rate of 0"):
        harness.ns3_args(_cell("cellular"), 1, tmp_path / "run")


def test_the_scenario_refuses_a_bad_table(ns3_binary, tmp_path):
    base = [str(ns3_binary), "--long_flows=1", "--load=0", "--seconds=0.1", f"--out={tmp_path / 'r.json'}"]
    for text, why in (("time_s,rate_bps\n0,20e6\n", "exceeds bottleneck_rate_bps"),
                      ("0,1e6\n1,0\n", "> 0"),
                      ("0.5,1e6\n", "start at 0"),
                      ("0,1e6\n1,\n2,1e6\n", "after the end row")):
        path = tmp_path / "cap.csv"
        path.write_text(text)
        proc = subprocess.run([*base, f"--capacity_in={path}"], capture_output=True, text=True)
        assert proc.returncode == 2 and why in proc.stderr, (text, proc.stderr)
    # no option: the constant rate, and utilisation against it as before
    proc = subprocess.run(base, capture_output=True, text=True, check=True)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert "capacity_mean_bps" not in rep and rep["config"]["capacity_rows"] == 0
    assert math.isfinite(rep["util_wire"])
