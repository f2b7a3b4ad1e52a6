"""Score trained policies and every baseline on the thesis grid with held-out seeds.

    python scripts/evaluate.py --policy runs/default/policy --out results/thesis_grid

Grid (defaults, `rlbm_jax.scenarios.THESIS_GRID`): TCP {cubic, newreno} x per-class
buffer N {100, 500, 1000} x load {0.1, ..., 0.8}; each cell is a 60 s thesis run (flows
start in the first 45 s) scored on the reward of the policies' formulation (--reward
picks another; mean per 0.1 s interval) and the simulator's report.  Every
policy sees the same flows in a cell and seed (seeds pair the comparison).  Writes
results.csv (mean and std over seeds per policy and cell), per_seed.csv (every run),
summary.md (the table and where the trained policy wins or not), figures (throughput,
p99 FCT slowdown, p99 buffer occupancy, mean FCT and reward vs load, one panel per
buffer size, one figure per TCP), command.txt and config.json (the configuration run:
`run_config`, which --print-config prints).
"""
from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.cli import add_grid_args, add_backend_arg, apply_backend, fail, model_kw, parser, printed_config
from rlbm_jax.devices import single_process_only
from rlbm_jax.env import backends
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.evaluate import (REPORT_FIELDS, beats_baselines, mean_rows, paired_diff,
                               per_seed_rows, plot_load_grid, score_policies, scoring_formulation)
from rlbm_jax.policy import load_policy, read_policy

PROG = "evaluate.py"

PLOTS = (("goodput_bps", "throughput (Mbit/s)", 1e-6), ("slowdown_p99", "p99 FCT slowdown", 1.0),
         ("queue_p99_pkts", "p99 buffer occupancy (pkts)", 1.0), ("fct_mean_s", "mean FCT (s)", 1.0),
         ("reward_mean", "mean reward per interval", 1.0))


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--policy", nargs="*", default=[], help="policy directories (from scripts/train.py)")
    ap.add_argument("--name", nargs="*", default=None, help="labels for the policies (default: rl, rl2, ...)")
    add_grid_args(ap, seeds=5)
    ap.add_argument("--seconds", type=float, default=scenarios.THESIS_EPISODE_S, help="episode length (s)")
    ap.add_argument("--pkts-per-tick", type=int, default=1, help="bottleneck packets per tick")
    add_backend_arg(ap)
    ap.add_argument("--out", default="results/thesis_grid", help="output directory")
    return ap


def parse(argv):
    return build_parser().parse_args(argv)


def cells(a):
    return scenarios.thesis_grid(a.tcp, a.buffer_pkts, a.load)


def grid_record(grid, kws, sims) -> dict:
    """The env's parameters of a grid run (`params.config_record` of every cell): "cells",
    each cell's (tcp, N, load) with the parameters that differ between cells, and
    "params", those every cell shares."""
    recs = [config_record(kw, p) for kw, p in zip(kws, sims)]
    shared = {k: v for k, v in recs[0].items() if all(r[k] == v for r in recs)}
    own = [{k: v for k, v in r.items() if k not in shared} for r in recs]
    return {"cells": [{"tcp": t, "buffer_per_class_pkts": n, "load": ld, **o} for (t, n, ld), o in zip(grid, own)],
            "params": shared}


def episode_record(env: RLBMEnv) -> dict:
    """The episode `env` runs: its agent interval (whole ticks), steps and length."""
    ep = env.default_params
    interval_s, steps = float(ep.agent_interval_s), int(ep.max_steps_in_episode)
    return {"agent_interval_s": interval_s, "episode_steps": steps, "episode_s": steps * interval_s}


def plan(a) -> tuple[dict, list, list, RLBMEnv, dict]:
    """(run_config(a), the grid's cells, each cell's params, the scoring env, the trained
    policies {name: fn}); a ValueError names a bad option or a mismatched policy."""
    if a.seeds < 1 or not a.policy and not a.baselines:
        raise ValueError("need at least one seed and one policy or baseline")
    names = a.name or (["rl"] + [f"rl{i + 2}" for i in range(len(a.policy) - 1)] if a.policy else [])
    if len(names) != len(a.policy):
        raise ValueError("--name needs one label per --policy")
    grid = cells(a)
    cap = max(a.buffer_pkts)
    kws = [scenarios.thesis_cell(t, n, ld, policy="rl", queue_capacity_pkts=cap, pkts_per_tick=a.pkts_per_tick,
                                 **model_kw(a)) for t, n, ld in grid]
    sims = [make_params(**kw) for kw in kws]
    metas = [read_policy(path)[1] for path in a.policy]
    form = scoring_formulation(metas[0].get("formulation") if metas else None, a.reward)
    env = RLBMEnv(sims[0], formulation=form, agent_interval_s=0.1, episode_s=a.seconds)
    agents = {name: load_policy(path, obs_layout=env.obs_layout, act_dim=env.num_actions)[0]
              for name, path in zip(names, a.policy)}
    runs = [{"name": name, "policy": str(path), "formulation": meta.get("formulation")}
            for name, path, meta in zip(names, a.policy, metas)] + [{"name": b, "policy": b} for b in a.baselines]
    config = {**grid_record(grid, kws, sims), "seeds": list(range(a.first_seed, a.first_seed + a.seeds)),
              "runs": runs, "formulation": form.id, "reward": form.reward.name, **episode_record(env),
              "backend": a.backend or backends.default(), "out": str(a.out)}
    return config, grid, sims, env, agents


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): the
    grid's cells and the env's parameters, the held-out seeds, every run (its name and
    policy: a trained policy's directory, with its formulation, run on the "rl" buffer
    policy, or a baseline's buffer policy), the scoring formulation and reward, the
    episode, the backend asked for and the output directory."""
    return plan(a)[0]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    try:
        cfg, grid, base, env, agents = plan(a)
    except (ValueError, FileNotFoundError) as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    apply_backend(a)
    if refusal := single_process_only(PROG):
        return fail(PROG, refusal)
    form, seeds = env.formulation, cfg["seeds"]
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text("python scripts/evaluate.py " + " ".join(argv) + "\n")
    jsonio.write(out / "config.json", cfg)
    t0 = time.perf_counter()
    results = score_policies(env, base, agents, a.baselines, seeds)
    runs = list(agents) + list(a.baselines)

    rows = mean_rows(results, grid, REPORT_FIELDS)
    for name, table in (("results.csv", rows), ("per_seed.csv", per_seed_rows(results, grid, REPORT_FIELDS, seeds))):
        with (out / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    summary = summarize(rows, grid, list(agents), a.baselines, results, seeds, form)
    (out / "summary.md").write_text(summary)
    for t in a.tcp:
        plot(rows, t, a.buffer_pkts, runs, out / f"grid_{t}.png")
    print(summary)
    print(jsonio.dumps({"out": str(out), "cells": len(grid), "seeds": len(seeds),
                      "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


def summarize(rows, grid, agents, baselines, results, seeds, form) -> str:
    get = {(r["policy"], r["tcp"], r["buffer_per_class_pkts"], r["load"]): r for r in rows}
    lines = [f"# Thesis grid: {len(grid)} cells x {len(seeds)} held-out seeds (seeds {seeds[0]}..{seeds[-1]})", "",
             f"Reward: `{form.reward.name}` ({form.reward.text}), formulation `{form.id}`.", ""]
    for ag in agents:
        wins_r = wins_sd = 0
        lines += [f"## {ag} vs the baselines", "",
                  "Per cell: mean reward (paired difference to the best baseline, with its standard error over seeds), "
                  "p99 FCT slowdown and throughput against the best baseline on each.", "",
                  "| tcp | N | load | reward " + ag + " | best baseline (reward) | diff ± s.e. | p99 slowdown "
                  + ag + " / best baseline | throughput Mbit/s " + ag + " / best baseline | target |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---|"]
        for c, (t, n, ld) in enumerate(grid):
            me = get[(ag, t, n, ld)]
            best = max(baselines, key=lambda b: get[(b, t, n, ld)]["reward_mean"])
            diff, se = paired_diff(results[ag]["reward_mean"][c], results[best]["reward_mean"][c])
            sd_best = min(get[(b, t, n, ld)]["slowdown_p99"] for b in baselines)
            thr_best = max(get[(b, t, n, ld)]["goodput_bps"] for b in baselines)
            r_ok, sd_ok = beats_baselines(lambda pol, f: get[(pol, t, n, ld)][f], ag, baselines)
            wins_r += r_ok
            wins_sd += sd_ok
            tag = ("reward" if r_ok else "") + ("+slowdown" if sd_ok else "")
            lines.append(f"| {t} | {n} | {ld:.1f} | {me['reward_mean']:.4f} | {best} ({get[(best, t, n, ld)]['reward_mean']:.4f}) "
                         f"| {diff:+.4f} ± {se:.4f} | {me['slowdown_p99']:.2f} / {sd_best:.2f} "
                         f"| {me['goodput_bps'] / 1e6:.3f} / {thr_best / 1e6:.3f} | {tag or '-'} |")
        lines += ["", "Against each baseline, paired over cells and seeds (reward difference; its standard error "
                  "over seeds, of each seed's mean over the grid, since every cell of a seed draws from the same key; "
                  "cells where the agent's mean reward is higher; median ratio of p99 FCT slowdown; lowest "
                  "throughput ratio):", "",
                  "| baseline | reward diff ± s.e. | cells with higher reward | p99 slowdown ratio (median) "
                  "| throughput ratio (min / median) |", "|---|---:|---:|---:|---:|"]
        for b in baselines:
            diff, se = paired_diff(results[ag]["reward_mean"], results[b]["reward_mean"])
            per_cell = (results[ag]["reward_mean"] - results[b]["reward_mean"]).mean(1)
            sd = [get[(ag, *g)]["slowdown_p99"] / get[(b, *g)]["slowdown_p99"] for g in grid]
            th = [get[(ag, *g)]["goodput_bps"] / get[(b, *g)]["goodput_bps"] for g in grid]
            lines.append(f"| {b} | {diff:+.5f} ± {se:.5f} | {int((per_cell > 0).sum())}/{len(grid)} "
                         f"| {float(np.nanmedian(sd)):.3f} | {float(np.nanmin(th)):.4f} / {float(np.nanmedian(th)):.4f} |")
        mean_r = {p: float(np.mean([get[(p, *g)]["reward_mean"] for g in grid])) for p in [ag, *baselines]}
        lines += ["", f"- higher mean reward than every baseline: {wins_r}/{len(grid)} cells",
                  f"- lower p99 FCT slowdown than every baseline at <= 2 % throughput loss: {wins_sd}/{len(grid)} cells",
                  "- mean reward over the grid: " + ", ".join(f"{p} {v:.4f}" for p, v in mean_r.items()), ""]
    return "\n".join(lines) + "\n"


def plot(rows, tcp, buffers, policies, path):
    def draw(ax, f, scale, n, first):
        for p in policies:
            rr = sorted((r for r in rows if r["policy"] == p and r["tcp"] == tcp and r["buffer_per_class_pkts"] == n),
                        key=lambda r: r["load"])
            y = np.array([r[f] for r in rr]) * scale
            e = np.array([r[f + "_std"] for r in rr]) * scale
            style = dict(lw=2.2, color="k") if not p.startswith(("sb-", "dt", "abm", "droptail")) else dict(lw=1)
            ax.errorbar([r["load"] for r in rr], y, yerr=e, label=p, capsize=2, marker="o", ms=3, **style)

    plot_load_grid(tcp, buffers, PLOTS, draw, path)


if __name__ == "__main__":
    sys.exit(main())
