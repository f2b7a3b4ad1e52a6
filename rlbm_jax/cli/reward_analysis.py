"""Which reward ranks buffer policies the way an operator would?

    python scripts/reward_analysis.py --seeds 10 --out results/reward_analysis

Runs, on the thesis grid (TCP x per-class buffer N x load, 60 s, flows in the first
45 s) with seeds no training or selection used, the five baselines, a sweep of static
thresholds in BDPs (buffer policy "static-bdp": class c admits below
min(t_c x BDP, B - Q); "free" = the free buffer B - Q, as the thesis's alpha 1), and
optionally trained policies (--policy).  Every run scores every named reward
(`rlbm_jax.env.formulations.REWARDS`) from the same interval records, and the
operator metrics: p99 slowdown of short flows (< 100 KB, pooled over seeds; a flow
still unfinished at the end counts with the slowdown it has reached, a lower bound),
median slowdown of long flows (> 1 MB, likewise), goodput, drops, timeouts and lost
SYNs.  The summary compares, per reward: its ranking with the operator metrics'
(Kendall tau per cell), how often it agrees with the operator on pairs where one
policy serves flows better than another on every metric (within noise margins), and
what it says of the throttling rule (class 0 the free buffer, class 1 0.25 BDP)
against SB-naive.  Writes summary.md, per_run.csv, per_cell.csv, ranking.png,
command.txt and config.json (the configuration run: `run_config`, which --print-config
prints).
"""
from __future__ import annotations

import csv
import itertools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.cli import add_backend_arg, add_model_args, apply_backend, fail, model_kw, parser, printed_config
from rlbm_jax.cli.evaluate import episode_record, grid_record
from rlbm_jax.env import backends, formulations, metrics as mx, tcp
from rlbm_jax.env.params import make_params, stack_params
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.evaluate import paired_diff
from rlbm_jax.progress import Progress
from rlbm_jax.simulate import BASELINES, with_policy

PROG = "reward_analysis.py"
FREE = 1e6  # a threshold of this many BDPs is the free buffer
# the static sweep: (class 0, class 1) thresholds in BDPs; (free, free) is DT itself
STATIC = [(a, b) for a in (FREE, 4.0, 1.0) for b in (FREE, 4.0, 1.0, 0.25) if (a, b) != (FREE, FREE)]
THROTTLE = "static free/0.25"
SHORT_BYTES, LONG_BYTES = 100_000, 1_000_000
# operator dominance: A serves flows better than B when it is no worse on every metric
# (within `NO_WORSE`) and better on one by `BETTER`
NO_WORSE = {"p99_short": 1.02, "p50_long": 1.02, "goodput": 0.995}
BETTER = {"p99_short": 0.95, "p50_long": 0.95, "goodput": 1.01}


def rule_name(a: float, b: float) -> str:
    f = lambda x: "free" if x >= FREE else f"{x:g}"
    return f"static {f(a)}/{f(b)}"


def build_parser():
    ap = parser(__doc__, PROG)
    g = scenarios.THESIS_GRID
    ap.add_argument("--seeds", type=int, default=10, help="seeds per cell")
    ap.add_argument("--first-seed", type=int, default=200_000, help="seeds are first-seed, first-seed+1, ...")
    ap.add_argument("--tcp", nargs="+", default=list(g["tcp"]), choices=list(g["tcp"]), help="TCPs of the grid")
    ap.add_argument("--buffer-pkts", type=int, nargs="+", default=list(g["buffer_per_class_pkts"]),
                    help="per-class buffers N")
    ap.add_argument("--load", type=float, nargs="+", default=list(g["load"]), help="loads")
    ap.add_argument("--seconds", type=float, default=scenarios.THESIS_EPISODE_S, help="episode length (s)")
    ap.add_argument("--policy", nargs="*", default=[], help="trained policy directories to place in the rankings")
    ap.add_argument("--no-static", action="store_true", help="skip the static-threshold sweep")
    ap.add_argument("--out", default="results/reward_analysis", help="output directory")
    add_model_args(ap)
    add_backend_arg(ap)
    return ap


def _runs(a):
    """(name, buffer policy, static thresholds in BDPs, trained policy directory) of every run."""
    runs = [(b, b, None, None) for b in BASELINES]
    if not a.no_static:
        runs += [(rule_name(x, y), "static-bdp", (x, y), None) for x, y in STATIC]
    for i, path in enumerate(a.policy):
        runs.append((f"trained{i + 1 if len(a.policy) > 1 else ''}", "rl", None, path))
    return runs


def episode_fn(env: RLBMEnv, agent):
    """One episode: the mean of every named reward, the report, the completion log and the
    flows still open at the end (size, start, censored slowdown)."""
    rewards = formulations.REWARDS
    n = int(env.default_params.max_steps_in_episode)  # every cell's episode has the same length

    def episode(ep, key):
        obs, st = env.reset_env(key, ep)

        def body(c, _):
            obs, st, tot = c
            act = agent(obs) if agent is not None else jnp.zeros((ep.sim.num_classes,), jnp.float32)
            obs, st, _, _, _ = env.step_env(key, st, act, ep)
            r = jnp.stack([rw(st.sim.interval, ep)[0] for rw in rewards.values()])
            return (obs, st, tot + r), None

        (obs, st, tot), _ = jax.lax.scan(body, (obs, st, jnp.zeros((len(rewards),), jnp.float32)), None, length=n)
        s, p = st.sim, ep.sim
        rep = mx.summarize(s.metrics, p)
        col = lambda name: tcp.column(s.flows, name)
        size = col("size_bytes")
        open_ = col("active") & ~s.done_sink & jnp.isfinite(size)
        now = s.tick.astype(jnp.float32) * p.tick_s
        ideal = p.base_rtt_s + jnp.where(jnp.isfinite(size), size, 0.0) * 8.0 / p.bottleneck_rate_bps
        censored = jnp.where(open_, (now - col("start_s")) / ideal, jnp.nan)
        return tot / n, rep, s.metrics.log, s.metrics.log_count, jnp.stack([jnp.where(open_, size, jnp.nan), censored], -1)

    return episode


def plan(a) -> tuple[dict, list, list, RLBMEnv, list, dict]:
    """(run_config(a), the grid's cells, each cell's params, the env, the runs (`_runs`),
    the trained policies {directory: fn}); a ValueError names a bad option or a
    mismatched policy."""
    from rlbm_jax.policy import load_policy

    if a.seeds < 2:
        raise ValueError("--seeds must be at least 2 (errors are over seeds)")
    grid = scenarios.thesis_grid(a.tcp, a.buffer_pkts, a.load)
    cap = max(a.buffer_pkts)
    kws = [scenarios.thesis_cell(t, n, ld, policy="rl", queue_capacity_pkts=cap, **model_kw(a)) for t, n, ld in grid]
    sims = [make_params(**kw) for kw in kws]
    env = RLBMEnv(sims[0], formulation="RLBM-thesis-v0", agent_interval_s=0.1, episode_s=a.seconds)
    runs = _runs(a)
    agents = {path: load_policy(path, obs_layout=env.obs_layout, act_dim=env.num_actions) for *_, path in runs if path}
    record = []
    for name, policy, alpha, path in runs:
        if path:
            record.append({"name": name, "policy": str(path), "formulation": agents[path][1].get("formulation")})
        else:
            record.append({"name": name, "policy": policy, **({"alpha_bdp": list(alpha)} if alpha else {})})
    config = {**grid_record(grid, kws, sims), "seeds": list(range(a.first_seed, a.first_seed + a.seeds)),
              "runs": record, "formulation": env.formulation.id, "rewards": list(formulations.REWARDS),
              **episode_record(env), "backend": a.backend or backends.default(), "out": str(a.out)}
    return config, grid, sims, env, runs, {path: fn for path, (fn, _) in agents.items()}


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): the
    grid's cells and the env's parameters, the seeds, every run (its name and policy: a
    baseline's or "static-bdp" with its thresholds in BDPs, or a trained policy's
    directory and formulation), the formulation trained policies observe, the rewards
    scored, the episode, the backend asked for and the output directory."""
    return plan(a)[0]


def simulate(env: RLBMEnv, sims, seeds, runs, agents) -> dict:
    """{run name: dict of arrays [cells, seeds, ...]} for every run (`plan`'s)."""
    ep0 = env.default_params
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    out = {}
    bar = Progress(len(runs), unit=" policies", label=f"{len(sims)} cells x {len(seeds)} seeds ")
    bar.update(0, measure=False)
    for name, policy, alpha, path in runs:
        agent = agents.get(path)
        if policy == "rl":
            cells = sims
        elif policy == "static-bdp":
            cells = [with_policy(p, "static-bdp").replace(alpha=jnp.asarray(alpha, jnp.float32)) for p in sims]
        else:
            cells = [with_policy(p, policy) for p in sims]
        fn = jax.jit(jax.vmap(jax.vmap(episode_fn(env, agent), in_axes=(None, 0)), in_axes=(0, None)))
        res = fn(stack_params([ep0.replace(sim=p) for p in cells]), keys)
        out[name] = jax.device_get(res)
        bar.update(len(out), extra=name)
    bar.close()
    return out


def flow_metrics(log, count, open_flows):
    """(p99 slowdown of short flows, median slowdown of long flows, their counts, short flows
    unfinished) pooled over the seeds of one cell; open flows count with their censored slowdown."""
    size, slow = [], []
    for s in range(log.shape[0]):
        rows = log[s, :int(count[s])]
        size.append(rows[:, 0])
        slow.append(rows[:, 3])
        ok = np.isfinite(open_flows[s, :, 0])
        size.append(open_flows[s, ok, 0])
        slow.append(open_flows[s, ok, 1])
    size, slow = np.concatenate(size), np.concatenate(slow)
    short, long_ = size < SHORT_BYTES, size > LONG_BYTES
    n_open_short = int(sum(np.sum(np.isfinite(o[:, 0]) & (o[:, 0] < SHORT_BYTES)) for o in open_flows))
    q = lambda x, p: float(np.quantile(x, p)) if x.size else float("nan")
    return q(slow[short], 0.99), q(slow[long_], 0.5), int(short.sum()), int(long_.sum()), n_open_short


def tables(grid, seeds, out):
    """Per run and per cell tables."""
    names = list(formulations.REWARDS)
    per_run, per_cell = [], []
    for run, (rew, rep, log, count, open_flows) in out.items():
        for c, (t, n, ld) in enumerate(grid):
            for j, s in enumerate(seeds):
                row = {"policy": run, "tcp": t, "buffer_per_class_pkts": n, "load": ld, "seed": s}
                row.update({f"reward_{k}": float(rew[c, j, i]) for i, k in enumerate(names)})
                row.update({k: float(rep[k][c, j]) for k in ("goodput_bps", "util_wire", "drop_rate", "rto_count",
                                                             "syn_drops", "flows_completed", "slowdown_p99")})
                row["flows_open_at_end"] = int(np.sum(np.isfinite(open_flows[c, j, :, 0])))
                per_run.append(row)
            p99s, p50l, ns, nl, nos = flow_metrics(log[c], count[c], open_flows[c])
            cell = {"policy": run, "tcp": t, "buffer_per_class_pkts": n, "load": ld,
                    **{f"reward_{k}": float(np.mean(rew[c, :, i])) for i, k in enumerate(names)},
                    "goodput_bps": float(np.mean(rep["goodput_bps"][c])), "drop_rate": float(np.mean(rep["drop_rate"][c])),
                    "rto_count": float(np.mean(rep["rto_count"][c])), "syn_drops": float(np.mean(rep["syn_drops"][c])),
                    "p99_short": p99s, "p50_long": p50l, "short_flows": ns, "long_flows": nl, "short_open": nos}
            per_cell.append(cell)
    return per_run, per_cell


def kendall_tau(x, y) -> float:
    """Kendall's tau-a of two score lists (ties count 0)."""
    n, s = len(x), 0.0
    for i, j in itertools.combinations(range(n), 2):
        s += np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
    return s / (n * (n - 1) / 2)


def dominates(a: dict, b: dict) -> bool:
    """Operator's verdict: a serves flows better than b (no worse on all, better on one)."""
    if not all(np.isfinite([a["p99_short"], b["p99_short"], a["p50_long"], b["p50_long"]])):
        return False
    no_worse = (a["p99_short"] <= NO_WORSE["p99_short"] * b["p99_short"]
                and a["p50_long"] <= NO_WORSE["p50_long"] * b["p50_long"]
                and a["goodput_bps"] >= NO_WORSE["goodput"] * b["goodput_bps"])
    better = (a["p99_short"] <= BETTER["p99_short"] * b["p99_short"]
              or a["p50_long"] <= BETTER["p50_long"] * b["p50_long"]
              or a["goodput_bps"] >= BETTER["goodput"] * b["goodput_bps"])
    return no_worse and better


ABLATION = (("drops", (1.0, 0.1)), ("timeouts", (0.1, 0.01)), ("lost SYNs", (1.0, 0.1)))


def score_arrays(out, n_steps: int, cap: int) -> dict:
    """{score name: {run: [cells, seeds] mean per interval}}: every named reward, and
    flows-accrued with one penalty at a time (rewards are linear in their parts, so the
    penalty's mean per interval is its run total over the intervals)."""
    names = list(formulations.REWARDS)
    scores = {k: {run: o[0][..., i] for run, o in out.items()} for i, k in enumerate(names)}
    base = scores["flows-accrued"]
    parts = {"drops": lambda rep: sum(v for k, v in rep.items() if k.startswith("drops_c")) / cap / n_steps,
             "timeouts": lambda rep: rep["rto_count"] / n_steps, "lost SYNs": lambda rep: rep["syn_drops"] / n_steps}
    # the named `penalties` reward, rebuilt from its parts, checks the decomposition
    pen = formulations.REWARDS["penalties"]
    for run, o in out.items():
        rebuilt = base[run] - pen.drop_weight * parts["drops"](o[1]) - pen.rto_weight * parts["timeouts"](o[1]) \
            - pen.syn_weight * parts["lost SYNs"](o[1])
        np.testing.assert_allclose(rebuilt, scores["penalties"][run], rtol=1e-4, atol=1e-5)
    for part, weights in ABLATION:
        for w in weights:
            scores[f"flows-accrued - {w:g} x {part}"] = {run: base[run] - w * parts[part](o[1]) for run, o in out.items()}
    return scores


def analyse(grid, seeds, per_cell, scores) -> tuple[dict, int]:
    """Per score: Kendall tau against p99 short slowdown and goodput (median over cells),
    agreement on the operator's dominance pairs, and the throttling rule against SB-naive."""
    runs = list(next(iter(scores.values())))
    cell = {(r["policy"], r["tcp"], r["buffer_per_class_pkts"], r["load"]): r for r in per_cell}
    mean = {k: {run: v.mean(axis=1) for run, v in sc.items()} for k, sc in scores.items()}  # [cells]
    stats = {k: {"tau_p99_short": [], "tau_goodput": [], "agree": 0, "disagree": 0} for k in scores}
    pairs = 0
    for c, g in enumerate(grid):
        rows = [cell[(r, *g)] for r in runs]
        ok = [np.isfinite(r["p99_short"]) for r in rows]
        for k in scores:
            rew = [mean[k][r][c] for r in runs]
            if sum(ok) > 2:
                stats[k]["tau_p99_short"].append(kendall_tau([x for x, o in zip(rew, ok) if o],
                                                             [-r["p99_short"] for r, o in zip(rows, ok) if o]))
            stats[k]["tau_goodput"].append(kendall_tau(rew, [r["goodput_bps"] for r in rows]))
        for (ia, a), (ib, b) in itertools.permutations(list(enumerate(rows)), 2):
            if dominates(a, b):
                pairs += 1
                for k in scores:
                    if mean[k][runs[ia]][c] > mean[k][runs[ib]][c]:
                        stats[k]["agree"] += 1
                    else:
                        stats[k]["disagree"] += 1
    summary = {}
    for k, st in stats.items():
        tot = st["agree"] + st["disagree"]
        med = lambda x: float(np.median(x)) if x else float("nan")
        summary[k] = {"tau_p99_short": med(st["tau_p99_short"]), "tau_goodput": med(st["tau_goodput"]),
                      "dominance_pairs": tot, "agreement": st["agree"] / tot if tot else float("nan")}
        if THROTTLE in runs and "sb-naive" in runs:
            d, se = paired_diff(scores[k][THROTTLE], scores[k]["sb-naive"])
            higher = int(np.sum(mean[k][THROTTLE] > mean[k]["sb-naive"]))
            summary[k].update(throttle_vs_naive=d, throttle_vs_naive_se=se, throttle_higher_cells=higher)
    return summary, pairs


def write(out_dir: Path, grid, seeds, out, per_run, per_cell, summary, pairs, a, argv, wall_s):
    names = list(formulations.REWARDS)
    ablations = [k for k in summary if k not in names]
    for fname, rows in (("per_run.csv", per_run), ("per_cell.csv", per_cell)):
        with (out_dir / fname).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    cell = {(r["policy"], r["tcp"], r["buffer_per_class_pkts"], r["load"]): r for r in per_cell}
    lines = [f"# Rewards against the operator metrics: {len(grid)} cells x {len(seeds)} seeds "
             f"(seeds {seeds[0]}..{seeds[-1]}), {len(out)} policies", "",
             f"Command: `python scripts/reward_analysis.py {' '.join(argv)}` ({wall_s:.0f} s).", "",
             "Policies: " + ", ".join(f"`{r}`" for r in out) + ". `static a/b`: class 0 admits below a BDPs, class 1 "
             "below b BDPs, neither above the free buffer B - Q (`free`: the free buffer itself).", "",
             "## How each reward ranks policies", "",
             f"Dominance: policy A serves flows better than B in a cell when its pooled p99 slowdown of short flows "
             f"(< {SHORT_BYTES // 1000} KB), its median slowdown of long flows (> {LONG_BYTES // 1_000_000} MB) and its "
             f"goodput are no worse than B's (within {NO_WORSE['p99_short'] - 1:.0%}, {NO_WORSE['p50_long'] - 1:.0%} and "
             f"{1 - NO_WORSE['goodput']:.1%}) and one is better (by {1 - BETTER['p99_short']:.0%}, "
             f"{1 - BETTER['p50_long']:.0%} or {BETTER['goodput'] - 1:.0%}). {pairs} such ordered pairs over the grid. "
             "Agreement: the fraction of them the reward also ranks A above B (mean reward over the cell's seeds). "
             "Kendall tau: per cell, between the reward's ranking of all policies and the ranking by p99 short-flow "
             "slowdown (lower is better) or by goodput; the median over cells.", "",
             "| reward | agreement on dominance pairs | tau vs p99 short slowdown | tau vs goodput "
             "| throttle − SB-naive (grid, ± s.e. over seeds) | cells throttle ranked higher |",
             "|---|---:|---:|---:|---:|---:|"]
    for k in names:
        s = summary[k]
        lines.append(f"| `{k}` | {s['agreement']:.3f} ({s['dominance_pairs']}) | {s['tau_p99_short']:+.2f} "
                     f"| {s['tau_goodput']:+.2f} | {s.get('throttle_vs_naive', float('nan')):+.5f} ± "
                     f"{s.get('throttle_vs_naive_se', float('nan')):.5f} | {s.get('throttle_higher_cells', '-')}/{len(grid)} |")
    lines += ["", "Reward definitions: " + "; ".join(f"`{k}` = {formulations.REWARDS[k].text}" for k in names) + ".", "",
              "## Penalties, one at a time", "",
              "`flows-accrued` with one penalty added (per dropped packet in units of the interval's capacity, per "
              "timeout, per lost SYN), computed exactly from each run's totals (the rewards are linear in their parts; "
              "the named `penalties` reward rebuilt this way matches its direct computation).", "",
              "| score | agreement on dominance pairs | tau vs p99 short slowdown | tau vs goodput "
              "| throttle − SB-naive | cells throttle ranked higher |", "|---|---:|---:|---:|---:|---:|"]
    for k in ["flows-accrued", *ablations]:
        s = summary[k]
        lines.append(f"| `{k}` | {s['agreement']:.3f} | {s['tau_p99_short']:+.2f} | {s['tau_goodput']:+.2f} "
                     f"| {s.get('throttle_vs_naive', float('nan')):+.5f} ± {s.get('throttle_vs_naive_se', float('nan')):.5f} "
                     f"| {s.get('throttle_higher_cells', '-')}/{len(grid)} |")
    lines.append("")
    if THROTTLE in out:
        lines += ["## The throttling rule against SB-naive, by TCP and buffer size", "",
                  "Pooled over the 8 loads and the seeds: p99 slowdown of short flows, median slowdown of long flows, "
                  "goodput, drop rate, timeouts and lost SYNs per run; does the operator say the rule serves flows "
                  "better, and which rewards rank it above SB-naive (grid-group mean).", "",
                  "| tcp | N | p99 short (rule / naive) | p50 long | goodput | drop rate | timeouts | lost SYNs "
                  "| operator: rule better? | rewards ranking the rule higher |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for t in a.tcp:
            for n in a.buffer_pkts:
                gs = [g for g in grid if g[0] == t and g[1] == n]
                R = lambda pol, f: [cell[(pol, *g)][f] for g in gs]
                agg = {}
                for pol in (THROTTLE, "sb-naive"):
                    i = [c for c, g in enumerate(grid) if g[0] == t and g[1] == n]
                    log, count, open_flows = out[pol][2][i], out[pol][3][i], out[pol][4][i]
                    p99s, p50l, *_ = flow_metrics(log.reshape(-1, *log.shape[2:]), count.reshape(-1),
                                                  open_flows.reshape(-1, *open_flows.shape[2:]))
                    agg[pol] = {"p99_short": p99s, "p50_long": p50l, "goodput_bps": float(np.mean(R(pol, "goodput_bps"))),
                                "drop_rate": float(np.mean(R(pol, "drop_rate"))), "rto": float(np.mean(R(pol, "rto_count"))),
                                "syn": float(np.mean(R(pol, "syn_drops")))}
                x, y = agg[THROTTLE], agg["sb-naive"]
                better = dominates(x, y)
                higher = [k for k in names if np.mean(R(THROTTLE, f"reward_{k}")) > np.mean(R("sb-naive", f"reward_{k}"))]
                ratio = lambda f: x[f] / y[f] if y[f] else float("nan")
                lines.append(f"| {t} | {n} | {x['p99_short']:.2f} / {y['p99_short']:.2f} | {x['p50_long']:.2f} / "
                             f"{y['p50_long']:.2f} | {ratio('goodput_bps'):.3f} | {x['drop_rate']:.4f} / {y['drop_rate']:.4f} "
                             f"| {x['rto']:.1f} / {y['rto']:.1f} | {x['syn']:.2f} / {y['syn']:.2f} | {'yes' if better else 'no'} "
                             f"| {', '.join(higher) or '-'} |")
        lines.append("")
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
    plot(out_dir / "ranking.png", grid, out, cell, names)
    return "\n".join(lines)


def _ratio(a, b) -> float:
    """a / b, NaN (a point left out of the plot) where b is 0 or missing: a run too short
    for any flow to finish."""
    return float(a) / float(b) if b and b == b else float("nan")


def plot(path, grid, out, cell, names):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.6), sharex=True)
    for ax, k in zip(axes, names):
        for pol in out:
            if pol == "sb-naive":
                continue
            x = [np.log2(_ratio(cell[(pol, *g)]["p99_short"], cell[("sb-naive", *g)]["p99_short"])) for g in grid]
            y = [cell[(pol, *g)][f"reward_{k}"] - cell[("sb-naive", *g)][f"reward_{k}"] for g in grid]
            gp = [_ratio(cell[(pol, *g)]["goodput_bps"], cell[("sb-naive", *g)]["goodput_bps"]) for g in grid]
            style = dict(marker="*", s=40, edgecolor="k", linewidth=0.5, zorder=3) if pol == THROTTLE else dict(s=8)
            ax.scatter(x, y, c=gp, cmap="RdYlGn", vmin=0.97, vmax=1.01, **style)
        ax.axhline(0, color="k", lw=0.6)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_title(k, fontsize=9)
        ax.set_xlabel("log2 p99 short slowdown / SB-naive's", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("reward − SB-naive's (per cell)")
    fig.suptitle("each policy and cell against SB-naive; colour = goodput ratio (red < 0.97, green > 1.01); "
                 "star = throttling rule", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    try:
        cfg, grid, sims, env, runs, agents = plan(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    apply_backend(a)
    seeds = cfg["seeds"]
    out_dir = Path(cfg["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "command.txt").write_text("python scripts/reward_analysis.py " + " ".join(argv) + "\n")
    jsonio.write(out_dir / "config.json", cfg)
    t0 = time.perf_counter()
    out = simulate(env, sims, seeds, runs, agents)
    per_run, per_cell = tables(grid, seeds, out)
    n_steps, cap = int(env.default_params.max_steps_in_episode), formulations.capacity_pkts(env.default_params)
    summary, pairs = analyse(grid, seeds, per_cell, score_arrays(out, n_steps, cap))
    text = write(out_dir, grid, seeds, out, per_run, per_cell, summary, pairs, a, argv, time.perf_counter() - t0)
    print(text)
    print(jsonio.dumps({"out": str(out_dir), "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
