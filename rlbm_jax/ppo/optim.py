"""Gradient clipping by the global norm, as the trainers use it (PPO, `rlbm_jax.apg`).

`clip_by_global_norm(max_norm)` is an optax transformation with optax's arithmetic: the
squared norm is the sum, leaf after leaf in the pytree's order, of each leaf's sum of
squares; every update is kept where the norm is below `max_norm`, else scaled by
`max_norm / norm` (divided by the norm, then multiplied).  The sums are added in a
`lax.scan` over the stacked per-leaf sums rather than in a chain of scalar additions in the
program: the same additions in the same order (same bits, checked on the LSTM and MLP
trainers in XLA:CPU's two compile modes), but XLA:CPU's loop emitters
(`--xla_cpu_use_fusion_emitters=false`, the test suite's mode) took about 30 s to compile
the chain of the LSTM's twelve sums where the scan takes about 2 s (docs/BENCHMARKS.md).

    tx = optax.chain(clip_by_global_norm(0.5), optax.adam(3e-4))
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def global_norm(tree) -> jax.Array:
    """The L2 norm of every leaf of `tree` together (a float scalar): per-leaf sums of squares
    added in the leaves' order."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    sums = jnp.stack([jnp.sum(jnp.square(x.real) + jnp.square(x.imag)) for x in leaves])
    total, _ = jax.lax.scan(lambda acc, s: (acc + s, None), jnp.zeros((), sums.dtype), sums)
    return jnp.sqrt(total)


def clip_by_global_norm(max_norm) -> optax.GradientTransformation:
    """Updates scaled so that their global norm (`global_norm`) is at most `max_norm`; kept as
    they are where it already is below."""
    def update_fn(updates, state, params=None):
        del params
        norm = global_norm(updates)
        keep = norm < max_norm
        return jax.tree.map(lambda u: jax.lax.select(keep, u, (u / norm.astype(u.dtype)) * max_norm), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)
