"""The seed's findings page (`rlbm_jax.cc_findings`): regenerated from the committed results it
names, byte for byte; every ratio against CUBIC is 1 for CUBIC itself; the shallow-buffer
verdict follows the numbers on both sides of its threshold; a malformed judging
configuration is refused by name."""
import copy
import json
from pathlib import Path

import pytest

from rlbm_jax import cc_findings as cf

ROOT = Path(__file__).resolve().parents[1]


def _sources():
    bench = json.loads((ROOT / cf.BENCH).read_text())
    orca = json.loads((ROOT / cf.ORCA_NS3).read_text())
    flows = cf.flows_cells([json.loads((ROOT / f).read_text()) for f in cf.FLOWS])
    return bench, orca, flows


def test_the_committed_findings_page_is_what_its_sources_give():
    assert (ROOT / cf.OUT).read_text() == cf.render(ROOT)


def test_cubic_against_cubic_is_the_unit_of_every_ratio():
    from rlbm_jax import ccbench

    bench, orca, flows = _sources()
    for res in [bench, *cf.learned(ROOT)]:
        assert set(ccbench.findings(res)["retx_vs_cubic"]["cubic"].values()) == {1.0}
    # the calibration grid's BBR row read against the cubic-cubic cells themselves: 1
    same = {k: (flows[("cubic-cubic",) + k[1:]] if k[0] == "bbr-cubic" and ("cubic-cubic",) + k[1:] in flows else v)
            for k, v in flows.items()}
    assert "x1.00 | x1.00 | x1.00" in "\n".join(cf.shallow_retx(bench, cf.orca_cells(orca), same)[0])
    cells = cf.orca_cells(orca)
    # CUBIC in the agent's place divided by itself: exactly 1 in each simulator
    swapped = copy.deepcopy(cells)
    for c in swapped:
        c["per"]["agent"] = c["per"]["cubic"]
    _, facts = cf.shallow_retx(bench, swapped, flows)
    assert facts["orca_jax"] == facts["orca_ns3"] == [1.0, 1.0, 1.0]
    lines, _ = cf.shallow_retx(bench, swapped, flows)
    assert any("holds in neither simulator" in line for line in lines)


def test_the_shallow_buffer_verdict_follows_the_numbers():
    bench, orca, flows = _sources()
    cells = cf.orca_cells(orca)
    loud = copy.deepcopy(cells)
    for c in loud:
        if c["buffer_bdp"] != 0.2:
            continue  # the verdict reads the shallow buffer alone
        for sim in ("jax", "ns3"):
            c["per"]["agent"][sim] = dict(c["per"]["agent"][sim],
                                          agent_loss=c["per"]["cubic"][sim]["agent_loss"] * cf.SEED_RETX_RATIO * 2)
    lines, facts = cf.shallow_retx(bench, loud, flows)
    assert facts["orca_jax"][0] == pytest.approx(2 * cf.SEED_RETX_RATIO)
    assert facts["orca_jax"][1:] == cf.shallow_retx(bench, cells, flows)[1]["orca_jax"][1:]
    assert any("holds in both simulators" in line for line in lines)
    one = copy.deepcopy(loud)
    for c in one:
        c["per"]["agent"]["ns3"] = c["per"]["cubic"]["ns3"]
    assert any("holds in one simulator only" in line for line in cf.shallow_retx(bench, one, flows)[0])


def test_a_malformed_judging_configuration_is_refused_by_name():
    with pytest.raises(ValueError, match="rtt=ten"):
        cf.orca_cells({"per_config": {"rtt=ten B=1BDP vs cubic": {}}})


def test_without_learned_slices_no_learned_row_is_printed():
    bench, orca, flows = _sources()
    cells = cf.orca_cells(orca)
    lines, _ = cf.shallow_retx(bench, cells, flows, [])
    assert not any("0 training seeds" in line or "Aurora at 0.2" in line for line in lines)
    assert not any("training seeds), JAX, the benchmark" in line for line in cf.friendliness(bench, cells, flows, []))


def test_the_buffer_filling_verdict_follows_the_queues():
    from rlbm_jax import ccbench

    slices = cf.learned(ROOT)
    assert slices, "the learned slices are committed"
    s = slices[0]
    text = "\n".join(cf.aurora_buffer(s, slices))
    assert "the seed's finding holds in JAX" in text
    # Aurora's rows read as CUBIC's: the same queues, so the finding does not hold
    calm = copy.deepcopy(s)
    by_cell = {r["cell"]: r for r in calm["cells"]}
    for r in calm["cells"]:
        if r["protocol"] == "aurora" and r["flows"][1] == "cubic":
            # (CUBIC against CUBIC is the cell "cubic/self/...")
            r["queue_mean_pkts"] = by_cell[r["cell"].replace("aurora/cubic/", "cubic/self/", 1)]["queue_mean_pkts"]
    assert cf._queue_fraction(calm, "aurora", 1.0) == cf._queue_fraction(calm, "cubic", 1.0)
    assert "does not hold in JAX" in "\n".join(cf.aurora_buffer(calm, [calm]))
    assert ccbench.select(calm["cells"], protocol="aurora")
