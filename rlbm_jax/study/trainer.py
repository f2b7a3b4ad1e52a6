"""One way to train a study's PPO agent: several training seeds in one vmapped call, in
chunks of updates (a checkpoint and a time-budget check after each), with a progress bar,
`metrics.csv` (one row per seed and update), `curves.png`, `trained.msgpack` and
`train_summary.json` in the run directory; and one way to load such a run back.

    ppo, cfg = make_ppo(...)
    summary = train_seeds(ppo, seeds=[0, 1, 2], run=Path("runs/x"), updates=200, chunk=5, label="QueuePilot-v0")
    ppo, params, obs_stats, seeds, updates = load_trained(run, make_ppo_of_config)
"""
from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

WEIGHTS = "trained.msgpack"


def write_rows(path: Path, rows) -> None:
    """`rows` (dicts with the same keys) as a CSV file; nothing when there are none."""
    if not rows:
        return
    with Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def plot_curves(rows, path: Path) -> None:
    """The training curves of `metrics.csv` rows, one line per seed, against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({int(r["seed"]) for r in rows})
    panels = [("reward_mean", "mean reward per step"), ("info_worst_slowdown", "worst FCT slowdown (per interval)"),
              ("info_throughput", "throughput / capacity"), ("value_loss", "value loss"),
              ("entropy", "policy entropy"), ("approx_kl", "approx. KL")]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, title) in zip(axes.flat, panels):
        for s in seeds:
            rr = [r for r in rows if int(r["seed"]) == s and key in r]
            if rr:
                ax.plot([int(r["env_steps"]) for r in rr], [float(r[key]) for r in rr], lw=1, label=f"seed {s}")
        ax.set_title(title)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    if len(seeds) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_seed_series(rows, path: Path, *, x: str, series, xlabel: str, ylabel: str, title: str) -> None:
    """One panel of `metrics.csv`-like rows: for each training seed, each (key, label, line
    style) of `series` against `x` (a trainer's learning curve)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in sorted({r["seed"] for r in rows}):
        rr = [r for r in rows if r["seed"] == s]
        for key, label, style in series:
            ax.plot([r[x] for r in rr], [r[key] for r in rr], style, label=f"seed {s}{': ' + label if label else ''}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train_seeds(ppo, *, seeds, run: Path, updates: int, chunk: int, time_budget_s: float | None = None,
                init_from: str | None = None, label: str = "", reward_name: str = "reward") -> dict:
    """Train `ppo` from each of `seeds` (one vmapped call per chunk of `chunk` updates) for
    `updates` updates or until `time_budget_s` of training wall time is spent; `init_from`
    (a trained.msgpack of the same seeds) continues from its networks and observation
    statistics with fresh envs and optimiser moments.  Writes metrics.csv, trained.msgpack
    (after every chunk), curves.png and train_summary.json into `run`; returns the summary.
    The summary counts the compilations of the chunk (`compilations`: one per distinct chunk
    length).  A ValueError for an `init_from` that does not hold this trainer's seeds."""
    from flax import serialization

    from rlbm_jax import jsonio
    from rlbm_jax.progress import Progress

    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    n_seeds = len(seeds)
    cfg = ppo.cfg
    steps_per_update = cfg.batch_size * n_seeds
    bar = Progress(updates, unit=" updates", label="train ", rate_unit="env-steps/s", rate_scale=steps_per_update)
    seen = {"u": 0}

    def on_update(update, reward):
        u = int(update)
        if u > seen["u"]:
            seen["u"] = u
            bar.update(u, extra=f"{reward_name} {float(reward):+.4f}")

    ppo.on_update = on_update  # read when the update is first traced
    print(f"{label}: {n_seeds} seed(s) x {cfg.num_envs} envs x {cfg.num_steps} steps per update, at most {updates} "
          f"updates on {jax.default_backend()} ({jax.devices()[0].device_kind}); run dir {run}", file=sys.stderr)
    ts = ppo.init_seeds(jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds]))
    u0 = 0
    if init_from:
        try:
            state = serialization.from_bytes({"params": ts.params, "obs_stats": ts.obs_stats, "updates": 0},
                                             Path(init_from).read_bytes())
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"--init-from {init_from}: {e} (it must be a {WEIGHTS} of {n_seeds} seeds)") from None
        u0 = int(state["updates"])
        ts = ts.replace(params=state["params"], obs_stats=state["obs_stats"],
                        opt_state=jax.vmap(ppo.tx.init)(state["params"]))
        print(f"continuing from {init_from} (after {u0} updates)", file=sys.stderr)
    bar.update(0, extra="compiling", measure=False)
    rows, u, t_train, t_first = [], u0, 0.0, None
    t0 = time.perf_counter()
    while u < u0 + updates:
        n = min(chunk, u0 + updates - u)
        tc = time.perf_counter()
        ts, m = ppo.run_seeds(ts, n)
        m = jax.device_get(m)
        dt = time.perf_counter() - tc
        if t_first is None:
            t_first = dt  # compilation and the first chunk
        else:
            t_train += dt
        for s in range(n_seeds):
            for i in range(n):
                row = {"seed": int(seeds[s]), "update": u + i + 1, "env_steps": (u + i + 1) * cfg.batch_size,
                       "wall_s": f"{time.perf_counter() - t0:.2f}"}
                row.update({k: f"{float(v[s, i]):.6g}" for k, v in sorted(m.items())})
                rows.append(row)
        u += n
        write_rows(run / "metrics.csv", rows)
        (run / WEIGHTS).write_bytes(serialization.to_bytes({"params": ts.params, "obs_stats": ts.obs_stats,
                                                            "updates": u}))
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            bar.note(f"time budget {time_budget_s:g} s spent after {u} updates")
            break
    bar.close()
    plot_curves(rows, run / "curves.png")
    per_s = (u - u0 - chunk) * steps_per_update / t_train if t_train > 0 else float("nan")
    summary = {"run_dir": str(run), "updates": u, "init_from_updates": u0, "env_steps_per_seed": u * cfg.batch_size,
               "first_chunk_s": round(t_first or 0.0, 1), "wall_s": round(time.perf_counter() - t0, 1),
               "env_steps_per_s_after_first_chunk": round(per_s, 1), "device": jax.devices()[0].device_kind,
               # the compiled chunks of updates: one per chunk length (the last may be shorter)
               "compilations": _cache_size(ppo.run_seeds)}
    jsonio.write(run / "train_summary.json", summary)
    return summary


def _cache_size(fn):
    size = getattr(fn, "_cache_size", None)
    return int(size()) if callable(size) else None


def trained_run(run: Path, required=("ppo", "episode_s", "seeds"), weights: bool = True, how: str = "") -> dict:
    """The config.json of the training run in `run` (a ValueError when it holds none, lacks
    one of `required`, or, with `weights`, holds no trained.msgpack); `how` names the command
    that makes one."""
    run = Path(run)
    how = how or "a training run"
    if weights and not (run / WEIGHTS).is_file():
        raise ValueError(f"{run} holds no {WEIGHTS} (run {how} first)")
    if not (run / "config.json").is_file():
        raise ValueError(f"{run} holds no config.json ({how})")
    cfg = json.loads((run / "config.json").read_text())
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"{run / 'config.json'} lacks {', '.join(missing)} ({how})")
    return cfg


def load_trained(run: Path, make_ppo, cfg: dict | None = None):
    """(ppo, params [seeds], obs_stats [seeds], seeds, updates) of a training run: the
    trainer rebuilt by `make_ppo(config)` from its config.json (or `cfg`), the networks from
    its trained.msgpack."""
    from flax import serialization

    run = Path(run)
    cfg = cfg if cfg is not None else json.loads((run / "config.json").read_text())
    ppo = make_ppo(cfg)
    seeds = [int(s) for s in cfg["seeds"]]
    tmpl = jax.eval_shape(ppo.init_seeds, jnp.stack([jax.random.PRNGKey(s) for s in seeds]))
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), {"params": tmpl.params, "obs_stats": tmpl.obs_stats})
    zeros["updates"] = 0
    state = serialization.from_bytes(zeros, (run / WEIGHTS).read_bytes())
    return ppo, state["params"], state["obs_stats"], seeds, int(state["updates"])


def seed_slice(tree, j: int):
    """Training seed j's leaves of a [seeds, ...] pytree."""
    return jax.tree.map(lambda x: x[j], tree)
