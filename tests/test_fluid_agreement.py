"""The differentiable fluid model of long-lived flows against the packet simulator: the
same cells in both (utilisation and mean queue), and the sign of its gradients against the
packet simulator's seed-averaged differences.  (A file of its own, so that the two heaviest
parts of the fluid model's tests run on different workers.)

The cells, the agreement table and the probes are `rlbm_jax.fluid_validation`'s;
`python calibration/fluid.py grid` and `... probes` report them in full (calibration/FLUID.md)."""
import pytest

from rlbm_jax.fluid_validation import PROBES, compare, probe_rows, probe_table, table

# the cells of the two agreement tests below; they run as one `compare` (a module fixture), so
# that the packet simulator's batches (by flow count and backend) hold the cells of both: four
# compilations of the packet tick where the two tests alone took eight
CELLS = ([(n, b, {}) for n in (8, 16) for b in (0.5, 1.0, 2.0)]
         + [(8, 1.0, {"tcp": "cubic"}), (16, 0.5, {"tcp": "cubic"}),
            (16, 0.5, {"aqm": "red"}), (16, 1.0, {"aqm": "red"}),
            (16, 1.0, {"aqm": "pie"}), (16, 2.0, {"aqm": "pie"}),
            (8, 1.0, {"aqm": "codel"}), (16, 1.0, {"aqm": "codel"})])
DCTCP_AND_THRESHOLD_CELLS = [
    (8, 1.0, {"aqm": "red-step", "tcp": "dctcp"}), (16, 1.0, {"aqm": "red-step", "tcp": "dctcp"}),
    (8, 1.0, {"aqm": "dt"}), (16, 1.0, {"aqm": "dt"}), (8, 2.0, {"aqm": "dt"}),
    (16, 2.0, {"aqm": "dt"}), (8, 1.0, {"aqm": "dt", "alpha": 0.5}), (16, 1.0, {"aqm": "abm"}),
    (8, 1.0, {"aqm": "static-bdp"}), (16, 1.0, {"aqm": "sb-naive"})]


@pytest.fixture(scope="module")
def agreement_rows():
    """`compare` of both tests' cells in one call: one row per cell, in order."""
    cells = CELLS + DCTCP_AND_THRESHOLD_CELLS
    rows = compare(cells)
    assert [r[0] for r in rows] == cells
    return rows


def _rows_of(rows, cells):
    return [r for r in rows if r[0] in cells]


def test_agrees_with_the_packet_simulator(agreement_rows):
    """NewReno, 8 and 16 flows: drop-tail at 0.5 / 1 / 2 BDP, RED (16 flows, 0.5 and 1 BDP), PIE (16
    flows, 1 and 2 BDP), CoDel (8 and 16 flows, 1 BDP), CUBIC drop-tail at two cells; two seeds of 8 s (2 s
    warm-up) each; utilisation within 3 points, mean queue within 25 % of the packet simulator's mean over
    the seeds."""
    rows = _rows_of(agreement_rows, CELLS)
    assert len(rows) == len(CELLS)
    print("\n" + table(rows))
    missed = [r for r in rows if not r[-1]]
    assert not missed, "\n" + table(missed)


def test_dctcp_and_thresholds_agree_with_the_packet_simulator(agreement_rows):
    """DCTCP (ns-3.37 TcpDctcp) over step marking at K = BDP / 6, 8 and 16 flows at 1 BDP, and the
    shared-buffer thresholds with one class (NewReno): DT at 8 and 16 flows, 1 and 2 BDP, and at
    alpha 0.5, ABM and static-bdp (their one-class caps: DT's, and half the buffer) and sb-naive
    (drop-tail at B); the same tolerances as above (calibration/FLUID.md section 5 lists the cells
    that miss, DCTCP with g = 1/4 and NewReno over the same step marking, with their causes)."""
    rows = _rows_of(agreement_rows, DCTCP_AND_THRESHOLD_CELLS)
    assert len(rows) == len(DCTCP_AND_THRESHOLD_CELLS)
    print("\n" + table(rows))
    missed = [r for r in rows if not r[-1]]
    assert not missed, "\n" + table(missed)


def test_fluid_gradients_point_where_the_packet_simulator_moves():
    """Four probes whose packet-side effect stands well clear of the seeds' noise: the sign
    of the fluid gradient (truncated every second) is the sign of the packet simulator's
    seed-averaged difference."""
    rows = probe_rows([p for p in PROBES if p[0] in ("RED max_p -> queue", "RED min_th -> queue",
                                                      "drop-tail buffer -> queue", "drop-tail buffer -> utilisation")],
                      seeds=(0, 1, 2, 3), seconds=6.0)
    print("\n" + probe_table(rows))
    assert all(abs(fd) > 2 * se for _, _, _, fd, se, _ in rows), probe_table(rows)  # clear of the noise
    assert all(ok for *_, ok in rows), probe_table(rows)
