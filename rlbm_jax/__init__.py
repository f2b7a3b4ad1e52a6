"""rlbm_jax: a JAX simulator and RL environment of a congested switch buffer.

    import rlbm_jax
    rlbm_jax.list_envs()                              # env ids: the registered formulations
    env, params = rlbm_jax.make("RLBM-v0")            # the default formulation, thesis scenario
    env, params = rlbm_jax.make("RLBM-thesis-v0", randomize=True)   # as the thesis, each episode drawn

Packages: `rlbm_jax.env` (the declared model, the switch's parts, the reference tick and
the other backends, the env and its formulations), `rlbm_jax.ppo` (trainer),
`rlbm_jax.scenarios` (scenario definitions), `rlbm_jax.ns3` (the ns-3 reference scenario
and its harness), `rlbm_jax.queuepilot` (the QueuePilot study), `rlbm_jax.cli` (the
scripts' entry points).  docs/DESIGN.md "Layout" draws them.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rlbm_jax")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

# before anything imports jax's backend (gymnax does): the host-device split, if asked for
from rlbm_jax import devices as _devices  # noqa: E402

_devices.configure_from_environment()

from rlbm_jax import env, scenarios  # noqa: E402
from rlbm_jax.env import formulations  # noqa: E402
from rlbm_jax.registry import list_envs, make  # noqa: E402

registered_envs = list_envs

__all__ = ["make", "list_envs", "registered_envs", "env", "formulations", "scenarios", "__version__"]
