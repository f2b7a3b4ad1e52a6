"""Calibration smoke against ns-3.37: the ns-3 scenario builds (installing libns3-dev
when it is missing), refuses bad parameters, and three thesis cells agree with our
simulator within the calibration tolerances (`calibration/run.py`), one of them a cell
whose tail is set by timeouts."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlbm_jax import ns3 as harness
from rlbm_jax.env.params import LEGACY_TCP_MODEL

ROOT = Path(__file__).resolve().parents[1]


def _load_runner():
    spec = importlib.util.spec_from_file_location("calibration_run", ROOT / "calibration" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration_run"] = mod
    spec.loader.exec_module(mod)
    return mod


run = _load_runner()


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def test_ns3_scenario_rejects_bad_parameters(ns3_binary):
    for arg, name in (("--policy=foo", "policy"), ("--load=-1", "load"), ("--class_cap_pkts=0", "class_cap_pkts")):
        proc = subprocess.run([str(ns3_binary), arg, f"--cdf={harness.cdf_path('websearch')}", "--out=-"],
                              capture_output=True, text=True)
        assert proc.returncode == 2, (arg, proc.stdout[-500:], proc.stderr[-500:])
        assert name in proc.stderr


def test_ns3_conserves_flows_and_reports_our_fields(ns3_binary, tmp_path):
    cell = run.thesis_cell("cubic", 0.6, 100, seconds=20.0)
    res = harness.run_ns3(ns3_binary, [cell], [1], jobs=1, workdir=tmp_path, show_progress=False)[cell.name]
    rep = res["seeds"][0]
    ours = run.run_ours([cell], [1], show_progress=False)[cell.name]["seeds"][0]
    missing = {k for k in ours if k.startswith(("util", "drop", "queue_", "slowdown", "fct", "flows_"))} - set(rep)
    assert not missing, missing
    assert rep["flows_started"] == rep["flows_completed"] + rep["flows_unfinished"]
    assert len(res["flows"][0]) == rep["flows_completed"]
    assert rep["arrivals_c0"] + rep["arrivals_c1"] >= rep["drops_c0"] + rep["drops_c1"]
    assert np.isclose(sum(rep["queue_hist"]), 1.0, atol=1e-6)
    # every loss is repaired by a retransmission that crosses the buffer again
    assert rep["drops_c0"] + rep["drops_c1"] > 0
    assert rep["retx_arrivals"] >= 0.5 * (rep["drops_c0"] + rep["drops_c1"])
    assert 0 <= rep["retx_drops"] <= rep["retx_arrivals"]
    # a rerun with the same source, command and flow schedule is read back, not rerun
    again = harness.run_ns3(ns3_binary, [cell], [1], jobs=1, workdir=tmp_path, show_progress=False)[cell.name]
    assert (res["cached_runs"], again["cached_runs"]) == (0, 1)
    assert again["seeds"][0] == rep


def test_smoke_cells_agree_with_ns3_within_tolerance(ns3_binary, tmp_path):
    cells = run.grid("smoke")
    seeds = list(range(1, 6))
    ns3 = harness.run_ns3(ns3_binary, cells, seeds, jobs=2, workdir=tmp_path, show_progress=False)
    ours = run.run_ours(cells, seeds, show_progress=False)
    rows = run.compare(cells, ours, ns3)
    misses = [r for r in rows if r["within"] is False]
    assert not misses, json.dumps(misses, indent=1, default=float)
    assert sum(r["within"] is True for r in rows) == len(cells) * len(run.TOLERANCES)


def test_smoke_cell_whose_tail_depends_on_the_timeout_behaviour(ns3_binary, tmp_path):
    """NewReno at load 0.9 with 400 packets per class: queueing of up to 0.34 s against a
    10 ms RTO floor, so flows time out in fast recovery and resend their windows. With
    the default TCP model (ns-3.37's go-back-N after a timeout, RTT samples from
    cumulative ACKs) every checked metric agrees with ns-3, the pooled p99 of short flows
    too; with the model of rlbm_jax 0.2 (SACK-only resends, a sample from every ACK) the
    timeouts are a quarter of ns-3's and the short flows' tail misses."""
    cells = [run.timeout_smoke_cell()]
    seeds = list(range(1, 7))
    ns3 = harness.run_ns3(ns3_binary, cells, seeds, jobs=2, workdir=tmp_path, show_progress=False)
    rows = run.compare(cells, run.run_ours(cells, seeds, show_progress=False), ns3)
    assert all(r["within"] for r in rows if r["within"] is not None), json.dumps(rows, indent=1, default=float)
    rto = next(r for r in rows if r["metric"] == "rto_count")
    assert abs(rto["rel_err"]) < 0.25 and rto["ns3"] > 20
    legacy = [harness.Cell(c.name, c.kind, {**c.kw, **LEGACY_TCP_MODEL}, c.seconds) for c in cells]
    old = {r["metric"]: r for r in run.compare(cells, run.run_ours(legacy, seeds, show_progress=False), ns3)}
    assert old["rto_count"]["rel_err"] < -0.5
    assert old["pooled_p99_short"]["within"] is False and old["pooled_p99_short"]["rel_err"] > 0.25


def test_syn_stalls_counts_short_flows_held_about_one_syn_timeout():
    # rows: size_bytes, cls, fct_s, slowdown, start_s; ideal FCT = fct / slowdown
    seed1 = [[5_000, 0, 3.05, 3.05 / 0.05, 1.0],    # short, 3 s beyond its ideal: stalled
             [5_000, 0, 0.30, 6.0, 2.0],            # short, merely queued
             [2_000_000, 0, 4.6, 4.6 / 1.7, 3.0]]   # long: its FCT is mostly transmission
    seed2 = [[80_000, 0, 3.2, 3.2 / 0.09, 1.0]]
    assert run.syn_stalls([seed1, seed2]) == (2, 4)
    assert run.syn_stalls([seed1, seed2], syn_timeout_s=5.0) == (0, 4)
    assert run.syn_stalls([[]]) == (0, 0)
