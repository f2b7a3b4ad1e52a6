"""Stall statistics of a calibration grid: per flow cell and per grid, the flows
slowed more than 10x and 30x, lost SYNs and timeouts per run, and the pooled slowdown
quantiles per flow-size bucket, ours beside ns-3's, each ratio with a paired bootstrap
interval over seeds.

Seeds are paired (ns-3 runs exactly our flow schedule of seed s), so a bootstrap resample
draws seed indices with replacement and takes both simulators' runs of the drawn seeds:
counts are summed over them, quantiles pooled over their flows.  A grid's resample draws
seeds jointly for every cell, since seed s is one draw of every cell.  Used by
`calibration/run.py` (the report's section "Stalls" and results.json's "stalls").
"""
from __future__ import annotations

import numpy as np

from rlbm_jax.env import metrics as mx

SLOW_FACTORS = (10.0, 30.0)  # a flow "slowed more than Fx": FCT slowdown > F
COUNTS = ("slow_10x", "slow_30x", "syn_drops", "rto_count")  # per seed; the last two from the run's report
QUANTILES = (50, 90, 99)  # pooled slowdown percentiles per size bucket
N_RESAMPLES = 2000
BOOT_SEED = 37  # the bootstrap's own RNG seed: a report reads the same on every rerun
CI = 0.95
# the stall targets: the grid's summed counts within these relative errors; per cell
# the pooled short-flow p99 within P99_TOL, or its interval reaching into P99_BAND, in at
# least CELL_SHARE of the cells
COUNT_TOL = {"slow_10x": 0.20, "slow_30x": 0.20, "syn_drops": 0.25}
P99_TOL = 0.25
P99_BAND = (0.8, 1.25)
CELL_SHARE = 0.90
_SLOW = mx.LOG_FIELDS.index("slowdown")
_START = mx.LOG_FIELDS.index("start_s")
_SIZE = mx.LOG_FIELDS.index("size_bytes")


def flow_rows(rows) -> np.ndarray:
    """One run's finished flows as an [n, 5] float array of LOG_FIELDS rows."""
    a = np.asarray(rows, np.float64)
    if a.size == 0:
        return np.zeros((0, len(mx.LOG_FIELDS)))
    if a.ndim != 2 or a.shape[1] != len(mx.LOG_FIELDS):
        raise ValueError(f"flow rows must be [n, {len(mx.LOG_FIELDS)}] ({', '.join(mx.LOG_FIELDS)}), "
                         f"got shape {a.shape}")
    return a


def slow_counts(flows_per_seed, warmup_s: float = 0.0, factors=SLOW_FACTORS) -> np.ndarray:
    """[seeds, factors] ints: per seed, the flows slowed more than each factor, of the flows
    that count in the pooled tail (started at or after `warmup_s`, as `metrics.pooled_tail`)."""
    out = np.zeros((len(flows_per_seed), len(factors)), np.int64)
    for i, rows in enumerate(flows_per_seed):
        a = flow_rows(rows)
        s = a[a[:, _START] >= warmup_s, _SLOW]
        out[i] = [int(np.sum(s > f)) for f in factors]
    return out


def seed_counts(src_cell: dict, warmup_s: float) -> dict:
    """{count name: [seeds] floats} of one simulator's cell ({"seeds": reports, "flows": logs})."""
    reps, flows = src_cell["seeds"], src_cell["flows"]
    if len(reps) != len(flows):
        raise ValueError(f"{len(reps)} per-seed reports but {len(flows)} flow logs")
    slow = slow_counts(flows, warmup_s)
    out = {f"slow_{int(f)}x": slow[:, j].astype(np.float64) for j, f in enumerate(SLOW_FACTORS)}
    for key in ("syn_drops", "rto_count"):
        missing = [i for i, r in enumerate(reps) if r.get(key) is None]
        if missing:
            raise KeyError(f"per-seed report(s) {missing} lack {key!r}")
        out[key] = np.asarray([float(r[key]) for r in reps])
    return out


def resample_weights(n_seeds: int, n_resamples: int = N_RESAMPLES, rng_seed: int = BOOT_SEED) -> np.ndarray:
    """[resamples, seeds] ints: how often each seed index is drawn in each resample (seed
    indices drawn with replacement, as many as there are seeds)."""
    if n_seeds < 1 or n_resamples < 1:
        raise ValueError(f"need at least one seed and one resample, got {n_seeds} and {n_resamples}")
    idx = np.random.default_rng(rng_seed).integers(0, n_seeds, size=(n_resamples, n_seeds))
    return np.stack([np.bincount(row, minlength=n_seeds) for row in idx])


def ratio(a, b):
    """ours / ns-3 elementwise; both zero counts as agreement (1), x / 0 as inf."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / b
    return np.where((a == 0) & (b == 0), 1.0, r)


def interval(samples, ci: float = CI) -> tuple[float, float]:
    """The percentile interval of bootstrap ratios (NaNs, resamples without a value, left
    out; the outer order statistics, so that inf stays inf)."""
    s = np.asarray(samples, np.float64)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - ci) / 2
    return (float(np.quantile(s, tail, method="lower")), float(np.quantile(s, 1.0 - tail, method="higher")))


def count_ratio(ours, ns3, weights) -> dict:
    """Per-seed counts of both simulators (paired), summed: totals, per run, the ratio
    ours / ns-3 and its bootstrap interval over `weights` (`resample_weights`)."""
    ours, ns3 = np.asarray(ours, np.float64), np.asarray(ns3, np.float64)
    if ours.shape != ns3.shape or ours.ndim != 1 or weights.shape[1] != ours.size:
        raise ValueError(f"paired per-seed counts need equal lengths matching the resamples' seeds: "
                         f"ours {ours.shape}, ns-3 {ns3.shape}, resamples {weights.shape}")
    lo, hi = interval(ratio(weights @ ours, weights @ ns3))
    return {"ours": float(ours.sum()), "ns3": float(ns3.sum()), "ours_per_run": float(ours.mean()),
            "ns3_per_run": float(ns3.mean()), "ratio": float(ratio(ours.sum(), ns3.sum())), "lo": lo, "hi": hi}


def pooled_percentiles(values, labels, weights, qs=QUANTILES) -> np.ndarray:
    """[resamples, qs] percentiles (numpy's linear interpolation) of `values` pooled with
    each value repeated weights[b, its label] times: a resample's pooled quantile without
    building its pool; NaN where a resample holds no value."""
    values, labels = np.asarray(values, np.float64), np.asarray(labels, np.int64)
    out = np.full((weights.shape[0], len(qs)), np.nan)
    if values.size == 0:
        return out
    order = np.argsort(values, kind="stable")
    v, g = values[order], labels[order]
    for start in range(0, weights.shape[0], 256):  # bounded memory: [256, flows] at a time
        cum = np.cumsum(weights[start:start + 256][:, g], axis=1)
        n = cum[:, -1]
        for j, q in enumerate(qs):
            pos = q / 100.0 * np.maximum(n - 1, 0)
            lo = np.floor(pos)
            hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
            # the pool's k-th value (0-based) is v[i], i the first with cum[i] > k
            i_lo = np.minimum(np.sum(cum <= lo[:, None], axis=1), v.size - 1)
            i_hi = np.minimum(np.sum(cum <= hi[:, None], axis=1), v.size - 1)
            val = v[i_lo] + (pos - lo) * (v[i_hi] - v[i_lo])
            out[start:start + 256, j] = np.where(n > 0, val, np.nan)
    return out


def _bucket(flows_per_seed, warmup_s: float, lo: float, hi: float):
    """(slowdowns, seed index of each) of the bucket's flows started at or after `warmup_s`."""
    vals, labels = [], []
    for i, rows in enumerate(flows_per_seed):
        a = flow_rows(rows)
        a = a[(a[:, _START] >= warmup_s) & (a[:, _SIZE] >= lo) & (a[:, _SIZE] < hi)]
        vals.append(a[:, _SLOW])
        labels.append(np.full(len(a), i))
    return np.concatenate(vals), np.concatenate(labels)


def quantile_ratios(ours_flows, ns3_flows, warmup_s: float, weights) -> dict:
    """{bucket: {"p50": {...}, ...}} per `metrics.SIZE_BUCKETS`: the pooled percentiles of
    both simulators (as `metrics.pooled_tail` pools them), their ratio and its interval."""
    if len(ours_flows) != len(ns3_flows) or weights.shape[1] != len(ours_flows):
        raise ValueError(f"paired flow logs need equal seed counts matching the resamples': ours {len(ours_flows)}, "
                         f"ns-3 {len(ns3_flows)}, resamples {weights.shape[1]}")
    out = {}
    for name, lo, hi in mx.SIZE_BUCKETS:
        (vo, go), (vn, gn) = _bucket(ours_flows, warmup_s, lo, hi), _bucket(ns3_flows, warmup_s, lo, hi)
        po = np.percentile(vo, QUANTILES) if vo.size else np.full(len(QUANTILES), np.nan)
        pn = np.percentile(vn, QUANTILES) if vn.size else np.full(len(QUANTILES), np.nan)
        boot = ratio(pooled_percentiles(vo, go, weights), pooled_percentiles(vn, gn, weights))
        out[name] = {"flows_ours": int(vo.size), "flows_ns3": int(vn.size)}
        for j, q in enumerate(QUANTILES):
            lo_r, hi_r = interval(boot[:, j])
            out[name][f"p{q}"] = {"ours": float(po[j]), "ns3": float(pn[j]), "ratio": float(ratio(po[j], pn[j])),
                                  "lo": lo_r, "hi": hi_r}
    return out


def p99_short_ok(q: dict) -> bool:
    """The per-cell stall test: the short-flow p99 ratio within P99_TOL, or its interval
    reaching into P99_BAND."""
    r, lo, hi = q["ratio"], q["lo"], q["hi"]
    return bool((np.isfinite(r) and abs(r - 1) <= P99_TOL) or (lo <= P99_BAND[1] and hi >= P99_BAND[0]))


def stall_stats(cells, ours: dict, ns3: dict, n_seeds: int, spread: dict | None = None,
                n_resamples: int = N_RESAMPLES, rng_seed: int = BOOT_SEED) -> dict:
    """Per flow cell (kind != "long") and for the grid: the counts of `COUNTS` with ratios,
    the pooled quantiles per size bucket with ratios, and the acceptance verdict.  `ours`
    and `ns3` are run.py's {cell name: {"seeds", "flows"}}; `spread` ns-3's odd / even
    seeds ratio per cell (run.self_spread), carried beside the p99."""
    flow_cells = [c for c in cells if c.kind != "long"]
    w = resample_weights(n_seeds, n_resamples, rng_seed)
    out = {"n_resamples": n_resamples, "rng_seed": rng_seed, "ci": CI, "seeds": n_seeds, "cells": {}}
    totals = {"ours": {k: np.zeros(n_seeds) for k in COUNTS}, "ns3": {k: np.zeros(n_seeds) for k in COUNTS}}
    for c in flow_cells:
        warmup_s = float(c.kw.get("warmup_s", 0.0))
        per = {}
        for side, src in (("ours", ours), ("ns3", ns3)):
            if len(src[c.name]["seeds"]) != n_seeds:
                raise ValueError(f"{c.name}: {side} has {len(src[c.name]['seeds'])} seeds, expected {n_seeds}")
            per[side] = seed_counts(src[c.name], warmup_s)
            for k in COUNTS:
                totals[side][k] += per[side][k]
        out["cells"][c.name] = {
            "per_seed": {side: {k: v.tolist() for k, v in per[side].items()} for side in per},
            "counts": {k: count_ratio(per["ours"][k], per["ns3"][k], w) for k in COUNTS},
            "quantiles": quantile_ratios(ours[c.name]["flows"], ns3[c.name]["flows"], warmup_s, w),
            "ns3_odd_even_p99_short": float((spread or {}).get(c.name, np.nan)),
        }
    out["grid"] = {"cells": len(flow_cells),
                   "counts": {k: count_ratio(totals["ours"][k], totals["ns3"][k], w) for k in COUNTS}}
    out["acceptance"] = acceptance(out)
    return out


def acceptance(stats: dict) -> dict:
    """The stall targets' verdict on `stall_stats`' numbers: the grid's summed counts within
    `COUNT_TOL`, the share of cells passing `p99_short_ok` at least `CELL_SHARE`."""
    out = {}
    for k, tol in COUNT_TOL.items():
        r = stats["grid"]["counts"][k]["ratio"]
        out[k] = {"ratio": r, "tolerance": tol, "held": bool(np.isfinite(r) and abs(r - 1) <= tol)}
    ok = [p99_short_ok(s["quantiles"]["short"]["p99"]) for s in stats["cells"].values()]
    share = sum(ok) / len(ok) if ok else float("nan")
    out["p99_short"] = {"cells_ok": int(sum(ok)), "cells": len(ok), "share": share, "required_share": CELL_SHARE,
                        "held": bool(ok) and share >= CELL_SHARE}
    out["held"] = all(v["held"] for v in out.values())
    return out


def _r(x: float) -> str:
    return "–" if np.isnan(x) else ("inf" if np.isinf(x) else f"{x:.2f}")


def _ci(d: dict) -> str:
    return f"{_r(d['ratio'])} [{_r(d['lo'])}, {_r(d['hi'])}]"


def _n(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def section(stats: dict) -> list[str]:
    """The report's section "Stalls" (markdown lines) from `stall_stats`."""
    if not stats["cells"]:
        return []
    pct = int(round(100 * stats["ci"]))
    lines = ["## Stalls", "",
             f"Per flow cell: the flows slowed more than 10x and 30x summed over its {stats['seeds']} seeds (FCT "
             "slowdown; flows started after the warm-up, as in the pooled tail), and lost SYNs and retransmission "
             "timeouts per run (since t = 0, as each run's report counts them). Cells read `ours / ns-3 (ours "
             f"over ns-3 [{pct} % interval])`: a paired bootstrap over seeds ({stats['n_resamples']} resamples of "
             f"the seed indices, RNG seed {stats['rng_seed']}; counts summed, quantiles pooled over the drawn "
             "seeds; 0 / 0 reads 1, x / 0 inf; in results.json inf is null). p99 < 100 KB is the pooled p99 "
             "slowdown of short flows; beside it ns-3's own odd over even seeds.", "",
             "| cell | > 10x | > 30x | lost SYNs per run | timeouts per run | p99 < 100 KB | ns-3 odd / even | p99 test |",
             "|---|---|---|---|---|---|---:|---|"]

    def count(d, per_run=False):
        a, b = (d["ours_per_run"], d["ns3_per_run"]) if per_run else (d["ours"], d["ns3"])
        return f"{_n(a)} / {_n(b)} ({_ci(d)})"

    for name, s in stats["cells"].items():
        k, p99 = s["counts"], s["quantiles"]["short"]["p99"]
        verdict = ("within" if np.isfinite(p99["ratio"]) and abs(p99["ratio"] - 1) <= P99_TOL
                   else "interval reaches" if p99_short_ok(p99) else "✗")
        lines.append(f"| {name} | {count(k['slow_10x'])} | {count(k['slow_30x'])} | {count(k['syn_drops'], True)} "
                     f"| {count(k['rto_count'], True)} | {_n(p99['ours']) if np.isfinite(p99['ours']) else '–'} / "
                     f"{_n(p99['ns3']) if np.isfinite(p99['ns3']) else '–'} ({_ci(p99)}) "
                     f"| {_r(s['ns3_odd_even_p99_short'])} | {verdict} |")
    g, acc = stats["grid"]["counts"], stats["acceptance"]
    lines += ["", f"**Grid ({stats['grid']['cells']} flow cells, seeds drawn jointly):** > 10x {count(g['slow_10x'])}; "
              f"> 30x {count(g['slow_30x'])}; lost SYNs per run {count(g['syn_drops'], True)}; "
              f"timeouts per run {count(g['rto_count'], True)}.", ""]
    words = {"slow_10x": "flows > 10x", "slow_30x": "flows > 30x", "syn_drops": "lost SYNs per run"}
    parts = [f"{words[k]} {acc[k]['ratio'] - 1:+.0%} of ns-3's (tolerance {acc[k]['tolerance']:.0%}): "
             f"{'held' if acc[k]['held'] else 'not held'}" if np.isfinite(acc[k]["ratio"]) else
             f"{words[k]} ratio {_r(acc[k]['ratio'])}: not held" for k in COUNT_TOL]
    p = acc["p99_short"]
    parts.append(f"short-flow p99 within {P99_TOL:.0%} or its interval reaching into {P99_BAND[0]:g}-{P99_BAND[1]:g} "
                 f"in {p['cells_ok']} of {p['cells']} cells ({p['share']:.0%}; required {CELL_SHARE:.0%}): "
                 f"{'held' if p['held'] else 'not held'}")
    lines += [f"**Stall targets: {'held' if acc['held'] else 'not held'}.** " + "; ".join(parts) + ".", ""]
    lines += ["Pooled slowdown percentiles per flow size, `ours / ns-3 (ratio [interval])`, flows: how many each "
              "simulator finished after the warm-up.", "",
              "| cell | bucket | flows | " + " | ".join(f"p{q}" for q in QUANTILES) + " |",
              "|---|---|---|" + "---|" * len(QUANTILES)]
    labels = {"short": "< 100 KB", "medium": "100 KB - 1 MB", "long": "> 1 MB"}
    for name, s in stats["cells"].items():
        for b, _, _ in mx.SIZE_BUCKETS:
            qd = s["quantiles"][b]
            cols = [f"{_n(qd[f'p{q}']['ours'])} / {_n(qd[f'p{q}']['ns3'])} ({_ci(qd[f'p{q}'])})"
                    if qd["flows_ours"] and qd["flows_ns3"] else "–" for q in QUANTILES]
            lines.append(f"| {name} | {labels.get(b, b)} | {qd['flows_ours']} / {qd['flows_ns3']} | "
                         + " | ".join(cols) + " |")
    return lines + [""]
