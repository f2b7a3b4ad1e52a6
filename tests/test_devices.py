"""Envs spread over several devices give the same results as on one (rlbm_jax.devices):
integer state exactly, float summaries to 1e-6.

The host-device count is fixed when JAX starts, so each count runs in its own process:
1 and 3 host devices (the simulation runs 4 seeds: 3 devices do not divide 4, so that batch
runs on 2; the env's scores run 6 seeds, on 3); and two processes joined through
`jax.distributed` (one host device each, so two devices in all), as two hosts would be."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlbm_jax import devices
from tests.conftest import SUITE_XLA_FLAG

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys
import jax, numpy as np
from rlbm_jax import scenarios
from rlbm_jax.env import RLBMEnv
from rlbm_jax.env.params import make_params
from rlbm_jax.evaluate import score, stack_params
from rlbm_jax.simulate import run_scenario, with_policy

p = make_params(**scenarios.thesis(num_flow_slots=16, completion_log_size=64))
out = {"devices": len(jax.devices())}
r = run_scenario(p, seconds=3.0, seeds=list(range(4)), show_progress=False)
out["simulate4"] = {"devices": r["devices"], "per_seed": r["per_seed"], "tail": r["tail"]}
env = RLBMEnv(with_policy(p, "rl"), formulation="RLBM-v0", episode_s=1.0)
ep = env.default_params
agent = lambda obs: jax.numpy.tanh(obs[:2]) * 0.5 + 0.5
out["score"] = {k: np.asarray(v).tolist() for k, v in score(env, ep, agent, list(range(6))).items()}
cells = stack_params([ep, ep.replace(sim=with_policy(ep.sim, "dt"))])
out["score_cells"] = {k: np.asarray(v).tolist() for k, v in score(env, cells, None, [1, 2, 3], batched=True).items()}
json.dump(out, open(sys.argv[1], "w"), sort_keys=True, default=float)
'''


def _run(n, tmp_path):
    env = {**os.environ, devices.ENV_VAR: str(n)}
    env["XLA_FLAGS"] = SUITE_XLA_FLAG  # the suite's compile mode, no device count of this process's
    out = tmp_path / f"out{n}.json"
    subprocess.run([sys.executable, "-c", CHILD, str(out)], env=env, check=True,
                   cwd=ROOT, timeout=900)
    return json.loads(out.read_text())


def _run_two_processes(tmp_path):
    with socket.socket() as sock:  # a free port for the coordinator
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs, outs = [], []
    for pid in (0, 1):
        env = {**os.environ, devices.ENV_VAR: "1", "RLBM_JAX_COORDINATOR": f"127.0.0.1:{port}",
               "RLBM_JAX_NUM_PROCESSES": "2", "RLBM_JAX_PROCESS_ID": str(pid)}
        env["XLA_FLAGS"] = SUITE_XLA_FLAG  # the suite's compile mode, no device count of this process's
        outs.append(tmp_path / f"process{pid}.json")
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, str(outs[-1])],
                                      env=env, cwd=ROOT))
    try:
        for p in procs:
            assert p.wait(timeout=600) == 0
    finally:
        for p in procs:  # one that failed leaves the other waiting for it
            if p.poll() is None:
                p.kill()
    return [json.loads(o.read_text()) for o in outs]


def test_results_do_not_depend_on_the_number_of_devices_or_processes(tmp_path):
    one, three = (_run(n, tmp_path) for n in (1, 3))
    assert (one["devices"], three["devices"]) == (1, 3)
    assert (one["simulate4"]["devices"], three["simulate4"]["devices"]) == (1, 2)  # 3 do not divide 4 seeds
    assert one["simulate4"]["per_seed"][0]["flows_completed"] > 0
    first, second = _run_two_processes(tmp_path)
    assert (first["devices"], first["simulate4"]["devices"]) == (2, 2)  # one device in each process
    for other in (three, first, second):
        for k in ("simulate4", "score", "score_cells"):
            _same(other[k], one[k], k)


def test_a_batch_spreads_over_the_most_devices_that_divide_it():
    """The rule the runs above follow (the simulation puts 4 seeds on 3 devices: on 2)."""
    assert devices.devices_per_process(6, 1, 3) == 3
    assert devices.devices_per_process(4, 1, 3) == 2  # 3 devices do not divide 4 envs: the largest count that does
    assert devices.devices_per_process(4, 2, 1) == 1 and devices.devices_per_process(8, 2, 4) == 4
    assert devices.devices_per_process(7, 1, 4) == 1 and devices.devices_per_process(5, 1, 1) == 1


def test_multi_process_settings_are_checked():
    assert devices.distributed_settings({}) is None
    good = {"RLBM_JAX_COORDINATOR": "10.0.0.1:1234", "RLBM_JAX_NUM_PROCESSES": "4", "RLBM_JAX_PROCESS_ID": "3"}
    assert devices.distributed_settings(good) == {"coordinator_address": "10.0.0.1:1234", "num_processes": 4,
                                                  "process_id": 3}
    for change, match in ((dict(RLBM_JAX_PROCESS_ID=""), "RLBM_JAX_PROCESS_ID not set"),
                          (dict(RLBM_JAX_COORDINATOR="10.0.0.1"), "host:port"),
                          (dict(RLBM_JAX_PROCESS_ID="4"), "PROCESS_ID <"),
                          (dict(RLBM_JAX_NUM_PROCESSES="two"), "whole numbers")):
        with pytest.raises(ValueError, match=match):
            devices.distributed_settings({**good, **change})


def _same(got, want, where):
    """Integers (packets, flows, counters) exactly; floats to 1e-6 relative: XLA may
    vectorise a per-env float reduction differently for another per-device batch, which
    moves its last bit. Never more: envs never meet."""
    if isinstance(want, dict):
        assert set(got) - {"devices"} == set(want) - {"devices"}, where
        for k in want:
            if k != "devices":
                _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-12, nan_ok=True), where
    else:
        assert got == want, where


def test_host_device_setting_is_read_and_checked(monkeypatch):
    monkeypatch.setattr(devices, "_backend_started", lambda: False)  # as when rlbm_jax is imported first
    assert devices.host_device_count(None) is None and devices.host_device_count("") is None
    assert devices.host_device_count("3") == 3 and devices.host_device_count("auto") >= 1
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(ValueError, match=devices.ENV_VAR):
            devices.host_device_count(bad)
    env = {devices.ENV_VAR: "4", "XLA_FLAGS": "--xla_foo=1"}
    devices.configure_from_environment(env)
    assert env["XLA_FLAGS"] == ("--xla_foo=1 --xla_force_host_platform_device_count=4 "
                                "--xla_cpu_copy_insertion_use_region_analysis=true")
    given = {devices.ENV_VAR: "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    devices.configure_from_environment(given)  # the user's own count is kept
    assert given["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    unset = {"XLA_FLAGS": "--xla_foo=1"}
    devices.configure_from_environment(unset)
    assert unset == {"XLA_FLAGS": "--xla_foo=1"}


def test_a_setting_that_comes_after_jax_started_warns_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(devices, "_backend_started", lambda: True)
    env = {devices.ENV_VAR: "2"}
    with pytest.warns(UserWarning, match="too late"):
        devices.configure_from_environment(env)
    assert "XLA_FLAGS" not in env
