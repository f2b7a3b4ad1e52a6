"""PPO whose whole update (rollout, GAE, epochs of minibatch steps) is one jitted
function; `PPO.run` scans it for many updates and vmaps it over independent seeds.

Data of one update, B = num_envs (x A, an env with an agent axis of A agents, each a row of
the batch acting through the one policy), T = num_steps:
    rollout  `lax.scan` of T vmapped `env.step` calls (gymnax auto-reset), storing the
             normalised obs, `first` flags, actions, log-probs, values, rewards,
             `terminated`, `done` and the value of `info["final_observation"]`;
    GAE      backwards `lax.scan`; the bootstrap of step t is V(final obs of t) unless
             the episode *terminated* there, so a truncated episode is bootstrapped and
             a terminated one is not; the advantage recursion stops at every `done`;
    epochs   `lax.scan` over epochs of a `lax.scan` over minibatches (flat shuffled
             transitions for the MLP, whole env sequences for the LSTM).
Observations are normalised by running statistics (updated after each rollout and
kept in the train state, so they travel with checkpoints and exported policies).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from gymnax.environments import spaces

from rlbm_jax.policy import build_action_map
from rlbm_jax.ppo import networks
from rlbm_jax.ppo.config import PPOConfig
from rlbm_jax.ppo.optim import clip_by_global_norm

_SKIP_INFO = ("terminated", "truncated", "final_observation")


@struct.dataclass
class ObsStats:
    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray


def init_stats(dim: int) -> ObsStats:
    return ObsStats(jnp.zeros(dim, jnp.float32), jnp.ones(dim, jnp.float32), jnp.asarray(1e-4, jnp.float32))


def update_stats(s: ObsStats, x) -> ObsStats:
    """Merge a batch x [N, D] into running mean/var (parallel Welford)."""
    n = jnp.asarray(x.shape[0], jnp.float32)
    m = x.mean(0)
    v = x.var(0)
    tot = s.count + n
    d = m - s.mean
    mean = s.mean + d * n / tot
    var = (s.var * s.count + v * n + d * d * s.count * n / tot) / tot
    return ObsStats(mean, var, tot)


@struct.dataclass
class TrainState:
    params: Any
    opt_state: Any
    obs_stats: ObsStats
    env_state: Any
    obs: jnp.ndarray  # [B, D] raw observation to act on
    first: jnp.ndarray  # [B] bool: obs starts an episode
    carry: Any  # LSTM state at the start of the next rollout (dummy for the MLP)
    ep_return: jnp.ndarray  # [B] return of each env's running episode
    key: jnp.ndarray
    update: jnp.ndarray  # [] updates done


class ActionAdapter:
    """Between the network's action (pre-squash u, or bin indices) and the env's."""

    def __init__(self, space, cfg: PPOConfig, obs_layout=None):
        self.cfg = cfg
        if isinstance(space, spaces.Discrete):
            self.kind, self.act_dim, self.bins, self.discrete = "discrete-env", 1, int(space.n), True
        elif isinstance(space, spaces.Box):
            self.act_dim = int(np.prod(space.shape))
            self.shape = tuple(space.shape)
            self.low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), self.shape).reshape(-1)
            self.high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), self.shape).reshape(-1)
            self.discrete = cfg.action == "discrete"
            self.bins = cfg.num_bins
            self.kind = "box"
            if not self.discrete and cfg.action_map != "none":
                # a map that reads the observation finds its entries by name, or refuses this env
                self.map = build_action_map(cfg.action_map, obs_layout, self.act_dim)
        else:
            raise ValueError(f"unsupported action space {type(space).__name__}")

    def to_env(self, a, obs=None):
        if self.kind == "discrete-env":
            return a[..., 0]
        if self.discrete:
            frac = a.astype(jnp.float32) / (self.bins - 1)
            x = self.low + frac * (self.high - self.low)
        elif self.cfg.action_map == "none":
            x = jnp.clip(a, self.low, self.high)
        else:
            x = self.map(a, obs)
        return x.reshape(a.shape[:-1] + self.shape)


class PPO:
    """PPO on a gymnax environment.  `init(key)` and `run(ts, n)` work on one seed;
    `init_seeds(keys)` / `run_seeds(ts, n)` on a leading seed axis (one vmapped call)."""

    def __init__(self, env, env_params, config: PPOConfig, on_update=None):
        """`on_update(update, reward_mean)`, if given, is called from inside the compiled
        run after every update (a host callback: progress of a long chunk of updates)."""
        self.env = env
        self.on_update = on_update
        self.env_params = env_params
        self.cfg = config.validate()
        # an env with an agent axis (A agents in each, one policy acting for each: obs [A, D],
        # action [A, ...], reward [A]) gives A rows of the batch per env (B = num_envs x A)
        self.agents = int(getattr(env, "agents", 0) or 0)
        self.rows = config.num_envs * max(self.agents, 1)
        # the observation's entry names, when the env has them (RLBM formulations do)
        self.obs_layout = getattr(env, "obs_layout", None)
        space = env.action_space(env_params)
        obs_shape = tuple(env.observation_space(env_params).shape)
        if self.agents:  # one agent's action and observation
            space = spaces.Box(np.asarray(space.low).reshape(-1)[0], np.asarray(space.high).reshape(-1)[0],
                               tuple(space.shape[1:]), space.dtype)
            obs_shape = obs_shape[1:]
        self.adapter = ActionAdapter(space, self.cfg, self.obs_layout)
        self.obs_dim = int(np.prod(obs_shape))
        if isinstance(self.cfg.init_action, tuple) and len(self.cfg.init_action) != self.adapter.act_dim:
            raise ValueError(f"PPOConfig.init_action has {len(self.cfg.init_action)} values; this env's action has "
                             f"{self.adapter.act_dim} dimensions (give one value, or one per dimension)")
        self.net = networks.ActorCritic(
            act_dim=self.adapter.act_dim, discrete=self.adapter.discrete, num_bins=self.adapter.bins,
            hidden=tuple(self.cfg.hidden), activation=self.cfg.activation, recurrent=self.cfg.network == "lstm",
            lstm_size=self.cfg.lstm_size, init_log_std=self.cfg.init_log_std,
            init_mean=self.cfg.init_mean)
        steps = self.cfg.total_updates * self.cfg.update_epochs * self.cfg.num_minibatches
        lr = optax.linear_schedule(self.cfg.lr, 0.0, steps) if self.cfg.anneal_lr else self.cfg.lr
        self.tx = optax.chain(clip_by_global_norm(self.cfg.max_grad_norm), optax.adam(lr, eps=1e-5))
        self.run = jax.jit(self._run, static_argnums=1)
        self.run_seeds = jax.jit(jax.vmap(self._run, in_axes=(0, None)), static_argnums=1)
        self.init_seeds = jax.jit(jax.vmap(self.init))

    # ---- helpers -----------------------------------------------------------------
    def _carry(self, batch):
        return networks.initial_carry(batch, self.cfg.lstm_size) if self.cfg.network == "lstm" else ()

    def normalize(self, stats: ObsStats, obs):
        if not self.cfg.normalize_obs:
            return obs
        x = (obs - stats.mean) / jnp.sqrt(stats.var + 1e-8)
        return jnp.clip(x, -self.cfg.obs_clip, self.cfg.obs_clip)

    def _rows(self, x):
        """An env's [num_envs, A, ...] as the batch's rows [num_envs x A, ...]; an env-wide
        value [num_envs, ...] repeated for each of its agents (no agent axis: as it is)."""
        if not self.agents:
            return x
        E = self.cfg.num_envs
        if x.ndim >= 2 and x.shape[:2] == (E, self.agents):
            return x.reshape((E * self.agents,) + x.shape[2:])
        return jnp.repeat(x, self.agents, axis=0)

    def _step_envs(self, keys, env_state, action):
        if self.agents:  # the rows' actions, each env's A of them together
            action = action.reshape((self.cfg.num_envs, self.agents) + action.shape[1:])
        obs, env_state, reward, term, trunc, info = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(
            keys, env_state, action, self.env_params)
        return self._rows(obs), env_state, self._rows(reward), self._rows(term), self._rows(trunc), \
            jax.tree.map(self._rows, info)

    # ---- init ----------------------------------------------------------------------
    def init(self, key) -> TrainState:
        cfg = self.cfg
        k_net, k_env, k_time, key = jax.random.split(key, 4)
        obs, env_state = jax.vmap(self.env.reset, in_axes=(0, None))(jax.random.split(k_env, cfg.num_envs),
                                                                    self.env_params)
        # Spread the envs over the episode so that truncations do not all fall on one update.
        max_t = getattr(self.env_params, "max_steps_in_episode", None)
        if max_t is not None and hasattr(env_state, "time"):
            offs = jax.random.randint(k_time, (cfg.num_envs,), 0, jnp.maximum(max_t, 1))
            env_state = env_state.replace(time=env_state.time + offs)
        obs = self._rows(obs)
        first = jnp.ones((self.rows,), bool)
        params = self.net.init(k_net, self._carry(self.rows), obs[None].astype(jnp.float32), first[None])
        ts = TrainState(params=params, opt_state=self.tx.init(params), obs_stats=init_stats(self.obs_dim),
                        env_state=env_state, obs=obs.astype(jnp.float32), first=first,
                        carry=self._carry(self.rows), ep_return=jnp.zeros((self.rows,), jnp.float32),
                        key=key, update=jnp.asarray(0, jnp.int32))
        return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), ts)  # no weak types

    # ---- one update ------------------------------------------------------------------
    def _rollout(self, ts: TrainState):
        cfg, disc = self.cfg, self.adapter.discrete

        def step(c, _):
            env_state, obs, first, carry, ep_ret, key = c
            key, k_act, k_env = jax.random.split(key, 3)
            nobs = self.normalize(ts.obs_stats, obs)
            carry2, dist, value = self.net.apply(ts.params, carry, nobs[None], first[None])
            dist = jax.tree.map(lambda x: x[0] if x.ndim > 1 and x.shape[0] == 1 else x, dist)
            action = networks.sample(k_act, dist, disc)
            logp = networks.log_prob(dist, action, disc)
            obs2, env_state, reward, term, trunc, info = self._step_envs(
                jax.random.split(k_env, cfg.num_envs), env_state, self.adapter.to_env(action, obs))
            done = jnp.logical_or(term, trunc)
            fobs = self.normalize(ts.obs_stats, info["final_observation"].astype(jnp.float32))
            _, _, boot = self.net.apply(ts.params, carry2, fobs[None], jnp.zeros_like(first)[None])
            ep_ret = ep_ret + reward
            tr = dict(obs=nobs, raw_obs=obs, first=first, action=action, logp=logp, value=value[0],
                      reward=reward.astype(jnp.float32), terminated=term, done=done, boot=boot[0],
                      ep_return=ep_ret,
                      info={k: v.astype(jnp.float32) for k, v in info.items()
                            if k not in _SKIP_INFO and v.shape == (self.rows,)})
            ep_ret = jnp.where(done, 0.0, ep_ret)
            return (env_state, obs2.astype(jnp.float32), done, carry2, ep_ret, key), tr

        init = (ts.env_state, ts.obs, ts.first, ts.carry, ts.ep_return, ts.key)
        (env_state, obs, first, carry, ep_ret, key), traj = jax.lax.scan(step, init, None, cfg.num_steps)
        return ts.replace(env_state=env_state, obs=obs, first=first, carry=carry, ep_return=ep_ret, key=key), traj

    def _update(self, ts: TrainState, _):
        cfg, disc = self.cfg, self.adapter.discrete
        ts_in, carry0 = ts, ts.carry
        ts, traj = self._rollout(ts)
        adv, ret = gae(traj["reward"], traj["value"], traj["boot"], traj["terminated"], traj["done"],
                       cfg.gamma, cfg.gae_lambda)

        def loss_fn(params, mb):
            _, dist, value = self.net.apply(params, mb["carry"], mb["obs"], mb["first"])
            logp = networks.log_prob(dist, mb["action"], disc)
            ratio = jnp.exp(logp - mb["logp"])
            a = mb["adv"]
            if cfg.normalize_adv:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * a).mean()
            v_clip = mb["value"] + jnp.clip(value - mb["value"], -cfg.clip_eps, cfg.clip_eps)
            vl = 0.5 * jnp.maximum((value - mb["ret"]) ** 2, (v_clip - mb["ret"]) ** 2).mean()
            ent = networks.entropy(dist, disc).mean()
            loss = pg + cfg.vf_coef * vl - cfg.ent_coef * ent
            kl = ((ratio - 1) - jnp.log(ratio)).mean()
            clip_frac = (jnp.abs(ratio - 1) > cfg.clip_eps).mean()
            return loss, dict(policy_loss=pg, value_loss=vl, entropy=ent, approx_kl=kl, clip_frac=clip_frac)

        data = dict(obs=traj["obs"], first=traj["first"], action=traj["action"], logp=traj["logp"],
                    value=traj["value"], adv=adv, ret=ret)

        def epoch(c, _):
            params, opt_state, key = c
            key, k = jax.random.split(key)
            if cfg.network == "lstm":  # minibatches of whole env sequences
                perm = jax.random.permutation(k, self.rows)
                nb = cfg.num_minibatches
                shuf = jax.tree.map(lambda x: jnp.take(x, perm, axis=1), data)
                mbs = jax.tree.map(lambda x: jnp.moveaxis(x.reshape((x.shape[0], nb, -1) + x.shape[2:]), 1, 0), shuf)
                mbs["carry"] = jax.tree.map(lambda x: jnp.take(x, perm, axis=0).reshape((nb, -1) + x.shape[1:]),
                                            carry0)
            else:  # flat, shuffled transitions, as sequences of length 1
                size = self.rows * cfg.num_steps
                perm = jax.random.permutation(k, size)
                flat = jax.tree.map(lambda x: x.reshape((size,) + x.shape[2:])[perm], data)
                mbs = jax.tree.map(lambda x: x.reshape((cfg.num_minibatches, 1, -1) + x.shape[1:]), flat)

            def mb_step(c2, mb):
                params, opt_state = c2
                mb = dict(mb, carry=mb.get("carry", ()))
                (_, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
                upd, opt_state = self.tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, upd), opt_state), stats

            (params, opt_state), stats = jax.lax.scan(mb_step, (params, opt_state), mbs)
            return (params, opt_state, key), stats

        key, k_ep = jax.random.split(ts.key)
        (params, opt_state, _), stats = jax.lax.scan(epoch, (ts.params, ts.opt_state, k_ep), None, cfg.update_epochs)
        obs_stats = update_stats(ts.obs_stats, traj["raw_obs"].reshape(-1, self.obs_dim)) \
            if cfg.normalize_obs else ts.obs_stats
        new = ts.replace(params=params, opt_state=opt_state, obs_stats=obs_stats, key=key, update=ts.update + 1)
        # same dtypes (and no weak types) in as out, so a chunked run never recompiles
        ts = jax.tree.map(lambda n, o: jax.lax.convert_element_type(n, o.dtype), new, ts_in)
        if self.on_update is not None:
            jax.debug.callback(self.on_update, ts.update, traj["reward"].mean())
        n_ep = traj["done"].sum()
        metrics = {k: v.mean() for k, v in stats.items()}
        metrics.update(reward_mean=traj["reward"].mean(), episodes=n_ep,
                       episode_return=jnp.where(n_ep > 0, (traj["ep_return"] * traj["done"]).sum()
                                                / jnp.maximum(n_ep, 1), jnp.nan),
                       value_mean=traj["value"].mean(),
                       **{f"info_{k}": v.mean() for k, v in traj["info"].items()})
        return ts, metrics

    def _run(self, ts: TrainState, n_updates: int):
        return jax.lax.scan(self._update, ts, None, n_updates)

    # ---- acting ------------------------------------------------------------------------
    def act_deterministic(self, params, obs_stats: ObsStats, obs, carry=(), first=None):
        """Mean (gaussian) or most likely (discrete) action in env units, for obs [B, D]."""
        first = jnp.zeros(obs.shape[:1], bool) if first is None else first
        carry, dist, _ = self.net.apply(params, carry, self.normalize(obs_stats, obs)[None], first[None])
        a = networks.mode(jax.tree.map(lambda x: x[0] if x.ndim > 1 and x.shape[0] == 1 else x, dist),
                          self.adapter.discrete)
        return carry, self.adapter.to_env(a, obs)


def gae(reward, value, boot, terminated, done, gamma: float, lam: float):
    """Advantages and returns, all [T, B].  `boot` is V(final observation of step t):
    the next state's value unless the episode ended there; it is used unless the
    episode *terminated* (truncation keeps it).  The recursion stops at every done."""
    next_v = jnp.where(terminated, 0.0, boot)
    delta = reward + gamma * next_v - value

    def back(a_next, x):
        d, dn = x
        a = d + gamma * lam * jnp.where(dn, 0.0, a_next)
        return a, a

    _, adv = jax.lax.scan(back, jnp.zeros_like(value[0]), (delta, done), reverse=True)
    return adv, adv + value
