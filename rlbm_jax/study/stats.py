"""The statistics a study's verdict rests on: paired differences per test run, errors
across training seeds, and Holm's correction for several baselines.

A recipe is judged, not a seed: the agent of each training seed s and a baseline b run the
same test runs r (configuration and test seed), so d[s, r] = agent_s(r) - b(r) is paired by
run.  The recipe's difference is the mean over s of each seed's mean over r; its standard
error is taken across training seeds (each seed's mean difference one sample), so both the
spread of training and the noise of the test runs are in it.  With one training seed there
is no such error, and no verdict: the difference is reported with its error over test runs,
marked so.  A verdict (better, worse, tie) needs Holm-adjusted p < ALPHA over the
baselines compared (a two-sided t-test of the seeds' mean differences against 0).
"""
from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05


def mean_se(values) -> tuple:
    """(mean, standard error) of the finite values; the error is NaN with fewer than two."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


def fmt_mean_se(ms, scale: float = 1.0, digits: int = 3, sign: bool = False) -> str:
    """(mean, s.e.) as "m ± s" (scaled; `sign`: "+m"), "m" where the error is NaN, "n/a" for
    no mean."""
    if ms is None:
        return "n/a"
    m, s = ms
    if m is None or m != m:
        return "n/a"
    mean = f"{m * scale:{'+' if sign else ''}.{digits}f}"
    return f"{mean} ± {s * scale:.{digits}f}" if s is not None and s == s else mean


def paired(agent: np.ndarray, baseline: np.ndarray, higher_is_better: bool = True) -> dict:
    """agent [S, R] (training seeds x test runs), baseline [R]: the recipe's paired
    difference agent - baseline (mean, s.e. across training seeds, their count, the
    t-test's p-value; with one seed, `se_over` says the error is over test runs and p is
    None)."""
    agent = np.asarray(agent, np.float64)
    base = np.asarray(baseline, np.float64)
    if agent.ndim != 2 or base.shape != agent.shape[1:]:
        raise ValueError(f"paired: agent [seeds, runs] and baseline [runs], got {agent.shape} and {base.shape}")
    d = agent - base[None]
    per_seed = np.nanmean(d, axis=1)
    sign = 1.0 if higher_is_better else -1.0
    if per_seed.size >= 2:
        m, se = mean_se(per_seed)
        p = t_p(m, se, per_seed.size - 1)
        over = "training seeds"
    else:
        m, se = mean_se(d[0])
        p, over = None, "test runs (one training seed: no verdict)"
    return {"diff": m, "se": se, "n_seeds": int(per_seed.size), "n_runs": int(d.shape[1]), "p": p, "se_over": over,
            "per_seed": [float(x) for x in per_seed], "better_sign": sign}


def unpaired(a_per_seed, b_per_seed, higher_is_better: bool = True, alpha: float = ALPHA) -> dict:
    """Two recipes trained from different seeds, each seed's mean over the same test runs:
    the difference of their means, its Welch standard error, the Welch t-test's p and a
    verdict ("better" / "worse" for a, p < alpha; "tie"; "no verdict" with fewer than two
    seeds on a side)."""
    a = np.asarray(a_per_seed, np.float64)
    b = np.asarray(b_per_seed, np.float64)
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    d = ma - mb
    if a.size < 2 or b.size < 2:
        return {"diff": d, "se": float("nan"), "p": None, "verdict": "no verdict"}
    se = math.sqrt(sa ** 2 + sb ** 2)
    dof = (sa ** 2 + sb ** 2) ** 2 / (sa ** 4 / (a.size - 1) + sb ** 4 / (b.size - 1)) if se > 0 else 1
    p = t_p(d, se, max(int(math.floor(dof)), 1))
    v = "tie" if not p < alpha else ("better" if (d > 0) == higher_is_better else "worse")
    return {"diff": d, "se": se, "p": p, "verdict": v}


def t_p(mean: float, se: float, dof: int) -> float:
    """Two-sided p of mean / se under Student's t with `dof` degrees of freedom."""
    from scipy import stats

    if not (se == se) or dof < 1:
        return float("nan")
    if se == 0.0:
        return 0.0 if mean != 0.0 else 1.0
    return float(2.0 * stats.t.sf(abs(mean / se), dof))


def holm(ps: dict) -> dict:
    """Holm-adjusted p-values of {name: p} (None and NaN left as they are)."""
    named = sorted(((p, k) for k, p in ps.items() if p is not None and p == p))
    out = {k: p for k, p in ps.items()}
    m, run = len(named), 0.0
    for i, (p, k) in enumerate(named):
        run = max(run, min(1.0, (m - i) * p))
        out[k] = run
    return out


def verdicts(comparisons: dict, alpha: float = ALPHA) -> dict:
    """{baseline: comparison} (each `paired`'s) with `p_holm` and `verdict`: "better" or
    "worse" where the Holm-adjusted p is below `alpha`, else "tie"; "no verdict" with one
    training seed."""
    adj = holm({k: c["p"] for k, c in comparisons.items()})
    out = {}
    for k, c in comparisons.items():
        p = adj[k]
        if p is None or p != p:
            v = "no verdict"
        elif p < alpha:
            v = "better" if c["diff"] * c["better_sign"] > 0 else "worse"
        else:
            v = "tie"
        out[k] = {**c, "p_holm": p, "verdict": v}
    return out
