"""Judge an exported policy inside ns-3: the policy and every baseline on the thesis
grid, in ns-3.37 and in the JAX simulator, on the same flows, and the transfer report.

    python scripts/export_onnx.py --checkpoint results/train_default --out policy.onnx
    python scripts/eval_ns3.py --onnx policy.onnx --out results/ns3_eval

The ONNX file is checked first (`rlbm_jax.onnx_policy.load_checked`: format, metadata,
formulation and layout, widths, class count, agent interval); a mismatched file is
refused, status 2, before anything is simulated.  Then, for every cell (TCP x per-class
buffer N x load) and held-out seed:
  - ns-3 (`rlbm_jax/ns3/scenario/rlbm_scenario.cc`): the policy runs as the scenario's rl
    buffer policy, the scenario and this process in lock-step over a pipe
    (`rlbm_jax.ns3.harness.drive`): ns-3 sends each interval's raw record, this process computes
    the formulation's observation from it, asks onnxruntime for the action and sends
    back the knobs; the baselines run natively; every run's interval records are scored
    here with the formulation's reward (the JAX function the env uses);
  - JAX: the same graph (`onnx_policy.jax_policy`) drives RLBMEnv, the baselines run
    in the same env, all vmapped.
Both simulators carry the flows the JAX simulator draws for the seed (`--flows_in`),
so every comparison is paired.  Writes under --out: results.csv (mean and std over
seeds per simulator, policy and cell), transfer.md (per cell: does the policy beat
the baselines in ns-3, and in JAX; how far ns-3's numbers for the policy are from
JAX's, beside the same gap for the baselines), ns3_vs_jax.png, grid_<tcp>.png,
command.txt and config.json (the configuration run: `run_config`, which --print-config
prints).  ns-3 runs are cached under --out/ns3_runs (ignored by git).
"""
from __future__ import annotations

import csv
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.ns3 import harness
from rlbm_jax.cli import add_grid_args, add_backend_arg, apply_backend, fail, model_kw, parser, printed_config
from rlbm_jax.cli.evaluate import episode_record, grid_record
from rlbm_jax.devices import single_process_only
from rlbm_jax.env import backends
from rlbm_jax.env.params import make_params
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.evaluate import (REPORT_FIELDS as FIELDS, beats_baselines, mean_rows,
                               paired_diff, plot_load_grid, score_policies, scoring_formulation)
from rlbm_jax.onnx_policy import jax_policy, load_checked

PROG = "eval_ns3.py"

POLICY = "rl"  # the ONNX policy's label in every table
AGENT_INTERVAL_S = 0.1
GAP_FIELDS = ("reward_mean", "util_wire", "queue_mean_pkts", "drop_rate", "slowdown_p50", "slowdown_p99")
PLOTS = (("reward_mean", "mean reward per interval", 1.0), ("slowdown_p99", "p99 FCT slowdown", 1.0),
         ("goodput_bps", "throughput (Mbit/s)", 1e-6), ("queue_p99_pkts", "p99 buffer occupancy (pkts)", 1.0))


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--onnx", required=True, help="policy exported by scripts/export_onnx.py")
    add_grid_args(ap, seeds=3)
    ap.add_argument("--seconds", type=float, default=scenarios.THESIS_EPISODE_S,
                    help="episode length (whole agent intervals)")
    ap.add_argument("--jobs", type=int, default=2, help="ns-3 processes at a time")
    ap.add_argument("--fresh-ns3", action="store_true", help="rerun ns-3 even where a cached run matches")
    add_backend_arg(ap)
    ap.add_argument("--out", default="results/ns3_eval", help="output directory")
    return ap


def parse(argv):
    return build_parser().parse_args(argv)


def plan(a) -> tuple[dict, list, list, list, RLBMEnv, tuple, dict]:
    """(run_config(a), the grid's cells, each cell's make_params keywords and params, the
    JAX env, the policy (run by onnxruntime, and as a JAX function), its metadata); a
    ValueError names a bad option or what is wrong with the ONNX file."""
    if a.seeds < 1 or a.jobs < 1:
        raise ValueError("--seeds and --jobs must be at least 1")
    if not a.seconds >= AGENT_INTERVAL_S:
        raise ValueError(f"--seconds must be at least one agent interval ({AGENT_INTERVAL_S} s)")
    num_classes = scenarios.THESIS["num_classes"]
    ort_fn, meta = load_checked(a.onnx, num_classes=num_classes, agent_interval_s=AGENT_INTERVAL_S)
    if meta["network"] != "mlp":
        raise ValueError(f"{a.onnx} is a recurrent ({meta['network']}) policy; this evaluation drives stateless "
                         "MLP policies (one observation in, one action out)")
    jax_fn, _ = jax_policy(a.onnx)
    form = scoring_formulation(meta["formulation"], a.reward)
    grid = scenarios.thesis_grid(a.tcp, a.buffer_pkts, a.load)
    kws = [scenarios.thesis_cell(t, n, ld, policy=POLICY, queue_capacity_pkts=max(a.buffer_pkts), **model_kw(a))
           for t, n, ld in grid]
    sims = [make_params(**kw) for kw in kws]
    env = RLBMEnv(sims[0], formulation=form, agent_interval_s=AGENT_INTERVAL_S, episode_s=a.seconds,
                  flows_scale=meta["flows_scale"])
    policy = {"name": POLICY, "policy": str(a.onnx), "sha256": hashlib.sha256(Path(a.onnx).read_bytes()).hexdigest(),
              **{k: meta[k] for k in ("formulation", "network", "action_map", "agent_interval_s", "flows_scale")}}
    config = {**grid_record(grid, kws, sims), "seeds": list(range(a.first_seed, a.first_seed + a.seeds)),
              "runs": [policy, *({"name": b, "policy": b} for b in a.baselines)], "formulation": form.id,
              "reward": form.reward.name, **episode_record(env), "jobs": a.jobs, "fresh_ns3": a.fresh_ns3,
              "ns3_runs": str(Path(a.out) / "ns3_runs"), "backend": a.backend or backends.default(), "out": str(a.out)}
    return config, grid, kws, sims, env, (ort_fn, jax_fn), meta


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): the
    grid's cells and the env's parameters, the held-out seeds, every run (the ONNX file,
    its digest and metadata; each baseline's buffer policy), the scoring formulation and
    reward, the episode both simulators run, the ns-3 jobs and cache, the backend asked
    for and the output directory."""
    return plan(a)[0]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    try:
        cfg, grid, kws, sims, env, (ort_fn, jax_fn), meta = plan(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    apply_backend(a)
    if refusal := single_process_only(PROG):
        return fail(PROG, refusal)
    form, ep = env.formulation, env.default_params
    interval_s, seconds = cfg["agent_interval_s"], cfg["episode_s"]  # whole ticks: both simulators use these
    seeds = cfg["seeds"]
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text("python scripts/eval_ns3.py " + " ".join(argv) + "\n")
    jsonio.write(out / "config.json", cfg)
    t0 = time.perf_counter()

    binary = harness.build_ns3()
    # the policy acts on the formulation it was trained on; every run is scored on `form`'s reward
    agent = harness.Agent(fn=ort_fn, digest=cfg["runs"][0]["sha256"],
                          formulation=scoring_formulation(meta["formulation"], None), env_params=ep)
    ns3 = {}
    for pol in [POLICY, *a.baselines]:
        cells = [harness.Cell(f"eval/{pol}/{t}/load{ld:g}/buf{n}", "thesis", dict(kw, policy=pol), seconds)
                 for (t, n, ld), kw in zip(grid, kws)]
        res = harness.run_ns3(binary, cells, seeds, cfg["jobs"], Path(cfg["ns3_runs"]), fresh=cfg["fresh_ns3"],
                              agent=agent if pol == POLICY else None, interval_s=interval_s, label=f"ns-3 {pol} ")
        for c, sp in zip(cells, sims):
            cell_ep = ep.replace(sim=sp)
            for rep, records in zip(res[c.name]["seeds"], res[c.name]["intervals"]):
                rep["reward_mean"] = float(np.mean(harness.score_records(form, cell_ep, records)))
        ns3[pol] = {f: np.array([[_num(r.get(f)) for r in res[c.name]["seeds"]] for c in cells]) for f in FIELDS}
    t_ns3 = time.perf_counter() - t0
    jax_res = score_policies(env, sims, {POLICY: jax_fn}, a.baselines, seeds)
    t_jax = time.perf_counter() - t0 - t_ns3

    rows = {"ns-3": mean_rows(ns3, grid, FIELDS), "jax": mean_rows(jax_res, grid, FIELDS)}
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["simulator", *rows["ns-3"][0]])
        w.writeheader()
        for simulator, rr in rows.items():
            w.writerows({"simulator": simulator, **r} for r in rr)
    policies = [POLICY, *a.baselines]
    text = report(grid, policies, ns3, jax_res, rows, seeds, a, meta, form)
    (out / "transfer.md").write_text(text)
    scatter(grid, policies, ns3, jax_res, out / "ns3_vs_jax.png")
    for t in a.tcp:
        grid_plot(rows, t, a.buffer_pkts, policies, out / f"grid_{t}.png")
    print(text)
    print(jsonio.dumps({"out": str(out), "cells": len(grid), "seeds": len(seeds), "ns3_wall_s": round(t_ns3, 1),
                      "jax_wall_s": round(t_jax, 1)}))
    return 0


def _num(v):
    return float("nan") if v is None else float(v)


def verdicts(res: dict, c: int, baselines) -> dict:
    """Whether the policy beats every baseline in cell c: on mean reward, and on p99 FCT
    slowdown at no more than 2 % throughput loss; with the paired reward difference to
    the best baseline and its standard error over seeds."""
    mean = lambda p, f: float(np.nanmean(res[p][f][c]))
    best = max(baselines, key=lambda b: mean(b, "reward_mean"))
    diff, se = paired_diff(res[POLICY]["reward_mean"][c], res[best]["reward_mean"][c])
    reward, slowdown = beats_baselines(mean, POLICY, baselines)
    return {"reward": reward, "slowdown": slowdown, "best": best, "diff": diff, "se": se}


def gap(ns3_v, jax_v) -> float:
    """Relative difference of ns-3's mean over seeds from JAX's."""
    x, y = float(np.nanmean(ns3_v)), float(np.nanmean(jax_v))
    return (x - y) / abs(y) if y else float("nan")


def report(grid, policies, ns3, jax_res, rows, seeds, a, meta, form) -> str:
    baselines = policies[1:]
    onnx_name = Path(a.onnx).name
    lines = [f"# Transfer report: `{onnx_name}` in ns-3.37 and in the JAX simulator", "",
             f"Thesis grid, {len(grid)} cells x {len(seeds)} held-out seeds (seeds {seeds[0]}..{seeds[-1]}), "
             f"{a.seconds:g} s episodes scored on the reward `{form.reward.name}` every {meta['agent_interval_s']:g} s "
             "(in both simulators from the interval records, with the same JAX function); "
             "the policy and the baselines see the same flows in both simulators. "
             f"Command: `{(Path(a.out) / 'command.txt').as_posix()}`. Policy: action map `{meta['action_map']}`, "
             f"trained on `{json.dumps(meta.get('env', {}).get('scenario', {}))[:300]}`.", ""]
    if not baselines:
        lines += ["No baselines were run: nothing to compare against.", ""]
        return "\n".join(lines) + "\n"
    v = {s: [verdicts(r, c, baselines) for c in range(len(grid))] for s, r in (("ns-3", ns3), ("jax", jax_res))}
    n = len(grid)
    count = lambda s, k: sum(x[k] for x in v[s])
    agree = sum(v["ns-3"][c]["reward"] == v["jax"][c]["reward"] for c in range(n))
    lines += ["## Summary", "",
              "| | ns-3 | JAX |", "|---|---:|---:|",
              f"| cells where the policy has a higher mean reward than every baseline | {count('ns-3', 'reward')}/{n} "
              f"| {count('jax', 'reward')}/{n} |",
              f"| cells with lower p99 FCT slowdown than every baseline at <= 2 % throughput loss "
              f"| {count('ns-3', 'slowdown')}/{n} | {count('jax', 'slowdown')}/{n} |",
              "| mean reward over the grid: policy / best baseline | "
              + " | ".join(f"{np.nanmean(r[POLICY]['reward_mean']):.4f} / "
                           f"{max(np.nanmean(r[b]['reward_mean']) for b in baselines):.4f}"
                           for r in (ns3, jax_res)) + " |", "",
              f"The reward verdict is the same in both simulators in {agree}/{n} cells.", ""]
    med = {f: float(np.nanmedian([gap(ns3[POLICY][f][c], jax_res[POLICY][f][c]) for c in range(n)]))
           for f in GAP_FIELDS if f != "reward_mean"}
    med_b = {f: float(np.nanmedian([gap(ns3[b][f][c], jax_res[b][f][c]) for b in baselines for c in range(n)]))
             for f in med}
    lines += ["Median over cells of ns-3's relative difference from JAX (policy; baselines):", "",
              "| metric | policy | baselines |", "|---|---:|---:|"]
    lines += [f"| {f} | {med[f]:+.1%} | {med_b[f]:+.1%} |" for f in med]
    lines += ["", "## Per cell: does the policy beat the baselines?", "",
              "Reward difference to the best baseline of that simulator (paired over seeds, ± standard error); "
              "`R` = higher mean reward than every baseline, `S` = lower p99 FCT slowdown than every baseline at "
              "<= 2 % throughput loss.", "",
              "| tcp | N | load | ns-3: diff ± s.e. (best baseline) | ns-3 | JAX: diff ± s.e. (best baseline) | JAX |",
              "|---|---:|---:|---|---|---|---|"]
    tag = lambda x: ("R" if x["reward"] else "-") + ("S" if x["slowdown"] else "-")
    for c, (t, nn, ld) in enumerate(grid):
        x, y = v["ns-3"][c], v["jax"][c]
        lines.append(f"| {t} | {nn} | {ld:g} | {x['diff']:+.5f} ± {x['se']:.5f} ({x['best']}) | {tag(x)} "
                     f"| {y['diff']:+.5f} ± {y['se']:.5f} ({y['best']}) | {tag(y)} |")
    lines += ["", "## Per cell: the transfer gap", "",
              "The policy's metrics in ns-3 against JAX: relative difference of the means over seeds (reward: "
              "ns-3 minus JAX). In brackets, the median of the same difference over the baselines in that cell: "
              "the simulators' own gap, which the policy's gap is to be read against.", "",
              "| tcp | N | load | " + " | ".join(GAP_FIELDS) + " |", "|---|---:|---:|" + "---:|" * len(GAP_FIELDS)]
    for c, (t, nn, ld) in enumerate(grid):
        cells = []
        for f in GAP_FIELDS:
            if f == "reward_mean":
                d = float(np.nanmean(ns3[POLICY][f][c]) - np.nanmean(jax_res[POLICY][f][c]))
                db = float(np.nanmedian([np.nanmean(ns3[b][f][c]) - np.nanmean(jax_res[b][f][c]) for b in baselines]))
                cells.append(f"{d:+.4f} ({db:+.4f})")
            else:
                g = gap(ns3[POLICY][f][c], jax_res[POLICY][f][c])
                gb = float(np.nanmedian([gap(ns3[b][f][c], jax_res[b][f][c]) for b in baselines]))
                cells.append(f"{g:+.0%} ({gb:+.0%})")
        lines.append(f"| {t} | {nn} | {ld:g} | " + " | ".join(cells) + " |")
    lines += ["", "Means per simulator, policy and cell: `results.csv`. Figures: `ns3_vs_jax.png` (every cell and "
              "policy, ns-3 against JAX, with y = x), `grid_<tcp>.png` (metrics against load per buffer size; "
              "solid ns-3, dashed JAX).", ""]
    return "\n".join(lines) + "\n"


def scatter(grid, policies, ns3, jax_res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(GAP_FIELDS), figsize=(3.4 * len(GAP_FIELDS), 3.5))
    for ax, f in zip(axes, GAP_FIELDS):
        lo, hi = np.inf, -np.inf
        for p in policies:
            x = np.nanmean(jax_res[p][f], axis=1)
            y = np.nanmean(ns3[p][f], axis=1)
            style = dict(marker="*", s=60, color="k", zorder=3) if p == POLICY else dict(marker="o", s=12, alpha=0.6)
            ax.scatter(x, y, label=p, **style)
            fin = np.isfinite(x) & np.isfinite(y)
            if fin.any():
                lo, hi = min(lo, x[fin].min(), y[fin].min()), max(hi, x[fin].max(), y[fin].max())
        if np.isfinite(lo):
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_title(f)
        ax.set_xlabel("JAX")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("ns-3")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def grid_plot(rows, tcp, buffers, policies, path):
    colors = {p: f"C{i}" for i, p in enumerate(policies)}
    colors[POLICY] = "k"

    def draw(ax, f, scale, n, first):
        for simulator, ls in (("ns-3", "-"), ("jax", "--")):
            for p in policies:
                rr = sorted((r for r in rows[simulator]
                             if r["policy"] == p and r["tcp"] == tcp and r["buffer_per_class_pkts"] == n),
                            key=lambda r: r["load"])
                ax.plot([r["load"] for r in rr], np.array([r[f] for r in rr]) * scale, ls=ls, marker="o", ms=3,
                        color=colors[p], lw=2.2 if p == POLICY else 1, label=f"{p} ({simulator})" if first else None)

    plot_load_grid(tcp, buffers, PLOTS, draw, path, legend={"fontsize": 6, "ncol": 2})


if __name__ == "__main__":
    sys.exit(main())
