"""LFQ's offline training by A/B forking, as one batched step; the grid, the test sweep and
the baselines its study (`rlbm_jax.studies.lfq`) declares; the summaries of its ns-3 report.

The paper (Sec. V) draws 20 flows (bandwidth 5-25 Mbit/s, delay 5-25 ms, duration 3.75-6.25
s, New Reno or BIC), lets the network set each flow's cap every 10th packet, and at a random
time in the first half of each flow forks the simulation process: one copy continues with
the cap + 1 packet, the other with the cap - 1, to the flow's end; the network is then
trained (mean absolute error) to output, for the features seen at the fork, the cap of the
copy that earned more reward.  20 flows fill 40 CPUs.

Here a batch of B flows is a batch of 2B envs, [B, 2]: both copies of a flow start from the
same state and key and take the same caps (the network's, read from the first copy) until
the fork, so they are the same simulation bit for bit up to it (the env step is a pure
function; tests/test_lfq.py compares every state leaf), then hold cap + 1 and cap - 1 to
the flow's end.  (Copying the first copy's state into the second at every step before the
fork, as a `where` over the whole state, gives the same numbers and cost 2.5x the batched
step on an H100 at 1024 flows: docs/BENCHMARKS.md.)  The whole rollout, fork included, is one `lax.scan`
of one vmapped env step over the 2B envs (`rollout`), so on an accelerator a forked
iteration costs one batched simulation, not two (`scripts/bench_lfq.py` measures it).

Configurations: training draws from a grid (`TRAIN_RATES_MBPS` x `TRAIN_DELAYS_MS` x
`TCPS`, whole Mbit/s and ms), every flow its own duration and fork time; the test set is
off that grid (half-integers, the paper's Table VII sweep: delays at a fixed 15.5 Mbit/s,
bandwidths at a fixed 15.5 ms, both TCPs), with seeds disjoint from training.  CUBIC
stands in for the paper's BIC (chosen there only because ns-3 lacked CUBIC).

The network is the paper's: three dense layers of 256 with leaky ReLU and one output, the
cap (`CapNet`; inputs scaled by fixed constants, `OBS_SCALE`).  The paper trains with
gradient descent at a learning rate of 0.01; here Adam at 1e-3 over batches of `flows`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlbm_jax import scenarios
from rlbm_jax.env import formulations
from rlbm_jax.env.formulations import lfq as lfqf
from rlbm_jax.env.params import make_params, stack_params
from rlbm_jax.env.rlbm_env import EnvParams, RLBMEnv

TRAIN_RATES_MBPS = tuple(float(r) for r in range(5, 26))
TRAIN_DELAYS_MS = tuple(float(d) for d in range(5, 26))
TCPS = ("newreno", "cubic")
DURATION_S = (3.75, 6.25)
MAX_RATE_BPS, MAX_DELAY_S = 25e6, 0.025
TEST_FIXED = 15.5  # Mbit/s for the delay sweep, ms for the bandwidth sweep (off the training grid)
TEST_SWEEP = tuple(x + 0.5 for x in range(5, 25))  # 5.5 .. 24.5
TEST_DURATION_S = 5.0
TEST_SEEDS = (5000, 5001)
# each signal's scale at the network's input (queue, std, cap: packets; rates: Mbit/s; s)
SIGNAL_SCALE = (100.0, 100.0, 100.0, 10.0, 10.0, 1.0)
OBS_SCALE = np.tile(np.asarray(SIGNAL_SCALE, np.float32), 1 + len(lfqf.EWMA_EXPONENTS))
OUT_SCALE = 10.0  # the output layer's unit, in packets
PKTS_PER_STEP = lfqf.LFQ_PKTS_PER_TICK * lfqf.LFQ_TICKS_PER_STEP


class CapNet(nn.Module):
    """obs [..., 66] (raw, `LFQ-v0`'s) -> the cap in packets [...] (unclipped)."""

    hidden: tuple = (256, 256, 256)

    @nn.compact
    def __call__(self, obs):
        x = obs / jnp.asarray(OBS_SCALE)
        for h in self.hidden:
            x = nn.leaky_relu(nn.Dense(h)(x))
        return nn.Dense(1)(x)[..., 0] * OUT_SCALE


def data_pkt_bits(mss_bytes: int = 1446) -> float:
    return (mss_bytes + 52) * 8.0


def steps_for(duration_s, rate_bps):
    """Agent steps (10 packet slots each) of a flow of duration_s at rate_bps."""
    return np.maximum(1, np.round(np.asarray(duration_s) * np.asarray(rate_bps) / data_pkt_bits()
                                  / PKTS_PER_STEP)).astype(np.int32)


def bdp_pkts(rate_bps, delay_s):
    """The flow's BDP in data packets: rate x base RTT (2 x the one-way delay)."""
    return np.asarray(rate_bps) * 2.0 * np.asarray(delay_s) / data_pkt_bits()


def max_steps(duration_s: float = DURATION_S[1]) -> int:
    return int(steps_for(duration_s, MAX_RATE_BPS))


def far_delay_line_ticks(policy: str = "fq", **overrides) -> int:
    """The delay line every LFQ configuration gets so that all of them batch: the slowest
    tick's (the fastest link's) at the longest delay."""
    return make_params(**scenarios.lfq(rate_bps=MAX_RATE_BPS, delay_s=MAX_DELAY_S, policy=policy,
                                       **overrides)).delay_line_ticks


def config_kw(rate_mbps: float, delay_ms: float, tcp: str, policy: str = "fq", cap_pkts: float = 100.0,
              delay_line_ticks: int | None = None, **overrides) -> dict:
    """The make_params arguments of the configuration (rate_mbps, delay_ms, tcp), its delay
    line sized to batch with every other (`far_delay_line_ticks`)."""
    if delay_line_ticks is None:
        delay_line_ticks = far_delay_line_ticks(policy, **overrides)
    return scenarios.lfq(rate_bps=rate_mbps * 1e6, delay_s=delay_ms * 1e-3, tcp=tcp, cap_pkts=cap_pkts,
                         delay_line_ticks=delay_line_ticks, policy=policy, **overrides)


def config_params(configs, policy: str = "fq", cap_pkts: float = 100.0, **overrides):
    """Stacked SimParams [N] of configs [(rate_mbps, delay_ms, tcp)] (`config_kw`; `overrides`:
    other `scenarios.lfq` parameters, the same for all)."""
    far = far_delay_line_ticks(policy, **overrides)
    return stack_params([make_params(**config_kw(r, d, t, policy, cap_pkts, far, **overrides)) for r, d, t in configs])


def label(rate_mbps: float, delay_ms: float, tcp: str) -> str:
    """A configuration's name in a study's tables."""
    return f"{rate_mbps:g}Mbps {delay_ms:g}ms {tcp}"


def labelled_configs(triples) -> dict:
    """{label: make_params arguments} of configurations (rate_mbps, delay_ms, tcp), every one
    batching with every other."""
    far = far_delay_line_ticks()
    return {label(r, d, t): config_kw(r, d, t, delay_line_ticks=far) for r, d, t in triples}


def train_configs():
    return [(r, d, t) for t in TCPS for r in TRAIN_RATES_MBPS for d in TRAIN_DELAYS_MS]


def test_configs():
    """The held-out sweep: delays at TEST_FIXED Mbit/s, then bandwidths at TEST_FIXED ms, per TCP."""
    return ([(TEST_FIXED, d, t) for t in TCPS for d in TEST_SWEEP]
            + [(r, TEST_FIXED, t) for t in TCPS for r in TEST_SWEEP])


def make_env(alpha: float = 0.01):
    """The LFQ env (no auto-reset is used: `rollout` calls step_env) and its EnvParams
    template (sim params are given per env)."""
    fid = "LFQ-v0" if alpha == 0.01 else "LFQ-a10-v0" if alpha == 10.0 else None
    form = formulations.get(fid) if fid else dataclasses.replace(
        formulations.get("LFQ-v0"), reward=lfqf.LFQReward(alpha=alpha, name=f"lfq-alpha{alpha:g}"))
    sim0 = make_params(**scenarios.lfq())
    env = RLBMEnv(sim0, formulation=form, ticks_per_step=lfqf.LFQ_TICKS_PER_STEP, episode_s=60.0)
    return env


def _env_params(env, sim_batch, steps: int) -> EnvParams:
    return env.default_params.replace(sim=sim_batch, max_steps_in_episode=steps + 1)


def rollout(env, net, net_params, key, sim_batch, n_steps, fork_step, steps: int, return_state: bool = False):
    """One forked iteration over B flows: [B] sim params, n_steps [B] (the flow's length
    in agent steps), fork_step [B] (the step at which the copies part, < n_steps).
    Returns a dict: obs_fork [B, D] (what the network saw at the fork), cap_fork [B], the
    copies' rewards from the fork to the flow's end `ret` [B, 2], and the first copy's
    trajectory means over the flow (`bandwidth_mbps`, `queue_pkts`, `cap_pkts`) [B].
    `steps` (static) is the scan's length, at least max(n_steps); `return_state` adds the
    copies' env states after it (`state`, leaves [B, 2, ...])."""
    B = n_steps.shape[0]
    ep = _env_params(env, sim_batch, steps)
    keys = jax.random.split(key, B)
    in_ep = jax.tree.map(lambda _: None, ep).replace(sim=jax.tree.map(lambda _: 0, ep.sim))
    reset = jax.vmap(env.reset_env, in_axes=(0, in_ep))
    obs0, st0 = reset(keys, ep)
    two = lambda x: jnp.stack([x, x], axis=1)
    st = jax.tree.map(two, st0)
    obs = two(obs0)
    step = jax.vmap(jax.vmap(env.step_env, in_axes=(None, 0, 0, None)), in_axes=(0, 0, 0, in_ep))

    def body(c, t):
        st, obs, cap_fork, obs_fork, ret, acc = c
        cap_nn = jnp.clip(net.apply(net_params, obs[:, 0]), *lfqf.CAP_RANGE_PKTS)
        before = t < fork_step
        at = t == fork_step
        cap_fork = jnp.where(at, cap_nn, cap_fork)
        obs_fork = jnp.where(at[:, None], obs[:, 0], obs_fork)
        act = jnp.stack([jnp.where(before, cap_nn, cap_fork + 1.0),
                         jnp.where(before, cap_nn, jnp.maximum(cap_fork - 1.0, 1.0))], axis=1)[..., None]
        # until the fork both copies take the same caps from the same state and key, so they
        # stay the same bit for bit (tests/test_lfq.py checks every leaf): no copy is made
        obs2, st2, r, _, info = step(keys, st, act, ep)
        live = t < n_steps
        ret = ret + jnp.where((~before & live)[:, None], r, 0.0)
        w = live.astype(jnp.float32)
        acc = {"bandwidth_mbps": acc["bandwidth_mbps"] + w * info["bandwidth_mbps"][:, 0],
               "queue_pkts": acc["queue_pkts"] + w * info["queue_pkts"][:, 0],
               "cap_pkts": acc["cap_pkts"] + w * act[:, 0, 0]}
        return (st2, obs2, cap_fork, obs_fork, ret, acc), None

    z = jnp.zeros((B,), jnp.float32)
    init = (st, obs, z, jnp.zeros_like(obs0), jnp.zeros((B, 2), jnp.float32),
            {"bandwidth_mbps": z, "queue_pkts": z, "cap_pkts": z})
    (st, obs, cap_fork, obs_fork, ret, acc), _ = jax.lax.scan(body, init, jnp.arange(steps))
    n = n_steps.astype(jnp.float32)
    out = {"obs_fork": obs_fork, "cap_fork": cap_fork, "ret": ret, **{k: v / n for k, v in acc.items()}}
    return {**out, "state": st} if return_state else out


def _steps_jnp(duration_s, rate_bps):
    return jnp.maximum(1, jnp.round(duration_s * rate_bps / data_pkt_bits() / PKTS_PER_STEP)).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run's settings (recorded in the run's config)."""

    alpha: float = 0.01
    flows: int = 32  # flows per iteration (the paper's batch: 20)
    iterations: int = 100
    lr: float = 1e-3
    duration_s: tuple = DURATION_S  # each flow's duration is drawn uniformly in this range (s)
    sim_overrides: tuple = ()  # (name, value) pairs of other `scenarios.lfq` parameters (a smaller ring, say)


def make_trainer(cfg: TrainConfig):
    """(init, iteration, pool): init(key) -> (net params, opt state); iteration(params, opt,
    key) -> (params, opt, metrics), one jitted forked rollout of `cfg.flows` flows drawn from
    the training grid and one gradient step."""
    env = make_env(cfg.alpha)
    net = CapNet()
    opt = optax.adam(cfg.lr)
    pool = train_configs()
    sims_pool = config_params(pool, **dict(cfg.sim_overrides))
    rate_pool = jnp.asarray([r * 1e6 for r, _, _ in pool], jnp.float32)
    steps = max_steps(cfg.duration_s[1])

    def init(key):
        p = net.init(key, jnp.zeros((1, len(OBS_SCALE)), jnp.float32))
        return p, opt.init(p)

    @jax.jit
    def iteration(params, opt_state, key):
        k_cfg, k_dur, k_fork, k_run = jax.random.split(key, 4)
        idx = jax.random.randint(k_cfg, (cfg.flows,), 0, len(pool))
        sims = jax.tree.map(lambda x: x[idx], sims_pool)
        dur = jax.random.uniform(k_dur, (cfg.flows,), minval=cfg.duration_s[0], maxval=cfg.duration_s[1])
        n = _steps_jnp(dur, rate_pool[idx])
        fork = jnp.floor(jax.random.uniform(k_fork, (cfg.flows,)) * 0.5 * n).astype(jnp.int32)
        out = rollout(env, net, jax.lax.stop_gradient(params), k_run, sims, n, fork, steps)
        better = jnp.sign(out["ret"][:, 0] - out["ret"][:, 1])  # +1: the copy with cap + 1 earned more
        target = jnp.clip(out["cap_fork"] + better, *lfqf.CAP_RANGE_PKTS)
        mask = (better != 0).astype(jnp.float32)

        def loss_fn(p):
            pred = net.apply(p, out["obs_fork"])
            return jnp.sum(mask * jnp.abs(pred - target)) / jnp.maximum(jnp.sum(mask), 1.0)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        m = {"loss": loss, "ties": 1.0 - jnp.mean(mask), "up": jnp.mean(better > 0), "cap_fork": jnp.mean(out["cap_fork"]),
             "cap_pkts": jnp.mean(out["cap_pkts"]), "bandwidth_mbps": jnp.mean(out["bandwidth_mbps"]),
             "queue_pkts": jnp.mean(out["queue_pkts"]),
             "reward": jnp.mean(out["bandwidth_mbps"] * 1e6 / 8 - cfg.alpha * out["queue_pkts"] * (1446 + 52)) / 1e6}
        return params, opt_state, m

    return init, iteration, pool


def deploy(env, cap_fn, key, sims, n_steps, steps: int):
    """Run B flows (sims [B]) for their n_steps [B] with the caps cap_fn(obs [B, D]) -> [B]
    sets every step (no fork).  Returns per flow: mean bandwidth (Mbit/s, payload at the
    receiver), mean and largest queue (packets, the largest from the tick-by-tick queue
    histogram up to the flow's end) and the mean cap."""
    B = n_steps.shape[0]
    ep = _env_params(env, sims, steps)
    in_ep = jax.tree.map(lambda _: None, ep).replace(sim=jax.tree.map(lambda _: 0, ep.sim))
    keys = jax.random.split(key, B)
    obs, st = jax.vmap(env.reset_env, in_axes=(0, in_ep))(keys, ep)
    step = jax.vmap(env.step_env, in_axes=(0, 0, 0, in_ep))
    hist0 = jnp.zeros_like(st.sim.metrics.queue_hist[:, 0])

    def body(c, t):
        st, obs, acc, hist = c
        cap = jnp.clip(cap_fn(obs), *lfqf.CAP_RANGE_PKTS)
        obs, st, r, _, info = step(keys, st, cap[:, None], ep)
        live = (t < n_steps).astype(jnp.float32)
        acc = {"bandwidth_mbps": acc["bandwidth_mbps"] + live * info["bandwidth_mbps"],
               "queue_pkts": acc["queue_pkts"] + live * info["queue_pkts"], "cap_pkts": acc["cap_pkts"] + live * cap,
               "reward": acc["reward"] + live * r}
        hist = jnp.where((t == n_steps - 1)[:, None], st.sim.metrics.queue_hist[:, 0], hist)
        return (st, obs, acc, hist), None

    z = jnp.zeros((B,), jnp.float32)
    init = (st, obs, {"bandwidth_mbps": z, "queue_pkts": z, "cap_pkts": z, "reward": z}, hist0)
    (st, obs, acc, hist), _ = jax.lax.scan(body, init, jnp.arange(steps))
    n = n_steps.astype(jnp.float32)
    idx = jnp.arange(hist.shape[-1])
    qmax = jnp.max(jnp.where(hist > 0, idx[None, :], 0), axis=-1)
    return {**{k: v / n for k, v in acc.items()}, "queue_max_pkts": qmax.astype(jnp.float32)}


# the baselines of the paper's Table VII, and a per-flow BDP cap: name -> (policy, cap)
# (cap None: the BDP of each flow's configuration; FQ-CoDel has no cap)
BASELINES = {"fq-100": ("fq", 100.0), "fq-1000": ("fq", 1000.0), "fq-bdp": ("fq", None), "fq-codel": ("fq-codel", 100.0)}
# the paper's Table VII (average over 400 flows, both CCAs): throughput Mbit/s, queue max and average (packets)
PAPER_TABLE7 = {"LFQ offline alpha 0.01": (13.4, 23.9, 7.7), "LFQ offline alpha 10": (12.5, 12.7, 3.4),
                "LFQ online alpha 10": (12.8, 16.1, 4.5), "fq-codel": (13.7, 155.4, 15.4), "fq-100": (11.7, 100.0, 51.1),
                "fq-1000": (11.9, 1000.0, 630.4)}
METRICS = ("bandwidth_mbps", "queue_max_pkts", "queue_pkts", "cap_pkts", "reward")


def baseline_caps(name: str, configs) -> np.ndarray:
    """[configs] the cap baseline `name` sets on each (rate_mbps, delay_ms, tcp): its fixed
    cap, or the configuration's BDP, clipped to the action's range."""
    _, cap = BASELINES[name]
    rates = np.asarray([c[0] * 1e6 for c in configs])
    delays = np.asarray([c[1] * 1e-3 for c in configs])
    caps = bdp_pkts(rates, delays) if cap is None else np.full(len(configs), cap)
    return np.clip(caps, *lfqf.CAP_RANGE_PKTS)


def load_params(path):
    from flax import serialization
    net = CapNet()
    template = net.init(jax.random.PRNGKey(0), jnp.zeros((1, len(OBS_SCALE)), jnp.float32))
    return serialization.from_bytes(template, Path(path).read_bytes())


def _mean_se(x):
    x = np.asarray(x, np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def summarize(runs: dict, configs) -> dict:
    """Per policy, per TCP and overall: each metric's mean and standard error over its seed
    units (training seeds for the agent, test seeds for a baseline)."""
    tcps = np.asarray([c[2] for c in configs])
    out = {}
    for name, r in runs.items():
        per = {}
        for tcp in ("all",) + TCPS:
            sel = np.ones(len(configs), bool) if tcp == "all" else tcps == tcp
            if not sel.any():
                continue  # no configuration of this TCP was run
            # r[m]: [units, seeds, configs] -> per unit mean over its seeds and configs
            per[tcp] = {m: _mean_se(np.asarray(r[m])[..., sel].reshape(len(r[m]), -1).mean(axis=1)) for m in METRICS}
        out[name] = per
    return out


def correlations(agent_runs: dict, configs) -> dict:
    """The learnt cap's Pearson correlation with the bandwidth (delay fixed) and with the
    delay (bandwidth fixed), per TCP (the paper's Table I / III), and its mean (Table II / IV)."""
    cap = np.asarray(agent_runs["cap_pkts"]).mean(axis=(0, 1))  # [configs]
    out = {}
    for tcp in TCPS:
        d_idx = [i for i, c in enumerate(configs) if c[2] == tcp and c[0] == TEST_FIXED]
        b_idx = [i for i, c in enumerate(configs) if c[2] == tcp and c[1] == TEST_FIXED]
        out[tcp] = {"bandwidth": float(np.corrcoef([configs[i][0] for i in b_idx], cap[b_idx])[0, 1]),
                    "delay": float(np.corrcoef([configs[i][1] for i in d_idx], cap[d_idx])[0, 1]),
                    "mean_cap_pkts": float(cap[d_idx + b_idx].mean())}
    return out


def verdict(agent, base, higher_better: bool) -> str:
    """'better' / 'worse' where two (mean, standard error) pairs differ by more than twice
    the combined standard error, else 'tie'."""
    (a, sa), (b, sb) = agent, base
    se = np.sqrt(np.nan_to_num(sa) ** 2 + np.nan_to_num(sb) ** 2)
    if abs(a - b) <= 2 * se or a == b:
        return "tie"
    return "better" if (a > b) == higher_better else "worse"


def plot_caps(agent_runs: dict, configs, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cap = np.asarray(agent_runs["cap_pkts"]).mean(axis=1)  # [units, configs]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (xi, fixed_i, label) in zip(axes, ((1, 0, "one-way delay (ms)"), (0, 1, "bandwidth (Mbit/s)"))):
        for tcp, color in zip(TCPS, ("C0", "C1")):
            idx = [i for i, c in enumerate(configs) if c[2] == tcp and c[fixed_i] == TEST_FIXED]
            x = np.asarray([configs[i][xi] for i in idx])
            m, s = cap[:, idx].mean(0), cap[:, idx].std(0)
            ax.plot(x, m, color=color, label=f"LFQ, {tcp}")
            ax.fill_between(x, m - s, m + s, color=color, alpha=0.2)
            bdp = [bdp_pkts(configs[i][0] * 1e6, configs[i][1] * 1e-3) for i in idx]
        ax.plot(x, bdp, "k--", label="BDP")
        ax.set_xlabel(label)
        ax.set_ylabel("mean cap (packets)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("LFQ's learnt cap on the test sweep (mean ± s.d. over training seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def plot_curves(rows, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for seed in sorted({r["seed"] for r in rows}):
        rs = [r for r in rows if r["seed"] == seed]
        x = [r["flows_seen"] for r in rs]
        for ax, key in zip(axes, ("cap_pkts", "reward", "queue_pkts")):
            ax.plot(x, [r[key] for r in rs], label=f"seed {seed}")
            ax.set_ylabel(key)
    for ax in axes:
        ax.set_xlabel("training flows")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("LFQ offline training (A/B forks): mean cap, reward and queue of the iteration's flows")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
