"""Do the sharing presets show a buffer policy's worth?  The baselines before any training.

    python scripts/sharing.py --seeds 10 --out results/sharing

Runs every baseline buffer policy on each preset where sharing matters (`scenarios`:
`sharing`, long flows in class 1 beside web search in class 0 on one shared buffer either
class may fill; `sharing-incast`, the same with incast queries) with seeds no training or
selection uses, and scores each run by every named reward (`formulations.REWARDS`, the
adopted one first) and by the operator metrics: pooled p99 slowdown of short flows
(< 100 KB, over the seeds; a flow still open at the end counts with the slowdown it has
reached, a lower bound), goodput, p99 queue, drop rate, timeouts.

The baselines, tuned as hard as an agent will be: SB naive and sophisticated, drop-tail
(complete sharing), DT and ABM over a sweep of alpha, static per-class thresholds in BDPs
(class 0 / class 1; "free": the free buffer B - Q), and the hand rule busy-bdp (a class
takes the whole buffer alone, the class-1 threshold in BDPs beside a busy class 0).  Runs
identical by construction are left out, with the reason (`DUPLICATES`).

Two checks before any agent trains on a preset:
  * separation: baseline pairs whose adopted reward differs significantly over the seeds
    (paired t-test, Holm-adjusted over every pair of the preset, family-wise 5 %; a preset
    where no pair does cannot show a policy's worth), and pairs whose per-seed p99
    short-flow slowdown does;
  * ranking: per preset, Kendall tau between each reward's ranking of the baselines and the
    ranking by p99 short slowdown (lower is better) and by goodput, and the agreement on the
    pairs where the operator says one policy serves flows better than another (no worse on
    p99 short slowdown and goodput within noise margins, better on one).
Writes summary.md, per_run.csv, per_policy.csv, sharing.png, command.txt and config.json.
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
from rlbm_jax.cli.evaluate import episode_record
from rlbm_jax.cli.reward_analysis import episode_fn, kendall_tau
from rlbm_jax.env import backends, formulations
from rlbm_jax.env.params import config_record, make_params, stack_params
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.progress import Progress
from rlbm_jax.study import stats
from rlbm_jax.studies.sharing import DUPLICATES, variants as baselines

PROG = "sharing.py"
PRESETS = ("sharing", "sharing-incast")
ADOPTED = formulations.get("RLBM-v0").reward.name  # the adopted reward (the default formulation's)
SHORT_BYTES = 100_000
# operator dominance: A serves flows better than B when it is no worse on both (within NO_WORSE)
# and better on one by BETTER
NO_WORSE = {"p99_short": 1.02, "goodput": 0.995}
ALPHA = 0.05  # a pair is separated at this family-wise level (Holm over the preset's pairs)
BETTER = {"p99_short": 0.95, "goodput": 1.01}


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS), help="presets to run")
    ap.add_argument("--seeds", type=int, default=10, help="seeds per preset")
    ap.add_argument("--first-seed", type=int, default=400_000, help="seeds are first-seed, first-seed+1, ...")
    ap.add_argument("--seconds", type=float, default=scenarios.SHARING_EPISODE_S, help="episode length (s)")
    ap.add_argument("--buffer-bdp", type=float, default=None,
                    help="the shared buffer in BDPs (unset: each preset's own, 1 for sharing, 2 for sharing-incast)")
    ap.add_argument("--out", default="results/sharing", help="output directory")
    add_model_args(ap)
    add_backend_arg(ap)
    return ap


def plan(a) -> tuple[dict, dict, RLBMEnv]:
    """(run_config(a), {preset: params of every baseline}, the scoring env)."""
    if a.seeds < 2:
        raise ValueError("--seeds must be at least 2 (errors are over seeds)")
    if not a.seconds > 0:
        raise ValueError(f"--seconds must be positive, got {a.seconds}")
    runs = baselines()
    if a.buffer_bdp is not None and not a.buffer_bdp > 0:
        raise ValueError(f"--buffer-bdp must be positive, got {a.buffer_bdp}")
    size = {} if a.buffer_bdp is None else {"buffer_bdp": a.buffer_bdp}
    kws = {pr: scenarios.kw(pr, **size, **model_kw(a)) for pr in a.presets}
    sims = {pr: [make_params(**{**kw, **ov}) for _, _, ov in runs] for pr, kw in kws.items()}
    first = next(iter(sims.values()))[0]
    env = RLBMEnv(first, formulation="RLBM-v0", agent_interval_s=0.1, episode_s=a.seconds)
    config = {"presets": {pr: config_record(kw) for pr, kw in kws.items()},
              "baselines": [{"name": n, "family": f, **{k: list(v) if isinstance(v, tuple) else v
                                                         for k, v in ov.items()}} for n, f, ov in runs],
              "duplicates_left_out": list(DUPLICATES),
              "seeds": list(range(a.first_seed, a.first_seed + a.seeds)), "rewards": list(formulations.REWARDS),
              "adopted_reward": ADOPTED, "short_flow_bytes": SHORT_BYTES, **episode_record(env),
              "backend": a.backend or backends.default(), "out": str(a.out)}
    return config, sims, env


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json records it): each
    preset's parameters, every baseline (name, family, policy and alphas), the seeds, the
    rewards scored, the episode, the backend and the output directory."""
    return plan(a)[0]


def simulate(env: RLBMEnv, sims: dict, seeds, chunk: int = 5) -> dict:
    """{preset: (rewards [runs, seeds, R], report, log, log_count, open flows)}, `chunk`
    baselines a call (one compiled program for all: every chunk has the same shape), the
    progress bar moving a chunk at a time."""
    ep0 = env.default_params
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    fn = jax.jit(jax.vmap(jax.vmap(episode_fn(env, None), in_axes=(None, 0)), in_axes=(0, None)))
    n = len(next(iter(sims.values())))
    starts = list(range(0, n, chunk))
    bar = Progress(len(sims) * len(starts), unit=" chunks", label=f"{len(sims)} presets x {n} baselines x "
                   f"{len(seeds)} seeds, {chunk} baselines a chunk ")
    bar.update(0, measure=False)
    out, done = {}, 0
    for pr, cells in sims.items():
        parts = []
        for i in starts:
            part = cells[i:i + chunk]
            pad = chunk - len(part)  # the last chunk padded with its first run (dropped below): one shape
            got = jax.device_get(fn(stack_params([ep0.replace(sim=p) for p in part + part[:1] * pad]), keys))
            parts.append(jax.tree.map(lambda x: x[:len(part)], got))
            done += 1
            bar.update(done, extra=pr)
        out[pr] = jax.tree.map(lambda *xs: np.concatenate(xs), *parts)
    bar.close()
    return out


def short_slowdowns(log, count, open_flows) -> np.ndarray:
    """Slowdowns of the short flows of one run: finished ones from the log, open ones censored."""
    rows = log[:int(count)]
    size = np.concatenate([rows[:, 0], open_flows[:, 0]])
    slow = np.concatenate([rows[:, 3], open_flows[:, 1]])
    keep = np.isfinite(size) & (size < SHORT_BYTES)
    return slow[keep]


def q(x, p) -> float:
    return float(np.quantile(x, p)) if np.size(x) else float("nan")


def tables(out: dict, seeds) -> tuple[list, list]:
    """Per run and per (preset, baseline) rows."""
    names = list(formulations.REWARDS)
    runs = baselines()
    per_run, per_policy = [], []
    for pr, (rew, rep, log, count, open_flows) in out.items():
        for i, (name, family, _) in enumerate(runs):
            slows = [short_slowdowns(log[i, j], count[i, j], open_flows[i, j]) for j in range(len(seeds))]
            for j, s in enumerate(seeds):
                row = {"preset": pr, "policy": name, "family": family, "seed": s,
                       **{f"reward_{k}": float(rew[i, j, r]) for r, k in enumerate(names)},
                       "p99_short": q(slows[j], 0.99), "short_flows": int(slows[j].size)}
                row.update({k: float(rep[k][i, j]) for k in ("goodput_bps", "queue_p99_pkts", "drop_rate", "rto_count",
                                                             "syn_drops", "flows_completed", "flows_refused")})
                per_run.append(row)
            pooled = np.concatenate(slows)
            per_seed = np.asarray([q(x, 0.99) for x in slows])
            r_adopted = rew[i, :, names.index(ADOPTED)]
            sem = lambda x: float(np.std(x, ddof=1) / np.sqrt(len(x)))
            per_policy.append({
                "preset": pr, "policy": name, "family": family,
                **{f"reward_{k}": float(np.mean(rew[i, :, r])) for r, k in enumerate(names)},
                "reward_se": sem(r_adopted), "p99_short": q(pooled, 0.99), "p99_short_seed_mean": float(np.mean(per_seed)),
                "p99_short_seed_se": sem(per_seed), "short_flows": int(pooled.size),
                "goodput_bps": float(np.mean(rep["goodput_bps"][i])), "goodput_se": sem(rep["goodput_bps"][i]),
                "queue_p99_pkts": float(np.mean(rep["queue_p99_pkts"][i])), "drop_rate": float(np.mean(rep["drop_rate"][i])),
                "rto_count": float(np.mean(rep["rto_count"][i])), "flows_refused": float(np.mean(rep["flows_refused"][i]))})
    return per_run, per_policy


def dominates(a: dict, b: dict) -> bool:
    """The operator's verdict: a serves flows better than b (no worse on both, better on one)."""
    if not np.isfinite([a["p99_short"], b["p99_short"]]).all():
        return False
    no_worse = a["p99_short"] <= NO_WORSE["p99_short"] * b["p99_short"] and \
        a["goodput_bps"] >= NO_WORSE["goodput"] * b["goodput_bps"]
    better = a["p99_short"] <= BETTER["p99_short"] * b["p99_short"] or a["goodput_bps"] >= BETTER["goodput"] * b["goodput_bps"]
    return no_worse and better


def separation(out: dict, seeds) -> dict:
    """{preset: {"reward": [(a, b, d, se, p_holm)], "p99_short": [...]}}: the baseline pairs
    whose paired difference over seeds is significant (paired t-test, Holm-adjusted over all
    the preset's pairs, at `ALPHA`) for the adopted reward and for the per-seed p99 short
    slowdown.  Hundreds of pairs are tested, so a bare "difference > 2 s.e." would call
    about a tenth of the ties apart with few seeds."""
    from scipy.stats import ttest_rel

    names = list(formulations.REWARDS)
    runs = [n for n, _, _ in baselines()]
    res = {}
    for pr, (rew, _, log, count, open_flows) in out.items():
        r = rew[:, :, names.index(ADOPTED)].astype(np.float64)
        p99 = np.asarray([[q(short_slowdowns(log[i, j], count[i, j], open_flows[i, j]), 0.99)
                           for j in range(len(seeds))] for i in range(len(runs))])
        res[pr] = {}
        for key, x in (("reward", r), ("p99_short", p99)):
            tests = {}
            for i, k in itertools.combinations(range(len(runs)), 2):
                ok = np.isfinite(x[i]) & np.isfinite(x[k])
                d = x[i, ok] - x[k, ok]
                if d.size < 2:
                    continue
                se = float(d.std(ddof=1) / np.sqrt(d.size))
                p = float(ttest_rel(x[i, ok], x[k, ok]).pvalue) if se > 0 else (0.0 if d.mean() != 0 else 1.0)
                tests[(i, k)] = (float(d.mean()), se, p)
            adj = stats.holm({ik: p for ik, (_, _, p) in tests.items()})
            res[pr][key] = [(runs[i], runs[k], m, se, adj[(i, k)]) for (i, k), (m, se, _) in tests.items()
                            if adj[(i, k)] < ALPHA]
    return res


def ranking(per_policy: list) -> dict:
    """{preset: {reward: {tau_p99_short, tau_goodput, agreement, pairs}}}."""
    names = list(formulations.REWARDS)
    res = {}
    for pr in dict.fromkeys(r["preset"] for r in per_policy):
        rows = [r for r in per_policy if r["preset"] == pr]
        ok = [r for r in rows if np.isfinite(r["p99_short"])]
        dom = [(a, b) for a, b in itertools.permutations(rows, 2) if dominates(a, b)]
        res[pr] = {}
        for k in names:
            key = f"reward_{k}"
            agree = sum(a[key] > b[key] for a, b in dom)
            res[pr][k] = {"tau_p99_short": kendall_tau([r[key] for r in ok], [-r["p99_short"] for r in ok]),
                          "tau_goodput": kendall_tau([r[key] for r in rows], [r["goodput_bps"] for r in rows]),
                          "agreement": agree / len(dom) if dom else float("nan"), "pairs": len(dom)}
    return res


def write(out_dir: Path, per_run, per_policy, sep, rank, seeds, argv, wall_s) -> str:
    for fname, rows in (("per_run.csv", per_run), ("per_policy.csv", per_policy)):
        with (out_dir / fname).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    names = list(formulations.REWARDS)
    presets = list(dict.fromkeys(r["preset"] for r in per_policy))
    n_base = len(baselines())
    lines = [f"# Baselines on the sharing presets, before any training: {len(presets)} presets x {n_base} baselines "
             f"x {len(seeds)} seeds (seeds {seeds[0]}..{seeds[-1]})", "",
             f"Command: `{' '.join(['python scripts/sharing.py', *argv])}` ({wall_s:.0f} s).", "",
             "## Verdict per preset", "",
             f"| preset | reward pairs separated | p99-short pairs separated | best by `{ADOPTED}` "
             f"| best by p99 short slowdown | tau (`{ADOPTED}` vs p99 short) | tau vs goodput | agreement on "
             "dominance pairs | the preset can show a policy's worth |", "|---|---:|---:|---|---|---:|---:|---:|---|"]
    pairs_total = n_base * (n_base - 1) // 2
    for pr in presets:
        rows = [r for r in per_policy if r["preset"] == pr]
        best_r = max(rows, key=lambda r: r[f"reward_{ADOPTED}"])
        best_p = min((r for r in rows if np.isfinite(r["p99_short"])), key=lambda r: r["p99_short"])
        rk = rank[pr][ADOPTED]
        ok = len(sep[pr]["reward"]) > 0
        lines.append(f"| {pr} | {len(sep[pr]['reward'])}/{pairs_total} | {len(sep[pr]['p99_short'])}/{pairs_total} "
                     f"| {best_r['policy']} | {best_p['policy']} | {rk['tau_p99_short']:+.2f} | {rk['tau_goodput']:+.2f} "
                     f"| {rk['agreement']:.2f} ({rk['pairs']}) | {'yes' if ok else 'no'} |")
    lines += ["", "A pair is separated when its paired difference over seeds is significant (paired t-test, Holm-"
              f"adjusted over all {pairs_total} pairs of the preset, family-wise {ALPHA:.0%}). Kendall "
              "tau is over the baselines of the preset (lower p99 short slowdown ranks higher). Dominance: A serves "
              f"flows better than B when its pooled p99 slowdown of short flows (< {SHORT_BYTES // 1000} KB) and its "
              f"goodput are no worse (within {NO_WORSE['p99_short'] - 1:.0%} and {1 - NO_WORSE['goodput']:.1%}) and "
              f"one is better (by {1 - BETTER['p99_short']:.0%} or {BETTER['goodput'] - 1:.0%}); agreement is the "
              "share of such ordered pairs the reward also ranks A above B.", ""]
    for pr in presets:
        rows = sorted((r for r in per_policy if r["preset"] == pr), key=lambda r: -r[f"reward_{ADOPTED}"])
        lines += [f"## {pr}", "", f"Baselines by mean `{ADOPTED}` (± s.e. over seeds); operator metrics beside.", "",
                  f"| baseline | `{ADOPTED}` | p99 short slowdown (pooled; per-seed mean ± s.e.) | goodput (Mbit/s) "
                  "| p99 queue (pkts) | drop rate | timeouts | flows refused |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['policy']} | {r[f'reward_{ADOPTED}']:.4f} ± {r['reward_se']:.4f} | {r['p99_short']:.2f} "
                         f"({r['p99_short_seed_mean']:.2f} ± {r['p99_short_seed_se']:.2f}) | {r['goodput_bps'] / 1e6:.2f} "
                         f"± {r['goodput_se'] / 1e6:.2f} | {r['queue_p99_pkts']:.0f} | {r['drop_rate']:.4f} "
                         f"| {r['rto_count']:.1f} | {r['flows_refused']:.1f} |")
        lines += ["", "How each reward ranks these baselines:", "",
                  "| reward | tau vs p99 short | tau vs goodput | agreement on dominance pairs |", "|---|---:|---:|---:|"]
        for k in names:
            s = rank[pr][k]
            lines.append(f"| `{k}` | {s['tau_p99_short']:+.2f} | {s['tau_goodput']:+.2f} | {s['agreement']:.2f} "
                         f"({s['pairs']}) |")
        lines.append("")
    lines += ["## Left out as duplicates by construction", ""] + [f"- {d}" for d in DUPLICATES] + [""]
    text = "\n".join(lines)
    (out_dir / "summary.md").write_text(text)
    plot(out_dir / "sharing.png", per_policy, presets)
    return text


def plot(path: Path, per_policy: list, presets: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(dict.fromkeys(r["family"] for r in per_policy))
    colors = {f: plt.cm.tab10(i) for i, f in enumerate(fams)}
    fig, axes = plt.subplots(1, len(presets), figsize=(6.2 * len(presets), 4.6), squeeze=False)
    for ax, pr in zip(axes[0], presets):
        rows = [r for r in per_policy if r["preset"] == pr]
        for f in fams:
            rs = [r for r in rows if r["family"] == f]
            ax.errorbar([r["p99_short_seed_mean"] for r in rs], [r[f"reward_{ADOPTED}"] for r in rs],
                        xerr=[r["p99_short_seed_se"] for r in rs], yerr=[r["reward_se"] for r in rs], fmt="o", ms=4,
                        color=colors[f], label=f, capsize=2, lw=0.8)
            for r in rs:
                ax.annotate(r["policy"].replace("static ", "s ").replace("busy-bdp ", "b "),
                            (r["p99_short_seed_mean"], r[f"reward_{ADOPTED}"]), fontsize=6, alpha=0.7)
        ax.set_xlabel("p99 slowdown of short flows (per-seed mean ± s.e.; lower is better)")
        ax.set_ylabel(f"{ADOPTED} (mean per interval ± s.e.)")
        ax.set_title(pr, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("baselines on the sharing presets: the reward (up is better) against the operator's p99 short-flow "
                 "slowdown (left is better)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    try:
        cfg, sims, env = plan(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    apply_backend(a)
    seeds = cfg["seeds"]
    out_dir = Path(cfg["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "command.txt").write_text(" ".join(["python scripts/sharing.py", *argv]) + "\n")
    jsonio.write(out_dir / "config.json", cfg)
    t0 = time.perf_counter()
    out = simulate(env, sims, seeds)
    per_run, per_policy = tables(out, seeds)
    text = write(out_dir, per_run, per_policy, separation(out, seeds), ranking(per_policy), seeds, argv,
                 time.perf_counter() - t0)
    print(text)
    print(jsonio.dumps({"out": str(out_dir), "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
