"""The sharing check (scripts/sharing.py): the hand rule's thresholds, and the separation and
ranking it reports computed right on runs whose answer is known."""
import jax.numpy as jnp
import numpy as np

from rlbm_jax import scenarios
from rlbm_jax.cli import sharing
from rlbm_jax.studies import sharing as sharing_study
from rlbm_jax.env import backends, formulations, make_params
from rlbm_jax.env import metrics as mx
from rlbm_jax.env.switch import buffer


def _view(q):
    q = jnp.asarray(q, jnp.int32)
    ones = jnp.ones(q.shape, jnp.float32)
    return buffer.BufferView(queue_pkts=q, occupancy_pkts=jnp.sum(q), drain_norm=ones, rl_alpha=ones,
                             rl_size_pkts=ones)


def test_busy_bdp_gives_a_class_the_buffer_alone_and_its_bdps_beside_a_busy_class():
    p = make_params(**scenarios.sharing(policy="busy-bdp", alpha=(sharing_study.FREE, 0.25)))
    cap, bdp = int(p.buffer_pkts), float(p.bdp_pkts)
    alone = np.asarray(buffer.thresholds(_view([0, 40]), p))
    assert alone[1] == cap  # class 0 idle: class 1 may fill the buffer
    beside = np.asarray(buffer.thresholds(_view([3, 40]), p))
    np.testing.assert_allclose(beside[1], 0.25 * bdp, rtol=1e-6)
    assert beside[0] == cap  # class 0's alpha is the whole buffer, busy class 1 or not
    # the shared buffer still bounds both: admission takes no more than B - Q
    adm = buffer.admit(jnp.asarray([500, 0]), jnp.asarray([3, 40]), jnp.asarray(beside), cap - 43)
    assert int(adm[0]) == cap - 43
    # the backends that lack it refuse it by name (the JAX tick runs it)
    for b in ("native", "fluid"):
        assert "policy=busy-bdp" in backends.refusal(b, p)
    assert backends.refusal("jax", p) is None


def _fake(means_by_run, seeds=6, noise=0.01, p99=None, seed=0):
    """`simulate`'s output for one preset: every reward = the run's mean + noise, one finished
    short flow per seed with the slowdown given (p99 of one flow is that flow)."""
    rng = np.random.default_rng(seed)
    runs, R = len(means_by_run), len(formulations.REWARDS)
    rew = np.asarray(means_by_run)[:, None, None] + noise * rng.standard_normal((runs, seeds, R))
    log = np.zeros((runs, seeds, 4, len(mx.LOG_FIELDS)), np.float32)
    log[:, :, 0, 0] = 10_000.0
    log[:, :, 0, 3] = (np.asarray(p99)[:, None] if p99 is not None else 2.0) + rng.uniform(0, 0.01, (runs, seeds))
    count = np.ones((runs, seeds), np.int32)
    opened = np.full((runs, seeds, 2, 2), np.nan, np.float32)
    rep = {k: np.full((runs, seeds), 1.0) for k in ("goodput_bps", "queue_p99_pkts", "drop_rate", "rto_count",
                                                   "syn_drops", "flows_completed", "flows_refused")}
    return (rew, rep, log, count, opened)


def test_separation_finds_the_pairs_apart_and_not_the_ties_among_hundreds_of_pairs():
    n = len(sharing.baselines())
    means = np.zeros(n)
    means[0] = 1.0  # one baseline far above the rest, which tie (n (n - 1) / 2 pairs in all)
    seeds = list(range(6))
    names = [b[0] for b in sharing.baselines()]
    for seed in range(3):  # (a bare 2-s.e. rule would call about a tenth of the ties apart)
        out = {"sharing": _fake(means, seed=seed)}
        sep = sharing.separation(out, seeds)["sharing"]["reward"]
        assert len(sep) == n - 1 and all(a == names[0] for a, *_ in sep)
        assert all(d > 0.9 and se < 0.05 for _, _, d, se, _ in sep)


def test_ranking_agrees_when_the_reward_orders_as_the_operator_and_disagrees_when_reversed():
    n = len(sharing.baselines())
    p99 = np.linspace(2.0, 20.0, n)  # baseline i serves short flows worse as i grows
    seeds = list(range(6))
    for sign in (+1, -1):
        out = {"sharing": _fake(-sign * p99 / 10, p99=p99)}
        _, per_policy = sharing.tables(out, seeds)
        r = sharing.ranking(per_policy)["sharing"][sharing.ADOPTED]
        assert r["pairs"] > 0
        assert r["tau_p99_short"] == sign * 1.0 and r["agreement"] == (1.0 if sign > 0 else 0.0)
