"""Spreading a batch of envs over every local device.

On a CPU, XLA sees one device however many cores there are, and one compiled tick loop
over a batch of envs keeps about one core busy. Split into one host device per core,
with the env axis sharded over them, every core runs its share of the envs; on a host
with several GPUs the same sharding puts a share on each. Envs never talk to each
other, so the results are the same on any number of devices (`tests/test_devices.py`).

The split has to be chosen before JAX starts its backend, which importing gymnax
already does. So `rlbm_jax` reads it from the environment when it is first imported:

    RLBM_JAX_HOST_DEVICES=auto python my_experiment.py    # one host device per core
    RLBM_JAX_HOST_DEVICES=4 python my_experiment.py

The scripts in `scripts/` set `auto` unless the variable is already set (`1` turns
the split off). With it, XLA's region analysis of loop copies
(`--xla_cpu_copy_insertion_use_region_analysis`) is switched on too: it removes most
of the per-tick copies of the flow table from the compiled loop, with identical results.
Nothing is changed when the variable is unset, or when XLA_FLAGS already names a
host device count.

Several processes, on one host or many, join into one batch through `jax.distributed`
when all three of these are set (each process runs the same program; on CPUs the
processes talk through gloo):

    RLBM_JAX_COORDINATOR=host0:12355 RLBM_JAX_NUM_PROCESSES=2 RLBM_JAX_PROCESS_ID=0 python my_experiment.py
    RLBM_JAX_COORDINATOR=host0:12355 RLBM_JAX_NUM_PROCESSES=2 RLBM_JAX_PROCESS_ID=1 python my_experiment.py

`batched` then spreads the env axis over every process's devices (the batch must divide
evenly among the processes). Every process builds the whole batch's inputs (they follow
from the seeds) and gets the whole batch's outputs back as host arrays, so the rest of
a program runs unchanged; write files from process 0 only (`is_main_process`).
"""
from __future__ import annotations

import os

ENV_VAR = "RLBM_JAX_HOST_DEVICES"
DIST_VARS = ("RLBM_JAX_COORDINATOR", "RLBM_JAX_NUM_PROCESSES", "RLBM_JAX_PROCESS_ID")
_COUNT_FLAG = "--xla_force_host_platform_device_count"
_REGION_FLAG = "--xla_cpu_copy_insertion_use_region_analysis"


def usable_cores() -> int:
    """The cores this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def parse_count(var: str, value: str | None) -> int | None:
    """A count set in variable `var` as `value`: 'auto' (one per usable core) or a positive
    whole number; None when unset or empty."""
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v == "auto":
        return usable_cores()
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"{var} must be 'auto' or a positive whole number, got {value!r}") from None
    if n < 1:
        raise ValueError(f"{var} must be 'auto' or a positive whole number, got {value!r}")
    return n


def host_device_count(value: str | None) -> int | None:
    """The number of host devices `value` (the variable's text) asks for; None: leave alone."""
    return parse_count(ENV_VAR, value)


def distributed_settings(environ=os.environ) -> dict | None:
    """`jax.distributed.initialize`'s arguments from RLBM_JAX_COORDINATOR (host:port),
    RLBM_JAX_NUM_PROCESSES and RLBM_JAX_PROCESS_ID; None when none is set."""
    given = [v for v in DIST_VARS if environ.get(v, "").strip()]
    if not given:
        return None
    if len(given) != len(DIST_VARS):
        missing = [v for v in DIST_VARS if v not in given]
        raise ValueError(f"a multi-process run needs all of {', '.join(DIST_VARS)}; {', '.join(missing)} not set")
    addr = environ[DIST_VARS[0]].strip()
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{DIST_VARS[0]} must be host:port, got {addr!r}")
    try:
        n, i = int(environ[DIST_VARS[1]]), int(environ[DIST_VARS[2]])
    except ValueError:
        raise ValueError(f"{DIST_VARS[1]} and {DIST_VARS[2]} must be whole numbers, got "
                         f"{environ[DIST_VARS[1]]!r} and {environ[DIST_VARS[2]]!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"need {DIST_VARS[1]} >= 1 and 0 <= {DIST_VARS[2]} < {DIST_VARS[1]}, got {n} and {i}")
    return {"coordinator_address": addr, "num_processes": n, "process_id": i}


def configure_from_environment(environ=os.environ) -> None:
    """Adds the host-device count and region analysis to XLA_FLAGS as `RLBM_JAX_HOST_DEVICES`
    asks, and joins a multi-process run when `DIST_VARS` are set. Must run before JAX
    initialises a backend; `rlbm_jax/__init__` calls it first."""
    _configure_host_devices(environ)
    dist = distributed_settings(environ)
    if dist is not None and dist["num_processes"] > 1:
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU devices of different processes
        jax.distributed.initialize(**dist)


def single_process_only(prog: str) -> str | None:
    """A one-line refusal for a command that runs in one process only (it writes files or
    starts ns-3 jobs of its own), when this is a multi-process run; None otherwise."""
    import jax

    if jax.process_count() > 1:
        return (f"{prog} runs in one process; unset {', '.join(DIST_VARS)} (simulate.py and bench_env.py "
                f"run across processes)")
    return None


def is_main_process() -> bool:
    """True in a single-process run, and in process 0 of a multi-process one."""
    import jax

    return jax.process_index() == 0


def _configure_host_devices(environ) -> None:
    n = host_device_count(environ.get(ENV_VAR))
    flags = environ.get("XLA_FLAGS", "")
    if n is None or _COUNT_FLAG in flags:
        return
    if _backend_started():
        import warnings

        warnings.warn(f"{ENV_VAR}={environ.get(ENV_VAR)} comes too late: JAX had already started its backend "
                      f"(something, e.g. gymnax, ran JAX before rlbm_jax was imported), so it stays at "
                      f"{_device_count()} device(s). Import rlbm_jax first, or set "
                      f"XLA_FLAGS={_COUNT_FLAG}={n} before Python starts.", stacklevel=4)
        return
    extra = [f"{_COUNT_FLAG}={n}"] + ([f"{_REGION_FLAG}=true"] if _REGION_FLAG not in flags else [])
    environ["XLA_FLAGS"] = " ".join([flags.strip(), *extra]).strip()


def _backend_started() -> bool:
    import sys

    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another JAX: cannot tell, assume not
        return False


def _device_count() -> int:
    import jax

    return len(jax.local_devices())


def devices_per_process(batch: int, procs: int, local: int) -> int:
    """How many of each process's `local` devices a batch of `batch` envs spreads over: the
    most that divide each process's share evenly (1: the whole share on one device)."""
    return max(d for d in range(1, local + 1) if (batch // procs) % d == 0)


def env_sharding(batch: int):
    """A sharding of a leading env axis of length `batch` over the devices: as many as divide
    `batch` evenly (1 gives today's single-device placement). In a multi-process run, the
    same number from every process."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    procs = jax.process_count()
    if batch % procs:
        raise ValueError(f"a batch of {batch} envs does not divide among {procs} processes: use a multiple of {procs}")
    by_proc = [[d for d in jax.devices() if d.process_index == p] for p in range(procs)]
    per = devices_per_process(batch, procs, min(len(ds) for ds in by_proc))
    devs = [d for ds in by_proc for d in ds[:per]]
    return NamedSharding(Mesh(np.asarray(devs), ("env",)), PartitionSpec("env"))


def replicated(sharding):
    """Every device of `sharding`'s mesh holding the whole array (for inputs without the env axis)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(sharding.mesh, PartitionSpec())


def sharded_jit(fn, in_shardings, out_shardings):
    """`jax.jit(fn, in_shardings=..., out_shardings=...)` that also runs across processes:
    in a multi-process run every process passes the whole inputs (host arrays), hands
    each device its share, and gets the whole outputs back as host arrays (`.lower(...)
    .compile()` works the same way)."""
    import jax

    run = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)
    return run if jax.process_count() == 1 else _AcrossProcesses(run, in_shardings)


class _AcrossProcesses:
    """A jitted function whose devices span processes, called with host arrays."""

    def __init__(self, run, in_shardings, compiled=None):
        self.run, self.in_shardings, self.compiled = run, in_shardings, compiled

    def _spread(self, args):
        import jax
        import numpy as np

        shardings = self.in_shardings if isinstance(self.in_shardings, tuple) else (self.in_shardings,) * len(args)

        def one(sharding, x):
            x = np.asarray(x)
            return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

        return [jax.tree.map(lambda x, sh=sh: one(sh, x), a) for sh, a in zip(shardings, args)]

    def __call__(self, *args):
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        out = (self.compiled or self.run)(*self._spread(args))
        return jax.tree.map(np.asarray, multihost_utils.process_allgather(out, tiled=True))

    def lower(self, *args):
        outer = self

        class Lowered:
            def compile(self):
                return _AcrossProcesses(outer.run, outer.in_shardings, lowered.compile())

        lowered = self.run.lower(*self._spread(args))
        return Lowered()


def batched(fn, batch: int):
    """`jax.jit(jax.vmap(fn))` for a batch of `batch` envs whose inputs and outputs all have
    the env axis first, spread over the devices by `env_sharding(batch)` (and over the
    processes of a multi-process run: `sharded_jit`)."""
    import jax

    axis = env_sharding(batch)
    return sharded_jit(per_device(jax.vmap(fn), axis), axis, axis)


def per_device(fn, sharding):
    """`fn` run by each device of `sharding`'s mesh on its own share of the env axis
    (`shard_map`): envs never exchange data, so nothing is gathered, and an opaque
    computation (the native tick's FFI call) runs where its shard lives instead of being
    replicated by the partitioner."""
    import inspect

    from jax.sharding import PartitionSpec

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map
    spec = PartitionSpec(*sharding.spec)
    # every value is per device here (no collectives), so the replication checks that
    # would reject a loop carry first built from constants are switched off
    names = inspect.signature(shard_map).parameters
    check = {"check_vma": False} if "check_vma" in names else {"check_rep": False}
    return shard_map(fn, mesh=sharding.mesh, in_specs=spec, out_specs=spec, **check)
