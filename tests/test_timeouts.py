"""calibration/timeouts.py: each simulator's retransmission timeouts, all listed and split
by the sender's state, the flow's size and window, and chains."""
import dataclasses
import json
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from rlbm_jax.ns3 import harness

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ns3_binary():
    return harness.build_ns3()


def _load():
    spec = importlib.util.spec_from_file_location("calibration_timeouts", ROOT / "calibration" / "timeouts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration_timeouts"] = mod
    spec.loader.exec_module(mod)
    return mod


to = _load()


def test_timeout_chains_split_a_flow_at_a_gap_and_keep_flows_and_seeds_apart():
    ev = lambda seed, t, start=1.0, size=5e6: to.Timeout(seed, t, start, size, 2.0, "OPEN")
    events = [ev(1, 2.0), ev(1, 2.5), ev(1, 3.4), ev(1, 4.4), ev(1, 4.9),  # 3 then 2 (3.4 -> 4.4 is a gap)
              ev(2, 2.0), ev(1, 2.1, start=1.5)]  # another seed, another flow: one each
    assert to.chains(events) == {3: 1, 2: 1, 1: 2}
    s = to.summary(events, runs=2)
    assert s["per_run"] == 3.5 and s["flows_per_run"] == 2.0
    assert s["in_chains"] == {"1": 1.0, "2": 1.0, "3-9": 1.5, "10+": 0.0}
    assert s["size_window"]["> 1 MB, cwnd <= 4"] == 3.5
    assert s["short_flows_first"] == {st: 0.0 for st in to.STATES}  # every flow here is 5 MB


def test_slowed_flows_are_held_by_a_timeout_first_then_a_lost_syn_else_neither():
    """A flow with a timeout counts under the state of its first (even if its SYN was lost
    too); one without, held >= 0.95 SYN timeouts beyond its ideal, under the lost SYN; the
    rest under neither.  Keys pair flows by seed, start (to the ms) and size."""
    ideal = 0.05
    row = lambda size, fct, start: [size, 0.0, fct, fct / ideal, start]  # LOG_FIELDS
    flows = [[row(4e3, 3.1, 1.0),      # held by a SYN timeout: 3.05 s beyond the ideal
              row(4e3, 2.0, 2.0),      # a timeout in RECOVERY (its second in OPEN)
              row(4e3, 3.2, 3.0),      # a timeout in OPEN and a lost SYN: the timeout
              row(4e3, 0.6, 4.0),      # slowed 12x by queueing: neither
              row(4e3, 0.06, 5.0)],    # not slowed
             [row(4e3, 2.0, 2.0)]]     # seed 2's flow with the same key as seed 1's: no timeout
    ev = lambda seed, t, start, st: to.Timeout(seed, t, start, 4e3, 2.0, st)
    events = [ev(1, 2.5, 2.0004, "OPEN"), ev(1, 2.2, 2.0, "RECOVERY"), ev(1, 6.0, 3.0, "OPEN"),
              ev(1, 9.0, 7.0, "LOSS")]  # a flow that did not finish
    h = to.held_by(flows, [1, 2], events, syn_timeout_s=3.0)
    assert h["30x"] == {**{k: 0 for k in to.HELD_BY}, "a lost SYN": 1, "a timeout in RECOVERY": 1,
                        "a timeout in OPEN": 1, "neither": 1}
    assert h["10x"] == {**h["30x"], "neither": 2}
    s = to.summary(events, runs=2)
    assert s["short_flows_first"] == {**{st: 0.0 for st in to.STATES}, "RECOVERY": 0.5, "OPEN": 0.5, "LOSS": 0.5}


def test_timeouts_of_both_simulators_are_all_listed_and_split_exactly(ns3_binary, tmp_path):
    """The timeout smoke cell for 10 s: our buffer holds every timeout the metrics count,
    ns-3's list every one its run counts (both checked inside), and each split adds up to
    the total."""
    c = dataclasses.replace(to.cal.timeout_smoke_cell(), seconds=10.0)
    seeds = [1, 2]
    ours, ours_flows = to.ours(c, seeds)
    ns3, ns3_flows = to.ns3(ns3_binary, c, seeds, jobs=2, workdir=tmp_path, show_progress=False)
    assert len(ours) > 0 and len(ns3) > 0
    for events, flows in ((ours, ours_flows), (ns3, ns3_flows)):
        s = to.summary(events, len(seeds))
        for part in ("state", "size_window", "in_chains"):
            assert sum(s[part].values()) == pytest.approx(s["per_run"])
        # every timeout belongs to a flow of the run's records: the keys join both ways
        assert len(flows) == len(seeds) and sum(map(len, flows)) > 0
        keys = {to._flow(seed, r[4], r[0]) for seed, rows in zip(seeds, flows) for r in rows}
        timed = set(to.first_states(events))
        assert len(timed & keys) > 0
        h = to.held_by(flows, seeds, events, syn_timeout_s=3.0, factors=(0.0,))["0x"]
        assert sum(h.values()) == sum(map(len, flows))  # every finished flow is slowed more than 0x
        assert sum(v for k, v in h.items() if k.startswith("a timeout")) == len(timed & keys)
    assert {e.state for e in ours} <= set(to.STATES) and {e.state for e in ns3} <= set(to.STATES)


def test_a_run_with_more_timeouts_than_its_buffer_or_than_its_metrics_is_refused():
    buf = np.zeros((2, 3, len(to.FIELDS)), np.float32)
    buf[:, :, 4] = 1  # RECOVERY
    assert len(to.collect("c", [1, 2], buf, np.array([3, 2]), np.array([3, 2]))) == 5
    with pytest.raises(RuntimeError, match="more than the buffer"):
        to.collect("c", [1, 2], buf, np.array([4, 2]), np.array([4, 2]))
    with pytest.raises(RuntimeError, match="the metrics count 3"):
        to.collect("c", [1, 2], buf, np.array([2, 2]), np.array([3, 2]))


def test_timeouts_cli_refuses_a_bad_ns3_argument_and_an_empty_cell_choice(capsys):
    for argv, words in ((["--cells", ".", "--ns3-arg", "ss_ack_cap_segs=1"], "--ns3-arg takes --name=value"),
                        (["--cells", "no-such-cell"], "matches none"), (["--cells", ".", "--seeds", "0"], "--seeds")):
        with pytest.raises(SystemExit):
            to.main(argv)
        assert words in capsys.readouterr().err


def test_every_flag_reaches_its_simulator_and_the_record(tmp_path, monkeypatch):
    """With both simulators stubbed: --grid/--cells pick the cells, --seeds/--first-seed the
    seeds, --set reaches both simulators' cells, a model flag ours only, --capacity ours'
    buffer, --ns3-arg and --jobs ns-3's runs, --out the folder; timeouts.json records each."""
    got = {"ours": [], "ns3": []}

    flows = lambda seeds: [[[5e6, 1.0, 9.0, 40.0, 0.5]]] + [[] for _ in seeds[1:]]  # one flow slowed 40x

    def fake_ours(c, seeds, capacity):
        got["ours"].append((c.name, dict(c.kw), list(seeds), capacity))
        return [to.Timeout(seeds[0], 1.0, 0.5, 5e6, 2.0, "OPEN")], flows(seeds)

    def fake_ns3(binary, c, seeds, jobs, workdir, show_progress, extra):
        got["ns3"].append((c.name, dict(c.kw), list(seeds), jobs, list(extra)))
        return [to.Timeout(seeds[0], 1.0, 0.5, 5e6, 2.0, "LOSS")], flows(seeds)

    monkeypatch.setattr(to, "ours", fake_ours)
    monkeypatch.setattr(to, "ns3", fake_ns3)
    monkeypatch.setattr(to, "build_ns3", lambda: Path("ns3"))
    out = tmp_path / "out"
    assert to.main(["--grid", "thesis", "--cells", "newreno/load0.9/buf(25|100)$", "--seeds", "3", "--first-seed", "7",
                    "--set", "min_rto_s=0.02", "--rto-rearm", "any-ack", "--capacity", "99", "--jobs", "2",
                    "--ns3-arg=--ss_ack_cap_segs=1", "--out", str(out), "--no-progress"]) == 0
    names = ["thesis/newreno/load0.9/buf25", "thesis/newreno/load0.9/buf100"]
    assert [o[0] for o in got["ours"]] == names and [n[0] for n in got["ns3"]] == names
    for (_, kw_o, seeds_o, cap), (_, kw_n, seeds_n, jobs, extra) in zip(got["ours"], got["ns3"]):
        assert seeds_o == seeds_n == [7, 8, 9] and cap == 99 and jobs == 2 and extra == ["--ss_ack_cap_segs=1"]
        assert kw_o["min_rto_s"] == kw_n["min_rto_s"] == 0.02
        assert kw_o["rto_rearm"] == "any-ack" and "rto_rearm" not in kw_n
    rec = json.loads((out / "timeouts.json").read_text())
    assert (rec["grid"], rec["cells_regex"], rec["seeds"], rec["capacity"], rec["jobs"]) == \
        ("thesis", "newreno/load0.9/buf(25|100)$", [7, 8, 9], 99, 2)
    assert rec["set"] == {"min_rto_s": 0.02} and rec["model"] == {"rto_rearm": "any-ack"}
    assert rec["ns3_args"] == ["--ss_ack_cap_segs=1"] and list(rec["cells"]) == names
    assert rec["total"]["ours"]["state"]["OPEN"] > 0 and rec["total"]["ns3"]["state"]["LOSS"] > 0
    held = rec["total"]["held_by"]  # one flow a cell, held by its timeout, summed over both cells
    assert held["ours"]["30x"]["a timeout in OPEN"] == 2 and held["ns3"]["30x"]["a timeout in LOSS"] == 2
    assert rec["cells"][names[0]]["held_by"]["ns3"]["10x"]["a timeout in LOSS"] == 1
    assert (out / "REPORT.md").exists() and (out / "timeouts.png").exists()
