"""The memory one PPO update needs, estimated before anything is compiled, and the
memory the device has: so that a run too large for the machine is refused with a
sentence instead of being killed by the kernel or hanging (on XLA:CPU an allocation that
fails in an asynchronous call is reported to a caller that waits on its result, but a
computation that reads the result waits for ever).

The estimate reads the shapes of one seed's train state and rollout (`jax.eval_shape`:
nothing is compiled or allocated) and counts three things per seed:

    env state     bytes per env x num_envs x STATE_COPIES
    rollout       the trajectory's bytes (num_envs x num_steps transitions) x ROLLOUT_COPIES
    minibatch     per transition of a minibatch, the network's activations and their
                  gradients: 4 bytes x (observation + action + hidden widths + 8) x MINIBATCH_COPIES

plus RUNTIME_BYTES for the compiled program and XLA's runtime.  The factors are peak
resident sizes measured on XLA:CPU (2 cores) with the thesis formulation's
domain-randomised env (87,255 bytes of env state per env, 139 bytes per transition) over
num_envs 64 to 16,384, num_steps 32 to 1,024 and minibatches of 512 to 1,048,576
transitions (7 runs of one update, native tick), fitted to peak RSS = 1.0 GB + a x envs
+ b x transitions + c x minibatch transitions with every residual under 40 MB: a = 3.0
times the env state, b = 0.7 times the trajectory, c = 2.9 times the activation count
above.  With the JAX tick, a run of 4,096 envs gave a = 3.7.  Of the 1.0 GB, 0.43 GB is
the process before it compiles.  The factors below round these up, so that the estimate
errs on the side of refusing.
"""
from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

STATE_COPIES = 4.0  # measured 3.0 (native tick) and 3.7 (JAX tick)
ROLLOUT_COPIES = 1.0  # measured 0.7
MINIBATCH_COPIES = 3.5  # measured 2.9
RUNTIME_BYTES = 768 * 2**20  # measured 0.6 GB: compiled program and runtime, beyond the process before it
WARN_FRACTION = 0.5  # warn when one update needs more than this share of what is available


def tree_nbytes(tree) -> int:
    """The bytes of a pytree's leaves (arrays or shape structs)."""
    return int(sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Bytes one update needs (all seeds), and its parts per env."""
    num_envs: int
    num_steps: int
    num_seeds: int
    state_bytes_per_env: int  # one env's state, as `env.reset` returns it
    transition_bytes: int  # one transition of the rollout buffer
    minibatch_bytes_per_transition: int  # activations and gradients of one minibatch transition
    minibatch_size: int

    @property
    def per_env_bytes(self) -> float:
        """What each env of each seed adds: its state's copies, its share of the rollout and
        of the minibatch."""
        mb_share = self.minibatch_size / self.num_envs
        return (STATE_COPIES * self.state_bytes_per_env + ROLLOUT_COPIES * self.num_steps * self.transition_bytes
                + MINIBATCH_COPIES * mb_share * self.minibatch_bytes_per_transition)

    @property
    def steps_share(self) -> float:
        """The share of `per_env_bytes` that grows with num_steps (rollout and minibatch)."""
        return 1.0 - STATE_COPIES * self.state_bytes_per_env / self.per_env_bytes

    @property
    def total_bytes(self) -> float:
        return RUNTIME_BYTES + self.num_seeds * self.num_envs * self.per_env_bytes

    def envs_that_fit(self, available_bytes: float) -> int:
        """The most envs per seed that fit in `available_bytes`, the rest unchanged."""
        return max(0, int((available_bytes - RUNTIME_BYTES) / (self.num_seeds * self.per_env_bytes)))


def estimate(ppo, num_seeds: int = 1) -> Estimate:
    """The memory of one update of `ppo` (a `rlbm_jax.ppo.PPO`) on `num_seeds` seeds, from
    shapes alone."""
    cfg = ppo.cfg
    key = jax.random.PRNGKey(0)
    _, env_state = jax.eval_shape(ppo.env.reset, key, ppo.env_params)
    ts = jax.eval_shape(ppo.init, key)
    _, traj = jax.eval_shape(ppo._rollout, ts)
    width = ppo.obs_dim + ppo.adapter.act_dim + sum(cfg.hidden) + (cfg.lstm_size if cfg.network == "lstm" else 0)
    return Estimate(num_envs=cfg.num_envs, num_steps=cfg.num_steps, num_seeds=num_seeds,
                    state_bytes_per_env=tree_nbytes(env_state), transition_bytes=tree_nbytes(traj) // cfg.batch_size,
                    minibatch_bytes_per_transition=4 * (width + 8), minibatch_size=cfg.minibatch_size)


def check(ppo, num_seeds: int = 1, device=None) -> str | None:
    """Refuses (ValueError, one line naming the config fields to lower) a run whose update
    needs more memory than `device` has; a note when it needs more than `WARN_FRACTION` of
    it; else None."""
    est = estimate(ppo, num_seeds)
    room, where = available(device)
    need = est.total_bytes
    seeds = f" x {num_seeds} seeds" if num_seeds > 1 else ""
    what = (f"one update of {est.num_envs:,} envs{seeds} x {est.num_steps} steps needs about {fmt_bytes(need)} "
            f"({fmt_bytes(est.state_bytes_per_env)} of env state per env)")
    if need > room:
        lower = " or ".join(["num_envs"] + ["num_steps"] * (est.steps_share > 0.25) + ["num_seeds"] * (num_seeds > 1))
        raise ValueError(f"{what}, {fmt_bytes(need - room)} ({need / room:.1f}x) more than the {fmt_bytes(room)} "
                         f"available on {where}: lower {lower} (about {est.envs_that_fit(room):,} envs fit)")
    if need > WARN_FRACTION * room:
        return f"note: {what}, {100 * need / room:.0f} % of the {fmt_bytes(room)} available on {where}"
    return None


def _proc_bytes(path: str, field: str) -> int | None:
    """A "Field: N kB" line of a /proc file, in bytes (None where there is no such file)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room_bytes() -> int | None:
    """What this process's cgroup (v2) still allows, when it sets a limit (the file cache it
    holds counts as room: the kernel reclaims it)."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        with open("/sys/fs/cgroup/memory.stat") as f:
            stat = dict(line.split() for line in f if line.count(" ") == 1)
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    return max(0, int(limit) - used + int(stat.get("inactive_file", 0)))


def _address_space_room_bytes() -> int | None:
    """What this process's address-space limit (`ulimit -v`) still allows, when it sets one."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY:
        return None
    used = _proc_bytes("/proc/self/status", "VmSize")
    return None if used is None else max(0, limit - used)


def available(device=None) -> tuple[float, str]:
    """(bytes, where) that a computation on `device` (default: JAX's first) can still take:
    an accelerator's memory limit less what is in use, or on a CPU the host's available
    memory (MemAvailable), within this process's cgroup and address-space limits."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), f"the {device.device_kind}"
    room = [b for b in (_proc_bytes("/proc/meminfo", "MemAvailable"), _cgroup_room_bytes(), _address_space_room_bytes())
            if b is not None]
    if not room:
        room = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    return float(min(room)), "this machine (CPU)"


def fmt_bytes(b: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b / 1e3:.1f} kB"
