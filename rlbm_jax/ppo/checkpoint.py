"""Orbax checkpoints of the whole training state (network, optimiser, observation
statistics, every env's state, RNG keys), so that a resumed run continues exactly as
an uninterrupted one would.  Saves are synchronous (a finished save is on disk) and
the newest `max_to_keep` are kept, as `<directory>/<update>/`."""
from __future__ import annotations

import shutil
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp


def _empty(x) -> bool:
    return hasattr(x, "shape") and 0 in tuple(x.shape)


def _placeholder(x):
    return jax.numpy.zeros((1,), x.dtype)


class Checkpointer:
    def __init__(self, directory, max_to_keep: int = 2):
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_to_keep = max_to_keep
        self._ckpt = ocp.Checkpointer(ocp.StandardCheckpointHandler())

    def _steps(self):
        return sorted(int(p.name) for p in self.directory.iterdir() if p.is_dir() and p.name.isdigit())

    def save(self, update: int, state) -> None:
        # orbax refuses arrays with no elements (a params table with no rows, such as an env
        # without a capacity schedule): each is saved as one zero and rebuilt from the
        # template's shape on restore
        state = jax.tree.map(lambda x: _placeholder(x) if _empty(x) else x, state)
        self._ckpt.save(self.directory / str(int(update)), args=ocp.args.StandardSave(state), force=True)
        for old in self._steps()[:-self.max_to_keep]:
            shutil.rmtree(self.directory / str(old), ignore_errors=True)

    def latest(self) -> int | None:
        steps = self._steps()
        return steps[-1] if steps else None

    @staticmethod
    def latest_in(directory) -> int | None:
        """The newest update saved under `directory` (None if none, or no such directory),
        without creating anything."""
        d = Path(directory)
        steps = [int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit()] if d.is_dir() else []
        return max(steps) if steps else None

    def restore(self, template, update: int | None = None):
        """`template`: a state (or `jax.eval_shape` of one) with the saved structure.  The
        arrays come back as fresh ones on the default device (not committed to it), as
        `PPO.init` makes them: a jitted update compiled for a run's first state takes the
        restored state as it is, without a second compilation (orbax's arrays, committed,
        would be lowered with their placement spelled out: another program)."""
        update = self.latest() if update is None else update
        if update is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((1,) if _empty(x) else x.shape, x.dtype), template)
        out = self._ckpt.restore(self.directory / str(int(update)), args=ocp.args.StandardRestore(abstract))
        return jax.tree.map(lambda t, x: jax.numpy.zeros(t.shape, t.dtype) if _empty(t) else
                            jax.device_put(np.asarray(x)), template, out)

    def close(self) -> None:
        self._ckpt.close()
