"""Orbax checkpoints of the whole training state (network, optimiser, observation
statistics, every env's state, RNG keys), so that a resumed run continues exactly as
an uninterrupted one would."""
from __future__ import annotations

from pathlib import Path

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    def __init__(self, directory, max_to_keep: int = 2):
        self.directory = Path(directory).resolve()
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True))

    def save(self, update: int, state) -> None:
        self.manager.save(int(update), args=ocp.args.StandardSave(state), force=True)
        self.manager.wait_until_finished()

    def latest(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, template, update: int | None = None):
        """`template`: a state (or `jax.eval_shape` of one) with the saved structure."""
        update = self.latest() if update is None else update
        if update is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), template)
        return self.manager.restore(int(update), args=ocp.args.StandardRestore(abstract))

    def close(self) -> None:
        self.manager.close()
