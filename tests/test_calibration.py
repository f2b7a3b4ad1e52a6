"""Calibration smoke against ns-3.37: the ns-3 scenario builds (against the libns3-dev
that the README's test command installs), refuses bad parameters, and three thesis cells agree with our
simulator within the calibration tolerances (`calibration/run.py`), one of them a cell
whose tail is set by timeouts; and the report's stall statistics (`calibration/stalls.py`,
no ns-3 needed)."""
import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlbm_jax import jsonio
from rlbm_jax.ns3 import harness
from rlbm_jax.env.params import LEGACY_TCP_MODEL, make_params

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
    assert sum(r["within"] is True for r in rows) == sum(len(run.checked_metrics(c)) for c in cells)


def test_smoke_cell_whose_tail_depends_on_the_timeout_behaviour(ns3_binary, tmp_path):
    """NewReno at load 0.9 with 400 packets per class: queueing of up to 0.34 s against a
    10 ms RTO floor, so flows time out in fast recovery and resend their windows. With
    the default TCP model (ns-3.37's go-back-N after a timeout, RTT samples from
    cumulative ACKs) every checked metric agrees with ns-3 on 16 seeds, the timeouts and
    the pooled p99 of short flows too; the model of rlbm_jax 0.2 (SACK-only resends, a
    sample from every ACK) times out a fifth as often as ns-3. (At 16 seeds the pooled
    p99 is the cell's 2nd worst short flow, too few to tell the two models apart: REPORT
    section 2.)  Both models run in one batch: the model is a traced parameter."""
    cells = [run.timeout_smoke_cell()]
    legacy = [dataclasses.replace(c, name=c.name + "/0.2", kw={**c.kw, **LEGACY_TCP_MODEL}) for c in cells]
    seeds = list(range(1, 17))
    ns3 = harness.run_ns3(ns3_binary, cells, seeds, jobs=2, workdir=tmp_path, show_progress=False)
    ours = run.run_ours(cells + legacy, seeds, show_progress=False)
    rows = run.compare(cells, ours, ns3)
    assert all(r["within"] for r in rows if r["within"] is not None), json.dumps(rows, indent=1, default=float)
    rto = next(r for r in rows if r["metric"] == "rto_count")
    assert abs(rto["rel_err"]) < 0.25 and rto["ns3"] > 20
    ns3_as_legacy = {l.name: ns3[c.name] for c, l in zip(cells, legacy)}
    old = {r["metric"]: r for r in run.compare(legacy, ours, ns3_as_legacy)}
    assert old["rto_count"]["rel_err"] < -0.6


def test_phase_spread_runs_each_seed_at_one_delay_in_both_simulators():
    cell = run.thesis_cell("newreno", 0.9, 25)
    half_t = 0.5 * float(make_params(**cell.kw).data_pkt_bits) / float(make_params(**cell.kw).bottleneck_rate_bps)
    seeds = range(1, 31)
    shifts = np.array([harness.delay_phase_s(cell, s) for s in seeds])
    assert np.all((shifts >= 0) & (shifts < half_t))
    # evenly over the phase: every quarter of it holds 5 to 10 of the 30 seeds
    counts = np.bincount((shifts / half_t * 4).astype(int), minlength=4)
    assert counts.min() >= 5 and counts.max() <= 10, counts
    for s in (1, 2, 17):
        delay = float(make_params(**harness.seed_kw(cell, s)).bottleneck_delay_s)
        assert np.isclose(delay, 10e-3 + harness.delay_phase_s(cell, s), rtol=0, atol=1e-9)
        arg = next(a for a in harness.ns3_args(cell, s) if a.startswith("--bottleneck_delay_s="))
        assert float(arg.split("=")[1]) == harness.seed_kw(cell, s)["bottleneck_delay_s"]
    # ours batches the seeds at their own delays: seeds that the shift moves past half a
    # tick get a round trip one tick longer, and their runs differ from the unshifted ones
    acks = {int(make_params(**harness.seed_kw(cell, s)).ack_delay_ticks) for s in seeds}
    assert len(acks) == 2, acks
    short = dataclasses.replace(cell, seconds=4.0)
    unshifted = dataclasses.replace(short, name=cell.name + "/unshifted", phase_spread=False)
    both = run.run_ours([short, unshifted], list(seeds), show_progress=False)  # (one call: one batch where they stack)
    assert both[cell.name]["flows"] != both[unshifted.name]["flows"]
    long = run.long_cell("newreno", 8, 1.0, 0.02)
    assert not long.phase_spread and harness.seed_kw(long, 5) == long.kw


def test_ns3_drops_syns_by_the_phase_of_its_packet_clock(ns3_binary, tmp_path):
    """Why Poisson cells spread their seeds over the phase (`delay_phase_s`): in ns-3 a
    class queue within one packet of its cap sits *at* the cap for a share of the time
    set by the round trip modulo one packet's service time. Lengthening the one-way delay
    by 3/8 of a service time moves that share from about 0.7 to 0.2, while the drop
    rate and the mean queue stay within a few percent."""
    base = run.thesis_cell("newreno", 0.9, 25, seconds=30.0)
    half_t = 0.5 * float(make_params(**base.kw).data_pkt_bits) / float(make_params(**base.kw).bottleneck_rate_bps)
    seeds = list(range(1, 9))
    out = {}
    cells = {name: dataclasses.replace(base, name=f"phase/{name}", kw={**base.kw, "bottleneck_delay_s": 10e-3 + shift},
                                       phase_spread=False) for name, shift in (("d0", 0.0), ("d3", 0.75 * half_t))}
    ns3 = harness.run_ns3(ns3_binary, list(cells.values()), seeds, jobs=2, workdir=tmp_path, show_progress=False)
    for name, c in cells.items():  # (both cells' runs in one pool of jobs)
        reps = ns3[c.name]["seeds"]
        h = np.mean([r["queue_hist_c1"] for r in reps], axis=0)
        out[name] = (h[25] / h[24:].sum(), np.mean([r["drop_rate"] for r in reps]),
                     np.mean([r["queue_mean_pkts"] for r in reps]))
    (at_cap0, drop0, q0), (at_cap3, drop3, q3) = out["d0"], out["d3"]
    assert at_cap0 > 0.55 and at_cap3 < 0.35, out
    assert abs(drop3 / drop0 - 1) < 0.1 and abs(q3 / q0 - 1) < 0.1, out


def test_syn_stalls_counts_short_flows_held_about_one_syn_timeout():
    # rows: size_bytes, cls, fct_s, slowdown, start_s; ideal FCT = fct / slowdown
    seed1 = [[5_000, 0, 3.05, 3.05 / 0.05, 1.0],    # short, 3 s beyond its ideal: stalled
             [5_000, 0, 0.30, 6.0, 2.0],            # short, merely queued
             [2_000_000, 0, 4.6, 4.6 / 1.7, 3.0]]   # long: its FCT is mostly transmission
    seed2 = [[80_000, 0, 3.2, 3.2 / 0.09, 1.0]]
    assert run.syn_stalls([seed1, seed2]) == (2, 4)
    assert run.syn_stalls([seed1, seed2], syn_timeout_s=5.0) == (0, 4)
    assert run.syn_stalls([[]]) == (0, 0)


def test_cell_filter_and_overrides_reach_both_simulators():
    """`--cells` picks a grid's cells by name and refuses a pattern that picks none; `--set`
    changes a cell's parameter for ns-3 and for ours alike (how a cell is rerun as another
    policy, say), and refuses a name make_params does not take."""
    import argparse

    ap = argparse.ArgumentParser(exit_on_error=False)
    sets = run.parse_sets(["policy=droptail", "pie_max_burst_s=1000", "ecn=true"], ap)
    assert sets == {"policy": "droptail", "pie_max_burst_s": 1000, "ecn": True}
    with pytest.raises(SystemExit):
        run.parse_sets(["bogus_knob=1"], ap)
    cell = run.aqm_cell("pie", False, "websearch", 1.0)
    cell = dataclasses.replace(cell, kw={**cell.kw, **sets})
    flags = harness.ns3_args(cell, 1)
    assert "--policy=droptail" in flags and "--pie_max_burst_s=1000" in flags and "--ecn=1" in flags
    p = make_params(**harness.seed_kw(cell, 1))
    assert float(p.pie_max_burst_s) == 1000 and bool(p.ecn)
    with pytest.raises(SystemExit):
        run.main(["--grid", "aqm", "--cells", "no-such-cell", "--no-progress"])


def test_print_config_runs_nothing_writes_nothing_and_every_option_reaches_it(tmp_path, capsys, monkeypatch):
    """`run.py --print-config` prints the configuration the command would run (each cell's
    parameters with --set and the TCP-model flags in them, seeds, the ns-3 side, outputs)
    and exits: no ns-3 build or run, no run of ours, no results directory.  Every option
    changes that configuration, and what the run refuses the dry run refuses."""
    import json

    for name in ("build_ns3", "run_ns3", "run_ours"):
        monkeypatch.setattr(run, name, lambda *a, **k: pytest.fail("--print-config ran something"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results"
    default_out = ROOT / "calibration" / "results" / "smoke"
    existed = default_out.exists()
    assert run.main(["--grid", "smoke", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert default_out.exists() == existed and not any(tmp_path.iterdir())
    assert printed["grid"] == "smoke" and printed["seeds"] == list(range(1, 11))
    assert set(printed["cells"]) == {c.name for c in run.grid("smoke")}
    base = ["--grid", "smoke", "--out", str(out)]

    def config(*argv):
        return run.run_config(run.build_parser().parse_args([*base, *argv]))

    assert run.main([*base, "--print-config"]) == 0 and not out.exists()
    assert json.loads(capsys.readouterr().out) == json.loads(jsonio.dumps(run.in_repo_terms(config())))
    samples = {"grid": ["--grid", "thesis"], "cells": ["--cells", "newreno"], "set": ["--set", "min_rto_s=0.2"],
               "seeds": ["--seeds", "3"], "first_seed": ["--first-seed", "7"], "jobs": ["--jobs", "5"],
               "out": ["--out", str(tmp_path / "o2")], "report": ["--report", str(tmp_path / "r.md")],
               "no_progress": ["--no-progress"], "ns3_arg": ["--ns3-arg=--x=1"], "fresh_ns3": ["--fresh-ns3"],
               "backend": ["--backend", "jax"], "ns3_runs": ["--ns3-runs", str(tmp_path / "n3")],
               "rto_recovery": ["--rto-recovery", "sack"]}
    dests = {a.dest for a in run.build_parser()._actions if a.option_strings} - {"help", "version", "print_config"}
    model_dests = {d for d in dests if d in run.model.BY_NAME}
    assert dests - model_dests <= set(samples), sorted(dests - model_dests - set(samples))
    before = config()
    for dest, argv in samples.items():
        assert config(*argv) != before, argv
    for dest in model_dests:  # each TCP-model flag, in every cell of ours
        q = run.model.BY_NAME[dest]
        other = next(v for v in q.values() if v != q.default)
        got = config(q.option, str(other))
        assert all(c["params"][dest] == other for c in got["cells"].values()) and got["tcp_model"][dest] == other
    for bad in (["--seeds", "0"], ["--ns3-arg", "x"], ["--cells", "no-such-cell"], ["--set", "bogus_knob=1"]):
        with pytest.raises(SystemExit):
            run.main([*base, *bad, "--print-config"])
    assert not out.exists()



def test_dial_table_reports_the_metrics_its_cells_check_and_no_other(tmp_path):
    """The tick-size dial's cells are droptail without ECN, so they check no mark rate: the
    dial's table and figure carry every metric compare() checked there, each cell's own
    error, and leave out a metric no cell checks (it once raised StopIteration on it)."""
    cells = run.grid("dial")
    checked = [m for m in run.TOLERANCES if m != "mark_rate"]
    rows = [{"cell": c.name, "metric": m, "rel_err": 0.01 * i + 0.001 * j, "within": (i + j) % 2 == 0}
            for i, c in enumerate(cells) for j, m in enumerate(checked)]
    ours = {c.name: {"wall_s": 2.0} for c in cells}
    ns3 = {c.name: {"wall_s": 1.5} for c in cells}
    table = run.dial_table(cells, rows, ours, ns3, seeds=[1, 2])
    assert run.dial_metrics(rows) == checked
    assert len(table) == len(cells)
    for i, (c, r) in enumerate(zip(cells, table)):
        assert "mark_rate" not in r
        for j, m in enumerate(checked):
            assert r[m] == pytest.approx(0.01 * i + 0.001 * j) and r[m + "_within"] == ((i + j) % 2 == 0)
        assert r["ours_sim_s_per_wall_s"] == pytest.approx(2 * c.seconds / 2.0)
    run.dial_plot(table, tmp_path)
    assert (tmp_path / "dial.png").stat().st_size > 0


# ---------------------------------------------------------------------------
# stall statistics (calibration/stalls.py): no ns-3 needed
# ---------------------------------------------------------------------------

stalls = run.stalls


def _flows(rng, n, scale=1.0, start_s=(0.0, 10.0)):
    """n LOG_FIELDS rows: short and long sizes, lognormal slowdowns times `scale`."""
    size = rng.choice([20e3, 500e3, 3e6], size=n)
    slow = scale * np.exp(rng.normal(1.0, 1.0, size=n))
    start = rng.uniform(*start_s, size=n)
    return np.stack([size, np.zeros(n), 0.1 * slow, slow, start], axis=1).tolist()


def test_stall_bootstrap_of_identical_sides_is_one_with_a_degenerate_interval():
    rng = np.random.default_rng(0)
    w = stalls.resample_weights(6)
    counts = np.array([0, 3, 1, 0, 7, 2])
    d = stalls.count_ratio(counts, counts, w)
    assert (d["ratio"], d["lo"], d["hi"]) == (1.0, 1.0, 1.0) and d["ours"] == d["ns3"] == 13
    zero = stalls.count_ratio(np.zeros(6), np.zeros(6), w)  # no stall in either: they agree
    assert (zero["ratio"], zero["lo"], zero["hi"]) == (1.0, 1.0, 1.0)
    flows = [_flows(rng, 40) for _ in range(6)]
    q = stalls.quantile_ratios(flows, flows, 0.0, w)
    for b in ("short", "medium", "long"):
        for p in stalls.QUANTILES:
            assert (q[b][f"p{p}"]["ratio"], q[b][f"p{p}"]["lo"], q[b][f"p{p}"]["hi"]) == (1.0, 1.0, 1.0), (b, p)


def test_stall_counts_per_seed_are_exact_and_respect_the_warmup():
    # rows: size_bytes, cls, fct_s, slowdown, start_s
    seed1 = [[5e3, 0, 1.0, 10.0, 2.0],     # exactly 10x: not "more than"
             [5e3, 0, 1.1, 10.5, 2.0],     # > 10x
             [5e3, 0, 3.1, 31.0, 2.5],     # > 10x and > 30x
             [5e3, 0, 9.9, 99.0, 0.5],     # > 30x but started in the warm-up: not counted
             [2e6, 1, 4.0, 2.0, 3.0]]
    seed2 = [[80e3, 0, 3.0, 40.0, 1.0]]     # 1.0 s: at the warm-up's end, counted
    seed3 = []
    got = stalls.slow_counts([seed1, seed2, seed3], warmup_s=1.0)
    assert got.tolist() == [[2, 1], [1, 1], [0, 0]]
    assert stalls.slow_counts([seed1], warmup_s=0.0).tolist() == [[3, 2]]
    assert stalls.slow_counts([seed1], warmup_s=5.0).tolist() == [[0, 0]]
    cell = {"seeds": [{"syn_drops": 2, "rto_count": 5}, {"syn_drops": 0, "rto_count": 1}, {"syn_drops": 1,
                                                                                             "rto_count": 0}],
            "flows": [seed1, seed2, seed3]}
    per = stalls.seed_counts(cell, 1.0)
    assert {k: v.tolist() for k, v in per.items()} == {"slow_10x": [2, 1, 0], "slow_30x": [1, 1, 0],
                                                       "syn_drops": [2, 0, 1], "rto_count": [5, 1, 0]}
    # bad inputs are refused by name
    with pytest.raises(ValueError, match="flow rows"):
        stalls.slow_counts([[[1.0, 2.0, 3.0]]])
    with pytest.raises(KeyError, match="syn_drops"):
        stalls.seed_counts({"seeds": [{"rto_count": 1}], "flows": [seed2]}, 0.0)
    with pytest.raises(ValueError, match="paired"):
        stalls.count_ratio([1, 2, 3], [1, 2], stalls.resample_weights(3))
    with pytest.raises(ValueError):
        stalls.resample_weights(0)


def test_pooled_percentiles_of_a_resample_are_those_of_its_pool():
    rng = np.random.default_rng(1)
    values, labels = rng.lognormal(size=50), rng.integers(0, 5, size=50)
    w = stalls.resample_weights(5, 40, rng_seed=3)
    got = stalls.pooled_percentiles(values, labels, w)
    for b in range(len(w)):
        pool = np.repeat(values, w[b][labels])
        assert np.allclose(got[b], np.percentile(pool, stalls.QUANTILES), rtol=1e-12), b
    empty = stalls.pooled_percentiles(values, np.zeros(50, int), np.array([[0, 3], [1, 0]]))
    assert np.isnan(empty[0]).all() and np.allclose(empty[1], np.percentile(values, stalls.QUANTILES))


def test_stall_bootstrap_interval_covers_the_true_ratio():
    """Ours with 1.5 times ns-3's stall rate, seeds paired by a shared per-seed rate: the 95 %
    interval covers 1.5 in about 95 % of draws and 1 in few; pooled p99s of slowdowns 1.5
    times ns-3's distribution likewise."""
    rng = np.random.default_rng(2)
    w = stalls.resample_weights(20, 1000)
    cover = excludes_one = 0
    for _ in range(100):
        lam = rng.gamma(2.0, 2.0, size=20)  # the seed's draw, common to both simulators
        d = stalls.count_ratio(rng.poisson(1.5 * lam), rng.poisson(lam), w)
        cover += d["lo"] <= 1.5 <= d["hi"]
        excludes_one += not d["lo"] <= 1.0 <= d["hi"]
    assert cover >= 85 and excludes_one >= 60, (cover, excludes_one)
    cover = 0
    for _ in range(20):
        ours = [_flows(rng, 60, scale=1.5) for _ in range(20)]
        ns3 = [_flows(rng, 60) for _ in range(20)]
        p99 = stalls.quantile_ratios(ours, ns3, 0.0, w)["short"]["p99"]
        cover += p99["lo"] <= 1.5 <= p99["hi"]
    assert cover >= 16, cover


def test_stall_stats_sum_the_grid_and_state_the_verdict():
    rng = np.random.default_rng(4)
    cells = [harness.Cell(f"c{i}", "thesis", {"warmup_s": 1.0}, 10.0) for i in range(3)]
    cells.append(harness.Cell("long", "long", {}, 10.0))  # long-lived flows: no stall row
    seeds = 5

    def side(scale, syn):
        return {c.name: {"seeds": [{"syn_drops": syn * (s % 2), "rto_count": s} for s in range(seeds)],
                         "flows": [_flows(rng, 30, scale=scale) for _ in range(seeds)]} for c in cells}

    ns3 = side(1.0, 2)
    same = run.stall_stats_of(cells, ns3, ns3, list(range(seeds)))
    assert list(same["cells"]) == ["c0", "c1", "c2"] and same["acceptance"]["held"]
    g = same["grid"]["counts"]["slow_10x"]
    assert g["ours"] == sum(s["counts"]["slow_10x"]["ours"] for s in same["cells"].values())
    assert (g["ratio"], g["lo"], g["hi"]) == (1.0, 1.0, 1.0)
    ours = side(4.0, 2)  # every slowdown 4x: many more flows past 10x and 30x, p99 4x
    st = run.stall_stats_of(cells, ours, ns3, list(range(seeds)))
    acc = st["acceptance"]
    assert not acc["held"] and not acc["slow_10x"]["held"] and not acc["p99_short"]["held"]
    assert acc["syn_drops"]["held"] and acc["syn_drops"]["ratio"] == 1.0
    assert st["grid"]["counts"]["slow_10x"]["ratio"] > 2 and st["grid"]["counts"]["slow_10x"]["lo"] > 1.2
    text = "\n".join(stalls.section(st))
    assert "## Stalls" in text and "**Stall targets: not held.**" in text
    assert text.count("| c1 |") == 4 and "| long |" not in text  # one stall row, three bucket rows
    assert "lost SYNs per run +0% of ns-3's (tolerance 25%): held" in text
    with pytest.raises(ValueError, match="seeds"):
        run.stall_stats_of(cells, ours, ns3, list(range(seeds + 1)))


def test_summary_states_each_stall_grid_s_verdict_or_that_it_has_none(tmp_path):
    """calibration/summary.py's stall table reads each grid's results.json: a grid with
    stall statistics gets its counts, intervals and the targets it missed; one without
    says so instead of leaving a row out."""
    spec = importlib.util.spec_from_file_location("calibration_summary", ROOT / "calibration" / "summary.py")
    sm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sm)
    count = lambda a, b, lo, hi: {"ours": a, "ns3": b, "ours_per_run": a / 4, "ns3_per_run": b / 4, "ratio": a / b,
                                  "lo": lo, "hi": hi}
    stalls = {"grid": {"counts": {"slow_10x": count(90, 100, 0.8, 1.1), "slow_30x": count(7, 10, 0.5, 0.9),
                                  "syn_drops": count(12, 12, 0.7, 1.4), "rto_count": count(40, 50, 0.7, 0.9)}},
              "acceptance": {"slow_10x": {"held": True}, "slow_30x": {"held": False}, "syn_drops": {"held": True},
                             "p99_short": {"cells_ok": 9, "cells": 10, "held": True}, "held": False}}
    grids = list(sm.STALL_GRIDS)
    for g in grids[:-1]:  # the last grid has no results at all
        (tmp_path / g).mkdir()
        (tmp_path / g / "results.json").write_text(json.dumps({"seeds": [1, 2, 3, 4],
                                                                **({"stalls": stalls} if g == grids[0] else {})}))
    rows = sm.stall_markdown(sm.stalls(tmp_path)).splitlines()[2:]
    assert len(rows) == len(grids)
    assert "90 / 100 (0.90 [0.80, 1.10])" in rows[0] and "3.00 / 3.00 (1.00" in rows[0]
    assert rows[0].endswith("| 9 / 10 | not held: > 30x |")
    assert all("not yet run with the stall statistics" in r for r in rows[1:])
