"""One policy against each baseline from a per-run table (a CSV with a `policy` and a `seed`
column, one row per run; the other key columns name the cell), paired by run.

For each field: the policy's value minus the baseline's in every (cell, seed), each seed's
mean over the cells (the cells of one seed share its key), then the mean over seeds and its
standard error; a two-sided t-test over the seeds, Holm-corrected over the baselines; and
the ratio of the two totals (timeouts: the policy's count over the baseline's).  With one
trained policy the error is over test seeds: a claim about this policy, not its recipe.

    python -m rlbm_jax.study.verdict      # regenerates results/thesis_untouched/VERDICT*.md
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from rlbm_jax.evaluate import paired_diff
from rlbm_jax.study import stats

# field -> (higher is better, what it is)
FIELDS = {"reward_thesis": (True, "reward `thesis` (the policy's training reward)"),
          "reward_flows-accrued": (True, "reward `flows-accrued` (the adopted default, RLBM-v0)"),
          "goodput_bps": (True, "goodput (bit/s)"), "drop_rate": (False, "drop rate"),
          "rto_count": (False, "timeouts per run"), "syn_drops": (False, "lost SYNs per run"),
          "slowdown_p99": (False, "p99 FCT slowdown")}
KEYS = ("tcp", "buffer_per_class_pkts", "load")
# the committed verdicts: results/thesis_untouched/<run>/per_run.csv -> VERDICT[_<run>].md, with its title
COMMITTED = {"rewards": "The committed thesis agent on 20 seeds no run had touched (the TCP model it was trained on)",
             "rewards_today": "The committed thesis agent on 20 seeds no run had touched (today's default model)"}


def out_name(run: str) -> str:
    return "VERDICT.md" if run == "rewards" else f"VERDICT_{run.removeprefix('rewards_')}.md"


def table(rows: list, policy: str, fields=None) -> dict:
    """{field: {baseline: comparison}} (`stats.verdicts` of the paired differences) and the
    totals' ratios, from the per-run `rows` (dicts of strings)."""
    fields = [f for f in (fields or FIELDS) if f in rows[0]]
    pols = list(dict.fromkeys(r["policy"] for r in rows))
    if policy not in pols:
        raise ValueError(f"--policy {policy!r}: the table holds {pols}")
    seeds = sorted({int(r["seed"]) for r in rows})
    cells = sorted({tuple(r[k] for k in KEYS) for r in rows})
    index = {(c, s): i for i, (c, s) in enumerate((c, s) for s in seeds for c in cells)}

    def matrix(p, f):
        m = np.full(len(index), np.nan)
        for r in rows:
            if r["policy"] == p:
                m[index[(tuple(r[k] for k in KEYS), int(r["seed"]))]] = float(r[f])
        return m.reshape(len(seeds), len(cells))

    out = {}
    for f in fields:
        higher = FIELDS.get(f, (True, f))[0]
        a = matrix(policy, f)
        comps = {}
        for b in pols:
            if b == policy:
                continue
            m, se = paired_diff(a.T, matrix(b, f).T)  # [cells, seeds]: the error over seeds
            tot_b = np.nansum(matrix(b, f))
            comps[b] = {"diff": m, "se": se, "p": stats.t_p(m, se, len(seeds) - 1) if len(seeds) > 1 else None,
                        "better_sign": 1.0 if higher else -1.0, "n_seeds": len(seeds),
                        "ratio": float(np.nansum(a) / tot_b) if tot_b else float("nan"),
                        "cells_better": int(np.sum((np.nanmean(a, 0) - np.nanmean(matrix(b, f), 0))
                                                   * (1 if higher else -1) > 0))}
        out[f] = stats.verdicts(comps)
    return {"fields": out, "seeds": seeds, "cells": len(cells), "policy": policy}


def markdown(t: dict, source: str, title: str) -> str:
    L = [f"# {title}", "",
         f"Generated from `{source}` alone by `python -m rlbm_jax.study.verdict`. "
         f"`{t['policy']}` against each baseline on {t['cells']} cells x {len(t['seeds'])} seeds "
         f"({t['seeds'][0]}..{t['seeds'][-1]}), paired by run: each seed's mean difference over the cells, the "
         "mean over seeds ± its standard error; Holm-adjusted p over the baselines (alpha "
         f"{stats.ALPHA}); the ratio of the policy's total to the baseline's; the cells where the policy's mean "
         "is better. One trained policy: the error is over test seeds, not training seeds.", ""]
    for f, comps in t["fields"].items():
        higher, what = FIELDS.get(f, (True, f))
        L += [f"## {what} ({'higher' if higher else 'lower'} is better)", "",
              "| baseline | policy - baseline | p (Holm) | verdict | total ratio | cells better |",
              "| --- | --- | --- | --- | --- | --- |"]
        for b, c in comps.items():
            p = "n/a" if c["p_holm"] is None or c["p_holm"] != c["p_holm"] else f"{c['p_holm']:.3g}"
            L.append(f"| {b} | {c['diff']:+.5g} ± {c['se']:.2g} | {p} | {c['verdict']} | {c['ratio']:.3f} | "
                     f"{c['cells_better']}/{t['cells']} |")
        L.append("")
    return "\n".join(L)


def write_committed(root: Path = Path(".")) -> list:
    """Regenerate every committed verdict (`COMMITTED`) under `root`; returns the paths."""
    from rlbm_jax.study.pipeline import read_csv

    out = []
    for run, title in COMMITTED.items():
        src = f"results/thesis_untouched/{run}/per_run.csv"
        path = Path(root) / "results" / "thesis_untouched" / out_name(run)
        path.write_text(markdown(table(read_csv(Path(root) / src), "trained"), src, title))
        out.append(path)
    return out


def main() -> int:
    for p in write_committed():
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
