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
"""
from __future__ import annotations

import os

ENV_VAR = "RLBM_JAX_HOST_DEVICES"
_COUNT_FLAG = "--xla_force_host_platform_device_count"
_REGION_FLAG = "--xla_cpu_copy_insertion_use_region_analysis"


def host_device_count(value: str | None) -> int | None:
    """The number of host devices `value` (the variable's text) asks for; None: leave alone."""
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v == "auto":
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be 'auto' or a positive whole number, got {value!r}") from None
    if n < 1:
        raise ValueError(f"{ENV_VAR} must be 'auto' or a positive whole number, got {value!r}")
    return n


def configure_from_environment(environ=os.environ) -> None:
    """Adds the host-device count and region analysis to XLA_FLAGS as `RLBM_JAX_HOST_DEVICES`
    asks. Must run before JAX initialises a backend; `rlbm_jax/__init__` calls it first."""
    n = host_device_count(environ.get(ENV_VAR))
    flags = environ.get("XLA_FLAGS", "")
    if n is None or _COUNT_FLAG in flags:
        return
    if _backend_started():
        import warnings

        warnings.warn(f"{ENV_VAR}={environ.get(ENV_VAR)} comes too late: JAX had already started its backend "
                      f"(something, e.g. gymnax, ran JAX before rlbm_jax was imported), so it stays at "
                      f"{_device_count()} device(s). Import rlbm_jax first, or set "
                      f"XLA_FLAGS={_COUNT_FLAG}={n} before Python starts.", stacklevel=3)
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


def env_sharding(batch: int):
    """A sharding of a leading env axis of length `batch` over the local devices: as many
    devices as divide `batch` evenly (1 gives today's single-device placement)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    devs = jax.local_devices()
    n = max(d for d in range(1, len(devs) + 1) if batch % d == 0)
    return NamedSharding(Mesh(np.asarray(devs[:n]), ("env",)), PartitionSpec("env"))


def replicated(sharding):
    """Every device of `sharding`'s mesh holding the whole array (for inputs without the env axis)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(sharding.mesh, PartitionSpec())


def batched(fn, batch: int):
    """`jax.jit(jax.vmap(fn))` for a batch of `batch` envs whose inputs and outputs all have
    the env axis first, spread over the devices by `env_sharding(batch)`."""
    import jax

    axis = env_sharding(batch)
    return jax.jit(jax.vmap(fn), in_shardings=axis, out_shardings=axis)
