"""Orbax checkpoints of the whole training state (network, optimiser, observation
statistics, every env's state, RNG keys), so that a resumed run continues exactly as
an uninterrupted one would.  Saves are synchronous (a finished save is on disk) and
the newest `max_to_keep` are kept, as `<directory>/<update>/`."""
from __future__ import annotations

import shutil
from pathlib import Path

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    def __init__(self, directory, max_to_keep: int = 2):
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_to_keep = max_to_keep
        self._ckpt = ocp.Checkpointer(ocp.StandardCheckpointHandler())

    def _steps(self):
        return sorted(int(p.name) for p in self.directory.iterdir() if p.is_dir() and p.name.isdigit())

    def save(self, update: int, state) -> None:
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
        """`template`: a state (or `jax.eval_shape` of one) with the saved structure."""
        update = self.latest() if update is None else update
        if update is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), template)
        return self._ckpt.restore(self.directory / str(int(update)), args=ocp.args.StandardRestore(abstract))

    def close(self) -> None:
        self._ckpt.close()
