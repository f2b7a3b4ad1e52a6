"""Drive the ns-3 scenario's rl buffer policy from a policy in this process.

The scenario, started with `--policy=rl --agent=stdio --agent_interval_s=I`, stops
at every boundary k * I, writes one line `obs K v0 v1 ... v{D-1}` (RLBMEnv's
observation, `rlbm_jax.onnx_policy.obs_layout`) on its stdout and waits for one line
of num_classes alphas on its stdin before simulating on.  `drive` answers each
line with `policy(obs)`: the two processes run in lock-step over a pipe.
"""
from __future__ import annotations

import subprocess
import tempfile
from typing import Callable

import numpy as np


def drive(cmd: list[str], policy: Callable, obs_dim: int, act_dim: int) -> int:
    """Run `cmd` answering its observations with policy(obs [1, obs_dim]) -> [1, act_dim];
    returns the number of decisions.  Raises RuntimeError, with the end of the
    scenario's stderr, when the scenario fails or speaks out of protocol, or the policy
    gives a wrongly shaped or non-finite action."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                bufsize=1)

        def fail(why: str):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.seek(0)
            tail = err.read()[-3000:]
            raise RuntimeError(f"ns-3 agent run ({' '.join(cmd)}): {why}" + (f"\nns-3 stderr:\n{tail}" if tail else ""))

        decisions = 0
        try:
            for line in proc.stdout:
                parts = line.split()
                try:
                    ok = len(parts) == obs_dim + 2 and parts[0] == "obs" and int(parts[1]) == decisions
                    obs = np.asarray(parts[2:], np.float32)[None] if ok else None
                except ValueError:
                    ok = False
                if not ok:
                    fail(f"expected 'obs {decisions}' and {obs_dim} numbers, got {line[:200]!r}")
                act = np.asarray(policy(obs), np.float32)
                if act.shape != (1, act_dim) or not np.all(np.isfinite(act)):
                    fail(f"policy gave {act!r} for observation {decisions}; expected {act_dim} finite alphas")
                # repr of a float32 widened to float: the exact value, read back by strtod
                proc.stdin.write(" ".join(repr(float(a)) for a in act[0]) + "\n")
                proc.stdin.flush()
                decisions += 1
        except BrokenPipeError:
            fail(f"the scenario stopped reading after {decisions} decisions")
        except BaseException:  # the policy raised, or an interrupt: stop the scenario too
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise
        finally:
            if proc.stdin and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        rc = proc.wait()
        if rc != 0:
            fail(f"exit status {rc} after {decisions} decisions")
    return decisions
