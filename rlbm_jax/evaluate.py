"""Score agents and baselines on the env's reward and the simulator's report.

`score(env_params, agent, seeds)` runs whole episodes (no auto-reset) for every seed
and every scenario in `env_params` (a single `EnvParams` or a batch stacked along a
leading axis, as `stack_params` makes), all in one vmapped, jitted call, and returns
per (scenario, seed): the mean per-step reward and every `metrics.summarize` field.
`agent` is a jittable fn(obs [D]) -> action, or None to score the buffer policy
already in the params (a baseline ignores the action, so it is scored on the same
reward with the same flows: seeds pair the comparison).
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.devices import env_sharding, replicated, sharded_jit
from rlbm_jax.env import metrics as mx
from rlbm_jax.env.params import SimParams, stack_params as _stack_params
from rlbm_jax.env.rlbm_env import EnvParams, RLBMEnv
from rlbm_jax.progress import Progress

# the report fields a grid evaluation keeps per policy and cell
REPORT_FIELDS = ("reward_mean", "goodput_bps", "util_wire", "slowdown_p99", "slowdown_p50", "queue_p99_pkts",
                 "queue_mean_pkts", "fct_mean_s", "drop_rate", "flows_started", "flows_completed")


def stack_params(items: Sequence):
    """Stack env params along a new leading axis (`params.stack_params`: the static record of
    model choices joined, ring sizes padded, any other static field must agree)."""
    return _stack_params(items)


def score(env: RLBMEnv, env_params: EnvParams, agent: Callable | None, seeds: Sequence[int],
          batched: bool = False) -> dict:
    """Returns {field: array [cells, seeds]} (no cell axis when `batched` is False)."""
    if len(seeds) == 0:
        raise ValueError("seeds: need at least one seed")
    from rlbm_jax.simulate import check_memory

    cells = jax.tree.leaves(env_params)[0].shape[0] if batched else 1
    check_memory(jax.tree.map(lambda x: x[0], env_params.sim) if batched else env_params.sim, cells * len(seeds))
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    n_steps = int(np.max(np.asarray(env_params.max_steps_in_episode)))
    num_classes = env.num_classes

    def episode(ep, key):
        obs, st = env.reset_env(key, ep)

        def body(c, _):
            obs, st, tot = c
            act = agent(obs) if agent is not None else jnp.zeros((num_classes,), jnp.float32)
            live = st.time < ep.max_steps_in_episode
            obs2, st2, r, _, _ = env.step_env(key, st, act, ep)
            st2 = jax.tree.map(lambda a, b: jnp.where(live, a, b), st2, st)
            obs2 = jnp.where(live, obs2, obs)
            return (obs2, st2, tot + jnp.where(live, r, 0.0)), None

        (obs, st, tot), _ = jax.lax.scan(body, (obs, st, jnp.float32(0.0)), None, length=n_steps)
        rep = mx.summarize(st.sim.metrics, ep.sim)
        rep["reward_mean"] = tot / jnp.maximum(st.time, 1)
        return rep

    per_seed = jax.vmap(episode, in_axes=(None, 0))
    fn = jax.vmap(per_seed, in_axes=(0, None)) if batched else per_seed
    # the leading axis (cells, or seeds) spread over the devices (of every process)
    axis = env_sharding(jax.tree.leaves(env_params)[0].shape[0] if batched else len(seeds))
    in_shardings = (axis, replicated(axis)) if batched else (replicated(axis), axis)
    out = sharded_jit(fn, in_shardings, axis)(env_params, keys)
    return {k: np.asarray(v) for k, v in out.items()}


def score_policies(env: RLBMEnv, sims: Sequence[SimParams], agents: dict, baselines: Sequence[str],
                   seeds: Sequence[int], show_progress: bool = True) -> dict:
    """Every agent ({name: fn(obs) -> action}, run on the "rl" policy in `sims`) and every
    named baseline, on every scenario in `sims` (equal static fields) and seed:
    {name: {field: array [cells, seeds]}}, the same flows for all in a cell and seed."""
    from rlbm_jax.simulate import with_policy

    ep0 = env.default_params
    runs = list(agents.items()) + [(b, None) for b in baselines]
    bar = Progress(len(runs), unit=" policies", label=f"{len(sims)} cells x {len(seeds)} seeds ") \
        if show_progress else None
    if bar:
        bar.update(0, measure=False)
    results = {}
    for i, (name, agent) in enumerate(runs):
        cells = sims if agent is not None else [with_policy(p, name) for p in sims]
        results[name] = score(env, stack_params([ep0.replace(sim=p) for p in cells]), agent, seeds, batched=True)
        if bar:
            bar.update(i + 1, extra=name)
    if bar:
        bar.close()
    return results


def mean_rows(results: dict, grid: Sequence[tuple], fields: Sequence[str]) -> list[dict]:
    """One row per policy and thesis-grid cell (tcp, buffer_per_class_pkts, load): the
    mean and standard deviation over seeds of each field of `results`
    ({policy: {field: [cells, seeds]}}) and `<field>_n`, the seeds that had a value: the
    mean is NaN where no seed has one, the std where fewer than two have."""
    rows = []
    for name, res in results.items():
        for c, (t, n, ld) in enumerate(grid):
            row = {"policy": name, "tcp": t, "buffer_per_class_pkts": n, "load": ld}
            for f in fields:
                row[f], row[f + "_std"], row[f + "_n"] = mx.seed_stats(res[f][c])
            rows.append(row)
    return rows


def per_seed_rows(results: dict, grid: Sequence[tuple], fields: Sequence[str], seeds: Sequence[int]) -> list[dict]:
    """One row per policy, thesis-grid cell and seed: every field of `results` as run, so
    a comparison can be re-done (paired by seed) without re-simulating."""
    return [{"policy": name, "tcp": t, "buffer_per_class_pkts": n, "load": ld, "seed": int(s),
             **{f: float(res[f][c][j]) for f in fields}}
            for name, res in results.items() for c, (t, n, ld) in enumerate(grid) for j, s in enumerate(seeds)]


def paired_diff(a, b) -> tuple[float, float]:
    """Mean of the paired difference a - b (arrays [seeds] for one cell, or [cells, seeds]
    for a grid) and its standard error over the seeds.  Every cell of one seed draws its
    flows from the same key, so the cells of a seed are not independent samples: the
    error is that of the per-seed means over the cells (the cells are fixed; the seeds are
    the random draws).  NaN with one seed."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    per_seed = d.reshape(-1, d.shape[-1]).mean(axis=0)
    se = float(per_seed.std(ddof=1) / np.sqrt(per_seed.size)) if per_seed.size > 1 else float("nan")
    return float(d.mean()), se


def beats_baselines(mean: Callable[[str, str], float], agent: str, baselines: Sequence[str]) -> tuple[bool, bool]:
    """The targets of a trained policy in one cell, from mean(policy, field) over seeds:
    (a higher mean reward than every baseline, a lower p99 FCT slowdown than every
    baseline at no more than 2 % throughput loss against the best baseline's)."""
    reward = all(mean(agent, "reward_mean") > mean(b, "reward_mean") for b in baselines)
    slowdown = (mean(agent, "slowdown_p99") < min(mean(b, "slowdown_p99") for b in baselines)
                and mean(agent, "goodput_bps") >= 0.98 * max(mean(b, "goodput_bps") for b in baselines))
    return reward, slowdown


def plot_load_grid(tcp: str, buffers: Sequence[int], panels: Sequence[tuple], draw: Callable, path,
                   legend: dict | None = None):
    """The thesis figures: one row per panel (field, axis label, scale), one column per
    per-class buffer size, load on x.  draw(ax, field, scale, buffer_pkts, first) draws
    one panel's lines (`first`: the panel that carries the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), len(buffers), figsize=(4.2 * len(buffers), 2.6 * len(panels)),
                             squeeze=False)
    for j, n in enumerate(buffers):
        for i, (f, label, scale) in enumerate(panels):
            ax = axes[i, j]
            draw(ax, f, scale, n, i == 0 and j == 0)
            if i == 0:
                ax.set_title(f"{tcp}, N = {n} pkts per class")
            if j == 0:
                ax.set_ylabel(label)
            if i == len(panels) - 1:
                ax.set_xlabel("load")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(**(legend or {"fontsize": 7}))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scoring_formulation(policy_formulation: str | None, reward: str | None):
    """The formulation an evaluation scores on: the policy's (or the default's when only
    baselines run), with `reward` in place of its own when given."""
    from rlbm_jax.env import formulations

    form = formulations.get(policy_formulation) if policy_formulation else formulations.DEFAULT
    return form.with_reward(reward) if reward else form
