"""The reward analysis's judgement: the operator's dominance verdict, rank agreement, and
the exact decomposition of a reward into its parts (results/reward_analysis)."""
import numpy as np
import pytest

from rlbm_jax.cli import reward_analysis as ra
from rlbm_jax.env import formulations


def _cell(p99, p50, goodput):
    return {"p99_short": p99, "p50_long": p50, "goodput_bps": goodput}


def test_dominance_needs_no_worse_everywhere_and_better_somewhere():
    base = _cell(10.0, 1.5, 9e6)
    assert ra.dominates(_cell(9.0, 1.5, 9e6), base)  # shorter tail, the rest equal
    assert ra.dominates(_cell(10.1, 1.5, 9.2e6), base)  # within 2 % on the tail, 2 % more goodput
    assert not ra.dominates(_cell(9.0, 1.6, 9e6), base)  # long flows 7 % slower
    assert not ra.dominates(_cell(5.0, 1.2, 8.9e6), base)  # 1.1 % less goodput: the throttling trade
    assert not ra.dominates(_cell(10.0, 1.5, 9e6), base)  # equal is not better
    assert not ra.dominates(_cell(np.nan, 1.0, 9.9e6), base)  # no short flow: no verdict
    assert ra.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert ra.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert ra.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)


def _out(rewards_by_run, drops, rto, syn):
    """Fake simulation output of 2 cells x 3 seeds: (rewards [c, s, R], report)."""
    out = {}
    for run, base in rewards_by_run.items():
        rew = np.zeros((2, 3, len(formulations.REWARDS)), np.float32)
        names = list(formulations.REWARDS)
        for i, k in enumerate(names):
            rew[..., i] = base
        pen = formulations.REWARDS["penalties"]
        n, cap = 600, 100
        rew[..., names.index("penalties")] = (base - pen.drop_weight * drops[run] / cap / n
                                              - pen.rto_weight * rto[run] / n - pen.syn_weight * syn[run] / n)
        rep = {"drops_c0": np.full((2, 3), drops[run] / 2), "drops_c1": np.full((2, 3), drops[run] / 2),
               "rto_count": np.full((2, 3), rto[run]), "syn_drops": np.full((2, 3), syn[run])}
        out[run] = (rew, rep)
    return out


def test_scores_rebuild_the_penalties_reward_from_its_parts_and_count_agreement():
    drops, rto, syn = {"a": 600.0, "b": 0.0}, {"a": 0.0, "b": 60.0}, {"a": 0.0, "b": 0.0}
    out = _out({"a": 0.50, "b": 0.45}, drops, rto, syn)
    scores = ra.score_arrays(out, 600, 100)
    # flows-accrued with 1 x drops: 0.50 - 600 / 100 / 600 = 0.49 for a
    np.testing.assert_allclose(scores["flows-accrued - 1 x drops"]["a"], 0.49, rtol=1e-6)
    np.testing.assert_allclose(scores["flows-accrued - 0.1 x timeouts"]["b"], 0.45 - 0.1 * 60 / 600, rtol=1e-6)
    grid = [("cubic", 100, 0.5), ("cubic", 100, 0.8)]
    per_cell = [dict(policy=p, tcp=t, buffer_per_class_pkts=n, load=ld, **c) for (t, n, ld) in grid
                for p, c in (("a", _cell(8.0, 1.3, 9e6)), ("b", _cell(10.0, 1.3, 9e6)))]  # a serves flows better
    summary, pairs = ra.analyse(grid, [1, 2, 3], per_cell, scores)
    assert pairs == 2 and summary["flows"]["agreement"] == 1.0
    assert summary["flows-accrued - 1 x drops"]["agreement"] == 1.0  # 0.49 > 0.45 still
    # a reward that ranks b first disagrees on every pair
    flipped = dict(scores, backwards={"a": -scores["flows"]["a"], "b": -scores["flows"]["b"]})
    assert ra.analyse(grid, [1, 2, 3], per_cell, flipped)[0]["backwards"]["agreement"] == 0.0
    # a `penalties` column that does not add up is refused
    bad = dict(out, a=(out["a"][0].copy(), out["a"][1]))
    bad["a"][0][..., list(formulations.REWARDS).index("penalties")] += 0.01
    with pytest.raises(AssertionError):
        ra.score_arrays(bad, 600, 100)
