"""Actor-critic networks and their action distributions.

One call signature for every network: `apply(params, carry, obs [T, B, D], first [T, B])
-> (carry, dist, value [T, B])`, where `first` marks the first observation of an
episode (the LSTM resets its state there; the MLP ignores carry and first).
Actor and critic are separate towers, so the actor alone is the deployable policy.

Distributions: "gaussian" gives dist = (mean [T, B, A], log_std [A]), a diagonal
Gaussian over a pre-squash action u; the env receives action_map(u) (the Jacobian of
the squash cancels in PPO's ratio, so log-probs are taken in u-space).  "discrete"
gives dist = logits [T, B, A, bins], one categorical per action dimension.
"""
from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

_ACT = {"tanh": nn.tanh, "relu": nn.relu}


def orthogonal(scale: float = 1.0):
    """Orthogonal initializer (uniform over semi-orthogonal matrices, scaled), built
    from Gram-Schmidt in plain array ops.

    Same draw as `jax.nn.initializers.orthogonal`: a normal matrix Z [max, min] whose
    QR factor (signs fixed so R has a positive diagonal) is the result.  That one calls
    LAPACK's batched QR, which on XLA:CPU (jaxlib 0.10) schedules its batch on the
    intra-op thread pool and blocks; when training seeds are vmapped, several batched
    QRs run at once and can wedge a 2-core pool for good.  Gram-Schmidt (twice, for
    float32 accuracy) needs no custom call and gives the same Q to rounding.
    """

    def init(key, shape, dtype=jnp.float32):
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs a matrix shape, got {shape}")
        n_rows, n_cols = math.prod(shape[:-1]), shape[-1]
        big, small = max(n_rows, n_cols), min(n_rows, n_cols)
        z = jax.random.normal(key, (big, small), jnp.float32)

        def column(j, q):
            v = jax.lax.dynamic_index_in_dim(z, j, axis=1, keepdims=False)
            for _ in range(2):  # columns >= j of q are still zero
                v = v - q @ (q.T @ v)
            return jax.lax.dynamic_update_index_in_dim(q, v / jnp.linalg.norm(v), j, axis=1)

        q = jax.lax.fori_loop(0, small, column, jnp.zeros_like(z))
        if n_rows < n_cols:
            q = q.T
        return (scale * q).reshape(shape).astype(dtype)

    return init


class ScannedLSTM(nn.Module):
    size: int

    @functools.partial(nn.scan, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)
    @nn.compact
    def __call__(self, carry, xs):
        x, first = xs
        keep = (~first)[:, None]
        carry = tuple(jnp.where(keep, c, 0.0) for c in carry)
        carry, y = nn.OptimizedLSTMCell(self.size, recurrent_kernel_init=orthogonal(1.0))(carry, x)
        return carry, y


def initial_carry(batch: int, size: int):
    return (jnp.zeros((batch, size), jnp.float32), jnp.zeros((batch, size), jnp.float32))


class ActorCritic(nn.Module):
    act_dim: int
    discrete: bool = False
    num_bins: int = 2
    hidden: tuple = (64, 64)
    activation: str = "tanh"
    recurrent: bool = False
    lstm_size: int = 32
    init_log_std: float = -0.5
    init_mean: float | tuple = 0.0  # initial bias of the Gaussian mean (pre-squash): one, or one per action

    @nn.compact
    def __call__(self, carry, obs, first):
        act = _ACT[self.activation]
        ortho = orthogonal
        x = obs
        if self.recurrent:
            x = act(nn.Dense(self.lstm_size, kernel_init=ortho(math.sqrt(2)), name="embed")(x))
            carry, x = ScannedLSTM(self.lstm_size, name="lstm")(carry, (x, first))
        a = x
        for i, h in enumerate(self.hidden):
            a = act(nn.Dense(h, kernel_init=ortho(math.sqrt(2)), name=f"actor_{i}")(a))
        c = x
        for i, h in enumerate(self.hidden):
            c = act(nn.Dense(h, kernel_init=ortho(math.sqrt(2)), name=f"critic_{i}")(c))
        value = nn.Dense(1, kernel_init=ortho(1.0), name="critic_out")(c)[..., 0]
        if self.discrete:
            logits = nn.Dense(self.act_dim * self.num_bins, kernel_init=ortho(0.01), name="actor_out")(a)
            dist = logits.reshape(logits.shape[:-1] + (self.act_dim, self.num_bins))
        else:
            bias0 = nn.initializers.constant(jnp.asarray(self.init_mean, jnp.float32))  # scalar or [act_dim]
            mean = nn.Dense(self.act_dim, kernel_init=ortho(0.01), bias_init=bias0, name="actor_out")(a)
            log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.act_dim,))
            dist = (mean, log_std)
        return carry, dist, value


# ---- distributions ----------------------------------------------------------------

_LOG_2PI = float(np.log(2 * np.pi))


def sample(key, dist, discrete: bool):
    if discrete:
        return jax.random.categorical(key, dist, axis=-1)
    mean, log_std = dist
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)


def log_prob(dist, action, discrete: bool):
    if discrete:
        lp = jax.nn.log_softmax(dist, axis=-1)
        return jnp.take_along_axis(lp, action[..., None].astype(jnp.int32), axis=-1)[..., 0].sum(-1)
    mean, log_std = dist
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, axis=-1)


def entropy(dist, discrete: bool):
    if discrete:
        lp = jax.nn.log_softmax(dist, axis=-1)
        return -jnp.sum(jnp.exp(lp) * lp, axis=(-2, -1))
    mean, log_std = dist
    return jnp.broadcast_to(jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI)), mean.shape[:-1])


def mode(dist, discrete: bool):
    if discrete:
        return jnp.argmax(dist, axis=-1)
    return dist[0]
