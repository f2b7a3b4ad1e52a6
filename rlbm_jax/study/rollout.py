"""One batched evaluation rollout for every study: N runs (stacked SimParams and keys) of an
env, a policy acting at each step, per-run results; compiled once per shape and reused.

An actor is `actor(args, carry, obs, state, first, env_params) -> (carry, action)`: `args`
its parameters (a pytree, the same for every run of a batch; `args["carry0"]` its first
carry), `state` the env's state before the step (`state.sim.interval`: the last interval's
record), `first` True at the episode's first step.  `actor=None` leaves the switch's own
policy to act (the action is zeros and the env ignores it: a classic AQM).

Per run: the mean over the steps after `warm_steps` of the reward and of every scalar that
`step_record(state, reward, info, action, env_params)` returns (computed after the step), or
its largest value for the names in `step_max`, the whole series of the names in `traces`
(`<name>_trace`), the run summary (`metrics.summarize`, measured from the sims' warmup_s)
and, with `log`, the completion log.  A run may be shorter than the batch's `steps` (its own
`n_steps`, a flow's length in a packet-timed study): its scores count its own steps only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from rlbm_jax.env import metrics as mx
from rlbm_jax.env.params import make_params, stack_params


def zero_action(env):
    """The action a policy-less run passes (ignored by the switch's own policy)."""
    space = env.action_space()
    if isinstance(space, spaces.Discrete):
        return jnp.zeros((), jnp.int32)
    return jnp.zeros(space.shape, jnp.float32)


def rollout_fn(env, steps: int, warm_steps: int, actor=None, step_record=None, traces=(), log: bool = True,
               step_max=()):
    """jit(vmap(one run)): (sims [N] stacked SimParams, keys [N], args, n_steps [N]) -> per-run
    results (the module's docstring says which); `steps` is the scan's length, at least every
    run's n_steps."""
    a0 = zero_action(env)

    def one(sp, key, args, n_steps):
        ep = env.default_params.replace(sim=sp)
        k0, key = jax.random.split(key)
        obs, st = env.reset_env(k0, ep)
        carry = args["carry0"] if actor is not None else ()

        def body(c, i):
            st, obs, carry, key, first = c
            key, k = jax.random.split(key)
            if actor is None:
                a = a0
            else:
                carry, a = actor(args, carry, obs, st, first, ep)
            obs, st, r, _, info = env.step_env(k, st, a, ep)
            rec = {"reward": r}
            if step_record is not None:
                rec.update(step_record(st, r, info, a, ep))
            return (st, obs, carry, key, jnp.zeros((), bool)), rec

        init = (st, obs, carry, key, jnp.ones((), bool))
        (st, _, _, _, _), tr = jax.lax.scan(body, init, jnp.arange(steps))
        t = jnp.arange(steps)
        live = (t >= warm_steps) & (t < n_steps)
        n = jnp.maximum(n_steps - warm_steps, 1).astype(jnp.float32)
        mask = lambda v: live.reshape((-1,) + (1,) * (v.ndim - 1))
        res = {k: (jnp.max(jnp.where(mask(v), v, -jnp.inf), 0) if k in step_max
                   else jnp.sum(jnp.where(mask(v), v, 0), 0) / n) for k, v in tr.items()}
        for k in traces:
            res[f"{k}_trace"] = tr[k]
        res.update(mx.summarize(st.sim.metrics, sp))
        if log:
            res["log"] = st.sim.metrics.log
            res["log_count"] = st.sim.metrics.log_count
        return res

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None, 0)))


_COMPILED: dict = {}


def run_batch(make_env, runs, steps: int, warm_steps: int, actor=None, args=None, *, chunk: int = 50,
              step_record=None, traces=(), log: bool = True, progress=None, name=None, step_max=()) -> list:
    """runs: list of (make_params kwargs, seed) or (make_params kwargs, seed, n_steps) (a run
    shorter than `steps`).  Per-run result dicts (numpy), in the order of `runs`, evaluated in
    batches of `chunk` runs (or all of them, where fewer) of the same static sizes (the last
    padded: one shape, one compilation per set of static sizes and batch size).  One compiled function per
    (make_env, steps, warm_steps, actor or `name`, step_record, traces, step_max, static
    sizes, chunk), reused across calls.  `make_env(sim_params, steps)` builds the env of a
    run of `steps` steps; `progress(done)` is called after each batch."""
    if not runs:
        return []
    sims = [make_params(**r[0]) for r in runs]
    groups = {}
    for i, sp in enumerate(sims):  # runs whose static sizes differ (flow slots, senders) run batch by batch
        groups.setdefault(jax.tree.structure(sp), []).append(i)
    if len(groups) > 1:
        out, done = [None] * len(runs), 0
        for idx in groups.values():
            part = run_batch(make_env, [runs[i] for i in idx], steps, warm_steps, actor, args, chunk=chunk,
                             step_record=step_record, traces=traces, log=log, name=name, step_max=step_max,
                             progress=None if progress is None else (lambda k, d=done: progress(d + k)))
            for i, r in zip(idx, part):
                out[i] = r
            done += len(idx)
        return out
    n_steps = [int(r[2]) if len(r) > 2 else steps for r in runs]
    bad = [n for n in n_steps if not warm_steps < n <= steps]
    if bad:
        raise ValueError(f"a run of {bad[0]} steps: every run must be longer than the {warm_steps} warm-up steps and "
                         f"at most the batch's {steps}")
    chunk = min(chunk, len(runs))  # a small set of runs is not padded to a whole chunk
    ck = (make_env, steps, warm_steps, name if name is not None else actor, step_record, tuple(traces), log,
          tuple(step_max), jax.tree.structure(sims[0]), chunk)
    if ck not in _COMPILED:
        env = make_env(sims[0], steps)
        _COMPILED[ck] = rollout_fn(env, steps, warm_steps, actor, step_record, traces, log, step_max)
    fn = _COMPILED[ck]
    out = []
    for i in range(0, len(runs), chunk):
        part = list(range(i, min(i + chunk, len(runs))))
        pad = part + [part[-1]] * (chunk - len(part))
        sp = stack_params([sims[j] for j in pad])
        keys = jnp.stack([jax.random.PRNGKey(int(runs[j][1])) for j in pad])
        res = jax.device_get(fn(sp, keys, args if args is not None else {}, jnp.asarray([n_steps[j] for j in pad])))
        for k, j in enumerate(part):
            out.append({name_: np.asarray(v[k]) for name_, v in res.items()})
        if progress is not None:
            progress(len(out))
    return out


def lstm_actor(ppo):
    """A trained PPO policy's deterministic action (argmax of a discrete policy, the mean of
    a Gaussian one) as an actor; args = `actor_args(...)`."""
    discrete = ppo.adapter.discrete

    def act(args, carry, obs, state, first, ep):
        carry = jax.tree.map(lambda x: x[None], carry)
        carry, a = ppo.act_deterministic(args["params"], args["obs_stats"], obs[None], carry, first[None])
        a = jnp.asarray(a)
        a = a.reshape(()).astype(jnp.int32) if discrete else a[0]
        return jax.tree.map(lambda x: x[0], carry), a
    return act


def actor_args(ppo, params, obs_stats) -> dict:
    """{"params", "obs_stats", "carry0"} of one training seed's network (its recurrent
    state zero, or () for an MLP)."""
    from rlbm_jax.ppo import networks

    if ppo.cfg.network == "lstm":
        carry0 = jax.tree.map(lambda x: x[0], networks.initial_carry(1, ppo.cfg.lstm_size))
    else:
        carry0 = ()
    return {"params": params, "obs_stats": obs_stats, "carry0": carry0}
