"""The suite compiles with XLA:CPU's loop emitters (tests/conftest.py, a third less compile
time); a user's run compiles with XLA's default fusion emitters.  The two modes must give the
same simulation: here random configurations of every discipline (the AQMs with and without
ECN, the shared-buffer policies, both TCPs) run in this process and in a fresh one compiled
the default way, and every integer of the report is equal, every float equal to 1e-6."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.conftest import SUITE_XLA_FLAG

ROOT = Path(__file__).resolve().parents[1]

RUN = r'''
import json, sys
import numpy as np
from tests.conftest import random_configs
from rlbm_jax.env.params import pad_params
from rlbm_jax.simulate import batch_reports

def run(out_path):
    # one batch (one compilation): five AQM configurations and five of the shared-buffer policies
    plist = pad_params([p for aqm in (True, False) for p in random_configs(5, seed=23, aqm=aqm, num_flow_slots=8)[1]])
    r = batch_reports(plist, list(range(10)), 2.0)
    json.dump({k: np.asarray(v).tolist() for k, v in r.items()}, open(out_path, "w"), default=float)

if __name__ == "__main__":
    run(sys.argv[1])
'''


def _in_process(flag: str, out: Path) -> None:
    subprocess.run([sys.executable, "-c", RUN, str(out)], env={**os.environ, "XLA_FLAGS": flag}, cwd=ROOT, check=True,
                   timeout=600)


def test_the_suites_compile_mode_gives_the_default_modes_results(tmp_path):
    _in_process("--xla_cpu_use_fusion_emitters=true", tmp_path / "default.json")  # XLA's default, named
    if SUITE_XLA_FLAG in os.environ.get("XLA_FLAGS", ""):  # this process compiles the suite's way
        ns = {}
        exec(compile(RUN, "compile_mode_run", "exec"), ns)
        ns["run"](tmp_path / "suite.json")
    else:  # a user's XLA_FLAGS chose the emitters for the suite: the suite's mode runs in a process of its own
        _in_process(SUITE_XLA_FLAG, tmp_path / "suite.json")
    default, suite = (json.loads((tmp_path / f).read_text()) for f in ("default.json", "suite.json"))
    assert set(default) == set(suite) and sum(default["flows_completed"]) > 0 and sum(default["marks_c1"]) > 0
    ints = [k for k in default if np.issubdtype(np.asarray(default[k]).dtype, np.integer)]
    assert {"arrivals_c1", "drops_c1", "marks_c1", "retx_arrivals", "rto_count", "flows_completed"} <= set(ints), ints
    for k in default:
        a, b = np.asarray(default[k]), np.asarray(suite[k])
        if k in ints:
            np.testing.assert_array_equal(b, a, err_msg=k)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-12, err_msg=k)
