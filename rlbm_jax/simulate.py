"""Python API: run a scenario with a buffer policy (a baseline or an agent) over seeds.

`run_scenario` vmaps the simulator over seeds, advances it in equal jitted chunks
(one compilation, a progress bar between chunks) and returns the report fields
per seed, their mean and standard deviation, and timings.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import flowstats
from rlbm_jax.devices import batched, env_sharding
from rlbm_jax.env import backends, incast, metrics as mx, sim
from rlbm_jax.env.switch import buffer
from rlbm_jax.env.params import SimParams, ared_defaults, rederive, stack_params
from rlbm_jax.env.rlbm_env import DEFAULT_FORMULATION, RLBMEnv
from rlbm_jax.progress import Progress

BASELINES = ("sb-naive", "sb-sophisticated", "dt", "abm", "droptail")
# the most ticks one compiled call of run_scenario advances (a stretch of the run is several
# such calls when longer: the progress bar moves at least this often)
CALL_MAX_TICKS = 1 << 16


def with_policy(params: SimParams, policy: str) -> SimParams:
    """Params switched to a named buffer policy with that policy's default alphas (and,
    for "ared", its automatic RED thresholds and weight; for "fq-codel", per-flow queues of
    the shared buffer's size; other AQM settings are kept)."""
    if policy not in buffer.POLICY_NAMES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(buffer.POLICY_NAMES)}")
    alpha = np.asarray(buffer.default_alpha(policy, params.num_classes), np.float32)
    out = params.replace(policy_id=jnp.asarray(buffer.POLICY_NAMES.index(policy), jnp.int32), alpha=jnp.asarray(alpha))
    if policy == "ared":
        lo, hi, w = ared_defaults(float(params.bottleneck_rate_bps), float(params.mss_bytes))
        out = out.replace(red_min_th_pkts=jnp.float32(lo), red_max_th_pkts=jnp.float32(hi),
                          red_weight=jnp.float32(w))
    return rederive(out)


def batch_reports(params_list: Sequence[SimParams], seeds: Sequence[int], seconds: float) -> dict:
    """The packet simulator's report (`metrics.summarize`) of every (params, seed) pair from
    t = 0 for `seconds`, one jitted, vmapped batch on the backend in force (the params must
    stack: `stack_params`): {field: numpy array [len(params_list)]}."""
    if len(params_list) != len(seeds):
        raise ValueError(f"batch_reports: one seed per params ({len(params_list)} params, {len(seeds)} seeds)")
    ticks = sim.ticks_for(seconds, params_list[0])

    def one(p, k):
        s, _ = backends.run(sim.init(k, p), p, ticks)
        return mx.summarize(s.metrics, p)

    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(one))(stack_params(list(params_list)), keys))


def _chunking(total: int, chunks: int):
    n = max(1, min(chunks, total))
    size = math.ceil(total / n)
    return math.ceil(total / size), size


def run_scenario(params: SimParams, *, seconds: float, seeds: Sequence[int], agent: Callable | None = None,
                 agent_interval_s: float = 0.1, formulation=DEFAULT_FORMULATION, chunks: int = 20,
                 show_progress: bool = True, plot_path=None, flow_sample_s: float | None = None) -> dict:
    """Simulate `seconds` of the scenario for every seed: the report fields' mean, std and
    per-seed values, and `tail`, the FCT slowdown per flow-size bucket pooled over seeds
    (`metrics.pooled_tail`; flows beyond the completion log, `log_overflow`, are not in it),
    `devices`, how many devices the seeds were spread over (`rlbm_jax.devices`), and
    `backend`, the simulator's tick that ran them (`sim.run`).

    agent: None runs the buffer policy in `params`; a jittable fn(obs) -> action instead
    drives the "rl" policy through `RLBMEnv` with `formulation` (the one the agent was
    trained on) every `agent_interval_s`.  `series` holds, at the end of each of the
    `chunks` stretches, the time, the buffer occupancy and the link's utilisation over the
    stretch (means over seeds); `plot_path` draws them with the FCT slowdown by flow size
    (`plot_run`).  Seeds whose states cannot fit in memory are refused before compiling.
    `flow_sample_s`: also sample the long flows that often (at least every call) and report
    them, per flow group, with their fairness under `flows` (`rlbm_jax.flowstats`)."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a positive finite number, got {seconds!r}")
    if not (math.isfinite(agent_interval_s) and agent_interval_s > 0):
        raise ValueError(f"agent_interval_s must be a positive finite number, got {agent_interval_s!r}")
    if len(seeds) == 0:
        raise ValueError("seeds: need at least one seed")
    name = backends.resolve(None, params)
    if not backends.BACKENDS[name].ticks:
        if agent is not None:
            raise ValueError(f"the {name} backend drives no agent: a policy directory needs a packet backend "
                             "(--backend jax or native)")
        if plot_path is not None:
            raise ValueError(f"the {name} backend draws no run yet: --plot needs a packet backend (--backend jax "
                             "or native)")
        return _run_fluid(params, seconds, seeds)
    if flow_sample_s is not None:
        flowstats.check(params, flow_sample_s)
        if agent is not None and flow_sample_s < agent_interval_s * (1 - 1e-9):
            raise ValueError(f"the flows' sample period ({flow_sample_s:g} s) is shorter than the agent's interval "
                             f"({agent_interval_s:g} s): a run an agent drives is sampled once per agent step at "
                             "the most (--flow-sample-s at least --agent-interval-s)")
    check_memory(params, len(seeds))
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    t_start = time.perf_counter()

    if agent is None:
        total = sim.ticks_for(seconds, params)
        n_chunks, size = _chunking(total, chunks)
        state = batched(lambda k: sim.init(k, params), len(seeds))(keys)
        advance = lambda n: batched(lambda s: backends.run(s, params, n)[0], len(seeds))
        unit_s = size * float(params.tick_s)
        ticks_per_unit = 1
        get_sim = lambda st: st
    else:
        p_rl = with_policy(params, "rl")
        env = RLBMEnv(p_rl, formulation=formulation, agent_interval_s=agent_interval_s,
                      episode_s=max(seconds, agent_interval_s))
        ep = env.default_params
        total = max(1, int(round(seconds / float(ep.agent_interval_s))))
        n_chunks, size = _chunking(total, chunks)

        def init_one(k):
            return env.reset_env(k, ep)

        def run_steps(carry, n):
            def body(c, _):
                obs, st = c
                obs, st, _, _, _ = env.step_env(jax.random.PRNGKey(0), st, agent(obs), ep)
                return (obs, st), None
            return jax.lax.scan(body, carry, None, length=n)[0]

        state = batched(init_one, len(seeds))(keys)
        advance = lambda n: batched(lambda c: run_steps(c, n), len(seeds))  # the seeds spread over the devices
        unit_s = size * float(ep.agent_interval_s)
        ticks_per_unit = sim.ticks_for(float(ep.agent_interval_s), params)
        get_sim = lambda st: st[1].sim

    # a stretch runs as calls of at most CALL_MAX_TICKS ticks (and one call of the rest), so
    # that a long stretch still moves the progress bar; the ticks per stretch are unchanged
    per_call = max(1, min(size, CALL_MAX_TICKS // max(1, ticks_per_unit)))
    if flow_sample_s is not None:  # a call per sample of the long flows
        per_call = max(1, min(per_call, int(round(flow_sample_s / (ticks_per_unit * float(params.tick_s))))))
    calls, rest = divmod(size, per_call)
    sample = jax.jit(jax.vmap(lambda st: flowstats.sample(get_sim(st), int(params.long_flows))))
    samples, sample_ticks = [], []

    def take(st):
        if flow_sample_s is not None:
            samples.append(np.asarray(sample(st), np.float64))
            sample_ticks.append(int(np.asarray(get_sim(st).tick).reshape(-1)[0]))
    bar = Progress(n_chunks * unit_s, unit=" sim-s", label=f"{len(seeds)} seed(s) ") if show_progress else None
    if bar:
        bar.update(0, extra="compiling", measure=False)  # a first line at once, before compiling
    t0 = time.perf_counter()
    compiled = advance(per_call).lower(state).compile()
    compiled_rest = advance(rest).lower(state).compile() if rest else None
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    take(state)
    series = {"t_s": [], "queue_pkts": [], "util_wire": []}
    deq_before, offered_before = np.zeros(len(seeds)), np.zeros(len(seeds))
    for i in range(n_chunks):
        for j in range(calls):
            state = compiled(state)
            take(state)
            if bar and j < calls - 1:
                jax.block_until_ready(state)
                bar.update((i + (j + 1) * per_call / size) * unit_s)
        if rest:
            state = compiled_rest(state)
            take(state)
        jax.block_until_ready(state)
        now = get_sim(state)
        deq = np.asarray(now.metrics.deq_total, np.float64)
        series["t_s"].append((i + 1) * unit_s)
        series["queue_pkts"].append(float(np.mean(np.sum(np.asarray(now.queue.pkts), axis=-1))))
        if params.has_capacity_schedule:  # against the packet times the schedule offered
            offered = np.asarray(now.metrics.offered_total, np.float64)
            series["util_wire"].append(float(np.mean(deq - deq_before)) / max(float(np.mean(offered - offered_before)),
                                                                               1.0))
            offered_before = offered
        else:
            series["util_wire"].append(float(np.mean(deq - deq_before)) * float(params.data_pkt_bits)
                                       / (unit_s * float(params.bottleneck_rate_bps)))
        deq_before = deq
        if bar:
            bar.update((i + 1) * unit_s)
    if bar:
        bar.close()
    run_s = time.perf_counter() - t0
    final = get_sim(state)
    n_devices = len(env_sharding(len(seeds)).device_set)
    rep = jax.jit(jax.vmap(lambda m: mx.summarize(m, params)))(final.metrics)
    rep.update(incast.report(final.incast))  # queries, responses started, refused, waiting (with incast)
    ticks = np.asarray(final.tick)
    per_seed = []
    for i, seed in enumerate(seeds):
        row = {k: _py(v[i]) for k, v in rep.items()}
        row["seed"] = int(seed)
        row["sim_seconds"] = float(ticks[i] * float(params.tick_s))
        per_seed.append(row)
    mean, std, n_seeds = over_seeds(per_seed)
    logs, counts = np.asarray(final.metrics.log), np.asarray(final.metrics.log_count)
    flows = [logs[i, :min(int(counts[i]), logs.shape[1])] for i in range(len(seeds))]  # each seed's finished flows
    tail = mx.pooled_tail(flows, warmup_s=float(params.warmup_s))
    out = dict(mean)
    out.update(tail=tail, series=series, devices=n_devices, backend=backends.resolve(None, params),
               wall_s=time.perf_counter() - t_start, run_s=run_s, compile_s=compile_s,
               sim_seconds_per_wall_s=sum(r["sim_seconds"] for r in per_seed) / max(run_s, 1e-9),
               seeds=[int(s) for s in seeds], std=std, n_seeds=n_seeds, per_seed=per_seed)
    if flow_sample_s is not None:
        out["flows"] = flowstats.summarize(np.stack(samples, axis=1), np.asarray(sample_ticks) * float(params.tick_s),
                                           params, seeds=[int(s) for s in seeds])
    if plot_path is not None:  # a figure that cannot be drawn loses nothing computed: its error is reported
        try:
            plot_run(series, flows, plot_path, title=f"{len(seeds)} seed(s), {seconds:g} s")
        except (OSError, ValueError) as e:
            out["plot_error"] = f"{type(e).__name__}: {e}"
    return out


def over_seeds(per_seed: Sequence[dict]) -> tuple[dict, dict, dict]:
    """(mean, std, n) of every report field over the seeds' rows `per_seed` (the key "seed"
    left out): a seed whose field has no sample (NaN or None: a p99 of a seed that finished
    no flow) is left out of that field's mean and std and not counted in its n; a field with
    fewer than two samples has no std (NaN, written null), none has no mean."""
    stats = {k: mx.seed_stats([r[k] for r in per_seed]) for k in per_seed[0] if k != "seed"}
    return ({k: m for k, (m, _, _) in stats.items()}, {k: s for k, (_, s, _) in stats.items()},
            {k: n for k, (_, _, n) in stats.items()})


def _run_fluid(params: SimParams, seconds: float, seeds: Sequence[int]) -> dict:
    """`run_scenario` on the fluid backend, reported in the packet report's fields where the
    fluid model has them, null where it has none (`not_modelled`: timeouts,
    retransmissions, the queue's and the FCTs' tails).  Long flows alone give one
    deterministic run (they start at the quantiles of the packet simulator's start times, so
    every seed gives it); with short flows each seed draws their Poisson schedule as the
    packet simulator's does, and the seeds run as one vmapped batch."""
    from rlbm_jax.env.backends import fluid

    t0 = time.perf_counter()
    cfg = fluid.configure(params, horizon_s=seconds)
    deterministic = cfg.n_short == 0
    run_seeds = list(seeds)[:1] if deterministic else list(seeds)
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in run_seeds])
    out = jax.jit(jax.vmap(lambda k: fluid.summary(params, seconds, warmup_s=float(params.warmup_s), config=cfg,
                                                   key=k if cfg.n_short else None)))(keys)
    out = {k: np.asarray(v, np.float64) for k, v in out.items()}
    run_s = time.perf_counter() - t0
    rows = []
    for i in range(len(run_seeds)):
        o = {k: float(v[i]) for k, v in out.items()}
        row = {"util_wire": o["util_wire"], "drop_rate": o["drop_rate"], "mark_rate": o["mark_rate"],
               "queue_mean_pkts": o["queue_mean_pkts"], "probe_rtt_mean_s": o["rtt_mean_s"],
               "goodput_bps": o["delivered_pkts"] * float(params.mss_bytes) * 8.0 / max(o["measured_s"], 1e-12),
               "measured_s": o["measured_s"], "window_mean_pkts": o["window_mean_pkts"],
               "delay_clipped_s": o["delay_clipped_s"]}
        if cfg.n_short:
            row.update({k: o[k] for k in ("flows_started", "flows_completed", "flows_open", "fct_mean_s",
                                          "slowdown_mean", "slowdown_p50", "short_slots_full")})
        rows.append(row)
    packet_fields = jax.eval_shape(lambda m: mx.summarize(m, params), mx.init_metrics(
        params.num_classes, params.queue_capacity_pkts, params.completion_log_size))
    not_modelled = [k for k in packet_fields if k not in rows[0]]
    rep, std, n_seeds = over_seeds(rows)
    if deterministic:  # every seed gives the one run: the seeds' spread is exactly 0
        std = {k: 0.0 for k in std}
        n_seeds = {k: len(seeds) if v else 0 for k, v in n_seeds.items()}
    rep.update({k: None for k in not_modelled})
    std.update({k: None for k in not_modelled})
    n_seeds.update({k: 0 for k in not_modelled})
    per_seed = [{**(rows[0] if deterministic else rows[i]), **{k: None for k in not_modelled}, "seed": int(s),
                 "sim_seconds": float(seconds)} for i, s in enumerate(seeds)]
    return {**rep, "tail": None, "series": None, "devices": 1, "backend": "fluid", "not_modelled": not_modelled,
            "wall_s": run_s, "run_s": run_s, "compile_s": None,
            "sim_seconds_per_wall_s": len(run_seeds) * seconds / max(run_s, 1e-9), "seeds": [int(s) for s in seeds],
            "std": std, "n_seeds": n_seeds, "per_seed": per_seed, "deterministic": deterministic}


def check_memory(params: SimParams, num_seeds: int, what: str = "seeds") -> None:
    """Refuse (a ValueError naming `what`, the argument that sets the batch) a batch of
    `num_seeds` simulators whose states alone, with the copies a run makes of them
    (`ppo.memory.STATE_COPIES`), need more memory than the device has: it would be killed by
    the kernel or never return."""
    from rlbm_jax.ppo.memory import STATE_COPIES, available, fmt_bytes, tree_nbytes

    per_seed = tree_nbytes(jax.eval_shape(lambda: sim.init(jax.random.PRNGKey(0), params)))
    need = per_seed * num_seeds * STATE_COPIES
    have, where = available()
    if need > have:
        fit = max(int(have / (per_seed * STATE_COPIES)), 0)
        raise ValueError(f"{what} must be at most about {fit:,} here: {num_seeds:,} simulators need about "
                         f"{fmt_bytes(need)} of state ({fmt_bytes(per_seed)} each), more than the "
                         f"{fmt_bytes(have)} available on {where}")


def plot_run(series: dict, rows_per_seed, path, title: str = "") -> None:
    """One look at a run: the buffer occupancy and the link's utilisation over time (means
    over seeds, per stretch), and every finished flow's FCT slowdown against its size with
    each size bucket's pooled p50 and p99 (`metrics.SIZE_BUCKETS`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = np.concatenate([np.asarray(r, np.float64).reshape(-1, len(mx.LOG_FIELDS)) for r in rows_per_seed])
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    axes[0].plot(series["t_s"], series["queue_pkts"], marker=".")
    axes[0].set(xlabel="time (s)", ylabel="buffer occupancy (packets)", title="queue")
    axes[1].plot(series["t_s"], series["util_wire"], marker=".")
    axes[1].set(xlabel="time (s)", ylabel="utilisation of the link", ylim=(0, 1.05), title="throughput")
    ax = axes[2]
    if len(rows):
        ax.scatter(rows[:, 0], rows[:, 3], s=4, alpha=0.3, label="flows")
        for name, lo, hi in mx.SIZE_BUCKETS:
            s = rows[(rows[:, 0] >= lo) & (rows[:, 0] < hi), 3]
            if s.size:
                x = np.sqrt(max(lo, rows[:, 0].min()) * min(hi, rows[:, 0].max()))
                ax.plot([x], [np.percentile(s, 50)], "ks")
                ax.plot([x], [np.percentile(s, 99)], "r^")
        ax.plot([], [], "ks", label="bucket p50")
        ax.plot([], [], "r^", label="bucket p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no flow finished", ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="flow size (bytes)", ylabel="FCT slowdown", title=f"FCT slowdown by size ({len(rows)} flows)")
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _py(x):
    x = np.asarray(x)
    return float(x) if x.dtype.kind == "f" else int(x)

