"""The progress bar written to a log (not a terminal): whole lines, each after the first
with the rate, the last (100 %) once."""
import io
import time

import pytest

from rlbm_jax.progress import Progress

pytestmark = pytest.mark.quick


def test_log_lines_carry_the_rate_and_end_once():
    out = io.StringIO()
    bar = Progress(4, unit=" updates", stream=out, every_s=0.0, tty=False, rate_unit="env-steps/s", rate_scale=256)
    bar.update(0, extra="compiling", measure=False)
    for u in range(1, 5):
        time.sleep(0.01)
        bar.update(u, extra="reward +0.1")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and "compiling" in lines[0]
    assert all("env-steps/s" in line for line in lines[2:]), lines  # known from the second update on
    assert sum("100.0%" in line for line in lines) == 1
    rate = float(lines[-1].split(" env-steps/s")[0].split()[-1].replace(",", ""))
    assert 256 * 3 / 1.0 < rate < 256 * 3 / 0.02  # three updates in 30 ms or more, scaled
